/* Token-by-token decoding with a KV cache, as an inference engine runs it:
 * a causal prefill over the prompt, then one query row per new token
 * against all keys so far. The cache is allocated once for its capacity;
 * the descs' strides describe it, so nothing is copied as it grows. At the
 * end, every decoded row is checked against a causal prefill over the whole
 * sequence (bottom-right causal makes decode row t the prefill's row t).
 * f16, GQA 8:2, on the best backend here.
 *
 *     cc gqa_decode.c $(pkg-config --cflags --libs flashjit) -lm && ./a.out
 */
#include <flashjit.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(call)                                                                      \
    do {                                                                                 \
        fj_status s_ = (call);                                                           \
        if (s_ != FJ_OK) {                                                               \
            fprintf(stderr, "%s: %s: %s\n", #call, fj_status_name(s_), fj_last_error()); \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

enum { BATCH = 2, HQ = 8, HKV = 2, D = 64, PROMPT = 37, STEPS = 24, CAPACITY = 64 };
enum { TOTAL = PROMPT + STEPS };
#define ES 2 /* bytes of an f16 element */

/* n random f16 values (uniform in [-1, 1)) into h. */
static void random_f16(uint16_t *h, size_t n)
{
    float x[256];
    for (size_t i = 0; i < n; i += 256) {
        size_t m = n - i < 256 ? n - i : 256;
        for (size_t j = 0; j < m; j++) x[j] = (float)rand() / (float)RAND_MAX * 2.0f - 1.0f;
        CHECK(fj_convert(FJ_F16, h + i, FJ_F32, x, m));
    }
}

/* The cache's strides [batch, seq, head] in elements: room for CAPACITY
 * tokens per sequence, of which the descs use the first seqlen_k. */
static void cache_strides(int64_t s[3])
{
    s[0] = (int64_t)CAPACITY * HKV * D;
    s[1] = (int64_t)HKV * D;
    s[2] = D;
}

/* Writes `tokens` tokens of host K or V ([batch, tokens, hkv, d]) into the
 * cache at position `at`, one contiguous run per sequence. */
static void append(fj_context *ctx, void *cache, const uint16_t *host, int at, int tokens)
{
    for (int b = 0; b < BATCH; b++) {
        size_t dst = ((size_t)b * CAPACITY + (size_t)at) * HKV * D * ES;
        size_t src = (size_t)b * tokens * HKV * D;
        CHECK(
            fj_copy_to_device(ctx, (char *)cache + dst, host + src, (size_t)tokens * HKV * D * ES));
    }
}

int main(void)
{
    fj_context *ctx;
    CHECK(fj_context_create(NULL, &ctx));

    /* every token's q, k and v, made up front (a model would compute them
       step by step): [batch, token, heads, d] */
    const size_t q_tok = (size_t)HQ * D, kv_tok = (size_t)HKV * D;
    uint16_t *q_all = malloc(BATCH * TOTAL * q_tok * ES),
             *k_all = malloc(BATCH * TOTAL * kv_tok * ES);
    uint16_t *v_all = malloc(BATCH * TOTAL * kv_tok * ES), *step_host = malloc(BATCH * kv_tok * ES);
    uint16_t *decoded = malloc(BATCH * TOTAL * q_tok * ES),
             *reference = malloc(BATCH * TOTAL * q_tok * ES);
    if (!q_all || !k_all || !v_all || !step_host || !decoded || !reference) return 1;
    random_f16(q_all, BATCH * TOTAL * q_tok);
    random_f16(k_all, BATCH * TOTAL * kv_tok);
    random_f16(v_all, BATCH * TOTAL * kv_tok);

    void *k_cache, *v_cache, *q, *o;
    CHECK(fj_malloc(ctx, BATCH * CAPACITY * kv_tok * ES, &k_cache));
    CHECK(fj_malloc(ctx, BATCH * CAPACITY * kv_tok * ES, &v_cache));
    CHECK(fj_malloc(ctx, BATCH * TOTAL * q_tok * ES, &q));
    CHECK(fj_malloc(ctx, BATCH * TOTAL * q_tok * ES, &o));

    /* Prefill: the prompt's keys into the cache, a causal attention over them. */
    uint16_t *prompt_kv = malloc(BATCH * PROMPT * kv_tok * ES);
    if (!prompt_kv) return 1;
    for (int b = 0; b < BATCH; b++)
        for (size_t i = 0; i < PROMPT * kv_tok; i++)
            prompt_kv[b * PROMPT * kv_tok + i] = k_all[b * TOTAL * kv_tok + i];
    append(ctx, k_cache, prompt_kv, 0, PROMPT);
    for (int b = 0; b < BATCH; b++)
        for (size_t i = 0; i < PROMPT * kv_tok; i++)
            prompt_kv[b * PROMPT * kv_tok + i] = v_all[b * TOTAL * kv_tok + i];
    append(ctx, v_cache, prompt_kv, 0, PROMPT);
    free(prompt_kv);

    fj_attention_desc d;
    fj_attention_desc_init(&d, BATCH, HQ, HKV, PROMPT, PROMPT, D, FJ_F16);
    d.causal = FJ_CAUSAL_BOTTOM_RIGHT;
    /* q and o hold all TOTAL tokens per sequence; the prompt is the first PROMPT */
    d.q_stride[0] = d.o_stride[0] = (int64_t)TOTAL * q_tok;
    d.q_stride[1] = d.o_stride[1] = (int64_t)q_tok;
    d.q_stride[2] = d.o_stride[2] = D;
    cache_strides(d.k_stride);
    cache_strides(d.v_stride);
    CHECK(fj_copy_to_device(ctx, q, q_all, BATCH * TOTAL * q_tok * ES));
    CHECK(fj_attention(ctx, &d, q, k_cache, v_cache, o, NULL, NULL));

    /* Decode: each step appends its token's k and v, then one query row
       sees every key so far. fj_attention keeps a plan per distinct desc
       in the context; on CUDA the kernel does not depend on seqlen_k, so it
       is compiled once. */
    for (int t = PROMPT; t < TOTAL; t++) {
        for (int b = 0; b < BATCH; b++)
            for (size_t i = 0; i < kv_tok; i++)
                step_host[b * kv_tok + i] = k_all[(b * TOTAL + (size_t)t) * kv_tok + i];
        append(ctx, k_cache, step_host, t, 1);
        for (int b = 0; b < BATCH; b++)
            for (size_t i = 0; i < kv_tok; i++)
                step_host[b * kv_tok + i] = v_all[(b * TOTAL + (size_t)t) * kv_tok + i];
        append(ctx, v_cache, step_host, t, 1);

        fj_attention_desc step = d;
        step.seqlen_q = 1;
        step.seqlen_k = t + 1;
        /* this token's row of q and o */
        const size_t row = (size_t)t * q_tok * ES;
        CHECK(fj_attention(ctx, &step, (char *)q + row, k_cache, v_cache, (char *)o + row, NULL,
                           NULL));
    }
    CHECK(fj_synchronize(ctx, NULL));
    CHECK(fj_copy_to_host(ctx, decoded, o, BATCH * TOTAL * q_tok * ES));

    /* The same sequence in one causal prefill over all TOTAL tokens. */
    fj_attention_desc whole = d;
    whole.seqlen_q = whole.seqlen_k = TOTAL;
    CHECK(fj_attention(ctx, &whole, q, k_cache, v_cache, o, NULL, NULL));
    CHECK(fj_synchronize(ctx, NULL));
    CHECK(fj_copy_to_host(ctx, reference, o, BATCH * TOTAL * q_tok * ES));

    static float a[BATCH * TOTAL * HQ * D], r[BATCH * TOTAL * HQ * D];
    CHECK(fj_convert(FJ_F32, a, FJ_F16, decoded, BATCH * TOTAL * q_tok));
    CHECK(fj_convert(FJ_F32, r, FJ_F16, reference, BATCH * TOTAL * q_tok));
    double worst = 0;
    for (size_t i = 0; i < BATCH * TOTAL * q_tok; i++)
        worst = fmax(worst, fabs((double)a[i] - r[i]));

    printf("gqa_decode: %s, prompt %d + %d decoded tokens, batch %d, heads %d:%d, d%d f16\n",
           fj_backend_name(fj_context_backend(ctx)), PROMPT, STEPS, BATCH, HQ, HKV, D);
    fj_free(ctx, k_cache), fj_free(ctx, v_cache), fj_free(ctx, q), fj_free(ctx, o);
    free(q_all), free(k_all), free(v_all), free(step_host), free(decoded), free(reference);
    fj_context_destroy(ctx);
    /* f16 outputs below 1: the two paths may round the last bit apart */
    if (!(worst <= 2e-3)) {
        fprintf(stderr, "gqa_decode: decoded rows differ from the prefill by %g\n", worst);
        return 1;
    }
    printf("gqa_decode: every row matches one causal prefill over the sequence (max |diff| %.2g)\n",
           worst);
    return 0;
}
