/* The table every backend fills (ggml/BLIS style): plan creation, execution,
 * and the backend's memory. The core (context.c, plan.c) calls only these; a
 * backend never sees the public desc, only the validated fj_problem. */
#ifndef FJ_BACKEND_H
#define FJ_BACKEND_H

#include <stddef.h>

#include "flashjit.h"
#include "problem.h"
#include "strbuf.h"

typedef struct fj_backend_ops {
    fj_backend kind;
    const char *name; /* as fj_backend_name() */

    /* Creates the per-plan state (kernel, workspaces). config NULL: the
       tuning file's entry for the problem, else the shipped table's, else the
       heuristic; non-NULL: that configuration (the tuner's candidates; the
       backend's own syntax, as in the tuning file). Appends to describe what
       was chosen and why. On failure returns the status with fj_last_error()
       set, and leaves *state NULL. */
    fj_status (*plan_create)(fj_context *ctx, const fj_problem *p, const char *config,
                             void **state, fj_strbuf *describe);
    /* Runs it. Pointers were checked non-NULL by the core. Must not allocate. */
    fj_status (*execute)(const void *state, const fj_problem *p, const void *q, const void *k,
                         const void *v, void *o, float *lse, void *stream);
    void (*plan_destroy)(void *state);

    /* Optional (NULL: the core times with the host clock). Times `repeat`
       executes after `warmup`, one by one, into ms[]. */
    fj_status (*time_runs)(const void *state, const fj_problem *p, const void *q, const void *k,
                           const void *v, void *o, float *lse, int warmup, int repeat, double *ms);
    /* Optional (NULL: 0). Kernel launches one execute makes. */
    int (*launches)(const void *state);

    fj_status (*mem_alloc)(fj_context *ctx, size_t bytes, void **ptr);
    void (*mem_free)(fj_context *ctx, void *ptr);
    fj_status (*copy_to_device)(fj_context *ctx, void *dst, const void *src, size_t bytes);
    fj_status (*copy_to_host)(fj_context *ctx, void *dst, const void *src, size_t bytes);
    fj_status (*synchronize)(fj_context *ctx, void *stream);
} fj_backend_ops;

extern const fj_backend_ops fj_cpu_reference_ops; /* src/cpu/reference.c */
extern const fj_backend_ops fj_cpu_tiled_ops;     /* src/cpu/tiled.c */
/* CUDA: see cuda/cuda_backend.h (present only when built and usable). */

/* Host memory for the CPU backends (src/cpu/memory.c), shared by both. */
fj_status fj_cpu_mem_alloc(fj_context *ctx, size_t bytes, void **ptr);
void fj_cpu_mem_free(fj_context *ctx, void *ptr);
fj_status fj_cpu_memcpy(fj_context *ctx, void *dst, const void *src, size_t bytes);
fj_status fj_cpu_synchronize(fj_context *ctx, void *stream);

#endif
