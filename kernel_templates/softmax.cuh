/* softmax.cuh: the online softmax of the attention templates, on the score
 * and output fragments one warp holds in mma.sync's C layout (common.cuh):
 * s[mt][nt][e] is element e of n8 tile nt of the warp's 16-row m tile mt,
 * rows g and g+8 (hh 0 and 1) of the m tile, columns 2t, 2t+1 of the n8
 * tile, with g = lane / 4, t = lane % 4; e = 2 * hh + (column & 1). A row's
 * values sit in the 4 lanes of a quad. flash_fwd's warps hold MT m tiles,
 * flash_wgmma's one (a wgmma m64nN accumulator gives each warp of the
 * warpgroup exactly these fragments); NT and NDT are the n8 tiles of S and of
 * O. Pasted after attention_rows.cuh for the attention templates (src/cuda/
 * jit/codegen.c).
 *
 * Base 2: the scores arrive unscaled, and the running row max m is kept in
 * the scaled log2 domain (scale = |scale * log2 e|), so P = exp2(s * scale -
 * m) is one FMA and one ex2 per score.
 *
 * Lazy rescaling (as in FlashAttention-4): m only moves when some row of the
 * warp sees a score above m + FJ_RESCALE_LOG2; then every row of the warp
 * moves to its true max and O and l are rescaled by exp2(m_old - m_new).
 * Otherwise m stays a stale lower bound, P <= 2^FJ_RESCALE_LOG2, and the
 * multiplies of the rescale are skipped (measured in flash_fwd: +3 % at
 * D = 128). The result is the same function: O
 * and l always share one m, and O / l and lse = m + log2(l) do not depend on
 * which m it is. The test is a warp vote, so the branch is uniform.
 *
 * MASKED sub-tiles may hold rows whose every score so far is -inf; such a
 * row keeps m = -inf and uses 0 in the subtraction, so exp2 gives 0, never
 * NaN (and a row leaving -inf always triggers the rescale, with alpha 0).
 *
 * The pieces are separate so that a kernel whose O is still being written by
 * an asynchronous MMA (flash_wgmma's pipelined loop) can apply the rescale
 * to O later (online_softmax_deferred, then rescale_o); the others rescale in
 * place (online_softmax). */
#ifndef FJ_SOFTMAX_CUH
#define FJ_SOFTMAX_CUH

#ifndef FJ_RESCALE_LOG2
#define FJ_RESCALE_LOG2 8.0f
#endif

#ifndef FJ_SOFTCAP
#define FJ_SOFTCAP 0
#endif

namespace fja {

/* The logit softcap (FJ_SOFTCAP kernels only; docs/semantics.md): each raw
 * score s (q.k, sign-corrected for a negative scale) becomes
 * tanh(|scale| s / c) = 1 - 2 / (1 + 2^(s * cap_in)), cap_in = 2 log2(e)
 * |scale| / c, and the softmax then runs with scale c log2(e) in place of
 * |scale| log2(e): exp2(c log2(e) tanh(..) - m) = exp(c tanh(..) - m ln 2).
 * Applied before the mask (whose -inf must stay -inf). One ex2 and one rcp
 * (MUFU) per score, three FMA-pipe operations (and the series below 1/16,
 * five more): the absolute error of tanh is
 * within about 2^-21 (ex2.approx 2^-22 relative, rcp.approx 1 ulp; the
 * rounding of 1 - 2r near 0 adds 2^-24), so the capped score is off by at
 * most c 2^-21, as P's relative error, where |y| >= 1/16, i.e. by at most
 * 2^-17 of itself; below, the series' relative error. tanh.approx.f32 would save the rcp
 * but its 2^-11 relative error makes c 2^-11 (2.4 % of P at c = 50): beyond
 * the f16 tolerance for c > 4. Saturates exactly: 2^s overflows to inf and
 * rcp(inf) = 0 gives 1; 2^s = 0 gives -1; NaN stays NaN. */
__device__ __forceinline__ float softcap_tanh(float s, float cap_in)
{
    const float z = s * cap_in; /* 2 log2(e) y */
    float t = fmaf(-2.f, fj_rcp(1.f + fj_exp2(z)), 1.f);
    /* |y| < 1/16: tanh's odd series (relative error under 1e-11), where
       1 - 2 r cancels and a large cap would make its 2^-21 a large error
       of a small score (the CPU's fj_softcapf does the same) */
    if (fabsf(z) < 0.18033688f) {
        const float y = z * 0.34657359f, y2 = y * y; /* ln(2) / 2 */
        t = y * fmaf(y2, fmaf(y2, fmaf(y2, -17.f / 315.f, 2.f / 15.f), -1.f / 3.f), 1.f);
    }
    return t;
}

/* Every score of a fragment array through f (the caps below). */
template <int MT, int NT, class F>
__device__ __forceinline__ void map_scores(float (&s)[MT][NT][4], F f)
{
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) s[mt][nt][e] = f(s[mt][nt][e]);
}

template <int MT, int NT>
__device__ __forceinline__ void cap_scores(float (&s)[MT][NT][4], float cap_in)
{
    map_scores(s, [cap_in](float x) { return softcap_tanh(x, cap_in); });
}

/* The cap with one MUFU operation per score (flash_tma; the other templates
 * keep softcap_tanh): tanh(y) = y P(y^2) / Q(y^2), y clamped to +-7.9, a
 * rational minimax fit of degrees 3 and 4 in y^2 (relative error 1.3e-7
 * = 2^-22.9 on [0, 7.9]; float32 Horner and rcp.approx make it 2^-21 in all,
 * as 1 - tanh(7.9) = 2^-21.8 does at the clamp). Its relative error is
 * within 2^-21 for every y, so the capped score c tanh is off by at most
 * c 2^-21 (2^-21 of itself), like softcap_tanh's, with no series for small
 * y: the form has no cancellation. k = |scale| / c with the scale's sign
 * (softcap_in ln(2) / 2): y = s k. Per score: one rcp (MUFU) and 12
 * FMA-pipe operations (a multiply, the clamp, y^2, 3 + 4 Horner steps, two
 * multiplies), where softcap_tanh takes an ex2 and an rcp and, with its
 * series, about 12 more: the softmax's exp2 then makes 2 MUFU operations
 * per score in place of 3, which bound the capped tile (16 a clock per SM).
 * min.NaN.xorsign.abs is the signed clamp in one instruction (sm_86+):
 * |y| min 7.9 with y's sign, NaN staying NaN; +-inf becomes +-tanh(7.9).
 */
__device__ __forceinline__ float softcap_tanh_rational(float s, float k)
{
    const float y = s * k;
    float yc;
    asm("min.NaN.xorsign.abs.f32 %0, %1, %2;" : "=f"(yc) : "f"(y), "f"(7.9f));
    const float x = yc * yc;
    const float p = fmaf(fmaf(fmaf(1.153223366e-05f, x, 2.960514510e-03f), x, 1.293445826e-01f), x,
                         9.999998808e-01f);
    const float q =
        fmaf(fmaf(fmaf(fmaf(2.492664066e-07f, x, 2.400175872e-04f), x, 2.385425754e-02f), x,
                  4.626768529e-01f),
             x, 1.f);
    return (yc * p) * fj_rcp(q);
}

template <int MT, int NT>
__device__ __forceinline__ void cap_scores_rational(float (&s)[MT][NT][4], float k)
{
    map_scores(s, [k](float x) { return softcap_tanh_rational(x, k); });
}

/* The state before the first key: m = -inf, l = 0, O = 0. */
template <int MT, int NDT>
__device__ __forceinline__ void softmax_init(float (&m)[MT][2], float (&l)[MT][2],
                                             float (&o)[MT][NDT][4])
{
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
            m[mt][hh] = FJ_NEG_INF;
            l[mt][hh] = 0.f;
        }
#pragma unroll
        for (int dt = 0; dt < NDT; ++dt)
#pragma unroll
            for (int e = 0; e < 4; ++e) o[mt][dt][e] = 0.f;
    }
}

/* The new row maxima m_new = max(m, scale * row max of s) (rows g, g+8 of
 * each m tile); returns, the same in every lane, whether some row of the warp
 * exceeds its m by more than FJ_RESCALE_LOG2. */
template <int MT, int NT>
__device__ __forceinline__ bool new_row_max(const float (&s)[MT][NT][4], const float (&m)[MT][2],
                                            float scale, float (&m_new)[MT][2])
{
    bool grow = false;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
            float mx = s[mt][0][2 * hh];
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int e = 0; e < 2; ++e) mx = fmaxf(mx, s[mt][nt][2 * hh + e]);
            mx = fj_quad_max(mx) * scale;
            m_new[mt][hh] = fmaxf(m[mt][hh], mx);
            grow |= mx > m[mt][hh] + FJ_RESCALE_LOG2;
        }
    return __any_sync(0xffffffffu, grow);
}

/* One row's max moves to m_new: l is rescaled, and the factor alpha =
 * exp2(m_old - m_new) that O's row needs is returned. */
template <bool MASKED>
__device__ __forceinline__ float move_row_max(float m_new, float &m, float &l)
{
    const float m_use = (MASKED && m_new == FJ_NEG_INF) ? 0.f : m_new;
    const float alpha = fj_exp2(m - m_use);
    m = m_new;
    l *= alpha;
    return alpha;
}

/* O's row hh (of one m tile) times alpha. */
template <int NDT>
__device__ __forceinline__ void rescale_o_row(float (&o)[NDT][4], int hh, float alpha)
{
#pragma unroll
    for (int dt = 0; dt < NDT; ++dt) {
        o[dt][2 * hh] *= alpha;
        o[dt][2 * hh + 1] *= alpha;
    }
}

/* Every row of O times its alpha (after online_softmax_deferred). */
template <int MT, int NDT>
__device__ __forceinline__ void rescale_o(float (&o)[MT][NDT][4], const float (&alpha)[MT][2])
{
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) rescale_o_row(o[mt], hh, alpha[mt][hh]);
}

/* P = exp2(s * scale - m) in place, and l += this thread's part of P's row
 * sums. */
template <bool MASKED, int MT, int NT>
__device__ __forceinline__ void exp_scores(float (&s)[MT][NT][4], const float (&m)[MT][2],
                                           float (&l)[MT][2], float scale)
{
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
            const float m_use = (MASKED && m[mt][hh] == FJ_NEG_INF) ? 0.f : m[mt][hh];
            float sum = 0.f;
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const float pv = fj_exp2(fmaf(s[mt][nt][2 * hh + e], scale, -m_use));
                    s[mt][nt][2 * hh + e] = pv;
                    sum += pv;
                }
            l[mt][hh] += sum;
        }
}

/* The online softmax update for one sub-tile of scores, O rescaled in place
 * when the max moves: P left in s, m, l and O updated. */
template <bool MASKED, int MT, int NT, int NDT>
__device__ __forceinline__ void online_softmax(float (&s)[MT][NT][4], float (&m)[MT][2],
                                               float (&l)[MT][2], float (&o)[MT][NDT][4],
                                               float scale)
{
    float m_new[MT][2];
    if (new_row_max(s, m, scale, m_new)) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int hh = 0; hh < 2; ++hh)
                rescale_o_row(o[mt], hh, move_row_max<MASKED>(m_new[mt][hh], m[mt][hh], l[mt][hh]));
    }
    exp_scores<MASKED>(s, m, l, scale);
}

/* The same update with O left alone: returns whether the max moved, in which
 * case the caller must apply rescale_o(o, alpha) before O is next read or
 * accumulated into. */
template <bool MASKED, int MT, int NT>
__device__ __forceinline__ bool online_softmax_deferred(float (&s)[MT][NT][4], float (&m)[MT][2],
                                                        float (&l)[MT][2], float (&alpha)[MT][2],
                                                        float scale)
{
    float m_new[MT][2];
    const bool rescale = new_row_max(s, m, scale, m_new);
    if (rescale) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int hh = 0; hh < 2; ++hh)
                alpha[mt][hh] = move_row_max<MASKED>(m_new[mt][hh], m[mt][hh], l[mt][hh]);
    }
    exp_scores<MASKED>(s, m, l, scale);
    return rescale;
}

/* After the key loop: full row sums (over the quad), the factor 1/l that O's
 * rows are multiplied by (through finished()) and lse = (m + log2 l) * ln 2.
 * seen: whether the row has a visible key among the keys the block went
 * through (row_sees_keys). A row without one gets inv 0, so finished() gives
 * exactly 0, and lse -inf. A row with one follows IEEE arithmetic, as
 * docs/semantics.md states for non-finite data: a NaN or +inf score made l
 * NaN, and a row whose every visible score was -inf has l = 0 (its masked
 * tiles subtract 0 for a max of -inf): both give NaN, never the "sees no
 * key" answer. */
template <int MT>
__device__ __forceinline__ void finish_rows(const float (&m)[MT][2], const float (&l)[MT][2],
                                            const bool (&seen)[MT][2], float (&inv)[MT][2],
                                            float (&lse)[MT][2])
{
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
            const float sum = fj_quad_sum(l[mt][hh]);
            /* sum >= 1 when finite and not 0: its largest term is 2^(max - m);
               1/0 is inf, so O = 0 x inf is NaN for an all -inf row */
            inv[mt][hh] = seen[mt][hh] ? fj_rcp(sum) : 0.f;
            lse[mt][hh] = !seen[mt][hh] ? FJ_NEG_INF
                          : sum > 0.f   ? (m[mt][hh] + fj_log2(sum)) * FJ_LN2
                                        : __int_as_float(0x7fffffff); /* sum 0 or NaN */
        }
}

#if FJ_SINKS
/* finish_rows with each row's attention sink joined (FJ_SINKS kernels that
 * are not split; a split kernel's partials leave the sink to combine.cu):
 * sink is the row's sink_h in natural-log units, one more logit without a
 * value row, joined once after all the row's keys as docs/semantics.md
 * states and the CPU backends do (fj_sink_join): m' = max(m, sink), l' = l
 * 2^(m - m') + 2^(sink - m') in base 2, O scaled by 2^(m - m') / l'. m may
 * be a stale lower bound of the row max (the lazy rescale): O and l share
 * it, so the join is the same. A row that saw no key: O = 0, lse = the sink
 * (NaN, +-inf included). A row that saw keys whose sum is 0 (every visible
 * score -inf) or NaN stays NaN, as without the sink; a NaN sink makes it
 * NaN, a sink of +inf too (inf - inf), a sink of -inf is no sink. */
template <int MT>
__device__ __forceinline__ void finish_rows_sink(const float (&m)[MT][2], const float (&l)[MT][2],
                                                 const bool (&seen)[MT][2],
                                                 const float (&sink)[MT][2], float (&inv)[MT][2],
                                                 float (&lse)[MT][2])
{
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
            const float sum = fj_quad_sum(l[mt][hh]);
            const float s2 = sink[mt][hh] * FJ_LOG2E, mx = m[mt][hh];
            const float nm = s2 <= mx ? mx : s2; /* a NaN sink: NaN */
            const float f = fj_exp2(mx - nm);
            const float joint = fmaf(sum, f, fj_exp2(s2 - nm));
            const float nan = __int_as_float(0x7fffffff);
            inv[mt][hh] = !seen[mt][hh] ? 0.f : sum > 0.f ? f * fj_rcp(joint) : nan;
            lse[mt][hh] = !seen[mt][hh] ? sink[mt][hh]
                          : sum > 0.f   ? (nm + fj_log2(joint)) * FJ_LN2
                                        : nan;
        }
}
#endif

/* An element of O over its row's l: inv 0 marks a row that saw no key, whose
 * O is exactly 0 whatever P V held (0 x NaN is NaN in the products). */
__device__ __forceinline__ float finished(float o, float inv) { return inv == 0.f ? 0.f : o * inv; }

/* P (the exp2 of S, in C fragments) as the A fragments of O += P V: the C
 * fragments of n tiles 2kk and 2kk+1 are exactly the A fragment of k step kk
 * (same rows g, g+8; columns 2t..2t+1 and 2t+8..2t+9 of its 16 keys), so P is
 * only rounded and packed, never moved between lanes. */
template <int NT>
__device__ __forceinline__ void pack_p_step(const float (&s)[NT][4], int kk, unsigned (&a)[4])
{
    a[0] = fj_pack2(s[2 * kk][0], s[2 * kk][1]);
    a[1] = fj_pack2(s[2 * kk][2], s[2 * kk][3]);
    a[2] = fj_pack2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
    a[3] = fj_pack2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
}

} /* namespace fja */

#endif
