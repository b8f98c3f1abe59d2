/* Row kernel of the CPU tiled backend (tiled_softmax.h): 8-float vectors
 * (GCC/clang vector extensions), native in the AVX2 clone and the AVX-512 one
 * alike. 16-float vectors would fill an AVX-512 register, but GCC 12 lowers
 * their comparisons in the AVX2 and baseline clones to one scalar compare
 * per lane, and on the AMD cores of the development machine a 512-bit
 * operation costs two 256-bit ones anyway. */
#include "tiled_softmax.h"

#include "multiversion.h"

#include <math.h>
#include <string.h>

/* a * b + c contracts to one FMA in the clones whose target has it (GCC's ISO
   C mode would otherwise keep them apart); clang contracts within an
   expression by default. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=fast")
#endif
/* The vector helpers are always inlined, never passed across an ABI boundary. */
#if defined(__GNUC__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

#if FJ_MULTIVERSION /* multiversion.h */
#define FJ_TILED_CLONES \
    __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define FJ_TILED_CLONES
#endif

typedef float vfloat __attribute__((vector_size(32)));
typedef int32_t vint __attribute__((vector_size(32)));
#define LANES 8
#define FJ_INLINE static inline __attribute__((always_inline))

FJ_INLINE vfloat vload(const float *p)
{
    vfloat v;
    memcpy(&v, p, sizeof v);
    return v;
}

FJ_INLINE void vstore(float *p, vfloat v) { memcpy(p, &v, sizeof v); }

FJ_INLINE vfloat splat(float x) { return (vfloat){0} + x; }

FJ_INLINE vfloat vselect(vint mask, vfloat a, vfloat b) /* mask lanes all-ones or 0 */
{
    vint ai, bi;
    memcpy(&ai, &a, sizeof ai);
    memcpy(&bi, &b, sizeof bi);
    vint r = (ai & mask) | (bi & ~mask);
    vfloat rf;
    memcpy(&rf, &r, sizeof rf);
    return rf;
}

#define C7 FJ_EXP2_C7
#define C6 FJ_EXP2_C6
#define C5 FJ_EXP2_C5
#define C4 FJ_EXP2_C4
#define C3 FJ_EXP2_C3
#define C2 FJ_EXP2_C2
#define C1 FJ_EXP2_C1
#define ROUND_MAGIC FJ_EXP2_ROUND_MAGIC

FJ_INLINE vfloat vexp2_nonpositive(vfloat x)
{
    const vfloat lo = splat(-126.0f);
    vint under = x < lo;
    x = vselect(under, lo, x);
    vfloat t = x + ROUND_MAGIC; /* n = round(x) sits in t's low mantissa bits */
    vfloat n = t - ROUND_MAGIC;
    vfloat r = x - n; /* exact */
    vfloat p = splat(C7);
    p = p * r + C6;
    p = p * r + C5;
    p = p * r + C4;
    p = p * r + C3;
    p = p * r + C2;
    p = p * r + C1;
    p = p * r + 1.0f;
    vint ti;
    memcpy(&ti, &t, sizeof ti);
    vint bits = (ti << 23) + (127 << 23); /* the magic's own bits shift out */
    vfloat two_n;
    memcpy(&two_n, &bits, sizeof two_n);
    return vselect(under, splat(0.0f), p * two_n);
}

float fj_tiled_exp2(float x)
{
    if (x != x) return x; /* NaN: (int)n below would be undefined */
    if (x < -126.0f) return 0.0f;
    float n = (x + ROUND_MAGIC) - ROUND_MAGIC;
    float r = x - n;
    float p = C7;
    p = p * r + C6;
    p = p * r + C5;
    p = p * r + C4;
    p = p * r + C3;
    p = p * r + C2;
    p = p * r + C1;
    p = p * r + 1.0f;
    return ldexpf(p, (int)n);
}

/* v with its lanes rotated by w (lane k gets lane k + w mod 8), in
 * registers: folding halves through memory would cost a store-forwarding
 * stall per step. */
#if defined(__clang__)
#define ROTATE(v, w)                                                                               \
    __builtin_shufflevector(v, v, (0 + w) % 8, (1 + w) % 8, (2 + w) % 8, (3 + w) % 8, (4 + w) % 8, \
                            (5 + w) % 8, (6 + w) % 8, (7 + w) % 8)
#else
#define ROTATE(v, w)                                                                             \
    __builtin_shuffle(v, (vint){(0 + w) % 8, (1 + w) % 8, (2 + w) % 8, (3 + w) % 8, (4 + w) % 8, \
                                (5 + w) % 8, (6 + w) % 8, (7 + w) % 8})
#endif

/* Largest of the 8 lanes, by folding. */
FJ_INLINE float hmax(vfloat v)
{
    vfloat t = ROTATE(v, 4);
    v = vselect(t > v, t, v);
    t = ROTATE(v, 2);
    v = vselect(t > v, t, v);
    t = ROTATE(v, 1);
    v = vselect(t > v, t, v);
    return v[0];
}

FJ_INLINE float hsum(vfloat v)
{
    v += ROTATE(v, 4);
    v += ROTATE(v, 2);
    v += ROTATE(v, 1);
    return v[0];
}

FJ_TILED_CLONES
float fj_tiled_softmax_step(float *x, int64_t n, float *max, float *sum)
{
    /* Two vectors per step, two accumulators: the loops are bound by the
       vector units, not by one running max or sum. */
    const int64_t full = n - n % (2 * LANES);
    float pad[2 * LANES]; /* the tail, padded with -inf (weight 0) */
    if (full < n)
        for (int k = 0; k < 2 * LANES; k++) pad[k] = full + k < n ? x[full + k] : -INFINITY;

    vfloat m0 = splat(-INFINITY), m1 = m0;
    for (int64_t j = 0; j < full; j += 2 * LANES) {
        vfloat v0 = vload(x + j), v1 = vload(x + j + LANES);
        m0 = vselect(v0 > m0, v0, m0);
        m1 = vselect(v1 > m1, v1, m1);
    }
    if (full < n) {
        vfloat v0 = vload(pad), v1 = vload(pad + LANES);
        m0 = vselect(v0 > m0, v0, m0);
        m1 = vselect(v1 > m1, v1, m1);
    }
    float m = hmax(vselect(m1 > m0, m1, m0));
    if (*max > m) m = *max;

    vfloat s0 = {0}, s1 = {0};
    for (int64_t j = 0; j < full; j += 2 * LANES) {
        vfloat e0 = vexp2_nonpositive(vload(x + j) - m);
        vfloat e1 = vexp2_nonpositive(vload(x + j + LANES) - m);
        vstore(x + j, e0);
        vstore(x + j + LANES, e1);
        s0 += e0;
        s1 += e1;
    }
    if (full < n) {
        vfloat e0 = vexp2_nonpositive(vload(pad) - m);
        vfloat e1 = vexp2_nonpositive(vload(pad + LANES) - m);
        vstore(pad, e0);
        vstore(pad + LANES, e1);
        for (int64_t k = 0; full + k < n; k++) x[full + k] = pad[k];
        s0 += e0;
        s1 += e1;
    }
    float block_sum = hsum(s0 + s1);

    float old = *max;
    float factor = old == m ? 1.0f : fj_tiled_exp2(old - m); /* -inf - m: 0 */
    *sum = *sum * factor + block_sum;
    *max = m;
    return factor;
}
