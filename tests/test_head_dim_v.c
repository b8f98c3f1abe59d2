/* V's head dim other than Q's and K's (fj_attention_desc.head_dim_v;
 * DeepSeek's MLA) on one CPU backend (--backend cpu-reference | cpu):
 * O = softmax(scale Q K^T + mask) V with q and k rows of head_dim elements
 * and v and o rows of head_dim_v. Checked against the double oracle
 * (tests/common/harness.c), outputs and lse poisoned before each run and
 * every element between output rows checked untouched.
 *
 * The pairs: MLA's (192, 128) and (576, 512), V wider than Q (128, 192),
 * narrower (64, 32), tiny and odd ones (1, 7), (7, 1), (33, 17), (17, 33),
 * (13, 200), (256, 8); each on decode shapes (1..16 query rows per kv head,
 * the cpu backend's decode path; keys long enough to be split among the
 * workers) and prefill shapes (its tiled path), seqlen_q above and below
 * seqlen_k, MHA, GQA and MQA, every mask kind and windows, every dtype,
 * dense, BHSD and padded layouts (v's and o's strides stepping rows of
 * head_dim_v), lse on and off, on 1 and 3 workers; then random problems
 * from the suite's seed (FLASHJIT_TEST_SEED replays them). Also: the
 * one-shot plan cache tells problems apart by head_dim_v; head_dim_v equal
 * to head_dim is the plain problem; the describe text gives both dims; bad
 * input (head_dim_v negative or above FJ_MAX_HEAD_DIM, output rows that
 * overlap at head_dim_v) is refused naming the field, nothing written. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "flashjit.h"
#include "harness.h"

#define NELEMS(a) ((int)(sizeof(a) / sizeof((a)[0])))

static fj_backend backend = FJ_BACKEND_CPU;

static fj_context *make_ctx(int threads)
{
    fj_context_options o;
    fj_context_options_init(&o);
    o.backend = backend;
    o.cpu_threads = threads;
    o.cache_dir = "";
    o.tuning_file = "";
    fj_context *ctx = NULL;
    if (fj_context_create(&o, &ctx)) fail_msg("context: %s", fj_last_error());
    return ctx;
}

static void expect_invalid(const fj_attention_desc *d, const char *needle)
{
    assert_int_equal(fj_attention_desc_validate(d), FJ_ERR_INVALID_ARGUMENT);
    if (!strstr(fj_last_error(), needle))
        fail_msg("message '%s' does not name '%s'", fj_last_error(), needle);
}

enum layout { DENSE, BHSD, PADDED, LAYOUTS };

/* q's and k's rows head_dim long, v's and o's head_dim_v. */
static void set_layouts(fj_attention_desc *d, enum layout l)
{
    int64_t *s[4] = {d->q_stride, d->k_stride, d->v_stride, d->o_stride};
    const int seq[4] = {d->seqlen_q, d->seqlen_k, d->seqlen_k, d->seqlen_q};
    const int heads[4] = {d->heads_q, d->heads_kv, d->heads_kv, d->heads_q};
    const int dims[4] = {d->head_dim, d->head_dim, fjt_dim_v(d), fjt_dim_v(d)};
    for (int i = 0; i < 4; i++) {
        const int64_t D = dims[i];
        switch (l) {
        case BHSD:
            s[i][2] = seq[i] * D;
            s[i][1] = D;
            s[i][0] = heads[i] * seq[i] * D;
            break;
        case PADDED: /* 3 elements after each row, 5 after each position */
            s[i][2] = D + 3;
            s[i][1] = heads[i] * (D + 3) + 5;
            s[i][0] = seq[i] * s[i][1] + 7;
            break;
        default: s[i][0] = s[i][1] = s[i][2] = 0; break;
        }
    }
}

/* d through a plan on ctx, lse off then on, against the oracle; the plan's
 * describe text must give both head dims (the cpu backend's). */
static void check(fj_context *ctx, const fj_attention_desc *d, fjt_rng *rng)
{
    fjt_problem p;
    if (!fjt_problem_make(&p, d, rng)) fail_msg("out of memory making %s", fjt_desc_str(d));
    fj_plan *plan;
    if (fj_plan_create(ctx, d, &plan))
        fail_msg("%s: fj_plan_create: %s", fjt_desc_str(d), fj_last_error());
    const char *text = fj_plan_describe(plan);
    if (backend == FJ_BACKEND_CPU && fjt_dim_v(d) != d->head_dim) {
        char want[80];
        snprintf(want, sizeof want, "head dims: q and k %d, v and o %d", d->head_dim, fjt_dim_v(d));
        if (!strstr(text, want))
            fail_msg("%s: describe lacks '%s':\n%s", fjt_desc_str(d), want, text);
    }
    const double tol = fjt_tolerance(d->dtype);
    for (int with_lse = 0; with_lse <= 1; with_lse++) {
        fjt_error e;
        fj_status s = fjt_run_plan(ctx, plan, &p, with_lse, &e);
        if (s) fail_msg("%s: execute: %s: %s", fjt_desc_str(d), fj_status_name(s), fj_last_error());
        if (e.nan_count || !fjt_within(&e, tol) || e.gaps_written || e.empty_not_zero ||
            (with_lse && (e.lse_mismatch || !(e.lse_max_abs <= 1e-4))))
            fail_msg("%s lse=%d: rel %.3e (tol %.1e) max_abs %.3e nan %zu gaps %zu "
                     "empty_not_zero %zu lse_mismatch %zu lse_max_abs %.3e\n%s",
                     fjt_desc_str(d), with_lse, e.rel_fro, tol, e.max_abs, e.nan_count,
                     e.gaps_written, e.empty_not_zero, e.lse_mismatch, e.lse_max_abs, text);
    }
    fj_plan_destroy(plan);
    fjt_problem_free(&p);
}

static const int pairs[][2] = {{192, 128}, {576, 512}, {128, 192}, {64, 32},  {1, 7},
                               {7, 1},     {33, 17},   {17, 33},   {13, 200}, {256, 8}};

/* Each pair on decode and prefill shapes, Sq above and below Sk, the head
 * layouts, masks, dtypes and layouts in turn, lse off and on. */
static void test_pairs(void **state)
{
    (void)state;
    fjt_rng rng;
    fjt_rng_init(&rng, fjt_seed() ^ 0x64766476ull);
    static const struct {
        int hq, hkv, sq, sk;
    } shapes[] = {
        {16, 1, 1, 1031}, /* decode, MQA (MLA's absorbed decode), keys split */
        {8, 2, 2, 300},   /* decode, GQA: 8 rows per kv head */
        {4, 4, 16, 129},  /* 16 rows per kv head: the decode path's most */
        {4, 1, 17, 64},   /* just past it: prefill rows, Sq < Sk */
        {2, 2, 97, 33},   /* prefill, Sq > Sk: under a causal mask rows that see none */
        {6, 2, 40, 257},  /* GQA prefill */
    };
    static const struct {
        fj_causal causal;
        int wl, wr;
    } masks[] = {
        {FJ_CAUSAL_NONE, -1, -1}, {FJ_CAUSAL_BOTTOM_RIGHT, -1, -1}, {FJ_CAUSAL_TOP_LEFT, -1, -1},
        {FJ_CAUSAL_NONE, 20, 3},  {FJ_CAUSAL_BOTTOM_RIGHT, 9, -1},  {FJ_CAUSAL_TOP_LEFT, -1, 4},
    };
    int n = 0;
    for (int threads = 1; threads <= 3; threads += 2) {
        fj_context *ctx = make_ctx(threads);
        for (int i = 0; i < NELEMS(pairs); i++)
            for (int s = 0; s < NELEMS(shapes); s++) {
                const int k = i + s + threads;
                fj_attention_desc d;
                fj_attention_desc_init(&d, 1 + k % 2, shapes[s].hq, shapes[s].hkv, shapes[s].sq,
                                       shapes[s].sk, pairs[i][0], (fj_dtype)(k % 3));
                d.head_dim_v = pairs[i][1];
                /* keep the oracle's double loops small */
                if ((double)d.batch * d.heads_q * d.seqlen_q * d.seqlen_k *
                        (d.head_dim + d.head_dim_v) >
                    4e7)
                    d.batch = 1;
                d.causal = masks[k % NELEMS(masks)].causal;
                d.window_left = masks[k % NELEMS(masks)].wl;
                d.window_right = masks[k % NELEMS(masks)].wr;
                if (k % 4 == 0) d.scale = 0.3f;
                set_layouts(&d, (enum layout)(k % LAYOUTS));
                check(ctx, &d, &rng);
                n++;
            }
        fj_context_destroy(ctx);
    }
    assert_int_equal(n, 2 * NELEMS(pairs) * 6);
}

/* Random problems: head dims and V's head dims drawn apart from a menu of
 * small, odd and MLA sizes, every other axis as fjt_random_desc draws it;
 * ALiBi, sinks and a softcap now and then. */
static void test_random(void **state)
{
    (void)state;
    fjt_rng rng;
    fjt_rng_init(&rng, fjt_seed() ^ 0x7276ull);
    static const int seqlens[] = {1, 2, 3, 5, 16, 17, 31, 64, 65, 130, 257};
    static const int dims[] = {1, 2, 7, 8, 17, 32, 33, 64, 100, 128, 192, 256, 300, 512, 576};
    static const fj_dtype dtypes[] = {FJ_F32, FJ_F16, FJ_BF16};
    fjt_axes ax = {seqlens, NELEMS(seqlens), dims, NELEMS(dims), dtypes, 3, 1e7,
                   dims,    NELEMS(dims)};
    fj_context *ctx = make_ctx(2);
    int differ = 0;
    for (int i = 0; i < 60; i++) {
        fj_attention_desc d;
        fjt_random_desc(&rng, &ax, &d);
        if (i % 5 == 1) d.features |= FJ_FEATURE_ALIBI;
        if (i % 5 == 2) d.features |= FJ_FEATURE_SINKS;
        if (i % 7 == 3) d.softcap = 4.0f;
        differ += fjt_dim_v(&d) != d.head_dim;
        check(ctx, &d, &rng);
    }
    fj_context_destroy(ctx);
    assert_true(differ >= 45);
}

/* fj_attention's cached plans: the same shape with V rows of another length
 * is another problem (a plan for one must not run the other), and
 * head_dim_v equal to head_dim is the plain problem, its key and its result
 * the same. */
static void test_plan_cache_and_plain(void **state)
{
    (void)state;
    fjt_rng rng;
    fjt_rng_init(&rng, fjt_seed() ^ 0xcac4eull);
    fj_context *ctx = make_ctx(2);
    static const int dvs[] = {64, 0, 200, 64, 128, 0};
    for (int sq = 1; sq <= 40; sq += 39)
        for (int i = 0; i < NELEMS(dvs); i++) {
            fj_attention_desc d;
            fj_attention_desc_init(&d, 1, 4, 2, sq, 90, 128, FJ_F32);
            d.causal = FJ_CAUSAL_BOTTOM_RIGHT;
            d.head_dim_v = dvs[i];
            fjt_problem p;
            if (!fjt_problem_make(&p, &d, &rng)) fail_msg("out of memory");
            fjt_error e;
            if (fjt_run(ctx, &p, &e, true)) fail_msg("%s: %s", fjt_desc_str(&d), fj_last_error());
            if (e.nan_count || !(e.rel_fro <= 1e-5) || e.gaps_written || e.lse_mismatch ||
                !(e.lse_max_abs <= 1e-4))
                fail_msg("%s (after dv %d): rel %.3e nan %zu gaps %zu", fjt_desc_str(&d),
                         i ? dvs[i - 1] : -1, e.rel_fro, e.nan_count, e.gaps_written);
            fjt_problem_free(&p);
        }
    /* equal dims: the plain problem's key (no dv field) */
    fj_attention_desc a, b;
    fj_attention_desc_init(&a, 1, 4, 2, 3, 90, 96, FJ_BF16);
    b = a;
    b.head_dim_v = 96;
    char ka[FJ_PROBLEM_KEY_MAX], kb[FJ_PROBLEM_KEY_MAX];
    assert_int_equal(fj_problem_key(&a, ka, sizeof ka), FJ_OK);
    assert_int_equal(fj_problem_key(&b, kb, sizeof kb), FJ_OK);
    assert_string_equal(ka, kb);
    assert_null(strstr(ka, "dv"));
    b.head_dim_v = 64;
    assert_int_equal(fj_problem_key(&b, kb, sizeof kb), FJ_OK);
    assert_string_equal(kb, "b1.hq4.hkv2.sq3.sk90.d96.bf16.nomask.dv64");
    /* FLOPs: 2 x D per score for Q K^T, 2 x Dv for P V */
    assert_true(fj_attention_flops(&a) == 4.0 * 4 * 3 * 90 * 96);
    assert_true(fj_attention_flops(&b) == 2.0 * 4 * 3 * 90 * (96 + 64));
    fj_context_destroy(ctx);
}

/* Bad head_dim_v, and layouts whose rows break a rule at head_dim_v's width:
 * FJ_ERR_INVALID_ARGUMENT naming the field and the rule, no plan, and
 * fj_attention writes nothing. */
static void test_bad_input(void **state)
{
    (void)state;
    fj_context *ctx = make_ctx(1);
    static const int bad[] = {-1, -128, FJ_MAX_HEAD_DIM + 1, 1024, 2147483647, -2147483647 - 1};
    float q[64] = {0}, k[64] = {0}, v[64] = {0}, o[64], lse[4];
    for (int i = 0; i < NELEMS(bad); i++) {
        fj_attention_desc d;
        fj_attention_desc_init(&d, 1, 1, 1, 2, 2, 8, FJ_F32);
        d.head_dim_v = bad[i];
        char want[96];
        snprintf(want, sizeof want, "head_dim_v (%d) must be 0 (the same as head_dim) or in 1..%d",
                 bad[i], FJ_MAX_HEAD_DIM);
        expect_invalid(&d, want);
        fj_plan *plan = (fj_plan *)&d;
        assert_int_equal(fj_plan_create(ctx, &d, &plan), FJ_ERR_INVALID_ARGUMENT);
        assert_null(plan);
        assert_non_null(strstr(fj_last_error(), want));
        memset(o, 0xff, sizeof o);
        memset(lse, 0xff, sizeof lse);
        assert_int_equal(fj_attention(ctx, &d, q, k, v, o, lse, NULL), FJ_ERR_INVALID_ARGUMENT);
        assert_non_null(strstr(fj_last_error(), "head_dim_v"));
        for (size_t j = 0; j < sizeof o; j++) assert_int_equal(((unsigned char *)o)[j], 0xff);
        for (size_t j = 0; j < sizeof lse; j++) assert_int_equal(((unsigned char *)lse)[j], 0xff);
        char key[FJ_PROBLEM_KEY_MAX];
        assert_int_equal(fj_problem_key(&d, key, sizeof key), FJ_ERR_INVALID_ARGUMENT);
        assert_string_equal(key, "");
    }
    /* o's rows are head_dim_v long: a head stride of head_dim (64) under
       head_dim_v 128 makes two heads' rows overlap; of 128 it is right */
    fj_attention_desc d;
    fj_attention_desc_init(&d, 1, 2, 1, 4, 4, 64, FJ_F32);
    d.head_dim_v = 128;
    const int64_t narrow[3] = {4 * 2 * 64, 2 * 64, 64}, wide[3] = {4 * 2 * 128, 2 * 128, 128};
    memcpy(d.o_stride, narrow, sizeof narrow);
    expect_invalid(&d, "o_stride[");
    expect_invalid(&d, "so that output rows do not overlap");
    memcpy(d.o_stride, wide, sizeof wide);
    assert_int_equal(fj_attention_desc_validate(&d), FJ_OK);
    /* the other way round: V narrower, o rows of head_dim_v (32) may sit 32
       apart though head_dim is 64 */
    fj_attention_desc_init(&d, 1, 2, 1, 4, 4, 64, FJ_F32);
    d.head_dim_v = 32;
    const int64_t tight[3] = {4 * 2 * 32, 2 * 32, 32};
    memcpy(d.o_stride, tight, sizeof tight);
    memcpy(d.v_stride, (int64_t[3]){4 * 32, 32, 0}, sizeof tight);
    assert_int_equal(fj_attention_desc_validate(&d), FJ_OK);
    /* a dense v whose extent overflows is named by its shape, with
       head_dim_v's value */
    fj_attention_desc_init(&d, 2, 1 << 22, 1 << 22, 1, INT32_MAX, 8, FJ_BF16);
    d.head_dim_v = 512;
    d.k_stride[1] = 8; /* k broadcast: only v is dense */
    expect_invalid(&d,
                   "v: the dense tensor [batch 2, seq 2147483647, heads 4194304, head_dim_v 512]");
    /* reserved_i32, beside head_dim_v, must stay zero */
    fj_attention_desc_init(&d, 1, 1, 1, 2, 2, 8, FJ_F32);
    d.reserved_i32 = 9;
    expect_invalid(&d, "reserved_i32 (9) must be zero");
    fj_context_destroy(ctx);
}

int main(int argc, char **argv)
{
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--backend")) {
            if (!strcmp(argv[i + 1], "cpu-reference")) backend = FJ_BACKEND_CPU_REFERENCE;
            else if (!strcmp(argv[i + 1], "cpu")) backend = FJ_BACKEND_CPU;
            else {
                fprintf(stderr, "test_head_dim_v: --backend cpu-reference|cpu\n");
                return 2;
            }
        }
    fjt_seed();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pairs),
        cmocka_unit_test(test_random),
        cmocka_unit_test(test_plan_cache_and_plain),
        cmocka_unit_test(test_bad_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
