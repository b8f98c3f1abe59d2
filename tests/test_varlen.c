/* Variable-length batches (FJ_FEATURE_VARLEN) on one CPU backend
 * (--backend cpu-reference | cpu): q, k, v and o packed along the token
 * axis, placed by cu_seqlens_q and cu_seqlens_k (and seqused_k), checked
 * against the double oracle run on each sequence as the dense problem of its
 * own lengths (tests/common/harness.c), outputs and lse poisoned before each
 * run (what no sequence owns must stay poisoned; keys held but not used, and
 * the pad tokens, are NaN). One plan runs many length mixes. Random lengths
 * come from the logged seed (FLASHJIT_TEST_SEED replays them): empty
 * sequences, 1, primes, around the CPU blocks, Sq != Sk both ways; every
 * mask, GQA and MQA, every dtype, padded strides, lse, ALiBi and sinks.
 * Bad input: every rule of fj_execute_extras and of the desc, each refused
 * as FJ_ERR_INVALID_ARGUMENT naming the argument, nothing written. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>

#include <cmocka.h>

#include "flashjit.h"
#include "harness.h"

static fj_backend backend = FJ_BACKEND_CPU;

static fj_context *make_ctx(void)
{
    fj_context_options o;
    fj_context_options_init(&o);
    o.backend = backend;
    o.cache_dir = "";
    o.tuning_file = "";
    fj_context *ctx = NULL;
    if (fj_context_create(&o, &ctx)) fail_msg("context: %s", fj_last_error());
    return ctx;
}

/* The bounds every CPU backend meets (tests/conformance, fjt_case_bounds):
 * the dtype's tolerance against the oracle (fjt_within: or against the size
 * of a row's terms where random rows cancel), lse within 1e-4, no NaN, rows
 * that see no key exactly 0, nothing written outside the sequences' rows. */
static void expect_ok(const fjt_problem *p, const fjt_error *e, bool with_lse, const char *what)
{
    const double tol = fjt_tolerance(p->d.dtype);
    if (e->nan_count || !fjt_within(e, tol) || e->gaps_written || e->empty_not_zero ||
        (with_lse && (e->lse_mismatch || !(e->lse_max_abs <= 1e-4)))) {
        char lens[512];
        fjt_varlen_str(&p->vl, lens, sizeof lens);
        fail_msg("%s: %s varlen=%s lse=%d: rel %.3e (tol %.1e) max_abs %.3e nan %zu gaps %zu "
                 "empty_not_zero %zu lse_mismatch %zu lse_max_abs %.3e",
                 what, fjt_desc_str(&p->d), lens, (int)with_lse, e->rel_fro, tol, e->max_abs,
                 e->nan_count, e->gaps_written, e->empty_not_zero, e->lse_mismatch, e->lse_max_abs);
    }
}

/* A varlen desc for the lengths of vl: maxima their largest plus slack_q,
 * slack_k (a plan made for more than the batch uses). */
static fj_attention_desc varlen_desc(const fjt_varlen *vl, int hq, int hkv, int dim, fj_dtype t,
                                     int slack_q, int slack_k)
{
    int mq = 1, mk = 1;
    for (int b = 0; b < vl->nseq; b++) {
        if (vl->len_q[b] > mq) mq = vl->len_q[b];
        if (fjt_varlen_keys(vl, b) > mk) mk = fjt_varlen_keys(vl, b);
    }
    fj_attention_desc d;
    fj_attention_desc_init(&d, vl->nseq, hq, hkv, mq + slack_q, mk + slack_k, dim, t);
    d.features = FJ_FEATURE_VARLEN;
    return d;
}

/* Makes the problem, a plan for its desc, runs and checks it. */
static void check_one(fj_context *ctx, const fj_attention_desc *d, const fjt_varlen *vl,
                      fjt_rng *rng, bool with_lse, const char *what)
{
    fjt_problem p;
    if (!fjt_problem_make_varlen(&p, d, vl, rng, true)) fail_msg("%s: making the problem", what);
    fj_plan *plan;
    if (fj_plan_create(ctx, d, &plan)) fail_msg("%s: plan: %s", what, fj_last_error());
    fjt_error e;
    if (fjt_run_plan(ctx, plan, &p, with_lse, &e))
        fail_msg("%s: execute: %s (%s)", what, fj_last_error(), fjt_desc_str(d));
    expect_ok(&p, &e, with_lse, what);
    fj_plan_destroy(plan);
    fjt_problem_free(&p);
}

static fjt_varlen lengths(int n, const int *q, const int *k, const int *used, int pad_q, int pad_k)
{
    fjt_varlen v;
    memset(&v, 0, sizeof v);
    v.nseq = n;
    for (int b = 0; b < n; b++) {
        v.len_q[b] = q[b];
        v.len_k[b] = k[b];
        if (used) v.used_k[b] = used[b];
    }
    v.has_used = used != NULL;
    v.pad_q = pad_q;
    v.pad_k = pad_k;
    return v;
}

/* Chosen batches: empty sequences (no queries, no keys, both), length 1,
 * primes, more queries than keys and the reverse, every causal kind (rows of
 * a bottom-right causal sequence with fewer keys than queries see none),
 * seqused_k (0 included), a sink on rows that see no key, a batch of empty
 * sequences only. */
static void test_chosen_batches(void **state)
{
    (void)state;
    fj_context *ctx = make_ctx();
    fjt_rng rng;
    fjt_rng_init(&rng, fjt_seed() ^ 0x7661726c656eull);
    static const struct {
        const char *name;
        int n, q[6], k[6], used[6];
        bool has_used;
        fj_causal causal;
        int wl, wr, hq, hkv, dim;
        fj_dtype t;
        uint32_t features;
    } c[] = {
        {"empty-and-one",
         5,
         {0, 1, 7, 0, 1},
         {5, 0, 0, 0, 1},
         {0},
         false,
         FJ_CAUSAL_NONE,
         -1,
         -1,
         4,
         2,
         64,
         FJ_F32,
         0},
        {"primes-br",
         4,
         {17, 2, 61, 13},
         {31, 2, 7, 13},
         {0},
         false,
         FJ_CAUSAL_BOTTOM_RIGHT,
         -1,
         -1,
         8,
         1,
         40,
         FJ_F32,
         0},
        {"primes-tl",
         4,
         {17, 2, 61, 13},
         {31, 2, 7, 13},
         {0},
         false,
         FJ_CAUSAL_TOP_LEFT,
         -1,
         -1,
         3,
         3,
         64,
         FJ_F16,
         0},
        {"window",
         3,
         {129, 5, 64},
         {65, 300, 64},
         {0},
         false,
         FJ_CAUSAL_BOTTOM_RIGHT,
         16,
         -1,
         4,
         1,
         128,
         FJ_BF16,
         0},
        {"band-no-causal",
         3,
         {40, 1, 90},
         {90, 33, 1},
         {0},
         false,
         FJ_CAUSAL_NONE,
         3,
         2,
         2,
         2,
         8,
         FJ_F32,
         0},
        {"seqused",
         4,
         {3, 19, 1, 8},
         {40, 19, 7, 8},
         {11, 0, 7, 2},
         true,
         FJ_CAUSAL_BOTTOM_RIGHT,
         -1,
         -1,
         4,
         4,
         64,
         FJ_F32,
         0},
        {"sinks-empty-rows",
         3,
         {9, 4, 0},
         {0, 2, 3},
         {0},
         false,
         FJ_CAUSAL_BOTTOM_RIGHT,
         -1,
         -1,
         4,
         2,
         32,
         FJ_F32,
         FJ_FEATURE_SINKS},
        {"alibi-per-sequence",
         3,
         {50, 7, 23},
         {80, 7, 3},
         {0},
         false,
         FJ_CAUSAL_BOTTOM_RIGHT,
         -1,
         -1,
         4,
         1,
         64,
         FJ_F32,
         FJ_FEATURE_ALIBI | FJ_FEATURE_SINKS},
        {"all-empty",
         3,
         {0, 0, 0},
         {4, 0, 9},
         {0},
         false,
         FJ_CAUSAL_NONE,
         -1,
         -1,
         2,
         1,
         16,
         FJ_F32,
         0},
        {"decode-rows",
         6,
         {1, 1, 1, 2, 1, 1},
         {300, 1, 77, 4099, 0, 16},
         {0},
         false,
         FJ_CAUSAL_BOTTOM_RIGHT,
         -1,
         -1,
         8,
         2,
         128,
         FJ_BF16,
         0},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++)
        for (int pad = 0; pad < 2; pad++) {
            fjt_varlen vl = lengths(c[i].n, c[i].q, c[i].k, c[i].has_used ? c[i].used : NULL,
                                    pad ? 3 : 0, pad ? 5 : 0);
            fj_attention_desc d = varlen_desc(&vl, c[i].hq, c[i].hkv, c[i].dim, c[i].t, pad, 0);
            d.causal = c[i].causal;
            d.window_left = c[i].wl;
            d.window_right = c[i].wr;
            d.features |= c[i].features;
            if (pad) { /* padded token and head strides */
                int64_t *s[4] = {d.q_stride, d.k_stride, d.v_stride, d.o_stride};
                const int heads[4] = {d.heads_q, d.heads_kv, d.heads_kv, d.heads_q};
                for (int t = 0; t < 4; t++) {
                    s[t][2] = d.head_dim + 3;
                    s[t][1] = (int64_t)heads[t] * (d.head_dim + 3) + 5;
                }
            }
            char what[96];
            snprintf(what, sizeof what, "%s%s", c[i].name, pad ? " (padded)" : "");
            check_one(ctx, &d, &vl, &rng, true, what);
        }
    fj_context_destroy(ctx);
}

/* Lengths that matter: empty, 1, primes, around the CPU blocks (63/64/65,
 * 127/128/129), a random one. */
static int draw_length(fjt_rng *r, int most)
{
    static const int menu[] = {0, 1, 2, 3, 5, 7, 13, 17, 31, 61, 63, 64, 65, 127, 128, 129, 257};
    int v = fjt_range(r, 0, 5) == 0 ? fjt_range(r, 0, most)
                                    : menu[fjt_range(r, 0, (int)(sizeof menu / sizeof *menu) - 1)];
    return v > most ? most : v;
}

/* Random batches, and one plan per desc running several length mixes that
 * fit it (no new plan per mix): every mask, MHA/GQA/MQA, every dtype,
 * dense and padded strides, seqused_k and pad tokens sometimes, lse on and
 * off, ALiBi and sinks sometimes. */
static void test_random_batches(void **state)
{
    (void)state;
    fj_context *ctx = make_ctx();
    fjt_rng rng;
    fjt_rng_init(&rng, fjt_seed() ^ 0x72616e642d766cull);
    static const int dims[] = {8, 40, 64, 80, 128};
    static const int heads[][2] = {{1, 1}, {4, 4}, {8, 1}, {8, 2}, {6, 3}};
    const fj_dtype dtypes[] = {FJ_F32, FJ_F16, FJ_BF16};
    for (int round = 0; round < 24; round++) {
        const int nseq = fjt_range(&rng, 1, 8);
        const int max_q = fjt_range(&rng, 1, 300), max_k = fjt_range(&rng, 1, 300);
        const int g = fjt_range(&rng, 0, 4);
        fj_attention_desc d;
        fj_attention_desc_init(&d, nseq, heads[g][0], heads[g][1], max_q, max_k,
                               dims[fjt_range(&rng, 0, 4)], dtypes[fjt_range(&rng, 0, 2)]);
        d.features = FJ_FEATURE_VARLEN;
        d.causal = (fj_causal)fjt_range(&rng, 0, 2);
        if (fjt_range(&rng, 0, 2) == 0) d.window_left = fjt_range(&rng, 0, 40);
        if (fjt_range(&rng, 0, 3) == 0) d.window_right = fjt_range(&rng, 0, 40);
        if (fjt_range(&rng, 0, 3) == 0) d.features |= FJ_FEATURE_ALIBI;
        if (fjt_range(&rng, 0, 3) == 0) d.features |= FJ_FEATURE_SINKS;
        if (fjt_range(&rng, 0, 3) == 0) d.scale = (float)(0.05 + 0.5 * fjt_uniform(&rng));
        const bool padded = fjt_range(&rng, 0, 2) == 0;
        if (padded) {
            int64_t *s[4] = {d.q_stride, d.k_stride, d.v_stride, d.o_stride};
            const int h[4] = {d.heads_q, d.heads_kv, d.heads_kv, d.heads_q};
            for (int t = 0; t < 4; t++) {
                s[t][2] = d.head_dim + 8;
                s[t][1] = (int64_t)h[t] * (d.head_dim + 8) + 16;
            }
        }
        fj_plan *plan;
        if (fj_plan_create(ctx, &d, &plan))
            fail_msg("plan: %s: %s", fjt_desc_str(&d), fj_last_error());
        for (int mix = 0; mix < 3; mix++) {
            fjt_varlen vl;
            memset(&vl, 0, sizeof vl);
            vl.nseq = nseq;
            vl.has_used = fjt_range(&rng, 0, 3) == 0;
            for (int b = 0; b < nseq; b++) {
                vl.len_q[b] = draw_length(&rng, max_q);
                if (vl.has_used) {
                    vl.used_k[b] = draw_length(&rng, max_k);
                    vl.len_k[b] = vl.used_k[b] + fjt_range(&rng, 0, 9);
                } else {
                    vl.len_k[b] = draw_length(&rng, max_k);
                }
            }
            if (fjt_range(&rng, 0, 2) == 0) {
                vl.pad_q = fjt_range(&rng, 1, 4);
                vl.pad_k = fjt_range(&rng, 0, 4);
            }
            fjt_problem p;
            if (!fjt_problem_make_varlen(&p, &d, &vl, &rng, true)) fail_msg("making the problem");
            const bool with_lse = fjt_range(&rng, 0, 3) != 0;
            fjt_error e;
            if (fjt_run_plan(ctx, plan, &p, with_lse, &e))
                fail_msg("round %d mix %d: %s: %s", round, mix, fjt_desc_str(&d), fj_last_error());
            char what[64];
            snprintf(what, sizeof what, "round %d mix %d", round, mix);
            expect_ok(&p, &e, with_lse, what);
            fjt_problem_free(&p);
        }
        fj_plan_destroy(plan);
    }
    fj_context_destroy(ctx);
}

/* One sequence of the plan's longest lengths, and a decode-shaped plan
 * (one query row per sequence, which the CPU backend's dense plan would
 * run on its decode path) on long keys of uneven lengths. */
static void test_long_and_decode(void **state)
{
    (void)state;
    fj_context *ctx = make_ctx();
    fjt_rng rng;
    fjt_rng_init(&rng, fjt_seed() ^ 0x6465636f6465ull);
    const int q1[] = {1000}, k1[] = {1300};
    fjt_varlen vl = lengths(1, q1, k1, NULL, 0, 0);
    fj_attention_desc d = varlen_desc(&vl, 2, 1, 64, FJ_BF16, 0, 0);
    d.causal = FJ_CAUSAL_BOTTOM_RIGHT;
    check_one(ctx, &d, &vl, &rng, true, "one long sequence");
    const int q[] = {1, 1, 1, 1, 1}, k[] = {4096, 1, 2000, 0, 3001};
    vl = lengths(5, q, k, NULL, 0, 0);
    d = varlen_desc(&vl, 16, 4, 128, FJ_F16, 0, 100);
    d.causal = FJ_CAUSAL_BOTTOM_RIGHT;
    check_one(ctx, &d, &vl, &rng, true, "decode rows");
    fj_context_destroy(ctx);
}

/* The plan says what it is; the key names varlen; the CPU backend's plan is
 * its tiled path whatever the lengths. */
static void test_plan_text(void **state)
{
    (void)state;
    fj_context *ctx = make_ctx();
    fj_attention_desc d;
    fj_attention_desc_init(&d, 4, 8, 2, 1, 4096, 128, FJ_BF16);
    d.features = FJ_FEATURE_VARLEN;
    char key[FJ_PROBLEM_KEY_MAX];
    assert_int_equal(fj_problem_key(&d, key, sizeof key), FJ_OK);
    assert_string_equal(key, "b4.hq8.hkv2.sq1.sk4096.d128.bf16.nomask.varlen");
    fj_plan *plan;
    assert_int_equal(fj_plan_create(ctx, &d, &plan), FJ_OK);
    fj_plan_info info;
    assert_int_equal(fj_plan_get_info(plan, &info), FJ_OK);
    assert_string_equal(info.kernel,
                        backend == FJ_BACKEND_CPU ? "cpu_tiled_varlen" : "cpu_reference_varlen");
    const char *text = fj_plan_describe(plan);
    if (!strstr(text, "varlen: 4 sequences packed along the token axis"))
        fail_msg("describe lacks the varlen line:\n%s", text);
    if (backend == FJ_BACKEND_CPU) {
        if (!strstr(text, "online softmax over blocks")) fail_msg("not the tiled path:\n%s", text);
        assert_true(info.tiles[0] != '\0');
        assert_int_equal(info.tiles_source, FJ_TILES_HEURISTIC);
    }
    fj_plan_destroy(plan);
    /* FJ_PLAN_MEASURE measures one sequence of the longest lengths; the
       varlen plan then takes the measured blocks */
    if (backend == FJ_BACKEND_CPU) {
        fj_attention_desc_init(&d, 3, 2, 1, 40, 70, 32, FJ_F32);
        d.features = FJ_FEATURE_VARLEN;
        fj_plan_options po;
        fj_plan_options_init(&po);
        po.flags = FJ_PLAN_MEASURE;
        po.time_limit = 20.0;
        if (fj_plan_create_ex(ctx, &d, &po, &plan)) fail_msg("measure: %s", fj_last_error());
        assert_int_equal(fj_plan_get_info(plan, &info), FJ_OK);
        assert_string_equal(info.kernel, "cpu_tiled_varlen");
        assert_int_equal(info.tiles_source, FJ_TILES_MEASURED);
        fj_plan_destroy(plan);
    }
    fj_context_destroy(ctx);
}

/* Two threads executing one plan at once (lse on, through the plan's lse
 * buffer) each get their own batch's results. */
typedef struct thread_run {
    fj_context *ctx;
    const fj_plan *plan;
    fjt_problem p;
    fjt_error e;
    fj_status s;
} thread_run;

static void *run_thread(void *arg)
{
    thread_run *t = arg;
    for (int i = 0; i < 4 && !t->s; i++) t->s = fjt_run_plan(t->ctx, t->plan, &t->p, true, &t->e);
    return NULL;
}

static void test_concurrent_executes(void **state)
{
    (void)state;
    fj_context *ctx = make_ctx();
    fjt_rng rng;
    fjt_rng_init(&rng, fjt_seed() ^ 0x746872656164ull);
    const int qa[] = {33, 0, 70}, ka[] = {90, 5, 70}, qb[] = {1, 100, 9}, kb[] = {1, 40, 120};
    fjt_varlen va = lengths(3, qa, ka, NULL, 0, 0), vb = lengths(3, qb, kb, NULL, 2, 0);
    fj_attention_desc d = varlen_desc(&va, 4, 2, 64, FJ_F32, 30, 50);
    d.causal = FJ_CAUSAL_BOTTOM_RIGHT;
    fj_plan *plan;
    assert_int_equal(fj_plan_create(ctx, &d, &plan), FJ_OK);
    thread_run t[2] = {{.ctx = ctx, .plan = plan}, {.ctx = ctx, .plan = plan}};
    assert_true(fjt_problem_make_varlen(&t[0].p, &d, &va, &rng, true));
    assert_true(fjt_problem_make_varlen(&t[1].p, &d, &vb, &rng, true));
    pthread_t tid;
    assert_int_equal(pthread_create(&tid, NULL, run_thread, &t[1]), 0);
    run_thread(&t[0]);
    pthread_join(tid, NULL);
    for (int i = 0; i < 2; i++) {
        if (t[i].s) fail_msg("thread %d: %s", i, fj_status_name(t[i].s));
        expect_ok(&t[i].p, &t[i].e, true, i ? "thread 1" : "thread 0");
        fjt_problem_free(&t[i].p);
    }
    fj_plan_destroy(plan);
    fj_context_destroy(ctx);
}

/* lse's layout [heads_q, total_q] is fj_merge's [1, heads_q, total_q]: two
 * varlen results over disjoint keys of each sequence (the first s_b keys
 * through seqused_k, the rest from a second packed K and V) merge in one
 * fj_merge call (batch 1, seqlen_q total_q) into the result over all keys,
 * held to the oracle of the whole batch. */
static void test_merge_packed(void **state)
{
    (void)state;
    fj_context *ctx = make_ctx();
    fjt_rng rng;
    fjt_rng_init(&rng, fjt_seed() ^ 0x6d65726765ull);
    const int q[] = {5, 0, 17, 1, 33}, k[] = {40, 9, 17, 6, 2}, split[] = {13, 0, 17, 2, 1};
    fjt_varlen all = lengths(5, q, k, NULL, 0, 0);
    fj_attention_desc d = varlen_desc(&all, 4, 2, 32, FJ_F32, 0, 0);
    fjt_problem p;
    assert_true(fjt_problem_make_varlen(&p, &d, &all, &rng, true));
    const int D = d.head_dim, hkv = d.heads_kv, row = hkv * D, tq = p.total_q;
    const size_t on = (size_t)tq * d.heads_q * D, ln = (size_t)d.heads_q * tq;
    /* part a: each sequence's first split[b] keys (seqused_k) */
    int32_t used[5], cu2[6] = {0};
    for (int b = 0; b < 5; b++) {
        used[b] = split[b];
        cu2[b + 1] = cu2[b] + k[b] - split[b];
    }
    /* part b: the rest of each sequence's keys, packed */
    float *k2 = malloc(sizeof(float) * ((size_t)cu2[5] * row + 1));
    float *v2 = malloc(sizeof(float) * ((size_t)cu2[5] * row + 1));
    float *o[3], *lse[3];
    for (int i = 0; i < 3; i++) {
        o[i] = malloc(sizeof(float) * on);
        lse[i] = malloc(sizeof(float) * ln);
        assert_non_null(o[i]);
        assert_non_null(lse[i]);
    }
    assert_non_null(k2);
    assert_non_null(v2);
    for (int b = 0; b < 5; b++) {
        const size_t from = (size_t)(p.cu_k[b] + split[b]) * row,
                     n = (size_t)(k[b] - split[b]) * row;
        memcpy(k2 + (size_t)cu2[b] * row, (const float *)p.k + from, n * sizeof(float));
        memcpy(v2 + (size_t)cu2[b] * row, (const float *)p.v + from, n * sizeof(float));
    }
    fj_plan *plan;
    assert_int_equal(fj_plan_create(ctx, &d, &plan), FJ_OK);
    fj_execute_extras x;
    fj_execute_extras_init(&x);
    x.cu_seqlens_q = p.cu_q;
    x.cu_seqlens_k = p.cu_k;
    x.seqused_k = used;
    x.total_q = tq;
    x.total_k = p.total_k;
    assert_int_equal(fj_plan_execute_ex(plan, p.q, p.k, p.v, o[0], lse[0], &x, NULL), FJ_OK);
    x.cu_seqlens_k = cu2;
    x.seqused_k = NULL;
    x.total_k = cu2[5];
    assert_int_equal(fj_plan_execute_ex(plan, p.q, k2, v2, o[1], lse[1], &x, NULL), FJ_OK);
    fj_merge_desc m;
    fj_merge_desc_init(&m, 1, d.heads_q, tq, D, FJ_F32);
    fjt_poison_f32(o[2], on);
    fjt_poison_f32(lse[2], ln);
    if (fj_merge(ctx, &m, o[0], lse[0], o[1], lse[1], o[2], lse[2], NULL))
        fail_msg("merge: %s", fj_last_error());
    fjt_error e = fjt_compare(&p, o[2], lse[2]);
    expect_ok(&p, &e, true, "two halves merged");
    for (int i = 0; i < 3; i++) {
        free(o[i]);
        free(lse[i]);
    }
    free(k2);
    free(v2);
    fj_plan_destroy(plan);
    fjt_problem_free(&p);
    fj_context_destroy(ctx);
}

/* ---- bad input ------------------------------------------------------------- */

/* Every rule of the execute's varlen arrays, broken once each: through
 * fj_plan_execute_ex and fj_attention_ex, FJ_ERR_INVALID_ARGUMENT naming
 * the argument and the rule, with o and lse untouched. */
static void test_bad_sequences(void **state)
{
    (void)state;
    fj_context *ctx = make_ctx();
    enum { B = 3, HQ = 2, D = 16, MQ = 10, MK = 12, TQ = 24, TK = 30 };
    fj_attention_desc d;
    fj_attention_desc_init(&d, B, HQ, 1, MQ, MK, D, FJ_F32);
    d.features = FJ_FEATURE_VARLEN;
    d.causal = FJ_CAUSAL_BOTTOM_RIGHT;
    static float q[TQ * HQ * D], k[TK * D], o[TQ * HQ * D], lse[HQ * TQ];
    for (int i = 0; i < TQ * HQ * D; i++) q[i] = (float)(i % 7) * 0.125f;
    for (int i = 0; i < TK * D; i++) k[i] = (float)(i % 5) * 0.25f;
    fj_plan *plan;
    assert_int_equal(fj_plan_create(ctx, &d, &plan), FJ_OK);
    static const struct {
        const char *message;
        int32_t cq[B + 1], ck[B + 1], used[B];
        bool has_used, null_q, null_k;
        int32_t tq, tk;
    } bad[] = {
        {"cu_seqlens_q[0] (1) must be 0", {1, 4, 8, 9}, {0, 5, 9, 12}, {0}, 0, 0, 0, TQ, TK},
        {"cu_seqlens_k[0] (2) must be 0", {0, 4, 8, 9}, {2, 5, 9, 12}, {0}, 0, 0, 0, TQ, TK},
        {"cu_seqlens_q[2] (3) is below cu_seqlens_q[1] (4): the offsets must not decrease",
         {0, 4, 3, 9},
         {0, 5, 9, 12},
         {0},
         0,
         0,
         0,
         TQ,
         TK},
        {"cu_seqlens_k[3] (8) is below cu_seqlens_k[2] (9)",
         {0, 4, 8, 9},
         {0, 5, 9, 8},
         {0},
         0,
         0,
         0,
         TQ,
         TK},
        {"sequence 1 has 11 queries (cu_seqlens_q[2] - cu_seqlens_q[1]), more than the plan's "
         "seqlen_q (10)",
         {0, 4, 15, 16},
         {0, 5, 9, 12},
         {0},
         0,
         0,
         0,
         TQ,
         TK},
        {"sequence 2 has 13 keys (cu_seqlens_k[3] - cu_seqlens_k[2]), more than the plan's "
         "seqlen_k (12)",
         {0, 4, 8, 9},
         {0, 5, 9, 22},
         {0},
         0,
         0,
         0,
         TQ,
         TK},
        {"cu_seqlens_q[batch = 3] (25) is past total_q (24), the tokens q, o and lse hold",
         {0, 10, 20, 25},
         {0, 5, 9, 12},
         {0},
         0,
         0,
         0,
         TQ,
         TK},
        {"cu_seqlens_k[batch = 3] (30) is past total_k (29)",
         {0, 4, 8, 9},
         {0, 10, 20, 30},
         {0},
         0,
         0,
         0,
         TQ,
         TK - 1},
        {"seqused_k[1] (5) must be in [0, 4], the keys of sequence 1",
         {0, 4, 8, 9},
         {0, 5, 9, 12},
         {1, 5, 0},
         1,
         0,
         0,
         TQ,
         TK},
        {"seqused_k[2] (-1) must be in [0, 3]",
         {0, 4, 8, 9},
         {0, 5, 9, 12},
         {1, 1, -1},
         1,
         0,
         0,
         TQ,
         TK},
        {"seqused_k[0] (13) is more than the plan's seqlen_k (12)",
         {0, 4, 8, 9},
         {0, 20, 21, 22},
         {13, 1, 1},
         1,
         0,
         0,
         TQ,
         TK},
        {"cu_seqlens_q is NULL: the desc's features have FJ_FEATURE_VARLEN, so the execute needs "
         "int32 [batch + 1 = 4] in fj_execute_extras.cu_seqlens_q",
         {0, 4, 8, 9},
         {0, 5, 9, 12},
         {0},
         0,
         1,
         0,
         TQ,
         TK},
        {"cu_seqlens_k is NULL", {0, 4, 8, 9}, {0, 5, 9, 12}, {0}, 0, 0, 1, TQ, TK},
        {"total_q (-1) must be >= 0", {0, 0, 0, 0}, {0, 5, 9, 12}, {0}, 0, 0, 0, -1, TK},
        {"total_k (-5) must be >= 0", {0, 4, 8, 9}, {0, 0, 0, 0}, {0}, 0, 0, 0, TQ, -5},
        {"cu_seqlens_q[batch = 3] (9) is past total_q (0)",
         {0, 4, 8, 9},
         {0, 5, 9, 12},
         {0},
         0,
         0,
         0,
         0,
         TK},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        fj_execute_extras x;
        fj_execute_extras_init(&x);
        x.cu_seqlens_q = bad[i].null_q ? NULL : bad[i].cq;
        x.cu_seqlens_k = bad[i].null_k ? NULL : bad[i].ck;
        x.seqused_k = bad[i].has_used ? bad[i].used : NULL;
        x.total_q = bad[i].tq;
        x.total_k = bad[i].tk;
        for (int api = 0; api < 2; api++) {
            memset(o, 0xab, sizeof o);
            memset(lse, 0xab, sizeof lse);
            fj_status s = api ? fj_attention_ex(ctx, &d, q, k, k, o, lse, &x, NULL)
                              : fj_plan_execute_ex(plan, q, k, k, o, lse, &x, NULL);
            if (s != FJ_ERR_INVALID_ARGUMENT)
                fail_msg("case %zu (%s): %s", i, bad[i].message, fj_status_name(s));
            if (!strstr(fj_last_error(), bad[i].message))
                fail_msg("case %zu: '%s' lacks '%s'", i, fj_last_error(), bad[i].message);
            for (size_t j = 0; j < sizeof o; j++)
                if (((unsigned char *)o)[j] != 0xab) fail_msg("case %zu: o written", i);
            for (size_t j = 0; j < sizeof lse; j++)
                if (((unsigned char *)lse)[j] != 0xab) fail_msg("case %zu: lse written", i);
        }
    }
    /* misaligned arrays; the plain entry points have none to give */
    static int32_t cu[2 * (B + 1) + 1];
    fj_execute_extras x;
    fj_execute_extras_init(&x);
    x.cu_seqlens_q = (const int32_t *)((const char *)cu + 2);
    x.cu_seqlens_k = cu;
    x.total_q = TQ;
    x.total_k = TK;
    assert_int_equal(fj_plan_execute_ex(plan, q, k, k, o, lse, &x, NULL), FJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(fj_last_error(), "cu_seqlens_q"));
    assert_non_null(strstr(fj_last_error(), "is not aligned to 4 bytes"));
    x.cu_seqlens_q = cu;
    x.seqused_k = (const int32_t *)((const char *)cu + 1);
    assert_int_equal(fj_plan_execute_ex(plan, q, k, k, o, lse, &x, NULL), FJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(fj_last_error(), "seqused_k"));
    assert_int_equal(fj_plan_execute(plan, q, k, k, o, lse, NULL), FJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(fj_last_error(), "cu_seqlens_q is NULL"));
    assert_int_equal(fj_attention(ctx, &d, q, k, k, o, lse, NULL), FJ_ERR_INVALID_ARGUMENT);
    /* a valid batch on the same buffers runs */
    static const int32_t cq[B + 1] = {0, 4, 8, 9}, ck[B + 1] = {0, 5, 9, 12};
    fj_execute_extras_init(&x);
    x.cu_seqlens_q = cq;
    x.cu_seqlens_k = ck;
    x.total_q = TQ;
    x.total_k = TK;
    assert_int_equal(fj_plan_execute_ex(plan, q, k, k, o, lse, &x, NULL), FJ_OK);
    fj_plan_destroy(plan);

    /* varlen inputs for a plan without the feature would be ignored: refused */
    fj_attention_desc_init(&d, 1, HQ, 1, MQ, MK, D, FJ_F32);
    assert_int_equal(fj_plan_create(ctx, &d, &plan), FJ_OK);
    static const struct {
        const char *message;
        int which;
    } stray[] = {
        {"cu_seqlens_q is given but the desc's features lack FJ_FEATURE_VARLEN", 0},
        {"cu_seqlens_k is given but the desc's features lack FJ_FEATURE_VARLEN", 1},
        {"seqused_k is given but the desc's features lack FJ_FEATURE_VARLEN", 2},
        {"total_q (24) is given but the desc's features lack FJ_FEATURE_VARLEN", 3},
        {"total_k (30) is given but the desc's features lack FJ_FEATURE_VARLEN", 4},
    };
    for (size_t i = 0; i < sizeof stray / sizeof stray[0]; i++) {
        fj_execute_extras_init(&x);
        if (stray[i].which == 0) x.cu_seqlens_q = cq;
        if (stray[i].which == 1) x.cu_seqlens_k = ck;
        if (stray[i].which == 2) x.seqused_k = cq;
        if (stray[i].which == 3) x.total_q = TQ;
        if (stray[i].which == 4) x.total_k = TK;
        memset(o, 0xab, sizeof o);
        assert_int_equal(fj_plan_execute_ex(plan, q, k, k, o, lse, &x, NULL),
                         FJ_ERR_INVALID_ARGUMENT);
        if (!strstr(fj_last_error(), stray[i].message))
            fail_msg("'%s' lacks '%s'", fj_last_error(), stray[i].message);
        for (size_t j = 0; j < sizeof o; j++)
            if (((unsigned char *)o)[j] != 0xab) fail_msg("stray %zu: o written", i);
    }
    fj_plan_destroy(plan);
    fj_context_destroy(ctx);
}

/* The desc's rules for a varlen problem: no batch axis (batch strides 0),
 * token rows of the output that do not overlap even when the longest
 * sequence has one row; a varlen desc's key reads back. */
static void test_bad_desc(void **state)
{
    (void)state;
    fj_attention_desc d;
    fj_attention_desc_init(&d, 2, 4, 2, 8, 8, 16, FJ_F16);
    d.features = FJ_FEATURE_VARLEN;
    assert_int_equal(fj_attention_desc_validate(&d), FJ_OK);
    d.k_stride[0] = 512;
    d.k_stride[1] = 32;
    d.k_stride[2] = 16;
    assert_int_equal(fj_attention_desc_validate(&d), FJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(fj_last_error(), "k_stride[0] (batch axis) is 512 but must be 0 with "
                                            "FJ_FEATURE_VARLEN"));
    d.k_stride[0] = 0;
    assert_int_equal(fj_attention_desc_validate(&d), FJ_OK);
    /* one row per sequence at most, token rows overlapping: refused */
    d.seqlen_q = 1;
    d.o_stride[1] = 8;
    d.o_stride[2] = 16;
    assert_int_equal(fj_attention_desc_validate(&d), FJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(fj_last_error(), "o_stride[1] (seq axis) is 8 but must be >= 16"));
    fj_context *ctx = make_ctx();
    fj_plan *plan = (fj_plan *)&d;
    assert_int_equal(fj_plan_create(ctx, &d, &plan), FJ_ERR_INVALID_ARGUMENT);
    assert_null(plan);
    /* heads outermost ([heads, tokens, head_dim]): the plan holds for two
       tokens; an execute of more runs into the next head's rows, refused */
    fj_attention_desc_init(&d, 2, 4, 4, 1, 4, 16, FJ_F32);
    d.features = FJ_FEATURE_VARLEN;
    d.o_stride[1] = 16;
    d.o_stride[2] = 32;
    assert_int_equal(fj_plan_create(ctx, &d, &plan), FJ_OK);
    static float q[8 * 4 * 16], o[8 * 4 * 16], lse[4 * 8];
    static const int32_t cq[3] = {0, 1, 2}, ck[3] = {0, 2, 4}, cq3[3] = {0, 1, 3};
    fj_execute_extras x;
    fj_execute_extras_init(&x);
    x.cu_seqlens_q = cq;
    x.cu_seqlens_k = ck;
    x.total_q = 2;
    x.total_k = 4;
    assert_int_equal(fj_plan_execute_ex(plan, q, q, q, o, lse, &x, NULL), FJ_OK);
    x.total_q = 3;
    x.cu_seqlens_q = cq3;
    memset(o, 0xab, sizeof o);
    assert_int_equal(fj_plan_execute_ex(plan, q, q, q, o, lse, &x, NULL), FJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(fj_last_error(), "total_q (3): o_stride[2] (head axis) is 32 but must "
                                            "be >= 48"));
    for (size_t j = 0; j < sizeof o; j++)
        if (((unsigned char *)o)[j] != 0xab) fail_msg("o written");
    fj_plan_destroy(plan);
    fj_context_destroy(ctx);
    /* the key round trip, and the order of the feature fields */
    fj_attention_desc_init(&d, 8, 32, 8, 4096, 4096, 128, FJ_BF16);
    d.causal = FJ_CAUSAL_BOTTOM_RIGHT;
    d.softcap = 30.0f;
    d.features = FJ_FEATURE_VARLEN | FJ_FEATURE_SINKS;
    char key[FJ_PROBLEM_KEY_MAX];
    assert_int_equal(fj_problem_key(&d, key, sizeof key), FJ_OK);
    assert_string_equal(key, "b8.hq32.hkv8.sq4096.sk4096.d128.bf16.causal_br.sc30.sinks.varlen");
    fj_attention_desc back;
    assert_int_equal(fj_problem_key_parse(key, &back), FJ_OK);
    assert_int_equal(back.features, FJ_FEATURE_VARLEN | FJ_FEATURE_SINKS);
    assert_int_equal(fj_problem_key_parse("b8.hq32.hkv8.sq4.sk4.d128.bf16.nomask.varlen.sinks",
                                          &back),
                     FJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(fj_last_error(), "nothing may follow varlen"));
}

int main(int argc, char **argv)
{
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--backend")) {
            if (!strcmp(argv[i + 1], "cpu-reference")) backend = FJ_BACKEND_CPU_REFERENCE;
            else if (!strcmp(argv[i + 1], "cpu")) backend = FJ_BACKEND_CPU;
            else {
                fprintf(stderr, "test_varlen: --backend cpu-reference|cpu\n");
                return 2;
            }
        }
    fjt_seed();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chosen_batches),      cmocka_unit_test(test_random_batches),
        cmocka_unit_test(test_long_and_decode),     cmocka_unit_test(test_plan_text),
        cmocka_unit_test(test_concurrent_executes), cmocka_unit_test(test_merge_packed),
        cmocka_unit_test(test_bad_sequences),       cmocka_unit_test(test_bad_desc),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
