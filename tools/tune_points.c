/* The problems flashjit tune times: the rows of a grid (tools/grids/), or
 * the product of the axis flags with the default grid's values for the axes
 * not given, sized by the grid's rule; --decode adds each head dim, dtype
 * and mask's decode problem. Problems sharing a tuning point are tuned once. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_grid.h"
#include "problem.h"
#include "tune.h"
#include "tune/tuning.h"

#define CMD "tune"

/* The default grids' sizing rule for problems they do not list: CUDA the
 * anchors' B*S = 16384 tokens and H = 2048 / D, so each of q, k, v, o is
 * 64 MiB in bf16, and decode rows as in its decode table (B 8, H 32); the
 * CPU the bench's shape (b1 h8). */
#define CUDA_TOKENS 16384
#define CUDA_HEADS_X_DIM 2048
#define CUDA_DECODE_BATCH_HEADS 256
#define CUDA_DECODE_SEQLEN_K 8192
#define CPU_BATCH_HEADS 8
#define CPU_DECODE_BATCH_HEADS 32
#define CPU_DECODE_SEQLEN_K 4096

static bool axes_given(const tune_space *s)
{
    return s->n_head_dims || s->n_dtypes || s->n_causals || s->n_seqlens || s->batch_heads;
}

static const char *default_grid(fj_backend b)
{
    return b == FJ_BACKEND_CUDA ? "default" : "default-cpu";
}

static int gcd(int a, int b)
{
    while (b) {
        int t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* Batch and heads of a problem the rule sizes: --batch-heads split as
 * evenly with the preferred head count as it divides, else the backend's
 * default size. */
static void rule_size(const tune_space *s, bool cuda, int head_dim, int seqlen, int *batch,
                      int *heads)
{
    int pref_heads, total;
    if (seqlen == 1) {
        pref_heads = 32;
        total = cuda ? CUDA_DECODE_BATCH_HEADS : CPU_DECODE_BATCH_HEADS;
    } else if (cuda) {
        pref_heads = CUDA_HEADS_X_DIM / head_dim > 0 ? CUDA_HEADS_X_DIM / head_dim : 1;
        int b = CUDA_TOKENS / seqlen > 0 ? CUDA_TOKENS / seqlen : 1;
        total = b * pref_heads;
    } else {
        pref_heads = total = CPU_BATCH_HEADS;
    }
    if (s->batch_heads) total = s->batch_heads;
    *heads = gcd(total, pref_heads);
    *batch = total / *heads;
}

static int decode_keys(const tune_space *s, bool cuda)
{
    return s->decode_seqlen_k ? s->decode_seqlen_k
           : cuda             ? CUDA_DECODE_SEQLEN_K
                              : CPU_DECODE_SEQLEN_K;
}

typedef struct list {
    tune_point *p;
    int count, cap;
} list;

/* Adds d unless its tuning point is there (said); 1 when out of memory. */
static int add(list *l, const fj_attention_desc *d)
{
    fj_problem p;
    if (fj_problem_init(&p, d) != FJ_OK) {
        fprintf(stderr, "flashjit tune: skipped a problem: %s\n", fj_last_error());
        return 0;
    }
    tune_point pt;
    pt.d = *d;
    fj_problem_key_of(&p, pt.key, sizeof pt.key);
    fj_tuning_entry key;
    fj_tuning_key_for(&p, "", "", "", &key);
    snprintf(pt.point, sizeof pt.point, "%s", key.point);
    for (int i = 0; i < l->count; i++)
        if (!strcmp(l->p[i].point, pt.point)) {
            printf("note: %s has the tuning point %s of %s; tuned once, as the latter\n", pt.key,
                   pt.point, l->p[i].key);
            return 0;
        }
    if (l->count == l->cap) {
        int cap = l->cap ? 2 * l->cap : 32;
        tune_point *n = realloc(l->p, (size_t)cap * sizeof *n);
        if (!n) return 1;
        l->p = n;
        l->cap = cap;
    }
    l->p[l->count++] = pt;
    return 0;
}

static int add_int(int *v, int *n, int x)
{
    for (int i = 0; i < *n; i++)
        if (v[i] == x) return 0;
    if (*n < TUNE_MAX_VALUES) v[(*n)++] = x;
    return 0;
}

/* The axes not given take the default grid's values. */
static void fill_axes(tune_space *s, const cli_grid *g)
{
    bool dims = !s->n_head_dims, dtypes = !s->n_dtypes, causals = !s->n_causals,
         seqs = !s->n_seqlens;
    for (int i = 0; i < g->count; i++) {
        const fj_attention_desc *d = &g->rows[i];
        if (dims) add_int(s->head_dims, &s->n_head_dims, d->head_dim);
        if (seqs && d->seqlen_q == d->seqlen_k) add_int(s->seqlens, &s->n_seqlens, d->seqlen_q);
        bool have = false;
        for (int j = 0; dtypes && j < s->n_dtypes; j++) have |= s->dtypes[j] == d->dtype;
        if (dtypes && !have && s->n_dtypes < 3) s->dtypes[s->n_dtypes++] = d->dtype;
        have = false;
        for (int j = 0; causals && j < s->n_causals; j++) have |= s->causals[j] == d->causal;
        if (causals && !have && s->n_causals < 3) s->causals[s->n_causals++] = d->causal;
    }
}

static fj_attention_desc sized(const tune_space *s, bool cuda, int dim, fj_dtype dtype, int seqlen,
                               fj_causal causal)
{
    int batch, heads;
    rule_size(s, cuda, dim, seqlen, &batch, &heads);
    fj_attention_desc d;
    fj_attention_desc_init(&d, batch, heads, heads, seqlen,
                           seqlen == 1 ? decode_keys(s, cuda) : seqlen, dim, dtype);
    d.causal = causal;
    return d;
}

int tune_points_make(const tune_space *space, fj_backend b, tune_point **out, int *count)
{
    *out = NULL;
    *count = 0;
    bool cuda = b == FJ_BACKEND_CUDA;
    bool named = space->grid && strcmp(space->grid, "default");
    if (named && axes_given(space))
        return cli_usage_error(CMD,
                               "--grid %s takes no axis flag (--head-dims, --dtypes, "
                               "--causal, --seqlens, --batch-heads): those replace axes of "
                               "the default grid",
                               space->grid);
    cli_grid g;
    int rc = cli_grid_load(CMD, "--grid", named ? space->grid : default_grid(b), &g);
    if (rc) return rc;
    tune_space s = *space;
    list l = {NULL, 0, 0};
    if (!axes_given(space)) {
        for (int i = 0; i < g.count && !rc; i++) {
            const fj_attention_desc *d = &g.rows[i];
            if (cuda && (d->dtype == FJ_F32 || d->head_dim % 8)) {
                char key[FJ_PROBLEM_KEY_MAX];
                fj_problem_key(d, key, sizeof key);
                cli_grid_free(&g);
                free(l.p);
                return cli_usage_error(CMD,
                                       "--grid %s: %s: the CUDA kernels compute f16 and bf16 "
                                       "at head dims that are multiples of 8 (--backend cpu "
                                       "takes it)",
                                       space->grid ? space->grid : default_grid(b), key);
            }
            rc = add(&l, d);
        }
    } else {
        fill_axes(&s, &g);
        for (int a = 0; a < s.n_dtypes && !rc; a++)
            for (int h = 0; h < s.n_head_dims && !rc; h++)
                for (int q = 0; q < s.n_seqlens && !rc; q++)
                    for (int c = 0; c < s.n_causals && !rc; c++) {
                        fj_attention_desc d = sized(&s, cuda, s.head_dims[h], s.dtypes[a],
                                                    s.seqlens[q], s.causals[c]);
                        rc = add(&l, &d);
                    }
    }
    /* --decode: each head dim, dtype and causal kind's decode problem. */
    int base = l.count;
    for (int i = 0; s.decode && i < base && !rc; i++) {
        const fj_attention_desc *d = &l.p[i].d;
        fj_attention_desc dec = sized(&s, cuda, d->head_dim, d->dtype, 1, d->causal);
        bool have = false;
        for (int j = 0; j < l.count; j++) {
            const fj_attention_desc *e = &l.p[j].d;
            have |= e->seqlen_q == 1 && e->head_dim == d->head_dim && e->dtype == d->dtype &&
                    e->causal == d->causal;
        }
        if (!have) rc = add(&l, &dec);
    }
    cli_grid_free(&g);
    if (rc) {
        free(l.p);
        fprintf(stderr, "flashjit tune: out of host memory for the problems\n");
        return 1;
    }
    *out = l.p;
    *count = l.count;
    return 0;
}
