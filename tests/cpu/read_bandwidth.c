/* Read bandwidth (read_bandwidth.h). Each pass: every thread waits at a
 * barrier, thread 0 takes the time, all read their share, a second barrier,
 * thread 0 takes the time again. A thread's share is a contiguous run of the
 * buffers taken end to end. The loads are summed into 8 accumulators (and
 * the sum kept) so the compiler cannot drop them. */
#include "read_bandwidth.h"

#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__ELF__)
#define READ_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define READ_CLONES
#endif

typedef uint64_t vec __attribute__((vector_size(64)));

typedef struct team {
    const void *const *bufs;
    const size_t *bytes;
    int n, threads, passes;
    double *seconds;
    pthread_barrier_t barrier;
    pthread_mutex_t lock; /* start: go, or abort when a thread could not be started */
    pthread_cond_t start;
    int go, abort;
} team;

typedef struct member {
    team *t;
    int id;
    uint64_t sink;
} member;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

READ_CLONES
static uint64_t read_run(const unsigned char *p, size_t len)
{
    vec a[8] = {{0}};
    size_t i = 0;
    for (; i + 8 * sizeof(vec) <= len; i += 8 * sizeof(vec))
        for (int k = 0; k < 8; k++) {
            vec x;
            memcpy(&x, p + i + k * sizeof(vec), sizeof x);
            a[k] += x;
        }
    uint64_t s = 0;
    for (int k = 0; k < 8; k++)
        for (int l = 0; l < 8; l++) s += a[k][l];
    for (; i < len; i++) s += p[i];
    return s;
}

/* This thread's share [from, to) of the concatenated buffers. */
static uint64_t read_share(const team *t, size_t from, size_t to)
{
    uint64_t s = 0;
    size_t base = 0;
    for (int b = 0; b < t->n && base < to; base += t->bytes[b], b++) {
        size_t lo = from > base ? from - base : 0;
        size_t hi = to - base < t->bytes[b] ? to - base : t->bytes[b];
        if (lo < hi) s += read_run((const unsigned char *)t->bufs[b] + lo, hi - lo);
    }
    return s;
}

static void *member_main(void *arg)
{
    member *m = arg;
    team *t = m->t;
    pthread_mutex_lock(&t->lock);
    while (!t->go && !t->abort) pthread_cond_wait(&t->start, &t->lock);
    int abort = t->abort;
    pthread_mutex_unlock(&t->lock);
    if (abort) return NULL;
    size_t total = 0;
    for (int b = 0; b < t->n; b++) total += t->bytes[b];
    size_t from = total / (size_t)t->threads * (size_t)m->id;
    size_t to = m->id == t->threads - 1 ? total : total / (size_t)t->threads * (size_t)(m->id + 1);
    for (int p = 0; p < t->passes; p++) {
        pthread_barrier_wait(&t->barrier);
        double t0 = m->id == 0 ? now() : 0.0;
        m->sink += read_share(t, from, to);
        pthread_barrier_wait(&t->barrier);
        if (m->id == 0) t->seconds[p] = now() - t0;
    }
    return NULL;
}

int fjt_read_seconds(const void *const *bufs, const size_t *bytes, int n, int threads, int passes,
                     double *seconds)
{
    enum { MAX_THREADS = 256 };
    if (threads < 1 || threads > MAX_THREADS || passes < 1) return -1;
    team t = {.bufs = bufs,
              .bytes = bytes,
              .n = n,
              .threads = threads,
              .passes = passes,
              .seconds = seconds};
    if (pthread_barrier_init(&t.barrier, NULL, (unsigned)threads)) return -1;
    pthread_mutex_init(&t.lock, NULL);
    pthread_cond_init(&t.start, NULL);
    member m[MAX_THREADS];
    pthread_t tid[MAX_THREADS];
    int started = 1;
    for (int i = 0; i < threads; i++) m[i] = (member){&t, i, 0};
    for (; started < threads; started++)
        if (pthread_create(&tid[started], NULL, member_main, &m[started])) break;
    pthread_mutex_lock(&t.lock);
    if (started < threads) t.abort = 1;
    else t.go = 1;
    pthread_cond_broadcast(&t.start);
    pthread_mutex_unlock(&t.lock);
    if (t.go) member_main(&m[0]);
    for (int i = 1; i < started; i++) pthread_join(tid[i], NULL);
    pthread_barrier_destroy(&t.barrier);
    pthread_cond_destroy(&t.start);
    pthread_mutex_destroy(&t.lock);
    return t.go ? 0 : -1;
}
