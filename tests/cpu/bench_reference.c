/* Benchmark (not a test): the CPU reference's time against the time of its
 * two sgemm calls alone, run the same way (same block shapes, same pool,
 * same threads), at batch 1, 8 heads, S = 2048, D = 128, F32 by default.
 * The bar: reference <= 1.5x the sgemms, i.e. the softmax, masking
 * and conversions cost at most half as much again as the matrix products.
 *
 * usage: bench_reference [seqlen [head_dim [heads [repeats]]]] */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu/blas_threads.h"
#include "pool.h"
#include "flashjit.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct gemm_job {
    int rows, sk, d;
    float *ws; /* per worker: q, k, v, scores, o */
    size_t ws_floats;
} gemm_job;

/* The reference's two products for one block of query rows. */
static void gemm_task(void *arg, int64_t t, int worker)
{
    (void)t;
    gemm_job *j = arg;
    float *q = j->ws + (size_t)worker * j->ws_floats, *k = q + (size_t)j->rows * j->d;
    float *v = k + (size_t)j->sk * j->d, *s = v + (size_t)j->sk * j->d,
          *o = s + (size_t)j->rows * j->sk;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, j->rows, j->sk, j->d, 1.0f, q, j->d, k,
                j->d, 0.0f, s, j->sk);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, j->rows, j->d, j->sk, 1.0f, s, j->sk, v,
                j->d, 0.0f, o, j->d);
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    int S = argc > 1 ? atoi(argv[1]) : 2048, D = argc > 2 ? atoi(argv[2]) : 128;
    int H = argc > 3 ? atoi(argv[3]) : 8, R = argc > 4 ? atoi(argv[4]) : 7;
    fj_context_options o;
    fj_context_options_init(&o);
    o.backend = FJ_BACKEND_CPU_REFERENCE;
    o.cache_dir = "";
    fj_context *ctx;
    if (fj_context_create(&o, &ctx)) return fprintf(stderr, "%s\n", fj_last_error()), 1;
    fj_attention_desc d;
    fj_attention_desc_init(&d, 1, H, H, S, S, D, FJ_F32);
    fj_plan *plan;
    if (fj_plan_create(ctx, &d, &plan)) return fprintf(stderr, "%s\n", fj_last_error()), 1;
    int rows = 0, threads = 0;
    const char *desc = fj_plan_describe(plan);
    const char *b = strstr(desc, "block of "), *t = strstr(desc, "MiB per thread, ");
    if (!b || !t || sscanf(b, "block of %d", &rows) != 1 ||
        sscanf(t, "MiB per thread, %d", &threads) != 1)
        return fprintf(stderr, "cannot read the block height from:\n%s", desc), 1;

    size_t n = (size_t)S * H * D;
    float *q = malloc(n * 4), *k = malloc(n * 4), *v = malloc(n * 4), *out = malloc(n * 4);
    for (size_t i = 0; i < n; i++)
        q[i] = k[i] = v[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;

    fj_pool *pool;
    fj_pool_create(threads, &pool);
    gemm_job job = {rows, S, D, NULL, 0};
    job.ws_floats = (size_t)rows * D * 2 + (size_t)S * D * 2 + (size_t)rows * S;
    job.ws = calloc(job.ws_floats * (size_t)threads, sizeof(float));
    int64_t tasks = (int64_t)H * ((S + rows - 1) / rows);

    double *tr = calloc((size_t)R, sizeof(double)), *tg = calloc((size_t)R, sizeof(double));
    fj_plan_execute(plan, q, k, v, out, NULL, NULL); /* warm-up */
    fj_cpu_pool_run(pool, tasks, gemm_task, &job);
    for (int r = 0; r < R; r++) { /* interleaved, so drift hits both alike */
        double t0 = now();
        fj_plan_execute(plan, q, k, v, out, NULL, NULL);
        double t1 = now();
        fj_cpu_pool_run(pool, tasks, gemm_task, &job);
        double t2 = now();
        tr[r] = t1 - t0;
        tg[r] = t2 - t1;
    }
    qsort(tr, (size_t)R, sizeof(double), cmp);
    qsort(tg, (size_t)R, sizeof(double), cmp);
    double flops = fj_attention_flops(&d);
    printf("reference  b1 h%d s%d d%d f32, %d threads, blocks of %d rows\n", H, S, D, threads,
           rows);
    printf("  reference execute   %8.2f ms  %6.1f GFLOP/s\n", tr[R / 2] * 1e3,
           flops / tr[R / 2] / 1e9);
    printf("  its two sgemms only %8.2f ms  %6.1f GFLOP/s\n", tg[R / 2] * 1e3,
           flops / tg[R / 2] / 1e9);
    printf("  ratio               %8.2f    (bar: <= 1.5)\n", tr[R / 2] / tg[R / 2]);
    fj_plan_destroy(plan);
    fj_context_destroy(ctx);
    fj_pool_destroy(pool);
    free(job.ws);
    free(q);
    free(k);
    free(v);
    free(out);
    free(tr);
    free(tg);
    return 0;
}
