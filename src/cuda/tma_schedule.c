/* The persistent flash_tma grid's tile lists under a causal mask.
 *
 * Under a causal mask a query tile's work is its count of key tiles, from
 * one on the first query tile to all of them on the last. Dealt in one list
 * of all (head, batch) pairs' tiles, longest first, the blocks end evenly,
 * but every round of the list touches every pair's K and V, so each pair's
 * keys come from memory again in every round (about 8 times at 4k keys),
 * which the unmasked kernel avoids by running pairs side by side in groups
 * that fit in L2 (the layout's head_group). Groups dealt round-robin leave
 * the blocks uneven (a block that drew a group's long tiles in one round
 * draws the next group's long ones too). So the list here walks the groups
 * and gives each tile to the block with the least work so far (list
 * scheduling, which a dynamic scheduler would do at run time, with the
 * modelled work in place of the clock); blocks then finish within about one
 * short tile of each other, except that a group's long tiles late in the
 * list still land on blocks that are nearly done. The list is therefore
 * also tried in bands of query tiles (all groups' longest tiles first, then
 * the next band...): more bands end more evenly and read K and V from
 * memory once per band. The fewest bands within BALANCE_GOAL of the bound
 * win. */
#include "cuda/tma_schedule.h"

#include <stdlib.h>
#include <string.h>

#include "status.h"

/* A tile's fixed work (its first S without a P V beside it, its last P V,
   the epilogue) in key tiles. */
#define TILE_FIXED_STEPS 1
#define BALANCE_GOAL 1.02
#define MAX_BANDS 8

typedef struct {
    int64_t load;
    int block;
} heap_item;

static bool heap_less(heap_item a, heap_item b)
{
    return a.load < b.load || (a.load == b.load && a.block < b.block);
}

static void heap_down(heap_item *h, int n, int i)
{
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && heap_less(h[l], h[m])) m = l;
        if (r < n && heap_less(h[r], h[m])) m = r;
        if (m == i) return;
        heap_item t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

/* Key tiles of the query tile whose rows start at m0 (the kernel's
   key_tiles, from the same band rule). */
static int key_tile_count(const fj_problem *p, const fj_kernel_desc *k, int64_t m0)
{
    int64_t rows = p->seqlen_q - m0 < (int64_t)k->block_m ? p->seqlen_q - m0 : k->block_m;
    int64_t lo_first, hi_first, lo_last, hi_last;
    fj_visible_keys(p, m0, &lo_first, &hi_first);
    fj_visible_keys(p, m0 + rows - 1, &lo_last, &hi_last);
    if (lo_first > p->seqlen_k) lo_first = p->seqlen_k;
    if (hi_last <= lo_first) return 0;
    const int64_t bn = k->block_n;
    return (int)((hi_last + bn - 1) / bn - lo_first / bn);
}

/* The tile ids in the order of `bands` bands (see the top), into order[]. */
static void list_order(const fj_tma_layout *l, int64_t pairs, int bands, int32_t *order)
{
    const int mb = l->m_blocks, g = l->head_group;
    const int per_band = (mb + bands - 1) / bands;
    size_t at = 0;
    for (int b0 = 0; b0 < mb; b0 += per_band) {
        const int b1 = b0 + per_band < mb ? b0 + per_band : mb;
        for (int64_t s0 = 0; s0 < pairs; s0 += g) {
            const int here = pairs - s0 < g ? (int)(pairs - s0) : g;
            const int64_t section = s0 / g;
            for (int mi = b0; mi < b1; mi++)
                for (int j = 0; j < here; j++)
                    order[at++] = (int32_t)(section * (int64_t)mb * g + (int64_t)mi * here + j);
        }
    }
}

/* Deals the list's tiles (cost[i]: the i-th one's) to the blocks, each to
   the least loaded so far (ties to the lower index): owner[i] is the i-th
   tile's block; returns the busiest block's load. */
static int64_t deal(size_t tiles, const int *cost, int blocks, heap_item *heap, int32_t *owner)
{
    for (int i = 0; i < blocks; i++) heap[i] = (heap_item){0, i};
    int64_t most = 0;
    for (size_t i = 0; i < tiles; i++) {
        owner[i] = heap[0].block;
        heap[0].load += cost[i];
        if (heap[0].load > most) most = heap[0].load;
        heap_down(heap, blocks, 0);
    }
    return most;
}

fj_status fj_tma_schedule_make(const fj_problem *p, const fj_kernel_desc *k, const fj_tma_layout *l,
                               int blocks, fj_tma_schedule *out)
{
    memset(out, 0, sizeof *out);
    const int64_t pairs = (int64_t)p->heads_q * p->batch;
    const size_t tiles = (size_t)l->tiles;
    const int mb = l->m_blocks;
    int32_t *order = malloc(tiles * sizeof *order);
    int32_t *best_order = malloc(tiles * sizeof *best_order);
    int32_t *owner = malloc(tiles * sizeof *owner);
    int32_t *best_owner = malloc(tiles * sizeof *best_owner);
    int *cost = malloc(tiles * sizeof *cost);
    int *steps = malloc((size_t)mb * sizeof *steps);
    heap_item *heap = malloc((size_t)blocks * sizeof *heap);
    out->entries = (size_t)blocks + 1 + tiles;
    out->table = malloc(out->entries * sizeof *out->table);
    fj_status st = FJ_OK;
    if (!order || !best_order || !owner || !best_owner || !cost || !steps || !heap || !out->table) {
        st = fj_fail(FJ_ERR_OUT_OF_MEMORY, "cuda: out of memory for the %zu-tile schedule", tiles);
        goto done;
    }
    /* the kernel's tile_of: query tile mi of a pair starts at row
       (mb - 1 - mi) * block_m, so the longest come first */
    int64_t total = 0, longest = 0;
    for (int mi = 0; mi < mb; mi++) {
        steps[mi] = key_tile_count(p, k, (int64_t)(mb - 1 - mi) * k->block_m) + TILE_FIXED_STEPS;
        total += steps[mi] * pairs;
        if (steps[mi] > longest) longest = steps[mi];
    }
    const double mean = (double)total / blocks;
    const double bound = mean > (double)longest ? mean : (double)longest;
    int64_t best = -1;
    for (int bands = 1; bands <= MAX_BANDS && bands <= mb; bands *= 2) {
        list_order(l, pairs, bands, order);
        for (size_t i = 0; i < tiles; i++) {
            /* an id's query tile, as the kernel's tile_of finds it: the ids
               run section by section, each section's query tiles with the
               section's pairs side by side */
            const int64_t g = l->head_group, per_section = (int64_t)mb * g;
            const int64_t section = order[i] / per_section, rest = order[i] % per_section;
            const int64_t here = pairs - section * g < g ? pairs - section * g : g;
            cost[i] = steps[rest / here];
        }
        const int64_t most = deal(tiles, cost, blocks, heap, owner);
        if (best < 0 || most < best) {
            best = most;
            out->bands = bands;
            memcpy(best_order, order, tiles * sizeof *order);
            memcpy(best_owner, owner, tiles * sizeof *owner);
        }
        if ((double)most <= BALANCE_GOAL * bound) break;
    }
    out->balance = mean > 0 ? (double)best / mean : 1.0;
    /* offsets by counting, then each block's tiles in dealing order */
    int32_t *offs = out->table, *ids = out->table + blocks + 1;
    memset(offs, 0, ((size_t)blocks + 1) * sizeof *offs);
    for (size_t i = 0; i < tiles; i++) offs[best_owner[i] + 1]++;
    for (int i = 0; i < blocks; i++) offs[i + 1] += offs[i];
    for (int i = 0; i < blocks; i++) heap[i].load = offs[i]; /* next free slot per block */
    for (size_t i = 0; i < tiles; i++) ids[heap[best_owner[i]].load++] = best_order[i];
done:
    free(order);
    free(best_order);
    free(owner);
    free(best_owner);
    free(cost);
    free(steps);
    free(heap);
    if (st) fj_tma_schedule_free(out);
    return st;
}

void fj_tma_schedule_free(fj_tma_schedule *s)
{
    free(s->table);
    memset(s, 0, sizeof *s);
}
