/* 2^x for x <= 0 on 16 floats by tiled_softmax.h's polynomial, for the
 * AVX-512 kernels (tiled_avx512.c, prefill_amx.c): x = n + r, n = round(x),
 * 2^r by the polynomial, 2^n by vscalefps; 0 below -126 (so never
 * subnormal), NaN for NaN. Include only where the AVX-512 intrinsics are
 * compiled (x86-64, GCC-compatible, the files' own guard). */
#ifndef FJ_CPU_EXP2_AVX512_H
#define FJ_CPU_EXP2_AVX512_H

#include <immintrin.h>

#include "tiled_softmax.h"

static inline __attribute__((always_inline, target("avx512f"))) __m512
fj_exp2_nonpositive_avx512(__m512 x)
{
    const __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-126.0f), _CMP_NLT_UQ);
    const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 r = _mm512_sub_ps(x, n);
    __m512 p = _mm512_set1_ps(FJ_EXP2_C7);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(FJ_EXP2_C6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(FJ_EXP2_C5));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(FJ_EXP2_C4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(FJ_EXP2_C3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(FJ_EXP2_C2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(FJ_EXP2_C1));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_maskz_scalef_ps(keep, p, n);
}

#endif
