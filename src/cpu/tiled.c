/* FJ_BACKEND_CPU: attention by blocks with an online softmax (FlashAttention's
 * method on the CPU), never holding a seqlen_q x seqlen_k score matrix.
 *
 * A task is one block of query rows of one (batch, kv head): up to block_q
 * rows, which are (position, query head) pairs when several query heads share
 * the kv head (their rows are stacked, so they share every K/V block and its
 * conversion, and a GQA decode step is an sgemm, not a matrix-vector
 * product). For each block of keys that some row of the block sees:
 *     S = log2(e) scale Q K_blk^T       (cblas_sgemm, rows that see the block only;
 *                                        with a softcap, c tanh(S / c) in base 2;
 *                                        with ALiBi, then log2(e) x its bias)
 *     per row: keys it does not see set to 0 in S, then the online softmax
 *         step (tiled_softmax.h): S = 2^(S - running max), running sum
 *         updated, and the row's accumulator rescaled when the max moved
 *     O_acc += S V_blk                  (cblas_sgemm)
 * then (with sinks, the row's sink joins max and sum: fj_sink_join)
 * O = O_acc / running sum, lse = ln 2 running max + ln(running sum).
 * (Base 2 because log2(e) rides free on the sgemm's alpha and 2^x is the
 * cheapest exponential.) A block of one row uses cblas_sgemv instead.
 *
 * Keys run from the first any row of the block sees to the last, so blocks
 * outside the causal/window band cost nothing. Where every row sees every key
 * the blocks are block_k wide and unmasked; across the band's edges (a causal
 * diagonal, a window's left edge) they are EDGE_BLOCK_K wide, and only the
 * rows that see part of each enter its sgemm (every mask is a band, so those
 * rows are consecutive): the work left outside the band is a staircase of
 * EDGE_BLOCK_K-wide steps, whatever block_q is.
 *
 * F32 tensors whose rows are at least head_dim apart go to sgemm in place
 * (lda = the seq stride); otherwise (F16, BF16, overlapping rows, or stacked
 * heads for Q) a block is converted into the worker's float workspace, once per
 * block of rows. The workspace is allocated at plan time: O((block_q +
 * block_k) x head_dim + block_q x block_k) floats per thread, whatever the
 * sequence lengths.
 *
 * That is the sgemm path. Where the CPU has AVX-512 (and a block has at least
 * 16 rows) the same blocks run on kernels of our own instead (tile_task;
 * tiled_kernels.h): the block's rows in tiles of 32 held transposed, each
 * tile's queries packed once (OpenBLAS packed them again for every key
 * block), each key block's K and V copied once for all the tiles, and a tile
 * takes only the keys some row of it sees, with a mask only where it crosses
 * the band's edge: the work outside a causal band is half a 32 x 32 square
 * per tile. bf16 on a CPU with AVX-512 BF16 takes a set whose copies and
 * products stay bf16 (tiled_avx512_bf16.c); the others widen to floats as
 * they copy. Its workspace: O(block_q x head_dim + block_k x (head_dim + 32)).
 *
 * Both paths take V rows of another length than Q's and K's (head_dim_v,
 * DeepSeek's MLA): the scores sum over head_dim, the values' products, the
 * accumulators and the output rows run over head_dim_v, and the K and V
 * blocks have each their own row length. */
#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cpu/blas_threads.h"
#include "cpu/cpu_ops.h"
#include "context.h"
#include "convert.h"
#include "decode.h"
#include "pool.h"
#include "status.h"
#include "tensor_access.h"
#include "tiled_blocks.h"
#include "tiled_kernels.h"
#include "tiled_softmax.h"
#include "vmath.h"

/* Keys per block where the mask cuts through a block of rows (a causal
 * diagonal, a window's edge): narrow, so that the rows entering each block's
 * sgemm follow the band closely; wide enough that sgemm stays efficient. */
#define EDGE_BLOCK_K 64

typedef struct tiled_plan {
    fj_cpu_decode_plan *decode; /* the decode path's plan (decode.h), in place of what follows */
    fj_pool *pool;
    int block_k;                       /* keys per block where no row of the block is masked */
    int edge_k;                        /* keys per block across the band's edges (masked) */
    int heads_per_block;               /* query heads of one kv head stacked in a block */
    int head_chunks;                   /* ceil(group / heads_per_block) */
    int positions_per_block;           /* query positions per block */
    int64_t position_blocks;           /* ceil(seqlen_q / positions_per_block) */
    int64_t tasks;                     /* blocks of query rows in all, one task each */
    int rows;                          /* positions_per_block * heads_per_block */
    bool q_direct, k_direct, v_direct; /* strided f32 tensor handed to sgemm as is */
    /* Per-worker workspace: byte offsets of each part within a worker's share. */
    size_t ws_bytes;
    size_t off_q, off_o, off_s, off_k, off_v, off_max, off_sum, off_lo, off_hi;
    unsigned char *workspace; /* pool threads x ws_bytes, 64-byte aligned */
    int threads;              /* the pool's workers */
    /* The tile kernels (tiled_kernels.h), or NULL: sgemm per block. With
       them, the workspace's q, o, max and sum hold whole tiles (a block's
       rows rounded up to FJ_TILED_LANES), s holds one tile's scores, and
       tile the per-tile bounds. */
    const fj_tiled_kernels *kern;
    size_t q_tile_bytes; /* tile kernels: one tile's packed queries */
    size_t off_row, off_tile;
    fj_tiles_source tiles_from;
    char tiles[32]; /* the chosen blocks, "q<block_q>k<block_k>" */
} tiled_plan;

typedef struct tiled_job {
    const tiled_plan *plan;
    const fj_problem *p;
    const void *q, *k, *v;
    void *o;
    float *lse;
    const fj_exec_inputs *in;
} tiled_job;

/* The worker's views of its workspace. */
typedef struct tiled_ws {
    float *q, *o, *s, *k, *v, *row_max, *row_sum;
    int64_t *lo, *hi;  /* visible keys [lo, hi) of each position of the block */
    float *row;        /* tile kernels: a tile's query rows, head_dim floats each */
    struct tile *tile; /* tile kernels: each tile's bounds */
} tiled_ws;

static tiled_ws worker_ws(const tiled_plan *tp, int worker)
{
    unsigned char *base = tp->workspace + (size_t)worker * tp->ws_bytes;
    tiled_ws w = {
        .q = (float *)(base + tp->off_q),
        .o = (float *)(base + tp->off_o),
        .s = (float *)(base + tp->off_s),
        .k = (float *)(base + tp->off_k),
        .v = (float *)(base + tp->off_v),
        .row_max = (float *)(base + tp->off_max),
        .row_sum = (float *)(base + tp->off_sum),
        .lo = (int64_t *)(base + tp->off_lo),
        .hi = (int64_t *)(base + tp->off_hi),
        .row = (float *)(base + tp->off_row),
        .tile = (struct tile *)(base + tp->off_tile),
    };
    return w;
}

/* Whether a strided F32 tensor of rows of dim elements can be an sgemm
 * operand as is: BLAS wants rows at least dim apart and a leading dimension
 * that fits an int. */
static bool sgemm_ready(const fj_problem *p, const int64_t stride[3], int dim)
{
    int64_t ld = stride[FJ_AXIS_SEQ];
    return p->dtype == FJ_F32 && ld >= dim && ld <= INT_MAX;
}

/* One block of key (or value) rows [j0, j0 + n) of kv head hk, dim elements
 * each (head_dim for keys, head_dim_v for values), as a float matrix: the
 * tensor itself when it is sgemm-ready, else converted into buf. */
static const float *kv_block(const fj_problem *p, const void *base, const int64_t stride[3],
                             int dim, bool direct, float *buf, int64_t b, int64_t j0, int64_t n,
                             int64_t hk, int *ld)
{
    const void *src = fj_row_ptr(base, p->dtype, stride, b, j0, hk);
    if (direct) {
        *ld = (int)stride[FJ_AXIS_SEQ];
        return src;
    }
    fj_load_f32(buf, dim, src, p->dtype, stride[FJ_AXIS_SEQ], n, dim);
    *ld = dim;
    return buf;
}

/* One task's block of query rows while its key blocks go by. */
typedef struct row_block {
    const tiled_job *job;
    tiled_ws w;
    int64_t b, hk;
    int npos, nh;    /* row r is position pos0 + r / nh, query head head0 + r % nh */
    const float *qm; /* the block's queries, rows ldq apart */
    int ldq;
    float alpha; /* log2(e) * scale: scores in base 2 (1 under a softcap) */
    /* softcap c: the raw q.k x (alpha 1) becomes cap_out * tanh(cap_in * x),
       cap_out = c log2(e), cap_in = scale / c (c tanh(s / c) in base 2); 0: off */
    float cap_in, cap_out;
    int64_t pos0, head0; /* the block's first position and query head */
} row_block;

/* Keys [j0, j0 + nk): scores of the rows that see part of them, the online
 * softmax step on each such row, and their O_acc += P V. */
static void key_block(const row_block *rb, int64_t j0, int nk)
{
    const tiled_job *j = rb->job;
    const tiled_plan *tp = j->plan;
    const fj_problem *p = j->p;
    const tiled_ws *w = &rb->w;
    const int D = p->head_dim, Dv = p->head_dim_v, nh = rb->nh;
    const int64_t j1 = j0 + nk;
    /* The positions that see part of [j0, j1): consecutive, as every
       position's visible keys form a band moving right with it. */
    int ta = rb->npos, tb = 0;
    for (int t = 0; t < rb->npos; t++)
        if (w->lo[t] < w->hi[t] && w->lo[t] < j1 && w->hi[t] > j0) {
            if (t < ta) ta = t;
            tb = t + 1;
        }
    if (ta >= tb) return;
    const int ra = ta * nh, m = (tb - ta) * nh;

    /* A single row (decoding without GQA) goes through sgemv: OpenBLAS's
       sgemm of one row is several times slower. */
    int ldk, ldv;
    const float *km =
        kv_block(p, j->k, p->k_stride, D, tp->k_direct, w->k, rb->b, j0, nk, rb->hk, &ldk);
    const float *qrows = rb->qm + (size_t)ra * rb->ldq;
    if (m == 1)
        cblas_sgemv(CblasRowMajor, CblasNoTrans, nk, D, rb->alpha, km, ldk, qrows, 1, 0.0f, w->s,
                    1);
    else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, nk, D, rb->alpha, qrows, rb->ldq,
                    km, ldk, 0.0f, w->s, tp->block_k);

    for (int r = ra; r < ra + m; r++) {
        const int t = r / nh;
        float *srow = w->s + (size_t)(r - ra) * tp->block_k;
        int64_t a = w->lo[t] > j0 ? w->lo[t] - j0 : 0;
        int64_t e = w->hi[t] < j1 ? w->hi[t] - j0 : nk;
        if (a >= e) { /* a row of the range that sees none of this block */
            memset(srow, 0, (size_t)nk * sizeof(float));
            continue;
        }
        if (rb->cap_out > 0.0f) fj_vsoftcap(srow + a, e - a, rb->cap_in, rb->cap_out);
        if (p->alibi) { /* after the cap: -slope |i + diag_offset - j|, in base 2 */
            const float s2 = (float)M_LOG2E * j->in->alibi_slopes[rb->head0 + r % nh];
            const int64_t i = rb->pos0 + t;
            for (int64_t c = a; c < e; c++) srow[c] += fj_alibi_bias(p, s2, i, j0 + c);
        }
        for (int64_t c = 0; c < a; c++) srow[c] = -INFINITY; /* unseen keys: weight 0 */
        for (int64_t c = e; c < nk; c++) srow[c] = -INFINITY;
        float factor = fj_tiled_softmax_step(srow, nk, &w->row_max[r], &w->row_sum[r]);
        if (factor != 1.0f) fj_vscale(w->o + (size_t)r * Dv, Dv, factor);
    }

    const float *vm =
        kv_block(p, j->v, p->v_stride, Dv, tp->v_direct, w->v, rb->b, j0, nk, rb->hk, &ldv);
    float *orows = w->o + (size_t)ra * Dv;
    if (m == 1)
        cblas_sgemv(CblasRowMajor, CblasTrans, nk, Dv, 1.0f, vm, ldv, w->s, 1, 1.0f, orows, 1);
    else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, Dv, nk, 1.0f, w->s, tp->block_k,
                    vm, ldv, 1.0f, orows, Dv);
}

/* Keys [j0, j1) in blocks of at most max_k, about equal (no runt block at the
 * end) and multiples of 16 keys but the last, so the row kernel's vector
 * loops rarely meet a tail. */
static void key_range(const row_block *rb, int64_t j0, int64_t j1, int max_k)
{
    int64_t len = j1 - j0;
    if (len <= 0) return;
    int64_t n = (len + max_k - 1) / max_k;
    int64_t step = (len + n - 1) / n;
    step = (step + 15) / 16 * 16;
    if (step > max_k) step = max_k;
    for (int64_t a = j0; a < j1; a += step) key_block(rb, a, (int)(j1 - a < step ? j1 - a : step));
}

/* The keys a task's block of rows sees: [jlo, jhi) (empty when none), and
 * [flo, fhi), those every position that sees any sees (empty when the band is
 * narrower than the block). */
typedef struct key_span {
    int64_t jlo, jhi, flo, fhi;
} key_span;

/* Task `task`'s block of rows: which rows, its parameters, and each
 * position's visible keys (w->lo, w->hi). */
static key_span block_setup(const tiled_job *j, int64_t task, int worker, row_block *rb)
{
    const tiled_plan *tp = j->plan;
    const fj_problem *p = j->p;

    /* Tasks run heaviest first: the last query positions see the most keys
       under a causal mask, and the pool hands tasks out in index order. */
    const int64_t per_position_block = (int64_t)p->batch * p->heads_kv * tp->head_chunks;
    const int64_t pblk = tp->position_blocks - 1 - task / per_position_block;
    int64_t rest = task % per_position_block;
    const int chunk = (int)(rest % tp->head_chunks);
    rest /= tp->head_chunks;

    *rb = (row_block){.job = j, .w = worker_ws(tp, worker), .alpha = (float)(M_LOG2E * p->scale)};
    if (p->softcap > 0.0f) {
        /* the sgemm gives q.k itself and the cap takes scale / c, which
           validation keeps finite: log2(e) scale and 1 / (log2(e) c) apart
           can each underflow or overflow (a denormal scale and cap) */
        rb->alpha = 1.0f;
        rb->cap_out = (float)(M_LOG2E * p->softcap);
        rb->cap_in = (float)((double)p->scale / p->softcap);
    }
    rb->hk = rest % p->heads_kv;
    rb->b = rest / p->heads_kv;
    const int64_t pos0 = pblk * tp->positions_per_block;
    rb->npos = (int)(p->seqlen_q - pos0 < tp->positions_per_block ? p->seqlen_q - pos0
                                                                  : tp->positions_per_block);
    rb->pos0 = pos0;
    rb->head0 = rb->hk * p->group + (int64_t)chunk * tp->heads_per_block;
    rb->nh = p->group - chunk * tp->heads_per_block < tp->heads_per_block
                 ? p->group - chunk * tp->heads_per_block
                 : tp->heads_per_block;

    const tiled_ws *w = &rb->w;
    key_span k = {p->seqlen_k, 0, 0, p->seqlen_k};
    for (int t = 0; t < rb->npos; t++) {
        fj_visible_keys(p, pos0 + t, &w->lo[t], &w->hi[t]);
        if (w->lo[t] >= w->hi[t]) continue;
        if (w->lo[t] < k.jlo) k.jlo = w->lo[t];
        if (w->hi[t] > k.jhi) k.jhi = w->hi[t];
        if (w->lo[t] > k.flo) k.flo = w->lo[t];
        if (w->hi[t] < k.fhi) k.fhi = w->hi[t];
    }
    return k;
}

/* Row r of the block done, its softmax state in base 2 (max, sum): writes
 * its lse, zeros its output if it sees no key, and returns the factor its
 * accumulated output is to be multiplied by (0 when it sees no key). */
static float finish_state(const row_block *rb, int r, float max, float sum)
{
    const tiled_job *j = rb->job;
    const fj_problem *p = j->p;
    const int64_t i = rb->pos0 + r / rb->nh, h = rb->head0 + r % rb->nh;
    /* A row that sees no key: lse = its sink (-inf without one). */
    const float sink = p->sinks ? j->in->sinks[h] : -INFINITY;
    float row_lse = sink, scale = 0.0f;
    /* The mask says whether the row sees a key, not the sum: a NaN or +inf
       score (or only -inf ones) leaves the sum NaN, and the row must come
       out NaN (docs/semantics.md, "Non-finite values"), never as a row that
       sees no key. */
    const int t = r / rb->nh;
    if (rb->w.lo[t] < rb->w.hi[t]) {
        /* the keys' sum is 0 when every visible score was -inf (the
           masked tiles subtract 0 for a max of -inf) and NaN after a NaN
           or +inf score: the row is NaN, with a sink too (whose join
           would turn 0 into a finite sum) */
        const bool keys_sum = sum > 0.0f;
        /* the sink, in base 2, joins once all keys are in */
        const float f = p->sinks ? fj_sink_join((float)M_LOG2E * sink, &max, &sum, true) : 1.0f;
        scale = keys_sum ? f / sum : NAN;
        row_lse = keys_sum && sum > 0.0f ? (float)(M_LN2 * max + log(sum)) : NAN;
    } else { /* the row sees no key */
        memset(fj_row_ptr_mut(j->o, p->dtype, p->o_stride, rb->b, i, h), 0,
               (size_t)p->head_dim_v * fj_dtype_size(p->dtype));
    }
    if (j->lse) j->lse[(rb->b * p->heads_q + h) * p->seqlen_q + i] = row_lse;
    return scale;
}

/* Row r of the block done: acc (head_dim_v floats, overwritten) is its
 * accumulated output, max and sum its softmax state in base 2. */
static void finish_row(const row_block *rb, int r, float *acc, float max, float sum)
{
    const fj_problem *p = rb->job->p;
    const float scale = finish_state(rb, r, max, sum);
    if (rb->w.lo[r / rb->nh] >= rb->w.hi[r / rb->nh]) return;
    fj_vscale(acc, p->head_dim_v, scale);
    fj_store_f32(fj_row_ptr_mut(rb->job->o, p->dtype, p->o_stride, rb->b, rb->pos0 + r / rb->nh,
                                rb->head0 + r % rb->nh),
                 p->dtype, 0, acc, 0, 1, p->head_dim_v);
}

/* The BLAS path: each block of keys through cblas_sgemm (key_block). */
static void tiled_task(void *arg, int64_t task, int worker)
{
    const tiled_job *j = arg;
    const tiled_plan *tp = j->plan;
    const fj_problem *p = j->p;
    const int D = p->head_dim, Dv = p->head_dim_v;
    row_block rb;
    const key_span k = block_setup(j, task, worker, &rb);
    const int rows = rb.npos * rb.nh;
    const tiled_ws *w = &rb.w;
    const int64_t pos0 = rb.pos0, head0 = rb.head0;

    for (int r = 0; r < rows; r++) {
        w->row_max[r] = -INFINITY;
        w->row_sum[r] = 0.0f;
    }
    if (k.jlo < k.jhi) {
        rb.qm = w->q;
        rb.ldq = D;
        if (tp->q_direct) {
            rb.qm = fj_row_ptr(j->q, p->dtype, p->q_stride, rb.b, pos0, head0);
            rb.ldq = (int)p->q_stride[FJ_AXIS_SEQ];
        } else if (rb.nh == 1) {
            fj_load_f32(w->q, D, fj_row_ptr(j->q, p->dtype, p->q_stride, rb.b, pos0, head0),
                        p->dtype, p->q_stride[FJ_AXIS_SEQ], rb.npos, D);
        } else { /* the block's heads of one position are rows a head stride apart */
            for (int t = 0; t < rb.npos; t++)
                fj_load_f32(w->q + (size_t)t * rb.nh * D, D,
                            fj_row_ptr(j->q, p->dtype, p->q_stride, rb.b, pos0 + t, head0),
                            p->dtype, p->q_stride[FJ_AXIS_HEAD], rb.nh, D);
        }
        memset(w->o, 0, (size_t)rows * Dv * sizeof(float));

        /* Masked edges in narrow blocks, so few (row, key) pairs outside the
           band are computed; the unmasked middle, unless it is narrower than
           an edge block, in wide ones. */
        int64_t a = k.flo < k.jhi ? k.flo : k.jhi;
        int64_t e = k.fhi > a ? k.fhi : a;
        if (e - a < tp->edge_k) {
            key_range(&rb, k.jlo, k.jhi, tp->edge_k);
        } else {
            key_range(&rb, k.jlo, a, tp->edge_k);
            key_range(&rb, a, e, tp->block_k);
            key_range(&rb, e, k.jhi, tp->edge_k);
        }
    }
    for (int r = 0; r < rows; r++)
        finish_row(&rb, r, w->o + (size_t)r * Dv, w->row_max[r], w->row_sum[r]);
}

/* The address of output row `row` of the block. */
static void *o_row(const row_block *rb, int row)
{
    const fj_problem *p = rb->job->p;
    return fj_row_ptr_mut(rb->job->o, p->dtype, p->o_stride, rb->b, rb->pos0 + row / rb->nh,
                          rb->head0 + row % rb->nh);
}

/* ---- the tile kernels' path ------------------------------------------------ */

#define LANES FJ_TILED_LANES

/* One tile's keys: [lo, hi) what some lane sees, [flo, fhi) what every lane
 * sees (no mask needed there); per lane, its row's [lane_lo, lane_hi). Lanes
 * past the block's rows copy the last row's bounds (their queries are 0). */
struct tile {
    int64_t lo, hi, flo, fhi;
    int64_t lane_lo[LANES], lane_hi[LANES];
    int rows; /* lanes that hold rows of the block */
    /* the same per half of the lanes (0-15, 16-31), over the lanes that hold
       rows: a half with none has lo >= hi */
    int64_t half_lo[2], half_hi[2], half_flo[2], half_fhi[2];
};

/* Tile `t` of the block: its queries packed (qp, times alpha), its bounds,
 * its accumulators cleared. */
static void tile_setup(const row_block *rb, int t, int rows)
{
    const tiled_job *j = rb->job;
    const fj_problem *p = j->p;
    const int D = p->head_dim;
    const tiled_ws *w = &rb->w;
    struct tile *tl = &w->tile[t];
    void *qp = (unsigned char *)w->q + (size_t)t * j->plan->q_tile_bytes;
    tl->rows = rows - t * LANES < LANES ? rows - t * LANES : LANES;
    tl->lo = p->seqlen_k;
    tl->hi = 0;
    tl->flo = 0;
    tl->fhi = p->seqlen_k;
    for (int h = 0; h < 2; h++) {
        tl->half_lo[h] = tl->half_fhi[h] = p->seqlen_k;
        tl->half_hi[h] = tl->half_flo[h] = 0;
    }
    const float *src[LANES];
    for (int r = 0; r < LANES; r++) {
        const int row = t * LANES + (r < tl->rows ? r : tl->rows - 1);
        const int pos = row / rb->nh;
        tl->lane_lo[r] = w->lo[pos];
        tl->lane_hi[r] = w->hi[pos];
        src[r] = NULL;
        if (r >= tl->rows) continue;
        /* f32 rows as they lie; others converted into the row buffer */
        const void *q = fj_row_ptr(j->q, p->dtype, p->q_stride, rb->b, rb->pos0 + pos,
                                   rb->head0 + row % rb->nh);
        if (p->dtype == FJ_F32) {
            src[r] = q;
        } else {
            j->plan->kern->load_rows(w->row + (size_t)r * D, D, q, 0, p->dtype, 1, D);
            src[r] = w->row + (size_t)r * D;
        }
        if (w->lo[pos] < w->hi[pos]) {
            if (w->lo[pos] < tl->lo) tl->lo = w->lo[pos];
            if (w->hi[pos] > tl->hi) tl->hi = w->hi[pos];
        }
        if (w->lo[pos] > tl->flo) tl->flo = w->lo[pos];
        if (w->hi[pos] < tl->fhi) tl->fhi = w->hi[pos];
        const int h = r / 16;
        if (w->lo[pos] < w->hi[pos]) {
            if (w->lo[pos] < tl->half_lo[h]) tl->half_lo[h] = w->lo[pos];
            if (w->hi[pos] > tl->half_hi[h]) tl->half_hi[h] = w->hi[pos];
        }
        if (w->lo[pos] > tl->half_flo[h]) tl->half_flo[h] = w->lo[pos];
        if (w->hi[pos] < tl->half_fhi[h]) tl->half_fhi[h] = w->hi[pos];
    }
    j->plan->kern->pack_queries(src, D, qp);
    const size_t Dv = (size_t)p->head_dim_v;
    memset(w->o + (size_t)t * Dv * LANES, 0, Dv * LANES * sizeof(float));
    for (int r = 0; r < LANES; r++) {
        w->row_max[t * LANES + r] = -INFINITY;
        w->row_sum[t * LANES + r] = 0.0f;
    }
}

/* Keys [a, a + n) of tile t, keys key0 .. key0 + n - 1 of the block's K and
 * V copies, for its lanes of `half` (0: 0-15, 1: 16-31, -1: all 32): scores,
 * the lanes' softmax step, and their O_acc += P V. */
static void tile_keys(const row_block *rb, int t, int half, int64_t a, int n, int key0)
{
    const tiled_job *j = rb->job;
    const fj_tiled_kernels *kern = j->plan->kern;
    const fj_problem *p = j->p;
    const int D = p->head_dim, Dv = p->head_dim_v;
    const tiled_ws *w = &rb->w;
    const struct tile *tl = &w->tile[t];
    const int off = half == 1 ? 16 : 0, lanes = half < 0 ? LANES : 16;
    float *st = w->s + off, *ot = w->o + (size_t)t * Dv * LANES + off;
    /* a lane of the packed queries is 4 bytes in every set */
    const unsigned char *qp = (const unsigned char *)w->q + (size_t)t * j->plan->q_tile_bytes;
    kern->scores(qp + (size_t)off * 4, D, w->k, key0, n, rb->alpha, st, lanes);
    if (rb->cap_out > 0.0f) fj_vsoftcap(w->s, (int64_t)n * LANES, rb->cap_in, rb->cap_out);
    if (p->alibi) /* after the cap: -slope |i + diag_offset - j|, in base 2 */
        for (int r = off; r < off + lanes && r < tl->rows; r++) {
            const int row = t * LANES + r;
            const float s2 = (float)M_LOG2E * j->in->alibi_slopes[rb->head0 + row % rb->nh];
            const int64_t i = rb->pos0 + row / rb->nh;
            for (int c = 0; c < n; c++)
                w->s[(size_t)c * LANES + r] += fj_alibi_bias(p, s2, i, a + c);
        }
    int32_t lo[LANES], hi[LANES];
    const int64_t flo = half < 0 ? tl->flo : tl->half_flo[half];
    const int64_t fhi = half < 0 ? tl->fhi : tl->half_fhi[half];
    const bool masked = a < flo || a + n > fhi;
    if (masked)
        for (int r = 0; r < LANES; r++) { /* bounds relative to a, within [0, n] */
            int64_t l = tl->lane_lo[r] - a, h = tl->lane_hi[r] - a;
            lo[r] = (int32_t)(l < 0 ? 0 : l > n ? n : l);
            hi[r] = (int32_t)(h < 0 ? 0 : h > n ? n : h);
        }
    float factor[LANES];
    kern->softmax(st, n, masked ? lo + off : NULL, masked ? hi + off : NULL,
                  w->row_max + t * LANES + off, w->row_sum + t * LANES + off, factor, lanes);
    kern->values(st, n, w->v, key0, Dv, factor, ot, lanes);
}

/* Keys [a, e) of tile t (the block's K and V copies from its key j0):
 * where only one half of its lanes sees keys (past the lower
 * half's causal diagonal, or a tile of 16 rows or fewer), that half alone,
 * when at least HALF_MIN keys long; the rest on all 32 lanes. */
#define HALF_MIN 8
static void tile_range(const row_block *rb, int t, int64_t j0, int64_t a, int64_t e)
{
    const tiled_ws *w = &rb->w;
    const struct tile *tl = &w->tile[t];
    /* where either half's keys start or end, in order */
    int64_t cut[6] = {a, e}, nc = 2;
    for (int h = 0; h < 2; h++)
        if (tl->half_lo[h] < tl->half_hi[h]) {
            if (tl->half_lo[h] > a && tl->half_lo[h] < e) cut[nc++] = tl->half_lo[h];
            if (tl->half_hi[h] > a && tl->half_hi[h] < e) cut[nc++] = tl->half_hi[h];
        }
    for (int i = 1; i < nc; i++) /* insertion sort of at most 6 */
        for (int k = i; k > 0 && cut[k - 1] > cut[k]; k--) {
            const int64_t x = cut[k];
            cut[k] = cut[k - 1];
            cut[k - 1] = x;
        }
    /* runs of the same halves, merged; a short one-half run joins all 32 */
    int64_t x = a;
    int run = -2; /* the halves of [x, current): -1 both, 0, 1; -2 none yet */
    for (int i = 0; i + 1 < nc; i++) {
        const int64_t lo = cut[i], hi = cut[i + 1];
        if (lo >= hi) continue;
        const bool in0 =
            tl->half_lo[0] < hi && tl->half_hi[0] > lo && tl->half_lo[0] < tl->half_hi[0];
        const bool in1 =
            tl->half_lo[1] < hi && tl->half_hi[1] > lo && tl->half_lo[1] < tl->half_hi[1];
        int halves = in0 && in1 ? -1 : in0 ? 0 : in1 ? 1 : -3;
        if (halves >= 0 && hi - lo < HALF_MIN) halves = -1;
        if (run != -2 && halves != run) {
            if (run != -3) tile_keys(rb, t, run, x, (int)(lo - x), (int)(x - j0));
            x = lo;
        }
        run = halves;
    }
    if (run != -2 && run != -3) tile_keys(rb, t, run, x, (int)(e - x), (int)(x - j0));
}

static void tile_task(void *arg, int64_t task, int worker)
{
    const tiled_job *j = arg;
    const tiled_plan *tp = j->plan;
    const fj_problem *p = j->p;
    const int D = p->head_dim, Dv = p->head_dim_v;
    row_block rb;
    const key_span k = block_setup(j, task, worker, &rb);
    const int rows = rb.npos * rb.nh, tiles = (rows + LANES - 1) / LANES;
    const tiled_ws *w = &rb.w;

    for (int t = 0; t < tiles; t++) tile_setup(&rb, t, rows);
    /* Keys in blocks of at most block_k, about equal; each tile takes the
       part of a block it sees. */
    const int64_t len = k.jhi - k.jlo;
    const int64_t nblocks = len > 0 ? (len + tp->block_k - 1) / tp->block_k : 0;
    const int64_t step = nblocks ? (len + nblocks - 1) / nblocks : 0;
    for (int64_t j0 = k.jlo; j0 < k.jhi; j0 += step) {
        const int64_t j1 = k.jhi - j0 < step ? k.jhi : j0 + step;
        /* K and V copied once for every tile of the block, into the
           kernels' layout: rows a stride of an odd number of cache lines
           apart, so the kernels' column walks down the rows spread over
           every set of L1 (rows 4 KiB apart, as in the dense layout, or 512
           bytes, all fell in a few sets), and in L2 */
        tp->kern->copy_keys(w->k, fj_row_ptr(j->k, p->dtype, p->k_stride, rb.b, j0, rb.hk),
                            p->k_stride[FJ_AXIS_SEQ], p->dtype, (int)(j1 - j0), D);
        tp->kern->copy_values(w->v, fj_row_ptr(j->v, p->dtype, p->v_stride, rb.b, j0, rb.hk),
                              p->v_stride[FJ_AXIS_SEQ], p->dtype, (int)(j1 - j0), Dv);
        for (int t = 0; t < tiles; t++) {
            const struct tile *tl = &w->tile[t];
            const int64_t a = tl->lo > j0 ? tl->lo : j0, e = tl->hi < j1 ? tl->hi : j1;
            if (a >= e) continue;
            tile_range(&rb, t, j0, a, e);
        }
    }
    for (int t = 0; t < tiles; t++) { /* straight from the tile into o */
        void *dst[LANES];
        float scale[LANES];
        for (int r = 0; r < w->tile[t].rows; r++) {
            const int row = t * LANES + r;
            scale[r] = finish_state(&rb, row, w->row_max[row], w->row_sum[row]);
            dst[r] = w->lo[row / rb.nh] < w->hi[row / rb.nh] ? o_row(&rb, row) : NULL;
        }
        tp->kern->store_outputs(w->o + (size_t)t * Dv * LANES, Dv, dst, p->dtype, scale,
                                w->tile[t].rows);
    }
}

/* Lays out one worker's workspace; each part starts on a cache line. */
static size_t ws_part(size_t *cursor, size_t bytes)
{
    size_t at = *cursor;
    *cursor += (bytes + 63) & ~(size_t)63;
    return at;
}

static fj_status tiled_plan_create(fj_context *ctx, const fj_problem *p, const char *config,
                                   void **state, fj_strbuf *describe)
{
    *state = NULL;
    if (!config && fj_cpu_decode_chosen(p)) {
        tiled_plan *tp = calloc(1, sizeof *tp);
        if (!tp) return fj_fail(FJ_ERR_OUT_OF_MEMORY, "cpu: out of memory for the plan");
        fj_status st = fj_cpu_decode_plan_create(ctx->pool, p, &tp->decode, describe);
        if (st) {
            free(tp);
            return st;
        }
        *state = tp;
        return FJ_OK;
    }
    const int threads = fj_pool_threads(ctx->pool);
    fj_cpu_tiled_blocks blocks;
    fj_status st = fj_cpu_tiled_choose_blocks(ctx, p, config, threads, &blocks);
    if (st) return st;
    fj_cpu_tiled_geometry g;
    fj_cpu_tiled_geometry_of(p, blocks.block_q, &g);
    tiled_plan *tp = calloc(1, sizeof *tp);
    if (!tp) return fj_fail(FJ_ERR_OUT_OF_MEMORY, "cpu: out of memory for the plan");
    tp->pool = ctx->pool;
    tp->threads = threads;
    tp->tiles_from = blocks.from;
    fj_cpu_tiled_config_name(blocks.block_q, blocks.block_k, tp->tiles, sizeof tp->tiles);
    tp->block_k = blocks.block_k;
    tp->edge_k = blocks.block_k < EDGE_BLOCK_K ? blocks.block_k : EDGE_BLOCK_K;
    tp->heads_per_block = g.heads_per_block;
    tp->head_chunks = g.head_chunks;
    tp->positions_per_block = g.positions_per_block;
    tp->position_blocks = g.position_blocks;
    tp->tasks = g.tasks;
    tp->rows = g.rows;
    tp->q_direct = tp->heads_per_block == 1 && sgemm_ready(p, p->q_stride, p->head_dim);
    tp->k_direct = sgemm_ready(p, p->k_stride, p->head_dim);
    tp->v_direct = sgemm_ready(p, p->v_stride, p->head_dim_v);

    /* The tile kernels where the CPU has them, unless the blocks are so
       small that most of a tile's lanes would be empty (or a test forces
       sgemm). */
    if (tp->rows >= FJ_TILED_LANES / 2) tp->kern = fj_cpu_tiled_kernels(p->dtype);
    if (tp->kern) {
        tp->q_direct = tp->k_direct = tp->v_direct = false;
        tp->q_tile_bytes = (tp->kern->query_bytes(p->head_dim) + 63) & ~(size_t)63;
    }

    const size_t D = (size_t)p->head_dim, Dv = (size_t)p->head_dim_v, bk = (size_t)tp->block_k;
    const size_t rows =
        tp->kern ? (size_t)(tp->rows + FJ_TILED_LANES - 1) / FJ_TILED_LANES * FJ_TILED_LANES
                 : (size_t)tp->rows;
    const size_t f = sizeof(float);
    size_t cur = 0;
    tp->off_q = ws_part(&cur, tp->kern       ? rows / FJ_TILED_LANES * tp->q_tile_bytes
                              : tp->q_direct ? 0
                                             : rows * D * f);
    tp->off_o = ws_part(&cur, rows * Dv * f);
    tp->off_s = ws_part(&cur, (tp->kern ? FJ_TILED_LANES : rows) * bk * f);
    tp->off_k = ws_part(&cur, tp->k_direct ? 0
                              : tp->kern   ? tp->kern->copy_bytes(p->head_dim, tp->block_k)
                                           : bk * D * f);
    tp->off_v = ws_part(&cur, tp->v_direct ? 0
                              : tp->kern   ? tp->kern->copy_bytes(p->head_dim_v, tp->block_k)
                                           : bk * Dv * f);
    tp->off_max = ws_part(&cur, rows * f);
    tp->off_sum = ws_part(&cur, rows * f);
    tp->off_lo = ws_part(&cur, (size_t)tp->positions_per_block * sizeof(int64_t));
    tp->off_hi = ws_part(&cur, (size_t)tp->positions_per_block * sizeof(int64_t));
    tp->off_row = ws_part(&cur, tp->kern ? FJ_TILED_LANES * D * f : 0);
    tp->off_tile = ws_part(&cur, tp->kern ? rows / FJ_TILED_LANES * sizeof(struct tile) : 0);
    tp->ws_bytes = cur;

    if (!(tp->workspace = aligned_alloc(64, tp->ws_bytes * (size_t)threads))) {
        size_t kib = tp->ws_bytes * (size_t)threads >> 10;
        free(tp);
        return fj_fail(FJ_ERR_OUT_OF_MEMORY,
                       "cpu: cannot allocate %zu KiB of workspace (%d threads)", kib, threads);
    }
    fj_strbuf_printf(describe,
                     "backend: cpu\n"
                     "method: online softmax over blocks of %d query rows x %d keys (%s), "
                     "%d query head(s) per block sharing each K/V block\n",
                     tp->rows, tp->block_k, blocks.source, tp->heads_per_block);
    if (tp->kern)
        fj_strbuf_printf(describe,
                         "kernels: %s, tiles of %d query rows packed once per block, K and V "
                         "copied once per block, masks on the tiles that cross the band's edges\n",
                         tp->kern->name, FJ_TILED_LANES);
    else
        fj_strbuf_printf(describe, "kernels: sgemm, %d keys per block across the mask's edges\n",
                         tp->edge_k);
    fj_strbuf_printf(describe,
                     "operands: q %s, k %s, v %s\n"
                     "workspace: %zu bytes per thread, %d threads\n",
                     tp->kern       ? "packed per block"
                     : tp->q_direct ? "in place"
                                    : "converted per block",
                     tp->k_direct ? "in place" : "converted per block",
                     tp->v_direct ? "in place" : "converted per block", tp->ws_bytes, threads);
    if (p->head_dim_v != p->head_dim)
        fj_strbuf_printf(describe,
                         "head dims: q and k %d, v and o %d (head_dim_v): scores over %d, "
                         "values and output rows of %d\n",
                         p->head_dim, p->head_dim_v, p->head_dim, p->head_dim_v);
    *state = tp;
    return FJ_OK;
}

static fj_status tiled_execute(const void *state, const fj_problem *p, const void *q, const void *k,
                               const void *v, void *o, float *lse, const fj_exec_inputs *in,
                               void *stream)
{
    (void)stream;
    const tiled_plan *tp = state;
    if (tp->decode) {
        fj_cpu_decode_execute(tp->decode, p, q, k, v, o, lse, in);
        return FJ_OK;
    }
    tiled_job job = {tp, p, q, k, v, o, lse, in};
    /* The tile kernels call no BLAS: OpenBLAS's thread count is left as it
       is (fj_cpu_pool_run sets it to 1 for the job, under a lock). */
    if (tp->kern) fj_pool_run(tp->pool, tp->tasks, tile_task, &job);
    else fj_cpu_pool_run(tp->pool, tp->tasks, tiled_task, &job);
    return FJ_OK;
}

static void tiled_plan_destroy(void *state)
{
    tiled_plan *tp = state;
    if (!tp) return;
    fj_cpu_decode_plan_destroy(tp->decode);
    free(tp->workspace);
    free(tp);
}

static void tiled_info(const void *state, fj_plan_info *info)
{
    const tiled_plan *tp = state;
    if (tp->decode) {
        fj_cpu_decode_plan_info(tp->decode, info);
        return;
    }
    snprintf(info->kernel, sizeof info->kernel, "cpu_tiled");
    snprintf(info->tiles, sizeof info->tiles, "%s", tp->tiles);
    info->tiles_source = tp->tiles_from;
    info->threads = tp->threads;
}

const fj_backend_ops fj_cpu_tiled_ops = {
    .kind = FJ_BACKEND_CPU,
    .name = "cpu",
    .plan_create = tiled_plan_create,
    .execute = tiled_execute,
    .plan_destroy = tiled_plan_destroy,
    .info = tiled_info,
    FJ_CPU_SHARED_OPS,
};
