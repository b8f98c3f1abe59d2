/* The CUDA backend's tuning row (src/tune/target.h): the candidate tiles,
 * their grammar, and the candidates built before any is timed, as
 * `flashjit compile-all` builds: through fj_kernel_build and the disk cache on
 * several threads, so NVRTC's minutes are spent in parallel and plan creation
 * afterwards only loads images. A candidate is pruned here when the
 * template's rules reject it for the device (fj_kernel_desc_check: tile
 * shape, shared memory), when it does not compile, or when its cubin spills
 * (a stack frame: spilled registers in local memory, which cost more than any
 * tile gains). Built with or without the CUDA backend, like the rest of the
 * JIT, so flags naming CUDA tiles are checked either way. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda/jit/codegen.h"
#include "cuda/jit/cubin_info.h"
#include "cuda/jit/kernel_build.h"
#include "cuda/jit/kernel_desc.h"
#include "problem.h"
#include "status.h"
#include "tune/target.h"

#define MAX_THREADS 256

/* The prefill tiles m{64,128}n{32,64,128}w{4,8}s{2,3}; decode-sized tiles
 * (the decode heuristic's and its neighbours): one or two warps of 16 rows,
 * for the decode bucket's few rows, with deeper pipelines for one warp (more
 * K/V bytes in flight), and one 16-row tile whose 2 or 4 warps share out the
 * keys with alternating K and V loads (s1: the H200's d128 decode choice); on
 * prefill points they lose and, being slow, get only a few runs. Then
 * flash_wgmma (sm_90 only; the rules prune them elsewhere): one to three
 * warpgroups, two buffers or three (the softmax overlapping the previous
 * tile's P V); then flash_tma (sm_90): two consumers with key tiles of 64 to
 * 176 and two or three stages, three consumers (d64). */
static const char *const candidates[] = {
    "m64n32w4s2",   "m64n32w4s3",   "m64n32w8s2",   "m64n32w8s3",   "m64n64w4s2",   "m64n64w4s3",
    "m64n64w8s2",   "m64n64w8s3",   "m64n128w4s2",  "m64n128w4s3",  "m64n128w8s2",  "m64n128w8s3",
    "m128n32w4s2",  "m128n32w4s3",  "m128n32w8s2",  "m128n32w8s3",  "m128n64w4s2",  "m128n64w4s3",
    "m128n64w8s2",  "m128n64w8s3",  "m128n128w4s2", "m128n128w4s3", "m128n128w8s2", "m128n128w8s3",
    "m16n32w1s2",   "m16n64w1s2",   "m16n32w1s3",   "m16n32w1s4",   "m16n64w1s3",   "m32n32w2s2",
    "m32n64w2s2",   "m32n32w2s3",   "m16n64w2s1",   "m16n128w4s1",  "m128n64g2s2",  "m128n64g2s3",
    "m128n128g2s2", "m128n128g2s3", "m192n64g3s3",  "m192n128g3s3", "m64n128g1s3",  "m128n128c2s2",
    "m128n176c2s2", "m128n128c2s3", "m128n112c2s2", "m128n96c2s2",  "m128n80c2s2",  "m128n64c2s2",
    "m192n128c3s2", "m192n96c3s2",  NULL,
};

static fj_status cuda_tiles_parse(const char *tiles, int *rows, int *keys)
{
    fj_kernel_desc k;
    fj_kernel_desc_init(&k);
    k.template_id = FJ_TEMPLATE_FLASH_FWD; /* an attention kernel: w and g tiles parse */
    fj_status s = fj_kernel_desc_parse_tiles(tiles, &k);
    if (s) return s;
    *rows = (int)k.block_m;
    *keys = (int)k.block_n;
    return FJ_OK;
}

/* ---- building ahead ------------------------------------------------------------ */

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
    int count, next, done;
    const char *cache_dir;
    fj_tune_build_step_fn step;
    void *user;
    pthread_mutex_t lock;
} build_job;

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The descriptor a plan makes for k's point with k's tiles. */
static fj_status kernel_desc_of(const fj_tune_kernel *k, uint32_t sm, fj_kernel_desc *out)
{
    fj_attention_desc d;
    fj_attention_desc_init(&d, 1, 1, 1, 1, 1, k->head_dim, k->dtype);
    d.causal = k->causal;
    fj_problem p;
    fj_status s = fj_problem_init(&p, &d);
    if (!s) s = fj_kernel_desc_for_problem(&p, sm, out);
    if (!s) s = fj_kernel_desc_parse_tiles(k->tiles, out);
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
        if (!img.is_ptx &&
            fj_cubin_resources_read(img.data, img.size, fj_codegen_entry(&b->desc), &res) == FJ_OK)
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
        j->done++;
        if (j->step) j->step(j->user, j->done, j->count, j->b[i].name);
        pthread_mutex_unlock(&j->lock);
    }
}

static void run_builds(build_job *j, int jobs)
{
    pthread_t threads[MAX_THREADS];
    if (jobs > j->count) jobs = j->count;
    if (jobs > MAX_THREADS) jobs = MAX_THREADS;
    int started = 0;
    for (; started < jobs; started++)
        if (pthread_create(&threads[started], NULL, build_worker, j) != 0) break;
    if (!started) build_worker(j); /* no thread could start: build here */
    for (int i = 0; i < started; i++) pthread_join(threads[i], NULL);
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
static int queue_kernels(fj_tune_kernel *k, int n, const fj_tuning_target *target, bool with_split,
                         build *b, fj_tune_build_summary *out)
{
    int count = 0;
    for (int i = 0; i < n; i++) {
        if (k[i].verdict != FJ_TUNE_UNCHECKED) continue;
        fj_kernel_desc desc;
        fj_status s = kernel_desc_of(&k[i], target->sm, &desc);
        if (!s) s = fj_kernel_desc_check(&desc, target->smem_limit);
        if (s) {
            k[i].verdict = FJ_TUNE_PRUNED;
            snprintf(k[i].reason, sizeof k[i].reason, "%s", fj_last_error());
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
static void apply_builds(fj_tune_kernel *k, int n, const fj_tuning_target *target, const build *b,
                         int count)
{
    for (int i = 0; i < n; i++) {
        fj_kernel_desc desc;
        if (k[i].verdict != FJ_TUNE_UNCHECKED || kernel_desc_of(&k[i], target->sm, &desc)) continue;
        char name[160];
        fj_kernel_desc_name(&desc, name, sizeof name);
        for (int j = 0; j < count; j++) {
            if (strcmp(b[j].name, name)) continue;
            if (b[j].status) {
                k[i].verdict = FJ_TUNE_PRUNED;
                snprintf(k[i].reason, sizeof k[i].reason, "%s: %s", fj_status_name(b[j].status),
                         b[j].error);
            } else if (b[j].frame_bytes) {
                k[i].verdict = FJ_TUNE_PRUNED;
                snprintf(k[i].reason, sizeof k[i].reason,
                         "kernel %s spills: a %u-byte stack frame per thread", name,
                         b[j].frame_bytes);
            }
        }
    }
}

static fj_status cuda_build_ahead(const fj_tuning_target *target, const char *cache_dir,
                                  fj_tune_kernel *k, int n, int jobs, bool with_split,
                                  fj_tune_build_step_fn step, void *user,
                                  fj_tune_build_summary *out)
{
    memset(out, 0, sizeof *out);
    build *b = calloc((size_t)n * 2 + 1, sizeof *b);
    if (!b) return fj_fail(FJ_ERR_OUT_OF_MEMORY, "out of host memory for the compile list");
    build_job j = {b, 0, 0, 0, cache_dir, step, user, PTHREAD_MUTEX_INITIALIZER};
    j.count = queue_kernels(k, n, target, with_split, b, out);
    double t0 = now_seconds();
    if (j.count) run_builds(&j, jobs > 0 ? jobs : 1);
    pthread_mutex_destroy(&j.lock);
    out->wall_seconds = now_seconds() - t0;
    out->kernels = j.count;
    for (int i = 0; i < j.count; i++) {
        if (b[i].status) out->failed++;
        else if (b[i].cached) out->cached++;
        else out->compiled++, out->nvrtc_seconds += b[i].seconds;
        if (!b[i].status && b[i].frame_bytes) out->spilled++;
    }
    apply_builds(k, n, target, b, j.count);
    free(b);
    return FJ_OK;
}

const fj_backend_tuning fj_cuda_tuning = {
    .candidates = candidates,
    .tiles_grammar = "m<block_m>n<block_n>w<warps>s<stages>, e.g. m128n64w4s2, "
                     "m<block_m>n<block_n>g<warpgroups>s<stages>, e.g. m128n64g2s3 (sm_90), or "
                     "m<block_m>n<block_n>c<consumer warpgroups>s<stages>, e.g. m128n128c2s2 "
                     "(sm_90)",
    .tiles_parse = cuda_tiles_parse,
    .build_ahead = cuda_build_ahead,
};
