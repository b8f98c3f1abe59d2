/* The tuning file: format, problems reported by line, lookup order, and a
 * plan that picks up a tuned configuration (CPU tiled backend; the CUDA
 * backend uses the same lookup). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "cpu/tiled.h"
#include "harness.h"
#include "plan.h"
#include "problem.h"
#include "tune/tuning.h"

static void test_parse_and_problems(void **state)
{
    (void)state;
    const char *text = "# comment\n"
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
    assert_non_null(strstr(desc, "48"));
    fj_plan_destroy(plan);

    /* a given configuration wins over the file, and a bad one is refused */
    assert_int_equal(fj_plan_create_config(ctx, &d, "q16k16", &plan), FJ_OK);
    assert_non_null(strstr(fj_plan_describe(plan), "given configuration q16k16"));
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
    fj_plan_destroy(plan);
    fj_context_destroy(ctx);
    unlink(path);
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_and_problems),
        cmocka_unit_test(test_buckets_and_tokens),
        cmocka_unit_test(test_plan_uses_tuning_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
