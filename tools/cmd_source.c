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
    "                       [--arch sm_XX] [--block-m M] [--block-n N] [--warps W]\n"
    "                       [--stages S] [--ptx]\n"
    "\n"
    "Prints the generated CUDA source of one kernel: NAME is canonical, e.g.\n"
    "flash_fwd.d128.bf16.causal.m128n64w4s2.sm_90 or (sm_90's warpgroup-MMA kernel)\n"
    "flash_wgmma.d128.bf16.causal.m128n128g2s3.sm_90, or the flags describe the problem\n"
    "(defaults: bf16, no mask, sm_90, the heuristic's tiles; any tile flag overrides\n"
    "the heuristic). The source compiles on its own: flashjit source NAME > k.cu &&\n"
    "nvcc -cubin -arch=sm_90 k.cu (-arch=sm_90a for flash_wgmma). --ptx prints\n"
    "NVRTC's PTX instead (needs libnvrtc).\n";

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
    fj_dtype dtype;
    fj_causal causal;
    int window_left, window_right;
    uint32_t arch;
    int tiles[4]; /* block_m, block_n, warps, stages; 0: the heuristic's */
} source_flags;

/* 0: parsed; otherwise the exit status. */
static int parse_flags(int argc, char **argv, source_flags *f)
{
    static const char *const tile_flags[4] = {"--block-m", "--block-n", "--warps", "--stages"};
    memset(f, 0, sizeof *f);
    f->dtype = FJ_BF16;
    f->window_left = f->window_right = -1;
    f->arch = 90;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        int tile = -1;
        for (int t = 0; t < 4; t++)
            if (!strcmp(a, tile_flags[t])) tile = t;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage_text, stdout);
            return -1;
        } else if (!strcmp(a, "--ptx")) {
            f->ptx = true;
        } else if (tile >= 0) {
            if (!cli_parse_int("source", a, val, 1, 1024, &f->tiles[tile])) return 2;
            i++, f->from_flags = true;
        } else if (!strcmp(a, "--head-dim")) {
            if (!cli_parse_int("source", a, val, 1, FJ_MAX_HEAD_DIM, &f->head_dim)) return 2;
            i++, f->from_flags = true;
        } else if (!strcmp(a, "--dtype")) {
            if (!cli_parse_dtype("source", val, &f->dtype)) return 2;
            i++, f->from_flags = true;
        } else if (!strcmp(a, "--arch")) {
            if (!parse_arch(val, &f->arch)) return 2;
            i++, f->from_flags = true;
        } else if (!strcmp(a, "--causal")) {
            /* Same spelling as `flashjit run`: a value is optional. */
            f->causal = FJ_CAUSAL_BOTTOM_RIGHT;
            if (val && val[0] != '-') {
                if (!cli_parse_causal("source", val, &f->causal)) return 2;
                i++;
            }
            f->from_flags = true;
        } else if (!strcmp(a, "--window")) {
            int l, r;
            char tail;
            if (!val || sscanf(val, "%d,%d%c", &l, &r, &tail) != 2 || l < -1 || r < -1)
                return cli_usage_error("source", "--window: '%s' is not LEFT,RIGHT with each >= -1",
                                       val ? val : "");
            f->window_left = l, f->window_right = r;
            i++, f->from_flags = true;
        } else if (a[0] == '-') {
            return cli_usage_error("source", "unknown option '%s' (see flashjit source --help)", a);
        } else if (f->name) {
            return cli_usage_error("source", "one kernel name only ('%s' and '%s')", f->name, a);
        } else {
            f->name = a;
        }
    }
    if (f->name && f->from_flags)
        return cli_usage_error("source", "give a kernel NAME or problem flags, not both");
    if (!f->name && !f->head_dim)
        return cli_usage_error("source", "give a kernel NAME or --head-dim (see --help)");
    return 0;
}

/* The descriptor the library would choose for the flags' problem, with the
 * tile flags applied on top. */
static fj_status desc_from_flags(const source_flags *f, fj_kernel_desc *k)
{
    fj_attention_desc d;
    fj_attention_desc_init(&d, 1, 1, 1, 1, 1, f->head_dim, f->dtype);
    d.causal = f->causal;
    d.window_left = f->window_left;
    d.window_right = f->window_right;
    fj_problem p;
    fj_status s = fj_problem_init(&p, &d);
    if (s != FJ_OK) return s;
    bool overrides = f->tiles[0] | f->tiles[1] | f->tiles[2] | f->tiles[3];
    /* A failure of the final check (template_id is set by then) may be
       about the heuristic's tiles, which the overrides replace. */
    if ((s = fj_kernel_desc_for_problem(&p, f->arch, k)) != FJ_OK && (!overrides || !k->template_id))
        return s;
    uint32_t *fields[4] = {&k->block_m, &k->block_n, &k->warps, &k->stages};
    for (int t = 0; t < 4; t++)
        if (f->tiles[t]) *fields[t] = (uint32_t)f->tiles[t];
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
