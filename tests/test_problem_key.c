/* The problem key (include/flashjit.h, "Problem keys"): random problems of
 * every kind print and parse back to the same fields and the same text;
 * every way a key can be malformed is refused naming the field, leaving the
 * desc untouched; the buffer rules; and the tuning file's point (the key's
 * bucketed form) reads back only in its canonical spelling. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "harness.h"
#include "tune/tuning.h"

static void expect_same_fields(const fj_attention_desc *a, const fj_attention_desc *b)
{
    assert_int_equal(a->batch, b->batch);
    assert_int_equal(a->heads_q, b->heads_q);
    assert_int_equal(a->heads_kv, b->heads_kv);
    assert_int_equal(a->seqlen_q, b->seqlen_q);
    assert_int_equal(a->seqlen_k, b->seqlen_k);
    assert_int_equal(a->head_dim, b->head_dim);
    assert_int_equal(a->dtype, b->dtype);
    assert_int_equal(a->causal, b->causal);
    assert_int_equal(a->window_left, b->window_left);
    assert_int_equal(a->window_right, b->window_right);
    assert_true(a->softcap == b->softcap);
    assert_int_equal(a->features, b->features);
    assert_int_equal(fjt_dim_v(a), fjt_dim_v(b));
}

static void test_random_problems_round_trip(void **state)
{
    (void)state;
    static const int seqlens[] = {1, 2, 15, 16, 17, 63, 64, 65, 127, 128, 129, 1000, 4096};
    static const int dims[] = {1, 7, 8, 31, 32, 64, 96, 128, 255, 256};
    static const fj_dtype dtypes[] = {FJ_F32, FJ_F16, FJ_BF16};
    /* V's head dims too: a key has dv<N> only where it differs */
    static const int dims_v[] = {1, 7, 32, 64, 128, 192, 512, 576};
    fjt_axes axes = {seqlens, 13, dims, 10, dtypes, 3, 1e9, dims_v, 8};
    fjt_rng rng;
    fjt_rng_init(&rng, fjt_seed());
    int windows = 0, causal = 0, vdims = 0;
    for (int i = 0; i < 2000; i++) {
        fj_attention_desc d, back;
        fjt_random_desc(&rng, &axes, &d);
        windows += d.window_left >= 0 || d.window_right >= 0;
        causal += d.causal != FJ_CAUSAL_NONE;
        char key[FJ_PROBLEM_KEY_MAX], again[FJ_PROBLEM_KEY_MAX];
        assert_int_equal(fj_problem_key(&d, key, sizeof key), FJ_OK);
        assert_null(strchr(key, ' '));
        /* ".dv<N>" ends the key exactly where V's head dim differs */
        const char *dv = strstr(key, ".dv");
        if (fjt_dim_v(&d) != d.head_dim) {
            char want[24];
            snprintf(want, sizeof want, ".dv%d", d.head_dim_v);
            if (!dv || strcmp(dv, want)) fail_msg("%s does not end in %s", key, want);
            vdims++;
        } else if (dv) {
            fail_msg("%s has a dv field, yet head_dim_v is %d (head_dim %d)", key, d.head_dim_v,
                     d.head_dim);
        }
        if (fj_problem_key_parse(key, &back) != FJ_OK)
            fail_msg("%s does not parse back: %s", key, fj_last_error());
        expect_same_fields(&d, &back);
        assert_int_equal(fj_problem_key(&back, again, sizeof again), FJ_OK);
        assert_string_equal(key, again);
        /* What the key leaves out is fj_attention_desc_init's. */
        assert_true(back.scale == 0.0f);
        for (int a = 0; a < 3; a++) assert_true(back.q_stride[a] == 0 && back.o_stride[a] == 0);
    }
    assert_true(windows > 100 && causal > 100); /* the menus cover the mask kinds */
    assert_true(vdims > 500);
}

static void test_spellings(void **state)
{
    (void)state;
    static const struct {
        int b, hq, hkv, sq, sk, d;
        fj_dtype t;
        fj_causal c;
        int wl, wr;
        const char *key;
    } cases[] = {
        {4, 16, 4, 4096, 4096, 128, FJ_BF16, FJ_CAUSAL_BOTTOM_RIGHT, -1, -1,
         "b4.hq16.hkv4.sq4096.sk4096.d128.bf16.causal_br"},
        {1, 8, 8, 1, 8192, 64, FJ_F16, FJ_CAUSAL_NONE, -1, -1,
         "b1.hq8.hkv8.sq1.sk8192.d64.f16.nomask"},
        {2, 2, 1, 10, 20, 32, FJ_F32, FJ_CAUSAL_TOP_LEFT, 0, 5,
         "b2.hq2.hkv1.sq10.sk20.d32.f32.causal_tl.wl0.wr5"},
        {1, 1, 1, 5, 5, 8, FJ_F32, FJ_CAUSAL_NONE, 256, -1, "b1.hq1.hkv1.sq5.sk5.d8.f32.wl256"},
        {1, 1, 1, 5, 5, 8, FJ_F32, FJ_CAUSAL_NONE, -1, 3, "b1.hq1.hkv1.sq5.sk5.d8.f32.wr3"},
        {2147483647 / 65536, 1, 1, 65536, 2147483647, FJ_MAX_HEAD_DIM, FJ_BF16,
         FJ_CAUSAL_BOTTOM_RIGHT, 2147483647, 2147483647,
         "b32767.hq1.hkv1.sq65536.sk2147483647.d576.bf16.causal_br.wl2147483647.wr2147483647"},
        {1, 4, 2, 1, 300, 257, FJ_F16, FJ_CAUSAL_NONE, -1, -1,
         "b1.hq4.hkv2.sq1.sk300.d257.f16.nomask"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fj_attention_desc d, back;
        fj_attention_desc_init(&d, cases[i].b, cases[i].hq, cases[i].hkv, cases[i].sq, cases[i].sk,
                               cases[i].d, cases[i].t);
        d.causal = cases[i].c;
        d.window_left = cases[i].wl;
        d.window_right = cases[i].wr;
        char key[FJ_PROBLEM_KEY_MAX];
        if (fj_problem_key(&d, key, sizeof key)) fail_msg("case %zu: %s", i, fj_last_error());
        assert_string_equal(key, cases[i].key);
        assert_int_equal(fj_problem_key_parse(cases[i].key, &back), FJ_OK);
        expect_same_fields(&d, &back);
    }
}

/* The softcap's field: one spelling per float, read back exactly, after the
 * mask; the longest key of any valid problem fits FJ_PROBLEM_KEY_MAX. */
static void test_softcap_field(void **state)
{
    (void)state;
    static const struct {
        float cap;
        const char *text;
    } caps[] = {
        {50.0f, "sc50"},       {2.5f, "sc2p5"},
        {0.05f, "sc0p05"},     {1000.0f, "sc1000"},
        {1e-3f, "sc0p001"},    {1e-5f, "sc1e-05"},
        {0.1f, "sc0p1"},       {1.00000012f, "sc1p0000001"},
        {7e8f, "sc700000000"}, {2e9f, "sc2e+09"},
        {1e-4f, "sc0p0001"},   {123456.789f, "sc123456p79"},
        {3e-38f, "sc3e-38"},   {1.17549435e-38f, "sc1p1754944e-38"},
    };
    for (size_t i = 0; i < sizeof caps / sizeof caps[0]; i++) {
        fj_attention_desc d, back;
        fj_attention_desc_init(&d, 1, 2, 1, 3, 4, 8, FJ_F16);
        d.scale = 1e-30f; /* so that the tiniest caps are valid */
        d.softcap = caps[i].cap;
        char key[FJ_PROBLEM_KEY_MAX], want[FJ_PROBLEM_KEY_MAX];
        if (fj_problem_key(&d, key, sizeof key))
            fail_msg("cap %g: %s", (double)caps[i].cap, fj_last_error());
        snprintf(want, sizeof want, "b1.hq2.hkv1.sq3.sk4.d8.f16.nomask.%s", caps[i].text);
        assert_string_equal(key, want);
        assert_int_equal(fj_problem_key_parse(key, &back), FJ_OK);
        assert_true(back.softcap == d.softcap);
    }
    /* after the mask fields, and every float reads back to itself */
    fjt_rng rng;
    fjt_rng_init(&rng, fjt_seed() ^ 0x5c);
    for (int i = 0; i < 3000; i++) {
        fj_attention_desc d, back;
        fj_attention_desc_init(&d, 1, 1, 1, 9, 9, 16, FJ_BF16);
        d.causal = (fj_causal)(i % 3);
        d.window_left = i % 5 == 0 ? 7 : -1;
        uint32_t bits = (uint32_t)fjt_next(&rng) & 0x7fffffffu;
        memcpy(&d.softcap, &bits, sizeof bits);
        if (fj_attention_desc_validate(&d)) continue; /* NaN, inf, out of range */
        char key[FJ_PROBLEM_KEY_MAX], again[FJ_PROBLEM_KEY_MAX];
        assert_int_equal(fj_problem_key(&d, key, sizeof key), FJ_OK);
        if (d.softcap > 0.0f) assert_non_null(strstr(key, ".sc"));
        if (fj_problem_key_parse(key, &back)) fail_msg("%s: %s", key, fj_last_error());
        expect_same_fields(&d, &back);
        assert_int_equal(fj_problem_key(&back, again, sizeof again), FJ_OK);
        assert_string_equal(key, again);
    }
    /* The longest: every number as long as the tensors' extents allow, both
       windows, a 9-digit cap in exponent form. */
    fj_attention_desc d;
    fj_attention_desc_init(&d, 1, 2147483647, 2147483647, 1073741823, 1073741823, 1, FJ_BF16);
    d.causal = FJ_CAUSAL_BOTTOM_RIGHT;
    d.window_left = d.window_right = 2147483647;
    d.scale = 1e-30f;
    d.softcap = 1.17549435e-38f;
    char key[FJ_PROBLEM_KEY_MAX];
    if (fj_problem_key(&d, key, sizeof key)) fail_msg("longest key: %s", fj_last_error());
    assert_true(strlen(key) < 128); /* 1.0's FJ_PROBLEM_KEY_MAX holds keys without features */
    d.features = FJ_FEATURE_ALIBI | FJ_FEATURE_SINKS | FJ_FEATURE_VARLEN;
    if (fj_problem_key(&d, key, sizeof key)) fail_msg("longest key: %s", fj_last_error());
    assert_true(strlen(key) < 160); /* FJ_PROBLEM_KEY_MAX before the paged KV cache */
    assert_non_null(strstr(key, ".alibi.sinks.varlen"));
    /* and the longest page size */
    d.features |= FJ_FEATURE_PAGED_KV;
    d.page_size = 2147483647;
    d.num_pages = d.max_pages = 1;
    if (fj_problem_key(&d, key, sizeof key)) fail_msg("longest key: %s", fj_last_error());
    assert_true(strlen(key) < FJ_PROBLEM_KEY_MAX);
    assert_non_null(strstr(key, ".alibi.sinks.varlen.paged2147483647"));
    /* and V's head dim: its field, at most ".dv576", fits after the
       longest of the rest (which no valid problem with it reaches: wider
       v and o rows make these extents overflow) */
    assert_true(strlen(key) + strlen(".dv576") < FJ_PROBLEM_KEY_MAX);
    d.head_dim_v = 512;
    assert_int_equal(fj_problem_key(&d, key, sizeof key), FJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(fj_last_error(), "head_dim_v 512"));
}

/* ALiBi and sinks: ".alibi" then ".sinks" after the mask and the softcap,
 * each once, in that order; the round trip keeps them. */
static void test_features_field(void **state)
{
    (void)state;
    static const struct {
        const char *key;
        uint32_t features;
        float softcap;
    } ok[] = {
        {"b1.hq8.hkv8.sq1.sk4096.d64.bf16.nomask.alibi", FJ_FEATURE_ALIBI, 0.0f},
        {"b1.hq8.hkv8.sq1.sk4096.d64.bf16.nomask.sinks", FJ_FEATURE_SINKS, 0.0f},
        {"b1.hq8.hkv8.sq1.sk4096.d64.bf16.nomask.alibi.sinks", FJ_FEATURE_ALIBI | FJ_FEATURE_SINKS,
         0.0f},
        {"b1.hq8.hkv8.sq1.sk4096.d64.bf16.nomask.sc50.sinks", FJ_FEATURE_SINKS, 50.0f},
        {"b2.hq64.hkv8.sq4096.sk4096.d64.bf16.causal_br.wl128.sc2p5.alibi.sinks",
         FJ_FEATURE_ALIBI | FJ_FEATURE_SINKS, 2.5f},
        {"b2.hq64.hkv8.sq4096.sk4096.d64.f16.causal_tl.alibi", FJ_FEATURE_ALIBI, 0.0f},
        {"b2.hq64.hkv8.sq4096.sk4096.d64.f32.wr3.sinks", FJ_FEATURE_SINKS, 0.0f},
        {"b8.hq32.hkv8.sq4096.sk4096.d128.bf16.causal_br.varlen", FJ_FEATURE_VARLEN, 0.0f},
        {"b3.hq8.hkv8.sq1.sk4096.d64.bf16.nomask.sc50.alibi.sinks.varlen",
         FJ_FEATURE_ALIBI | FJ_FEATURE_SINKS | FJ_FEATURE_VARLEN, 50.0f},
        {"b3.hq8.hkv8.sq1.sk4096.d64.bf16.nomask.sinks.varlen",
         FJ_FEATURE_SINKS | FJ_FEATURE_VARLEN, 0.0f},
        {"b16.hq32.hkv8.sq1.sk8192.d128.bf16.causal_br.paged16", FJ_FEATURE_PAGED_KV, 0.0f},
        {"b3.hq8.hkv8.sq1.sk4095.d64.bf16.nomask.sc50.alibi.sinks.varlen.paged1",
         FJ_FEATURE_ALIBI | FJ_FEATURE_SINKS | FJ_FEATURE_VARLEN | FJ_FEATURE_PAGED_KV, 50.0f},
        {"b4.hq8.hkv2.sq7.sk100.d64.f16.causal_tl.wl3.varlen.paged7",
         FJ_FEATURE_VARLEN | FJ_FEATURE_PAGED_KV, 0.0f},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        fj_attention_desc d;
        if (fj_problem_key_parse(ok[i].key, &d)) fail_msg("%s: %s", ok[i].key, fj_last_error());
        assert_int_equal(d.features, ok[i].features);
        assert_true(d.softcap == ok[i].softcap);
        char key[FJ_PROBLEM_KEY_MAX];
        assert_int_equal(fj_problem_key(&d, key, sizeof key), FJ_OK);
        assert_string_equal(key, ok[i].key);
    }
    static const struct {
        const char *key, *message;
    } bad[] = {
        {"b1.hq8.hkv8.sq1.sk4.d64.bf16.nomask.sinks.alibi", "nothing may follow sinks"},
        {"b1.hq8.hkv8.sq1.sk4.d64.bf16.nomask.alibi.alibi", "nothing may follow alibi"},
        {"b1.hq8.hkv8.sq1.sk4.d64.bf16.nomask.alibi.sc50", "nothing may follow alibi"},
        {"b1.hq8.hkv8.sq1.sk4.d64.bf16.causal_br.alibi.wl3", "nothing may follow alibi"},
        {"b1.hq8.hkv8.sq1.sk4.d64.bf16.causal_br.sinks.", "ends with '.'"},
        {"b1.hq8.hkv8.sq1.sk4.d64.bf16.alibi", "field 8 ('alibi')"},
        {"b1.hq8.hkv8.sq1.sk4.d64.bf16.nomask.ALIBI", "nothing may follow 'nomask' but"},
        {"b1.hq8.hkv8.sq1.sk4.d64.bf16.nomask.sink", "nothing may follow 'nomask' but"},
        {"b1.hq8.hkv8.sq1.sk4.d64.bf16.nomask.varlen.alibi", "nothing may follow varlen"},
        {"b1.hq8.hkv8.sq1.sk4.d64.bf16.nomask.varlen.varlen", "nothing may follow varlen"},
        {"b1.hq8.hkv8.sq1.sk4.d64.bf16.varlen", "field 8 ('varlen')"},
        {"b1.hq8.hkv8.sq1.sk4.d64.bf16.nomask.paged16.sinks", "nothing may follow paged"},
        {"b1.hq8.hkv8.sq1.sk4.d64.bf16.nomask.paged", "nothing may follow 'nomask' but"},
        {"b1.hq8.hkv8.sq1.sk4.d64.bf16.nomask.paged-1", "nothing may follow 'nomask' but"},
        {"b1.hq8.hkv8.sq1.sk4.d64.bf16.paged16", "field 8 ('paged16')"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        fj_attention_desc d;
        fj_attention_desc_init(&d, 3, 3, 3, 3, 3, 3, FJ_F16);
        fj_attention_desc before = d;
        if (fj_problem_key_parse(bad[i].key, &d) != FJ_ERR_INVALID_ARGUMENT)
            fail_msg("'%s' parsed", bad[i].key);
        if (!strstr(fj_last_error(), bad[i].message))
            fail_msg("'%s': message '%s' lacks '%s'", bad[i].key, fj_last_error(), bad[i].message);
        assert_memory_equal(&d, &before, sizeof d);
    }
    /* the tuning point leaves the features out: plain and featured problems share tiles */
    fj_attention_desc d;
    fj_attention_desc_init(&d, 2, 8, 8, 3000, 5000, 128, FJ_BF16);
    fj_problem p;
    fj_tuning_entry plain, featured;
    assert_int_equal(fj_problem_init(&p, &d), FJ_OK);
    fj_tuning_key_for(&p, "NVIDIA H200", "sm_90", "flash_fwd", &plain);
    d.features = FJ_FEATURE_ALIBI | FJ_FEATURE_SINKS | FJ_FEATURE_VARLEN | FJ_FEATURE_PAGED_KV;
    d.page_size = 16;
    d.num_pages = d.max_pages = 313;
    assert_int_equal(fj_problem_init(&p, &d), FJ_OK);
    assert_true(p.alibi && p.sinks && p.varlen && p.paged);
    fj_tuning_key_for(&p, "NVIDIA H200", "sm_90", "flash_fwd", &featured);
    assert_string_equal(plain.point, featured.point);
}

/* V's head dim: ".dv<N>" last, only where it differs from head_dim (so one
 * problem has one key), after every other field; the round trip keeps it;
 * the tuning point leaves it out (V's rows share tiles with Q's). */
static void test_head_dim_v_field(void **state)
{
    (void)state;
    static const struct {
        const char *key;
        int head_dim, head_dim_v;
        uint32_t features;
    } ok[] = {
        {"b1.hq128.hkv1.sq1.sk4096.d576.bf16.causal_br.dv512", 576, 512, 0},
        {"b2.hq16.hkv16.sq4096.sk4096.d192.bf16.causal_br.dv128", 192, 128, 0},
        {"b2.hq16.hkv16.sq4096.sk4096.d128.f16.nomask.dv192", 128, 192, 0},
        {"b1.hq1.hkv1.sq1.sk1.d1.f32.nomask.dv576", 1, 576, 0},
        {"b1.hq1.hkv1.sq1.sk1.d576.f32.wl3.wr0.dv1", 576, 1, 0},
        {"b1.hq8.hkv8.sq1.sk4096.d64.bf16.nomask.sc50.alibi.sinks.dv32", 64, 32,
         FJ_FEATURE_ALIBI | FJ_FEATURE_SINKS},
        {"b3.hq8.hkv8.sq1.sk4095.d64.bf16.nomask.sc50.alibi.sinks.varlen.paged1.dv33", 64, 33,
         FJ_FEATURE_ALIBI | FJ_FEATURE_SINKS | FJ_FEATURE_VARLEN | FJ_FEATURE_PAGED_KV},
        {"b16.hq32.hkv8.sq1.sk8192.d576.bf16.causal_br.paged16.dv512", 576, 512,
         FJ_FEATURE_PAGED_KV},
        {"b4.hq8.hkv2.sq7.sk100.d64.f16.causal_tl.wl3.varlen.dv128", 64, 128, FJ_FEATURE_VARLEN},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        fj_attention_desc d;
        if (fj_problem_key_parse(ok[i].key, &d)) fail_msg("%s: %s", ok[i].key, fj_last_error());
        assert_int_equal(d.head_dim, ok[i].head_dim);
        assert_int_equal(d.head_dim_v, ok[i].head_dim_v);
        assert_int_equal(d.features, ok[i].features);
        char key[FJ_PROBLEM_KEY_MAX];
        assert_int_equal(fj_problem_key(&d, key, sizeof key), FJ_OK);
        assert_string_equal(key, ok[i].key);
    }
    static const struct {
        const char *key, *message;
    } bad[] = {
        {"b1.hq8.hkv8.sq1.sk4.d64.bf16.nomask.dv64", "field 9 ('dv64') is not dv<head_dim_v> "
                                                     "with head_dim_v in 1..576 and not 64"},
        {"b1.hq8.hkv8.sq1.sk4.d64.bf16.nomask.dv0", "field 9 ('dv0') is not dv<head_dim_v>"},
        {"b1.hq8.hkv8.sq1.sk4.d64.bf16.nomask.dv577", "field 9 ('dv577')"},
        {"b1.hq8.hkv8.sq1.sk4.d64.bf16.nomask.dv032", "nothing may follow 'nomask' but"},
        {"b1.hq8.hkv8.sq1.sk4.d64.bf16.nomask.dv", "nothing may follow 'nomask' but"},
        {"b1.hq8.hkv8.sq1.sk4.d64.bf16.nomask.dv-8", "nothing may follow 'nomask' but"},
        {"b1.hq8.hkv8.sq1.sk4.d64.bf16.nomask.dv32.dv32", "nothing may follow dv"},
        {"b1.hq8.hkv8.sq1.sk4.d64.bf16.nomask.dv32.alibi", "nothing may follow dv"},
        {"b1.hq8.hkv8.sq1.sk4.d64.bf16.nomask.dv32.paged16", "nothing may follow dv"},
        {"b1.hq8.hkv8.sq1.sk4.d64.bf16.causal_br.dv32.wl3", "nothing may follow dv"},
        {"b1.hq8.hkv8.sq1.sk4.d64.bf16.nomask.dv32.", "ends with '.'"},
        {"b1.hq8.hkv8.sq1.sk4.d64.bf16.dv32", "field 8 ('dv32')"},
        {"b1.hq8.hkv8.sq1.sk4.d64.dv32.bf16.nomask", "field 7 ('dv32') is not a dtype"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        fj_attention_desc d;
        fj_attention_desc_init(&d, 3, 3, 3, 3, 3, 3, FJ_F16);
        fj_attention_desc before = d;
        if (fj_problem_key_parse(bad[i].key, &d) != FJ_ERR_INVALID_ARGUMENT)
            fail_msg("'%s' parsed", bad[i].key);
        if (!strstr(fj_last_error(), bad[i].message))
            fail_msg("'%s': message '%s' lacks '%s'", bad[i].key, fj_last_error(), bad[i].message);
        assert_memory_equal(&d, &before, sizeof d);
    }
    /* the tuning point leaves V's head dim out: such problems share tiles */
    fj_attention_desc d;
    fj_attention_desc_init(&d, 2, 8, 8, 3000, 5000, 192, FJ_BF16);
    fj_problem p;
    fj_tuning_entry plain, vdim;
    assert_int_equal(fj_problem_init(&p, &d), FJ_OK);
    assert_int_equal(p.head_dim_v, 192);
    fj_tuning_key_for(&p, "cpu", "x86_64", "cpu_tiled", &plain);
    d.head_dim_v = 128;
    assert_int_equal(fj_problem_init(&p, &d), FJ_OK);
    assert_int_equal(p.head_dim_v, 128);
    fj_tuning_key_for(&p, "cpu", "x86_64", "cpu_tiled", &vdim);
    assert_string_equal(plain.point, vdim.point);
}

static void test_malformed_keys_are_refused(void **state)
{
    (void)state;
    static const struct {
        const char *key, *message;
    } cases[] = {
        {"", "ends before field 1"},
        {"b1", "ends before field 2"},
        {"b1.hq8.hkv8.sq1.sk4.d64.bf16", "ends before field 8"},
        {"b1.hq8.hkv8.sq1.sk4.d64.bf16.", "ends before field 8"},
        {"b01.hq8.hkv8.sq1.sk4.d64.bf16.nomask", "field 1 ('b01')"},
        {"b+1.hq8.hkv8.sq1.sk4.d64.bf16.nomask", "field 1 ('b+1')"},
        {"b 1.hq8.hkv8.sq1.sk4.d64.bf16.nomask", "field 1"},
        {"B1.hq8.hkv8.sq1.sk4.d64.bf16.nomask", "field 1 ('B1')"},
        {"b1.h8.hkv8.sq1.sk4.d64.bf16.nomask", "field 2 ('h8') is not hq<heads_q>"},
        {"b1.hkv8.hq8.sq1.sk4.d64.bf16.nomask", "field 2 ('hkv8')"},
        {"b1.hq8.hkv8.sq1.sk4.d64.fp16.nomask", "field 7 ('fp16') is not a dtype"},
        {"b1.hq8.hkv8.sq1.sk4.d64.bf16.causal", "field 8 ('causal')"},
        {"b1.hq8.hkv8.sq1.sk4.d64.bf16.nomask.wl4", "nothing may follow 'nomask'"},
        {"b1.hq8.hkv8.sq1.sk4.d64.bf16.wl4.causal_br", "field 9 ('causal_br')"},
        {"b1.hq8.hkv8.sq1.sk4.d64.bf16.wr4.wl4", "field 9 ('wl4')"},
        {"b1.hq8.hkv8.sq1.sk4.d64.bf16.causal_br.causal_tl", "field 9 ('causal_tl')"},
        {"b1.hq8.hkv8.sq1.sk4.d64.bf16.causal_br.", "ends with '.'"},
        {"b1.hq8.hkv8.sq1.sk4.d64.bf16.wl-1", "field 8 ('wl-1')"},
        {"b1.hq8.hkv8.sq1.sk4.d64.bf16.nomask ", "field 8"},
        {"b1.hq8.hkv8.sq1.sk4.d64.bf16.nomask.", "nothing may follow 'nomask'"},
        {"b2147483648.hq8.hkv8.sq1.sk4.d64.bf16.nomask", "field 1"},
        /* the softcap: its one spelling, last, once */
        {"b1.hq8.hkv8.sq1.sk4.d64.bf16.sc50", "field 8 ('sc50')"},
        {"b1.hq8.hkv8.sq1.sk4.d64.bf16.nomask.sc50.sc50", "nothing may follow the softcap but"},
        {"b1.hq8.hkv8.sq1.sk4.d64.bf16.nomask.sc50.", "ends with '.'"},
        {"b1.hq8.hkv8.sq1.sk4.d64.bf16.causal_br.sc50.wl3", "nothing may follow the softcap"},
        {"b1.hq8.hkv8.sq1.sk4.d64.bf16.causal_br.sc50.", "ends with '.'"},
        {"b1.hq8.hkv8.sq1.sk4.d64.bf16.causal_br.sc050", "field 9 ('sc050')"},
        {"b1.hq8.hkv8.sq1.sk4.d64.bf16.causal_br.sc50p0", "field 9 ('sc50p0')"},
        {"b1.hq8.hkv8.sq1.sk4.d64.bf16.causal_br.sc5e+01", "field 9 ('sc5e+01')"},
        {"b1.hq8.hkv8.sq1.sk4.d64.bf16.causal_br.sc2.5", "nothing may follow the softcap"},
        {"b1.hq8.hkv8.sq1.sk4.d64.bf16.causal_br.sc0", "field 9 ('sc0')"},
        {"b1.hq8.hkv8.sq1.sk4.d64.bf16.causal_br.sc-1", "field 9 ('sc-1')"},
        {"b1.hq8.hkv8.sq1.sk4.d64.bf16.causal_br.scinf", "field 9 ('scinf')"},
        {"b1.hq8.hkv8.sq1.sk4.d64.bf16.causal_br.scnan", "field 9 ('scnan')"},
        {"b1.hq8.hkv8.sq1.sk4.d64.bf16.causal_br.sc", "field 9 ('sc')"},
        {"b1.hq8.hkv8.sq1.sk4.d64.bf16.causal_br.sc0x1p3", "field 9 ('sc0x1p3')"},
        {"b1.hq8.hkv8.sq1.sk4.d64.bf16.causal_br.sc3e+38", "softcap (3e+38) must be in ["},
        /* Well formed, but the desc's rules refuse it. */
        {"b0.hq8.hkv8.sq1.sk4.d64.bf16.nomask", "batch (0) must be >= 1"},
        {"b1.hq8.hkv3.sq1.sk4.d64.bf16.nomask", "heads_q (8) is not a multiple of heads_kv (3)"},
        {"b1.hq8.hkv8.sq1.sk4.d577.bf16.nomask", "head_dim (577) must be <= 576"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fj_attention_desc d;
        fj_attention_desc_init(&d, 3, 3, 3, 3, 3, 3, FJ_F16);
        fj_attention_desc before = d;
        if (fj_problem_key_parse(cases[i].key, &d) != FJ_ERR_INVALID_ARGUMENT)
            fail_msg("'%s' parsed", cases[i].key);
        if (!strstr(fj_last_error(), cases[i].message))
            fail_msg("'%s': message '%s' lacks '%s'", cases[i].key, fj_last_error(),
                     cases[i].message);
        assert_memory_equal(&d, &before, sizeof d); /* untouched */
    }
    assert_int_equal(fj_problem_key_parse(NULL, NULL), FJ_ERR_INVALID_ARGUMENT);
    char longer[300];
    memset(longer, 'x', sizeof longer - 1);
    longer[sizeof longer - 1] = '\0';
    fj_attention_desc d;
    assert_int_equal(fj_problem_key_parse(longer, &d), FJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(fj_last_error(), "FJ_PROBLEM_KEY_MAX"));
}

static void test_buffer_and_invalid_desc(void **state)
{
    (void)state;
    fj_attention_desc d;
    fj_attention_desc_init(&d, 4, 16, 4, 4096, 4096, 128, FJ_BF16);
    char small[10] = "junk";
    assert_int_equal(fj_problem_key(&d, small, sizeof small), FJ_ERR_INVALID_ARGUMENT);
    assert_string_equal(small, "");
    assert_non_null(strstr(fj_last_error(), "FJ_PROBLEM_KEY_MAX"));
    char key[FJ_PROBLEM_KEY_MAX];
    d.heads_kv = 5;
    assert_int_equal(fj_problem_key(&d, key, sizeof key), FJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(fj_last_error(), "heads_q (16) is not a multiple of heads_kv (5)"));
    assert_int_equal(fj_problem_key(NULL, key, sizeof key), FJ_ERR_INVALID_ARGUMENT);
    assert_int_equal(fj_problem_key(&d, NULL, 0), FJ_ERR_INVALID_ARGUMENT);
}

/* The tuning file's point: d<head_dim>.<dtype>.<mask kind>.sk<bucket> or .decode. */
static void test_points(void **state)
{
    (void)state;
    fj_attention_desc d;
    fj_attention_desc_init(&d, 2, 8, 8, 3000, 5000, 128, FJ_BF16);
    d.causal = FJ_CAUSAL_TOP_LEFT;
    d.window_left = 100;
    fj_problem p;
    assert_int_equal(fj_problem_init(&p, &d), FJ_OK);
    fj_tuning_entry key, back;
    fj_tuning_key_for(&p, "NVIDIA H200", "sm_90", "flash_fwd", &key);
    assert_string_equal(key.point, "d128.bf16.causal_window.sk4096");
    assert_string_equal(key.device, "NVIDIA_H200");
    memset(&back, 0, sizeof back);
    assert_null(fj_tuning_point_parse(key.point, &back));
    assert_int_equal(back.head_dim, 128);
    assert_int_equal(back.bucket, 4096);
    assert_string_equal(back.mask, "causal_window");
    d.seqlen_q = 16;
    assert_int_equal(fj_problem_init(&p, &d), FJ_OK);
    fj_tuning_key_for(&p, "x", "sm_90", "flash_fwd", &key);
    assert_string_equal(key.point, "d128.bf16.causal_window.decode");

    static const char *const bad[] = {
        "d128.bf16.causal.sk4000",  "d128.bf16.causal.sk1",    "d0128.bf16.causal.sk4096",
        "d128.bf8.causal.sk4096",   "d128.bf16.masked.sk4096", "d128.bf16.causal.sk65536",
        "d999.bf16.causal.sk4096",  "d128.bf16.causal",        "d128.bf16.causal.sk4096.x",
        "d128.bf16.causal.decodex", "128.bf16.causal.sk4096",  "d128.bf16.causal.sk+4096",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (!fj_tuning_point_parse(bad[i], &back)) fail_msg("point '%s' parsed", bad[i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_problems_round_trip),
        cmocka_unit_test(test_spellings),
        cmocka_unit_test(test_softcap_field),
        cmocka_unit_test(test_features_field),
        cmocka_unit_test(test_head_dim_v_field),
        cmocka_unit_test(test_malformed_keys_are_refused),
        cmocka_unit_test(test_buffer_and_invalid_desc),
        cmocka_unit_test(test_points),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
