#include "convert.h"

#include "vmath.h"

FJ_VECTOR_CLONES
void fj_load_f32(float *dst, int64_t dst_ld, const void *src, fj_dtype t, int64_t src_ld,
                 int64_t rows, int64_t cols)
{
    for (int64_t r = 0; r < rows; r++) {
        float *d = dst + r * dst_ld;
        if (t == FJ_F32) {
            memcpy(d, (const float *)src + r * src_ld, (size_t)cols * sizeof(float));
        } else if (t == FJ_F16) {
            const uint16_t *s = (const uint16_t *)src + r * src_ld;
            for (int64_t c = 0; c < cols; c++) d[c] = fj_f16_to_f32(s[c]);
        } else {
            const uint16_t *s = (const uint16_t *)src + r * src_ld;
            for (int64_t c = 0; c < cols; c++) d[c] = fj_bf16_to_f32(s[c]);
        }
    }
}

FJ_VECTOR_CLONES
void fj_store_f32(void *dst, fj_dtype t, int64_t dst_ld, const float *src, int64_t src_ld,
                  int64_t rows, int64_t cols)
{
    for (int64_t r = 0; r < rows; r++) {
        const float *s = src + r * src_ld;
        if (t == FJ_F32) {
            memcpy((float *)dst + r * dst_ld, s, (size_t)cols * sizeof(float));
        } else if (t == FJ_F16) {
            uint16_t *d = (uint16_t *)dst + r * dst_ld;
            for (int64_t c = 0; c < cols; c++) d[c] = fj_f32_to_f16(s[c]);
        } else {
            uint16_t *d = (uint16_t *)dst + r * dst_ld;
            for (int64_t c = 0; c < cols; c++) d[c] = fj_f32_to_bf16(s[c]);
        }
    }
}
