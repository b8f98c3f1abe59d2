/* flashjit source: prints the CUDA source the library generates for a kernel
 * (exactly the bytes NVRTC compiles and the cache key hashes), or with --ptx
 * the PTX NVRTC makes of it. The kernel is named canonically, or described
 * by the same problem flags as `flashjit run` plus tile overrides. */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cuda/jit/codegen.h"
#include "cuda/jit/nvrtc_compile.h"
#include "cuda/jit/kernel_build.h"
#include "cuda/jit/kernel_desc.h"
#include "problem.h"

static const char *const usage_text =
    "usage: flashjit source NAME [--ptx]\n"
    "       flashjit source --head-dim D [--dtype f16|bf16] [--causal [KIND]] [--window L,R]\n"
    "                       [--softcap C] [--alibi] [--sinks] [--seqlen-q N] [--seqlen-k N]\n"
    "                       [--heads-q N] [--heads-kv N]\n"
    "                       [--arch sm_XX] [--block-m M] [--block-n N] [--warps W]\n"
    "                       [--stages S] [--ptx]\n"
    "\n"
    "Prints the generated CUDA source of one kernel: NAME is canonical, e.g.\n"
    "flash_fwd.d128.bf16.causal.m128n64w4s2.sm_90 or (sm_90's warpgroup-MMA kernel)\n"
    "flash_wgmma.d128.bf16.causal.m128n128g2s3.sm_90, or the flags describe the problem\n"
    "and the kernel is the one a plan for it would take (defaults: bf16, no mask,\n"
    "seqlen_q 1024, seqlen_k = seqlen_q, heads 1:1, sm_90, the heuristic's tiles; any\n"
    "tile flag overrides the heuristic). Decode kernels need few query rows, e.g.\n"
    "--seqlen-q 1 --seqlen-k 4096; a causal mask that hides no key there is dropped,\n"
    "as plans drop it (a note on stderr says so). The source compiles on its own:\n"
    "flashjit source NAME > k.cu && nvcc -cubin -arch=sm_90 k.cu (-arch=sm_90a for\n"
    "flash_wgmma). --ptx prints NVRTC's PTX instead (needs libnvrtc). --alibi and --sinks\n"
    "give the kernels with ALiBi's bias and attention sinks (their values are data).\n";

static bool parse_arch(const char *value, uint32_t *arch)
{
    const char *p = value && !strncmp(value, "sm_", 3) ? value + 3 : value;
    char *end = NULL;
    long a = p && *p >= '0' && *p <= '9' ? strtol(p, &end, 10) : 0;
    if (!a || *end || a < 10 || a > 9999) {
        cli_usage_error("source", "--arch: '%s' is not sm_<version>, e.g. sm_90",
                        value ? value : "");
        return false;
    }
    *arch = (uint32_t)a;
    return true;
}

typedef struct source_flags {
    const char *name;
    bool ptx, from_flags;
    int head_dim;
    int seqlen_q, seqlen_k, heads_q, heads_kv; /* 0: the default */
    fj_dtype dtype;
    fj_causal causal;
    int window_left, window_right;
    float softcap;     /* 0: off; any value > 0 gives the capped kernel */
    uint32_t features; /* FJ_FEATURE_ALIBI | FJ_FEATURE_SINKS */
    uint32_t arch;
    int tiles[4]; /* block_m, block_n, warps, stages; 0: the heuristic's */
} source_flags;

/* 0: parsed; otherwise the exit status. */
static int parse_flags(int argc, char **argv, source_flags *f)
{
    int *const shape[4] = {&f->seqlen_q, &f->seqlen_k, &f->heads_q, &f->heads_kv};
    memset(f, 0, sizeof *f);
    f->dtype = FJ_BF16;
    f->window_left = f->window_right = -1;
    f->arch = 90;
    enum {
        OPT_PTX = 1,
        OPT_TILE,               /* OPT_TILE + 0..3 */
        OPT_DIM = OPT_TILE + 4, /* OPT_DIM + 0..3 */
        OPT_HEAD_DIM = OPT_DIM + 4,
        OPT_DTYPE,
        OPT_ARCH,
        OPT_CAUSAL,
        OPT_WINDOW,
        OPT_SOFTCAP,
        OPT_ALIBI,
        OPT_SINKS
    };
    static const cli_option own[] = {
        {"ptx", no_argument, OPT_PTX},
        {"block-m", required_argument, OPT_TILE},
        {"block-n", required_argument, OPT_TILE + 1},
        {"warps", required_argument, OPT_TILE + 2},
        {"stages", required_argument, OPT_TILE + 3},
        {"seqlen-q", required_argument, OPT_DIM},
        {"seqlen-k", required_argument, OPT_DIM + 1},
        {"heads-q", required_argument, OPT_DIM + 2},
        {"heads-kv", required_argument, OPT_DIM + 3},
        {"head-dim", required_argument, OPT_HEAD_DIM},
        {"dtype", required_argument, OPT_DTYPE},
        {"arch", required_argument, OPT_ARCH},
        /* Same spelling as `flashjit run`: a value is optional. */
        {"causal", optional_argument, OPT_CAUSAL},
        {"window", required_argument, OPT_WINDOW},
        {"softcap", required_argument, OPT_SOFTCAP},
        {"alibi", no_argument, OPT_ALIBI},
        {"sinks", no_argument, OPT_SINKS},
        {NULL, 0, 0},
    };
    const cli_option *const tables[] = {own, NULL};
    cli_options p;
    cli_options_begin(&p, "source", argc, argv, tables);
    const char *val;
    for (int c; (c = cli_next_option(&p, &val)) != -1;) {
        const char *a = p.flag;
        if (c == CLI_OPTION_ERROR) return 2;
        if (c == CLI_OPTION_HELP) {
            fputs(usage_text, stdout);
            return -1;
        }
        f->from_flags |= c != OPT_PTX;
        if (c == OPT_PTX) {
            f->ptx = true;
        } else if (c >= OPT_TILE && c < OPT_TILE + 4) {
            if (!cli_parse_int("source", a, val, 1, 1024, &f->tiles[c - OPT_TILE])) return 2;
        } else if (c >= OPT_DIM && c < OPT_DIM + 4) {
            if (!cli_parse_int("source", a, val, 1, 1 << 30, shape[c - OPT_DIM])) return 2;
        } else if (c == OPT_HEAD_DIM) {
            if (!cli_parse_int("source", a, val, 1, FJ_CUDA_MAX_HEAD_DIM, &f->head_dim)) return 2;
        } else if (c == OPT_DTYPE) {
            if (!cli_parse_dtype("source", a, val, &f->dtype)) return 2;
        } else if (c == OPT_ARCH) {
            if (!parse_arch(val, &f->arch)) return 2;
        } else if (c == OPT_CAUSAL) {
            f->causal = FJ_CAUSAL_BOTTOM_RIGHT;
            if (val && !cli_parse_causal("source", a, val, &f->causal)) return 2;
        } else if (c == OPT_WINDOW) {
            int l, r;
            char tail;
            if (!val || sscanf(val, "%d,%d%c", &l, &r, &tail) != 2 || l < -1 || r < -1)
                return cli_usage_error("source", "--window: '%s' is not LEFT,RIGHT with each >= -1",
                                       val ? val : "");
            f->window_left = l, f->window_right = r;
        } else if (c == OPT_SOFTCAP) {
            char *end;
            double v = val ? strtod(val, &end) : 0;
            if (!val || *end || !(v >= 0) || v > 1e30)
                return cli_usage_error("source", "--softcap: '%s' is not a number >= 0 (0: off)",
                                       val ? val : "");
            f->softcap = (float)v;
        } else if (c == OPT_ALIBI) {
            f->features |= FJ_FEATURE_ALIBI;
        } else if (c == OPT_SINKS) {
            f->features |= FJ_FEATURE_SINKS;
        }
    }
    for (int i = optind; i < argc; i++) {
        if (f->name)
            return cli_usage_error("source", "one kernel name only ('%s' and '%s')", f->name,
                                   argv[i]);
        f->name = argv[i];
    }
    if (f->name && f->from_flags)
        return cli_usage_error("source", "give a kernel NAME or problem flags, not both");
    if (!f->name && !f->head_dim)
        return cli_usage_error("source", "give a kernel NAME or --head-dim (see --help)");
    return 0;
}

/* The descriptor the library would choose for the flags' problem, with the
 * tile flags applied on top. A prefill shape unless the flags say otherwise:
 * with one query row, bottom-right causal hides no key, so a 1 x 1 problem
 * would print a decode kernel with the mask the flags asked for dropped. */
static fj_status desc_from_flags(const source_flags *f, fj_kernel_desc *k)
{
    const int seqlen_q = f->seqlen_q ? f->seqlen_q : 1024;
    const int heads_q = f->heads_q ? f->heads_q : 1;
    fj_attention_desc d;
    fj_attention_desc_init(&d, 1, heads_q, f->heads_kv ? f->heads_kv : heads_q, seqlen_q,
                           f->seqlen_k ? f->seqlen_k : seqlen_q, f->head_dim, f->dtype);
    d.causal = f->causal;
    d.window_left = f->window_left;
    d.window_right = f->window_right;
    d.softcap = f->softcap;
    d.features = f->features;
    fj_problem p;
    fj_status s = fj_problem_init(&p, &d);
    if (s != FJ_OK) return s;
    bool overrides = f->tiles[0] | f->tiles[1] | f->tiles[2] | f->tiles[3];
    /* A failure of the final check (template_id is set by then) may be
       about the heuristic's tiles, which the overrides replace. */
    if ((s = fj_kernel_desc_for_problem(&p, f->arch, k)) != FJ_OK &&
        (!overrides || !k->template_id))
        return s;
    uint32_t *fields[4] = {&k->block_m, &k->block_n, &k->warps, &k->stages};
    for (int t = 0; t < 4; t++)
        if (f->tiles[t]) *fields[t] = (uint32_t)f->tiles[t];
    if (p.masked && k->mask == FJ_MASK_NONE)
        fprintf(stderr,
                "flashjit source: the mask hides no key of this problem (seqlen_q %d, seqlen_k "
                "%d), so the kernel has none, as a plan's would\n",
                d.seqlen_q, d.seqlen_k);
    return fj_kernel_desc_check(k, 0);
}

static int print_ptx(const fj_kernel_desc *k, const char *name, const char *source)
{
    fj_nvrtc_target t;
    fj_status s = fj_kernel_target(k, true, &t);
    if (s != FJ_OK) return cli_fail("source", s);
    void *ptx;
    size_t size;
    double seconds;
    if ((s = fj_nvrtc_compile(&t, name, source, &ptx, &size, &seconds)) != FJ_OK)
        return cli_fail("source", s);
    fwrite(ptx, 1, size, stdout);
    free(ptx);
    fprintf(stderr, "flashjit source: %s: PTX for %s by NVRTC %d.%d in %.2f s (options: %s)\n",
            name, t.target, t.nvrtc_major, t.nvrtc_minor, seconds, t.options_text);
    return 0;
}

int cmd_source(int argc, char **argv)
{
    source_flags f;
    int rc = parse_flags(argc, argv, &f);
    if (rc) return rc < 0 ? 0 : rc;

    fj_kernel_desc k;
    fj_status s = f.name ? fj_kernel_desc_parse(f.name, &k) : desc_from_flags(&f, &k);
    if (s != FJ_OK) return cli_fail("source", s);
    if (f.name && (s = fj_kernel_desc_check(&k, 0)) != FJ_OK) return cli_fail("source", s);

    char name[128];
    fj_kernel_desc_name(&k, name, sizeof name);
    char *source;
    size_t len;
    if ((s = fj_codegen_render(&k, &source, &len)) != FJ_OK) return cli_fail("source", s);
    if (f.ptx) rc = print_ptx(&k, name, source);
    else fwrite(source, 1, len, stdout);
    free(source);
    if (fflush(stdout) != 0) {
        perror("flashjit source: writing the output");
        return 1;
    }
    return rc;
}
