#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

int cli_fail(const char *cmd, fj_status s)
{
    const char *msg = fj_last_error();
    fprintf(stderr, "flashjit %s: %s%s%s\n", cmd, fj_status_name(s), *msg ? ": " : "", msg);
    return 1;
}

int cli_usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "flashjit %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    return 2;
}

bool cli_parse_int(const char *cmd, const char *flag, const char *value, int lo, int hi, int *out)
{
    if (!value) {
        cli_usage_error(cmd, "%s needs a value", flag);
        return false;
    }
    char *end;
    errno = 0;
    long v = strtol(value, &end, 10);
    if (errno || end == value || *end || v < lo || v > hi) {
        cli_usage_error(cmd, "%s: '%s' is not an integer in [%d, %d]", flag, value, lo, hi);
        return false;
    }
    *out = (int)v;
    return true;
}

bool cli_parse_dtype(const char *cmd, const char *value, fj_dtype *out)
{
    static const fj_dtype all[] = {FJ_F32, FJ_F16, FJ_BF16};
    for (size_t i = 0; value && i < 3; i++)
        if (!strcmp(value, fj_dtype_name(all[i]))) {
            *out = all[i];
            return true;
        }
    cli_usage_error(cmd, "--dtype: '%s' is not one of f32, f16, bf16", value ? value : "");
    return false;
}

bool cli_parse_backend(const char *cmd, const char *value, fj_backend *out)
{
    if (value && !strcmp(value, "auto")) *out = FJ_BACKEND_AUTO;
    else if (value && (!strcmp(value, "reference") || !strcmp(value, "cpu-reference"))) *out = FJ_BACKEND_CPU_REFERENCE;
    else if (value && !strcmp(value, "cpu")) *out = FJ_BACKEND_CPU;
    else if (value && !strcmp(value, "cuda")) *out = FJ_BACKEND_CUDA;
    else {
        cli_usage_error(cmd, "--backend: '%s' is not one of auto, reference, cpu, cuda", value ? value : "");
        return false;
    }
    return true;
}

bool cli_parse_causal(const char *cmd, const char *value, fj_causal *out)
{
    static const fj_causal all[] = {FJ_CAUSAL_NONE, FJ_CAUSAL_BOTTOM_RIGHT, FJ_CAUSAL_TOP_LEFT};
    for (size_t i = 0; value && i < 3; i++)
        if (!strcmp(value, fj_causal_name(all[i]))) {
            *out = all[i];
            return true;
        }
    cli_usage_error(cmd, "--causal: '%s' is not one of none, bottom-right, top-left", value ? value : "");
    return false;
}

double cli_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
