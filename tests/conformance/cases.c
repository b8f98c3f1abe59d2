/* The conformance list: every case, by family. The families came from the
 * three suites that used to build their own cases (test_reference,
 * test_cpu_tiled, test_cuda_grid; each family keeps their shapes, masks and
 * tolerances, and the CUDA families still require CUDA to run them), plus
 * decode shapes, broadcast inputs, odd head dims and scales, and bench's smoke
 * grid, and the serving features (softcap, ALiBi and sinks, variable-length
 * batches). Random families draw their shapes from the suite's seed, so a
 * seed names a list. */
#include <stdio.h>
#include <string.h>

#include "case.h"

#define NELEMS(a) ((int)(sizeof(a) / sizeof((a)[0])))

typedef struct builder {
    fjt_case_list *l;
    bool ok;
} builder;

static fjt_case *add(builder *b, const fjt_case *c)
{
    if (!b->ok || !fjt_case_list_add(b->l, c)) {
        b->ok = false;
        return NULL;
    }
    return &b->l->cases[b->l->n - 1];
}

static fj_attention_desc desc(int batch, int hq, int hkv, int sq, int sk, int dim, fj_dtype t,
                              fj_causal causal, int wl, int wr)
{
    fj_attention_desc d;
    fj_attention_desc_init(&d, batch, hq, hkv, sq, sk, dim, t);
    d.causal = causal;
    d.window_left = wl;
    d.window_right = wr;
    return d;
}

static const fj_dtype all_dtypes[] = {FJ_F32, FJ_F16, FJ_BF16};

/* ---- the CPU reference's families (test_reference) ------------------------- */

static const int ref_seqlens[] = {1, 2, 3, 17, 63, 64, 65, 127, 128, 129, 239, 1023};
static const int ref_dims[] = {8, 40, 64, 80, 96, 128, 200, 256};

/* fjt_random_desc writes strides; name the layout they are. */
static fjt_layout layout_of(const fj_attention_desc *d)
{
    static const fjt_layout kinds[] = {FJT_DENSE, FJT_BHSD, FJT_PADDED};
    for (int k = 0; k < NELEMS(kinds); k++) {
        fj_attention_desc x = *d;
        fjt_set_layout(&x, kinds[k]);
        if (!memcmp(&x, d, sizeof x)) return kinds[k];
    }
    return FJT_CUSTOM;
}

/* Random problems from the whole grid: every mask, GQA and MQA, dense, BHSD
 * and padded strides, custom and negative scales. */
static void ref_random(builder *b, uint64_t seed)
{
    fjt_rng rng;
    fjt_rng_init(&rng, seed ^ 0x7265662d72616e64ull);
    fjt_axes ax =
        {ref_seqlens, NELEMS(ref_seqlens), ref_dims, NELEMS(ref_dims), all_dtypes, 3, 3e7, NULL, 0};
    for (int i = 0; i < 150; i++) {
        fj_attention_desc d;
        fjt_random_desc(&rng, &ax, &d);
        char name[48];
        snprintf(name, sizeof name, "%d", i);
        fjt_case c = fjt_case_make("ref-random", name, &d, layout_of(&d), true);
        add(b, &c);
    }
}

/* Every seqlen against every other (Sq != Sk both ways), every head dim and
 * dtype at least once, every causal kind. */
static void ref_axes(builder *b)
{
    for (int x = 0; x < 12; x++)
        for (int y = 0; y < 12; y++) {
            fj_attention_desc d =
                desc(1, 2, 1, ref_seqlens[x], ref_seqlens[y], ref_dims[(x + y) % 8],
                     all_dtypes[(x * 12 + y) % 3], (fj_causal)((x + 2 * y) % 3), -1, -1);
            if (ref_seqlens[x] * (double)ref_seqlens[y] * d.head_dim > 4e7) d.head_dim = 8;
            char name[48];
            snprintf(name, sizeof name, "sq%d-sk%d", d.seqlen_q, d.seqlen_k);
            fjt_case c = fjt_case_make("ref-axes", name, &d, FJT_DENSE, true);
            add(b, &c);
        }
}

/* Rows that see no key: bottom-right causal with Sq > Sk empties the first
 * Sq - Sk rows; a window of the diagonal alone; the same top-left with a
 * left window. One long row of keys. */
static void ref_specials(builder *b)
{
    fj_attention_desc d = desc(1, 2, 2, 65, 17, 64, FJ_F32, FJ_CAUSAL_BOTTOM_RIGHT, -1, -1);
    fjt_case c = fjt_case_make("ref-empty", "br-f32", &d, FJT_DENSE, true);
    add(b, &c);
    d.dtype = FJ_BF16;
    c = fjt_case_make("ref-empty", "br-bf16", &d, FJT_DENSE, true);
    add(b, &c);
    d = desc(1, 1, 1, 40, 40, 40, FJ_F16, FJ_CAUSAL_NONE, 0, 0);
    c = fjt_case_make("ref-empty", "diagonal", &d, FJT_DENSE, true);
    add(b, &c);
    d.causal = FJ_CAUSAL_TOP_LEFT;
    d.window_left = 3;
    c = fjt_case_make("ref-empty", "tl-left3-right0", &d, FJT_DENSE, true);
    add(b, &c);
    /* the reference's block height shrinks so its score workspace stays bounded */
    d = desc(1, 1, 1, 3, 70000, 8, FJ_F32, FJ_CAUSAL_NONE, -1, -1);
    c = fjt_case_make("long", "keys70000", &d, FJT_DENSE, true);
    add(b, &c);
}

/* ---- the CPU tiled backend's families (test_cpu_tiled) ---------------------- */

/* order[0..n): each of k values n/k or n/k + 1 times, shuffled, so that every
 * axis value appears several times while the combinations stay random. */
static void stratify(int *order, int n, int k, fjt_rng *rng)
{
    for (int i = 0; i < n; i++) order[i] = i % k;
    for (int i = n - 1; i > 0; i--) {
        int j = fjt_range(rng, 0, i), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
}

enum heads_kind { MHA, GQA8, MQA, HEAD_KINDS };

static void set_heads(fj_attention_desc *d, enum heads_kind kind, fjt_rng *rng)
{
    switch (kind) {
    case MHA: d->heads_q = d->heads_kv = fjt_range(rng, 1, 3); break;
    case GQA8:
        d->heads_kv = fjt_range(rng, 1, 2);
        d->heads_q = 8 * d->heads_kv;
        break;
    case MQA:
        d->heads_kv = 1;
        d->heads_q = fjt_range(rng, 2, 6);
        break;
    default: break;
    }
}

enum window_kind { NO_WINDOW, LEFT, RIGHT, BOTH, WINDOW_KINDS };

static void set_window(fj_attention_desc *d, enum window_kind kind, fjt_rng *rng)
{
    int hi = d->seqlen_k + 8;
    d->window_left = kind == LEFT || kind == BOTH ? fjt_range(rng, 0, hi) : -1;
    d->window_right = kind == RIGHT || kind == BOTH ? fjt_range(rng, 0, hi) : -1;
}

/* The oracle is the slow part: keep each problem's cost modest by trimming
 * the batch, then the heads (keeping the GQA/MQA kind), of the problems where
 * long seqlens meet; only the very few costliest (both seqlens 1023 with a
 * large head dim) lose their kind and keep one head. */
static void cap_cost(fj_attention_desc *d)
{
    const double cap = 4e7;
    double per_head = (double)d->seqlen_q * d->seqlen_k * d->head_dim;
    if (per_head * d->batch * d->heads_q > cap) d->batch = 1;
    if (per_head * d->heads_q > cap && d->heads_kv > 1) {
        d->heads_q /= d->heads_kv; /* the group over one kv head */
        d->heads_kv = 1;
    }
    if (per_head * d->heads_q > cap && d->heads_q != 8 && d->heads_q > 2) d->heads_q = 2;
    if (per_head * d->heads_q > 8 * cap) d->heads_q = d->heads_kv = 1;
}

/* 96 problems, every value of every axis (seqlens, head dims, dtypes, heads
 * kind, causal kind, window kind, layout) dealt evenly in random
 * combinations; custom scales on half; every 8th without lse. */
static void tiled_grid(builder *b, uint64_t seed)
{
    static const fjt_layout layouts[] = {FJT_DENSE, FJT_BHSD, FJT_PADDED3};
    fjt_rng rng;
    fjt_rng_init(&rng, seed ^ 0x1001);
    enum { N = 96 };
    int sq[N], sk[N], dim[N], dt[N], heads[N], causal[N], window[N], layout[N];
    stratify(sq, N, NELEMS(ref_seqlens), &rng);
    stratify(sk, N, NELEMS(ref_seqlens), &rng);
    stratify(dim, N, NELEMS(ref_dims), &rng);
    stratify(dt, N, 3, &rng);
    stratify(heads, N, HEAD_KINDS, &rng);
    stratify(causal, N, 3, &rng);
    stratify(window, N, WINDOW_KINDS, &rng);
    stratify(layout, N, NELEMS(layouts), &rng);
    for (int i = 0; i < N; i++) {
        fj_attention_desc d;
        fj_attention_desc_init(&d, fjt_range(&rng, 1, 2), 1, 1, ref_seqlens[sq[i]],
                               ref_seqlens[sk[i]], ref_dims[dim[i]], (fj_dtype)dt[i]);
        set_heads(&d, (enum heads_kind)heads[i], &rng);
        d.causal = (fj_causal)causal[i];
        set_window(&d, (enum window_kind)window[i], &rng);
        if (fjt_range(&rng, 0, 1)) d.scale = (float)(0.05 + 1.5 * fjt_uniform(&rng));
        cap_cost(&d);
        char name[48];
        snprintf(name, sizeof name, "%d", i);
        fjt_case c = fjt_case_make("tiled-grid", name, &d, layouts[layout[i]], i % 8 != 7);
        add(b, &c);
    }
}

fjt_case fjt_case_draw(fjt_rng *rng, const char *group, const char *name, int max_seqlen,
                       bool sharp)
{
    static const fjt_layout layouts[] = {FJT_DENSE, FJT_BHSD, FJT_PADDED3};
    fj_attention_desc d;
    fj_attention_desc_init(&d, 1, 1, 1, fjt_range(rng, 1, max_seqlen),
                           fjt_range(rng, 1, max_seqlen),
                           ref_dims[fjt_range(rng, 0, NELEMS(ref_dims) - 1)],
                           all_dtypes[fjt_range(rng, 0, 2)]);
    set_heads(&d, (enum heads_kind)fjt_range(rng, 0, HEAD_KINDS - 1), rng);
    d.causal = (fj_causal)fjt_range(rng, 0, 2);
    set_window(&d, (enum window_kind)fjt_range(rng, 0, WINDOW_KINDS - 1), rng);
    if (sharp) d.scale = (float)(1.0 + 3.0 * fjt_uniform(rng));
    cap_cost(&d);
    return fjt_case_make(group, name, &d, layouts[fjt_range(rng, 0, NELEMS(layouts) - 1)], true);
}

/* Rows that see no key, by every way it can happen (and rows that see one),
 * GQA 8:1, each dtype. */
static void empty_rows(builder *b)
{
    static const struct {
        const char *name;
        int sq, sk;
        fj_causal causal;
        int wl, wr;
    } cases[] = {
        {"br-130-40", 130, 40, FJ_CAUSAL_BOTTOM_RIGHT, -1, -1},  /* rows 0..89 see nothing */
        {"left3-300-65", 300, 65, FJ_CAUSAL_NONE, 3, 0},         /* rows past key 68 see nothing */
        {"tl-left0-129-17", 129, 17, FJ_CAUSAL_TOP_LEFT, 0, -1}, /* row i sees key i while i < 17 */
        {"right2-100-10", 100, 10, FJ_CAUSAL_NONE, -1, 2},       /* rows 0..86 see nothing */
        {"diag-64-200", 64, 200, FJ_CAUSAL_NONE, 0, 0},          /* row i sees key i + 136 only */
        {"br-left5-239-1", 239, 1, FJ_CAUSAL_BOTTOM_RIGHT, 5,
         -1}, /* only the last rows see the key */
    };
    for (int i = 0; i < NELEMS(cases); i++)
        for (int t = 0; t < 3; t++) {
            fj_attention_desc d = desc(2, 8, 1, cases[i].sq, cases[i].sk, 40, all_dtypes[t],
                                       cases[i].causal, cases[i].wl, cases[i].wr);
            char name[48];
            snprintf(name, sizeof name, "%s-%s", cases[i].name, fj_dtype_name(all_dtypes[t]));
            fjt_case c = fjt_case_make("empty-rows", name, &d, FJT_DENSE, true);
            add(b, &c);
        }
}

/* Inputs whose rows overlap or repeat: seq stride 0 broadcasts one key to
 * every position, stride < head_dim overlaps, head stride 0 shares a kv head.
 * f32 cannot hand these to sgemm in place. */
static void overlapping_inputs(builder *b)
{
    for (int t = 0; t < 3; t++) {
        fj_attention_desc d =
            desc(2, 4, 2, 65, 129, 40, all_dtypes[t], FJ_CAUSAL_BOTTOM_RIGHT, -1, -1);
        d.k_stride[0] = 40;
        d.k_stride[1] = 0;
        d.k_stride[2] = 7; /* heads overlap too */
        d.v_stride[0] = 129 * 20;
        d.v_stride[1] = 20; /* half a row apart */
        d.v_stride[2] = 0;  /* both kv heads read the same values */
        d.q_stride[0] = 65 * 4 * 40;
        d.q_stride[1] = 4 * 40;
        d.q_stride[2] = 40;
        fjt_case c = fjt_case_make("overlap", fj_dtype_name(all_dtypes[t]), &d, FJT_CUSTOM, true);
        add(b, &c);
    }
}

/* One long head, S = 16384, D = 64, f32, a sharp scale so the running max
 * matters: the whole output against the reference's, and rows at both ends
 * and inside against the oracle (the whole oracle would take minutes). */
static void long_rows(builder *b)
{
    static const int rows[] = {0, 1, 4095, 9999, 16383};
    for (int causal = 0; causal <= 1; causal++) {
        fj_attention_desc d = desc(1, 1, 1, 16384, 16384, 64, FJ_F32,
                                   causal ? FJ_CAUSAL_BOTTOM_RIGHT : FJ_CAUSAL_NONE, -1, -1);
        d.scale = 0.3f;
        fjt_case c =
            fjt_case_make("long", causal ? "s16384-causal" : "s16384", &d, FJT_DENSE, true);
        c.rel_tol = 1e-5;
        c.row_tol = 1e-5;
        c.oracle_rows = rows;
        c.n_oracle_rows = NELEMS(rows);
        add(b, &c);
    }
}

/* ---- the CUDA grid's families (test_cuda_grid) ----------------------------- */

/* Oracle work above which a case of the CUDA families is heavy: --quick
 * (the sanitizer builds) skips it. The CPU suites' families and the decode
 * family are never heavy: they ran, and run, in every build. */
#define HEAVY_WORK 1e8

/* A case the CUDA backend must run too (it did in test_cuda_grid). */
static void add_cuda(builder *b, const char *group, const char *name, int batch, int hq, int hkv,
                     int sq, int sk, int dim, fj_dtype t, fj_causal causal, int wl, int wr,
                     fjt_layout l, bool lse)
{
    fj_attention_desc d = desc(batch, hq, hkv, sq, sk, dim, t, causal, wl, wr);
    fjt_case c = fjt_case_make(group, name, &d, l, lse);
    c.must_run |= FJT_ON(FJ_BACKEND_CUDA);
    c.heavy = fjt_case_work(&c) > HEAVY_WORK;
    add(b, &c);
}

static const int cuda_dims[] = {8, 32, 40, 64, 80, 96, 128, 160, 192, 200, 256};
static const int cuda_seqlens[] = {1, 17, 63, 64, 65, 127, 128, 129, 239, 1000, 2048};

static void head_dims(builder *b)
{
    for (int i = 0; i < NELEMS(cuda_dims); i++) {
        char name[48];
        snprintf(name, sizeof name, "dim%d-nomask", cuda_dims[i]);
        add_cuda(b, "head-dims", name, 1, 2, 2, 128, 128, cuda_dims[i], i % 2 ? FJ_BF16 : FJ_F16,
                 FJ_CAUSAL_NONE, -1, -1, FJT_DENSE, true);
        snprintf(name, sizeof name, "dim%d-causal", cuda_dims[i]);
        add_cuda(b, "head-dims", name, 2, 2, 1, 129, 129, cuda_dims[i], i % 2 ? FJ_F16 : FJ_BF16,
                 FJ_CAUSAL_BOTTOM_RIGHT, -1, -1, FJT_DENSE, true);
    }
}

static void seqlens(builder *b)
{
    for (int i = 0; i < NELEMS(cuda_seqlens); i++) {
        int s = cuda_seqlens[i];
        char name[48];
        snprintf(name, sizeof name, "seq%d-square-causal", s);
        add_cuda(b, "seqlens", name, 1, 1, 1, s, s, 64, i % 2 ? FJ_F16 : FJ_BF16,
                 FJ_CAUSAL_BOTTOM_RIGHT, -1, -1, FJT_DENSE, true);
        /* against a long and a short other side, both ways */
        int other = s == 2048 ? 1 : 2048;
        snprintf(name, sizeof name, "seq%d-vs-%d", s, other);
        add_cuda(b, "seqlens", name, 1, 2, 1, s, other, 128, FJ_BF16, FJ_CAUSAL_NONE, -1, -1,
                 FJT_DENSE, true);
        snprintf(name, sizeof name, "seq%d-of-%d", other, s);
        add_cuda(b, "seqlens", name, 1, 2, 1, other, s, 128, FJ_F16, FJ_CAUSAL_NONE, -1, -1,
                 FJT_DENSE, true);
    }
    /* tile edges on either side, Sq != Sk both ways, every causal kind */
    static const int pairs[][2] = {{63, 65},   {65, 63},  {64, 128}, {128, 64}, {127, 129},
                                   {129, 127}, {239, 17}, {17, 239}, {1000, 1}, {1, 1000}};
    static const fj_causal kinds[] = {FJ_CAUSAL_NONE, FJ_CAUSAL_BOTTOM_RIGHT, FJ_CAUSAL_TOP_LEFT};
    for (int i = 0; i < NELEMS(pairs); i++)
        for (int k = 0; k < 3; k++) {
            char name[48];
            snprintf(name, sizeof name, "edge%d-%d-%s", pairs[i][0], pairs[i][1],
                     fj_causal_name(kinds[k]));
            add_cuda(b, "seqlens", name, 2, 4, 2, pairs[i][0], pairs[i][1], k == 1 ? 96 : 40,
                     (i + k) % 2 ? FJ_F16 : FJ_BF16, kinds[k], -1, -1, FJT_DENSE, true);
        }
}

static void masks(builder *b)
{
    static const struct {
        const char *name;
        int sq, sk;
        fj_causal causal;
        int wl, wr;
    } m[] = {
        /* bottom-right causal with sq > sk: the first sq - sk rows see no key */
        {"br-more-queries", 200, 64, FJ_CAUSAL_BOTTOM_RIGHT, -1, -1},
        {"tl-more-queries", 200, 64, FJ_CAUSAL_TOP_LEFT, -1, -1},
        {"tl-more-keys", 64, 200, FJ_CAUSAL_TOP_LEFT, -1, -1},
        {"br-more-keys", 64, 200, FJ_CAUSAL_BOTTOM_RIGHT, -1, -1},
        {"diagonal-only", 150, 150, FJ_CAUSAL_NONE, 0, 0},
        {"diagonal-empty-rows", 190, 70, FJ_CAUSAL_NONE, 0, 0},
        {"left-window", 300, 300, FJ_CAUSAL_BOTTOM_RIGHT, 16, -1},
        {"right-window", 300, 257, FJ_CAUSAL_NONE, -1, 16},
        {"band", 257, 300, FJ_CAUSAL_TOP_LEFT, 5, 5},
        {"wide-left-window", 129, 1000, FJ_CAUSAL_BOTTOM_RIGHT, 300, -1},
        {"window-beyond-seq", 100, 100, FJ_CAUSAL_NONE, 5000, 5000},
        {"causal-and-right", 128, 128, FJ_CAUSAL_BOTTOM_RIGHT, 64, 7},
    };
    for (int i = 0; i < NELEMS(m); i++)
        for (int t = 0; t < 2; t++) {
            char name[48];
            snprintf(name, sizeof name, "%s-%s", m[i].name, t ? "bf16" : "f16");
            add_cuda(b, "masks", name, 2, 4, 1, m[i].sq, m[i].sk, t ? 128 : 64,
                     t ? FJ_BF16 : FJ_F16, m[i].causal, m[i].wl, m[i].wr, FJT_DENSE, true);
        }
}

static void heads_and_layouts(builder *b)
{
    static const int heads[][2] = {{8, 8}, {8, 2}, {8, 1}, {6, 3}};
    static const fjt_layout layouts[] = {FJT_DENSE, FJT_BHSD, FJT_PADDED, FJT_KV_BROADCAST};
    for (int h = 0; h < NELEMS(heads); h++)
        for (int l = 0; l < NELEMS(layouts); l++) {
            char name[48];
            snprintf(name, sizeof name, "heads%d-%d-%s", heads[h][0], heads[h][1],
                     fjt_layout_name(layouts[l]));
            add_cuda(b, "heads-layouts", name, 2, heads[h][0], heads[h][1], 97, 161,
                     l % 2 ? 80 : 128, (h + l) % 2 ? FJ_F16 : FJ_BF16,
                     l % 3 ? FJ_CAUSAL_BOTTOM_RIGHT : FJ_CAUSAL_NONE, -1, -1, layouts[l],
                     h % 2 == 0);
        }
    /* custom scales: small, and large enough to stress the exponent range;
       negative ones (the CUDA kernels negate Q in shared memory) on both
       kernels of sm_90 (d64 flash_wgmma, d96 flash_fwd), causal too */
    static const struct {
        float scale;
        int head_dim;
        fj_causal causal;
    } scales[] = {{0.03f, 64, FJ_CAUSAL_NONE},          {0.3f, 64, FJ_CAUSAL_NONE},
                  {2.0f, 64, FJ_CAUSAL_NONE},           {-0.3f, 64, FJ_CAUSAL_NONE},
                  {-2.0f, 128, FJ_CAUSAL_BOTTOM_RIGHT}, {-0.5f, 96, FJ_CAUSAL_TOP_LEFT}};
    for (int i = 0; i < NELEMS(scales); i++) {
        char name[48];
        snprintf(name, sizeof name, "scale%g-d%d", (double)scales[i].scale, scales[i].head_dim);
        fj_attention_desc d = desc(1, 2, 2, 130, 300, scales[i].head_dim, i % 2 ? FJ_F16 : FJ_BF16,
                                   scales[i].causal, -1, -1);
        d.scale = scales[i].scale;
        fjt_case c = fjt_case_make("scales", name, &d, FJT_DENSE, true);
        c.must_run |= FJT_ON(FJ_BACKEND_CUDA);
        add(b, &c);
    }
}

/* One axis of the sampled family: its values are dealt from a shuffled deck,
 * reshuffled when it runs out, so every value comes once per deck. take()
 * may pick any card left that `fits`, which keeps the balance while steering
 * away from combinations the oracle cannot afford. */
typedef struct deck {
    int n;
    int left[16];
    int n_left;
} deck;

static void deck_init(deck *k, int n)
{
    k->n = n;
    k->n_left = 0;
}

static int deck_take(deck *k, fjt_rng *r, bool (*fits)(int idx, double so_far), double so_far)
{
    if (k->n_left == 0) {
        for (int i = 0; i < k->n; i++) k->left[i] = i;
        for (int i = k->n - 1; i > 0; i--) { /* Fisher-Yates */
            int j = fjt_range(r, 0, i), t = k->left[i];
            k->left[i] = k->left[j];
            k->left[j] = t;
        }
        k->n_left = k->n;
    }
    int pos = 0;
    if (fits) {
        /* the first card that fits, else the cheapest (the lowest index) */
        int cheapest = 0;
        for (pos = 0; pos < k->n_left && !fits(k->left[pos], so_far); pos++)
            if (k->left[pos] < k->left[cheapest]) cheapest = pos;
        if (pos == k->n_left) pos = cheapest;
    }
    int v = k->left[pos];
    k->left[pos] = k->left[--k->n_left];
    return v;
}

/* batch*heads_q*seqlen_q*seqlen_k*head_dim the sampled cases aim to stay under */
#define SAMPLED_WORK_CAP (256.0 * 1024 * 1024)

static bool seq_fits(int idx, double so_far)
{
    return so_far * cuda_seqlens[idx] * 8 <= SAMPLED_WORK_CAP;
}
static bool dim_fits(int idx, double so_far) { return so_far * cuda_dims[idx] <= SAMPLED_WORK_CAP; }

/* Each axis (head dim, seqlens, dtype, heads kind, causal kind, window,
 * layout, lse, batch) dealt from its own deck: over 88 cases every value of
 * every axis appears 88 / (its number of values) times or more. */
static void sampled(builder *b, uint64_t seed)
{
    static const char *const heads_names[] = {"mha", "gqa", "mqa"};
    static const fjt_layout layouts[] = {FJT_DENSE, FJT_BHSD, FJT_PADDED, FJT_KV_BROADCAST};
    enum { SAMPLED_MHA, SAMPLED_GQA, SAMPLED_MQA };
    fjt_rng rng;
    fjt_rng_init(&rng, seed ^ 0x5a3d1e6bull);
    deck dims, sqs, sks, dtypes, heads, causal, windows, layout_deck, lses, batches;
    deck_init(&dims, NELEMS(cuda_dims));
    deck_init(&sqs, NELEMS(cuda_seqlens));
    deck_init(&sks, NELEMS(cuda_seqlens));
    deck_init(&dtypes, 2);
    deck_init(&heads, 3);
    deck_init(&causal, 3);
    deck_init(&windows, 4);
    deck_init(&layout_deck, NELEMS(layouts));
    deck_init(&lses, 2);
    deck_init(&batches, 3);
    for (int n = 0; n < 88; n++) {
        int sq = cuda_seqlens[deck_take(&sqs, &rng, NULL, 0)];
        int sk = cuda_seqlens[deck_take(&sks, &rng, seq_fits, (double)sq)];
        int dim = cuda_dims[deck_take(&dims, &rng, dim_fits, (double)sq * sk)];
        fj_dtype t = deck_take(&dtypes, &rng, NULL, 0) ? FJ_BF16 : FJ_F16;
        int hk = deck_take(&heads, &rng, NULL, 0);
        fj_causal cz = (fj_causal)deck_take(&causal, &rng, NULL, 0);
        int win = deck_take(&windows, &rng, NULL, 0);
        fjt_layout l = layouts[deck_take(&layout_deck, &rng, NULL, 0)];
        bool with_lse = deck_take(&lses, &rng, NULL, 0) == 0;
        int batch = 1 + deck_take(&batches, &rng, NULL, 0);
        int min_batch = l == FJT_KV_BROADCAST ? 2 : 1; /* broadcast needs a batch to share */
        if (batch < min_batch) batch = min_batch;
        /* heads: MHA h:h, GQA (group 2..4), MQA h:1; fewer of them, then a
           smaller batch, while the oracle's work is above the cap */
        int hkv = hk == SAMPLED_MQA ? 1 : fjt_range(&rng, 1, 3);
        int hq = hk == SAMPLED_MHA   ? hkv
                 : hk == SAMPLED_GQA ? hkv * fjt_range(&rng, 2, 4)
                                     : fjt_range(&rng, 2, 8);
        double per_head = (double)sq * sk * dim;
        while (batch * hq * per_head > SAMPLED_WORK_CAP &&
               (hkv > 1 || hq > (hk == SAMPLED_MHA ? 1 : 2))) {
            if (hkv > 1) {
                hq /= hkv;
                hkv = 1;
                if (hk == SAMPLED_MHA) hq = 1;
            } else {
                hq = hk == SAMPLED_MHA ? 1 : 2;
            }
        }
        while (batch > min_batch && batch * hq * per_head > SAMPLED_WORK_CAP) batch--;
        int wl = -1, wr = -1;
        /* windows from 0 (the diagonal alone) to beyond the sequence */
        static const int wsizes[] = {0, 1, 7, 64, 300};
        if (win == 1 || win == 3) wl = wsizes[fjt_range(&rng, 0, 4)];
        if (win == 2 || win == 3) wr = wsizes[fjt_range(&rng, 0, 4)];
        char name[48];
        snprintf(name, sizeof name, "%d-%s", n, heads_names[hk]);
        add_cuda(b, "sampled", name, batch, hq, hkv, sq, sk, dim, t, cz, wl, wr, l, with_lse);
    }
}

/* Few query tiles against many keys: decode with and without GQA, short
 * query blocks against long keys, masks whose band leaves whole splits empty,
 * every head-dim class, GQA packing (several queries per head; a causal mask
 * that hides nothing; one that hides all but key 0, not packed; d256 decode
 * tiles). test_cuda_grid checks that each plan splits its keys on the GPU.
 * The last one forces 2 splits, so that 1024 packed rows of few splits use
 * the one-warp combine kernel on any GPU. */
static void split_kv(builder *b)
{
    add_cuda(b, "split", "split-decode-mha", 1, 32, 32, 1, 4096, 128, FJ_BF16, FJ_CAUSAL_NONE, -1,
             -1, FJT_DENSE, true);
    add_cuda(b, "split", "split-decode-gqa", 2, 32, 8, 1, 32768, 128, FJ_BF16, FJ_CAUSAL_NONE, -1,
             -1, FJT_DENSE, true);
    add_cuda(b, "split", "split-decode-mqa-f16", 1, 8, 1, 1, 5000, 64, FJ_F16,
             FJ_CAUSAL_BOTTOM_RIGHT, -1, -1, FJT_BHSD, true);
    add_cuda(b, "split", "split-sq3-causal", 2, 4, 1, 3, 3001, 64, FJ_F16, FJ_CAUSAL_BOTTOM_RIGHT,
             -1, -1, FJT_PADDED, true);
    add_cuda(b, "split", "split-window", 1, 2, 2, 17, 5000, 40, FJ_BF16, FJ_CAUSAL_BOTTOM_RIGHT,
             100, 0, FJT_DENSE, true);
    add_cuda(b, "split", "split-window-tl", 1, 2, 2, 17, 5000, 256, FJ_F16, FJ_CAUSAL_TOP_LEFT, 300,
             5, FJT_DENSE, true);
    add_cuda(b, "split", "split-empty-rows", 1, 4, 4, 200, 6000, 80, FJ_BF16, FJ_CAUSAL_TOP_LEFT,
             -1, -1, FJT_DENSE, true);
    add_cuda(b, "split", "split-prefill", 1, 2, 2, 100, 9000, 160, FJ_BF16, FJ_CAUSAL_BOTTOM_RIGHT,
             -1, -1, FJT_KV_BROADCAST, false);
    add_cuda(b, "split", "pack-gqa-sq3-bhsd", 2, 32, 8, 3, 7000, 128, FJ_BF16, FJ_CAUSAL_NONE, -1,
             -1, FJT_BHSD, true);
    add_cuda(b, "split", "pack-gqa-causal-br", 1, 16, 2, 1, 9000, 96, FJ_F16,
             FJ_CAUSAL_BOTTOM_RIGHT, -1, -1, FJT_DENSE, true);
    add_cuda(b, "split", "nopack-gqa-top-left", 1, 8, 2, 1, 5000, 64, FJ_BF16, FJ_CAUSAL_TOP_LEFT,
             -1, -1, FJT_DENSE, true);
    add_cuda(b, "split", "pack-mqa-d256", 1, 8, 1, 1, 6000, 256, FJ_BF16, FJ_CAUSAL_NONE, -1, -1,
             FJT_DENSE, false);
    add_cuda(b, "split", "split-combine-one-warp", 32, 32, 8, 1, 2048, 128, FJ_BF16, FJ_CAUSAL_NONE,
             -1, -1, FJT_DENSE, true);
    if (b->ok) b->l->cases[b->l->n - 1].knob = "FLASHJIT_CUDA_SPLITS=2";
}

/* ---- families of no old suite ------------------------------------------------ */

/* Decode: 1..16 query rows against long keys, GQA and MQA, every mask,
 * every dtype, lse on and off. */
static void decode(builder *b)
{
    static const struct {
        int batch, hq, hkv, sq, sk, dim;
        fj_dtype t;
        fj_causal causal;
        int wl, wr;
        fjt_layout layout;
        bool lse;
    } c[] = {
        {1, 8, 1, 1, 4097, 128, FJ_BF16, FJ_CAUSAL_NONE, -1, -1, FJT_DENSE, true},
        {2, 8, 2, 1, 8192, 64, FJ_F16, FJ_CAUSAL_BOTTOM_RIGHT, -1, -1, FJT_DENSE, false},
        {1, 32, 4, 1, 16384, 128, FJ_F32, FJ_CAUSAL_NONE, -1, -1, FJT_DENSE, true},
        {1, 16, 4, 2, 4096, 128, FJ_F32, FJ_CAUSAL_BOTTOM_RIGHT, -1, -1, FJT_BHSD, true},
        {1, 8, 8, 3, 3001, 80, FJ_BF16, FJ_CAUSAL_TOP_LEFT, -1, -1, FJT_DENSE, true},
        {1, 32, 8, 4, 2048, 128, FJ_F16, FJ_CAUSAL_NONE, -1, -1, FJT_PADDED, true},
        {2, 4, 1, 5, 1031, 96, FJ_F32, FJ_CAUSAL_BOTTOM_RIGHT, 255, -1, FJT_DENSE, true},
        {1, 8, 2, 7, 4099, 64, FJ_BF16, FJ_CAUSAL_BOTTOM_RIGHT, 127, 0, FJT_DENSE, false},
        {2, 16, 2, 8, 2500, 128, FJ_F16, FJ_CAUSAL_NONE, 64, 64, FJT_KV_BROADCAST, true},
        {1, 12, 3, 13, 1500, 40, FJ_F32, FJ_CAUSAL_TOP_LEFT, 700, -1, FJT_DENSE, true},
        {1, 8, 1, 16, 8192, 128, FJ_BF16, FJ_CAUSAL_BOTTOM_RIGHT, -1, -1, FJT_DENSE, true},
        {1, 4, 4, 16, 16411, 64, FJ_F32, FJ_CAUSAL_NONE, -1, -1, FJT_BHSD, false},
        {1, 8, 4, 16, 4096, 256, FJ_F16, FJ_CAUSAL_BOTTOM_RIGHT, 1000, -1, FJT_DENSE, true},
        {1, 8, 2, 16, 40, 64, FJ_BF16, FJ_CAUSAL_BOTTOM_RIGHT, -1, -1, FJT_DENSE, true},
        {1, 8, 2, 4, 3, 64, FJ_F32, FJ_CAUSAL_BOTTOM_RIGHT, -1, -1, FJT_DENSE,
         true}, /* row 0 sees nothing */
        {1, 16, 16, 1, 1, 64, FJ_BF16, FJ_CAUSAL_NONE, -1, -1, FJT_DENSE, true}, /* one key */
        {3, 6, 2, 9, 3333, 8, FJ_F16, FJ_CAUSAL_TOP_LEFT, -1, 3, FJT_PADDED3, true},
        {1, 64, 8, 1, 4096, 64, FJ_F32, FJ_CAUSAL_BOTTOM_RIGHT, 511, -1, FJT_DENSE, true},
    };
    for (int i = 0; i < NELEMS(c); i++) {
        fj_attention_desc d = desc(c[i].batch, c[i].hq, c[i].hkv, c[i].sq, c[i].sk, c[i].dim,
                                   c[i].t, c[i].causal, c[i].wl, c[i].wr);
        char name[48];
        snprintf(name, sizeof name, "sq%d-sk%d-h%d-%d-%s", c[i].sq, c[i].sk, c[i].hq, c[i].hkv,
                 fj_dtype_name(c[i].t));
        fjt_case k = fjt_case_make("decode", name, &d, c[i].layout, c[i].lse);
        add(b, &k);
    }
}

/* Inputs shared across the batch (stride 0), every dtype, with masks. */
static void broadcast(builder *b)
{
    for (int t = 0; t < 3; t++) {
        fj_attention_desc d = desc(3, 4, 2, 33, 65, 64, all_dtypes[t], FJ_CAUSAL_TOP_LEFT, -1, -1);
        char name[48];
        snprintf(name, sizeof name, "q-%s", fj_dtype_name(all_dtypes[t]));
        fjt_case c = fjt_case_make("broadcast", name, &d, FJT_Q_BROADCAST, true);
        add(b, &c);
        d = desc(2, 8, 1, 70, 129, 32, all_dtypes[t], FJ_CAUSAL_BOTTOM_RIGHT, 20, -1);
        snprintf(name, sizeof name, "kv-%s", fj_dtype_name(all_dtypes[t]));
        c = fjt_case_make("broadcast", name, &d, FJT_KV_BROADCAST, t != 1);
        add(b, &c);
    }
}

/* Head dims no GPU kernel takes (the CPU backends take any), sizes 1 and
 * tile +-1 and primes, odd and negative scales. */
static void odd_shapes(builder *b, uint64_t seed)
{
    static const int dims[] = {1, 2, 3, 7, 13, 33, 127, 255};
    static const int sizes[] = {1, 15, 16, 17, 31, 32, 33, 97, 255, 256, 257, 509};
    static const float scales[] = {0, -1.7f, 1e-3f, 8.0f, -0.05f, 0.7071f};
    fjt_rng rng;
    fjt_rng_init(&rng, seed ^ 0x6f64642dull);
    for (int i = 0; i < 24; i++) {
        int sq = sizes[fjt_range(&rng, 0, NELEMS(sizes) - 1)];
        int sk = sizes[fjt_range(&rng, 0, NELEMS(sizes) - 1)];
        int dim = dims[i % NELEMS(dims)];
        int hkv = fjt_range(&rng, 1, 2), hq = hkv * fjt_range(&rng, 1, 3);
        fj_attention_desc d = desc(fjt_range(&rng, 1, 2), hq, hkv, sq, sk, dim, all_dtypes[i % 3],
                                   (fj_causal)fjt_range(&rng, 0, 2), -1, -1);
        while (d.batch * (double)d.heads_q * sq * sk * dim > 3e7 &&
               (d.batch > 1 || d.heads_q > 1)) {
            if (d.batch > 1) d.batch = 1;
            else d.heads_q = d.heads_kv = 1;
        }
        if (i % 4 == 1) d.window_left = fjt_range(&rng, 0, 20);
        if (i % 4 == 2) d.window_right = fjt_range(&rng, 0, 20);
        d.scale = scales[i % NELEMS(scales)];
        char name[48];
        snprintf(name, sizeof name, "%d-d%d", i, dim);
        fjt_case c = fjt_case_make("odd", name, &d, (fjt_layout)(i % 3), i % 5 != 4);
        /* a scale of 8 over up to 255 dims makes scores (and lse) near 100:
           f32 scores then carry ~1e-4 absolute error (the backends' lse reach
           1.2e-4 from the oracle and from each other), and a peaky softmax
           turns that into ~5e-6 relative output error in f32 */
        if (d.scale > 1.0f || d.scale < -1.0f) {
            c.lse_tol = 1e-3;
            if (d.dtype == FJ_F32) c.rel_tol = 3e-5;
        }
        add(b, &c);
    }
}

/* ---- head dims above CUDA's 256 (issue 22) ---------------------------------- */

/* Head dims 257..FJ_MAX_HEAD_DIM, which only the CPU backends take (CUDA
 * answers UNSUPPORTED, which these cases allow it): odd and even, around the
 * decode kernels' 32-column chunks (257, 511), at 512 and at the limit (576,
 * MLA's queries and keys).
 * Prefill ("rows": more than FJ_CPU_DECODE_MAX_ROWS rows per kv head, the
 * tiled path; bf16 with GQA groups up to 16 goes to the AMX row blocks
 * where the CPU has them) with seqlen_q above and below seqlen_k and keys
 * past the tiled path's 256-key blocks, and bf16 with a GQA group of 18
 * (the tiled path on every CPU); the decode path (1..16 rows per kv
 * head: one query row, GQA groups, long keys split into chunks, a row that
 * sees no key). Every dtype, every mask kind, windows, lse on and off. */
static void large_head_dims(builder *b)
{
    static const struct {
        const char *path;
        int batch, hq, hkv, sq, sk, dim;
        fj_dtype t;
        fj_causal causal;
        int wl, wr;
        fjt_layout layout;
        bool lse;
    } c[] = {
        /* prefill: rows per kv head above 16 */
        {"rows", 1, 4, 2, 97, 300, 257, FJ_F32, FJ_CAUSAL_BOTTOM_RIGHT, -1, -1, FJT_DENSE, true},
        {"rows", 1, 6, 2, 70, 129, 300, FJ_BF16, FJ_CAUSAL_NONE, 31, 7, FJT_BHSD, true},
        {"rows", 2, 2, 1, 200, 65, 384, FJ_F16, FJ_CAUSAL_TOP_LEFT, -1, -1, FJT_PADDED, true},
        {"rows", 1, 2, 2, 33, 520, 511, FJ_F32, FJ_CAUSAL_NONE, -1, -1, FJT_PADDED3, false},
        {"rows", 1, 4, 1, 40, 257, 576, FJ_BF16, FJ_CAUSAL_BOTTOM_RIGHT, 100, -1, FJT_DENSE, true},
        {"rows", 1, 18, 1, 9, 130, 512, FJ_BF16, FJ_CAUSAL_TOP_LEFT, -1, 5, FJT_DENSE, true},
        {"rows", 1, 8, 2, 64, 64, 576, FJ_F16, FJ_CAUSAL_BOTTOM_RIGHT, -1, -1, FJT_DENSE, true},
        {"rows", 1, 3, 3, 129, 17, 509, FJ_F32, FJ_CAUSAL_BOTTOM_RIGHT, 3, -1, FJT_BHSD, true},
        /* decode: 1..16 rows per kv head */
        {"decode", 2, 8, 2, 1, 1031, 257, FJ_BF16, FJ_CAUSAL_NONE, -1, -1, FJT_DENSE, true},
        {"decode", 1, 4, 1, 1, 3001, 300, FJ_F32, FJ_CAUSAL_BOTTOM_RIGHT, 700, -1, FJT_DENSE, true},
        {"decode", 1, 8, 4, 3, 2049, 384, FJ_F16, FJ_CAUSAL_BOTTOM_RIGHT, 300, 0, FJT_BHSD, true},
        {"decode", 1, 16, 2, 2, 700, 511, FJ_BF16, FJ_CAUSAL_BOTTOM_RIGHT, -1, -1, FJT_PADDED,
         true},
        {"decode", 1, 4, 4, 1, 4099, 576, FJ_F32, FJ_CAUSAL_NONE, -1, -1, FJT_DENSE, false},
        {"decode", 2, 16, 2, 1, 1200, 512, FJ_BF16, FJ_CAUSAL_BOTTOM_RIGHT, 1000, -1,
         FJT_KV_BROADCAST, true},
        {"decode", 1, 4, 1, 4, 3, 300, FJ_F16, FJ_CAUSAL_BOTTOM_RIGHT, -1, -1, FJT_DENSE,
         true}, /* seqlen_q > seqlen_k: row 0 sees nothing */
        {"decode", 1, 6, 2, 5, 999, 576, FJ_F16, FJ_CAUSAL_TOP_LEFT, -1, 40, FJT_PADDED3, true},
    };
    for (int i = 0; i < NELEMS(c); i++) {
        fj_attention_desc d = desc(c[i].batch, c[i].hq, c[i].hkv, c[i].sq, c[i].sk, c[i].dim,
                                   c[i].t, c[i].causal, c[i].wl, c[i].wr);
        char name[48];
        snprintf(name, sizeof name, "%s-d%d-sq%d-sk%d-h%d-%d-%s", c[i].path, c[i].dim, c[i].sq,
                 c[i].sk, c[i].hq, c[i].hkv, fj_dtype_name(c[i].t));
        fjt_case k = fjt_case_make("large-dims", name, &d, c[i].layout, c[i].lse);
        add(b, &k);
    }
}

/* ---- the logit softcap (issue 22) ------------------------------------------ */

/* A capped case; the CUDA backend must run it when cuda (f16/bf16, head dim
   a multiple of 8). Scales near 1 and above make the scores reach the cap
   (uniform [-1, 1] data: q.k has a standard deviation of sqrt(D) / 3). */
static void add_capped(builder *b, const char *name, fj_attention_desc d, float softcap,
                       float scale, fjt_layout layout, bool lse, bool cuda)
{
    d.softcap = softcap;
    d.scale = scale;
    /* "softcap": CUDA must run them (and they may be heavy); "softcap-cpu":
       f32 or head dims no kernel takes, in every build */
    fjt_case c = fjt_case_make(cuda ? "softcap" : "softcap-cpu", name, &d, layout, lse);
    if (cuda) c.must_run |= FJT_ON(FJ_BACKEND_CUDA);
    c.heavy = cuda && fjt_case_work(&c) > HEAVY_WORK;
    /* scores of magnitude ~c carry f32 rounding of ~c 2^-24 per term;
       a peaky softmax over them (c 30..50) moves f32 outputs by a few 1e-6,
       lse by ~1e-5 (as the odd family's scale 8) */
    if (softcap >= 20.0f && d.dtype == FJ_F32) c.rel_tol = 3e-5;
    if (softcap >= 20.0f) c.lse_tol = 1e-3;
    add(b, &c);
}

/* Every mask kind (rows that see no key included), GQA and MQA, every
   dtype, caps from far below the scores (nearly a sign function) to far
   above them (nearly no cap), positive, negative and default scales; decode
   with 1..16 query rows and split-KV lengths; head dims every CUDA class
   takes, and odd ones for the CPU backends alone. */
static void softcap(builder *b)
{
    static const float caps[] = {1.0f, 5.0f, 30.0f, 50.0f, 0.25f, 2.5f};
    static const float scales[] = {1.0f, -0.7f, 0.0f, 4.0f, 2.0f, 0.5f};
    static const struct {
        const char *name;
        int sq, sk;
        fj_causal causal;
        int wl, wr;
    } m[] = {
        {"nomask", 130, 257, FJ_CAUSAL_NONE, -1, -1},
        {"causal-br", 200, 200, FJ_CAUSAL_BOTTOM_RIGHT, -1, -1},
        {"causal-br-more-queries", 200, 64, FJ_CAUSAL_BOTTOM_RIGHT, -1, -1}, /* empty rows */
        {"causal-tl-more-keys", 64, 300, FJ_CAUSAL_TOP_LEFT, -1, -1},
        {"left-window", 300, 300, FJ_CAUSAL_BOTTOM_RIGHT, 16, -1},
        {"band", 257, 300, FJ_CAUSAL_NONE, 5, 5},
        {"causal-and-right", 128, 128, FJ_CAUSAL_BOTTOM_RIGHT, 64, 7},
    };
    char name[48];
    int k = 0;
    for (int i = 0; i < NELEMS(m); i++)
        for (int t = 0; t < 3; t++, k++) {
            fj_dtype dt = all_dtypes[t];
            int hq = i % 2 ? 4 : 8, hkv = i % 3 == 0 ? 1 : 2;
            fj_attention_desc d = desc(2, hq, hkv, m[i].sq, m[i].sk, t == 1 ? 64 : 128, dt,
                                       m[i].causal, m[i].wl, m[i].wr);
            snprintf(name, sizeof name, "mask-%s-%s", m[i].name, fj_dtype_name(dt));
            add_capped(b, name, d, caps[k % NELEMS(caps)], scales[k % NELEMS(scales)],
                       (fjt_layout)(k % 3), true, dt != FJ_F32);
        }

    /* decode: 1..16 query rows, long keys (CUDA splits them), GQA packing */
    static const struct {
        int batch, hq, hkv, sq, sk, dim;
        fj_causal causal;
        int wl;
    } dec[] = {
        {1, 32, 8, 1, 4096, 128, FJ_CAUSAL_NONE, -1},
        {2, 8, 1, 1, 9000, 64, FJ_CAUSAL_BOTTOM_RIGHT, -1},
        {1, 16, 4, 2, 3001, 128, FJ_CAUSAL_BOTTOM_RIGHT, -1},
        {1, 8, 8, 3, 2048, 80, FJ_CAUSAL_TOP_LEFT, -1},
        {2, 16, 2, 4, 2500, 256, FJ_CAUSAL_NONE, -1},
        {1, 8, 2, 7, 4099, 64, FJ_CAUSAL_BOTTOM_RIGHT, 127},
        {1, 12, 3, 13, 1500, 40, FJ_CAUSAL_TOP_LEFT, 700},
        {1, 8, 1, 16, 8192, 128, FJ_CAUSAL_BOTTOM_RIGHT, -1},
        {1, 4, 4, 16, 5000, 96, FJ_CAUSAL_NONE, -1},
        {1, 8, 2, 4, 3, 64, FJ_CAUSAL_BOTTOM_RIGHT, -1}, /* row 0 sees nothing */
        {1, 16, 16, 1, 1, 64, FJ_CAUSAL_NONE, -1},       /* one key */
    };
    for (int i = 0; i < NELEMS(dec); i++) {
        fj_dtype dt = all_dtypes[i % 3];
        fj_attention_desc d = desc(dec[i].batch, dec[i].hq, dec[i].hkv, dec[i].sq, dec[i].sk,
                                   dec[i].dim, dt, dec[i].causal, dec[i].wl, -1);
        snprintf(name, sizeof name, "decode-sq%d-sk%d-h%d-%d-%s", dec[i].sq, dec[i].sk, dec[i].hq,
                 dec[i].hkv, fj_dtype_name(dt));
        add_capped(b, name, d, caps[i % NELEMS(caps)], scales[(i + 3) % NELEMS(scales)],
                   i % 4 == 3 ? FJT_BHSD : FJT_DENSE, i % 5 != 4, dt != FJ_F32);
    }

    /* split-KV shapes of the split family (few query tiles, many keys) */
    add_capped(b, "split-decode-gqa-bf16",
               desc(2, 32, 8, 1, 32768, 128, FJ_BF16, FJ_CAUSAL_NONE, -1, -1), 50.0f, 1.0f,
               FJT_DENSE, true, true);
    add_capped(b, "split-sq3-causal-f16",
               desc(2, 4, 1, 3, 3001, 64, FJ_F16, FJ_CAUSAL_BOTTOM_RIGHT, -1, -1), 2.5f, -1.0f,
               FJT_PADDED, true, true);
    add_capped(b, "split-window-bf16",
               desc(1, 2, 2, 17, 5000, 40, FJ_BF16, FJ_CAUSAL_BOTTOM_RIGHT, 100, 0), 5.0f, 2.0f,
               FJT_DENSE, true, true);
    add_capped(b, "split-empty-rows-f16",
               desc(1, 4, 4, 200, 6000, 80, FJ_F16, FJ_CAUSAL_TOP_LEFT, -1, -1), 30.0f, 0.0f,
               FJT_DENSE, true, true);
    add_capped(b, "split-prefill-bf16",
               desc(1, 2, 2, 100, 9000, 160, FJ_BF16, FJ_CAUSAL_BOTTOM_RIGHT, -1, -1), 1.0f, 1.0f,
               FJT_KV_BROADCAST, false, true);

    /* every CUDA head-dim class, long enough for several key tiles */
    static const int dims[] = {8, 32, 72, 96, 160, 192, 200, 256};
    for (int i = 0; i < NELEMS(dims); i++) {
        fj_dtype dt = i % 2 ? FJ_BF16 : FJ_F16;
        fj_attention_desc d = desc(1, 4, 2, 257, 384, dims[i], dt,
                                   i % 3 ? FJ_CAUSAL_BOTTOM_RIGHT : FJ_CAUSAL_NONE, -1, -1);
        snprintf(name, sizeof name, "dim%d-%s", dims[i], fj_dtype_name(dt));
        add_capped(b, name, d, caps[i % NELEMS(caps)], scales[i % NELEMS(scales)], FJT_DENSE, true,
                   true);
    }

    /* head dims no GPU kernel takes, sizes around the CPU blocks, the cap
       far below the scores (0.05: nearly +-0.05 everywhere) and far above */
    static const int odd_dims[] = {1, 3, 7, 13, 33, 127, 255};
    static const float odd_caps[] = {0.05f, 1000.0f, 3.0f, 0.5f, 12.0f, 1.5f, 7.0f};
    for (int i = 0; i < NELEMS(odd_dims); i++) {
        fj_dtype dt = all_dtypes[i % 3];
        fj_attention_desc d = desc(1, 3, 1, 1 + 37 * i, 17 + 71 * i, odd_dims[i], dt,
                                   (fj_causal)(i % 3), i == 4 ? 9 : -1, -1);
        snprintf(name, sizeof name, "odd-d%d-%s", odd_dims[i], fj_dtype_name(dt));
        add_capped(b, name, d, odd_caps[i], scales[i % NELEMS(scales)], (fjt_layout)(i % 3), true,
                   false);
    }

    /* flash_tma's prefill shapes on sm_90 (issue 22): enough work tiles to
       fill an H100, else the plan takes a kernel that splits the keys; d64
       on its 2-consumer tiles and d128, every mask, both kernel dtypes, caps
       far below the scores (saturating) and far above, a negative scale,
       Sq != Sk both ways, GQA */
    static const struct {
        int batch, hq, hkv, sq, sk, dim;
        fj_dtype t;
        fj_causal causal;
        int wl;
        float cap, scale;
    } tma[] = {
        {2, 16, 4, 1024, 1024, 64, FJ_BF16, FJ_CAUSAL_NONE, -1, 50.0f, 1.0f},
        {2, 16, 2, 1000, 1100, 64, FJ_F16, FJ_CAUSAL_BOTTOM_RIGHT, -1, 30.0f, 4.0f},
        {1, 32, 8, 1100, 1000, 64, FJ_F16, FJ_CAUSAL_TOP_LEFT, -1, 2.5f, -0.7f},
        {2, 16, 16, 1024, 1024, 64, FJ_BF16, FJ_CAUSAL_BOTTOM_RIGHT, 200, 5.0f, 2.0f},
        {2, 16, 4, 777, 1031, 128, FJ_BF16, FJ_CAUSAL_BOTTOM_RIGHT, -1, 50.0f, 8.0f},
        {2, 16, 8, 1024, 900, 128, FJ_F16, FJ_CAUSAL_NONE, -1, 30.0f, -0.7f},
        {1, 32, 4, 1000, 1000, 128, FJ_F16, FJ_CAUSAL_NONE, 100, 1.0f, 1.0f},
    };
    for (int i = 0; i < NELEMS(tma); i++) {
        fj_attention_desc d = desc(tma[i].batch, tma[i].hq, tma[i].hkv, tma[i].sq, tma[i].sk,
                                   tma[i].dim, tma[i].t, tma[i].causal, tma[i].wl, -1);
        snprintf(name, sizeof name, "tma-d%d-sq%d-sk%d-c%g-%s", tma[i].dim, tma[i].sq, tma[i].sk,
                 (double)tma[i].cap, fj_dtype_name(tma[i].t));
        add_capped(b, name, d, tma[i].cap, tma[i].scale, FJT_DENSE, true, true);
    }

    /* Gemma's caps on large scores: most of them saturate */
    for (int t = 0; t < 3; t++) {
        fj_attention_desc d =
            desc(1, 8, 4, 96, 300, 128, all_dtypes[t], FJ_CAUSAL_BOTTOM_RIGHT, -1, -1);
        snprintf(name, sizeof name, "saturated-%s", fj_dtype_name(all_dtypes[t]));
        add_capped(b, name, d, t == 2 ? 30.0f : 50.0f, 8.0f, FJT_DENSE, true,
                   all_dtypes[t] != FJ_F32);
    }
}

/* ---- ALiBi and attention sinks (issue 22) ------------------------------------ */

/* A case with features (FJ_FEATURE_ALIBI and/or FJ_FEATURE_SINKS; the
   harness draws slopes in [0, 0.5) and sinks in [-2, 3) per query head).
   "alibi-sinks": f16 and bf16 at head dims a CUDA kernel takes, which CUDA
   must run (and they may be heavy); "alibi-sinks-cpu": f32 and other head
   dims, in every build. */
static void add_featured(builder *b, const char *name, fj_attention_desc d, uint32_t features,
                         float softcap, float scale, fjt_layout layout, bool lse)
{
    d.features = features;
    d.softcap = softcap;
    d.scale = scale;
    const bool cuda = d.dtype != FJ_F32 && d.head_dim % 8 == 0 && d.head_dim <= 256;
    fjt_case c = fjt_case_make(cuda ? "alibi-sinks" : "alibi-sinks-cpu", name, &d, layout, lse);
    if (cuda) c.must_run |= FJT_ON(FJ_BACKEND_CUDA);
    c.heavy = cuda && fjt_case_work(&c) > HEAVY_WORK;
    if (softcap >= 20.0f && d.dtype == FJ_F32) c.rel_tol = 3e-5;
    if (softcap >= 20.0f) c.lse_tol = 1e-3;
    add(b, &c);
}

static const char *feature_name(uint32_t f)
{
    return f == FJ_FEATURE_ALIBI ? "alibi" : f == FJ_FEATURE_SINKS ? "sinks" : "alibi-sinks";
}

/* Every mask kind (rows that see no key: with a sink, O = 0 and lse = the
   sink), GQA and MQA, every dtype, each feature alone and both on f16 or
   bf16 for every mask (CUDA), with and without a softcap; decode with
   1..16 query rows and split-KV lengths (the CPU decode path splits the
   keys into chunks, CUDA's split kernels leave the sink to the combine:
   it joins once); every CUDA head-dim class; odd head dims. */
static void alibi_sinks(builder *b)
{
    static const uint32_t feats[] = {FJ_FEATURE_ALIBI, FJ_FEATURE_SINKS,
                                     FJ_FEATURE_ALIBI | FJ_FEATURE_SINKS};
    static const float scales[] = {1.0f, -0.7f, 0.0f, 2.0f, 0.5f};
    static const struct {
        const char *name;
        int sq, sk;
        fj_causal causal;
        int wl, wr;
    } m[] = {
        {"nomask", 130, 257, FJ_CAUSAL_NONE, -1, -1},
        {"nomask-more-queries", 300, 40, FJ_CAUSAL_NONE, -1, -1},
        {"causal-br", 200, 200, FJ_CAUSAL_BOTTOM_RIGHT, -1, -1},
        {"causal-br-more-queries", 200, 64, FJ_CAUSAL_BOTTOM_RIGHT, -1, -1}, /* empty rows */
        {"causal-tl-more-keys", 64, 300, FJ_CAUSAL_TOP_LEFT, -1, -1},
        {"causal-tl-more-queries", 150, 40, FJ_CAUSAL_TOP_LEFT, -1, -1},
        {"left-window", 300, 300, FJ_CAUSAL_BOTTOM_RIGHT, 16, -1},
        {"band", 257, 300, FJ_CAUSAL_NONE, 5, 5},
        {"right-only-empty", 100, 60, FJ_CAUSAL_NONE, -1, 0}, /* empty rows */
        {"causal-and-right", 128, 128, FJ_CAUSAL_BOTTOM_RIGHT, 64, 7},
    };
    char name[64];
    int k = 0;
    for (int i = 0; i < NELEMS(m); i++)
        for (int t = 0; t < 3; t++, k++) {
            fj_dtype dt = all_dtypes[t];
            int hq = i % 2 ? 4 : 8, hkv = i % 3 == 0 ? 1 : 2;
            fj_attention_desc d = desc(2, hq, hkv, m[i].sq, m[i].sk, t == 1 ? 64 : 128, dt,
                                       m[i].causal, m[i].wl, m[i].wr);
            /* f32 takes feature i % 3, f16 and bf16 the other two */
            uint32_t f = feats[(t + i) % 3];
            snprintf(name, sizeof name, "mask-%s-%s-%s", m[i].name, feature_name(f),
                     fj_dtype_name(dt));
            add_featured(b, name, d, f, k % 4 == 3 ? 30.0f : 0.0f, scales[k % NELEMS(scales)],
                         (fjt_layout)(k % 3), true);
        }
    /* and f32's feature on a CUDA dtype, at other head dims and layouts */
    static const int mask_dims[] = {96, 256, 40, 128, 64};
    for (int i = 0; i < NELEMS(m); i++) {
        fj_dtype dt = i % 2 ? FJ_F16 : FJ_BF16;
        int hq = i % 2 ? 6 : 8, hkv = i % 3 == 0 ? 1 : 2;
        fj_attention_desc d =
            desc(1 + i % 2, hq, hkv, m[i].sq, m[i].sk, mask_dims[i % NELEMS(mask_dims)], dt,
                 m[i].causal, m[i].wl, m[i].wr);
        uint32_t f = feats[i % 3];
        snprintf(name, sizeof name, "mask-%s-%s-%s-d%d", m[i].name, feature_name(f),
                 fj_dtype_name(dt), d.head_dim);
        add_featured(b, name, d, f, i % 4 == 1 ? 50.0f : 0.0f, scales[(i + 2) % NELEMS(scales)],
                     (fjt_layout)((i + 1) % 3), true);
    }

    /* decode: 1..16 query rows, long keys (split into chunks), GQA */
    static const struct {
        int batch, hq, hkv, sq, sk, dim;
        fj_causal causal;
        int wl;
    } dec[] = {
        {1, 32, 8, 1, 4096, 128, FJ_CAUSAL_NONE, -1},
        {2, 8, 1, 1, 9000, 64, FJ_CAUSAL_BOTTOM_RIGHT, -1},
        {1, 16, 4, 2, 3001, 128, FJ_CAUSAL_BOTTOM_RIGHT, -1},
        {1, 8, 8, 3, 2048, 80, FJ_CAUSAL_TOP_LEFT, -1},
        {2, 16, 2, 4, 2500, 256, FJ_CAUSAL_NONE, -1},
        {1, 8, 2, 7, 4099, 64, FJ_CAUSAL_BOTTOM_RIGHT, 127},
        {1, 12, 3, 13, 1500, 40, FJ_CAUSAL_TOP_LEFT, 700},
        {1, 8, 1, 16, 8192, 128, FJ_CAUSAL_BOTTOM_RIGHT, -1},
        {1, 4, 4, 16, 5000, 96, FJ_CAUSAL_NONE, -1},
        {1, 8, 2, 4, 3, 64, FJ_CAUSAL_BOTTOM_RIGHT, -1}, /* row 0 sees nothing */
        {1, 16, 16, 1, 1, 64, FJ_CAUSAL_NONE, -1},       /* one key */
        {1, 8, 2, 16, 20000, 64, FJ_CAUSAL_BOTTOM_RIGHT, -1},
    };
    for (int i = 0; i < NELEMS(dec); i++) {
        fj_dtype dt = all_dtypes[i % 3];
        fj_attention_desc d = desc(dec[i].batch, dec[i].hq, dec[i].hkv, dec[i].sq, dec[i].sk,
                                   dec[i].dim, dt, dec[i].causal, dec[i].wl, -1);
        uint32_t f = feats[i % 3];
        snprintf(name, sizeof name, "decode-sq%d-sk%d-h%d-%d-%s-%s", dec[i].sq, dec[i].sk,
                 dec[i].hq, dec[i].hkv, feature_name(f), fj_dtype_name(dt));
        add_featured(b, name, d, f, i % 5 == 2 ? 50.0f : 0.0f, scales[(i + 3) % NELEMS(scales)],
                     i % 4 == 3 ? FJT_BHSD : FJT_DENSE, i % 5 != 4);
    }

    /* GQA-packed ALiBi (launch_view.h: each packed row takes its own query
       head's slope and query position): group 8 decode (the d64 decode
       tile's 16 rows), group 3 (rows of a tile past seqlen_q), a
       bottom-right mask dropped at one query, several queries per head
       (BHSD: heads seqlen_q rows apart), a split decode; ALiBi alone and
       with sinks, negative and other scales */
    static const struct {
        int batch, hq, hkv, sq, sk, dim;
        fj_causal causal;
        fjt_layout layout;
        float scale;
        uint32_t f;
    } pk[] = {
        {1, 64, 8, 1, 8192, 64, FJ_CAUSAL_NONE, FJT_DENSE, 0.0f, FJ_FEATURE_ALIBI},
        {3, 12, 4, 1, 777, 128, FJ_CAUSAL_BOTTOM_RIGHT, FJT_DENSE, -0.7f, FJ_FEATURE_ALIBI},
        {2, 16, 4, 3, 3001, 64, FJ_CAUSAL_NONE, FJT_BHSD, 0.5f, FJ_FEATURE_ALIBI},
        {1, 8, 2, 16, 1000, 128, FJ_CAUSAL_NONE, FJT_BHSD, 2.0f,
         FJ_FEATURE_ALIBI | FJ_FEATURE_SINKS},
        {2, 32, 8, 2, 20000, 128, FJ_CAUSAL_NONE, FJT_BHSD, 1.0f, FJ_FEATURE_ALIBI},
    };
    for (int i = 0; i < NELEMS(pk); i++) {
        fj_dtype dt = i % 2 ? FJ_F16 : FJ_BF16;
        fj_attention_desc d = desc(pk[i].batch, pk[i].hq, pk[i].hkv, pk[i].sq, pk[i].sk, pk[i].dim,
                                   dt, pk[i].causal, -1, -1);
        snprintf(name, sizeof name, "packed-sq%d-sk%d-h%d-%d-d%d-%s-%s", pk[i].sq, pk[i].sk,
                 pk[i].hq, pk[i].hkv, pk[i].dim, feature_name(pk[i].f), fj_dtype_name(dt));
        add_featured(b, name, d, pk[i].f, 0.0f, pk[i].scale, pk[i].layout, true);
    }

    /* split-KV shapes (few query rows, many keys), both features */
    const uint32_t both = FJ_FEATURE_ALIBI | FJ_FEATURE_SINKS;
    add_featured(b, "split-decode-gqa-bf16",
                 desc(2, 32, 8, 1, 32768, 128, FJ_BF16, FJ_CAUSAL_NONE, -1, -1), both, 0.0f, 1.0f,
                 FJT_DENSE, true);
    add_featured(b, "split-sq3-causal-f16",
                 desc(2, 4, 1, 3, 3001, 64, FJ_F16, FJ_CAUSAL_BOTTOM_RIGHT, -1, -1),
                 FJ_FEATURE_SINKS, 2.5f, -1.0f, FJT_PADDED, true);
    add_featured(b, "split-window-bf16",
                 desc(1, 2, 2, 17, 5000, 40, FJ_BF16, FJ_CAUSAL_BOTTOM_RIGHT, 100, 0), both, 0.0f,
                 2.0f, FJT_DENSE, true);
    add_featured(b, "split-empty-rows-f16",
                 desc(1, 4, 4, 200, 6000, 80, FJ_F16, FJ_CAUSAL_TOP_LEFT, -1, -1), both, 30.0f,
                 0.0f, FJT_DENSE, true);
    add_featured(b, "split-prefill-alibi-f32",
                 desc(1, 2, 2, 100, 9000, 160, FJ_F32, FJ_CAUSAL_BOTTOM_RIGHT, -1, -1),
                 FJ_FEATURE_ALIBI, 0.0f, 1.0f, FJT_KV_BROADCAST, false);
    add_featured(b, "split-prefill-alibi-bf16",
                 desc(1, 2, 2, 100, 9000, 160, FJ_BF16, FJ_CAUSAL_BOTTOM_RIGHT, -1, -1),
                 FJ_FEATURE_ALIBI, 0.0f, 1.0f, FJT_KV_BROADCAST, false);
    /* sinks alone: CUDA packs the GQA decode rows (a row's head from its
       packed index) and splits them (the combine joins the sink) */
    add_featured(b, "split-decode-gqa-sinks-bf16",
                 desc(2, 32, 8, 1, 32768, 128, FJ_BF16, FJ_CAUSAL_NONE, -1, -1), FJ_FEATURE_SINKS,
                 0.0f, 1.0f, FJT_DENSE, true);
    add_featured(b, "split-decode-gqa-sq4-sinks-f16",
                 desc(1, 16, 2, 4, 9000, 64, FJ_F16, FJ_CAUSAL_NONE, -1, -1), FJ_FEATURE_SINKS,
                 30.0f, -0.7f, FJT_DENSE, true);
    add_featured(b, "split-decode-mqa-alibi-f16",
                 desc(1, 8, 1, 1, 12000, 256, FJ_F16, FJ_CAUSAL_BOTTOM_RIGHT, -1, -1),
                 FJ_FEATURE_ALIBI, 0.0f, 0.0f, FJT_DENSE, true);

    /* flash_tma's d64 prefill (issue 22): the plan fills an H100, so it
       keeps flash_tma, on its 2-consumer tiles with ALiBi */
    add_featured(b, "tma-d64-alibi-causal-bf16",
                 desc(2, 16, 16, 1024, 1024, 64, FJ_BF16, FJ_CAUSAL_BOTTOM_RIGHT, -1, -1),
                 FJ_FEATURE_ALIBI, 0.0f, 1.0f, FJT_DENSE, true);
    add_featured(b, "tma-d64-alibi-sinks-softcap-f16",
                 desc(2, 16, 16, 1000, 1100, 64, FJ_F16, FJ_CAUSAL_NONE, -1, -1),
                 FJ_FEATURE_ALIBI | FJ_FEATURE_SINKS, 30.0f, -0.7f, FJT_DENSE, true);
    add_featured(b, "tma-d128-alibi-nomask-f16",
                 desc(2, 16, 16, 1024, 900, 128, FJ_F16, FJ_CAUSAL_NONE, -1, -1), FJ_FEATURE_ALIBI,
                 0.0f, 0.0f, FJT_DENSE, true);

    /* every CUDA head-dim class, long enough for several key tiles, causal
       and not (flash_tma's 3-consumer d64 tiles take sinks; ALiBi takes its
       2-consumer tiles) */
    static const int dims[] = {8, 32, 64, 72, 96, 128, 160, 192, 200, 256};
    for (int i = 0; i < NELEMS(dims); i++) {
        fj_dtype dt = i % 2 ? FJ_BF16 : FJ_F16;
        fj_attention_desc d = desc(1, 4, 2, 257, 384 + 64 * (i % 3), dims[i], dt,
                                   i % 3 ? FJ_CAUSAL_BOTTOM_RIGHT : FJ_CAUSAL_NONE, -1, -1);
        uint32_t f = feats[i % 3];
        snprintf(name, sizeof name, "dim%d-%s-%s", dims[i], feature_name(f), fj_dtype_name(dt));
        add_featured(b, name, d, f, i % 4 == 2 ? 30.0f : 0.0f, scales[i % NELEMS(scales)],
                     FJT_DENSE, true);
    }

    /* head dims no GPU kernel takes, sizes around the CPU blocks */
    static const int odd_dims[] = {1, 3, 7, 13, 33, 127, 255};
    for (int i = 0; i < NELEMS(odd_dims); i++) {
        fj_dtype dt = all_dtypes[i % 3];
        fj_attention_desc d = desc(1, 3, 1, 1 + 37 * i, 17 + 71 * i, odd_dims[i], dt,
                                   (fj_causal)(i % 3), i == 4 ? 9 : -1, -1);
        uint32_t f = feats[i % 3];
        snprintf(name, sizeof name, "odd-d%d-%s-%s", odd_dims[i], feature_name(f),
                 fj_dtype_name(dt));
        add_featured(b, name, d, f, i == 5 ? 3.0f : 0.0f, scales[i % NELEMS(scales)],
                     (fjt_layout)(i % 3), true);
    }
}

/* ---- variable-length batches (issue 22) --------------------------------------- */

/* A varlen case: the sequences' query and key lengths (used: seqused_k, or
   NULL), pad tokens after them, the maxima the longest plus slack; dense
   packed strides, or with pad > 0 padded ones ([token, heads, dim] with 3
   elements after each row and 5 after each token: FJT_CUSTOM). The CPU
   backends must run them; CUDA refuses them (UNSUPPORTED: a SKIP). */
static fjt_case *add_varlen_to(builder *b, const char *group, const char *name, fj_attention_desc d,
                               int n, const int *q, const int *k, const int *used, int pad,
                               int slack, bool lse)
{
    fjt_varlen v;
    memset(&v, 0, sizeof v);
    v.nseq = n;
    v.has_used = used != NULL;
    v.pad_q = pad;
    v.pad_k = pad ? pad + 2 : 0;
    int mq = 1, mk = 1;
    for (int i = 0; i < n; i++) {
        v.len_q[i] = q[i];
        v.len_k[i] = k[i];
        v.used_k[i] = used ? used[i] : k[i];
        if (q[i] > mq) mq = q[i];
        if (v.used_k[i] > mk) mk = v.used_k[i];
    }
    d.batch = n;
    d.seqlen_q = mq + slack;
    d.seqlen_k = mk + slack;
    d.features |= FJ_FEATURE_VARLEN;
    fjt_case c = fjt_case_make(group, name, &d, pad ? FJT_CUSTOM : FJT_DENSE, lse);
    if (pad) {
        int64_t *st[4] = {c.d.q_stride, c.d.k_stride, c.d.v_stride, c.d.o_stride};
        const int heads[4] = {d.heads_q, d.heads_kv, d.heads_kv, d.heads_q};
        const int dims[4] = {d.head_dim, d.head_dim, fjt_dim_v(&d), fjt_dim_v(&d)};
        for (int t = 0; t < 4; t++) {
            st[t][0] = 0;
            st[t][2] = dims[t] + 3;
            st[t][1] = (int64_t)heads[t] * (dims[t] + 3) + 5;
        }
    }
    c.varlen = v;
    return add(b, &c);
}

static void add_varlen(builder *b, const char *name, fj_attention_desc d, int n, const int *q,
                       const int *k, const int *used, int pad, int slack, bool lse)
{
    add_varlen_to(b, "varlen", name, d, n, q, k, used, pad, slack, lse);
}

/* Empty sequences (no queries, no keys), length 1, primes, Sq != Sk both
   ways, every causal kind and window kind, seqused_k, pad tokens, GQA and
   MQA, every dtype, ALiBi and sinks, decode rows over uneven keys; then
   random batches from the suite's seed. */
static void varlen(builder *b, uint64_t seed)
{
    static const int q1[] = {17, 1, 300, 0, 64}, q2[] = {17, 2, 61, 13}, k2[] = {31, 2, 7, 13};
    static const int q3[] = {129, 5, 64}, k3[] = {65, 300, 64}, q4[] = {40, 1, 90},
                     k4[] = {90, 33, 1};
    static const int q5[] = {3, 19, 1, 8}, k5[] = {40, 19, 7, 8}, u5[] = {11, 0, 7, 2};
    static const int q6[] = {0, 1, 7, 0, 1}, k6[] = {5, 0, 0, 0, 1};
    static const int q7[] = {50, 7, 23, 9}, k7[] = {80, 7, 3, 0};
    static const int q8[] = {1, 1, 1, 1, 1, 1, 1, 1}, k8[] = {4096, 1, 2000, 0, 3001, 17, 64, 129};
    static const int q9[] = {700, 257, 3}, q10[] = {2, 3, 5, 7, 11, 13},
                     k10[] = {13, 11, 7, 5, 3, 2};
    const uint32_t both = FJ_FEATURE_ALIBI | FJ_FEATURE_SINKS;
    fj_attention_desc d;
    d = desc(1, 4, 4, 1, 1, 64, FJ_F32, FJ_CAUSAL_NONE, -1, -1);
    add_varlen(b, "mixed-nomask-f32", d, 5, q1, q1, NULL, 0, 0, true);
    d = desc(1, 8, 2, 1, 1, 40, FJ_BF16, FJ_CAUSAL_BOTTOM_RIGHT, -1, -1);
    add_varlen(b, "primes-causal-br-bf16", d, 4, q2, k2, NULL, 0, 7, true);
    d = desc(1, 3, 3, 1, 1, 64, FJ_F16, FJ_CAUSAL_TOP_LEFT, -1, -1);
    add_varlen(b, "primes-causal-tl-f16", d, 4, q2, k2, NULL, 2, 0, true);
    d = desc(1, 4, 1, 1, 1, 128, FJ_BF16, FJ_CAUSAL_BOTTOM_RIGHT, 16, -1);
    add_varlen(b, "window-mqa-bf16", d, 3, q3, k3, NULL, 0, 0, true);
    d = desc(1, 2, 2, 1, 1, 8, FJ_F32, FJ_CAUSAL_NONE, 3, 2);
    add_varlen(b, "band-f32", d, 3, q4, k4, NULL, 1, 0, true);
    d = desc(1, 4, 4, 1, 1, 64, FJ_F16, FJ_CAUSAL_BOTTOM_RIGHT, -1, -1);
    add_varlen(b, "seqused-f16", d, 4, q5, k5, u5, 0, 0, true);
    d = desc(1, 4, 2, 1, 1, 64, FJ_F32, FJ_CAUSAL_NONE, -1, -1);
    add_varlen(b, "empty-sequences-f32", d, 5, q6, k6, NULL, 3, 0, true);
    d = desc(1, 4, 1, 1, 1, 64, FJ_F32, FJ_CAUSAL_BOTTOM_RIGHT, -1, -1);
    d.features = both;
    add_varlen(b, "alibi-sinks-f32", d, 4, q7, k7, NULL, 0, 0, true);
    d = desc(1, 8, 2, 1, 1, 96, FJ_BF16, FJ_CAUSAL_TOP_LEFT, 20, -1);
    d.features = FJ_FEATURE_SINKS;
    d.softcap = 30.0f;
    add_varlen(b, "sinks-softcap-window-bf16", d, 4, q7, k7, NULL, 2, 0, true);
    d = desc(1, 32, 8, 1, 1, 128, FJ_BF16, FJ_CAUSAL_BOTTOM_RIGHT, -1, -1);
    add_varlen(b, "decode-gqa-bf16", d, 8, q8, k8, NULL, 0, 0, true);
    d = desc(1, 8, 2, 1, 1, 128, FJ_BF16, FJ_CAUSAL_BOTTOM_RIGHT, -1, -1);
    add_varlen(b, "prefill-causal-bf16", d, 3, q9, q9, NULL, 0, 0, false);
    d = desc(1, 3, 1, 1, 1, 13, FJ_F16, FJ_CAUSAL_BOTTOM_RIGHT, -1, -1);
    add_varlen(b, "primes-odd-dim-f16", d, 6, q10, k10, NULL, 1, 3, true);

    fjt_rng rng;
    fjt_rng_init(&rng, seed ^ 0x7661726c656e2dull);
    static const int menu[] = {0, 1, 2, 3, 5, 7, 13, 17, 31, 61, 63, 64, 65, 127, 128, 129, 257};
    static const int dims[] = {8, 40, 64, 80, 128, 200};
    static const int heads[][2] = {{1, 1}, {4, 4}, {8, 1}, {8, 2}, {6, 3}};
    for (int i = 0; i < 10; i++) {
        int n = fjt_range(&rng, 1, 8), q[8], k[8], u[8];
        bool with_used = fjt_range(&rng, 0, 3) == 0;
        for (int j = 0; j < n; j++) {
            q[j] = menu[fjt_range(&rng, 0, NELEMS(menu) - 1)];
            u[j] = menu[fjt_range(&rng, 0, NELEMS(menu) - 1)];
            k[j] = with_used ? u[j] + fjt_range(&rng, 0, 9) : u[j];
        }
        /* one draw per statement: argument evaluation order is unspecified */
        const int g = fjt_range(&rng, 0, NELEMS(heads) - 1);
        const int dim = dims[fjt_range(&rng, 0, NELEMS(dims) - 1)];
        const fj_causal causal = (fj_causal)fjt_range(&rng, 0, 2);
        int wl = -1, wr = -1;
        if (fjt_range(&rng, 0, 2) == 0) wl = fjt_range(&rng, 0, 40);
        if (fjt_range(&rng, 0, 3) == 0) wr = fjt_range(&rng, 0, 40);
        d = desc(1, heads[g][0], heads[g][1], 1, 1, dim, all_dtypes[i % 3], causal, wl, wr);
        if (fjt_range(&rng, 0, 3) == 0) d.features |= FJ_FEATURE_ALIBI;
        if (fjt_range(&rng, 0, 3) == 0) d.features |= FJ_FEATURE_SINKS;
        const int pad = fjt_range(&rng, 0, 1) * 4, slack = fjt_range(&rng, 0, 20);
        const bool lse = fjt_range(&rng, 0, 3) != 0;
        char name[48];
        snprintf(name, sizeof name, "random-%d", i);
        add_varlen(b, name, d, n, q, k, with_used ? u : NULL, pad, slack, lse);
    }
}

/* ---- paged KV cache (issue 22) ------------------------------------------------- */

/* A paged case: sequences of q[b] queries (dense_q: all the same, the
   desc's seqlen_q) over kv[b] cached keys, paged as pg says (the desc's
   page fields and pool strides from fjt_paged_desc). The CPU backends must
   run them; CUDA refuses them (UNSUPPORTED: a SKIP). */
static fjt_case *add_paged_to(builder *b, const char *group, const char *name, fj_attention_desc d,
                              int n, const int *q, const int *kv, fjt_paged pg, int slack, bool lse)
{
    fjt_varlen v;
    memset(&v, 0, sizeof v);
    v.nseq = n;
    int mq = 1, mk = 1;
    for (int i = 0; i < n; i++) {
        v.len_q[i] = q[i];
        v.len_k[i] = v.used_k[i] = kv[i];
        if (q[i] > mq) mq = q[i];
        if (kv[i] > mk) mk = kv[i];
    }
    d.batch = n;
    d.seqlen_q = mq;
    d.seqlen_k = mk + slack;
    d.features |= FJ_FEATURE_PAGED_KV | (pg.dense_q ? 0 : FJ_FEATURE_VARLEN);
    fjt_case c =
        fjt_case_make(group, name, &d, pg.layout == FJT_POOL_DENSE ? FJT_DENSE : FJT_CUSTOM, lse);
    if (!fjt_paged_desc(&c.d, &v, &pg)) b->ok = false;
    c.varlen = v;
    c.paged = pg;
    return add(b, &c);
}

static void add_paged(builder *b, const char *name, fj_attention_desc d, int n, const int *q,
                      const int *kv, fjt_paged pg, int slack, bool lse)
{
    add_paged_to(b, "paged", name, d, n, q, kv, pg, slack, lse);
}

/* Decode (GQA, MQA), speculative decode (rows past a short cache see no
   key), chunked prefill against a cache (varlen queries), pages out of
   order and in order (one run: no copy), page sizes 1, primes, 16, 64,
   lengths not a multiple of the page size, unused tail entries and padded
   table rows, empty sequences, every mask, every dtype, odd head dims,
   three pool layouts, ALiBi, sinks, a softcap; then random ones from the
   suite's seed. */
static void paged(builder *b, uint64_t seed)
{
    static const int d1[] = {1, 1, 1, 1, 1, 1}, k1[] = {300, 1, 0, 77, 16, 33};
    static const int d4[] = {4, 4, 4, 4, 4}, k4[] = {5, 2, 40, 0, 17};
    static const int d16[] = {16, 16, 16}, k16[] = {16, 100, 3};
    static const int q7[] = {17, 0, 64, 1}, k7[] = {117, 30, 64, 200};
    static const int q8[] = {13, 2, 61, 7}, k8[] = {31, 2, 7, 13};
    static const int q9[] = {0, 3, 0, 1, 2}, k9[] = {0, 0, 9, 1, 33};
    static const int d3[] = {3, 3, 3, 3}, k3[] = {29, 3, 64, 65};
    const fjt_paged shuffled16 = {.page_size = 16, .spare_pages = 3, .spare_cols = 2, .dense_q = 1};
    const fjt_paged ordered64 = {.page_size = 64, .in_order = true, .dense_q = true};
    const fjt_paged head_major7 = {.page_size = 7,
                                   .stride_pad = 3,
                                   .layout = FJT_POOL_HEAD_MAJOR,
                                   .dense_q = true};
    const fjt_paged padded1 = {.page_size = 1, .in_order = true, .layout = FJT_POOL_PADDED};
    const fjt_paged prefill5 = {.page_size = 5, .spare_pages = 2, .spare_cols = 1};
    const fjt_paged prefill16 = {.page_size = 16, .spare_cols = 4, .stride_pad = 2};
    fjt_paged pg;
    fj_attention_desc d;
    d = desc(1, 8, 2, 1, 1, 128, FJ_BF16, FJ_CAUSAL_BOTTOM_RIGHT, -1, -1);
    add_paged(b, "decode-gqa-shuffled-bf16", d, 6, d1, k1, shuffled16, 0, true);
    add_paged(b, "decode-gqa-in-order-bf16", d, 6, d1, k1, ordered64, 0, true);
    d = desc(1, 4, 1, 1, 1, 40, FJ_F16, FJ_CAUSAL_BOTTOM_RIGHT, -1, -1);
    add_paged(b, "speculative-mqa-head-major-f16", d, 5, d4, k4, head_major7, 3, true);
    d = desc(1, 3, 3, 1, 1, 64, FJ_F32, FJ_CAUSAL_TOP_LEFT, -1, -1);
    pg = padded1;
    pg.dense_q = true;
    add_paged(b, "speculative-16-tl-page1-f32", d, 3, d16, k16, pg, 0, true);
    d = desc(1, 2, 2, 1, 1, 32, FJ_F32, FJ_CAUSAL_BOTTOM_RIGHT, 5, -1);
    add_paged(b, "decode-window-f32", d, 4, d3, k3, shuffled16, 1, true);
    d = desc(1, 4, 1, 1, 1, 13, FJ_F32, FJ_CAUSAL_NONE, -1, -1);
    add_paged(b, "nomask-odd-dim-f32", d, 4, d3, k3, head_major7, 0, false);
    d = desc(1, 4, 2, 1, 1, 16, FJ_F32, FJ_CAUSAL_NONE, 3, 2);
    d.features = FJ_FEATURE_ALIBI | FJ_FEATURE_SINKS;
    add_paged(b, "band-alibi-sinks-f32", d, 4, d3, k3, shuffled16, 0, true);
    d = desc(1, 4, 1, 1, 1, 128, FJ_BF16, FJ_CAUSAL_BOTTOM_RIGHT, -1, -1);
    add_paged(b, "chunked-prefill-bf16", d, 4, q7, k7, prefill16, 0, true);
    d = desc(1, 6, 3, 1, 1, 80, FJ_F16, FJ_CAUSAL_TOP_LEFT, -1, -1);
    add_paged(b, "prefill-primes-tl-f16", d, 4, q8, k8, prefill5, 2, true);
    d = desc(1, 8, 2, 1, 1, 96, FJ_BF16, FJ_CAUSAL_BOTTOM_RIGHT, 20, -1);
    d.features = FJ_FEATURE_SINKS;
    d.softcap = 30.0f;
    add_paged(b, "prefill-window-softcap-sinks-bf16", d, 4, q7, k7, padded1, 0, true);
    d = desc(1, 2, 1, 1, 1, 16, FJ_F32, FJ_CAUSAL_NONE, -1, -1);
    add_paged(b, "empty-sequences-f32", d, 5, q9, k9, prefill5, 0, true);

    fjt_rng rng;
    fjt_rng_init(&rng, seed ^ 0x70616765642dull);
    static const int menu[] = {0, 1, 2, 3, 5, 7, 13, 15, 16, 17, 31, 61, 64, 65, 127, 129, 257};
    static const int dims[] = {8, 13, 40, 64, 128, 200};
    static const int heads[][2] = {{1, 1}, {4, 4}, {8, 1}, {8, 2}, {6, 3}};
    for (int i = 0; i < 10; i++) {
        int n = fjt_range(&rng, 1, 8), q[8], k[8];
        pg = (fjt_paged){0};
        pg.dense_q = fjt_range(&rng, 0, 1);
        const int rows = fjt_range(&rng, 1, 16);
        for (int j = 0; j < n; j++) {
            q[j] = pg.dense_q ? rows : menu[fjt_range(&rng, 0, NELEMS(menu) - 1)];
            k[j] = menu[fjt_range(&rng, 0, NELEMS(menu) - 1)];
        }
        pg.page_size = fjt_range(&rng, 0, 1) ? 16 : fjt_range(&rng, 1, 70);
        pg.in_order = fjt_range(&rng, 0, 2) == 0;
        pg.layout = (fjt_pool_layout)fjt_range(&rng, 0, 2);
        pg.spare_pages = fjt_range(&rng, 0, 4);
        pg.spare_cols = fjt_range(&rng, 0, 2);
        pg.stride_pad = fjt_range(&rng, 0, 1) * fjt_range(&rng, 1, 3);
        /* one draw per statement: argument evaluation order is unspecified */
        const int g = fjt_range(&rng, 0, NELEMS(heads) - 1);
        const int dim = dims[fjt_range(&rng, 0, NELEMS(dims) - 1)];
        const fj_causal causal = (fj_causal)fjt_range(&rng, 0, 2);
        int wl = -1, wr = -1;
        if (fjt_range(&rng, 0, 2) == 0) wl = fjt_range(&rng, 0, 40);
        if (fjt_range(&rng, 0, 3) == 0) wr = fjt_range(&rng, 0, 40);
        d = desc(1, heads[g][0], heads[g][1], 1, 1, dim, all_dtypes[i % 3], causal, wl, wr);
        if (fjt_range(&rng, 0, 3) == 0) d.features |= FJ_FEATURE_ALIBI;
        if (fjt_range(&rng, 0, 3) == 0) d.features |= FJ_FEATURE_SINKS;
        const int slack = fjt_range(&rng, 0, 20);
        const bool lse = fjt_range(&rng, 0, 3) != 0;
        char name[48];
        snprintf(name, sizeof name, "random-%d", i);
        add_paged(b, name, d, n, q, k, pg, slack, lse);
    }
}

/* ---- varlen and paged on CUDA (issue 22) ---------------------------------------- */

/* The case just added becomes one CUDA must run (heavy by its oracle's
   work, as the other CUDA families), with knob set while its plan is made. */
static void cuda_must_run(fjt_case *c, const char *knob)
{
    if (!c) return;
    c->must_run |= FJT_ON(FJ_BACKEND_CUDA);
    c->heavy = fjt_case_work(c) > HEAVY_WORK;
    c->knob = knob;
}

/* Varlen batches the CUDA kernels take (f16 and bf16, head dims multiples
   of 8, no ALiBi or sinks, 16-byte aligned packed rows): empty sequences,
   one row or key, primes, Sq != Sk both ways, every causal and window kind,
   seqused_k, GQA and MQA, a softcap, the decode shape (split-KV) and
   prefill tiles over several query tiles, forced split counts; then random
   batches from the suite's seed. */
static void varlen_cuda(builder *b, uint64_t seed)
{
    static const int q1[] = {17, 1, 300, 0, 64}, q2[] = {17, 2, 61, 13}, k2[] = {31, 2, 7, 13};
    static const int q3[] = {129, 5, 64}, k3[] = {65, 300, 64}, q4[] = {40, 1, 90},
                     k4[] = {90, 33, 1};
    static const int q5[] = {3, 19, 1, 8}, k5[] = {40, 19, 7, 8}, u5[] = {11, 0, 7, 2};
    static const int q6[] = {0, 1, 7, 0, 1}, k6[] = {5, 0, 0, 0, 1};
    static const int q7[] = {50, 7, 23, 9}, k7[] = {80, 7, 3, 0};
    static const int q8[] = {1, 1, 1, 1, 1, 1, 1, 1}, k8[] = {4096, 1, 2000, 0, 3001, 17, 64, 129};
    static const int q9[] = {700, 257, 3}, q10[] = {33, 0, 100, 7}, k10[] = {500, 40, 3000, 0};
    static const int q11[] = {65, 130, 1}, k11[] = {200, 64, 1};
    const char *g = "varlen-cuda";
    fj_attention_desc d;
    d = desc(1, 4, 4, 1, 1, 64, FJ_F16, FJ_CAUSAL_NONE, -1, -1);
    cuda_must_run(add_varlen_to(b, g, "mixed-nomask-f16", d, 5, q1, q1, NULL, 0, 0, true), NULL);
    d = desc(1, 8, 2, 1, 1, 40, FJ_BF16, FJ_CAUSAL_BOTTOM_RIGHT, -1, -1);
    cuda_must_run(add_varlen_to(b, g, "primes-causal-br-bf16", d, 4, q2, k2, NULL, 0, 7, true),
                  NULL);
    d = desc(1, 3, 3, 1, 1, 64, FJ_F16, FJ_CAUSAL_TOP_LEFT, -1, -1);
    cuda_must_run(add_varlen_to(b, g, "primes-causal-tl-f16", d, 4, q2, k2, NULL, 0, 0, false),
                  NULL);
    d = desc(1, 4, 1, 1, 1, 128, FJ_BF16, FJ_CAUSAL_BOTTOM_RIGHT, 16, -1);
    cuda_must_run(add_varlen_to(b, g, "window-mqa-bf16", d, 3, q3, k3, NULL, 0, 0, true), NULL);
    d = desc(1, 2, 2, 1, 1, 8, FJ_F16, FJ_CAUSAL_NONE, 3, 2);
    cuda_must_run(add_varlen_to(b, g, "band-d8-f16", d, 3, q4, k4, NULL, 0, 0, true), NULL);
    d = desc(1, 4, 4, 1, 1, 64, FJ_F16, FJ_CAUSAL_BOTTOM_RIGHT, -1, -1);
    cuda_must_run(add_varlen_to(b, g, "seqused-f16", d, 4, q5, k5, u5, 0, 0, true), NULL);
    d = desc(1, 4, 2, 1, 1, 64, FJ_BF16, FJ_CAUSAL_NONE, -1, -1);
    cuda_must_run(add_varlen_to(b, g, "empty-sequences-bf16", d, 5, q6, k6, NULL, 0, 0, true),
                  NULL);
    d = desc(1, 8, 2, 1, 1, 96, FJ_BF16, FJ_CAUSAL_TOP_LEFT, 20, -1);
    d.softcap = 30.0f;
    cuda_must_run(add_varlen_to(b, g, "softcap-window-tl-bf16", d, 4, q7, k7, NULL, 0, 0, true),
                  NULL);
    d = desc(1, 32, 8, 1, 1, 128, FJ_BF16, FJ_CAUSAL_BOTTOM_RIGHT, -1, -1);
    cuda_must_run(add_varlen_to(b, g, "decode-gqa-bf16", d, 8, q8, k8, NULL, 0, 0, true), NULL);
    d = desc(1, 8, 2, 1, 1, 128, FJ_BF16, FJ_CAUSAL_BOTTOM_RIGHT, -1, -1);
    cuda_must_run(add_varlen_to(b, g, "prefill-causal-bf16", d, 3, q9, q9, NULL, 0, 0, false),
                  NULL);
    d = desc(1, 4, 2, 1, 1, 64, FJ_F16, FJ_CAUSAL_BOTTOM_RIGHT, -1, -1);
    cuda_must_run(add_varlen_to(b, g, "split5-causal-f16", d, 4, q10, k10, NULL, 0, 3, true),
                  "FLASHJIT_CUDA_SPLITS=5");
    d = desc(1, 2, 1, 1, 1, 256, FJ_F16, FJ_CAUSAL_BOTTOM_RIGHT, -1, -1);
    cuda_must_run(add_varlen_to(b, g, "d256-causal-f16", d, 3, q11, k11, NULL, 0, 0, true), NULL);
    d = desc(1, 2, 1, 1, 1, 256, FJ_BF16, FJ_CAUSAL_NONE, -1, -1);
    cuda_must_run(add_varlen_to(b, g, "d256-split3-bf16", d, 3, q11, k11, NULL, 0, 0, true),
                  "FLASHJIT_CUDA_SPLITS=3");

    fjt_rng rng;
    fjt_rng_init(&rng, seed ^ 0x7661726c63756461ull);
    static const int menu[] = {0, 1, 2, 3, 5, 7, 13, 17, 31, 61, 63, 64, 65, 127, 128, 129, 257};
    static const int dims[] = {8, 40, 64, 80, 128, 200, 256};
    static const int heads[][2] = {{1, 1}, {4, 4}, {8, 1}, {8, 2}, {6, 3}};
    static const fj_dtype kinds[] = {FJ_F16, FJ_BF16};
    for (int i = 0; i < 8; i++) {
        int n = fjt_range(&rng, 1, 8), q[8], k[8], u[8];
        bool with_used = fjt_range(&rng, 0, 3) == 0;
        for (int j = 0; j < n; j++) {
            q[j] = menu[fjt_range(&rng, 0, NELEMS(menu) - 1)];
            u[j] = menu[fjt_range(&rng, 0, NELEMS(menu) - 1)];
            k[j] = with_used ? u[j] + fjt_range(&rng, 0, 9) : u[j];
        }
        /* one draw per statement: argument evaluation order is unspecified */
        const int hg = fjt_range(&rng, 0, NELEMS(heads) - 1);
        const int dim = dims[fjt_range(&rng, 0, NELEMS(dims) - 1)];
        const fj_causal causal = (fj_causal)fjt_range(&rng, 0, 2);
        int wl = -1, wr = -1;
        if (fjt_range(&rng, 0, 2) == 0) wl = fjt_range(&rng, 0, 40);
        if (fjt_range(&rng, 0, 3) == 0) wr = fjt_range(&rng, 0, 40);
        d = desc(1, heads[hg][0], heads[hg][1], 1, 1, dim, kinds[i % 2], causal, wl, wr);
        if (fjt_range(&rng, 0, 3) == 0) d.softcap = 20.0f;
        const int slack = fjt_range(&rng, 0, 20);
        const bool lse = fjt_range(&rng, 0, 3) != 0;
        char name[48];
        snprintf(name, sizeof name, "random-%d", i);
        cuda_must_run(add_varlen_to(b, g, name, d, n, q, k, with_used ? u : NULL, 0, slack, lse),
                      NULL);
    }
}

/* Paged caches the CUDA kernels take (page sizes multiples of 16, dense
   and head-major pools, f16 and bf16, head dims multiples of 8): decode
   and speculative decode with dense queries (split-KV where the dense plan
   splits, and forced), chunked prefill with varlen queries, pages out of
   order and in order, lengths not a multiple of the page size, unused tail
   entries (values outside the pool) and padded table rows, empty
   sequences, every mask, a softcap; then random ones from the suite's
   seed. */
static void paged_cuda(builder *b, uint64_t seed)
{
    static const int d1[] = {1, 1, 1, 1, 1, 1}, k1[] = {300, 1, 0, 77, 16, 33};
    static const int d4[] = {4, 4, 4, 4, 4}, k4[] = {5, 2, 40, 0, 17};
    static const int d16[] = {16, 16, 16}, k16[] = {16, 100, 3};
    static const int q7[] = {17, 0, 64, 1}, k7[] = {117, 30, 64, 200};
    static const int q8[] = {13, 2, 61, 7}, k8[] = {31, 2, 7, 13};
    static const int q9[] = {0, 3, 0, 1, 2}, k9[] = {0, 0, 9, 1, 33};
    static const int d3[] = {3, 3, 3, 3}, k3[] = {29, 3, 64, 65};
    static const int l1[] = {1, 1, 1}, kl[] = {4000, 17, 2500};
    static const int s4[] = {4, 4, 4}, ks[] = {700, 3, 130};
    const fjt_paged shuffled16 = {.page_size = 16, .spare_pages = 3, .spare_cols = 2, .dense_q = 1};
    const fjt_paged ordered64 = {.page_size = 64, .in_order = true, .dense_q = true};
    const fjt_paged head_major16 = {.page_size = 16,
                                    .stride_pad = 3,
                                    .layout = FJT_POOL_HEAD_MAJOR,
                                    .dense_q = true};
    const fjt_paged ordered32 = {.page_size = 32, .in_order = true, .dense_q = true};
    const fjt_paged prefill16 = {.page_size = 16, .spare_cols = 4, .stride_pad = 2};
    const fjt_paged prefill48 = {.page_size = 48, .spare_pages = 2, .spare_cols = 1};
    const fjt_paged prefill64 = {.page_size = 64, .in_order = true};
    const fjt_paged head_major32 = {.page_size = 32,
                                    .spare_pages = 2,
                                    .layout = FJT_POOL_HEAD_MAJOR,
                                    .dense_q = true};
    const char *g = "paged-cuda";
    fj_attention_desc d;
    d = desc(1, 8, 2, 1, 1, 128, FJ_BF16, FJ_CAUSAL_BOTTOM_RIGHT, -1, -1);
    cuda_must_run(add_paged_to(b, g, "decode-gqa-shuffled16-bf16", d, 6, d1, k1, shuffled16, 0,
                               true),
                  NULL);
    cuda_must_run(add_paged_to(b, g, "decode-gqa-in-order64-bf16", d, 6, d1, k1, ordered64, 0,
                               true),
                  NULL);
    d = desc(1, 4, 1, 1, 1, 40, FJ_F16, FJ_CAUSAL_BOTTOM_RIGHT, -1, -1);
    cuda_must_run(add_paged_to(b, g, "speculative-mqa-head-major-f16", d, 5, d4, k4, head_major16,
                               3, true),
                  NULL);
    d = desc(1, 3, 3, 1, 1, 64, FJ_F16, FJ_CAUSAL_TOP_LEFT, -1, -1);
    cuda_must_run(add_paged_to(b, g, "speculative-16-tl-page32-f16", d, 3, d16, k16, ordered32, 0,
                               true),
                  NULL);
    d = desc(1, 2, 2, 1, 1, 32, FJ_BF16, FJ_CAUSAL_BOTTOM_RIGHT, 5, -1);
    cuda_must_run(add_paged_to(b, g, "decode-window-bf16", d, 4, d3, k3, shuffled16, 1, true),
                  NULL);
    d = desc(1, 4, 2, 1, 1, 16, FJ_F16, FJ_CAUSAL_NONE, 3, 2);
    cuda_must_run(add_paged_to(b, g, "band-d16-f16", d, 4, d3, k3, shuffled16, 0, false), NULL);
    d = desc(1, 4, 1, 1, 1, 128, FJ_BF16, FJ_CAUSAL_BOTTOM_RIGHT, -1, -1);
    cuda_must_run(add_paged_to(b, g, "chunked-prefill-bf16", d, 4, q7, k7, prefill16, 0, true),
                  NULL);
    d = desc(1, 6, 3, 1, 1, 80, FJ_F16, FJ_CAUSAL_TOP_LEFT, -1, -1);
    cuda_must_run(add_paged_to(b, g, "prefill-primes-tl-page48-f16", d, 4, q8, k8, prefill48, 2,
                               true),
                  NULL);
    d = desc(1, 8, 2, 1, 1, 96, FJ_BF16, FJ_CAUSAL_BOTTOM_RIGHT, 20, -1);
    d.softcap = 30.0f;
    cuda_must_run(add_paged_to(b, g, "prefill-window-softcap-bf16", d, 4, q7, k7, prefill64, 0,
                               true),
                  NULL);
    d = desc(1, 2, 1, 1, 1, 16, FJ_F16, FJ_CAUSAL_NONE, -1, -1);
    cuda_must_run(add_paged_to(b, g, "empty-sequences-f16", d, 5, q9, k9, prefill16, 0, true),
                  NULL);
    d = desc(1, 32, 8, 1, 1, 128, FJ_BF16, FJ_CAUSAL_BOTTOM_RIGHT, -1, -1);
    cuda_must_run(add_paged_to(b, g, "decode-long-split-bf16", d, 3, l1, kl, shuffled16, 0, true),
                  NULL);
    d = desc(1, 8, 8, 1, 1, 64, FJ_F16, FJ_CAUSAL_BOTTOM_RIGHT, -1, -1);
    cuda_must_run(add_paged_to(b, g, "speculative-split6-f16", d, 3, s4, ks, head_major32, 0, true),
                  "FLASHJIT_CUDA_SPLITS=6");
    d = desc(1, 4, 2, 1, 1, 256, FJ_BF16, FJ_CAUSAL_BOTTOM_RIGHT, -1, -1);
    cuda_must_run(add_paged_to(b, g, "decode-d256-split4-bf16", d, 3, l1, ks, ordered64, 0, true),
                  "FLASHJIT_CUDA_SPLITS=4");

    /* the decode kernels' staged page numbers (flash_fwd.cu, stage_pages):
       shuffled pages of 16 and 64 keys (8 and 2 per 128-key tile), of 48
       (a page straddling tiles: up to 4 per tile) and of 256 (a page
       spanning tiles), over several tiles, tails, one key and none; split
       and not */
    static const int p1[] = {1, 1, 1, 1, 1}, pk[] = {5000, 3001, 64, 1, 0};
    const fjt_paged shuffled64 = {.page_size = 64,
                                  .spare_pages = 2,
                                  .spare_cols = 1,
                                  .dense_q = true};
    const fjt_paged shuffled48 = {.page_size = 48, .spare_pages = 1, .dense_q = true};
    const fjt_paged shuffled256 = {.page_size = 256,
                                   .spare_pages = 1,
                                   .spare_cols = 1,
                                   .dense_q = true};
    d = desc(1, 32, 8, 1, 1, 128, FJ_BF16, FJ_CAUSAL_BOTTOM_RIGHT, -1, -1);
    cuda_must_run(add_paged_to(b, g, "decode-shuffled64-bf16", d, 5, p1, pk, shuffled64, 0, true),
                  NULL);
    d = desc(1, 16, 2, 1, 1, 64, FJ_F16, FJ_CAUSAL_NONE, -1, -1);
    cuda_must_run(add_paged_to(b, g, "decode-shuffled64-d64-unsplit-f16", d, 5, p1, pk, shuffled64,
                               0, true),
                  "FLASHJIT_CUDA_SPLITS=1");
    d = desc(1, 8, 1, 1, 1, 128, FJ_BF16, FJ_CAUSAL_BOTTOM_RIGHT, -1, -1);
    cuda_must_run(add_paged_to(b, g, "decode-shuffled16-split3-bf16", d, 5, p1, pk, shuffled16, 0,
                               true),
                  "FLASHJIT_CUDA_SPLITS=3");
    d = desc(1, 8, 2, 1, 1, 128, FJ_F16, FJ_CAUSAL_BOTTOM_RIGHT, -1, -1);
    cuda_must_run(add_paged_to(b, g, "decode-shuffled48-f16", d, 5, p1, pk, shuffled48, 0, true),
                  NULL);
    d = desc(1, 4, 4, 1, 1, 64, FJ_BF16, FJ_CAUSAL_NONE, -1, -1);
    cuda_must_run(add_paged_to(b, g, "decode-shuffled256-bf16", d, 5, p1, pk, shuffled256, 0, true),
                  NULL);

    fjt_rng rng;
    fjt_rng_init(&rng, seed ^ 0x7061676563756461ull);
    static const int menu[] = {0, 1, 2, 3, 5, 7, 13, 15, 16, 17, 31, 61, 64, 65, 127, 129, 257};
    static const int dims[] = {8, 16, 40, 64, 128, 200, 256};
    static const int heads[][2] = {{1, 1}, {4, 4}, {8, 1}, {8, 2}, {6, 3}};
    static const int sizes[] = {16, 32, 48, 64, 128};
    static const fj_dtype kinds[] = {FJ_F16, FJ_BF16};
    for (int i = 0; i < 8; i++) {
        int n = fjt_range(&rng, 1, 8), q[8], k[8];
        fjt_paged pg = {0};
        pg.dense_q = fjt_range(&rng, 0, 1);
        const int rows = fjt_range(&rng, 1, 16);
        for (int j = 0; j < n; j++) {
            q[j] = pg.dense_q ? rows : menu[fjt_range(&rng, 0, NELEMS(menu) - 1)];
            k[j] = menu[fjt_range(&rng, 0, NELEMS(menu) - 1)];
        }
        pg.page_size = sizes[fjt_range(&rng, 0, NELEMS(sizes) - 1)];
        pg.in_order = fjt_range(&rng, 0, 2) == 0;
        pg.layout = fjt_range(&rng, 0, 1) ? FJT_POOL_HEAD_MAJOR : FJT_POOL_DENSE;
        pg.spare_pages = fjt_range(&rng, 0, 4);
        pg.spare_cols = fjt_range(&rng, 0, 2);
        pg.stride_pad = fjt_range(&rng, 0, 1) * fjt_range(&rng, 1, 3);
        /* one draw per statement: argument evaluation order is unspecified */
        const int hg = fjt_range(&rng, 0, NELEMS(heads) - 1);
        const int dim = dims[fjt_range(&rng, 0, NELEMS(dims) - 1)];
        const fj_causal causal = (fj_causal)fjt_range(&rng, 0, 2);
        int wl = -1, wr = -1;
        if (fjt_range(&rng, 0, 2) == 0) wl = fjt_range(&rng, 0, 40);
        if (fjt_range(&rng, 0, 3) == 0) wr = fjt_range(&rng, 0, 40);
        d = desc(1, heads[hg][0], heads[hg][1], 1, 1, dim, kinds[i % 2], causal, wl, wr);
        if (fjt_range(&rng, 0, 3) == 0) d.softcap = 20.0f;
        const int slack = fjt_range(&rng, 0, 20);
        const bool lse = fjt_range(&rng, 0, 3) != 0;
        char name[48];
        snprintf(name, sizeof name, "random-%d", i);
        cuda_must_run(add_paged_to(b, g, name, d, n, q, k, pg, slack, lse), NULL);
    }
}

/* ---- V's head dim other than Q's and K's (issue 22) ---------------------------- */

/* head_dim_v != head_dim (DeepSeek's MLA: q and k rows of 192 against v rows
 * of 128, and the absorbed decode's 576 against 512), which only the CPU
 * backends take (CUDA answers UNSUPPORTED, which these cases allow it): V
 * wider and narrower than Q, odd and tiny dims (1 and 7, 33 and 17), every
 * dtype and mask kind, windows, GQA and MQA, Sq above and below Sk, every
 * layout (v's and o's strides step head_dim_v), lse on and off; the decode
 * path (1..16 rows per kv head, long keys split into chunks), prefill on
 * the tiled path (bf16 with a GQA group of 18 so AMX's row blocks do not
 * take it, and with groups of 2 so they do where the CPU has AMX);
 * softcap, ALiBi and sinks; varlen batches and paged caches; then random
 * problems from the suite's seed. */
static void head_dim_v(builder *b, uint64_t seed)
{
    static const struct {
        int batch, hq, hkv, sq, sk, dim, dim_v;
        fj_dtype t;
        fj_causal causal;
        int wl, wr;
        fjt_layout layout;
        bool lse;
    } c[] = {
        /* prefill: more than 16 rows per kv head */
        {1, 4, 1, 97, 300, 192, 128, FJ_BF16, FJ_CAUSAL_BOTTOM_RIGHT, -1, -1, FJT_DENSE, true},
        {2, 2, 2, 200, 65, 128, 192, FJ_F32, FJ_CAUSAL_TOP_LEFT, -1, -1, FJT_PADDED, true},
        {1, 2, 1, 40, 130, 576, 512, FJ_F16, FJ_CAUSAL_BOTTOM_RIGHT, -1, -1, FJT_BHSD, true},
        {1, 18, 1, 9, 257, 576, 512, FJ_BF16, FJ_CAUSAL_NONE, -1, -1, FJT_DENSE, true},
        {1, 8, 2, 129, 129, 64, 32, FJ_F16, FJ_CAUSAL_NONE, 17, 5, FJT_PADDED3, true},
        {1, 3, 3, 17, 63, 1, 7, FJ_F32, FJ_CAUSAL_BOTTOM_RIGHT, -1, -1, FJT_DENSE, false},
        {2, 4, 2, 65, 31, 33, 17, FJ_F16, FJ_CAUSAL_BOTTOM_RIGHT, -1, -1, FJT_DENSE, true},
        {1, 18, 1, 3, 100, 256, 96, FJ_BF16, FJ_CAUSAL_TOP_LEFT, 40, -1, FJT_BHSD, true},
        {1, 4, 2, 33, 520, 80, 200, FJ_BF16, FJ_CAUSAL_BOTTOM_RIGHT, 100, 3, FJT_KV_BROADCAST,
         true},
        {2, 2, 1, 70, 70, 128, 64, FJ_F32, FJ_CAUSAL_NONE, -1, -1, FJT_Q_BROADCAST, true},
        {1, 2, 2, 300, 17, 17, 33, FJ_F32, FJ_CAUSAL_TOP_LEFT, 3, 9, FJT_PADDED, false},
        /* decode: 1..16 rows per kv head */
        {1, 16, 1, 1, 1031, 576, 512, FJ_BF16, FJ_CAUSAL_NONE, -1, -1, FJT_DENSE, true},
        {1, 8, 2, 4, 700, 576, 512, FJ_F32, FJ_CAUSAL_BOTTOM_RIGHT, 300, -1, FJT_DENSE, true},
        {2, 8, 2, 1, 2049, 192, 128, FJ_F16, FJ_CAUSAL_BOTTOM_RIGHT, -1, -1, FJT_PADDED, true},
        {1, 4, 1, 1, 100, 7, 1, FJ_BF16, FJ_CAUSAL_NONE, -1, -1, FJT_DENSE, true},
        {1, 4, 4, 5, 3, 17, 33, FJ_BF16, FJ_CAUSAL_BOTTOM_RIGHT, -1, -1, FJT_DENSE,
         true}, /* seqlen_q > seqlen_k: rows that see nothing */
        {1, 16, 2, 2, 600, 128, 192, FJ_F32, FJ_CAUSAL_TOP_LEFT, -1, 40, FJT_BHSD, false},
        {1, 6, 3, 16, 129, 96, 40, FJ_F16, FJ_CAUSAL_BOTTOM_RIGHT, 7, 0, FJT_PADDED3, true},
    };
    for (int i = 0; i < NELEMS(c); i++) {
        fj_attention_desc d = desc(c[i].batch, c[i].hq, c[i].hkv, c[i].sq, c[i].sk, c[i].dim,
                                   c[i].t, c[i].causal, c[i].wl, c[i].wr);
        d.head_dim_v = c[i].dim_v;
        char name[64];
        snprintf(name, sizeof name, "d%d-dv%d-sq%d-sk%d-h%d-%d-%s", c[i].dim, c[i].dim_v, c[i].sq,
                 c[i].sk, c[i].hq, c[i].hkv, fj_dtype_name(c[i].t));
        fjt_case k = fjt_case_make("head-dim-v", name, &d, c[i].layout, c[i].lse);
        add(b, &k);
    }
    /* the score modifiers: a softcap, ALiBi, sinks */
    fj_attention_desc d = desc(1, 4, 2, 70, 200, 192, FJ_BF16, FJ_CAUSAL_BOTTOM_RIGHT, -1, -1);
    d.head_dim_v = 128;
    d.softcap = 30.0f;
    d.features = FJ_FEATURE_SINKS;
    fjt_case k = fjt_case_make("head-dim-v", "softcap-sinks-rows-bf16", &d, FJT_DENSE, true);
    k.lse_tol = 1e-3;
    add(b, &k);
    d = desc(1, 8, 2, 2, 900, 64, FJ_F32, FJ_CAUSAL_NONE, 50, 3);
    d.head_dim_v = 200;
    d.features = FJ_FEATURE_ALIBI | FJ_FEATURE_SINKS;
    k = fjt_case_make("head-dim-v", "alibi-sinks-decode-f32", &d, FJT_PADDED, true);
    add(b, &k);
    d = desc(2, 6, 3, 33, 33, 40, FJ_F16, FJ_CAUSAL_TOP_LEFT, -1, -1);
    d.head_dim_v = 13;
    d.features = FJ_FEATURE_ALIBI;
    k = fjt_case_make("head-dim-v", "alibi-rows-f16", &d, FJT_BHSD, false);
    add(b, &k);
    /* variable-length batches and paged caches */
    static const int q1[] = {17, 1, 300, 0, 64}, k1[] = {31, 2, 7, 13, 64};
    static const int q2[] = {1, 1, 1, 1}, k2[] = {700, 0, 33, 129};
    static const int d3[] = {3, 3, 3, 3}, k3[] = {29, 3, 64, 65};
    d = desc(1, 4, 2, 1, 1, 192, FJ_BF16, FJ_CAUSAL_BOTTOM_RIGHT, -1, -1);
    d.head_dim_v = 128;
    add_varlen_to(b, "head-dim-v", "varlen-causal-bf16", d, 5, q1, k1, NULL, 3, 2, true);
    d = desc(1, 16, 1, 1, 1, 576, FJ_F32, FJ_CAUSAL_NONE, -1, -1);
    d.head_dim_v = 512;
    d.features = FJ_FEATURE_SINKS;
    add_varlen_to(b, "head-dim-v", "varlen-decode-mla-f32", d, 4, q2, k2, NULL, 0, 0, true);
    const fjt_paged shuffled = {.page_size = 16,
                                .spare_pages = 3,
                                .spare_cols = 2,
                                .dense_q = true};
    const fjt_paged padded = {.page_size = 7, .layout = FJT_POOL_PADDED, .dense_q = true};
    const fjt_paged head_major = {.page_size = 5, .stride_pad = 2, .layout = FJT_POOL_HEAD_MAJOR};
    d = desc(1, 16, 1, 1, 1, 576, FJ_BF16, FJ_CAUSAL_BOTTOM_RIGHT, -1, -1);
    d.head_dim_v = 512;
    add_paged_to(b, "head-dim-v", "paged-decode-mla-bf16", d, 4, q2, k2, shuffled, 0, true);
    d = desc(1, 4, 2, 1, 1, 33, FJ_F16, FJ_CAUSAL_TOP_LEFT, -1, -1);
    d.head_dim_v = 65;
    add_paged_to(b, "head-dim-v", "paged-speculative-padded-f16", d, 4, d3, k3, padded, 1, true);
    d = desc(1, 6, 3, 1, 1, 128, FJ_F32, FJ_CAUSAL_BOTTOM_RIGHT, 20, -1);
    d.head_dim_v = 40;
    add_paged_to(b, "head-dim-v", "paged-prefill-head-major-f32", d, 5, q1, k1, head_major, 0,
                 true);

    fjt_rng rng;
    fjt_rng_init(&rng, seed ^ 0x6865616476ull);
    static const int seqlens[] = {1, 2, 3, 16, 17, 63, 64, 65, 129, 300};
    static const int dims[] = {1, 7, 16, 33, 64, 96, 128, 192, 256, 512, 576};
    fjt_axes ax = {seqlens, NELEMS(seqlens), dims, NELEMS(dims), all_dtypes, 3, 2e7,
                   dims,    NELEMS(dims)};
    for (int i = 0; i < 16; i++) {
        fjt_random_desc(&rng, &ax, &d);
        char name[48];
        snprintf(name, sizeof name, "random-%d", i);
        k = fjt_case_make("head-dim-v", name, &d, layout_of(&d), i % 4 != 0);
        add(b, &k);
    }
}

/* `flashjit bench --grid smoke`'s problems, in bench's order (dtype, then
 * shape): --perf prints the rows bench prints for them. */
static void bench_smoke(builder *b)
{
    static const struct {
        int hq, hkv, sq, sk;
        fj_causal causal;
        const char *name;
    } rows[] = {
        {2, 2, 64, 64, FJ_CAUSAL_NONE, "plain"},
        {2, 2, 64, 64, FJ_CAUSAL_BOTTOM_RIGHT, "causal"},
        {4, 2, 1, 128, FJ_CAUSAL_NONE, "gqa-decode"},
    };
    for (int t = 0; t < 3; t++)
        for (int r = 0; r < NELEMS(rows); r++) {
            fj_attention_desc d = desc(1, rows[r].hq, rows[r].hkv, rows[r].sq, rows[r].sk, 64,
                                       all_dtypes[t], rows[r].causal, -1, -1);
            char name[48];
            snprintf(name, sizeof name, "%s-%s", rows[r].name, fj_dtype_name(all_dtypes[t]));
            fjt_case c = fjt_case_make("bench-smoke", name, &d, FJT_DENSE, false);
            add(b, &c);
        }
}

bool fjt_cases_build(fjt_case_list *l, uint64_t seed)
{
    builder b = {l, true};
    ref_random(&b, seed);
    ref_axes(&b);
    ref_specials(&b);
    tiled_grid(&b, seed);
    empty_rows(&b);
    overlapping_inputs(&b);
    long_rows(&b);
    head_dims(&b);
    seqlens(&b);
    masks(&b);
    heads_and_layouts(&b);
    sampled(&b, seed);
    split_kv(&b);
    decode(&b);
    broadcast(&b);
    odd_shapes(&b, seed);
    large_head_dims(&b);
    softcap(&b);
    alibi_sinks(&b);
    varlen(&b, seed);
    paged(&b, seed);
    varlen_cuda(&b, seed);
    paged_cuda(&b, seed);
    head_dim_v(&b, seed);
    bench_smoke(&b);
    return b.ok;
}
