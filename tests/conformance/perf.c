#include "perf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cli_problem.h"
#include "harness.h"
#include "tune/measure.h"

void fjt_perf_header(void) { cli_table_header(); }

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static size_t elem_size(fj_dtype t) { return t == FJ_F32 ? 4 : 2; }

fj_status fjt_perf_row(const fjt_case *c, fj_context *ctx, uint64_t suite_seed, int warmup,
                       int repeat, char *why, size_t why_n)
{
    const fj_attention_desc *d = &c->d;
    fj_plan *plan = NULL;
    fj_status s = fjt_case_plan(c, ctx, &plan); /* with the case's knob */
    snprintf(why, why_n, "%s", s ? fj_last_error() : "");
    if (s) return s;
    fjt_rng rng;
    fjt_rng_init(&rng, fjt_case_seed(c, suite_seed));
    fjt_problem p;
    double *ms = calloc((size_t)repeat, sizeof *ms);
    const bool made = c->paged.page_size
                          ? fjt_problem_make_paged(&p, d, &c->varlen, &c->paged, &rng, false)
                      : c->varlen.nseq ? fjt_problem_make_varlen(&p, d, &c->varlen, &rng, false)
                                       : fjt_problem_make_inputs(&p, d, &rng);
    if (!ms || !made) {
        snprintf(why, why_n, "out of host memory for the inputs");
        free(ms);
        fj_plan_destroy(plan);
        return FJ_ERR_OUT_OF_MEMORY;
    }
    size_t es = elem_size(d->dtype);
    void *dq = NULL, *dk = NULL, *dv = NULL, *dO = NULL, *dl = NULL;
    void *vmem[FJT_EXTRAS_MEM] = {NULL};
    fj_execute_extras x; /* a varlen case's sequences */
    fj_execute_extras_init(&x);
    if (!(s = fj_malloc(ctx, p.q_elems * es, &dq)) && !(s = fj_malloc(ctx, p.k_elems * es, &dk)) &&
        !(s = fj_malloc(ctx, p.v_elems * es, &dv)) && !(s = fj_malloc(ctx, p.o_elems * es, &dO)) &&
        !(c->lse && (s = fj_malloc(ctx, p.lse_elems * sizeof(float), &dl))) &&
        !(s = fj_copy_to_device(ctx, dq, p.q, p.q_elems * es)) &&
        !(s = fj_copy_to_device(ctx, dk, p.k, p.k_elems * es)) &&
        !(s = fj_copy_to_device(ctx, dv, p.v, p.v_elems * es)) &&
        !(s = fjt_varlen_extras(ctx, &p, &x, vmem)) &&
        !(s = fj_plan_time_ex(plan, dq, dk, dv, dO, dl, &x, warmup, repeat, ms))) {
        qsort(ms, (size_t)repeat, sizeof *ms, cmp_double);
        double median = repeat % 2 ? ms[repeat / 2] : 0.5 * (ms[repeat / 2 - 1] + ms[repeat / 2]);
        fj_plan_info info;
        fj_plan_get_info(plan, &info);
        char shape[128], kernel[192];
        cli_shape_str(d, shape, sizeof shape);
        cli_kernel_of(&info, kernel, sizeof kernel);
        double flops = fj_attention_flops(d), bytes = cli_min_bytes(d, c->lse);
        if (c->varlen.nseq) { /* each sequence's own lengths, not the bounds */
            int used[FJT_VARLEN_MAX_SEQS];
            double tq = 0, tk = 0;
            for (int b = 0; b < c->varlen.nseq; b++) {
                used[b] = fjt_varlen_keys(&c->varlen, b);
                tq += c->varlen.len_q[b];
                tk += used[b];
            }
            flops = cli_varlen_flops(d, c->varlen.len_q, used, c->varlen.nseq);
            bytes = ((double)tq * d->heads_q + (double)tk * d->heads_kv) *
                        (d->head_dim + fjt_dim_v(d)) * (double)es +
                    (c->lse ? 4.0 * tq * d->heads_q : 0);
        }
        cli_table_row(fj_backend_name(fj_context_backend(ctx)), shape, median,
                      flops / (median * 1e-3) / 1e12, bytes / (median * 1e-3) / 1e9, info.launches,
                      "-", kernel);
        fflush(stdout);
    } else {
        snprintf(why, why_n, "%s", fj_last_error());
    }
    fj_free(ctx, dq);
    fj_free(ctx, dk);
    fj_free(ctx, dv);
    fj_free(ctx, dO);
    fj_free(ctx, dl);
    fjt_varlen_free(ctx, vmem);
    fjt_problem_free(&p);
    free(ms);
    fj_plan_destroy(plan);
    return s;
}
