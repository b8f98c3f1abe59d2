/* flashjit bench: a grid of problems on one or more backends. */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_problem.h"

typedef struct grid_row {
    int batch, hq, hkv, sq, sk, d;
    fj_causal causal;
} grid_row;

/* ../shared/anchors.md's prefill grid: B*S = 16384, H = 2048 / D. */
static int grid_prefill(grid_row *rows, int cap)
{
    static const int dims[] = {64, 128}, seqs[] = {1024, 4096, 16384};
    int n = 0;
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 3; b++)
            for (int c = 0; c < 2 && n < cap; c++)
                rows[n++] = (grid_row){16384 / seqs[b], 2048 / dims[a], 2048 / dims[a], seqs[b],
                                       seqs[b], dims[a], c ? FJ_CAUSAL_BOTTOM_RIGHT : FJ_CAUSAL_NONE};
    return n;
}

/* Head dims 96 and 256, and GQA 32/8 (anchors.md's second run). */
static int grid_extra(grid_row *rows, int cap)
{
    static const grid_row extra[] = {
        {4, 21, 21, 4096, 4096, 96, FJ_CAUSAL_NONE},   {4, 21, 21, 4096, 4096, 96, FJ_CAUSAL_BOTTOM_RIGHT},
        {1, 21, 21, 16384, 16384, 96, FJ_CAUSAL_NONE}, {1, 21, 21, 16384, 16384, 96, FJ_CAUSAL_BOTTOM_RIGHT},
        {4, 8, 8, 4096, 4096, 256, FJ_CAUSAL_NONE},    {4, 8, 8, 4096, 4096, 256, FJ_CAUSAL_BOTTOM_RIGHT},
        {1, 8, 8, 16384, 16384, 256, FJ_CAUSAL_NONE},  {1, 8, 8, 16384, 16384, 256, FJ_CAUSAL_BOTTOM_RIGHT},
        {4, 32, 8, 4096, 4096, 128, FJ_CAUSAL_NONE},   {4, 32, 8, 4096, 4096, 128, FJ_CAUSAL_BOTTOM_RIGHT},
        {1, 32, 8, 16384, 16384, 128, FJ_CAUSAL_NONE}, {1, 32, 8, 16384, 16384, 128, FJ_CAUSAL_BOTTOM_RIGHT},
    };
    int n = 0;
    for (size_t i = 0; i < sizeof extra / sizeof extra[0] && n < cap; i++) rows[n++] = extra[i];
    return n;
}

/* Decode: one query row, D 128, 32 query heads over 32 or 8 kv heads. */
static int grid_decode(grid_row *rows, int cap)
{
    static const grid_row dec[] = {
        {1, 32, 32, 1, 4096, 128, FJ_CAUSAL_NONE},  {1, 32, 32, 1, 32768, 128, FJ_CAUSAL_NONE},
        {1, 32, 8, 1, 4096, 128, FJ_CAUSAL_NONE},   {1, 32, 8, 1, 32768, 128, FJ_CAUSAL_NONE},
        {8, 32, 32, 1, 4096, 128, FJ_CAUSAL_NONE},  {8, 32, 8, 1, 32768, 128, FJ_CAUSAL_NONE},
        {64, 32, 32, 1, 32768, 128, FJ_CAUSAL_NONE}, {64, 32, 8, 1, 32768, 128, FJ_CAUSAL_NONE},
    };
    int n = 0;
    for (size_t i = 0; i < sizeof dec / sizeof dec[0] && n < cap; i++) rows[n++] = dec[i];
    return n;
}

/* The CPU's grid: the foundation's benchmark shape and its neighbours. */
static int grid_cpu(grid_row *rows, int cap)
{
    static const int seqs[] = {512, 2048, 4096}, dims[] = {64, 128};
    int n = 0;
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 2; b++)
            for (int c = 0; c < 2 && n < cap; c++)
                rows[n++] = (grid_row){1, 8, 8, seqs[a], seqs[a], dims[b],
                                       c ? FJ_CAUSAL_BOTTOM_RIGHT : FJ_CAUSAL_NONE};
    if (n < cap) rows[n++] = (grid_row){1, 32, 8, 1, 8192, 128, FJ_CAUSAL_NONE};
    return n;
}

static void help(void)
{
    printf("usage: flashjit bench [--grid NAME] [--backends LIST] [--dtypes LIST] [--repeat N]\n"
           "                      [--warmup N] [--check] [--json | --csv]\n\n"
           "Times a grid of problems: median ms, TFLOP/s (4*B*H*Sq*Sk*D, halved for causal\n"
           "when Sq == Sk), GB/s of the fewest bytes (q, k, v read once, o written once),\n"
           "kernel launches per call, and the kernel or CPU method.\n\n"
           "  --grid prefill|extra|decode|gpu|cpu   gpu = prefill + extra + decode\n"
           "         (default: gpu on a CUDA context, cpu otherwise)\n"
           "  --backends auto,cuda,cpu,reference    (default: auto)\n"
           "  --dtypes bf16,f16,f32                 (default: bf16,f16 on CUDA; f32,bf16 on CPU)\n");
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

static fj_backend backends[4];
static fj_dtype dtypes[3];
static bool one_backend(const char *cmd, const char *tok, int *n)
{
    return cli_parse_backend(cmd, tok, &backends[(*n)++]);
}
static bool one_dtype(const char *cmd, const char *tok, int *n)
{
    return cli_parse_dtype(cmd, tok, &dtypes[(*n)++]);
}

int cmd_bench(int argc, char **argv)
{
    const char *grid = NULL;
    int nb = 1, nd = 0, repeat = 30, warmup = 5;
    bool json = false, csv = false, check = false;
    backends[0] = FJ_BACKEND_AUTO;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            help();
            return 0;
        } else if (!strcmp(a, "--grid") && val) {
            grid = argv[++i];
        } else if (!strcmp(a, "--backends")) {
            if (!parse_list("bench", val, a, &nb, 4, one_backend)) return 2;
            i++;
        } else if (!strcmp(a, "--dtypes")) {
            if (!parse_list("bench", val, a, &nd, 3, one_dtype)) return 2;
            i++;
        } else if (!strcmp(a, "--repeat")) {
            if (!cli_parse_int("bench", a, val, 1, 100000, &repeat)) return 2;
            i++;
        } else if (!strcmp(a, "--warmup")) {
            if (!cli_parse_int("bench", a, val, 0, 100000, &warmup)) return 2;
            i++;
        } else if (!strcmp(a, "--json")) {
            json = true;
        } else if (!strcmp(a, "--csv")) {
            csv = true;
        } else if (!strcmp(a, "--check")) {
            check = true;
        } else {
            return cli_usage_error("bench", "unknown option '%s' (flashjit bench --help)", a);
        }
    }
    if (json && csv) return cli_usage_error("bench", "--json and --csv exclude each other");

    fj_context *ctxs[4] = {0}, *ref = NULL;
    fj_status s = FJ_OK;
    int rc = 0;
    for (int b = 0; b < nb && !s; b++) {
        fj_context_options o;
        fj_context_options_init(&o);
        o.backend = backends[b];
        s = fj_context_create(&o, &ctxs[b]);
    }
    if (!s && check) {
        fj_context_options o;
        fj_context_options_init(&o);
        o.backend = FJ_BACKEND_CPU_REFERENCE;
        s = fj_context_create(&o, &ref);
    }
    if (s) {
        rc = cli_fail("bench", s);
        goto out;
    }
    bool on_cuda = fj_context_backend(ctxs[0]) == FJ_BACKEND_CUDA;
    if (!grid) grid = on_cuda ? "gpu" : "cpu";
    if (!nd) {
        nd = 2;
        dtypes[0] = on_cuda ? FJ_BF16 : FJ_F32;
        dtypes[1] = on_cuda ? FJ_F16 : FJ_BF16;
    }
    grid_row rows[64];
    int nrows = 0;
    if (!strcmp(grid, "prefill") || !strcmp(grid, "gpu")) nrows += grid_prefill(rows + nrows, 64 - nrows);
    if (!strcmp(grid, "extra") || !strcmp(grid, "gpu")) nrows += grid_extra(rows + nrows, 64 - nrows);
    if (!strcmp(grid, "decode") || !strcmp(grid, "gpu")) nrows += grid_decode(rows + nrows, 64 - nrows);
    if (!strcmp(grid, "cpu")) nrows += grid_cpu(rows + nrows, 64 - nrows);
    if (!nrows) {
        rc = cli_usage_error("bench", "--grid: '%s' is not one of prefill, extra, decode, gpu, cpu", grid);
        goto out;
    }

    if (json) printf("[\n");
    else if (csv) printf("backend,dtype,batch,heads_q,heads_kv,seqlen_q,seqlen_k,head_dim,causal,ms,tflops,gbps,launches,rel_err,kernel\n");
    else printf("%-14s %-38s %10s %9s %9s %4s %9s  %s\n", "backend", "shape", "ms", "TFLOP/s", "GB/s", "lnch", "rel.err", "kernel");
    bool first = true;
    for (int t = 0; t < nd; t++)
        for (int r = 0; r < nrows; r++)
            for (int b = 0; b < nb; b++) {
                fj_attention_desc d;
                fj_attention_desc_init(&d, rows[r].batch, rows[r].hq, rows[r].hkv, rows[r].sq, rows[r].sk, rows[r].d, dtypes[t]);
                d.causal = rows[r].causal;
                cli_result res;
                char shape[128];
                cli_shape_str(&d, shape, sizeof shape);
                s = cli_measure(ctxs[b], ref, &d, warmup, repeat, false, 1, &res);
                if (s) {
                    fprintf(stderr, "flashjit bench: %s on %s: %s: %s\n", shape,
                            fj_backend_name(fj_context_backend(ctxs[b])), fj_status_name(s), fj_last_error());
                    rc = 1;
                    continue;
                }
                if (!res.ok) rc = 1;
                if (json) {
                    printf("%s  {\"backend\": \"%s\", \"dtype\": \"%s\", \"batch\": %d, \"heads_q\": %d, "
                           "\"heads_kv\": %d, \"seqlen_q\": %d, \"seqlen_k\": %d, \"head_dim\": %d, "
                           "\"causal\": \"%s\", \"ms\": %.6f, \"ms_min\": %.6f, \"tflops\": %.4f, "
                           "\"gbps\": %.2f, \"launches\": %d, \"rel_err\": %.3e, \"kernel\": \"%s\"}",
                           first ? "" : ",\n", res.backend, fj_dtype_name(d.dtype), d.batch, d.heads_q,
                           d.heads_kv, d.seqlen_q, d.seqlen_k, d.head_dim, fj_causal_name(d.causal),
                           res.ms_median, res.ms_min, res.tflops, res.gbps, res.launches, res.rel_err,
                           res.kernel);
                } else if (csv) {
                    printf("%s,%s,%d,%d,%d,%d,%d,%d,%s,%.6f,%.4f,%.2f,%d,%.3e,%s\n", res.backend,
                           fj_dtype_name(d.dtype), d.batch, d.heads_q, d.heads_kv, d.seqlen_q, d.seqlen_k,
                           d.head_dim, fj_causal_name(d.causal), res.ms_median, res.tflops, res.gbps,
                           res.launches, res.rel_err, res.kernel);
                } else {
                    char err[32] = "-";
                    if (res.rel_err >= 0) snprintf(err, sizeof err, "%.2e%s", res.rel_err, res.ok ? "" : "!");
                    printf("%-14s %-38s %10.4f %9.2f %9.1f %4d %9s  %s\n", res.backend, shape,
                           res.ms_median, res.tflops, res.gbps, res.launches, err, res.kernel);
                }
                first = false;
                fflush(stdout);
            }
    if (json) printf("\n]\n");
out:
    for (int b = 0; b < nb; b++) fj_context_destroy(ctxs[b]);
    fj_context_destroy(ref);
    return rc;
}
