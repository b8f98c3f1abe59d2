#include "tune/measure.h"

#include <time.h>

#include "plan.h"
#include "status.h"

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

fj_status fj_plan_time(const fj_plan *p, const void *q, const void *k, const void *v, void *o,
                       float *lse, int warmup, int repeat, double *ms)
{
    fj_clear_error();
    if (!p || !ms || warmup < 0 || repeat < 1)
        return fj_fail(FJ_ERR_INVALID_ARGUMENT, "fj_plan_time: bad plan, ms, warmup or repeat");
    if (p->problem.alibi || p->problem.sinks)
        return fj_fail(FJ_ERR_UNSUPPORTED,
                       "fj_plan_time: the plan's problem has ALiBi or sinks, whose arrays it "
                       "cannot pass: time the problem without them (they share its tiles)");
    if (p->ops->time_runs)
        return p->ops->time_runs(p->state, &p->problem, q, k, v, o, lse, warmup, repeat, ms);
    fj_status s;
    for (int i = 0; i < warmup; i++)
        if ((s = fj_plan_execute(p, q, k, v, o, lse, NULL))) return s;
    for (int i = 0; i < repeat; i++) {
        double t0 = now_ms();
        if ((s = fj_plan_execute(p, q, k, v, o, lse, NULL))) return s;
        if ((s = fj_synchronize(p->ctx, NULL))) return s;
        ms[i] = now_ms() - t0;
    }
    return FJ_OK;
}

int fj_plan_launches(const fj_plan *p)
{
    return p && p->ops->launches ? p->ops->launches(p->state) : 0;
}
