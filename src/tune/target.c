/* A context's tuning target, from its backend's registry row. */
#include "tune/target.h"

#include <string.h>

#include "context.h"
#include "status.h"

fj_status fj_tuning_target_of(const fj_context *ctx, fj_tuning_target *out)
{
    if (!ctx || !out) return fj_fail(FJ_ERR_INVALID_ARGUMENT, "fj_tuning_target_of: NULL argument");
    memset(out, 0, sizeof *out);
    out->backend = ctx->entry->kind;
    if (!ctx->entry->tuning_target)
        return fj_fail(FJ_ERR_UNSUPPORTED,
                       "the %s backend has no configurations to tune (tune cuda or cpu)",
                       ctx->entry->name);
    ctx->entry->tuning_target(ctx, out);
    return FJ_OK;
}
