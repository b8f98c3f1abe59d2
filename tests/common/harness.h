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

typedef struct fjt_problem {
    fj_attention_desc d;
    int64_t qs[3], ks[3], vs[3], os[3]; /* resolved strides */
    size_t q_elems, k_elems, v_elems, o_elems, lse_elems;
    void *q, *k, *v; /* host, dtype d.dtype, random in [-1, 1) */
    double *ref_o;   /* oracle output, dense [b, sq, hq, d] */
    double *ref_lse; /* oracle lse, [b, hq, sq] */
    double *ref_mag; /* [b, hq, sq]: sum_j p_j |V_j| (2-norms) of the row, the size of the
                        terms its output sums (fjt_error.mag_rel_max) */
    /* FJ_FEATURE_ALIBI / FJ_FEATURE_SINKS: host float32 [heads_q], drawn
       after q, k and v (slopes in [0, 0.5), sinks in [-2, 3)); a test may
       set them before fjt_problem_oracle. NULL when the feature is off. */
    float *alibi, *sinks;
} fjt_problem;

/* Runs the oracle again on every row (after a test changed the inputs,
   e.g. the sinks). False on allocation failure. */
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
    size_t gaps_written;   /* output elements outside the tensor's rows that changed */
    size_t empty_not_zero; /* rows that see no key whose output is not exactly zero */
    double mag_rel_max;    /* the worst row's ||o - ref|| / sum_j p_j ||V_j||: the error against
                            the size of the terms summed, not of their sum (which cancels
                            towards 0 on some rows, and then rel_fro says nothing) */
} fjt_error;

/* Compares a backend's output o (host copy, the desc's o strides, poisoned
 * before the run over o_elems) and lse (NULL: not checked) with the oracle.
 * p must have been made with the oracle (fjt_problem_make or _rows). */
fjt_error fjt_compare(const fjt_problem *p, const void *o, const float *lse);

/* The tolerance of the issue for a dtype: relative Frobenius error against
 * the oracle. F32 1e-5, F16 2e-3, BF16 1.6e-2. */
double fjt_tolerance(fj_dtype t);

/* Runs the problem on ctx (host memory via fj_malloc/fj_copy) with output
 * and lse poisoned; fills *err. Returns the status of execute. */
fj_status fjt_run(fj_context *ctx, const fjt_problem *p, fjt_error *err, bool with_lse);

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
} fjt_axes;

/* Draws a problem; strides point into buffers fjt_problem_make allocates. */
void fjt_random_desc(fjt_rng *rng, const fjt_axes *axes, fj_attention_desc *d);

#endif
