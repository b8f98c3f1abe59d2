/* combine.cu: merges the split-KV partial results of flash_fwd.cu (rendered
 * with FJ_SPLIT_KV 1) into o and lse. Split s of row (b, h, i) left
 *   O_s   = its softmax-weighted sum of V over its keys, already divided by
 *           its own row sum l_s  (o_partial, float32)
 *   lse_s = ln(l_s) + its max, natural log; -inf when it saw no key
 *           (lse_partial)
 * and the full row is
 *   lse = ln(sum_s exp(lse_s)),   O = sum_s exp(lse_s - lse) O_s,
 * evaluated as a running (max, sum) merge, like the online softmax, so
 * nothing overflows and each partial is read once.
 * Splits with lse_s = -inf weigh exactly 0; a row no split saw gives O = 0
 * and lse = -inf, as the unsplit kernel does; a split with lse_s NaN (its
 * scores were not finite) makes the row NaN.
 *
 * Uses FJ_HEAD_DIM, the dtype macros and FJ_WARPS from the descriptor; static
 * shared memory only. Launch: grid (seqlen_q, heads_q, batch), block
 * 32 * FJ_WARPS; one block per query row. The splits of a row are spread
 * over the warps and each warp keeps UNROLL splits' loads in flight, each lane
 * owning 4-float chunks of the head dim; the warps' (max, sum, O) meet in
 * shared memory. (One warp walking all splits in turn, after two passes over
 * the lse values, waited one memory latency per split: with 128 splits that
 * was most of a batch-1 decode call.) Host contract as for flash_fwd.cu (o
 * base and strides multiples of 8 elements; o_partial 16-byte aligned).
 *
 * FJ_VARLEN: the partials are dense (seqlen_q rows per sequence, the plan's
 * maximum) but o and lse are packed: row i of sequence b is token
 * cu_seqlens_q[b] + i, and a block whose row is past its sequence's exits.
 */
#ifndef FJ_VARLEN
#define FJ_VARLEN 0
#endif

/* FJ_SINKS: the row's attention sink joins the merged row here, once (the
 * split kernels leave it out): one more "split" of lse sink_h and no value
 * row. A row no split saw: O = 0, lse = the sink. */
#ifndef FJ_SINKS
#define FJ_SINKS 0
#endif

namespace fjc {

constexpr int D = FJ_HEAD_DIM;
constexpr int C4 = D / 4;             /* float4 chunks of a row */
constexpr int CPL = (C4 + 31) / 32;   /* chunks per lane */
constexpr int THREADS = 32 * FJ_WARPS;
/* splits per warp with loads in flight: 16 lets 8 warps take up to 128
   splits in one round of loads (the batch-1 GQA decode row has 82, and
   took two rounds with 8: 4.6 us against cuDNN's 2.8-us reduction); 8 at
   D > 128, where each split's chunks take twice the registers. The host
   launches one warp (when rows are many) for rows of at most UNROLL splits
   (fj_kernel_desc_combine_warps), so keep the two in step. */
constexpr int UNROLL = CPL == 1 ? 16 : 8;
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

} /* namespace fjc */

extern "C" __global__ void __launch_bounds__(fjc::THREADS) fj_combine(const fj_fwd_params p)
{
    using namespace fjc;
    __shared__ float warp_m[FJ_WARPS], warp_l[FJ_WARPS];
    __shared__ float4 warp_o[FJ_WARPS][C4];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int i = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
#if FJ_VARLEN
    /* the sequence's first token and rows, clamped as flash_fwd's seq_of */
    int q0 = p.cu_seqlens_q[b], sq = p.cu_seqlens_q[b + 1];
    q0 = q0 < 0 ? 0 : (q0 > p.total_q ? p.total_q : q0);
    sq -= q0;
    if (i >= sq || i >= p.total_q - q0) return;
#endif

    const long long split_rows = (long long)p.batch * p.heads_q * p.seqlen_q;
    const long long row = ((long long)b * p.heads_q + h) * p.seqlen_q + i;
    const int ns = p.num_splits;
    const float *lse_row = p.lse_partial + row;
    /* launched as a programmatic dependent of the split kernel: its partials
       are complete and visible only after this */
    fj_grid_dependency_wait();

    /* One pass per warp, an online merge in base 2 like the softmax itself:
       m = the largest lse seen (log2 units), l = sum of 2^(lse_s - m) and
       acc = sum of 2^(lse_s - m) O_s over this warp's splits. Every lane
       loads the same lse values, so m, l and the branches are warp-uniform. */
    float m = FJ_NEG_INF, l = 0.f;
    bool nan = false; /* a split whose lse is NaN: its scores were not finite */
    float acc[CPL][4];
#pragma unroll
    for (int k = 0; k < CPL; ++k)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[k][e] = 0.f;
    for (int s0 = warp; s0 < ns; s0 += FJ_WARPS * UNROLL) {
        /* all loads of UNROLL splits first, then their sums */
        float x[UNROLL], v[UNROLL][CPL][4];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const int s = s0 + u * FJ_WARPS;
            x[u] = FJ_NEG_INF;
            if (s < ns) {
                x[u] = ld_global_f(lse_row + s * split_rows) * FJ_LOG2E;
                nan |= x[u] != x[u];
                const float *src = p.o_partial + (s * split_rows + row) * D;
#pragma unroll
                for (int k = 0; k < CPL; ++k) {
                    const int c = lane + 32 * k;
                    if (C4 % 32 == 0 || c < C4) ld_global_f4(src + 4 * c, v[u][k]);
                }
            }
        }
        float m_new = m;
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) m_new = fmaxf(m_new, x[u]);
        if (m_new == FJ_NEG_INF) continue; /* only empty splits so far */
        const float alpha = fj_exp2(m - m_new); /* 0 while m is -inf */
        m = m_new;
        l *= alpha;
#pragma unroll
        for (int k = 0; k < CPL; ++k)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[k][e] *= alpha;
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            /* an empty split (lse -inf, or one that underflows) adds nothing;
               skipping it also keeps its values out */
            const float w = fj_exp2(x[u] - m);
            if (w == 0.f) continue;
            l += w;
#pragma unroll
            for (int k = 0; k < CPL; ++k)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[k][e] = fmaf(w, v[u][k][e], acc[k][e]);
        }
    }

    /* fmaxf passes over NaN, and a NaN split among empty ones was skipped:
       the row is NaN (docs/semantics.md), carried to the merge below in l */
    if (nan) l = __int_as_float(0x7fffffff);
    if (lane == 0) {
        warp_m[warp] = m;
        warp_l[warp] = l;
    }
#pragma unroll
    for (int k = 0; k < CPL; ++k) {
        const int c = lane + 32 * k;
        if (C4 % 32 == 0 || c < C4)
            warp_o[warp][c] = make_float4(acc[k][0], acc[k][1], acc[k][2], acc[k][3]);
    }
    __syncthreads();

    /* The warps' results, each weighed by 2^(m_w - M) for the row's largest
       m_w = M; a row no split saw (M = -inf) gives O = 0 and lse = -inf; a
       NaN l (0 x NaN is NaN too) makes O and lse NaN. */
    float mx = FJ_NEG_INF;
#pragma unroll
    for (int w = 0; w < FJ_WARPS; ++w) mx = fmaxf(mx, warp_m[w]);
    float scale[FJ_WARPS], total = 0.f;
#pragma unroll
    for (int w = 0; w < FJ_WARPS; ++w) {
        scale[w] = mx == FJ_NEG_INF ? 0.f : fj_exp2(warp_m[w] - mx);
        total += scale[w] * warp_l[w];
    }
#if FJ_SINKS
    /* m' = max(M, sink), total' = total 2^(M - m') + 2^(sink - m'), O
       scaled by 2^(M - m') / total' (finish_rows_sink of the attention templates; a
       NaN total or sink, or a sink of +inf, gives NaN) */
    const float sink = p.sinks[p.pack_rows ? h * p.pack_group + i / p.pack_rows : h];
    const float s2 = sink * FJ_LOG2E;
    const float nm = s2 <= mx ? mx : s2;
    const float f = fj_exp2(mx - nm);
    const float joint = fmaf(total, f, fj_exp2(s2 - nm));
    const float inv = total == 0.f ? 0.f : f * fj_rcp(joint);
    const float row_lse = total == 0.f ? sink : (nm + fj_log2(joint)) * FJ_LN2;
#else
    const float inv = total == 0.f ? 0.f : fj_rcp(total); /* total >= 1 when any split saw keys */
#endif
#if FJ_VARLEN
    fj_elem *dst = (fj_elem *)p.o + ((long long)(q0 + i) * p.o_stride[1] + h * p.o_stride[2]);
#else
    fj_elem *dst = (fj_elem *)p.o + (b * p.o_stride[0] + (long long)i * p.o_stride[1] +
                                     h * p.o_stride[2]);
#endif
    for (int c = tid; c < C4; c += THREADS) {
        float4 t = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
        for (int w = 0; w < FJ_WARPS; ++w) {
            const float4 u = warp_o[w][c];
            t.x = fmaf(scale[w], u.x, t.x);
            t.y = fmaf(scale[w], u.y, t.y);
            t.z = fmaf(scale[w], u.z, t.z);
            t.w = fmaf(scale[w], u.w, t.w);
        }
        fj_st_global_v2(dst + 4 * c, fj_pack2(t.x * inv, t.y * inv), fj_pack2(t.z * inv, t.w * inv));
    }
#if FJ_VARLEN
    const long long out_row = (long long)h * p.total_q + q0 + i;
#else
    const long long out_row = row;
#endif
#if FJ_SINKS
    if (p.lse && tid == 0) p.lse[out_row] = row_lse;
#else
    if (p.lse && tid == 0)
        p.lse[out_row] = total == 0.f ? FJ_NEG_INF : (mx + fj_log2(total)) * FJ_LN2;
#endif
}
