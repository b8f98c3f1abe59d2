/* Timing of plan executions for the CLI and the tuner (internal API). */
#ifndef FJ_PLAN_TIMING_H
#define FJ_PLAN_TIMING_H

#include "flashjit.h"

/* Runs the plan `warmup` times, then `repeat` times, each timed on its own:
 * ms[i] for run i. CUDA: device events around each launch (the backend's
 * time_runs); CPU: the monotonic clock around each (synchronous) execute. */
fj_status fj_plan_time(const fj_plan *p, const void *q, const void *k, const void *v, void *o,
                       float *lse, int warmup, int repeat, double *ms);

/* The same with the execute's extra inputs (ALiBi slopes, sinks, varlen
 * sequences; NULL: none), checked as fj_plan_execute_ex checks them. */
fj_status fj_plan_time_ex(const fj_plan *p, const void *q, const void *k, const void *v, void *o,
                          float *lse, const fj_execute_extras *x, int warmup, int repeat,
                          double *ms);

/* Kernel launches per execute (0 on the CPU backends). */
int fj_plan_launches(const fj_plan *p);

#endif
