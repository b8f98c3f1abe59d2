/* Threads against one context, for ThreadSanitizer (CI runs this suite in a
 * -Db_sanitize=thread build; the plain build runs it too, checking results):
 *  - threads x plans: each thread makes, runs and destroys its own plans
 *    while all of them also run a few plans they share, on one context;
 *  - fj_attention's plan cache under eviction: more distinct (problem,
 *    stream) keys (96) than the cache holds (64), from every thread at once,
 *    each answer checked;
 *  - the log callback swapped while other threads log.
 * Every output is checked against the double oracle (tests/common). Both CPU
 * backends; the seed is printed (FLASHJIT_TEST_SEED replays it). */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "harness.h"

#define THREADS 8
#define SHARED 3    /* plans every thread runs */
#define PROBLEMS 24 /* distinct problems */

static fjt_problem problems[PROBLEMS];

static fj_context *cpu_context(fj_backend b, int threads)
{
    fj_context_options o;
    fj_context_options_init(&o);
    o.backend = b;
    o.cache_dir = "";
    o.tuning_file = "";
    o.cpu_threads = threads;
    fj_context *ctx = NULL;
    assert_int_equal(fj_context_create(&o, &ctx), FJ_OK);
    return ctx;
}

/* Small problems of every kind: masks, GQA, dtypes, decode rows. */
static int setup(void **state)
{
    (void)state;
    fjt_rng rng;
    fjt_rng_init(&rng, fjt_seed());
    static const fj_causal causal[] = {FJ_CAUSAL_NONE, FJ_CAUSAL_BOTTOM_RIGHT, FJ_CAUSAL_TOP_LEFT};
    static const fj_dtype dtypes[] = {FJ_F32, FJ_F16, FJ_BF16};
    for (int i = 0; i < PROBLEMS; i++) {
        fj_attention_desc d;
        int hkv = 1 + i % 2, group = 1 + (i / 2) % 4;
        fj_attention_desc_init(&d, 1 + i % 3, hkv * group, hkv, i % 5 == 0 ? 1 : 3 + 7 * (i % 6),
                               5 + 11 * (i % 7), 8 + 8 * (i % 4), dtypes[i % 3]);
        d.causal = causal[(i / 3) % 3];
        if (i % 4 == 3) d.window_left = 4;
        if (!fjt_problem_make(&problems[i], &d, &rng)) return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    for (int i = 0; i < PROBLEMS; i++) fjt_problem_free(&problems[i]);
    return 0;
}

/* Runs p through plan, or through fj_attention on ctx with stream when plan
 * is NULL, on host buffers (the CPU backends take host memory), and checks
 * it; 0 when right. */
static int run_checked(const fj_plan *plan, fj_context *ctx, const void *stream,
                       const fjt_problem *p)
{
    const fj_attention_desc *d = &p->d;
    size_t es = d->dtype == FJ_F32 ? 4 : 2;
    void *o = malloc(p->o_elems * es);
    float *lse = malloc(p->lse_elems * sizeof(float));
    int bad = 1;
    if (o && lse) {
        fjt_poison(o, d->dtype, p->o_elems);
        fjt_poison_f32(lse, p->lse_elems);
        fj_status st = plan ? fj_plan_execute(plan, p->q, p->k, p->v, o, lse, NULL)
                            : fj_attention(ctx, d, p->q, p->k, p->v, o, lse, (void *)stream);
        if (st == FJ_OK) {
            fjt_error e = fjt_compare(p, o, lse);
            bad = e.rel_fro > fjt_tolerance(d->dtype) || e.nan_count || e.lse_mismatch ||
                  e.gaps_written || e.empty_not_zero;
        }
    }
    free(o);
    free(lse);
    return bad;
}

/* ---- threads x plans on one context -------------------------------------- */

typedef struct plans_job {
    fj_context *ctx;
    fj_plan *const *shared;
    int id;
    int failures;
} plans_job;

static void *plans_worker(void *arg)
{
    plans_job *j = arg;
    for (int round = 0; round < 6; round++) {
        int own = (j->id * 5 + round * 3) % PROBLEMS;
        fj_plan *plan = NULL;
        if (fj_plan_create(j->ctx, &problems[own].d, &plan) != FJ_OK) {
            j->failures++;
            continue;
        }
        j->failures += run_checked(plan, NULL, NULL, &problems[own]);
        /* describe and info are read while others run the shared plans */
        fj_plan_info info;
        if (!fj_plan_describe(j->shared[round % SHARED]) ||
            fj_plan_get_info(j->shared[(round + 1) % SHARED], &info) != FJ_OK)
            j->failures++;
        j->failures +=
            run_checked(j->shared[round % SHARED], NULL, NULL, &problems[round % SHARED]);
        fj_plan_destroy(plan);
    }
    return NULL;
}

static void test_threads_and_plans(void **state)
{
    (void)state;
    for (int b = 0; b < 2; b++) {
        fj_context *ctx = cpu_context(b ? FJ_BACKEND_CPU : FJ_BACKEND_CPU_REFERENCE, 2);
        fj_plan *shared[SHARED];
        for (int i = 0; i < SHARED; i++)
            assert_int_equal(fj_plan_create(ctx, &problems[i].d, &shared[i]), FJ_OK);
        pthread_t t[THREADS];
        plans_job jobs[THREADS];
        for (int i = 0; i < THREADS; i++) {
            jobs[i] = (plans_job){ctx, shared, i, 0};
            assert_int_equal(pthread_create(&t[i], NULL, plans_worker, &jobs[i]), 0);
        }
        int failures = 0;
        for (int i = 0; i < THREADS; i++) {
            pthread_join(t[i], NULL);
            failures += jobs[i].failures;
        }
        for (int i = 0; i < SHARED; i++) fj_plan_destroy(shared[i]);
        fj_context_destroy(ctx);
        assert_int_equal(failures, 0);
    }
}

/* ---- fj_attention's plan cache, evicting ----------------------------------- */

typedef struct oneshot_job {
    fj_context *ctx;
    int id;
    int failures;
} oneshot_job;

/* The cache keys on (problem, stream); the CPU backends ignore the stream,
 * so STREAMS made-up streams per problem give PROBLEMS x STREAMS plans. */
#define STREAMS 4

static void *oneshot_worker(void *arg)
{
    oneshot_job *j = arg;
    for (int round = 0; round < 2 * PROBLEMS; round++) {
        int k = (j->id * 7 + round) % (PROBLEMS * STREAMS);
        const void *stream = (const void *)(uintptr_t)(0x1000 + 16 * (k / PROBLEMS));
        j->failures += run_checked(NULL, j->ctx, stream, &problems[k % PROBLEMS]);
    }
    return NULL;
}

static void test_plan_cache_eviction_threads(void **state)
{
    (void)state;
    for (int b = 0; b < 2; b++) {
        fj_context *ctx = cpu_context(b ? FJ_BACKEND_CPU : FJ_BACKEND_CPU_REFERENCE, 2);
        pthread_t t[THREADS];
        oneshot_job jobs[THREADS];
        for (int i = 0; i < THREADS; i++) {
            jobs[i] = (oneshot_job){ctx, i, 0};
            assert_int_equal(pthread_create(&t[i], NULL, oneshot_worker, &jobs[i]), 0);
        }
        int failures = 0;
        for (int i = 0; i < THREADS; i++) {
            pthread_join(t[i], NULL);
            failures += jobs[i].failures;
        }
        fj_context_destroy(ctx);
        assert_int_equal(failures, 0);
    }
}

/* ---- the log callback swapped while others log ------------------------------ */

static atomic_long lines_a, lines_b;

static void count_a(fj_log_level level, const char *msg, void *user)
{
    (void)level;
    (void)msg;
    (void)user;
    atomic_fetch_add(&lines_a, 1);
}

static void count_b(fj_log_level level, const char *msg, void *user)
{
    (void)level;
    (void)msg;
    atomic_fetch_add((atomic_long *)user, 1);
}

static atomic_int logging_done;

typedef struct logging_job {
    fj_context *ctx;
    int failures;
} logging_job;

/* Plan creation logs the plan at debug level. */
static void *logging_worker(void *arg)
{
    logging_job *j = arg;
    for (int round = 0; round < 300; round++) {
        fj_plan *plan = NULL;
        if (fj_plan_create(j->ctx, &problems[round % PROBLEMS].d, &plan) != FJ_OK) j->failures++;
        fj_plan_destroy(plan);
    }
    return NULL;
}

static void *swapping_worker(void *arg)
{
    (void)arg;
    for (int i = 0; !atomic_load(&logging_done); i++) {
        switch (i % 3) {
        case 0: fj_set_log_callback(count_a, FJ_LOG_DEBUG, NULL); break;
        case 1: fj_set_log_callback(count_b, FJ_LOG_INFO, &lines_b); break;
        default: fj_set_log_callback(NULL, FJ_LOG_OFF, NULL); break;
        }
    }
    return NULL;
}

/* With FLASHJIT_LOG unset the library never prints: a line whose callback
 * was removed while it was being formatted must not fall through to
 * stderr. stderr goes to a file for the test to look at. */
static void test_log_callback_swapped(void **state)
{
    (void)state;
    bool env_logging = getenv("FLASHJIT_LOG") && *getenv("FLASHJIT_LOG");
    fflush(stderr);
    FILE *captured = tmpfile();
    assert_non_null(captured);
    int saved_stderr = dup(2);
    assert_true(saved_stderr >= 0);
    assert_true(dup2(fileno(captured), 2) >= 0);
    atomic_store(&lines_a, 0);
    atomic_store(&lines_b, 0);
    atomic_store(&logging_done, 0);
    fj_set_log_callback(count_a, FJ_LOG_DEBUG, NULL);
    fj_context *ctx = cpu_context(FJ_BACKEND_CPU, 1);
    pthread_t swapper, loggers[4];
    logging_job jobs[4];
    assert_int_equal(pthread_create(&swapper, NULL, swapping_worker, NULL), 0);
    for (int i = 0; i < 4; i++) {
        jobs[i] = (logging_job){ctx, 0};
        assert_int_equal(pthread_create(&loggers[i], NULL, logging_worker, &jobs[i]), 0);
    }
    for (int i = 0; i < 4; i++) pthread_join(loggers[i], NULL);
    atomic_store(&logging_done, 1);
    pthread_join(swapper, NULL);
    /* and one line that surely reaches a callback */
    fj_set_log_callback(count_a, FJ_LOG_DEBUG, NULL);
    fj_plan *plan = NULL;
    assert_int_equal(fj_plan_create(ctx, &problems[0].d, &plan), FJ_OK);
    fj_plan_destroy(plan);
    fj_set_log_callback(NULL, FJ_LOG_OFF, NULL);
    fj_context_destroy(ctx);
    fflush(stderr);
    dup2(saved_stderr, 2);
    close(saved_stderr);
    long printed = ftell(captured) >= 0 ? (fseek(captured, 0, SEEK_END), ftell(captured)) : -1;
    fclose(captured);
    if (!env_logging && printed != 0)
        fail_msg("%ld bytes of log went to stderr with FLASHJIT_LOG unset", printed);
    for (int i = 0; i < 4; i++) assert_int_equal(jobs[i].failures, 0);
    printf("# log lines: %ld to the first callback, %ld to the second\n", atomic_load(&lines_a),
           atomic_load(&lines_b));
    assert_true(atomic_load(&lines_a) > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_threads_and_plans),
        cmocka_unit_test(test_plan_cache_eviction_threads),
        cmocka_unit_test(test_log_callback_swapped),
    };
    return cmocka_run_group_tests_name("threads", tests, setup, teardown);
}
