/* Tuned kernel configurations (the tuning file, FFTW's "wisdom"). */
#ifndef FJ_TUNING_H
#define FJ_TUNING_H

#include "context.h"
#include "strbuf.h"

/* Reads ctx->tuning_file (if any) into ctx->tuning and appends a line about
 * it to describe. A missing or unreadable file is not an error. */
fj_status fj_tuning_load(fj_context *ctx, fj_strbuf *describe);
void fj_tuning_free(struct fj_tuning *t);

#endif
