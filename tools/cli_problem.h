/* Problems for the CLI: flags -> desc, random inputs on the backend's memory,
 * timed runs, and the check against the CPU reference. Shared by run, bench
 * and demo so all three measure the same way. */
#ifndef FJ_CLI_PROBLEM_H
#define FJ_CLI_PROBLEM_H

#include <stdbool.h>
#include <stdint.h>

#include "flashjit.h"

typedef struct cli_problem_flags {
    fj_attention_desc d;
    fj_backend backend;
    int repeat, warmup;
    bool check, lse;
    uint64_t seed;
} cli_problem_flags;

/* Defaults: batch 1, heads 8/8, seqlen 1024/1024, head_dim 128, bf16, no mask,
 * backend auto, 20 repeats after 3 warm-up runs, no check. */
void cli_problem_flags_init(cli_problem_flags *f);

/* Consumes the flag at argv[*i] (and its value) if it is a problem flag:
 * returns 1 when consumed, 0 when not a problem flag, -1 on a bad value
 * (message printed). */
int cli_problem_flag(const char *cmd, int argc, char **argv, int *i, cli_problem_flags *f);

/* Help text for the problem flags. */
const char *cli_problem_flags_help(void);

typedef struct cli_result {
    double ms_median, ms_min, ms_max;
    int runs;
    double tflops;       /* FLOP convention of fj_attention_flops() */
    double gbps;         /* fewest bytes: q, k, v read once, o (and lse) written once */
    int launches;        /* kernel launches per call (CUDA), 0 on CPU */
    double rel_err;      /* vs the CPU reference, relative Frobenius; < 0: not checked */
    double tolerance;    /* the dtype's tolerance used for `ok` */
    bool ok;             /* checked and within tolerance (true when not checked) */
    double plan_ms;      /* the first fj_plan_create */
    char plan_note[64];  /* compiled / from the disk cache / in memory (CUDA), or "" */
    double host_us;      /* host time of one execute call (CUDA: the launch) */
    char backend[32];
    char kernel[192];    /* CUDA kernel name, or CPU method and blocks (fj_plan_info) */
} cli_result;

/* Plans d on ctx, fills random inputs (seeded), times `repeat` runs after
 * `warmup` (CUDA: events, per run; CPU: the clock), and when ref is not NULL
 * compares with the same problem run on ref. */
fj_status cli_measure(fj_context *ctx, fj_context *ref, const fj_attention_desc *d, int warmup,
                      int repeat, bool with_lse, uint64_t seed, cli_result *r);

/* The problem key, "b1.hq8.hkv8.sq1024.sk1024.d128.bf16.causal_br" (n:
 * FJ_PROBLEM_KEY_MAX). */
void cli_shape_str(const fj_attention_desc *d, char *buf, size_t n);

/* Bytes the problem must move at least (each input once, output once). */
double cli_min_bytes(const fj_attention_desc *d, bool with_lse);

/* bench's kernel column: the CUDA kernel's canonical name (its tiles in it),
 * or the CPU backend's name and its tiles. */
void cli_kernel_of(const fj_plan_info *info, char *out, size_t n);

/* bench's table, one definition for every program that prints its rows
 * (flashjit bench, the conformance driver's --perf): the header line, and a
 * row (err: "-" or the relative error). */
void cli_table_header(void);
void cli_table_row(const char *backend, const char *key, double ms, double tflops, double gbps,
                   int launches, const char *err, const char *kernel);

#endif
