/* The CPU reference against the double-precision oracle on random problems
 * (seed printed), over the foundation's grid of sizes, masks, layouts and
 * dtypes. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <cmocka.h>

#include "harness.h"

static fj_context *ctx;

static int setup(void **state)
{
    (void)state;
    fj_context_options o;
    fj_context_options_init(&o);
    o.backend = FJ_BACKEND_CPU_REFERENCE;
    o.cache_dir = "";
    return fj_context_create(&o, &ctx) == FJ_OK ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    fj_context_destroy(ctx);
    return 0;
}

/* Runs d on the reference and checks it against the oracle; returns 1 on
 * failure (printed), 0 on success. */
static int check(const fj_attention_desc *d, fjt_rng *rng)
{
    fjt_problem p;
    if (!fjt_problem_make(&p, d, rng)) {
        printf("out of memory making %s\n", fjt_desc_str(d));
        return 1;
    }
    fjt_error e;
    fj_status s = fjt_run(ctx, &p, &e, true);
    int bad = 0;
    if (s != FJ_OK) {
        printf("FAIL %s: %s: %s\n", fjt_desc_str(d), fj_status_name(s), fj_last_error());
        bad = 1;
    } else {
        double tol = fjt_tolerance(d->dtype);
        double lse_tol = d->dtype == FJ_F32 ? 1e-4 : 1e-3;
        if (e.rel_fro > tol || e.nan_count || e.lse_mismatch || e.gaps_written ||
            e.lse_max_abs > lse_tol) {
            printf("FAIL %s: rel %.3e (tol %.1e) nan %zu lse_mismatch %zu lse_err %.2e gaps %zu\n",
                   fjt_desc_str(d), e.rel_fro, tol, e.nan_count, e.lse_mismatch, e.lse_max_abs,
                   e.gaps_written);
            bad = 1;
        }
    }
    fjt_problem_free(&p);
    return bad;
}

static const int seqlens[] = {1, 2, 3, 17, 63, 64, 65, 127, 128, 129, 239, 1023};
static const int head_dims[] = {8, 40, 64, 80, 96, 128, 200, 256};
static const fj_dtype dtypes[] = {FJ_F32, FJ_F16, FJ_BF16};

/* Random problems from the whole grid. */
static void test_random_grid(void **state)
{
    (void)state;
    fjt_rng rng;
    fjt_rng_init(&rng, fjt_seed());
    fjt_axes ax = {seqlens, 12, head_dims, 8, dtypes, 3, 3e7};
    int failures = 0;
    for (int i = 0; i < 150; i++) {
        fj_attention_desc d;
        fjt_random_desc(&rng, &ax, &d);
        failures += check(&d, &rng);
    }
    assert_int_equal(failures, 0);
}

/* Every seqlen against every other (Sq != Sk both ways), every head dim and
 * dtype at least once, deterministic shapes with random data. */
static void test_every_axis_value(void **state)
{
    (void)state;
    fjt_rng rng;
    fjt_rng_init(&rng, fjt_seed() + 1);
    int failures = 0;
    for (int a = 0; a < 12; a++)
        for (int b = 0; b < 12; b++) {
            fj_attention_desc d;
            fj_attention_desc_init(&d, 1, 2, 1, seqlens[a], seqlens[b], head_dims[(a + b) % 8],
                                   dtypes[(a * 12 + b) % 3]);
            d.causal = (fj_causal)((a + 2 * b) % 3);
            if (seqlens[a] * (double)seqlens[b] * d.head_dim > 4e7) d.head_dim = 8;
            failures += check(&d, &rng);
        }
    assert_int_equal(failures, 0);
}

/* Rows that see no key: top-left causal with Sq > Sk has none empty, but a
 * bottom-right causal with Sq > Sk leaves the first Sq - Sk rows empty, and a
 * window entirely to the right of the diagonal empties more. */
static void test_rows_without_keys(void **state)
{
    (void)state;
    fjt_rng rng;
    fjt_rng_init(&rng, fjt_seed() + 2);
    int failures = 0;
    fj_attention_desc d;
    fj_attention_desc_init(&d, 1, 2, 2, 65, 17, 64, FJ_F32);
    d.causal = FJ_CAUSAL_BOTTOM_RIGHT;
    failures += check(&d, &rng);
    d.dtype = FJ_BF16;
    failures += check(&d, &rng);
    fj_attention_desc_init(&d, 1, 1, 1, 40, 40, 40, FJ_F16);
    d.window_left = 0;
    d.window_right = 0; /* each row sees exactly its diagonal key */
    failures += check(&d, &rng);
    d.causal = FJ_CAUSAL_TOP_LEFT;
    d.window_left = 3;
    failures += check(&d, &rng);
    assert_int_equal(failures, 0);
}

/* Long rows: the block height shrinks so the score workspace stays bounded. */
static void test_long_keys(void **state)
{
    (void)state;
    fjt_rng rng;
    fjt_rng_init(&rng, fjt_seed() + 3);
    fj_attention_desc d;
    fj_attention_desc_init(&d, 1, 1, 1, 3, 70000, 8, FJ_F32);
    assert_int_equal(check(&d, &rng), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_grid),
        cmocka_unit_test(test_every_axis_value),
        cmocka_unit_test(test_rows_without_keys),
        cmocka_unit_test(test_long_keys),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
