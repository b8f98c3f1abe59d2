/* Validation of the public problem description, and the resolved problem the
 * backends use. Every rule lives here, once, with the message that names it. */
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "problem.h"
#include "status.h"

/* The desc's layout is the ABI (include/flashjit.h, "Structs and ABI
   room"): the fields 1.1 added took reserved int64 slots, so its size and
   every older field's offset are 1.0's. */
_Static_assert(offsetof(fj_attention_desc, features) ==
                   offsetof(fj_attention_desc, softcap) + sizeof(float),
               "features shares softcap's int64 slot");
_Static_assert(offsetof(fj_attention_desc, page_size) ==
                   offsetof(fj_attention_desc, softcap) + sizeof(int64_t),
               "the paged fields take the second and third slots");
_Static_assert(offsetof(fj_attention_desc, max_pages) ==
                   offsetof(fj_attention_desc, softcap) + 2 * sizeof(int64_t),
               "the paged fields take the second and third slots");
_Static_assert(offsetof(fj_attention_desc, head_dim_v) ==
                   offsetof(fj_attention_desc, softcap) + 3 * sizeof(int64_t),
               "head_dim_v takes the fourth slot");
_Static_assert(offsetof(fj_attention_desc, reserved_i32) ==
                   offsetof(fj_attention_desc, head_dim_v) + sizeof(int),
               "reserved_i32 fills the fourth slot");
_Static_assert(offsetof(fj_attention_desc, reserved) ==
                   offsetof(fj_attention_desc, softcap) + 4 * sizeof(int64_t),
               "the room left starts at the fifth slot");
_Static_assert(sizeof(fj_attention_desc) ==
                   offsetof(fj_attention_desc, softcap) + 8 * sizeof(int64_t),
               "1.0's eight reserved int64 slots, the size unchanged");

void fj_attention_desc_init(fj_attention_desc *d, int batch, int heads_q, int heads_kv,
                            int seqlen_q, int seqlen_k, int head_dim, fj_dtype dtype)
{
    if (!d) return;
    memset(d, 0, sizeof *d);
    d->batch = batch;
    d->heads_q = heads_q;
    d->heads_kv = heads_kv;
    d->seqlen_q = seqlen_q;
    d->seqlen_k = seqlen_k;
    d->head_dim = head_dim;
    d->dtype = dtype;
    d->causal = FJ_CAUSAL_NONE;
    d->window_left = -1;
    d->window_right = -1;
    d->scale = 0.0f;
}

const char *fj_dtype_name(fj_dtype t)
{
    switch (t) {
    case FJ_F32: return "f32";
    case FJ_F16: return "f16";
    case FJ_BF16: return "bf16";
    }
    return NULL;
}

const char *fj_causal_name(fj_causal c)
{
    switch (c) {
    case FJ_CAUSAL_NONE: return "none";
    case FJ_CAUSAL_BOTTOM_RIGHT: return "bottom-right";
    case FJ_CAUSAL_TOP_LEFT: return "top-left";
    }
    return NULL;
}

static bool all_zero(const int64_t s[3]) { return s[0] == 0 && s[1] == 0 && s[2] == 0; }

/* The dense [batch, seq, heads, head_dim] strides. The head and seq strides
 * always fit int64 (2^31 x 2^8); the batch stride, seqlen x heads x head_dim,
 * may not: false then, and s is left unset. */
static bool dense_strides(int64_t s[3], int seqlen, int heads, int head_dim)
{
    int64_t batch_stride;
    if (__builtin_mul_overflow((int64_t)seqlen * heads, (int64_t)head_dim, &batch_stride))
        return false;
    s[FJ_AXIS_HEAD] = head_dim;
    s[FJ_AXIS_SEQ] = (int64_t)heads * head_dim;
    s[FJ_AXIS_BATCH] = batch_stride;
    return true;
}

/* Offset one past the last element: sum((n_i - 1) * s_i) + head_dim, or -1
 * on int64 overflow. */
static int64_t extent(const int64_t s[3], const int64_t n[3], int head_dim)
{
    int64_t total = head_dim;
    for (int a = 0; a < 3; a++) {
        int64_t t;
        if (__builtin_mul_overflow(n[a] - 1, s[a], &t) || __builtin_add_overflow(total, t, &total))
            return -1;
    }
    return total;
}

static const char *const axis_names[3] = {"batch", "seq", "head"};

/* The rule every tensor answers to: its extent (the offset one past its last
 * element) and that many elements' bytes fit int64. A dense tensor (strides
 * left zero) that breaks it is named by its shape, since the caller set no
 * stride. */
static fj_status fail_extent(const char *name, const int64_t s[3], const int64_t n[3], int head_dim,
                             const char *dim_name, bool dense)
{
    const int tensor_len = (int)strcspn(name, "_"); /* "q" of "q_stride" */
    if (dense)
        return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                       "%.*s: the dense tensor [batch %lld, seq %lld, heads %lld, %s %d] "
                       "holds more elements than int64 can address (every tensor's extent, in "
                       "bytes, must fit int64)",
                       tensor_len, name, (long long)n[FJ_AXIS_BATCH], (long long)n[FJ_AXIS_SEQ],
                       (long long)n[FJ_AXIS_HEAD], dim_name, head_dim);
    return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                   "%.*s: the tensor's extent (the last element's offset + 1, from %s %lld, "
                   "%lld, %lld over batch %lld, seq %lld, heads %lld) overflows int64 in bytes "
                   "(every tensor's extent, in bytes, must fit int64)",
                   tensor_len, name, name, (long long)s[0], (long long)s[1], (long long)s[2],
                   (long long)n[FJ_AXIS_BATCH], (long long)n[FJ_AXIS_SEQ],
                   (long long)n[FJ_AXIS_HEAD]);
}

static fj_status check_strides(const char *name, const int64_t s[3], const int64_t n[3],
                               int head_dim, const char *dim_name, int elem_size, bool dense)
{
    for (int a = 0; a < 3; a++)
        if (s[a] < 0)
            return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                           "%s[%d] (%s axis) is %lld: strides must be >= 0", name, a, axis_names[a],
                           (long long)s[a]);
    int64_t e = extent(s, n, head_dim), bytes;
    if (e < 0 || __builtin_mul_overflow(e, (int64_t)elem_size, &bytes) ||
        (uint64_t)bytes > (uint64_t)SIZE_MAX)
        return fail_extent(name, s, n, head_dim, dim_name, dense);
    return FJ_OK;
}

/* Output rows (head_dim contiguous elements each) must not overlap, or two
 * rows' results would race and one would be lost. Sufficient rule: ordering the
 * axes of extent > 1 by stride, each stride is at least the span of the axes
 * below it. */
static fj_status check_output_rows(const int64_t s[3], const int64_t n[3], int head_dim)
{
    int order[3], k = 0;
    for (int a = 0; a < 3; a++)
        if (n[a] > 1) order[k++] = a;
    for (int i = 1; i < k; i++)
        for (int j = i; j > 0 && s[order[j]] < s[order[j - 1]]; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    int64_t span = head_dim;
    for (int i = 0; i < k; i++) {
        int a = order[i];
        if (s[a] < span)
            return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                           "o_stride[%d] (%s axis) is %lld but must be >= %lld so that output "
                           "rows do not overlap",
                           a, axis_names[a], (long long)s[a], (long long)span);
        span = (n[a] - 1) * s[a] + span; /* no overflow: extent() checked it */
    }
    return FJ_OK;
}

/* The paged fields: all 0 without FJ_FEATURE_PAGED_KV; with it page_size,
 * num_pages and max_pages >= 1, block_table_stride 0 or >= max_pages, and
 * the table's batch x stride entries addressable. */
static fj_status check_paged(const fj_attention_desc *d, bool paged)
{
    const struct {
        const char *name;
        int v;
    } f[4] = {
        {"page_size", d->page_size},
        {"num_pages", d->num_pages},
        {"max_pages", d->max_pages},
        {"block_table_stride", d->block_table_stride},
    };
    for (int i = 0; i < 4; i++) {
        if (!paged && f[i].v)
            return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                           "%s (%d) is set but the desc's features lack FJ_FEATURE_PAGED_KV (it "
                           "would be ignored): leave it 0",
                           f[i].name, f[i].v);
        if (paged && i < 3 && f[i].v < 1)
            return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                           "%s (%d) must be >= 1 with FJ_FEATURE_PAGED_KV (page_size: keys per "
                           "page; num_pages: pages in the k and v pools; max_pages: the block "
                           "table's columns)",
                           f[i].name, f[i].v);
    }
    if (paged && d->block_table_stride != 0 && d->block_table_stride < d->max_pages)
        return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                       "block_table_stride (%d) must be 0 (max_pages) or >= max_pages (%d): a "
                       "sequence's row of the block table holds max_pages entries",
                       d->block_table_stride, d->max_pages);
    return FJ_OK;
}

fj_status fj_problem_init(fj_problem *p, const fj_attention_desc *d)
{
    if (!p) return fj_fail(FJ_ERR_INTERNAL, "fj_problem_init: NULL problem");
    if (!d) return fj_fail(FJ_ERR_INVALID_ARGUMENT, "desc is NULL");
    memset(p, 0, sizeof *p);
    /* Zero is what a later version's field in this slot will mean "as
       before"; anything else is a desc not filled by the init function. */
    for (int i = 0; i < (int)(sizeof d->reserved / sizeof d->reserved[0]); i++)
        if (d->reserved[i])
            return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                           "reserved[%d] (%lld) must be zero: fill the desc with "
                           "fj_attention_desc_init, then set its fields by name",
                           i, (long long)d->reserved[i]);
    if (d->reserved_i32)
        return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                       "reserved_i32 (%d) must be zero: fill the desc with "
                       "fj_attention_desc_init, then set its fields by name",
                       (int)d->reserved_i32);

    if (d->features &
        ~(uint32_t)(FJ_FEATURE_ALIBI | FJ_FEATURE_SINKS | FJ_FEATURE_VARLEN | FJ_FEATURE_PAGED_KV))
        return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                       "features (0x%x) has unknown bits: only FJ_FEATURE_ALIBI (0x%x), "
                       "FJ_FEATURE_SINKS (0x%x), FJ_FEATURE_VARLEN (0x%x) and "
                       "FJ_FEATURE_PAGED_KV (0x%x) are defined",
                       (unsigned)d->features, (unsigned)FJ_FEATURE_ALIBI,
                       (unsigned)FJ_FEATURE_SINKS, (unsigned)FJ_FEATURE_VARLEN,
                       (unsigned)FJ_FEATURE_PAGED_KV);
    const bool varlen = (d->features & FJ_FEATURE_VARLEN) != 0;
    const bool paged = (d->features & FJ_FEATURE_PAGED_KV) != 0;
    fj_status ps = check_paged(d, paged);
    if (ps) return ps;

    struct {
        const char *name;
        int v;
    } sizes[] = {
        {"batch", d->batch},       {"heads_q", d->heads_q},   {"heads_kv", d->heads_kv},
        {"seqlen_q", d->seqlen_q}, {"seqlen_k", d->seqlen_k}, {"head_dim", d->head_dim},
    };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (sizes[i].v <= 0)
            return fj_fail(FJ_ERR_INVALID_ARGUMENT, "%s (%d) must be >= 1", sizes[i].name,
                           sizes[i].v);
    if (varlen && d->batch == INT_MAX)
        return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                       "batch (%d) must be below INT_MAX with FJ_FEATURE_VARLEN (cu_seqlens_q "
                       "and cu_seqlens_k have batch + 1 int32 entries)",
                       d->batch);
    if (d->head_dim > FJ_MAX_HEAD_DIM)
        return fj_fail(FJ_ERR_INVALID_ARGUMENT, "head_dim (%d) must be <= %d", d->head_dim,
                       FJ_MAX_HEAD_DIM);
    if (d->head_dim_v < 0 || d->head_dim_v > FJ_MAX_HEAD_DIM)
        return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                       "head_dim_v (%d) must be 0 (the same as head_dim) or in 1..%d (V's and "
                       "O's head dim)",
                       d->head_dim_v, FJ_MAX_HEAD_DIM);
    /* V's and O's rows: head_dim_v elements (0: head_dim's) */
    const int dim_v = d->head_dim_v ? d->head_dim_v : d->head_dim;
    if (d->heads_q % d->heads_kv != 0)
        return fj_fail(FJ_ERR_INVALID_ARGUMENT, "heads_q (%d) is not a multiple of heads_kv (%d)",
                       d->heads_q, d->heads_kv);
    if (!fj_dtype_name(d->dtype))
        return fj_fail(FJ_ERR_INVALID_ARGUMENT, "dtype (%d) is not one of FJ_F32, FJ_F16, FJ_BF16",
                       (int)d->dtype);
    if (!fj_causal_name(d->causal))
        return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                       "causal (%d) is not one of FJ_CAUSAL_NONE, FJ_CAUSAL_BOTTOM_RIGHT, "
                       "FJ_CAUSAL_TOP_LEFT",
                       (int)d->causal);
    if (d->window_left < -1)
        return fj_fail(FJ_ERR_INVALID_ARGUMENT, "window_left (%d) must be >= -1 (-1: unbounded)",
                       d->window_left);
    if (d->window_right < -1)
        return fj_fail(FJ_ERR_INVALID_ARGUMENT, "window_right (%d) must be >= -1 (-1: unbounded)",
                       d->window_right);
    if (!isfinite(d->scale))
        return fj_fail(FJ_ERR_INVALID_ARGUMENT, "scale (%g) must be finite (0: 1/sqrt(head_dim))",
                       (double)d->scale);
    /* Every backend computes scores in base 2, scale x log2(e) x q.k, with
       scale x log2(e) a float: beyond this bound it is infinite and a zero
       dot product would give NaN where the formula gives 0. */
    if (fabs((double)d->scale) * M_LOG2E > FLT_MAX)
        return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                       "scale (%g) must be at most %.6g in magnitude (FLT_MAX / log2(e): scores "
                       "are computed as scale x log2(e) x q.k in float32)",
                       (double)d->scale, FLT_MAX / M_LOG2E);

    const double scale =
        d->scale != 0.0f ? fabs((double)d->scale) : 1.0 / sqrt((double)d->head_dim);
    if (!(d->softcap >= 0.0f) || !isfinite(d->softcap))
        return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                       "softcap (%g) must be 0 (off) or finite and > 0 (scores become "
                       "softcap * tanh(score / softcap))",
                       (double)d->softcap);
    /* The backends compute the cap as softcap x log2(e) x tanh(q.k x scale /
       softcap) in float32, the tanh through 2^(2 log2(e) x ...): both factors
       must be finite. Only absurd caps (below 1e-38 x scale, above 1e38) fail. */
    if (d->softcap > 0.0f &&
        (2.0 * M_LOG2E * d->softcap > FLT_MAX || 2.0 * M_LOG2E * scale / d->softcap > FLT_MAX))
        return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                       "softcap (%g) must be in [%.6g, %.6g] with this scale (%g): softcap x "
                       "2 log2(e) and scale x 2 log2(e) / softcap are float32 factors and must "
                       "be finite",
                       (double)d->softcap, 2.0 * M_LOG2E * scale / FLT_MAX,
                       FLT_MAX / (2.0 * M_LOG2E), scale);

    /* lse has batch*heads_q*seqlen_q floats; every other count is smaller
       than some tensor extent checked below. (Varlen: heads_q*total_q,
       checked at each execute, fj_problem_varlen_extents.) */
    int64_t rows;
    if (!varlen &&
        (__builtin_mul_overflow((int64_t)d->batch * d->heads_q, (int64_t)d->seqlen_q, &rows) ||
         __builtin_mul_overflow(rows, (int64_t)sizeof(float), &rows)))
        return fj_fail(FJ_ERR_INVALID_ARGUMENT, "batch * heads_q * seqlen_q overflows");

    p->batch = d->batch;
    p->heads_q = d->heads_q;
    p->heads_kv = d->heads_kv;
    p->seqlen_q = d->seqlen_q;
    p->seqlen_k = d->seqlen_k;
    p->head_dim = d->head_dim;
    p->head_dim_v = dim_v;
    p->group = d->heads_q / d->heads_kv;
    p->dtype = d->dtype;
    p->causal = d->causal;
    p->window_left = d->window_left;
    p->window_right = d->window_right;
    p->scale = d->scale != 0.0f ? d->scale : (float)(1.0 / sqrt((double)d->head_dim));
    p->softcap = d->softcap > 0.0f ? d->softcap : 0.0f; /* -0: off, as 0 */
    p->alibi = (d->features & FJ_FEATURE_ALIBI) != 0;
    p->sinks = (d->features & FJ_FEATURE_SINKS) != 0;
    p->varlen = varlen;
    p->paged = paged;
    if (paged) {
        p->page_size = d->page_size;
        p->num_pages = d->num_pages;
        p->max_pages = d->max_pages;
        p->bt_stride = d->block_table_stride ? d->block_table_stride : d->max_pages;
    }
    p->diag_offset = d->causal == FJ_CAUSAL_TOP_LEFT ? 0 : (int64_t)d->seqlen_k - d->seqlen_q;
    p->masked = d->causal != FJ_CAUSAL_NONE || d->window_left >= 0 || d->window_right >= 0;

    /* paged: k and v are pools [num_pages, page_size, heads_kv, head_dim
       (v: head_dim_v)], their first axis the pages' (checked whole here) */
    struct {
        const char *name;
        const int64_t *in;
        int64_t *out;
        int seq, heads, dim;
        bool pool;
    } t[4] = {
        {"q_stride", d->q_stride, p->q_stride, d->seqlen_q, d->heads_q, d->head_dim, false},
        {"k_stride", d->k_stride, p->k_stride, paged ? d->page_size : d->seqlen_k, d->heads_kv,
         d->head_dim, paged},
        {"v_stride", d->v_stride, p->v_stride, paged ? d->page_size : d->seqlen_k, d->heads_kv,
         dim_v, paged},
        {"o_stride", d->o_stride, p->o_stride, d->seqlen_q, d->heads_q, dim_v, false},
    };
    int es = (int)fj_dtype_size(d->dtype); /* dtype checked above */
    for (int i = 0; i < 4; i++) {
        /* varlen: no batch axis; the extents of one sequence of the longest
           length here, those of the whole buffers at each execute */
        int64_t n[3] = {t[i].pool ? d->num_pages : varlen ? 1 : d->batch, t[i].seq, t[i].heads};
        bool dense = all_zero(t[i].in);
        /* v's and o's rows are head_dim_v long: say so where it differs */
        const char *dim_name =
            (i == 2 || i == 3) && dim_v != d->head_dim ? "head_dim_v" : "head_dim";
        if (t[i].pool) {
            if (!dense) memcpy(t[i].out, t[i].in, 3 * sizeof(int64_t));
            else if (!dense_strides(t[i].out, t[i].seq, t[i].heads, t[i].dim))
                return fail_extent(t[i].name, t[i].out, n, t[i].dim, dim_name, true);
            fj_status s = check_strides(t[i].name, t[i].out, n, t[i].dim, dim_name, es, dense);
            if (s) return fj_fail_prefix(s, "the paged pool (pages x page_size x heads_kv)");
            continue;
        }
        if (varlen && !dense && t[i].in[FJ_AXIS_BATCH] != 0)
            return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                           "%s[0] (batch axis) is %lld but must be 0 with FJ_FEATURE_VARLEN: the "
                           "sequences are packed along the seq axis, where cu_seqlens place "
                           "them (all-zero strides: packed [token, heads, head_dim])",
                           t[i].name, (long long)t[i].in[FJ_AXIS_BATCH]);
        if (!dense) memcpy(t[i].out, t[i].in, 3 * sizeof(int64_t));
        else if (!dense_strides(t[i].out, t[i].seq, t[i].heads, t[i].dim))
            return fail_extent(t[i].name, t[i].out, n, t[i].dim, dim_name, true);
        if (varlen) t[i].out[FJ_AXIS_BATCH] = 0;
        fj_status s = check_strides(t[i].name, t[i].out, n, t[i].dim, dim_name, es, dense);
        if (s) return s;
    }
    /* varlen: the token axis holds every sequence's rows, so it is checked
       as holding at least two whatever the longest sequence */
    int64_t on[3] = {varlen ? 1 : d->batch, varlen && d->seqlen_q < 2 ? 2 : d->seqlen_q,
                     d->heads_q};
    return check_output_rows(p->o_stride, on, dim_v);
}

fj_status fj_problem_varlen_extents(const fj_problem *p, int32_t total_q, int32_t total_k)
{
    struct {
        const char *count, *tensors;
        int32_t tokens;
        int heads, dim;
        const int64_t *s;
    } t[4] = {
        {"total_q", "q", total_q, p->heads_q, p->head_dim, p->q_stride},
        {"total_k", "k", total_k, p->heads_kv, p->head_dim, p->k_stride},
        {"total_k", "v", total_k, p->heads_kv, p->head_dim_v, p->v_stride},
        {"total_q", "o", total_q, p->heads_q, p->head_dim_v, p->o_stride},
    };
    const int es = (int)fj_dtype_size(p->dtype);
    for (int i = 0; i < 4; i++) {
        if (t[i].tokens == 0) continue;
        int64_t n[3] = {1, t[i].tokens, t[i].heads}, e = extent(t[i].s, n, t[i].dim), bytes;
        if (e < 0 || __builtin_mul_overflow(e, (int64_t)es, &bytes) ||
            (uint64_t)bytes > (uint64_t)SIZE_MAX)
            return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                           "%s (%d): %s of that many tokens (seq stride %lld) has an extent "
                           "that overflows int64 in bytes",
                           t[i].count, (int)t[i].tokens, t[i].tensors, (long long)t[i].s[1]);
    }
    /* the plan checked the output's rows for one sequence; the whole
       batch's token axis may still run into the next head's rows (a
       [heads, tokens, head_dim] layout too short for total_q tokens) */
    int64_t on[3] = {1, total_q, p->heads_q};
    fj_status s = total_q > 0 ? check_output_rows(p->o_stride, on, p->head_dim_v) : FJ_OK;
    if (s) return fj_fail_prefix(s, "total_q (%d)", (int)total_q);
    int64_t lse;
    if (__builtin_mul_overflow((int64_t)p->heads_q * total_q, (int64_t)sizeof(float), &lse) ||
        (uint64_t)lse > (uint64_t)SIZE_MAX)
        return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                       "total_q (%d): lse's heads_q (%d) x total_q floats overflow", (int)total_q,
                       p->heads_q);
    return FJ_OK;
}

void fj_merge_desc_init(fj_merge_desc *d, int batch, int heads_q, int seqlen_q, int head_dim,
                        fj_dtype dtype)
{
    if (!d) return;
    memset(d, 0, sizeof *d);
    d->batch = batch;
    d->heads_q = heads_q;
    d->seqlen_q = seqlen_q;
    d->head_dim = head_dim;
    d->dtype = dtype;
}

fj_status fj_merge_problem_init(fj_merge_problem *m, const fj_merge_desc *d)
{
    if (!m) return fj_fail(FJ_ERR_INTERNAL, "fj_merge_problem_init: NULL problem");
    if (!d) return fj_fail(FJ_ERR_INVALID_ARGUMENT, "fj_merge: desc is NULL");
    memset(m, 0, sizeof *m);
    for (int i = 0; i < (int)(sizeof d->reserved / sizeof d->reserved[0]); i++)
        if (d->reserved[i])
            return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                           "fj_merge: reserved[%d] (%lld) must be zero: fill the desc with "
                           "fj_merge_desc_init, then set its fields by name",
                           i, (long long)d->reserved[i]);
    struct {
        const char *name;
        int v;
    } sizes[] = {
        {"batch", d->batch},
        {"heads_q", d->heads_q},
        {"seqlen_q", d->seqlen_q},
        {"head_dim", d->head_dim},
    };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (sizes[i].v <= 0)
            return fj_fail(FJ_ERR_INVALID_ARGUMENT, "fj_merge: %s (%d) must be >= 1", sizes[i].name,
                           sizes[i].v);
    if (!fj_dtype_name(d->dtype))
        return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                       "fj_merge: dtype (%d) is not one of FJ_F32, FJ_F16, FJ_BF16", (int)d->dtype);
    int64_t rows;
    if (__builtin_mul_overflow((int64_t)d->batch * d->heads_q, (int64_t)d->seqlen_q, &rows) ||
        __builtin_mul_overflow(rows, (int64_t)sizeof(float), &rows))
        return fj_fail(FJ_ERR_INVALID_ARGUMENT, "fj_merge: batch * heads_q * seqlen_q overflows");
    m->batch = d->batch;
    m->heads_q = d->heads_q;
    m->seqlen_q = d->seqlen_q;
    m->head_dim = d->head_dim;
    m->dtype = d->dtype;
    struct {
        const char *name;
        const int64_t *in;
        int64_t *out;
    } t[3] = {
        {"a_stride", d->a_stride, m->a_stride},
        {"b_stride", d->b_stride, m->b_stride},
        {"o_stride", d->o_stride, m->o_stride},
    };
    int es = (int)fj_dtype_size(d->dtype);
    int64_t n[3] = {d->batch, d->seqlen_q, d->heads_q};
    for (int i = 0; i < 3; i++) {
        bool dense = all_zero(t[i].in);
        fj_status s;
        if (!dense) memcpy(t[i].out, t[i].in, 3 * sizeof(int64_t));
        else if (!dense_strides(t[i].out, d->seqlen_q, d->heads_q, d->head_dim))
            return fj_fail_prefix(fail_extent(t[i].name, t[i].out, n, d->head_dim, "head_dim",
                                              true),
                                  "fj_merge");
        if ((s = check_strides(t[i].name, t[i].out, n, d->head_dim, "head_dim", es, dense)))
            return fj_fail_prefix(s, "fj_merge");
    }
    fj_status s = check_output_rows(m->o_stride, n, d->head_dim);
    return s ? fj_fail_prefix(s, "fj_merge") : FJ_OK;
}

fj_status fj_attention_desc_validate(const fj_attention_desc *d)
{
    fj_clear_error();
    fj_problem p;
    return fj_problem_init(&p, d);
}

static int64_t extent_of(const int64_t s[3], int batch, int seq, int heads, int head_dim)
{
    int64_t n[3] = {batch, seq, heads};
    return extent(s, n, head_dim);
}

int64_t fj_problem_q_extent(const fj_problem *p)
{
    return extent_of(p->q_stride, p->batch, p->seqlen_q, p->heads_q, p->head_dim);
}

static int64_t kv_extent(const fj_problem *p, const int64_t stride[3], int dim)
{
    if (p->paged) return extent_of(stride, p->num_pages, p->page_size, p->heads_kv, dim);
    return extent_of(stride, p->batch, p->seqlen_k, p->heads_kv, dim);
}

int64_t fj_problem_k_extent(const fj_problem *p) { return kv_extent(p, p->k_stride, p->head_dim); }

int64_t fj_problem_v_extent(const fj_problem *p)
{
    return kv_extent(p, p->v_stride, p->head_dim_v);
}

int64_t fj_problem_o_extent(const fj_problem *p)
{
    return extent_of(p->o_stride, p->batch, p->seqlen_q, p->heads_q, p->head_dim_v);
}

double fj_attention_flops(const fj_attention_desc *d)
{
    if (!d) return 0.0;
    /* 2 x D per score (Q K^T) and 2 x Dv per score (P V) */
    const int dv = d->head_dim_v > 0 ? d->head_dim_v : d->head_dim;
    double f = 2.0 * d->batch * d->heads_q * (double)d->seqlen_q * d->seqlen_k *
               ((double)d->head_dim + dv);
    if (d->causal != FJ_CAUSAL_NONE && d->seqlen_q == d->seqlen_k) f *= 0.5;
    return f;
}

const char *fj_mask_kind_name(uint32_t mask)
{
    static const char *const names[] = {
        [FJ_MASK_NONE] = "nomask",
        [FJ_MASK_CAUSAL] = "causal",
        [FJ_MASK_WINDOW] = "window",
        [FJ_MASK_CAUSAL_WINDOW] = "causal_window",
    };
    return mask < sizeof names / sizeof names[0] ? names[mask] : NULL;
}
