/* The decode path's AVX-512 kernels (decode_kernels.h): K and V rows read
 * where they lie and widened to float in registers as they are loaded (f16
 * by vcvtph2ps, bf16 by a 16-bit shift), or with AVX-512 BF16 multiplied as
 * bf16 pairs by vdpbf16ps (products exact, sums in float).
 *
 * Scores: one query row against 16 keys at a time, the row's query held in
 * registers, each key's row read front to back (a sequential stream for the
 * prefetchers) into its own accumulator; the 16 accumulators are then summed
 * across their lanes together, by a transpose-and-add tree (45 shuffles and
 * adds for 16 scores, against 16 separate horizontal sums of 4 steps each).
 *
 * Values: up to 4 rows x 4 vectors (2 rows x 8, 1 x 8) of accumulators stay
 * in registers while every key of the block goes by, so each value element
 * loaded feeds up to 4 FMAs. With BF16 dot products a vector of values holds
 * 16 (key j, key j + 1) pairs of one column each, interleaved from two rows
 * (vpunpck{l,h}wd); the accumulators take that order while the block goes by
 * and are put back in column order at its end. */
#include "decode_kernels.h"

#include <stddef.h>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(FJ_NO_MULTIVERSION)

#include <immintrin.h>
#include <stdint.h>

#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))
#define AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))
#define INLINE static inline __attribute__((always_inline))

/* ---- loading 16 elements of a row as floats ------------------------------ */

AVX512 INLINE __m512 load16(const void *p, fj_dtype t, __mmask16 m)
{
    if (t == FJ_F32) return _mm512_maskz_loadu_ps(m, p);
    __m256i h = _mm256_maskz_loadu_epi16(m, p);
    if (t == FJ_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

static inline __mmask16 mask16(int valid) /* the first valid (may be <= 0 or >= 16) lanes */
{
    return valid >= 16 ? (__mmask16)0xffff : valid <= 0 ? 0 : (__mmask16)((1u << valid) - 1);
}

static inline __mmask32 mask32(int valid)
{
    return valid >= 32 ? (__mmask32)0xffffffffu : valid <= 0 ? 0 : (__mmask32)((1u << valid) - 1);
}

/* Keys ahead of the one in use whose rows are prefetched (into L2): the
 * hardware prefetchers alone left the block's first loads waiting on memory,
 * the K and V streams taking turns. Past the end of the caller's keys this
 * only touches neighbouring rows (a prefetch never faults). */
#ifndef FJ_DECODE_PREFETCH_KEYS
#define FJ_DECODE_PREFETCH_KEYS 64
#endif

INLINE void prefetch_row(const char *row, int bytes)
{
    for (int b = 0; b < bytes; b += 64) _mm_prefetch(row + b, _MM_HINT_T1);
}

static inline const char *row_at(const void *base, int64_t j, int64_t ld, int elem)
{
    return (const char *)base + j * ld * elem;
}

/* ---- lane sums of 16 accumulators ---------------------------------------- */

/* Lane i of the result: the sum of a[i]'s 16 lanes. */
AVX512 INLINE __m512 sum16(const __m512 a[16])
{
    __m512 t[8], u[4];
    for (int i = 0; i < 8; i++) /* per 128-bit lane: [a0+a2, b0+b2, a1+a3, b1+b3] */
        t[i] = _mm512_add_ps(_mm512_unpacklo_ps(a[2 * i], a[2 * i + 1]),
                             _mm512_unpackhi_ps(a[2 * i], a[2 * i + 1]));
    for (int i = 0; i < 4; i++) { /* per 128-bit lane: keys 4i..4i+3, that lane's sum */
        __m512d x = _mm512_castps_pd(t[2 * i]), y = _mm512_castps_pd(t[2 * i + 1]);
        u[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)),
                             _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
    }
    /* the four 128-bit lanes added: pairs of lanes, then pairs of pairs */
    __m512 v01 = _mm512_add_ps(_mm512_shuffle_f32x4(u[0], u[1], 0x88),
                               _mm512_shuffle_f32x4(u[0], u[1], 0xdd));
    __m512 v23 = _mm512_add_ps(_mm512_shuffle_f32x4(u[2], u[3], 0x88),
                               _mm512_shuffle_f32x4(u[2], u[3], 0xdd));
    return _mm512_add_ps(_mm512_shuffle_f32x4(v01, v23, 0x88), _mm512_shuffle_f32x4(v01, v23, 0xdd));
}

/* ---- scores, float products ----------------------------------------------- */

/* Partial dot products of one query row with 16 keys over dims [c0, c0 + 16 NC)
 * (those below head_dim), lane-summed: lane i is key i's. */
AVX512 INLINE __m512 dots16(const float *q, const char *const key[16], fj_dtype t, int elem,
                            int c0, int head_dim, const int NC)
{
    __m512 qv[8], acc[16];
    __mmask16 m[8];
    for (int c = 0; c < NC; c++) {
        qv[c] = _mm512_loadu_ps(q + c0 + 16 * c); /* padded with zeros */
        m[c] = mask16(head_dim - c0 - 16 * c);
    }
    for (int i = 0; i < 16; i++) {
        acc[i] = _mm512_mul_ps(load16(key[i] + (size_t)c0 * elem, t, m[0]), qv[0]);
        for (int c = 1; c < NC; c++)
            acc[i] = _mm512_fmadd_ps(load16(key[i] + (size_t)(c0 + 16 * c) * elem, t, m[c]), qv[c],
                                     acc[i]);
    }
    return sum16(acc);
}

AVX512 INLINE void scores_float(const float *q, int ldq, int nr, const void *k, int64_t k_ld,
                                int nk, int head_dim, float alpha, float *s, int lds, fj_dtype t)
{
    const int elem = t == FJ_F32 ? 4 : 2;
    const __m512 va = _mm512_set1_ps(alpha);
    for (int j0 = 0; j0 < nk; j0 += 16) {
        const int n = nk - j0 < 16 ? nk - j0 : 16;
        const char *key[16];
        for (int i = 0; i < 16; i++) key[i] = row_at(k, j0 + (i < n ? i : n - 1), k_ld, elem);
        for (int i = 0; i < 16; i++)
            prefetch_row(row_at(k, j0 + i + FJ_DECODE_PREFETCH_KEYS, k_ld, elem), head_dim * elem);
        for (int r = 0; r < nr; r++) {
            const float *qr = q + (size_t)r * ldq;
            __m512 sum = _mm512_setzero_ps();
            /* dims in passes of up to 128 (8 vectors of query in registers) */
            for (int c0 = 0; c0 < head_dim; c0 += 128) {
                int nc = (head_dim - c0 + 15) / 16;
                __m512 d;
                switch (nc > 8 ? 8 : nc) {
                case 1: d = dots16(qr, key, t, elem, c0, head_dim, 1); break;
                case 2: d = dots16(qr, key, t, elem, c0, head_dim, 2); break;
                case 3: d = dots16(qr, key, t, elem, c0, head_dim, 3); break;
                case 4: d = dots16(qr, key, t, elem, c0, head_dim, 4); break;
                case 5: d = dots16(qr, key, t, elem, c0, head_dim, 5); break;
                case 6: d = dots16(qr, key, t, elem, c0, head_dim, 6); break;
                case 7: d = dots16(qr, key, t, elem, c0, head_dim, 7); break;
                default: d = dots16(qr, key, t, elem, c0, head_dim, 8); break;
                }
                sum = _mm512_add_ps(sum, d);
            }
            _mm512_mask_storeu_ps(s + (size_t)r * lds + j0, mask16(n), _mm512_mul_ps(sum, va));
        }
    }
}

/* ---- values, float products ----------------------------------------------- */

/* acc rows [0, NR) x columns [c0, c0 + 16 NV) += p V over the block's keys. */
AVX512 INLINE void accumulate_tile(const float *p, int ldp, const void *v, int64_t v_ld, int nk,
                                   int head_dim, float *acc, int ldacc, fj_dtype t, int c0,
                                   int dpad, const int NR, const int NV)
{
    const int elem = t == FJ_F32 ? 4 : 2;
    __m512 a[4][8];
    __mmask16 mv[8], ma[8]; /* columns below head_dim (values), below the pad (acc) */
    for (int c = 0; c < NV; c++) {
        mv[c] = mask16(head_dim - c0 - 16 * c);
        ma[c] = mask16(dpad - c0 - 16 * c);
    }
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NV; c++)
            a[r][c] = _mm512_maskz_loadu_ps(ma[c], acc + (size_t)r * ldacc + c0 + 16 * c);
    const char *row = (const char *)v + (size_t)c0 * elem;
    const int64_t ahead = FJ_DECODE_PREFETCH_KEYS * v_ld * elem;
    for (int j = 0; j < nk; j++, row += v_ld * elem) {
        if (c0 == 0) prefetch_row(row + ahead, head_dim * elem);
        __m512 x[8];
        for (int c = 0; c < NV; c++) x[c] = load16(row + (size_t)16 * c * elem, t, mv[c]);
        for (int r = 0; r < NR; r++) {
            __m512 w = _mm512_set1_ps(p[(size_t)r * ldp + j]);
            for (int c = 0; c < NV; c++) a[r][c] = _mm512_fmadd_ps(w, x[c], a[r][c]);
        }
    }
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NV; c++)
            _mm512_mask_storeu_ps(acc + (size_t)r * ldacc + c0 + 16 * c, ma[c], a[r][c]);
}

AVX512 INLINE void accumulate_float(const float *p, int ldp, int nr, const void *v, int64_t v_ld,
                                    int nk, int head_dim, float *acc, int ldacc, fj_dtype t)
{
    const int dpad = (head_dim + FJ_DECODE_PAD - 1) / FJ_DECODE_PAD * FJ_DECODE_PAD;
    for (int r0 = 0; r0 < nr; r0 += 4) {
        const int rows = nr - r0 < 4 ? nr - r0 : 4;
        const float *pr = p + (size_t)r0 * ldp;
        float *ar = acc + (size_t)r0 * ldacc;
        const int width = rows <= 2 ? 128 : 64; /* columns per pass: 16 accumulators */
        for (int c0 = 0; c0 < dpad; c0 += width) {
            switch (rows) {
            case 1: accumulate_tile(pr, ldp, v, v_ld, nk, head_dim, ar, ldacc, t, c0, dpad, 1, 8); break;
            case 2: accumulate_tile(pr, ldp, v, v_ld, nk, head_dim, ar, ldacc, t, c0, dpad, 2, 8); break;
            case 3: accumulate_tile(pr, ldp, v, v_ld, nk, head_dim, ar, ldacc, t, c0, dpad, 3, 4); break;
            default: accumulate_tile(pr, ldp, v, v_ld, nk, head_dim, ar, ldacc, t, c0, dpad, 4, 4); break;
            }
        }
    }
}

#define FLOAT_SET(suffix, dtype)                                                                  \
    AVX512 static void scores_##suffix(const void *q, int ldq, int nr, const void *k,            \
                                       int64_t k_ld, int nk, int head_dim, float alpha, float *s, \
                                       int lds, float *scratch)                                   \
    {                                                                                             \
        (void)scratch;                                                                            \
        scores_float(q, ldq, nr, k, k_ld, nk, head_dim, alpha, s, lds, dtype);                   \
    }                                                                                             \
    AVX512 static void accumulate_##suffix(const float *p, int ldp, int nr, const void *v,       \
                                           int64_t v_ld, int nk, int head_dim, float *acc,        \
                                           int ldacc, float *scratch)                             \
    {                                                                                             \
        (void)scratch;                                                                            \
        accumulate_float(p, ldp, nr, v, v_ld, nk, head_dim, acc, ldacc, dtype);                  \
    }

FLOAT_SET(f32, FJ_F32)
FLOAT_SET(f16, FJ_F16)
FLOAT_SET(bf16, FJ_BF16)

/* ---- bf16 dot products ------------------------------------------------------ */

/* Lane i of the result: the dot product of a bf16 query row with key i over
 * dims [c0, c0 + 32 NC) below head_dim. */
AVX512_BF16 INLINE __m512 dots16_bf16(const uint16_t *q, const char *const key[16], int c0,
                                      int head_dim, const int NC)
{
    __m512bh qv[8];
    __m512 acc[16];
    __mmask32 m[8];
    for (int c = 0; c < NC; c++) {
        qv[c] = (__m512bh)_mm512_loadu_si512(q + c0 + 32 * c);
        m[c] = mask32(head_dim - c0 - 32 * c);
    }
    for (int i = 0; i < 16; i++) {
        acc[i] = _mm512_setzero_ps();
        for (int c = 0; c < NC; c++)
            acc[i] = _mm512_dpbf16_ps(
                acc[i], qv[c], (__m512bh)_mm512_maskz_loadu_epi16(m[c], key[i] + (size_t)(c0 + 32 * c) * 2));
    }
    return sum16(acc);
}

AVX512_BF16 static void scores_bf16dot(const void *q, int ldq, int nr, const void *k, int64_t k_ld,
                                       int nk, int head_dim, float alpha, float *s, int lds,
                                       float *scratch)
{
    (void)scratch;
    const __m512 va = _mm512_set1_ps(alpha);
    for (int j0 = 0; j0 < nk; j0 += 16) {
        const int n = nk - j0 < 16 ? nk - j0 : 16;
        const char *key[16];
        for (int i = 0; i < 16; i++) key[i] = row_at(k, j0 + (i < n ? i : n - 1), k_ld, 2);
        for (int i = 0; i < 16; i++)
            prefetch_row(row_at(k, j0 + i + FJ_DECODE_PREFETCH_KEYS, k_ld, 2), head_dim * 2);
        for (int r = 0; r < nr; r++) {
            const uint16_t *qr = (const uint16_t *)q + (size_t)r * ldq;
            __m512 sum = _mm512_setzero_ps();
            for (int c0 = 0; c0 < head_dim; c0 += 256) { /* passes of up to 8 vectors */
                int nc = (head_dim - c0 + 31) / 32;
                __m512 d;
                switch (nc > 8 ? 8 : nc) {
                case 1: d = dots16_bf16(qr, key, c0, head_dim, 1); break;
                case 2: d = dots16_bf16(qr, key, c0, head_dim, 2); break;
                case 3: d = dots16_bf16(qr, key, c0, head_dim, 3); break;
                case 4: d = dots16_bf16(qr, key, c0, head_dim, 4); break;
                case 5: d = dots16_bf16(qr, key, c0, head_dim, 5); break;
                case 6: d = dots16_bf16(qr, key, c0, head_dim, 6); break;
                case 7: d = dots16_bf16(qr, key, c0, head_dim, 7); break;
                default: d = dots16_bf16(qr, key, c0, head_dim, 8); break;
                }
                sum = _mm512_add_ps(sum, d);
            }
            _mm512_mask_storeu_ps(s + (size_t)r * lds + j0, mask16(n), _mm512_mul_ps(sum, va));
        }
    }
}

/* Where the pair layout keeps each column of a 32-column chunk: vpunpcklwd
 * takes columns 0-3 of each 8 (lanes 4g..4g+3 of the low vector hold columns
 * 8g..8g+3), vpunpckhwd columns 4-7. */
static const int32_t pair_lo_cols[16] = {0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27};
static const int32_t pair_hi_cols[16] = {4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31};
/* And back: column c (of 32) from lane (c / 8) * 4 + c % 4 of the low vector
   (index < 16) or of the high one (index 16 + lane). */
static const int32_t cols_from_pairs[32] = {0,  1,  2,  3,  16, 17, 18, 19, 4,  5,  6,
                                            7,  20, 21, 22, 23, 8,  9,  10, 11, 24, 25,
                                            26, 27, 12, 13, 14, 15, 28, 29, 30, 31};

/* acc rows [0, NR) x columns [c0, c0 + 32 NV) += p V, keys by pairs; pp: the
 * rows' probabilities as bf16 pairs (ldpp pairs apart, a zero pair past the
 * last key). */
AVX512_BF16 INLINE void accumulate_tile_bf16(const uint32_t *pp, int ldpp, const void *v,
                                             int64_t v_ld, int nk, int head_dim, float *acc,
                                             int ldacc, int c0, const int NR, const int NV)
{
    const __m512i lo_cols = _mm512_loadu_si512(pair_lo_cols), hi_cols = _mm512_loadu_si512(pair_hi_cols);
    __m512 lo[4][4], hi[4][4];
    __mmask32 mv[4];
    for (int c = 0; c < NV; c++) mv[c] = mask32(head_dim - c0 - 32 * c);
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NV; c++) {
            const float *a = acc + (size_t)r * ldacc + c0 + 32 * c;
            __m512 a0 = _mm512_loadu_ps(a), a1 = _mm512_loadu_ps(a + 16);
            lo[r][c] = _mm512_permutex2var_ps(a0, lo_cols, a1);
            hi[r][c] = _mm512_permutex2var_ps(a0, hi_cols, a1);
        }
    const char *row = (const char *)v + (size_t)c0 * 2;
    const int64_t step = v_ld * 2;
    for (int j = 0; j < nk; j += 2, row += 2 * step) {
        if (c0 == 0) {
            prefetch_row(row + FJ_DECODE_PREFETCH_KEYS * step, head_dim * 2);
            prefetch_row(row + (FJ_DECODE_PREFETCH_KEYS + 1) * step, head_dim * 2);
        }
        __m512i x[4], y[4];
        for (int c = 0; c < NV; c++) {
            x[c] = _mm512_maskz_loadu_epi16(mv[c], row + 64 * c);
            y[c] = j + 1 < nk ? _mm512_maskz_loadu_epi16(mv[c], row + step + 64 * c)
                              : _mm512_setzero_si512();
        }
        __m512bh l[4], h[4];
        for (int c = 0; c < NV; c++) {
            l[c] = (__m512bh)_mm512_unpacklo_epi16(x[c], y[c]);
            h[c] = (__m512bh)_mm512_unpackhi_epi16(x[c], y[c]);
        }
        for (int r = 0; r < NR; r++) {
            __m512bh w = (__m512bh)_mm512_set1_epi32((int)pp[(size_t)r * ldpp + j / 2]);
            for (int c = 0; c < NV; c++) {
                lo[r][c] = _mm512_dpbf16_ps(lo[r][c], w, l[c]);
                hi[r][c] = _mm512_dpbf16_ps(hi[r][c], w, h[c]);
            }
        }
    }
    const __m512i back0 = _mm512_loadu_si512(cols_from_pairs), back1 = _mm512_loadu_si512(cols_from_pairs + 16);
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NV; c++) {
            float *a = acc + (size_t)r * ldacc + c0 + 32 * c;
            _mm512_storeu_ps(a, _mm512_permutex2var_ps(lo[r][c], back0, hi[r][c]));
            _mm512_storeu_ps(a + 16, _mm512_permutex2var_ps(lo[r][c], back1, hi[r][c]));
        }
}

AVX512_BF16 static void accumulate_bf16dot(const float *p, int ldp, int nr, const void *v,
                                           int64_t v_ld, int nk, int head_dim, float *acc,
                                           int ldacc, float *scratch)
{
    /* The block's probabilities as bf16 pairs, rounded to nearest even. */
    uint32_t *pp = (uint32_t *)scratch;
    const int ldpp = FJ_DECODE_MAX_BLOCK / 2;
    for (int r = 0; r < nr; r++)
        for (int j = 0; j < nk; j += 32) {
            const float *x = p + (size_t)r * ldp + j;
            __m512 a = _mm512_maskz_loadu_ps(mask16(nk - j), x);
            __m512 b = _mm512_maskz_loadu_ps(mask16(nk - j - 16), x + 16);
            _mm512_storeu_si512(pp + (size_t)r * ldpp + j / 2, (__m512i)_mm512_cvtne2ps_pbh(b, a));
        }
    const int dpad = (head_dim + FJ_DECODE_PAD - 1) / FJ_DECODE_PAD * FJ_DECODE_PAD;
    for (int r0 = 0; r0 < nr; r0 += 4) {
        const int rows = nr - r0 < 4 ? nr - r0 : 4;
        const uint32_t *pr = pp + (size_t)r0 * ldpp;
        float *ar = acc + (size_t)r0 * ldacc;
        for (int c0 = 0; c0 < dpad;) {
            const int left = (dpad - c0) / 32; /* 32-column chunks still to do */
            int nv;
            if (rows <= 2 && left >= 4) {
                nv = 4;
                if (rows == 1) accumulate_tile_bf16(pr, ldpp, v, v_ld, nk, head_dim, ar, ldacc, c0, 1, 4);
                else accumulate_tile_bf16(pr, ldpp, v, v_ld, nk, head_dim, ar, ldacc, c0, 2, 4);
            } else if (left >= 2) {
                nv = 2;
                switch (rows) {
                case 1: accumulate_tile_bf16(pr, ldpp, v, v_ld, nk, head_dim, ar, ldacc, c0, 1, 2); break;
                case 2: accumulate_tile_bf16(pr, ldpp, v, v_ld, nk, head_dim, ar, ldacc, c0, 2, 2); break;
                case 3: accumulate_tile_bf16(pr, ldpp, v, v_ld, nk, head_dim, ar, ldacc, c0, 3, 2); break;
                default: accumulate_tile_bf16(pr, ldpp, v, v_ld, nk, head_dim, ar, ldacc, c0, 4, 2); break;
                }
            } else {
                nv = 1;
                switch (rows) {
                case 1: accumulate_tile_bf16(pr, ldpp, v, v_ld, nk, head_dim, ar, ldacc, c0, 1, 1); break;
                case 2: accumulate_tile_bf16(pr, ldpp, v, v_ld, nk, head_dim, ar, ldacc, c0, 2, 1); break;
                case 3: accumulate_tile_bf16(pr, ldpp, v, v_ld, nk, head_dim, ar, ldacc, c0, 3, 1); break;
                default: accumulate_tile_bf16(pr, ldpp, v, v_ld, nk, head_dim, ar, ldacc, c0, 4, 1); break;
                }
            }
            c0 += 32 * nv;
        }
    }
}

static const fj_decode_kernels sets[] = {
    {"avx512", false, scores_f32, accumulate_f32},
    {"avx512", false, scores_f16, accumulate_f16},
    {"avx512", false, scores_bf16, accumulate_bf16},
    {"avx512-bf16", true, scores_bf16dot, accumulate_bf16dot},
};

const fj_decode_kernels *fj_decode_kernels_avx512(fj_dtype dtype)
{
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
        !__builtin_cpu_supports("avx512vl") || !__builtin_cpu_supports("avx512dq"))
        return NULL;
    switch (dtype) {
    case FJ_F32: return &sets[0];
    case FJ_F16: return &sets[1];
    default: return __builtin_cpu_supports("avx512bf16") ? &sets[3] : &sets[2];
    }
}

#else

const fj_decode_kernels *fj_decode_kernels_avx512(fj_dtype dtype)
{
    (void)dtype;
    return NULL;
}

#endif
