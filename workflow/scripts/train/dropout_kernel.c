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
#include <stdlib.h>
#include <string.h>
#include <math.h>

/* A build may fix the ISA instead (CC="cc -march=x86-64-v3 -DCLONES= -DCLONES_FMA=": the AVX2 code
   alone, as an AVX2-only CPU runs it; tests/integration/test_kernel_isa.py, bench.glue_runs --isa). */
#ifndef CLONES
#if defined(__x86_64__) && defined(__GNUC__)
#define CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define CLONES
#endif
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

/* f rounded to the nearest bf16 (ties to even; NaN stays NaN, quiet), as float bits whose low 16 are zero:
   32-bit lanes throughout, so a vectorised loop rounds without narrowing to 16 bits and widening back. */
static inline uint32_t rounded_bits(float f) {
    uint32_t u = bits_of(f);
    uint32_t nan = 0u - (uint32_t)((u & 0x7fffffffu) > 0x7f800000u);
    return ((u + 0x7fffu + ((u >> 16) & 1u)) & ~nan & 0xffff0000u) | ((u | 0x00400000u) & nan & 0xffff0000u);
}

static inline uint16_t round_bf16(float f) { return (uint16_t)(rounded_bits(f) >> 16); }

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

/* exp of x <= 0 for the attention's softmax (below): the Cephes single-
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

/* Self-attention of packed sequences in one call per layer, forward and
   backward (cpuddp's encoder, encoder/attention.py): no padded layout, not
   even for the scores, and no per-length batched matmuls from Python.

   q [query rows, heads x size], k and v [tokens, heads x size] are the
   projections' rows as they are, bf16 or fp32 (one entry point each, the
   same code); sequence s has keys k_off[s] ..
   k_off[s + 1] - 1 and queries q_off[s] .. q_off[s + 1] - 1 (every token, or
   its first token alone). Per sequence and head, in float: scores = q k^T x
   scaling, probs = softmax, kept into the values with the hash dropout,
   out = kept v, rounded once to bf16 there. probs are kept in the rows' type for backward,
   sequence s's [heads, queries, keys] block at p_off[s]; element e of that
   flat buffer is dropped by the hash of (seed, e), as in dropout_bf16 and dropout_fp32, so
   the result is the same however the sequences are cut into calls.

   Each (sequence, head) copies its keys and values to float scratch once
   (keys transposed), so the inner loops run over 16-float vectors in L1;
   its products (scores, context, and in backward the gradients of the
   probs, q, k and v) are each one call of `mac`, which sums blocks of 4
   rows x 4 vectors in registers. Multiplies and adds are fused where the
   clone has FMA, so bits may differ between clones (CPU kinds), never
   between runs on one. */

typedef float vec __attribute__((vector_size(64)));
/* Helpers inlined into each clone, so that they are compiled for its ISA too. */
#define INLINE inline __attribute__((always_inline))

#pragma GCC push_options
#pragma GCC optimize("fp-contract=fast")
/* ISA-level clones (AVX-512 or AVX2, each with FMA), dispatched on the CPU's
   features, from GCC 12; older GCC and clang get the ISA clones above. */
#ifndef CLONES_FMA
#define ISA_AT_RUN_TIME /* else the build's -march fixed it (see CLONES) */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
#define CLONES_FMA __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define CLONES_FMA CLONES
#endif
#endif

static INLINE float bf16_value(uint16_t x) { return float_of((uint32_t)x << 16); }

/* The attention's tensors are bf16 or fp32 (`fp32`, a constant in each entry point, so every branch on it
   folds away where the always-inlined bodies below are compiled): element i as a float, and x stored as
   element i (rounded to nearest even in bf16). */
static INLINE float element(const void *p, int64_t i, const int fp32) {
    return fp32 ? ((const float *)p)[i] : bf16_value(((const uint16_t *)p)[i]);
}

static INLINE void put(void *p, int64_t i, float x, const int fp32) {
    if (fp32)
        ((float *)p)[i] = x;
    else
        ((uint16_t *)p)[i] = round_bf16(x);
}

static INLINE int64_t chunks_of(int64_t n) { return (n + LANES - 1) / LANES; }

static INLINE int64_t longest(const int64_t *offsets, int64_t first, int64_t count) {
    int64_t most = 1;
    for (int64_t s = first; s < first + count; s++)
        most = offsets[s + 1] - offsets[s] > most ? offsets[s + 1] - offsets[s] : most;
    return most;
}

static INLINE vec *scratch(int64_t vectors) {
    return (vec *)aligned_alloc(64, (size_t)(vectors > 0 ? vectors : 1) * sizeof(vec));
}

/* Asks for the lines of rows x size elements from element `first` (stride width) to be brought into L2,
   for writing or reading: the next head's rows while this head computes. A head's rows are a line each of
   [tokens, hidden] tensors a matmul wrote past L2, and read on demand each line stalled for its latency. */
static INLINE void prefetch_rows(const void *p, int64_t first, int64_t rows, int64_t width, int64_t size,
                                 const int fp32, const int write) {
    int64_t bytes = fp32 ? 4 : 2;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t b = 0; b < size * bytes; b += 64) {
            const char *at = (const char *)p + (first + r * width) * bytes + b;
            if (write)
                __builtin_prefetch(at, 1, 2);
            else
                __builtin_prefetch(at, 0, 2);
        }
}

/* rows x size elements from element `first` (stride width) -> rows x chunks_of(size) vectors, zero-padded. */
static INLINE void rows_to_float(const void *src, int64_t first, int64_t rows, int64_t width, int64_t size,
                                 vec *dst, const int fp32) {
    int64_t padded = chunks_of(size) * LANES;
    float *d = (float *)dst;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < padded; c++)
            d[r * padded + c] = c < size ? element(src, first + r * width + c, fp32) : 0.0f;
}

/* rows x size elements from element `first` (stride width) -> size x chunks_of(rows) vectors (transposed),
   zero-padded. */
static INLINE void columns_to_float(const void *src, int64_t first, int64_t rows, int64_t width, int64_t size,
                                    vec *dst, const int fp32) {
    int64_t padded = chunks_of(rows) * LANES;
    float *d = (float *)dst;
    for (int64_t c = 0; c < size; c++)
        for (int64_t r = 0; r < padded; r++)
            d[c * padded + r] = r < rows ? element(src, first + r * width + c, fp32) : 0.0f;
}

/* The products of the attention, all one shape: out[r][c] = sum over t of
   w[r x rs + t x ts] x rows[t x rstride + c], for `count` output rows of
   `cols` vectors. A block of up to 4 rows x 4 vectors is summed in
   registers: each vector of `rows` loaded once for the block's rows and
   each weight broadcast once for its vectors, and 16 independent chains
   of fused multiply-adds (a chain's latency would otherwise stall), where
   a row at a time loaded every vector once per row and ran 2-4 chains.
   Each output is one chain over t in order, so its rounding does not
   depend on the block it fell in. AVX-512 takes 4 x 4 blocks; AVX2 and
   plain x86-64, mac_block_halves. */
static INLINE void mac_block(const float *w, int64_t rs, int64_t ts, int64_t terms, const vec *rows,
                             int64_t rstride, vec *out, int64_t ostride, const int R, const int C) {
    vec acc[4][4] = {{{0}}};
    for (int64_t t = 0; t < terms; t++) {
        const vec *x = rows + t * rstride;
        const float *wt = w + t * ts;
        for (int r = 0; r < R; r++) {
            float b = wt[r * rs];
            for (int c = 0; c < C; c++) acc[r][c] += b * x[c];
        }
    }
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) out[r * ostride + c] = acc[r][c];
}

/* mac_block where a vector is wider than the ISA's registers: GCC kept a
   block of 16-float vectors on the stack (each multiply-add a load and a
   store, the weight's broadcast built lane by lane: AVX2 ran the attention
   9-19x slower than AVX-512). Here up to 2 rows x 2 vectors, as 8-float
   halves, which GCC keeps in AVX2's 16 registers (8 accumulators); every
   output the same chain as mac_block's, so the same bits. */
typedef float half __attribute__((vector_size(32)));
static INLINE void mac_block_halves(const float *w, int64_t rs, int64_t ts, int64_t terms, const vec *rows,
                                    int64_t rstride, vec *out, int64_t ostride, const int R, const int C) {
    half acc[2][4] = {{{0}}};
    for (int64_t t = 0; t < terms; t++) {
        const half *x = (const half *)(rows + t * rstride);
        const float *wt = w + t * ts;
        for (int r = 0; r < R; r++) {
            float b = wt[r * rs];
            for (int h = 0; h < 2 * C; h++) acc[r][h] += b * x[h];
        }
    }
    for (int r = 0; r < R; r++)
        for (int h = 0; h < 2 * C; h++) ((half *)(out + r * ostride))[h] = acc[r][h];
}

#define MAC_CASE(R, C) \
    case (R) * 8 + (C): mac_block(w0, rs, ts, terms, rows0, rstride, out0, ostride, R, C); break;
#define MAC_HALVES_CASE(R, C) \
    case (R) * 8 + (C): mac_block_halves(w0, rs, ts, terms, rows0, rstride, out0, ostride, R, C); break;

/* One function (a clone per ISA, called by the attention's clones), not
   inlined into every call: its 16 block shapes compile once. */
CLONES_FMA static void mac(const float *w, int64_t rs, int64_t ts, int64_t terms, int64_t count, const vec *rows,
                           int64_t rstride, int64_t cols, vec *out, int64_t ostride) {
    /* The clone that runs is the widest the CPU has, so the CPU says whether it is AVX-512's,
       unless the build fixed the ISA. Either way each output sums its terms in the same order. */
#ifdef ISA_AT_RUN_TIME
    const int wide = __builtin_cpu_supports("avx512f");
#elif defined(__AVX512F__)
    const int wide = 1;
#else
    const int wide = 0;
#endif
    int64_t most = wide ? 4 : 2;
    for (int64_t r0 = 0; r0 < count; r0 += most)
        for (int64_t c0 = 0; c0 < cols; c0 += most) {
            int64_t R = count - r0 < most ? count - r0 : most, C = cols - c0 < most ? cols - c0 : most;
            const float *w0 = w + r0 * rs;
            const vec *rows0 = rows + c0;
            vec *out0 = out + r0 * ostride + c0;
            if (wide) switch (R * 8 + C) {
                MAC_CASE(1, 1) MAC_CASE(1, 2) MAC_CASE(1, 3) MAC_CASE(1, 4)
                MAC_CASE(2, 1) MAC_CASE(2, 2) MAC_CASE(2, 3) MAC_CASE(2, 4)
                MAC_CASE(3, 1) MAC_CASE(3, 2) MAC_CASE(3, 3) MAC_CASE(3, 4)
                MAC_CASE(4, 1) MAC_CASE(4, 2) MAC_CASE(4, 3) MAC_CASE(4, 4)
            }
            else switch (R * 8 + C) {
                MAC_HALVES_CASE(1, 1) MAC_HALVES_CASE(1, 2) MAC_HALVES_CASE(2, 1) MAC_HALVES_CASE(2, 2)
            }
        }
}

/* size floats of v -> elements first .. first + size - 1 of dst. */
static INLINE void store_row(const vec *v, int64_t size, void *dst, int64_t first, const int fp32) {
    const float *f = (const float *)v;
    for (int64_t c = 0; c < size; c++) put(dst, first + c, f[c], fp32);
}

/* exp(x - max) over the n scores of a row padded to `padded`, in place (0
   at the padding); returns their sum. Lane-wise max and sum, so the loops
   vectorise without reordering the rounding of any one lane. */
static INLINE float softmax_numerators(float *r, int64_t n, int64_t padded) {
    float lane_max[LANES], lane_sum[LANES] = {0};
    for (int64_t j = n; j < padded; j++) r[j] = -3.0e38f;
    for (int k = 0; k < LANES; k++) lane_max[k] = r[k];
    for (int64_t j = LANES; j < padded; j += LANES)
        for (int k = 0; k < LANES; k++) lane_max[k] = r[j + k] > lane_max[k] ? r[j + k] : lane_max[k];
    float top = lane_max[0];
    for (int k = 1; k < LANES; k++) top = lane_max[k] > top ? lane_max[k] : top;
    for (int64_t j = 0; j < padded; j += LANES)
        for (int k = 0; k < LANES; k++) {
            float e = exp_nonpositive(r[j + k] - top);
            r[j + k] = e;
            lane_sum[k] += e;
        }
    float sum = 0.0f;
    for (int k = 0; k < LANES; k++) sum += lane_sum[k];
    return sum;
}

/* One element's dropout (a prob's kept weight): x x keep_scale where kept, else 0; rounded to bf16 as
   dropout_bf16 rounds (bf16), as dropout_fp32 computes it (fp32). The add-norm rounds whole rows instead
   (store_rounded); here rows are a sequence's keys, too short for the instruction's call to pay. */
static INLINE float kept_weight(float prob, uint32_t keep, float keep_scale, const int fp32) {
    return fp32 ? float_of(bits_of(prob * keep_scale) & keep)
                : float_of(rounded_bits(prob * keep_scale) & keep);
}

static INLINE int attention_forward(const void *restrict q, const void *restrict k, const void *restrict v,
                                     const int64_t *k_off, const int64_t *q_off, const int64_t *p_off,
                                     int64_t first_seq, int64_t seqs, int64_t heads, int64_t size, float scaling,
                                     uint64_t seed, uint32_t dropped, float keep_scale, void *restrict probs,
                                     void *restrict out, const int fp32) {
    uint32_t lo = (uint32_t)seed, hi = (uint32_t)(seed >> 32);
    int64_t width = heads * size, cols = chunks_of(size), most = longest(k_off, first_seq, seqs);
    int64_t most_q = longest(q_off, first_seq, seqs), most_chunks = chunks_of(most);
    vec *keys_t = scratch(size * most_chunks), *values = scratch(most * cols), *scores = scratch(most_q * most_chunks);
    vec *context = scratch(most_q * cols);
    vec *queries = scratch(most_q * cols);
    vec *rounded = scratch(most_chunks); /* a row of probs as kept: bf16 (uint16_t) or fp32 */
    int failed = !keys_t || !values || !scores || !context || !queries || !rounded;
    for (int64_t s = first_seq; !failed && s < first_seq + seqs; s++) {
        int64_t k0 = k_off[s], n = k_off[s + 1] - k0, q0 = q_off[s], nq = q_off[s + 1] - q0, chunks = chunks_of(n);
        int64_t stride = chunks * LANES;
        for (int64_t h = 0; h < heads; h++) {
            if (h + 1 < heads) { /* the next head's rows (a sequence's first head waits for its own, once) */
                int64_t next = (h + 1) * size;
                prefetch_rows(k, k0 * width + next, n, width, size, fp32, 0);
                prefetch_rows(v, k0 * width + next, n, width, size, fp32, 0);
                prefetch_rows(q, q0 * width + next, nq, width, size, fp32, 0);
                prefetch_rows(out, q0 * width + next, nq, width, size, fp32, 1);
            }
            columns_to_float(k, k0 * width + h * size, n, width, size, keys_t, fp32);
            rows_to_float(v, k0 * width + h * size, n, width, size, values, fp32);
            rows_to_float(q, q0 * width + h * size, nq, width, size, queries, fp32);
            for (int64_t i = 0; i < nq * cols; i++) queries[i] *= scaling;
            mac((const float *)queries, cols * LANES, 1, size, nq, keys_t, chunks, chunks, scores, chunks);
            for (int64_t i = 0; i < nq; i++) {
                float *r = (float *)(scores + i * chunks);
                float inverse = 1.0f / softmax_numerators(r, n, stride);
                int64_t at = p_off[s] + (h * nq + i) * n;
                /* over the whole padded row, whose padding is 0 and stays 0: a loop of whole vectors,
                   where one over the n scores ran its last n mod 16 (hash, rounding) one at a time */
                for (int64_t j = 0; j < stride; j++) {
                    float y;
                    if (fp32) {
                        y = r[j] * inverse;
                        ((float *)rounded)[j] = y;
                    } else {
                        uint16_t bits = round_bf16(r[j] * inverse);
                        ((uint16_t *)rounded)[j] = bits;
                        y = bf16_value(bits);
                    }
                    r[j] = kept_weight(y, keep_mask((uint32_t)(at + j), lo, hi, dropped), keep_scale, fp32);
                }
                memcpy((char *)probs + at * (fp32 ? 4 : 2), rounded, (size_t)n * (fp32 ? 4 : 2));
            }
            mac((const float *)scores, stride, 1, n, nq, values, cols, cols, context, cols);
            for (int64_t i = 0; i < nq; i++) store_row(context + i * cols, size, out, (q0 + i) * width + h * size, fp32);
        }
    }
    free(keys_t), free(values), free(scores), free(context), free(queries), free(rounded);
    return failed; /* 1: out of memory for the scratch, nothing computed */
}

/* Its backward, from the gradient of out and the probs forward kept: per
   sequence and head, row by row the dropout mask recomputed from the seed,
   the gradient of the kept weights, the softmax's backward in float and the
   gradient of q; then key by key those of k and v from the rows' kept
   weights and score gradients (each a sum in registers, every row of dq,
   dk and dv written once). */
static INLINE int attention_backward(const void *restrict grad, const void *restrict q, const void *restrict k,
                                      const void *restrict v, const void *restrict probs, const int64_t *k_off,
                                      const int64_t *q_off, const int64_t *p_off, int64_t first_seq, int64_t seqs,
                                      int64_t heads, int64_t size, float scaling, uint64_t seed, uint32_t dropped,
                                      float keep_scale, void *restrict dq, void *restrict dk, void *restrict dv,
                                      const int fp32) {
    uint32_t lo = (uint32_t)seed, hi = (uint32_t)(seed >> 32);
    int64_t width = heads * size, cols = chunks_of(size), most = longest(k_off, first_seq, seqs);
    int64_t most_q = longest(q_off, first_seq, seqs), most_chunks = chunks_of(most);
    vec *keys = scratch(most * cols), *values_t = scratch(size * most_chunks), *queries = scratch(most_q * cols);
    vec *grads = scratch(most_q * cols), *kept = scratch(most_q * most_chunks), *dscores = scratch(most_q * most_chunks);
    vec *sums = scratch((most > most_q ? most : most_q) * cols);
    /* on the heap: a row's length is the caller's, the stack is not sized for it */
    float *restrict probs_f = (float *)scratch(most_chunks);
    uint32_t *restrict keeps = (uint32_t *)scratch(most_chunks);
    int failed = !keys || !values_t || !queries || !grads || !kept || !dscores || !sums || !probs_f || !keeps;
    for (int64_t s = first_seq; !failed && s < first_seq + seqs; s++) {
        int64_t k0 = k_off[s], n = k_off[s + 1] - k0, q0 = q_off[s], nq = q_off[s + 1] - q0, chunks = chunks_of(n);
        int64_t stride = chunks * LANES;
        for (int64_t h = 0; h < heads; h++) {
            if (h + 1 < heads) {
                int64_t next = (h + 1) * size;
                prefetch_rows(k, k0 * width + next, n, width, size, fp32, 0);
                prefetch_rows(v, k0 * width + next, n, width, size, fp32, 0);
                prefetch_rows(q, q0 * width + next, nq, width, size, fp32, 0);
                prefetch_rows(grad, q0 * width + next, nq, width, size, fp32, 0);
                prefetch_rows(dq, q0 * width + next, nq, width, size, fp32, 1);
                prefetch_rows(dk, k0 * width + next, n, width, size, fp32, 1);
                prefetch_rows(dv, k0 * width + next, n, width, size, fp32, 1);
            }
            rows_to_float(k, k0 * width + h * size, n, width, size, keys, fp32);
            columns_to_float(v, k0 * width + h * size, n, width, size, values_t, fp32);
            rows_to_float(q, q0 * width + h * size, nq, width, size, queries, fp32);
            rows_to_float(grad, q0 * width + h * size, nq, width, size, grads, fp32);
            /* the gradient of the kept weights, every row: grad v^T */
            mac((const float *)grads, cols * LANES, 1, size, nq, values_t, chunks, chunks, dscores, chunks);
            for (int64_t i = 0; i < nq; i++) {
                int64_t at = p_off[s] + (h * nq + i) * n;
                float *w = (float *)(kept + i * chunks), *r = (float *)(dscores + i * chunks);
                /* the row's probs and keep masks first, in loops that vectorise */
                for (int64_t j = 0; j < stride; j++) probs_f[j] = j < n ? element(probs, at + j, fp32) : 0.0f;
                for (int64_t j = 0; j < stride; j++) keeps[j] = keep_mask((uint32_t)(at + j), lo, hi, dropped);
                for (int64_t j = 0; j < stride; j++)
                    w[j] = kept_weight(probs_f[j], keeps[j], keep_scale, fp32);
                float lane_dot[LANES] = {0};
                for (int64_t j = 0; j < stride; j += LANES)
                    for (int l = 0; l < LANES; l++) { /* y dy, dy the gradient of the probs */
                        r[j + l] = float_of(bits_of(r[j + l] * keep_scale) & keeps[j + l]) * probs_f[j + l];
                        lane_dot[l] += r[j + l];
                    }
                float dot = 0.0f;
                for (int l = 0; l < LANES; l++) dot += lane_dot[l];
                for (int64_t j = 0; j < stride; j++) r[j] = (r[j] - probs_f[j] * dot) * scaling; /* y (dy - dot) */
            }
            /* dq = dscores k; dv = kept^T grad; dk = dscores^T q (each output row written once) */
            mac((const float *)dscores, stride, 1, n, nq, keys, cols, cols, sums, cols);
            for (int64_t i = 0; i < nq; i++) store_row(sums + i * cols, size, dq, (q0 + i) * width + h * size, fp32);
            mac((const float *)kept, 1, stride, nq, n, grads, cols, cols, sums, cols);
            for (int64_t j = 0; j < n; j++) store_row(sums + j * cols, size, dv, (k0 + j) * width + h * size, fp32);
            mac((const float *)dscores, 1, stride, nq, n, queries, cols, cols, sums, cols);
            for (int64_t j = 0; j < n; j++) store_row(sums + j * cols, size, dk, (k0 + j) * width + h * size, fp32);
        }
    }
    free(keys), free(values_t), free(queries), free(grads), free(kept), free(dscores), free(sums);
    free(probs_f), free(keeps);
    return failed; /* 1: out of memory for the scratch, nothing computed */
}

/* The entry points per type (bf16: uint16_t tensors, fp32: float). */
#define ATTENTION_ENTRIES(NAME, T, FP32)                                                                             \
    CLONES_FMA int attention_forward_##NAME(const T *q, const T *k, const T *v, const int64_t *k_off,               \
                                            const int64_t *q_off, const int64_t *p_off, int64_t first_seq,          \
                                            int64_t seqs, int64_t heads, int64_t size, float scaling,               \
                                            uint64_t seed, uint32_t dropped, float keep_scale, T *probs, T *out) {  \
        return attention_forward(q, k, v, k_off, q_off, p_off, first_seq, seqs, heads, size, scaling, seed,         \
                                 dropped, keep_scale, probs, out, FP32);                                            \
    }                                                                                                               \
    CLONES_FMA int attention_backward_##NAME(const T *grad, const T *q, const T *k, const T *v, const T *probs,     \
                                             const int64_t *k_off, const int64_t *q_off, const int64_t *p_off,      \
                                             int64_t first_seq, int64_t seqs, int64_t heads, int64_t size,          \
                                             float scaling, uint64_t seed, uint32_t dropped, float keep_scale,      \
                                             T *dq, T *dk, T *dv) {                                                 \
        return attention_backward(grad, q, k, v, probs, k_off, q_off, p_off, first_seq, seqs, heads, size,          \
                                  scaling, seed, dropped, keep_scale, dq, dk, dv, FP32);                            \
    }
ATTENTION_ENTRIES(bf16, uint16_t, 0)
ATTENTION_ENTRIES(fp32, float, 1)

/* Dropout, residual add and LayerNorm of rows in one pass (cpuddp's encoder's
   post-norm sublayers, encoder/layers.py add_norm): s = bf16(dropout(a) + r),
   y = bf16((s - mean) x rstd x gamma + beta), where torch runs a dropout, an
   add and a layer norm, each a pass over memory and a dispatch. The dropout
   is dropout_bf16's, element for element (the hash of the element's index
   in a), and s is rounded as torch's bf16 add rounds, so s is bit for bit
   the unfused path's; the norm's moments are summed in float lanes (torch
   sums them in another order: y may differ from torch's by a bf16 unit).
   A row is `width` elements; calls take whole rows, and backward's sums
   for gamma and beta are kept per call (`partial`, [2, width] floats), so
   that any cut of the same calls gives the same bits. */

/* Rounding a row of floats to bf16 in place, and writing its bits: the rounding above, or on a CPU with
   AVX512_BF16 its instruction (vcvtneps2bf16 rounds to nearest even and quiets NaN as above, but flushes
   denormals to zero: a vector with a denormal is rounded as above). The bits are the same either way; the
   instruction takes a third of the add-norm's time (bench/results/2026-12-07-epyc-zen4-bf16-rounding.txt). */
/* x[0 .. n - 1] rounded in place by rounded_bits, their bits at `bits` where it is given. */
static INLINE void round_row_in_software(float *restrict x, uint16_t *restrict bits, int64_t n) {
    for (int64_t j = 0; j < n; j++) {
        uint32_t b = rounded_bits(x[j]);
        if (bits) bits[j] = (uint16_t)(b >> 16);
        x[j] = float_of(b);
    }
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12 \
    && (defined(ISA_AT_RUN_TIME) || defined(__AVX512BF16__)) /* a fixed -march without it: no AVX-512 code */
#define ROUNDING_INSTRUCTION
#include <immintrin.h>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16"), noinline))
static void round_row_by_instruction(float *restrict x, uint16_t *restrict bits, int64_t n) {
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
        __m512 v = _mm512_loadu_ps(x + j);
        if (_mm512_fpclass_ps_mask(v, 0x20)) /* 0x20: denormal */
            break;
        __m256i b = (__m256i)_mm512_cvtneps_pbh(v);
        if (bits) _mm256_storeu_si256((__m256i *)(bits + j), b);
        _mm512_storeu_si512(x + j, _mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16));
    }
    round_row_in_software(x + j, bits ? bits + j : NULL, n - j); /* the tail, and from a denormal on */
}
#endif

/* Whether rows are rounded by the instruction: where the CPU has it and the build picks the ISA at run time
   (a build for a fixed -march, as an AVX2-only CPU's, uses what that -march has). */
int rounding_instruction(void) { /* exported: the tests ask which rounding this build picked */
#if defined(ROUNDING_INSTRUCTION) && defined(ISA_AT_RUN_TIME)
    static int known = -1;
    if (known < 0) known = __builtin_cpu_supports("avx512bf16") ? 1 : 0;
    return known;
#elif defined(ROUNDING_INSTRUCTION) && defined(__AVX512BF16__)
    return 1;
#else
    return 0;
#endif
}

/* x[0 .. n - 1] as the tensor's type stores them: in bf16 rounded in place (instruction: rounding_instruction()),
   with their bits at dst + first where dst is given; in fp32 as they are, copied to dst + first. */
static INLINE void store_rounded(float *restrict x, void *restrict dst, int64_t first, int64_t n,
                                 const int fp32, const int instruction) {
    if (fp32) {
        if (dst) memcpy((float *)dst + first, x, (size_t)n * sizeof(float));
        return;
    }
    uint16_t *bits = dst ? (uint16_t *)dst + first : NULL;
#ifdef ROUNDING_INSTRUCTION
    if (instruction) {
        round_row_by_instruction(x, bits, n);
        return;
    }
#endif
    (void)instruction;
    round_row_in_software(x, bits, n);
}

/* keep_mask, or all ones without a hash where nothing is dropped (p 0: the embeddings' norm, evaluation);
   the test is loop-invariant, so the compiler hoists it out of a row's loop. */
static INLINE uint32_t keep_mask_or_all(uint32_t index, uint32_t lo, uint32_t hi, uint32_t dropped) {
    return dropped ? keep_mask(index, lo, hi, dropped) : 0xffffffffu;
}

/* Lane-wise sum of x[0 .. n - 1] (any n), the lanes added in order. */
static INLINE float lane_sum(const float *x, int64_t n) {
    float lanes[LANES] = {0};
    int64_t whole = n - n % LANES;
    for (int64_t j = 0; j < whole; j += LANES)
        for (int k = 0; k < LANES; k++) lanes[k] += x[j + k];
    for (int64_t j = whole; j < n; j++) lanes[j - whole] += x[j];
    float sum = 0.0f;
    for (int k = 0; k < LANES; k++) sum += lanes[k];
    return sum;
}

static INLINE int add_norm_forward(const void *restrict a, const void *restrict r, const void *restrict gamma,
                                   const void *restrict beta, int64_t width, int64_t first, int64_t rows,
                                   uint64_t seed, uint32_t dropped, float scale, float eps, void *restrict s,
                                   void *restrict y, float *restrict mean, float *restrict rstd, const int fp32) {
    uint32_t lo = (uint32_t)seed, hi = (uint32_t)(seed >> 32);
    float *x = (float *)scratch(chunks_of(2 * width));
    if (!x) return 1;
    float *t = x + width;
    const int instruction = rounding_instruction();
    for (int64_t i = first; i < first + rows; i++) {
        int64_t row = i * width;
        uint32_t base = (uint32_t)row;
        for (int64_t j = 0; j < width; j++) t[j] = element(a, row + j, fp32) * scale;
        store_rounded(t, NULL, 0, width, fp32, instruction); /* a x scale rounded, as dropout_bf16 rounds */
        for (int64_t j = 0; j < width; j++)
            x[j] = float_of(bits_of(t[j]) & keep_mask_or_all(base + (uint32_t)j, lo, hi, dropped)) +
                   element(r, row + j, fp32);
        store_rounded(x, s, row, width, fp32, instruction);
        float m = lane_sum(x, width) / (float)width;
        for (int64_t j = 0; j < width; j++) t[j] = (x[j] - m) * (x[j] - m);
        float var = lane_sum(t, width) / (float)width;
        float rs = 1.0f / sqrtf(var + eps), shift = -m * rs;
        for (int64_t j = 0; j < width; j++)
            t[j] = (x[j] * rs + shift) * element(gamma, j, fp32) + element(beta, j, fp32);
        store_rounded(t, y, row, width, fp32, instruction);
        mean[i] = m, rstd[i] = rs;
    }
    free(x);
    return 0;
}

/* The gradients of a and r from dy, the norm's output gradient (dr is the
   norm's input gradient rounded to bf16, da its dropout: dropout_bf16 of
   dr), and this call's sums over its rows of dy x xhat and dy into
   partial[0 .. width - 1] and partial[width ..]. */
static INLINE int add_norm_backward(const void *restrict dy, const void *restrict s, const void *restrict gamma,
                                    const float *restrict mean, const float *restrict rstd, int64_t width,
                                    int64_t first, int64_t rows, uint64_t seed, uint32_t dropped, float scale,
                                    void *restrict da, void *restrict dr, float *restrict partial, const int fp32) {
    uint32_t lo = (uint32_t)seed, hi = (uint32_t)(seed >> 32);
    float *xhat = (float *)scratch(chunks_of(3 * width));
    if (!xhat) return 1;
    float *g = xhat + width, *gx = g + width;
    for (int64_t j = 0; j < 2 * width; j++) partial[j] = 0.0f;
    const int instruction = rounding_instruction();
    for (int64_t i = first; i < first + rows; i++) {
        int64_t row = i * width;
        uint32_t base = (uint32_t)row;
        float m = mean[i], rs = rstd[i];
        for (int64_t j = 0; j < width; j++) {
            float d = element(dy, row + j, fp32);
            xhat[j] = (element(s, row + j, fp32) - m) * rs;
            g[j] = d * element(gamma, j, fp32);
            gx[j] = g[j] * xhat[j];
            partial[j] += d * xhat[j];
            partial[width + j] += d;
        }
        float mean_g = lane_sum(g, width) / (float)width, mean_gx = lane_sum(gx, width) / (float)width;
        float *t = gx; /* gx is summed: t holds the row's gradient, then its dropout */
        for (int64_t j = 0; j < width; j++) t[j] = rs * (g[j] - mean_g - xhat[j] * mean_gx);
        store_rounded(t, dr, row, width, fp32, instruction);
        for (int64_t j = 0; j < width; j++) t[j] *= scale;
        store_rounded(t, NULL, 0, width, fp32, instruction); /* grad x scale rounded, as dropout_bf16 rounds */
        for (int64_t j = 0; j < width; j++)
            t[j] = float_of(bits_of(t[j]) & keep_mask_or_all(base + (uint32_t)j, lo, hi, dropped));
        store_rounded(t, da, row, width, fp32, instruction); /* bf16 values already: their bits */
    }
    free(xhat);
    return 0;
}

/* The entry points per type (bf16: uint16_t tensors, fp32: float); mean, rstd and partials are float. */
#define ADD_NORM_ENTRIES(NAME, T, FP32)                                                                              \
    CLONES_FMA int add_norm_forward_##NAME(const T *a, const T *r, const T *gamma, const T *beta, int64_t width,      \
                                           int64_t first, int64_t rows, uint64_t seed, uint32_t dropped, float scale, \
                                           float eps, T *s, T *y, float *mean, float *rstd) {                         \
        return add_norm_forward(a, r, gamma, beta, width, first, rows, seed, dropped, scale, eps, s, y, mean, rstd,   \
                                FP32);                                                                                \
    }                                                                                                                 \
    CLONES_FMA int add_norm_backward_##NAME(const T *dy, const T *s, const T *gamma, const float *mean,                \
                                            const float *rstd, int64_t width, int64_t first, int64_t rows,            \
                                            uint64_t seed, uint32_t dropped, float scale, T *da, T *dr,               \
                                            float *partial) {                                                         \
        return add_norm_backward(dy, s, gamma, mean, rstd, width, first, rows, seed, dropped, scale, da, dr, partial, \
                                 FP32);                                                                               \
    }
ADD_NORM_ENTRIES(bf16, uint16_t, 0)
ADD_NORM_ENTRIES(fp32, float, 1)

/* gamma's and beta's gradients: the `calls` partial sums ([2, width] each) added in call order, rounded to the
   type of dgamma and dbeta. */
static INLINE void add_norm_partials(const float *partials, int64_t calls, int64_t width, void *dgamma, void *dbeta,
                                     const int fp32) {
    for (int64_t j = 0; j < width; j++) {
        float sum_gamma = 0.0f, sum_beta = 0.0f;
        for (int64_t c = 0; c < calls; c++) {
            sum_gamma += partials[c * 2 * width + j];
            sum_beta += partials[c * 2 * width + width + j];
        }
        put(dgamma, j, sum_gamma, fp32), put(dbeta, j, sum_beta, fp32);
    }
}

void add_norm_partials_bf16(const float *partials, int64_t calls, int64_t width, uint16_t *dgamma, uint16_t *dbeta) {
    add_norm_partials(partials, calls, width, dgamma, dbeta, 0);
}

void add_norm_partials_fp32(const float *partials, int64_t calls, int64_t width, float *dgamma, float *dbeta) {
    add_norm_partials(partials, calls, width, dgamma, dbeta, 1);
}

/* Rows first .. first + rows - 1 in calls of `rows_per_call` (first a multiple of it) on `threads` OpenMP threads;
   backward's calls each put their partial sums at partials + call x 2 x width (add_norm_partials_* adds them). */
#define ADD_NORM_CALLS(NAME, T)                                                                                      \
    int add_norm_forward_##NAME##_calls(const T *a, const T *r, const T *gamma, const T *beta, int64_t width,        \
                                        int64_t first, int64_t rows, int64_t rows_per_call, int threads,            \
                                        uint64_t seed, uint32_t dropped, float scale, float eps, T *s, T *y,        \
                                        float *mean, float *rstd) {                                                 \
        int failed = 0;                                                                                             \
        _Pragma("omp parallel for num_threads(threads) schedule(static) reduction(| : failed)")                     \
        for (int64_t start = first; start < first + rows; start += rows_per_call)                                   \
            failed |= add_norm_forward_##NAME(a, r, gamma, beta, width, start,                                      \
                                              first + rows - start < rows_per_call ? first + rows - start           \
                                                                                   : rows_per_call,                 \
                                              seed, dropped, scale, eps, s, y, mean, rstd);                         \
        return failed;                                                                                              \
    }                                                                                                               \
    int add_norm_backward_##NAME##_calls(const T *dy, const T *s, const T *gamma, const float *mean,                \
                                         const float *rstd, int64_t width, int64_t first, int64_t rows,             \
                                         int64_t rows_per_call, int threads, uint64_t seed, uint32_t dropped,       \
                                         float scale, T *da, T *dr, float *partials) {                              \
        int failed = 0;                                                                                             \
        _Pragma("omp parallel for num_threads(threads) schedule(static) reduction(| : failed)")                     \
        for (int64_t start = first; start < first + rows; start += rows_per_call)                                   \
            failed |= add_norm_backward_##NAME(dy, s, gamma, mean, rstd, width, start,                              \
                                               first + rows - start < rows_per_call ? first + rows - start          \
                                                                                    : rows_per_call,                \
                                               seed, dropped, scale, da, dr,                                        \
                                               partials + start / rows_per_call * 2 * width);                       \
        return failed;                                                                                              \
    }
ADD_NORM_CALLS(bf16, uint16_t)
ADD_NORM_CALLS(fp32, float)

#pragma GCC pop_options

/* The calls of a layer's attention (the sequences `firsts[c]` .. + `counts[c]` - 1 each) on `threads`
   threads of OpenMP: built with -fopenmp, on the runtime torch loaded (the loader gives this library
   the libgomp.so.1 already in the process; dropout_kernel.py checks that only one is mapped), so
   torch's idle workers take them at once, where Python threads waited for the core that a worker
   still spun on after torch's last parallel op. Each call is as on its own: the same bits. */
#define ATTENTION_CALLS(NAME, T)                                                                                   \
    int attention_forward_##NAME##_calls(const T *q, const T *k, const T *v, const int64_t *k_off,                  \
                                         const int64_t *q_off, const int64_t *p_off, const int64_t *firsts,         \
                                         const int64_t *counts, int64_t calls, int threads, int64_t heads,          \
                                         int64_t size, float scaling, uint64_t seed, uint32_t dropped,              \
                                         float keep_scale, T *probs, T *out) {                                      \
        int failed = 0;                                                                                             \
        _Pragma("omp parallel for num_threads(threads) schedule(static, 1) reduction(| : failed)")                  \
        for (int64_t c = 0; c < calls; c++)                                                                         \
            failed |= attention_forward_##NAME(q, k, v, k_off, q_off, p_off, firsts[c], counts[c], heads, size,     \
                                               scaling, seed, dropped, keep_scale, probs, out);                     \
        return failed;                                                                                              \
    }                                                                                                               \
    int attention_backward_##NAME##_calls(const T *grad, const T *q, const T *k, const T *v, const T *probs,        \
                                          const int64_t *k_off, const int64_t *q_off, const int64_t *p_off,         \
                                          const int64_t *firsts, const int64_t *counts, int64_t calls, int threads, \
                                          int64_t heads, int64_t size, float scaling, uint64_t seed,                \
                                          uint32_t dropped, float keep_scale, T *dq, T *dk, T *dv) {                \
        int failed = 0;                                                                                             \
        _Pragma("omp parallel for num_threads(threads) schedule(static, 1) reduction(| : failed)")                  \
        for (int64_t c = 0; c < calls; c++)                                                                         \
            failed |= attention_backward_##NAME(grad, q, k, v, probs, k_off, q_off, p_off, firsts[c], counts[c],    \
                                                heads, size, scaling, seed, dropped, keep_scale, dq, dk, dv);       \
        return failed;                                                                                              \
    }
ATTENTION_CALLS(bf16, uint16_t)
ATTENTION_CALLS(fp32, float)

/* Dropout of n elements on `threads` OpenMP threads, in pieces of `piece` elements: the mask follows
   each element's index, so any cut gives the same bits. */
void dropout_bf16_calls(const uint16_t *x, uint16_t *y, int64_t n, uint64_t seed, uint32_t dropped, float scale,
                        int64_t piece, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t start = 0; start < n; start += piece)
        dropout_bf16(x + start, y + start, n - start < piece ? n - start : piece, seed, start, dropped, scale);
}

void dropout_fp32_calls(const float *x, float *y, int64_t n, uint64_t seed, uint32_t dropped, float scale,
                        int64_t piece, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t start = 0; start < n; start += piece)
        dropout_fp32(x + start, y + start, n - start < piece ? n - start : piece, seed, start, dropped, scale);
}

