#include "tuning.h"

#include <stdlib.h>

fj_status fj_tuning_load(fj_context *ctx, fj_strbuf *describe)
{
    ctx->tuning = NULL;
    fj_strbuf_printf(describe, "tuning file: %s\n", ctx->tuning_file ? ctx->tuning_file : "none");
    return FJ_OK;
}

void fj_tuning_free(struct fj_tuning *t) { free(t); }
