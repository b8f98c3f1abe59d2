/* fj_dtype_size and fj_convert against exact reference conversions.
 *
 * The reference rounds in double, which holds every float32 exactly, with
 * rint (ties to even in the default rounding mode) at the target's ulp, and
 * builds the target's bits from the rounded value: nothing of src/cpu's bit
 * tricks is shared. Covered: every f16 and bf16 value widened; every f16 and
 * bf16 value, every midpoint between neighbours (the ties) and the floats
 * either side of each midpoint narrowed; f32 subnormals, the overflow edges,
 * infinities, signed zeros and NaN payloads; f16 <-> bf16 over every value;
 * random float bit patterns (seeded, logged); every length around the
 * vector widths at aligned and unaligned starts, with guard bytes; and each
 * bad argument, which must name itself and write nothing. */
#include <float.h>
#include <math.h>
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

/* ---- the reference ---------------------------------------------------------- */

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* A binary format: significand bits (the implicit one included), the
 * exponent of its smallest normal, its largest finite value. */
typedef struct format {
    const char *name;
    fj_dtype dtype;
    int precision, emin, exp_bits;
    double max;
} format;

static const format f16_format = {"f16", FJ_F16, 11, -14, 5, 65504.0};
static const format bf16_format = {"bf16", FJ_BF16, 8, -126, 8, 0x1.fep127};

/* The exact value of a 16-bit pattern of format f (NaN for NaN, signed). */
static double ref_value(const format *f, uint16_t bits)
{
    const int mant_bits = f->precision - 1, bias = 1 - f->emin;
    const unsigned emax_field = (1u << f->exp_bits) - 1;
    unsigned e = (bits >> mant_bits) & emax_field, m = bits & ((1u << mant_bits) - 1);
    double v;
    if (e == emax_field) v = m ? NAN : INFINITY;
    else if (e == 0) v = ldexp(m, f->emin - mant_bits);
    else v = ldexp((double)((1u << mant_bits) + m), (int)e - bias - mant_bits);
    return bits >> 15 ? -v : v;
}

/* x (finite or infinite, not NaN) rounded to nearest-even in format f;
 * an infinity of x's sign beyond the largest finite value. */
static double ref_round(const format *f, double x)
{
    if (x == 0 || isinf(x)) return x;
    int e;
    frexp(fabs(x), &e); /* |x| in [2^(e-1), 2^e) */
    int exp = e - 1 < f->emin ? f->emin : e - 1;
    double ulp = ldexp(1.0, exp - (f->precision - 1));
    double r = rint(x / ulp) * ulp; /* x / ulp is exact: a power-of-two scaling */
    return fabs(r) > f->max ? copysign(INFINITY, x) : r;
}

/* The bits of a value of format f (finite or infinite, not NaN). */
static uint16_t ref_bits(const format *f, double v)
{
    const int mant_bits = f->precision - 1;
    const unsigned emax_field = (1u << f->exp_bits) - 1;
    uint16_t sign = signbit(v) ? 0x8000u : 0;
    double a = fabs(v);
    if (isinf(a)) return (uint16_t)(sign | emax_field << mant_bits);
    if (a < ldexp(1.0, f->emin))
        return (uint16_t)(sign | (unsigned)ldexp(a, -(f->emin - mant_bits)));
    int e;
    frexp(a, &e);
    unsigned m = (unsigned)(ldexp(a, mant_bits - (e - 1)) - (1u << mant_bits));
    return (uint16_t)(sign | (unsigned)(e - 1 - f->emin + 1) << mant_bits | m);
}

static bool is_nan16(const format *f, uint16_t b)
{
    const int mant_bits = f->precision - 1;
    const unsigned emax_field = (1u << f->exp_bits) - 1;
    return ((b >> mant_bits) & emax_field) == emax_field && (b & ((1u << mant_bits) - 1));
}

/* What narrowing x must give: the reference's bits; for NaN, any quiet NaN
 * of x's sign (checked by the caller). */
static uint16_t want_narrow(const format *f, double x) { return ref_bits(f, ref_round(f, x)); }

/* ---- helpers ----------------------------------------------------------------- */

static void expect_ok(fj_status s)
{
    if (s != FJ_OK) fail_msg("fj_convert: %s: %s", fj_status_name(s), fj_last_error());
}

/* Checks out[i] (format f) against narrowing in[i], for n floats; at most
 * 10 mismatches are printed, then the test fails. */
static void check_narrowed(const format *f, const float *in, const uint16_t *out, size_t n,
                           const char *what)
{
    int bad = 0;
    const uint16_t quiet = (uint16_t)(1u << (f->precision - 2));
    for (size_t i = 0; i < n; i++) {
        float x = in[i];
        bool ok;
        uint16_t want = 0;
        if (isnan(x)) {
            ok = is_nan16(f, out[i]) && (out[i] & quiet) && !(out[i] >> 15) == !signbit(x);
        } else {
            want = want_narrow(f, x);
            ok = out[i] == want;
        }
        if (!ok && bad++ < 10) {
            char w[48];
            if (isnan(x)) snprintf(w, sizeof w, "a quiet NaN of its sign");
            else snprintf(w, sizeof w, "0x%04x", want);
            print_error("%s: %s(%a = 0x%08x) gave 0x%04x, want %s\n", what, f->name, (double)x,
                        f32_bits(x), out[i], w);
        }
    }
    if (bad) fail_msg("%s: %d of %zu conversions to %s are wrong", what, bad, n, f->name);
}

enum { NSPECIALS = 28 };

/* Every value of f, the midpoints between neighbours of equal sign (ties)
 * and the floats next to each midpoint, both signs, into *n floats. */
static float *narrowing_inputs(const format *f, size_t *n)
{
    const uint16_t inf_bits = ref_bits(f, INFINITY);
    float *v = malloc(sizeof(float) * (8 * (size_t)inf_bits + NSPECIALS));
    assert_non_null(v);
    size_t k = 0;
    for (uint32_t b = 0; b < inf_bits; b++) {
        double lo = ref_value(f, (uint16_t)b);
        /* above the largest finite value, the next "neighbour" is the
           first value that no longer rounds down: max + ulp, here 2^(emax+1) */
        double hi = b + 1 < inf_bits ? ref_value(f, (uint16_t)(b + 1))
                                     : 2 * lo - ref_value(f, (uint16_t)(b - 1));
        float mid = (float)((lo + hi) / 2); /* exact: one bit more than f's precision */
        assert_true((double)mid == (lo + hi) / 2);
        const float candidates[4] = {(float)lo, mid, nextafterf(mid, 0), nextafterf(mid, INFINITY)};
        for (int c = 0; c < 4; c++) {
            v[k++] = candidates[c];
            v[k++] = -candidates[c];
        }
    }
    const float specials[] = {
        0.0f,
        -0.0f,
        INFINITY,
        -INFINITY,
        FLT_MAX,
        -FLT_MAX,
        FLT_MIN,
        -FLT_MIN,
        bits_f32(1),
        bits_f32(0x80000001u),
        bits_f32(0x007fffffu),
        bits_f32(0x00400000u),
        1e-8f,
        -1e-8f,
        0x1p-25f,
        0x1.8p-24f,
        0x1p-133f,
        0x1.8p-133f,
        65520.0f,
        65519.998f,
        bits_f32(0x7f800001u),
        bits_f32(0xff800001u),
        bits_f32(0x7fc00000u),
        bits_f32(0xffc00000u),
        bits_f32(0x7fbfffffu),
        bits_f32(0x7f801fffu),
        bits_f32(0xffffffffu),
        bits_f32(0x7f810000u),
    };
    _Static_assert(sizeof specials / sizeof specials[0] == NSPECIALS, "NSPECIALS");
    for (size_t i = 0; i < NSPECIALS; i++) v[k++] = specials[i];
    *n = k;
    return v;
}

/* ---- tests ------------------------------------------------------------------- */

static void test_dtype_size(void **state)
{
    (void)state;
    assert_int_equal(fj_dtype_size(FJ_F32), 4);
    assert_int_equal(fj_dtype_size(FJ_F16), 2);
    assert_int_equal(fj_dtype_size(FJ_BF16), 2);
    assert_int_equal(fj_dtype_size((fj_dtype)3), 0);
    assert_int_equal(fj_dtype_size((fj_dtype)-1), 0);
}

/* Every 16-bit pattern widened: exact, NaN payload and sign kept. */
static void test_widen_every_value(void **state)
{
    (void)state;
    static uint16_t in[65536];
    static float out[65536];
    for (uint32_t b = 0; b < 65536; b++) in[b] = (uint16_t)b;
    const format *formats[2] = {&f16_format, &bf16_format};
    for (int fi = 0; fi < 2; fi++) {
        const format *f = formats[fi];
        expect_ok(fj_convert(FJ_F32, out, f->dtype, in, 65536));
        int bad = 0;
        for (uint32_t b = 0; b < 65536; b++) {
            double want = ref_value(f, (uint16_t)b);
            bool ok = isnan(want) ? isnan(out[b]) && !signbit(out[b]) == !(b >> 15)
                                  : (double)out[b] == want && !signbit(out[b]) == !signbit(want);
            if (f->dtype == FJ_BF16) ok = ok && f32_bits(out[b]) == b << 16;
            if (!ok && bad++ < 10)
                print_error("%s 0x%04x widened to %a (0x%08x), want %a\n", f->name, b,
                            (double)out[b], f32_bits(out[b]), want);
        }
        if (bad) fail_msg("%d of 65536 %s values widen wrongly", bad, f->name);
    }
}

static void check_narrowing(const format *f)
{
    size_t n;
    float *in = narrowing_inputs(f, &n);
    uint16_t *out = malloc(n * 2);
    assert_non_null(out);
    expect_ok(fj_convert(f->dtype, out, FJ_F32, in, n));
    check_narrowed(f, in, out, n, "values, ties and their neighbours");
    free(in);
    free(out);
}

static void test_narrow_to_f16(void **state)
{
    (void)state;
    check_narrowing(&f16_format);
    /* the ties the header promises, spelled out */
    const float x[] = {65520.0f, 0x1p-25f, 0x1.8p-24f, 1.0f + 0x1p-11f, 1.0f + 0x1.8p-10f};
    const uint16_t want[] = {0x7c00, 0x0000, 0x0002, 0x3c00, 0x3c02};
    uint16_t got[5];
    expect_ok(fj_convert(FJ_F16, got, FJ_F32, x, 5));
    for (int i = 0; i < 5; i++) assert_int_equal(got[i], want[i]);
}

static void test_narrow_to_bf16(void **state)
{
    (void)state;
    check_narrowing(&bf16_format);
    const float x[] = {1.0f + 0x1p-8f, 1.0f + 0x1.8p-7f, bits_f32(0x7f7f8000u), 0x1p-134f};
    const uint16_t want[] = {0x3f80, 0x3f82, 0x7f80, 0x0000};
    uint16_t got[4];
    expect_ok(fj_convert(FJ_BF16, got, FJ_F32, x, 4));
    for (int i = 0; i < 4; i++) assert_int_equal(got[i], want[i]);
}

/* Random float bit patterns (every exponent, NaNs included). */
static void test_narrow_random_bits(void **state)
{
    (void)state;
    enum { N = 1 << 20 };
    float *in = malloc(sizeof(float) * N);
    uint16_t *out = malloc(2 * N);
    assert_non_null(in);
    assert_non_null(out);
    fjt_rng rng;
    fjt_rng_init(&rng, fjt_seed());
    for (size_t i = 0; i < N; i++) in[i] = bits_f32((uint32_t)fjt_next(&rng));
    expect_ok(fj_convert(FJ_F16, out, FJ_F32, in, N));
    check_narrowed(&f16_format, in, out, N, "random bits");
    expect_ok(fj_convert(FJ_BF16, out, FJ_F32, in, N));
    check_narrowed(&bf16_format, in, out, N, "random bits");
    free(in);
    free(out);
}

/* f16 <-> bf16 over every value: one rounding of the exact value. */
static void test_f16_bf16_every_value(void **state)
{
    (void)state;
    static uint16_t in[65536], out[65536];
    static float exact[65536];
    for (uint32_t b = 0; b < 65536; b++) in[b] = (uint16_t)b;
    const format *pairs[2][2] = {{&f16_format, &bf16_format}, {&bf16_format, &f16_format}};
    for (int p = 0; p < 2; p++) {
        const format *from = pairs[p][0], *to = pairs[p][1];
        for (uint32_t b = 0; b < 65536; b++) {
            double v = ref_value(from, (uint16_t)b);
            /* NaN: a float NaN of the same sign stands for it */
            exact[b] = isnan(v) ? copysignf(NAN, (b >> 15) ? -1.0f : 1.0f) : (float)v;
        }
        /* 65536 - 3 from an odd element: several staging blocks, ragged ends */
        expect_ok(fj_convert(to->dtype, out + 1, from->dtype, in + 1, 65536 - 3));
        char what[64];
        snprintf(what, sizeof what, "every %s value", from->name);
        check_narrowed(to, exact + 1, out + 1, 65536 - 3, what);
    }
}

/* Every pair of dtypes, lengths around the vector widths and the staging
 * block, aligned and one element off: the results match the reference and
 * nothing outside [dst, dst + count) is written. */
static void test_lengths_and_guards(void **state)
{
    (void)state;
    static const size_t counts[] = {0,  1,  2,  3,  7,  8,   9,    15,   16,   17,   31,
                                    32, 33, 63, 64, 65, 127, 1023, 1024, 1025, 2049, 4099};
    enum { GUARD = 64, MAXN = 4099 + 1 };
    static unsigned char src[4 * MAXN + 2 * GUARD], dst[4 * MAXN + 2 * GUARD];
    const fj_dtype types[3] = {FJ_F32, FJ_F16, FJ_BF16};
    const format *fmt[3] = {NULL, &f16_format, &bf16_format};
    fjt_rng rng;
    fjt_rng_init(&rng, fjt_seed() ^ 0x9e3779b97f4a7c15ull);
    for (int ti = 0; ti < 3; ti++)
        for (int to = 0; to < 3; to++)
            for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++)
                for (int shift = 0; shift < 2; shift++) {
                    const size_t n = counts[c], ss = fj_dtype_size(types[ti]),
                                 ds = fj_dtype_size(types[to]);
                    unsigned char *s = src + GUARD + shift * ss, *d = dst + GUARD + shift * ds;
                    /* finite values of every magnitude the targets hold */
                    for (size_t i = 0; i < n; i++) {
                        float x = (float)ldexp(fjt_uniform(&rng) * 2 - 1, fjt_range(&rng, -30, 20));
                        if (ti == 0) memcpy(s + 4 * i, &x, 4);
                        else {
                            uint16_t b = want_narrow(fmt[ti], x);
                            memcpy(s + 2 * i, &b, 2);
                        }
                    }
                    memset(dst, 0xa5, sizeof dst);
                    expect_ok(fj_convert(types[to], d, types[ti], s, n));
                    for (size_t i = 0; i < sizeof dst; i++)
                        if ((dst + i < d || dst + i >= d + n * ds) && dst[i] != 0xa5)
                            fail_msg("%s -> %s, count %zu, shift %d: byte %td outside the output "
                                     "was written",
                                     fj_dtype_name(types[ti]), fj_dtype_name(types[to]), n, shift,
                                     (dst + i) - d);
                    for (size_t i = 0; i < n; i++) {
                        uint16_t b16;
                        double x;
                        if (ti == 0) {
                            float f;
                            memcpy(&f, s + 4 * i, 4);
                            x = f;
                        } else {
                            memcpy(&b16, s + 2 * i, 2);
                            x = ref_value(fmt[ti], b16);
                        }
                        if (to == 0) {
                            float got;
                            memcpy(&got, d + 4 * i, 4);
                            if ((double)got != x)
                                fail_msg("%s -> f32, count %zu: element %zu is %a, want %a",
                                         fj_dtype_name(types[ti]), n, i, (double)got, x);
                        } else {
                            memcpy(&b16, d + 2 * i, 2);
                            if (b16 != want_narrow(fmt[to], x))
                                fail_msg("%s -> %s, count %zu: element %zu is 0x%04x, want 0x%04x",
                                         fj_dtype_name(types[ti]), fmt[to]->name, n, i, b16,
                                         want_narrow(fmt[to], x));
                        }
                    }
                }
}

static void expect_rejected(fj_status s, const char *needle)
{
    assert_int_equal(s, FJ_ERR_INVALID_ARGUMENT);
    if (!strstr(fj_last_error(), needle))
        fail_msg("message '%s' does not name '%s'", fj_last_error(), needle);
}

static void test_bad_arguments(void **state)
{
    (void)state;
    _Alignas(16) unsigned char buf[256], before[256];
    float f32[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    memset(buf, 0x3c, sizeof buf);
    memcpy(before, buf, sizeof buf);

    expect_rejected(fj_convert(FJ_F16, NULL, FJ_F32, f32, 1), "dst is NULL with count 1");
    expect_rejected(fj_convert(FJ_F16, buf, FJ_F32, NULL, 2), "src is NULL with count 2");
    expect_ok(fj_convert(FJ_F16, NULL, FJ_F32, NULL, 0));
    assert_string_equal(fj_last_error(), "");
    expect_rejected(fj_convert((fj_dtype)7, buf, FJ_F32, f32, 1), "dst_dtype (7)");
    expect_rejected(fj_convert(FJ_F16, buf, (fj_dtype)-2, f32, 1), "src_dtype (-2)");
    expect_rejected(fj_convert(FJ_F16, buf + 1, FJ_F32, f32, 1), "dst");
    assert_non_null(strstr(fj_last_error(), "not aligned"));
    expect_rejected(fj_convert(FJ_F32, buf, FJ_BF16, buf + 65, 1), "src");
    assert_non_null(strstr(fj_last_error(), "not aligned"));
    expect_rejected(fj_convert(FJ_F16, buf, FJ_F32, f32, SIZE_MAX / 2 + 1), "overflow");
    /* overlap: the same buffer, one element in, the tail of one on the head
       of the other; adjacent buffers are fine */
    expect_rejected(fj_convert(FJ_BF16, buf, FJ_F16, buf, 4), "overlap");
    expect_rejected(fj_convert(FJ_F16, buf + 2, FJ_F32, buf, 4), "overlap");
    expect_rejected(fj_convert(FJ_F32, buf, FJ_F16, buf + 14, 4), "overlap");
    assert_memory_equal(buf, before, sizeof buf);
    expect_ok(fj_convert(FJ_F32, buf, FJ_F16, buf + 16, 4));
    expect_ok(fj_convert(FJ_F16, buf + 128, FJ_F32, buf + 112, 4));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dtype_size),         cmocka_unit_test(test_widen_every_value),
        cmocka_unit_test(test_narrow_to_f16),      cmocka_unit_test(test_narrow_to_bf16),
        cmocka_unit_test(test_narrow_random_bits), cmocka_unit_test(test_f16_bf16_every_value),
        cmocka_unit_test(test_lengths_and_guards), cmocka_unit_test(test_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
