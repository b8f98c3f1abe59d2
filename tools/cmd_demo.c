/* flashjit demo: the README's main job. A handful of representative problems
 * on the best available backend, each checked against the CPU reference. */
#include <string.h>

#include "cli.h"
#include "cli_problem.h"

typedef struct demo_case {
    const char *what;
    int batch, hq, hkv, sq, sk, d;
    fj_dtype dtype;
    fj_causal causal;
    int wl, wr;
    bool cpu_only; /* f32: the CUDA backend computes f16/bf16 */
} demo_case;

static const demo_case cases[] = {
    {"prefill, causal", 2, 16, 16, 1024, 1024, 128, FJ_BF16, FJ_CAUSAL_BOTTOM_RIGHT, -1, -1, false},
    {"GQA 4:1, causal", 1, 32, 8, 1024, 1024, 128, FJ_BF16, FJ_CAUSAL_BOTTOM_RIGHT, -1, -1, false},
    {"head dim 64, fp16", 4, 8, 8, 512, 512, 64, FJ_F16, FJ_CAUSAL_NONE, -1, -1, false},
    {"sliding window 256", 1, 8, 8, 2048, 2048, 128, FJ_BF16, FJ_CAUSAL_BOTTOM_RIGHT, 256, 0,
     false},
    {"chunked prefill Sq<Sk", 1, 16, 4, 256, 2048, 128, FJ_BF16, FJ_CAUSAL_BOTTOM_RIGHT, -1, -1,
     false},
    {"decode, GQA", 4, 32, 8, 1, 4096, 128, FJ_BF16, FJ_CAUSAL_NONE, -1, -1, false},
    {"float32", 1, 8, 8, 1024, 1024, 128, FJ_F32, FJ_CAUSAL_NONE, -1, -1, true},
};

int cmd_demo(int argc, char **argv)
{
    static const cli_option none[] = {{NULL, 0, 0}};
    const cli_option *const tables[] = {none, NULL};
    cli_options p;
    cli_options_begin(&p, "demo", argc, argv, tables);
    const char *val;
    for (int c; (c = cli_next_option(&p, &val)) != -1;) {
        if (c == CLI_OPTION_ERROR) return 2;
        if (c == CLI_OPTION_HELP) {
            printf(
                "usage: flashjit demo\n\nRuns a few representative attention problems on the best\n"
                "available backend (FLASHJIT_BACKEND overrides), checks each against the CPU\n"
                "reference, and prints backend, problem key, ms, TFLOP/s and the relative error.\n"
                "Exits 1 if any check fails.\n");
            return 0;
        }
    }
    if (cli_no_arguments(&p)) return 2;
    fj_context *ctx = NULL, *ref = NULL;
    fj_context_options o;
    fj_context_options_init(&o);
    fj_status s = fj_context_create(&o, &ctx);
    if (s) return cli_fail("demo", s);
    o.backend = FJ_BACKEND_CPU_REFERENCE;
    if ((s = fj_context_create(&o, &ref))) {
        fj_context_destroy(ctx);
        return cli_fail("demo", s);
    }
    bool cuda = fj_context_backend(ctx) == FJ_BACKEND_CUDA;
    const char *d = fj_context_describe(ctx);
    const char *line = strstr(d, "backend: ");
    printf("flashjit %s demo. %.*s\n\n", FLASHJIT_VERSION_STRING,
           line ? (int)strcspn(line, "\n") : 0, line ? line : "");
    printf("%-22s %-14s %-44s %9s %9s %10s  %s\n", "case", "backend", "problem", "ms", "TFLOP/s",
           "rel.err", "check");
    int failed = 0, total = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const demo_case *c = &cases[i];
        if (c->cpu_only && cuda) continue;
        total++;
        fj_attention_desc desc;
        fj_attention_desc_init(&desc, c->batch, c->hq, c->hkv, c->sq, c->sk, c->d, c->dtype);
        desc.causal = c->causal;
        desc.window_left = c->wl;
        desc.window_right = c->wr;
        char shape[128];
        cli_shape_str(&desc, shape, sizeof shape);
        cli_result r;
        s = cli_measure(ctx, ref, &desc, cuda ? 5 : 1, cuda ? 20 : 3, true, 1000 + i, &r);
        cli_result_free(&r); /* the description is not printed here */
        if (s) {
            printf("%-22s %-14s %-36s  %s: %s\n", c->what, fj_backend_name(fj_context_backend(ctx)),
                   shape, fj_status_name(s), fj_last_error());
            failed++;
            continue;
        }
        printf("%-22s %-14s %-44s %9.3f %9.3f %10.2e  %s\n", c->what, r.backend, shape, r.ms_median,
               r.tflops, r.rel_err, r.ok ? "ok" : "FAILED");
        if (!r.ok) failed++;
    }
    printf("\n%d problems, %d failed. ms: median; TFLOP/s: 4*B*H*Sq*Sk*D (halved when causal and "
           "Sq == Sk); rel.err: relative Frobenius error against the CPU reference.\n",
           total, failed);
    fj_context_destroy(ref);
    fj_context_destroy(ctx);
    return failed ? 1 : 0;
}
