/* attention_rows.cuh: what the attention templates (flash_fwd.cu and
 * flash_wgmma.cu) share about a block's query rows: which batch, head, split
 * and query rows the block computes, the band of keys a row sees, the key
 * tiles the block works on and their order, and the row index of lse and of
 * the split-KV partials. Pasted after common.cuh for those templates only
 * (src/cuda/jit/codegen.c); it reads the descriptor macros directly, so it
 * means the same in either template. */
#ifndef FJ_ATTENTION_ROWS_CUH
#define FJ_ATTENTION_ROWS_CUH

#define FJ_THREADS (32 * FJ_WARPS)

/* ALiBi (FJ_ALIBI, mask.cuh's alibi_scores) and attention sinks (FJ_SINKS,
   finish_rows_sink; combine.cu after a split): only kernels with the
   feature define them, so plain kernels are the code they were. */
#ifndef FJ_ALIBI
#define FJ_ALIBI 0
#endif
#ifndef FJ_SINKS
#define FJ_SINKS 0
#endif
/* Variable-length batches (FJ_VARLEN 1) and the paged KV cache (FJ_PAGE_SIZE
 * keys per page, a multiple of 16; 0: dense K and V): only flash_fwd.cu and
 * combine.cu take them, and only their kernels define them (the generator
 * leaves both out of every other kernel's macro block). */
#ifndef FJ_VARLEN
#define FJ_VARLEN 0
#endif
#ifndef FJ_PAGE_SIZE
#define FJ_PAGE_SIZE 0
#endif
/* Each sequence has lengths of its own, read from device memory. */
#define FJ_SEQS (FJ_VARLEN || FJ_PAGE_SIZE)

namespace fja {

#if FJ_SEQS
/* One int of a length array, loaded where it is used (an empty asm around
   the load keeps the compiler from hoisting it and holding the value in a
   register across the key loop: a cached reload is cheaper than a spill). */
__device__ __forceinline__ int ld_len(const int *a, int i)
{
    int v;
    asm volatile("ld.global.nc.s32 %0, [%1];\n" : "=r"(v) : "l"(a + i));
    return v;
}

/* Sequence b of the batch: its first query row and key (rows of the packed
   q/o and k/v: varlen; else b, the index of the batch axis, and 0 with a
   paged cache, whose keys the block table places) and its lengths, each
   clamped to the plan's maxima and to the buffers (a length array that
   breaks the rules cannot move a block outside them; FLASHJIT_CHECK=1
   refuses it before launch). */
struct Seq {
    int q0, k0, sq, sk;
};
__device__ __forceinline__ int clamp_len(int n, int hi) { return n < 0 ? 0 : (n > hi ? hi : n); }
__device__ __forceinline__ Seq seq_of(const fj_fwd_params &p, int b)
{
    Seq s;
#if FJ_VARLEN
    {
        int q0 = ld_len(p.cu_seqlens_q, b);
        q0 = clamp_len(q0, p.total_q);
        s.q0 = q0;
        const int sq = ld_len(p.cu_seqlens_q, b + 1) - q0;
        s.sq = clamp_len(sq, p.seqlen_q < p.total_q - q0 ? p.seqlen_q : p.total_q - q0);
    }
#else
    s.q0 = b;
    s.sq = p.seqlen_q;
#endif
#if FJ_PAGE_SIZE
    s.k0 = 0;
    s.sk = clamp_len(ld_len(p.seqused_k, b), p.table_keys);
#else
    {
        int k0 = ld_len(p.cu_seqlens_k, b);
        k0 = clamp_len(k0, p.total_k);
        s.k0 = k0;
        const int sk = p.seqused_k ? ld_len(p.seqused_k, b) : ld_len(p.cu_seqlens_k, b + 1) - k0;
        s.sk = clamp_len(sk, p.seqlen_k < p.total_k - k0 ? p.seqlen_k : p.total_k - k0);
    }
#endif
    return s;
}

/* The block's sequence in static shared memory, for the key loop: there an
   ld.shared at a constant address costs one register, where a reload from
   the length arrays costs an address pair, the clamps and their
   temporaries at the loop's peak of live registers (ptxas spilled 8 bytes
   on some tiles). Thread 0 stores the values and a barrier publishes them
   before any thread reads one (seq_publish): stores of the same value from
   every thread would be right on the hardware but are a data race in CUDA's
   memory model, and compute-sanitizer's racecheck reports them. Volatile,
   so each use is a load (not a register held across the loop). */
__shared__ int fj_seq_smem[8]; /* q0, k0, sq, sk; the unmasked tiles u0, u1; n_begin */
enum : int { SEQ_U0 = 4, SEQ_U1 = 5, SEQ_N_BEGIN = 6 };
/* Publishes the block's sequence and its key-tile bounds; block-wide (a
   barrier), so every thread of the block calls it. */
__device__ __forceinline__ void seq_publish(const Seq &s, int n_begin, int u0, int u1)
{
    if (threadIdx.x == 0) {
        volatile int *m = fj_seq_smem;
        m[0] = s.q0;
        m[1] = s.k0;
        m[2] = s.sq;
        m[3] = s.sk;
        m[SEQ_U0] = u0;
        m[SEQ_U1] = u1;
        m[SEQ_N_BEGIN] = n_begin;
    }
    __syncthreads();
}
/* A loop bound kept in fj_seq_smem[i] (the unmasked key tiles, n_begin):
   each comparison loads it. Computed from the length arrays, these cannot
   be rematerialized from the parameters as a dense kernel's are, and ptxas
   spilled one across the first key loop (d40 decode split, sm_80). */
struct SharedBound {
    int i;
    __device__ __forceinline__ operator int() const { return ((const volatile int *)fj_seq_smem)[i]; }
};
__device__ __forceinline__ Seq seq_shared()
{
    const volatile int *m = fj_seq_smem;
    Seq s;
    s.q0 = m[0];
    s.k0 = m[1];
    s.sq = m[2];
    s.sk = m[3];
    return s;
}
#endif

/* What a query row's band of keys depends on: the key aligned with row 0
   and the keys there are: a sequence's (Band, FJ_SEQS), or the problem's,
   read from the parameters where they are used (the band functions below
   take either, so a dense kernel's code is the same as without Band). */
struct Band {
    long long diag;
    int sk;
};
__device__ __forceinline__ long long band_diag(const fj_fwd_params &p) { return p.diag_offset; }
__device__ __forceinline__ int band_keys(const fj_fwd_params &p) { return p.seqlen_k; }
__device__ __forceinline__ long long band_diag(const Band &b) { return b.diag; }
__device__ __forceinline__ int band_keys(const Band &b) { return b.sk; }
#if FJ_SEQS
__device__ __forceinline__ Band band_of(const fj_fwd_params &p, const Seq &s)
{
    Band r;
    r.sk = s.sk;
    r.diag = p.diag_per_seq ? (long long)(s.sk - s.sq) : p.diag_offset;
    return r;
}
#endif

/* The block's first query row: blockIdx.x's tile of FJ_BLOCK_M rows. */
__device__ __forceinline__ int block_m0()
{
#if FJ_CAUSAL
    /* the tiles with the most keys first, so the short ones fill the tail */
    return (int)(gridDim.x - 1 - blockIdx.x) * FJ_BLOCK_M;
#else
    return (int)blockIdx.x * FJ_BLOCK_M;
#endif
}
/* The batch of grid z index z (batch * num_splits + split with split-KV). */
__device__ __forceinline__ int block_batch(const fj_fwd_params &p, int z)
{
#if FJ_SPLIT_KV
    return z / p.num_splits;
#else
    (void)p;
    return z;
#endif
}

/* Where this block works: batch, head, split and first query row, and how
 * many of its FJ_BLOCK_M rows are below seqlen_q. opaque: derived from
 * blockIdx through an empty volatile asm, so that an epilogue's copies share
 * nothing with the prologue's: no value (or 64-bit widening of one) computed
 * before the key loop stays live across it, where ptxas would rather spill
 * such a value than keep it. */
struct Where {
    int b, h, split, m0, q_rows; /* FJ_SEQS: q_rows <= 0 for a block past its sequence */
#if FJ_SEQS
    Seq seq;
#endif
};
__device__ __forceinline__ Where where(const fj_fwd_params &p, bool opaque)
{
    int y = blockIdx.y, z = blockIdx.z;
    if (opaque) asm volatile("" : "+r"(y), "+r"(z));
    Where w;
    w.h = y;
    w.b = block_batch(p, z);
#if FJ_SPLIT_KV
    w.split = z - w.b * p.num_splits;
#else
    w.split = 0;
#endif
    int m0 = block_m0();
    if (opaque) asm volatile("" : "+r"(m0));
    w.m0 = m0;
#if FJ_SEQS
    w.seq = seq_of(p, w.b);
    w.q_rows = w.seq.sq - m0 < FJ_BLOCK_M ? w.seq.sq - m0 : FJ_BLOCK_M;
#else
    w.q_rows = p.seqlen_q - m0 < FJ_BLOCK_M ? p.seqlen_q - m0 : FJ_BLOCK_M; /* >= 1 */
#endif
    return w;
}

/* The band of keys [lo, hi) that query row i sees (the same rule as
 * fj_visible_keys in src/problem.h), clamped so 0 <= lo <= hi <= seqlen_k. */
template <class B>
__device__ __forceinline__ void row_band(const fj_fwd_params &p, const B &bd, long long i, int &lo,
                                         int &hi)
{
    const long long d = i + band_diag(bd);
    long long l = 0, h = band_keys(bd);
#if FJ_CAUSAL
    if (d + 1 < h) h = d + 1;
#endif
#if FJ_HAS_WINDOW
    if (p.window_right >= 0 && d + p.window_right + 1 < h) h = d + p.window_right + 1;
    if (p.window_left >= 0 && d - p.window_left > l) l = d - p.window_left;
#endif
    (void)d;
    (void)p;
    if (l > band_keys(bd)) l = band_keys(bd);
    if (h < l) h = l;
    lo = (int)l;
    hi = (int)h;
}
__device__ __forceinline__ void row_band(const fj_fwd_params &p, long long i, int &lo, int &hi)
{
    row_band(p, p, i, lo, hi);
}

/* Whether query row i sees a key in [key_lo, key_hi) (the keys its block,
 * or its split, goes through): finish_rows tells a row that sees none
 * (O = 0, lse = -inf) from one whose scores were not finite (NaN). */
template <class B>
__device__ __forceinline__ bool row_sees_keys(const fj_fwd_params &p, const B &bd, long long i,
                                              int key_lo, int key_hi)
{
    int lo, hi;
    row_band(p, bd, i, lo, hi);
    return (lo > key_lo ? lo : key_lo) < (hi < key_hi ? hi : key_hi);
}
__device__ __forceinline__ bool row_sees_keys(const fj_fwd_params &p, long long i, int key_lo,
                                              int key_hi)
{
    return row_sees_keys(p, p, i, key_lo, key_hi);
}

/* Output row index of the partial tensors (split-KV), and of lse. With
 * FJ_VARLEN the partials keep this dense layout (seqlen_q rows per
 * sequence, the plan's maximum) and lse is lse_out_index's. */
__device__ __forceinline__ long long lse_index(const fj_fwd_params &p, int b, int h, long long i)
{
    return ((long long)b * p.heads_q + h) * p.seqlen_q + i;
}
#if FJ_VARLEN
/* lse of row i of the sequence whose first row is q0: [heads_q, total_q]. */
__device__ __forceinline__ long long lse_out_index(const fj_fwd_params &p, int q0, int h,
                                                   long long i)
{
    return (long long)h * p.total_q + q0 + i;
}
#endif

/* The key tiles (FJ_BLOCK_N keys each) of the block whose q_rows rows start
 * at m0: [n_begin, n_end) may hold visible keys (with split-KV, split's
 * equal share of them, rounded up); [un_lo, un_hi), where it overlaps that,
 * are visible to every row of the block and skip masking (clamp_unmasked).
 * Bands only move right with the row, so the first and last rows bound
 * them. */
struct KeyTiles {
    int n_begin, n_end, un_lo, un_hi;
};
template <class B>
__device__ __forceinline__ KeyTiles key_tiles(const fj_fwd_params &p, const B &bd, int m0,
                                              int q_rows, int split)
{
    constexpr int BN = FJ_BLOCK_N;
    int lo_first, hi_first, lo_last, hi_last;
    row_band(p, bd, m0, lo_first, hi_first);
    row_band(p, bd, (long long)m0 + q_rows - 1, lo_last, hi_last);
    KeyTiles t;
    t.n_begin = lo_first / BN;
    t.n_end = hi_last > lo_first ? (hi_last + BN - 1) / BN : t.n_begin;
    t.un_lo = (lo_last + BN - 1) / BN;
    t.un_hi = hi_first / BN;
#if FJ_SPLIT_KV
    {
        const int tiles = t.n_end - t.n_begin;
        const int share = (tiles + p.num_splits - 1) / p.num_splits;
        const int first = t.n_begin + split * share;
        t.n_end = first + share < t.n_end ? first + share : t.n_end;
        t.n_begin = first;
    }
#else
    (void)split;
#endif
    return t;
}
__device__ __forceinline__ KeyTiles key_tiles(const fj_fwd_params &p, int m0, int q_rows, int split)
{
    return key_tiles(p, p, m0, q_rows, split);
}

/* What every key tile's iteration needs that does not change across tiles.
 * Few registers are spare (the O and S accumulators take most), so Ctx keeps
 * only what is used in every tile; whatever the loads and masks need besides
 * is recomputed from threadIdx, blockIdx and the parameters (constant
 * memory) where it is used. */
struct Ctx {
    float scale;  /* |scale_log2|, or softcap_log2 when FJ_SOFTCAP */
    float cap_in; /* FJ_SOFTCAP: |softcap_in| (Q negated for a negative scale) */
    int n_begin; /* the lowest key tile this block handles (tiles run downwards) */
    float alibi_slope, alibi_scale; /* FJ_ALIBI: alibi_scores's slope and scale */
};

/* The score modifiers' part of Ctx, once scale is set: with ALiBi
 * (FJ_ALIBI) the scores leave alibi_scores scaled, so the softmax runs at
 * scale 1 (a constant: its multiplies fold away) and alibi_scores takes the
 * scale. h is the user's query head unless the launch is GQA-packed
 * (p.pack_rows != 0), which only flash_fwd's ALiBi decode tiles see
 * (launch_view.h, fj_launch_view_takes): their alibi_tile then reads each
 * row's slope itself and ignores this one. Nothing without the feature. */
__device__ __forceinline__ void ctx_modifiers(const fj_fwd_params &p, int h, Ctx &c)
{
#if FJ_ALIBI
    c.alibi_slope = -p.alibi_slopes[h] * FJ_LOG2E;
    c.alibi_scale = c.scale;
    c.scale = 1.f;
#else
    (void)p;
    (void)h;
    (void)c;
#endif
}

/* The user's query head of row i of launch-view head h: GQA packing puts
 * pack_group heads' rows in one (fwd_params.h). */
__device__ __forceinline__ int user_head(const fj_fwd_params &p, int h, long long i)
{
    return p.pack_rows ? h * p.pack_group + (int)(i / p.pack_rows) : h;
}

/* Row i of head h's sink (FJ_SINKS), -inf for rows past seqlen_q (never
 * stored; their head may lie past heads_q when packed). */
__device__ __forceinline__ float row_sink(const fj_fwd_params &p, int h, long long i)
{
    return i < p.seqlen_q ? p.sinks[user_head(p, h, i)] : FJ_NEG_INF;
}

/* The unmasked tiles [u0, u1): [un_lo, un_hi) clamped into [n_begin,
   n_end). Kept out of key_tiles so that each kernel clamps next to the loop
   that uses it: done in key_tiles, ptxas schedules both kernels
   differently. */
__device__ __forceinline__ void clamp_unmasked(const KeyTiles &t, int &u0, int &u1)
{
    u0 = t.un_lo < t.n_begin ? t.n_begin : (t.un_lo > t.n_end ? t.n_end : t.un_lo);
    u1 = t.un_hi < u0 ? u0 : (t.un_hi > t.n_end ? t.n_end : t.un_hi);
}

/* A compile-time flag as a value (std::bool_constant without the header;
   an enum, so no global is emitted for it). */
template <bool B>
struct Flag {
    enum : bool { value = B };
};

/* Runs tile(Flag<MASKED>(), n, stage) for the key tiles n = n_end - 1 down
 * to n_begin, stage cycling through [0, STAGES) from 0: first the masked
 * tiles above u1 (the causal diagonal, the seqlen_k tail, a right window
 * edge), then the unmasked tiles [u0, u1), then (windows only) the masked
 * tiles below u0 (a left window edge). Three loops rather than one with a
 * branch: the unmasked one carries no masking state, which leaves registers
 * to the accumulators. */
template <int STAGES, class U, class Tile>
__device__ __forceinline__ void for_each_key_tile(const KeyTiles &t, U u0, U u1, Tile &&tile)
{
    int stage = 0, n = t.n_end - 1;
    for (; n >= u1; --n) {
        tile(Flag<true>(), n, stage);
        stage = stage + 1 == STAGES ? 0 : stage + 1;
    }
    for (; n >= u0; --n) {
        tile(Flag<false>(), n, stage);
        stage = stage + 1 == STAGES ? 0 : stage + 1;
    }
#if FJ_HAS_WINDOW
    for (; n >= t.n_begin; --n) {
        tile(Flag<true>(), n, stage);
        stage = stage + 1 == STAGES ? 0 : stage + 1;
    }
#endif
}

} /* namespace fja */

#endif
