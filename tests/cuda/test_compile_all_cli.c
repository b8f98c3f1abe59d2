/* `flashjit compile-all --kinds shipped` through the built binary (its path
 * is argv[1]): the shipped tuning tables' tiles for sm_90 are compiled, as a
 * plan would build them, with their split variants only under split; an arch
 * the tables do not cover says so and compiles nothing. NVRTC compiles for
 * real, so without a loadable NVRTC those tests skip, saying why, and the
 * program exits 77 (meson's SKIP) unless something else failed. */
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cli_run.h"
#include "cuda/cuda_api.h"
#include "status.h"

static const char *flashjit_path;
static fj_status nvrtc_status;
static char nvrtc_reason[1024];

typedef struct fixture {
    char dir[4096]; /* scratch: outputs and the cache directory */
    char cache[4200];
    fjt_cli_result r;
} fixture;

static void run_cli(fixture *fx, ...)
{
    const char *const prefix[] = {flashjit_path, "compile-all", "--cache-dir", fx->cache, NULL};
    va_list ap;
    va_start(ap, fx);
    fjt_cli_run_args(fx->dir, NULL, NULL, prefix, ap, &fx->r);
    va_end(ap);
}

static void expect_out(const fixture *fx, const char *text, bool present)
{
    if (!strstr(fx->r.out, text) != !present)
        fail_msg("stdout %s '%s':\n%s", present ? "lacks" : "has", text, fx->r.out);
}

static int setup(void **state)
{
    fixture *fx = calloc(1, sizeof *fx);
    if (!fx || !fjt_scratch_dir("compile-all-cli", fx->dir, sizeof fx->dir)) return -1;
    snprintf(fx->cache, sizeof fx->cache, "%s/cache", fx->dir);
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    free(*state);
    return 0;
}

#define REQUIRE_NVRTC()                                                 \
    do {                                                                \
        if (nvrtc_status != FJ_OK) {                                    \
            printf("# skipped: NVRTC cannot be loaded here (%s: %s)\n", \
                   fj_status_name(nvrtc_status), nvrtc_reason);         \
            skip();                                                     \
        }                                                               \
    } while (0)

/* The H200 table's d128 bf16 nomask entry: decode m16n128w4s1 (prefill has
   no entry: the heuristic's flash_tma tiles); nothing split unless asked. */
static void test_shipped_tiles(void **state)
{
    REQUIRE_NVRTC();
    fixture *fx = *state;
    run_cli(fx, "--arch", "sm_90", "--kinds", "shipped", "--head-dims", "128", "--dtype", "bf16",
            "--mask", "nomask", NULL);
    fjt_cli_expect_status(&fx->r, 0);
    expect_out(fx, "compile-all: 1 kernels", true);
    expect_out(fx, "flash_fwd.d128.bf16.nomask.m16n128w4s1.sm_90", true);
    expect_out(fx, "flash_wgmma.", false);
    expect_out(fx, ".split.", false);
    expect_out(fx, " 0 failed, 0 spilling", true);

    run_cli(fx, "--arch", "sm_90", "--kinds", "shipped,split", "--head-dims", "128", "--dtype",
            "bf16", "--mask", "nomask", NULL);
    fjt_cli_expect_status(&fx->r, 0);
    expect_out(fx, "flash_fwd.d128.bf16.nomask.m16n128w4s1.split.sm_90", true);
    expect_out(fx, "combine.d128.bf16.nomask.m16n64w1s1.split.sm_90", true);
    expect_out(fx, " 0 failed, 0 spilling", true);
}

/* No shipped entry for sm_80: said, nothing compiled, not an error. */
static void test_uncovered_arch(void **state)
{
    REQUIRE_NVRTC();
    fixture *fx = *state;
    run_cli(fx, "--arch", "sm_80", "--kinds", "shipped", NULL);
    fjt_cli_expect_status(&fx->r, 0);
    expect_out(fx, "the shipped tuning tables have no flash_fwd entry for sm_80", true);
    expect_out(fx, "compile-all: 0 kernels", true);
}

static void test_bad_kind(void **state)
{
    fixture *fx = *state;
    run_cli(fx, "--kinds", "shipped,tuned", NULL);
    fjt_cli_expect_status(&fx->r, 2);
    if (!strstr(fx->r.err, "--kinds: 'shipped,tuned' is not a list of prefill, decode, split, "
                           "shipped"))
        fail_msg("stderr: %s", fx->r.err);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s PATH-TO-flashjit\n", argv[0]);
        return 2;
    }
    flashjit_path = argv[1];
    const fj_cuda_api *api;
    nvrtc_status = fj_cuda_nvrtc(&api);
    snprintf(nvrtc_reason, sizeof nvrtc_reason, "%s", fj_last_error());
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_shipped_tiles, setup, teardown),
        cmocka_unit_test_setup_teardown(test_uncovered_arch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_kind, setup, teardown),
    };
    int failed = cmocka_run_group_tests_name("compile_all_cli", tests, NULL, NULL);
    /* meson's SKIP when the NVRTC tests could not run and nothing failed */
    return failed == 0 && nvrtc_status != FJ_OK ? 77 : failed;
}
