/* flash_fwd.cu: the attention forward kernel, FlashAttention-2 style, rendered
 * once per descriptor (kernel_templates/README.md lists the macros; fwd_params.h
 * and common.cuh come first in the same translation unit).
 *
 * One block computes FJ_BLOCK_M query rows of one (batch, head) against the
 * key tiles those rows can see, keeping the score tile, the softmax state and
 * the output accumulator in registers:
 *
 *   for each visible key tile:  S = Q K^T (mma.sync, f32)      -> registers
 *                               online softmax in base 2        -> P in registers
 *                               O += P V (mma.sync, f32)
 *   O /= l; store O (and lse).
 *
 * Host contract (src/cuda checks it and returns FJ_ERR_UNSUPPORTED otherwise,
 * nothing here can check it):
 *  - q, k, v, o base pointers are 16-byte aligned and every batch, seq and
 *    head stride of q, k, v and o is a multiple of 8 elements, so each
 *    8-element chunk of a row is one aligned 16-byte cp.async or store;
 *  - o_partial and lse_partial (split-KV) are 16-byte aligned;
 *  - scale_log2 = scale * log2(e) is finite and nonzero (the resolved scale,
 *    never the "0 = default" of the public desc); it may be negative;
 *  - launch: grid (ceil(seqlen_q / FJ_BLOCK_M), heads_q, batch * num_splits),
 *    block 32 * FJ_WARPS, FJ_SMEM_BYTES of dynamic shared memory;
 *  - seqlen_q, seqlen_k, batch, heads >= 1, heads_q == group * heads_kv.
 *  - FJ_VARLEN (packed sequences) and FJ_PAGE_SIZE (a paged KV cache):
 *    seqlen_q and seqlen_k are the plan's maxima and size the grid; each
 *    block reads its sequence's lengths (and a paged cache's block table)
 *    from device memory (fwd_params.h), aligns causal and window bands with
 *    them, and exits at once when its query tile is past its sequence; the
 *    batch strides of a varlen q/k/v/o are unused (rows are tokens).
 *
 * Layout of the work: the FJ_WARPS warps split the block's query rows, each
 * warp owning FJ_BLOCK_M / FJ_WARPS consecutive rows (m tiles of 16 rows) and
 * every key of the tile, so the softmax of a row never leaves its warp: a
 * row's values sit in the 4 lanes of a quad (mma C layout) and reduce with
 * two xor-shuffles.
 *
 * Key warps: when FJ_BLOCK_M < 16 * FJ_WARPS (the host allows it for
 * FJ_BLOCK_M = 16 only), there are too few rows to go round, and the KW =
 * FJ_WARPS / QW warps of each query-row group share out the keys of every
 * tile instead, each taking FJ_BLOCK_N / KW consecutive keys with a softmax
 * state of its own; after the key loop they merge those states through shared
 * memory (merge_key_warps), so the output is the same as one warp's. This is
 * the decode shape of cuDNN's kernel (16 rows by 128 keys, four warps along
 * the keys). On the H200 the shape alone moved the decode rows by -7..+4 %;
 * with the alternating one-stage pipeline and the K/V swizzle below
 * (m16n128w4s1, m16n64w2s1) it is the d128 decode choice (docs/benchmarks.md,
 * "GPU decode, fourth pass" and "fifth pass").
 */

namespace fj {

using fja::block_m0; /* attention_rows.cuh */
using fja::block_batch;
using fja::Where;
using fja::where;
using fja::key_tiles;
using fja::clamp_unmasked;
using fja::KeyTiles;
using fja::Ctx;
using fja::for_each_key_tile;
using fja::softmax_init; /* softmax.cuh */
using fja::online_softmax;
using fja::pack_p_step;
using fja::mask_scores; /* mask.cuh */
using fja::store_empty; /* tile_io.cuh */
using fja::store_output;
using fja::q_tile_src;
using fja::kv_tile_src;
using fja::KvTileSrc;

constexpr int D = FJ_HEAD_DIM;
constexpr int DPAD = (D + 15) / 16 * 16;      /* head dim rounded up to the mma k of 16 */
constexpr int ROW = DPAD + 8;                 /* shared row length in elements */
constexpr int ROW_BYTES = ROW * 2;            /* an odd number of 16-byte chunks */
constexpr int BM = FJ_BLOCK_M;
constexpr int BN = FJ_BLOCK_N;
constexpr int STAGES = FJ_STAGES;
constexpr int THREADS = FJ_THREADS;
constexpr int QW = BM < 16 * FJ_WARPS ? BM / 16 : FJ_WARPS; /* query-row warp groups */
constexpr int KW = FJ_WARPS / QW;             /* key warps sharing each group's rows */
constexpr int WARP_ROWS = BM / QW;            /* query rows per warp */
constexpr int BNW = BN / KW;                  /* keys of each tile one warp takes */
constexpr int MT = WARP_ROWS / 16;            /* 16-row m tiles per warp */
constexpr int KQ = DPAD / 16;                 /* k16 steps of Q K^T */
constexpr int NDT = D / 8;                    /* 8-column tiles of O (exact head dim) */
constexpr int DCH = D / 8;                    /* 16-byte chunks of a row holding data */

static_assert(D % 8 == 0 && D >= 8 && D <= 256, "FJ_HEAD_DIM must be a multiple of 8 in 8..256");
static_assert(FJ_WARPS >= 1 && BM % 16 == 0 && BM >= 16, "FJ_BLOCK_M must be a multiple of 16");
static_assert(QW * KW == FJ_WARPS && BM % QW == 0,
              "FJ_WARPS must split evenly over the 16-row tiles or the tiles over the warps");
static_assert(WARP_ROWS % 16 == 0, "each warp needs a whole number of 16-row mma tiles");
static_assert(BN % 16 == 0 && BN >= 16, "FJ_BLOCK_N must be a multiple of 16");
static_assert(BNW * KW == BN && BNW % 16 == 0,
              "FJ_BLOCK_N must give each key warp a multiple of 16 keys");
static_assert(STAGES >= 1, "FJ_STAGES must be >= 1");
static_assert((ROW_BYTES / 16) % 2 == 1, "rows must be an odd number of 16-byte chunks");

/* Shared memory: Q tile, STAGES K tiles, STAGES V tiles, every row ROW
 * elements. The host computes the same number (src/kernel_desc.c). */
constexpr int SMEM_Q = 0;
constexpr int SMEM_K = BM * ROW_BYTES;
constexpr int SMEM_V = SMEM_K + STAGES * BN * ROW_BYTES;
constexpr int SMEM_TOTAL = SMEM_V + STAGES * BN * ROW_BYTES;
constexpr int TILE_BYTES = BN * ROW_BYTES;
static_assert(SMEM_TOTAL == FJ_SMEM_BYTES, "shared layout disagrees with FJ_SMEM_BYTES");

/* Rows of the K and V tiles. Padded as Q's by default; with KV_SWIZZLE,
 * rows of exactly D * 2 bytes (within the same buffers) whose 16-byte chunk c
 * sits at chunk c ^ (row & 7). Both keep ldmatrix free of bank conflicts
 * (its 8 rows of one chunk column land in 8 different chunks of a 128-byte
 * line of banks), but only the swizzle also keeps each 128-byte line of
 * global memory in one 128-byte line of shared memory: with padded rows
 * every second line straddles two, and a warp's cp.async copies go to L2 as
 * more, smaller requests (on the H200, 2.6 requests and 1.5x the sectors per
 * line of K and V, where cuDNN's decode kernel makes 1 request of 4 sectors).
 * The decode tiles (FJ_BLOCK_M 16) take it: with it m16n64w2s1 reads 2-13 %
 * more TB/s on every decode row of the H200 (L2 read requests 11.0M -> 4.2M
 * on b1 h32 sk32768, as cuDNN's), at 210 registers instead of 176, still 4
 * blocks per SM (docs/benchmarks.md, "GPU decode, fifth pass").
 * The larger tiles keep padded rows: their loads are a small part of their
 * time, and at m128n64w4s2 the swizzle's addresses spill on sm_80. It needs
 * D a multiple of 64 (whole 8-chunk groups, no padding columns). */
#ifndef FJ_KV_SWIZZLE
#define FJ_KV_SWIZZLE (FJ_BLOCK_M == 16)
#endif
constexpr bool KV_SWIZZLE = FJ_KV_SWIZZLE && D % 64 == 0;
constexpr int KV_ROW_BYTES = KV_SWIZZLE ? D * 2 : ROW_BYTES;
static_assert(!KV_SWIZZLE || DPAD == D, "a swizzled row has no padding columns");

/* Register plan (32-bit registers per thread). The O accumulator is fixed
 * (O_REGS); the S accumulator covers one sub-tile of KSUB keys at a time (the
 * online softmax runs per sub-tile, so a key tile of BN keys is taken in
 * BN/KSUB steps, with one cp.async stage and barrier per BN keys); the Q A
 * fragments either stay in registers for the whole key loop (Q_REGS) or are
 * re-read from shared memory for every sub-tile. ptxas needs about 95
 * registers besides these three (addresses, softmax state, fragments in
 * flight), so their sum is kept within a budget: the largest KSUB with Q
 * in registers, else the largest KSUB with Q re-read. (Measured with nvcc
 * 13.0 over the heuristic tile set, every mask kind, sm_80 and sm_90: 160
 * gives no spills. 192 for every loop lets m128n64w4 at D = 128 hold all 64
 * keys, as FlashAttention-2 does, but spills 12 bytes; the unmasked loop
 * alone takes it without spilling, see FJ_ACC_BUDGET_UNMASKED.) */
constexpr int O_REGS = MT * NDT * 4;
constexpr int Q_REGS = MT * KQ * 4;
__host__ __device__ constexpr int s_regs(int ksub) { return MT * (ksub / 8) * 4; }
#ifndef FJ_ACC_BUDGET
/* softcap kernels above d224: the cap's small-score series leaves ptxas 8
   bytes short at 160 (152 causal) on sm_80 (split variants, compile-all) */
#define FJ_ACC_BUDGET (FJ_SOFTCAP && FJ_HEAD_DIM > 224 ? 144 : 160)
#endif
/* The unmasked key loop carries no band state, so it can take a larger S
   sub-tile than the masked ones: 192 puts all 64 keys of a d128 tile in one
   sub-tile (FA2's shape) at 255 registers without spilling, where sharing
   192 with the masked loop spilled 12 bytes. Kernels with a window keep 160
   in both: their third key loop leaves ptxas 8 bytes short on sm_80 at
   d120-d128 (compile-all, every kind). So do softcap kernels (FJ_SOFTCAP):
   the cap's temporaries spill 8 bytes at 192 on sm_80 at d128. And varlen
   and paged kernels (FJ_SEQS): their sequence's lengths and bounds, loaded
   rather than rematerialized from the parameters, left m128n64w4s2 at d128
   8 bytes short at 192 (split variants, sm_80 and sm_90). */
#ifndef FJ_ACC_BUDGET_UNMASKED
#define FJ_ACC_BUDGET_UNMASKED (FJ_HAS_WINDOW || FJ_SOFTCAP || FJ_SEQS ? FJ_ACC_BUDGET : 192)
#endif
/* largest KSUB dividing BNW (a warp's keys of a tile), a multiple of 16 and
   >= min_ksub, with O + S + extra within the budget; 0 when none */
__host__ __device__ constexpr int pick_ksub(int budget, int extra, int min_ksub)
{
    for (int k = BNW; k >= min_ksub; k -= 16)
        if (BNW % k == 0 && O_REGS + s_regs(k) + extra <= budget) return k;
    return 0;
}
/* Q in registers only with sub-tiles of >= 32 keys: below that, the extra
   softmax rescales cost more than re-reading Q. */
constexpr bool Q_FITS = Q_REGS <= 64 && pick_ksub(FJ_ACC_BUDGET, Q_REGS, 32) != 0;
#ifndef FJ_Q_IN_REGS
#define FJ_Q_IN_REGS Q_FITS
#endif
constexpr bool Q_IN_REGS = FJ_Q_IN_REGS;
__host__ __device__ constexpr int ksub_within(int budget)
{
    const int k = pick_ksub(budget, Q_IN_REGS ? Q_REGS : 0, 16);
    return k ? k : 16;
}
/* Keys per softmax sub-tile in the masked and the unmasked key loops. */
constexpr int KSUB_MASKED = ksub_within(FJ_ACC_BUDGET);
constexpr int KSUB_UNMASKED = ksub_within(FJ_ACC_BUDGET_UNMASKED);
static_assert(BNW % KSUB_MASKED == 0 && KSUB_MASKED % 16 == 0, "bad softmax sub-tile");
static_assert(BNW % KSUB_UNMASKED == 0 && KSUB_UNMASKED % 16 == 0, "bad softmax sub-tile");
/* The single-buffer pipeline of alternating K and V loads (tile_iteration). */
constexpr bool ALTERNATE = STAGES == 1 && KSUB_MASKED == BNW && KSUB_UNMASKED == BNW;

/* One 16-byte copy of load_tile: with the L2 policy when POLICY. */
template <bool POLICY>
__device__ __forceinline__ void copy_chunk(unsigned dst, const void *src, unsigned src_bytes,
                                           unsigned long long policy)
{
    if constexpr (POLICY) fj_cp_async_16_policy(dst, src, src_bytes, policy);
    else fj_cp_async_16(dst, src, src_bytes);
}

/* Shared address of chunk c of row r of a K/V tile at s_tile under the
 * swizzle above. The padded rows' address, s_tile + r * ROW_BYTES + c * 16,
 * stays written out where it is used: through a helper NVRTC 13.0 adds the
 * terms in another order, and ptxas then gave one heuristic tile (d40 nomask
 * m32n32w2s2 on sm_90) an 8-byte stack frame. */
__device__ __forceinline__ unsigned swizzled_addr(unsigned s_tile, int r, int c)
{
    return s_tile + (unsigned)(r * KV_ROW_BYTES + ((c ^ (r & 7)) << 4));
}

/* Issues the cp.async copies of one tile of ROWS rows: row r of the tile comes
 * from g_row0 + r * row_stride when r < rows_valid, else is zero-filled (its
 * source address is then row 0's, which exists). Only the DCH data chunks of
 * a row are written; the padding chunk [D, DPAD) is zeroed once up front.
 * SWZ: the K/V swizzle (KV_SWIZZLE). POLICY: the copies carry the L2 cache
 * policy `policy`. */
template <int ROWS, bool SWZ = false, bool POLICY = false>
__device__ __forceinline__ void load_tile(unsigned s_tile, const fj_elem *g_row0,
                                          long long row_stride, int rows_valid, int tid,
                                          unsigned long long policy = 0)
{
    /* (see load_kv: keeps the per-row offsets from being hoisted) */
    asm volatile("" : "+l"(row_stride));
    if constexpr (THREADS % DCH == 0) {
        /* Each thread copies one fixed chunk column of every RPI-th row. */
        constexpr int RPI = THREADS / DCH;
        constexpr int ITERS = (ROWS + RPI - 1) / RPI;
        const int r0 = tid / DCH, c = tid % DCH;
        const fj_elem *row0 = g_row0 + c * 8;
        const fj_elem *src = row0 + (long long)r0 * row_stride;
        const long long step = (long long)RPI * row_stride;
#pragma unroll
        for (int it = 0; it < ITERS; ++it) {
            const int r = it * RPI + r0;
            if (ROWS % RPI == 0 || r < ROWS) {
                const bool ok = r < rows_valid;
                const unsigned dst = SWZ ? swizzled_addr(s_tile, r, c)
                                         : s_tile + (unsigned)(r * ROW_BYTES + c * 16);
                copy_chunk<POLICY>(dst, ok ? src : row0, ok ? 16u : 0u, policy);
            }
            src += step;
        }
    } else if constexpr ((ROWS * DCH + THREADS - 1) / THREADS <= 4) {
        /* Thread tid copies chunks tid, tid + THREADS, ... of the tile in
           row-major chunk order, each position computed from scratch. */
        constexpr int CHUNKS = ROWS * DCH;
        constexpr int ITERS = (CHUNKS + THREADS - 1) / THREADS;
#pragma unroll
        for (int it = 0; it < ITERS; ++it) {
            const int idx = it * THREADS + tid;
            if (CHUNKS % THREADS == 0 || idx < CHUNKS) {
                const int r = idx / DCH, c = idx % DCH;
                const bool ok = r < rows_valid;
                const fj_elem *src = g_row0 + (ok ? (long long)r * row_stride : 0ll) + c * 8;
                const unsigned dst = SWZ ? swizzled_addr(s_tile, r, c)
                                         : s_tile + (unsigned)(r * ROW_BYTES + c * 16);
                copy_chunk<POLICY>(dst, src, ok ? 16u : 0u, policy);
            }
        }
    } else {
        /* The same chunks, but with many per thread (e.g. D = 240: 15 per
           tile) the from-scratch positions all stay live and spill; here
           (row, column) and the source pointer advance incrementally. (With
           few chunks the incremental form is the one that costs a register.) */
        constexpr int CHUNKS = ROWS * DCH;
        constexpr int ITERS = (CHUNKS + THREADS - 1) / THREADS;
        constexpr int DR = THREADS / DCH, DC = THREADS % DCH;
        int r = tid / DCH, c = tid % DCH;
        const fj_elem *src = g_row0 + (long long)r * row_stride + c * 8;
#pragma unroll
        for (int it = 0; it < ITERS; ++it) {
            if (CHUNKS % THREADS == 0 || r < ROWS) { /* chunk index < CHUNKS */
                const bool ok = r < rows_valid;
                const unsigned dst = SWZ ? swizzled_addr(s_tile, r, c)
                                         : s_tile + (unsigned)(r * ROW_BYTES + c * 16);
                copy_chunk<POLICY>(dst, ok ? src : g_row0, ok ? 16u : 0u, policy);
            }
            r += DR;
            c += DC;
            src += DR * row_stride + DC * 8;
            if (c >= DCH) {
                c -= DCH;
                r += 1;
                src += row_stride - DCH * 8;
            }
        }
    }
}

/* Flips the sign bit of every element of the Q chunks this thread copied (the
 * same chunks as load_tile<BM>): a negative scale becomes a positive one on
 * -Q, exactly, so the max-then-scale softmax below stays right. */
__device__ __forceinline__ void negate_q_chunks(unsigned s_q, int tid)
{
    constexpr int CHUNKS = BM * DCH;
    constexpr int ITERS = (CHUNKS + THREADS - 1) / THREADS;
#pragma unroll
    for (int it = 0; it < ITERS; ++it) {
        int r, c;
        if constexpr (THREADS % DCH == 0) {
            r = it * (THREADS / DCH) + tid / DCH;
            c = tid % DCH;
        } else {
            const int idx = it * THREADS + tid;
            r = idx / DCH;
            c = idx % DCH;
        }
        if (r < BM) {
            const unsigned a = s_q + (unsigned)(r * ROW_BYTES + c * 16);
            unsigned v[4];
            fj_ld_shared_v4(a, v);
#pragma unroll
            for (int j = 0; j < 4; ++j) v[j] ^= 0x80008000u;
            fj_st_shared_v4(a, v);
        }
    }
}

/* The per-thread state of the key loop. */
struct State {
    float o[MT][NDT][4];  /* O accumulator, mma C layout */
    float m[MT][2];       /* running row max of the scaled scores (log2 domain), rows g, g+8 */
    float l[MT][2];       /* running row sum of exp2, this thread's columns only */
    unsigned q[Q_IN_REGS ? MT : 1][Q_IN_REGS ? KQ : 1][4]; /* Q A fragments when kept */
};

/* The dynamic shared memory, and its shared-window address (a constant the
   assembler folds into immediate offsets). */
extern __shared__ __align__(128) unsigned char fj_smem[];
__device__ __forceinline__ unsigned smem_base() { return fj_smem_u32(fj_smem); }

/* ldmatrix lane addresses. Lane l names row l%8 of matrix l/8. For the A
 * operand (Q) and the transposed B operand (V), matrix i covers rows
 * +8*(i&1) and columns +8*(i>>1) of the 16x16 block, which yields registers
 * in the order a[0..3] resp. {b0, b1} of two adjacent n8 tiles; for the
 * non-transposed B operand (K, stored [key][dim]), matrix i covers keys
 * +8*(i>>1) and dims +8*(i&1), giving {b0, b1} of key tile 2j, then of 2j+1.
 * Each is recomputed where a phase starts, from a laundered lane id, rather
 * than kept live through the softmax, where registers are scarcest. */
__device__ __forceinline__ unsigned lane_id_opaque()
{
    unsigned t = threadIdx.x;
    asm volatile("" : "+r"(t));
    return t;
}
__device__ __forceinline__ unsigned lane_addr_a(unsigned tile, int row0, unsigned t)
{
    const unsigned l = t & 31u, mi = l >> 3, r = l & 7u;
    return tile + (row0 + r + (mi & 1u) * 8u) * ROW_BYTES + (mi >> 1) * 16u;
}
__device__ __forceinline__ unsigned lane_addr_k(unsigned tile, unsigned t)
{
    const unsigned l = t & 31u, mi = l >> 3, r = l & 7u;
    return tile + (r + (mi >> 1) * 8u) * ROW_BYTES + (mi & 1u) * 16u;
}
/* With KV_SWIZZLE, a lane's K or V address is its row's (lane_row_kv) plus
 * kv_chunk(lane_chunk_kv, j) for the pair of chunks 2j, 2j+1 the instruction
 * reads: the lane's chunk, 0 or 1 of the pair, is swizzled by its row (r & 7
 * = lane & 7 in every 8x8 matrix) once, and since 2j has no bit 0 the pair's
 * offset enters as an exclusive or. Matrix i = lane / 8 takes keys
 * +8 * (i >> 1) and chunk i & 1 of K (as lane_addr_k), keys +8 * (i & 1) and
 * chunk i >> 1 of V (as lane_addr_a): bit 4 or 3 of the lane picks the
 * 8-key half, the other the chunk (KEYS_BIT_K, KEYS_BIT_V). */
enum { KEYS_BIT_K = 4, KEYS_BIT_V = 3 };
__device__ __forceinline__ unsigned lane_row_kv(unsigned tile, unsigned t, unsigned keys_bit)
{
    const unsigned l = t & 31u;
    return tile + ((l & 7u) + ((l >> keys_bit) & 1u) * 8u) * KV_ROW_BYTES;
}
__device__ __forceinline__ unsigned lane_chunk_kv(unsigned t, unsigned keys_bit)
{
    const unsigned l = t & 31u;
    return (((l >> (7u - keys_bit)) & 1u) ^ (l & 7u)) << 4;
}
__device__ __forceinline__ unsigned kv_chunk(unsigned lane_chunk, int j)
{
    return lane_chunk ^ (unsigned)(j << 5);
}
/* The query-row group and the key warp within it of the warp of thread t. */
__device__ __forceinline__ unsigned warp_q(unsigned t) { return (t >> 5) / KW; }
__device__ __forceinline__ unsigned warp_k(unsigned t) { return (t >> 5) % KW; }
/* The first of this warp's keys in a tile (0 without key warps). */
__device__ __forceinline__ int warp_key0()
{
    return KW == 1 ? 0 : (int)warp_k(lane_id_opaque()) * BNW;
}
__device__ __forceinline__ unsigned q_lane_addr(unsigned t)
{
    return lane_addr_a(smem_base() + SMEM_Q, (int)warp_q(t) * WARP_ROWS, t);
}

/* S[mt] = Q[mt] K^T for the KSUB keys at byte offset k_off of K stage 0. */
template <int NT>
__device__ __forceinline__ void qk_tile(const State &st, unsigned k_off, float (&s)[MT][NT][4])
{
    const unsigned t = lane_id_opaque();
    const unsigned s_k_lane = (KV_SWIZZLE ? lane_row_kv(smem_base() + SMEM_K, t, KEYS_BIT_K)
                                          : lane_addr_k(smem_base() + SMEM_K, t)) + k_off;
    const unsigned k_chunk = KV_SWIZZLE ? lane_chunk_kv(t, KEYS_BIT_K) : 0u;
    const unsigned s_q_lane = Q_IN_REGS ? 0u : q_lane_addr(t);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) s[mt][nt][e] = 0.f;

#pragma unroll
    for (int kk = 0; kk < KQ; ++kk) {
        unsigned a[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
            if constexpr (Q_IN_REGS) {
#pragma unroll
                for (int e = 0; e < 4; ++e) a[mt][e] = st.q[Q_IN_REGS ? mt : 0][Q_IN_REGS ? kk : 0][e];
            } else {
                fj_ldsm_x4(s_q_lane + (unsigned)(mt * 16 * ROW_BYTES + kk * 32), a[mt][0],
                           a[mt][1], a[mt][2], a[mt][3]);
            }
        }
#pragma unroll
        for (int np = 0; np < NT / 2; ++np) {
            /* keys 16np..16np+15, dims 16kk..16kk+15: b0/b1 of n tiles 2np, 2np+1 */
            unsigned b0, b1, b2, b3;
            if constexpr (KV_SWIZZLE)
                fj_ldsm_x4(s_k_lane + (unsigned)(np * 16 * KV_ROW_BYTES) + kv_chunk(k_chunk, kk), b0,
                           b1, b2, b3);
            else
                fj_ldsm_x4(s_k_lane + (unsigned)(np * 16 * ROW_BYTES + kk * 32), b0, b1, b2, b3);
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                fj_mma_16816(s[mt][2 * np], a[mt], b0, b1);
                fj_mma_16816(s[mt][2 * np + 1], a[mt], b2, b3);
            }
        }
    }
}

/* The query row of this thread's score element (mt 0, hh 0). */
__device__ __forceinline__ long long fragment_row0(int tid)
{
    return (long long)block_m0() + (int)warp_q((unsigned)tid) * WARP_ROWS + ((tid & 31) >> 2);
}

/* Hides the scores of keys outside each row's band (and past seqlen_k) in
 * the KSUB keys from n0 (mask.cuh). */
template <int NT>
__device__ __forceinline__ void mask_tile(const fj_fwd_params &p, int n0, float (&s)[MT][NT][4])
{
    const int tid = threadIdx.x;
    const int col0 = n0 + 2 * (tid & 3); /* key of element (nt 0, e 0) */
    const long long row0 = fragment_row0(tid);
#if FJ_SEQS
    /* the sequence's band, from the block's published sequence */
    mask_scores(p, fja::band_of(p, fja::seq_shared()), row0, col0, s);
#else
    mask_scores(p, row0, col0, s);
#endif
}

/* ALiBi's bias on the KSUB keys from n0, scaling S (mask.cuh). A GQA-packed
 * launch (p.pack_rows, fwd_params.h) puts several query heads' rows in one
 * tile, so each row takes its own head's slope and its own query position:
 * row i of launch head h is query i % pack_rows of the user's head
 * h * pack_group + i / pack_rows, aligned with key (i % pack_rows) +
 * diag_offset + (pack_group - 1) * pack_rows (the launch view's
 * diag_offset is seqlen_k - pack_group * pack_rows, the user's seqlen_k -
 * pack_rows: launch_view.c packs unmasked problems only). This is what
 * lets ALiBi decode read each K and V row once per kv head rather than
 * once per query head. The slopes are cached loads per tile and row, not
 * registers held across the key loop; rows past seqlen_q (never stored)
 * read no slope. Unpacked launches keep Ctx's slope. Only tiles of one
 * 16-row m tile per warp (MT == 1: the decode tiles) have the packed path;
 * in m128n64w4s2 (MT 2) its temporaries spilled 8 bytes (d128 split,
 * sm_80), and the host packs ALiBi for MT == 1 tiles only
 * (fj_launch_view_takes). */
constexpr bool ALIBI_PACKED = MT == 1;
template <int NT>
__device__ __forceinline__ void alibi_tile(const fj_fwd_params &p, const Ctx &c, int n0,
                                           float (&s)[MT][NT][4])
{
    const int tid = threadIdx.x;
    const int col0 = n0 + 2 * (tid & 3);
    if (!ALIBI_PACKED || p.pack_rows == 0) {
        fja::alibi_scores(p, fragment_row0(tid), col0, c.alibi_slope, c.alibi_scale, s);
        return;
    }
    const int i0 = (int)fragment_row0(tid); /* < seqlen_q + BM: packed rows are few */
    const int h = blockIdx.y;
    const long long diag = p.diag_offset + (long long)(p.pack_group - 1) * p.pack_rows;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
            const int i = i0 + mt * 16 + hh * 8;
            const int g = i / p.pack_rows, qi = i - g * p.pack_rows;
            const float slope =
                i < p.seqlen_q ? -__ldg(p.alibi_slopes + (h * p.pack_group + g)) * FJ_LOG2E : 0.f;
            /* the distance exact: |.| < 2^24 */
            fja::alibi_row((float)(qi + diag - col0), slope, c.alibi_scale, s, mt, hh);
        }
}

/* O += P V for the KSUB keys at byte offset v_off of V stage 0, P = s (the
 * exp2 of the scores, packed into A fragments by pack_p_step, softmax.cuh).
 * Packing step by step lets each float score die as soon as it is packed. */
template <int NT>
__device__ __forceinline__ void pv_tile(State &st, unsigned v_off, const float (&s)[MT][NT][4])
{
    constexpr int KV = NT / 2; /* k16 steps of P V */
    unsigned s_v_lane, v_chunk = 0u;
    if constexpr (KV_SWIZZLE) {
        const unsigned t = lane_id_opaque();
        s_v_lane = lane_row_kv(smem_base() + SMEM_V, t, KEYS_BIT_V) + v_off;
        v_chunk = lane_chunk_kv(t, KEYS_BIT_V);
    } else {
        s_v_lane = lane_addr_a(smem_base() + SMEM_V, 0, lane_id_opaque()) + v_off;
    }
#pragma unroll
    for (int kk = 0; kk < KV; ++kk) {
        unsigned a[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) pack_p_step(s[mt], kk, a[mt]);
#pragma unroll
        for (int dp = 0; dp < (NDT + 1) / 2; ++dp) {
            /* keys 16kk..16kk+15, columns 16dp..16dp+15 (transposed: V is [key][d]) */
            const unsigned addr =
                KV_SWIZZLE ? s_v_lane + (unsigned)(kk * 16 * KV_ROW_BYTES) + kv_chunk(v_chunk, dp)
                           : s_v_lane + (unsigned)(kk * 16 * ROW_BYTES + dp * 32);
            if (2 * dp + 1 < NDT) {
                unsigned b0, b1, b2, b3;
                fj_ldsm_x4_trans(addr, b0, b1, b2, b3);
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    fj_mma_16816(st.o[mt][2 * dp], a[mt], b0, b1);
                    fj_mma_16816(st.o[mt][2 * dp + 1], a[mt], b2, b3);
                }
            } else {
                /* odd D/8: the last 8 columns alone, never touching [D, DPAD) */
                unsigned b0, b1;
                fj_ldsm_x2_trans(addr, b0, b1);
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) fj_mma_16816(st.o[mt][2 * dp], a[mt], b0, b1);
            }
        }
    }
}

/* The split variant of the one-warp decode tiles (one 16-row query tile)
 * loads K and V with an L2 evict_first policy when the host says no other
 * block reads them (p.kv_read_once), and with plain copies otherwise. On the
 * H200 (2026-12-03, docs/benchmarks.md) evict_first took the batch-1 GQA
 * row at 32k keys from 1.05-1.10x cuDNN's kernel time to 1.02x, but the
 * unsplit 64-batch row from 1.03-1.05x to 1.13x, and an evict_normal policy
 * in place of the plain copy cost up to 20 %: hence split kernels only, and
 * no policy at all where the data is shared. Up to D = 128: above it the
 * one-warp tiles spill already, and the second load path adds to that.
 * Not in varlen and paged kernels: their pages may be shared between
 * sequences (a common prefix), and the second path spilled 8 bytes at d128
 * m16n128w4s1 (split, sm_90, NVRTC 13.0). */
constexpr bool KV_L2_POLICY = BM == 16 && FJ_SPLIT_KV && D <= 128 && !FJ_SEQS;

enum { LOAD_K = 1, LOAD_V = 2, LOAD_KV = 3 };

#if !FJ_PAGE_SIZE
constexpr bool PAGES_STAGED = false; /* no pages (the paged kernels: below) */
#endif

#if FJ_PAGE_SIZE
/* The page numbers of a key tile, staged in shared memory ahead of its
 * copies (PAGES_STAGED). Read from the block table right before each
 * 16-byte cp.async, an entry made every K or V tile's issue wait one
 * dependent global load (the table is touched for the first time, often an
 * L2 or DRAM miss), and with the alternating pipeline only one of K and V
 * is in flight per block, so that latency was not hidden: paged decode ran
 * at 0.80-0.92x the dense kernel's bytes per second (docs/benchmarks.md).
 * Instead the group that copies tile t also copies the PAGES_PER_TILE table
 * entries of tile t - 1 (the next one loaded: tiles run downwards), one
 * 4-byte cp.async per entry from the first threads, into a buffer of two
 * indexed by the tile's parity; the next load of tile t - 1 waits for that
 * group anyway (with STAGES <= 2 every group but the newest one is complete
 * when a tile is issued), and reads the pages from shared memory. The
 * prologue reads the table directly for its tiles and stages, with Q, the
 * first one the loop issues (n_end - STAGES). An entry of a page past the sequence's keys is not read
 * (zero-filled: unused tail entries may hold anything), and every entry is
 * clamped into the pool where it is used (FLASHJIT_CHECK=1 refuses bad
 * ones before launch). With STAGES >= 3 the newest groups are still in
 * flight when the next tile is issued, so those kernels read the table
 * directly; so do the one-stage tiles that do not alternate K and V (each
 * tile loaded and waited for: nothing to hide the table load behind), and
 * the 128-row tiles above d128 (prefill, bound by the math, at the edge of
 * the register file: staged, m128n64w8s1 at d216 window split on sm_80
 * spilled 72 bytes where it already spills 48). */
constexpr int PAGES_PER_TILE = BN % FJ_PAGE_SIZE == 0   ? BN / FJ_PAGE_SIZE
                               : FJ_PAGE_SIZE % BN == 0 ? 1
                                                        : (BN - 1) / FJ_PAGE_SIZE + 2;
constexpr bool PAGES_STAGED =
    (ALTERNATE || STAGES == 2) && (BM < 128 || D <= 128) && PAGES_PER_TILE <= THREADS;
__shared__ __align__(16) int fj_page_smem[2][PAGES_PER_TILE];

/* The first table entry of key tile n. */
__device__ __forceinline__ int first_page(int n) { return n * BN / FJ_PAGE_SIZE; }

/* Entry e of tile n's staged pages, loaded where it is used (volatile, as
   ld_len: not hoisted and held in registers across the chunks' copies). */
__device__ __forceinline__ unsigned staged_page(int n, int e)
{
    unsigned v;
    const unsigned a = fj_smem_u32(&fj_page_smem[n & 1][0]) + (unsigned)e * 4u;
    asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(v) : "r"(a));
    return v;
}

/* Copies the table entries of tile n of sequence b (keys sk) into
   fj_page_smem[n & 1] with the next commit. */
__device__ __forceinline__ void stage_pages(const fj_fwd_params &p, int b, int n, int tid)
{
    if (tid < PAGES_PER_TILE) {
        const int sk = fja::seq_shared().sk;
        const int e = first_page(n) + tid;
        const bool ok = (long long)e * FJ_PAGE_SIZE < sk;
        const int *src = p.block_table + (long long)b * p.bt_stride + (ok ? e : 0);
        const unsigned dst = fj_smem_u32(&fj_page_smem[n & 1][tid]);
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src),
                     "r"(ok ? 4u : 0u)
                     : "memory");
    }
}

/* Key tile n of sequence b from a paged cache: row r of the tile is key j =
 * n BN + r, row j % FJ_PAGE_SIZE of page block_table[b][j / FJ_PAGE_SIZE]
 * of the pools (k_stride and v_stride step a page, a row, a head), the
 * page read from fj_page_smem[n & 1] when STAGED (stage_pages), else from
 * the table (a cached load per chunk). Rows past the sequence's keys are
 * zero-filled and read no page; a page index outside the pool is clamped
 * into it, so no table makes the copies read outside the pools. Each
 * chunk's position is computed from scratch, as load_tile's second form. */
template <int WHICH, bool POLICY, bool STAGED>
__device__ __forceinline__ void load_kv_paged(const fj_fwd_params &p, int b, int hk, int n,
                                              unsigned k_tile, unsigned v_tile, int tid,
                                              unsigned long long policy)
{
    static_assert(FJ_PAGE_SIZE % 16 == 0, "FJ_PAGE_SIZE must be a multiple of 16");
    const int sk = fja::seq_shared().sk; /* the block's sequence (seq_publish) */
    const int *bt = p.block_table + (long long)b * p.bt_stride;
    const unsigned last_page = (unsigned)p.num_pages - 1u;
    constexpr int CHUNKS = BN * DCH;
    constexpr int ITERS = (CHUNKS + THREADS - 1) / THREADS;
#pragma unroll
    for (int it = 0; it < ITERS; ++it) {
        const int idx = it * THREADS + tid;
        if (CHUNKS % THREADS == 0 || idx < CHUNKS) {
            const int r = idx / DCH, c = idx % DCH;
            const int j = n * BN + r;
            const bool ok = j < sk;
            long long k_off = 0, v_off = 0;
            if (ok) {
                unsigned page;
                if constexpr (STAGED) page = staged_page(n, j / FJ_PAGE_SIZE - first_page(n));
                else page = (unsigned)fja::ld_len(bt, j / FJ_PAGE_SIZE);
                page = page < last_page ? page : last_page;
                const int row = j % FJ_PAGE_SIZE;
                k_off = page * p.k_stride[0] + row * p.k_stride[1] + hk * p.k_stride[2] + c * 8;
                v_off = page * p.v_stride[0] + row * p.v_stride[1] + hk * p.v_stride[2] + c * 8;
            }
            const unsigned dst =
                KV_SWIZZLE ? swizzled_addr(0u, r, c) : (unsigned)(r * ROW_BYTES + c * 16);
            if (WHICH & LOAD_K)
                copy_chunk<POLICY>(k_tile + dst, (const fj_elem *)p.k + k_off, ok ? 16u : 0u,
                                   policy);
            if (WHICH & LOAD_V)
                copy_chunk<POLICY>(v_tile + dst, (const fj_elem *)p.v + v_off, ok ? 16u : 0u,
                                   policy);
        }
    }
}
#endif

/* Issues the copies of key tile n into pipeline buffer `buf`: K when
 * WHICH & 1, V when WHICH & 2. Paged kernels: DIRECT reads the block table
 * (the prologue's tiles), else the pages staged for tile n; stage_next: the
 * same group also stages the pages of tile n - 1 (PAGES_STAGED). */
template <int WHICH = LOAD_KV, bool DIRECT = false>
__device__ __forceinline__ void load_kv(const fj_fwd_params &p, int n, int buf,
                                        bool stage_next = false)
{
    /* Each of these goes through an empty volatile asm, so nothing derived
       from them (per-thread chunk offsets, row pointers) can be hoisted out of
       the key loop by the compiler: kept live across the loop, those values
       would take a dozen registers from the accumulators and spill. They are
       recomputed per tile instead, with a few integer instructions. */
    int tid = threadIdx.x, y = blockIdx.y, z = blockIdx.z;
    asm volatile("" : "+r"(tid), "+r"(y), "+r"(z));
    const int b = block_batch(p, z), hk = y / p.group;
#if FJ_PAGE_SIZE
    {
        constexpr bool STAGED = PAGES_STAGED && !DIRECT;
        const unsigned k_tile = smem_base() + (unsigned)(SMEM_K + buf * TILE_BYTES);
        const unsigned v_tile = smem_base() + (unsigned)(SMEM_V + buf * TILE_BYTES);
        if (KV_L2_POLICY && p.kv_read_once)
            load_kv_paged<WHICH, true, STAGED>(p, b, hk, n, k_tile, v_tile, tid,
                                               fj_l2_evict_first());
        else load_kv_paged<WHICH, false, STAGED>(p, b, hk, n, k_tile, v_tile, tid, 0ull);
        if (PAGES_STAGED && stage_next) stage_pages(p, b, n - 1, tid);
        return;
    }
#else
    (void)stage_next;
#endif
    const KvTileSrc src = kv_tile_src(p, b, hk, n);
    const fj_elem *k_rows = src.k, *v_rows = src.v;
    const int rows = src.rows;
    const unsigned k_tile = smem_base() + (unsigned)(SMEM_K + buf * TILE_BYTES);
    const unsigned v_tile = smem_base() + (unsigned)(SMEM_V + buf * TILE_BYTES);
    if (KV_L2_POLICY && p.kv_read_once) {
        const unsigned long long policy = fj_l2_evict_first();
        if (WHICH & LOAD_K)
            load_tile<BN, KV_SWIZZLE, true>(k_tile, k_rows, p.k_stride[1], rows, tid, policy);
        if (WHICH & LOAD_V)
            load_tile<BN, KV_SWIZZLE, true>(v_tile, v_rows, p.v_stride[1], rows, tid, policy);
    } else {
        if (WHICH & LOAD_K) load_tile<BN, KV_SWIZZLE>(k_tile, k_rows, p.k_stride[1], rows, tid);
        if (WHICH & LOAD_V) load_tile<BN, KV_SWIZZLE>(v_tile, v_rows, p.v_stride[1], rows, tid);
    }
}

/* The lowest key tile of the block (Ctx::n_begin). Varlen and paged
 * kernels with the alternating pipeline keep it in shared memory
 * (attention_rows.cuh, SharedBound): from the length arrays it cannot be
 * rematerialized from the parameters, and ptxas spilled it across the loop
 * (d128 varlen decode m16n128w4s1, sm_90). The other kernels keep it in a
 * register: there the extra load spilled instead (m128n64w4s2 split at
 * d128 on sm_80, 255 registers). */
__device__ __forceinline__ int n_begin_of(const Ctx &c)
{
#if FJ_SEQS
    if constexpr (ALTERNATE) {
        fja::SharedBound b;
        b.i = fja::SEQ_N_BEGIN;
        return b;
    }
#endif
    return c.n_begin;
}

/* One key tile n in buffer `stage`, with its place in the cp.async pipeline.
 * Tiles run from the highest down (the masked tiles at the causal diagonal or
 * the seqlen_k tail come first, as in FlashAttention-2); call the j-th tile
 * processed T_j, held in buffer j % STAGES. Groups are Q, T_0, T_1, ... (K and
 * V of a tile in one group). With STAGES >= 2, T_j+STAGES-2 is the newest
 * group when T_j starts, so waiting until STAGES-2 groups remain completes
 * T_j; the barrier then also proves every warp is done with T_j-1, whose
 * buffer takes T_j+STAGES-1, in flight during this tile's math. The copies
 * are issued here, before S exists, where registers are plentiful. Empty
 * groups are committed past the last tile so the counts stay constant.
 * STAGES == 1 has one K and one V buffer, and the loads alternate as in
 * FlashAttention-2's sm_80 kernel (ALTERNATE): V of tile n is in flight
 * during S = Q K^T and the softmax, K of the next tile during P V, so one
 * of the two is always on its way; the group in flight at the top of an
 * iteration is K_n alone. That needs the whole tile's S before P V, i.e.
 * one softmax sub-tile per warp; otherwise each tile is loaded, waited
 * for and computed with no overlap. */
template <bool MASKED>
__device__ __forceinline__ void tile_iteration(const fj_fwd_params &p, const Ctx &c, State &st,
                                               int n, int stage)
{
    constexpr int KSUB = MASKED ? KSUB_MASKED : KSUB_UNMASKED;
    if constexpr (ALTERNATE) {
        fj_cp_async_wait<0>();
        __syncthreads(); /* K_n has landed; every warp is done with V_n+1 */
        load_kv<LOAD_V>(p, n, 0, PAGES_STAGED && n - 1 >= n_begin_of(c));
        fj_cp_async_commit();
        const int key0 = warp_key0();
        const unsigned off = (unsigned)(key0 * KV_ROW_BYTES);
        float s[MT][KSUB / 8][4];
        qk_tile(st, off, s);
        if constexpr (FJ_SOFTCAP) fja::cap_scores(s, c.cap_in);
        if constexpr (FJ_ALIBI) alibi_tile(p, c, n * BN + key0, s);
        if constexpr (MASKED) mask_tile(p, n * BN + key0, s);
        online_softmax<MASKED>(s, st.m, st.l, st.o, c.scale);
        fj_cp_async_wait<0>();
        __syncthreads(); /* V_n has landed; every warp is done with K_n */
        if (n - 1 >= n_begin_of(c)) load_kv<LOAD_K>(p, n - 1, 0);
        fj_cp_async_commit();
        pv_tile(st, off, s);
        return;
    } else if constexpr (STAGES == 1) {
        __syncthreads(); /* every warp is done with the previous tile */
        load_kv(p, n, 0, PAGES_STAGED && n - 1 >= n_begin_of(c));
        fj_cp_async_commit();
        fj_cp_async_wait<0>();
        __syncthreads();
    } else {
        fj_cp_async_wait<STAGES - 2>();
        __syncthreads();
        const int nn = n - (STAGES - 1);
        if (nn >= n_begin_of(c))
            load_kv(p, nn, stage == 0 ? STAGES - 1 : stage - 1,
                    PAGES_STAGED && nn - 1 >= n_begin_of(c));
        fj_cp_async_commit();
    }

    /* A rolled loop: unrolled, ptxas would overlap one sub-tile's Q K^T with
       the previous one's P V and need both sets of registers. */
    const int key0 = warp_key0();
#pragma unroll 1
    for (int sub = 0; sub < BNW / KSUB; ++sub) {
        const int k_sub = key0 + sub * KSUB;
        const unsigned off = (unsigned)(stage * TILE_BYTES + k_sub * KV_ROW_BYTES);
        float s[MT][KSUB / 8][4];
        qk_tile(st, off, s);
        if constexpr (FJ_SOFTCAP) fja::cap_scores(s, c.cap_in);
        if constexpr (FJ_ALIBI) alibi_tile(p, c, n * BN + k_sub, s);
        if constexpr (MASKED) mask_tile(p, n * BN + k_sub, s);
        online_softmax<MASKED>(s, st.m, st.l, st.o, c.scale);
        pv_tile(st, off, s);
    }
}

/* Key warps (KW > 1): the warps of a query-row group saw disjoint keys of
 * the same rows, so their states merge like two steps of the online softmax:
 * M = the largest m, O = sum_w 2^(m_w - M) O_w, l likewise. Lane i of every
 * warp holds the same rows and columns (the mma layouts do not depend on the
 * warp), so the merge is lane by lane: warps 1.. of the group store their m,
 * l and O in the K/V buffers (free once every warp is past the key loop;
 * word r of lane i at [r][i], conflict-free), and warp 0 folds them into its
 * own state, which epilogue then writes. Returns whether this warp stores.
 * A state that saw no visible key (m = -inf, l = 0, O = 0) weighs 0. */
constexpr int XCHG_WORDS = MT * 4 + MT * NDT * 4; /* m, l, O per lane */
constexpr int XCHG_BYTES = QW * (KW - 1) * XCHG_WORDS * 32 * 4;
static_assert(SMEM_K + XCHG_BYTES <= SMEM_TOTAL, "key-warp exchange does not fit the K/V buffers");
__device__ __forceinline__ float key_warp_weight(float m, float mx)
{
    return mx == FJ_NEG_INF ? 0.f : fj_exp2(m - mx);
}
__device__ __forceinline__ bool merge_key_warps(State &st)
{
    if constexpr (KW == 1) {
        return true;
    } else {
        const unsigned t = lane_id_opaque(), lane = t & 31u, wk = warp_k(t);
        float *x = (float *)(fj_smem + SMEM_K) + (warp_q(t) * (KW - 1) * XCHG_WORDS * 32 + lane);
        __syncthreads(); /* every warp is done with K and V */
        if (wk != 0) {
            float *mine = x + (wk - 1) * XCHG_WORDS * 32;
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int hh = 0; hh < 2; ++hh) {
                    mine[((mt * 2 + hh) * 2) * 32] = st.m[mt][hh];
                    mine[((mt * 2 + hh) * 2 + 1) * 32] = st.l[mt][hh];
#pragma unroll
                    for (int dt = 0; dt < NDT; ++dt)
#pragma unroll
                        for (int e = 0; e < 2; ++e)
                            mine[(MT * 4 + (mt * NDT + dt) * 4 + 2 * hh + e) * 32] =
                                st.o[mt][dt][2 * hh + e];
                }
        }
        __syncthreads();
        if (wk != 0) return false;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) {
                const int r = (mt * 2 + hh) * 2;
                float mx = st.m[mt][hh];
#pragma unroll
                for (int w = 0; w < KW - 1; ++w) mx = fmaxf(mx, x[(w * XCHG_WORDS + r) * 32]);
                const float a = key_warp_weight(st.m[mt][hh], mx);
                st.m[mt][hh] = mx;
                st.l[mt][hh] *= a;
#pragma unroll
                for (int dt = 0; dt < NDT; ++dt)
#pragma unroll
                    for (int e = 0; e < 2; ++e) st.o[mt][dt][2 * hh + e] *= a;
#pragma unroll
                for (int w = 0; w < KW - 1; ++w) {
                    const float *theirs = x + w * XCHG_WORDS * 32;
                    const float aw = key_warp_weight(theirs[r * 32], mx);
                    st.l[mt][hh] = fmaf(aw, theirs[(r + 1) * 32], st.l[mt][hh]);
#pragma unroll
                    for (int dt = 0; dt < NDT; ++dt)
#pragma unroll
                        for (int e = 0; e < 2; ++e)
                            st.o[mt][dt][2 * hh + e] =
                                fmaf(aw, theirs[(MT * 4 + (mt * NDT + dt) * 4 + 2 * hh + e) * 32],
                                     st.o[mt][dt][2 * hh + e]);
                }
            }
        return true;
    }
}

/* The rows of the Q tile where the epilogue stages O (tile_io.cuh): the
 * warp's own rows, which no other warp reads, in Q's padded layout. */
struct QStaging {
    unsigned base;
    __device__ __forceinline__ unsigned pair(int r, int dt, int tq) const
    {
        return base + (unsigned)(r * ROW_BYTES + (dt * 8 + 2 * tq) * 2);
    }
    __device__ __forceinline__ unsigned chunk(int r, int ch) const
    {
        return base + (unsigned)(r * ROW_BYTES + ch * 16);
    }
    __device__ __forceinline__ void claim() const { __syncwarp(); }
};

/* Epilogue: full row sums, O / l and lse, written for rows < seqlen_q. */
__device__ __forceinline__ void epilogue(const fj_fwd_params &p, const State &st)
{
    const Where wh = where(p, true);
    const int lane = (int)(lane_id_opaque() & 31u), warp = (int)warp_q(lane_id_opaque());
    store_output(p, wh, warp, lane, st.m, st.l, st.o, QStaging{smem_base() + SMEM_Q});
}

} /* namespace fj */

extern "C" __global__ void __launch_bounds__(FJ_THREADS) fj_flash_fwd(const fj_fwd_params p)
{
    using namespace fj;

    const int tid = threadIdx.x;
    const Where wh = where(p, false);
    const int b = wh.b, h = wh.h, split = wh.split, m0 = wh.m0, q_rows = wh.q_rows;

    /* Key tiles [n_begin, n_end); [u0, u1) skip masking (attention_rows.cuh). */
#if FJ_SEQS
    /* the grid covers the plan's longest sequence: a block past its own
       sequence's rows has nothing to do (no partials either: the combine
       kernel reads only the sequence's rows) */
    if (q_rows <= 0) return;
    const KeyTiles kt = key_tiles(p, fja::band_of(p, wh.seq), m0, q_rows, split);
    {
        int u0, u1;
        clamp_unmasked(kt, u0, u1);
        fja::seq_publish(wh.seq, kt.n_begin, u0, u1);
    }
#else
    const KeyTiles kt = key_tiles(p, m0, q_rows, split);
#endif
    const int n_begin = kt.n_begin, n_end = kt.n_end;
    if (n_begin >= n_end) {
        store_empty(p, b, h, split, m0, tid);
        return;
    }

    const unsigned s_base = smem_base();
    const unsigned s_q = s_base + SMEM_Q;

    Ctx c;
    c.n_begin = n_begin;
    c.scale = FJ_SOFTCAP ? p.softcap_log2 : fabsf(p.scale_log2);
    c.cap_in = fabsf(p.softcap_in);
    fja::ctx_modifiers(p, h, c);

    /* Columns [D, DPAD) of Q and K take part in the k16 steps: zero them once
       (cp.async only ever writes the data chunks). */
    if constexpr (DPAD != D) {
        for (int r = tid; r < BM + STAGES * BN; r += THREADS)
            fj_st_shared_zero16(s_base + (unsigned)(r * ROW_BYTES + D * 2));
    }

    /* Prologue: Q, then T_0 .. T_STAGES-2, one group each. A paged kernel
       reads their pages from the block table and stages those of the tile
       the loop issues first from the shared pages, n_end - STAGES, with
       Q's group (complete before the loop's first issue). */
    {
        load_tile<BM>(s_q, q_tile_src(p, wh), p.q_stride[1], q_rows, tid);
#if FJ_PAGE_SIZE
        if constexpr (PAGES_STAGED)
            if (n_end - STAGES >= n_begin) stage_pages(p, b, n_end - STAGES, tid);
#endif
        fj_cp_async_commit();
#pragma unroll
        for (int s = 0; s < STAGES - 1; ++s) {
            const int n = n_end - 1 - s;
            if (n >= n_begin) load_kv<LOAD_KV, true>(p, n, s);
            fj_cp_async_commit();
        }
        if constexpr (ALTERNATE) {
            load_kv<LOAD_K, true>(p, n_end - 1, 0);
            fj_cp_async_commit();
        }
    }

    /* Q has landed (STAGES-1 younger groups, or K of the first tile, may be
       in flight). */
    fj_cp_async_wait<ALTERNATE ? 1 : STAGES - 1>();
    if (p.scale_log2 < 0.f) negate_q_chunks(s_q, tid);
    __syncthreads();

    State st;
    softmax_init(st.m, st.l, st.o);
    if constexpr (Q_IN_REGS) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int kk = 0; kk < KQ; ++kk)
                fj_ldsm_x4(q_lane_addr(tid) + (unsigned)(mt * 16 * ROW_BYTES + kk * 32),
                           st.q[Q_IN_REGS ? mt : 0][Q_IN_REGS ? kk : 0][0],
                           st.q[Q_IN_REGS ? mt : 0][Q_IN_REGS ? kk : 0][1],
                           st.q[Q_IN_REGS ? mt : 0][Q_IN_REGS ? kk : 0][2],
                           st.q[Q_IN_REGS ? mt : 0][Q_IN_REGS ? kk : 0][3]);
    }

    {
#if FJ_SEQS
        /* the bounds from shared memory (attention_rows.cuh, SharedBound) */
        for_each_key_tile<STAGES>(kt, fja::SharedBound{fja::SEQ_U0}, fja::SharedBound{fja::SEQ_U1},
                                  [&](auto masked, int n, int stage) {
                                      tile_iteration<decltype(masked)::value>(p, c, st, n, stage);
                                  });
#else
        int u0, u1;
        clamp_unmasked(kt, u0, u1);
        for_each_key_tile<STAGES>(kt, u0, u1, [&](auto masked, int n, int stage) {
            tile_iteration<decltype(masked)::value>(p, c, st, n, stage);
        });
#endif
    }
    fj_cp_async_wait<0>(); /* only empty groups can remain; drained for hygiene */
#if FJ_SPLIT_KV
    /* the combine kernel may launch as the last blocks write their partials
       (it waits for this grid to finish before reading them) */
    fj_allow_dependent_launch();
#endif
    if (merge_key_warps(st)) epilogue(p, st);
}
