/* The CPU tiled backend's block sizes: plan parameters chosen in one place
 * (src/cpu/tiled_blocks.c), so a tuning file can later supply them instead of
 * the heuristic without touching the algorithm (src/cpu/tiled.c).
 *
 * A block is block_q query rows against block_k keys. When several query
 * heads share a kv head (GQA, MQA), a block's rows are (position, head)
 * pairs: up to block_q of those heads are stacked, so one block holds
 * block_q / heads positions of each, and the heads share every K/V block. */
#ifndef FJ_CPU_TILED_BLOCKS_H
#define FJ_CPU_TILED_BLOCKS_H

#include "flashjit.h"
#include <stdbool.h>
#include <stddef.h>

#include "problem.h"

typedef struct fj_cpu_tiled_blocks {
    int block_q; /* query rows per block, >= 1 */
    int block_k; /* keys per block, >= 1 */
    fj_tiles_source from;
    char source[192]; /* why these: tuned (which entry), given, forced or heuristic */
} fj_cpu_tiled_blocks;

/* How a problem's query rows fall into blocks of at most block_q rows. */
typedef struct fj_cpu_tiled_geometry {
    int heads_per_block;     /* query heads of one kv head stacked in a block */
    int head_chunks;         /* ceil(group / heads_per_block) */
    int positions_per_block; /* query positions per block */
    int rows;                /* positions_per_block * heads_per_block <= block_q */
    int64_t position_blocks; /* ceil(seqlen_q / positions_per_block) */
    int64_t tasks;           /* blocks in all: batch * heads_kv * head_chunks * position_blocks */
} fj_cpu_tiled_geometry;

void fj_cpu_tiled_geometry_of(const fj_problem *p, int block_q, fj_cpu_tiled_geometry *g);

/* The block sizes for a problem run on `threads` workers, in this order:
 * config ("q<block_q>k<block_k>", the tuner's candidate) when not NULL; the
 * forced ones when a test set them (below); the tuning entry for the point
 * (ctx's tuning file, then the shipped table; ctx may be NULL: none); else
 * the heuristic for the head dim (or for the tile kernels, where plans use
 * them: fj_cpu_tiled_kernels below), with block_q lowered while there would be
 * too few blocks to keep every worker busy. Never larger than the problem
 * needs (block_k <= seqlen_k, block_q <= seqlen_q * group).
 * FJ_ERR_INVALID_ARGUMENT for a config that does not parse. */
fj_status fj_cpu_tiled_choose_blocks(const fj_context *ctx, const fj_problem *p, const char *config,
                                     int threads, fj_cpu_tiled_blocks *out);

/* "q256k512" */
int fj_cpu_tiled_config_name(int block_q, int block_k, char *buf, size_t n);

/* The tuning file's device field for this CPU with `threads` workers:
 * "cpu:<model name>_<threads>t" with spaces as '_'. */
void fj_cpu_device_token(int threads, char *out, size_t n);

/* Test hook: plans created after this call (in any context of the process)
 * use block_q x block_k instead of the heuristic, still capped by the
 * problem's size; (0, 0) goes back to the heuristic. The plan cache keeps
 * plans made before, so force before the first use of a desc in a context (or
 * use a fresh context). FJ_ERR_INVALID_ARGUMENT unless both are in
 * [1, FJ_CPU_TILED_MAX_BLOCK] or both are 0. Thread-safe. */
#define FJ_CPU_TILED_MAX_BLOCK 4096
fj_status fj_cpu_tiled_force_blocks(int block_q, int block_k);

/* Whether fj_cpu_tiled_force_blocks has blocks forced now. Thread-safe. */
bool fj_cpu_tiled_blocks_forced(void);

/* The tile kernels plans of dtype t use (tiled_kernels.h): for bf16 the
 * AVX-512 BF16 set where the CPU has it; else the AVX-512 set where the CPU
 * has that; else NULL (every block through cblas_sgemm). Thread-safe. */
struct fj_tiled_kernels;
const struct fj_tiled_kernels *fj_cpu_tiled_kernels(fj_dtype t);

/* Test hook: plans created after fj_cpu_tiled_force_blas(true) (in any
 * context of the process) run every block through cblas_sgemm, as on a CPU
 * without the tile kernels; false goes back to choosing by the CPU. Plans
 * already cached keep their choice. Thread-safe. */
void fj_cpu_tiled_force_blas(bool on);

/* Test hook: plans created after fj_cpu_tiled_force_widened_bf16(true) take
 * bf16 through the AVX-512 set (widened to f32 as it is copied), as on a
 * CPU without AVX-512 BF16; false goes back to choosing by the CPU.
 * Thread-safe. */
void fj_cpu_tiled_force_widened_bf16(bool on);

#endif
