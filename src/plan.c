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
    /* variable-length batches and paged KV caches: the backend's own ops
       for them, which run each sequence as a problem of its own */
    plan->ops = p->varlen || p->paged ? ctx->entry->sequence_ops : ctx->entry->ops;
    plan->problem = *p;
    fj_strbuf d;
    fj_strbuf_init(&d);
    char shape[256];
    fj_problem_format(p, shape, sizeof shape);
    fj_strbuf_printf(&d, "problem: %s\n", shape);
    fj_status s = ctx->entry->supports(ctx, p);
    if (s == FJ_OK && !plan->ops)
        s = fj_fail(FJ_ERR_UNSUPPORTED, "%s: %s not supported by this backend", ctx->entry->name,
                    p->paged ? "a paged KV cache (FJ_FEATURE_PAGED_KV) is"
                             : "variable-length batches (FJ_FEATURE_VARLEN) are");
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

/* The varlen and paged fields of x against p: the arrays and counts given
   exactly when p's features take them (seqused_k optional with varlen
   alone, required with paged; cu_seqlens_k and total_k not with paged,
   whose keys are in the pages), aligned, the counts >= 0 and the buffers
   they size addressable. Their values are the backend's to check (they lie
   in its memory). */
static fj_status check_varlen(const fj_problem *p, const fj_exec_inputs *in)
{
    const char *both = "FJ_FEATURE_VARLEN or FJ_FEATURE_PAGED_KV";
    struct {
        const char *name;
        const int32_t *a;
        bool used, required; /* the features take it; they need it */
        const char *flag, *size;
        int extra; /* entries beyond batch */
    } f[4] = {
        {"cu_seqlens_q", in->cu_seqlens_q, p->varlen, p->varlen, "FJ_FEATURE_VARLEN", "batch + 1",
         1},
        {"cu_seqlens_k", in->cu_seqlens_k, p->varlen && !p->paged, p->varlen && !p->paged,
         "FJ_FEATURE_VARLEN", "batch + 1", 1},
        {"seqused_k", in->seqused_k, p->varlen || p->paged, p->paged,
         p->paged ? "FJ_FEATURE_PAGED_KV" : both, "batch", 0},
        {"block_table", in->block_table, p->paged, p->paged, "FJ_FEATURE_PAGED_KV",
         "batch x block_table_stride", 0},
    };
    for (int i = 0; i < 4; i++) {
        if (!f[i].used && f[i].a) {
            if (p->paged && i == 1)
                return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                               "cu_seqlens_k is given but the desc's features have "
                               "FJ_FEATURE_PAGED_KV: the keys are in the pages the block_table "
                               "names and seqused_k counts them; leave it NULL");
            return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                           "%s is given but the desc's features lack %s (it would be ignored)",
                           f[i].name, f[i].flag);
        }
        if (f[i].required && !f[i].a) {
            if (i == 3)
                return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                               "block_table is NULL: the desc's features have "
                               "FJ_FEATURE_PAGED_KV, so the execute needs int32 [batch = %d, "
                               "block_table_stride = %d] in fj_execute_extras.block_table "
                               "(fj_plan_execute_ex, fj_attention_ex)",
                               p->batch, p->bt_stride);
            return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                           "%s is NULL: the desc's features have %s, so the execute needs "
                           "int32 [%s = %lld] in fj_execute_extras.%s%s (fj_plan_execute_ex, "
                           "fj_attention_ex)",
                           f[i].name, f[i].flag, f[i].size, (long long)p->batch + f[i].extra,
                           f[i].name, i == 2 ? ", each sequence's KV length" : "");
        }
        if (f[i].a && ((uintptr_t)f[i].a & 3))
            return fj_fail(FJ_ERR_INVALID_ARGUMENT, "%s (%p) is not aligned to 4 bytes", f[i].name,
                           (const void *)f[i].a);
    }
    struct {
        const char *name;
        int32_t v;
    } t[2] = {{"total_q", in->total_q}, {"total_k", in->total_k}};
    for (int i = 0; i < 2; i++) {
        if (p->paged && i == 1 && t[i].v)
            return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                           "total_k (%d) is given but the desc's features have "
                           "FJ_FEATURE_PAGED_KV: k and v are the page pools (num_pages); leave "
                           "it 0",
                           (int)t[i].v);
        if (!p->varlen && t[i].v)
            return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                           "%s (%d) is given but the desc's features lack FJ_FEATURE_VARLEN (it "
                           "would be ignored): leave it 0",
                           t[i].name, (int)t[i].v);
        if (t[i].v < 0)
            return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                           "%s (%d) must be >= 0: the tokens the buffers hold", t[i].name,
                           (int)t[i].v);
    }
    return p->varlen ? fj_problem_varlen_extents(p, in->total_q, in->total_k) : FJ_OK;
}

fj_status fj_check_extras(const fj_problem *p, const fj_execute_extras *x, fj_exec_inputs *in)
{
    memset(in, 0, sizeof *in);
    if (x) {
        in->alibi_slopes = x->alibi_slopes;
        in->sinks = x->sinks;
        in->cu_seqlens_q = x->cu_seqlens_q;
        in->cu_seqlens_k = x->cu_seqlens_k;
        in->seqused_k = x->seqused_k;
        in->total_q = x->total_q;
        in->total_k = x->total_k;
        in->block_table = x->block_table;
    }
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
    return check_varlen(p, in);
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
