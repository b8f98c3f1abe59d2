/* Descriptor to loadable image: render, look up the disk cache, compile with
 * NVRTC on a miss, store. The cache key covers everything that changes the
 * image (source, options, NVRTC version, target), so a hit is always the
 * image a compile would give now. */
#include "cuda/jit/kernel_build.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/jit/cache.h"
#include "cuda/jit/codegen.h"
#include "cuda/jit/nvrtc_compile.h"
#include "log.h"
#include "status.h"

/* The cache checks size and checksum; this checks that the payload is the
 * kind of image the target produces, so a cubin is never handed to the
 * driver as PTX or the reverse. */
static bool image_matches(const void *data, size_t size, bool is_ptx)
{
    if (is_ptx) return size > 0 && strlen(data) == size;
    return size >= 4 && !memcmp(data, "\177ELF", 4);
}

fj_status fj_kernel_target(const fj_kernel_desc *k, bool want_ptx, fj_nvrtc_target *t)
{
    fj_status s = fj_nvrtc_target_for_arch(k->arch, want_ptx, t);
    if (s == FJ_OK && fj_codegen_arch_specific(k)) s = fj_nvrtc_target_arch_specific(t, k->arch);
    return s;
}

fj_status fj_kernel_build(const fj_kernel_desc *k, const char *cache_dir, fj_kernel_image *out)
{
    memset(out, 0, sizeof *out);
    fj_kernel_desc_name(k, out->name, sizeof out->name);
    char *source;
    size_t len;
    fj_status s = fj_codegen_render(k, &source, &len);
    if (s != FJ_OK) return s;
    fj_nvrtc_target t;
    if ((s = fj_kernel_target(k, false, &t)) != FJ_OK) {
        free(source);
        return s;
    }
    out->is_ptx = t.is_ptx;
    snprintf(out->target, sizeof out->target, "%s", t.target);
    fj_cache_key key =
        fj_cache_key_make(source, len, t.options_text, t.nvrtc_major, t.nvrtc_minor, t.target);

    if (cache_dir) {
        void *data;
        size_t size;
        if ((s = fj_cache_load(cache_dir, out->name, &key, &data, &size)) != FJ_OK) {
            free(source);
            return s;
        }
        if (data && !image_matches(data, size, t.is_ptx)) {
            FJ_DEBUG("cache entry of %s holds no %s: compiling again", out->name,
                     t.is_ptx ? "PTX" : "cubin");
            free(data);
            data = NULL;
        }
        if (data) {
            FJ_INFO("cache HIT %s", out->name);
            free(source);
            out->data = data;
            out->size = size;
            out->from_cache = true;
            return FJ_OK;
        }
        FJ_INFO("cache MISS %s", out->name);
    }

    s = fj_nvrtc_compile(&t, out->name, source, &out->data, &out->size, &out->compile_seconds);
    free(source);
    if (s != FJ_OK) return s;
    FJ_INFO("compiled %s in %.2f s (%s %s, %zu bytes)", out->name, out->compile_seconds,
            t.is_ptx ? "PTX" : "cubin", t.target, out->size);

    if (cache_dir) {
        if (fj_cache_store(cache_dir, out->name, &key, out->data, out->size) == FJ_OK) {
            FJ_INFO("cache SAVE %s", out->name);
        } else {
            /* The image in hand works; only the next process pays a compile. */
            FJ_INFO("cache SAVE of %s failed, the kernel is used uncached: %s", out->name,
                    fj_last_error());
            fj_clear_error();
        }
    }
    return FJ_OK;
}

void fj_kernel_image_free(fj_kernel_image *img)
{
    if (!img) return;
    free(img->data);
    memset(img, 0, sizeof *img);
}
