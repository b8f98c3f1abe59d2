/* What a kernel in a cubin uses per thread and per block, read from the
 * cubin's ELF (the .nv.info attributes ptxas writes), so it works without a
 * GPU and on a cubin loaded from the disk cache, where no compile log
 * exists. `flashjit compile-all` and its test report these and fail on
 * spills. */
#ifndef FJ_CUBIN_INFO_H
#define FJ_CUBIN_INFO_H

#include <stddef.h>

#include "flashjit.h"

typedef struct fj_cubin_resources {
    unsigned registers;   /* per thread (EIATTR_REGCOUNT) */
    unsigned frame_bytes; /* per-thread stack frame in local memory (EIATTR_FRAME_SIZE):
                             ptxas puts register spills there, and also any local array
                             it cannot keep in registers; our templates have none, so
                             nonzero means spills */
    unsigned static_smem; /* bytes of static __shared__ (.nv.shared.<entry>); the dynamic
                             shared memory is the descriptor's FJ_SMEM_BYTES */
} fj_cubin_resources;

/* The largest stack frame (bytes per thread) `flashjit compile-all` and its
 * test accept in a generated kernel: none. The template sizes its register
 * use so that every heuristic tile compiles without spills (measured over
 * every head dim, dtype and mask for sm_80 and sm_90); a frame appearing is a
 * regression to catch. `--max-spill N` relaxes it for experiments, such as
 * the spilling d128 tile that holds all 64 keys (docs/benchmarks.md, the
 * first "GPU prefill" section). */
#define FJ_CUBIN_MAX_SPILL_BYTES 0

/* Reads the resources of kernel entry from a cubin (an ELF64 for EM_CUDA).
 * FJ_ERR_INVALID_ARGUMENT saying what is wrong for anything that is not such
 * a cubin holding that kernel (every offset is bounds-checked). */
fj_status fj_cubin_resources_read(const void *cubin, size_t size, const char *entry,
                                  fj_cubin_resources *out);

#endif
