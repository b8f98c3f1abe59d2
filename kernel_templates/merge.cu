/* merge.cu: fj_merge, two partial attention results of the same query rows
 * over disjoint key sets into one (docs/semantics.md, "Merging"). Row r =
 * (b, h, i) of the lse layout, in float32:
 *   m = max(lse_a, lse_b), w_a = exp(lse_a - m), w_b = exp(lse_b - m),
 *   O = (w_a / (w_a + w_b)) O_a + (w_b / (w_a + w_b)) O_b,
 *   lse = m + ln(w_a + w_b),
 * rounded once on store. A side of weight 0 (lse -inf) is not read; both
 * -inf: O = 0, lse = -inf; a NaN lse: the row is NaN; +inf gives NaN through
 * inf - inf. The same operations in the same order as the CPU's
 * (src/cpu/merge.c), with expf and logf (NVRTC's, no fast math).
 *
 * Specialized on FJ_MERGE_DTYPE alone (0 f32, 1 f16, 2 bf16): any head dim,
 * any strides. Launch: 1-D grid, FJ_MERGE_THREADS threads; `lanes` threads
 * per row (FJ_MERGE_THREADS / lanes rows per block), each taking every
 * lanes-th 16-byte chunk (vec elements) of its row, or every lanes-th element
 * when vec is 1. Plain loads and stores (not .nc): o may be o_a or o_b, each
 * element read and then written by one thread. */

#if !defined(FJ_MERGE_DTYPE) || FJ_MERGE_DTYPE < 0 || FJ_MERGE_DTYPE > 2
#error "FJ_MERGE_DTYPE must be 0 (f32), 1 (f16) or 2 (bf16)"
#endif

namespace fjm
{

constexpr int THREADS = FJ_MERGE_THREADS;
#if FJ_MERGE_DTYPE == 0
typedef float elem;
#else
typedef unsigned short elem;
#endif
constexpr int VEC = 16 / (int)sizeof(elem); /* elements of a 16-byte chunk */

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(unsigned short x)
{
#if FJ_MERGE_DTYPE == 1
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x));
    return f;
#else
    return __uint_as_float((unsigned)x << 16);
#endif
}

/* round to nearest even, once */
__device__ __forceinline__ elem from_float(float f)
{
#if FJ_MERGE_DTYPE == 0
    return f;
#elif FJ_MERGE_DTYPE == 1
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
#else
    unsigned short h;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
#endif
}

/* One 16-byte chunk as VEC floats, and back. */
__device__ __forceinline__ void load_chunk(const elem *src, float (&v)[VEC])
{
    const uint4 u = *reinterpret_cast<const uint4 *>(src);
#if FJ_MERGE_DTYPE == 0
    v[0] = __uint_as_float(u.x);
    v[1] = __uint_as_float(u.y);
    v[2] = __uint_as_float(u.z);
    v[3] = __uint_as_float(u.w);
#else
    const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        v[2 * k] = to_float((unsigned short)(w[k] & 0xffffu));
        v[2 * k + 1] = to_float((unsigned short)(w[k] >> 16));
    }
#endif
}

__device__ __forceinline__ void store_chunk(elem *dst, const float (&v)[VEC])
{
    uint4 u;
#if FJ_MERGE_DTYPE == 0
    u.x = __float_as_uint(v[0]);
    u.y = __float_as_uint(v[1]);
    u.z = __float_as_uint(v[2]);
    u.w = __float_as_uint(v[3]);
#else
    unsigned w[4];
#pragma unroll
    for (int k = 0; k < 4; ++k)
        w[k] = (unsigned)from_float(v[2 * k]) | ((unsigned)from_float(v[2 * k + 1]) << 16);
    u.x = w[0];
    u.y = w[1];
    u.z = w[2];
    u.w = w[3];
#endif
    *reinterpret_cast<uint4 *>(dst) = u;
}

/* The merged value of one element: a side is read only when it weighs. */
__device__ __forceinline__ float merged(bool use_a, float ca, float a, bool use_b, float cb,
                                        float b, float fill)
{
    float v = fill;
    if (use_a) v = ca * a;
    if (use_b) v = use_a ? v + cb * b : cb * b;
    return v;
}

} /* namespace fjm */

extern "C" __global__ void __launch_bounds__(fjm::THREADS) fj_merge_rows(const fj_merge_params p)
{
    using namespace fjm;
    const int lanes = p.lanes, sub = threadIdx.x & (lanes - 1);
    const int rows_per_block = THREADS / lanes;
    /* block-uniform loop: the __syncthreads below is reached by all */
    for (long long blk = blockIdx.x; blk < p.blocks; blk += gridDim.x) {
        const long long r = blk * rows_per_block + threadIdx.x / lanes;
        const bool live = r < p.rows;
        float la = 0.f, lb = 0.f;
        if (live) {
            la = p.lse_a[r];
            lb = p.lse_b[r];
        }
        /* lse may be lse_a or lse_b: every thread of the block has its row's
           values before any writes one */
        __syncthreads();
        if (live) {
            const long long i = r % p.seqlen_q, h = r / p.seqlen_q % p.heads_q,
                            b = r / p.seqlen_q / p.heads_q;
            const elem *ra =
                (const elem *)p.o_a + (b * p.a_stride[0] + i * p.a_stride[1] + h * p.a_stride[2]);
            const elem *rb =
                (const elem *)p.o_b + (b * p.b_stride[0] + i * p.b_stride[1] + h * p.b_stride[2]);
            elem *ro = (elem *)p.o + (b * p.o_stride[0] + i * p.o_stride[1] + h * p.o_stride[2]);
            const float mx = fmaxf(la, lb);
            float row_lse, ca = 0.f, cb = 0.f, fill = 0.f;
            bool use_a = false, use_b = false;
            if (la != la || lb != lb) { /* fmaxf passes over NaN: the row is NaN */
                row_lse = fill = __int_as_float(0x7fffffff);
            } else if (mx == __int_as_float(0xff800000)) { /* neither side saw a key */
                row_lse = mx;
            } else {
                const float wa = expf(la - mx), wb = expf(lb - mx), sum = wa + wb;
                ca = wa / sum;
                cb = wb / sum;
                use_a = wa != 0.f;
                use_b = wb != 0.f;
                row_lse = mx + logf(sum);
            }
            if (p.vec == VEC) {
                const int chunks = p.head_dim / VEC;
                for (int c = sub; c < chunks; c += lanes) {
                    float va[VEC] = {}, vb[VEC] = {}, vo[VEC];
                    if (use_a) load_chunk(ra + c * VEC, va);
                    if (use_b) load_chunk(rb + c * VEC, vb);
#pragma unroll
                    for (int e = 0; e < VEC; ++e)
                        vo[e] = merged(use_a, ca, va[e], use_b, cb, vb[e], fill);
                    store_chunk(ro + c * VEC, vo);
                }
            } else {
                for (int c = sub; c < p.head_dim; c += lanes) {
                    const float a = use_a ? to_float(ra[c]) : 0.f;
                    const float bv = use_b ? to_float(rb[c]) : 0.f;
                    ro[c] = from_float(merged(use_a, ca, a, use_b, cb, bv, fill));
                }
            }
            if (sub == 0 && p.lse) p.lse[r] = row_lse;
        }
        /* a later round reads other rows' lse only: no barrier needed here */
    }
}
