/* flashjit bench: a grid of problems on one or more backends. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>

#include "cli.h"
#include "cli_grid.h"
#include "cli_problem.h"
#include "tune/target.h"
#include "svg_plot.h"

#define MAX_ROWS 128
#define MAX_BACKENDS 4
#define MAX_DTYPES 3

/* A grid's shapes (its keys without the dtype) in order, and its dtypes in
 * order of first appearance: bench runs every shape in every dtype (the
 * grid's, or --dtypes), dtype by dtype. */
typedef struct bench_grid {
    fj_attention_desc shapes[MAX_ROWS];
    int nshapes;
    fj_dtype dtypes[MAX_DTYPES];
    int ndtypes;
} bench_grid;

/* 0, or 2 with a message (an unknown grid, a bad line, too many shapes). */
static int grid_rows(const char *name, bench_grid *bg)
{
    cli_grid g;
    int rc = cli_grid_load("bench", "--grid", name, &g);
    if (rc) return rc;
    memset(bg, 0, sizeof *bg);
    for (int i = 0; i < g.count && !rc; i++) {
        fj_attention_desc d = g.rows[i];
        bool have = false;
        for (int t = 0; t < bg->ndtypes; t++) have |= bg->dtypes[t] == d.dtype;
        if (!have) bg->dtypes[bg->ndtypes++] = d.dtype;
        d.dtype = FJ_F32; /* the shape alone */
        have = false;
        for (int j = 0; j < bg->nshapes; j++) have |= !memcmp(&bg->shapes[j], &d, sizeof d);
        if (have) continue;
        if (bg->nshapes == MAX_ROWS)
            rc = cli_usage_error("bench", "--grid %s: more than %d shapes", name, MAX_ROWS);
        else bg->shapes[bg->nshapes++] = d;
    }
    cli_grid_free(&g);
    return rc;
}

static void help(void)
{
    printf("usage: flashjit bench [--grid NAME] [--backends LIST] [--dtypes LIST] [--repeat N]\n"
           "                      [--warmup N] [--check] [--json | --csv] [--plot FILE.svg]\n"
           "                      [--list]\n\n"
           "Times a grid of problems: median ms, TFLOP/s (4*B*H*Sq*Sk*D, halved for causal\n"
           "when Sq == Sk), GB/s of the fewest bytes (q, k, v read once, o written once),\n"
           "kernel launches per call, and the kernel or CPU method. Each row is named by its\n"
           "problem key (b4.hq16.hkv16.sq4096.sk4096.d128.bf16.causal_br).\n\n"
           "  --grid NAME   tools/grids/NAME.txt (%s), or a file\n"
           "         (a path with a '/'), one problem key per line: every shape of the grid in\n"
           "         every dtype it lists (default: gpu on a CUDA context, cpu otherwise;\n"
           "         gpu = anchors = prefill + extra + decode; smoke = three tiny problems)\n"
           "  --backends auto,cuda,cpu,reference    (default: auto)\n"
           "  --dtypes bf16,f16,f32   instead of the grid's dtypes\n"
           "  --list        print the grid's problem keys (after --dtypes) and exit\n"
           "  --plot FILE.svg   also write a bar chart of TFLOP/s: one group per shape and\n"
           "         dtype, one bar per backend (a self-contained SVG, replaced atomically;\n"
           "         combines with --json and --csv)\n",
           cli_grid_names());
}

static bool parse_list(const char *cmd, const char *val, const char *what, int *n, int cap,
                       bool (*one)(const char *, const char *, int *))
{
    if (!val) {
        cli_usage_error(cmd, "%s needs a value", what);
        return false;
    }
    char buf[256];
    snprintf(buf, sizeof buf, "%s", val);
    *n = 0;
    for (char *save, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (*n >= cap || !one(cmd, tok, n)) return false;
    }
    return *n > 0;
}

static fj_backend backends[MAX_BACKENDS];
static fj_dtype dtypes[MAX_DTYPES];
static bool one_backend(const char *cmd, const char *tok, int *n)
{
    return cli_parse_backend(cmd, tok, &backends[(*n)++]);
}
static bool one_dtype(const char *cmd, const char *tok, int *n)
{
    return cli_parse_dtype(cmd, tok, &dtypes[(*n)++]);
}

typedef enum output_format { OUTPUT_TABLE, OUTPUT_JSON, OUTPUT_CSV } output_format;

typedef struct bench_options {
    const char *grid;      /* NULL: by the first context's backend */
    const char *plot_path; /* NULL: no plot */
    int nb, nd, repeat, warmup;
    output_format format;
    bool check, list;
} bench_options;

/* -1: go on; otherwise the exit status (0 after --help, 2 on a usage error). */
static int parse_options(int argc, char **argv, bench_options *o)
{
    *o = (bench_options){.nb = 1, .repeat = 30, .warmup = 5};
    backends[0] = FJ_BACKEND_AUTO;
    bool json = false, csv = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            help();
            return 0;
        } else if (!strcmp(a, "--grid") && val) {
            o->grid = argv[++i];
        } else if (!strcmp(a, "--backends")) {
            if (!parse_list("bench", val, a, &o->nb, MAX_BACKENDS, one_backend)) return 2;
            i++;
        } else if (!strcmp(a, "--dtypes")) {
            if (!parse_list("bench", val, a, &o->nd, MAX_DTYPES, one_dtype)) return 2;
            i++;
        } else if (!strcmp(a, "--repeat")) {
            if (!cli_parse_int("bench", a, val, 1, 100000, &o->repeat)) return 2;
            i++;
        } else if (!strcmp(a, "--warmup")) {
            if (!cli_parse_int("bench", a, val, 0, 100000, &o->warmup)) return 2;
            i++;
        } else if (!strcmp(a, "--plot")) {
            if (!val || !*val) return cli_usage_error("bench", "--plot needs a file name");
            o->plot_path = argv[++i];
        } else if (!strcmp(a, "--json")) {
            json = true;
        } else if (!strcmp(a, "--csv")) {
            csv = true;
        } else if (!strcmp(a, "--check")) {
            o->check = true;
        } else if (!strcmp(a, "--list")) {
            o->list = true;
        } else {
            return cli_usage_error("bench", "unknown option '%s' (flashjit bench --help)", a);
        }
    }
    if (json && csv) return cli_usage_error("bench", "--json and --csv exclude each other");
    o->format = json ? OUTPUT_JSON : csv ? OUTPUT_CSV : OUTPUT_TABLE;
    return -1;
}

/* ---- --plot --------------------------------------------------------------- */

#define MAX_GROUPS (MAX_DTYPES * MAX_ROWS)

/* What --plot draws: TFLOP/s of each (shape and dtype, backend), in the
 * order the benchmark ran them. */
typedef struct bench_plot {
    int groups, series;
    char labels[MAX_GROUPS][128];
    char names[MAX_BACKENDS][40];
    double tflops[MAX_GROUPS * MAX_BACKENDS]; /* group-major; NAN: failed, no bar */
} bench_plot;

/* "b1 h8 s4096 d128 causal bf16": heads and lengths once when q and kv agree. */
static void plot_label(const fj_attention_desc *d, char *buf, size_t n)
{
    char heads[32], seqs[32];
    if (d->heads_q == d->heads_kv) snprintf(heads, sizeof heads, "h%d", d->heads_q);
    else snprintf(heads, sizeof heads, "h%d/%d", d->heads_q, d->heads_kv);
    if (d->seqlen_q == d->seqlen_k) snprintf(seqs, sizeof seqs, "s%d", d->seqlen_q);
    else snprintf(seqs, sizeof seqs, "s%d/%d", d->seqlen_q, d->seqlen_k);
    const char *mask = d->causal == FJ_CAUSAL_NONE ? "" : d->causal == FJ_CAUSAL_TOP_LEFT ? " causal-tl" : " causal";
    snprintf(buf, n, "b%d %s %s d%d%s %s", d->batch, heads, seqs, d->head_dim, mask, fj_dtype_name(d->dtype));
}

/* The legend: the backend a context resolved to, marked when AUTO chose it
 * so that "--backends auto,cpu" gives two names. */
static void plot_series(bench_plot *p, fj_context *const *ctxs, int nb)
{
    p->series = nb;
    for (int b = 0; b < nb; b++) {
        const char *name = fj_backend_name(fj_context_backend(ctxs[b]));
        snprintf(p->names[b], sizeof p->names[b], "%s%s", name, backends[b] == FJ_BACKEND_AUTO ? " (auto)" : "");
    }
}

/* The CPU's model from /proc/cpuinfo, else the machine type (uname). */
static void cpu_model(char *buf, size_t n)
{
    struct utsname u;
    snprintf(buf, n, "%s", uname(&u) == 0 ? u.machine : "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        const char *v = strchr(line, ':');
        if (strncmp(line, "model name", 10) || !v) continue;
        v += 1 + strspn(v + 1, " \t");
        snprintf(buf, n, "%.*s", (int)strcspn(v, "\n"), v);
        break;
    }
    fclose(f);
}

static void device_of(const fj_context *ctx, char *buf, size_t n)
{
    fj_tuning_target t;
    if (fj_context_backend(ctx) == FJ_BACKEND_CUDA && fj_tuning_target_of(ctx, &t) == FJ_OK) {
        snprintf(buf, n, "%s (%s)", t.device_name, t.arch);
        return;
    }
    char model[128];
    cpu_model(model, sizeof model);
    snprintf(buf, n, "CPU %s, %d threads", model, fj_context_cpu_threads(ctx));
}

/* "2026-12-02, NVIDIA H200 (sm_90); CPU AMD EPYC, 16 threads, median of 30 runs":
 * each distinct device of the benchmarked contexts once. */
static void plot_subtitle(fj_context *const *ctxs, int nb, int repeat, char *buf, size_t n)
{
    time_t now = time(NULL);
    struct tm tm;
    size_t len = localtime_r(&now, &tm) ? strftime(buf, n, "%Y-%m-%d", &tm) : 0;
    if (!len) len = (size_t)snprintf(buf, n, "(no date)");
    char seen[MAX_BACKENDS][320];
    int nseen = 0;
    for (int b = 0; b < nb && len < n; b++) {
        device_of(ctxs[b], seen[nseen], sizeof seen[nseen]);
        bool dup = false;
        for (int i = 0; i < nseen; i++) dup |= !strcmp(seen[i], seen[nseen]);
        if (dup) continue;
        len += (size_t)snprintf(buf + len, n - len, "%s%s", nseen ? "; " : ", ", seen[nseen]);
        nseen++;
    }
    if (len < n) snprintf(buf + len, n - len, ", median of %d runs", repeat);
}

static int write_plot(const bench_plot *p, const char *path, const char *subtitle)
{
    const char *labels[MAX_GROUPS], *names[MAX_BACKENDS];
    for (int g = 0; g < p->groups; g++) labels[g] = p->labels[g];
    for (int s = 0; s < p->series; s++) names[s] = p->names[s];
    svg_bar_chart chart = {.title = "flashjit bench: TFLOP/s per shape and backend",
                           .subtitle = subtitle, .y_label = "TFLOP/s",
                           .groups = p->groups, .series = p->series,
                           .group_labels = labels, .series_labels = names, .values = p->tflops};
    char *svg = svg_bar_chart_render(&chart);
    if (!svg) {
        fprintf(stderr, "flashjit bench: --plot %s: out of memory rendering the chart\n", path);
        return 1;
    }
    int err = svg_plot_write_file(path, svg);
    free(svg);
    if (err) {
        fprintf(stderr, "flashjit bench: --plot %s: cannot write the chart: %s\n", path, strerror(err));
        return 1;
    }
    /* stderr: stdout may be JSON or CSV for a program to read */
    fprintf(stderr, "flashjit bench: wrote the chart to %s\n", path);
    return 0;
}

/* ---- one measurement -------------------------------------------------------- */

static void print_header(output_format format)
{
    if (format == OUTPUT_JSON) printf("[\n");
    else if (format == OUTPUT_CSV) printf("backend,dtype,batch,heads_q,heads_kv,seqlen_q,seqlen_k,head_dim,causal,ms,tflops,gbps,launches,rel_err,kernel,problem\n");
    else cli_table_header();
}

static void print_result(output_format format, bool first, const fj_attention_desc *d, const cli_result *res)
{
    char key[FJ_PROBLEM_KEY_MAX];
    cli_shape_str(d, key, sizeof key);
    if (format == OUTPUT_JSON) {
        printf("%s  {\"problem\": \"%s\", \"backend\": \"%s\", \"dtype\": \"%s\", \"batch\": %d, "
               "\"heads_q\": %d, \"heads_kv\": %d, \"seqlen_q\": %d, \"seqlen_k\": %d, "
               "\"head_dim\": %d, \"causal\": \"%s\", \"ms\": %.6f, \"ms_min\": %.6f, "
               "\"tflops\": %.4f, \"gbps\": %.2f, \"launches\": %d, \"rel_err\": %.3e, "
               "\"kernel\": \"%s\"}",
               first ? "" : ",\n", key, res->backend, fj_dtype_name(d->dtype), d->batch,
               d->heads_q, d->heads_kv, d->seqlen_q, d->seqlen_k, d->head_dim,
               fj_causal_name(d->causal), res->ms_median, res->ms_min, res->tflops, res->gbps,
               res->launches, res->rel_err, res->kernel);
    } else if (format == OUTPUT_CSV) {
        printf("%s,%s,%d,%d,%d,%d,%d,%d,%s,%.6f,%.4f,%.2f,%d,%.3e,%s,%s\n", res->backend,
               fj_dtype_name(d->dtype), d->batch, d->heads_q, d->heads_kv, d->seqlen_q, d->seqlen_k,
               d->head_dim, fj_causal_name(d->causal), res->ms_median, res->tflops, res->gbps,
               res->launches, res->rel_err, res->kernel, key);
    } else {
        char err[32] = "-";
        if (res->rel_err >= 0) snprintf(err, sizeof err, "%.2e%s", res->rel_err, res->ok ? "" : "!");
        cli_table_row(res->backend, key, res->ms_median, res->tflops, res->gbps, res->launches, err,
                      res->kernel);
    }
    fflush(stdout);
}

/* Measures d on ctx and prints the result; *tflops is NAN when it failed.
 * Returns 1 on failure or a failed check, else 0. */
static int bench_one(fj_context *ctx, fj_context *ref, const fj_attention_desc *d, const bench_options *o,
                     bool *first, double *tflops)
{
    cli_result res;
    *tflops = NAN;
    fj_status s = cli_measure(ctx, ref, d, o->warmup, o->repeat, false, 1, &res);
    if (s) {
        char shape[128];
        cli_shape_str(d, shape, sizeof shape);
        fprintf(stderr, "flashjit bench: %s on %s: %s: %s\n", shape,
                fj_backend_name(fj_context_backend(ctx)), fj_status_name(s), fj_last_error());
        return 1;
    }
    print_result(o->format, *first, d, &res);
    *first = false;
    *tflops = res.tflops;
    return res.ok ? 0 : 1;
}

static fj_status create_contexts(const bench_options *o, fj_context **ctxs, fj_context **ref)
{
    fj_status s = FJ_OK;
    for (int b = 0; b < o->nb && !s; b++) {
        fj_context_options co;
        fj_context_options_init(&co);
        co.backend = backends[b];
        s = fj_context_create(&co, &ctxs[b]);
    }
    if (!s && o->check) {
        fj_context_options co;
        fj_context_options_init(&co);
        co.backend = FJ_BACKEND_CPU_REFERENCE;
        s = fj_context_create(&co, ref);
    }
    return s;
}

/* Every dtype, shape and backend in that nesting; fills plot as it goes. */
static int run_grid(fj_context *const *ctxs, fj_context *ref, const bench_grid *bg,
                    const bench_options *o, bench_plot *plot)
{
    int rc = 0;
    bool first = true;
    print_header(o->format);
    plot->groups = 0;
    for (int t = 0; t < o->nd; t++)
        for (int r = 0; r < bg->nshapes; r++) {
            fj_attention_desc d = bg->shapes[r];
            d.dtype = dtypes[t];
            int g = plot->groups++;
            plot_label(&d, plot->labels[g], sizeof plot->labels[g]);
            for (int b = 0; b < o->nb; b++)
                rc |= bench_one(ctxs[b], ref, &d, o, &first, &plot->tflops[g * o->nb + b]);
        }
    if (o->format == OUTPUT_JSON) printf("\n]\n");
    return rc;
}

/* --list: the rows bench would run, by their problem keys. */
static void list_rows(const bench_grid *bg, const bench_options *o)
{
    for (int t = 0; t < o->nd; t++)
        for (int r = 0; r < bg->nshapes; r++) {
            fj_attention_desc d = bg->shapes[r];
            d.dtype = dtypes[t];
            char key[FJ_PROBLEM_KEY_MAX];
            cli_shape_str(&d, key, sizeof key);
            printf("%s\n", key);
        }
}

/* The grid's rows, and its dtypes unless --dtypes gave them. */
static int load_grid(bench_options *o, bench_grid *bg)
{
    int rc = grid_rows(o->grid, bg);
    if (!rc && !o->nd) {
        o->nd = bg->ndtypes;
        memcpy(dtypes, bg->dtypes, sizeof bg->dtypes);
    }
    return rc;
}

int cmd_bench(int argc, char **argv)
{
    bench_options o;
    int rc = parse_options(argc, argv, &o);
    if (rc >= 0) return rc;
    /* Before the benchmark, which may run for minutes, rather than after it. */
    int err = o.plot_path ? svg_plot_check_path(o.plot_path) : 0;
    if (err) return cli_usage_error("bench", "--plot %s: cannot create a file there: %s", o.plot_path, strerror(err));

    fj_context *ctxs[MAX_BACKENDS] = {0}, *ref = NULL;
    /* ~30 KB each: kept off the stack */
    bench_plot *plot = calloc(1, sizeof *plot);
    bench_grid *bg = calloc(1, sizeof *bg);
    if (!plot || !bg) {
        fprintf(stderr, "flashjit bench: out of memory\n");
        rc = 1;
        goto out;
    }
    /* A named grid is read before any device work. */
    if (o.grid && (rc = load_grid(&o, bg))) goto out;
    if (o.grid && o.list) {
        list_rows(bg, &o);
        goto out;
    }
    fj_status s = create_contexts(&o, ctxs, &ref);
    if (s) {
        rc = cli_fail("bench", s);
        goto out;
    }
    if (!o.grid) {
        o.grid = fj_context_backend(ctxs[0]) == FJ_BACKEND_CUDA ? "gpu" : "cpu";
        if ((rc = load_grid(&o, bg))) goto out;
        if (o.list) {
            list_rows(bg, &o);
            goto out;
        }
    }
    plot_series(plot, ctxs, o.nb);
    rc = run_grid(ctxs, ref, bg, &o, plot);
    if (o.plot_path) {
        char subtitle[1024];
        plot_subtitle(ctxs, o.nb, o.repeat, subtitle, sizeof subtitle);
        rc |= write_plot(plot, o.plot_path, subtitle);
    }
out:
    free(bg);
    free(plot);
    for (int b = 0; b < o.nb; b++) fj_context_destroy(ctxs[b]);
    fj_context_destroy(ref);
    return rc;
}
