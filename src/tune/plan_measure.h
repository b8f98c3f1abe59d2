/* FJ_PLAN_MEASURE for plan creation (src/plan.c). */
#ifndef FJ_PLAN_MEASURE_H
#define FJ_PLAN_MEASURE_H

#include "flashjit.h"

/* When ctx's tuning has no entry for d's point and its backend tunes: runs
 * the tuner on d and adds the winner to ctx's tuning (and, with
 * FJ_PLAN_SAVE_TUNING, appends it to ctx's tuning file). d is valid. */
fj_status fj_plan_measure(fj_context *ctx, const fj_attention_desc *d, const fj_plan_options *o);

#endif
