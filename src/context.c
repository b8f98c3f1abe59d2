/* Context creation: resolves AUTO to a registry row (and records why, for
 * every row), the cache directory and tuning file; owns the worker pool and
 * the chosen backend's state. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "context.h"
#include "log.h"
#include "paths.h"
#include "plan_cache.h"
#include "pool.h"
#include "status.h"
#include "tune/tuning.h"

void fj_context_options_init(fj_context_options *o)
{
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->backend = FJ_BACKEND_AUTO;
}

const char *fj_backend_name(fj_backend b)
{
    switch (b) {
    case FJ_BACKEND_AUTO: return "auto";
    case FJ_BACKEND_CPU_REFERENCE: return "cpu-reference";
    case FJ_BACKEND_CPU: return "cpu";
    case FJ_BACKEND_CUDA: return "cuda";
    }
    return NULL;
}

unsigned fj_version(void)
{
    return FLASHJIT_VERSION_MAJOR * 10000u + FLASHJIT_VERSION_MINOR * 100u + FLASHJIT_VERSION_PATCH;
}

/* FLASHJIT_BACKEND overrides AUTO only: an explicit choice in the options is
 * the program's, the variable is the user's way to steer a program that says
 * AUTO. */
static fj_status backend_from_env(fj_backend *b, fj_strbuf *why)
{
    const char *s = getenv("FLASHJIT_BACKEND");
    if (!s || !*s || !strcmp(s, "auto")) return FJ_OK;
    if (!strcmp(s, "cpu")) *b = FJ_BACKEND_CPU;
    else if (!strcmp(s, "reference") || !strcmp(s, "cpu-reference")) *b = FJ_BACKEND_CPU_REFERENCE;
    else if (!strcmp(s, "cuda")) *b = FJ_BACKEND_CUDA;
    else
        return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                       "FLASHJIT_BACKEND (\"%s\") is not one of auto, cpu, reference, cuda", s);
    fj_strbuf_printf(why, "FLASHJIT_BACKEND=%s", s);
    return FJ_OK;
}

static fj_status check_options(const fj_context_options *o)
{
    /* Zero is what a later version's option in this slot will mean "as
       before"; anything else is options not filled by the init function. */
    for (int i = 0; i < (int)(sizeof o->reserved / sizeof o->reserved[0]); i++)
        if (o->reserved[i])
            return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                           "reserved[%d] (%lld) must be zero: fill the options with "
                           "fj_context_options_init, then set their fields by name",
                           i, (long long)o->reserved[i]);
    if (!fj_backend_name(o->backend))
        return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                       "backend (%d) is not one of FJ_BACKEND_AUTO, FJ_BACKEND_CPU_REFERENCE, "
                       "FJ_BACKEND_CPU, FJ_BACKEND_CUDA",
                       (int)o->backend);
    if (o->device < 0)
        return fj_fail(FJ_ERR_INVALID_ARGUMENT, "device (%d) must be >= 0", o->device);
    if (o->cpu_threads < 0)
        return fj_fail(FJ_ERR_INVALID_ARGUMENT, "cpu_threads (%d) must be >= 0 (0: one per core)",
                       o->cpu_threads);
    return FJ_OK;
}

static int online_cores(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 1024 ? 1024 : (int)n;
}

/* Walks the registry: the row asked for or, under AUTO, each row AUTO may
 * pick, in order, until one probes usable. Every row adds its lines to `rows`:
 * what its probe found, why it is not usable, or why it was not probed. */
static fj_status choose_backend(fj_context *ctx, fj_backend want, fj_strbuf *why, fj_strbuf *rows)
{
    for (const fj_backend_entry *const *it = fj_backend_registry; *it; it++) {
        const fj_backend_entry *e = *it;
        bool candidate = want == FJ_BACKEND_AUTO ? e->auto_choice : e->kind == want;
        if (!candidate || ctx->entry) {
            fj_strbuf_printf(rows, "%s: %s\n", e->name,
                             !e->auto_choice ? "on request only (never AUTO's choice)"
                             : ctx->entry    ? "not probed (a backend before it was chosen)"
                                             : "not probed (another backend was asked for)");
            continue;
        }
        void *state = NULL;
        fj_status s = e->probe(ctx, &state, rows);
        if (s == FJ_OK) {
            ctx->entry = e;
            ctx->backend_state = state;
            if (want == FJ_BACKEND_AUTO && why->len) fj_strbuf_printf(why, ", so %s", e->title);
            else if (want == FJ_BACKEND_AUTO) fj_strbuf_printf(why, "AUTO: %s", e->usable_when);
        } else if (want == FJ_BACKEND_AUTO && s == FJ_ERR_NO_DEVICE) {
            fj_strbuf_printf(why, "%sAUTO: %s is not usable (%s)", why->len ? "; " : "", e->title,
                             fj_last_error());
            fj_clear_error();
        } else {
            return s; /* the reason is in fj_last_error() */
        }
    }
    if (!ctx->entry)
        return fj_fail(FJ_ERR_INTERNAL, "no backend in the registry is usable, not even the CPU");
    return FJ_OK;
}

/* Everything after the options were checked; on failure the caller destroys ctx. */
static fj_status context_setup(fj_context *ctx, const fj_context_options *o, fj_strbuf *d)
{
    fj_strbuf why, rows;
    fj_strbuf_init(&why);
    fj_strbuf_init(&rows);
    fj_backend want = o->backend;
    fj_status s = fj_log_check_env();
    if (!s && want == FJ_BACKEND_AUTO) s = backend_from_env(&want, &why);
    if (s) goto out;
    if (o->backend != FJ_BACKEND_AUTO) fj_strbuf_puts(&why, "asked for in the options");

    ctx->device = o->device;
    ctx->cpu_threads = o->cpu_threads ? o->cpu_threads : online_cores();
    if ((s = fj_cache_dir_resolve(o->cache_dir, &ctx->cache_dir, &ctx->cache_dir_note))) goto out;
    if ((s = fj_tuning_path_resolve(o->tuning_file, ctx->cache_dir, &ctx->tuning_file))) goto out;
    /* Every context gets a pool: CPU plans run on it, and the tuner checks
       any backend's candidates against the CPU reference with it. */
    if ((s = fj_pool_create(ctx->cpu_threads, &ctx->pool))) goto out;
    if ((s = choose_backend(ctx, want, &why, &rows))) goto out;

    fj_strbuf_printf(d, "flashjit %s\n", FLASHJIT_VERSION_STRING);
    fj_strbuf_printf(d, "backend: %s (%s)\n", ctx->entry->name, why.data ? why.data : "");
    fj_strbuf_printf(d, "cpu: %d threads\n", ctx->cpu_threads);
    if (rows.data) fj_strbuf_puts(d, rows.data);
    if (ctx->cache_dir) fj_strbuf_printf(d, "cache: %s\n", ctx->cache_dir);
    else fj_strbuf_printf(d, "cache: %s\n", ctx->cache_dir_note);
    if ((s = fj_tuning_load(ctx, d))) goto out;
out:
    fj_strbuf_free(&why);
    fj_strbuf_free(&rows);
    return s;
}

fj_status fj_context_create(const fj_context_options *o, fj_context **out)
{
    fj_clear_error();
    if (!out) return fj_fail(FJ_ERR_INVALID_ARGUMENT, "out (the fj_context ** to fill) is NULL");
    *out = NULL;
    fj_context_options defaults;
    if (!o) {
        fj_context_options_init(&defaults);
        o = &defaults;
    }
    fj_status s = check_options(o);
    if (s) return s;
    fj_context *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return fj_fail(FJ_ERR_OUT_OF_MEMORY, "out of memory creating the context");
    pthread_mutex_init(&ctx->plan_lock, NULL);
    fj_strbuf d;
    fj_strbuf_init(&d);
    s = context_setup(ctx, o, &d);
    if (s == FJ_OK) {
        ctx->describe = fj_strbuf_take(&d);
        if (!ctx->describe)
            s = fj_fail(FJ_ERR_OUT_OF_MEMORY, "out of memory describing the context");
    }
    fj_strbuf_free(&d);
    if (s) {
        fj_context_destroy(ctx);
        return s;
    }
    FJ_INFO("context: backend %s, %d CPU threads, cache %s", ctx->entry->name, ctx->cpu_threads,
            ctx->cache_dir ? ctx->cache_dir : "off");
    *out = ctx;
    return FJ_OK;
}

void fj_context_destroy(fj_context *ctx)
{
    if (!ctx) return;
    fj_plan_cache_clear(ctx);
    fj_tuning_free(ctx->tuning);
    if (ctx->entry && ctx->entry->release) ctx->entry->release(ctx->backend_state);
    fj_pool_destroy(ctx->pool);
    pthread_mutex_destroy(&ctx->plan_lock);
    free(ctx->cache_dir);
    free(ctx->cache_dir_note);
    free(ctx->tuning_file);
    free(ctx->describe);
    free(ctx);
}

fj_backend fj_context_backend(const fj_context *ctx)
{
    return ctx && ctx->entry ? ctx->entry->kind : FJ_BACKEND_AUTO;
}

int fj_context_cpu_threads(const fj_context *ctx) { return ctx ? ctx->cpu_threads : 0; }

const char *fj_context_describe(const fj_context *ctx)
{
    return ctx && ctx->describe ? ctx->describe : "";
}

/* ---- memory of the context's backend ---------------------------------- */

fj_status fj_malloc(fj_context *ctx, size_t bytes, void **ptr)
{
    fj_clear_error();
    if (!ptr) return fj_fail(FJ_ERR_INVALID_ARGUMENT, "fj_malloc: ptr is NULL");
    *ptr = NULL;
    if (!ctx) return fj_fail(FJ_ERR_INVALID_ARGUMENT, "fj_malloc: ctx is NULL");
    return ctx->entry->ops->mem_alloc(ctx, bytes, ptr);
}

void fj_free(fj_context *ctx, void *ptr)
{
    if (ctx && ptr) ctx->entry->ops->mem_free(ctx, ptr);
}

static fj_status check_copy(const char *fn, fj_context *ctx, void *dst, const void *src,
                            size_t bytes)
{
    if (!ctx) return fj_fail(FJ_ERR_INVALID_ARGUMENT, "%s: ctx is NULL", fn);
    if (bytes && (!dst || !src))
        return fj_fail(FJ_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn, dst ? "src" : "dst");
    return FJ_OK;
}

fj_status fj_copy_to_device(fj_context *ctx, void *dst, const void *src, size_t bytes)
{
    fj_clear_error();
    fj_status s = check_copy("fj_copy_to_device", ctx, dst, src, bytes);
    return s ? s : bytes ? ctx->entry->ops->copy_to_device(ctx, dst, src, bytes) : FJ_OK;
}

fj_status fj_copy_to_host(fj_context *ctx, void *dst, const void *src, size_t bytes)
{
    fj_clear_error();
    fj_status s = check_copy("fj_copy_to_host", ctx, dst, src, bytes);
    return s ? s : bytes ? ctx->entry->ops->copy_to_host(ctx, dst, src, bytes) : FJ_OK;
}

fj_status fj_synchronize(fj_context *ctx, void *stream)
{
    fj_clear_error();
    if (!ctx) return fj_fail(FJ_ERR_INVALID_ARGUMENT, "fj_synchronize: ctx is NULL");
    return ctx->entry->ops->synchronize(ctx, stream);
}
