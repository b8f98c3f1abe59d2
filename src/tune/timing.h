/* The tuner's timed runs: random input sets on the backend's memory, cycled
 * through so a run never finds its inputs left in cache by the one before;
 * one plan timed, or two plans timed against each other run for run. */
#ifndef FJ_TUNE_TIMING_H
#define FJ_TUNE_TIMING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "flashjit.h"

/* n values uniform in [-1, 1) in dtype t, from a splitmix64 stream: never
 * all zeros, which would let a kernel skip work or hide a wrong result
 * behind exact cancellation. */
void fj_tune_fill_random(void *buf, fj_dtype t, size_t n, uint64_t *state);

/* Element i of a buffer of dtype t, as a double. */
double fj_tune_load(const void *buf, fj_dtype t, size_t i);

#define FJ_TUNE_MAX_SETS 16

typedef struct fj_tune_inputs {
    fj_context *ctx;
    fj_dtype dtype;
    size_t q_bytes, k_bytes, v_bytes, o_bytes; /* of one set (v and o: rows of head_dim_v) */
    int sets;
    void *q[FJ_TUNE_MAX_SETS], *k[FJ_TUNE_MAX_SETS], *v[FJ_TUNE_MAX_SETS], *o[FJ_TUNE_MAX_SETS];
} fj_tune_inputs;

/* Makes (or keeps, when the sizes and dtype match) sets for d: enough that
 * together they exceed twice a 50 MB L2, at least 2, at most
 * FJ_TUNE_MAX_SETS, within max_bytes (at least one set). Random data in
 * [-1, 1), never zeros. */
fj_status fj_tune_inputs_prepare(fj_tune_inputs *in, fj_context *ctx, const fj_attention_desc *d,
                                 size_t max_bytes, uint64_t seed);
void fj_tune_inputs_free(fj_tune_inputs *in);

typedef struct fj_tune_timing {
    double median, p25, p75, min, max; /* ms */
    int runs;
    bool cut_short; /* far behind the best so far: fewer runs */
} fj_tune_timing;

/* warmup untimed runs, then up to repeat timed ones (fj_plan_time, one run
 * per call, each on the next input set). When cut_ms > 0 and the first
 * timed run takes longer than it, only a few runs are made: the candidate
 * cannot win, and its runs would cost the most. */
fj_status fj_tune_time_plan(const fj_plan *plan, const fj_tune_inputs *in, int warmup, int repeat,
                            double cut_ms, fj_tune_timing *out);

/* The two plans timed alternately, run for run on the same input sets, so
 * clock drift and warm-up affect both alike: the fair comparison of the
 * best candidate with the default. */
fj_status fj_tune_time_duel(const fj_plan *a, const fj_plan *b, const fj_tune_inputs *in,
                            int warmup, int repeat, fj_tune_timing *ta, fj_tune_timing *tb);

#endif
