/* Addressing of the strided [batch, seq, head, head_dim] tensors. */
#ifndef FJ_TENSOR_ACCESS_H
#define FJ_TENSOR_ACCESS_H

#include <stdint.h>

#include "problem.h"

/* Element (b, s, h, 0) of a tensor with the given strides. */
static inline const void *fj_row_ptr(const void *base, fj_dtype t, const int64_t stride[3],
                                     int64_t b, int64_t s, int64_t h)
{
    int64_t off = b * stride[FJ_AXIS_BATCH] + s * stride[FJ_AXIS_SEQ] + h * stride[FJ_AXIS_HEAD];
    return (const char *)base + off * fj_dtype_size(t);
}

static inline void *fj_row_ptr_mut(void *base, fj_dtype t, const int64_t stride[3], int64_t b,
                                   int64_t s, int64_t h)
{
    return (void *)fj_row_ptr(base, t, stride, b, s, h);
}

#endif
