/* Row kernels on 8-float vectors (GCC/clang vector extensions: lowered to
 * AVX-512, AVX2 or SSE by the target_clones of each function). The tails
 * use the scalar fj_expf, which computes the same formula. */
#include "vmath.h"

#include <string.h>

/* The vector helpers below are static inline, never called across an ABI
 * boundary, so the compilers' note that 32-byte vector arguments change the
 * ABI without AVX does not apply (clang honours the GCC pragma too). */
#if defined(__GNUC__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

/* 8 lanes: native on AVX2, half a register on AVX-512 (the softmax is a few
 * percent of the sgemm work, so width matters less than never falling back to
 * scalar code), two SSE registers in the baseline clone. */
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

/* mask ? a : b, mask lanes all-ones or zero */
FJ_INLINE vfloat vselect(vint mask, vfloat a, vfloat b)
{
    vint ai, bi;
    memcpy(&ai, &a, sizeof ai);
    memcpy(&bi, &b, sizeof bi);
    vint r = (ai & mask) | (bi & ~mask);
    vfloat rf;
    memcpy(&rf, &r, sizeof rf);
    return rf;
}

FJ_INLINE vfloat vexp_lanes(vfloat x)
{
    const vfloat lo = splat(-87.3f), hi = splat(88.7f);
    vfloat xc = vselect(x > lo, x, lo); /* NaN lanes take lo: the int conversion */
    xc = vselect(xc < hi, xc, hi);      /* sees no NaN; the NaN is put back last */
    const vfloat magic = splat(12582912.0f);
    vfloat n = (xc * 1.44269504088896341f + magic) - magic;
    vfloat r = xc - n * 0.693145751953125f;
    r = r - n * 1.428606765330187e-06f;
    vfloat p = splat(1.0f / 5040.0f);
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    vint ni = __builtin_convertvector(n, vint);
    vint half = ni >> 1;
    vint ea = (half + 127) << 23, eb = (ni - half + 127) << 23;
    vfloat a, b;
    memcpy(&a, &ea, sizeof a);
    memcpy(&b, &eb, sizeof b);
    vfloat y = p * a * b;
    y = vselect(x < lo, splat(0.0f), y);
    return vselect(x != x, x, y);
}

FJ_VECTOR_CLONES
float fj_vmax(const float *x, int64_t n)
{
    float r = x[0];
    int64_t j = 0;
    if (n >= LANES) {
        vfloat m = vload(x);
        for (j = LANES; j + LANES <= n; j += LANES) {
            vfloat v = vload(x + j);
            m = vselect(v > m, v, m);
        }
        for (int k = 0; k < LANES; k++) r = m[k] > r ? m[k] : r;
    }
    for (; j < n; j++) r = x[j] > r ? x[j] : r;
    return r;
}

FJ_VECTOR_CLONES
float fj_vexp_scaled_sum(float *x, int64_t n, float scale, float shift)
{
    vfloat acc = {0};
    int64_t j = 0;
    for (; j + LANES <= n; j += LANES) {
        vfloat e = vexp_lanes(vload(x + j) * scale - shift);
        vstore(x + j, e);
        acc += e;
    }
    float s = 0;
    for (int k = 0; k < LANES; k++) s += acc[k];
    for (; j < n; j++) {
        float e = fj_expf(x[j] * scale - shift);
        x[j] = e;
        s += e;
    }
    return s;
}

FJ_VECTOR_CLONES
void fj_vscale(float *x, int64_t n, float a)
{
    int64_t j = 0;
    for (; j + LANES <= n; j += LANES) vstore(x + j, vload(x + j) * a);
    for (; j < n; j++) x[j] *= a;
}

FJ_VECTOR_CLONES
void fj_vexp(float *y, const float *x, int64_t n)
{
    int64_t j = 0;
    for (; j + LANES <= n; j += LANES) vstore(y + j, vexp_lanes(vload(x + j)));
    for (; j < n; j++) y[j] = fj_expf(x[j]);
}

FJ_VECTOR_CLONES
void fj_vsoftcap(float *x, int64_t n, float in, float out)
{
    const vint sign = (vint){0} + INT32_MIN;
    int64_t j = 0;
    for (; j + LANES <= n; j += LANES) {
        vfloat y = vload(x + j) * in;
        vint yi, mag_i;
        memcpy(&yi, &y, sizeof yi);
        mag_i = yi & ~sign;
        vfloat mag;
        memcpy(&mag, &mag_i, sizeof mag);
        vfloat e = vexp_lanes(mag * -2.0f);
        vfloat t = (1.0f - e) / (1.0f + e); /* >= 0, or NaN */
        vint ti;
        memcpy(&ti, &t, sizeof ti);
        ti |= yi & sign;
        /* lanes below FJ_SOFTCAP_SERIES_BELOW take the series (fj_softcapf) */
        vfloat y2 = y * y;
        vfloat series =
            y * (1.0f + y2 * (-1.0f / 3.0f + y2 * (2.0f / 15.0f + y2 * (-17.0f / 315.0f))));
        vint si, small = mag < FJ_SOFTCAP_SERIES_BELOW;
        memcpy(&si, &series, sizeof si);
        ti = (si & small) | (ti & ~small);
        memcpy(&t, &ti, sizeof t);
        vstore(x + j, t * out);
    }
    for (; j < n; j++) x[j] = fj_softcapf(x[j], in, out);
}
