/* Every candidate is run once on a small problem and compared with the CPU
 * reference before it is timed: a tile shape that computes the wrong thing
 * must never be the fastest entry in a tuning file. The check problem is
 * batch 1, 2 heads, and seqlens a little past the largest block any
 * candidate uses (seqlen_k larger than seqlen_q, so a bottom-right causal
 * mask has its diagonal off the corner), so every tile shape meets partial
 * edge tiles. Verdicts are per kernel (head dim, dtype, causal kind,
 * tiles): the code is the same at every sequence length.
 *
 * Tolerance, against the CPU reference (which rounds to the dtype too):
 * every output finite (the output is poisoned with NaN before the run, so
 * an unwritten element shows), the relative Frobenius error within twice
 * the oracle tolerance of the test suites, as `flashjit run --check` uses
 * (f32 1e-5, f16 4e-3, bf16 3.2e-2), and in every output row the largest
 * absolute error within 8 units in the last place of the dtype at that
 * row's largest |o| (f32: 1e-4 of it). The row bound catches one wrong row
 * that a norm over the whole output averages away, also deep in a causal
 * sequence where rows are smaller than the first ones. Measured on the H200
 * (every default candidate, bf16 and f16) and the CPU tiled backend: at
 * most 1 ulp (f32: 19) of the row's largest |o|. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan.h"
#include "problem.h"
#include "status.h"
#include "tune/check.h"
#include "tune/timing.h"

/* ulps of a 16-bit dtype at a row's largest |o|: two roundings to the
 * dtype plus the accumulation-order differences of two correct kernels
 * stay well inside (1 measured). */
#define HALF_ULPS 8.0
/* f32, as a fraction of the row's largest |o|: the CPU backends' vector exp
 * and blocked sums differ from the reference by more ulps than the 16-bit
 * types' roundings show (19 measured, about 2e-6). */
#define F32_ROW_REL 1e-4
/* Added to the check problem's seqlens past the largest block: not a
 * multiple of any power of two above 8, so edges are partial. */
#define CHECK_EXTRA_Q 72
#define CHECK_EXTRA_K 104
#define CHECK_HEADS 2

struct fj_tune_reference {
    int head_dim;
    fj_dtype dtype;
    fj_causal causal;
    fj_attention_desc d; /* the check problem */
    size_t nq, nkv, no;  /* elements */
    void *q, *k, *v;     /* host inputs */
    void *o;             /* the reference's output, host */
};

/* ---- the kernel table --------------------------------------------------------- */

fj_tune_kernel *fj_tune_kernel_of(fj_tune_kernels *t, const fj_attention_desc *d, const char *tiles)
{
    for (int i = 0; i < t->count; i++) {
        fj_tune_kernel *k = &t->k[i];
        if (k->head_dim == d->head_dim && k->dtype == d->dtype && k->causal == d->causal &&
            !strcmp(k->tiles, tiles))
            return k;
    }
    if (t->count == t->cap) {
        int cap = t->cap ? 2 * t->cap : 64;
        fj_tune_kernel *n = realloc(t->k, (size_t)cap * sizeof *n);
        if (!n) return NULL;
        t->k = n;
        t->cap = cap;
    }
    fj_tune_kernel *k = &t->k[t->count++];
    memset(k, 0, sizeof *k);
    k->head_dim = d->head_dim;
    k->dtype = d->dtype;
    k->causal = d->causal;
    snprintf(k->tiles, sizeof k->tiles, "%s", tiles);
    return k;
}

void fj_tune_kernels_free(fj_tune_kernels *t)
{
    free(t->k);
    memset(t, 0, sizeof *t);
}

/* ---- one run on a context ---------------------------------------------------------- */

typedef struct device_set {
    fj_context *ctx;
    void *q, *k, *v, *o;
} device_set;

static void device_free(device_set *s)
{
    fj_free(s->ctx, s->q);
    fj_free(s->ctx, s->k);
    fj_free(s->ctx, s->v);
    fj_free(s->ctx, s->o);
    memset(s, 0, sizeof *s);
}

/* Runs r's problem on ctx (tiles NULL: the context's own choice) into
 * o_host, the output poisoned with NaN (all ones) first. *planned: the
 * plan was made (so a failure after it is the run's). */
static fj_status run_on(fj_context *ctx, const fj_tune_reference *r, const char *tiles,
                        void *o_host, bool *planned)
{
    size_t es = (size_t)fj_dtype_size(r->dtype);
    device_set s = {ctx, NULL, NULL, NULL, NULL};
    fj_plan *plan = NULL;
    fj_status st;
    *planned = false;
    if ((st = fj_plan_create_config(ctx, &r->d, tiles, &plan))) return st;
    *planned = true;
    memset(o_host, 0xff, r->no * es);
    if (!(st = fj_malloc(ctx, r->nq * es, &s.q)) && !(st = fj_malloc(ctx, r->nkv * es, &s.k)) &&
        !(st = fj_malloc(ctx, r->nkv * es, &s.v)) && !(st = fj_malloc(ctx, r->no * es, &s.o)) &&
        !(st = fj_copy_to_device(ctx, s.q, r->q, r->nq * es)) &&
        !(st = fj_copy_to_device(ctx, s.k, r->k, r->nkv * es)) &&
        !(st = fj_copy_to_device(ctx, s.v, r->v, r->nkv * es)) &&
        !(st = fj_copy_to_device(ctx, s.o, o_host, r->no * es)) &&
        !(st = fj_plan_execute(plan, s.q, s.k, s.v, s.o, NULL, NULL)) &&
        !(st = fj_synchronize(ctx, NULL)))
        st = fj_copy_to_host(ctx, o_host, s.o, r->no * es);
    device_free(&s);
    fj_plan_destroy(plan);
    return st;
}

/* ---- references -------------------------------------------------------------------- */

static void reference_free(fj_tune_reference *r)
{
    free(r->q);
    free(r->k);
    free(r->v);
    free(r->o);
}

static fj_status reference_make(fj_tune_checker *c, const fj_tune_kernel *k, fj_tune_reference *r)
{
    memset(r, 0, sizeof *r);
    r->head_dim = k->head_dim;
    r->dtype = k->dtype;
    r->causal = k->causal;
    fj_attention_desc_init(&r->d, 1, CHECK_HEADS, CHECK_HEADS, c->seqlen_q, c->seqlen_k,
                           k->head_dim, k->dtype);
    r->d.causal = k->causal;
    size_t es = (size_t)fj_dtype_size(k->dtype);
    r->nq = r->no = (size_t)CHECK_HEADS * c->seqlen_q * k->head_dim;
    r->nkv = (size_t)CHECK_HEADS * c->seqlen_k * k->head_dim;
    r->q = malloc(r->nq * es);
    r->k = malloc(r->nkv * es);
    r->v = malloc(r->nkv * es);
    r->o = malloc(r->no * es);
    if (!r->q || !r->k || !r->v || !r->o) {
        reference_free(r);
        return fj_fail(FJ_ERR_OUT_OF_MEMORY, "out of host memory for the check problem");
    }
    /* The same inputs for a (head dim, dtype) whatever the run, so a check
       replays exactly. */
    uint64_t seed = 0x7475e3ull * (uint64_t)k->head_dim + (uint64_t)k->dtype;
    fj_tune_fill_random(r->q, k->dtype, r->nq, &seed);
    fj_tune_fill_random(r->k, k->dtype, r->nkv, &seed);
    fj_tune_fill_random(r->v, k->dtype, r->nkv, &seed);
    bool planned;
    fj_status s = run_on(c->ref, r, NULL, r->o, &planned);
    if (s) reference_free(r);
    return s;
}

static fj_status reference_for(fj_tune_checker *c, const fj_tune_kernel *k, fj_tune_reference **out)
{
    for (int i = 0; i < c->nrefs; i++) {
        fj_tune_reference *r = &c->refs[i];
        if (r->head_dim == k->head_dim && r->dtype == k->dtype && r->causal == k->causal) {
            *out = r;
            return FJ_OK;
        }
    }
    if (c->nrefs == c->cap) {
        int cap = c->cap ? 2 * c->cap : 8;
        fj_tune_reference *n = realloc(c->refs, (size_t)cap * sizeof *n);
        if (!n) return fj_fail(FJ_ERR_OUT_OF_MEMORY, "out of host memory for the references");
        c->refs = n;
        c->cap = cap;
    }
    fj_status s = reference_make(c, k, &c->refs[c->nrefs]);
    if (s) return s;
    *out = &c->refs[c->nrefs++];
    return FJ_OK;
}

void fj_tune_checker_init(fj_tune_checker *c, fj_context *ctx, fj_context *ref, int largest_block)
{
    memset(c, 0, sizeof *c);
    c->ctx = ctx;
    c->ref = ref;
    c->seqlen_q = largest_block + CHECK_EXTRA_Q;
    c->seqlen_k = largest_block + CHECK_EXTRA_K;
}

void fj_tune_checker_free(fj_tune_checker *c)
{
    for (int i = 0; i < c->nrefs; i++) reference_free(&c->refs[i]);
    free(c->refs);
    memset(c, 0, sizeof *c);
}

/* ---- the verdict --------------------------------------------------------------------- */

typedef struct check_error {
    double max_abs, rel_fro;
    double row_ulps;         /* the worst row's largest error in ulps of its largest |o| */
    size_t bad_row;          /* the row furthest past its tolerance */
    double bad_err, bad_tol; /* its largest error and tolerance; bad_err <= bad_tol: none */
    size_t nonfinite;
} check_error;

/* The spacing of the dtype's values at |x| (at least the smallest normal's). */
static double ulp_at(fj_dtype t, double x)
{
    int mantissa = t == FJ_F32 ? 23 : t == FJ_F16 ? 10 : 7;
    int exp2;
    frexp(x > 0x1p-14 ? x : 0x1p-14, &exp2); /* x in [2^(exp2-1), 2^exp2) */
    return ldexp(1.0, exp2 - 1 - mantissa);
}

static double row_tolerance(fj_dtype t, double row_ref)
{
    if (t == FJ_F32) return F32_ROW_REL * row_ref;
    return HALF_ULPS * ulp_at(t, row_ref);
}

/* Rows of the dense check output are head_dim contiguous elements. */
static check_error compare(const fj_tune_reference *r, const void *o)
{
    check_error e;
    memset(&e, 0, sizeof e);
    double num = 0, den = 0, worst = -1;
    size_t D = (size_t)r->head_dim;
    for (size_t row = 0; row < r->no / D; row++) {
        double row_err = 0, row_ref = 0;
        for (size_t i = row * D; i < (row + 1) * D; i++) {
            double x = fj_tune_load(o, r->dtype, i), y = fj_tune_load(r->o, r->dtype, i);
            if (!isfinite(x)) {
                e.nonfinite++;
                continue;
            }
            double a = fabs(x - y);
            if (a > row_err) row_err = a;
            if (fabs(y) > row_ref) row_ref = fabs(y);
            num += a * a;
            den += y * y;
        }
        double tol = row_tolerance(r->dtype, row_ref), ulps = row_err / ulp_at(r->dtype, row_ref);
        if (ulps > e.row_ulps) e.row_ulps = ulps;
        if (row_err > e.max_abs) e.max_abs = row_err;
        if (row_err - tol > worst) {
            worst = row_err - tol;
            e.bad_row = row, e.bad_err = row_err, e.bad_tol = tol;
        }
    }
    e.rel_fro = den > 0 ? sqrt(num / den) : sqrt(num);
    return e;
}

static double rel_tolerance(fj_dtype t) { return t == FJ_F32 ? 1e-5 : t == FJ_F16 ? 4e-3 : 3.2e-2; }

/* Row index of the dense [1, seqlen_q, heads, head_dim] check output as
 * (query position, head). */
static void judge(fj_tune_kernel *k, const fj_tune_reference *r, const check_error *e)
{
    double rt = rel_tolerance(k->dtype);
    int heads = r->d.heads_q;
    if (e->nonfinite) {
        k->verdict = FJ_TUNE_WRONG;
        snprintf(k->reason, sizeof k->reason,
                 "%zu of %zu outputs are not finite (unwritten or overflowed) on b1 h%d s%d/%d",
                 e->nonfinite, r->no, heads, r->d.seqlen_q, r->d.seqlen_k);
    } else if (e->bad_err > e->bad_tol) {
        k->verdict = FJ_TUNE_WRONG;
        snprintf(k->reason, sizeof k->reason,
                 "query %zu of head %zu is off by %.3e (tolerance %.3e; relative error over "
                 "all outputs %.3e) against the CPU reference on b1 h%d s%d/%d",
                 e->bad_row / (size_t)heads, e->bad_row % (size_t)heads, e->bad_err, e->bad_tol,
                 e->rel_fro, heads, r->d.seqlen_q, r->d.seqlen_k);
    } else if (!(e->rel_fro <= rt)) {
        k->verdict = FJ_TUNE_WRONG;
        snprintf(k->reason, sizeof k->reason,
                 "relative error %.3e over all outputs (tolerance %.1e) against the CPU reference "
                 "on b1 h%d s%d/%d",
                 e->rel_fro, rt, heads, r->d.seqlen_q, r->d.seqlen_k);
    } else {
        k->verdict = FJ_TUNE_CORRECT;
        snprintf(k->reason, sizeof k->reason,
                 "max abs error %.2e, relative %.2e, worst row %.1f ulps of its largest |o|",
                 e->max_abs, e->rel_fro, e->row_ulps);
    }
}

fj_status fj_tune_check_kernel(fj_tune_checker *c, fj_tune_kernel *k)
{
    if (k->verdict != FJ_TUNE_UNCHECKED) return FJ_OK;
    fj_tune_reference *r = NULL;
    fj_status s = reference_for(c, k, &r);
    if (s) return s;
    void *o = malloc(r->no * (size_t)fj_dtype_size(r->dtype));
    if (!o) return fj_fail(FJ_ERR_OUT_OF_MEMORY, "out of host memory for the check's output");
    bool planned;
    s = run_on(c->ctx, r, k->tiles, o, &planned);
    if (s == FJ_ERR_OUT_OF_MEMORY) {
        free(o);
        return s;
    }
    if (s) {
        /* No plan: the candidate cannot run here (a rule, resources, a
           compile error). A plan whose run fails is broken code. */
        k->verdict = planned ? FJ_TUNE_WRONG : FJ_TUNE_PRUNED;
        snprintf(k->reason, sizeof k->reason, "%s%s: %s", planned ? "the run failed: " : "",
                 fj_status_name(s), fj_last_error());
    } else {
        check_error e = compare(r, o);
        judge(k, r, &e);
    }
    free(o);
    return FJ_OK;
}
