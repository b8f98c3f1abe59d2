/* The CPU tiled backend's own inner kernels (src/cpu/tiled_avx512.c,
 * tiled_avx512_bf16.c): attention on tiles of FJ_TILED_LANES query rows held
 * transposed, so that no operand is packed per call the way OpenBLAS packs
 * each sgemm's (src/cpu/tiled.c).
 *
 * A tile's queries are packed once per block of rows, transposed (query row
 * r's elements down lane r; zeros in lanes past the block's rows). Its
 * scores for nk keys come out key-major: st[j * LANES + r] = score of row r
 * against key j, so the online softmax runs down the keys with the 32 rows
 * across the vector lanes, and the accumulated output is held the same way:
 * ot[d * LANES + r] = O_acc[r][d]. Each key block's K and V are copied once
 * for all the tiles of a block of rows, into the set's own layout (a row
 * stride that spreads the rows over L1's sets; the f32 set's rows as floats,
 * the bf16 set's as bf16, V in pairs of keys): what the packed queries and
 * the copies hold is the set's business, the caller only sizes them.
 *
 * The caller sizes st for nk <= its key block and ot for head_dim. */
#ifndef FJ_CPU_TILED_KERNELS_H
#define FJ_CPU_TILED_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "flashjit.h"

/* Query rows per tile: two AVX-512 vectors of floats. */
#define FJ_TILED_LANES 32

/* The scores, softmax and values kernels take `lanes`: 32, every lane of
 * the tile, or 16, the half of it their pointers (qp, st, lo, hi, max, sum,
 * factor, ot) start at; rows stay LANES apart either way (a lane of the
 * packed queries is 4 bytes in every set, so their half starts 64 bytes
 * in). A half serves the
 * keys only one half of a tile sees (across a causal diagonal, the upper
 * rows), and a tile with only 16 rows. */
typedef struct fj_tiled_kernels {
    const char *name; /* for describe */
    /* Bytes of a tile's packed queries, and of the copy of one key block of
       `keys` keys of K (or of V), for head_dim. */
    size_t (*query_bytes)(int head_dim);
    size_t (*copy_bytes)(int head_dim, int keys);
    /* Keys [0, keys) of K (or V), dtype t, rows src_ld elements apart, into
       the set's copy at dst (copy_bytes(head_dim, keys) bytes). */
    void (*copy_keys)(void *dst, const void *src, int64_t src_ld, fj_dtype t, int keys,
                      int head_dim);
    void (*copy_values)(void *dst, const void *src, int64_t src_ld, fj_dtype t, int keys,
                        int head_dim);
    /* st[j * LANES + r] = alpha * sum over d < head_dim of q_r[d] k_{key0 + j}[d],
       j < nk: the packed queries qp against keys key0 .. key0 + nk - 1 of
       the K copy kc. */
    void (*scores)(const void *qp, int head_dim, const void *kc, int key0, int nk, float alpha,
                   float *st, int lanes);
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
     * pt[j * LANES + r] * v_{key0 + j}[d], d < head_dim: values key0 ..
     * key0 + nk - 1 of the V copy vc (only those: the keys beside them are
     * not read, whatever they hold). pt may be overwritten (the bf16 set
     * writes P's bf16 pairs over it). */
    void (*values)(float *pt, int nk, const void *vc, int key0, int head_dim, const float *factor,
                   float *ot, int lanes);
    /* The packed queries qp (query_bytes(head_dim) bytes) of rows[r] for
     * r < LANES (floats, head_dim of them); 0 for a NULL row. */
    void (*pack_queries)(const float *const *rows, int head_dim, void *qp);
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

/* The AVX-512 kernels (f32 products; f16 and bf16 widened as they are
 * copied), or NULL where the CPU (or the compiler) has no AVX-512 F, BW, VL
 * and DQ. */
const fj_tiled_kernels *fj_tiled_kernels_avx512(void);

/* The bf16 kernels: Q, K and V at bf16 and P rounded to bf16 (to nearest
 * even), their products summed in f32 by AVX-512 BF16's dot products
 * (vdpbf16ps), two elements an instruction; softmax and outputs as the
 * AVX-512 set's. bf16 problems only. NULL where the CPU (or the compiler)
 * has no AVX-512 BF16 next to the AVX-512 set's extensions. */
const fj_tiled_kernels *fj_tiled_kernels_avx512_bf16(void);

#endif
