/* The decode path's AVX-512 kernels (decode_kernels.h).
 *
 * f32 rows are read where they lie. f16 and bf16 rows are widened to float
 * as they are loaded: f16 by vcvtph2ps, bf16 by interleaving each vector of
 * 32 with zeros (vpunpck{l,h}wd: one instruction per 16 floats, half what a
 * zero-extend and a shift take), which leaves the columns of each 32 in the
 * order bf16_order below; queries and accumulators are kept in that order
 * too. When more than four query rows would each widen the same rows again,
 * a group of keys is widened once into the scratch buffer (L1) instead.
 *
 * Scores: up to four query rows per pass (a GQA group of 4 in one), 4 keys
 * at a time, each key vector loaded (and widened) once for all the rows of
 * the pass; a key's products summed across lanes by folding 4 keys'
 * accumulators into one vector (6 shuffles, 3 adds) and four such vectors
 * into the 16 scores. Values: up to 4 rows x 4 vectors (2 x 8, 1 x 8) of
 * accumulators stay in registers while the keys go by, so each value element
 * loaded feeds up to 4 FMAs.
 *
 * bf16 has a second set on AVX-512 BF16 dot products (vdpbf16ps; the last
 * section), taken on CPUs that have them but no AMX: on one such CPU they
 * issue at the FMAs' rate, twice the products. On the CPU with AMX where
 * they were first measured, one issued every other cycle (32 products)
 * against two float FMAs a cycle (16 each), so there widening and FMAs did
 * as much per cycle (docs/benchmarks.md); there bf16 scores go to
 * decode_amx.c. */
#include "decode_kernels.h"

#include <stddef.h>

/* clang's AddressSanitizer turns these always-inlined, fully unrolled
 * kernels into code it takes tens of minutes to compile (over 90 s even at
 * -O0), so clang ASan builds (the fuzz targets) run the generic kernels;
 * gcc's ASan build still checks these. */
#if defined(__clang__) && defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FJ_AVX512_DECODE_SKIPPED 1
#endif
#endif

#if defined(__x86_64__) && defined(__GNUC__) && !defined(FJ_NO_MULTIVERSION) && \
    !defined(FJ_AVX512_DECODE_SKIPPED)

#include <immintrin.h>
#include <stdint.h>

#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))
#define INLINE static inline __attribute__((always_inline))
/* Loops over a compile-time count of registers: unrolled, or GCC keeps the
   register arrays in memory. */
#if defined(__clang__)
#define UNROLL _Pragma("clang loop unroll(full)")
#else
#define UNROLL _Pragma("GCC unroll 16")
#endif

static inline __mmask16 mask16(int valid) /* the first valid (any int) lanes */
{
    return valid >= 16 ? (__mmask16)0xffff : valid <= 0 ? 0 : (__mmask16)((1u << valid) - 1);
}

static inline __mmask32 mask32(int valid)
{
    return valid >= 32 ? (__mmask32)0xffffffffu : valid <= 0 ? 0 : (__mmask32)((1u << valid) - 1);
}

static inline int round_up(int x, int m) { return (x + m - 1) / m * m; }

/* Position i of a 32-column chunk widened from bf16 by interleaving: the low
 * vector takes columns 0-3 of each 8, the high one columns 4-7. */
static const uint8_t bf16_order[32] = {0, 1, 2, 3, 8,  9,  10, 11, 16, 17, 18, 19, 24, 25, 26, 27,
                                       4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31};

/* The 32 elements at x (type t) as two float vectors, in the kernels' order;
 * MASKED: only the elements in m are read, the others are 0. */
AVX512 INLINE void load32(const char *x, fj_dtype t, const bool MASKED, __mmask32 m, __m512 *lo,
                          __m512 *hi)
{
    if (t == FJ_F32) {
        const float *f = (const float *)x;
        *lo = MASKED ? _mm512_maskz_loadu_ps((__mmask16)m, f) : _mm512_loadu_ps(f);
        *hi =
            MASKED ? _mm512_maskz_loadu_ps((__mmask16)(m >> 16), f + 16) : _mm512_loadu_ps(f + 16);
    } else if (t == FJ_F16) {
        const __m256i *h = (const __m256i *)x;
        *lo = _mm512_cvtph_ps(MASKED ? _mm256_maskz_loadu_epi16((__mmask16)m, h)
                                     : _mm256_loadu_si256(h));
        *hi = _mm512_cvtph_ps(MASKED ? _mm256_maskz_loadu_epi16((__mmask16)(m >> 16), h + 1)
                                     : _mm256_loadu_si256(h + 1));
    } else {
        const __m512i b = MASKED ? _mm512_maskz_loadu_epi16(m, x) : _mm512_loadu_si512(x);
        const __m512i zero = _mm512_setzero_si512();
        *lo = _mm512_castsi512_ps(_mm512_unpacklo_epi16(zero, b));
        *hi = _mm512_castsi512_ps(_mm512_unpackhi_epi16(zero, b));
    }
}

static inline int elem_bytes(fj_dtype t) { return t == FJ_F32 ? 4 : 2; }

/* n rows of head_dim elements (ldb bytes apart) widened into dst (rows dpad
 * floats apart, zeros past head_dim). */
AVX512 INLINE void widen_rows(const char *src, int64_t ldb, int n, int head_dim, fj_dtype t,
                              float *dst, int dpad, fj_prefetch_run *pc)
{
    const int full = head_dim / 32, elem = elem_bytes(t);
    const __mmask32 tail = mask32(head_dim - 32 * full);
    for (int j = 0; j < n; j++, src += ldb, dst += dpad) {
        __m512 lo, hi;
        int c = 0;
        for (; c < full; c++) {
            load32(src + (size_t)32 * c * elem, t, false, 0, &lo, &hi);
            fj_prefetch_lines(pc, elem / 2);
            _mm512_storeu_ps(dst + 32 * c, lo);
            _mm512_storeu_ps(dst + 32 * c + 16, hi);
        }
        if (32 * c < dpad) {
            load32(src + (size_t)32 * c * elem, t, true, tail, &lo, &hi);
            fj_prefetch_lines(pc, elem / 2);
            _mm512_storeu_ps(dst + 32 * c, lo);
            _mm512_storeu_ps(dst + 32 * c + 16, hi);
        }
    }
}

/* ---- scores --------------------------------------------------------------- */

/* Per 128-bit lane, the partial sums of 4 accumulators: [a, b, c, d]. */
AVX512 INLINE __m512 fold4(__m512 a, __m512 b, __m512 c, __m512 d)
{
    __m512 ab = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
    __m512 cd = _mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));
    __m512d x = _mm512_castps_pd(ab), y = _mm512_castps_pd(cd);
    return _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)),
                         _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
}

/* Lane i: key i's dot product, from the fold4 results of keys 0-3, 4-7, ... */
AVX512 INLINE __m512 fold16(__m512 u0, __m512 u1, __m512 u2, __m512 u3)
{
    __m512 v01 =
        _mm512_add_ps(_mm512_shuffle_f32x4(u0, u1, 0x88), _mm512_shuffle_f32x4(u0, u1, 0xdd));
    __m512 v23 =
        _mm512_add_ps(_mm512_shuffle_f32x4(u2, u3, 0x88), _mm512_shuffle_f32x4(u2, u3, 0xdd));
    return _mm512_add_ps(_mm512_shuffle_f32x4(v01, v23, 0x88),
                         _mm512_shuffle_f32x4(v01, v23, 0xdd));
}

/* Dots of query vectors qv (NC chunks of 32 columns, from column c0) with
 * the 4 keys at x[0..3] (type t); the last chunk read masked by `tail` when
 * MASKED; folded (fold4). Two accumulators per key: half the FMA chain. */
AVX512 INLINE __m512 quad_dots(const __m512 *qv, const char *x0, const char *x1, const char *x2,
                               const char *x3, fj_dtype t, __mmask32 tail, const int NC,
                               const bool MASKED, fj_prefetch_run *pc)
{
    const int elem = elem_bytes(t);
    const char *x[4] = {x0, x1, x2, x3};
    __m512 a[4];
    UNROLL
    for (int i = 0; i < 4; i++) {
        __m512 lo, hi, s0, s1;
        load32(x[i], t, MASKED && NC == 1, tail, &lo, &hi);
        fj_prefetch_lines(pc, NC * elem / 2);
        s0 = _mm512_mul_ps(lo, qv[0]);
        s1 = _mm512_mul_ps(hi, qv[1]);
        UNROLL
        for (int c = 1; c < NC; c++) {
            load32(x[i] + (size_t)32 * c * elem, t, MASKED && c == NC - 1, tail, &lo, &hi);
            s0 = _mm512_fmadd_ps(lo, qv[2 * c], s0);
            s1 = _mm512_fmadd_ps(hi, qv[2 * c + 1], s1);
        }
        a[i] = _mm512_add_ps(s0, s1);
    }
    return fold4(a[0], a[1], a[2], a[3]);
}

/* Dots of one query row (NC chunks of 32 columns from its column c0, held in
 * registers) with keys row0 + i * ldb, i < 16; when not FULL only n < 16 are
 * keys, and the rest repeat the last. */
AVX512 INLINE __m512 dots16(const float *q, const char *row0, int64_t ldb, int n, fj_dtype t,
                            int c0, __mmask32 tail, const int NC, const bool MASKED,
                            const bool FULL, fj_prefetch_run *pc)
{
    __m512 qv[8];
    UNROLL
    for (int c = 0; c < 2 * NC; c++) qv[c] = _mm512_loadu_ps(q + c0 + 16 * c);
    const char *x = row0 + (size_t)c0 * elem_bytes(t);
    __m512 u[4];
    if (FULL) {
        const int64_t ld3 = 3 * ldb;
        UNROLL
        for (int g = 0; g < 4; g++, x += 4 * ldb)
            u[g] = quad_dots(qv, x, x + ldb, x + 2 * ldb, x + ld3, t, tail, NC, MASKED, pc);
    } else {
        UNROLL
        for (int g = 0; g < 4; g++) {
            const char *r[4];
            UNROLL
            for (int i = 0; i < 4; i++) r[i] = x + (4 * g + i < n ? 4 * g + i : n - 1) * ldb;
            u[g] = quad_dots(qv, r[0], r[1], r[2], r[3], t, tail, NC, MASKED, pc);
        }
    }
    return fold16(u[0], u[1], u[2], u[3]);
}

/* dots16 for R (1-4) query rows (ldq floats apart) at once, over all
 * `chunks` chunks of 32 columns (the last masked when MASKED): each key chunk
 * loaded (and widened) once for every row, the FMAs on registers only (the
 * one-row form takes each key vector as a memory operand, one load per FMA).
 * Reading each key once for the 4 rows of a GQA group, rather than once per
 * pair of rows, halves the key loads (from L2 once the block outgrows L1)
 * and the f16 conversions. R x 8 query vectors do not fit in registers next
 * to the accumulators, so the chunk loop is the outer one of each group of
 * 4 keys and a chunk's 2R query vectors are loaded (from L1) once per 4
 * keys: 4R accumulators (independent FMA chains), 2R query vectors and a
 * key's 2 vectors, 26 registers at R 4. Each (row, key) is folded once for
 * the whole head dim; the folds of the groups wait in memory (in registers
 * they pushed GCC to spill). */
AVX512 INLINE void dots16xr(const float *q, int ldq, const int R, const char *row0, int64_t ldb,
                            int n, fj_dtype t, int chunks, __mmask32 tail, const bool MASKED,
                            const bool FULL, __m512 *d, fj_prefetch_run *pc)
{
    const int elem = elem_bytes(t);
    const int whole = MASKED ? chunks - 1 : chunks;
    __m512 u[4][4];
    UNROLL
    for (int g = 0; g < 4; g++) {
        const char *y[4];
        UNROLL
        for (int i = 0; i < 4; i++) y[i] = row0 + (FULL || 4 * g + i < n ? 4 * g + i : n - 1) * ldb;
        __m512 a[4][4];
        UNROLL
        for (int r = 0; r < R; r++) UNROLL
        for (int i = 0; i < 4; i++) a[r][i] = _mm512_setzero_ps();
#define CHUNK(M)                                                                 \
    do {                                                                         \
        __m512 qv[4][2];                                                         \
        UNROLL                                                                   \
        for (int r = 0; r < R; r++) {                                            \
            qv[r][0] = _mm512_loadu_ps(q + (size_t)r * ldq + 32 * c);            \
            qv[r][1] = _mm512_loadu_ps(q + (size_t)r * ldq + 32 * c + 16);       \
        }                                                                        \
        UNROLL                                                                   \
        for (int i = 0; i < 4; i++) {                                            \
            __m512 lo, hi;                                                       \
            load32(y[i] + (size_t)32 * c * elem, t, M, tail, &lo, &hi);          \
            fj_prefetch_lines(pc, elem / 2);                                     \
            /* one load for every row (else GCC folds it into each row's FMA) */ \
            __asm__("" : "+v"(lo), "+v"(hi));                                    \
            UNROLL                                                               \
            for (int r = 0; r < R; r++) {                                        \
                a[r][i] = _mm512_fmadd_ps(lo, qv[r][0], a[r][i]);                \
                a[r][i] = _mm512_fmadd_ps(hi, qv[r][1], a[r][i]);                \
            }                                                                    \
        }                                                                        \
    } while (0)
        int c = 0;
        for (; c < whole; c++) CHUNK(false);
        if (MASKED) CHUNK(true);
#undef CHUNK
        UNROLL
        for (int r = 0; r < R; r++) u[r][g] = fold4(a[r][0], a[r][1], a[r][2], a[r][3]);
        __asm__("" : "+m"(u)); /* keep them there */
    }
    UNROLL
    for (int r = 0; r < R; r++) d[r] = fold16(u[r][0], u[r][1], u[r][2], u[r][3]);
}

/* s[r * lds + i] = alpha q_r . key i for the rows, 16 keys from row0 (type t,
 * ldb bytes apart, n of them valid), `chunks` chunks of 32 columns, the last
 * masked when MASKED (rows that end before it). */
AVX512 INLINE void scores_group(const float *q, int ldq, int nr, const char *row0, int64_t ldb,
                                int n, fj_dtype t, int chunks, __mmask32 tail, __m512 alpha,
                                float *s, int lds, const bool MASKED, fj_prefetch_run *pc)
{
    int r = 0;
    /* Four rows at a time, the last 2 or 3 together; a last single row too
       where its keys are widened (f32's own single-row form reads them as
       memory operands of its FMAs, which was faster there). */
    while (nr - r >= (t == FJ_F32 ? 2 : 1)) {
        const int R = nr - r >= 4 ? 4 : nr - r;
        const float *qr = q + (size_t)r * ldq;
        __m512 d[4];
#define DOTS(RR)                                                                                  \
    do {                                                                                          \
        if (n == 16) {                                                                            \
            if (MASKED) dots16xr(qr, ldq, RR, row0, ldb, n, t, chunks, tail, true, true, d, pc);  \
            else dots16xr(qr, ldq, RR, row0, ldb, n, t, chunks, tail, false, true, d, pc);        \
        } else {                                                                                  \
            if (MASKED) dots16xr(qr, ldq, RR, row0, ldb, n, t, chunks, tail, true, false, d, pc); \
            else dots16xr(qr, ldq, RR, row0, ldb, n, t, chunks, tail, false, false, d, pc);       \
        }                                                                                         \
    } while (0)
        if (R == 4) DOTS(4);
        else if (R == 3) DOTS(3);
        else if (R == 2) DOTS(2);
        else DOTS(1);
#undef DOTS
        for (int i = 0; i < R; i++)
            _mm512_mask_storeu_ps(s + (size_t)(r + i) * lds, mask16(n), _mm512_mul_ps(d[i], alpha));
        r += R;
    }
    if (t == FJ_F32 && r < nr) { /* f32's odd row */
        const float *qr = q + (size_t)r * ldq;
        __m512 sum = _mm512_setzero_ps();
        for (int c = 0; c < chunks; c += 4) { /* up to 8 vectors of query in registers */
            const int nc = chunks - c < 4 ? chunks - c : 4;
            const bool m = MASKED && c + nc == chunks;
            __m512 d;
#define DOTS(NC)                                                                       \
    d = n == 16 ? (m ? dots16(qr, row0, ldb, n, t, 32 * c, tail, NC, true, true, pc)   \
                     : dots16(qr, row0, ldb, n, t, 32 * c, tail, NC, false, true, pc)) \
                : (m ? dots16(qr, row0, ldb, n, t, 32 * c, tail, NC, true, false, pc)  \
                     : dots16(qr, row0, ldb, n, t, 32 * c, tail, NC, false, false, pc))
            switch (nc) {
            case 1: DOTS(1); break;
            case 2: DOTS(2); break;
            case 3: DOTS(3); break;
            default: DOTS(4); break;
            }
#undef DOTS
            sum = _mm512_add_ps(sum, d);
        }
        _mm512_mask_storeu_ps(s + (size_t)r * lds, mask16(n), _mm512_mul_ps(sum, alpha));
    }
}

/* Scores of the block: the rows read where they lie for f32 (and for a
 * single query row), else each group of 16 widened once into scratch for
 * all the query rows. */
AVX512 INLINE void scores_any(const float *q, int ldq, int nr, const void *k, int64_t k_ld, int nk,
                              int head_dim, float alpha, float *s, int lds, float *scratch,
                              fj_dtype t, fj_prefetch_run *pf)
{
    fj_prefetch_run pc = fj_prefetch_copy(pf);
    const int elem = elem_bytes(t), dpad = round_up(head_dim, FJ_DECODE_PAD);
    const int chunks = dpad / 32;
    const int64_t ldb = k_ld * elem;
    const __mmask32 tail = mask32(head_dim - 32 * (chunks - 1));
    const bool in_place = t == FJ_F32 || nr <= 4;
    const __m512 va = _mm512_set1_ps(alpha);
    for (int j0 = 0; j0 < nk; j0 += 16) {
        const int n = nk - j0 < 16 ? nk - j0 : 16;
        const char *rows = (const char *)k + j0 * ldb;
        if (in_place) {
            if (head_dim % 32)
                scores_group(q, ldq, nr, rows, ldb, n, t, chunks, tail, va, s + j0, lds, true, &pc);
            else
                scores_group(q, ldq, nr, rows, ldb, n, t, chunks, tail, va, s + j0, lds, false,
                             &pc);
        } else {
            widen_rows(rows, ldb, n, head_dim, t, scratch, dpad, &pc);
            fj_prefetch_run none = {NULL, NULL}; /* the widened rows are in L1 */
            scores_group(q, ldq, nr, (const char *)scratch, dpad * (int64_t)sizeof(float), n,
                         FJ_F32, chunks, 0, va, s + j0, lds, false, &none);
        }
    }
    fj_prefetch_return(&pc, pf);
}

/* ---- values ----------------------------------------------------------------- */

/* acc rows [0, NR) x chunks [c, c + NC) of 32 columns += p V over n keys
 * from row0 (type t, ldb bytes apart; the last chunk masked by `tail` when
 * MASKED). */
AVX512 INLINE void values_tile(const float *p, int ldp, const char *row0, int64_t ldb, int n,
                               fj_dtype t, float *acc, int ldacc, int c, __mmask32 tail,
                               const int NR, const int NC, const bool MASKED, fj_prefetch_run *pc)
{
    const int elem = elem_bytes(t);
    __m512 a[4][8];
    UNROLL
    for (int r = 0; r < NR; r++) UNROLL
    for (int v = 0; v < 2 * NC; v++)
        a[r][v] = _mm512_loadu_ps(acc + (size_t)r * ldacc + 32 * c + 16 * v);
    const char *row = row0 + (size_t)32 * c * elem;
    for (int j = 0; j < n; j++, row += ldb) {
        __m512 x[8];
        UNROLL
        for (int v = 0; v < NC; v++)
            load32(row + (size_t)32 * v * elem, t, MASKED && v == NC - 1, tail, &x[2 * v],
                   &x[2 * v + 1]);
        fj_prefetch_lines(pc, NC * elem / 2);
        UNROLL
        for (int r = 0; r < NR; r++) {
            const __m512 w = _mm512_set1_ps(p[(size_t)r * ldp + j]);
            UNROLL
            for (int v = 0; v < 2 * NC; v++) a[r][v] = _mm512_fmadd_ps(w, x[v], a[r][v]);
        }
    }
    UNROLL
    for (int r = 0; r < NR; r++) UNROLL
    for (int v = 0; v < 2 * NC; v++)
        _mm512_storeu_ps(acc + (size_t)r * ldacc + 32 * c + 16 * v, a[r][v]);
}

/* TILE(R, C) (defined by the caller) for `rows` (1-4) rows and nc (1, 2,
 * or 4 with at most 2 rows) chunks, as constants: the value tiles of both
 * sets unroll their register arrays for them. */
#define VALUE_TILE_DISPATCH(rows, nc)    \
    do {                                 \
        if ((nc) == 4) {                 \
            if ((rows) == 1) TILE(1, 4); \
            else TILE(2, 4);             \
        } else if ((nc) == 2) {          \
            switch (rows) {              \
            case 1: TILE(1, 2); break;   \
            case 2: TILE(2, 2); break;   \
            case 3: TILE(3, 2); break;   \
            default: TILE(4, 2); break;  \
            }                            \
        } else {                         \
            switch (rows) {              \
            case 1: TILE(1, 1); break;   \
            case 2: TILE(2, 1); break;   \
            case 3: TILE(3, 1); break;   \
            default: TILE(4, 1); break;  \
            }                            \
        }                                \
    } while (0)

/* All rows and chunks for n keys from row0 (16 accumulators a tile: 1-2
 * rows x 4 chunks, 3-4 rows x 2). */
AVX512 INLINE void values_group(const float *p, int ldp, int nr, const char *row0, int64_t ldb,
                                int n, fj_dtype t, int chunks, __mmask32 tail, float *acc,
                                int ldacc, const bool MASKED, fj_prefetch_run *pc)
{
    for (int r0 = 0; r0 < nr; r0 += 4) {
        const int rows = nr - r0 < 4 ? nr - r0 : 4;
        const float *pr = p + (size_t)r0 * ldp;
        float *ar = acc + (size_t)r0 * ldacc;
        for (int c = 0; c < chunks;) {
            const int left = chunks - c;
            const int nc = rows <= 2 && left >= 4 ? 4 : left >= 2 ? 2 : 1;
            const bool m = MASKED && c + nc == chunks;
#define TILE(R, C)                                                                 \
    (m ? values_tile(pr, ldp, row0, ldb, n, t, ar, ldacc, c, tail, R, C, true, pc) \
       : values_tile(pr, ldp, row0, ldb, n, t, ar, ldacc, c, tail, R, C, false, pc))
            VALUE_TILE_DISPATCH(rows, nc);
#undef TILE
            c += nc;
        }
    }
}

/* Keys per group when the values are widened into scratch first (more than
   one tile of rows would widen each row again): 32 x dpad floats, 16 KiB at
   head dim 128, stay in L1 while every tile reads them. */
#define VALUE_GROUP 32

AVX512 INLINE void values_any(const float *p, int ldp, int nr, const void *v, int64_t v_ld, int nk,
                              int head_dim, float *acc, int ldacc, float *scratch, fj_dtype t,
                              fj_prefetch_run *pf)
{
    fj_prefetch_run pc = fj_prefetch_copy(pf);
    const int elem = elem_bytes(t), dpad = round_up(head_dim, FJ_DECODE_PAD);
    const int chunks = dpad / 32;
    const int64_t ldb = v_ld * elem;
    const __mmask32 tail = mask32(head_dim - 32 * (chunks - 1));
    if (t == FJ_F32 || nr <= 4) {
        if (head_dim % 32)
            values_group(p, ldp, nr, v, ldb, nk, t, chunks, tail, acc, ldacc, true, &pc);
        else values_group(p, ldp, nr, v, ldb, nk, t, chunks, tail, acc, ldacc, false, &pc);
        fj_prefetch_return(&pc, pf);
        return;
    }
    const int64_t lds = dpad * (int64_t)sizeof(float);
    for (int j0 = 0; j0 < nk; j0 += VALUE_GROUP) {
        const int n = nk - j0 < VALUE_GROUP ? nk - j0 : VALUE_GROUP;
        const char *rows = (const char *)v + j0 * ldb;
        widen_rows(rows, ldb, n, head_dim, t, scratch, dpad, &pc);
        fj_prefetch_run none = {NULL, NULL}; /* the widened rows are in L1 */
        values_group(p + j0, ldp, nr, (const char *)scratch, lds, n, FJ_F32, chunks, 0, acc, ldacc,
                     false, &none);
    }
    fj_prefetch_return(&pc, pf);
}

#define FLOAT_SET(suffix, dtype)                                                                  \
    AVX512 static void scores_##suffix(const void *q, int ldq, int nr, const void *k,             \
                                       int64_t k_ld, int nk, int head_dim, float alpha, float *s, \
                                       int lds, float *scratch, fj_prefetch_run *pf)              \
    {                                                                                             \
        scores_any(q, ldq, nr, k, k_ld, nk, head_dim, alpha, s, lds, scratch, dtype, pf);         \
    }                                                                                             \
    AVX512 static void values_##suffix(const float *p, int ldp, int nr, const void *v,            \
                                       int64_t v_ld, int nk, int head_dim, float *acc, int ldacc, \
                                       float *scratch, fj_prefetch_run *pf)                       \
    {                                                                                             \
        values_any(p, ldp, nr, v, v_ld, nk, head_dim, acc, ldacc, scratch, dtype, pf);            \
    }

FLOAT_SET(f32, FJ_F32)
FLOAT_SET(f16, FJ_F16)
FLOAT_SET(bf16, FJ_BF16)

static bool has_avx512(void);

/* ---- bf16 as AVX-512 BF16 dot products ----------------------------------------
 *
 * The same shapes with vdpbf16ps (two bf16 products per float lane an
 * instruction) in place of widening and FMAs, where the CPU has it (chosen
 * by decode.c on a CPU without AMX; docs/benchmarks.md, "bf16 decode on
 * AVX-512 BF16 dot products"). Scores: the queries as bf16 in their own
 * column order (q_bf16), each key chunk of 32 columns one load and one dot
 * product per query row, folded as above. Values: each pair of keys'
 * chunks interleaved (vpunpck{l,h}wd of the two rows) into the pairs of
 * bf16_order's columns, P of the row rounded to bf16 (nearest even, as a GPU
 * kernel rounds P) and broadcast as a pair; an odd last key pairs with 0. */
#define BF16DOT __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))

typedef uint32_t __attribute__((may_alias)) bf16_pair;

/* Dots of one query row (bf16, NC chunks of 32 columns from column c0, in
 * registers) with the keys row0 + i * ldb, i < 16 (when not FULL only n are
 * keys and the rest repeat the last); lane i: the dot with key i. */
BF16DOT INLINE __m512 dots16_dot(const uint16_t *q, const char *row0, int64_t ldb, int n, int c0,
                                 __mmask32 tail, const int NC, const bool MASKED, const bool FULL,
                                 fj_prefetch_run *pc)
{
    __m512bh qv[4];
    UNROLL
    for (int c = 0; c < NC; c++) qv[c] = (__m512bh)_mm512_loadu_si512(q + c0 + 32 * c);
    const char *x0 = row0 + (size_t)c0 * 2;
    __m512 u[4];
    UNROLL
    for (int g = 0; g < 4; g++) {
        const char *y[4];
        UNROLL
        for (int i = 0; i < 4; i++) y[i] = x0 + (FULL || 4 * g + i < n ? 4 * g + i : n - 1) * ldb;
        __m512 a[4];
        UNROLL
        for (int i = 0; i < 4; i++) a[i] = _mm512_setzero_ps();
        UNROLL
        for (int c = 0; c < NC; c++) {
            UNROLL
            for (int i = 0; i < 4; i++) {
                const __m512i kv = MASKED && c == NC - 1
                                       ? _mm512_maskz_loadu_epi16(tail, y[i] + 64 * c)
                                       : _mm512_loadu_si512(y[i] + 64 * c);
                a[i] = _mm512_dpbf16_ps(a[i], qv[c], (__m512bh)kv);
                fj_prefetch_lines(pc, 1);
            }
        }
        u[g] = fold4(a[0], a[1], a[2], a[3]);
    }
    return fold16(u[0], u[1], u[2], u[3]);
}

/* dots16_dot for R (2-4) query rows (ldq elements apart) at once over
 * all `chunks` chunks (the last masked when MASKED): as dots16xr, each key
 * chunk loaded once for every row, the chunk loop outside each group of 4
 * keys and a chunk's R query vectors loaded once per 4 keys. */
BF16DOT INLINE void dots16xr_dot(const uint16_t *q, int ldq, const int R, const char *row0,
                                 int64_t ldb, int n, int chunks, __mmask32 tail, const bool MASKED,
                                 const bool FULL, __m512 *d, fj_prefetch_run *pc)
{
    const int whole = MASKED ? chunks - 1 : chunks;
    __m512 u[4][4];
    UNROLL
    for (int g = 0; g < 4; g++) {
        const char *y[4];
        UNROLL
        for (int i = 0; i < 4; i++) y[i] = row0 + (FULL || 4 * g + i < n ? 4 * g + i : n - 1) * ldb;
        __m512 a[4][4];
        UNROLL
        for (int r = 0; r < R; r++) UNROLL
        for (int i = 0; i < 4; i++) a[r][i] = _mm512_setzero_ps();
#define CHUNK(M)                                                                                  \
    do {                                                                                          \
        __m512bh qv[4];                                                                           \
        UNROLL                                                                                    \
        for (int r = 0; r < R; r++)                                                               \
            qv[r] = (__m512bh)_mm512_loadu_si512(q + (size_t)r * ldq + 32 * c);                   \
        UNROLL                                                                                    \
        for (int i = 0; i < 4; i++) {                                                             \
            __m512i kv = M ? _mm512_maskz_loadu_epi16(tail, y[i] + 64 * c)                        \
                           : _mm512_loadu_si512(y[i] + 64 * c);                                   \
            __asm__("" : "+v"(kv)); /* one load for every row */                                  \
            fj_prefetch_lines(pc, 1);                                                             \
            UNROLL                                                                                \
            for (int r = 0; r < R; r++) a[r][i] = _mm512_dpbf16_ps(a[r][i], qv[r], (__m512bh)kv); \
        }                                                                                         \
    } while (0)
        int c = 0;
        for (; c < whole; c++) CHUNK(false);
        if (MASKED) CHUNK(true);
#undef CHUNK
        UNROLL
        for (int r = 0; r < R; r++) u[r][g] = fold4(a[r][0], a[r][1], a[r][2], a[r][3]);
        __asm__("" : "+m"(u)); /* keep them there */
    }
    UNROLL
    for (int r = 0; r < R; r++) d[r] = fold16(u[r][0], u[r][1], u[r][2], u[r][3]);
}

BF16DOT INLINE void scores_group_dot(const uint16_t *q, int ldq, int nr, const char *row0,
                                     int64_t ldb, int n, int chunks, __mmask32 tail, __m512 alpha,
                                     float *s, int lds, const bool MASKED, fj_prefetch_run *pc)
{
    int r = 0;
    while (nr - r >= 2) { /* four rows at a time, the last 2 or 3 together */
        const int R = nr - r >= 4 ? 4 : nr - r;
        const uint16_t *qr = q + (size_t)r * ldq;
        __m512 d[4];
#define DOTS(RR)                                                                                   \
    do {                                                                                           \
        if (n == 16) {                                                                             \
            if (MASKED) dots16xr_dot(qr, ldq, RR, row0, ldb, n, chunks, tail, true, true, d, pc);  \
            else dots16xr_dot(qr, ldq, RR, row0, ldb, n, chunks, tail, false, true, d, pc);        \
        } else {                                                                                   \
            if (MASKED) dots16xr_dot(qr, ldq, RR, row0, ldb, n, chunks, tail, true, false, d, pc); \
            else dots16xr_dot(qr, ldq, RR, row0, ldb, n, chunks, tail, false, false, d, pc);       \
        }                                                                                          \
    } while (0)
        if (R == 4) DOTS(4);
        else if (R == 3) DOTS(3);
        else DOTS(2);
#undef DOTS
        for (int i = 0; i < R; i++)
            _mm512_mask_storeu_ps(s + (size_t)(r + i) * lds, mask16(n), _mm512_mul_ps(d[i], alpha));
        r += R;
    }
    if (r < nr) { /* the odd row */
        const uint16_t *qr = q + (size_t)r * ldq;
        __m512 sum = _mm512_setzero_ps();
        for (int c = 0; c < chunks; c += 4) { /* up to 4 vectors of query in registers */
            const int nc = chunks - c < 4 ? chunks - c : 4;
            const bool m = MASKED && c + nc == chunks;
            __m512 d;
#define DOTS(NC)                                                                        \
    d = n == 16 ? (m ? dots16_dot(qr, row0, ldb, n, 32 * c, tail, NC, true, true, pc)   \
                     : dots16_dot(qr, row0, ldb, n, 32 * c, tail, NC, false, true, pc)) \
                : (m ? dots16_dot(qr, row0, ldb, n, 32 * c, tail, NC, true, false, pc)  \
                     : dots16_dot(qr, row0, ldb, n, 32 * c, tail, NC, false, false, pc))
            switch (nc) {
            case 1: DOTS(1); break;
            case 2: DOTS(2); break;
            case 3: DOTS(3); break;
            default: DOTS(4); break;
            }
#undef DOTS
            sum = _mm512_add_ps(sum, d);
        }
        _mm512_mask_storeu_ps(s + (size_t)r * lds, mask16(n), _mm512_mul_ps(sum, alpha));
    }
}

BF16DOT static void scores_dot(const void *q, int ldq, int nr, const void *k, int64_t k_ld, int nk,
                               int head_dim, float alpha, float *s, int lds, float *scratch,
                               fj_prefetch_run *pf)
{
    (void)scratch;
    fj_prefetch_run pc = fj_prefetch_copy(pf);
    const int chunks = round_up(head_dim, FJ_DECODE_PAD) / 32;
    const int64_t ldb = k_ld * 2;
    const __mmask32 tail = mask32(head_dim - 32 * (chunks - 1));
    const __m512 va = _mm512_set1_ps(alpha);
    for (int j0 = 0; j0 < nk; j0 += 16) {
        const int n = nk - j0 < 16 ? nk - j0 : 16;
        const char *rows = (const char *)k + j0 * ldb;
        if (head_dim % 32)
            scores_group_dot(q, ldq, nr, rows, ldb, n, chunks, tail, va, s + j0, lds, true, &pc);
        else scores_group_dot(q, ldq, nr, rows, ldb, n, chunks, tail, va, s + j0, lds, false, &pc);
    }
    fj_prefetch_return(&pc, pf);
}

/* acc rows [0, NR) x chunks [c, c + NC) += P V over n keys from row0 (ldb
 * bytes apart), P as bf16 pairs (pp: row r's pair i at pp[r * ldpp + i]). */
BF16DOT INLINE void values_tile_dot(const bf16_pair *pp, int ldpp, const char *row0, int64_t ldb,
                                    int n, float *acc, int ldacc, int c, __mmask32 tail,
                                    const int NR, const int NC, const bool MASKED,
                                    fj_prefetch_run *pc)
{
    __m512 a[4][8];
    UNROLL
    for (int r = 0; r < NR; r++) UNROLL
    for (int v = 0; v < 2 * NC; v++)
        a[r][v] = _mm512_loadu_ps(acc + (size_t)r * ldacc + 32 * c + 16 * v);
    const char *row = row0 + (size_t)64 * c;
    for (int j = 0; j < n; j += 2, row += 2 * ldb) {
        __m512i x[8];
        UNROLL
        for (int v = 0; v < NC; v++) {
            const bool m = MASKED && v == NC - 1;
            const __m512i lo =
                m ? _mm512_maskz_loadu_epi16(tail, row + 64 * v) : _mm512_loadu_si512(row + 64 * v);
            const __m512i hi = j + 1 >= n ? _mm512_setzero_si512()
                               : m        ? _mm512_maskz_loadu_epi16(tail, row + ldb + 64 * v)
                                          : _mm512_loadu_si512(row + ldb + 64 * v);
            x[2 * v] = _mm512_unpacklo_epi16(lo, hi);
            x[2 * v + 1] = _mm512_unpackhi_epi16(lo, hi);
        }
        fj_prefetch_lines(pc, 2 * NC);
        UNROLL
        for (int r = 0; r < NR; r++) {
            const __m512bh w = (__m512bh)_mm512_set1_epi32((int)pp[(size_t)r * ldpp + j / 2]);
            UNROLL
            for (int v = 0; v < 2 * NC; v++) a[r][v] = _mm512_dpbf16_ps(a[r][v], (__m512bh)x[v], w);
        }
    }
    UNROLL
    for (int r = 0; r < NR; r++) UNROLL
    for (int v = 0; v < 2 * NC; v++)
        _mm512_storeu_ps(acc + (size_t)r * ldacc + 32 * c + 16 * v, a[r][v]);
}

BF16DOT static void values_dot(const float *p, int ldp, int nr, const void *v, int64_t v_ld, int nk,
                               int head_dim, float *acc, int ldacc, float *scratch,
                               fj_prefetch_run *pf)
{
    fj_prefetch_run pc = fj_prefetch_copy(pf);
    const int chunks = round_up(head_dim, FJ_DECODE_PAD) / 32;
    const int64_t ldb = v_ld * 2;
    const __mmask32 tail = mask32(head_dim - 32 * (chunks - 1));
    /* P as bf16, rows of round_up(nk, 32) elements (zeros past nk): pair i
       of a row is its keys 2i and 2i + 1 */
    const int ldpb = round_up(nk, 32);
    uint16_t *pb = (uint16_t *)scratch;
    for (int r = 0; r < nr; r++)
        for (int j = 0; j < ldpb; j += 32) {
            const float *x = p + (size_t)r * ldp + j;
            const __m512 lo = _mm512_maskz_loadu_ps(mask16(nk - j), x);
            const __m512 hi = _mm512_maskz_loadu_ps(mask16(nk - j - 16), x + 16);
            _mm512_storeu_si512(pb + (size_t)r * ldpb + j, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
        }
    const bf16_pair *pp = (const bf16_pair *)pb;
    const int ldpp = ldpb / 2;
    const bool masked = head_dim % 32 != 0;
    for (int r0 = 0; r0 < nr; r0 += 4) {
        const int rows = nr - r0 < 4 ? nr - r0 : 4;
        const bf16_pair *pr = pp + (size_t)r0 * ldpp;
        float *ar = acc + (size_t)r0 * ldacc;
        for (int c = 0; c < chunks;) {
            const int left = chunks - c;
            const int nc = rows <= 2 && left >= 4 ? 4 : left >= 2 ? 2 : 1;
            const bool m = masked && c + nc == chunks;
#define TILE(R, C)                                                                  \
    (m ? values_tile_dot(pr, ldpp, v, ldb, nk, ar, ldacc, c, tail, R, C, true, &pc) \
       : values_tile_dot(pr, ldpp, v, ldb, nk, ar, ldacc, c, tail, R, C, false, &pc))
            VALUE_TILE_DISPATCH(rows, nc);
#undef TILE
            c += nc;
        }
    }
    fj_prefetch_return(&pc, pf);
}

static const fj_decode_kernels dot_set = {
    .name = "avx512-bf16-dot",
    .q_bf16 = true,
    .order = bf16_order,
    .scores = scores_dot,
    .accumulate = values_dot,
};

const fj_decode_kernels *fj_decode_kernels_avx512_bf16_dot(void)
{
    __builtin_cpu_init();
    if (!has_avx512() || !__builtin_cpu_supports("avx512bf16")) return NULL;
    return &dot_set;
}

static const fj_decode_kernels sets[] = {
    {.name = "avx512", .scores = scores_f32, .accumulate = values_f32},
    {.name = "avx512", .scores = scores_f16, .accumulate = values_f16},
    {.name = "avx512", .order = bf16_order, .scores = scores_bf16, .accumulate = values_bf16},
};

static bool has_avx512(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
}

const fj_decode_kernels *fj_decode_kernels_avx512(fj_dtype dtype)
{
    if (!has_avx512()) return NULL;
    return &sets[dtype == FJ_F32 ? 0 : dtype == FJ_F16 ? 1 : 2];
}

#else

const fj_decode_kernels *fj_decode_kernels_avx512(fj_dtype dtype)
{
    (void)dtype;
    return NULL;
}

const fj_decode_kernels *fj_decode_kernels_avx512_bf16_dot(void) { return NULL; }

#endif
