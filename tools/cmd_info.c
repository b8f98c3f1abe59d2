/* flashjit info: what is available and why. */
#include <string.h>

#include "cli.h"

static void backend_line(fj_backend b)
{
    fj_context_options o;
    fj_context_options_init(&o);
    o.backend = b;
    fj_context *ctx;
    fj_status s = fj_context_create(&o, &ctx);
    if (s == FJ_OK) {
        printf("  %-14s usable\n", fj_backend_name(b));
        fj_context_destroy(ctx);
    } else {
        printf("  %-14s not usable: %s: %s\n", fj_backend_name(b), fj_status_name(s), fj_last_error());
    }
}

int cmd_info(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: flashjit info\n\nPrints the version, which backends are usable and why not,\n"
                   "what AUTO chooses, and the cache directory and tuning file in use.\n");
            return 0;
        }
        return cli_usage_error("info", "unknown option '%s'", argv[i]);
    }
    printf("flashjit %s (header %s)\n\nbackends:\n", FLASHJIT_VERSION_STRING, FLASHJIT_VERSION_STRING);
    backend_line(FJ_BACKEND_CUDA);
    backend_line(FJ_BACKEND_CPU);
    backend_line(FJ_BACKEND_CPU_REFERENCE);
    fj_context *ctx;
    fj_status s = fj_context_create(NULL, &ctx);
    if (s) return cli_fail("info", s);
    printf("\ndefault context (AUTO):\n");
    const char *d = fj_context_describe(ctx);
    while (*d) {
        size_t n = strcspn(d, "\n");
        printf("  %.*s\n", (int)n, d);
        d += n + (d[n] == '\n');
    }
    fj_context_destroy(ctx);
    return 0;
}
