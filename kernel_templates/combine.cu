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
 * Uses FJ_HEAD_DIM, the dtype macros and FJ_WARPS from the descriptor; no
 * dynamic shared memory. Launch: grid (ceil(seqlen_q / FJ_WARPS), heads_q,
 * batch), block 32 * FJ_WARPS; one warp per query row, each lane owning
 * 4-float chunks of the head dim. Host contract as for flash_fwd.cu (o base
 * and strides multiples of 8 elements; o_partial 16-byte aligned).
 */

namespace fjc {

constexpr int D = FJ_HEAD_DIM;
constexpr int C4 = D / 4;             /* float4 chunks of a row */
constexpr int CPL = (C4 + 31) / 32;   /* chunks per lane */
static_assert(D % 8 == 0 && D >= 8 && D <= 256, "FJ_HEAD_DIM must be a multiple of 8 in 8..256");
static_assert(FJ_WARPS >= 1, "FJ_WARPS must be >= 1");

__device__ __forceinline__ void ld_global_f4(const float *ptr, float (&v)[4])
{
    asm volatile("ld.global.nc.v4.f32 {%0, %1, %2, %3}, [%4];\n"
                 : "=f"(v[0]), "=f"(v[1]), "=f"(v[2]), "=f"(v[3])
                 : "l"(ptr));
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

} /* namespace fjc */

extern "C" __global__ void __launch_bounds__(32 * FJ_WARPS) fj_combine(const fj_fwd_params p)
{
    using namespace fjc;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int i = blockIdx.x * FJ_WARPS + warp;
    const int h = blockIdx.y, b = blockIdx.z;
    if (i >= p.seqlen_q) return; /* whole warps only: the shuffles below stay full */

    const long long split_rows = (long long)p.batch * p.heads_q * p.seqlen_q;
    const long long row = ((long long)b * p.heads_q + h) * p.seqlen_q + i;
    const int ns = p.num_splits;
    const float *lse_row = p.lse_partial + row;

    float mx = FJ_NEG_INF;
    for (int s = lane; s < ns; s += 32) mx = fmaxf(mx, lse_row[s * split_rows]);
    mx = warp_max(mx);

    float lse = FJ_NEG_INF;
    float acc[CPL][4];
#pragma unroll
    for (int k = 0; k < CPL; ++k)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[k][e] = 0.f;

    if (mx != FJ_NEG_INF) {
        float sum = 0.f;
        for (int s = lane; s < ns; s += 32) sum += fj_exp2((lse_row[s * split_rows] - mx) * FJ_LOG2E);
        sum = warp_sum(sum); /* >= 1: the largest split contributes exp(0) */
        lse = mx + fj_log2(sum) * FJ_LN2;
        for (int s = 0; s < ns; ++s) {
            const float w = fj_exp2((lse_row[s * split_rows] - lse) * FJ_LOG2E);
            if (w == 0.f) continue; /* empty split (or one that underflows): adds nothing */
            const float *src = p.o_partial + (s * split_rows + row) * D;
#pragma unroll
            for (int k = 0; k < CPL; ++k) {
                const int c = lane + 32 * k;
                if (C4 % 32 == 0 || c < C4) {
                    float v[4];
                    ld_global_f4(src + 4 * c, v);
#pragma unroll
                    for (int e = 0; e < 4; ++e) acc[k][e] = fmaf(w, v[e], acc[k][e]);
                }
            }
        }
    }

    fj_elem *dst = (fj_elem *)p.o + (b * p.o_stride[0] + (long long)i * p.o_stride[1] +
                                     h * p.o_stride[2]);
#pragma unroll
    for (int k = 0; k < CPL; ++k) {
        const int c = lane + 32 * k;
        if (C4 % 32 == 0 || c < C4)
            fj_st_global_v2(dst + 4 * c, fj_pack2(acc[k][0], acc[k][1]), fj_pack2(acc[k][2], acc[k][3]));
    }
    if (p.lse && lane == 0) p.lse[row] = lse;
}
