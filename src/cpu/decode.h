/* The CPU backend's decode path: few query rows against many keys (one
 * token's step of generation, a few speculative tokens), where the tiled
 * path's sgemm would spend its time packing K and V for a handful of rows.
 *
 * The rows of one kv head (every query position of the call times the query
 * heads of its GQA group) go together; each K and V row is read once, where
 * it lies, at its stored width, and used by all of them. The keys of a kv
 * head are split into chunks that the pool's workers take as tasks (as
 * split-KV does on a GPU); each chunk keeps an online softmax per row, and
 * the last chunk of a kv head to finish merges the chunks' partial results
 * by their log-sum-exp. Inner loops: decode_kernels.h. */
#ifndef FJ_CPU_DECODE_H
#define FJ_CPU_DECODE_H

#include <stdbool.h>

#include "flashjit.h"
#include "pool.h"
#include "problem.h"
#include "strbuf.h"

/* Most rows per kv head (seqlen_q x heads_q / heads_kv) the decode path
 * takes; more go to the tiled path, whose sgemm packing is then spread over
 * enough rows to pay. */
#define FJ_CPU_DECODE_MAX_ROWS 16

typedef struct fj_cpu_decode_plan fj_cpu_decode_plan;

/* Whether a plan without a given configuration takes the decode path: rows
 * per kv head at most FJ_CPU_DECODE_MAX_ROWS, the path not turned off by
 * fj_cpu_decode_force, and no tiled blocks forced (that hook tests the tiled
 * path). */
bool fj_cpu_decode_chosen(const fj_problem *p);

/* Whether a paged plan (FJ_FEATURE_PAGED_KV, with or without
 * FJ_FEATURE_VARLEN) without a given configuration is a decode plan of the
 * whole batch, its keys read through the block table (src/cpu/varlen.c):
 * as fj_cpu_decode_chosen, and at most FJ_CPU_DECODE_MAX_ROWS rows per kv
 * head (bf16 prefill on AMX copies each sequence's keys out first, as the
 * tiled path does). */
bool fj_cpu_decode_takes_paged(const fj_problem *p);

/* The plan for p on the pool's workers (the chunking, the kernels for the
 * dtype and this CPU, and every workspace). Appends the method, its reasons
 * and the workspace to describe. A paged p (fj_cpu_decode_takes_paged) runs
 * every sequence of an execute in one pass, as a problem of its own
 * lengths, K and V read where they lie in the pools; its chunks are laid
 * out at each execute from the sequences' lengths. */
fj_status fj_cpu_decode_plan_create(fj_pool *pool, const fj_problem *p, fj_cpu_decode_plan **out,
                                    fj_strbuf *describe);

/* Runs it (on the pool; returns when done). Concurrent calls on one plan are
 * serialized by the pool, which also orders each call's workspace use (a
 * paged plan's by a lock of its own, taken around its chunks' layout too).
 * Paged: in's block table, seqused_k (and with varlen cu_seqlens_q and
 * total_q) checked already (src/sequences.c, fj_sequences_check). */
void fj_cpu_decode_execute(const fj_cpu_decode_plan *dp, const fj_problem *p, const void *q,
                           const void *k, const void *v, void *o, float *lse,
                           const fj_exec_inputs *in);

/* What fj_plan_get_info reports for a decode plan: kernel "cpu_decode_<inner
 * loops>", no tiles, the worker threads it uses and its key chunks as splits. */
void fj_cpu_decode_plan_info(const fj_cpu_decode_plan *dp, fj_plan_info *info);

void fj_cpu_decode_plan_destroy(fj_cpu_decode_plan *dp);

/* Test and benchmark hook for plans created after the call (any context):
 * AUTO as above; OFF sends every problem to the tiled path; GENERIC keeps the
 * choice but uses the generic kernels on any CPU (what a CPU without AVX-512
 * runs); NO_AMX no AMX for bf16 (what a CPU with AVX-512 but without AMX
 * runs: the AVX-512 BF16 dot products where the CPU has them, else the
 * AVX-512 kernels); WIDENED the AVX-512 kernels for bf16, widened to float
 * (what a CPU with neither runs). Thread-safe. FJ_ERR_INVALID_ARGUMENT for
 * another value. */
typedef enum {
    FJ_CPU_DECODE_AUTO = 0,
    FJ_CPU_DECODE_OFF = 1,
    FJ_CPU_DECODE_GENERIC = 2,
    FJ_CPU_DECODE_NO_AMX = 3,
    FJ_CPU_DECODE_WIDENED = 4,
} fj_cpu_decode_mode;
fj_status fj_cpu_decode_force(fj_cpu_decode_mode mode);

/* Test hook for plans created after the call: true splits the keys of every
 * problem as finely as the workers allow (chunks down to 16 keys, small
 * calls not kept on the calling thread), so small problems exercise the
 * merge; false goes back to the plan's own choice. Thread-safe. */
void fj_cpu_decode_force_split(bool fine);

#endif
