/* One context's CUDA device: bring-up, the context discipline every driver
 * call follows, and the device memory behind fj_malloc and friends. */
#ifndef FJ_CUDA_DEVICE_H
#define FJ_CUDA_DEVICE_H

#include <stddef.h>

#include "cuda/cuda_api.h"
#include "flashjit.h"
#include "strbuf.h"

/* The oldest GPU generation the kernel templates target: they use
 * mma.sync for bf16 and cp.async, both sm_80 and newer. */
#define FJ_CUDA_MIN_ARCH 80

struct fj_module_cache; /* cuda/module_cache.h */
struct fj_cuda_kernel;  /* cuda/module_cache.h */

/* One context's device, fixed from fj_cuda_device_open on; the module
 * cache inside has its own lock, so the state is shared by all threads. */
typedef struct fj_cuda_state {
    const fj_cuda_api *api; /* driver and NVRTC parts both loaded */
    int ordinal;            /* the context's device option */
    CUdevice device;
    CUcontext primary; /* the device's primary context, retained */
    char name[256];    /* "NVIDIA H200" */
    int arch;          /* compute capability major * 10 + minor: 90 */
    int sm_count;
    int smem_optin; /* bytes of shared memory one block may opt in to */
    int max_threads_per_block;
    size_t total_mem;                /* bytes */
    size_t l2_bytes;                 /* L2 cache size */
    struct fj_module_cache *modules; /* set by the backend's probe (cuda_backend.c) */
    /* fj_merge's kernel per fj_dtype, from modules, set at the first merge of
       that dtype (cuda_merge.c); NULL before (zeroed by calloc) */
    _Atomic(const struct fj_cuda_kernel *) merge_kernels[3];
} fj_cuda_state;

/* Loads the driver and NVRTC, checks the driver version, initializes,
 * retains the device's primary context and reads its attributes. FJ_OK:
 * *out is the new state (modules still NULL) and its facts are appended to
 * describe. Otherwise (FJ_ERR_NO_DEVICE, or FJ_ERR_OUT_OF_MEMORY)
 * fj_last_error() says exactly why (which library, the loader's text, which
 * variable overrides it), "cuda: not usable: <why>" is appended to describe,
 * and *out is NULL. */
fj_status fj_cuda_device_open(int ordinal, fj_cuda_state **out, fj_strbuf *describe);

/* Releases the primary context and frees s (the module cache must be gone). */
void fj_cuda_device_close(fj_cuda_state *s);

/* Makes the state's primary context current on this thread, so that every
 * driver call acts on the context's own device even when the application
 * uses several contexts on several GPUs, or its own CUDA context. Each
 * successful push is undone by fj_cuda_pop. On failure: FJ_ERR_DRIVER with
 * the message set. */
fj_status fj_cuda_push(const fj_cuda_state *s);
void fj_cuda_pop(const fj_cuda_state *s);

/* The backend's memory ops (device memory, copies, synchronize). */
fj_status fj_cuda_mem_alloc(const fj_cuda_state *s, size_t bytes, void **ptr);
void fj_cuda_mem_free(const fj_cuda_state *s, void *ptr);
fj_status fj_cuda_copy_to_device(const fj_cuda_state *s, void *dst, const void *src, size_t bytes);
fj_status fj_cuda_copy_to_host(const fj_cuda_state *s, void *dst, const void *src, size_t bytes);
fj_status fj_cuda_synchronize(const fj_cuda_state *s, void *stream);

#endif
