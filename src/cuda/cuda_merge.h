/* fj_merge on CUDA (cuda_merge.c): the backend's merge op, in its ops table
 * (cuda_backend.c). */
#ifndef FJ_CUDA_MERGE_H
#define FJ_CUDA_MERGE_H

#include "context.h"
#include "problem.h"

/* One launch of the dtype's merge kernel on stream (asynchronous); the
 * context's first merge of a dtype builds or loads the kernel. */
fj_status fj_cuda_merge(fj_context *ctx, const fj_merge_problem *m, const void *o_a,
                        const float *lse_a, const void *o_b, const float *lse_b, void *o,
                        float *lse, void *stream);

#endif
