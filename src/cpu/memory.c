/* Host memory for the CPU backends: fj_malloc gives 64-byte aligned blocks so
 * one program written against fj_malloc runs on CPU and CUDA alike. */
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "status.h"

fj_status fj_cpu_mem_alloc(fj_context *ctx, size_t bytes, void **ptr)
{
    (void)ctx;
    size_t rounded = (bytes + 63) & ~(size_t)63;
    if (rounded < bytes)
        return fj_fail(FJ_ERR_OUT_OF_MEMORY, "fj_malloc: %zu bytes is too large", bytes);
    *ptr = aligned_alloc(64, rounded ? rounded : 64);
    if (!*ptr)
        return fj_fail(FJ_ERR_OUT_OF_MEMORY, "fj_malloc: cannot allocate %zu bytes of host memory",
                       bytes);
    return FJ_OK;
}

void fj_cpu_mem_free(fj_context *ctx, void *ptr)
{
    (void)ctx;
    free(ptr);
}

fj_status fj_cpu_memcpy(fj_context *ctx, void *dst, const void *src, size_t bytes)
{
    (void)ctx;
    if (bytes) memmove(dst, src, bytes);
    return FJ_OK;
}

fj_status fj_cpu_synchronize(fj_context *ctx, void *stream)
{
    (void)ctx;
    (void)stream;
    return FJ_OK;
}
