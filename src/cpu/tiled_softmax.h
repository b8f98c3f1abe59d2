/* The CPU tiled backend's row kernel: one online-softmax step on a row of a
 * score block, in base 2.
 *
 * The backend folds log2(e) into the sgemm's alpha, so scores arrive as
 * log2(e) * scale * q.k and the exponential is a plain 2^x of a non-positive
 * argument: no range reduction by ln 2, no upper clamp, no NaN handling, and
 * FMA in the AVX2 and AVX-512 clones: under half the time per score of a
 * general e^x step (docs/benchmarks.md, "CPU", "Block sizes and the row softmax").
 *
 * 2^x: x = n + r with n = round(x), |r| <= 1/2, 2^r by its degree-7 Taylor
 * polynomial, 2^n in the exponent bits: relative error within 2e-7 of 2^x
 * (tests/cpu/test_cpu_tiled.c checks it on a sweep). Arguments below -126
 * give 0, so no result is subnormal. */
#ifndef FJ_CPU_TILED_SOFTMAX_H
#define FJ_CPU_TILED_SOFTMAX_H

#include <stdint.h>

/* The formula's constants (also used by tiled_avx512.c): Taylor coefficients
 * of 2^r = e^(r ln 2), (ln 2)^k / k!, and 1.5 * 2^23, whose addition rounds a
 * float to an integer and leaves it in the low mantissa bits. */
#define FJ_EXP2_C7 1.5252733804059840e-05f
#define FJ_EXP2_C6 1.5403530393381606e-04f
#define FJ_EXP2_C5 1.3333558146428443e-03f
#define FJ_EXP2_C4 9.6181291076284772e-03f
#define FJ_EXP2_C3 5.5504108664821580e-02f
#define FJ_EXP2_C2 2.4022650695910071e-01f
#define FJ_EXP2_C1 6.9314718055994531e-01f
#define FJ_EXP2_ROUND_MAGIC 12582912.0f

/* x[0..n) (n >= 1): a row's base-2 scores for the next block of keys, -inf
 * for the keys the row does not see, at least one finite. *max: the row's
 * largest score so far (-inf before its first step); *sum: the sum of
 * 2^(score - *max) over its scores so far (0 before the first step). Replaces
 * x[j] with 2^(x[j] - m), m the new running max (so unseen keys get exactly
 * 0 and x is the row of P for the block), sets *max = m, updates *sum, and
 * returns 2^(old max - m): the factor the row's accumulated output must be
 * multiplied by (exactly 1 when the max did not move, 0 on the first step).
 * Masking by -inf keeps the vector loops free of per-lane conditions. */
float fj_tiled_softmax_step(float *x, int64_t n, float *max, float *sum);

/* 2^x for x <= 0, the kernel's formula on one value (0 below -126). */
float fj_tiled_exp2(float x);

#endif
