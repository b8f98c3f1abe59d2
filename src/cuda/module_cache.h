/* A context's loaded kernels: canonical kernel name -> CUmodule, CUfunction
 * and the function's attributes. A kernel is built (fj_kernel_build: disk
 * cache, else NVRTC) and loaded once per context; every later plan for it,
 * whatever its shape, costs a lookup. Thread-safe: concurrent requests for a
 * kernel that is being built wait for that build instead of repeating it. */
#ifndef FJ_CUDA_MODULE_CACHE_H
#define FJ_CUDA_MODULE_CACHE_H

#include <stdbool.h>

#include "cuda/cuda_api.h"
#include "cuda/device.h"
#include "cuda/jit/kernel_desc.h"

/* Immutable once returned; lives until the cache is destroyed. */
typedef struct fj_cuda_kernel {
    fj_kernel_desc desc;
    char name[128]; /* canonical name */
    CUmodule module;
    CUfunction function;
    int num_regs;         /* registers per thread */
    int local_bytes;      /* local memory per thread (register spills) */
    int static_smem;      /* static shared memory per block, bytes */
    int max_threads;      /* most threads per block the function can launch with */
    unsigned dyn_smem;    /* dynamic shared memory per launch: fj_kernel_desc_smem_bytes */
    bool dyn_smem_raised; /* CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES set to dyn_smem */
    /* how the image was obtained, for describe */
    bool is_ptx; /* the driver JIT-compiled PTX */
    bool from_disk_cache;
    double compile_seconds;
    char target[16]; /* "sm_90" or "compute_90" */
} fj_cuda_kernel;

typedef struct fj_module_cache fj_module_cache;

fj_status fj_module_cache_create(fj_module_cache **out);

/* Unloads every module (pushing the state's context) and frees the cache.
 * No plan may still use one of its kernels. NULL: no-op. */
void fj_module_cache_destroy(fj_module_cache *c, const fj_cuda_state *s);

/* The loaded kernel for k on s's device, built and loaded on a miss.
 * *loaded_before: it was already in this cache (no build, no load).
 * cache_dir: the disk cache (NULL: off). Errors: those of fj_kernel_build
 * (FJ_ERR_COMPILE, FJ_ERR_NO_DEVICE), FJ_ERR_DRIVER naming the call and the
 * kernel, FJ_ERR_OUT_OF_MEMORY. */
fj_status fj_module_cache_get(fj_module_cache *c, const fj_cuda_state *s, const fj_kernel_desc *k,
                              const char *cache_dir, const fj_cuda_kernel **out,
                              bool *loaded_before);

/* Kernels loaded (for describe and tests). */
int fj_module_cache_count(fj_module_cache *c);

#endif
