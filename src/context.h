/* The context's internals, shared by the core and the backends. */
#ifndef FJ_CONTEXT_H
#define FJ_CONTEXT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "backend.h"
#include "flashjit.h"

struct fj_pool;        /* src/cpu/pool.h */
struct fj_cuda_state;  /* src/cuda/ */
struct fj_tuning;      /* src/tuning.h */
struct fj_plan_cache_entry;

struct fj_context {
    fj_backend backend;          /* resolved, never AUTO */
    const fj_backend_ops *ops;
    int device;                  /* CUDA ordinal asked for */
    int cpu_threads;             /* resolved, >= 1 */
    char *cache_dir;             /* resolved; NULL: the disk cache is off */
    char *cache_dir_note;        /* why the disk cache is off, or NULL */
    char *tuning_file;           /* resolved path; NULL: none */
    struct fj_pool *pool;        /* CPU worker threads (CPU backends) */
    struct fj_cuda_state *cuda;  /* CUDA device, module cache (CUDA backend) */
    struct fj_tuning *tuning;    /* tuned configurations, may be NULL */
    char *describe;

    pthread_mutex_t plan_lock;   /* guards plans, the one-shot plan cache */
    struct fj_plan_cache_entry *plans;
    uint64_t plan_clock;         /* orders plan uses for LRU eviction; under plan_lock */
};

#endif
