/* What the core needs from the CUDA backend beyond its ops table. */
#ifndef FJ_CUDA_BACKEND_H
#define FJ_CUDA_BACKEND_H

#include "context.h"
#include "strbuf.h"

/* Brings up CUDA for ctx->device: loads the driver and NVRTC, checks the
 * driver version, initializes, retains the device's primary context, reads
 * its arch. FJ_OK: ctx->cuda is set and the facts are appended to describe.
 * Otherwise (FJ_ERR_NO_DEVICE, or FJ_ERR_OUT_OF_MEMORY) fj_last_error() says
 * exactly why (which library, the loader's text, which variable overrides
 * it), and ctx->cuda stays NULL. */
fj_status fj_cuda_state_create(fj_context *ctx, fj_strbuf *describe);

/* Releases what fj_cuda_state_create took. ctx->cuda NULL: no-op. */
void fj_cuda_state_destroy(fj_context *ctx);

/* The CUDA backend's table, used once fj_cuda_state_create succeeded. */
const fj_backend_ops *fj_cuda_backend_ops(void);

#endif
