/* The problem as the CUDA kernel sees it: a causal mask that hides nothing
 * dropped, and GQA packing for decode-like problems, where the query heads
 * that share a kv head become the rows of one query tile, so one block reads
 * each K and V tile once for the whole group instead of once per query head. */
#ifndef FJ_GQA_PACK_H
#define FJ_GQA_PACK_H

#include <stdbool.h>

#include <stdint.h>

#include "problem.h"

/* Query rows at most for which packing is considered (the tuning file's
 * decode bucket: seqlen_q <= 16). */
#define FJ_GQA_PACK_MAX_SEQLEN_Q 16

/* Fills *out with the launch view of p and returns whether it is packed.
 * Always: a bottom-right causal mask with seqlen_q == 1 (the query is aligned
 * with the last key, so it sees every key) is dropped. When p can be packed,
 * *out is the same computation seen as a problem of heads_kv query heads,
 * each with group * seqlen_q rows (row g * seqlen_q + i is query i of head
 * kv_head * group + g).
 *
 * Rows of one packed head must be one strided sequence in q and o, and see
 * the same keys: so p needs group > 1, seqlen_q <= FJ_GQA_PACK_MAX_SEQLEN_Q,
 * no window, no causal mask (or a bottom-right one with seqlen_q == 1,
 * which hides nothing), and either seqlen_q == 1 or heads laid out seqlen_q
 * rows apart (head stride == seqlen_q * seq stride) in q and o. lse's
 * [batch, heads_q, seqlen_q] order is the packed one already. Sinks and
 * ALiBi pack: the kernels find a row's head and query position from
 * fj_fwd_params.pack_rows and pack_group (and ALiBi's offset from the
 * packed diag_offset), but only flash_fwd's decode tiles do so for ALiBi
 * (fj_launch_view_takes). */
bool fj_launch_view(const fj_problem *p, fj_problem *out);

/* The launch view of p without GQA packing (the dropped causal mask alone). */
void fj_launch_view_unpacked(const fj_problem *p, fj_problem *out);

/* Whether the kernel of template template_id (fj_template_id) with those
 * tiles computes p's packed launch view: every one but for ALiBi, whose
 * per-row slopes and positions only flash_fwd's tiles of one 16-row m tile
 * per warp (block_m <= 16 * warps: the decode tiles) read; a plan whose
 * kernel is another takes the unpacked view (one block row per query
 * head) instead. */
bool fj_launch_view_takes(const fj_problem *p, uint32_t template_id, uint32_t block_m,
                          uint32_t warps);

#endif
