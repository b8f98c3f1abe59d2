/* FJ_BACKEND_CPU. Until the tiled online-softmax backend lands, this runs the
 * reference's method and says so in the plan's describe text. */
#include "backend.h"

static fj_status tiled_plan_create(fj_context *ctx, const fj_problem *p, void **state,
                                   fj_strbuf *describe)
{
    fj_strbuf_puts(describe, "note: the CPU tiled backend is not built yet; running the reference\n");
    return fj_cpu_reference_ops.plan_create(ctx, p, state, describe);
}

static fj_status tiled_execute(const void *state, const fj_problem *p, const void *q,
                               const void *k, const void *v, void *o, float *lse, void *stream)
{
    return fj_cpu_reference_ops.execute(state, p, q, k, v, o, lse, stream);
}

static void tiled_plan_destroy(void *state) { fj_cpu_reference_ops.plan_destroy(state); }

const fj_backend_ops fj_cpu_tiled_ops = {
    .kind = FJ_BACKEND_CPU,
    .name = "cpu",
    .plan_create = tiled_plan_create,
    .execute = tiled_execute,
    .plan_destroy = tiled_plan_destroy,
    .mem_alloc = fj_cpu_mem_alloc,
    .mem_free = fj_cpu_mem_free,
    .copy_to_device = fj_cpu_memcpy,
    .copy_to_host = fj_cpu_memcpy,
    .synchronize = fj_cpu_synchronize,
};
