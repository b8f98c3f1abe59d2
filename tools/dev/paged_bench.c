/* Paged KV cache against dense attention on the same tokens, one CPU
 * backend (docs/benchmarks.md, "Paged KV cache on the CPU"): batch
 * sequences of sq query rows over kv cached keys each, as a dense plan
 * ([batch, kv, heads_kv, dim] K and V) and as a paged plan (pools of
 * page_size-key pages, the block table in pool order: each sequence one
 * run, no copy; or shuffled: every page copied out). The three are timed
 * in rotating order, `rounds` times `reps` executes each; medians in ms.
 *
 *     cc -O2 -Iinclude tools/dev/paged_bench.c -Lbuild -lflashjit -o /tmp/paged_bench
 *     LD_LIBRARY_PATH=build /tmp/paged_bench batch sq kv page_size [rounds reps]
 *
 * bf16, heads 32/8, head_dim 128, bottom-right causal; random inputs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "flashjit.h"

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

#define CHECK(call)                                              \
    do {                                                         \
        if ((call) != FJ_OK) {                                   \
            fprintf(stderr, "%s: %s\n", #call, fj_last_error()); \
            return 1;                                            \
        }                                                        \
    } while (0)

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: paged_bench batch sq kv page_size [rounds reps]\n");
        return 2;
    }
    const int B = atoi(argv[1]), SQ = atoi(argv[2]), KV = atoi(argv[3]), P = atoi(argv[4]);
    const int rounds = argc > 5 ? atoi(argv[5]) : 5, reps = argc > 6 ? atoi(argv[6]) : 10;
    const int HQ = 32, HKV = 8, D = 128, pages = (KV + P - 1) / P;
    fj_context_options o;
    fj_context_options_init(&o);
    o.backend = FJ_BACKEND_CPU;
    o.cache_dir = "";
    o.tuning_file = "";
    fj_context *ctx;
    CHECK(fj_context_create(&o, &ctx));

    fj_attention_desc dense, paged;
    fj_attention_desc_init(&dense, B, HQ, HKV, SQ, KV, D, FJ_BF16);
    dense.causal = FJ_CAUSAL_BOTTOM_RIGHT;
    paged = dense;
    paged.features = FJ_FEATURE_PAGED_KV;
    paged.page_size = P;
    paged.num_pages = B * pages;
    paged.max_pages = pages;

    const size_t row = (size_t)HKV * D, kv_elems = (size_t)B * pages * P * row;
    const size_t q_elems = (size_t)B * SQ * HQ * D;
    uint16_t *q = malloc(q_elems * 2), *k = malloc(kv_elems * 2), *v = malloc(kv_elems * 2);
    uint16_t *out = malloc(q_elems * 2);
    int32_t *in_order = malloc(sizeof(int32_t) * B * pages);
    int32_t *shuffled = malloc(sizeof(int32_t) * B * pages), *lens = malloc(sizeof(int32_t) * B);
    if (!q || !k || !v || !out || !in_order || !shuffled || !lens) return 1;
    srand(1);
    for (size_t i = 0; i < q_elems; i++)
        q[i] = (uint16_t)(0x3c00 | (rand() & 0x7f)) ^ (i & 1) << 15;
    for (size_t i = 0; i < kv_elems; i++) {
        k[i] = (uint16_t)(0x3c00 | (rand() & 0x7f)) ^ (i & 1) << 15;
        v[i] = (uint16_t)(0x3c00 | (rand() & 0x7f)) ^ (i & 2) << 14;
    }
    for (int i = 0; i < B * pages; i++) in_order[i] = shuffled[i] = i;
    for (int i = B * pages - 1; i > 0; i--) {
        int j = rand() % (i + 1), t = shuffled[i];
        shuffled[i] = shuffled[j];
        shuffled[j] = t;
    }
    for (int b = 0; b < B; b++) lens[b] = KV;

    /* the dense K and V: each sequence's keys, which in pool order are the
       pool's first B x KV keys when KV is a multiple of the page size */
    fj_plan *pd, *pp;
    CHECK(fj_plan_create(ctx, &dense, &pd));
    CHECK(fj_plan_create(ctx, &paged, &pp));
    printf("dense plan:\n%s\npaged plan:\n%s\n", fj_plan_describe(pd), fj_plan_describe(pp));
    fj_execute_extras xo, xs;
    fj_execute_extras_init(&xo);
    xo.block_table = in_order;
    xo.seqused_k = lens;
    xs = xo;
    xs.block_table = shuffled;
    const char *names[3] = {"dense", "paged in order", "paged shuffled"};
    double *ms[3];
    for (int m = 0; m < 3; m++) ms[m] = malloc(sizeof(double) * rounds);
    for (int r = 0; r < rounds; r++)
        for (int i = 0; i < 3; i++) {
            const int m = (r + i) % 3;  /* rotating order */
            for (int w = 0; w < 2; w++) /* warm */
                CHECK(m == 0   ? fj_plan_execute(pd, q, k, v, out, NULL, NULL)
                      : m == 1 ? fj_plan_execute_ex(pp, q, k, v, out, NULL, &xo, NULL)
                               : fj_plan_execute_ex(pp, q, k, v, out, NULL, &xs, NULL));
            double t0 = now_ms();
            for (int n = 0; n < reps; n++)
                CHECK(m == 0   ? fj_plan_execute(pd, q, k, v, out, NULL, NULL)
                      : m == 1 ? fj_plan_execute_ex(pp, q, k, v, out, NULL, &xo, NULL)
                               : fj_plan_execute_ex(pp, q, k, v, out, NULL, &xs, NULL));
            ms[m][r] = (now_ms() - t0) / reps;
        }
    printf("b%d sq%d kv%d page_size %d, bf16 hq%d hkv%d d%d causal_br, %d threads, %d rounds x "
           "%d:\n",
           B, SQ, KV, P, HQ, HKV, D, fj_context_cpu_threads(ctx), rounds, reps);
    for (int m = 0; m < 3; m++) {
        qsort(ms[m], (size_t)rounds, sizeof(double), cmp);
        printf("  %-15s median %.3f ms (min %.3f)\n", names[m], ms[m][rounds / 2], ms[m][0]);
    }
    fj_plan_destroy(pd);
    fj_plan_destroy(pp);
    fj_context_destroy(ctx);
    return 0;
}
