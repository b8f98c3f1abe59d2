/* Linked instead of the CUDA backend when flashjit is configured with
 * -Dcuda=disabled: AUTO falls back to the CPU and says why. */
#include <string.h>

#include "cuda/cuda_backend.h"
#include "status.h"

fj_status fj_cuda_state_create(fj_context *ctx, fj_strbuf *describe)
{
    (void)ctx;
    fj_strbuf_puts(describe, "cuda: not built (configured with -Dcuda=disabled)\n");
    return fj_fail(FJ_ERR_NO_DEVICE,
                   "this flashjit was built without the CUDA backend (meson -Dcuda=disabled); "
                   "rebuild with -Dcuda=auto");
}

void fj_cuda_state_destroy(fj_context *ctx) { (void)ctx; }

const fj_backend_ops *fj_cuda_backend_ops(void) { return NULL; }

/* NVRTC too: without the backend, `flashjit source` still renders sources,
 * and compiling says why it cannot. */
fj_status fj_cuda_nvrtc(const fj_cuda_api **api)
{
    *api = NULL;
    return fj_fail(FJ_ERR_NO_DEVICE,
                   "this flashjit was built without the CUDA backend (meson -Dcuda=disabled), so "
                   "it cannot compile kernels; rebuild with -Dcuda=auto");
}

/* No CUDA plan can exist in this build; zeroes for completeness. */
void fj_cuda_plan_info_get(const void *state, fj_cuda_plan_info *out)
{
    (void)state;
    memset(out, 0, sizeof *out);
    out->why = "";
}
