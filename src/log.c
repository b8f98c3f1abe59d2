/* Log routing. The library is mute by default; FLASHJIT_LOG=info|debug sends
 * lines to stderr, fj_set_log_callback sends them to the application. */
#include "log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t env_once = PTHREAD_ONCE_INIT;
static fj_log_fn log_fn;
static void *log_user;
static fj_log_level callback_level;
static fj_log_level env_level;

static void read_env_level(void)
{
    const char *s = getenv("FLASHJIT_LOG");
    if (!s) return;
    if (!strcmp(s, "info") || !strcmp(s, "1")) env_level = FJ_LOG_INFO;
    else if (!strcmp(s, "debug") || !strcmp(s, "2")) env_level = FJ_LOG_DEBUG;
}

void fj_set_log_callback(fj_log_fn fn, fj_log_level level, void *user)
{
    pthread_mutex_lock(&log_lock);
    log_fn = fn;
    log_user = user;
    callback_level = level;
    pthread_mutex_unlock(&log_lock);
}

int fj_log_enabled(fj_log_level level)
{
    pthread_once(&env_once, read_env_level);
    pthread_mutex_lock(&log_lock);
    fj_log_level cur = log_fn ? callback_level : env_level;
    pthread_mutex_unlock(&log_lock);
    return level != FJ_LOG_OFF && level <= cur;
}

void fj_log(fj_log_level level, const char *fmt, ...)
{
    if (!fj_log_enabled(level)) return;
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    /* The callback may have changed since the check above: the line goes
       where the routing now says, and to stderr only when FLASHJIT_LOG asks,
       never because a callback was just removed. */
    pthread_mutex_lock(&log_lock);
    fj_log_fn fn = log_fn;
    void *user = log_user;
    bool wanted = fn ? level <= callback_level : level <= env_level;
    pthread_mutex_unlock(&log_lock);
    if (!wanted) return;
    if (fn) fn(level, line, user);
    else fprintf(stderr, "flashjit %s: %s\n", level == FJ_LOG_DEBUG ? "debug" : "info", line);
}
