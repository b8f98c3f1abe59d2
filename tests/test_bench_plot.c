/* `flashjit bench --plot` and the tuning part of `flashjit info`. First the
 * chart writer itself (tools/svg_plot.c, compiled into this test): escaping,
 * one bar per value, rotated labels, atomic writes. Then the built binary
 * (its path is argv[1]) on the tiny "smoke" grid of CPU problems, so the
 * suite stays fast under sanitizers. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
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

#include "cli_run.h"
#include "context.h"
#include "cpu/tiled_blocks.h"
#include "svg_plot.h"

static const char *flashjit_path;

typedef struct fixture {
    char dir[4096]; /* scratch: outputs, charts, tuning files */
    fjt_cli_result r;
} fixture;

/* ---- helpers -------------------------------------------------------------- */

/* The file (up to 1 MiB) into a malloc'd string; NULL when it cannot be
 * opened. */
static char *slurp(const char *path)
{
    const size_t cap = 1 << 20;
    char *buf = malloc(cap);
    assert_non_null(buf);
    if (fjt_read_file(path, buf, cap)) return buf;
    free(buf);
    return NULL;
}

/* Runs flashjit with the given arguments (NULL-terminated), with
 * FLASHJIT_TUNING_FILE set to tuning_file (NULL: unset). */
static void run_cli(fixture *fx, const char *tuning_file, ...)
{
    const char *const prefix[] = {flashjit_path, NULL};
    va_list ap;
    va_start(ap, tuning_file);
    fjt_cli_run_args(fx->dir, "FLASHJIT_TUNING_FILE", tuning_file, prefix, ap, &fx->r);
    va_end(ap);
}

static void expect_in(const char *what, const char *text, const char *needle)
{
    if (!text) fail_msg("%s: no text", what);
    else if (!strstr(text, needle)) fail_msg("%s lacks '%s':\n%s", what, needle, text);
}

static int count(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

static bool ends_with_svg_close(const char *text)
{
    size_t n = strlen(text);
    while (n && (text[n - 1] == '\n' || text[n - 1] == ' ')) n--;
    return n >= 6 && !strncmp(text + n - 6, "</svg>", 6);
}

/* Files in dir other than the harness's stdout.txt and stderr.txt. */
static int stray_files(const char *dir)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && strcmp(e->d_name, "stdout.txt") &&
             strcmp(e->d_name, "stderr.txt");
    closedir(d);
    return n;
}

static int setup(void **state)
{
    fixture *fx = calloc(1, sizeof *fx);
    if (!fx) return -1;
    if (!fjt_scratch_dir("bench-plot", fx->dir, sizeof fx->dir)) return -1;
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

/* ---- the chart writer ----------------------------------------------------- */

static void test_render_escapes_and_draws_one_bar_per_value(void **state)
{
    (void)state;
    const char *groups[] = {"a<b & \"c\" 'd'>", "short", "third"};
    const char *series[] = {"x&y", "plain"};
    const double values[] = {1.5, 2.5, NAN, 0.0, 3.0, -1.0}; /* NaN, < 0: no bar; 0: a bar */
    svg_bar_chart c = {.title = "T <1>",
                       .subtitle = "2026-01-01, dev & co",
                       .y_label = "TFLOP/s",
                       .groups = 3,
                       .series = 2,
                       .group_labels = groups,
                       .series_labels = series,
                       .values = values};
    char *svg = svg_bar_chart_render(&c);
    assert_non_null(svg);
    assert_true(!strncmp(svg, "<svg ", 5));
    assert_true(ends_with_svg_close(svg));
    assert_int_equal(count(svg, "<rect class=\"bar\""), 4);
    assert_int_equal(count(svg, "<text class=\"group-label\""), 3);
    expect_in("svg", svg, "a&lt;b &amp; &quot;c&quot; &apos;d&apos;&gt;");
    expect_in("svg", svg, "<text class=\"legend\" x=\"");
    expect_in("svg", svg, ">x&amp;y</text>");
    expect_in("svg", svg, ">plain</text>");
    expect_in("svg", svg, "T &lt;1&gt;");
    expect_in("svg", svg, "dev &amp; co");
    /* nothing unescaped got through: every '&' starts an entity */
    for (const char *p = svg; (p = strchr(p, '&')); p++)
        assert_true(!strncmp(p, "&amp;", 5) || !strncmp(p, "&lt;", 4) || !strncmp(p, "&gt;", 4) ||
                    !strncmp(p, "&quot;", 6) || !strncmp(p, "&apos;", 6));
    /* the 14-character label is wider than a two-bar group: all labels turn */
    assert_int_equal(count(svg, "transform=\"rotate(-45 "), 3);
    free(svg);

    /* short labels stay level, and an empty chart is still a document */
    const char *tiny[] = {"a", "b"};
    c.group_labels = tiny;
    c.groups = 2;
    svg = svg_bar_chart_render(&c);
    assert_non_null(svg);
    assert_int_equal(count(svg, "rotate(-45"), 0);
    free(svg);
    c.groups = 0;
    svg = svg_bar_chart_render(&c);
    assert_non_null(svg);
    assert_int_equal(count(svg, "<rect class=\"bar\""), 0);
    assert_true(ends_with_svg_close(svg));
    free(svg);
}

static void test_write_is_atomic_and_failure_leaves_nothing(void **state)
{
    fixture *fx = *state;
    char path[4200], bad[4300];
    snprintf(path, sizeof path, "%s/chart.svg", fx->dir);
    assert_int_equal(svg_plot_check_path(path), 0);
    assert_int_equal(stray_files(fx->dir), 0); /* the probe cleaned up */
    assert_int_equal(svg_plot_write_file(path, "<svg>old</svg>\n"), 0);
    assert_int_equal(svg_plot_write_file(path, "<svg>new</svg>\n"), 0);
    char *text = slurp(path);
    assert_non_null(text);
    assert_string_equal(text, "<svg>new</svg>\n");
    free(text);
    assert_int_equal(stray_files(fx->dir), 1);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    mode_t mask = umask(0);
    umask(mask);
    assert_int_equal(st.st_mode & 0777, 0666 & ~mask);

    snprintf(bad, sizeof bad, "%s/no-such-dir/chart.svg", fx->dir);
    assert_int_equal(svg_plot_check_path(bad), ENOENT);
    assert_int_equal(svg_plot_write_file(bad, "<svg/>"), ENOENT);
    assert_int_equal(svg_plot_check_path(fx->dir), EISDIR);
    snprintf(bad, sizeof bad, "%s/chart.svg/under-a-file.svg", fx->dir);
    assert_int_equal(svg_plot_write_file(bad, "<svg/>"), ENOTDIR);
    assert_int_equal(stray_files(fx->dir), 1);
}

/* ---- flashjit bench --plot -------------------------------------------------- */

/* The smoke grid's three shapes in one dtype, on two backends. */
#define SMOKE_SHAPES 3

static void test_bench_plot_with_json(void **state)
{
    fixture *fx = *state;
    char path[4200];
    snprintf(path, sizeof path, "%s/bench.svg", fx->dir);
    run_cli(fx, NULL, "bench", "--grid", "smoke", "--backends", "cpu,reference", "--dtypes", "f32",
            "--repeat", "1", "--warmup", "0", "--json", "--plot", path, NULL);
    fjt_cli_expect_status(&fx->r, 0);
    /* stdout is only the JSON; the note about the chart went to stderr */
    assert_true(!strncmp(fx->r.out, "{\"metadata\": {", 14));
    assert_true(strstr(fx->r.out, "\n]}\n") != NULL);
    assert_int_equal(count(fx->r.out, "{\"problem\": "), SMOKE_SHAPES * 2);
    expect_in("stderr", fx->r.err, path);

    char *svg = slurp(path);
    assert_non_null(svg);
    assert_true(!strncmp(svg, "<svg", 4));
    assert_true(ends_with_svg_close(svg));
    assert_int_equal(count(svg, "<rect class=\"bar\""), SMOKE_SHAPES * 2);
    assert_int_equal(count(svg, "<text class=\"group-label\""), SMOKE_SHAPES);
    expect_in("svg", svg, ">cpu</text>");
    expect_in("svg", svg, ">cpu-reference</text>");
    expect_in("svg", svg, ">b1 h2 s64 d64 causal f32</text>");
    expect_in("svg", svg, ">b1 h4/2 s1/128 d64 f32</text>");
    expect_in("svg", svg, "TFLOP/s");
    expect_in("svg", svg, "CPU "); /* the device, in the subtitle */
    free(svg);
    assert_int_equal(stray_files(fx->dir), 1);
}

static void test_bench_plot_with_csv_replaces_the_file(void **state)
{
    fixture *fx = *state;
    char path[4200];
    snprintf(path, sizeof path, "%s/bench.svg", fx->dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("old contents\n", f);
    fclose(f);
    run_cli(fx, NULL, "bench", "--grid", "smoke", "--backends", "cpu", "--dtypes", "f32,bf16",
            "--repeat", "1", "--warmup", "0", "--csv", "--plot", path, NULL);
    fjt_cli_expect_status(&fx->r, 0);
    /* header and rows, each record ending in CRLF (RFC 4180; the quoted
       descriptions hold bare LFs) */
    assert_int_equal(count(fx->r.out, "\r\n"), 1 + SMOKE_SHAPES * 2);
    char *svg = slurp(path);
    assert_non_null(svg);
    assert_true(!strncmp(svg, "<svg", 4));
    assert_int_equal(count(svg, "<rect class=\"bar\""), SMOKE_SHAPES * 2);
    assert_int_equal(count(svg, "<text class=\"legend\""), 1);
    expect_in("svg", svg, ">b1 h2 s64 d64 bf16</text>");
    free(svg);
}

static void test_bench_plot_unwritable_path(void **state)
{
    fixture *fx = *state;
    char file[4200], bad[4300];
    snprintf(bad, sizeof bad, "%s/no-such-dir/bench.svg", fx->dir);
    run_cli(fx, NULL, "bench", "--grid", "smoke", "--backends", "cpu", "--dtypes", "f32",
            "--repeat", "1", "--warmup", "0", "--plot", bad, NULL);
    assert_int_not_equal(fx->r.status, 0);
    expect_in("stderr", fx->r.err, "--plot");
    expect_in("stderr", fx->r.err, bad);
    assert_string_equal(fx->r.out, ""); /* it failed before benchmarking */
    assert_int_equal(stray_files(fx->dir), 0);

    /* a path under a regular file */
    snprintf(file, sizeof file, "%s/regular-file", fx->dir);
    FILE *f = fopen(file, "w");
    assert_non_null(f);
    fclose(f);
    snprintf(bad, sizeof bad, "%s/bench.svg", file);
    run_cli(fx, NULL, "bench", "--grid", "smoke", "--plot", bad, NULL);
    assert_int_not_equal(fx->r.status, 0);
    expect_in("stderr", fx->r.err, "--plot");
    assert_int_equal(stray_files(fx->dir), 1);

    run_cli(fx, NULL, "bench", "--plot", NULL);
    fjt_cli_expect_status(&fx->r, 2);
    expect_in("stderr", fx->r.err, "--plot");
    run_cli(fx, NULL, "bench", "--help", NULL);
    fjt_cli_expect_status(&fx->r, 0);
    expect_in("stdout", fx->r.out, "--plot FILE.svg");
}

/* ---- flashjit info: the tuning file ---------------------------------------- */

/* The CPU tiled backend's device field, as a default context would key it. */
static void this_cpu_token(char *buf, size_t n)
{
    fj_context *ctx;
    assert_int_equal(fj_context_create(NULL, &ctx), FJ_OK);
    fj_cpu_device_token(ctx->cpu_threads, buf, n);
    fj_context_destroy(ctx);
}

static void test_info_reports_the_tuning_file(void **state)
{
    fixture *fx = *state;
    char token[96], path[4200], want[4400];
    this_cpu_token(token, sizeof token);
    snprintf(path, sizeof path, "%s/tuning.txt", fx->dir);

    run_cli(fx, path, "info", NULL);
    fjt_cli_expect_status(&fx->r, 0);
    snprintf(want, sizeof want, "file: %s (not present)\n", path);
    expect_in("stdout", fx->r.out, want);
    expect_in("stdout", fx->r.out, "shipped table: ");

    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f,
            "flashjit-tuning 1\n"
            "%s cpu cpu_tiled 64 f32 nomask 512 q64k64 0.5 2026-12-02\n"
            "%s cpu cpu_tiled 128 bf16 causal 4096 q64k128 9.5 2026-12-02\n"
            "cpu:Some_other_machine_3t cpu cpu_tiled 128 f32 nomask 4096 q64k128 9.5 2026-12-02\n",
            token, token);
    fclose(f);
    run_cli(fx, path, "info", NULL);
    fjt_cli_expect_status(&fx->r, 0);
    snprintf(want, sizeof want, "file: %s (present, 3 entries)\n", path);
    expect_in("stdout", fx->r.out, want);
    snprintf(want, sizeof want, "matching cpu %s: 2\n", token);
    expect_in("stdout", fx->r.out, want);
    expect_in("stdout", fx->r.out, "matching cuda");
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s PATH-TO-flashjit\n", argv[0]);
        return 2;
    }
    flashjit_path = argv[1];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_render_escapes_and_draws_one_bar_per_value),
        cmocka_unit_test_setup_teardown(test_write_is_atomic_and_failure_leaves_nothing, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_bench_plot_with_json, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bench_plot_with_csv_replaces_the_file, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_bench_plot_unwritable_path, setup, teardown),
        cmocka_unit_test_setup_teardown(test_info_reports_the_tuning_file, setup, teardown),
    };
    return cmocka_run_group_tests_name("bench_plot", tests, NULL, NULL);
}
