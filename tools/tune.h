/* flashjit tune: the pieces its files share.
 *
 *   cmd_tune.c      the command: contexts, the loop over points, the report
 *   tune_flags.c    flags -> tune_options (form only: lists of known values in range)
 *   tune_output.c   the output file: found, checked writable, read (resume), appended
 *   tune_space.c    each backend's defaults, candidates and rules; the points
 *   tune_compile.c  CUDA candidates compiled ahead on several threads, pruned
 *   tune_check.c    candidates checked against the CPU reference on a small problem
 *   tune_time.c     rotating input sets and timed runs
 *   tune_progress.c the progress line (a terminal) or plain lines (a pipe)
 */
#ifndef FJ_TUNE_H
#define FJ_TUNE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "flashjit.h"
#include "tune/tuning.h"
#include "tune/target.h"

#define TUNE_MAX_VALUES 32   /* values one list flag takes */
#define TUNE_MAX_CONFIGS 64  /* candidates */
#define TUNE_CONFIG_LEN 32   /* as fj_tuning_entry.config */

/* ---- flags (tune_flags.c) ------------------------------------------------- */

/* The problem space and candidates; a count of 0 means "the backend's
 * default" (tune_space_defaults). */
typedef struct tune_space {
    int head_dims[TUNE_MAX_VALUES], n_head_dims;
    fj_dtype dtypes[3];
    int n_dtypes;
    fj_causal causals[3];
    int n_causals;
    int seqlens[TUNE_MAX_VALUES], n_seqlens; /* seqlen_q = seqlen_k; 1: the decode bucket */
    bool decode;                             /* --decode: add the decode bucket */
    int decode_seqlen_k;                     /* keys of a decode point; 0: default */
    int batch_heads;                         /* batch x heads of every point; 0: per point */
    char configs[TUNE_MAX_CONFIGS][TUNE_CONFIG_LEN];
    int n_configs;
} tune_space;

typedef struct tune_options {
    tune_space space;
    fj_backend backend; /* AUTO: whatever a default context picks */
    const char *output; /* NULL: the default tuning file (FLASHJIT_TUNING_FILE, cache dir) */
    int repeat;         /* 0: the backend's default */
    int warmup;         /* -1: the backend's default */
    int jobs;           /* compile threads; 0: one per core */
    bool force;         /* re-tune points the output already has */
    bool verbose;       /* each candidate's check error and timings */
} tune_options;

/* 0: parsed; -1: --help was printed; 2: a usage error was printed. */
int tune_parse_flags(int argc, char **argv, tune_options *o);

/* ---- the output file (tune_output.c) ------------------------------------- */

typedef struct tune_output {
    char *path;
    fj_tuning *existing; /* what the file held at the start; NULL: new file */
    bool needs_newline;  /* its last byte is not '\n' */
} tune_output;

/* flag_value NULL: the default tuning file. 0: usable (its entries read);
 * 1: it cannot be written or is not a tuning file; 2: there is no default.
 * The message, naming --output, is printed. */
int tune_output_open(tune_output *out, const char *flag_value);
/* The entry the file held at the start for key's point, or NULL. */
const fj_tuning_entry *tune_output_find(const tune_output *out, const fj_tuning_entry *key);
/* fj_tuning_append (one write, fsync'd). */
fj_status tune_output_append(tune_output *out, const fj_tuning_entry *e);
void tune_output_close(tune_output *out);

/* ---- backends and points (tune_space.c) ---------------------------------- */

/* Fills what the flags left to the backend: grid axes, candidates, repeat
 * and warm-up counts. */
void tune_space_defaults(tune_options *o, fj_backend b);

/* What the backend cannot take (f32 or a head dim not a multiple of 8 on
 * CUDA, a candidate that does not parse): 2 with the flag named, else 0. */
int tune_space_validate(const tune_space *s, fj_backend b);

typedef struct tune_point {
    fj_attention_desc d; /* the problem timed */
    fj_tuning_entry key; /* the key fields of its entry */
    char label[96];      /* "d128 bf16 causal 4096 (b4 h16)" */
} tune_point;

/* Every point of the space, in the order they are tuned; two points with
 * one key (e.g. both causal alignments) are tuned once (said on stdout).
 * *out is calloc'd; FJ_ERR_OUT_OF_MEMORY only. */
fj_status tune_points_make(const tune_space *s, const fj_tuning_target *t, tune_point **out,
                           int *count);

/* The largest block (rows or keys) any candidate uses: the check problem
 * must be larger, so every tile shape meets a partial edge tile. */
int tune_largest_block(const tune_space *s, fj_backend b);

/* The configuration a plan runs, in the tuning file's syntax, and where it
 * came from ("heuristic", "shipped table", ...). */
fj_status tune_plan_config(fj_context *ctx, const fj_tuning_target *t, const fj_plan *plan,
                           const fj_attention_desc *d, char *config, size_t n, char *from,
                           size_t from_n);

/* The blocks a CPU configuration really uses on problem d (capped to the
 * problem's size), so candidates that coincide are timed once; on CUDA the
 * configuration itself. */
void tune_effective_config(const fj_tuning_target *t, const fj_attention_desc *d,
                           const char *config, char *out, size_t n);

/* Bytes of local memory per thread a CUDA plan's kernel uses (its describe
 * says): register spills. 0 on the CPU or when the describe has no figure. */
int tune_plan_local_bytes(const fj_plan *plan);

/* ---- progress (tune_progress.c) -------------------------------------------- */

typedef struct tune_progress {
    bool tty;                /* stderr is a terminal: one line, rewritten */
    bool drawn;              /* the line is on the screen */
    double start;            /* cli_now() at tune_progress_begin */
    long total, done;        /* steps, shown as done/total */
    double work_total, work_done; /* what the time left is estimated from */
    char phase[32];          /* "compiling", "timing" */
} tune_progress;

/* total steps, together worth work_total (0: one each). */
void tune_progress_begin(tune_progress *p, const char *phase, long total, double work_total);
/* One more step is done, worth work (<= 0: one); what (may be NULL) says
 * what is being done now. Redraws the terminal line; prints nothing
 * otherwise. */
void tune_progress_step(tune_progress *p, double work, const char *what);
/* Redraws the terminal line, or prints a plain line when stderr is not one. */
void tune_progress_milestone(tune_progress *p, const char *what);
/* Removes the line before other output (a no-op without a terminal). */
void tune_progress_clear(tune_progress *p);
/* "1m05s" */
void tune_format_seconds(double s, char *buf, size_t n);

/* ---- kernels and their verdicts (tune_check.c) ------------------------------- */

typedef enum tune_verdict {
    TUNE_UNCHECKED = 0,
    TUNE_PRUNED,  /* cannot run here: a template rule, resources, spills, compile error */
    TUNE_WRONG,   /* ran, gave results outside the tolerance */
    TUNE_CORRECT, /* ran and agreed with the CPU reference */
} tune_verdict;

/* One candidate for one (head dim, dtype, causal kind): what decides whether
 * its code works, independent of the sequence lengths. */
typedef struct tune_kernel {
    int head_dim;
    fj_dtype dtype;
    fj_causal causal;
    char config[TUNE_CONFIG_LEN];
    tune_verdict verdict;
    char reason[512]; /* why pruned or wrong; the measured error when correct */
} tune_kernel;

typedef struct tune_kernels {
    tune_kernel *k;
    int count, cap;
} tune_kernels;

/* The kernel of d's head dim, dtype and causal kind with this config, added
 * (unchecked) when new; NULL when out of memory. */
tune_kernel *tune_kernel_of(tune_kernels *t, const fj_attention_desc *d, const char *config);
void tune_kernels_free(tune_kernels *t);

typedef struct tune_reference tune_reference; /* tune_check.c */

typedef struct tune_checker {
    fj_context *ctx;         /* the backend tuned */
    fj_context *ref;         /* the CPU reference */
    int seqlen_q, seqlen_k;  /* of the check problem */
    tune_reference *refs;    /* one per (head dim, dtype, causal kind), made when first needed */
    int nrefs, cap;
} tune_checker;

void tune_checker_init(tune_checker *c, fj_context *ctx, fj_context *ref, int largest_block);
void tune_checker_free(tune_checker *c);

/* Runs k's configuration on the check problem (batch 1, 2 heads, seqlens a
 * little past the largest block) and sets its verdict: PRUNED when the plan
 * cannot be made (the reason is the error), WRONG or CORRECT by the error
 * against the reference. Returns FJ_OK unless something that is not the
 * candidate's fault failed (memory, the reference). */
fj_status tune_check_kernel(tune_checker *c, tune_kernel *k);

/* ---- compiling ahead (tune_compile.c) ------------------------------------------ */

typedef struct tune_compile_summary {
    int kernels;    /* distinct kernels built */
    int compiled, cached, failed, spilled, pruned_by_rules;
    double wall_seconds, nvrtc_seconds;
} tune_compile_summary;

/* Prunes every unchecked CUDA kernel in t that fj_kernel_desc_check rejects
 * for the device, compiles the rest (each distinct kernel once; with_split:
 * their split-KV variants too) on `jobs` threads through fj_kernel_build
 * and the disk cache, and prunes those that fail or spill. Plan creation
 * then loads them from the cache. FJ_ERR_OUT_OF_MEMORY only. */
fj_status tune_compile_kernels(tune_kernels *t, const fj_tuning_target *target,
                               const char *cache_dir, int jobs, bool with_split,
                               tune_progress *pg, tune_compile_summary *out);

/* ---- timing (tune_time.c) ---------------------------------------------------- */

/* n values uniform in [-1, 1) in dtype t, from a splitmix64 stream: never
 * all zeros, which would let a kernel skip work or hide a wrong result
 * behind exact cancellation. */
void tune_fill_random(void *buf, fj_dtype t, size_t n, uint64_t *state);

#define TUNE_MAX_SETS 16

/* Input sets on the backend's memory, cycled through so that a run does not
 * find its inputs in the cache the previous run left warm. */
typedef struct tune_inputs {
    fj_context *ctx;
    fj_dtype dtype;
    size_t q_bytes, kv_bytes, o_bytes; /* of one set */
    int sets;
    void *q[TUNE_MAX_SETS], *k[TUNE_MAX_SETS], *v[TUNE_MAX_SETS], *o[TUNE_MAX_SETS];
} tune_inputs;

/* Makes (or keeps, when the sizes and dtype match) sets for d: enough that
 * together they exceed twice a 50 MB L2, at least 2, at most TUNE_MAX_SETS,
 * within max_bytes (at least one set). Random data in [-1, 1), never zeros. */
fj_status tune_inputs_prepare(tune_inputs *in, fj_context *ctx, const fj_attention_desc *d,
                              size_t max_bytes, uint64_t seed);
void tune_inputs_free(tune_inputs *in);

typedef struct tune_timing {
    double median, p25, p75, min, max; /* ms */
    int runs;
    bool cut_short; /* far behind the best so far: fewer runs */
} tune_timing;

/* warmup untimed runs, then up to repeat timed ones (fj_plan_time, one run
 * per call, each on the next input set). When cut_ms > 0 and the first
 * timed run takes longer than it, only a few runs are made: the candidate
 * cannot win, and its runs would cost the most. */
fj_status tune_time_plan(const fj_plan *plan, const tune_inputs *in, int warmup, int repeat,
                         double cut_ms, tune_timing *out);

/* The two plans timed alternately, run for run on the same input sets, so
 * clock drift and warm-up affect both alike: the fair comparison of the
 * best candidate with the default. */
fj_status tune_time_duel(const fj_plan *a, const fj_plan *b, const tune_inputs *in, int warmup,
                         int repeat, tune_timing *ta, tune_timing *tb);

#endif
