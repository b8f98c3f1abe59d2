/* The kernel descriptor: its canonical name (and the exact inverse), the
 * template's rules, its shared-memory footprint, and the built-in heuristic
 * that picks tiles when no tuning file says otherwise. */
#include "kernel_desc.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "gqa_pack.h"
#include "status.h"

/* Longest name fj_kernel_desc_parse accepts: it must fit the 128-byte name
 * fields (fj_kernel_image, logs) with its NUL. */
#define NAME_MAX_LEN 127

/* The grammar, spelled once for error messages. */
#define NAME_GRAMMAR \
    "<template>.d<head_dim>.<dtype>.<mask>.m<M>n<N>{w<warps>|g<warpgroups>}s<S>[.split].sm_<arch>"

static const char *const template_names[] = {
    [FJ_TEMPLATE_FLASH_FWD] = "flash_fwd",
    [FJ_TEMPLATE_COMBINE] = "combine",
    [FJ_TEMPLATE_FLASH_WGMMA] = "flash_wgmma",
};
#define TEMPLATE_COUNT (sizeof template_names / sizeof template_names[0])

static const char *const mask_names[] = {
    [FJ_MASK_NONE] = "nomask",
    [FJ_MASK_CAUSAL] = "causal",
    [FJ_MASK_WINDOW] = "window",
    [FJ_MASK_CAUSAL_WINDOW] = "causal_window",
};
#define MASK_COUNT (sizeof mask_names / sizeof mask_names[0])

void fj_kernel_desc_init(fj_kernel_desc *k)
{
    memset(k, 0, sizeof *k);
    k->generator_version = FJ_GENERATOR_VERSION;
}

/* ---- name ------------------------------------------------------------------ */

static const char *template_name(uint32_t id)
{
    return id < TEMPLATE_COUNT ? template_names[id] : NULL;
}

static const char *dtype_name(uint32_t t)
{
    if (t == FJ_F16) return "f16";
    if (t == FJ_BF16) return "bf16";
    return NULL;
}

static const char *mask_name(uint32_t m) { return m < MASK_COUNT ? mask_names[m] : NULL; }

/* flash_wgmma counts its warps in warpgroups of 4 ('g'), the others in warps. */
static bool uses_warpgroups(const fj_kernel_desc *k)
{
    return k->template_id == FJ_TEMPLATE_FLASH_WGMMA;
}

static int tiles_text(const fj_kernel_desc *k, char *buf, size_t n)
{
    bool g = uses_warpgroups(k);
    return snprintf(buf, n, "m%un%u%c%us%u", (unsigned)k->block_m, (unsigned)k->block_n,
                    g ? 'g' : 'w', (unsigned)(g ? k->warps / 4 : k->warps), (unsigned)k->stages);
}

int fj_kernel_desc_name(const fj_kernel_desc *k, char *buf, size_t n)
{
    /* Out-of-range fields still print (as "template9", "dtype0") so that a
       bad descriptor is recognisable in the error that rejects it. */
    char tbuf[24], dbuf[24], mbuf[24];
    const char *t = template_name(k->template_id), *d = dtype_name(k->dtype),
               *m = mask_name(k->mask);
    if (!t) snprintf(tbuf, sizeof tbuf, "template%u", (unsigned)k->template_id), t = tbuf;
    if (!d) snprintf(dbuf, sizeof dbuf, "dtype%u", (unsigned)k->dtype), d = dbuf;
    if (!m) snprintf(mbuf, sizeof mbuf, "mask%u", (unsigned)k->mask), m = mbuf;
    char tiles[64];
    tiles_text(k, tiles, sizeof tiles);
    int len = snprintf(buf, n, "%s.d%u.%s.%s.%s%s.sm_%u", t, (unsigned)k->head_dim, d, m, tiles,
                       k->split_kv ? ".split" : "", (unsigned)k->arch);
    if (n > 0 && len < 0) buf[0] = '\0';
    return len;
}

/* ---- parse ----------------------------------------------------------------- */

/* A decimal number in canonical form (no sign, no leading zero, at most 6
 * digits) at *s; advances *s. Canonical so that name(parse(x)) == x. */
static bool parse_number(const char **s, uint32_t *v)
{
    const char *p = *s;
    if (*p < '0' || *p > '9') return false;
    if (*p == '0' && p[1] >= '0' && p[1] <= '9') return false;
    uint32_t x = 0;
    int digits = 0;
    while (*p >= '0' && *p <= '9') {
        if (++digits > 6) return false;
        x = x * 10 + (uint32_t)(*p++ - '0');
    }
    *v = x;
    *s = p;
    return true;
}

/* prefix followed by a canonical number and nothing else. */
static bool parse_prefixed(const char *part, const char *prefix, uint32_t *v)
{
    size_t n = strlen(prefix);
    if (strncmp(part, prefix, n)) return false;
    const char *p = part + n;
    return parse_number(&p, v) && *p == '\0';
}

/* m<M>n<N>w<W>s<S> or m<M>n<N>g<G>s<S>; *warpgroups tells which (warps is
 * then 4 * G). */
static bool parse_tiles(const char *part, fj_kernel_desc *k, bool *warpgroups)
{
    const char *p = part;
    uint32_t *fields[4] = {&k->block_m, &k->block_n, &k->warps, &k->stages};
    static const char letters[4] = {'m', 'n', 'w', 's'};
    *warpgroups = false;
    for (int i = 0; i < 4; i++) {
        char want = letters[i];
        if (i == 2 && *p == 'g') {
            want = 'g';
            *warpgroups = true;
        }
        if (*p++ != want || !parse_number(&p, fields[i])) return false;
    }
    if (*warpgroups) {
        if (k->warps > 64) return false;
        k->warps *= 4;
    }
    return *p == '\0';
}

static bool lookup(const char *const *names, size_t count, const char *s, uint32_t *v)
{
    for (size_t i = 0; i < count; i++)
        if (names[i] && !strcmp(names[i], s)) {
            *v = (uint32_t)i;
            return true;
        }
    return false;
}

static bool head_dim_ok(uint32_t d) { return d >= 8 && d <= FJ_MAX_HEAD_DIM && d % 8 == 0; }

fj_status fj_kernel_desc_parse(const char *name, fj_kernel_desc *k)
{
    if (!name) return fj_fail(FJ_ERR_INVALID_ARGUMENT, "kernel name is NULL");
    size_t len = strlen(name);
    if (len > NAME_MAX_LEN)
        return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                       "kernel name '%.40s...' is %zu characters long: the limit is %d", name, len,
                       NAME_MAX_LEN);
    char copy[NAME_MAX_LEN + 1];
    memcpy(copy, name, len + 1);

    /* Split at every dot (eight slots: a name with more parts is rejected by
       the count below, whatever the extra parts hold). */
    char *parts[8];
    int nparts = 0;
    for (char *p = copy;;) {
        if (nparts < 8) parts[nparts] = p;
        nparts++;
        char *dot = strchr(p, '.');
        if (!dot) break;
        *dot = '\0';
        p = dot + 1;
    }
    if (nparts != 6 && nparts != 7)
        return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                       "kernel name '%s': %d dot-separated parts; expected 6 or 7: " NAME_GRAMMAR,
                       name, nparts);

    fj_kernel_desc d;
    fj_kernel_desc_init(&d);
    if (!lookup(template_names, TEMPLATE_COUNT, parts[0], &d.template_id))
        return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                       "kernel name '%s': '%s' is not a template name (flash_fwd, flash_wgmma, combine)", name,
                       parts[0]);
    if (!parse_prefixed(parts[1], "d", &d.head_dim) || !head_dim_ok(d.head_dim))
        return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                       "kernel name '%s': '%s' is not d<head_dim> with head_dim a multiple of 8 "
                       "in 8..%d",
                       name, parts[1], FJ_MAX_HEAD_DIM);
    if (!strcmp(parts[2], "f16")) d.dtype = FJ_F16;
    else if (!strcmp(parts[2], "bf16")) d.dtype = FJ_BF16;
    else
        return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                       "kernel name '%s': '%s' is not a kernel dtype (f16, bf16)", name, parts[2]);
    if (!lookup(mask_names, MASK_COUNT, parts[3], &d.mask))
        return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                       "kernel name '%s': '%s' is not a mask kind (nomask, causal, window, "
                       "causal_window)",
                       name, parts[3]);
    bool warpgroups;
    if (!parse_tiles(parts[4], &d, &warpgroups))
        return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                       "kernel name '%s': '%s' is not m<block_m>n<block_n>w<warps>s<stages> or "
                       "m<block_m>n<block_n>g<warpgroups>s<stages>",
                       name, parts[4]);
    if (warpgroups != uses_warpgroups(&d))
        return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                       "kernel name '%s': %s kernels count warps as %s, not as in '%s'", name,
                       parts[0], uses_warpgroups(&d) ? "g<warpgroups>" : "w<warps>", parts[4]);
    if (nparts == 7) {
        if (strcmp(parts[5], "split"))
            return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                           "kernel name '%s': '%s' is not 'split', the only optional part", name,
                           parts[5]);
        d.split_kv = 1;
    }
    const char *arch = parts[nparts - 1];
    if (!parse_prefixed(arch, "sm_", &d.arch))
        return fj_fail(FJ_ERR_INVALID_ARGUMENT, "kernel name '%s': '%s' is not sm_<arch>", name,
                       arch);
    *k = d;
    return FJ_OK;
}

/* ---- rules ----------------------------------------------------------------- */

/* The opt-in maximum of dynamic shared memory per block
 * (cudaDevAttrMaxSharedMemoryPerBlockOptin) by SM version, from the CUDA
 * programming guide's table; used when no device is there to ask. */
static size_t arch_smem_optin_max(uint32_t arch)
{
    switch (arch) {
    case 80:
    case 87: return 166912; /* 163 KiB */
    case 86:
    case 89:
    case 120:
    case 121: return 101376; /* 99 KiB */
    default: return 232448;  /* 227 KiB: sm_90, sm_100 and unknown newer archs */
    }
}

static unsigned round_up(unsigned x, unsigned m) { return (x + m - 1) / m * m; }

size_t fj_kernel_desc_smem_bytes(const fj_kernel_desc *k)
{
    /* combine.cu reads the float partials straight from global memory. */
    if (k->template_id == FJ_TEMPLATE_COMBINE) return 0;
    /* flash_wgmma: unpadded swizzled rows, plus 1024 bytes to align the
       layout to the swizzle atom. */
    if (k->template_id == FJ_TEMPLATE_FLASH_WGMMA)
        return (size_t)(((uint64_t)k->block_m + 2ull * k->stages * k->block_n) * k->head_dim * 2u +
                        1024u);
    /* Q tile plus `stages` K and V tiles, each row padded by 8 elements
       (16 bytes) so ldmatrix reads of consecutive rows hit different banks. */
    uint64_t rows = (uint64_t)k->block_m + 2ull * k->stages * k->block_n;
    return (size_t)(rows * (round_up(k->head_dim, 16) + 8u) * 2u);
}

/* flash_wgmma's own rules (kernel_templates/flash_wgmma.cu), into why. */
static void wgmma_rules(const fj_kernel_desc *k, char *why, size_t n)
{
    if (k->arch != 90)
        snprintf(why, n,
                 "arch sm_%u: flash_wgmma needs sm_90 (wgmma exists there only; flash_fwd "
                 "runs everywhere)",
                 (unsigned)k->arch);
    else if (k->head_dim % 64)
        snprintf(why, n,
                 "head_dim %u is not a multiple of 64: flash_wgmma's rows are whole 128-byte "
                 "swizzle atoms (flash_fwd takes any multiple of 8)",
                 (unsigned)k->head_dim);
    else if (k->warps != 4 && k->warps != 8 && k->warps != 12)
        snprintf(why, n, "warps %u is not 4, 8 or 12 (flash_wgmma runs 1, 2 or 3 warpgroups of 4)",
                 (unsigned)k->warps);
    else if (k->block_m != 16 * k->warps)
        snprintf(why, n, "block_m %u is not 64 * warpgroups (%u): a warpgroup owns 64 query rows",
                 (unsigned)k->block_m, 16u * k->warps);
    else if (k->block_n != 64 && k->block_n != 128)
        snprintf(why, n, "block_n %u is not 64 or 128", (unsigned)k->block_n);
    else if (k->stages < 2 || k->stages > 4)
        snprintf(why, n, "stages %u is not in 2..4", (unsigned)k->stages);
    else if (k->split_kv > 1)
        snprintf(why, n, "split_kv %u is not 0 or 1", (unsigned)k->split_kv);
}

fj_status fj_kernel_desc_check(const fj_kernel_desc *k, size_t smem_limit)
{
    char name[160];
    fj_kernel_desc_name(k, name, sizeof name);
    /* Each rule names the field, its value and the rule. */
    char why[256];
    why[0] = '\0';
    if (k->generator_version != FJ_GENERATOR_VERSION)
        snprintf(why, sizeof why, "generator_version %u is not this generator's (%d)",
                 (unsigned)k->generator_version, FJ_GENERATOR_VERSION);
    else if (!template_name(k->template_id))
        snprintf(why, sizeof why,
                 "template_id %u is not a template (1 flash_fwd, 2 combine, 3 flash_wgmma)",
                 (unsigned)k->template_id);
    else if (!head_dim_ok(k->head_dim))
        snprintf(why, sizeof why, "head_dim %u is not a multiple of 8 in 8..%d",
                 (unsigned)k->head_dim, FJ_MAX_HEAD_DIM);
    else if (!dtype_name(k->dtype))
        snprintf(why, sizeof why, "dtype %u is not f16 or bf16", (unsigned)k->dtype);
    else if (!mask_name(k->mask))
        snprintf(why, sizeof why, "mask %u is not a mask kind (0..3)", (unsigned)k->mask);
    else if (uses_warpgroups(k))
        wgmma_rules(k, why, sizeof why);
    else if (k->warps != 1 && k->warps != 2 && k->warps != 4 && k->warps != 8)
        snprintf(why, sizeof why, "warps %u is not 1, 2, 4 or 8", (unsigned)k->warps);
    else if (k->block_m < 16 || k->block_m > 256 ||
             (k->block_m % (16 * k->warps) && k->block_m != 16))
        snprintf(why, sizeof why,
                 "block_m %u is neither 16 nor a multiple of 16 * warps (%u) in 16..256: each "
                 "warp owns whole 16-row MMA tiles (at block_m 16 the warps share out the keys)",
                 (unsigned)k->block_m, 16u * k->warps);
    else if (k->block_n < 16 || k->block_n > 256 || k->block_n % 16)
        snprintf(why, sizeof why, "block_n %u is not a multiple of 16 in 16..256",
                 (unsigned)k->block_n);
    else if (k->block_m == 16 && k->block_n % (16 * k->warps))
        snprintf(why, sizeof why,
                 "block_n %u is not a multiple of 16 * warps (%u): at block_m 16 the %u warps "
                 "share each key tile, 16 keys or a multiple each",
                 (unsigned)k->block_n, 16u * k->warps, (unsigned)k->warps);
    else if (k->stages < 1 || k->stages > 4)
        snprintf(why, sizeof why, "stages %u is not in 1..4", (unsigned)k->stages);
    else if (k->split_kv > 1)
        snprintf(why, sizeof why, "split_kv %u is not 0 or 1", (unsigned)k->split_kv);
    else if (k->arch < 80)
        snprintf(why, sizeof why,
                 "arch sm_%u is older than sm_80: the kernels use cp.async and bf16 mma.sync",
                 (unsigned)k->arch);
    if (!why[0]) {
        size_t limit = smem_limit ? smem_limit : arch_smem_optin_max(k->arch);
        size_t need = fj_kernel_desc_smem_bytes(k);
        if (need > limit)
            snprintf(why, sizeof why,
                     "needs %zu bytes of shared memory (%s), more than the %zu bytes %s", need,
                     uses_warpgroups(k)
                         ? "(block_m + 2 * stages * block_n) * head_dim * 2 + 1024"
                         : "(block_m + 2 * stages * block_n) * (head_dim rounded up to 16 + 8) * 2",
                     limit, smem_limit ? "allowed" : "the arch allows a block");
    }
    if (why[0]) return fj_fail(FJ_ERR_UNSUPPORTED, "kernel %s: %s", name, why);
    return FJ_OK;
}

/* ---- choice ---------------------------------------------------------------- */

/* Fits the arch's shared memory: first gives up pipelining depth (the tile
   shape sets the work per synchronisation, which matters more), then
   narrows the key tiles. m64n16s1 fits every arch at head dim 256. */
static void fit_arch_smem(fj_kernel_desc *k)
{
    size_t limit = arch_smem_optin_max(k->arch);
    while (fj_kernel_desc_smem_bytes(k) > limit && k->stages > 1) k->stages--;
    while (fj_kernel_desc_smem_bytes(k) > limit && k->block_n > 16) k->block_n /= 2;
}

/* On sm_90, head dims 64, 128 and 256 take flash_wgmma, two warpgroups of
   64 rows (m128). Measured on the H200 (B*S = 16384, both dtypes;
   docs/benchmarks.md, 2026-12-03, `flashjit tune` over 39 candidates):
   d64 m128n128g2s2 (347-372 TFLOP/s, +12% over flash_fwd's best), d128
   m128n128g2s3, whose third buffer lets the softmax overlap the previous
   tile's P V (380-417, +10-22%), d256 m128n64g2s2 (391-423; three buffers
   do not fit). d192 is a whole number of swizzle atoms too, but its
   flash_wgmma kernels have not yet run through the CUDA test grid, so it
   stays on flash_fwd until they have. */
static bool takes_wgmma(const fj_kernel_desc *k)
{
    return k->arch == 90 && (k->head_dim == 64 || k->head_dim == 128 || k->head_dim == 256);
}

void fj_kernel_desc_heuristic(fj_kernel_desc *k)
{
    if (fj_template_is_attention(k->template_id) && takes_wgmma(k)) {
        k->template_id = FJ_TEMPLATE_FLASH_WGMMA;
        k->block_m = 128;
        k->block_n = k->head_dim <= 128 ? 128 : 64;
        k->warps = 8;
        k->stages = k->head_dim == 128 ? 3 : 2;
        return;
    }
    if (k->template_id == FJ_TEMPLATE_FLASH_WGMMA) k->template_id = FJ_TEMPLATE_FLASH_FWD;
    /* Measured on the H200 (bf16, B*S = 16384, S = 4096; kernel_templates
       README): up to head dim 128, m128n64w4s2 (d64: 320 TFLOP/s against 317
       for n128; d128: 335 against 256 for m64n64); above it, eight warps of
       16 rows keep 256 accumulator columns in registers: m128n64w8s2 271
       against 213 for m64n64w4s2 at d256. */
    k->stages = 2;
    k->block_m = 128;
    k->block_n = 64;
    k->warps = k->head_dim <= 128 ? 4 : 8;
    fit_arch_smem(k);
}

/* Decode-like problems (at most 16 rows per head, after GQA packing) are
   bound by reading K and V; a 128-row tile would spend 8x the MMA work of
   the rows that exist and cap the rate near 2.5 TB/s. Small tiles read the
   same bytes with a fraction of the math: measured on the H200 (bf16 d128,
   split-KV, b64 h32 sk32768) 4.45 TB/s for m16n64w1s2 and m16n32w1s4 and
   4.32 for m32n64w2s2 against 2.60 for m128n64w4s2. One warp with 64-key
   tiles spills at d96 and d120 (its share of each tile load needs too many
   registers), two warps with 32-key tiles spill nowhere up to d128 but at
   d104 (an 8-byte stack frame in the split variant on sm_90; compile-all
   over every head dim, both dtypes, sm_80 and sm_90); there and above d128
   four warps of 16 rows each with 64-key tiles (m32 spills 16-96 bytes at
   d192-d256). At d64 and d128, where K and V rows are swizzled rather than
   padded (a whole number of 128-byte lines), one 16-row tile whose four
   warps share out each 128-key tile (m16n128w4s1) is what flashjit tune
   chose for the H200's table; over 7 rounds next to cuDNN it read the
   anchors' decode rows at 1.006-1.26x cuDNN (d128, both dtypes; d64
   0.98-1.24x), where m32n32w2s2 had read 0.60-0.97x in the first decode
   pass (docs/benchmarks.md, first and sixth decode passes). GPUs without a
   shipped table get it too (measured on none but the H200), but for d128
   only from sm_90: on sm_80 ptxas gives that kernel 168 registers and an
   8-byte stack frame (compile-all). */
static void decode_heuristic(fj_kernel_desc *k)
{
    k->template_id = FJ_TEMPLATE_FLASH_FWD;
    k->stages = 2;
    if (k->head_dim == 64 || (k->head_dim == 128 && k->arch >= 90)) {
        k->block_m = 16;
        k->block_n = 128;
        k->warps = 4;
        k->stages = 1;
    } else if (k->head_dim <= 128 && k->head_dim != 104) {
        k->block_m = 32;
        k->block_n = 32;
        k->warps = 2;
    } else {
        k->block_m = 64;
        k->block_n = 64;
        k->warps = 4;
    }
    fit_arch_smem(k);
}

fj_status fj_kernel_desc_for_problem(const fj_problem *p, uint32_t arch, fj_kernel_desc *k)
{
    fj_kernel_desc_init(k);
    if (p->dtype == FJ_F32)
        return fj_fail(FJ_ERR_UNSUPPORTED,
                       "the CUDA backend computes f16 and bf16; for f32 use the CPU backend "
                       "(FJ_BACKEND_CPU) or convert the tensors to bf16");
    if (p->dtype != FJ_F16 && p->dtype != FJ_BF16)
        return fj_fail(FJ_ERR_UNSUPPORTED, "dtype %d is not f16 or bf16", (int)p->dtype);
    if (p->head_dim < 1 || p->head_dim > FJ_MAX_HEAD_DIM)
        return fj_fail(FJ_ERR_UNSUPPORTED, "head_dim %d is not in 1..%d", p->head_dim,
                       FJ_MAX_HEAD_DIM);
    if (p->head_dim % 8) {
        /* The MMA tiles and the 16-byte loads work on 8 elements of a row. */
        int lo = p->head_dim / 8 * 8, hi = lo + 8;
        if (lo < 8)
            return fj_fail(FJ_ERR_UNSUPPORTED,
                           "head_dim %d: the CUDA backend needs a multiple of 8 in 8..%d; the "
                           "nearest supported head dim is %d (zero-pad q and k), or use the "
                           "CPU backend (FJ_BACKEND_CPU)",
                           p->head_dim, FJ_MAX_HEAD_DIM, hi);
        return fj_fail(FJ_ERR_UNSUPPORTED,
                       "head_dim %d: the CUDA backend needs a multiple of 8 in 8..%d; the "
                       "nearest supported head dims are %d and %d (zero-pad q and k), or use the "
                       "CPU backend (FJ_BACKEND_CPU)",
                       p->head_dim, FJ_MAX_HEAD_DIM, lo, hi);
    }
    /* The kernel sees the launch view: no-op mask dropped, GQA packed. */
    fj_problem packed;
    fj_launch_view(p, &packed);
    p = &packed;
    bool causal = p->causal != FJ_CAUSAL_NONE;
    bool window = p->window_left >= 0 || p->window_right >= 0;
    k->template_id = FJ_TEMPLATE_FLASH_FWD;
    k->head_dim = (uint32_t)p->head_dim;
    k->dtype = (uint32_t)p->dtype;
    k->mask = causal ? (window ? FJ_MASK_CAUSAL_WINDOW : FJ_MASK_CAUSAL)
                     : (window ? FJ_MASK_WINDOW : FJ_MASK_NONE);
    k->split_kv = 0;
    k->arch = arch;
    /* Masked problems keep the prefill tiles: with one 16-row MMA tile per
       warp the band code gets an 8-byte stack frame at some head dims (d56
       window and d104 causal on sm_80, d96 window on sm_90), which CI's
       zero-spill rule refuses. Decode with a causal mask that hides nothing
       is unmasked by now (fj_launch_view). */
    if (p->seqlen_q <= FJ_DECODE_MAX_ROWS && !causal && !window)
        decode_heuristic(k);
    else
        fj_kernel_desc_heuristic(k);
    return fj_kernel_desc_check(k, 0);
}

unsigned fj_kernel_desc_combine_warps(unsigned head_dim, int splits, long long rows, int sm_count)
{
    /* combine.cu keeps UNROLL splits' loads in flight per warp: 16 up to
       head dim 128, 8 above */
    const int per_warp =
        head_dim <= 128 ? FJ_COMBINE_SPLITS_PER_WARP : FJ_COMBINE_SPLITS_PER_WARP / 2;
    const bool all_resident = rows <= 2ll * sm_count;
    return splits <= per_warp && !all_resident ? 1u : FJ_COMBINE_WARPS;
}

void fj_kernel_desc_combine_for(const fj_kernel_desc *k, unsigned warps, fj_kernel_desc *c)
{
    *c = *k;
    c->template_id = FJ_TEMPLATE_COMBINE;
    c->split_kv = 1;
    c->mask = FJ_MASK_NONE;
    c->warps = warps;
    c->block_m = 16 * warps;
    c->block_n = 64;
    c->stages = 1;
}

/* ---- tiles alone (the tuning file's config field) ------------------------- */

const char *fj_kernel_desc_mask_name(uint32_t mask) { return mask_name(mask); }

int fj_kernel_desc_tiles_name(const fj_kernel_desc *k, char *buf, size_t n)
{
    return tiles_text(k, buf, n);
}

fj_status fj_kernel_desc_parse_tiles(const char *tiles, fj_kernel_desc *k)
{
    fj_kernel_desc t = *k;
    bool warpgroups;
    if (!tiles || !parse_tiles(tiles, &t, &warpgroups) ||
        (warpgroups && !fj_template_is_attention(t.template_id)))
        return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                       "tile configuration '%s' is not m<block_m>n<block_n>w<warps>s<stages> "
                       "(flash_fwd) or m<block_m>n<block_n>g<warpgroups>s<stages> (flash_wgmma)",
                       tiles ? tiles : "(null)");
    if (fj_template_is_attention(t.template_id))
        t.template_id = warpgroups ? FJ_TEMPLATE_FLASH_WGMMA : FJ_TEMPLATE_FLASH_FWD;
    *k = t;
    return FJ_OK;
}
