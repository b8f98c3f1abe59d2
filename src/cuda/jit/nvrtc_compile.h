/* Compiling one generated source with NVRTC: needs libnvrtc, not the driver
 * or a GPU. Everything goes through the fj_cuda_api table of fj_cuda_nvrtc(),
 * so tests can drive the failure paths with a fake. */
#ifndef FJ_NVRTC_COMPILE_H
#define FJ_NVRTC_COMPILE_H

#include <stdbool.h>
#include <stddef.h>

#include "flashjit.h"

#define FJ_NVRTC_MAX_OPTIONS 4

/* How a kernel for one SM version is compiled by the NVRTC that is loaded.
 * The option list is exactly what nvrtcCompileProgram gets; options_text
 * (the same, space-separated) goes into the cache key and error messages. */
typedef struct fj_nvrtc_target {
    int nvrtc_major, nvrtc_minor; /* the NVRTC that compiles (part of the cache key) */
    bool is_ptx;                  /* PTX for the driver to JIT, not a cubin */
    char target[16];              /* "sm_90" or "sm_90a" (cubin), "compute_90" (PTX) */
    int num_options;
    char options[FJ_NVRTC_MAX_OPTIONS][40];
    char options_text[4 * 40];
} fj_nvrtc_target;

/* Loads NVRTC (first use) and decides, for a device of SM version arch: a
 * cubin ("--gpu-architecture=sm_<arch>") when NVRTC's nvrtcGetSupportedArchs
 * lists arch; otherwise PTX for the newest arch it lists that is not newer
 * than arch ("compute_<that>"), which the driver JIT-compiles at load. With
 * want_ptx, PTX even when a cubin is possible (`flashjit source --ptx`).
 * Thread-safe. FJ_ERR_NO_DEVICE (the loader's reason) when NVRTC cannot be
 * loaded; FJ_ERR_UNSUPPORTED when it supports no arch at or below arch. */
fj_status fj_nvrtc_target_for_arch(unsigned arch, bool want_ptx, fj_nvrtc_target *t);

/* Turns t (from fj_nvrtc_target_for_arch(arch, ...)) into the arch-specific
 * target "sm_<arch>a" / "compute_<arch>a", which kernels using instructions
 * of that arch alone (wgmma on sm_90) need; such an image loads on that arch
 * only; a target already arch-specific stays as it is. FJ_ERR_UNSUPPORTED, t
 * unchanged, when t is for an older arch because NVRTC does not know arch. */
fj_status fj_nvrtc_target_arch_specific(fj_nvrtc_target *t, unsigned arch);

/* Compiles one source (name: the kernel's name, used as NVRTC's program name
 * and in messages) for t. On success *image is malloc'd and always followed
 * by one NUL byte that *size does not count (so PTX is a C string), and
 * *seconds is the wall time NVRTC took. On failure *image is NULL and
 * fj_last_error() holds "NVRTC failed to compile <name> (options: ...):\n"
 * and the program log (FJ_ERR_COMPILE), or the NVRTC call that failed.
 * NVRTC warnings of a successful compile go to the debug log. Thread-safe
 * (NVRTC allows concurrent compiles of different programs). */
fj_status fj_nvrtc_compile(const fj_nvrtc_target *t, const char *name, const char *source,
                           void **image, size_t *size, double *seconds);

#endif
