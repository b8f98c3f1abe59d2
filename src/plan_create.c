/* The public ways to create a plan: fj_plan_create and fj_plan_create_ex,
 * whose options may ask for measuring (FJ_PLAN_MEASURE). They sit above both
 * the plan object (plan.c) and the tuner (src/tune/), which itself makes
 * plans through plan.c: measuring is a layer on top of plan creation, not a
 * part of it, so neither includes the other's caller. */
#include <string.h>

#include "plan.h"
#include "status.h"
#include "tune/plan_measure.h"

fj_status fj_plan_create(fj_context *ctx, const fj_attention_desc *d, fj_plan **out)
{
    return fj_plan_create_ex(ctx, d, NULL, out);
}

void fj_plan_options_init(fj_plan_options *o)
{
    if (o) memset(o, 0, sizeof *o);
}

fj_status fj_plan_create_ex(fj_context *ctx, const fj_attention_desc *d, const fj_plan_options *o,
                            fj_plan **out)
{
    fj_clear_error();
    if (!out) return fj_fail(FJ_ERR_INVALID_ARGUMENT, "out (the fj_plan ** to fill) is NULL");
    *out = NULL;
    if (!ctx) return fj_fail(FJ_ERR_INVALID_ARGUMENT, "ctx is NULL");
    fj_problem p;
    fj_status s = fj_problem_init(&p, d);
    if (s) return s;
    for (int i = 0; o && i < (int)(sizeof o->reserved / sizeof o->reserved[0]); i++)
        if (o->reserved[i])
            return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                           "fj_plan_options.reserved[%d] (%d) must be zero: fill the options "
                           "with fj_plan_options_init, then set their fields by name",
                           i, o->reserved[i]);
    const unsigned known = FJ_PLAN_MEASURE | FJ_PLAN_SAVE_TUNING;
    if (o && (o->flags & ~known))
        return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                       "fj_plan_options.flags (0x%x) has bits other than FJ_PLAN_MEASURE and "
                       "FJ_PLAN_SAVE_TUNING",
                       o->flags);
    if (o && !(o->time_limit >= 0))
        return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                       "fj_plan_options.time_limit (%g) must be >= 0 (0: no limit)", o->time_limit);
    if (o && (o->flags & FJ_PLAN_SAVE_TUNING) && !(o->flags & FJ_PLAN_MEASURE))
        return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                       "fj_plan_options.flags: FJ_PLAN_SAVE_TUNING saves what FJ_PLAN_MEASURE "
                       "measures, and FJ_PLAN_MEASURE is not set");
    if (o && (o->flags & FJ_PLAN_MEASURE) && !o->tiles && (s = fj_plan_measure(ctx, d, o)))
        return s;
    return fj_plan_create_problem(ctx, &p, o ? o->tiles : NULL, out);
}
