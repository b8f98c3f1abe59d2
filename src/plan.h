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

/* fj_plan_create on an already validated problem. */
fj_status fj_plan_create_problem(fj_context *ctx, const fj_problem *p, fj_plan **out);

#endif
