/* flash_tma's tensor maps and the order of its work tiles (tma_launch.h). */
#include "cuda/tma_launch.h"

#include <string.h>

#include "status.h"

/* K and V of the (head, batch) pairs that run side by side should stay in
 * L2 while every query tile of those pairs reads them: a third of L2, the
 * rest is for Q, O and whatever else runs. (Two thirds, FlashAttention-3's
 * budget of 32 MB of the H100's 50, measured slower on most rows:
 * docs/benchmarks.md.) The blocks take the tiles in order from one counter,
 * so the tiles in flight are always the same group's or two neighbours'. */
#define L2_SHARE_DIVISOR 3

static void tensor_of(fj_tma_layout *l, int which, int64_t rows, int heads, int batch,
                      const int64_t stride[3], uint32_t head_dim, uint32_t box_rows)
{
    l->tensor[which].dim[0] = head_dim;
    l->tensor[which].dim[1] = (cuuint64_t)rows;
    l->tensor[which].dim[2] = (cuuint64_t)heads;
    l->tensor[which].dim[3] = (cuuint64_t)batch;
    l->tensor[which].stride[0] = (cuuint64_t)stride[FJ_AXIS_SEQ] * 2u;
    l->tensor[which].stride[1] = (cuuint64_t)stride[FJ_AXIS_HEAD] * 2u;
    l->tensor[which].stride[2] = (cuuint64_t)stride[FJ_AXIS_BATCH] * 2u;
    l->tensor[which].box_rows = box_rows;
}

void fj_tma_layout_make(const fj_problem *p, const fj_kernel_desc *k, size_t l2_bytes,
                        fj_tma_layout *out)
{
    memset(out, 0, sizeof *out);
    out->data_type = k->dtype == FJ_BF16 ? FJ_CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                         : FJ_CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    const uint32_t d = k->head_dim;
    out->widths[0] = d >= 64 ? 64 : 0;
    out->widths[1] = d % 64 >= 32 ? 32 : 0;
    out->widths[2] = d % 32 == 16 ? 16 : 0;
    tensor_of(out, FJ_TMA_Q, p->seqlen_q, p->heads_q, p->batch, p->q_stride, d, 64);
    tensor_of(out, FJ_TMA_K, p->seqlen_k, p->heads_kv, p->batch, p->k_stride, d, k->block_n);
    tensor_of(out, FJ_TMA_V, p->seqlen_k, p->heads_kv, p->batch, p->v_stride, d, k->block_n);
    tensor_of(out, FJ_TMA_O, p->seqlen_q, p->heads_q, p->batch, p->o_stride, d, 64);

    out->m_blocks = (int)((p->seqlen_q + (int64_t)k->block_m - 1) / k->block_m);
    const int64_t pairs = (int64_t)p->heads_q * p->batch;
    out->tiles = (int)(out->m_blocks * pairs);
    /* Pairs go side by side in groups whose K and V fit in L2, so that each
       pair's keys come from memory once. K and V bytes per (head, batch)
       pair, shared by the group's heads: */
    const double kv_bytes = (double)p->seqlen_k * d * 2.0 * 2.0 / p->group;
    double fit = (double)(l2_bytes / L2_SHARE_DIVISOR) / (kv_bytes > 1 ? kv_bytes : 1);
    int64_t group = fit < 1 ? 1 : fit > (double)pairs ? pairs : (int64_t)fit;
    /* whole GQA groups, so the heads sharing K and V stay together */
    if (p->group > 1 && group >= p->group) group -= group % p->group;
    out->head_group = (int)(group < 1 ? 1 : group);
}

static const char *const tensor_names[FJ_TMA_TENSORS] = {"q", "k", "v", "o"};

fj_status fj_tma_params_make(const fj_cuda_api *api, const fj_tma_layout *l, const void *q,
                             const void *k, const void *v, const void *o, fj_tma_params *out)
{
    memset(out, 0, sizeof *out);
    const void *ptr[FJ_TMA_TENSORS] = {q, k, v, o};
    fj_tensor_map *maps[FJ_TMA_TENSORS] = {out->q, out->k, out->v, out->o};
    for (int which = 0; which < FJ_TMA_TENSORS; which++) {
        for (int w = 0; w < 3; w++) {
            const uint32_t width = l->widths[w];
            if (!width) continue;
            const uint32_t box[4] = {width, l->tensor[which].box_rows, 1, 1};
            const uint32_t element_strides[4] = {1, 1, 1, 1};
            const int swizzle = width == 64   ? FJ_CU_TENSOR_MAP_SWIZZLE_128B
                                : width == 32 ? FJ_CU_TENSOR_MAP_SWIZZLE_64B
                                              : FJ_CU_TENSOR_MAP_SWIZZLE_32B;
            CUresult r =
                api->cuTensorMapEncodeTiled(&maps[which][w], l->data_type, 4,
                                            (void *)(uintptr_t)ptr[which], l->tensor[which].dim,
                                            l->tensor[which].stride, box, element_strides,
                                            FJ_CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                                            FJ_CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                                            FJ_CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
            if (r != FJ_CUDA_SUCCESS) {
                fj_status s = fj_cuda_fail(api, r, "cuTensorMapEncodeTiled");
                return fj_fail_prefix(
                    s == FJ_ERR_OUT_OF_MEMORY ? s : FJ_ERR_UNSUPPORTED,
                    "cuda: the copy engine cannot address %s (dims %llu x %llu x %llu x %llu, "
                    "strides %llu, %llu, %llu bytes, box %u x %u)",
                    tensor_names[which], (unsigned long long)l->tensor[which].dim[0],
                    (unsigned long long)l->tensor[which].dim[1],
                    (unsigned long long)l->tensor[which].dim[2],
                    (unsigned long long)l->tensor[which].dim[3],
                    (unsigned long long)l->tensor[which].stride[0],
                    (unsigned long long)l->tensor[which].stride[1],
                    (unsigned long long)l->tensor[which].stride[2], box[0], box[1]);
            }
        }
    }
    out->tiles = l->tiles;
    out->m_blocks = l->m_blocks;
    out->head_group = l->head_group;
    return FJ_OK;
}
