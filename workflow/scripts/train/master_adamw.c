/* One pass of AdamW over bf16 weights with fp32 masters (train/master_kernel.py).

   Per element: the bf16 gradient widened and scaled (gradient clipping), the
   decoupled weight decay, the moments, the update of the fp32 master, and the
   master rounded to nearest even into the bf16 weight: one read of gradient,
   master and moments, one write of master, moments and weight, where torch's
   path widens the gradients into fp32 copies, runs its fused AdamW on them,
   and copies the masters back (three passes). The arithmetic is torch's fused
   CPU AdamW (aten/src/ATen/native/cpu/FusedAdamKernel.cpp) in float.

   target_clones: the loop is compiled for AVX-512, AVX2 and plain x86-64 and
   the loader picks the one this CPU has, so one build serves every node. */

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#define CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define CLONES
#endif

static inline float widen(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint16_t round_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* NaN stays NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

typedef struct {
    float lr, beta1, beta2, weight_decay, eps, step_size, bias_correction2_sqrt, grad_scale;
} adamw_args;

#define ADAMW_ELEMENT(GRAD)                                                     \
    float g = (GRAD) * a.grad_scale;                                            \
    float p = master[i];                                                        \
    p = p - p * (a.lr * a.weight_decay);                                        \
    float m = exp_avg[i];                                                       \
    m = m + (g - m) * (1.0f - a.beta1);                                         \
    float v = exp_avg_sq[i] * a.beta2 + g * g * (1.0f - a.beta2);               \
    float denom = sqrtf(v) / a.bias_correction2_sqrt + a.eps;                   \
    p = p - a.step_size * m / denom;                                            \
    exp_avg[i] = m;                                                             \
    exp_avg_sq[i] = v;                                                          \
    master[i] = p;

CLONES void adamw_bf16(uint16_t *weight, const uint16_t *grad, float *master, float *exp_avg,
                       float *exp_avg_sq, int64_t n, adamw_args a) {
    for (int64_t i = 0; i < n; i++) {
        ADAMW_ELEMENT(widen(grad[i]))
        weight[i] = round_bf16(p);
    }
}

CLONES void adamw_fp32(const float *grad, float *master, float *exp_avg, float *exp_avg_sq, int64_t n,
                       adamw_args a) {
    for (int64_t i = 0; i < n; i++) {
        ADAMW_ELEMENT(grad[i])
    }
}

/* Sum of squares of a bf16 gradient, in float blocks added up in double. */
CLONES double sum_squares_bf16(const uint16_t *grad, int64_t n) {
    double total = 0.0;
    for (int64_t start = 0; start < n; start += 4096) {
        int64_t end = start + 4096 < n ? start + 4096 : n;
        float block = 0.0f;
        for (int64_t i = start; i < end; i++) {
            float g = widen(grad[i]);
            block += g * g;
        }
        total += block;
    }
    return total;
}
