/* Shared test machinery: seeded random problems, a double-precision oracle
 * written plainly from docs/semantics.md (independent of the library's own
 * mask code), poisoned outputs, and error measures. Every backend's suite
 * uses these, so they all answer to the same oracle. */
#ifndef FJ_TEST_HARNESS_H
#define FJ_TEST_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "flashjit.h"

/* ---- random numbers ----------------------------------------------------- */

typedef struct fjt_rng {
    uint64_t s;
} fjt_rng;

/* The suite's seed: FLASHJIT_TEST_SEED if set, else fresh from the clock;
 * printed once ("seed: N; rerun with FLASHJIT_TEST_SEED=N") so any failure
 * can be replayed. */
uint64_t fjt_seed(void);
void fjt_rng_init(fjt_rng *r, uint64_t seed);
uint64_t fjt_next(fjt_rng *r);
double fjt_uniform(fjt_rng *r);            /* [0, 1) */
int fjt_range(fjt_rng *r, int lo, int hi); /* [lo, hi] */

/* ---- host tensors ---------------------------------------------------------- */

/* The sequences of a variable-length batch (FJ_FEATURE_VARLEN), packed one
 * after another: sequence b holds len_q[b] query tokens and len_k[b] key
 * tokens, of which it uses the first used_k[b] (seqused_k) when has_used,
 * else all; pad_q and pad_k tokens follow the last sequence (total_q and
 * total_k count them; the library must leave o's and lse's untouched). */
#define FJT_VARLEN_MAX_SEQS 16
typedef struct fjt_varlen {
    int nseq; /* 0: a dense problem */
    int len_q[FJT_VARLEN_MAX_SEQS], len_k[FJT_VARLEN_MAX_SEQS], used_k[FJT_VARLEN_MAX_SEQS];
    bool has_used;
    int pad_q, pad_k;
} fjt_varlen;

/* The keys sequence b uses. */
static inline int fjt_varlen_keys(const fjt_varlen *v, int b)
{
    return v->has_used ? v->used_k[b] : v->len_k[b];
}

/* A paged KV cache (FJ_FEATURE_PAGED_KV) made by fjt_problem_make_paged:
 * the sequences' keys scattered over pools of pages, each sequence's pages
 * named by its row of a block table. Pool pages and rows no sequence uses
 * are NaN (a backend that reads them shows it); a row's entries past the
 * sequence's pages (unused tail entries) hold values outside the pool. */
typedef enum fjt_pool_layout {
    FJT_POOL_DENSE,      /* [num_pages, page_size, heads_kv, dim], the desc's zero strides */
    FJT_POOL_PADDED,     /* the same with 3 elements after each head's row, 5 after each
                            row, 7 after each page */
    FJT_POOL_HEAD_MAJOR, /* [num_pages, heads_kv, page_size, dim] */
} fjt_pool_layout;

typedef struct fjt_paged {
    int page_size;   /* keys per page, >= 1 (0 in fjt_problem: not paged) */
    int spare_pages; /* pool pages beyond those the sequences use */
    int spare_cols;  /* block-table columns beyond the longest sequence's pages */
    int stride_pad;  /* block_table_stride = max_pages + stride_pad (0: the desc's 0) */
    bool in_order;   /* each sequence's pages consecutive in the pool, one run (else
                        shuffled: pages out of order) */
    fjt_pool_layout layout;
    bool dense_q; /* q, o and lse dense [batch, seqlen_q, ...] (each sequence seqlen_q
                     queries); else varlen-packed (FJ_FEATURE_VARLEN too) */
} fjt_paged;

typedef struct fjt_problem {
    fj_attention_desc d;
    int64_t qs[3], ks[3], vs[3], os[3]; /* resolved strides */
    size_t q_elems, k_elems, v_elems, o_elems, lse_elems;
    void *q, *k, *v; /* host, dtype d.dtype, random in [-1, 1) */
    double *ref_o;   /* oracle output, dense [b, sq, hq, head_dim_v] (fjt_dim_v) */
    double *ref_lse; /* oracle lse, [b, hq, sq] */
    double *ref_mag; /* [b, hq, sq]: sum_j p_j |V_j| (2-norms) of the row, the size of the
                        terms its output sums (fjt_error.mag_rel_max) */
    /* FJ_FEATURE_ALIBI / FJ_FEATURE_SINKS: host float32 [heads_q], drawn
       after q, k and v (slopes in [0, 0.5), sinks in [-2, 3)); a test may
       set them before fjt_problem_oracle. NULL when the feature is off. */
    float *alibi, *sinks;
    /* FJ_FEATURE_VARLEN (fjt_problem_make_varlen): the sequences, and the
       execute's arrays and counts for them (host copies; used_k NULL
       without seqused_k). q, k, v, the output and the oracle's ref_o are
       then packed [total tokens, heads, head_dim] (the desc's seq and head
       strides), ref_lse and ref_mag [heads_q, total_q] (NaN past the last
       sequence); the rest of the struct keeps its meaning. Keys a
       sequence holds but does not use, and the pad tokens, are NaN: a
       backend that reads them shows it. */
    fjt_varlen vl;
    int32_t *cu_q, *cu_k, *used_k;
    int total_q, total_k;
    /* FJ_FEATURE_PAGED_KV (fjt_problem_make_paged; pg.page_size 0
       otherwise): k and v are then the pools (ks, vs their strides, k_elems
       and v_elems their extents), block_table [batch, bt_stride] host int32,
       used_k each sequence's KV length. With pg.dense_q the problem reads
       as a dense one (vl.nseq 0; ref_o, ref_lse, ref_mag in the dense
       layouts); else as a varlen one (total_k 0). */
    fjt_paged pg;
    int32_t *block_table;
    int bt_stride;
} fjt_problem;

/* Whether query row i of the dense problem d sees at least one key under
   its mask (docs/semantics.md's rule). A row that sees none has O exactly 0
   and lse -inf (or its sink); one that sees keys whose weights vanish next
   to a sink has lse equal to the sink in double, yet O need not be 0. */
bool fjt_row_sees_keys(const fj_attention_desc *d, int i);

/* Runs the oracle again on every row (after a test changed the inputs,
   e.g. the sinks). False on allocation failure, and for a paged problem
   (its oracle runs once, in fjt_problem_make_paged). */
bool fjt_problem_oracle(fjt_problem *p);

/* Allocates inputs for d (strides as given, zero = dense), fills them with
 * random values exactly representable in the dtype, and runs the oracle
 * (on threads, one per online core). Returns false on allocation failure. */
bool fjt_problem_make(fjt_problem *p, const fj_attention_desc *d, fjt_rng *rng);
/* The same with the oracle on query rows rows[0..n_rows) of every batch and
 * head only (problems too long for the whole oracle); the other rows' ref_o
 * and ref_lse are NaN, and fjt_compare checks them for NaN only. False also
 * when a row is out of range. */
bool fjt_problem_make_rows(fjt_problem *p, const fj_attention_desc *d, fjt_rng *rng,
                           const int *rows, int n_rows);
/* A variable-length batch: d has FJ_FEATURE_VARLEN, batch = vl->nseq
 * (1..FJT_VARLEN_MAX_SEQS), seqlen_q and seqlen_k at least every
 * sequence's queries and used keys, batch strides 0. The oracle runs on
 * each sequence as the dense problem of its own lengths (with_oracle false:
 * the inputs alone). False on allocation failure or lengths that break
 * those rules. */
bool fjt_problem_make_varlen(fjt_problem *p, const fj_attention_desc *d, const fjt_varlen *vl,
                             fjt_rng *rng, bool with_oracle);

/* A paged KV cache: d has FJ_FEATURE_PAGED_KV (and FJ_FEATURE_VARLEN
 * unless pg->dense_q), batch = vl->nseq; vl gives each sequence's queries
 * (with dense_q every len_q must be d's seqlen_q and there are no pad
 * tokens) and its KV length (fjt_varlen_keys), all within d's maxima; d's
 * page fields and k/v strides are ignored (the problem's desc, p->d, gets
 * them from pg), its q/o strides with dense_q either zero or with the
 * batch stride seqlen_q x the seq stride. The oracle runs on each sequence
 * as the dense problem of its own lengths on the keys before they are
 * paged (with_oracle false: the inputs alone). rng also draws the page
 * order. False on allocation failure or inputs that break those rules. */
bool fjt_problem_make_paged(fjt_problem *p, const fj_attention_desc *d, const fjt_varlen *vl,
                            const fjt_paged *pg, fjt_rng *rng, bool with_oracle);

/* The desc fjt_problem_make_paged gives its problem: d with the page
 * fields (num_pages: the sequences' pages + spare_pages; max_pages: the
 * longest's + spare_cols) and the pool's k/v strides of pg. False when the
 * lengths are past FJT_VARLEN_MAX_SEQS. */
bool fjt_paged_desc(fj_attention_desc *d, const fjt_varlen *vl, const fjt_paged *pg);

/* "page_size=16 pages=9 max_pages=3 bt_stride=3 shuffled pool=dense
 * q=dense": pg's pages in d (a paged desc), for messages ("" when
 * pg->page_size is 0). */
void fjt_paged_str(const fjt_paged *pg, const fj_attention_desc *d, char *buf, size_t n);

/* The inputs alone, no oracle (ref_o and ref_lse NULL): for timing. */
bool fjt_problem_make_inputs(fjt_problem *p, const fj_attention_desc *d, fjt_rng *rng);
void fjt_problem_free(fjt_problem *p);

/* Fills n elements with the poison pattern (NaN in every dtype). */
void fjt_poison(void *buf, fj_dtype t, size_t n);
void fjt_poison_f32(float *buf, size_t n);

/* Value of element i of a dtype buffer as double. */
double fjt_load(const void *buf, fj_dtype t, size_t i);
/* Stores double x rounded (nearest-even) into element i. */
void fjt_store(void *buf, fj_dtype t, size_t i, double x);

/* ---- checking ------------------------------------------------------------- */

typedef struct fjt_error {
    double rel_fro;        /* ||o - ref|| / ||ref|| over all output elements */
    double row_rel_max;    /* the same per (batch, row, head), the worst row that sees a key */
    double max_abs;        /* largest |o - ref| */
    double lse_max_abs;    /* largest |lse - ref_lse| where finite (0 when no lse) */
    size_t nan_count;      /* NaN or inf in o; non-finite lse where ref is finite */
    size_t lse_mismatch;   /* lse -inf where the reference is not, or the reverse */
    size_t gaps_written;   /* output elements outside the tensor's rows that changed (varlen:
                              and lse entries of tokens past the last sequence) */
    size_t empty_not_zero; /* rows that see no key whose output is not exactly zero */
    double mag_rel_max;    /* the worst row's ||o - ref|| / sum_j p_j ||V_j||: the error against
                            the size of the terms summed, not of their sum (which cancels
                            towards 0 on some rows, and then rel_fro says nothing) */
} fjt_error;

/* Compares a backend's output o (host copy, the desc's o strides, poisoned
 * before the run over o_elems) and lse (NULL: not checked) with the oracle.
 * p must have been made with the oracle (fjt_problem_make or _rows). */
fjt_error fjt_compare(const fjt_problem *p, const void *o, const float *lse);

/* Whether an output is within tol of the oracle: by the relative Frobenius
 * error, or, where rows' outputs cancel towards 0 (random V of both signs;
 * most often at tiny head dims), by every row's error against the size of
 * the terms it sums (mag_rel_max), the bound float arithmetic gives: there
 * rel_fro measures rounding against a tiny sum (a d1 bf16 decode row of
 * output 1e-3 summing terms of 0.5 is off by 4 % of itself and 3e-4 of its
 * terms). NaN fails both. */
static inline bool fjt_within(const fjt_error *e, double tol)
{
    return e->rel_fro <= tol || e->mag_rel_max <= tol;
}

/* The tolerance of the issue for a dtype: relative Frobenius error against
 * the oracle. F32 1e-5, F16 2e-3, BF16 1.6e-2. */
double fjt_tolerance(fj_dtype t);

/* Runs the problem on ctx (host memory via fj_malloc/fj_copy) with output
 * and lse poisoned; fills *err. Returns the status of execute. A varlen
 * problem's arrays go into fj_execute_extras (fjt_varlen_extras). */
fj_status fjt_run(fj_context *ctx, const fjt_problem *p, fjt_error *err, bool with_lse);
/* p through an existing plan (made for p's desc, or for one with longer
 * maxima: varlen and paged plans run any batch that fits), with o and lse
 * poisoned, on ctx's memory, the extras (ALiBi, sinks, varlen offsets, the
 * block table) copied there; the comparison with the oracle into *err, and
 * without lse a written lse buffer counted as gaps. The execute's status. */
fj_status fjt_run_plan(fj_context *ctx, const fj_plan *plan, const fjt_problem *p, bool with_lse,
                       fjt_error *err);

/* The varlen and paged fields of x for p (cu_seqlens, seqused_k, the
 * block table: copies of p's in ctx's memory, which *mem holds,
 * FJT_EXTRAS_MEM pointers for fjt_varlen_free; total_q, total_k). Nothing
 * for a dense problem. */
#define FJT_EXTRAS_MEM 4
fj_status fjt_varlen_extras(fj_context *ctx, const fjt_problem *p, fj_execute_extras *x,
                            void *mem[FJT_EXTRAS_MEM]);
void fjt_varlen_free(fj_context *ctx, void *mem[FJT_EXTRAS_MEM]);

/* "17/17,0/5(3)": each sequence's queries/keys(used), for messages. */
void fjt_varlen_str(const fjt_varlen *v, char *buf, size_t n);

/* V's and O's head dim: head_dim_v, or head_dim when that is 0. */
int fjt_dim_v(const fj_attention_desc *d);

/* One line describing the desc, for failure messages. */
const char *fjt_desc_str(const fj_attention_desc *d);

/* ---- random problems ------------------------------------------------------ */

/* The axes a suite samples from. Every other property (GQA ratio, causal
 * kind, window, strides layout, scale) is drawn from fixed menus that cover
 * every kind: MHA/GQA 8:1/MQA; no mask/bottom-right/top-left; no window,
 * left only, right only, both (small windows so some rows see no key); dense,
 * BHSD and padded (gaps between rows, checked untouched) strides; default or
 * custom scale. */
typedef struct fjt_axes {
    const int *seqlens;
    int n_seqlens;
    const int *head_dims;
    int n_head_dims;
    const fj_dtype *dtypes;
    int n_dtypes;
    double max_work; /* cap on batch*heads_q*sq*sk*head_dim (oracle cost) */
    /* V's head dims (head_dim_v), drawn after the rest; none (0): V's rows
       as Q's (head_dim_v 0). A drawn value equal to head_dim is set as 0
       or as itself, half the time each. */
    const int *head_dims_v;
    int n_head_dims_v;
} fjt_axes;

/* Draws a problem; strides point into buffers fjt_problem_make allocates. */
void fjt_random_desc(fjt_rng *rng, const fjt_axes *axes, fj_attention_desc *d);

#endif
