/* Internal logging: silent unless FLASHJIT_LOG or a callback asks. */
#ifndef FJ_LOG_H
#define FJ_LOG_H

#include "flashjit.h"
#include "status.h"

/* Whether a message at this level would go anywhere (cheap; check before
 * formatting anything costly). */
int fj_log_enabled(fj_log_level level);

void fj_log(fj_log_level level, const char *fmt, ...) FJ_PRINTF(2, 3);

/* FJ_OK when FLASHJIT_LOG is unset or names a level; else
 * FJ_ERR_INVALID_ARGUMENT naming the value and the accepted ones (context
 * creation fails with it, as for FLASHJIT_BACKEND). */
fj_status fj_log_check_env(void);

#define FJ_INFO(...) fj_log(FJ_LOG_INFO, __VA_ARGS__)
#define FJ_DEBUG(...) fj_log(FJ_LOG_DEBUG, __VA_ARGS__)

#endif
