/* `flashjit tune` through the built binary (its path is argv[1]) on the CPU
 * backend, on spaces small enough to take a fraction of a second: the file
 * it writes parses (fj_tuning_parse) and a plan made in a new context that
 * reads it uses the tuned entry; a rerun resumes (skips what the file has)
 * and --force re-tunes; the default output is the context's tuning file;
 * and bad input (unknown flag, bad values, an output that cannot be
 * written or is not a tuning file) exits 2 or 1 with a message naming the
 * flag, never crashes, and leaves no file or half-written line behind. */
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

#include "cli_run.h"
#include "cpu/tiled_blocks.h"
#include "flashjit.h"
#include "strbuf.h"
#include "tune/tuning.h"

static const char *flashjit_path;

typedef struct fixture {
    char dir[4096];  /* scratch */
    char file[4200]; /* the --output of most tests */
    fjt_cli_result r;
} fixture;

/* The tiny space most tests tune: one point, two candidates, two runs. */
#define TINY                                                                                     \
    "--backend", "cpu", "--head-dims", "32", "--seqlens", "256", "--causal", "none", "--dtypes", \
        "f32", "--configs", "q64k128,q128k256", "--repeat", "2", "--warmup", "0"

/* Runs flashjit tune with the arguments (NULL-terminated); env_tuning set
 * as FLASHJIT_TUNING_FILE when not NULL (else unset). */
static void run_tune(fixture *fx, const char *env_tuning, ...)
{
    const char *const prefix[] = {flashjit_path, "tune", NULL};
    va_list ap;
    va_start(ap, env_tuning);
    fjt_cli_run_args(fx->dir, "FLASHJIT_TUNING_FILE", env_tuning, prefix, ap, &fx->r);
    va_end(ap);
}

static void expect_in(const char *what, const char *text, const char *needle)
{
    if (!strstr(text, needle)) fail_msg("%s lacks '%s':\n%s", what, needle, text);
}

static bool exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

static int setup(void **state)
{
    fixture *fx = calloc(1, sizeof *fx);
    if (!fx) return -1;
    if (!fjt_scratch_dir("tune-cli", fx->dir, sizeof fx->dir)) return -1;
    snprintf(fx->file, sizeof fx->file, "%s/tuning.txt", fx->dir);
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

/* The file parsed: entries counted, no problem notes. */
static fj_tuning *parse_file(const char *path, int want_entries)
{
    static char text[65536];
    fjt_read_file(path, text, sizeof text);
    fj_tuning *t = NULL;
    fj_strbuf notes;
    fj_strbuf_init(&notes);
    assert_int_equal(fj_tuning_parse(text, path, &t, &notes), FJ_OK);
    if (notes.len) fail_msg("%s has problems:\n%s\n%s", path, notes.data, text);
    fj_strbuf_free(&notes);
    if (fj_tuning_count(t) != want_entries)
        fail_msg("%s has %d entries, expected %d:\n%s", path, fj_tuning_count(t), want_entries,
                 text);
    return t;
}

static fj_context *cpu_context(const char *tuning_file)
{
    fj_context_options o;
    fj_context_options_init(&o);
    o.backend = FJ_BACKEND_CPU;
    o.cache_dir = "";
    o.tuning_file = tuning_file;
    fj_context *ctx = NULL;
    assert_int_equal(fj_context_create(&o, &ctx), FJ_OK);
    return ctx;
}

/* The key of the tiny space's point on this machine, as plans look it up. */
static void tiny_key(fj_tuning_entry *key)
{
    char device[96];
    fj_cpu_device_token((int)sysconf(_SC_NPROCESSORS_ONLN), device, sizeof device);
    memset(key, 0, sizeof *key);
    snprintf(key->device, sizeof key->device, "%s", device);
    snprintf(key->arch, sizeof key->arch, "cpu");
    snprintf(key->template_name, sizeof key->template_name, "cpu_tiled");
    key->head_dim = 32;
    snprintf(key->dtype, sizeof key->dtype, "f32");
    snprintf(key->mask, sizeof key->mask, "nomask");
    key->bucket = fj_tuning_bucket(256, 256);
}

/* ---- tuning, and a new context using the result ---------------------------------- */

static void test_tune_writes_an_entry_plans_use(void **state)
{
    fixture *fx = *state;
    run_tune(fx, NULL, TINY, "--output", fx->file, NULL);
    fjt_cli_expect_status(&fx->r, 0);
    expect_in("stdout", fx->r.out, "summary: 1 point tuned");
    expect_in("stdout", fx->r.out, "0 wrong");

    fj_tuning *t = parse_file(fx->file, 1);
    fj_tuning_entry key;
    tiny_key(&key);
    const fj_tuning_entry *e = fj_tuning_find_in(t, &key);
    if (!e)
        fail_msg("no entry for %s d32 f32 nomask bucket %d in %s", key.device, key.bucket,
                 fx->file);
    int bq, bk;
    char tail;
    assert_int_equal(sscanf(e->config, "q%dk%d%c", &bq, &bk, &tail), 2);
    assert_true(e->ms > 0);
    assert_int_equal((int)strlen(e->date), 10);

    /* A new context reading the file: its plan for the point runs the tuned
       entry's blocks, and says they came from the tuning file. */
    fj_context *ctx = cpu_context(fx->file);
    expect_in("context describe", fj_context_describe(ctx), "(1 entries)");
    fj_attention_desc d;
    fj_attention_desc_init(&d, 1, 8, 8, 256, 256, 32, FJ_F32);
    fj_plan *plan = NULL;
    assert_int_equal(fj_plan_create(ctx, &d, &plan), FJ_OK);
    fj_plan_info info;
    assert_int_equal(fj_plan_get_info(plan, &info), FJ_OK);
    assert_int_equal(info.tiles_source, FJ_TILES_TUNING_FILE);
    /* The candidates fit the problem (block_q <= 256 rows x 8 heads, block_k
       <= 256 keys), so the plan runs the entry's blocks uncapped. */
    assert_string_equal(info.tiles, e->config);
    expect_in("plan describe", fj_plan_describe(plan), "tuned: the tuning file entry");
    fj_plan_destroy(plan);
    fj_context_destroy(ctx);
    fj_tuning_free(t);
}

static void test_rerun_resumes_and_force_retunes(void **state)
{
    fixture *fx = *state;
    run_tune(fx, NULL, TINY, "--output", fx->file, NULL);
    fjt_cli_expect_status(&fx->r, 0);
    char before[65536], after[65536];
    fjt_read_file(fx->file, before, sizeof before);

    run_tune(fx, NULL, TINY, "--output", fx->file, NULL);
    fjt_cli_expect_status(&fx->r, 0);
    /* The problem by its key, the file's entry by its point (docs/tuning.md). */
    expect_in("stdout", fx->r.out, "skipping b1.hq8.hkv8.sq256.sk256.d32.f32.nomask");
    expect_in("stdout", fx->r.out, "for d32.f32.nomask.sk512");
    expect_in("stdout", fx->r.out, "--force re-tunes");
    expect_in("stdout", fx->r.out, "nothing to do");
    fjt_read_file(fx->file, after, sizeof after);
    assert_string_equal(before, after);

    run_tune(fx, NULL, TINY, "--output", fx->file, "--force", NULL);
    fjt_cli_expect_status(&fx->r, 0);
    expect_in("stdout", fx->r.out, "re-tuning b1.hq8.hkv8.sq256.sk256.d32.f32.nomask");
    fj_tuning_free(parse_file(fx->file, 2));
}

/* Without --write or --output nothing is written (the report says how to
 * save); --write appends to the file a default context reads:
 * FLASHJIT_TUNING_FILE. */
static void test_default_output_is_the_context_tuning_file(void **state)
{
    fixture *fx = *state;
    char env_file[4300];
    snprintf(env_file, sizeof env_file, "%s/from-env.txt", fx->dir);
    run_tune(fx, env_file, TINY, NULL);
    fjt_cli_expect_status(&fx->r, 0);
    assert_false(exists(env_file));
    expect_in("stdout", fx->r.out, "output none (a report only)");
    expect_in("stdout", fx->r.out, "not saved: rerun with --write");
    expect_in("stdout", fx->r.out, env_file);
    run_tune(fx, env_file, TINY, "--write", NULL);
    fjt_cli_expect_status(&fx->r, 0);
    expect_in("stdout", fx->r.out, env_file);
    fj_tuning_free(parse_file(env_file, 1));
}

/* A point whose runs scatter past --max-spread is reported as too wide to
 * trust, naming the threshold; 0 % makes any scatter count. */
static void test_spread_warning(void **state)
{
    fixture *fx = *state;
    run_tune(fx, NULL, TINY, "--output", fx->file, "--max-spread=0", NULL);
    fjt_cli_expect_status(&fx->r, 0);
    expect_in("stdout", fx->r.out, "warning: b");
    expect_in("stdout", fx->r.out, "> 0%, --max-spread): too wide to trust");
    expect_in("stdout", fx->r.out, "spread more than 0% between runs");
    run_tune(fx, NULL, TINY, "--output", fx->file, "--force", "--max-spread", "1000000", NULL);
    fjt_cli_expect_status(&fx->r, 0);
    if (strstr(fx->r.out, "too wide to trust")) fail_msg("warned at 1000000%%:\n%s", fx->r.out);
}

/* A last line cut short (a writer killed mid-line) is ended before the new
 * entry: it stays one malformed line and the entry after it parses. */
static void test_cut_short_last_line_does_not_swallow_the_entry(void **state)
{
    fixture *fx = *state;
    FILE *f = fopen(fx->file, "w");
    assert_non_null(f);
    fputs("flashjit-tuning 1\n"
          "other_machine cpu cpu_tiled 64 f32 nomask 512 q64k64 1.5 2026-01-01\n"
          "other_machine cpu cpu_tiled 64 f32 causal 512 q6",
          f);
    fclose(f);
    run_tune(fx, NULL, TINY, "--output", fx->file, NULL);
    fjt_cli_expect_status(&fx->r, 0);
    static char text[65536];
    fjt_read_file(fx->file, text, sizeof text);
    fj_tuning *t = NULL;
    fj_strbuf notes;
    fj_strbuf_init(&notes);
    assert_int_equal(fj_tuning_parse(text, "t", &t, &notes), FJ_OK);
    assert_int_equal(fj_tuning_count(t), 2); /* the other machine's and the new one */
    expect_in("parse notes", notes.data ? notes.data : "", "t:3:");
    fj_tuning_entry key;
    tiny_key(&key);
    assert_non_null(fj_tuning_find_in(t, &key));
    fj_strbuf_free(&notes);
    fj_tuning_free(t);
}

/* --grid FILE: the problems are the file's keys, printed as they are written;
 * two that share a tuning point are tuned once; axis flags do not combine. */
static void test_grid_file(void **state)
{
    fixture *fx = *state;
    char grid[4300];
    snprintf(grid, sizeof grid, "%s/grid.txt", fx->dir);
    FILE *f = fopen(grid, "w");
    assert_non_null(f);
    fputs("# two points; the third row shares the first's\n"
          "b1.hq4.hkv2.sq200.sk200.d32.f32.causal_br\n"
          "b2.hq2.hkv2.sq1.sk300.d16.f32.nomask   # decode\n"
          "b1.hq4.hkv2.sq190.sk190.d32.f32.causal_tl\n",
          f);
    fclose(f);
    run_tune(fx, NULL, "--backend", "cpu", "--grid", grid, "--configs", "q64k128,q128k256",
             "--repeat", "2", "--warmup", "0", "--output", fx->file, NULL);
    fjt_cli_expect_status(&fx->r, 0);
    expect_in("stdout", fx->r.out, "summary: 2 points tuned");
    expect_in("stdout", fx->r.out, "\nb1.hq4.hkv2.sq200.sk200.d32.f32.causal_br ");
    expect_in("stdout", fx->r.out, "\nb2.hq2.hkv2.sq1.sk300.d16.f32.nomask ");
    expect_in("stdout", fx->r.out,
              "note: b1.hq4.hkv2.sq190.sk190.d32.f32.causal_tl has the tuning "
              "point d32.f32.causal.sk512 of b1.hq4.hkv2.sq200.sk200.d32.f32.causal_br");
    fj_tuning *t = parse_file(fx->file, 2);
    assert_string_equal(fj_tuning_entry_at(t, 0)->point, "d32.f32.causal.sk512");
    assert_string_equal(fj_tuning_entry_at(t, 1)->point, "d16.f32.nomask.decode");
    fj_tuning_free(t);

    run_tune(fx, NULL, "--backend", "cpu", "--grid", grid, "--head-dims", "64", "--output",
             fx->file, NULL);
    fjt_cli_expect_status(&fx->r, 2);
    expect_in("stderr", fx->r.err, "takes no axis flag");

    f = fopen(grid, "w");
    fputs("b1.hq4.hkv2.sq200.sk200.d32.f32.causal_br\nb1.hq4.hkv2.sq200.sk200.d32.f32.causal\n", f);
    fclose(f);
    run_tune(fx, NULL, "--backend", "cpu", "--grid", grid, "--output", fx->file, NULL);
    fjt_cli_expect_status(&fx->r, 2);
    expect_in("stderr", fx->r.err,
              "grid.txt:2: problem key 'b1.hq4.hkv2.sq200.sk200.d32.f32.causal': field 8");
}

/* ---- bad input ------------------------------------------------------------------------ */

typedef struct bad_case {
    const char *args[8];
    int status;
    const char *message; /* in stderr */
} bad_case;

static void test_bad_flags_exit_2_naming_the_flag(void **state)
{
    fixture *fx = *state;
    static const bad_case cases[] = {
        {{"--bogus"}, 2, "unknown option '--bogus'"},
        {{"--repeat=0"}, 2, "--repeat: '0'"},
        {{"--max-spread", "lots"}, 2, "--max-spread: 'lots'"},
        {{"--write"}, 2, "--write and --output exclude each other"},
        {{"--", "--decode"}, 2, "unexpected argument '--decode'"},
        {{"--head-dims", "0"}, 2, "--head-dims: '0' is not a head dim"},
        {{"--head-dims", "64,577"}, 2, "--head-dims: '577' is not a head dim in 1..576"},
        {{"--head-dims", "sixty"}, 2, "--head-dims: 'sixty'"},
        {{"--head-dims"}, 2, "--head-dims needs"},
        {{"--head-dims", "--decode"}, 2, "--head-dims needs"},
        {{"--dtypes", "f8"}, 2, "--dtypes: 'f8'"},
        {{"--causal", "left"}, 2, "--causal: 'left'"},
        {{"--seqlens", "-5"}, 2, "--seqlens: '-5'"},
        {{"--repeat", "0"}, 2, "--repeat"},
        {{"--warmup", "x"}, 2, "--warmup"},
        {{"--jobs", "0"}, 2, "--jobs"},
        {{"--batch-heads", "99999999"}, 2, "--batch-heads"},
        {{"--grid", "huge"}, 2, "--grid: 'huge'"},
        {{"--backend", "gpu"}, 2, "--backend: 'gpu'"},
        {{"--backend", "cpu", "--configs", "m128n64w4s2"}, 2, "--configs: 'm128n64w4s2'"},
        {{"--backend", "cpu", "--configs", "q64k128;rm"}, 2, "--configs: 'q64k128;rm'"},
        /* Checked before any device work, so these hold without a GPU. */
        {{"--backend", "cuda", "--head-dims", "100"}, 2, "--head-dims: 100 is not a multiple of 8"},
        {{"--backend", "cuda", "--head-dims", "264"},
         2,
         "--head-dims: 264 is not a multiple of 8 in 8..256, which the CUDA kernels need "
         "(--backend cpu takes any head dim up to 576)"},
        {{"--backend", "cuda", "--dtypes", "f32"}, 2, "--dtypes"},
        {{"--backend", "cuda", "--configs", "q64k128"}, 2, "--configs: 'q64k128'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const bad_case *c = &cases[i];
        run_tune(fx, NULL, "--output", fx->file, c->args[0], c->args[1], c->args[2], c->args[3],
                 c->args[4], NULL);
        if (fx->r.status != c->status)
            fail_msg("case %zu (%s %s): exit %d, expected %d\nstderr:\n%s", i, c->args[0],
                     c->args[1] ? c->args[1] : "", fx->r.status, c->status, fx->r.err);
        expect_in("stderr", fx->r.err, c->message);
        assert_false(exists(fx->file));
    }
}

static void test_unusable_output_exits_1_naming_output(void **state)
{
    fixture *fx = *state;
    char missing[4300];
    snprintf(missing, sizeof missing, "%s/no/such/dir/t.txt", fx->dir);
    run_tune(fx, NULL, TINY, "--output", missing, NULL);
    fjt_cli_expect_status(&fx->r, 1);
    expect_in("stderr", fx->r.err, "--output");
    expect_in("stderr", fx->r.err, "cannot create it");
    assert_false(exists(missing));

    run_tune(fx, NULL, TINY, "--output", fx->dir, NULL);
    fjt_cli_expect_status(&fx->r, 1);
    expect_in("stderr", fx->r.err, "not a regular file");

    run_tune(fx, NULL, TINY, "--output", "", NULL);
    fjt_cli_expect_status(&fx->r, 2);
    expect_in("stderr", fx->r.err, "--output needs a file name");

    /* Someone's file that is not a tuning file is never appended to. */
    FILE *f = fopen(fx->file, "w");
    assert_non_null(f);
    fputs("my notes\n", f);
    fclose(f);
    run_tune(fx, NULL, TINY, "--output", fx->file, NULL);
    fjt_cli_expect_status(&fx->r, 1);
    expect_in("stderr", fx->r.err, "not a flashjit tuning file");
    char text[256];
    fjt_read_file(fx->file, text, sizeof text);
    assert_string_equal(text, "my notes\n");
}

static void test_help(void **state)
{
    fixture *fx = *state;
    run_tune(fx, NULL, "--help", NULL);
    fjt_cli_expect_status(&fx->r, 0);
    expect_in("stdout", fx->r.out, "usage: flashjit tune");
    expect_in("stdout", fx->r.out, "--batch-heads N");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s PATH_TO_FLASHJIT\n", argv[0]);
        return 2;
    }
    flashjit_path = argv[1];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_tune_writes_an_entry_plans_use, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rerun_resumes_and_force_retunes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_default_output_is_the_context_tuning_file, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_spread_warning, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cut_short_last_line_does_not_swallow_the_entry, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_grid_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_flags_exit_2_naming_the_flag, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unusable_output_exits_1_naming_output, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_help, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
