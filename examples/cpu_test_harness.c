/* flashjit as the oracle in an application's own unit test, on any machine:
 * an engine's hand-written attention (here a plain one, with the sliding
 * window and top-left causal options an engine might have) is checked
 * against flashjit's CPU reference backend on random cases, output and
 * log-sum-exp both. No GPU is needed and none is used: the context asks for
 * FJ_BACKEND_CPU_REFERENCE explicitly.
 *
 *     cc cpu_test_harness.c $(pkg-config --cflags --libs flashjit) -lm && ./a.out
 */
#include <flashjit.h>

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the code under test: the application's attention ------------------- */

typedef struct app_attention {
    int batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim;
    int causal_top_left, window_left; /* window_left < 0: none */
} app_attention;

/* Dense [batch, seq, heads, dim] float32; lse [batch, heads_q, seqlen_q]. */
static void app_attention_forward(const app_attention *a, const float *q, const float *k,
                                  const float *v, float *o, float *lse)
{
    const int D = a->head_dim, group = a->heads_q / a->heads_kv;
    const float scale = 1.0f / sqrtf((float)D);
    float *s = malloc((size_t)a->seqlen_k * sizeof *s);
    if (!s) exit(1);
    for (int b = 0; b < a->batch; b++)
        for (int h = 0; h < a->heads_q; h++)
            for (int i = 0; i < a->seqlen_q; i++) {
                const float *qi = q + (((size_t)b * a->seqlen_q + i) * a->heads_q + h) * D;
                float *oi = o + (((size_t)b * a->seqlen_q + i) * a->heads_q + h) * D;
                /* the diagonal: top-left when causal, else aligned to the last key */
                const int diag = a->causal_top_left ? i : i + a->seqlen_k - a->seqlen_q;
                float mx = -INFINITY, sum = 0;
                for (int j = 0; j < a->seqlen_k; j++) {
                    bool visible = (!a->causal_top_left || j <= diag) &&
                                   (a->window_left < 0 || j >= diag - a->window_left);
                    const float *kj =
                        k + (((size_t)b * a->seqlen_k + j) * a->heads_kv + h / group) * D;
                    float dot = 0;
                    for (int c = 0; c < D; c++) dot += qi[c] * kj[c];
                    s[j] = visible ? dot * scale : -INFINITY;
                    mx = fmaxf(mx, s[j]);
                }
                memset(oi, 0, (size_t)D * sizeof *oi);
                for (int j = 0; j < a->seqlen_k && mx > -INFINITY; j++) {
                    float p = expf(s[j] - mx);
                    const float *vj =
                        v + (((size_t)b * a->seqlen_k + j) * a->heads_kv + h / group) * D;
                    sum += p;
                    for (int c = 0; c < D; c++) oi[c] += p * vj[c];
                }
                for (int c = 0; c < D && sum > 0; c++) oi[c] /= sum;
                lse[((size_t)b * a->heads_q + h) * a->seqlen_q + i] =
                    sum > 0 ? mx + logf(sum) : -INFINITY;
            }
    free(s);
}

/* ---- the test ------------------------------------------------------------------ */

static int failures;

static float *random_floats(size_t n)
{
    float *x = malloc(n * sizeof *x);
    if (!x) exit(1);
    for (size_t i = 0; i < n; i++) x[i] = (float)rand() / (float)RAND_MAX * 2.0f - 1.0f;
    return x;
}

static void check_case(fj_context *ctx, const app_attention *a)
{
    fj_attention_desc d;
    fj_attention_desc_init(&d, a->batch, a->heads_q, a->heads_kv, a->seqlen_q, a->seqlen_k,
                           a->head_dim, FJ_F32);
    d.causal = a->causal_top_left ? FJ_CAUSAL_TOP_LEFT : FJ_CAUSAL_NONE;
    d.window_left = a->window_left;
    fj_plan *plan;
    fj_status s = fj_plan_create(ctx, &d, &plan);
    if (s) {
        fprintf(stderr, "fj_plan_create: %s: %s\n", fj_status_name(s), fj_last_error());
        exit(1);
    }
    const size_t nq = (size_t)a->batch * a->seqlen_q * a->heads_q * a->head_dim;
    const size_t nkv = (size_t)a->batch * a->seqlen_k * a->heads_kv * a->head_dim;
    const size_t nl = (size_t)a->batch * a->heads_q * a->seqlen_q;
    float *q = random_floats(nq), *k = random_floats(nkv), *v = random_floats(nkv);
    float *o = malloc(nq * sizeof *o), *o_ref = malloc(nq * sizeof *o);
    float *lse = malloc(nl * sizeof *lse), *lse_ref = malloc(nl * sizeof *lse);
    if (!o || !o_ref || !lse || !lse_ref) exit(1);

    app_attention_forward(a, q, k, v, o, lse);
    /* CPU backends take host memory: no fj_malloc or copies needed */
    if ((s = fj_plan_execute(plan, q, k, v, o_ref, lse_ref, NULL))) {
        fprintf(stderr, "fj_plan_execute: %s: %s\n", fj_status_name(s), fj_last_error());
        exit(1);
    }
    double worst = 0, worst_lse = 0;
    for (size_t i = 0; i < nq; i++) worst = fmax(worst, fabs((double)o[i] - o_ref[i]));
    for (size_t i = 0; i < nl; i++)
        worst_lse = isinf(lse[i]) && lse[i] == lse_ref[i]
                        ? worst_lse
                        : fmax(worst_lse, fabs((double)lse[i] - lse_ref[i]));
    bool ok = worst <= 1e-5 && worst_lse <= 1e-5;
    failures += !ok;
    printf("%s b%d hq%d hkv%d sq%d sk%d d%d%s%s: max |o - o_ref| %.1e, |lse - lse_ref| %.1e\n",
           ok ? "PASS" : "FAIL", a->batch, a->heads_q, a->heads_kv, a->seqlen_q, a->seqlen_k,
           a->head_dim, a->causal_top_left ? " causal" : "", a->window_left >= 0 ? " window" : "",
           worst, worst_lse);
    free(q), free(k), free(v), free(o), free(o_ref), free(lse), free(lse_ref);
    fj_plan_destroy(plan);
}

int main(int argc, char **argv)
{
    unsigned seed = argc > 1 ? (unsigned)strtoul(argv[1], NULL, 10) : 20261204u;
    srand(seed);
    printf("seed %u (rerun with: %s %u)\n", seed, argv[0], seed);

    fj_context_options opt;
    fj_context_options_init(&opt);
    opt.backend = FJ_BACKEND_CPU_REFERENCE; /* the yardstick, on any machine */
    opt.cache_dir = "";                     /* nothing written to disk */
    fj_context *ctx;
    fj_status s = fj_context_create(&opt, &ctx);
    if (s) {
        fprintf(stderr, "fj_context_create: %s: %s\n", fj_status_name(s), fj_last_error());
        return 1;
    }
    const app_attention cases[] = {
        {1, 1, 1, 1, 1, 8, 0, -1},     /* one row, one key */
        {2, 4, 2, 17, 17, 32, 1, -1},  /* GQA 4:2, causal */
        {1, 6, 1, 5, 31, 64, 0, 7},    /* MQA, more keys than queries, a window */
        {3, 2, 2, 13, 11, 40, 1, 3},   /* fewer keys, causal and window */
        {1, 8, 4, 1, 129, 128, 0, -1}, /* a decode row */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_case(ctx, &cases[i]);
    fj_context_destroy(ctx);
    printf("cpu_test_harness: %d of %zu cases failed\n", failures, sizeof cases / sizeof cases[0]);
    return failures != 0;
}
