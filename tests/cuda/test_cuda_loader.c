/* The CUDA backend without a GPU. Most tests install the fake driver and
 * NVRTC (fake_driver.h) and drive every path of device discovery, plan
 * creation, launch and memory, including each failure. The real loader is
 * tested in child processes (this program re-executed with a mode and an
 * environment), because it loads once per process and reads
 * FLASHJIT_LIBCUDA / FLASHJIT_LIBNVRTC only then. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cuda/cuda_api.h"
#include "fake_driver.h"
#include "flashjit.h"
#include "cuda/jit/codegen.h"
#include "cuda/jit/kernel_desc.h"
#include "cuda/jit/launch_view.h"
#include "plan.h"
#include "tune/measure.h"
#include "problem.h"

extern char **environ;

#define LOG2E 1.4426950408889634

/* ---- helpers ------------------------------------------------------------------ */

/* Contexts never use the disk cache here: fake images must not land where
 * a real run could find them. */
static fj_status make_ctx(fj_backend b, int device, fj_context **ctx)
{
    fj_context_options o;
    fj_context_options_init(&o);
    o.backend = b;
    o.device = device;
    o.cache_dir = "";
    o.tuning_file = "";
    o.cpu_threads = 1;
    return fj_context_create(&o, ctx);
}

#define assert_contains(haystack, needle)                                                    \
    do {                                                                                     \
        const char *h_ = (haystack);                                                         \
        if (!strstr(h_, (needle))) fail_msg("\"%s\" does not contain \"%s\"", h_, (needle)); \
    } while (0)

static int fake_setup(void **state)
{
    (void)state;
    fake_reset();
    fj_cuda_api_override(fake_api());
    return 0;
}

static int fake_teardown(void **state)
{
    (void)state;
    fj_cuda_api_override(NULL);
    /* Whatever a test did, every push it caused was popped. */
    assert_int_equal(fake_ctx_depth(), 0);
    fake_counts c = fake_get_counts();
    assert_int_equal(c.no_context, 0);
    return 0;
}

/* The kernel name and shared memory the backend should pick for d on sm_90. */
/* The kernel a plan for d takes on the fake device (sm_90, 132 SMs) with no
   tuning entry. */
static void expected_kernel(const fj_attention_desc *d, fj_kernel_desc *k, char *name, size_t n)
{
    fj_problem p, view;
    assert_int_equal(fj_problem_init(&p, d), FJ_OK);
    assert_int_equal(fj_kernel_desc_supports(&p), FJ_OK);
    fj_launch_view(&p, &view);
    fj_kernel_desc_for_device(&view, 90, 132, k);
    assert_int_equal(fj_kernel_desc_check(k, 0), FJ_OK);
    fj_kernel_desc_name(k, name, n);
}

typedef struct buffers {
    void *q, *k, *v, *o;
    float *lse;
} buffers;

static void alloc_buffers(fj_context *ctx, const fj_attention_desc *d, buffers *b)
{
    size_t es = d->dtype == FJ_F32 ? 4 : 2;
    size_t q = (size_t)d->batch * d->seqlen_q * d->heads_q * d->head_dim * es;
    size_t kv = (size_t)d->batch * d->seqlen_k * d->heads_kv * d->head_dim * es;
    assert_int_equal(fj_malloc(ctx, q, &b->q), FJ_OK);
    assert_int_equal(fj_malloc(ctx, kv, &b->k), FJ_OK);
    assert_int_equal(fj_malloc(ctx, kv, &b->v), FJ_OK);
    assert_int_equal(fj_malloc(ctx, q, &b->o), FJ_OK);
    void *lse;
    assert_int_equal(fj_malloc(ctx, sizeof(float) * d->batch * d->heads_q * d->seqlen_q, &lse),
                     FJ_OK);
    b->lse = lse;
}

static void free_buffers(fj_context *ctx, buffers *b)
{
    fj_free(ctx, b->q);
    fj_free(ctx, b->k);
    fj_free(ctx, b->v);
    fj_free(ctx, b->o);
    fj_free(ctx, b->lse);
}

/* ---- discovery ------------------------------------------------------------------- */

static void test_healthy_fake_describe(void **state)
{
    (void)state;
    fj_context *ctx;
    assert_int_equal(make_ctx(FJ_BACKEND_AUTO, 0, &ctx), FJ_OK);
    assert_int_equal(fj_context_backend(ctx), FJ_BACKEND_CUDA);
    const char *d = fj_context_describe(ctx);
    assert_contains(d, "cuda: Fake GPU 0, sm_90, 132 SMs, 80 GiB; driver 13.0 "
                       "(fake-libcuda.so.1); NVRTC 99.0 (fake-libnvrtc.so.13)");
    assert_contains(d, "AUTO: a CUDA device, the driver and NVRTC are usable");
    fj_context_destroy(ctx);
    fake_counts c = fake_get_counts();
    assert_int_equal(c.retains, 1);
    assert_int_equal(c.releases, 1);
}

static void test_no_driver_auto_falls_back(void **state)
{
    (void)state;
    fake_remove_driver();
    fj_context *ctx;
    assert_int_equal(make_ctx(FJ_BACKEND_AUTO, 0, &ctx), FJ_OK);
    assert_int_equal(fj_context_backend(ctx), FJ_BACKEND_CPU);
    const char *d = fj_context_describe(ctx);
    assert_contains(d, "AUTO: CUDA is not usable");
    assert_contains(d, "has no cuInit");
    assert_string_equal(fj_last_error(), "");
    fj_context_destroy(ctx);
}

static void test_no_driver_explicit(void **state)
{
    (void)state;
    fake_remove_driver();
    fj_context *ctx = (fj_context *)1;
    assert_int_equal(make_ctx(FJ_BACKEND_CUDA, 0, &ctx), FJ_ERR_NO_DEVICE);
    assert_null(ctx);
    assert_contains(fj_last_error(), "CUDA driver");
    assert_contains(fj_last_error(), "has no cuInit");
}

static void test_env_backend_cuda(void **state)
{
    (void)state;
    fake_remove_driver();
    const char *old = getenv("FLASHJIT_BACKEND");
    char *saved = old ? strdup(old) : NULL;
    setenv("FLASHJIT_BACKEND", "cuda", 1);
    fj_context *ctx;
    fj_status s = make_ctx(FJ_BACKEND_AUTO, 0, &ctx);
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", fj_last_error());
    if (saved) setenv("FLASHJIT_BACKEND", saved, 1);
    else unsetenv("FLASHJIT_BACKEND");
    free(saved);
    assert_int_equal(s, FJ_ERR_NO_DEVICE);
    assert_null(ctx);
    assert_contains(msg, "has no cuInit");
}

static void test_old_driver(void **state)
{
    (void)state;
    fake_set_driver_version(11080);
    fj_context *ctx;
    assert_int_equal(make_ctx(FJ_BACKEND_CUDA, 0, &ctx), FJ_ERR_NO_DEVICE);
    assert_contains(fj_last_error(), "version 11.8 (11080)");
    assert_contains(fj_last_error(), "12.0 (12000) or newer");
}

static void test_no_nvrtc(void **state)
{
    (void)state;
    fake_remove_nvrtc();
    fj_context *ctx;
    assert_int_equal(make_ctx(FJ_BACKEND_CUDA, 0, &ctx), FJ_ERR_NO_DEVICE);
    assert_contains(fj_last_error(), "NVRTC");
    assert_contains(fj_last_error(), "missing");
    assert_contains(fj_last_error(), "has no nvrtcVersion");
    assert_int_equal(make_ctx(FJ_BACKEND_AUTO, 0, &ctx), FJ_OK);
    assert_int_equal(fj_context_backend(ctx), FJ_BACKEND_CPU);
    assert_contains(fj_context_describe(ctx), "NVRTC");
    fj_context_destroy(ctx);
}

static void test_cuinit_fails(void **state)
{
    (void)state;
    fake_fail("cuInit", 100);
    fj_context *ctx;
    assert_int_equal(make_ctx(FJ_BACKEND_CUDA, 0, &ctx), FJ_ERR_NO_DEVICE);
    assert_contains(fj_last_error(),
                    "cuInit failed: CUDA_ERROR_NO_DEVICE (no CUDA-capable device is detected)");
    assert_int_equal(make_ctx(FJ_BACKEND_AUTO, 0, &ctx), FJ_OK);
    assert_int_equal(fj_context_backend(ctx), FJ_BACKEND_CPU);
    assert_contains(fj_context_describe(ctx), "cuInit failed");
    fj_context_destroy(ctx);
}

static void test_unknown_error_code(void **state)
{
    (void)state;
    fake_fail("cuInit", 12345);
    fj_context *ctx;
    assert_int_equal(make_ctx(FJ_BACKEND_CUDA, 0, &ctx), FJ_ERR_NO_DEVICE);
    assert_contains(fj_last_error(), "cuInit failed: CUDA error 12345");
}

static void test_zero_devices(void **state)
{
    (void)state;
    fake_set_device_count(0);
    fj_context *ctx;
    assert_int_equal(make_ctx(FJ_BACKEND_CUDA, 0, &ctx), FJ_ERR_NO_DEVICE);
    assert_string_equal(fj_last_error(), "no CUDA device (cuDeviceGetCount returned 0)");
}

static void test_device_out_of_range(void **state)
{
    (void)state;
    fake_set_device_count(2);
    fj_context *ctx;
    assert_int_equal(make_ctx(FJ_BACKEND_CUDA, 2, &ctx), FJ_ERR_NO_DEVICE);
    assert_contains(fj_last_error(), "device (2) is out of range");
    assert_contains(fj_last_error(), "2 CUDA devices (ordinals 0..1)");
    assert_int_equal(make_ctx(FJ_BACKEND_CUDA, 1, &ctx), FJ_OK);
    assert_contains(fj_context_describe(ctx), "cuda: Fake GPU 1");
    fj_context_destroy(ctx);
}

static void test_old_arch(void **state)
{
    (void)state;
    fake_set_arch(7, 5);
    fj_context *ctx;
    assert_int_equal(make_ctx(FJ_BACKEND_CUDA, 0, &ctx), FJ_ERR_NO_DEVICE);
    assert_contains(fj_last_error(), "sm_75");
    assert_contains(fj_last_error(), "sm_80");
    /* Nothing retained stays retained. */
    fake_counts c = fake_get_counts();
    assert_int_equal(c.retains, c.releases);
}

static void test_primary_ctx_retain_fails(void **state)
{
    (void)state;
    fake_fail("cuDevicePrimaryCtxRetain", 2);
    fj_context *ctx;
    assert_int_equal(make_ctx(FJ_BACKEND_CUDA, 0, &ctx), FJ_ERR_OUT_OF_MEMORY);
    assert_contains(fj_last_error(), "cuDevicePrimaryCtxRetain failed: CUDA_ERROR_OUT_OF_MEMORY");
}

/* ---- plans and launches -------------------------------------------------------- */

/* Variable-length batches and paged KV caches never with ALiBi or sinks:
 * plan creation refuses them as UNSUPPORTED naming the feature. */
static void test_features_unsupported(void **state)
{
    (void)state;
    fj_context *ctx;
    assert_int_equal(make_ctx(FJ_BACKEND_CUDA, 0, &ctx), FJ_OK);
    fj_attention_desc d;
    fj_attention_desc_init(&d, 1, 8, 2, 1, 300, 128, FJ_F16);
    static const struct {
        uint32_t features;
        const char *name;
    } f[] = {{FJ_FEATURE_VARLEN | FJ_FEATURE_SINKS,
              "attention sinks with variable-length batches: the CUDA kernels do not combine "
              "them yet"},
             {FJ_FEATURE_VARLEN | FJ_FEATURE_ALIBI,
              "ALiBi with variable-length batches: the CUDA kernels do not combine them yet"}};
    for (int i = 0; i < (int)(sizeof f / sizeof f[0]); i++) {
        d.features = f[i].features;
        fj_plan *plan = (fj_plan *)&d;
        assert_int_equal(fj_plan_create(ctx, &d, &plan), FJ_ERR_UNSUPPORTED);
        assert_null(plan);
        assert_contains(fj_last_error(), f[i].name);
    }
    /* a paged KV cache whose page size is no multiple of 16 (CUDA's rule;
       the CPU backends take any): refused at plan creation naming it */
    d.page_size = 24;
    d.num_pages = 4;
    d.max_pages = 1;
    const uint32_t paged[] = {FJ_FEATURE_PAGED_KV, FJ_FEATURE_PAGED_KV | FJ_FEATURE_VARLEN};
    for (int i = 0; i < 2; i++) {
        d.features = paged[i];
        fj_plan *plan = (fj_plan *)&d;
        assert_int_equal(fj_plan_create(ctx, &d, &plan), FJ_ERR_UNSUPPORTED);
        assert_null(plan);
        assert_contains(fj_last_error(), "page_size 24: a paged KV cache on CUDA needs a page "
                                         "size that is a multiple of 16");
    }
    fj_context_destroy(ctx);
}

/* Device int32 values (fj_malloc'd, copied from host). */
static int32_t *device_ints(fj_context *ctx, const int32_t *v, size_t n)
{
    void *m;
    assert_int_equal(fj_malloc(ctx, n * sizeof *v, &m), FJ_OK);
    assert_int_equal(fj_copy_to_device(ctx, m, v, n * sizeof *v), FJ_OK);
    return m;
}

/* Varlen and paged plans through the fake: the kernel (flash_fwd's .varlen
 * and .paged16 variants, never flash_tma or flash_wgmma on this sm_90), the
 * grid from the plan's maxima, the arrays passed to the kernel as given (the
 * host reads none of them), and FLASHJIT_CHECK=1, which copies them back
 * and refuses a bad one before launching, naming it. */
static void test_varlen_paged_launch(void **state)
{
    (void)state;
    unsetenv("FLASHJIT_CHECK");
    fj_context *ctx;
    assert_int_equal(make_ctx(FJ_BACKEND_CUDA, 0, &ctx), FJ_OK);
    fj_attention_desc d;
    fj_attention_desc_init(&d, 3, 8, 2, 100, 300, 128, FJ_F16);
    d.causal = FJ_CAUSAL_BOTTOM_RIGHT;
    d.features = FJ_FEATURE_VARLEN;
    fj_kernel_desc k;
    char name[128];
    expected_kernel(&d, &k, name, sizeof name);
    assert_int_equal(k.template_id, FJ_TEMPLATE_FLASH_FWD);
    assert_int_equal(k.varlen, 1);
    fj_plan *plan;
    assert_int_equal(fj_plan_create(ctx, &d, &plan), FJ_OK);
    const char *desc = fj_plan_describe(plan);
    assert_contains(desc, name);
    assert_contains(desc, "kernel: flash_fwd.d128.f16.causal.varlen.");
    assert_contains(desc, "flash_tma and flash_wgmma read dense [batch, seq, head] tensors only, "
                          "not packed variable-length sequences");
    assert_contains(desc, "sequences: variable-length batch (cu_seqlens_q, cu_seqlens_k)");
    buffers b;
    alloc_buffers(ctx, &d, &b);
    static const int32_t cu_q[4] = {0, 100, 101, 180}, cu_k[4] = {0, 300, 301, 400};
    static const int32_t bad_q[4] = {0, 100, 99, 180};
    int32_t *dq = device_ints(ctx, cu_q, 4), *dk = device_ints(ctx, cu_k, 4);
    int32_t *dbad = device_ints(ctx, bad_q, 4);
    fj_execute_extras x;
    fj_execute_extras_init(&x);
    x.cu_seqlens_q = dq;
    x.cu_seqlens_k = dk;
    x.total_q = 300;
    x.total_k = 900;
    int launches = fake_get_counts().launches, syncs = fake_get_counts().ctx_syncs;
    assert_int_equal(fj_plan_execute_ex(plan, b.q, b.k, b.v, b.o, b.lse, &x, NULL), FJ_OK);
    assert_int_equal(fake_get_counts().launches, launches + 1);
    assert_int_equal(fake_get_counts().ctx_syncs, syncs); /* no check: no sync */
    fake_launch l = fake_last_launch();
    assert_int_equal(l.grid[0], (100 + k.block_m - 1) / k.block_m); /* the longest's tiles */
    assert_int_equal(l.grid[1], 8);
    assert_int_equal(l.grid[2], 3);
    assert_ptr_equal(l.params.cu_seqlens_q, dq);
    assert_ptr_equal(l.params.cu_seqlens_k, dk);
    assert_null(l.params.seqused_k);
    assert_null(l.params.block_table);
    assert_int_equal(l.params.total_q, 300);
    assert_int_equal(l.params.total_k, 900);
    assert_int_equal(l.params.seqlen_q, 100);
    assert_int_equal(l.params.seqlen_k, 300);
    assert_int_equal(l.params.diag_per_seq, 1);
    /* bad offsets without the check: launched as given (the kernel clamps) */
    x.cu_seqlens_q = dbad;
    assert_int_equal(fj_plan_execute_ex(plan, b.q, b.k, b.v, b.o, b.lse, &x, NULL), FJ_OK);
    assert_int_equal(fake_get_counts().launches, launches + 2);
    fj_plan_destroy(plan);

    /* FLASHJIT_CHECK=1 (read at plan creation): checked before launch */
    setenv("FLASHJIT_CHECK", "1", 1);
    assert_int_equal(fj_plan_create(ctx, &d, &plan), FJ_OK);
    assert_contains(fj_plan_describe(plan), "FLASHJIT_CHECK=1: each execute copies them back");
    launches = fake_get_counts().launches;
    assert_int_equal(fj_plan_execute_ex(plan, b.q, b.k, b.v, b.o, b.lse, &x, NULL),
                     FJ_ERR_INVALID_ARGUMENT);
    assert_contains(fj_last_error(), "FLASHJIT_CHECK");
    assert_contains(fj_last_error(), "cu_seqlens_q[2] (99) is below cu_seqlens_q[1] (100)");
    assert_int_equal(fake_get_counts().launches, launches);
    x.cu_seqlens_q = dq;
    x.total_q = 150; /* past cu_seqlens_q[batch] = 180 */
    assert_int_equal(fj_plan_execute_ex(plan, b.q, b.k, b.v, b.o, b.lse, &x, NULL),
                     FJ_ERR_INVALID_ARGUMENT);
    assert_contains(fj_last_error(), "cu_seqlens_q[batch = 3] (180) is past total_q (150)");
    x.total_q = 300;
    syncs = fake_get_counts().ctx_syncs;
    assert_int_equal(fj_plan_execute_ex(plan, b.q, b.k, b.v, b.o, b.lse, &x, NULL), FJ_OK);
    assert_int_equal(fake_get_counts().launches, launches + 1);
    assert_int_equal(fake_get_counts().ctx_syncs, syncs + 1);
    fj_plan_destroy(plan);

    /* paged decode: 16-key pages, split-KV as the dense plan would, the
       dense combine kernel; a page past the pool named under the check */
    fj_attention_desc_init(&d, 2, 32, 8, 1, 8192, 128, FJ_BF16);
    d.causal = FJ_CAUSAL_BOTTOM_RIGHT;
    d.features = FJ_FEATURE_PAGED_KV;
    d.page_size = 16;
    d.num_pages = 1024;
    d.max_pages = 512;
    assert_int_equal(fj_plan_create(ctx, &d, &plan), FJ_OK);
    desc = fj_plan_describe(plan);
    assert_contains(desc, ".paged16.");
    assert_contains(desc, ".split.sm_90");
    assert_contains(desc, "then combine.d128.bf16.nomask.m");
    assert_contains(desc, "sequences: paged KV cache");
    int32_t *table = calloc(2 * 512, sizeof *table);
    assert_non_null(table);
    for (int i = 0; i < 2 * 512; i++) table[i] = (i * 37) % 1024;
    table[512 + 3] = 1024; /* sequence 1's fourth page: outside the pool */
    static const int32_t used[2] = {8192, 100};
    int32_t *dt = device_ints(ctx, table, 2 * 512), *du = device_ints(ctx, used, 2);
    fj_execute_extras_init(&x);
    x.block_table = dt;
    x.seqused_k = du;
    buffers pb;
    fj_attention_desc pool = d;
    pool.batch = 1024 * 16 / 8192; /* the pools' bytes: num_pages x page_size keys */
    alloc_buffers(ctx, &pool, &pb);
    launches = fake_get_counts().launches;
    assert_int_equal(fj_plan_execute_ex(plan, b.q, pb.k, pb.v, b.o, b.lse, &x, NULL),
                     FJ_ERR_INVALID_ARGUMENT);
    assert_contains(fj_last_error(), "block_table[1][3] (1024, entry 515) is outside the pools");
    assert_int_equal(fake_get_counts().launches, launches);
    table[512 + 3] = 5;
    assert_int_equal(fj_copy_to_device(ctx, dt, table, 2 * 512 * sizeof *table), FJ_OK);
    assert_int_equal(fj_plan_execute_ex(plan, b.q, pb.k, pb.v, b.o, b.lse, &x, NULL), FJ_OK);
    assert_int_equal(fake_get_counts().launches, launches + 2); /* split kernel, combine */
    l = fake_last_launch(); /* the combine kernel: the parameters are shared */
    assert_ptr_equal(l.params.block_table, dt);
    assert_ptr_equal(l.params.seqused_k, du);
    assert_int_equal(l.params.bt_stride, 512);
    assert_int_equal(l.params.num_pages, 1024);
    assert_int_equal(l.params.table_keys, 8192); /* min(seqlen_k, 512 pages of 16 keys) */
    assert_true(l.params.num_splits > 1);
    fj_plan_destroy(plan);
    unsetenv("FLASHJIT_CHECK");

    free(table);
    fj_free(ctx, dq);
    fj_free(ctx, dk);
    fj_free(ctx, dbad);
    fj_free(ctx, dt);
    fj_free(ctx, du);
    free_buffers(ctx, &b);
    free_buffers(ctx, &pb);
    fj_context_destroy(ctx);
}

static void test_plan_launch_records(void **state)
{
    (void)state;
    fj_context *ctx;
    assert_int_equal(make_ctx(FJ_BACKEND_CUDA, 0, &ctx), FJ_OK);
    fj_attention_desc d;
    fj_attention_desc_init(&d, 2, 8, 2, 100, 300, 128, FJ_F16);
    d.causal = FJ_CAUSAL_BOTTOM_RIGHT;
    fj_kernel_desc k;
    char name[128];
    expected_kernel(&d, &k, name, sizeof name);

    fj_plan *plan;
    assert_int_equal(fj_plan_create(ctx, &d, &plan), FJ_OK);
    const char *desc = fj_plan_describe(plan);
    assert_contains(desc, name);
    assert_contains(desc, "why: heuristic for d128 on sm_90");
    assert_contains(desc, "registers per thread");
    assert_contains(desc, "compiled by NVRTC");

    buffers b;
    alloc_buffers(ctx, &d, &b);
    assert_int_equal(fj_plan_execute(plan, b.q, b.k, b.v, b.o, b.lse, NULL), FJ_OK);
    fake_launch l = fake_last_launch();
    assert_int_equal(fake_get_counts().launches, 1);
    const unsigned m_tiles = (100 + k.block_m - 1) / k.block_m;
    if (k.template_id == FJ_TEMPLATE_FLASH_TMA) {
        /* persistent: one block per work tile, at most one per SM */
        assert_int_equal(l.grid[0], m_tiles * 8 * 2 < 132 ? m_tiles * 8 * 2 : 132);
        assert_int_equal(l.grid[1], 1);
        assert_int_equal(l.grid[2], 1);
    } else {
        /* one query tile */
        assert_int_equal(l.grid[0], m_tiles);
        assert_int_equal(l.grid[0], 1);
        assert_int_equal(l.grid[1], 8);
        assert_int_equal(l.grid[2], 2);
    }
    assert_int_equal(l.block[0], 32 * k.warps);
    assert_int_equal(l.block[1], 1);
    assert_int_equal(l.block[2], 1);
    assert_int_equal(l.smem, fj_kernel_desc_smem_bytes(&k));
    assert_null(l.stream);
    /* the 4 query heads of a kv head each read its K and V */
    assert_int_equal(l.params.kv_read_once, 0);
    assert_ptr_equal(l.ctx, fake_primary_context(0));
    const fj_fwd_params *p = &l.params;
    assert_ptr_equal(p->q, b.q);
    assert_ptr_equal(p->k, b.k);
    assert_ptr_equal(p->v, b.v);
    assert_ptr_equal(p->o, b.o);
    assert_ptr_equal(p->lse, b.lse);
    assert_null(p->o_partial);
    assert_null(p->lse_partial);
    /* dense [b, s, h, d] */
    assert_int_equal(p->q_stride[0], 100 * 8 * 128);
    assert_int_equal(p->q_stride[1], 8 * 128);
    assert_int_equal(p->q_stride[2], 128);
    assert_int_equal(p->k_stride[0], 300 * 2 * 128);
    assert_int_equal(p->k_stride[1], 2 * 128);
    assert_int_equal(p->v_stride[2], 128);
    assert_int_equal(p->o_stride[1], 8 * 128);
    assert_int_equal(p->diag_offset, 200);
    assert_int_equal(p->batch, 2);
    assert_int_equal(p->heads_q, 8);
    assert_int_equal(p->heads_kv, 2);
    assert_int_equal(p->group, 4);
    assert_int_equal(p->seqlen_q, 100);
    assert_int_equal(p->seqlen_k, 300);
    assert_int_equal(p->window_left, -1);
    assert_int_equal(p->window_right, -1);
    assert_int_equal(p->num_splits, 1);
    assert_true(fabs(p->scale_log2 - LOG2E / sqrt(128.0)) < 1e-6);

    /* A stream is passed through; lse NULL stays NULL. */
    int stream_token;
    assert_int_equal(fj_plan_execute(plan, b.q, b.k, b.v, b.o, NULL, &stream_token), FJ_OK);
    l = fake_last_launch();
    assert_ptr_equal(l.stream, (CUstream)(void *)&stream_token);
    assert_null(l.params.lse);

    free_buffers(ctx, &b);
    fj_plan_destroy(plan);
    fj_context_destroy(ctx);
    fake_counts c = fake_get_counts();
    assert_int_equal(c.module_loads, 1);
    assert_int_equal(c.module_unloads, 1);
    assert_int_equal(c.allocs, c.frees);
}

/* Few blocks and many keys: the keys are split, two launches (the split
 * kernel, then combine) share the plan's partials workspace. */
static void test_split_kv_launches(void **state)
{
    (void)state;
    fj_context *ctx;
    assert_int_equal(make_ctx(FJ_BACKEND_CUDA, 0, &ctx), FJ_OK);
    fj_attention_desc d;
    fj_attention_desc_init(&d, 1, 32, 8, 1, 4096, 128, FJ_BF16);
    fj_plan *plan;
    int allocs_before = fake_get_counts().allocs;
    assert_int_equal(fj_plan_create(ctx, &d, &plan), FJ_OK);
    const char *desc = fj_plan_describe(plan);
    assert_contains(desc, "split-KV: ");
    assert_contains(desc, ".split.sm_90");
    assert_contains(desc, "combine.d128.bf16");
    assert_int_equal(fake_get_counts().allocs, allocs_before + 1); /* the partials */
    buffers b;
    alloc_buffers(ctx, &d, &b);
    int launches = fake_get_counts().launches;
    assert_int_equal(fj_plan_execute(plan, b.q, b.k, b.v, b.o, b.lse, NULL), FJ_OK);
    assert_int_equal(fake_get_counts().launches, launches + 2);
    fake_launch l = fake_last_launch(); /* the combine kernel */
    /* GQA-packed: 8 kv heads of 4 rows (the 4 query heads of each) */
    assert_contains(desc, "GQA packing: the 4 query heads of each kv head");
    assert_int_equal(l.grid[0], 4); /* one combine block per (packed) query row */
    assert_int_equal(l.grid[1], 8);
    assert_int_equal(l.grid[2], 1);
    assert_int_equal(l.params.heads_q, 8);
    assert_int_equal(l.params.group, 1);
    assert_int_equal(l.params.seqlen_q, 4);
    assert_int_equal(l.params.kv_read_once, 1);  /* one block per kv head and split */
    assert_int_equal(l.params.q_stride[1], 128); /* one query head to the next */
    assert_int_equal(l.params.q_stride[2], 4 * 128);
    assert_int_equal(l.smem, 0);
    int splits = l.params.num_splits;
    /* 32 rows on the fake's 132 SMs: FJ_COMBINE_WARPS warps per row */
    assert_int_equal(l.block[0], 32 * FJ_COMBINE_WARPS);
    assert_contains(desc, "combine.d128.bf16.nomask.m128n64w8s1.split");
    assert_true(splits >= 2 && splits <= 4096 / 32 / 4); /* >= 128 keys (SPLIT_MIN_KEYS) each */
    assert_non_null(l.params.o_partial);
    assert_non_null(l.params.lse_partial);
    assert_true((char *)l.params.lse_partial - (char *)l.params.o_partial ==
                (ptrdiff_t)((size_t)splits * 32 * 128 * sizeof(float)));
    assert_ptr_equal(l.params.o, b.o);
    /* sm_90: the combine kernel is a programmatic dependent launch */
    assert_contains(desc, "(a programmatic dependent launch)");
    assert_true(l.programmatic);
    free_buffers(ctx, &b);
    fj_plan_destroy(plan);
    fj_context_destroy(ctx);
    fake_counts c = fake_get_counts();
    assert_int_equal(c.allocs, c.frees);
}

/* ALiBi and sinks (issue 22): the kernel's name carries the modifiers, each
 * execute passes the arrays in the parameters (and fj_plan_time through the
 * device-timed path), GQA decode packs with either (the parameters say
 * how; ALiBi only where flash_fwd runs it), and sinks, split, go to the
 * combine kernel only. */
static void test_alibi_sinks_launches(void **state)
{
    (void)state;
    fj_context *ctx;
    assert_int_equal(make_ctx(FJ_BACKEND_CUDA, 0, &ctx), FJ_OK);
    float *slopes, *sinks;
    assert_int_equal(fj_malloc(ctx, 32 * sizeof(float), (void **)&slopes), FJ_OK);
    assert_int_equal(fj_malloc(ctx, 32 * sizeof(float), (void **)&sinks), FJ_OK);
    fj_execute_extras x;
    fj_execute_extras_init(&x);
    x.alibi_slopes = slopes;
    x.sinks = sinks;

    /* prefill, both: the arrays in the parameters, no packing */
    fj_attention_desc d;
    fj_attention_desc_init(&d, 2, 8, 2, 100, 300, 128, FJ_F16);
    d.causal = FJ_CAUSAL_BOTTOM_RIGHT;
    d.features = FJ_FEATURE_ALIBI | FJ_FEATURE_SINKS;
    fj_plan *plan;
    assert_int_equal(fj_plan_create(ctx, &d, &plan), FJ_OK);
    assert_contains(fj_plan_describe(plan), ".causal.alibi.sinks.m");
    buffers b;
    alloc_buffers(ctx, &d, &b);
    assert_int_equal(fj_plan_execute_ex(plan, b.q, b.k, b.v, b.o, b.lse, &x, NULL), FJ_OK);
    fake_launch l = fake_last_launch();
    assert_ptr_equal(l.params.alibi_slopes, slopes);
    assert_ptr_equal(l.params.sinks, sinks);
    assert_int_equal(l.params.pack_rows, 0);
    assert_int_equal(l.params.pack_group, 1);
    /* the plan needs its arrays */
    assert_int_equal(fj_plan_execute(plan, b.q, b.k, b.v, b.o, b.lse, NULL),
                     FJ_ERR_INVALID_ARGUMENT);
    assert_contains(fj_last_error(), "alibi_slopes");
    /* timed on the device with the arrays (the fake's events: 0.25 ms) */
    double ms[2] = {0, 0};
    int launches = fake_get_counts().launches;
    assert_int_equal(fj_plan_time_ex(plan, b.q, b.k, b.v, b.o, b.lse, &x, 1, 2, ms), FJ_OK);
    assert_int_equal(fake_get_counts().launches, launches + 3);
    assert_true(fabs(ms[1] - 0.25) < 1e-9);
    assert_ptr_equal(fake_last_launch().params.sinks, sinks);
    fj_plan_destroy(plan);
    free_buffers(ctx, &b);

    /* GQA decode with sinks: packed (4 rows per kv head: row i is query
       head 4 h + i), split, the sink left to the combine kernel */
    fj_attention_desc_init(&d, 1, 32, 8, 1, 4096, 128, FJ_BF16);
    d.features = FJ_FEATURE_SINKS;
    x.alibi_slopes = NULL;
    assert_int_equal(fj_plan_create(ctx, &d, &plan), FJ_OK);
    const char *desc = fj_plan_describe(plan);
    assert_contains(desc, "GQA packing: the 4 query heads of each kv head");
    assert_contains(desc, "combine.d128.bf16.nomask.sinks.m128n64w8s1.split.sm_90");
    assert_null(strstr(desc, "sinks.m16")); /* the split kernel has none */
    alloc_buffers(ctx, &d, &b);
    assert_int_equal(fj_plan_execute_ex(plan, b.q, b.k, b.v, b.o, b.lse, &x, NULL), FJ_OK);
    l = fake_last_launch(); /* the combine kernel */
    assert_true(l.params.num_splits > 1);
    assert_int_equal(l.params.pack_rows, 1);
    assert_int_equal(l.params.pack_group, 4);
    assert_int_equal(l.params.heads_q, 8);
    assert_ptr_equal(l.params.sinks, sinks);
    assert_null(l.params.alibi_slopes);
    fj_plan_destroy(plan);

    /* the same with ALiBi: packed too (flash_fwd's alibi_tile takes each
       row's slope and position from pack_rows and pack_group) */
    d.features = FJ_FEATURE_ALIBI;
    x.alibi_slopes = slopes;
    x.sinks = NULL;
    assert_int_equal(fj_plan_create(ctx, &d, &plan), FJ_OK);
    desc = fj_plan_describe(plan);
    assert_contains(desc, "GQA packing: the 4 query heads of each kv head");
    assert_contains(desc, "flash_fwd.d128.bf16.nomask.alibi.m16");
    assert_contains(desc, "combine.d128.bf16.nomask.m128n64w8s1.split.sm_90"); /* plain */
    assert_int_equal(fj_plan_execute_ex(plan, b.q, b.k, b.v, b.o, b.lse, &x, NULL), FJ_OK);
    l = fake_last_launch();
    assert_int_equal(l.params.heads_q, 8);
    assert_int_equal(l.params.seqlen_q, 4);
    assert_int_equal(l.params.pack_rows, 1);
    assert_int_equal(l.params.pack_group, 4);
    /* the user's diag_offset, seqlen_k - 1, is the kernel's (alibi_tile) */
    assert_int_equal(l.params.diag_offset + (l.params.pack_group - 1) * l.params.pack_rows,
                     4096 - 1);
    assert_ptr_equal(l.params.alibi_slopes, slopes);
    fj_plan_destroy(plan);
    free_buffers(ctx, &b);

    /* packable ALiBi whose packed view's kernel is not flash_fwd's (128
       packed rows: flash_tma's prefill tiles on sm_90) runs unpacked, here
       on flash_fwd's decode tiles: only flash_fwd maps a packed row to its
       slope (launch_view.h, fj_launch_view_takes) */
    fj_attention_desc_init(&d, 1, 64, 8, 16, 4096, 128, FJ_BF16);
    d.features = FJ_FEATURE_ALIBI;
    {
        const int64_t bhsd[3] = {64ll * 16 * 128, 128, 16ll * 128};
        memcpy(d.q_stride, bhsd, sizeof bhsd);
        memcpy(d.o_stride, bhsd, sizeof bhsd);
    }
    assert_int_equal(fj_plan_create(ctx, &d, &plan), FJ_OK);
    desc = fj_plan_describe(plan);
    assert_null(strstr(desc, "GQA packing"));
    assert_contains(desc, "launch: grid 1 x 64 x "); /* a block row per query head */
    fj_plan_destroy(plan);

    /* d64 prefill on sm_90: flash_tma's 3-consumer tiles take sinks but
       not ALiBi (they spill), which goes to its 2-consumer tiles */
    fj_attention_desc_init(&d, 1, 8, 8, 2048, 2048, 64, FJ_BF16);
    d.features = FJ_FEATURE_SINKS;
    assert_int_equal(fj_plan_create(ctx, &d, &plan), FJ_OK);
    assert_contains(fj_plan_describe(plan), "flash_tma.d64.bf16.nomask.sinks.m192n128c3s2");
    assert_null(strstr(fj_plan_describe(plan), "; not kernel"));
    fj_plan_destroy(plan);
    d.features = FJ_FEATURE_ALIBI;
    assert_int_equal(fj_plan_create(ctx, &d, &plan), FJ_OK);
    desc = fj_plan_describe(plan);
    assert_contains(desc, "flash_tma.d64.bf16.nomask.alibi.m128n128c2s2.sm_90");
    /* the describe says why not flash_tma's tiles */
    assert_contains(desc, "; not kernel flash_tma.d64.bf16.nomask.alibi.m192n128c3s2.sm_90: alibi: "
                          "flash_tma has no registers for the bias");
    fj_plan_destroy(plan);

    fj_free(ctx, slopes);
    fj_free(ctx, sinks);
    fj_context_destroy(ctx);
    fake_counts c = fake_get_counts();
    assert_int_equal(c.allocs, c.frees);
}

/* FLASHJIT_CUDA_HEAD_GROUP forces flash_tma's (head, batch) pairs side by
 * side, clamped to the pairs (the describe and the launch's schedule
 * follow); anything but a whole number in 1..65536 fails the plan with the
 * variable named. */
static void test_head_group_forced(void **state)
{
    (void)state;
    fj_context *ctx;
    assert_int_equal(make_ctx(FJ_BACKEND_CUDA, 0, &ctx), FJ_OK);
    fj_attention_desc d; /* 4 x 32 = 128 pairs on flash_tma (sm_90) */
    fj_attention_desc_init(&d, 4, 32, 32, 4096, 4096, 64, FJ_BF16);
    const struct {
        const char *value;
        int group; /* 0: the plan fails */
    } cases[] = {{"5", 5}, {"1", 1}, {"1000", 128}, {"0", 0}, {"65537", 0}, {"4x", 0}, {"-2", 0}};
    for (int causal = 0; causal < 2; causal++) {
        d.causal = causal ? FJ_CAUSAL_BOTTOM_RIGHT : FJ_CAUSAL_NONE;
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            setenv("FLASHJIT_CUDA_HEAD_GROUP", cases[i].value, 1);
            fj_plan *plan;
            fj_status st = fj_plan_create(ctx, &d, &plan);
            if (!cases[i].group) {
                assert_int_equal(st, FJ_ERR_INVALID_ARGUMENT);
                char want[96];
                snprintf(want, sizeof want,
                         "FLASHJIT_CUDA_HEAD_GROUP (\"%s\") is not a whole number in 1..65536",
                         cases[i].value);
                assert_contains(fj_last_error(), want);
                continue;
            }
            assert_int_equal(st, FJ_OK);
            const char *desc = fj_plan_describe(plan);
            assert_contains(desc, "kernel: flash_tma.");
            assert_contains(desc, "each block takes the next tile from a counter in device "
                                  "memory of the plan's own");
            char want[64];
            snprintf(want, sizeof want, ", %d (head, batch) pairs side by side", cases[i].group);
            assert_contains(desc, want);
            buffers b;
            alloc_buffers(ctx, &d, &b);
            assert_int_equal(fj_plan_execute(plan, b.q, b.k, b.v, b.o, b.lse, NULL), FJ_OK);
            free_buffers(ctx, &b);
            fj_plan_destroy(plan);
        }
    }
    unsetenv("FLASHJIT_CUDA_HEAD_GROUP");
    fj_context_destroy(ctx);
    fake_counts c = fake_get_counts();
    assert_int_equal(c.allocs, c.frees);
}

/* FLASHJIT_CUDA_SPLITS forces the split count where split-KV is allowed,
 * clamped to the most the problem allows; 1 turns it off; anything but a
 * whole number in 1..128 fails the plan with the variable named. */
static void test_split_kv_forced(void **state)
{
    (void)state;
    fj_context *ctx;
    assert_int_equal(make_ctx(FJ_BACKEND_CUDA, 0, &ctx), FJ_OK);
    fj_attention_desc d;
    fj_attention_desc_init(&d, 1, 32, 8, 1, 4096, 128, FJ_BF16);
    /* batch 64 x 32 heads fill the fake device: unsplit by the model */
    fj_attention_desc big;
    fj_attention_desc_init(&big, 64, 32, 32, 1, 4096, 128, FJ_BF16);
    /* d160 decode takes 64-key tiles: a split keeps 128 keys, two tiles */
    fj_attention_desc wide;
    fj_attention_desc_init(&wide, 1, 32, 8, 1, 4096, 160, FJ_BF16);
    const struct {
        const char *value;
        const fj_attention_desc *desc;
        int splits; /* 0: the plan fails */
    } cases[] = {{"3", &d, 3}, {"1", &d, 1},   {"2", &big, 2}, {"128", &d, -1}, {"128", &wide, 32},
                 {"0", &d, 0}, {"129", &d, 0}, {"2x", &d, 0},  {" ", &d, 0}};
    fj_plan *plan;
    assert_int_equal(fj_plan_create(ctx, &big, &plan), FJ_OK);
    assert_null(strstr(fj_plan_describe(plan), "split-KV"));
    /* unsplit, and one block reads each K and V row; with three query tiles
       per head, three blocks do */
    fj_attention_desc prefill;
    fj_attention_desc_init(&prefill, 1, 4, 4, 300, 300, 128, FJ_BF16);
    struct {
        fj_plan *plan;
        const fj_attention_desc *desc;
        int read_once;
    } once[] = {{plan, &big, 1}, {NULL, &prefill, 0}};
    assert_int_equal(fj_plan_create(ctx, &prefill, &once[1].plan), FJ_OK);
    for (int i = 0; i < 2; i++) {
        buffers b;
        alloc_buffers(ctx, once[i].desc, &b);
        assert_int_equal(fj_plan_execute(once[i].plan, b.q, b.k, b.v, b.o, b.lse, NULL), FJ_OK);
        assert_int_equal(fake_last_launch().params.num_splits, 1);
        assert_int_equal(fake_last_launch().params.kv_read_once, once[i].read_once);
        free_buffers(ctx, &b);
        fj_plan_destroy(once[i].plan);
    }
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        setenv("FLASHJIT_CUDA_SPLITS", cases[i].value, 1);
        fj_status st = fj_plan_create(ctx, cases[i].desc, &plan);
        if (cases[i].splits == 0) {
            assert_int_equal(st, FJ_ERR_INVALID_ARGUMENT);
            char want[96];
            snprintf(want, sizeof want,
                     "FLASHJIT_CUDA_SPLITS (\"%s\") is not a whole number in 1..128",
                     cases[i].value);
            assert_contains(fj_last_error(), want);
            continue;
        }
        assert_int_equal(st, FJ_OK);
        const char *desc = fj_plan_describe(plan);
        if (cases[i].splits == 1) {
            assert_null(strstr(desc, "split-KV"));
        } else {
            /* -1: the most a 4096-key row allows, 128 keys per split */
            char want[96];
            snprintf(want, sizeof want, "(FLASHJIT_CUDA_SPLITS=%s)", cases[i].value);
            assert_contains(desc, want);
            buffers b;
            alloc_buffers(ctx, cases[i].desc, &b);
            assert_int_equal(fj_plan_execute(plan, b.q, b.k, b.v, b.o, b.lse, NULL), FJ_OK);
            int splits = fake_last_launch().params.num_splits;
            /* 2048 rows of 2 splits: a one-warp combine; 32 rows: 8 warps */
            assert_int_equal(fake_last_launch().block[0],
                             cases[i].desc == &big ? 32 : 32 * FJ_COMBINE_WARPS);
            if (cases[i].splits > 0) assert_int_equal(splits, cases[i].splits);
            else assert_true(splits > 3 && splits < 128 && 4096 / splits >= 4 * 16);
            free_buffers(ctx, &b);
        }
        fj_plan_destroy(plan);
    }
    unsetenv("FLASHJIT_CUDA_SPLITS");
    fj_context_destroy(ctx);
    fake_counts c = fake_get_counts();
    assert_int_equal(c.allocs, c.frees);
}

/* FLASHJIT_CUDA_PDL=0, or an arch before sm_90: a plain second launch. */
static void test_split_kv_without_pdl(void **state)
{
    (void)state;
    for (int round = 0; round < 2; round++) {
        if (round == 0) setenv("FLASHJIT_CUDA_PDL", "0", 1);
        else fake_set_arch(8, 0);
        fj_context *ctx;
        assert_int_equal(make_ctx(FJ_BACKEND_CUDA, 0, &ctx), FJ_OK);
        fj_attention_desc d;
        fj_attention_desc_init(&d, 1, 32, 8, 1, 4096, 128, FJ_BF16);
        fj_plan *plan;
        assert_int_equal(fj_plan_create(ctx, &d, &plan), FJ_OK);
        assert_contains(fj_plan_describe(plan), "split-KV: ");
        assert_null(strstr(fj_plan_describe(plan), "programmatic"));
        buffers b;
        alloc_buffers(ctx, &d, &b);
        int launches = fake_get_counts().launches;
        assert_int_equal(fj_plan_execute(plan, b.q, b.k, b.v, b.o, b.lse, NULL), FJ_OK);
        assert_int_equal(fake_get_counts().launches, launches + 2);
        assert_false(fake_last_launch().programmatic);
        free_buffers(ctx, &b);
        fj_plan_destroy(plan);
        fj_context_destroy(ctx);
        unsetenv("FLASHJIT_CUDA_PDL");
    }
}

/* The one-shot call keys its cached plans by stream: a split-KV plan's
 * workspace is never shared by executes on two streams. */
static void test_one_shot_split_plans_per_stream(void **state)
{
    (void)state;
    fj_context *ctx;
    assert_int_equal(make_ctx(FJ_BACKEND_CUDA, 0, &ctx), FJ_OK);
    fj_attention_desc d;
    fj_attention_desc_init(&d, 1, 32, 8, 1, 4096, 128, FJ_BF16);
    buffers b;
    alloc_buffers(ctx, &d, &b);
    void *s1 = (void *)(uintptr_t)0x1000, *s2 = (void *)(uintptr_t)0x2000;
    int allocs = fake_get_counts().allocs;
    assert_int_equal(fj_attention(ctx, &d, b.q, b.k, b.v, b.o, NULL, s1), FJ_OK);
    assert_int_equal(fake_get_counts().allocs, allocs + 1); /* the plan's partials */
    assert_int_equal(fj_attention(ctx, &d, b.q, b.k, b.v, b.o, NULL, s1), FJ_OK);
    assert_int_equal(fake_get_counts().allocs, allocs + 1); /* same stream: same plan */
    assert_int_equal(fj_attention(ctx, &d, b.q, b.k, b.v, b.o, NULL, s2), FJ_OK);
    assert_int_equal(fake_get_counts().allocs, allocs + 2); /* its own workspace */
    free_buffers(ctx, &b);
    fj_context_destroy(ctx);
    fake_counts c = fake_get_counts();
    assert_int_equal(c.allocs, c.frees);
}

static void test_window_and_top_left_params(void **state)
{
    (void)state;
    fj_context *ctx;
    assert_int_equal(make_ctx(FJ_BACKEND_CUDA, 0, &ctx), FJ_OK);
    fj_attention_desc d;
    fj_attention_desc_init(&d, 1, 4, 4, 64, 96, 64, FJ_BF16);
    d.causal = FJ_CAUSAL_TOP_LEFT;
    d.window_left = 16;
    d.window_right = 3;
    d.scale = 0.5f;
    /* BHSD */
    int64_t qs[3] = {4 * 64 * 64, 64, 64 * 64};
    int64_t ks[3] = {4 * 96 * 64, 64, 96 * 64};
    memcpy(d.q_stride, qs, sizeof qs);
    memcpy(d.o_stride, qs, sizeof qs);
    memcpy(d.k_stride, ks, sizeof ks);
    memcpy(d.v_stride, ks, sizeof ks);
    fj_kernel_desc k;
    char name[128];
    expected_kernel(&d, &k, name, sizeof name);
    assert_int_equal(k.mask, FJ_MASK_CAUSAL_WINDOW);
    fj_plan *plan;
    assert_int_equal(fj_plan_create(ctx, &d, &plan), FJ_OK);
    buffers b;
    alloc_buffers(ctx, &d, &b);
    assert_int_equal(fj_plan_execute(plan, b.q, b.k, b.v, b.o, b.lse, NULL), FJ_OK);
    fake_launch l = fake_last_launch();
    const fj_fwd_params *p = &l.params;
    assert_int_equal(p->diag_offset, 0);
    assert_int_equal(p->window_left, 16);
    assert_int_equal(p->window_right, 3);
    assert_int_equal(p->q_stride[1], 64);
    assert_int_equal(p->q_stride[2], 64 * 64);
    assert_int_equal(p->k_stride[2], 96 * 64);
    assert_true(fabs(p->scale_log2 - 0.5 * LOG2E) < 1e-6);
    free_buffers(ctx, &b);
    fj_plan_destroy(plan);
    fj_context_destroy(ctx);
}

/* Above 48 KiB of dynamic shared memory the function must be opted in, once,
 * at load; below, it must not be touched (the fake refuses a launch whose
 * shared memory exceeds what the function allows). */
static void test_dynamic_smem_opt_in(void **state)
{
    (void)state;
    static const int dims[] = {8, 64, 256};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
        fake_reset();
        fj_cuda_api_override(fake_api());
        fj_context *ctx;
        assert_int_equal(make_ctx(FJ_BACKEND_CUDA, 0, &ctx), FJ_OK);
        fj_attention_desc d;
        fj_attention_desc_init(&d, 1, 1, 1, 16, 16, dims[i], FJ_F16);
        fj_kernel_desc k;
        char name[128];
        expected_kernel(&d, &k, name, sizeof name);
        size_t smem = fj_kernel_desc_smem_bytes(&k);
        fj_plan *plan;
        assert_int_equal(fj_plan_create(ctx, &d, &plan), FJ_OK);
        buffers b;
        alloc_buffers(ctx, &d, &b);
        assert_int_equal(fj_plan_execute(plan, b.q, b.k, b.v, b.o, b.lse, NULL), FJ_OK);
        fake_counts c = fake_get_counts();
        if (smem > 48 * 1024) {
            assert_int_equal(c.max_dyn_smem_set, (int)smem);
            assert_contains(fj_plan_describe(plan), "opted in above 48 KiB");
        } else {
            assert_int_equal(c.max_dyn_smem_set, 0);
        }
        assert_int_equal(fake_last_launch().smem, smem);
        free_buffers(ctx, &b);
        fj_plan_destroy(plan);
        fj_context_destroy(ctx);
    }
}

static void test_module_cache_reuse(void **state)
{
    (void)state;
    fj_context *ctx;
    assert_int_equal(make_ctx(FJ_BACKEND_CUDA, 0, &ctx), FJ_OK);
    fj_attention_desc d1, d2, d3;
    fj_attention_desc_init(&d1, 1, 2, 2, 64, 64, 64, FJ_F16);
    fj_attention_desc_init(&d2, 3, 4, 1, 100, 17, 64, FJ_F16); /* other shape, same kernel */
    fj_attention_desc_init(&d3, 1, 2, 2, 64, 64, 96, FJ_F16);  /* other kernel */
    fj_plan *p1, *p2, *p3;
    assert_int_equal(fj_plan_create(ctx, &d1, &p1), FJ_OK);
    assert_int_equal(fj_plan_create(ctx, &d2, &p2), FJ_OK);
    fake_counts c = fake_get_counts();
    assert_int_equal(c.compiles, 1);
    assert_int_equal(c.module_loads, 1);
    assert_contains(fj_plan_describe(p2), "already loaded in this context");
    assert_int_equal(fj_plan_create(ctx, &d3, &p3), FJ_OK);
    c = fake_get_counts();
    assert_int_equal(c.compiles, 2);
    assert_int_equal(c.module_loads, 2);
    fj_plan_destroy(p1);
    fj_plan_destroy(p2);
    fj_plan_destroy(p3);
    /* Modules belong to the context, not to plans. */
    assert_int_equal(fake_get_counts().module_unloads, 0);
    fj_context_destroy(ctx);
    assert_int_equal(fake_get_counts().module_unloads, 2);
}

typedef struct racer {
    fj_context *ctx;
    const fj_attention_desc *d;
    fj_status status;
    fj_plan *plan;
} racer;

static void *race_plan(void *arg)
{
    racer *r = arg;
    r->status = fj_plan_create(r->ctx, r->d, &r->plan);
    return NULL;
}

static void test_module_cache_concurrent(void **state)
{
    (void)state;
    fake_set_compile_delay_us(50000);
    fj_context *ctx;
    assert_int_equal(make_ctx(FJ_BACKEND_CUDA, 0, &ctx), FJ_OK);
    fj_attention_desc d;
    fj_attention_desc_init(&d, 1, 2, 2, 33, 65, 32, FJ_BF16);
    enum { N = 6 };
    racer r[N];
    pthread_t t[N];
    for (int i = 0; i < N; i++) {
        r[i] = (racer){ctx, &d, FJ_ERR_INTERNAL, NULL};
        assert_int_equal(pthread_create(&t[i], NULL, race_plan, &r[i]), 0);
    }
    for (int i = 0; i < N; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < N; i++) {
        assert_int_equal(r[i].status, FJ_OK);
        fj_plan_destroy(r[i].plan);
    }
    fake_counts c = fake_get_counts();
    assert_int_equal(c.compiles, 1);
    assert_int_equal(c.module_loads, 1);
    assert_int_equal(c.no_context, 0);
    fj_context_destroy(ctx);
}

static void test_module_load_fails(void **state)
{
    (void)state;
    fj_context *ctx;
    assert_int_equal(make_ctx(FJ_BACKEND_CUDA, 0, &ctx), FJ_OK);
    fake_fail("cuModuleLoadData", 200);
    fj_attention_desc d;
    fj_attention_desc_init(&d, 1, 2, 2, 64, 64, 128, FJ_BF16);
    fj_kernel_desc k;
    char name[128];
    expected_kernel(&d, &k, name, sizeof name);
    fj_plan *plan = (fj_plan *)1;
    assert_int_equal(fj_plan_create(ctx, &d, &plan), FJ_ERR_DRIVER);
    assert_null(plan);
    assert_contains(fj_last_error(), name);
    assert_contains(fj_last_error(),
                    "cuModuleLoadData failed: CUDA_ERROR_INVALID_IMAGE (device kernel image is "
                    "invalid)");
    /* A failed build is not cached: the next attempt builds again. */
    assert_int_equal(fj_plan_create(ctx, &d, &plan), FJ_ERR_DRIVER);
    assert_int_equal(fake_get_counts().compiles, 2);
    fj_context_destroy(ctx);
    assert_int_equal(fake_get_counts().module_unloads, 0);
}

static void test_get_function_fails(void **state)
{
    (void)state;
    fj_context *ctx;
    assert_int_equal(make_ctx(FJ_BACKEND_CUDA, 0, &ctx), FJ_OK);
    fake_fail("cuModuleGetFunction", 500);
    fj_attention_desc d;
    fj_attention_desc_init(&d, 1, 2, 2, 64, 64, 128, FJ_BF16);
    fj_plan *plan;
    fj_kernel_desc k;
    char name[128];
    expected_kernel(&d, &k, name, sizeof name);
    assert_int_equal(fj_plan_create(ctx, &d, &plan), FJ_ERR_DRIVER);
    assert_contains(fj_last_error(), "cuModuleGetFunction failed: CUDA_ERROR_NOT_FOUND");
    assert_contains(fj_last_error(), fj_codegen_entry(&k));
    /* The module that was loaded was unloaded again. */
    fake_counts c = fake_get_counts();
    assert_int_equal(c.module_loads, c.module_unloads);
    fj_context_destroy(ctx);
}

static void test_compile_fails(void **state)
{
    (void)state;
    fj_context *ctx;
    assert_int_equal(make_ctx(FJ_BACKEND_CUDA, 0, &ctx), FJ_OK);
    fake_fail("nvrtcCompileProgram", 6);
    fj_attention_desc d;
    fj_attention_desc_init(&d, 1, 2, 2, 64, 64, 40, FJ_F16);
    fj_plan *plan;
    assert_int_equal(fj_plan_create(ctx, &d, &plan), FJ_ERR_COMPILE);
    assert_contains(fj_last_error(), "compilation failed on demand");
    assert_int_equal(fake_get_counts().module_loads, 0);
    fj_context_destroy(ctx);
}

/* A layout the copy engine refuses (the driver's cuTensorMapEncodeTiled
 * fails when the plan encodes its trial maps): the heuristic's flash_tma
 * gives way to the next template, and says why; flash_tma tiles given by
 * the caller fail with the driver's error. At execute, the same refusal is
 * an error of that execute. */
static void test_tensor_map_refused(void **state)
{
    (void)state;
    fj_context *ctx;
    assert_int_equal(make_ctx(FJ_BACKEND_CUDA, 0, &ctx), FJ_OK);
    fj_attention_desc d;
    fj_attention_desc_init(&d, 4, 16, 16, 1024, 1024, 128, FJ_BF16); /* 128 work tiles */
    fj_kernel_desc k;
    char name[128];
    expected_kernel(&d, &k, name, sizeof name);
    assert_int_equal(k.template_id, FJ_TEMPLATE_FLASH_TMA);
    fake_fail("cuTensorMapEncodeTiled", 1);
    fj_plan *plan;
    assert_int_equal(fj_plan_create(ctx, &d, &plan), FJ_OK);
    const char *desc = fj_plan_describe(plan);
    assert_contains(desc, "kernel: flash_wgmma.d128.bf16.nomask.");
    assert_contains(desc, "not flash_tma.d128.bf16.nomask.m128n128c2s2.sm_90: cuda: the copy "
                          "engine cannot address q");
    assert_contains(desc, "cuTensorMapEncodeTiled failed: CUDA_ERROR_INVALID_VALUE");
    fj_plan_destroy(plan);
    assert_int_equal(fj_plan_create_config(ctx, &d, "m128n128c2s2", &plan), FJ_ERR_UNSUPPORTED);
    assert_null(plan);
    assert_contains(fj_last_error(), "cannot address q");
    fake_fail("cuTensorMapEncodeTiled", 0);
    /* encoded at plan time, refused at execute: that execute fails */
    assert_int_equal(fj_plan_create(ctx, &d, &plan), FJ_OK);
    assert_contains(fj_plan_describe(plan), name);
    buffers b;
    alloc_buffers(ctx, &d, &b);
    fake_fail("cuTensorMapEncodeTiled", 1);
    assert_int_equal(fj_plan_execute(plan, b.q, b.k, b.v, b.o, b.lse, NULL), FJ_ERR_UNSUPPORTED);
    assert_contains(fj_last_error(), "cuTensorMapEncodeTiled failed");
    fake_fail("cuTensorMapEncodeTiled", 0);
    assert_int_equal(fj_plan_execute(plan, b.q, b.k, b.v, b.o, b.lse, NULL), FJ_OK);
    free_buffers(ctx, &b);
    fj_plan_destroy(plan);
    fj_context_destroy(ctx);
}

static void test_launch_fails(void **state)
{
    (void)state;
    fj_context *ctx;
    assert_int_equal(make_ctx(FJ_BACKEND_CUDA, 0, &ctx), FJ_OK);
    fj_attention_desc d;
    fj_attention_desc_init(&d, 1, 2, 2, 64, 64, 80, FJ_F16);
    fj_kernel_desc k;
    char name[128];
    expected_kernel(&d, &k, name, sizeof name);
    fj_plan *plan;
    assert_int_equal(fj_plan_create(ctx, &d, &plan), FJ_OK);
    buffers b;
    alloc_buffers(ctx, &d, &b);
    fake_fail("cuLaunchKernel", 719);
    assert_int_equal(fj_plan_execute(plan, b.q, b.k, b.v, b.o, b.lse, NULL), FJ_ERR_DRIVER);
    char want[256];
    snprintf(want, sizeof want,
             "cuLaunchKernel(%s) failed: CUDA_ERROR_LAUNCH_FAILED (unspecified launch failure)",
             name);
    assert_string_equal(fj_last_error(), want);
    /* fj_attention goes the same way */
    assert_int_equal(fj_attention(ctx, &d, b.q, b.k, b.v, b.o, NULL, NULL), FJ_ERR_DRIVER);
    assert_contains(fj_last_error(), name);
    assert_int_equal(fake_ctx_depth(), 0);
    free_buffers(ctx, &b);
    fj_plan_destroy(plan);
    fj_context_destroy(ctx);
}

static void test_unsupported_problems(void **state)
{
    (void)state;
    fj_context *ctx;
    assert_int_equal(make_ctx(FJ_BACKEND_CUDA, 0, &ctx), FJ_OK);
    fj_plan *plan;
    fj_attention_desc d;

    fj_attention_desc_init(&d, 1, 2, 2, 64, 64, 64, FJ_F32);
    assert_int_equal(fj_plan_create(ctx, &d, &plan), FJ_ERR_UNSUPPORTED);
    assert_contains(fj_last_error(), "f32");

    fj_attention_desc_init(&d, 1, 2, 2, 64, 64, 20, FJ_F16);
    assert_int_equal(fj_plan_create(ctx, &d, &plan), FJ_ERR_UNSUPPORTED);
    assert_contains(fj_last_error(), "head_dim 20");

    /* above CUDA's 256: refused at plan creation, naming the head dim and
       the CPU backends' limit (which the desc itself passes) */
    static const int big[] = {264, 300, 512, 576};
    for (size_t i = 0; i < sizeof big / sizeof big[0]; i++) {
        fj_attention_desc_init(&d, 1, 4, 2, 1 + 99 * (int)i, 300, big[i], FJ_BF16);
        plan = (fj_plan *)&d;
        assert_int_equal(fj_plan_create(ctx, &d, &plan), FJ_ERR_UNSUPPORTED);
        assert_null(plan);
        char want[64];
        snprintf(want, sizeof want, "head_dim %d: the CUDA backend takes head dims up to 256",
                 big[i]);
        assert_contains(fj_last_error(), want);
        assert_contains(fj_last_error(), "take up to 576");
    }

    /* V's head dim other than Q's and K's: refused at plan creation,
       naming head_dim_v and the CPU backends (the desc itself is valid) */
    static const int dims[][2] = {{192, 128}, {128, 64}, {64, 128}};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
        fj_attention_desc_init(&d, 1, 4, 2, 1 + 63 * (int)i, 200, dims[i][0], FJ_BF16);
        d.head_dim_v = dims[i][1];
        assert_int_equal(fj_attention_desc_validate(&d), FJ_OK);
        plan = (fj_plan *)&d;
        assert_int_equal(fj_plan_create(ctx, &d, &plan), FJ_ERR_UNSUPPORTED);
        assert_null(plan);
        char want[64];
        snprintf(want, sizeof want, "head_dim_v %d with head_dim %d", dims[i][1], dims[i][0]);
        assert_contains(fj_last_error(), want);
        assert_contains(fj_last_error(), "FJ_BACKEND_CPU");
    }

    /* a seq stride of 2*64+4 elements: rows 8 bytes off 16-byte alignment */
    fj_attention_desc_init(&d, 1, 2, 2, 64, 64, 64, FJ_F16);
    int64_t bad[3] = {64 * 132, 132, 64};
    memcpy(d.q_stride, bad, sizeof bad);
    assert_int_equal(fj_plan_create(ctx, &d, &plan), FJ_ERR_UNSUPPORTED);
    assert_contains(fj_last_error(), "q_stride[1] (the seq axis, 132 elements)");
    fj_attention_desc_init(&d, 1, 2, 2, 64, 64, 64, FJ_F16);
    int64_t bad_v[3] = {64 * 2 * 64 + 4, 2 * 64, 64};
    memcpy(d.v_stride, bad_v, sizeof bad_v);
    assert_int_equal(fj_plan_create(ctx, &d, &plan), FJ_ERR_UNSUPPORTED);
    assert_contains(fj_last_error(), "v_stride[0]");

    /* (65536 query heads over one kv head would be GQA-packed into one) */
    fj_attention_desc_init(&d, 1, 65536, 65536, 1, 1, 8, FJ_F16);
    assert_int_equal(fj_plan_create(ctx, &d, &plan), FJ_ERR_UNSUPPORTED);
    assert_contains(fj_last_error(), "heads_q (65536)");

    fj_attention_desc_init(&d, 65536, 1, 1, 1, 1, 8, FJ_F16);
    assert_int_equal(fj_plan_create(ctx, &d, &plan), FJ_ERR_UNSUPPORTED);
    assert_contains(fj_last_error(), "batch (65536)");

    /* every one was refused before any compile */
    assert_int_equal(fake_get_counts().compiles, 0);
    fj_context_destroy(ctx);
}

static void test_too_many_registers(void **state)
{
    (void)state;
    /* 2048 registers per thread: one warp per block at most */
    fake_set_num_regs(2048);
    fj_context *ctx;
    assert_int_equal(make_ctx(FJ_BACKEND_CUDA, 0, &ctx), FJ_OK);
    fj_attention_desc d;
    fj_attention_desc_init(&d, 1, 2, 2, 64, 64, 64, FJ_F16);
    fj_plan *plan;
    assert_int_equal(fj_plan_create(ctx, &d, &plan), FJ_ERR_UNSUPPORTED);
    assert_contains(fj_last_error(), "2048 registers per thread");
    fj_context_destroy(ctx);
}

static void test_misaligned_pointers(void **state)
{
    (void)state;
    fj_context *ctx;
    assert_int_equal(make_ctx(FJ_BACKEND_CUDA, 0, &ctx), FJ_OK);
    fj_attention_desc d;
    fj_attention_desc_init(&d, 1, 2, 2, 64, 64, 64, FJ_F16);
    fj_plan *plan;
    assert_int_equal(fj_plan_create(ctx, &d, &plan), FJ_OK);
    buffers b;
    alloc_buffers(ctx, &d, &b);
    char *q = b.q, *v = b.v, *o = b.o;
    assert_int_equal(fj_plan_execute(plan, q + 8, b.k, b.v, b.o, NULL, NULL),
                     FJ_ERR_INVALID_ARGUMENT);
    assert_contains(fj_last_error(), "q (");
    assert_contains(fj_last_error(), "16-byte aligned");
    assert_int_equal(fj_plan_execute(plan, b.q, b.k, v + 2, b.o, NULL, NULL),
                     FJ_ERR_INVALID_ARGUMENT);
    assert_contains(fj_last_error(), "v (");
    assert_int_equal(fj_plan_execute(plan, b.q, b.k, b.v, o + 4, NULL, NULL),
                     FJ_ERR_INVALID_ARGUMENT);
    assert_contains(fj_last_error(), "o (");
    assert_int_equal(fj_plan_execute(plan, b.q, b.k, b.v, b.o, (float *)(void *)(q + 2), NULL),
                     FJ_ERR_INVALID_ARGUMENT);
    assert_contains(fj_last_error(), "lse (");
    assert_int_equal(fake_get_counts().launches, 0);
    assert_int_equal(fj_plan_execute(plan, b.q, b.k, b.v, b.o, b.lse, NULL), FJ_OK);
    assert_string_equal(fj_last_error(), "");
    free_buffers(ctx, &b);
    fj_plan_destroy(plan);
    fj_context_destroy(ctx);
}

static void test_two_devices(void **state)
{
    (void)state;
    fake_set_device_count(2);
    fj_context *c0, *c1;
    assert_int_equal(make_ctx(FJ_BACKEND_CUDA, 0, &c0), FJ_OK);
    assert_int_equal(make_ctx(FJ_BACKEND_CUDA, 1, &c1), FJ_OK);
    fj_attention_desc d;
    fj_attention_desc_init(&d, 1, 2, 2, 64, 64, 64, FJ_F16);
    fj_plan *p0, *p1;
    assert_int_equal(fj_plan_create(c0, &d, &p0), FJ_OK);
    assert_int_equal(fj_plan_create(c1, &d, &p1), FJ_OK);
    assert_contains(fj_plan_describe(p1), "device 1: Fake GPU 1");
    buffers b0, b1;
    alloc_buffers(c0, &d, &b0);
    alloc_buffers(c1, &d, &b1);
    assert_int_equal(fj_plan_execute(p1, b1.q, b1.k, b1.v, b1.o, NULL, NULL), FJ_OK);
    assert_ptr_equal(fake_last_launch().ctx, fake_primary_context(1));
    assert_int_equal(fj_plan_execute(p0, b0.q, b0.k, b0.v, b0.o, NULL, NULL), FJ_OK);
    assert_ptr_equal(fake_last_launch().ctx, fake_primary_context(0));
    free_buffers(c0, &b0);
    free_buffers(c1, &b1);
    fj_plan_destroy(p0);
    fj_plan_destroy(p1);
    fj_context_destroy(c1);
    fj_context_destroy(c0);
    fake_counts c = fake_get_counts();
    assert_int_equal(c.retains, 2);
    assert_int_equal(c.releases, 2);
    assert_int_equal(c.module_loads, c.module_unloads);
}

static void test_time_runs(void **state)
{
    (void)state;
    fj_context *ctx;
    assert_int_equal(make_ctx(FJ_BACKEND_CUDA, 0, &ctx), FJ_OK);
    fj_attention_desc d;
    fj_attention_desc_init(&d, 1, 2, 2, 64, 64, 64, FJ_F16);
    fj_plan *plan;
    assert_int_equal(fj_plan_create(ctx, &d, &plan), FJ_OK);
    assert_int_equal(fj_plan_launches(plan), 1);
    buffers b;
    alloc_buffers(ctx, &d, &b);
    double ms[3] = {0, 0, 0};
    assert_int_equal(fj_plan_time(plan, b.q, b.k, b.v, b.o, b.lse, 2, 3, ms), FJ_OK);
    assert_int_equal(fake_get_counts().launches, 5);
    for (int i = 0; i < 3; i++) assert_true(fabs(ms[i] - 0.25) < 1e-9);
    fake_fail("cuEventCreate", 2);
    assert_int_equal(fj_plan_time(plan, b.q, b.k, b.v, b.o, b.lse, 0, 1, ms), FJ_ERR_OUT_OF_MEMORY);
    assert_contains(fj_last_error(), "cuEventCreate failed");
    free_buffers(ctx, &b);
    fj_plan_destroy(plan);
    fj_context_destroy(ctx);
}

/* ---- memory ---------------------------------------------------------------------- */

static void test_memory_round_trip(void **state)
{
    (void)state;
    fj_context *ctx;
    assert_int_equal(make_ctx(FJ_BACKEND_CUDA, 0, &ctx), FJ_OK);
    char host[300], back[300];
    for (int i = 0; i < 300; i++) host[i] = (char)(i * 7);
    void *dev;
    assert_int_equal(fj_malloc(ctx, sizeof host, &dev), FJ_OK);
    assert_int_equal((uintptr_t)dev % 64, 0);
    assert_int_equal(fj_copy_to_device(ctx, dev, host, sizeof host), FJ_OK);
    memset(back, 0, sizeof back);
    assert_int_equal(fj_copy_to_host(ctx, back, dev, sizeof back), FJ_OK);
    assert_memory_equal(host, back, sizeof host);
    assert_int_equal(fj_synchronize(ctx, NULL), FJ_OK);
    int token;
    assert_int_equal(fj_synchronize(ctx, &token), FJ_OK);
    void *empty;
    assert_int_equal(fj_malloc(ctx, 0, &empty), FJ_OK);
    assert_non_null(empty);
    fj_free(ctx, empty);
    fj_free(ctx, dev);
    fake_counts c = fake_get_counts();
    assert_int_equal(c.ctx_syncs, 1);
    assert_int_equal(c.stream_syncs, 1);
    assert_int_equal(c.allocs, 2);
    assert_int_equal(c.frees, 2);
    fj_context_destroy(ctx);
}

static void test_malloc_out_of_memory(void **state)
{
    (void)state;
    fj_context *ctx;
    assert_int_equal(make_ctx(FJ_BACKEND_CUDA, 0, &ctx), FJ_OK);
    fake_fail("cuMemAlloc", 2);
    void *p = (void *)1;
    assert_int_equal(fj_malloc(ctx, 1 << 20, &p), FJ_ERR_OUT_OF_MEMORY);
    assert_null(p);
    assert_contains(fj_last_error(), "cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY (out of memory)");
    assert_contains(fj_last_error(), "1048576 bytes");
    fj_context_destroy(ctx);
}

static void test_copy_and_sync_fail(void **state)
{
    (void)state;
    fj_context *ctx;
    assert_int_equal(make_ctx(FJ_BACKEND_CUDA, 0, &ctx), FJ_OK);
    void *dev;
    char host[16] = {0};
    assert_int_equal(fj_malloc(ctx, 16, &dev), FJ_OK);
    fake_fail("cuMemcpyHtoD", 1);
    fake_fail("cuMemcpyDtoH", 1);
    fake_fail("cuCtxSynchronize", 719);
    assert_int_equal(fj_copy_to_device(ctx, dev, host, 16), FJ_ERR_DRIVER);
    assert_contains(fj_last_error(), "cuMemcpyHtoD failed: CUDA_ERROR_INVALID_VALUE");
    assert_int_equal(fj_copy_to_host(ctx, host, dev, 16), FJ_ERR_DRIVER);
    assert_contains(fj_last_error(), "cuMemcpyDtoH failed");
    assert_int_equal(fj_synchronize(ctx, NULL), FJ_ERR_DRIVER);
    assert_contains(fj_last_error(), "cuCtxSynchronize failed: CUDA_ERROR_LAUNCH_FAILED");
    fj_free(ctx, dev);
    fj_context_destroy(ctx);
}

static void test_push_fails(void **state)
{
    (void)state;
    fj_context *ctx;
    assert_int_equal(make_ctx(FJ_BACKEND_CUDA, 0, &ctx), FJ_OK);
    fake_fail("cuCtxPushCurrent", 201);
    void *p;
    assert_int_equal(fj_malloc(ctx, 64, &p), FJ_ERR_DRIVER);
    assert_contains(fj_last_error(), "cuCtxPushCurrent failed: CUDA_ERROR_INVALID_CONTEXT");
    assert_int_equal(fj_synchronize(ctx, NULL), FJ_ERR_DRIVER);
    fj_context_destroy(ctx);
}

/* ---- the real loader, in child processes -------------------------------------- */

static int child_failures;

#define CHECK(cond, ...)                                \
    do {                                                \
        if (!(cond)) {                                  \
            printf("CHILD CHECK FAILED (%s): ", #cond); \
            printf(__VA_ARGS__);                        \
            printf("\n");                               \
            child_failures++;                           \
        }                                               \
    } while (0)

static void child_missing_driver(void)
{
    const char *path = getenv("FLASHJIT_LIBCUDA");
    const fj_cuda_api *api;
    CHECK(fj_cuda_driver(&api) == FJ_ERR_NO_DEVICE, "fj_cuda_driver succeeded");
    char first[2048];
    snprintf(first, sizeof first, "%s", fj_last_error());
    CHECK(strstr(first, path) != NULL, "message \"%s\" lacks the path %s", first, path);
    CHECK(strstr(first, "FLASHJIT_LIBCUDA") != NULL, "message \"%s\" lacks FLASHJIT_LIBCUDA",
          first);
    /* Loaded once: the second attempt reports the same reason. */
    fj_context_options o;
    fj_context_options_init(&o);
    o.backend = FJ_BACKEND_CUDA;
    o.cache_dir = "";
    fj_context *ctx;
    CHECK(fj_context_create(&o, &ctx) == FJ_ERR_NO_DEVICE, "CUDA context created");
    CHECK(strcmp(fj_last_error(), first) == 0, "second message \"%s\" differs from \"%s\"",
          fj_last_error(), first);
    o.backend = FJ_BACKEND_AUTO;
    CHECK(fj_context_create(&o, &ctx) == FJ_OK, "AUTO failed: %s", fj_last_error());
    if (ctx) {
        CHECK(fj_context_backend(ctx) != FJ_BACKEND_CUDA, "AUTO chose CUDA");
        CHECK(strstr(fj_context_describe(ctx), path) != NULL, "describe lacks %s:\n%s", path,
              fj_context_describe(ctx));
        fj_context_destroy(ctx);
    }
    printf("# real loader, FLASHJIT_LIBCUDA=%s: %s\n", path, first);
}

static void child_not_a_driver(void)
{
    const fj_cuda_api *api;
    CHECK(fj_cuda_driver(&api) == FJ_ERR_NO_DEVICE, "fj_cuda_driver succeeded");
    CHECK(strstr(fj_last_error(), "cuDriverGetVersion") != NULL, "message \"%s\"", fj_last_error());
    CHECK(strstr(fj_last_error(), "FLASHJIT_LIBCUDA") != NULL, "message \"%s\"", fj_last_error());
    printf("# real loader, FLASHJIT_LIBCUDA=%s: %s\n", getenv("FLASHJIT_LIBCUDA"), fj_last_error());
}

static void child_missing_nvrtc(void)
{
    const char *path = getenv("FLASHJIT_LIBNVRTC");
    const fj_cuda_api *api;
    CHECK(fj_cuda_nvrtc(&api) == FJ_ERR_NO_DEVICE, "fj_cuda_nvrtc succeeded");
    CHECK(strstr(fj_last_error(), path) != NULL, "message \"%s\" lacks %s", fj_last_error(), path);
    CHECK(strstr(fj_last_error(), "FLASHJIT_LIBNVRTC") != NULL, "message \"%s\"", fj_last_error());
    printf("# real loader, FLASHJIT_LIBNVRTC=%s: %s\n", path, fj_last_error());
}

static void child_not_nvrtc(void)
{
    const fj_cuda_api *api;
    CHECK(fj_cuda_nvrtc(&api) == FJ_ERR_NO_DEVICE, "fj_cuda_nvrtc succeeded");
    CHECK(strstr(fj_last_error(), "has no nvrtcVersion") != NULL, "message \"%s\"",
          fj_last_error());
    printf("# real loader, FLASHJIT_LIBNVRTC=%s: %s\n", getenv("FLASHJIT_LIBNVRTC"),
           fj_last_error());
}

/* NVRTC loads without a driver (compile-all): when an NVRTC is installed
 * (the test looks the same way the loader does), it must load even though
 * the driver cannot. */
static void child_nvrtc_without_driver(void)
{
    const fj_cuda_api *api;
    CHECK(fj_cuda_driver(&api) == FJ_ERR_NO_DEVICE, "fj_cuda_driver succeeded");
    static const char *const names[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};
    const char *found = NULL;
    for (int i = 0; i < 3 && !found; i++) {
        void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (h) found = names[i]; /* kept open, as the loader keeps it */
    }
    fj_status s = fj_cuda_nvrtc(&api);
    if (!found) {
        CHECK(s == FJ_ERR_NO_DEVICE, "NVRTC loaded though none was found");
        printf("# no NVRTC installed: %s\n", fj_last_error());
        return;
    }
    CHECK(s == FJ_OK, "NVRTC (%s is installed) did not load: %s", found, fj_last_error());
    if (s == FJ_OK) {
        CHECK(api->nvrtc_major >= 12, "NVRTC version %d.%d", api->nvrtc_major, api->nvrtc_minor);
        CHECK(api->nvrtc_path[0] == '/', "NVRTC path \"%s\" is not a resolved path",
              api->nvrtc_path);
        CHECK(api->driver_path[0] == '\0', "driver path set: %s", api->driver_path);
        printf("# NVRTC %d.%d from %s, without a driver\n", api->nvrtc_major, api->nvrtc_minor,
               api->nvrtc_path);
    }
}

static const struct {
    const char *mode;
    void (*run)(void);
    const char *env[2];
} children[] = {
    {"missing-driver", child_missing_driver, {"FLASHJIT_LIBCUDA=/nonexistent/libcuda.so.1", NULL}},
    {"not-a-driver", child_not_a_driver, {"FLASHJIT_LIBCUDA=libm.so.6", NULL}},
    {"missing-nvrtc", child_missing_nvrtc, {"FLASHJIT_LIBNVRTC=/nonexistent/libnvrtc.so.13", NULL}},
    {"not-nvrtc", child_not_nvrtc, {"FLASHJIT_LIBNVRTC=libm.so.6", NULL}},
    {"nvrtc-without-driver",
     child_nvrtc_without_driver,
     {"FLASHJIT_LIBCUDA=/nonexistent/libcuda.so.1", NULL}},
};

#define NUM_CHILDREN (int)(sizeof children / sizeof children[0])

static int run_child(const char *mode)
{
    for (int i = 0; i < NUM_CHILDREN; i++)
        if (!strcmp(children[i].mode, mode)) {
            children[i].run();
            return child_failures ? 1 : 0;
        }
    printf("unknown child mode %s\n", mode);
    return 2;
}

/* Re-executes this program as child `mode` with the loader variables
 * replaced by the child's own. */
static void spawn_child(int which)
{
    size_t n = 0;
    while (environ[n]) n++;
    char **env = calloc(n + 3, sizeof *env);
    assert_non_null(env);
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "FLASHJIT_LIBCUDA=", 17) &&
            strncmp(environ[i], "FLASHJIT_LIBNVRTC=", 18))
            env[m++] = environ[i];
    for (int j = 0; j < 2 && children[which].env[j]; j++) env[m++] = (char *)children[which].env[j];
    env[m] = NULL;
    char *argv[] = {(char *)"test_cuda_loader", (char *)"--child", (char *)children[which].mode,
                    NULL};
    fflush(stdout);
    pid_t pid;
    int rc = posix_spawn(&pid, "/proc/self/exe", NULL, NULL, argv, env);
    free(env);
    assert_int_equal(rc, 0);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("child %s failed (status 0x%x)", children[which].mode, status);
}

static void test_real_loader_children(void **state)
{
    (void)state;
    for (int i = 0; i < NUM_CHILDREN; i++) spawn_child(i);
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "--child")) return run_child(argv[2]);
#define FAKE(t) cmocka_unit_test_setup_teardown(t, fake_setup, fake_teardown)
    const struct CMUnitTest tests[] = {
        FAKE(test_healthy_fake_describe),
        FAKE(test_varlen_paged_launch),
        FAKE(test_no_driver_auto_falls_back),
        FAKE(test_no_driver_explicit),
        FAKE(test_env_backend_cuda),
        FAKE(test_old_driver),
        FAKE(test_no_nvrtc),
        FAKE(test_cuinit_fails),
        FAKE(test_unknown_error_code),
        FAKE(test_zero_devices),
        FAKE(test_device_out_of_range),
        FAKE(test_old_arch),
        FAKE(test_primary_ctx_retain_fails),
        FAKE(test_features_unsupported),
        FAKE(test_plan_launch_records),
        FAKE(test_split_kv_launches),
        FAKE(test_alibi_sinks_launches),
        FAKE(test_split_kv_without_pdl),
        FAKE(test_split_kv_forced),
        FAKE(test_head_group_forced),
        FAKE(test_one_shot_split_plans_per_stream),
        FAKE(test_window_and_top_left_params),
        FAKE(test_dynamic_smem_opt_in),
        FAKE(test_module_cache_reuse),
        FAKE(test_module_cache_concurrent),
        FAKE(test_module_load_fails),
        FAKE(test_get_function_fails),
        FAKE(test_compile_fails),
        FAKE(test_tensor_map_refused),
        FAKE(test_launch_fails),
        FAKE(test_unsupported_problems),
        FAKE(test_too_many_registers),
        FAKE(test_misaligned_pointers),
        FAKE(test_two_devices),
        FAKE(test_time_runs),
        FAKE(test_memory_round_trip),
        FAKE(test_malloc_out_of_memory),
        FAKE(test_copy_and_sync_fail),
        FAKE(test_push_fails),
        cmocka_unit_test(test_real_loader_children),
    };
    return cmocka_run_group_tests_name("cuda_loader", tests, NULL, NULL);
}
