/* The kernel templates, one row each: what the host knows about a template
 * (kernel_templates/<file>) is here and nowhere else: its name in kernel
 * names, its file and entry point, how its tile string counts warps, the
 * archs it compiles for, its launch shape, its shared-memory formula, its
 * rules, and the heuristic that picks its tiles. Adding a template is adding
 * a row (and its file to kernel_templates/meson.build).
 *
 * The rows see a descriptor's tile fields through fj_tile_shape, so this
 * file depends on nothing of the descriptor's own code (kernel_desc.c reads
 * the rows). */
#ifndef FJ_TEMPLATE_TABLE_H
#define FJ_TEMPLATE_TABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "problem.h"

/* The template field of a kernel descriptor (values are part of cache
 * keys' source text only through names, but keep them stable anyway). */
typedef enum fj_template_id {
    FJ_TEMPLATE_FLASH_FWD = 1,   /* mma.sync, every arch from sm_80 */
    FJ_TEMPLATE_COMBINE = 2,     /* split-KV merge */
    FJ_TEMPLATE_FLASH_WGMMA = 3, /* warpgroup MMA, cp.async loads (sm_90) */
    FJ_TEMPLATE_FLASH_TMA = 4,   /* warp-specialized TMA + wgmma, persistent (sm_90) */
    FJ_TEMPLATE_MERGE = 5,       /* fj_merge: two partial results, any head dim */
} fj_template_id;

/* How the backend launches a template's kernel. */
typedef enum fj_launch_kind {
    /* one block per (query tile, head, batch x split); fj_fwd_params */
    FJ_LAUNCH_TILE_GRID,
    /* one block per query row of the split-KV partials; fj_fwd_params */
    FJ_LAUNCH_COMBINE_ROWS,
    /* a persistent grid of at most one block per SM walking the tiles;
       fj_fwd_params followed by the TMA descriptors of fj_tma_params */
    FJ_LAUNCH_PERSISTENT_TMA,
    /* fj_merge's rows, several per block; fj_merge_params (merge_params.h) */
    FJ_LAUNCH_MERGE_ROWS,
} fj_launch_kind;

/* The descriptor fields a row's rules and formulas read. */
typedef struct fj_tile_shape {
    uint32_t head_dim, block_m, block_n, warps, stages, split_kv, arch;
} fj_tile_shape;

typedef struct fj_template_row {
    fj_template_id id;
    const char *name;   /* in kernel names: "flash_fwd" */
    const char *file;   /* kernel_templates/ file pasted last */
    const char *header; /* a kernel_templates/ header pasted before it, or NULL */
    const char *entry;  /* its __global__ function */
    bool attention;     /* computes attention (the combine kernel only merges) */
    /* Specialized on the dtype alone (f32 included; any head dim, no tiles,
       no mask): its descriptor has only template, dtype and arch set, its
       name is "<name>.<dtype>.sm_<arch>", and its source is its header and
       file only (not fwd_params.h and common.cuh). */
    bool dtype_only;
    /* The tile string "m<M>n<N><letter><units>s<S>": warps = units *
       warps_per_unit + extra_warps. */
    char unit_letter;      /* 'w' warps, 'g' warpgroups, 'c' consumer warpgroups */
    const char *unit_name; /* "warps", for messages */
    unsigned warps_per_unit;
    unsigned extra_warps;        /* warps that are no unit: the producer warpgroup */
    uint32_t min_arch, max_arch; /* SM versions it compiles for (0: no upper bound) */
    const char *arch_why;        /* why the range, for messages */
    bool arch_specific;          /* compiled for "sm_90a" (wgmma, setmaxnreg) */
    fj_launch_kind launch;
    bool split_kv; /* has a split-KV variant (split_kv = 1 descriptors) */
    /* Takes variable-length batches (varlen = 1 descriptors: lengths and
       offsets read from device memory) and a paged KV cache (page_size > 0:
       K and V through a block table); when it takes neither, no_seqs_why
       says why, for the message that refuses such a descriptor. */
    bool varlen, paged;
    const char *no_seqs_why;
    const char *smem_formula; /* the formula, for messages */
    size_t (*smem_bytes)(const fj_tile_shape *t);
    /* The first of the template's own rules t breaks, into why (left empty
       when t follows them all). */
    void (*rules)(const fj_tile_shape *t, char *why, size_t n);
    /* The prefill heuristic's tiles for t's head dim, arch and mask, or
       false when this template does not take such a problem by default
       (NULL: never). Rows are asked in table order. */
    bool (*prefill_tiles)(fj_tile_shape *t, fj_mask_kind mask);
    /* The decode heuristic's tiles (few query rows, no mask); the first row
       that has one decodes (NULL: none). */
    void (*decode_tiles)(fj_tile_shape *t);
} fj_template_row;

/* The row of a template id, or NULL. */
const fj_template_row *fj_template_row_of(uint32_t id);

/* The row of a name ("flash_fwd"), or NULL. */
const fj_template_row *fj_template_row_named(const char *name);

/* The attention template whose tile strings use this letter, or NULL. */
const fj_template_row *fj_template_row_of_letter(char letter);

/* Rows in table order (the prefill heuristic's order of preference); NULL
 * past the last. */
const fj_template_row *fj_template_row_at(int i);

/* Every row's name, attention templates first, each group by id
 * ("flash_fwd, flash_wgmma, combine"), into buf; with ids when numbered
 * ("1 flash_fwd, 2 combine, 3 flash_wgmma", by id). For messages. */
const char *fj_template_names(char *buf, size_t n, bool numbered);

/* The attention templates' tile grammars, "m<block_m>n<block_n>w<warps>s<stages>
 * (flash_fwd) or ...", into buf, for messages. */
const char *fj_template_tile_grammars(char *buf, size_t n);

/* The opt-in maximum of dynamic shared memory per block by SM version, for
 * when no device is there to ask. */
size_t fj_arch_smem_optin_max(uint32_t arch);

#endif
