/* fj_merge on CUDA: one launch of kernel_templates/merge.cu on the caller's
 * stream. The kernel (one per dtype, any head dim) comes from the context's
 * module cache, built (disk cache or NVRTC) at the context's first merge of
 * that dtype; its pointer is then kept in the device state, so later merges
 * do no lookup, no allocation and no host work beyond the launch. */
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "../../kernel_templates/merge_params.h"
#include "backend.h"
#include "context.h"
#include "cuda/cuda_merge.h"
#include "cuda/device.h"
#include "cuda/module_cache.h"
#include "status.h"

/* The loaded kernel of the dtype, cached in s->merge_kernels. */
static fj_status merge_kernel(fj_context *ctx, fj_cuda_state *s, fj_dtype t,
                              const fj_cuda_kernel **out)
{
    _Atomic(const fj_cuda_kernel *) *slot = &s->merge_kernels[t];
    const fj_cuda_kernel *kn = atomic_load_explicit(slot, memory_order_acquire);
    if (kn) {
        *out = kn;
        return FJ_OK;
    }
    fj_kernel_desc k;
    fj_kernel_desc_init(&k);
    k.template_id = FJ_TEMPLATE_MERGE;
    k.dtype = (uint32_t)t;
    k.arch = (uint32_t)s->arch;
    bool loaded_before;
    fj_status st = fj_module_cache_get(s->modules, s, &k, ctx->cache_dir, &kn, &loaded_before);
    if (st) return fj_fail_prefix(st, "fj_merge");
    /* racing threads store the same pointer (the module cache builds once) */
    atomic_store_explicit(slot, kn, memory_order_release);
    *out = kn;
    return FJ_OK;
}

static bool vector_ok(const void *ptr, const int64_t stride[3], int vec)
{
    return (uintptr_t)ptr % 16 == 0 && stride[0] % vec == 0 && stride[1] % vec == 0 &&
           stride[2] % vec == 0;
}

fj_status fj_cuda_merge(fj_context *ctx, const fj_merge_problem *m, const void *o_a,
                        const float *lse_a, const void *o_b, const float *lse_b, void *o,
                        float *lse, void *stream)
{
    fj_cuda_state *s = ctx->backend_state;
    const fj_cuda_kernel *kn = NULL;
    fj_status st = merge_kernel(ctx, s, m->dtype, &kn);
    if (st) return st;

    fj_merge_params prm;
    memset(&prm, 0, sizeof prm);
    prm.o_a = o_a;
    prm.o_b = o_b;
    prm.o = o;
    prm.lse_a = lse_a;
    prm.lse_b = lse_b;
    prm.lse = lse;
    for (int a = 0; a < 3; a++) {
        prm.a_stride[a] = m->a_stride[a];
        prm.b_stride[a] = m->b_stride[a];
        prm.o_stride[a] = m->o_stride[a];
    }
    prm.heads_q = m->heads_q;
    prm.seqlen_q = m->seqlen_q;
    prm.head_dim = m->head_dim;
    const int vec = 16 / (int)fj_dtype_size(m->dtype);
    prm.vec = m->head_dim % vec == 0 && vector_ok(o_a, m->a_stride, vec) &&
                      vector_ok(o_b, m->b_stride, vec) && vector_ok(o, m->o_stride, vec)
                  ? vec
                  : 1;
    /* threads per row: enough for one step over the row, up to a block */
    const int64_t steps = (m->head_dim + prm.vec - 1) / prm.vec;
    int lanes = 1;
    while (lanes < steps && lanes < FJ_MERGE_THREADS) lanes *= 2;
    prm.lanes = lanes;
    prm.rows = (int64_t)m->batch * m->heads_q * m->seqlen_q;
    const int64_t rows_per_block = FJ_MERGE_THREADS / lanes;
    prm.blocks = (prm.rows + rows_per_block - 1) / rows_per_block;
    const unsigned grid = prm.blocks > INT32_MAX ? INT32_MAX : (unsigned)prm.blocks;

    if ((st = fj_cuda_push(s))) return st;
    void *args[1] = {&prm};
    CUresult r = s->api->cuLaunchKernel(kn->function, grid, 1, 1, FJ_MERGE_THREADS, 1, 1, 0,
                                        (CUstream)stream, args, NULL);
    fj_cuda_pop(s);
    if (r != FJ_CUDA_SUCCESS) return fj_cuda_fail(s->api, r, "cuLaunchKernel(merge)");
    return FJ_OK;
}
