/* Candidates checked against the CPU reference before they are timed
 * (src/tune/check.c): verdicts per kernel (head dim, dtype, causal kind,
 * tiles), each reached once. */
#ifndef FJ_TUNE_CHECK_H
#define FJ_TUNE_CHECK_H

#include "flashjit.h"
#include "tune/target.h"

typedef struct fj_tune_kernels {
    fj_tune_kernel *k;
    int count, cap;
} fj_tune_kernels;

/* The kernel of d's head dim, dtype and causal kind with these tiles, added
 * (unchecked) when new; NULL when out of memory. The pointer is valid until
 * the next call adds one. */
fj_tune_kernel *fj_tune_kernel_of(fj_tune_kernels *t, const fj_attention_desc *d,
                                  const char *tiles);
void fj_tune_kernels_free(fj_tune_kernels *t);

typedef struct fj_tune_reference fj_tune_reference;

typedef struct fj_tune_checker {
    fj_context *ctx;         /* the backend tuned */
    fj_context *ref;         /* the CPU reference */
    int seqlen_q, seqlen_k;  /* of the check problem */
    fj_tune_reference *refs; /* one per (head dim, dtype, causal kind), made when first needed */
    int nrefs, cap;
} fj_tune_checker;

/* The check problem's seqlens are a little past largest_block (the largest
 * rows or keys of a block of any candidate), so every tile shape meets a
 * partial edge tile. */
void fj_tune_checker_init(fj_tune_checker *c, fj_context *ctx, fj_context *ref, int largest_block);
void fj_tune_checker_free(fj_tune_checker *c);

/* Runs k's tiles on the check problem (batch 1, 2 heads) and sets its
 * verdict: PRUNED when the plan cannot be made (the reason is the error),
 * WRONG or CORRECT by the error against the reference. Returns FJ_OK unless
 * something that is not the candidate's fault failed (memory, the
 * reference). */
fj_status fj_tune_check_kernel(fj_tune_checker *c, fj_tune_kernel *k);

#endif
