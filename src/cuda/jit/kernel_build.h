/* From descriptor to loadable image: render the source, look the image up in
 * the disk cache, compile with NVRTC on a miss and store it. Needs NVRTC but
 * no driver, so `flashjit compile-all` runs on machines without a GPU. */
#ifndef FJ_KERNEL_BUILD_H
#define FJ_KERNEL_BUILD_H

#include <stdbool.h>
#include <stddef.h>

#include "cuda/jit/nvrtc_compile.h"
#include "cuda/jit/kernel_desc.h"

typedef struct fj_kernel_image {
    void *data; /* cubin, or NUL-terminated PTX when is_ptx */
    size_t size;
    bool is_ptx;            /* the device is newer than NVRTC knows: PTX for the driver to JIT */
    bool from_cache;        /* loaded from the disk cache, no compile */
    double compile_seconds; /* NVRTC time (0 on a cache hit) */
    char name[128];         /* canonical kernel name */
    char target[16];        /* "sm_90", "sm_90a" (cubin) or "compute_90" (PTX) */
} fj_kernel_image;

/* The NVRTC target kernel k is built for: fj_nvrtc_target_for_arch(k->arch),
 * made arch-specific ("sm_90a") when the template needs it. */
fj_status fj_kernel_target(const fj_kernel_desc *k, bool want_ptx, fj_nvrtc_target *t);

/* cache_dir NULL: no disk cache. FJ_ERR_COMPILE with the NVRTC log, the
 * options and the kernel name in fj_last_error() when compilation fails;
 * FJ_ERR_NO_DEVICE when NVRTC cannot be loaded (with the reason). */
fj_status fj_kernel_build(const fj_kernel_desc *k, const char *cache_dir, fj_kernel_image *out);

void fj_kernel_image_free(fj_kernel_image *img);

#endif
