/* The CPU backends' building blocks: the vectorizable exp's stated accuracy,
 * the f16/bf16 conversions (exhaustive where the input space is 2^16), the
 * row kernels, and the worker pool. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "cpu/convert.h"
#include "pool.h"
#include "cpu/vmath.h"
#include "harness.h"

/* vmath.h promises relative error <= 3e-7 on [-87.3, 88.7]. Checked on a
 * dense sweep through the vectorized entry point (fj_vexp) and the inline. */
static void test_expf_accuracy(void **state)
{
    (void)state;
    enum { N = 1 << 20 };
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
    assert_non_null(x);
    assert_non_null(y);
    double worst = 0, worst_x = 0;
    for (int pass = 0; pass < 4; pass++) {
        for (int i = 0; i < N; i++) {
            double t = (pass * (double)N + i) / (4.0 * N);
            x[i] = (float)(-87.3 + t * (88.7 + 87.3));
        }
        fj_vexp(y, x, N);
        for (int i = 0; i < N; i++) {
            double ref = exp((double)x[i]);
            double rel = fabs((double)y[i] - ref) / ref;
            if (rel > worst) {
                worst = rel;
                worst_x = x[i];
            }
            if (i % 4099 == 0) assert_true(fj_expf(x[i]) == y[i]);
        }
    }
    printf("# fj_expf: worst relative error %.3e at x = %.7g\n", worst, worst_x);
    assert_true(worst <= 3e-7);
    /* the softmax-relevant range near 0 and small negatives */
    for (float v = -20.0f; v <= 0.0f; v += 0.001f)
        assert_true(fabs(fj_expf(v) - exp(v)) / exp(v) <= 3e-7);
    assert_true(fj_expf(-88.0f) == 0.0f);
    assert_true(fj_expf(-1000.0f) == 0.0f);
    assert_true(fj_expf(-INFINITY) == 0.0f);
    assert_true(isnan(fj_expf(NAN)));
    assert_true(fj_expf(0.0f) == 1.0f);
    free(x);
    free(y);
}

static void test_f16_exhaustive(void **state)
{
    (void)state;
    /* every f16 -> f32 is exact; back to f16 is the identity (NaN stays NaN) */
    for (uint32_t h = 0; h < 65536; h++) {
        float f = fj_f16_to_f32((uint16_t)h);
        double want = fjt_load(&h, FJ_F16, 0);
        uint16_t hh = (uint16_t)h;
        want = fjt_load(&hh, FJ_F16, 0);
        if (isnan(want)) {
            assert_true(isnan(f));
            assert_true((fj_f32_to_f16(f) & 0x7c00) == 0x7c00 && (fj_f32_to_f16(f) & 0x3ff));
            continue;
        }
        assert_true((double)f == want);
        assert_int_equal(fj_f32_to_f16(f), hh);
    }
}

static void test_bf16_exhaustive(void **state)
{
    (void)state;
    for (uint32_t b = 0; b < 65536; b++) {
        uint16_t bb = (uint16_t)b;
        float f = fj_bf16_to_f32(bb);
        double want = fjt_load(&bb, FJ_BF16, 0);
        if (isnan(want)) {
            assert_true(isnan(f));
            assert_true(isnan(fj_bf16_to_f32(fj_f32_to_bf16(f))));
            continue;
        }
        assert_true((double)f == want);
        assert_int_equal(fj_f32_to_bf16(f), bb);
    }
}

/* f32 -> f16/bf16 rounding (nearest-even, subnormals, overflow) against the
 * harness's independent double-based rounding, on random bit patterns and
 * on every tie between neighbouring f16 values. */
static void test_rounding(void **state)
{
    (void)state;
    fjt_rng rng;
    fjt_rng_init(&rng, fjt_seed());
    for (int i = 0; i < 2000000; i++) {
        uint32_t u = (uint32_t)fjt_next(&rng);
        float f = fj_bits_f32(u);
        if (isnan(f)) continue;
        uint16_t h, b;
        fjt_store(&h, FJ_F16, 0, f);
        fjt_store(&b, FJ_BF16, 0, f);
        if (fj_f32_to_f16(f) != h || fj_f32_to_bf16(f) != b)
            fail_msg("x = %a: f16 %04x (want %04x), bf16 %04x (want %04x)", (double)f,
                     fj_f32_to_f16(f), h, fj_f32_to_bf16(f), b);
    }
    for (uint32_t h = 0; h < 0x7bff; h++) { /* midpoints between h and h+1 */
        uint16_t a = (uint16_t)h, c = (uint16_t)(h + 1);
        double mid = 0.5 * (fjt_load(&a, FJ_F16, 0) + fjt_load(&c, FJ_F16, 0));
        uint16_t want = (h & 1) ? c : a; /* ties to even */
        assert_int_equal(fj_f32_to_f16((float)mid), want);
        assert_int_equal(fj_f32_to_f16((float)-mid), want | 0x8000);
    }
    assert_int_equal(fj_f32_to_f16(65519.0f), 0x7bff);
    assert_int_equal(fj_f32_to_f16(65520.0f), 0x7c00);
    assert_int_equal(fj_f32_to_f16(INFINITY), 0x7c00);
    assert_int_equal(fj_f32_to_bf16(INFINITY), 0x7f80);
    assert_int_equal(fj_f32_to_bf16(3.4e38f), 0x7f80); /* rounds past the largest bf16 */
}

static void test_row_kernels(void **state)
{
    (void)state;
    fjt_rng rng;
    fjt_rng_init(&rng, fjt_seed() + 7);
    for (int n = 1; n < 300; n += 7) {
        float *x = malloc(sizeof(float) * (size_t)n);
        double m = -INFINITY;
        for (int j = 0; j < n; j++) {
            x[j] = (float)(20 * fjt_uniform(&rng) - 10);
            if (x[j] > m) m = x[j];
        }
        assert_true(fj_vmax(x, n) == (float)m);
        double want = 0;
        for (int j = 0; j < n; j++) want += exp(0.5 * x[j] - 0.5 * m);
        float got = fj_vexp_scaled_sum(x, n, 0.5f, 0.5f * (float)m);
        assert_true(fabs(got - want) / want < 1e-5);
        free(x);
    }
}

static atomic_int hits[1000];

/* The softcap's tanh (vmath.h): within 4e-7 x out of out * tanh(in * x) on a
 * sweep (vector lanes and the scalar tail alike), exact saturation, the
 * sign, and NaN and infinities as tanh takes them. */
static void test_softcap_tanh(void **state)
{
    (void)state;
    enum { N = 200003 }; /* not a multiple of the vector width: a scalar tail */
    float *x = malloc(N * sizeof *x);
    assert_non_null(x);
    const float in = 0.37f, out = 3.0f;
    for (int i = 0; i < N; i++) x[i] = -150.0f + 300.0f * (float)i / (N - 1);
    float *y = malloc(N * sizeof *y);
    assert_non_null(y);
    memcpy(y, x, N * sizeof *y);
    fj_vsoftcap(y, N, in, out);
    double worst = 0;
    for (int i = 0; i < N; i++) {
        double want = out * tanh((double)in * x[i]);
        double err = fabs(y[i] - want);
        if (err > worst) worst = err;
        assert_true(fabs(fj_softcapf(x[i], in, out) - want) <= 4e-7 * out);
        assert_true((y[i] < 0) == (x[i] < 0) || y[i] == 0.0f);
    }
    if (worst > 4e-7 * out) fail_msg("softcap tanh error %.3g > %.3g", worst, 4e-7 * out);
    float special[9] = {INFINITY, -INFINITY, NAN, 0.0f, -0.0f, 1e30f, -1e30f, 200.0f, -200.0f};
    fj_vsoftcap(special, 9, in, out); /* one vector and a tail of one */
    assert_true(special[0] == out && special[1] == -out && isnan(special[2]));
    assert_true(special[3] == 0.0f && special[4] == 0.0f);
    assert_true(special[5] == out && special[6] == -out && special[7] == out && special[8] == -out);
    assert_true(fj_softcapf(INFINITY, in, out) == out && isnan(fj_softcapf(NAN, in, out)));

    /* A huge cap (out) on small scores: the error must be relative to the
       score (1 - e cancels below |y| 1/16; the series takes over there), or
       out times an absolute 4e-7 swamps it. */
    const float big_in = 1.0f / 3.6e16f, big_out = 3.6e16f;
    for (int i = 0; i < N; i++) x[i] = (float)ldexp(-1.0 + 2.0 * i / (N - 1), (i % 40) - 20);
    memcpy(y, x, N * sizeof *y);
    fj_vsoftcap(y, N, big_in, big_out);
    for (int i = 0; i < N; i++) {
        double want = big_out * tanh((double)big_in * x[i]);
        double tol = 1e-6 * fabs(want) + 1e-37;
        if (fabs(y[i] - want) > tol || fabs(fj_softcapf(x[i], big_in, big_out) - want) > tol)
            fail_msg("softcap of %.9g with cap 3.6e16: %.9g (vector), %.9g (scalar), want %.9g",
                     (double)x[i], (double)y[i], (double)fj_softcapf(x[i], big_in, big_out), want);
    }
    /* and the series' side of the switch point against tanh, relatively */
    for (int i = 0; i < 1000; i++) {
        float v = 0.0625f * (float)i / 1000.0f;
        double want = tanh((double)v);
        assert_true(fabs(fj_softcapf(v, 1.0f, 1.0f) - want) <= 2e-7 * want + 1e-45);
    }
    free(x);
    free(y);
}

static void count_task(void *arg, int64_t t, int worker)
{
    (void)arg;
    assert_true(worker >= 0 && worker < 3);
    atomic_fetch_add(&hits[t], 1);
}

static void test_pool(void **state)
{
    (void)state;
    fj_pool *pool;
    assert_int_equal(fj_pool_create(3, &pool), FJ_OK);
    for (int round = 0; round < 50; round++) {
        int n = 1 + round * 19;
        for (int i = 0; i < n; i++) atomic_store(&hits[i], 0);
        fj_pool_run(pool, n, count_task, NULL);
        for (int i = 0; i < n; i++) assert_int_equal(atomic_load(&hits[i]), 1);
    }
    fj_pool_destroy(pool);
    assert_int_equal(fj_pool_create(0, &pool), FJ_ERR_INVALID_ARGUMENT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_expf_accuracy),
        cmocka_unit_test(test_f16_exhaustive),
        cmocka_unit_test(test_bf16_exhaustive),
        cmocka_unit_test(test_rounding),
        cmocka_unit_test(test_row_kernels),
        cmocka_unit_test(test_softcap_tanh),
        cmocka_unit_test(test_pool),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
