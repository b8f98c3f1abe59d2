/* A fixed set of worker threads owned by a context. One job runs at a time
 * (callers from several threads queue on a mutex); the calling thread works
 * too, as worker 0. Tasks are handed out dynamically, so uneven tasks (causal
 * rows) balance. */
#ifndef FJ_POOL_H
#define FJ_POOL_H

#include <stdint.h>

#include "flashjit.h"

typedef struct fj_pool fj_pool;

/* Runs task `task` on worker `worker` (0 <= worker < fj_pool_threads()). */
typedef void (*fj_task_fn)(void *arg, int64_t task, int worker);

/* threads >= 1; threads - 1 threads are started. */
fj_status fj_pool_create(int threads, fj_pool **out);
void fj_pool_destroy(fj_pool *pool);
int fj_pool_threads(const fj_pool *pool);

/* Runs fn(arg, t, w) for every t in [0, ntasks) and returns when all are done.
 * Workers that call the BLAS run through fj_cpu_pool_run (cpu/blas_threads.h),
 * which keeps it single-threaded for the duration. */
void fj_pool_run(fj_pool *pool, int64_t ntasks, fj_task_fn fn, void *arg);

#endif
