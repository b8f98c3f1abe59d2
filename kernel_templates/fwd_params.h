/* Parameters of one flash_fwd launch. This one definition is shared by the
 * host (C11, src/cuda/backend.c) and the generated CUDA source (the code
 * generator pastes this file in), so the two layouts cannot differ. Only
 * fixed-size types; 8-byte fields first so no padding depends on the compiler.
 * No #include: NVRTC gets no include path. */
#ifndef FJ_FWD_PARAMS_H
#define FJ_FWD_PARAMS_H

typedef struct fj_fwd_params {
    const void *q, *k, *v;    /* device pointers; element type of the kernel (f16/bf16) */
    void *o;
    float *lse;               /* NULL: not written; else float32 [batch, heads_q, seqlen_q] */
    float *o_partial;         /* split-KV only: [num_splits, batch, heads_q, seqlen_q, head_dim] */
    float *lse_partial;       /* split-KV only: [num_splits, batch, heads_q, seqlen_q] */
    long long q_stride[3];    /* elements, axes (batch, seq, head); head_dim is contiguous */
    long long k_stride[3];
    long long v_stride[3];
    long long o_stride[3];
    long long diag_offset;    /* query row i is aligned with key i + diag_offset */
    int batch, heads_q, heads_kv, group; /* group = heads_q / heads_kv */
    int seqlen_q, seqlen_k;
    int window_left, window_right;       /* -1 = unbounded; read only when FJ_HAS_WINDOW */
    int num_splits;           /* >= 1; keys split over gridDim.z / batch blocks */
    int kv_read_once;         /* 1: one block reads each K and V element (one query tile
                                 per kv head); the one-warp split kernels then load
                                 them with an L2 evict_first policy */
    float scale_log2;         /* softmax scale * log2(e): scores go through exp2 */
    /* Read only when FJ_SOFTCAP (softcap c > 0): softcap_in = 2 log2(e) scale / c,
       so tanh(scale q.k / c) = 1 - 2 / (1 + exp2(q.k softcap_in)); softcap_log2 =
       c log2(e), the softmax's scale of the capped scores. */
    float softcap_in, softcap_log2;
    /* Fields below were appended (issue 22's ALiBi and sinks); keep new ones
       at the end. pack_rows: with GQA packing (src/cuda/jit/launch_view.h)
       the user's seqlen_q, so that row i of launch-view head h is query
       i % pack_rows of the user's head h * pack_group + i / pack_rows; 0
       when not packed (the launch view's heads are the user's). */
    int pack_rows;
    /* Read only when FJ_ALIBI: float32 [heads_q] slopes (the user's heads),
       each score gains -slope_h |i + diag_offset - j| (the user's row i and
       diag_offset). Packed (flash_fwd only): row i of launch-view head h
       takes the slope of its user head (above) and the user's position
       i % pack_rows, and the user's diag_offset is the launch view's
       diag_offset + (pack_group - 1) * pack_rows (launch_view.c). */
    const float *alibi_slopes;
    /* Read only when FJ_SINKS: float32 [heads_q] sink logits (natural log
       units; the user's heads), joined once per row after all its keys (in
       the combine kernel after a split). */
    const float *sinks;
    int pack_group;  /* the user's query heads per launch-view head (1: not packed) */
    /* Variable-length and paged kernels only (FJ_VARLEN, FJ_PAGE_SIZE; zero
       in every other kernel's launch, which never reads them). The arrays are
       the execute's, in device memory, read by the kernel itself: the host
       does no work that depends on the lengths, so a captured CUDA graph
       replays for any lengths written there. Each sequence's lengths are
       clamped to the plan's maxima and the buffers' token counts, and each
       page index to the pool, so no values make the kernel read or write
       outside the buffers (FLASHJIT_CHECK=1 refuses such values instead). */
    int total_q;              /* varlen: tokens of q and o; lse is [heads_q, total_q] */
    const int *cu_seqlens_q;  /* varlen: [batch + 1] */
    const int *cu_seqlens_k;  /* varlen, not paged: [batch + 1] */
    const int *seqused_k;     /* NULL or [batch] (paged: required, each sequence's keys) */
    const int *block_table;   /* paged: [batch, bt_stride], k and v are page pools */
    int total_k;              /* varlen, not paged: tokens of k and v */
    int bt_stride;            /* paged: the block table's row stride */
    int num_pages;            /* paged: pages in each pool */
    int diag_per_seq;         /* 1: row i sees key i + sk - sq of its sequence (bottom-right
                                 and no mask); 0: key i + diag_offset (top-left, 0) */
    int table_keys;           /* paged: min(seqlen_k, max_pages x page_size), the most keys
                                 a sequence's row of the block table can name */
    int reserved_seqs;        /* zero */
} fj_fwd_params;

/* flash_tma's second parameter block: the TMA descriptors (CUtensorMap, 128
 * opaque bytes, 64-byte aligned, made by cuTensorMapEncodeTiled at each
 * execute) of q, k, v and o, one per column-block width (64, 32 and 16
 * elements; unused ones zero), and the persistent grid's tile counter. */
#ifdef __cplusplus
#define FJ_ALIGNAS_64 alignas(64)
#else
#define FJ_ALIGNAS_64 _Alignas(64)
#endif
typedef struct fj_tensor_map {
    FJ_ALIGNAS_64 unsigned long long opaque[16];
} fj_tensor_map;

typedef struct fj_tma_params {
    fj_tensor_map q[3], k[3], v[3], o[3];
    /* The persistent grid's tile counter, two ints in device memory of the
       plan's own: the next work tile to take, then the blocks that have
       taken their last; zero at each launch (the last block to finish puts
       them back), so launches of one plan must not overlap */
    int *tile_counter;
    int tiles;      /* work tiles: m_blocks * heads_q * batch */
    int m_blocks;   /* query tiles per (head, batch) */
    int head_group; /* (head, batch) pairs whose tiles run side by side */
    int reserved[3];
} fj_tma_params;

#endif
