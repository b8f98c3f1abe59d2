/* ggml's CPU attention (GGML_OP_FLASH_ATTN_EXT, what llama.cpp runs with
 * flash attention on) as a peer for tools/compare_torch_cpu.py --ggml-lib:
 * one problem's graph built once from PyTorch's BHSD tensors, then computed
 * on a thread pool of its own, timed by the caller around fjt_ggml_run.
 * Built against a ggml checkout by tools/dev/build_ggml_peer.sh; not part of
 * the library or its build.
 *
 * ggml's layouts: q [d, sq, hq, b] f32 (ggml's attention takes Q in f32;
 * bf16 and f16 rows convert it once here), k and v [d, sk, hkv, b] in the
 * row's type, which are BHSD's bytes as they are; the result is
 * [d, hq, sq, b] f32, read back transposed to BHSD by fjt_ggml_output.
 * Causal: an f16 mask [sk, sq], -inf above the bottom-right diagonal. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ggml-cpu.h"
#include "ggml.h"

enum { FJT_F32 = 0, FJT_F16 = 1, FJT_BF16 = 2 };

typedef struct fjt_ggml {
    struct ggml_context *ctx;
    struct ggml_cgraph *graph;
    struct ggml_tensor *out;
    struct ggml_threadpool *pool;
    struct ggml_cplan plan;
    void *work;
    int b, hq, sq, d;
} fjt_ggml;

static float bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

void fjt_ggml_free(fjt_ggml *g)
{
    if (!g) return;
    if (g->pool) ggml_threadpool_free(g->pool);
    free(g->work);
    if (g->ctx) ggml_free(g->ctx);
    free(g);
}

/* q, k, v: BHSD contiguous in `type` (q too); NULL on failure. */
fjt_ggml *fjt_ggml_prepare(int b, int hq, int hkv, int sq, int sk, int d, int type, int causal,
                           float scale, int threads, const void *q, const void *k, const void *v)
{
    fjt_ggml *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->b = b;
    g->hq = hq;
    g->sq = sq;
    g->d = d;
    const enum ggml_type kv_type = type == FJT_F32   ? GGML_TYPE_F32
                                   : type == FJT_F16 ? GGML_TYPE_F16
                                                     : GGML_TYPE_BF16;
    const size_t nq = (size_t)b * hq * sq * d, nk = (size_t)b * hkv * sk * d;
    const size_t bytes = nq * 4 * 2 + nk * ggml_type_size(kv_type) * 2 +
                         (causal ? (size_t)sk * sq * 2 : 0) + 16 * ggml_tensor_overhead() +
                         ggml_graph_overhead() + (1u << 20);
    struct ggml_init_params ip = {bytes, NULL, false};
    g->ctx = ggml_init(ip);
    if (!g->ctx) goto fail;
    struct ggml_tensor *tq = ggml_new_tensor_4d(g->ctx, GGML_TYPE_F32, d, sq, hq, b);
    struct ggml_tensor *tk = ggml_new_tensor_4d(g->ctx, kv_type, d, sk, hkv, b);
    struct ggml_tensor *tv = ggml_new_tensor_4d(g->ctx, kv_type, d, sk, hkv, b);
    float *qd = tq->data;
    if (type == FJT_F32) {
        memcpy(qd, q, nq * 4);
    } else {
        const uint16_t *h = q;
        for (size_t i = 0; i < nq; i++)
            qd[i] = type == FJT_BF16 ? bf16_to_f32(h[i]) : ggml_fp16_to_fp32(h[i]);
    }
    memcpy(tk->data, k, ggml_nbytes(tk));
    memcpy(tv->data, v, ggml_nbytes(tv));
    struct ggml_tensor *mask = NULL;
    if (causal) {
        mask = ggml_new_tensor_4d(g->ctx, GGML_TYPE_F16, sk, sq, 1, 1);
        ggml_fp16_t *m = mask->data;
        const ggml_fp16_t zero = ggml_fp32_to_fp16(0.f), ninf = ggml_fp32_to_fp16(-INFINITY);
        for (int i = 0; i < sq; i++)
            for (int j = 0; j < sk; j++) m[(size_t)i * sk + j] = j > i + (sk - sq) ? ninf : zero;
    }
    g->out = ggml_flash_attn_ext(g->ctx, tq, tk, tv, mask, scale, 0.f, 0.f);
    ggml_flash_attn_ext_set_prec(g->out, GGML_PREC_F32);
    g->graph = ggml_new_graph(g->ctx);
    ggml_build_forward_expand(g->graph, g->out);
    struct ggml_threadpool_params tp = ggml_threadpool_params_default(threads);
    g->pool = ggml_threadpool_new(&tp);
    if (!g->pool) goto fail;
    g->plan = ggml_graph_plan(g->graph, threads, g->pool);
    if (g->plan.work_size) {
        g->work = malloc(g->plan.work_size);
        if (!g->work) goto fail;
        g->plan.work_data = g->work;
    }
    return g;
fail:
    fjt_ggml_free(g);
    return NULL;
}

/* One computation of the graph; 0 on success. */
int fjt_ggml_run(fjt_ggml *g)
{
    return ggml_graph_compute(g->graph, &g->plan) == GGML_STATUS_SUCCESS ? 0 : 1;
}

/* The last result as BHSD f32. */
void fjt_ggml_output(const fjt_ggml *g, float *o)
{
    const float *r = g->out->data; /* [d, hq, sq, b] */
    for (int b = 0; b < g->b; b++)
        for (int h = 0; h < g->hq; h++)
            for (int i = 0; i < g->sq; i++)
                memcpy(o + (((size_t)b * g->hq + h) * g->sq + i) * g->d,
                       r + (((size_t)b * g->sq + i) * g->hq + h) * g->d, (size_t)g->d * 4);
}
