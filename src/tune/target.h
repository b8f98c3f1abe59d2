/* What the tuner (flashjit tune) must know about a context's backend: the
 * key fields its tuning entries carry (device token, arch, template) and, on
 * CUDA, the limits candidates are pruned against. One accessor, so the tool
 * needs neither backend's internals and keys its entries exactly as plan
 * creation looks them up (src/cuda/cuda_plan.c choose_tiles,
 * src/cpu/tiled_blocks.c tuned_blocks). */
#ifndef FJ_TUNING_TARGET_H
#define FJ_TUNING_TARGET_H

#include <stddef.h>
#include <stdint.h>

#include "flashjit.h"

typedef struct fj_tuning_target {
    fj_backend backend;      /* FJ_BACKEND_CUDA or FJ_BACKEND_CPU */
    char device[96];         /* the tuning file's device field: "NVIDIA_H200", "cpu:..._2t" */
    char device_name[256];   /* for people: "NVIDIA H200", or the same as device on the CPU */
    char arch[16];           /* "sm_90", or "cpu" */
    char template_name[24];  /* "flash_fwd", or "cpu_tiled" */
    uint32_t sm;             /* CUDA: compute capability as 90; CPU: 0 */
    size_t smem_limit;       /* CUDA: shared memory one block may opt in to, bytes; CPU: 0 */
    size_t device_memory;    /* CUDA: bytes on the device; CPU: 0 */
    int cpu_threads;         /* CPU: workers the tiled backend plans for; CUDA: 0 */
} fj_tuning_target;

/* Fills *out for ctx's backend. FJ_ERR_UNSUPPORTED for the CPU reference
 * backend (it has no configurations to tune); FJ_ERR_INVALID_ARGUMENT for a
 * NULL argument. */
fj_status fj_tuning_target_of(const fj_context *ctx, fj_tuning_target *out);

#endif
