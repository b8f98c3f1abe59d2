/* flashjit info: what is available and why. */
#include <errno.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
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
 * is usable) and the CPU tiled backend with its worker count, keyed the way
 * plan creation keys its lookups (fj_tuning_target_of). */
static void print_matches(const fj_tuning *t, const fj_context *cuda, const fj_context *cpu)
{
    fj_tuning_target target;
    if (cuda && fj_tuning_target_of(cuda, &target) == FJ_OK) {
        printf("    matching cuda %s %s: %d\n", target.device, target.arch,
               fj_tuning_count_matching(t, target.device, target.arch));
    } else {
        printf("    matching cuda: none (no usable device)\n");
    }
    if (cpu && fj_tuning_target_of(cpu, &target) == FJ_OK)
        printf("    matching cpu %s: %d\n", target.device,
               fj_tuning_count_matching(t, target.device, target.arch));
}

/* The file's state as the context found it: stat tells a file that is
 * absent from one that could not be read. */
static void print_tuning_file(const fj_context *ctx)
{
    const char *file = fj_context_tuning_file(ctx);
    const fj_tuning *t = fj_context_tuning(ctx);
    if (!file) {
        printf("  file: none (the disk cache is off and FLASHJIT_TUNING_FILE is not set)\n");
        return;
    }
    struct stat st;
    if (stat(file, &st) != 0) {
        int err = errno;
        printf("  file: %s (%s)\n", file, err == ENOENT ? "not present" : strerror(err));
        return;
    }
    if (!fj_tuning_file_read(t)) {
        printf("  file: %s (present, not readable: see the tuning line above)\n", file);
        return;
    }
    printf("  file: %s (present, %d entries)\n", file, fj_tuning_count(t));
}

static void print_tuning(const fj_context *ctx, const fj_context *cuda, const fj_context *cpu)
{
    printf("\ntuning:\n");
    print_tuning_file(ctx);
    if (fj_tuning_file_read(fj_context_tuning(ctx)))
        print_matches(fj_context_tuning(ctx), cuda, cpu);
    const fj_tuning *shipped = fj_tuning_shipped();
    printf("  shipped table: %d entries\n", fj_tuning_count(shipped));
    print_matches(shipped, cuda, cpu);
}

int cmd_info(int argc, char **argv)
{
    static const cli_option none[] = {{NULL, 0, 0}};
    const cli_option *const tables[] = {none, NULL};
    cli_options p;
    cli_options_begin(&p, "info", argc, argv, tables);
    const char *val;
    for (int c; (c = cli_next_option(&p, &val)) != -1;) {
        if (c == CLI_OPTION_ERROR) return 2;
        if (c == CLI_OPTION_HELP) {
            printf("usage: flashjit info\n\nPrints the version, which backends are usable and why "
                   "not,\n"
                   "what AUTO chooses (and, when CUDA is not usable, whether NVRTC is: it\n"
                   "compiles kernels without a GPU or driver), the cache directory, and the\n"
                   "tuning file in use: its path, whether it exists, its entries and how many\n"
                   "match this machine's CUDA device and CPU (and the same for the table\n"
                   "shipped with flashjit).\n");
            return 0;
        }
    }
    if (cli_no_arguments(&p)) return 2;
    /* The default context first: an environment variable it rejects
       (FLASHJIT_BACKEND, FLASHJIT_LOG) would fail every line below too. */
    fj_context *ctx;
    fj_status s = fj_context_create(NULL, &ctx);
    if (s) return cli_fail("info", s);
    const unsigned v = fj_version();
    printf("flashjit %s (library %u.%u.%u)\n\nbackends:\n", FLASHJIT_VERSION_STRING, v / 10000,
           v / 100 % 100, v % 100);
    /* The CUDA and CPU contexts are kept: their targets name the tuning
       entries that match. */
    fj_context *cuda = backend_line(FJ_BACKEND_CUDA);
    fj_context *cpu = backend_line(FJ_BACKEND_CPU);
    fj_context_destroy(backend_line(FJ_BACKEND_CPU_REFERENCE));
    printf("\ndefault context (AUTO):\n");
    print_describe(ctx);
    print_tuning(ctx, cuda, cpu);
    fj_context_destroy(ctx);
    fj_context_destroy(cpu);
    fj_context_destroy(cuda);
    return 0;
}
