/* The tiled backend's AVX-512 kernels (tiled_kernels.h).
 *
 * Scores: 12 keys x 32 rows of accumulators (24 registers) while the head
 * dim goes by: per element of the head dim, the tile's two query vectors are
 * loaded once and each of the 12 keys' elements broadcast into two FMAs.
 * Values: 12 columns of the head dim x 32 rows (24 registers) while the keys
 * go by: per key, the two vectors of P loaded once and each of the 12 value
 * elements broadcast into two FMAs. Tails (fewer than 12 keys or columns left)
 * take the same loops on 8, 4, 2 and 1; the 16-lane calls, one vector
 * instead of two. K and V are read by broadcasts of one element of a row, at
 * any row stride, so nothing is packed for them (tiled.c copies each key
 * block once, to a stride that spreads the rows over L1's sets); the queries
 * are packed once per block of rows. Measured on the development machine
 * (one thread, head dim 128, blocks of 96-256 keys in cache): 195-210 GFLOP/s
 * for the scores and 185-205 for the values, against 218 for FMAs from
 * registers alone and 120-145 for OpenBLAS's sgemm pairs at the tiled path's
 * block shapes (docs/benchmarks.md, "Prefill on tiles of our own").
 *
 * Softmax: the lanes are rows, so the running max, sum and rescale factor
 * are vectors and a block's max is a vertical max down its keys.
 *
 * Queries in and outputs out go through 16 x 16 transposes in registers;
 * f16 and bf16 are widened and rounded here too (vcvtph2ps, vcvtps2ph, and
 * bf16 by shifts), bit for bit as half.h converts. */
#include "tiled_kernels.h"
#include "tiled_groups.h"

#include <stddef.h>

#include "tiled_softmax.h"

/* clang's AddressSanitizer makes these fully unrolled kernels very slow to
 * compile (as decode_avx512.c says), so those builds take the BLAS path. */
#if defined(__clang__) && defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FJ_AVX512_TILED_SKIPPED 1
#endif
#endif

#if defined(__x86_64__) && defined(__GNUC__) && !defined(FJ_NO_MULTIVERSION) && \
    !defined(FJ_AVX512_TILED_SKIPPED)

#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>

#include "exp2_avx512.h"

#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))
#define INLINE static inline __attribute__((always_inline))
#if defined(__clang__)
#define UNROLL _Pragma("clang loop unroll(full)")
#else
#define UNROLL _Pragma("GCC unroll 16")
#endif

#define L FJ_TILED_LANES
#define GROUP FJ_TILED_GROUP

/* ---- scores --------------------------------------------------------------- */

/* Keys [0, NR) of k against V vectors of the tile's lanes (V = 2: all 32;
 * V = 1: the 16 the pointers start at): st rows 0..NR-1. */
AVX512 INLINE void scores_keys(const int V, const int NR, const float *qp, int head_dim,
                               const float *k, int64_t ldk, __m512 alpha, float *st)
{
    __m512 c[2][GROUP];
    const float *kr[GROUP];
    UNROLL for (int u = 0; u < NR; u++)
    {
        UNROLL for (int h = 0; h < V; h++) c[h][u] = _mm512_setzero_ps();
        kr[u] = k + (size_t)u * ldk;
    }
    for (int d = 0; d < head_dim; d++) {
        __m512 a[2];
        UNROLL for (int h = 0; h < V; h++) a[h] = _mm512_loadu_ps(qp + (size_t)d * L + 16 * h);
        UNROLL for (int u = 0; u < NR; u++)
        {
            const __m512 b = _mm512_set1_ps(kr[u][d]);
            UNROLL for (int h = 0; h < V; h++) c[h][u] = _mm512_fmadd_ps(a[h], b, c[h][u]);
        }
    }
    UNROLL for (int u = 0; u < NR; u++)
    {
        UNROLL for (int h = 0; h < V; h++)
            _mm512_storeu_ps(st + u * L + 16 * h, _mm512_mul_ps(c[h][u], alpha));
    }
}

AVX512 INLINE void scores_any(const int V, const float *qp, int head_dim, const float *k,
                              int64_t ldk, int nk, float alpha, float *st)
{
    const __m512 a = _mm512_set1_ps(alpha);
#define STEP(NR, at) \
    scores_keys(V, NR, qp, head_dim, k + (size_t)(at)*ldk, ldk, a, st + (size_t)(at)*L)
    FJ_TILED_GROUPS(nk, STEP);
#undef STEP
}

/* Floats between the rows of a key block's copy: whole 64-byte lines, an
   odd number of them (tiled.c says why). */
static int64_t copy_ld(int head_dim)
{
    int64_t ld = (head_dim + 15) / 16 * 16;
    return ld / 16 % 2 ? ld : ld + 16;
}

static size_t query_bytes(int head_dim) { return (size_t)head_dim * L * sizeof(float); }

static size_t copy_bytes(int head_dim, int keys)
{
    return (size_t)keys * (size_t)copy_ld(head_dim) * sizeof(float);
}

AVX512 static void scores(const void *qp, int head_dim, const void *kc, int key0, int nk,
                          float alpha, float *st, int lanes)
{
    const int64_t ld = copy_ld(head_dim);
    const float *k = (const float *)kc + (size_t)key0 * ld;
    if (lanes > 16) scores_any(2, qp, head_dim, k, ld, nk, alpha, st);
    else scores_any(1, qp, head_dim, k, ld, nk, alpha, st);
}

/* ---- softmax -------------------------------------------------------------- */

AVX512 INLINE void softmax_any(const int V, float *st, int nk, const int32_t *lo, const int32_t *hi,
                               float *max, float *sum, float *factor)
{
    const __m512 ninf = _mm512_set1_ps(-__builtin_inff());
    __m512 b[2] = {ninf, ninf};
    if (lo) { /* unseen keys to -inf as the max goes down the keys */
        __m512i lov[2], hiv[2];
        UNROLL for (int h = 0; h < V; h++)
        {
            lov[h] = _mm512_loadu_si512(lo + 16 * h);
            hiv[h] = _mm512_loadu_si512(hi + 16 * h);
        }
        for (int j = 0; j < nk; j++) {
            const __m512i jv = _mm512_set1_epi32(j);
            float *x = st + (size_t)j * L;
            UNROLL for (int h = 0; h < V; h++)
            {
                const __mmask16 seen =
                    _mm512_cmple_epi32_mask(lov[h], jv) & _mm512_cmpgt_epi32_mask(hiv[h], jv);
                const __m512 y = _mm512_mask_blend_ps(seen, ninf, _mm512_loadu_ps(x + 16 * h));
                _mm512_storeu_ps(x + 16 * h, y);
                b[h] = _mm512_max_ps(b[h], y);
            }
        }
    } else {
        for (int j = 0; j < nk; j++)
            UNROLL for (int h = 0; h < V; h++) b[h] =
                _mm512_max_ps(b[h], _mm512_loadu_ps(st + (size_t)j * L + 16 * h));
    }
    /* the new max, and the one to subtract: 0 where the lane has seen no
       finite max (its P is 0 then, not NaN) */
    __m512 old[2], m[2], z[2], sv[2];
    UNROLL for (int h = 0; h < V; h++)
    {
        old[h] = _mm512_loadu_ps(max + 16 * h);
        m[h] = _mm512_max_ps(b[h], old[h]);
        z[h] = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(m[h], ninf, _CMP_EQ_OQ), m[h],
                                    _mm512_setzero_ps());
        sv[h] = _mm512_setzero_ps();
    }
    for (int j = 0; j < nk; j++) {
        float *x = st + (size_t)j * L;
        UNROLL for (int h = 0; h < V; h++)
        {
            const __m512 e =
                fj_exp2_nonpositive_avx512(_mm512_sub_ps(_mm512_loadu_ps(x + 16 * h), z[h]));
            _mm512_storeu_ps(x + 16 * h, e);
            sv[h] = _mm512_add_ps(sv[h], e);
        }
    }
    UNROLL for (int h = 0; h < V; h++)
    {
        const __m512 f = fj_exp2_nonpositive_avx512(_mm512_sub_ps(old[h], z[h]));
        _mm512_storeu_ps(factor + 16 * h, f);
        _mm512_storeu_ps(sum + 16 * h, _mm512_fmadd_ps(_mm512_loadu_ps(sum + 16 * h), f, sv[h]));
        _mm512_storeu_ps(max + 16 * h, m[h]);
    }
}

AVX512 static void softmax(float *st, int nk, const int32_t *lo, const int32_t *hi, float *max,
                           float *sum, float *factor, int lanes)
{
    if (lanes > 16) softmax_any(2, st, nk, lo, hi, max, sum, factor);
    else softmax_any(1, st, nk, lo, hi, max, sum, factor);
}

/* ---- values --------------------------------------------------------------- */

/* Columns [0, NR) of v: ot rows 0..NR-1 (V vectors of lanes) rescaled and
 * accumulated. */
AVX512 INLINE void values_cols(const int V, const int NR, const float *pt, int nk, const float *v,
                               int64_t ldv, const __m512 *f, float *ot)
{
    __m512 c[2][GROUP];
    UNROLL for (int u = 0; u < NR; u++)
    {
        UNROLL for (int h = 0; h < V; h++) c[h][u] =
            _mm512_mul_ps(_mm512_loadu_ps(ot + u * L + 16 * h), f[h]);
    }
    for (int j = 0; j < nk; j++) {
        __m512 a[2];
        UNROLL for (int h = 0; h < V; h++) a[h] = _mm512_loadu_ps(pt + (size_t)j * L + 16 * h);
        const float *vr = v + (size_t)j * ldv;
        UNROLL for (int u = 0; u < NR; u++)
        {
            const __m512 b = _mm512_set1_ps(vr[u]);
            UNROLL for (int h = 0; h < V; h++) c[h][u] = _mm512_fmadd_ps(a[h], b, c[h][u]);
        }
    }
    UNROLL for (int u = 0; u < NR; u++)
    {
        UNROLL for (int h = 0; h < V; h++) _mm512_storeu_ps(ot + u * L + 16 * h, c[h][u]);
    }
}

AVX512 INLINE void values_any(const int V, const float *pt, int nk, const float *v, int64_t ldv,
                              int head_dim, const float *factor, float *ot)
{
    __m512 f[2];
    UNROLL for (int h = 0; h < V; h++) f[h] = _mm512_loadu_ps(factor + 16 * h);
#define STEP(NR, at) values_cols(V, NR, pt, nk, v + (at), ldv, f, ot + (size_t)(at)*L)
    FJ_TILED_GROUPS(head_dim, STEP);
#undef STEP
}

AVX512 static void values(float *pt, int nk, const void *vc, int key0, int head_dim,
                          const float *factor, float *ot, int lanes)
{
    const int64_t ld = copy_ld(head_dim);
    const float *v = (const float *)vc + (size_t)key0 * ld;
    if (lanes > 16) values_any(2, pt, nk, v, ld, head_dim, factor, ot);
    else values_any(1, pt, nk, v, ld, head_dim, factor, ot);
}

/* ---- transposition ---------------------------------------------------------- */

/* r[i] = (old r[j])[i] for i, j < 16: a 16 x 16 block transposed in registers. */
AVX512 INLINE void transpose16(__m512 r[16])
{
    __m512 t[16];
    /* 2 x 2 blocks of 1, then 2, then 4 lanes, then 8 (the 128-bit lanes) */
    UNROLL for (int j = 0; j < 16; j += 2)
    {
        t[j] = _mm512_unpacklo_ps(r[j], r[j + 1]);
        t[j + 1] = _mm512_unpackhi_ps(r[j], r[j + 1]);
    }
    UNROLL for (int j = 0; j < 16; j += 4)
    {
        const __m512d a = _mm512_castps_pd(t[j]), b = _mm512_castps_pd(t[j + 2]);
        const __m512d c = _mm512_castps_pd(t[j + 1]), d = _mm512_castps_pd(t[j + 3]);
        r[j] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
        r[j + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
        r[j + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(c, d));
        r[j + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(c, d));
    }
    /* r[4q + k] holds, in each 128-bit lane L, element 4L + k of rows 4q..4q+3 */
    UNROLL for (int k = 0; k < 4; k++)
    {
        const __m512 a = r[k], b = r[4 + k], c = r[8 + k], d = r[12 + k];
        const __m512 ab0 = _mm512_shuffle_f32x4(a, b, 0x44), ab1 = _mm512_shuffle_f32x4(a, b, 0xee);
        const __m512 cd0 = _mm512_shuffle_f32x4(c, d, 0x44), cd1 = _mm512_shuffle_f32x4(c, d, 0xee);
        t[k] = _mm512_shuffle_f32x4(ab0, cd0, 0x88);      /* element k: lanes 0 of a, b, c, d */
        t[4 + k] = _mm512_shuffle_f32x4(ab0, cd0, 0xdd);  /* element 4 + k */
        t[8 + k] = _mm512_shuffle_f32x4(ab1, cd1, 0x88);  /* element 8 + k */
        t[12 + k] = _mm512_shuffle_f32x4(ab1, cd1, 0xdd); /* element 12 + k */
    }
    UNROLL for (int j = 0; j < 16; j++) r[j] = t[j];
}

static inline __mmask16 first(int n) /* the first n (0..16) lanes */
{
    return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1);
}

/* qp[d * LANES + r] = rows[r][d] (0 for a NULL row). The 16 rows of a
 * transposed block are loaded together, so their misses overlap. */
AVX512 static void pack_queries(const float *const *rows, int head_dim, void *packed)
{
    float *qp = packed;
    for (int d = 0; d < head_dim; d += 16) {
        const int n = head_dim - d < 16 ? head_dim - d : 16;
        for (int r = 0; r < L; r += 16) {
            __m512 x[16];
            UNROLL for (int j = 0; j < 16; j++) x[j] =
                rows[r + j] ? _mm512_maskz_loadu_ps(first(n), rows[r + j] + d)
                            : _mm512_setzero_ps();
            transpose16(x);
            UNROLL for (int i = 0; i < 16; i++) if (i < n)
                _mm512_storeu_ps(qp + (size_t)(d + i) * L + r, x[i]);
        }
    }
}

/* The block of ot rows d .. d + n - 1 (n <= 16), lanes r .. r + 15,
 * transposed: x[i] = lane r + i's columns d .. d + 15 (0 past n). */
AVX512 INLINE void ot_block(const float *ot, int d, int n, int r, __m512 x[16])
{
    UNROLL for (int i = 0; i < 16; i++) x[i] =
        i < n ? _mm512_loadu_ps(ot + (size_t)(d + i) * L + r) : _mm512_setzero_ps();
    transpose16(x);
}

/* 16 floats as f16, rounded to nearest-even; NaN as half.h makes it
 * (0x7e00 with the sign), not the hardware's payload. */
AVX512 INLINE __m256i to_f16(__m512 x)
{
    const __m256i h = _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    const __m256i sign = _mm256_and_si256(h, _mm256_set1_epi16((short)0x8000));
    return _mm256_mask_blend_epi16(nan, h, _mm256_or_si256(sign, _mm256_set1_epi16(0x7e00)));
}

/* 16 floats as bf16, exactly as fj_f32_to_bf16. */
AVX512 INLINE __m256i to_bf16(__m512 x)
{
    const __m512i u = _mm512_castps_si512(x);
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r =
        _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), odd),
                          16);
    const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    r = _mm512_mask_mov_epi32(r, nan,
                              _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40)));
    return _mm512_cvtepi32_epi16(r);
}

AVX512 static void store_outputs(const float *ot, int head_dim, void *const *dst, fj_dtype t,
                                 const float *scale, int nrows)
{
    for (int r = 0; r < nrows; r += 16)
        for (int d = 0; d < head_dim; d += 16) {
            const int n = head_dim - d < 16 ? head_dim - d : 16;
            __m512 x[16];
            ot_block(ot, d, n, r, x);
            UNROLL for (int i = 0; i < 16; i++)
            {
                void *row = r + i < nrows ? dst[r + i] : NULL;
                if (!row) continue;
                const __m512 y = _mm512_mul_ps(x[i], _mm512_set1_ps(scale[r + i]));
                if (t == FJ_F32) {
                    float *f = (float *)row + d;
                    if (n == 16 && ((uintptr_t)f & 63) == 0) _mm512_stream_ps(f, y);
                    else _mm512_mask_storeu_ps(f, first(n), y);
                } else {
                    const __m256i h = t == FJ_F16 ? to_f16(y) : to_bf16(y);
                    _mm256_mask_storeu_epi16((uint16_t *)row + d, first(n), h);
                }
            }
        }
    _mm_sfence(); /* the streaming stores ordered before whatever the caller does next */
}

AVX512 static void load_rows(float *dst, int64_t ld, const void *src, int64_t src_ld, fj_dtype t,
                             int rows, int cols)
{
    const int es = t == FJ_F32 ? 4 : 2;
    for (int r = 0; r < rows; r++) {
        const char *s = (const char *)src + (size_t)r * src_ld * es;
        float *o = dst + (size_t)r * ld;
        for (int c = 0; c < cols; c += 16) {
            const __mmask16 m = first(cols - c);
            __m512 x;
            if (t == FJ_F32) x = _mm512_maskz_loadu_ps(m, (const float *)s + c);
            else {
                const __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)s + c);
                x = t == FJ_F16
                        ? _mm512_cvtph_ps(h)
                        : _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
            }
            _mm512_mask_storeu_ps(o + c, m, x);
        }
    }
}

AVX512 static void copy_rows(void *dst, const void *src, int64_t src_ld, fj_dtype t, int keys,
                             int head_dim)
{
    load_rows(dst, copy_ld(head_dim), src, src_ld, t, keys, head_dim);
}

static const fj_tiled_kernels avx512_set = {
    .name = "avx512",
    .query_bytes = query_bytes,
    .copy_bytes = copy_bytes,
    .copy_keys = copy_rows,
    .copy_values = copy_rows,
    .scores = scores,
    .softmax = softmax,
    .values = values,
    .pack_queries = pack_queries,
    .store_outputs = store_outputs,
    .load_rows = load_rows,
};

const fj_tiled_kernels *fj_tiled_kernels_avx512(void)
{
    __builtin_cpu_init();
    if (!(__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")))
        return NULL;
    return &avx512_set;
}

#else

const fj_tiled_kernels *fj_tiled_kernels_avx512(void) { return NULL; }

#endif
