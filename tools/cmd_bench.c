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
#include "tune.h"

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

/* 0, or 2 with a message (an unknown grid, a bad line, too many shapes).
 * head_dim_v >= 0 (--head-dim-v): every row's V head dim (0 or the row's
 * head dim: none); -1: each key's own. */
static int grid_rows(const char *name, int head_dim_v, bench_grid *bg)
{
    cli_grid g;
    int rc = cli_grid_load("bench", "--grid", name, &g);
    if (rc) return rc;
    memset(bg, 0, sizeof *bg);
    for (int i = 0; i < g.count && !rc; i++) {
        fj_attention_desc d = g.rows[i];
        if (head_dim_v >= 0) d.head_dim_v = head_dim_v == d.head_dim ? 0 : head_dim_v;
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
           "                      [--plot-metric tflops|gbps] [--plot-log] [--list] [--quiet]\n"
           "                      [--head-dim-v N]\n\n"
           "Times a grid of problems: median ms, TFLOP/s (2*B*H*Sq*Sk*(D+Dv), halved for\n"
           "causal when Sq == Sk), GB/s of the fewest bytes (q, k, v read once, o written once),\n"
           "kernel launches per call, and the kernel or CPU method. Each row is named by its\n"
           "problem key (b4.hq16.hkv16.sq4096.sk4096.d128.bf16.causal_br).\n\n"
           "  --grid NAME   tools/grids/NAME.txt (%s), or a file\n"
           "         (a path with a '/'), one problem key per line: every shape of the grid in\n"
           "         every dtype it lists (default: gpu on a CUDA context, cpu otherwise;\n"
           "         gpu = anchors = prefill + extra + decode; smoke = three tiny problems)\n"
           "         A key with .varlen or .paged<N> runs batch sequences of its full lengths\n"
           "         (paged: each sequence's pages in pool order; paged = decode\n"
           "         and chunked-prefill rows next to their dense twins)\n"
           "  --backends auto,cuda,cpu,reference    (default: auto)\n"
           "  --dtypes bf16,f16,f32   instead of the grid's dtypes\n"
           "  --head-dim-v N   V's and O's head dim of every row (0: the same as the row's\n"
           "         head dim); else each key's own (.dv<N>, or its head dim). CPU backends\n"
           "  --list        print the grid's problem keys (after --dtypes) and exit\n"
           "  --plot FILE.svg   also write a bar chart of TFLOP/s: one group per shape and\n"
           "         dtype, one bar per backend (a self-contained SVG, replaced atomically;\n"
           "         combines with --json and --csv)\n"
           "  --plot-metric tflops|gbps   what the bars show (default tflops; gbps shows\n"
           "         decode rows, which move bytes rather than compute)\n"
           "  --plot-log    a log10 axis, so rows decades apart all show\n"
           "  --csv         RFC 4180: a header, CRLF records, fields with commas, quotes or\n"
           "         newlines quoted; empty where a value is absent (rel_err unchecked, a\n"
           "         failed row's numbers); kernel and description (the plan's) whole\n"
           "  --json        {\"metadata\": {flashjit_version, date (ISO 8601 UTC),\n"
           "         command_line, devices, grid, repeat, warmup, checked}, \"rows\": [...]}\n"
           "         with null where a value is absent and a failed row's error\n"
           "  --quiet       no progress line. Otherwise progress with the row count and\n"
           "         the time left goes to stderr (never stdout): on a terminal one line,\n"
           "         rewritten after each row; otherwise a line at each tenth of the rows\n"
           "Options: GNU style (--opt value or --opt=value; -- ends the options).\n",
           cli_grid_names());
}

static bool parse_list(const char *cmd, const char *val, const char *what, int *n, int cap,
                       bool (*one)(const char *, const char *, const char *, int *))
{
    if (!val) {
        cli_usage_error(cmd, "%s needs a value", what);
        return false;
    }
    char buf[256];
    snprintf(buf, sizeof buf, "%s", val);
    *n = 0;
    for (char *save, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (*n >= cap || !one(cmd, what, tok, n)) return false;
    }
    return *n > 0;
}

static fj_backend backends[MAX_BACKENDS];
static fj_dtype dtypes[MAX_DTYPES];
static bool one_backend(const char *cmd, const char *flag, const char *tok, int *n)
{
    return cli_parse_backend(cmd, flag, tok, &backends[(*n)++]);
}
static bool one_dtype(const char *cmd, const char *flag, const char *tok, int *n)
{
    return cli_parse_dtype(cmd, flag, tok, &dtypes[(*n)++]);
}

typedef enum output_format { OUTPUT_TABLE, OUTPUT_JSON, OUTPUT_CSV } output_format;

typedef enum plot_metric { PLOT_TFLOPS, PLOT_GBPS } plot_metric;

typedef struct bench_options {
    const char *grid;      /* NULL: by the first context's backend */
    const char *plot_path; /* NULL: no plot */
    int nb, nd, repeat, warmup;
    int head_dim_v; /* --head-dim-v: V's head dim of every row; -1: each key's own */
    output_format format;
    plot_metric metric;
    bool check, list, plot_log, quiet;
    int argc; /* the command line, for --json's metadata */
    char **argv;
} bench_options;

enum {
    OPT_GRID = 1,
    OPT_BACKENDS,
    OPT_DTYPES,
    OPT_REPEAT,
    OPT_WARMUP,
    OPT_PLOT,
    OPT_PLOT_METRIC,
    OPT_PLOT_LOG,
    OPT_JSON,
    OPT_CSV,
    OPT_CHECK,
    OPT_LIST,
    OPT_QUIET,
    OPT_HEAD_DIM_V
};

static const cli_option bench_opts[] = {
    {"grid", required_argument, OPT_GRID},
    {"backends", required_argument, OPT_BACKENDS},
    {"dtypes", required_argument, OPT_DTYPES},
    {"repeat", required_argument, OPT_REPEAT},
    {"warmup", required_argument, OPT_WARMUP},
    {"plot", required_argument, OPT_PLOT},
    {"plot-metric", required_argument, OPT_PLOT_METRIC},
    {"plot-log", no_argument, OPT_PLOT_LOG},
    {"json", no_argument, OPT_JSON},
    {"csv", no_argument, OPT_CSV},
    {"check", no_argument, OPT_CHECK},
    {"list", no_argument, OPT_LIST},
    {"quiet", no_argument, OPT_QUIET},
    {"head-dim-v", required_argument, OPT_HEAD_DIM_V},
    {NULL, 0, 0},
};

/* -1: go on; otherwise the exit status (0 after --help, 2 on a usage error). */
static int parse_options(int argc, char **argv, bench_options *o)
{
    *o = (bench_options){.nb = 1,
                         .repeat = 30,
                         .warmup = 5,
                         .head_dim_v = -1,
                         .argc = argc,
                         .argv = argv};
    backends[0] = FJ_BACKEND_AUTO;
    bool json = false, csv = false;
    const cli_option *const tables[] = {bench_opts, NULL};
    cli_options p;
    cli_options_begin(&p, "bench", argc, argv, tables);
    const char *val;
    for (int c; (c = cli_next_option(&p, &val)) != -1;) {
        const char *a = p.flag;
        switch (c) {
        case CLI_OPTION_ERROR: return 2;
        case CLI_OPTION_HELP: help(); return 0;
        case OPT_GRID:
            if (!val || !*val)
                return cli_usage_error("bench", "--grid needs a grid name (%s) or a file",
                                       cli_grid_names());
            o->grid = val;
            break;
        case OPT_BACKENDS:
            if (!parse_list("bench", val, a, &o->nb, MAX_BACKENDS, one_backend)) return 2;
            break;
        case OPT_DTYPES:
            if (!parse_list("bench", val, a, &o->nd, MAX_DTYPES, one_dtype)) return 2;
            break;
        case OPT_REPEAT:
            if (!cli_parse_int("bench", a, val, 1, 100000, &o->repeat)) return 2;
            break;
        case OPT_WARMUP:
            if (!cli_parse_int("bench", a, val, 0, 100000, &o->warmup)) return 2;
            break;
        case OPT_PLOT:
            if (!val || !*val) return cli_usage_error("bench", "--plot needs a file name");
            o->plot_path = val;
            break;
        case OPT_PLOT_METRIC:
            if (val && !strcmp(val, "tflops")) o->metric = PLOT_TFLOPS;
            else if (val && !strcmp(val, "gbps")) o->metric = PLOT_GBPS;
            else
                return cli_usage_error("bench", "--plot-metric: '%s' is not tflops or gbps",
                                       val ? val : "");
            break;
        case OPT_PLOT_LOG: o->plot_log = true; break;
        case OPT_JSON: json = true; break;
        case OPT_CSV: csv = true; break;
        case OPT_CHECK: o->check = true; break;
        case OPT_LIST: o->list = true; break;
        case OPT_QUIET: o->quiet = true; break;
        case OPT_HEAD_DIM_V:
            if (!cli_parse_int("bench", a, val, 0, FJ_MAX_HEAD_DIM, &o->head_dim_v)) return 2;
            break;
        }
    }
    if (cli_no_arguments(&p)) return 2;
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
    double gbps[MAX_GROUPS * MAX_BACKENDS];   /* the same for GB/s */
} bench_plot;

/* "b1 h8 s4096 d128 causal bf16": heads and lengths once when q and kv
 * agree; "d192/128" where V's head dim differs. */
static void plot_label(const fj_attention_desc *d, char *buf, size_t n)
{
    char heads[32], seqs[32];
    if (d->heads_q == d->heads_kv) snprintf(heads, sizeof heads, "h%d", d->heads_q);
    else snprintf(heads, sizeof heads, "h%d/%d", d->heads_q, d->heads_kv);
    if (d->seqlen_q == d->seqlen_k) snprintf(seqs, sizeof seqs, "s%d", d->seqlen_q);
    else snprintf(seqs, sizeof seqs, "s%d/%d", d->seqlen_q, d->seqlen_k);
    const char *mask = d->causal == FJ_CAUSAL_NONE       ? ""
                       : d->causal == FJ_CAUSAL_TOP_LEFT ? " causal-tl"
                                                         : " causal";
    char dims[32];
    if (d->head_dim_v > 0 && d->head_dim_v != d->head_dim)
        snprintf(dims, sizeof dims, "d%d/%d", d->head_dim, d->head_dim_v);
    else snprintf(dims, sizeof dims, "d%d", d->head_dim);
    snprintf(buf, n, "b%d %s %s %s%s %s", d->batch, heads, seqs, dims, mask,
             fj_dtype_name(d->dtype));
}

/* The legend: the backend a context resolved to, marked when AUTO chose it
 * so that "--backends auto,cpu" gives two names. */
static void plot_series(bench_plot *p, fj_context *const *ctxs, int nb)
{
    p->series = nb;
    for (int b = 0; b < nb; b++) {
        const char *name = fj_backend_name(fj_context_backend(ctxs[b]));
        snprintf(p->names[b], sizeof p->names[b], "%s%s", name,
                 backends[b] == FJ_BACKEND_AUTO ? " (auto)" : "");
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

static int write_plot(const bench_plot *p, const bench_options *o, const char *subtitle)
{
    const char *path = o->plot_path;
    bool gbps = o->metric == PLOT_GBPS;
    char title[128];
    snprintf(title, sizeof title, "flashjit bench: %s per shape and backend%s",
             gbps ? "GB/s" : "TFLOP/s", o->plot_log ? " (log scale)" : "");
    const char *labels[MAX_GROUPS], *names[MAX_BACKENDS];
    for (int g = 0; g < p->groups; g++) labels[g] = p->labels[g];
    for (int s = 0; s < p->series; s++) names[s] = p->names[s];
    svg_bar_chart chart = {.title = title,
                           .subtitle = subtitle,
                           .y_label = gbps ? "GB/s" : "TFLOP/s",
                           .groups = p->groups,
                           .series = p->series,
                           .group_labels = labels,
                           .series_labels = names,
                           .values = gbps ? p->gbps : p->tflops,
                           .log_scale = o->plot_log};
    char *svg = svg_bar_chart_render(&chart);
    if (!svg) {
        fprintf(stderr, "flashjit bench: --plot %s: out of memory rendering the chart\n", path);
        return 1;
    }
    int err = svg_plot_write_file(path, svg);
    free(svg);
    if (err) {
        fprintf(stderr, "flashjit bench: --plot %s: cannot write the chart: %s\n", path,
                strerror(err));
        return 1;
    }
    /* stderr: stdout may be JSON or CSV for a program to read */
    fprintf(stderr, "flashjit bench: wrote the chart to %s\n", path);
    return 0;
}

/* ---- one measurement -------------------------------------------------------- */

/* RFC 4180: a field holding a comma, a double quote, CR or LF is quoted,
 * its quotes doubled; records end in CRLF. */
static void csv_field(const char *v, bool last)
{
    if (v[strcspn(v, ",\"\r\n")]) {
        putchar('"');
        for (; *v; v++) {
            if (*v == '"') putchar('"');
            putchar(*v);
        }
        putchar('"');
    } else {
        fputs(v, stdout);
    }
    fputs(last ? "\r\n" : ",", stdout);
}

/* A JSON string (RFC 8259): quotes, backslashes and control characters
 * escaped; other bytes as they are (the texts are ASCII or UTF-8). */
static void json_string(const char *v)
{
    putchar('"');
    for (; *v; v++) {
        unsigned char ch = (unsigned char)*v;
        if (ch == '"' || ch == '\\') printf("\\%c", ch);
        else if (ch == '\n') fputs("\\n", stdout);
        else if (ch == '\t') fputs("\\t", stdout);
        else if (ch == '\r') fputs("\\r", stdout);
        else if (ch < 0x20 || ch == 0x7f) printf("\\u%04x", ch);
        else putchar(ch);
    }
    putchar('"');
}

/* "key": value, with null for a value that is absent (not finite). */
static void json_number(const char *key, const char *fmt, double v)
{
    printf(", \"%s\": ", key);
    if (isfinite(v)) printf(fmt, v);
    else fputs("null", stdout);
}

static void json_key_string(const char *key, const char *v)
{
    printf(", \"%s\": ", key);
    if (v) json_string(v);
    else fputs("null", stdout);
}

static const char *const csv_columns[] = {"backend",    "dtype",    "batch",      "heads_q",
                                          "heads_kv",   "seqlen_q", "seqlen_k",   "head_dim",
                                          "head_dim_v", "causal",   "ms",         "tflops",
                                          "gbps",       "launches", "rel_err",    "kernel",
                                          "problem",    "error",    "description"};
#define NCSV (sizeof csv_columns / sizeof csv_columns[0])

/* --json's metadata: what made the numbers (version, devices, date, command). */
static void print_metadata(fj_context *const *ctxs, const bench_options *o)
{
    printf("{\"metadata\": {\"flashjit_version\": ");
    json_string(FLASHJIT_VERSION_STRING);
    printf(", \"library_version\": %u", fj_version());
    char date[32] = "";
    time_t now = time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm)) strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", &tm);
    json_key_string("date", date[0] ? date : NULL);
    printf(", \"command_line\": [\"flashjit\"");
    for (int i = 0; i < o->argc; i++) {
        printf(", ");
        json_string(o->argv[i]);
    }
    printf("], \"devices\": [");
    for (int b = 0; b < o->nb; b++) {
        char dev[320];
        device_of(ctxs[b], dev, sizeof dev);
        printf("%s{\"backend\": ", b ? ", " : "");
        json_string(fj_backend_name(fj_context_backend(ctxs[b])));
        json_key_string("device", dev);
        json_key_string("describe", fj_context_describe(ctxs[b]));
        printf("}");
    }
    printf("]");
    json_key_string("grid", o->grid);
    printf(", \"repeat\": %d, \"warmup\": %d, \"checked\": %s}, \"rows\": [", o->repeat, o->warmup,
           o->check ? "true" : "false");
}

static void print_header(fj_context *const *ctxs, const bench_options *o)
{
    if (o->format == OUTPUT_JSON) {
        print_metadata(ctxs, o);
    } else if (o->format == OUTPUT_CSV) {
        for (size_t i = 0; i < NCSV; i++) csv_field(csv_columns[i], i + 1 == NCSV);
    } else {
        cli_table_header();
    }
}

/* One row; res NULL: the problem failed with error (kernel, times absent). */
static void print_result(output_format format, bool first, const fj_attention_desc *d,
                         const char *backend, const cli_result *res, const char *error)
{
    char key[FJ_PROBLEM_KEY_MAX];
    cli_shape_str(d, key, sizeof key);
    double ms = res ? res->ms_median : NAN, tflops = res ? res->tflops : NAN;
    double gbps = res ? res->gbps : NAN;
    double rel_err = res && res->rel_err >= 0 ? res->rel_err : NAN;
    if (format == OUTPUT_JSON) {
        printf("%s\n  {\"problem\": ", first ? "" : ",");
        json_string(key);
        json_key_string("backend", backend);
        json_key_string("dtype", fj_dtype_name(d->dtype));
        printf(", \"batch\": %d, \"heads_q\": %d, \"heads_kv\": %d, \"seqlen_q\": %d, "
               "\"seqlen_k\": %d, \"head_dim\": %d, \"head_dim_v\": %d",
               d->batch, d->heads_q, d->heads_kv, d->seqlen_q, d->seqlen_k, d->head_dim,
               d->head_dim_v > 0 ? d->head_dim_v : d->head_dim);
        json_key_string("causal", fj_causal_name(d->causal));
        json_number("ms", "%.6f", ms);
        json_number("ms_min", "%.6f", res ? res->ms_min : NAN);
        json_number("ms_max", "%.6f", res ? res->ms_max : NAN);
        json_number("tflops", "%.6g", tflops);
        json_number("gbps", "%.6g", gbps);
        json_number("launches", "%.0f", res ? res->launches : NAN);
        json_number("rel_err", "%.3e", rel_err);
        json_number("tolerance", "%.1e", isfinite(rel_err) ? res->tolerance : NAN);
        printf(", \"ok\": %s", res && res->ok ? "true" : "false");
        json_key_string("kernel", res ? res->kernel : NULL);
        json_key_string("description", res ? res->description : NULL);
        json_key_string("error", error);
        printf("}");
    } else if (format == OUTPUT_CSV) {
        char num[10][64];
        const char *f[NCSV];
        snprintf(num[0], 64, "%d", d->batch);
        snprintf(num[1], 64, "%d", d->heads_q);
        snprintf(num[2], 64, "%d", d->heads_kv);
        snprintf(num[3], 64, "%d", d->seqlen_q);
        snprintf(num[4], 64, "%d", d->seqlen_k);
        snprintf(num[5], 64, "%d", d->head_dim);
        snprintf(num[9], 64, "%d", d->head_dim_v > 0 ? d->head_dim_v : d->head_dim);
        /* empty: absent */
        num[6][0] = num[7][0] = num[8][0] = '\0';
        if (isfinite(ms)) snprintf(num[6], 64, "%.6f", ms);
        if (isfinite(tflops)) snprintf(num[7], 64, "%.6g", tflops);
        if (isfinite(gbps)) snprintf(num[8], 64, "%.6g", gbps);
        char launches[16] = "", err[32] = "";
        if (res) snprintf(launches, sizeof launches, "%d", res->launches);
        if (isfinite(rel_err)) snprintf(err, sizeof err, "%.3e", rel_err);
        const char *row[NCSV] = {backend,
                                 fj_dtype_name(d->dtype),
                                 num[0],
                                 num[1],
                                 num[2],
                                 num[3],
                                 num[4],
                                 num[5],
                                 num[9],
                                 fj_causal_name(d->causal),
                                 num[6],
                                 num[7],
                                 num[8],
                                 launches,
                                 err,
                                 res ? res->kernel : "",
                                 key,
                                 error ? error : "",
                                 res && res->description ? res->description : ""};
        memcpy(f, row, sizeof f);
        for (size_t i = 0; i < NCSV; i++) csv_field(f[i], i + 1 == NCSV);
    } else if (res) {
        char e[32] = "-";
        if (res->rel_err >= 0) snprintf(e, sizeof e, "%.2e%s", res->rel_err, res->ok ? "" : "!");
        cli_table_row(res->backend, key, res->ms_median, res->tflops, res->gbps, res->launches, e,
                      res->kernel);
    }
    fflush(stdout);
}

/* Measures d on ctx and prints the result (a failed one as a row with its
 * error in --json and --csv); *tflops and *gbps are NAN when it failed.
 * Returns 1 on failure or a failed check, else 0. */
static int bench_one(fj_context *ctx, fj_context *ref, const fj_attention_desc *d,
                     const bench_options *o, bool *first, double *tflops, double *gbps)
{
    cli_result res;
    *tflops = *gbps = NAN;
    const char *backend = fj_backend_name(fj_context_backend(ctx));
    fj_status s = cli_measure(ctx, ref, d, o->warmup, o->repeat, false, 1, &res);
    if (s) {
        char shape[128], error[1024];
        cli_shape_str(d, shape, sizeof shape);
        snprintf(error, sizeof error, "%s: %s", fj_status_name(s), fj_last_error());
        fprintf(stderr, "flashjit bench: %s on %s: %s\n", shape, backend, error);
        print_result(o->format, *first, d, backend, NULL, error);
        *first = o->format == OUTPUT_TABLE && *first;
        cli_result_free(&res);
        return 1;
    }
    print_result(o->format, *first, d, backend, &res, NULL);
    *first = false;
    *tflops = res.tflops;
    *gbps = res.gbps;
    cli_result_free(&res);
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

/* What the time left is estimated from: a row's FLOPs, and its bytes at
 * 100 FLOP per byte (about where attention turns from memory- to
 * compute-bound), so decode rows count too. */
static double row_work(const fj_attention_desc *d)
{
    return fj_attention_flops(d) + 100.0 * cli_min_bytes(d, false);
}

/* Every dtype, shape and backend in that nesting; fills plot as it goes.
 * Progress on stderr (tools/tune_progress.c): on a terminal one line,
 * rewritten after each row; otherwise a plain line at each tenth of the
 * rows; none with --quiet. stdout has the results alone. */
static int run_grid(fj_context *const *ctxs, fj_context *ref, const bench_grid *bg,
                    const bench_options *o, bench_plot *plot)
{
    int rc = 0;
    bool first = true;
    print_header(ctxs, o);
    plot->groups = 0;
    long total = (long)o->nd * bg->nshapes * o->nb, done = 0;
    double work = 0;
    for (int t = 0; t < o->nd; t++)
        for (int r = 0; r < bg->nshapes; r++) {
            fj_attention_desc d = bg->shapes[r];
            d.dtype = dtypes[t];
            work += o->nb * row_work(&d);
        }
    tune_progress pg = {0};
    tune_progress_begin(&pg, "rows", total, work);
    tune_progress_command(&pg, "bench");
    for (int t = 0; t < o->nd; t++)
        for (int r = 0; r < bg->nshapes; r++) {
            fj_attention_desc d = bg->shapes[r];
            d.dtype = dtypes[t];
            int g = plot->groups++;
            plot_label(&d, plot->labels[g], sizeof plot->labels[g]);
            for (int b = 0; b < o->nb; b++) {
                tune_progress_clear(&pg);
                rc |= bench_one(ctxs[b], ref, &d, o, &first, &plot->tflops[g * o->nb + b],
                                &plot->gbps[g * o->nb + b]);
                if (o->quiet) continue;
                char key[FJ_PROBLEM_KEY_MAX];
                cli_shape_str(&d, key, sizeof key);
                tune_progress_step(&pg, row_work(&d), key);
                done++;
                if (!pg.tty && (done * 10 / total != (done - 1) * 10 / total))
                    tune_progress_milestone(&pg, key);
            }
        }
    tune_progress_clear(&pg);
    if (o->format == OUTPUT_JSON) printf("\n]}\n");
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

/* The grid's rows (with --head-dim-v's V head dim), and its dtypes unless
 * --dtypes gave them. */
static int load_grid(bench_options *o, bench_grid *bg)
{
    int rc = grid_rows(o->grid, o->head_dim_v, bg);
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
    if (err)
        return cli_usage_error("bench", "--plot %s: cannot create a file there: %s", o.plot_path,
                               strerror(err));

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
        rc |= write_plot(plot, &o, subtitle);
    }
out:
    free(bg);
    free(plot);
    for (int b = 0; b < o.nb; b++) fj_context_destroy(ctxs[b]);
    fj_context_destroy(ref);
    return rc;
}
