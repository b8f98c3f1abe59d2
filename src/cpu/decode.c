/* The CPU backend's decode path (decode.h).
 *
 * A task is one chunk of keys of one (batch, group of kv heads). The rows of
 * a kv head are every query position p of the call and every query head h of
 * its GQA group, row p * group + h. The task walks its chunk in blocks of
 * BLOCK_KEYS keys, and for each block, for each of its kv heads:
 *     S = log2(e) scale Q K_blk^T          (kernels->scores, the rows that see
 *                                           part of the block)
 *     with a softcap c: S = c tanh(S / c) in base 2 on the keys a row sees
 *         (every kernel set alike: the cap is applied here, on their scores)
 *     per row: unseen keys -inf, the online softmax step (tiled_softmax.h),
 *         the accumulator rescaled when the row's max moved
 *     O_acc += P V_blk                      (kernels->accumulate)
 * With one chunk per kv head the task writes O = O_acc / sum and lse itself;
 * with several it stores (max, sum, O_acc) per row as its partial result,
 * and the last of a kv head's chunks to finish (an atomic count per kv head)
 * merges them:
 *     M = max_c max_c,  L = sum_c sum_c 2^(max_c - M),
 *     O = sum_c O_acc_c 2^(max_c - M) / L,  lse = ln 2 M + ln L.
 * With ALiBi its bias (base 2) is added to a row's scores after the cap; with
 * sinks the row's sink joins its (max, sum) once, when the row is stored
 * (after the merge when split). A row that sees no key gets O = 0 and lse =
 * -inf (its sink, with sinks).
 *
 * Heads per task: one where each kv head's K and V rows lie apart from the
 * others' (PyTorch's [batch, heads, seq, dim]); all of a batch's (up to
 * MAX_TASK_ROWS rows in all) where the heads of a position lie side by side
 * (the dense [batch, seq, heads, dim]), so that a block is one sweep over
 * contiguous memory, which the hardware prefetchers follow, rather than a row
 * every few KiB per task (a third slower where measured, docs/benchmarks.md).
 *
 * V's rows may be of another length than Q's and K's (head_dim_v): the
 * scores' kernels run over head_dim, the values' kernels, the accumulators
 * and the partial results over head_dim_v (each padded to FJ_DECODE_PAD).
 *
 * A call reading less than SERIAL_BYTES of K and V is one task, on the
 * calling thread: waking the workers would cost more.
 *
 * Chunks: enough per (batch, head group) that the tasks number about
 * TASKS_PER_WORKER per worker (so uneven kv heads, masks and the last task's
 * tail even out), none shorter than MIN_CHUNK_KEYS (a partial result costs a
 * merge); one when the (batch, head group) pairs alone are that many. Memory:
 * per worker, the task's queries, accumulators, scores for one block per
 * head and a scratch block; per plan, the partial results of at most
 * ~(TASKS_PER_WORKER + 1) x workers chunks: nothing grows with seqlen_k.
 *
 * The kernels take a block in pieces, each read for every head of the task
 * before the next piece: the scores of a piece for every head, then the
 * next piece's; the online softmax step of every head; the values of each
 * piece alike. A piece holds as many rows as L1 keeps while the task's
 * heads each read their part of them (piece_keys: 16 keys where the heads
 * of 8 kv heads of 128 bf16 columns lie side by side, rows 2 KiB apart).
 * Where a task's heads fill whole rows of K and V, the kernels prefetch what
 * the task reads two pieces ahead, in address order, as they compute
 * (read_stream); elsewhere one line of every 4 KiB of the next piece is
 * prefetched before a piece is computed (touch_keys).
 *
 * A paged KV cache (FJ_FEATURE_PAGED_KV, with or without FJ_FEATURE_VARLEN;
 * src/cpu/varlen.c makes the plan when its rows per kv head are few enough):
 * one pool job runs every sequence of the execute, each as a problem of its
 * own lengths (its query rows, its seqused_k keys, their causal alignment),
 * its queries at its batch entry or its first token, its lse in its place.
 * Its keys are never copied: the kernels take keys one row stride apart, so
 * a piece also ends where a page ends (a piece is at most the keys left in
 * the page), or where a run of pages consecutive in a dense pool ends, and
 * each piece is passed as its page's rows. The chunks are laid out at
 * each execute from the lengths (paged_schedule): one chunk length for the
 * call, a whole number of pages, from the keys of all its sequences, so
 * that the tasks again number about TASKS_PER_WORKER per worker and a long
 * sequence among short ones is split while they are not; each sequence's
 * first chunk starts on the page that holds its first visible key. The
 * merge is the one above. */
#include "decode.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "convert.h"
#include "decode_kernels.h"
#include "prefill_amx.h"
#include "status.h"
#include "tensor_access.h"
#include "tiled_blocks.h"
#include "tiled_softmax.h"
#include "vmath.h"

/* Keys per block: the scores of a block stay in L1 or L2 between the softmax
   and the values' pass (a task's 64 rows x 128 keys = 32 KiB at most). */
#define BLOCK_KEYS 128
#define TASKS_PER_WORKER 4
#define MIN_CHUNK_KEYS 512
/* Most rows (heads x rows per kv head) one task keeps state for. */
#define MAX_TASK_ROWS 64
/* The L1 data cache the pieces of a block are sized for (piece_keys): 64
   sets of 64-byte lines, 8 ways (32 KiB; a 48 KiB L1 has the same sets and
   more ways). */
#define L1_SETS 64
#define L1_WAYS 8
/* K and V bytes under which a call runs on the calling thread alone. */
#define SERIAL_BYTES (512 << 10)

_Static_assert(BLOCK_KEYS <= FJ_DECODE_MAX_BLOCK, "a block must fit the kernels' scratch");

static atomic_int forced_mode;
static atomic_bool forced_split;

void fj_cpu_decode_force_split(bool fine) { atomic_store(&forced_split, fine); }

fj_status fj_cpu_decode_force(fj_cpu_decode_mode mode)
{
    if (mode != FJ_CPU_DECODE_AUTO && mode != FJ_CPU_DECODE_OFF && mode != FJ_CPU_DECODE_GENERIC &&
        mode != FJ_CPU_DECODE_NO_AMX && mode != FJ_CPU_DECODE_WIDENED)
        return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                       "decode mode (%d) must be FJ_CPU_DECODE_AUTO, _OFF, _GENERIC, _NO_AMX or "
                       "_WIDENED",
                       (int)mode);
    atomic_store(&forced_mode, (int)mode);
    return FJ_OK;
}

static int64_t rows_per_kv_head(const fj_problem *p) { return (int64_t)p->seqlen_q * p->group; }

/* bf16 prefill in blocks of positions on the AMX tiles: where the tiles
   exist, not turned off, and a block can hold a whole GQA group. */
static bool amx_prefill(const fj_problem *p)
{
    return p->dtype == FJ_BF16 && p->group <= FJ_CPU_DECODE_MAX_ROWS &&
           atomic_load(&forced_mode) == FJ_CPU_DECODE_AUTO && fj_decode_kernels_amx();
}

bool fj_cpu_decode_chosen(const fj_problem *p)
{
    return atomic_load(&forced_mode) != FJ_CPU_DECODE_OFF && !fj_cpu_tiled_blocks_forced() &&
           (rows_per_kv_head(p) <= FJ_CPU_DECODE_MAX_ROWS || amx_prefill(p));
}

bool fj_cpu_decode_takes_paged(const fj_problem *p)
{
    return fj_cpu_decode_chosen(p) && rows_per_kv_head(p) <= FJ_CPU_DECODE_MAX_ROWS;
}

/* A paged plan's chunks of one sequence for the current execute. */
typedef struct seq_chunks {
    int64_t key0, key1; /* its keys [key0, key1): those some row sees, key0 down to a page start */
    int chunks;         /* of chunk_len keys from key0 (1: the whole range, no partial result) */
    int slot;           /* its first chunk's place among the partial results (chunks > 1) */
} seq_chunks;

struct fj_cpu_decode_plan {
    /* bf16 prefill on prefill_amx.c's tiles, in place of what follows */
    fj_cpu_prefill_amx_plan *amx_prefill;
    fj_pool *pool;
    const fj_decode_kernels *kernels;
    int positions;        /* query positions per block (all of them when decoding) */
    int64_t pos_blocks;   /* ceil(seqlen_q / positions) */
    int rows;             /* per kv head and block: positions x group, <= 16 */
    int dpad;             /* head_dim rounded up to FJ_DECODE_PAD: a query row */
    int dpad_v;           /* head_dim_v rounded up so: an accumulator row */
    int heads_per_task;   /* kv heads one task takes (consecutive) */
    int64_t head_groups;  /* ceil(heads_kv / heads_per_task) */
    int64_t units;        /* batch x head groups x position blocks */
    int chunks;           /* per unit (paged: what a batch of seqlen_k-key sequences gets) */
    bool one_task;        /* the whole call one task, on the calling thread (paged: likewise) */
    bool fine;            /* fj_cpu_decode_force_split(true) when the plan was made */
    int64_t *chunk_start; /* chunks + 1 key indices (not paged) */
    int64_t piece[2];     /* most keys of K, V one kernel call reads (piece_keys) */
    bool stream;          /* the kernels prefetch the task's reads ahead (read_stream) */
    /* per worker: byte offsets within a worker's share; q, acc, max and sum
       hold heads_per_task heads' rows, one after the other */
    size_t ws_bytes, off_q, off_s, off_acc, off_max, off_sum, off_scratch;
    unsigned char *workspace;
    /* bf16 prefill on kernels that pack V: V packed once per call for all
       the blocks of positions ([batch x kv head][packed_keys][dpad_v] bf16),
       and the lock that keeps two calls from packing at once */
    uint16_t *packed_v;
    int64_t packed_keys; /* seqlen_k rounded up to FJ_DECODE_PACK_KEYS */
    pthread_mutex_t pack_lock;
    /* partial results (chunks > 1): [batch x kv head][chunk][row]; paged:
       [slot][kv head][row] for part_slots chunks of the sequences split */
    float *part_acc, *part_max, *part_sum;
    atomic_int *finished; /* chunks of each (batch, kv head) done in the current execute */
    /* A paged KV cache (p->paged): every sequence of the batch in one pool
       job, its keys read through the block table, its chunks laid out per
       execute (each sequence has its own length) in sched and task0, which
       sched_lock keeps to one execute at a time. */
    bool paged;
    int64_t key_unit;       /* chunk lengths are a multiple: whole pages, whole groups of 16 keys */
    int part_slots;         /* chunks the partial results hold */
    atomic_int last_chunks; /* the most chunks of a sequence at the latest execute (0: none yet) */
    pthread_mutex_t sched_lock;
    seq_chunks *sched; /* [batch] */
    int64_t *task0;    /* [batch + 1]: each sequence's first task */
};

typedef struct decode_job {
    const fj_cpu_decode_plan *dp;
    const fj_problem *p;
    const void *q, *k, *v;
    void *o;
    float *lse;
    const fj_exec_inputs *in;
    /* paged: this execute's chunk length and whether it is one task */
    int64_t chunk_len;
    bool one_task;
} decode_job;

static int64_t gcd64(int64_t a, int64_t b)
{
    while (b) {
        const int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* Most keys of a tensor whose rows lie `stride` elements apart that one
 * kernel call reads. A call reads its keys one head at a time, a few lines
 * of each row: rows a power of two apart fall in few of L1's sets (1 KiB
 * apart, 4 of them; 4 KiB, 1), and past L1_WAYS rows a set they would evict
 * each other before the task's next head reads the rest of those rows. So a
 * block's keys go in pieces of as many rows as the sets they fall in hold,
 * at least 16 (the kernels' group of keys) and at most the block; rows
 * whose stride is not a multiple of a line spread over every set. Where
 * measured this made rows 2 and 4 KiB apart (8 kv heads of 128 bf16
 * columns side by side; of 256) 3-40% faster (docs/benchmarks.md, "Paged
 * decode on the CPU"). */
static int64_t piece_keys(const fj_problem *p, int64_t stride)
{
    const int64_t bytes = (stride < 0 ? -stride : stride) * (int64_t)fj_dtype_size(p->dtype);
    if (bytes == 0 || bytes % 64) return BLOCK_KEYS;
    const int64_t sets = L1_SETS / gcd64(bytes / 64 % L1_SETS, L1_SETS);
    const int64_t keys = L1_WAYS * sets / 16 * 16;
    return keys < 16 ? 16 : keys > BLOCK_KEYS ? BLOCK_KEYS : keys;
}

/* One block of query positions: which, and the keys each sees. */
typedef struct pos_block {
    int64_t pos0;   /* its first position */
    int npos, rows; /* positions, and rows (positions x group) */
    int64_t lo[FJ_CPU_DECODE_MAX_ROWS], hi[FJ_CPU_DECODE_MAX_ROWS]; /* keys position t sees */
    int64_t jlo, jhi; /* the keys some position sees (jlo >= jhi: none) */
} pos_block;

static void make_block(const fj_problem *p, const fj_cpu_decode_plan *dp, int64_t pb,
                       pos_block *blk)
{
    blk->pos0 = pb * dp->positions;
    blk->npos =
        (int)(p->seqlen_q - blk->pos0 < dp->positions ? p->seqlen_q - blk->pos0 : dp->positions);
    blk->rows = blk->npos * p->group;
    blk->jlo = p->seqlen_k;
    blk->jhi = 0;
    for (int t = 0; t < blk->npos; t++) {
        fj_visible_keys(p, blk->pos0 + t, &blk->lo[t], &blk->hi[t]);
        if (blk->lo[t] >= blk->hi[t]) continue;
        if (blk->lo[t] < blk->jlo) blk->jlo = blk->lo[t];
        if (blk->hi[t] > blk->jhi) blk->jhi = blk->hi[t];
    }
}

/* What a task runs on: one batch entry (paged: one sequence) of the call,
 * as a problem of its own, its tensors' rows from batch index 0. */
typedef struct seq_view {
    const decode_job *j;
    const fj_problem *p; /* the call's (paged: a copy with the sequence's lengths and alignment) */
    int64_t b;           /* the batch entry or sequence */
    const void *q;       /* q, o: its rows (t, h) at fj_row_ptr(q, .., 0, t, h) */
    void *o;
    const void *k, *v; /* its keys likewise; paged: the pools, key j in page pages[j / page_size] */
    const int32_t *pages; /* paged: its block-table row; NULL: dense */
    float *lse;           /* row t of query head h at lse[h * lse_hs + t]; NULL: not wanted */
    int64_t lse_hs;
    int chunks; /* its key chunks */
    /* chunk c of kv head hk keeps its partial rows from row (part0 + c * part_c + hk * part_h) x
       dp->rows of the partial results */
    size_t part0, part_c, part_h;
    atomic_int *finished; /* [heads_kv]: its kv heads' chunks done */
} seq_view;

static const void *offset(const void *base, const fj_problem *p, int64_t elems)
{
    return base ? (const char *)base + elems * (int64_t)fj_dtype_size(p->dtype) : NULL;
}

/* Batch entry b of a dense call. */
static seq_view dense_view(const decode_job *j, int64_t b)
{
    const fj_problem *p = j->p;
    const fj_cpu_decode_plan *dp = j->dp;
    seq_view s = {
        .j = j,
        .p = p,
        .b = b,
        .q = offset(j->q, p, b * p->q_stride[FJ_AXIS_BATCH]),
        .o = (void *)offset(j->o, p, b * p->o_stride[FJ_AXIS_BATCH]),
        .k = offset(j->k, p, b * p->k_stride[FJ_AXIS_BATCH]),
        .v = offset(j->v, p, b * p->v_stride[FJ_AXIS_BATCH]),
        .lse = j->lse ? j->lse + b * p->heads_q * p->seqlen_q : NULL,
        .lse_hs = p->seqlen_q,
        .chunks = dp->chunks,
        .part0 = (size_t)b * p->heads_kv * dp->chunks,
        .part_c = 1,
        .part_h = (size_t)dp->chunks,
        .finished = dp->finished ? dp->finished + b * p->heads_kv : NULL,
    };
    return s;
}

/* Sequence b of a paged call as its own problem in *one (batch 1, its
 * query rows and KV length, the causal alignment and ALiBi offset of those,
 * as src/cpu/varlen.c gives each sequence); its query rows (0 with varlen:
 * nothing to write). */
static int sequence_problem(const decode_job *j, int64_t b, fj_problem *one)
{
    const fj_problem *p = j->p;
    const int32_t *cq = j->in->cu_seqlens_q;
    const int sq = p->varlen ? (int)(cq[b + 1] - cq[b]) : p->seqlen_q;
    const int sk = j->in->seqused_k[b];
    *one = *p;
    one->batch = 1;
    one->seqlen_q = sq;
    one->seqlen_k = sk;
    one->diag_offset = p->causal == FJ_CAUSAL_TOP_LEFT ? 0 : (int64_t)sk - sq;
    return sq;
}

/* Sequence b of a paged call (one: sequence_problem's): its query rows at
 * its batch entry (dense q) or its first token (varlen), its keys through
 * its block-table row, its lse at [b, heads_q, seqlen_q] or, varlen, at
 * [heads_q, total_q] from its first token. */
static seq_view paged_view(const decode_job *j, int64_t b, const fj_problem *one)
{
    const fj_problem *p = j->p;
    const fj_cpu_decode_plan *dp = j->dp;
    const int64_t t0 = p->varlen ? j->in->cu_seqlens_q[b] : 0;
    const int64_t q0 = p->varlen ? t0 * p->q_stride[FJ_AXIS_SEQ] : b * p->q_stride[FJ_AXIS_BATCH];
    const int64_t o0 = p->varlen ? t0 * p->o_stride[FJ_AXIS_SEQ] : b * p->o_stride[FJ_AXIS_BATCH];
    const seq_chunks *sc = &dp->sched[b];
    seq_view s = {
        .j = j,
        .p = one,
        .b = b,
        .q = offset(j->q, p, q0),
        .o = (void *)offset(j->o, p, o0),
        .k = j->k,
        .v = j->v,
        .pages = j->in->block_table + b * p->bt_stride,
        .lse = !j->lse     ? NULL
               : p->varlen ? j->lse + t0
                           : j->lse + b * p->heads_q * p->seqlen_q,
        .lse_hs = p->varlen ? j->in->total_q : p->seqlen_q,
        .chunks = sc->chunks,
        .part0 = (size_t)(sc->chunks > 1 ? sc->slot : 0) * p->heads_kv,
        .part_c = (size_t)p->heads_kv,
        .part_h = 1,
        .finished = dp->finished ? dp->finished + b * p->heads_kv : NULL,
    };
    return s;
}

/* Key j of kv head hk in a K or V tensor (stride st) of the view. */
static const void *key_row(const seq_view *s, const void *base, const int64_t st[3], int64_t j,
                           int64_t hk)
{
    const fj_problem *p = s->p;
    if (!s->pages) return fj_row_ptr(base, p->dtype, st, 0, j, hk);
    return fj_row_ptr(base, p->dtype, st, s->pages[j / p->page_size], j % p->page_size, hk);
}

/* The end of the piece of keys from j (< j1) of K (t 0) or V (1) that the
 * kernels take in one call: keys one row stride apart (to j1 when dense;
 * paged, to the end of j's page, or of the pages after it that follow it
 * in a pool whose pages are rows of that stride too), at most the plan's
 * piece of that tensor. */
static int64_t pages_end(const seq_view *s, const int64_t st[3], int64_t j, int64_t j1);

static int64_t run_end(const seq_view *s, int t, const int64_t st[3], int64_t j, int64_t j1)
{
    const int64_t most = s->j->dp->piece[t];
    if (j1 - j > most) j1 = j + most;
    return pages_end(s, st, j, j1);
}

/* The end of the keys from j (< j1) one row stride apart in memory: j1
 * when dense; paged, the end of j's page or of the pages after it that
 * follow it in the pool. */
static int64_t pages_end(const seq_view *s, const int64_t st[3], int64_t j, int64_t j1)
{
    if (!s->pages) return j1;
    const int64_t P = s->p->page_size;
    const bool joined = st[FJ_AXIS_BATCH] == P * st[FJ_AXIS_SEQ];
    int64_t e = (j / P + 1) * P;
    while (joined && e < j1 && s->pages[e / P] == s->pages[e / P - 1] + 1) e += P;
    return e < j1 ? e : j1;
}

/* One kv head's state in a worker's workspace, and the shared buffers. */
typedef struct decode_ws {
    void *q; /* rows x dpad floats, or bf16 for kernels that take bf16 */
    float *acc, *row_max, *row_sum;
    float *s, *scratch;
} decode_ws;

/* Head i (< heads_per_task) of worker `worker`'s task. */
static decode_ws worker_ws(const fj_cpu_decode_plan *dp, int worker, int i)
{
    unsigned char *base = dp->workspace + (size_t)worker * dp->ws_bytes;
    const size_t rows = (size_t)dp->rows * i;
    decode_ws w = {
        .q = base + dp->off_q + rows * dp->dpad * sizeof(float),
        .acc = (float *)(base + dp->off_acc) + rows * dp->dpad_v,
        .row_max = (float *)(base + dp->off_max) + rows,
        .row_sum = (float *)(base + dp->off_sum) + rows,
        .s = (float *)(base + dp->off_s) + rows * BLOCK_KEYS,
        .scratch = (float *)(base + dp->off_scratch),
    };
    return w;
}

/* A row of n floats (a multiple of 32) from column order into the kernels'
 * order (position i of each 32 holds column order[i]), and back. */
static void to_kernel_order(float *x, int n, const uint8_t *order, float *tmp)
{
    memcpy(tmp, x, (size_t)n * sizeof(float));
    for (int c = 0; c < n; c += 32)
        for (int i = 0; i < 32; i++) x[c + i] = tmp[c + order[i]];
}

static void to_column_order(float *x, int n, const uint8_t *order, float *tmp)
{
    memcpy(tmp, x, (size_t)n * sizeof(float));
    for (int c = 0; c < n; c += 32)
        for (int i = 0; i < 32; i++) x[c + order[i]] = tmp[c + i];
}

/* Head hk's query rows of the block in the kernels' form, zero-padded to
 * dpad. */
static void load_queries(const seq_view *sv, const decode_ws *w, int64_t hk, const pos_block *blk)
{
    const fj_problem *p = sv->p;
    const fj_cpu_decode_plan *dp = sv->j->dp;
    const int D = p->head_dim;
    for (int t = 0; t < blk->npos; t++)
        for (int h = 0; h < p->group; h++) {
            const int r = t * p->group + h;
            const void *src =
                fj_row_ptr(sv->q, p->dtype, p->q_stride, 0, blk->pos0 + t, hk * p->group + h);
            if (dp->kernels->q_bf16) {
                uint16_t *dst = (uint16_t *)w->q + (size_t)r * dp->dpad;
                memcpy(dst, src, (size_t)D * sizeof(uint16_t));
                memset(dst + D, 0, (size_t)(dp->dpad - D) * sizeof(uint16_t));
            } else {
                float *dst = (float *)w->q + (size_t)r * dp->dpad;
                fj_load_f32(dst, dp->dpad, src, p->dtype, 0, 1, D);
                memset(dst + D, 0, (size_t)(dp->dpad - D) * sizeof(float));
                if (dp->kernels->order)
                    to_kernel_order(dst, dp->dpad, dp->kernels->order, w->scratch);
            }
        }
}

/* The softcap on base-2 scores: x becomes out * tanh(in * x), out = c log2(e)
   and in its inverse (c tanh(s / c) in base 2); out 0: off. */
typedef struct cap_factors {
    float in, out;
} cap_factors;

/* One line of every 4 KiB of keys [a, e) of K (t 0) or V (1) of kv head
 * hk (and the heads beside it): prefetched ahead of the kernels, so that
 * the page walks and first misses of a piece start while the one before is
 * computed, where the hardware would start them only at its first row
 * (rows KiBs apart, a page of the pool anywhere; 1.1x on dense rows too). */
static void touch_keys(const seq_view *sv, int t, int64_t hk, int64_t a, int64_t e)
{
    const fj_problem *p = sv->p;
    const int64_t *st = t ? p->v_stride : p->k_stride;
    const void *base = t ? sv->v : sv->k;
    const int64_t row = st[FJ_AXIS_SEQ] * (int64_t)fj_dtype_size(p->dtype);
    const int64_t step = row >= 4096 || row <= 0 ? (row > 0 ? 1 : e - a) : 4096 / row;
    for (int64_t j = a; j < e; j += step) __builtin_prefetch(key_row(sv, base, st, j, hk), 0, 3);
}

/* What a chunk's task reads, in the order its kernels read it, as the
 * stream they prefetch (fj_prefetch_run) STREAM_PIECES pieces ahead of
 * their loads. Taken where each key's row of K and of V holds every kv head
 * side by side and nothing else, and the task takes them all: a block's
 * keys are then one run of bytes in K and one in V (paged: one per run of
 * pages that follow each other in the pool), read K then V, block after
 * block (key_block). The kernels read a piece one head at a time, 2 KiB or
 * more between their consecutive loads, which the hardware's stream
 * prefetchers do not follow; the prefetches go through the same bytes in
 * address order, spread over the compute. */
#define STREAM_PIECES 2

typedef struct read_stream {
    const seq_view *sv;
    int64_t hk0, c1;
    int64_t block;          /* the first key of the block the cursor is in */
    int t;                  /* and its tensor: 0 K, 1 V; -1: past the chunk */
    int64_t pos, stop;      /* the block's keys of that tensor after the run, and its end */
    const char *next, *end; /* the cursor: what is prefetched next, in that run */
} read_stream;

/* The cursor at the run of keys from j (< rs->stop) of the cursor's tensor
   that lie one after another in memory (every kv head: contiguous bytes;
   paged, to the end of the pages that follow each other in the pool). */
static void stream_from(read_stream *rs, int64_t j)
{
    const seq_view *sv = rs->sv;
    const fj_problem *p = sv->p;
    const int64_t *st = rs->t ? p->v_stride : p->k_stride;
    const void *base = rs->t ? sv->v : sv->k;
    rs->pos = pages_end(sv, st, j, rs->stop);
    rs->next = key_row(sv, base, st, j, rs->hk0);
    rs->end = rs->next + (rs->pos - j) * st[FJ_AXIS_SEQ] * (int64_t)fj_dtype_size(p->dtype);
}

/* The cursor at the first run of tensor t's keys of the cursor's block. */
static void stream_run(read_stream *rs, int t)
{
    rs->t = t;
    rs->stop = rs->c1 - rs->block < BLOCK_KEYS ? rs->c1 : rs->block + BLOCK_KEYS;
    stream_from(rs, rs->block);
}

/* The run after the cursor's: the rest of the block's keys in this tensor
   (the next pages), the block's V after its K, the next block's K after V,
   nothing past the chunk. */
static void stream_advance(read_stream *rs)
{
    if (rs->t < 0) return;
    if (rs->pos < rs->stop) {
        stream_from(rs, rs->pos);
        return;
    }
    if (rs->t == 0) {
        stream_run(rs, 1);
        return;
    }
    rs->block += BLOCK_KEYS;
    if (rs->block >= rs->c1) {
        rs->t = -1;
        rs->next = rs->end = NULL;
        return;
    }
    stream_run(rs, 0);
}

/* The next `bytes` of the stream for one kernel call (fewer at the end of
   a run: the next call starts the following one). */
static fj_prefetch_run stream_take(read_stream *rs, int64_t bytes)
{
    if (rs->t >= 0 && rs->next >= rs->end) stream_advance(rs);
    fj_prefetch_run r = {rs->next, rs->next};
    if (rs->t < 0) return r;
    r.end = rs->end - rs->next < bytes ? rs->end : rs->next + bytes;
    return r;
}

/* The cursor after a call that stopped at r.next. */
static void stream_taken(read_stream *rs, const fj_prefetch_run *r)
{
    if (rs->t >= 0) rs->next = r->next;
}

/* A stream over keys [c0, c1) of the task's kv heads from hk0, its cursor
   STREAM_PIECES pieces of K past the first key (those the hardware finds
   on its own, or touch_keys); off (always empty) where the plan has none. */
static read_stream stream_open(const seq_view *sv, int64_t hk0, int64_t c0, int64_t c1)
{
    read_stream rs = {.sv = sv, .hk0 = hk0, .c1 = c1, .block = c0, .t = -1};
    const fj_cpu_decode_plan *dp = sv->j->dp;
    if (!dp->stream || c0 >= c1) return rs;
    stream_run(&rs, 0);
    int64_t lead = STREAM_PIECES * dp->piece[0] * sv->p->k_stride[FJ_AXIS_SEQ] *
                   (int64_t)fj_dtype_size(sv->p->dtype);
    while (rs.t >= 0 && lead > 0) {
        const int64_t left = rs.end - rs.next;
        if (lead < left) {
            rs.next += lead;
            break;
        }
        lead -= left;
        rs.next = rs.end;
        stream_advance(&rs);
    }
    return rs;
}

/* Keys [j0, j0 + nk) of kv heads [hk0, hk0 + heads) (the worker's
 * workspace heads 0..heads - 1), of a chunk that ends at c1, for the rows
 * that see part of them. The kernels take a block in pieces (run_end: a
 * page of a paged block at most, rows that stay in L1), each piece's
 * scores written into its columns of the block and its values accumulated
 * from its columns, so that the softmax still steps once per block. Each
 * piece is read for every head of the task before the next (scores, then
 * values): where the heads of a key lie side by side, a piece is read
 * whole, as one sweep, before the next, and the kernels prefetch the
 * stream rs ahead of it (read_stream), or, where the plan has none, the
 * next piece's pages are touched first (touch_keys). */
static void key_block(const seq_view *sv, int worker, int64_t hk0, int heads, int64_t j0, int nk,
                      int64_t c1, float alpha, const cap_factors *cap, const pos_block *blk,
                      read_stream *rs)
{
    const fj_problem *p = sv->p;
    const decode_job *j = sv->j;
    const fj_cpu_decode_plan *dp = j->dp;
    const int64_t j1 = j0 + nk;
    /* The positions that see part of the block are consecutive (every mask
       is a band moving right with the position). */
    int ta = blk->npos, tb = 0;
    for (int t = 0; t < blk->npos; t++)
        if (blk->lo[t] < blk->hi[t] && blk->lo[t] < j1 && blk->hi[t] > j0) {
            if (t < ta) ta = t;
            tb = t + 1;
        }
    if (ta >= tb) return;
    /* a block skipped before this one left the stream behind it */
    if (rs->t >= 0 && rs->block < j0) *rs = stream_open(sv, hk0, j0, c1);
    const int ra = ta * p->group, nr = (tb - ta) * p->group;
    const size_t q_off = (size_t)ra * dp->dpad * (dp->kernels->q_bf16 ? sizeof(uint16_t) : 4);
    const size_t acc_off = (size_t)ra * dp->dpad_v;

    const int64_t es = (int64_t)fj_dtype_size(p->dtype);
    for (int64_t a = j0, e; a < j1; a = e) {
        e = run_end(sv, 0, p->k_stride, a, j1);
        if (!dp->stream) {
            /* the next piece's keys (this block's, or the next block's
               first) and this piece's values */
            touch_keys(sv, 0, hk0, e, e + (e - a) < c1 ? e + (e - a) : c1);
            touch_keys(sv, 1, hk0, a, e);
        }
        for (int i = 0; i < heads; i++) {
            const decode_ws w = worker_ws(dp, worker, i);
            fj_prefetch_run pf = stream_take(rs, (e - a) * p->head_dim * es);
            dp->kernels->scores((const char *)w.q + q_off, dp->dpad, nr,
                                key_row(sv, sv->k, p->k_stride, a, hk0 + i),
                                p->k_stride[FJ_AXIS_SEQ], (int)(e - a), p->head_dim, alpha,
                                w.s + (a - j0), BLOCK_KEYS, w.scratch, &pf);
            stream_taken(rs, &pf);
        }
    }
    for (int i = 0; i < heads; i++) {
        const decode_ws w = worker_ws(dp, worker, i);
        const int64_t hk = hk0 + i;
        for (int r = ra; r < ra + nr; r++) {
            const int t = r / p->group;
            float *srow = w.s + (size_t)(r - ra) * BLOCK_KEYS;
            int64_t a = blk->lo[t] > j0 ? blk->lo[t] - j0 : 0;
            int64_t e = blk->hi[t] < j1 ? blk->hi[t] - j0 : nk;
            if (a >= e) { /* a row of the range that sees none of this block */
                memset(srow, 0, (size_t)nk * sizeof(float));
                continue;
            }
            if (cap->out > 0.0f) fj_vsoftcap(srow + a, e - a, cap->in, cap->out);
            if (p->alibi) { /* after the cap: -slope |i + diag_offset - j|, in base 2 */
                const float s2 = (float)M_LOG2E * j->in->alibi_slopes[hk * p->group + r % p->group];
                const int64_t row = blk->pos0 + t;
                for (int64_t c = a; c < e; c++) srow[c] += fj_alibi_bias(p, s2, row, j0 + c);
            }
            for (int64_t c = 0; c < a; c++) srow[c] = -INFINITY;
            for (int64_t c = e; c < nk; c++) srow[c] = -INFINITY;
            float factor = fj_tiled_softmax_step(srow, nk, &w.row_max[r], &w.row_sum[r]);
            if (factor != 1.0f) fj_vscale(w.acc + (size_t)r * dp->dpad_v, dp->dpad_v, factor);
        }
    }
    if (dp->packed_v) { /* bf16 prefill: never paged */
        for (int i = 0; i < heads; i++) {
            const decode_ws w = worker_ws(dp, worker, i);
            const int64_t hk = hk0 + i;
            const uint16_t *packed =
                dp->packed_v +
                ((size_t)(sv->b * p->heads_kv + hk) * dp->packed_keys + (size_t)j0) * dp->dpad_v;
            dp->kernels->accumulate_packed(w.s, BLOCK_KEYS, nr,
                                           key_row(sv, sv->v, p->v_stride, j0, hk),
                                           p->v_stride[FJ_AXIS_SEQ], packed, nk, p->head_dim_v,
                                           w.acc + acc_off, dp->dpad_v, w.scratch);
        }
        return;
    }
    for (int64_t a = j0, e; a < j1; a = e) {
        e = run_end(sv, 1, p->v_stride, a, j1);
        for (int i = 0; i < heads; i++) {
            const decode_ws w = worker_ws(dp, worker, i);
            fj_prefetch_run pf = stream_take(rs, (e - a) * p->head_dim_v * es);
            dp->kernels->accumulate(w.s + (a - j0), BLOCK_KEYS, nr,
                                    key_row(sv, sv->v, p->v_stride, a, hk0 + i),
                                    p->v_stride[FJ_AXIS_SEQ], (int)(e - a), p->head_dim_v,
                                    w.acc + acc_off, dp->dpad_v, w.scratch, &pf);
            stream_taken(rs, &pf);
        }
    }
}

/* Row r of kv head hk: O = acc / sum, and its lse; O = 0 and lse = -inf when
 * the row sees no key, which the mask says, not the sum: a NaN or +inf score
 * (or only -inf ones) leaves the sum NaN, and the row NaN (docs/semantics.md,
 * "Non-finite values"). acc: in the kernels' order, dpad_v floats (tmp:
 * dpad_v floats of scratch). */
static void store_row(const seq_view *sv, int64_t hk, int64_t pos0, int r, float *acc, float max,
                      float sum, float *tmp)
{
    const fj_problem *p = sv->p;
    const fj_cpu_decode_plan *dp = sv->j->dp;
    if (dp->kernels->order) to_column_order(acc, dp->dpad_v, dp->kernels->order, tmp);
    const int64_t t = pos0 + r / p->group;
    const int64_t h = hk * p->group + r % p->group;
    void *dst = fj_row_ptr_mut(sv->o, p->dtype, p->o_stride, 0, t, h);
    int64_t lo, hi;
    fj_visible_keys(p, t, &lo, &hi);
    /* A row that sees no key: lse = its sink (-inf without one). The sink
       joins here, once, after every chunk's keys (split or not). */
    const float sink = p->sinks ? sv->j->in->sinks[h] : -INFINITY;
    float row_lse = sink;
    if (lo < hi) {
        const float f = p->sinks ? fj_sink_join((float)M_LOG2E * sink, &max, &sum, true) : 1.0f;
        fj_vscale(acc, p->head_dim_v, f / sum);
        fj_store_f32(dst, p->dtype, 0, acc, 0, 1, p->head_dim_v);
        row_lse = sum > 0.0f ? (float)(M_LN2 * max + log(sum)) : NAN;
    } else { /* the row sees no key */
        memset(dst, 0, (size_t)p->head_dim_v * fj_dtype_size(p->dtype));
    }
    if (sv->lse) sv->lse[h * sv->lse_hs + t] = row_lse;
}

/* Where chunk c of kv head hk keeps its partial rows (index of its first
 * row in part_max and part_sum). */
static size_t part_at(const seq_view *sv, int c, int64_t hk)
{
    return (sv->part0 + (size_t)c * sv->part_c + (size_t)hk * sv->part_h) * (size_t)sv->j->dp->rows;
}

/* The last chunk of kv head hk to finish: every chunk's partial merged into
 * each of its `rows` rows' output (acc: the worker's accumulator rows as
 * scratch). */
static void merge_chunks(const seq_view *sv, int64_t hk, int rows, float *acc, float *tmp)
{
    const fj_cpu_decode_plan *dp = sv->j->dp;
    for (int r = 0; r < rows; r++) {
        float m = -INFINITY;
        for (int c = 0; c < sv->chunks; c++) {
            float x = dp->part_max[part_at(sv, c, hk) + r];
            if (x > m) m = x;
        }
        float *out = acc + (size_t)r * dp->dpad_v;
        memset(out, 0, (size_t)dp->dpad_v * sizeof(float));
        float sum = 0.0f;
        bool nan = false; /* a chunk whose scores were not finite: the row is NaN */
        for (int c = 0; c < sv->chunks; c++) nan |= isnan(dp->part_sum[part_at(sv, c, hk) + r]);
        if (m > -INFINITY)
            for (int c = 0; c < sv->chunks; c++) {
                const size_t at = part_at(sv, c, hk) + r;
                if (!(dp->part_sum[at] > 0.0f)) continue; /* the row saw none of this chunk */
                const float wgt = fj_tiled_exp2(dp->part_max[at] - m);
                sum += wgt * dp->part_sum[at];
                const float *x = dp->part_acc + at * dp->dpad_v;
                for (int d = 0; d < dp->dpad_v; d++) out[d] += wgt * x[d];
            }
        if (nan) sum = NAN;
        store_row(sv, hk, 0, r, out, m, sum, tmp); /* chunks: one block of positions */
    }
}

/* Head hk's rows at the end of chunk c: the output, or its partial result
 * (and the merge, when it is the last of the head's chunks). */
static void finish_head(const seq_view *sv, const decode_ws *w, int64_t hk, int c,
                        const pos_block *blk)
{
    const fj_cpu_decode_plan *dp = sv->j->dp;
    if (sv->chunks == 1) {
        for (int r = 0; r < blk->rows; r++)
            store_row(sv, hk, blk->pos0, r, w->acc + (size_t)r * dp->dpad_v, w->row_max[r],
                      w->row_sum[r], w->scratch);
        return;
    }
    const size_t at = part_at(sv, c, hk);
    memcpy(dp->part_max + at, w->row_max, (size_t)blk->rows * sizeof(float));
    memcpy(dp->part_sum + at, w->row_sum, (size_t)blk->rows * sizeof(float));
    memcpy(dp->part_acc + at * dp->dpad_v, w->acc, (size_t)blk->rows * dp->dpad_v * sizeof(float));
    /* acq_rel: the last one sees every other chunk's partial */
    if (atomic_fetch_add_explicit(&sv->finished[hk], 1, memory_order_acq_rel) == sv->chunks - 1) {
        merge_chunks(sv, hk, blk->rows, w->acc, w->scratch);
        /* ready for the next execute (which the pool's lock orders after this one) */
        atomic_store_explicit(&sv->finished[hk], 0, memory_order_relaxed);
    }
}

/* Keys [c0, c1) (chunk c) of kv heads [hk0, hk0 + heads) for the block of
 * positions blk of the view. */
static void run_chunk(const seq_view *sv, int64_t hk0, int heads, const pos_block *blk, int c,
                      int64_t c0, int64_t c1, int worker)
{
    const fj_cpu_decode_plan *dp = sv->j->dp;
    const fj_problem *p = sv->p;
    float alpha = (float)(M_LOG2E * p->scale);
    cap_factors cap = {0.0f, 0.0f};
    if (p->softcap > 0.0f) {
        /* the kernels give q.k itself and the cap takes scale / c, which
           validation keeps finite (as tiled.c) */
        alpha = 1.0f;
        cap.out = (float)(M_LOG2E * p->softcap);
        cap.in = (float)((double)p->scale / p->softcap);
    }
    for (int i = 0; i < heads; i++) {
        const decode_ws w = worker_ws(dp, worker, i);
        for (int r = 0; r < blk->rows; r++) {
            w.row_max[r] = -INFINITY;
            w.row_sum[r] = 0.0f;
        }
        memset(w.acc, 0, (size_t)blk->rows * dp->dpad_v * sizeof(float));
        if (c0 < c1) load_queries(sv, &w, hk0 + i, blk);
    }
    read_stream rs = stream_open(sv, hk0, c0, c1);
    for (int64_t j0 = c0; j0 < c1; j0 += BLOCK_KEYS) {
        const int nk = (int)(c1 - j0 < BLOCK_KEYS ? c1 - j0 : BLOCK_KEYS);
        key_block(sv, worker, hk0, heads, j0, nk, c1, alpha, &cap, blk, &rs);
    }
    for (int i = 0; i < heads; i++) {
        const decode_ws w = worker_ws(dp, worker, i);
        finish_head(sv, &w, hk0 + i, c, blk);
    }
}

/* The kv heads of head group g: the first, and how many. */
static int group_heads(const fj_cpu_decode_plan *dp, const fj_problem *p, int64_t g, int64_t *hk0)
{
    *hk0 = g * dp->heads_per_task;
    return p->heads_kv - *hk0 < dp->heads_per_task ? (int)(p->heads_kv - *hk0) : dp->heads_per_task;
}

/* Chunk c of one (batch, head group, block of positions): units run the
 * blocks of a head group last to first (under a causal mask the last see
 * the most keys: heaviest first), so consecutive tasks share the group's K
 * and V in cache. */
static void run_unit(const decode_job *j, int64_t unit, int c, int worker)
{
    const fj_cpu_decode_plan *dp = j->dp;
    const fj_problem *p = j->p;
    const int64_t pb = dp->pos_blocks - 1 - unit % dp->pos_blocks;
    const int64_t group_unit = unit / dp->pos_blocks;
    const int64_t b = group_unit / dp->head_groups;
    int64_t hk0;
    const int heads = group_heads(dp, p, group_unit % dp->head_groups, &hk0);
    pos_block blk;
    make_block(p, dp, pb, &blk);
    int64_t c0 = blk.jlo, c1 = blk.jhi;
    /* packed V starts at key 0 in groups: blocks start on a group (the keys
       before jlo that this adds are masked for every row) */
    if (dp->packed_v && c0 < c1) c0 -= c0 % FJ_DECODE_PACK_KEYS;
    if (dp->chunks > 1) { /* one block of positions, its keys split */
        c0 = dp->chunk_start[c];
        c1 = dp->chunk_start[c + 1];
    }
    const seq_view sv = dense_view(j, b);
    run_chunk(&sv, hk0, heads, &blk, c, c0, c1, worker);
}

static void decode_task(void *arg, int64_t task, int worker)
{
    const decode_job *j = arg;
    const fj_cpu_decode_plan *dp = j->dp;
    if (dp->one_task) {
        for (int64_t unit = 0; unit < dp->units; unit++) run_unit(j, unit, 0, worker);
        return;
    }
    run_unit(j, task / dp->chunks, (int)(task % dp->chunks), worker);
}

/* Chunk c of head group g of sequence b of a paged call. */
static void run_sequence_chunk(const decode_job *j, int64_t b, int64_t g, int c, int worker)
{
    const fj_cpu_decode_plan *dp = j->dp;
    fj_problem one;
    if (sequence_problem(j, b, &one) == 0) return; /* no query rows */
    pos_block blk;
    make_block(&one, dp, 0, &blk);
    const seq_chunks *sc = &dp->sched[b];
    int64_t c0 = sc->key0, c1 = sc->key1;
    if (sc->chunks > 1) {
        c0 = sc->key0 + c * j->chunk_len;
        c1 = c0 + j->chunk_len < sc->key1 ? c0 + j->chunk_len : sc->key1;
    }
    int64_t hk0;
    const int heads = group_heads(dp, j->p, g, &hk0);
    const seq_view sv = paged_view(j, b, &one);
    run_chunk(&sv, hk0, heads, &blk, c, c0, c1, worker);
}

static void paged_task(void *arg, int64_t task, int worker)
{
    const decode_job *j = arg;
    const fj_cpu_decode_plan *dp = j->dp;
    const int64_t batch = j->p->batch;
    if (j->one_task) {
        for (int64_t b = 0; b < batch; b++)
            for (int64_t g = 0; g < dp->head_groups; g++) run_sequence_chunk(j, b, g, 0, worker);
        return;
    }
    /* the sequence whose tasks hold this one: the last b with task0[b] <= task */
    int64_t lo = 0, hi = batch;
    while (hi - lo > 1) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (dp->task0[mid] <= task) lo = mid;
        else hi = mid;
    }
    const int64_t local = task - dp->task0[lo];
    const int chunks = dp->sched[lo].chunks;
    run_sequence_chunk(j, lo, local / chunks, (int)(local % chunks), worker);
}

/* Packs the values of one (batch, kv head). */
static void pack_task(void *arg, int64_t task, int worker)
{
    (void)worker;
    const decode_job *j = arg;
    const fj_cpu_decode_plan *dp = j->dp;
    const fj_problem *p = j->p;
    const int64_t b = task / p->heads_kv, hk = task % p->heads_kv;
    dp->kernels->pack_values(fj_row_ptr(j->v, p->dtype, p->v_stride, b, 0, hk),
                             p->v_stride[FJ_AXIS_SEQ], p->seqlen_k, p->head_dim_v,
                             dp->packed_v + (size_t)task * dp->packed_keys * dp->dpad_v);
}

/* Keys per chunk for `work` keys (summed over every unit of the call) to
 * make about TASKS_PER_WORKER tasks per worker: none shorter than the
 * plan's least (MIN_CHUNK_KEYS, 16 when forced finer), a whole number of
 * key units; no split (INT64_MAX) on one worker. */
static int64_t chunk_length(const fj_cpu_decode_plan *dp, int64_t work)
{
    const int threads = fj_pool_threads(dp->pool);
    if (threads <= 1) return INT64_MAX;
    const int64_t tasks = (int64_t)TASKS_PER_WORKER * threads;
    int64_t len = (work + tasks - 1) / tasks;
    const int64_t least = dp->fine ? 16 : MIN_CHUNK_KEYS;
    if (len < least) len = least;
    return (len + dp->key_unit - 1) / dp->key_unit * dp->key_unit;
}

/* A paged call's chunks: each sequence's keys [key0, key1) (those some row
 * sees, key0 down to its page's start) in chunks of one length for the
 * call, chosen from the keys of every sequence (so a long sequence among
 * short ones is split, and equal ones split as a dense call of their
 * length would be); the first task of each sequence in task0; the tasks in
 * all. The partial results hold part_slots chunks: the length doubles
 * until the split sequences' chunks fit (the first length makes them fit
 * already: a split sequence has at most twice its keys / length chunks). */
static int64_t paged_schedule(fj_cpu_decode_plan *dp, decode_job *j)
{
    const fj_problem *p = j->p;
    const int64_t P = p->page_size;
    int64_t keys = 0;
    for (int64_t b = 0; b < p->batch; b++) {
        fj_problem one;
        seq_chunks *sc = &dp->sched[b];
        sc->key0 = sc->key1 = 0;
        sc->chunks = 1;
        sc->slot = 0;
        if (sequence_problem(j, b, &one) == 0) continue;
        pos_block blk;
        make_block(&one, dp, 0, &blk);
        if (blk.jlo >= blk.jhi) continue; /* no row sees a key */
        sc->key0 = blk.jlo - blk.jlo % P;
        sc->key1 = blk.jhi;
        keys += sc->key1 - sc->key0;
    }
    const double kv_bytes = (double)keys * p->heads_kv * (p->head_dim + p->head_dim_v) *
                            (double)fj_dtype_size(p->dtype);
    j->one_task = !dp->fine && kv_bytes < SERIAL_BYTES;
    j->chunk_len = j->one_task ? INT64_MAX : chunk_length(dp, keys * dp->head_groups);
    for (;;) {
        int slots = 0;
        dp->task0[0] = 0;
        for (int64_t b = 0; b < p->batch; b++) {
            seq_chunks *sc = &dp->sched[b];
            const int64_t n = sc->key1 - sc->key0;
            sc->chunks = n > j->chunk_len ? (int)((n + j->chunk_len - 1) / j->chunk_len) : 1;
            sc->slot = slots;
            if (sc->chunks > 1) slots += sc->chunks;
            const bool rows = !p->varlen || j->in->cu_seqlens_q[b + 1] > j->in->cu_seqlens_q[b];
            dp->task0[b + 1] = dp->task0[b] + (rows ? dp->head_groups * sc->chunks : 0);
            if (slots > dp->part_slots) break;
        }
        if (slots <= dp->part_slots) break;
        j->chunk_len *= 2;
    }
    int most = 1;
    for (int64_t b = 0; b < p->batch; b++)
        if (dp->sched[b].chunks > most) most = dp->sched[b].chunks;
    atomic_store_explicit(&dp->last_chunks, most, memory_order_relaxed);
    return j->one_task ? 1 : dp->task0[p->batch];
}

void fj_cpu_decode_execute(const fj_cpu_decode_plan *dp, const fj_problem *p, const void *q,
                           const void *k, const void *v, void *o, float *lse,
                           const fj_exec_inputs *in)
{
    if (dp->amx_prefill) {
        fj_cpu_prefill_amx_execute(dp->amx_prefill, p, q, k, v, o, lse, in);
        return;
    }
    decode_job job = {dp, p, q, k, v, o, lse, in, 0, false};
    if (dp->paged) {
        /* the chunks of this execute's lengths, in the plan's arrays: one
           execute at a time lays them out and runs them */
        fj_cpu_decode_plan *mut = (fj_cpu_decode_plan *)dp;
        pthread_mutex_lock(&mut->sched_lock);
        const int64_t tasks = paged_schedule(mut, &job);
        fj_pool_run(dp->pool, tasks, paged_task, &job);
        pthread_mutex_unlock(&mut->sched_lock);
        return;
    }
    const int64_t tasks = dp->one_task ? 1 : dp->units * dp->chunks;
    if (!dp->packed_v) {
        fj_pool_run(dp->pool, tasks, decode_task, &job);
        return;
    }
    /* two pool jobs: the lock keeps another call on this plan from packing
       between them */
    pthread_mutex_t *lock = (pthread_mutex_t *)&dp->pack_lock;
    pthread_mutex_lock(lock);
    fj_pool_run(dp->pool, (int64_t)p->batch * p->heads_kv, pack_task, &job);
    fj_pool_run(dp->pool, tasks, decode_task, &job);
    pthread_mutex_unlock(lock);
}

static size_t ws_part(size_t *cursor, size_t bytes)
{
    size_t at = *cursor;
    *cursor += (bytes + 63) & ~(size_t)63;
    return at;
}

/* Chunks per kv head for `threads` workers over `keys` keys (chunks of at
 * least min_keys). */
static int chunk_count(int64_t groups, int64_t keys, int threads, int min_keys)
{
    if (threads <= 1 || groups >= (int64_t)TASKS_PER_WORKER * threads) return 1;
    int64_t want = ((int64_t)TASKS_PER_WORKER * threads + groups - 1) / groups;
    int64_t most = keys / min_keys;
    if (want > most) want = most;
    return want < 1 ? 1 : (int)want;
}

void fj_cpu_decode_plan_info(const fj_cpu_decode_plan *dp, fj_plan_info *info)
{
    if (dp->amx_prefill) {
        fj_cpu_prefill_amx_plan_info(dp->amx_prefill, info);
        return;
    }
    snprintf(info->kernel, sizeof info->kernel, "cpu_decode_%s", dp->kernels->name);
    info->tiles[0] = '\0';
    info->tiles_source = FJ_TILES_HEURISTIC;
    info->threads = dp->one_task ? 1 : fj_pool_threads(dp->pool);
    info->splits = dp->chunks;
    /* paged: the latest execute's (before one, a batch of seqlen_k-key sequences') */
    const int last = dp->paged ? atomic_load_explicit(&dp->last_chunks, memory_order_relaxed) : 0;
    if (last > 0) info->splits = last;
}

void fj_cpu_decode_plan_destroy(fj_cpu_decode_plan *dp)
{
    if (!dp) return;
    fj_cpu_prefill_amx_plan_destroy(dp->amx_prefill);
    if (dp->packed_v) pthread_mutex_destroy(&dp->pack_lock);
    if (dp->paged) pthread_mutex_destroy(&dp->sched_lock);
    free(dp->sched);
    free(dp->task0);
    free(dp->packed_v);
    free(dp->chunk_start);
    free(dp->workspace);
    free(dp->part_acc);
    free(dp->part_max);
    free(dp->part_sum);
    free(dp->finished);
    free(dp);
}

static fj_status no_memory_status(size_t bytes)
{
    return fj_fail(FJ_ERR_OUT_OF_MEMORY, "cpu decode: cannot allocate %zu KiB of workspace",
                   bytes >> 10);
}

static fj_status no_memory(fj_cpu_decode_plan *dp, size_t bytes)
{
    fj_cpu_decode_plan_destroy(dp);
    return no_memory_status(bytes);
}

/* Whether the heads of one position lie side by side within its row of a
 * tensor (every head's row before the next position's): then one task takes
 * them all. */
static bool heads_interleaved(const fj_problem *p, const int64_t stride[3], int row)
{
    const int64_t hs = stride[FJ_AXIS_HEAD], ss = stride[FJ_AXIS_SEQ];
    return p->heads_kv > 1 && hs >= 0 && ss > 0 && hs * (p->heads_kv - 1) + row <= ss;
}

/* Each worker's share: the task's queries, accumulators, scores for one
 * block and a scratch block. False when out of memory. */
static bool alloc_workspace(fj_cpu_decode_plan *dp, int threads)
{
    const size_t R = (size_t)dp->rows * dp->heads_per_task, DP = (size_t)dp->dpad;
    const size_t DPV = (size_t)dp->dpad_v;
    const size_t f = sizeof(float);
    size_t cur = 0;
    dp->off_q = ws_part(&cur, R * DP * f);
    dp->off_s = ws_part(&cur, R * BLOCK_KEYS * f);
    dp->off_acc = ws_part(&cur, R * DPV * f);
    dp->off_max = ws_part(&cur, R * f);
    dp->off_sum = ws_part(&cur, R * f);
    /* the kernels' scratch: the scores' FJ_DECODE_MAX_BLOCK x dpad floats of
       scratch, the values' FJ_DECODE_MAX_BLOCK x dpad_v */
    dp->off_scratch = ws_part(&cur, (size_t)FJ_DECODE_MAX_BLOCK * (DP > DPV ? DP : DPV) * f);
    dp->ws_bytes = cur;
    return (dp->workspace = aligned_alloc(64, dp->ws_bytes * (size_t)threads)) != NULL;
}

/* V's head dim, where it differs from Q's and K's. */
static void describe_dims(const fj_problem *p, fj_strbuf *describe)
{
    if (p->head_dim_v != p->head_dim)
        fj_strbuf_printf(describe,
                         "head dims: q and k %d, v and o %d (head_dim_v): the scores' kernels "
                         "over %d, the values' and the accumulators over %d\n",
                         p->head_dim, p->head_dim_v, p->head_dim, p->head_dim_v);
}

/* The rest of a paged plan (decode-shaped: one block of positions): the
 * per-execute chunk arrays, partial results for the most chunks an execute
 * splits into (paged_schedule), the workspace, and its text. Chunks hold
 * whole pages so that a block of BLOCK_KEYS keys from a chunk's start
 * holds whole pages of 16 or 64 keys (one kernel call each, or one for a
 * run of consecutive pages), and whole groups of 16 keys for the
 * kernels: a multiple of both. */
static fj_status paged_plan_create(fj_cpu_decode_plan *dp, const fj_problem *p, int threads,
                                   bool interleaved, const char *why_kernels, fj_strbuf *describe)
{
    dp->paged = true;
    const int64_t P = p->page_size;
    dp->key_unit = P / gcd64(P, 16) * 16;
    /* a split sequence has fewer than 2 x its keys / chunk_len chunks, and
       chunk_len is at least the call's keys x head groups / (TASKS_PER_WORKER
       x threads): fewer than 2 x TASKS_PER_WORKER x threads / head groups
       chunks in all */
    const int64_t most =
        threads > 1
            ? (2 * (int64_t)TASKS_PER_WORKER * threads + dp->head_groups - 1) / dp->head_groups
            : 0;
    dp->part_slots = (int)most;
    atomic_init(&dp->last_chunks, 0);
    pthread_mutex_init(&dp->sched_lock, NULL);
    const size_t B = (size_t)p->batch, DP = (size_t)dp->dpad_v, f = sizeof(float);
    const size_t parts = (size_t)dp->part_slots * p->heads_kv * dp->rows;
    size_t part_bytes = 0;
    if (!(dp->sched = malloc(B * sizeof *dp->sched)) ||
        !(dp->task0 = malloc((B + 1) * sizeof *dp->task0)))
        return no_memory_status(B * sizeof *dp->sched + (B + 1) * sizeof *dp->task0);
    if (parts) {
        const size_t heads = B * p->heads_kv;
        part_bytes = parts * (DP + 2) * f + heads * sizeof(atomic_int);
        dp->part_acc = malloc(parts * DP * f);
        dp->part_max = malloc(parts * f);
        dp->part_sum = malloc(parts * f);
        dp->finished = malloc(heads * sizeof(atomic_int));
        if (!dp->part_acc || !dp->part_max || !dp->part_sum || !dp->finished)
            return no_memory_status(part_bytes);
        for (size_t h = 0; h < heads; h++) atomic_init(&dp->finished[h], 0);
    }
    if (!alloc_workspace(dp, threads)) return no_memory_status(dp->ws_bytes * (size_t)threads);

    /* What info and the text report: a batch of sequences of seqlen_k keys */
    pos_block all;
    make_block(p, dp, 0, &all);
    const int64_t keys = all.jlo < all.jhi ? all.jhi - (all.jlo - all.jlo % P) : 0;
    const double kv_bytes = (double)p->batch * keys * p->heads_kv * (p->head_dim + p->head_dim_v) *
                            (double)fj_dtype_size(p->dtype);
    dp->one_task = !dp->fine && kv_bytes < SERIAL_BYTES;
    const int64_t len =
        dp->one_task ? INT64_MAX : chunk_length(dp, (int64_t)p->batch * keys * dp->head_groups);
    dp->chunks = keys > len ? (int)((keys + len - 1) / len) : 1;
    fj_strbuf_printf(
        describe,
        "backend: cpu\n"
        "method: decode: %d query row(s) per kv head (%d position(s) x %d head(s)) share each K/V "
        "row, read once at its stored width (no BLAS, no packing); chosen because %d <= %d rows "
        "per kv head would leave sgemm packing K and V for a few rows\n"
        "keys: every sequence in one pass, K and V read through the block table where they lie "
        "in the pools: blocks of %d keys cut where a page ends (pages of %d "
        "keys; consecutive pages of a dense pool read as one run), each sequence's keys in "
        "chunks of whole pages\n"
        "split: %d kv head(s) per task (%s), %lld unit(s) of (sequence, head group); chunks "
        "laid out per execute from the sequences' lengths: about %d tasks for %d worker(s), "
        "chunks of at least %d keys in multiples of %lld, merged by lse, a call reading under "
        "%d KiB of K and V on the calling thread alone (sequences of seqlen_k keys: %d chunk(s) "
        "each%s)\n"
        "kernels: %s (%s)\n"
        "workspace: %zu bytes per thread, %d threads, %zu bytes of partial results (%d chunks)\n",
        dp->rows, p->seqlen_q, p->group, dp->rows, FJ_CPU_DECODE_MAX_ROWS, BLOCK_KEYS, p->page_size,
        dp->heads_per_task,
        interleaved ? "the heads of a position lie side by side" : "each head's rows lie apart",
        (long long)dp->units, TASKS_PER_WORKER * threads, threads, dp->fine ? 16 : MIN_CHUNK_KEYS,
        (long long)dp->key_unit, SERIAL_BYTES >> 10, dp->chunks, dp->one_task ? ", one task" : "",
        dp->kernels->name, why_kernels, dp->ws_bytes, threads, part_bytes, dp->part_slots);
    describe_dims(p, describe);
    return FJ_OK;
}

fj_status fj_cpu_decode_plan_create(fj_pool *pool, const fj_problem *p, fj_cpu_decode_plan **out,
                                    fj_strbuf *describe)
{
    *out = NULL;
    fj_cpu_decode_plan *dp = calloc(1, sizeof *dp);
    if (!dp) return fj_fail(FJ_ERR_OUT_OF_MEMORY, "cpu decode: out of memory for the plan");
    const int threads = fj_pool_threads(pool);
    dp->pool = pool;
    /* Decoding: every position in one block. bf16 prefill on AMX: blocks of
       as many positions as 16 rows hold (a tile's rows). */
    const bool prefill = rows_per_kv_head(p) > FJ_CPU_DECODE_MAX_ROWS;
    /* bf16 prefill on AMX: prefill_amx.c's blocks of rows where it takes
       the problem (the AMX row blocks below take the rest) */
    if (prefill && fj_cpu_prefill_amx_takes(p)) {
        fj_status s = fj_cpu_prefill_amx_plan_create(pool, p, &dp->amx_prefill, describe);
        if (s) {
            free(dp);
            return s;
        }
        *out = dp;
        return FJ_OK;
    }
    dp->positions = prefill ? FJ_CPU_DECODE_MAX_ROWS / p->group : p->seqlen_q;
    /* int64: seqlen_q (or heads_kv below) within a block of INT_MAX must not
       wrap the unit count negative, which would run nothing */
    dp->pos_blocks = ((int64_t)p->seqlen_q + dp->positions - 1) / dp->positions;
    dp->rows = dp->positions * p->group;
    dp->dpad = (p->head_dim + FJ_DECODE_PAD - 1) / FJ_DECODE_PAD * FJ_DECODE_PAD;
    dp->dpad_v = (p->head_dim_v + FJ_DECODE_PAD - 1) / FJ_DECODE_PAD * FJ_DECODE_PAD;
    const int mode = atomic_load(&forced_mode);
    const char *why_kernels = "this CPU has AVX-512";
    if (mode == FJ_CPU_DECODE_GENERIC) {
        why_kernels = "forced by fj_cpu_decode_force";
    } else if (p->dtype == FJ_BF16 && mode == FJ_CPU_DECODE_AUTO &&
               (dp->kernels = fj_decode_kernels_amx())) {
        why_kernels = "this CPU has AMX-BF16: scores as tile products";
    } else if (p->dtype == FJ_BF16 && !prefill && mode != FJ_CPU_DECODE_WIDENED &&
               (dp->kernels = fj_decode_kernels_avx512_bf16_dot())) {
        why_kernels = mode == FJ_CPU_DECODE_NO_AMX
                          ? "AMX turned off by fj_cpu_decode_force; AVX-512 BF16 dot products"
                          : "this CPU has AVX-512 BF16 (no AMX): dot products of bf16 pairs";
    } else if (!(dp->kernels = fj_decode_kernels_avx512(p->dtype))) {
        why_kernels = "no AVX-512 on this CPU";
    } else if (p->dtype == FJ_BF16 && mode == FJ_CPU_DECODE_NO_AMX) {
        why_kernels = "AMX turned off by fj_cpu_decode_force";
    } else if (p->dtype == FJ_BF16 && mode == FJ_CPU_DECODE_WIDENED) {
        why_kernels = "AMX and dot products turned off by fj_cpu_decode_force";
    }
    if (!dp->kernels) dp->kernels = fj_decode_kernels_generic(p->dtype);
    /* AMX's scores rebuild their query tiles at every call: whole blocks */
    const bool amx = dp->kernels == fj_decode_kernels_amx();
    dp->piece[0] = amx ? BLOCK_KEYS : piece_keys(p, p->k_stride[FJ_AXIS_SEQ]);
    dp->piece[1] = amx ? BLOCK_KEYS : piece_keys(p, p->v_stride[FJ_AXIS_SEQ]);

    dp->heads_per_task = 1;
    /* Prefill: one head per task whatever the layout, so that the blocks of
       positions that follow one another keep one head's K and V in cache
       (grouping 4 heads made the dense layout's bf16 prefill 2.3x slower). */
    const bool interleaved = !prefill && heads_interleaved(p, p->k_stride, p->head_dim) &&
                             heads_interleaved(p, p->v_stride, p->head_dim_v);
    if (interleaved) {
        int most = MAX_TASK_ROWS / dp->rows;
        dp->heads_per_task = p->heads_kv < most ? p->heads_kv : most;
    }
    /* the prefetch stream: a task's heads fill whole rows of K and V */
    dp->stream = !amx && dp->heads_per_task == p->heads_kv &&
                 p->k_stride[FJ_AXIS_HEAD] == p->head_dim &&
                 p->k_stride[FJ_AXIS_SEQ] == (int64_t)p->heads_kv * p->head_dim &&
                 p->v_stride[FJ_AXIS_HEAD] == p->head_dim_v &&
                 p->v_stride[FJ_AXIS_SEQ] == (int64_t)p->heads_kv * p->head_dim_v;
    dp->head_groups = ((int64_t)p->heads_kv + dp->heads_per_task - 1) / dp->heads_per_task;
    const int64_t units = dp->units = (int64_t)p->batch * dp->head_groups * dp->pos_blocks;
    const bool fine = dp->fine = atomic_load(&forced_split);
    if (p->paged) {
        fj_status s = prefill
                          ? fj_fail(FJ_ERR_UNSUPPORTED,
                                    "cpu decode: a paged KV cache with %lld query rows per kv "
                                    "head (more than %d) goes to the tiled path",
                                    (long long)rows_per_kv_head(p), FJ_CPU_DECODE_MAX_ROWS)
                          : paged_plan_create(dp, p, threads, interleaved, why_kernels, describe);
        if (s) {
            fj_cpu_decode_plan_destroy(dp);
            return s;
        }
        *out = dp;
        return FJ_OK;
    }

    /* The keys some row sees, the same for every (batch, kv head): split
       into chunks when there is one block of positions (decoding); blocks of
       positions take their own keys whole. */
    pos_block all;
    make_block(p, dp, 0, &all);
    int64_t jlo = all.jlo, jhi = all.jhi;
    if (prefill || jlo > jhi) jlo = jhi = 0; /* prefill: unused; decode: no row sees a key */
    /* A call that reads less than SERIAL_BYTES of K and V costs less than
       waking the workers: the calling thread does it alone. */
    const double kv_bytes = (double)p->batch * p->heads_kv * (double)(jhi - jlo) *
                            (p->head_dim + p->head_dim_v) * fj_dtype_size(p->dtype);
    dp->one_task = !prefill && !fine && threads > 1 && units > 1 && kv_bytes < SERIAL_BYTES;
    dp->chunks =
        dp->one_task ? 1 : chunk_count(units, jhi - jlo, threads, fine ? 16 : MIN_CHUNK_KEYS);
    int64_t step = (jhi - jlo + dp->chunks - 1) / dp->chunks;
    step = (step + 15) / 16 * 16; /* whole groups of 16 keys for the kernels */
    if (step > 0) dp->chunks = (int)((jhi - jlo + step - 1) / step);
    if (dp->chunks < 1) dp->chunks = 1;
    if (!(dp->chunk_start = malloc(sizeof(int64_t) * ((size_t)dp->chunks + 1))))
        return no_memory(dp, sizeof(int64_t) * ((size_t)dp->chunks + 1));
    for (int c = 0; c <= dp->chunks; c++) {
        int64_t at = jlo + (int64_t)c * step;
        dp->chunk_start[c] = at < jhi ? at : jhi;
    }

    if (!alloc_workspace(dp, threads)) return no_memory(dp, dp->ws_bytes * (size_t)threads);
    const size_t DP = (size_t)dp->dpad_v, f = sizeof(float); /* partial rows: head_dim_v */
    size_t part_bytes = 0;
    if (dp->chunks > 1) {
        const size_t heads = (size_t)p->batch * p->heads_kv;
        const size_t parts = heads * dp->chunks * dp->rows;
        part_bytes = parts * (DP + 2) * f + heads * sizeof(atomic_int);
        dp->part_acc = malloc(parts * DP * f);
        dp->part_max = malloc(parts * f);
        dp->part_sum = malloc(parts * f);
        dp->finished = malloc(heads * sizeof(atomic_int));
        if (!dp->part_acc || !dp->part_max || !dp->part_sum || !dp->finished)
            return no_memory(dp, part_bytes);
        for (size_t h = 0; h < heads; h++) atomic_init(&dp->finished[h], 0);
    }

    const int64_t tasks = dp->one_task ? 1 : units * dp->chunks;
    size_t packed_bytes = 0;
    if (prefill && dp->kernels->pack_values) {
        dp->packed_keys =
            (p->seqlen_k + FJ_DECODE_PACK_KEYS - 1) / FJ_DECODE_PACK_KEYS * FJ_DECODE_PACK_KEYS;
        packed_bytes = (size_t)p->batch * p->heads_kv * dp->packed_keys * DP * sizeof(uint16_t);
        if (!(dp->packed_v = malloc(packed_bytes))) return no_memory(dp, packed_bytes);
        pthread_mutex_init(&dp->pack_lock, NULL);
    }
    if (prefill) {
        fj_strbuf_printf(describe,
                         "backend: cpu\n"
                         "method: AMX row blocks: blocks of %d query rows per kv head (%d "
                         "position(s) x %d head(s)) stream the keys they see, K and V read at "
                         "bf16 (no BLAS, no conversion); chosen because bf16 tile products on "
                         "AMX-BF16 outrun sgemm on converted floats\n"
                         "split: %d kv head(s) per task (%s); %lld blocks of positions per kv "
                         "head, last first; %lld task(s) for %d worker(s); blocks of %d keys\n"
                         "kernels: %s (%s)%s\n"
                         "workspace: %zu bytes per thread, %d threads, 0 bytes of partial "
                         "results, %zu bytes of packed V\n",
                         dp->rows, dp->positions, p->group, dp->heads_per_task,
                         interleaved ? "the heads of a position lie side by side"
                                     : "each head's rows lie apart",
                         (long long)dp->pos_blocks, (long long)tasks, threads, BLOCK_KEYS,
                         dp->kernels->name, why_kernels,
                         dp->packed_v ? "; V packed into tiles once per call" : "", dp->ws_bytes,
                         threads, packed_bytes);
        describe_dims(p, describe);
        *out = dp;
        return FJ_OK;
    }
    fj_strbuf_printf(describe,
                     "backend: cpu\n"
                     "method: decode: %d query row(s) per kv head (%d position(s) x %d head(s)) "
                     "share each K/V row, read once at its stored width (no BLAS, no packing); "
                     "chosen because %d <= %d rows per kv head would leave sgemm packing K and V "
                     "for a few rows\n"
                     "split: %d kv head(s) per task (%s), %lld unit(s) of (batch, head "
                     "group); keys [%lld, %lld) in %d chunk(s) of %lld, %lld task(s) for %d "
                     "worker(s)%s%s; blocks of %d keys\n"
                     "kernels: %s (%s)\n"
                     "workspace: %zu bytes per thread, %d threads, %zu bytes of partial results\n",
                     dp->rows, p->seqlen_q, p->group, dp->rows, FJ_CPU_DECODE_MAX_ROWS,
                     dp->heads_per_task,
                     interleaved ? "the heads of a position lie side by side"
                                 : "each head's rows lie apart",
                     (long long)units, (long long)jlo, (long long)jhi, dp->chunks, (long long)step,
                     (long long)tasks, threads, dp->chunks > 1 ? ", merged by lse" : "",
                     tasks == 1 && threads > 1 ? " (one task: on the calling thread alone)" : "",
                     BLOCK_KEYS, dp->kernels->name, why_kernels, dp->ws_bytes, threads, part_bytes);
    describe_dims(p, describe);
    *out = dp;
    return FJ_OK;
}
