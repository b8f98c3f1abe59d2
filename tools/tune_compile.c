/* CUDA candidates compiled before any is timed, as `flashjit compile-all`
 * does: through fj_kernel_build and the disk cache on several threads, so
 * NVRTC's minutes are spent in parallel and plan creation afterwards only
 * loads images. A candidate is pruned here when the template's rules reject
 * it for the device (fj_kernel_desc_check: tile shape, shared memory), when
 * it does not compile, or when its cubin spills (a stack frame: spilled
 * registers in local memory, which cost more than any tile gains). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cuda/jit/codegen.h"
#include "cuda/jit/cubin_info.h"
#include "cuda/jit/kernel_build.h"
#include "cuda/jit/kernel_desc.h"
#include "problem.h"
#include "status.h"
#include "tune.h"

#define MAX_THREADS 256

typedef struct build {
    fj_kernel_desc desc;
    char name[160];
    fj_status status;
    bool cached;
    double seconds;
    unsigned frame_bytes;
    char error[400];
} build;

typedef struct build_job {
    build *b;
    int count, next;
    const char *cache_dir;
    tune_progress *pg;
    pthread_mutex_t lock;
} build_job;

/* The descriptor a plan makes for k's point with k's tiles. */
static fj_status kernel_desc_of(const tune_kernel *k, uint32_t sm, fj_kernel_desc *out)
{
    fj_attention_desc d;
    fj_attention_desc_init(&d, 1, 1, 1, 1, 1, k->head_dim, k->dtype);
    d.causal = k->causal;
    fj_problem p;
    fj_status s = fj_problem_init(&p, &d);
    if (!s) s = fj_kernel_desc_for_problem(&p, sm, out);
    if (!s) s = fj_kernel_desc_parse_tiles(k->config, out);
    return s;
}

static void build_one(build *b, const char *cache_dir)
{
    fj_kernel_image img;
    memset(&img, 0, sizeof img);
    b->status = fj_kernel_build(&b->desc, cache_dir, &img);
    if (b->status == FJ_OK) {
        b->cached = img.from_cache;
        b->seconds = img.compile_seconds;
        fj_cubin_resources res;
        /* PTX (a device newer than NVRTC) has no resources before the
           driver's JIT; plan creation's local-memory figure covers it. */
        if (!img.is_ptx && fj_cubin_resources_read(img.data, img.size,
                                                   fj_codegen_entry(&b->desc), &res) == FJ_OK)
            b->frame_bytes = res.frame_bytes;
    } else {
        snprintf(b->error, sizeof b->error, "%s", fj_last_error());
    }
    fj_kernel_image_free(&img);
}

static void *build_worker(void *arg)
{
    build_job *j = arg;
    for (;;) {
        pthread_mutex_lock(&j->lock);
        int i = j->next < j->count ? j->next++ : -1;
        pthread_mutex_unlock(&j->lock);
        if (i < 0) return NULL;
        build_one(&j->b[i], j->cache_dir);
        pthread_mutex_lock(&j->lock);
        tune_progress_step(j->pg, 0, j->b[i].name);
        long done = j->pg->done, total = j->pg->total;
        if (done * 10 / total != (done - 1) * 10 / total) tune_progress_milestone(j->pg, NULL);
        pthread_mutex_unlock(&j->lock);
    }
}

static void run_builds(build *b, int count, const char *cache_dir, int jobs, tune_progress *pg)
{
    build_job j = {b, count, 0, cache_dir, pg, PTHREAD_MUTEX_INITIALIZER};
    pthread_t threads[MAX_THREADS];
    if (jobs > count) jobs = count;
    if (jobs > MAX_THREADS) jobs = MAX_THREADS;
    int started = 0;
    for (; started < jobs; started++)
        if (pthread_create(&threads[started], NULL, build_worker, &j) != 0) break;
    if (!started) build_worker(&j); /* no thread could start: build here */
    for (int i = 0; i < started; i++) pthread_join(threads[i], NULL);
    pthread_mutex_destroy(&j.lock);
}

/* Adds the build of desc unless an equal name is queued. */
static void queue(build *b, int *count, const fj_kernel_desc *desc)
{
    char name[160];
    fj_kernel_desc_name(desc, name, sizeof name);
    for (int i = 0; i < *count; i++)
        if (!strcmp(b[i].name, name)) return;
    memset(&b[*count], 0, sizeof b[*count]);
    b[*count].desc = *desc;
    snprintf(b[*count].name, sizeof b[*count].name, "%s", name);
    ++*count;
}

/* Prunes by the template's rules; queues the rest (and their split-KV
 * variants). */
static int queue_kernels(tune_kernels *t, const fj_tuning_target *target, bool with_split,
                         build *b, tune_compile_summary *out)
{
    int count = 0;
    for (int i = 0; i < t->count; i++) {
        tune_kernel *k = &t->k[i];
        if (k->verdict != TUNE_UNCHECKED) continue;
        fj_kernel_desc desc;
        fj_status s = kernel_desc_of(k, target->sm, &desc);
        if (!s) s = fj_kernel_desc_check(&desc, target->smem_limit);
        if (s) {
            k->verdict = TUNE_PRUNED;
            snprintf(k->reason, sizeof k->reason, "%s", fj_last_error());
            out->pruned_by_rules++;
            continue;
        }
        queue(b, &count, &desc);
        if (with_split) {
            desc.split_kv = 1;
            queue(b, &count, &desc);
        }
    }
    return count;
}

/* A failed or spilling build prunes every kernel that needs it. */
static void apply_builds(tune_kernels *t, const fj_tuning_target *target, const build *b, int count)
{
    for (int i = 0; i < t->count; i++) {
        tune_kernel *k = &t->k[i];
        fj_kernel_desc desc;
        if (k->verdict != TUNE_UNCHECKED || kernel_desc_of(k, target->sm, &desc)) continue;
        char name[160];
        fj_kernel_desc_name(&desc, name, sizeof name);
        for (int j = 0; j < count; j++) {
            if (strcmp(b[j].name, name)) continue;
            if (b[j].status) {
                k->verdict = TUNE_PRUNED;
                snprintf(k->reason, sizeof k->reason, "%s: %s", fj_status_name(b[j].status),
                         b[j].error);
            } else if (b[j].frame_bytes) {
                k->verdict = TUNE_PRUNED;
                snprintf(k->reason, sizeof k->reason,
                         "kernel %s spills: a %u-byte stack frame per thread", name,
                         b[j].frame_bytes);
            }
        }
    }
}

fj_status tune_compile_kernels(tune_kernels *t, const fj_tuning_target *target,
                               const char *cache_dir, int jobs, bool with_split,
                               tune_progress *pg, tune_compile_summary *out)
{
    memset(out, 0, sizeof *out);
    build *b = calloc((size_t)t->count * 2 + 1, sizeof *b);
    if (!b) return fj_fail(FJ_ERR_OUT_OF_MEMORY, "out of host memory for the compile list");
    int count = queue_kernels(t, target, with_split, b, out);
    double t0 = cli_now();
    tune_progress_begin(pg, "compiling", count, 0);
    if (count) run_builds(b, count, cache_dir, jobs, pg);
    out->wall_seconds = cli_now() - t0;
    out->kernels = count;
    for (int i = 0; i < count; i++) {
        if (b[i].status) out->failed++;
        else if (b[i].cached) out->cached++;
        else out->compiled++, out->nvrtc_seconds += b[i].seconds;
        if (!b[i].status && b[i].frame_bytes) out->spilled++;
    }
    apply_builds(t, target, b, count);
    free(b);
    return FJ_OK;
}
