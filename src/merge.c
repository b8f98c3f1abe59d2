/* fj_merge: the public entry point of merging two partial attention results.
 * The desc's rules are desc.c's (fj_merge_problem_init); here are the
 * pointers' (NULL, alignment, the aliasing rule), then the backend's merge
 * op through the registry. */
#include <stdint.h>
#include <string.h>

#include "context.h"
#include "problem.h"
#include "status.h"

static bool same_strides(const int64_t a[3], const int64_t b[3])
{
    return a[0] == b[0] && a[1] == b[1] && a[2] == b[2];
}

/* o may be o_a or o_b only with that input's strides: each element is then
   read and written by the same step, so the merge is in place. */
static fj_status check_alias(const char *in_name, const void *in, const int64_t in_stride[3],
                             const char *stride_name, const void *o, const int64_t o_stride[3])
{
    if (o != in || same_strides(in_stride, o_stride)) return FJ_OK;
    return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                   "fj_merge: o is %s but o_stride {%lld, %lld, %lld} differs from %s {%lld, "
                   "%lld, %lld}: an output may alias an input only with the same strides",
                   in_name, (long long)o_stride[0], (long long)o_stride[1], (long long)o_stride[2],
                   stride_name, (long long)in_stride[0], (long long)in_stride[1],
                   (long long)in_stride[2]);
}

fj_status fj_merge(fj_context *ctx, const fj_merge_desc *d, const void *o_a, const float *lse_a,
                   const void *o_b, const float *lse_b, void *o, float *lse, void *stream)
{
    fj_clear_error();
    if (!ctx) return fj_fail(FJ_ERR_INVALID_ARGUMENT, "fj_merge: ctx is NULL");
    fj_merge_problem m;
    fj_status s = fj_merge_problem_init(&m, d);
    if (s) return s;
    const struct {
        const char *name;
        const void *ptr;
        size_t align;
    } t[6] = {
        {"o_a", o_a, fj_dtype_size(m.dtype)}, {"lse_a", lse_a, sizeof(float)},
        {"o_b", o_b, fj_dtype_size(m.dtype)}, {"lse_b", lse_b, sizeof(float)},
        {"o", o, fj_dtype_size(m.dtype)},     {"lse", lse, sizeof(float)},
    };
    for (int i = 0; i < 6; i++) {
        if (!t[i].ptr) {
            if (i == 5) continue; /* lse: NULL is "not wanted" */
            return fj_fail(FJ_ERR_INVALID_ARGUMENT, "fj_merge: %s is NULL", t[i].name);
        }
        if ((uintptr_t)t[i].ptr % t[i].align)
            return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                           "fj_merge: %s (%p) is not aligned to its element size (%zu bytes)",
                           t[i].name, t[i].ptr, t[i].align);
    }
    if ((s = check_alias("o_a", o_a, m.a_stride, "a_stride", o, m.o_stride)) ||
        (s = check_alias("o_b", o_b, m.b_stride, "b_stride", o, m.o_stride)))
        return s;
    const fj_backend_ops *ops = ctx->entry->ops;
    if (!ops->merge)
        return fj_fail(FJ_ERR_UNSUPPORTED, "fj_merge: %s has no merge", ctx->entry->title);
    return ops->merge(ctx, &m, o_a, lse_a, o_b, lse_b, o, lse, stream);
}
