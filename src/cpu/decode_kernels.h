/* The decode path's inner kernels (src/cpu/decode.c): a block of up to a
 * few hundred keys against the few query rows of one kv head, reading K and
 * V where they lie, at their stored width.
 *
 * Two sets: AVX-512 (decode_avx512.c; f32, f16 and bf16 rows converted in
 * registers as they are loaded, and with AVX-512 BF16 the bf16 products as
 * dot products of bf16 pairs) and generic (decode_generic.c; 8-float vector
 * extensions compiled for AVX2 and the baseline, rows converted to float in a
 * scratch buffer first). The plan picks one set for the problem's dtype and
 * the CPU it runs on; fj_cpu_decode_force (decode.h) makes it take the
 * generic one on any CPU. */
#ifndef FJ_CPU_DECODE_KERNELS_H
#define FJ_CPU_DECODE_KERNELS_H

#include <stdbool.h>
#include <stdint.h>

#include "flashjit.h"

/* Floats or bf16 elements a query row and an accumulator row are padded to
 * (zeros past head_dim): every kernel reads and writes whole vectors of them. */
#define FJ_DECODE_PAD 32

/* Most keys one kernel call takes: the scratch buffers are sized by it. */
#define FJ_DECODE_MAX_BLOCK 256

typedef struct fj_decode_kernels {
    const char *name; /* "avx512-bf16", "avx512", "generic" for describe */
    /* The queries the scores kernel takes are bf16 (the problem's own bf16
       values, as they are) rather than float. */
    bool q_bf16;
    /* s[r * lds + j] = alpha * (q_r . key j) for r < nr, j < nk: q_r the
       r-th row of q (ldq elements apart, float or bf16 by q_bf16, zeros past
       head_dim up to a multiple of FJ_DECODE_PAD), key j at k + j * k_ld
       elements of the dtype. scratch: FJ_DECODE_MAX_BLOCK x padded head_dim
       floats (the generic set converts rows there). */
    void (*scores)(const void *q, int ldq, int nr, const void *k, int64_t k_ld, int nk,
                   int head_dim, float alpha, float *s, int lds, float *scratch);
    /* acc[r * ldacc + c] += sum over j < nk of p[r * ldp + j] * value j [c]
       for r < nr and c < head_dim, value j at v + j * v_ld elements;
       acc rows padded to a multiple of FJ_DECODE_PAD floats, and the pad
       must stay 0 (0 is added to it). p and scratch as above. */
    void (*accumulate)(const float *p, int ldp, int nr, const void *v, int64_t v_ld, int nk,
                       int head_dim, float *acc, int ldacc, float *scratch);
} fj_decode_kernels;

/* The AVX-512 set for dtype, or NULL where the CPU (or the compiler) has no
 * AVX-512F and AVX-512BW; for bf16 with AVX-512 BF16, its dot-product
 * kernels. */
const fj_decode_kernels *fj_decode_kernels_avx512(fj_dtype dtype);

/* The generic set for dtype; never NULL. */
const fj_decode_kernels *fj_decode_kernels_generic(fj_dtype dtype);

#endif
