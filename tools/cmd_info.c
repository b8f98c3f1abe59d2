/* flashjit info: what is available and why. */
#include <errno.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "context.h"
#include "cuda/cuda_api.h"
#include "cpu/tiled.h"
#include "tune/target.h"
#include "tune/tuning.h"

/* Prints whether backend b is usable; returns its context (the caller
 * destroys it) or NULL when it is not usable. */
static fj_context *backend_line(fj_backend b)
{
    fj_context_options o;
    fj_context_options_init(&o);
    o.backend = b;
    fj_context *ctx;
    fj_status s = fj_context_create(&o, &ctx);
    if (s == FJ_OK) {
        printf("  %-14s usable\n", fj_backend_name(b));
        return ctx;
    }
    printf("  %-14s not usable: %s: %s\n", fj_backend_name(b), fj_status_name(s), fj_last_error());
    return NULL;
}

/* NVRTC on its own line: it is loaded apart from the driver, and compiles
 * kernels without one (`flashjit source --ptx`, `compile-all`), so a machine
 * with no GPU or no driver still learns whether it has a usable NVRTC. */
static void nvrtc_line(void)
{
    const fj_cuda_api *api;
    if (fj_cuda_nvrtc(&api) == FJ_OK)
        printf("    %-12s usable: %s, NVRTC %d.%d (compiles kernels with or without a GPU)\n",
               "nvrtc", api->nvrtc_path, api->nvrtc_major, api->nvrtc_minor);
    else
        printf("    %-12s not usable: %s\n", "nvrtc", fj_last_error());
}

static void print_describe(const fj_context *ctx)
{
    const char *d = fj_context_describe(ctx);
    while (*d) {
        size_t n = strcspn(d, "\n");
        printf("  %.*s\n", (int)n, d);
        d += n + (d[n] == '\n');
    }
}

/* How many of t's entries each device would use: the CUDA device (when one
 * is usable) and the CPU tiled backend with ctx's worker count, keyed the way
 * plan creation keys its lookups (fj_tuning_target_of). */
static void print_matches(const fj_tuning *t, const fj_context *cuda, const fj_context *ctx)
{
    char device[96];
    fj_tuning_target target;
    if (cuda && fj_tuning_target_of(cuda, &target) == FJ_OK) {
        printf("    matching cuda %s %s: %d\n", target.device, target.arch,
               fj_tuning_count_matching(t, target.device, target.arch));
    } else {
        printf("    matching cuda: none (no usable device)\n");
    }
    fj_cpu_device_token(ctx->cpu_threads, device, sizeof device);
    printf("    matching cpu %s: %d\n", device, fj_tuning_count_matching(t, device, "cpu"));
}

/* The file's state as the context found it: ctx->tuning is NULL when the
 * file is absent or could not be read, so stat tells the two apart. */
static void print_tuning_file(const fj_context *ctx)
{
    if (!ctx->tuning_file) {
        printf("  file: none (the disk cache is off and FLASHJIT_TUNING_FILE is not set)\n");
        return;
    }
    struct stat st;
    if (stat(ctx->tuning_file, &st) != 0) {
        int err = errno;
        printf("  file: %s (%s)\n", ctx->tuning_file, err == ENOENT ? "not present" : strerror(err));
        return;
    }
    if (!ctx->tuning) {
        printf("  file: %s (present, not readable: see the tuning line above)\n", ctx->tuning_file);
        return;
    }
    printf("  file: %s (present, %d entries)\n", ctx->tuning_file, fj_tuning_count(ctx->tuning));
}

static void print_tuning(const fj_context *ctx, const fj_context *cuda)
{
    printf("\ntuning:\n");
    print_tuning_file(ctx);
    if (ctx->tuning) print_matches(ctx->tuning, cuda, ctx);
    const fj_tuning *shipped = fj_tuning_shipped();
    printf("  shipped table: %d entries\n", fj_tuning_count(shipped));
    print_matches(shipped, cuda, ctx);
}

int cmd_info(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: flashjit info\n\nPrints the version, which backends are usable and why not\n"
                   "(and NVRTC, which compiles kernels with or without a GPU, on its own line),\n"
                   "what AUTO chooses, the cache directory, and the tuning file in use: its path,\n"
                   "whether it exists, its entries and how many match this machine's CUDA device\n"
                   "and CPU (and the same for the table shipped with flashjit).\n");
            return 0;
        }
        return cli_usage_error("info", "unknown option '%s'", argv[i]);
    }
    /* The default context first: an environment variable it rejects
       (FLASHJIT_BACKEND, FLASHJIT_LOG) would fail every line below too. */
    fj_context *ctx;
    fj_status s = fj_context_create(NULL, &ctx);
    if (s) return cli_fail("info", s);
    const unsigned v = fj_version();
    printf("flashjit %s (library %u.%u.%u)\n\nbackends:\n", FLASHJIT_VERSION_STRING, v / 10000,
           v / 100 % 100, v % 100);
    /* The CUDA context is kept: its device names the tuning entries that match. */
    fj_context *cuda = backend_line(FJ_BACKEND_CUDA);
    nvrtc_line();
    fj_context_destroy(backend_line(FJ_BACKEND_CPU));
    fj_context_destroy(backend_line(FJ_BACKEND_CPU_REFERENCE));
    printf("\ndefault context (AUTO):\n");
    print_describe(ctx);
    print_tuning(ctx, cuda);
    fj_context_destroy(ctx);
    fj_context_destroy(cuda);
    return 0;
}
