/* The CPU backend's decode path (src/cpu/decode.c) against the double oracle
 * of tests/common/harness.h, on random problems drawn with the suite's seed
 * (FLASHJIT_TEST_SEED replays a run), with its AVX-512 kernels where this
 * CPU has them and with the generic kernels forced (what a CPU without
 * AVX-512 runs).
 *
 * Every check of a problem: its plan says it takes the decode path (and
 * which kernels); relative Frobenius error against the oracle within
 * fjt_tolerance, outputs poisoned before the run (fjt_run), no NaN, nothing
 * written between output rows, lse within LSE_TOL of the oracle's and -inf
 * exactly where the oracle's is, and the output rows of rows that see no key
 * exactly zero. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/decode.h"
#include "cpu/decode_kernels.h"
#include "cpu/prefill_amx.h"
#include "half.h"
#include "harness.h"

#define LSE_TOL 1e-4
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

/* The plan's describe text for d on ctx (a plan made and destroyed). */
static void plan_text(fj_context *ctx, const fj_attention_desc *d, char *out, size_t n)
{
    fj_plan *plan;
    fj_status s = fj_plan_create(ctx, d, &plan);
    if (s)
        fail_msg("%s: fj_plan_create: %s: %s", fjt_desc_str(d), fj_status_name(s), fj_last_error());
    snprintf(out, n, "%s", fj_plan_describe(plan));
    fj_plan_destroy(plan);
}

static size_t o_offset(const fjt_problem *p, int b, int i, int h)
{
    return (size_t)(b * p->os[0] + i * p->os[1] + h * p->os[2]);
}

/* Rows that see no key (the mask's rule) whose output is not exactly 0:
 * fjt_compare checks their lse, this the output's zeros. (A row whose keys'
 * weights vanish next to a sink has the sink's lse in double but sees keys:
 * its output is small, not necessarily 0.) */
static size_t nonzero_empty_rows(const fjt_problem *p, fj_context *ctx)
{
    const fj_attention_desc *d = &p->d;
    size_t es = d->dtype == FJ_F32 ? 4 : 2, bad = 0;
    void *o = malloc(p->o_elems * es);
    if (!o) fail_msg("out of memory");
    fjt_poison(o, d->dtype, p->o_elems);
    fj_execute_extras x; /* host memory: the CPU backends take it */
    fj_execute_extras_init(&x);
    x.alibi_slopes = p->alibi;
    x.sinks = p->sinks;
    fj_status s = fj_attention_ex(ctx, d, p->q, p->k, p->v, o, NULL, &x, NULL);
    if (s) fail_msg("%s: %s: %s", fjt_desc_str(d), fj_status_name(s), fj_last_error());
    for (int b = 0; b < d->batch; b++)
        for (int h = 0; h < d->heads_q; h++)
            for (int i = 0; i < d->seqlen_q; i++) {
                if (fjt_row_sees_keys(d, i)) continue;
                for (int c = 0; c < fjt_dim_v(d); c++)
                    if (fjt_load(o, d->dtype, o_offset(p, b, i, h) + (size_t)c) != 0.0) {
                        bad++;
                        break;
                    }
            }
    free(o);
    return bad;
}

/* Every check of the file's header on one problem; `kernels`: the name the
 * describe must give (NULL: any). */
static void check_method(fj_context *ctx, const fj_attention_desc *d, fjt_rng *rng,
                         const char *method, const char *kernels)
{
    char text[2048], want[64];
    plan_text(ctx, d, text, sizeof text);
    if (!strstr(text, method)) fail_msg("%s: not '%s':\n%s", fjt_desc_str(d), method, text);
    snprintf(want, sizeof want, "kernels: %s ", kernels ? kernels : "");
    if (kernels && !strstr(text, want))
        fail_msg("%s: not the %s kernels:\n%s", fjt_desc_str(d), kernels, text);

    fjt_problem p;
    if (!fjt_problem_make(&p, d, rng)) fail_msg("out of memory making %s", fjt_desc_str(d));
    const double tol = fjt_tolerance(d->dtype);
    for (int with_lse = 0; with_lse <= 1; with_lse++) {
        fjt_error e;
        fj_status s = fjt_run(ctx, &p, &e, with_lse);
        if (s) fail_msg("%s: %s: %s", fjt_desc_str(d), fj_status_name(s), fj_last_error());
        if (!fjt_within(&e, tol) || e.nan_count || e.gaps_written || e.lse_mismatch ||
            !(e.lse_max_abs <= LSE_TOL))
            fail_msg("%s (lse %s): vs oracle rel_fro %.3g, against the terms %.3g (tol %.3g) "
                     "max_abs %.3g nan %zu gaps %zu lse mismatch %zu lse err %.3g\n%s",
                     fjt_desc_str(d), with_lse ? "on" : "off", e.rel_fro, e.mag_rel_max, tol,
                     e.max_abs, e.nan_count, e.gaps_written, e.lse_mismatch, e.lse_max_abs, text);
    }
    size_t bad = nonzero_empty_rows(&p, ctx);
    if (bad) fail_msg("%s: %zu rows that see no key are not exactly zero", fjt_desc_str(d), bad);
    fjt_problem_free(&p);
}

static void check_decode(fj_context *ctx, const fj_attention_desc *d, fjt_rng *rng,
                         const char *kernels)
{
    check_method(ctx, d, rng, "method: decode", kernels);
}

/* ---- layouts and random problems ----------------------------------------- */

enum layout { DENSE, BHSD, PADDED, LAYOUTS };

static void set_layout(int64_t s[3], enum layout l, int seq, int heads, int dim)
{
    switch (l) {
    case DENSE: s[0] = s[1] = s[2] = 0; break;
    case BHSD: /* [b, heads, seq, dim] */
        s[2] = (int64_t)seq * dim;
        s[1] = dim;
        s[0] = (int64_t)heads * seq * dim;
        break;
    case PADDED: /* rows padded by 3 elements, batches by 5 more */
        s[2] = dim + 3;
        s[1] = (int64_t)heads * (dim + 3);
        s[0] = (int64_t)seq * heads * (dim + 3) + 5;
        break;
    default: break;
    }
}

static void set_layouts(fj_attention_desc *d, enum layout l)
{
    set_layout(d->q_stride, l, d->seqlen_q, d->heads_q, d->head_dim);
    set_layout(d->k_stride, l, d->seqlen_k, d->heads_kv, d->head_dim);
    set_layout(d->v_stride, l, d->seqlen_k, d->heads_kv, fjt_dim_v(d));
    set_layout(d->o_stride, l, d->seqlen_q, d->heads_q, fjt_dim_v(d));
}

/* Head dims around the kernels' vector widths (16 floats, 32 bf16) and the
 * 128-column passes, up to FJ_MAX_HEAD_DIM (AMX's 18 B tiles at 576); key
 * counts around the 16-key groups, the 128-key blocks and the 512-key
 * chunks. */
static const int dims[] = {1,   7,   8,   15,  16,  17,  31,  32,  33,  48,  64,  80,  96,
                           127, 128, 129, 160, 200, 255, 256, 257, 300, 384, 511, 512, 576};
static const int keys[] = {1,   2,   15,  16,  17,   100,  127,  128, 129,
                           255, 256, 257, 700, 1024, 1100, 2049, 3001};
static const int positions[] = {1, 1, 1, 2, 3, 4, 5, 8, 16};

/* A random decode-shaped problem: rows per kv head (positions x group) at
 * most FJ_CPU_DECODE_MAX_ROWS, any mask, any layout, sometimes a sharp
 * scale (a peaky softmax, so the running max matters); with vdim, V's head
 * dim drawn from dims too (drawn last: the other draws are random_decode's). */
static void random_decode_v(fjt_rng *rng, fj_attention_desc *d, bool vdim)
{
    int sq = positions[fjt_range(rng, 0, NELEMS(positions) - 1)];
    int max_group = FJ_CPU_DECODE_MAX_ROWS / sq;
    int group = fjt_range(rng, 1, max_group);
    int hkv = fjt_range(rng, 1, 3);
    int sk = keys[fjt_range(rng, 0, NELEMS(keys) - 1)];
    int dim = dims[fjt_range(rng, 0, NELEMS(dims) - 1)];
    /* the oracle is plain double loops: keep a problem under ~2e7 products */
    while (hkv > 1 && (double)hkv * group * sq * sk * dim > 2e7) hkv--;
    fj_attention_desc_init(d, fjt_range(rng, 1, 2), hkv * group, hkv, sq, sk, dim,
                           (fj_dtype)fjt_range(rng, 0, 2));
    if ((double)d->batch * d->heads_q * sq * sk * dim > 2e7) d->batch = 1;
    d->causal = (fj_causal)fjt_range(rng, 0, 2);
    int hi = sk + 8;
    switch (fjt_range(rng, 0, 3)) { /* none, left, right, both */
    case 1: d->window_left = fjt_range(rng, 0, hi); break;
    case 2: d->window_right = fjt_range(rng, 0, hi); break;
    case 3:
        d->window_left = fjt_range(rng, 0, hi);
        d->window_right = fjt_range(rng, 0, hi);
        break;
    default: break;
    }
    if (fjt_range(rng, 0, 2) == 0) d->scale = (float)(0.05 + 3.0 * fjt_uniform(rng));
    const enum layout l = (enum layout)fjt_range(rng, 0, LAYOUTS - 1);
    if (vdim) {
        do d->head_dim_v = dims[fjt_range(rng, 0, NELEMS(dims) - 1)];
        while (d->head_dim_v == d->head_dim);
        while ((double)d->batch * d->heads_q * sq * sk * (d->head_dim + d->head_dim_v) > 4e7 &&
               d->batch > 1)
            d->batch--;
    }
    set_layouts(d, l);
}

static void random_decode(fjt_rng *rng, fj_attention_desc *d) { random_decode_v(rng, d, false); }

/* ---- the suites ------------------------------------------------------------ */

/* Random problems on 1, 2, 3 and 7 workers (so keys are split into chunks and
 * merged in every way), with the kernels this CPU gets. */
static void test_random(void **state)
{
    (void)state;
    fjt_rng rng;
    fjt_rng_init(&rng, suite_seed ^ 0xd001);
    static const int threads[] = {1, 2, 3, 7};
    for (int t = 0; t < NELEMS(threads); t++) {
        fj_context *ctx = make_context(threads[t]);
        for (int i = 0; i < 30; i++) {
            fj_attention_desc d;
            random_decode(&rng, &d);
            check_decode(ctx, &d, &rng, NULL);
        }
        fj_context_destroy(ctx);
    }
}

/* Random problems with their keys split as finely as the workers allow
 * (chunks down to 16 keys, small calls too), so that merges of many chunks,
 * of chunks a row sees nothing of and of single-group chunks are checked on
 * small problems. */
static void test_random_fine_split(void **state)
{
    (void)state;
    fjt_rng rng;
    fjt_rng_init(&rng, suite_seed ^ 0xd008);
    fj_cpu_decode_force_split(true);
    static const int threads[] = {2, 5, 16};
    for (int t = 0; t < NELEMS(threads); t++) {
        fj_context *ctx = make_context(threads[t]);
        for (int i = 0; i < 25; i++) {
            fj_attention_desc d;
            random_decode(&rng, &d);
            check_decode(ctx, &d, &rng, NULL);
        }
        fj_context_destroy(ctx);
    }
    fj_cpu_decode_force_split(false);
}

/* The same with the generic kernels forced: the code a CPU without AVX-512
 * runs is checked on this one too. */
static void test_random_generic(void **state)
{
    (void)state;
    fjt_rng rng;
    fjt_rng_init(&rng, suite_seed ^ 0xd002);
    assert_int_equal(fj_cpu_decode_force(FJ_CPU_DECODE_GENERIC), FJ_OK);
    static const int threads[] = {1, 2, 5};
    for (int t = 0; t < NELEMS(threads); t++) {
        fj_context *ctx = make_context(threads[t]);
        for (int i = 0; i < 30; i++) {
            fj_attention_desc d;
            random_decode(&rng, &d);
            check_decode(ctx, &d, &rng, "generic");
        }
        fj_context_destroy(ctx);
    }
    assert_int_equal(fj_cpu_decode_force(FJ_CPU_DECODE_AUTO), FJ_OK);
}

/* bf16 with AMX turned off (the AVX-512 BF16 dot products where the CPU
 * has them, else the AVX-512 kernels: what a CPU with AVX-512 but without
 * AMX runs), and widened (the AVX-512 kernels: what a CPU with neither
 * runs), on random problems, the kernels' name checked. */
static void random_bf16(fj_cpu_decode_mode mode, uint64_t salt)
{
    fjt_rng rng;
    fjt_rng_init(&rng, suite_seed ^ salt);
    __builtin_cpu_init();
    const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    if (!avx512) print_message("no AVX-512 here: the kernels' name is not checked\n");
    const char *want = !avx512 ? NULL
                       : mode == FJ_CPU_DECODE_NO_AMX && fj_decode_kernels_avx512_bf16_dot()
                           ? "avx512-bf16-dot"
                           : "avx512";
    assert_int_equal(fj_cpu_decode_force(mode), FJ_OK);
    static const int threads[] = {1, 3};
    for (int t = 0; t < NELEMS(threads); t++) {
        fj_context *ctx = make_context(threads[t]);
        for (int i = 0; i < 25; i++) {
            fj_attention_desc d;
            random_decode(&rng, &d);
            d.dtype = FJ_BF16;
            check_decode(ctx, &d, &rng, want);
        }
        fj_context_destroy(ctx);
    }
    assert_int_equal(fj_cpu_decode_force(FJ_CPU_DECODE_AUTO), FJ_OK);
}

static void test_random_no_amx(void **state)
{
    (void)state;
    random_bf16(FJ_CPU_DECODE_NO_AMX, 0xd007);
}

static void test_random_widened(void **state)
{
    (void)state;
    random_bf16(FJ_CPU_DECODE_WIDENED, 0xd009);
}

/* The logit softcap on every kernel set (auto: AMX or AVX-512 where the CPU
 * has them; no AMX; generic), its keys whole and split finely (the merge of
 * capped partial results), caps below and above the scores. */
static void test_softcap(void **state)
{
    (void)state;
    fjt_rng rng;
    fjt_rng_init(&rng, suite_seed ^ 0xd00c);
    static const fj_cpu_decode_mode modes[] = {FJ_CPU_DECODE_AUTO, FJ_CPU_DECODE_NO_AMX,
                                               FJ_CPU_DECODE_GENERIC};
    static const float caps[] = {0.5f, 2.0f, 5.0f, 30.0f};
    for (int m = 0; m < NELEMS(modes); m++)
        for (int fine = 0; fine <= 1; fine++) {
            assert_int_equal(fj_cpu_decode_force(modes[m]), FJ_OK);
            fj_cpu_decode_force_split(fine);
            fj_context *ctx = make_context(fine ? 5 : 2);
            for (int i = 0; i < 12; i++) {
                fj_attention_desc d;
                random_decode(&rng, &d);
                d.softcap = caps[fjt_range(&rng, 0, NELEMS(caps) - 1)];
                if (fjt_range(&rng, 0, 1)) d.scale = (float)(0.5 + 2.0 * fjt_uniform(&rng));
                check_decode(ctx, &d, &rng, modes[m] == FJ_CPU_DECODE_GENERIC ? "generic" : NULL);
            }
            fj_context_destroy(ctx);
        }
    fj_cpu_decode_force_split(false);
    assert_int_equal(fj_cpu_decode_force(FJ_CPU_DECODE_AUTO), FJ_OK);
}

/* ALiBi and sinks on every kernel set, keys whole and split finely (the
 * sink joins once, after the merge of the chunks), with and without a
 * softcap; rows that see no key (lse = the sink) exactly 0. */
static void test_alibi_sinks(void **state)
{
    (void)state;
    fjt_rng rng;
    fjt_rng_init(&rng, suite_seed ^ 0xa11b);
    static const fj_cpu_decode_mode modes[] = {FJ_CPU_DECODE_AUTO, FJ_CPU_DECODE_NO_AMX,
                                               FJ_CPU_DECODE_GENERIC};
    for (int m = 0; m < NELEMS(modes); m++)
        for (int fine = 0; fine <= 1; fine++) {
            assert_int_equal(fj_cpu_decode_force(modes[m]), FJ_OK);
            fj_cpu_decode_force_split(fine);
            fj_context *ctx = make_context(fine ? 5 : 2);
            for (int i = 0; i < 12; i++) {
                fj_attention_desc d;
                random_decode(&rng, &d);
                d.features = (uint32_t)fjt_range(&rng, 1, 3);
                if (fjt_range(&rng, 0, 2) == 0) d.softcap = 5.0f;
                check_decode(ctx, &d, &rng, modes[m] == FJ_CPU_DECODE_GENERIC ? "generic" : NULL);
            }
            fj_context_destroy(ctx);
        }
    fj_cpu_decode_force_split(false);
    assert_int_equal(fj_cpu_decode_force(FJ_CPU_DECODE_AUTO), FJ_OK);
}

/* V's head dim other than Q's and K's (head_dim_v; DeepSeek's MLA) on every
 * kernel set, keys whole and split finely (the partial results and their
 * merge are head_dim_v wide), each dtype, mask and layout, with softcap,
 * ALiBi and sinks now and then; MLA's own pairs first. The plan says so. */
static void test_head_dim_v(void **state)
{
    (void)state;
    fjt_rng rng;
    fjt_rng_init(&rng, suite_seed ^ 0xd0d5);
    static const fj_cpu_decode_mode modes[] = {FJ_CPU_DECODE_AUTO, FJ_CPU_DECODE_NO_AMX,
                                               FJ_CPU_DECODE_GENERIC};
    static const int mla[][2] = {{576, 512}, {192, 128}, {128, 192}, {64, 32}, {1, 7}, {33, 17}};
    int differ = 0;
    for (int m = 0; m < NELEMS(modes); m++)
        for (int fine = 0; fine <= 1; fine++) {
            assert_int_equal(fj_cpu_decode_force(modes[m]), FJ_OK);
            fj_cpu_decode_force_split(fine);
            fj_context *ctx = make_context(fine ? 5 : 2);
            const char *kernels = modes[m] == FJ_CPU_DECODE_GENERIC ? "generic" : NULL;
            for (int i = 0; i < NELEMS(mla); i++) { /* decode of 1..16 rows per kv head */
                fj_attention_desc d;
                const int sq = 1 + i % 3, group = (i + m) % 2 ? 16 / sq : 2;
                fj_attention_desc_init(&d, 1, 2 * group, 2, sq, 700 + 37 * i, mla[i][0],
                                       (fj_dtype)((i + m + fine) % 3));
                d.head_dim_v = mla[i][1];
                d.causal = (fj_causal)(i % 3);
                set_layouts(&d, (enum layout)((i + fine) % LAYOUTS));
                check_decode(ctx, &d, &rng, kernels);
                differ++;
            }
            for (int i = 0; i < 10; i++) {
                fj_attention_desc d;
                random_decode_v(&rng, &d, true);
                if (fjt_range(&rng, 0, 3) == 0) d.softcap = 5.0f;
                if (fjt_range(&rng, 0, 3) == 0) d.features = (uint32_t)fjt_range(&rng, 1, 3);
                char text[2048];
                plan_text(ctx, &d, text, sizeof text);
                if (!strstr(text, "head dims: q and k"))
                    fail_msg("%s: describe does not give the two head dims:\n%s", fjt_desc_str(&d),
                             text);
                check_decode(ctx, &d, &rng, kernels);
                differ++;
            }
            fj_context_destroy(ctx);
        }
    fj_cpu_decode_force_split(false);
    assert_int_equal(fj_cpu_decode_force(FJ_CPU_DECODE_AUTO), FJ_OK);
    assert_true(differ >= 90);
}

/* bf16 prefill on the AMX tiles (blocks of up to 16 rows per kv head): more
 * than 16 rows per kv head, every mask, GQA up to 16, odd sizes, every
 * layout, 1-3 workers. Where the CPU has no AMX the suite says so and
 * checks that such problems are not sent there. */
static void test_amx_prefill(void **state)
{
    (void)state;
    fjt_rng rng;
    fjt_rng_init(&rng, suite_seed ^ 0xd009);
    fj_cpu_prefill_amx_force_off(true); /* the row blocks, not prefill_amx.c's tiles */
    static const int threads[] = {1, 2, 3};
    static const int groups[] = {1, 2, 3, 4, 5, 8, 16};
    static const int lens[] = {17, 33, 100, 129, 300};
    for (int t = 0; t < NELEMS(threads); t++) {
        fj_context *ctx = make_context(threads[t]);
        for (int i = 0; i < 20; i++) {
            const int group = groups[fjt_range(&rng, 0, NELEMS(groups) - 1)];
            const int hkv = fjt_range(&rng, 1, 2);
            int sq = lens[fjt_range(&rng, 0, NELEMS(lens) - 1)];
            if ((int64_t)sq * group <= FJ_CPU_DECODE_MAX_ROWS)
                sq = FJ_CPU_DECODE_MAX_ROWS / group + 1;
            const int sk = lens[fjt_range(&rng, 0, NELEMS(lens) - 1)] + fjt_range(&rng, 0, 200);
            fj_attention_desc d;
            fj_attention_desc_init(&d, fjt_range(&rng, 1, 2), hkv * group, hkv, sq, sk,
                                   dims[fjt_range(&rng, 0, NELEMS(dims) - 1)], FJ_BF16);
            if ((double)d.batch * d.heads_q * sq * sk * d.head_dim > 3e7) d.batch = 1;
            d.causal = (fj_causal)fjt_range(&rng, 0, 2);
            if (fjt_range(&rng, 0, 2) == 0) d.window_left = fjt_range(&rng, 0, sk);
            if (fjt_range(&rng, 0, 3) == 0) d.window_right = fjt_range(&rng, 0, 20);
            if (fjt_range(&rng, 0, 2) == 0) d.scale = (float)(0.05 + 2.0 * fjt_uniform(&rng));
            set_layouts(&d, (enum layout)fjt_range(&rng, 0, LAYOUTS - 1));
            /* every third with V rows of another length (after the draws
               above: the problems are those of before) */
            if (i % 3 == 2) {
                d.head_dim_v = d.head_dim > 64 ? d.head_dim - 64 + i : d.head_dim * 2 + 1;
                set_layouts(&d, (enum layout)(i % LAYOUTS));
            }
            if (fj_decode_kernels_amx()) {
                check_method(ctx, &d, &rng, "method: AMX row blocks", "amx-bf16");
            } else {
                char text[2048];
                plan_text(ctx, &d, text, sizeof text);
                if (strstr(text, "AMX row blocks")) fail_msg("no AMX, yet:\n%s", text);
            }
        }
        fj_context_destroy(ctx);
    }
    fj_cpu_prefill_amx_force_off(false);
    if (!fj_decode_kernels_amx()) print_message("no AMX on this CPU: bf16 prefill stays tiled\n");
}

/* bf16 prefill on prefill_amx.c's tiles (blocks of 32 rows per kv head, 512
 * keys): rows per kv head above 16, around the blocks' edges (31-33,
 * 127-129 keys, primes, 1 key), seqlen_q above and below seqlen_k, every
 * mask (causal both ways, windows on either side), GQA up to 16, head dims
 * 1..576 and head_dim_v, sinks, a sharp scale now and then (the running
 * max moves), every layout, 1-3 workers; lse on and off, outputs poisoned
 * (check_method). Softcap and ALiBi stay in the AMX row blocks. Where the
 * CPU has no AMX the suite says so and checks that no plan says AMX. */
static void test_amx_prefill_tiles(void **state)
{
    (void)state;
    fjt_rng rng;
    fjt_rng_init(&rng, suite_seed ^ 0xd00a);
    static const int threads[] = {1, 2, 3};
    static const int groups[] = {1, 2, 3, 4, 5, 8, 16};
    static const int qlens[] = {17, 31, 32, 33, 47, 64, 65, 97, 129, 257};
    static const int klens[] = {1, 2, 31, 32, 33, 97, 127, 128, 129, 255, 257, 300, 521};
    const bool amx = fj_decode_kernels_amx() != NULL;
    for (int t = 0; t < NELEMS(threads); t++) {
        fj_context *ctx = make_context(threads[t]);
        for (int i = 0; i < 40; i++) {
            const int group = groups[fjt_range(&rng, 0, NELEMS(groups) - 1)];
            const int hkv = fjt_range(&rng, 1, 2);
            int sq = qlens[fjt_range(&rng, 0, NELEMS(qlens) - 1)];
            if ((int64_t)sq * group <= FJ_CPU_DECODE_MAX_ROWS)
                sq = FJ_CPU_DECODE_MAX_ROWS / group + 1;
            const int sk = klens[fjt_range(&rng, 0, NELEMS(klens) - 1)];
            fj_attention_desc d;
            fj_attention_desc_init(&d, fjt_range(&rng, 1, 2), hkv * group, hkv, sq, sk,
                                   dims[fjt_range(&rng, 0, NELEMS(dims) - 1)], FJ_BF16);
            if ((double)d.batch * d.heads_q * sq * sk * d.head_dim > 3e7) d.batch = 1;
            d.causal = (fj_causal)fjt_range(&rng, 0, 2);
            if (fjt_range(&rng, 0, 2) == 0) d.window_left = fjt_range(&rng, 0, sk + 8);
            if (fjt_range(&rng, 0, 3) == 0) d.window_right = fjt_range(&rng, 0, 40);
            if (fjt_range(&rng, 0, 2) == 0) d.scale = (float)(0.05 + 3.0 * fjt_uniform(&rng));
            if (fjt_range(&rng, 0, 3) == 0) d.features = FJ_FEATURE_SINKS;
            set_layouts(&d, (enum layout)fjt_range(&rng, 0, LAYOUTS - 1));
            if (i % 4 == 3) { /* V rows of another length */
                d.head_dim_v = dims[fjt_range(&rng, 0, NELEMS(dims) - 1)];
                set_layouts(&d, (enum layout)(i % LAYOUTS));
            }
            if (amx) {
                check_method(ctx, &d, &rng, "method: AMX prefill: blocks of 32 query rows", NULL);
            } else {
                char text[2048];
                plan_text(ctx, &d, text, sizeof text);
                if (strstr(text, "AMX")) fail_msg("no AMX, yet:\n%s", text);
            }
        }
        fj_context_destroy(ctx);
    }
    if (!amx) print_message("no AMX on this CPU: bf16 prefill stays tiled\n");
}

/* Long rows on the tiles: many blocks of keys per row (the running max and
 * the rescaled accumulators over 2k keys), scores ramping up along the keys
 * through a sharp scale, causal with a window, the blocks of rows a causal
 * diagonal cuts at every offset. */
static void test_amx_prefill_long(void **state)
{
    (void)state;
    if (!fj_decode_kernels_amx()) {
        print_message("no AMX on this CPU: nothing to check\n");
        return;
    }
    fjt_rng rng;
    fjt_rng_init(&rng, suite_seed ^ 0xd00b);
    fj_context *ctx = make_context(2);
    static const int shapes[][4] = {/* sq, sk, dim, group */
                                    {200, 2049, 64, 1},
                                    {96, 2100, 128, 4},
                                    {333, 333, 80, 2},
                                    {1000, 1000, 32, 1}};
    for (int i = 0; i < NELEMS(shapes); i++)
        for (int c = 0; c < 3; c++) {
            fj_attention_desc d;
            fj_attention_desc_init(&d, 1, 2 * shapes[i][3], 2, shapes[i][0], shapes[i][1],
                                   shapes[i][2], FJ_BF16);
            d.causal = (fj_causal)c;
            if (c == 2) d.window_left = 300;
            d.scale = (float)(1.0 + 2.0 * fjt_uniform(&rng));
            set_layouts(&d, (enum layout)((i + c) % LAYOUTS));
            check_method(ctx, &d, &rng, "method: AMX prefill", NULL);
        }
    fj_context_destroy(ctx);
}

/* Every dtype, mask kind and GQA shape at sizes around the kernels' edges,
 * each with the auto-chosen kernels and with the generic ones. */
static void test_edges(void **state)
{
    (void)state;
    fjt_rng rng;
    fjt_rng_init(&rng, suite_seed ^ 0xd003);
    static const struct {
        int hq, hkv, sq, sk, dim;
    } shapes[] = {
        {1, 1, 1, 1, 1},    {4, 1, 1, 17, 33},   {8, 2, 2, 129, 128},   {16, 1, 1, 257, 256},
        {3, 3, 5, 300, 80}, {2, 1, 8, 1100, 64}, {32, 8, 1, 2049, 128}, {6, 6, 16, 40, 17},
    };
    static const fj_cpu_decode_mode modes[] = {FJ_CPU_DECODE_AUTO, FJ_CPU_DECODE_GENERIC,
                                               FJ_CPU_DECODE_NO_AMX};
    for (int mode = 0; mode < NELEMS(modes); mode++) {
        assert_int_equal(fj_cpu_decode_force(modes[mode]), FJ_OK);
        fj_context *ctx = make_context(2);
        for (int s = 0; s < NELEMS(shapes); s++)
            for (int t = 0; t < 3; t++)
                for (int c = 0; c < 3; c++) {
                    fj_attention_desc d;
                    fj_attention_desc_init(&d, 1, shapes[s].hq, shapes[s].hkv, shapes[s].sq,
                                           shapes[s].sk, shapes[s].dim, (fj_dtype)t);
                    d.causal = (fj_causal)c;
                    if (s % 3 == 1) d.window_left = shapes[s].sk / 3;
                    if (s % 4 == 2) d.window_right = 1;
                    set_layouts(&d, (enum layout)((s + t) % LAYOUTS));
                    check_decode(ctx, &d, &rng,
                                 modes[mode] == FJ_CPU_DECODE_GENERIC ? "generic" : NULL);
                }
        fj_context_destroy(ctx);
    }
    assert_int_equal(fj_cpu_decode_force(FJ_CPU_DECODE_AUTO), FJ_OK);
}

/* Rows that see no key, by every way it can happen, alone or next to rows
 * that see some; on several workers so that chunks where a row sees nothing
 * are merged with chunks where it sees something. */
static void test_rows_without_keys(void **state)
{
    (void)state;
    fjt_rng rng;
    fjt_rng_init(&rng, suite_seed ^ 0xd004);
    static const struct {
        int sq, sk;
        fj_causal causal;
        int wl, wr;
    } cases[] = {
        {16, 5, FJ_CAUSAL_BOTTOM_RIGHT, -1, -1}, /* positions 0..10 see nothing */
        {4, 3000, FJ_CAUSAL_NONE, 3, 0},         /* position i sees keys i-3..i only */
        {8, 2000, FJ_CAUSAL_TOP_LEFT, 0, -1},    /* position i sees key i only */
        {3, 1500, FJ_CAUSAL_NONE, -1, 2},        /* keys 0..4 only */
        {2, 1300, FJ_CAUSAL_NONE, 0, 0},         /* one key each, at the end */
        {1, 2000, FJ_CAUSAL_TOP_LEFT, -1, -1},   /* key 0 only */
        {5, 4, FJ_CAUSAL_TOP_LEFT, 10, 0},       /* the last position sees nothing */
        {1, 600, FJ_CAUSAL_NONE, -1, -1},
    };
    static const int threads[] = {1, 3};
    for (int w = 0; w < NELEMS(threads); w++) {
        fj_context *ctx = make_context(threads[w]);
        for (int i = 0; i < NELEMS(cases); i++)
            for (int t = 0; t < 3; t++) {
                fj_attention_desc d;
                const int hkv = cases[i].sq <= 8 ? 1 : 2; /* GQA 2:1 where it fits */
                fj_attention_desc_init(&d, 2, 2, hkv, cases[i].sq, cases[i].sk, 40, (fj_dtype)t);
                d.causal = cases[i].causal;
                d.window_left = cases[i].wl;
                d.window_right = cases[i].wr;
                check_decode(ctx, &d, &rng, NULL);
            }
        /* more positions than keys, bottom-right: the first ones see nothing */
        fj_attention_desc d;
        fj_attention_desc_init(&d, 1, 4, 2, 3, 1, 64, FJ_BF16);
        d.causal = FJ_CAUSAL_BOTTOM_RIGHT;
        check_decode(ctx, &d, &rng, NULL);
        fj_context_destroy(ctx);
    }
}

/* Scores that rise along the keys move every row's max at every block and in
 * every chunk; falling ones never after the first. K and V built by hand
 * (k_j = ramp_j x the query's direction), sharp scale; long, so the keys are
 * split into chunks, and checked against double arithmetic here. */
static void test_ramps(void **state)
{
    (void)state;
    const int S = 5000, D = 24, H = 4;
    fj_context *ctx = make_context(3);
    float *q = malloc(sizeof(float) * H * D), *k = malloc(sizeof(float) * S * D),
          *v = malloc(sizeof(float) * S * D), *o = malloc(sizeof(float) * H * D),
          *lse = malloc(sizeof(float) * H);
    if (!q || !k || !v || !o || !lse) fail_msg("out of memory");
    fjt_rng rng;
    fjt_rng_init(&rng, suite_seed ^ 0xd005);
    for (int dir = -1; dir <= 1; dir += 2) {
        for (int i = 0; i < H * D; i++) q[i] = 0.25f + 0.01f * (float)fjt_uniform(&rng);
        for (int j = 0; j < S; j++)
            for (int c = 0; c < D; c++) {
                k[j * D + c] = (float)dir * (float)j * 0.002f + 0.01f * (float)fjt_uniform(&rng);
                v[j * D + c] = (float)(2.0 * fjt_uniform(&rng) - 1.0);
            }
        fj_attention_desc d;
        fj_attention_desc_init(&d, 1, H, 1, 1, S, D, FJ_F32);
        d.scale = 0.5f; /* scores up to 30: 2^-30 between the ends */
        fjt_poison_f32(o, (size_t)H * D);
        fjt_poison_f32(lse, H);
        assert_int_equal(fj_attention(ctx, &d, q, k, v, o, lse, NULL), FJ_OK);
        for (int h = 0; h < H; h++) {
            double m = -INFINITY, sum = 0, err = 0, norm = 0;
            double *s = malloc(sizeof(double) * S);
            for (int j = 0; j < S; j++) {
                double dot = 0;
                for (int c = 0; c < D; c++) dot += (double)q[h * D + c] * k[j * D + c];
                s[j] = dot * d.scale;
                m = fmax(m, s[j]);
            }
            for (int j = 0; j < S; j++) sum += exp(s[j] - m);
            for (int c = 0; c < D; c++) {
                double acc = 0;
                for (int j = 0; j < S; j++) acc += exp(s[j] - m) * v[j * D + c];
                acc /= sum;
                err += (acc - o[h * D + c]) * (acc - o[h * D + c]);
                norm += acc * acc;
            }
            free(s);
            if (!(sqrt(err / norm) <= 1e-5) || !(fabs(m + log(sum) - lse[h]) <= LSE_TOL))
                fail_msg("ramp %+d head %d: rel err %.3g, lse %.9g vs %.9g", dir, h,
                         sqrt(err / norm), (double)lse[h], m + log(sum));
        }
    }
    free(q), free(k), free(v), free(o), free(lse);
    fj_context_destroy(ctx);
}

/* Inputs whose rows overlap or repeat (seq stride 0: one key everywhere;
 * stride below head_dim), and kv heads that share memory (head stride 0). */
static void test_overlapping_inputs(void **state)
{
    (void)state;
    fjt_rng rng;
    fjt_rng_init(&rng, suite_seed ^ 0xd006);
    fj_context *ctx = make_context(2);
    for (int t = 0; t < 3; t++) {
        fj_attention_desc d;
        fj_attention_desc_init(&d, 2, 4, 2, 2, 1200, 40, (fj_dtype)t);
        d.k_stride[0] = 40;
        d.k_stride[1] = 0;
        d.k_stride[2] = 7;
        d.v_stride[0] = 1200 * 20;
        d.v_stride[1] = 20;
        d.v_stride[2] = 0;
        d.causal = FJ_CAUSAL_BOTTOM_RIGHT;
        check_decode(ctx, &d, &rng, NULL);
    }
    fj_context_destroy(ctx);
}

/* The choice: decode up to FJ_CPU_DECODE_MAX_ROWS rows per kv head, the tiled
 * path above, and the hook's modes. */
static void test_choice(void **state)
{
    (void)state;
    fj_context *ctx = make_context(2);
    char text[2048];
    fj_attention_desc d;
    fj_attention_desc_init(&d, 1, 32, 8, 4, 1000, 64, FJ_F32); /* 16 rows per kv head */
    plan_text(ctx, &d, text, sizeof text);
    if (!strstr(text, "method: decode") || !strstr(text, "16 query row(s) per kv head"))
        fail_msg("16 rows per kv head: not decode:\n%s", text);
    fj_attention_desc_init(&d, 1, 32, 8, 5, 1000, 64, FJ_F32); /* 20 */
    plan_text(ctx, &d, text, sizeof text);
    if (strstr(text, "method: decode") || strstr(text, "AMX"))
        fail_msg("20 f32 rows per kv head: not the tiled path:\n%s", text);
    fj_attention_desc_init(&d, 1, 32, 2, 5, 1000, 64, FJ_BF16); /* 80 bf16 rows */
    plan_text(ctx, &d, text, sizeof text);
    if (fj_decode_kernels_amx() ? !strstr(text, "method: AMX prefill: blocks of 32 query rows")
                                : strstr(text, "AMX") != NULL)
        fail_msg("bf16 prefill, GQA 16: %s AMX prefill:\n%s",
                 fj_decode_kernels_amx() ? "not" : "yet", text);
    /* turned off, or with a softcap or ALiBi: the AMX row blocks */
    for (int c = 0; c < 3; c++) {
        fj_cpu_prefill_amx_force_off(c == 0);
        d.softcap = c == 1 ? 5.0f : 0.0f;
        d.features = c == 2 ? FJ_FEATURE_ALIBI : 0;
        plan_text(ctx, &d, text, sizeof text);
        if (fj_decode_kernels_amx() ? !strstr(text, "AMX row blocks: blocks of 16 query rows")
                                    : strstr(text, "AMX") != NULL)
            fail_msg("bf16 prefill, GQA 16, case %d: %s AMX row blocks:\n%s", c,
                     fj_decode_kernels_amx() ? "not" : "yet", text);
    }
    fj_cpu_prefill_amx_force_off(false);
    d.softcap = 0.0f;
    d.features = 0;
    /* AMX turned off by the decode hook: no AMX prefill either */
    assert_int_equal(fj_cpu_decode_force(FJ_CPU_DECODE_NO_AMX), FJ_OK);
    plan_text(ctx, &d, text, sizeof text);
    if (strstr(text, "AMX")) fail_msg("AMX turned off, yet:\n%s", text);
    assert_int_equal(fj_cpu_decode_force(FJ_CPU_DECODE_AUTO), FJ_OK);
    fj_attention_desc_init(&d, 1, 34, 2, 5, 1000, 64, FJ_BF16); /* a group of 17: tiled */
    plan_text(ctx, &d, text, sizeof text);
    if (strstr(text, "AMX row blocks")) fail_msg("a group of 17 in AMX row blocks:\n%s", text);

    assert_int_equal(fj_cpu_decode_force(FJ_CPU_DECODE_OFF), FJ_OK);
    fj_context *off = make_context(2);
    fj_attention_desc_init(&d, 1, 8, 8, 1, 1000, 64, FJ_F32);
    plan_text(off, &d, text, sizeof text);
    if (strstr(text, "method: decode")) fail_msg("decode turned off, still decode:\n%s", text);
    fj_context_destroy(off);
    assert_int_equal(fj_cpu_decode_force(FJ_CPU_DECODE_AUTO), FJ_OK);
    assert_int_equal(fj_cpu_decode_force((fj_cpu_decode_mode)7), FJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(fj_last_error(), "decode mode"));

    /* keys split across workers: chunks when the kv heads are fewer than the
       tasks wanted, none on one worker */
    fj_attention_desc_init(&d, 1, 4, 1, 1, 8192, 64, FJ_BF16);
    plan_text(ctx, &d, text, sizeof text);
    if (!strstr(text, "merged by lse"))
        fail_msg("one kv head, 8192 keys, 2 workers: no split:\n%s", text);
    fj_context *one = make_context(1);
    plan_text(one, &d, text, sizeof text);
    if (!strstr(text, "in 1 chunk(s)")) fail_msg("one worker: split:\n%s", text);
    fj_context_destroy(one);
    /* a small call stays on the calling thread */
    fj_attention_desc_init(&d, 1, 8, 8, 1, 64, 64, FJ_BF16);
    plan_text(ctx, &d, text, sizeof text);
    if (!strstr(text, "1 task(s)") || !strstr(text, "calling thread alone"))
        fail_msg("a 128 KiB call: not one task:\n%s", text);
    fj_context_destroy(ctx);
}

/* The workspace does not grow with the keys. */
static void test_workspace_bounded(void **state)
{
    (void)state;
    fj_context *ctx = make_context(2);
    size_t bytes[2];
    for (int i = 0; i < 2; i++) {
        fj_attention_desc d;
        fj_attention_desc_init(&d, 1, 16, 1, 1, i ? 1 << 22 : 1 << 14, 256, FJ_F32);
        char text[2048];
        plan_text(ctx, &d, text, sizeof text);
        const char *w = strstr(text, "workspace: ");
        const char *part = strstr(text, "threads, ");
        if (!w || !part) fail_msg("no workspace line:\n%s", text);
        bytes[i] = strtoull(w + strlen("workspace: "), NULL, 10) +
                   strtoull(part + strlen("threads, "), NULL, 10);
    }
    assert_int_equal(bytes[0], bytes[1]);
    assert_true(bytes[1] <= (size_t)4 << 20);
    fj_context_destroy(ctx);
}

/* A scores kernel on its own (the AVX-512 and generic sets: f32, f16 and
 * bf16 widened, bf16 as AVX-512 BF16 dot products; the AMX set):
 * every row count 1-16 (the AVX-512 kernels take them four, three, two or
 * one at a time, each key chunk loaded once for the rows of a pass), head
 * dims whose last chunk is whole or partial, 1-255 keys, query rows padded
 * or not; each score against the double dot product of the same values
 * (float queries in the column order the set keeps, decode_kernels.h
 * `order`), and the score columns past the keys untouched. */
static void check_scores_kernel(const fj_decode_kernels *kern, fj_dtype dtype, uint64_t salt)
{
    fjt_rng rng;
    fjt_rng_init(&rng, suite_seed ^ salt);
    enum { LDS = FJ_DECODE_MAX_BLOCK + 8 };
    static const int dims[] = {32, 64, 100, 128, 200, 256};
    static const int keys[] = {1, 15, 16, 17, 31, 32, 33, 64, 100, 128, 255};
    const size_t qcols = FJ_MAX_HEAD_DIM + 64, elem = dtype == FJ_F32 ? 4 : 2;
    float *scratch =
        malloc(sizeof(float) * FJ_DECODE_MAX_BLOCK * (FJ_MAX_HEAD_DIM + FJ_DECODE_PAD));
    float *s = malloc(sizeof(float) * FJ_CPU_DECODE_MAX_ROWS * LDS);
    double *qd = malloc(sizeof(double) * FJ_CPU_DECODE_MAX_ROWS * qcols); /* natural order */
    float *qf = malloc(sizeof(float) * FJ_CPU_DECODE_MAX_ROWS * qcols);   /* as given */
    assert_non_null(scratch);
    assert_non_null(s);
    assert_non_null(qd);
    assert_non_null(qf);
    uint16_t *qb = (uint16_t *)qf;
    for (int di = 0; di < NELEMS(dims); di++) {
        const int D = dims[di], dpad = (D + FJ_DECODE_PAD - 1) / FJ_DECODE_PAD * FJ_DECODE_PAD;
        const int k_ld = D + 8 * (di % 2);
        char *k = malloc(elem * FJ_DECODE_MAX_BLOCK * (size_t)k_ld);
        double *kd = malloc(sizeof(double) * FJ_DECODE_MAX_BLOCK * (size_t)k_ld);
        assert_non_null(k);
        assert_non_null(kd);
        for (int i = 0; i < FJ_DECODE_MAX_BLOCK * k_ld; i++) {
            const float x = (float)(2.0 * fjt_uniform(&rng) - 1.0);
            if (dtype == FJ_F32) ((float *)k)[i] = x, kd[i] = x;
            else if (dtype == FJ_F16)
                ((uint16_t *)k)[i] = fj_f32_to_f16(x), kd[i] = fj_f16_to_f32(fj_f32_to_f16(x));
            else ((uint16_t *)k)[i] = fj_f32_to_bf16(x), kd[i] = fj_bf16_to_f32(fj_f32_to_bf16(x));
        }
        for (int nr = 1; nr <= FJ_CPU_DECODE_MAX_ROWS; nr++) {
            const int ldq = dpad + 32 * (nr % 2);
            for (int r = 0; r < nr; r++)
                for (int i = 0; i < ldq; i++) {
                    /* position i holds column c of the row (bf16 queries are taken
                       in their own order, decode.c's load_queries) */
                    const bool ordered = kern->order && !kern->q_bf16 && i < dpad;
                    const int c = ordered ? i / 32 * 32 + kern->order[i % 32] : i;
                    float x = c < D ? (float)(2.0 * fjt_uniform(&rng) - 1.0) : 0.0f;
                    if (kern->q_bf16) {
                        x = fj_bf16_to_f32(fj_f32_to_bf16(x));
                        qb[(size_t)r * ldq + i] = fj_f32_to_bf16(x);
                    } else qf[(size_t)r * ldq + i] = x;
                    if (c < D) qd[(size_t)r * qcols + c] = x;
                }
            for (int ki = 0; ki < NELEMS(keys); ki++) {
                const int nk = keys[ki];
                const float alpha = 0.37f;
                for (int i = 0; i < FJ_CPU_DECODE_MAX_ROWS * LDS; i++) s[i] = NAN;
                kern->scores(qf, ldq, nr, k, k_ld, nk, D, alpha, s, LDS, scratch, NULL);
                for (int r = 0; r < nr; r++)
                    for (int j = 0; j < LDS; j++) {
                        const float got = s[(size_t)r * LDS + j];
                        if (j >= nk) {
                            if (!isnan(got))
                                fail_msg("%s %s D %d nr %d nk %d: row %d column %d past the keys "
                                         "written (%g)",
                                         kern->name, fj_dtype_name(dtype), D, nr, nk, r, j, got);
                            continue;
                        }
                        double dot = 0.0, mag = 0.0;
                        for (int c = 0; c < D; c++) {
                            const double x = qd[(size_t)r * qcols + c],
                                         y = kd[(size_t)j * k_ld + c];
                            dot += x * y;
                            mag += fabs(x * y);
                        }
                        const double want = alpha * dot, tol = 1e-5 * alpha * mag + 1e-30;
                        if (!(fabs(got - want) <= tol))
                            fail_msg("%s %s D %d nr %d nk %d: score (%d, %d) %.9g, want %.9g "
                                     "(seed %llu)",
                                     kern->name, fj_dtype_name(dtype), D, nr, nk, r, j, got, want,
                                     (unsigned long long)suite_seed);
                    }
            }
        }
        free(k);
        free(kd);
    }
    free(scratch);
    free(s);
    free(qd);
    free(qf);
}

/* The AMX scores kernel on its own, through the same check: every row count
 * a decode block has (1-16: its query rows go to the B tiles four at a
 * time, the rows past nr zero), head dims whose last chunk of 32 columns is
 * whole or partial, key counts around its groups of 16 and 32, each score
 * against the double dot product of the same bf16 values, the columns past
 * nk untouched. */
static void test_amx_scores_rows(void **state)
{
    (void)state;
    const fj_decode_kernels *kern = fj_decode_kernels_amx();
    if (!kern) {
        print_message("no AMX on this CPU: its scores kernel is not run\n");
        return;
    }
    check_scores_kernel(kern, FJ_BF16, 0xd0a5);
}

static void test_scores_rows(void **state)
{
    (void)state;
    static const fj_dtype dtypes[] = {FJ_F32, FJ_F16, FJ_BF16};
    for (int t = 0; t < NELEMS(dtypes); t++) {
        const fj_decode_kernels *avx = fj_decode_kernels_avx512(dtypes[t]);
        if (avx) check_scores_kernel(avx, dtypes[t], 0xd0b0 + (uint64_t)t);
        else
            print_message("no AVX-512 here: its %s scores kernel is not run\n",
                          fj_dtype_name(dtypes[t]));
        check_scores_kernel(fj_decode_kernels_generic(dtypes[t]), dtypes[t], 0xd0c0 + (uint64_t)t);
    }
    const fj_decode_kernels *dot = fj_decode_kernels_avx512_bf16_dot();
    if (dot) check_scores_kernel(dot, FJ_BF16, 0xd0d0);
    else print_message("no AVX-512 BF16 here: its scores kernel is not run\n");
}

int main(void)
{
    suite_seed = fjt_seed();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_choice),
        cmocka_unit_test(test_workspace_bounded),
        cmocka_unit_test(test_edges),
        cmocka_unit_test(test_rows_without_keys),
        cmocka_unit_test(test_overlapping_inputs),
        cmocka_unit_test(test_ramps),
        cmocka_unit_test(test_random),
        cmocka_unit_test(test_random_fine_split),
        cmocka_unit_test(test_random_generic),
        cmocka_unit_test(test_random_no_amx),
        cmocka_unit_test(test_random_widened),
        cmocka_unit_test(test_softcap),
        cmocka_unit_test(test_alibi_sinks),
        cmocka_unit_test(test_head_dim_v),
        cmocka_unit_test(test_amx_prefill),
        cmocka_unit_test(test_amx_prefill_tiles),
        cmocka_unit_test(test_amx_prefill_long),
        cmocka_unit_test(test_amx_scores_rows),
        cmocka_unit_test(test_scores_rows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
