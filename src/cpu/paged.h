/* The paged KV cache (FJ_FEATURE_PAGED_KV) on the CPU backends: the rules
 * of an execute's block table and KV lengths, and one sequence's keys and
 * values copied out of the page pools for the paths that read them as one
 * tensor (the decode path reads the pages in place). src/cpu/varlen.c runs
 * the sequences. */
#ifndef FJ_CPU_PAGED_H
#define FJ_CPU_PAGED_H

#include <stdint.h>

#include "pool.h"
#include "problem.h"

/* A run of consecutive pages of one sequence, copied with one memcpy per
 * tensor when the pool is dense. */
typedef struct fj_paged_run {
    int32_t first_page;  /* in the pool */
    int first_key, keys; /* of the sequence */
} fj_paged_run;

/* Sequence b's `keys` keys (checked: its block-table entries are in the
 * pool) as the dense [keys, heads_kv, head_dim] and [keys, heads_kv,
 * head_dim_v] tensors *kb and *vb: the
 * pools themselves when its pages are one run of a pool laid out densely
 * (no copy), else buf_k and buf_v (seqlen_k keys each) filled from the
 * pages, a run of consecutive pages at a time, on the pool's workers when
 * there is much to copy (buf_k's rows head_dim, buf_v's head_dim_v). runs:
 * room for max_pages runs. */
void fj_cpu_paged_keys(const fj_problem *p, fj_pool *pool, const void *k, const void *v, int b,
                       const int32_t *block_table, int keys, void *buf_k, void *buf_v,
                       fj_paged_run *runs, const void **kb, const void **vb);

#endif
