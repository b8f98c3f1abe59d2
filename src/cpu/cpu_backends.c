/* The registry rows of the two CPU backends: always usable, no state of
 * their own (plans run on the context's worker pool); the tiled backend
 * tunes its block sizes, the reference has nothing to tune. */
#include <stdio.h>
#include <string.h>

#include "backend.h"
#include "context.h"
#include "cpu/blas_threads.h"
#include "cpu/cpu_ops.h"
#include "cpu/tiled.h"
#include "pool.h"

static fj_status tiled_probe(fj_context *ctx, void **state, fj_strbuf *facts)
{
    (void)ctx;
    *state = NULL;
    fj_strbuf_puts(facts, "cpu: BLAS: ");
    fj_blas_describe(facts);
    fj_strbuf_puts(facts, "\n");
    return FJ_OK;
}

static fj_status reference_probe(fj_context *ctx, void **state, fj_strbuf *facts)
{
    return tiled_probe(ctx, state, facts);
}

/* Every valid problem (the CPU backends compute f32, f16 and bf16, any
   head dim, any strides). */
static fj_status cpu_supports(const fj_context *ctx, const fj_problem *p)
{
    (void)ctx;
    (void)p;
    return FJ_OK;
}

static void tiled_tuning_target(const fj_context *ctx, fj_tuning_target *t)
{
    /* The tiled backend plans for its pool's workers (tiled.c), and its
       entries' device field names that count. */
    t->cpu_threads = fj_pool_threads(ctx->pool);
    fj_cpu_device_token(t->cpu_threads, t->device, sizeof t->device);
    snprintf(t->device_name, sizeof t->device_name, "%s", t->device);
    snprintf(t->arch, sizeof t->arch, "cpu");
    snprintf(t->template_name, sizeof t->template_name, "cpu_tiled");
}

const fj_backend_entry fj_cpu_tiled_backend_entry = {
    .kind = FJ_BACKEND_CPU,
    .name = "cpu",
    .title = "the CPU tiled backend",
    .usable_when = "the CPU tiled backend",
    .auto_choice = true,
    .probe = tiled_probe,
    .supports = cpu_supports,
    .tuning_target = tiled_tuning_target,
    .ops = &fj_cpu_tiled_ops,
};

const fj_backend_entry fj_cpu_reference_backend_entry = {
    .kind = FJ_BACKEND_CPU_REFERENCE,
    .name = "cpu-reference",
    .title = "the CPU reference",
    .usable_when = "the CPU reference",
    .auto_choice = false,
    .probe = reference_probe,
    .supports = cpu_supports,
    .ops = &fj_cpu_reference_ops,
};
