/* `flashjit tune` on the CUDA path without a GPU: cmd_tune runs in this
 * process with the fake driver and NVRTC installed (cuda/fake_driver.h), so
 * the compile-ahead threads, the disk cache, pruning by the template's
 * rules, the check against the CPU reference, timing, the file and resuming
 * all run as they would on a GPU. The fake's device memory is host memory:
 * a launch hook computes the attention on the host, so the candidates pass
 * the check (every run takes the fake's 0.25 ms). With the fake's own
 * launches, which compute nothing, every candidate must be rejected as
 * wrong; with NVRTC failing, every candidate is pruned. Either way the run
 * fails and writes nothing. */
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

#include "cli.h"
#include "cli_run.h"
#include "cpu/convert.h"
#include "cuda/cuda_api.h"
#include "cuda/fake_driver.h"
#include "flashjit.h"
#include "strbuf.h"
#include "tune/tuning.h"

typedef struct fixture {
    char dir[4096];
    char file[4200];  /* --output */
    char cache[4200]; /* FLASHJIT_CACHE_DIR: fake images never meet real ones */
    char out[65536], err[16384];
    fj_cuda_api api; /* the fake's table, launches maybe hooked */
} fixture;

/* ---- a fake launch that computes (bf16, no mask, dense tensors) --------------- */

static CUresult (*base_launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                               unsigned, unsigned, CUstream, void **, void **);

/* When set, the check problem's last query row of head 0 gets 0.01 added
 * to one element: a kernel wrong in one row by an amount the relative
 * error over all outputs (about 1e-3) would let through. */
static bool corrupt_one_row;
#define CHECK_SEQLEN_Q 200 /* the check problem's: largest block 128 + 72 */

static float bf16_at(const void *base, long long i)
{
    return fj_bf16_to_f32(((const uint16_t *)base)[i]);
}

/* Softmax attention of every row into p->o. The head dim is not a launch
 * parameter (it is code): with dense tensors it is the head axis' stride.
 * Split-KV's two launches both get these parameters; computing o fully on
 * each leaves the right result. */
static void host_attention(const fj_fwd_params *p)
{
    const long long D = p->o_stride[2];
    float *w = malloc((size_t)p->seqlen_k * sizeof *w);
    if (!w) return;
    for (int b = 0; b < p->batch; b++)
        for (int h = 0; h < p->heads_q; h++)
            for (int i = 0; i < p->seqlen_q; i++) {
                int hk = h / p->group;
                long long qo = b * p->q_stride[0] + i * p->q_stride[1] + h * p->q_stride[2];
                float max = -INFINITY, sum = 0;
                for (int j = 0; j < p->seqlen_k; j++) {
                    long long ko = b * p->k_stride[0] + j * p->k_stride[1] + hk * p->k_stride[2];
                    float s = 0;
                    for (long long d = 0; d < D; d++)
                        s += bf16_at(p->q, qo + d) * bf16_at(p->k, ko + d);
                    w[j] = s * p->scale_log2;
                    if (w[j] > max) max = w[j];
                }
                for (int j = 0; j < p->seqlen_k; j++) sum += w[j] = exp2f(w[j] - max);
                long long oo = b * p->o_stride[0] + i * p->o_stride[1] + h * p->o_stride[2];
                for (long long d = 0; d < D; d++) {
                    float acc = 0;
                    for (int j = 0; j < p->seqlen_k; j++)
                        acc += w[j] * bf16_at(p->v, b * p->v_stride[0] + j * p->v_stride[1] +
                                                        hk * p->v_stride[2] + d);
                    float x = acc / sum;
                    if (corrupt_one_row && p->seqlen_q == CHECK_SEQLEN_Q && i == p->seqlen_q - 1 &&
                        h == 0 && d == 0)
                        x += 0.01f;
                    ((uint16_t *)p->o)[oo + d] = fj_f32_to_bf16(x);
                }
            }
    free(w);
}

static CUresult computing_launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                 unsigned by, unsigned bz, unsigned smem, CUstream stream,
                                 void **params, void **extra)
{
    CUresult r = base_launch(f, gx, gy, gz, bx, by, bz, smem, stream, params, extra);
    if (r == 0) host_attention(params[0]);
    return r;
}

/* ---- running the command in this process ----------------------------------------- */

/* cmd_tune(args..., NULL) with stdout and stderr captured into fx. */
static int run_tune(fixture *fx, ...)
{
    char *argv[64];
    int argc = 0;
    argv[argc++] = "tune";
    va_list ap;
    va_start(ap, fx);
    for (char *a; (a = va_arg(ap, char *)) && argc < 63;) argv[argc++] = a;
    va_end(ap);
    argv[argc] = NULL;
    char out_path[4300], err_path[4300];
    snprintf(out_path, sizeof out_path, "%s/stdout.txt", fx->dir);
    snprintf(err_path, sizeof err_path, "%s/stderr.txt", fx->dir);
    fflush(stdout);
    fflush(stderr);
    int saved_out = dup(1), saved_err = dup(2);
    int o = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int e = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(saved_out >= 0 && saved_err >= 0 && o >= 0 && e >= 0);
    dup2(o, 1);
    dup2(e, 2);
    int rc = cmd_tune(argc, argv);
    fflush(stdout);
    fflush(stderr);
    dup2(saved_out, 1);
    dup2(saved_err, 2);
    close(o), close(e), close(saved_out), close(saved_err);
    fjt_read_file(out_path, fx->out, sizeof fx->out);
    fjt_read_file(err_path, fx->err, sizeof fx->err);
    return rc;
}

#define SPACE                                                                         \
    "--backend", "cuda", "--head-dims", "64", "--dtypes", "bf16", "--causal", "none", \
        "--batch-heads", "1", "--repeat", "2", "--warmup", "0", "--jobs", "3"

static void expect_in(const fixture *fx, const char *text, const char *needle)
{
    if (!strstr(text, needle))
        fail_msg("'%s' not found\nstdout:\n%s\nstderr:\n%s", needle, fx->out, fx->err);
}

static void expect_rc(const fixture *fx, int rc, int want)
{
    if (rc != want)
        fail_msg("cmd_tune returned %d, expected %d\nstdout:\n%s\nstderr:\n%s", rc, want, fx->out,
                 fx->err);
}

static int setup(void **state)
{
    fixture *fx = calloc(1, sizeof *fx);
    if (!fx) return -1;
    if (!fjt_scratch_dir("tune-fake", fx->dir, sizeof fx->dir)) return -1;
    snprintf(fx->file, sizeof fx->file, "%s/tuning.txt", fx->dir);
    snprintf(fx->cache, sizeof fx->cache, "%s/cache", fx->dir);
    setenv("FLASHJIT_CACHE_DIR", fx->cache, 1);
    fake_reset();
    fx->api = *fake_api();
    base_launch = fx->api.cuLaunchKernel;
    fj_cuda_api_override(&fx->api);
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    fixture *fx = *state;
    fj_cuda_api_override(NULL);
    int rc = fjt_remove_tree(fx->dir);
    free(fx);
    return rc;
}

static fj_tuning *parse_file(const char *path)
{
    static char text[65536];
    fjt_read_file(path, text, sizeof text);
    fj_tuning *t = NULL;
    fj_strbuf notes;
    fj_strbuf_init(&notes);
    assert_int_equal(fj_tuning_parse(text, path, &t, &notes), FJ_OK);
    if (notes.len) fail_msg("%s: %s", path, notes.data);
    fj_strbuf_free(&notes);
    return t;
}

static void key_for(int seqlen_q, int seqlen_k, fj_tuning_entry *key)
{
    memset(key, 0, sizeof *key);
    fj_tuning_device_token("Fake GPU 0", key->device, sizeof key->device);
    strcpy(key->arch, "sm_90");
    strcpy(key->template_name, "flash_fwd");
    key->head_dim = 64;
    strcpy(key->dtype, "bf16");
    strcpy(key->mask, "nomask");
    key->bucket = fj_tuning_bucket(seqlen_q, seqlen_k);
}

/* ---- the tests ----------------------------------------------------------------------- */

static void test_tunes_prefill_and_decode_and_plans_use_the_file(void **state)
{
    fixture *fx = *state;
    fx->api.cuLaunchKernel = computing_launch;
    int rc = run_tune(fx, SPACE, "--seqlens", "128", "--decode", "--decode-seqlen-k", "512",
                      "--output", fx->file, NULL);
    expect_rc(fx, rc, 0);
    expect_in(fx, fx->out, "compiled ahead:");
    /* m64 with 8 warps breaks the one-16-row-tile-per-warp rule. */
    expect_in(fx, fx->out, "pruned m64n32w8s2 for d64 bf16 nomask: block_m 64 is neither 16 nor");
    expect_in(fx, fx->out, "summary: 2 points tuned");
    expect_in(fx, fx->out, " 0 wrong");
    fake_counts after_tune = fake_get_counts();
    assert_true(after_tune.compiles >= 18);

    fj_tuning *t = parse_file(fx->file);
    assert_int_equal(fj_tuning_count(t), 2);
    fj_tuning_entry prefill, decode;
    key_for(128, 128, &prefill);
    key_for(1, 512, &decode);
    const fj_tuning_entry *e = fj_tuning_find_in(t, &prefill);
    assert_non_null(e);
    assert_non_null(fj_tuning_find_in(t, &decode));

    /* A new context reading the file makes the tuned kernel, and finds it
       in the disk cache the tuner filled: no compile. */
    fj_context_options o;
    fj_context_options_init(&o);
    o.backend = FJ_BACKEND_CUDA;
    o.tuning_file = fx->file;
    fj_context *ctx = NULL;
    assert_int_equal(fj_context_create(&o, &ctx), FJ_OK);
    fj_attention_desc d;
    fj_attention_desc_init(&d, 1, 1, 1, 128, 128, 64, FJ_BF16);
    fj_plan *plan = NULL;
    assert_int_equal(fj_plan_create(ctx, &d, &plan), FJ_OK);
    fj_plan_info info;
    assert_int_equal(fj_plan_get_info(plan, &info), FJ_OK);
    assert_int_equal(info.tiles_source, FJ_TILES_TUNING_FILE);
    assert_string_equal(info.tiles, e->config);
    char tiles[64];
    snprintf(tiles, sizeof tiles, ".%s.sm_90", e->config);
    if (!strstr(info.kernel, tiles)) fail_msg("kernel %s does not run %s", info.kernel, e->config);
    expect_in(fx, fj_plan_describe(plan), "tuned: the tuning file entry");
    /* Where the image came from is the describe text's alone. */
    expect_in(fx, fj_plan_describe(plan), "from the disk cache");
    assert_int_equal(fake_get_counts().compiles, after_tune.compiles);
    fj_plan_destroy(plan);
    fj_context_destroy(ctx);
    fj_tuning_free(t);

    /* Run again: both points are in the file. */
    rc = run_tune(fx, SPACE, "--seqlens", "128", "--decode", "--decode-seqlen-k", "512", "--output",
                  fx->file, NULL);
    expect_rc(fx, rc, 0);
    expect_in(fx, fx->out, "nothing to do");
}

static void test_kernels_computing_nothing_are_rejected_as_wrong(void **state)
{
    fixture *fx = *state; /* the fake's launches write nothing: o stays NaN */
    int rc = run_tune(fx, SPACE, "--seqlens", "128", "--configs", "m64n64w4s2,m128n64w4s2",
                      "--output", fx->file, NULL);
    expect_rc(fx, rc, 1);
    expect_in(fx, fx->out, "WRONG  m64n64w4s2 for d64 bf16 nomask");
    expect_in(fx, fx->out, "are not finite");
    expect_in(fx, fx->err, "gives WRONG results");
    expect_in(fx, fx->out, "FAILED: no candidate could be timed");
    struct stat st;
    assert_int_not_equal(stat(fx->file, &st), 0); /* nothing appended, nothing created */
}

static void test_one_wrong_row_is_caught(void **state)
{
    fixture *fx = *state;
    fx->api.cuLaunchKernel = computing_launch;
    corrupt_one_row = true;
    int rc = run_tune(fx, SPACE, "--seqlens", "128", "--configs", "m128n64w4s2", "--output",
                      fx->file, NULL);
    corrupt_one_row = false;
    expect_rc(fx, rc, 1);
    expect_in(fx, fx->out, "WRONG  m128n64w4s2 for d64 bf16 nomask: query 199 of head 0 is off by");
    struct stat st;
    assert_int_not_equal(stat(fx->file, &st), 0);
}

static void test_compile_errors_prune_every_candidate(void **state)
{
    fixture *fx = *state;
    fake_fail("nvrtcCompileProgram", 6);
    int rc = run_tune(fx, SPACE, "--seqlens", "128", "--configs", "m64n64w4s2,m128n32w4s3",
                      "--output", fx->file, NULL);
    expect_rc(fx, rc, 1);
    expect_in(fx, fx->out, "2 failed");
    expect_in(fx, fx->out, "pruned m64n64w4s2 for d64 bf16 nomask: FJ_ERR_COMPILE");
    expect_in(fx, fx->out, "the default plan failed");
    expect_in(fx, fx->out, "FAILED: no candidate could be timed");
    struct stat st;
    assert_int_not_equal(stat(fx->file, &st), 0);
}

/* FJ_PLAN_MEASURE on the CUDA path: the backend's candidates built ahead
 * (through the fake NVRTC and the disk cache), checked, timed; the plan
 * runs the measured tiles, and export carries the entry. */
static void test_measure_flag(void **state)
{
    fixture *fx = *state;
    fx->api.cuLaunchKernel = computing_launch;
    fj_context_options co;
    fj_context_options_init(&co);
    co.backend = FJ_BACKEND_CUDA;
    co.tuning_file = "";
    fj_context *ctx = NULL;
    assert_int_equal(fj_context_create(&co, &ctx), FJ_OK);
    fj_attention_desc d;
    fj_attention_desc_init(&d, 1, 1, 1, 128, 128, 64, FJ_BF16);
    fj_plan_options o;
    fj_plan_options_init(&o);
    o.flags = FJ_PLAN_MEASURE;
    fj_plan *plan = NULL;
    fake_counts before = fake_get_counts();
    if (fj_plan_create_ex(ctx, &d, &o, &plan)) fail_msg("%s", fj_last_error());
    assert_true(fake_get_counts().compiles > before.compiles + 10); /* built ahead */
    fj_plan_info info;
    assert_int_equal(fj_plan_get_info(plan, &info), FJ_OK);
    assert_int_equal(info.tiles_source, FJ_TILES_MEASURED);
    assert_true(info.tiles[0] == 'm');
    char *text = NULL;
    assert_int_equal(fj_tuning_export(ctx, &text), FJ_OK);
    char line[128];
    snprintf(line, sizeof line, "Fake_GPU_0 sm_90 flash_fwd d64.bf16.nomask.sk512 %s ", info.tiles);
    if (!strstr(text, line)) fail_msg("export lacks '%s':\n%s", line, text);
    free(text);
    fj_plan_destroy(plan);
    fj_context_destroy(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_tunes_prefill_and_decode_and_plans_use_the_file, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_kernels_computing_nothing_are_rejected_as_wrong, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_one_wrong_row_is_caught, setup, teardown),
        cmocka_unit_test_setup_teardown(test_compile_errors_prune_every_candidate, setup, teardown),
        cmocka_unit_test_setup_teardown(test_measure_flag, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
