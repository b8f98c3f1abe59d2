#include "blas_threads.h"

#include <pthread.h>

/* Weak: resolved when the linked BLAS is OpenBLAS, NULL otherwise. */
extern void openblas_set_num_threads(int n) __attribute__((weak));
extern int openblas_get_num_threads(void) __attribute__((weak));
extern char *openblas_get_config(void) __attribute__((weak));
extern int openblas_get_parallel(void) __attribute__((weak));

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int running_jobs;
static int saved_threads;

void fj_blas_single_thread_begin(void)
{
    if (!openblas_set_num_threads || !openblas_get_num_threads) return;
    pthread_mutex_lock(&lock);
    if (running_jobs++ == 0) {
        saved_threads = openblas_get_num_threads();
        if (saved_threads != 1) openblas_set_num_threads(1);
    }
    pthread_mutex_unlock(&lock);
}

void fj_blas_single_thread_end(void)
{
    if (!openblas_set_num_threads || !openblas_get_num_threads) return;
    pthread_mutex_lock(&lock);
    if (--running_jobs == 0 && saved_threads != 1) openblas_set_num_threads(saved_threads);
    pthread_mutex_unlock(&lock);
}

void fj_blas_describe(fj_strbuf *out)
{
    if (!openblas_get_config) {
        fj_strbuf_puts(out, "a CBLAS other than OpenBLAS (its threading is left alone)");
        return;
    }
    static const char *const modes[] = {"sequential", "pthreads", "OpenMP"};
    int par = openblas_get_parallel ? openblas_get_parallel() : -1;
    fj_strbuf_printf(out, "%s, %s build, kept single-threaded inside flashjit's workers",
                     openblas_get_config(), par >= 0 && par <= 2 ? modes[par] : "unknown");
}

void fj_cpu_pool_run(fj_pool *pool, int64_t ntasks, fj_task_fn fn, void *arg)
{
    fj_blas_single_thread_begin();
    fj_pool_run(pool, ntasks, fn, arg);
    fj_blas_single_thread_end();
}
