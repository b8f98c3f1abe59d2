/* flash_tma.cu: the attention forward kernel for sm_90 built like
 * FlashAttention-3: warp-specialized, fed by the Tensor Memory Accelerator,
 * multiplying with warpgroup MMA, persistent. Rendered per descriptor like
 * the other templates (fwd_params.h, common.cuh, attention_rows.cuh and
 * wgmma.cuh come first); computes the same function with the same
 * parameters and outputs, and takes a second parameter block, the TMA
 * descriptors and the tile counter (fj_tma_params).
 *
 * Needs sm_90a (NVRTC --gpu-architecture=sm_90a): wgmma and setmaxnreg.
 *
 * Block: FJ_WARPS = 4 * (consumers + 1) warps.
 *   warpgroup 0, the producer: gives up registers (setmaxnreg) and one
 *     thread issues every copy: Q (per consumer, 64 rows), then per key
 *     tile K and V into a ring of FJ_STAGES buffers each, each copy
 *     completing on the buffer's "full" mbarrier (expect_tx), each buffer
 *     reused once the consumers' warps arrive on its "empty" mbarrier;
 *   warpgroups 1..consumers: each owns 64 query rows of the FJ_BLOCK_M-row
 *     query tile and takes the registers the producer gave up. Per key tile
 *     it issues S = Q K^T of this tile and O += P V of the previous one
 *     together, takes the softmax of S while P V runs (the intra-warpgroup
 *     overlap), and the consumers take turns issuing their GEMMs through
 *     named barriers, so that one's softmax runs while another's GEMMs use
 *     the tensor cores (the ping-pong).
 * Grid: persistent, at most one block per SM. The work tiles are numbered
 * in sections of head_group (head, batch) pairs, whose K and V fit in L2
 * together, and in each section query tile by query tile (the longest
 * first under a causal mask) with the section's pairs side by side
 * (tile_of). The producer takes the next number from a counter in device
 * memory whenever it starts a tile (next_tile), so the blocks that finish
 * early take more, and at any time the tiles in flight are neighbours in
 * that order: their keys are the L2-sized group's, whatever the tiles'
 * lengths. It passes the number to its consumers in shared memory with
 * the Q tile (or -1 when the counter has run out).
 *
 * Head dims: every multiple of 16 from 64 to 256, exactly. A tile's rows are
 * stored as column blocks of 64 elements (128-byte rows, 128-byte swizzle),
 * then one of 32 (64-byte swizzle) and one of 16 (32-byte swizzle) for what
 * is left (D = 80: 64 + 16; 112: 64 + 32 + 16); each block is one TMA box
 * and the wgmma descriptors name its swizzle, so D 80 does the work of 80.
 *
 * Shared memory (base rounded up to 1024 bytes): Q tile, O staging tile
 * (when it fits; else O is staged in the consumer's own Q rows), FJ_STAGES
 * K tiles, FJ_STAGES V tiles, the mbarriers and the work tile's number.
 *
 * Rules (src/cuda/jit/template_table.c checks them): sm_90; D a multiple of
 * 16 in 64..256; FJ_BLOCK_M = 64 * consumers, consumers 1..3; FJ_BLOCK_N a
 * multiple of 16 in 16..256; FJ_STAGES 2..4; no split-KV variant.
 */

#if FJ_SPLIT_KV
#error "flash_tma has no split-KV variant"
#endif

namespace fjt {

using fja::clamp_unmasked;
using fja::key_tiles;
using fja::KeyTiles;
using fja::lse_index;

constexpr int D = FJ_HEAD_DIM;
constexpr int BM = FJ_BLOCK_M;
constexpr int BN = FJ_BLOCK_N;
constexpr int STAGES = FJ_STAGES;
constexpr int CONSUMERS = BM / 64;
constexpr int THREADS = 32 * FJ_WARPS;
constexpr int NT = BN / 8;  /* n8 tiles of S */
constexpr int NDT = D / 8;  /* n8 tiles of O */
constexpr int KQ = D / 16;  /* k16 steps of Q K^T */
constexpr int KV = BN / 16; /* k16 steps of P V */

static_assert(D % 16 == 0 && D >= 64 && D <= 256, "FJ_HEAD_DIM must be a multiple of 16 in 64..256");
static_assert(BM % 64 == 0 && CONSUMERS >= 1 && CONSUMERS <= 3, "FJ_BLOCK_M must be 64, 128 or 192");
static_assert(FJ_WARPS == 4 * CONSUMERS + 4, "a producer warpgroup and one per 64 query rows");
static_assert(BN % 16 == 0 && BN >= 16 && BN <= 256, "FJ_BLOCK_N must be a multiple of 16 in 16..256");
static_assert(STAGES >= 2 && STAGES <= 4, "FJ_STAGES must be in 2..4");

/* Registers per thread after setmaxnreg: the producer keeps a few, the
   consumers share the rest of the 64 Ki (one block per SM). One consumer
   needs no reallocation. */
constexpr int PRODUCER_REGS = 24;
constexpr int CONSUMER_REGS = CONSUMERS == 2 ? 240 : 160;
static_assert(128 * PRODUCER_REGS + 128 * CONSUMERS * CONSUMER_REGS <= 65536 || CONSUMERS == 1,
              "registers over the SM's 64 Ki");

/* ---- column blocks ----------------------------------------------------------- */

constexpr int NB64 = D / 64;                      /* 64-wide blocks */
constexpr bool HAS32 = D % 64 >= 32;               /* then one 32 wide */
constexpr bool HAS16 = D % 32 == 16;               /* then one 16 wide */
constexpr int COL32 = 64 * NB64;
constexpr int COL16 = COL32 + (HAS32 ? 32 : 0);

/* ---- shared memory ------------------------------------------------------------ */

constexpr unsigned ATOM = 1024;
__host__ __device__ constexpr unsigned tile_bytes(int rows) { return (rows * D * 2 + ATOM - 1) / ATOM * ATOM; }
constexpr unsigned Q_BYTES = tile_bytes(BM);
constexpr unsigned KV_BYTES = tile_bytes(BN);
constexpr int BARRIERS = 2 + 4 * STAGES; /* q full/empty, k full/empty, v full/empty */
constexpr unsigned BAR_BYTES = (BARRIERS * 8 + 127) / 128 * 128;
/* The opt-in maximum of sm_90; the host's formula is the same (template_table.c). */
constexpr unsigned SMEM_MAX = 232448;
constexpr unsigned BASE_BYTES = Q_BYTES + 2 * STAGES * KV_BYTES + BAR_BYTES + ATOM;
constexpr bool O_SEPARATE = BASE_BYTES + Q_BYTES <= SMEM_MAX;
constexpr unsigned SMEM_Q = 0;
constexpr unsigned SMEM_O = O_SEPARATE ? Q_BYTES : SMEM_Q;
constexpr unsigned SMEM_K = Q_BYTES + (O_SEPARATE ? Q_BYTES : 0);
constexpr unsigned SMEM_V = SMEM_K + STAGES * KV_BYTES;
constexpr unsigned SMEM_BAR = SMEM_V + STAGES * KV_BYTES;
static_assert(SMEM_BAR + BAR_BYTES + ATOM == FJ_SMEM_BYTES, "shared layout disagrees with FJ_SMEM_BYTES");

/* The work tiles' numbers, after the barriers (in their block's padding):
   two slots, the Q tile's uses alternating between them, so the producer
   writes the next number as soon as it draws it (the consumers read the
   slot's previous number before they released the Q tile two uses ago,
   which the producer has waited for) and need not keep it. */
constexpr unsigned SMEM_TILE_ID = SMEM_BAR + BARRIERS * 8;
static_assert(BARRIERS * 8 + 8 <= BAR_BYTES, "no room for the tile numbers after the barriers");
__device__ __forceinline__ unsigned tile_slot(unsigned base, unsigned q_use)
{
    return base + SMEM_TILE_ID + 4u * (q_use & 1u);
}

enum { BAR_Q_FULL = 0, BAR_Q_EMPTY = 1, BAR_K_FULL = 2, BAR_K_EMPTY = 2 + STAGES,
       BAR_V_FULL = 2 + 2 * STAGES, BAR_V_EMPTY = 2 + 3 * STAGES };

extern __shared__ __align__(128) unsigned char fj_smem[];
__device__ __forceinline__ unsigned smem_base()
{
    return (fj_smem_u32(fj_smem) + (ATOM - 1)) & ~(ATOM - 1);
}
__device__ __forceinline__ unsigned bar(unsigned base, int i) { return base + SMEM_BAR + 8u * i; }

/* Byte offset of the column block starting at column c in a tile of R rows:
   the blocks before it hold R * c elements. */
__host__ __device__ constexpr unsigned block_offset(int rows, int col) { return (unsigned)(rows * col * 2); }

/* ---- mbarriers, named barriers, bulk copies ---------------------------------- */

__device__ __forceinline__ void mbar_init(unsigned a, unsigned count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(a), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(unsigned a, unsigned bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(a), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void mbar_arrive(unsigned a, unsigned count)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0], %1;\n" ::"r"(a), "r"(count) : "memory");
}
__device__ __forceinline__ bool mbar_try_wait(unsigned a, unsigned parity)
{
    unsigned done;
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                 "selp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done)
                 : "r"(a), "r"(parity)
                 : "memory");
    return done != 0;
}
/* Waits until the barrier's phase of this parity has completed. */
__device__ __forceinline__ void mbar_wait(unsigned a, unsigned parity)
{
    while (!mbar_try_wait(a, parity)) {
    }
}

/* Named barriers 1..3 order the consumers' GEMM issue (ping-pong), 4..6
   each consumer's epilogue; 0 is __syncthreads'. */
__device__ __forceinline__ void named_sync(int id, int threads)
{
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_arrive(int id, int threads)
{
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

__device__ __forceinline__ void tma_load(unsigned dst, const fj_tensor_map &map, unsigned mbar, int c0,
                                         int c1, int c2, int c3)
{
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%3, %4, %5, %6}], [%2];\n" ::"r"(dst),
                 "l"((unsigned long long)&map), "r"(mbar), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
                 : "memory");
}
__device__ __forceinline__ void tma_store(const fj_tensor_map &map, unsigned src, int c0, int c1,
                                          int c2, int c3)
{
    asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];\n"
                 ::"l"((unsigned long long)&map), "r"(src), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
                 : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
/* Waits until the committed stores have read their shared memory. */
__device__ __forceinline__ void bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory"); }
/* Waits until they are complete. */
__device__ __forceinline__ void bulk_wait() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }
/* Shared memory written by ordinary stores that the copy engine reads next. */
__device__ __forceinline__ void fence_proxy_async()
{
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
__device__ __forceinline__ void prefetch_map(const fj_tensor_map &map)
{
    asm volatile("prefetch.tensormap [%0];\n" ::"l"((unsigned long long)&map) : "memory");
}

/* ---- wgmma for this tile shape ------------------------------------------------ */

namespace wg = fjwg;
FJ_WG_DEFINE_SS_OF(FJ_BLOCK_N)
FJ_WG_DEFINE_RS(16)
FJ_WG_DEFINE_RS(32)
FJ_WG_DEFINE_RS(64)
FJ_WG_DEFINE_RS(128)
FJ_WG_DEFINE_RS(192)
FJ_WG_DEFINE_RS(256)

template <int N>
__device__ __forceinline__ void rs(float *d, const unsigned (&a)[4], unsigned long long b)
{
    if constexpr (N == 16) rs_n16(d, a[0], a[1], a[2], a[3], b);
    else if constexpr (N == 32) rs_n32(d, a[0], a[1], a[2], a[3], b);
    else if constexpr (N == 64) rs_n64(d, a[0], a[1], a[2], a[3], b);
    else if constexpr (N == 128) rs_n128(d, a[0], a[1], a[2], a[3], b);
    else if constexpr (N == 192) rs_n192(d, a[0], a[1], a[2], a[3], b);
    else rs_n256(d, a[0], a[1], a[2], a[3], b);
}

/* The ss_n<FJ_BLOCK_N> defined above. */
#define FJ_SS_OF(n) ss_n##n
#define FJ_SS_OF_(n) FJ_SS_OF(n)
#define ss_tile FJ_SS_OF_(FJ_BLOCK_N)

/* Descriptors (wgmma.cuh's desc) built from their low word: the start
   address in 16-byte units, computed once per tile base (q16, k16, v16:
   shared address / 16), plus each k step's constant offset, so a step's
   descriptor is one add to a word already in a uniform register, where
   building it from the address costs a mask, shifts and ors per wgmma.
   Shared addresses are below 256 KiB: the 14-bit address field never
   carries into the leading offset's bits. */
__device__ __forceinline__ unsigned long long desc_of(unsigned addr16, unsigned lbo, unsigned sbo,
                                                      unsigned mode)
{
    return ((unsigned long long)((sbo >> 4) | (mode << 30)) << 32) | (addr16 + ((lbo >> 4) << 16));
}

/* The column block holding column col: its first column and width. */
__host__ __device__ constexpr int block_col0(int col)
{
    return col < COL32 ? col / 64 * 64 : (HAS32 && col < COL16 ? COL32 : COL16);
}
__host__ __device__ constexpr int block_width(int col)
{
    return col < COL32 ? 64 : (HAS32 && col < COL16 ? 32 : 16);
}
/* Which of the three widths (64, 32, 16): q16's index. */
__host__ __device__ constexpr int width_index(int width) { return width == 64 ? 0 : width == 32 ? 1 : 2; }

/* Q K^T for one key tile: A is this consumer's 64 rows of Q (q16[w]: their
   start in the column blocks of width index w), B the BN keys (k16: the K
   tile); k16 step kk reads 32 bytes into a row of its column block. Not
   committed. */
__device__ __forceinline__ void issue_scores(const unsigned (&q16)[3], unsigned k16, float *s)
{
#pragma unroll
    for (int kk = 0; kk < KQ; ++kk) {
        const int col = 16 * kk, col0 = block_col0(col), width = block_width(col);
        const unsigned mode = wg::swizzle_of(width * 2), sbo = 8u * width * 2;
        const unsigned in_row = (unsigned)(col - col0) * 2;
        const unsigned long long a =
            desc_of(q16[width_index(width)] + (block_offset(BM, col0) + in_row) / 16, 16u, sbo, mode);
        const unsigned long long b = desc_of(k16 + (block_offset(BN, col0) + in_row) / 16, 16u, sbo, mode);
        ss_tile(s, a, b, kk > 0);
    }
}

/* O += P V for one key tile (v16: the V tile): the C fragments of n tiles
   2kk, 2kk+1 of S are the A fragment of k step kk; B is 16 keys of V in
   each column block: one wgmma for the 64-wide blocks together (their
   stride is BN * 128 bytes), one for each narrower block. Not committed. */
__device__ __forceinline__ void issue_pv(unsigned v16, float *o, const unsigned (&pa)[KV][4])
{
#pragma unroll
    for (int kk = 0; kk < KV; ++kk) {
        if constexpr (NB64 > 0)
            rs<64 * NB64>(o, pa[kk], desc_of(v16 + (unsigned)kk * 16u * 128u / 16u, BN * 128u, 1024u,
                                             wg::SWIZZLE_128B));
        if constexpr (HAS32)
            rs<32>(o + COL32 / 2, pa[kk],
                   desc_of(v16 + (block_offset(BN, COL32) + (unsigned)kk * 16u * 64u) / 16u, BN * 64u,
                           512u, wg::SWIZZLE_64B));
        if constexpr (HAS16)
            rs<16>(o + COL16 / 2, pa[kk],
                   desc_of(v16 + (block_offset(BN, COL16) + (unsigned)kk * 16u * 32u) / 16u, BN * 32u,
                           256u, wg::SWIZZLE_32B));
    }
}

/* ---- the work tiles ----------------------------------------------------------- */

struct Tile {
    int m0, h, b;
    int q_rows;       /* rows below seqlen_q */
    int n_begin, n_end; /* the block's key tiles */
};

/* Work tile t of the schedule: sections of head_group (head, batch) pairs,
   in each the query tiles (the longest first under a causal mask), the
   pairs of a section side by side. */
__device__ __forceinline__ Tile tile_of(const fj_fwd_params &p, const fj_tma_params &t, int tile)
{
    const int pairs = p.heads_q * p.batch;
    const int per_section = t.m_blocks * t.head_group;
    const int section = tile / per_section;
    const int rest = tile - section * per_section;
    const int left = pairs - section * t.head_group;
    const int here = left < t.head_group ? left : t.head_group;
    const int mi = rest / here;
    const int hb = section * t.head_group + (rest - mi * here);
    Tile w;
    w.h = hb % p.heads_q;
    w.b = hb / p.heads_q;
#if FJ_CAUSAL
    w.m0 = (t.m_blocks - 1 - mi) * BM;
#else
    w.m0 = mi * BM;
#endif
    w.q_rows = p.seqlen_q - w.m0 < BM ? p.seqlen_q - w.m0 : BM;
    const KeyTiles kt = key_tiles(p, w.m0, w.q_rows, 0);
    w.n_begin = kt.n_begin;
    w.n_end = kt.n_end > kt.n_begin ? kt.n_end : kt.n_begin;
    return w;
}

/* The next work tile from the grid's counter, -1 once they are all taken. */
__device__ __forceinline__ int next_tile(const fj_tma_params &t)
{
    const int tile = atomicAdd(&t.tile_counter[0], 1);
    return tile < t.tiles ? tile : -1;
}

/* Called by each block's producer once it has drawn -1: the last block to
   get here has seen every other block's last draw, and puts the counter
   back to zero for the plan's next launch (ordered after this one on its
   stream). */
__device__ __forceinline__ void counter_done(const fj_tma_params &t)
{
    __threadfence();
    if (atomicAdd(&t.tile_counter[1], 1) == (int)gridDim.x - 1) {
        atomicExch(&t.tile_counter[0], 0);
        atomicExch(&t.tile_counter[1], 0);
    }
}

/* ---- the producer --------------------------------------------------------------- */

/* The copies of `rows` rows of a tile of tile_rows rows, from row
   row_in_tile on (every column block, one box each), into the tile at dst,
   from global row `row` of (head, batch), completing on mbar. */
__device__ __forceinline__ void load_rows(unsigned dst, int tile_rows, int row_in_tile,
                                          const fj_tensor_map (&maps)[3], unsigned mbar, int row,
                                          int head, int batch)
{
#pragma unroll
    for (int blk = 0; blk < NB64; ++blk)
        tma_load(dst + block_offset(tile_rows, 64 * blk) + (unsigned)(row_in_tile * 128), maps[0],
                 mbar, 64 * blk, row, head, batch);
    if constexpr (HAS32)
        tma_load(dst + block_offset(tile_rows, COL32) + (unsigned)(row_in_tile * 64), maps[1], mbar,
                 COL32, row, head, batch);
    if constexpr (HAS16)
        tma_load(dst + block_offset(tile_rows, COL16) + (unsigned)(row_in_tile * 32), maps[2], mbar,
                 COL16, row, head, batch);
}

__device__ __forceinline__ void produce(const fj_fwd_params &p, const fj_tma_params &t, unsigned base)
{
    /* the maps of the widths in use (the others are zero) */
    for (int i = 0; i < 3; ++i) {
        if ((i == 0 && NB64 == 0) || (i == 1 && !HAS32) || (i == 2 && !HAS16)) continue;
        prefetch_map(t.q[i]);
        prefetch_map(t.k[i]);
        prefetch_map(t.v[i]);
    }
    /* The whole warp runs the loop and one lane issues: the tile number
       then comes through a shuffle, so the compiler knows it is the same in
       the warp and keeps it and what derives from it in uniform registers
       (the producer has 24 vector registers). */
    const bool leader = (threadIdx.x & 31u) == 0;
    unsigned it = 0, q_uses = 0;
    int following = leader ? next_tile(t) : 0;
    for (;;) {
        /* each tile's number drawn one tile ahead, so the atomic's round
           trip hides behind a tile's copies */
        int tile = 0;
        if (leader) {
            tile = following;
            fj_st_shared_b32(tile_slot(base, q_uses), (unsigned)tile);
            if (tile >= 0) following = next_tile(t);
        }
        tile = __shfl_sync(0xffffffffu, tile, 0);
        if (tile < 0) break;
        const Tile w = tile_of(p, t, tile);
        const int hk = w.h / p.group;
        const int count = w.n_end - w.n_begin;
        /* Q after the first K tile, so that K can arrive while the
           consumers still finish the previous tile */
        for (int i = 0; i <= count; ++i) {
            if (i == 1 || count == 0) {
                mbar_wait(bar(base, BAR_Q_EMPTY), (q_uses & 1u) ^ 1u);
                if (leader) {
                    /* the arrival publishes the tile's number with Q */
                    mbar_expect_tx(bar(base, BAR_Q_FULL), (unsigned)(BM * D * 2));
#pragma unroll
                    for (int c = 0; c < CONSUMERS; ++c)
                        load_rows(base + SMEM_Q, BM, 64 * c, t.q, bar(base, BAR_Q_FULL),
                                  w.m0 + 64 * c, w.h, w.b);
                }
                ++q_uses;
            }
            if (i == count) break;
            const int n = w.n_end - 1 - i;
            const unsigned stage = it % STAGES, parity = ((it / STAGES) & 1u) ^ 1u;
            const unsigned k_dst = base + SMEM_K + stage * KV_BYTES;
            const unsigned v_dst = base + SMEM_V + stage * KV_BYTES;
            mbar_wait(bar(base, BAR_K_EMPTY + (int)stage), parity);
            if (leader) {
                mbar_expect_tx(bar(base, BAR_K_FULL + (int)stage), (unsigned)(BN * D * 2));
                load_rows(k_dst, BN, 0, t.k, bar(base, BAR_K_FULL + (int)stage), n * BN, hk, w.b);
            }
            mbar_wait(bar(base, BAR_V_EMPTY + (int)stage), parity);
            if (leader) {
                mbar_expect_tx(bar(base, BAR_V_FULL + (int)stage), (unsigned)(BN * D * 2));
                load_rows(v_dst, BN, 0, t.v, bar(base, BAR_V_FULL + (int)stage), n * BN, hk, w.b);
            }
            ++it;
        }
    }
    /* no more tiles: -1 (written above) in place of the number, the Q
       barrier's phase completed by a plain arrival once the consumers have
       released the last Q tile */
    mbar_wait(bar(base, BAR_Q_EMPTY), (q_uses & 1u) ^ 1u);
    if (leader) {
        counter_done(t);
        mbar_arrive(bar(base, BAR_Q_FULL), 1u);
    }
}


/* ---- the consumers: the softmax state ------------------------------------------- */

/* A consumer's running softmax state and output, per thread, in the shared
 * headers' fragment shape (softmax.cuh: one m tile of 16 rows per warp, rows
 * g and g + 8, g = lane / 4), which is wgmma m64nN's accumulator layout: the
 * wgmma wrappers take the arrays' storage as a flat run of floats. */
struct State {
    float m[1][2], l[1][2];
    float o[1][NDT][4];
    /* the rescale of O that the last softmax owes (its max moved): applied
       just before the next P V accumulates into O */
    float alpha[1][2];
    bool owed;
};

/* The flat views wgmma writes. */
__device__ __forceinline__ float *flat(float (&x)[1][NT][4]) { return &x[0][0][0]; }
__device__ __forceinline__ float *flat_o(State &st) { return &st.o[0][0][0]; }
template <int A, int B>
__device__ __forceinline__ void fence_regs(float (&x)[1][A][B])
{
    wg::fence_regs(*reinterpret_cast<float(*)[A * B]>(&x[0][0][0]));
}

/* ---- the consumers: the key loop ------------------------------------------------- */

/* What a consumer thread keeps across the tiles of its block. */
struct Consumer {
    unsigned base;     /* the shared layout */
    int c;             /* consumer index, 0..CONSUMERS-1 */
    unsigned q16[3];   /* this consumer's Q rows / 16 by column width (issue_scores) */
    unsigned k16, v16; /* stage 0's K and V tiles / 16 */
    int lane, warp;    /* warp within the consumer */
    unsigned it;       /* K/V tiles consumed (the pipeline's position) */
    unsigned q_uses;   /* Q tiles consumed */
    float scale;       /* |scale_log2|, or softcap_log2 when FJ_SOFTCAP */
    bool negate;       /* scale_log2 < 0: S is negated first (FJ_SOFTCAP: cap_k has the sign) */
    float cap_k;       /* FJ_SOFTCAP: scale / c (softcap_tanh_rational's k) */
    float alibi_slope, alibi_scale; /* FJ_ALIBI: the work tile's head's, and the signed scale */
};

/* The consumers take turns issuing GEMMs: consumer c waits on barrier 1 + c
   for its turn and hands it to the next (256 threads each: one consumer
   syncs, the other arrives). */
__device__ __forceinline__ void turn_begin(const Consumer &k)
{
    if (CONSUMERS > 1) named_sync(1 + k.c, 256);
}
__device__ __forceinline__ void turn_end(const Consumer &k)
{
    if (CONSUMERS > 1) named_arrive(1 + (k.c + 1) % CONSUMERS, 256);
}

/* One arrival per warp on an "empty" barrier (their count is 4 per
   consumer), after the warp's wgmma that read the buffer completed. */
__device__ __forceinline__ void release(const Consumer &k, int barrier)
{
    __syncwarp();
    if (k.lane == 0) mbar_arrive(bar(k.base, barrier), 1u);
}

__device__ __forceinline__ unsigned stage_of(unsigned it) { return it % STAGES; }
__device__ __forceinline__ unsigned parity_of(unsigned it) { return (it / STAGES) & 1u; }

/* P = exp2(S * scale - m) of key tile n's scores (the shared headers'
   mask and online softmax, fja::): S negated first for a negative scale
   (capped instead with a softcap, the sign riding on cap_k),
   masked when MASKED; the rescale of O deferred (alpha, returned: whether
   the max moved) while a wgmma still accumulates into O. Packed into pa
   unless `defer_pack` (then the caller packs once the wgmma reading pa is
   done). */
__device__ __forceinline__ void pack(float (&s)[1][NT][4], unsigned (&pa)[KV][4])
{
#pragma unroll
    for (int kk = 0; kk < KV; ++kk) fja::pack_p_step(s[0], kk, pa[kk]);
}

template <bool MASKED>
__device__ __forceinline__ bool scores_to_p(const fj_fwd_params &p, const Consumer &k, State &st,
                                            long long row0, int n, float (&s)[1][NT][4],
                                            unsigned (&pa)[KV][4], float (&alpha)[1][2],
                                            bool defer_pack)
{
    if constexpr (FJ_SOFTCAP) {
        fja::cap_scores_rational(s, k.cap_k); /* before the mask: its -inf stays */
    } else if (!FJ_ALIBI && k.negate) { /* ALiBi: the sign rides on alibi_scale */
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) s[0][nt][e] = -s[0][nt][e];
    }
    if constexpr (FJ_ALIBI)
        fja::alibi_scores(p, row0, n * BN + 2 * (k.lane & 3), k.alibi_slope, k.alibi_scale, s);
    if constexpr (MASKED) fja::mask_scores(p, row0, n * BN + 2 * (k.lane & 3), s);
    const bool rescale = fja::online_softmax_deferred<MASKED>(s, st.m, st.l, alpha, k.scale);
    if (!defer_pack) pack(s, pa);
    return rescale;
}
template <bool MASKED>
__device__ __forceinline__ void scores_to_p(const fj_fwd_params &p, const Consumer &k, State &st,
                                            long long row0, int n, float (&s)[1][NT][4],
                                            unsigned (&pa)[KV][4])
{
    float alpha[1][2];
    scores_to_p<MASKED>(p, k, st, row0, n, s, pa, alpha, false);
}

/* S of key tile n, waited for, masked, softmaxed, packed into pa (the first
   tile of a work tile: no P V to overlap yet). */
template <bool MASKED>
__device__ __forceinline__ void first_step(const fj_fwd_params &p, Consumer &k, State &st, long long row0,
                                           int n, bool last, unsigned (&pa)[KV][4])
{
    const unsigned stage = stage_of(k.it);
    float s[1][NT][4];
    mbar_wait(bar(k.base, BAR_K_FULL + (int)stage), parity_of(k.it));
    turn_begin(k);
    wg::fence();
    issue_scores(k.q16, k.k16 + stage * (KV_BYTES / 16), flat(s));
    wg::commit();
    turn_end(k);
    wg::wait<0>();
    fence_regs(s);
    release(k, BAR_K_EMPTY + (int)stage);
    if (last && O_SEPARATE) release(k, BAR_Q_EMPTY);
    scores_to_p<MASKED>(p, k, st, row0, n, s, pa); /* O is zero: nothing to rescale */
}

/* S of key tile n and O += P V of the tile before it (pa), issued in one
   turn, with O rescaled between the two (what the previous softmax owes)
   while S runs; then the softmax of S, and P of tile n packed into pa once
   P V has read it. */
template <bool MASKED>
__device__ __forceinline__ void next_step(const fj_fwd_params &p, Consumer &k, State &st, long long row0,
                                          int n, bool last, unsigned (&pa)[KV][4])
{
    const unsigned prev = stage_of(k.it), stage = stage_of(k.it + 1);
    float s[1][NT][4];
    mbar_wait(bar(k.base, BAR_K_FULL + (int)stage), parity_of(k.it + 1));
    mbar_wait(bar(k.base, BAR_V_FULL + (int)prev), parity_of(k.it));
    turn_begin(k);
    wg::fence();
    issue_scores(k.q16, k.k16 + stage * (KV_BYTES / 16), flat(s));
    wg::commit();
    if (st.owed) fja::rescale_o(st.o, st.alpha);
    fence_regs(st.o);
    wg::fence();
    issue_pv(k.v16 + prev * (KV_BYTES / 16), flat_o(st), pa);
    wg::commit();
    turn_end(k);
    wg::wait<1>();
    fence_regs(s);
    release(k, BAR_K_EMPTY + (int)stage);
    if (last && O_SEPARATE) release(k, BAR_Q_EMPTY);
    st.owed = scores_to_p<MASKED>(p, k, st, row0, n, s, pa, st.alpha, true);
    wg::wait<0>();
    fence_regs(st.o);
    release(k, BAR_V_EMPTY + (int)prev);
    pack(s, pa);
    ++k.it;
}

/* O += P V of the work tile's last key tile. */
__device__ __forceinline__ void last_pv(Consumer &k, State &st, const unsigned (&pa)[KV][4])
{
    const unsigned stage = stage_of(k.it);
    mbar_wait(bar(k.base, BAR_V_FULL + (int)stage), parity_of(k.it));
    turn_begin(k);
    if (st.owed) fja::rescale_o(st.o, st.alpha);
    fence_regs(st.o);
    wg::fence();
    issue_pv(k.v16 + stage * (KV_BYTES / 16), flat_o(st), pa);
    wg::commit();
    turn_end(k);
    wg::wait<0>();
    fence_regs(st.o);
    release(k, BAR_V_EMPTY + (int)stage);
    ++k.it;
}

/* ---- the consumers: the epilogue ------------------------------------------------- */

/* Byte address of the 4-byte pair at (row r, column col) of the consumer's
   64-row part of a staging tile (the layout TMA reads: column blocks, each
   swizzled by its row width). */
__device__ __forceinline__ unsigned stage_addr(unsigned tile, int c, int r, int col)
{
    const int col0 = block_col0(col), width = block_width(col);
    const int pitch = width * 2, chunks = pitch / 16;
    const int x = (col - col0) * 2; /* byte within the row */
    const int chunk = (x >> 4) ^ ((r * pitch >> 7) & (chunks - 1));
    return tile + block_offset(BM, col0) + (unsigned)((64 * c + r) * pitch + chunk * 16 + (x & 15));
}

/* O / l into the staging tile, then one TMA store per column block; lse. */
__device__ __forceinline__ void epilogue(const fj_fwd_params &p, const fj_tma_params &t, Consumer &k,
                                         const Tile &w, State &st)
{
    const int g = k.lane >> 2, tq = k.lane & 3;
    bool seen[1][2]; /* no split: the key loop went through every row's band */
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
        const int r = 64 * k.c + 16 * k.warp + 8 * hh + g;
        seen[0][hh] = r < w.q_rows && fja::row_sees_keys(p, (long long)w.m0 + r, 0, p.seqlen_k);
    }
    float inv[1][2], lse[1][2];
#if FJ_SINKS
    float sink[1][2];
#pragma unroll
    for (int hh = 0; hh < 2; ++hh)
        sink[0][hh] = fja::row_sink(p, w.h, (long long)w.m0 + 64 * k.c + 16 * k.warp + 8 * hh + g);
    fja::finish_rows_sink(st.m, st.l, seen, sink, inv, lse);
#else
    fja::finish_rows(st.m, st.l, seen, inv, lse);
#endif
    const bool leader = (threadIdx.x & 127u) == 0;
    const unsigned out = k.base + SMEM_O;
    if (O_SEPARATE) {
        /* the previous tile's store must have read the staging rows */
        if (leader) bulk_wait_read();
        named_sync(4 + k.c, 128);
    }
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
        const int r = 16 * k.warp + 8 * hh + g;
#pragma unroll
        for (int dt = 0; dt < NDT; ++dt)
            fj_st_shared_b32(stage_addr(out, k.c, r, 8 * dt + 2 * tq),
                             fj_pack2(fja::finished(st.o[0][dt][2 * hh], inv[0][hh]),
                                      fja::finished(st.o[0][dt][2 * hh + 1], inv[0][hh])));
    }
    fence_proxy_async();
    named_sync(4 + k.c, 128);
    if (leader) {
        const int row = w.m0 + 64 * k.c;
        const unsigned part = out;
#pragma unroll
        for (int blk = 0; blk < NB64; ++blk)
            tma_store(t.o[0], part + block_offset(BM, 64 * blk) + (unsigned)(64 * k.c * 128), 64 * blk,
                      row, w.h, w.b);
        if constexpr (HAS32)
            tma_store(t.o[1], part + block_offset(BM, COL32) + (unsigned)(64 * k.c * 64), COL32, row,
                      w.h, w.b);
        if constexpr (HAS16)
            tma_store(t.o[2], part + block_offset(BM, COL16) + (unsigned)(64 * k.c * 32), COL16, row,
                      w.h, w.b);
        bulk_commit();
        if (!O_SEPARATE) {
            /* O was staged in this consumer's Q rows: Q is free once read */
            bulk_wait_read();
            mbar_arrive(bar(k.base, BAR_Q_EMPTY), 4u);
        }
    }
    if (p.lse && tq == 0) {
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
            const int r = 64 * k.c + 16 * k.warp + 8 * hh + g;
            if (r < w.q_rows) p.lse[lse_index(p, w.b, w.h, (long long)w.m0 + r)] = lse[0][hh];
        }
    }
}

__device__ __forceinline__ void consume(const fj_fwd_params &p, const fj_tma_params &t, unsigned base, int c)
{
    Consumer k;
    k.base = base;
    k.c = c;
    for (int w = 0; w < 3; ++w) /* the consumer's rows start 64 c rows into each block */
        k.q16[w] = (base + SMEM_Q) / 16 + (unsigned)(64 * c * (64 >> w) * 2) / 16;
    k.k16 = (base + SMEM_K) / 16;
    k.v16 = (base + SMEM_V) / 16;
    k.lane = (int)(threadIdx.x & 31u);
    k.warp = (int)((threadIdx.x >> 5) & 3u);
    k.it = 0;
    k.q_uses = 0;
    k.scale = FJ_SOFTCAP ? p.softcap_log2 : fabsf(p.scale_log2);
    k.negate = p.scale_log2 < 0.f;
    k.cap_k = p.softcap_in * 0.34657359f; /* 2 log2(e) scale / c times ln(2) / 2 */
    if constexpr (FJ_ALIBI) { /* alibi_scores scales S; the softmax runs at scale 1 */
        k.alibi_scale = FJ_SOFTCAP ? k.scale : p.scale_log2;
        k.scale = 1.f;
    }
    /* the last consumer hands the first turn to the first */
    if (CONSUMERS > 1 && c == CONSUMERS - 1) named_arrive(1, 256);
    for (;;) {
        mbar_wait(bar(base, BAR_Q_FULL), k.q_uses & 1u);
        ++k.q_uses;
        /* the number the Q tile came with, the same in the warp; through a
           shuffle so the compiler knows */
        const int tile =
            __shfl_sync(0xffffffffu, (int)fj_ld_shared_b32(tile_slot(base, k.q_uses - 1)), 0);
        if (tile < 0) break;
        const Tile w = tile_of(p, t, tile);
        if constexpr (FJ_ALIBI) k.alibi_slope = -p.alibi_slopes[w.h] * FJ_LOG2E;
        State st;
        fja::softmax_init(st.m, st.l, st.o);
        st.owed = false;
        /* this consumer's rows' own unmasked key tiles */
        const long long row0 = (long long)w.m0 + 64 * c + 16 * k.warp + (k.lane >> 2);
        int u0, u1;
        {
            const int first = w.m0 + 64 * c;
            const int rows = w.q_rows - 64 * c < 64 ? (w.q_rows - 64 * c > 0 ? w.q_rows - 64 * c : 1) : 64;
            const KeyTiles own = key_tiles(p, first, rows, 0);
            KeyTiles clamp = own;
            clamp.n_begin = w.n_begin;
            clamp.n_end = w.n_end;
            clamp_unmasked(clamp, u0, u1);
        }
        const int count = w.n_end - w.n_begin;
        if (count > 0) {
            unsigned pa[KV][4];
            int n = w.n_end - 1;
            if (n >= u1 || n < u0) first_step<true>(p, k, st, row0, n, count == 1, pa);
            else first_step<false>(p, k, st, row0, n, count == 1, pa);
            for (--n; n >= w.n_begin; --n) {
                const bool last = n == w.n_begin;
                if (n >= u1 || n < u0) next_step<true>(p, k, st, row0, n, last, pa);
                else next_step<false>(p, k, st, row0, n, last, pa);
            }
            last_pv(k, st, pa);
        } else if (O_SEPARATE) {
            release(k, BAR_Q_EMPTY);
        }
        epilogue(p, t, k, w, st);
    }
    /* the first consumer takes the turn the last one handed on after its
       last GEMMs, so no arrival is left pending */
    if (CONSUMERS > 1 && c == 0) named_sync(1, 256);
    if ((threadIdx.x & 127u) == 0) bulk_wait();
}

} /* namespace fjt */

extern "C" __global__ void __launch_bounds__(fjt::THREADS, 1)
    fj_flash_tma(const __grid_constant__ fj_fwd_params p, const __grid_constant__ fj_tma_params t)
{
    using namespace fjt;
    const unsigned base = smem_base();
    /* through a shuffle, so the compiler knows it is the same in the warp:
       what derives from it (the consumer's descriptors) stays in uniform
       registers */
    const int wg_index = __shfl_sync(0xffffffffu, (int)(threadIdx.x >> 7), 0);
    if (threadIdx.x == 0) {
        mbar_init(bar(base, BAR_Q_FULL), 1u);
        mbar_init(bar(base, BAR_Q_EMPTY), 4u * CONSUMERS);
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(bar(base, BAR_K_FULL + s), 1u);
            mbar_init(bar(base, BAR_K_EMPTY + s), 4u * CONSUMERS);
            mbar_init(bar(base, BAR_V_FULL + s), 1u);
            mbar_init(bar(base, BAR_V_EMPTY + s), 4u * CONSUMERS);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    if (wg_index == 0) {
        if (CONSUMERS > 1) asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(PRODUCER_REGS));
        if (threadIdx.x < 32) produce(p, t, base);
    } else {
        if (CONSUMERS > 1) asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(CONSUMER_REGS));
        consume(p, t, base, wg_index - 1);
    }
}
