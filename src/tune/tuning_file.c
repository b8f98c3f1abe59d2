/* Tuning files on disk and a context's tuning: reading the context's file at
 * creation, the lookup plans make (the context's entries, then the shipped
 * table), checking a file before a tuner appends to it, appending. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "embedded.h"
#include "fsize_signal.h"
#include "log.h"
#include "status.h"
#include "tune/tuning.h"

/* A tuning file is a few hundred lines; anything this large is not one. */
#define MAX_FILE_BYTES ((size_t)64 << 20)

/* Read as the kernel cache reads its entries: only a regular file, opened
 * without blocking (a FIFO at the path would otherwise wait for a writer for
 * ever), its size checked before anything is allocated, and at most the
 * limit read even if it grows meanwhile. */
int fj_tuning_read_file(const char *path, char **text, size_t *len)
{
    *text = NULL;
    *len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) return errno;
    struct stat st;
    int err = 0;
    if (fstat(fd, &st) != 0) err = errno;
    else if (!S_ISREG(st.st_mode)) err = FJ_TUNING_NOT_REGULAR;
    else if ((uint64_t)st.st_size > MAX_FILE_BYTES) err = EFBIG;
    /* One byte more than the size: a file that grew since fstat is seen to,
       and read on in steps up to the limit. */
    size_t cap = err ? 0 : (size_t)st.st_size + 1, n = 0;
    char *buf = err ? NULL : malloc(cap + 1);
    if (!err && !buf) err = ENOMEM;
    while (!err) {
        if (n == cap) {
            size_t grown = cap * 2 < MAX_FILE_BYTES + 1 ? cap * 2 : MAX_FILE_BYTES + 1;
            if (n > MAX_FILE_BYTES) {
                err = EFBIG;
                break;
            }
            char *b = realloc(buf, grown + 1);
            if (!b) {
                err = ENOMEM;
                break;
            }
            buf = b;
            cap = grown;
        }
        ssize_t got = read(fd, buf + n, cap - n);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) err = errno;
        else if (got == 0) break;
        else n += (size_t)got;
    }
    close(fd);
    if (err) {
        free(buf);
        return err;
    }
    buf[n] = '\0';
    *text = buf;
    *len = n;
    return 0;
}

const char *fj_tuning_read_error(int err)
{
    switch (err) {
    case FJ_TUNING_NOT_REGULAR: return "not a regular file (a FIFO, device or directory)";
    case EFBIG: return "larger than the 64 MiB a tuning file may be";
    case ENOENT: return "not present";
    default: return strerror(err);
    }
}

/* ---- the shipped table ------------------------------------------------------ */

static pthread_once_t shipped_once = PTHREAD_ONCE_INIT;
static fj_tuning *shipped;

static void load_shipped(void)
{
    fj_tuning *all = fj_tuning_create();
    if (!all) return;
    for (const fj_embedded_file *f = fj_tuning_tables; f->name; f++) {
        fj_tuning *one;
        fj_strbuf notes;
        fj_strbuf_init(&notes);
        if (fj_tuning_parse(f->text, f->name, &one, &notes) == FJ_OK) {
            fj_tuning_add_all(all, one, FJ_TILES_SHIPPED_TABLE);
            fj_tuning_free(one);
        }
        if (notes.len) FJ_INFO("shipped tuning table: %s", notes.data);
        fj_strbuf_free(&notes);
    }
    shipped = all;
}

const fj_tuning *fj_tuning_shipped(void)
{
    pthread_once(&shipped_once, load_shipped);
    return shipped;
}

/* ---- a context's tuning --------------------------------------------------------- */

const fj_tuning_entry *fj_tuning_find(const fj_context *ctx, const fj_tuning_entry *key,
                                      fj_tiles_source *from)
{
    const fj_tuning_entry *e = fj_tuning_find_in(ctx->tuning, key);
    if (!e) e = fj_tuning_find_in(fj_tuning_shipped(), key);
    *from = e ? e->origin : FJ_TILES_HEURISTIC;
    return e;
}

const char *fj_tuning_source_text(fj_tiles_source from)
{
    switch (from) {
    case FJ_TILES_SHIPPED_TABLE: return "the shipped tuning table";
    case FJ_TILES_IMPORTED: return "the imported";
    case FJ_TILES_MEASURED: return "the measured";
    default: return "the tuning file";
    }
}

const char *fj_context_tuning_file(const fj_context *ctx) { return ctx->tuning_file; }
const fj_tuning *fj_context_tuning(const fj_context *ctx) { return ctx->tuning; }

fj_status fj_tuning_load(fj_context *ctx, fj_strbuf *describe)
{
    if (!(ctx->tuning = fj_tuning_create()))
        return fj_fail(FJ_ERR_OUT_OF_MEMORY, "out of memory for the context's tuning");
    int shipped_n = fj_tuning_count(fj_tuning_shipped());
    if (!ctx->tuning_file) {
        fj_strbuf_printf(describe, "tuning file: none; shipped table: %d entries\n", shipped_n);
        return FJ_OK;
    }
    char *text;
    size_t len;
    int err = fj_tuning_read_file(ctx->tuning_file, &text, &len);
    if (err == ENOMEM)
        return fj_fail(FJ_ERR_OUT_OF_MEMORY, "out of memory reading %s", ctx->tuning_file);
    if (err) {
        /* Anything but a missing file is worth saying: the file is skipped
           and the context works from the shipped table. */
        if (err != ENOENT)
            FJ_INFO("tuning file %s skipped: %s", ctx->tuning_file, fj_tuning_read_error(err));
        fj_strbuf_printf(describe, "tuning file: %s (%s%s); shipped table: %d entries\n",
                         ctx->tuning_file,
                         err == ENOENT ? "" : "skipped: ", fj_tuning_read_error(err), shipped_n);
        return FJ_OK;
    }
    fj_strbuf notes;
    fj_strbuf_init(&notes);
    fj_tuning *read;
    fj_status s = fj_tuning_parse(text, ctx->tuning_file, &read, &notes);
    free(text);
    if (!s) s = fj_tuning_add_all(ctx->tuning, read, FJ_TILES_TUNING_FILE);
    if (s == FJ_OK) {
        fj_tuning_set_file_read(ctx->tuning);
        fj_strbuf_printf(describe, "tuning file: %s (%d entries); shipped table: %d entries\n",
                         ctx->tuning_file, fj_tuning_count(read), shipped_n);
        if (notes.len) fj_strbuf_printf(describe, "tuning file problems:\n%s", notes.data);
    }
    fj_tuning_free(read);
    fj_strbuf_free(&notes);
    return s;
}

/* ---- appending ---------------------------------------------------------------- */

static fj_status io_fail(const char *path, const char *what, int err)
{
    return fj_fail(FJ_ERR_IO, "%s: %s%s%s", path, what, err ? ": " : "", err ? strerror(err) : "");
}

/* 0 when path's directory exists and takes a new file, else an errno. */
static int directory_writable(const char *path)
{
    char *dir = strdup(path);
    if (!dir) return ENOMEM;
    char *slash = strrchr(dir, '/');
    if (!slash) strcpy(dir, ".");
    else if (slash == dir) slash[1] = '\0';
    else *slash = '\0';
    struct stat st;
    int err = 0;
    if (stat(dir, &st) != 0) err = errno;
    else if (!S_ISDIR(st.st_mode)) err = ENOTDIR;
    else if (access(dir, W_OK | X_OK)) err = errno;
    free(dir);
    return err;
}

fj_status fj_tuning_file_check(const char *path, fj_tuning **existing, fj_strbuf *notes)
{
    if (existing) *existing = NULL;
    struct stat st;
    if (stat(path, &st) != 0) {
        if (errno != ENOENT) return io_fail(path, "cannot use it", errno);
        int err = directory_writable(path);
        return err ? io_fail(path, "cannot create it", err) : FJ_OK;
    }
    if (!S_ISREG(st.st_mode)) return io_fail(path, "not a regular file", 0);
    if (access(path, W_OK)) return io_fail(path, "cannot write it", errno);
    char *text;
    size_t len;
    int err = fj_tuning_read_file(path, &text, &len);
    if (err == ENOMEM) return fj_fail(FJ_ERR_OUT_OF_MEMORY, "out of memory reading %s", path);
    if (err) return fj_fail(FJ_ERR_IO, "%s: cannot read it: %s", path, fj_tuning_read_error(err));
    fj_status s = FJ_OK;
    int v = len ? fj_tuning_text_version(text) : FJ_TUNING_FORMAT_VERSION;
    if (v != 1 && v != 2) {
        /* Someone's file: appending would corrupt their data. */
        s = fj_fail(FJ_ERR_IO,
                    "%s is not a flashjit tuning file this version writes (%s); refusing to "
                    "append to it",
                    path,
                    v ? "another format version" : "its first line is not 'flashjit-tuning N'");
    } else if (existing) {
        s = fj_tuning_parse(text, path, existing, notes);
    }
    free(text);
    return s;
}

fj_status fj_tuning_append(const char *path, const fj_tuning_entry *e)
{
    char *text = NULL;
    size_t len = 0;
    int err = fj_tuning_read_file(path, &text, &len);
    if (err == ENOMEM) return fj_fail(FJ_ERR_OUT_OF_MEMORY, "out of memory reading %s", path);
    if (err && err != ENOENT)
        return fj_fail(FJ_ERR_IO, "%s: cannot read the tuning file: %s", path,
                       fj_tuning_read_error(err));
    int version = len ? fj_tuning_text_version(text) : 0;
    bool needs_newline = len && text[len - 1] != '\n';
    free(text);
    if (len && version != 1 && version != 2)
        return fj_fail(FJ_ERR_IO,
                       "%s is not a flashjit tuning file of format 1 or 2; not appending to it",
                       path);

    char line[1024];
    int n = 0;
    if (!len)
        n = snprintf(line, sizeof line,
                     "# flashjit tuning file (docs/tuning.md)\n"
                     "flashjit-tuning %d\n"
                     "# device arch template point config ms date\n",
                     FJ_TUNING_FORMAT_VERSION);
    else if (needs_newline)
        line[n++] = '\n'; /* an interrupted writer's last line stays one bad line */
    fj_tuning_format_entry(e, len ? version : FJ_TUNING_FORMAT_VERSION, line + n,
                           sizeof line - (size_t)n);
    n += (int)strlen(line + n);

    /* O_NONBLOCK: a FIFO put there since the read above fails (ENXIO)
       instead of waiting for a reader. */
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NONBLOCK, 0644);
    if (fd < 0) return io_fail(path, "cannot open the tuning file", errno);
    fj_status s = FJ_OK;
    fj_fsize_guard guard; /* past a file-size limit: EFBIG, not SIGXFSZ */
    fj_fsize_guard_begin(&guard);
    ssize_t put = write(fd, line, (size_t)n);
    fj_fsize_guard_end(&guard);
    if (put != n) s = io_fail(path, "cannot write the tuning file", put < 0 ? errno : EIO);
    else if (fsync(fd) != 0) s = io_fail(path, "cannot write the tuning file", errno);
    close(fd);
    return s;
}
