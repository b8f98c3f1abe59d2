#include "check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t elem_size(fj_dtype t) { return t == FJ_F32 ? 4 : 2; }

bool fjt_case_problem(const fjt_case *c, uint64_t suite_seed, fjt_problem *p)
{
    fjt_rng rng;
    fjt_rng_init(&rng, fjt_case_seed(c, suite_seed));
    if (c->paged.page_size)
        return fjt_problem_make_paged(p, &c->d, &c->varlen, &c->paged, &rng, true);
    if (c->varlen.nseq) return fjt_problem_make_varlen(p, &c->d, &c->varlen, &rng, true);
    if (c->oracle_rows)
        return fjt_problem_make_rows(p, &c->d, &rng, c->oracle_rows, c->n_oracle_rows);
    return fjt_problem_make(p, &c->d, &rng);
}

/* The case's knob ("NAME=VALUE") in the environment, and back. */
typedef struct knob_state {
    char name[64];
    char *old; /* the previous value (malloc'd), NULL when it was unset */
    bool set;
} knob_state;

static void knob_set(const fjt_case *c, knob_state *k)
{
    memset(k, 0, sizeof *k);
    const char *eq = c->knob ? strchr(c->knob, '=') : NULL;
    if (!eq || (size_t)(eq - c->knob) >= sizeof k->name) return;
    memcpy(k->name, c->knob, (size_t)(eq - c->knob));
    const char *old = getenv(k->name);
    k->old = old ? strdup(old) : NULL;
    k->set = setenv(k->name, eq + 1, 1) == 0;
}

static void knob_restore(knob_state *k)
{
    if (!k->set) return;
    if (k->old) setenv(k->name, k->old, 1);
    else unsetenv(k->name);
    free(k->old);
}

fj_status fjt_case_plan(const fjt_case *c, fj_context *ctx, fj_plan **plan)
{
    knob_state knob;
    knob_set(c, &knob);
    fj_status s = fj_plan_create(ctx, &c->d, plan);
    knob_restore(&knob);
    return s;
}

static fj_status fail_out(fjt_output *out, fj_status s)
{
    out->status = s;
    snprintf(out->message, sizeof out->message, "%s", fj_last_error());
    return s;
}

fj_status fjt_case_run(const fjt_case *c, const fjt_problem *p, fj_context *ctx, fjt_output *out)
{
    memset(out, 0, sizeof *out);
    out->backend = fj_context_backend(ctx);
    snprintf(out->kernel, sizeof out->kernel, "(no plan)");
    const fj_attention_desc *d = &p->d;
    /* (a varlen batch of no query token has no lse: one float is passed) */
    size_t es = elem_size(d->dtype), lse_bytes = (p->lse_elems ? p->lse_elems : 1) * sizeof(float);
    out->o = malloc(p->o_elems * es);
    out->lse = c->lse ? malloc(lse_bytes) : NULL;
    if (!out->o || (c->lse && !out->lse)) {
        out->status = FJ_ERR_OUT_OF_MEMORY;
        snprintf(out->message, sizeof out->message, "out of host memory for the outputs");
        return out->status;
    }
    fj_plan *plan = NULL;
    fj_status s = fjt_case_plan(c, ctx, &plan);
    if (s) return fail_out(out, s);
    fj_plan_info info;
    if (fj_plan_get_info(plan, &info) == FJ_OK)
        snprintf(out->kernel, sizeof out->kernel, "%s%s%s", info.kernel, info.tiles[0] ? " " : "",
                 info.tiles);

    void *dq = NULL, *dk = NULL, *dv = NULL, *dO = NULL, *dl = NULL, *da = NULL, *ds = NULL;
    void *vmem[FJT_EXTRAS_MEM] = {
        NULL}; /* varlen, paged: cu_seqlens_q, _k, seqused_k, block_table */
    const size_t hb = sizeof(float) * (size_t)d->heads_q; /* ALiBi slopes, sinks */
    fj_execute_extras x;
    fj_execute_extras_init(&x);
    fjt_poison(out->o, d->dtype, p->o_elems);
    if (out->lse) fjt_poison_f32(out->lse, lse_bytes / sizeof(float));
    if ((s = fj_malloc(ctx, p->q_elems * es, &dq)) || (s = fj_malloc(ctx, p->k_elems * es, &dk)) ||
        (s = fj_malloc(ctx, p->v_elems * es, &dv)) || (s = fj_malloc(ctx, p->o_elems * es, &dO)) ||
        (out->lse && (s = fj_malloc(ctx, lse_bytes, &dl))) ||
        (s = fj_copy_to_device(ctx, dq, p->q, p->q_elems * es)) ||
        (s = fj_copy_to_device(ctx, dk, p->k, p->k_elems * es)) ||
        (s = fj_copy_to_device(ctx, dv, p->v, p->v_elems * es)) ||
        (s = fj_copy_to_device(ctx, dO, out->o, p->o_elems * es)) ||
        (out->lse && (s = fj_copy_to_device(ctx, dl, out->lse, lse_bytes))) ||
        (p->alibi &&
         ((s = fj_malloc(ctx, hb, &da)) || (s = fj_copy_to_device(ctx, da, p->alibi, hb)))) ||
        (p->sinks &&
         ((s = fj_malloc(ctx, hb, &ds)) || (s = fj_copy_to_device(ctx, ds, p->sinks, hb)))) ||
        ((x.alibi_slopes = da), (x.sinks = ds), 0) || (s = fjt_varlen_extras(ctx, p, &x, vmem)) ||
        (s = fj_plan_execute_ex(plan, dq, dk, dv, dO, dl, &x, NULL)) ||
        (s = fj_synchronize(ctx, NULL)) ||
        (s = fj_copy_to_host(ctx, out->o, dO, p->o_elems * es)) ||
        (out->lse && (s = fj_copy_to_host(ctx, out->lse, dl, lse_bytes))))
        fail_out(out, s);
    else out->err = fjt_compare(p, out->o, out->lse);
    fj_free(ctx, dq);
    fj_free(ctx, dk);
    fj_free(ctx, dv);
    fj_free(ctx, dO);
    fj_free(ctx, dl);
    fj_free(ctx, da);
    fj_free(ctx, ds);
    fjt_varlen_free(ctx, vmem);
    fj_plan_destroy(plan);
    return out->status;
}

void fjt_output_free(fjt_output *out)
{
    free(out->o);
    free(out->lse);
    out->o = NULL;
    out->lse = NULL;
}

/* Relative Frobenius distance between two outputs of p (its o strides;
 * varlen: the rows of its sequences' tokens). */
static double output_distance(const fjt_problem *p, const void *x, const void *y)
{
    const fj_attention_desc *d = &p->d;
    double num = 0, den = 0;
    const int nb = p->vl.nseq ? 1 : d->batch;
    const int rows = p->vl.nseq ? p->cu_q[p->vl.nseq] : d->seqlen_q;
    for (int b = 0; b < nb; b++)
        for (int i = 0; i < rows; i++)
            for (int h = 0; h < d->heads_q; h++) {
                size_t base = (size_t)(b * p->os[0] + i * p->os[1] + h * p->os[2]);
                for (int c = 0; c < fjt_dim_v(d); c++) {
                    double a = fjt_load(x, d->dtype, base + c), r = fjt_load(y, d->dtype, base + c);
                    if (!isfinite(a) || !isfinite(r)) return INFINITY;
                    num += (a - r) * (a - r);
                    den += r * r;
                }
            }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* The same distance row by row against the size of the terms the row
 * sums (the oracle's ref_mag), the worst row: where rows' outputs cancel
 * towards 0 the relative distance above measures rounding against a tiny
 * sum (fjt_within). Rows the oracle did not compute, or with no terms, are
 * left out. */
static double output_distance_terms(const fjt_problem *p, const void *x, const void *y)
{
    const fj_attention_desc *d = &p->d;
    double worst = 0;
    const int nb = p->vl.nseq ? 1 : d->batch, sq = p->vl.nseq ? p->total_q : d->seqlen_q;
    const int rows = p->vl.nseq ? p->cu_q[p->vl.nseq] : d->seqlen_q;
    for (int b = 0; b < nb; b++)
        for (int i = 0; i < rows; i++)
            for (int h = 0; h < d->heads_q; h++) {
                const double mag = p->ref_mag[((size_t)b * d->heads_q + h) * sq + i];
                if (!(mag > 0)) continue;
                size_t base = (size_t)(b * p->os[0] + i * p->os[1] + h * p->os[2]);
                double num = 0;
                for (int c = 0; c < fjt_dim_v(d); c++) {
                    double a = fjt_load(x, d->dtype, base + c), r = fjt_load(y, d->dtype, base + c);
                    if (!isfinite(a) || !isfinite(r)) return INFINITY;
                    num += (a - r) * (a - r);
                }
                if (!(sqrt(num) / mag <= worst)) worst = sqrt(num) / mag;
            }
    return worst;
}

/* Largest |x - y| over p's lse entries, infinite when one is -inf and the
 * other not (or either is NaN); varlen: those of its sequences' tokens
 * (past them both are the poison, which fjt_compare checks). */
static double lse_distance(const fjt_problem *p, const float *x, const float *y)
{
    double worst = 0;
    for (size_t k = 0; k < p->lse_elems; k++) {
        if (p->vl.nseq && (int)(k % (size_t)p->total_q) >= p->cu_q[p->vl.nseq]) continue;
        if (isinf(x[k]) && isinf(y[k]) && x[k] == y[k]) continue;
        double e = fabs((double)x[k] - y[k]);
        if (!(e <= worst)) worst = isnan(e) ? INFINITY : e;
    }
    return worst;
}

#define APPEND(buf, n, ...)                                               \
    do {                                                                  \
        size_t used_ = strlen(buf);                                       \
        if (used_ < (n)) snprintf((buf) + used_, (n)-used_, __VA_ARGS__); \
    } while (0)

bool fjt_case_judge(const fjt_case *c, const fjt_problem *p, const fjt_output *out,
                    const fjt_output *ref, char *note, size_t n)
{
    fjt_bounds t = fjt_case_bounds(c, out->backend);
    const fjt_error *e = &out->err;
    char broke[160] = "";
#define BROKE(cond, what) \
    if (cond) APPEND(broke, sizeof broke, "%s%s", broke[0] ? "," : "", what)
    BROKE(e->nan_count, "nan");
    BROKE(!fjt_within(e, t.rel_fro), "rel_fro");
    BROKE(t.row_rel > 0 && !(e->row_rel_max <= t.row_rel), "row_rel");
    BROKE(e->gaps_written, "gaps");
    BROKE(e->empty_not_zero, "empty-rows");
    BROKE(c->lse && e->lse_mismatch, "lse-inf");
    BROKE(c->lse && !(e->lse_max_abs <= t.lse_abs), "lse");
    note[0] = '\0';
    APPEND(note, n, "rel %.2e/%.1e", e->rel_fro, t.rel_fro);
    if (!(e->rel_fro <= t.rel_fro)) APPEND(note, n, " (of the terms %.2e)", e->mag_rel_max);
    if (t.row_rel > 0) APPEND(note, n, " row %.2e/%.1e", e->row_rel_max, t.row_rel);
    if (c->lse) APPEND(note, n, " lse %.1e/%.0e", e->lse_max_abs, t.lse_abs);
    bool need_ref = t.ref_factor > 0 || t.ref_dist > 0 || (c->lse && t.lse_ref > 0);
    if (need_ref && ref && ref->status == FJ_OK) {
        if (t.ref_factor > 0) {
            double bound = t.ref_factor * ref->err.rel_fro + t.ref_floor;
            BROKE(!(e->rel_fro <= bound), "vs-ref-error");
            APPEND(note, n, " <= %.0f x ref %.2e + %.0e = %.2e", t.ref_factor, ref->err.rel_fro,
                   t.ref_floor, bound);
        }
        if (t.ref_dist > 0) {
            double dist = output_distance(p, out->o, ref->o);
            double by_terms = dist <= t.ref_dist ? 0 : output_distance_terms(p, out->o, ref->o);
            BROKE(!(dist <= t.ref_dist) && !(by_terms <= t.ref_dist), "vs-ref-output");
            APPEND(note, n, " ref-dist %.2e/%.1e", dist, t.ref_dist);
            if (!(dist <= t.ref_dist)) APPEND(note, n, " (of the terms %.2e)", by_terms);
        }
        if (c->lse && t.lse_ref > 0 && out->lse && ref->lse) {
            double dl = lse_distance(p, out->lse, ref->lse);
            BROKE(!(dl <= t.lse_ref), "vs-ref-lse");
            APPEND(note, n, " ref-lse %.1e/%.0e", dl, t.lse_ref);
        }
    } else if (need_ref) {
        APPEND(note, n, " (no cpu-reference run: its bounds unchecked)");
    }
#undef BROKE
    if (broke[0]) {
        APPEND(note, n,
               " | broke %s | max_abs %.3e nan %zu gaps %zu empty_rows_not_zero %zu "
               "lse_inf_mismatch %zu",
               broke, e->max_abs, e->nan_count, e->gaps_written, e->empty_not_zero,
               e->lse_mismatch);
    }
    APPEND(note, n, " | %s", out->kernel);
    return !broke[0];
}

void fjt_case_print(fjt_verdict v, const fjt_case *c, fj_backend b, const char *note)
{
    char what[640];
    fjt_case_str(c, what, sizeof what);
    static const char *const tags[] = {"ok", "FAIL", "SKIP"};
    printf("%-4s %-13s %s | %s\n", tags[v], fj_backend_name(b), what, note);
    fflush(stdout);
}

fjt_verdict fjt_case_verdict(const fjt_case *c, const fjt_problem *p, const fjt_output *out,
                             const fjt_output *ref, char *note, size_t n)
{
    if (out->status == FJ_ERR_UNSUPPORTED && !(c->must_run & FJT_ON(out->backend))) {
        snprintf(note, n, "not supported: %s", out->message);
        return FJT_SKIP;
    }
    if (out->status) {
        snprintf(note, n, "%s: %s", fj_status_name(out->status), out->message);
        return FJT_FAIL;
    }
    if (ref == out) ref = NULL; /* the reference itself */
    if (ref && ref->status) {
        snprintf(note, n, "the cpu-reference, the yardstick, failed: %s: %s",
                 fj_status_name(ref->status), ref->message);
        return FJT_FAIL;
    }
    return fjt_case_judge(c, p, out, ref, note, n) ? FJT_PASS : FJT_FAIL;
}

fjt_verdict fjt_case_check(const fjt_case *c, uint64_t suite_seed, fj_context *ctx, fj_context *ref)
{
    fj_backend b = fj_context_backend(ctx);
    fjt_problem p;
    if (!fjt_case_problem(c, suite_seed, &p)) {
        fjt_case_print(FJT_FAIL, c, b, "out of host memory making the problem");
        return FJT_FAIL;
    }
    fjt_output out, yard;
    memset(&yard, 0, sizeof yard);
    fjt_case_run(c, &p, ctx, &out);
    bool with_ref = ref && ref != ctx;
    if (with_ref) fjt_case_run(c, &p, ref, &yard);
    char note[1024];
    fjt_verdict v = fjt_case_verdict(c, &p, &out, with_ref ? &yard : NULL, note, sizeof note);
    fjt_case_print(v, c, b, note);
    fjt_output_free(&out);
    fjt_output_free(&yard);
    fjt_problem_free(&p);
    return v;
}
