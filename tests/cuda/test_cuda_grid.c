/* The CUDA backend on a real GPU, checked against the double-precision
 * oracle of tests/common/harness.h and against the CPU reference backend on
 * the same problem (FlashAttention's rule: the GPU's error may be at most
 * twice the CPU reference's, plus a floor for the output rounding).
 *
 * The grid is sampled, not enumerated: each axis (head dim, seqlen_q,
 * seqlen_k, dtype, heads layout, causal kind, window, strides, lse, batch)
 * is drawn from a freshly shuffled cycle of its values, so over N cases
 * every value of every axis appears N / (number of values) times or more,
 * in random combinations. Fixed cases pin each boundary.
 *
 * Every failure prints one line: the case's label, the problem, the kernel,
 * the seed, the errors and the rule broken, and how to replay it alone:
 *   FLASHJIT_TEST_SEED=<seed> FLASHJIT_GRID_CASE=<label> test_cuda_grid
 * Without a usable GPU every test is skipped with the reason. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flashjit.h"
#include "harness.h"

/* Floors of the tolerance rule (relative Frobenius error): about half an
 * output ulp of each type over a typical row. */
#define F16_FLOOR 1e-3
#define BF16_FLOOR 8e-3
#define F16_LSE_TOL 1e-3
#define BF16_LSE_TOL 1e-2

/* batch*heads_q*seqlen_q*seqlen_k*head_dim the sampled cases aim to stay
 * under: the double oracle is the slow part of the suite. */
#define SAMPLED_WORK_CAP (256.0 * 1024 * 1024)
#define SAMPLED_CASES 88

static fj_context *gpu, *ref;
static bool have_gpu;
static char no_gpu[2048];
static uint64_t seed;
static const char *only_case; /* FLASHJIT_GRID_CASE */

#define REQUIRE_GPU()                          \
    do {                                       \
        if (!gpu) {                            \
            printf("SKIPPED: %s\n", no_gpu);   \
            skip();                            \
        }                                      \
    } while (0)

/* ---- one case ------------------------------------------------------------------ */

enum layout { DENSE, BHSD, PADDED, KV_BROADCAST, LAYOUT_COUNT };
static const char *const layout_names[] = {"dense", "bhsd", "padded", "kv-broadcast"};

typedef struct grid_case {
    char label[48];
    fj_attention_desc d;
    enum layout layout;
    bool with_lse;
} grid_case;

static void set_layout(fj_attention_desc *d, enum layout l)
{
    int64_t *s[4] = {d->q_stride, d->k_stride, d->v_stride, d->o_stride};
    int seq[4] = {d->seqlen_q, d->seqlen_k, d->seqlen_k, d->seqlen_q};
    int heads[4] = {d->heads_q, d->heads_kv, d->heads_kv, d->heads_q};
    int64_t D = d->head_dim;
    for (int i = 0; i < 4; i++) {
        switch (l) {
        case DENSE: s[i][0] = s[i][1] = s[i][2] = 0; break;
        case BHSD: /* [batch, heads, seq, dim] */
            s[i][2] = seq[i] * D;
            s[i][1] = D;
            s[i][0] = heads[i] * seq[i] * D;
            break;
        case PADDED: /* gaps after every row and every seq step, 16-byte multiples */
            s[i][2] = D + 8;
            s[i][1] = heads[i] * (D + 8) + 16;
            s[i][0] = seq[i] * s[i][1] + 8;
            break;
        case KV_BROADCAST: /* k and v shared by every batch entry */
            s[i][2] = D;
            s[i][1] = heads[i] * D;
            s[i][0] = (i == 1 || i == 2) ? 0 : seq[i] * s[i][1];
            break;
        case LAYOUT_COUNT: break;
        }
    }
}

/* The "kernel: ..." line of a plan's describe. */
static void kernel_of(const char *describe, char *out, size_t n)
{
    const char *k = strstr(describe, "kernel: ");
    snprintf(out, n, "%s", k ? k + 8 : "?");
    char *nl = strchr(out, '\n');
    if (nl) *nl = '\0';
}

/* Output elements of rows that see no key which are not exactly zero. */
static size_t empty_rows_not_zero(const fjt_problem *p, const void *o)
{
    const fj_attention_desc *d = &p->d;
    size_t bad = 0;
    for (int b = 0; b < d->batch; b++)
        for (int h = 0; h < d->heads_q; h++)
            for (int i = 0; i < d->seqlen_q; i++) {
                double lse = p->ref_lse[((size_t)b * d->heads_q + h) * d->seqlen_q + i];
                if (!(isinf(lse) && lse < 0)) continue;
                size_t base = (size_t)(b * p->os[0] + i * p->os[1] + h * p->os[2]);
                for (int c = 0; c < d->head_dim; c++)
                    if (!(fjt_load(o, d->dtype, base + c) == 0.0)) bad++;
            }
    return bad;
}

/* Runs p through a plan on the GPU with poisoned outputs; fills *err and
 * *empty_bad. FJ_OK or the failing call's status (message in fj_last_error). */
static fj_status gpu_run(const fjt_problem *p, bool with_lse, fjt_error *err, size_t *empty_bad,
                         char *kernel, size_t kernel_len)
{
    const fj_attention_desc *d = &p->d;
    size_t es = d->dtype == FJ_F32 ? 4 : 2;
    fj_plan *plan = NULL;
    void *dq = NULL, *dk = NULL, *dv = NULL, *dout = NULL, *dl = NULL;
    void *ho = malloc(p->o_elems * es);
    float *hl = with_lse ? malloc(p->lse_elems * sizeof(float)) : NULL;
    fj_status s = FJ_ERR_OUT_OF_MEMORY;
    snprintf(kernel, kernel_len, "(no plan)");
    if (!ho || (with_lse && !hl)) goto out;
    if ((s = fj_plan_create(gpu, d, &plan))) goto out;
    kernel_of(fj_plan_describe(plan), kernel, kernel_len);
    if ((s = fj_malloc(gpu, p->q_elems * es, &dq)) || (s = fj_malloc(gpu, p->k_elems * es, &dk)) ||
        (s = fj_malloc(gpu, p->v_elems * es, &dv)) || (s = fj_malloc(gpu, p->o_elems * es, &dout)) ||
        (with_lse && (s = fj_malloc(gpu, p->lse_elems * sizeof(float), &dl))))
        goto out;
    fjt_poison(ho, d->dtype, p->o_elems);
    if (hl) fjt_poison_f32(hl, p->lse_elems);
    if ((s = fj_copy_to_device(gpu, dq, p->q, p->q_elems * es)) ||
        (s = fj_copy_to_device(gpu, dk, p->k, p->k_elems * es)) ||
        (s = fj_copy_to_device(gpu, dv, p->v, p->v_elems * es)) ||
        (s = fj_copy_to_device(gpu, dout, ho, p->o_elems * es)) ||
        (hl && (s = fj_copy_to_device(gpu, dl, hl, p->lse_elems * sizeof(float)))))
        goto out;
    if ((s = fj_plan_execute(plan, dq, dk, dv, dout, dl, NULL))) goto out;
    if ((s = fj_synchronize(gpu, NULL))) goto out;
    if ((s = fj_copy_to_host(gpu, ho, dout, p->o_elems * es)) ||
        (hl && (s = fj_copy_to_host(gpu, hl, dl, p->lse_elems * sizeof(float)))))
        goto out;
    *err = fjt_compare(p, ho, hl);
    *empty_bad = empty_rows_not_zero(p, ho);
out:
    fj_free(gpu, dq);
    fj_free(gpu, dk);
    fj_free(gpu, dv);
    fj_free(gpu, dout);
    fj_free(gpu, dl);
    fj_plan_destroy(plan);
    free(ho);
    free(hl);
    return s;
}

static uint64_t label_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static void describe_case(const grid_case *c, char *buf, size_t n)
{
    const fj_attention_desc *d = &c->d;
    snprintf(buf, n, "%s k[%lld %lld %lld] v[%lld %lld %lld] layout=%s lse=%s", fjt_desc_str(d),
             (long long)d->k_stride[0], (long long)d->k_stride[1], (long long)d->k_stride[2],
             (long long)d->v_stride[0], (long long)d->v_stride[1], (long long)d->v_stride[2],
             layout_names[c->layout], c->with_lse ? "yes" : "no");
}

/* Runs one case; returns true when it passed (or was filtered out). */
static bool run_case(const grid_case *c)
{
    if (only_case && strcmp(only_case, c->label)) return true;
    char what[768];
    describe_case(c, what, sizeof what);
    /* Each case has its own stream of numbers, so one replays alone. */
    fjt_rng rng;
    fjt_rng_init(&rng, seed ^ label_hash(c->label));
    fjt_problem p;
    if (!fjt_problem_make(&p, &c->d, &rng)) {
        printf("FAIL %s seed=%llu: %s: out of host memory for the problem\n", c->label,
               (unsigned long long)seed, what);
        return false;
    }
    fjt_error eg, ec;
    size_t empty_bad = 0;
    char kernel[160];
    memset(&eg, 0, sizeof eg);
    fj_status s = gpu_run(&p, c->with_lse, &eg, &empty_bad, kernel, sizeof kernel);
    if (s) {
        printf("FAIL %s seed=%llu: %s | kernel %s | GPU run failed: %s: %s | replay: "
               "FLASHJIT_TEST_SEED=%llu FLASHJIT_GRID_CASE=%s\n",
               c->label, (unsigned long long)seed, what, kernel, fj_status_name(s), fj_last_error(),
               (unsigned long long)seed, c->label);
        fjt_problem_free(&p);
        return false;
    }
    s = fjt_run(ref, &p, &ec, c->with_lse);
    if (s) {
        printf("FAIL %s seed=%llu: %s | CPU reference failed: %s: %s\n", c->label,
               (unsigned long long)seed, what, fj_status_name(s), fj_last_error());
        fjt_problem_free(&p);
        return false;
    }
    bool f16 = c->d.dtype == FJ_F16;
    double floor_ = f16 ? F16_FLOOR : BF16_FLOOR;
    double lse_tol = f16 ? F16_LSE_TOL : BF16_LSE_TOL;
    double bound = 2.0 * ec.rel_fro + floor_;
    char broke[160] = "";
#define BROKE(cond, name)                                                            \
    if (cond) snprintf(broke + strlen(broke), sizeof broke - strlen(broke), "%s%s", \
                       broke[0] ? "," : "", name)
    BROKE(eg.nan_count, "nan");
    BROKE(!(eg.rel_fro <= bound), "rel_fro");
    BROKE(eg.gaps_written, "gaps");
    BROKE(empty_bad, "empty-rows");
    BROKE(c->with_lse && eg.lse_mismatch, "lse-inf");
    BROKE(c->with_lse && !(eg.lse_max_abs <= lse_tol), "lse");
#undef BROKE
    if (broke[0])
        printf("FAIL %s seed=%llu: %s | kernel %s | broke %s | rel_fro %.3e bound %.3e "
               "(2 x cpu %.3e + %.0e) max_abs %.3e nan %zu gaps %zu empty_rows_not_zero %zu "
               "lse_max_abs %.3e (tol %.0e) lse_inf_mismatch %zu | replay: "
               "FLASHJIT_TEST_SEED=%llu FLASHJIT_GRID_CASE=%s\n",
               c->label, (unsigned long long)seed, what, kernel, broke, eg.rel_fro, bound,
               ec.rel_fro, floor_, eg.max_abs, eg.nan_count, eg.gaps_written, empty_bad,
               eg.lse_max_abs, lse_tol, eg.lse_mismatch, (unsigned long long)seed, c->label);
    else
        printf("# ok %s: b%d hq%d hkv%d sq%d sk%d d%d %s %s w%d,%d %s lse=%d | %s | rel_fro "
               "%.2e (cpu %.2e) lse %.1e\n",
               c->label, c->d.batch, c->d.heads_q, c->d.heads_kv, c->d.seqlen_q, c->d.seqlen_k,
               c->d.head_dim, fj_dtype_name(c->d.dtype), fj_causal_name(c->d.causal),
               c->d.window_left, c->d.window_right, layout_names[c->layout], c->with_lse,
               kernel, eg.rel_fro, ec.rel_fro, eg.lse_max_abs);
    fflush(stdout);
    fjt_problem_free(&p);
    return !broke[0];
}

static grid_case make_case(const char *label, int batch, int hq, int hkv, int sq, int sk, int dim,
                           fj_dtype t, fj_causal causal, int wl, int wr, enum layout l,
                           bool with_lse)
{
    grid_case c;
    memset(&c, 0, sizeof c);
    snprintf(c.label, sizeof c.label, "%s", label);
    fj_attention_desc_init(&c.d, batch, hq, hkv, sq, sk, dim, t);
    c.d.causal = causal;
    c.d.window_left = wl;
    c.d.window_right = wr;
    c.layout = l;
    c.with_lse = with_lse;
    set_layout(&c.d, l);
    return c;
}

static const int head_dims[] = {8, 32, 40, 64, 80, 96, 128, 160, 192, 200, 256};
static const int seqlens[] = {1, 17, 63, 64, 65, 127, 128, 129, 239, 1000, 2048};
#define N_DIMS (int)(sizeof head_dims / sizeof head_dims[0])
#define N_SEQS (int)(sizeof seqlens / sizeof seqlens[0])

static void report(const char *suite, int cases, int failures)
{
    printf("# %s: %d cases, %d failed (seed %llu)\n", suite, cases, failures,
           (unsigned long long)seed);
    fflush(stdout);
    if (failures) fail_msg("%s: %d of %d cases failed; see the FAIL lines above", suite, failures, cases);
}

/* ---- fixed cases: one per boundary ------------------------------------------------ */

static void test_head_dims(void **state)
{
    (void)state;
    REQUIRE_GPU();
    int cases = 0, failures = 0;
    for (int i = 0; i < N_DIMS; i++) {
        char label[48];
        fj_dtype t = i % 2 ? FJ_BF16 : FJ_F16;
        snprintf(label, sizeof label, "dim%d-nomask", head_dims[i]);
        grid_case c = make_case(label, 1, 2, 2, 128, 128, head_dims[i], t, FJ_CAUSAL_NONE, -1, -1,
                                DENSE, true);
        failures += !run_case(&c), cases++;
        snprintf(label, sizeof label, "dim%d-causal", head_dims[i]);
        c = make_case(label, 2, 2, 1, 129, 129, head_dims[i], i % 2 ? FJ_F16 : FJ_BF16,
                      FJ_CAUSAL_BOTTOM_RIGHT, -1, -1, DENSE, true);
        failures += !run_case(&c), cases++;
    }
    report("head dims", cases, failures);
}

static void test_seqlens(void **state)
{
    (void)state;
    REQUIRE_GPU();
    int cases = 0, failures = 0;
    for (int i = 0; i < N_SEQS; i++) {
        int s = seqlens[i];
        char label[48];
        snprintf(label, sizeof label, "seq%d-square-causal", s);
        grid_case c = make_case(label, 1, 1, 1, s, s, 64, i % 2 ? FJ_F16 : FJ_BF16,
                                FJ_CAUSAL_BOTTOM_RIGHT, -1, -1, DENSE, true);
        failures += !run_case(&c), cases++;
        /* against a long and a short other side, both ways */
        int other = s == 2048 ? 1 : 2048;
        snprintf(label, sizeof label, "seq%d-vs-%d", s, other);
        c = make_case(label, 1, 2, 1, s, other, 128, FJ_BF16, FJ_CAUSAL_NONE, -1, -1, DENSE, true);
        failures += !run_case(&c), cases++;
        snprintf(label, sizeof label, "seq%d-of-%d", other, s);
        c = make_case(label, 1, 2, 1, other, s, 128, FJ_F16, FJ_CAUSAL_NONE, -1, -1, DENSE, true);
        failures += !run_case(&c), cases++;
    }
    /* tile edges on either side, Sq != Sk both ways, every causal kind */
    static const int pairs[][2] = {{63, 65}, {65, 63}, {64, 128}, {128, 64}, {127, 129},
                                   {129, 127}, {239, 17}, {17, 239}, {1000, 1}, {1, 1000}};
    static const fj_causal kinds[] = {FJ_CAUSAL_NONE, FJ_CAUSAL_BOTTOM_RIGHT, FJ_CAUSAL_TOP_LEFT};
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++)
        for (int k = 0; k < 3; k++) {
            char label[48];
            snprintf(label, sizeof label, "edge%d-%d-%s", pairs[i][0], pairs[i][1],
                     fj_causal_name(kinds[k]));
            grid_case c = make_case(label, 2, 4, 2, pairs[i][0], pairs[i][1], k == 1 ? 96 : 40,
                                    (i + k) % 2 ? FJ_F16 : FJ_BF16, kinds[k], -1, -1, DENSE, true);
            failures += !run_case(&c), cases++;
        }
    report("seqlens", cases, failures);
}

static void test_masks(void **state)
{
    (void)state;
    REQUIRE_GPU();
    static const struct {
        const char *label;
        int sq, sk;
        fj_causal causal;
        int wl, wr;
    } m[] = {
        /* bottom-right causal with sq > sk: the first sq - sk rows see no key */
        {"br-more-queries", 200, 64, FJ_CAUSAL_BOTTOM_RIGHT, -1, -1},
        {"tl-more-queries", 200, 64, FJ_CAUSAL_TOP_LEFT, -1, -1},
        {"tl-more-keys", 64, 200, FJ_CAUSAL_TOP_LEFT, -1, -1},
        {"br-more-keys", 64, 200, FJ_CAUSAL_BOTTOM_RIGHT, -1, -1},
        {"diagonal-only", 150, 150, FJ_CAUSAL_NONE, 0, 0},
        {"diagonal-empty-rows", 190, 70, FJ_CAUSAL_NONE, 0, 0},
        {"left-window", 300, 300, FJ_CAUSAL_BOTTOM_RIGHT, 16, -1},
        {"right-window", 300, 257, FJ_CAUSAL_NONE, -1, 16},
        {"band", 257, 300, FJ_CAUSAL_TOP_LEFT, 5, 5},
        {"wide-left-window", 129, 1000, FJ_CAUSAL_BOTTOM_RIGHT, 300, -1},
        {"window-beyond-seq", 100, 100, FJ_CAUSAL_NONE, 5000, 5000},
        {"causal-and-right", 128, 128, FJ_CAUSAL_BOTTOM_RIGHT, 64, 7},
    };
    int cases = 0, failures = 0;
    for (size_t i = 0; i < sizeof m / sizeof m[0]; i++)
        for (int t = 0; t < 2; t++) {
            char label[48];
            snprintf(label, sizeof label, "%s-%s", m[i].label, t ? "bf16" : "f16");
            grid_case c = make_case(label, 2, 4, 1, m[i].sq, m[i].sk, t ? 128 : 64,
                                    t ? FJ_BF16 : FJ_F16, m[i].causal, m[i].wl, m[i].wr, DENSE,
                                    true);
            failures += !run_case(&c), cases++;
        }
    report("masks", cases, failures);
}

static void test_heads_and_layouts(void **state)
{
    (void)state;
    REQUIRE_GPU();
    int cases = 0, failures = 0;
    static const int heads[][2] = {{8, 8}, {8, 2}, {8, 1}, {6, 3}};
    for (size_t h = 0; h < sizeof heads / sizeof heads[0]; h++)
        for (int l = 0; l < LAYOUT_COUNT; l++) {
            char label[48];
            snprintf(label, sizeof label, "heads%d-%d-%s", heads[h][0], heads[h][1], layout_names[l]);
            grid_case c = make_case(label, 2, heads[h][0], heads[h][1], 97, 161, l % 2 ? 80 : 128,
                                    (h + l) % 2 ? FJ_F16 : FJ_BF16,
                                    l % 3 ? FJ_CAUSAL_BOTTOM_RIGHT : FJ_CAUSAL_NONE, -1, -1,
                                    (enum layout)l, h % 2 == 0);
            failures += !run_case(&c), cases++;
        }
    /* custom scales: small, and large enough to stress the exponent range;
       negative ones (the kernels negate Q in shared memory) on both kernels
       of sm_90 (d64 flash_wgmma, d96 flash_fwd), causal too */
    static const struct {
        float scale;
        int head_dim;
        fj_causal causal;
    } scales[] = {{0.03f, 64, FJ_CAUSAL_NONE},  {0.3f, 64, FJ_CAUSAL_NONE},
                  {2.0f, 64, FJ_CAUSAL_NONE},   {-0.3f, 64, FJ_CAUSAL_NONE},
                  {-2.0f, 128, FJ_CAUSAL_BOTTOM_RIGHT}, {-0.5f, 96, FJ_CAUSAL_TOP_LEFT}};
    for (size_t i = 0; i < sizeof scales / sizeof scales[0]; i++) {
        char label[48];
        snprintf(label, sizeof label, "scale%g-d%d", (double)scales[i].scale, scales[i].head_dim);
        grid_case c = make_case(label, 1, 2, 2, 130, 300, scales[i].head_dim,
                                i % 2 ? FJ_F16 : FJ_BF16, scales[i].causal, -1, -1, DENSE, true);
        c.d.scale = scales[i].scale;
        failures += !run_case(&c), cases++;
    }
    report("heads and layouts", cases, failures);
}

/* ---- sampled cases ------------------------------------------------------------------- */

/* One axis: its values are dealt from a shuffled deck, reshuffled when it
 * runs out, so every value comes once per deck. take() may pick any card
 * left in the deck that `fits`, which keeps the balance while steering away
 * from combinations the oracle cannot afford. */
typedef struct deck {
    int n;
    int left[16];
    int n_left;
} deck;

static void deck_init(deck *k, int n)
{
    k->n = n;
    k->n_left = 0;
}

static int deck_take(deck *k, fjt_rng *r, bool (*fits)(int idx, const void *ctx), const void *ctx)
{
    if (k->n_left == 0) {
        for (int i = 0; i < k->n; i++) k->left[i] = i;
        for (int i = k->n - 1; i > 0; i--) { /* Fisher-Yates */
            int j = fjt_range(r, 0, i), t = k->left[i];
            k->left[i] = k->left[j];
            k->left[j] = t;
        }
        k->n_left = k->n;
    }
    int pos = 0;
    if (fits) {
        /* the first card that fits, else the cheapest (the lowest index) */
        int cheapest = 0;
        for (pos = 0; pos < k->n_left && !fits(k->left[pos], ctx); pos++)
            if (k->left[pos] < k->left[cheapest]) cheapest = pos;
        if (pos == k->n_left) pos = cheapest;
    }
    int v = k->left[pos];
    k->left[pos] = k->left[--k->n_left];
    return v;
}

typedef struct work_ctx {
    double so_far; /* product of the dimensions chosen already */
} work_ctx;

static bool seq_fits(int idx, const void *ctx)
{
    return ((const work_ctx *)ctx)->so_far * seqlens[idx] * 8 <= SAMPLED_WORK_CAP;
}

static bool dim_fits(int idx, const void *ctx)
{
    return ((const work_ctx *)ctx)->so_far * head_dims[idx] <= SAMPLED_WORK_CAP;
}

enum heads_kind { MHA, GQA, MQA, HEADS_KINDS };
static const char *const heads_names[] = {"mha", "gqa", "mqa"};

static void test_sampled(void **state)
{
    (void)state;
    REQUIRE_GPU();
    fjt_rng rng;
    fjt_rng_init(&rng, seed ^ 0x5a3d1e6bull);
    deck dims, sqs, sks, dtypes, heads, causal, windows, layouts, lses, batches;
    deck_init(&dims, N_DIMS);
    deck_init(&sqs, N_SEQS);
    deck_init(&sks, N_SEQS);
    deck_init(&dtypes, 2);
    deck_init(&heads, HEADS_KINDS);
    deck_init(&causal, 3);
    deck_init(&windows, 4);
    deck_init(&layouts, LAYOUT_COUNT);
    deck_init(&lses, 2);
    deck_init(&batches, 3);
    int cases = 0, failures = 0;
    for (int n = 0; n < SAMPLED_CASES; n++) {
        int sq = seqlens[deck_take(&sqs, &rng, NULL, NULL)];
        work_ctx w = {(double)sq};
        int sk = seqlens[deck_take(&sks, &rng, seq_fits, &w)];
        w.so_far = (double)sq * sk;
        int dim = head_dims[deck_take(&dims, &rng, dim_fits, &w)];
        fj_dtype t = deck_take(&dtypes, &rng, NULL, NULL) ? FJ_BF16 : FJ_F16;
        enum heads_kind hk = (enum heads_kind)deck_take(&heads, &rng, NULL, NULL);
        fj_causal cz = (fj_causal)deck_take(&causal, &rng, NULL, NULL);
        int win = deck_take(&windows, &rng, NULL, NULL);
        enum layout l = (enum layout)deck_take(&layouts, &rng, NULL, NULL);
        bool with_lse = deck_take(&lses, &rng, NULL, NULL) == 0;
        int batch = 1 + deck_take(&batches, &rng, NULL, NULL);
        int min_batch = l == KV_BROADCAST ? 2 : 1; /* broadcast needs a batch to share */
        if (batch < min_batch) batch = min_batch;
        /* heads: MHA h:h, GQA (group 2..4), MQA h:1; fewer of them, then a
           smaller batch, while the oracle's work is above the cap */
        int hkv = hk == MQA ? 1 : fjt_range(&rng, 1, 3);
        int hq = hk == MHA ? hkv : hk == GQA ? hkv * fjt_range(&rng, 2, 4) : fjt_range(&rng, 2, 8);
        double per_head = (double)sq * sk * dim;
        while (batch * hq * per_head > SAMPLED_WORK_CAP && (hkv > 1 || hq > (hk == MHA ? 1 : 2))) {
            if (hkv > 1) {
                hq /= hkv;
                hkv = 1;
                if (hk == MHA) hq = 1;
            } else {
                hq = hk == MHA ? 1 : 2;
            }
        }
        while (batch > min_batch && batch * hq * per_head > SAMPLED_WORK_CAP) batch--;
        int wl = -1, wr = -1;
        /* windows from 0 (the diagonal alone) to beyond the sequence */
        static const int wsizes[] = {0, 1, 7, 64, 300};
        if (win == 1 || win == 3) wl = wsizes[fjt_range(&rng, 0, 4)];
        if (win == 2 || win == 3) wr = wsizes[fjt_range(&rng, 0, 4)];
        char label[48];
        snprintf(label, sizeof label, "sampled%d-%s", n, heads_names[hk]);
        grid_case c = make_case(label, batch, hq, hkv, sq, sk, dim, t, cz, wl, wr, l, with_lse);
        failures += !run_case(&c), cases++;
    }
    report("sampled", cases, failures);
}

/* ---- plans, errors, determinism --------------------------------------------------- */

static void test_unsupported_on_gpu(void **state)
{
    (void)state;
    REQUIRE_GPU();
    fj_attention_desc d;
    fj_plan *plan;
    fj_attention_desc_init(&d, 1, 2, 2, 64, 64, 64, FJ_F32);
    assert_int_equal(fj_plan_create(gpu, &d, &plan), FJ_ERR_UNSUPPORTED);
    printf("# f32: %s\n", fj_last_error());
    fj_attention_desc_init(&d, 1, 2, 2, 64, 64, 20, FJ_BF16);
    assert_int_equal(fj_plan_create(gpu, &d, &plan), FJ_ERR_UNSUPPORTED);
    printf("# head_dim 20: %s\n", fj_last_error());
    assert_non_null(strstr(fj_last_error(), "head_dim 20"));
    fj_attention_desc_init(&d, 1, 2, 2, 64, 64, 64, FJ_BF16);
    d.k_stride[0] = 64 * 2 * 64;
    d.k_stride[1] = 2 * 64 + 4;
    d.k_stride[2] = 64;
    assert_int_equal(fj_plan_create(gpu, &d, &plan), FJ_ERR_UNSUPPORTED);
    assert_non_null(strstr(fj_last_error(), "k_stride[1]"));
}

static void test_misaligned_pointer_on_gpu(void **state)
{
    (void)state;
    REQUIRE_GPU();
    fj_attention_desc d;
    fj_attention_desc_init(&d, 1, 2, 2, 64, 64, 64, FJ_F16);
    fj_plan *plan;
    assert_int_equal(fj_plan_create(gpu, &d, &plan), FJ_OK);
    size_t bytes = 2 * 64 * 64 * 2 + 64;
    void *q, *k, *v, *o;
    assert_int_equal(fj_malloc(gpu, bytes, &q), FJ_OK);
    assert_int_equal(fj_malloc(gpu, bytes, &k), FJ_OK);
    assert_int_equal(fj_malloc(gpu, bytes, &v), FJ_OK);
    assert_int_equal(fj_malloc(gpu, bytes, &o), FJ_OK);
    assert_int_equal(fj_plan_execute(plan, (char *)q + 2, k, v, o, NULL, NULL),
                     FJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(fj_last_error(), "q ("));
    assert_int_equal(fj_plan_execute(plan, q, k, v, (char *)o + 8, NULL, NULL),
                     FJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(fj_last_error(), "o ("));
    fj_free(gpu, q);
    fj_free(gpu, k);
    fj_free(gpu, v);
    fj_free(gpu, o);
    fj_plan_destroy(plan);
}

/* Same inputs, same plan: bitwise the same output (the kernel has no
 * atomics or order-dependent reductions); a second plan for the same kernel
 * loads nothing; and a second context on the same device works alongside. */
static void test_plans_repeat_and_share(void **state)
{
    (void)state;
    REQUIRE_GPU();
    fj_attention_desc d;
    fj_attention_desc_init(&d, 2, 4, 2, 300, 500, 128, FJ_BF16);
    d.causal = FJ_CAUSAL_BOTTOM_RIGHT;
    fjt_rng rng;
    fjt_rng_init(&rng, seed ^ 77);
    fjt_problem p;
    assert_true(fjt_problem_make(&p, &d, &rng));
    fj_plan *p1, *p2;
    assert_int_equal(fj_plan_create(gpu, &d, &p1), FJ_OK);
    fj_attention_desc d2 = d;
    d2.seqlen_q = 17; /* another shape, the same kernel */
    assert_int_equal(fj_plan_create(gpu, &d2, &p2), FJ_OK);
    printf("# second plan:\n%s", fj_plan_describe(p2));
    assert_non_null(strstr(fj_plan_describe(p2), "already loaded in this context"));
    fj_plan_destroy(p2);

    size_t ob = p.o_elems * 2;
    void *dq, *dk, *dv, *d_o;
    assert_int_equal(fj_malloc(gpu, p.q_elems * 2, &dq), FJ_OK);
    assert_int_equal(fj_malloc(gpu, p.k_elems * 2, &dk), FJ_OK);
    assert_int_equal(fj_malloc(gpu, p.v_elems * 2, &dv), FJ_OK);
    assert_int_equal(fj_malloc(gpu, ob, &d_o), FJ_OK);
    assert_int_equal(fj_copy_to_device(gpu, dq, p.q, p.q_elems * 2), FJ_OK);
    assert_int_equal(fj_copy_to_device(gpu, dk, p.k, p.k_elems * 2), FJ_OK);
    assert_int_equal(fj_copy_to_device(gpu, dv, p.v, p.v_elems * 2), FJ_OK);
    unsigned char *a = malloc(ob), *b = malloc(ob);
    assert_non_null(a);
    assert_non_null(b);
    assert_int_equal(fj_plan_execute(p1, dq, dk, dv, d_o, NULL, NULL), FJ_OK);
    assert_int_equal(fj_copy_to_host(gpu, a, d_o, ob), FJ_OK);
    assert_int_equal(fj_plan_execute(p1, dq, dk, dv, d_o, NULL, NULL), FJ_OK);
    assert_int_equal(fj_copy_to_host(gpu, b, d_o, ob), FJ_OK);
    assert_memory_equal(a, b, ob);

    /* a second context on the same device: its own module cache, the same
       primary context; both keep working */
    fj_context_options o;
    fj_context_options_init(&o);
    o.backend = FJ_BACKEND_CUDA;
    fj_context *other;
    assert_int_equal(fj_context_create(&o, &other), FJ_OK);
    fj_plan *p3;
    assert_int_equal(fj_plan_create(other, &d, &p3), FJ_OK);
    void *d_o2;
    assert_int_equal(fj_malloc(other, ob, &d_o2), FJ_OK);
    /* device memory of one context is usable by another on the same device */
    assert_int_equal(fj_plan_execute(p3, dq, dk, dv, d_o2, NULL, NULL), FJ_OK);
    assert_int_equal(fj_synchronize(other, NULL), FJ_OK);
    assert_int_equal(fj_copy_to_host(other, b, d_o2, ob), FJ_OK);
    assert_memory_equal(a, b, ob);
    fj_free(other, d_o2);
    fj_plan_destroy(p3);
    fj_context_destroy(other);
    assert_int_equal(fj_plan_execute(p1, dq, dk, dv, d_o, NULL, NULL), FJ_OK);
    assert_int_equal(fj_synchronize(gpu, NULL), FJ_OK);

    free(a);
    free(b);
    fj_free(gpu, dq);
    fj_free(gpu, dk);
    fj_free(gpu, dv);
    fj_free(gpu, d_o);
    fj_plan_destroy(p1);
    fjt_problem_free(&p);
}

/* ---- split-KV: few query tiles, many keys --------------------------------- */

/* Whether the GPU plan for d splits its keys (so the case tests that path)
 * and, when combine is not NULL, names that combine kernel's tiles. */
static bool plan_splits(const fj_attention_desc *d, const char *combine)
{
    fj_plan *plan;
    if (fj_plan_create(gpu, d, &plan) != FJ_OK) return false;
    const char *desc = fj_plan_describe(plan);
    bool split = strstr(desc, "split-KV: ") != NULL && (!combine || strstr(desc, combine));
    fj_plan_destroy(plan);
    return split;
}

static void test_split_kv(void **state)
{
    (void)state;
    REQUIRE_GPU();
    const char *splits = getenv("FLASHJIT_CUDA_SPLITS");
    if (splits && !strcmp(splits, "1")) {
        printf("# skipped: FLASHJIT_CUDA_SPLITS=1 turns split-KV off\n");
        skip();
    }
    /* decode with and without GQA, short query blocks against long keys,
       masks whose band leaves whole splits empty, every head-dim class */
    const grid_case cases[] = {
        make_case("split-decode-mha", 1, 32, 32, 1, 4096, 128, FJ_BF16, FJ_CAUSAL_NONE, -1, -1, DENSE, true),
        make_case("split-decode-gqa", 2, 32, 8, 1, 32768, 128, FJ_BF16, FJ_CAUSAL_NONE, -1, -1, DENSE, true),
        make_case("split-decode-mqa-f16", 1, 8, 1, 1, 5000, 64, FJ_F16, FJ_CAUSAL_BOTTOM_RIGHT, -1, -1, BHSD, true),
        make_case("split-sq3-causal", 2, 4, 1, 3, 3001, 64, FJ_F16, FJ_CAUSAL_BOTTOM_RIGHT, -1, -1, PADDED, true),
        make_case("split-window", 1, 2, 2, 17, 5000, 40, FJ_BF16, FJ_CAUSAL_BOTTOM_RIGHT, 100, 0, DENSE, true),
        make_case("split-window-tl", 1, 2, 2, 17, 5000, 256, FJ_F16, FJ_CAUSAL_TOP_LEFT, 300, 5, DENSE, true),
        make_case("split-empty-rows", 1, 4, 4, 200, 6000, 80, FJ_BF16, FJ_CAUSAL_TOP_LEFT, -1, -1, DENSE, true),
        make_case("split-prefill", 1, 2, 2, 100, 9000, 160, FJ_BF16, FJ_CAUSAL_BOTTOM_RIGHT, -1, -1, KV_BROADCAST, false),
        /* GQA packing (src/gqa_pack.h): several queries per head, heads
           seqlen_q rows apart; a causal mask that hides nothing; one that
           hides all but key 0 (not packed); d256 decode tiles */
        make_case("pack-gqa-sq3-bhsd", 2, 32, 8, 3, 7000, 128, FJ_BF16, FJ_CAUSAL_NONE, -1, -1, BHSD, true),
        make_case("pack-gqa-causal-br", 1, 16, 2, 1, 9000, 96, FJ_F16, FJ_CAUSAL_BOTTOM_RIGHT, -1, -1, DENSE, true),
        make_case("nopack-gqa-top-left", 1, 8, 2, 1, 5000, 64, FJ_BF16, FJ_CAUSAL_TOP_LEFT, -1, -1, DENSE, true),
        make_case("pack-mqa-d256", 1, 8, 1, 1, 6000, 256, FJ_BF16, FJ_CAUSAL_NONE, -1, -1, DENSE, false),
    };
    int n = (int)(sizeof cases / sizeof cases[0]), failures = 0, unsplit = 0;
    for (int i = 0; i < n; i++) {
        if (!plan_splits(&cases[i].d, NULL)) {
            printf("FAIL %s: the plan does not split its keys, so this case does not test split-KV\n",
                   cases[i].label);
            unsplit++;
        }
        failures += !run_case(&cases[i]);
    }
    /* 1024 packed rows of few splits: the one-warp combine kernel (the cases
       above have at most 64 rows: eight warps), with FLASHJIT_CUDA_SPLITS=2
       so it splits on any GPU */
    const grid_case one_warp = make_case("split-combine-one-warp", 32, 32, 8, 1, 2048, 128, FJ_BF16,
                                         FJ_CAUSAL_NONE, -1, -1, DENSE, true);
    setenv("FLASHJIT_CUDA_SPLITS", "2", 1);
    if (!plan_splits(&one_warp.d, ".m16n64w1s1.split")) {
        printf("FAIL %s: the plan does not split its keys with a one-warp combine, so this case "
               "does not test that kernel\n",
               one_warp.label);
        unsplit++;
    }
    failures += !run_case(&one_warp);
    unsetenv("FLASHJIT_CUDA_SPLITS");
    report("split-KV", n + 1, failures + unsplit);
}

/* ---- setup -------------------------------------------------------------------------- */

static int group_setup(void **state)
{
    (void)state;
    seed = fjt_seed();
    only_case = getenv("FLASHJIT_GRID_CASE");
    if (only_case && !*only_case) only_case = NULL;
    fj_context_options o;
    fj_context_options_init(&o);
    o.backend = FJ_BACKEND_CUDA;
    if (fj_context_create(&o, &gpu) != FJ_OK) {
        snprintf(no_gpu, sizeof no_gpu, "%s", fj_last_error());
        gpu = NULL;
        printf("# no usable GPU: %s\n", no_gpu);
        return 0;
    }
    have_gpu = true;
    printf("# GPU context:\n");
    for (const char *line = fj_context_describe(gpu); *line;) {
        const char *nl = strchr(line, '\n');
        int len = nl ? (int)(nl - line) : (int)strlen(line);
        printf("#   %.*s\n", len, line);
        line += len + (nl ? 1 : 0);
    }
    o.backend = FJ_BACKEND_CPU_REFERENCE;
    if (fj_context_create(&o, &ref) != FJ_OK) {
        printf("# cannot create the CPU reference context: %s\n", fj_last_error());
        return -1;
    }
    fflush(stdout);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    fj_context_destroy(gpu);
    fj_context_destroy(ref);
    return 0;
}

int main(void)
{
    /* FLASHJIT_GRID_TESTS=test_split_kv runs one group (cmocka's filter). */
    const char *filter = getenv("FLASHJIT_GRID_TESTS");
    if (filter && *filter) cmocka_set_test_filter(filter);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unsupported_on_gpu),
        cmocka_unit_test(test_misaligned_pointer_on_gpu),
        cmocka_unit_test(test_plans_repeat_and_share),
        cmocka_unit_test(test_head_dims),
        cmocka_unit_test(test_seqlens),
        cmocka_unit_test(test_masks),
        cmocka_unit_test(test_heads_and_layouts),
        cmocka_unit_test(test_sampled),
        cmocka_unit_test(test_split_kv),
    };
    int failed = cmocka_run_group_tests_name("cuda_grid", tests, group_setup, group_teardown);
    /* All skipped: tell meson (77 = skipped) rather than report a pass. */
    if (!failed && !have_gpu) return 77;
    return failed;
}
