/* A validated attention problem: the public desc with every default resolved
 * (scale, dense strides), so backends never see a zero stride meaning
 * "dense" or a zero scale meaning "default". Built once per plan. */
#ifndef FJ_PROBLEM_H
#define FJ_PROBLEM_H

#include <stdbool.h>
#include <stdint.h>

#include "flashjit.h"

enum { FJ_AXIS_BATCH = 0, FJ_AXIS_SEQ = 1, FJ_AXIS_HEAD = 2 };

typedef struct fj_problem {
    int batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim;
    int head_dim_v; /* V's and O's rows: resolved (head_dim when the desc said 0) */
    int group;      /* heads_q / heads_kv: query heads per kv head */
    fj_dtype dtype;
    fj_causal causal;
    int window_left, window_right; /* -1 = unbounded */
    float scale;                   /* resolved: 1/sqrt(head_dim) when the desc said 0 */
    float softcap;                 /* 0: off; > 0: scores become softcap * tanh(score / softcap) */
    int64_t q_stride[3], k_stride[3], v_stride[3], o_stride[3]; /* resolved */
    /* Query row i is aligned with key row i + diag_offset: seqlen_k - seqlen_q
       for NONE and BOTTOM_RIGHT, 0 for TOP_LEFT. */
    int64_t diag_offset;
    bool masked; /* causal or any window: some (row, key) pairs are hidden */
    /* FJ_FEATURE_ALIBI, FJ_FEATURE_SINKS: the execute passes per-head slopes
       (score += -slope_h |i + diag_offset - j|) and sinks (a logit in each
       row's denominator); fj_exec_inputs carries the arrays. */
    bool alibi, sinks;
    /* FJ_FEATURE_VARLEN: batch sequences packed along the token axis (the
       batch strides are 0), seqlen_q and seqlen_k the longest a sequence
       may have; the execute's fj_exec_inputs place them. */
    bool varlen;
    /* FJ_FEATURE_PAGED_KV: k and v are page pools [num_pages, page_size,
       heads_kv, head_dim (v: head_dim_v)] (k_stride/v_stride: page, row, head), the
       execute's block table [batch, bt_stride] (max_pages columns read at
       most) and seqused_k place each sequence's keys; seqlen_k the most a
       sequence may use. Zero without the feature. */
    bool paged;
    int page_size, num_pages, max_pages, bt_stride; /* bt_stride resolved (>= max_pages) */
} fj_problem;

/* The arrays of an execute beyond the tensors, checked by the core against
   the problem (each non-NULL exactly when its feature is on; the varlen
   arrays' values are the backend's to check, as they lie in its memory). */
typedef struct fj_exec_inputs {
    const float *alibi_slopes; /* [heads_q] or NULL */
    const float *sinks;        /* [heads_q] or NULL */
    /* varlen: [batch + 1], [batch + 1], [batch] or NULL; the tokens of the
       buffers (0 when not varlen) */
    const int32_t *cu_seqlens_q, *cu_seqlens_k, *seqused_k;
    int32_t total_q, total_k;
    const int32_t *block_table; /* paged: [batch, bt_stride], else NULL */
} fj_exec_inputs;

/* ALiBi's bias of row i, key j for slope s: -s |i + diag_offset - j|. */
static inline float fj_alibi_bias(const struct fj_problem *p, float slope, int64_t i, int64_t j)
{
    int64_t dist = i + p->diag_offset - j;
    if (dist < 0) dist = -dist;
    return -slope * (float)dist;
}

/* The mask kinds that change generated code and tuning keys. The causal
 * alignment (bottom-right or top-left) and the window sizes are parameters,
 * not kinds. */
typedef enum fj_mask_kind {
    FJ_MASK_NONE = 0,          /* "nomask" */
    FJ_MASK_CAUSAL = 1,        /* "causal" */
    FJ_MASK_WINDOW = 2,        /* "window" */
    FJ_MASK_CAUSAL_WINDOW = 3, /* "causal_window" */
} fj_mask_kind;

/* "nomask", "causal", "window", "causal_window"; NULL out of range. */
const char *fj_mask_kind_name(uint32_t mask);

/* The kind of p's mask (FJ_MASK_NONE when it is unmasked). */
static inline fj_mask_kind fj_problem_mask_kind(const fj_problem *p)
{
    return (fj_mask_kind)((p->causal != FJ_CAUSAL_NONE ? FJ_MASK_CAUSAL : 0) |
                          (p->window_left >= 0 || p->window_right >= 0 ? FJ_MASK_WINDOW : 0));
}

/* Validates d and fills *p. FJ_ERR_INVALID_ARGUMENT with the field and the
 * rule in fj_last_error() on any bad field. */
fj_status fj_problem_init(fj_problem *p, const fj_attention_desc *d);

/* The keys query row i sees form one interval [*lo, *hi) (every mask kind is a
 * band). Empty when *lo >= *hi. */
static inline void fj_visible_keys(const fj_problem *p, int64_t i, int64_t *lo, int64_t *hi)
{
    int64_t d = i + p->diag_offset;
    int64_t l = 0, h = p->seqlen_k;
    if (p->causal != FJ_CAUSAL_NONE && d + 1 < h) h = d + 1;
    if (p->window_right >= 0 && d + p->window_right + 1 < h) h = d + p->window_right + 1;
    if (p->window_left >= 0 && d - p->window_left > l) l = d - p->window_left;
    if (h < l) h = l;
    *lo = l;
    *hi = h;
}

/* A varlen problem's tensors at total_q query and total_k key tokens: their
 * extents in bytes and lse's heads_q x total_q floats must fit int64 (and
 * size_t); else FJ_ERR_INVALID_ARGUMENT naming total_q or total_k. */
fj_status fj_problem_varlen_extents(const fj_problem *p, int32_t total_q, int32_t total_k);

/* Number of elements from the base pointer to one past the last element the
 * tensor touches (the extent to allocate for a strided tensor). */
int64_t fj_problem_q_extent(const fj_problem *p);
int64_t fj_problem_k_extent(const fj_problem *p); /* paged: the pool's */
int64_t fj_problem_v_extent(const fj_problem *p); /* rows of head_dim_v; paged: the pool's */
int64_t fj_problem_o_extent(const fj_problem *p); /* rows of head_dim_v */

/* A validated merge (fj_merge): the public fj_merge_desc with dense strides
 * resolved. */
typedef struct fj_merge_problem {
    int batch, heads_q, seqlen_q, head_dim;
    fj_dtype dtype;
    int64_t a_stride[3], b_stride[3], o_stride[3]; /* resolved */
} fj_merge_problem;

/* Validates d and fills *m. FJ_ERR_INVALID_ARGUMENT naming the field and
 * the rule on any bad field (pointers are fj_merge's to check). */
fj_status fj_merge_problem_init(fj_merge_problem *m, const fj_merge_desc *d);

/* The problem key of p (include/flashjit.h, "Problem keys";
   src/problem_key.c), e.g. "b2.hq16.hkv4.sq1024.sk1024.d128.bf16.causal_br". */
void fj_problem_key_of(const fj_problem *p, char *buf, size_t n);

/* The key and the resolved scale, "b2.hq16.hkv4.sq1024.sk1024.d128.bf16.nomask
   scale=0.0883883", for describe strings and logs. */
void fj_problem_format(const fj_problem *p, char *buf, size_t n);

#endif
