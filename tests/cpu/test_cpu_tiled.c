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

#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "case.h"
#include "check.h"
#include "harness.h"
#include "half.h"
#include "cpu/tiled_blocks.h"
#include "cpu/tiled_kernels.h"
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

/* ---- the tile kernels ------------------------------------------------------ */

#define LANES FJ_TILED_LANES

/* The kernels this CPU runs, or NULL after saying why the tests of them skip. */
static const fj_tiled_kernels *tile_kernels(void)
{
    const fj_tiled_kernels *k = fj_cpu_tiled_kernels(FJ_F32);
    if (!k) printf("# no tile kernels on this CPU (no AVX-512): their tests skip\n");
    return k;
}

/* The kernel sets this CPU has, each with the dtype its copies take (the
 * AVX-512 set f32, the bf16 set bf16); the count. */
typedef struct kernel_set {
    const fj_tiled_kernels *kern;
    fj_dtype dtype;
} kernel_set;

static int kernel_sets(kernel_set sets[2])
{
    int n = 0;
    const fj_tiled_kernels *f = fj_tiled_kernels_avx512(), *b = fj_tiled_kernels_avx512_bf16();
    if (f) sets[n++] = (kernel_set){f, FJ_F32};
    if (b) sets[n++] = (kernel_set){b, FJ_BF16};
    else printf("# no AVX-512 BF16 on this CPU: the bf16 tile kernels' tests skip\n");
    return n;
}

static float uniform_pm(fjt_rng *rng) { return (float)(2.0 * fjt_uniform(rng) - 1.0); }

/* Whether x still holds fjt_poison_f32's pattern (never written). */
static bool is_poison(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u == 0xffffffffu;
}

/* x as the set's dtype holds it (bf16: rounded), and stored so into row[i]. */
static float put(void *row, int64_t i, fj_dtype t, float x)
{
    if (t == FJ_F32) {
        ((float *)row)[i] = x;
        return x;
    }
    const uint16_t h = fj_f32_to_bf16(x);
    ((uint16_t *)row)[i] = h;
    return fj_bf16_to_f32(h);
}

/* Scores and values of each kernel set against double sums, over head dims
 * and key counts around the kernels' groups of 12 and their 8/4/2/1 tails,
 * from even and odd keys of a block copied by the set (the bf16 set's V
 * copy pairs keys), with infinities in the keys beside the range (never
 * multiplied); values with factors 0, 1 and in between. The bound: float
 * sums of D products, each off by a rounding, so within 2 D eps of the sum
 * of the products' magnitudes; the bf16 set's operands are bf16 values and
 * its P rounded to bf16 where it pairs two keys (tiled_avx512_bf16.c: not a
 * key taken alone at either end of the range). */
static void check_scores_values(const kernel_set *set, fjt_rng *rng)
{
    const fj_tiled_kernels *kern = set->kern;
    const fj_dtype dt = set->dtype;
    const size_t es = dt == FJ_F32 ? 4 : 2;
    static const int dims[] = {1, 3, 12, 16, 17, 64, 100, 128, 256, 300, 511, 512, 576};
    static const int keys[] = {1, 2, 3, 4, 5, 7, 8, 11, 12, 13, 23, 24, 25, 37, 128};
    static const int firsts[] = {0, 1, 2, 5};
    const int maxd = FJ_MAX_HEAD_DIM, maxk = 128 + 8, lds = maxd + 5;
    float *rows = malloc(sizeof(float) * LANES * maxd);
    float *kf = malloc(sizeof(float) * maxk * maxd); /* the keys' values as floats */
    void *src = malloc(es * maxk * lds);
    void *qp = malloc(kern->query_bytes(maxd)), *kc = malloc(kern->copy_bytes(maxd, maxk));
    float *st = malloc(sizeof(float) * maxk * LANES), *pt = malloc(sizeof(float) * maxk * LANES);
    float *ot = malloc(sizeof(float) * maxd * LANES), *ot0 = malloc(sizeof(float) * maxd * LANES);
    for (int a = 0; a < NELEMS(dims); a++)
        for (int b = 0; b < NELEMS(keys); b++) {
            const int D = dims[a], n = keys[b], key0 = firsts[(a + 2 * b) % NELEMS(firsts)];
            const int nblock = key0 + n + 3; /* keys beside the range on both sides */
            const float *rp[LANES];
            for (int r = 0; r < LANES; r++) {
                for (int d = 0; d < D; d++) {
                    const float x = uniform_pm(rng);
                    rows[r * D + d] = dt == FJ_F32 ? x : fj_bf16_to_f32(fj_f32_to_bf16(x));
                }
                rp[r] = rows + r * D;
            }
            kern->pack_queries(rp, D, qp);
            for (int j = 0; j < nblock; j++)
                for (int d = 0; d < D; d++) {
                    const bool inside = j >= key0 && j < key0 + n;
                    kf[j * D + d] = put(src, (int64_t)j * lds + d, dt,
                                        inside ? uniform_pm(rng) : (d % 2 ? INFINITY : -INFINITY));
                }
            kern->copy_keys(kc, src, lds, dt, nblock, D);
            /* all 32 lanes, or one half alone (the other half untouched) */
            const int half = (a + b) % 3 - 1, off = half == 1 ? 16 : 0;
            const int lanes = half < 0 ? LANES : 16;
            const float alpha = b % 2 ? 1.0f : 0.37f;
            fjt_poison_f32(st, (size_t)maxk * LANES);
            kern->scores((const unsigned char *)qp + off * 4, D, kc, key0, n, alpha, st + off,
                         lanes);
            for (int j = 0; j < n; j++)
                for (int r = 0; r < LANES; r++) {
                    if (r < off || r >= off + lanes) {
                        if (!is_poison(st[j * LANES + r]))
                            fail_msg("%s scores D %d n %d, %d lanes from %d: wrote lane %d",
                                     kern->name, D, n, lanes, off, r);
                        continue;
                    }
                    double want = 0, mag = 0;
                    for (int d = 0; d < D; d++) {
                        const double x = (double)rows[r * D + d] * kf[(key0 + j) * D + d];
                        want += x;
                        mag += fabs(x);
                    }
                    want *= alpha, mag *= alpha;
                    if (!(fabs(st[j * LANES + r] - want) <=
                          2.0 * (D + 1) * FLT_EPSILON * mag + 1e-30))
                        fail_msg("%s scores D %d n %d from %d: key %d lane %d = %.9g, want %.9g",
                                 kern->name, D, n, key0, j, r, (double)st[j * LANES + r], want);
                }
            for (int j = n; j < maxk; j++) /* nothing past the keys written */
                if (!is_poison(st[j * LANES]))
                    fail_msg("%s scores D %d n %d: wrote key %d", kern->name, D, n, j);

            /* values: the same block as V */
            kern->copy_values(kc, src, lds, dt, nblock, D);
            float factor[LANES];
            for (int r = 0; r < LANES; r++)
                factor[r] = r % 4 == 0 ? 1.0f : r % 4 == 1 ? 0.0f : (float)fjt_uniform(rng);
            for (int i = 0; i < n * LANES; i++) pt[i] = st[i] = (float)fjt_uniform(rng);
            for (int i = 0; i < D * LANES; i++) ot[i] = ot0[i] = uniform_pm(rng);
            kern->values(pt + off, n, kc, key0, D, factor + off, ot + off, lanes);
            /* the bf16 set: keys alone at the ends of the range keep f32 P */
            const int lead = dt == FJ_BF16 && key0 % 2;
            const int tail = dt == FJ_BF16 && (n - lead) % 2;
            for (int d = 0; d < D; d++)
                for (int r = 0; r < LANES; r++) {
                    if (r < off || r >= off + lanes) {
                        if (ot[d * LANES + r] != ot0[d * LANES + r])
                            fail_msg("%s values D %d n %d, %d lanes from %d: wrote lane %d",
                                     kern->name, D, n, lanes, off, r);
                        continue;
                    }
                    double want = (double)ot0[d * LANES + r] * factor[r], mag = fabs(want);
                    for (int j = 0; j < n; j++) {
                        float p = st[j * LANES + r];
                        const bool alone = (lead && j == 0) || (tail && j == n - 1);
                        if (dt == FJ_BF16 && !alone) p = fj_bf16_to_f32(fj_f32_to_bf16(p));
                        want += (double)p * kf[(key0 + j) * D + d];
                        mag += fabs((double)p * kf[(key0 + j) * D + d]);
                    }
                    if (!(fabs(ot[d * LANES + r] - want) <=
                          2.0 * (n + 1) * FLT_EPSILON * mag + 1e-30))
                        fail_msg("%s values D %d n %d from %d: column %d lane %d = %.9g, want "
                                 "%.9g",
                                 kern->name, D, n, key0, d, r, (double)ot[d * LANES + r], want);
                }
        }
    free(rows), free(kf), free(src), free(qp), free(kc), free(st), free(pt), free(ot), free(ot0);
}

static void test_tile_scores_values(void **state)
{
    (void)state;
    kernel_set sets[2];
    const int n = tile_kernels() ? kernel_sets(sets) : 0;
    fjt_rng rng;
    fjt_rng_init(&rng, suite_seed ^ 0x7117);
    for (int i = 0; i < n; i++) check_scores_values(&sets[i], &rng);
}

/* The lanes' online-softmax step against double arithmetic, as
 * test_row_kernel_steps does for the row kernel: several steps per lane with
 * the max rising, falling and unchanged; per step, each lane's own seen keys
 * [lo, hi) (none at all for some lanes, in some steps or in every one) or the
 * whole block (lo and hi NULL). Then a NaN and a +inf score: the lane's sum
 * NaN, the other lanes untouched. */
static void test_tile_softmax(void **state)
{
    (void)state;
    const fj_tiled_kernels *kern = tile_kernels();
    if (!kern) return;
    fjt_rng rng;
    fjt_rng_init(&rng, suite_seed ^ 0x5115);
    enum { MAXN = 70 };
    float st[MAXN * LANES], max[LANES], sum[LANES], factor[LANES];
    double dmax[LANES], dsum[LANES];
    for (int trial = 0; trial < 200; trial++) {
        for (int r = 0; r < LANES; r++) {
            max[r] = -INFINITY, sum[r] = 0.0f;
            dmax[r] = -INFINITY, dsum[r] = 0.0;
        }
        const bool never = trial % 3 == 0; /* lane 5 never sees a key */
        for (int step = 0; step < 4; step++) {
            const int n = fjt_range(&rng, 1, MAXN);
            const bool whole = step == 1 && trial % 2 && !never;
            int32_t lo[LANES], hi[LANES];
            for (int r = 0; r < LANES; r++) {
                lo[r] = fjt_range(&rng, 0, n);
                hi[r] = fjt_range(&rng, lo[r], n); /* may be empty */
                if (r % 7 == 3) lo[r] = 0, hi[r] = n;
                if (never && r == 5) lo[r] = hi[r] = n / 2;
                if (whole) lo[r] = 0, hi[r] = n;
            }
            const double shift = 20.0 * (fjt_uniform(&rng) - 0.5);
            for (int j = 0; j < n; j++)
                for (int r = 0; r < LANES; r++) {
                    float x = (float)(shift + 10.0 * (fjt_uniform(&rng) - 0.5));
                    if (step == 3) x = max[r] - 1.0f - (float)fjt_uniform(&rng); /* max stays */
                    st[j * LANES + r] = x;
                }
            double want_p[MAXN * LANES], want_f[LANES], dmax_before[LANES], dsum_before[LANES];
            memcpy(dmax_before, dmax, sizeof dmax);
            memcpy(dsum_before, dsum, sizeof dsum);
            for (int r = 0; r < LANES; r++) {
                double bm = dmax[r];
                for (int j = lo[r]; j < hi[r]; j++) bm = fmax(bm, (double)st[j * LANES + r]);
                const double z = bm == -INFINITY ? 0.0 : bm, bs0 = 0;
                double bs = bs0;
                for (int j = 0; j < n; j++) {
                    want_p[j * LANES + r] =
                        j >= lo[r] && j < hi[r] ? exp2((double)st[j * LANES + r] - z) : 0.0;
                    bs += want_p[j * LANES + r];
                }
                want_f[r] = exp2(dmax[r] - z);
                dsum[r] = dsum[r] * want_f[r] + bs;
                dmax[r] = bm;
            }
            /* one half alone in some steps: the other's state stays */
            const int half = trial % 4 == 1 && step == 2 ? trial % 8 / 4 : -1;
            const int off = half == 1 ? 16 : 0, lanes = half < 0 ? LANES : 16;
            float keep_max[LANES], keep_sum[LANES], keep_f[LANES], keep_st[MAXN * LANES];
            memcpy(keep_max, max, sizeof max);
            memcpy(keep_sum, sum, sizeof sum);
            memcpy(keep_f, factor, sizeof factor);
            memcpy(keep_st, st, sizeof(float) * n * LANES);
            kern->softmax(st + off, n, whole ? NULL : lo + off, whole ? NULL : hi + off, max + off,
                          sum + off, factor + off, lanes);
            for (int r = 0; r < LANES; r++) {
                if (r < off || r >= off + lanes) { /* the other half: untouched */
                    if (memcmp(&max[r], &keep_max[r], sizeof max[r]) ||
                        memcmp(&sum[r], &keep_sum[r], sizeof sum[r]) ||
                        memcmp(&factor[r], &keep_f[r], sizeof factor[r]))
                        fail_msg("trial %d: the half from %d wrote lane %d's state", trial, off, r);
                    for (int j = 0; j < n; j++)
                        if (memcmp(&st[j * LANES + r], &keep_st[j * LANES + r], sizeof(float)))
                            fail_msg("trial %d: the half from %d wrote lane %d's p", trial, off, r);
                    dmax[r] = dmax_before[r]; /* and the double reference undone */
                    dsum[r] = dsum_before[r];
                    continue;
                }
                if ((double)max[r] != dmax[r])
                    fail_msg("trial %d step %d lane %d: max %.9g, want %.9g", trial, step, r,
                             (double)max[r], dmax[r]);
                if (!(fabs(factor[r] - want_f[r]) <= 1e-6 * want_f[r]) ||
                    (want_f[r] == 1.0 && factor[r] != 1.0f) ||
                    (want_f[r] == 0.0 && factor[r] != 0.0f))
                    fail_msg("trial %d step %d lane %d: factor %.9g, want %.9g", trial, step, r,
                             (double)factor[r], want_f[r]);
                if (!(fabs(sum[r] - dsum[r]) <= 2e-6 * dsum[r]))
                    fail_msg("trial %d step %d lane %d: sum %.9g, want %.9g", trial, step, r,
                             (double)sum[r], dsum[r]);
                for (int j = 0; j < n; j++) {
                    const double want = want_p[j * LANES + r];
                    const float got = st[j * LANES + r];
                    if (want == 0.0 ? got != 0.0f : !(fabs(got - want) <= 1e-6 * want))
                        fail_msg("trial %d step %d lane %d [%d, %d) of %d: p[%d] = %.9g, want %.9g",
                                 trial, step, r, lo[r], hi[r], n, j, (double)got, want);
                }
            }
        }
        if (never && !(max[5] == -INFINITY && sum[5] == 0.0f))
            fail_msg("trial %d: a lane that saw no key has max %g, sum %g", trial, (double)max[5],
                     (double)sum[5]);
    }
    /* non-finite scores: lane 2 a NaN, lane 9 a +inf, among finite ones */
    for (int r = 0; r < LANES; r++) max[r] = -INFINITY, sum[r] = 0.0f;
    for (int j = 0; j < 20; j++)
        for (int r = 0; r < LANES; r++) st[j * LANES + r] = (float)j * 0.1f;
    st[7 * LANES + 2] = NAN;
    st[3 * LANES + 9] = INFINITY;
    kern->softmax(st, 20, NULL, NULL, max, sum, factor, LANES);
    for (int r = 0; r < LANES; r++) {
        const bool bad = r == 2 || r == 9;
        if (bad ? !isnan(sum[r]) : !(sum[r] > 1.0f && isfinite(sum[r])))
            fail_msg("non-finite scores: lane %d sum %g", r, (double)sum[r]);
    }
}

/* A float drawn to exercise the conversions: mostly uniform, sometimes
 * NaN, an infinity, beyond f16's range, in its subnormal range, a tie
 * between two f16 or bf16 values, or zero. */
static float awkward(fjt_rng *rng)
{
    const int kind = fjt_range(rng, 0, 19);
    const float sign = fjt_uniform(rng) < 0.5 ? -1.0f : 1.0f;
    switch (kind) {
    case 0: return NAN;
    case 1: return sign * INFINITY;
    case 2: return sign * 70000.0f * (float)(1.0 + fjt_uniform(rng));
    case 3: return sign * 3e-6f * (float)fjt_uniform(rng); /* f16 subnormal */
    case 4: return sign * (1.0f + (float)fjt_range(rng, 0, 1023) / 1024.0f + 1.0f / 2048.0f);
    case 5: return sign * (1.0f + (float)fjt_range(rng, 0, 127) / 128.0f + 1.0f / 256.0f);
    case 6: return 0.0f;
    default: return sign * (float)(4.0 * fjt_uniform(rng));
    }
}

/* Queries packed (the AVX-512 set's layout: transposed); outputs stored scaled into rows
 * of their own, as f32 (bit for bit) and as f16 and bf16 (bit for bit what
 * half.h's conversions give, NaN included); rows loaded from f16 and bf16 as
 * half.h widens them. Head dims around the transposes' 16. */
static void test_tile_pack_store_load(void **state)
{
    (void)state;
    const fj_tiled_kernels *kern = tile_kernels();
    if (!kern) return;
    static const int dims[] = {1, 5, 15, 16, 17, 31, 33, 100, 128, 256, 257, 511, 512, 576};
    /* output rows RS apart (64-byte multiples; D + the offset 3 fits) */
    enum { MAXD = FJ_MAX_HEAD_DIM, RS = MAXD + 16 };
    fjt_rng rng;
    fjt_rng_init(&rng, suite_seed ^ 0x3113);
    float *rows = malloc(sizeof(float) * LANES * MAXD);
    float *qp = malloc(sizeof(float) * (MAXD + 1) * LANES);
    float *back = aligned_alloc(64, sizeof(float) * LANES * (RS + 12));
    uint16_t *half = malloc(sizeof(uint16_t) * LANES * (RS + 12));
    for (int a = 0; a < NELEMS(dims); a++) {
        const int D = dims[a];
        for (int i = 0; i < LANES * D; i++) rows[i] = uniform_pm(&rng);
        fjt_poison_f32(qp, (size_t)(MAXD + 1) * LANES);
        const float *src[LANES]; /* rows in turn, one missing (zeros) */
        for (int r = 0; r < LANES; r++) src[r] = r == a % LANES ? NULL : rows + r * D;
        kern->pack_queries(src, D, qp);
        for (int d = 0; d < D; d++)
            for (int r = 0; r < LANES; r++) {
                const float want = src[r] ? rows[r * D + d] : 0.0f;
                if (qp[d * LANES + r] != want)
                    fail_msg("pack D %d: [%d][%d] = %g, want %g", D, d, r,
                             (double)qp[d * LANES + r], (double)want);
            }
        if (!is_poison(qp[D * LANES])) fail_msg("pack D %d wrote past head_dim", D);

        /* stored scaled: rows at odd offsets (no streaming) or on 64 bytes,
           some skipped, a partial last half; awkward values */
        for (int i = 0; i < LANES * D; i++) qp[i] = awkward(&rng);
        const int nrows = LANES - a % 3, off = a % 2 ? 3 : 0;
        void *dst[LANES];
        float scale[LANES];
        for (int r = 0; r < LANES; r++) scale[r] = r % 3 ? 1.0f : 0.5f + (float)r;
        for (int t = 0; t < 3; t++) {
            const fj_dtype dt = t == 0 ? FJ_F32 : t == 1 ? FJ_F16 : FJ_BF16;
            fjt_poison_f32(back, (size_t)LANES * (RS + 12));
            memset(half, 0xff, sizeof(uint16_t) * LANES * (RS + 12));
            for (int r = 0; r < LANES; r++)
                dst[r] = r % 5 == 4     ? NULL
                         : dt == FJ_F32 ? (void *)(back + r * RS + off)
                                        : (void *)(half + r * RS + off);
            kern->store_outputs(qp, D, dst, dt, scale, nrows);
            for (int r = 0; r < LANES; r++)
                for (int d = 0; d < RS - 3; d++) {
                    const bool written = r < nrows && dst[r] && d < D;
                    const float x = written ? qp[d * LANES + r] * scale[r] : 0.0f;
                    if (dt == FJ_F32) {
                        const float got = back[r * RS + off + d];
                        const bool ok = !written   ? is_poison(got)
                                        : isnan(x) ? (bool)isnan(got)
                                                   : memcmp(&got, &x, sizeof x) == 0;
                        if (!ok)
                            fail_msg("store f32 D %d rows %d: row %d column %d = %g, want %g", D,
                                     nrows, r, d, (double)got, (double)x);
                    } else {
                        const uint16_t got = half[r * RS + off + d];
                        const uint16_t want = !written       ? 0xffffu
                                              : dt == FJ_F16 ? fj_f32_to_f16(x)
                                                             : fj_f32_to_bf16(x);
                        if (got != want)
                            fail_msg("store %s D %d rows %d: row %d column %d (%.9g) = 0x%04x, "
                                     "want 0x%04x",
                                     fj_dtype_name(dt), D, nrows, r, d, (double)x, got, want);
                    }
                }
        }

        /* loaded from f16 / bf16 rows an odd stride apart */
        for (int t = 0; t < 2; t++) {
            const fj_dtype dt = t ? FJ_BF16 : FJ_F16;
            const int lds = D + 7, nr = 5;
            for (int i = 0; i < nr * lds; i++)
                half[i] =
                    dt == FJ_F16 ? fj_f32_to_f16(awkward(&rng)) : fj_f32_to_bf16(awkward(&rng));
            fjt_poison_f32(back, (size_t)LANES * (RS + 12));
            kern->load_rows(back, D + 1, half, lds, dt, nr, D);
            for (int r = 0; r < nr; r++)
                for (int d = 0; d <= D; d++) {
                    const float got = back[r * (D + 1) + d];
                    const uint16_t h = half[r * lds + d];
                    const float want = dt == FJ_F16 ? fj_f16_to_f32(h) : fj_bf16_to_f32(h);
                    const bool ok = d == D        ? is_poison(got)
                                    : isnan(want) ? (bool)isnan(got)
                                                  : memcmp(&got, &want, sizeof got) == 0;
                    if (!ok)
                        fail_msg("load %s D %d: row %d column %d = %g, want %g", fj_dtype_name(dt),
                                 D, r, d, (double)got, (double)want);
                }
        }
    }
    free(rows), free(qp), free(back), free(half);
}

/* The tile path and the sgemm path on the causal diagonal's edge cases:
 * seqlens around the 32-row tiles and the forced blocks (31..33, 63..65,
 * 127..129), primes, Sq != Sk both ways, both causal alignments, windows,
 * GQA rows stacked in a tile, every dtype; each against the oracle and the
 * reference (fjt_case_check), the tile path first, then the same problem
 * with sgemm forced. */
static void test_tile_causal_edges(void **state)
{
    (void)state;
    static const int seqs[] = {31, 32, 33, 37, 63, 64, 65, 101, 127, 128, 129, 257};
    static const int deltas[] = {0, 17, -17, 1, -1};
    static const fj_dtype dtypes[] = {FJ_F32, FJ_F16, FJ_BF16};
    static const int blocks[][2] = {{0, 0}, {32, 16}, {48, 33}, {64, 128}, {96, 7}};
    const bool tiles = fj_cpu_tiled_kernels(FJ_F32) != NULL;
    if (!tiles) printf("# no tile kernels on this CPU: the sgemm path alone\n");
    const bool bf16_dot = tiles && fj_cpu_tiled_kernels(FJ_BF16) != fj_cpu_tiled_kernels(FJ_F32);
    int n = 0, n_dot = 0;
    for (int s = 0; s < NELEMS(seqs); s++)
        for (int v = 0; v < NELEMS(deltas); v++) {
            const int sq = seqs[s], sk = seqs[s] + deltas[v];
            const int variant = s * NELEMS(deltas) + v;
            const int *bl = blocks[variant % NELEMS(blocks)];
            assert_int_equal(fj_cpu_tiled_force_blocks(bl[0], bl[1]), FJ_OK);
            /* mode 0: the kernels the CPU picks, 1: sgemm forced, 2: bf16
               widened to the AVX-512 set where the bf16 set is the pick */
            for (int mode = 0; mode <= (tiles ? 2 : 0); mode++) {
                const fj_dtype dt = dtypes[variant % 3];
                if (mode == 2 && !(dt == FJ_BF16 && bf16_dot)) continue;
                const bool blas = mode == 1;
                fj_cpu_tiled_force_blas(blas);
                fj_cpu_tiled_force_widened_bf16(mode == 2);
                checkers c = {make_context(FJ_BACKEND_CPU, 2),
                              make_context(FJ_BACKEND_CPU_REFERENCE, 2)};
                fj_attention_desc d;
                const bool gqa = variant % 3 == 1;
                fj_attention_desc_init(&d, 1 + variant % 2, gqa ? 8 : 2, 2, sq, sk,
                                       variant % 4 == 0   ? 64
                                       : variant % 4 == 1 ? 17
                                                          : 32,
                                       dt);
                d.causal = variant % 2 ? FJ_CAUSAL_TOP_LEFT : FJ_CAUSAL_BOTTOM_RIGHT;
                if (variant % 5 == 2) d.window_left = 20;
                if (variant % 7 == 3)
                    d.causal = FJ_CAUSAL_NONE, d.window_left = 9, d.window_right = 5;
                char name[48];
                snprintf(name, sizeof name, "sq%d-sk%d-v%d-%s", sq, sk, variant,
                         mode == 1   ? "sgemm"
                         : mode == 2 ? "widened"
                                     : "tiles");
                fjt_case k =
                    fjt_case_make("tile-edges", name, &d, variant % 2 ? FJT_BHSD : FJT_DENSE, true);
                fj_plan *plan;
                assert_int_equal(fj_plan_create(c.tiled, &k.d, &plan), FJ_OK);
                const char *text = fj_plan_describe(plan);
                const bool on_tiles = strstr(text, "kernels: avx512") != NULL;
                const bool on_dot = strstr(text, "kernels: avx512-bf16-dot") != NULL;
                if (blas && on_tiles) fail_msg("%s: sgemm forced, yet:\n%s", name, text);
                if (on_tiles && on_dot != (mode == 0 && dt == FJ_BF16 && bf16_dot))
                    fail_msg("%s: %s the bf16 dot products:\n%s", name, on_dot ? "on" : "not on",
                             text);
                if (!blas && on_tiles) n++;
                n_dot += on_dot;
                fj_plan_destroy(plan);
                check_case(&c, &k);
                fj_context_destroy(c.tiled);
                fj_context_destroy(c.ref);
            }
            fj_cpu_tiled_force_blas(false);
            fj_cpu_tiled_force_widened_bf16(false);
        }
    assert_int_equal(fj_cpu_tiled_force_blocks(0, 0), FJ_OK);
    printf("# %d problems on the tile kernels, %d of them on the bf16 dot products\n", n, n_dot);
    if (bf16_dot) assert_true(n_dot > 0);
    if (tiles) assert_true(n > NELEMS(seqs) * NELEMS(deltas) / 2);
}

/* Head dims above 256 (up to FJ_MAX_HEAD_DIM) on the tiled path: the
 * conformance list's large-dims family (the decode-shaped cases too, which
 * the forced blocks send here), with blocks forced to sizes around the
 * tiles of 32 rows and across keys, on the kernels the plan picks (the tile
 * kernels for blocks of many rows, where the CPU has them) and with sgemm
 * forced. */
static void test_large_head_dims(void **state)
{
    (void)state;
    static const int blocks[][2] = {{64, 128}, {33, 47}, {32, 256}, {17, 300}};
    const bool tiles = fj_cpu_tiled_kernels(FJ_F32) != NULL;
    fjt_case_list all = {0};
    assert_true(fjt_cases_build(&all, suite_seed));
    int n = 0, big = 0, n_tiles = 0;
    for (int i = 0; i < all.n; i++) {
        const fjt_case *k = &all.cases[i];
        if (strcmp(k->group, "large-dims")) continue;
        assert_true(k->d.head_dim > 256 && k->d.head_dim <= FJ_MAX_HEAD_DIM);
        big += k->d.head_dim == FJ_MAX_HEAD_DIM;
        const int *bl = blocks[n % NELEMS(blocks)];
        assert_int_equal(fj_cpu_tiled_force_blocks(bl[0], bl[1]), FJ_OK);
        for (int blas = 0; blas <= (tiles ? 1 : 0); blas++) {
            fj_cpu_tiled_force_blas(blas);
            checkers c = {make_context(FJ_BACKEND_CPU, 3),
                          make_context(FJ_BACKEND_CPU_REFERENCE, 2)};
            fj_plan *plan;
            assert_int_equal(fj_plan_create(c.tiled, &k->d, &plan), FJ_OK);
            const char *text = fj_plan_describe(plan);
            if (!strstr(text, "forced"))
                fail_msg("%s: forced blocks not in describe:\n%s", k->name, text);
            const bool on_tiles = strstr(text, "kernels: avx512") != NULL;
            if (blas && on_tiles) fail_msg("%s: sgemm forced, yet:\n%s", k->name, text);
            n_tiles += on_tiles;
            fj_plan_destroy(plan);
            check_case(&c, k);
            fj_context_destroy(c.tiled);
            fj_context_destroy(c.ref);
        }
        fj_cpu_tiled_force_blas(false);
        n++;
    }
    assert_int_equal(fj_cpu_tiled_force_blocks(0, 0), FJ_OK);
    fjt_case_list_free(&all);
    printf("# %d large-dims cases (%d at head dim %d) on the tiled path, %d on the tile "
           "kernels\n",
           n, big, FJ_MAX_HEAD_DIM, n_tiles);
    assert_true(n >= 10 && big >= 2);
    if (tiles) assert_true(n_tiles >= n / 2); /* the prefill cases' blocks of many rows */
}

/* V's head dim other than Q's and K's (head_dim_v) on the tiled path: the
 * conformance list's head-dim-v family (its decode-shaped, varlen and paged
 * cases too), with blocks forced around the tiles of 32 rows and across
 * keys, on the tile kernels (where the CPU has them) and with sgemm forced:
 * each path's scores over head_dim and values, accumulators and stores over
 * head_dim_v, and the describe text giving both. */
static void test_head_dim_v(void **state)
{
    (void)state;
    static const int blocks[][2] = {{64, 128}, {33, 47}, {32, 256}, {17, 300}, {5, 9}};
    const bool tiles = fj_cpu_tiled_kernels(FJ_F32) != NULL;
    fjt_case_list all = {0};
    assert_true(fjt_cases_build(&all, suite_seed));
    int n = 0, n_tiles = 0, n_blas = 0;
    for (int i = 0; i < all.n; i++) {
        const fjt_case *k = &all.cases[i];
        if (strcmp(k->group, "head-dim-v")) continue;
        const int *bl = blocks[n % NELEMS(blocks)];
        assert_int_equal(fj_cpu_tiled_force_blocks(bl[0], bl[1]), FJ_OK);
        for (int blas = 0; blas <= (tiles ? 1 : 0); blas++) {
            fj_cpu_tiled_force_blas(blas);
            checkers c = {make_context(FJ_BACKEND_CPU, 3),
                          make_context(FJ_BACKEND_CPU_REFERENCE, 2)};
            fj_plan *plan;
            assert_int_equal(fj_plan_create(c.tiled, &k->d, &plan), FJ_OK);
            const char *text = fj_plan_describe(plan);
            if (!strstr(text, "forced"))
                fail_msg("%s: forced blocks not in describe:\n%s", k->name, text);
            const int dv = fjt_dim_v(&k->d);
            if (dv != k->d.head_dim) {
                char want[80];
                snprintf(want, sizeof want, "head dims: q and k %d, v and o %d", k->d.head_dim, dv);
                if (!strstr(text, want)) fail_msg("%s: not '%s':\n%s", k->name, want, text);
            }
            const bool on_tiles = strstr(text, "kernels: avx512") != NULL;
            if (blas && on_tiles) fail_msg("%s: sgemm forced, yet:\n%s", k->name, text);
            n_tiles += on_tiles;
            n_blas += strstr(text, "kernels: sgemm") != NULL;
            fj_plan_destroy(plan);
            check_case(&c, k);
            fj_context_destroy(c.tiled);
            fj_context_destroy(c.ref);
        }
        fj_cpu_tiled_force_blas(false);
        n++;
    }
    assert_int_equal(fj_cpu_tiled_force_blocks(0, 0), FJ_OK);
    fjt_case_list_free(&all);
    printf("# %d head-dim-v cases on the tiled path: %d on the tile kernels, %d on sgemm\n", n,
           n_tiles, n_blas);
    assert_true(n >= 30 && n_blas >= n);
    if (tiles) assert_true(n_tiles >= n / 2);
}

/* Softcap, ALiBi and sinks on the tile path with masks, against the oracle
 * and the reference. */
static void test_tile_features(void **state)
{
    (void)state;
    static const uint32_t features[] = {0, FJ_FEATURE_ALIBI, FJ_FEATURE_SINKS,
                                        FJ_FEATURE_ALIBI | FJ_FEATURE_SINKS};
    checkers c = {make_context(FJ_BACKEND_CPU, 2), make_context(FJ_BACKEND_CPU_REFERENCE, 2)};
    for (int i = 0; i < 8; i++) {
        fj_attention_desc d;
        fj_attention_desc_init(&d, 1, 4, 2, 70 + 13 * i, 90 - 7 * i, i % 2 ? 40 : 64,
                               i % 3 == 2 ? FJ_F16 : FJ_F32);
        d.causal = i % 2 ? FJ_CAUSAL_BOTTOM_RIGHT : FJ_CAUSAL_TOP_LEFT;
        if (i % 4 == 3) d.window_left = 25;
        d.features = features[i % 4];
        if (i >= 4) d.softcap = 15.0f;
        char name[48];
        snprintf(name, sizeof name, "features-%d", i);
        fjt_case k = fjt_case_make("tile-features", name, &d, FJT_DENSE, true);
        check_case(&c, &k);
    }
    fj_context_destroy(c.tiled);
    fj_context_destroy(c.ref);
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
    static const int dims[] = {8, 64, 128, 256, 384, 512, 576};
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
        cmocka_unit_test(test_forced_small_blocks), cmocka_unit_test(test_tile_scores_values),
        cmocka_unit_test(test_tile_softmax),        cmocka_unit_test(test_tile_pack_store_load),
        cmocka_unit_test(test_tile_causal_edges),   cmocka_unit_test(test_tile_features),
        cmocka_unit_test(test_large_head_dims),     cmocka_unit_test(test_head_dim_v),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
