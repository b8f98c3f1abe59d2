/* The context's cache of plans for the one-shot fj_attention(): one plan per
 * distinct (problem, stream), at most FJ_PLAN_CACHE_MAX, least recently used
 * evicted (only when no thread is executing it). Per stream because a
 * split-KV plan's workspace must not be used by overlapping executes: calls
 * on one stream are ordered, calls on different streams get different plans
 * (the kernels themselves are shared through the context's module cache). */
#ifndef FJ_PLAN_CACHE_H
#define FJ_PLAN_CACHE_H

#include "context.h"

#define FJ_PLAN_CACHE_MAX 64

/* A plan for the problem on this stream, created on a miss, held for the
 * caller until fj_plan_cache_release. */
fj_status fj_plan_cache_acquire(fj_context *ctx, const fj_attention_desc *d, const void *stream,
                                const fj_plan **out, void **handle);
void fj_plan_cache_release(fj_context *ctx, void *handle);

/* Destroys every cached plan (context teardown). */
void fj_plan_cache_clear(fj_context *ctx);

#endif
