/* FJ_BACKEND_CPU (src/cpu/tiled.c) against the double oracle of
 * tests/common/harness.h and against FJ_BACKEND_CPU_REFERENCE, on random
 * problems drawn with the suite's seed (FLASHJIT_TEST_SEED replays a run).
 *
 * Every check of a problem: relative Frobenius error against the oracle within
 * fjt_tolerance (outputs poisoned by fjt_run), the same against the
 * reference's output, no NaN, nothing written between output rows, lse within
 * LSE_TOL of the oracle's and -inf exactly where it is, and the output rows of
 * rows that see no key exactly zero. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "cpu/tiled.h"
#include "cpu/tiled_softmax.h"

#define LSE_TOL 1e-4

static uint64_t suite_seed;

/* ---- running one problem ------------------------------------------------- */

static fj_context *make_context(fj_backend backend, int threads)
{
    fj_context_options o;
    fj_context_options_init(&o);
    o.backend = backend;
    o.cpu_threads = threads;
    o.cache_dir = "";
    o.tuning_file = "";
    fj_context *ctx = NULL;
    fj_status s = fj_context_create(&o, &ctx);
    if (s) fail_msg("fj_context_create: %s: %s", fj_status_name(s), fj_last_error());
    return ctx;
}

/* Runs p on a CPU context through a plan, into o (o_elems, poisoned first)
 * and lse (poisoned first; NULL: none). CPU memory is host memory, so the
 * problem's own buffers are passed directly. */
static void run_plan(fj_context *ctx, const fjt_problem *p, void *o, float *lse)
{
    fjt_poison(o, p->d.dtype, p->o_elems);
    if (lse) fjt_poison_f32(lse, p->lse_elems);
    fj_plan *plan = NULL;
    fj_status s = fj_plan_create(ctx, &p->d, &plan);
    if (!s) s = fj_plan_execute(plan, p->q, p->k, p->v, o, lse, NULL);
    fj_plan_destroy(plan);
    if (s) fail_msg("%s: %s: %s", fjt_desc_str(&p->d), fj_status_name(s), fj_last_error());
}

static size_t elem_size(fj_dtype t) { return t == FJ_F32 ? 4 : 2; }

static size_t o_offset(const fjt_problem *p, int b, int i, int h)
{
    return (size_t)(b * p->os[0] + i * p->os[1] + h * p->os[2]);
}

/* Relative Frobenius distance between two outputs laid out by p's o strides. */
static double output_distance(const fjt_problem *p, const void *x, const void *y)
{
    const fj_attention_desc *d = &p->d;
    double num = 0, den = 0;
    for (int b = 0; b < d->batch; b++)
        for (int i = 0; i < d->seqlen_q; i++)
            for (int h = 0; h < d->heads_q; h++)
                for (int c = 0; c < d->head_dim; c++) {
                    size_t k = o_offset(p, b, i, h) + (size_t)c;
                    double a = fjt_load(x, d->dtype, k), r = fjt_load(y, d->dtype, k);
                    if (!isfinite(a) || !isfinite(r)) return INFINITY;
                    num += (a - r) * (a - r);
                    den += r * r;
                }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* Rows that see no key: every output element exactly 0, lse exactly -inf. */
static size_t nonzero_empty_rows(const fjt_problem *p, const void *o, const float *lse)
{
    const fj_attention_desc *d = &p->d;
    size_t bad = 0;
    for (int b = 0; b < d->batch; b++)
        for (int h = 0; h < d->heads_q; h++)
            for (int i = 0; i < d->seqlen_q; i++) {
                size_t li = ((size_t)b * d->heads_q + h) * d->seqlen_q + i;
                if (!(isinf(p->ref_lse[li]) && p->ref_lse[li] < 0)) continue;
                bool row_bad = lse && !(isinf(lse[li]) && lse[li] < 0);
                for (int c = 0; c < d->head_dim; c++)
                    if (fjt_load(o, d->dtype, o_offset(p, b, i, h) + (size_t)c) != 0.0) row_bad = true;
                bad += row_bad;
            }
    return bad;
}

typedef struct checkers {
    fj_context *tiled, *ref;
} checkers;

/* Every check of the file's header on one problem. */
static void check_problem(const checkers *c, const fj_attention_desc *d, fjt_rng *rng,
                          bool with_lse)
{
    fjt_problem p;
    if (!fjt_problem_make(&p, d, rng)) fail_msg("out of memory making %s", fjt_desc_str(d));
    const char *what = fjt_desc_str(d);
    double tol = fjt_tolerance(d->dtype);

    fjt_error e;
    fj_status s = fjt_run(c->tiled, &p, &e, with_lse);
    if (s) fail_msg("%s: fjt_run: %s: %s", what, fj_status_name(s), fj_last_error());
    if (!(e.rel_fro <= tol) || e.nan_count || e.gaps_written || e.lse_mismatch ||
        !(e.lse_max_abs <= LSE_TOL))
        fail_msg("%s: vs oracle rel_fro %.3g (tol %.3g) max_abs %.3g nan %zu gaps %zu lse "
                 "mismatch %zu lse err %.3g",
                 what, e.rel_fro, tol, e.max_abs, e.nan_count, e.gaps_written, e.lse_mismatch,
                 e.lse_max_abs);

    size_t ob = p.o_elems * elem_size(d->dtype);
    void *o_tiled = malloc(ob), *o_ref = malloc(ob);
    float *l_tiled = with_lse ? malloc(p.lse_elems * sizeof(float)) : NULL;
    float *l_ref = with_lse ? malloc(p.lse_elems * sizeof(float)) : NULL;
    if (!o_tiled || !o_ref || (with_lse && (!l_tiled || !l_ref))) fail_msg("out of memory");
    run_plan(c->tiled, &p, o_tiled, l_tiled);
    run_plan(c->ref, &p, o_ref, l_ref);
    double dist = output_distance(&p, o_tiled, o_ref);
    if (!(dist <= tol)) fail_msg("%s: vs cpu-reference rel_fro %.3g (tol %.3g)", what, dist, tol);
    if (with_lse)
        for (size_t k = 0; k < p.lse_elems; k++) {
            bool both_inf = isinf(l_tiled[k]) && isinf(l_ref[k]) && l_tiled[k] == l_ref[k];
            if (!both_inf && !(fabs((double)l_tiled[k] - l_ref[k]) <= LSE_TOL))
                fail_msg("%s: lse[%zu] %.9g vs cpu-reference %.9g", what, k, (double)l_tiled[k],
                         (double)l_ref[k]);
        }
    size_t bad = nonzero_empty_rows(&p, o_tiled, l_tiled);
    if (bad) fail_msg("%s: %zu rows that see no key are not exactly zero / -inf", what, bad);
    free(o_tiled);
    free(o_ref);
    free(l_tiled);
    free(l_ref);
    fjt_problem_free(&p);
}

/* ---- layouts -------------------------------------------------------------- */

enum layout { DENSE, BHSD, PADDED, LAYOUTS };

/* Element strides (batch, seq, head) of a [b, seq, heads, dim] tensor. */
static void set_layout(int64_t s[3], enum layout l, int seq, int heads, int dim)
{
    switch (l) {
    case DENSE: s[0] = s[1] = s[2] = 0; break;
    case BHSD: /* [b, heads, seq, dim] */
        s[2] = (int64_t)seq * dim;
        s[1] = dim;
        s[0] = (int64_t)heads * seq * dim;
        break;
    case PADDED: /* rows padded by 3 elements, batches by 5 more: gaps the output must not touch */
        s[2] = dim + 3;
        s[1] = (int64_t)heads * (dim + 3);
        s[0] = (int64_t)seq * heads * (dim + 3) + 5;
        break;
    default: break;
    }
}

static void set_layouts(fj_attention_desc *d, enum layout l)
{
    set_layout(d->q_stride, l, d->seqlen_q, d->heads_q, d->head_dim);
    set_layout(d->k_stride, l, d->seqlen_k, d->heads_kv, d->head_dim);
    set_layout(d->v_stride, l, d->seqlen_k, d->heads_kv, d->head_dim);
    set_layout(d->o_stride, l, d->seqlen_q, d->heads_q, d->head_dim);
}

/* ---- the grid ------------------------------------------------------------- */

static const int grid_seqlens[] = {1, 2, 3, 17, 63, 64, 65, 127, 128, 129, 239, 1023};
static const int grid_dims[] = {8, 40, 64, 80, 96, 128, 200, 256};
enum heads_kind { MHA, GQA8, MQA, HEAD_KINDS };
enum window_kind { NO_WINDOW, LEFT, RIGHT, BOTH, WINDOW_KINDS };
#define NELEMS(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* order[0..n): each of k values n/k or n/k + 1 times, shuffled, so that every
 * axis value appears several times while the combinations stay random. */
static void stratify(int *order, int n, int k, fjt_rng *rng)
{
    for (int i = 0; i < n; i++) order[i] = i % k;
    for (int i = n - 1; i > 0; i--) {
        int j = fjt_range(rng, 0, i), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
}

static void set_heads(fj_attention_desc *d, enum heads_kind kind, fjt_rng *rng)
{
    switch (kind) {
    case MHA: d->heads_q = d->heads_kv = fjt_range(rng, 1, 3); break;
    case GQA8: d->heads_kv = fjt_range(rng, 1, 2); d->heads_q = 8 * d->heads_kv; break;
    case MQA: d->heads_kv = 1; d->heads_q = fjt_range(rng, 2, 6); break;
    default: break;
    }
}

static void set_window(fj_attention_desc *d, enum window_kind kind, fjt_rng *rng)
{
    int hi = d->seqlen_k + 8;
    d->window_left = kind == LEFT || kind == BOTH ? fjt_range(rng, 0, hi) : -1;
    d->window_right = kind == RIGHT || kind == BOTH ? fjt_range(rng, 0, hi) : -1;
}

/* The oracle is plain double loops: keep each problem's cost modest by
 * trimming the batch, then the heads (keeping the GQA/MQA kind), of the
 * problems where long seqlens meet; only the very few costliest (both seqlens
 * 1023 with a large head dim) lose their kind and keep one head. Every
 * seqlen, head dim and dtype keeps its count. */
static void cap_cost(fj_attention_desc *d)
{
    const double cap = 4e7;
    double per_head = (double)d->seqlen_q * d->seqlen_k * d->head_dim;
    if (per_head * d->batch * d->heads_q > cap) d->batch = 1;
    if (per_head * d->heads_q > cap && d->heads_kv > 1) {
        d->heads_q /= d->heads_kv; /* the group over one kv head */
        d->heads_kv = 1;
    }
    if (per_head * d->heads_q > cap && d->heads_q != 8 && d->heads_q > 2) d->heads_q = 2;
    if (per_head * d->heads_q > 8 * cap) d->heads_q = d->heads_kv = 1;
}

static void test_grid(void **state)
{
    const checkers *c = *state;
    fjt_rng rng;
    fjt_rng_init(&rng, suite_seed ^ 0x1001);
    enum { N = 96 };
    int sq[N], sk[N], dim[N], dt[N], heads[N], causal[N], window[N], layout[N];
    stratify(sq, N, NELEMS(grid_seqlens), &rng);
    stratify(sk, N, NELEMS(grid_seqlens), &rng);
    stratify(dim, N, NELEMS(grid_dims), &rng);
    stratify(dt, N, 3, &rng);
    stratify(heads, N, HEAD_KINDS, &rng);
    stratify(causal, N, 3, &rng);
    stratify(window, N, WINDOW_KINDS, &rng);
    stratify(layout, N, LAYOUTS, &rng);
    for (int i = 0; i < N; i++) {
        fj_attention_desc d;
        fj_attention_desc_init(&d, fjt_range(&rng, 1, 2), 1, 1, grid_seqlens[sq[i]],
                               grid_seqlens[sk[i]], grid_dims[dim[i]], (fj_dtype)dt[i]);
        set_heads(&d, (enum heads_kind)heads[i], &rng);
        d.causal = (fj_causal)causal[i];
        set_window(&d, (enum window_kind)window[i], &rng);
        if (fjt_range(&rng, 0, 1)) d.scale = (float)(0.05 + 1.5 * fjt_uniform(&rng));
        cap_cost(&d);
        set_layouts(&d, (enum layout)layout[i]);
        check_problem(c, &d, &rng, i % 8 != 7); /* every 8th without lse */
    }
}

/* ---- forced small blocks -------------------------------------------------- */

/* Block sizes forced small and coprime-ish to the seqlens, so that a small
 * problem goes through many blocks, partial blocks at both ends of the band,
 * and many rescalings of the accumulator; large scales make the softmax peaky
 * so the running max keeps moving. Each problem gets a fresh context (plans
 * are cached per desc). */
static void test_forced_small_blocks(void **state)
{
    (void)state;
    fjt_rng rng;
    fjt_rng_init(&rng, suite_seed ^ 0x2002);
    for (int i = 0; i < 40; i++) {
        int bq = fjt_range(&rng, 1, 40), bk = fjt_range(&rng, 1, 90);
        assert_int_equal(fj_cpu_tiled_force_blocks(bq, bk), FJ_OK);
        checkers c = {make_context(FJ_BACKEND_CPU, 2), make_context(FJ_BACKEND_CPU_REFERENCE, 2)};
        fj_attention_desc d;
        fj_attention_desc_init(&d, 1, 1, 1, fjt_range(&rng, 1, 300), fjt_range(&rng, 1, 300),
                               grid_dims[fjt_range(&rng, 0, NELEMS(grid_dims) - 1)],
                               (fj_dtype)fjt_range(&rng, 0, 2));
        set_heads(&d, (enum heads_kind)fjt_range(&rng, 0, HEAD_KINDS - 1), &rng);
        d.causal = (fj_causal)fjt_range(&rng, 0, 2);
        set_window(&d, (enum window_kind)fjt_range(&rng, 0, WINDOW_KINDS - 1), &rng);
        if (i % 2) d.scale = (float)(1.0 + 3.0 * fjt_uniform(&rng));
        cap_cost(&d);
        set_layouts(&d, (enum layout)fjt_range(&rng, 0, LAYOUTS - 1));

        fj_plan *plan;
        assert_int_equal(fj_plan_create(c.tiled, &d, &plan), FJ_OK);
        if (!strstr(fj_plan_describe(plan), "forced"))
            fail_msg("forced blocks not in describe:\n%s", fj_plan_describe(plan));
        fj_plan_destroy(plan);
        check_problem(&c, &d, &rng, true);
        fj_context_destroy(c.tiled);
        fj_context_destroy(c.ref);
    }
    assert_int_equal(fj_cpu_tiled_force_blocks(0, 0), FJ_OK);
}

/* Scores that rise along the keys move every row's max at every block (a
 * rescale each time); falling ones never move it after the first block. Built
 * by hand (k_j = ramp_j * q-direction), so checked against the reference
 * backend, with blocks forced small. */
static void test_rescaling_ramps(void **state)
{
    (void)state;
    const int S = 200, D = 16;
    assert_int_equal(fj_cpu_tiled_force_blocks(7, 5), FJ_OK);
    fj_context *tiled = make_context(FJ_BACKEND_CPU, 2), *ref = make_context(FJ_BACKEND_CPU_REFERENCE, 2);
    float *q = malloc(sizeof(float) * S * D), *k = malloc(sizeof(float) * S * D),
          *v = malloc(sizeof(float) * S * D), *o1 = malloc(sizeof(float) * S * D),
          *o2 = malloc(sizeof(float) * S * D), *l1 = malloc(sizeof(float) * S),
          *l2 = malloc(sizeof(float) * S);
    fjt_rng rng;
    fjt_rng_init(&rng, suite_seed ^ 0x3003);
    for (int dir = -1; dir <= 1; dir += 2) {
        for (int i = 0; i < S; i++)
            for (int c = 0; c < D; c++) {
                q[i * D + c] = 1.0f;
                k[i * D + c] = (float)dir * (float)i * 0.05f + 0.01f * (float)fjt_uniform(&rng);
                v[i * D + c] = (float)(2.0 * fjt_uniform(&rng) - 1.0);
            }
        for (int causal = 0; causal <= 1; causal++) {
            fj_attention_desc d;
            fj_attention_desc_init(&d, 1, 1, 1, S, S, D, FJ_F32);
            d.causal = causal ? FJ_CAUSAL_BOTTOM_RIGHT : FJ_CAUSAL_NONE;
            fj_context *ctxs[2] = {tiled, ref};
            float *os[2] = {o1, o2}, *ls[2] = {l1, l2};
            for (int b = 0; b < 2; b++) {
                fjt_poison_f32(os[b], (size_t)S * D);
                fjt_poison_f32(ls[b], S);
                assert_int_equal(fj_attention(ctxs[b], &d, q, k, v, os[b], ls[b], NULL), FJ_OK);
            }
            double num = 0, den = 0, lse_err = 0;
            for (int i = 0; i < S * D; i++) {
                num += ((double)o1[i] - o2[i]) * ((double)o1[i] - o2[i]);
                den += (double)o2[i] * o2[i];
            }
            for (int i = 0; i < S; i++)
                lse_err = fmax(lse_err, fabs((double)l1[i] - l2[i]) / fmax(1.0, fabs(l2[i])));
            if (!(sqrt(num / den) <= 1e-5) || !(lse_err <= 1e-6))
                fail_msg("ramp %+d causal %d: rel_fro %.3g, lse rel err %.3g vs cpu-reference", dir,
                         causal, sqrt(num / den), lse_err);
        }
    }
    free(q), free(k), free(v), free(o1), free(o2), free(l1), free(l2);
    fj_context_destroy(tiled);
    fj_context_destroy(ref);
    assert_int_equal(fj_cpu_tiled_force_blocks(0, 0), FJ_OK);
}

/* ---- specific cases ------------------------------------------------------- */

/* Rows that see no key, by every way it can happen (and rows that see one). */
static void test_rows_without_keys(void **state)
{
    const checkers *c = *state;
    fjt_rng rng;
    fjt_rng_init(&rng, suite_seed ^ 0x4004);
    static const struct {
        int sq, sk;
        fj_causal causal;
        int wl, wr;
    } cases[] = {
        {130, 40, FJ_CAUSAL_BOTTOM_RIGHT, -1, -1}, /* rows 0..89 see nothing */
        {300, 65, FJ_CAUSAL_NONE, 3, 0},           /* rows past key 68 see nothing */
        {129, 17, FJ_CAUSAL_TOP_LEFT, 0, -1},      /* row i sees key i while i < 17 */
        {100, 10, FJ_CAUSAL_NONE, -1, 2},          /* rows 0..86 see nothing */
        {64, 200, FJ_CAUSAL_NONE, 0, 0},           /* row i sees key i + 136 only */
        {239, 1, FJ_CAUSAL_BOTTOM_RIGHT, 5, -1},   /* only the last rows see the key */
    };
    for (int i = 0; i < NELEMS(cases); i++)
        for (int t = 0; t < 3; t++) {
            fj_attention_desc d;
            fj_attention_desc_init(&d, 2, 8, 1, cases[i].sq, cases[i].sk, 40, (fj_dtype)t);
            d.causal = cases[i].causal;
            d.window_left = cases[i].wl;
            d.window_right = cases[i].wr;
            check_problem(c, &d, &rng, true);
        }
}

/* GQA and MQA with forced row blocks smaller than the group, so a kv head's
 * query heads are split over several blocks (uneven chunks included). */
static void test_head_chunks(void **state)
{
    (void)state;
    fjt_rng rng;
    fjt_rng_init(&rng, suite_seed ^ 0x5005);
    static const int bqs[] = {1, 3, 5, 8, 13, 64};
    for (int i = 0; i < NELEMS(bqs); i++) {
        assert_int_equal(fj_cpu_tiled_force_blocks(bqs[i], 33), FJ_OK);
        checkers c = {make_context(FJ_BACKEND_CPU, 2), make_context(FJ_BACKEND_CPU_REFERENCE, 2)};
        fj_attention_desc d;
        fj_attention_desc_init(&d, 2, 16, 2, 37, 70, 64, (fj_dtype)(i % 3)); /* GQA 8:1 */
        d.causal = FJ_CAUSAL_BOTTOM_RIGHT;
        check_problem(&c, &d, &rng, true);
        fj_attention_desc_init(&d, 1, 12, 1, 1, 129, 128, (fj_dtype)((i + 1) % 3)); /* MQA decode */
        check_problem(&c, &d, &rng, true);
        fj_attention_desc_init(&d, 1, 6, 1, 50, 50, 8, (fj_dtype)((i + 2) % 3)); /* MQA, window */
        d.causal = FJ_CAUSAL_TOP_LEFT;
        d.window_left = 9;
        set_layouts(&d, BHSD);
        check_problem(&c, &d, &rng, true);
        fj_context_destroy(c.tiled);
        fj_context_destroy(c.ref);
    }
    assert_int_equal(fj_cpu_tiled_force_blocks(0, 0), FJ_OK);
}

/* Layouts the grid does not draw: inputs whose rows overlap or repeat
 * (seq stride 0 broadcasts one key to every position; stride < head_dim
 * overlaps), which f32 cannot hand to sgemm in place, and a shared kv head
 * (head stride 0). */
static void test_overlapping_inputs(void **state)
{
    const checkers *c = *state;
    fjt_rng rng;
    fjt_rng_init(&rng, suite_seed ^ 0x6006);
    for (int t = 0; t < 3; t++) {
        fj_attention_desc d;
        fj_attention_desc_init(&d, 2, 4, 2, 65, 129, 40, (fj_dtype)t);
        d.k_stride[0] = 40;
        d.k_stride[1] = 0;
        d.k_stride[2] = 7; /* heads overlap too */
        d.v_stride[0] = 129 * 20;
        d.v_stride[1] = 20; /* half a row apart */
        d.v_stride[2] = 0;  /* both kv heads read the same values */
        d.q_stride[0] = 65 * 4 * 40;
        d.q_stride[1] = 4 * 40;
        d.q_stride[2] = 40;
        d.causal = FJ_CAUSAL_BOTTOM_RIGHT;
        check_problem(c, &d, &rng, true);
    }
}

/* Worker counts other than the default, including more workers than tasks. */
static void test_thread_counts(void **state)
{
    (void)state;
    fjt_rng rng;
    fjt_rng_init(&rng, suite_seed ^ 0x7007);
    static const int threads[] = {1, 3, 7};
    for (int i = 0; i < NELEMS(threads); i++) {
        checkers c = {make_context(FJ_BACKEND_CPU, threads[i]),
                      make_context(FJ_BACKEND_CPU_REFERENCE, threads[i])};
        fj_attention_desc d;
        fj_attention_desc_init(&d, 2, 3, 3, 300, 250, 64, (fj_dtype)i);
        d.causal = FJ_CAUSAL_TOP_LEFT;
        check_problem(&c, &d, &rng, true);
        fj_attention_desc_init(&d, 1, 2, 1, 2, 700, 96, FJ_F32);
        check_problem(&c, &d, &rng, true);
        fj_context_destroy(c.tiled);
        fj_context_destroy(c.ref);
    }
}

/* One long head, S = 16384, D = 64, f32: against the reference (the double
 * oracle would take minutes), plus a few rows recomputed in double here. */
static void test_long_f32(void **state)
{
    const checkers *c = *state;
    const int S = 16384, D = 64;
    size_t n = (size_t)S * D;
    float *q = malloc(n * 4), *k = malloc(n * 4), *v = malloc(n * 4), *o1 = malloc(n * 4),
          *o2 = malloc(n * 4), *l1 = malloc(S * 4), *l2 = malloc(S * 4);
    double *s = malloc(sizeof(double) * S);
    if (!q || !k || !v || !o1 || !o2 || !l1 || !l2 || !s) fail_msg("out of memory");
    fjt_rng rng;
    fjt_rng_init(&rng, suite_seed ^ 0x8008);
    for (size_t i = 0; i < n; i++) {
        q[i] = (float)(2.0 * fjt_uniform(&rng) - 1.0);
        k[i] = (float)(2.0 * fjt_uniform(&rng) - 1.0);
        v[i] = (float)(2.0 * fjt_uniform(&rng) - 1.0);
    }
    for (int causal = 0; causal <= 1; causal++) {
        fj_attention_desc d;
        fj_attention_desc_init(&d, 1, 1, 1, S, S, D, FJ_F32);
        d.causal = causal ? FJ_CAUSAL_BOTTOM_RIGHT : FJ_CAUSAL_NONE;
        d.scale = 0.3f; /* sharper than 1/sqrt(64), so the max matters */
        fjt_poison_f32(o1, n);
        fjt_poison_f32(o2, n);
        fjt_poison_f32(l1, S);
        fjt_poison_f32(l2, S);
        assert_int_equal(fj_attention(c->tiled, &d, q, k, v, o1, l1, NULL), FJ_OK);
        assert_int_equal(fj_attention(c->ref, &d, q, k, v, o2, l2, NULL), FJ_OK);
        double num = 0, den = 0, lse_err = 0;
        for (size_t i = 0; i < n; i++) {
            num += ((double)o1[i] - o2[i]) * ((double)o1[i] - o2[i]);
            den += (double)o2[i] * o2[i];
        }
        for (int i = 0; i < S; i++) lse_err = fmax(lse_err, fabs((double)l1[i] - l2[i]));
        if (!(sqrt(num / den) <= 1e-5) || !(lse_err <= LSE_TOL))
            fail_msg("S=%d causal %d: rel_fro %.3g, lse err %.3g vs cpu-reference", S, causal,
                     sqrt(num / den), lse_err);
        static const int rows[] = {0, 1, 4095, 9999, 16383};
        for (int r = 0; r < NELEMS(rows); r++) {
            int i = rows[r], hi = causal ? i + 1 : S;
            double m = -INFINITY, sum = 0, err = 0, ref_norm = 0;
            for (int j = 0; j < hi; j++) {
                double dot = 0;
                for (int x = 0; x < D; x++) dot += (double)q[(size_t)i * D + x] * k[(size_t)j * D + x];
                s[j] = dot * d.scale;
                m = fmax(m, s[j]);
            }
            for (int j = 0; j < hi; j++) sum += exp(s[j] - m);
            for (int x = 0; x < D; x++) {
                double acc = 0;
                for (int j = 0; j < hi; j++) acc += exp(s[j] - m) * v[(size_t)j * D + x];
                acc /= sum;
                err += (acc - o1[(size_t)i * D + x]) * (acc - o1[(size_t)i * D + x]);
                ref_norm += acc * acc;
            }
            if (!(sqrt(err / ref_norm) <= 1e-5) || !(fabs(m + log(sum) - l1[i]) <= LSE_TOL))
                fail_msg("S=%d causal %d row %d: rel err %.3g, lse %.9g vs double %.9g", S, causal,
                         i, sqrt(err / ref_norm), (double)l1[i], m + log(sum));
        }
    }
    free(q), free(k), free(v), free(o1), free(o2), free(l1), free(l2), free(s);
}

/* ---- the row kernel ------------------------------------------------------- */

/* fj_tiled_exp2 against exp2 on a dense sweep of [-126, 0], and 0 below. */
static void test_row_kernel_exp2(void **state)
{
    (void)state;
    double worst = 0;
    for (int i = 0; i <= 1260000; i++) {
        float x = (float)(-126.0 * i / 1260000.0);
        double want = exp2((double)x), got = fj_tiled_exp2(x);
        worst = fmax(worst, fabs(got - want) / want);
    }
    if (!(worst <= 2e-7)) fail_msg("fj_tiled_exp2: relative error %.3g > 2e-7", worst);
    assert_true(fj_tiled_exp2(0.0f) == 1.0f);
    assert_true(fj_tiled_exp2(-126.5f) == 0.0f);
    assert_true(fj_tiled_exp2(-INFINITY) == 0.0f);
}

/* fj_tiled_softmax_step against double arithmetic: rows of every length
 * around the vector widths (tails), unseen keys (-inf) anywhere, several
 * steps per row with the max rising, falling and unchanged. Tolerances: the
 * float subtraction score - max (scores up to 20 in magnitude, half an ulp
 * 1e-6) moves 2^x by up to 7e-7 relative, on top of the polynomial's 2e-7. */
static void test_row_kernel_steps(void **state)
{
    (void)state;
    fjt_rng rng;
    fjt_rng_init(&rng, suite_seed ^ 0x9009);
    float x[80];
    double ref[80];
    for (int trial = 0; trial < 400; trial++) {
        float m = -INFINITY, sum = 0;
        double dm = -INFINITY, dsum = 0; /* the same in double */
        for (int step = 0; step < 4; step++) {
            int n = fjt_range(&rng, 1, 80);
            double shift = 20.0 * (fjt_uniform(&rng) - 0.5);
            for (int j = 0; j < n; j++) x[j] = (float)(shift + 10.0 * (fjt_uniform(&rng) - 0.5));
            int lo = fjt_range(&rng, 0, n - 1), hi = fjt_range(&rng, lo + 1, n);
            if (step == 3) { /* the max stays: every score below the running max */
                for (int j = 0; j < n; j++) x[j] = m - 1.0f - (float)fjt_uniform(&rng);
            }
            for (int j = 0; j < n; j++)
                if (j < lo || j >= hi) x[j] = -INFINITY;
            double bm = dm;
            for (int j = lo; j < hi; j++) bm = fmax(bm, (double)x[j]);
            for (int j = 0; j < n; j++) ref[j] = j >= lo && j < hi ? exp2((double)x[j] - bm) : 0.0;
            double want_factor = exp2(dm - bm), bs = 0;
            for (int j = 0; j < n; j++) bs += ref[j];
            dsum = dsum * want_factor + bs;
            dm = bm;

            float factor = fj_tiled_softmax_step(x, n, &m, &sum);
            if (step == 0) assert_true(factor == 0.0f);
            if (step == 3) assert_true(factor == 1.0f);
            if (!(fabs(factor - want_factor) <= 1e-6 * want_factor) || (double)m != dm)
                fail_msg("trial %d step %d: factor %.9g vs %.9g, max %.9g vs %.9g", trial, step,
                         (double)factor, want_factor, (double)m, dm);
            for (int j = 0; j < n; j++) {
                if (ref[j] == 0.0 ? x[j] != 0.0f : !(fabs(x[j] - ref[j]) <= 1e-6 * ref[j]))
                    fail_msg("trial %d step %d n %d [%d, %d): x[%d] = %.9g, want %.9g", trial,
                             step, n, lo, hi, j, (double)x[j], ref[j]);
            }
            if (!(fabs(sum - dsum) <= 2e-6 * dsum))
                fail_msg("trial %d step %d: sum %.9g, want %.9g", trial, step, (double)sum, dsum);
        }
    }
}

/* ---- plan parameters ------------------------------------------------------ */

static size_t workspace_bytes(fj_context *ctx, int seqlen, int dim)
{
    fj_attention_desc d;
    fj_attention_desc_init(&d, 1, 8, 8, seqlen, seqlen, dim, FJ_BF16);
    fj_plan *plan;
    assert_int_equal(fj_plan_create(ctx, &d, &plan), FJ_OK);
    const char *w = strstr(fj_plan_describe(plan), "workspace: ");
    if (!w) fail_msg("no workspace line in:\n%s", fj_plan_describe(plan));
    size_t bytes = strtoull(w + strlen("workspace: "), NULL, 10);
    fj_plan_destroy(plan);
    return bytes;
}

/* The per-thread workspace depends on the block sizes and head_dim only:
 * the same at 4096 keys as at 2^20, and small. (Plans only; nothing runs.) */
static void test_workspace_bounded(void **state)
{
    const checkers *c = *state;
    static const int dims[] = {8, 64, 128, 256};
    for (int i = 0; i < NELEMS(dims); i++) {
        size_t small = workspace_bytes(c->tiled, 4096, dims[i]);
        size_t huge = workspace_bytes(c->tiled, 1 << 20, dims[i]);
        assert_true(small > 0);
        assert_int_equal(small, huge);
        assert_true(huge <= (size_t)16 << 20);
    }
}

static void test_force_blocks_hook(void **state)
{
    const checkers *c = *state;
    assert_int_equal(fj_cpu_tiled_force_blocks(0, 5), FJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(fj_last_error(), "block_q"));
    assert_int_equal(fj_cpu_tiled_force_blocks(5, -1), FJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(fj_last_error(), "block_k"));
    assert_int_equal(fj_cpu_tiled_force_blocks(FJ_CPU_TILED_MAX_BLOCK + 1, 5),
                     FJ_ERR_INVALID_ARGUMENT);

    fj_attention_desc d;
    fj_attention_desc_init(&d, 1, 2, 2, 100, 90, 32, FJ_F32);
    assert_int_equal(fj_cpu_tiled_force_blocks(7, 9), FJ_OK);
    fj_plan *plan;
    assert_int_equal(fj_plan_create(c->tiled, &d, &plan), FJ_OK);
    const char *text = fj_plan_describe(plan);
    if (!strstr(text, "backend: cpu") || !strstr(text, "7 query rows x 9 keys") ||
        !strstr(text, "forced"))
        fail_msg("unexpected describe:\n%s", text);
    fj_plan_destroy(plan);

    assert_int_equal(fj_cpu_tiled_force_blocks(0, 0), FJ_OK);
    assert_int_equal(fj_plan_create(c->tiled, &d, &plan), FJ_OK);
    text = fj_plan_describe(plan);
    if (!strstr(text, "heuristic") || strstr(text, "forced")) fail_msg("unexpected describe:\n%s", text);
    /* blocks never exceed what the problem has: 100 rows, 90 keys */
    fj_cpu_tiled_blocks blocks;
    fj_problem p;
    assert_int_equal(fj_problem_init(&p, &d), FJ_OK);
    assert_int_equal(fj_cpu_tiled_choose_blocks(NULL, &p, NULL, 2, &blocks), FJ_OK);
    assert_true(blocks.block_q >= 1 && blocks.block_q <= 100);
    assert_true(blocks.block_k >= 1 && blocks.block_k <= 90);
    fj_plan_destroy(plan);
}

/* ---- suite ---------------------------------------------------------------- */

static int setup(void **state)
{
    static checkers c;
    c.tiled = make_context(FJ_BACKEND_CPU, 2);
    c.ref = make_context(FJ_BACKEND_CPU_REFERENCE, 2);
    if (fj_context_backend(c.tiled) != FJ_BACKEND_CPU) return -1;
    *state = &c;
    return 0;
}

static int teardown(void **state)
{
    checkers *c = *state;
    fj_context_destroy(c->tiled);
    fj_context_destroy(c->ref);
    return 0;
}

int main(void)
{
    suite_seed = fjt_seed();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_row_kernel_exp2),
        cmocka_unit_test(test_row_kernel_steps),
        cmocka_unit_test(test_force_blocks_hook),
        cmocka_unit_test(test_workspace_bounded),
        cmocka_unit_test(test_rows_without_keys),
        cmocka_unit_test(test_overlapping_inputs),
        cmocka_unit_test(test_head_chunks),
        cmocka_unit_test(test_thread_counts),
        cmocka_unit_test(test_rescaling_ramps),
        cmocka_unit_test(test_forced_small_blocks),
        cmocka_unit_test(test_grid),
        cmocka_unit_test(test_long_f32),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
