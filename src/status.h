/* Internal error reporting: every failure path sets this thread's detail
 * message and returns its status in one expression, so no error can be
 * returned without a message. */
#ifndef FJ_STATUS_H
#define FJ_STATUS_H

#include "flashjit.h"

#if defined(__GNUC__)
#define FJ_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define FJ_PRINTF(a, b)
#endif

/* Sets this thread's last-error text (printf-style) and returns s. */
fj_status fj_fail(fj_status s, const char *fmt, ...) FJ_PRINTF(2, 3);

/* Prefixes the current last-error text with "context: " (keeps the status). */
fj_status fj_fail_prefix(fj_status s, const char *fmt, ...) FJ_PRINTF(2, 3);

/* Empties this thread's last-error text: every public entry point calls this
 * first, so a success leaves "". */
void fj_clear_error(void);

#endif
