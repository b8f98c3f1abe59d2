#include "tuning_target.h"

#include <stdio.h>
#include <string.h>

#include "context.h"
#include "cpu/pool.h"
#include "cpu/tiled.h"
#include "cuda/cuda_backend.h"
#include "status.h"
#include "tuning.h"

static void cuda_target(const fj_context *ctx, fj_tuning_target *t)
{
    const struct fj_cuda_state *s = ctx->cuda;
    fj_tuning_device_token(s->name, t->device, sizeof t->device);
    snprintf(t->device_name, sizeof t->device_name, "%s", s->name);
    snprintf(t->arch, sizeof t->arch, "sm_%d", s->arch);
    snprintf(t->template_name, sizeof t->template_name, "flash_fwd");
    t->sm = (uint32_t)s->arch;
    t->smem_limit = (size_t)s->smem_optin;
    t->device_memory = s->total_mem;
}

static void cpu_target(const fj_context *ctx, fj_tuning_target *t)
{
    /* The tiled backend plans for its pool's workers (tiled.c), and its
       entries' device field names that count. */
    t->cpu_threads = fj_pool_threads(ctx->pool);
    fj_cpu_device_token(t->cpu_threads, t->device, sizeof t->device);
    snprintf(t->device_name, sizeof t->device_name, "%s", t->device);
    snprintf(t->arch, sizeof t->arch, "cpu");
    snprintf(t->template_name, sizeof t->template_name, "cpu_tiled");
}

fj_status fj_tuning_target_of(const fj_context *ctx, fj_tuning_target *out)
{
    if (!ctx || !out) return fj_fail(FJ_ERR_INVALID_ARGUMENT, "fj_tuning_target_of: NULL argument");
    memset(out, 0, sizeof *out);
    out->backend = ctx->backend;
    if (ctx->backend == FJ_BACKEND_CUDA && ctx->cuda) {
        cuda_target(ctx, out);
        return FJ_OK;
    }
    if (ctx->backend == FJ_BACKEND_CPU && ctx->pool) {
        cpu_target(ctx, out);
        return FJ_OK;
    }
    return fj_fail(FJ_ERR_UNSUPPORTED,
                   "the %s backend has no configurations to tune (tune cuda or cpu)",
                   fj_backend_name(ctx->backend));
}
