/* Dropout in one pass (train/dropout_kernel.py builds and calls it;
   train.speed.dropout `kernel`).

   y = x * scale where an element is kept, 0 where it is dropped. Whether
   element i is kept comes from a counter-based hash of (seed, i): two rounds
   of a 32-bit integer mixer (Wellons' lowbias32, bijective, low bias), the
   top 16 bits compared with p x 2^16. Nothing is stored between forward and
   backward: dropout is linear, so its backward is the same call on the
   gradient with the same seed, and the mask is computed again, cheaper than
   writing it and reading it back. torch's path draws 32 or 16 random bits
   per element from its Mersenne Twister (random_), compares them into a
   mask, and multiplies by the mask forward and backward: four passes.

   p is exact to 1/65536 (0.1 -> 0.100006), as with dropout_bits 16. The mask
   depends on the element's index only, not on how the tensor is cut into
   calls (offset), so one thread or several give the same result. bf16
   products are rounded to nearest even, as torch's; NaN stays NaN.

   target_clones: AVX-512, AVX2 and plain x86-64, picked at run time. */

#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#define CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define CLONES
#endif

static inline uint32_t mix(uint32_t x) {
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

/* All ones where element `index` is kept, else 0 (branch-free, so the loops
   vectorise). */
static inline uint32_t keep_mask(uint32_t index, uint32_t lo, uint32_t hi, uint32_t dropped) {
    uint32_t h = mix(mix(index ^ lo) + hi);
    return 0u - (uint32_t)((h >> 16) >= dropped);
}

static inline uint32_t bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float float_of(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint16_t round_bf16(float f) {
    uint32_t u = bits_of(f);
    uint32_t nan = 0u - (uint32_t)((u & 0x7fffffffu) > 0x7f800000u);
    return (uint16_t)((((u + 0x7fffu + ((u >> 16) & 1u)) >> 16) & ~nan) | (((u >> 16) | 0x40u) & nan));
}

/* Elements offset .. offset + n - 1 of a tensor: x and y point at element offset. */
CLONES void dropout_bf16(const uint16_t *restrict x, uint16_t *restrict y, int64_t n, uint64_t seed,
                         int64_t offset, uint32_t dropped, float scale) {
    uint32_t lo = (uint32_t)seed, hi = (uint32_t)(seed >> 32);
    uint32_t first = (uint32_t)offset, count = (uint32_t)n; /* calls are at most CHUNK elements */
    for (uint32_t i = 0; i < count; i++) {
        uint16_t rounded = round_bf16(float_of((uint32_t)x[i] << 16) * scale);
        y[i] = (uint16_t)(rounded & keep_mask(first + i, lo, hi, dropped));
    }
}

CLONES void dropout_fp32(const float *restrict x, float *restrict y, int64_t n, uint64_t seed, int64_t offset,
                         uint32_t dropped, float scale) {
    uint32_t lo = (uint32_t)seed, hi = (uint32_t)(seed >> 32);
    uint32_t first = (uint32_t)offset, count = (uint32_t)n;
    for (uint32_t i = 0; i < count; i++)
        y[i] = float_of(bits_of(x[i] * scale) & keep_mask(first + i, lo, hi, dropped));
}

/* The attention's scale, mask, softmax and dropout in one pass per row (with
   softmax fp32): each row of n bf16 scores s, the additive fp32 mask row m:
   v = s x scaling + m, y = softmax(v) in float, rounded once to bf16 into
   probs (kept for backward), and y x keep_scale where kept, 0 where dropped,
   into out (what multiplies the values). Rows first_row .. first_row + rows
   - 1 of [batch, heads, queries, n]; the mask is [batch, mask_queries, n]
   (mask_queries 1: one row for every query). exp is the Cephes single-
   precision polynomial (within 2 ulp), written out so that it vectorises. */

#define LANES 16

static inline float exp_nonpositive(float x) {
    float clamped = x < -87.0f ? -87.0f : x;
    float t = clamped * 1.44269504088896341f + 12582912.0f; /* round to nearest, as an integer in float */
    float n = t - 12582912.0f;
    float r = clamped - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    uint32_t scale = (uint32_t)((int32_t)n + 127) << 23;
    uint32_t under = 0u - (uint32_t)(x >= -87.0f);
    return float_of(bits_of(p * float_of(scale)) & under);
}

CLONES void softmax_dropout_bf16(const uint16_t *restrict scores, const float *restrict mask, int64_t first_row,
                                 int64_t rows, int64_t n, int64_t heads, int64_t queries, int64_t mask_queries,
                                 float scaling, uint64_t seed, uint32_t dropped, float keep_scale,
                                 uint16_t *restrict probs, uint16_t *restrict out) {
    uint32_t lo = (uint32_t)seed, hi = (uint32_t)(seed >> 32);
    int64_t padded = (n + LANES - 1) / LANES * LANES;
    float v[padded];
    for (int64_t local = 0; local < rows; local++) {
        int64_t row = first_row + local;
        int64_t batch = row / (heads * queries), query = row % queries;
        const float *m = mask + (batch * mask_queries + (mask_queries == 1 ? 0 : query)) * n;
        const uint16_t *s = scores + local * n;
        float lane_max[LANES];
        for (int k = 0; k < LANES; k++) lane_max[k] = -3.0e38f;
        for (int64_t j = 0; j < padded; j++) v[j] = -3.0e38f;
        for (int64_t j = 0; j < n; j++) v[j] = float_of((uint32_t)s[j] << 16) * scaling + m[j];
        for (int64_t j = 0; j < padded; j += LANES)
            for (int k = 0; k < LANES; k++) lane_max[k] = v[j + k] > lane_max[k] ? v[j + k] : lane_max[k];
        float top = lane_max[0];
        for (int k = 1; k < LANES; k++) top = lane_max[k] > top ? lane_max[k] : top;
        float lane_sum[LANES] = {0};
        for (int64_t j = 0; j < padded; j += LANES)
            for (int k = 0; k < LANES; k++) {
                float e = exp_nonpositive(v[j + k] - top);
                v[j + k] = e;
                lane_sum[k] += e;
            }
        float sum = 0.0f;
        for (int k = 0; k < LANES; k++) sum += lane_sum[k];
        float inverse = 1.0f / sum;
        uint16_t *y = probs + local * n, *o = out + local * n;
        uint32_t base = (uint32_t)(row * n), width = (uint32_t)n;
        for (uint32_t j = 0; j < width; j++) {
            float p = v[j] * inverse;
            y[j] = round_bf16(p);
            o[j] = (uint16_t)(round_bf16(p * keep_scale) & keep_mask(base + j, lo, hi, dropped));
        }
    }
}

/* Its backward: g is the gradient of out, y the probs it kept. dy = g x
   keep_scale where kept, else 0; the scores' gradient is
   y (dy - sum(dy y)) x scaling, in float, rounded once to bf16. */
CLONES void softmax_dropout_backward_bf16(const uint16_t *restrict grad, const uint16_t *restrict probs,
                                          int64_t first_row, int64_t rows, int64_t n, float scaling, uint64_t seed,
                                          uint32_t dropped, float keep_scale, uint16_t *restrict grad_scores) {
    uint32_t lo = (uint32_t)seed, hi = (uint32_t)(seed >> 32);
    int64_t padded = (n + LANES - 1) / LANES * LANES;
    float dy[padded], y[padded];
    for (int64_t local = 0; local < rows; local++) {
        uint32_t base = (uint32_t)((first_row + local) * n), width = (uint32_t)n;
        const uint16_t *g = grad + local * n, *p = probs + local * n;
        for (int64_t j = 0; j < padded; j++) dy[j] = y[j] = 0.0f;
        for (uint32_t j = 0; j < width; j++) {
            dy[j] = float_of(bits_of(float_of((uint32_t)g[j] << 16) * keep_scale) & keep_mask(base + j, lo, hi, dropped));
            y[j] = float_of((uint32_t)p[j] << 16);
        }
        float lane_dot[LANES] = {0};
        for (int64_t j = 0; j < padded; j += LANES)
            for (int k = 0; k < LANES; k++) lane_dot[k] += dy[j + k] * y[j + k];
        float dot = 0.0f;
        for (int k = 0; k < LANES; k++) dot += lane_dot[k];
        uint16_t *out = grad_scores + local * n;
        for (int64_t j = 0; j < n; j++) out[j] = round_bf16(y[j] * (dy[j] - dot) * scaling);
    }
}
