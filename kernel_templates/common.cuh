/* common.cuh: what a flashjit kernel needs that would otherwise come from the
 * CUDA toolkit headers, written as inline PTX on built-in types only. The
 * generator pastes this file after the descriptor macros and fwd_params.h and
 * before the kernel template, so it must contain no #include: NVRTC is given
 * no include path, and the rendered source must also compile standalone with
 * nvcc -std=c++17 for sm_80 and sm_90.
 *
 * Every instruction used here exists from sm_80 on: cp.async (LDGSTS),
 * ldmatrix (LDSM), mma.sync m16n8k16 with f16 or bf16 inputs and f32
 * accumulators (HMMA), cvt.rn.{f16,bf16}x2.f32 and ex2.approx.ftz.f32;
 * griddepcontrol (sm_90) is compiled in for sm_90 and up only.
 */
#ifndef FJ_COMMON_CUH
#define FJ_COMMON_CUH

#if !defined(FJ_DTYPE_F16) || !defined(FJ_DTYPE_BF16) || (FJ_DTYPE_F16 + FJ_DTYPE_BF16) != 1
#error "exactly one of FJ_DTYPE_F16 and FJ_DTYPE_BF16 must be defined to 1, the other to 0"
#endif

/* Storage type of one q/k/v/o element. It is only ever moved or handed to PTX
 * as raw bits, never computed with, so no half/bfloat16 class is needed. */
typedef unsigned short fj_elem;

/* Programmatic dependent launch (sm_90+). A kernel launched with the
 * programmatic-stream-serialization attribute may start before the kernel
 * ahead of it in the stream has finished; fj_grid_dependency_wait blocks
 * until that kernel has completed and its memory is visible (a no-op when
 * launched without the attribute, and before sm_90).
 * fj_allow_dependent_launch lets the next such kernel launch once every block
 * of this grid has called it or exited. */
__device__ __forceinline__ void fj_grid_dependency_wait()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void fj_allow_dependent_launch()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

/* -inf without math.h. */
#define FJ_NEG_INF (__int_as_float(0xff800000))

/* Shared-memory state-space address of a generic pointer into shared memory,
 * as the 32-bit operand that ld/st.shared, ldmatrix and cp.async take. The
 * builtin (no header needed, NVRTC or nvcc) lets the compiler fold the address
 * of a __shared__ symbol into a constant. */
__device__ __forceinline__ unsigned fj_smem_u32(const void *ptr)
{
    return (unsigned)__cvta_generic_to_shared(ptr);
}

/* ---- conversions ----------------------------------------------------------- */

/* Two floats to one packed pair of elements, rounded to nearest even. lo goes
 * to bits 0..15, which is the lower column index in every mma/ldmatrix
 * register (cvt.rn.*x2.f32 puts its first source operand in the upper half,
 * hence hi before lo below). */
__device__ __forceinline__ unsigned fj_pack2(float lo, float hi)
{
    unsigned r;
#if FJ_DTYPE_BF16
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
#else
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
#endif
    return r;
}

/* 2^x; ftz: subnormal results flush to zero, ex2(-inf) = +0. */
__device__ __forceinline__ float fj_exp2(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

/* log2(x) for x > 0 (lg2.approx: about 22 correct bits). */
__device__ __forceinline__ float fj_log2(float x)
{
    float y;
    asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

/* 1/x, about 1 ulp, no subnormal or slow path: for x in [1, 2^64) (row sums,
 * whose largest term is >= 1). A plain 1.f / x would compile to a called
 * IEEE slow path whose calling convention spills registers. */
__device__ __forceinline__ float fj_rcp(float x)
{
    float y;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

#define FJ_LN2 0.6931471805599453f
#define FJ_LOG2E 1.4426950408889634f

/* ---- cp.async: global -> shared without passing through registers ---------- */

/* Copies 16 bytes from global src to shared dst when src_bytes is 16, or
 * writes 16 zero bytes when src_bytes is 0 (the tail rows of a tile); src
 * must be a valid, 16-byte aligned address either way. .cg: cached in L2
 * only, the data is used once per block from shared memory. */
__device__ __forceinline__ void fj_cp_async_16(unsigned dst, const void *src, unsigned src_bytes)
{
    asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(src_bytes)
                 : "memory");
}

/* fj_cp_async_16 with an L2 cache policy (createpolicy; sm_80+). */
__device__ __forceinline__ void fj_cp_async_16_policy(unsigned dst, const void *src,
                                                      unsigned src_bytes, unsigned long long policy)
{
    asm volatile("cp.async.cg.shared.global.L2::cache_hint.L2::128B [%0], [%1], 16, %2, %3;\n"
                 ::"r"(dst), "l"(src), "r"(src_bytes), "l"(policy)
                 : "memory");
}

/* An L2 policy for data no other block will read (a decode call's K and V,
 * streamed once): evict_first, so L2 gives those lines up before any other. */
__device__ __forceinline__ unsigned long long fj_l2_evict_first(void)
{
    unsigned long long policy;
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
    return policy;
}

/* Closes the current group of cp.async copies (possibly empty: callers commit
 * unconditionally so group counts stay compile-time constants). */
__device__ __forceinline__ void fj_cp_async_commit(void)
{
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

/* Waits until at most N of this thread's committed groups are still in flight
 * (groups complete in commit order). Other threads' copies become visible only
 * after a barrier. */
template <int N>
__device__ __forceinline__ void fj_cp_async_wait(void)
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

/* ---- shared memory --------------------------------------------------------- */

__device__ __forceinline__ void fj_st_shared_zero16(unsigned addr)
{
    asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(addr), "r"(0u) : "memory");
}

__device__ __forceinline__ void fj_st_shared_b32(unsigned addr, unsigned v)
{
    asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}

__device__ __forceinline__ unsigned fj_ld_shared_b32(unsigned addr)
{
    unsigned v;
    asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(v) : "r"(addr) : "memory");
    return v;
}

__device__ __forceinline__ void fj_ld_shared_v4(unsigned addr, unsigned (&v)[4])
{
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(v[0]), "=r"(v[1]), "=r"(v[2]), "=r"(v[3])
                 : "r"(addr)
                 : "memory");
}

__device__ __forceinline__ void fj_st_shared_v4(unsigned addr, const unsigned (&v)[4])
{
    asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(v[0]), "r"(v[1]),
                 "r"(v[2]), "r"(v[3])
                 : "memory");
}

/* ---- global stores ----------------------------------------------------------- */

__device__ __forceinline__ void fj_st_global_v4(void *ptr, const unsigned (&v)[4])
{
    asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"l"(ptr), "r"(v[0]), "r"(v[1]),
                 "r"(v[2]), "r"(v[3])
                 : "memory");
}

__device__ __forceinline__ void fj_st_global_v2(void *ptr, unsigned a, unsigned b)
{
    asm volatile("st.global.v2.u32 [%0], {%1, %2};\n" ::"l"(ptr), "r"(a), "r"(b) : "memory");
}

__device__ __forceinline__ void fj_st_global_f2(float *ptr, float a, float b)
{
    asm volatile("st.global.v2.f32 [%0], {%1, %2};\n" ::"l"(ptr), "f"(a), "f"(b) : "memory");
}

/* ---- ldmatrix: 8x8 tiles of 16-bit elements from shared memory -------------- *
 * Lanes 8i..8i+7 give the addresses of the 8 rows (16 bytes each) of matrix i.
 * Without .trans, lane l receives row l/4, columns 2(l%4) and 2(l%4)+1 of
 * each matrix (lower column in the lower half), which is the mma A/B/C
 * fragment layout; with .trans it receives rows 2(l%4), 2(l%4)+1 of column
 * l/4, i.e. the same fragment of the transposed matrix. Volatile with a
 * memory clobber: the same address holds a different tile in each pipeline
 * stage, so these must neither merge nor move across cp.async waits and
 * barriers. */
__device__ __forceinline__ void fj_ldsm_x4(unsigned addr, unsigned &r0, unsigned &r1,
                                           unsigned &r2, unsigned &r3)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr)
                 : "memory");
}

__device__ __forceinline__ void fj_ldsm_x4_trans(unsigned addr, unsigned &r0, unsigned &r1,
                                                 unsigned &r2, unsigned &r3)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr)
                 : "memory");
}

/* Matrices 0 and 1 only; lanes 0..15 give the row addresses. */
__device__ __forceinline__ void fj_ldsm_x2_trans(unsigned addr, unsigned &r0, unsigned &r1)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r0), "=r"(r1)
                 : "r"(addr)
                 : "memory");
}

/* ---- mma.sync m16n8k16, f32 accumulate: d += a * b --------------------------- *
 * With g = lane/4 and t = lane%4 (PTX ISA, "Matrix Fragments for
 * mma.m16n8k16"):
 *   A (16x16, row-major) a[0]: (g, 2t..2t+1)   a[1]: (g+8, 2t..2t+1)
 *                        a[2]: (g, 2t+8..+9)   a[3]: (g+8, 2t+8..+9)
 *   B (16x8, k x n)      b0: (k 2t..2t+1, n g)  b1: (k 2t+8..+9, n g)
 *   C/D (16x8, f32)      d[0], d[1]: (g, 2t), (g, 2t+1)
 *                        d[2], d[3]: (g+8, 2t), (g+8, 2t+1)                  */
__device__ __forceinline__ void fj_mma_16816(float (&d)[4], const unsigned (&a)[4], unsigned b0,
                                             unsigned b1)
{
#if FJ_DTYPE_BF16
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

/* ---- quad reductions: the 4 lanes 4g..4g+3 share one row of a C fragment -- */

__device__ __forceinline__ float fj_quad_max(float x)
{
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
    return x;
}

__device__ __forceinline__ float fj_quad_sum(float x)
{
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    x += __shfl_xor_sync(0xffffffffu, x, 2);
    return x;
}

#endif /* FJ_COMMON_CUH */
