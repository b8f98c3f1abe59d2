#include "cuda/jit/launch_view.h"

#include "cuda/jit/template_table.h"

static bool rows_are_one_sequence(const fj_problem *p, const int64_t stride[3])
{
    return p->seqlen_q == 1 || stride[FJ_AXIS_HEAD] == p->seqlen_q * stride[FJ_AXIS_SEQ];
}

void fj_launch_view_unpacked(const fj_problem *p, fj_problem *out)
{
    *out = *p;
    bool windowed = p->window_left >= 0 || p->window_right >= 0;
    if (!windowed && p->causal == FJ_CAUSAL_BOTTOM_RIGHT && p->seqlen_q == 1) {
        out->causal = FJ_CAUSAL_NONE;
        out->masked = false;
    }
}

bool fj_launch_view(const fj_problem *p, fj_problem *out)
{
    fj_launch_view_unpacked(p, out);
    bool windowed = p->window_left >= 0 || p->window_right >= 0;
    /* Varlen rows are tokens of a packed tensor: its heads are not rows of
       one sequence apart (a paged plan's dense queries pack as before). */
    if (p->varlen || p->group < 2 || p->seqlen_q > FJ_GQA_PACK_MAX_SEQLEN_Q || windowed ||
        out->causal != FJ_CAUSAL_NONE || !rows_are_one_sequence(p, p->q_stride) ||
        !rows_are_one_sequence(p, p->o_stride))
        return false;
    int64_t g = p->group;
    out->heads_q = p->heads_kv;
    out->group = 1;
    out->seqlen_q = (int)(g * p->seqlen_q);
    out->diag_offset = (int64_t)p->seqlen_k - out->seqlen_q;
    /* Row r = g' * seqlen_q + i sits at head stride * g' + seq stride * i,
       which is seq stride * r when the heads are seqlen_q rows apart (and
       head stride * r when seqlen_q == 1). */
    out->q_stride[FJ_AXIS_SEQ] =
        p->seqlen_q == 1 ? p->q_stride[FJ_AXIS_HEAD] : p->q_stride[FJ_AXIS_SEQ];
    out->o_stride[FJ_AXIS_SEQ] =
        p->seqlen_q == 1 ? p->o_stride[FJ_AXIS_HEAD] : p->o_stride[FJ_AXIS_SEQ];
    out->q_stride[FJ_AXIS_HEAD] = g * p->q_stride[FJ_AXIS_HEAD];
    out->o_stride[FJ_AXIS_HEAD] = g * p->o_stride[FJ_AXIS_HEAD];
    return true;
}

bool fj_launch_view_takes(const fj_problem *p, uint32_t template_id, uint32_t block_m,
                          uint32_t warps)
{
    /* flash_fwd.cu ALIBI_PACKED: one 16-row m tile per warp */
    return !p->alibi || (template_id == FJ_TEMPLATE_FLASH_FWD && block_m <= 16u * warps);
}
