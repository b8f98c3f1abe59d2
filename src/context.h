/* The context's internals, shared by the core and the backends (a backend
 * reads its own state from backend_state). */
#ifndef FJ_CONTEXT_H
#define FJ_CONTEXT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "backend.h"
#include "flashjit.h"

struct fj_pool;   /* src/pool.h */
struct fj_tuning; /* src/tune/tuning.h */
struct fj_plan_cache_entry;

struct fj_context {
    const fj_backend_entry *entry; /* the registry row AUTO (or the caller) resolved to */
    void *backend_state;           /* what entry->probe made (the CUDA device), or NULL */
    int device;                    /* CUDA ordinal asked for */
    int cpu_threads;               /* resolved, >= 1 */
    char *cache_dir;               /* resolved; NULL: the disk cache is off */
    char *cache_dir_note;          /* why the disk cache is off, or NULL */
    char *tuning_file;             /* resolved path; NULL: none */
    struct fj_pool *pool;          /* worker threads: the CPU backends run on them, the tuner
                                    checks candidates of any backend with them */
    struct fj_tuning *tuning;      /* tuned configurations, may be NULL */
    char *describe;

    pthread_mutex_t plan_lock; /* guards plans, the one-shot plan cache */
    struct fj_plan_cache_entry *plans;
    uint64_t plan_clock; /* orders plan uses for LRU eviction; under plan_lock */
};

#endif
