/* The rules of a variable-length batch's and a paged KV cache's arrays
 * (include/flashjit.h, fj_execute_extras), on host copies of them: the CPU
 * backends check them at every execute (their arrays are host memory), the
 * CUDA backend under FLASHJIT_CHECK=1 (it copies its device arrays back
 * first). Every value an execute will use is read before anything is
 * written: an entry outside the pool or a length past the table's pages is
 * an error naming it, never a read out of bounds. */
#include <stdio.h>
#include <string.h>

#include "sequences.h"
#include "status.h"

static fj_status paged_check(const fj_problem *p, const fj_exec_inputs *in)
{
    const int32_t *len = in->seqused_k, *bt = in->block_table;
    const int64_t table_keys = (int64_t)p->max_pages * p->page_size;
    for (int b = 0; b < p->batch; b++) {
        if (len[b] < 0 || len[b] > p->seqlen_k)
            return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                           "seqused_k[%d] (%d) must be in [0, seqlen_k = %d]: sequence %d's KV "
                           "length, at most the plan's seqlen_k",
                           b, (int)len[b], p->seqlen_k, b);
        if (len[b] > table_keys)
            return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                           "seqused_k[%d] (%d) is past the block table's pages: a row names "
                           "max_pages (%d) pages of page_size (%d) keys, %lld keys at most",
                           b, (int)len[b], p->max_pages, p->page_size, (long long)table_keys);
        const int pages = (int)(((int64_t)len[b] + p->page_size - 1) / p->page_size);
        const int32_t *row = bt + (int64_t)b * p->bt_stride;
        for (int j = 0; j < pages; j++)
            if (row[j] < 0 || row[j] >= p->num_pages)
                return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                               "block_table[%d][%d] (%d, entry %lld) is outside the pools: a "
                               "page must be in [0, num_pages = %d) (sequence %d's %d keys use "
                               "its first %d entries)",
                               b, j, (int)row[j], (long long)b * p->bt_stride + j, p->num_pages, b,
                               (int)len[b], pages);
    }
    return FJ_OK;
}

fj_status fj_sequences_check(const fj_problem *p, const fj_exec_inputs *in)
{
    const struct {
        const char *name, *rows, *limit_name, *total_name, *tensors;
        const int32_t *cu;
        int limit;
        int32_t total;
    } side[2] = {
        {"cu_seqlens_q", "queries", "seqlen_q", "total_q", "q, o and lse", in->cu_seqlens_q,
         p->seqlen_q, in->total_q},
        {"cu_seqlens_k", "keys", "seqlen_k", "total_k", "k and v", in->cu_seqlens_k, p->seqlen_k,
         in->total_k},
    };
    /* paged: no cu_seqlens_k (the keys are in the pages; paged.c checks
       seqused_k and the block table); paged alone: no arrays here */
    const int sides = p->varlen ? (p->paged ? 1 : 2) : 0;
    for (int s = 0; s < sides; s++) {
        const int32_t *cu = side[s].cu;
        if (cu[0] != 0)
            return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                           "%s[0] (%d) must be 0: the first sequence starts at the first token",
                           side[s].name, (int)cu[0]);
        for (int b = 0; b < p->batch; b++) {
            if (cu[b + 1] < cu[b])
                return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                               "%s[%d] (%d) is below %s[%d] (%d): the offsets must not decrease "
                               "(sequence %d would have a negative length)",
                               side[s].name, b + 1, (int)cu[b + 1], side[s].name, b, (int)cu[b], b);
            const int64_t len = (int64_t)cu[b + 1] - cu[b];
            /* with seqused_k, the keys used are bounded below, not those held */
            if (len > side[s].limit && !(s == 1 && in->seqused_k))
                return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                               "sequence %d has %lld %s (%s[%d] - %s[%d]), more than the "
                               "plan's %s (%d), the most a sequence may have",
                               b, (long long)len, side[s].rows, side[s].name, b + 1, side[s].name,
                               b, side[s].limit_name, side[s].limit);
        }
        if (cu[p->batch] > side[s].total)
            return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                           "%s[batch = %d] (%d) is past %s (%d), the tokens %s hold", side[s].name,
                           p->batch, (int)cu[p->batch], side[s].total_name, (int)side[s].total,
                           side[s].tensors);
    }
    if (p->paged) return paged_check(p, in);
    const int32_t *ck = in->cu_seqlens_k, *used = in->seqused_k;
    for (int b = 0; used && b < p->batch; b++) {
        const int64_t held = (int64_t)ck[b + 1] - ck[b];
        if (used[b] < 0 || used[b] > held)
            return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                           "seqused_k[%d] (%d) must be in [0, %lld], the keys of sequence %d "
                           "(cu_seqlens_k[%d] - cu_seqlens_k[%d])",
                           b, (int)used[b], (long long)held, b, b + 1, b);
        if (used[b] > p->seqlen_k)
            return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                           "seqused_k[%d] (%d) is more than the plan's seqlen_k (%d), the most "
                           "keys a sequence may use",
                           b, (int)used[b], p->seqlen_k);
    }
    return FJ_OK;
}
