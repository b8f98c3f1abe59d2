/* The kernel build path with the real NVRTC and no GPU: the target and
 * options chosen per arch, NVRTC's errors, a small compile set for sm_80 and
 * sm_90 through fj_kernel_build and a fresh disk cache (on two threads, as
 * compile-all runs it), zero spills in every cubin, and a rerun that is all
 * cache hits with identical images. PTX for an arch newer than NVRTC knows.
 * flash_wgmma's arch-specific target (sm_90a) and one kernel built for it.
 * The cubin reader is checked on garbage and on every truncation of a real
 * cubin, and every NVRTC failure path with the fake NVRTC (fake_driver.h).
 * Without a loadable NVRTC the NVRTC tests say SKIPPED and why, and
 * the program exits 77 (meson's SKIP) unless something else failed. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda/jit/codegen.h"
#include "cuda/jit/cubin_info.h"
#include "fake_driver.h"
#include "cuda/cuda_api.h"
#include "cuda/jit/nvrtc_compile.h"
#include "cuda/jit/kernel_build.h"
#include "cuda/jit/kernel_desc.h"
#include "problem.h"

static fj_status nvrtc_status;
static char nvrtc_reason[1024];
static const fj_cuda_api *nvrtc;

#define REQUIRE_NVRTC()                                                \
    do {                                                               \
        if (nvrtc_status != FJ_OK) {                                   \
            print_message("SKIPPED: NVRTC is not loadable: %s: %s\n",  \
                          fj_status_name(nvrtc_status), nvrtc_reason); \
            skip();                                                    \
        }                                                              \
    } while (0)

#define assert_contains(text, part)                                                             \
    do {                                                                                        \
        if (!strstr((text), (part))) fail_msg("'%s'\n  does not contain '%s'", (text), (part)); \
    } while (0)

/* ---- captured log ------------------------------------------------------------ */

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static char *log_text;
static size_t log_len;

static void capture(fj_log_level level, const char *message, void *user)
{
    (void)level, (void)user;
    pthread_mutex_lock(&log_lock);
    size_t n = strlen(message);
    char *t = realloc(log_text, log_len + n + 2);
    if (t) {
        memcpy(t + log_len, message, n);
        t[log_len + n] = '\n';
        t[log_len + n + 1] = '\0';
        log_text = t;
        log_len += n + 1;
    }
    pthread_mutex_unlock(&log_lock);
}

static void log_clear(void)
{
    pthread_mutex_lock(&log_lock);
    free(log_text);
    log_text = NULL;
    log_len = 0;
    pthread_mutex_unlock(&log_lock);
}

/* The captured log has a line that starts with prefix. */
static void assert_logged(const char *prefix)
{
    pthread_mutex_lock(&log_lock);
    bool found = false;
    for (const char *l = log_text; l && *l && !found; l = strchr(l, '\n') + 1)
        found = !strncmp(l, prefix, strlen(prefix));
    pthread_mutex_unlock(&log_lock);
    if (!found)
        fail_msg("no log line starts with '%s'; the log:\n%s", prefix, log_text ? log_text : "");
}

/* ---- temporary cache directory ----------------------------------------------- */

static char cache_dir[256];

static void remove_cache_dir(void)
{
    DIR *d = opendir(cache_dir);
    if (!d) return;
    for (struct dirent *e; (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char path[600];
        snprintf(path, sizeof path, "%s/%s", cache_dir, e->d_name);
        unlink(path);
    }
    closedir(d);
    rmdir(cache_dir);
}

static int count_cache_files(void)
{
    DIR *d = opendir(cache_dir);
    int n = 0;
    if (!d) return -1;
    for (struct dirent *e; (e = readdir(d));) n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

static int setup(void **state)
{
    (void)state;
    nvrtc_status = fj_cuda_nvrtc(&nvrtc);
    snprintf(nvrtc_reason, sizeof nvrtc_reason, "%s", fj_last_error());
    const char *tmp = getenv("TMPDIR");
    snprintf(cache_dir, sizeof cache_dir, "%s/fjt-compile-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(cache_dir)) return -1;
    fj_set_log_callback(capture, FJ_LOG_INFO, NULL);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    fj_set_log_callback(NULL, FJ_LOG_OFF, NULL);
    remove_cache_dir();
    log_clear();
    return 0;
}

/* ---- the cubin reader on bad input (no NVRTC needed) --------------------------- */

static void test_cubin_garbage(void **state)
{
    (void)state;
    fj_cubin_resources r;
    uint8_t buf[256];
    assert_int_equal(fj_cubin_resources_read(NULL, 0, "k", &r), FJ_ERR_INVALID_ARGUMENT);
    assert_contains(fj_last_error(), "no ELF header");
    assert_int_equal(fj_cubin_resources_read("hello", 5, "k", &r), FJ_ERR_INVALID_ARGUMENT);
    memset(buf, 0, sizeof buf);
    assert_int_equal(fj_cubin_resources_read(buf, sizeof buf, "k", &r), FJ_ERR_INVALID_ARGUMENT);
    memcpy(buf, "\177ELF\001\001", 6); /* 32-bit */
    assert_int_equal(fj_cubin_resources_read(buf, sizeof buf, "k", &r), FJ_ERR_INVALID_ARGUMENT);
    assert_contains(fj_last_error(), "not a little-endian ELF64");
    buf[4] = 2;
    buf[18] = 62; /* x86-64, not EM_CUDA */
    assert_int_equal(fj_cubin_resources_read(buf, sizeof buf, "k", &r), FJ_ERR_INVALID_ARGUMENT);
    assert_contains(fj_last_error(), "not an ELF for EM_CUDA");
    buf[18] = 190;
    buf[40] = 0xf0, buf[41] = 0xff; /* section headers far past the end */
    buf[58] = 64, buf[60] = 3;
    assert_int_equal(fj_cubin_resources_read(buf, sizeof buf, "k", &r), FJ_ERR_INVALID_ARGUMENT);
    assert_contains(fj_last_error(), "section header table out of bounds");
}

/* ---- targets and options --------------------------------------------------------- */

static void test_targets(void **state)
{
    (void)state;
    REQUIRE_NVRTC();
    int n = 0;
    assert_int_equal(nvrtc->nvrtcGetNumSupportedArchs(&n), 0);
    int *archs = calloc((size_t)n, sizeof *archs);
    assert_non_null(archs);
    assert_int_equal(nvrtc->nvrtcGetSupportedArchs(archs), 0);
    int lo = archs[0], hi = archs[0];
    bool has80 = false, has90 = false;
    for (int i = 0; i < n; i++) {
        if (archs[i] < lo) lo = archs[i];
        if (archs[i] > hi) hi = archs[i];
        has80 |= archs[i] == 80, has90 |= archs[i] == 90;
    }
    free(archs);
    if (!has80 || !has90)
        fail_msg("this NVRTC (%d.%d) lists no sm_80 or sm_90", nvrtc->nvrtc_major,
                 nvrtc->nvrtc_minor);

    fj_nvrtc_target t;
    assert_int_equal(fj_nvrtc_target_for_arch(90, false, &t), FJ_OK);
    assert_false(t.is_ptx);
    assert_string_equal(t.target, "sm_90");
    assert_int_equal(t.num_options, 4);
    assert_string_equal(t.options[0], "--gpu-architecture=sm_90");
    assert_string_equal(t.options_text,
                        "--gpu-architecture=sm_90 -std=c++17 --fmad=true -default-device");
    assert_int_equal(t.nvrtc_major, nvrtc->nvrtc_major);
    assert_int_equal(t.nvrtc_minor, nvrtc->nvrtc_minor);

    assert_int_equal(fj_nvrtc_target_for_arch(90, true, &t), FJ_OK);
    assert_true(t.is_ptx);
    assert_string_equal(t.target, "compute_90");
    assert_string_equal(t.options_text,
                        "--gpu-architecture=compute_90 -std=c++17 --fmad=true -default-device");

    /* Newer than NVRTC knows: PTX of the newest arch it lists. */
    char want[96];
    assert_int_equal(fj_nvrtc_target_for_arch(9999, false, &t), FJ_OK);
    snprintf(want, sizeof want, "compute_%d", hi);
    assert_true(t.is_ptx);
    assert_string_equal(t.target, want);

    /* Older than anything it lists: no target at all. */
    assert_int_equal(fj_nvrtc_target_for_arch((unsigned)lo - 1, false, &t), FJ_ERR_UNSUPPORTED);
    snprintf(want, sizeof want, "cannot compile for sm_%d or any older arch", lo - 1);
    assert_contains(fj_last_error(), want);
}

/* flash_wgmma's target: the arch-specific sm_90a / compute_90a. */
static void test_arch_specific_targets(void **state)
{
    (void)state;
    REQUIRE_NVRTC();
    fj_nvrtc_target t;
    assert_int_equal(fj_nvrtc_target_for_arch(90, false, &t), FJ_OK);
    assert_int_equal(fj_nvrtc_target_arch_specific(&t, 90), FJ_OK);
    assert_false(t.is_ptx);
    assert_string_equal(t.target, "sm_90a");
    assert_int_equal(t.num_options, 4);
    assert_string_equal(t.options[0], "--gpu-architecture=sm_90a");
    assert_string_equal(t.options_text,
                        "--gpu-architecture=sm_90a -std=c++17 --fmad=true -default-device");
    assert_int_equal(t.nvrtc_major, nvrtc->nvrtc_major);
    assert_int_equal(t.nvrtc_minor, nvrtc->nvrtc_minor);

    assert_int_equal(fj_nvrtc_target_for_arch(90, true, &t), FJ_OK);
    assert_int_equal(fj_nvrtc_target_arch_specific(&t, 90), FJ_OK);
    assert_true(t.is_ptx);
    assert_string_equal(t.target, "compute_90a");
    assert_string_equal(t.options_text,
                        "--gpu-architecture=compute_90a -std=c++17 --fmad=true -default-device");

    /* A target for an older arch is refused and left as it was. */
    assert_int_equal(fj_nvrtc_target_for_arch(80, false, &t), FJ_OK);
    fj_nvrtc_target before = t;
    assert_int_equal(fj_nvrtc_target_arch_specific(&t, 90), FJ_ERR_UNSUPPORTED);
    assert_memory_equal(&t, &before, sizeof t);
    char want[200];
    snprintf(want, sizeof want,
             "NVRTC %d.%d does not know sm_90 (it would build sm_80): it cannot build the "
             "arch-specific sm_90a image this kernel needs",
             nvrtc->nvrtc_major, nvrtc->nvrtc_minor);
    assert_string_equal(fj_last_error(), want);
    assert_int_equal(fj_nvrtc_target_for_arch(80, true, &t), FJ_OK);
    assert_int_equal(fj_nvrtc_target_arch_specific(&t, 90), FJ_ERR_UNSUPPORTED);
    assert_contains(fj_last_error(), "(it would build compute_80)");
    assert_string_equal(t.target, "compute_80");

    /* fj_kernel_target: sm_90a for flash_wgmma, sm_90 for flash_fwd. */
    fj_kernel_desc k;
    fj_kernel_desc_init(&k);
    k.template_id = FJ_TEMPLATE_FLASH_WGMMA;
    k.head_dim = 128, k.dtype = FJ_BF16, k.arch = 90;
    assert_int_equal(fj_kernel_target(&k, false, &t), FJ_OK);
    assert_string_equal(t.target, "sm_90a");
    assert_int_equal(fj_kernel_target(&k, true, &t), FJ_OK);
    assert_string_equal(t.target, "compute_90a");
    k.template_id = FJ_TEMPLATE_FLASH_FWD;
    assert_int_equal(fj_kernel_target(&k, false, &t), FJ_OK);
    assert_string_equal(t.target, "sm_90");
}

static void test_compile_error(void **state)
{
    (void)state;
    REQUIRE_NVRTC();
    fj_nvrtc_target t;
    assert_int_equal(fj_nvrtc_target_for_arch(90, false, &t), FJ_OK);
    void *image = (void *)1;
    size_t size = 1;
    double seconds = -1;
    fj_status s = fj_nvrtc_compile(&t, "broken.kernel",
                                   "extern \"C\" __global__ void k() { undeclared_thing(); }\n",
                                   &image, &size, &seconds);
    assert_int_equal(s, FJ_ERR_COMPILE);
    assert_null(image);
    assert_int_equal(size, 0);
    const char *head = "NVRTC failed to compile broken.kernel (options: --gpu-architecture=sm_90 "
                       "-std=c++17 --fmad=true -default-device):\n";
    if (strncmp(fj_last_error(), head, strlen(head)))
        fail_msg("the message does not start with the header: %s", fj_last_error());
    /* The log follows, naming the undefined identifier. */
    assert_contains(fj_last_error(), "undeclared_thing");
    assert_contains(fj_last_error(), "error");
}

/* ---- the compile set ------------------------------------------------------------- */

typedef struct case_ {
    int head_dim;
    fj_dtype dtype;
    fj_causal causal;
    int window_left;
} case_;

/* Head dims across the heuristic's three flash_fwd tile shapes, one that is
 * not a multiple of 16 (padded columns), both dtypes, every mask kind; on
 * sm_90 the multiples of 64 take flash_wgmma (built for sm_90a). */
static const case_ set[] = {
    {64, FJ_F16, FJ_CAUSAL_BOTTOM_RIGHT, -1},
    {72, FJ_BF16, FJ_CAUSAL_NONE, 128},
    {128, FJ_BF16, FJ_CAUSAL_NONE, -1},
    {256, FJ_F16, FJ_CAUSAL_TOP_LEFT, 256},
};
#define SET_SIZE (sizeof set / sizeof set[0])
static const uint32_t set_archs[] = {80, 90};
#define NBUILDS (SET_SIZE * 2)

static fj_kernel_desc set_desc(size_t i)
{
    const case_ *c = &set[i % SET_SIZE];
    fj_attention_desc d;
    fj_attention_desc_init(&d, 1, 4, 4, 256, 256, c->head_dim, c->dtype);
    d.causal = c->causal;
    d.window_left = c->window_left;
    fj_problem p;
    fj_kernel_desc k;
    assert_int_equal(fj_problem_init(&p, &d), FJ_OK);
    if (fj_kernel_desc_for_problem(&p, set_archs[i / SET_SIZE], &k) != FJ_OK)
        fail_msg("%s", fj_last_error());
    return k;
}

typedef struct builds {
    fj_kernel_desc desc[NBUILDS];
    fj_kernel_image img[NBUILDS];
    fj_status status[NBUILDS];
    char error[NBUILDS][512];
    size_t next;
    pthread_mutex_t lock;
} builds;

static void *build_worker(void *arg)
{
    builds *b = arg;
    for (;;) {
        pthread_mutex_lock(&b->lock);
        size_t i = b->next++;
        pthread_mutex_unlock(&b->lock);
        if (i >= NBUILDS) return NULL;
        b->status[i] = fj_kernel_build(&b->desc[i], cache_dir, &b->img[i]);
        snprintf(b->error[i], sizeof b->error[i], "%s", fj_last_error());
    }
}

/* Builds the whole set on two threads, as compile-all does. */
static void build_set(builds *b)
{
    memset(b, 0, sizeof *b);
    pthread_mutex_init(&b->lock, NULL);
    for (size_t i = 0; i < NBUILDS; i++) b->desc[i] = set_desc(i);
    pthread_t th[2];
    for (int t = 0; t < 2; t++) assert_int_equal(pthread_create(&th[t], NULL, build_worker, b), 0);
    for (int t = 0; t < 2; t++) pthread_join(th[t], NULL);
    pthread_mutex_destroy(&b->lock);
    for (size_t i = 0; i < NBUILDS; i++)
        if (b->status[i] != FJ_OK)
            fail_msg("building %s: %s: %s", b->img[i].name, fj_status_name(b->status[i]),
                     b->error[i]);
}

static void test_compile_set(void **state)
{
    (void)state;
    REQUIRE_NVRTC();
    static builds first, again;
    log_clear();
    build_set(&first);
    for (size_t i = 0; i < NBUILDS; i++) {
        const fj_kernel_image *img = &first.img[i];
        char name[128], want_target[16], line[200];
        fj_kernel_desc_name(&first.desc[i], name, sizeof name);
        snprintf(want_target, sizeof want_target, "sm_%u%s", (unsigned)first.desc[i].arch,
                 fj_codegen_arch_specific(&first.desc[i]) ? "a" : "");
        assert_string_equal(img->name, name);
        assert_string_equal(img->target, want_target);
        assert_false(img->is_ptx);
        assert_false(img->from_cache);
        assert_true(img->compile_seconds > 0);
        fj_cubin_resources r;
        if (fj_cubin_resources_read(img->data, img->size, fj_codegen_entry(&first.desc[i]), &r))
            fail_msg("%s: %s", name, fj_last_error());
        print_message("%-48s %6.2f s  regs %3u  spills %u  static smem %u  dynamic smem %zu\n",
                      name, img->compile_seconds, r.registers, r.frame_bytes, r.static_smem,
                      fj_kernel_desc_smem_bytes(&first.desc[i]));
        assert_true(r.registers > 0 && r.registers <= 255);
        if (r.frame_bytes > FJ_CUBIN_MAX_SPILL_BYTES)
            fail_msg("%s spills %u bytes of stack frame, over the budget of %d", name,
                     r.frame_bytes, FJ_CUBIN_MAX_SPILL_BYTES);
        snprintf(line, sizeof line, "cache MISS %s", name);
        assert_logged(line);
        snprintf(line, sizeof line, "compiled %s in ", name);
        assert_logged(line);
        snprintf(line, sizeof line, "cache SAVE %s", name);
        assert_logged(line);
    }
    assert_int_equal(count_cache_files(), NBUILDS);

    /* The rerun: every kernel from the cache, byte for byte. */
    log_clear();
    build_set(&again);
    for (size_t i = 0; i < NBUILDS; i++) {
        char line[200];
        assert_true(again.img[i].from_cache);
        assert_true(again.img[i].compile_seconds == 0);
        assert_int_equal(again.img[i].size, first.img[i].size);
        assert_memory_equal(again.img[i].data, first.img[i].data, first.img[i].size);
        snprintf(line, sizeof line, "cache HIT %s", again.img[i].name);
        assert_logged(line);
        fj_kernel_image_free(&again.img[i]);
    }
    assert_int_equal(count_cache_files(), NBUILDS);
    for (size_t i = 0; i < NBUILDS; i++) fj_kernel_image_free(&first.img[i]);
}

static void test_cubin_truncated(void **state)
{
    (void)state;
    REQUIRE_NVRTC();
    fj_kernel_desc k = set_desc(0); /* usually in the cache by now */
    fj_kernel_image img;
    if (fj_kernel_build(&k, cache_dir, &img) != FJ_OK) fail_msg("%s", fj_last_error());
    fj_cubin_resources r;
    assert_int_equal(fj_cubin_resources_read(img.data, img.size, "no_such_kernel", &r),
                     FJ_ERR_INVALID_ARGUMENT);
    assert_contains(fj_last_error(), "the cubin has no kernel named 'no_such_kernel'");
    /* Every prefix either still holds what is read, or is rejected: never a
       read past the end (the sanitizers would see it: each prefix is a copy
       of exactly that size). */
    for (size_t n = 0; n < img.size; n += 1 + n / 64) {
        void *copy = malloc(n ? n : 1);
        assert_non_null(copy);
        memcpy(copy, img.data, n);
        fj_status s = fj_cubin_resources_read(copy, n, "fj_flash_fwd", &r);
        assert_true(s == FJ_OK || s == FJ_ERR_INVALID_ARGUMENT);
        free(copy);
    }
    fj_kernel_image_free(&img);
}

/* ---- PTX, and what fj_kernel_build refuses -------------------------------------- */

static void test_ptx_for_newer_arch(void **state)
{
    (void)state;
    REQUIRE_NVRTC();
    fj_kernel_desc k;
    fj_kernel_desc_init(&k);
    k.template_id = FJ_TEMPLATE_FLASH_FWD;
    k.head_dim = 64;
    k.dtype = FJ_BF16;
    k.mask = FJ_MASK_NONE;
    k.arch = 9999;
    fj_kernel_desc_heuristic(&k);
    fj_kernel_image img;
    log_clear();
    if (fj_kernel_build(&k, cache_dir, &img) != FJ_OK) fail_msg("%s", fj_last_error());
    assert_true(img.is_ptx);
    assert_false(img.from_cache);
    assert_true(!strncmp(img.target, "compute_", 8));
    assert_int_equal(strlen(img.data), img.size);
    assert_contains((const char *)img.data, ".entry fj_flash_fwd");
    char line[200];
    snprintf(line, sizeof line, "cache SAVE %s", img.name);
    assert_logged(line);
    fj_kernel_image again;
    assert_int_equal(fj_kernel_build(&k, cache_dir, &again), FJ_OK);
    assert_true(again.from_cache);
    assert_true(again.is_ptx);
    assert_int_equal(again.size, img.size);
    assert_string_equal(again.data, img.data);
    fj_kernel_image_free(&again);
    fj_kernel_image_free(&img);
}

static void test_build_rejects(void **state)
{
    (void)state;
    fj_kernel_desc k;
    fj_kernel_desc_init(&k);
    k.template_id = FJ_TEMPLATE_FLASH_FWD;
    k.head_dim = 128;
    k.dtype = FJ_F16;
    k.arch = 90;
    k.block_m = 128, k.block_n = 64, k.warps = 3, k.stages = 2;
    fj_kernel_image img;
    assert_int_equal(fj_kernel_build(&k, cache_dir, &img), FJ_ERR_UNSUPPORTED);
    assert_contains(fj_last_error(), "warps 3 is not 1, 2, 4 or 8");
    assert_null(img.data);
    assert_int_equal(img.size, 0);
    fj_kernel_image_free(&img); /* harmless on a failed build */
    fj_kernel_image_free(NULL);
    /* flash_wgmma's rules, before any NVRTC: four warpgroups, and sm_80. */
    k.template_id = FJ_TEMPLATE_FLASH_WGMMA;
    k.block_m = 256, k.block_n = 128, k.warps = 16;
    assert_int_equal(fj_kernel_build(&k, cache_dir, &img), FJ_ERR_UNSUPPORTED);
    assert_contains(fj_last_error(), "m256n128g4s2.sm_90: warps 16 is not 4, 8 or 12 "
                                     "(flash_wgmma runs 1, 2 or 3 warpgroups of 4)");
    assert_null(img.data);
    k.block_m = 128, k.warps = 8, k.arch = 80;
    assert_int_equal(fj_kernel_build(&k, cache_dir, &img), FJ_ERR_UNSUPPORTED);
    assert_contains(fj_last_error(), "arch sm_80: flash_wgmma needs sm_90");
    assert_null(img.data);
}

/* One flash_wgmma kernel, no cache: a cubin for sm_90a without spills, and
 * its PTX for compute_90a issuing wgmma. */
static void test_compile_wgmma(void **state)
{
    (void)state;
    REQUIRE_NVRTC();
    fj_kernel_desc k;
    fj_kernel_desc_init(&k);
    k.template_id = FJ_TEMPLATE_FLASH_WGMMA;
    k.head_dim = 128, k.dtype = FJ_BF16, k.mask = FJ_MASK_CAUSAL, k.arch = 90;
    k.block_m = 128, k.block_n = 128, k.warps = 8, k.stages = 2;
    fj_kernel_image img;
    log_clear();
    if (fj_kernel_build(&k, NULL, &img) != FJ_OK) fail_msg("%s", fj_last_error());
    assert_string_equal(img.name, "flash_wgmma.d128.bf16.causal.m128n128g2s2.sm_90");
    assert_string_equal(img.target, "sm_90a");
    assert_false(img.is_ptx);
    assert_false(img.from_cache);
    assert_true(img.size >= 4 && !memcmp(img.data, "\177ELF", 4));
    fj_cubin_resources r;
    if (fj_cubin_resources_read(img.data, img.size, fj_codegen_entry(&k), &r))
        fail_msg("%s: %s", img.name, fj_last_error());
    print_message("%-48s %6.2f s  regs %3u  spills %u  static smem %u  dynamic smem %zu\n",
                  img.name, img.compile_seconds, r.registers, r.frame_bytes, r.static_smem,
                  fj_kernel_desc_smem_bytes(&k));
    assert_true(r.registers > 0 && r.registers <= 255);
    if (r.frame_bytes > FJ_CUBIN_MAX_SPILL_BYTES)
        fail_msg("%s spills %u bytes of stack frame, over the budget of %d", img.name,
                 r.frame_bytes, FJ_CUBIN_MAX_SPILL_BYTES);
    char line[200];
    snprintf(line, sizeof line, "compiled %s in ", img.name);
    assert_logged(line);
    fj_kernel_image_free(&img);

    fj_nvrtc_target t;
    assert_int_equal(fj_kernel_target(&k, true, &t), FJ_OK);
    char *source;
    size_t len;
    assert_int_equal(fj_codegen_render(&k, &source, &len), FJ_OK);
    void *ptx;
    size_t size;
    double seconds;
    fj_status s = fj_nvrtc_compile(&t, img.name, source, &ptx, &size, &seconds);
    free(source);
    if (s != FJ_OK) fail_msg("%s", fj_last_error());
    assert_contains((const char *)ptx, ".target sm_90a");
    assert_contains((const char *)ptx, ".entry fj_flash_fwd");
    assert_contains((const char *)ptx, "wgmma.mma_async");
    free(ptx);
}

/* ---- NVRTC failures, through the fake (no real NVRTC needed) ------------------ */

static void use_fake(void)
{
    fake_reset();
    fj_cuda_api_override(fake_api());
}

static int drop_fake(void **state)
{
    (void)state;
    fj_cuda_api_override(NULL);
    return 0;
}

static void test_fake_targets(void **state)
{
    (void)state;
    use_fake(); /* it lists 75 80 86 89 90 100 120 */
    fj_nvrtc_target t;
    static const struct {
        unsigned arch;
        const char *target;
    } cases[] = {{90, "sm_90"},      {80, "sm_80"},        {87, "compute_86"},
                 {95, "compute_90"}, {130, "compute_120"}, {75, "sm_75"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        assert_int_equal(fj_nvrtc_target_for_arch(cases[i].arch, false, &t), FJ_OK);
        assert_string_equal(t.target, cases[i].target);
        assert_int_equal(t.is_ptx, cases[i].target[0] == 'c');
    }
    assert_int_equal(t.nvrtc_major, 99);
    assert_int_equal(fj_nvrtc_target_for_arch(70, false, &t), FJ_ERR_UNSUPPORTED);
    assert_string_equal(fj_last_error(), "NVRTC 99.0 cannot compile for sm_70 or any older arch "
                                         "(it supports 75 80 86 89 90 100 120)");
    fake_fail("nvrtcGetNumSupportedArchs", 11);
    assert_int_equal(fj_nvrtc_target_for_arch(90, false, &t), FJ_ERR_NO_DEVICE);
    assert_contains(fj_last_error(), "nvrtcGetNumSupportedArchs failed");
    use_fake();
    fake_fail("nvrtcGetSupportedArchs", 11);
    assert_int_equal(fj_nvrtc_target_for_arch(90, false, &t), FJ_ERR_NO_DEVICE);
    assert_contains(fj_last_error(), "nvrtcGetSupportedArchs failed");
    use_fake();
    fake_remove_nvrtc();
    assert_int_equal(fj_nvrtc_target_for_arch(90, false, &t), FJ_ERR_NO_DEVICE);

    /* Arch-specific targets: only where NVRTC lists the arch itself. */
    use_fake();
    assert_int_equal(fj_nvrtc_target_for_arch(90, false, &t), FJ_OK);
    assert_int_equal(fj_nvrtc_target_arch_specific(&t, 90), FJ_OK);
    assert_string_equal(t.target, "sm_90a");
    assert_string_equal(t.options_text,
                        "--gpu-architecture=sm_90a -std=c++17 --fmad=true -default-device");
    assert_int_equal(fj_nvrtc_target_for_arch(95, false, &t), FJ_OK); /* compute_90 */
    fj_nvrtc_target before = t;
    assert_int_equal(fj_nvrtc_target_arch_specific(&t, 95), FJ_ERR_UNSUPPORTED);
    assert_string_equal(fj_last_error(),
                        "NVRTC 99.0 does not know sm_95 (it would build compute_90): it cannot "
                        "build the arch-specific sm_95a image this kernel needs");
    assert_memory_equal(&t, &before, sizeof t);
    /* and fj_kernel_target, with the fake's NVRTC */
    fj_kernel_desc k;
    fj_kernel_desc_init(&k);
    k.template_id = FJ_TEMPLATE_FLASH_WGMMA;
    k.arch = 90;
    assert_int_equal(fj_kernel_target(&k, true, &t), FJ_OK);
    assert_string_equal(t.target, "compute_90a");
    assert_string_equal(t.options[0], "--gpu-architecture=compute_90a");
    k.template_id = FJ_TEMPLATE_COMBINE;
    assert_int_equal(fj_kernel_target(&k, true, &t), FJ_OK);
    assert_string_equal(t.target, "compute_90");
    k.template_id = FJ_TEMPLATE_FLASH_WGMMA;
    k.arch = 95; /* (not a flash_wgmma arch; the target alone is refused) */
    assert_int_equal(fj_kernel_target(&k, false, &t), FJ_ERR_UNSUPPORTED);
    assert_contains(fj_last_error(), "does not know sm_95");
    fake_remove_nvrtc();
    k.arch = 90;
    assert_int_equal(fj_kernel_target(&k, false, &t), FJ_ERR_NO_DEVICE);
}

/* Each failing NVRTC call: its status, a message naming the call and the
 * kernel, and no image. */
static void test_fake_compile_failures(void **state)
{
    (void)state;
    static const struct {
        const char *call;
        int r;
        bool ptx;
        fj_status s;
        const char *message;
    } cases[] = {
        {"nvrtcCreateProgram", 1, false, FJ_ERR_OUT_OF_MEMORY,
         "nvrtcCreateProgram failed for kernel k.x"},
        {"nvrtcCreateProgram", 3, false, FJ_ERR_COMPILE,
         "nvrtcCreateProgram failed for kernel k.x: NVRTC_ERROR_INVALID_INPUT"},
        {"nvrtcCompileProgram", 6, false, FJ_ERR_COMPILE,
         "NVRTC failed to compile k.x (options: --gpu-architecture=sm_90 -std=c++17 "
         "--fmad=true -default-device):\nfake.cu(1): error: compilation failed on demand"},
        {"nvrtcGetCUBINSize", 4, false, FJ_ERR_COMPILE, "nvrtcGetCUBINSize failed for kernel k.x"},
        {"nvrtcGetCUBIN", 4, false, FJ_ERR_COMPILE, "nvrtcGetCUBIN failed for kernel k.x"},
        {"nvrtcGetPTXSize", 4, true, FJ_ERR_COMPILE, "nvrtcGetPTXSize failed for kernel k.x"},
        {"nvrtcGetPTX", 4, true, FJ_ERR_COMPILE, "nvrtcGetPTX failed for kernel k.x"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        use_fake();
        fj_nvrtc_target t;
        assert_int_equal(fj_nvrtc_target_for_arch(90, cases[i].ptx, &t), FJ_OK);
        fake_fail(cases[i].call, cases[i].r);
        void *image = (void *)1;
        size_t size = 1;
        double seconds;
        fj_status s = fj_nvrtc_compile(&t, "k.x", "int x;\n", &image, &size, &seconds);
        if (s != cases[i].s)
            fail_msg("%s: %s, not %s", cases[i].call, fj_status_name(s),
                     fj_status_name(cases[i].s));
        assert_contains(fj_last_error(), cases[i].message);
        assert_null(image);
        assert_int_equal(size, 0);
    }
    /* And the healthy fake compiles: the image ends in a NUL it does not count. */
    use_fake();
    fj_nvrtc_target t;
    assert_int_equal(fj_nvrtc_target_for_arch(90, true, &t), FJ_OK);
    void *image;
    size_t size;
    double seconds;
    assert_int_equal(fj_nvrtc_compile(&t, "k.x", "int x;\n", &image, &size, &seconds), FJ_OK);
    assert_int_equal(strlen(image), size);
    free(image);
}

/* A cache that cannot be written costs the next process a compile, never
 * this one its kernel: the store failure is logged and forgotten. */
static void test_fake_store_failure(void **state)
{
    (void)state;
    use_fake();
    fj_kernel_desc k = set_desc(SET_SIZE); /* sm_90 */
    char name[128], line[200];
    fj_kernel_desc_name(&k, name, sizeof name);
    char dir[300];
    snprintf(dir, sizeof dir, "%s/not-a-directory", cache_dir);
    FILE *f = fopen(dir, "w"); /* a file where the directory should be */
    assert_non_null(f);
    fclose(f);
    log_clear();
    fj_kernel_image img;
    if (fj_kernel_build(&k, dir, &img) != FJ_OK) fail_msg("%s", fj_last_error());
    assert_false(img.from_cache);
    assert_non_null(img.data);
    assert_string_equal(fj_last_error(), "");
    snprintf(line, sizeof line, "cache MISS %s", name);
    assert_logged(line);
    snprintf(line, sizeof line, "cache SAVE of %s failed, the kernel is used uncached: ", name);
    assert_logged(line);
    fj_kernel_image_free(&img);
    /* No cache directory at all: compile, no cache lines. */
    log_clear();
    assert_int_equal(fj_kernel_build(&k, NULL, &img), FJ_OK);
    assert_false(img.from_cache);
    snprintf(line, sizeof line, "compiled %s in ", name);
    assert_logged(line);
    fj_kernel_image_free(&img);
    unlink(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cubin_garbage),
        cmocka_unit_test(test_build_rejects),
        cmocka_unit_test(test_targets),
        cmocka_unit_test(test_arch_specific_targets),
        cmocka_unit_test(test_compile_error),
        cmocka_unit_test(test_compile_set),
        cmocka_unit_test(test_cubin_truncated),
        cmocka_unit_test(test_ptx_for_newer_arch),
        cmocka_unit_test(test_compile_wgmma),
        cmocka_unit_test_teardown(test_fake_targets, drop_fake),
        cmocka_unit_test_teardown(test_fake_compile_failures, drop_fake),
        cmocka_unit_test_teardown(test_fake_store_failure, drop_fake),
    };
    int failed = cmocka_run_group_tests_name("compile_all", tests, setup, teardown);
    if (failed == 0 && nvrtc_status != FJ_OK) {
        printf("SKIPPED: the NVRTC tests did not run: %s\n", nvrtc_reason);
        return 77; /* meson's SKIP */
    }
    return failed;
}
