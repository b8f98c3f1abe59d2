/* flashjit tune: the library's tuner (src/tune/tuner.h) over a grid of
 * problems, appending the fastest configuration of each point to the tuning
 * file (docs/tuning.md, "The tuner"). This file is the command: it
 *
 *   1. reads the flags and checks the output file (points it has are skipped)
 *   2. opens a context of the backend tuned reading no tuning file, so
 *      "default" is what the runtime picks without one
 *   3. has the tuner build the candidates ahead (CUDA) and prints the prunings
 *   4. per problem: the tuner's result, appended at once (an interrupted run
 *      keeps what it measured), and a report line
 *   5. prints the summary
 *
 * and shows progress (tune_progress.c). The measuring is the library's. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_grid.h"
#include "paths.h"
#include "tune.h"
#include "tune/tuner.h"

#define CMD "tune"
/* Points gaining more than this over the default are counted. */
#define NOTABLE_GAIN 10.0

typedef struct session {
    tune_options o;
    char *output;        /* the tuning file appended to (saving), else the default one
                              --write would append to (NULL: there is none) */
    bool saving;         /* --write or --output: entries are appended */
    fj_tuning *existing; /* what it held at the start; NULL: a new file */
    fj_context *ctx;
    fj_tuner *tuner;
    const fj_tuner_settings *set;
    tune_point *points;
    int npoints;
    bool *skip; /* per point: the output file has it already */
    tune_progress pg;
    double start;
    /* totals for the summary */
    int tuned, skipped, failed, timed, pruned, duplicates, wrong, out_of_time, gaining;
    int scattered; /* points whose best's runs spread more than --max-spread */
    bool io_failed;
} session;

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

/* ---- what the tuner says ----------------------------------------------------------- */

/* The reason without a leading "kernel <name>: ", which differs between
 * kernels the same rule prunes. */
static const char *reason_alone(const char *reason)
{
    if (strncmp(reason, "kernel ", 7)) return reason;
    const char *colon = strstr(reason, ": ");
    return colon ? colon + 2 : reason;
}

static const char *mask_word(fj_causal c)
{
    return c == FJ_CAUSAL_NONE ? "nomask" : fj_causal_name(c);
}

/* "m64n64w4s2 for d64 bf16 nomask" */
static const char *kernel_label(const fj_tune_kernel *k, char *buf, size_t n)
{
    snprintf(buf, n, "%s for d%d %s %s", k->tiles, k->head_dim, fj_dtype_name(k->dtype),
             mask_word(k->causal));
    return buf;
}

/* A wrong kernel is a bug in flashjit: said on stdout with the report and
 * on stderr, counted, and it fails the run. */
static void on_checked(void *user, const fj_tune_kernel *k)
{
    session *s = user;
    char label[96];
    kernel_label(k, label, sizeof label);
    if (k->verdict == FJ_TUNE_PRUNED) {
        say(s, "  pruned %s: %s\n", label, reason_alone(k->reason));
    } else if (k->verdict == FJ_TUNE_WRONG) {
        s->wrong++;
        say(s, "  WRONG  %s: %s; rejected\n", label, k->reason);
        fprintf(stderr, "flashjit tune: candidate %s gives WRONG results: %s; rejected\n", label,
                k->reason);
    } else if (s->o.verbose) {
        say(s, "  checked %s: %s\n", label, k->reason);
    }
}

static void on_pruned(void *user, const char *problem, const char *tiles, const char *reason)
{
    say(user, "  pruned %s for %s: %s\n", tiles, problem, reason);
}

static void on_timed(void *user, const char *problem, const char *tiles, const fj_tune_timing *t)
{
    session *s = user;
    if (s->o.verbose)
        say(s, "  timed %s for %s: median %.4f ms, IQR %.4f-%.4f, min %.4f, max %.4f, %d runs%s\n",
            tiles, problem, t->median, t->p25, t->p75, t->min, t->max, t->runs,
            t->cut_short ? " (cut short: far behind the best)" : "");
}

static void on_default_failed(void *user, const char *problem, const char *reason)
{
    say(user, "  %s: the default plan failed: %s\n", problem, reason);
}

static void on_step(void *user, double work, const char *what)
{
    session *s = user;
    tune_progress_step(&s->pg, work, what);
}

/* From the building threads, one at a time. */
static void on_build_step(void *user, long done, long total, const char *kernel)
{
    session *s = user;
    if (done == 1) tune_progress_begin(&s->pg, "compiling", total, 0);
    tune_progress_step(&s->pg, 0, kernel);
    if (done * 10 / total != (done - 1) * 10 / total) tune_progress_milestone(&s->pg, NULL);
}

/* ---- setting up ------------------------------------------------------------------ */

static int open_output(session *s)
{
    s->saving = s->o.output || s->o.write;
    if (s->o.output) {
        if (!(s->output = strdup(s->o.output))) return cli_fail(CMD, FJ_ERR_OUT_OF_MEMORY);
    } else {
        /* FLASHJIT_TUNING_FILE, else tuning.txt in the cache directory: the
           file a default context reads. */
        char *dir = NULL, *note = NULL;
        fj_status st = fj_cache_dir_resolve(NULL, &dir, &note);
        if (!st) st = fj_tuning_path_resolve(NULL, dir, &s->output);
        int rc = st && s->saving ? cli_fail(CMD, st) : 0;
        if (!rc && !s->output && s->saving)
            rc =
                cli_usage_error(CMD,
                                "--write: no default tuning file: "
                                "FLASHJIT_TUNING_FILE is unset and the cache directory is off (%s)",
                                note ? note : "no cache directory");
        free(dir);
        free(note);
        if (rc) return rc;
        /* a report only: every point is measured, nothing is read or written */
        if (!s->saving) return 0;
    }
    fj_strbuf notes;
    fj_strbuf_init(&notes);
    fj_status st = fj_tuning_file_check(s->output, &s->existing, &notes);
    if (st) fprintf(stderr, "flashjit %s: --output: %s\n", CMD, fj_last_error());
    else if (notes.len) printf("note: %s", notes.data);
    fj_strbuf_free(&notes);
    return st ? 1 : 0;
}

static int mark_done_points(session *s)
{
    s->skip = calloc((size_t)s->npoints + 1, sizeof *s->skip);
    if (!s->skip) return cli_fail(CMD, FJ_ERR_OUT_OF_MEMORY);
    const fj_tuning_target *t = &s->set->target;
    for (int i = 0; i < s->npoints; i++) {
        fj_tuning_entry key;
        memset(&key, 0, sizeof key);
        snprintf(key.device, sizeof key.device, "%s", t->device);
        snprintf(key.arch, sizeof key.arch, "%s", t->arch);
        snprintf(key.template_name, sizeof key.template_name, "%s", t->template_name);
        fj_tuning_point_parse(s->points[i].point, &key); /* tune_points_make wrote it */
        const fj_tuning_entry *e = fj_tuning_find_in(s->existing, &key);
        if (!e) continue;
        if (s->o.force) {
            say(s, "re-tuning %s (%s has %s for %s, %.4g ms, %s): --force\n", s->points[i].key,
                s->output, e->config, e->point, e->ms, e->date);
            continue;
        }
        s->skip[i] = true;
        s->skipped++;
        say(s, "skipping %s: %s already has %s for %s (%.4g ms, %s); --force re-tunes it\n",
            s->points[i].key, s->output, e->config, e->point, e->ms, e->date);
    }
    return 0;
}

static int open_tuner(session *s, const fj_tune_observer *obs)
{
    const char *tiles[TUNE_MAX_CONFIGS];
    for (int i = 0; i < s->o.space.n_configs; i++) tiles[i] = s->o.space.configs[i];
    fj_tuner_options to;
    fj_tuner_options_init(&to);
    if (s->o.space.n_configs) {
        to.tiles = tiles;
        to.n_tiles = s->o.space.n_configs;
    }
    to.repeat = s->o.repeat;
    to.warmup = s->o.warmup;
    to.jobs = s->o.jobs;
    to.time_limit = s->o.time_limit;
    to.observer = obs;
    fj_status st = fj_tuner_create(s->ctx, &to, &s->tuner);
    if (st) return cli_fail(CMD, st);
    s->set = fj_tuner_get_settings(s->tuner);
    return 0;
}

static int session_open(session *s, const fj_tune_observer *obs)
{
    int rc;
    fj_backend b = s->o.backend;
    /* With the backend named, bad flags fail before any device work; a named
       grid is read before it too. */
    if (b != FJ_BACKEND_AUTO) {
        if ((rc = tune_space_validate(&s->o.space, b)) ||
            (rc = tune_points_make(&s->o.space, b, &s->points, &s->npoints)))
            return rc;
    } else if (s->o.space.grid && strcmp(s->o.space.grid, "default")) {
        cli_grid g;
        if ((rc = cli_grid_load(CMD, "--grid", s->o.space.grid, &g))) return rc;
        cli_grid_free(&g);
    }
    if ((rc = open_output(s))) return rc;
    fj_context_options opt;
    fj_context_options_init(&opt);
    opt.backend = b;
    /* No tuning file: the default each candidate races is what the runtime
       picks without one (the heuristic, or the shipped table). */
    opt.tuning_file = "";
    fj_status st = fj_context_create(&opt, &s->ctx);
    if (st) return cli_fail(CMD, st);
    if (b == FJ_BACKEND_AUTO) {
        b = fj_context_backend(s->ctx);
        if ((rc = tune_space_validate(&s->o.space, b)) ||
            (rc = tune_points_make(&s->o.space, b, &s->points, &s->npoints)))
            return rc;
    }
    if ((rc = open_tuner(s, obs))) return rc;
    return mark_done_points(s);
}

static void session_close(session *s)
{
    tune_progress_clear(&s->pg);
    fj_tuner_destroy(s->tuner);
    free(s->skip);
    free(s->points);
    fj_context_destroy(s->ctx);
    fj_tuning_free(s->existing);
    free(s->output);
}

/* ---- building ahead ---------------------------------------------------------------- */

static bool same_pruning(const fj_tune_kernel *a, const fj_tune_kernel *b)
{
    return a->verdict == FJ_TUNE_PRUNED && b->verdict == FJ_TUNE_PRUNED &&
           !strcmp(a->tiles, b->tiles) && !strcmp(reason_alone(a->reason), reason_alone(b->reason));
}

/* One line per configuration and reason, listing the kernels it prunes:
 * the grid's 8 (head dim, dtype, mask) kernels of a tile shape mostly fall
 * to the same rule. */
static void print_prunings(session *s)
{
    int n = fj_tuner_kernel_count(s->tuner);
    for (int i = 0; i < n; i++) {
        const fj_tune_kernel *ki = fj_tuner_kernel_at(s->tuner, i);
        bool first = ki->verdict == FJ_TUNE_PRUNED;
        for (int j = 0; j < i && first; j++)
            first = !same_pruning(fj_tuner_kernel_at(s->tuner, j), ki);
        if (!first) continue;
        char which[512] = "";
        for (int j = i; j < n; j++) {
            const fj_tune_kernel *k = fj_tuner_kernel_at(s->tuner, j);
            if (!same_pruning(k, ki)) continue;
            size_t len = strlen(which);
            snprintf(which + len, sizeof which - len, "%sd%d %s %s", len ? ", " : "", k->head_dim,
                     fj_dtype_name(k->dtype), mask_word(k->causal));
        }
        say(s, "  pruned %s for %s: %s\n", ki->tiles, which, reason_alone(ki->reason));
    }
}

static int build_ahead(session *s)
{
    fj_attention_desc *todo = calloc((size_t)s->npoints + 1, sizeof *todo);
    if (!todo) return cli_fail(CMD, FJ_ERR_OUT_OF_MEMORY);
    int n = 0;
    for (int i = 0; i < s->npoints; i++)
        if (!s->skip[i]) todo[n++] = s->points[i].d;
    fj_tune_build_summary c;
    fj_status st = fj_tuner_build(s->tuner, todo, n, &c);
    free(todo);
    if (st) return cli_fail(CMD, st);
    if (s->set->target.backend != FJ_BACKEND_CUDA) return 0;
    say(s,
        "compiled ahead: %d kernels in %.1f s wall on %d threads (%d compiled, %.1f s of NVRTC; "
        "%d from the cache; %d failed; %d spill); cache %s\n",
        c.kernels, c.wall_seconds, s->set->jobs, c.compiled, c.nvrtc_seconds, c.cached, c.failed,
        c.spilled, s->set->cache_dir ? s->set->cache_dir : "off (plans compile again)");
    print_prunings(s);
    return 0;
}

/* ---- one problem ----------------------------------------------------------------------- */

static void print_table_header(session *s)
{
    const char *unit = s->set->target.backend == FJ_BACKEND_CUDA ? "TFLOP/s" : "GFLOP/s";
    say(s, "\n%-46s %-13s %9s %6s %8s  %-13s %9s %7s  %s\n", "problem", "best", "ms", "IQR", unit,
        "default", "ms", "gain", "default from");
}

static void print_point(session *s, const tune_point *pt, const fj_tune_result *r)
{
    double scale = s->set->target.backend == FJ_BACKEND_CUDA ? 1e12 : 1e9;
    double rate = fj_attention_flops(&pt->d) / (r->best_t.median * 1e-3) / scale;
    double iqr = (r->best_t.p75 - r->best_t.p25) / r->best_t.median * 100.0;
    char def_ms[16] = "-", gain[16] = "-";
    if (r->def_timed) {
        double g = (r->def_t.median / r->best_t.median - 1.0) * 100.0;
        snprintf(def_ms, sizeof def_ms, "%.4f", r->def_t.median);
        snprintf(gain, sizeof gain, "%+.1f%%", g);
        if (g > NOTABLE_GAIN) s->gaining++;
    }
    say(s, "%-46s %-13s %9.4f %5.1f%% %8.2f  %-13s %9s %7s  %s%s%s%s\n", pt->key, r->best,
        r->best_t.median, iqr, rate, r->def[0] ? r->def : "-", def_ms, gain,
        r->def[0] ? fj_tiles_source_name(r->def_from) : "-",
        r->default_won ? " (kept: it beat " : "", r->beaten,
        r->default_won ? " head to head)" : "");
}

/* A point whose best timing's runs spread ((max - min) / median) more than
 * --max-spread: its entry may be noise, said in the report and counted. */
static void warn_spread(session *s, const tune_point *pt, const fj_tune_timing *t)
{
    double spread = t->median > 0 ? (t->max - t->min) / t->median * 100.0 : 0;
    if (!(spread > s->o.max_spread)) return;
    s->scattered++;
    say(s,
        "warning: %s: the best's %d runs spread %.0f%% ((max - min) / median > %.0f%%, "
        "--max-spread): too wide to trust; rerun it on a quiet machine or with more --repeat\n",
        pt->key, t->runs, spread, s->o.max_spread);
}

/* 0, or 1 when the output file cannot be written (the run stops). */
static int tune_one(session *s, const tune_point *pt)
{
    fj_tune_result r;
    fj_status st = fj_tuner_tune(s->tuner, &pt->d, &r);
    s->timed += r.timed;
    s->pruned += r.pruned;
    s->duplicates += r.duplicates;
    s->out_of_time += r.out_of_time;
    if (st || !r.have_best) {
        if (st) say(s, "%-46s FAILED: %s: %s\n", pt->key, fj_status_name(st), fj_last_error());
        else
            say(s, "%-46s FAILED: no candidate could be timed (%d pruned, %d wrong)\n", pt->key,
                r.pruned, r.wrong);
        s->failed++;
        return 0;
    }
    if (s->saving && (st = fj_tuning_append(s->output, &r.entry))) {
        s->io_failed = true;
        tune_progress_clear(&s->pg);
        fprintf(stderr, "flashjit %s: --output: %s\n", CMD, fj_last_error());
        return 1;
    }
    s->tuned++;
    print_point(s, pt, &r);
    warn_spread(s, pt, &r.best_t);
    return 0;
}

/* ---- the run ------------------------------------------------------------------------------ */

/* A problem's steps: its default, each candidate, the final duel. */
static long point_steps(const session *s) { return 2 + s->set->n_tiles; }

static void begin_timing(session *s)
{
    long steps = 0;
    double work = 0;
    for (int i = 0; i < s->npoints; i++)
        if (!s->skip[i]) {
            steps += point_steps(s);
            work += (double)point_steps(s) * fj_attention_flops(&s->points[i].d);
        }
    tune_progress_begin(&s->pg, "timing", steps, work);
}

static void print_header(session *s)
{
    const fj_tuner_settings *t = s->set;
    say(s,
        "flashjit tune: %s on %s (%s); %d point%s (%d already in the file), %d candidates "
        "each; %d runs after %d warm-up, median; output %s\n",
        fj_backend_name(t->target.backend), t->target.device_name, t->target.arch, s->npoints,
        s->npoints == 1 ? "" : "s", s->skipped, t->n_tiles, t->repeat, t->warmup,
        s->saving ? s->output : "none (a report only)");
    say(s, "check problem: b1 h2 s%d/%d per head dim, dtype and mask, against the CPU reference\n",
        t->check_seqlen_q, t->check_seqlen_k);
}

static void print_summary(session *s)
{
    char wall[32], late[64] = "";
    double seconds = cli_now() - s->start;
    if (seconds < 60) snprintf(wall, sizeof wall, "%.1f s", seconds);
    else tune_format_seconds(seconds, wall, sizeof wall);
    if (s->out_of_time) snprintf(late, sizeof late, ", %d past the time limit", s->out_of_time);
    say(s,
        "\nsummary: %d point%s tuned (%d skipped: already in %s; %d failed); %d candidates "
        "timed, %d pruned, %d the same blocks as another on the problem, %d wrong%s; %s wall; "
        "%d point%s gain > %.0f%% over the default\n",
        s->tuned, s->tuned == 1 ? "" : "s", s->skipped, s->saving ? s->output : "the file",
        s->failed, s->timed, s->pruned, s->duplicates, s->wrong, late, wall, s->gaining,
        s->gaining == 1 ? "" : "s", NOTABLE_GAIN);
    if (s->scattered)
        say(s,
            "%d point%s spread more than %.0f%% between runs (warnings above): their entries "
            "may be noise\n",
            s->scattered, s->scattered == 1 ? "" : "s", s->o.max_spread);
    if (!s->saving && s->tuned) {
        if (s->output)
            say(s,
                "not saved: rerun with --write to append these entries to %s (the file every "
                "program reads), or with --output FILE\n",
                s->output);
        else
            say(s, "not saved: rerun with --output FILE (there is no default tuning file: "
                   "FLASHJIT_TUNING_FILE is unset and the cache directory is off)\n");
    }
}

static int session_run(session *s)
{
    print_header(s);
    if (s->skipped == s->npoints) {
        say(s, "nothing to do: every point is in %s (--force re-tunes)\n", s->output);
        return 0;
    }
    int rc = build_ahead(s);
    if (rc) return rc;
    print_table_header(s);
    begin_timing(s);
    for (int i = 0; i < s->npoints && !rc; i++) {
        if (s->skip[i]) continue;
        rc = tune_one(s, &s->points[i]);
        tune_progress_milestone(&s->pg, s->points[i].key);
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
    const fj_tune_observer obs = {
        .user = &s,
        .checked = on_checked,
        .build_step = on_build_step,
        .pruned = on_pruned,
        .timed = on_timed,
        .default_failed = on_default_failed,
        .step = on_step,
    };
    rc = session_open(&s, &obs);
    if (!rc) rc = session_run(&s);
    session_close(&s);
    return rc;
}
