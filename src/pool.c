/* Worker pool: a generation counter wakes the workers for each job; an atomic
 * counter hands out tasks; the last worker to finish signals the caller. */
#include "pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "status.h"

struct fj_pool {
    int threads;
    pthread_t *tids;
    pthread_mutex_t job_lock; /* one job at a time */
    pthread_mutex_t lock;     /* guards the fields below */
    pthread_cond_t wake, done;
    uint64_t generation;
    int busy; /* workers (excluding the caller) still in the current job */
    int quit;
    fj_task_fn fn;
    void *arg;
    int64_t ntasks;
    atomic_int_fast64_t next;
};

typedef struct worker_arg {
    fj_pool *pool;
    int id;
} worker_arg;

static void drain(fj_pool *p, int id)
{
    for (;;) {
        int64_t t = atomic_fetch_add(&p->next, 1);
        if (t >= p->ntasks) break;
        p->fn(p->arg, t, id);
    }
}

static void *worker_main(void *v)
{
    worker_arg a = *(worker_arg *)v;
    free(v);
    fj_pool *p = a.pool;
    uint64_t seen = 0;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        while (!p->quit && p->generation == seen) pthread_cond_wait(&p->wake, &p->lock);
        if (p->quit) break;
        seen = p->generation;
        pthread_mutex_unlock(&p->lock);
        drain(p, a.id);
        pthread_mutex_lock(&p->lock);
        if (--p->busy == 0) pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

fj_status fj_pool_create(int threads, fj_pool **out)
{
    *out = NULL;
    if (threads < 1)
        return fj_fail(FJ_ERR_INVALID_ARGUMENT, "cpu_threads (%d) must be >= 1", threads);
    fj_pool *p = calloc(1, sizeof *p);
    if (!p) return fj_fail(FJ_ERR_OUT_OF_MEMORY, "out of memory creating the CPU thread pool");
    p->threads = threads;
    pthread_mutex_init(&p->job_lock, NULL);
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    atomic_init(&p->next, 0);
    if (threads > 1) {
        p->tids = calloc((size_t)threads - 1, sizeof *p->tids);
        if (!p->tids) {
            p->threads = 1; /* nothing started: destroy must join none */
            fj_pool_destroy(p);
            return fj_fail(FJ_ERR_OUT_OF_MEMORY, "out of memory creating the CPU thread pool");
        }
    }
    for (int i = 1; i < threads; i++) {
        worker_arg *a = malloc(sizeof *a);
        int rc = a ? 0 : -1;
        if (a) {
            a->pool = p;
            a->id = i;
            rc = pthread_create(&p->tids[i - 1], NULL, worker_main, a);
            if (rc != 0) free(a);
        }
        if (rc != 0) {
            p->threads = i; /* destroy joins only the started ones */
            fj_pool_destroy(p);
            return fj_fail(FJ_ERR_OUT_OF_MEMORY, "cannot start CPU worker thread %d of %d", i,
                           threads);
        }
    }
    *out = p;
    return FJ_OK;
}

void fj_pool_destroy(fj_pool *p)
{
    if (!p) return;
    pthread_mutex_lock(&p->lock);
    p->quit = 1;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    for (int i = 1; i < p->threads; i++) pthread_join(p->tids[i - 1], NULL);
    free(p->tids);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done);
    pthread_mutex_destroy(&p->lock);
    pthread_mutex_destroy(&p->job_lock);
    free(p);
}

int fj_pool_threads(const fj_pool *p) { return p->threads; }

void fj_pool_run(fj_pool *p, int64_t ntasks, fj_task_fn fn, void *arg)
{
    if (ntasks <= 0) return;
    pthread_mutex_lock(&p->job_lock);
    int helpers = p->threads - 1;
    if (helpers > ntasks - 1) helpers = (int)(ntasks - 1);
    if (helpers == 0) {
        for (int64_t t = 0; t < ntasks; t++) fn(arg, t, 0);
    } else {
        pthread_mutex_lock(&p->lock);
        p->fn = fn;
        p->arg = arg;
        p->ntasks = ntasks;
        atomic_store(&p->next, 0);
        p->busy = p->threads - 1;
        p->generation++;
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->lock);
        drain(p, 0);
        pthread_mutex_lock(&p->lock);
        while (p->busy > 0) pthread_cond_wait(&p->done, &p->lock);
        pthread_mutex_unlock(&p->lock);
    }
    pthread_mutex_unlock(&p->job_lock);
}
