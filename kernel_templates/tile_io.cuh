/* tile_io.cuh: what the attention templates share about moving a block's
 * tiles between global and shared memory and registers: where a tile of Q, K
 * or V starts in global memory, the epilogue that writes O (and lse, or the
 * split-KV partials) from a warp's C fragments (softmax.cuh describes them),
 * and the store of a block that sees no key. How a tile sits in shared
 * memory is each template's own (padded or swizzled rows), so the staging of
 * O goes through the template's Staging type, and the loads stay in the
 * templates. Pasted after mask.cuh for the attention templates. */
#ifndef FJ_TILE_IO_CUH
#define FJ_TILE_IO_CUH

namespace fja {

/* Row 0 of the block's Q tile (row m0 of head h of batch b). */
__device__ __forceinline__ const fj_elem *q_tile_src(const fj_fwd_params &p, const Where &wh)
{
#if FJ_VARLEN
    /* packed: the sequence's rows start at its token q0 */
    return (const fj_elem *)p.q +
           ((long long)(wh.seq.q0 + wh.m0) * p.q_stride[1] + wh.h * p.q_stride[2]);
#else
    return (const fj_elem *)p.q +
           (wh.b * p.q_stride[0] + (long long)wh.m0 * p.q_stride[1] + wh.h * p.q_stride[2]);
#endif
}

/* Element offset of row i of head h of the output, in the block's sequence
   (b: its batch index; q0: its first token with FJ_VARLEN). */
__device__ __forceinline__ long long o_row_offset(const fj_fwd_params &p, int b, int q0, int h,
                                                  long long i)
{
#if FJ_VARLEN
    (void)b;
    return (q0 + i) * p.o_stride[1] + h * p.o_stride[2];
#else
    (void)q0;
    return b * p.o_stride[0] + i * p.o_stride[1] + h * p.o_stride[2];
#endif
}

/* Key tile n (FJ_BLOCK_N keys) of kv head hk of batch b: its first K and V
 * rows, and how many rows from its first are below seqlen_k (more than
 * FJ_BLOCK_N except near the end). */
struct KvTileSrc {
    const fj_elem *k, *v;
    int rows;
};
__device__ __forceinline__ KvTileSrc kv_tile_src(const fj_fwd_params &p, int b, int hk, int n)
{
    const long long n_row = (long long)n * FJ_BLOCK_N;
    KvTileSrc t;
#if FJ_SEQS
    /* varlen: the sequence's keys start at its token k0 (a paged cache's
       rows come through the block table: flash_fwd.cu's load_kv_paged);
       the block's sequence as the kernel published it (seq_publish) */
    (void)b;
    const Seq s = seq_shared();
    t.k = (const fj_elem *)p.k + ((s.k0 + n_row) * p.k_stride[1] + hk * p.k_stride[2]);
    t.v = (const fj_elem *)p.v + ((s.k0 + n_row) * p.v_stride[1] + hk * p.v_stride[2]);
    t.rows = s.sk - n * FJ_BLOCK_N;
    return t;
#endif
    t.k = (const fj_elem *)p.k + (b * p.k_stride[0] + hk * p.k_stride[2] + n_row * p.k_stride[1]);
    t.v = (const fj_elem *)p.v + (b * p.v_stride[0] + hk * p.v_stride[2] + n_row * p.v_stride[1]);
    t.rows = p.seqlen_k - n * FJ_BLOCK_N;
    return t;
}

/* A block whose rows see no key at all (or an empty split): O = 0, lse =
 * -inf, for its rows below seqlen_q, in 16-byte chunks over the block's
 * threads. */
__device__ __forceinline__ void store_empty(const fj_fwd_params &p, int b, int h, int split,
                                            int m0, int tid)
{
    constexpr int BM = FJ_BLOCK_M, D = FJ_HEAD_DIM, DCH = FJ_HEAD_DIM / 8;
    constexpr int THREADS = 32 * FJ_WARPS;
#if FJ_SEQS
    const Seq seq = seq_of(p, b);
    const int rows = seq.sq - m0 < BM ? seq.sq - m0 : BM;
#else
    const int rows = p.seqlen_q - m0 < BM ? p.seqlen_q - m0 : BM;
#endif
    for (int idx = tid; idx < rows * DCH; idx += THREADS) {
        const int r = idx / DCH, ch = idx % DCH;
        const long long i = m0 + r;
        const unsigned z[4] = {0u, 0u, 0u, 0u};
#if FJ_SPLIT_KV
        float *dst = p.o_partial + (lse_index(p, split * p.batch + b, h, i) * D + ch * 8);
        fj_st_global_v4(dst, z);
        fj_st_global_v4(dst + 4, z);
#else
        (void)split;
        (void)D;
#if FJ_VARLEN
        fj_elem *dst = (fj_elem *)p.o + (o_row_offset(p, b, seq.q0, h, i) + ch * 8);
#else
        fj_elem *dst = (fj_elem *)p.o + (b * p.o_stride[0] + i * p.o_stride[1] +
                                         h * p.o_stride[2] + ch * 8);
#endif
        fj_st_global_v4(dst, z);
#endif
    }
    for (int r = tid; r < rows; r += THREADS) {
#if FJ_SPLIT_KV
        p.lse_partial[lse_index(p, split * p.batch + b, h, m0 + r)] = FJ_NEG_INF;
#elif FJ_SINKS
        if (p.lse) p.lse[lse_index(p, b, h, m0 + r)] = row_sink(p, h, m0 + r); /* O = 0, lse = sink */
#elif FJ_VARLEN
        if (p.lse) p.lse[lse_out_index(p, seq.q0, h, m0 + r)] = FJ_NEG_INF;
#else
        if (p.lse) p.lse[lse_index(p, b, h, m0 + r)] = FJ_NEG_INF;
#endif
    }
}

/* The epilogue of one warp: its rows are [16 MT row_warp, 16 MT (row_warp +
 * 1)) of the block at wh, its state the running max m, the row sums l (this thread's columns)
 * and O (C fragments of NDT n8 tiles, FJ_HEAD_DIM columns); lane is its lane.
 * Writes O / l and lse for the rows below seqlen_q (finish_rows: 0 and -inf
 * for a row that saw no key, NaN for one whose scores were not finite).
 *
 * Split-KV: float partials and their lse straight from the fragments (each
 * quad writes 32 contiguous bytes of a row per n8 tile). Otherwise O is
 * rounded to the element type and staged in shared memory, then written in
 * whole 16-byte chunks. Staging (the template's) names the staging rows, in
 * the warp's own rows of the Q tile:
 *   unsigned pair(int r, int dt, int tq): the 4 bytes of row r holding
 *       columns 8 dt + 2 tq and 8 dt + 2 tq + 1;
 *   unsigned chunk(int r, int ch): 16-byte chunk ch of row r;
 *   void claim(): waits until nothing reads the rows the warp will write. */
template <int MT, int NDT, class Staging>
__device__ __forceinline__ void store_output(const fj_fwd_params &p, const Where &wh,
                                             int row_warp, int lane, const float (&m)[MT][2],
                                             const float (&l)[MT][2],
                                             const float (&o)[MT][NDT][4], const Staging &stg)
{
    constexpr int D = FJ_HEAD_DIM, DCH = FJ_HEAD_DIM / 8;
    static_assert(NDT == DCH, "O fragments must cover the head dim");
    const int b = wh.b, h = wh.h, m0 = wh.m0, q_rows = wh.q_rows;
    const int g = lane >> 2, tq = lane & 3;
    /* the keys the key loop went through: all of the row's band, or with
       split-KV this split's share (recomputed: nothing from the prologue
       stays live across the loop) */
#if FJ_SEQS
    const Band bd = band_of(p, wh.seq);
#else
    const fj_fwd_params &bd = p; /* the problem's band (attention_rows.cuh) */
#endif
#if FJ_SPLIT_KV
    const KeyTiles kt = key_tiles(p, bd, m0, q_rows, wh.split);
    const int key_lo = kt.n_begin * FJ_BLOCK_N, key_hi = kt.n_end * FJ_BLOCK_N;
#else
    const int key_lo = 0, key_hi = band_keys(bd);
#endif
    bool seen[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
            const int r = row_warp * (MT * 16) + mt * 16 + hh * 8 + g;
            seen[mt][hh] = r < q_rows && row_sees_keys(p, bd, (long long)m0 + r, key_lo, key_hi);
        }
    float inv[MT][2], lse[MT][2];
#if FJ_SINKS && !FJ_SPLIT_KV
    float sink[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh)
            sink[mt][hh] = row_sink(p, h, (long long)m0 + row_warp * (MT * 16) + mt * 16 + hh * 8 + g);
    finish_rows_sink(m, l, seen, sink, inv, lse);
#else
    finish_rows(m, l, seen, inv, lse);
#endif
#if FJ_SPLIT_KV
    (void)stg;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
            const int r = row_warp * (MT * 16) + mt * 16 + hh * 8 + g;
            if (r < q_rows) {
                const long long row = lse_index(p, wh.split * p.batch + b, h, (long long)m0 + r);
                float *dst = p.o_partial + row * D + 2 * tq;
#pragma unroll
                for (int dt = 0; dt < NDT; ++dt)
                    fj_st_global_f2(dst + dt * 8, finished(o[mt][dt][2 * hh], inv[mt][hh]),
                                    finished(o[mt][dt][2 * hh + 1], inv[mt][hh]));
                if (tq == 0) p.lse_partial[row] = lse[mt][hh];
            }
        }
#else
    (void)D;
    stg.claim();
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
            const int r = row_warp * (MT * 16) + mt * 16 + hh * 8 + g;
#pragma unroll
            for (int dt = 0; dt < NDT; ++dt)
                fj_st_shared_b32(stg.pair(r, dt, tq),
                                 fj_pack2(finished(o[mt][dt][2 * hh], inv[mt][hh]),
                                          finished(o[mt][dt][2 * hh + 1], inv[mt][hh])));
        }
    __syncwarp();
    {
        constexpr int CHUNKS = MT * 16 * DCH;
#if FJ_VARLEN
        fj_elem *o_head = (fj_elem *)p.o + o_row_offset(p, b, wh.seq.q0, h, 0);
#else
        fj_elem *o_head = (fj_elem *)p.o + (b * p.o_stride[0] + h * p.o_stride[2]);
#endif
#pragma unroll
        for (int it = 0; it < (CHUNKS + 31) / 32; ++it) {
            const int idx = it * 32 + lane;
            const int r = row_warp * (MT * 16) + idx / DCH, ch = idx % DCH;
            if ((CHUNKS % 32 == 0 || idx < CHUNKS) && r < q_rows) {
                unsigned v[4];
                fj_ld_shared_v4(stg.chunk(r, ch), v);
                fj_st_global_v4(o_head + ((long long)(m0 + r) * p.o_stride[1] + ch * 8), v);
            }
        }
    }
    if (p.lse && tq == 0) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) {
                const int r = row_warp * (MT * 16) + mt * 16 + hh * 8 + g;
#if FJ_VARLEN
                if (r < q_rows) p.lse[lse_out_index(p, wh.seq.q0, h, (long long)m0 + r)] = lse[mt][hh];
#else
                if (r < q_rows) p.lse[lse_index(p, b, h, (long long)m0 + r)] = lse[mt][hh];
#endif
            }
    }
#endif
}

} /* namespace fja */

#endif
