/* The conformance cases: one list of attention problems that every backend
 * runs (ggml's test-backend-ops is the model). A case is a small record: its
 * problem (the desc, strides included), whether lse is written, how strict the
 * check is, and which backends must support it. It prints itself as one
 * string (fjt_case_str), and states its own tolerance per backend
 * (fjt_case_bounds). The list (fjt_cases_build) is shared by the driver
 * (conformance.c) and by the backend suites that need a case of their own
 * (test_cpu_tiled's forced blocks, test_cuda_grid's split-KV plans). */
#ifndef FJT_CASE_H
#define FJT_CASE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "flashjit.h"
#include "harness.h"

/* How a case's strides were made (the case string names it). */
typedef enum fjt_layout {
    FJT_DENSE,        /* [batch, seq, heads, dim], the zero strides */
    FJT_BHSD,         /* [batch, heads, seq, dim] */
    FJT_PADDED,       /* BSHD with 8 elements after each row, 16 after each seq step, 8 per batch */
    FJT_PADDED3,      /* BSHD with 3 elements after each row, 5 after each batch */
    FJT_KV_BROADCAST, /* k and v batch stride 0: every batch entry reads the same keys */
    FJT_Q_BROADCAST,  /* q batch stride 0: every batch entry asks the same queries */
    FJT_CUSTOM,       /* written by hand (overlapping rows, stride-0 heads or keys) */
    FJT_LAYOUT_COUNT
} fjt_layout;

const char *fjt_layout_name(fjt_layout l);

/* Sets the four tensors' strides of d for layout l (FJT_CUSTOM: unchanged). */
void fjt_set_layout(fj_attention_desc *d, fjt_layout l);

/* Bit of a backend in fjt_case.must_run. */
#define FJT_ON(backend) (1u << (unsigned)(backend))
#define FJT_ON_CPU (FJT_ON(FJ_BACKEND_CPU) | FJT_ON(FJ_BACKEND_CPU_REFERENCE))

typedef struct fjt_case {
    char group[24]; /* the family it belongs to: "masks", "sampled", "decode", ... */
    char name[48];  /* unique in the list; "group/name" is what --filter matches */
    fj_attention_desc d;
    fjt_layout layout;
    bool lse;               /* lse written and checked */
    const char *knob;       /* "NAME=VALUE" set in the environment while a plan is created */
    unsigned must_run;      /* FJT_ON bits: backends that must not answer UNSUPPORTED */
    double rel_tol;         /* relative Frobenius error vs the oracle; 0: the dtype's */
    double row_tol;         /* also each row's relative error (0: not checked) */
    double lse_tol;         /* |lse - the oracle's| when above the backend's own (0: none) */
    const int *oracle_rows; /* the query rows the oracle computes (NULL: every row) */
    int n_oracle_rows;
    bool heavy; /* skipped by --quick (the sanitizer builds' default) */
    /* varlen.nseq > 0: d has FJ_FEATURE_VARLEN (batch = nseq, the maxima
       seqlen_q and seqlen_k) and these are its sequences (the oracle runs
       on each; oracle_rows unused) */
    fjt_varlen varlen;
    /* paged.page_size > 0: d has FJ_FEATURE_PAGED_KV (its page fields as
       fjt_paged_desc gives them) and varlen holds the sequences (with
       paged.dense_q each has seqlen_q queries and d lacks
       FJ_FEATURE_VARLEN); the harness pages their keys */
    fjt_paged paged;
} fjt_case;

/* A case of d with the layout applied, lse on, the CPU backends required,
 * the default tolerance. */
fjt_case fjt_case_make(const char *group, const char *name, const fj_attention_desc *d,
                       fjt_layout layout, bool lse);

/* "group/name b2 hq8 hkv1 sq65 sk17 d64 bf16 causal=bottom-right window=-1,-1
 * scale=0.125 layout=bhsd lse=on" (and " varlen=17/17,0/5(3)" for a varlen
 * case: each sequence's queries/keys(used)): the one place a case's text is
 * made. */
void fjt_case_str(const fjt_case *c, char *buf, size_t n);

/* What a backend's output of c may differ by. */
typedef struct fjt_bounds {
    double rel_fro;    /* relative Frobenius error vs the double oracle */
    double row_rel;    /* the worst row's relative error vs the oracle (0: not checked) */
    double lse_abs;    /* |lse - the oracle's| where finite */
    double ref_factor; /* rel_fro <= ref_factor x the cpu-reference's error + ref_floor */
    double ref_floor;  /*   (FlashAttention's rule; ref_factor 0: not checked) */
    double ref_dist;   /* relative Frobenius distance from the cpu-reference's output (0: no) */
    double lse_ref;    /* |lse - the cpu-reference's| (0: not checked) */
} fjt_bounds;

/* c's tolerance on backend b. Every backend: the dtype's tolerance (or the
 * case's own) against the oracle, no NaN, nothing written between output
 * rows, rows that see no key exactly 0 with lse -inf. The CPU tiled backend
 * also stays within that distance of the reference's output and 1e-4 of its
 * lse; CUDA within twice the reference's error plus half an output ulp
 * (FlashAttention's rule), its lse within 1e-3 (f16) or 1e-2 (bf16). */
fjt_bounds fjt_case_bounds(const fjt_case *c, fj_backend b);

/* b*hq*sq*sk*d: the oracle's work, which sets a case's run time. */
double fjt_case_work(const fjt_case *c);

/* The seed of c's inputs: the suite's seed mixed with c's name, so that one
 * case replays alone (--filter) with the same numbers. */
uint64_t fjt_case_seed(const fjt_case *c, uint64_t suite_seed);

/* ---- the list -------------------------------------------------------------- */

typedef struct fjt_case_list {
    fjt_case *cases;
    int n, cap;
} fjt_case_list;

/* Appends c; false when out of memory. */
bool fjt_case_list_add(fjt_case_list *l, const fjt_case *c);
void fjt_case_list_free(fjt_case_list *l);

/* A random problem as the tiled-grid family draws them (seqlens 1..max_seqlen,
 * the head dims of the reference's grid, every dtype, MHA/GQA 8:1/MQA, every
 * causal kind and window kind, a scale in [1, 4] when sharp, the oracle's cost
 * capped, dense/BHSD/padded strides): for the suites that force a backend's
 * parameters and need problems of their own. */
fjt_case fjt_case_draw(fjt_rng *rng, const char *group, const char *name, int max_seqlen,
                       bool sharp);

/* Every case, the random ones drawn from seed. False when out of memory. */
bool fjt_cases_build(fjt_case_list *l, uint64_t seed);

#endif
