#include "paths.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "status.h"

static char *dup_or_null(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

static char *join(const char *a, const char *b)
{
    size_t n = strlen(a) + strlen(b) + 2;
    char *d = malloc(n);
    if (d) snprintf(d, n, "%s/%s", a, b);
    return d;
}

int fj_mkdir_p(const char *path, unsigned mode)
{
    char *p = dup_or_null(path);
    if (!p) {
        errno = ENOMEM;
        return -1;
    }
    for (char *s = p + 1; *s; s++) {
        if (*s != '/') continue;
        *s = '\0';
        if (mkdir(p, mode) != 0 && errno != EEXIST) {
            free(p);
            return -1;
        }
        *s = '/';
    }
    int rc = mkdir(p, mode);
    int err = errno;
    free(p);
    if (rc != 0 && err != EEXIST) {
        errno = err;
        return -1;
    }
    struct stat st;
    if (stat(path, &st) != 0) return -1;
    if (!S_ISDIR(st.st_mode)) {
        errno = ENOTDIR;
        return -1;
    }
    return 0;
}

static fj_status set_note(char **note, const char *fmt, const char *a, const char *b)
{
    size_t n = strlen(fmt) + strlen(a) + strlen(b) + 1;
    *note = malloc(n);
    if (!*note) return fj_fail(FJ_ERR_OUT_OF_MEMORY, "out of memory resolving the cache directory");
    snprintf(*note, n, fmt, a, b);
    return FJ_OK;
}

fj_status fj_cache_dir_resolve(const char *option, char **dir, char **note)
{
    *dir = NULL;
    *note = NULL;
    char *path = NULL;
    const char *env;
    if (option) {
        if (!*option) return set_note(note, "off (cache_dir is \"\")%s%s", "", "");
        path = dup_or_null(option);
    } else if ((env = getenv("FLASHJIT_CACHE_DIR")) && *env) {
        path = dup_or_null(env);
    } else if ((env = getenv("XDG_CACHE_HOME")) && *env) {
        path = join(env, "flashjit");
    } else if ((env = getenv("HOME")) && *env) {
        path = join(env, ".cache/flashjit");
    } else {
        return set_note(note, "off (no cache_dir, FLASHJIT_CACHE_DIR, XDG_CACHE_HOME or HOME)%s%s",
                        "", "");
    }
    if (!path) return fj_fail(FJ_ERR_OUT_OF_MEMORY, "out of memory resolving the cache directory");
    if (fj_mkdir_p(path, 0700) != 0) {
        int err = errno;
        fj_status s = set_note(note, "off (cannot create %s: %s)", path, strerror(err));
        free(path);
        return s;
    }
    if (access(path, W_OK | X_OK) != 0) {
        int err = errno;
        fj_status s = set_note(note, "off (%s is not writable: %s)", path, strerror(err));
        free(path);
        return s;
    }
    *dir = path;
    return FJ_OK;
}

fj_status fj_tuning_path_resolve(const char *option, const char *cache_dir, char **path)
{
    *path = NULL;
    const char *env;
    if (option) {
        if (!*option) return FJ_OK;
        *path = dup_or_null(option);
    } else if ((env = getenv("FLASHJIT_TUNING_FILE")) && *env) {
        *path = dup_or_null(env);
    } else if (cache_dir) {
        *path = join(cache_dir, "tuning.txt");
    } else {
        return FJ_OK;
    }
    return *path ? FJ_OK : fj_fail(FJ_ERR_OUT_OF_MEMORY, "out of memory resolving the tuning file");
}
