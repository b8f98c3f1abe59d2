/* Linked instead of the CUDA backend when flashjit is configured with
 * -Dcuda=disabled: the registry row's probe says why CUDA is not there, so
 * AUTO falls back to the CPU; NVRTC is absent too, so `flashjit source`
 * still renders sources and compiling says why it cannot. */
#include "backend.h"
#include "cuda/cuda_api.h"
#include "status.h"

#define NOT_BUILT "this flashjit was built without the CUDA backend (meson -Dcuda=disabled)"

static fj_status absent_probe(fj_context *ctx, void **state, fj_strbuf *facts)
{
    (void)ctx;
    *state = NULL;
    fj_strbuf_puts(facts, "cuda: not built (configured with -Dcuda=disabled)\n");
    return fj_fail(FJ_ERR_NO_DEVICE, NOT_BUILT "; rebuild with -Dcuda=auto");
}

const fj_backend_entry fj_cuda_backend_entry = {
    .kind = FJ_BACKEND_CUDA,
    .name = "cuda",
    .title = "CUDA",
    .usable_when = "",
    .auto_choice = true,
    .probe = absent_probe,
    .tuning = &fj_cuda_tuning, /* CUDA tiles still parse: flags are checked the same */
};

fj_status fj_cuda_nvrtc(const fj_cuda_api **api)
{
    *api = NULL;
    return fj_fail(FJ_ERR_NO_DEVICE,
                   NOT_BUILT ", so it cannot compile kernels; rebuild with -Dcuda=auto");
}
