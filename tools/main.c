/* flashjit: what is available and why, run and benchmark problems, inspect
 * generated kernels and the cache. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const fj_command commands[] = {
    {"info", "version, backends found and why each is or is not usable, cache and tuning file",
     cmd_info},
    {"demo", "a few representative problems on the best backend, checked against the reference",
     cmd_demo},
    {"run", "one problem from flags (--check compares with the reference)", cmd_run},
    {"bench", "a grid of problems: ms, TFLOP/s, GB/s (table, --json or --csv)", cmd_bench},
    {"source", "print the generated CUDA source (or --ptx) of a kernel", cmd_source},
    {"compile-all", "compile every supported kernel variant through the cache", cmd_compile_all},
    {"tune",
     "time candidate tile sizes over a problem space; --write saves the best to the tuning file",
     cmd_tune},
    {"cache", "list | stats | verify | clear the kernel cache", cmd_cache},
};
#define NCOMMANDS (sizeof commands / sizeof commands[0])

static void usage(FILE *f)
{
    fprintf(f, "usage: flashjit <command> [options]   (flashjit <command> --help)\n\ncommands:\n");
    for (size_t i = 0; i < NCOMMANDS; i++)
        fprintf(f, "  %-12s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\nenvironment:\n"
               "  FLASHJIT_BACKEND      auto|cpu|reference|cuda: the backend AUTO resolves to\n"
               "  FLASHJIT_LOG          off|info|debug: the library's messages, on stderr\n"
               "  FLASHJIT_CACHE_DIR    the kernel cache directory\n"
               "  FLASHJIT_TUNING_FILE  the tuning file\n"
               "  FLASHJIT_LIBCUDA      the path of libcuda.so.1, when the loader cannot find it\n"
               "  FLASHJIT_LIBNVRTC     the path of libnvrtc, when the loader cannot find it\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("flashjit %s (library %u)\n", FLASHJIT_VERSION_STRING, fj_version());
        return 0;
    }
    for (size_t i = 0; i < NCOMMANDS; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "flashjit: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
