/* flash_wgmma.cu: the attention forward kernel for sm_90 with warpgroup MMA
 * (wgmma.mma_async), rendered once per descriptor like flash_fwd.cu
 * (kernel_templates/README.md; fwd_params.h and common.cuh come first). It
 * computes the same function with the same launch contract, parameters and
 * outputs as flash_fwd.cu; what differs is who multiplies:
 *
 *   flash_fwd:   every warp, mma.sync m16n8k16 on fragments it loads itself
 *                with ldmatrix (on sm_90 at most about 2/3 of the tensor rate);
 *   flash_wgmma: every warpgroup (4 warps, 64 query rows), wgmma m64nNk16
 *                reading Q and K (S = Q K^T) and V (O += P V) straight from
 *                shared memory through matrix descriptors, P from registers.
 *
 * Needs sm_90a (NVRTC --gpu-architecture=sm_90a): wgmma exists on sm_90 only.
 *
 * Rules (src/kernel_desc.c checks them): head dim a multiple of 64 up to 256
 * (a row is whole 128-byte swizzle atoms); FJ_BLOCK_M = 64 per warpgroup;
 * FJ_BLOCK_N 64 or 128; FJ_STAGES 2..4.
 *
 * Shared memory (base rounded up to 1024 bytes, the swizzle atom; the host
 * reserves FJ_SMEM_BYTES including that slack): the Q tile, FJ_STAGES K tiles,
 * FJ_STAGES V tiles. A tile of R rows is stored as D/64 column blocks of
 * R x 64 elements; in a block, row r is 128 bytes at r * 128 and its 16-byte
 * chunk c sits at chunk position c ^ (r % 8): the 128-byte swizzle that the
 * descriptors name (mode 1), and that keeps the 8 rows of each core matrix in
 * distinct banks. Q and K are "K-major" operands (S's reduction dimension is
 * the head dim, contiguous); V is the "MN-major" B of O += P V (its rows are
 * keys, the reduction dimension), read with the transpose flag.
 *
 * Work: warp w owns query rows 16w..16w+15 of the block, and the wgmma
 * accumulator layout gives each warp exactly the fragments mma.sync's C
 * layout would (row g / g+8, columns 2t, 2t+1 of every n8 tile), so the
 * masking and online softmax are those of flash_fwd, per warp. A key tile,
 * with FJ_STAGES 2:
 *
 *   wait for its cp.async group, fence the async proxy, barrier, issue the
 *   copies of the tile STAGES-1 ahead; S = Q K^T (D/16 wgmma, one group);
 *   mask, softmax, P packed in registers; O += P V (BN/16 wgmma, one group).
 *
 * With FJ_STAGES >= 3 the key loop is pipelined (pipelined_step): S of a
 * tile and P V of the tile before it are issued together, and the softmax
 * of the one runs while the tensor cores multiply the other.
 */

#if FJ_DTYPE_BF16
#define FJ_WGMMA_AB "bf16.bf16"
#else
#define FJ_WGMMA_AB "f16.f16"
#endif

namespace fjw {

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
using fja::online_softmax_deferred;
using fja::rescale_o;
using fja::pack_p_step;
using fja::mask_scores; /* mask.cuh */
using fja::store_empty; /* tile_io.cuh */
using fja::store_output;
using fja::q_tile_src;
using fja::kv_tile_src;
using fja::KvTileSrc;

constexpr int D = FJ_HEAD_DIM;
constexpr int BM = FJ_BLOCK_M;
constexpr int BN = FJ_BLOCK_N;
constexpr int STAGES = FJ_STAGES;
constexpr int THREADS = FJ_THREADS;
constexpr int DCH = D / 8;  /* 16-byte chunks of a row */
constexpr int MT = 1;       /* 16-row m tiles per warp */
constexpr int NT = BN / 8;  /* n8 tiles of S per warp */
constexpr int NDT = D / 8;  /* n8 tiles of O per warp */
constexpr int KQ = D / 16;  /* k16 steps of Q K^T */
constexpr int KV = BN / 16; /* k16 steps of P V */

static_assert(D % 64 == 0 && D >= 64 && D <= 256, "FJ_HEAD_DIM must be 64, 128, 192 or 256");
static_assert(FJ_WARPS % 4 == 0 && BM == 16 * FJ_WARPS,
              "one warpgroup (4 warps) per 64 query rows");
static_assert(BN == 64 || BN == 128, "FJ_BLOCK_N must be 64 or 128");
static_assert(STAGES >= 2, "FJ_STAGES must be >= 2");

constexpr int ATOM = 1024; /* 8 rows x 128 bytes: the swizzle repeats every 1024 bytes */
constexpr int TILE_Q = BM * D * 2;
constexpr int TILE_KV = BN * D * 2;
constexpr int SMEM_Q = 0;
constexpr int SMEM_K = TILE_Q;
constexpr int SMEM_V = SMEM_K + STAGES * TILE_KV;
constexpr int SMEM_USED = SMEM_V + STAGES * TILE_KV;
static_assert(SMEM_USED + ATOM == FJ_SMEM_BYTES, "shared layout disagrees with FJ_SMEM_BYTES");

extern __shared__ __align__(128) unsigned char fj_smem[];
/* The shared-window address of the layout's start: rounded up to an atom. */
__device__ __forceinline__ unsigned smem_base()
{
    return (fj_smem_u32(fj_smem) + (ATOM - 1)) & ~(unsigned)(ATOM - 1);
}

/* Byte address of chunk c (elements 8c..8c+7) of row r in a tile of ROWS rows. */
template <int ROWS>
__device__ __forceinline__ unsigned chunk_addr(unsigned tile, int r, int c)
{
    return tile + (unsigned)((c >> 3) * (ROWS * 128) + r * 128 + (((c & 7) ^ (r & 7)) << 4));
}

/* ---- wgmma ------------------------------------------------------------------- */

/* A shared-memory matrix descriptor (PTX ISA, "matrix descriptor"): start
 * address, leading and stride byte offsets, all in 16-byte units, and the
 * swizzle mode in bits 62-63 (1: 128 bytes). For the K-major Q and K tiles
 * the stride offset is the 1024 bytes between 8-row groups and the leading
 * offset is unused; for the MN-major V tile the leading offset is the
 * distance between its 64-column blocks. */
__device__ __forceinline__ unsigned long long make_desc(unsigned addr, unsigned lbo, unsigned sbo)
{
    return (unsigned long long)((addr & 0x3ffffu) >> 4) |
           ((unsigned long long)(lbo >> 4) << 16) | ((unsigned long long)(sbo >> 4) << 32) |
           (1ull << 62);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit()
{
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void wgmma_wait()
{
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
/* Ties each accumulator register to this point of the program, so that the
   compiler neither reads an accumulator before the wgmma_wait that completes
   it nor moves a write (a rescale) past the wgmma that consumes it. */
template <int NTILES>
__device__ __forceinline__ void fence_regs(float (&r)[NTILES][4])
{
#pragma unroll
    for (int i = 0; i < NTILES; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(r[i][e])::"memory");
}
/* cp.async writes shared memory through the generic proxy, wgmma reads it
   through the async proxy: this orders the first before the second (with
   the barrier that follows it, for other threads' copies). */
__device__ __forceinline__ void fence_proxy_async()
{
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

/* D (+)= A B for one k16 step, m64 rows per warpgroup; the accumulator
 * fragment of m64nN is N/2 floats per thread: the warp's mma.sync C
 * fragments of N/8 n8 tiles, 4 floats each, in order (d[j] here). _ss: A
 * from a descriptor (K-major), B from a descriptor (K-major); _rs: A from
 * registers (the mma.sync A fragment of the warp's 16 rows), B MN-major
 * (transposed).
 * An asm operand list cannot come from a loop, so the preprocessor pastes
 * the accumulators' constraints and their %names, 16 at a time. */
#define FJ_ACC4(d, j) "+f"(d[j][0]), "+f"(d[j][1]), "+f"(d[j][2]), "+f"(d[j][3])
#define FJ_ACC16(d, i) \
    FJ_ACC4(d, (i) / 4 + 0), FJ_ACC4(d, (i) / 4 + 1), FJ_ACC4(d, (i) / 4 + 2), \
    FJ_ACC4(d, (i) / 4 + 3)
#define FJ_ACC32(d) FJ_ACC16(d, 0), FJ_ACC16(d, 16)
#define FJ_ACC64(d) FJ_ACC32(d), FJ_ACC16(d, 32), FJ_ACC16(d, 48)
#define FJ_ACC96(d) FJ_ACC64(d), FJ_ACC16(d, 64), FJ_ACC16(d, 80)
#define FJ_ACC128(d) FJ_ACC96(d), FJ_ACC16(d, 96), FJ_ACC16(d, 112)
#define FJ_NAMES16_0 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
#define FJ_NAMES16_1 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define FJ_NAMES16_2 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47"
#define FJ_NAMES16_3 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define FJ_NAMES16_4 "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79"
#define FJ_NAMES16_5 "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
#define FJ_NAMES16_6 "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111"
#define FJ_NAMES16_7 "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define FJ_NAMES32 FJ_NAMES16_0 ", " FJ_NAMES16_1
#define FJ_NAMES64 FJ_NAMES32 ", " FJ_NAMES16_2 ", " FJ_NAMES16_3
#define FJ_NAMES96 FJ_NAMES64 ", " FJ_NAMES16_4 ", " FJ_NAMES16_5
#define FJ_NAMES128 FJ_NAMES96 ", " FJ_NAMES16_6 ", " FJ_NAMES16_7

/* wgmma_ss_n<N>(d, a_desc, b_desc, accumulate): operands %0..%R-1 the R =
   N/2 accumulators, then a (%A), b (%B), accumulate (%P: scale-d 0
   overwrites d). */
#define FJ_DEFINE_WGMMA_SS(N, R, A, B, P)                                                     \
    __device__ __forceinline__ void wgmma_ss_n##N(float (&d)[R / 4][4], unsigned long long a, \
                                                  unsigned long long b, int accumulate)      \
    {                                                                                        \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #P ", 0;\n"                       \
                     "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." FJ_WGMMA_AB " "       \
                     "{" FJ_NAMES##R "}, %" #A ", %" #B ", p, 1, 1, 0, 0;\n}\n"             \
                     : FJ_ACC##R(d)                                                          \
                     : "l"(a), "l"(b), "r"(accumulate));                                     \
    }
/* wgmma_rs_n<N>(d, a_frag, b_desc): d += A B; the accumulators, then the
   four A registers (%A0..%A3), b (%B) and the constant 1 (%P). */
#define FJ_DEFINE_WGMMA_RS(N, R, A0, A1, A2, A3, B, P)                                        \
    __device__ __forceinline__ void wgmma_rs_n##N(float (&d)[R / 4][4], const unsigned (&a)[4], \
                                                  unsigned long long b)                      \
    {                                                                                        \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #P ", 0;\n"                       \
                     "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." FJ_WGMMA_AB " "       \
                     "{" FJ_NAMES##R "}, {%" #A0 ", %" #A1 ", %" #A2 ", %" #A3 "}, %" #B     \
                     ", p, 1, 1, 1;\n}\n"                                                    \
                     : FJ_ACC##R(d)                                                          \
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));         \
    }

FJ_DEFINE_WGMMA_SS(64, 32, 32, 33, 34)
FJ_DEFINE_WGMMA_SS(128, 64, 64, 65, 66)
FJ_DEFINE_WGMMA_RS(64, 32, 32, 33, 34, 35, 36, 37)
FJ_DEFINE_WGMMA_RS(128, 64, 64, 65, 66, 67, 68, 69)
FJ_DEFINE_WGMMA_RS(192, 96, 96, 97, 98, 99, 100, 101)
FJ_DEFINE_WGMMA_RS(256, 128, 128, 129, 130, 131, 132, 133)

template <int N>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 8][4], unsigned long long a,
                                         unsigned long long b, int accumulate)
{
    if constexpr (N == 64) wgmma_ss_n64(d, a, b, accumulate);
    else wgmma_ss_n128(d, a, b, accumulate);
}
template <int N>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 8][4], const unsigned (&a)[4],
                                         unsigned long long b)
{
    if constexpr (N == 64) wgmma_rs_n64(d, a, b);
    else if constexpr (N == 128) wgmma_rs_n128(d, a, b);
    else if constexpr (N == 192) wgmma_rs_n192(d, a, b);
    else wgmma_rs_n256(d, a, b);
}

/* ---- loads ------------------------------------------------------------------- */

/* cp.async copies of a tile of ROWS rows: row r from g_row0 + r * row_stride
 * when r < rows_valid, else 16 zero bytes per chunk (source clamped to row 0). */
template <int ROWS>
__device__ __forceinline__ void load_tile(unsigned tile, const fj_elem *g_row0, long long row_stride,
                                          int rows_valid, int tid)
{
    /* Laundered (as in flash_fwd's load_tile): otherwise the per-chunk
       offsets, the same for every tile, are hoisted out of the key loop and
       held in registers the accumulators need. */
    asm volatile("" : "+l"(row_stride), "+r"(tid));
    constexpr int CHUNKS = ROWS * DCH;
    constexpr int ITERS = (CHUNKS + THREADS - 1) / THREADS;
#pragma unroll
    for (int it = 0; it < ITERS; ++it) {
        const int idx = it * THREADS + tid;
        if (CHUNKS % THREADS == 0 || idx < CHUNKS) {
            const int r = idx / DCH, c = idx % DCH;
            const bool ok = r < rows_valid;
            const fj_elem *src = g_row0 + (ok ? (long long)r * row_stride : 0ll) + c * 8;
            fj_cp_async_16(chunk_addr<ROWS>(tile, r, c), src, ok ? 16u : 0u);
        }
    }
}

/* Flips the sign of the Q chunks this thread copied (load_tile<BM>'s): a
 * negative scale becomes a positive one on -Q, exactly. */
__device__ __forceinline__ void negate_q_chunks(unsigned s_q, int tid)
{
    constexpr int CHUNKS = BM * DCH;
#pragma unroll
    for (int it = 0; it < (CHUNKS + THREADS - 1) / THREADS; ++it) {
        const int idx = it * THREADS + tid;
        if (CHUNKS % THREADS == 0 || idx < CHUNKS) {
            const unsigned a = chunk_addr<BM>(s_q, idx / DCH, idx % DCH);
            unsigned v[4];
            fj_ld_shared_v4(a, v);
#pragma unroll
            for (int j = 0; j < 4; ++j) v[j] ^= 0x80008000u;
            fj_st_shared_v4(a, v);
        }
    }
}

/* Copies of key tile n (K and V) into pipeline buffer `buf`. */
__device__ __forceinline__ void load_kv(const fj_fwd_params &p, int n, int buf)
{
    const int tid = threadIdx.x;
    const int b = block_batch(p, (int)blockIdx.z), hk = (int)blockIdx.y / p.group;
    const KvTileSrc src = kv_tile_src(p, b, hk, n);
    const fj_elem *k_rows = src.k, *v_rows = src.v;
    const int rows = src.rows;
    load_tile<BN>(smem_base() + (unsigned)(SMEM_K + buf * TILE_KV), k_rows, p.k_stride[1], rows, tid);
    load_tile<BN>(smem_base() + (unsigned)(SMEM_V + buf * TILE_KV), v_rows, p.v_stride[1], rows, tid);
}

/* ---- the key loop ------------------------------------------------------------- */

struct State {
    float o[MT][NDT][4]; /* O accumulator, mma C layout (rows g, g+8) */
    float m[MT][2];      /* running row max of the scaled scores (log2 domain), rows g, g+8 */
    float l[MT][2];      /* running row sum of exp2, this thread's columns only */
};

/* The query row of this thread's score element (mt 0, hh 0): warp w holds
   rows 16w..16w+15. */
__device__ __forceinline__ long long fragment_row0(int tid)
{
    return (long long)block_m0() + (tid >> 5) * 16 + ((tid & 31) >> 2);
}

/* Hides the scores of keys outside each row's band (and past seqlen_k) in
 * the BN keys from n0 (mask.cuh). */
__device__ __forceinline__ void mask_tile(const fj_fwd_params &p, int n0, float (&s)[MT][NT][4])
{
    const int tid = threadIdx.x;
    mask_scores(p, fragment_row0(tid), n0 + 2 * (tid & 3), s);
}

/* ALiBi's bias on the BN keys from n0, scaling S (mask.cuh). */
__device__ __forceinline__ void alibi_tile(const fj_fwd_params &p, const Ctx &c, int n0,
                                           float (&s)[MT][NT][4])
{
    const int tid = threadIdx.x;
    fja::alibi_scores(p, fragment_row0(tid), n0 + 2 * (tid & 3), c.alibi_slope, c.alibi_scale, s);
}

/* Issues S = Q K^T of the key tile in buffer `stage` (not committed): A is
   the warpgroup's 64 rows of Q, B the BN keys; a k16 step is 32 bytes into a
   128-byte swizzled row, every 4 steps the next column block. */
__device__ __forceinline__ void issue_scores(unsigned base, int stage, float (&s)[MT][NT][4])
{
    const unsigned q0 = base + SMEM_Q + (threadIdx.x >> 7) * 64u * 128u;
    const unsigned k0 = base + SMEM_K + (unsigned)(stage * TILE_KV);
#pragma unroll
    for (int kk = 0; kk < KQ; ++kk) {
        const unsigned long long a =
            make_desc(q0 + (unsigned)((kk >> 2) * (BM * 128) + (kk & 3) * 32), 16u, 1024u);
        const unsigned long long b =
            make_desc(k0 + (unsigned)((kk >> 2) * (BN * 128) + (kk & 3) * 32), 16u, 1024u);
        wgmma_ss<BN>(s[0], a, b, kk > 0);
    }
}

/* Issues O += P V of the key tile in buffer `stage` (not committed): the C
   fragments of n tiles 2kk, 2kk+1 of S are the A fragment of k step kk (as
   in flash_fwd's pv_tile); B is 16 keys of V, 2048 bytes per step, its D
   columns in D/64 blocks BN * 128 bytes apart. */
__device__ __forceinline__ void issue_pv(unsigned base, int stage, State &st,
                                         const unsigned (&pa)[KV][4])
{
    const unsigned v0 = base + SMEM_V + (unsigned)(stage * TILE_KV);
#pragma unroll
    for (int kk = 0; kk < KV; ++kk)
        wgmma_rs<D>(st.o[0], pa[kk], make_desc(v0 + (unsigned)(kk * 2048), BN * 128u, 1024u));
}

/* O += P V of the tile in buffer `stage`, waited for: the accumulator fence
   before (a rescale must land first) and after (O is read next). */
__device__ __forceinline__ void pv_and_wait(int stage, State &st, const unsigned (&pa)[KV][4])
{
    fence_regs(st.o[0]);
    wgmma_fence();
    issue_pv(smem_base(), stage, st, pa);
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(st.o[0]);
}

__device__ __forceinline__ void pack_p(const float (&s)[MT][NT][4], unsigned (&pa)[KV][4])
{
#pragma unroll
    for (int kk = 0; kk < KV; ++kk) pack_p_step(s[0], kk, pa[kk]);
}

/* Scores, mask and softmax of key tile n in buffer `stage`, waited for. */
template <bool MASKED>
__device__ __forceinline__ void scores_softmax(const fj_fwd_params &p, const Ctx &c, State &st,
                                               int n, int stage, unsigned (&pa)[KV][4])
{
    float s[MT][NT][4];
    wgmma_fence();
    issue_scores(smem_base(), stage, s);
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(s[0]);
    if constexpr (FJ_SOFTCAP) fja::cap_scores(s, c.cap_in);
    if constexpr (FJ_ALIBI) alibi_tile(p, c, n * BN, s);
    if constexpr (MASKED) mask_tile(p, n * BN, s);
    /* no wgmma writes O here; the deferred form keeps this path's order
       (O rescaled after P is computed) */
    float alpha[MT][2];
    if (online_softmax_deferred<MASKED>(s, st.m, st.l, alpha, c.scale)) rescale_o(st.o, alpha);
    pack_p(s, pa);
}

#if FJ_STAGES == 2
/* Two buffers: one key tile at a time (the pipeline of flash_fwd's
 * tile_iteration: groups Q, T_0, T_1, ...; T_j waits until STAGES-2 groups
 * remain, then the barrier frees T_j-1's buffer for T_j+STAGES-1):
 * S, softmax, then O += P V, each waited for, so the tensor cores idle while
 * the warpgroup computes the softmax unless the other warpgroup multiplies. */
template <bool MASKED>
__device__ __forceinline__ void tile_iteration(const fj_fwd_params &p, const Ctx &c, State &st,
                                               int n, int stage)
{
    fj_cp_async_wait<STAGES - 2>();
    fence_proxy_async();
    __syncthreads();
    {
        const int nn = n - (STAGES - 1);
        if (nn >= c.n_begin) load_kv(p, nn, stage == 0 ? STAGES - 1 : stage - 1);
        fj_cp_async_commit();
    }
    unsigned pa[KV][4];
    scores_softmax<MASKED>(p, c, st, n, stage, pa);
    pv_and_wait(stage, st, pa);
}
#else
/* Three or more buffers: the softmax of tile n overlaps O += P V of tile
 * n+1 (FlashAttention-3's intra-warpgroup pipelining). Step n issues S of
 * tile n and then P V of the previous tile (pa, computed with the old max),
 * waits for S only, masks it and takes its softmax while P V runs, then waits
 * for P V before O may be rescaled and pa overwritten. Tile n+1's buffer is
 * busy until then, so the copies in flight are those of the STAGES-2 tiles
 * after n: step n waits until STAGES-3 groups remain (tile n has landed)
 * and issues tile n-(STAGES-2) into the buffer tile n+2 used. */
template <bool MASKED>
__device__ __forceinline__ void pipelined_step(const fj_fwd_params &p, const Ctx &c, State &st,
                                               int n, int stage, int prev_stage,
                                               unsigned (&pa)[KV][4])
{
    fj_cp_async_wait<STAGES - 3>();
    fence_proxy_async();
    __syncthreads();
    {
        const int nn = n - (STAGES - 2);
        const int buf = prev_stage == 0 ? STAGES - 1 : prev_stage - 1;
        if (nn >= c.n_begin) load_kv(p, nn, buf);
        fj_cp_async_commit();
    }
    const unsigned base = smem_base();
    float s[MT][NT][4];
    fence_regs(st.o[0]);
    wgmma_fence();
    issue_scores(base, stage, s);
    wgmma_commit();
    issue_pv(base, prev_stage, st, pa);
    wgmma_commit();
    wgmma_wait<1>();
    fence_regs(s[0]);
    if constexpr (FJ_SOFTCAP) fja::cap_scores(s, c.cap_in);
    if constexpr (FJ_ALIBI) alibi_tile(p, c, n * BN, s);
    if constexpr (MASKED) mask_tile(p, n * BN, s);
    float alpha[MT][2];
    const bool rescale = online_softmax_deferred<MASKED>(s, st.m, st.l, alpha, c.scale);
    wgmma_wait<0>();
    fence_regs(st.o[0]);
    if (rescale) rescale_o(st.o, alpha);
    pack_p(s, pa);
}
#endif

/* ---- epilogue ------------------------------------------------------------------ */

/* The rows of the Q tile where the epilogue stages O (tile_io.cuh): the
 * warp's own 16 rows, in Q's swizzled layout. Every warpgroup's last wgmma
 * read Q: the barrier keeps a fast warp from overwriting rows a slower warp
 * of its warpgroup still multiplies with. */
struct QStaging {
    unsigned base;
    __device__ __forceinline__ unsigned pair(int r, int dt, int tq) const
    {
        return chunk_addr<BM>(base, r, dt) + (unsigned)(tq * 4);
    }
    __device__ __forceinline__ unsigned chunk(int r, int ch) const
    {
        return chunk_addr<BM>(base, r, ch);
    }
    __device__ __forceinline__ void claim() const { __syncthreads(); }
};

/* Full row sums, O / l and lse, written for rows < seqlen_q. */
__device__ __forceinline__ void epilogue(const fj_fwd_params &p, const State &st)
{
    const Where wh = where(p, false);
    const int lane = (int)(threadIdx.x & 31u), warp = (int)(threadIdx.x >> 5);
    store_output(p, wh, warp, lane, st.m, st.l, st.o, QStaging{smem_base() + SMEM_Q});
}

} /* namespace fjw */

extern "C" __global__ void __launch_bounds__(FJ_THREADS) fj_flash_fwd(const fj_fwd_params p)
{
    using namespace fjw;

    const int tid = threadIdx.x;
    const Where wh = where(p, false);
    const int b = wh.b, h = wh.h, split = wh.split, m0 = wh.m0, q_rows = wh.q_rows;

    /* Key tiles [n_begin, n_end); [u0, u1) skip masking (attention_rows.cuh). */
    const KeyTiles kt = key_tiles(p, m0, q_rows, split);
    const int n_begin = kt.n_begin, n_end = kt.n_end;
    if (n_begin >= n_end) {
        store_empty(p, b, h, split, m0, tid);
        return;
    }

    const unsigned s_q = smem_base() + SMEM_Q;
    Ctx c;
    c.n_begin = n_begin;
    c.scale = FJ_SOFTCAP ? p.softcap_log2 : fabsf(p.scale_log2);
    c.cap_in = fabsf(p.softcap_in);
    fja::ctx_modifiers(p, h, c);

    /* Prologue: Q, then T_0 .. T_STAGES-2, one group each. */
    {
        load_tile<BM>(s_q, q_tile_src(p, wh), p.q_stride[1], q_rows, tid);
        fj_cp_async_commit();
#pragma unroll
        for (int s = 0; s < STAGES - 1; ++s) {
            const int n = n_end - 1 - s;
            if (n >= n_begin) load_kv(p, n, s);
            fj_cp_async_commit();
        }
    }
    fj_cp_async_wait<STAGES - 1>();
    if (p.scale_log2 < 0.f) negate_q_chunks(s_q, tid);
    /* (the first tile's fence and barrier publish Q to every warpgroup) */

    State st;
    softmax_init(st.m, st.l, st.o);

    int u0, u1;
    clamp_unmasked(kt, u0, u1);
#if FJ_STAGES == 2
    for_each_key_tile<STAGES>(kt, u0, u1, [&](auto masked, int n, int stage) {
        tile_iteration<decltype(masked)::value>(p, c, st, n, stage);
    });
#else
    {
        /* Tiles n_end-1 down to n_begin; the one in buffer k % STAGES is the
           k-th. The first one's scores stand alone (its copies are waited
           for with the rest of the prologue's still in flight). */
        unsigned pa[KV][4];
        int n = n_end - 1, stage = 0;
        fj_cp_async_wait<STAGES - 2>();
        fence_proxy_async();
        __syncthreads();
        if (n >= u1 || n < u0) scores_softmax<true>(p, c, st, n, stage, pa);
        else scores_softmax<false>(p, c, st, n, stage, pa);
        for (--n; n >= n_begin; --n) {
            const int prev = stage;
            stage = stage + 1 == STAGES ? 0 : stage + 1;
            if (n >= u1 || n < u0) pipelined_step<true>(p, c, st, n, stage, prev, pa);
            else pipelined_step<false>(p, c, st, n, stage, prev, pa);
        }
        pv_and_wait(stage, st, pa);
    }
#endif
    fj_cp_async_wait<0>();
#if FJ_SPLIT_KV
    fj_allow_dependent_launch();
#endif
    epilogue(p, st);
}
