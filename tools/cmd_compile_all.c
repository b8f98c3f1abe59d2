/* flashjit compile-all: compiles every kernel the runtime can choose without
 * a tuning file, through the runtime's own path (fj_kernel_build) and disk
 * cache, so it both checks the templates and fills the cache ahead of time.
 *
 * "Every supported variant" is what fj_kernel_desc_for_problem can return:
 * each head dim 8..256 in steps of 8, f16 and bf16, the four mask kinds
 * (causal alignment and window sizes are launch parameters, not code), the
 * heuristic's prefill and decode tiles, and with --kinds split their
 * split-KV variants and the combine kernel: 832 distinct kernels per arch
 * with every kind. --kinds shipped adds the tiles of the shipped tuning
 * tables' entries for the arch (what a plan takes on that device when the
 * user's tuning file has no entry), with their split variants when split is
 * also given; --kinds softcap adds each of those kernels again with the logit
 * softcap (FJ_SOFTCAP), --kinds alibi and sinks with ALiBi (FJ_ALIBI) and
 * attention sinks (FJ_SINKS), every combination of the modifiers selected;
 * --kinds varlen and paged add the prefill, decode and split kernels again
 * for variable-length batches (FJ_VARLEN) and for paged KV caches of 16- and
 * 64-key pages (FJ_PAGE_SIZE; with varlen too, 16-key pages with packed
 * queries), without ALiBi and sinks, which the CUDA kernels do not combine
 * with them. --head-dims, --dtype, --mask and --kinds select a subset.
 *
 * Registers, spills and static shared memory are read from each cubin's ELF
 * (src/cubin_info.h), not from ptxas -v output (NVRTC 13 prints that into the
 * program log with --ptxas-options=-v): the ELF works for a cubin from the
 * cache as well, and keeps the NVRTC options (part of the cache key)
 * identical to the runtime's, so both share cache entries. The spill figure
 * is the kernel's stack frame, where ptxas puts spilled registers (equal to
 * ptxas -v's "bytes stack frame"); a frame over --max-spill fails the run. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "cuda/jit/codegen.h"
#include "cuda/jit/cubin_info.h"
#include "cuda/jit/nvrtc_compile.h"
#include "cuda/jit/kernel_build.h"
#include "cuda/jit/kernel_desc.h"
#include "paths.h"
#include "problem.h"
#include "tune/tuning.h"
#include "tune.h"

_Static_assert(TUNE_CUDA_MAX_HEAD_DIM == FJ_CUDA_MAX_HEAD_DIM,
               "flashjit tune checks --head-dims against the CUDA kernels' limit");

#define USAGE_TEXT                                                                             \
    "usage: flashjit compile-all [--arch sm_80,sm_90] [--jobs N] [--dtype f16,bf16]\n"         \
    "                            [--head-dims 64,128] [--mask "                                \
    "nomask,causal,window,causal_window]\n"                                                    \
    "                            [--kinds prefill,decode,split,shipped,softcap,alibi,sinks,\n" \
    "                                     varlen,paged]\n"                                     \
    "                            [--cache-dir DIR]\n"                                          \
    "                            [--max-spill BYTES]\n"                                        \
    "\n"                                                                                       \
    "Compiles every kernel the runtime chooses without a tuning file (head dims 8..256\n"      \
    "step 8, f16 and bf16, four mask kinds, the heuristic's tiles; --kinds: the prefill\n"     \
    "tiles, the decode tiles (at most 16 query rows per head), and 'split': the split-KV\n"    \
    "variants of both and the combine kernel; 'shipped': the shipped tuning tables'\n"         \
    "tiles for the arch; 'softcap', 'alibi', 'sinks': the kernels of the other kinds\n"        \
    "given again with the logit softcap, ALiBi, attention sinks and every combination\n"       \
    "of the modifiers selected; 'varlen', 'paged': the prefill, decode and split kernels\n"    \
    "again for variable-length batches and paged KV caches (pages of 16 and 64 keys;\n"        \
    "with the softcap, not with ALiBi or sinks); default prefill,decode) for each arch\n"      \
    "(default sm_90), on N threads (default: one per core), through the disk cache the\n"      \
    "library uses (FLASHJIT_CACHE_DIR, $XDG_CACHE_HOME/flashjit, ~/.cache/flashjit;\n"         \
    "--cache-dir overrides, \"\" turns it off), so a rerun is fast. Prints each\n"             \
    "kernel's compile time (or 'cached'), registers, spill bytes (the cubin's stack\n"         \
    "frame) and shared memory; exits 1 if any kernel fails to compile or spills more\n"        \
    "than --max-spill BYTES per thread (default %d; 0: any spill fails).\n"

#define MAX_ARCHS 16

typedef struct variant {
    fj_kernel_desc desc;
    char name[128];
    /* filled by the worker */
    fj_status status;
    bool cached, is_ptx;
    double seconds;
    fj_cubin_resources res;
    size_t smem;
    char error[1024];
} variant;

typedef struct job {
    variant *v;
    size_t count, next, done;
    const char *cache_dir;
    int max_spill;
    pthread_mutex_t lock;
} job;

/* ---- flags ----------------------------------------------------------------- */

/* What a plan can launch for one (head dim, dtype, mask): the prefill tiles,
 * the decode tiles (seqlen_q <= 16 after GQA packing), and with split-KV the
 * split variants of both and the combine kernel. */
typedef enum variant_kind {
    KIND_PREFILL,
    KIND_DECODE,
    KIND_SPLIT,
    KIND_SHIPPED,
    KIND_SOFTCAP,
    KIND_ALIBI,
    KIND_SINKS,
    KIND_VARLEN,
    KIND_PAGED,
    KIND_COUNT
} variant_kind;
static const char *const kind_names[KIND_COUNT] = {"prefill", "decode",  "split",
                                                   "shipped", "softcap", "alibi",
                                                   "sinks",   "varlen",  "paged"};

/* The score modifiers of a variant: bits of the modifier kinds. The plain
   kernels and every combination of the selected modifier kinds are built
   (softcap,alibi,sinks: all eight). */
enum { MOD_SOFTCAP = 1, MOD_ALIBI = 2, MOD_SINKS = 4, MOD_ALL = 7 };

typedef struct flags {
    uint32_t archs[MAX_ARCHS];
    int narchs;
    bool dtype[3]; /* by fj_dtype */
    bool mask[4];  /* by fj_mask_kind */
    bool head_dim[FJ_CUDA_MAX_HEAD_DIM + 1];
    bool kind[KIND_COUNT]; /* by variant_kind */
    int jobs;
    int max_spill;         /* stack frame bytes per thread a kernel may have */
    const char *cache_dir; /* NULL: the library's default chain */
} flags;

static bool mods_selected(const flags *f, int mods)
{
    return (!(mods & MOD_SOFTCAP) || f->kind[KIND_SOFTCAP]) &&
           (!(mods & MOD_ALIBI) || f->kind[KIND_ALIBI]) &&
           (!(mods & MOD_SINKS) || f->kind[KIND_SINKS]);
}

/* Calls item(token) for each comma-separated token of list. */
static bool each_token(const char *list, bool (*item)(const char *tok, flags *f), flags *f)
{
    if (!list || !*list) return false;
    char buf[512];
    if (strlen(list) >= sizeof buf) return false;
    strcpy(buf, list);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save))
        if (!item(t, f)) return false;
    return true;
}

static bool arch_item(const char *t, flags *f)
{
    const char *p = !strncmp(t, "sm_", 3) ? t + 3 : t;
    char *end = NULL;
    long a = *p >= '0' && *p <= '9' ? strtol(p, &end, 10) : 0;
    if (!a || *end || a < 10 || a > 9999 || f->narchs == MAX_ARCHS) return false;
    f->archs[f->narchs++] = (uint32_t)a;
    return true;
}

static bool dtype_item(const char *t, flags *f)
{
    if (!strcmp(t, "f16")) f->dtype[FJ_F16] = true;
    else if (!strcmp(t, "bf16")) f->dtype[FJ_BF16] = true;
    else return false;
    return true;
}

static bool mask_item(const char *t, flags *f)
{
    static const char *const names[4] = {"nomask", "causal", "window", "causal_window"};
    for (int m = 0; m < 4; m++)
        if (!strcmp(t, names[m])) return f->mask[m] = true;
    return false;
}

static bool kind_item(const char *t, flags *f)
{
    for (int i = 0; i < KIND_COUNT; i++)
        if (!strcmp(t, kind_names[i])) return f->kind[i] = true;
    return false;
}

static bool head_dim_item(const char *t, flags *f)
{
    char *end;
    long d = strtol(t, &end, 10);
    if (*end || d < 8 || d > FJ_CUDA_MAX_HEAD_DIM || d % 8) return false;
    return f->head_dim[d] = true;
}

static int parse_flags(int argc, char **argv, flags *f)
{
    memset(f, 0, sizeof *f);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    f->jobs = cores > 0 ? (int)cores : 1;
    f->max_spill = FJ_CUBIN_MAX_SPILL_BYTES;
    bool any_dtype = false, any_mask = false, any_dim = false, any_kind = false;
    /* every option but --help takes a value; the loop tells them by name */
    static const cli_option own[] = {
        {"arch", required_argument, 1},
        {"dtype", required_argument, 1},
        {"mask", required_argument, 1},
        {"head-dims", required_argument, 1},
        {"kinds", required_argument, 1},
        {"jobs", required_argument, 1},
        {"max-spill", required_argument, 1},
        {"cache-dir", required_argument, 1},
        {NULL, 0, 0},
    };
    const cli_option *const tables[] = {own, NULL};
    cli_options p;
    cli_options_begin(&p, "compile-all", argc, argv, tables);
    const char *val;
    for (int c; (c = cli_next_option(&p, &val)) != -1;) {
        const char *a = p.flag;
        if (c == CLI_OPTION_ERROR) return 2;
        if (c == CLI_OPTION_HELP) {
            printf(USAGE_TEXT, FJ_CUBIN_MAX_SPILL_BYTES);
            return -1;
        } else if (!strcmp(a, "--arch")) {
            if (!each_token(val, arch_item, f))
                return cli_usage_error("compile-all",
                                       "--arch: '%s' is not a list of sm_<version>, e.g. "
                                       "sm_80,sm_90",
                                       val ? val : "");
        } else if (!strcmp(a, "--dtype")) {
            if (!each_token(val, dtype_item, f))
                return cli_usage_error("compile-all", "--dtype: '%s' is not a list of f16, bf16",
                                       val ? val : "");
            any_dtype = true;
        } else if (!strcmp(a, "--mask")) {
            if (!each_token(val, mask_item, f))
                return cli_usage_error("compile-all",
                                       "--mask: '%s' is not a list of nomask, causal, window, "
                                       "causal_window",
                                       val ? val : "");
            any_mask = true;
        } else if (!strcmp(a, "--head-dims")) {
            if (!each_token(val, head_dim_item, f))
                return cli_usage_error("compile-all",
                                       "--head-dims: '%s' is not a list of multiples of 8 in 8..%d",
                                       val ? val : "", FJ_CUDA_MAX_HEAD_DIM);
            any_dim = true;
        } else if (!strcmp(a, "--kinds")) {
            if (!each_token(val, kind_item, f))
                return cli_usage_error("compile-all",
                                       "--kinds: '%s' is not a list of prefill, decode, split, "
                                       "shipped, softcap, alibi, sinks, varlen, paged",
                                       val ? val : "");
            any_kind = true;
        } else if (!strcmp(a, "--jobs")) {
            if (!cli_parse_int("compile-all", a, val, 1, 1024, &f->jobs)) return 2;
        } else if (!strcmp(a, "--max-spill")) {
            if (!cli_parse_int("compile-all", a, val, 0, 1 << 20, &f->max_spill)) return 2;
        } else if (!strcmp(a, "--cache-dir")) {
            if (!val) return cli_usage_error("compile-all", "--cache-dir needs a value");
            f->cache_dir = val;
        }
    }
    if (cli_no_arguments(&p)) return 2;
    if (!f->narchs) f->archs[f->narchs++] = 90;
    if (!any_dtype) f->dtype[FJ_F16] = f->dtype[FJ_BF16] = true;
    if (!any_mask)
        for (int m = 0; m < 4; m++) f->mask[m] = true;
    if (!any_dim)
        for (int d = 8; d <= FJ_CUDA_MAX_HEAD_DIM; d += 8) f->head_dim[d] = true;
    if (!any_kind) f->kind[KIND_PREFILL] = f->kind[KIND_DECODE] = true;
    return 0;
}

/* ---- variants ---------------------------------------------------------------- */

/* The descriptor the runtime chooses for a problem of this shape and mask
 * with seqlen_q queries: built from a problem, exactly as a plan does. */
/* The sequence variants a point's kernels come in (--kinds varlen, paged):
   the features and the page size. */
typedef struct seq_variant {
    uint32_t features;
    int page_size;
} seq_variant;

static fj_status runtime_desc_seq(int head_dim, fj_dtype dtype, int mask, int mods, int seqlen_q,
                                  uint32_t arch, seq_variant sv, fj_kernel_desc *k)
{
    fj_attention_desc d;
    fj_attention_desc_init(&d, 1, 1, 1, seqlen_q, seqlen_q, head_dim, dtype);
    /* the values are launch parameters or data, not code */
    if (mods & MOD_SOFTCAP) d.softcap = 30.0f;
    d.features = sv.features;
    if (mods & MOD_ALIBI) d.features |= FJ_FEATURE_ALIBI;
    if (mods & MOD_SINKS) d.features |= FJ_FEATURE_SINKS;
    if (sv.page_size) { /* the pool's size is a launch parameter too */
        d.page_size = sv.page_size;
        d.max_pages = d.num_pages = (seqlen_q + sv.page_size - 1) / sv.page_size;
    }
    if (mask == FJ_MASK_CAUSAL || mask == FJ_MASK_CAUSAL_WINDOW) d.causal = FJ_CAUSAL_BOTTOM_RIGHT;
    if (mask == FJ_MASK_WINDOW || mask == FJ_MASK_CAUSAL_WINDOW) d.window_left = 0;
    fj_problem p;
    fj_status s = fj_problem_init(&p, &d);
    return s == FJ_OK ? fj_kernel_desc_for_problem(&p, arch, k) : s;
}

static fj_status runtime_desc(int head_dim, fj_dtype dtype, int mask, int mods, int seqlen_q,
                              uint32_t arch, fj_kernel_desc *k)
{
    const seq_variant dense = {0, 0};
    return runtime_desc_seq(head_dim, dtype, mask, mods, seqlen_q, arch, dense, k);
}

/* The sequence variants the kinds select, into sv (at most 5); their count. */
static int seq_variants(const flags *f, seq_variant sv[5])
{
    int n = 0;
    sv[n++] = (seq_variant){0, 0};
    if (f->kind[KIND_VARLEN]) sv[n++] = (seq_variant){FJ_FEATURE_VARLEN, 0};
    if (f->kind[KIND_PAGED]) {
        sv[n++] = (seq_variant){FJ_FEATURE_PAGED_KV, 16};
        sv[n++] = (seq_variant){FJ_FEATURE_PAGED_KV, 64};
    }
    if (f->kind[KIND_VARLEN] && f->kind[KIND_PAGED])
        sv[n++] = (seq_variant){FJ_FEATURE_VARLEN | FJ_FEATURE_PAGED_KV, 16};
    return n;
}

/* Appends out[0..m) to v[*n], each kernel once. */
static void add_unique(const fj_kernel_desc *out, int m, variant *v, size_t *n)
{
    /* Kinds can name one kernel twice (a masked decode problem keeps the
       prefill tiles; a causal mask that hides nothing is dropped): once. */
    for (int i = 0; i < m; i++) {
        char name[sizeof v->name];
        fj_kernel_desc_name(&out[i], name, sizeof name);
        bool seen = false;
        for (size_t j = 0; j < *n && !seen; j++) seen = !strcmp(v[j].name, name);
        if (seen) continue;
        memcpy(v[*n].name, name, sizeof name);
        v[*n].desc = out[i];
        (*n)++;
    }
}

/* Appends to out[*m] the split variant of k and both combine kernels: of one
 * warp (few splits) and of FJ_COMBINE_WARPS (many); nothing for a template
 * without split variants (plans never split its problems). */
static void add_split_of(const fj_kernel_desc *k, fj_kernel_desc *out, int *m)
{
    if (!fj_template_row_of(k->template_id)->split_kv) return;
    fj_kernel_desc_split_of(k, &out[(*m)++]);
    fj_kernel_desc_combine_for(k, 1, &out[(*m)++]);
    fj_kernel_desc_combine_for(k, FJ_COMBINE_WARPS, &out[(*m)++]);
}

/* Index of a tuning entry's mask name; -1 for none of the four. */
static int mask_index(const char *name)
{
    static const char *const names[4] = {"nomask", "causal", "window", "causal_window"};
    for (int m = 0; m < 4; m++)
        if (!strcmp(name, names[m])) return m;
    return -1;
}

/* The kernels of the shipped tables' flash_fwd entries for sm_<arch> at the
 * selected head dims, dtypes and masks, as a plan builds them: the point's
 * descriptor (launch view included) with the entry's tiles. */
static fj_status add_shipped(const flags *f, uint32_t arch, variant *v, size_t *n)
{
    const fj_tuning *t = fj_tuning_shipped();
    char arch_name[16];
    snprintf(arch_name, sizeof arch_name, "sm_%u", (unsigned)arch);
    int matched = 0;
    for (int i = 0; i < fj_tuning_count(t); i++) {
        const fj_tuning_entry *e = fj_tuning_entry_at(t, i);
        fj_dtype dtype = !strcmp(e->dtype, "bf16")  ? FJ_BF16
                         : !strcmp(e->dtype, "f16") ? FJ_F16
                                                    : FJ_F32;
        int mask = mask_index(e->mask);
        if (strcmp(e->arch, arch_name) || strcmp(e->template_name, "flash_fwd") ||
            dtype == FJ_F32 || mask < 0 || e->head_dim < 8 || e->head_dim > FJ_CUDA_MAX_HEAD_DIM ||
            !f->head_dim[e->head_dim] || !f->dtype[dtype] || !f->mask[mask])
            continue;
        for (int mods = 0; mods <= MOD_ALL; mods++) {
            if (!mods_selected(f, mods)) continue;
            fj_kernel_desc k;
            fj_status s =
                runtime_desc(e->head_dim, dtype, mask, mods, e->bucket == 1 ? 1 : 128, arch, &k);
            if (!s) s = fj_kernel_desc_parse_tiles(e->config, &k);
            if (s)
                return fj_fail_prefix(s, "shipped entry d%d %s %s bucket %d '%s'", e->head_dim,
                                      e->dtype, e->mask, e->bucket, e->config);
            fj_kernel_desc out[4];
            int m = 0;
            out[m++] = k;
            if (f->kind[KIND_SPLIT]) add_split_of(&k, out, &m);
            add_unique(out, m, v, n);
        }
        matched++;
    }
    if (!matched)
        printf("compile-all: the shipped tuning tables have no flash_fwd entry for %s at the "
               "selected head dims, dtypes and masks\n",
               arch_name);
    return FJ_OK;
}

/* Appends the kernels of one point the selected kinds need to v[*n]. */
static fj_status add_point(const flags *f, int head_dim, fj_dtype dtype, int mask, uint32_t arch,
                           variant *v, size_t *n)
{
    seq_variant sv[5];
    const int nsv = seq_variants(f, sv);
    for (int mods = 0; mods <= MOD_ALL; mods++) {
        if (!mods_selected(f, mods)) continue;
        for (int i = 0; i < nsv; i++) {
            /* the CUDA kernels take ALiBi and sinks on dense problems only */
            if ((mods & (MOD_ALIBI | MOD_SINKS)) && sv[i].features) continue;
            fj_kernel_desc prefill, decode;
            fj_status s;
            if ((s = runtime_desc_seq(head_dim, dtype, mask, mods, 128, arch, sv[i], &prefill)) ||
                (s = runtime_desc_seq(head_dim, dtype, mask, mods, 1, arch, sv[i], &decode)))
                return s;
            fj_kernel_desc out[8];
            int m = 0;
            if (f->kind[KIND_PREFILL]) out[m++] = prefill;
            if (f->kind[KIND_DECODE]) out[m++] = decode;
            if (f->kind[KIND_SPLIT]) {
                /* the combine kernels of both are the same two (add_unique) */
                add_split_of(&prefill, out, &m);
                add_split_of(&decode, out, &m);
            }
            add_unique(out, m, v, n);
        }
    }
    return FJ_OK;
}

static fj_status make_variants(const flags *f, variant **out, size_t *count)
{
    size_t n = 0, cap = ((size_t)f->narchs * 2 * 4 * (FJ_CUDA_MAX_HEAD_DIM / 8) * 6 +
                         (size_t)f->narchs * fj_tuning_count(fj_tuning_shipped()) * 4) *
                        (f->kind[KIND_SOFTCAP] ? 2 : 1) * (f->kind[KIND_ALIBI] ? 2 : 1) *
                        (f->kind[KIND_SINKS] ? 2 : 1) * 5;
    variant *v = calloc(cap, sizeof *v);
    if (!v) return FJ_ERR_OUT_OF_MEMORY;
    static const fj_dtype dtypes[2] = {FJ_F16, FJ_BF16};
    for (int a = 0; a < f->narchs; a++)
        for (int d = 8; d <= FJ_CUDA_MAX_HEAD_DIM; d += 8)
            for (int t = 0; t < 2; t++)
                for (int m = 0; m < 4; m++) {
                    if (!f->head_dim[d] || !f->dtype[dtypes[t]] || !f->mask[m]) continue;
                    fj_status s = add_point(f, d, dtypes[t], m, f->archs[a], v, &n);
                    if (s != FJ_OK) {
                        free(v);
                        return s;
                    }
                }
    for (int a = 0; a < f->narchs && f->kind[KIND_SHIPPED]; a++) {
        fj_status s = add_shipped(f, f->archs[a], v, &n);
        if (s != FJ_OK) {
            free(v);
            return s;
        }
    }
    *out = v;
    *count = n;
    return FJ_OK;
}

/* ---- compiling ----------------------------------------------------------------- */

static void print_result(const variant *v, size_t index, size_t count, int max_spill)
{
    int w = count >= 1000 ? 4 : count >= 100 ? 3 : 2;
    if (v->status != FJ_OK) {
        printf("[%*zu/%zu] %-52s FAILED %s\n%s\n", w, index, count, v->name,
               fj_status_name(v->status), v->error);
        return;
    }
    char when[32];
    if (v->cached) snprintf(when, sizeof when, "cached");
    else snprintf(when, sizeof when, "%.2f s", v->seconds);
    if (v->is_ptx) {
        printf("[%*zu/%zu] %-52s %8s  PTX (registers known after the driver's JIT)  smem %zu\n", w,
               index, count, v->name, when, v->smem);
        return;
    }
    printf("[%*zu/%zu] %-52s %8s  regs %3u  spills %3u%s  smem %zu\n", w, index, count, v->name,
           when, v->res.registers, v->res.frame_bytes,
           v->res.frame_bytes > (unsigned)max_spill ? " OVER --max-spill" : "", v->smem);
}

static void build_one(variant *v, const char *cache_dir)
{
    fj_kernel_image img;
    v->status = fj_kernel_build(&v->desc, cache_dir, &img);
    if (v->status == FJ_OK) {
        v->cached = img.from_cache;
        v->is_ptx = img.is_ptx;
        v->seconds = img.compile_seconds;
        v->smem = fj_kernel_desc_smem_bytes(&v->desc);
        if (!img.is_ptx) {
            v->status =
                fj_cubin_resources_read(img.data, img.size, fj_codegen_entry(&v->desc), &v->res);
            v->smem += v->res.static_smem;
        }
    }
    if (v->status != FJ_OK) snprintf(v->error, sizeof v->error, "%s", fj_last_error());
    fj_kernel_image_free(&img);
}

static void *worker(void *arg)
{
    job *j = arg;
    for (;;) {
        pthread_mutex_lock(&j->lock);
        size_t i = j->next < j->count ? j->next++ : j->count;
        pthread_mutex_unlock(&j->lock);
        if (i == j->count) return NULL;
        build_one(&j->v[i], j->cache_dir);
        pthread_mutex_lock(&j->lock);
        print_result(&j->v[i], ++j->done, j->count, j->max_spill);
        fflush(stdout);
        pthread_mutex_unlock(&j->lock);
    }
}

int cmd_compile_all(int argc, char **argv)
{
    flags f;
    int rc = parse_flags(argc, argv, &f);
    if (rc) return rc < 0 ? 0 : rc;

    /* NVRTC first: without it nothing below can work, and the message says
       why (which library, which variable). */
    fj_nvrtc_target t[MAX_ARCHS];
    fj_status s;
    for (int a = 0; a < f.narchs; a++)
        if ((s = fj_nvrtc_target_for_arch(f.archs[a], false, &t[a])) != FJ_OK)
            return cli_fail("compile-all", s);

    char *dir, *note;
    if ((s = fj_cache_dir_resolve(f.cache_dir, &dir, &note)) != FJ_OK)
        return cli_fail("compile-all", s);
    variant *v;
    size_t count;
    if ((s = make_variants(&f, &v, &count)) != FJ_OK) {
        free(dir);
        free(note);
        return cli_fail("compile-all", s);
    }
    if (f.jobs > (int)count) f.jobs = count ? (int)count : 1;
    printf("compile-all: %zu kernels, NVRTC %d.%d, %d thread%s, cache %s\n", count,
           t[0].nvrtc_major, t[0].nvrtc_minor, f.jobs, f.jobs == 1 ? "" : "s", dir ? dir : note);
    for (int a = 0; a < f.narchs; a++)
        printf("  sm_%u: %s %s, options %s\n", (unsigned)f.archs[a], t[a].is_ptx ? "PTX" : "cubin",
               t[a].target, t[a].options_text);
    fflush(stdout);

    job j = {v, count, 0, 0, dir, f.max_spill, PTHREAD_MUTEX_INITIALIZER};
    double t0 = cli_now();
    pthread_t threads[1024];
    int started = 0;
    for (; started < f.jobs; started++)
        if (pthread_create(&threads[started], NULL, worker, &j) != 0) break;
    if (started == 0) worker(&j); /* no thread could start: do the work here */
    for (int i = 0; i < started; i++) pthread_join(threads[i], NULL);
    double wall = cli_now() - t0;

    size_t compiled = 0, cached = 0, failed = 0, spilled = 0, over = 0;
    double nvrtc_seconds = 0, slowest = 0;
    const char *slowest_name = "";
    for (size_t i = 0; i < count; i++) {
        if (v[i].status != FJ_OK) {
            failed++;
            continue;
        }
        if (v[i].res.frame_bytes) spilled++;
        if (v[i].res.frame_bytes > (unsigned)f.max_spill) over++;
        if (v[i].cached) {
            cached++;
        } else {
            compiled++;
            nvrtc_seconds += v[i].seconds;
            if (v[i].seconds > slowest) slowest = v[i].seconds, slowest_name = v[i].name;
        }
    }
    printf("\n%zu kernels in %.1f s wall: %zu compiled (%.1f s of NVRTC, slowest %.2f s %s), "
           "%zu cached, %zu failed, %zu spilling (%zu over --max-spill %d)\n",
           count, wall, compiled, nvrtc_seconds, slowest, slowest_name, cached, failed, spilled,
           over, f.max_spill);
    for (size_t i = 0; i < count; i++)
        if (v[i].status != FJ_OK || v[i].res.frame_bytes > (unsigned)f.max_spill)
            printf("  %s %s\n", v[i].status != FJ_OK ? "FAILED" : "SPILLS", v[i].name);
    free(v);
    free(dir);
    free(note);
    return failed || over ? 1 : 0;
}
