/* Keeps the BLAS single-threaded while flashjit's own workers call it, so
 * cpu_threads means what it says and the workers' sgemm calls do not each
 * start a team of BLAS threads.
 *
 * OpenBLAS (pthread and OpenMP builds alike) keeps one process-wide thread
 * count; openblas_set_num_threads(1) makes every later call run in the calling
 * thread. We set it to 1 when the first flashjit job starts and restore the
 * application's value when the last running job ends (a process-wide count
 * of running jobs under a mutex), so an application's own BLAS calls made
 * while a flashjit CPU job runs also run single-threaded. The symbols are weak:
 * with another CBLAS (meson -Dblas=...) nothing is changed, and that BLAS
 * should be a single-threaded build. */
#ifndef FJ_BLAS_THREADS_H
#define FJ_BLAS_THREADS_H

#include <stdint.h>

#include "pool.h"
#include "strbuf.h"

void fj_blas_single_thread_begin(void);
void fj_blas_single_thread_end(void);

/* fj_pool_run with the BLAS single-threaded for the duration: how the CPU
 * backends run jobs whose tasks call sgemm. */
void fj_cpu_pool_run(fj_pool *pool, int64_t ntasks, fj_task_fn fn, void *arg);

/* One line: the BLAS library's name, build config and threading. */
void fj_blas_describe(fj_strbuf *out);

#endif
