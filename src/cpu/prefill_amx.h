/* The CPU backend's bf16 prefill on AMX tiles (prefill_amx.c): blocks of
 * PREFILL_ROWS query rows of one kv head against all the keys they see,
 * S = Q K^T and O += P V as tile products, the online softmax on each block
 * of scores while it is in cache. Chosen by decode.c for the bf16 prefill that
 * its AMX row blocks would otherwise take (more than FJ_CPU_DECODE_MAX_ROWS
 * rows per kv head, a GQA group of at most that many heads, AMX usable, the
 * decode hook at AUTO), when fj_cpu_prefill_amx_takes says so. */
#ifndef FJ_CPU_PREFILL_AMX_H
#define FJ_CPU_PREFILL_AMX_H

#include <stdbool.h>

#include "flashjit.h"
#include "pool.h"
#include "problem.h"
#include "strbuf.h"

typedef struct fj_cpu_prefill_amx_plan fj_cpu_prefill_amx_plan;

/* Whether the kernels take p: bf16, dense (neither paged nor varlen), no
 * ALiBi and no softcap (those stay in the AMX row blocks), the tiles usable
 * on this CPU, and the path not turned off by fj_cpu_prefill_amx_force_off.
 * Any mask, GQA, sinks, head_dim_v, strides. */
bool fj_cpu_prefill_amx_takes(const fj_problem *p);

/* The plan (packed K and V for one call, a workspace per worker); appends
 * the method and its reasons to describe. */
fj_status fj_cpu_prefill_amx_plan_create(fj_pool *pool, const fj_problem *p,
                                         fj_cpu_prefill_amx_plan **out, fj_strbuf *describe);

/* Runs it on the pool (two jobs: K and V packed, then the query blocks);
 * concurrent calls on one plan take turns on a lock of the plan's. */
void fj_cpu_prefill_amx_execute(const fj_cpu_prefill_amx_plan *ap, const fj_problem *p,
                                const void *q, const void *k, const void *v, void *o, float *lse,
                                const fj_exec_inputs *in);

/* fj_plan_get_info: kernel "cpu_prefill_amx", the workers, no splits. */
void fj_cpu_prefill_amx_plan_info(const fj_cpu_prefill_amx_plan *ap, fj_plan_info *info);

void fj_cpu_prefill_amx_plan_destroy(fj_cpu_prefill_amx_plan *ap);

/* Test and benchmark hook for plans created after the call: true sends the
 * problems this path would take to the AMX row blocks (decode.c) instead;
 * false goes back to the choice above. Thread-safe. */
void fj_cpu_prefill_amx_force_off(bool off);

#endif
