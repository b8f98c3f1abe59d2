#include "vmath.h"

FJ_VECTOR_CLONES
float fj_vmax(const float *x, int64_t n)
{
    /* several accumulators so the compiler need not reassociate a single one */
    float m[8] = {x[0], x[0], x[0], x[0], x[0], x[0], x[0], x[0]};
    int64_t j = 0;
    for (; j + 8 <= n; j += 8)
        for (int k = 0; k < 8; k++) m[k] = x[j + k] > m[k] ? x[j + k] : m[k];
    for (; j < n; j++) m[0] = x[j] > m[0] ? x[j] : m[0];
    float r = m[0];
    for (int k = 1; k < 8; k++) r = m[k] > r ? m[k] : r;
    return r;
}

FJ_VECTOR_CLONES
float fj_vexp_scaled_sum(float *x, int64_t n, float scale, float shift)
{
    float s[8] = {0};
    int64_t j = 0;
    for (; j + 8 <= n; j += 8)
        for (int k = 0; k < 8; k++) {
            float e = fj_expf(x[j + k] * scale - shift);
            x[j + k] = e;
            s[k] += e;
        }
    for (; j < n; j++) {
        float e = fj_expf(x[j] * scale - shift);
        x[j] = e;
        s[0] += e;
    }
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

FJ_VECTOR_CLONES
void fj_vscale(float *x, int64_t n, float a)
{
    for (int64_t j = 0; j < n; j++) x[j] *= a;
}

FJ_VECTOR_CLONES
void fj_vexp(float *y, const float *x, int64_t n)
{
    for (int64_t j = 0; j < n; j++) y[j] = fj_expf(x[j]);
}
