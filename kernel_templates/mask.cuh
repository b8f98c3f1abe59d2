/* mask.cuh: the masking of a score fragment in the attention templates: the
 * scores of keys outside each row's band (causal diagonal, window edges,
 * seqlen_k) become -inf, in a warp's C fragments s[mt][nt][e] as softmax.cuh
 * describes them (MT m tiles of 16 rows, NT n8 tiles of keys). The band is
 * fj_visible_keys's (src/problem.h) and attention_rows.cuh's row_band, here
 * per element. Pasted after softmax.cuh for the attention templates. */
#ifndef FJ_MASK_CUH
#define FJ_MASK_CUH

namespace fja {

/* row0: the query row of this thread's first element (m tile 0, row g);
 * col0: the key of its first column (n8 tile 0, column 2t). The band moves by
 * exactly one key per row, so it is worked out once in 64 bits for row0,
 * relative to col0, then clamped to +-2^24 (far beyond the few hundred keys
 * and rows a tile spans, which is all that can change a comparison) and
 * shifted per row in 32 bits. */
template <int MT, int NT, class B>
__device__ __forceinline__ void mask_scores(const fj_fwd_params &p, const B &bd, long long row0,
                                            int col0, float (&s)[MT][NT][4])
{
    const long long d = row0 + band_diag(bd) - col0; /* diagonal key of row0, relative */
    constexpr long long BIG = 1ll << 24;
    long long lo = -BIG, hi = BIG; /* visible: lo <= j < hi, j relative to col0 */
#if FJ_CAUSAL
    hi = d + 1;
#endif
#if FJ_HAS_WINDOW
    if (p.window_right >= 0 && d + p.window_right + 1 < hi) hi = d + p.window_right + 1;
    if (p.window_left >= 0) lo = d - p.window_left;
#endif
    (void)d;
    (void)p;
    lo = lo < -BIG ? -BIG : (lo > BIG ? BIG : lo);
    hi = hi < -BIG ? -BIG : (hi > BIG ? BIG : hi);
    const int lo0 = (int)lo, hi0 = (int)hi, end = band_keys(bd) - col0;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
            const int r = mt * 16 + hh * 8;
            const int lo_r = lo0 + r, hi_r = hi0 + r < end ? hi0 + r : end;
            /* lo_r <= j < hi_r as one unsigned compare: (j - lo_r) wraps to a
               huge value below the band. Two compares per score cost ptxas
               enough predicate temporaries to spill at D = 96..128. */
            const unsigned width = hi_r > lo_r ? (unsigned)(hi_r - lo_r) : 0u;
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int j = nt * 8 + e;
                    if ((unsigned)(j - lo_r) >= width) s[mt][nt][2 * hh + e] = FJ_NEG_INF;
                }
        }
}

/* The problem's band (the dense kernels). */
template <int MT, int NT>
__device__ __forceinline__ void mask_scores(const fj_fwd_params &p, long long row0, int col0,
                                            float (&s)[MT][NT][4])
{
    mask_scores(p, p, row0, col0, s);
}

/* ALiBi (FJ_ALIBI kernels; docs/semantics.md): each score of row i, key j
 * becomes s scale + slope |i + diag_offset - j| in the scaled log2 domain,
 * slope = -slope_h log2(e) and scale the softmax's (|scale| log2 e, c
 * log2 e after a softcap, or the signed scale where S is not sign-corrected
 * first), so the softmax then runs at scale 1. Applied after the softcap and
 * before the mask (whose -inf must stay -inf), as the CPU backends add the
 * bias to the visible scores only. The distance is exact in float32 (it
 * is an integer below 2^24: row0 + diag_offset - col0 once in 64 bits, then
 * the fragment's constant offsets), as the CPU's (float)dist. Fragments as
 * mask_scores's: row0 the row of element (mt 0, hh 0), col0 the key of
 * (nt 0, e 0). */
/* The bias on fragment row (mt, hh), whose distance to key col0 is dr. */
template <int MT, int NT>
__device__ __forceinline__ void alibi_row(float dr, float slope, float scale,
                                          float (&s)[MT][NT][4], int mt, int hh)
{
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const float dist = fabsf(dr - (float)(nt * 8 + e));
            float &x = s[mt][nt][2 * hh + e];
            x = fmaf(x, scale, slope * dist);
        }
}

template <int MT, int NT>
__device__ __forceinline__ void alibi_scores(const fj_fwd_params &p, long long row0, int col0,
                                             float slope, float scale, float (&s)[MT][NT][4])
{
    const float d0 = (float)(row0 + p.diag_offset - col0);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh)
            alibi_row(d0 + (float)(mt * 16 + hh * 8), slope, scale, s, mt, hh);
}

} /* namespace fja */

#endif
