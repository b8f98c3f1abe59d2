/* fj_merge on the host, shared by both CPU backends (their ops tables point
 * here): each row (b, h, i) reads its two lse values, then its two O rows in
 * chunks converted to float32, and writes the merged row and lse
 * (docs/semantics.md, "Merging"). A row's inputs are read before its outputs
 * are written, so o = o_a (same strides) and lse = lse_a merge in place.
 * Large merges run on the context's worker pool, in tasks of whole rows. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "backend.h"
#include "context.h"
#include "cpu/convert.h"
#include "cpu/tensor_access.h"
#include "pool.h"

/* Elements of a row converted at a time (stack buffers). */
#define CHUNK 256
/* Below this many output elements the caller's thread does it all. */
#define POOL_MIN_ELEMENTS (1 << 16)
/* Elements per pool task, about. */
#define TASK_ELEMENTS (1 << 14)

typedef struct merge_job {
    const fj_merge_problem *m;
    const void *o_a, *o_b;
    const float *lse_a, *lse_b;
    void *o;
    float *lse;
    int64_t rows_per_task, rows;
} merge_job;

/* Row r of the lse layout [batch, heads_q, seqlen_q]. */
static void merge_row(const merge_job *j, int64_t r)
{
    const fj_merge_problem *m = j->m;
    const int64_t i = r % m->seqlen_q, h = r / m->seqlen_q % m->heads_q,
                  b = r / m->seqlen_q / m->heads_q;
    const float la = j->lse_a[r], lb = j->lse_b[r];
    const void *ra = fj_row_ptr(j->o_a, m->dtype, m->a_stride, b, i, h);
    const void *rb = fj_row_ptr(j->o_b, m->dtype, m->b_stride, b, i, h);
    void *ro = fj_row_ptr_mut(j->o, m->dtype, m->o_stride, b, i, h);
    const size_t es = fj_dtype_size(m->dtype);
    float row_lse, ca = 0.0f, cb = 0.0f, fill = 0.0f;
    bool use_a = false, use_b = false;
    const float mx = fmaxf(la, lb);
    if (isnan(la) || isnan(lb)) { /* fmaxf passes over NaN: the row is NaN */
        row_lse = fill = NAN;
    } else if (mx == -INFINITY) { /* neither side saw a key */
        row_lse = -INFINITY;
    } else {
        /* an lse of +inf gives inf - inf = NaN here, and a NaN row */
        const float wa = expf(la - mx), wb = expf(lb - mx), sum = wa + wb;
        ca = wa / sum;
        cb = wb / sum;
        use_a = wa != 0.0f; /* a side of weight 0 is not read */
        use_b = wb != 0.0f;
        row_lse = mx + logf(sum);
    }
    float a[CHUNK], bv[CHUNK], out[CHUNK];
    for (int64_t c0 = 0; c0 < m->head_dim; c0 += CHUNK) {
        const int64_t n = m->head_dim - c0 < CHUNK ? m->head_dim - c0 : CHUNK;
        if (use_a) fj_load_f32(a, 0, (const char *)ra + c0 * es, m->dtype, 0, 1, n);
        if (use_b) fj_load_f32(bv, 0, (const char *)rb + c0 * es, m->dtype, 0, 1, n);
        for (int64_t c = 0; c < n; c++) {
            float v = fill;
            if (use_a) v = ca * a[c];
            if (use_b) v = use_a ? v + cb * bv[c] : cb * bv[c];
            out[c] = v;
        }
        fj_store_f32((char *)ro + c0 * es, m->dtype, 0, out, 0, 1, n);
    }
    if (j->lse) j->lse[r] = row_lse;
}

static void merge_task(void *arg, int64_t task, int worker)
{
    (void)worker;
    const merge_job *j = arg;
    const int64_t r0 = task * j->rows_per_task;
    const int64_t r1 = r0 + j->rows_per_task < j->rows ? r0 + j->rows_per_task : j->rows;
    for (int64_t r = r0; r < r1; r++) merge_row(j, r);
}

fj_status fj_cpu_merge(fj_context *ctx, const fj_merge_problem *m, const void *o_a,
                       const float *lse_a, const void *o_b, const float *lse_b, void *o, float *lse,
                       void *stream)
{
    (void)stream;
    merge_job j = {m, o_a, o_b, lse_a, lse_b, o, lse, 0, 0};
    j.rows = (int64_t)m->batch * m->heads_q * m->seqlen_q;
    j.rows_per_task = TASK_ELEMENTS / m->head_dim > 0 ? TASK_ELEMENTS / m->head_dim : 1;
    const int64_t tasks = (j.rows + j.rows_per_task - 1) / j.rows_per_task;
    if (j.rows * m->head_dim < POOL_MIN_ELEMENTS || fj_pool_threads(ctx->pool) == 1 || tasks == 1)
        for (int64_t t = 0; t < tasks; t++) merge_task(&j, t, 0);
    else fj_pool_run(ctx->pool, tasks, merge_task, &j);
    return FJ_OK;
}
