/* The order of a decode task's loads against the machine's read rate
 * (docs/benchmarks.md, "Decode on the GQA rows: a prefetch stream in address
 * order"). A buffer of rows of 2 KiB (a key's 8 kv heads of 128 bf16
 * columns side by side) is read in pieces of `piece` rows, 256 bytes (one
 * head's part of a row) at a time, each followed by `work` x 4 FMAs (the
 * kernels' compute), by each thread over its share:
 *
 *   key-major    every head of a row, then the next row (address order)
 *   head-major   one head's part of every row of the piece, then the next
 *                head's (the order src/cpu/decode.c's kernels read in)
 *   + burst      head-major, and the whole next piece prefetched when a
 *                piece starts
 *   + stream T0  head-major, and the piece two ahead prefetched in address
 *                order, one line for each line read (into L1)
 *   + stream T1  the same into L2 (what the decode kernels do)
 *   + column     head-major, and each load's own lines two pieces ahead
 *                prefetched (the same head's part of later rows)
 *
 * Each as a percentage of the plain read of the same bytes (no compute,
 * address order) and of the compute alone (the same loop on 16 rows kept in
 * L1); the best of 5 runs each. The first line names the CPU.
 *
 *     cc -O2 -mavx512f -pthread tools/dev/read_order.c -o /tmp/read_order
 *     /tmp/read_order [MiB (256)] [threads (2)] [piece rows (16)]
 */
#define _GNU_SOURCE
#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define ROW 2048
#define HEADS 8
#define PART (ROW / HEADS)
#define RUNS 5

enum order { KEY_MAJOR, HEAD_MAJOR, BURST, STREAM_T0, STREAM_T1, COLUMN, ORDERS };
static const char *const names[ORDERS] = {"key-major",   "head-major",  "+ burst",
                                          "+ stream T0", "+ stream T1", "+ column"};

static size_t bytes;
static char *buf;
static int threads = 2, piece = 16, work, in_l1;
static enum order order;
static float sink[16 * 64];

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* One head's part of a row, and the compute after it. */
static inline __m512 part(const char *p, __m512 s, __m512 *a)
{
    const __m512 m = _mm512_set1_ps(0.9999f);
    for (int l = 0; l < PART / 64; l++)
        s = _mm512_add_ps(s, _mm512_load_ps((const float *)(p + 64 * l)));
    for (int w = 0; w < work; w++) { /* four chains, unrolled: kept in registers */
        a[0] = _mm512_fmadd_ps(a[0], m, s);
        a[1] = _mm512_fmadd_ps(a[1], m, s);
        a[2] = _mm512_fmadd_ps(a[2], m, s);
        a[3] = _mm512_fmadd_ps(a[3], m, s);
    }
    return s;
}

static void *thread_main(void *arg)
{
    const long id = (long)arg;
    const size_t rows = bytes / ROW / (size_t)threads;
    const char *base = buf + (size_t)id * rows * ROW;
    const size_t wrap = in_l1 ? 15 : ~(size_t)0; /* the compute alone: 16 rows */
    __m512 a[4], s = _mm512_setzero_ps();
    for (int i = 0; i < 4; i++) a[i] = _mm512_set1_ps(1.0001f);
    for (size_t r0 = 0; r0 < rows; r0 += (size_t)piece) {
        const int n = rows - r0 < (size_t)piece ? (int)(rows - r0) : piece;
        if (order == KEY_MAJOR) {
            for (int r = 0; r < n; r++)
                for (int h = 0; h < HEADS; h++)
                    s = part(base + ((r0 + r) & wrap) * ROW + h * PART, s, a);
            continue;
        }
        /* the bytes two pieces ahead, in address order, for the streams */
        const char *ahead = base + (r0 + 2 * (size_t)piece) * ROW;
        const char *ahead_end =
            r0 + 3 * (size_t)piece <= rows ? ahead + (size_t)piece * ROW : ahead;
        if (order == BURST && r0 + 2 * (size_t)piece <= rows)
            for (size_t l = 0; l < (size_t)piece * ROW; l += 64)
                _mm_prefetch(base + (r0 + piece) * ROW + l, _MM_HINT_T0);
        for (int h = 0; h < HEADS; h++)
            for (int r = 0; r < n; r++) {
                const char *p = base + ((r0 + r) & wrap) * ROW + h * PART;
                for (int l = 0; l < PART / 64; l++) {
                    if (order == STREAM_T0 && ahead < ahead_end) _mm_prefetch(ahead, _MM_HINT_T0);
                    if (order == STREAM_T1 && ahead < ahead_end) _mm_prefetch(ahead, _MM_HINT_T1);
                    if (order == COLUMN && r0 + r + 2 * (size_t)piece < rows)
                        _mm_prefetch(p + 2 * (size_t)piece * ROW + 64 * l, _MM_HINT_T0);
                    ahead += 64;
                }
                s = part(p, s, a);
            }
    }
    __m512 t = _mm512_add_ps(_mm512_add_ps(a[0], a[1]), _mm512_add_ps(a[2], a[3]));
    _mm512_storeu_ps(sink + 16 * id, _mm512_add_ps(t, s));
    return NULL;
}

static double best_of_runs(void)
{
    double best = 1e30;
    for (int run = 0; run < RUNS; run++) {
        pthread_t t[64];
        const double t0 = now();
        for (long i = 0; i < threads; i++) pthread_create(&t[i], NULL, thread_main, (void *)i);
        for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
        const double dt = now() - t0;
        if (dt < best) best = dt;
    }
    return best;
}

int main(int argc, char **argv)
{
    bytes = (size_t)(argc > 1 ? atol(argv[1]) : 256) << 20;
    if (argc > 2) threads = atoi(argv[2]);
    if (argc > 3) piece = atoi(argv[3]);
    if (threads < 1 || threads > 64 || piece < 1 || bytes < (size_t)threads * ROW * (size_t)piece) {
        fprintf(stderr,
                "usage: read_order [MiB >= threads x piece x 2 KiB] [threads 1-64] [piece >= 1]\n");
        return 2;
    }
    if (!(buf = aligned_alloc(4096, bytes))) return 1;
    for (size_t i = 0; i < bytes / 4; i++) ((float *)buf)[i] = 1e-6f * (float)(i & 1023);
    char line[256] = "?";
    FILE *f = fopen("/proc/cpuinfo", "r");
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "model name", 10)) break;
    if (f) fclose(f);
    printf("%s", strchr(line, ':') ? strchr(line, ':') + 2 : line);
    order = KEY_MAJOR;
    work = 0;
    const double read = best_of_runs();
    printf("%zu MiB, %d thread(s), pieces of %d rows: read %.2f ms (%.1f GB/s)\n", bytes >> 20,
           threads, piece, read * 1e3, (double)bytes / read / 1e9);
    printf("%-6s %-13s", "work", "compute (ms)");
    for (int o = 0; o < ORDERS; o++) printf(" %12s", names[o]);
    printf("   (%% of the read's rate)\n");
    const int works[] = {0, 2, 4, 8, 12};
    for (int k = 0; k < 5; k++) {
        work = works[k];
        order = KEY_MAJOR;
        in_l1 = 1;
        const double compute = best_of_runs();
        in_l1 = 0;
        printf("%-6d %-13.2f", work, compute * 1e3);
        for (int o = 0; o < ORDERS; o++) {
            order = (enum order)o;
            printf(" %11.0f%%", 100.0 * read / best_of_runs());
        }
        printf("\n");
    }
    return sink[0] == 12345.0f;
}
