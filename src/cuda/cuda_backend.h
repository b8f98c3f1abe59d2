/* What the core needs from the CUDA backend beyond its ops table, and below
 * it what the files of the backend (device.c, backend.c, module_cache.c)
 * share: the per-context device state and its context discipline. */
#ifndef FJ_CUDA_BACKEND_H
#define FJ_CUDA_BACKEND_H

#include "context.h"
#include "cuda/cuda_api.h"
#include "kernel_desc.h"
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

/* ---- inside the backend (not used by the core) --------------------------- */

/* The oldest GPU generation the kernel templates target: they use
 * mma.sync for bf16 and cp.async, both sm_80 and newer. */
#define FJ_CUDA_MIN_ARCH 80

struct fj_module_cache; /* cuda/module_cache.h */

/* One context's device, fixed from fj_cuda_state_create on; the module
 * cache inside has its own lock, so the state is shared by all threads. */
struct fj_cuda_state {
    const fj_cuda_api *api; /* driver and NVRTC parts both loaded */
    int ordinal;            /* ctx->device */
    CUdevice device;
    CUcontext primary;      /* the device's primary context, retained */
    char name[256];         /* "NVIDIA H200" */
    int arch;               /* compute capability major * 10 + minor: 90 */
    int sm_count;
    int smem_optin;         /* bytes of shared memory one block may opt in to */
    int max_threads_per_block;
    size_t total_mem;       /* bytes */
    struct fj_module_cache *modules;
};

/* Makes the state's primary context current on this thread, so that every
 * driver call acts on the context's own device even when the application
 * uses several contexts on several GPUs, or its own CUDA context. Each
 * successful push is undone by fj_cuda_pop. On failure: FJ_ERR_DRIVER with
 * the message set. */
fj_status fj_cuda_push(const struct fj_cuda_state *s);
void fj_cuda_pop(const struct fj_cuda_state *s);

/* The ops (backend.c); device.c puts them in the table. */
fj_status fj_cuda_plan_create(fj_context *ctx, const fj_problem *p, const char *config,
                              void **state, fj_strbuf *describe);
fj_status fj_cuda_execute(const void *state, const fj_problem *p, const void *q, const void *k,
                          const void *v, void *o, float *lse, void *stream);
void fj_cuda_plan_destroy(void *state);
fj_status fj_cuda_time_runs(const void *state, const fj_problem *p, const void *q, const void *k,
                            const void *v, void *o, float *lse, int warmup, int repeat,
                            double *ms);
int fj_cuda_launches(const void *state);

/* What a CUDA plan runs, for the tuner (tools/tune_space.c), read from the
 * plan rather than parsed out of its describe text. */
typedef struct fj_cuda_plan_info {
    fj_kernel_desc kernel; /* the main kernel (split variant when split) */
    int local_bytes;       /* its local memory per thread (spills) */
    int num_splits;        /* 1: no split-KV */
    const char *why;       /* where the tiles came from: "given configuration
                              ...", "tuned: ..." or "heuristic ..."; owned
                              by the plan */
} fj_cuda_plan_info;
void fj_cuda_plan_info_get(const void *state, fj_cuda_plan_info *out);

#endif
