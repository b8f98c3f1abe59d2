/* Benchmark of the CPU tiled backend (built, not run as a test).
 *
 *   bench_cpu_tiled [-t THREADS] [-r REPEATS] table [FILTER]
 *       The shapes of the CPU benchmark (those whose description, as printed,
 *       contains FILTER): tiled and reference time, GFLOP/s
 *       (4 B Hq Sq Sk D, halved when causal with Sq == Sk), and the speed of one
 *       large cblas_sgemm (2048^3, the same thread count) measured in the same
 *       process, interleaved with the attention runs so load from other
 *       processes hits both alike.
 *   bench_cpu_tiled [-t T] [-r R] sweep DTYPE B HQ HKV SQ SK D CAUSAL [BQS [BKS]]
 *       Tiled GFLOP/s for a grid of forced block sizes (fj_cpu_tiled_force_blocks),
 *       the best of R runs of each (the cells are timed in turn; load from
 *       other processes only ever slows a run down).
 *   bench_cpu_tiled [-t T] memory DTYPE SQ D [reference]
 *       One head, one run; prints the bytes of the inputs and output and the
 *       process's peak RSS before and after the run. Run it under
 *       /usr/bin/time -v: max RSS minus inputs and output is what the backend
 *       (and the process itself) used.
 *
 *   bench_cpu_tiled [-t T] [-r R] decode [FILTER]
 *       The decode rows (1 query row, D 128; 32/8 and 32/32 heads; 4k and 32k
 *       keys; f32, bf16, f16): the decode path, the tiled path (the decode
 *       path turned off) and a plain read of the same K and V bytes on the
 *       same number of threads (read_bandwidth.h), in turn; GB/s of K + V.
 *
 *   bench_cpu_tiled [-t T] [-r R] prefill [FILTER]
 *       bf16 prefill (batch 1, 8 heads, S 512 / 2048 / 4096, D 64 / 128,
 *       causal or not): the plan's path (AMX prefill, prefill_amx.c, where
 *       the CPU has AMX) and the tiled path (decode.h's paths turned off);
 *       GFLOP/s as in `table`.
 *   bench_cpu_tiled [-t T] [-r R] causal [FILTER]
 *       Causal (bottom-right) against non-causal on the tiled path at S 512,
 *       1024 and 2048 (f32, f16 and bf16, 8 heads, D 64 / 128 / 256, and
 *       32/8 heads at D 128), on the tile kernels and, where those are the
 *       default, the same problems on the sgemm kernels: every plan of a row
 *       timed once per round, the order turned round by round. "per FLOP" is
 *       the median over rounds of causal GFLOP/s over non-causal GFLOP/s
 *       (causal FLOPs are half, so 1 means the causal run took half the
 *       time); "tiles/sgemm" the median of sgemm time over tile time. bf16
 *       runs the tiled path too (decode.h's paths turned off), as it does on
 *       a CPU without AMX.
 *   bench_cpu_tiled [-t T] [-r R] bf16 [FILTER]
 *       bf16 on the tiled path's bf16 kernels (AVX-512 BF16 dot products),
 *       the same bf16 problem widened to f32 as it is copied (the AVX-512
 *       set, fj_cpu_tiled_force_widened_bf16) and the problem in f32, at S
 *       512 / 1024 / 2048, D 64 / 128 / 256, 8/8 and 32/8 heads, causal
 *       (bottom-right) or not: each plan timed once per round, the order
 *       turned round by round; GFLOP/s of the medians, and the medians over
 *       rounds of dot / f32 and dot / widened speed.
 *   bench_cpu_tiled [-r R] kernels
 *       The decode path's kernels alone (src/cpu/decode_kernels.h), one
 *       thread, on one block of 128 keys that stays in cache: nanoseconds
 *       of thread CPU time per key for the scores, the online softmax step
 *       and the values, by kernel set, dtype and query rows (head dim 128);
 *       the best of R batches.
 *   bench_cpu_tiled rates
 *       The CPU's own rates behind the kernels' choices, one thread, thread
 *       CPU time: 512-bit FMAs from registers (12 independent chains), FMAs
 *       each fed by a load from L1, AVX-512 BF16 dot products (vdpbf16ps, 12
 *       chains) and AMX bf16 tile products with their two tile loads, where
 *       the CPU has them.
 * -l bhsd: every tensor laid out [batch, heads, seq, head_dim] (PyTorch's
 * layout) instead of the dense [batch, seq, heads, head_dim].
 * -c: every time is the process's CPU time (all its threads) rather than
 * the wall clock's: with -t 1, the work alone, whatever else the machine
 * runs meanwhile (a shared machine's preemptions do not count; its cache
 * and memory traffic still do).
 * -b BQ,BK: the tiled path's blocks forced (fj_cpu_tiled_force_blocks) in
 * every mode but sweep; -k sgemm: the tiled path's sgemm kernels forced
 * (fj_cpu_tiled_force_blas), as on a CPU without AVX-512. -o widened:
 * decode compares the decode path with itself with bf16 widened to float
 * (FJ_CPU_DECODE_WIDENED: no AMX, no dot products) instead of the tiled
 * path; -o generic: with itself on the generic kernels
 * (FJ_CPU_DECODE_GENERIC, as on a CPU without AVX-512).
 * DTYPE is f32, f16 or bf16; CAUSAL is none, bottom-right or top-left; BQS and
 * BKS are comma-separated block sizes (at most 8 each).
 * Medians of REPEATS timed runs (default 5) after one warm-up run. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include <cblas.h>

#include "context.h"
#include "cpu/convert.h"
#include "cpu/decode.h"
#include "cpu/decode_kernels.h"
#include "cpu/tiled_softmax.h"
#include "cpu/tiled_blocks.h"
#include "flashjit.h"
#include "read_bandwidth.h"

/* Weak, as in src/cpu/blas_threads.c: present with OpenBLAS, NULL otherwise. */
extern void openblas_set_num_threads(int n) __attribute__((weak));

static int threads = 0;   /* 0: one per online core, as the library's default */
static bool bhsd = false; /* -l bhsd: tensors [batch, heads, seq, head_dim] (PyTorch's) */
static int repeats = 5;

static bool cpu_clock = false; /* -c: time by the process's CPU time, not the wall clock */

static double now(void)
{
    struct timespec ts;
    clock_gettime(cpu_clock ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static uint64_t rng_state = 0x2545f4914f6cdd1dull;

static float next_uniform(void) /* xorshift64*, in [-1, 1) */
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    uint64_t x = rng_state * 0x2545f4914f6cdd1dull;
    return (float)((double)(x >> 11) * 0x1.0p-52 - 1.0);
}

static void fill(void *buf, fj_dtype t, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float x = next_uniform();
        if (t == FJ_F32) ((float *)buf)[i] = x;
        else if (t == FJ_F16) ((uint16_t *)buf)[i] = fj_f32_to_f16(x);
        else ((uint16_t *)buf)[i] = fj_f32_to_bf16(x);
    }
}

static bool parse_dtype(const char *s, fj_dtype *t)
{
    if (!strcmp(s, "f32")) *t = FJ_F32;
    else if (!strcmp(s, "f16")) *t = FJ_F16;
    else if (!strcmp(s, "bf16")) *t = FJ_BF16;
    else return false;
    return true;
}

static bool parse_causal(const char *s, fj_causal *c)
{
    if (!strcmp(s, "none")) *c = FJ_CAUSAL_NONE;
    else if (!strcmp(s, "bottom-right")) *c = FJ_CAUSAL_BOTTOM_RIGHT;
    else if (!strcmp(s, "top-left")) *c = FJ_CAUSAL_TOP_LEFT;
    else return false;
    return true;
}

static void die(const char *what, fj_status s)
{
    fprintf(stderr, "bench_cpu_tiled: %s: %s: %s\n", what, fj_status_name(s), fj_last_error());
    exit(1);
}

static fj_context *make_context(fj_backend backend)
{
    fj_context_options o;
    fj_context_options_init(&o);
    o.backend = backend;
    o.cpu_threads = threads;
    o.cache_dir = "";
    o.tuning_file = "";
    fj_context *ctx;
    fj_status s = fj_context_create(&o, &ctx);
    if (s) die("fj_context_create", s);
    return ctx;
}

/* Dense tensors of one problem, filled once. */
typedef struct tensors {
    void *q, *k, *v, *o;
    float *lse;
    size_t in_out_bytes; /* q, k, v, o and lse */
} tensors;

static tensors make_tensors(fj_context *ctx, const fj_attention_desc *d)
{
    tensors t;
    size_t es = d->dtype == FJ_F32 ? 4 : 2;
    size_t nq = (size_t)d->batch * d->seqlen_q * d->heads_q * d->head_dim;
    size_t nk = (size_t)d->batch * d->seqlen_k * d->heads_kv * d->head_dim;
    size_t nl = (size_t)d->batch * d->heads_q * d->seqlen_q;
    fj_status s;
    if ((s = fj_malloc(ctx, nq * es, &t.q)) || (s = fj_malloc(ctx, nk * es, &t.k)) ||
        (s = fj_malloc(ctx, nk * es, &t.v)) || (s = fj_malloc(ctx, nq * es, &t.o)) ||
        (s = fj_malloc(ctx, nl * sizeof(float), (void **)&t.lse)))
        die("fj_malloc", s);
    fill(t.q, d->dtype, nq);
    fill(t.k, d->dtype, nk);
    fill(t.v, d->dtype, nk);
    memset(t.o, 0, nq * es);
    memset(t.lse, 0, nl * sizeof(float));
    t.in_out_bytes = (2 * nq + 2 * nk) * es + nl * sizeof(float);
    return t;
}

static void free_tensors(fj_context *ctx, tensors *t)
{
    fj_free(ctx, t->q);
    fj_free(ctx, t->k);
    fj_free(ctx, t->v);
    fj_free(ctx, t->o);
    fj_free(ctx, t->lse);
}

static double time_plan(const fj_plan *plan, const tensors *t)
{
    double t0 = now();
    fj_status s = fj_plan_execute(plan, t->q, t->k, t->v, t->o, t->lse, NULL);
    if (s) die("fj_plan_execute", s);
    return now() - t0;
}

/* One 2048^3 cblas_sgemm with the benchmark's thread count. */
typedef struct sgemm_bench {
    int n, nthreads;
    float *a, *b, *c;
} sgemm_bench;

static sgemm_bench sgemm_make(int nthreads)
{
    sgemm_bench g = {2048, nthreads, NULL, NULL, NULL};
    size_t n2 = (size_t)g.n * g.n;
    g.a = malloc(n2 * sizeof(float));
    g.b = malloc(n2 * sizeof(float));
    g.c = malloc(n2 * sizeof(float));
    if (!g.a || !g.b || !g.c) {
        fprintf(stderr, "bench_cpu_tiled: out of memory for the sgemm\n");
        exit(1);
    }
    fill(g.a, FJ_F32, n2);
    fill(g.b, FJ_F32, n2);
    return g;
}

static double sgemm_time(const sgemm_bench *g)
{
    /* The library sets OpenBLAS to one thread during its jobs and restores the
       count after, so set it before every measurement. */
    if (openblas_set_num_threads) openblas_set_num_threads(g->nthreads);
    double t0 = now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, g->n, g->n, g->n, 1.0f, g->a, g->n, g->b,
                g->n, 0.0f, g->c, g->n);
    double t = now() - t0;
    /* OpenBLAS's own threads spin (sched_yield) for about 2^28 cycles after a
       multithreaded call before they sleep; let them, so they do not compete
       with the attention run timed next. */
    nanosleep(&(struct timespec){0, 300 * 1000 * 1000}, NULL);
    return t;
}

static double sgemm_flops(const sgemm_bench *g) { return 2.0 * g->n * g->n * (double)g->n; }

static void sgemm_free(sgemm_bench *g)
{
    free(g->a);
    free(g->b);
    free(g->c);
}

/* The thread count the context resolved (the benchmark links the static
   library, so it may look inside). */
static int context_threads(const fj_context *ctx) { return ctx->cpu_threads; }

typedef struct shape {
    fj_dtype dtype;
    int b, hq, hkv, sq, sk, d;
    fj_causal causal;
    int wl, wr;
} shape;

static fj_attention_desc shape_desc(const shape *s)
{
    fj_attention_desc d;
    fj_attention_desc_init(&d, s->b, s->hq, s->hkv, s->sq, s->sk, s->d, s->dtype);
    d.causal = s->causal;
    d.window_left = s->wl;
    d.window_right = s->wr;
    if (bhsd) {
        const int64_t D = s->d;
        int64_t *st[4] = {d.q_stride, d.k_stride, d.v_stride, d.o_stride};
        const int heads[4] = {s->hq, s->hkv, s->hkv, s->hq}, seqs[4] = {s->sq, s->sk, s->sk, s->sq};
        for (int i = 0; i < 4; i++) {
            st[i][0] = (int64_t)heads[i] * seqs[i] * D;
            st[i][1] = D;
            st[i][2] = (int64_t)seqs[i] * D;
        }
    }
    return d;
}

static const char *shape_str(const shape *s)
{
    static char buf[160];
    char win[32] = "";
    if (s->wl >= 0 || s->wr >= 0) snprintf(win, sizeof win, " w%d,%d", s->wl, s->wr);
    snprintf(buf, sizeof buf, "%s b%d h%d/%d sq%d sk%d d%d %s%s", fj_dtype_name(s->dtype), s->b,
             s->hq, s->hkv, s->sq, s->sk, s->d, fj_causal_name(s->causal), win);
    return buf;
}

/* Runs tiled, reference and one sgemm in turn, repeats times; medians. */
static void bench_shape(fj_context *tiled_ctx, fj_context *ref_ctx, const sgemm_bench *g,
                        const shape *sh, double *sgemm_gf_all, int *sgemm_n)
{
    fj_attention_desc d = shape_desc(sh);
    fj_plan *tp, *rp;
    fj_status s;
    if ((s = fj_plan_create(tiled_ctx, &d, &tp))) die("fj_plan_create (cpu)", s);
    if ((s = fj_plan_create(ref_ctx, &d, &rp))) die("fj_plan_create (cpu-reference)", s);
    tensors t = make_tensors(tiled_ctx, &d);
    double flops = fj_attention_flops(&d);
    time_plan(tp, &t);
    time_plan(rp, &t);
    double tt[64], rt[64], gt[64];
    for (int r = 0; r < repeats; r++) {
        gt[r] = sgemm_time(g);
        tt[r] = time_plan(tp, &t);
        rt[r] = time_plan(rp, &t);
    }
    /* Ratios per round (runs seconds apart share the machine's load), then
       their medians. */
    double vs_ref[64], vs_sgemm[64];
    for (int r = 0; r < repeats; r++) {
        sgemm_gf_all[(*sgemm_n)++] = sgemm_flops(g) / gt[r] * 1e-9;
        vs_ref[r] = rt[r] / tt[r];
        vs_sgemm[r] = (flops / tt[r]) / (sgemm_flops(g) / gt[r]);
    }
    double tm = median(tt, repeats), rm = median(rt, repeats), gm = median(gt, repeats);
    printf("| %-44s | %8.2f | %6.1f | %8.2f | %6.1f | %5.2fx | %6.1f | %5.2f |\n", shape_str(sh),
           tm * 1e3, flops / tm * 1e-9, rm * 1e3, flops / rm * 1e-9, median(vs_ref, repeats),
           sgemm_flops(g) / gm * 1e-9, median(vs_sgemm, repeats));
    fflush(stdout);
    free_tensors(tiled_ctx, &t);
    fj_plan_destroy(tp);
    fj_plan_destroy(rp);
}

/* The causal/non-causal time ratio at one shape, both timed in turn. */
static void bench_causal_ratio(fj_context *ctx, shape sh)
{
    sh.causal = FJ_CAUSAL_NONE;
    fj_attention_desc dn = shape_desc(&sh);
    sh.causal = FJ_CAUSAL_BOTTOM_RIGHT;
    fj_attention_desc dc = shape_desc(&sh);
    fj_plan *pn, *pc;
    fj_status s;
    if ((s = fj_plan_create(ctx, &dn, &pn)) || (s = fj_plan_create(ctx, &dc, &pc)))
        die("fj_plan_create", s);
    tensors t = make_tensors(ctx, &dn);
    time_plan(pn, &t);
    time_plan(pc, &t);
    double tn[64], tc[64];
    for (int r = 0; r < repeats; r++) {
        tn[r] = time_plan(pn, &t);
        tc[r] = time_plan(pc, &t);
    }
    double mn = median(tn, repeats), mc = median(tc, repeats);
    printf("causal / non-causal time at %s: %.1f ms / %.1f ms = %.3f\n", shape_str(&sh), mc * 1e3,
           mn * 1e3, mc / mn);
    free_tensors(ctx, &t);
    fj_plan_destroy(pn);
    fj_plan_destroy(pc);
}

static int run_table(const char *filter)
{
    fj_context *tiled = make_context(FJ_BACKEND_CPU), *ref = make_context(FJ_BACKEND_CPU_REFERENCE);
    int nthreads = context_threads(tiled);
    sgemm_bench g = sgemm_make(nthreads);
    sgemm_time(&g); /* warm-up: OpenBLAS starts its threads */
    /* The foundation's CPU grid (tools/cmd_bench.c, `flashjit bench --grid
       cpu`: batch 1, 8 heads, S 512 / 2048 / 4096, D 64 / 128, causal or not,
       f32 and bf16, and a GQA decode row), then a few other shapes. */
    enum { MAX_SHAPES = 40 };
    shape shapes[MAX_SHAPES];
    int n = 0;
    static const int seqs[] = {512, 2048, 4096}, dims[] = {64, 128};
    static const fj_dtype dtypes[] = {FJ_F32, FJ_BF16};
    for (int t = 0; t < 2; t++) {
        for (int a = 0; a < 3; a++)
            for (int b = 0; b < 2; b++)
                for (int c = 0; c < 2; c++)
                    shapes[n++] = (shape){dtypes[t], 1,
                                          8,         8,
                                          seqs[a],   seqs[a],
                                          dims[b],   c ? FJ_CAUSAL_BOTTOM_RIGHT : FJ_CAUSAL_NONE,
                                          -1,        -1};
        shapes[n++] = (shape){dtypes[t], 1, 32, 8, 1, 8192, 128, FJ_CAUSAL_NONE, -1, -1};
    }
    static const shape extra[] = {
        {FJ_F16, 1, 8, 8, 2048, 2048, 128, FJ_CAUSAL_NONE, -1, -1},
        {FJ_F32, 1, 8, 8, 2048, 2048, 256, FJ_CAUSAL_NONE, -1, -1},
        {FJ_F32, 1, 8, 8, 2048, 2048, 96, FJ_CAUSAL_BOTTOM_RIGHT, -1, -1},
        {FJ_F32, 4, 8, 8, 512, 512, 128, FJ_CAUSAL_NONE, -1, -1},
        {FJ_F32, 1, 32, 8, 1024, 1024, 128, FJ_CAUSAL_BOTTOM_RIGHT, -1, -1},
        {FJ_F32, 1, 8, 8, 4096, 4096, 128, FJ_CAUSAL_BOTTOM_RIGHT, 512, 0},
        {FJ_F32, 1, 32, 32, 1, 8192, 128, FJ_CAUSAL_NONE, -1, -1},
        {FJ_F32, 1, 1, 1, 16384, 16384, 64, FJ_CAUSAL_NONE, -1, -1},
    };
    for (size_t i = 0; i < sizeof extra / sizeof extra[0] && n < MAX_SHAPES; i++)
        shapes[n++] = extra[i];
    printf("threads: %d\n\n", nthreads);
    printf("medians of %d rounds (sgemm, cpu, cpu-reference in turn); \"vs ref\" and \"ratio\" "
           "(cpu GFLOP/s / sgemm GFLOP/s) are medians of the per-round ratios\n\n",
           repeats);
    printf("| %-44s | %8s | %6s | %8s | %6s | %6s | %6s | %5s |\n", "shape", "cpu ms", "GF/s",
           "ref ms", "GF/s", "vs ref", "sgemm", "ratio");
    printf("| %.44s | %.8s | %.6s | %.8s | %.6s | %.6s | %.6s | %.5s |\n",
           "---------------------------------------------", "--------", "------", "--------",
           "------", "------", "------", "-----");
    int ng = 0;
    double *all = malloc(sizeof(double) * (size_t)n * (size_t)repeats);
    for (int i = 0; i < n; i++)
        if (!filter || strstr(shape_str(&shapes[i]), filter))
            bench_shape(tiled, ref, &g, &shapes[i], all, &ng);
    if (ng)
        printf("\nsgemm 2048^3 on %d threads over the whole run: median %.1f GFLOP/s\n", nthreads,
               median(all, ng));
    if (!filter)
        bench_causal_ratio(tiled,
                           (shape){FJ_F32, 1, 8, 8, 4096, 4096, 128, FJ_CAUSAL_NONE, -1, -1});
    free(all);
    sgemm_free(&g);
    fj_context_destroy(tiled);
    fj_context_destroy(ref);
    return 0;
}

/* The "kernels:" line of a plan's describe, for the decode table. */
static const char *kernels_of(const fj_plan *plan)
{
    static char buf[64];
    const char *k = strstr(fj_plan_describe(plan), "kernels: ");
    if (!k) return "-";
    k += strlen("kernels: ");
    snprintf(buf, sizeof buf, "%.*s", (int)strcspn(k, " \n"), k);
    return buf;
}

/* What `decode` compares the decode path with (-o): the tiled path, the
   decode path with bf16 widened (no AMX, no dot products), or the decode
   path on the generic kernels. */
static fj_cpu_decode_mode decode_other = FJ_CPU_DECODE_OFF;

static int run_decode(const char *filter)
{
    fj_context *ctx = make_context(FJ_BACKEND_CPU);
    const int nthreads = context_threads(ctx);
    const char *other = decode_other == FJ_CPU_DECODE_OFF       ? "tiled"
                        : decode_other == FJ_CPU_DECODE_GENERIC ? "generic"
                                                                : "widened";
    printf("threads: %d; medians of %d rounds (decode path, %s, read of the same K and V "
           "bytes, in turn); GB/s of K + V\n\n",
           nthreads, repeats,
           decode_other == FJ_CPU_DECODE_OFF       ? "tiled path"
           : decode_other == FJ_CPU_DECODE_GENERIC ? "generic kernels"
                                                   : "bf16 widened");
    printf("| %-34s | %-15s | %8s | %6s | %6s | %7s | %5s ms | %6s | %7s |\n", "shape", "kernels",
           "ms", "GB/s", "read", "of read", other, "GB/s", "speedup");
    printf("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    static const fj_dtype dtypes[] = {FJ_F32, FJ_BF16, FJ_F16};
    static const int heads_q[] = {32, 32}, heads_kv[] = {8, 32}, seqs[] = {4096, 32768};
    for (int t = 0; t < 3; t++)
        for (int h = 0; h < 2; h++)
            for (int sk = 0; sk < 2; sk++) {
                shape sh = {dtypes[t], 1,   heads_q[h],     heads_kv[h], 1,
                            seqs[sk],  128, FJ_CAUSAL_NONE, -1,          -1};
                if (filter && !strstr(shape_str(&sh), filter)) continue;
                fj_attention_desc d = shape_desc(&sh);
                fj_plan *dec, *til;
                fj_status s;
                if ((s = fj_plan_create(ctx, &d, &dec))) die("fj_plan_create (decode)", s);
                fj_cpu_decode_force(decode_other);
                fj_context *tctx = make_context(FJ_BACKEND_CPU); /* plans are cached per context */
                s = fj_plan_create(tctx, &d, &til);
                fj_cpu_decode_force(FJ_CPU_DECODE_AUTO);
                if (s) die("fj_plan_create (tiled)", s);
                tensors x = make_tensors(ctx, &d);
                const size_t kv = (size_t)d.batch * d.seqlen_k * d.heads_kv * d.head_dim *
                                  (d.dtype == FJ_F32 ? 4 : 2);
                const void *bufs[2] = {x.k, x.v};
                const size_t bytes[2] = {kv, kv};
                double dt[64], tt[64], rt[64], warm;
                time_plan(dec, &x);
                time_plan(til, &x);
                if (fjt_read_seconds(bufs, bytes, 2, nthreads, 1, &warm)) {
                    fprintf(stderr, "bench_cpu_tiled: cannot start %d reader threads\n", nthreads);
                    return 1;
                }
                for (int r = 0; r < repeats; r++) {
                    dt[r] = time_plan(dec, &x);
                    tt[r] = time_plan(til, &x);
                    fjt_read_seconds(bufs, bytes, 2, nthreads, 1, &rt[r]);
                }
                double of_read[64];
                for (int r = 0; r < repeats; r++) of_read[r] = rt[r] / dt[r];
                double dm = median(dt, repeats), tm = median(tt, repeats), rm = median(rt, repeats);
                printf("| %-34s | %-15s | %8.3f | %6.1f | %6.1f | %6.0f%% | %8.3f | %6.1f | %6.1fx "
                       "|\n",
                       shape_str(&sh), kernels_of(dec), dm * 1e3, 2 * kv / dm * 1e-9,
                       2 * kv / rm * 1e-9, 100 * median(of_read, repeats), tm * 1e3,
                       2 * kv / tm * 1e-9, tm / dm);
                fflush(stdout);
                free_tensors(ctx, &x);
                fj_plan_destroy(dec);
                fj_plan_destroy(til);
                fj_context_destroy(tctx);
            }
    fj_context_destroy(ctx);
    return 0;
}

static double thread_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__)
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#define RATES 1
#define CHAINS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
#define RATE_LOOPS 20000000L

__attribute__((target("avx512f"), noinline)) static double rate_fma(void)
{
#define DECL(i) __m512 a##i = _mm512_set1_ps(1e-3f * i);
    CHAINS(DECL)
#undef DECL
    const __m512 b = _mm512_set1_ps(0.999f), c = _mm512_set1_ps(1e-4f);
    double t0 = thread_seconds();
    for (long i = 0; i < RATE_LOOPS; i++) {
#define STEP(i) a##i = _mm512_fmadd_ps(a##i, b, c);
        CHAINS(STEP)
#undef STEP
        __asm__ volatile("" : "+v"(a0), "+v"(a5), "+v"(a11));
    }
    double t = thread_seconds() - t0;
#define SUM(i) +a##i[0]
    volatile float sink = 0 CHAINS(SUM);
#undef SUM
    (void)sink;
    return 12.0 * RATE_LOOPS / t * 1e-9;
}

__attribute__((target("avx512f"), noinline)) static double rate_fma_load(const float *buf)
{
#define DECL(i) __m512 a##i = _mm512_setzero_ps();
    CHAINS(DECL)
#undef DECL
    const __m512 b = _mm512_set1_ps(0.5f);
    double t0 = thread_seconds();
    for (long i = 0; i < RATE_LOOPS; i++) {
        const float *p = buf + (i & 15) * 192;
#define STEP(i) a##i = _mm512_fmadd_ps(_mm512_loadu_ps(p + 16 * i), b, a##i);
        CHAINS(STEP)
#undef STEP
        __asm__ volatile("" : "+r"(p));
    }
    double t = thread_seconds() - t0;
#define SUM(i) +a##i[0]
    volatile float sink = 0 CHAINS(SUM);
#undef SUM
    (void)sink;
    return 12.0 * RATE_LOOPS / t * 1e-9;
}

__attribute__((target("avx512f,avx512bf16"), noinline)) static double rate_dpbf16(void)
{
#define DECL(i) __m512 a##i = _mm512_set1_ps(1e-3f * i);
    CHAINS(DECL)
#undef DECL
    const __m512bh x = (__m512bh)_mm512_set1_epi32(0x3f803f80);
    double t0 = thread_seconds();
    for (long i = 0; i < RATE_LOOPS; i++) {
#define STEP(i) a##i = _mm512_dpbf16_ps(a##i, x, x);
        CHAINS(STEP)
#undef STEP
        __asm__ volatile("" : "+v"(a0), "+v"(a5), "+v"(a11));
    }
    double t = thread_seconds() - t0;
#define SUM(i) +a##i[0]
    volatile float sink = 0 CHAINS(SUM);
#undef SUM
    (void)sink;
    return 12.0 * RATE_LOOPS / t * 1e-9;
}

/* ns per 16 x 16 x 32 tile product with its A and B loads, 4 C tiles in turn. */
__attribute__((target("amx-tile,amx-bf16"), noinline)) static double rate_amx(const uint16_t *a,
                                                                              const uint16_t *b)
{
    struct {
        uint8_t palette, start_row, reserved[14];
        uint16_t bytes_per_row[16];
        uint8_t rows[16];
    } cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 6; t++) {
        cfg.bytes_per_row[t] = 64;
        cfg.rows[t] = 16;
    }
    _tile_loadconfig(&cfg);
    const long n = RATE_LOOPS / 20;
    double t0 = thread_seconds();
    for (long i = 0; i < n; i++) {
        _tile_loadd(4, a, 64);
        _tile_loadd(5, b, 64);
        _tile_dpbf16ps(0, 4, 5);
        _tile_loadd(5, b + 512, 64);
        _tile_dpbf16ps(1, 4, 5);
        _tile_loadd(5, b + 1024, 64);
        _tile_dpbf16ps(2, 4, 5);
        _tile_loadd(5, b + 1536, 64);
        _tile_dpbf16ps(3, 4, 5);
    }
    double t = thread_seconds() - t0;
    _tile_release();
    return t / (4.0 * n) * 1e9;
}

static int run_rates(void)
{
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512f")) {
        printf("no AVX-512 on this CPU: nothing to measure\n");
        return 0;
    }
    float *buf = aligned_alloc(64, sizeof(float) * 16 * 192 + 4096);
    uint16_t *tiles = aligned_alloc(64, sizeof(uint16_t) * 5 * 512);
    if (!buf || !tiles) return 1;
    for (int i = 0; i < 16 * 192 + 1024; i++) buf[i] = 1e-3f * (float)(i % 7);
    for (int i = 0; i < 5 * 512; i++) tiles[i] = 0x3f80;
    printf("512-bit FMA, registers only (12 chains): %.2f per ns\n", rate_fma());
    printf("512-bit FMA, each fed by a load from L1 (12 chains): %.2f per ns\n",
           rate_fma_load(buf));
    if (__builtin_cpu_supports("avx512bf16"))
        printf("vdpbf16ps 512-bit (32 products each, 12 chains): %.2f per ns\n", rate_dpbf16());
    else printf("vdpbf16ps: no AVX-512 BF16 on this CPU\n");
    if (__builtin_cpu_supports("amx-tile") && __builtin_cpu_supports("amx-bf16") &&
        syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) == 0)
        printf("AMX tdpbf16ps 16x16x32 with its A and B tile loads (4 C tiles in turn): %.2f ns "
               "each\n",
               rate_amx(tiles, tiles + 512));
    else printf("AMX: not usable here\n");
    free(buf);
    free(tiles);
    return 0;
}
#endif

/* Best of `repeats` batches of `calls` calls of one kernel: ns per key. */
#define KERNEL_TIME(out, ...)                    \
    do {                                         \
        double best_ = 1e30;                     \
        for (int r_ = 0; r_ < repeats; r_++) {   \
            double t0_ = thread_seconds();       \
            for (int c_ = 0; c_ < calls; c_++) { \
                __VA_ARGS__;                     \
            }                                    \
            double t_ = thread_seconds() - t0_;  \
            if (t_ < best_) best_ = t_;          \
        }                                        \
        out = best_ / calls / nk * 1e9;          \
    } while (0)

static int run_kernels(void)
{
    enum { D = 128, DPAD = 128, NK = 128, MAXR = 16, CALLS = 2000 };
    const int nk = NK, calls = CALLS;
    float *q = aligned_alloc(64, sizeof(float) * MAXR * DPAD);
    float *s = aligned_alloc(64, sizeof(float) * MAXR * NK);
    float *acc = aligned_alloc(64, sizeof(float) * MAXR * DPAD);
    float *scratch = aligned_alloc(64, sizeof(float) * FJ_DECODE_MAX_BLOCK * DPAD);
    void *kv = aligned_alloc(64, sizeof(float) * 2 * NK * D);
    if (!q || !s || !acc || !scratch || !kv) {
        fprintf(stderr, "bench_cpu_tiled: out of memory\n");
        return 1;
    }
    printf("one thread, thread CPU time, head dim %d, blocks of %d keys in cache, best of %d "
           "batches of %d calls: ns per key\n\n",
           D, NK, repeats, CALLS);
    printf("| kernels | dtype | rows | scores | softmax | values | sum |\n");
    printf("| --- | --- | ---: | ---: | ---: | ---: | ---: |\n");
    static const fj_dtype dtypes[] = {FJ_F32, FJ_BF16, FJ_F16};
    static const int rows[] = {1, 2, 4, 6, 8, 16};
    for (int set = 0; set < 4; set++)
        for (int t = 0; t < 3; t++) {
            const fj_decode_kernels *kern = set == 0   ? fj_decode_kernels_generic(dtypes[t])
                                            : set == 1 ? fj_decode_kernels_avx512(dtypes[t])
                                            : dtypes[t] != FJ_BF16 ? NULL
                                            : set == 2 ? fj_decode_kernels_avx512_bf16_dot()
                                                       : fj_decode_kernels_amx();
            if (!kern) continue;
            fill(kv, dtypes[t], (size_t)2 * NK * D);
            const char *k = kv,
                       *v = (const char *)kv + (size_t)NK * D * (dtypes[t] == FJ_F32 ? 4 : 2);
            for (int i = 0; i < MAXR * DPAD; i++) {
                float x = next_uniform();
                if (kern->q_bf16) ((uint16_t *)q)[i] = i % DPAD < D ? fj_f32_to_bf16(x) : 0;
                else q[i] = i % DPAD < D ? x : 0.0f;
            }
            for (int ri = 0; ri < 6; ri++) {
                const int nr = rows[ri];
                double ts, tm, tv;
                KERNEL_TIME(ts, kern->scores(q, DPAD, nr, k, D, nk, D, 0.1f, s, NK, scratch, NULL));
                /* (each step leaves probabilities in s, valid scores for the next) */
                KERNEL_TIME(
                    tm, for (int r = 0; r < nr; r++) {
                        float m = -INFINITY, l = 0.0f;
                        fj_tiled_softmax_step(s + r * NK, nk, &m, &l);
                    });
                memset(acc, 0, sizeof(float) * MAXR * DPAD);
                KERNEL_TIME(tv, kern->accumulate(s, NK, nr, v, D, nk, D, acc, DPAD, scratch, NULL));
                printf("| %s | %s | %d | %.2f | %.2f | %.2f | %.2f |\n", kern->name,
                       fj_dtype_name(dtypes[t]), nr, ts, tm, tv, ts + tm + tv);
                fflush(stdout);
            }
        }
    free(q);
    free(s);
    free(acc);
    free(scratch);
    free(kv);
    return 0;
}

static int run_prefill(const char *filter)
{
    fj_context *ctx = make_context(FJ_BACKEND_CPU);
    const int nthreads = context_threads(ctx);
    printf("threads: %d; medians of %d rounds (the plan's path, then the tiled path)\n\n", nthreads,
           repeats);
    printf("| %-40s | %-34s | %8s | %6s | %8s | %6s | %7s |\n", "shape", "method", "ms", "GF/s",
           "tiled ms", "GF/s", "speedup");
    printf("| --- | --- | ---: | ---: | ---: | ---: | ---: |\n");
    static const int seqs[] = {512, 2048, 4096}, dims[] = {64, 128};
    for (int a = 0; a < 3; a++)
        for (int bd = 0; bd < 2; bd++)
            for (int c = 0; c < 2; c++) {
                shape sh = {FJ_BF16, 1,       8,        8,
                            seqs[a], seqs[a], dims[bd], c ? FJ_CAUSAL_BOTTOM_RIGHT : FJ_CAUSAL_NONE,
                            -1,      -1};
                if (filter && !strstr(shape_str(&sh), filter)) continue;
                fj_attention_desc d = shape_desc(&sh);
                fj_plan *plan, *til;
                fj_status s;
                if ((s = fj_plan_create(ctx, &d, &plan))) die("fj_plan_create", s);
                fj_cpu_decode_force(FJ_CPU_DECODE_OFF);
                fj_context *tctx = make_context(FJ_BACKEND_CPU);
                s = fj_plan_create(tctx, &d, &til);
                fj_cpu_decode_force(FJ_CPU_DECODE_AUTO);
                if (s) die("fj_plan_create (tiled)", s);
                tensors x = make_tensors(ctx, &d);
                const double flops = fj_attention_flops(&d);
                double pt[64], tt[64];
                time_plan(plan, &x);
                time_plan(til, &x);
                for (int r = 0; r < repeats; r++) {
                    pt[r] = time_plan(plan, &x);
                    tt[r] = time_plan(til, &x);
                }
                const double pm = median(pt, repeats), tm = median(tt, repeats);
                char method[40];
                const char *m = strstr(fj_plan_describe(plan), "method: ");
                snprintf(method, sizeof method, "%.*s", m ? (int)strcspn(m + 8, ":\n") : 1,
                         m ? m + 8 : "-");
                printf("| %-40s | %-34s | %8.2f | %6.1f | %8.2f | %6.1f | %6.2fx |\n",
                       shape_str(&sh), method, pm * 1e3, flops / pm * 1e-9, tm * 1e3,
                       flops / tm * 1e-9, tm / pm);
                fflush(stdout);
                free_tensors(ctx, &x);
                fj_plan_destroy(plan);
                fj_plan_destroy(til);
                fj_context_destroy(tctx);
            }
    fj_context_destroy(ctx);
    return 0;
}

static int run_causal(const char *filter)
{
    fj_cpu_decode_force(FJ_CPU_DECODE_OFF); /* the tiled path, bf16 included */
    fj_context *ctx = make_context(FJ_BACKEND_CPU);
    /* the same plans on the sgemm kernels, where the tile kernels are the
       default (plans are cached per context) */
    const bool both = fj_cpu_tiled_kernels(FJ_F32) != NULL;
    fj_context *sctx = both ? make_context(FJ_BACKEND_CPU) : NULL;
    const int nthreads = context_threads(ctx);
    printf("threads: %d; medians of %d rounds (each round: every plan of the row once, the "
           "order turned round by round); per FLOP: median of the rounds' causal / non-causal "
           "GFLOP/s; tiles/sgemm: median of the rounds' sgemm time / tile time, non-causal and "
           "causal\n\n",
           nthreads, repeats);
    printf("| shape (causal: bottom-right) | kernels | ms | GF/s | causal ms | GF/s | per FLOP "
           "|%s\n",
           both ? " sgemm ms | causal ms | per FLOP | tiles/sgemm |" : "");
    printf("| --- | --- | ---: | ---: | ---: | ---: | ---: |%s\n",
           both ? " ---: | ---: | ---: | ---: |" : "");
    static const int seqs[] = {512, 1024, 2048};
    static const struct {
        fj_dtype t;
        int hq, hkv, d;
    } kinds[] = {{FJ_F32, 8, 8, 64},  {FJ_F32, 8, 8, 128},  {FJ_F32, 32, 8, 128},
                 {FJ_F16, 8, 8, 128}, {FJ_BF16, 8, 8, 128}, {FJ_F32, 8, 8, 256}};
    for (size_t a = 0; a < sizeof seqs / sizeof seqs[0]; a++)
        for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
            shape sh = {kinds[k].t, 1,          kinds[k].hq,    kinds[k].hkv, seqs[a],
                        seqs[a],    kinds[k].d, FJ_CAUSAL_NONE, -1,           -1};
            char name[160];
            snprintf(name, sizeof name, "%s", shape_str(&sh));
            if (filter && !strstr(name, filter)) continue;
            name[strlen(name) - strlen(" none")] = '\0';
            fj_attention_desc d[2];
            d[0] = shape_desc(&sh);
            sh.causal = FJ_CAUSAL_BOTTOM_RIGHT;
            d[1] = shape_desc(&sh);
            enum { PLANS = 4 };
            fj_plan *plans[PLANS] = {NULL}; /* tiles none, causal; sgemm none, causal */
            const int np = both ? 4 : 2;
            for (int i = 0; i < np; i++) {
                fj_cpu_tiled_force_blas(i >= 2);
                fj_status s = fj_plan_create(i < 2 ? ctx : sctx, &d[i % 2], &plans[i]);
                fj_cpu_tiled_force_blas(false);
                if (s) die("fj_plan_create", s);
            }
            tensors x = make_tensors(ctx, &d[0]);
            const double f[2] = {fj_attention_flops(&d[0]), fj_attention_flops(&d[1])};
            double t[PLANS][64], per[2][64], speed[2][64];
            for (int i = 0; i < np; i++) time_plan(plans[i], &x);
            for (int r = 0; r < repeats; r++) {
                for (int i = 0; i < np; i++) {
                    const int at = (i + r) % np;
                    t[at][r] = time_plan(plans[at], &x);
                }
                for (int m = 0; m < np / 2; m++)
                    per[m][r] = (f[1] / t[2 * m + 1][r]) / (f[0] / t[2 * m][r]);
                if (both)
                    for (int c = 0; c < 2; c++) speed[c][r] = t[2 + c][r] / t[c][r];
            }
            double med[PLANS];
            for (int i = 0; i < np; i++) med[i] = median(t[i], repeats);
            printf("| %s | %s | %.2f | %.1f | %.2f | %.1f | %.3f |", name,
                   strstr(fj_plan_describe(plans[0]), "kernels: avx512") ? "avx512" : "sgemm",
                   med[0] * 1e3, f[0] / med[0] * 1e-9, med[1] * 1e3, f[1] / med[1] * 1e-9,
                   median(per[0], repeats));
            if (both)
                printf(" %.2f | %.2f | %.3f | %.2fx, %.2fx |", med[2] * 1e3, med[3] * 1e3,
                       median(per[1], repeats), median(speed[0], repeats),
                       median(speed[1], repeats));
            printf("\n");
            fflush(stdout);
            free_tensors(ctx, &x);
            for (int i = 0; i < np; i++) fj_plan_destroy(plans[i]);
        }
    fj_context_destroy(ctx);
    if (sctx) fj_context_destroy(sctx);
    fj_cpu_decode_force(FJ_CPU_DECODE_AUTO);
    return 0;
}

static int run_bf16(const char *filter)
{
    fj_cpu_decode_force(FJ_CPU_DECODE_OFF); /* the tiled path: no AMX row blocks */
    /* plans are cached per context: the widened plans get one of their own */
    fj_context *ctx = make_context(FJ_BACKEND_CPU), *wctx = make_context(FJ_BACKEND_CPU);
    printf("threads: %d; medians of %d rounds (each round: the three plans once, the order "
           "turned round by round)\n\n",
           context_threads(ctx), repeats);
    printf("| shape | dot kernels | dot ms | GF/s | widened ms | GF/s | f32 ms | GF/s | dot/f32 "
           "| dot/widened |\n");
    printf("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    static const int seqs[] = {512, 1024, 2048};
    static const int dims[] = {64, 128, 256};
    static const int heads[][2] = {{8, 8}, {32, 8}};
    for (size_t a = 0; a < sizeof seqs / sizeof seqs[0]; a++)
        for (size_t b = 0; b < sizeof dims / sizeof dims[0]; b++)
            for (size_t h = 0; h < sizeof heads / sizeof heads[0]; h++)
                for (int c = 0; c < 2; c++) {
                    shape sh = {FJ_BF16,     1,
                                heads[h][0], heads[h][1],
                                seqs[a],     seqs[a],
                                dims[b],     c ? FJ_CAUSAL_BOTTOM_RIGHT : FJ_CAUSAL_NONE,
                                -1,          -1};
                    char name[160];
                    snprintf(name, sizeof name, "%s", shape_str(&sh));
                    if (filter && !strstr(name, filter)) continue;
                    fj_attention_desc d[3];
                    d[0] = d[1] = shape_desc(&sh);
                    sh.dtype = FJ_F32;
                    d[2] = shape_desc(&sh);
                    fj_plan *plans[3];
                    for (int i = 0; i < 3; i++) {
                        fj_cpu_tiled_force_widened_bf16(i == 1);
                        fj_status s = fj_plan_create(i == 1 ? wctx : ctx, &d[i], &plans[i]);
                        fj_cpu_tiled_force_widened_bf16(false);
                        if (s) die("fj_plan_create", s);
                    }
                    tensors x[2] = {make_tensors(ctx, &d[0]), make_tensors(ctx, &d[2])};
                    const double f = fj_attention_flops(&d[0]);
                    double t[3][64], vs_f32[64], vs_wide[64];
                    for (int i = 0; i < 3; i++) time_plan(plans[i], &x[i == 2]);
                    for (int r = 0; r < repeats; r++) {
                        for (int i = 0; i < 3; i++) {
                            const int at = (i + r) % 3;
                            t[at][r] = time_plan(plans[at], &x[at == 2]);
                        }
                        vs_f32[r] = t[2][r] / t[0][r];
                        vs_wide[r] = t[1][r] / t[0][r];
                    }
                    double med[3];
                    for (int i = 0; i < 3; i++) med[i] = median(t[i], repeats);
                    const char *k = strstr(fj_plan_describe(plans[0]), "kernels: ");
                    printf("| %s | %.*s | %.2f | %.1f | %.2f | %.1f | %.2f | %.1f | %.2fx | "
                           "%.2fx |\n",
                           name, k ? (int)strcspn(k + 9, ",\n") : 1, k ? k + 9 : "-", med[0] * 1e3,
                           f / med[0] * 1e-9, med[1] * 1e3, f / med[1] * 1e-9, med[2] * 1e3,
                           f / med[2] * 1e-9, median(vs_f32, repeats), median(vs_wide, repeats));
                    fflush(stdout);
                    free_tensors(ctx, &x[0]);
                    free_tensors(ctx, &x[1]);
                    for (int i = 0; i < 3; i++) fj_plan_destroy(plans[i]);
                }
    fj_context_destroy(ctx);
    fj_context_destroy(wctx);
    fj_cpu_decode_force(FJ_CPU_DECODE_AUTO);
    return 0;
}

/* "64,128,256" into v (at most cap values in [1, FJ_CPU_TILED_MAX_BLOCK]); 0 on error. */
static int parse_list(const char *s, int *v, int cap)
{
    int n = 0;
    while (*s && n < cap) {
        char *end;
        long x = strtol(s, &end, 10);
        if (end == s || x < 1 || x > FJ_CPU_TILED_MAX_BLOCK) break;
        v[n++] = (int)x;
        s = *end == ',' ? end + 1 : end;
        if (!*end) return n;
    }
    fprintf(stderr, "bench_cpu_tiled sweep: bad block list (at most %d sizes in [1, %d])\n", cap,
            FJ_CPU_TILED_MAX_BLOCK);
    return 0;
}

static int run_sweep(char **argv, int argc)
{
    shape sh = {FJ_F32, 0, 0, 0, 0, 0, 0, FJ_CAUSAL_NONE, -1, -1};
    if (!parse_dtype(argv[0], &sh.dtype) || !parse_causal(argv[7], &sh.causal)) {
        fprintf(stderr, "bench_cpu_tiled sweep: bad dtype or causal\n");
        return 2;
    }
    sh.b = atoi(argv[1]);
    sh.hq = atoi(argv[2]);
    sh.hkv = atoi(argv[3]);
    sh.sq = atoi(argv[4]);
    sh.sk = atoi(argv[5]);
    sh.d = atoi(argv[6]);
    fj_attention_desc d = shape_desc(&sh);
    double flops = fj_attention_flops(&d);
    enum { MAXN = 8, MAXCELLS = MAXN * MAXN + 1 };
    int bqs[MAXN] = {32, 64, 128, 192, 256, 384}, bks[MAXN] = {64, 128, 256, 512, 1024, 2048};
    int NQ = 6, NK = 6;
    if (argc > 8 && !(NQ = parse_list(argv[8], bqs, MAXN))) return 2;
    if (argc > 9 && !(NK = parse_list(argv[9], bks, MAXN))) return 2;
    const int CELLS = NQ * NK + 1;
    fj_context *ctx = make_context(FJ_BACKEND_CPU);
    tensors t = make_tensors(ctx, &d);
    /* Every cell's plan first (the last one: the heuristic), then the cells
       timed in turn, repeats times, so a burst of load from elsewhere slows
       one run of each cell rather than every run of a few. */
    fj_plan *plans[MAXCELLS];
    for (int c = 0; c < CELLS; c++) {
        fj_status s = c < NQ * NK ? fj_cpu_tiled_force_blocks(bqs[c / NK], bks[c % NK])
                                  : fj_cpu_tiled_force_blocks(0, 0);
        if (s) die("fj_cpu_tiled_force_blocks", s);
        if ((s = fj_plan_create(ctx, &d, &plans[c]))) die("fj_plan_create", s);
        time_plan(plans[c], &t);
    }
    static double times[MAXCELLS][64];
    for (int r = 0; r < repeats; r++)
        for (int c = 0; c < CELLS; c++) times[c][r] = time_plan(plans[c], &t);
    printf("%s: GFLOP/s (best of %d) by block_q (rows) x block_k (columns)\n%6s", shape_str(&sh),
           repeats, "");
    for (int c = 0; c < NK; c++) printf(" %7d", bks[c]);
    printf("\n");
    for (int c = 0; c < CELLS; c++) {
        if (c == NQ * NK) printf("\nheuristic:");
        else if (c % NK == 0) printf("%6d", bqs[c / NK]);
        double best = times[c][0];
        for (int r = 1; r < repeats; r++) best = times[c][r] < best ? times[c][r] : best;
        printf(" %7.1f", flops / best * 1e-9);
        if (c % NK == NK - 1 || c == NQ * NK) printf("\n");
    }
    printf("%s", fj_plan_describe(plans[NQ * NK]));
    for (int c = 0; c < CELLS; c++) fj_plan_destroy(plans[c]);
    free_tensors(ctx, &t);
    fj_context_destroy(ctx);
    return 0;
}

static long peak_rss_kib(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

static int run_memory(char **argv, int argc)
{
    shape sh = {FJ_F32, 1, 1, 1, 0, 0, 0, FJ_CAUSAL_NONE, -1, -1};
    if (!parse_dtype(argv[0], &sh.dtype)) {
        fprintf(stderr, "bench_cpu_tiled memory: bad dtype\n");
        return 2;
    }
    sh.sq = sh.sk = atoi(argv[1]);
    sh.d = atoi(argv[2]);
    bool reference = argc > 3 && !strcmp(argv[3], "reference");
    fj_attention_desc d = shape_desc(&sh);
    fj_context *ctx = make_context(reference ? FJ_BACKEND_CPU_REFERENCE : FJ_BACKEND_CPU);
    tensors t = make_tensors(ctx, &d);
    long before = peak_rss_kib();
    fj_plan *plan;
    fj_status s = fj_plan_create(ctx, &d, &plan);
    if (s) die("fj_plan_create", s);
    double secs = time_plan(plan, &t);
    long after = peak_rss_kib();
    printf("%s on %s: %.2f s, %.1f GFLOP/s\n", shape_str(&sh), reference ? "cpu-reference" : "cpu",
           secs, fj_attention_flops(&d) / secs * 1e-9);
    printf("inputs + output + lse: %.1f MiB\n", (double)t.in_out_bytes / (1 << 20));
    printf("peak RSS: %.1f MiB with the tensors filled, %.1f MiB after the run (+%.1f MiB)\n",
           before / 1024.0, after / 1024.0, (after - before) / 1024.0);
    printf("%s", fj_plan_describe(plan));
    fj_plan_destroy(plan);
    free_tensors(ctx, &t);
    fj_context_destroy(ctx);
    return 0;
}

int main(int argc, char **argv)
{
    int i = 1;
    for (; i + 1 < argc && argv[i][0] == '-'; i += 2) {
        if (!strcmp(argv[i], "-c")) {
            cpu_clock = true;
            i--;
            continue;
        }
        if (!strcmp(argv[i], "-t")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-r")) repeats = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-l")) bhsd = !strcmp(argv[i + 1], "bhsd");
        else if (!strcmp(argv[i], "-b")) {
            int bq, bk;
            if (sscanf(argv[i + 1], "%d,%d", &bq, &bk) != 2 || fj_cpu_tiled_force_blocks(bq, bk)) {
                fprintf(stderr, "bench_cpu_tiled: -b wants BLOCK_Q,BLOCK_K\n");
                return 2;
            }
        } else if (!strcmp(argv[i], "-k")) fj_cpu_tiled_force_blas(!strcmp(argv[i + 1], "sgemm"));
        else if (!strcmp(argv[i], "-o"))
            decode_other = !strcmp(argv[i + 1], "widened")   ? FJ_CPU_DECODE_WIDENED
                           : !strcmp(argv[i + 1], "generic") ? FJ_CPU_DECODE_GENERIC
                                                             : FJ_CPU_DECODE_OFF;
        else break;
    }
    if (repeats < 1 || repeats > 64 || threads < 0) {
        fprintf(stderr, "bench_cpu_tiled: -r must be in [1, 64], -t >= 0\n");
        return 2;
    }
    const char *mode = i < argc ? argv[i] : "table";
    /* OpenBLAS starts its threads when it is loaded, and they spin in
       sched_yield for about 0.1 s before they sleep: let them, so they take
       no core from the first runs (nor, with -c, count in their CPU time). */
    nanosleep(&(struct timespec){0, 300 * 1000 * 1000}, NULL);
    if (!strcmp(mode, "table")) return run_table(i + 1 < argc ? argv[i + 1] : NULL);
    if (!strcmp(mode, "decode")) return run_decode(i + 1 < argc ? argv[i + 1] : NULL);
    if (!strcmp(mode, "causal")) return run_causal(i + 1 < argc ? argv[i + 1] : NULL);
    if (!strcmp(mode, "bf16")) return run_bf16(i + 1 < argc ? argv[i + 1] : NULL);
    if (!strcmp(mode, "kernels")) return run_kernels();
    if (!strcmp(mode, "prefill")) return run_prefill(i + 1 < argc ? argv[i + 1] : NULL);
#ifdef RATES
    if (!strcmp(mode, "rates")) return run_rates();
#endif
    if (!strcmp(mode, "sweep") && argc - i - 1 >= 8) return run_sweep(argv + i + 1, argc - i - 1);
    if (!strcmp(mode, "memory") && argc - i - 1 >= 3) return run_memory(argv + i + 1, argc - i - 1);
    fprintf(stderr,
            "usage: bench_cpu_tiled [-t THREADS] [-r REPEATS] table [FILTER]\n"
            "       bench_cpu_tiled [-t T] [-r R] sweep DTYPE B HQ HKV SQ SK D CAUSAL [BQS [BKS]]\n"
            "       bench_cpu_tiled [-t T] [-r R] decode [FILTER]\n"
            "       bench_cpu_tiled [-t T] [-r R] prefill [FILTER]\n"
            "       bench_cpu_tiled [-t T] [-r R] causal [FILTER]\n"
            "       bench_cpu_tiled [-t T] [-r R] bf16 [FILTER]\n"
            "       bench_cpu_tiled [-r R] kernels\n"
            "       bench_cpu_tiled rates\n"
            "       bench_cpu_tiled [-t T] memory DTYPE SQ D [reference]\n");
    return 2;
}
