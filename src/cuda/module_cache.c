/* The per-context kernel cache (see module_cache.h). A list of entries, each
 * READY or BUILDING: a thread that misses inserts a BUILDING entry, builds
 * and loads without holding the lock (an NVRTC compile takes seconds, and
 * other kernels must not wait for it), then marks it READY, or removes it on
 * failure. A thread that finds a BUILDING entry waits on the condition
 * variable and looks again, so one kernel is never compiled twice at once,
 * and a failed build is retried by the next caller with its own error text.
 * Contexts hold tens of kernels, so a linear search is enough. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/jit/codegen.h"
#include "cuda/device.h"
#include "cuda/module_cache.h"
#include "cuda/jit/kernel_build.h"
#include "log.h"
#include "status.h"

/* Dynamic shared memory a launch gets without opting in. */
#define DEFAULT_DYNAMIC_SMEM (48u * 1024u)

typedef struct cache_entry {
    struct cache_entry *next;
    bool ready;
    fj_cuda_kernel kernel;
} cache_entry;

struct fj_module_cache {
    pthread_mutex_t lock;
    pthread_cond_t built; /* signalled whenever a build finishes, well or not */
    cache_entry *entries;
    int count; /* READY entries */
};

fj_status fj_module_cache_create(fj_module_cache **out)
{
    *out = NULL;
    fj_module_cache *c = calloc(1, sizeof *c);
    if (!c) return fj_fail(FJ_ERR_OUT_OF_MEMORY, "out of memory for the CUDA module cache");
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->built, NULL);
    *out = c;
    return FJ_OK;
}

void fj_module_cache_destroy(fj_module_cache *c, const fj_cuda_state *s)
{
    if (!c) return;
    bool pushed = c->entries && fj_cuda_push(s) == FJ_OK;
    for (cache_entry *e = c->entries, *next; e; e = next) {
        next = e->next;
        if (pushed && e->kernel.module) {
            CUresult r = s->api->cuModuleUnload(e->kernel.module);
            if (r != FJ_CUDA_SUCCESS)
                FJ_DEBUG("cuda: cuModuleUnload(%s) returned %d", e->kernel.name, r);
        }
        free(e);
    }
    if (pushed) fj_cuda_pop(s);
    pthread_cond_destroy(&c->built);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

int fj_module_cache_count(fj_module_cache *c)
{
    pthread_mutex_lock(&c->lock);
    int n = c->count;
    pthread_mutex_unlock(&c->lock);
    return n;
}

static cache_entry *find(fj_module_cache *c, const char *name)
{
    for (cache_entry *e = c->entries; e; e = e->next)
        if (!strcmp(e->kernel.name, name)) return e;
    return NULL;
}

static fj_status func_attribute(const fj_cuda_state *s, const fj_cuda_kernel *kn, int attrib,
                                const char *attrib_name, int *value)
{
    CUresult r = s->api->cuFuncGetAttribute(value, attrib, kn->function);
    if (r == FJ_CUDA_SUCCESS) return FJ_OK;
    fj_status st = fj_cuda_fail(s->api, r, "cuFuncGetAttribute");
    return fj_fail_prefix(st, "%s of %s", attrib_name, kn->name);
}

/* Module load and function lookup for an image; the context is pushed. */
static fj_status load_image(const fj_cuda_state *s, const fj_kernel_image *img, fj_cuda_kernel *kn)
{
    const fj_cuda_api *api = s->api;
    CUresult r = api->cuModuleLoadData(&kn->module, img->data);
    if (r != FJ_CUDA_SUCCESS) {
        kn->module = NULL;
        fj_status st = fj_cuda_fail(api, r, "cuModuleLoadData");
        return fj_fail_prefix(st, "loading kernel %s (%s %s, %zu bytes)", kn->name,
                              img->is_ptx ? "PTX" : "cubin", img->target, img->size);
    }
    const char *entry = fj_codegen_entry(&kn->desc);
    r = api->cuModuleGetFunction(&kn->function, kn->module, entry);
    if (r != FJ_CUDA_SUCCESS) {
        fj_status st = fj_cuda_fail(api, r, "cuModuleGetFunction");
        return fj_fail_prefix(st, "kernel %s has no entry point %s", kn->name, entry);
    }
    fj_status st;
    if ((st = func_attribute(s, kn, FJ_CU_FUNC_ATTRIBUTE_NUM_REGS, "NUM_REGS", &kn->num_regs)) ||
        (st = func_attribute(s, kn, FJ_CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, "LOCAL_SIZE_BYTES",
                             &kn->local_bytes)) ||
        (st = func_attribute(s, kn, FJ_CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, "SHARED_SIZE_BYTES",
                             &kn->static_smem)) ||
        (st = func_attribute(s, kn, FJ_CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
                             "MAX_THREADS_PER_BLOCK", &kn->max_threads)))
        return st;
    /* Above 48 KiB a launch must be allowed the dynamic shared memory first;
       it is a property of the function, so once per load is enough. */
    if (kn->dyn_smem > DEFAULT_DYNAMIC_SMEM) {
        r = api->cuFuncSetAttribute(kn->function,
                                    FJ_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                    (int)kn->dyn_smem);
        if (r != FJ_CUDA_SUCCESS) {
            st = fj_cuda_fail(api, r, "cuFuncSetAttribute");
            return fj_fail_prefix(st,
                                  "allowing kernel %s %u bytes of dynamic shared memory (the "
                                  "device allows %d)",
                                  kn->name, kn->dyn_smem, s->smem_optin);
        }
        kn->dyn_smem_raised = true;
    }
    return FJ_OK;
}

static fj_status build_and_load(const fj_cuda_state *s, const char *cache_dir, fj_cuda_kernel *kn)
{
    fj_kernel_image img;
    memset(&img, 0, sizeof img);
    fj_status st = fj_kernel_build(&kn->desc, cache_dir, &img);
    if (st) return st;
    kn->is_ptx = img.is_ptx;
    kn->from_disk_cache = img.from_cache;
    kn->compile_seconds = img.compile_seconds;
    memcpy(kn->target, img.target, sizeof kn->target);
    kn->target[sizeof kn->target - 1] = '\0';
    if ((st = fj_cuda_push(s)) == FJ_OK) {
        st = load_image(s, &img, kn);
        if (st && kn->module) {
            s->api->cuModuleUnload(kn->module);
            kn->module = NULL;
        }
        fj_cuda_pop(s);
    }
    fj_kernel_image_free(&img);
    if (st == FJ_OK)
        FJ_INFO("cuda: loaded %s (%s, %s; %d registers, %d bytes local, %u bytes dynamic smem)",
                kn->name, kn->target, kn->from_disk_cache ? "from the disk cache" : "compiled",
                kn->num_regs, kn->local_bytes, kn->dyn_smem);
    return st;
}

fj_status fj_module_cache_get(fj_module_cache *c, const fj_cuda_state *s, const fj_kernel_desc *k,
                              const char *cache_dir, const fj_cuda_kernel **out,
                              bool *loaded_before)
{
    *out = NULL;
    *loaded_before = false;
    char name[sizeof((fj_cuda_kernel *)0)->name];
    if (fj_kernel_desc_name(k, name, sizeof name) >= (int)sizeof name)
        return fj_fail(FJ_ERR_INTERNAL, "kernel name longer than %zu bytes: %s", sizeof name - 1,
                       name);

    pthread_mutex_lock(&c->lock);
    cache_entry *e;
    while ((e = find(c, name)) && !e->ready) pthread_cond_wait(&c->built, &c->lock);
    if (e) {
        pthread_mutex_unlock(&c->lock);
        *out = &e->kernel;
        *loaded_before = true;
        return FJ_OK;
    }
    if (!(e = calloc(1, sizeof *e))) {
        pthread_mutex_unlock(&c->lock);
        return fj_fail(FJ_ERR_OUT_OF_MEMORY, "out of memory caching kernel %s", name);
    }
    e->kernel.desc = *k;
    memcpy(e->kernel.name, name, sizeof name);
    e->kernel.dyn_smem = (unsigned)fj_kernel_desc_smem_bytes(k);
    e->next = c->entries;
    c->entries = e;
    pthread_mutex_unlock(&c->lock);

    /* Only this thread touches e until it is marked ready or unlinked. */
    fj_status st = build_and_load(s, cache_dir, &e->kernel);

    pthread_mutex_lock(&c->lock);
    if (st == FJ_OK) {
        e->ready = true;
        c->count++;
    } else {
        cache_entry **link = &c->entries;
        while (*link != e) link = &(*link)->next;
        *link = e->next;
    }
    pthread_cond_broadcast(&c->built);
    pthread_mutex_unlock(&c->lock);
    if (st) {
        free(e);
        return st;
    }
    *out = &e->kernel;
    return FJ_OK;
}
