/* The decode path's inner kernels (src/cpu/decode.c): a block of up to a
 * few hundred keys against the few query rows of one kv head, reading K and
 * V where they lie, at their stored width.
 *
 * Three sets: AMX (decode_amx.c; bf16 scores as tile products, values as
 * AVX-512's), AVX-512 (decode_avx512.c; f16 and bf16 rows widened to float
 * in registers or, for many query rows, a group of keys at a time in L1,
 * f32 rows read in place) and generic (decode_generic.c; 8-float vector
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

/* Keys per group of packed values (pack_values below). */
#define FJ_DECODE_PACK_KEYS 32

/* A run of bytes [next, end) that a kernel call prefetches while it computes,
 * in address order, one 64-byte line for each line of K or V it reads, and
 * leaves `next` where it stopped: what the task reads after the call's piece
 * (src/cpu/decode.c, read_stream). Loads that jump between the heads of a
 * key (the kernels read one head's part of a piece's rows, then the next
 * head's) leave the hardware's stream prefetchers idle and the read at half
 * its rate; a sequential stream of prefetches spread over the compute keeps
 * them going (docs/benchmarks.md, "Decode on the GQA rows: a prefetch stream
 * in address order"). NULL or empty: none. The AVX-512 and generic sets
 * prefetch it; the AMX scores take it and prefetch nothing (not measured on
 * a CPU with AMX). */
typedef struct fj_prefetch_run {
    const char *next, *end;
} fj_prefetch_run;

/* A kernel call's run in locals (an empty one for NULL), which inlining keeps
 * in registers, and where it stopped given back to the caller's. */
static inline fj_prefetch_run fj_prefetch_copy(const fj_prefetch_run *pf)
{
    fj_prefetch_run r = {NULL, NULL};
    if (pf) r = *pf;
    return r;
}

static inline void fj_prefetch_return(const fj_prefetch_run *local, fj_prefetch_run *pf)
{
    if (pf) pf->next = local->next;
}

/* The next n lines of run r (those left), one for each line of K or V just
 * read; into L2 (prefetcht1), not L1: the run starts pieces ahead of the
 * loads, more bytes than L1 holds next to the task's queries, scores and
 * accumulators (prefetcht0 was measured slower: docs/benchmarks.md). */
static inline __attribute__((always_inline)) void fj_prefetch_lines(fj_prefetch_run *r, int n)
{
    for (int i = 0; i < n && r->next < r->end; i++, r->next += 64)
        __builtin_prefetch(r->next, 0, 2);
}

typedef struct fj_decode_kernels {
    const char *name; /* "avx512-bf16", "avx512", "generic" for describe */
    /* The queries the scores kernel takes are bf16 (the problem's own bf16
       values, as they are) rather than float. */
    bool q_bf16;
    /* NULL, or the order the kernels keep columns in, within each chunk of
       32: position i of a chunk holds column order[i] of it (the kernels
       widen bf16 to float by interleaving, which leaves them so). Query rows
       must be given in that order, and accumulator rows come back in it. */
    const uint8_t *order;
    /* s[r * lds + j] = alpha * (q_r . key j) for r < nr, j < nk: q_r the
       r-th row of q (ldq elements apart, float or bf16 by q_bf16, zeros past
       head_dim up to a multiple of FJ_DECODE_PAD), key j at k + j * k_ld
       elements of the dtype. scratch: FJ_DECODE_MAX_BLOCK x padded head_dim
       floats. pf: what to prefetch meanwhile (may be NULL). */
    void (*scores)(const void *q, int ldq, int nr, const void *k, int64_t k_ld, int nk,
                   int head_dim, float alpha, float *s, int lds, float *scratch,
                   fj_prefetch_run *pf);
    /* acc[r * ldacc + c] += sum over j < nk of p[r * ldp + j] * value j [c]
       for r < nr and c < head_dim, value j at v + j * v_ld elements;
       acc rows padded to a multiple of FJ_DECODE_PAD floats, and the pad
       must stay 0 (0 is added to it). p, scratch and pf as above. */
    void (*accumulate)(const float *p, int ldp, int nr, const void *v, int64_t v_ld, int nk,
                       int head_dim, float *acc, int ldacc, float *scratch, fj_prefetch_run *pf);
    /* Optional (NULL in sets without it): values packed once for many
       calls. pack_values writes nk keys of V (from key 0, v_ld elements
       apart) into dst, FJ_DECODE_PACK_KEYS keys at a time, padded with zero
       keys to a multiple of it: round_up(nk, FJ_DECODE_PACK_KEYS) x padded
       head_dim bf16, key j's group at dst + j x padded head_dim.
       accumulate_packed is accumulate with V also as packed from the
       block's first key (a multiple of FJ_DECODE_PACK_KEYS past the packed
       start); v is still given for the kernels that read it in place. */
    void (*pack_values)(const void *v, int64_t v_ld, int nk, int head_dim, uint16_t *dst);
    void (*accumulate_packed)(const float *p, int ldp, int nr, const void *v, int64_t v_ld,
                              const uint16_t *packed, int nk, int head_dim, float *acc, int ldacc,
                              float *scratch);
} fj_decode_kernels;

/* The AVX-512 set for dtype, or NULL where the CPU (or the compiler) has no
 * AVX-512 F, BW, VL and DQ. */
const fj_decode_kernels *fj_decode_kernels_avx512(fj_dtype dtype);

/* The bf16 set on AVX-512 BF16 dot products (decode_avx512.c: bf16 rows read
 * at their width, P rounded to bf16), or NULL where the CPU has no AVX-512
 * BF16 next to the AVX-512 set's extensions. */
const fj_decode_kernels *fj_decode_kernels_avx512_bf16_dot(void);

/* The bf16 set with its scores on AMX tiles (decode_amx.c), or NULL where
 * the CPU has no AMX-BF16 or the OS refuses the tile state. */
const fj_decode_kernels *fj_decode_kernels_amx(void);

/* The generic set for dtype; never NULL. */
const fj_decode_kernels *fj_decode_kernels_generic(fj_dtype dtype);

#endif
