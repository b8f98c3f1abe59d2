/* What the tuner (src/tune/tuner.c) must know about a backend: the key
 * fields its tuning entries carry (device token, arch, template) and, on
 * CUDA, the limits candidates are pruned against (fj_tuning_target, from a
 * context); its candidate tiles, how its tiles parse, and how candidate
 * kernels are built ahead (fj_backend_tuning, a registry row's, static).
 * Through these alone, so the tuner includes no backend header and keys its
 * entries exactly as plan creation looks them up (src/cuda/cuda_plan.c
 * choose_tiles, src/cpu/tiled_blocks.c tuned_blocks). */
#ifndef FJ_TUNING_TARGET_H
#define FJ_TUNING_TARGET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "flashjit.h"

typedef struct fj_tuning_target {
    fj_backend backend;     /* FJ_BACKEND_CUDA or FJ_BACKEND_CPU */
    char device[96];        /* the tuning file's device field: "NVIDIA_H200", "cpu:..._2t" */
    char device_name[256];  /* for people: "NVIDIA H200", or the same as device on the CPU */
    char arch[16];          /* "sm_90", or "cpu" */
    char template_name[24]; /* "flash_fwd", or "cpu_tiled" */
    uint32_t sm;            /* CUDA: compute capability as 90; CPU: 0 */
    size_t smem_limit;      /* CUDA: shared memory one block may opt in to, bytes; CPU: 0 */
    size_t device_memory;   /* CUDA: bytes on the device; CPU: 0 */
    int cpu_threads;        /* CPU: workers the tiled backend plans for; CUDA: 0 */
} fj_tuning_target;

/* Fills *out for ctx's backend. FJ_ERR_UNSUPPORTED for the CPU reference
 * backend (it has no configurations to tune); FJ_ERR_INVALID_ARGUMENT for a
 * NULL argument. */
fj_status fj_tuning_target_of(const fj_context *ctx, fj_tuning_target *out);

/* ---- building candidates ahead (CUDA) ------------------------------------- */

typedef enum fj_tune_verdict {
    FJ_TUNE_UNCHECKED = 0,
    FJ_TUNE_PRUNED,  /* cannot run here: a template rule, resources, spills, compile error */
    FJ_TUNE_WRONG,   /* ran, gave results outside the tolerance */
    FJ_TUNE_CORRECT, /* ran and agreed with the CPU reference */
} fj_tune_verdict;

#define FJ_TUNE_TILES_LEN 32 /* as fj_plan_info.tiles and fj_tuning_entry.config */

/* One candidate for one (head dim, dtype, causal kind): what decides whether
 * its code works, independent of the sequence lengths. */
typedef struct fj_tune_kernel {
    int head_dim;
    fj_dtype dtype;
    fj_causal causal;
    char tiles[FJ_TUNE_TILES_LEN];
    fj_tune_verdict verdict;
    char reason[512]; /* why pruned or wrong; the measured error when correct */
} fj_tune_kernel;

typedef struct fj_tune_build_summary {
    int kernels; /* distinct kernels built */
    int compiled, cached, failed, spilled, pruned_by_rules;
    double wall_seconds, nvrtc_seconds;
} fj_tune_build_summary;

/* Called (under a lock, from the building threads) as each kernel is done. */
typedef void (*fj_tune_build_step_fn)(void *user, long done, long total, const char *kernel_name);

/* ---- a backend's tuning row --------------------------------------------------- */

typedef struct fj_backend_tuning {
    /* The candidates `flashjit tune` and FJ_PLAN_MEASURE time by default,
       NULL-terminated; candidates this device cannot run are pruned. */
    const char *const *candidates;
    /* The tiles' grammar, for messages: "q<query block>k<key block>, e.g. q256k512". */
    const char *tiles_grammar;
    /* Parses tiles without a context: FJ_OK with the largest rows and keys
       one block holds (the tuner's check problem must exceed them), else
       FJ_ERR_INVALID_ARGUMENT. */
    fj_status (*tiles_parse)(const char *tiles, int *block_rows, int *block_keys);
    /* Optional (NULL: plans build their own kernels). Prunes each unchecked
       kernel of k that the backend's rules reject for target, builds the
       rest (each distinct kernel once; with_split: its split-KV variant too)
       on `jobs` threads into the disk cache (cache_dir; NULL: none), and
       prunes those that fail or spill, so plan creation afterwards only
       loads. FJ_ERR_OUT_OF_MEMORY only. */
    fj_status (*build_ahead)(const fj_tuning_target *target, const char *cache_dir,
                             fj_tune_kernel *k, int n, int jobs, bool with_split,
                             fj_tune_build_step_fn step, void *user, fj_tune_build_summary *out);
} fj_backend_tuning;

/* ctx's backend's tuning row; NULL when it has nothing to tune. */
const fj_backend_tuning *fj_backend_tuning_of(const fj_context *ctx);

/* The tuning row of a backend kind, without a context (for checking flags
 * before any device work); NULL when it has nothing to tune. */
const fj_backend_tuning *fj_backend_tuning_of_kind(fj_backend kind);

#endif
