/* bf16 prefill on AMX tiles (prefill_amx.h).
 *
 * A task is TASK_BLOCKS consecutive blocks of PREFILL_ROWS query rows of
 * one (batch, kv head): the rows of a kv head are every query position p
 * and every query head h of its GQA group, row p * group + h (as in
 * decode.c), so one key serves every head of the group. Each block of keys
 * is taken by the task's blocks of rows one after the other while it is in
 * L2 (at s4096 d128 K and V of a kv head, 2 MiB, no longer fit L2 beside
 * the scores: 8-10% faster than one block of rows per task where
 * measured). A block's rows are copied once into a buffer
 * of bf16 rows zero-padded to a multiple of 32 columns, which the tile
 * loads read as A tiles (16 rows x 32 columns). K and V are packed once
 * per call, before the blocks, for every (batch, kv head):
 *     K: B tiles of 16 keys x 32 columns as column pairs (B[p][n] = columns
 *        2p, 2p + 1 of key n), the pairs of 16 keys transposed in registers;
 *     V: decode_amx.c's pack_values (B[p][n] = keys 2p, 2p + 1 of column n
 *        within a group of 32 keys; columns in its interleaved order, undone
 *        when a row is stored).
 * Keys past seqlen_k and columns past the head dims are zeros there.
 *
 * The block walks the keys some row of it sees, in blocks of PREFILL_KEYS
 * from a multiple of 32 (blocks above a causal diagonal, or outside a
 * window, are never visited; a block ends at the last key some row sees,
 * rounded up to 32):
 *     S = Q K^T: tile C[m][n] is query row m's score of key n, so that a
 *         row of scores is 16 keys of one query row: 2 x 2 C tiles (32 rows
 *         x 32 keys) at a time over the column chunks;
 *     per row, on S while it is in cache, 16 keys to a vector, no gathers:
 *         the block's max of log2(e) x scale x S over the keys the row sees
 *         (a mask only in blocks the row's band cuts: causal diagonals,
 *         window edges), P = 2^(log2(e) scale S - max) by tiled_softmax.h's
 *         formula, 0 for unseen keys, rounded to bf16 into the A-tile
 *         layout, the row's sum in float, the accumulator row rescaled when
 *         the max moved;
 *     O += P V: the accumulators are float rows in the workspace, loaded
 *         into C tiles 32 rows x 32 columns at a time and kept there over
 *         every group of 32 keys of the block.
 * Products are of the problem's bf16 values and of P rounded to bf16, as
 * the AMX row blocks and a GPU kernel's P before its MMA; sums in float.
 * At the end each row is O = acc / sum, with its lse; a row that sees no
 * key gets O = 0 and lse = its sink (-inf without sinks). */
#include "prefill_amx.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "convert.h"
#include "decode_kernels.h"
#include "status.h"
#include "tensor_access.h"
#include "tiled_softmax.h"
#include "vmath.h"

/* Query rows per block of rows: two tiles of rows, so that each K and V
   tile loaded serves two products. Keys per block of scores: 512, so that an
   accumulator tile loaded takes 16 groups of 32 keys before it is stored
   and a row's softmax step (reductions, rescaling) is paid once per 512
   keys; the block's scores (64 KiB) and P (32 KiB) stay in L2. Where
   measured (2 threads, bf16 b1 h8, s512-4096, d64 and d128) blocks of 512
   keys ran 5-25% faster than blocks of 128 (in L1). */
#define PREFILL_ROWS 32
#define PREFILL_KEYS 512
/* Blocks of rows per task (block_task; four were no faster than two) */
#define TASK_BLOCKS 2
/* Row strides of the scores (floats), of P (bf16) and the accumulators'
   padding (floats): a line past a power of two, so that the 16 rows of a
   tile fall in different L1 sets (rows 2 KiB apart fell in two, and storing
   the score tiles took half again as long as the products, twice as long at
   head dim 64, in a loop of the two alone). */
#define S_LD (PREFILL_KEYS + 16)
#define P_LD (PREFILL_KEYS + 32)
#define ACC_PAD 16

static atomic_bool forced_off;

void fj_cpu_prefill_amx_force_off(bool off) { atomic_store(&forced_off, off); }

#if defined(__x86_64__) && defined(__GNUC__) && !defined(FJ_NO_MULTIVERSION) && defined(__linux__)

#include <immintrin.h>

#include "amx_tiles.h"
#include "exp2_avx512.h"

#define INLINE static inline __attribute__((always_inline))
#define AMX __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512bf16")))

struct fj_cpu_prefill_amx_plan {
    fj_pool *pool;
    const fj_decode_kernels *amx; /* decode_amx.c's set: its pack_values */
    int threads;
    int dpad, dpad_v, chunks; /* head dims rounded up to 32; dpad / 32 */
    int64_t rows;             /* per kv head: seqlen_q x group */
    int64_t blocks;           /* of PREFILL_ROWS rows per kv head */
    int64_t tasks;            /* batch x heads_kv x blocks */
    int64_t keys_pad;         /* seqlen_k rounded up to 32 */
    size_t k_head, v_head;    /* bf16 elements of packed K, V per (batch, kv head) */
    uint16_t *packed_k, *packed_v;
    pthread_mutex_t lock; /* one call at a time packs and reads the packed K and V */
    size_t ws_bytes, off_q, off_s, off_p, off_acc, off_max, off_sum, off_lo, off_hi;
    unsigned char *workspace;
};

typedef struct prefill_job {
    const fj_cpu_prefill_amx_plan *ap;
    const fj_problem *p;
    const void *q, *k, *v;
    void *o;
    float *lse;
    const fj_exec_inputs *in;
} prefill_job;

/* r[i] element j becomes r[j] element i (16 x 16 32-bit elements). */
AMX INLINE void transpose16(__m512i r[16])
{
    __m512i t[16], u[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    /* u[4i + k], 128-bit lane L: column 4L + k of rows 4i .. 4i + 3 */
    for (int i = 0; i < 4; i++) {
        u[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
        u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
    }
    for (int k = 0; k < 4; k++) {
        const __m512i a = _mm512_shuffle_i32x4(u[k], u[4 + k], 0x44);
        const __m512i b = _mm512_shuffle_i32x4(u[8 + k], u[12 + k], 0x44);
        const __m512i c = _mm512_shuffle_i32x4(u[k], u[4 + k], 0xee);
        const __m512i d = _mm512_shuffle_i32x4(u[8 + k], u[12 + k], 0xee);
        r[k] = _mm512_shuffle_i32x4(a, b, 0x88);
        r[4 + k] = _mm512_shuffle_i32x4(a, b, 0xdd);
        r[8 + k] = _mm512_shuffle_i32x4(c, d, 0x88);
        r[12 + k] = _mm512_shuffle_i32x4(c, d, 0xdd);
    }
}

/* n keys of K (ld elements apart) as B tiles: tile (kt, c) (keys 16 kt ..,
 * columns 32 c ..) at dst + (kt x chunks + c) x 512, row p holding the
 * column pair p of its 16 keys. Keys up to a multiple of 32 (zeros past n);
 * columns past head_dim are zeros and never read. */
AMX static void pack_keys(const uint16_t *k, int64_t ld, int n, int head_dim, int chunks,
                          uint16_t *dst)
{
    const int tiles = (n + 31) / 32 * 2;
    for (int kt = 0; kt < tiles; kt++)
        for (int c = 0; c < chunks; c++) {
            const int cols = head_dim - 32 * c;
            const __mmask32 m = cols >= 32 ? (__mmask32)0xffffffffu : (__mmask32)((1u << cols) - 1);
            __m512i r[16];
            for (int i = 0; i < 16; i++) {
                const int64_t j = (int64_t)kt * 16 + i;
                r[i] = j < n ? _mm512_maskz_loadu_epi16(m, k + j * ld + 32 * c)
                             : _mm512_setzero_si512();
            }
            transpose16(r);
            uint16_t *t = dst + ((size_t)kt * chunks + c) * 512;
            for (int pr = 0; pr < 16; pr++) _mm512_storeu_si512(t + pr * 32, r[pr]);
        }
}

/* Packs K and V of one (batch, kv head). */
AMX static void pack_task(void *arg, int64_t task, int worker)
{
    (void)worker;
    const prefill_job *j = arg;
    const fj_cpu_prefill_amx_plan *ap = j->ap;
    const fj_problem *p = j->p;
    const int64_t b = task / p->heads_kv, hk = task % p->heads_kv;
    pack_keys(fj_row_ptr(j->k, FJ_BF16, p->k_stride, b, 0, hk), p->k_stride[FJ_AXIS_SEQ],
              p->seqlen_k, p->head_dim, ap->chunks, ap->packed_k + (size_t)task * ap->k_head);
    ap->amx->pack_values(fj_row_ptr(j->v, FJ_BF16, p->v_stride, b, 0, hk), p->v_stride[FJ_AXIS_SEQ],
                         p->seqlen_k, p->head_dim_v, ap->packed_v + (size_t)task * ap->v_head);
}

/* s[m][n] = q_m . key (j0 + n) for the block's rows (two row tiles, or one
 * when `two` is false) and kb keys (a multiple of 32) from j0 (a multiple
 * of 32); s rows S_LD floats apart. */
AMX INLINE void block_scores(const uint16_t *qt, int dpad, int chunks, const uint16_t *kp,
                             int64_t j0, int kb, bool two, float *s)
{
    const int64_t ldq = (int64_t)dpad * 2, lds = S_LD * 4;
    const uint16_t *q1 = qt + (size_t)16 * dpad;
    for (int kk = 0; kk < kb; kk += 32) {
        const uint16_t *k0 = kp + (size_t)((j0 + kk) / 16) * chunks * 512;
        const uint16_t *k1 = k0 + (size_t)chunks * 512;
        _tile_zero(0);
        _tile_zero(1);
        if (two) {
            _tile_zero(2);
            _tile_zero(3);
        }
        for (int c = 0; c < chunks; c++) {
            _tile_loadd(4, qt + 32 * c, ldq);
            _tile_loadd(6, k0 + (size_t)c * 512, 64);
            _tile_dpbf16ps(0, 4, 6);
            _tile_loadd(7, k1 + (size_t)c * 512, 64);
            _tile_dpbf16ps(1, 4, 7);
            if (two) {
                _tile_loadd(5, q1 + 32 * c, ldq);
                _tile_dpbf16ps(2, 5, 6);
                _tile_dpbf16ps(3, 5, 7);
            }
        }
        _tile_stored(0, s + kk, lds);
        _tile_stored(1, s + kk + 16, lds);
        if (two) {
            _tile_stored(2, s + 16 * S_LD + kk, lds);
            _tile_stored(3, s + 16 * S_LD + kk + 16, lds);
        }
    }
}

/* acc[m][:] += sum over the block's kb keys of p[m][n] value (j0 + n), the
 * accumulator rows dpad_v + ACC_PAD floats apart (in pack_values' column
 * order), P rows P_LD bf16 apart, vp the packed V of the (batch, kv head). */
AMX INLINE void block_values(const uint16_t *pt, const uint16_t *vp, int64_t j0, int kb, int dpad_v,
                             bool two, float *acc)
{
    const int groups = dpad_v / 16;
    const int64_t lda = (int64_t)(dpad_v + ACC_PAD) * 4, ldp = P_LD * 2, ldb = (int64_t)groups * 64;
    const uint16_t *p1 = pt + 16 * P_LD;
    for (int g = 0; g < groups; g += 2) {
        float *c0 = acc + 16 * g, *c1 = c0 + (size_t)16 * (dpad_v + ACC_PAD);
        _tile_loadd(0, c0, lda);
        _tile_loadd(1, c0 + 16, lda);
        if (two) {
            _tile_loadd(2, c1, lda);
            _tile_loadd(3, c1 + 16, lda);
        }
        for (int kk = 0; kk < kb; kk += 32) {
            const uint16_t *bg = vp + (size_t)(j0 + kk) * dpad_v + (size_t)g * 32;
            _tile_loadd(4, pt + kk, ldp);
            _tile_loadd(6, bg, ldb);
            _tile_dpbf16ps(0, 4, 6);
            _tile_loadd(7, bg + 32, ldb);
            _tile_dpbf16ps(1, 4, 7);
            if (two) {
                _tile_loadd(5, p1 + kk, ldp);
                _tile_dpbf16ps(2, 5, 6);
                _tile_dpbf16ps(3, 5, 7);
            }
        }
        _tile_stored(0, c0, lda);
        _tile_stored(1, c0 + 16, lda);
        if (two) {
            _tile_stored(2, c1, lda);
            _tile_stored(3, c1 + 16, lda);
        }
    }
}

/* One online-softmax step of row x (kb scores of keys j0 .., kb a multiple
 * of 32) whose visible keys are [lo, hi): the scores scaled by alpha, the
 * unseen ones -inf, P = 2^(x - new max) as bf16 into pr, *max and *sum
 * updated; returns the factor the row's accumulator must be multiplied by
 * (1 when the max did not move). A row that sees none of the block gets
 * P = 0 and its state unchanged; one whose scores there (and before) are
 * all -inf, P = 0 and a NaN sum (docs/semantics.md, "Non-finite values"). */
/* softmax_row's work on keys [a, e) of the block (masked false: all of
 * them), specialized by the caller's constant `masked`. */
AMX INLINE float softmax_keys(const float *x, int kb, int a, int e, const bool masked, float alpha,
                              float *max, float *sum, uint16_t *pr)
{
    const __m512 va = _mm512_set1_ps(alpha), ninf = _mm512_set1_ps(-INFINITY);
    const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    const __m512i av = _mm512_set1_epi32(a), ev = _mm512_set1_epi32(e);
/* the keys of the 16 from v that the row sees */
#define SEEN(v)                                                                                    \
    (!masked                                                                                       \
         ? (__mmask16)0xffff                                                                       \
         : (__mmask16)(_mm512_cmpge_epi32_mask(_mm512_add_epi32(lane, _mm512_set1_epi32(v)), av) & \
                       _mm512_cmplt_epi32_mask(_mm512_add_epi32(lane, _mm512_set1_epi32(v)), ev)))
    /* the block's max of alpha x: alpha times the largest x (the smallest
       when alpha < 0; float products are monotonic in x) */
    float bmax;
    __m512 bm0 = ninf, bm1 = ninf;
    if (alpha > 0.0f) {
        for (int v = 0; v < kb; v += 32) {
            bm0 = _mm512_mask_max_ps(bm0, SEEN(v), bm0, _mm512_loadu_ps(x + v));
            bm1 = _mm512_mask_max_ps(bm1, SEEN(v + 16), bm1, _mm512_loadu_ps(x + v + 16));
        }
        bmax = alpha * _mm512_reduce_max_ps(_mm512_max_ps(bm0, bm1));
    } else {
        for (int v = 0; v < kb; v += 32) {
            bm0 = _mm512_mask_max_ps(bm0, SEEN(v), bm0, _mm512_mul_ps(_mm512_loadu_ps(x + v), va));
            bm1 = _mm512_mask_max_ps(bm1, SEEN(v + 16), bm1,
                                     _mm512_mul_ps(_mm512_loadu_ps(x + v + 16), va));
        }
        bmax = _mm512_reduce_max_ps(_mm512_max_ps(bm0, bm1));
    }
    const float old = *max;
    const float m = bmax > old ? bmax : old;
    if (m == -INFINITY) { /* every score it sees -inf: the row is NaN (as tiled_softmax.c) */
        memset(pr, 0, (size_t)kb * sizeof(uint16_t));
        *sum = NAN;
        return 1.0f;
    }
    /* 2^(alpha x - m) as one FMA and the polynomial; unseen keys 0 */
    const __m512 nm = _mm512_set1_ps(-m);
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    for (int v = 0; v < kb; v += 32) {
        __m512 e0 = fj_exp2_nonpositive_avx512(_mm512_fmadd_ps(_mm512_loadu_ps(x + v), va, nm));
        __m512 e1 =
            fj_exp2_nonpositive_avx512(_mm512_fmadd_ps(_mm512_loadu_ps(x + v + 16), va, nm));
        if (masked) {
            e0 = _mm512_maskz_mov_ps(SEEN(v), e0);
            e1 = _mm512_maskz_mov_ps(SEEN(v + 16), e1);
        }
        s0 = _mm512_add_ps(s0, e0);
        s1 = _mm512_add_ps(s1, e1);
        _mm512_storeu_si512(pr + v, (__m512i)_mm512_cvtne2ps_pbh(e1, e0));
    }
#undef SEEN
    const float bsum = _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
    const float f = old == m ? 1.0f : fj_tiled_exp2(old - m); /* old -inf: 0 */
    *max = m;
    *sum = *sum * f + bsum;
    return f;
}

AMX INLINE float softmax_row(const float *x, int kb, int64_t j0, int64_t lo, int64_t hi,
                             float alpha, float *max, float *sum, uint16_t *pr)
{
    const int64_t a64 = lo - j0, e64 = hi - j0;
    if (lo >= hi || a64 >= kb || e64 <= 0) {
        memset(pr, 0, (size_t)kb * sizeof(uint16_t));
        return 1.0f;
    }
    const int a = a64 > 0 ? (int)a64 : 0, e = e64 < kb ? (int)e64 : kb;
    return a == 0 && e == kb ? softmax_keys(x, kb, a, e, false, alpha, max, sum, pr)
                             : softmax_keys(x, kb, a, e, true, alpha, max, sum, pr);
}

/* x[0..n) *= f, n a multiple of 32. */
AMX INLINE void scale_row(float *x, int n, float f)
{
    const __m512 fv = _mm512_set1_ps(f);
    for (int c = 0; c < n; c += 16)
        _mm512_storeu_ps(x + c, _mm512_mul_ps(_mm512_loadu_ps(x + c), fv));
}

/* Row i of the block (row r of kv head hk of batch b): O = acc / sum in
 * column order, rounded to bf16 as fj_f32_to_bf16 (nearest even, NaN
 * kept quiet), and its lse; a row that sees no key O = 0 and lse = its sink
 * (docs/semantics.md). acc holds each chunk of 32 columns in pack_values'
 * order: tile column n of column group h (position 16 h + n) holds column
 * 8 (n / 4) + 4 h + n % 4 (unpacklo/hi_epi16 interleave within 128-bit
 * lanes), put back by one two-source permute per 16 columns. */
AMX static void store_row(const prefill_job *j, int64_t b, int64_t hk, int64_t r, const float *acc,
                          float max, float sum, int64_t lo, int64_t hi)
{
    const fj_problem *p = j->p;
    const int dv = p->head_dim_v;
    const int64_t t = r / p->group, hq = hk * p->group + r % p->group;
    uint16_t *dst = fj_row_ptr_mut(j->o, FJ_BF16, p->o_stride, b, t, hq);
    const float sink = p->sinks ? j->in->sinks[hq] : -INFINITY;
    float row_lse = sink;
    if (lo < hi) {
        const float f = p->sinks ? fj_sink_join((float)M_LOG2E * sink, &max, &sum, true) : 1.0f;
        const __m512 g = _mm512_set1_ps(f / sum);
        /* output column k of a chunk from position 16 ((k % 8) / 4) + 4 (k / 8) + k % 4 */
        const __m512i lo_idx =
            _mm512_set_epi32(23, 22, 21, 20, 7, 6, 5, 4, 19, 18, 17, 16, 3, 2, 1, 0);
        const __m512i hi_idx =
            _mm512_set_epi32(31, 30, 29, 28, 15, 14, 13, 12, 27, 26, 25, 24, 11, 10, 9, 8);
        const __m512i round = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1);
        for (int c = 0; c < dv; c += 16) {
            const float *x = acc + (c & ~31);
            const __m512 y =
                _mm512_mul_ps(_mm512_permutex2var_ps(_mm512_loadu_ps(x), c & 16 ? hi_idx : lo_idx,
                                                     _mm512_loadu_ps(x + 16)),
                              g);
            const __m512i u = _mm512_castps_si512(y);
            const __m512i up = _mm512_srli_epi32(u, 16);
            __m512i h = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, round),
                                                           _mm512_and_si512(up, one)),
                                          16);
            const __mmask16 nan = _mm512_cmp_ps_mask(y, y, _CMP_UNORD_Q);
            h = _mm512_mask_or_epi32(h, nan, up, _mm512_set1_epi32(0x40));
            const __mmask16 m =
                dv - c >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (dv - c)) - 1);
            _mm256_mask_storeu_epi16(dst + c, m, _mm512_cvtepi32_epi16(h));
        }
        row_lse = sum > 0.0f ? (float)(M_LN2 * max + log(sum)) : NAN;
    } else {
        memset(dst, 0, (size_t)dv * sizeof(uint16_t));
    }
    if (j->lse) j->lse[(b * p->heads_q + hq) * p->seqlen_q + t] = row_lse;
}

/* One block of PREFILL_ROWS rows of a task: its rows' queries (from row r0
 * of kv head hk of batch b), state and the keys they see. */
typedef struct row_block {
    uint16_t *qt;
    float *acc, *mx, *sm;
    int64_t *lo, *hi;
    int64_t r0, jlo, jhi; /* jlo >= jhi: no row sees a key */
    int nr;
} row_block;

static void load_rows(const prefill_job *j, int64_t b, int64_t hk, row_block *rb)
{
    const fj_problem *p = j->p;
    const int dpad = j->ap->dpad, D = p->head_dim;
    rb->jlo = p->seqlen_k;
    rb->jhi = 0;
    for (int i = 0; i < PREFILL_ROWS; i++) {
        uint16_t *dst = rb->qt + (size_t)i * dpad;
        rb->mx[i] = -INFINITY;
        rb->sm[i] = 0.0f;
        rb->lo[i] = rb->hi[i] = 0;
        if (i >= rb->nr) {
            memset(dst, 0, (size_t)dpad * sizeof(uint16_t));
            continue;
        }
        const int64_t r = rb->r0 + i, t = r / p->group, hq = hk * p->group + r % p->group;
        memcpy(dst, fj_row_ptr(j->q, FJ_BF16, p->q_stride, b, t, hq), (size_t)D * sizeof(uint16_t));
        memset(dst + D, 0, (size_t)(dpad - D) * sizeof(uint16_t));
        fj_visible_keys(p, t, &rb->lo[i], &rb->hi[i]);
        if (rb->lo[i] >= rb->hi[i]) continue;
        if (rb->lo[i] < rb->jlo) rb->jlo = rb->lo[i];
        if (rb->hi[i] > rb->jhi) rb->jhi = rb->hi[i];
    }
    memset(rb->acc, 0, (size_t)PREFILL_ROWS * (j->ap->dpad_v + ACC_PAD) * sizeof(float));
}

/* TASK_BLOCKS consecutive blocks of rows of one (batch, kv head), the
 * blocks of a kv head's tasks last to first (under a causal mask the last
 * see the most keys: heaviest first). Each block of keys is taken by every
 * block of rows of the task in turn, while it is in L2: K and V stream from
 * memory once per task rather than once per block of rows. */
AMX static void block_task(void *arg, int64_t task, int worker)
{
    const prefill_job *j = arg;
    const fj_cpu_prefill_amx_plan *ap = j->ap;
    const fj_problem *p = j->p;
    const int64_t units = (ap->blocks + TASK_BLOCKS - 1) / TASK_BLOCKS;
    const int64_t u = units - 1 - task % units, bh = task / units;
    const int64_t b = bh / p->heads_kv, hk = bh % p->heads_kv;
    unsigned char *ws = ap->workspace + (size_t)worker * ap->ws_bytes;
    float *s = (float *)(ws + ap->off_s);
    uint16_t *pt = (uint16_t *)(ws + ap->off_p);
    const int dpad = ap->dpad, dpad_v = ap->dpad_v, acc_ld = dpad_v + ACC_PAD;
    row_block rbs[TASK_BLOCKS];
    int nb = 0;
    int64_t jlo = p->seqlen_k, jhi = 0;
    for (int64_t qb = u * TASK_BLOCKS; qb < ap->blocks && nb < TASK_BLOCKS; qb++, nb++) {
        row_block *rb = &rbs[nb];
        rb->qt = (uint16_t *)(ws + ap->off_q) + (size_t)nb * PREFILL_ROWS * dpad;
        rb->acc = (float *)(ws + ap->off_acc) + (size_t)nb * PREFILL_ROWS * acc_ld;
        rb->mx = (float *)(ws + ap->off_max) + nb * PREFILL_ROWS;
        rb->sm = (float *)(ws + ap->off_sum) + nb * PREFILL_ROWS;
        rb->lo = (int64_t *)(ws + ap->off_lo) + nb * PREFILL_ROWS;
        rb->hi = (int64_t *)(ws + ap->off_hi) + nb * PREFILL_ROWS;
        rb->r0 = qb * PREFILL_ROWS;
        rb->nr = (int)(ap->rows - rb->r0 < PREFILL_ROWS ? ap->rows - rb->r0 : PREFILL_ROWS);
        load_rows(j, b, hk, rb);
        if (rb->jlo >= rb->jhi) continue;
        if (rb->jlo < jlo) jlo = rb->jlo;
        if (rb->jhi > jhi) jhi = rb->jhi;
    }

    if (jlo < jhi) {
        const float alpha = (float)(M_LOG2E * p->scale);
        const uint16_t *kp = ap->packed_k + (size_t)bh * ap->k_head;
        const uint16_t *vp = ap->packed_v + (size_t)bh * ap->v_head;
        fj_amx_config_16x64(8); /* 0-3 C, 4-5 A, 6-7 B */
        for (int64_t j0 = jlo - jlo % 32; j0 < jhi; j0 += PREFILL_KEYS)
            for (int k = 0; k < nb; k++) {
                const row_block *rb = &rbs[k];
                if (rb->jlo >= rb->jhi || rb->jhi <= j0 || rb->jlo >= j0 + PREFILL_KEYS) continue;
                const int64_t jend = (rb->jhi + 31) / 32 * 32;
                const int kb = (int)(jend - j0 < PREFILL_KEYS ? jend - j0 : PREFILL_KEYS);
                const bool two = rb->nr > 16;
                block_scores(rb->qt, dpad, ap->chunks, kp, j0, kb, two, s);
                for (int i = 0; i < rb->nr; i++) {
                    const float f =
                        softmax_row(s + (size_t)i * S_LD, kb, j0, rb->lo[i], rb->hi[i], alpha,
                                    &rb->mx[i], &rb->sm[i], pt + (size_t)i * P_LD);
                    if (f != 1.0f) scale_row(rb->acc + (size_t)i * acc_ld, dpad_v, f);
                }
                /* P rows past the block's rows 0 (a previous block's may be there) */
                if (rb->nr > 16 && rb->nr < PREFILL_ROWS)
                    memset(pt + (size_t)rb->nr * P_LD, 0,
                           (size_t)(PREFILL_ROWS - rb->nr) * P_LD * sizeof(uint16_t));
                block_values(pt, vp, j0, kb, dpad_v, two, rb->acc);
            }
        _tile_release();
    }
    for (int k = 0; k < nb; k++) {
        const row_block *rb = &rbs[k];
        for (int i = 0; i < rb->nr; i++)
            store_row(j, b, hk, rb->r0 + i, rb->acc + (size_t)i * acc_ld, rb->mx[i], rb->sm[i],
                      rb->lo[i], rb->hi[i]);
    }
}

bool fj_cpu_prefill_amx_takes(const fj_problem *p)
{
    return p->dtype == FJ_BF16 && !p->paged && !p->varlen && !p->alibi && !(p->softcap > 0.0f) &&
           !atomic_load(&forced_off) && fj_decode_kernels_amx() != NULL;
}

static size_t ws_part(size_t *cursor, size_t bytes)
{
    size_t at = *cursor;
    *cursor += (bytes + 63) & ~(size_t)63;
    return at;
}

fj_status fj_cpu_prefill_amx_plan_create(fj_pool *pool, const fj_problem *p,
                                         fj_cpu_prefill_amx_plan **out, fj_strbuf *describe)
{
    *out = NULL;
    const fj_decode_kernels *amx = fj_decode_kernels_amx();
    if (!amx || !amx->pack_values)
        return fj_fail(FJ_ERR_UNSUPPORTED, "cpu prefill: no AMX-BF16 on this CPU");
    fj_cpu_prefill_amx_plan *ap = calloc(1, sizeof *ap);
    if (!ap) return fj_fail(FJ_ERR_OUT_OF_MEMORY, "cpu prefill: out of memory for the plan");
    pthread_mutex_init(&ap->lock, NULL);
    ap->pool = pool;
    ap->amx = amx;
    ap->threads = fj_pool_threads(pool);
    ap->dpad = (p->head_dim + 31) / 32 * 32;
    ap->dpad_v = (p->head_dim_v + 31) / 32 * 32;
    ap->chunks = ap->dpad / 32;
    ap->rows = (int64_t)p->seqlen_q * p->group;
    ap->blocks = (ap->rows + PREFILL_ROWS - 1) / PREFILL_ROWS;
    ap->tasks = (int64_t)p->batch * p->heads_kv * ((ap->blocks + TASK_BLOCKS - 1) / TASK_BLOCKS);
    ap->keys_pad = ((int64_t)p->seqlen_k + 31) / 32 * 32;
    ap->k_head = (size_t)ap->keys_pad * ap->dpad;
    ap->v_head = (size_t)ap->keys_pad * ap->dpad_v;
    const size_t heads = (size_t)p->batch * p->heads_kv;
    const size_t packed_bytes = heads * (ap->k_head + ap->v_head) * sizeof(uint16_t);

    size_t cur = 0;
    ap->off_q = ws_part(&cur, (size_t)TASK_BLOCKS * PREFILL_ROWS * ap->dpad * sizeof(uint16_t));
    ap->off_s = ws_part(&cur, (size_t)PREFILL_ROWS * S_LD * sizeof(float));
    ap->off_p = ws_part(&cur, (size_t)PREFILL_ROWS * P_LD * sizeof(uint16_t));
    ap->off_acc =
        ws_part(&cur, (size_t)TASK_BLOCKS * PREFILL_ROWS * (ap->dpad_v + ACC_PAD) * sizeof(float));
    ap->off_max = ws_part(&cur, TASK_BLOCKS * PREFILL_ROWS * sizeof(float));
    ap->off_sum = ws_part(&cur, TASK_BLOCKS * PREFILL_ROWS * sizeof(float));
    ap->off_lo = ws_part(&cur, TASK_BLOCKS * PREFILL_ROWS * sizeof(int64_t));
    ap->off_hi = ws_part(&cur, TASK_BLOCKS * PREFILL_ROWS * sizeof(int64_t));
    ap->ws_bytes = cur;
    ap->packed_k = aligned_alloc(64, (heads * ap->k_head * sizeof(uint16_t) + 63) & ~(size_t)63);
    ap->packed_v = aligned_alloc(64, (heads * ap->v_head * sizeof(uint16_t) + 63) & ~(size_t)63);
    ap->workspace = aligned_alloc(64, ap->ws_bytes * (size_t)ap->threads);
    if (!ap->packed_k || !ap->packed_v || !ap->workspace) {
        const size_t kib = (packed_bytes + cur * (size_t)ap->threads) >> 10;
        fj_cpu_prefill_amx_plan_destroy(ap);
        return fj_fail(FJ_ERR_OUT_OF_MEMORY, "cpu prefill: cannot allocate %zu KiB", kib);
    }
    fj_strbuf_printf(
        describe,
        "backend: cpu\n"
        "method: AMX prefill: blocks of %d query rows per kv head (of %lld: %d position(s) x %d "
        "head(s)) against blocks of %d keys, S = Q K^T and O += P V as bf16 tile products with "
        "float sums, the online softmax on each block of scores while in cache, blocks outside "
        "the mask skipped; chosen because this CPU has AMX-BF16 and %lld bf16 rows per kv head "
        "are more than a decode block's\n"
        "split: %lld task(s) of (batch, kv head, %d blocks of rows), the last blocks first, for %d "
        "worker(s); K and V packed into tiles once per call\n"
        "kernels: amx-bf16 tiles (Q rows as A tiles, K and V packed as B tiles, P as bf16)\n"
        "workspace: %zu bytes per thread, %d threads, %zu bytes of packed K and V\n",
        PREFILL_ROWS, (long long)ap->rows, p->seqlen_q, p->group, PREFILL_KEYS, (long long)ap->rows,
        (long long)ap->tasks, TASK_BLOCKS, ap->threads, ap->ws_bytes, ap->threads, packed_bytes);
    if (p->head_dim_v != p->head_dim)
        fj_strbuf_printf(describe,
                         "head dims: q and k %d, v and o %d (head_dim_v): scores over %d, "
                         "values and output rows of %d\n",
                         p->head_dim, p->head_dim_v, p->head_dim, p->head_dim_v);
    *out = ap;
    return FJ_OK;
}

void fj_cpu_prefill_amx_execute(const fj_cpu_prefill_amx_plan *ap, const fj_problem *p,
                                const void *q, const void *k, const void *v, void *o, float *lse,
                                const fj_exec_inputs *in)
{
    prefill_job job = {ap, p, q, k, v, o, lse, in};
    pthread_mutex_t *lock = (pthread_mutex_t *)&ap->lock;
    pthread_mutex_lock(lock);
    fj_pool_run(ap->pool, (int64_t)p->batch * p->heads_kv, pack_task, &job);
    fj_pool_run(ap->pool, ap->tasks, block_task, &job);
    pthread_mutex_unlock(lock);
}

void fj_cpu_prefill_amx_plan_info(const fj_cpu_prefill_amx_plan *ap, fj_plan_info *info)
{
    snprintf(info->kernel, sizeof info->kernel, "cpu_prefill_amx");
    info->tiles[0] = '\0';
    info->tiles_source = FJ_TILES_HEURISTIC;
    info->threads = ap->threads;
    info->splits = 1;
}

void fj_cpu_prefill_amx_plan_destroy(fj_cpu_prefill_amx_plan *ap)
{
    if (!ap) return;
    pthread_mutex_destroy(&ap->lock);
    free(ap->packed_k);
    free(ap->packed_v);
    free(ap->workspace);
    free(ap);
}

#else /* no AMX intrinsics here: the path never takes a problem */

bool fj_cpu_prefill_amx_takes(const fj_problem *p)
{
    (void)p;
    return false;
}

fj_status fj_cpu_prefill_amx_plan_create(fj_pool *pool, const fj_problem *p,
                                         fj_cpu_prefill_amx_plan **out, fj_strbuf *describe)
{
    (void)pool;
    (void)p;
    (void)describe;
    *out = NULL;
    return fj_fail(FJ_ERR_UNSUPPORTED, "cpu prefill: no AMX kernels in this build");
}

void fj_cpu_prefill_amx_execute(const fj_cpu_prefill_amx_plan *ap, const fj_problem *p,
                                const void *q, const void *k, const void *v, void *o, float *lse,
                                const fj_exec_inputs *in)
{
    (void)ap, (void)p, (void)q, (void)k, (void)v, (void)o, (void)lse, (void)in;
}

void fj_cpu_prefill_amx_plan_info(const fj_cpu_prefill_amx_plan *ap, fj_plan_info *info)
{
    (void)ap;
    (void)info;
}

void fj_cpu_prefill_amx_plan_destroy(fj_cpu_prefill_amx_plan *ap) { (void)ap; }

#endif
