/* The persistent flash_tma grid's tile lists under a causal mask: which
 * work tiles each block takes, in which order, computed once per plan. */
#ifndef FJ_CUDA_TMA_SCHEDULE_H
#define FJ_CUDA_TMA_SCHEDULE_H

#include <stddef.h>
#include <stdint.h>

#include "cuda/jit/kernel_desc.h"
#include "cuda/tma_launch.h"
#include "problem.h"

typedef struct fj_tma_schedule {
    int32_t *table; /* blocks + 1 offsets, then the tile ids; malloc'd */
    size_t entries; /* blocks + 1 + tiles */
    int bands;      /* query-tile bands the list walks (1: none) */
    double balance; /* the busiest block's modelled load over the mean */
} fj_tma_schedule;

/* Deals the layout's work tiles (kernel k on the launch view p) to `blocks`
 * blocks: block i runs tiles table[blocks + 1 + table[i]] up to (not
 * including) table[blocks + 1 + table[i + 1]], in that order. FJ_OK, or
 * FJ_ERR_OUT_OF_MEMORY. */
fj_status fj_tma_schedule_make(const fj_problem *p, const fj_kernel_desc *k, const fj_tma_layout *l,
                               int blocks, fj_tma_schedule *out);

void fj_tma_schedule_free(fj_tma_schedule *s);

#endif
