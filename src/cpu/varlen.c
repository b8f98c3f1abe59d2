/* Variable-length batches (FJ_FEATURE_VARLEN) and the paged KV cache
 * (FJ_FEATURE_PAGED_KV, with or without varlen) on the two CPU backends.
 *
 * A varlen plan holds the backend's plan for one sequence of the longest
 * lengths (batch 1, seqlen_q and seqlen_k the desc's, the packed strides)
 * and runs each sequence of an execute through it as a problem of its own:
 * batch 1, its own query and key counts (so causal and window alignment and
 * ALiBi's offset are its own), its tensors' first token at cu_seqlens_q[b]
 * and cu_seqlens_k[b] of the packed q, k, v and o. Both backends' executes
 * take a problem that differs from their plan's only in shorter sequences
 * (reference.c counts its blocks per execute; tiled.c's blocks of rows past
 * a shorter sequence's last find no rows and write nothing, and it reads
 * every key range from the problem). The CPU tiled backend's plan is its
 * tiled path, never the decode path, whose key chunks are fixed at plan time
 * for one key length: its blocks are chosen as a plan of that one sequence
 * would choose them (tuning entry, shipped table or heuristic) and given to
 * it.
 *
 * The dense path writes lse as [heads_q, seqlen_q] of its one sequence;
 * varlen's lse is [heads_q, total_q] (a row of every token of the batch,
 * as FlashAttention's varlen writes it, and as fj_merge reads a packed
 * batch: batch 1, seqlen_q total_q). So with lse wanted, each sequence's lse
 * goes through a plan-owned buffer of heads_q x seqlen_q floats into its
 * place; a lock keeps concurrent executes of one plan from sharing it (the
 * context's pool runs one job at a time anyway).
 *
 * Before anything is written, every value of cu_seqlens_q, cu_seqlens_k and
 * seqused_k is checked against the rules of include/flashjit.h
 * (fj_execute_extras): a bad batch writes nothing.
 *
 * A paged plan whose rows per kv head the decode path takes (at most
 * FJ_CPU_DECODE_MAX_ROWS: decode, speculative decode; on the cpu backend,
 * no configuration given) is a decode plan of the whole batch instead
 * (decode.c, fj_cpu_decode_takes_paged): one pass over the pool's workers
 * runs every sequence as a problem of its own lengths, K and V read
 * through the block table where they lie in the pools, nothing copied, lse
 * written in its place; the chunks of keys follow each execute's lengths.
 *
 * Any other paged plan runs the same way as varlen: each sequence a
 * problem of its own lengths (seqlen_q query rows, or its cu_seqlens_q
 * share with varlen too; seqused_k[b] keys), its keys and values those
 * paged.c copies out of its pages into plan-owned dense buffers of
 * seqlen_k keys (or the pools themselves when the pages are one run of a
 * dense pool), which the one sequence's plan was made for. Dense queries
 * (paged alone) place sequence b at q's and o's batch stride and its lse
 * at [b, heads_q, seqlen_q], as a dense problem's. The buffers make such a
 * plan's executes take turns (the lock). Either way the block table and
 * the lengths are checked in full first (paged.c). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "context.h"
#include "cpu/cpu_ops.h"
#include "cpu/decode.h"
#include "cpu/paged.h"
#include "sequences.h"
#include "cpu/tiled_blocks.h"
#include "pool.h"
#include "status.h"

typedef struct varlen_plan {
    const fj_backend_ops *dense; /* the backend's ops for one dense problem */
    void *inner;                 /* its plan for one sequence of the longest lengths */
    fj_problem one;              /* that problem */
    bool tiled;                  /* the CPU tiled backend (its blocks chosen here) */
    bool varlen, paged;          /* the features it runs */
    fj_tiles_source tiles_from;  /* where those blocks came from */
    float *lse_rows;             /* [heads_q, seqlen_q]: one sequence's lse before its place */
    pthread_mutex_t lse_lock;    /* one execute at a time uses lse_rows and the paged buffers */
    fj_pool *pool;               /* paged: the copies' workers */
    void *keys, *values;         /* paged: one sequence's [seqlen_k, heads_kv, head_dim
                                    (values: head_dim_v)] */
    fj_paged_run *runs;          /* paged: [max_pages] runs of one sequence's pages */
    fj_cpu_decode_plan *decode;  /* paged, decode-shaped: the whole batch, nothing copied */
} varlen_plan;

static fj_status varlen_execute(const void *state, const fj_problem *p, const void *q,
                                const void *k, const void *v, void *o, float *lse,
                                const fj_exec_inputs *in, void *stream)
{
    const varlen_plan *vp = state;
    fj_status s = fj_sequences_check(p, in);
    if (s) return s;
    if (vp->decode) { /* every sequence at once, K and V read in the pools */
        fj_cpu_decode_execute(vp->decode, p, q, k, v, o, lse, in);
        return FJ_OK;
    }
    const int64_t es = (int64_t)fj_dtype_size(p->dtype);
    const int32_t *cq = in->cu_seqlens_q, *ck = in->cu_seqlens_k, *used = in->seqused_k;
    /* varlen's lse goes through lse_rows; paged's keys through the buffers */
    const bool locked = (lse && p->varlen) || p->paged;
    pthread_mutex_t *lock = (pthread_mutex_t *)&vp->lse_lock;
    if (locked) pthread_mutex_lock(lock);
    for (int b = 0; b < p->batch && !s; b++) {
        /* the sequence's first query row and output row: its token
           (varlen), or its batch entry */
        const int64_t q0 =
            p->varlen ? cq[b] * p->q_stride[FJ_AXIS_SEQ] : (int64_t)b * p->q_stride[FJ_AXIS_BATCH];
        const int64_t o0 =
            p->varlen ? cq[b] * p->o_stride[FJ_AXIS_SEQ] : (int64_t)b * p->o_stride[FJ_AXIS_BATCH];
        const int sq = p->varlen ? (int)(cq[b + 1] - cq[b]) : p->seqlen_q;
        const int sk = used ? used[b] : (int)(ck[b + 1] - ck[b]);
        if (sq == 0) continue; /* no rows: nothing to write */
        fj_problem one = vp->one;
        one.seqlen_q = sq;
        one.seqlen_k = sk;
        one.diag_offset = one.causal == FJ_CAUSAL_TOP_LEFT ? 0 : (int64_t)sk - sq;
        const void *kb, *vb;
        if (p->paged) {
            fj_cpu_paged_keys(p, vp->pool, k, v, b, in->block_table, sk, vp->keys, vp->values,
                              vp->runs, &kb, &vb);
        } else {
            kb = (const char *)k + ck[b] * p->k_stride[FJ_AXIS_SEQ] * es;
            vb = (const char *)v + ck[b] * p->v_stride[FJ_AXIS_SEQ] * es;
        }
        float *lse_b = !lse ? NULL : p->varlen ? vp->lse_rows : lse + (int64_t)b * p->heads_q * sq;
        s = vp->dense->execute(vp->inner, &one, (const char *)q + q0 * es, kb, vb,
                               (char *)o + o0 * es, lse_b, in, stream);
        for (int h = 0; lse && p->varlen && !s && h < p->heads_q; h++)
            memcpy(lse + (int64_t)h * in->total_q + cq[b], vp->lse_rows + (int64_t)h * sq,
                   (size_t)sq * sizeof(float));
    }
    if (locked) pthread_mutex_unlock(lock);
    return s;
}

static void varlen_plan_destroy(void *state)
{
    varlen_plan *vp = state;
    if (!vp) return;
    if (vp->inner) vp->dense->plan_destroy(vp->inner);
    fj_cpu_decode_plan_destroy(vp->decode);
    pthread_mutex_destroy(&vp->lse_lock);
    free(vp->lse_rows);
    free(vp->keys);
    free(vp->values);
    free(vp->runs);
    free(vp);
}

/* A decode-shaped paged problem on the tiled backend: one decode plan for
 * the whole batch (src/cpu/decode.c), each sequence as a problem of its own
 * lengths within one pass over the pool's workers, K and V read through
 * the block table where they lie: no buffers, no copy, and lse written in
 * its place directly. */
static fj_status paged_decode_plan_create(fj_context *ctx, const fj_problem *p, void **state,
                                          fj_strbuf *describe)
{
    varlen_plan *vp = calloc(1, sizeof *vp);
    if (!vp) return fj_fail(FJ_ERR_OUT_OF_MEMORY, "cpu: out of memory for the plan");
    pthread_mutex_init(&vp->lse_lock, NULL);
    vp->dense = &fj_cpu_tiled_ops;
    vp->tiled = true;
    vp->varlen = p->varlen;
    vp->paged = true;
    fj_status s = fj_cpu_decode_plan_create(ctx->pool, p, &vp->decode, describe);
    if (s) {
        varlen_plan_destroy(vp);
        return s;
    }
    fj_strbuf_printf(describe,
                     "sequences: %d, %s, each its own problem (at most %d query rows and %d "
                     "keys) within one pass of the decode path above\n"
                     "paged: K and V in pools of %d pages of %d keys, a block table of %d "
                     "columns (row stride %d); the decode path reads them through the block "
                     "table (no copy)\n",
                     p->batch, p->varlen ? "queries packed along the token axis" : "dense queries",
                     p->seqlen_q, p->seqlen_k, p->num_pages, p->page_size, p->max_pages,
                     p->bt_stride);
    *state = vp;
    return FJ_OK;
}

static fj_status varlen_plan_create(fj_context *ctx, const fj_problem *p, const char *config,
                                    void **state, fj_strbuf *describe, const fj_backend_ops *dense,
                                    bool tiled)
{
    *state = NULL;
    if (tiled && !config && p->paged && fj_cpu_decode_takes_paged(p))
        return paged_decode_plan_create(ctx, p, state, describe);
    size_t lse_bytes;
    if (__builtin_mul_overflow((size_t)p->heads_q * sizeof(float), (size_t)p->seqlen_q, &lse_bytes))
        return fj_fail(FJ_ERR_OUT_OF_MEMORY,
                       "%s: heads_q (%d) x seqlen_q (%d) floats of lse buffer overflow",
                       dense->name, p->heads_q, p->seqlen_q);
    varlen_plan *vp = calloc(1, sizeof *vp);
    if (!vp) return fj_fail(FJ_ERR_OUT_OF_MEMORY, "%s: out of memory for the plan", dense->name);
    if (!(vp->lse_rows = malloc(lse_bytes))) {
        free(vp);
        return fj_fail(FJ_ERR_OUT_OF_MEMORY,
                       "%s: cannot allocate %zu KiB for one sequence's lse (heads_q x seqlen_q "
                       "floats)",
                       dense->name, lse_bytes >> 10);
    }
    pthread_mutex_init(&vp->lse_lock, NULL);
    vp->dense = dense;
    vp->tiled = tiled;
    vp->varlen = p->varlen;
    vp->paged = p->paged;
    vp->one = *p;
    vp->one.varlen = false;
    vp->one.batch = 1;
    vp->tiles_from = FJ_TILES_GIVEN;
    size_t kv_bytes = 0, v_bytes = 0;
    if (p->paged) {
        /* each sequence's keys and values: dense [seqlen_k, heads_kv,
           head_dim] and [seqlen_k, heads_kv, head_dim_v] buffers (or a
           dense pool's pages in place) */
        const int dims[2] = {p->head_dim, p->head_dim_v};
        vp->one.paged = false;
        vp->one.page_size = vp->one.num_pages = vp->one.max_pages = vp->one.bt_stride = 0;
        for (int t = 0; t < 2; t++) {
            const int64_t row = (int64_t)p->heads_kv * dims[t];
            int64_t *st = t ? vp->one.v_stride : vp->one.k_stride;
            st[FJ_AXIS_BATCH] = row * p->seqlen_k;
            st[FJ_AXIS_SEQ] = row;
            st[FJ_AXIS_HEAD] = dims[t];
        }
        vp->pool = ctx->pool;
        const size_t es = fj_dtype_size(p->dtype), keys = (size_t)p->seqlen_k;
        if (__builtin_mul_overflow((size_t)p->heads_kv * (size_t)p->head_dim * es, keys,
                                   &kv_bytes) ||
            __builtin_mul_overflow((size_t)p->heads_kv * (size_t)p->head_dim_v * es, keys,
                                   &v_bytes) ||
            !(vp->keys = malloc(kv_bytes ? kv_bytes : 1)) ||
            !(vp->values = malloc(v_bytes ? v_bytes : 1)) ||
            !(vp->runs = malloc(sizeof *vp->runs * (size_t)p->max_pages))) {
            varlen_plan_destroy(vp);
            return fj_fail(FJ_ERR_OUT_OF_MEMORY,
                           "%s: cannot allocate %zu + %zu MiB for one sequence's keys and values "
                           "(seqlen_k %d x heads_kv %d x head_dim %d, head_dim_v %d) copied out "
                           "of the pages",
                           dense->name, kv_bytes >> 20, v_bytes >> 20, p->seqlen_k, p->heads_kv,
                           p->head_dim, p->head_dim_v);
        }
    }

    /* The tiled backend: its tiled path with the blocks a plan of the one
       sequence would choose (config NULL would take the decode path for few
       rows, whose key chunks hold for one key length only). */
    char tiles[32];
    const char *cfg = config, *why = "given";
    fj_cpu_tiled_blocks blocks;
    fj_status s = FJ_OK;
    if (tiled && !config) {
        s = fj_cpu_tiled_choose_blocks(ctx, &vp->one, NULL, fj_pool_threads(ctx->pool), &blocks);
        if (!s) {
            fj_cpu_tiled_config_name(blocks.block_q, blocks.block_k, tiles, sizeof tiles);
            cfg = tiles;
            why = blocks.source;
            vp->tiles_from = blocks.from;
        }
    }
    if (!s) s = dense->plan_create(ctx, &vp->one, cfg, &vp->inner, describe);
    if (s) {
        varlen_plan_destroy(vp);
        return s;
    }
    char key[FJ_PROBLEM_KEY_MAX];
    fj_problem_key_of(&vp->one, key, sizeof key);
    if (p->varlen)
        fj_strbuf_printf(describe,
                         "varlen: %d sequences packed along the token axis, each run as its own "
                         "problem (its lengths, at most those of %s) through the plan above%s%s%s; "
                         "%zu bytes for one sequence's lse\n",
                         p->batch, key, tiled ? " (its tiled path; blocks: " : "", tiled ? why : "",
                         tiled ? ")" : "", lse_bytes);
    else
        fj_strbuf_printf(describe,
                         "sequences: %d, each run as its own problem (%d query rows, its KV "
                         "length of at most those of %s) through the plan above%s%s%s\n",
                         p->batch, p->seqlen_q, key, tiled ? " (its tiled path; blocks: " : "",
                         tiled ? why : "", tiled ? ")" : "");
    if (p->paged)
        fj_strbuf_printf(describe,
                         "paged: K and V in pools of %d pages of %d keys, a block table of %d "
                         "columns (row stride %d); each sequence's keys copied out of its pages, "
                         "a run of consecutive pages at a time (none when they are one run of a "
                         "dense pool), into %zu + %zu bytes\n",
                         p->num_pages, p->page_size, p->max_pages, p->bt_stride, kv_bytes, v_bytes);
    *state = vp;
    return FJ_OK;
}

static fj_status tiled_varlen_plan_create(fj_context *ctx, const fj_problem *p, const char *config,
                                          void **state, fj_strbuf *describe)
{
    return varlen_plan_create(ctx, p, config, state, describe, &fj_cpu_tiled_ops, true);
}

static fj_status reference_varlen_plan_create(fj_context *ctx, const fj_problem *p,
                                              const char *config, void **state, fj_strbuf *describe)
{
    return varlen_plan_create(ctx, p, config, state, describe, &fj_cpu_reference_ops, false);
}

static void varlen_info(const void *state, fj_plan_info *info)
{
    const varlen_plan *vp = state;
    if (vp->decode) fj_cpu_decode_plan_info(vp->decode, info);
    else vp->dense->info(vp->inner, info);
    size_t n = strlen(info->kernel);
    snprintf(info->kernel + n, sizeof info->kernel - n, "%s%s", vp->varlen ? "_varlen" : "",
             vp->paged ? "_paged" : "");
    if (vp->tiled && !vp->decode) info->tiles_source = vp->tiles_from;
}

const fj_backend_ops fj_cpu_tiled_sequence_ops = {
    .kind = FJ_BACKEND_CPU,
    .name = "cpu",
    .plan_create = tiled_varlen_plan_create,
    .execute = varlen_execute,
    .plan_destroy = varlen_plan_destroy,
    .info = varlen_info,
    FJ_CPU_SHARED_OPS,
};

const fj_backend_ops fj_cpu_reference_sequence_ops = {
    .kind = FJ_BACKEND_CPU_REFERENCE,
    .name = "cpu-reference",
    .plan_create = reference_varlen_plan_create,
    .execute = varlen_execute,
    .plan_destroy = varlen_plan_destroy,
    .info = varlen_info,
    FJ_CPU_SHARED_OPS,
};
