/* The decode path's generic kernels (decode_kernels.h), for CPUs without
 * AVX-512 (and for the tests that force them): 8-float vectors (GCC/clang
 * vector extensions), compiled for AVX2 and the baseline by target_clones.
 * f16 and bf16 rows, and f32 rows whose length is not a multiple of 8, are
 * converted into the scratch buffer first, padded with zeros; other f32 rows
 * are read where they lie.
 *
 * Scores go 8 keys at a time per query row, summed across lanes together by
 * a transpose-and-add tree; values by 64 columns (8 vectors) of one row's
 * accumulator at a time. The prefetch run goes a line for each line read
 * from memory: between the rows converted, or in the first query row's pass
 * over rows read in place. */
#include "decode_kernels.h"

#include <stddef.h>
#include <string.h>

#include "convert.h"
#include "multiversion.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=fast")
#endif
#if defined(__GNUC__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

#if FJ_MULTIVERSION /* multiversion.h */
#define GENERIC_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define GENERIC_CLONES
#endif

typedef float vfloat __attribute__((vector_size(32)));
typedef int32_t vint __attribute__((vector_size(32)));
#define LANES 8
#define INLINE static inline __attribute__((always_inline))

INLINE vfloat vload(const float *p)
{
    vfloat v;
    memcpy(&v, p, sizeof v);
    return v;
}

INLINE void vstore(float *p, vfloat v) { memcpy(p, &v, sizeof v); }

#if defined(__clang__)
#define SHUF(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#else
#define SHUF(a, b, ...) __builtin_shuffle(a, b, (vint){__VA_ARGS__})
#endif

/* Lane i of the result: the sum of a[i]'s 8 lanes. */
INLINE vfloat sum8(const vfloat a[8])
{
    vfloat t[4], u[2];
    for (int i = 0; i < 4; i++) /* [a0+a1, b0+b1, a2+a3, b2+b3, ...] of a = a[2i], b = a[2i+1] */
        t[i] = SHUF(a[2 * i], a[2 * i + 1], 0, 8, 2, 10, 4, 12, 6, 14) +
               SHUF(a[2 * i], a[2 * i + 1], 1, 9, 3, 11, 5, 13, 7, 15);
    for (int i = 0; i < 2; i++) /* keys 4i..4i+3: sums of lanes 0-3, then of lanes 4-7 */
        u[i] = SHUF(t[2 * i], t[2 * i + 1], 0, 1, 8, 9, 4, 5, 12, 13) +
               SHUF(t[2 * i], t[2 * i + 1], 2, 3, 10, 11, 6, 7, 14, 15);
    return SHUF(u[0], u[1], 0, 1, 2, 3, 8, 9, 10, 11) +
           SHUF(u[0], u[1], 4, 5, 6, 7, 12, 13, 14, 15);
}

static int round_up(int x, int m) { return (x + m - 1) / m * m; }

/* The block's rows as floats: in place when they are f32 rows a multiple of
 * 8 long, else converted into scratch (rows dpad apart, zeros past
 * head_dim up to a multiple of 8). */
static const float *float_rows(const void *x, int64_t ld, int n, int head_dim, fj_dtype t,
                               float *scratch, int64_t *ldf, fj_prefetch_run *pf)
{
    if (t == FJ_F32 && head_dim % LANES == 0) {
        *ldf = ld;
        return x;
    }
    const int dpad = round_up(head_dim, FJ_DECODE_PAD);
    if (pf->next < pf->end) { /* a row at a time, the run's lines between */
        const int64_t es = t == FJ_F32 ? 4 : 2;
        const int lines = (int)((head_dim * es + 63) / 64);
        for (int j = 0; j < n; j++) {
            fj_load_f32(scratch + (size_t)j * dpad, dpad, (const char *)x + j * ld * es, t, ld, 1,
                        head_dim);
            fj_prefetch_lines(pf, lines);
        }
    } else {
        fj_load_f32(scratch, dpad, x, t, ld, n, head_dim);
    }
    const int end = round_up(head_dim, LANES);
    for (int j = 0; j < n; j++)
        for (int c = head_dim; c < end; c++) scratch[(size_t)j * dpad + c] = 0.0f;
    *ldf = dpad;
    return scratch;
}

GENERIC_CLONES
static void scores_rows(const float *q, int ldq, int nr, const float *k, int64_t ldk, int nk,
                        int head_dim, float alpha, float *s, int lds, fj_prefetch_run *pf)
{
    const int nv = round_up(head_dim, LANES) / LANES;
    for (int j0 = 0; j0 < nk; j0 += LANES) {
        const int n = nk - j0 < LANES ? nk - j0 : LANES;
        const float *key[LANES];
        for (int i = 0; i < LANES; i++) key[i] = k + (j0 + (i < n ? i : n - 1)) * ldk;
        for (int r = 0; r < nr; r++) {
            const float *qr = q + (size_t)r * ldq;
            vfloat acc[LANES] = {{0}};
            for (int c = 0; c < nv; c++) {
                vfloat qv = vload(qr + LANES * c);
                for (int i = 0; i < LANES; i++) acc[i] += vload(key[i] + LANES * c) * qv;
                /* the first row's pass reads the keys: a line of each per two vectors */
                if (r == 0 && (c & 1)) fj_prefetch_lines(pf, LANES);
            }
            vfloat sc = sum8(acc) * alpha;
            float *out = s + (size_t)r * lds + j0;
            if (n == LANES) vstore(out, sc);
            else
                for (int i = 0; i < n; i++) out[i] = sc[i];
        }
    }
}

GENERIC_CLONES
static void accumulate_rows(const float *p, int ldp, int nr, const float *v, int64_t ldv, int nk,
                            int head_dim, float *acc, int ldacc, fj_prefetch_run *pf)
{
    const int cols = round_up(head_dim, LANES);
    for (int r = 0; r < nr; r++) {
        const float *pr = p + (size_t)r * ldp;
        float *ar = acc + (size_t)r * ldacc;
        int c0 = 0;
        for (; c0 + 8 * LANES <= cols; c0 += 8 * LANES) {
            vfloat a[8];
            for (int c = 0; c < 8; c++) a[c] = vload(ar + c0 + LANES * c);
            for (int j = 0; j < nk; j++) {
                const float *row = v + j * ldv + c0;
                for (int c = 0; c < 8; c++) a[c] += pr[j] * vload(row + LANES * c);
                if (r == 0) fj_prefetch_lines(pf, 4); /* the first row's pass reads the values */
            }
            for (int c = 0; c < 8; c++) vstore(ar + c0 + LANES * c, a[c]);
        }
        for (; c0 < cols; c0 += LANES) {
            vfloat a = vload(ar + c0);
            for (int j = 0; j < nk; j++) {
                a += pr[j] * vload(v + j * ldv + c0);
                if (r == 0 && (j & 1)) fj_prefetch_lines(pf, 1);
            }
            vstore(ar + c0, a);
        }
    }
}

#define GENERIC_SET(suffix, dtype)                                                                \
    static void scores_##suffix(const void *q, int ldq, int nr, const void *k, int64_t k_ld,      \
                                int nk, int head_dim, float alpha, float *s, int lds,             \
                                float *scratch, fj_prefetch_run *pf)                              \
    {                                                                                             \
        fj_prefetch_run pc = fj_prefetch_copy(pf);                                                \
        int64_t ldk;                                                                              \
        const float *kf = float_rows(k, k_ld, nk, head_dim, dtype, scratch, &ldk, &pc);           \
        scores_rows(q, ldq, nr, kf, ldk, nk, head_dim, alpha, s, lds, &pc);                       \
        fj_prefetch_return(&pc, pf);                                                              \
    }                                                                                             \
    static void accumulate_##suffix(const float *p, int ldp, int nr, const void *v, int64_t v_ld, \
                                    int nk, int head_dim, float *acc, int ldacc, float *scratch,  \
                                    fj_prefetch_run *pf)                                          \
    {                                                                                             \
        fj_prefetch_run pc = fj_prefetch_copy(pf);                                                \
        int64_t ldv;                                                                              \
        const float *vf = float_rows(v, v_ld, nk, head_dim, dtype, scratch, &ldv, &pc);           \
        accumulate_rows(p, ldp, nr, vf, ldv, nk, head_dim, acc, ldacc, &pc);                      \
        fj_prefetch_return(&pc, pf);                                                              \
    }

GENERIC_SET(f32, FJ_F32)
GENERIC_SET(f16, FJ_F16)
GENERIC_SET(bf16, FJ_BF16)

static const fj_decode_kernels sets[] = {
    {.name = "generic", .scores = scores_f32, .accumulate = accumulate_f32},
    {.name = "generic", .scores = scores_f16, .accumulate = accumulate_f16},
    {.name = "generic", .scores = scores_bf16, .accumulate = accumulate_bf16},
};

const fj_decode_kernels *fj_decode_kernels_generic(fj_dtype dtype)
{
    return &sets[dtype == FJ_F32 ? 0 : dtype == FJ_F16 ? 1 : 2];
}
