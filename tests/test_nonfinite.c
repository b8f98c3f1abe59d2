/* Non-finite data on every backend: the rule of docs/semantics.md ("Non-finite
 * values") checked row by row against a double-precision oracle that follows
 * IEEE arithmetic through the formula (NaN propagates, inf - inf is NaN, a
 * score of -inf weighs 0). A NaN or Inf in Q or K must come out as NaN in the
 * rows it reaches, never as a row that "sees no key" (O = 0, lse = -inf),
 * which stays reserved for the mask (issue 23, finding 2). With attention
 * sinks (FJ_FEATURE_SINKS, issue 22): one head's sink NaN, +inf or -inf
 * (NaN rows, except rows that see no key: O = 0, lse = the sink; -inf is no
 * sink), and a finite sink on a row whose every visible score is -inf (NaN);
 * on CUDA the decode shape is GQA-packed and split, so the combine kernel's
 * join is judged too.
 *
 *   test_nonfinite [--backend LIST]   (cpu-reference,cpu by default; cuda)
 *
 * Each case: random inputs in [-1, 1), one kind of non-finite value put where
 * some rows see it and (under a mask) some do not, the output and lse
 * poisoned with 1000 (no output can be that: |O| <= max |V| < 1), then every
 * row judged: NaN where the oracle is NaN, exactly 0 and -inf where the row
 * sees no key, within the dtype's tolerance elsewhere. A NaN in V may also
 * reach rows of the same block that do not see its key (0 x NaN is NaN in the
 * matrix product), so there those rows may be NaN in that column only. Exit
 * status 0 passed, 1 failed, 77 no requested backend usable here (said). */
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flashjit.h"
#include "harness.h"

#define POISON 1000.0

typedef enum inject {
    Q_NAN,              /* one element of one query row */
    K_NAN,              /* one element of one key row */
    Q_INF,              /* +inf in one query row: its scores are +-inf or NaN */
    K_INF,              /* +inf in one key row, -inf in another */
    ALL_SCORES_NEG_INF, /* one query row whose every visible score is -inf */
    V_NAN,              /* one element of one value row */
    SCALE_OVERFLOW,     /* a finite scale whose scores overflow float32: +inf */
    SCALE_HUGE,         /* a huge scale whose scores still fit: computed */
    /* attention sinks (FJ_FEATURE_SINKS, finite ones for the other heads):
       one head's sink non-finite, or every visible score of a row -inf */
    SINK_NAN,
    SINK_POS_INF,
    SINK_NEG_INF,
    SINK_ALL_SCORES_NEG_INF,
    INJECT_COUNT
} inject;

static const char *const inject_names[] = {"q-nan",
                                           "k-nan",
                                           "q-inf",
                                           "k-inf",
                                           "all-scores-neg-inf",
                                           "v-nan",
                                           "scale-overflow",
                                           "scale-huge-finite",
                                           "sink-nan",
                                           "sink-pos-inf",
                                           "sink-neg-inf",
                                           "sink-all-scores-neg-inf"};

typedef struct shape {
    const char *name;
    int batch, hq, hkv, sq, sk, dim;
    fj_causal causal;
    int wl, wr;
} shape;

/* Every kind of row: all see every key; causal with Sq > Sk (the first rows
 * see none); a decode step over several key blocks with GQA; a window
 * (rows see a few keys, some keys unseen by most rows). */
static const shape shapes[] = {
    {"dense", 2, 4, 2, 37, 53, 64, FJ_CAUSAL_NONE, -1, -1},
    {"causal-empty-rows", 1, 2, 1, 70, 30, 40, FJ_CAUSAL_BOTTOM_RIGHT, -1, -1},
    {"decode-gqa", 2, 8, 1, 1, 700, 128, FJ_CAUSAL_NONE, -1, -1},
    {"window", 1, 1, 1, 100, 100, 64, FJ_CAUSAL_BOTTOM_RIGHT, 5, -1},
};
#define NSHAPES ((int)(sizeof shapes / sizeof shapes[0]))

typedef struct problem {
    fj_attention_desc d;
    size_t nq, nk, no, nl;
    void *q, *k, *v;         /* dtype d.dtype, dense */
    float *sinks;            /* FJ_FEATURE_SINKS: [heads_q], else NULL */
    double *ref_o, *ref_lse; /* the oracle */
    bool *sees_none;         /* [b, h, i]: the row sees no key */
    /* where the non-finite value went */
    int b0, i0, j0, hk0, c0;
} problem;

static size_t elem(fj_dtype t) { return t == FJ_F32 ? 4 : 2; }

/* x into element i: the harness's rounding for finite values, the dtype's
 * own NaN and infinities for the others. */
static void put(void *buf, fj_dtype t, size_t i, double x)
{
    if (isfinite(x) || t == FJ_F32) {
        fjt_store(buf, t, i, x);
        return;
    }
    uint16_t bits = isnan(x) ? (t == FJ_F16 ? 0x7e00 : 0x7fc0) : (t == FJ_F16 ? 0x7c00 : 0x7f80);
    if (!isnan(x) && x < 0) bits |= 0x8000;
    ((uint16_t *)buf)[i] = bits;
}

static double get(const void *buf, fj_dtype t, size_t i) { return fjt_load(buf, t, i); }

static size_t at(const fj_attention_desc *d, int heads, int seq, int b, int s, int h, int c)
{
    return (((size_t)b * seq + s) * heads + h) * d->head_dim + c;
}

/* The keys row i sees, [lo, hi): docs/semantics.md's rule, written again. */
static void visible(const fj_attention_desc *d, int i, int *lo, int *hi)
{
    long dd = d->causal == FJ_CAUSAL_TOP_LEFT ? i : (long)i + d->seqlen_k - d->seqlen_q;
    long l = 0, h = d->seqlen_k;
    if (d->causal != FJ_CAUSAL_NONE && dd + 1 < h) h = dd + 1;
    if (d->window_right >= 0 && dd + d->window_right + 1 < h) h = dd + d->window_right + 1;
    if (d->window_left >= 0 && dd - d->window_left > l) l = dd - d->window_left;
    if (l > d->seqlen_k) l = d->seqlen_k;
    if (h < l) h = l;
    *lo = (int)l;
    *hi = (int)h;
}

/* IEEE through the formula, in double; a score beyond what float32 holds in
 * base 2 (|s log2 e| > FLT_MAX) is +-inf, as the backends compute it. */
static void oracle(problem *p)
{
    const fj_attention_desc *d = &p->d;
    const int D = d->head_dim, g = d->heads_q / d->heads_kv;
    double scale = d->scale != 0.0f ? d->scale : 1.0 / sqrt((double)D);
    double *s = malloc((size_t)d->seqlen_k * sizeof *s);
    if (!s) abort();
    for (int b = 0; b < d->batch; b++)
        for (int h = 0; h < d->heads_q; h++)
            for (int i = 0; i < d->seqlen_q; i++) {
                int lo, hi, hk = h / g;
                visible(d, i, &lo, &hi);
                double *o = p->ref_o + at(d, d->heads_q, d->seqlen_q, b, i, h, 0);
                double *lse = p->ref_lse + ((size_t)b * d->heads_q + h) * d->seqlen_q + i;
                p->sees_none[((size_t)b * d->heads_q + h) * d->seqlen_q + i] = lo >= hi;
                /* a sink joins after the keys (docs/semantics.md, "Sinks") */
                const double sink = p->sinks ? (double)p->sinks[h] : -INFINITY;
                if (lo >= hi) {
                    for (int c = 0; c < D; c++) o[c] = 0.0;
                    *lse = sink;
                    continue;
                }
                double m = -INFINITY;
                bool nan = false;
                for (int j = lo; j < hi; j++) {
                    double dot = 0.0;
                    for (int c = 0; c < D; c++)
                        dot += get(p->q, d->dtype, at(d, d->heads_q, d->seqlen_q, b, i, h, c)) *
                               get(p->k, d->dtype, at(d, d->heads_kv, d->seqlen_k, b, j, hk, c));
                    double x = scale * dot;
                    if (fabs(x) * M_LOG2E > FLT_MAX) x = copysign(INFINITY, x);
                    s[j] = x;
                    if (isnan(x)) nan = true;
                    else if (x > m) m = x;
                }
                if (nan) m = NAN;
                double l = 0.0;
                for (int j = lo; j < hi; j++) l += s[j] = exp(s[j] - m);
                double f = 1.0;
                if (p->sinks) { /* as fj_sink_join: a NaN sink or m makes l NaN */
                    const double nm = sink <= m ? m : sink;
                    f = exp(m - nm);
                    l = l * f + exp(sink - nm);
                    m = nm;
                }
                for (int c = 0; c < D; c++) {
                    double acc = 0.0;
                    for (int j = lo; j < hi; j++)
                        acc += s[j] *
                               get(p->v, d->dtype, at(d, d->heads_kv, d->seqlen_k, b, j, hk, c));
                    o[c] = acc * f / l;
                }
                *lse = m + log(l);
            }
    free(s);
}

static void problem_free(problem *p)
{
    free(p->q);
    free(p->k);
    free(p->v);
    free(p->sinks);
    free(p->ref_o);
    free(p->ref_lse);
    free(p->sees_none);
    memset(p, 0, sizeof *p);
}

/* A row that sees keys, away from the edges when it can be. */
static int seeing_row(const fj_attention_desc *d)
{
    for (int i = d->seqlen_q / 2; i < d->seqlen_q; i++) {
        int lo, hi;
        visible(d, i, &lo, &hi);
        if (lo < hi) return i;
    }
    return d->seqlen_q - 1;
}

static bool problem_make(problem *p, const shape *sh, fj_dtype t, inject kind, fjt_rng *rng)
{
    memset(p, 0, sizeof *p);
    fj_attention_desc *d = &p->d;
    fj_attention_desc_init(d, sh->batch, sh->hq, sh->hkv, sh->sq, sh->sk, sh->dim, t);
    d->causal = sh->causal;
    d->window_left = sh->wl;
    d->window_right = sh->wr;
    p->nq = (size_t)d->batch * d->seqlen_q * d->heads_q * d->head_dim;
    p->nk = (size_t)d->batch * d->seqlen_k * d->heads_kv * d->head_dim;
    p->no = p->nq;
    p->nl = (size_t)d->batch * d->heads_q * d->seqlen_q;
    p->q = malloc(p->nq * elem(t));
    p->k = malloc(p->nk * elem(t));
    p->v = malloc(p->nk * elem(t));
    p->ref_o = malloc(p->no * sizeof(double));
    p->ref_lse = malloc(p->nl * sizeof(double));
    p->sees_none = malloc(p->nl * sizeof(bool));
    if (!p->q || !p->k || !p->v || !p->ref_o || !p->ref_lse || !p->sees_none) return false;
    for (size_t x = 0; x < p->nq; x++) put(p->q, t, x, 2.0 * fjt_uniform(rng) - 1.0);
    for (size_t x = 0; x < p->nk; x++) put(p->k, t, x, 2.0 * fjt_uniform(rng) - 1.0);
    for (size_t x = 0; x < p->nk; x++) put(p->v, t, x, 2.0 * fjt_uniform(rng) - 1.0);

    /* the non-finite value goes where row i0 (of head hk0 * group) sees it */
    const int g = d->heads_q / d->heads_kv;
    p->b0 = d->batch - 1;
    p->i0 = seeing_row(d);
    p->hk0 = d->heads_kv - 1;
    p->c0 = fjt_range(rng, 0, d->head_dim - 1);
    int lo, hi;
    visible(d, p->i0, &lo, &hi);
    p->j0 = lo + (hi - lo) / 2;
    const int h0 = p->hk0 * g;
    size_t qi = at(d, d->heads_q, d->seqlen_q, p->b0, p->i0, h0, p->c0);
    size_t kj = at(d, d->heads_kv, d->seqlen_k, p->b0, p->j0, p->hk0, p->c0);
    switch (kind) {
    case Q_NAN: put(p->q, t, qi, NAN); break;
    case K_NAN: put(p->k, t, kj, NAN); break;
    case Q_INF: put(p->q, t, qi, INFINITY); break;
    case K_INF:
        put(p->k, t, kj, INFINITY);
        put(p->k, t, at(d, d->heads_kv, d->seqlen_k, p->b0, lo, p->hk0, p->c0), -INFINITY);
        break;
    case ALL_SCORES_NEG_INF:
        /* q = +inf against a column of K that is negative for every key */
        put(p->q, t, qi, INFINITY);
        for (int j = 0; j < d->seqlen_k; j++)
            put(p->k, t, at(d, d->heads_kv, d->seqlen_k, p->b0, j, p->hk0, p->c0),
                -0.25 - 0.5 * fjt_uniform(rng));
        break;
    case V_NAN: put(p->v, t, kj, NAN); break;
    case SINK_NAN:
    case SINK_POS_INF:
    case SINK_NEG_INF:
    case SINK_ALL_SCORES_NEG_INF:
        d->features = FJ_FEATURE_SINKS;
        if (!(p->sinks = malloc(sizeof(float) * (size_t)d->heads_q))) return false;
        for (int h = 0; h < d->heads_q; h++) p->sinks[h] = (float)(5.0 * fjt_uniform(rng) - 2.0);
        if (kind == SINK_NAN) p->sinks[h0] = NAN;
        if (kind == SINK_POS_INF) p->sinks[h0] = INFINITY;
        if (kind == SINK_NEG_INF) p->sinks[h0] = -INFINITY;
        if (kind == SINK_ALL_SCORES_NEG_INF) {
            put(p->q, t, qi, INFINITY);
            for (int j = 0; j < d->seqlen_k; j++)
                put(p->k, t, at(d, d->heads_kv, d->seqlen_k, p->b0, j, p->hk0, p->c0),
                    -0.25 - 0.5 * fjt_uniform(rng));
        }
        break;
    case SCALE_OVERFLOW:
        /* q.k = 0.25 D >= 2, so scale q.k >= 2e38, and x log2(e) overflows */
        d->scale = 1e38f;
        for (size_t x = 0; x < p->nq; x++) put(p->q, t, x, 0.5);
        for (size_t x = 0; x < p->nk; x++) put(p->k, t, x, 0.5);
        break;
    case SCALE_HUGE:
        /* q.k is a multiple of 2^-11 with |q.k| <= D / 4096: with scale 1e6
           scores reach 6e4 and differ by at least 488 between keys, so the
           weights are one-hot (split evenly between tied keys) */
        d->scale = 1e6f;
        for (size_t x = 0; x < p->nq; x++)
            put(p->q, t, x, fjt_range(rng, 0, 1) ? 0.015625 : -0.015625);
        for (size_t x = 0; x < p->nk; x++)
            put(p->k, t, x, fjt_range(rng, 0, 1) ? 0.015625 : -0.015625);
        break;
    default: break;
    }
    oracle(p);
    return true;
}

static double tolerance(fj_dtype t) { return t == FJ_F32 ? 2e-4 : t == FJ_F16 ? 4e-3 : 3e-2; }

typedef struct verdict {
    long rows, nan_rows, empty_rows, bad;
    char first[400];
} verdict;

static void bad(verdict *v, const char *fmt, int b, int i, int h, int c, double got, double want)
{
    if (!v->bad++) snprintf(v->first, sizeof v->first, fmt, b, i, h, c, got, want);
}

/* Judges o (dtype, dense) and lse against the oracle. */
static void judge(const problem *p, inject kind, const void *o, const float *lse, verdict *v)
{
    const fj_attention_desc *d = &p->d;
    const int D = d->head_dim, g = d->heads_q / d->heads_kv;
    const double tol = tolerance(d->dtype);
    memset(v, 0, sizeof *v);
    for (int b = 0; b < d->batch; b++)
        for (int h = 0; h < d->heads_q; h++)
            for (int i = 0; i < d->seqlen_q; i++) {
                size_t r = ((size_t)b * d->heads_q + h) * d->seqlen_q + i;
                double want_lse = p->ref_lse[r], got_lse = lse[r];
                bool empty = p->sees_none[r], row_nan = isnan(want_lse);
                v->rows++;
                v->empty_rows += empty;
                v->nan_rows += row_nan;
                /* a row that sees no key: lse -inf, or exactly its sink
                   (NaN, +inf included) */
                if (empty     ? !(row_nan ? isnan(got_lse) : got_lse == want_lse)
                    : row_nan ? !isnan(got_lse)
                              : !(fabs(got_lse - want_lse) <= 1e-3 * (1.0 + fabs(want_lse))))
                    bad(v, "b%d i%d h%d (c%d): lse %g, want %g", b, i, h, 0, got_lse, want_lse);
                for (int c = 0; c < D; c++) {
                    double want = p->ref_o[at(d, d->heads_q, d->seqlen_q, b, i, h, c)];
                    double got = get(o, d->dtype, at(d, d->heads_q, d->seqlen_q, b, i, h, c));
                    if (got == POISON) {
                        bad(v, "b%d i%d h%d c%d: never written (%g), want %g", b, i, h, c, got,
                            want);
                    } else if (empty) {
                        if (got != 0.0)
                            bad(v, "b%d i%d h%d c%d: %g in a row that sees no key, want %g", b, i,
                                h, c, got, want);
                    } else if (isnan(want)) {
                        if (!isnan(got))
                            bad(v, "b%d i%d h%d c%d: %g, want %g", b, i, h, c, got, want);
                    } else if (!(fabs(got - want) <= tol)) {
                        /* 0 x NaN in the P V product: the NaN column of the
                           value's (batch, kv head) may reach rows that do not
                           see its key */
                        bool may_leak = kind == V_NAN && isnan(got) && b == p->b0 &&
                                        h / g == p->hk0 && c == p->c0;
                        if (!may_leak)
                            bad(v, "b%d i%d h%d c%d: %g, want %g", b, i, h, c, got, want);
                    }
                }
            }
}

/* One case on ctx: poisoned outputs, fj_attention, judged. */
static bool run_case(fj_context *ctx, const char *backend, const shape *sh, fj_dtype t, inject kind,
                     uint64_t seed)
{
    fjt_rng rng;
    fjt_rng_init(&rng, seed ^ ((uint64_t)kind << 40) ^ ((uint64_t)t << 48) ^
                           (uint64_t)(sh - shapes) << 56);
    problem p;
    if (!problem_make(&p, sh, t, kind, &rng)) {
        printf("FAIL %s %s %s %s: out of memory\n", backend, sh->name, fj_dtype_name(t),
               inject_names[kind]);
        problem_free(&p);
        return false;
    }
    const size_t es = elem(t);
    void *ho = malloc(p.no * es);
    float *hl = malloc(p.nl * sizeof(float));
    void *dq = NULL, *dk = NULL, *dv = NULL, *dO = NULL, *dl = NULL, *ds = NULL;
    const size_t sb = sizeof(float) * (size_t)p.d.heads_q;
    fj_execute_extras x;
    fj_execute_extras_init(&x);
    fj_status s = FJ_ERR_OUT_OF_MEMORY;
    if (!ho || !hl) goto out;
    for (size_t x = 0; x < p.no; x++) put(ho, t, x, POISON);
    for (size_t x = 0; x < p.nl; x++) hl[x] = (float)POISON;
    if ((s = fj_malloc(ctx, p.nq * es, &dq)) || (s = fj_malloc(ctx, p.nk * es, &dk)) ||
        (s = fj_malloc(ctx, p.nk * es, &dv)) || (s = fj_malloc(ctx, p.no * es, &dO)) ||
        (s = fj_malloc(ctx, p.nl * sizeof(float), &dl)) ||
        (s = fj_copy_to_device(ctx, dq, p.q, p.nq * es)) ||
        (s = fj_copy_to_device(ctx, dk, p.k, p.nk * es)) ||
        (s = fj_copy_to_device(ctx, dv, p.v, p.nk * es)) ||
        (s = fj_copy_to_device(ctx, dO, ho, p.no * es)) ||
        (s = fj_copy_to_device(ctx, dl, hl, p.nl * sizeof(float))) ||
        (p.sinks &&
         ((s = fj_malloc(ctx, sb, &ds)) || (s = fj_copy_to_device(ctx, ds, p.sinks, sb)))))
        goto out;
    x.sinks = ds;
    if ((s = fj_attention_ex(ctx, &p.d, dq, dk, dv, dO, dl, p.sinks ? &x : NULL, NULL)) ||
        (s = fj_synchronize(ctx, NULL)) || (s = fj_copy_to_host(ctx, ho, dO, p.no * es)) ||
        (s = fj_copy_to_host(ctx, hl, dl, p.nl * sizeof(float))))
        goto out;
out:;
    bool ok = false;
    if (s == FJ_ERR_UNSUPPORTED) {
        printf("SKIP %-13s %-18s %-4s %-18s %s\n", backend, sh->name, fj_dtype_name(t),
               inject_names[kind], fj_last_error());
        ok = true;
    } else if (s != FJ_OK) {
        printf("FAIL %-13s %-18s %-4s %-18s %s: %s\n", backend, sh->name, fj_dtype_name(t),
               inject_names[kind], fj_status_name(s), fj_last_error());
    } else {
        verdict v;
        judge(&p, kind, ho, hl, &v);
        ok = v.bad == 0;
        printf("%s %-13s %-18s %-4s %-18s %ld rows: %ld NaN, %ld see no key%s%s%s\n",
               ok ? "ok  " : "FAIL", backend, sh->name, fj_dtype_name(t), inject_names[kind],
               v.rows, v.nan_rows, v.empty_rows, ok ? "" : "; ", ok ? "" : v.first,
               v.bad > 1 ? " (and more)" : "");
    }
    fj_free(ctx, dq);
    fj_free(ctx, dk);
    fj_free(ctx, dv);
    fj_free(ctx, dO);
    fj_free(ctx, dl);
    fj_free(ctx, ds);
    free(ho);
    free(hl);
    problem_free(&p);
    return ok;
}

int main(int argc, char **argv)
{
    const char *list = "cpu-reference,cpu";
    for (int a = 1; a < argc; a++) {
        if (!strcmp(argv[a], "--backend") && a + 1 < argc) {
            list = argv[++a];
        } else {
            fprintf(stderr, "usage: test_nonfinite [--backend cpu-reference,cpu,cuda]\n");
            return 2;
        }
    }
    uint64_t seed = fjt_seed();
    int failures = 0, backends_run = 0;
    char buf[128];
    snprintf(buf, sizeof buf, "%s", list);
    for (char *save, *name = strtok_r(buf, ",", &save); name; name = strtok_r(NULL, ",", &save)) {
        fj_backend b = !strcmp(name, "cuda")            ? FJ_BACKEND_CUDA
                       : !strcmp(name, "cpu")           ? FJ_BACKEND_CPU
                       : !strcmp(name, "cpu-reference") ? FJ_BACKEND_CPU_REFERENCE
                                                        : FJ_BACKEND_AUTO;
        if (b == FJ_BACKEND_AUTO) {
            fprintf(stderr, "test_nonfinite: unknown backend '%s'\n", name);
            return 2;
        }
        fj_context_options o;
        fj_context_options_init(&o);
        o.backend = b;
        fj_context *ctx = NULL;
        if (fj_context_create(&o, &ctx) != FJ_OK) {
            printf("SKIP %s: no usable context here: %s\n", name, fj_last_error());
            continue;
        }
        backends_run++;
        /* F32 runs on the CPU only (docs/semantics.md, Precision) */
        static const fj_dtype dtypes[] = {FJ_F32, FJ_F16, FJ_BF16};
        for (int di = b == FJ_BACKEND_CUDA ? 1 : 0; di < 3; di++)
            for (int si = 0; si < NSHAPES; si++)
                for (int k = 0; k < INJECT_COUNT; k++)
                    failures += !run_case(ctx, name, &shapes[si], dtypes[di], (inject)k, seed);
        fj_context_destroy(ctx);
    }
    if (!backends_run) {
        printf("SKIP: none of the backends '%s' is usable here\n", list);
        return 77;
    }
    printf("%d case(s) failed\n", failures);
    return failures ? 1 : 0;
}
