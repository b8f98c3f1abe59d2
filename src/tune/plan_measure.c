/* FJ_PLAN_MEASURE (include/flashjit.h): before a plan is made, the tuner runs
 * on its problem when the context's tuning has no entry for the point, and
 * the winner becomes a "measured" entry of the context's tuning, which the
 * plan's lookup then finds. Measurements of one context take turns: two
 * timing at once would each measure the other's load. */
#include <string.h>

#include "tune/plan_measure.h"

#include "context.h"
#include "log.h"
#include "problem.h"
#include "status.h"
#include "tune/tuner.h"
#include "tune/tuning.h"

/* A wrong candidate is a bug in flashjit, but not this plan's failure: it
 * is never chosen, and the log says so. */
static void log_wrong(void *user, const fj_tune_kernel *k)
{
    (void)user;
    if (k->verdict == FJ_TUNE_WRONG)
        FJ_INFO("measure: candidate %s for d%d %s %s gives WRONG results (%s); not used, please "
                "report it",
                k->tiles, k->head_dim, fj_dtype_name(k->dtype), fj_causal_name(k->causal),
                k->reason);
}

static fj_status measure(fj_context *ctx, const fj_attention_desc *desc, const fj_plan_options *o)
{
    /* ALiBi and sinks are data of each execute, and their problems share
       the plain problem's point and tiles: measure the plain problem. A
       varlen batch runs each sequence through a plan for one sequence of
       the longest lengths (src/cpu/varlen.c): measure that one (its batch
       strides are 0, which with batch 1 is the same tensor). A paged one
       too, its keys a dense [seqlen_k, heads_kv, head_dim] tensor (the
       copy out of the pages, src/cpu/paged.c): its k and v strides are
       the dense ones. head_dim_v stays: V's rows are part of what is
       timed, though the point (head_dim's) is shared with the problem of
       V rows of head_dim. */
    fj_attention_desc plain = *desc;
    if (plain.features & (FJ_FEATURE_VARLEN | FJ_FEATURE_PAGED_KV)) plain.batch = 1;
    if (plain.features & FJ_FEATURE_PAGED_KV) {
        plain.page_size = plain.num_pages = plain.max_pages = plain.block_table_stride = 0;
        memset(plain.k_stride, 0, sizeof plain.k_stride);
        memset(plain.v_stride, 0, sizeof plain.v_stride);
    }
    plain.features = 0;
    const fj_attention_desc *d = &plain;
    fj_tune_observer obs = {.checked = log_wrong};
    fj_tuner_options to;
    fj_tuner_options_init(&to);
    to.time_limit = o->time_limit;
    to.observer = &obs;
    fj_tuner *t;
    fj_status s = fj_tuner_create(ctx, &to, &t);
    if (s) return s;
    fj_tune_build_summary built;
    fj_tune_result r;
    s = fj_tuner_build(t, d, 1, &built);
    if (!s) s = fj_tuner_tune(t, d, &r);
    fj_tuner_destroy(t);
    if (s) return fj_fail_prefix(s, "measuring the candidates");
    if (!r.have_best) {
        FJ_INFO("measure %s: no candidate could be timed (%d pruned, %d wrong); the plan "
                "chooses as without measuring",
                r.problem, r.pruned, r.wrong);
        return FJ_OK;
    }
    FJ_INFO("measure %s: %s, %.4g ms (default %s, %.4g ms%s); %d candidates timed, %d pruned, "
            "%d the same blocks as another, %d wrong, %d past the time limit",
            r.problem, r.best, r.best_t.median, r.have_default ? r.def : "-",
            r.def_timed ? r.def_t.median : 0.0, r.default_won ? ", kept: it won head to head" : "",
            r.timed, r.pruned, r.duplicates, r.wrong, r.out_of_time);
    if ((s = fj_tuning_add(ctx->tuning, &r.entry))) return s;
    if (o->flags & FJ_PLAN_SAVE_TUNING) return fj_tuning_append(ctx->tuning_file, &r.entry);
    return FJ_OK;
}

fj_status fj_plan_measure(fj_context *ctx, const fj_attention_desc *d, const fj_plan_options *o)
{
    if (!fj_backend_tuning_of(ctx)) return FJ_OK; /* nothing to measure (the reference) */
    fj_status s;
    if (o->flags & FJ_PLAN_SAVE_TUNING) {
        if (!ctx->tuning_file)
            return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                           "FJ_PLAN_SAVE_TUNING: the context has no tuning file to save to "
                           "(fj_context_options.tuning_file, FLASHJIT_TUNING_FILE, or a cache "
                           "directory)");
        /* Before minutes of measuring, not after. */
        if ((s = fj_tuning_file_check(ctx->tuning_file, NULL, NULL)))
            return fj_fail_prefix(s, "FJ_PLAN_SAVE_TUNING");
    }
    fj_tuning_target tg;
    fj_problem p;
    if ((s = fj_tuning_target_of(ctx, &tg)) || (s = fj_problem_init(&p, d))) return s;
    fj_tuning_entry key;
    fj_tuning_key_for(&p, tg.device, tg.arch, tg.template_name, &key);
    if (fj_tuning_find_in(ctx->tuning, &key)) return FJ_OK;
    fj_tuning_measure_lock(ctx->tuning);
    /* Another thread may have measured the point while this one waited. */
    if (!fj_tuning_find_in(ctx->tuning, &key)) s = measure(ctx, d, o);
    fj_tuning_measure_unlock(ctx->tuning);
    return s;
}
