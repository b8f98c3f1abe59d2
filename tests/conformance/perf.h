/* The conformance driver's perf mode: each case timed on a backend and
 * printed as the row `flashjit bench` prints for the same problem (the same
 * columns, shape text and FLOP and byte counts, from tools/cli_problem.c;
 * the same timing path, fj_plan_time: CUDA events per run, the host clock on
 * the CPU; the median of the repeats). */
#ifndef FJT_PERF_H
#define FJT_PERF_H

#include <stddef.h>
#include <stdint.h>

#include "case.h"

/* bench's table header. */
void fjt_perf_header(void);

/* Times c on ctx (warmup runs, then repeat timed ones) and prints its row.
 * Returns FJ_OK, or the failing status (UNSUPPORTED included) with the
 * failing call's message in why; nothing is printed then. */
fj_status fjt_perf_row(const fjt_case *c, fj_context *ctx, uint64_t suite_seed, int warmup,
                       int repeat, char *why, size_t why_n);

#endif
