#include "cli_problem.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "half.h"
#include "tune/measure.h"

void cli_problem_flags_init(cli_problem_flags *f)
{
    memset(f, 0, sizeof *f);
    fj_attention_desc_init(&f->d, 1, 8, 8, 1024, 1024, 128, FJ_BF16);
    f->backend = FJ_BACKEND_AUTO;
    f->repeat = 20;
    f->warmup = 3;
    f->seed = 1;
}

void cli_varlen_free(cli_varlen *v)
{
    free(v->len_q);
    free(v->len_k);
    memset(v, 0, sizeof *v);
}

void cli_problem_flags_free(cli_problem_flags *f)
{
    cli_varlen_free(&f->varlen);
    free(f->kv_lens);
    f->kv_lens = NULL;
    f->nkv = 0;
}

const char *cli_problem_flags_help(void)
{
    return "problem (every flag has a default):\n"
           "  --batch N (1)  --heads-q N (8)  --heads-kv N (= heads-q)\n"
           "  --seqlen-q N (1024)  --seqlen-k N (= seqlen-q)  --head-dim N (128)\n"
           "  --head-dim-v N (V's and O's head dim; 0: = head-dim; CPU backends)\n"
           "  --dtype f32|f16|bf16 (bf16)  --scale X (0: 1/sqrt(head_dim))\n"
           "  --causal [none|bottom-right|top-left] (none; alone: bottom-right)\n"
           "  --window LEFT,RIGHT (-1,-1: unbounded)\n"
           "  --softcap C (0: off; > 0: scores become C * tanh(score / C))\n"
           "  --alibi (ALiBi, slopes 2^(-8 (h + 1) / heads_q))  --sinks (a sink per head,\n"
           "    0.5 (h mod 5) - 1)\n"
           "  --varlen L,L,... (a variable-length batch, one item per sequence: N for N\n"
           "    queries and N keys, Q:K for Q queries and K keys, 0 allowed; sets batch,\n"
           "    seqlen-q and seqlen-k to the count and the longest)\n"
           "  --page-size N (a paged KV cache: K and V in pools of pages of N keys, a\n"
           "    block table naming each sequence's pages; on CUDA N a multiple of 16).\n"
           "    Its sequences: --batch of --seqlen-k keys each; or --kv-lens L,L,...\n"
           "    (one KV length per sequence, 0 allowed, each with --seqlen-q queries;\n"
           "    sets batch, and seqlen-k to the longest unless --seqlen-k gives the\n"
           "    plan's bound); or --varlen's Q:K items (packed queries, K the KV\n"
           "    length in the pages)\n"
           "  --shuffle-pages (with --page-size: the pages in a random order from --seed;\n"
           "    otherwise each sequence's pages follow each other in the pool)\n"
           "  --backend auto|reference|cpu|cuda (auto)\n"
           "  --repeat N (20)  --warmup N (3)  --check  --lse  --seed N (1)\n";
}

/* ---- the problem flags: one row each ---------------------------------------
 * A setter gets the flag as typed ("--batch"), its value (NULL: none given)
 * and its row; 0, or -1 after printing a message naming the flag. */
typedef struct problem_flag problem_flag;
typedef int (*problem_setter)(const char *cmd, const char *flag, const char *val,
                              cli_problem_flags *f, const problem_flag *row);
struct problem_flag {
    const char *name;
    int has_arg;
    problem_setter set;
    size_t off; /* set_desc_int: into fj_attention_desc; set_int: into cli_problem_flags */
    int lo, hi;
};

static int set_desc_int(const char *cmd, const char *flag, const char *val, cli_problem_flags *f,
                        const problem_flag *row)
{
    return cli_parse_int(cmd, flag, val, row->lo, row->hi, (int *)((char *)&f->d + row->off)) ? 0
                                                                                              : -1;
}

static int set_int(const char *cmd, const char *flag, const char *val, cli_problem_flags *f,
                   const problem_flag *row)
{
    return cli_parse_int(cmd, flag, val, row->lo, row->hi, (int *)((char *)f + row->off)) ? 0 : -1;
}

static int set_seed(const char *cmd, const char *flag, const char *val, cli_problem_flags *f,
                    const problem_flag *row)
{
    int s;
    if (!cli_parse_int(cmd, flag, val, row->lo, row->hi, &s)) return -1;
    f->seed = (uint64_t)s;
    return 0;
}

static int set_dtype(const char *cmd, const char *flag, const char *val, cli_problem_flags *f,
                     const problem_flag *row)
{
    (void)row;
    return cli_parse_dtype(cmd, flag, val, &f->d.dtype) ? 0 : -1;
}

static int set_backend(const char *cmd, const char *flag, const char *val, cli_problem_flags *f,
                       const problem_flag *row)
{
    (void)row;
    return cli_parse_backend(cmd, flag, val, &f->backend) ? 0 : -1;
}

/* "--causal" alone: bottom-right */
static int set_causal(const char *cmd, const char *flag, const char *val, cli_problem_flags *f,
                      const problem_flag *row)
{
    (void)row;
    if (!val) {
        f->d.causal = FJ_CAUSAL_BOTTOM_RIGHT;
        return 0;
    }
    return cli_parse_causal(cmd, flag, val, &f->d.causal) ? 0 : -1;
}

static int set_window(const char *cmd, const char *flag, const char *val, cli_problem_flags *f,
                      const problem_flag *row)
{
    (void)row;
    int l, r;
    char tail;
    if (!val || sscanf(val, "%d,%d%c", &l, &r, &tail) != 2 || l < -1 || r < -1) {
        cli_usage_error(cmd, "%s: '%s' is not LEFT,RIGHT with each >= -1", flag, val ? val : "");
        return -1;
    }
    f->d.window_left = l;
    f->d.window_right = r;
    return 0;
}

static int set_scale(const char *cmd, const char *flag, const char *val, cli_problem_flags *f,
                     const problem_flag *row)
{
    (void)row;
    char *end;
    double s = val ? strtod(val, &end) : 0;
    if (!val || *end || !isfinite(s)) {
        cli_usage_error(cmd, "%s: '%s' is not a finite number", flag, val ? val : "");
        return -1;
    }
    f->d.scale = (float)s;
    return 0;
}

static int set_softcap(const char *cmd, const char *flag, const char *val, cli_problem_flags *f,
                       const problem_flag *row)
{
    (void)row;
    char *end;
    double c = val ? strtod(val, &end) : 0;
    if (!val || *end || !isfinite(c) || c < 0) {
        cli_usage_error(cmd, "%s: '%s' is not a finite number >= 0 (0: off)", flag, val ? val : "");
        return -1;
    }
    f->d.softcap = (float)c;
    return 0;
}

static int set_check(const char *cmd, const char *flag, const char *val, cli_problem_flags *f,
                     const problem_flag *row)
{
    (void)cmd, (void)flag, (void)val, (void)row;
    f->check = true;
    return 0;
}

static int set_lse(const char *cmd, const char *flag, const char *val, cli_problem_flags *f,
                   const problem_flag *row)
{
    (void)cmd, (void)flag, (void)val, (void)row;
    f->lse = true;
    return 0;
}

/* --alibi, --sinks: a bit of the desc's features (the tool fills the
   slopes or sinks itself when it runs the problem) */
static int set_feature(const char *cmd, const char *flag, const char *val, cli_problem_flags *f,
                       const problem_flag *row)
{
    (void)cmd, (void)flag, (void)val;
    f->d.features |= (uint32_t)row->lo;
    return 0;
}

/* --varlen 17,1,300 or 1:4096,1:2000: each sequence's queries (and keys) */
static int set_varlen(const char *cmd, const char *flag, const char *val, cli_problem_flags *f,
                      const problem_flag *row)
{
    (void)row;
    enum { MOST = 1 << 20 };
    int n = 1;
    for (const char *c = val ? val : ""; *c; c++) n += *c == ',';
    cli_varlen_free(&f->varlen);
    if (!val || !*val || n > MOST || !(f->varlen.len_q = malloc(sizeof(int) * (size_t)n)) ||
        !(f->varlen.len_k = malloc(sizeof(int) * (size_t)n))) {
        cli_varlen_free(&f->varlen);
        cli_usage_error(cmd, "%s: '%s' is not a list of at most %d lengths", flag, val ? val : "",
                        MOST);
        return -1;
    }
    int most_q = 1, most_k = 1;
    const char *at = val;
    for (int i = 0; i < n; i++) {
        char *end;
        long q = strtol(at, &end, 10), k = q;
        if (end != at && *end == ':') {
            const char *kat = end + 1;
            k = strtol(kat, &end, 10);
            if (end == kat) k = -1;
        }
        if (end == at || q < 0 || k < 0 || q > 1 << 30 || k > 1 << 30 ||
            (*end != ',' && *end != '\0') || (*end == ',') != (i + 1 < n)) {
            cli_varlen_free(&f->varlen);
            cli_usage_error(cmd,
                            "%s: '%s': item %d is not N (queries and keys) or Q:K, each a "
                            "length in [0, 2^30], separated by commas",
                            flag, val, i + 1);
            return -1;
        }
        f->varlen.len_q[i] = (int)q;
        f->varlen.len_k[i] = (int)k;
        if (q > most_q) most_q = (int)q;
        if (k > most_k) most_k = (int)k;
        at = end + 1;
    }
    f->varlen.n = n;
    f->d.batch = n;
    f->d.seqlen_q = most_q;
    f->d.seqlen_k = most_k;
    f->d.features |= FJ_FEATURE_VARLEN;
    return 0;
}

/* --page-size N: the paged KV cache's feature and page size (the pools'
   page counts follow from the sequences: cli_paged_layout) */
static int set_page_size(const char *cmd, const char *flag, const char *val, cli_problem_flags *f,
                         const problem_flag *row)
{
    if (!cli_parse_int(cmd, flag, val, row->lo, row->hi, &f->d.page_size)) return -1;
    f->d.features |= FJ_FEATURE_PAGED_KV;
    return 0;
}

/* --kv-lens 4096,17,0: each sequence's KV length in the paged cache */
static int set_kv_lens(const char *cmd, const char *flag, const char *val, cli_problem_flags *f,
                       const problem_flag *row)
{
    (void)row;
    enum { MOST = 1 << 20 };
    int n = 1;
    for (const char *c = val ? val : ""; *c; c++) n += *c == ',';
    free(f->kv_lens);
    f->kv_lens = NULL;
    f->nkv = 0;
    if (!val || !*val || n > MOST || !(f->kv_lens = malloc(sizeof(int) * (size_t)n))) {
        cli_usage_error(cmd, "%s: '%s' is not a list of at most %d lengths", flag, val ? val : "",
                        MOST);
        return -1;
    }
    const char *at = val;
    for (int i = 0; i < n; i++) {
        char *end;
        long k = strtol(at, &end, 10);
        if (end == at || k < 0 || k > 1 << 30 || (*end != ',' && *end != '\0') ||
            (*end == ',') != (i + 1 < n)) {
            free(f->kv_lens);
            f->kv_lens = NULL;
            cli_usage_error(cmd,
                            "%s: '%s': item %d is not a KV length in [0, 2^30] (one per "
                            "sequence, separated by commas)",
                            flag, val, i + 1);
            return -1;
        }
        f->kv_lens[i] = (int)k;
        at = end + 1;
    }
    f->nkv = n;
    return 0;
}

static int set_shuffle_pages(const char *cmd, const char *flag, const char *val,
                             cli_problem_flags *f, const problem_flag *row)
{
    (void)cmd, (void)flag, (void)val, (void)row;
    f->shuffle_pages = true;
    return 0;
}

#define DESC(field) offsetof(fj_attention_desc, field)
static const problem_flag problem_flags[] = {
    {"batch", required_argument, set_desc_int, DESC(batch), 1, 1 << 20},
    {"heads-q", required_argument, set_desc_int, DESC(heads_q), 1, 1 << 16},
    {"heads-kv", required_argument, set_desc_int, DESC(heads_kv), 1, 1 << 16},
    {"seqlen-q", required_argument, set_desc_int, DESC(seqlen_q), 1, 1 << 30},
    {"seqlen-k", required_argument, set_desc_int, DESC(seqlen_k), 1, 1 << 30},
    {"head-dim", required_argument, set_desc_int, DESC(head_dim), 1, FJ_MAX_HEAD_DIM},
    {"head-dim-v", required_argument, set_desc_int, DESC(head_dim_v), 0, FJ_MAX_HEAD_DIM},
    {"dtype", required_argument, set_dtype, 0, 0, 0},
    {"backend", required_argument, set_backend, 0, 0, 0},
    {"causal", optional_argument, set_causal, 0, 0, 0},
    {"window", required_argument, set_window, 0, 0, 0},
    {"scale", required_argument, set_scale, 0, 0, 0},
    {"softcap", required_argument, set_softcap, 0, 0, 0},
    {"alibi", no_argument, set_feature, 0, FJ_FEATURE_ALIBI, 0},
    {"sinks", no_argument, set_feature, 0, FJ_FEATURE_SINKS, 0},
    {"varlen", required_argument, set_varlen, 0, 0, 0},
    {"page-size", required_argument, set_page_size, 0, 1, 1 << 30},
    {"kv-lens", required_argument, set_kv_lens, 0, 0, 0},
    {"shuffle-pages", no_argument, set_shuffle_pages, 0, 0, 0},
    {"repeat", required_argument, set_int, offsetof(cli_problem_flags, repeat), 1, 100000},
    {"warmup", required_argument, set_int, offsetof(cli_problem_flags, warmup), 0, 100000},
    {"seed", required_argument, set_seed, 0, 0, 2147483647},
    {"check", no_argument, set_check, 0, 0, 0},
    {"lse", no_argument, set_lse, 0, 0, 0},
};
#undef DESC
#define NPROBLEM_FLAGS (sizeof problem_flags / sizeof problem_flags[0])

const cli_option *cli_problem_options(void)
{
    static cli_option opts[NPROBLEM_FLAGS + 1];
    for (size_t k = 0; k < NPROBLEM_FLAGS; k++)
        opts[k] = (cli_option){problem_flags[k].name, problem_flags[k].has_arg,
                               CLI_PROBLEM_OPTION_ID + (int)k};
    return opts;
}

int cli_problem_option(const char *cmd, int id, const char *flag, const char *val,
                       cli_problem_flags *f)
{
    size_t k = (size_t)(id - CLI_PROBLEM_OPTION_ID);
    if (id < CLI_PROBLEM_OPTION_ID || k >= NPROBLEM_FLAGS) return 0;
    return problem_flags[k].set(cmd, flag, val, f, &problem_flags[k]) ? -1 : 1;
}

/* n sequences of sq queries; keys: len_k's (NULL: sk each). */
static bool make_sequences(cli_varlen *v, int n, int sq, const int *len_k, int sk)
{
    memset(v, 0, sizeof *v);
    size_t bytes = sizeof(int) * (size_t)(n > 0 ? n : 1);
    if (!(v->len_q = malloc(bytes)) || !(v->len_k = malloc(bytes))) {
        cli_varlen_free(v);
        return false;
    }
    for (int b = 0; b < n; b++) {
        v->len_q[b] = sq;
        v->len_k[b] = len_k ? len_k[b] : sk;
    }
    v->n = n;
    return true;
}

bool cli_problem_sequences(const cli_problem_flags *f, cli_varlen *seqs)
{
    memset(seqs, 0, sizeof *seqs);
    const fj_attention_desc *d = &f->d;
    if (!(d->features & (FJ_FEATURE_VARLEN | FJ_FEATURE_PAGED_KV))) return true;
    if (f->varlen.n) {
        if (!make_sequences(seqs, f->varlen.n, 0, f->varlen.len_k, 0)) return false;
        memcpy(seqs->len_q, f->varlen.len_q, sizeof(int) * (size_t)f->varlen.n);
        return true;
    }
    if (f->nkv) return make_sequences(seqs, f->nkv, d->seqlen_q, f->kv_lens, 0);
    return make_sequences(seqs, d->batch, d->seqlen_q, NULL, d->seqlen_k);
}

static int64_t pages_of(int64_t keys, int page_size) { return (keys + page_size - 1) / page_size; }

void cli_paged_layout(fj_attention_desc *d, const cli_varlen *vl)
{
    if (d->page_size < 1) return; /* the desc's check names it */
    int64_t pages = 0, longest = d->seqlen_k;
    if (vl && vl->n) {
        for (int b = 0; b < vl->n; b++) {
            pages += pages_of(vl->len_k[b], d->page_size);
            if (vl->len_k[b] > longest) longest = vl->len_k[b];
        }
    } else {
        pages = (int64_t)d->batch * pages_of(d->seqlen_k, d->page_size);
    }
    const int64_t cols = pages_of(longest, d->page_size);
    d->num_pages = pages < 1 ? 1 : pages > INT32_MAX ? INT32_MAX : (int)pages;
    d->max_pages = cols < 1 ? 1 : cols > INT32_MAX ? INT32_MAX : (int)cols;
    d->block_table_stride = 0;
}

void cli_shape_str(const fj_attention_desc *d, char *buf, size_t n)
{
    if (fj_problem_key(d, buf, n)) snprintf(buf, n, "(invalid problem: %s)", fj_last_error());
}

static size_t elem_size(fj_dtype t) { return t == FJ_F32 ? 4 : 2; }

void cli_table_header(void)
{
    printf("%-14s %-46s %10s %9s %9s %4s %9s  %s\n", "backend", "problem", "ms", "TFLOP/s", "GB/s",
           "lnch", "rel.err", "kernel");
}

void cli_table_row(const char *backend, const char *key, double ms, double tflops, double gbps,
                   int launches, const char *err, const char *kernel)
{
    printf("%-14s %-46s %10.4f %9.2f %9.1f %4d %9s  %s\n", backend, key, ms, tflops, gbps, launches,
           err, kernel);
}

/* V's and O's head dim: head_dim_v, or head_dim when it is 0. */
static int dim_v(const fj_attention_desc *d)
{
    return d->head_dim_v > 0 ? d->head_dim_v : d->head_dim;
}

double cli_min_bytes(const fj_attention_desc *d, bool with_lse)
{
    double es = (double)elem_size(d->dtype);
    /* q and k rows of head_dim, v and o rows of head_dim_v */
    const double dims = (double)d->head_dim + dim_v(d);
    double qo = (double)d->batch * d->heads_q * (double)d->seqlen_q * dims * es;
    double kv = (double)d->batch * d->heads_kv * (double)d->seqlen_k * dims * es;
    double lse = with_lse ? 4.0 * d->batch * d->heads_q * (double)d->seqlen_q : 0;
    return qo + kv + lse;
}

/* Dense tensors only: the CLI always uses the default strides. */
/* Host copies of a problem's tensors. Each holds its tensor's first
 * min(n, cap) elements: a run without a check needs no full host copy, so
 * a tensor larger than the cap is uploaded as that block repeated (random
 * data all the same; timing does not depend on the values, only on their
 * not being zeros or NaNs). */
typedef struct host_tensors {
    size_t nq, nk, nv, no, nlse; /* elements of each tensor (v, o: rows of head_dim_v) */
    size_t hq, hk, hv, ho, hlse; /* elements held on the host */
    void *q, *k, *v, *o;
    float *lse;
    int heads_q;
    uint32_t features; /* the desc's: which per-head arrays dev_make uploads */
} host_tensors;

/* Elements held per tensor when no check needs the whole of it: 32 Mi
 * (64 MiB of bf16) keeps a 17 GB decode K off the host and its random fill
 * under a second. */
#define HOST_BLOCK_ELEMS ((size_t)32 << 20)

static size_t min_size(size_t a, size_t b) { return a < b ? a : b; }

static uint64_t next_random(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void fill_random(void *buf, fj_dtype t, size_t n, uint64_t *state)
{
    for (size_t i = 0; i < n; i++) {
        float x = (float)((double)(next_random(state) >> 11) * 0x1.0p-52 - 1.0);
        if (t == FJ_F32) ((float *)buf)[i] = x;
        else if (t == FJ_F16) ((uint16_t *)buf)[i] = fj_f32_to_f16(x);
        else ((uint16_t *)buf)[i] = fj_f32_to_bf16(x);
    }
}

static double load(const void *buf, fj_dtype t, size_t i)
{
    if (t == FJ_F32) return ((const float *)buf)[i];
    if (t == FJ_F16) return fj_f16_to_f32(((const uint16_t *)buf)[i]);
    return fj_bf16_to_f32(((const uint16_t *)buf)[i]);
}

static void host_free(host_tensors *h)
{
    free(h->q);
    free(h->k);
    free(h->v);
    free(h->o);
    free(h->lse);
}

/* A varlen batch's tokens: queries and keys of every sequence. */
static void varlen_tokens(const cli_varlen *vl, size_t *tq, size_t *tk)
{
    *tq = *tk = 0;
    for (int b = 0; vl && b < vl->n; b++) {
        *tq += (size_t)vl->len_q[b];
        *tk += (size_t)vl->len_k[b];
    }
}

/* cap: elements held per tensor (0: all of them, as a check needs). vl: the
   sequences of a varlen batch (packed tensors; NULL or none: dense). */
static fj_status host_make(host_tensors *h, const fj_attention_desc *d, const cli_varlen *vl,
                           uint64_t seed, size_t cap)
{
    memset(h, 0, sizeof *h);
    size_t es = elem_size(d->dtype);
    size_t tq = (size_t)d->batch * d->seqlen_q, tk = (size_t)d->batch * d->seqlen_k;
    if (vl && vl->n) varlen_tokens(vl, &tq, &tk);
    /* (at least one element each: an empty batch still passes buffers) */
    h->nq = tq ? tq * d->heads_q * d->head_dim : 1;
    h->no = tq ? tq * d->heads_q * dim_v(d) : 1;
    h->nk = tk ? tk * d->heads_kv * d->head_dim : 1;
    h->nv = tk ? tk * d->heads_kv * dim_v(d) : 1;
    h->nlse = tq ? (size_t)d->heads_q * tq : 1;
    h->heads_q = d->heads_q;
    h->features = d->features;
    if (!cap) cap = SIZE_MAX;
    h->hq = min_size(h->nq, cap);
    h->hk = min_size(h->nk, cap);
    h->hv = min_size(h->nv, cap);
    h->ho = min_size(h->no, cap);
    h->hlse = min_size(h->nlse, cap);
    h->q = malloc(h->hq * es);
    h->k = malloc(h->hk * es);
    h->v = malloc(h->hv * es);
    h->o = malloc(h->ho * es);
    h->lse = malloc(h->hlse * sizeof(float));
    if (!h->q || !h->k || !h->v || !h->o || !h->lse) {
        host_free(h);
        fprintf(stderr, "out of host memory for the problem's tensors\n");
        return FJ_ERR_OUT_OF_MEMORY;
    }
    uint64_t st = seed * 0x2545f4914f6cdd1dull + 1;
    fill_random(h->q, d->dtype, h->hq, &st);
    fill_random(h->k, d->dtype, h->hk, &st);
    fill_random(h->v, d->dtype, h->hv, &st);
    return FJ_OK;
}

/* Fills n elements of dst from the host block of `held` elements, repeated. */
static fj_status upload_repeated(fj_context *ctx, void *dst, const void *src, size_t n, size_t held,
                                 size_t es)
{
    fj_status s = FJ_OK;
    for (size_t off = 0; off < n && !s; off += held)
        s = fj_copy_to_device(ctx, (char *)dst + off * es, src, min_size(held, n - off) * es);
    return s;
}

typedef struct dev_tensors {
    fj_context *ctx;
    void *q, *k, *v, *o;
    float *lse;
    void *alibi, *sinks; /* the desc's features' arrays, else NULL */
    fj_execute_extras x;
} dev_tensors;

static void dev_free(dev_tensors *t)
{
    fj_free(t->ctx, t->q);
    fj_free(t->ctx, t->k);
    fj_free(t->ctx, t->v);
    fj_free(t->ctx, t->o);
    fj_free(t->ctx, t->lse);
    fj_free(t->ctx, t->alibi);
    fj_free(t->ctx, t->sinks);
    memset(t, 0, sizeof *t);
}

/* Uploads the inputs (k and v only with_kv: a paged run has pools of its
 * own), and poisons o and lse (0xff: NaN) so unwritten
 * elements show up in the check. */
static fj_status dev_make(dev_tensors *t, fj_context *ctx, const host_tensors *h, fj_dtype dt,
                          bool with_kv)
{
    memset(t, 0, sizeof *t);
    t->ctx = ctx;
    size_t es = elem_size(dt);
    fj_status s;
    if ((s = fj_malloc(ctx, h->nq * es, &t->q)) ||
        (with_kv && (s = fj_malloc(ctx, h->nk * es, &t->k))) ||
        (with_kv && (s = fj_malloc(ctx, h->nv * es, &t->v))) ||
        (s = fj_malloc(ctx, h->no * es, &t->o)) ||
        (s = fj_malloc(ctx, h->nlse * sizeof(float), (void **)&t->lse)))
        goto fail;
    memset(h->o, 0xff, h->ho * es);
    memset(h->lse, 0xff, h->hlse * sizeof(float));
    if ((s = upload_repeated(ctx, t->q, h->q, h->nq, h->hq, es)) ||
        (with_kv && (s = upload_repeated(ctx, t->k, h->k, h->nk, h->hk, es))) ||
        (with_kv && (s = upload_repeated(ctx, t->v, h->v, h->nv, h->hv, es))) ||
        (s = upload_repeated(ctx, t->o, h->o, h->no, h->ho, es)) ||
        (s = upload_repeated(ctx, t->lse, h->lse, h->nlse, h->hlse, sizeof(float))))
        goto fail;
    /* --alibi: the ALiBi paper's slopes; --sinks: a few values around 0 */
    fj_execute_extras_init(&t->x);
    const size_t hb = sizeof(float) * (size_t)h->heads_q;
    float *vals = malloc(hb);
    if (!vals) {
        s = FJ_ERR_OUT_OF_MEMORY;
        goto fail;
    }
    if (h->features & FJ_FEATURE_ALIBI) {
        for (int i = 0; i < h->heads_q; i++) vals[i] = exp2f(-8.0f * (i + 1) / h->heads_q);
        if ((s = fj_malloc(ctx, hb, &t->alibi)) || (s = fj_copy_to_device(ctx, t->alibi, vals, hb)))
            goto fail_vals;
        t->x.alibi_slopes = t->alibi;
    }
    if (h->features & FJ_FEATURE_SINKS) {
        for (int i = 0; i < h->heads_q; i++) vals[i] = 0.5f * (float)(i % 5) - 1.0f;
        if ((s = fj_malloc(ctx, hb, &t->sinks)) || (s = fj_copy_to_device(ctx, t->sinks, vals, hb)))
            goto fail_vals;
        t->x.sinks = t->sinks;
    }
    free(vals);
    return FJ_OK;
fail_vals:
    free(vals);
fail:
    dev_free(t);
    return s;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* What the plan runs: the CUDA kernel's canonical name (its tiles in it),
 * or the CPU method and its blocks. */
void cli_kernel_of(const fj_plan_info *info, char *out, size_t n)
{
    if (info->backend == FJ_BACKEND_CUDA || !info->tiles[0]) snprintf(out, n, "%s", info->kernel);
    else snprintf(out, n, "%s %s", info->kernel, info->tiles);
}

static fj_status run_once_on(fj_context *ctx, const fj_attention_desc *d, host_tensors *h,
                             void *o_out, float *lse_out, bool with_lse)
{
    dev_tensors t;
    size_t es = elem_size(d->dtype);
    fj_status s = dev_make(&t, ctx, h, d->dtype, true);
    if (s) return s;
    if (!(s = fj_attention_ex(ctx, d, t.q, t.k, t.v, t.o, with_lse ? t.lse : NULL, &t.x, NULL)) &&
        !(s = fj_synchronize(ctx, NULL)) && !(s = fj_copy_to_host(ctx, o_out, t.o, h->no * es)))
        s = fj_copy_to_host(ctx, lse_out, t.lse, h->nlse * sizeof(float));
    dev_free(&t);
    return s;
}

/* The varlen batch or paged cache vl run on ctx one sequence at a time, each
 * as the dense problem of its own lengths (batch 1; the packed tensors' rows
 * from its first token on are dense [1, seq, heads, head_dim]; a paged
 * problem's keys as they were before paging), into o_out: the check's
 * yardstick, independent of the library's varlen and paged paths. A sequence
 * without keys is no dense problem: its rows are 0, as the rule for rows
 * that see no key says. */
static fj_status run_sequences_on(fj_context *ctx, const fj_attention_desc *d, const cli_varlen *vl,
                                  host_tensors *h, void *o_out)
{
    dev_tensors t;
    const size_t es = elem_size(d->dtype);
    fj_status s = dev_make(&t, ctx, h, d->dtype, true);
    if (s) return s;
    size_t q0 = 0, k0 = 0;
    const size_t qrow = (size_t)d->heads_q * d->head_dim, krow = (size_t)d->heads_kv * d->head_dim;
    const size_t vrow = (size_t)d->heads_kv * dim_v(d), orow = (size_t)d->heads_q * dim_v(d);
    for (int b = 0; b < vl->n && !s; b++) {
        const int sq = vl->len_q[b], sk = vl->len_k[b];
        if (sq && !sk) {
            void *zeros = calloc((size_t)sq * orow, es);
            s = zeros ? fj_copy_to_device(ctx, (char *)t.o + q0 * orow * es, zeros,
                                          (size_t)sq * orow * es)
                      : FJ_ERR_OUT_OF_MEMORY;
            free(zeros);
        } else if (sq) {
            fj_attention_desc one = *d;
            one.features &= ~(uint32_t)(FJ_FEATURE_VARLEN | FJ_FEATURE_PAGED_KV);
            one.page_size = one.num_pages = one.max_pages = one.block_table_stride = 0;
            one.batch = 1;
            one.seqlen_q = sq;
            one.seqlen_k = sk;
            s = fj_attention_ex(ctx, &one, (char *)t.q + q0 * qrow * es,
                                (char *)t.k + k0 * krow * es, (char *)t.v + k0 * vrow * es,
                                (char *)t.o + q0 * orow * es, NULL, &t.x, NULL);
        }
        q0 += (size_t)sq;
        k0 += (size_t)sk;
    }
    if (!s && !(s = fj_synchronize(ctx, NULL))) s = fj_copy_to_host(ctx, o_out, t.o, h->no * es);
    dev_free(&t);
    return s;
}

/* A varlen batch's sequence offsets in ctx's memory, and the extras that
 * name them (x's other fields kept; paged: cu_seqlens_q alone). */
typedef struct dev_varlen {
    fj_context *ctx;
    int32_t *cu_q, *cu_k;
} dev_varlen;

static void dev_varlen_free(dev_varlen *v)
{
    if (v->ctx) {
        fj_free(v->ctx, v->cu_q);
        fj_free(v->ctx, v->cu_k);
    }
    memset(v, 0, sizeof *v);
}

static fj_status dev_varlen_make(dev_varlen *v, fj_context *ctx, const cli_varlen *vl, bool paged,
                                 fj_execute_extras *x)
{
    memset(v, 0, sizeof *v);
    v->ctx = ctx;
    const size_t bytes = sizeof(int32_t) * ((size_t)vl->n + 1);
    int32_t *hq = malloc(bytes), *hk = malloc(bytes);
    fj_status s = FJ_ERR_OUT_OF_MEMORY;
    if (hq && hk) {
        hq[0] = hk[0] = 0;
        int64_t tq = 0, tk = 0;
        for (int b = 0; b < vl->n; b++) {
            tq += vl->len_q[b];
            tk += vl->len_k[b];
            hq[b + 1] = (int32_t)(tq < INT32_MAX ? tq : INT32_MAX);
            hk[b + 1] = (int32_t)(tk < INT32_MAX ? tk : INT32_MAX);
        }
        /* paged: the keys are in the pages, named by the block table */
        if (!(s = fj_malloc(ctx, bytes, (void **)&v->cu_q)) &&
            !(s = fj_copy_to_device(ctx, v->cu_q, hq, bytes)) &&
            (paged || (!(s = fj_malloc(ctx, bytes, (void **)&v->cu_k)) &&
                       !(s = fj_copy_to_device(ctx, v->cu_k, hk, bytes))))) {
            x->cu_seqlens_q = v->cu_q;
            x->cu_seqlens_k = paged ? NULL : v->cu_k;
            x->total_q = hq[vl->n];
            x->total_k = paged ? 0 : hk[vl->n];
        }
    }
    free(hq);
    free(hk);
    if (s) dev_varlen_free(v);
    return s;
}

/* A paged problem's pools, block table and KV lengths in ctx's memory. */
typedef struct dev_paged {
    fj_context *ctx;
    void *k, *v;
    int32_t *table, *used;
} dev_paged;

static void dev_paged_free(dev_paged *p)
{
    if (p->ctx) {
        fj_free(p->ctx, p->k);
        fj_free(p->ctx, p->v);
        fj_free(p->ctx, p->table);
        fj_free(p->ctx, p->used);
    }
    memset(p, 0, sizeof *p);
}

/* Pages each sequence's keys (vl->len_k[b], packed in h's k and v from
 * sequence 0 on) into pools of d's num_pages pages: sequence b takes the
 * next ceil(L_b / page_size) logical pages, logical page g is pool page
 * perm[g] (g itself, or shuffled from seed). With h's whole k and v held
 * (a checked run) the pools get those keys and every row no sequence uses
 * (a last page's tail, spare pages) is NaN, so a read past L_b shows in the
 * check; otherwise (timing alone) the pools are h's random block repeated.
 * Block-table entries past a sequence's pages are -1 (never read). */
static fj_status dev_paged_make(dev_paged *p, fj_context *ctx, const fj_attention_desc *d,
                                const cli_varlen *vl, const host_tensors *h, bool shuffle,
                                uint64_t seed, fj_execute_extras *x)
{
    memset(p, 0, sizeof *p);
    p->ctx = ctx;
    const int P = d->page_size, cols = d->max_pages;
    int64_t used = 0;
    for (int b = 0; b < vl->n; b++) {
        const int64_t n = pages_of(vl->len_k[b], P);
        if (n > cols) {
            fprintf(stderr,
                    "flashjit: sequence %d's %d keys need %lld pages of %d, more than the block "
                    "table's max_pages (%d) columns\n",
                    b, vl->len_k[b], (long long)n, P, cols);
            return FJ_ERR_INVALID_ARGUMENT;
        }
        used += n;
    }
    if (used > d->num_pages) {
        fprintf(stderr,
                "flashjit: the sequences' keys fill %lld pages of %d, more than num_pages "
                "(%d)\n",
                (long long)used, P, d->num_pages);
        return FJ_ERR_INVALID_ARGUMENT;
    }
    /* k's rows head_dim long, v's head_dim_v: a pool each */
    const size_t es = elem_size(d->dtype);
    const size_t rows[2] = {(size_t)d->heads_kv * d->head_dim, (size_t)d->heads_kv * dim_v(d)};
    const size_t page_elems[2] = {(size_t)P * rows[0], (size_t)P * rows[1]};
    const size_t pool_elems[2] = {(size_t)d->num_pages * page_elems[0],
                                  (size_t)d->num_pages * page_elems[1]};
    const size_t table_n = (size_t)vl->n * (size_t)cols;
    int32_t *perm = malloc(sizeof(int32_t) * (size_t)d->num_pages);
    int32_t *table = malloc(sizeof(int32_t) * (table_n ? table_n : 1));
    int32_t *lens = malloc(sizeof(int32_t) * (size_t)(vl->n ? vl->n : 1));
    const bool exact = h->hk == h->nk && h->hv == h->nv;
    char *pool =
        exact ? malloc((pool_elems[0] > pool_elems[1] ? pool_elems[0] : pool_elems[1]) * es) : NULL;
    fj_status s = FJ_ERR_OUT_OF_MEMORY;
    if (!perm || !table || !lens || (exact && !pool)) goto out;
    for (int g = 0; g < d->num_pages; g++) perm[g] = g;
    uint64_t st = seed * 0x9e3779b97f4a7c15ull + 0x5851f42d4c957f2dull;
    for (int g = d->num_pages - 1; shuffle && g > 0; g--) {
        int j = (int)(next_random(&st) % (uint64_t)(g + 1)), t = perm[g];
        perm[g] = perm[j];
        perm[j] = t;
    }
    for (size_t i = 0; i < table_n; i++) table[i] = -1;
    int g = 0;
    for (int b = 0; b < vl->n; b++) {
        lens[b] = vl->len_k[b];
        for (int j = 0; j < pages_of(vl->len_k[b], P); j++) table[(size_t)b * cols + j] = perm[g++];
    }
    if ((s = fj_malloc(ctx, pool_elems[0] * es, &p->k)) ||
        (s = fj_malloc(ctx, pool_elems[1] * es, &p->v)) ||
        (s = fj_malloc(ctx, sizeof(int32_t) * (table_n ? table_n : 1), (void **)&p->table)) ||
        (s = fj_malloc(ctx, sizeof(int32_t) * (size_t)(vl->n ? vl->n : 1), (void **)&p->used)) ||
        (s = fj_copy_to_device(ctx, p->table, table, sizeof(int32_t) * table_n)) ||
        (s = fj_copy_to_device(ctx, p->used, lens, sizeof(int32_t) * (size_t)vl->n)))
        goto out;
    for (int t = 0; t < 2 && !s; t++) {
        void *src = t ? h->v : h->k, *dst = t ? p->v : p->k;
        const size_t row = rows[t];
        if (!exact) {
            s = upload_repeated(ctx, dst, src, pool_elems[t], t ? h->hv : h->hk, es);
            continue;
        }
        memset(pool, 0xff, pool_elems[t] * es); /* NaN in every dtype */
        size_t k0 = 0;
        for (int b = 0; b < vl->n; b++) {
            const int L = vl->len_k[b];
            for (int j = 0; j * P < L; j++) {
                const size_t n = (size_t)(L - j * P < P ? L - j * P : P);
                memcpy(pool + (size_t)table[(size_t)b * cols + j] * page_elems[t] * es,
                       (const char *)src + (k0 + (size_t)j * P) * row * es, n * row * es);
            }
            k0 += (size_t)L;
        }
        s = fj_copy_to_device(ctx, dst, pool, pool_elems[t] * es);
    }
    if (!s) {
        x->block_table = p->table;
        x->seqused_k = p->used;
    }
out:
    free(perm);
    free(table);
    free(lens);
    free(pool);
    if (s) dev_paged_free(p);
    return s;
}

double cli_varlen_flops(const fj_attention_desc *d, const int *len_q, const int *len_k, int n)
{
    double f = 0;
    for (int b = 0; b < n; b++) {
        /* 2 x D per score for Q K^T, 2 x Dv for P V (fj_attention_flops) */
        double one = 2.0 * d->heads_q * (double)len_q[b] * len_k[b] * (d->head_dim + dim_v(d));
        if (d->causal != FJ_CAUSAL_NONE && len_q[b] == len_k[b]) one *= 0.5;
        f += one;
    }
    return f;
}

void cli_result_free(cli_result *r)
{
    free(r->description);
    r->description = NULL;
}

fj_status cli_measure(fj_context *ctx, fj_context *ref, const fj_attention_desc *d, int warmup,
                      int repeat, bool with_lse, uint64_t seed, cli_result *r)
{
    return cli_measure_ex(ctx, ref, d, NULL, false, warmup, repeat, with_lse, seed, r);
}

fj_status cli_measure_ex(fj_context *ctx, fj_context *ref, const fj_attention_desc *d,
                         const cli_varlen *vl, bool shuffle_pages, int warmup, int repeat,
                         bool with_lse, uint64_t seed, cli_result *r)
{
    memset(r, 0, sizeof *r);
    r->rel_err = -1;
    r->ok = true;
    snprintf(r->backend, sizeof r->backend, "%s", fj_backend_name(fj_context_backend(ctx)));
    const bool paged = (d->features & FJ_FEATURE_PAGED_KV) != 0;
    cli_varlen full = {0}; /* a key's sequences: all of its lengths */
    if (!(d->features & (FJ_FEATURE_VARLEN | FJ_FEATURE_PAGED_KV))) {
        vl = NULL;
    } else if (!vl || !vl->n) {
        if (!make_sequences(&full, d->batch, d->seqlen_q, NULL, d->seqlen_k))
            return FJ_ERR_OUT_OF_MEMORY;
        vl = &full;
    }
    fj_plan *plan = NULL;
    double t0 = cli_now();
    fj_status s = fj_plan_create(ctx, d, &plan);
    if (s) {
        cli_varlen_free(&full);
        return s;
    }
    r->plan_ms = (cli_now() - t0) * 1e3;
    fj_plan_info info;
    if ((s = fj_plan_get_info(plan, &info))) {
        fj_plan_destroy(plan);
        cli_varlen_free(&full);
        return s;
    }
    /* For people: the describe text's words on where the image came from. */
    const char *img = strstr(fj_plan_describe(plan), "image: ");
    if (img)
        snprintf(r->plan_note, sizeof r->plan_note, "%.*s", (int)strcspn(img + 7, "\n"), img + 7);
    else snprintf(r->plan_note, sizeof r->plan_note, "CPU workspace");
    cli_kernel_of(&info, r->kernel, sizeof r->kernel);
    r->description = strdup(fj_plan_describe(plan));
    r->launches = info.launches;

    host_tensors h;
    dev_tensors t = {0};
    dev_varlen dv = {0};
    dev_paged dp = {0};
    double *ms = calloc((size_t)repeat, sizeof *ms);
    if (!ms) {
        fj_plan_destroy(plan);
        cli_varlen_free(&full);
        return FJ_ERR_OUT_OF_MEMORY;
    }
    /* Without a check, the host holds one block of each tensor, repeated on
       upload: decode shapes have K and V of many GB. */
    if ((s = host_make(&h, d, vl, seed, ref ? 0 : HOST_BLOCK_ELEMS))) goto out_plan;
    if ((s = dev_make(&t, ctx, &h, d->dtype, !paged))) goto out_host;
    fj_execute_extras x = t.x; /* with a varlen batch's sequences, a paged cache's table */
    if ((d->features & FJ_FEATURE_VARLEN) && (s = dev_varlen_make(&dv, ctx, vl, paged, &x)))
        goto out_dev;
    if (paged && (s = dev_paged_make(&dp, ctx, d, vl, &h, shuffle_pages, seed, &x))) goto out_dev;
    void *k = paged ? dp.k : t.k, *v = paged ? dp.v : t.v;
    if ((s = fj_plan_time_ex(plan, t.q, k, v, t.o, with_lse ? t.lse : NULL, &x, warmup, repeat,
                             ms)))
        goto out_dev;
    if (fj_context_backend(ctx) == FJ_BACKEND_CUDA) {
        /* host cost of the call: many asynchronous launches, one wait */
        int n = 50;
        double h0 = cli_now();
        for (int i = 0; i < n && !s; i++)
            s = fj_plan_execute_ex(plan, t.q, k, v, t.o, with_lse ? t.lse : NULL, &x, NULL);
        r->host_us = (cli_now() - h0) * 1e6 / n;
        if (!s) s = fj_synchronize(ctx, NULL);
        if (s) goto out_dev;
    }
    qsort(ms, (size_t)repeat, sizeof *ms, cmp_double);
    r->runs = repeat;
    r->ms_min = ms[0];
    r->ms_max = ms[repeat - 1];
    r->ms_median = repeat % 2 ? ms[repeat / 2] : 0.5 * (ms[repeat / 2 - 1] + ms[repeat / 2]);
    double flops = fj_attention_flops(d), bytes = cli_min_bytes(d, with_lse);
    if (vl) { /* each sequence's own lengths, not the bounds */
        size_t tq, tk;
        varlen_tokens(vl, &tq, &tk);
        const double es = (double)elem_size(d->dtype);
        flops = cli_varlen_flops(d, vl->len_q, vl->len_k, vl->n);
        bytes = (double)tq * d->heads_q * (d->head_dim + dim_v(d)) * es +
                (double)tk * d->heads_kv * (d->head_dim + dim_v(d)) * es +
                (with_lse ? 4.0 * d->heads_q * (double)tq : 0);
    }
    r->tflops = flops / (r->ms_median * 1e-3) / 1e12;
    r->gbps = bytes / (r->ms_median * 1e-3) / 1e9;

    if (ref) {
        size_t es = elem_size(d->dtype);
        void *o_ref = malloc(h.no * es);
        float *lse_ref = malloc(h.nlse * sizeof(float));
        if (!o_ref || !lse_ref) {
            free(o_ref);
            free(lse_ref);
            s = FJ_ERR_OUT_OF_MEMORY;
            goto out_dev;
        }
        /* The reference first: uploading poisons h.o, which then receives the
           timed output of the backend under test. */
        if (!(s = vl ? run_sequences_on(ref, d, vl, &h, o_ref)
                     : run_once_on(ref, d, &h, o_ref, lse_ref, false)))
            s = fj_copy_to_host(ctx, h.o, t.o, h.no * es);
        if (!s) {
            double num = 0, den = 0;
            bool finite = true;
            size_t n = h.no, tq = 1, tk;
            if (vl) varlen_tokens(vl, &tq, &tk);
            if (!tq) n = 0; /* no query token: the one element passed holds nothing */
            for (size_t i = 0; i < n; i++) {
                double x = load(h.o, d->dtype, i), y = load(o_ref, d->dtype, i);
                if (!isfinite(x)) finite = false;
                num += (x - y) * (x - y);
                den += y * y;
            }
            r->rel_err = !finite ? INFINITY : den > 0 ? sqrt(num / den) : sqrt(num);
            /* Both sides round to the dtype: allow twice the oracle tolerance. */
            r->tolerance = d->dtype == FJ_F32 ? 1e-5 : d->dtype == FJ_F16 ? 4e-3 : 3.2e-2;
            r->ok = r->rel_err <= r->tolerance;
        }
        free(o_ref);
        free(lse_ref);
    }
out_dev:
    dev_paged_free(&dp);
    dev_varlen_free(&dv);
    dev_free(&t);
out_host:
    host_free(&h);
out_plan:
    free(ms);
    fj_plan_destroy(plan);
    cli_varlen_free(&full);
    return s;
}
