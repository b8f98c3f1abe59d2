/* Tuned configurations: the tuning file (FFTW's "wisdom") and the table that
 * ships in the tree. Format in docs/tuning.md: after a version line
 * "flashjit-tuning 1", one entry per line,
 *
 *     device arch template head_dim dtype mask bucket config ms date
 *     NVIDIA_H200 sm_90 flash_fwd 128 bf16 causal 4096 m128n64w4s2 0.8123 2026-12-02
 *
 * (spaces in device names written as '_'). Entries for another device are
 * kept but never match; a file of another format version is ignored; a
 * malformed line is reported with its line number and skipped. */
#ifndef FJ_TUNING_H
#define FJ_TUNING_H

#include <stddef.h>

#include "context.h"
#include "problem.h"
#include "strbuf.h"

#define FJ_TUNING_FORMAT_VERSION 1

typedef struct fj_tuning_entry {
    char device[96];   /* spaces as '_' */
    char arch[16];     /* "sm_90", or "cpu" */
    char template_name[24]; /* "flash_fwd", "cpu_tiled" */
    int head_dim;
    char dtype[8];     /* "bf16" */
    char mask[16];     /* "nomask", "causal", "window", "causal_window" */
    int bucket;        /* fj_tuning_bucket() */
    char config[32];   /* template-specific: "m128n64w4s2", "q128k256" */
    double ms;         /* measured time of the tuning problem */
    char date[16];     /* YYYY-MM-DD */
} fj_tuning_entry;

typedef struct fj_tuning fj_tuning;

/* Parses text (from `origin`, for messages). Problems (bad lines, another
 * version) go to notes, one line each; only allocation failure is an error. */
fj_status fj_tuning_parse(const char *text, const char *origin, fj_tuning **out, fj_strbuf *notes);

/* Reads ctx->tuning_file (a missing file is no error) into ctx->tuning and
 * appends a line about it to describe: path, entries, problems. */
fj_status fj_tuning_load(fj_context *ctx, fj_strbuf *describe);
void fj_tuning_free(struct fj_tuning *t);

/* The entry matching every key field of `key` (config, ms and date
 * ignored): the user's file first, then the shipped table. NULL: none.
 * *from says which (FJ_TILES_TUNING_FILE or FJ_TILES_SHIPPED_TABLE). */
const fj_tuning_entry *fj_tuning_find(const fj_context *ctx, const fj_tuning_entry *key,
                                      fj_tiles_source *from);

/* "the tuning file" or "the shipped tuning table", for describe texts. */
const char *fj_tuning_source_text(fj_tiles_source from);

/* The key fields of the entry for problem p on (device token, arch,
 * template); config, ms and date are left empty. */
void fj_tuning_key_for(const fj_problem *p, const char *device, const char *arch,
                       const char *template_name, fj_tuning_entry *key);

/* The entry of t (a parsed file, not the context's lookup chain) with the
 * key fields of key, the last one when several match; NULL: none. For the
 * tuner, which skips points its output file already has. */
const fj_tuning_entry *fj_tuning_find_in(const fj_tuning *t, const fj_tuning_entry *key);

/* Entries in t whose device and arch are these (for `flashjit info`). */
int fj_tuning_count_matching(const fj_tuning *t, const char *device, const char *arch);
int fj_tuning_count(const fj_tuning *t);
/* Entry i (0 <= i < fj_tuning_count(t)) in file order; NULL outside that. */
const fj_tuning_entry *fj_tuning_entry_at(const fj_tuning *t, int i);

/* The sequence-length bucket of a problem: decode-like (seqlen_q <= 16)
 * problems are bucket 1; others the power of two nearest seqlen_k, clamped
 * to [512, 32768]. */
int fj_tuning_bucket(int seqlen_q, int seqlen_k);

/* Device name with spaces (and anything outside [A-Za-z0-9._-]) as '_'. */
void fj_tuning_device_token(const char *name, char *out, size_t n);

/* Appends one entry to path (creating it with the version line), flushed
 * and fsync'd so an interrupted tuner keeps what it measured. */
fj_status fj_tuning_append(const char *path, const fj_tuning_entry *e);

/* The table shipped in the tree (tuning/ at build time). */
const fj_tuning *fj_tuning_shipped(void);

#endif
