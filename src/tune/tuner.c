/* The tuner (src/tune/tuner.h): per problem, the default plan and each
 * candidate checked against the CPU reference (src/tune/check.c, once per
 * kernel), timed on rotating input sets (src/tune/timing.c), and the fastest
 * raced against the default run for run. Backend specifics come from the
 * registry's tuning row: its candidates, how its tiles parse, building
 * ahead. */
#include "tune/tuner.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "context.h"
#include "plan.h"
#include "problem.h"
#include "status.h"
#include "tune/check.h"

/* Input sets never take more than this, nor a quarter of the GPU. */
#define CUDA_INPUT_BYTES ((size_t)4 << 30)
#define CPU_INPUT_BYTES ((size_t)1 << 30)
/* A candidate whose first run is this many times the best median so far
 * gets only a few runs. */
#define CUT_FACTOR 3.0
#define INPUT_SEED 0x5eedull
/* A CUDA run is a few ms, a CPU one up to a few hundred: repeats that give a
 * stable median in about the same time. */
#define CUDA_REPEAT 25
#define CUDA_WARMUP 5
#define CPU_REPEAT 5
#define CPU_WARMUP 1

struct fj_tuner {
    fj_context *ctx, *ref;
    const fj_backend_tuning *row;
    fj_tuner_settings set;
    double time_limit;
    fj_tune_observer obs;
    fj_tune_kernels kernels;
    fj_tune_checker checker;
    fj_tune_inputs inputs;
    char (*tile_text)[FJ_TUNE_TILES_LEN]; /* the candidates, copied */
    const char **tile_list;
};

void fj_tuner_options_init(fj_tuner_options *o)
{
    memset(o, 0, sizeof *o);
    o->warmup = -1;
}

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- setting up ------------------------------------------------------------------ */

/* The candidates, each parsed by the backend; the largest block of any. */
static fj_status resolve_tiles(fj_tuner *t, const fj_tuner_options *o, int *largest)
{
    const char *const *list = o->tiles ? o->tiles : t->row->candidates;
    int n = o->tiles ? o->n_tiles : 0;
    if (!o->tiles)
        while (list[n]) n++;
    *largest = 16;
    for (int i = 0; i < n; i++) {
        int rows, keys;
        if (strlen(list[i]) >= FJ_TUNE_TILES_LEN || t->row->tiles_parse(list[i], &rows, &keys))
            return fj_fail(FJ_ERR_INVALID_ARGUMENT, "'%s' is not %s tiles (%s)", list[i],
                           fj_backend_name(t->set.target.backend), t->row->tiles_grammar);
        if (rows > *largest) *largest = rows;
        if (keys > *largest) *largest = keys;
    }
    /* Copied: the caller's list need not outlive the tuner. */
    t->tile_text = calloc((size_t)n + 1, sizeof *t->tile_text);
    t->tile_list = calloc((size_t)n + 1, sizeof *t->tile_list);
    if (!t->tile_text || !t->tile_list)
        return fj_fail(FJ_ERR_OUT_OF_MEMORY, "out of host memory for the candidates");
    for (int i = 0; i < n; i++) {
        snprintf(t->tile_text[i], FJ_TUNE_TILES_LEN, "%s", list[i]);
        t->tile_list[i] = t->tile_text[i];
    }
    t->set.tiles = t->tile_list;
    t->set.n_tiles = n;
    return FJ_OK;
}

fj_status fj_tuner_create(fj_context *ctx, const fj_tuner_options *o, fj_tuner **out)
{
    *out = NULL;
    fj_tuner_options defaults;
    if (!o) {
        fj_tuner_options_init(&defaults);
        o = &defaults;
    }
    fj_tuner *t = calloc(1, sizeof *t);
    if (!t) return fj_fail(FJ_ERR_OUT_OF_MEMORY, "out of host memory for the tuner");
    t->ctx = ctx;
    t->time_limit = o->time_limit;
    if (o->observer) t->obs = *o->observer;
    fj_status s = fj_tuning_target_of(ctx, &t->set.target);
    int largest = 0;
    if (!s) {
        t->row = fj_backend_tuning_of(ctx);
        s = resolve_tiles(t, o, &largest);
    }
    if (s) {
        free(t->tile_text);
        free(t->tile_list);
        free(t);
        return s;
    }
    bool cuda = t->set.target.backend == FJ_BACKEND_CUDA;
    t->set.repeat = o->repeat > 0 ? o->repeat : cuda ? CUDA_REPEAT : CPU_REPEAT;
    t->set.warmup = o->warmup >= 0 ? o->warmup : cuda ? CUDA_WARMUP : CPU_WARMUP;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    t->set.jobs = o->jobs > 0 ? o->jobs : cores > 0 ? (int)cores : 1;

    fj_context_options ro;
    fj_context_options_init(&ro);
    ro.backend = FJ_BACKEND_CPU_REFERENCE;
    ro.cache_dir = "";
    ro.tuning_file = "";
    if ((s = fj_context_create(&ro, &t->ref))) {
        fj_status keep = fj_fail_prefix(s, "the tuner's CPU reference");
        free(t->tile_text);
        free(t->tile_list);
        free(t);
        return keep;
    }
    fj_tune_checker_init(&t->checker, ctx, t->ref, largest);
    t->set.check_seqlen_q = t->checker.seqlen_q;
    t->set.check_seqlen_k = t->checker.seqlen_k;
    t->set.cache_dir = ctx->cache_dir;
    *out = t;
    return FJ_OK;
}

void fj_tuner_destroy(fj_tuner *t)
{
    if (!t) return;
    fj_tune_inputs_free(&t->inputs);
    fj_tune_checker_free(&t->checker);
    fj_tune_kernels_free(&t->kernels);
    fj_context_destroy(t->ref);
    free(t->tile_text);
    free(t->tile_list);
    free(t);
}

const fj_tuner_settings *fj_tuner_get_settings(const fj_tuner *t) { return &t->set; }
int fj_tuner_kernel_count(const fj_tuner *t) { return t->kernels.count; }

const fj_tune_kernel *fj_tuner_kernel_at(const fj_tuner *t, int i)
{
    return i >= 0 && i < t->kernels.count ? &t->kernels.k[i] : NULL;
}

fj_status fj_tuner_build(fj_tuner *t, const fj_attention_desc *problems, int n,
                         fj_tune_build_summary *out)
{
    memset(out, 0, sizeof *out);
    bool decode = false;
    for (int i = 0; i < n; i++) {
        decode |= problems[i].seqlen_q == 1;
        for (int c = 0; c < t->set.n_tiles; c++)
            if (!fj_tune_kernel_of(&t->kernels, &problems[i], t->set.tiles[c]))
                return fj_fail(FJ_ERR_OUT_OF_MEMORY, "out of host memory for the kernel table");
    }
    if (!t->row->build_ahead || !t->kernels.count) return FJ_OK;
    /* Decode problems' plans split the keys (split-KV): their variants too. */
    return t->row->build_ahead(&t->set.target, t->ctx->cache_dir, t->kernels.k, t->kernels.count,
                               t->set.jobs, decode, t->obs.build_step, t->obs.user, out);
}

/* ---- one problem ------------------------------------------------------------------ */

typedef struct point {
    fj_tuner *t;
    const fj_attention_desc *d;
    fj_tune_result *r;
    double work;     /* its FLOPs: a step's share of the time left */
    double deadline; /* now_seconds() past which no candidate starts; 0: none */
    /* The tiles each candidate's plan really ran (the CPU caps blocks to the
       problem's size), so candidates that coincide are timed once. */
    char (*effective)[FJ_TUNE_TILES_LEN];
    int neffective;
} point;

static void step(point *pt, const char *what)
{
    if (pt->t->obs.step) pt->t->obs.step(pt->t->obs.user, pt->work, what);
}

static void pruned(point *pt, const char *tiles, const char *reason)
{
    if (pt->t->obs.pruned) pt->t->obs.pruned(pt->t->obs.user, pt->r->problem, tiles, reason);
}

/* The verdict of tiles for the problem's kernel, checking it the first time. */
static fj_status verdict_of(point *pt, const char *tiles, fj_tune_verdict *v)
{
    fj_tuner *t = pt->t;
    fj_tune_kernel *k = fj_tune_kernel_of(&t->kernels, pt->d, tiles);
    if (!k) return fj_fail(FJ_ERR_OUT_OF_MEMORY, "out of host memory for the kernel table");
    if (k->verdict == FJ_TUNE_UNCHECKED) {
        fj_status s = fj_tune_check_kernel(&t->checker, k);
        if (s) return s;
        if (t->obs.checked) t->obs.checked(t->obs.user, k);
    }
    *v = k->verdict;
    return FJ_OK;
}

static fj_status plan_with(point *pt, const char *tiles, fj_plan **plan)
{
    return fj_plan_create_config(pt->t->ctx, pt->d, tiles, plan);
}

/* The plan the context makes for the problem without tiles, kept for the
 * final duel; *out NULL when it cannot be made or its kernel is wrong. */
static fj_status default_plan(point *pt, fj_plan **out)
{
    *out = NULL;
    fj_tune_result *r = pt->r;
    fj_plan *plan = NULL;
    fj_plan_info info;
    fj_status s = fj_plan_create_config(pt->t->ctx, pt->d, NULL, &plan);
    if (!s) s = fj_plan_get_info(plan, &info);
    if (s) {
        char reason[600];
        snprintf(reason, sizeof reason, "%s: %s", fj_status_name(s), fj_last_error());
        if (pt->t->obs.default_failed)
            pt->t->obs.default_failed(pt->t->obs.user, r->problem, reason);
        fj_plan_destroy(plan);
        return FJ_OK; /* the candidates may still run */
    }
    snprintf(r->def, sizeof r->def, "%s", info.tiles);
    r->def_from = info.tiles_source;
    fj_tune_verdict v = FJ_TUNE_UNCHECKED;
    if ((s = verdict_of(pt, r->def, &v)) || v != FJ_TUNE_CORRECT) {
        fj_plan_destroy(plan);
        return s;
    }
    r->have_default = true;
    *out = plan;
    return FJ_OK;
}

/* Whether an earlier candidate of this problem ran these tiles; records them. */
static bool seen_before(point *pt, const char *effective)
{
    for (int i = 0; i < pt->neffective; i++)
        if (!strcmp(pt->effective[i], effective)) return true;
    snprintf(pt->effective[pt->neffective++], FJ_TUNE_TILES_LEN, "%s", effective);
    return false;
}

static fj_status try_candidate(point *pt, const char *tiles)
{
    fj_tuner *t = pt->t;
    fj_tune_result *r = pt->r;
    char what[FJ_PROBLEM_KEY_MAX + FJ_TUNE_TILES_LEN + 2];
    snprintf(what, sizeof what, "%s %s", r->problem, tiles);
    step(pt, what);
    if (pt->deadline && now_seconds() > pt->deadline) {
        r->out_of_time++;
        return FJ_OK;
    }
    /* Pruned before (building ahead) or wrong on an earlier problem. */
    const fj_tune_kernel *k = fj_tune_kernel_of(&t->kernels, pt->d, tiles);
    if (!k) return fj_fail(FJ_ERR_OUT_OF_MEMORY, "out of host memory for the kernel table");
    if (k->verdict == FJ_TUNE_PRUNED || k->verdict == FJ_TUNE_WRONG) {
        if (k->verdict == FJ_TUNE_WRONG) r->wrong++;
        else r->pruned++;
        return FJ_OK;
    }
    fj_plan *plan = NULL;
    fj_plan_info info;
    fj_status s = plan_with(pt, tiles, &plan);
    if (!s) s = fj_plan_get_info(plan, &info);
    if (s == FJ_ERR_OUT_OF_MEMORY) {
        fj_plan_destroy(plan);
        return s;
    }
    if (s) {
        char reason[600];
        snprintf(reason, sizeof reason, "%s: %s", fj_status_name(s), fj_last_error());
        fj_plan_destroy(plan);
        pruned(pt, tiles, reason);
        r->pruned++;
        return FJ_OK;
    }
    if (seen_before(pt, info.tiles)) {
        fj_plan_destroy(plan);
        r->duplicates++;
        return FJ_OK;
    }
    fj_tune_verdict v = FJ_TUNE_UNCHECKED;
    if ((s = verdict_of(pt, tiles, &v)) || v != FJ_TUNE_CORRECT) {
        fj_plan_destroy(plan);
        if (v == FJ_TUNE_WRONG) r->wrong++;
        else if (!s) r->pruned++;
        return s;
    }
    if (info.local_bytes) {
        char reason[96];
        snprintf(reason, sizeof reason, "%d bytes of local memory per thread (spills)",
                 info.local_bytes);
        fj_plan_destroy(plan);
        pruned(pt, tiles, reason);
        r->pruned++;
        return FJ_OK;
    }
    fj_tune_timing tm;
    double cut = r->have_best ? CUT_FACTOR * r->best_t.median : 0;
    s = fj_tune_time_plan(plan, &t->inputs, t->set.warmup, t->set.repeat, cut, &tm);
    fj_plan_destroy(plan);
    if (s == FJ_ERR_OUT_OF_MEMORY) return s;
    if (s) {
        char reason[600];
        snprintf(reason, sizeof reason, "%s: %s", fj_status_name(s), fj_last_error());
        pruned(pt, tiles, reason);
        r->pruned++;
        return FJ_OK;
    }
    r->timed++;
    if (t->obs.timed) t->obs.timed(t->obs.user, r->problem, tiles, &tm);
    if (!r->have_best || tm.median < r->best_t.median) {
        snprintf(r->best, sizeof r->best, "%s", tiles);
        r->best_t = tm;
        r->have_best = true;
    }
    return FJ_OK;
}

/* The best candidate against the default, run for run: the selection's
 * timings come from runs at different moments, and a few percent of drift
 * must not read as a gain. The default is kept when it wins (it may run
 * what no candidate does, such as a shipped table's tiles). */
static fj_status final_duel(point *pt, const fj_plan *def)
{
    fj_tuner *t = pt->t;
    fj_tune_result *r = pt->r;
    step(pt, "default against the best");
    if (!def) return FJ_OK;
    fj_status s;
    if (!r->have_best) {
        s = fj_tune_time_plan(def, &t->inputs, t->set.warmup, t->set.repeat, 0, &r->def_t);
        if (s) return s;
    } else {
        fj_plan *best = NULL;
        if ((s = plan_with(pt, r->best, &best))) return s;
        s = fj_tune_time_duel(def, best, &t->inputs, t->set.warmup, t->set.repeat, &r->def_t,
                              &r->best_t);
        fj_plan_destroy(best);
        if (s) return s;
    }
    r->def_timed = true;
    if (!r->have_best || r->def_t.median < r->best_t.median) {
        r->default_won = r->have_best && strcmp(r->best, r->def);
        if (r->default_won) snprintf(r->beaten, sizeof r->beaten, "%s", r->best);
        snprintf(r->best, sizeof r->best, "%s", r->def);
        r->best_t = r->def_t;
        r->have_best = true;
    }
    return FJ_OK;
}

static size_t input_cap(const fj_tuner *t)
{
    bool cuda = t->set.target.backend == FJ_BACKEND_CUDA;
    size_t cap = cuda ? CUDA_INPUT_BYTES : CPU_INPUT_BYTES;
    if (t->set.target.device_memory && t->set.target.device_memory / 4 < cap)
        cap = t->set.target.device_memory / 4;
    return cap;
}

static void today(char *buf, size_t n)
{
    time_t now = time(NULL);
    struct tm tm;
    if (!gmtime_r(&now, &tm) || !strftime(buf, n, "%Y-%m-%d", &tm)) snprintf(buf, n, "1970-01-01");
}

fj_status fj_tuner_tune(fj_tuner *t, const fj_attention_desc *d, fj_tune_result *r)
{
    memset(r, 0, sizeof *r);
    fj_problem p;
    fj_status s = fj_problem_init(&p, d);
    if (s) return s;
    fj_problem_key_of(&p, r->problem, sizeof r->problem);
    const fj_tuning_target *tg = &t->set.target;
    fj_tuning_key_for(&p, tg->device, tg->arch, tg->template_name, &r->entry);
    point pt = {t, d, r, fj_attention_flops(d), 0, NULL, 0};
    if (t->time_limit > 0) pt.deadline = now_seconds() + t->time_limit;
    if (!(pt.effective = calloc((size_t)t->set.n_tiles + 1, sizeof *pt.effective)))
        return fj_fail(FJ_ERR_OUT_OF_MEMORY, "out of host memory for the tuner");

    fj_plan *def = NULL;
    s = fj_tune_inputs_prepare(&t->inputs, t->ctx, d, input_cap(t), INPUT_SEED);
    if (!s) s = default_plan(&pt, &def);
    step(&pt, r->problem);
    for (int c = 0; c < t->set.n_tiles && !s; c++) s = try_candidate(&pt, t->set.tiles[c]);
    if (!s) s = final_duel(&pt, def);
    fj_plan_destroy(def);
    free(pt.effective);
    if (!s && r->have_best) {
        snprintf(r->entry.config, sizeof r->entry.config, "%s", r->best);
        r->entry.ms = r->best_t.median;
        today(r->entry.date, sizeof r->entry.date);
        r->entry.origin = FJ_TILES_MEASURED;
    }
    return s;
}
