/* The tuning file: format 1 and 2, problems reported by line, appending in a
 * file's own format, lookup order, a plan that picks up a tuned
 * configuration (CPU tiled backend; the CUDA backend uses the same lookup);
 * the public calls: import and export (all or nothing, atomic file),
 * FJ_PLAN_MEASURE (measured, saved when asked, not measured twice), and all
 * of them from several threads at once. */
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "cpu/tiled_blocks.h"
#include "harness.h"
#include "plan.h"
#include "problem.h"
#include "tune/tuning.h"

static void test_parse_and_problems(void **state)
{
    (void)state;
    const char *text =
        "# comment\n"
        "\n"
        "flashjit-tuning 1\n"
        "NVIDIA_H200 sm_90 flash_fwd 128 bf16 causal 4096 m128n64w4s2 0.81 2026-12-02\n"
        "NVIDIA_H200 sm_90 flash_fwd 128 bf16\n"
        "NVIDIA_H200 sm_90 flash_fwd 999 bf16 causal 4096 m128n64w4s2 0.81 2026-12-02\n"
        "NVIDIA_H200 sm_90 flash_fwd 64 f64 causal 4096 m128n64w4s2 0.81 2026-12-02\n"
        "NVIDIA_H200 sm_90 flash_fwd 64 f16 nomask 1 m64n64w4s2 0.02 2026-12-02 extra\n"
        "NVIDIA_H200 sm_90 flash_fwd 128 bf16 causal 4096 m64n64w4s2 0.75 2026-12-03\n";
    fj_tuning *t;
    fj_strbuf notes;
    fj_strbuf_init(&notes);
    assert_int_equal(fj_tuning_parse(text, "t.txt", &t, &notes), FJ_OK);
    assert_int_equal(fj_tuning_count(t), 2);
    printf("%s", notes.data);
    assert_non_null(strstr(notes.data, "t.txt:5: expected 10 fields"));
    assert_non_null(strstr(notes.data, "t.txt:6: head_dim out of range"));
    assert_non_null(strstr(notes.data, "t.txt:7: dtype"));
    assert_non_null(strstr(notes.data, "t.txt:8: more than 10 fields"));
    assert_int_equal(fj_tuning_count_matching(t, "NVIDIA_H200", "sm_90"), 2);
    assert_int_equal(fj_tuning_count_matching(t, "NVIDIA_H100", "sm_90"), 0);
    fj_tuning_free(t);
    fj_strbuf_free(&notes);

    fj_strbuf_init(&notes);
    /* Format 2 is read now (test_format_2); a version after it is ignored. */
    assert_int_equal(fj_tuning_parse("flashjit-tuning 3\nx\n", "v3.txt", &t, &notes), FJ_OK);
    assert_int_equal(fj_tuning_count(t), 0);
    assert_non_null(strstr(notes.data, "format version 3 is not 1 or 2; file ignored"));
    fj_tuning_free(t);
    fj_strbuf_free(&notes);
    fj_strbuf_init(&notes);
    assert_int_equal(fj_tuning_parse("hello\n", "x.txt", &t, &notes), FJ_OK);
    assert_non_null(strstr(notes.data, "x.txt:1: first line is not"));
    fj_tuning_free(t);
    fj_strbuf_free(&notes);
}

static void test_buckets_and_tokens(void **state)
{
    (void)state;
    assert_int_equal(fj_tuning_bucket(1, 100000), 1);
    assert_int_equal(fj_tuning_bucket(16, 4096), 1);
    assert_int_equal(fj_tuning_bucket(17, 100), 512);
    assert_int_equal(fj_tuning_bucket(1024, 1024), 1024);
    assert_int_equal(fj_tuning_bucket(1024, 1500), 1024);
    assert_int_equal(fj_tuning_bucket(1024, 1600), 2048);
    assert_int_equal(fj_tuning_bucket(4096, 4096), 4096);
    assert_int_equal(fj_tuning_bucket(20000, 1 << 20), 32768);
    char tok[64];
    fj_tuning_device_token("NVIDIA H200 (x)", tok, sizeof tok);
    assert_string_equal(tok, "NVIDIA_H200__x_");
}

/* A tuning file written with fj_tuning_append is read back by a context and
 * its entry decides the CPU plan's blocks; a re-tuned line supersedes. */
static void test_plan_uses_tuning_file(void **state)
{
    (void)state;
    char dir[] = "/tmp/fjtuneXXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[128];
    snprintf(path, sizeof path, "%s/tuning.txt", dir);

    fj_attention_desc d;
    fj_attention_desc_init(&d, 1, 2, 2, 300, 300, 64, FJ_F32);
    d.causal = FJ_CAUSAL_BOTTOM_RIGHT;
    fj_problem p;
    assert_int_equal(fj_problem_init(&p, &d), FJ_OK);
    char device[96];
    fj_cpu_device_token(2, device, sizeof device);
    fj_tuning_entry e;
    fj_tuning_key_for(&p, device, "cpu", "cpu_tiled", &e);
    assert_string_equal(e.mask, "causal");
    assert_int_equal(e.bucket, 512); /* 300 keys: nearest power of two in [512, 32768] */
    snprintf(e.config, sizeof e.config, "q32k48");
    e.ms = 1.5;
    snprintf(e.date, sizeof e.date, "2026-12-02");
    assert_int_equal(fj_tuning_append(path, &e), FJ_OK);
    snprintf(e.config, sizeof e.config, "q48k40"); /* re-tuned: the last line wins */
    assert_int_equal(fj_tuning_append(path, &e), FJ_OK);

    fj_context_options o;
    fj_context_options_init(&o);
    o.backend = FJ_BACKEND_CPU;
    o.cache_dir = "";
    o.tuning_file = path;
    o.cpu_threads = 2;
    fj_context *ctx;
    assert_int_equal(fj_context_create(&o, &ctx), FJ_OK);
    assert_non_null(strstr(fj_context_describe(ctx), "(2 entries)"));
    fj_plan *plan;
    assert_int_equal(fj_plan_create(ctx, &d, &plan), FJ_OK);
    const char *desc = fj_plan_describe(plan);
    printf("%s", desc);
    assert_non_null(strstr(desc, "tuned: the tuning file entry"));
    fj_plan_info info;
    assert_int_equal(fj_plan_get_info(plan, &info), FJ_OK);
    assert_int_equal(info.tiles_source, FJ_TILES_TUNING_FILE);
    assert_string_equal(info.tiles, "q48k40");
    fj_plan_destroy(plan);

    /* a given configuration wins over the file, and a bad one is refused */
    assert_int_equal(fj_plan_create_config(ctx, &d, "q16k16", &plan), FJ_OK);
    assert_non_null(strstr(fj_plan_describe(plan), "given configuration q16k16"));
    assert_int_equal(fj_plan_get_info(plan, &info), FJ_OK);
    assert_int_equal(info.tiles_source, FJ_TILES_GIVEN);
    assert_string_equal(info.tiles, "q16k16");
    fj_plan_destroy(plan);
    assert_int_equal(fj_plan_create_config(ctx, &d, "m64n64w4s2", &plan), FJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(fj_last_error(), "q<block_q>k<block_k>"));

    /* the tuned plan computes the right thing */
    fjt_rng rng;
    fjt_rng_init(&rng, fjt_seed());
    fjt_problem tp;
    assert_true(fjt_problem_make(&tp, &d, &rng));
    fjt_error err;
    assert_int_equal(fjt_run(ctx, &tp, &err, true), FJ_OK);
    assert_true(err.rel_fro <= fjt_tolerance(d.dtype));
    fjt_problem_free(&tp);
    fj_context_destroy(ctx);

    /* no tuning file: the shipped table where it has this machine's entry
       (src/tuning/ holds one for the development machine), else the
       heuristic, and describe says which */
    o.tuning_file = "";
    assert_int_equal(fj_context_create(&o, &ctx), FJ_OK);
    assert_int_equal(fj_plan_create(ctx, &d, &plan), FJ_OK);
    const char *why = fj_plan_describe(plan);
    assert_true(strstr(why, "heuristic") || strstr(why, "tuned: the shipped tuning table entry"));
    assert_null(strstr(why, "the tuning file entry"));
    assert_int_equal(fj_plan_get_info(plan, &info), FJ_OK);
    assert_true(info.tiles_source == FJ_TILES_HEURISTIC ||
                info.tiles_source == FJ_TILES_SHIPPED_TABLE);
    fj_plan_destroy(plan);
    fj_context_destroy(ctx);
    unlink(path);
    rmdir(dir);
}

/* A scratch directory and a path in it; removed by cleanup(). */
typedef struct scratch {
    char dir[64];
    char path[128];
} scratch;

static void scratch_make(scratch *s, const char *file)
{
    snprintf(s->dir, sizeof s->dir, "/tmp/fjtuneXXXXXX");
    assert_non_null(mkdtemp(s->dir));
    snprintf(s->path, sizeof s->path, "%s/%s", s->dir, file);
}

static void scratch_remove(scratch *s)
{
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", s->dir);
    assert_int_equal(system(cmd), 0);
}

static char *slurp(const char *path)
{
    static char text[1 << 16];
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    return text;
}

static fj_context *cpu_context(const char *tuning_file)
{
    fj_context_options o;
    fj_context_options_init(&o);
    o.backend = FJ_BACKEND_CPU;
    o.cache_dir = "";
    o.tuning_file = tuning_file;
    o.cpu_threads = 2;
    fj_context *ctx;
    assert_int_equal(fj_context_create(&o, &ctx), FJ_OK);
    return ctx;
}

/* This machine's CPU tuning line for d's point, in format 2. */
static void entry_line(const fj_attention_desc *d, const char *config, char *line, size_t n)
{
    fj_problem p;
    assert_int_equal(fj_problem_init(&p, d), FJ_OK);
    char device[96];
    fj_cpu_device_token(2, device, sizeof device);
    fj_tuning_entry e;
    fj_tuning_key_for(&p, device, "cpu", "cpu_tiled", &e);
    snprintf(e.config, sizeof e.config, "%s", config);
    e.ms = 2.5;
    snprintf(e.date, sizeof e.date, "2026-12-04");
    fj_tuning_format_entry(&e, 2, line, n);
}

static void test_format_2(void **state)
{
    (void)state;
    const char *text =
        "flashjit-tuning 2\n"
        "# device arch template point config ms date\n"
        "NVIDIA_H200 sm_90 flash_fwd d128.bf16.causal.sk4096 m128n64w4s2 0.81 2026-12-02\n"
        "NVIDIA_H200 sm_90 flash_fwd d64.f16.nomask.decode m16n64w1s2 0.02 2026-12-02\n"
        "NVIDIA_H200 sm_90 flash_fwd 128 bf16 causal 4096 m128n64w4s2 0.81 2026-12-02\n"
        "NVIDIA_H200 sm_90 flash_fwd d128.bf16.causal.sk4000 m128n64w4s2 0.81 2026-12-02\n"
        "NVIDIA_H200 sm_90 flash_fwd d0128.bf16.causal.sk4096 m128n64w4s2 0.81 2026-12-02\n"
        "NVIDIA_H200 sm_90 flash_fwd d128.bf16.causal.sk4096 m128n64w4s2 0 2026-12-02\n"
        "NVIDIA_H200 sm_90 flash_fwd d128.bf16.causal.sk4096 m64n64w4s2 0.75 2026-12-03 x\n";
    fj_tuning *t;
    fj_strbuf notes;
    fj_strbuf_init(&notes);
    assert_int_equal(fj_tuning_parse(text, "v2.txt", &t, &notes), FJ_OK);
    printf("%s", notes.data);
    assert_int_equal(fj_tuning_count(t), 2);
    assert_non_null(strstr(notes.data, "v2.txt:5: expected 7 fields"));
    assert_non_null(strstr(notes.data, "v2.txt:6: bucket is not 1 (decode) or a power of two"));
    assert_non_null(strstr(notes.data, "v2.txt:7: the point is not in its canonical form"));
    assert_non_null(strstr(notes.data, "v2.txt:8: ms must be > 0"));
    assert_non_null(strstr(notes.data, "v2.txt:9: more than 7 fields"));
    fj_strbuf_free(&notes);

    /* The same entry in format 1 is the same key: either file serves. */
    fj_tuning *v1;
    fj_strbuf_init(&notes);
    assert_int_equal(fj_tuning_parse("flashjit-tuning 1\n"
                                     "NVIDIA_H200 sm_90 flash_fwd 128 bf16 causal 4096 m64n64w4s2 "
                                     "0.7 2026-12-01\n",
                                     "v1.txt", &v1, &notes),
                     FJ_OK);
    assert_null(notes.data);
    const fj_tuning_entry *e1 = fj_tuning_entry_at(v1, 0);
    assert_string_equal(e1->point, "d128.bf16.causal.sk4096");
    const fj_tuning_entry *e2 = fj_tuning_find_in(t, e1);
    assert_non_null(e2);
    assert_string_equal(e2->config, "m128n64w4s2");

    /* Formatted as format 2: each point's winner once, and it reads back. */
    assert_int_equal(fj_tuning_add_all(t, v1, FJ_TILES_IMPORTED), FJ_OK);
    fj_strbuf out;
    fj_strbuf_init(&out);
    fj_tuning_format(t, &out);
    printf("%s", out.data);
    assert_non_null(strstr(out.data, "flashjit-tuning 2\n"));
    assert_non_null(strstr(out.data, "d128.bf16.causal.sk4096 m64n64w4s2 0.7 2026-12-01\n"));
    assert_null(strstr(out.data, "m128n64w4s2"));
    fj_tuning *back;
    assert_int_equal(fj_tuning_parse_strict(out.data, "out", &back), FJ_OK);
    assert_int_equal(fj_tuning_count(back), 2);
    fj_tuning_free(back);
    fj_strbuf_free(&out);
    fj_tuning_free(v1);
    fj_tuning_free(t);
}

/* fj_tuning_append writes a new file in format 2, keeps a format 1 file in
 * format 1, ends a cut-short last line first, and refuses other files. */
static void test_append_keeps_the_file_format(void **state)
{
    (void)state;
    scratch s;
    scratch_make(&s, "t.txt");
    fj_attention_desc d;
    fj_attention_desc_init(&d, 1, 2, 2, 300, 300, 64, FJ_F32);
    fj_problem p;
    assert_int_equal(fj_problem_init(&p, &d), FJ_OK);
    fj_tuning_entry e;
    fj_tuning_key_for(&p, "dev", "cpu", "cpu_tiled", &e);
    snprintf(e.config, sizeof e.config, "q32k48");
    e.ms = 1.5;
    snprintf(e.date, sizeof e.date, "2026-12-04");

    assert_int_equal(fj_tuning_append(s.path, &e), FJ_OK);
    assert_non_null(strstr(slurp(s.path), "flashjit-tuning 2\n"));
    assert_non_null(
        strstr(slurp(s.path), "dev cpu cpu_tiled d64.f32.nomask.sk512 q32k48 1.5 2026-12-04\n"));

    FILE *f = fopen(s.path, "w");
    fputs("# mine\nflashjit-tuning 1\nother cpu cpu_tiled 64 f32 nomask 512 q8k8 1 "
          "2026-01-01\nother cpu cpu_t",
          f);
    fclose(f);
    assert_int_equal(fj_tuning_append(s.path, &e), FJ_OK);
    const char *text = slurp(s.path);
    assert_non_null(
        strstr(text,
               "other cpu cpu_t\ndev cpu cpu_tiled 64 f32 nomask 512 q32k48 1.5 2026-12-04\n"));
    fj_tuning *t;
    fj_strbuf notes;
    fj_strbuf_init(&notes);
    assert_int_equal(fj_tuning_parse(text, "t", &t, &notes), FJ_OK);
    assert_int_equal(fj_tuning_count(t), 2);
    assert_non_null(strstr(notes.data, "t:4:"));
    fj_strbuf_free(&notes);
    fj_tuning_free(t);

    f = fopen(s.path, "w");
    fputs("my notes\n", f);
    fclose(f);
    assert_int_equal(fj_tuning_append(s.path, &e), FJ_ERR_IO);
    assert_string_equal(slurp(s.path), "my notes\n");
    assert_int_equal(fj_tuning_file_check(s.path, NULL, NULL), FJ_ERR_IO);
    assert_non_null(strstr(fj_last_error(), "not a flashjit tuning file"));
    scratch_remove(&s);
}

static void test_import_and_export(void **state)
{
    (void)state;
    scratch s;
    scratch_make(&s, "exported.txt");
    fj_attention_desc d;
    fj_attention_desc_init(&d, 1, 4, 4, 200, 200, 32, FJ_F32);
    char line[400], text[1200];
    entry_line(&d, "q24k40", line, sizeof line);
    snprintf(text, sizeof text,
             "flashjit-tuning 2\nelsewhere sm_90 flash_fwd d64.bf16.nomask.sk1024 m128n64w4s2 0.5 "
             "2026-12-01\n%s",
             line);

    fj_context *ctx = cpu_context("");
    char *out = NULL;
    assert_int_equal(fj_tuning_export(ctx, &out), FJ_OK);
    assert_null(strstr(out, " cpu_tiled ")); /* nothing yet */
    free(out);

    /* All or nothing: a bad line refuses the whole text. */
    char bad[1400];
    snprintf(bad, sizeof bad, "%sbroken line\n", text);
    assert_int_equal(fj_tuning_import(ctx, bad), FJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(fj_last_error(), ":4: expected 7 fields"));
    assert_non_null(strstr(fj_last_error(), "nothing imported"));
    assert_int_equal(fj_tuning_import(ctx, "flashjit-tuning 3\n"), FJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(fj_last_error(), "format version 3 is not 1 or 2"));
    assert_int_equal(fj_tuning_import(ctx, "# only a comment\n"), FJ_ERR_INVALID_ARGUMENT);
    assert_int_equal(fj_tuning_import(ctx, NULL), FJ_ERR_INVALID_ARGUMENT);
    assert_int_equal(fj_tuning_export(ctx, &out), FJ_OK);
    assert_null(strstr(out, "elsewhere"));
    free(out);

    assert_int_equal(fj_tuning_import(ctx, text), FJ_OK);
    fj_plan *plan;
    assert_int_equal(fj_plan_create(ctx, &d, &plan), FJ_OK);
    fj_plan_info info;
    assert_int_equal(fj_plan_get_info(plan, &info), FJ_OK);
    assert_int_equal(info.tiles_source, FJ_TILES_IMPORTED);
    assert_string_equal(info.tiles, "q24k40");
    assert_string_equal(fj_tiles_source_name(info.tiles_source), "imported");
    assert_non_null(strstr(fj_plan_describe(plan), "tuned: the imported entry"));
    fj_plan_destroy(plan);

    /* Export to a file; a new context imports it and plans the same. */
    assert_int_equal(fj_tuning_export(ctx, &out), FJ_OK);
    assert_non_null(strstr(out, "elsewhere sm_90 flash_fwd d64.bf16.nomask.sk1024"));
    assert_non_null(strstr(out, line));
    assert_int_equal(fj_tuning_export_file(ctx, s.path), FJ_OK);
    assert_string_equal(slurp(s.path), out);
    free(out);
    fj_context *other = cpu_context("");
    assert_int_equal(fj_tuning_import_file(other, s.path), FJ_OK);
    assert_int_equal(fj_plan_create(other, &d, &plan), FJ_OK);
    assert_int_equal(fj_plan_get_info(plan, &info), FJ_OK);
    assert_string_equal(info.tiles, "q24k40");
    fj_plan_destroy(plan);

    /* A context reading the exported file as its tuning file. */
    fj_context *reader = cpu_context(s.path);
    assert_int_equal(fj_plan_create(reader, &d, &plan), FJ_OK);
    assert_int_equal(fj_plan_get_info(plan, &info), FJ_OK);
    assert_int_equal(info.tiles_source, FJ_TILES_TUNING_FILE);
    assert_string_equal(info.tiles, "q24k40");
    fj_plan_destroy(plan);
    fj_context_destroy(reader);

    char missing[200];
    snprintf(missing, sizeof missing, "%s/none.txt", s.dir);
    assert_int_equal(fj_tuning_import_file(other, missing), FJ_ERR_IO);
    assert_non_null(strstr(fj_last_error(), missing));
    snprintf(missing, sizeof missing, "%s/no/dir/x.txt", s.dir);
    assert_int_equal(fj_tuning_export_file(ctx, missing), FJ_ERR_IO);
    assert_int_equal(fj_tuning_export(NULL, &out), FJ_ERR_INVALID_ARGUMENT);
    assert_null(out);
    fj_context_destroy(other);
    fj_context_destroy(ctx);
    scratch_remove(&s);
}

static void test_measure(void **state)
{
    (void)state;
    scratch s;
    scratch_make(&s, "tuning.txt");
    fj_attention_desc d;
    fj_attention_desc_init(&d, 1, 2, 2, 150, 170, 32, FJ_F32);
    d.causal = FJ_CAUSAL_BOTTOM_RIGHT;
    fj_plan_options o;
    fj_plan_options_init(&o);
    fj_plan *plan;

    /* Bad options are refused before anything is measured. */
    fj_context *ctx = cpu_context(s.path);
    o.flags = 1u << 7;
    assert_int_equal(fj_plan_create_ex(ctx, &d, &o, &plan), FJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(fj_last_error(), "fj_plan_options.flags"));
    o.flags = FJ_PLAN_SAVE_TUNING;
    assert_int_equal(fj_plan_create_ex(ctx, &d, &o, &plan), FJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(fj_last_error(), "FJ_PLAN_MEASURE is not set"));
    o.flags = FJ_PLAN_MEASURE;
    o.time_limit = -1;
    assert_int_equal(fj_plan_create_ex(ctx, &d, &o, &plan), FJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(fj_last_error(), "time_limit"));
    fj_context *no_file = cpu_context("");
    o.time_limit = 0;
    o.flags = FJ_PLAN_MEASURE | FJ_PLAN_SAVE_TUNING;
    assert_int_equal(fj_plan_create_ex(no_file, &d, &o, &plan), FJ_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(fj_last_error(), "no tuning file"));
    assert_null(plan);
    fj_context_destroy(no_file);

    /* Measured: the plan runs the measured tiles, the file has the entry. */
    o.time_limit = 120;
    assert_int_equal(fj_plan_create_ex(ctx, &d, &o, &plan), FJ_OK);
    fj_plan_info info;
    assert_int_equal(fj_plan_get_info(plan, &info), FJ_OK);
    assert_int_equal(info.tiles_source, FJ_TILES_MEASURED);
    printf("measured: %s\n%s", info.tiles, fj_plan_describe(plan));
    assert_non_null(strstr(fj_plan_describe(plan), "tuned: the measured entry"));
    fjt_rng rng;
    fjt_rng_init(&rng, fjt_seed());
    fjt_problem tp;
    assert_true(fjt_problem_make(&tp, &d, &rng));
    fjt_error err;
    assert_int_equal(fjt_run(ctx, &tp, &err, true), FJ_OK);
    assert_true(err.rel_fro <= fjt_tolerance(d.dtype));
    fjt_problem_free(&tp);
    fj_plan_destroy(plan);
    fj_tuning *t;
    fj_strbuf notes;
    fj_strbuf_init(&notes);
    assert_int_equal(fj_tuning_parse(slurp(s.path), "saved", &t, &notes), FJ_OK);
    assert_null(notes.data);
    assert_int_equal(fj_tuning_count(t), 1);
    const fj_tuning_entry *saved = fj_tuning_entry_at(t, 0);
    assert_string_equal(saved->point, "d32.f32.causal.sk512");
    assert_true(saved->ms > 0);
    char measured[32];
    snprintf(measured, sizeof measured, "%s", saved->config);
    char *out;
    assert_int_equal(fj_tuning_export(ctx, &out), FJ_OK);
    assert_non_null(strstr(out, "d32.f32.causal.sk512"));
    free(out);

    /* Not measured again: an entry for the point exists (top-left causal and
       another length in the bucket share it), so nothing is appended. */
    d.causal = FJ_CAUSAL_TOP_LEFT;
    d.seqlen_k = 160;
    assert_int_equal(fj_plan_create_ex(ctx, &d, &o, &plan), FJ_OK);
    assert_int_equal(fj_plan_get_info(plan, &info), FJ_OK);
    assert_int_equal(info.tiles_source, FJ_TILES_MEASURED);
    fj_plan_destroy(plan);
    fj_tuning_free(t);
    assert_int_equal(fj_tuning_parse(slurp(s.path), "saved", &t, &notes), FJ_OK);
    assert_int_equal(fj_tuning_count(t), 1);
    fj_tuning_free(t);
    fj_context_destroy(ctx);

    /* A later context reads what was saved: its plan runs the blocks the
       saved tiles give on this problem (capped to its size). */
    ctx = cpu_context(s.path);
    assert_int_equal(fj_plan_create(ctx, &d, &plan), FJ_OK);
    assert_int_equal(fj_plan_get_info(plan, &info), FJ_OK);
    assert_int_equal(info.tiles_source, FJ_TILES_TUNING_FILE);
    fj_plan *given;
    fj_plan_info given_info;
    fj_plan_options_init(&o);
    o.tiles = measured;
    assert_int_equal(fj_plan_create_ex(ctx, &d, &o, &given), FJ_OK);
    assert_int_equal(fj_plan_get_info(given, &given_info), FJ_OK);
    assert_string_equal(info.tiles, given_info.tiles);
    fj_plan_destroy(given);
    fj_plan_destroy(plan);
    fj_context_destroy(ctx);

    /* The reference has nothing to measure: the flag is a plain plan. */
    fj_context_options ro;
    fj_context_options_init(&ro);
    ro.backend = FJ_BACKEND_CPU_REFERENCE;
    ro.cache_dir = "";
    ro.tuning_file = "";
    assert_int_equal(fj_context_create(&ro, &ctx), FJ_OK);
    fj_plan_options_init(&o);
    o.flags = FJ_PLAN_MEASURE;
    assert_int_equal(fj_plan_create_ex(ctx, &d, &o, &plan), FJ_OK);
    assert_int_equal(fj_plan_get_info(plan, &info), FJ_OK);
    assert_int_equal(info.backend, FJ_BACKEND_CPU_REFERENCE);
    fj_plan_destroy(plan);
    fj_context_destroy(ctx);
    scratch_remove(&s);
}

/* Imports, exports, plan lookups and measurements on one context from
 * several threads: every entry lands, every plan is made (ASan and the
 * list's lock; the measurements take turns). */
typedef struct worker {
    fj_context *ctx;
    int id;
    fj_status status;
} worker;

#define WORKERS 4
#define ROUNDS 40

static void *work(void *arg)
{
    worker *w = arg;
    for (int i = 0; i < ROUNDS && !w->status; i++) {
        fj_attention_desc d;
        /* head dims 8, 16, ... : one point per worker and round */
        fj_attention_desc_init(&d, 1, 1, 1, 40, 40, 8 * (1 + w->id * ROUNDS + i) % 256 + 8, FJ_F32);
        char line[400], text[500];
        entry_line(&d, "q8k16", line, sizeof line);
        snprintf(text, sizeof text, "flashjit-tuning 2\n%s", line);
        fj_plan *plan = NULL;
        char *out = NULL;
        if ((w->status = fj_tuning_import(w->ctx, text))) break;
        if ((w->status = fj_plan_create(w->ctx, &d, &plan))) break;
        fj_plan_destroy(plan);
        if ((w->status = fj_tuning_export(w->ctx, &out))) break;
        free(out);
    }
    if (!w->status && w->id == 0) {
        fj_attention_desc d;
        fj_attention_desc_init(&d, 1, 2, 2, 64, 64, 20, FJ_F32); /* no import has d20 */
        fj_plan_options o;
        fj_plan_options_init(&o);
        o.flags = FJ_PLAN_MEASURE;
        o.time_limit = 60;
        fj_plan *plan = NULL;
        w->status = fj_plan_create_ex(w->ctx, &d, &o, &plan);
        fj_plan_destroy(plan);
    }
    return NULL;
}

static void test_threads(void **state)
{
    (void)state;
    fj_context *ctx = cpu_context("");
    pthread_t th[WORKERS];
    worker w[WORKERS];
    for (int i = 0; i < WORKERS; i++) {
        w[i] = (worker){ctx, i, FJ_OK};
        assert_int_equal(pthread_create(&th[i], NULL, work, &w[i]), 0);
    }
    for (int i = 0; i < WORKERS; i++) {
        pthread_join(th[i], NULL);
        if (w[i].status) fail_msg("worker %d: %s", i, fj_status_name(w[i].status));
    }
    char *out;
    assert_int_equal(fj_tuning_export(ctx, &out), FJ_OK);
    int lines = 0;
    for (const char *p = out; (p = strstr(p, " cpu_tiled ")); p++) lines++;
    free(out);
    /* 32 head dims (8..256) imported, and the measured d20 point. */
    assert_int_equal(lines, 33);
    fj_context_destroy(ctx);
}

/* ---- files that are not tuning files (issue 23, finding 3) ------------------ */

/* Creates a context with tuning_file in a child process that alarm() kills
 * after 20 s, and passes back fj_context_create's status and its describe
 * text through a pipe: a file that blocks the open (a FIFO) must not hang the
 * test itself. */
typedef struct child_context {
    bool exited; /* false: killed (signal given in sig) */
    int sig;
    fj_status status;
    char describe[4096];
} child_context;

static child_context context_in_child(const char *tuning_file)
{
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    fflush(stdout);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        alarm(20);
        fj_context_options o;
        fj_context_options_init(&o);
        o.backend = FJ_BACKEND_CPU;
        o.cache_dir = "";
        o.tuning_file = tuning_file;
        o.cpu_threads = 1;
        fj_context *ctx = NULL;
        fj_status st = fj_context_create(&o, &ctx);
        const char *text = st == FJ_OK ? fj_context_describe(ctx) : fj_last_error();
        char msg[4096 + 8];
        int n = snprintf(msg, sizeof msg, "%d\n%s", (int)st, text);
        if (n > (int)sizeof msg - 1) n = (int)sizeof msg - 1;
        if (write(fds[1], msg, (size_t)n) != n) _exit(3);
        fj_context_destroy(ctx);
        _exit(0);
    }
    close(fds[1]);
    char buf[4096 + 8];
    size_t got = 0;
    for (ssize_t r;
         got < sizeof buf - 1 && (r = read(fds[0], buf + got, sizeof buf - 1 - got)) > 0;)
        got += (size_t)r;
    buf[got] = '\0';
    close(fds[0]);
    int wstatus;
    assert_int_equal(waitpid(pid, &wstatus, 0), pid);
    child_context c = {0};
    c.exited = WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0;
    c.sig = WIFSIGNALED(wstatus) ? WTERMSIG(wstatus) : 0;
    char *nl = strchr(buf, '\n');
    c.status = (fj_status)atoi(buf);
    snprintf(c.describe, sizeof c.describe, "%s", nl ? nl + 1 : "");
    return c;
}

/* The file is skipped: the context is made, and its describe text says why. */
static void expect_skipped(const char *path, const char *why)
{
    child_context c = context_in_child(path);
    if (!c.exited)
        fail_msg("%s: context creation did not return (killed by signal %d%s)", path, c.sig,
                 c.sig == SIGALRM ? ": it blocked for 20 s" : "");
    if (c.status != FJ_OK)
        fail_msg("%s: fj_context_create gave %s: %s", path, fj_status_name(c.status), c.describe);
    char *line = strstr(c.describe, "tuning file: ");
    if (!line || !strstr(line, "skipped") || !strstr(line, why))
        fail_msg("%s: describe should say the file was skipped (%s):\n%s", path, why, c.describe);
    printf("# %s\n", strtok(line, "\n"));
}

static void test_unusable_tuning_files_are_skipped(void **state)
{
    (void)state;
    scratch s;
    scratch_make(&s, "tuning.txt");

    /* a FIFO with no writer: opening it for reading would block for ever */
    assert_int_equal(mkfifo(s.path, 0600), 0);
    expect_skipped(s.path, "not a regular file");
    unlink(s.path);

    /* a directory */
    assert_int_equal(mkdir(s.path, 0700), 0);
    expect_skipped(s.path, "not a regular file");
    rmdir(s.path);

    /* an endless device */
    expect_skipped("/dev/zero", "not a regular file");

    /* a (sparse) file of 200 MiB: over the limit, never read */
    int fd = open(s.path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, (off_t)200 << 20), 0);
    close(fd);
    expect_skipped(s.path, "MiB");
    unlink(s.path);

    /* the same through FLASHJIT_TUNING_FILE (the default path's resolution) */
    assert_int_equal(mkfifo(s.path, 0600), 0);
    setenv("FLASHJIT_TUNING_FILE", s.path, 1);
    expect_skipped(NULL, "not a regular file");
    unsetenv("FLASHJIT_TUNING_FILE");

    /* importing one is an I/O error that says why, not a hang */
    fj_context *ctx = cpu_context("");
    alarm(20);
    assert_int_equal(fj_tuning_import_file(ctx, s.path), FJ_ERR_IO);
    alarm(0);
    assert_non_null(strstr(fj_last_error(), "not a regular file"));
    fj_context_destroy(ctx);
    scratch_remove(&s);
}

/* An append past a file-size limit fails (FJ_ERR_IO) instead of SIGXFSZ
 * killing the process (issue 23, finding 4); run in a child. */
static void test_append_under_a_file_size_limit(void **state)
{
    (void)state;
    scratch s;
    scratch_make(&s, "tuning.txt");
    fj_attention_desc d;
    fj_attention_desc_init(&d, 1, 1, 1, 40, 40, 64, FJ_F32);
    fj_problem p;
    assert_int_equal(fj_problem_init(&p, &d), FJ_OK);
    fj_tuning_entry e;
    fj_tuning_key_for(&p, "cpu:test_2t", "cpu", "cpu_tiled", &e);
    snprintf(e.config, sizeof e.config, "q64k64");
    e.ms = 1.0;
    snprintf(e.date, sizeof e.date, "2026-12-04");
    assert_int_equal(fj_tuning_append(s.path, &e), FJ_OK);
    struct stat st;
    assert_int_equal(stat(s.path, &st), 0);
    fflush(stdout);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct rlimit lim = {(rlim_t)st.st_size, (rlim_t)st.st_size};
        if (setrlimit(RLIMIT_FSIZE, &lim) != 0) _exit(10);
        if (fj_tuning_append(s.path, &e) != FJ_ERR_IO) _exit(11);
        if (!strstr(fj_last_error(), strerror(EFBIG))) _exit(12);
        _exit(0);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (WIFSIGNALED(status))
        fail_msg("the append killed the process with signal %d (%s)", WTERMSIG(status),
                 strsignal(WTERMSIG(status)));
    assert_int_equal(WEXITSTATUS(status), 0);
    scratch_remove(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_and_problems),
        cmocka_unit_test(test_buckets_and_tokens),
        cmocka_unit_test(test_plan_uses_tuning_file),
        cmocka_unit_test(test_format_2),
        cmocka_unit_test(test_append_keeps_the_file_format),
        cmocka_unit_test(test_import_and_export),
        cmocka_unit_test(test_measure),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_unusable_tuning_files_are_skipped),
        cmocka_unit_test(test_append_under_a_file_size_limit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
