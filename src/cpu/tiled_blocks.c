/* Block sizes of the CPU tiled backend: the heuristic, and the test hook that
 * overrides it. */
#include "tiled_blocks.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "status.h"
#include "tiled_kernels.h"
#include "tune/tuning.h"

/* Both forced sizes in one word, so a plan never reads half of an update:
 * block_q in the high 16 bits, block_k in the low; 0 means not forced. */
static atomic_uint forced_blocks;

fj_status fj_cpu_tiled_force_blocks(int block_q, int block_k)
{
    if (block_q == 0 && block_k == 0) {
        atomic_store(&forced_blocks, 0u);
        return FJ_OK;
    }
    if (block_q < 1 || block_q > FJ_CPU_TILED_MAX_BLOCK)
        return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                       "block_q (%d) must be in [1, %d] (or 0 with block_k 0)", block_q,
                       FJ_CPU_TILED_MAX_BLOCK);
    if (block_k < 1 || block_k > FJ_CPU_TILED_MAX_BLOCK)
        return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                       "block_k (%d) must be in [1, %d] (or 0 with block_q 0)", block_k,
                       FJ_CPU_TILED_MAX_BLOCK);
    atomic_store(&forced_blocks, (unsigned)block_q << 16 | (unsigned)block_k);
    return FJ_OK;
}

bool fj_cpu_tiled_blocks_forced(void) { return atomic_load(&forced_blocks) != 0; }

static atomic_bool forced_blas;

void fj_cpu_tiled_force_blas(bool on) { atomic_store(&forced_blas, on); }

static atomic_bool forced_widened_bf16;

void fj_cpu_tiled_force_widened_bf16(bool on) { atomic_store(&forced_widened_bf16, on); }

const fj_tiled_kernels *fj_cpu_tiled_kernels(fj_dtype t)
{
    if (atomic_load(&forced_blas)) return NULL;
    const fj_tiled_kernels *k = NULL;
    if (t == FJ_BF16 && !atomic_load(&forced_widened_bf16)) k = fj_tiled_kernels_avx512_bf16();
    return k ? k : fj_tiled_kernels_avx512();
}

/* Measured on the development machine (2 cores of an AMD EPYC, 1 MiB L2 per
 * core, OpenBLAS 0.3.21 with its Haswell sgemm kernels; `bench_cpu_tiled
 * sweep`, f32 and bf16, batch 1, 8 heads, S 2048-4096): GFLOP/s rise with
 * block_q up to 512 and level off from block_k 512, at head dims 64, 128 and
 * 256 alike, causal or not. Large row blocks matter most: OpenBLAS packs each
 * K and V block again for every sgemm, so that cost is spread over block_q
 * rows. At head dims above 128, 256 keys do as well and halve the workspace. */
static void heuristic(int head_dim, int *block_q, int *block_k)
{
    *block_q = 512;
    *block_k = head_dim <= 128 ? 512 : 256;
}

/* With the tile kernels (tiled_kernels.h) nothing is packed per key block, so
 * key blocks only need to keep a tile's scores (block_k x 32 floats) in L1:
 * 128 keys measured as fast as 64 and faster than 256 or 512, and 512 rows
 * faster than 256 or 1024 (development machine, a Xeon with AVX-512, f32 S
 * 1024-4096 D 128, one thread; docs/benchmarks.md, "Prefill on tiles of our
 * own"): each block of rows reads its K and V once more. */
static void heuristic_tiles(int *block_q, int *block_k)
{
    *block_q = 512;
    *block_k = 128;
}

/* Smallest block_q the adjustments below go to: sgemm efficiency falls off
 * under it. */
#define MIN_AUTO_BLOCK_Q 64
/* Blocks per worker below which block_q is halved: the pool hands blocks out
 * one at a time, heaviest first, so a few per worker even out causal blocks
 * of unequal cost. */
#define BLOCKS_PER_WORKER 4

/* Keys one row sees at most under the problem's mask. */
static int64_t mask_band(const fj_problem *p)
{
    int64_t left = p->window_left >= 0 ? p->window_left : p->seqlen_k;
    int64_t right = p->causal != FJ_CAUSAL_NONE ? 0
                    : p->window_right >= 0      ? p->window_right
                                                : p->seqlen_k;
    int64_t w = left + right + 1;
    return w < p->seqlen_k ? w : p->seqlen_k;
}

void fj_cpu_tiled_geometry_of(const fj_problem *p, int block_q, fj_cpu_tiled_geometry *g)
{
    /* The ceil-divisions in int64: seqlen_q or the group within a block of
       INT_MAX would overflow int, and a negative task count ran nothing. */
    g->heads_per_block = p->group < block_q ? p->group : block_q;
    g->head_chunks = (int)(((int64_t)p->group + g->heads_per_block - 1) / g->heads_per_block);
    g->positions_per_block = block_q / g->heads_per_block;
    if (g->positions_per_block > p->seqlen_q) g->positions_per_block = p->seqlen_q;
    g->rows = g->positions_per_block * g->heads_per_block;
    g->position_blocks =
        ((int64_t)p->seqlen_q + g->positions_per_block - 1) / g->positions_per_block;
    g->tasks = (int64_t)p->batch * p->heads_kv * g->head_chunks * g->position_blocks;
}

int fj_cpu_tiled_config_name(int block_q, int block_k, char *buf, size_t n)
{
    return snprintf(buf, n, "q%dk%d", block_q, block_k);
}

static pthread_once_t model_once = PTHREAD_ONCE_INIT;
static char cpu_model[96] = "unknown";

static void read_cpu_model(void)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10)) continue;
        const char *v = strchr(line, ':');
        if (!v) break;
        v++;
        while (*v == ' ' || *v == '\t') v++;
        snprintf(cpu_model, sizeof cpu_model, "%.*s", (int)strcspn(v, "\n"), v);
        break;
    }
    fclose(f);
}

void fj_cpu_device_token(int threads, char *out, size_t n)
{
    pthread_once(&model_once, read_cpu_model);
    char name[160];
    snprintf(name, sizeof name, "cpu:%s_%dt", cpu_model, threads);
    fj_tuning_device_token(name, out, n);
}

static bool parse_config(const char *config, int *bq, int *bk)
{
    char tail;
    return sscanf(config, "q%dk%d%c", bq, bk, &tail) == 2 && *bq >= 1 &&
           *bq <= FJ_CPU_TILED_MAX_BLOCK && *bk >= 1 && *bk <= FJ_CPU_TILED_MAX_BLOCK;
}

/* The tuning entry for the problem, if any: its blocks and where it came from. */
static bool tuned_blocks(const fj_context *ctx, const fj_problem *p, int threads, int *bq, int *bk,
                         fj_tiles_source *from, char *why, size_t n)
{
    if (!ctx) return false;
    char device[96];
    fj_cpu_device_token(threads, device, sizeof device);
    fj_tuning_entry key;
    fj_tuning_key_for(p, device, "cpu", "cpu_tiled", &key);
    const fj_tuning_entry *e = fj_tuning_find(ctx, &key, from);
    if (!e) return false;
    if (!parse_config(e->config, bq, bk)) {
        snprintf(why, n, "heuristic (%s has an unusable entry '%s' for this point)",
                 fj_tuning_source_text(*from), e->config);
        return false;
    }
    snprintf(why, n, "tuned: %s entry for %s d%d %s %s bucket %d (%.4g ms, %s)",
             fj_tuning_source_text(*from), key.device, key.head_dim, key.dtype, key.mask,
             key.bucket, e->ms, e->date);
    return true;
}

fj_status fj_cpu_tiled_choose_blocks(const fj_context *ctx, const fj_problem *p, const char *config,
                                     int threads, fj_cpu_tiled_blocks *out)
{
    unsigned forced = atomic_load(&forced_blocks);
    int bq, bk;
    out->source[0] = '\0';
    if (config) {
        if (!parse_config(config, &bq, &bk))
            return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                           "cpu: configuration '%s' is not q<block_q>k<block_k> with each in "
                           "[1, %d]",
                           config, FJ_CPU_TILED_MAX_BLOCK);
        snprintf(out->source, sizeof out->source, "given configuration %s", config);
        out->from = FJ_TILES_GIVEN;
    } else if (forced) {
        bq = (int)(forced >> 16);
        bk = (int)(forced & 0xffffu);
        snprintf(out->source, sizeof out->source, "forced by fj_cpu_tiled_force_blocks");
        out->from = FJ_TILES_FORCED;
    } else if (tuned_blocks(ctx, p, threads, &bq, &bk, &out->from, out->source,
                            sizeof out->source)) {
        /* as tuned */
    } else {
        out->from = FJ_TILES_HEURISTIC;
        if (fj_cpu_tiled_kernels(p->dtype)) heuristic_tiles(&bq, &bk);
        else /* the wider of the K and V rows decides the key block's size */
            heuristic(p->head_dim > p->head_dim_v ? p->head_dim : p->head_dim_v, &bq, &bk);
        if (!out->source[0])
            snprintf(out->source, sizeof out->source, "heuristic: head dim, window, workers");
        /* Under a mask, a block of rows sees up to W + block_q - 1 keys (W:
           the keys a row sees, at most seqlen_k), and the block_q - 1 across
           each edge of the band go by in narrow masked blocks. Keeping
           block_q <= W / 2 under a causal mask (one edge) and <= W / 4 under
           a window (two) leaves most keys in wide unmasked blocks
           (docs/benchmarks.md, "CPU", "Block sizes and the row softmax"). */
        if (p->masked) {
            int64_t limit = mask_band(p) / (p->window_left >= 0 || p->window_right >= 0 ? 4 : 2);
            while (bq / 2 >= MIN_AUTO_BLOCK_Q && bq > limit) bq /= 2;
        }
        fj_cpu_tiled_geometry g;
        for (;;) {
            fj_cpu_tiled_geometry_of(p, bq, &g);
            if (bq / 2 < MIN_AUTO_BLOCK_Q || g.tasks >= (int64_t)BLOCKS_PER_WORKER * threads) break;
            bq /= 2;
        }
    }
    int64_t rows = (int64_t)p->seqlen_q * p->group;
    if (bq > rows) bq = (int)rows;
    if (bk > p->seqlen_k) bk = p->seqlen_k;
    out->block_q = bq;
    out->block_k = bk;
    return FJ_OK;
}
