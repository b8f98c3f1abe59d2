/* The CPU backend's decode path on a paged KV cache (src/cpu/decode.c
 * through src/cpu/varlen.c): decode-shaped paged problems (at most
 * FJ_CPU_DECODE_MAX_ROWS query rows per kv head) run every sequence in one
 * pass, K and V read through the block table where they lie, never copied
 * out of the pages.
 *
 * Every problem: its plan says it took that path (the describe text, and
 * the kernel "cpu_decode_<loops>_paged" or "_varlen_paged"); against the
 * double oracle run on each sequence as the dense problem of its own
 * lengths on the keys before they were paged (tests/common/harness.c),
 * output and lse poisoned first, unused pool pages and rows NaN and unused
 * block-table entries outside the pool (a read of either shows), with lse
 * and without. Page sizes 1, 3, 16, 17, 64 and random ones, pages shuffled
 * and in pool order, three pool layouts, KV lengths that are not a
 * multiple of the page size, empty sequences, MHA/GQA/MQA, every mask,
 * ALiBi, sinks and softcaps, dense and packed (varlen) queries; on 1, 2
 * and 5 workers, with the keys split as finely as the workers allow
 * (fj_cpu_decode_force_split) and with the generic kernels forced. Random
 * problems from the logged seed (FLASHJIT_TEST_SEED replays them). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/decode.h"
#include "harness.h"
#include "plan.h"

#define NELEMS(a) ((int)(sizeof(a) / sizeof((a)[0])))

static uint64_t suite_seed;

static fj_context *make_context(int threads)
{
    fj_context_options o;
    fj_context_options_init(&o);
    o.backend = FJ_BACKEND_CPU;
    o.cpu_threads = threads;
    o.cache_dir = "";
    o.tuning_file = "";
    fj_context *ctx = NULL;
    fj_status s = fj_context_create(&o, &ctx);
    if (s) fail_msg("fj_context_create: %s: %s", fj_status_name(s), fj_last_error());
    return ctx;
}

/* The bounds every CPU backend meets (tests/conformance, fjt_case_bounds). */
static void expect_ok(const fjt_problem *p, const fjt_error *e, bool with_lse, const char *what,
                      const fjt_varlen *vl, const char *text)
{
    const double tol = fjt_tolerance(p->d.dtype);
    if (e->nan_count || !fjt_within(e, tol) || e->gaps_written || e->empty_not_zero ||
        (with_lse && (e->lse_mismatch || !(e->lse_max_abs <= 1e-4)))) {
        char lens[512], pages[160];
        fjt_varlen_str(vl, lens, sizeof lens);
        fjt_paged_str(&p->pg, &p->d, pages, sizeof pages);
        fail_msg("%s: %s lengths=%s %s lse=%d: rel %.3e (tol %.1e) max_abs %.3e nan %zu gaps %zu "
                 "empty_not_zero %zu lse_mismatch %zu lse_max_abs %.3e\n%s",
                 what, fjt_desc_str(&p->d), lens, pages, (int)with_lse, e->rel_fro, tol, e->max_abs,
                 e->nan_count, e->gaps_written, e->empty_not_zero, e->lse_mismatch, e->lse_max_abs,
                 text);
    }
}

/* The plan took the paged decode path: its text and its kernel say so
 * (kernels: the set's name, NULL for any). */
static void expect_paged_decode(const fj_plan *plan, const fj_attention_desc *d,
                                const char *kernels, const char *what)
{
    const char *text = fj_plan_describe(plan);
    if (!strstr(text, "method: decode") ||
        !strstr(text, "the decode path reads them through the block table (no copy)") ||
        strstr(text, "copied"))
        fail_msg("%s: %s: not the paged decode path:\n%s", what, fjt_desc_str(d), text);
    char want[64];
    snprintf(want, sizeof want, "kernels: %s ", kernels ? kernels : "");
    if (kernels && !strstr(text, want))
        fail_msg("%s: not the %s kernels:\n%s", what, kernels, text);
    fj_plan_info info;
    assert_int_equal(fj_plan_get_info(plan, &info), FJ_OK);
    const char *tail = d->features & FJ_FEATURE_VARLEN ? "_varlen_paged" : "_paged";
    const size_t n = strlen(info.kernel), m = strlen(tail);
    if (strncmp(info.kernel, "cpu_decode_", 11) || n < m || strcmp(info.kernel + n - m, tail))
        fail_msg("%s: kernel %s, not cpu_decode_<loops>%s", what, info.kernel, tail);
    assert_string_equal(info.tiles, "");
}

/* Lengths that matter: empty, 1, around page sizes and the 16-key groups,
 * the 128-key blocks and the 512-key chunks. */
static int draw_length(fjt_rng *r, int most)
{
    static const int menu[] = {0,  1,  2,   3,   5,   15,  16,  17,  33,  63,
                               64, 65, 127, 128, 129, 200, 511, 513, 700, 1100};
    int v =
        fjt_range(r, 0, 3) == 0 ? fjt_range(r, 0, most) : menu[fjt_range(r, 0, NELEMS(menu) - 1)];
    return v > most ? most : v;
}

/* One random decode-shaped paged problem on ctx, its plan made once and run
 * on two batches of other lengths (the same pool and table shape). */
static void random_problem(fj_context *ctx, fjt_rng *rng, const char *kernels, const char *what)
{
    static const int page_sizes[] = {1, 3, 16, 17, 64};
    static const int dims[] = {8, 13, 32, 64, 100, 128};
    static const int heads[][2] = {{1, 1}, {4, 4}, {8, 1}, {8, 2}, {6, 3}, {16, 4}, {4, 2}};
    const int h = fjt_range(rng, 0, NELEMS(heads) - 1);
    const int group = heads[h][0] / heads[h][1];
    const bool dense_q = fjt_range(rng, 0, 1);
    /* at most FJ_CPU_DECODE_MAX_ROWS rows per kv head: the decode path's */
    const int max_q = fjt_range(rng, 1, FJ_CPU_DECODE_MAX_ROWS / group);
    const int nseq = fjt_range(rng, 1, 7);
    const int max_k = fjt_range(rng, 0, 3) ? fjt_range(rng, 1, 700) : 1500;
    const int dim = dims[fjt_range(rng, 0, NELEMS(dims) - 1)];
    const fj_dtype t = (fj_dtype)fjt_range(rng, 0, 2);
    fjt_paged pg = {.page_size = fjt_range(rng, 0, 3) ? page_sizes[fjt_range(rng, 0, 4)]
                                                      : fjt_range(rng, 1, 80),
                    .in_order = fjt_range(rng, 0, 3) == 0,
                    .layout = (fjt_pool_layout)fjt_range(rng, 0, 2),
                    .stride_pad = fjt_range(rng, 0, 1) * fjt_range(rng, 1, 3),
                    .dense_q = dense_q};
    fjt_varlen mix[2];
    int most_pages = 1, most_cols = 1;
    for (int m = 0; m < 2; m++) {
        memset(&mix[m], 0, sizeof mix[m]);
        mix[m].nseq = nseq;
        int pages = 0;
        for (int b = 0; b < nseq; b++) {
            mix[m].len_q[b] = dense_q ? max_q : fjt_range(rng, 0, max_q);
            mix[m].len_k[b] = draw_length(rng, max_k);
            const int need = (mix[m].len_k[b] + pg.page_size - 1) / pg.page_size;
            pages += need;
            if (need > most_cols) most_cols = need;
        }
        if (pages > most_pages) most_pages = pages;
    }
    most_pages += fjt_range(rng, 0, 3);
    most_cols += fjt_range(rng, 0, 2);
    fj_attention_desc d;
    fj_attention_desc_init(&d, nseq, heads[h][0], heads[h][1], max_q, max_k, dim, t);
    d.features = FJ_FEATURE_PAGED_KV | (dense_q ? 0 : FJ_FEATURE_VARLEN);
    d.causal = (fj_causal)fjt_range(rng, 0, 2);
    if (fjt_range(rng, 0, 2) == 0) d.window_left = fjt_range(rng, 0, 300);
    if (fjt_range(rng, 0, 3) == 0) d.window_right = fjt_range(rng, 0, 40);
    if (fjt_range(rng, 0, 3) == 0) d.features |= FJ_FEATURE_ALIBI;
    if (fjt_range(rng, 0, 3) == 0) d.features |= FJ_FEATURE_SINKS;
    if (fjt_range(rng, 0, 4) == 0) d.softcap = 5.0f;
    if (fjt_range(rng, 0, 2) == 0) d.scale = (float)(0.05 + 2.0 * fjt_uniform(rng));
    fj_plan *plan = NULL;
    for (int m = 0; m < 2; m++) {
        int pages = 0, cols = 0;
        for (int b = 0; b < nseq; b++) {
            const int need = (mix[m].len_k[b] + pg.page_size - 1) / pg.page_size;
            pages += need;
            if (need > cols) cols = need;
        }
        pg.spare_pages = most_pages - pages;
        pg.spare_cols = most_cols - (cols ? cols : 1);
        fjt_problem p;
        if (!fjt_problem_make_paged(&p, &d, &mix[m], &pg, rng, true))
            fail_msg("%s mix %d: making the problem (%s)", what, m, fjt_desc_str(&d));
        if (!plan) {
            if (fj_plan_create(ctx, &p.d, &plan))
                fail_msg("%s: plan: %s: %s", what, fjt_desc_str(&p.d), fj_last_error());
            expect_paged_decode(plan, &p.d, kernels, what);
        }
        for (int with_lse = 0; with_lse <= 1; with_lse++) {
            fjt_error e;
            if (fjt_run_plan(ctx, plan, &p, with_lse, &e))
                fail_msg("%s mix %d: %s: %s", what, m, fjt_desc_str(&p.d), fj_last_error());
            char at[96];
            snprintf(at, sizeof at, "%s mix %d", what, m);
            expect_ok(&p, &e, with_lse, at, &mix[m], fj_plan_describe(plan));
        }
        fjt_problem_free(&p);
    }
    fj_plan_destroy(plan);
}

/* Random problems on 1, 2 and 5 workers, each with the keys split as the
 * plan chooses and as finely as the workers allow, on the kernels this CPU
 * gets and on the generic ones. */
static void test_random(void **state)
{
    (void)state;
    fjt_rng rng;
    fjt_rng_init(&rng, suite_seed ^ 0x70646563ull);
    static const int threads[] = {1, 2, 5};
    static const fj_cpu_decode_mode modes[] = {FJ_CPU_DECODE_AUTO, FJ_CPU_DECODE_GENERIC};
    for (int m = 0; m < NELEMS(modes); m++)
        for (int fine = 0; fine <= 1; fine++) {
            assert_int_equal(fj_cpu_decode_force(modes[m]), FJ_OK);
            fj_cpu_decode_force_split(fine);
            for (int t = 0; t < NELEMS(threads); t++) {
                fj_context *ctx = make_context(threads[t]);
                for (int i = 0; i < 10; i++) {
                    char what[96];
                    snprintf(what, sizeof what, "%s, %s split, %d thread(s), problem %d",
                             m ? "generic" : "auto", fine ? "fine" : "own", threads[t], i);
                    random_problem(ctx, &rng, modes[m] == FJ_CPU_DECODE_GENERIC ? "generic" : NULL,
                                   what);
                }
                fj_context_destroy(ctx);
            }
        }
    fj_cpu_decode_force_split(false);
    assert_int_equal(fj_cpu_decode_force(FJ_CPU_DECODE_AUTO), FJ_OK);
}

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

/* A plan for d (page size and order of pg) run on vl against the oracle;
 * the most chunks a sequence's keys were split into (fj_plan_info after the
 * execute) in *splits. */
static void check_case(fj_context *ctx, fj_attention_desc d, const fjt_varlen *vl, fjt_paged pg,
                       fjt_rng *rng, const char *what, int *splits)
{
    fjt_problem p;
    if (!fjt_problem_make_paged(&p, &d, vl, &pg, rng, true))
        fail_msg("%s: making the problem (%s)", what, fjt_desc_str(&d));
    fj_plan *plan;
    if (fj_plan_create(ctx, &p.d, &plan)) fail_msg("%s: plan: %s", what, fj_last_error());
    expect_paged_decode(plan, &p.d, NULL, what);
    for (int with_lse = 0; with_lse <= 1; with_lse++) {
        fjt_error e;
        if (fjt_run_plan(ctx, plan, &p, with_lse, &e))
            fail_msg("%s: %s: %s", what, fjt_desc_str(&p.d), fj_last_error());
        expect_ok(&p, &e, with_lse, what, vl, fj_plan_describe(plan));
    }
    fj_plan_info info;
    assert_int_equal(fj_plan_get_info(plan, &info), FJ_OK);
    if (splits) *splits = info.splits;
    fj_plan_destroy(plan);
    fjt_problem_free(&p);
}

/* Long sequences split into chunks on page boundaries: one long sequence
 * among short and empty ones (its keys split, theirs whole), equal ones,
 * a window that starts mid-page, every page size of the issue, shuffled
 * and in order (runs of consecutive pages read at once), on 2 and 5
 * workers; the plan reports its chunks. */
static void test_long(void **state)
{
    (void)state;
    fjt_rng rng;
    fjt_rng_init(&rng, suite_seed ^ 0x6c6f6e67ull);
    static const int page_sizes[] = {1, 3, 16, 17, 64};
    static const int threads[] = {2, 5};
    for (int w = 0; w < NELEMS(threads); w++) {
        fj_context *ctx = make_context(threads[w]);
        for (int s = 0; s < NELEMS(page_sizes); s++)
            for (int order = 0; order < 2; order++) {
                const int q[] = {1, 1, 1, 1}, kv[] = {4099, 0, 17, 2000};
                fjt_varlen vl = lengths(4, q, kv);
                fj_attention_desc d;
                fj_attention_desc_init(&d, 4, 8, 2, 1, 4099, 64, (fj_dtype)(s % 3));
                d.features = FJ_FEATURE_PAGED_KV;
                d.causal = FJ_CAUSAL_BOTTOM_RIGHT;
                fjt_paged pg = {.page_size = page_sizes[s],
                                .in_order = order,
                                .dense_q = true,
                                .spare_pages = 3,
                                .layout = (fjt_pool_layout)((s + order) % 3)};
                char what[96];
                snprintf(what, sizeof what, "one long among short, page %d, %s, %d threads",
                         page_sizes[s], order ? "in order" : "shuffled", threads[w]);
                int splits = 0;
                check_case(ctx, d, &vl, pg, &rng, what, &splits);
                if (splits < 2) fail_msg("%s: %d chunk(s): not split", what, splits);

                /* equal sequences, a window from mid-page, 4 positions of GQA 4 */
                const int q4[] = {4, 4}, kv4[] = {3001, 2999};
                vl = lengths(2, q4, kv4);
                fj_attention_desc_init(&d, 2, 4, 1, 4, 3001, 32, (fj_dtype)((s + 1) % 3));
                d.features = FJ_FEATURE_PAGED_KV;
                d.causal = FJ_CAUSAL_BOTTOM_RIGHT;
                d.window_left = 1000 + s;
                snprintf(what, sizeof what, "two equal, window, page %d, %s, %d threads",
                         page_sizes[s], order ? "in order" : "shuffled", threads[w]);
                check_case(ctx, d, &vl, pg, &rng, what, &splits);
                /* split as finely as the workers allow (this call alone
                   reads too little to leave the calling thread) */
                fj_cpu_decode_force_split(true);
                check_case(ctx, d, &vl, pg, &rng, what, &splits);
                fj_cpu_decode_force_split(false);
                if (splits < 2) fail_msg("%s: %d chunk(s): not split", what, splits);
            }
        fj_context_destroy(ctx);
    }
}

/* Packed queries against paged keys (chunked prefill's shape, within the
 * decode path's rows): sequences of 0..4 queries over caches shorter and
 * longer than their queries (under bottom-right causal the first rows of
 * a short one see nothing), every mask, with sinks. */
static void test_varlen_queries(void **state)
{
    (void)state;
    fjt_rng rng;
    fjt_rng_init(&rng, suite_seed ^ 0x76706167ull);
    fj_context *ctx = make_context(2);
    for (int c = 0; c < 3; c++)
        for (int fine = 0; fine <= 1; fine++) {
            fj_cpu_decode_force_split(fine);
            const int q[] = {4, 0, 1, 3, 2, 4}, kv[] = {2, 50, 0, 900, 3, 1300};
            fjt_varlen vl = lengths(6, q, kv);
            fj_attention_desc d;
            fj_attention_desc_init(&d, 6, 8, 2, 4, 1300, 40, (fj_dtype)c);
            d.features = FJ_FEATURE_PAGED_KV | FJ_FEATURE_VARLEN | FJ_FEATURE_SINKS;
            d.causal = (fj_causal)c;
            if (c == 2) d.window_right = 1;
            fjt_paged pg = {.page_size = 17, .spare_cols = 1, .layout = FJT_POOL_PADDED};
            char what[64];
            snprintf(what, sizeof what, "varlen queries, mask %d, %s split", c,
                     fine ? "fine" : "own");
            check_case(ctx, d, &vl, pg, &rng, what, NULL);
        }
    fj_cpu_decode_force_split(false);
    fj_context_destroy(ctx);
}

/* What does not take the path: more rows per kv head than the decode path
 * takes (the tiled path, keys copied out of the pages), the path turned off,
 * a given configuration, and the reference backend. */
static void test_choice(void **state)
{
    (void)state;
    fj_context *ctx = make_context(2);
    fj_attention_desc d;
    fj_attention_desc_init(&d, 3, 8, 2, 5, 600, 64, FJ_F32); /* 20 rows per kv head */
    d.features = FJ_FEATURE_PAGED_KV;
    d.page_size = 16;
    d.num_pages = 3 * 38;
    d.max_pages = 38;
    fj_plan *plan;
    assert_int_equal(fj_plan_create(ctx, &d, &plan), FJ_OK);
    const char *text = fj_plan_describe(plan);
    if (strstr(text, "method: decode") || !strstr(text, "copied out of its pages"))
        fail_msg("20 rows per kv head: not the copy path:\n%s", text);
    fj_plan_info info;
    assert_int_equal(fj_plan_get_info(plan, &info), FJ_OK);
    assert_string_equal(info.kernel, "cpu_tiled_paged");
    fj_plan_destroy(plan);

    d.seqlen_q = 4; /* 16 rows per kv head: decode */
    assert_int_equal(fj_plan_create(ctx, &d, &plan), FJ_OK);
    expect_paged_decode(plan, &d, NULL, "16 rows per kv head");
    fj_plan_destroy(plan);

    assert_int_equal(fj_plan_create_config(ctx, &d, "q64k128", &plan), FJ_OK);
    if (strstr(fj_plan_describe(plan), "method: decode"))
        fail_msg("given tiles, still decode:\n%s", fj_plan_describe(plan));
    fj_plan_destroy(plan);

    assert_int_equal(fj_cpu_decode_force(FJ_CPU_DECODE_OFF), FJ_OK);
    assert_int_equal(fj_plan_create(ctx, &d, &plan), FJ_OK);
    if (strstr(fj_plan_describe(plan), "method: decode"))
        fail_msg("decode turned off, still decode:\n%s", fj_plan_describe(plan));
    fj_plan_destroy(plan);
    assert_int_equal(fj_cpu_decode_force(FJ_CPU_DECODE_AUTO), FJ_OK);
    fj_context_destroy(ctx);

    fj_context_options o;
    fj_context_options_init(&o);
    o.backend = FJ_BACKEND_CPU_REFERENCE;
    o.cache_dir = "";
    o.tuning_file = "";
    assert_int_equal(fj_context_create(&o, &ctx), FJ_OK);
    assert_int_equal(fj_plan_create(ctx, &d, &plan), FJ_OK);
    assert_int_equal(fj_plan_get_info(plan, &info), FJ_OK);
    assert_string_equal(info.kernel, "cpu_reference_paged");
    fj_plan_destroy(plan);
    fj_context_destroy(ctx);
}

int main(void)
{
    suite_seed = fjt_seed();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_choice),
        cmocka_unit_test(test_long),
        cmocka_unit_test(test_varlen_queries),
        cmocka_unit_test(test_random),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
