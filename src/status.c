/* Status names and the thread-local last-error text.
 * The list is an X-macro so the enum order, the name and the short meaning
 * can never drift apart. */
#include "status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define FJ_STATUS_LIST(X)      \
    X(FJ_OK)                   \
    X(FJ_ERR_INVALID_ARGUMENT) \
    X(FJ_ERR_UNSUPPORTED)      \
    X(FJ_ERR_NO_DEVICE)        \
    X(FJ_ERR_OUT_OF_MEMORY)    \
    X(FJ_ERR_COMPILE)          \
    X(FJ_ERR_DRIVER)           \
    X(FJ_ERR_IO)               \
    X(FJ_ERR_INTERNAL)

#define FJ_STATUS_NAME(e) [e] = #e,
static const char *const status_names[] = {FJ_STATUS_LIST(FJ_STATUS_NAME)};
#undef FJ_STATUS_NAME

_Static_assert(sizeof status_names / sizeof status_names[0] == FJ_STATUS_COUNT_,
               "FJ_STATUS_LIST and enum fj_status disagree");

/* Big enough for an NVRTC log excerpt plus options; longer text is cut with "...". */
#define FJ_ERROR_CAP 8192
static _Thread_local char last_error[FJ_ERROR_CAP];

const char *fj_status_name(fj_status s)
{
    if ((unsigned)s >= (unsigned)FJ_STATUS_COUNT_) return "FJ_STATUS_UNKNOWN";
    return status_names[s];
}

const char *fj_last_error(void) { return last_error; }

void fj_clear_error(void) { last_error[0] = '\0'; }

static void mark_truncated(int n)
{
    if (n >= FJ_ERROR_CAP) memcpy(last_error + FJ_ERROR_CAP - 4, "...", 4);
}

fj_status fj_fail(fj_status s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    mark_truncated(n);
    return s;
}

fj_status fj_fail_prefix(fj_status s, const char *fmt, ...)
{
    char old[FJ_ERROR_CAP];
    memcpy(old, last_error, sizeof old);
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    if (n < 0) n = 0;
    if ((size_t)n < sizeof last_error) {
        int m = snprintf(last_error + n, sizeof last_error - (size_t)n, ": %s", old);
        mark_truncated(n + m);
    } else {
        mark_truncated(n);
    }
    return s;
}
