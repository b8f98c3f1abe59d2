/* Log routing. The library is mute by default; FLASHJIT_LOG=info|debug sends
 * lines to stderr, fj_set_log_callback sends them to the application. An
 * unknown FLASHJIT_LOG value logs nothing and fails context creation
 * (fj_log_check_env), so a misspelled level is never silently off. */
#include "log.h"

#include <pthread.h>
#include <stdbool.h>
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

/* FLASHJIT_LOG's level; false for a value that names none. Unset or empty
 * is off. */
static bool parse_env_level(const char *s, fj_log_level *level)
{
    static const struct {
        const char *name;
        fj_log_level level;
    } names[] = {
        {"", FJ_LOG_OFF},   {"off", FJ_LOG_OFF},     {"0", FJ_LOG_OFF},   {"info", FJ_LOG_INFO},
        {"1", FJ_LOG_INFO}, {"debug", FJ_LOG_DEBUG}, {"2", FJ_LOG_DEBUG},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(s ? s : "", names[i].name)) {
            *level = names[i].level;
            return true;
        }
    return false;
}

static void read_env_level(void)
{
    fj_log_level level;
    env_level = parse_env_level(getenv("FLASHJIT_LOG"), &level) ? level : FJ_LOG_OFF;
}

fj_status fj_log_check_env(void)
{
    const char *s = getenv("FLASHJIT_LOG");
    fj_log_level level;
    if (parse_env_level(s, &level)) return FJ_OK;
    return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                   "FLASHJIT_LOG (\"%s\") is not one of off, info, debug (or 0, 1, 2); unset it "
                   "for no messages",
                   s);
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
