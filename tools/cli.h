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

/* Parsers for flag values; false (with a message naming flag printed) on
 * bad input. */
bool cli_parse_int(const char *cmd, const char *flag, const char *value, int lo, int hi, int *out);
bool cli_parse_dtype(const char *cmd, const char *flag, const char *value, fj_dtype *out);
bool cli_parse_backend(const char *cmd, const char *flag, const char *value, fj_backend *out);
bool cli_parse_causal(const char *cmd, const char *flag, const char *value, fj_causal *out);

/* ---- options: getopt_long with the CLI's rules ------------------------------
 * GNU syntax: "--opt value" or "--opt=value", unambiguous prefixes, "--" ends
 * the options, arguments that are not options (a subcommand) anywhere; "-h"
 * is "--help". A command lists its options as cli_option tables (several may
 * be chained: its own and the problem flags of cli_problem.h) and switches on
 * the ids; values are checked by the command's validators, which name the
 * flag. A missing value is reported as NULL to the validator (so each says
 * what it needs): a required value must not look like a flag ("--seqlens
 * --decode" forgot the list), an optional one is taken from the next word
 * only when that does not start with '-' ("--causal" alone, "--causal
 * top-left", "--causal=none"). */
#include <getopt.h>

typedef struct cli_option {
    const char *name; /* without the dashes */
    int has_arg;      /* no_argument, required_argument, optional_argument */
    int id;           /* > 0, returned by cli_next_option */
} cli_option;

#define CLI_MAX_OPTIONS 64
#define CLI_OPTION_HELP 'h'
#define CLI_OPTION_ERROR (-2)

typedef struct cli_options {
    const char *cmd;
    int argc;
    char **argv;
    struct option longopts[CLI_MAX_OPTIONS + 1];
    int has_arg[CLI_MAX_OPTIONS]; /* as the command declared it */
    int n;
    char flag[64]; /* "--name" of the option last returned */
} cli_options;

/* Starts parsing argv (argv[0]: the command's name) with the options of the
 * NULL-terminated list of tables, each ended by an entry with name NULL. */
void cli_options_begin(cli_options *p, const char *cmd, int argc, char **argv,
                       const cli_option *const *tables);
/* The next option's id (*value: its value or NULL; p->flag: "--name"), -1
 * when the options are done (the other arguments are argv[optind..argc-1]),
 * CLI_OPTION_HELP for --help or -h, or CLI_OPTION_ERROR after printing
 * "unknown option 'X' (flashjit CMD --help)". */
int cli_next_option(cli_options *p, const char **value);
/* 2 with "unexpected argument 'X'" when arguments are left, else 0. */
int cli_no_arguments(const cli_options *p);

/* Monotonic wall clock in seconds. */
double cli_now(void);

#endif
