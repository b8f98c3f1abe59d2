/* Paged KV cache against dense attention on the same tokens, one CPU
 * backend (docs/benchmarks.md, "Paged KV cache on the CPU"): batch
 * sequences of sq query rows over kv cached keys each, as a dense plan
 * ([batch, kv, heads_kv, dim] K and V) and as a paged plan (pools of
 * page_size-key pages; the block table in pool order, each sequence one
 * run of consecutive pages, or shuffled, the pool's pages in random order).
 * Optionally a second build of the library (its path last: dlopen'd on its
 * own, RTLD_LOCAL) times the same dense plan too, the change's baseline.
 * The plans are timed in rotating order, `rounds` times `reps` executes
 * each after 2 to warm; medians in ms, the K and V bytes read per second at
 * the medians (each sequence's keys once: 2 x batch x kv x heads_kv x dim x
 * 2 bytes), and each row's speed over the dense plan's taken round by
 * round (the machine's load moves a round's rows alike): the median and
 * the range. The first line names the CPU (/proc/cpuinfo).
 *
 *     cc -O2 -Iinclude tools/dev/paged_bench.c -Lbuild -lflashjit -ldl -o /tmp/paged_bench
 *     LD_LIBRARY_PATH=build nice -n -19 /tmp/paged_bench batch sq kv page_size \
 *         [rounds reps threads [baseline/libflashjit.so.1]]
 *
 * bf16, heads 32/8, head_dim 128, bottom-right causal; random inputs;
 * threads 0: the context's default. */
#include <dlfcn.h>
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

/* The baseline build: its context and dense plan, through its own symbols. */
typedef struct baseline {
    fj_status (*execute)(const fj_plan *, const void *, const void *, const void *, void *, float *,
                         void *);
    fj_plan *plan;
} baseline;

static int load_baseline(const char *path, const fj_attention_desc *d, int threads, baseline *b)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "baseline: %s\n", dlerror());
        return 1;
    }
    void (*options_init)(fj_context_options *) =
        (void (*)(fj_context_options *))dlsym(h, "fj_context_options_init");
    fj_status (*context_create)(const fj_context_options *, fj_context **) =
        (fj_status(*)(const fj_context_options *, fj_context **))dlsym(h, "fj_context_create");
    fj_status (*plan_create)(fj_context *, const fj_attention_desc *, fj_plan **) =
        (fj_status(*)(fj_context *, const fj_attention_desc *, fj_plan **))dlsym(h,
                                                                                 "fj_plan_create");
    *(void **)&b->execute = dlsym(h, "fj_plan_execute");
    if (!options_init || !context_create || !plan_create || !b->execute) {
        fprintf(stderr, "baseline %s: a function is missing\n", path);
        return 1;
    }
    fj_context_options o;
    options_init(&o);
    o.backend = FJ_BACKEND_CPU;
    o.cache_dir = "";
    o.tuning_file = "";
    o.cpu_threads = threads;
    fj_context *ctx;
    if (context_create(&o, &ctx) || plan_create(ctx, d, &b->plan)) {
        fprintf(stderr, "baseline %s: no context or plan\n", path);
        return 1;
    }
    return 0; /* its context and plan live as long as the process */
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: paged_bench batch sq kv page_size [rounds reps threads "
                        "[baseline/libflashjit.so.1]]\n");
        return 2;
    }
    const int B = atoi(argv[1]), SQ = atoi(argv[2]), KV = atoi(argv[3]), P = atoi(argv[4]);
    const int rounds = argc > 5 ? atoi(argv[5]) : 5, reps = argc > 6 ? atoi(argv[6]) : 10;
    const int threads = argc > 7 ? atoi(argv[7]) : 0;
    const char *base_path = argc > 8 ? argv[8] : NULL;
    const int HQ = 32, HKV = 8, D = 128, pages = (KV + P - 1) / P;
    if (B < 1 || SQ < 1 || KV < 1 || P < 1 || rounds < 1 || reps < 1) {
        fprintf(stderr, "paged_bench: sizes, rounds and reps must be >= 1\n");
        return 2;
    }
    fj_context_options o;
    fj_context_options_init(&o);
    o.backend = FJ_BACKEND_CPU;
    o.cache_dir = "";
    o.tuning_file = "";
    o.cpu_threads = threads;
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
    baseline base = {0};
    if (base_path && load_baseline(base_path, &dense, threads, &base)) return 1;
    char cpu[256] = "unknown CPU";
    FILE *info = fopen("/proc/cpuinfo", "r");
    for (char line[512]; info && fgets(line, sizeof line, info);)
        if (!strncmp(line, "model name", 10) && strchr(line, ':')) {
            snprintf(cpu, sizeof cpu, "%s", strchr(line, ':') + 2);
            cpu[strcspn(cpu, "\n")] = '\0';
            break;
        }
    if (info) fclose(info);
    fj_plan_info id, ip;
    CHECK(fj_plan_get_info(pd, &id));
    CHECK(fj_plan_get_info(pp, &ip));
    printf("cpu: %s\ndense plan (%s):\n%s\npaged plan (%s):\n%s\n", cpu, id.kernel,
           fj_plan_describe(pd), ip.kernel, fj_plan_describe(pp));
    fj_execute_extras xo, xs;
    fj_execute_extras_init(&xo);
    xo.block_table = in_order;
    xo.seqused_k = lens;
    xs = xo;
    xs.block_table = shuffled;
    enum { DENSE, IN_ORDER, SHUFFLED, BASELINE, MODES };
    const char *names[MODES] = {"dense", "paged in order", "paged shuffled", "dense, baseline"};
    const int modes = base.plan ? MODES : BASELINE;
    double *ms[MODES], *ratio[MODES];
    for (int m = 0; m < modes; m++)
        if (!(ms[m] = malloc(sizeof(double) * rounds)) ||
            !(ratio[m] = malloc(sizeof(double) * rounds)))
            return 1;
    for (int r = 0; r < rounds; r++)
        for (int i = 0; i < modes; i++) {
            const int m = (r + i) % modes; /* rotating order */
            double t0 = 0;
            for (int n = -2; n < reps; n++) { /* two to warm */
                if (n == 0) t0 = now_ms();
                if (m == BASELINE) {
                    if (base.execute(base.plan, q, k, v, out, NULL, NULL)) {
                        fprintf(stderr, "baseline execute failed\n");
                        return 1;
                    }
                } else {
                    CHECK(m == DENSE      ? fj_plan_execute(pd, q, k, v, out, NULL, NULL)
                          : m == IN_ORDER ? fj_plan_execute_ex(pp, q, k, v, out, NULL, &xo, NULL)
                                          : fj_plan_execute_ex(pp, q, k, v, out, NULL, &xs, NULL));
                }
            }
            ms[m][r] = (now_ms() - t0) / reps;
        }
    printf("b%d sq%d kv%d page_size %d, bf16 hq%d hkv%d d%d causal_br, %d threads, %d rounds x "
           "%d:\n",
           B, SQ, KV, P, HQ, HKV, D, fj_context_cpu_threads(ctx), rounds, reps);
    for (int m = 0; m < modes; m++) {
        for (int r = 0; r < rounds; r++) ratio[m][r] = ms[DENSE][r] / ms[m][r];
        qsort(ratio[m], (size_t)rounds, sizeof(double), cmp);
    }
    const double bytes = 2.0 * B * (double)KV * HKV * D * 2;
    for (int m = 0; m < modes; m++) {
        qsort(ms[m], (size_t)rounds, sizeof(double), cmp);
        printf("  %-16s median %9.3f ms (min %9.3f), K+V %6.2f GB/s", names[m], ms[m][rounds / 2],
               ms[m][0], bytes / (ms[m][rounds / 2] * 1e-3) / 1e9);
        if (m != DENSE)
            printf(", by round %.3fx the dense's speed (%.3f-%.3f)", ratio[m][rounds / 2],
                   ratio[m][0], ratio[m][rounds - 1]);
        printf("\n");
    }
    fj_plan_destroy(pd);
    fj_plan_destroy(pp);
    fj_context_destroy(ctx);
    return 0;
}
