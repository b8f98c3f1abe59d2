/* CUDA plans: choosing the kernel for a problem, checking that the kernel
 * can take the problem's layout and grid, and launching it. Every decision
 * and every string is made at plan time; execute checks the pointers' alignment,
 * copies the prepared parameters, and launches. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_plan.h"
#include "cuda/device.h"
#include "cuda/module_cache.h"
#include "cuda/tma_launch.h"
#include "cuda/jit/launch_view.h"
#include "cuda/jit/kernel_desc.h"
#include "log.h"
#include "sequences.h"
#include "status.h"
#include "tune/tuning.h"
/* The launch parameters: one definition shared with the generated source. */
#include "../../kernel_templates/fwd_params.h"

/* The kernel moves q, k, v and o in 16-byte vectors (cp.async, ldmatrix,
 * vector stores): row starts must be 16-byte aligned, so strides must be
 * multiples of 8 two-byte elements and base pointers 16-byte aligned. */
#define ROW_ALIGN_BYTES 16
#define ROW_ALIGN_ELEMS 8

/* gridDim.y and gridDim.z limit. */
#define GRID_YZ_MAX 65535

#define LOG2E 1.4426950408889634

/* Split-KV (flash-decoding): when the grid of one block per (query tile,
 * head, batch) would leave the SMs idle, the keys of each row are split over
 * num_splits blocks that write float partials, and a combine kernel merges
 * them with their lse weights. The split count minimises a simple model of
 * the kernel's time: waves of resident blocks times the work of one block,
 * its key tiles plus SPLIT_FIXED_TILES of fixed cost (Q load, pipeline fill,
 * partials), so a count that leaves a nearly empty last wave loses to one
 * that fills whole waves. A decode split keeps at least SPLIT_MIN_KEYS keys
 * (and one key tile), so 64-key tiles split as finely as 32-key ones (H200,
 * b1 h32/8 sk4096 with m16n64w2s2: 32 splits instead of 16, +12 %); other
 * splits keep SPLIT_MIN_TILES key tiles; the partials workspace stays within
 * SPLIT_MAX_WORKSPACE bytes. (The first rule, "fill two waves", gave 9
 * splits for 64 blocks in 264 slots: three waves, the last 18 % full.) */
#define SPLIT_FIXED_TILES 2
#define SPLIT_MIN_TILES 4
#define SPLIT_MIN_KEYS 128
/* 256 was tried for batch-1 GQA decode when the combine kernel walked the
   splits one at a time, and was slower; not retried since. */
#define SPLIT_MAX 128
#define SPLIT_MAX_WORKSPACE ((size_t)256 << 20)

typedef struct cuda_plan {
    const fj_cuda_state *cuda;
    const fj_cuda_kernel *kernel;
    const fj_cuda_kernel *combine; /* split-KV only */
    unsigned grid[3];
    unsigned combine_grid[3];
    unsigned threads;
    unsigned combine_threads;
    unsigned smem;
    int num_splits;
    int splits_forced;     /* FLASHJIT_CUDA_SPLITS, else 0 */
    int gqa_packed;        /* query heads per block row when GQA-packed (fj_launch_view), else 0 */
    CUdeviceptr partials;  /* o_partial then lse_partial (split-KV only) */
    bool combine_pdl;      /* launch the combine kernel as a programmatic dependent */
    fj_launch_kind launch; /* the kernel's template's launch shape */
    fj_tma_layout tma;     /* FJ_LAUNCH_PERSISTENT_TMA: tensor map layout, schedule */
    CUdeviceptr tile_counter; /* ... and its work tile counter (fj_tma_params) */
    fj_fwd_params params;     /* all but the tensors, which each execute sets */
    char launch_what[160];    /* "cuLaunchKernel(<kernel name>)" for a failed launch */
    fj_tiles_source tiles_from;
    char why[512]; /* where the tiles came from */
    /* FJ_FEATURE_VARLEN / FJ_FEATURE_PAGED_KV: the problem (for the
       FLASHJIT_CHECK=1 checks) and whether they run */
    fj_problem problem;
    bool seqs, check;
} cuda_plan;

static fj_status check_strides(const fj_problem *p)
{
    static const char *const axis[3] = {"batch", "seq", "head"};
    const struct {
        const char *name;
        const int64_t *stride;
    } t[4] = {{"q", p->q_stride}, {"k", p->k_stride}, {"v", p->v_stride}, {"o", p->o_stride}};
    for (int i = 0; i < 4; i++)
        for (int a = 0; a < 3; a++)
            if (t[i].stride[a] % ROW_ALIGN_ELEMS)
                return fj_fail(FJ_ERR_UNSUPPORTED,
                               "cuda: %s_stride[%d] (the %s axis, %lld elements) is not a multiple "
                               "of %d: the CUDA kernel moves %d-byte rows, so every stride of q, "
                               "k, v and o must be a multiple of %d elements (use the CPU backend "
                               "for this layout)",
                               t[i].name, a, axis[a], (long long)t[i].stride[a], ROW_ALIGN_ELEMS,
                               ROW_ALIGN_BYTES, ROW_ALIGN_ELEMS);
    return FJ_OK;
}

/* The grid has one block row per query head of the launch view and one
   block layer per batch (times splits). */
static fj_status check_grid(const fj_problem *view)
{
    if (view->heads_q > GRID_YZ_MAX)
        return fj_fail(FJ_ERR_UNSUPPORTED,
                       "cuda: heads_q (%d) is above %d, the CUDA grid's y limit (one block row "
                       "per query head)",
                       view->heads_q, GRID_YZ_MAX);
    if (view->batch > GRID_YZ_MAX)
        return fj_fail(FJ_ERR_UNSUPPORTED, "cuda: batch (%d) is above %d, the CUDA grid's z limit",
                       view->batch, GRID_YZ_MAX);
    return FJ_OK;
}

/* Whether the environment variable is set to something other than "" or
   "0" (FLASHJIT_CHECK). */
static bool env_flag(const char *name)
{
    const char *env = getenv(name);
    return env && *env && strcmp(env, "0") != 0;
}

fj_status fj_cuda_supports(const fj_context *ctx, const fj_problem *p)
{
    (void)ctx;
    fj_status st;
    /* variable-length batches and paged caches run on flash_fwd's (and its
       split and combine kernels') varlen and paged variants; the page
       size's rule, and ALiBi or sinks with them, are
       fj_kernel_desc_supports's. */
    if ((st = fj_kernel_desc_supports(p)) || (st = check_strides(p))) return st;
    fj_problem view;
    fj_launch_view(p, &view);
    if ((st = check_grid(&view))) return st;
    /* ALiBi may run unpacked (fj_launch_view_takes) */
    if (!p->alibi) return FJ_OK;
    fj_launch_view_unpacked(p, &view);
    return check_grid(&view);
}

static void fill_params(fj_fwd_params *prm, const fj_problem *p, int num_splits)
{
    memset(prm, 0, sizeof *prm);
    for (int a = 0; a < 3; a++) {
        prm->q_stride[a] = p->q_stride[a];
        prm->k_stride[a] = p->k_stride[a];
        prm->v_stride[a] = p->v_stride[a];
        prm->o_stride[a] = p->o_stride[a];
    }
    prm->diag_offset = p->diag_offset;
    prm->batch = p->batch;
    prm->heads_q = p->heads_q;
    prm->heads_kv = p->heads_kv;
    prm->group = p->group;
    prm->seqlen_q = p->seqlen_q;
    prm->seqlen_k = p->seqlen_k;
    prm->window_left = p->window_left;
    prm->window_right = p->window_right;
    prm->num_splits = num_splits;
    prm->scale_log2 = (float)((double)p->scale * LOG2E);
    if (p->softcap > 0.0f) { /* finite: fj_problem_init's rule */
        prm->softcap_in = (float)(2.0 * LOG2E * (double)p->scale / p->softcap);
        prm->softcap_log2 = (float)(LOG2E * p->softcap);
    }
    if (p->varlen || p->paged) {
        /* each sequence aligns its band with its own lengths: bottom-right
           (and no mask, whose windows align the same way) at sk - sq,
           top-left at 0 (diag_offset) */
        prm->diag_per_seq = p->causal != FJ_CAUSAL_TOP_LEFT;
        if (!prm->diag_per_seq) prm->diag_offset = 0;
    }
    if (p->paged) {
        prm->bt_stride = p->bt_stride;
        prm->num_pages = p->num_pages;
        const int64_t table = (int64_t)p->max_pages * p->page_size;
        prm->table_keys = table < p->seqlen_k ? (int)table : p->seqlen_k;
    }
}

/* Whether the loaded kernel can be launched with the plan's block at all. */
static fj_status check_resources(const cuda_plan *cp, int *blocks_per_sm)
{
    const fj_cuda_kernel *kn = cp->kernel;
    const fj_cuda_api *api = cp->cuda->api;
    if ((int)cp->threads > kn->max_threads)
        return fj_fail(FJ_ERR_UNSUPPORTED,
                       "cuda: kernel %s uses %d registers per thread, so it launches with at "
                       "most %d threads per block, and its tiles need %u",
                       kn->name, kn->num_regs, kn->max_threads, cp->threads);
    fj_status st = fj_cuda_push(cp->cuda);
    if (st) return st;
    CUresult r = api->cuOccupancyMaxActiveBlocksPerMultiprocessor(blocks_per_sm, kn->function,
                                                                  (int)cp->threads, cp->smem);
    fj_cuda_pop(cp->cuda);
    if (r != FJ_CUDA_SUCCESS) {
        st = fj_cuda_fail(api, r, "cuOccupancyMaxActiveBlocksPerMultiprocessor");
        return fj_fail_prefix(st, "kernel %s", kn->name);
    }
    if (*blocks_per_sm < 1)
        return fj_fail(FJ_ERR_UNSUPPORTED,
                       "cuda: kernel %s does not fit on an SM of this device (%u threads x %d "
                       "registers, %u + %d bytes of shared memory)",
                       kn->name, cp->threads, kn->num_regs, cp->smem, kn->static_smem);
    return FJ_OK;
}

static void describe_plan(const cuda_plan *cp, bool loaded_before, int blocks_per_sm, fj_strbuf *d)
{
    const fj_cuda_kernel *kn = cp->kernel;
    const fj_kernel_desc *k = &kn->desc;
    const fj_cuda_state *s = cp->cuda;
    fj_strbuf_printf(d, "backend: cuda (device %d: %s, sm_%d)\n", s->ordinal, s->name, s->arch);
    fj_strbuf_printf(d, "kernel: %s\n", kn->name);
    fj_strbuf_printf(d, "why: %s\n", cp->why);
    fj_strbuf_printf(d, "tiles: block_m %u, block_n %u, %u warps, %u stages\n", k->block_m,
                     k->block_n, k->warps, k->stages);
    fj_strbuf_printf(d,
                     "launch: grid %u x %u x %u, block %u threads, %u bytes dynamic shared "
                     "memory%s\n",
                     cp->grid[0], cp->grid[1], cp->grid[2], cp->threads, cp->smem,
                     kn->dyn_smem_raised ? " (opted in above 48 KiB)" : "");
    fj_strbuf_printf(d,
                     "resources: %d registers per thread, %d bytes local memory per thread, %d "
                     "bytes static shared memory; %d block%s per SM\n",
                     kn->num_regs, kn->local_bytes, kn->static_smem, blocks_per_sm,
                     blocks_per_sm == 1 ? "" : "s");
    if (cp->launch == FJ_LAUNCH_PERSISTENT_TMA)
        fj_strbuf_printf(d,
                         "schedule: %d work tiles (%d query tiles of each head and batch%s) on a "
                         "persistent grid of %u blocks, %d (head, batch) pairs side by side; "
                         "each block takes the next tile from a counter in device memory of the "
                         "plan's own, so executes of this plan on different streams must not "
                         "overlap; tensor maps encoded at each execute\n",
                         cp->tma.tiles, cp->tma.m_blocks,
                         k->mask == FJ_MASK_CAUSAL || k->mask == FJ_MASK_CAUSAL_WINDOW
                             ? ", the longest first"
                             : "",
                         cp->grid[0], cp->tma.head_group);
    if (cp->gqa_packed)
        fj_strbuf_printf(d,
                         "GQA packing: the %d query heads of each kv head are the rows of one "
                         "query tile (%d rows per kv head), so K and V are read once per kv head\n",
                         cp->gqa_packed, cp->params.seqlen_q);
    if (cp->num_splits > 1) {
        char split_why[96];
        if (cp->splits_forced)
            snprintf(split_why, sizeof split_why, "FLASHJIT_CUDA_SPLITS=%d", cp->splits_forced);
        else
            snprintf(split_why, sizeof split_why, "%u blocks alone would not fill %d SMs",
                     cp->grid[0] * cp->grid[1] * (cp->grid[2] / cp->num_splits), s->sm_count);
        fj_strbuf_printf(d,
                         "split-KV: %d splits of the keys (%s), then %s%s; a %zu-byte partials "
                         "workspace of the plan's own, so executes of this plan on different "
                         "streams must not overlap\n",
                         cp->num_splits, split_why, cp->combine->name,
                         cp->combine_pdl ? " (a programmatic dependent launch)" : "",
                         (size_t)cp->params.batch * cp->params.heads_q * cp->params.seqlen_q *
                             cp->num_splits * (k->head_dim + 1) * sizeof(float));
    }
    if (cp->seqs)
        fj_strbuf_printf(d,
                         "sequences: %s%s%s; the grid covers the longest (seqlen_q %d, seqlen_k "
                         "%d), each block reads its sequence's lengths%s from device memory at "
                         "run time (nothing on the host depends on them: a captured graph "
                         "replays for any lengths)%s\n",
                         cp->problem.varlen ? "variable-length batch (cu_seqlens_q" : "",
                         cp->problem.varlen ? (cp->problem.paged ? ")" : ", cu_seqlens_k)") : "",
                         cp->problem.paged
                             ? (cp->problem.varlen ? " over a paged KV cache" : "paged KV cache")
                             : "",
                         cp->problem.seqlen_q, cp->problem.seqlen_k,
                         cp->problem.paged ? " and block table" : "",
                         cp->check ? "; FLASHJIT_CHECK=1: each execute copies them back and "
                                     "checks them first"
                                   : "");
    if (loaded_before)
        fj_strbuf_printf(d, "image: %s %s, already loaded in this context\n",
                         kn->is_ptx ? "PTX" : "cubin", kn->target);
    else if (kn->from_disk_cache)
        fj_strbuf_printf(d, "image: %s %s, from the disk cache\n", kn->is_ptx ? "PTX" : "cubin",
                         kn->target);
    else
        fj_strbuf_printf(d, "image: %s %s, compiled by NVRTC in %.2f s\n",
                         kn->is_ptx ? "PTX" : "cubin", kn->target, kn->compile_seconds);
}

/* The tiles: the given config, else the tuning entry for the point (the
 * user's file, then the shipped table) when it passes the template's rules
 * on this device, else the heuristic fj_kernel_desc_for_problem chose. The
 * descriptor that comes out is checked against this device, once. */
static fj_status choose_tiles(const fj_context *ctx, const fj_problem *p, const char *config,
                              fj_kernel_desc *k, fj_tiles_source *from, char *why, size_t n)
{
    const fj_cuda_state *s = ctx->backend_state;
    const size_t smem = (size_t)s->smem_optin;
    if (config) {
        fj_status st = fj_kernel_desc_parse_tiles(config, k);
        if (st) return fj_fail_prefix(st, "cuda");
        snprintf(why, n, "given configuration %s", config);
        *from = FJ_TILES_GIVEN;
        return fj_kernel_desc_check(k, smem);
    }
    char arch[16];
    snprintf(arch, sizeof arch, "sm_%d", s->arch);
    fj_tuning_entry key;
    fj_tuning_key_for(p, s->name, arch, "flash_fwd", &key);
    const fj_tuning_entry *e = fj_tuning_find(ctx, &key, from);
    fj_kernel_desc tuned = *k;
    if (e && fj_kernel_desc_parse_tiles(e->config, &tuned) == FJ_OK &&
        fj_kernel_desc_check(&tuned, smem) == FJ_OK) {
        *k = tuned;
        snprintf(why, n, "tuned: %s entry for %s %s %s (%.4g ms, %s)", fj_tuning_source_text(*from),
                 key.device, key.arch, key.point, e->ms, e->date);
        return FJ_OK;
    }
    fj_clear_error();
    if (e)
        snprintf(why, n, "heuristic for d%u on sm_%u (%s entry '%s' is unusable here)", k->head_dim,
                 k->arch, fj_tuning_source_text(*from), e->config);
    else
        snprintf(why, n, "heuristic for d%u on sm_%u (no tuning entry for %s %s %s)", k->head_dim,
                 k->arch, key.device, key.arch, key.point);
    *from = FJ_TILES_HEURISTIC;
    return fj_kernel_desc_check(k, smem);
}

/* A whole number in lo..hi from the environment variable `name`, in *out;
   0 when it is unset or empty; anything else fails naming the variable. */
static fj_status env_whole_number(const char *name, long lo, long hi, int *out)
{
    *out = 0;
    const char *env = getenv(name);
    if (!env || !*env) return FJ_OK;
    char *end;
    errno = 0;
    long n = strtol(env, &end, 10);
    if (errno || *end || end == env || n < lo || n > hi)
        return fj_fail(FJ_ERR_INVALID_ARGUMENT, "%s (\"%s\") is not a whole number in %ld..%ld",
                       name, env, lo, hi);
    *out = (int)n;
    return FJ_OK;
}

/* FLASHJIT_CUDA_SPLITS=N: N splits wherever split-KV is allowed (a split
 * kernel's rows of at least SPLIT_MIN_KEYS keys, the workspace limit),
 * in place of the model's count, so the model can be measured against other
 * counts; N above what the problem allows gets the most it allows, 1 turns
 * split-KV off. Sets *forced to 0 when the variable is unset or empty. */
static fj_status splits_from_env(int *forced)
{
    return env_whole_number("FLASHJIT_CUDA_SPLITS", 1, SPLIT_MAX, forced);
}

/* FLASHJIT_CUDA_HEAD_GROUP=N: flash_tma's (head, batch) pairs side by side
   (fj_tma_layout's head_group) forced to N, clamped to the pairs, in place
   of the L2 model's count: to measure the model (docs/benchmarks.md). */
#define HEAD_GROUP_MAX 65536
static fj_status head_group_from_env(int *forced)
{
    return env_whole_number("FLASHJIT_CUDA_HEAD_GROUP", 1, HEAD_GROUP_MAX, forced);
}

static int choose_splits(const cuda_plan *cp, const fj_problem *p, const fj_kernel_desc *k,
                         int blocks_per_sm, int forced)
{
    const int64_t blocks = (int64_t)cp->grid[0] * cp->grid[1] * cp->grid[2];
    const int64_t slots = (int64_t)blocks_per_sm * cp->cuda->sm_count;
    const int64_t tiles = (p->seqlen_k + (int64_t)k->block_n - 1) / k->block_n;
    /* decode (at most FJ_DECODE_MAX_ROWS rows per head, packed): at least
       SPLIT_MIN_KEYS keys per split, one tile at least */
    int64_t min_tiles = SPLIT_MIN_TILES;
    if (p->seqlen_q <= FJ_DECODE_MAX_ROWS)
        min_tiles = SPLIT_MIN_KEYS > k->block_n ? SPLIT_MIN_KEYS / k->block_n : 1;
    int64_t most = tiles / min_tiles;
    if (most > SPLIT_MAX) most = SPLIT_MAX;
    if (most * p->batch > GRID_YZ_MAX) most = GRID_YZ_MAX / p->batch;
    const size_t per_split =
        (size_t)p->batch * p->heads_q * p->seqlen_q * (k->head_dim + 1) * sizeof(float);
    while (most > 1 && per_split * (size_t)most > SPLIT_MAX_WORKSPACE) most--;
    if (forced) return most < 2 ? 1 : (int)(forced < most ? forced : most);
    if (blocks >= slots || most < 2 || slots < 1) return 1;
    /* time(s) = waves(s) * (tiles / s + fixed), compared as a fraction
       without rounding: waves * (tiles + fixed * s) / s; ties keep fewer
       splits (less partial traffic, a cheaper combine) */
    int64_t best = 1, best_num = tiles + SPLIT_FIXED_TILES, best_den = 1; /* one wave */
    for (int64_t sp = 2; sp <= most; sp++) {
        const int64_t waves = (blocks * sp + slots - 1) / slots;
        const int64_t num = waves * (tiles + SPLIT_FIXED_TILES * sp), den = sp;
        if (num * best_den < best_num * den) {
            best = sp;
            best_num = num;
            best_den = den;
        }
    }
    return (int)best;
}

/* Programmatic dependent launch of the combine kernel (sm_90+): its launch
 * and start overlap the split kernel's last blocks instead of following its
 * completion, and griddepcontrol.wait in the kernel keeps it from reading
 * partials early. FLASHJIT_CUDA_PDL=0 turns it off (to measure it, or to rule
 * it out). */
static bool combine_pdl_wanted(const fj_cuda_state *s)
{
    const char *env = getenv("FLASHJIT_CUDA_PDL");
    return s->arch >= 90 && s->api->cuLaunchKernelEx && !(env && strcmp(env, "0") == 0);
}

/* Loads the split variant and the combine kernel and allocates the partials. */
static fj_status setup_split(cuda_plan *cp, fj_context *ctx, const fj_problem *p,
                             const fj_kernel_desc *k, int splits, int *blocks_per_sm)
{
    const fj_cuda_state *s = cp->cuda;
    fj_kernel_desc ks, kc;
    fj_kernel_desc_split_of(k, &ks); /* the combine kernel joins the sink, once per row */
    /* one combine block per query row */
    const long long query_rows = (long long)p->batch * p->heads_q * p->seqlen_q;
    fj_kernel_desc_combine_for(k,
                               fj_kernel_desc_combine_warps(k->head_dim, splits, query_rows,
                                                            s->sm_count),
                               &kc);
    bool before;
    fj_status st;
    if ((st = fj_module_cache_get(s->modules, s, &ks, ctx->cache_dir, &cp->kernel, &before)) ||
        (st = fj_module_cache_get(s->modules, s, &kc, ctx->cache_dir, &cp->combine, &before)))
        return st;
    cp->num_splits = splits;
    cp->combine_pdl = combine_pdl_wanted(s);
    cp->combine_threads = fj_kernel_desc_threads(&kc);
    cp->grid[2] = (unsigned)(p->batch * splits);
    cp->smem = cp->kernel->dyn_smem;
    cp->combine_grid[0] = (unsigned)p->seqlen_q; /* one block per query row */
    cp->combine_grid[1] = (unsigned)p->heads_q;
    cp->combine_grid[2] = (unsigned)p->batch;
    snprintf(cp->launch_what, sizeof cp->launch_what, "cuLaunchKernel(%s)", cp->kernel->name);
    if ((st = check_resources(cp, blocks_per_sm))) return st;
    size_t rows = (size_t)splits * p->batch * p->heads_q * p->seqlen_q;
    size_t o_bytes = rows * (size_t)k->head_dim * sizeof(float);
    if ((st = fj_cuda_push(s))) return st;
    CUresult r = s->api->cuMemAlloc(&cp->partials, o_bytes + rows * sizeof(float));
    fj_cuda_pop(s);
    if (r != FJ_CUDA_SUCCESS) {
        cp->partials = 0;
        return fj_fail_prefix(fj_cuda_fail(s->api, r, "cuMemAlloc"),
                              "cuda: split-KV partials for %d splits", splits);
    }
    cp->params.num_splits = splits;
    cp->params.o_partial = (float *)(uintptr_t)cp->partials;
    cp->params.lse_partial = (float *)(uintptr_t)(cp->partials + o_bytes);
    return FJ_OK;
}

/* A flash_tma kernel reads and writes through tensor maps: encoded here
 * once with stand-in pointers, so that a layout the copy engine cannot
 * address (a stride of 0, say) is found at plan time. A tuning entry's
 * flash_tma tiles may also not fill the device (fj_kernel_desc_fills_device:
 * the entry was measured on a larger problem of its bucket; with splitting
 * turned off, FLASHJIT_CUDA_SPLITS=1, nothing would do better). In either case
 * tiles that came from the heuristic or a tuning entry fall back to the
 * next template; given ones are used as they are, or fail. */
static fj_status check_tma_layout(const fj_cuda_state *s, const fj_problem *view,
                                  const char *config, bool may_split, fj_kernel_desc *k,
                                  fj_tiles_source *from, char *why, size_t n, fj_tma_layout *out)
{
    memset(out, 0, sizeof *out);
    if (fj_template_row_of(k->template_id)->launch != FJ_LAUNCH_PERSISTENT_TMA) return FJ_OK;
    fj_tma_layout_make(view, k, s->l2_bytes, out);
    int group;
    fj_status st = head_group_from_env(&group);
    if (st) return st;
    if (group) {
        const int64_t pairs = (int64_t)view->heads_q * view->batch;
        out->head_group = group < pairs ? group : (int)pairs;
    }
    static _Alignas(256) const char stand_in[256];
    _Alignas(64) fj_tma_params trial;
    /* the driver encodes only with a current context */
    st = fj_cuda_push(s);
    if (st) return st;
    st = fj_tma_params_make(s->api, out, stand_in, stand_in, stand_in, stand_in, &trial);
    fj_cuda_pop(s);
    if (config || st == FJ_ERR_OUT_OF_MEMORY) return st;
    char reason[320];
    if (st) {
        snprintf(reason, sizeof reason, "%s", fj_last_error());
        fj_clear_error();
    } else if (may_split && !fj_kernel_desc_fills_device(k, view, s->sm_count)) {
        snprintf(reason, sizeof reason,
                 "%d work tiles would leave most of the %d SMs idle, and it cannot split the keys",
                 out->tiles, s->sm_count);
    } else {
        return FJ_OK;
    }
    char name[128];
    fj_kernel_desc_name(k, name, sizeof name);
    size_t used = strlen(why);
    snprintf(why + used, n - used, "; not %s: %s", name, reason);
    fj_kernel_desc_heuristic_excluding(k, FJ_TEMPLATE_FLASH_TMA);
    *from = FJ_TILES_HEURISTIC;
    memset(out, 0, sizeof *out);
    return fj_kernel_desc_check(k, (size_t)s->smem_optin);
}

/* A flash_tma plan's work tile counter (fj_tma_params.tile_counter), zeroed
 * once: each launch leaves it zero for the next. */
static fj_status alloc_tile_counter(cuda_plan *cp)
{
    const fj_cuda_state *s = cp->cuda;
    const size_t bytes = 2 * sizeof(int32_t);
    fj_status st = fj_cuda_push(s);
    if (st) return st;
    CUresult r = s->api->cuMemAlloc(&cp->tile_counter, bytes);
    if (r == FJ_CUDA_SUCCESS) {
        r = s->api->cuMemsetD8(cp->tile_counter, 0, bytes);
        if (r != FJ_CUDA_SUCCESS) st = fj_cuda_fail(s->api, r, "cuMemsetD8");
    } else {
        cp->tile_counter = 0;
        st = fj_cuda_fail(s->api, r, "cuMemAlloc");
    }
    fj_cuda_pop(s);
    return st ? fj_fail_prefix(st, "cuda: the work tile counter of a persistent grid") : FJ_OK;
}

/* Plan creation resolves the kernel once: the launch view, the heuristic's
 * descriptor for it, the tiles (given, tuning file, shipped table, or that
 * heuristic), one check against this device, then the module cache (memory,
 * disk cache, or NVRTC). supports() has accepted p. */
fj_status fj_cuda_plan_create(fj_context *ctx, const fj_problem *p, const char *config,
                              void **state, fj_strbuf *describe)
{
    *state = NULL;
    const fj_cuda_state *s = ctx->backend_state;
    int forced;
    fj_status st;
    if ((st = splits_from_env(&forced))) return st;
    const bool may_split = forced != 1;
    fj_problem packed;
    bool gqa_packed = fj_launch_view(p, &packed);
    fj_kernel_desc k;
    char why[512];
    fj_tiles_source from;
    for (;;) {
        if (may_split) fj_kernel_desc_for_device(&packed, (uint32_t)s->arch, s->sm_count, &k);
        else fj_kernel_desc_default(&packed, (uint32_t)s->arch, &k);
        /* Tuning entries are keyed by the user's problem; the kernel and its
           launch see the packed one. */
        if ((st = choose_tiles(ctx, p, config, &k, &from, why, sizeof why))) return st;
        /* a kernel that cannot compute the packed view (ALiBi outside
           flash_fwd's decode tiles) gets the unpacked one: one block row
           per query head */
        if (!gqa_packed || fj_launch_view_takes(p, k.template_id, k.block_m, k.warps)) break;
        fj_launch_view_unpacked(p, &packed);
        gqa_packed = false;
    }
    char refused[256];
    if (from == FJ_TILES_HEURISTIC &&
        fj_kernel_desc_modifier_fallback(&packed, (uint32_t)s->arch, refused, sizeof refused)) {
        size_t used = strlen(why);
        snprintf(why + used, sizeof why - used, "; not %s", refused);
    }
    fj_tma_layout tma;
    if ((st = check_tma_layout(s, &packed, config, may_split, &k, &from, why, sizeof why, &tma)))
        return st;
    const fj_problem *user = p;
    p = &packed;

    cuda_plan *cp = calloc(1, sizeof *cp);
    if (!cp) return fj_fail(FJ_ERR_OUT_OF_MEMORY, "cuda: out of memory for the plan");
    cp->cuda = s;
    cp->gqa_packed = gqa_packed ? user->group : 0;
    cp->tiles_from = from;
    cp->launch = fj_template_row_of(k.template_id)->launch;
    cp->tma = tma;
    cp->problem = *user;
    cp->seqs = user->varlen || user->paged;
    /* FLASHJIT_CHECK=1: debug mode. Each varlen or paged execute copies its
       length arrays and block table back to the host (after synchronizing
       its stream) and checks every rule (src/sequences.c) before launching,
       so a bad value is an FJ_ERR_INVALID_ARGUMENT naming it rather than a
       clamped length. Off by default: it synchronizes, and it cannot run
       inside a CUDA graph capture. */
    cp->check = env_flag("FLASHJIT_CHECK");
    if (cp->seqs && s->arch >= 90 && k.template_id == FJ_TEMPLATE_FLASH_FWD && !config) {
        size_t used = strlen(why);
        snprintf(why + used, sizeof why - used,
                 "; flash_fwd: flash_tma and flash_wgmma read dense [batch, seq, head] tensors "
                 "only, not %s",
                 user->paged ? "a paged KV cache" : "packed variable-length sequences");
    }
    snprintf(cp->why, sizeof cp->why, "%s", why);
    bool loaded_before;
    if ((st =
             fj_module_cache_get(s->modules, s, &k, ctx->cache_dir, &cp->kernel, &loaded_before))) {
        free(cp);
        return st;
    }
    cp->grid[0] = (unsigned)((p->seqlen_q + (int64_t)k.block_m - 1) / k.block_m);
    cp->grid[1] = (unsigned)p->heads_q;
    cp->grid[2] = (unsigned)p->batch;
    cp->threads = fj_kernel_desc_threads(&k);
    cp->smem = cp->kernel->dyn_smem;
    cp->num_splits = 1;
    fill_params(&cp->params, p, 1);
    if (gqa_packed) { /* a row's head for the sinks (fwd_params.h) */
        cp->params.pack_rows = user->seqlen_q;
        cp->params.pack_group = user->group;
    } else {
        cp->params.pack_group = 1;
    }
    /* One query tile per (kv) head: no other block reads this block's K and
       V, so they need not stay in L2 (a decode call; GQA only when packed). */
    cp->params.kv_read_once = cp->grid[0] == 1 && p->group == 1;
    snprintf(cp->launch_what, sizeof cp->launch_what, "cuLaunchKernel(%s)", cp->kernel->name);
    int blocks_per_sm = 0;
    if ((st = check_resources(cp, &blocks_per_sm))) {
        free(cp);
        return st;
    }
    if (cp->launch == FJ_LAUNCH_PERSISTENT_TMA) {
        /* at most one resident block per work tile and SM slot */
        const int64_t slots = (int64_t)blocks_per_sm * s->sm_count;
        cp->grid[0] = (unsigned)(cp->tma.tiles < slots ? cp->tma.tiles : slots);
        cp->grid[1] = cp->grid[2] = 1;
        if ((st = alloc_tile_counter(cp))) {
            fj_cuda_plan_destroy(cp);
            return st;
        }
    }
    cp->splits_forced = forced;
    int splits = fj_template_row_of(k.template_id)->split_kv
                     ? choose_splits(cp, p, &k, blocks_per_sm, forced)
                     : 1;
    if (splits > 1 && (st = setup_split(cp, ctx, p, &k, splits, &blocks_per_sm))) {
        fj_cuda_plan_destroy(cp);
        return st;
    }
    describe_plan(cp, loaded_before, blocks_per_sm, describe);
    *state = cp;
    return FJ_OK;
}

void fj_cuda_plan_destroy(void *state)
{
    cuda_plan *cp = state;
    if (!cp) return;
    if ((cp->partials || cp->tile_counter) && fj_cuda_push(cp->cuda) == FJ_OK) {
        if (cp->partials) cp->cuda->api->cuMemFree(cp->partials);
        if (cp->tile_counter) cp->cuda->api->cuMemFree(cp->tile_counter);
        fj_cuda_pop(cp->cuda);
    }
    free(cp);
}

/* Cheap enough for every execute; says which pointer, since a misaligned
 * one would fault the kernel with no hint. */
static fj_status check_pointers(const void *q, const void *k, const void *v, const void *o,
                                const float *lse)
{
    const struct {
        const char *name;
        const void *ptr;
    } t[4] = {{"q", q}, {"k", k}, {"v", v}, {"o", o}};
    for (int i = 0; i < 4; i++)
        if ((uintptr_t)t[i].ptr % ROW_ALIGN_BYTES)
            return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                           "%s (%p) is not %d-byte aligned: the CUDA kernel moves %d-byte rows "
                           "(fj_malloc'd memory is aligned)",
                           t[i].name, t[i].ptr, ROW_ALIGN_BYTES, ROW_ALIGN_BYTES);
    if ((uintptr_t)lse % sizeof(float))
        return fj_fail(FJ_ERR_INVALID_ARGUMENT, "lse (%p) is not %zu-byte aligned (float32)",
                       (const void *)lse, sizeof(float));
    return FJ_OK;
}

/* The plan's launches (the kernel, and the combine kernel after a split)
 * with its context already current. */
static fj_status launch_current(const cuda_plan *cp, fj_fwd_params *prm, CUstream stream)
{
    const fj_cuda_api *api = cp->cuda->api;
    if (cp->launch == FJ_LAUNCH_PERSISTENT_TMA) {
        _Alignas(64) fj_tma_params tma;
        fj_status st = fj_tma_params_make(api, &cp->tma, prm->q, prm->k, prm->v, prm->o, &tma);
        if (st) return st;
        tma.tile_counter = (int *)(uintptr_t)cp->tile_counter;
        void *tma_args[2] = {prm, &tma};
        CUresult r = api->cuLaunchKernel(cp->kernel->function, cp->grid[0], 1, 1, cp->threads, 1, 1,
                                         cp->smem, stream, tma_args, NULL);
        return r == FJ_CUDA_SUCCESS ? FJ_OK : fj_cuda_fail(api, r, cp->launch_what);
    }
    void *args[1] = {prm};
    CUresult r = api->cuLaunchKernel(cp->kernel->function, cp->grid[0], cp->grid[1], cp->grid[2],
                                     cp->threads, 1, 1, cp->smem, stream, args, NULL);
    if (r != FJ_CUDA_SUCCESS) return fj_cuda_fail(api, r, cp->launch_what);
    if (cp->num_splits == 1) return FJ_OK;
    if (cp->combine_pdl) {
        fj_cu_launch_attribute attr;
        memset(&attr, 0, sizeof attr);
        attr.id = FJ_CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attr.value.programmatic_stream_serialization_allowed = 1;
        const fj_cu_launch_config cfg = {cp->combine_grid[0],
                                         cp->combine_grid[1],
                                         cp->combine_grid[2],
                                         cp->combine_threads,
                                         1,
                                         1,
                                         0,
                                         stream,
                                         &attr,
                                         1};
        r = api->cuLaunchKernelEx(&cfg, cp->combine->function, args, NULL);
        return r == FJ_CUDA_SUCCESS ? FJ_OK : fj_cuda_fail(api, r, "cuLaunchKernelEx(combine)");
    }
    r = api->cuLaunchKernel(cp->combine->function, cp->combine_grid[0], cp->combine_grid[1],
                            cp->combine_grid[2], cp->combine_threads, 1, 1, 0, stream, args, NULL);
    return r == FJ_CUDA_SUCCESS ? FJ_OK : fj_cuda_fail(api, r, "cuLaunchKernel(combine)");
}

static void set_tensors(fj_fwd_params *prm, const void *q, const void *k, const void *v, void *o,
                        float *lse, const fj_exec_inputs *in)
{
    prm->q = q;
    prm->k = k;
    prm->v = v;
    prm->o = o;
    prm->lse = lse;
    /* the core checked them: non-NULL exactly when the problem has the
       feature (the kernels read them only then) */
    prm->alibi_slopes = in ? in->alibi_slopes : NULL;
    prm->sinks = in ? in->sinks : NULL;
}

/* An int32 array of n entries at device address src, copied to the host
 * (malloc'd into *out). */
static fj_status copy_back(const cuda_plan *cp, const int32_t *src, int64_t n, const char *what,
                           int32_t **out)
{
    *out = NULL;
    if (!src) return FJ_OK;
    int32_t *h = malloc((size_t)(n > 0 ? n : 1) * sizeof *h);
    if (!h) return fj_fail(FJ_ERR_OUT_OF_MEMORY, "FLASHJIT_CHECK: out of memory copying %s", what);
    const fj_cuda_api *api = cp->cuda->api;
    CUresult r = api->cuMemcpyDtoH(h, (CUdeviceptr)(uintptr_t)src, (size_t)n * sizeof *h);
    if (r != FJ_CUDA_SUCCESS) {
        free(h);
        return fj_fail_prefix(fj_cuda_fail(api, r, "cuMemcpyDtoH"),
                              "FLASHJIT_CHECK: copying %s (%lld int32) back", what, (long long)n);
    }
    *out = h;
    return FJ_OK;
}

/* FLASHJIT_CHECK=1: the arrays as the kernels will read them (after the
 * stream's earlier work), checked on the host. The context is current. */
static fj_status check_sequences(const cuda_plan *cp, const fj_exec_inputs *in, CUstream stream)
{
    const fj_problem *p = &cp->problem;
    const fj_cuda_api *api = cp->cuda->api;
    CUresult r = stream ? api->cuStreamSynchronize(stream) : api->cuCtxSynchronize();
    if (r != FJ_CUDA_SUCCESS)
        return fj_fail_prefix(fj_cuda_fail(api, r,
                                           stream ? "cuStreamSynchronize" : "cuCtxSynchronize"),
                              "FLASHJIT_CHECK (no checks inside a CUDA graph capture)");
    int32_t *cq = NULL, *ck = NULL, *used = NULL, *bt = NULL;
    fj_status st;
    const int64_t n = p->batch;
    if (!(st = copy_back(cp, in->cu_seqlens_q, n + 1, "cu_seqlens_q", &cq)) &&
        !(st = copy_back(cp, in->cu_seqlens_k, n + 1, "cu_seqlens_k", &ck)) &&
        !(st = copy_back(cp, in->seqused_k, n, "seqused_k", &used)) &&
        !(st = copy_back(cp, in->block_table, n * p->bt_stride, "block_table", &bt))) {
        fj_exec_inputs host = *in;
        host.cu_seqlens_q = cq;
        host.cu_seqlens_k = ck;
        host.seqused_k = used;
        host.block_table = bt;
        st = fj_sequences_check(p, &host);
        if (st) st = fj_fail_prefix(st, "FLASHJIT_CHECK");
    }
    free(cq);
    free(ck);
    free(used);
    free(bt);
    return st;
}

/* The execute's length arrays and block table into the launch parameters. */
static void set_sequences(fj_fwd_params *prm, const fj_exec_inputs *in)
{
    prm->cu_seqlens_q = in->cu_seqlens_q;
    prm->cu_seqlens_k = in->cu_seqlens_k;
    prm->seqused_k = in->seqused_k;
    prm->block_table = in->block_table;
    prm->total_q = in->total_q;
    prm->total_k = in->total_k;
}

fj_status fj_cuda_execute(const void *state, const fj_problem *p, const void *q, const void *k,
                          const void *v, void *o, float *lse, const fj_exec_inputs *in,
                          void *stream)
{
    (void)p; /* the plan's parameters were made from it */
    /* in: ALiBi's and the sinks' arrays, and the varlen and paged ones (the
       core checked that each is given exactly when the plan takes it) */
    const cuda_plan *cp = state;
    fj_status st = check_pointers(q, k, v, o, lse);
    if (st) return st;
    fj_fwd_params prm = cp->params;
    set_tensors(&prm, q, k, v, o, lse, in);
    if (cp->seqs) {
        if (!in)
            return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                           "cuda: a varlen or paged plan needs its arrays (fj_plan_execute_ex)");
        set_sequences(&prm, in);
        if (cp->check) {
            if ((st = fj_cuda_push(cp->cuda))) return st;
            st = check_sequences(cp, in, (CUstream)stream);
            fj_cuda_pop(cp->cuda);
            if (st) return st;
        }
    }
    if ((st = fj_cuda_push(cp->cuda))) return st;
    st = launch_current(cp, &prm, (CUstream)stream);
    fj_cuda_pop(cp->cuda);
    return st;
}

int fj_cuda_launches(const void *state)
{
    const cuda_plan *cp = state;
    return cp->num_splits > 1 ? 2 : 1;
}

void fj_cuda_plan_info(const void *state, fj_plan_info *out)
{
    const cuda_plan *cp = state;
    const fj_cuda_kernel *kn = cp->kernel;
    snprintf(out->kernel, sizeof out->kernel, "%s", kn->name);
    fj_kernel_desc_tiles_name(&kn->desc, out->tiles, sizeof out->tiles);
    out->tiles_source = cp->tiles_from;
    out->registers = kn->num_regs;
    out->local_bytes = kn->local_bytes;
    out->shared_bytes = (int)cp->smem + kn->static_smem;
    out->threads = (int)cp->threads;
    out->splits = cp->num_splits;
}

/* Device time of each run, from events around each launch on the default
 * stream, so host overhead and launch queueing are not counted. */
static fj_status time_current(const cuda_plan *cp, fj_fwd_params *prm, int warmup, int repeat,
                              double *ms, CUevent ev[2])
{
    const fj_cuda_api *api = cp->cuda->api;
    fj_status st = FJ_OK;
    CUresult r;
    for (int i = 0; i < warmup && !st; i++) st = launch_current(cp, prm, NULL);
    for (int i = 0; i < repeat && !st; i++) {
        float t = 0;
        if ((r = api->cuEventRecord(ev[0], NULL))) return fj_cuda_fail(api, r, "cuEventRecord");
        if ((st = launch_current(cp, prm, NULL))) break;
        if ((r = api->cuEventRecord(ev[1], NULL))) return fj_cuda_fail(api, r, "cuEventRecord");
        if ((r = api->cuEventSynchronize(ev[1])))
            return fj_fail_prefix(fj_cuda_fail(api, r, "cuEventSynchronize"), "%s",
                                  cp->kernel->name);
        if ((r = api->cuEventElapsedTime(&t, ev[0], ev[1])))
            return fj_cuda_fail(api, r, "cuEventElapsedTime");
        ms[i] = t;
    }
    return st;
}

fj_status fj_cuda_time_runs(const void *state, const fj_problem *p, const void *q, const void *k,
                            const void *v, void *o, float *lse, const fj_exec_inputs *in,
                            int warmup, int repeat, double *ms)
{
    (void)p;
    const cuda_plan *cp = state;
    const fj_cuda_api *api = cp->cuda->api;
    if (cp->seqs) /* its arrays are not passed here (src/tune/measure.c times it by execute) */
        return fj_fail(FJ_ERR_UNSUPPORTED,
                       "cuda: a varlen or paged plan is timed through its executes");
    fj_status st = check_pointers(q, k, v, o, lse);
    if (st) return st;
    fj_fwd_params prm = cp->params;
    set_tensors(&prm, q, k, v, o, lse, in);
    if ((st = fj_cuda_push(cp->cuda))) return st;
    CUevent ev[2] = {NULL, NULL};
    CUresult r;
    if ((r = api->cuEventCreate(&ev[0], FJ_CU_EVENT_DEFAULT)) ||
        (r = api->cuEventCreate(&ev[1], FJ_CU_EVENT_DEFAULT)))
        st = fj_cuda_fail(api, r, "cuEventCreate");
    else st = time_current(cp, &prm, warmup, repeat, ms, ev);
    if (ev[0]) api->cuEventDestroy(ev[0]);
    if (ev[1]) api->cuEventDestroy(ev[1]);
    fj_cuda_pop(cp->cuda);
    return st;
}
