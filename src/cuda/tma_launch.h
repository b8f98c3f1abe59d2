/* What a flash_tma launch needs beyond fj_fwd_params: the tensor maps of q,
 * k, v and o (one per column-block width, made for each execute's pointers
 * by cuTensorMapEncodeTiled) and the persistent grid's tile order. The layout
 * is fixed at plan time, so execute only encodes and copies. */
#ifndef FJ_CUDA_TMA_LAUNCH_H
#define FJ_CUDA_TMA_LAUNCH_H

#include <stddef.h>
#include <stdint.h>

#include "cuda/cuda_api.h"
#include "cuda/jit/kernel_desc.h"
#include "problem.h"
/* fj_tma_params: one definition shared with the generated source */
#include "../../kernel_templates/fwd_params.h"

enum { FJ_TMA_Q, FJ_TMA_K, FJ_TMA_V, FJ_TMA_O, FJ_TMA_TENSORS };

typedef struct fj_tma_layout {
    int data_type;      /* FJ_CU_TENSOR_MAP_DATA_TYPE_* */
    uint32_t widths[3]; /* column-block widths in use: 64, 32, 16 (0: none) */
    struct {
        cuuint64_t dim[4];    /* head_dim, rows, heads, batch */
        cuuint64_t stride[3]; /* bytes: row, head, batch */
        uint32_t box_rows;    /* 64 for q and o (a consumer's rows), block_n for k, v */
    } tensor[FJ_TMA_TENSORS];
    int tiles, m_blocks, head_group;
} fj_tma_layout;

/* The layout for kernel k on the launch view p; l2_bytes: the device's L2,
 * which sets how many (head, batch) pairs run side by side. */
void fj_tma_layout_make(const fj_problem *p, const fj_kernel_desc *k, size_t l2_bytes,
                        fj_tma_layout *out);

/* The kernel's second parameter block for these pointers. FJ_ERR_UNSUPPORTED
 * naming the tensor and the driver's error when cuTensorMapEncodeTiled
 * rejects one (a layout the copy engine cannot address). */
fj_status fj_tma_params_make(const fj_cuda_api *api, const fj_tma_layout *l, const void *q,
                             const void *k, const void *v, const void *o, fj_tma_params *out);

#endif
