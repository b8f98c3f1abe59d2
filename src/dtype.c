/* Element types on the host: their sizes, and conversion between them for
 * the caller's data (fj_convert). The per-element arithmetic is the core's
 * (half.h), the one the CPU backends and the tuner use, so a tensor an
 * application converts here rounds exactly as their stores do. The loops
 * are compiled for AVX-512 and AVX2 as well as the baseline, the loader
 * picking the best the CPU has, as the CPU backends' rows are (cpu/vmath.h);
 * float32 -> f16 takes vcvtps2ph where the CPU has F16C instead: the
 * per-element form branches on subnormal results with float arithmetic,
 * which keeps GCC from vectorizing it (docs/benchmarks.md, "fj_convert").
 * vcvtps2ph gives the same round-to-nearest-even result for every value but
 * NaN (both quiet it and keep its sign; it keeps the payload's top bits,
 * the per-element form drops them). */
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "flashjit.h"
#include "half.h"
#include "status.h"

#include "multiversion.h"

/* The clones where multiversioning works (multiversion.h: not clang, not
   TSan, whose runtime is not up when the resolvers run); the F16C path is a
   plain function chosen at run time, so it needs no resolver. */
#if FJ_MULTIVERSION
#define ROW_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define ROW_CLONES
#endif
#if defined(__x86_64__) && defined(__GNUC__) && defined(__ELF__) && !defined(FJ_NO_MULTIVERSION)
#include <cpuid.h>
#include <immintrin.h>
#define HAVE_F16C_PATH 1
#endif

/* n f16 or bf16 values to float32 (exact). */
ROW_CLONES static void widen(float *dst, const uint16_t *src, fj_dtype t, int64_t n)
{
    if (t == FJ_F16)
        for (int64_t i = 0; i < n; i++) dst[i] = fj_f16_to_f32(src[i]);
    else
        for (int64_t i = 0; i < n; i++) dst[i] = fj_bf16_to_f32(src[i]);
}

/* n float32 values to f16 or bf16, rounding to nearest-even. */
ROW_CLONES static void narrow_rows(uint16_t *dst, const float *src, fj_dtype t, int64_t n)
{
    if (t == FJ_F16)
        for (int64_t i = 0; i < n; i++) dst[i] = fj_f32_to_f16(src[i]);
    else
        for (int64_t i = 0; i < n; i++) dst[i] = fj_f32_to_bf16(src[i]);
}

#ifdef HAVE_F16C_PATH
/* Eight floats per vcvtps2ph (rounding from its immediate, not MXCSR); the
   tail element by element. */
__attribute__((target("avx,f16c"))) static void f32_to_f16_f16c(uint16_t *dst, const float *src,
                                                                int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(void *)(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    narrow_rows(dst + i, src + i, FJ_F16, n - i);
}
#endif

#ifdef HAVE_F16C_PATH
/* F16C and AVX by CPUID, and the YMM state enabled in XCR0: clang's
 * __builtin_cpu_supports does not know "f16c". */
static bool cpu_asks_f16c(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
    const bool osxsave = c >> 27 & 1, avx = c >> 28 & 1, f16c = c >> 29 & 1;
    if (!osxsave || !avx || !f16c) return false;
    unsigned lo, hi;
    __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (lo & 6) == 6;
}

/* CPUID traps to the hypervisor in a virtual machine, so it is asked once;
   a race only asks twice and stores the same answer. */
static bool cpu_has_f16c(void)
{
    static _Atomic int known; /* 0 not asked, 1 no, 2 yes */
    int k = atomic_load_explicit(&known, memory_order_relaxed);
    if (!k) {
        k = cpu_asks_f16c() ? 2 : 1;
        atomic_store_explicit(&known, k, memory_order_relaxed);
    }
    return k == 2;
}
#endif

static void narrow(uint16_t *dst, const float *src, fj_dtype t, int64_t n)
{
#ifdef HAVE_F16C_PATH
    if (t == FJ_F16 && cpu_has_f16c()) {
        f32_to_f16_f16c(dst, src, n);
        return;
    }
#endif
    narrow_rows(dst, src, t, n);
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
        return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                       "%s (%p) is not aligned to its %s elements (%zu bytes)", name, p,
                       fj_dtype_name(t), size);
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
        narrow(dst, src, dst_dtype, n);
    } else if (dst_dtype == FJ_F32) {
        widen(dst, src, src_dtype, n);
    } else {
        float stage[STAGE_FLOATS];
        const uint16_t *from = src;
        uint16_t *to = dst;
        for (int64_t i = 0; i < n; i += STAGE_FLOATS) {
            int64_t m = n - i < STAGE_FLOATS ? n - i : STAGE_FLOATS;
            widen(stage, from + i, src_dtype, m);
            narrow(to + i, stage, dst_dtype, m);
        }
    }
    return FJ_OK;
}
