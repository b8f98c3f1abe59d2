/* A fake CUDA driver and NVRTC behind the fj_cuda_api table, so the CUDA
 * backend's every path runs without a GPU: device discovery, module loads,
 * launches and memory, each of which can be made to fail on demand.
 *
 * It models what the backend must get right: device memory is host memory
 * (so copies round-trip), modules load only images its NVRTC produced, and
 * every call that needs a current context fails with
 * CUDA_ERROR_INVALID_CONTEXT (and is counted) when the calling thread has
 * none pushed, so a missing cuCtxPushCurrent shows up in tests. Launches run
 * nothing; they are recorded (grid, block, shared memory, parameters). */
#ifndef FJT_FAKE_DRIVER_H
#define FJT_FAKE_DRIVER_H

#include <stdbool.h>

#include "cuda/cuda_api.h"
#include "../../kernel_templates/fwd_params.h"

/* Back to a healthy fake: one sm_90 device, every call succeeding, counters
 * zeroed. Not thread-safe (call between tests). */
void fake_reset(void);

/* The table to give fj_cuda_api_override. */
const fj_cuda_api *fake_api(void);

/* From now on (until fake_reset) the named call ("cuInit", "cuMemAlloc",
 * "nvrtcCompileProgram", ...) returns r without doing anything. */
void fake_fail(const char *call, int r);

/* The driver part of the table is left empty (as if libcuda were absent). */
void fake_remove_driver(void);
/* The NVRTC part of the table is left empty. */
void fake_remove_nvrtc(void);

void fake_set_device_count(int n);
void fake_set_arch(int major, int minor);
void fake_set_driver_version(int v);
/* Registers per thread the fake reports for every kernel (default 128). */
void fake_set_num_regs(int n);
/* Microseconds each fake NVRTC compile sleeps, to widen races in tests. */
void fake_set_compile_delay_us(int us);

typedef struct fake_launch {
    unsigned grid[3], block[3], smem;
    CUstream stream;
    CUcontext ctx;     /* the context current when it was launched */
    bool programmatic; /* cuLaunchKernelEx with programmatic stream serialization */
    fj_fwd_params params;
} fake_launch;

typedef struct fake_counts {
    int compiles; /* nvrtcCompileProgram that succeeded */
    int module_loads, module_unloads;
    int launches;
    int allocs, frees;
    int retains, releases; /* primary contexts */
    int no_context;        /* calls made with no context current (bugs) */
    int max_dyn_smem_set;  /* last CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES */
    int ctx_syncs, stream_syncs;
} fake_counts;

fake_counts fake_get_counts(void);
fake_launch fake_last_launch(void);

/* Depth of this thread's context stack (0 after every balanced call). */
int fake_ctx_depth(void);

/* The handle the fake uses for device ordinal's primary context. */
CUcontext fake_primary_context(int ordinal);

#endif
