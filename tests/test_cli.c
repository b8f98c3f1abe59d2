/* CLI behaviour through the built binary (its path is argv[1]) that no
 * other suite owns: `flashjit source` from problem flags prints the kernel a
 * plan for that problem takes (the same name fj_kernel_desc_for_problem
 * gives in this process); FLASHJIT_LOG is checked, not ignored; `flashjit
 * info` (the library's describe text) reports NVRTC apart from the driver,
 * as the library's loader finds it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cli_run.h"
#include "cuda/cuda_api.h"
#include "cuda/jit/kernel_desc.h"
#include "problem.h"

static const char *flashjit_path;

typedef struct fixture {
    char dir[4096];
    fjt_cli_result r;
} fixture;

/* Runs flashjit with the arguments (NULL-terminated), env_name set to
 * env_value in the child (NULL value: unset; NULL name: as it is). */
static void run_cli(fixture *fx, const char *env_name, const char *env_value, ...)
{
    const char *const prefix[] = {flashjit_path, NULL};
    va_list ap;
    va_start(ap, env_value);
    fjt_cli_run_args(fx->dir, env_name, env_value, prefix, ap, &fx->r);
    va_end(ap);
}

static void expect_in(const char *stream, const char *text, const char *name)
{
    if (!strstr(stream, text)) fail_msg("%s lacks '%s':\n%s", name, text, stream);
}

static int setup(void **state)
{
    fixture *fx = calloc(1, sizeof *fx);
    if (!fx || !fjt_scratch_dir("cli", fx->dir, sizeof fx->dir)) return -1;
    /* no test here may write the user's cache */
    char cache[4200];
    snprintf(cache, sizeof cache, "%s/cache", fx->dir);
    setenv("FLASHJIT_CACHE_DIR", cache, 1);
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

/* The canonical name of the kernel a plan takes for this problem on sm_90,
 * into name; the kernel's mask kind is returned. */
static fj_mask_kind expected_kernel(int hq, int hkv, int sq, int sk, fj_causal causal, char *name,
                                    size_t n)
{
    fj_attention_desc d;
    fj_attention_desc_init(&d, 1, hq, hkv, sq, sk, 128, FJ_BF16);
    d.causal = causal;
    fj_problem p;
    assert_int_equal(fj_problem_init(&p, &d), FJ_OK);
    fj_kernel_desc k;
    assert_int_equal(fj_kernel_desc_for_problem(&p, 90, &k), FJ_OK);
    fj_kernel_desc_name(&k, name, n);
    return (fj_mask_kind)k.mask;
}

/* The first line of `flashjit source` names the kernel. */
static void expect_kernel(const fixture *fx, const char *name)
{
    char want[256];
    snprintf(want, sizeof want, "// flashjit generated kernel %s\n", name);
    if (strncmp(fx->r.out, want, strlen(want)))
        fail_msg("source printed\n%.200s\nnot the kernel %s", fx->r.out, name);
}

/* `--head-dim 128 --causal` once built a 1 x 1 problem, where bottom-right
 * causal hides nothing: it printed a decode kernel with no mask. Now the
 * default shape is a prefill one and the mask is in the kernel. */
static void test_source_prefill_keeps_the_mask(void **state)
{
    fixture *fx = *state;
    char name[128];
    assert_int_equal(expected_kernel(1, 1, 1024, 1024, FJ_CAUSAL_BOTTOM_RIGHT, name, sizeof name),
                     FJ_MASK_CAUSAL);
    run_cli(fx, NULL, NULL, "source", "--head-dim", "128", "--causal", NULL);
    fjt_cli_expect_status(&fx->r, 0);
    expect_kernel(fx, name);
    assert_non_null(strstr(name, ".causal."));
    assert_string_equal(fx->r.err, "");

    run_cli(fx, NULL, NULL, "source", "--head-dim", "128", "--causal", "top-left", "--seqlen-q",
            "300", "--seqlen-k", "700", NULL);
    fjt_cli_expect_status(&fx->r, 0);
    expect_kernel(fx, name); /* one kernel serves both alignments */
}

/* Decode shapes come from the flags; a mask that hides nothing there is
 * dropped as plans drop it, and stderr says so. GQA heads pack as in a plan. */
static void test_source_decode_from_flags(void **state)
{
    fixture *fx = *state;
    char name[128];
    assert_int_equal(expected_kernel(1, 1, 1, 4096, FJ_CAUSAL_BOTTOM_RIGHT, name, sizeof name),
                     FJ_MASK_NONE);
    run_cli(fx, NULL, NULL, "source", "--head-dim", "128", "--causal", "--seqlen-q", "1",
            "--seqlen-k", "4096", NULL);
    fjt_cli_expect_status(&fx->r, 0);
    expect_kernel(fx, name);
    expect_in(fx->r.err, "the mask hides no key of this problem (seqlen_q 1, seqlen_k 4096)",
              "stderr");

    expected_kernel(32, 8, 1, 4096, FJ_CAUSAL_NONE, name, sizeof name);
    run_cli(fx, NULL, NULL, "source", "--head-dim", "128", "--seqlen-q", "1", "--seqlen-k", "4096",
            "--heads-q", "32", "--heads-kv", "8", NULL);
    fjt_cli_expect_status(&fx->r, 0);
    expect_kernel(fx, name);
    assert_string_equal(fx->r.err, "");
}

static void test_source_bad_shape_flags(void **state)
{
    fixture *fx = *state;
    run_cli(fx, NULL, NULL, "source", "--head-dim", "128", "--seqlen-q", "0", NULL);
    fjt_cli_expect_status(&fx->r, 2);
    expect_in(fx->r.err, "--seqlen-q: '0' is not an integer in [1, ", "stderr");
    run_cli(fx, NULL, NULL, "source", "--head-dim", "128", "--heads-q", "12", "--heads-kv", "5",
            NULL);
    fjt_cli_expect_status(&fx->r, 1);
    expect_in(fx->r.err, "heads_q (12) is not a multiple of heads_kv (5)", "stderr");
    run_cli(fx, NULL, NULL, "source", "flash_fwd.d128.bf16.causal.m128n64w4s2.sm_90", "--seqlen-k",
            "9", NULL);
    fjt_cli_expect_status(&fx->r, 2);
    expect_in(fx->r.err, "give a kernel NAME or problem flags, not both", "stderr");
}

/* Options parse as GNU getopt_long: "--opt=value", "--" ends the options;
 * values are checked by the same validators, which name the flag typed. */
static void test_gnu_option_syntax(void **state)
{
    fixture *fx = *state;
    run_cli(fx, NULL, NULL, "run", "--backend=cpu", "--seqlen-q=16", "--head-dim=16", "--repeat=1",
            "--warmup=0", "--causal=top-left", NULL);
    fjt_cli_expect_status(&fx->r, 0);
    expect_in(fx->r.out, ".causal_tl ", "stdout");
    run_cli(fx, NULL, NULL, "run", "--backend", "cpu", "--seqlen-q", "16", "--head-dim", "16",
            "--repeat", "1", "--causal", "--warmup", "0", NULL);
    fjt_cli_expect_status(&fx->r, 0);
    expect_in(fx->r.out, ".causal_br ", "stdout");
    static const struct {
        const char *args[4];
        const char *message;
    } bad[] = {
        {{"run", "--causal", "sideways"},
         "flashjit run: --causal: 'sideways' is not a causal alignment: one of none, "
         "bottom-right, top-left"},
        {{"run", "--causal=sideways"}, "--causal: 'sideways' is not a causal alignment"},
        {{"run", "--", "--check"}, "flashjit run: unexpected argument '--check'"},
        {{"run", "--bogus=1"}, "flashjit run: unknown option '--bogus=1'"},
        {{"run", "--head-dim=0"}, "--head-dim: '0' is not an integer"},
        {{"bench", "--backends", "foo"}, "flashjit bench: --backends: 'foo' is not one of"},
        {{"bench", "--dtypes=f8"}, "flashjit bench: --dtypes: 'f8' is not one of"},
        {{"bench", "--plot-metric", "watts"}, "--plot-metric: 'watts' is not tflops or gbps"},
        {{"source", "--causal", "sideways"}, "--causal: 'sideways' is not a causal alignment"},
        {{"info", "extra"}, "flashjit info: unexpected argument 'extra'"},
        {{"cache", "--dir"}, "flashjit cache: --dir needs a value"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        run_cli(fx, NULL, NULL, bad[i].args[0], bad[i].args[1], bad[i].args[2], bad[i].args[3],
                NULL);
        fjt_cli_expect_status(&fx->r, 2);
        expect_in(fx->r.err, bad[i].message, "stderr");
    }
}

/* `run --varlen`: a variable-length batch (empty sequences, Q:K items,
 * GQA, a window) on both CPU backends, checked sequence by sequence against
 * the reference's dense runs; its bad lists and flags it sets refused. */
static void test_run_varlen(void **state)
{
    fixture *fx = *state;
    static const char *const backends[] = {"cpu", "reference"};
    for (int i = 0; i < 2; i++) {
        run_cli(fx, NULL, NULL, "run", "--backend", backends[i], "--varlen",
                "17,1,300,0,1:0,0:5,3:40", "--heads-q", "8", "--heads-kv", "2", "--head-dim", "64",
                "--window", "16,-1", "--causal", "--dtype", "f16", "--check", "--lse", "--repeat",
                "2", "--warmup", "0", NULL);
        fjt_cli_expect_status(&fx->r, 0);
        expect_in(fx->r.out, "b7.hq8.hkv2.sq300.sk300.d64.f16.causal_br.wl16.varlen ", "stdout");
        expect_in(fx->r.out, "varlen: 7 sequences, 322 query and 363 key tokens", "stdout");
        expect_in(fx->r.out, i ? "cpu_reference_varlen" : "cpu_tiled_varlen", "stdout");
    }
    static const struct {
        const char *args[6];
        const char *message;
    } bad[] = {
        {{"run", "--varlen", "17,x"},
         "--varlen: '17,x': item 2 is not N (queries and keys) or Q:K"},
        {{"run", "--varlen", "17,"}, "--varlen: '17,': item 2 is not N"},
        {{"run", "--varlen", "4:-1"}, "--varlen: '4:-1': item 1 is not N"},
        {{"run", "--varlen", "1:2:3"}, "--varlen: '1:2:3': item 1 is not N"},
        {{"run", "--varlen", "5,6", "--seqlen-q", "8"},
         "--seqlen-q and --varlen: --varlen sets batch, seqlen-q and seqlen-k"},
        {{"run", "--batch", "2", "--varlen", "5,6"}, "--batch and --varlen"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        run_cli(fx, NULL, NULL, bad[i].args[0], bad[i].args[1], bad[i].args[2], bad[i].args[3],
                bad[i].args[4], bad[i].args[5], NULL);
        fjt_cli_expect_status(&fx->r, 2);
        expect_in(fx->r.err, bad[i].message, "stderr");
    }
}

/* `run --page-size`: a paged KV cache on both CPU backends, checked
 * sequence by sequence against the reference's dense runs on the keys
 * before paging (pages shuffled, empty sequences, a page size that divides
 * nothing, GQA, a window; the pools' unused rows are NaN and unused table
 * entries -1, so a read of either fails the check): by --kv-lens with dense
 * queries, by --varlen's Q:K items with packed ones, and --batch sequences
 * of --seqlen-k keys. Bad combinations are refused naming the flags; a
 * length past --seqlen-k gets the library's message. */
static void test_run_paged(void **state)
{
    fixture *fx = *state;
    static const char *const backends[] = {"cpu", "reference"};
    for (int i = 0; i < 2; i++) {
        run_cli(fx, NULL, NULL, "run", "--backend", backends[i], "--page-size", "7", "--kv-lens",
                "100,1,0,37,300", "--seqlen-q", "3", "--heads-q", "8", "--heads-kv", "2",
                "--head-dim", "64", "--window", "40,-1", "--causal", "--dtype", "f16", "--check",
                "--lse", "--shuffle-pages", "--seed", "5", "--repeat", "2", "--warmup", "0", NULL);
        fjt_cli_expect_status(&fx->r, 0);
        expect_in(fx->r.out, "b5.hq8.hkv2.sq3.sk300.d64.f16.causal_br.wl40.paged7 ", "stdout");
        /* 15 + 1 + 0 + 6 + 43 pages; the table's columns for 300 keys */
        expect_in(fx->r.out,
                  "paged: 5 sequences, 438 keys in 65 pages of 7 keys (shuffled), pools of 65 "
                  "pages, block table 5 x 43",
                  "stdout");
        /* 12 rows per kv head: the decode path, through the block table */
        expect_in(fx->r.out, i ? "cpu_reference_paged" : "cpu_decode_", "stdout");

        run_cli(fx, NULL, NULL, "run", "--backend", backends[i], "--page-size", "16", "--varlen",
                "17,1:40,0:5,3:0,300:301", "--heads-q", "4", "--head-dim", "32", "--causal",
                "--sinks", "--dtype", "bf16", "--check", "--repeat", "2", "--warmup", "0", NULL);
        fjt_cli_expect_status(&fx->r, 0);
        expect_in(fx->r.out, "b5.hq4.hkv4.sq300.sk301.d32.bf16.causal_br.sinks.varlen.paged16 ",
                  "stdout");
        expect_in(fx->r.out, "varlen: 5 sequences, 321 query and 363 key tokens", "stdout");
        expect_in(fx->r.out, "paged: 5 sequences, 363 keys in 25 pages of 16 keys (in pool order)",
                  "stdout");
        expect_in(fx->r.out, i ? "cpu_reference_varlen_paged" : "cpu_tiled_varlen_paged", "stdout");
    }
    run_cli(fx, NULL, NULL, "run", "--backend", "cpu", "--page-size", "13", "--batch", "3",
            "--seqlen-q", "1", "--seqlen-k", "97", "--heads-q", "4", "--heads-kv", "1",
            "--head-dim", "16", "--dtype", "f32", "--check", "--repeat", "1", "--warmup", "0",
            NULL);
    fjt_cli_expect_status(&fx->r, 0);
    expect_in(fx->r.out, "b3.hq4.hkv1.sq1.sk97.d16.f32.nomask.paged13 ", "stdout");
    expect_in(fx->r.out, "paged: 3 sequences, 291 keys in 24 pages of 13 keys", "stdout");

    static const struct {
        const char *args[14];
        int status;
        const char *message;
    } bad[] = {
        {{"run", "--kv-lens", "4,5"}, 2, "--kv-lens needs --page-size"},
        {{"run", "--shuffle-pages"}, 2, "--shuffle-pages needs --page-size"},
        {{"run", "--page-size", "0"}, 2, "--page-size: '0' is not an integer in [1, "},
        {{"run", "--page-size", "16", "--kv-lens", "4,-5"},
         2,
         "--kv-lens: '4,-5': item 2 is not a KV length in [0, 2^30]"},
        {{"run", "--page-size", "16", "--kv-lens", "4,"}, 2, "--kv-lens: '4,': item 2 is not"},
        {{"run", "--page-size", "16", "--kv-lens", "4,5", "--varlen", "1,2"},
         2,
         "--kv-lens and --varlen: with --page-size, --varlen's Q:K items are the sequences' KV "
         "lengths"},
        {{"run", "--batch", "2", "--page-size", "16", "--kv-lens", "4,5"},
         2,
         "--batch and --kv-lens: --kv-lens sets batch"},
        {{"run", "--backend", "cpu", "--page-size", "16", "--kv-lens", "10,40", "--seqlen-k", "32",
          "--repeat", "1", "--warmup", "0"},
         1,
         "FJ_ERR_INVALID_ARGUMENT: seqused_k[1] (40) must be in [0, seqlen_k = 32]"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *const *a = bad[i].args; /* ends at its first NULL */
        run_cli(fx, NULL, NULL, a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10],
                a[11], a[12], a[13], NULL);
        fjt_cli_expect_status(&fx->r, bad[i].status);
        expect_in(fx->r.err, bad[i].message, "stderr");
    }
}

/* `bench --grid` runs a grid's paged and varlen keys (each sequence of the
 * key's full lengths, pages in pool order) and checks them, as its dense
 * rows; they failed for want of a block table and cu_seqlens before. */
static void test_bench_paged_grid(void **state)
{
    fixture *fx = *state;
    char grid[4200];
    snprintf(grid, sizeof grid, "%s/paged.txt", fx->dir);
    FILE *f = fopen(grid, "w");
    assert_non_null(f);
    fputs("b2.hq4.hkv2.sq1.sk100.d64.bf16.nomask.paged16\n"
          "b3.hq4.hkv2.sq20.sk50.d64.bf16.causal_br.sinks.varlen.paged7\n"
          "b2.hq4.hkv2.sq20.sk50.d64.bf16.causal_br.varlen\n",
          f);
    assert_int_equal(fclose(f), 0);
    run_cli(fx, NULL, NULL, "bench", "--grid", grid, "--backends", "cpu,reference", "--check",
            "--repeat", "2", "--warmup", "0", "--quiet", NULL);
    fjt_cli_expect_status(&fx->r, 0);
    static const char *const rows[] = {
        "cpu            b2.hq4.hkv2.sq1.sk100.d64.bf16.nomask.paged16",
        "cpu-reference  b2.hq4.hkv2.sq1.sk100.d64.bf16.nomask.paged16",
        "cpu_decode_", /* cpu_decode_<loops>_paged: 2 rows per kv head */
        "cpu            b3.hq4.hkv2.sq20.sk50.d64.bf16.causal_br.sinks.varlen.paged7",
        "cpu_tiled_varlen_paged",
        "cpu            b2.hq4.hkv2.sq20.sk50.d64.bf16.causal_br.varlen",
        "cpu_tiled_varlen ",
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        expect_in(fx->r.out, rows[i], "stdout");
    assert_null(strstr(fx->r.out, "!")); /* no row failed its check */
}

/* `run --head-dim-v` and `bench --head-dim-v`: V's own head dim on both CPU
 * backends, dense (prefill, MLA's MQA decode), varlen and paged (pages
 * shuffled: the pools' unused rows NaN), each checked against the
 * reference; the key ends in .dv<N>; bench sets it on every grid row (none
 * where it equals the row's head dim) and reports it in --json and --csv;
 * bad values refused naming the flag. */
static void test_head_dim_v(void **state)
{
    fixture *fx = *state;
    static const char *const backends[] = {"cpu", "reference"};
    for (int i = 0; i < 2; i++) {
        run_cli(fx, NULL, NULL, "run", "--backend", backends[i], "--head-dim", "192",
                "--head-dim-v", "128", "--seqlen-q", "70", "--seqlen-k", "130", "--heads-q", "4",
                "--heads-kv", "2", "--causal", "--dtype", "f32", "--check", "--lse", "--repeat",
                "2", "--warmup", "0", NULL);
        fjt_cli_expect_status(&fx->r, 0);
        expect_in(fx->r.out, "b1.hq4.hkv2.sq70.sk130.d192.f32.causal_br.dv128 ", "stdout");
        run_cli(fx, NULL, NULL, "run", "--backend", backends[i], "--head-dim", "576",
                "--head-dim-v", "512", "--seqlen-q", "1", "--seqlen-k", "300", "--heads-q", "16",
                "--heads-kv", "1", "--check", "--lse", "--repeat", "2", "--warmup", "0", NULL);
        fjt_cli_expect_status(&fx->r, 0);
        expect_in(fx->r.out, "b1.hq16.hkv1.sq1.sk300.d576.bf16.nomask.dv512 ", "stdout");
        run_cli(fx, NULL, NULL, "run", "--backend", backends[i], "--head-dim", "40", "--head-dim-v",
                "72", "--varlen", "17,1:40,0:5,3:0", "--heads-q", "4", "--heads-kv", "2",
                "--causal", "--dtype", "f16", "--check", "--lse", "--repeat", "2", "--warmup", "0",
                NULL);
        fjt_cli_expect_status(&fx->r, 0);
        expect_in(fx->r.out, "b4.hq4.hkv2.sq17.sk40.d40.f16.causal_br.varlen.dv72 ", "stdout");
        run_cli(fx, NULL, NULL, "run", "--backend", backends[i], "--head-dim", "96", "--head-dim-v",
                "33", "--page-size", "7", "--kv-lens", "100,1,0,37", "--seqlen-q", "2", "--heads-q",
                "8", "--heads-kv", "2", "--causal", "--dtype", "bf16", "--check", "--shuffle-pages",
                "--seed", "3", "--repeat", "2", "--warmup", "0", NULL);
        fjt_cli_expect_status(&fx->r, 0);
        expect_in(fx->r.out, "b4.hq8.hkv2.sq2.sk100.d96.bf16.causal_br.paged7.dv33 ", "stdout");
        /* 2 x 4 = 8 rows per kv head: the decode path through the block table */
        expect_in(fx->r.out, i ? "cpu_reference_paged" : "cpu_decode_", "stdout");
        expect_in(fx->r.out, "_paged", "stdout");
    }
    /* equal dims: the plain problem's key */
    run_cli(fx, NULL, NULL, "run", "--backend", "cpu", "--head-dim", "32", "--head-dim-v", "32",
            "--seqlen-q", "4", "--repeat", "1", "--warmup", "0", NULL);
    fjt_cli_expect_status(&fx->r, 0);
    expect_in(fx->r.out, "b1.hq8.hkv8.sq4.sk4.d32.bf16.nomask ", "stdout");
    run_cli(fx, NULL, NULL, "bench", "--grid", "smoke", "--head-dim-v", "40", "--dtypes", "f32",
            "--list", NULL);
    fjt_cli_expect_status(&fx->r, 0);
    expect_in(fx->r.out, "b1.hq2.hkv2.sq64.sk64.d64.f32.nomask.dv40\n", "stdout");
    expect_in(fx->r.out, "b1.hq4.hkv2.sq1.sk128.d64.f32.nomask.dv40\n", "stdout");
    run_cli(fx, NULL, NULL, "bench", "--grid", "smoke", "--head-dim-v", "64", "--dtypes", "f32",
            "--list", NULL);
    fjt_cli_expect_status(&fx->r, 0);
    assert_null(strstr(fx->r.out, ".dv"));
    run_cli(fx, NULL, NULL, "bench", "--grid", "smoke", "--head-dim-v", "100", "--dtypes", "f16",
            "--backends", "cpu,reference", "--check", "--json", "--repeat", "1", "--warmup", "0",
            "--quiet", NULL);
    fjt_cli_expect_status(&fx->r, 0);
    expect_in(fx->r.out, "\"head_dim\": 64, \"head_dim_v\": 100", "stdout");
    expect_in(fx->r.out, "\"problem\": \"b1.hq4.hkv2.sq1.sk128.d64.f16.nomask.dv100\"", "stdout");
    run_cli(fx, NULL, NULL, "bench", "--grid", "smoke", "--dtypes", "f32", "--backends", "cpu",
            "--csv", "--repeat", "1", "--warmup", "0", "--quiet", NULL);
    fjt_cli_expect_status(&fx->r, 0);
    expect_in(fx->r.out, ",head_dim,head_dim_v,causal,", "stdout");
    expect_in(fx->r.out, ",64,64,none,", "stdout");
    static const struct {
        const char *args[4];
        const char *message;
    } bad[] = {
        {{"run", "--head-dim-v", "577"}, "--head-dim-v: '577' is not an integer in [0, 576]"},
        {{"run", "--head-dim-v=-1"}, "--head-dim-v: '-1' is not an integer in [0, 576]"},
        {{"run", "--head-dim-v", "wide"}, "--head-dim-v: 'wide' is not an integer"},
        {{"bench", "--head-dim-v", "600"}, "--head-dim-v: '600' is not an integer in [0, 576]"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        run_cli(fx, NULL, NULL, bad[i].args[0], bad[i].args[1], bad[i].args[2], bad[i].args[3],
                NULL);
        fjt_cli_expect_status(&fx->r, 2);
        expect_in(fx->r.err, bad[i].message, "stderr");
    }
}

/* FLASHJIT_LOG: an unknown value stops the program with the accepted ones
 * named (it was silently off); the known ones work. */
static void test_log_values(void **state)
{
    fixture *fx = *state;
    const char *const bad[] = {"verbose", "INFO", "3", " info"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        run_cli(fx, "FLASHJIT_LOG", bad[i], "info", NULL);
        fjt_cli_expect_status(&fx->r, 1);
        char want[128];
        snprintf(want, sizeof want, "FLASHJIT_LOG (\"%s\") is not one of off, info, debug", bad[i]);
        expect_in(fx->r.err, want, "stderr");
        assert_string_equal(fx->r.out, ""); /* stopped before any report */
    }
    const char *const quiet[] = {"off", "0", ""};
    for (size_t i = 0; i < sizeof quiet / sizeof quiet[0]; i++) {
        run_cli(fx, "FLASHJIT_LOG", quiet[i], "info", NULL);
        fjt_cli_expect_status(&fx->r, 0);
        assert_string_equal(fx->r.err, "");
    }
    const char *const loud[] = {"info", "1", "debug", "2"};
    for (size_t i = 0; i < sizeof loud / sizeof loud[0]; i++) {
        run_cli(fx, "FLASHJIT_LOG", loud[i], "info", NULL);
        fjt_cli_expect_status(&fx->r, 0);
        expect_in(fx->r.err, "flashjit info: context: backend", "stderr");
    }
}

/* `info` reports NVRTC apart from the driver (the library's describe text
 * has an nvrtc line when CUDA is not usable), saying what the library's
 * loader says: here the driver is kept away (FLASHJIT_LIBCUDA names no
 * file). */
static void test_info_reports_nvrtc(void **state)
{
    fixture *fx = *state;
    /* this process loads NVRTC once, as the children will with it unset */
    unsetenv("FLASHJIT_LIBNVRTC");
    const fj_cuda_api *api;
    if (fj_cuda_nvrtc(&api) != FJ_OK && strstr(fj_last_error(), "built without the CUDA backend")) {
        /* -Dcuda=disabled: no loader, and describe says why instead */
        run_cli(fx, NULL, NULL, "info", NULL);
        fjt_cli_expect_status(&fx->r, 0);
        expect_in(fx->r.out, "  cuda: not built (configured with -Dcuda=disabled)", "stdout");
        return;
    }
    setenv("FLASHJIT_LIBCUDA", "/nonexistent/libcuda.so.1", 1);
    run_cli(fx, "FLASHJIT_LIBNVRTC", "/nonexistent/libnvrtc.so", "info", NULL);
    fjt_cli_expect_status(&fx->r, 0);
    expect_in(fx->r.out,
              "  cuda: not usable: cannot load the CUDA driver from "
              "FLASHJIT_LIBCUDA=/nonexistent/libcuda.so.1",
              "stdout");
    expect_in(fx->r.out,
              "\n  nvrtc: not usable: cannot load NVRTC from "
              "FLASHJIT_LIBNVRTC=/nonexistent/libnvrtc.so",
              "stdout");

    /* NVRTC as this process's loader finds it (libnvrtc on the loader path,
       or none): the tool must say the same */
    fj_status s = fj_cuda_nvrtc(&api);
    char want[1024];
    if (s == FJ_OK)
        snprintf(want, sizeof want, "\n  nvrtc: usable: NVRTC %d.%d (%s)", api->nvrtc_major,
                 api->nvrtc_minor, api->nvrtc_path);
    else snprintf(want, sizeof want, "\n  nvrtc: not usable: %.900s", fj_last_error());
    run_cli(fx, "FLASHJIT_LIBNVRTC", NULL, "info", NULL);
    fjt_cli_expect_status(&fx->r, 0);
    expect_in(fx->r.out, want, "stdout");
    unsetenv("FLASHJIT_LIBCUDA");
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s PATH_OF_FLASHJIT\n", argv[0]);
        return 2;
    }
    flashjit_path = argv[1];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_source_prefill_keeps_the_mask, setup, teardown),
        cmocka_unit_test_setup_teardown(test_source_decode_from_flags, setup, teardown),
        cmocka_unit_test_setup_teardown(test_source_bad_shape_flags, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gnu_option_syntax, setup, teardown),
        cmocka_unit_test_setup_teardown(test_run_varlen, setup, teardown),
        cmocka_unit_test_setup_teardown(test_run_paged, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bench_paged_grid, setup, teardown),
        cmocka_unit_test_setup_teardown(test_head_dim_v, setup, teardown),
        cmocka_unit_test_setup_teardown(test_log_values, setup, teardown),
        cmocka_unit_test_setup_teardown(test_info_reports_nvrtc, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
