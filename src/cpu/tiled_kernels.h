/* The CPU tiled backend's own inner kernels (src/cpu/tiled_avx512.c): attention
 * on tiles of FJ_TILED_LANES query rows held transposed, so that no operand is
 * packed per call the way OpenBLAS packs each sgemm's (src/cpu/tiled.c).
 *
 * A tile's queries are packed once per block of rows: qp[d * LANES + r] =
 * (query row r)[d] (times the scores' scale), zeros in lanes past the block's
 * rows. Its scores for nk keys come out key-major: st[j * LANES + r] = score
 * of row r against key j, so the online softmax runs down the keys with the
 * 32 rows across the vector lanes, and the accumulated output is held the
 * same way: ot[d * LANES + r] = O_acc[r][d]. K and V rows are read where they
 * lie (f32, rows ldk / ldv floats apart): the scores broadcast one key element
 * per pair of FMAs, the values one value element.
 *
 * The caller sizes st for nk <= its key block and ot, qp for head_dim. */
#ifndef FJ_CPU_TILED_KERNELS_H
#define FJ_CPU_TILED_KERNELS_H

#include <stdint.h>

#include "flashjit.h"

/* Query rows per tile: two AVX-512 vectors of floats. */
#define FJ_TILED_LANES 32

/* The scores, softmax and values kernels take `lanes`: 32, every lane of
 * the tile, or 16, the half of it their pointers (qp, st, lo, hi, max, sum,
 * factor, ot) start at; rows stay LANES apart either way. A half serves the
 * keys only one half of a tile sees (across a causal diagonal, the upper
 * rows), and a tile with only 16 rows. */
typedef struct fj_tiled_kernels {
    const char *name; /* for describe */
    /* st[j * LANES + r] = sum over d < head_dim of qp[d * LANES + r] * k[j * ldk + d], j < nk. */
    void (*scores)(const float *qp, int head_dim, const float *k, int64_t ldk, int nk, float *st,
                   int lanes);
    /* One online-softmax step, per lane r, over the scores st[j * LANES + r]
     * (j < nk, base 2): with lo and hi (lane bounds, NULL: every key seen),
     * key j is seen by lane r iff lo[r] <= j < hi[r] and the others count as
     * -inf. st becomes P = 2^(score - m) (0 for unseen keys), m the lane's
     * new running max (max[r], -inf before its first key); sum[r] is scaled
     * to m and the block's P added; factor[r] = 2^(old max - m), what the
     * lane's accumulated output is multiplied by (1 exactly when the max did
     * not move; 0 while the lane has seen no finite max). A NaN or +inf
     * score leaves the lane's sum NaN. */
    void (*softmax)(float *st, int nk, const int32_t *lo, const int32_t *hi, float *max, float *sum,
                    float *factor, int lanes);
    /* ot[d * LANES + r] = ot[d * LANES + r] * factor[r] + sum over j < nk of
     * pt[j * LANES + r] * v[j * ldv + d], d < head_dim. */
    void (*values)(const float *pt, int nk, const float *v, int64_t ldv, int head_dim,
                   const float *factor, float *ot, int lanes);
    /* qp[d * LANES + r] = alpha * rows[r][d] for r < LANES, d < head_dim;
     * 0 for a NULL row. */
    void (*pack_queries)(const float *const *rows, int head_dim, float alpha, float *qp);
    /* dst[r][d] = ot[d * LANES + r] * scale[r] for r < nrows whose dst[r] is
     * not NULL, d < head_dim, stored as dtype t (rounded to nearest-even as
     * half.h does, NaN as its NaN): a tile's output rows written where they
     * go, by streaming stores where a row starts on 64 bytes (the output is
     * not read again, so it need not come into the cache first). */
    void (*store_outputs)(const float *ot, int head_dim, void *const *dst, fj_dtype t,
                          const float *scale, int nrows);
    /* rows x cols elements of dtype t (rows src_ld elements apart) as floats
     * into dst (rows ld apart): half.h's conversions, vectorized. */
    void (*load_rows)(float *dst, int64_t ld, const void *src, int64_t src_ld, fj_dtype t, int rows,
                      int cols);
} fj_tiled_kernels;

/* The AVX-512 kernels, or NULL where the CPU (or the compiler) has no
 * AVX-512 F, BW, VL and DQ. */
const fj_tiled_kernels *fj_tiled_kernels_avx512(void);

#endif
