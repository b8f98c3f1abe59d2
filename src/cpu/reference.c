/* FJ_BACKEND_CPU_REFERENCE: the yardstick every other backend is checked
 * against. Deliberately plain: per (batch, head, block of query rows), the
 * scores S = Q K^T of the block are materialized with one sgemm, scaled (and
 * capped, with a softcap; ALiBi's bias added), softmax (with a sink in the
 * denominator, with sinks) is taken row by row in float32 (max-subtracted, so stable), and O = P V is a
 * second sgemm. The block height keeps the score workspace under
 * SCORE_BYTES_PER_THREAD at any sequence length.
 *
 * A plan also runs any problem that differs from its own only in shorter
 * sequences (seqlen_q, seqlen_k and diag_offset; batch at most its own):
 * the blocks are counted at each execute and the workspace holds the
 * plan's lengths. Variable-length batches (varlen.c) run each sequence so. */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cpu/blas_threads.h"
#include "cpu/cpu_ops.h"
#include "context.h"
#include "convert.h"
#include "pool.h"
#include "status.h"
#include "tensor_access.h"
#include "vmath.h"

#define SCORE_BYTES_PER_THREAD (64u << 20)
#define MAX_BLOCK_ROWS 128

typedef struct ref_plan {
    fj_pool *pool;
    int block_rows;
    size_t ws_floats; /* per worker */
    float *workspace; /* pool threads x ws_floats */
} ref_plan;

typedef struct ref_job {
    const ref_plan *plan;
    const fj_problem *p;
    const void *q, *k, *v;
    void *o;
    float *lse;
    const fj_exec_inputs *in;
    int64_t blocks_per_head; /* ceil(p->seqlen_q / block_rows) */
} ref_job;

static void ref_task(void *arg, int64_t task, int worker)
{
    const ref_job *j = arg;
    const ref_plan *rp = j->plan;
    const fj_problem *p = j->p;
    const int D = p->head_dim, Dv = p->head_dim_v; /* Q and K's; V and O's */
    const int64_t per_batch = (int64_t)p->heads_q * j->blocks_per_head;
    const int64_t b = task / per_batch;
    const int64_t h = (task % per_batch) / j->blocks_per_head;
    const int64_t blk = task % j->blocks_per_head;
    const int64_t hk = h / p->group;
    const int64_t i0 = blk * rp->block_rows;
    const int64_t rows = p->seqlen_q - i0 < rp->block_rows ? p->seqlen_q - i0 : rp->block_rows;

    /* The keys any row of the block sees: one interval, as every row's is. */
    int64_t jlo = p->seqlen_k, jhi = 0;
    for (int64_t r = 0; r < rows; r++) {
        int64_t lo, hi;
        fj_visible_keys(p, i0 + r, &lo, &hi);
        if (lo >= hi) continue;
        if (lo < jlo) jlo = lo;
        if (hi > jhi) jhi = hi;
    }
    const int64_t nk = jhi > jlo ? jhi - jlo : 0;

    float *qf = rp->workspace + (size_t)worker * rp->ws_floats;
    float *of = qf + (size_t)rp->block_rows * D;
    float *kf = of + (size_t)rp->block_rows * Dv;
    float *vf = kf + (size_t)p->seqlen_k * D;
    float *sc = vf + (size_t)p->seqlen_k * Dv;

    if (nk > 0) {
        fj_load_f32(qf, D, fj_row_ptr(j->q, p->dtype, p->q_stride, b, i0, h), p->dtype,
                    p->q_stride[FJ_AXIS_SEQ], rows, D);
        fj_load_f32(kf, D, fj_row_ptr(j->k, p->dtype, p->k_stride, b, jlo, hk), p->dtype,
                    p->k_stride[FJ_AXIS_SEQ], nk, D);
        fj_load_f32(vf, Dv, fj_row_ptr(j->v, p->dtype, p->v_stride, b, jlo, hk), p->dtype,
                    p->v_stride[FJ_AXIS_SEQ], nk, Dv);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)nk, D, 1.0f, qf, D, kf,
                    D, 0.0f, sc, (int)nk);
    }
    const float slope = p->alibi ? j->in->alibi_slopes[h] : 0.0f;
    const float sink = p->sinks ? j->in->sinks[h] : -INFINITY;
    for (int64_t r = 0; r < rows; r++) {
        int64_t lo, hi;
        fj_visible_keys(p, i0 + r, &lo, &hi);
        float *row = sc + r * nk;
        /* A row that sees no key: lse = the sink (-inf without one), O = 0. */
        float row_lse = sink;
        if (lo < hi) {
            const int64_t klo = lo;
            lo -= jlo;
            hi -= jlo;
            float *vis = row + lo;
            int64_t n = hi - lo;
            /* capped: c tanh(q.k scale / c) with scale / c in one factor
               (validation keeps it finite; 1 / c alone can overflow) */
            if (p->softcap > 0.0f)
                fj_vsoftcap(vis, n, (float)((double)p->scale / p->softcap), p->softcap);
            else fj_vscale(vis, n, p->scale);
            if (p->alibi)
                for (int64_t c = 0; c < n; c++) vis[c] += fj_alibi_bias(p, slope, i0 + r, klo + c);
            float m = fj_vmax(vis, n);
            float sum = fj_vexp_scaled_sum(vis, n, 1.0f, m);
            /* The sink joins the max and the denominator after the keys (as
               the online backends do, so non-finite rows agree). */
            float f = p->sinks ? fj_sink_join(sink, &m, &sum, false) : 1.0f;
            fj_vscale(vis, n, f / sum);
            memset(row, 0, (size_t)lo * sizeof(float));
            memset(row + hi, 0, (size_t)(nk - hi) * sizeof(float));
            row_lse = m + logf(sum);
        } else if (nk > 0) {
            memset(row, 0, (size_t)nk * sizeof(float));
        }
        if (j->lse) j->lse[(b * p->heads_q + h) * p->seqlen_q + i0 + r] = row_lse;
    }
    if (nk > 0)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows, Dv, (int)nk, 1.0f, sc,
                    (int)nk, vf, Dv, 0.0f, of, Dv);
    else memset(of, 0, (size_t)rows * Dv * sizeof(float));
    /* A row that sees no key is exactly 0 whatever V holds: its zero weights
       times a NaN in V are NaN in the product above. */
    for (int64_t r = 0; nk > 0 && r < rows; r++) {
        int64_t lo, hi;
        fj_visible_keys(p, i0 + r, &lo, &hi);
        if (lo >= hi) memset(of + r * Dv, 0, (size_t)Dv * sizeof(float));
    }
    fj_store_f32(fj_row_ptr_mut(j->o, p->dtype, p->o_stride, b, i0, h), p->dtype,
                 p->o_stride[FJ_AXIS_SEQ], of, Dv, rows, Dv);
}

static fj_status ref_plan_create(fj_context *ctx, const fj_problem *p, const char *config,
                                 void **state, fj_strbuf *describe)
{
    *state = NULL;
    if (config)
        return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                       "cpu-reference has no configuration to choose (got '%s')", config);
    const int dmax = p->head_dim > p->head_dim_v ? p->head_dim : p->head_dim_v;
    if (p->seqlen_k > INT32_MAX / 2 || (int64_t)p->seqlen_k * dmax > INT32_MAX)
        return fj_fail(FJ_ERR_UNSUPPORTED,
                       "cpu-reference: seqlen_k (%d) x %s (%d) is beyond what one BLAS call can "
                       "index (int)",
                       p->seqlen_k, p->head_dim_v > p->head_dim ? "head_dim_v" : "head_dim", dmax);
    ref_plan *rp = calloc(1, sizeof *rp);
    if (!rp) return fj_fail(FJ_ERR_OUT_OF_MEMORY, "cpu-reference: out of memory for the plan");
    int64_t rows = SCORE_BYTES_PER_THREAD / ((uint64_t)p->seqlen_k * sizeof(float));
    if (rows > MAX_BLOCK_ROWS) rows = MAX_BLOCK_ROWS;
    if (rows > p->seqlen_q) rows = p->seqlen_q;
    if (rows < 1) rows = 1;
    rp->block_rows = (int)rows;
    rp->pool = ctx->pool;
    int threads = fj_pool_threads(ctx->pool);
    /* q and o rows of the block, k and v rows of every key, the scores */
    const size_t dims = (size_t)p->head_dim + (size_t)p->head_dim_v;
    rp->ws_floats = (size_t)rows * dims + (size_t)p->seqlen_k * dims + (size_t)rows * p->seqlen_k;
    rp->ws_floats =
        (rp->ws_floats + 15) & ~(size_t)15; /* keep each worker's part 64-byte aligned */
    size_t bytes;
    if (__builtin_mul_overflow(rp->ws_floats * sizeof(float), (size_t)threads, &bytes) ||
        !(rp->workspace = aligned_alloc(64, bytes))) {
        size_t mib = rp->ws_floats * sizeof(float) * (size_t)threads >> 20;
        free(rp);
        return fj_fail(FJ_ERR_OUT_OF_MEMORY,
                       "cpu-reference: cannot allocate %zu MiB of workspace (%d threads)", mib,
                       threads);
    }
    fj_strbuf_printf(describe,
                     "backend: cpu-reference\n"
                     "method: materialized scores per block of %d query rows (sgemm, row softmax, "
                     "sgemm)\n"
                     "workspace: %.1f MiB per thread, %d threads\n",
                     rp->block_rows, (double)(rp->ws_floats * sizeof(float)) / (1 << 20), threads);
    *state = rp;
    return FJ_OK;
}

static fj_status ref_execute(const void *state, const fj_problem *p, const void *q, const void *k,
                             const void *v, void *o, float *lse, const fj_exec_inputs *in,
                             void *stream)
{
    (void)stream;
    const ref_plan *rp = state;
    /* the blocks of this problem's rows (a varlen sequence's may be fewer
       than the plan's) */
    ref_job job = {.plan = rp, .p = p, .q = q, .k = k, .v = v, .o = o, .lse = lse, .in = in};
    job.blocks_per_head = ((int64_t)p->seqlen_q + rp->block_rows - 1) / rp->block_rows;
    int64_t tasks = (int64_t)p->batch * p->heads_q * job.blocks_per_head;
    fj_cpu_pool_run(rp->pool, tasks, ref_task, &job);
    return FJ_OK;
}

static void ref_plan_destroy(void *state)
{
    ref_plan *rp = state;
    if (!rp) return;
    free(rp->workspace);
    free(rp);
}

static void ref_info(const void *state, fj_plan_info *info)
{
    const ref_plan *rp = state;
    snprintf(info->kernel, sizeof info->kernel, "cpu_reference");
    info->threads = fj_pool_threads(rp->pool);
}

const fj_backend_ops fj_cpu_reference_ops = {
    .kind = FJ_BACKEND_CPU_REFERENCE,
    .name = "cpu-reference",
    .plan_create = ref_plan_create,
    .execute = ref_execute,
    .plan_destroy = ref_plan_destroy,
    .info = ref_info,
    FJ_CPU_SHARED_OPS,
};
