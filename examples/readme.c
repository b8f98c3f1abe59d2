/* The program of README.md's "Using the library", complete: one causal GQA
 * attention in bf16 on the best backend here (CUDA when usable, else the
 * CPU), from float32 data on the host and back.
 *
 *     cc readme.c $(pkg-config --cflags --libs flashjit) -lm && ./a.out
 */
#include <flashjit.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* Every flashjit call returns a status; fj_last_error() says which field
 * broke which rule. */
#define CHECK(call)                                                                      \
    do {                                                                                 \
        fj_status s_ = (call);                                                           \
        if (s_ != FJ_OK) {                                                               \
            fprintf(stderr, "%s: %s: %s\n", #call, fj_status_name(s_), fj_last_error()); \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

/* float32 host data -> a new tensor of the context's memory in bf16. */
static void *upload_bf16(fj_context *ctx, const float *host, size_t n)
{
    uint16_t *staging = malloc(n * fj_dtype_size(FJ_BF16));
    void *dev;
    if (!staging) exit(1);
    CHECK(fj_convert(FJ_BF16, staging, FJ_F32, host, n));
    CHECK(fj_malloc(ctx, n * fj_dtype_size(FJ_BF16), &dev));
    CHECK(fj_copy_to_device(ctx, dev, staging, n * fj_dtype_size(FJ_BF16)));
    free(staging);
    return dev;
}

static float *random_floats(size_t n)
{
    float *x = malloc(n * sizeof *x);
    if (!x) exit(1);
    for (size_t i = 0; i < n; i++) x[i] = (float)rand() / (float)RAND_MAX * 2.0f - 1.0f;
    return x;
}

int main(void)
{
    const int batch = 2, seqlen = 256, heads_q = 32, heads_kv = 8, head_dim = 128;

    fj_context *ctx; /* once: picks CUDA or the CPU */
    CHECK(fj_context_create(NULL, &ctx));

    fj_attention_desc d; /* [batch, seq, heads, head_dim] */
    fj_attention_desc_init(&d, batch, heads_q, heads_kv, seqlen, seqlen, head_dim, FJ_BF16);
    d.causal = FJ_CAUSAL_BOTTOM_RIGHT; /* GQA 32:8, causal */

    fj_plan *plan; /* once per shape: compiles or loads the kernel */
    CHECK(fj_plan_create(ctx, &d, &plan));

    const size_t nq = (size_t)batch * seqlen * heads_q * head_dim;
    const size_t nkv = (size_t)batch * seqlen * heads_kv * head_dim;
    float *host_q = random_floats(nq), *host_k = random_floats(nkv), *host_v = random_floats(nkv);
    void *q = upload_bf16(ctx, host_q, nq), *k = upload_bf16(ctx, host_k, nkv);
    void *v = upload_bf16(ctx, host_v, nkv), *o;
    CHECK(fj_malloc(ctx, nq * fj_dtype_size(FJ_BF16), &o));

    CHECK(fj_plan_execute(plan, q, k, v, o, NULL, NULL /* a CUstream, or NULL */));
    CHECK(fj_synchronize(ctx, NULL));

    uint16_t *out_bf16 = malloc(nq * fj_dtype_size(FJ_BF16));
    float *out = malloc(nq * sizeof *out), *v0 = malloc((size_t)head_dim * sizeof *v0);
    if (!out_bf16 || !out || !v0) return 1;
    CHECK(fj_copy_to_host(ctx, out_bf16, o, nq * fj_dtype_size(FJ_BF16)));
    CHECK(fj_convert(FJ_F32, out, FJ_BF16, out_bf16, nq));

    /* Causal with seqlen_q == seqlen_k: the first query sees the first key
       only, so its output is that key's value row (kv head 0 for q head 0). */
    uint16_t v0_bf16[128];
    CHECK(fj_convert(FJ_BF16, v0_bf16, FJ_F32, host_v, (size_t)head_dim));
    CHECK(fj_convert(FJ_F32, v0, FJ_BF16, v0_bf16, (size_t)head_dim));
    double worst = 0;
    for (int c = 0; c < head_dim; c++) worst = fmax(worst, fabs((double)out[c] - v0[c]));
    for (size_t i = 0; i < nq; i++)
        if (!isfinite(out[i])) {
            fprintf(stderr, "readme: output element %zu is %g\n", i, (double)out[i]);
            return 1;
        }

    fj_plan_info info;
    CHECK(fj_plan_get_info(plan, &info));
    printf("backend %s, kernel %s\n", fj_backend_name(info.backend), info.kernel);
    fj_free(ctx, q), fj_free(ctx, k), fj_free(ctx, v), fj_free(ctx, o);
    free(host_q), free(host_k), free(host_v), free(out_bf16), free(out), free(v0);
    fj_plan_destroy(plan);
    fj_context_destroy(ctx);
    if (worst != 0) {
        fprintf(stderr, "readme: the first query row differs from v[0] by %g\n", worst);
        return 1;
    }
    printf("readme: b%d hq%d hkv%d s%d d%d bf16 causal: all outputs finite, row 0 == v[0]\n", batch,
           heads_q, heads_kv, seqlen, head_dim);
    return 0;
}
