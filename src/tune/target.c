/* A context's tuning target and a backend's tuning row, from the registry. */
#include "tune/target.h"

#include <string.h>

#include "context.h"
#include "status.h"

fj_status fj_tuning_target_of(const fj_context *ctx, fj_tuning_target *out)
{
    if (!ctx || !out) return fj_fail(FJ_ERR_INVALID_ARGUMENT, "fj_tuning_target_of: NULL argument");
    memset(out, 0, sizeof *out);
    out->backend = ctx->entry->kind;
    if (!ctx->entry->tuning_target || !ctx->entry->tuning)
        return fj_fail(FJ_ERR_UNSUPPORTED,
                       "the %s backend has no configurations to tune (tune cuda or cpu)",
                       ctx->entry->name);
    ctx->entry->tuning_target(ctx, out);
    return FJ_OK;
}

const fj_backend_tuning *fj_backend_tuning_of(const fj_context *ctx)
{
    return ctx && ctx->entry->tuning_target ? ctx->entry->tuning : NULL;
}

const fj_backend_tuning *fj_backend_tuning_of_kind(fj_backend kind)
{
    const fj_backend_entry *e = fj_backend_entry_of(kind);
    return e ? e->tuning : NULL;
}
