/* The registry rows of the two CPU backends: always usable, no state of
 * their own (plans run on the context's worker pool); the tiled backend
 * tunes its block sizes, the reference has nothing to tune. */
#include <stdio.h>
#include <string.h>

#include "backend.h"
#include "context.h"
#include "cpu/blas_threads.h"
#include "cpu/cpu_ops.h"
#include "cpu/tiled_blocks.h"
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
   head dim, any strides, variable-length batches and paged KV caches
   through varlen.c). */
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

/* The tuner's candidates: query blocks 64..512 by key blocks 128..1024. */
static const char *const tiled_candidates[] = {
    "q64k128",  "q64k256",   "q64k512",  "q64k1024",  "q128k128", "q128k256",
    "q128k512", "q128k1024", "q256k128", "q256k256",  "q256k512", "q256k1024",
    "q512k128", "q512k256",  "q512k512", "q512k1024", NULL,
};

/* The blocks the tiles name, through the parser plans use. */
static fj_status tiled_tiles_parse(const char *tiles, int *rows, int *keys)
{
    fj_attention_desc d;
    fj_attention_desc_init(&d, 1, 1, 1, 1, 1, 64, FJ_F32);
    fj_problem p;
    fj_status s = fj_problem_init(&p, &d);
    if (s) return s;
    /* On a 1 x 1 problem the blocks come back capped: read them from the text. */
    fj_cpu_tiled_blocks b;
    if ((s = fj_cpu_tiled_choose_blocks(NULL, &p, tiles, 1, &b))) return s;
    if (sscanf(tiles, "q%dk%d", rows, keys) != 2) *rows = *keys = 0;
    return FJ_OK;
}

const fj_backend_tuning fj_cpu_tiled_tuning = {
    .candidates = tiled_candidates,
    .tiles_grammar = "q<query block>k<key block>, e.g. q256k512",
    .tiles_parse = tiled_tiles_parse,
};

const fj_backend_entry fj_cpu_tiled_backend_entry = {
    .kind = FJ_BACKEND_CPU,
    .name = "cpu",
    .title = "the CPU tiled backend",
    .usable_when = "the CPU tiled backend",
    .auto_choice = true,
    .probe = tiled_probe,
    .supports = cpu_supports,
    .tuning_target = tiled_tuning_target,
    .tuning = &fj_cpu_tiled_tuning,
    .ops = &fj_cpu_tiled_ops,
    .sequence_ops = &fj_cpu_tiled_sequence_ops,
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
    .sequence_ops = &fj_cpu_reference_sequence_ops,
};
