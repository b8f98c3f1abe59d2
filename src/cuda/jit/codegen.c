/* Renders a kernel's CUDA source (kernel_templates/README.md): a comment
 * naming the kernel, the descriptor as macros, then the embedded templates
 * fwd_params.h, common.cuh, the attention headers (attention kernels only)
 * and the kernel template; for a template specialized on the dtype alone
 * (merge), its dtype as FJ_MERGE_DTYPE, its header and its file. The output depends on the descriptor and the
 * embedded text only, so equal descriptors give equal bytes and equal cache
 * keys. */
#include "cuda/jit/codegen.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "strbuf.h"
#include "embedded.h"

const char *fj_codegen_entry(const fj_kernel_desc *k)
{
    const fj_template_row *r = fj_template_row_of(k->template_id);
    return r ? r->entry : NULL;
}

/* The device code the attention templates share, in the order it is pasted
 * (each header uses the ones before it). */
static const char *const attention_headers[] = {"attention_rows.cuh", "softmax.cuh", "mask.cuh",
                                                "tile_io.cuh"};
#define N_ATTENTION_HEADERS (sizeof attention_headers / sizeof attention_headers[0])

bool fj_codegen_arch_specific(const fj_kernel_desc *k)
{
    const fj_template_row *r = fj_template_row_of(k->template_id);
    return r && r->arch_specific;
}

/* Pastes one embedded file, preceded by a #line directive so that NVRTC's
 * diagnostics name the template file and its own line numbers. */
static fj_status paste(fj_strbuf *b, const char *file)
{
    const fj_embedded_file *t = fj_template_find(file);
    if (!t)
        return fj_fail(FJ_ERR_INTERNAL,
                       "kernel template '%s' is not embedded in this build (template_files in "
                       "kernel_templates/meson.build)",
                       file);
    fj_strbuf_printf(b, "#line 1 \"%s\"\n", file);
    fj_strbuf_append(b, t->text, t->size);
    if (t->size == 0 || t->text[t->size - 1] != '\n') fj_strbuf_puts(b, "\n");
    return FJ_OK;
}

static fj_status finish(fj_strbuf *b, const char *name, char **source, size_t *len)
{
    size_t n = b->len;
    char *text = fj_strbuf_take(b);
    if (!text)
        return fj_fail(FJ_ERR_OUT_OF_MEMORY, "out of memory rendering the source of kernel %s",
                       name);
    *source = text;
    *len = n;
    return FJ_OK;
}

fj_status fj_codegen_render(const fj_kernel_desc *k, char **source, size_t *len)
{
    *source = NULL;
    *len = 0;
    /* Every rule but the shared-memory limit (which depends on the device,
       not on the source): a macro must never carry a value the template was
       not written for. */
    fj_status s = fj_kernel_desc_check(k, SIZE_MAX);
    if (s != FJ_OK) return s;

    char name[128];
    fj_kernel_desc_name(k, name, sizeof name);
    fj_strbuf b;
    fj_strbuf_init(&b);
    fj_strbuf_printf(&b, "// flashjit generated kernel %s\n// generator version %u\n", name,
                     (unsigned)k->generator_version);
    const fj_template_row *row = fj_template_row_of(k->template_id);
    if (row->dtype_only) {
        /* fj_dtype's values: 0 f32, 1 f16, 2 bf16 */
        fj_strbuf_printf(&b, "#define FJ_MERGE_DTYPE %u\n", (unsigned)k->dtype);
        const char *only[2] = {row->header, row->file};
        for (int i = 0; i < 2; i++) {
            if (only[i] && (s = paste(&b, only[i])) != FJ_OK) {
                fj_strbuf_free(&b);
                return s;
            }
        }
        return finish(&b, name, source, len);
    }
    bool causal = k->mask == FJ_MASK_CAUSAL || k->mask == FJ_MASK_CAUSAL_WINDOW;
    bool window = k->mask == FJ_MASK_WINDOW || k->mask == FJ_MASK_CAUSAL_WINDOW;
    fj_strbuf_printf(&b,
                     "#define FJ_HEAD_DIM %u\n"
                     "#define FJ_DTYPE_F16 %d\n"
                     "#define FJ_DTYPE_BF16 %d\n"
                     "#define FJ_CAUSAL %d\n"
                     "#define FJ_HAS_WINDOW %d\n"
                     "#define FJ_BLOCK_M %u\n"
                     "#define FJ_BLOCK_N %u\n"
                     "#define FJ_WARPS %u\n"
                     "#define FJ_STAGES %u\n"
                     "#define FJ_SPLIT_KV %u\n"
                     "#define FJ_SMEM_BYTES %zu\n",
                     (unsigned)k->head_dim, k->dtype == FJ_F16, k->dtype == FJ_BF16, causal, window,
                     (unsigned)k->block_m, (unsigned)k->block_n, (unsigned)k->warps,
                     (unsigned)k->stages, (unsigned)k->split_kv, fj_kernel_desc_smem_bytes(k));
    /* Only capped kernels define it (softmax.cuh defaults it to 0), so the
       plain kernels' macro block is as it was; likewise ALiBi's and the
       sinks' (attention_rows.cuh and combine.cu default them). */
    if (k->softcap) fj_strbuf_printf(&b, "#define FJ_SOFTCAP 1\n");
    if (k->alibi) fj_strbuf_printf(&b, "#define FJ_ALIBI 1\n");
    if (k->sinks) fj_strbuf_printf(&b, "#define FJ_SINKS 1\n");
    /* Likewise varlen and paged (attention_rows.cuh and combine.cu default
       them to 0). */
    if (k->varlen) fj_strbuf_printf(&b, "#define FJ_VARLEN 1\n");
    if (k->page_size) fj_strbuf_printf(&b, "#define FJ_PAGE_SIZE %u\n", (unsigned)k->page_size);

    const char *files[4 + N_ATTENTION_HEADERS];
    size_t n_files = 0;
    files[n_files++] = "fwd_params.h";
    files[n_files++] = "common.cuh";
    if (row->attention)
        for (size_t i = 0; i < N_ATTENTION_HEADERS; i++) files[n_files++] = attention_headers[i];
    if (row->header) files[n_files++] = row->header;
    files[n_files++] = row->file;
    for (size_t i = 0; i < n_files; i++) {
        if ((s = paste(&b, files[i])) != FJ_OK) {
            fj_strbuf_free(&b);
            return s;
        }
    }
    return finish(&b, name, source, len);
}
