/* One-shot plan cache, and fj_attention, the call it serves. Plans are created outside the lock (creation can
 * compile a kernel for seconds); a plan is evicted only while no caller holds
 * it, so a plan never disappears under a running execute. */
#include "plan_cache.h"

#include <stdlib.h>
#include <string.h>

#include "plan.h"
#include "status.h"

struct fj_plan_cache_entry {
    fj_problem key; /* zero-initialized by fj_problem_init, so memcmp is exact */
    const void *stream;
    fj_plan *plan;
    int users;
    uint64_t last_use;
    struct fj_plan_cache_entry *next;
};

static struct fj_plan_cache_entry *find(fj_context *ctx, const fj_problem *key, const void *stream)
{
    for (struct fj_plan_cache_entry *e = ctx->plans; e; e = e->next)
        if (e->stream == stream && !memcmp(&e->key, key, sizeof *key)) return e;
    return NULL;
}

/* Unlinks the least recently used idle entry when over the limit; returns it. */
static struct fj_plan_cache_entry *evict_one(fj_context *ctx)
{
    int n = 0;
    for (struct fj_plan_cache_entry *e = ctx->plans; e; e = e->next) n++;
    if (n <= FJ_PLAN_CACHE_MAX) return NULL;
    struct fj_plan_cache_entry **victim = NULL;
    for (struct fj_plan_cache_entry **pe = &ctx->plans; *pe; pe = &(*pe)->next)
        if ((*pe)->users == 0 && (!victim || (*pe)->last_use < (*victim)->last_use)) victim = pe;
    if (!victim) return NULL;
    struct fj_plan_cache_entry *e = *victim;
    *victim = e->next;
    return e;
}

fj_status fj_plan_cache_acquire(fj_context *ctx, const fj_attention_desc *d, const void *stream,
                                const fj_plan **out, void **handle)
{
    *out = NULL;
    *handle = NULL;
    fj_problem key;
    fj_status s = fj_problem_init(&key, d);
    if (s) return s;

    pthread_mutex_lock(&ctx->plan_lock);
    struct fj_plan_cache_entry *e = find(ctx, &key, stream);
    if (e) {
        e->users++;
        e->last_use = ++ctx->plan_clock;
    }
    pthread_mutex_unlock(&ctx->plan_lock);
    if (!e) {
        struct fj_plan_cache_entry *fresh = calloc(1, sizeof *fresh);
        if (!fresh) return fj_fail(FJ_ERR_OUT_OF_MEMORY, "out of memory caching a plan");
        if ((s = fj_plan_create_problem(ctx, &key, NULL, &fresh->plan))) {
            free(fresh);
            return s;
        }
        fresh->key = key;
        fresh->stream = stream;
        struct fj_plan_cache_entry *evicted = NULL;
        pthread_mutex_lock(&ctx->plan_lock);
        e = find(ctx, &key, stream); /* another thread may have made the same plan meanwhile */
        if (!e) {
            e = fresh;
            e->next = ctx->plans;
            ctx->plans = e;
            fresh = NULL;
        }
        e->users++;
        e->last_use = ++ctx->plan_clock;
        evicted = evict_one(ctx);
        pthread_mutex_unlock(&ctx->plan_lock);
        if (fresh) {
            fj_plan_destroy(fresh->plan);
            free(fresh);
        }
        if (evicted) {
            fj_plan_destroy(evicted->plan);
            free(evicted);
        }
    }
    *out = e->plan;
    *handle = e;
    return FJ_OK;
}

void fj_plan_cache_release(fj_context *ctx, void *handle)
{
    struct fj_plan_cache_entry *e = handle;
    pthread_mutex_lock(&ctx->plan_lock);
    e->users--;
    pthread_mutex_unlock(&ctx->plan_lock);
}

void fj_plan_cache_clear(fj_context *ctx)
{
    struct fj_plan_cache_entry *e = ctx->plans;
    ctx->plans = NULL;
    while (e) {
        struct fj_plan_cache_entry *next = e->next;
        fj_plan_destroy(e->plan);
        free(e);
        e = next;
    }
}

fj_status fj_attention(fj_context *ctx, const fj_attention_desc *d, const void *q, const void *k,
                       const void *v, void *o, float *lse, void *stream)
{
    return fj_attention_ex(ctx, d, q, k, v, o, lse, NULL, stream);
}

fj_status fj_attention_ex(fj_context *ctx, const fj_attention_desc *d, const void *q, const void *k,
                          const void *v, void *o, float *lse, const fj_execute_extras *x,
                          void *stream)
{
    fj_clear_error();
    if (!ctx) return fj_fail(FJ_ERR_INVALID_ARGUMENT, "ctx is NULL");
    fj_status s = fj_check_tensors(q, k, v, o);
    if (s) return s;
    const fj_plan *plan;
    void *handle;
    if ((s = fj_plan_cache_acquire(ctx, d, stream, &plan, &handle))) return s;
    fj_exec_inputs in;
    if (!(s = fj_check_extras(&plan->problem, x, &in)))
        s = plan->ops->execute(plan->state, &plan->problem, q, k, v, o, lse, &in, stream);
    fj_plan_cache_release(ctx, handle);
    return s;
}
