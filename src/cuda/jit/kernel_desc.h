/* The kernel descriptor: the one key for everything about a generated kernel.
 * A fixed-size struct of uint32 fields (no padding), zeroed before it is
 * filled, holding every field that changes the generated code. Its canonical
 * name, e.g. "flash_fwd.d128.bf16.causal.m128n64w4s2.sm_90" (with a softcap
 * "flash_fwd.d128.bf16.causal.softcap.m128n64w4s2.sm_90", with every score
 * modifier "...causal.softcap.alibi.sinks.m128n64w4s2.sm_90"; for
 * variable-length batches ".varlen", for a paged KV cache of 16-key pages
 * ".paged16", in that order after the modifiers' parts), appears
 * identically in logs, errors, cache file names, the tuning file, plan
 * describe and the CLI (`flashjit source NAME`). */
#ifndef FJ_KERNEL_DESC_H
#define FJ_KERNEL_DESC_H

#include <stddef.h>
#include <stdint.h>

#include "cuda/jit/template_table.h"
#include "flashjit.h"
#include "problem.h"

/* Bump when generated code changes for an unchanged descriptor (it is part
 * of the source, hence of every cache key). */
#define FJ_GENERATOR_VERSION 1

/* The largest head dim the CUDA templates take (a multiple of 8 up to it):
 * below FJ_MAX_HEAD_DIM, whose larger head dims only the CPU backends run. */
#define FJ_CUDA_MAX_HEAD_DIM 256
_Static_assert(FJ_CUDA_MAX_HEAD_DIM <= FJ_MAX_HEAD_DIM, "CUDA's head dims are the library's");

/* The templates that compute attention (the combine kernel only merges);
 * their tile strings tell them apart by the unit letter (template_table.h). */
static inline int fj_template_is_attention(uint32_t id)
{
    const fj_template_row *r = fj_template_row_of(id);
    return r && r->attention;
}

typedef struct fj_kernel_desc {
    uint32_t generator_version; /* FJ_GENERATOR_VERSION */
    uint32_t template_id;       /* fj_template_id */
    uint32_t head_dim;          /* exact: a multiple of 8, 8..FJ_CUDA_MAX_HEAD_DIM */
    uint32_t dtype;             /* fj_dtype: FJ_F16 or FJ_BF16 */
    uint32_t mask;              /* fj_mask_kind */
    uint32_t softcap;           /* 0/1: scores capped (the cap's value is a launch parameter) */
    uint32_t alibi;             /* 0/1: ALiBi's bias (the slopes are launch parameters) */
    uint32_t sinks;             /* 0/1: attention sinks joined (unsplit kernels, combine) */
    uint32_t block_m, block_n;  /* query rows per block, keys per tile */
    uint32_t warps;             /* warps per block, every role counted */
    uint32_t stages;            /* K/V tiles in flight */
    uint32_t split_kv;          /* 0/1: writes float partials for the combine kernel */
    uint32_t arch;              /* SM version: 80 for sm_80, 90 for sm_90 */
    uint32_t varlen;            /* 0/1: packed sequences placed by cu_seqlens (device memory) */
    uint32_t page_size;         /* 0: dense K and V; else keys per page of a paged cache, a
                                   multiple of FJ_CUDA_PAGE_MULTIPLE */
} fj_kernel_desc;

/* A paged cache's page size on CUDA is a multiple of this: a tile's rows
 * come 16 at a time from one page (and the page index of a key is then a
 * shift or a multiply by a constant). */
#define FJ_CUDA_PAGE_MULTIPLE 16
/* Static shared memory of a varlen or paged attention kernel (its
 * sequence and loop bounds, attention_rows.cuh's fj_seq_smem, as ptxas
 * rounds it up), counted against the block's shared-memory limit. */
#define FJ_CUDA_SEQS_STATIC_SMEM 128
/* The largest page size a kernel name spells (six digits). */
#define FJ_CUDA_PAGE_MAX 65536

/* Zeroes k and sets generator_version. */
void fj_kernel_desc_init(fj_kernel_desc *k);

/* The canonical name into buf (always NUL-terminated); returns its length. */
int fj_kernel_desc_name(const fj_kernel_desc *k, char *buf, size_t n);

/* Parses a canonical name back into a descriptor; FJ_ERR_INVALID_ARGUMENT
 * naming the part that does not parse. */
fj_status fj_kernel_desc_parse(const char *name, fj_kernel_desc *k);

/* Checks the descriptor against the common rules and its template's row
 * (arch range, tile shape, warps, stages, shared memory within smem_limit
 * bytes; 0: the arch's opt-in maximum). FJ_ERR_UNSUPPORTED naming the kernel
 * and the rule. */
fj_status fj_kernel_desc_check(const fj_kernel_desc *k, size_t smem_limit);

/* Dynamic shared memory the kernel's layout needs, in bytes: the template
 * static_asserts it agrees (FJ_SMEM_BYTES). */
size_t fj_kernel_desc_smem_bytes(const fj_kernel_desc *k);

/* Threads per block. */
static inline unsigned fj_kernel_desc_threads(const fj_kernel_desc *k) { return 32u * k->warps; }

/* Query rows per head at most (after GQA packing) for which the decode
 * tiles (one warp of 16 rows) are chosen over the prefill heuristic's. */
#define FJ_DECODE_MAX_ROWS 16

/* FJ_OK when some template computes p's dtype and head dim; else
 * FJ_ERR_UNSUPPORTED with what to do (f32, a head dim that is not a multiple
 * of 8). */
fj_status fj_kernel_desc_supports(const fj_problem *p);

/* Fills head dim, dtype, mask and arch for the problem as the kernel sees it
 * (view: the launch view, launch_view.h, of a problem fj_kernel_desc_supports
 * accepted), and the built-in heuristic's template and tiles: decode tiles
 * for at most FJ_DECODE_MAX_ROWS rows without a mask, else
 * fj_kernel_desc_heuristic's. */
void fj_kernel_desc_default(const fj_problem *view, uint32_t arch, fj_kernel_desc *k);

/* For a plan's describe: when the heuristic's tiles for view (a problem
 * with a softcap, ALiBi or sinks) break a modifier's rule (flash_tma's
 * tiles that would spill) so that fj_kernel_desc_default took the next
 * template's, writes the refused kernel's check error into why and returns
 * true; else false (why untouched). */
bool fj_kernel_desc_modifier_fallback(const fj_problem *view, uint32_t arch, char *why, size_t n);

/* Whether a kernel of a template without split-KV variants keeps a device of
 * sm_count SMs busy on the launch view p: at least half as many work tiles
 * (query tiles x heads x batch) as SMs. Without that, a template that can
 * split the keys does better (few query rows over many keys). Always true
 * for templates with split-KV variants. */
bool fj_kernel_desc_fills_device(const fj_kernel_desc *k, const fj_problem *view, int sm_count);

/* fj_kernel_desc_default for a device of sm_count SMs: the heuristic's
 * template unless it does not fill the device (above), then the next one. */
void fj_kernel_desc_for_device(const fj_problem *view, uint32_t arch, int sm_count,
                               fj_kernel_desc *k);

/* The two above for a user's problem (through its launch view), then
 * fj_kernel_desc_check against the arch's shared-memory maximum: what the
 * library runs for p on that arch without a tuning file (the tools' and
 * tests' way in). */
fj_status fj_kernel_desc_for_problem(const fj_problem *p, uint32_t arch, fj_kernel_desc *k);

/* The tiles alone, "m128n64w4s2" or "m128n128g2s2" (the tuning file's config
 * field), and back: parse sets block_m, block_n, warps and stages and, when k
 * is an attention kernel, the template its unit letter names (template
 * rows); FJ_ERR_INVALID_ARGUMENT naming the text when it does not parse (the
 * rules are fj_kernel_desc_check's). */
int fj_kernel_desc_tiles_name(const fj_kernel_desc *k, char *buf, size_t n);
fj_status fj_kernel_desc_parse_tiles(const char *tiles, fj_kernel_desc *k);

/* Warps of the split-KV combine kernel's block, which merges one query row:
   the warps share out its splits. When there are more rows than two blocks of
   8 warps per SM would hold at once (8 warps with 16 splits' loads in flight
   take 122 registers a thread at d128: 2 blocks per SM), and a row has at
   most FJ_COMBINE_SPLITS_PER_WARP splits (8 above head dim 128), a row gets
   one warp instead, which issues all of its loads at once (combine.cu's
   UNROLL); the combine rows of docs/benchmarks.md, "GPU decode, third pass". */
#define FJ_COMBINE_WARPS 8
#define FJ_COMBINE_SPLITS_PER_WARP 16

/* The combine kernel's warps for `rows` query rows of `splits` splits each at
   this head dim, on a device of sm_count SMs: 1 or FJ_COMBINE_WARPS. */
unsigned fj_kernel_desc_combine_warps(unsigned head_dim, int splits, long long rows, int sm_count);

/* The combine kernel for the split-KV kernel k, with `warps` warps (1 or
 * FJ_COMBINE_WARPS, from fj_kernel_desc_combine_warps): same head dim, dtype
 * and arch; the mask is "nomask" (the combine ignores it) and the tiles are
 * fixed but for the warps, so two combine kernels serve every tile
 * configuration and mask. */
void fj_kernel_desc_combine_for(const fj_kernel_desc *k, unsigned warps, fj_kernel_desc *combine);

/* The split-KV variant of the unsplit kernel k: k with split_kv 1 and no
 * sinks (its partials leave the sink to the combine kernel, which
 * fj_kernel_desc_combine_for makes from k with k's sinks). */
void fj_kernel_desc_split_of(const fj_kernel_desc *k, fj_kernel_desc *split);

/* Sets the prefill heuristic's template and tiles (block_m, block_n, warps,
 * stages) for the descriptor's head dim, arch and mask: the first template
 * row whose prefill_tiles takes it. */
void fj_kernel_desc_heuristic(fj_kernel_desc *k);

/* The same with one template left out (0: none), for a problem that
 * template's rules accept but its launch cannot take (a layout the copy
 * engine cannot address). */
void fj_kernel_desc_heuristic_excluding(fj_kernel_desc *k, uint32_t excluded);

#endif
