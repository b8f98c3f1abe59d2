/* Timing candidates. Each run is timed on its own by fj_plan_time (device
 * events around the launch on CUDA, the monotonic clock around a
 * synchronous execute on the CPU), and runs cycle through several input
 * sets: a problem smaller than the GPU's L2 timed again and again on one
 * set would find its inputs cached, and a kernel's speed would be measured
 * from a cache a real workload does not leave warm. */
#include <stdlib.h>
#include <string.h>

#include "half.h"
#include "problem.h"
#include "status.h"
#include "tune/measure.h"
#include "tune/timing.h"

/* H100 and H200 have 50 MB of L2; the sets together span twice that. */
#define L2_BYTES ((size_t)50 * 1000 * 1000)
#define ROTATE_BYTES (2 * L2_BYTES)
/* Host staging for the random fill, uploaded piece by piece. */
#define FILL_CHUNK ((size_t)4 << 20)
/* Runs made of a candidate whose first run already loses by far. */
#define CUT_RUNS 3

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void fj_tune_fill_random(void *buf, fj_dtype t, size_t n, uint64_t *state)
{
    for (size_t i = 0; i < n; i++) {
        float x = (float)((double)(splitmix(state) >> 11) * 0x1.0p-52 - 1.0);
        if (t == FJ_F32) ((float *)buf)[i] = x;
        else if (t == FJ_F16) ((uint16_t *)buf)[i] = fj_f32_to_f16(x);
        else ((uint16_t *)buf)[i] = fj_f32_to_bf16(x);
    }
}

double fj_tune_load(const void *buf, fj_dtype t, size_t i)
{
    if (t == FJ_F32) return ((const float *)buf)[i];
    if (t == FJ_F16) return fj_f16_to_f32(((const uint16_t *)buf)[i]);
    return fj_bf16_to_f32(((const uint16_t *)buf)[i]);
}

static fj_status fill_device(fj_context *ctx, void *dst, size_t bytes, fj_dtype t, void *stage,
                             uint64_t *state)
{
    size_t es = (size_t)fj_dtype_size(t);
    for (size_t off = 0; off < bytes; off += FILL_CHUNK) {
        size_t n = bytes - off < FILL_CHUNK ? bytes - off : FILL_CHUNK;
        fj_tune_fill_random(stage, t, n / es, state);
        fj_status s = fj_copy_to_device(ctx, (char *)dst + off, stage, n);
        if (s) return s;
    }
    return FJ_OK;
}

void fj_tune_inputs_free(fj_tune_inputs *in)
{
    for (int i = 0; i < in->sets; i++) {
        fj_free(in->ctx, in->q[i]);
        fj_free(in->ctx, in->k[i]);
        fj_free(in->ctx, in->v[i]);
        fj_free(in->ctx, in->o[i]);
    }
    memset(in, 0, sizeof *in);
}

static int sets_for(size_t set_bytes, size_t max_bytes)
{
    size_t want = (ROTATE_BYTES + set_bytes - 1) / set_bytes;
    if (want < 2) want = 2;
    if (want > FJ_TUNE_MAX_SETS) want = FJ_TUNE_MAX_SETS;
    while (want > 1 && want * set_bytes > max_bytes) want--;
    return (int)want;
}

static fj_status allocate_set(fj_tune_inputs *in, int i, void *stage, uint64_t *state)
{
    fj_context *ctx = in->ctx;
    fj_status s;
    if ((s = fj_malloc(ctx, in->q_bytes, &in->q[i])) ||
        (s = fj_malloc(ctx, in->k_bytes, &in->k[i])) ||
        (s = fj_malloc(ctx, in->v_bytes, &in->v[i])) ||
        (s = fj_malloc(ctx, in->o_bytes, &in->o[i])))
        return s;
    if ((s = fill_device(ctx, in->q[i], in->q_bytes, in->dtype, stage, state)) ||
        (s = fill_device(ctx, in->k[i], in->k_bytes, in->dtype, stage, state)) ||
        (s = fill_device(ctx, in->v[i], in->v_bytes, in->dtype, stage, state)))
        return s;
    /* o is written by every run; filled once so it is never uninitialized. */
    return fill_device(ctx, in->o[i], in->o_bytes, in->dtype, stage, state);
}

fj_status fj_tune_inputs_prepare(fj_tune_inputs *in, fj_context *ctx, const fj_attention_desc *d,
                                 size_t max_bytes, uint64_t seed)
{
    size_t es = (size_t)fj_dtype_size(d->dtype);
    /* V's and O's rows: head_dim_v (0: head_dim) */
    const size_t dv = (size_t)(d->head_dim_v > 0 ? d->head_dim_v : d->head_dim);
    size_t q = (size_t)d->batch * d->seqlen_q * d->heads_q * d->head_dim * es;
    size_t k = (size_t)d->batch * d->seqlen_k * d->heads_kv * d->head_dim * es;
    size_t v = (size_t)d->batch * d->seqlen_k * d->heads_kv * dv * es;
    size_t o = (size_t)d->batch * d->seqlen_q * d->heads_q * dv * es;
    if (in->sets && in->ctx == ctx && in->dtype == d->dtype && in->q_bytes == q &&
        in->k_bytes == k && in->v_bytes == v && in->o_bytes == o)
        return FJ_OK; /* the same sizes: the sets made for an earlier point serve */
    fj_tune_inputs_free(in);
    in->ctx = ctx;
    in->dtype = d->dtype;
    in->q_bytes = q;
    in->k_bytes = k;
    in->v_bytes = v;
    in->o_bytes = o;
    int want = sets_for(q + k + v + o, max_bytes);
    void *stage = malloc(FILL_CHUNK);
    if (!stage) return fj_fail(FJ_ERR_OUT_OF_MEMORY, "out of host memory for the input fill");
    uint64_t state = seed;
    fj_status s = FJ_OK;
    for (int i = 0; i < want && !s; i++) {
        in->sets = i + 1; /* so that fj_tune_inputs_free frees a partial set */
        s = allocate_set(in, i, stage, &state);
    }
    free(stage);
    if (s) fj_tune_inputs_free(in);
    return s;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Linear interpolation between order statistics of sorted x. */
static double quantile(const double *x, int n, double q)
{
    double pos = q * (n - 1);
    int i = (int)pos;
    if (i + 1 >= n) return x[n - 1];
    return x[i] + (pos - i) * (x[i + 1] - x[i]);
}

static void summarize(double *ms, int runs, fj_tune_timing *out)
{
    qsort(ms, (size_t)runs, sizeof *ms, cmp_double);
    out->runs = runs;
    out->min = ms[0];
    out->max = ms[runs - 1];
    out->median = quantile(ms, runs, 0.5);
    out->p25 = quantile(ms, runs, 0.25);
    out->p75 = quantile(ms, runs, 0.75);
}

static fj_status time_one(const fj_plan *plan, const fj_tune_inputs *in, int set, double *ms)
{
    return fj_plan_time(plan, in->q[set], in->k[set], in->v[set], in->o[set], NULL, 0, 1, ms);
}

fj_status fj_tune_time_plan(const fj_plan *plan, const fj_tune_inputs *in, int warmup, int repeat,
                            double cut_ms, fj_tune_timing *out)
{
    memset(out, 0, sizeof *out);
    double *ms = calloc((size_t)repeat, sizeof *ms);
    if (!ms) return fj_fail(FJ_ERR_OUT_OF_MEMORY, "out of host memory for %d timings", repeat);
    fj_status s = FJ_OK;
    int runs = 0, set = 0;
    for (int i = 0; i < warmup + repeat && !s; i++, set = (set + 1) % in->sets) {
        double t;
        s = time_one(plan, in, set, &t);
        if (s || i < warmup) continue;
        ms[runs++] = t;
        if (runs == 1 && cut_ms > 0 && t > cut_ms && repeat > CUT_RUNS) {
            out->cut_short = true;
            repeat = CUT_RUNS;
        }
        if (runs == repeat) break;
    }
    if (!s) summarize(ms, runs, out);
    free(ms);
    return s;
}

fj_status fj_tune_time_duel(const fj_plan *a, const fj_plan *b, const fj_tune_inputs *in,
                            int warmup, int repeat, fj_tune_timing *ta, fj_tune_timing *tb)
{
    memset(ta, 0, sizeof *ta);
    memset(tb, 0, sizeof *tb);
    double *ms = calloc(2 * (size_t)repeat, sizeof *ms);
    if (!ms) return fj_fail(FJ_ERR_OUT_OF_MEMORY, "out of host memory for %d timings", 2 * repeat);
    double *ma = ms, *mb = ms + repeat;
    fj_status s = FJ_OK;
    for (int i = 0, set = 0; i < warmup + repeat && !s; i++, set = (set + 1) % in->sets) {
        /* Who goes first alternates too: neither always runs on the cache
           and clocks the other left. */
        bool b_first = i % 2;
        double first, second;
        s = time_one(b_first ? b : a, in, set, &first);
        if (!s) s = time_one(b_first ? a : b, in, set, &second);
        if (s || i < warmup) continue;
        ma[i - warmup] = b_first ? second : first;
        mb[i - warmup] = b_first ? first : second;
    }
    if (!s) {
        summarize(ma, repeat, ta);
        summarize(mb, repeat, tb);
    }
    free(ms);
    return s;
}
