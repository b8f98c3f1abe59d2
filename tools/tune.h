/* flashjit tune: a thin command over the library's tuner (src/tune/tuner.h):
 *
 *   cmd_tune.c      the command: output file, contexts, the loop over problems, printing
 *   tune_flags.c    flags -> tune_options (form only: lists of known values in range)
 *   tune_points.c   the problems tuned: a grid (tools/grids/) or the axes' product
 *   tune_progress.c the progress line (a terminal) or plain lines (a pipe)
 */
#ifndef FJ_TUNE_H
#define FJ_TUNE_H

#include <stdbool.h>
#include <stddef.h>

#include "flashjit.h"

#define TUNE_MAX_VALUES 32           /* values one list flag takes */
#define TUNE_MAX_CONFIGS 64          /* candidates */
#define TUNE_CONFIG_LEN 32           /* as fj_plan_info.tiles */
#define TUNE_DEFAULT_MAX_SPREAD 50.0 /* --max-spread, % */
/* The largest head dim the CUDA kernels take: src/cuda/jit/kernel_desc.h's
   FJ_CUDA_MAX_HEAD_DIM (which the CLI may not include; cmd_compile_all.c,
   which may, asserts they agree). The CPU backends take FJ_MAX_HEAD_DIM. */
#define TUNE_CUDA_MAX_HEAD_DIM 256

/* ---- flags (tune_flags.c) ------------------------------------------------- */

/* The problem space and candidates. Without axis flags the problems are the
 * grid's rows (--grid, else the backend's "default" grid); with any, the
 * product of the axes, an axis not given taking the values of the default
 * grid. */
typedef struct tune_space {
    const char *grid; /* --grid; NULL or "default": the backend's */
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
    int n_configs; /* 0: the backend's candidates */
} tune_space;

typedef struct tune_options {
    tune_space space;
    fj_backend backend; /* AUTO: whatever a default context picks */
    const char *output; /* --output FILE; NULL: the default tuning file (FLASHJIT_TUNING_FILE,
                           cache dir) when write, else none: a report only */
    bool write;         /* --write: append to the default tuning file */
    double max_spread;  /* --max-spread: % of (max - min) / median over which a point's
                           timing is reported as too scattered to trust (default 50) */
    int repeat;         /* 0: the backend's default */
    int warmup;         /* -1: the backend's default */
    int jobs;           /* compile threads; 0: one per core */
    double time_limit;  /* seconds per problem; 0: none */
    bool force;         /* re-tune points the output already has */
    bool verbose;       /* each candidate's check error and timings */
} tune_options;

/* 0: parsed; -1: --help was printed; 2: a usage error was printed. */
int tune_parse_flags(int argc, char **argv, tune_options *o);

/* What the backend cannot take (f32 or a head dim not a multiple of 8 on
 * CUDA, a candidate that is not its tiles): 2 with the flag named, else 0.
 * Needs no device: checked before any when the backend is named. */
int tune_space_validate(const tune_space *s, fj_backend b);

/* ---- problems (tune_points.c) --------------------------------------------- */

typedef struct tune_point {
    fj_attention_desc d;          /* the problem timed */
    char key[FJ_PROBLEM_KEY_MAX]; /* its problem key */
    char point[48];               /* its tuning point (the key's bucketed form) */
} tune_point;

/* Every problem of the space for backend b, in the order they are tuned;
 * two with one tuning point (both causal alignments, two seqlens in one
 * bucket) are tuned once (a note on stdout). 0, or 2 for a bad grid (the
 * message printed), 1 when out of memory. *out is malloc'd. */
int tune_points_make(const tune_space *s, fj_backend b, tune_point **out, int *count);

/* ---- progress (tune_progress.c) -------------------------------------------- */

typedef struct tune_progress {
    bool tty;                     /* stderr is a terminal: one line, rewritten */
    bool drawn;                   /* the line is on the screen */
    double start;                 /* cli_now() at tune_progress_begin */
    long total, done;             /* steps, shown as done/total */
    double work_total, work_done; /* what the time left is estimated from */
    char phase[32];               /* "compiling", "timing" */
    char command[16];             /* the plain lines' "flashjit <command>:" ("tune") */
} tune_progress;

/* total steps, together worth work_total (0: one each). */
void tune_progress_begin(tune_progress *p, const char *phase, long total, double work_total);
/* One more step is done, worth work (<= 0: one); what (may be NULL) says
 * what is being done now. Redraws the terminal line; prints nothing
 * otherwise. */
void tune_progress_step(tune_progress *p, double work, const char *what);
/* Redraws the terminal line, or prints a plain line when stderr is not one. */
void tune_progress_milestone(tune_progress *p, const char *what);
/* Names the command the plain lines start with (after _begin; "tune" by
 * default): flashjit bench shares this progress line. */
void tune_progress_command(tune_progress *p, const char *command);
/* Removes the line before other output (a no-op without a terminal). */
void tune_progress_clear(tune_progress *p);
/* "1m05s" */
void tune_format_seconds(double s, char *buf, size_t n);

#endif
