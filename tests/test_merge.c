/* fj_merge on one backend (docs/semantics.md, "Merging"):
 *
 *   - attention over keys [0, s) merged with attention over keys [s, Sk)
 *     equals attention over all keys: checked against the double oracle of
 *     the whole problem (tests/common/harness.c) and against fj_attention
 *     over all keys on the same backend, on random problems (fresh seed,
 *     printed) with odd sizes, GQA, no mask, bottom-right and top-left
 *     causal and a left window, rows that see no key in one part or in
 *     both, f32, f16 and bf16, o_b in a padded head-major layout; outputs
 *     poisoned before each run; merged in place (o = o_a, lse = lse_a) gives
 *     the same bits;
 *   - the rules for -inf, NaN and +inf lse values, and a side of weight 0
 *     whose O is NaN (not read);
 *   - bad input: FJ_ERR_INVALID_ARGUMENT naming the argument, nothing
 *     written.
 *
 *   test_merge [--backend cpu-reference|cpu|cuda]   (default cpu)
 *
 * The partial results come from fj_attention on the backend itself where it
 * computes the problem (on CUDA: f16/bf16, head dims a multiple of 8), else
 * from a CPU reference context, copied over. Without a usable backend every
 * test skips saying why, and the exit status is 77 (meson: skipped). */
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

static fj_backend backend = FJ_BACKEND_CPU;
static const char *backend_label = "cpu";
static fj_context *ctx, *ref_ctx; /* the backend's; the CPU reference's (partials) */
static char no_ctx[2048];
static uint64_t seed;

#define REQUIRE_CTX()                        \
    do {                                     \
        if (!ctx) {                          \
            printf("SKIPPED: %s\n", no_ctx); \
            skip();                          \
        }                                    \
    } while (0)

#define CHECK(c) assert_int_equal((c), FJ_OK)

/* ---- backend memory --------------------------------------------------------------- */

static void *dev_alloc(fj_context *c, size_t bytes)
{
    void *p = NULL;
    CHECK(fj_malloc(c, bytes, &p));
    return p;
}

static void *dev_copy(fj_context *c, const void *host, size_t bytes)
{
    void *p = dev_alloc(c, bytes);
    CHECK(fj_copy_to_device(c, p, host, bytes));
    return p;
}

static void to_host(fj_context *c, void *host, const void *dev, size_t bytes)
{
    CHECK(fj_synchronize(c, NULL));
    CHECK(fj_copy_to_host(c, host, dev, bytes));
}

/* Whether the backend's fj_attention computes d (CUDA: f16/bf16, head dims a
   multiple of 8). */
static bool backend_attends(const fj_attention_desc *d)
{
    if (backend != FJ_BACKEND_CUDA) return true;
    return d->dtype != FJ_F32 && d->head_dim % 8 == 0;
}

/* ---- one random case ---------------------------------------------------------------- */

typedef enum mask_kind { M_NONE, M_BOTTOM_RIGHT, M_TOP_LEFT, M_BR_WINDOW, M_COUNT } mask_kind;
static const char *const mask_names[] = {"nomask", "causal-br", "causal-tl", "causal-br+wl"};

typedef struct merge_case {
    fj_attention_desc full, part_a, part_b;
    int split;
    int64_t ob_stride[3]; /* o_b: head-major, rows padded by 8 elements */
    char text[256];
} merge_case;

/* Draws the whole problem and the two parts whose key sets are [0, split)
   and [split, Sk), each with the mask that gives exactly the whole problem's
   visible keys of that range (docs/semantics.md's rule, with d = i + Sk - Sq
   for no mask and bottom-right, d = i for top-left):
     bottom-right: a = no causal, window_right Sk - s;  b = bottom-right
     top-left (Sq >= Sk): a = top-left;  b = no causal, window_right Sq - Sk
     bottom-right + window_left wl >= Sk - s: a also window_left wl - (Sk - s);
     b bottom-right with window_left wl. */
static void draw_case(fjt_rng *rng, merge_case *c)
{
    static const fj_dtype dtypes[] = {FJ_F32, FJ_F16, FJ_BF16};
    static const int dims_cpu[] = {3, 16, 33, 64, 80};
    static const int dims_cuda[] = {8, 24, 64, 72, 128, 17}; /* 17: partials from the CPU */
    static const int groups[] = {1, 2, 4};
    memset(c, 0, sizeof *c);
    fj_dtype dt = dtypes[fjt_range(rng, 0, 2)];
    int D = backend == FJ_BACKEND_CUDA ? dims_cuda[fjt_range(rng, 0, 5)]
                                       : dims_cpu[fjt_range(rng, 0, 4)];
    int batch = fjt_range(rng, 1, 2), hkv = fjt_range(rng, 1, 3);
    int hq = hkv * groups[fjt_range(rng, 0, 2)];
    mask_kind mk = (mask_kind)fjt_range(rng, 0, M_COUNT - 1);
    int sk = fjt_range(rng, 2, 90), sq = fjt_range(rng, 1, 45);
    if (mk == M_TOP_LEFT) sq = sk + fjt_range(rng, 0, 9);
    int s = fjt_range(rng, 1, sk - 1);
    c->split = s;
    fj_attention_desc_init(&c->full, batch, hq, hkv, sq, sk, D, dt);
    fj_attention_desc_init(&c->part_a, batch, hq, hkv, sq, s, D, dt);
    fj_attention_desc_init(&c->part_b, batch, hq, hkv, sq, sk - s, D, dt);
    int wl = -1;
    switch (mk) {
    case M_NONE: break;
    case M_BOTTOM_RIGHT:
        c->full.causal = FJ_CAUSAL_BOTTOM_RIGHT;
        c->part_a.window_right = sk - s;
        c->part_b.causal = FJ_CAUSAL_BOTTOM_RIGHT;
        break;
    case M_TOP_LEFT:
        c->full.causal = FJ_CAUSAL_TOP_LEFT;
        c->part_a.causal = FJ_CAUSAL_TOP_LEFT;
        c->part_b.window_right = sq - sk;
        break;
    case M_BR_WINDOW:
        wl = sk - s + fjt_range(rng, 0, 8);
        c->full.causal = FJ_CAUSAL_BOTTOM_RIGHT;
        c->full.window_left = wl;
        c->part_a.window_right = sk - s;
        c->part_a.window_left = wl - (sk - s);
        c->part_b.causal = FJ_CAUSAL_BOTTOM_RIGHT;
        c->part_b.window_left = wl;
        break;
    default: break;
    }
    /* The parts read the whole problem's tensors: dense strides of the
       whole (part b's K and V pointers start at key s). */
    int64_t qs[3] = {(int64_t)sq * hq * D, (int64_t)hq * D, D};
    int64_t ks[3] = {(int64_t)sk * hkv * D, (int64_t)hkv * D, D};
    fj_attention_desc *parts[2] = {&c->part_a, &c->part_b};
    for (int i = 0; i < 2; i++) {
        memcpy(parts[i]->q_stride, qs, sizeof qs);
        memcpy(parts[i]->k_stride, ks, sizeof ks);
        memcpy(parts[i]->v_stride, ks, sizeof ks);
    }
    const int64_t row = D + 8;
    c->ob_stride[0] = (int64_t)hq * sq * row;
    c->ob_stride[1] = row;
    c->ob_stride[2] = (int64_t)sq * row;
    memcpy(c->part_b.o_stride, c->ob_stride, sizeof c->ob_stride);
    snprintf(c->text, sizeof c->text, "%s split %d (%s, window_left %d)", fjt_desc_str(&c->full), s,
             mask_names[mk], wl);
}

/* Attention of desc d with k and v starting at key `key0` of the whole
   problem's host tensors, on the backend (or on the reference, copied over),
   into device buffers o (o_elems) and lse. */
static void partial(const merge_case *c, const fjt_problem *full, const fj_attention_desc *d,
                    int key0, void *o, size_t o_bytes, float *lse, size_t lse_bytes)
{
    fj_context *on = backend_attends(d) ? ctx : ref_ctx;
    size_t es = fj_dtype_size(d->dtype);
    size_t koff = (size_t)key0 * (size_t)c->full.heads_kv * (size_t)c->full.head_dim * es;
    void *dq = dev_copy(on, full->q, full->q_elems * es);
    void *dk = dev_copy(on, full->k, full->k_elems * es);
    void *dv = dev_copy(on, full->v, full->v_elems * es);
    void *dO = on == ctx ? o : dev_alloc(on, o_bytes);
    float *dl = on == ctx ? lse : dev_alloc(on, lse_bytes);
    fj_status s = fj_attention(on, d, dq, (char *)dk + koff, (char *)dv + koff, dO, dl, NULL);
    if (s != FJ_OK) fail_msg("fj_attention of a part of %s: %s", c->text, fj_last_error());
    CHECK(fj_synchronize(on, NULL));
    if (on != ctx) { /* through the host onto the backend */
        void *h = malloc(o_bytes > lse_bytes ? o_bytes : lse_bytes);
        assert_non_null(h);
        to_host(on, h, dO, o_bytes);
        CHECK(fj_copy_to_device(ctx, o, h, o_bytes));
        to_host(on, h, dl, lse_bytes);
        CHECK(fj_copy_to_device(ctx, lse, h, lse_bytes));
        free(h);
        fj_free(on, dO);
        fj_free(on, dl);
    }
    fj_free(on, dq);
    fj_free(on, dk);
    fj_free(on, dv);
}

static double lse_tolerance(fj_dtype t)
{
    /* the backends' own lse against the oracle (tests/conformance/case.c) */
    return t == FJ_F16 ? 1e-3 : t == FJ_BF16 ? 1e-2 : 1e-4;
}

static bool run_case(fjt_rng *rng, int index)
{
    merge_case c;
    draw_case(rng, &c);
    fjt_problem full;
    if (!fjt_problem_make(&full, &c.full, rng)) fail_msg("out of memory making %s", c.text);
    const fj_dtype dt = c.full.dtype;
    const size_t es = fj_dtype_size(dt);
    const size_t rows = full.lse_elems, o_bytes = full.o_elems * es;
    const size_t lse_bytes = rows * sizeof(float);
    const size_t ob_bytes = (size_t)c.ob_stride[0] * (size_t)c.full.batch * es;

    void *oa = dev_alloc(ctx, o_bytes), *ob = dev_alloc(ctx, ob_bytes);
    float *la = dev_alloc(ctx, lse_bytes), *lb = dev_alloc(ctx, lse_bytes);
    partial(&c, &full, &c.part_a, 0, oa, o_bytes, la, lse_bytes);
    partial(&c, &full, &c.part_b, c.split, ob, ob_bytes, lb, lse_bytes);

    fj_merge_desc m;
    fj_merge_desc_init(&m, c.full.batch, c.full.heads_q, c.full.seqlen_q, c.full.head_dim, dt);
    memcpy(m.b_stride, c.ob_stride, sizeof c.ob_stride);

    /* out of place, outputs poisoned */
    void *ho = malloc(o_bytes), *ho2 = malloc(o_bytes);
    float *hl = malloc(lse_bytes), *hl2 = malloc(lse_bytes);
    assert_true(ho && ho2 && hl && hl2);
    fjt_poison(ho, dt, full.o_elems);
    fjt_poison_f32(hl, rows);
    void *o = dev_copy(ctx, ho, o_bytes);
    float *l = dev_copy(ctx, hl, lse_bytes);
    if (fj_merge(ctx, &m, oa, la, ob, lb, o, l, NULL) != FJ_OK)
        fail_msg("fj_merge of %s: %s", c.text, fj_last_error());
    to_host(ctx, ho, o, o_bytes);
    to_host(ctx, hl, l, lse_bytes);

    bool ok = true;
    fjt_error e = fjt_compare(&full, ho, hl);
    const double tol = fjt_tolerance(dt), ltol = lse_tolerance(dt);
    if (!fjt_within(&e, tol) || e.nan_count || e.empty_not_zero || e.lse_mismatch ||
        !(e.lse_max_abs <= ltol) || e.gaps_written) {
        printf("FAIL %s case %d %s: against the oracle: rel %.3e (tol %.1e), lse %.2e (tol "
               "%.0e), nan %zu, empty rows not zero %zu, lse -inf mismatches %zu\n",
               backend_label, index, c.text, e.rel_fro, tol, e.lse_max_abs, ltol, e.nan_count,
               e.empty_not_zero, e.lse_mismatch);
        ok = false;
    }

    /* against fj_attention over all keys on this backend */
    if (backend_attends(&c.full)) {
        void *fo = dev_alloc(ctx, o_bytes);
        float *fl = dev_alloc(ctx, lse_bytes);
        void *dq = dev_copy(ctx, full.q, full.q_elems * es);
        void *dk = dev_copy(ctx, full.k, full.k_elems * es);
        void *dv = dev_copy(ctx, full.v, full.v_elems * es);
        CHECK(fj_attention(ctx, &c.full, dq, dk, dv, fo, fl, NULL));
        to_host(ctx, ho2, fo, o_bytes);
        to_host(ctx, hl2, fl, lse_bytes);
        double num = 0, den = 0, lse_diff = 0;
        size_t inf_mismatch = 0;
        for (size_t i = 0; i < full.o_elems; i++) {
            double x = fjt_load(ho, dt, i), y = fjt_load(ho2, dt, i);
            num += (x - y) * (x - y);
            den += y * y;
        }
        for (size_t r = 0; r < rows; r++) {
            if (isinf(hl[r]) || isinf(hl2[r])) inf_mismatch += hl[r] != hl2[r];
            else if (fabs((double)hl[r] - hl2[r]) > lse_diff)
                lse_diff = fabs((double)hl[r] - hl2[r]);
        }
        double rel = den > 0 ? sqrt(num / den) : sqrt(num);
        if (!(rel <= tol) || inf_mismatch || !(lse_diff <= ltol)) {
            printf("FAIL %s case %d %s: against fj_attention over all keys: rel %.3e (tol "
                   "%.1e), lse %.2e, lse -inf mismatches %zu\n",
                   backend_label, index, c.text, rel, tol, lse_diff, inf_mismatch);
            ok = false;
        }
        fj_free(ctx, fo);
        fj_free(ctx, fl);
        fj_free(ctx, dq);
        fj_free(ctx, dk);
        fj_free(ctx, dv);
    }

    /* in place: o = o_a, lse = lse_a gives the same bits */
    if (fj_merge(ctx, &m, oa, la, ob, lb, oa, la, NULL) != FJ_OK)
        fail_msg("fj_merge in place of %s: %s", c.text, fj_last_error());
    to_host(ctx, ho2, oa, o_bytes);
    to_host(ctx, hl2, la, lse_bytes);
    if (memcmp(ho, ho2, o_bytes) || memcmp(hl, hl2, lse_bytes)) {
        printf("FAIL %s case %d %s: in place differs from out of place\n", backend_label, index,
               c.text);
        ok = false;
    }
    if (ok)
        printf("ok %s case %d %s: rel %.2e lse %.1e\n", backend_label, index, c.text, e.rel_fro,
               e.lse_max_abs);

    fj_free(ctx, oa);
    fj_free(ctx, ob);
    fj_free(ctx, la);
    fj_free(ctx, lb);
    fj_free(ctx, o);
    fj_free(ctx, l);
    free(ho);
    free(ho2);
    free(hl);
    free(hl2);
    fjt_problem_free(&full);
    return ok;
}

static void test_split_keys_equal_whole(void **state)
{
    (void)state;
    REQUIRE_CTX();
    fjt_rng rng;
    fjt_rng_init(&rng, seed);
    int failures = 0, n = backend == FJ_BACKEND_CUDA ? 60 : 40;
    for (int i = 0; i < n; i++) failures += !run_case(&rng, i);
    if (failures)
        fail_msg("%d of %d cases failed (seed %llu)", failures, n, (unsigned long long)seed);
}

/* ---- the -inf, NaN and +inf rules ------------------------------------------------------ */

static void test_nonfinite_rules(void **state)
{
    (void)state;
    REQUIRE_CTX();
    enum { ROWS = 8, D = 20 };
    const float inf = INFINITY, nan = NAN;
    /* lse_a, lse_b per row; o_a / o_b rows NaN where that side must not be read */
    const float lse_a[ROWS] = {1.0f, -inf, -inf, nan, inf, 3.0f, 0.0f, 2.0f};
    const float lse_b[ROWS] = {2.0f, 0.5f, -inf, 1.0f, 1.0f, -inf, 200.0f, nan};
    const bool a_nan[ROWS] = {false, true, true, false, false, false, true, false};
    const bool b_nan[ROWS] = {false, false, true, false, false, true, false, false};
    static const fj_dtype dtypes[] = {FJ_F32, FJ_F16, FJ_BF16};
    for (int di = 0; di < 3; di++) {
        const fj_dtype dt = dtypes[di];
        const size_t es = fj_dtype_size(dt), n = (size_t)ROWS * D;
        void *ha = malloc(n * es), *hb = malloc(n * es), *ho = malloc(n * es);
        float hl[ROWS];
        assert_true(ha && hb && ho);
        for (int r = 0; r < ROWS; r++)
            for (int c = 0; c < D; c++) {
                /* lse row r = (b, h, i) is O row (b, i, h) */
                int b = r / 4, h = r / 2 % 2, q = r % 2;
                size_t i = ((size_t)(b * 2 + q) * 2 + h) * D + c;
                fjt_store(ha, dt, i, a_nan[r] ? NAN : 0.25 * (c % 7) - 0.5);
                fjt_store(hb, dt, i, b_nan[r] ? NAN : 0.125 * (c % 5) + 0.25);
            }
        fjt_poison(ho, dt, n);
        fjt_poison_f32(hl, ROWS);
        void *da = dev_copy(ctx, ha, n * es), *db = dev_copy(ctx, hb, n * es);
        void *dO = dev_copy(ctx, ho, n * es);
        float *la = dev_copy(ctx, lse_a, sizeof lse_a), *lb = dev_copy(ctx, lse_b, sizeof lse_b);
        float *dl = dev_copy(ctx, hl, sizeof hl);
        /* [batch 2, seqlen_q 2, heads 2] rows: lse row r = (b, h, i) */
        fj_merge_desc m;
        fj_merge_desc_init(&m, 2, 2, 2, D, dt);
        CHECK(fj_merge(ctx, &m, da, la, db, lb, dO, dl, NULL));
        to_host(ctx, ho, dO, n * es);
        to_host(ctx, hl, dl, sizeof hl);
        for (int r = 0; r < ROWS; r++) {
            /* row r of the lse layout is O row (b, i, h) */
            int b = r / 4, h = r / 2 % 2, i = r % 2;
            size_t orow = ((size_t)(b * 2 + i) * 2 + h) * D;
            double wa, wb, want_lse;
            bool row_nan = false, empty = false;
            if (isnan(lse_a[r]) || isnan(lse_b[r]) || lse_a[r] == inf || lse_b[r] == inf) {
                row_nan = true;
                wa = wb = want_lse = NAN;
            } else if (lse_a[r] == -inf && lse_b[r] == -inf) {
                empty = true;
                wa = wb = 0;
                want_lse = -INFINITY;
            } else {
                double mx = fmax(lse_a[r], lse_b[r]);
                double ea = exp((double)lse_a[r] - mx), eb = exp((double)lse_b[r] - mx);
                if ((float)ea == 0.0f) ea = 0; /* underflows in float32: not read */
                wa = ea / (ea + eb);
                wb = eb / (ea + eb);
                want_lse = mx + log(ea + eb);
            }
            if (row_nan) assert_true(isnan(hl[r]));
            else if (empty) assert_true(hl[r] == -INFINITY);
            else if (fabs(hl[r] - want_lse) > 1e-5 * fmax(1.0, fabs(want_lse)))
                fail_msg("%s row %d: lse %.9g, want %.9g", fj_dtype_name(dt), r, hl[r], want_lse);
            for (int c = 0; c < D; c++) {
                double got = fjt_load(ho, dt, orow + c);
                if (row_nan) {
                    if (!isnan(got))
                        fail_msg("%s row %d col %d: %g, want NaN", fj_dtype_name(dt), r, c, got);
                    continue;
                }
                if (empty) {
                    if (got != 0.0)
                        fail_msg("%s row %d col %d: %g, want 0", fj_dtype_name(dt), r, c, got);
                    continue;
                }
                double a = wa ? fjt_load(ha, dt, orow + c) : 0,
                       bb = wb ? fjt_load(hb, dt, orow + c) : 0;
                double want = wa * a + wb * bb, ulp = dt == FJ_F32   ? 1e-6
                                                      : dt == FJ_F16 ? 1e-3
                                                                     : 8e-3;
                if (!(fabs(got - want) <= ulp * fmax(1.0, fabs(want))))
                    fail_msg("%s row %d col %d: %.9g, want %.9g", fj_dtype_name(dt), r, c, got,
                             want);
            }
        }
        fj_free(ctx, da);
        fj_free(ctx, db);
        fj_free(ctx, dO);
        fj_free(ctx, la);
        fj_free(ctx, lb);
        fj_free(ctx, dl);
        free(ha);
        free(hb);
        free(ho);
    }
}

/* Large enough for the CPU's worker pool and many CUDA blocks, with
   unaligned rows (head dim 13: the CUDA kernel's element path) and lse NULL. */
static void test_large_and_unaligned(void **state)
{
    (void)state;
    REQUIRE_CTX();
    static const int dims[] = {13, 128};
    fjt_rng rng;
    fjt_rng_init(&rng, seed ^ 0x5eed);
    for (int k = 0; k < 2; k++) {
        const int B = 3, H = 5, S = 301, D = dims[k];
        const fj_dtype dt = FJ_BF16;
        const size_t n = (size_t)B * H * S * D, rows = (size_t)B * H * S, es = 2;
        uint16_t *ha = malloc(n * es), *hb = malloc(n * es), *ho = malloc(n * es);
        float *la = malloc(rows * 4), *lb = malloc(rows * 4);
        assert_true(ha && hb && ho && la && lb);
        for (size_t i = 0; i < n; i++) {
            fjt_store(ha, dt, i, 2 * fjt_uniform(&rng) - 1);
            fjt_store(hb, dt, i, 2 * fjt_uniform(&rng) - 1);
        }
        for (size_t r = 0; r < rows; r++) {
            la[r] = (float)(8 * fjt_uniform(&rng) - 4);
            lb[r] = r % 17 == 0 ? -INFINITY : (float)(8 * fjt_uniform(&rng) - 4);
        }
        fjt_poison(ho, dt, n);
        void *da = dev_copy(ctx, ha, n * es), *db = dev_copy(ctx, hb, n * es);
        void *dO = dev_copy(ctx, ho, n * es);
        float *dla = dev_copy(ctx, la, rows * 4), *dlb = dev_copy(ctx, lb, rows * 4);
        fj_merge_desc m;
        fj_merge_desc_init(&m, B, H, S, D, dt);
        CHECK(fj_merge(ctx, &m, da, dla, db, dlb, dO, NULL, NULL));
        to_host(ctx, ho, dO, n * es);
        double worst = 0;
        for (size_t r = 0; r < rows; r++) {
            size_t b = r / (H * S), h = r / S % H, i = r % S;
            size_t orow = ((b * S + i) * H + h) * D;
            double mx = fmax(la[r], lb[r]), ea = exp(la[r] - mx), eb = exp(lb[r] - mx);
            for (int c = 0; c < D; c++) {
                double want =
                    (ea * fjt_load(ha, dt, orow + c) + eb * fjt_load(hb, dt, orow + c)) / (ea + eb);
                double err = fabs(fjt_load(ho, dt, orow + c) - want);
                if (!(err <= worst)) worst = err; /* NaN too */
            }
        }
        if (!(worst <= 8e-3)) fail_msg("head dim %d: worst error %.3e", D, worst);
        fj_free(ctx, da);
        fj_free(ctx, db);
        fj_free(ctx, dO);
        fj_free(ctx, dla);
        fj_free(ctx, dlb);
        free(ha);
        free(hb);
        free(ho);
        free(la);
        free(lb);
    }
}

/* ---- bad input -------------------------------------------------------------------------- */

typedef struct bad_case {
    const char *what; /* a substring the message must hold */
    int field;        /* which thing to break */
} bad_case;

enum {
    BAD_CTX,
    BAD_DESC,
    BAD_OA,
    BAD_LA,
    BAD_OB,
    BAD_LB,
    BAD_O,
    BAD_BATCH,
    BAD_HEADS,
    BAD_SEQ,
    BAD_DIM,
    BAD_DTYPE,
    BAD_STRIDE_NEG,
    BAD_O_OVERLAP,
    BAD_ALIAS,
    BAD_ALIAS_B,
    BAD_ALIGN_O,
    BAD_ALIGN_LSE,
    BAD_RESERVED,
    BAD_COUNT
};

static void test_bad_input(void **state)
{
    (void)state;
    REQUIRE_CTX();
    static const bad_case cases[BAD_COUNT] = {
        {"ctx is NULL", BAD_CTX},
        {"desc is NULL", BAD_DESC},
        {"o_a is NULL", BAD_OA},
        {"lse_a is NULL", BAD_LA},
        {"o_b is NULL", BAD_OB},
        {"lse_b is NULL", BAD_LB},
        {"o is NULL", BAD_O},
        {"batch (0) must be >= 1", BAD_BATCH},
        {"heads_q (-2) must be >= 1", BAD_HEADS},
        {"seqlen_q (0) must be >= 1", BAD_SEQ},
        {"head_dim (0) must be >= 1", BAD_DIM},
        {"dtype (7)", BAD_DTYPE},
        {"b_stride[1] (seq axis) is -16", BAD_STRIDE_NEG},
        {"o_stride", BAD_O_OVERLAP},
        {"o is o_a but o_stride", BAD_ALIAS},
        {"o is o_b but o_stride", BAD_ALIAS_B},
        {"o (", BAD_ALIGN_O},
        {"lse (", BAD_ALIGN_LSE},
        {"reserved[3]", BAD_RESERVED},
    };
    enum { B = 2, H = 3, S = 5, D = 16 };
    const size_t n = (size_t)B * H * S * D, rows = (size_t)B * H * S;
    float *host = malloc(n * sizeof(float) * 2);
    assert_non_null(host);
    fjt_poison_f32(host, n * 2);
    float *oa = dev_copy(ctx, host, n * 4), *ob = dev_copy(ctx, host, n * 4);
    float *o = dev_copy(ctx, host, n * 8); /* twice: room for the overlap and misaligned cases */
    float *la = dev_copy(ctx, host, rows * 4), *lb = dev_copy(ctx, host, rows * 4);
    float *l = dev_copy(ctx, host, rows * 4 + 64);
    for (int k = 0; k < BAD_COUNT; k++) {
        fj_merge_desc m;
        fj_merge_desc_init(&m, B, H, S, D, FJ_F32);
        fj_context *c = ctx;
        const fj_merge_desc *dp = &m;
        const void *pa = oa, *pb = ob;
        const float *pla = la, *plb = lb;
        void *po = o;
        float *pl = l;
        switch (cases[k].field) {
        case BAD_CTX: c = NULL; break;
        case BAD_DESC: dp = NULL; break;
        case BAD_OA: pa = NULL; break;
        case BAD_LA: pla = NULL; break;
        case BAD_OB: pb = NULL; break;
        case BAD_LB: plb = NULL; break;
        case BAD_O: po = NULL; break;
        case BAD_BATCH: m.batch = 0; break;
        case BAD_HEADS: m.heads_q = -2; break;
        case BAD_SEQ: m.seqlen_q = 0; break;
        case BAD_DIM: m.head_dim = 0; break;
        case BAD_DTYPE: m.dtype = (fj_dtype)7; break;
        case BAD_STRIDE_NEG:
            m.b_stride[0] = (int64_t)S * H * D;
            m.b_stride[1] = -16;
            m.b_stride[2] = D;
            break;
        case BAD_O_OVERLAP: /* rows of o 8 elements apart, 16 long */
            m.o_stride[0] = (int64_t)S * H * 8;
            m.o_stride[1] = (int64_t)H * 8;
            m.o_stride[2] = 8;
            break;
        case BAD_ALIAS: /* o = o_a, but o laid out head-major */
            po = oa;
            m.o_stride[0] = (int64_t)S * H * D;
            m.o_stride[1] = D;
            m.o_stride[2] = (int64_t)S * D;
            break;
        case BAD_ALIAS_B:
            po = ob;
            m.o_stride[0] = (int64_t)S * H * D * 2;
            m.o_stride[1] = (int64_t)H * D * 2;
            m.o_stride[2] = D * 2;
            break;
        case BAD_ALIGN_O: po = (char *)o + 2; break;
        case BAD_ALIGN_LSE: pl = (float *)((char *)l + 1); break;
        case BAD_RESERVED: m.reserved[3] = 1; break;
        }
        fj_status s = fj_merge(c, dp, pa, pla, pb, plb, po, pl, NULL);
        if (s != FJ_ERR_INVALID_ARGUMENT || !strstr(fj_last_error(), cases[k].what))
            fail_msg("bad case %d ('%s'): %s, '%s'", k, cases[k].what, fj_status_name(s),
                     fj_last_error());
        if (!strstr(fj_last_error(), "fj_merge"))
            fail_msg("bad case %d: the message does not name fj_merge: '%s'", k, fj_last_error());
    }
    /* nothing was written */
    float *back = malloc(n * 8 + rows * 4 + 64);
    assert_non_null(back);
    to_host(ctx, back, o, n * 8);
    for (size_t i = 0; i < n * 2; i++) assert_true(isnan(back[i]));
    to_host(ctx, back, oa, n * 4);
    for (size_t i = 0; i < n; i++) assert_true(isnan(back[i]));
    to_host(ctx, back, l, rows * 4);
    for (size_t i = 0; i < rows; i++) assert_true(isnan(back[i]));
    /* and a valid call after them all works, lse NULL allowed */
    fj_merge_desc m;
    fj_merge_desc_init(&m, B, H, S, D, FJ_F32);
    CHECK(fj_merge(ctx, &m, oa, la, ob, lb, o, NULL, NULL));
    assert_string_equal(fj_last_error(), "");
    fj_free(ctx, oa);
    fj_free(ctx, ob);
    fj_free(ctx, o);
    fj_free(ctx, la);
    fj_free(ctx, lb);
    fj_free(ctx, l);
    free(host);
    free(back);
}

/* ---- suite ----------------------------------------------------------------------------- */

static int group_setup(void **state)
{
    (void)state;
    seed = fjt_seed();
    fj_context_options o;
    fj_context_options_init(&o);
    o.backend = backend;
    if (fj_context_create(&o, &ctx) != FJ_OK) {
        snprintf(no_ctx, sizeof no_ctx, "%s", fj_last_error());
        ctx = NULL;
        return 0;
    }
    fj_context_options_init(&o);
    o.backend = FJ_BACKEND_CPU_REFERENCE;
    return fj_context_create(&o, &ref_ctx) == FJ_OK ? 0 : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    fj_context_destroy(ctx);
    fj_context_destroy(ref_ctx);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "--backend")) {
        backend_label = argv[2];
        backend = !strcmp(backend_label, "cuda")            ? FJ_BACKEND_CUDA
                  : !strcmp(backend_label, "cpu")           ? FJ_BACKEND_CPU
                  : !strcmp(backend_label, "cpu-reference") ? FJ_BACKEND_CPU_REFERENCE
                                                            : FJ_BACKEND_AUTO;
    }
    if ((argc != 1 && argc != 3) || backend == FJ_BACKEND_AUTO ||
        (argc == 3 && strcmp(argv[1], "--backend"))) {
        fprintf(stderr, "usage: test_merge [--backend cpu-reference|cpu|cuda]\n");
        return 2;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split_keys_equal_whole),
        cmocka_unit_test(test_nonfinite_rules),
        cmocka_unit_test(test_large_and_unaligned),
        cmocka_unit_test(test_bad_input),
    };
    char name[64];
    snprintf(name, sizeof name, "merge %s", backend_label);
    int failed = cmocka_run_group_tests_name(name, tests, group_setup, group_teardown);
    if (!failed && !ctx) return 77; /* all skipped: tell meson */
    return failed;
}
