/* flashjit tune: measures candidate configurations over a problem space and
 * appends the fastest of each point to the tuning file (docs/tuning.md, "The
 * tuner"). The pieces are in tune_*.c (tools/tune.h lists them); this file
 * runs them in order:
 *
 *   1. flags; the output file checked and read (points it has are skipped)
 *   2. contexts: the backend tuned, reading no tuning file, so "default"
 *      is what the runtime picks without one; and the CPU reference
 *   3. CUDA: every candidate kernel compiled on --jobs threads, pruned
 *   4. per point: the default plan and each candidate checked against the
 *      reference (once per kernel), timed on rotating inputs; the fastest
 *      appended at once, so an interrupted run keeps what it measured
 *   5. the summary
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "context.h"
#include "plan.h"
#include "status.h"
#include "tune.h"

#define CMD "tune"
/* Input sets never take more than this, nor a quarter of the GPU. */
#define CUDA_INPUT_BYTES ((size_t)4 << 30)
#define CPU_INPUT_BYTES ((size_t)1 << 30)
/* A candidate whose first run is this many times the best median so far
 * gets only a few runs. */
#define CUT_FACTOR 3.0
#define INPUT_SEED 0x5eedull
/* Points gaining more than this over the default are counted. */
#define NOTABLE_GAIN 10.0

typedef struct session {
    tune_options o;
    tune_output out;
    fj_context *ctx, *ref;
    fj_tuning_target target;
    tune_point *points;
    int npoints;
    bool *skip; /* per point: the output file has it already */
    tune_kernels kernels;
    tune_checker checker;
    tune_inputs inputs;
    tune_progress pg;
    double start;
    /* totals for the summary */
    int tuned, skipped, failed, timed, pruned, duplicates, wrong, gaining;
    bool io_failed;
} session;

typedef struct point_result {
    char best[TUNE_CONFIG_LEN];
    tune_timing best_t;
    bool have_best;
    bool default_won; /* the default beat the best candidate head to head */
    char def[TUNE_CONFIG_LEN], def_from[24];
    char beaten[TUNE_CONFIG_LEN]; /* the best candidate, when the default beat it */
    tune_timing def_t;
    bool have_def;
    int timed, pruned, duplicates, wrong;
} point_result;

/* Prints a report line on stdout, first removing the progress line. */
static void say(session *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(session *s, const char *fmt, ...)
{
    tune_progress_clear(&s->pg);
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    fflush(stdout);
}

/* ---- setting up ------------------------------------------------------------------ */

static int prepare_space(session *s, fj_backend b)
{
    tune_space_defaults(&s->o, b);
    return tune_space_validate(&s->o.space, b);
}

static int open_contexts(session *s)
{
    fj_context_options opt;
    fj_context_options_init(&opt);
    opt.backend = s->o.backend;
    /* No tuning file: the default each candidate races is what the runtime
       picks without one (the heuristic, or the shipped table). */
    opt.tuning_file = "";
    fj_status st = fj_context_create(&opt, &s->ctx);
    if (!st) st = fj_tuning_target_of(s->ctx, &s->target);
    if (st) return cli_fail(CMD, st);
    opt.backend = FJ_BACKEND_CPU_REFERENCE;
    opt.cache_dir = "";
    if ((st = fj_context_create(&opt, &s->ref))) return cli_fail(CMD, st);
    return 0;
}

static int mark_done_points(session *s)
{
    s->skip = calloc((size_t)s->npoints + 1, sizeof *s->skip);
    if (!s->skip) return cli_fail(CMD, fj_fail(FJ_ERR_OUT_OF_MEMORY, "out of host memory"));
    for (int i = 0; i < s->npoints; i++) {
        const fj_tuning_entry *e = tune_output_find(&s->out, &s->points[i].key);
        if (!e) continue;
        if (s->o.force) {
            say(s, "re-tuning %s (%s has %s, %.4g ms, %s): --force\n", s->points[i].label,
                s->out.path, e->config, e->ms, e->date);
            continue;
        }
        s->skip[i] = true;
        s->skipped++;
        say(s, "skipping %s: %s already has %s (%.4g ms, %s); --force re-tunes it\n",
            s->points[i].label, s->out.path, e->config, e->ms, e->date);
    }
    return 0;
}

static int session_open(session *s)
{
    int rc;
    /* With the backend named, bad flags fail before any device work. */
    if (s->o.backend != FJ_BACKEND_AUTO && (rc = prepare_space(s, s->o.backend))) return rc;
    if ((rc = tune_output_open(&s->out, s->o.output))) return rc;
    if ((rc = open_contexts(s))) return rc;
    if (s->o.backend == FJ_BACKEND_AUTO && (rc = prepare_space(s, s->target.backend))) return rc;
    if (!s->o.jobs) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        s->o.jobs = cores > 0 ? (int)cores : 1;
    }
    fj_status st = tune_points_make(&s->o.space, &s->target, &s->points, &s->npoints);
    if (st) return cli_fail(CMD, st);
    if ((rc = mark_done_points(s))) return rc;
    tune_checker_init(&s->checker, s->ctx, s->ref,
                      tune_largest_block(&s->o.space, s->target.backend));
    return 0;
}

static void session_close(session *s)
{
    tune_progress_clear(&s->pg);
    tune_inputs_free(&s->inputs);
    tune_checker_free(&s->checker);
    tune_kernels_free(&s->kernels);
    free(s->skip);
    free(s->points);
    fj_context_destroy(s->ref);
    fj_context_destroy(s->ctx);
    tune_output_close(&s->out);
}

/* ---- kernels: compile ahead, check -------------------------------------------------- */

/* The reason without a leading "kernel <name>: ", which differs between
 * kernels the same rule prunes. */
static const char *reason_alone(const char *reason)
{
    if (strncmp(reason, "kernel ", 7)) return reason;
    const char *colon = strstr(reason, ": ");
    return colon ? colon + 2 : reason;
}

/* "m64n64w4s2 for d64 bf16 nomask" */
static const char *kernel_label(const tune_kernel *k, char *buf, size_t n)
{
    snprintf(buf, n, "%s for d%d %s %s", k->config, k->head_dim, fj_dtype_name(k->dtype),
             k->causal == FJ_CAUSAL_NONE ? "nomask" : fj_causal_name(k->causal));
    return buf;
}

/* A wrong kernel is a bug in flashjit: said on stdout with the report and
 * on stderr, counted, and it fails the run. */
static void announce_verdict(session *s, const tune_kernel *k)
{
    char label[96];
    kernel_label(k, label, sizeof label);
    if (k->verdict == TUNE_PRUNED) {
        say(s, "  pruned %s: %s\n", label, reason_alone(k->reason));
    } else if (k->verdict == TUNE_WRONG) {
        s->wrong++;
        say(s, "  WRONG  %s: %s; rejected\n", label, k->reason);
        fprintf(stderr, "flashjit tune: candidate %s gives WRONG results: %s; rejected\n", label,
                k->reason);
    }
}

/* The verdict of config for d's kernel, checking it the first time. */
static fj_status kernel_verdict(session *s, const fj_attention_desc *d, const char *config,
                                tune_verdict *v)
{
    tune_kernel *k = tune_kernel_of(&s->kernels, d, config);
    if (!k) return fj_fail(FJ_ERR_OUT_OF_MEMORY, "out of host memory for the kernel table");
    if (k->verdict == TUNE_UNCHECKED) {
        fj_status st = tune_check_kernel(&s->checker, k);
        if (st) return st;
        announce_verdict(s, k);
        char label[96];
        if (s->o.verbose && k->verdict == TUNE_CORRECT)
            say(s, "  checked %s: %s\n", kernel_label(k, label, sizeof label), k->reason);
    }
    *v = k->verdict;
    return FJ_OK;
}

static fj_status register_kernels(session *s)
{
    for (int i = 0; i < s->npoints; i++)
        for (int c = 0; c < s->o.space.n_configs && !s->skip[i]; c++)
            if (!tune_kernel_of(&s->kernels, &s->points[i].d, s->o.space.configs[c]))
                return fj_fail(FJ_ERR_OUT_OF_MEMORY, "out of host memory for the kernel table");
    return FJ_OK;
}

static bool same_pruning(const tune_kernel *a, const tune_kernel *b)
{
    return a->verdict == TUNE_PRUNED && b->verdict == TUNE_PRUNED && !strcmp(a->config, b->config) &&
           !strcmp(reason_alone(a->reason), reason_alone(b->reason));
}

/* One line per configuration and reason, listing the kernels it prunes:
 * the grid's 8 (head dim, dtype, mask) kernels of a tile shape mostly fall
 * to the same rule. */
static void print_prunings(session *s)
{
    const tune_kernels *t = &s->kernels;
    for (int i = 0; i < t->count; i++) {
        bool first = t->k[i].verdict == TUNE_PRUNED;
        for (int j = 0; j < i && first; j++) first = !same_pruning(&t->k[j], &t->k[i]);
        if (!first) continue;
        char which[512] = "";
        for (int j = i; j < t->count; j++) {
            if (!same_pruning(&t->k[j], &t->k[i])) continue;
            const tune_kernel *k = &t->k[j];
            size_t len = strlen(which);
            snprintf(which + len, sizeof which - len, "%sd%d %s %s", len ? ", " : "", k->head_dim,
                     fj_dtype_name(k->dtype),
                     k->causal == FJ_CAUSAL_NONE ? "nomask" : fj_causal_name(k->causal));
        }
        say(s, "  pruned %s for %s: %s\n", t->k[i].config, which, reason_alone(t->k[i].reason));
    }
}

static void print_compile_summary(session *s, const tune_compile_summary *c)
{
    say(s,
        "compiled ahead: %d kernels in %.1f s wall on %d threads (%d compiled, %.1f s of NVRTC; "
        "%d from the cache; %d failed; %d spill); cache %s\n",
        c->kernels, c->wall_seconds, s->o.jobs, c->compiled, c->nvrtc_seconds, c->cached,
        c->failed, c->spilled, s->ctx->cache_dir ? s->ctx->cache_dir : "off (plans compile again)");
    print_prunings(s);
}

static int compile_ahead(session *s)
{
    bool decode = false;
    for (int i = 0; i < s->npoints; i++) decode |= !s->skip[i] && s->points[i].d.seqlen_q == 1;
    tune_compile_summary c;
    /* Decode points' plans split the keys (split-KV): their variants too. */
    fj_status st = tune_compile_kernels(&s->kernels, &s->target, s->ctx->cache_dir, s->o.jobs,
                                        decode, &s->pg, &c);
    if (st) return cli_fail(CMD, st);
    print_compile_summary(s, &c);
    return 0;
}

/* ---- one point ------------------------------------------------------------------------ */

/* A step's share of the time left is its point's FLOPs: the grid's points
 * differ in size by orders of magnitude, their steps do not in number. */
static double step_work(const tune_point *pt) { return fj_attention_flops(&pt->d); }

/* The plan the runtime makes for the point without a tuning file, kept
 * for the final duel; *out NULL when it cannot be made or its kernel is
 * wrong (said). */
static fj_status default_plan(session *s, const tune_point *pt, point_result *r, fj_plan **out)
{
    *out = NULL;
    fj_plan *plan = NULL;
    fj_status st = fj_plan_create(s->ctx, &pt->d, &plan);
    if (!st) st = tune_plan_config(s->ctx, &s->target, plan, &pt->d, r->def, sizeof r->def,
                                   r->def_from, sizeof r->def_from);
    if (st) {
        say(s, "  %s: the default plan failed: %s: %s\n", pt->label, fj_status_name(st),
            fj_last_error());
        fj_plan_destroy(plan);
        return FJ_OK; /* the candidates may still run */
    }
    tune_verdict v;
    if ((st = kernel_verdict(s, &pt->d, r->def, &v)) || v != TUNE_CORRECT) {
        fj_plan_destroy(plan);
        return st;
    }
    *out = plan;
    return FJ_OK;
}

/* Times config's plan for the point into *t; false (with the reason said)
 * when it cannot be made or timed here. */
static bool time_candidate(session *s, const tune_point *pt, const char *config, double cut_ms,
                           tune_timing *t)
{
    fj_plan *plan = NULL;
    fj_status st = fj_plan_create_config(s->ctx, &pt->d, config, &plan);
    int local = st ? 0 : tune_plan_local_bytes(plan);
    if (!st && !local) st = tune_time_plan(plan, &s->inputs, s->o.warmup, s->o.repeat, cut_ms, t);
    fj_plan_destroy(plan);
    if (local) say(s, "  pruned %s for %s: %d bytes of local memory per thread (spills)\n", config,
                   pt->label, local);
    else if (st) say(s, "  pruned %s for %s: %s: %s\n", config, pt->label, fj_status_name(st),
                     fj_last_error());
    return !st && !local;
}

/* Whether an earlier candidate of this point runs the same blocks (the CPU
 * caps blocks to the problem's size). */
static bool same_as_earlier(session *s, const tune_point *pt, int c)
{
    char mine[TUNE_CONFIG_LEN], other[TUNE_CONFIG_LEN];
    tune_effective_config(&s->target, &pt->d, s->o.space.configs[c], mine, sizeof mine);
    for (int j = 0; j < c; j++) {
        tune_effective_config(&s->target, &pt->d, s->o.space.configs[j], other, sizeof other);
        if (!strcmp(mine, other)) return true;
    }
    return false;
}

static fj_status try_candidate(session *s, const tune_point *pt, int c, point_result *r)
{
    const char *config = s->o.space.configs[c];
    char what[128];
    snprintf(what, sizeof what, "%s %s", pt->label, config);
    tune_progress_step(&s->pg, step_work(pt), what);
    if (same_as_earlier(s, pt, c)) {
        r->duplicates++;
        return FJ_OK;
    }
    tune_verdict v;
    fj_status st = kernel_verdict(s, &pt->d, config, &v);
    if (st) return st;
    tune_timing t;
    double cut = r->have_best ? CUT_FACTOR * r->best_t.median : 0;
    if (v != TUNE_CORRECT || !time_candidate(s, pt, config, cut, &t)) {
        if (v == TUNE_WRONG) r->wrong++;
        else r->pruned++;
        return FJ_OK;
    }
    r->timed++;
    if (s->o.verbose)
        say(s, "  timed %s for %s: median %.4f ms, IQR %.4f-%.4f, min %.4f, max %.4f, %d runs%s\n",
            config, pt->label, t.median, t.p25, t.p75, t.min, t.max, t.runs,
            t.cut_short ? " (cut short: far behind the best)" : "");
    if (!r->have_best || t.median < r->best_t.median) {
        snprintf(r->best, sizeof r->best, "%s", config);
        r->best_t = t;
        r->have_best = true;
    }
    return FJ_OK;
}

/* The best candidate against the default, run for run: the selection's
 * timings come from runs at different moments, and a few percent of drift
 * must not read as a gain. The default is kept when it wins (it may run
 * what no candidate does, such as a shipped table's tiles). */
static fj_status final_duel(session *s, const tune_point *pt, const fj_plan *def, point_result *r)
{
    tune_progress_step(&s->pg, step_work(pt), "default against the best");
    if (!def) return FJ_OK;
    fj_status st;
    if (!r->have_best) {
        if ((st = tune_time_plan(def, &s->inputs, s->o.warmup, s->o.repeat, 0, &r->def_t))) return st;
    } else {
        fj_plan *best = NULL;
        if ((st = fj_plan_create_config(s->ctx, &pt->d, r->best, &best))) return st;
        st = tune_time_duel(def, best, &s->inputs, s->o.warmup, s->o.repeat, &r->def_t, &r->best_t);
        fj_plan_destroy(best);
        if (st) return st;
    }
    r->have_def = true;
    if (!r->have_best || r->def_t.median < r->best_t.median) {
        r->default_won = r->have_best && strcmp(r->best, r->def);
        if (r->default_won) snprintf(r->beaten, sizeof r->beaten, "%s", r->best);
        snprintf(r->best, sizeof r->best, "%s", r->def);
        r->best_t = r->def_t;
        r->have_best = true;
    }
    return FJ_OK;
}

static void today(char *buf, size_t n)
{
    time_t now = time(NULL);
    struct tm tm;
    if (!gmtime_r(&now, &tm) || !strftime(buf, n, "%Y-%m-%d", &tm)) snprintf(buf, n, "1970-01-01");
}

static fj_status append_entry(session *s, const tune_point *pt, const point_result *r)
{
    fj_tuning_entry e = pt->key;
    snprintf(e.config, sizeof e.config, "%s", r->best);
    e.ms = r->best_t.median;
    today(e.date, sizeof e.date);
    fj_status st = tune_output_append(&s->out, &e);
    if (st) {
        s->io_failed = true;
        tune_progress_clear(&s->pg);
        cli_fail(CMD, st);
    }
    return st;
}

static void print_table_header(session *s)
{
    const char *unit = s->target.backend == FJ_BACKEND_CUDA ? "TFLOP/s" : "GFLOP/s";
    say(s, "\n%-38s %-13s %9s %6s %8s  %-13s %9s %7s  %s\n", "point", "best", "ms", "IQR", unit,
        "default", "ms", "gain", "default from");
}

static void print_point(session *s, const tune_point *pt, const point_result *r)
{
    double scale = s->target.backend == FJ_BACKEND_CUDA ? 1e12 : 1e9;
    double rate = fj_attention_flops(&pt->d) / (r->best_t.median * 1e-3) / scale;
    double iqr = (r->best_t.p75 - r->best_t.p25) / r->best_t.median * 100.0;
    char def_ms[16] = "-", gain[16] = "-";
    if (r->have_def) {
        double g = (r->def_t.median / r->best_t.median - 1.0) * 100.0;
        snprintf(def_ms, sizeof def_ms, "%.4f", r->def_t.median);
        snprintf(gain, sizeof gain, "%+.1f%%", g);
        if (g > NOTABLE_GAIN) s->gaining++;
    }
    say(s, "%-38s %-13s %9.4f %5.1f%% %8.2f  %-13s %9s %7s  %s%s%s%s\n", pt->label, r->best,
        r->best_t.median, iqr, rate, r->def[0] ? r->def : "-", def_ms, gain,
        r->def_from[0] ? r->def_from : "-", r->default_won ? " (kept: it beat " : "",
        r->beaten, r->default_won ? " head to head)" : "");
}

static size_t input_cap(const session *s)
{
    size_t cap = s->target.backend == FJ_BACKEND_CUDA ? CUDA_INPUT_BYTES : CPU_INPUT_BYTES;
    if (s->target.device_memory && s->target.device_memory / 4 < cap)
        cap = s->target.device_memory / 4;
    return cap;
}

/* 0, or 1 when the output file cannot be written (the run stops). */
static int tune_one(session *s, const tune_point *pt)
{
    point_result r;
    memset(&r, 0, sizeof r);
    fj_plan *def = NULL;
    fj_status st = tune_inputs_prepare(&s->inputs, s->ctx, &pt->d, input_cap(s), INPUT_SEED);
    if (!st) st = default_plan(s, pt, &r, &def);
    tune_progress_step(&s->pg, step_work(pt), pt->label);
    for (int c = 0; c < s->o.space.n_configs && !st; c++) st = try_candidate(s, pt, c, &r);
    if (!st) st = final_duel(s, pt, def, &r);
    fj_plan_destroy(def);
    s->timed += r.timed;
    s->pruned += r.pruned;
    s->duplicates += r.duplicates;
    if (st || !r.have_best) {
        if (st) say(s, "%-38s FAILED: %s: %s\n", pt->label, fj_status_name(st), fj_last_error());
        else say(s, "%-38s FAILED: no candidate could be timed (%d pruned, %d wrong)\n", pt->label,
                 r.pruned, r.wrong);
        s->failed++;
        return 0;
    }
    if (append_entry(s, pt, &r)) return 1;
    s->tuned++;
    print_point(s, pt, &r);
    return 0;
}

/* ---- the run ------------------------------------------------------------------------------ */

/* A point's steps: its default, each candidate, the final duel. */
static long point_steps(const session *s) { return 2 + s->o.space.n_configs; }

static void begin_timing(session *s)
{
    long steps = 0;
    double work = 0;
    for (int i = 0; i < s->npoints; i++)
        if (!s->skip[i]) {
            steps += point_steps(s);
            work += (double)point_steps(s) * step_work(&s->points[i]);
        }
    tune_progress_begin(&s->pg, "timing", steps, work);
}

static void print_header(session *s)
{
    const tune_options *o = &s->o;
    say(s,
        "flashjit tune: %s on %s (%s); %d point%s (%d already in the file), %d candidates "
        "each; %d runs after %d warm-up, median; output %s\n",
        fj_backend_name(s->target.backend), s->target.device_name, s->target.arch, s->npoints,
        s->npoints == 1 ? "" : "s", s->skipped, o->space.n_configs, o->repeat, o->warmup,
        s->out.path);
    say(s, "check problem: b1 h2 s%d/%d per head dim, dtype and mask, against the CPU reference\n",
        s->checker.seqlen_q, s->checker.seqlen_k);
}

static void print_summary(session *s)
{
    char wall[32];
    double seconds = cli_now() - s->start;
    if (seconds < 60) snprintf(wall, sizeof wall, "%.1f s", seconds);
    else tune_format_seconds(seconds, wall, sizeof wall);
    say(s,
        "\nsummary: %d point%s tuned (%d skipped: already in %s; %d failed); %d candidates "
        "timed, %d pruned, %d the same blocks as another on the problem, %d wrong; %s wall; "
        "%d point%s gain > %.0f%% over the default\n",
        s->tuned, s->tuned == 1 ? "" : "s", s->skipped, s->out.path, s->failed, s->timed,
        s->pruned, s->duplicates, s->wrong, wall, s->gaining,
        s->gaining == 1 ? "" : "s", NOTABLE_GAIN);
}

static int session_run(session *s)
{
    print_header(s);
    if (s->skipped == s->npoints) {
        say(s, "nothing to do: every point is in %s (--force re-tunes)\n", s->out.path);
        return 0;
    }
    fj_status st = register_kernels(s);
    if (st) return cli_fail(CMD, st);
    int rc = s->target.backend == FJ_BACKEND_CUDA ? compile_ahead(s) : 0;
    if (rc) return rc;
    print_table_header(s);
    begin_timing(s);
    for (int i = 0; i < s->npoints && !rc; i++) {
        if (s->skip[i]) continue;
        rc = tune_one(s, &s->points[i]);
        tune_progress_milestone(&s->pg, s->points[i].label);
    }
    print_summary(s);
    return rc || s->io_failed || s->wrong || s->failed ? 1 : 0;
}

int cmd_tune(int argc, char **argv)
{
    session s;
    memset(&s, 0, sizeof s);
    s.start = cli_now();
    int rc = tune_parse_flags(argc, argv, &s.o);
    if (rc) return rc < 0 ? 0 : rc;
    rc = session_open(&s);
    if (!rc) rc = session_run(&s);
    session_close(&s);
    return rc;
}
