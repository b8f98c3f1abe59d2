/* Vectorizable float math for the CPU backends: the softmax must not be a loop
 * of libm expf calls (each a function call that blocks vectorization).
 *
 * fj_expf: exp(x) by range reduction x = n ln2 + r, |r| <= ln2/2, a degree-7
 * Taylor polynomial for exp(r) evaluated by Horner, and 2^n built in the
 * exponent bits. The row kernels in vmath.c evaluate the same formula on
 * 16 floats at a time with GCC/clang vector extensions (auto-vectorization
 * of the scalar form proved unreliable), and fj_expf on the tails.
 * Accuracy (tests/test_cpu_math.c checks it on a dense sweep against double
 * exp): relative error <= 3e-7 (about 2.5 ulp) for x in [-87.3, 88.7];
 * x < -87.3 gives 0 (the true value is below float's normal range), x > 88.7
 * gives exp(88.7), NaN gives NaN.
 */
#ifndef FJ_VMATH_H
#define FJ_VMATH_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "multiversion.h"

/* Hot loops are compiled for AVX-512 and AVX2 as well as the baseline; the
 * loader picks the best the CPU has (GCC's function multiversioning; where
 * it is off, multiversion.h says why, the baseline alone). */
#if FJ_MULTIVERSION
#define FJ_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define FJ_VECTOR_CLONES
#endif

static inline float fj_expf(float x)
{
    const float log2e = 1.44269504088896341f;
    const float ln2_hi = 0.693145751953125f;     /* exact in 16 bits */
    const float ln2_lo = 1.428606765330187e-06f; /* ln2 - ln2_hi */
    const float round_magic = 12582912.0f;       /* 1.5 * 2^23: float add rounds to integer */
    /* NaN takes the lower clamp (its comparisons are false), so that the
       conversion to int below never sees NaN (undefined behaviour); the NaN
       is returned at the end */
    float xc = x > -87.3f ? (x < 88.7f ? x : 88.7f) : -87.3f;
    float t = xc * log2e + round_magic;
    float n = t - round_magic;
    float r = xc - n * ln2_hi;
    r = r - n * ln2_lo;
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    /* 2^n as two factors: n reaches 128 near the top of the range, where a
       single exponent field would overflow before p (< 1.5) brings it back */
    int32_t ni = (int32_t)n, half = ni >> 1;
    union {
        float f;
        uint32_t u;
    } a, b;
    a.u = (uint32_t)(half + 127) << 23;
    b.u = (uint32_t)(ni - half + 127) << 23;
    float y = p * a.f * b.f;
    y = x < -87.3f ? 0.0f : y;
    return x != x ? x : y;
}

/* Below this |y|, tanh(y) by its odd series (four terms: relative error
 * under 1e-11 there); above it, by exponentials. */
#define FJ_SOFTCAP_SERIES_BELOW 0.0625f

/* tanh(y) = y (1 - y^2/3 + 2 y^4/15 - 17 y^6/315 + ...), |y| < 1/16. */
static inline float fj_tanh_series(float y)
{
    float y2 = y * y;
    return y * (1.0f + y2 * (-1.0f / 3.0f + y2 * (2.0f / 15.0f + y2 * (-17.0f / 315.0f))));
}

/* The logit softcap's tanh (docs/semantics.md, "Softcap"): out * tanh(in * x)
 * with y = in * x: for |y| >= 1/16 as sign(y) (1 - e) / (1 + e), e =
 * exp(-2 |y|) by fj_expf's formula (absolute error within about 4e-7, and
 * |y| >= 1/16 makes that a relative one within about 7e-6), below by the
 * series, whose error is relative: 1 - e would cancel there, and a large cap
 * (out) would turn its rounding into a large error of a small score. Exactly
 * +-1 where e underflows (|y| > 43.6), +-out for infinite y, NaN for NaN. */
static inline float fj_softcapf(float x, float in, float out)
{
    float y = in * x;
    float a = y < 0.0f ? -y : y;
    if (a < FJ_SOFTCAP_SERIES_BELOW) return out * fj_tanh_series(y);
    float e = fj_expf(-2.0f * a);
    float t = (1.0f - e) / (1.0f + e);
    return out * (y < 0.0f ? -t : t);
}

/* x[j] = fj_softcapf(x[j], in, out) for j in [0, n). */
void fj_vsoftcap(float *x, int64_t n, float in, float out);

/* Largest of x[0..n) (n >= 1). */
float fj_vmax(const float *x, int64_t n);

/* x[j] = exp(x[j] * scale - shift) for j in [0, n); returns the sum. */
float fj_vexp_scaled_sum(float *x, int64_t n, float scale, float shift);

/* x[j] *= a for j in [0, n). */
void fj_vscale(float *x, int64_t n, float a);

/* exp(x[j]) for j in [0, n) into y (for tests and benchmarks of fj_expf). */
void fj_vexp(float *y, const float *x, int64_t n);

/* An attention sink joins a row's softmax state: sink (in the row's base:
 * natural, or base 2 with base2) is one more logit without a value row.
 * *max, *sum: the row's max and sum of exp(score - max) over the keys it
 * sees; both become the joint ones (max(max, sink), sum scaled to it plus
 * exp(sink - new max)). Returns the factor the row's accumulated output must
 * be multiplied by (exp(old max - new max)). IEEE throughout: a NaN sink,
 * max or sum makes the sum NaN; a max of -inf (every visible score -inf)
 * leaves a NaN sum NaN. */
static inline float fj_sink_join(float sink, float *max, float *sum, bool base2)
{
    const float m = *max;
    const float nm = sink <= m ? m : sink; /* NaN sink: NaN */
    const float f = base2 ? exp2f(m - nm) : expf(m - nm);
    const float g = base2 ? exp2f(sink - nm) : expf(sink - nm);
    *max = nm;
    *sum = *sum * f + g;
    return f;
}

#endif
