/* fj_convert's throughput per dtype pair next to the same per-element
 * conversions (half.h) in a loop the compiler may not vectorize: the
 * ratio says what the vector clones buy on this CPU. For docs/benchmarks.md.
 *
 * usage: bench_convert [COUNT]   (default 1048576 elements; median of 31 runs)
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "half.h"
#include "flashjit.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The per-element conversion, kept scalar: the yardstick. */
#if defined(__clang__)
#define NO_VECTORIZE __attribute__((noinline))
#define SCALAR_LOOP _Pragma("clang loop vectorize(disable)")
#else
#define NO_VECTORIZE __attribute__((optimize("no-tree-vectorize"), noinline))
#define SCALAR_LOOP
#endif
NO_VECTORIZE static void scalar_convert(fj_dtype to, void *dst, fj_dtype from, const void *src,
                                        size_t n)
{
    SCALAR_LOOP
    for (size_t i = 0; i < n; i++) {
        float x = from == FJ_F32   ? ((const float *)src)[i]
                  : from == FJ_F16 ? fj_f16_to_f32(((const uint16_t *)src)[i])
                                   : fj_bf16_to_f32(((const uint16_t *)src)[i]);
        if (to == FJ_F32) ((float *)dst)[i] = x;
        else if (to == FJ_F16) ((uint16_t *)dst)[i] = fj_f32_to_f16(x);
        else ((uint16_t *)dst)[i] = fj_f32_to_bf16(x);
    }
}

enum { RUNS = 31 };

static double median_seconds(bool scalar, fj_dtype to, void *dst, fj_dtype from, const void *src,
                             size_t n)
{
    double t[RUNS];
    for (int r = 0; r < RUNS; r++) {
        double t0 = now();
        if (scalar) scalar_convert(to, dst, from, src, n);
        else if (fj_convert(to, dst, from, src, n) != FJ_OK) {
            fprintf(stderr, "fj_convert: %s\n", fj_last_error());
            exit(1);
        }
        t[r] = now() - t0;
    }
    qsort(t, RUNS, sizeof t[0], cmp_double);
    return t[RUNS / 2];
}

int main(int argc, char **argv)
{
    size_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : 1u << 20;
    if (!n) {
        fprintf(stderr, "usage: bench_convert [COUNT]\n");
        return 2;
    }
    float *src = malloc(n * 4), *dst = malloc(n * 4);
    uint16_t *half = malloc(n * 2);
    if (!src || !dst || !half) return 1;
    srand(1);
    for (size_t i = 0; i < n; i++) src[i] = (float)((double)rand() / RAND_MAX) * 200.0f - 100.0f;
    const fj_dtype types[3] = {FJ_F32, FJ_F16, FJ_BF16};
    printf("%zu elements, median of %d runs\n%-12s %14s %14s %8s\n", n, RUNS, "conversion",
           "fj_convert ns", "scalar ns", "ratio");
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++) {
            if (a == b) continue;
            /* a 16-bit source holds the f32 values narrowed once */
            void *in = src;
            if (types[a] != FJ_F32) {
                fj_convert(types[a], half, FJ_F32, src, n);
                in = half;
            }
            double v = median_seconds(false, types[b], dst, types[a], in, n);
            double s = median_seconds(true, types[b], dst, types[a], in, n);
            char name[32];
            snprintf(name, sizeof name, "%s->%s", fj_dtype_name(types[a]), fj_dtype_name(types[b]));
            printf("%-12s %14.3f %14.3f %7.1fx\n", name, v / (double)n * 1e9, s / (double)n * 1e9,
                   s / v);
        }
    free(src);
    free(dst);
    free(half);
    return 0;
}
