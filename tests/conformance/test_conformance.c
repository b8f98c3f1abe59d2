/* The conformance machinery itself: the list (stable for a seed, unique
 * names, every family at its size, every kind the driver promises: masks,
 * GQA/MQA, layouts, dtypes, lse on and off, odd sizes, decode), the judge
 * (each way an output can be wrong is caught and named; UNSUPPORTED is a SKIP
 * only where a case allows it), and --perf's rows against `flashjit bench`'s
 * for the same problems (argv[1]: the built flashjit; argv[2]: the built
 * fj_conformance). */
#include <math.h>
#include <regex.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "case.h"
#include "check.h"
#include "cli_run.h"
#include "harness.h"

static const char *flashjit_path, *conformance_path;

static int count_group(const fjt_case_list *l, const char *group)
{
    int n = 0;
    for (int i = 0; i < l->n; i++) n += !strcmp(l->cases[i].group, group);
    return n;
}

static void test_list_stable_and_unique(void **state)
{
    (void)state;
    fjt_case_list a = {0}, b = {0}, c = {0};
    assert_true(fjt_cases_build(&a, 1234));
    assert_true(fjt_cases_build(&b, 1234));
    assert_true(fjt_cases_build(&c, 99));
    assert_int_equal(a.n, b.n);
    assert_int_equal(a.n, c.n);
    bool same = true, differs = false;
    for (int i = 0; i < a.n; i++) {
        same &= !memcmp(&a.cases[i], &b.cases[i], sizeof a.cases[i]);
        differs |= memcmp(&a.cases[i].d, &c.cases[i].d, sizeof a.cases[i].d) != 0;
    }
    assert_true(same);    /* a seed names a list */
    assert_true(differs); /* and another seed draws other random shapes */
    for (int i = 0; i < a.n; i++) {
        assert_int_equal(fj_attention_desc_validate(&a.cases[i].d), FJ_OK);
        for (int j = i + 1; j < a.n; j++)
            if (!strcmp(a.cases[i].group, a.cases[j].group) &&
                !strcmp(a.cases[i].name, a.cases[j].name))
                fail_msg("two cases named %s/%s", a.cases[i].group, a.cases[i].name);
    }
    /* the seed of a case depends on its name only, not its place */
    assert_true(fjt_case_seed(&a.cases[0], 7) != fjt_case_seed(&a.cases[1], 7));
    assert_true(fjt_case_seed(&a.cases[5], 7) == fjt_case_seed(&b.cases[5], 7));
    fjt_case_list_free(&a);
    fjt_case_list_free(&b);
    fjt_case_list_free(&c);
}

/* Each family at the size of the suite it came from (test_reference,
 * test_cpu_tiled, test_cuda_grid), so none shrinks unnoticed. */
static void test_families(void **state)
{
    (void)state;
    static const struct {
        const char *group;
        int n;
    } sizes[] = {
        {"ref-random", 150}, {"ref-axes", 144},     {"ref-empty", 4},
        {"long", 3},         {"tiled-grid", 96},    {"empty-rows", 18},
        {"overlap", 3},      {"head-dims", 22},     {"seqlens", 63},
        {"masks", 24},       {"heads-layouts", 16}, {"scales", 6},
        {"sampled", 88},     {"split", 13},         {"decode", 18},
        {"broadcast", 6},    {"odd", 24},           {"softcap", 43},
        {"softcap-cpu", 19}, {"alibi-sinks", 64},   {"alibi-sinks-cpu", 22},
        {"varlen", 22},      {"paged", 21},         {"bench-smoke", 9},
        {"large-dims", 16},  {"head-dim-v", 42},    {"varlen-cuda", 21},
        {"paged-cuda", 26},
    };
    fjt_case_list l = {0};
    assert_true(fjt_cases_build(&l, fjt_seed()));
    int total = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        int n = count_group(&l, sizes[i].group);
        if (n != sizes[i].n)
            fail_msg("family %s has %d cases, not %d", sizes[i].group, n, sizes[i].n);
        total += n;
    }
    assert_int_equal(total, l.n);
    /* the CUDA families must run on CUDA, as they did in test_cuda_grid */
    static const char *const cuda_groups[] = {"head-dims",     "seqlens",   "masks",
                                              "heads-layouts", "scales",    "sampled",
                                              "split",         "softcap",   "alibi-sinks",
                                              "varlen-cuda",   "paged-cuda"};
    for (int i = 0; i < l.n; i++) {
        bool cuda = false;
        for (size_t g = 0; g < sizeof cuda_groups / sizeof cuda_groups[0]; g++)
            cuda |= !strcmp(l.cases[i].group, cuda_groups[g]);
        assert_true((l.cases[i].must_run & FJT_ON_CPU) == FJT_ON_CPU);
        assert_int_equal(cuda, (l.cases[i].must_run & FJT_ON(FJ_BACKEND_CUDA)) != 0);
        /* only the CUDA families have heavy cases: the others run in every
           build, the sanitizers' included, as their suites did */
        if (l.cases[i].heavy && !cuda)
            fail_msg("%s/%s is heavy outside the CUDA families", l.cases[i].group, l.cases[i].name);
    }
    fjt_case_list_free(&l);
}

/* What the list promises to cover, counted over a list. */
static void test_coverage(void **state)
{
    (void)state;
    fjt_case_list l = {0};
    assert_true(fjt_cases_build(&l, fjt_seed()));
    int causal[3] = {0}, dtype[3] = {0}, layout[FJT_LAYOUT_COUNT] = {0};
    int window_left = 0, window_right = 0, window_both = 0, causal_window = 0, gqa = 0, mqa = 0;
    int sq_gt_sk = 0, sq_lt_sk = 0, lse_on = 0, lse_off = 0, neg_scale = 0, decode = 0, size1 = 0;
    int empty_rows = 0, dim_odd = 0;
    /* varlen: cases, sequences without queries / without keys (rows that
       see none), of one row or key, cases with seqused_k, with pad tokens */
    int vl = 0, vl_no_q = 0, vl_no_k = 0, vl_one = 0, vl_used = 0, vl_pad = 0;
    for (int i = 0; i < l.n; i++) {
        const fjt_varlen *v = &l.cases[i].varlen;
        vl += v->nseq > 0;
        vl_used += v->has_used;
        vl_pad += v->pad_q > 0;
        for (int b = 0; b < v->nseq; b++) {
            vl_no_q += v->len_q[b] == 0;
            vl_no_k += v->len_q[b] > 0 && fjt_varlen_keys(v, b) == 0;
            vl_one += v->len_q[b] == 1 || fjt_varlen_keys(v, b) == 1;
        }
    }
    assert_true(vl >= 20 && vl_no_q >= 3 && vl_no_k >= 3 && vl_one >= 5 && vl_used >= 1 &&
                vl_pad >= 5);
    /* paged: cases with dense and with varlen queries, shuffled pages,
       unused table columns, a length not a multiple of its page size, a
       sequence without keys, every pool layout, GQA, every causal kind */
    int pg = 0, pg_dense = 0, pg_varlen = 0, pg_shuffled = 0, pg_tail = 0, pg_partial = 0;
    int pg_empty = 0, pg_layout[3] = {0}, pg_gqa = 0, pg_causal[3] = {0};
    for (int i = 0; i < l.n; i++) {
        const fjt_case *c = &l.cases[i];
        if (!c->paged.page_size) continue;
        pg++;
        pg_dense += c->paged.dense_q;
        pg_varlen += !c->paged.dense_q;
        pg_shuffled += !c->paged.in_order;
        pg_tail += c->paged.spare_cols > 0 || c->paged.stride_pad > 0;
        pg_layout[c->paged.layout]++;
        pg_gqa += c->d.heads_q > c->d.heads_kv;
        pg_causal[c->d.causal]++;
        for (int b = 0; b < c->varlen.nseq; b++) {
            pg_partial += c->varlen.len_k[b] % c->paged.page_size != 0;
            pg_empty += c->varlen.len_k[b] == 0;
        }
    }
    /* head dims above CUDA's 256 (the CPU backends' alone): each dtype, on
       the decode path (<= 16 rows per kv head) and with many rows, one query
       row, GQA, seqlen_q above and below seqlen_k, odd dims, the limit */
    int big = 0, big_dtype[3] = {0}, big_decode = 0, big_rows = 0, big_one = 0, big_gqa = 0;
    int big_gt = 0, big_lt = 0, big_odd = 0, big_max = 0, big_masked = 0, big_lse = 0;
    for (int i = 0; i < l.n; i++) {
        const fj_attention_desc *d = &l.cases[i].d;
        if (d->head_dim <= 256) continue;
        assert_true(d->head_dim <= FJ_MAX_HEAD_DIM);
        assert_false(l.cases[i].must_run & FJT_ON(FJ_BACKEND_CUDA));
        const int64_t rows = (int64_t)d->seqlen_q * (d->heads_q / d->heads_kv);
        big++;
        big_dtype[d->dtype]++;
        big_decode += rows <= 16;
        big_rows += rows > 16;
        big_one += d->seqlen_q == 1;
        big_gqa += d->heads_q > d->heads_kv;
        big_gt += d->seqlen_q > d->seqlen_k;
        big_lt += d->seqlen_q < d->seqlen_k;
        big_odd += d->head_dim % 2;
        big_max += d->head_dim == FJ_MAX_HEAD_DIM;
        big_masked += d->causal != FJ_CAUSAL_NONE && (d->window_left >= 0 || d->window_right >= 0);
        big_lse += l.cases[i].lse;
    }
    assert_true(big >= 16 && big_dtype[0] >= 3 && big_dtype[1] >= 3 && big_dtype[2] >= 3 &&
                big_decode >= 5 && big_rows >= 5 && big_one >= 3 && big_gqa >= 8 && big_gt >= 3 &&
                big_lt >= 5 && big_odd >= 4 && big_max >= 4 && big_masked >= 3 && big_lse >= 10 &&
                big_lse < big);
    /* V's head dim other than Q's and K's (the CPU backends' alone): MLA's
       pairs, V wider and narrower, each dtype and causal kind, decode and
       prefill rows, Sq above and below Sk, GQA, lse on and off, the
       modifiers, varlen and paged, layouts other than dense */
    int vd = 0, vd_dtype[3] = {0}, vd_causal[3] = {0}, vd_decode = 0, vd_rows = 0, vd_wider = 0;
    int vd_narrower = 0, vd_gt = 0, vd_lt = 0, vd_gqa = 0, vd_lse = 0, vd_mla = 0, vd_mla192 = 0;
    int vd_features = 0, vd_varlen = 0, vd_paged = 0, vd_strided = 0, vd_odd = 0;
    for (int i = 0; i < l.n; i++) {
        const fjt_case *c = &l.cases[i];
        const fj_attention_desc *d = &c->d;
        const int dv = fjt_dim_v(d);
        if (dv == d->head_dim) continue;
        assert_false(c->must_run & FJT_ON(FJ_BACKEND_CUDA));
        assert_true(dv >= 1 && dv <= FJ_MAX_HEAD_DIM);
        const int64_t rows = (int64_t)d->seqlen_q * (d->heads_q / d->heads_kv);
        vd++;
        vd_dtype[d->dtype]++;
        vd_causal[d->causal]++;
        vd_decode += rows <= 16 && !c->varlen.nseq;
        vd_rows += rows > 16 && !c->varlen.nseq;
        vd_wider += dv > d->head_dim;
        vd_narrower += dv < d->head_dim;
        vd_gt += d->seqlen_q > d->seqlen_k;
        vd_lt += d->seqlen_q < d->seqlen_k;
        vd_gqa += d->heads_q > d->heads_kv;
        vd_lse += c->lse;
        vd_mla += d->head_dim == 576 && dv == 512;
        vd_mla192 += d->head_dim == 192 && dv == 128;
        vd_features += d->softcap > 0 || (d->features & (FJ_FEATURE_ALIBI | FJ_FEATURE_SINKS));
        vd_varlen += c->varlen.nseq && !c->paged.page_size;
        vd_paged += c->paged.page_size > 0;
        vd_strided += c->layout != FJT_DENSE;
        vd_odd += dv % 2 || d->head_dim % 2;
    }
    assert_true(vd >= 30 && vd_dtype[0] >= 5 && vd_dtype[1] >= 5 && vd_dtype[2] >= 5 &&
                vd_causal[0] && vd_causal[1] && vd_causal[2] && vd_decode >= 8 && vd_rows >= 8 &&
                vd_wider >= 8 && vd_narrower >= 8 && vd_gt >= 3 && vd_lt >= 8 && vd_gqa >= 10 &&
                vd_lse >= 10 && vd_lse < vd && vd_mla >= 5 && vd_mla192 >= 3 && vd_features >= 3 &&
                vd_varlen >= 2 && vd_paged >= 3 && vd_strided >= 10 && vd_odd >= 5);
    assert_true(pg >= 20 && pg_dense >= 5 && pg_varlen >= 4 && pg_shuffled >= 5 && pg_tail >= 5 &&
                pg_partial >= 10 && pg_empty >= 3 && pg_layout[0] && pg_layout[1] && pg_layout[2] &&
                pg_gqa >= 5 && pg_causal[0] && pg_causal[1] && pg_causal[2]);
    for (int i = 0; i < l.n; i++) {
        const fj_attention_desc *d = &l.cases[i].d;
        causal[d->causal]++;
        dtype[d->dtype]++;
        layout[l.cases[i].layout]++;
        bool wl = d->window_left >= 0, wr = d->window_right >= 0;
        window_left += wl && !wr;
        window_right += wr && !wl;
        window_both += wl && wr;
        causal_window += (wl || wr) && d->causal != FJ_CAUSAL_NONE;
        gqa += d->heads_kv > 1 && d->heads_q > d->heads_kv;
        mqa += d->heads_kv == 1 && d->heads_q > 1;
        sq_gt_sk += d->seqlen_q > d->seqlen_k;
        sq_lt_sk += d->seqlen_q < d->seqlen_k;
        lse_on += l.cases[i].lse;
        lse_off += !l.cases[i].lse;
        neg_scale += d->scale < 0;
        decode += d->seqlen_q <= 16 && d->seqlen_k >= 1024 && d->heads_q > d->heads_kv;
        size1 += d->seqlen_q == 1 || d->seqlen_k == 1 || d->head_dim == 1;
        /* bottom-right causal with more queries than keys leaves rows empty */
        empty_rows += d->causal == FJ_CAUSAL_BOTTOM_RIGHT && d->seqlen_q > d->seqlen_k;
        dim_odd += d->head_dim % 8 != 0;
    }
    for (int k = 0; k < 3; k++) assert_true(causal[k] >= 50 && dtype[k] >= 50);
    for (int k = 0; k < FJT_LAYOUT_COUNT; k++)
        if (layout[k] < 3)
            fail_msg("layout %s: %d cases", fjt_layout_name((fjt_layout)k), layout[k]);
    assert_true(window_left >= 20 && window_right >= 20 && window_both >= 20 &&
                causal_window >= 20);
    assert_true(gqa >= 50 && mqa >= 50 && sq_gt_sk >= 100 && sq_lt_sk >= 100);
    assert_true(lse_on >= 100 && lse_off >= 30 && neg_scale >= 5 && decode >= 15 && size1 >= 50);
    assert_true(empty_rows >= 20 && dim_odd >= 20);
    fjt_case_list_free(&l);
}

/* ---- the judge ------------------------------------------------------------------ */

typedef struct judged {
    fj_context *ref;
    fjt_case c;
    fjt_problem p;
    fjt_output good;
} judged;

static size_t elem_size(fj_dtype t) { return t == FJ_F32 ? 4 : 2; }

/* Judges a copy of the good output after `spoil` changed it; returns the
 * note. */
static bool judge_spoiled(judged *j, void (*spoil)(judged *, fjt_output *), char *note, size_t n)
{
    fjt_output bad = j->good;
    size_t ob = j->p.o_elems * elem_size(j->c.d.dtype);
    bad.o = malloc(ob);
    bad.lse = malloc(j->p.lse_elems * sizeof(float));
    assert_non_null(bad.o);
    assert_non_null(bad.lse);
    memcpy(bad.o, j->good.o, ob);
    memcpy(bad.lse, j->good.lse, j->p.lse_elems * sizeof(float));
    spoil(j, &bad);
    bad.err = fjt_compare(&j->p, bad.o, bad.lse);
    bool ok = fjt_case_judge(&j->c, &j->p, &bad, NULL, note, n);
    fjt_output_free(&bad);
    return ok;
}

/* The first output row that sees a key, and the first that sees none. */
static size_t row_offset(const judged *j, bool empty)
{
    const fj_attention_desc *d = &j->c.d;
    for (int i = 0; i < d->seqlen_q; i++) {
        double lse = j->p.ref_lse[i]; /* batch 0, head 0 */
        if ((isinf(lse) && lse < 0) == empty) return (size_t)(i * j->p.os[1]);
    }
    fail_msg("no %s row", empty ? "empty" : "non-empty");
    return 0;
}

static void spoil_nan(judged *j, fjt_output *o)
{
    fjt_store(o->o, j->c.d.dtype, row_offset(j, false), NAN);
}
static void spoil_gap(judged *j, fjt_output *o)
{
    /* padded layout: the element after the first row's head_dim_v values */
    fjt_store(o->o, j->c.d.dtype, (size_t)fjt_dim_v(&j->c.d), 0.5);
}
static void spoil_value(judged *j, fjt_output *o)
{
    for (int c = 0; c < fjt_dim_v(&j->c.d); c++)
        fjt_store(o->o, j->c.d.dtype, row_offset(j, false) + (size_t)c, 0.9);
}
static void spoil_empty_row(judged *j, fjt_output *o)
{
    fjt_store(o->o, j->c.d.dtype, row_offset(j, true), 0.25);
}
static void spoil_lse_inf(judged *j, fjt_output *o)
{
    for (size_t k = 0; k < j->p.lse_elems; k++)
        if (isinf(j->p.ref_lse[k])) {
            o->lse[k] = 0.0f;
            return;
        }
}
static void spoil_lse_value(judged *j, fjt_output *o)
{
    for (size_t k = 0; k < j->p.lse_elems; k++)
        if (isfinite(j->p.ref_lse[k])) {
            o->lse[k] += 1e-3f;
            return;
        }
}

static void test_judge_catches(void **state)
{
    (void)state;
    judged j;
    fj_context_options o;
    fj_context_options_init(&o);
    o.backend = FJ_BACKEND_CPU_REFERENCE;
    o.cache_dir = "";
    assert_int_equal(fj_context_create(&o, &j.ref), FJ_OK);
    /* bottom-right causal, sq > sk: rows 0..9 see no key; padded rows */
    fj_attention_desc d;
    fj_attention_desc_init(&d, 1, 2, 1, 30, 20, 16, FJ_F32);
    d.causal = FJ_CAUSAL_BOTTOM_RIGHT;
    j.c = fjt_case_make("self", "judge", &d, FJT_PADDED, true);
    assert_true(fjt_case_problem(&j.c, 5, &j.p));
    assert_int_equal(fjt_case_run(&j.c, &j.p, j.ref, &j.good), FJ_OK);
    char note[1024];
    assert_true(fjt_case_judge(&j.c, &j.p, &j.good, NULL, note, sizeof note));
    static const struct {
        void (*spoil)(judged *, fjt_output *);
        const char *broke;
    } spoils[] = {
        {spoil_nan, "nan"},         {spoil_gap, "gaps"},
        {spoil_value, "rel_fro"},   {spoil_empty_row, "empty-rows"},
        {spoil_lse_inf, "lse-inf"}, {spoil_lse_value, "lse"},
    };
    for (size_t s = 0; s < sizeof spoils / sizeof spoils[0]; s++) {
        bool ok = judge_spoiled(&j, spoils[s].spoil, note, sizeof note);
        printf("# %s: %s\n", spoils[s].broke, note);
        assert_false(ok);
        /* named in the list of bounds broken ("broke nan,rel_fro | ...") */
        const char *list = strstr(note, "broke ");
        assert_non_null(list);
        list += strlen("broke ");
        size_t n = strcspn(list, " "), w = strlen(spoils[s].broke);
        bool named = false;
        for (const char *x = list; x < list + n; x += strcspn(x, ",") + 1)
            named |= strncmp(x, spoils[s].broke, w) == 0 && (x[w] == ',' || x[w] == ' ');
        if (!named) fail_msg("%s not named in: %s", spoils[s].broke, note);
    }

    /* the reference's output as the yardstick: the tiled backend's bounds
       (an output right by the oracle, the yardstick moved away from it) */
    fjt_output tiled = j.good, moved = j.good;
    tiled.backend = FJ_BACKEND_CPU;
    assert_true(fjt_case_judge(&j.c, &j.p, &tiled, &j.good, note, sizeof note));
    assert_non_null(strstr(note, "ref-dist"));
    size_t ob = j.p.o_elems * 4;
    moved.o = malloc(ob);
    moved.lse = malloc(j.p.lse_elems * sizeof(float));
    assert_non_null(moved.o);
    assert_non_null(moved.lse);
    memcpy(moved.o, j.good.o, ob);
    memcpy(moved.lse, j.good.lse, j.p.lse_elems * sizeof(float));
    ((float *)moved.o)[row_offset(&j, false)] += 2e-4f;
    assert_false(fjt_case_judge(&j.c, &j.p, &tiled, &moved, note, sizeof note));
    printf("# vs reference output: %s\n", note);
    assert_non_null(strstr(note, "broke vs-ref-output |"));
    memcpy(moved.o, j.good.o, ob);
    moved.lse[j.p.lse_elems - 1] += 1e-3f;
    assert_false(fjt_case_judge(&j.c, &j.p, &tiled, &moved, note, sizeof note));
    printf("# vs reference lse: %s\n", note);
    assert_non_null(strstr(note, "broke vs-ref-lse |"));
    fjt_output_free(&moved);

    /* CUDA's rule: at most twice the reference's error plus a floor */
    j.c.d.dtype = FJ_BF16;
    fjt_output cuda = j.good;
    cuda.backend = FJ_BACKEND_CUDA;
    fjt_output yard = j.good;
    yard.err.rel_fro = 1e-3;
    cuda.err.rel_fro = 2 * 1e-3 + 8e-3 + 1e-4;
    assert_false(fjt_case_judge(&j.c, &j.p, &cuda, &yard, note, sizeof note));
    assert_non_null(strstr(note, "vs-ref-error"));
    cuda.err.rel_fro = 2 * 1e-3 + 8e-3 - 1e-4;
    assert_true(fjt_case_judge(&j.c, &j.p, &cuda, &yard, note, sizeof note));
    j.c.d.dtype = FJ_F32;

    fjt_output_free(&j.good);
    fjt_problem_free(&j.p);
    fj_context_destroy(j.ref);
}

/* UNSUPPORTED is a SKIP with the backend's reason, except where the case
 * says the backend must run it. */
static void test_unsupported_verdicts(void **state)
{
    (void)state;
    fj_attention_desc d;
    fj_attention_desc_init(&d, 1, 1, 1, 4, 4, 8, FJ_F32);
    fjt_case c = fjt_case_make("self", "unsupported", &d, FJT_DENSE, false);
    fjt_output out;
    memset(&out, 0, sizeof out);
    out.backend = FJ_BACKEND_CUDA;
    out.status = FJ_ERR_UNSUPPORTED;
    snprintf(out.message, sizeof out.message, "cuda: dtype f32 is not supported");
    char note[512];
    assert_int_equal(fjt_case_verdict(&c, NULL, &out, NULL, note, sizeof note), FJT_SKIP);
    assert_non_null(strstr(note, "not supported: cuda: dtype f32"));
    c.must_run |= FJT_ON(FJ_BACKEND_CUDA);
    assert_int_equal(fjt_case_verdict(&c, NULL, &out, NULL, note, sizeof note), FJT_FAIL);
    out.backend = FJ_BACKEND_CPU; /* the CPU backends must run every case */
    c.must_run = FJT_ON_CPU;
    assert_int_equal(fjt_case_verdict(&c, NULL, &out, NULL, note, sizeof note), FJT_FAIL);
    out.status = FJ_ERR_DRIVER;
    out.backend = FJ_BACKEND_CUDA;
    assert_int_equal(fjt_case_verdict(&c, NULL, &out, NULL, note, sizeof note), FJT_FAIL);
}

/* ---- --perf against bench -------------------------------------------------------- */

typedef struct bench_row {
    char backend[16], shape[48], lnch[8], err[16], kernel[256];
    double ms;
} bench_row;

/* bench's table rows (the header checked equal apart) out of text. */
static int parse_rows(const char *text, char *header, size_t header_n, bench_row *rows, int cap)
{
    regex_t re;
    assert_int_equal(
        regcomp(&re, "^(.{14}) ([^ ]+) +([0-9.]+) +([0-9.]+) +([0-9.]+) +([0-9]+) +([^ ]+)  (.*)$",
                REG_EXTENDED),
        0);
    int n = 0;
    header[0] = '\0';
    for (const char *line = text; *line;) {
        size_t len = strcspn(line, "\n");
        char buf[1024];
        snprintf(buf, sizeof buf, "%.*s", (int)len, line);
        line += len + (line[len] == '\n');
        if (!strncmp(buf, "backend ", 8)) {
            snprintf(header, header_n, "%s", buf);
            continue;
        }
        regmatch_t m[9];
        if (buf[0] == '#' || regexec(&re, buf, 9, m, 0)) continue;
        assert_true(n < cap);
        bench_row *r = &rows[n++];
#define FIELD(dst, k) \
    snprintf(dst, sizeof dst, "%.*s", (int)(m[k].rm_eo - m[k].rm_so), buf + m[k].rm_so)
        FIELD(r->backend, 1);
        FIELD(r->shape, 2);
        FIELD(r->lnch, 6);
        FIELD(r->err, 7);
        FIELD(r->kernel, 8);
#undef FIELD
        r->ms = strtod(buf + m[3].rm_so, NULL);
    }
    regfree(&re);
    return n;
}

static void test_perf_rows_match_bench(void **state)
{
    (void)state;
    if (!flashjit_path || !conformance_path) {
        printf("SKIPPED: no flashjit binary given (built without tools)\n");
        skip();
    }
    char dir[4096];
    assert_true(fjt_scratch_dir("conformance-perf", dir, sizeof dir));
    fjt_cli_result *bench = malloc(sizeof *bench), *perf = malloc(sizeof *perf);
    assert_non_null(bench);
    assert_non_null(perf);
    const char *bench_argv[] = {flashjit_path, "bench",        "--grid",
                                "smoke",       "--backends",   "cpu,reference",
                                "--dtypes",    "f32,f16,bf16", "--repeat",
                                "3",           "--warmup",     "0",
                                NULL};
    fjt_cli_run(dir, NULL, NULL, bench_argv, bench);
    fjt_cli_expect_status(bench, 0);
    const char *perf_argv[] = {conformance_path,
                               "--perf",
                               "--backend",
                               "cpu,reference",
                               "--filter",
                               "bench-smoke/",
                               "--repeat",
                               "3",
                               "--warmup",
                               "0",
                               NULL};
    fjt_cli_run(dir, NULL, NULL, perf_argv, perf);
    fjt_cli_expect_status(perf, 0);
    char hb[1024], hp[1024];
    bench_row rb[32], rp[32];
    int nb = parse_rows(bench->out, hb, sizeof hb, rb, 32);
    int np = parse_rows(perf->out, hp, sizeof hp, rp, 32);
    printf("# bench:\n%s# fj_conformance --perf:\n%s", bench->out, perf->out);
    assert_int_equal(nb, 18); /* 3 shapes x 3 dtypes x 2 backends */
    assert_int_equal(np, nb);
    assert_string_equal(hp, hb);
    /* bench runs the backends of a shape in the order given; the driver in
       the registry's: compare as sets of (backend, shape) */
    for (int i = 0; i < np; i++) {
        int k = 0;
        while (k < nb && (strcmp(rb[k].backend, rp[i].backend) || strcmp(rb[k].shape, rp[i].shape)))
            k++;
        if (k == nb)
            fail_msg("perf row %s | %s: bench has no such row", rp[i].backend, rp[i].shape);
        assert_string_equal(rp[i].lnch, rb[k].lnch);
        assert_string_equal(rp[i].err, rb[k].err);
        assert_string_equal(rp[i].kernel, rb[k].kernel);
        assert_true(rp[i].ms > 0 && rb[k].ms > 0);
    }
    fjt_remove_tree(dir);
    free(bench);
    free(perf);
}

int main(int argc, char **argv)
{
    flashjit_path = argc > 2 ? argv[1] : NULL;
    conformance_path = argc > 2 ? argv[2] : NULL;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_list_stable_and_unique),
        cmocka_unit_test(test_families),
        cmocka_unit_test(test_coverage),
        cmocka_unit_test(test_judge_catches),
        cmocka_unit_test(test_unsupported_verdicts),
        cmocka_unit_test(test_perf_rows_match_bench),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
