/* The tiled backend's bf16 kernels (tiled_kernels.h): Q Kᵀ and P V as
 * AVX-512 BF16 dot products (vdpbf16ps: per f32 lane, the products of a
 * pair of bf16 elements added to it), so a bf16 problem's operands are
 * read at their width and each instruction does two elements' products:
 * half the instructions and half the bytes of the AVX-512 set's widened
 * floats for the same work.
 *
 * Layouts, each a pair of bf16 in 32 bits (the lower element in the lower
 * half):
 *   queries: qp[p * LANES + r] = (q_r[2p], q_r[2p + 1]), p < ceil(D / 2),
 *            q_r[D] = 0 when D is odd;
 *   K copy:  key j's row of bf16 (a zero after it when D is odd), rows
 *            key_ld elements apart;
 *   V copy:  keys 2i and 2i + 1 side by side per column, pair row i at
 *            i * value_ld pairs: vc[i][d] = (v_2i[d], v_2i+1[d]); the
 *            second 0 past an odd block's last key.
 * Scores: per pair of head-dim elements, the tile's two query vectors
 * loaded once and each of 12 keys' pairs broadcast into two dot products
 * (24 accumulators), as the AVX-512 set goes per element. Values: P of two
 * keys rounded to bf16 (nearest even, as a GPU kernel rounds P before its
 * MMA) and paired per lane, written over the scores' first rows; then per
 * pair of keys, 12 columns' value pairs broadcast into two dot products. A
 * range that starts or ends in the middle of a pair takes that key alone
 * with an f32 FMA, so the keys beside a range are never multiplied (an
 * infinite value there must not turn its 0 weight into NaN).
 *
 * Chosen wherever the CPU has AVX-512 BF16: where measured without AMX the
 * dot products issue at the FMAs' rate, so twice the products a cycle
 * (docs/benchmarks.md, "bf16 prefill on AVX-512 BF16 dot products");
 * decode_avx512.c notes a CPU where they issued at half that rate, one with
 * AMX, whose bf16 prefill goes to prefill_amx.c (chosen in decode.c)
 * before the tiled path.
 *
 * vdpbf16ps treats subnormal bf16 inputs as 0 and flushes subnormal
 * results (as the AMX tiles do): a subnormal K or V element counts as 0,
 * which moves an output by less than 2^-126 (the weights sum to 1). P is
 * never subnormal (the softmax's exp2 gives 0 below 2^-126).
 * The softmax and the output stores are the AVX-512 set's. */
#include "tiled_kernels.h"
#include "tiled_groups.h"

#include <stddef.h>
#include <string.h>

#include "half.h"

/* clang's AddressSanitizer makes these fully unrolled kernels very slow to
 * compile (as tiled_avx512.c says), so those builds go without them. */
#if defined(__clang__) && defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FJ_AVX512_BF16_TILED_SKIPPED 1
#endif
#endif

#if defined(__x86_64__) && defined(__GNUC__) && !defined(FJ_NO_MULTIVERSION) && \
    !defined(FJ_AVX512_BF16_TILED_SKIPPED)

#include <immintrin.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#define BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))
#define INLINE static inline __attribute__((always_inline))
#if defined(__clang__)
#define UNROLL _Pragma("clang loop unroll(full)")
#else
#define UNROLL _Pragma("GCC unroll 16")
#endif

#define L FJ_TILED_LANES
#define GROUP FJ_TILED_GROUP

/* The copies and the packed queries are written as uint16/uint32 and read
   as pairs: through this type, which may alias either. */
typedef uint32_t __attribute__((may_alias)) pair_t;

static int pairs_of(int head_dim) { return (head_dim + 1) / 2; }

/* Elements between K rows, and pairs between V pair rows: whole 64-byte
   lines, an odd number of them (tiled.c says why). */
static int64_t key_ld(int head_dim)
{
    const int64_t lines = ((int64_t)pairs_of(head_dim) * 4 + 63) / 64;
    return (lines % 2 ? lines : lines + 1) * 32;
}

static int64_t value_ld(int head_dim)
{
    const int64_t lines = ((int64_t)head_dim * 4 + 63) / 64;
    return (lines % 2 ? lines : lines + 1) * 16;
}

static size_t query_bytes(int head_dim) { return (size_t)pairs_of(head_dim) * L * 4; }

static size_t copy_bytes(int head_dim, int keys)
{
    const size_t k = (size_t)keys * (size_t)key_ld(head_dim) * 2;
    const size_t v = (size_t)((keys + 1) / 2) * (size_t)value_ld(head_dim) * 4;
    return k > v ? k : v;
}

static inline __mmask16 first(int n) /* the first n (0..16) lanes */
{
    return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1);
}

/* ---- copies and packing ----------------------------------------------------- */

BF16 static void copy_keys(void *dst, const void *src, int64_t src_ld, fj_dtype t, int keys,
                           int head_dim)
{
    (void)t; /* bf16 only (fj_cpu_tiled_kernels) */
    const int64_t ld = key_ld(head_dim);
    for (int j = 0; j < keys; j++) {
        uint16_t *row = (uint16_t *)dst + (size_t)j * ld;
        memcpy(row, (const uint16_t *)src + (size_t)j * src_ld, (size_t)head_dim * 2);
        if (head_dim % 2) row[head_dim] = 0;
    }
}

BF16 static void copy_values(void *dst, const void *src, int64_t src_ld, fj_dtype t, int keys,
                             int head_dim)
{
    (void)t;
    const int64_t ld = value_ld(head_dim);
    for (int j = 0; j < keys; j += 2) {
        const uint16_t *x = (const uint16_t *)src + (size_t)j * src_ld;
        const uint16_t *y = j + 1 < keys ? x + src_ld : NULL;
        pair_t *row = (pair_t *)dst + (size_t)(j / 2) * ld;
        for (int d = 0; d < head_dim; d += 16) {
            const __mmask16 m = first(head_dim - d);
            const __m512i lo = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, x + d));
            const __m512i hi = y ? _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, y + d))
                                 : _mm512_setzero_si512();
            _mm512_mask_storeu_epi32(row + d, m, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
        }
    }
}

/* The rows are floats widened from bf16 (tiled.c loads them so): rounding
   them back is exact. */
BF16 static void pack_queries(const float *const *rows, int head_dim, void *packed)
{
    pair_t *qp = packed;
    const int pairs = pairs_of(head_dim);
    for (int p = 0; p < pairs; p++)
        for (int r = 0; r < L; r++) {
            uint32_t lo = 0, hi = 0;
            if (rows[r]) {
                lo = fj_f32_to_bf16(rows[r][2 * p]);
                if (2 * p + 1 < head_dim) hi = fj_f32_to_bf16(rows[r][2 * p + 1]);
            }
            qp[(size_t)p * L + r] = lo | hi << 16;
        }
}

/* ---- scores ------------------------------------------------------------------ */

/* Keys [0, NR) of k (rows ld elements apart) against V vectors of lanes. */
BF16 INLINE void scores_keys(const int V, const int NR, const pair_t *qp, int pairs,
                             const uint16_t *k, int64_t ld, __m512 alpha, float *st)
{
    __m512 c[2][GROUP];
    const pair_t *kr[GROUP];
    UNROLL for (int u = 0; u < NR; u++)
    {
        UNROLL for (int h = 0; h < V; h++) c[h][u] = _mm512_setzero_ps();
        kr[u] = (const pair_t *)(k + (size_t)u * ld);
    }
    for (int p = 0; p < pairs; p++) {
        __m512bh a[2];
        UNROLL for (int h = 0; h < V; h++) a[h] =
            (__m512bh)_mm512_loadu_si512(qp + (size_t)p * L + 16 * h);
        UNROLL for (int u = 0; u < NR; u++)
        {
            const __m512bh b = (__m512bh)_mm512_set1_epi32((int)kr[u][p]);
            UNROLL for (int h = 0; h < V; h++) c[h][u] = _mm512_dpbf16_ps(c[h][u], a[h], b);
        }
    }
    UNROLL for (int u = 0; u < NR; u++)
    {
        UNROLL for (int h = 0; h < V; h++)
            _mm512_storeu_ps(st + u * L + 16 * h, _mm512_mul_ps(c[h][u], alpha));
    }
}

BF16 INLINE void scores_any(const int V, const pair_t *qp, int pairs, const uint16_t *k, int64_t ld,
                            int nk, float alpha, float *st)
{
    const __m512 a = _mm512_set1_ps(alpha);
#define STEP(NR, at) scores_keys(V, NR, qp, pairs, k + (size_t)(at)*ld, ld, a, st + (size_t)(at)*L)
    FJ_TILED_GROUPS(nk, STEP);
#undef STEP
}

BF16 static void scores(const void *qp, int head_dim, const void *kc, int key0, int nk, float alpha,
                        float *st, int lanes)
{
    const int64_t ld = key_ld(head_dim);
    const uint16_t *k = (const uint16_t *)kc + (size_t)key0 * ld;
    if (lanes > 16) scores_any(2, qp, pairs_of(head_dim), k, ld, nk, alpha, st);
    else scores_any(1, qp, pairs_of(head_dim), k, ld, nk, alpha, st);
}

/* ---- values ------------------------------------------------------------------ */

/* A key's value element as a float: the lower or upper bf16 of a pair. */
INLINE float pair_lo(uint32_t x) { return fj_bf16_to_f32((uint16_t)(x & 0xffff)); }
INLINE float pair_hi(uint32_t x) { return fj_bf16_to_f32((uint16_t)(x >> 16)); }

/* The shape of a range of keys in the V copy's pairs: `lead` (0 or 1) keys
   alone at its start (the upper half of pair row first - 1), `pairs` whole
   pair rows from row `first`, then `tail` (0 or 1) key alone (the lower
   half of row first + pairs). Its P: the lead key's row 0 of pt (f32), the
   pairs' rows lead .. lead + pairs - 1 (bf16 pairs, written there), the
   tail's row lead + 2 pairs (f32). */
typedef struct key_run {
    int lead, pairs, tail;
    int64_t first;
} key_run;

/* Columns [0, NR) of the V copy from column d0 (pair rows ld apart): ot
 * rows 0..NR-1 (V vectors of lanes) rescaled and accumulated. */
BF16 INLINE void values_cols(const int V, const int NR, const float *pt, const pair_t *vc,
                             int64_t ld, const key_run *kr, const __m512 *f, float *ot)
{
    __m512 c[2][GROUP];
    UNROLL for (int u = 0; u < NR; u++)
    {
        UNROLL for (int h = 0; h < V; h++) c[h][u] =
            _mm512_mul_ps(_mm512_loadu_ps(ot + u * L + 16 * h), f[h]);
    }
    if (kr->lead) {
        const pair_t *vr = vc + (size_t)(kr->first - 1) * ld;
        __m512 a[2];
        UNROLL for (int h = 0; h < V; h++) a[h] = _mm512_loadu_ps(pt + 16 * h);
        UNROLL for (int u = 0; u < NR; u++)
        {
            const __m512 b = _mm512_set1_ps(pair_hi(vr[u]));
            UNROLL for (int h = 0; h < V; h++) c[h][u] = _mm512_fmadd_ps(a[h], b, c[h][u]);
        }
    }
    const pair_t *pp = (const pair_t *)(pt + (size_t)kr->lead * L);
    for (int i = 0; i < kr->pairs; i++) {
        const pair_t *vr = vc + (size_t)(kr->first + i) * ld;
        __m512bh a[2];
        UNROLL for (int h = 0; h < V; h++) a[h] =
            (__m512bh)_mm512_loadu_si512(pp + (size_t)i * L + 16 * h);
        UNROLL for (int u = 0; u < NR; u++)
        {
            const __m512bh b = (__m512bh)_mm512_set1_epi32((int)vr[u]);
            UNROLL for (int h = 0; h < V; h++) c[h][u] = _mm512_dpbf16_ps(c[h][u], a[h], b);
        }
    }
    if (kr->tail) {
        const pair_t *vr = vc + (size_t)(kr->first + kr->pairs) * ld;
        const float *pr = pt + (size_t)(kr->lead + 2 * kr->pairs) * L;
        __m512 a[2];
        UNROLL for (int h = 0; h < V; h++) a[h] = _mm512_loadu_ps(pr + 16 * h);
        UNROLL for (int u = 0; u < NR; u++)
        {
            const __m512 b = _mm512_set1_ps(pair_lo(vr[u]));
            UNROLL for (int h = 0; h < V; h++) c[h][u] = _mm512_fmadd_ps(a[h], b, c[h][u]);
        }
    }
    UNROLL for (int u = 0; u < NR; u++)
    {
        UNROLL for (int h = 0; h < V; h++) _mm512_storeu_ps(ot + u * L + 16 * h, c[h][u]);
    }
}

/* P of the run's pairs as bf16 pairs per lane, over pt's rows from `lead`:
   pair i (P rows lead + 2i and lead + 2i + 1) goes to row lead + i, which
   neither the pairs after it nor the tail's row still to be read are. */
BF16 INLINE void pair_probabilities(const int V, float *pt, const key_run *kr)
{
    float *base = pt + (size_t)kr->lead * L;
    for (int i = 0; i < kr->pairs; i++) UNROLL for (int h = 0; h < V; h++)
        {
            const __m512 x = _mm512_loadu_ps(base + (size_t)(2 * i) * L + 16 * h);
            const __m512 y = _mm512_loadu_ps(base + (size_t)(2 * i + 1) * L + 16 * h);
            const __m512i lo = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(x));
            const __m512i hi = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(y));
            _mm512_storeu_si512(base + (size_t)i * L + 16 * h,
                                _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
        }
}

BF16 INLINE void values_any(const int V, float *pt, int nk, const void *vcopy, int key0,
                            int head_dim, const float *factor, float *ot)
{
    key_run kr;
    kr.lead = key0 % 2 && nk > 0;
    kr.first = (key0 + kr.lead) / 2;
    kr.pairs = (nk - kr.lead) / 2;
    kr.tail = nk - kr.lead - 2 * kr.pairs;
    pair_probabilities(V, pt, &kr);
    const int64_t ld = value_ld(head_dim);
    const pair_t *vc = vcopy;
    __m512 f[2];
    UNROLL for (int h = 0; h < V; h++) f[h] = _mm512_loadu_ps(factor + 16 * h);
#define STEP(NR, at) values_cols(V, NR, pt, vc + (at), ld, &kr, f, ot + (size_t)(at)*L)
    FJ_TILED_GROUPS(head_dim, STEP);
#undef STEP
}

/* P's bf16 pairs are written over pt (tiled_kernels.h allows it). */
BF16 static void values(float *pt, int nk, const void *vc, int key0, int head_dim,
                        const float *factor, float *ot, int lanes)
{
    if (lanes > 16) values_any(2, pt, nk, vc, key0, head_dim, factor, ot);
    else values_any(1, pt, nk, vc, key0, head_dim, factor, ot);
}

/* ---- the set ------------------------------------------------------------------- */

static pthread_once_t bf16_once = PTHREAD_ONCE_INIT;
static fj_tiled_kernels bf16_set;
static bool bf16_usable;

static void bf16_init(void)
{
    const fj_tiled_kernels *base = fj_tiled_kernels_avx512();
    __builtin_cpu_init();
    if (!base || !__builtin_cpu_supports("avx512bf16")) return;
    bf16_set = *base; /* its softmax, output stores and row loads */
    bf16_set.name = "avx512-bf16-dot";
    bf16_set.query_bytes = query_bytes;
    bf16_set.copy_bytes = copy_bytes;
    bf16_set.copy_keys = copy_keys;
    bf16_set.copy_values = copy_values;
    bf16_set.scores = scores;
    bf16_set.values = values;
    bf16_set.pack_queries = pack_queries;
    bf16_usable = true;
}

const fj_tiled_kernels *fj_tiled_kernels_avx512_bf16(void)
{
    pthread_once(&bf16_once, bf16_init);
    return bf16_usable ? &bf16_set : NULL;
}

#else

const fj_tiled_kernels *fj_tiled_kernels_avx512_bf16(void) { return NULL; }

#endif
