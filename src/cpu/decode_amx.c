/* The decode path's bf16 kernels on AMX (decode_kernels.h), where the CPU has
 * AMX-BF16 and the kernel lets the process use its tile registers.
 *
 * S^T = K Q^T a tile at a time: tile A holds 16 keys x 32 columns of K,
 * loaded straight from the tensor (rows as far apart as they lie); tile B
 * the matching 32 columns of every query row as bf16 pairs (the layout
 * TDPBF16PS multiplies: B[p][n] = columns 2p, 2p + 1 of query row n), built
 * once per call from the rows; tile C accumulates 16 keys x 16 query rows in
 * float over the column chunks. One TDPBF16PS is 16 x 16 x 32 products, as
 * many as 512 FMAs on 16 floats, for every query row at once: the score
 * work of a key barely grows with the rows (docs/benchmarks.md has the
 * rates).
 * Products are of the problem's own bf16 values, exact in float; sums in
 * float (TDPBF16PS flushes denormal inputs to zero, which moves a score by
 * less than 2^-126 per product).
 *
 * Keys past the block's end and columns past head_dim are never read from
 * the tensor (a tile load reads whole rows of 64 bytes): the last, partial
 * group of keys and the last, partial chunk of columns go through a
 * zero-padded bounce buffer. Values: acc += P V the same way for many query
 * rows (values_amx below), on the AVX-512 kernel for a few. */
#include "decode_kernels.h"

#include <stddef.h>
#include <stdint.h>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(FJ_NO_MULTIVERSION) && defined(__linux__)

#include <cpuid.h>
#include <immintrin.h>
#include <pthread.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "amx_tiles.h"

#define INLINE static inline __attribute__((always_inline))
#define AMX __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512bf16")))

/* Linux: a process must ask for the AMX tile state before using it. */
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

/* Tiles (the intrinsics take literal numbers): 0 C, 1 A, 2 B. */

/* Scratch layout (floats): B tiles for up to 18 chunks (576 columns, every
   head dim), then C (16 x 16), then the bounce tile (16 x 32 bf16), then a
   second C 768 floats past the first (1024 floats in all after the B
   tiles). */
#define B_TILE_FLOATS 256
#define MAX_CHUNKS (FJ_MAX_HEAD_DIM / 32)
_Static_assert(MAX_CHUNKS * 32 >= FJ_MAX_HEAD_DIM, "B tiles for every column");
_Static_assert(FJ_DECODE_MAX_BLOCK *FJ_DECODE_PAD >= MAX_CHUNKS * B_TILE_FLOATS + 4 * 256,
               "the scratch buffer holds the B tiles, two C tiles and the bounce tile");
/* The values' A and B tiles, bf16: (nk / 32) x 16 x 32 + nk x dpad, within
   the scratch's FJ_DECODE_MAX_BLOCK x dpad floats for any dpad >= 32. */

/* The B tiles of scores_amx: b[ch][p][r] = the column pair p of chunk ch of
 * query row r (32 bits: columns 32 ch + 2p, + 1) for r < nr <= 16, 0 for
 * the other rows. Four query rows at a time: their pairs of a chunk (4
 * vectors of 16) transposed within 128-bit lanes by unpacks, so that lane
 * L of vector i holds pair 4L + i of the 4 rows, stored as the 4 entries
 * of B row 4L + i from row r0. Built per call (the scratch is shared with
 * the values' kernels), so its cost is paid per block of keys: a scalar
 * loop over 16 x nr pairs was a large share of the scores at a few rows
 * (docs/benchmarks.md, "Decode on the GQA rows"). */
AMX INLINE void query_tiles(const void *q, int ldq, int nr, int chunks, uint32_t *b)
{
    memset(b, 0, (size_t)chunks * B_TILE_FLOATS * sizeof(uint32_t));
    for (int r0 = 0; r0 < nr; r0 += 4) {
        const uint32_t *row[4];
        for (int i = 0; i < 4; i++)
            row[i] = r0 + i < nr ? (const uint32_t *)((const uint16_t *)q + (size_t)(r0 + i) * ldq)
                                 : NULL;
        for (int ch = 0; ch < chunks; ch++) {
            __m512i x[4];
            for (int i = 0; i < 4; i++)
                x[i] = row[i] ? _mm512_loadu_si512(row[i] + ch * 16) : _mm512_setzero_si512();
            /* per lane: [r0 p, r1 p, r0 p+1, r1 p+1] and the same for rows 2, 3 */
            const __m512i a01 = _mm512_unpacklo_epi32(x[0], x[1]);
            const __m512i b01 = _mm512_unpackhi_epi32(x[0], x[1]);
            const __m512i a23 = _mm512_unpacklo_epi32(x[2], x[3]);
            const __m512i b23 = _mm512_unpackhi_epi32(x[2], x[3]);
            __m512i y[4];
            y[0] = _mm512_unpacklo_epi64(a01, a23); /* pairs 4L */
            y[1] = _mm512_unpackhi_epi64(a01, a23); /* 4L + 1 */
            y[2] = _mm512_unpacklo_epi64(b01, b23); /* 4L + 2 */
            y[3] = _mm512_unpackhi_epi64(b01, b23); /* 4L + 3 */
            uint32_t *dst = b + ch * B_TILE_FLOATS + r0;
            for (int i = 0; i < 4; i++) {
                _mm_storeu_si128((__m128i *)(dst + (0 + i) * 16), _mm512_castsi512_si128(y[i]));
                _mm_storeu_si128((__m128i *)(dst + (4 + i) * 16),
                                 _mm512_extracti32x4_epi32(y[i], 1));
                _mm_storeu_si128((__m128i *)(dst + (8 + i) * 16),
                                 _mm512_extracti32x4_epi32(y[i], 2));
                _mm_storeu_si128((__m128i *)(dst + (12 + i) * 16),
                                 _mm512_extracti32x4_epi32(y[i], 3));
            }
        }
    }
}

AMX static void scores_amx(const void *q, int ldq, int nr, const void *k, int64_t k_ld, int nk,
                           int head_dim, float alpha, float *s, int lds, float *scratch,
                           fj_prefetch_run *pf)
{
    (void)pf; /* not measured on a CPU with AMX: the tile loads go as they did */
    const int chunks = (head_dim + 31) / 32;
    uint32_t *b = (uint32_t *)scratch;               /* chunks x 16 x 16 pairs */
    float *c = scratch + MAX_CHUNKS * B_TILE_FLOATS; /* 16 keys x 16 rows */
    uint16_t *bounce = (uint16_t *)(c + 256);        /* 16 keys x 32 columns */
    const int64_t ldb = k_ld * 2;

    /* B: query rows as column pairs; rows past nr and columns past head_dim
       are 0 (the query rows are zero-padded to a multiple of 32 already). */
    query_tiles(q, ldq, nr, chunks, b);

    /* Every tile either path below uses (0-2; 3-7 on the whole groups'),
       configured once. */
    fj_amx_config_16x64(8);

    const __m512i row_of =
        _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                           _mm512_set1_epi32(16));
    const __m512 va = _mm512_set1_ps(alpha);
    const int tail_cols = head_dim - 32 * (chunks - 1); /* 1..32 */
    int j0 = 0;
    if (chunks <= 4 && tail_cols == 32 && nk >= 32) {
        /* Whole groups, up to 128 columns: the B tiles stay in tiles 2-5,
           A alternates between tiles 1 and 6 and C between 0 and 7, so a
           group's loads need not wait for the previous group's products
           (tile registers are not renamed). */
        _tile_loadd(2, b, 64);
        if (chunks > 1) _tile_loadd(3, b + B_TILE_FLOATS, 64);
        if (chunks > 2) _tile_loadd(4, b + 2 * B_TILE_FLOATS, 64);
        if (chunks > 3) _tile_loadd(5, b + 3 * B_TILE_FLOATS, 64);
        float *cbuf[2] = {c, c + 256 + 512}; /* the second past the bounce tile */
#define GROUP(CT, G)                                             \
    do {                                                         \
        const char *x = (const char *)k + (j0 + 16 * (G)) * ldb; \
        _tile_zero(CT);                                          \
        _tile_loadd(1, x, ldb);                                  \
        _tile_dpbf16ps(CT, 1, 2);                                \
        if (chunks > 1) {                                        \
            _tile_loadd(6, x + 64, ldb);                         \
            _tile_dpbf16ps(CT, 6, 3);                            \
        }                                                        \
        if (chunks > 2) {                                        \
            _tile_loadd(1, x + 128, ldb);                        \
            _tile_dpbf16ps(CT, 1, 4);                            \
        }                                                        \
        if (chunks > 3) {                                        \
            _tile_loadd(6, x + 192, ldb);                        \
            _tile_dpbf16ps(CT, 6, 5);                            \
        }                                                        \
        _tile_stored(CT, cbuf[G], 64);                           \
    } while (0)
        for (; j0 + 32 <= nk; j0 += 32) {
            GROUP(0, 0);
            GROUP(7, 1);
            for (int g = 0; g < 2; g++)
                for (int r = 0; r < nr; r++) {
                    __m512 col = _mm512_i32gather_ps(_mm512_add_epi32(row_of, _mm512_set1_epi32(r)),
                                                     cbuf[g], 4);
                    _mm512_storeu_ps(s + (size_t)r * lds + j0 + 16 * g, _mm512_mul_ps(col, va));
                }
        }
#undef GROUP
    }
    for (; j0 < nk; j0 += 16) {
        const int n = nk - j0 < 16 ? nk - j0 : 16;
        const char *rows = (const char *)k + j0 * ldb;
        _tile_zero(0);
        for (int ch = 0; ch < chunks; ch++) {
            const int cols = ch == chunks - 1 ? tail_cols : 32;
            if (n == 16 && cols == 32) {
                _tile_loadd(1, rows + (size_t)ch * 64, ldb);
            } else { /* a partial tile: bounce it, zero-padded */
                const __mmask32 m =
                    cols >= 32 ? (__mmask32)0xffffffffu : (__mmask32)((1u << cols) - 1);
                for (int i = 0; i < 16; i++)
                    _mm512_storeu_si512(bounce + 32 * i,
                                        i < n ? _mm512_maskz_loadu_epi16(m, rows + i * ldb +
                                                                                (size_t)ch * 64)
                                              : _mm512_setzero_si512());
                _tile_loadd(1, bounce, 64);
            }
            _tile_loadd(2, b + ch * B_TILE_FLOATS, 64);
            _tile_dpbf16ps(0, 1, 2);
        }
        _tile_stored(0, c, 64);
        /* c[key][row] -> s[row][key] */
        const __mmask16 keys = n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1);
        for (int r = 0; r < nr; r++) {
            __m512 col = _mm512_i32gather_ps(_mm512_add_epi32(row_of, _mm512_set1_epi32(r)), c, 4);
            _mm512_mask_storeu_ps(s + (size_t)r * lds + j0, keys, _mm512_mul_ps(col, va));
        }
    }
    _tile_release();
}

/* ---- values ----------------------------------------------------------------- */

/* acc += P V for the block: C tiles are the accumulator rows themselves, 16
 * columns each (in bf16_order, the order the interleave below leaves them
 * in, so a C tile loads from and stores to acc as it lies), A tiles the
 * probabilities as bf16 (rounded to nearest even, as a GPU kernel's P before
 * its MMA), B tiles 32 keys x 16 columns of V as pairs of rows interleaved
 * (TDPBF16PS's B[p][n] = keys 2p, 2p + 1 of column n). Up to 4 C tiles at a
 * time next to one A and one B. */
#define VALUE_KEYS FJ_DECODE_PACK_KEYS /* keys per A tile */
/* Rows from which the values go to the tiles: building the B tiles costs the
   same whatever the rows, the AVX-512 kernel's FMAs grow with them, and they
   cross at 5 to 6 rows (docs/benchmarks.md). */
#define AMX_VALUE_ROWS 6

static const fj_decode_kernels *widen_set; /* the AVX-512 bf16 set, for fewer rows */

/* B tiles for n keys of V (ldb bytes apart) from key 0, in groups of 32
 * keys: group kg's pair pr, column group g at dst + ((kg * 16 + pr) * groups
 * + g) * 32 (the rows of a pair for every column group side by side, so the
 * stores of a pair are one run; tiles 1 KiB apart, one row of each per pair,
 * kept hitting 4 KiB aliasing against the loads of V). Keys past n are 0. */
AMX INLINE void build_b(const char *v, int64_t ldb, int n, int head_dim, uint16_t *dst)
{
    const int chunks = (head_dim + 31) / 32;
    const int tail_cols = head_dim - 32 * (chunks - 1); /* 1..32 */
    const __mmask32 tail =
        tail_cols >= 32 ? (__mmask32)0xffffffffu : (__mmask32)((1u << tail_cols) - 1);
    const bool full = tail_cols == 32;
    const int kgroups = (n + VALUE_KEYS - 1) / VALUE_KEYS;
    uint16_t *row = dst;
    const char *x = v;
    for (int j = 0; j < kgroups * VALUE_KEYS; j += 2, x += 2 * ldb) {
        if (j + 1 < n && full) { /* both keys, whole chunks */
            for (int c = 0; c < chunks; c++, row += 2 * 32) {
                const __m512i xv = _mm512_loadu_si512(x + 64 * c);
                const __m512i yv = _mm512_loadu_si512(x + ldb + 64 * c);
                _mm512_storeu_si512(row, _mm512_unpacklo_epi16(xv, yv));
                _mm512_storeu_si512(row + 32, _mm512_unpackhi_epi16(xv, yv));
            }
            continue;
        }
        for (int c = 0; c < chunks; c++, row += 2 * 32) {
            const __mmask32 m = c == chunks - 1 ? tail : (__mmask32)0xffffffffu;
            const __m512i xv =
                j < n ? _mm512_maskz_loadu_epi16(m, x + 64 * c) : _mm512_setzero_si512();
            const __m512i yv =
                j + 1 < n ? _mm512_maskz_loadu_epi16(m, x + ldb + 64 * c) : _mm512_setzero_si512();
            _mm512_storeu_si512(row, _mm512_unpacklo_epi16(xv, yv));
            _mm512_storeu_si512(row + 32, _mm512_unpackhi_epi16(xv, yv));
        }
    }
}

/* acc += P V over nk keys, V as build_b's B tiles at b: A tiles (P as bf16)
 * built into a (kgroups x 16 rows x 32 keys), then up to 4 C tiles at a
 * time next to one A and one B. */
AMX INLINE void tile_values(const float *p, int ldp, int nr, const uint16_t *b, int nk,
                            int head_dim, float *acc, int ldacc, uint16_t *a)
{
    const int chunks = (head_dim + 31) / 32, groups = 2 * chunks;
    const int kgroups = (nk + VALUE_KEYS - 1) / VALUE_KEYS;
    for (int kg = 0; kg < kgroups; kg++) {
        const int j0 = kg * VALUE_KEYS;
        for (int r = 0; r < nr; r++) {
            const float *x = p + (size_t)r * ldp + j0;
            __m512 lo =
                _mm512_maskz_loadu_ps(nk - j0 >= 16 ? 0xffff : (__mmask16)((1u << (nk - j0)) - 1),
                                      x);
            const int rest = nk - j0 - 16;
            __m512 hi = _mm512_maskz_loadu_ps(rest >= 16  ? 0xffff
                                              : rest <= 0 ? 0
                                                          : (__mmask16)((1u << rest) - 1),
                                              x + 16);
            _mm512_storeu_si512(a + ((size_t)kg * 16 + r) * VALUE_KEYS,
                                (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
        }
    }
    fj_amx_tile_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 6; t++) {
        cfg.bytes_per_row[t] = 64;
        cfg.rows[t] = t == 5 ? 16 : (uint8_t)nr; /* 0-3 C, 4 A, 5 B */
    }
    _tile_loadconfig(&cfg);
    const int64_t lda = (int64_t)ldacc * sizeof(float);
    const int64_t bstride = (int64_t)groups * 64;
    for (int g0 = 0; g0 < groups; g0 += 4) {
        const int ng = groups - g0 < 4 ? groups - g0 : 4;
        float *c0 = acc + 16 * g0;
        _tile_loadd(0, c0, lda);
        if (ng > 1) _tile_loadd(1, c0 + 16, lda);
        if (ng > 2) _tile_loadd(2, c0 + 32, lda);
        if (ng > 3) _tile_loadd(3, c0 + 48, lda);
        for (int kg = 0; kg < kgroups; kg++) {
            const uint16_t *bg = b + ((size_t)kg * groups * 16 + g0) * 32;
            _tile_loadd(4, a + (size_t)kg * 16 * VALUE_KEYS, 64);
            _tile_loadd(5, bg, bstride);
            _tile_dpbf16ps(0, 4, 5);
            if (ng > 1) {
                _tile_loadd(5, bg + 32, bstride);
                _tile_dpbf16ps(1, 4, 5);
            }
            if (ng > 2) {
                _tile_loadd(5, bg + 2 * 32, bstride);
                _tile_dpbf16ps(2, 4, 5);
            }
            if (ng > 3) {
                _tile_loadd(5, bg + 3 * 32, bstride);
                _tile_dpbf16ps(3, 4, 5);
            }
        }
        _tile_stored(0, c0, lda);
        if (ng > 1) _tile_stored(1, c0 + 16, lda);
        if (ng > 2) _tile_stored(2, c0 + 32, lda);
        if (ng > 3) _tile_stored(3, c0 + 48, lda);
    }
    _tile_release();
}

AMX static void values_amx(const float *p, int ldp, int nr, const void *v, int64_t v_ld, int nk,
                           int head_dim, float *acc, int ldacc, float *scratch, fj_prefetch_run *pf)
{
    if (nr < AMX_VALUE_ROWS) {
        widen_set->accumulate(p, ldp, nr, v, v_ld, nk, head_dim, acc, ldacc, scratch, pf);
        return;
    }
    const int kgroups = (nk + VALUE_KEYS - 1) / VALUE_KEYS;
    uint16_t *a = (uint16_t *)scratch;                   /* kgroups x 16 rows x 32 keys */
    uint16_t *b = a + (size_t)kgroups * 16 * VALUE_KEYS; /* build_b's layout */
    build_b(v, v_ld * 2, nk, head_dim, b);
    tile_values(p, ldp, nr, b, nk, head_dim, acc, ldacc, a);
}

AMX static void pack_values_amx(const void *v, int64_t v_ld, int nk, int head_dim, uint16_t *dst)
{
    build_b(v, v_ld * 2, nk, head_dim, dst);
}

AMX static void values_packed_amx(const float *p, int ldp, int nr, const void *v, int64_t v_ld,
                                  const uint16_t *packed, int nk, int head_dim, float *acc,
                                  int ldacc, float *scratch)
{
    if (nr < AMX_VALUE_ROWS) {
        widen_set->accumulate(p, ldp, nr, v, v_ld, nk, head_dim, acc, ldacc, scratch, NULL);
        return;
    }
    tile_values(p, ldp, nr, packed, nk, head_dim, acc, ldacc, (uint16_t *)scratch);
}

static pthread_once_t amx_once = PTHREAD_ONCE_INIT;
static bool amx_usable;
static fj_decode_kernels amx_set;

/* AMX-TILE, AMX-BF16 and AVX512-BF16 by CPUID, and the tile state enabled
 * in XCR0 (bits 17 and 18): not every compiler's __builtin_cpu_supports
 * knows the AMX names. */
static bool cpu_has_amx_bf16(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    const bool amx_tile = d >> 24 & 1, amx_bf16 = d >> 22 & 1;
    if (!amx_tile || !amx_bf16) return false;
    if (!__get_cpuid_count(7, 1, &a, &b, &c, &d) || !(a >> 5 & 1)) return false; /* AVX512-BF16 */
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c >> 27 & 1)) return false;         /* OSXSAVE */
    unsigned lo, hi;
    __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (lo >> 17 & 3) == 3;
}

static void amx_init(void)
{
    const fj_decode_kernels *widen = fj_decode_kernels_avx512(FJ_BF16);
    if (!widen || !cpu_has_amx_bf16()) return;
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0) return;
    widen_set = widen;
    amx_set = *widen;
    amx_set.name = "amx-bf16";
    amx_set.q_bf16 = true;
    amx_set.scores = scores_amx;
    amx_set.accumulate = values_amx;
    amx_set.pack_values = pack_values_amx;
    amx_set.accumulate_packed = values_packed_amx;
    amx_usable = true;
}

const fj_decode_kernels *fj_decode_kernels_amx(void)
{
    pthread_once(&amx_once, amx_init);
    return amx_usable ? &amx_set : NULL;
}

#else

const fj_decode_kernels *fj_decode_kernels_amx(void) { return NULL; }

#endif
