/* The paged KV cache (FJ_FEATURE_PAGED_KV) on the CPU backends.
 *
 * k and v are pools [num_pages, page_size, heads_kv, head_dim] (v's rows
 * head_dim_v long: each tensor is copied at its own row length) (the desc's
 * k_stride/v_stride step a page, a row, a head); sequence b's key j is row
 * j % page_size of page block_table[b * stride + j / page_size].
 *
 * Decode-shaped problems (few query rows per kv head) on the cpu backend
 * read the keys through the block table where they lie (src/cpu/decode.c,
 * run by varlen.c): nothing here. The other paths (the tiled
 * path, the reference backend, bf16 prefill on AMX) read a sequence's keys
 * as one strided tensor, so varlen.c has each sequence's keys copied out of
 * the pages into a dense [keys, heads_kv, head_dim] buffer first
 * (fj_cpu_paged_keys): a run of pages consecutive in the pool at a time
 * (one memcpy when the pool is dense, else one per row or per head's row),
 * split among the pool's workers when the sequence is long; nothing copied
 * at all when the whole sequence is one run of a dense pool (its keys
 * already are such a tensor, inside the pool).
 *
 * src/sequences.c (fj_sequences_check) reads every value the execute will
 * use before anything is written: an entry outside the pool or a length
 * past the table's pages is an error naming it, never a read out of
 * bounds. */
#include <stdio.h>
#include <string.h>

#include "cpu/paged.h"
#include "status.h"

typedef struct gather_job {
    const fj_problem *p;
    const char *src[2]; /* the k and v pools */
    char *dst[2];       /* the dense buffers */
    const int64_t *stride[2];
    int dim[2]; /* elements of a row: head_dim, head_dim_v */
    const fj_paged_run *runs;
    size_t es;
} gather_job;

/* A pool whose pages are dense [page_size, heads_kv, dim] one after
   another: a run of pages is one block of memory. */
static bool dense_pool(const fj_problem *p, const int64_t s[3], int dim)
{
    const int64_t row = (int64_t)p->heads_kv * dim;
    return s[FJ_AXIS_HEAD] == dim && s[FJ_AXIS_SEQ] == row &&
           s[FJ_AXIS_BATCH] == row * p->page_size;
}

static void gather_run(void *arg, int64_t task, int worker)
{
    (void)worker;
    const gather_job *j = arg;
    const fj_problem *p = j->p;
    const fj_paged_run *r = &j->runs[task];
    const size_t hkv = (size_t)p->heads_kv, es = j->es;
    for (int t = 0; t < 2; t++) {
        const int64_t *s = j->stride[t];
        const size_t D = (size_t)j->dim[t];
        char *dst = j->dst[t] + (size_t)r->first_key * hkv * D * es;
        const char *page = j->src[t] + (size_t)(r->first_page * s[FJ_AXIS_BATCH]) * es;
        if (dense_pool(p, s, j->dim[t])) {
            memcpy(dst, page, (size_t)r->keys * hkv * D * es);
            continue;
        }
        /* the run's keys page by page (a run of one page unless the pool
           is dense), each row whole when its heads are contiguous */
        for (int k = 0; k < r->keys; k++) {
            const char *row = page + (size_t)(k * s[FJ_AXIS_SEQ]) * es;
            char *out = dst + (size_t)k * hkv * D * es;
            if (s[FJ_AXIS_HEAD] == (int64_t)D) memcpy(out, row, hkv * D * es);
            else
                for (size_t h = 0; h < hkv; h++)
                    memcpy(out + h * D * es, row + (size_t)((int64_t)h * s[FJ_AXIS_HEAD]) * es,
                           D * es);
        }
    }
}

/* Past this many bytes (k and v) a sequence's copy is shared among the
   pool's workers. */
enum { PARALLEL_BYTES = 256 << 10, RUN_BYTES = 1 << 20 };

void fj_cpu_paged_keys(const fj_problem *p, fj_pool *pool, const void *k, const void *v, int b,
                       const int32_t *block_table, int keys, void *buf_k, void *buf_v,
                       fj_paged_run *runs, const void **kb, const void **vb)
{
    const size_t es = fj_dtype_size(p->dtype);
    /* a key's K and V rows, all heads: the bytes a run's length is bounded by */
    const size_t row_bytes =
        (size_t)p->heads_kv * (p->head_dim > p->head_dim_v ? p->head_dim : p->head_dim_v) * es;
    const int32_t *row = block_table + (int64_t)b * p->bt_stride;
    const int P = p->page_size, pages = (int)(((int64_t)keys + P - 1) / P);
    const bool dense =
        dense_pool(p, p->k_stride, p->head_dim) && dense_pool(p, p->v_stride, p->head_dim_v);
    /* runs of consecutive pages (only a dense pool's make one block),
       bounded so that a long sequence's copy still splits among workers */
    int n = 0;
    for (int j = 0; j < pages; j++) {
        const int nk = keys - j * P < P ? keys - j * P : P;
        fj_paged_run *last = n ? &runs[n - 1] : NULL;
        if (last && dense && row[j] == last->first_page + last->keys / P && last->keys % P == 0 &&
            (size_t)(last->keys + nk) * row_bytes <= RUN_BYTES) {
            last->keys += nk;
            continue;
        }
        runs[n++] = (fj_paged_run){.first_page = row[j], .first_key = j * P, .keys = nk};
    }
    /* one run of a dense pool: the keys are a dense tensor already (a
       RUN_BYTES split of it too: its runs follow one another) */
    bool one_block = dense && n >= 1;
    for (int i = 1; one_block && i < n; i++)
        one_block = runs[i].first_page == runs[i - 1].first_page + runs[i - 1].keys / P;
    if (one_block) {
        *kb = (const char *)k + (size_t)(runs[0].first_page * p->k_stride[FJ_AXIS_BATCH]) * es;
        *vb = (const char *)v + (size_t)(runs[0].first_page * p->v_stride[FJ_AXIS_BATCH]) * es;
        return;
    }
    *kb = buf_k;
    *vb = buf_v;
    gather_job job = {
        .p = p,
        .src = {k, v},
        .dst = {buf_k, buf_v},
        .stride = {p->k_stride, p->v_stride},
        .dim = {p->head_dim, p->head_dim_v},
        .runs = runs,
        .es = es,
    };
    if ((size_t)keys * row_bytes * 2 >= PARALLEL_BYTES && fj_pool_threads(pool) > 1)
        fj_pool_run(pool, n, gather_run, &job);
    else
        for (int i = 0; i < n; i++) gather_run(&job, i, 0);
}
