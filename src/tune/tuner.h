/* The tuner: a problem's candidate tiles checked against the CPU reference,
 * timed, and the fastest raced against the default head to head
 * (docs/tuning.md, "The tuner"). `flashjit tune` runs it over a grid of
 * problems (tools/cmd_tune.c: flags, output file, printing); FJ_PLAN_MEASURE
 * runs it for one plan's problem (src/tune/plan_measure.c). It reaches the
 * backend through the public API and the registry's tuning row
 * (src/tune/target.h) only. */
#ifndef FJ_TUNER_H
#define FJ_TUNER_H

#include <stdbool.h>

#include "flashjit.h"
#include "tune/target.h"
#include "tune/timing.h"
#include "tune/tuning.h"

/* What the tuner tells as it goes; every member may be NULL. Called on the
 * thread that called fj_tuner_build or fj_tuner_tune (build_step: from the
 * building threads, one at a time). */
typedef struct fj_tune_observer {
    void *user;
    /* A kernel's verdict was reached by its check: PRUNED (no plan could be
       made), WRONG (a bug in flashjit) or CORRECT (reason: its error). */
    void (*checked)(void *user, const fj_tune_kernel *k);
    /* Building ahead: one more kernel built. */
    fj_tune_build_step_fn build_step;
    /* A candidate that passed its check (or is not checked yet) cannot be
       timed on this problem: why. */
    void (*pruned)(void *user, const char *problem, const char *tiles, const char *reason);
    /* A candidate was timed on this problem. */
    void (*timed)(void *user, const char *problem, const char *tiles, const fj_tune_timing *t);
    /* The plan the context makes without tiles failed (the candidates still run). */
    void (*default_failed)(void *user, const char *problem, const char *reason);
    /* One step of a problem's timing is next (its default, each candidate,
       the final duel), worth `work` (the problem's FLOPs); what: what it is. */
    void (*step)(void *user, double work, const char *what);
} fj_tune_observer;

typedef struct fj_tuner_options {
    const char *const *tiles; /* the candidates; NULL: the backend's (fj_backend_tuning) */
    int n_tiles;
    int repeat;        /* timed runs per candidate, median kept; 0: CUDA 25, CPU 5 */
    int warmup;        /* untimed runs first; < 0: CUDA 5, CPU 1 */
    int jobs;          /* threads building ahead; 0: one per core */
    double time_limit; /* seconds one problem's checks and timing may take; 0: no limit */
    const fj_tune_observer *observer;
} fj_tuner_options;

/* Fills the defaults: the backend's candidates and counts, no limit, silent. */
void fj_tuner_options_init(fj_tuner_options *o);

/* What tuning one problem found. */
typedef struct fj_tune_result {
    char problem[FJ_PROBLEM_KEY_MAX]; /* its key */
    fj_tuning_entry entry;            /* the point's key fields; with have_best also config (best),
                                 ms (best_t.median) and today's date, origin MEASURED */
    bool have_best;                   /* something was timed: best is the point's tiles */
    char best[FJ_TUNE_TILES_LEN];
    fj_tune_timing best_t;
    bool have_default;           /* the default plan was made and is correct */
    char def[FJ_TUNE_TILES_LEN]; /* its tiles */
    fj_tiles_source def_from;
    bool def_timed; /* it was timed (def_t) */
    fj_tune_timing def_t;
    bool default_won;               /* it beat the best candidate head to head: best is def */
    char beaten[FJ_TUNE_TILES_LEN]; /* the candidate it beat */
    int timed, pruned, duplicates, wrong, out_of_time; /* candidates */
} fj_tune_result;

typedef struct fj_tuner fj_tuner;

/* A tuner for ctx's backend (ctx must outlive it). FJ_ERR_UNSUPPORTED when
 * the backend has nothing to tune; FJ_ERR_INVALID_ARGUMENT naming a
 * candidate that is not the backend's tiles. Makes a CPU reference context
 * for the checks. */
fj_status fj_tuner_create(fj_context *ctx, const fj_tuner_options *o, fj_tuner **out);
void fj_tuner_destroy(fj_tuner *t);

/* What it resolved: the target, the candidates, the counts, the check
 * problem's sequence lengths. */
typedef struct fj_tuner_settings {
    fj_tuning_target target;
    int n_tiles;
    const char *const *tiles;
    int repeat, warmup, jobs;
    int check_seqlen_q, check_seqlen_k;
    const char *cache_dir; /* where built candidates go; NULL: the disk cache is off */
} fj_tuner_settings;
const fj_tuner_settings *fj_tuner_get_settings(const fj_tuner *t);

/* Before timing: every (problem kernel, candidate) registered and, on a
 * backend that builds ahead, built on `jobs` threads and pruned (the split-KV
 * variants too when a problem has seqlen_q 1). *out: zeros when there is
 * nothing to build. FJ_ERR_OUT_OF_MEMORY only. */
fj_status fj_tuner_build(fj_tuner *t, const fj_attention_desc *problems, int n,
                         fj_tune_build_summary *out);

/* The kernels registered so far and their verdicts (for reporting). */
int fj_tuner_kernel_count(const fj_tuner *t);
const fj_tune_kernel *fj_tuner_kernel_at(const fj_tuner *t, int i);

/* Tunes one problem into *r (always filled): the default plan and every
 * candidate checked (once per kernel), timed on rotating inputs, the
 * fastest raced against the default. FJ_OK unless something that is not a
 * candidate's fault failed (memory, the reference); r->have_best says
 * whether the point got a configuration. */
fj_status fj_tuner_tune(fj_tuner *t, const fj_attention_desc *d, fj_tune_result *r);

#endif
