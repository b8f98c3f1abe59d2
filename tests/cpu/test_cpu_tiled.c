/* What only FJ_BACKEND_CPU (src/cpu/tiled.c) has: its row kernel (exp2 and
 * the online-softmax step against double arithmetic), its block geometry
 * (the force hook, blocks within the problem, a bounded workspace), and
 * problems run with its parameters forced: small blocks, blocks smaller than
 * a GQA group, worker counts, score ramps that rescale at every block.
 * Its correctness on the shared cases (every shape, mask, layout and dtype
 * against the double oracle and the reference) is the conformance driver's
 * (tests/conformance); the problems here are checked by the same code
 * (fjt_case_check: the oracle, the reference's output and lse, poisoned
 * outputs, rows that see no key exactly zero). Random problems and data
 * come from the suite's seed (FLASHJIT_TEST_SEED replays a run). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "case.h"
#include "check.h"
#include "harness.h"
#include "cpu/tiled_blocks.h"
#include "cpu/tiled_softmax.h"

#define NELEMS(a) ((int)(sizeof(a) / sizeof((a)[0])))

static uint64_t suite_seed;

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

typedef struct checkers {
    fj_context *tiled, *ref;
} checkers;

/* c on the tiled backend, judged against the oracle and the reference (one
 * line printed either way). */
static void check_case(const checkers *k, const fjt_case *c)
{
    if (fjt_case_check(c, suite_seed, k->tiled, k->ref) != FJT_PASS)
        fail_msg("%s/%s failed: the line above says how", c->group, c->name);
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
        char name[48];
        snprintf(name, sizeof name, "%d-q%dk%d", i, bq, bk);
        fjt_case k = fjt_case_draw(&rng, "forced-blocks", name, 300, i % 2);

        fj_plan *plan;
        assert_int_equal(fj_plan_create(c.tiled, &k.d, &plan), FJ_OK);
        if (!strstr(fj_plan_describe(plan), "forced"))
            fail_msg("forced blocks not in describe:\n%s", fj_plan_describe(plan));
        fj_plan_destroy(plan);
        check_case(&c, &k);
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
    fj_context *tiled = make_context(FJ_BACKEND_CPU, 2),
               *ref = make_context(FJ_BACKEND_CPU_REFERENCE, 2);
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

/* ---- parameters forced ------------------------------------------------------ */

/* GQA and MQA with forced row blocks smaller than the group, so a kv head's
 * query heads are split over several blocks (uneven chunks included). */
static void test_head_chunks(void **state)
{
    (void)state;
    static const int bqs[] = {1, 3, 5, 8, 13, 64};
    static const fj_dtype dtypes[] = {FJ_F32, FJ_F16, FJ_BF16};
    for (int i = 0; i < NELEMS(bqs); i++) {
        assert_int_equal(fj_cpu_tiled_force_blocks(bqs[i], 33), FJ_OK);
        checkers c = {make_context(FJ_BACKEND_CPU, 2), make_context(FJ_BACKEND_CPU_REFERENCE, 2)};
        char name[48];
        fj_attention_desc d;
        fj_attention_desc_init(&d, 2, 16, 2, 37, 70, 64, dtypes[i % 3]); /* GQA 8:1 */
        d.causal = FJ_CAUSAL_BOTTOM_RIGHT;
        snprintf(name, sizeof name, "gqa8-q%d", bqs[i]);
        fjt_case k = fjt_case_make("head-chunks", name, &d, FJT_DENSE, true);
        check_case(&c, &k);
        fj_attention_desc_init(&d, 1, 12, 1, 1, 129, 128, dtypes[(i + 1) % 3]); /* MQA decode */
        snprintf(name, sizeof name, "mqa-decode-q%d", bqs[i]);
        k = fjt_case_make("head-chunks", name, &d, FJT_DENSE, true);
        check_case(&c, &k);
        fj_attention_desc_init(&d, 1, 6, 1, 50, 50, 8, dtypes[(i + 2) % 3]); /* MQA, window */
        d.causal = FJ_CAUSAL_TOP_LEFT;
        d.window_left = 9;
        snprintf(name, sizeof name, "mqa-window-q%d", bqs[i]);
        k = fjt_case_make("head-chunks", name, &d, FJT_BHSD, true);
        check_case(&c, &k);
        fj_context_destroy(c.tiled);
        fj_context_destroy(c.ref);
    }
    assert_int_equal(fj_cpu_tiled_force_blocks(0, 0), FJ_OK);
}

/* Worker counts other than the default, including more workers than tasks. */
static void test_thread_counts(void **state)
{
    (void)state;
    static const int threads[] = {1, 3, 7};
    static const fj_dtype dtypes[] = {FJ_F32, FJ_F16, FJ_BF16};
    for (int i = 0; i < NELEMS(threads); i++) {
        checkers c = {make_context(FJ_BACKEND_CPU, threads[i]),
                      make_context(FJ_BACKEND_CPU_REFERENCE, threads[i])};
        char name[48];
        fj_attention_desc d;
        fj_attention_desc_init(&d, 2, 3, 3, 300, 250, 64, dtypes[i]);
        d.causal = FJ_CAUSAL_TOP_LEFT;
        snprintf(name, sizeof name, "t%d-prefill", threads[i]);
        fjt_case k = fjt_case_make("threads", name, &d, FJT_DENSE, true);
        check_case(&c, &k);
        fj_attention_desc_init(&d, 1, 2, 1, 2, 700, 96, FJ_F32);
        snprintf(name, sizeof name, "t%d-decode", threads[i]);
        k = fjt_case_make("threads", name, &d, FJT_DENSE, true);
        check_case(&c, &k);
        fj_context_destroy(c.tiled);
        fj_context_destroy(c.ref);
    }
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
                    fail_msg("trial %d step %d n %d [%d, %d): x[%d] = %.9g, want %.9g", trial, step,
                             n, lo, hi, j, (double)x[j], ref[j]);
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
    if (!strstr(text, "heuristic") || strstr(text, "forced"))
        fail_msg("unexpected describe:\n%s", text);
    /* blocks never exceed what the problem has: 100 rows, 90 keys */
    fj_cpu_tiled_blocks blocks;
    fj_problem p;
    assert_int_equal(fj_problem_init(&p, &d), FJ_OK);
    assert_int_equal(fj_cpu_tiled_choose_blocks(NULL, &p, NULL, 2, &blocks), FJ_OK);
    assert_true(blocks.block_q >= 1 && blocks.block_q <= 100);
    assert_true(blocks.block_k >= 1 && blocks.block_k <= 90);
    fj_plan_destroy(plan);
}

/* Block geometry at the edge of int (issue 23, finding 1): seqlen_q, or the
 * GQA group, within a block of INT_MAX. The ceil-divisions used to overflow
 * int, the task count went negative, and execute returned FJ_OK with every
 * output row unwritten. Every block size must cover every row exactly: the
 * blocks of positions and of heads tile [0, seqlen_q) and [0, group), and
 * the task count is their product with batch x heads_kv. The same problems'
 * plans are made too (nothing runs: the output alone would be GiBs). */
static void test_geometry_at_int_max(void **state)
{
    const checkers *c = *state;
    static const struct {
        int batch, hq, hkv, sq;
    } shapes[] = {
        {1, 1, 1, INT_MAX},
        {2, 1, 1, INT_MAX - 1},
        {1, 1, 1, INT_MAX - 511},
        {1, 1, 1, INT_MAX - 512},
        {3, 1, 1, INT_MAX - 4095},
        {1, INT_MAX, 1, 1},
        {1, INT_MAX - 1, 1, 2},
        {2, INT_MAX - 511, 1, 1},
        {1, 2147483646, 2, 1},
        {1, 1 << 30, 1 << 29, 3},
        {1, INT_MAX, INT_MAX, 1},
        {2, INT_MAX - 62, INT_MAX - 62, 1},
        {1, 2147483640, 268435455, 1},
    };
    static const int blocks[] = {1, 2, 3, 7, 64, 100, 511, 512, 4096};
    int decode_plans = 0;
    for (int s = 0; s < NELEMS(shapes); s++) {
        fj_attention_desc d;
        fj_attention_desc_init(&d, shapes[s].batch, shapes[s].hq, shapes[s].hkv, shapes[s].sq, 4, 8,
                               FJ_BF16);
        /* K and V broadcast over batch: only the output needs the memory */
        d.k_stride[0] = d.v_stride[0] = 0;
        d.k_stride[1] = d.v_stride[1] = (int64_t)shapes[s].hkv * 8;
        d.k_stride[2] = d.v_stride[2] = 8;
        fj_problem p;
        if (fj_problem_init(&p, &d) != FJ_OK) fail_msg("shape %d: %s", s, fj_last_error());
        for (int b = 0; b < NELEMS(blocks); b++) {
            fj_cpu_tiled_geometry g;
            fj_cpu_tiled_geometry_of(&p, blocks[b], &g);
            int64_t heads = (int64_t)g.head_chunks * g.heads_per_block;
            int64_t positions = g.position_blocks * g.positions_per_block;
            bool ok = g.heads_per_block >= 1 && g.head_chunks >= 1 && g.positions_per_block >= 1 &&
                      g.position_blocks >= 1 && heads >= p.group &&
                      heads - g.heads_per_block < p.group && positions >= p.seqlen_q &&
                      positions - g.positions_per_block < p.seqlen_q &&
                      g.rows == g.positions_per_block * g.heads_per_block && g.rows <= blocks[b] &&
                      g.tasks == (int64_t)p.batch * p.heads_kv * g.head_chunks * g.position_blocks;
            if (!ok)
                fail_msg("b%d hq%d hkv%d sq%d, block_q %d: heads %d x %d chunks, positions %d x "
                         "%lld blocks, rows %d, tasks %lld: not every row is covered once",
                         p.batch, p.heads_q, p.heads_kv, p.seqlen_q, blocks[b], g.heads_per_block,
                         g.head_chunks, g.positions_per_block, (long long)g.position_blocks, g.rows,
                         (long long)g.tasks);
        }
        /* the heuristic's choice, and a plan on it */
        fj_cpu_tiled_blocks chosen;
        assert_int_equal(fj_cpu_tiled_choose_blocks(NULL, &p, NULL, 2, &chosen), FJ_OK);
        assert_true(chosen.block_q >= 1 && chosen.block_k >= 1);
        fj_plan *plan = NULL;
        if (fj_plan_create(c->tiled, &d, &plan) != FJ_OK)
            fail_msg("shape %d: plan: %s", s, fj_last_error());
        /* few rows per kv head take the decode path (src/cpu/decode.c): its
           units of (batch, head group) must cover every kv head too */
        const char *text = fj_plan_describe(plan), *split = strstr(text, "\nsplit: ");
        if (strstr(text, "method: decode")) {
            long long per_task = 0, units = 0;
            const char *u = split ? strstr(split, "), ") : NULL;
            if (!u || sscanf(split, "\nsplit: %lld", &per_task) != 1 ||
                sscanf(u, "), %lld unit(s)", &units) != 1)
                fail_msg("shape %d: cannot read the decode split:\n%s", s, text);
            decode_plans++;
            if (units < 1 || units * per_task < (long long)p.batch * p.heads_kv)
                fail_msg("b%d hkv%d: %lld unit(s) of %lld kv head(s) do not cover every kv "
                         "head:\n%s",
                         p.batch, p.heads_kv, units, per_task, text);
        }
        fj_plan_destroy(plan);
    }
    printf("# %d of %d plans took the decode path\n", decode_plans, NELEMS(shapes));
    assert_true(decode_plans > 0);
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
        cmocka_unit_test(test_row_kernel_exp2),     cmocka_unit_test(test_row_kernel_steps),
        cmocka_unit_test(test_force_blocks_hook),   cmocka_unit_test(test_workspace_bounded),
        cmocka_unit_test(test_geometry_at_int_max), cmocka_unit_test(test_head_chunks),
        cmocka_unit_test(test_thread_counts),       cmocka_unit_test(test_rescaling_ramps),
        cmocka_unit_test(test_forced_small_blocks),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
