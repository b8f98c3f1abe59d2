/* `flashjit cache` through the built binary (its path is argv[1]): exit
 * codes, what each subcommand prints, and that it finds the directory the
 * way the library does. Entries are made with the library's fj_cache_store,
 * so the tool and the runtime are checked against each other. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "cuda/jit/cache.h"
#include "cli_run.h"

static const char *flashjit_path;

typedef struct fixture {
    char dir[4096];   /* scratch: holds the cache directory and outputs */
    char cache[4200]; /* the cache directory */
    fjt_cli_result r;
} fixture;

/* Runs flashjit with the given arguments (NULL-terminated), FLASHJIT_CACHE_DIR
 * set to env_dir (NULL: unset). */
static void run_cli(fixture *fx, const char *env_dir, ...)
{
    const char *const prefix[] = {flashjit_path, NULL};
    va_list ap;
    va_start(ap, env_dir);
    fjt_cli_run_args(fx->dir, "FLASHJIT_CACHE_DIR", env_dir, prefix, ap, &fx->r);
    va_end(ap);
}

static void expect_out(const fixture *fx, const char *text)
{
    if (!strstr(fx->r.out, text)) fail_msg("stdout lacks '%s':\n%s", text, fx->r.out);
}

static int count_lines_with(const char *text, const char *word)
{
    int n = 0;
    for (const char *line = text; *line;) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        char buf[1024];
        snprintf(buf, sizeof buf, "%.*s", (int)len, line);
        if (strstr(buf, word)) n++;
        line += len + (end ? 1 : 0);
    }
    return n;
}

static int setup(void **state)
{
    fixture *fx = calloc(1, sizeof *fx);
    if (!fx) return -1;
    if (!fjt_scratch_dir("cache-cli", fx->dir, sizeof fx->dir)) return -1;
    snprintf(fx->cache, sizeof fx->cache, "%s/cache", fx->dir);
    if (mkdir(fx->cache, 0700) != 0) return -1;
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    fixture *fx = *state;
    int rc = fjt_remove_tree(fx->dir);
    free(fx);
    return rc;
}

/* Stores n entries named "flash_fwd.test<i>"; returns their bytes on disk. */
static unsigned long long store_entries(const char *dir, int n)
{
    unsigned long long bytes = 0;
    for (int i = 0; i < n; i++) {
        char name[64], payload[256];
        snprintf(name, sizeof name, "flash_fwd.test%d.sm_90", i);
        memset(payload, 'a' + i, sizeof payload);
        fj_cache_key key = fj_cache_key_make(name, strlen(name), "", 13, 0, "sm_90");
        assert_int_equal(fj_cache_store(dir, name, &key, payload, 100 + 50 * (size_t)i), FJ_OK);
        char hex[33], path[4400];
        fj_cache_key_hex(&key, hex);
        snprintf(path, sizeof path, "%s/%s.%s.fjk", dir, name, hex);
        struct stat st;
        assert_int_equal(stat(path, &st), 0);
        bytes += (unsigned long long)st.st_size;
    }
    return bytes;
}

/* ---- tests -------------------------------------------------------------- */

static void test_help_and_usage_errors(void **state)
{
    fixture *fx = *state;
    run_cli(fx, fx->cache, "cache", "--help", NULL);
    fjt_cli_expect_status(&fx->r, 0);
    expect_out(fx, "list");
    expect_out(fx, "verify");
    static const char *const subs[] = {"list", "stats", "verify", "clear"};
    for (int i = 0; i < 4; i++) {
        run_cli(fx, fx->cache, "cache", subs[i], "--help", NULL);
        fjt_cli_expect_status(&fx->r, 0);
        char usage[64];
        snprintf(usage, sizeof usage, "usage: flashjit cache %s", subs[i]);
        expect_out(fx, usage);
        expect_out(fx, "--dir DIR");
    }
    run_cli(fx, fx->cache, "cache", NULL);
    fjt_cli_expect_status(&fx->r, 2);
    run_cli(fx, fx->cache, "cache", "frobnicate", NULL);
    fjt_cli_expect_status(&fx->r, 2);
    run_cli(fx, fx->cache, "cache", "list", "--bogus", NULL);
    fjt_cli_expect_status(&fx->r, 2);
    run_cli(fx, fx->cache, "cache", "list", "extra", NULL);
    fjt_cli_expect_status(&fx->r, 2);
    run_cli(fx, fx->cache, "cache", "list", "--dir", NULL);
    fjt_cli_expect_status(&fx->r, 2);
}

static void test_list_stats_verify_clear(void **state)
{
    fixture *fx = *state;
    unsigned long long bytes = store_entries(fx->cache, 3);
    char tuning[4400];
    snprintf(tuning, sizeof tuning, "%s/tuning.txt", fx->cache);
    FILE *f = fopen(tuning, "w");
    assert_non_null(f);
    fputs("# not a cache file\n", f);
    fclose(f);

    run_cli(fx, NULL, "cache", "list", "--dir", fx->cache, NULL);
    fjt_cli_expect_status(&fx->r, 0);
    assert_int_equal(count_lines_with(fx->r.out, "valid"), 3);
    assert_int_equal(count_lines_with(fx->r.out, "tuning.txt"), 0);

    run_cli(fx, NULL, "cache", "stats", "--dir", fx->cache, NULL);
    fjt_cli_expect_status(&fx->r, 0);
    char want[4400];
    snprintf(want, sizeof want, "directory: %s\n", fx->cache);
    expect_out(fx, want);
    expect_out(fx, "entries: 3 (3 valid, 0 damaged)");
    snprintf(want, sizeof want, "bytes: %llu\n", bytes);
    expect_out(fx, want);

    run_cli(fx, NULL, "cache", "verify", "--dir", fx->cache, NULL);
    fjt_cli_expect_status(&fx->r, 0);
    expect_out(fx, "3 entries");
    expect_out(fx, "all valid");

    /* damage one entry: truncate it by one byte */
    char victim[4400], hex[33];
    const char *name = "flash_fwd.test1.sm_90";
    fj_cache_key key = fj_cache_key_make(name, strlen(name), "", 13, 0, "sm_90");
    fj_cache_key_hex(&key, hex);
    snprintf(victim, sizeof victim, "%s/%s.%s.fjk", fx->cache, name, hex);
    struct stat st;
    assert_int_equal(stat(victim, &st), 0);
    assert_int_equal(truncate(victim, st.st_size - 1), 0);
    /* and leave a temporary file, as a crash would */
    char temp[4400];
    snprintf(temp, sizeof temp, "%s/" FJ_CACHE_TEMP_PREFIX "Ab12Cd", fx->cache);
    f = fopen(temp, "w");
    assert_non_null(f);
    fputs("torn", f);
    fclose(f);

    run_cli(fx, NULL, "cache", "verify", "--dir", fx->cache, NULL);
    fjt_cli_expect_status(&fx->r, 1);
    snprintf(want, sizeof want, "damaged: %s.%s.fjk: ", name, hex);
    expect_out(fx, want);
    expect_out(fx, "1 of 3 entries");
    assert_int_equal(count_lines_with(fx->r.out, "damaged: "), 1);

    run_cli(fx, NULL, "cache", "list", "--dir", fx->cache, NULL);
    fjt_cli_expect_status(&fx->r, 0);
    assert_int_equal(count_lines_with(fx->r.out, "valid"), 2);
    assert_int_equal(count_lines_with(fx->r.out, "DAMAGED"), 1);
    assert_int_equal(count_lines_with(fx->r.out, "temp "), 1);

    run_cli(fx, NULL, "cache", "stats", "--dir", fx->cache, NULL);
    fjt_cli_expect_status(&fx->r, 0);
    expect_out(fx, "entries: 3 (2 valid, 1 damaged)");
    expect_out(fx, "temporary files: 1 (4 bytes)");

    run_cli(fx, NULL, "cache", "clear", "--dir", fx->cache, NULL);
    fjt_cli_expect_status(&fx->r, 0);
    expect_out(fx, "removed 4 files");
    assert_int_equal(access(tuning, F_OK), 0);
    assert_int_equal(access(temp, F_OK), -1);

    run_cli(fx, NULL, "cache", "verify", "--dir", fx->cache, NULL);
    fjt_cli_expect_status(&fx->r, 0);
    expect_out(fx, "0 entries");
    run_cli(fx, NULL, "cache", "list", "--dir", fx->cache, NULL);
    fjt_cli_expect_status(&fx->r, 0);
    expect_out(fx, "no cache files in");
}

/* Directories among the cache's names (issue 23, finding 5): clear removes
 * the empty ones, reports the others and succeeds (it used to exit 1). */
static void test_clear_with_directories(void **state)
{
    fixture *fx = *state;
    store_entries(fx->cache, 2);
    const char *name = "flash_fwd.test9.sm_90";
    fj_cache_key key = fj_cache_key_make(name, strlen(name), "", 13, 0, "sm_90");
    char hex[33], empty[4400], full[4400], inside[4500];
    fj_cache_key_hex(&key, hex);
    snprintf(empty, sizeof empty, "%s/%s.%s.fjk", fx->cache, name, hex);
    assert_int_equal(mkdir(empty, 0700), 0);
    snprintf(full, sizeof full, "%s/" FJ_CACHE_TEMP_PREFIX "moved1", fx->cache);
    assert_int_equal(mkdir(full, 0700), 0);
    snprintf(inside, sizeof inside, "%s/note.txt", full);
    FILE *f = fopen(inside, "w");
    assert_non_null(f);
    fputs("keep", f);
    fclose(f);

    run_cli(fx, NULL, "cache", "list", "--dir", fx->cache, NULL);
    fjt_cli_expect_status(&fx->r, 0);
    assert_int_equal(count_lines_with(fx->r.out, "not a regular file"), 1);

    run_cli(fx, NULL, "cache", "clear", "--dir", fx->cache, NULL);
    fjt_cli_expect_status(&fx->r, 0);
    expect_out(fx, "removed 3 files");
    expect_out(fx, "kept " FJ_CACHE_TEMP_PREFIX "moved1");
    assert_int_equal(access(empty, F_OK), -1);
    assert_int_equal(access(inside, F_OK), 0);
}

/* No --dir: the directory comes from FLASHJIT_CACHE_DIR, as in the library. */
static void test_directory_resolved_like_the_library(void **state)
{
    fixture *fx = *state;
    store_entries(fx->cache, 2);
    run_cli(fx, fx->cache, "cache", "stats", NULL);
    fjt_cli_expect_status(&fx->r, 0);
    char want[4400];
    snprintf(want, sizeof want, "directory: %s\n", fx->cache);
    expect_out(fx, want);
    expect_out(fx, "entries: 2 (2 valid, 0 damaged)");
    /* --dir wins over the environment */
    char other[4400];
    snprintf(other, sizeof other, "%s/other", fx->dir);
    run_cli(fx, fx->cache, "cache", "stats", "--dir", other, NULL);
    fjt_cli_expect_status(&fx->r, 0);
    expect_out(fx, "entries: 0");

    /* an unusable directory is the disk cache being off: an error here */
    char file[4400], under[4500];
    snprintf(file, sizeof file, "%s/regular-file", fx->dir);
    FILE *f = fopen(file, "w");
    assert_non_null(f);
    fclose(f);
    snprintf(under, sizeof under, "%s/cache", file);
    run_cli(fx, NULL, "cache", "list", "--dir", under, NULL);
    fjt_cli_expect_status(&fx->r, 1);
    if (!strstr(fx->r.err, "off")) fail_msg("stderr should say the cache is off: %s", fx->r.err);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s PATH-TO-flashjit\n", argv[0]);
        return 2;
    }
    flashjit_path = argv[1];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_help_and_usage_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_list_stats_verify_clear, setup, teardown),
        cmocka_unit_test_setup_teardown(test_clear_with_directories, setup, teardown),
        cmocka_unit_test_setup_teardown(test_directory_resolved_like_the_library, setup, teardown),
    };
    return cmocka_run_group_tests_name("cache_cli", tests, NULL, NULL);
}
