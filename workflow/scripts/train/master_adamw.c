/* One pass of AdamW over bf16 weights with fp32 masters (train/master_kernel.py
   builds and calls it; train.speed.optimizer one_pass).

   Per element: the bf16 gradient widened and scaled (gradient clipping), the
   decoupled weight decay, the moments, the update of the fp32 master, and the
   master rounded to nearest even into the bf16 weight: one read of gradient,
   master and moments, one write of master, moments and weight, where torch's
   path widens the gradients into fp32 copies, runs its fused AdamW on them,
   and copies the masters back (three passes).

   The arithmetic is torch's fused CPU AdamW (aten/src/ATen/native/cpu/
   FusedAdamKernel.cpp, adam_math for float) in float, operation for
   operation: its scalars are computed in double by the caller and rounded to
   float once, as torch does (1 - beta2 in float is not float(1 - beta2): at
   beta2 0.999 they differ by 1.3e-5); exp_avg.lerp_(grad, 1 - beta1) with
   torch's two forms; exp_avg_sq * beta2 + ((1 - beta2) * g) * g; master *
   (1 - lr * wd) - (step_size * exp_avg) / (sqrt(exp_avg_sq) / sqrt(bc2) + eps).
   The loader compiles with -ffp-contract=off, so no clone fuses a multiply
   and an add on its own: every clone, CPU and compiler computes the same
   bits, as DDP's replicas must (each rank updates its own copy; on x86,
   where every clone flushes denormals alike: denormals_off below). torch's
   vectorised loop fuses the lerp's multiply-add (vec::fmadd) and, as its
   x86 build compiles it, the second moment's; its tail loop fuses neither,
   as here. With both fused this kernel gave torch 2.13's AVX-512 results
   bit for bit; without, the masters differ from them by up to 1e-7 and the
   moments by up to 4e-7 of each tensor's largest value (the tests allow
   1e-6: test_master_kernel.py), and no FMA unit is needed. -fno-math-errno
   lets sqrtf vectorise (exp_avg_sq is never negative).

   target_clones: the loops are compiled for AVX-512, AVX2 and plain x86-64
   and the loader picks the one this CPU has, so one build serves every node. */

#include <math.h>
#include <stdint.h>
#include <string.h>

/* Or the ISA the build fixes (-DCLONES= with -march, as dropout_kernel.c). */
#ifndef CLONES
#if defined(__x86_64__) && defined(__GNUC__)
#define CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define CLONES
#endif
#endif

static inline float widen(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Round to nearest even, as torch's float -> bfloat16 conversion. */
static inline uint16_t round_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* NaN stays NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* Denormal floats flushed to zero while an update runs (the SSE control
   register's FTZ and DAZ bits, this thread only, restored on return). A
   moment that stops receiving gradient decays (exp_avg by beta1 a step)
   into the denormal range after about 700 steps and stays there about 160
   more before it reaches 0; every operation on such a value takes a
   microcode assist, 12-28 ns an element against 1 on an AMX Xeon, and in a
   long run a few percent of the word table's moments sit in that window
   (bench/results/2026-12-07-xeon-amx-denormals.txt). Flushed, such a
   moment stops where its decay's product would be denormal (below 16 x
   1.2e-38) or at 0: its share of the update is then under 1e-30, far below
   the master's rounding, so the masters and weights are float arithmetic's
   bit for bit (tests/unit/test_optimizer_denormals.py). */
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define FLUSH_DENORMALS 0x8040u /* MXCSR flush-to-zero (bit 15) and denormals-are-zero (bit 6) */
static inline unsigned int denormals_off(void) {
    unsigned int before = _mm_getcsr();
    _mm_setcsr(before | FLUSH_DENORMALS);
    return before;
}
static inline void denormals_back(unsigned int before) { _mm_setcsr(before); }
static inline unsigned int control_bits(void) { return _mm_getcsr(); }
#else
#define FLUSH_DENORMALS 0u
static inline unsigned int control_bits(void) { return 0; }
static inline unsigned int denormals_off(void) { return 0; }
static inline void denormals_back(unsigned int before) { (void)before; }
#endif

/* Each the float of a value the caller computed in double, as torch does. */
typedef struct {
    float decay;                 /* 1 - lr * weight_decay */
    float exp_avg_weight;        /* 1 - beta1: exp_avg.lerp_(grad, 1 - beta1) */
    float beta2;
    float exp_avg_sq_weight;     /* 1 - beta2 */
    float eps;
    float step_size;             /* lr / (1 - beta1^step) */
    float bias_correction2_sqrt; /* sqrt(1 - beta2^step) */
    float grad_scale;            /* the clip factor the gradient is multiplied by (1: none) */
} adamw_args;

/* torch's lerp: a small weight moves exp_avg toward g; a large one moves g
   back toward exp_avg (weight - 1 < 0). */
#define ADAMW_ELEMENT(GRAD)                                                     \
    float g = (GRAD) * a.grad_scale;                                            \
    float p = master[i] * a.decay;                                              \
    float m = exp_avg[i];                                                       \
    m = (small ? m : g) + lerp * (g - m);                                       \
    float v = exp_avg_sq[i] * a.beta2 + a.exp_avg_sq_weight * g * g;            \
    float denom = sqrtf(v) / a.bias_correction2_sqrt + a.eps;                   \
    p = p - a.step_size * m / denom;                                            \
    exp_avg[i] = m;                                                             \
    exp_avg_sq[i] = v;                                                          \
    master[i] = p;

#define LERP_WEIGHT                                                             \
    const int small = fabsf(a.exp_avg_weight) < 0.5f;                           \
    const float lerp = small ? a.exp_avg_weight : a.exp_avg_weight - 1.0f;

static inline void adamw_bf16_span(uint16_t *restrict weight, const uint16_t *restrict grad,
                                   float *restrict master, float *restrict exp_avg, float *restrict exp_avg_sq,
                                   int64_t n, adamw_args a) {
    LERP_WEIGHT
    for (int64_t i = 0; i < n; i++) {
        ADAMW_ELEMENT(widen(grad[i]))
        weight[i] = round_bf16(p);
    }
}

CLONES void adamw_bf16(uint16_t *restrict weight, const uint16_t *restrict grad, float *restrict master,
                       float *restrict exp_avg, float *restrict exp_avg_sq, int64_t n, adamw_args a) {
    unsigned int before = denormals_off();
    adamw_bf16_span(weight, grad, master, exp_avg, exp_avg_sq, n, a);
    denormals_back(before);
}

/* An embedding table's update, rows x width, over its active rows only. A
   row whose gradient, exp_avg and exp_avg_sq are all zero comes out of
   ADAMW_ELEMENT unchanged when decay is 1 (weight decay 0): g, m and v stay
   0, and p - step_size * 0 / eps is p; the caller marks every other row
   active (mark_rows_bf16, and the moments' non-zero rows). */
CLONES void adamw_bf16_rows(uint16_t *restrict weight, const uint16_t *restrict grad, float *restrict master,
                            float *restrict exp_avg, float *restrict exp_avg_sq, int64_t rows, int64_t width,
                            const uint8_t *restrict active, adamw_args a) {
    unsigned int before = denormals_off();
    for (int64_t r = 0; r < rows; r++) {
        if (!active[r]) continue;
        int64_t at = r * width;
        adamw_bf16_span(weight + at, grad + at, master + at, exp_avg + at, exp_avg_sq + at, width, a);
    }
    denormals_back(before);
}

/* Marks active each row of a rows x width bf16 gradient that holds a value
   other than +0 or -0 (a NaN or an infinity too, so the update spreads it as
   the full one would). A row already active is not read again. */
CLONES void mark_rows_bf16(const uint16_t *restrict grad, int64_t rows, int64_t width, uint8_t *restrict active) {
    for (int64_t r = 0; r < rows; r++) {
        if (active[r]) continue;
        const uint16_t *row = grad + r * width;
        uint16_t any = 0;
        for (int64_t j = 0; j < width; j++) any |= row[j] & 0x7fffu;
        active[r] = any != 0;
    }
}

/* An fp32 parameter (the head), its own master. */
CLONES void adamw_fp32(const float *restrict grad, float *restrict master, float *restrict exp_avg,
                       float *restrict exp_avg_sq, int64_t n, adamw_args a) {
    unsigned int before = denormals_off();
    LERP_WEIGHT
    for (int64_t i = 0; i < n; i++) {
        ADAMW_ELEMENT(grad[i])
    }
    denormals_back(before);
}

/* Sum of squares of a bf16 gradient, exact per element (a square of a
   bf16 value is exact in double) and added up in double over 16 lanes: the
   same bits for the same n and data, whatever the CPU. */
CLONES double sum_squares_bf16(const uint16_t *restrict grad, int64_t n) {
    double lanes[16] = {0.0};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        for (int k = 0; k < 16; k++) {
            double g = widen(grad[i + k]);
            lanes[k] += g * g;
        }
    }
    double total = 0.0;
    for (; i < n; i++) {
        double g = widen(grad[i]);
        total += g * g;
    }
    for (int k = 0; k < 16; k++) total += lanes[k];
    return total;
}

/* sum_squares_bf16 of the n elements from element `first` of a table of
   `width`-element rows, reading only the rows flagged in `active` (a flag
   per row of the whole table). A row left out must be all zeros (+0 or
   -0): its squares would change no lane and no tail, so the result is
   sum_squares_bf16's over the same n elements, bit for bit. The word
   embedding's gradient is non-zero in the rows a step's tokens used, a few
   hundred of ~30,000 (MasterAdamW.clip_grad_norm). */
CLONES double sum_squares_flagged_bf16(const uint16_t *restrict grad, int64_t n, int64_t first, int64_t width,
                                       const uint8_t *restrict active) {
    double lanes[16] = {0.0}, total = 0.0;
    int64_t body = n - n % 16; /* sum_squares_bf16's lanes; the rest its tail, in order */
    for (int64_t r = first / width; r * width < first + n; r++) {
        if (!active[r]) continue;
        int64_t i = r * width - first > 0 ? r * width - first : 0;
        int64_t end = r * width - first + width < n ? r * width - first + width : n;
        for (; i < end && i % 16 && i < body; i++) {
            double g = widen(grad[i]);
            lanes[i % 16] += g * g;
        }
        for (; i + 16 <= end && i + 16 <= body; i += 16)
            for (int k = 0; k < 16; k++) {
                double g = widen(grad[i + k]);
                lanes[k] += g * g;
            }
        for (; i < end; i++) {
            double g = widen(grad[i]);
            if (i < body)
                lanes[i % 16] += g * g;
            else
                total += g * g;
        }
    }
    for (int k = 0; k < 16; k++) total += lanes[k];
    return total;
}

/* A step's calls (master_kernel.py gathers them: a call per chunk of a parameter) on `threads` threads
   of OpenMP: built with -fopenmp, on the runtime torch loaded (the loader gives this library the
   libgomp.so.1 already in the process; kernel_build.py checks that only one is mapped), so torch's
   idle workers take them at once, where Python threads waited for the core a worker still spun on
   after torch's last parallel op. The calls write disjoint memory and each computes as on its own:
   the same bits in any order; a sum of squares goes to sums[c]. */
enum { ADAMW_BF16, ADAMW_FP32, ADAMW_BF16_ROWS, MARK_ROWS_BF16, SUM_SQUARES_BF16, SUM_SQUARES_FLAGGED_BF16 };

typedef struct {
    int64_t kind;
    void *p[5];
    int64_t n, width;
    uint8_t *active;
    adamw_args a;
    int64_t first; /* sum_squares_flagged_bf16's */
} call;

void run_calls(const call *calls, int64_t count, int threads, double *sums) {
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
    for (int64_t c = 0; c < count; c++) {
        const call *k = calls + c;
        switch (k->kind) {
        case ADAMW_BF16: adamw_bf16(k->p[0], k->p[1], k->p[2], k->p[3], k->p[4], k->n, k->a); break;
        case ADAMW_FP32: adamw_fp32(k->p[0], k->p[1], k->p[2], k->p[3], k->n, k->a); break;
        case ADAMW_BF16_ROWS:
            adamw_bf16_rows(k->p[0], k->p[1], k->p[2], k->p[3], k->p[4], k->n, k->width, k->active, k->a);
            break;
        case MARK_ROWS_BF16: mark_rows_bf16(k->p[0], k->n, k->width, k->active); break;
        case SUM_SQUARES_BF16: sums[c] = sum_squares_bf16(k->p[0], k->n); break;
        case SUM_SQUARES_FLAGGED_BF16:
            sums[c] = sum_squares_flagged_bf16(k->p[0], k->n, k->first, k->width, k->active);
            break;
        }
    }
}

/* torch's own AdamW (every update but this kernel's: fp32, bf16 autocast, transformers' models, bf16_master's
   three passes) meets the same denormal first moments, and runs on torch's OpenMP threads, whose control bits
   only code on those threads can set (torch.set_flush_denormal sets the caller's). With `on`, each of
   `threads` team threads (thread 0 is the caller) keeps its bits in saved[i] and flushes; with `on` 0, each
   puts saved[i] back. libgomp gives team thread i the same pool thread in every region of the same process
   thread, so these are the threads torch's next parallel op runs on (train/denormals.py; checked by
   tests/unit/test_optimizer_denormals.py). Built without OpenMP, the caller's alone (threads must be 1). */
#ifdef _OPENMP
#include <omp.h>
#define TEAM_THREAD omp_get_thread_num()
#else
#define TEAM_THREAD 0
#endif

void flush_denormals_on_threads(int threads, int on, unsigned int *saved) {
#pragma omp parallel num_threads(threads)
    {
        int i = TEAM_THREAD;
        if (on)
            saved[i] = denormals_off();
        else /* the two bits alone: a thread the flush did not reach (saved[i] 0) has them cleared */
            denormals_back((control_bits() & ~FLUSH_DENORMALS) | (saved[i] & FLUSH_DENORMALS));
    }
}

/* Each team thread's control register (the tests read what the flush left). */
void control_bits_on_threads(int threads, unsigned int *bits) {
#pragma omp parallel num_threads(threads)
    {
        bits[TEAM_THREAD] = control_bits();
    }
}
