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

fj_status fj_plan_time_ex(const fj_plan *p, const void *q, const void *k, const void *v, void *o,
                          float *lse, const fj_execute_extras *x, int warmup, int repeat,
                          double *ms)
{
    fj_clear_error();
    if (!p || !ms || warmup < 0 || repeat < 1)
        return fj_fail(FJ_ERR_INVALID_ARGUMENT, "fj_plan_time: bad plan, ms, warmup or repeat");
    fj_exec_inputs in;
    fj_status s = fj_check_extras(&p->problem, x, &in);
    if (s) return s;
    /* a backend's own timing runs dense problems (ALiBi's and the sinks'
       arrays go with it; CUDA refuses varlen and paged ones) */
    if (p->ops->time_runs && !p->problem.varlen && !p->problem.paged)
        return p->ops->time_runs(p->state, &p->problem, q, k, v, o, lse, &in, warmup, repeat, ms);
    for (int i = 0; i < warmup; i++)
        if ((s = fj_plan_execute_ex(p, q, k, v, o, lse, x, NULL))) return s;
    for (int i = 0; i < repeat; i++) {
        double t0 = now_ms();
        if ((s = fj_plan_execute_ex(p, q, k, v, o, lse, x, NULL))) return s;
        if ((s = fj_synchronize(p->ctx, NULL))) return s;
        ms[i] = now_ms() - t0;
    }
    return FJ_OK;
}

fj_status fj_plan_time(const fj_plan *p, const void *q, const void *k, const void *v, void *o,
                       float *lse, int warmup, int repeat, double *ms)
{
    return fj_plan_time_ex(p, q, k, v, o, lse, NULL, warmup, repeat, ms);
}

int fj_plan_launches(const fj_plan *p)
{
    return p && p->ops->launches ? p->ops->launches(p->state) : 0;
}
