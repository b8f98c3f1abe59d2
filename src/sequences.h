/* The rules of a varlen batch's and a paged cache's arrays (src/sequences.c). */
#ifndef FJ_SEQUENCES_H
#define FJ_SEQUENCES_H

#include "problem.h"

/* Every rule of in's cu_seqlens_q, cu_seqlens_k, seqused_k and block_table
 * for p (FJ_FEATURE_VARLEN, FJ_FEATURE_PAGED_KV), the arrays in host
 * memory; FJ_ERR_INVALID_ARGUMENT naming the array, the index and the rule.
 * Only the block-table entries a sequence uses are read. */
fj_status fj_sequences_check(const fj_problem *p, const fj_exec_inputs *in);

#endif
