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

bool cli_parse_dtype(const char *cmd, const char *flag, const char *value, fj_dtype *out)
{
    static const fj_dtype all[] = {FJ_F32, FJ_F16, FJ_BF16};
    for (size_t i = 0; value && i < 3; i++)
        if (!strcmp(value, fj_dtype_name(all[i]))) {
            *out = all[i];
            return true;
        }
    cli_usage_error(cmd, "%s: '%s' is not one of f32, f16, bf16", flag, value ? value : "");
    return false;
}

bool cli_parse_backend(const char *cmd, const char *flag, const char *value, fj_backend *out)
{
    if (value && !strcmp(value, "auto")) *out = FJ_BACKEND_AUTO;
    else if (value && (!strcmp(value, "reference") || !strcmp(value, "cpu-reference")))
        *out = FJ_BACKEND_CPU_REFERENCE;
    else if (value && !strcmp(value, "cpu")) *out = FJ_BACKEND_CPU;
    else if (value && !strcmp(value, "cuda")) *out = FJ_BACKEND_CUDA;
    else {
        cli_usage_error(cmd, "%s: '%s' is not one of auto, reference, cpu, cuda", flag,
                        value ? value : "");
        return false;
    }
    return true;
}

bool cli_parse_causal(const char *cmd, const char *flag, const char *value, fj_causal *out)
{
    static const fj_causal all[] = {FJ_CAUSAL_NONE, FJ_CAUSAL_BOTTOM_RIGHT, FJ_CAUSAL_TOP_LEFT};
    for (size_t i = 0; value && i < 3; i++)
        if (!strcmp(value, fj_causal_name(all[i]))) {
            *out = all[i];
            return true;
        }
    cli_usage_error(cmd, "%s: '%s' is not a causal alignment: one of none, bottom-right, top-left",
                    flag, value ? value : "");
    return false;
}

void cli_options_begin(cli_options *p, const char *cmd, int argc, char **argv,
                       const cli_option *const *tables)
{
    memset(p, 0, sizeof *p);
    p->cmd = cmd;
    p->argc = argc;
    p->argv = argv;
    p->longopts[p->n++] = (struct option){"help", no_argument, NULL, CLI_OPTION_HELP};
    p->has_arg[0] = no_argument;
    for (; *tables; tables++)
        for (const cli_option *o = *tables; o->name && p->n < CLI_MAX_OPTIONS; o++) {
            /* getopt_long takes a value only after '='; the word after is
               taken here, by the rules in cli.h */
            int has = o->has_arg == no_argument ? no_argument : optional_argument;
            p->has_arg[p->n] = o->has_arg;
            p->longopts[p->n++] = (struct option){o->name, has, NULL, o->id};
        }
    optind = 0; /* a full restart of getopt (GNU) */
    opterr = 0; /* our messages, not getopt's */
}

int cli_next_option(cli_options *p, const char **value)
{
    int index = -1;
    *value = NULL;
    int c = getopt_long(p->argc, p->argv, "h", p->longopts, &index);
    if (c == -1) return -1;
    if (c == '?' || (c != CLI_OPTION_HELP && index < 0)) {
        const char *bad = optind > 0 && optind <= p->argc ? p->argv[optind - 1] : "?";
        if (optopt && optopt != CLI_OPTION_HELP && bad[0] == '-' && bad[1] != '-')
            cli_usage_error(p->cmd, "unknown option '-%c' (flashjit %s --help)", optopt, p->cmd);
        else cli_usage_error(p->cmd, "unknown option '%s' (flashjit %s --help)", bad, p->cmd);
        return CLI_OPTION_ERROR;
    }
    if (index < 0) index = 0; /* -h */
    snprintf(p->flag, sizeof p->flag, "--%s", p->longopts[index].name);
    *value = optarg;
    if (!optarg && optind < p->argc) {
        const char *next = p->argv[optind];
        bool take = p->has_arg[index] == required_argument
                        ? strncmp(next, "--", 2) != 0
                        : p->has_arg[index] == optional_argument && next[0] != '-';
        if (take) {
            *value = next;
            optind++;
        }
    }
    return c;
}

int cli_no_arguments(const cli_options *p)
{
    if (optind < p->argc)
        return cli_usage_error(p->cmd, "unexpected argument '%s' (flashjit %s --help)",
                               p->argv[optind], p->cmd);
    return 0;
}

double cli_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
