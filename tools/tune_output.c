/* flashjit tune's output file: found the way a default context finds its
 * tuning file, checked before any work (so an unwritable path fails in a
 * second, not after minutes of measuring), read for the points it already
 * has (resuming), and appended to one fsync'd line per point. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "paths.h"
#include "strbuf.h"
#include "tune.h"

#define CMD "tune"
/* As the library's reader: a tuning file is a few hundred lines. */
#define MAX_FILE_BYTES ((size_t)64 << 20)

/* err 0: what says it all. */
static int io_error(const char *what, const char *path, int err)
{
    fprintf(stderr, "flashjit %s: --output %s: %s%s%s\n", CMD, path, what, err ? ": " : "",
            err ? strerror(err) : "");
    return 1;
}

/* The default: FLASHJIT_TUNING_FILE, else tuning.txt in the cache
 * directory (paths.c, the same resolution fj_context_create makes). */
static int default_path(char **path)
{
    char *dir = NULL, *note = NULL;
    fj_status s = fj_cache_dir_resolve(NULL, &dir, &note);
    if (!s) s = fj_tuning_path_resolve(NULL, dir, path);
    int rc = 0;
    if (s) rc = cli_fail(CMD, s);
    else if (!*path)
        rc = cli_usage_error(CMD,
                             "no --output FILE given and no default tuning file: "
                             "FLASHJIT_TUNING_FILE is unset and the cache directory is off (%s)",
                             note ? note : "no cache directory");
    free(dir);
    free(note);
    return rc;
}

/* The file's text (NUL-terminated, malloc'd) into *text; 0 or an errno. */
static int read_all(const char *path, char **text, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return errno;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    int err = 0;
    while (buf && !err) {
        if (n + 1 == cap) {
            char *b = cap >= MAX_FILE_BYTES ? NULL : realloc(buf, cap * 2);
            if (!b) {
                err = cap >= MAX_FILE_BYTES ? EFBIG : ENOMEM;
                break;
            }
            buf = b;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (!got) err = ferror(f) ? EIO : -1;
    }
    fclose(f);
    if (!buf) return ENOMEM;
    if (err > 0) {
        free(buf);
        return err;
    }
    buf[n] = '\0';
    *text = buf;
    *len = n;
    return 0;
}

/* Parses what the file holds; refuses a file that is not a tuning file
 * (appending would corrupt someone's data), reports malformed lines. */
static int read_existing(tune_output *out)
{
    char *text = NULL;
    size_t len = 0;
    int err = read_all(out->path, &text, &len);
    if (err) return io_error("cannot read it", out->path, err);
    fj_strbuf notes;
    fj_strbuf_init(&notes);
    fj_status s = fj_tuning_parse(text, out->path, &out->existing, &notes);
    out->needs_newline = len > 0 && text[len - 1] != '\n';
    free(text);
    int rc = 0;
    if (s) {
        rc = cli_fail(CMD, s);
    } else if (notes.data && strstr(notes.data, "file ignored")) {
        fprintf(stderr,
                "flashjit %s: --output %s is not a flashjit tuning file this version writes "
                "(%.*s); refusing to append to it\n",
                CMD, out->path, (int)strcspn(notes.data, "\n"), notes.data);
        rc = 1;
    } else if (notes.data) {
        printf("note: %s", notes.data);
    }
    fj_strbuf_free(&notes);
    return rc;
}

/* 0 when path can be appended to (or created), else 1 with the reason. */
static int check_writable(tune_output *out)
{
    struct stat st;
    if (stat(out->path, &st) == 0) {
        if (!S_ISREG(st.st_mode)) return io_error("not a regular file", out->path, 0);
        if (access(out->path, W_OK)) return io_error("cannot write it", out->path, errno);
        return read_existing(out);
    }
    if (errno != ENOENT) return io_error("cannot use it", out->path, errno);
    /* A new file: its directory must exist and take a new file. */
    char *dir = strdup(out->path);
    if (!dir) return io_error("cannot use it", out->path, ENOMEM);
    char *slash = strrchr(dir, '/');
    if (!slash) strcpy(dir, ".");
    else if (slash == dir) slash[1] = '\0';
    else *slash = '\0';
    int rc = 0;
    if (stat(dir, &st) != 0) rc = io_error("cannot create it", out->path, errno);
    else if (!S_ISDIR(st.st_mode)) rc = io_error("cannot create it", out->path, ENOTDIR);
    else if (access(dir, W_OK | X_OK)) rc = io_error("cannot create it", out->path, errno);
    free(dir);
    return rc;
}

int tune_output_open(tune_output *out, const char *flag_value)
{
    memset(out, 0, sizeof *out);
    if (flag_value) {
        if (!(out->path = strdup(flag_value))) return io_error("cannot use it", flag_value, ENOMEM);
    } else {
        int rc = default_path(&out->path);
        if (rc) return rc;
    }
    return check_writable(out);
}

const fj_tuning_entry *tune_output_find(const tune_output *out, const fj_tuning_entry *key)
{
    return out->existing ? fj_tuning_find_in(out->existing, key) : NULL;
}

/* A last line without its newline (a writer stopped mid-line) is ended
 * first, so it stays one malformed line, skipped with a note, instead of
 * swallowing the entry appended after it. */
static fj_status end_last_line(tune_output *out)
{
    int fd = open(out->path, O_WRONLY | O_APPEND | O_CLOEXEC);
    if (fd < 0) return FJ_ERR_IO;
    bool ok = write(fd, "\n", 1) == 1 && fsync(fd) == 0;
    close(fd);
    out->needs_newline = !ok;
    return ok ? FJ_OK : FJ_ERR_IO;
}

fj_status tune_output_append(tune_output *out, const fj_tuning_entry *e)
{
    if (out->needs_newline && end_last_line(out)) {
        fprintf(stderr, "flashjit %s: --output %s: cannot end its last line: %s\n", CMD,
                out->path, strerror(errno));
        return FJ_ERR_IO;
    }
    return fj_tuning_append(out->path, e);
}

void tune_output_close(tune_output *out)
{
    fj_tuning_free(out->existing);
    free(out->path);
    memset(out, 0, sizeof *out);
}
