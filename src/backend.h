/* The backends behind one table (ggml's backend registry, BLIS's reference
 * slots): each backend is a registry entry (probe, release, supports, tuning
 * target) and an ops table (plan creation, execution, memory). The core
 * (context.c, plan.c) and the tuner call backends through these alone and
 * include no backend header; a backend never sees the public desc, only the
 * validated fj_problem. */
#ifndef FJ_BACKEND_H
#define FJ_BACKEND_H

#include <stdbool.h>
#include <stddef.h>

#include "flashjit.h"
#include "problem.h"
#include "strbuf.h"
#include "tune/target.h"

typedef struct fj_backend_ops {
    fj_backend kind;
    const char *name; /* as fj_backend_name() */

    /* Creates the per-plan state (kernel, workspaces). config NULL: the
       tuning file's entry for the problem, else the shipped table's, else the
       heuristic; non-NULL: that configuration (the tuner's candidates; the
       backend's own syntax, as in the tuning file). Appends to describe what
       was chosen and why. On failure returns the status with fj_last_error()
       set, and leaves *state NULL. */
    fj_status (*plan_create)(fj_context *ctx, const fj_problem *p, const char *config, void **state,
                             fj_strbuf *describe);
    /* Runs it. Pointers were checked non-NULL by the core, and in's arrays
       against p's features (each non-NULL exactly when its feature is on;
       the varlen and paged arrays' values are not checked: they lie in the
       backend's memory, which the core may not read). Must not allocate. */
    fj_status (*execute)(const void *state, const fj_problem *p, const void *q, const void *k,
                         const void *v, void *o, float *lse, const fj_exec_inputs *in,
                         void *stream);
    void (*plan_destroy)(void *state);

    /* Optional (NULL: the core times with the host clock). Times `repeat`
       executes after `warmup`, one by one, into ms[]; in as execute's (the
       core calls it for dense problems only: no varlen or paged inputs). */
    fj_status (*time_runs)(const void *state, const fj_problem *p, const void *q, const void *k,
                           const void *v, void *o, float *lse, const fj_exec_inputs *in, int warmup,
                           int repeat, double *ms);
    /* Optional (NULL: 0). Kernel launches one execute makes. */
    int (*launches)(const void *state);
    /* Fills the backend's fields of *info (zeroed, backend and launches set
       by the core). */
    void (*info)(const void *state, fj_plan_info *info);

    /* fj_merge on a validated merge (src/merge.c checked the pointers, their
       alignment and the aliasing rule): o, lse = merge of a and b, lse NULL
       when not wanted. Asynchronous on stream where the backend has streams.
       Must not allocate once the context has made the merge once. */
    fj_status (*merge)(fj_context *ctx, const fj_merge_problem *m, const void *o_a,
                       const float *lse_a, const void *o_b, const float *lse_b, void *o, float *lse,
                       void *stream);

    fj_status (*mem_alloc)(fj_context *ctx, size_t bytes, void **ptr);
    void (*mem_free)(fj_context *ctx, void *ptr);
    fj_status (*copy_to_device)(fj_context *ctx, void *dst, const void *src, size_t bytes);
    fj_status (*copy_to_host)(fj_context *ctx, void *dst, const void *src, size_t bytes);
    fj_status (*synchronize)(fj_context *ctx, void *stream);
} fj_backend_ops;

/* One row of the registry. */
typedef struct fj_backend_entry {
    fj_backend kind;
    const char *name;        /* as fj_backend_name() */
    const char *title;       /* for sentences: "CUDA", "the CPU tiled backend" */
    const char *usable_when; /* why AUTO takes it when its probe succeeds */
    bool auto_choice;        /* AUTO may pick it (the reference is a yardstick, never AUTO's) */
    /* Brings the backend up for ctx (its device, its libraries). FJ_OK: *state
       is the backend's per-context state (NULL when it keeps none). Either
       way it appends its describe lines to `facts`, each starting with its
       name: what it found, or why it is not usable. FJ_ERR_NO_DEVICE: not
       usable here, fj_last_error() says why, and AUTO moves on; any other
       status is a failure of context creation. */
    fj_status (*probe)(fj_context *ctx, void **state, fj_strbuf *facts);
    /* Releases what probe took (NULL state: no-op). */
    void (*release)(void *state);
    /* FJ_OK when the backend computes p (with any configuration); else
       FJ_ERR_UNSUPPORTED with the rule and what to do in fj_last_error().
       Cheap: no allocation, no compile. Plan creation asks it first. */
    fj_status (*supports)(const fj_context *ctx, const fj_problem *p);
    /* The key fields its tuning entries carry and the limits the tuner
       prunes candidates against; NULL when it has nothing to tune. */
    void (*tuning_target)(const fj_context *ctx, fj_tuning_target *out);
    /* Its candidates, tiles grammar and ahead-of-time builds (src/tune/target.h);
       NULL when it has nothing to tune. */
    const fj_backend_tuning *tuning;
    const fj_backend_ops *ops;
    /* The ops of its plans for FJ_FEATURE_VARLEN and FJ_FEATURE_PAGED_KV
       problems, which run each sequence as a problem of its own (their
       memory functions as ops'); NULL when it has none (supports refuses
       them). */
    const fj_backend_ops *sequence_ops;
} fj_backend_entry;

/* The registry in AUTO's order of preference (CUDA, then the CPU tiled
 * backend, then the reference); NULL-terminated (src/backends.c). */
extern const fj_backend_entry *const fj_backend_registry[];

/* The entry of that kind, or NULL (AUTO). */
const fj_backend_entry *fj_backend_entry_of(fj_backend kind);

/* The rows, each defined by its backend: src/cuda/device.c (or
 * src/cuda/absent.c without CUDA), src/cpu/tiled.c, src/cpu/reference.c. */
extern const fj_backend_entry fj_cuda_backend_entry;
extern const fj_backend_entry fj_cpu_tiled_backend_entry;
extern const fj_backend_entry fj_cpu_reference_backend_entry;

/* The tuning rows of the backends that tune: src/cuda/jit/jit_tuning.c (built
 * with or without the CUDA backend), src/cpu/cpu_backends.c. */
extern const fj_backend_tuning fj_cuda_tuning;
extern const fj_backend_tuning fj_cpu_tiled_tuning;

/* fj_merge on the host, for both CPU backends (src/cpu/merge.c): on the
 * context's worker pool when large. */
fj_status fj_cpu_merge(fj_context *ctx, const fj_merge_problem *m, const void *o_a,
                       const float *lse_a, const void *o_b, const float *lse_b, void *o, float *lse,
                       void *stream);

/* Host memory for the CPU backends (src/cpu/memory.c), shared by both. */
fj_status fj_cpu_mem_alloc(fj_context *ctx, size_t bytes, void **ptr);
void fj_cpu_mem_free(fj_context *ctx, void *ptr);
fj_status fj_cpu_memcpy(fj_context *ctx, void *dst, const void *src, size_t bytes);
fj_status fj_cpu_synchronize(fj_context *ctx, void *stream);

#endif
