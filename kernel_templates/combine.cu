/* combine.cu: merges the split-KV partial results of flash_fwd.cu (rendered
 * with FJ_SPLIT_KV 1) into o and lse. Split s of row (b, h, i) left
 *   O_s   = its softmax-weighted sum of V over its keys, already divided by
 *           its own row sum l_s  (o_partial, float32)
 *   lse_s = ln(l_s) + its max, natural log; -inf when it saw no key
 *           (lse_partial)
 * and the full row is
 *   lse = ln(sum_s exp(lse_s)),   O = sum_s exp(lse_s - lse) O_s,
 * evaluated with the largest lse_s subtracted first so nothing overflows.
 * Splits with lse_s = -inf weigh exactly 0; a row no split saw gives O = 0
 * and lse = -inf, as the unsplit kernel does.
 *
 * Uses FJ_HEAD_DIM, the dtype macros and FJ_WARPS from the descriptor; static
 * shared memory only. Launch: grid (seqlen_q, heads_q, batch), block
 * 32 * FJ_WARPS; one block per query row. The splits of a row are spread
 * over the warps and each warp keeps UNROLL splits' loads in flight, each lane
 * owning 4-float chunks of the head dim; the warps' sums meet in shared
 * memory. (One warp walking all splits in turn waited one memory latency per
 * split: with 128 splits that was most of a batch-1 decode call.) Host
 * contract as for flash_fwd.cu (o base and strides multiples of 8 elements;
 * o_partial 16-byte aligned).
 */

namespace fjc {

constexpr int D = FJ_HEAD_DIM;
constexpr int C4 = D / 4;             /* float4 chunks of a row */
constexpr int CPL = (C4 + 31) / 32;   /* chunks per lane */
constexpr int THREADS = 32 * FJ_WARPS;
constexpr int UNROLL = 4;             /* splits per warp with loads in flight */
static_assert(D % 8 == 0 && D >= 8 && D <= 256, "FJ_HEAD_DIM must be a multiple of 8 in 8..256");
static_assert(FJ_WARPS >= 1 && FJ_WARPS <= 32, "FJ_WARPS must be in 1..32");

__device__ __forceinline__ void ld_global_f4(const float *ptr, float (&v)[4])
{
    asm volatile("ld.global.nc.v4.f32 {%0, %1, %2, %3}, [%4];\n"
                 : "=f"(v[0]), "=f"(v[1]), "=f"(v[2]), "=f"(v[3])
                 : "l"(ptr));
}

__device__ __forceinline__ float ld_global_f(const float *ptr)
{
    float v;
    asm volatile("ld.global.nc.f32 %0, [%1];\n" : "=f"(v) : "l"(ptr));
    return v;
}

__device__ __forceinline__ float warp_max(float x)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}

__device__ __forceinline__ float warp_sum(float x)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

/* The block's max (MAX) or sum of x, in every thread. */
template <bool MAX>
__device__ __forceinline__ float block_reduce(float x, float *scratch)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    x = MAX ? warp_max(x) : warp_sum(x);
    if (lane == 0) scratch[warp] = x;
    __syncthreads();
    float y = lane < FJ_WARPS ? scratch[lane] : (MAX ? FJ_NEG_INF : 0.f);
    y = MAX ? warp_max(y) : warp_sum(y);
    __syncthreads(); /* scratch is reused by the next call */
    return y;
}

} /* namespace fjc */

extern "C" __global__ void __launch_bounds__(fjc::THREADS) fj_combine(const fj_fwd_params p)
{
    using namespace fjc;
    __shared__ float scratch[FJ_WARPS];
    __shared__ float4 sums[FJ_WARPS][C4];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int i = blockIdx.x, h = blockIdx.y, b = blockIdx.z;

    const long long split_rows = (long long)p.batch * p.heads_q * p.seqlen_q;
    const long long row = ((long long)b * p.heads_q + h) * p.seqlen_q + i;
    const int ns = p.num_splits;
    const float *lse_row = p.lse_partial + row;

    float mx = FJ_NEG_INF;
    for (int s = tid; s < ns; s += THREADS) mx = fmaxf(mx, ld_global_f(lse_row + s * split_rows));
    mx = block_reduce<true>(mx, scratch);

    float lse = FJ_NEG_INF;
    float acc[CPL][4];
#pragma unroll
    for (int k = 0; k < CPL; ++k)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[k][e] = 0.f;

    if (mx != FJ_NEG_INF) { /* uniform: every thread has the block's max */
        float sum = 0.f;
        for (int s = tid; s < ns; s += THREADS)
            sum += fj_exp2((ld_global_f(lse_row + s * split_rows) - mx) * FJ_LOG2E);
        sum = block_reduce<false>(sum, scratch); /* >= 1: the largest split gives exp(0) */
        lse = mx + fj_log2(sum) * FJ_LN2;
        for (int s0 = warp; s0 < ns; s0 += FJ_WARPS * UNROLL) {
            /* all loads of UNROLL splits first, then their sums */
            float w[UNROLL], v[UNROLL][CPL][4];
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) {
                const int s = s0 + u * FJ_WARPS;
                w[u] = 0.f;
                if (s < ns) {
                    w[u] = fj_exp2((ld_global_f(lse_row + s * split_rows) - lse) * FJ_LOG2E);
                    const float *src = p.o_partial + (s * split_rows + row) * D;
#pragma unroll
                    for (int k = 0; k < CPL; ++k) {
                        const int c = lane + 32 * k;
                        if (C4 % 32 == 0 || c < C4) ld_global_f4(src + 4 * c, v[u][k]);
                    }
                }
            }
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) {
                /* an empty split (or one that underflows) adds nothing; the
                   select also keeps its values out when w is 0 */
                if (w[u] == 0.f) continue;
#pragma unroll
                for (int k = 0; k < CPL; ++k)
#pragma unroll
                    for (int e = 0; e < 4; ++e) acc[k][e] = fmaf(w[u], v[u][k][e], acc[k][e]);
            }
        }
    }

#pragma unroll
    for (int k = 0; k < CPL; ++k) {
        const int c = lane + 32 * k;
        if (C4 % 32 == 0 || c < C4) sums[warp][c] = make_float4(acc[k][0], acc[k][1], acc[k][2], acc[k][3]);
    }
    __syncthreads();

    fj_elem *dst = (fj_elem *)p.o + (b * p.o_stride[0] + (long long)i * p.o_stride[1] +
                                     h * p.o_stride[2]);
    for (int c = tid; c < C4; c += THREADS) {
        float4 t = sums[0][c];
#pragma unroll
        for (int w = 1; w < FJ_WARPS; ++w) {
            const float4 u = sums[w][c];
            t.x += u.x;
            t.y += u.y;
            t.z += u.z;
            t.w += u.w;
        }
        fj_st_global_v2(dst + 4 * c, fj_pack2(t.x, t.y), fj_pack2(t.z, t.w));
    }
    if (p.lse && tid == 0) p.lse[row] = lse;
}
