/* Tuned configurations: a context's tuning (FFTW's "wisdom": its tuning
 * file's entries, then those imported and measured) and the table shipped in
 * the tree. Format in docs/tuning.md: after a version line, one entry per
 * line. Format 2 (written) keys an entry by the problem key's bucketed form,
 * the point:
 *
 *     flashjit-tuning 2
 *     device arch template point config ms date
 *     NVIDIA_H200 sm_90 flash_fwd d128.bf16.causal.sk4096 m128n64w4s2 0.8123 2026-12-02
 *
 * Format 1 (read) spelled the point as four fields:
 *
 *     NVIDIA_H200 sm_90 flash_fwd 128 bf16 causal 4096 m128n64w4s2 0.8123 2026-12-02
 *
 * (spaces in device names written as '_'). Entries for another device are
 * kept but never match; a file of another format version is ignored; a
 * malformed line is reported with its line number and skipped. */
#ifndef FJ_TUNING_H
#define FJ_TUNING_H

#include <stdbool.h>
#include <stddef.h>

#include "context.h"
#include "problem.h"
#include "strbuf.h"

#define FJ_TUNING_FORMAT_VERSION 2 /* written; 1 and 2 are read */

typedef struct fj_tuning_entry {
    char device[96];        /* spaces as '_' */
    char arch[16];          /* "sm_90", or "cpu" */
    char template_name[24]; /* "flash_fwd", "cpu_tiled" */
    /* The point, as fields and as text (fj_tuning_point_text): */
    int head_dim;
    char dtype[8];          /* "bf16" */
    char mask[16];          /* "nomask", "causal", "window", "causal_window" */
    int bucket;             /* fj_tuning_bucket() */
    char point[48];         /* "d128.bf16.causal.sk4096", "d64.f16.nomask.decode" */
    char config[32];        /* template-specific: "m128n64w4s2", "q128k256" */
    double ms;              /* measured time of the tuning problem */
    char date[16];          /* YYYY-MM-DD */
    fj_tiles_source origin; /* TUNING_FILE, SHIPPED_TABLE, IMPORTED or MEASURED */
} fj_tuning_entry;

/* A list of entries that only grows, under its own lock: entries never move,
 * so a pointer to one stays valid until the list is freed, while other
 * threads add. */
typedef struct fj_tuning fj_tuning;

fj_tuning *fj_tuning_create(void); /* NULL: out of memory */
void fj_tuning_free(fj_tuning *t);
int fj_tuning_count(const fj_tuning *t);
/* Entry i (0 <= i < fj_tuning_count(t)) in the order added; NULL outside that. */
const fj_tuning_entry *fj_tuning_entry_at(const fj_tuning *t, int i);
/* Appends a copy of e; FJ_ERR_OUT_OF_MEMORY only. */
fj_status fj_tuning_add(fj_tuning *t, const fj_tuning_entry *e);
/* Appends every entry of from with its origin set to origin, all or none. */
fj_status fj_tuning_add_all(fj_tuning *t, const fj_tuning *from, fj_tiles_source origin);
/* The entry of t with the key fields of key (device, arch, template, point;
 * config, ms and date ignored), the last one when several match; NULL: none. */
const fj_tuning_entry *fj_tuning_find_in(const fj_tuning *t, const fj_tuning_entry *key);
/* Entries in t whose device and arch are these (for `flashjit info`). */
int fj_tuning_count_matching(const fj_tuning *t, const char *device, const char *arch);

/* For a context's list: whether its tuning file was there and read (set by
 * fj_tuning_load), and the lock one measurement at a time holds
 * (FJ_PLAN_MEASURE: measurements of one context take turns, so neither
 * times its candidates while the other loads the machine). */
void fj_tuning_set_file_read(fj_tuning *t);
bool fj_tuning_file_read(const fj_tuning *t);
void fj_tuning_measure_lock(fj_tuning *t);
void fj_tuning_measure_unlock(fj_tuning *t);

/* ---- text ------------------------------------------------------------------ */

/* Parses a tuning file's text (from `origin`, for messages), format 1 or 2;
 * the entries' origin is FJ_TILES_TUNING_FILE. Problems (bad lines, another
 * version) go to notes, one line each; only allocation failure is an error. */
fj_status fj_tuning_parse(const char *text, const char *origin, fj_tuning **out, fj_strbuf *notes);

/* The same, all or nothing: FJ_ERR_INVALID_ARGUMENT (naming `name`, the line
 * and the rule) for text that is not a tuning file of format 1 or 2 or has a
 * malformed entry line. */
fj_status fj_tuning_parse_strict(const char *text, const char *name, fj_tuning **out);

/* Appends t as a format 2 tuning file to out: the version line, a comment
 * naming the columns, and each point's winning entry (the last for its key)
 * once, in the order the points first appear. */
void fj_tuning_format(const fj_tuning *t, fj_strbuf *out);

/* The format version a tuning file's text declares (its first line that is
 * not blank or a comment); 0 when that line is not a version line. */
int fj_tuning_text_version(const char *text);

/* One entry line (with its '\n') in format `version` (1 or 2). */
void fj_tuning_format_entry(const fj_tuning_entry *e, int version, char *line, size_t n);

/* ---- keys ------------------------------------------------------------------- */

/* The key fields of the entry for problem p on (device, arch, template):
 * point and its fields set, config, ms and date left empty. */
void fj_tuning_key_for(const fj_problem *p, const char *device, const char *arch,
                       const char *template_name, fj_tuning_entry *key);

/* The sequence-length bucket of a problem: decode-like (seqlen_q <= 16)
 * problems are bucket 1; others the power of two nearest seqlen_k, clamped
 * to [512, 32768]. */
int fj_tuning_bucket(int seqlen_q, int seqlen_k);

/* The point's text from e's head_dim, dtype, mask and bucket:
 * "d<head_dim>.<dtype>.<mask kind>.sk<bucket>", or ".decode" for bucket 1. */
void fj_tuning_point_text(const fj_tuning_entry *e, char *buf, size_t n);

/* Parses a point's text into e's head_dim, dtype, mask, bucket and point;
 * NULL, or what is wrong with it. */
const char *fj_tuning_point_parse(const char *text, fj_tuning_entry *e);

/* Device name with spaces (and anything outside [A-Za-z0-9._:-]) as '_'. */
void fj_tuning_device_token(const char *name, char *out, size_t n);

/* ---- a context's tuning -------------------------------------------------------- */

/* Makes ctx->tuning and reads ctx->tuning_file into it (a missing file is no
 * error); appends a line about it to describe: path, entries, problems. */
fj_status fj_tuning_load(fj_context *ctx, fj_strbuf *describe);

/* The entry for key: the context's tuning first, then the shipped table.
 * NULL: none. *from says which (the entry's origin). The entry stays valid
 * for the context's life. */
const fj_tuning_entry *fj_tuning_find(const fj_context *ctx, const fj_tuning_entry *key,
                                      fj_tiles_source *from);

/* "the tuning file", "the shipped tuning table", "the imported", "the
 * measured": for "tuned: <this> entry for ..." in describe texts. */
const char *fj_tuning_source_text(fj_tiles_source from);

/* The table shipped in the tree (src/tune/tables/, embedded at build time). */
const fj_tuning *fj_tuning_shipped(void);

/* What `flashjit info` prints: the context's tuning file (NULL: none) and
 * the context's tuning. */
const char *fj_context_tuning_file(const fj_context *ctx);
const fj_tuning *fj_context_tuning(const fj_context *ctx);

/* ---- files --------------------------------------------------------------------- */

/* Checks that path can take appended entries, before any measuring: an
 * existing regular file that is writable and a tuning file of format 1 or
 * 2, or a new file in a writable directory. FJ_ERR_IO naming the path and
 * why not. *existing (may be NULL) receives what the file holds (NULL for a
 * new file); notes its malformed lines. */
fj_status fj_tuning_file_check(const char *path, fj_tuning **existing, fj_strbuf *notes);

/* Appends one entry to path in the file's format version (2 for a new or
 * empty file, which gets the version line first), ending a last line left
 * without its newline first (an interrupted writer's: it stays one
 * malformed line instead of swallowing this entry). One write, fsync'd, so
 * an interrupted tuner keeps what it measured. */
fj_status fj_tuning_append(const char *path, const fj_tuning_entry *e);

/* A file's whole text (malloc'd, NUL-terminated) in *text and its length;
 * 0, or an errno (EFBIG past 64 MiB), or FJ_TUNING_NOT_REGULAR for anything
 * but a regular file (a FIFO, a device, a directory), which is never read and
 * never blocks the call. */
#define FJ_TUNING_NOT_REGULAR (-1)
int fj_tuning_read_file(const char *path, char **text, size_t *len);

/* What a nonzero fj_tuning_read_file result means, for messages. */
const char *fj_tuning_read_error(int err);

#endif
