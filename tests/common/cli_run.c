#include "cli_run.h"

#include <fcntl.h>
#include <ftw.h>
#include <stdarg.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

bool fjt_read_file(const char *path, char *buf, size_t cap)
{
    buf[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f) return false;
    size_t n = fread(buf, 1, cap - 1, f);
    buf[n] = '\0';
    fclose(f);
    return true;
}

void fjt_cli_run(const char *dir, const char *env_name, const char *env_value,
                 const char *const *argv, fjt_cli_result *r)
{
    char out_path[4200], err_path[4200];
    snprintf(out_path, sizeof out_path, "%s/stdout.txt", dir);
    snprintf(err_path, sizeof err_path, "%s/stderr.txt", dir);
    fflush(stdout);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int o = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        int e = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (o < 0 || e < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0) _exit(126);
        if (env_name && env_value) setenv(env_name, env_value, 1);
        else if (env_name) unsetenv(env_name);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    r->status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    fjt_read_file(out_path, r->out, sizeof r->out);
    fjt_read_file(err_path, r->err, sizeof r->err);
    if (r->status == 126 || r->status == 127) fail_msg("could not run %s", argv[0]);
}

void fjt_cli_run_args(const char *dir, const char *env_name, const char *env_value,
                      const char *const *prefix, va_list args, fjt_cli_result *r)
{
    const char *argv[FJT_CLI_MAX_ARGS + 1];
    int argc = 0;
    for (; prefix[argc]; argc++) {
        if (argc == FJT_CLI_MAX_ARGS) fail_msg("more than %d arguments", FJT_CLI_MAX_ARGS);
        argv[argc] = prefix[argc];
    }
    for (const char *a; (a = va_arg(args, const char *));) {
        if (argc == FJT_CLI_MAX_ARGS) fail_msg("more than %d arguments", FJT_CLI_MAX_ARGS);
        argv[argc++] = a;
    }
    argv[argc] = NULL;
    fjt_cli_run(dir, env_name, env_value, argv, r);
}

void fjt_cli_expect_status(const fjt_cli_result *r, int want)
{
    if (r->status != want)
        fail_msg("exit status %d, expected %d\nstdout:\n%s\nstderr:\n%s", r->status, want, r->out,
                 r->err);
}

bool fjt_scratch_dir(const char *name, char *buf, size_t n)
{
    const char *base = getenv("TMPDIR");
    int len = snprintf(buf, n, "%s/flashjit-test-%s-XXXXXX", base && *base ? base : "/tmp", name);
    return len > 0 && (size_t)len < n && mkdtemp(buf) != NULL;
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

int fjt_remove_tree(const char *dir) { return nftw(dir, remove_one, 16, FTW_DEPTH | FTW_PHYS); }
