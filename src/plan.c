/* Plans: the one place decisions are made. Creation validates, lets the
 * backend choose and build its kernel; execute only checks pointers and runs. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "plan.h"
#include "status.h"

fj_status fj_plan_create_problem(fj_context *ctx, const fj_problem *p, const char *config,
                                 fj_plan **out)
{
    *out = NULL;
    fj_plan *plan = calloc(1, sizeof *plan);
    if (!plan) return fj_fail(FJ_ERR_OUT_OF_MEMORY, "out of memory creating a plan");
    plan->ctx = ctx;
    plan->ops = ctx->entry->ops;
    plan->problem = *p;
    fj_strbuf d;
    fj_strbuf_init(&d);
    char shape[256];
    fj_problem_format(p, shape, sizeof shape);
    fj_strbuf_printf(&d, "problem: %s\n", shape);
    fj_status s = ctx->entry->supports(ctx, p);
    if (s == FJ_OK) s = plan->ops->plan_create(ctx, p, config, &plan->state, &d);
    if (s == FJ_OK && !(plan->describe = fj_strbuf_take(&d)))
        s = fj_fail(FJ_ERR_OUT_OF_MEMORY, "out of memory describing a plan");
    fj_strbuf_free(&d);
    if (s) {
        fj_plan_destroy(plan);
        return s;
    }
    FJ_DEBUG("plan created: %s on %s", shape, plan->ops->name);
    *out = plan;
    return FJ_OK;
}

fj_status fj_plan_create_config(fj_context *ctx, const fj_attention_desc *d, const char *config,
                                fj_plan **out)
{
    fj_clear_error();
    if (!out) return fj_fail(FJ_ERR_INVALID_ARGUMENT, "out (the fj_plan ** to fill) is NULL");
    *out = NULL;
    if (!ctx) return fj_fail(FJ_ERR_INVALID_ARGUMENT, "ctx is NULL");
    fj_problem p;
    fj_status s = fj_problem_init(&p, d);
    if (s) return s;
    return fj_plan_create_problem(ctx, &p, config, out);
}

fj_status fj_check_tensors(const void *q, const void *k, const void *v, const void *o)
{
    const char *missing = !q ? "q" : !k ? "k" : !v ? "v" : !o ? "o" : NULL;
    if (missing) return fj_fail(FJ_ERR_INVALID_ARGUMENT, "%s is NULL", missing);
    return FJ_OK;
}

void fj_execute_extras_init(fj_execute_extras *x)
{
    if (x) memset(x, 0, sizeof *x);
}

fj_status fj_check_extras(const fj_problem *p, const fj_execute_extras *x, fj_exec_inputs *in)
{
    in->alibi_slopes = x ? x->alibi_slopes : NULL;
    in->sinks = x ? x->sinks : NULL;
    for (int i = 0; x && i < (int)(sizeof x->reserved / sizeof x->reserved[0]); i++)
        if (x->reserved[i])
            return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                           "fj_execute_extras.reserved[%d] (%lld) must be zero: fill it with "
                           "fj_execute_extras_init, then set its fields by name",
                           i, (long long)x->reserved[i]);
    struct {
        const char *name, *flag;
        bool on;
        const float *a;
    } f[2] = {
        {"alibi_slopes", "FJ_FEATURE_ALIBI", p->alibi, in->alibi_slopes},
        {"sinks", "FJ_FEATURE_SINKS", p->sinks, in->sinks},
    };
    for (int i = 0; i < 2; i++) {
        if (f[i].on && !f[i].a)
            return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                           "%s is NULL: the desc's features have %s, so the execute needs "
                           "float32 [heads_q = %d] in fj_execute_extras.%s "
                           "(fj_plan_execute_ex, fj_attention_ex)",
                           f[i].name, f[i].flag, p->heads_q, f[i].name);
        if (!f[i].on && f[i].a)
            return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                           "%s is given but the desc's features lack %s (it would be ignored)",
                           f[i].name, f[i].flag);
        if (f[i].a && ((uintptr_t)f[i].a & 3))
            return fj_fail(FJ_ERR_INVALID_ARGUMENT, "%s (%p) is not aligned to 4 bytes", f[i].name,
                           (const void *)f[i].a);
    }
    return FJ_OK;
}

fj_status fj_plan_execute_ex(const fj_plan *p, const void *q, const void *k, const void *v, void *o,
                             float *lse, const fj_execute_extras *x, void *stream)
{
    fj_clear_error();
    if (!p) return fj_fail(FJ_ERR_INVALID_ARGUMENT, "plan is NULL");
    fj_status s = fj_check_tensors(q, k, v, o);
    if (s) return s;
    fj_exec_inputs in;
    if ((s = fj_check_extras(&p->problem, x, &in))) return s;
    return p->ops->execute(p->state, &p->problem, q, k, v, o, lse, &in, stream);
}

fj_status fj_plan_execute(const fj_plan *p, const void *q, const void *k, const void *v, void *o,
                          float *lse, void *stream)
{
    return fj_plan_execute_ex(p, q, k, v, o, lse, NULL, stream);
}

const char *fj_plan_describe(const fj_plan *p) { return p && p->describe ? p->describe : ""; }

const char *fj_tiles_source_name(fj_tiles_source s)
{
    switch (s) {
    case FJ_TILES_HEURISTIC: return "heuristic";
    case FJ_TILES_TUNING_FILE: return "tuning file";
    case FJ_TILES_SHIPPED_TABLE: return "shipped table";
    case FJ_TILES_GIVEN: return "given";
    case FJ_TILES_FORCED: return "forced";
    case FJ_TILES_IMPORTED: return "imported";
    case FJ_TILES_MEASURED: return "measured";
    }
    return NULL;
}

fj_status fj_plan_get_info(const fj_plan *p, fj_plan_info *info)
{
    fj_clear_error();
    if (!p || !info)
        return fj_fail(FJ_ERR_INVALID_ARGUMENT, "fj_plan_get_info: %s is NULL",
                       p ? "info" : "plan");
    memset(info, 0, sizeof *info);
    info->backend = p->ops->kind;
    info->splits = 1;
    info->launches = p->ops->launches ? p->ops->launches(p->state) : 0;
    if (p->ops->info) p->ops->info(p->state, info);
    return FJ_OK;
}

void fj_plan_destroy(fj_plan *p)
{
    if (!p) return;
    if (p->state) p->ops->plan_destroy(p->state);
    free(p->describe);
    free(p);
}
