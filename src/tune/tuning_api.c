/* The public tuning calls (include/flashjit.h, "Tuning: import and export"):
 * a context's tuning to text or a file, and text or a file into it. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "status.h"
#include "tune/tuning.h"

fj_status fj_tuning_export(const fj_context *ctx, char **text)
{
    fj_clear_error();
    if (!text) return fj_fail(FJ_ERR_INVALID_ARGUMENT, "fj_tuning_export: text is NULL");
    *text = NULL;
    if (!ctx) return fj_fail(FJ_ERR_INVALID_ARGUMENT, "fj_tuning_export: ctx is NULL");
    fj_strbuf b;
    fj_strbuf_init(&b);
    fj_tuning_format(ctx->tuning, &b);
    *text = fj_strbuf_take(&b);
    fj_strbuf_free(&b);
    return *text ? FJ_OK : fj_fail(FJ_ERR_OUT_OF_MEMORY, "out of memory exporting the tuning");
}

/* Writes all of text to fd; 0 or an errno. */
static int write_all(int fd, const char *text, size_t len)
{
    while (len) {
        ssize_t n = write(fd, text, len);
        if (n < 0) {
            if (errno == EINTR) continue;
            return errno;
        }
        text += n;
        len -= (size_t)n;
    }
    return fsync(fd) ? errno : 0;
}

fj_status fj_tuning_export_file(const fj_context *ctx, const char *path)
{
    fj_clear_error();
    if (!ctx || !path || !*path)
        return fj_fail(FJ_ERR_INVALID_ARGUMENT, "fj_tuning_export_file: %s",
                       !ctx ? "ctx is NULL" : "path is NULL or empty");
    char *text;
    fj_status s = fj_tuning_export(ctx, &text);
    if (s) return s;
    /* A temporary file beside it, renamed over it: a reader sees the old
       file or the new one, never half of one. */
    size_t n = strlen(path) + 16;
    char *tmp = malloc(n);
    if (!tmp) {
        free(text);
        return fj_fail(FJ_ERR_OUT_OF_MEMORY, "out of memory exporting the tuning");
    }
    snprintf(tmp, n, "%s.tmpXXXXXX", path);
    int fd = mkstemp(tmp);
    int err = fd < 0 ? errno : write_all(fd, text, strlen(text));
    if (fd >= 0 && close(fd) && !err) err = errno;
    if (!err && chmod(tmp, 0644)) err = errno;
    if (!err && rename(tmp, path)) err = errno;
    if (err && fd >= 0) unlink(tmp);
    free(tmp);
    free(text);
    return err ? fj_fail(FJ_ERR_IO, "cannot write the tuning file %s: %s", path, strerror(err))
               : FJ_OK;
}

fj_status fj_tuning_import(fj_context *ctx, const char *text)
{
    fj_clear_error();
    if (!ctx || !text)
        return fj_fail(FJ_ERR_INVALID_ARGUMENT, "fj_tuning_import: %s is NULL",
                       ctx ? "text" : "ctx");
    fj_tuning *read;
    fj_status s = fj_tuning_parse_strict(text, "the imported text", &read);
    if (s) return s;
    s = fj_tuning_add_all(ctx->tuning, read, FJ_TILES_IMPORTED);
    fj_tuning_free(read);
    return s;
}

fj_status fj_tuning_import_file(fj_context *ctx, const char *path)
{
    fj_clear_error();
    if (!ctx || !path)
        return fj_fail(FJ_ERR_INVALID_ARGUMENT, "fj_tuning_import_file: %s is NULL",
                       ctx ? "path" : "ctx");
    char *text;
    size_t len;
    int err = fj_tuning_read_file(path, &text, &len);
    if (err == ENOMEM) return fj_fail(FJ_ERR_OUT_OF_MEMORY, "out of memory reading %s", path);
    if (err)
        return fj_fail(FJ_ERR_IO, "cannot read the tuning file %s: %s", path,
                       fj_tuning_read_error(err));
    fj_tuning *read;
    fj_status s = fj_tuning_parse_strict(text, path, &read);
    free(text);
    if (s) return s;
    s = fj_tuning_add_all(ctx->tuning, read, FJ_TILES_IMPORTED);
    fj_tuning_free(read);
    return s;
}
