/* CUDA plans (cuda_plan.c): whether the backend takes a problem, choosing and
 * loading the kernel, launching it. The backend's registry row
 * (cuda_backend.c) puts these in its ops table. */
#ifndef FJ_CUDA_PLAN_H
#define FJ_CUDA_PLAN_H

#include "context.h"
#include "cuda/jit/kernel_desc.h"
#include "problem.h"
#include "strbuf.h"

/* FJ_OK when some CUDA kernel computes p on this device (dtype, head dim,
 * strides, grid limits); else FJ_ERR_UNSUPPORTED naming the rule. */
fj_status fj_cuda_supports(const fj_context *ctx, const fj_problem *p);

fj_status fj_cuda_plan_create(fj_context *ctx, const fj_problem *p, const char *config,
                              void **state, fj_strbuf *describe);
fj_status fj_cuda_execute(const void *state, const fj_problem *p, const void *q, const void *k,
                          const void *v, void *o, float *lse, const fj_exec_inputs *in,
                          void *stream);
void fj_cuda_plan_destroy(void *state);
fj_status fj_cuda_time_runs(const void *state, const fj_problem *p, const void *q, const void *k,
                            const void *v, void *o, float *lse, const fj_exec_inputs *in,
                            int warmup, int repeat, double *ms);
int fj_cuda_launches(const void *state);

/* The plan's fields of fj_plan_info. */
void fj_cuda_plan_info(const void *state, fj_plan_info *out);

#endif
