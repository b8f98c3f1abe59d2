/* The CUDA backend's registry row: its probe brings up the device and makes
 * the context's module cache, its ops are the plans of cuda_plan.c and the
 * device memory of device.c. */
#include <stdio.h>
#include <string.h>

#include "backend.h"
#include "context.h"
#include "cuda/cuda_merge.h"
#include "cuda/cuda_plan.h"
#include "cuda/device.h"
#include "cuda/module_cache.h"
#include "tune/tuning.h"

static void cuda_release(void *state)
{
    fj_cuda_state *s = state;
    if (!s) return;
    fj_module_cache_destroy(s->modules, s);
    fj_cuda_device_close(s);
}

static fj_status cuda_probe(fj_context *ctx, void **state, fj_strbuf *facts)
{
    fj_cuda_state *s;
    fj_status st = fj_cuda_device_open(ctx->device, &s, facts);
    if (st) return st;
    if ((st = fj_module_cache_create(&s->modules))) {
        cuda_release(s);
        return st;
    }
    *state = s;
    return FJ_OK;
}

static void cuda_tuning_target(const fj_context *ctx, fj_tuning_target *t)
{
    const fj_cuda_state *s = ctx->backend_state;
    fj_tuning_device_token(s->name, t->device, sizeof t->device);
    snprintf(t->device_name, sizeof t->device_name, "%s", s->name);
    snprintf(t->arch, sizeof t->arch, "sm_%d", s->arch);
    snprintf(t->template_name, sizeof t->template_name, "flash_fwd");
    t->sm = (uint32_t)s->arch;
    t->smem_limit = (size_t)s->smem_optin;
    t->device_memory = s->total_mem;
}

static fj_status cuda_mem_alloc(fj_context *ctx, size_t bytes, void **ptr)
{
    return fj_cuda_mem_alloc(ctx->backend_state, bytes, ptr);
}
static void cuda_mem_free(fj_context *ctx, void *ptr) { fj_cuda_mem_free(ctx->backend_state, ptr); }
static fj_status cuda_copy_to_device(fj_context *ctx, void *dst, const void *src, size_t bytes)
{
    return fj_cuda_copy_to_device(ctx->backend_state, dst, src, bytes);
}
static fj_status cuda_copy_to_host(fj_context *ctx, void *dst, const void *src, size_t bytes)
{
    return fj_cuda_copy_to_host(ctx->backend_state, dst, src, bytes);
}
static fj_status cuda_synchronize(fj_context *ctx, void *stream)
{
    return fj_cuda_synchronize(ctx->backend_state, stream);
}

static const fj_backend_ops cuda_ops = {
    .kind = FJ_BACKEND_CUDA,
    .name = "cuda",
    .plan_create = fj_cuda_plan_create,
    .execute = fj_cuda_execute,
    .plan_destroy = fj_cuda_plan_destroy,
    .time_runs = fj_cuda_time_runs,
    .launches = fj_cuda_launches,
    .info = fj_cuda_plan_info,
    .mem_alloc = cuda_mem_alloc,
    .mem_free = cuda_mem_free,
    .copy_to_device = cuda_copy_to_device,
    .copy_to_host = cuda_copy_to_host,
    .synchronize = cuda_synchronize,
    .merge = fj_cuda_merge,
};

const fj_backend_entry fj_cuda_backend_entry = {
    .kind = FJ_BACKEND_CUDA,
    .name = "cuda",
    .title = "CUDA",
    .usable_when = "a CUDA device, the driver and NVRTC are usable",
    .auto_choice = true,
    .probe = cuda_probe,
    .release = cuda_release,
    .supports = fj_cuda_supports,
    .tuning_target = cuda_tuning_target,
    .tuning = &fj_cuda_tuning,
    .ops = &cuda_ops,
    /* the same ops: flash_fwd's varlen and paged kernels run the whole
       batch in one launch (the plan knows which kernel) */
    .sequence_ops = &cuda_ops,
};
