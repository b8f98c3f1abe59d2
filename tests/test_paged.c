/* The paged KV cache (FJ_FEATURE_PAGED_KV) on one CPU backend (--backend
 * cpu-reference | cpu): k and v are pools of pages, each sequence's keys
 * the first seqused_k[b] of the pages its block-table row names; q and o
 * dense [batch, seqlen_q, ...] (decode, speculative decode) or, with
 * FJ_FEATURE_VARLEN, packed (chunked prefill). Checked against the double
 * oracle run on each sequence as the dense problem of its own lengths on
 * the keys before they were paged (tests/common/harness.c), outputs and lse
 * poisoned before each run. The pools' unused pages and rows are NaN and
 * the block tables' unused tail entries point outside the pool, so a read
 * of either shows. Pages out of order and in order (one run: no copy), page
 * sizes 1, primes, 16, 64, lengths that are not a multiple of the page
 * size, empty sequences, every mask, GQA and MQA, every dtype, odd head
 * dims, three pool layouts, padded block-table rows; random problems from
 * the logged seed (FLASHJIT_TEST_SEED replays them). Bad input: every rule
 * of the block table, the KV lengths and the desc's page fields, each
 * refused as FJ_ERR_INVALID_ARGUMENT naming the argument, nothing written. */
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

/* The bounds every CPU backend meets (tests/conformance, fjt_case_bounds). */
static void expect_ok(const fjt_problem *p, const fjt_error *e, bool with_lse, const char *what,
                      const fjt_varlen *vl)
{
    const double tol = fjt_tolerance(p->d.dtype);
    if (e->nan_count || !fjt_within(e, tol) || e->gaps_written || e->empty_not_zero ||
        (with_lse && (e->lse_mismatch || !(e->lse_max_abs <= 1e-4)))) {
        char lens[512], pages[160];
        fjt_varlen_str(vl, lens, sizeof lens);
        fjt_paged_str(&p->pg, &p->d, pages, sizeof pages);
        fail_msg("%s: %s lengths=%s %s lse=%d: rel %.3e (tol %.1e) max_abs %.3e nan %zu gaps %zu "
                 "empty_not_zero %zu lse_mismatch %zu lse_max_abs %.3e",
                 what, fjt_desc_str(&p->d), lens, pages, (int)with_lse, e->rel_fro, tol, e->max_abs,
                 e->nan_count, e->gaps_written, e->empty_not_zero, e->lse_mismatch, e->lse_max_abs);
    }
}

/* Sequences: len_q[b] queries (dense q: all d's seqlen_q) and kv[b] keys. */
static fjt_varlen lengths(int n, const int *q, const int *kv)
{
    fjt_varlen v;
    memset(&v, 0, sizeof v);
    v.nseq = n;
    for (int b = 0; b < n; b++) {
        v.len_q[b] = q[b];
        v.len_k[b] = kv[b];
    }
    return v;
}

/* A paged desc for vl (dense q when every sequence has the same queries and
 * dense_q), maxima the longest plus slack. */
static fj_attention_desc paged_desc(const fjt_varlen *vl, bool dense_q, int hq, int hkv, int dim,
                                    fj_dtype t, int slack_k)
{
    int mq = 1, mk = 1;
    for (int b = 0; b < vl->nseq; b++) {
        if (vl->len_q[b] > mq) mq = vl->len_q[b];
        if (fjt_varlen_keys(vl, b) > mk) mk = fjt_varlen_keys(vl, b);
    }
    fj_attention_desc d;
    fj_attention_desc_init(&d, vl->nseq, hq, hkv, mq, mk + slack_k, dim, t);
    d.features = FJ_FEATURE_PAGED_KV | (dense_q ? 0 : FJ_FEATURE_VARLEN);
    return d;
}

/* Makes the problem, a plan for its desc, runs and checks it. */
static void check_one(fj_context *ctx, const fj_attention_desc *d, const fjt_varlen *vl,
                      const fjt_paged *pg, fjt_rng *rng, bool with_lse, const char *what)
{
    fjt_problem p;
    if (!fjt_problem_make_paged(&p, d, vl, pg, rng, true))
        fail_msg("%s: making the problem (%s)", what, fjt_desc_str(d));
    fj_plan *plan;
    if (fj_plan_create(ctx, &p.d, &plan)) fail_msg("%s: plan: %s", what, fj_last_error());
    fjt_error e;
    if (fjt_run_plan(ctx, plan, &p, with_lse, &e))
        fail_msg("%s: execute: %s (%s)", what, fj_last_error(), fjt_desc_str(&p.d));
    expect_ok(&p, &e, with_lse, what, vl);
    fj_plan_destroy(plan);
    fjt_problem_free(&p);
}

/* The page configurations every chosen case runs under: a page size of
 * 16 (CUDA's granule) shuffled with spare pages and unused columns; of 1
 * in order in a padded pool; a prime in a head-major pool with a padded
 * table row; 64 in order in a dense pool (each sequence one run: no copy);
 * a prime in order with spare pages first (runs, not at 0). */
static const fjt_paged configs[] = {
    {.page_size = 16, .spare_pages = 3, .spare_cols = 2},
    {.page_size = 1, .in_order = true, .layout = FJT_POOL_PADDED},
    {.page_size = 7, .stride_pad = 3, .layout = FJT_POOL_HEAD_MAJOR},
    {.page_size = 64, .in_order = true},
    {.page_size = 5, .spare_pages = 2, .spare_cols = 1, .in_order = true},
};

/* Decode (one query row), speculative decode (up to 16 rows, some
 * sequences holding fewer keys than rows: under bottom-right causal their
 * first rows see none), chunked prefill (varlen queries attending to the
 * cache and themselves), empty sequences (no keys; no queries), every
 * causal kind, windows, GQA and MQA, odd head dims, every dtype, ALiBi,
 * sinks and a softcap. */
static void test_chosen(void **state)
{
    (void)state;
    fj_context *ctx = make_ctx();
    fjt_rng rng;
    fjt_rng_init(&rng, fjt_seed() ^ 0x7061676564ull);
    static const struct {
        const char *name;
        bool dense_q;
        int n, q[6], kv[6];
        fj_causal causal;
        int wl, wr, hq, hkv, dim;
        fj_dtype t;
        uint32_t features;
        float softcap;
    } c[] = {
        {"decode-gqa",
         true,
         6,
         {1, 1, 1, 1, 1, 1},
         {300, 1, 0, 77, 16, 33},
         FJ_CAUSAL_BOTTOM_RIGHT,
         -1,
         -1,
         8,
         2,
         64,
         FJ_BF16,
         0,
         0},
        {"speculative-4",
         true,
         5,
         {4, 4, 4, 4, 4},
         {5, 2, 40, 0, 17},
         FJ_CAUSAL_BOTTOM_RIGHT,
         -1,
         -1,
         4,
         1,
         40,
         FJ_F16,
         0,
         0},
        {"speculative-16-tl",
         true,
         3,
         {16, 16, 16},
         {16, 100, 3},
         FJ_CAUSAL_TOP_LEFT,
         -1,
         -1,
         3,
         3,
         64,
         FJ_F32,
         0,
         0},
        {"decode-window",
         true,
         4,
         {3, 3, 3, 3},
         {29, 3, 64, 65},
         FJ_CAUSAL_BOTTOM_RIGHT,
         5,
         -1,
         2,
         2,
         32,
         FJ_F32,
         0,
         0},
        {"no-mask-mqa-odd-dim",
         true,
         3,
         {2, 2, 2},
         {13, 1, 31},
         FJ_CAUSAL_NONE,
         -1,
         -1,
         4,
         1,
         13,
         FJ_F32,
         0,
         0},
        {"band-sinks-alibi",
         true,
         3,
         {5, 5, 5},
         {0, 9, 40},
         FJ_CAUSAL_NONE,
         3,
         2,
         4,
         2,
         16,
         FJ_F32,
         FJ_FEATURE_SINKS | FJ_FEATURE_ALIBI,
         0},
        {"chunked-prefill",
         false,
         4,
         {17, 0, 64, 1},
         {117, 30, 64, 200},
         FJ_CAUSAL_BOTTOM_RIGHT,
         -1,
         -1,
         4,
         1,
         128,
         FJ_BF16,
         0,
         0},
        {"prefill-primes-tl",
         false,
         4,
         {13, 2, 61, 7},
         {31, 2, 7, 13},
         FJ_CAUSAL_TOP_LEFT,
         -1,
         -1,
         6,
         3,
         80,
         FJ_F16,
         0,
         0},
        {"prefill-window-softcap",
         false,
         3,
         {40, 9, 5},
         {90, 9, 200},
         FJ_CAUSAL_BOTTOM_RIGHT,
         20,
         -1,
         8,
         2,
         96,
         FJ_BF16,
         FJ_FEATURE_SINKS,
         30.0f},
        {"empty-sequences",
         false,
         5,
         {0, 3, 0, 1, 2},
         {0, 0, 9, 1, 33},
         FJ_CAUSAL_NONE,
         -1,
         -1,
         2,
         1,
         16,
         FJ_F32,
         0,
         0},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++)
        for (size_t g = 0; g < sizeof configs / sizeof configs[0]; g++) {
            fjt_varlen vl = lengths(c[i].n, c[i].q, c[i].kv);
            fj_attention_desc d =
                paged_desc(&vl, c[i].dense_q, c[i].hq, c[i].hkv, c[i].dim, c[i].t, (int)g);
            d.causal = c[i].causal;
            d.window_left = c[i].wl;
            d.window_right = c[i].wr;
            d.features |= c[i].features;
            d.softcap = c[i].softcap;
            fjt_paged pg = configs[g];
            pg.dense_q = c[i].dense_q;
            char what[96];
            snprintf(what, sizeof what, "%s, config %zu", c[i].name, g);
            check_one(ctx, &d, &vl, &pg, &rng, g != 1, what);
        }
    fj_context_destroy(ctx);
}

/* Lengths that matter: empty, 1, primes, around page and block sizes. */
static int draw_length(fjt_rng *r, int most)
{
    static const int menu[] = {0, 1, 2, 3, 5, 7, 13, 15, 16, 17, 31, 61, 63, 64, 65, 127, 129};
    int v = fjt_range(r, 0, 4) == 0 ? fjt_range(r, 0, most)
                                    : menu[fjt_range(r, 0, (int)(sizeof menu / sizeof *menu) - 1)];
    return v > most ? most : v;
}

/* Random problems, one plan per desc running three batches that fit it
 * (other lengths, other block tables, the same pool and table shape):
 * every mask, MHA/GQA/MQA, every dtype, page sizes 1..70, every pool
 * layout, in order or shuffled, dense or varlen queries, lse on and off,
 * ALiBi and sinks sometimes. */
static void test_random(void **state)
{
    (void)state;
    fj_context *ctx = make_ctx();
    fjt_rng rng;
    fjt_rng_init(&rng, fjt_seed() ^ 0x72616e642d7067ull);
    static const int dims[] = {8, 13, 40, 64, 128};
    static const int heads[][2] = {{1, 1}, {4, 4}, {8, 1}, {8, 2}, {6, 3}};
    const fj_dtype dtypes[] = {FJ_F32, FJ_F16, FJ_BF16};
    for (int round = 0; round < 16; round++) {
        const int nseq = fjt_range(&rng, 1, 8), max_k = fjt_range(&rng, 1, 300);
        const bool dense_q = fjt_range(&rng, 0, 1);
        const int max_q = dense_q ? fjt_range(&rng, 1, 16) : fjt_range(&rng, 1, 120);
        const int g = fjt_range(&rng, 0, 4);
        const int dim = dims[fjt_range(&rng, 0, 4)];
        const fj_dtype t = dtypes[fjt_range(&rng, 0, 2)];
        fjt_paged pg = {.page_size = fjt_range(&rng, 0, 2) ? fjt_range(&rng, 1, 70) : 16,
                        .in_order = fjt_range(&rng, 0, 2) == 0,
                        .layout = (fjt_pool_layout)fjt_range(&rng, 0, 2),
                        .stride_pad = fjt_range(&rng, 0, 1) * fjt_range(&rng, 1, 3),
                        .dense_q = dense_q};
        fjt_varlen mix[3];
        int most_pages = 1, most_cols = 1;
        for (int m = 0; m < 3; m++) {
            memset(&mix[m], 0, sizeof mix[m]);
            mix[m].nseq = nseq;
            int pages = 0;
            for (int b = 0; b < nseq; b++) {
                mix[m].len_q[b] = dense_q ? max_q : draw_length(&rng, max_q);
                mix[m].len_k[b] = draw_length(&rng, max_k);
                const int need = (mix[m].len_k[b] + pg.page_size - 1) / pg.page_size;
                pages += need;
                if (need > most_cols) most_cols = need;
            }
            if (pages > most_pages) most_pages = pages;
        }
        most_pages += fjt_range(&rng, 0, 3);
        most_cols += fjt_range(&rng, 0, 2);
        fj_attention_desc d;
        fj_attention_desc_init(&d, nseq, heads[g][0], heads[g][1], max_q, max_k, dim, t);
        d.features = FJ_FEATURE_PAGED_KV | (dense_q ? 0 : FJ_FEATURE_VARLEN);
        d.causal = (fj_causal)fjt_range(&rng, 0, 2);
        if (fjt_range(&rng, 0, 2) == 0) d.window_left = fjt_range(&rng, 0, 40);
        if (fjt_range(&rng, 0, 3) == 0) d.window_right = fjt_range(&rng, 0, 40);
        if (fjt_range(&rng, 0, 3) == 0) d.features |= FJ_FEATURE_ALIBI;
        if (fjt_range(&rng, 0, 3) == 0) d.features |= FJ_FEATURE_SINKS;
        fj_plan *plan = NULL;
        for (int m = 0; m < 3; m++) {
            /* every mix gets the same pool and table shape */
            int pages = 0, cols = 0;
            for (int b = 0; b < nseq; b++) {
                const int need = (mix[m].len_k[b] + pg.page_size - 1) / pg.page_size;
                pages += need;
                if (need > cols) cols = need;
            }
            pg.spare_pages = most_pages - pages;
            pg.spare_cols = most_cols - (cols ? cols : 1);
            fjt_problem p;
            if (!fjt_problem_make_paged(&p, &d, &mix[m], &pg, &rng, true))
                fail_msg("round %d mix %d: making the problem", round, m);
            if (!plan && fj_plan_create(ctx, &p.d, &plan))
                fail_msg("plan: %s: %s", fjt_desc_str(&p.d), fj_last_error());
            assert_int_equal(p.d.num_pages, most_pages);
            assert_int_equal(p.d.max_pages, most_cols);
            const bool with_lse = fjt_range(&rng, 0, 3) != 0;
            fjt_error e;
            if (fjt_run_plan(ctx, plan, &p, with_lse, &e))
                fail_msg("round %d mix %d: %s: %s", round, m, fjt_desc_str(&p.d), fj_last_error());
            char what[64];
            snprintf(what, sizeof what, "round %d mix %d", round, m);
            expect_ok(&p, &e, with_lse, what, &mix[m]);
            fjt_problem_free(&p);
        }
        fj_plan_destroy(plan);
    }
    fj_context_destroy(ctx);
}

/* Long caches: decode rows over thousands of keys (copies that the pool's
 * workers share), shuffled and in order (no copy), and a long prefill
 * chunk against its cache. */
static void test_long(void **state)
{
    (void)state;
    fj_context *ctx = make_ctx();
    fjt_rng rng;
    fjt_rng_init(&rng, fjt_seed() ^ 0x6c6f6e67ull);
    const int q[] = {1, 1, 1, 1, 1}, kv[] = {4099, 1, 2000, 0, 3001};
    fjt_varlen vl = lengths(5, q, kv);
    for (int order = 0; order < 2; order++) {
        fj_attention_desc d = paged_desc(&vl, true, 16, 4, 128, FJ_F16, 100);
        d.causal = FJ_CAUSAL_BOTTOM_RIGHT;
        fjt_paged pg = {.page_size = 16, .in_order = order, .dense_q = true, .spare_pages = 5};
        check_one(ctx, &d, &vl, &pg, &rng, true, order ? "decode, in order" : "decode, shuffled");
    }
    const int q2[] = {300, 77}, kv2[] = {1500, 77};
    vl = lengths(2, q2, kv2);
    fj_attention_desc d = paged_desc(&vl, false, 4, 2, 64, FJ_BF16, 0);
    d.causal = FJ_CAUSAL_BOTTOM_RIGHT;
    fjt_paged pg = {.page_size = 32, .layout = FJT_POOL_PADDED};
    check_one(ctx, &d, &vl, &pg, &rng, true, "prefill chunk against its cache");
    fj_context_destroy(ctx);
}

/* The key names the page size; the plan's text and info say paged; the
 * parsed key is a valid paged desc. */
static void test_plan_text(void **state)
{
    (void)state;
    fj_context *ctx = make_ctx();
    fj_attention_desc d;
    fj_attention_desc_init(&d, 16, 32, 8, 1, 8192, 128, FJ_BF16);
    d.causal = FJ_CAUSAL_BOTTOM_RIGHT;
    d.features = FJ_FEATURE_PAGED_KV;
    d.page_size = 16;
    d.num_pages = 9000;
    d.max_pages = 512;
    char key[FJ_PROBLEM_KEY_MAX];
    assert_int_equal(fj_problem_key(&d, key, sizeof key), FJ_OK);
    assert_string_equal(key, "b16.hq32.hkv8.sq1.sk8192.d128.bf16.causal_br.paged16");
    fj_attention_desc back;
    assert_int_equal(fj_problem_key_parse(key, &back), FJ_OK);
    assert_int_equal(back.features, FJ_FEATURE_PAGED_KV);
    assert_int_equal(back.page_size, 16);
    assert_int_equal(back.max_pages, 512);
    assert_int_equal(back.num_pages, 16 * 512);
    fj_plan *plan;
    assert_int_equal(fj_plan_create(ctx, &d, &plan), FJ_OK);
    const char *text = fj_plan_describe(plan);
    /* decode-shaped: on the cpu backend its decode path over every
       sequence, K and V read through the block table; on the reference a
       plan of one sequence, each sequence's keys copied out */
    const bool decode = backend == FJ_BACKEND_CPU;
    if (!strstr(text, "paged: K and V in pools of 9000 pages of 16 keys") ||
        !strstr(text, decode ? "the decode path reads them through the block table (no copy)"
                             : "b1.hq32.hkv8.sq1.sk8192.d128.bf16.causal_br"))
        fail_msg("describe: %s", text);
    fj_plan_info info;
    assert_int_equal(fj_plan_get_info(plan, &info), FJ_OK);
    if (decode ? strncmp(info.kernel, "cpu_decode_", 11) || !strstr(info.kernel, "_paged")
               : strcmp(info.kernel, "cpu_reference_paged"))
        fail_msg("kernel %s", info.kernel);
    fj_plan_destroy(plan);
    d.features |= FJ_FEATURE_VARLEN | FJ_FEATURE_SINKS;
    d.seqlen_q = 512;
    assert_int_equal(fj_problem_key(&d, key, sizeof key), FJ_OK);
    assert_string_equal(key, "b16.hq32.hkv8.sq512.sk8192.d128.bf16.causal_br.sinks.varlen.paged16");
    assert_int_equal(fj_plan_create(ctx, &d, &plan), FJ_OK);
    assert_int_equal(fj_plan_get_info(plan, &info), FJ_OK);
    assert_non_null(strstr(info.kernel, "_varlen_paged"));
    fj_plan_destroy(plan);
    static const struct {
        const char *key, *message;
    } bad[] = {
        {"b1.hq8.hkv8.sq1.sk4.d64.bf16.nomask.paged0", "paged<page_size> with page_size >= 1"},
        {"b1.hq8.hkv8.sq1.sk4.d64.bf16.nomask.paged16.varlen", "nothing may follow paged"},
        {"b1.hq8.hkv8.sq1.sk4.d64.bf16.nomask.paged16.paged16", "nothing may follow paged"},
        {"b1.hq8.hkv8.sq1.sk4.d64.bf16.nomask.paged016", "(field 9 is 'paged016')"},
        {"b100000.hq8.hkv8.sq1.sk2147483647.d64.bf16.nomask.paged1", "more than num_pages"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(fj_problem_key_parse(bad[i].key, &back), FJ_ERR_INVALID_ARGUMENT);
        if (!strstr(fj_last_error(), bad[i].message))
            fail_msg("'%s': '%s' lacks '%s'", bad[i].key, fj_last_error(), bad[i].message);
    }
    fj_context_destroy(ctx);
}

/* Two threads executing one plan at once each get their own results (the
 * plan's key buffers are taken in turn). */
typedef struct thread_run {
    fj_context *ctx;
    const fj_plan *plan;
    fjt_problem p;
    fjt_varlen vl;
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
    const int q[] = {2, 2, 2}, ka[] = {90, 5, 70}, kb[] = {1, 40, 120};
    thread_run t[2] = {{.ctx = ctx, .vl = lengths(3, q, ka)},
                       {.ctx = ctx, .vl = lengths(3, q, kb)}};
    fj_attention_desc d = paged_desc(&t[0].vl, true, 4, 2, 64, FJ_F32, 50);
    d.causal = FJ_CAUSAL_BOTTOM_RIGHT;
    /* the same pool and table shape: 13 pages of 16 keys, 8 columns */
    fjt_paged pa = {.page_size = 16, .spare_pages = 13 - 6 - 1 - 5, .spare_cols = 8 - 6},
              pb = {.page_size = 16, .spare_pages = 13 - 1 - 3 - 8, .spare_cols = 0};
    pa.dense_q = pb.dense_q = true;
    assert_true(fjt_problem_make_paged(&t[0].p, &d, &t[0].vl, &pa, &rng, true));
    assert_true(fjt_problem_make_paged(&t[1].p, &d, &t[1].vl, &pb, &rng, true));
    assert_int_equal(t[0].p.d.num_pages, t[1].p.d.num_pages);
    assert_int_equal(t[0].p.d.max_pages, t[1].p.d.max_pages);
    fj_plan *plan;
    assert_int_equal(fj_plan_create(ctx, &t[0].p.d, &plan), FJ_OK);
    t[0].plan = t[1].plan = plan;
    pthread_t tid;
    assert_int_equal(pthread_create(&tid, NULL, run_thread, &t[1]), 0);
    run_thread(&t[0]);
    pthread_join(tid, NULL);
    for (int i = 0; i < 2; i++) {
        if (t[i].s) fail_msg("thread %d: %s", i, fj_status_name(t[i].s));
        expect_ok(&t[i].p, &t[i].e, true, i ? "thread 1" : "thread 0", &t[i].vl);
        fjt_problem_free(&t[i].p);
    }
    fj_plan_destroy(plan);
    fj_context_destroy(ctx);
}

/* FJ_PLAN_MEASURE on a paged problem measures one dense sequence of the
 * longest lengths; the plan it makes runs the cache. */
static void test_measure(void **state)
{
    (void)state;
    fj_context *ctx = make_ctx();
    fjt_rng rng;
    fjt_rng_init(&rng, fjt_seed() ^ 0x6d656173ull);
    const int q[] = {1, 1, 1}, kv[] = {700, 33, 512};
    fjt_varlen vl = lengths(3, q, kv);
    fj_attention_desc d = paged_desc(&vl, true, 8, 2, 64, FJ_F32, 0);
    fjt_paged pg = {.page_size = 16, .dense_q = true};
    fjt_problem p;
    assert_true(fjt_problem_make_paged(&p, &d, &vl, &pg, &rng, true));
    fj_plan_options o;
    fj_plan_options_init(&o);
    o.flags = FJ_PLAN_MEASURE;
    o.time_limit = 2.0;
    fj_plan *plan;
    if (fj_plan_create_ex(ctx, &p.d, &o, &plan)) fail_msg("measure: %s", fj_last_error());
    fjt_error e;
    assert_int_equal(fjt_run_plan(ctx, plan, &p, true, &e), FJ_OK);
    expect_ok(&p, &e, true, "measured plan", &vl);
    fj_plan_destroy(plan);
    fjt_problem_free(&p);
    fj_context_destroy(ctx);
}

/* Every rule of the block table and the KV lengths, and of the arrays
 * against the features: FJ_ERR_INVALID_ARGUMENT naming the argument and
 * the rule, o and lse untouched. */
static void test_bad_extras(void **state)
{
    (void)state;
    fj_context *ctx = make_ctx();
    /* 3 sequences of 2 query rows, pools of 6 pages of 4 keys, a table of
       3 columns in rows of 5, seqlen_k 10 */
    enum { B = 3, SQ = 2, HQ = 2, D = 8, P = 4, PAGES = 6, COLS = 3, STRIDE = 5, SK = 10 };
    fj_attention_desc d;
    fj_attention_desc_init(&d, B, HQ, 1, SQ, SK, D, FJ_F32);
    d.features = FJ_FEATURE_PAGED_KV;
    d.causal = FJ_CAUSAL_BOTTOM_RIGHT;
    d.page_size = P;
    d.num_pages = PAGES;
    d.max_pages = COLS;
    d.block_table_stride = STRIDE;
    static float q[B * SQ * HQ * D], k[PAGES * P * D], o[B * SQ * HQ * D], lse[B * HQ * SQ];
    for (size_t i = 0; i < sizeof q / sizeof *q; i++) q[i] = (float)(i % 7) * 0.125f;
    for (size_t i = 0; i < sizeof k / sizeof *k; i++) k[i] = (float)(i % 5) * 0.25f;
    fj_plan *plan;
    assert_int_equal(fj_plan_create(ctx, &d, &plan), FJ_OK);
    static const int32_t good_bt[B * STRIDE] = {5, 0, -7, 99, -1, 3, -1, -1, -1, -1, 1, 2, 4, 0, 0};
    static const int32_t good_len[B] = {7, 1, 10};
    /* the good arrays run (unused tail entries hold anything) */
    fj_execute_extras x;
    fj_execute_extras_init(&x);
    x.block_table = good_bt;
    x.seqused_k = good_len;
    assert_int_equal(fj_plan_execute_ex(plan, q, k, k, o, lse, &x, NULL), FJ_OK);
    static const struct {
        const char *message;
        int32_t bt[B * STRIDE], len[B];
    } bad[] = {
        {"block_table[0][1] (-7, entry 1) is outside the pools: a page must be in [0, "
         "num_pages = 6)",
         {5, -7, 0, 0, 0, 3, 0, 0, 0, 0, 1, 2, 4, 0, 0},
         {7, 1, 10}},
        {"block_table[2][2] (6, entry 12) is outside the pools",
         {5, 0, 0, 0, 0, 3, 0, 0, 0, 0, 1, 2, 6, 0, 0},
         {7, 1, 10}},
        {"block_table[1][0] (2147483647, entry 5)",
         {5, 0, 0, 0, 0, 2147483647, 0, 0, 0, 0, 1, 2, 4, 0, 0},
         {7, 1, 10}},
        {"seqused_k[1] (-1) must be in [0, seqlen_k = 10]",
         {5, 0, 0, 0, 0, 3, 0, 0, 0, 0, 1, 2, 4, 0, 0},
         {7, -1, 10}},
        {"seqused_k[2] (11) must be in [0, seqlen_k = 10]",
         {5, 0, 0, 0, 0, 3, 0, 0, 0, 0, 1, 2, 4, 0, 0},
         {7, 1, 11}},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memset(o, 0xab, sizeof o);
        memset(lse, 0xab, sizeof lse);
        fj_execute_extras_init(&x);
        x.block_table = bad[i].bt;
        x.seqused_k = bad[i].len;
        assert_int_equal(fj_plan_execute_ex(plan, q, k, k, o, lse, &x, NULL),
                         FJ_ERR_INVALID_ARGUMENT);
        if (!strstr(fj_last_error(), bad[i].message))
            fail_msg("case %zu: '%s' lacks '%s'", i, fj_last_error(), bad[i].message);
        for (size_t j = 0; j < sizeof o; j++)
            if (((unsigned char *)o)[j] != 0xab) fail_msg("case %zu: o written", i);
        for (size_t j = 0; j < sizeof lse; j++)
            if (((unsigned char *)lse)[j] != 0xab) fail_msg("case %zu: lse written", i);
    }
    /* a length past the table's pages: a plan whose seqlen_k is more than
       max_pages x page_size */
    fj_attention_desc wide = d;
    wide.seqlen_k = 20;
    fj_plan *wp;
    assert_int_equal(fj_plan_create(ctx, &wide, &wp), FJ_OK);
    static const int32_t past[B] = {7, 13, 1};
    fj_execute_extras_init(&x);
    x.block_table = good_bt;
    x.seqused_k = past;
    memset(o, 0xab, sizeof o);
    assert_int_equal(fj_plan_execute_ex(wp, q, k, k, o, lse, &x, NULL), FJ_ERR_INVALID_ARGUMENT);
    if (!strstr(fj_last_error(), "seqused_k[1] (13) is past the block table's pages: a row names "
                                 "max_pages (3) pages of page_size (4) keys, 12 keys at most"))
        fail_msg("'%s'", fj_last_error());
    for (size_t j = 0; j < sizeof o; j++)
        if (((unsigned char *)o)[j] != 0xab) fail_msg("o written");
    fj_plan_destroy(wp);
    /* the arrays against the features */
    static const int32_t cu[B + 1] = {0, 2, 4, 6};
    struct {
        const char *message;
        const int32_t *bt, *len, *cq, *ck;
        int32_t tq, tk;
    } arrays[] = {
        {"block_table is NULL: the desc's features have FJ_FEATURE_PAGED_KV", NULL, good_len, NULL,
         NULL, 0, 0},
        {"seqused_k is NULL: the desc's features have FJ_FEATURE_PAGED_KV", good_bt, NULL, NULL,
         NULL, 0, 0},
        {"cu_seqlens_k is given but the desc's features have FJ_FEATURE_PAGED_KV", good_bt,
         good_len, NULL, cu, 0, 0},
        {"total_k (6) is given but the desc's features have FJ_FEATURE_PAGED_KV", good_bt, good_len,
         NULL, NULL, 0, 6},
        {"cu_seqlens_q is given but the desc's features lack FJ_FEATURE_VARLEN", good_bt, good_len,
         cu, NULL, 0, 0},
        {"total_q (6) is given but the desc's features lack FJ_FEATURE_VARLEN", good_bt, good_len,
         NULL, NULL, 6, 0},
        {"block_table (", (const int32_t *)((const char *)good_bt + 2), good_len, NULL, NULL, 0, 0},
    };
    for (size_t i = 0; i < sizeof arrays / sizeof arrays[0]; i++) {
        fj_execute_extras_init(&x);
        x.block_table = arrays[i].bt;
        x.seqused_k = arrays[i].len;
        x.cu_seqlens_q = arrays[i].cq;
        x.cu_seqlens_k = arrays[i].ck;
        x.total_q = arrays[i].tq;
        x.total_k = arrays[i].tk;
        memset(o, 0xab, sizeof o);
        assert_int_equal(fj_plan_execute_ex(plan, q, k, k, o, lse, &x, NULL),
                         FJ_ERR_INVALID_ARGUMENT);
        if (!strstr(fj_last_error(), arrays[i].message))
            fail_msg("array case %zu: '%s' lacks '%s'", i, fj_last_error(), arrays[i].message);
        for (size_t j = 0; j < sizeof o; j++)
            if (((unsigned char *)o)[j] != 0xab) fail_msg("array case %zu: o written", i);
    }
    fj_plan_destroy(plan);
    /* a block table given to a plan without the feature */
    fj_attention_desc plain;
    fj_attention_desc_init(&plain, 1, 2, 1, 2, 4, 8, FJ_F32);
    assert_int_equal(fj_plan_create(ctx, &plain, &plan), FJ_OK);
    fj_execute_extras_init(&x);
    x.block_table = good_bt;
    assert_int_equal(fj_plan_execute_ex(plan, q, k, k, o, NULL, &x, NULL), FJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(fj_last_error(), "block_table is given but the desc's features lack "
                                            "FJ_FEATURE_PAGED_KV"));
    fj_plan_destroy(plan);
    fj_context_destroy(ctx);
}

/* The desc's page fields: set without the feature, below 1, a table row
 * shorter than max_pages, pools too large to address. */
static void test_bad_desc(void **state)
{
    (void)state;
    fj_attention_desc d;
    fj_attention_desc_init(&d, 2, 4, 2, 1, 64, 16, FJ_F16);
    d.page_size = 16;
    assert_int_equal(fj_attention_desc_validate(&d), FJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(fj_last_error(), "page_size (16) is set but the desc's features lack "
                                            "FJ_FEATURE_PAGED_KV"));
    d.page_size = 0;
    d.block_table_stride = 4;
    assert_int_equal(fj_attention_desc_validate(&d), FJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(fj_last_error(), "block_table_stride (4) is set"));
    d.block_table_stride = 0;
    d.features = FJ_FEATURE_PAGED_KV;
    d.page_size = 16;
    d.num_pages = 8;
    d.max_pages = 4;
    assert_int_equal(fj_attention_desc_validate(&d), FJ_OK);
    static const struct {
        int page_size, num_pages, max_pages, stride;
        const char *message;
    } bad[] = {
        {0, 8, 4, 0, "page_size (0) must be >= 1 with FJ_FEATURE_PAGED_KV"},
        {16, 0, 4, 0, "num_pages (0) must be >= 1"},
        {16, 8, -1, 0, "max_pages (-1) must be >= 1"},
        {16, 8, 4, 3, "block_table_stride (3) must be 0 (max_pages) or >= max_pages (4)"},
        {16, 8, 4, -2, "block_table_stride (-2) must be 0 (max_pages) or >= max_pages (4)"},
        {1 << 30, 1 << 30, 4, 0, "k: the dense tensor [batch 1073741824, seq 1073741824, heads 2"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        fj_attention_desc b = d;
        b.page_size = bad[i].page_size;
        b.num_pages = bad[i].num_pages;
        b.max_pages = bad[i].max_pages;
        b.block_table_stride = bad[i].stride;
        assert_int_equal(fj_attention_desc_validate(&b), FJ_ERR_INVALID_ARGUMENT);
        if (!strstr(fj_last_error(), bad[i].message))
            fail_msg("case %zu: '%s' lacks '%s'", i, fj_last_error(), bad[i].message);
    }
    /* a strided pool whose extent overflows, named by its stride */
    d.k_stride[0] = INT64_MAX / 4;
    d.k_stride[1] = 32;
    d.k_stride[2] = 16;
    assert_int_equal(fj_attention_desc_validate(&d), FJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(fj_last_error(), "k_stride"));
    /* the pool's page axis is not a batch axis: with FJ_FEATURE_VARLEN a
       nonzero k_stride[0] is the page stride, allowed */
    d.features |= FJ_FEATURE_VARLEN;
    d.k_stride[0] = 16 * 32;
    assert_int_equal(fj_attention_desc_validate(&d), FJ_OK);
    d.q_stride[0] = 64;
    d.q_stride[1] = 64;
    d.q_stride[2] = 16;
    assert_int_equal(fj_attention_desc_validate(&d), FJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(fj_last_error(), "q_stride[0] (batch axis) is 64 but must be 0"));
}

int main(int argc, char **argv)
{
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--backend")) {
            if (!strcmp(argv[i + 1], "cpu-reference")) backend = FJ_BACKEND_CPU_REFERENCE;
            else if (!strcmp(argv[i + 1], "cpu")) backend = FJ_BACKEND_CPU;
            else {
                fprintf(stderr, "test_paged: --backend cpu-reference|cpu\n");
                return 2;
            }
        }
    fjt_seed();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chosen),
        cmocka_unit_test(test_random),
        cmocka_unit_test(test_long),
        cmocka_unit_test(test_plan_text),
        cmocka_unit_test(test_concurrent_executes),
        cmocka_unit_test(test_measure),
        cmocka_unit_test(test_bad_extras),
        cmocka_unit_test(test_bad_desc),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
