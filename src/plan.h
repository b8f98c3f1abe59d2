/* The plan object, shared by plan.c and plan_cache.c. */
#ifndef FJ_PLAN_H
#define FJ_PLAN_H

#include "backend.h"
#include "context.h"
#include "problem.h"

struct fj_plan {
    fj_context *ctx;
    const fj_backend_ops *ops;
    fj_problem problem;
    void *state; /* the backend's */
    char *describe;
};

/* fj_plan_create on an already validated problem; config as in
 * fj_backend_ops.plan_create (NULL: tuning file, shipped table, heuristic). */
fj_status fj_plan_create_problem(fj_context *ctx, const fj_problem *p, const char *config,
                                 fj_plan **out);

/* A plan for d with the given tiles ("m64n64w4s2" on CUDA, "q256k512" on
 * the CPU tiled backend; NULL: the tuning file, shipped table or heuristic),
 * never measuring: how the tuner makes its candidates and its default plan
 * (fj_plan_create_ex, which may measure, is the layer above it). */
fj_status fj_plan_create_config(fj_context *ctx, const fj_attention_desc *d, const char *config,
                                fj_plan **out);

/* FJ_ERR_INVALID_ARGUMENT naming the first of q, k, v, o that is NULL. */
fj_status fj_check_tensors(const void *q, const void *k, const void *v, const void *o);

/* Checks x (NULL: none) against p's features and fills *in: each array
 * non-NULL exactly when its feature is on, 4-byte aligned, reserved zero;
 * else FJ_ERR_INVALID_ARGUMENT naming the argument. */
fj_status fj_check_extras(const fj_problem *p, const fj_execute_extras *x, fj_exec_inputs *in);

#endif
