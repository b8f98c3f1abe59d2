/* Fuzz target: attention descriptors, plans and executes on both CPU
 * backends, against the double oracle (tests/common/harness.c).
 *
 * The first byte picks the mode:
 *   bit 7 set   validation: every size, window, stride and the scale taken
 *               raw from the input (INT_MAX, negative, overflowing, NaN);
 *               with bit 5 also the softcap (any float bits), with bit 4
 *               the features (any 32 bits: unknown ones refused; with
 *               FJ_FEATURE_PAGED_KV the four page fields, raw, after the
 *               strides); with bit 3 but not bit 2 head_dim_v, raw, last.
 *               The rules must hold without a crash: an invalid desc is
 *               FJ_ERR_INVALID_ARGUMENT with a message, for validate, plan
 *               creation and fj_attention alike, and fj_attention writes
 *               nothing; a valid one makes a plan (or says UNSUPPORTED or
 *               OUT_OF_MEMORY) whose describe text is not empty.
 *   otherwise   execution: small problems of every kind (sizes, GQA, every
 *               dtype, mask and window, dense, BHSD, padded, broadcast and
 *               raw strides, a scale in [-4, 4]; with bit 5 a softcap, from
 *               0.01 to 100, down to 2^-140 or any float bits, read after
 *               the scale; with bit 4, when not non-finite, ALiBi, sinks or
 *               both, their per-head values drawn by the harness after
 *               q, k and v; with bit 3 but not bit 2 V's own head dim,
 *               1..FJ_MAX_HEAD_DIM, read after the features: v's and o's
 *               layouts step its rows) run on cpu-reference and cpu
 *               with poisoned outputs; each must be within the dtype's
 *               tolerance of the oracle, write nothing between output rows,
 *               and give rows that see no key exactly 0 and lse -inf.
 *               Bit 6 sprinkles NaN and infinities into Q, K and V instead:
 *               then no oracle, but a row that sees keys must never come out
 *               as one that sees none (lse -inf), and one that sees none
 *               must still be exactly 0 and -inf (docs/semantics.md).
 * (Bit 3 alone: the one found input with bits 2 and 3, f32-d1-output-cancels,
 * predates head_dim_v and keeps its meaning.)
 * FUZZ_VERBOSE=1 prints each input's desc (to read a crash or a seed). */
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "flashjit.h"
#include "fuzz_input.h"
#include "harness.h"

/* Oracle work per input: b x hq x sq x sk x d, so an input runs in about a
 * millisecond. */
#define MAX_WORK 400000.0

static fj_context *contexts[2];
static const char *const context_names[2] = {"cpu-reference", "cpu"};

static void make_contexts(void)
{
    if (contexts[0]) return;
    for (int i = 0; i < 2; i++) {
        fj_context_options o;
        fj_context_options_init(&o);
        o.backend = i ? FJ_BACKEND_CPU : FJ_BACKEND_CPU_REFERENCE;
        o.cache_dir = "";
        o.tuning_file = "";
        o.cpu_threads = 2;
        FUZZ_REQUIRE(fj_context_create(&o, &contexts[i]) == FJ_OK, "context: %s", fj_last_error());
    }
}

static float float_of(uint32_t bits)
{
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* ---- validation mode ------------------------------------------------------- */

static int64_t raw_stride(fuzz_input *in)
{
    /* small values mostly (they make valid layouts), any int64 sometimes */
    uint8_t kind = fuzz_u8(in);
    if (kind < 200) return (int64_t)fuzz_u16(in) - 16;
    return (int64_t)fuzz_u64(in);
}

static int raw_size(fuzz_input *in)
{
    uint8_t kind = fuzz_u8(in);
    switch (kind % 4) {
    case 0: return fuzz_range(in, -2, 300);
    case 1: return INT32_MAX - fuzz_range(in, 0, 4200);
    case 2: return 1 << fuzz_range(in, 0, 30);
    default: return (int)fuzz_u32(in);
    }
}

static void validation(fuzz_input *in, uint8_t flags)
{
    /* one read per statement: argument evaluation order is unspecified */
    int sizes[6];
    for (int i = 0; i < 6; i++) sizes[i] = raw_size(in);
    fj_dtype dtype = (fj_dtype)(fuzz_u8(in) % 4);
    fj_attention_desc d;
    fj_attention_desc_init(&d, sizes[0], sizes[1], sizes[2], sizes[3], sizes[4], sizes[5], dtype);
    d.causal = (fj_causal)(fuzz_u8(in) % 4);
    d.window_left = (int)fuzz_u32(in) % 300 - 2;
    d.window_right = fuzz_u8(in) < 128 ? -1 : (int)fuzz_u32(in);
    d.scale = fuzz_u8(in) < 128 ? 0.0f : float_of(fuzz_u32(in));
    if (flags & 0x20) d.softcap = float_of(fuzz_u32(in));
    if (flags & 0x10) d.features = fuzz_u32(in);
    int64_t *strides[4] = {d.q_stride, d.k_stride, d.v_stride, d.o_stride};
    for (int t = 0; t < 4; t++)
        if (fuzz_u8(in) & 1)
            for (int a = 0; a < 3; a++) strides[t][a] = raw_stride(in);
    /* a paged KV cache's fields, after the strides (inputs without the
       feature read none) */
    if (d.features & FJ_FEATURE_PAGED_KV) {
        d.page_size = raw_size(in);
        d.num_pages = raw_size(in);
        d.max_pages = raw_size(in);
        d.block_table_stride = fuzz_u8(in) < 128 ? 0 : raw_size(in);
    }
    if ((flags & 0x0c) == 0x08) d.head_dim_v = raw_size(in); /* V's head dim, raw */

    fj_status s = fj_attention_desc_validate(&d);
    if (getenv("FUZZ_VERBOSE"))
        fprintf(stderr, "validation: %s: %s\n", fjt_desc_str(&d), s ? fj_last_error() : "valid");
    if (s != FJ_OK) {
        FUZZ_REQUIRE(s == FJ_ERR_INVALID_ARGUMENT, "validate gave %s", fj_status_name(s));
        FUZZ_REQUIRE(fj_last_error()[0], "no message for an invalid desc");
        for (int i = 0; i < 2; i++) {
            fj_plan *plan = (fj_plan *)1;
            FUZZ_REQUIRE(fj_plan_create(contexts[i], &d, &plan) == FJ_ERR_INVALID_ARGUMENT,
                         "plan of an invalid desc: %s", fj_last_error());
            FUZZ_REQUIRE(plan == NULL, "failed plan creation left *plan set");
            /* a bad desc writes nothing */
            float buf[64], lse[16];
            for (int k = 0; k < 64; k++) buf[k] = 7.0f;
            for (int k = 0; k < 16; k++) lse[k] = 7.0f;
            FUZZ_REQUIRE(fj_attention(contexts[i], &d, buf, buf, buf, buf, lse, NULL) ==
                             FJ_ERR_INVALID_ARGUMENT,
                         "fj_attention of an invalid desc");
            for (int k = 0; k < 64; k++) FUZZ_REQUIRE(buf[k] == 7.0f, "output written");
            for (int k = 0; k < 16; k++) FUZZ_REQUIRE(lse[k] == 7.0f, "lse written");
        }
        return;
    }
    /* A plan of sequences (varlen or paged) holds one sequence's lse,
       heads_q x seqlen_q floats (src/cpu/varlen.c): past 1 GiB that is one
       malloc larger than libFuzzer lets through (-rss_limit_mb), which it
       reports as a failure before the library could say
       FJ_ERR_OUT_OF_MEMORY. */
    if ((d.features & (FJ_FEATURE_VARLEN | FJ_FEATURE_PAGED_KV)) &&
        (double)d.heads_q * d.seqlen_q * sizeof(float) > (double)(1 << 30))
        return;
    for (int i = 0; i < 2; i++) {
        /* The reference holds every key of a head as floats (its workspace
           is O(seqlen_k x head_dim)); the tiled backend's is bounded. */
        if (i == 0 && (int64_t)d.seqlen_k * d.head_dim > (1 << 22)) continue;
        fj_plan *plan = NULL;
        s = fj_plan_create(contexts[i], &d, &plan);
        FUZZ_REQUIRE(s == FJ_OK || s == FJ_ERR_UNSUPPORTED || s == FJ_ERR_OUT_OF_MEMORY,
                     "%s: plan of a valid desc: %s: %s", context_names[i], fj_status_name(s),
                     fj_last_error());
        if (s == FJ_OK) {
            const char *text = fj_plan_describe(plan);
            FUZZ_REQUIRE(text && text[0], "empty describe");
            fj_plan_destroy(plan);
        } else {
            FUZZ_REQUIRE(plan == NULL && fj_last_error()[0], "failure without a message");
        }
    }
}

/* ---- execution mode ------------------------------------------------------- */

/* A layout for d from the input; strides may be invalid (raw), validation
 * says so. q's and k's rows are head_dim long, v's and o's head_dim_v. */
static void layout(fuzz_input *in, fj_attention_desc *d)
{
    const int64_t D = d->head_dim, Dv = fjt_dim_v(d), sq = d->seqlen_q, sk = d->seqlen_k;
    const int64_t hq = d->heads_q, hkv = d->heads_kv;
    switch (fuzz_u8(in) % 6) {
    case 0: break; /* dense */
    case 1:        /* BHSD */
        d->q_stride[0] = hq * sq * D;
        d->q_stride[1] = D;
        d->q_stride[2] = sq * D;
        d->o_stride[0] = hq * sq * Dv;
        d->o_stride[1] = Dv;
        d->o_stride[2] = sq * Dv;
        d->k_stride[0] = hkv * sk * D;
        d->k_stride[1] = D;
        d->k_stride[2] = sk * D;
        d->v_stride[0] = hkv * sk * Dv;
        d->v_stride[1] = Dv;
        d->v_stride[2] = sk * Dv;
        break;
    case 2: { /* padded rows */
        int64_t pad = fuzz_range(in, 0, 9);
        d->q_stride[2] = D + pad;
        d->q_stride[1] = hq * (D + pad) + pad;
        d->q_stride[0] = sq * d->q_stride[1] + pad;
        d->o_stride[2] = Dv + pad;
        d->o_stride[1] = hq * (Dv + pad) + pad;
        d->o_stride[0] = sq * d->o_stride[1] + pad;
        d->k_stride[2] = D + pad;
        d->k_stride[1] = hkv * (D + pad) + pad;
        d->k_stride[0] = sk * d->k_stride[1] + pad;
        d->v_stride[2] = Dv + pad;
        d->v_stride[1] = hkv * (Dv + pad) + pad;
        d->v_stride[0] = sk * d->v_stride[1] + pad;
        break;
    }
    case 3: /* K and V broadcast over the batch */
        d->k_stride[0] = d->v_stride[0] = 0;
        d->k_stride[1] = hkv * D;
        d->k_stride[2] = D;
        d->v_stride[1] = hkv * Dv;
        d->v_stride[2] = Dv;
        break;
    case 4: /* Q broadcast over the batch, K rows overlapping */
        d->q_stride[0] = 0;
        d->q_stride[1] = hq * D;
        d->q_stride[2] = D;
        d->k_stride[0] = sk * hkv;
        d->k_stride[1] = hkv;
        d->k_stride[2] = 1;
        break;
    default: { /* raw, small */
        int64_t *s[4] = {d->q_stride, d->k_stride, d->v_stride, d->o_stride};
        for (int t = 0; t < 4; t++)
            for (int a = 0; a < 3; a++) s[t][a] = (int64_t)fuzz_u16(in) % 4096 - 2;
        break;
    }
    }
}

/* The rule of docs/semantics.md for the non-finite checks, written again. */
static bool sees_any(const fj_attention_desc *d, int i)
{
    long dd = d->causal == FJ_CAUSAL_TOP_LEFT ? i : (long)i + d->seqlen_k - d->seqlen_q;
    long lo = 0, hi = d->seqlen_k;
    if (d->causal != FJ_CAUSAL_NONE && dd + 1 < hi) hi = dd + 1;
    if (d->window_right >= 0 && dd + d->window_right + 1 < hi) hi = dd + d->window_right + 1;
    if (d->window_left >= 0 && dd - d->window_left > lo) lo = dd - d->window_left;
    return lo < hi;
}

static size_t elem_size(fj_dtype t) { return t == FJ_F32 ? 4 : 2; }

/* NaN and infinities at input-chosen places of q, k and v. */
static void sprinkle(fuzz_input *in, fjt_problem *p)
{
    static const double specials[] = {NAN, INFINITY, -INFINITY};
    int n = fuzz_range(in, 1, 6);
    for (int i = 0; i < n; i++) {
        int which = fuzz_u8(in) % 3;
        void *buf = which == 0 ? p->q : which == 1 ? p->k : p->v;
        size_t elems = which == 0 ? p->q_elems : which == 1 ? p->k_elems : p->v_elems;
        size_t at = fuzz_u32(in) % elems;
        double x = specials[fuzz_u8(in) % 3];
        if (p->d.dtype == FJ_F32) ((float *)buf)[at] = (float)x;
        else if (isnan(x)) ((uint16_t *)buf)[at] = p->d.dtype == FJ_F16 ? 0x7e00 : 0x7fc0;
        else
            ((uint16_t *)buf)[at] =
                (uint16_t)((p->d.dtype == FJ_F16 ? 0x7c00 : 0x7f80) | (x < 0 ? 0x8000 : 0));
    }
}

/* Runs p on ctx with poisoned outputs (host memory: the CPU backends take
 * it) and checks the non-finite rule's two promises. */
static void check_nonfinite(int c, const fjt_problem *p, bool with_lse)
{
    const fj_attention_desc *d = &p->d;
    size_t es = elem_size(d->dtype);
    void *o = malloc(p->o_elems * es);
    float *lse = malloc(p->lse_elems * sizeof(float));
    FUZZ_REQUIRE(o && lse, "out of memory");
    fjt_poison(o, d->dtype, p->o_elems);
    fjt_poison_f32(lse, p->lse_elems);
    fj_status s = fj_attention(contexts[c], d, p->q, p->k, p->v, o, with_lse ? lse : NULL, NULL);
    FUZZ_REQUIRE(s == FJ_OK, "%s: %s", context_names[c], fj_last_error());
    for (int b = 0; b < d->batch; b++)
        for (int h = 0; h < d->heads_q; h++)
            for (int i = 0; i < d->seqlen_q; i++) {
                bool empty = !sees_any(d, i);
                float l = lse[((size_t)b * d->heads_q + h) * d->seqlen_q + i];
                if (with_lse)
                    FUZZ_REQUIRE(empty == (l == -INFINITY),
                                 "%s: %s: row b%d h%d i%d %s a key but lse is %g", context_names[c],
                                 fjt_desc_str(d), b, h, i, empty ? "sees no key" : "sees",
                                 (double)l);
                if (!empty) continue;
                size_t row = (size_t)(b * p->os[0] + (int64_t)i * p->os[1] + (int64_t)h * p->os[2]);
                for (int x = 0; x < fjt_dim_v(d); x++)
                    FUZZ_REQUIRE(fjt_load(o, d->dtype, row + x) == 0.0,
                                 "%s: %s: row b%d h%d i%d sees no key but O is %g",
                                 context_names[c], fjt_desc_str(d), b, h, i,
                                 fjt_load(o, d->dtype, row + x));
            }
    free(o);
    free(lse);
}

/* Whether ctx's plan for d rounds P to bf16 (the cpu backend's AMX path and
 * its tiled path's bf16 dot products). */
static bool p_rounds_to_bf16(fj_context *ctx, const fj_attention_desc *d)
{
    fj_plan *plan = NULL;
    fj_plan_info info;
    bool rounds = fj_plan_create(ctx, d, &plan) == FJ_OK &&
                  fj_plan_get_info(plan, &info) == FJ_OK &&
                  (strstr(info.kernel, "amx") || strstr(fj_plan_describe(plan), "bf16-dot"));
    fj_plan_destroy(plan);
    return rounds;
}

static void execution(fuzz_input *in, uint8_t flags)
{
    static const int groups[] = {1, 2, 3, 4, 5, 8};
    const int max_seq = flags & 1 ? 300 : 40;
    /* one read per statement: argument evaluation order is unspecified */
    int hkv = fuzz_range(in, 1, 3);
    int batch = fuzz_range(in, 1, 3);
    int group = groups[fuzz_u8(in) % 6];
    int sq = fuzz_range(in, 1, max_seq);
    int sk = fuzz_range(in, 1, max_seq);
    int dim = fuzz_range(in, 1, FJ_MAX_HEAD_DIM);
    fj_dtype dtype = (fj_dtype)(fuzz_u8(in) % 3);
    fj_attention_desc d;
    fj_attention_desc_init(&d, batch, hkv * group, hkv, sq, sk, dim, dtype);
    d.causal = (fj_causal)(fuzz_u8(in) % 3);
    d.window_left = fuzz_u8(in) < 128 ? -1 : fuzz_range(in, -2, max_seq + 8);
    d.window_right = fuzz_u8(in) < 128 ? -1 : fuzz_range(in, -2, max_seq + 8);
    switch (fuzz_u8(in) % 4) {
    case 0: d.scale = 0.0f; break;
    case 1: d.scale = (float)fuzz_range(in, -400, 400) / 100.0f; break;
    case 2: d.scale = (float)ldexp(1.0, -fuzz_range(in, 0, 140)); break; /* down to denormal */
    default: d.scale = -0.0f; break;
    }
    if (flags & 0x20) { /* the inputs before bit 5 existed draw no softcap */
        switch (fuzz_u8(in) % 4) {
        case 0: d.softcap = (float)fuzz_range(in, 1, 1000) / 100.0f; break;
        case 1: d.softcap = (float)fuzz_range(in, 1, 100); break;
        case 2: d.softcap = (float)ldexp(1.0, -fuzz_range(in, 0, 140)); break;
        default: d.softcap = float_of(fuzz_u32(in)); break; /* NaN, negative, huge: refused */
        }
    }
    /* the inputs before bit 4 existed draw no features; the non-finite
       mode's check runs fj_attention, without arrays */
    if ((flags & 0x10) && !(flags & 0x40)) d.features = (uint32_t)(fuzz_u8(in) % 3 + 1);
    /* bit 3 without bit 2: V's own head dim (the inputs before it drew none) */
    if ((flags & 0x0c) == 0x08) d.head_dim_v = fuzz_range(in, 1, FJ_MAX_HEAD_DIM);
    layout(in, &d);
    double work =
        (double)d.batch * d.heads_q * d.seqlen_q * d.seqlen_k * (d.head_dim + fjt_dim_v(&d)) / 2;
    if (work > MAX_WORK) return;

    fj_status s = fj_attention_desc_validate(&d);
    if (getenv("FUZZ_VERBOSE"))
        fprintf(stderr, "execution%s: %s: %s\n", flags & 0x40 ? " (non-finite)" : "",
                fjt_desc_str(&d), s ? fj_last_error() : "valid");
    if (s != FJ_OK) {
        FUZZ_REQUIRE(s == FJ_ERR_INVALID_ARGUMENT && fj_last_error()[0], "validate: %s",
                     fj_status_name(s));
        return;
    }
    fjt_rng rng;
    fjt_rng_init(&rng, fuzz_u64(in));
    bool with_lse = !(flags & 2), nonfinite = flags & 0x40;
    fjt_problem p;
    FUZZ_REQUIRE(fjt_problem_make(&p, &d, &rng), "out of memory making the problem");
    if (nonfinite) {
        sprinkle(in, &p);
        for (int c = 0; c < 2; c++) check_nonfinite(c, &p, with_lse);
    } else {
        for (int c = 0; c < 2; c++) {
            fjt_error e;
            s = fjt_run(contexts[c], &p, &e, with_lse);
            if (getenv("FUZZ_VERBOSE"))
                fprintf(stderr,
                        "  %s: rel %.3g, worst row %.3g, against its terms %.3g, max abs %.3g, "
                        "lse error %.3g\n",
                        context_names[c], e.rel_fro, e.row_rel_max, e.mag_rel_max, e.max_abs,
                        e.lse_max_abs);
            FUZZ_REQUIRE(s == FJ_OK, "%s: %s: %s", context_names[c], fjt_desc_str(&d),
                         fj_last_error());
            /* The cpu backend's AMX path and its bf16 dot products (bf16, on
               CPUs with AMX-BF16 or AVX-512 BF16) round the weights P to bf16
               before P V, as CUDA does: each output
               then carries up to about 2^-9 x sum_j p_j |v_j| <= 2^-9 of
               absolute error (|V| < 1 here), which is more than the relative
               tolerance where a row's output cancels to near 0. Such a plan
               is held to that absolute bound (twice it) instead. */
            double rel_ok = fjt_tolerance(d.dtype);
            if (c == 1 && e.rel_fro > rel_ok && p_rounds_to_bf16(contexts[c], &d) &&
                e.max_abs <= 0x1p-8)
                rel_ok = e.rel_fro;
            /* Where rows' outputs cancel towards 0 (random V of both signs),
               rel_fro measures rounding against a tiny sum: every row is then
               held to the tolerance against the size of the terms it sums
               (fjt_error.mag_rel_max), the bound float arithmetic gives. */
            if (e.rel_fro > rel_ok && e.mag_rel_max <= fjt_tolerance(d.dtype)) rel_ok = e.rel_fro;
            /* An output in the dtype's subnormal range (a sink taking nearly
               all of a row's weight) is rounded to that range's fixed step:
               an error within one step is the format's, not the computation's. */
            const double subnormal_step = d.dtype == FJ_F16    ? 0x1p-24
                                          : d.dtype == FJ_BF16 ? 0x1p-133
                                                               : 0x1p-149;
            if (e.rel_fro > rel_ok && e.max_abs <= subnormal_step) rel_ok = e.rel_fro;
            FUZZ_REQUIRE(e.rel_fro <= rel_ok && !e.nan_count && !e.lse_mismatch &&
                             !e.gaps_written && !e.empty_not_zero && e.lse_max_abs <= 2e-3,
                         "%s: %s: rel %.3g (tolerance %.3g), NaN %zu, lse mismatches %zu, lse "
                         "error %.3g, gaps written %zu, empty rows not zero %zu",
                         context_names[c], fjt_desc_str(&d), e.rel_fro, fjt_tolerance(d.dtype),
                         e.nan_count, e.lse_mismatch, e.lse_max_abs, e.gaps_written,
                         e.empty_not_zero);
        }
    }
    fjt_problem_free(&p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    make_contexts();
    fuzz_input in = {data, size, 0};
    uint8_t flags = fuzz_u8(&in);
    if (flags & 0x80) validation(&in, flags);
    else execution(&in, flags);
    return 0;
}
