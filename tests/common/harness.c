#include "harness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <pthread.h>
#include <unistd.h>

uint64_t fjt_seed(void)
{
    static uint64_t seed;
    static bool done;
    if (done) return seed;
    const char *s = getenv("FLASHJIT_TEST_SEED");
    if (s && *s) {
        seed = strtoull(s, NULL, 0);
    } else {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        seed = (uint64_t)ts.tv_sec * 1000003u ^ (uint64_t)ts.tv_nsec;
    }
    done = true;
    printf("# seed: %llu; rerun with FLASHJIT_TEST_SEED=%llu\n", (unsigned long long)seed,
           (unsigned long long)seed);
    fflush(stdout);
    return seed;
}

void fjt_rng_init(fjt_rng *r, uint64_t seed) { r->s = seed ^ 0x9e3779b97f4a7c15ull; }

uint64_t fjt_next(fjt_rng *r) /* splitmix64 */
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

double fjt_uniform(fjt_rng *r) { return (double)(fjt_next(r) >> 11) * 0x1.0p-53; }

int fjt_range(fjt_rng *r, int lo, int hi)
{
    return lo + (int)(fjt_next(r) % (uint64_t)(hi - lo + 1));
}

/* ---- dtype access (plain code, independent of src/cpu/convert.h) -------- */

static double half_to_double_exact(uint16_t h)
{
    int sign = h >> 15, exp = (h >> 10) & 31, mant = h & 1023;
    double v;
    if (exp == 0) v = ldexp(mant, -24);
    else if (exp == 31) v = mant ? NAN : INFINITY;
    else v = ldexp(mant + 1024, exp - 25);
    return sign ? -v : v;
}

/* Every half's value, as a float (exact: a half is a float with fewer bits),
 * made once: the oracle loads halves billions of times. */
static float half_table[65536];
static pthread_once_t half_table_once = PTHREAD_ONCE_INIT;

static void half_table_init(void)
{
    for (uint32_t h = 0; h < 65536; h++) half_table[h] = (float)half_to_double_exact((uint16_t)h);
}

static double half_to_double(uint16_t h) { return half_table[h]; }

/* x rounded to nearest-even with `bits` significant bits and no quantum below
 * 2^min_exp (subnormals). */
static double round_to_format(double a, int bits, int min_exp)
{
    int e;
    frexp(a, &e); /* a = f * 2^e, f in [0.5, 1) */
    int q = e - bits;
    if (q < min_exp) q = min_exp;
    return ldexp(nearbyint(ldexp(a, -q)), q); /* default mode: nearest-even */
}

static uint16_t double_to_half(double x)
{
    if (isnan(x)) return 0x7e00;
    uint16_t sign = signbit(x) ? 0x8000 : 0;
    double r = round_to_format(fabs(x), 11, -24);
    if (r > 65504.0) return sign | 0x7c00;
    if (r < 0x1p-14) return sign | (uint16_t)ldexp(r, 24); /* subnormal or zero */
    int e;
    double f = frexp(r, &e); /* r = f * 2^e, f in [0.5, 1) */
    return sign | (uint16_t)((e - 1 + 15) << 10) | (uint16_t)(ldexp(f, 11) - 1024);
}

static double bf16_to_double(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint16_t double_to_bf16(double x)
{
    if (isnan(x)) return 0x7fc0;
    uint16_t sign = signbit(x) ? 0x8000 : 0;
    double r = round_to_format(fabs(x), 8, -133);
    if (r > 0x1.fep127) return sign | 0x7f80;
    float f = (float)r; /* exact: r has at most 8 significant bits */
    uint32_t u;
    memcpy(&u, &f, 4);
    return sign | (uint16_t)(u >> 16);
}

/* fjt_load without making the half table (the oracle's loops, which run
 * after make() made it). */
static inline double load(const void *buf, fj_dtype t, size_t i)
{
    switch (t) {
    case FJ_F32: return ((const float *)buf)[i];
    case FJ_F16: return half_to_double(((const uint16_t *)buf)[i]);
    case FJ_BF16: return bf16_to_double(((const uint16_t *)buf)[i]);
    }
    return NAN;
}

double fjt_load(const void *buf, fj_dtype t, size_t i)
{
    pthread_once(&half_table_once, half_table_init);
    return load(buf, t, i);
}

void fjt_store(void *buf, fj_dtype t, size_t i, double x)
{
    switch (t) {
    case FJ_F32: ((float *)buf)[i] = (float)x; break;
    case FJ_F16: ((uint16_t *)buf)[i] = double_to_half(x); break;
    case FJ_BF16: ((uint16_t *)buf)[i] = double_to_bf16(x); break;
    }
}

static size_t elem_size(fj_dtype t) { return t == FJ_F32 ? 4 : 2; }

int fjt_dim_v(const fj_attention_desc *d)
{
    return d->head_dim_v > 0 ? d->head_dim_v : d->head_dim;
}

void fjt_poison(void *buf, fj_dtype t, size_t n) { memset(buf, 0xff, n * elem_size(t)); }

void fjt_poison_f32(float *buf, size_t n) { memset(buf, 0xff, n * sizeof(float)); }

/* ---- problem construction and the oracle -------------------------------- */

static void resolve(int64_t out[3], const int64_t in[3], int seq, int heads, int dim)
{
    if (in[0] == 0 && in[1] == 0 && in[2] == 0) {
        out[2] = dim;
        out[1] = (int64_t)heads * dim;
        out[0] = (int64_t)seq * heads * dim;
    } else {
        memcpy(out, in, 3 * sizeof(int64_t));
    }
}

static size_t span(const int64_t s[3], int b, int seq, int heads, int dim)
{
    return (size_t)((b - 1) * s[0] + (int64_t)(seq - 1) * s[1] + (int64_t)(heads - 1) * s[2] + dim);
}

static size_t off(const int64_t s[3], int b, int i, int h)
{
    return (size_t)(b * s[0] + i * s[1] + h * s[2]);
}

/* The rule of docs/semantics.md, written out literally. */
static bool sees(const fj_attention_desc *d, int i, int j)
{
    long dd = d->causal == FJ_CAUSAL_TOP_LEFT ? i : (long)i + d->seqlen_k - d->seqlen_q;
    if (d->causal != FJ_CAUSAL_NONE && j > dd) return false;
    if (d->window_left >= 0 && j < dd - d->window_left) return false;
    if (d->window_right >= 0 && j > dd + d->window_right) return false;
    return true;
}

bool fjt_row_sees_keys(const fj_attention_desc *d, int i)
{
    for (int j = 0; j < d->seqlen_k; j++)
        if (sees(d, i, j)) return true;
    return false;
}

/* Random values in [-1, 1) rounded to the dtype: through a float, then by
 * bits to nearest-even (fjt_store's general rounding is slow, and long-key
 * problems fill hundreds of millions of elements). Halves below 2^-14 (a few
 * in 10^5) take fjt_store's exact path for subnormals. */
static void fill(void *buf, fj_dtype t, size_t n, fjt_rng *rng)
{
    for (size_t i = 0; i < n; i++) {
        float f = (float)(2.0 * fjt_uniform(rng) - 1.0);
        uint32_t u, a;
        memcpy(&u, &f, 4);
        a = u & 0x7fffffffu;
        switch (t) {
        case FJ_F32: ((float *)buf)[i] = f; break;
        case FJ_BF16:
            ((uint16_t *)buf)[i] = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
            break;
        case FJ_F16:
            if (a < 0x38800000u) { /* below 2^-14: a subnormal half */
                fjt_store(buf, t, i, f);
            } else { /* 23 -> 10 mantissa bits, nearest-even; a carry moves the exponent */
                uint32_t r = (a + 0xfffu + ((a >> 13) & 1u)) >> 13;
                ((uint16_t *)buf)[i] = (uint16_t)((u >> 16 & 0x8000u) | (r - ((127u - 15u) << 10)));
            }
            break;
        }
    }
}

/* The oracle shares out (batch, query head, part of its rows) units to
 * threads, one per online core: it is the slow part of every suite. It reads
 * the inputs in their dtype where they lie (a double copy of a long K would
 * be four times the memory traffic). Each row is computed by one thread in a
 * fixed order, so the result does not depend on the threads. */
typedef struct oracle_work {
    fjt_problem *p;
    const int *rows; /* NULL: every row */
    int n_rows;      /* rows per (batch, head) */
    int parts;       /* units per (batch, head) */
    int units;
    pthread_mutex_t lock;
    int next_unit;
} oracle_work;

/* sum_c q[c] * x[c] for a row x of the dtype; four partial sums, or the dot
 * product is latency bound. */
static double dot_row(const double *q, const void *x, fj_dtype t, size_t base, int n)
{
    double a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    int c = 0;
    for (; c + 4 <= n; c += 4) {
        a0 += q[c] * load(x, t, base + c);
        a1 += q[c + 1] * load(x, t, base + c + 1);
        a2 += q[c + 2] * load(x, t, base + c + 2);
        a3 += q[c + 3] * load(x, t, base + c + 3);
    }
    for (; c < n; c++) a0 += q[c] * load(x, t, base + c);
    return (a0 + a1) + (a2 + a3);
}

/* One query row: scores (capped, with a softcap: c tanh(s / c) in double;
 * then ALiBi's -slope |i + off - j|, off = sk - sq, 0 for top-left causal),
 * then the softmax-weighted sum of the V rows, a sink (with sinks) in the
 * max and the denominator. */
static void oracle_row(fjt_problem *p, int b, int h, int i, double *s, double *qrow)
{
    const fj_attention_desc *d = &p->d;
    /* q and k rows of D, v and o rows of Dv; the default scale is D's */
    const int D = d->head_dim, Dv = fjt_dim_v(d), hk = h / (d->heads_q / d->heads_kv);
    const fj_dtype t = d->dtype;
    double scale = d->scale != 0.0f ? (double)d->scale : 1.0 / sqrt((double)D);
    size_t qo = off(p->qs, b, i, h);
    for (int c = 0; c < D; c++) qrow[c] = load(p->q, t, qo + c);
    double m = -INFINITY;
    for (int j = 0; j < d->seqlen_k; j++) {
        if (!sees(d, i, j)) continue;
        s[j] = dot_row(qrow, p->k, t, off(p->ks, b, j, hk), D) * scale;
        if (d->softcap > 0.0f) s[j] = d->softcap * tanh(s[j] / d->softcap);
        if (p->alibi) {
            const double off = d->causal == FJ_CAUSAL_TOP_LEFT ? 0 : d->seqlen_k - d->seqlen_q;
            s[j] -= (double)p->alibi[h] * fabs((double)i + off - (double)j);
        }
        if (s[j] > m) m = s[j];
    }
    const double sink = p->sinks ? (double)p->sinks[h] : -INFINITY;
    if (p->sinks && sink > m) m = sink;
    double *o = p->ref_o + (((size_t)b * d->seqlen_q + i) * d->heads_q + h) * Dv;
    memset(o, 0, sizeof(double) * (size_t)Dv);
    double sum = p->sinks ? exp(sink - m) : 0, mag = 0; /* a row seeing no key: sum 1, lse = sink */
    for (int j = 0; j < d->seqlen_k; j++) {
        if (!sees(d, i, j)) continue;
        double e = exp(s[j] - m), vv = 0;
        sum += e;
        size_t vo = off(p->vs, b, j, hk);
        for (int c = 0; c < Dv; c++) {
            double v = load(p->v, t, vo + c);
            o[c] += e * v;
            vv += v * v;
        }
        mag += e * sqrt(vv);
    }
    if (sum > 0)
        for (int c = 0; c < Dv; c++) o[c] /= sum;
    const size_t r = ((size_t)b * d->heads_q + h) * d->seqlen_q + i;
    p->ref_lse[r] = sum > 0 ? m + log(sum) : -INFINITY;
    p->ref_mag[r] = sum > 0 ? mag / sum : 0;
}

static void *oracle_thread(void *arg)
{
    oracle_work *w = arg;
    fjt_problem *p = w->p;
    const fj_attention_desc *d = &p->d;
    double *s = malloc(sizeof(double) * ((size_t)d->seqlen_k + 1)); /* + 1: no keys (varlen) */
    double *qrow = malloc(sizeof(double) * (size_t)d->head_dim);
    /* a thread without its buffers takes no unit; the others do its share */
    while (s && qrow) {
        pthread_mutex_lock(&w->lock);
        int u = w->next_unit < w->units ? w->next_unit++ : w->units;
        pthread_mutex_unlock(&w->lock);
        if (u >= w->units) break;
        int bh = u / w->parts, part = u % w->parts;
        int b = bh / d->heads_q, h = bh % d->heads_q;
        int lo = (int)((long)w->n_rows * part / w->parts);
        int hi = (int)((long)w->n_rows * (part + 1) / w->parts);
        for (int r = lo; r < hi; r++) oracle_row(p, b, h, w->rows ? w->rows[r] : r, s, qrow);
    }
    free(s);
    free(qrow);
    return NULL;
}

/* Runs the oracle on rows[0..n_rows) of every (batch, head), or on every row
 * when rows is NULL; the rows not computed keep what ref_o and ref_lse held.
 * False when out of memory. */
static bool oracle(fjt_problem *p, const int *rows, int n_rows)
{
    const fj_attention_desc *d = &p->d;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int nt = cores < 1 ? 1 : cores > 64 ? 64 : (int)cores;
    int heads = d->batch * d->heads_q;
    oracle_work w = {.p = p, .rows = rows, .n_rows = rows ? n_rows : d->seqlen_q};
    /* a few units per thread, for balance */
    int parts = (4 * nt + heads - 1) / heads;
    w.parts = parts > w.n_rows ? w.n_rows : parts < 1 ? 1 : parts;
    w.units = heads * w.parts;
    if (nt > w.units) nt = w.units;
    pthread_mutex_init(&w.lock, NULL);
    pthread_t tid[64];
    int started = 0;
    for (int t = 1; t < nt; t++)
        if (pthread_create(&tid[started], NULL, oracle_thread, &w) == 0) started++;
    oracle_thread(&w); /* this thread works too (and alone when none started) */
    for (int t = 0; t < started; t++) pthread_join(tid[t], NULL);
    pthread_mutex_destroy(&w.lock);
    return w.next_unit >= w.units; /* a unit taken is a unit done */
}

/* The inputs, and the oracle on `rows` (NULL: every row; with_oracle false:
 * none, and no oracle buffers). */
static bool make(fjt_problem *p, const fj_attention_desc *d, fjt_rng *rng, bool with_oracle,
                 const int *rows, int n_rows)
{
    memset(p, 0, sizeof *p);
    pthread_once(&half_table_once, half_table_init);
    p->d = *d;
    const int dv = fjt_dim_v(d); /* v's and o's rows */
    resolve(p->qs, d->q_stride, d->seqlen_q, d->heads_q, d->head_dim);
    resolve(p->ks, d->k_stride, d->seqlen_k, d->heads_kv, d->head_dim);
    resolve(p->vs, d->v_stride, d->seqlen_k, d->heads_kv, dv);
    resolve(p->os, d->o_stride, d->seqlen_q, d->heads_q, dv);
    p->q_elems = span(p->qs, d->batch, d->seqlen_q, d->heads_q, d->head_dim);
    p->k_elems = span(p->ks, d->batch, d->seqlen_k, d->heads_kv, d->head_dim);
    p->v_elems = span(p->vs, d->batch, d->seqlen_k, d->heads_kv, dv);
    p->o_elems = span(p->os, d->batch, d->seqlen_q, d->heads_q, dv);
    p->lse_elems = (size_t)d->batch * d->heads_q * d->seqlen_q;
    size_t es = elem_size(d->dtype);
    size_t ref_elems = (size_t)d->batch * d->seqlen_q * d->heads_q * dv;
    p->q = malloc(p->q_elems * es);
    p->k = malloc(p->k_elems * es);
    p->v = malloc(p->v_elems * es);
    if (with_oracle) {
        p->ref_o = malloc(sizeof(double) * ref_elems);
        p->ref_lse = malloc(sizeof(double) * p->lse_elems);
        p->ref_mag = malloc(sizeof(double) * p->lse_elems);
    }
    if (!p->q || !p->k || !p->v || (with_oracle && (!p->ref_o || !p->ref_lse || !p->ref_mag))) {
        fjt_problem_free(p);
        return false;
    }
    fill(p->q, d->dtype, p->q_elems, rng);
    fill(p->k, d->dtype, p->k_elems, rng);
    fill(p->v, d->dtype, p->v_elems, rng);
    /* drawn after q, k, v: problems without features keep their data */
    if (d->features & FJ_FEATURE_ALIBI) {
        if (!(p->alibi = malloc(sizeof(float) * (size_t)d->heads_q))) goto fail;
        for (int h = 0; h < d->heads_q; h++) p->alibi[h] = (float)(0.5 * fjt_uniform(rng));
    }
    if (d->features & FJ_FEATURE_SINKS) {
        if (!(p->sinks = malloc(sizeof(float) * (size_t)d->heads_q))) goto fail;
        for (int h = 0; h < d->heads_q; h++) p->sinks[h] = (float)(5.0 * fjt_uniform(rng) - 2.0);
    }
    if (!with_oracle) return true;
    if (rows) { /* rows the oracle leaves out stay NaN: fjt_compare skips them */
        for (size_t i = 0; i < ref_elems; i++) p->ref_o[i] = NAN;
        for (size_t i = 0; i < p->lse_elems; i++) p->ref_lse[i] = p->ref_mag[i] = NAN;
    }
    if (!oracle(p, rows, n_rows)) goto fail;
    return true;
fail:
    fjt_problem_free(p);
    return false;
}

static bool oracle_varlen(fjt_problem *p);

bool fjt_problem_oracle(fjt_problem *p)
{
    if (!p->ref_o || !p->ref_lse || p->pg.page_size) return false;
    return p->vl.nseq ? oracle_varlen(p) : oracle(p, NULL, 0);
}

bool fjt_problem_make(fjt_problem *p, const fj_attention_desc *d, fjt_rng *rng)
{
    return make(p, d, rng, true, NULL, 0);
}

bool fjt_problem_make_rows(fjt_problem *p, const fj_attention_desc *d, fjt_rng *rng,
                           const int *rows, int n_rows)
{
    for (int r = 0; r < n_rows; r++)
        if (rows[r] < 0 || rows[r] >= d->seqlen_q) return false;
    return make(p, d, rng, true, rows, n_rows);
}

bool fjt_problem_make_inputs(fjt_problem *p, const fj_attention_desc *d, fjt_rng *rng)
{
    return make(p, d, rng, false, NULL, 0);
}

/* ---- variable-length batches -------------------------------------------- */

/* Elements of a packed tensor of `tokens` tokens (at least 1, so that an
   empty batch still has a buffer to pass). */
static size_t packed_span(const int64_t s[3], int tokens, int heads, int dim)
{
    if (tokens < 1) return 1;
    return (size_t)((int64_t)(tokens - 1) * s[1] + (int64_t)(heads - 1) * s[2] + dim);
}

/* Tokens [t0, t1) of a packed tensor set to NaN (every head's row). */
static void nan_tokens(void *buf, fj_dtype t, const int64_t s[3], int heads, int dim, int t0,
                       int t1)
{
    for (int i = t0; i < t1; i++)
        for (int h = 0; h < heads; h++)
            fjt_poison((char *)buf + (size_t)(i * s[1] + h * s[2]) * elem_size(t), t, (size_t)dim);
}

bool fjt_problem_make_varlen(fjt_problem *p, const fj_attention_desc *d, const fjt_varlen *vl,
                             fjt_rng *rng, bool with_oracle)
{
    memset(p, 0, sizeof *p);
    pthread_once(&half_table_once, half_table_init);
    if (!(d->features & FJ_FEATURE_VARLEN) || vl->nseq < 1 || vl->nseq > FJT_VARLEN_MAX_SEQS ||
        d->batch != vl->nseq || vl->pad_q < 0 || vl->pad_k < 0)
        return false;
    int tq = vl->pad_q, tk = vl->pad_k;
    for (int b = 0; b < vl->nseq; b++) {
        int used = fjt_varlen_keys(vl, b);
        if (vl->len_q[b] < 0 || vl->len_k[b] < 0 || used < 0 || used > vl->len_k[b] ||
            vl->len_q[b] > d->seqlen_q || used > d->seqlen_k)
            return false;
        tq += vl->len_q[b];
        tk += vl->len_k[b];
    }
    p->d = *d;
    p->vl = *vl;
    p->total_q = tq;
    p->total_k = tk;
    const int D = d->head_dim, Dv = fjt_dim_v(d), hq = d->heads_q, hkv = d->heads_kv;
    const int64_t *in[4] = {d->q_stride, d->k_stride, d->v_stride, d->o_stride};
    int64_t *out[4] = {p->qs, p->ks, p->vs, p->os};
    const int heads[4] = {hq, hkv, hkv, hq}, dims[4] = {D, D, Dv, Dv};
    for (int i = 0; i < 4; i++) {
        resolve(out[i], in[i], 1, heads[i], dims[i]);
        out[i][0] = 0; /* no batch axis */
    }
    p->q_elems = packed_span(p->qs, tq, hq, D);
    p->k_elems = packed_span(p->ks, tk, hkv, D);
    p->v_elems = packed_span(p->vs, tk, hkv, Dv);
    p->o_elems = packed_span(p->os, tq, hq, Dv);
    p->lse_elems = (size_t)hq * tq;
    const size_t es = elem_size(d->dtype), ref_elems = (size_t)tq * hq * Dv;
    p->q = malloc(p->q_elems * es);
    p->k = malloc(p->k_elems * es);
    p->v = malloc(p->v_elems * es);
    p->cu_q = malloc(sizeof(int32_t) * ((size_t)vl->nseq + 1));
    p->cu_k = malloc(sizeof(int32_t) * ((size_t)vl->nseq + 1));
    if (vl->has_used) p->used_k = malloc(sizeof(int32_t) * (size_t)vl->nseq);
    if (with_oracle) {
        p->ref_o = malloc(sizeof(double) * (ref_elems + 1));
        p->ref_lse = malloc(sizeof(double) * (p->lse_elems + 1));
        p->ref_mag = malloc(sizeof(double) * (p->lse_elems + 1));
    }
    if (!p->q || !p->k || !p->v || !p->cu_q || !p->cu_k || (vl->has_used && !p->used_k) ||
        (with_oracle && (!p->ref_o || !p->ref_lse || !p->ref_mag)))
        goto fail;
    p->cu_q[0] = p->cu_k[0] = 0;
    for (int b = 0; b < vl->nseq; b++) {
        p->cu_q[b + 1] = p->cu_q[b] + vl->len_q[b];
        p->cu_k[b + 1] = p->cu_k[b] + vl->len_k[b];
        if (p->used_k) p->used_k[b] = vl->used_k[b];
    }
    fill(p->q, d->dtype, p->q_elems, rng);
    fill(p->k, d->dtype, p->k_elems, rng);
    fill(p->v, d->dtype, p->v_elems, rng);
    /* what no sequence may read: keys held but not used, and the pads */
    for (int b = 0; b < vl->nseq; b++) {
        const int k0 = p->cu_k[b] + fjt_varlen_keys(vl, b), k1 = p->cu_k[b + 1];
        nan_tokens(p->k, d->dtype, p->ks, hkv, D, k0, k1);
        nan_tokens(p->v, d->dtype, p->vs, hkv, Dv, k0, k1);
    }
    nan_tokens(p->q, d->dtype, p->qs, hq, D, p->cu_q[vl->nseq], tq);
    nan_tokens(p->k, d->dtype, p->ks, hkv, D, p->cu_k[vl->nseq], tk);
    nan_tokens(p->v, d->dtype, p->vs, hkv, Dv, p->cu_k[vl->nseq], tk);
    if (d->features & FJ_FEATURE_ALIBI) {
        if (!(p->alibi = malloc(sizeof(float) * (size_t)hq))) goto fail;
        for (int h = 0; h < hq; h++) p->alibi[h] = (float)(0.5 * fjt_uniform(rng));
    }
    if (d->features & FJ_FEATURE_SINKS) {
        if (!(p->sinks = malloc(sizeof(float) * (size_t)hq))) goto fail;
        for (int h = 0; h < hq; h++) p->sinks[h] = (float)(5.0 * fjt_uniform(rng) - 2.0);
    }
    if (with_oracle && !fjt_problem_oracle(p)) goto fail;
    return true;
fail:
    fjt_problem_free(p);
    return false;
}

/* The oracle of a varlen problem: each sequence as the dense problem of its
   own lengths (batch 1, its queries and used keys, the packed strides), its
   tensors' first rows those of its first tokens, its lse put in place. */
static bool oracle_varlen(fjt_problem *p)
{
    const fj_attention_desc *d = &p->d;
    const int hq = d->heads_q, Dv = fjt_dim_v(d);
    const size_t es = elem_size(d->dtype);
    for (size_t i = 0; i < (size_t)p->total_q * hq * Dv; i++) p->ref_o[i] = NAN;
    for (size_t i = 0; i < p->lse_elems; i++) p->ref_lse[i] = p->ref_mag[i] = NAN;
    double *lse = malloc(sizeof(double) * ((size_t)hq * d->seqlen_q + 1));
    double *mag = malloc(sizeof(double) * ((size_t)hq * d->seqlen_q + 1));
    bool ok = lse && mag;
    for (int b = 0; ok && b < p->vl.nseq; b++) {
        const int sq = p->vl.len_q[b], sk = fjt_varlen_keys(&p->vl, b);
        if (sq == 0) continue;
        fjt_problem one;
        memset(&one, 0, sizeof one);
        one.d = *d;
        one.d.features &= ~(uint32_t)FJ_FEATURE_VARLEN;
        one.d.batch = 1;
        one.d.seqlen_q = sq;
        one.d.seqlen_k = sk;
        memcpy(one.qs, p->qs, sizeof one.qs);
        memcpy(one.ks, p->ks, sizeof one.ks);
        memcpy(one.vs, p->vs, sizeof one.vs);
        memcpy(one.os, p->os, sizeof one.os);
        one.q = (char *)p->q + (size_t)(p->cu_q[b] * p->qs[1]) * es;
        one.k = (char *)p->k + (size_t)(p->cu_k[b] * p->ks[1]) * es;
        one.v = (char *)p->v + (size_t)(p->cu_k[b] * p->vs[1]) * es;
        one.ref_o = p->ref_o + (size_t)p->cu_q[b] * hq * Dv;
        one.ref_lse = lse;
        one.ref_mag = mag;
        one.alibi = p->alibi;
        one.sinks = p->sinks;
        if (!(ok = oracle(&one, NULL, 0))) break;
        for (int h = 0; h < hq; h++)
            for (int i = 0; i < sq; i++) {
                const size_t at = (size_t)h * p->total_q + p->cu_q[b] + i;
                p->ref_lse[at] = lse[(size_t)h * sq + i];
                p->ref_mag[at] = mag[(size_t)h * sq + i];
            }
    }
    free(lse);
    free(mag);
    return ok;
}

void fjt_varlen_str(const fjt_varlen *v, char *buf, size_t n)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int b = 0; b < v->nseq && len < n; b++) {
        len +=
            (size_t)snprintf(buf + len, n - len, "%s%d/%d", b ? "," : "", v->len_q[b], v->len_k[b]);
        if (v->has_used && len < n)
            len += (size_t)snprintf(buf + len, n - len, "(%d)", v->used_k[b]);
    }
    if ((v->pad_q || v->pad_k) && len < n)
        snprintf(buf + len, n - len, "+pad%d/%d", v->pad_q, v->pad_k);
}

void fjt_varlen_free(fj_context *ctx, void *mem[FJT_EXTRAS_MEM])
{
    for (int i = 0; i < FJT_EXTRAS_MEM; i++) {
        fj_free(ctx, mem[i]);
        mem[i] = NULL;
    }
}

/* A copy of n int32 values in ctx's memory, into *mem. */
static fj_status device_ints(fj_context *ctx, const int32_t *host, size_t n, void **mem)
{
    fj_status s = fj_malloc(ctx, sizeof(int32_t) * n, mem);
    return s ? s : fj_copy_to_device(ctx, *mem, host, sizeof(int32_t) * n);
}

fj_status fjt_varlen_extras(fj_context *ctx, const fjt_problem *p, fj_execute_extras *x,
                            void *mem[FJT_EXTRAS_MEM])
{
    for (int i = 0; i < FJT_EXTRAS_MEM; i++) mem[i] = NULL;
    const bool paged = p->pg.page_size > 0;
    if (!p->vl.nseq && !paged) return FJ_OK;
    const size_t n = (size_t)p->d.batch;
    fj_status s;
    if ((p->vl.nseq && (s = device_ints(ctx, p->cu_q, n + 1, &mem[0]))) ||
        (p->vl.nseq && !paged && (s = device_ints(ctx, p->cu_k, n + 1, &mem[1]))) ||
        (p->used_k && (s = device_ints(ctx, p->used_k, n, &mem[2]))) ||
        (paged && (s = device_ints(ctx, p->block_table, n * (size_t)p->bt_stride, &mem[3])))) {
        fjt_varlen_free(ctx, mem);
        return s;
    }
    x->cu_seqlens_q = mem[0];
    x->cu_seqlens_k = mem[1];
    x->seqused_k = mem[2];
    x->block_table = mem[3];
    x->total_q = p->vl.nseq ? p->total_q : 0;
    x->total_k = p->vl.nseq && !paged ? p->total_k : 0;
    return FJ_OK;
}

/* ---- paged KV caches ------------------------------------------------------ */

/* The pool's strides (page, row, head) for pg's layout. */
static void pool_strides(const fjt_paged *pg, int hkv, int D, int64_t s[3])
{
    const int P = pg->page_size;
    switch (pg->layout) {
    case FJT_POOL_DENSE:
        s[2] = D;
        s[1] = (int64_t)hkv * D;
        s[0] = (int64_t)P * s[1];
        break;
    case FJT_POOL_PADDED:
        s[2] = D + 3;
        s[1] = (int64_t)hkv * (D + 3) + 5;
        s[0] = (int64_t)P * s[1] + 7;
        break;
    case FJT_POOL_HEAD_MAJOR:
    default:
        s[1] = D;
        s[2] = (int64_t)P * D;
        s[0] = (int64_t)hkv * P * D;
        break;
    }
}

bool fjt_paged_desc(fj_attention_desc *d, const fjt_varlen *vl, const fjt_paged *pg)
{
    if (vl->nseq < 1 || vl->nseq > FJT_VARLEN_MAX_SEQS || pg->page_size < 1) return false;
    int max_pages = 1, used_pages = 0;
    for (int b = 0; b < vl->nseq; b++) {
        const int need = (fjt_varlen_keys(vl, b) + pg->page_size - 1) / pg->page_size;
        used_pages += need;
        if (need > max_pages) max_pages = need;
    }
    d->page_size = pg->page_size;
    d->num_pages = used_pages + pg->spare_pages > 0 ? used_pages + pg->spare_pages : 1;
    d->max_pages = max_pages + pg->spare_cols;
    d->block_table_stride = pg->stride_pad ? d->max_pages + pg->stride_pad : 0;
    for (int t = 0; t < 2; t++) { /* k's rows head_dim long, v's head_dim_v */
        int64_t s[3], *st = t ? d->v_stride : d->k_stride;
        pool_strides(pg, d->heads_kv, t ? fjt_dim_v(d) : d->head_dim, s);
        if (pg->layout == FJT_POOL_DENSE) memset(st, 0, 3 * sizeof(int64_t));
        else memcpy(st, s, sizeof s);
    }
    return true;
}

bool fjt_problem_make_paged(fjt_problem *p, const fj_attention_desc *d, const fjt_varlen *vl,
                            const fjt_paged *pg, fjt_rng *rng, bool with_oracle)
{
    memset(p, 0, sizeof *p);
    if (!(d->features & FJ_FEATURE_PAGED_KV) || pg->page_size < 1 || pg->spare_pages < 0 ||
        pg->spare_cols < 0 || pg->stride_pad < 0 || vl->nseq != d->batch ||
        !(d->features & FJ_FEATURE_VARLEN) != pg->dense_q)
        return false;
    const int n = vl->nseq, P = pg->page_size, hkv = d->heads_kv;
    /* the varlen problem of the same sequences, its keys packed and used
       whole: the oracle's inputs, and the keys to page */
    fjt_varlen v = *vl;
    v.has_used = true;
    v.pad_k = 0;
    for (int b = 0; b < n; b++) v.len_k[b] = v.used_k[b] = fjt_varlen_keys(vl, b);
    fj_attention_desc vd = *d;
    vd.features = (d->features & ~(uint32_t)FJ_FEATURE_PAGED_KV) | FJ_FEATURE_VARLEN;
    vd.page_size = vd.num_pages = vd.max_pages = vd.block_table_stride = 0;
    memset(vd.k_stride, 0, sizeof vd.k_stride);
    memset(vd.v_stride, 0, sizeof vd.v_stride);
    if (pg->dense_q) {
        if (vl->pad_q) return false;
        for (int b = 0; b < n; b++)
            if (vl->len_q[b] != d->seqlen_q) return false;
        const int64_t *qo[2] = {d->q_stride, d->o_stride};
        int64_t *vqo[2] = {vd.q_stride, vd.o_stride};
        for (int t = 0; t < 2; t++) {
            if (qo[t][0] || qo[t][1] || qo[t][2]) {
                if (qo[t][0] != (int64_t)d->seqlen_q * qo[t][1]) return false;
                vqo[t][0] = 0;
            }
        }
    }
    if (!fjt_problem_make_varlen(p, &vd, &v, rng, with_oracle)) return false;

    /* the pages: ceil(len / P) a sequence, spare ones among them */
    fj_attention_desc pd = *d;
    if (!fjt_paged_desc(&pd, &v, pg)) goto fail;
    int need[FJT_VARLEN_MAX_SEQS];
    for (int b = 0; b < n; b++) need[b] = (v.len_k[b] + P - 1) / P;
    const int num_pages = pd.num_pages;
    p->bt_stride = pd.max_pages + pg->stride_pad;
    int *order = malloc(sizeof(int) * (size_t)num_pages);
    p->block_table = malloc(sizeof(int32_t) * (size_t)n * (size_t)p->bt_stride);
    if (!order || !p->block_table) {
        free(order);
        goto fail;
    }
    for (int i = 0; i < num_pages; i++) order[i] = i;
    if (pg->in_order) { /* the spare pages first, then each sequence's run */
        for (int i = 0; i < num_pages; i++) order[i] = (i + pg->spare_pages) % num_pages;
    } else {
        for (int i = num_pages - 1; i > 0; i--) {
            int j = fjt_range(rng, 0, i), t = order[i];
            order[i] = order[j];
            order[j] = t;
        }
    }
    /* unused tail entries: outside the pool, so that a read of one shows */
    const int32_t junk[4] = {-1, INT32_MIN, INT32_MAX, num_pages};
    for (int b = 0, next = 0; b < n; b++)
        for (int c = 0; c < p->bt_stride; c++)
            p->block_table[(size_t)b * p->bt_stride + c] =
                c < need[b] ? order[next++] : junk[(b + c) % 4];
    free(order);

    /* the pools, NaN but for the sequences' keys (k's rows head_dim long,
       v's head_dim_v) */
    const size_t es = elem_size(d->dtype);
    const int dims[2] = {d->head_dim, fjt_dim_v(d)};
    int64_t s[2][3];
    size_t elems[2];
    void *pool[2];
    for (int t = 0; t < 2; t++) {
        pool_strides(pg, hkv, dims[t], s[t]);
        elems[t] = span(s[t], num_pages, P, hkv, dims[t]);
        pool[t] = malloc(elems[t] * es);
    }
    if (!pool[0] || !pool[1]) {
        free(pool[0]);
        free(pool[1]);
        goto fail;
    }
    const void *packed[2] = {p->k, p->v};
    const int64_t *ps[2] = {p->ks, p->vs};
    for (int t = 0; t < 2; t++) {
        fjt_poison(pool[t], d->dtype, elems[t]);
        for (int b = 0; b < n; b++)
            for (int j = 0; j < v.len_k[b]; j++) {
                const int32_t page = p->block_table[(size_t)b * p->bt_stride + j / P];
                for (int h = 0; h < hkv; h++)
                    memcpy((char *)pool[t] + off(s[t], page, j % P, h) * es,
                           (const char *)packed[t] + off(ps[t], 0, p->cu_k[b] + j, h) * es,
                           (size_t)dims[t] * es);
            }
        free(t ? p->v : p->k);
    }
    p->k = pool[0];
    p->v = pool[1];
    p->k_elems = elems[0];
    p->v_elems = elems[1];
    memcpy(p->ks, s[0], sizeof s[0]);
    memcpy(p->vs, s[1], sizeof s[1]);
    p->total_k = 0;
    p->pg = *pg;
    p->d = pd;
    if (pg->dense_q) { /* the packed batch read as the dense problem it is */
        const int sq = d->seqlen_q, hq = d->heads_q;
        p->qs[0] = (int64_t)sq * p->qs[1];
        p->os[0] = (int64_t)sq * p->os[1];
        p->vl.nseq = 0;
        p->total_q = 0;
        double *re[2] = {p->ref_lse, p->ref_mag};
        for (int r = 0; with_oracle && r < 2; r++) { /* [hq, total_q] -> [batch, hq, sq] */
            double *t = malloc(sizeof(double) * p->lse_elems);
            if (!t) goto fail;
            for (int b = 0; b < n; b++)
                for (int h = 0; h < hq; h++)
                    for (int i = 0; i < sq; i++)
                        t[((size_t)b * hq + h) * sq + i] = re[r][(size_t)h * n * sq + b * sq + i];
            memcpy(re[r], t, sizeof(double) * p->lse_elems);
            free(t);
        }
    }
    return true;
fail:
    fjt_problem_free(p);
    return false;
}

void fjt_paged_str(const fjt_paged *pg, const fj_attention_desc *d, char *buf, size_t n)
{
    static const char *const layouts[] = {"dense", "padded", "head-major"};
    if (!pg->page_size) {
        snprintf(buf, n, "%s", "");
        return;
    }
    snprintf(buf, n, "page_size=%d pages=%d max_pages=%d bt_stride=%d %s pool=%s q=%s",
             pg->page_size, d->num_pages, d->max_pages,
             d->block_table_stride ? d->block_table_stride : d->max_pages,
             pg->in_order ? "in-order" : "shuffled", layouts[pg->layout % 3],
             pg->dense_q ? "dense" : "varlen");
}

void fjt_problem_free(fjt_problem *p)
{
    free(p->q);
    free(p->k);
    free(p->v);
    free(p->ref_o);
    free(p->ref_lse);
    free(p->ref_mag);
    free(p->alibi);
    free(p->sinks);
    free(p->cu_q);
    free(p->cu_k);
    free(p->used_k);
    free(p->block_table);
    memset(p, 0, sizeof *p);
}

double fjt_tolerance(fj_dtype t) { return t == FJ_F32 ? 1e-5 : t == FJ_F16 ? 2e-3 : 1.6e-2; }

fjt_error fjt_compare(const fjt_problem *p, const void *o, const float *lse)
{
    const fj_attention_desc *d = &p->d;
    fjt_error e = {0};
    double num = 0, den = 0;
    size_t es = elem_size(d->dtype);
    unsigned char *row_elem = calloc(p->o_elems, 1);
    /* A varlen batch is checked as one sequence of total_q tokens (o, ref_o
       and lse are laid out so), of which those of the sequences are rows. */
    const int nb = p->vl.nseq ? 1 : d->batch, sq = p->vl.nseq ? p->total_q : d->seqlen_q;
    const int rows = p->vl.nseq ? p->cu_q[p->vl.nseq] : d->seqlen_q, Dv = fjt_dim_v(d);
    for (int b = 0; b < nb; b++)
        for (int i = 0; i < rows; i++)
            for (int h = 0; h < d->heads_q; h++) {
                size_t oo = off(p->os, b, i, h);
                const double *r = p->ref_o + (((size_t)b * sq + i) * d->heads_q + h) * Dv;
                const size_t ri = ((size_t)b * d->heads_q + h) * sq + i;
                double ref_lse = p->ref_lse[ri];
                bool computed = !isnan(ref_lse), empty = isinf(ref_lse) && ref_lse < 0;
                if (p->sinks && ref_lse == (double)p->sinks[h]) { /* the oracle's empty row: */
                    empty = true;                                 /* lse = the sink, O exactly 0 */
                    for (int c = 0; c < Dv && empty; c++) empty = r[c] == 0.0;
                    /* unless the row sees keys whose weights vanish in
                       double next to the sink (the mask says; a varlen
                       row's lengths are its sequence's: the oracle's zeros
                       decide there) */
                    if (empty && !p->vl.nseq && fjt_row_sees_keys(d, i)) empty = false;
                }
                double row_num = 0, row_den = 0;
                bool row_nonzero = false;
                for (int c = 0; c < Dv; c++) {
                    if (row_elem) row_elem[oo + c] = 1;
                    double x = fjt_load(o, d->dtype, oo + c);
                    if (!isfinite(x)) {
                        e.nan_count++;
                        continue;
                    }
                    if (x != 0.0) row_nonzero = true;
                    if (!computed) continue;
                    double diff = x - r[c];
                    row_num += diff * diff;
                    row_den += r[c] * r[c];
                    if (fabs(diff) > e.max_abs) e.max_abs = fabs(diff);
                }
                num += row_num;
                den += row_den;
                if (empty && row_nonzero) e.empty_not_zero++;
                if (computed && !empty) {
                    double rr = row_den > 0 ? sqrt(row_num / row_den) : sqrt(row_num);
                    if (rr > e.row_rel_max) e.row_rel_max = rr;
                    double mag = p->ref_mag[ri];
                    double mr = mag > 0 ? sqrt(row_num) / mag : sqrt(row_num);
                    if (mr > e.mag_rel_max) e.mag_rel_max = mr;
                }
            }
    if (row_elem) {
        static const unsigned char poison[4] = {0xff, 0xff, 0xff, 0xff};
        for (size_t k = 0; k < p->o_elems; k++)
            if (!row_elem[k] && memcmp((const char *)o + k * es, poison, es)) e.gaps_written++;
        free(row_elem);
    }
    e.rel_fro = den > 0 ? sqrt(num / den) : sqrt(num);
    if (e.nan_count) e.rel_fro = e.row_rel_max = e.mag_rel_max = INFINITY;
    if (lse) {
        for (size_t k = 0; k < p->lse_elems; k++) {
            double r = p->ref_lse[k], x = lse[k];
            if (p->vl.nseq && (int)(k % (size_t)p->total_q) >= rows) {
                /* a token past the last sequence: untouched */
                static const unsigned char poison[4] = {0xff, 0xff, 0xff, 0xff};
                if (memcmp(&lse[k], poison, sizeof poison)) e.gaps_written++;
            } else if (isnan(r)) { /* a row the oracle left out: finite or -inf, never NaN */
                if (isnan(x) || (isinf(x) && x > 0)) e.lse_mismatch++;
            } else if (isinf(r) && r < 0) {
                if (!(isinf(x) && x < 0)) e.lse_mismatch++;
            } else if (!isfinite(x)) {
                e.lse_mismatch++;
            } else if (fabs(x - r) > e.lse_max_abs) {
                e.lse_max_abs = fabs(x - r);
            }
        }
    }
    return e;
}

fj_status fjt_run(fj_context *ctx, const fjt_problem *p, fjt_error *err, bool with_lse)
{
    const fj_attention_desc *d = &p->d;
    size_t es = elem_size(d->dtype);
    void *dq = NULL, *dk = NULL, *dv = NULL, *dO = NULL, *dl = NULL, *da = NULL, *ds = NULL;
    void *vmem[FJT_EXTRAS_MEM] = {NULL};
    const size_t hb = sizeof(float) * (size_t)d->heads_q;
    void *ho = malloc(p->o_elems * es);
    float *hl = with_lse ? malloc(p->lse_elems * sizeof(float)) : NULL;
    fj_status s = FJ_ERR_OUT_OF_MEMORY;
    if (!ho || (with_lse && !hl)) goto out;
    if ((s = fj_malloc(ctx, p->q_elems * es, &dq)) || (s = fj_malloc(ctx, p->k_elems * es, &dk)) ||
        (s = fj_malloc(ctx, p->v_elems * es, &dv)) || (s = fj_malloc(ctx, p->o_elems * es, &dO)) ||
        (with_lse && (s = fj_malloc(ctx, p->lse_elems * sizeof(float), &dl))) ||
        (p->alibi && (s = fj_malloc(ctx, hb, &da))) || (p->sinks && (s = fj_malloc(ctx, hb, &ds))))
        goto out;
    fjt_poison(ho, d->dtype, p->o_elems);
    if (hl) fjt_poison_f32(hl, p->lse_elems);
    if ((s = fj_copy_to_device(ctx, dq, p->q, p->q_elems * es)) ||
        (s = fj_copy_to_device(ctx, dk, p->k, p->k_elems * es)) ||
        (s = fj_copy_to_device(ctx, dv, p->v, p->v_elems * es)) ||
        (s = fj_copy_to_device(ctx, dO, ho, p->o_elems * es)) ||
        (hl && (s = fj_copy_to_device(ctx, dl, hl, p->lse_elems * sizeof(float)))) ||
        (da && (s = fj_copy_to_device(ctx, da, p->alibi, hb))) ||
        (ds && (s = fj_copy_to_device(ctx, ds, p->sinks, hb))))
        goto out;
    fj_execute_extras x;
    fj_execute_extras_init(&x);
    x.alibi_slopes = da;
    x.sinks = ds;
    if ((s = fjt_varlen_extras(ctx, p, &x, vmem))) goto out;
    if ((s = fj_attention_ex(ctx, d, dq, dk, dv, dO, dl, &x, NULL))) goto out;
    if ((s = fj_synchronize(ctx, NULL))) goto out;
    if ((s = fj_copy_to_host(ctx, ho, dO, p->o_elems * es)) ||
        (hl && (s = fj_copy_to_host(ctx, hl, dl, p->lse_elems * sizeof(float)))))
        goto out;
    *err = fjt_compare(p, ho, hl);
out:
    fj_free(ctx, dq);
    fj_free(ctx, dk);
    fj_free(ctx, dv);
    fj_free(ctx, dO);
    fj_free(ctx, dl);
    fj_free(ctx, da);
    fj_free(ctx, ds);
    fjt_varlen_free(ctx, vmem);
    free(ho);
    free(hl);
    return s;
}

fj_status fjt_run_plan(fj_context *ctx, const fj_plan *plan, const fjt_problem *p, bool with_lse,
                       fjt_error *err)
{
    const fj_attention_desc *d = &p->d;
    const size_t es = (size_t)(d->dtype == FJ_F32 ? 4 : 2), hb = sizeof(float) * (size_t)d->heads_q;
    const size_t lse_bytes = sizeof(float) * (p->lse_elems ? p->lse_elems : 1);
    void *dq = NULL, *dk = NULL, *dv = NULL, *dO = NULL, *dl = NULL, *da = NULL, *ds = NULL;
    void *vmem[FJT_EXTRAS_MEM] = {NULL};
    void *ho = malloc(p->o_elems * es);
    float *hl = malloc(lse_bytes);
    fj_status s = FJ_ERR_OUT_OF_MEMORY;
    fj_execute_extras x;
    fj_execute_extras_init(&x);
    if (!ho || !hl) goto out;
    fjt_poison(ho, d->dtype, p->o_elems);
    fjt_poison_f32(hl, lse_bytes / sizeof(float));
    if ((s = fj_malloc(ctx, p->q_elems * es, &dq)) || (s = fj_malloc(ctx, p->k_elems * es, &dk)) ||
        (s = fj_malloc(ctx, p->v_elems * es, &dv)) || (s = fj_malloc(ctx, p->o_elems * es, &dO)) ||
        (s = fj_malloc(ctx, lse_bytes, &dl)) ||
        (p->alibi &&
         ((s = fj_malloc(ctx, hb, &da)) || (s = fj_copy_to_device(ctx, da, p->alibi, hb)))) ||
        (p->sinks &&
         ((s = fj_malloc(ctx, hb, &ds)) || (s = fj_copy_to_device(ctx, ds, p->sinks, hb)))) ||
        (s = fj_copy_to_device(ctx, dq, p->q, p->q_elems * es)) ||
        (s = fj_copy_to_device(ctx, dk, p->k, p->k_elems * es)) ||
        (s = fj_copy_to_device(ctx, dv, p->v, p->v_elems * es)) ||
        (s = fj_copy_to_device(ctx, dO, ho, p->o_elems * es)) ||
        (s = fj_copy_to_device(ctx, dl, hl, lse_bytes)) ||
        (s = fjt_varlen_extras(ctx, p, &x, vmem)))
        goto out;
    x.alibi_slopes = da;
    x.sinks = ds;
    if ((s = fj_plan_execute_ex(plan, dq, dk, dv, dO, with_lse ? dl : NULL, &x, NULL))) goto out;
    if ((s = fj_copy_to_host(ctx, ho, dO, p->o_elems * es)) ||
        (s = fj_copy_to_host(ctx, hl, dl, lse_bytes)))
        goto out;
    *err = fjt_compare(p, ho, with_lse ? hl : NULL);
    /* without lse the buffer passed none: it must be untouched */
    for (size_t i = 0; !with_lse && i < lse_bytes / sizeof(float); i++) {
        uint32_t u;
        memcpy(&u, &hl[i], 4);
        if (u != 0xffffffffu) err->gaps_written++;
    }
out:
    fj_free(ctx, dq);
    fj_free(ctx, dk);
    fj_free(ctx, dv);
    fj_free(ctx, dO);
    fj_free(ctx, dl);
    fj_free(ctx, da);
    fj_free(ctx, ds);
    fjt_varlen_free(ctx, vmem);
    free(ho);
    free(hl);
    return s;
}

const char *fjt_desc_str(const fj_attention_desc *d)
{
    static _Thread_local char buf[384];
    snprintf(buf, sizeof buf,
             "b%d hq%d hkv%d sq%d sk%d d%d dv%d %s causal=%s window=%d,%d scale=%g softcap=%g "
             "features=0x%x strides "
             "q[%lld %lld %lld] o[%lld %lld %lld]",
             d->batch, d->heads_q, d->heads_kv, d->seqlen_q, d->seqlen_k, d->head_dim,
             d->head_dim_v, fj_dtype_name(d->dtype), fj_causal_name(d->causal), d->window_left,
             d->window_right, (double)d->scale, (double)d->softcap, (unsigned)d->features,
             (long long)d->q_stride[0], (long long)d->q_stride[1], (long long)d->q_stride[2],
             (long long)d->o_stride[0], (long long)d->o_stride[1], (long long)d->o_stride[2]);
    return buf;
}

static int pick(fjt_rng *r, const int *v, int n) { return v[fjt_range(r, 0, n - 1)]; }

void fjt_random_desc(fjt_rng *rng, const fjt_axes *ax, fj_attention_desc *d)
{
    int sq = pick(rng, ax->seqlens, ax->n_seqlens);
    int sk = pick(rng, ax->seqlens, ax->n_seqlens);
    int dim = pick(rng, ax->head_dims, ax->n_head_dims);
    fj_dtype t = ax->dtypes[fjt_range(rng, 0, ax->n_dtypes - 1)];
    static const int hkv_menu[][2] = {{1, 1}, {2, 2}, {8, 1}, {4, 1}, {16, 2}, {3, 3}};
    int g = fjt_range(rng, 0, 5);
    int hq = hkv_menu[g][0], hkv = hkv_menu[g][1];
    int batch = fjt_range(rng, 1, 2);
    /* keep the oracle's work bounded: shrink batch, then heads */
    while (batch > 1 && (double)batch * hq * sq * sk * dim > ax->max_work) batch--;
    while (hq > 1 && (double)batch * hq * sq * sk * dim > ax->max_work) {
        if (hq > hkv) hq = hkv; /* drop to MHA */
        else hq = hkv = 1;
    }
    fj_attention_desc_init(d, batch, hq, hkv, sq, sk, dim, t);
    d->causal = (fj_causal)fjt_range(rng, 0, 2);
    switch (fjt_range(rng, 0, 4)) {
    case 0:
    case 1: break; /* unbounded */
    case 2: d->window_left = fjt_range(rng, 0, 40); break;
    case 3: d->window_right = fjt_range(rng, 0, 40); break;
    case 4:
        d->window_left = fjt_range(rng, 0, 40);
        d->window_right = fjt_range(rng, 0, 40);
        break;
    }
    if (fjt_range(rng, 0, 3) == 0) {
        d->scale = (float)(0.05 + 0.5 * fjt_uniform(rng));
        /* a negative scale is legal (the softmax of -|scale| q.k); the CUDA
           kernels take it by negating Q */
        if (fjt_range(rng, 0, 1)) d->scale = -d->scale;
    }
    const int layout = fjt_range(rng, 0, 2);
    /* V's head dim: drawn last (suites without the axis draw as before) */
    int dv = dim;
    if (ax->n_head_dims_v > 0) {
        dv = pick(rng, ax->head_dims_v, ax->n_head_dims_v);
        d->head_dim_v = dv == dim && fjt_range(rng, 0, 1) ? 0 : dv; /* 0 and dim alike */
    }
    int64_t *s[4] = {d->q_stride, d->k_stride, d->v_stride, d->o_stride};
    const int seqs[4] = {sq, sk, sk, sq}, heads[4] = {hq, hkv, hkv, hq},
              dims[4] = {dim, dim, dv, dv};
    switch (layout) {
    case 0: break; /* dense */
    case 1:        /* BHSD: [batch, heads, seq, dim] */
        for (int i = 0; i < 4; i++) {
            s[i][2] = (int64_t)seqs[i] * dims[i];
            s[i][1] = dims[i];
            s[i][0] = (int64_t)heads[i] * seqs[i] * dims[i];
        }
        break;
    case 2: /* BSHD with padding after each row and each seq step */
        for (int i = 0; i < 4; i++) {
            s[i][2] = dims[i] + 8;
            s[i][1] = (int64_t)heads[i] * (dims[i] + 8) + 16;
            s[i][0] = (int64_t)seqs[i] * s[i][1] + 8;
        }
        break;
    }
}
