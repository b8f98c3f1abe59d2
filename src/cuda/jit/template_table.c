/* The template table (template_table.h): one row per kernel template, with
 * its rules, shared-memory formula and default tiles. Each heuristic note is
 * one line; the measurements behind it are in docs/benchmarks.md. */
#include "cuda/jit/template_table.h"

#include <stdio.h>
#include <string.h>

size_t fj_arch_smem_optin_max(uint32_t arch)
{
    /* cudaDevAttrMaxSharedMemoryPerBlockOptin, CUDA programming guide */
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

/* Fits the arch's shared memory: first gives up pipelining depth (the tile
   shape sets the work per synchronisation, which matters more), then
   narrows the key tiles. m64n16s1 fits every arch at head dim 256. */
static void fit_arch_smem(fj_tile_shape *t, size_t (*smem)(const fj_tile_shape *))
{
    size_t limit = fj_arch_smem_optin_max(t->arch);
    while (smem(t) > limit && t->stages > 1) t->stages--;
    while (smem(t) > limit && t->block_n > 16) t->block_n /= 2;
}

/* ---- flash_fwd: mma.sync, sm_80 and up ---------------------------------------- */

static size_t fwd_smem(const fj_tile_shape *t)
{
    /* Q tile plus `stages` K and V tiles, each row padded by 8 elements
       (16 bytes) so ldmatrix reads of consecutive rows hit different banks. */
    uint64_t rows = (uint64_t)t->block_m + 2ull * t->stages * t->block_n;
    return (size_t)(rows * (round_up(t->head_dim, 16) + 8u) * 2u);
}

static void fwd_rules(const fj_tile_shape *t, char *why, size_t n)
{
    if (t->warps != 1 && t->warps != 2 && t->warps != 4 && t->warps != 8)
        snprintf(why, n, "warps %u is not 1, 2, 4 or 8", (unsigned)t->warps);
    else if (t->block_m < 16 || t->block_m > 256 ||
             (t->block_m % (16 * t->warps) && t->block_m != 16))
        snprintf(why, n,
                 "block_m %u is neither 16 nor a multiple of 16 * warps (%u) in 16..256: each "
                 "warp owns whole 16-row MMA tiles (at block_m 16 the warps share out the keys)",
                 (unsigned)t->block_m, 16u * t->warps);
    else if (t->block_n < 16 || t->block_n > 256 || t->block_n % 16)
        snprintf(why, n, "block_n %u is not a multiple of 16 in 16..256", (unsigned)t->block_n);
    else if (t->block_m == 16 && t->block_n % (16 * t->warps))
        snprintf(why, n,
                 "block_n %u is not a multiple of 16 * warps (%u): at block_m 16 the %u warps "
                 "share each key tile, 16 keys or a multiple each",
                 (unsigned)t->block_n, 16u * t->warps, (unsigned)t->warps);
    else if (t->stages < 1 || t->stages > 4)
        snprintf(why, n, "stages %u is not in 1..4", (unsigned)t->stages);
}

/* Up to head dim 128 m128n64w4s2, above it eight warps of 16 rows keep 256
   accumulator columns in registers (m128n64w8s2); flash_fwd prefill,
   docs/benchmarks.md. */
static bool fwd_prefill_tiles(fj_tile_shape *t, fj_mask_kind mask)
{
    (void)mask;
    t->stages = 2;
    t->block_m = 128;
    t->block_n = 64;
    t->warps = t->head_dim <= 128 ? 4 : 8;
    fit_arch_smem(t, fwd_smem);
    return true;
}

/* Decode (at most FJ_DECODE_MAX_ROWS rows per head after GQA packing, no
   mask) is bound by reading K and V, so small tiles: m16n128w4s1 at d64 and
   d128 (sm_90 on: on sm_80 it gets an 8-byte stack frame at d128), two warps
   of 32-key tiles up to d128 but d104, four warps of 64 rows above
   (compile-all's zero-spill sweep draws these lines); docs/benchmarks.md,
   first and sixth decode passes. */
static void fwd_decode_tiles(fj_tile_shape *t)
{
    t->stages = 2;
    if (t->head_dim == 64 || (t->head_dim == 128 && t->arch >= 90)) {
        t->block_m = 16;
        t->block_n = 128;
        t->warps = 4;
        t->stages = 1;
    } else if (t->head_dim <= 128 && t->head_dim != 104) {
        t->block_m = 32;
        t->block_n = 32;
        t->warps = 2;
    } else {
        t->block_m = 64;
        t->block_n = 64;
        t->warps = 4;
    }
    fit_arch_smem(t, fwd_smem);
}

/* ---- flash_wgmma: warpgroup MMA with cp.async loads, sm_90 ------------------ */

static size_t wgmma_smem(const fj_tile_shape *t)
{
    /* unpadded swizzled rows, plus 1024 bytes to align the layout to the
       swizzle atom */
    return (size_t)(((uint64_t)t->block_m + 2ull * t->stages * t->block_n) * t->head_dim * 2u +
                    1024u);
}

static void wgmma_rules(const fj_tile_shape *t, char *why, size_t n)
{
    if (t->head_dim % 64)
        snprintf(why, n,
                 "head_dim %u is not a multiple of 64: flash_wgmma's rows are whole 128-byte "
                 "swizzle atoms (flash_fwd takes any multiple of 8)",
                 (unsigned)t->head_dim);
    else if (t->warps != 4 && t->warps != 8 && t->warps != 12)
        snprintf(why, n, "warps %u is not 4, 8 or 12 (flash_wgmma runs 1, 2 or 3 warpgroups of 4)",
                 (unsigned)t->warps);
    else if (t->block_m != 16 * t->warps)
        snprintf(why, n, "block_m %u is not 64 * warpgroups (%u): a warpgroup owns 64 query rows",
                 (unsigned)t->block_m, 16u * t->warps);
    else if (t->block_n != 64 && t->block_n != 128)
        snprintf(why, n, "block_n %u is not 64 or 128", (unsigned)t->block_n);
    else if (t->stages < 2 || t->stages > 4)
        snprintf(why, n, "stages %u is not in 2..4", (unsigned)t->stages);
}

/* Head dims 64, 128 and 256 on sm_90: two warpgroups of 64 rows; d128 keeps
   a third buffer so the softmax overlaps the previous tile's P V, d256 fits
   only two (flash_wgmma tuning, docs/benchmarks.md). */
static bool wgmma_prefill_tiles(fj_tile_shape *t, fj_mask_kind mask)
{
    (void)mask;
    if (t->arch != 90 || (t->head_dim != 64 && t->head_dim != 128 && t->head_dim != 256))
        return false;
    t->block_m = 128;
    t->block_n = t->head_dim <= 128 ? 128 : 64;
    t->warps = 8;
    t->stages = t->head_dim == 128 ? 3 : 2;
    return true;
}

/* ---- flash_tma: TMA loads, warp-specialized, persistent, sm_90 -------------- */

/* The shared layout of flash_tma.cu (the template static_asserts it agrees):
   the Q tile, an O staging tile when it fits, `stages` K and V tiles, each
   rounded up to 1024 bytes, the mbarriers, and 1024 bytes to align the base
   to the swizzle atom. */
static size_t tma_tile(uint32_t rows, uint32_t head_dim)
{
    return ((size_t)rows * head_dim * 2 + 1023) / 1024 * 1024;
}
#define TMA_SMEM_MAX 232448 /* sm_90's opt-in maximum; flash_tma.cu's SMEM_MAX */

static size_t tma_smem(const fj_tile_shape *t)
{
    size_t q = tma_tile(t->block_m, t->head_dim), kv = tma_tile(t->block_n, t->head_dim);
    size_t barriers = ((2 + 4 * (size_t)t->stages) * 8 + 127) / 128 * 128;
    size_t base = q + 2 * (size_t)t->stages * kv + barriers + 1024;
    return base + q <= TMA_SMEM_MAX ? base + q : base;
}

/* Accumulators a consumer thread holds (O, S and P) against what its
   registers after setmaxnreg leave for them: one consumer 208, two 200,
   three 128 (the rest: addresses, softmax state, loop; compile-all checks
   that nothing spills). */
static unsigned tma_accumulators(const fj_tile_shape *t)
{
    return t->head_dim / 2 + t->block_n / 2 + t->block_n / 4;
}

static void tma_rules(const fj_tile_shape *t, char *why, size_t n)
{
    unsigned consumers = t->warps >= 8 ? (t->warps - 4) / 4 : 0;
    static const unsigned budget[4] = {0, 208, 200, 128};
    if (t->head_dim % 16 || t->head_dim < 64 || t->head_dim > 256)
        snprintf(why, n,
                 "head_dim %u is not a multiple of 16 in 64..256 (flash_tma's column blocks are "
                 "64, 32 and 16 wide; flash_fwd takes any multiple of 8)",
                 (unsigned)t->head_dim);
    else if (t->warps % 4 || consumers < 1 || consumers > 3)
        snprintf(why, n,
                 "warps %u is not 8, 12 or 16 (flash_tma runs a producer warpgroup and 1..3 "
                 "consumer warpgroups)",
                 (unsigned)t->warps);
    else if (t->block_m != 64 * consumers)
        snprintf(why, n,
                 "block_m %u is not 64 * consumer warpgroups (%u): a consumer owns 64 query rows",
                 (unsigned)t->block_m, 64u * consumers);
    else if (t->block_n < 16 || t->block_n > 256 || t->block_n % 16)
        snprintf(why, n, "block_n %u is not a multiple of 16 in 16..256", (unsigned)t->block_n);
    else if (t->stages < 2 || t->stages > 4)
        snprintf(why, n, "stages %u is not in 2..4", (unsigned)t->stages);
    else if (t->split_kv) snprintf(why, n, "flash_tma has no split-KV variant");
    else if (tma_accumulators(t) > budget[consumers])
        snprintf(why, n,
                 "head_dim / 2 + 3 * block_n / 4 (%u accumulator registers a thread) is above "
                 "%u, what %u consumer warpgroup%s leave for them",
                 tma_accumulators(t), budget[consumers], consumers, consumers == 1 ? "" : "s");
}

/* Every multiple of 16 from 64 to 256 on sm_90: two consumers of 64 rows,
   three at d64 (the softmax of one then hides behind two others' GEMMs);
   key tiles as wide as the registers and shared memory allow (128 up to
   d160, 112 to d192, 80 above), two stages (flashjit tune on the H200,
   docs/benchmarks.md "Hopper prefill"). */
static bool tma_prefill_tiles(fj_tile_shape *t, fj_mask_kind mask)
{
    (void)mask;
    if (t->arch != 90 || t->head_dim % 16 || t->head_dim < 64) return false;
    const unsigned consumers = t->head_dim == 64 ? 3 : 2;
    t->block_m = 64 * consumers;
    t->warps = 4 * consumers + 4;
    t->block_n = t->head_dim <= 160 ? 128 : t->head_dim <= 192 ? 112 : 80;
    t->stages = 2;
    return true;
}

/* ---- combine: merges split-KV partials ---------------------------------------- */

/* reads the float partials straight from global memory */
static size_t combine_smem(const fj_tile_shape *t)
{
    (void)t;
    return 0;
}

static void combine_rules(const fj_tile_shape *t, char *why, size_t n)
{
    if (t->warps != 1 && t->warps != 2 && t->warps != 4 && t->warps != 8)
        snprintf(why, n, "warps %u is not 1, 2, 4 or 8", (unsigned)t->warps);
}

/* ---- merge: fj_merge's two partial results ---------------------------------------- */

/* no tiles and no shared memory: each thread merges its share of a row */
static size_t merge_smem(const fj_tile_shape *t)
{
    (void)t;
    return 0;
}

static void merge_rules(const fj_tile_shape *t, char *why, size_t n)
{
    if (t->head_dim || t->block_m || t->block_n || t->warps || t->stages || t->split_kv)
        snprintf(why, n, "merge kernels take no head dim, tiles or split (all must be 0)");
}

/* ---- the table ------------------------------------------------------------------- */

/* In the prefill heuristic's order of preference. */
static const fj_template_row rows[] = {
    {
        .id = FJ_TEMPLATE_FLASH_TMA,
        .name = "flash_tma",
        .file = "flash_tma.cu",
        .header = "wgmma.cuh",
        .entry = "fj_flash_tma",
        .attention = true,
        .unit_letter = 'c',
        .unit_name = "consumer warpgroups",
        .warps_per_unit = 4,
        .extra_warps = 4,
        .min_arch = 90,
        .max_arch = 90,
        .arch_why = "TMA, wgmma and setmaxnreg exist there only; flash_fwd runs everywhere",
        .arch_specific = true,
        .launch = FJ_LAUNCH_PERSISTENT_TMA,
        .no_seqs_why = "its tensor maps address dense [batch, seq, head] tensors, not packed "
                       "sequences or pages (flash_fwd takes them)",
        .smem_formula = "Q + O staging (when it fits) + 2 * stages * block_n rows, each tile "
                        "rounded up to 1024 bytes, + barriers + 1024",
        .smem_bytes = tma_smem,
        .rules = tma_rules,
        .prefill_tiles = tma_prefill_tiles,
    },
    {
        .id = FJ_TEMPLATE_FLASH_WGMMA,
        .name = "flash_wgmma",
        .file = "flash_wgmma.cu",
        .entry = "fj_flash_fwd",
        .attention = true,
        .unit_letter = 'g',
        .unit_name = "warpgroups",
        .warps_per_unit = 4,
        .min_arch = 90,
        .max_arch = 90,
        .arch_why = "wgmma exists there only; flash_fwd runs everywhere",
        .arch_specific = true,
        .launch = FJ_LAUNCH_TILE_GRID,
        .split_kv = true,
        .no_seqs_why = "its loads read dense [batch, seq, head] tensors, not packed sequences or "
                       "pages (flash_fwd takes them)",
        .smem_formula = "(block_m + 2 * stages * block_n) * head_dim * 2 + 1024",
        .smem_bytes = wgmma_smem,
        .rules = wgmma_rules,
        .prefill_tiles = wgmma_prefill_tiles,
    },
    {
        .id = FJ_TEMPLATE_FLASH_FWD,
        .name = "flash_fwd",
        .file = "flash_fwd.cu",
        .entry = "fj_flash_fwd",
        .attention = true,
        .unit_letter = 'w',
        .unit_name = "warps",
        .warps_per_unit = 1,
        .min_arch = 80,
        .arch_why = "the kernels use cp.async and bf16 mma.sync",
        .launch = FJ_LAUNCH_TILE_GRID,
        .split_kv = true,
        .varlen = true,
        .paged = true,
        .smem_formula = "(block_m + 2 * stages * block_n) * (head_dim rounded up to 16 + 8) * 2",
        .smem_bytes = fwd_smem,
        .rules = fwd_rules,
        .prefill_tiles = fwd_prefill_tiles,
        .decode_tiles = fwd_decode_tiles,
    },
    {
        .id = FJ_TEMPLATE_COMBINE,
        .name = "combine",
        .file = "combine.cu",
        .entry = "fj_combine",
        .unit_letter = 'w',
        .unit_name = "warps",
        .warps_per_unit = 1,
        .min_arch = 80,
        .arch_why = "the kernels use cp.async and bf16 mma.sync",
        .launch = FJ_LAUNCH_COMBINE_ROWS,
        .varlen = true,
        .no_seqs_why = "it merges partials of dense rows: a paged plan's combine kernel is the "
                       "dense one (its queries are not paged)",
        .smem_formula = "0",
        .smem_bytes = combine_smem,
        .rules = combine_rules,
    },
    {
        .id = FJ_TEMPLATE_MERGE,
        .name = "merge",
        .header = "merge_params.h",
        .file = "merge.cu",
        .entry = "fj_merge_rows",
        .dtype_only = true,
        .unit_letter = 'w',
        .unit_name = "warps",
        .warps_per_unit = 1,
        .min_arch = 80,
        .arch_why = "it converts to bf16 with cvt.rn.bf16.f32",
        .launch = FJ_LAUNCH_MERGE_ROWS,
        .smem_formula = "0",
        .smem_bytes = merge_smem,
        .rules = merge_rules,
    },
};
#define ROW_COUNT (int)(sizeof rows / sizeof rows[0])

const fj_template_row *fj_template_row_at(int i)
{
    return i >= 0 && i < ROW_COUNT ? &rows[i] : NULL;
}

const fj_template_row *fj_template_row_of(uint32_t id)
{
    for (int i = 0; i < ROW_COUNT; i++)
        if ((uint32_t)rows[i].id == id) return &rows[i];
    return NULL;
}

const fj_template_row *fj_template_row_named(const char *name)
{
    for (int i = 0; i < ROW_COUNT; i++)
        if (!strcmp(rows[i].name, name)) return &rows[i];
    return NULL;
}

const fj_template_row *fj_template_row_of_letter(char letter)
{
    for (int i = 0; i < ROW_COUNT; i++)
        if (rows[i].attention && rows[i].unit_letter == letter) return &rows[i];
    return NULL;
}

/* Rows sorted by id, attention templates first unless `numbered`. */
static int sorted_rows(const fj_template_row **out, bool attention_first)
{
    int n = 0;
    for (int pass = 0; pass < (attention_first ? 2 : 1); pass++)
        for (uint32_t id = 1; id <= 64; id++) {
            const fj_template_row *r = fj_template_row_of(id);
            if (r && (!attention_first || r->attention == (pass == 0))) out[n++] = r;
        }
    return n;
}

static void append(char *buf, size_t n, size_t *used, const char *fmt, const char *a, const char *b,
                   unsigned id)
{
    if (*used >= n) return;
    int w = id ? snprintf(buf + *used, n - *used, fmt, id, a)
               : snprintf(buf + *used, n - *used, fmt, a, b);
    if (w > 0) *used += (size_t)w;
}

const char *fj_template_names(char *buf, size_t n, bool numbered)
{
    const fj_template_row *sorted[ROW_COUNT];
    int count = sorted_rows(sorted, !numbered);
    size_t used = 0;
    if (n) buf[0] = '\0';
    for (int i = 0; i < count; i++) {
        if (i) append(buf, n, &used, "%s%s", ", ", "", 0);
        if (numbered) append(buf, n, &used, "%u %s", sorted[i]->name, "", (unsigned)sorted[i]->id);
        else append(buf, n, &used, "%s%s", sorted[i]->name, "", 0);
    }
    return buf;
}

const char *fj_template_tile_grammars(char *buf, size_t n)
{
    const fj_template_row *sorted[ROW_COUNT];
    int count = sorted_rows(sorted, true), attention = 0;
    for (int i = 0; i < count; i++) attention += sorted[i]->attention;
    size_t used = 0;
    if (n) buf[0] = '\0';
    for (int i = 0; i < attention; i++) {
        const fj_template_row *r = sorted[i];
        char unit[48];
        snprintf(unit, sizeof unit, "%c<%s>", r->unit_letter, r->unit_name);
        if (i) append(buf, n, &used, "%s%s", i + 1 == attention ? " or " : ", ", "", 0);
        append(buf, n, &used, "m<block_m>n<block_n>%ss<stages>", unit, "", 0);
        append(buf, n, &used, " (%s)%s", r->name, "", 0);
    }
    return buf;
}
