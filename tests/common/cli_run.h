/* Shared by the suites that drive the built flashjit binary (cache_cli,
 * tune_cli, bench_plot) and those that need a scratch directory: running a
 * command with its output captured, reading files back, scratch
 * directories. */
#ifndef FJT_CLI_RUN_H
#define FJT_CLI_RUN_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct fjt_cli_result {
    int status; /* exit status, or -1 when it did not exit (a crash) */
    char out[65536];
    char err[16384];
} fjt_cli_result;

/* Runs argv[0] with argv (NULL-terminated) in a child process, its stdout
 * and stderr written to stdout.txt and stderr.txt in dir and read back into
 * r (truncated to fit). In the child, env_name is set to env_value, or unset
 * when env_value is NULL; env_name NULL leaves the environment as it is.
 * Fails the test (cmocka) when the child cannot be started or cannot run
 * argv[0]. */
void fjt_cli_run(const char *dir, const char *env_name, const char *env_value,
                 const char *const *argv, fjt_cli_result *r);

/* fjt_cli_run with argv = the NULL-terminated prefix (the program and any
 * fixed leading arguments), then the NULL-terminated strings in args; at
 * most FJT_CLI_MAX_ARGS in all (more fail the test). For the suites'
 * variadic run helpers. */
#define FJT_CLI_MAX_ARGS 63
void fjt_cli_run_args(const char *dir, const char *env_name, const char *env_value,
                      const char *const *prefix, va_list args, fjt_cli_result *r);

/* Fails the test, printing both outputs, unless r exited with want. */
void fjt_cli_expect_status(const fjt_cli_result *r, int want);

/* The file's text into buf (NUL-terminated, truncated to cap - 1 bytes);
 * false (buf "") when it cannot be opened. */
bool fjt_read_file(const char *path, char *buf, size_t cap);

/* Makes a fresh directory $TMPDIR/flashjit-test-<name>-XXXXXX (TMPDIR
 * unset or empty: /tmp) into buf; false on failure. */
bool fjt_scratch_dir(const char *name, char *buf, size_t n);

/* Removes dir and everything under it (symbolic links not followed);
 * 0 on success. */
int fjt_remove_tree(const char *dir);

#endif
