/* Problems for the CLI: flags -> desc, random inputs on the backend's memory,
 * timed runs, and the check against the CPU reference. Shared by run, bench
 * and demo so all three measure the same way. */
#ifndef FJ_CLI_PROBLEM_H
#define FJ_CLI_PROBLEM_H

#include <stdbool.h>
#include <stdint.h>

#include "cli.h"
#include "flashjit.h"

/* A variable-length batch's sequences (--varlen): n sequences, sequence b
 * of len_q[b] query and len_k[b] key tokens, packed in that order. */
typedef struct cli_varlen {
    int n; /* 0: a dense problem */
    int *len_q, *len_k;
} cli_varlen;

typedef struct cli_problem_flags {
    fj_attention_desc d;
    fj_backend backend;
    int repeat, warmup;
    bool check, lse;
    uint64_t seed;
    cli_varlen varlen; /* --varlen: d is varlen (batch, seqlen_q, seqlen_k set from it) */
    /* --page-size sets d's FJ_FEATURE_PAGED_KV and page_size (the pools'
       page counts: cli_paged_layout); --kv-lens, each sequence's KV length
       (nkv of them, 0: not given); --shuffle-pages */
    int *kv_lens, nkv;
    bool shuffle_pages;
} cli_problem_flags;

/* Defaults: batch 1, heads 8/8, seqlen 1024/1024, head_dim 128, bf16, no mask,
 * backend auto, 20 repeats after 3 warm-up runs, no check, not varlen, not
 * paged. */
void cli_problem_flags_init(cli_problem_flags *f);
/* Frees what the flags' parsing allocated (--varlen's and --kv-lens's
 * lengths). */
void cli_problem_flags_free(cli_problem_flags *f);

/* The sequences of a varlen or paged problem into seqs (malloc'd; free with
 * cli_varlen_free): --varlen's items; else --kv-lens's lengths, each with
 * seqlen_q queries; else batch sequences of seqlen_q queries and seqlen_k
 * keys. n 0 for a problem that is neither. false when out of memory. */
bool cli_problem_sequences(const cli_problem_flags *f, cli_varlen *seqs);
void cli_varlen_free(cli_varlen *v);

/* A paged desc's pools for the sequences vl (NULL or none: batch sequences
 * of seqlen_k keys): num_pages the pages they use (each sequence's keys
 * from a page of its own, at least 1), max_pages the table's columns for
 * the longest of seqlen_k and the sequences' KV lengths (so a length past
 * seqlen_k reaches the library, which names it), block_table_stride 0. */
void cli_paged_layout(fj_attention_desc *d, const cli_varlen *vl);

/* The problem flags as a cli_option table (cli.h), their ids from
 * CLI_PROBLEM_OPTION_ID up: a command chains it after its own table. */
#define CLI_PROBLEM_OPTION_ID 1000
const cli_option *cli_problem_options(void);

/* Applies the option cli_next_option returned (id, its flag and value) if it
 * is a problem flag: 1 when it was, 0 when it is not a problem flag, -1 on a
 * bad value (message printed, naming flag). */
int cli_problem_option(const char *cmd, int id, const char *flag, const char *val,
                       cli_problem_flags *f);

/* Help text for the problem flags. */
const char *cli_problem_flags_help(void);

typedef struct cli_result {
    double ms_median, ms_min, ms_max;
    int runs;
    double tflops;      /* FLOP convention of fj_attention_flops() */
    double gbps;        /* fewest bytes: q, k, v read once, o (and lse) written once */
    int launches;       /* kernel launches per call (CUDA), 0 on CPU */
    double rel_err;     /* vs the CPU reference, relative Frobenius; < 0: not checked */
    double tolerance;   /* the dtype's tolerance used for `ok` */
    bool ok;            /* checked and within tolerance (true when not checked) */
    double plan_ms;     /* the first fj_plan_create */
    char plan_note[64]; /* compiled / from the disk cache / in memory (CUDA), or "" */
    double host_us;     /* host time of one execute call (CUDA: the launch) */
    char backend[32];
    /* CUDA kernel name, or CPU method and blocks (fj_plan_info): room for
       both of fj_plan_info's fields whole, so the text is never cut */
    char kernel[sizeof(((fj_plan_info *)0)->kernel) + sizeof(((fj_plan_info *)0)->tiles) + 1];
    char *description; /* fj_plan_describe's whole text, malloc'd (cli_result_free);
                            NULL when no plan was made or out of memory */
} cli_result;

/* Frees what cli_measure allocated in r (after a failure too). */
void cli_result_free(cli_result *r);

/* Plans d on ctx, fills random inputs (seeded), times `repeat` runs after
 * `warmup` (CUDA: events, per run; CPU: the clock), and when ref is not NULL
 * compares with the same problem run on ref. */
fj_status cli_measure(fj_context *ctx, fj_context *ref, const fj_attention_desc *d, int warmup,
                      int repeat, bool with_lse, uint64_t seed, cli_result *r);

/* cli_measure of a variable-length batch or a paged KV cache (d has
 * FJ_FEATURE_VARLEN, FJ_FEATURE_PAGED_KV or both, and batch vl->n; vl NULL
 * or vl->n 0: batch sequences of seqlen_q queries and seqlen_k keys, as a
 * problem key names; a dense d: vl is not read). Varlen: the packed tensors,
 * cu_seqlens_q (and cu_seqlens_k unless paged) from vl. Paged: sequence b's
 * keys vl->len_k[b] (seqused_k), in pages of its own from the pools (tail
 * rows of a last page NaN when checked, unused block-table entries -1),
 * those pages in pool order, or shuffled from seed with shuffle_pages;
 * queries dense [batch, seqlen_q] unless varlen too. TFLOP/s and GB/s from
 * each sequence's own lengths; the check runs each sequence on ref as the
 * dense problem of its lengths, from the keys before paging (a sequence
 * without keys: its rows are 0). */
fj_status cli_measure_ex(fj_context *ctx, fj_context *ref, const fj_attention_desc *d,
                         const cli_varlen *vl, bool shuffle_pages, int warmup, int repeat,
                         bool with_lse, uint64_t seed, cli_result *r);

/* fj_attention_flops of a varlen batch, counted per sequence (each halved
 * when causal with as many queries as keys, as fj_attention_flops). */
double cli_varlen_flops(const fj_attention_desc *d, const int *len_q, const int *len_k, int n);

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
