/* The tile kernels' walk (tiled_avx512.c, tiled_avx512_bf16.c) over n
 * items, keys for the scores or head-dim columns for the values: groups of
 * FJ_TILED_GROUP, then tails of 8, 4, 2 and 1. STEP(NR, at) takes items
 * [at, at + NR) with NR a constant, so each kernel's register arrays of NR
 * are unrolled for it. */
#ifndef FJ_CPU_TILED_GROUPS_H
#define FJ_CPU_TILED_GROUPS_H

/* Items per full pass: 12 x 2 vectors of accumulators next to the two
   query (or P) vectors and the broadcast. */
#define FJ_TILED_GROUP 12

#define FJ_TILED_GROUPS(n, STEP)                                                              \
    do {                                                                                      \
        int at_ = 0;                                                                          \
        for (; at_ + FJ_TILED_GROUP <= (n); at_ += FJ_TILED_GROUP) STEP(FJ_TILED_GROUP, at_); \
        if ((n)-at_ >= 8) {                                                                   \
            STEP(8, at_);                                                                     \
            at_ += 8;                                                                         \
        }                                                                                     \
        if ((n)-at_ >= 4) {                                                                   \
            STEP(4, at_);                                                                     \
            at_ += 4;                                                                         \
        }                                                                                     \
        if ((n)-at_ >= 2) {                                                                   \
            STEP(2, at_);                                                                     \
            at_ += 2;                                                                         \
        }                                                                                     \
        if ((n)-at_ >= 1) STEP(1, at_);                                                       \
    } while (0)

#endif
