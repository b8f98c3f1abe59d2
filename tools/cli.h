/* Shared pieces of the flashjit command-line tool. Each subcommand lives in
 * its own cmd_*.c file and is listed once in main.c. */
#ifndef FJ_CLI_H
#define FJ_CLI_H

#include <stdbool.h>
#include <stdio.h>

#include "flashjit.h"

typedef struct fj_command {
    const char *name;
    const char *summary;
    int (*run)(int argc, char **argv); /* argv[0] is the command name */
} fj_command;

int cmd_info(int argc, char **argv);
int cmd_demo(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_cache(int argc, char **argv);
int cmd_source(int argc, char **argv);
int cmd_compile_all(int argc, char **argv);
int cmd_tune(int argc, char **argv);

/* Prints "flashjit <cmd>: FJ_ERR_...: <message>" to stderr; returns 1 (the
 * exit status for any library error). */
int cli_fail(const char *cmd, fj_status s);

/* Prints "flashjit <cmd>: <message>" and returns 2 (usage errors). */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Parsers for flag values; false (with a message printed) on bad input. */
bool cli_parse_int(const char *cmd, const char *flag, const char *value, int lo, int hi, int *out);
bool cli_parse_dtype(const char *cmd, const char *value, fj_dtype *out);
bool cli_parse_backend(const char *cmd, const char *value, fj_backend *out);
bool cli_parse_causal(const char *cmd, const char *value, fj_causal *out);

/* Monotonic wall clock in seconds. */
double cli_now(void);

#endif
