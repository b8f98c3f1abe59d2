/* Element types on the host: their sizes, and conversion between them for
 * the caller's data (fj_convert). The arithmetic is the CPU backends' own
 * (cpu/convert.h, multiversioned for AVX-512 and AVX2), so a tensor an
 * application converts here rounds exactly as the CPU backends' stores do,
 * except float32 -> f16 on a CPU with F16C: the per-element form has a
 * branch on subnormal results that keeps the compiler from vectorizing it
 * (docs/benchmarks.md, "fj_convert"), so vcvtps2ph does that conversion,
 * with the same round-to-nearest-even result for every value but NaN
 * (both quiet it and keep its sign; vcvtps2ph keeps the payload's top bits,
 * the per-element form drops them). */
#include <stdint.h>
#include <string.h>

#include "cpu/convert.h"
#include "status.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_F16C_PATH 1

/* Eight floats per vcvtps2ph (rounding from its immediate, not MXCSR); the
   tail through the shared store. */
__attribute__((target("avx,f16c"))) static void f32_to_f16_f16c(uint16_t *dst, const float *src,
                                                                 int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(void *)(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    if (i < n) fj_store_f32(dst + i, FJ_F16, 0, src + i, 0, 1, n - i);
}
#endif

/* float32 -> dtype t (f16 or bf16) of n elements. */
static void store_f32(void *dst, fj_dtype t, const float *src, int64_t n)
{
#ifdef HAVE_F16C_PATH
    if (t == FJ_F16 && __builtin_cpu_supports("f16c")) {
        f32_to_f16_f16c(dst, src, n);
        return;
    }
#endif
    fj_store_f32(dst, t, 0, src, 0, 1, n);
}

size_t fj_dtype_size(fj_dtype t)
{
    switch (t) {
    case FJ_F32: return 4;
    case FJ_F16: return 2;
    case FJ_BF16: return 2;
    }
    return 0;
}

/* f16 <-> bf16 passes through float32 a block at a time: widening is exact,
   so the one rounding is the narrowing store's. */
enum { STAGE_FLOATS = 1024 };

static fj_status check_buffer(const char *name, const void *p, fj_dtype t, size_t count,
                              size_t *bytes)
{
    size_t size = fj_dtype_size(t);
    if (!size)
        return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                       "%s_dtype (%d) is not one of FJ_F32, FJ_F16, FJ_BF16", name, (int)t);
    if (count > SIZE_MAX / size)
        return fj_fail(FJ_ERR_INVALID_ARGUMENT, "count (%zu) %s elements overflow size_t", count,
                       fj_dtype_name(t));
    *bytes = count * size;
    if (!p && count)
        return fj_fail(FJ_ERR_INVALID_ARGUMENT, "%s is NULL with count %zu", name, count);
    if (p && (uintptr_t)p % size)
        return fj_fail(FJ_ERR_INVALID_ARGUMENT, "%s (%p) is not aligned to its %s elements (%zu bytes)",
                       name, p, fj_dtype_name(t), size);
    return FJ_OK;
}

fj_status fj_convert(fj_dtype dst_dtype, void *dst, fj_dtype src_dtype, const void *src,
                     size_t count)
{
    fj_clear_error();
    size_t dst_bytes = 0, src_bytes = 0;
    fj_status s = check_buffer("dst", dst, dst_dtype, count, &dst_bytes);
    if (!s) s = check_buffer("src", src, src_dtype, count, &src_bytes);
    if (s) return s;
    if (!count) return FJ_OK;
    uintptr_t d0 = (uintptr_t)dst, s0 = (uintptr_t)src;
    if (d0 < s0 + src_bytes && s0 < d0 + dst_bytes)
        return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                       "dst [%p, +%zu bytes) and src [%p, +%zu bytes) overlap; convert into "
                       "a separate buffer",
                       dst, dst_bytes, src, src_bytes);

    const int64_t n = (int64_t)count;
    if (dst_dtype == src_dtype) {
        memcpy(dst, src, dst_bytes);
    } else if (src_dtype == FJ_F32) {
        store_f32(dst, dst_dtype, src, n);
    } else if (dst_dtype == FJ_F32) {
        fj_load_f32(dst, 0, src, src_dtype, 0, 1, n);
    } else {
        float stage[STAGE_FLOATS];
        const char *from = src;
        char *to = dst;
        for (int64_t i = 0; i < n; i += STAGE_FLOATS) {
            int64_t m = n - i < STAGE_FLOATS ? n - i : STAGE_FLOATS;
            fj_load_f32(stage, 0, from + i * 2, src_dtype, 0, 1, m);
            store_f32(to + i * 2, dst_dtype, stage, m);
        }
    }
    return FJ_OK;
}
