/* The causal flash_tma grid's tile lists (src/cuda/tma_schedule.c), on the
 * host: every work tile listed exactly once, the offsets a partition, each
 * listed tile's work (its key tiles, from the problem's own band rule)
 * summed per block within the modelled balance the plan reports, and that
 * balance near the bound on the large causal grids. No GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "cuda/jit/kernel_desc.h"
#include "cuda/tma_launch.h"
#include "cuda/tma_schedule.h"
#include "problem.h"

/* Key tiles of query tile mi under the kernel's order (longest first),
   counted by walking rows, not by the schedule's formula. */
static int walked_key_tiles(const fj_problem *p, int block_m, int block_n, int m0)
{
    int64_t lo = INT64_MAX, hi = 0;
    for (int64_t r = m0; r < p->seqlen_q && r < (int64_t)m0 + block_m; r++) {
        int64_t l, h;
        fj_visible_keys(p, r, &l, &h);
        if (h > l) {
            if (l < lo) lo = l;
            if (h > hi) hi = h;
        }
    }
    return hi > lo ? (int)((hi + block_n - 1) / block_n - lo / block_n) : 0;
}

static void check_one(int batch, int hq, int hkv, int sq, int sk, int window_left, int blocks,
                      double max_balance)
{
    fj_attention_desc d;
    fj_attention_desc_init(&d, batch, hq, hkv, sq, sk, 128, FJ_BF16);
    d.causal = FJ_CAUSAL_BOTTOM_RIGHT;
    d.window_left = window_left;
    fj_problem p;
    assert_int_equal(fj_problem_init(&p, &d), FJ_OK);
    fj_kernel_desc k;
    fj_kernel_desc_default(&p, 90, &k);
    k.block_m = 128;
    k.block_n = 128;
    fj_tma_layout l;
    fj_tma_layout_make(&p, &k, (size_t)50 << 20, &l);
    if (blocks > l.tiles) blocks = l.tiles;
    fj_tma_schedule s;
    assert_int_equal(fj_tma_schedule_make(&p, &k, &l, blocks, &s), FJ_OK);
    assert_int_equal(s.entries, (size_t)blocks + 1 + (size_t)l.tiles);
    const int32_t *offs = s.table, *ids = s.table + blocks + 1;
    assert_int_equal(offs[0], 0);
    assert_int_equal(offs[blocks], l.tiles);
    char *seen = calloc((size_t)l.tiles, 1);
    assert_non_null(seen);
    double total = 0, most = 0;
    const int64_t pairs = (int64_t)p.heads_q * p.batch;
    for (int b = 0; b < blocks; b++) {
        assert_true(offs[b] <= offs[b + 1]);
        double load = 0;
        for (int32_t i = offs[b]; i < offs[b + 1]; i++) {
            const int32_t t = ids[i];
            assert_true(t >= 0 && t < l.tiles);
            assert_int_equal(seen[t], 0);
            seen[t] = 1;
            /* the kernel's tile_of */
            const int64_t per_section = (int64_t)l.m_blocks * l.head_group;
            const int64_t section = t / per_section, rest = t % per_section;
            const int64_t left = pairs - section * l.head_group;
            const int64_t here = left < l.head_group ? left : l.head_group;
            const int mi = (int)(rest / here);
            const int m0 = (l.m_blocks - 1 - mi) * (int)k.block_m;
            load += walked_key_tiles(&p, (int)k.block_m, (int)k.block_n, m0) + 1;
        }
        total += load;
        if (load > most) most = load;
    }
    for (int t = 0; t < l.tiles; t++) assert_int_equal(seen[t], 1);
    free(seen);
    const double balance = most / (total / blocks);
    print_message("b%d h%d/%d sq%d sk%d window %d, %d blocks: %d tiles, groups of %d pairs, %d "
                  "band(s), balance %.3f (reported %.3f)\n",
                  batch, hq, hkv, sq, sk, window_left, blocks, l.tiles, l.head_group, s.bands,
                  balance, s.balance);
    assert_true(balance < s.balance + 1e-9 && balance > s.balance - 1e-9);
    if (max_balance > 0) assert_true(balance <= max_balance);
    fj_tma_schedule_free(&s);
    assert_null(s.table);
}

/* The Hopper grid's causal rows on 132 SMs: close to even. */
static void test_grid_rows_balanced(void **state)
{
    (void)state;
    check_one(16, 16, 16, 1024, 1024, -1, 132, 1.05);
    check_one(4, 16, 16, 4096, 4096, -1, 132, 1.03);
    check_one(4, 16, 4, 4096, 4096, -1, 132, 1.03);
    check_one(4, 32, 32, 4096, 4096, -1, 132, 1.03);
    check_one(1, 16, 16, 16384, 16384, -1, 132, 1.03);
    check_one(1, 8, 8, 16384, 16384, -1, 132, 1.03);
    check_one(4, 8, 8, 4096, 4096, -1, 132, 1.05);
    check_one(4, 12, 12, 4096, 4096, -1, 132, 1.03);
}

/* Odd shapes: Sq != Sk both ways, a window, few tiles, one block, primes. */
static void test_odd_shapes_partition(void **state)
{
    (void)state;
    const unsigned seed = (unsigned)time(NULL);
    print_message("seed %u\n", seed);
    srand(seed);
    check_one(1, 1, 1, 1, 1, -1, 132, 0);
    check_one(1, 3, 1, 129, 4099, -1, 132, 0);
    check_one(2, 5, 5, 4099, 127, -1, 7, 0);
    check_one(3, 7, 7, 1000, 1000, 300, 132, 0);
    check_one(2, 4, 2, 777, 777, -1, 1, 0);
    for (int i = 0; i < 20; i++) {
        const int hkv = 1 + rand() % 4, g = 1 + rand() % 4;
        check_one(1 + rand() % 4, hkv * g, hkv, 1 + rand() % 3000, 1 + rand() % 3000,
                  rand() % 3 ? -1 : rand() % 500, 1 + rand() % 140, 0);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grid_rows_balanced),
        cmocka_unit_test(test_odd_shapes_partition),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
