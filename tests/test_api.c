/* The public API's contract: every bad input is FJ_ERR_INVALID_ARGUMENT with
 * a message naming the field and the rule, never a crash and never a write to
 * the output; allocation failures surface as FJ_ERR_OUT_OF_MEMORY and leak
 * nothing; contexts and plans are safe to share between threads. */
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "harness.h"
#include "strbuf.h"

/* ---- allocation failure injection ----------------------------------------
 * The test links the static library with -Wl,--wrap for the allocators, so
 * every allocation flashjit makes passes through here. */
void *__real_malloc(size_t n);
void *__real_calloc(size_t a, size_t b);
void *__real_realloc(void *p, size_t n);
void *__real_aligned_alloc(size_t al, size_t n);
static long alloc_countdown = -1; /* < 0: never fail; 0: fail this one */
static long alloc_failures;

static int should_fail(void)
{
    if (alloc_countdown < 0) return 0;
    if (alloc_countdown-- == 0) {
        alloc_failures++;
        return 1;
    }
    return 0;
}
void *__wrap_malloc(size_t n) { return should_fail() ? NULL : __real_malloc(n); }
void *__wrap_calloc(size_t a, size_t b) { return should_fail() ? NULL : __real_calloc(a, b); }
void *__wrap_realloc(void *p, size_t n) { return should_fail() ? NULL : __real_realloc(p, n); }
void *__wrap_aligned_alloc(size_t al, size_t n)
{
    return should_fail() ? NULL : __real_aligned_alloc(al, n);
}

static fj_context *cpu_ctx(fj_backend b)
{
    fj_context_options o;
    fj_context_options_init(&o);
    o.backend = b;
    o.cache_dir = "";
    fj_context *ctx = NULL;
    assert_int_equal(fj_context_create(&o, &ctx), FJ_OK);
    return ctx;
}

static void expect_invalid(const fj_attention_desc *d, const char *needle)
{
    assert_int_equal(fj_attention_desc_validate(d), FJ_ERR_INVALID_ARGUMENT);
    if (!strstr(fj_last_error(), needle))
        fail_msg("message '%s' does not name '%s'", fj_last_error(), needle);
}

static void test_version_and_names(void **state)
{
    (void)state;
    assert_int_equal(fj_version(), FLASHJIT_VERSION_MAJOR * 10000 + FLASHJIT_VERSION_MINOR * 100 +
                                       FLASHJIT_VERSION_PATCH);
    assert_string_equal(fj_status_name(FJ_OK), "FJ_OK");
    assert_string_equal(fj_status_name(FJ_ERR_INVALID_ARGUMENT), "FJ_ERR_INVALID_ARGUMENT");
    assert_string_equal(fj_status_name(FJ_ERR_INTERNAL), "FJ_ERR_INTERNAL");
    assert_string_equal(fj_status_name((fj_status)999), "FJ_STATUS_UNKNOWN");
    assert_string_equal(fj_status_name((fj_status)-1), "FJ_STATUS_UNKNOWN");
    assert_string_equal(fj_dtype_name(FJ_BF16), "bf16");
    assert_null(fj_dtype_name((fj_dtype)7));
    assert_string_equal(fj_backend_name(FJ_BACKEND_CPU_REFERENCE), "cpu-reference");
    assert_string_equal(fj_causal_name(FJ_CAUSAL_TOP_LEFT), "top-left");
}

static void test_desc_rules(void **state)
{
    (void)state;
    fj_attention_desc d;
    assert_int_equal(fj_attention_desc_validate(NULL), FJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(fj_last_error(), "desc"));

    const char *fields[] = {"batch", "heads_q", "heads_kv", "seqlen_q", "seqlen_k", "head_dim"};
    for (int f = 0; f < 6; f++)
        for (int bad = -1; bad <= 0; bad++) {
            fj_attention_desc_init(&d, 2, 4, 2, 16, 16, 64, FJ_F32);
            int *v[] = {&d.batch, &d.heads_q, &d.heads_kv, &d.seqlen_q, &d.seqlen_k, &d.head_dim};
            *v[f] = bad;
            expect_invalid(&d, fields[f]);
        }
    fj_attention_desc_init(&d, 1, 12, 5, 8, 8, 64, FJ_F32);
    expect_invalid(&d, "heads_q (12) is not a multiple of heads_kv (5)");
    fj_attention_desc_init(&d, 1, 1, 1, 8, 8, FJ_MAX_HEAD_DIM + 1, FJ_F32);
    expect_invalid(&d, "head_dim (577) must be <= 576");
    fj_attention_desc_init(&d, 1, 1, 1, 8, 8, 64, (fj_dtype)3);
    expect_invalid(&d, "dtype");
    fj_attention_desc_init(&d, 1, 1, 1, 8, 8, 64, FJ_F32);
    d.causal = (fj_causal)3;
    expect_invalid(&d, "causal");
    fj_attention_desc_init(&d, 1, 1, 1, 8, 8, 64, FJ_F32);
    d.window_left = -2;
    expect_invalid(&d, "window_left (-2)");
    fj_attention_desc_init(&d, 1, 1, 1, 8, 8, 64, FJ_F32);
    d.window_right = -7;
    expect_invalid(&d, "window_right (-7)");
    fj_attention_desc_init(&d, 1, 1, 1, 8, 8, 64, FJ_F32);
    d.scale = NAN;
    expect_invalid(&d, "scale");
    d.scale = INFINITY;
    expect_invalid(&d, "scale");
    d.scale = -INFINITY;
    expect_invalid(&d, "scale");

    /* softcap: 0 off, > 0 finite on; anything else named with its rule */
    fj_attention_desc_init(&d, 1, 1, 1, 8, 8, 64, FJ_F32);
    assert_true(d.softcap == 0.0f);
    const float bad_caps[] = {-1.0f, -0.0001f, -INFINITY, INFINITY, NAN};
    for (size_t i = 0; i < sizeof bad_caps / sizeof bad_caps[0]; i++) {
        d.softcap = bad_caps[i];
        expect_invalid(&d, "softcap (");
        expect_invalid(&d, "must be 0 (off) or finite and > 0");
    }
    d.softcap = 30.0f;
    assert_int_equal(fj_attention_desc_validate(&d), FJ_OK);
    d.softcap = 1e-3f;
    assert_int_equal(fj_attention_desc_validate(&d), FJ_OK);
    d.softcap = -0.0f; /* negative zero is zero: off */
    assert_int_equal(fj_attention_desc_validate(&d), FJ_OK);
    /* softcap x 2 log2(e) and scale x 2 log2(e) / softcap must be finite floats */
    d.softcap = FLT_MAX;
    expect_invalid(&d, "softcap (");
    expect_invalid(&d, "must be in [");
    d.softcap = 1e-39f; /* scale / softcap beyond FLT_MAX */
    d.scale = 1.0f;
    expect_invalid(&d, "must be in [");
    d.scale = 1e-30f;
    assert_int_equal(fj_attention_desc_validate(&d), FJ_OK);

    fj_attention_desc_init(&d, 1, 2, 2, 8, 8, 64, FJ_F32);
    d.k_stride[1] = -128;
    d.k_stride[2] = 64;
    expect_invalid(&d, "k_stride[1]");
    /* output rows overlapping: seq stride smaller than a row */
    fj_attention_desc_init(&d, 1, 1, 1, 8, 8, 64, FJ_F32);
    d.o_stride[0] = 512;
    d.o_stride[1] = 32;
    d.o_stride[2] = 64;
    expect_invalid(&d, "o_stride[1]");
    /* heads landing on each other */
    fj_attention_desc_init(&d, 1, 4, 4, 8, 8, 64, FJ_F32);
    d.o_stride[0] = 4096;
    d.o_stride[1] = 256;
    d.o_stride[2] = 0;
    expect_invalid(&d, "o_stride[2]");
    /* inputs may broadcast (stride 0), outputs may not */
    fj_attention_desc_init(&d, 2, 1, 1, 8, 8, 64, FJ_F32);
    d.k_stride[0] = 0;
    d.k_stride[1] = 64;
    d.k_stride[2] = 64;
    assert_int_equal(fj_attention_desc_validate(&d), FJ_OK);
    assert_string_equal(fj_last_error(), "");
    /* sizes whose products overflow */
    fj_attention_desc_init(&d, 1 << 30, 1 << 16, 1 << 16, 1 << 30, 8, 256, FJ_F32);
    expect_invalid(&d, "overflows");
    fj_attention_desc_init(&d, 1, 1, 1, 1 << 20, 8, 64, FJ_F32);
    d.q_stride[0] = 0;
    d.q_stride[1] = INT64_MAX / 2;
    d.q_stride[2] = 64;
    expect_invalid(&d, "q_stride");
    /* Dense tensors whose default batch stride (seqlen x heads x head_dim)
       does not fit int64: the message names the tensor's shape and the rule,
       not a stride the caller never set (issue 23, finding 8). */
    fj_attention_desc_init(&d, 2, 1 << 25, 1 << 25, INT32_MAX, 8, 256, FJ_BF16);
    expect_invalid(&d,
                   "q: the dense tensor [batch 2, seq 2147483647, heads 33554432, head_dim 256]");
    expect_invalid(&d, "must fit int64");
    if (strstr(fj_last_error(), "stride")) fail_msg("names a stride: %s", fj_last_error());
    fj_attention_desc_init(&d, 3, 1 << 24, 1 << 24, 8, INT32_MAX, 256, FJ_F16);
    expect_invalid(&d, "k: the dense tensor [batch 3, seq 2147483647, heads 16777216");
    /* the same shapes with batch 1: the batch stride is never used, the
       extent alone does not fit */
    fj_attention_desc_init(&d, 1, 1 << 24, 1 << 24, INT32_MAX, 8, 256, FJ_F32);
    expect_invalid(&d, "q: the dense tensor [batch 1, seq 2147483647");
    /* a dense shape at the edge still fits: 2^62 bytes of q, broadcast k/v */
    fj_attention_desc_init(&d, 1, 1 << 21, 1, 1 << 30, 1, 256, FJ_F16);
    assert_int_equal(fj_attention_desc_validate(&d), FJ_OK);

    /* scale x log2(e) must be a finite float: every backend scores in base 2 */
    fj_attention_desc_init(&d, 1, 1, 1, 8, 8, 64, FJ_F32);
    d.scale = 2.3e38f;
    assert_int_equal(fj_attention_desc_validate(&d), FJ_OK);
    d.scale = -2.3e38f;
    assert_int_equal(fj_attention_desc_validate(&d), FJ_OK);
    d.scale = 2.4e38f;
    expect_invalid(&d, "scale (2.4e+38) must be at most 2.35866e+38 in magnitude");
    d.scale = -FLT_MAX;
    expect_invalid(&d, "scale");
    /* flops convention */
    fj_attention_desc_init(&d, 2, 4, 4, 100, 100, 64, FJ_F32);
    assert_true(fj_attention_flops(&d) == 4.0 * 2 * 4 * 100 * 100 * 64);
    d.causal = FJ_CAUSAL_BOTTOM_RIGHT;
    assert_true(fj_attention_flops(&d) == 2.0 * 2 * 4 * 100 * 100 * 64);
}

/* A bad desc given to plan or one-shot calls writes nothing. */
static void test_bad_input_writes_nothing(void **state)
{
    (void)state;
    fj_context *ctx = cpu_ctx(FJ_BACKEND_CPU);
    float q[64], o[64];
    for (int i = 0; i < 64; i++) q[i] = 1.0f;
    memset(o, 0xab, sizeof o);
    unsigned char before[sizeof o];
    memcpy(before, o, sizeof o);
    fj_attention_desc d;
    fj_attention_desc_init(&d, 1, 3, 2, 2, 2, 16, FJ_F32);
    assert_int_equal(fj_attention(ctx, &d, q, q, q, o, NULL, NULL), FJ_ERR_INVALID_ARGUMENT);
    assert_memory_equal(o, before, sizeof o);
    fj_plan *plan = (fj_plan *)&d;
    assert_int_equal(fj_plan_create(ctx, &d, &plan), FJ_ERR_INVALID_ARGUMENT);
    assert_null(plan);

    fj_attention_desc_init(&d, 1, 1, 1, 2, 2, 16, FJ_F32);
    assert_int_equal(fj_plan_create(ctx, &d, &plan), FJ_OK);
    assert_string_equal(fj_last_error(), "");
    assert_non_null(strstr(fj_plan_describe(plan), "backend: cpu"));
    assert_int_equal(fj_plan_execute(plan, NULL, q, q, o, NULL, NULL), FJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(fj_last_error(), "q is NULL"));
    assert_int_equal(fj_plan_execute(plan, q, NULL, q, o, NULL, NULL), FJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(fj_last_error(), "k is NULL"));
    assert_int_equal(fj_plan_execute(plan, q, q, NULL, o, NULL, NULL), FJ_ERR_INVALID_ARGUMENT);
    assert_int_equal(fj_plan_execute(plan, q, q, q, NULL, NULL, NULL), FJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(fj_last_error(), "o is NULL"));
    assert_int_equal(fj_plan_execute(NULL, q, q, q, o, NULL, NULL), FJ_ERR_INVALID_ARGUMENT);
    assert_memory_equal(o, before, sizeof o);
    assert_int_equal(fj_attention(ctx, &d, q, q, q, NULL, NULL, NULL), FJ_ERR_INVALID_ARGUMENT);
    assert_int_equal(fj_attention(NULL, &d, q, q, q, o, NULL, NULL), FJ_ERR_INVALID_ARGUMENT);
    assert_int_equal(fj_attention(ctx, NULL, q, q, q, o, NULL, NULL), FJ_ERR_INVALID_ARGUMENT);
    assert_memory_equal(o, before, sizeof o);
    assert_int_equal(fj_plan_execute(plan, q, q, q, o, NULL, NULL), FJ_OK);
    for (int i = 0; i < 32; i++) assert_true(o[i] == 1.0f); /* softmax of equal scores * ones */
    fj_plan_destroy(plan);
    fj_plan_destroy(NULL);
    assert_int_equal(fj_plan_create(NULL, &d, &plan), FJ_ERR_INVALID_ARGUMENT);
    assert_int_equal(fj_plan_create(ctx, &d, NULL), FJ_ERR_INVALID_ARGUMENT);
    fj_context_destroy(ctx);
}

/* ALiBi and sinks (fj_execute_extras): every way the arrays can be wrong is
 * FJ_ERR_INVALID_ARGUMENT naming them, with nothing written. */
static void test_extras_bad_input(void **state)
{
    (void)state;
    fj_context *ctx = cpu_ctx(FJ_BACKEND_CPU);
    float q[64], o[64], vals[4] = {0.5f, 0.25f, 0.125f, 0.0625f};
    for (int i = 0; i < 64; i++) q[i] = 1.0f;
    memset(o, 0xab, sizeof o);
    unsigned char before[sizeof o];
    memcpy(before, o, sizeof o);
    fj_attention_desc d;
    fj_attention_desc_init(&d, 1, 2, 1, 2, 2, 16, FJ_F32);
    d.features = FJ_FEATURE_ALIBI | FJ_FEATURE_SINKS;
    fj_plan *plan;
    assert_int_equal(fj_plan_create(ctx, &d, &plan), FJ_OK);
    fj_execute_extras x;
    memset(&x, 0x5a, sizeof x);
    fj_execute_extras_init(&x);
    assert_null(x.alibi_slopes);
    assert_null(x.sinks);
    assert_null(x.cu_seqlens_q);
    assert_null(x.cu_seqlens_k);
    assert_null(x.seqused_k);
    assert_int_equal(x.total_q, 0);
    assert_int_equal(x.total_k, 0);
    assert_null(x.block_table);
    assert_int_equal(x.reserved[0], 0);
    struct {
        const float *alibi, *sinks;
        int64_t reserved;
        const char *message;
    } bad[] = {
        {NULL, vals, 0, "alibi_slopes is NULL: the desc's features have FJ_FEATURE_ALIBI"},
        {vals, NULL, 0, "sinks is NULL: the desc's features have FJ_FEATURE_SINKS"},
        {NULL, NULL, 0, "alibi_slopes is NULL"},
        {(const float *)((const char *)vals + 2), vals, 0, "alibi_slopes"},
        {vals, vals, 7, "fj_execute_extras.reserved[0] (7) must be zero"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        fj_execute_extras_init(&x);
        x.alibi_slopes = bad[i].alibi;
        x.sinks = bad[i].sinks;
        x.reserved[0] = bad[i].reserved;
        assert_int_equal(fj_plan_execute_ex(plan, q, q, q, o, NULL, &x, NULL),
                         FJ_ERR_INVALID_ARGUMENT);
        if (!strstr(fj_last_error(), bad[i].message))
            fail_msg("case %zu: '%s' lacks '%s'", i, fj_last_error(), bad[i].message);
        assert_int_equal(fj_attention_ex(ctx, &d, q, q, q, o, NULL, &x, NULL),
                         FJ_ERR_INVALID_ARGUMENT);
        assert_non_null(strstr(fj_last_error(), bad[i].message));
    }
    /* the plain entry points have no arrays to give */
    assert_int_equal(fj_plan_execute(plan, q, q, q, o, NULL, NULL), FJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(fj_last_error(), "alibi_slopes is NULL"));
    assert_int_equal(fj_attention(ctx, &d, q, q, q, o, NULL, NULL), FJ_ERR_INVALID_ARGUMENT);
    assert_memory_equal(o, before, sizeof o);
    fj_execute_extras_init(&x);
    x.alibi_slopes = vals;
    x.sinks = vals;
    assert_int_equal(fj_plan_execute_ex(plan, q, q, q, o, NULL, &x, NULL), FJ_OK);
    fj_plan_destroy(plan);

    /* an array for a feature the desc lacks would be ignored: refused */
    d.features = FJ_FEATURE_ALIBI;
    assert_int_equal(fj_plan_create(ctx, &d, &plan), FJ_OK);
    memcpy(o, before, sizeof o);
    assert_int_equal(fj_plan_execute_ex(plan, q, q, q, o, NULL, &x, NULL), FJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(fj_last_error(), "sinks is given but the desc's features lack "
                                            "FJ_FEATURE_SINKS"));
    assert_memory_equal(o, before, sizeof o);
    fj_plan_destroy(plan);
    assert_int_equal(fj_plan_execute_ex(NULL, q, q, q, o, NULL, &x, NULL), FJ_ERR_INVALID_ARGUMENT);
    fj_context_destroy(ctx);
}

/* Runs d (f32, dense, data from the harness) on ctx with the extras given
 * (NULL: none) into o and lse. */
static void run_extras(fj_context *ctx, const fjt_problem *p, const fj_attention_desc *d,
                       const float *alibi, const float *sinks, float *o, float *lse)
{
    fj_execute_extras x;
    fj_execute_extras_init(&x);
    x.alibi_slopes = alibi;
    x.sinks = sinks;
    fj_status s = fj_attention_ex(ctx, d, p->q, p->k, p->v, o, lse, &x, NULL);
    if (s) fail_msg("%s: %s", fjt_desc_str(d), fj_last_error());
}

/* The special values, on both CPU backends (the tiled and the decode path):
 * sinks of -inf and slopes of 0 are exactly the plain problem; a row that
 * sees no key is O = 0, lse = its sink; a NaN sink makes its head's rows
 * NaN (those that see no key: O = 0, lse NaN). */
static void test_extras_special_values(void **state)
{
    (void)state;
    static const fj_backend backends[] = {FJ_BACKEND_CPU_REFERENCE, FJ_BACKEND_CPU};
    static const int sqs[] = {1, 3, 40}; /* decode (one and several rows), tiled */
    fjt_rng rng;
    fjt_rng_init(&rng, fjt_seed());
    for (int bi = 0; bi < 2; bi++)
        for (int si = 0; si < 3; si++) {
            fj_context *ctx = cpu_ctx(backends[bi]);
            const int hq = 4, sq = sqs[si], sk = si == 1 ? 2 : 300, dim = 24;
            fj_attention_desc d;
            fj_attention_desc_init(&d, 1, hq, 2, sq, sk, dim, FJ_F32);
            d.causal = FJ_CAUSAL_BOTTOM_RIGHT; /* sq 3, sk 2: row 0 sees no key */
            fjt_problem p;
            assert_true(fjt_problem_make_inputs(&p, &d, &rng));
            const size_t n = (size_t)sq * hq * dim, nl = (size_t)hq * sq;
            float *o0 = malloc(n * 4), *o1 = malloc(n * 4), *l0 = malloc(nl * 4),
                  *l1 = malloc(nl * 4);
            assert_true(o0 && o1 && l0 && l1);
            const float minus_inf[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
            const float zeros[4] = {0, 0, 0, 0};
            run_extras(ctx, &p, &d, NULL, NULL, o0, l0);
            fj_attention_desc f = d;
            f.features = FJ_FEATURE_ALIBI | FJ_FEATURE_SINKS;
            run_extras(ctx, &p, &f, zeros, minus_inf, o1, l1);
            assert_memory_equal(o0, o1, n * 4);
            assert_memory_equal(l0, l1, nl * 4);

            const float sinks[4] = {0.5f, -3.0f, NAN, 2.0f};
            f.features = FJ_FEATURE_SINKS;
            run_extras(ctx, &p, &f, NULL, sinks, o1, l1);
            for (int h = 0; h < hq; h++)
                for (int i = 0; i < sq; i++) {
                    const bool empty = i + sk - sq < 0;
                    const float lse = l1[h * sq + i];
                    const float *row = o1 + ((size_t)i * hq + h) * dim;
                    if (empty) { /* O = 0, lse = the sink (NaN for the NaN sink) */
                        for (int c = 0; c < dim; c++) assert_true(row[c] == 0.0f);
                        if (h == 2) assert_true(isnan(lse));
                        else assert_true(lse == sinks[h]);
                    } else if (h == 2) {
                        assert_true(isnan(lse));
                        for (int c = 0; c < dim; c++) assert_true(isnan(row[c]));
                    } else { /* the sink only adds to the denominator */
                        const float plain = l0[h * sq + i];
                        const double want = log(exp(plain) + exp(sinks[h]));
                        assert_true(fabs(lse - want) < 1e-5);
                        const double shrink = exp(plain - want);
                        const float *prow = o0 + ((size_t)i * hq + h) * dim;
                        for (int c = 0; c < dim; c++)
                            assert_true(fabs(row[c] - prow[c] * shrink) < 1e-5);
                    }
                }
            free(o0), free(o1), free(l0), free(l1);
            fjt_problem_free(&p);
            fj_context_destroy(ctx);
        }
}

static void test_context_options(void **state)
{
    (void)state;
    fj_context_options o;
    fj_context *ctx = (fj_context *)&o;
    fj_context_options_init(&o);
    o.backend = (fj_backend)17;
    assert_int_equal(fj_context_create(&o, &ctx), FJ_ERR_INVALID_ARGUMENT);
    assert_null(ctx);
    assert_non_null(strstr(fj_last_error(), "backend (17)"));
    fj_context_options_init(&o);
    o.device = -1;
    assert_int_equal(fj_context_create(&o, &ctx), FJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(fj_last_error(), "device (-1)"));
    fj_context_options_init(&o);
    o.cpu_threads = -3;
    assert_int_equal(fj_context_create(&o, &ctx), FJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(fj_last_error(), "cpu_threads (-3)"));
    assert_int_equal(fj_context_create(NULL, NULL), FJ_ERR_INVALID_ARGUMENT);

    /* the environment steers AUTO, and only AUTO */
    setenv("FLASHJIT_BACKEND", "reference", 1);
    assert_int_equal(fj_context_create(NULL, &ctx), FJ_OK);
    assert_int_equal(fj_context_backend(ctx), FJ_BACKEND_CPU_REFERENCE);
    assert_non_null(strstr(fj_context_describe(ctx), "FLASHJIT_BACKEND=reference"));
    fj_context_destroy(ctx);
    fj_context_options_init(&o);
    o.backend = FJ_BACKEND_CPU;
    assert_int_equal(fj_context_create(&o, &ctx), FJ_OK);
    assert_int_equal(fj_context_backend(ctx), FJ_BACKEND_CPU);
    fj_context_destroy(ctx);
    setenv("FLASHJIT_BACKEND", "quantum", 1);
    assert_int_equal(fj_context_create(NULL, &ctx), FJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(fj_last_error(), "FLASHJIT_BACKEND (\"quantum\")"));
    setenv("FLASHJIT_BACKEND", "cpu", 1);
    fj_context_options_init(&o);
    o.cache_dir = "";
    o.tuning_file = "";
    o.cpu_threads = 3;
    assert_int_equal(fj_context_create(&o, &ctx), FJ_OK);
    const char *desc = fj_context_describe(ctx);
    assert_non_null(strstr(desc, "cache: off"));
    assert_non_null(strstr(desc, "cpu: 3 threads"));
    fj_context_destroy(ctx);
    setenv("FLASHJIT_BACKEND", "auto", 1);
    /* FLASHJIT_LOG is checked like FLASHJIT_BACKEND, whatever the backend */
    setenv("FLASHJIT_LOG", "verbose", 1);
    fj_context_options_init(&o);
    o.backend = FJ_BACKEND_CPU;
    assert_int_equal(fj_context_create(&o, &ctx), FJ_ERR_INVALID_ARGUMENT);
    assert_null(ctx);
    assert_non_null(
        strstr(fj_last_error(), "FLASHJIT_LOG (\"verbose\") is not one of off, info, debug"));
    setenv("FLASHJIT_LOG", "off", 1);
    assert_int_equal(fj_context_create(&o, &ctx), FJ_OK);
    fj_context_destroy(ctx);
    unsetenv("FLASHJIT_LOG");
    fj_context_destroy(NULL);
    assert_int_equal(fj_context_backend(NULL), FJ_BACKEND_AUTO);
    assert_string_equal(fj_context_describe(NULL), "");
}

/* The reserved room of the three structs the caller allocates: init zeroes
 * it (whatever was there), the library rejects any nonzero slot naming it
 * (plan creation goes through the desc's check). */
static void test_reserved_room(void **state)
{
    (void)state;
    enum { SLOTS = 8, DESC_SLOTS = 4 };
    /* fj_attention_desc's first slot holds softcap and features, the next
       two the paged KV cache's four ints, the fourth head_dim_v and
       reserved_i32 (1.0's layout: 8 slots after o_stride, the size
       unchanged). */
    assert_int_equal(sizeof((fj_attention_desc *)0)->reserved, DESC_SLOTS * sizeof(int64_t));
    assert_int_equal(offsetof(fj_attention_desc, softcap),
                     offsetof(fj_attention_desc, o_stride) + 3 * sizeof(int64_t));
    assert_int_equal(offsetof(fj_attention_desc, features),
                     offsetof(fj_attention_desc, softcap) + sizeof(float));
    assert_int_equal(offsetof(fj_attention_desc, page_size),
                     offsetof(fj_attention_desc, softcap) + sizeof(int64_t));
    assert_int_equal(offsetof(fj_attention_desc, num_pages),
                     offsetof(fj_attention_desc, page_size) + sizeof(int));
    assert_int_equal(offsetof(fj_attention_desc, max_pages),
                     offsetof(fj_attention_desc, softcap) + 2 * sizeof(int64_t));
    assert_int_equal(offsetof(fj_attention_desc, block_table_stride),
                     offsetof(fj_attention_desc, max_pages) + sizeof(int));
    assert_int_equal(offsetof(fj_attention_desc, head_dim_v),
                     offsetof(fj_attention_desc, softcap) + 3 * sizeof(int64_t));
    assert_int_equal(offsetof(fj_attention_desc, reserved_i32),
                     offsetof(fj_attention_desc, head_dim_v) + sizeof(int));
    assert_int_equal(offsetof(fj_attention_desc, reserved),
                     offsetof(fj_attention_desc, softcap) + 4 * sizeof(int64_t));
    assert_int_equal(sizeof(fj_attention_desc),
                     offsetof(fj_attention_desc, softcap) + SLOTS * sizeof(int64_t));
    assert_int_equal(sizeof((fj_context_options *)0)->reserved, SLOTS * sizeof(int64_t));
    assert_int_equal(sizeof((fj_plan_options *)0)->reserved, SLOTS * sizeof(int));
    {
        fj_attention_desc d;
        memset(&d, 0xa5, sizeof d);
        fj_attention_desc_init(&d, 1, 2, 1, 5, 7, 16, FJ_F32);
        assert_true(d.softcap == 0.0f);
        assert_int_equal(d.features, 0);
        d.features = 1u << 4;
        expect_invalid(&d, "features (0x10) has unknown bits");
        d.features = 0x80000000u | FJ_FEATURE_ALIBI;
        expect_invalid(&d, "features (0x80000001) has unknown bits");
        d.features = FJ_FEATURE_ALIBI | FJ_FEATURE_SINKS | FJ_FEATURE_VARLEN;
        assert_int_equal(fj_attention_desc_validate(&d), FJ_OK);
        assert_int_equal(d.page_size | d.num_pages | d.max_pages | d.block_table_stride, 0);
        d.features |= FJ_FEATURE_PAGED_KV;
        d.page_size = d.num_pages = d.max_pages = 1;
        assert_int_equal(fj_attention_desc_validate(&d), FJ_OK);
        /* head_dim_v: init leaves it 0 (head_dim's), reserved_i32 zero */
        assert_int_equal(d.head_dim_v, 0);
        assert_int_equal(d.reserved_i32, 0);
        d.reserved_i32 = -3;
        expect_invalid(&d, "reserved_i32 (-3) must be zero");
        assert_non_null(strstr(fj_last_error(), "fj_attention_desc_init"));
    }
    /* fj_execute_extras (1.1.0: two pointers and six int64 slots): the
       varlen fields took four slots, the block table one, its size
       unchanged (LP64) */
    if (sizeof(void *) == sizeof(int64_t)) {
        assert_int_equal(sizeof(fj_execute_extras), 8 * sizeof(int64_t));
        assert_int_equal(offsetof(fj_execute_extras, cu_seqlens_q), 2 * sizeof(int64_t));
        assert_int_equal(offsetof(fj_execute_extras, seqused_k), 4 * sizeof(int64_t));
        assert_int_equal(offsetof(fj_execute_extras, total_q), 5 * sizeof(int64_t));
        assert_int_equal(offsetof(fj_execute_extras, total_k), 5 * sizeof(int64_t) + 4);
        assert_int_equal(offsetof(fj_execute_extras, block_table), 6 * sizeof(int64_t));
        assert_int_equal(offsetof(fj_execute_extras, reserved), 7 * sizeof(int64_t));
    }
    for (int i = 0; i < SLOTS; i++) {
        fj_attention_desc d;
        memset(&d, 0xa5, sizeof d);
        fj_attention_desc_init(&d, 1, 2, 1, 5, 7, 16, FJ_F32);
        for (int j = 0; j < DESC_SLOTS; j++) assert_int_equal(d.reserved[j], 0);
        assert_int_equal(fj_attention_desc_validate(&d), FJ_OK);
        char want[64];
        fj_context *ctx = cpu_ctx(FJ_BACKEND_CPU);
        fj_plan *plan = (fj_plan *)&d;
        if (i < DESC_SLOTS) {
            d.reserved[i] = i % 2 ? -1 : INT64_C(1) << 40;
            snprintf(want, sizeof want, "reserved[%d] (%lld) must be zero", i,
                     (long long)d.reserved[i]);
            expect_invalid(&d, want);
            assert_non_null(strstr(fj_last_error(), "fj_attention_desc_init"));
            assert_int_equal(fj_plan_create(ctx, &d, &plan), FJ_ERR_INVALID_ARGUMENT);
            assert_null(plan);
            assert_non_null(strstr(fj_last_error(), want));
        }

        fj_plan_options po;
        memset(&po, 0x77, sizeof po);
        fj_plan_options_init(&po);
        for (int j = 0; j < SLOTS; j++) assert_int_equal(po.reserved[j], 0);
        fj_attention_desc_init(&d, 1, 2, 1, 5, 7, 16, FJ_F32);
        po.reserved[i] = 5 + i;
        plan = (fj_plan *)&d;
        assert_int_equal(fj_plan_create_ex(ctx, &d, &po, &plan), FJ_ERR_INVALID_ARGUMENT);
        assert_null(plan);
        snprintf(want, sizeof want, "fj_plan_options.reserved[%d] (%d) must be zero", i, 5 + i);
        if (!strstr(fj_last_error(), want) || !strstr(fj_last_error(), "fj_plan_options_init"))
            fail_msg("message '%s' does not name '%s' and the init function", fj_last_error(),
                     want);
        po.reserved[i] = 0;
        assert_int_equal(fj_plan_create_ex(ctx, &d, &po, &plan), FJ_OK);
        fj_plan_destroy(plan);
        fj_context_destroy(ctx);

        fj_context_options o;
        memset(&o, 0x5a, sizeof o);
        fj_context_options_init(&o);
        for (int j = 0; j < SLOTS; j++) assert_int_equal(o.reserved[j], 0);
        o.cache_dir = "";
        o.backend = FJ_BACKEND_CPU;
        o.reserved[i] = 3 + i;
        ctx = (fj_context *)&o;
        assert_int_equal(fj_context_create(&o, &ctx), FJ_ERR_INVALID_ARGUMENT);
        assert_null(ctx);
        snprintf(want, sizeof want, "reserved[%d] (%d) must be zero", i, 3 + i);
        if (!strstr(fj_last_error(), want) || !strstr(fj_last_error(), "fj_context_options_init"))
            fail_msg("message '%s' does not name '%s' and the init function", fj_last_error(),
                     want);
    }
}

static void test_memory_functions(void **state)
{
    (void)state;
    fj_context *ctx = cpu_ctx(FJ_BACKEND_CPU);
    void *p = NULL;
    assert_int_equal(fj_malloc(ctx, 1000, &p), FJ_OK);
    assert_true(((uintptr_t)p & 63) == 0);
    char src[1000], dst[1000];
    for (int i = 0; i < 1000; i++) src[i] = (char)i;
    assert_int_equal(fj_copy_to_device(ctx, p, src, 1000), FJ_OK);
    assert_int_equal(fj_copy_to_host(ctx, dst, p, 1000), FJ_OK);
    assert_memory_equal(src, dst, 1000);
    fj_free(ctx, p);
    assert_int_equal(fj_copy_to_device(ctx, NULL, src, 10), FJ_ERR_INVALID_ARGUMENT);
    assert_int_equal(fj_copy_to_host(ctx, dst, NULL, 10), FJ_ERR_INVALID_ARGUMENT);
    assert_int_equal(fj_copy_to_host(NULL, dst, p, 10), FJ_ERR_INVALID_ARGUMENT);
    assert_int_equal(fj_malloc(ctx, 10, NULL), FJ_ERR_INVALID_ARGUMENT);
    assert_int_equal(fj_malloc(NULL, 10, &p), FJ_ERR_INVALID_ARGUMENT);
    assert_null(p);
    assert_int_equal(fj_malloc(ctx, SIZE_MAX - 8, &p), FJ_ERR_OUT_OF_MEMORY);
    assert_int_equal(fj_synchronize(ctx, NULL), FJ_OK);
    assert_int_equal(fj_synchronize(NULL, NULL), FJ_ERR_INVALID_ARGUMENT);
    fj_free(ctx, NULL);
    fj_context_destroy(ctx);
}

/* Allocation number n fails, for every n: each call returns FJ_OK or
 * FJ_ERR_OUT_OF_MEMORY and (under ASan) leaks nothing. */
static void test_allocation_failures(void **state)
{
    (void)state;
    fjt_rng rng;
    fjt_rng_init(&rng, 5);
    fj_attention_desc d;
    fj_attention_desc_init(&d, 1, 2, 1, 33, 40, 16, FJ_BF16);
    d.causal = FJ_CAUSAL_BOTTOM_RIGHT;
    fjt_problem p;
    assert_true(fjt_problem_make(&p, &d, &rng));
    int succeeded = 0;
    for (long n = 0; n < 400 && succeeded < 3; n++) {
        for (int b = 0; b < 2; b++) {
            fj_context_options o;
            fj_context_options_init(&o);
            o.backend = b ? FJ_BACKEND_CPU : FJ_BACKEND_CPU_REFERENCE;
            o.cache_dir = "";
            o.cpu_threads = 2;
            fj_context *ctx = NULL;
            alloc_failures = 0;
            alloc_countdown = n;
            fj_status s = fj_context_create(&o, &ctx);
            fjt_error e;
            if (s == FJ_OK) s = fjt_run(ctx, &p, &e, true);
            alloc_countdown = -1;
            if (s == FJ_OK) {
                assert_true(e.rel_fro <= fjt_tolerance(d.dtype));
                if (alloc_failures == 0) succeeded++;
            } else {
                if (s != FJ_ERR_OUT_OF_MEMORY)
                    fail_msg("allocation %ld failing gave %s: %s", n, fj_status_name(s),
                             fj_last_error());
                assert_true(alloc_failures > 0);
            }
            fj_context_destroy(ctx);
        }
    }
    assert_true(succeeded >= 1); /* the loop got past every allocation */
    fjt_problem_free(&p);
}

/* Tuning import, export and FJ_PLAN_MEASURE with each allocation failing in
 * turn (a stride past the first hundred, to keep the measurements few):
 * FJ_ERR_OUT_OF_MEMORY or success, never a crash or a leak, and a failed
 * import adds nothing. */
static void test_tuning_allocation_failures(void **state)
{
    (void)state;
    fj_strbuf text;
    fj_strbuf_init(&text);
    fj_strbuf_puts(&text, "flashjit-tuning 2\n");
    for (int d = 1; d <= 100; d++) /* past one chunk of entries */
        fj_strbuf_printf(&text,
                         "elsewhere cpu cpu_tiled d%d.f32.nomask.sk512 q64k128 1 2026-12-04\n", d);
    fj_attention_desc d;
    fj_attention_desc_init(&d, 1, 1, 1, 20, 20, 8, FJ_F32);
    int succeeded = 0;
    long last = 0;
    for (long n = 0; n < 20000 && succeeded < 2; n += n < 100 ? 1 : 97) {
        fj_context *ctx = cpu_ctx(FJ_BACKEND_CPU);
        char *before = NULL, *after = NULL;
        assert_int_equal(fj_tuning_export(ctx, &before), FJ_OK);
        alloc_failures = 0;
        alloc_countdown = n;
        fj_status s = fj_tuning_import(ctx, text.data);
        fj_status x = s ? s : fj_tuning_export(ctx, &after);
        fj_plan_options o;
        fj_plan_options_init(&o);
        o.flags = FJ_PLAN_MEASURE;
        fj_plan *plan = NULL;
        fj_status m = x ? x : fj_plan_create_ex(ctx, &d, &o, &plan);
        alloc_countdown = -1;
        if (s) {
            if (s != FJ_ERR_OUT_OF_MEMORY) fail_msg("import at %ld: %s", n, fj_status_name(s));
            char *now = NULL;
            assert_int_equal(fj_tuning_export(ctx, &now), FJ_OK);
            assert_string_equal(now, before); /* nothing imported */
            free(now);
        } else if (x || m) {
            if ((x ? x : m) != FJ_ERR_OUT_OF_MEMORY)
                fail_msg("allocation %ld failing gave %s: %s", n, fj_status_name(x ? x : m),
                         fj_last_error());
        } else {
            assert_non_null(strstr(after, "d100.f32.nomask.sk512"));
            succeeded += alloc_failures == 0;
        }
        last = n;
        assert_true(s || x || m || plan);
        free(before);
        free(after);
        fj_plan_destroy(plan);
        fj_context_destroy(ctx);
    }
    printf("# allocations 0..99 and every 97th up to %ld failed in turn\n", last);
    assert_true(succeeded >= 1);
    fj_strbuf_free(&text);
}

/* More distinct one-shot problems than the plan cache holds: eviction works. */
static void test_plan_cache_eviction(void **state)
{
    (void)state;
    fj_context *ctx = cpu_ctx(FJ_BACKEND_CPU);
    float q[8 * 80], o[8 * 80];
    for (int i = 0; i < 8 * 80; i++) q[i] = (float)(i % 7) * 0.1f;
    for (int sk = 1; sk <= 80; sk++) {
        fj_attention_desc d;
        fj_attention_desc_init(&d, 1, 1, 1, 8, sk, 8, FJ_F32);
        assert_int_equal(fj_attention(ctx, &d, q, q, q, o, NULL, NULL), FJ_OK);
    }
    fj_context_destroy(ctx);
}

typedef struct thread_job {
    fj_context *ctx;
    const fjt_problem *p;
    int failures;
} thread_job;

static void *thread_main(void *arg)
{
    thread_job *j = arg;
    for (int r = 0; r < 8; r++) {
        fjt_error e;
        if (fjt_run(j->ctx, &j->p[r % 3], &e, true) != FJ_OK ||
            e.rel_fro > fjt_tolerance(j->p[r % 3].d.dtype) || e.nan_count || e.lse_mismatch)
            j->failures++;
    }
    return NULL;
}

/* Threads sharing one context run one-shot calls on different problems at
 * once; each gets its own right answer. */
static void test_threads_share_context(void **state)
{
    (void)state;
    fjt_rng rng;
    fjt_rng_init(&rng, fjt_seed());
    fjt_problem p[3];
    fj_attention_desc d;
    fj_attention_desc_init(&d, 2, 4, 2, 70, 50, 32, FJ_F32);
    assert_true(fjt_problem_make(&p[0], &d, &rng));
    d.causal = FJ_CAUSAL_TOP_LEFT;
    d.dtype = FJ_BF16;
    assert_true(fjt_problem_make(&p[1], &d, &rng));
    fj_attention_desc_init(&d, 1, 8, 1, 1, 300, 64, FJ_F16);
    assert_true(fjt_problem_make(&p[2], &d, &rng));
    for (int b = 0; b < 2; b++) {
        fj_context *ctx = cpu_ctx(b ? FJ_BACKEND_CPU : FJ_BACKEND_CPU_REFERENCE);
        pthread_t t[4];
        thread_job jobs[4];
        for (int i = 0; i < 4; i++) {
            jobs[i] = (thread_job){ctx, p, 0};
            assert_int_equal(pthread_create(&t[i], NULL, thread_main, &jobs[i]), 0);
        }
        for (int i = 0; i < 4; i++) {
            pthread_join(t[i], NULL);
            assert_int_equal(jobs[i].failures, 0);
        }
        fj_context_destroy(ctx);
    }
    for (int i = 0; i < 3; i++) fjt_problem_free(&p[i]);
}

static void log_counter(fj_log_level level, const char *msg, void *user)
{
    (void)level;
    (void)msg;
    ++*(int *)user;
}

static void test_log_callback(void **state)
{
    (void)state;
    int lines = 0;
    fj_set_log_callback(log_counter, FJ_LOG_DEBUG, &lines);
    fj_context *ctx = cpu_ctx(FJ_BACKEND_CPU);
    fj_context_destroy(ctx);
    fj_set_log_callback(NULL, FJ_LOG_OFF, NULL);
    assert_true(lines > 0);
    int before = lines;
    ctx = cpu_ctx(FJ_BACKEND_CPU);
    fj_context_destroy(ctx);
    assert_int_equal(lines, before);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_version_and_names),
        cmocka_unit_test(test_desc_rules),
        cmocka_unit_test(test_bad_input_writes_nothing),
        cmocka_unit_test(test_extras_bad_input),
        cmocka_unit_test(test_extras_special_values),
        cmocka_unit_test(test_context_options),
        cmocka_unit_test(test_reserved_room),
        cmocka_unit_test(test_memory_functions),
        cmocka_unit_test(test_allocation_failures),
        cmocka_unit_test(test_tuning_allocation_failures),
        cmocka_unit_test(test_plan_cache_eviction),
        cmocka_unit_test(test_threads_share_context),
        cmocka_unit_test(test_log_callback),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
