/* Rows of float16 / bfloat16 <-> float32 for the CPU backends; the scalar
 * conversions they are built from are the core's (src/half.h). */
#ifndef FJ_CONVERT_H
#define FJ_CONVERT_H

#include <stdint.h>
#include <string.h>

#include "flashjit.h"
#include "half.h"

/* Loads rows x cols elements (rows src_ld elements apart) into dst (rows
 * dst_ld floats apart) as float32. */
void fj_load_f32(float *dst, int64_t dst_ld, const void *src, fj_dtype t, int64_t src_ld,
                 int64_t rows, int64_t cols);

/* Stores rows x cols floats (src_ld apart) into dst of dtype t (dst_ld apart),
 * rounding to nearest-even. */
void fj_store_f32(void *dst, fj_dtype t, int64_t dst_ld, const float *src, int64_t src_ld,
                  int64_t rows, int64_t cols);

#endif
