/* The kernel descriptor and the code generator, without NVRTC or a GPU:
 * canonical names round-trip, every malformed name and every broken rule is
 * rejected with a message naming the part and the rule, the problem ->
 * descriptor mapping and heuristic, and the rendered source (deterministic,
 * macros equal to the descriptor, templates in order). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/jit/codegen.h"
#include "cuda/jit/launch_view.h"
#include "cuda/jit/kernel_desc.h"
#include "problem.h"
#include "embedded.h"

static fj_kernel_desc base_desc(void)
{
    fj_kernel_desc k;
    fj_kernel_desc_init(&k);
    k.template_id = FJ_TEMPLATE_FLASH_FWD;
    k.head_dim = 128;
    k.dtype = FJ_BF16;
    k.mask = FJ_MASK_CAUSAL;
    k.block_m = 128;
    k.block_n = 64;
    k.warps = 4;
    k.stages = 2;
    k.arch = 90;
    return k;
}

/* A flash_wgmma kernel that passes the rules: two warpgroups of 64 rows. */
static fj_kernel_desc wgmma_desc(void)
{
    fj_kernel_desc k = base_desc();
    k.template_id = FJ_TEMPLATE_FLASH_WGMMA;
    k.block_n = 128;
    k.warps = 8;
    return k;
}

/* ==== EXPECTED sm_90 PREFILL TILES: edit this table when the heuristic ====
 * ==== changes (test_heuristic, test_decode_tiles, test_for_problem_mask) ==
 * By head dim, up to max_dim: the tiles for head dims that are multiples of
 * 16 from 64 on (flash_tma's column blocks) and for the others. The tile
 * letter names the template: c flash_tma, g flash_wgmma, w flash_fwd. */
static const struct {
    uint32_t max_dim;
    const char *dim16, *other;
} sm90_prefill[] = {
    {56, NULL, "m128n64w4s2"},
    {64, "m192n128c3s2", "m128n64w4s2"},
    {128, "m128n128c2s2", "m128n64w4s2"},
    {160, "m128n128c2s2", "m128n64w8s2"},
    {192, "m128n112c2s2", "m128n64w8s2"},
    {256, "m128n80c2s2", "m128n64w8s2"},
};

static const char *sm90_prefill_tiles(uint32_t head_dim)
{
    for (size_t i = 0; i < sizeof sm90_prefill / sizeof sm90_prefill[0]; i++)
        if (head_dim <= sm90_prefill[i].max_dim)
            return head_dim % 16 || !sm90_prefill[i].dim16 ? sm90_prefill[i].other
                                                           : sm90_prefill[i].dim16;
    fail_msg("no sm_90 tiles for head dim %u in the table", head_dim);
    return NULL;
}

/* The template a tile string names. */
static uint32_t tiles_template(const char *tiles)
{
    return strchr(tiles, 'c')   ? FJ_TEMPLATE_FLASH_TMA
           : strchr(tiles, 'g') ? FJ_TEMPLATE_FLASH_WGMMA
                                : FJ_TEMPLATE_FLASH_FWD;
}

#define assert_contains(text, part)                                                             \
    do {                                                                                        \
        if (!strstr((text), (part))) fail_msg("'%s'\n  does not contain '%s'", (text), (part)); \
    } while (0)

/* ---- names ------------------------------------------------------------------- */

static void test_name_example(void **state)
{
    (void)state;
    fj_kernel_desc k = base_desc();
    char name[128];
    int n = fj_kernel_desc_name(&k, name, sizeof name);
    assert_string_equal(name, "flash_fwd.d128.bf16.causal.m128n64w4s2.sm_90");
    assert_int_equal(n, (int)strlen(name));
    k.split_kv = 1;
    k.template_id = FJ_TEMPLATE_COMBINE;
    k.mask = FJ_MASK_CAUSAL_WINDOW;
    k.dtype = FJ_F16;
    fj_kernel_desc_name(&k, name, sizeof name);
    assert_string_equal(name, "combine.d128.f16.causal_window.m128n64w4s2.split.sm_90");
    /* A short buffer still gets a terminated prefix, and the full length. */
    char small[10];
    assert_int_equal(fj_kernel_desc_name(&k, small, sizeof small), (int)strlen(name));
    assert_int_equal(strlen(small), sizeof small - 1);
    /* flash_wgmma counts warpgroups: g2 is eight warps. */
    k = wgmma_desc();
    n = fj_kernel_desc_name(&k, name, sizeof name);
    assert_string_equal(name, "flash_wgmma.d128.bf16.causal.m128n128g2s2.sm_90");
    assert_int_equal(n, (int)strlen(name));
    k.split_kv = 1, k.warps = 12, k.block_m = 192, k.block_n = 64, k.stages = 4;
    fj_kernel_desc_name(&k, name, sizeof name);
    assert_string_equal(name, "flash_wgmma.d128.bf16.causal.m192n64g3s4.split.sm_90");
    /* the softcap is a part of its own after the mask (its value is a launch
       parameter); the combine kernel of a capped plan has none */
    k.softcap = 1;
    fj_kernel_desc_name(&k, name, sizeof name);
    assert_string_equal(name, "flash_wgmma.d128.bf16.causal.softcap.m192n64g3s4.split.sm_90");
    fj_kernel_desc c;
    fj_kernel_desc_combine_for(&k, 1, &c);
    assert_int_equal(c.softcap, 0);
    c.softcap = 1;
    assert_int_equal(fj_kernel_desc_check(&c, 0), FJ_ERR_UNSUPPORTED);
    assert_non_null(strstr(fj_last_error(), "softcap is for the attention templates"));
    k.softcap = 0;
    /* ALiBi and sinks: parts of their own after the softcap's; a combine
       kernel keeps the sinks (it joins them after a split), not ALiBi; a
       split kernel has no sinks */
    k.softcap = k.alibi = k.sinks = 1;
    k.split_kv = 0;
    fj_kernel_desc_name(&k, name, sizeof name);
    assert_string_equal(name, "flash_wgmma.d128.bf16.causal.softcap.alibi.sinks.m192n64g3s4.sm_90");
    fj_kernel_desc_combine_for(&k, 1, &c);
    assert_int_equal(c.softcap, 0);
    assert_int_equal(c.alibi, 0);
    assert_int_equal(c.sinks, 1);
    assert_int_equal(fj_kernel_desc_check(&c, 0), FJ_OK);
    fj_kernel_desc_name(&c, name, sizeof name);
    assert_string_equal(name, "combine.d128.bf16.nomask.sinks.m16n64w1s1.split.sm_90");
    c.alibi = 1;
    assert_int_equal(fj_kernel_desc_check(&c, 0), FJ_ERR_UNSUPPORTED);
    assert_non_null(strstr(fj_last_error(), "alibi is for the attention templates"));
    fj_kernel_desc s;
    fj_kernel_desc_split_of(&k, &s);
    assert_int_equal(s.split_kv, 1);
    assert_int_equal(s.sinks, 0);
    assert_int_equal(s.alibi, 1);
    assert_int_equal(fj_kernel_desc_check(&s, 0), FJ_OK);
    s.sinks = 1;
    assert_int_equal(fj_kernel_desc_check(&s, 0), FJ_ERR_UNSUPPORTED);
    assert_non_null(strstr(fj_last_error(), "leave the sink to the combine kernel"));
    k.alibi = 2;
    fj_kernel_desc_name(&k, name, sizeof name);
    assert_string_equal(name,
                        "flash_wgmma.d128.bf16.causal.softcap.alibi2.sinks.m192n64g3s4.sm_90");
    assert_int_equal(fj_kernel_desc_check(&k, 0), FJ_ERR_UNSUPPORTED);
    assert_non_null(strstr(fj_last_error(), "alibi 2 is not 0 or 1"));
    k.alibi = 0, k.sinks = 2;
    assert_int_equal(fj_kernel_desc_check(&k, 0), FJ_ERR_UNSUPPORTED);
    assert_non_null(strstr(fj_last_error(), "sinks 2 is not 0 or 1"));
    k.softcap = k.alibi = k.sinks = 0;
    k.split_kv = 1;
    char tiles[32];
    fj_kernel_desc_tiles_name(&k, tiles, sizeof tiles);
    assert_string_equal(tiles, "m192n64g3s4");
}

static void test_name_round_trip(void **state)
{
    (void)state;
    static const uint32_t tiles[][4] = {{16, 16, 1, 1},   {64, 64, 4, 2}, {128, 128, 8, 4},
                                        {256, 256, 8, 3}, {32, 48, 2, 1}, {128, 64, 4, 2}};
    /* flash_wgmma spells warps as warpgroups, so only multiples of 4 have a
       name of their own; g64 is the largest count the parser takes. */
    static const uint32_t wgmma_tiles[][4] = {{64, 64, 4, 2},   {128, 128, 8, 2},
                                              {192, 64, 12, 4}, {128, 64, 8, 3},
                                              {16, 16, 4, 1},   {256, 256, 256, 9}};
    _Static_assert(sizeof tiles == sizeof wgmma_tiles, "one wgmma tile row per flash_fwd row");
    static const uint32_t archs[] = {80, 86, 89, 90, 100, 120, 1000};
    int count = 0, wgmma = 0;
    for (uint32_t t = 1; t <= 3; t++)
        for (uint32_t d = 8; d <= 256; d += 8)
            for (uint32_t dt = FJ_F16; dt <= FJ_BF16; dt++)
                for (uint32_t m = 0; m < 4; m++)
                    for (size_t ti = 0; ti < sizeof tiles / sizeof tiles[0]; ti++)
                        for (uint32_t split = 0; split <= 1; split++)
                            for (size_t a = 0; a < sizeof archs / sizeof archs[0]; a++) {
                                const uint32_t *tl =
                                    t == FJ_TEMPLATE_FLASH_WGMMA ? wgmma_tiles[ti] : tiles[ti];
                                fj_kernel_desc k;
                                fj_kernel_desc_init(&k);
                                k.template_id = t;
                                k.head_dim = d;
                                k.dtype = dt;
                                k.mask = m;
                                k.block_m = tl[0];
                                k.block_n = tl[1];
                                k.warps = tl[2];
                                k.stages = tl[3];
                                k.split_kv = split;
                                k.softcap = (d / 8 + m + ti) % 2;
                                k.alibi = (d / 8 + a) % 2;
                                k.sinks = (d / 16 + m + a) % 2;
                                k.arch = archs[a];
                                char name[128], again[128];
                                fj_kernel_desc_name(&k, name, sizeof name);
                                if (t == FJ_TEMPLATE_FLASH_WGMMA) {
                                    char part[48];
                                    snprintf(part, sizeof part, ".m%un%ug%us%u.", tl[0], tl[1],
                                             tl[2] / 4, tl[3]);
                                    if (!strstr(name, part))
                                        fail_msg("%s does not spell its tiles %s", name, part);
                                    assert_true(!strncmp(name, "flash_wgmma.", 12));
                                    assert_int_equal(!!strstr(name, ".split."), split);
                                    wgmma++;
                                }
                                fj_kernel_desc back;
                                memset(&back, 0xa5, sizeof back);
                                if (fj_kernel_desc_parse(name, &back) != FJ_OK)
                                    fail_msg("%s does not parse: %s", name, fj_last_error());
                                if (memcmp(&back, &k, sizeof k))
                                    fail_msg("%s parses to a different descriptor", name);
                                fj_kernel_desc_name(&back, again, sizeof again);
                                assert_string_equal(again, name);
                                count++;
                            }
    assert_true(count > 15000);
    assert_int_equal(wgmma, count / 3);
}

typedef struct bad_name {
    const char *name, *message;
} bad_name;

static void test_parse_rejections(void **state)
{
    (void)state;
    static const bad_name cases[] = {
        {"", "kernel name '': 1 dot-separated parts; expected 6 to 12: <template>.d<head_dim>."
             "<dtype>.<mask>[.softcap][.alibi][.sinks][.varlen][.paged<page_size>].m<M>n<N>{w<"
             "warps>|g<warpgroups>}s<S>[.split].sm_<arch>"},
        {"flash_fwd.d128.bf16.causal.m128n64w4s2", "5 dot-separated parts; expected 6 to 12"},
        {"flash_fwd.d128.bf16.causal.paged.m128n64w4s2.sm_90",
         "'paged' is not paged<page_size> with a page size above 0"},
        {"flash_fwd.d128.bf16.causal.paged0.m128n64w4s2.sm_90", "'paged0' is not paged<"},
        {"flash_fwd.d128.bf16.causal.paged016.m128n64w4s2.sm_90", "'paged016' is not paged<"},
        {"flash_fwd.d128.bf16.causal.paged16.varlen.m128n64w4s2.sm_90",
         "'varlen' is not m<block_m>n<block_n>w<warps>s<stages>"},
        {"flash_fwd.d128.bf16.causal.varlen.softcap.m128n64w4s2.sm_90",
         "'softcap' is not m<block_m>n<block_n>w<warps>s<stages>"},
        {"flash_fwd.d128.bf16.causal.softcap.alibi.sinks.varlen.paged16.m128n64w4s2.split.sm_90.x",
         "13 dot-separated parts"},
        {"flash_fwd.d128.bf16.causal.m128n64w4s2.split.sm_90.x",
         "8 dot-separated parts, more than its optional parts allow"},
        {"flash_fwd.d128.bf16.causal.softcap.m128n64w4s2.split.sm_90.x",
         "9 dot-separated parts, more than its optional parts allow"},
        {"flash_fwd.d128.bf16.causal.softcap.alibi.sinks.m128n64w4s2.split.sm_90.x",
         "11 dot-separated parts, more than its optional parts allow"},
        {"flash_fwd.d128.bf16.causal.sc.m128n64w4s2.sm_90",
         "'sc' is not m<block_m>n<block_n>w<warps>s<stages>"},
        {"flash_fwd.d128.bf16.causal.sc.m128n64w4s2.sm_90",
         "(or softcap, alibi, sinks, varlen, paged<page_size> before them, in that order)"},
        /* the modifiers in their order only, each once */
        {"flash_fwd.d128.bf16.causal.sinks.alibi.m128n64w4s2.sm_90", "'alibi' is not m<block_m>"},
        {"flash_fwd.d128.bf16.causal.alibi.softcap.m128n64w4s2.sm_90",
         "'softcap' is not m<block_m>"},
        {"flash_fwd.d128.bf16.causal.alibi.alibi.m128n64w4s2.sm_90", "'alibi' is not m<block_m>"},
        {"flash_fwd.d128.bf16.causal.m128n64w4s2.sinks.sm_90",
         "'sinks' is not 'split', the only optional part after the tiles"},
        {"flash_fwd.d128.bf16.alibi.m128n64w4s2.sm_90", "'alibi' is not a mask kind"},
        {"flash_fwd.d128.bf16.causal.m128n64w4s2.softcap.sm_90",
         "'softcap' is not 'split', the only optional part after the tiles"},
        {"flash_fwd.d128.bf16.softcap.causal.m128n64w4s2.sm_90", "'softcap' is not a mask kind"},
        {"a.b.c.d.e.f.g.h.i.j.k.l.m", "13 dot-separated parts"},
        {"flash_bwd.d128.bf16.causal.m128n64w4s2.sm_90",
         "kernel name 'flash_bwd.d128.bf16.causal.m128n64w4s2.sm_90': 'flash_bwd' is not a "
         "template name (flash_fwd, flash_wgmma, flash_tma, combine, merge)"},
        {"flash_fwd.d7.bf16.causal.m128n64w4s2.sm_90",
         "kernel name 'flash_fwd.d7.bf16.causal.m128n64w4s2.sm_90': 'd7' is not d<head_dim> with "
         "head_dim a multiple of 8 in 8..256"},
        {"flash_fwd.d0.bf16.causal.m128n64w4s2.sm_90", "'d0' is not d<head_dim>"},
        {"flash_fwd.d264.bf16.causal.m128n64w4s2.sm_90", "'d264' is not d<head_dim>"},
        {"flash_fwd.d0128.bf16.causal.m128n64w4s2.sm_90", "'d0128' is not d<head_dim>"},
        {"flash_fwd.d+128.bf16.causal.m128n64w4s2.sm_90", "'d+128' is not d<head_dim>"},
        {"flash_fwd.128.bf16.causal.m128n64w4s2.sm_90", "'128' is not d<head_dim>"},
        {"flash_fwd.d128x.bf16.causal.m128n64w4s2.sm_90", "'d128x' is not d<head_dim>"},
        {"flash_fwd.d128.f32.causal.m128n64w4s2.sm_90", "'f32' is not a kernel dtype (f16, bf16)"},
        {"flash_fwd.d128.BF16.causal.m128n64w4s2.sm_90", "'BF16' is not a kernel dtype"},
        {"flash_fwd.d128.bf16.causal_br.m128n64w4s2.sm_90",
         "'causal_br' is not a mask kind (nomask, causal, window, causal_window)"},
        {"flash_fwd.d128.bf16..m128n64w4s2.sm_90", "'' is not a mask kind"},
        {"flash_fwd.d128.bf16.causal.m128n64w4.sm_90",
         "'m128n64w4' is not m<block_m>n<block_n>w<warps>s<stages>"},
        {"flash_fwd.d128.bf16.causal.m128n64w4s2x.sm_90", "'m128n64w4s2x' is not m<block_m>"},
        {"flash_fwd.d128.bf16.causal.n64m128w4s2.sm_90", "'n64m128w4s2' is not m<block_m>"},
        {"flash_fwd.d128.bf16.causal.m0128n64w4s2.sm_90", "'m0128n64w4s2' is not m<block_m>"},
        {"flash_fwd.d128.bf16.causal.m1234567n64w4s2.sm_90", "'m1234567n64w4s2' is not"},
        {"flash_fwd.d128.bf16.causal.m128n64w4s2.splitkv.sm_90",
         "'splitkv' is not 'split', the only optional part"},
        {"flash_fwd.d128.bf16.causal.m128n64w4s2.sm90", "'sm90' is not sm_<arch>"},
        {"flash_fwd.d128.bf16.causal.m128n64w4s2.sm_90a", "'sm_90a' is not sm_<arch>"},
        {"flash_fwd.d128.bf16.causal.m128n64w4s2.compute_90", "'compute_90' is not sm_<arch>"},
        {"flash_fwd.d128.bf16.causal.m128n64w4s2.sm_", "'sm_' is not sm_<arch>"},
        /* The warp letter must be the template's: w for flash_fwd and
           combine, g (warpgroups) for flash_wgmma. */
        {"flash_fwd.d128.bf16.causal.m128n128g2s2.sm_90",
         "kernel name 'flash_fwd.d128.bf16.causal.m128n128g2s2.sm_90': flash_fwd kernels count "
         "warps as w<warps>, not as in 'm128n128g2s2'"},
        {"flash_wgmma.d128.bf16.causal.m128n64w8s2.sm_90",
         "kernel name 'flash_wgmma.d128.bf16.causal.m128n64w8s2.sm_90': flash_wgmma kernels "
         "count warps as g<warpgroups>, not as in 'm128n64w8s2'"},
        {"flash_wgmma.d128.bf16.causal.m128n64w8s2.split.sm_90",
         "flash_wgmma kernels count warps as g<warpgroups>"},
        {"combine.d128.f16.nomask.m64n64g1s1.split.sm_90",
         "combine kernels count warps as w<warps>, not as in 'm64n64g1s1'"},
        {"flash_wgmma.d128.bf16.causal.m128n128g65s2.sm_90",
         "kernel name 'flash_wgmma.d128.bf16.causal.m128n128g65s2.sm_90': 'm128n128g65s2' is "
         "not m<block_m>n<block_n>w<warps>s<stages> (flash_fwd), "
         "m<block_m>n<block_n>g<warpgroups>s<stages> (flash_wgmma) or "
         "m<block_m>n<block_n>c<consumer warpgroups>s<stages> (flash_tma)"},
        {"flash_wgmma.d128.bf16.causal.m128n128g999999s2.sm_90", "'m128n128g999999s2' is not"},
        {"flash_wgmma.d128.bf16.causal.m128n128g1234567s2.sm_90", "'m128n128g1234567s2' is not"},
        {"flash_wgmma.d128.bf16.causal.m128n128g4294967296s2.sm_90", "'m128n128g4294967296s2'"},
        {"flash_wgmma.d128.bf16.causal.m128n128gs2.sm_90", "'m128n128gs2' is not"},
        {"flash_wgmma.d128.bf16.causal.m128n128g02s2.sm_90", "'m128n128g02s2' is not"},
        {"flash_wgmma.d128.bf16.causal.m128n128G2s2.sm_90", "'m128n128G2s2' is not"},
        {"flash_wgmma.d128.bf16.causal.m128n128g2w8s2.sm_90", "'m128n128g2w8s2' is not"},
        {"flash_wgmma.d128.bf16.causal.m128g2n128s2.sm_90", "'m128g2n128s2' is not"},
        {"flash_wgmma.d128.bf16.causal.m128n128g2.sm_90", "'m128n128g2' is not"},
        {"flash_wgmma.d128.bf16.causal.m128n128g2s2.sm_90a", "'sm_90a' is not sm_<arch>"},
        {"flash_wgmma.d96.bf16.causal.m128n128g2s2x.sm_90", "'m128n128g2s2x' is not"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fj_kernel_desc k = base_desc(), before = k;
        fj_status s = fj_kernel_desc_parse(cases[i].name, &k);
        if (s != FJ_ERR_INVALID_ARGUMENT)
            fail_msg("'%s' gave %s, not FJ_ERR_INVALID_ARGUMENT", cases[i].name, fj_status_name(s));
        assert_contains(fj_last_error(), cases[i].message);
        /* A failed parse leaves the output alone. */
        assert_memory_equal(&k, &before, sizeof k);
    }
    fj_kernel_desc k;
    assert_int_equal(fj_kernel_desc_parse(NULL, &k), FJ_ERR_INVALID_ARGUMENT);
    assert_string_equal(fj_last_error(), "kernel name is NULL");
    char longname[300];
    memset(longname, 'x', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    assert_int_equal(fj_kernel_desc_parse(longname, &k), FJ_ERR_INVALID_ARGUMENT);
    assert_contains(fj_last_error(), "is 299 characters long: the limit is 127");

    /* Parsing checks the spelling, not the rules (fj_kernel_desc_check
       does): g0 and g64, the largest count it takes, parse. */
    assert_int_equal(fj_kernel_desc_parse("flash_wgmma.d128.bf16.causal.m128n128g0s2.sm_90", &k),
                     FJ_OK);
    assert_int_equal(k.template_id, FJ_TEMPLATE_FLASH_WGMMA);
    assert_int_equal(k.warps, 0);
    assert_int_equal(fj_kernel_desc_check(&k, 0), FJ_ERR_UNSUPPORTED);
    assert_contains(fj_last_error(), "warps 0 is not 4, 8 or 12");
    assert_int_equal(fj_kernel_desc_parse("flash_wgmma.d64.f16.nomask.m64n64g64s2.sm_90", &k),
                     FJ_OK);
    assert_int_equal(k.warps, 256);
    assert_int_equal(fj_kernel_desc_parse("flash_wgmma.d192.f16.window.m192n64g3s3.split.sm_90",
                                          &k),
                     FJ_OK);
    assert_int_equal(k.template_id, FJ_TEMPLATE_FLASH_WGMMA);
    assert_int_equal(k.head_dim, 192);
    assert_int_equal(k.dtype, FJ_F16);
    assert_int_equal(k.mask, FJ_MASK_WINDOW);
    assert_int_equal(k.block_m, 192);
    assert_int_equal(k.block_n, 64);
    assert_int_equal(k.warps, 12);
    assert_int_equal(k.stages, 3);
    assert_int_equal(k.split_kv, 1);
    assert_int_equal(k.arch, 90);
    assert_int_equal(fj_kernel_desc_check(&k, 0), FJ_OK);
}

/* ---- rules ------------------------------------------------------------------- */

typedef struct bad_desc {
    const char *what;
    void (*mutate)(fj_kernel_desc *k);
    const char *message;
} bad_desc;

/* Each case mutates a copy of base, which itself passes, and must be
 * rejected with FJ_ERR_UNSUPPORTED and a message starting with prefix and
 * containing the case's text. */
static void expect_rejections(const bad_desc *cases, size_t n, fj_kernel_desc base,
                              const char *prefix)
{
    assert_int_equal(fj_kernel_desc_check(&base, 0), FJ_OK);
    for (size_t i = 0; i < n; i++) {
        fj_kernel_desc k = base;
        cases[i].mutate(&k);
        fj_status s = fj_kernel_desc_check(&k, 0);
        if (s != FJ_ERR_UNSUPPORTED)
            fail_msg("%s: %s, not FJ_ERR_UNSUPPORTED", cases[i].what, fj_status_name(s));
        assert_contains(fj_last_error(), cases[i].message);
        assert_true(!strncmp(fj_last_error(), prefix, strlen(prefix)));
    }
}

static void m_version(fj_kernel_desc *k) { k->generator_version = 0; }
static void m_template(fj_kernel_desc *k) { k->template_id = 9; }
static void m_template0(fj_kernel_desc *k) { k->template_id = 0; }
static void m_dim_small(fj_kernel_desc *k) { k->head_dim = 0; }
static void m_dim_odd(fj_kernel_desc *k) { k->head_dim = 100; }
static void m_dim_big(fj_kernel_desc *k) { k->head_dim = 264; }
static void m_dtype(fj_kernel_desc *k) { k->dtype = FJ_F32; }
static void m_mask(fj_kernel_desc *k) { k->mask = 4; }
static void m_warps3(fj_kernel_desc *k) { k->warps = 3; }
static void m_warps16(fj_kernel_desc *k) { k->warps = 16; }
static void m_bm_warps(fj_kernel_desc *k) { k->block_m = 32; } /* 4 warps need 64 */
static void m_bm_big(fj_kernel_desc *k) { k->block_m = 320; }
static void m_bm_zero(fj_kernel_desc *k) { k->block_m = 0; }
/* 4 warps of block_m 16 share each key tile: 16 keys each at least */
static void m_bn_key_warps(fj_kernel_desc *k) { k->block_m = 16, k->block_n = 48; }
static void m_bn_odd(fj_kernel_desc *k) { k->block_n = 40; }
static void m_bn_big(fj_kernel_desc *k) { k->block_n = 272; }
static void m_bn_zero(fj_kernel_desc *k) { k->block_n = 0; }
static void m_stages0(fj_kernel_desc *k) { k->stages = 0; }
static void m_stages5(fj_kernel_desc *k) { k->stages = 5; }
static void m_split(fj_kernel_desc *k) { k->split_kv = 2; }
static void m_softcap(fj_kernel_desc *k) { k->softcap = 2; }
static void m_arch(fj_kernel_desc *k) { k->arch = 75; }
static void m_smem90(fj_kernel_desc *k) { k->head_dim = 256, k->block_n = 128, k->stages = 4; }
static void m_smem86(fj_kernel_desc *k) { k->arch = 86; }

static void test_check_rejections(void **state)
{
    (void)state;
    static const bad_desc cases[] = {
        {"version", m_version, "generator_version 0 is not this generator's (1)"},
        {"template", m_template,
         "template_id 9 is not a template (1 flash_fwd, 2 combine, 3 flash_wgmma, 4 flash_tma, 5 "
         "merge)"},
        {"template 0", m_template0, "template_id 0 is not a template"},
        {"head_dim 0", m_dim_small, "head_dim 0 is not a multiple of 8 in 8..256"},
        {"head_dim 100", m_dim_odd, "head_dim 100 is not a multiple of 8 in 8..256"},
        {"head_dim 264", m_dim_big, "head_dim 264 is not a multiple of 8 in 8..256"},
        {"dtype", m_dtype, "dtype 0 is not f16 or bf16"},
        {"mask", m_mask, "mask 4 is not a mask kind (0..3)"},
        {"warps 3", m_warps3, "warps 3 is not 1, 2, 4 or 8"},
        {"warps 16", m_warps16, "warps 16 is not 1, 2, 4 or 8"},
        {"block_m per warp", m_bm_warps,
         "block_m 32 is neither 16 nor a multiple of 16 * warps (64) in 16..256"},
        {"block_m 320", m_bm_big, "block_m 320 is neither 16 nor"},
        {"block_m 0", m_bm_zero, "block_m 0 is neither 16 nor"},
        {"key warps' block_n", m_bn_key_warps,
         "block_n 48 is not a multiple of 16 * warps (64): at block_m 16 the 4 warps share each "
         "key tile"},
        {"block_n 40", m_bn_odd, "block_n 40 is not a multiple of 16 in 16..256"},
        {"block_n 272", m_bn_big, "block_n 272 is not a multiple of 16 in 16..256"},
        {"block_n 0", m_bn_zero, "block_n 0 is not a multiple of 16 in 16..256"},
        {"stages 0", m_stages0, "stages 0 is not in 1..4"},
        {"stages 5", m_stages5, "stages 5 is not in 1..4"},
        {"split_kv", m_split, "split_kv 2 is not 0 or 1"},
        {"softcap", m_softcap, "softcap 2 is not 0 or 1"},
        {"arch", m_arch, "arch sm_75 is older than sm_80"},
        /* (128 + 2*4*128) * 264 * 2 = 608256 > 227 KiB */
        {"smem sm_90", m_smem90, "needs 608256 bytes of shared memory"},
        /* (128 + 2*2*64) * 136 * 2 = 104448 > 99 KiB */
        {"smem sm_86", m_smem86,
         "kernel flash_fwd.d128.bf16.causal.m128n64w4s2.sm_86: needs 104448 bytes of shared "
         "memory ((block_m + 2 * stages * block_n) * (head_dim rounded up to 16 + 8) * 2), more "
         "than the 101376 bytes the arch allows a block"},
    };
    /* Every message starts with the kernel's name. */
    expect_rejections(cases, sizeof cases / sizeof cases[0], base_desc(), "kernel ");
}

/* Key warps: at block_m 16, 1..8 warps share each key tile when it gives
 * each a multiple of 16 keys; the parsed name keeps the fields. */
/* Variable-length and paged descriptors: their names (the parts only they
 * have, so every other name is unchanged), their rules (page size a
 * multiple of 16; flash_fwd and its combine only), their macros, and the
 * heuristic's choice of flash_fwd for them on sm_90. */
static void test_varlen_paged(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        uint32_t varlen, page_size, softcap, split;
    } good[] = {
        {"flash_fwd.d128.bf16.causal.varlen.m128n64w4s2.sm_90", 1, 0, 0, 0},
        {"flash_fwd.d128.bf16.nomask.paged16.m16n64w2s1.split.sm_90", 0, 16, 0, 1},
        {"flash_fwd.d64.f16.causal_window.softcap.varlen.paged48.m64n64w4s2.sm_80", 1, 48, 1, 0},
        {"flash_fwd.d256.bf16.nomask.paged65536.m16n64w4s1.split.sm_80", 0, 65536, 0, 1},
        {"combine.d128.bf16.nomask.varlen.m16n64w1s1.split.sm_90", 1, 0, 0, 1},
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        fj_kernel_desc k;
        if (fj_kernel_desc_parse(good[i].name, &k)) fail_msg("%s", fj_last_error());
        assert_int_equal(k.varlen, good[i].varlen);
        assert_int_equal(k.page_size, good[i].page_size);
        assert_int_equal(k.softcap, good[i].softcap);
        assert_int_equal(k.split_kv, good[i].split);
        char back[128];
        fj_kernel_desc_name(&k, back, sizeof back);
        assert_string_equal(back, good[i].name);
        assert_int_equal(fj_kernel_desc_check(&k, SIZE_MAX), FJ_OK);
        char *src;
        size_t len;
        if (fj_codegen_render(&k, &src, &len) != FJ_OK) fail_msg("%s", fj_last_error());
        /* in the macro block, before the first pasted file (whose
           #ifndef defaults them to 0) */
        const char *files = strstr(src, "#line 1 ");
        assert_non_null(files);
        const char *v = strstr(src, "#define FJ_VARLEN 1\n");
        assert_int_equal(v && v < files, k.varlen == 1);
        char page[64];
        snprintf(page, sizeof page, "#define FJ_PAGE_SIZE %u\n", (unsigned)k.page_size);
        const char *ps = strstr(src, page);
        assert_int_equal(ps && ps < files, k.page_size != 0);
        free(src);
    }
    /* a plain kernel's macro block has neither */
    {
        fj_kernel_desc k = base_desc();
        char *src;
        size_t len;
        assert_int_equal(fj_codegen_render(&k, &src, &len), FJ_OK);
        const char *files = strstr(src, "#line 1 ");
        assert_non_null(files);
        const char *v = strstr(src, "#define FJ_VARLEN"), *ps = strstr(src, "#define FJ_PAGE_SIZE");
        assert_true(!v || v > files);
        assert_true(!ps || ps > files);
        free(src);
    }
    static const struct {
        const char *name, *message;
    } bad[] = {
        {"flash_fwd.d128.bf16.nomask.paged24.m16n64w2s1.sm_90",
         "page_size 24: a paged KV cache on CUDA needs a page size that is a multiple of 16"},
        {"flash_fwd.d128.bf16.nomask.paged131072.m16n64w2s1.sm_90", "up to 65536"},
        {"flash_tma.d128.bf16.causal.varlen.m128n128c2s2.sm_90",
         "varlen: flash_tma takes no variable-length batches: its tensor maps address dense"},
        {"flash_tma.d128.bf16.causal.paged16.m128n128c2s2.sm_90",
         "page_size: flash_tma takes no paged KV cache"},
        {"flash_wgmma.d128.bf16.causal.varlen.m128n128g2s2.sm_90",
         "varlen: flash_wgmma takes no variable-length batches: its loads read dense"},
        {"flash_wgmma.d128.bf16.nomask.paged64.m128n128g2s2.sm_90",
         "page_size: flash_wgmma takes no paged KV cache"},
        {"combine.d128.bf16.nomask.paged16.m16n64w1s1.split.sm_90",
         "page_size: combine takes no paged KV cache: it merges partials of dense rows"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        fj_kernel_desc k;
        if (fj_kernel_desc_parse(bad[i].name, &k)) fail_msg("%s", fj_last_error());
        assert_int_equal(fj_kernel_desc_check(&k, SIZE_MAX), FJ_ERR_UNSUPPORTED);
        assert_contains(fj_last_error(), bad[i].name);
        assert_contains(fj_last_error(), bad[i].message);
    }
    /* the heuristic: flash_fwd for varlen and paged problems on every arch
       (sm_90's prefill choice for the dense problem is another template),
       the split kernel's combine dense for paged, varlen for varlen */
    static const uint32_t feats[] = {FJ_FEATURE_VARLEN, FJ_FEATURE_PAGED_KV,
                                     FJ_FEATURE_VARLEN | FJ_FEATURE_PAGED_KV};
    for (uint32_t arch = 80; arch <= 90; arch += 10)
        for (int f = 0; f < 3; f++)
            for (int sq = 1; sq <= 4096; sq *= 64) {
                fj_attention_desc d;
                fj_attention_desc_init(&d, 4, 16, 4, sq, 4096, 128, FJ_BF16);
                d.causal = FJ_CAUSAL_BOTTOM_RIGHT;
                d.features = feats[f];
                if (feats[f] & FJ_FEATURE_PAGED_KV) {
                    d.page_size = 32;
                    d.num_pages = 600;
                    d.max_pages = 128;
                }
                fj_problem p;
                assert_int_equal(fj_problem_init(&p, &d), FJ_OK);
                fj_kernel_desc k;
                if (fj_kernel_desc_for_problem(&p, arch, &k)) fail_msg("%s", fj_last_error());
                assert_int_equal(k.template_id, FJ_TEMPLATE_FLASH_FWD);
                assert_int_equal(k.varlen, (feats[f] & FJ_FEATURE_VARLEN) != 0);
                assert_int_equal(k.page_size, feats[f] & FJ_FEATURE_PAGED_KV ? 32 : 0);
                fj_kernel_desc c;
                fj_kernel_desc_combine_for(&k, 1, &c);
                assert_int_equal(c.varlen, k.varlen);
                assert_int_equal(c.page_size, 0);
                assert_int_equal(fj_kernel_desc_check(&c, SIZE_MAX), FJ_OK);
                /* the dense problem's kernel is what it was */
                d.features = 0;
                d.page_size = d.num_pages = d.max_pages = 0;
                assert_int_equal(fj_problem_init(&p, &d), FJ_OK);
                assert_int_equal(fj_kernel_desc_for_problem(&p, arch, &k), FJ_OK);
                assert_int_equal(k.varlen, 0);
                assert_int_equal(k.page_size, 0);
            }
    /* a page size that is no multiple of 16: refused naming it and the rule */
    fj_attention_desc d;
    fj_attention_desc_init(&d, 2, 8, 8, 1, 100, 64, FJ_F16);
    d.features = FJ_FEATURE_PAGED_KV;
    d.page_size = 24;
    d.num_pages = 10;
    d.max_pages = 5;
    fj_problem p;
    assert_int_equal(fj_problem_init(&p, &d), FJ_OK);
    fj_kernel_desc k;
    assert_int_equal(fj_kernel_desc_for_problem(&p, 90, &k), FJ_ERR_UNSUPPORTED);
    assert_contains(fj_last_error(),
                    "page_size 24: a paged KV cache on CUDA needs a page size that "
                    "is a multiple of 16");
}

static void test_check_key_warps(void **state)
{
    (void)state;
    static const char *const ok[] = {"m16n16w1s2",  "m16n32w2s2",  "m16n64w2s2", "m16n64w4s2",
                                     "m16n128w4s1", "m16n128w8s2", "m16n256w8s1"};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        fj_kernel_desc k = base_desc();
        assert_int_equal(fj_kernel_desc_parse_tiles(ok[i], &k), FJ_OK);
        assert_int_equal(k.block_m, 16);
        if (fj_kernel_desc_check(&k, 0) != FJ_OK) fail_msg("%s: %s", ok[i], fj_last_error());
        char name[32];
        fj_kernel_desc_tiles_name(&k, name, sizeof name);
        assert_string_equal(name, ok[i]);
    }
    static const char *const bad[] = {"m16n16w2s2", "m16n32w4s2", "m16n96w4s2", "m16n64w8s2"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        fj_kernel_desc k = base_desc();
        assert_int_equal(fj_kernel_desc_parse_tiles(bad[i], &k), FJ_OK);
        if (fj_kernel_desc_check(&k, 0) != FJ_ERR_UNSUPPORTED) fail_msg("%s accepted", bad[i]);
        assert_contains(fj_last_error(), "at block_m 16 the");
    }
}

/* flash_wgmma's own rules (its mutations start from wgmma_desc()). */
static void w_arch80(fj_kernel_desc *k) { k->arch = 80; }
static void w_arch100(fj_kernel_desc *k) { k->arch = 100; }
static void w_dim96(fj_kernel_desc *k) { k->head_dim = 96; }
static void w_dim100(fj_kernel_desc *k) { k->head_dim = 100; }
static void w_g4(fj_kernel_desc *k) { k->warps = 16, k->block_m = 256; }
static void w_g0(fj_kernel_desc *k) { k->warps = 0; }
static void w_bm_g1(fj_kernel_desc *k) { k->warps = 4; } /* m128 needs g2 */
static void w_bm_64(fj_kernel_desc *k) { k->block_m = 64; }
static void w_bm_192(fj_kernel_desc *k) { k->block_m = 192; }
static void w_bn32(fj_kernel_desc *k) { k->block_n = 32; }
static void w_bn256(fj_kernel_desc *k) { k->block_n = 256; }
static void w_stages1(fj_kernel_desc *k) { k->stages = 1; }
static void w_stages5(fj_kernel_desc *k) { k->stages = 5; }
static void w_split(fj_kernel_desc *k) { k->split_kv = 2; }
static void w_smem(fj_kernel_desc *k) { k->head_dim = 256, k->stages = 4; }

static void test_wgmma_rules(void **state)
{
    (void)state;
    static const bad_desc cases[] = {
        {"arch 80", w_arch80,
         "kernel flash_wgmma.d128.bf16.causal.m128n128g2s2.sm_80: arch sm_80: flash_wgmma needs "
         "sm_90 (wgmma exists there only; flash_fwd runs everywhere)"},
        {"arch 100", w_arch100, "arch sm_100: flash_wgmma needs sm_90"},
        {"head_dim 96", w_dim96,
         "kernel flash_wgmma.d96.bf16.causal.m128n128g2s2.sm_90: head_dim 96 is not a multiple "
         "of 64: flash_wgmma's rows are whole 128-byte swizzle atoms"},
        /* the general rule comes first */
        {"head_dim 100", w_dim100, "head_dim 100 is not a multiple of 8 in 8..256"},
        {"warpgroups 4", w_g4,
         "m256n128g4s2.sm_90: warps 16 is not 4, 8 or 12 (flash_wgmma runs 1, 2 or 3 "
         "warpgroups of 4)"},
        {"warpgroups 0", w_g0, "warps 0 is not 4, 8 or 12"},
        {"block_m of g1", w_bm_g1,
         "m128n128g1s2.sm_90: block_m 128 is not 64 * warpgroups (64): a warpgroup owns 64 "
         "query rows"},
        {"block_m 64 of g2", w_bm_64, "block_m 64 is not 64 * warpgroups (128)"},
        {"block_m 192 of g2", w_bm_192, "block_m 192 is not 64 * warpgroups (128)"},
        {"block_n 32", w_bn32, "block_n 32 is not 64 or 128"},
        {"block_n 256", w_bn256, "block_n 256 is not 64 or 128"},
        {"stages 1", w_stages1, "stages 1 is not in 2..4"},
        {"stages 5", w_stages5, "stages 5 is not in 2..4"},
        {"split_kv", w_split, "split_kv 2 is not 0 or 1"},
        /* (128 + 2*4*128) * 256 * 2 + 1024 = 590848 > 227 KiB */
        {"smem", w_smem,
         "kernel flash_wgmma.d256.bf16.causal.m128n128g2s4.sm_90: needs 590848 bytes of shared "
         "memory ((block_m + 2 * stages * block_n) * head_dim * 2 + 1024), more than the 232448 "
         "bytes the arch allows a block"},
    };
    expect_rejections(cases, sizeof cases / sizeof cases[0], wgmma_desc(), "kernel flash_wgmma.");
    /* Everything the rules allow passes exactly when it fits sm_90's 227 KiB. */
    int passed = 0, too_big = 0;
    for (uint32_t d = 64; d <= 256; d += 64)
        for (uint32_t g = 1; g <= 3; g++)
            for (uint32_t n = 64; n <= 128; n += 64)
                for (uint32_t st = 2; st <= 4; st++)
                    for (uint32_t split = 0; split <= 1; split++) {
                        fj_kernel_desc k = wgmma_desc();
                        k.head_dim = d, k.warps = 4 * g, k.block_m = 64 * g, k.block_n = n;
                        k.stages = st, k.split_kv = split;
                        size_t need = (64 * g + 2 * st * n) * d * 2 + 1024;
                        assert_int_equal(fj_kernel_desc_smem_bytes(&k), need);
                        fj_status s = fj_kernel_desc_check(&k, 0);
                        if (need <= 232448) {
                            if (s != FJ_OK) fail_msg("%s", fj_last_error());
                            passed++;
                        } else {
                            assert_int_equal(s, FJ_ERR_UNSUPPORTED);
                            assert_contains(fj_last_error(), "bytes of shared memory");
                            too_big++;
                        }
                    }
    assert_true(passed > 0 && too_big > 0);
}

static void test_smem(void **state)
{
    (void)state;
    fj_kernel_desc k = base_desc();
    assert_int_equal(fj_kernel_desc_smem_bytes(&k), (128 + 2 * 2 * 64) * (128 + 8) * 2);
    k.head_dim = 72; /* rounds up to 80 */
    assert_int_equal(fj_kernel_desc_smem_bytes(&k), (128 + 2 * 2 * 64) * (80 + 8) * 2);
    k.head_dim = 8;
    k.block_m = 16, k.block_n = 16, k.warps = 1, k.stages = 1;
    assert_int_equal(fj_kernel_desc_smem_bytes(&k), (16 + 2 * 16) * (16 + 8) * 2);

    /* The opt-in limits per arch, at their exact edges: d256 m64n64w4s1
       needs (64 + 128) * 264 * 2 = 101376 = 99 KiB exactly. */
    k = base_desc();
    k.head_dim = 256, k.block_m = 64, k.stages = 1;
    assert_int_equal(fj_kernel_desc_smem_bytes(&k), 101376);
    static const uint32_t archs[] = {80, 86, 87, 89, 90, 100, 120};
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++) {
        k.arch = archs[i];
        assert_int_equal(fj_kernel_desc_check(&k, 0), FJ_OK);
        assert_int_equal(fj_kernel_desc_check(&k, 101376), FJ_OK);
        assert_int_equal(fj_kernel_desc_check(&k, 101375), FJ_ERR_UNSUPPORTED);
        assert_contains(fj_last_error(), "more than the 101375 bytes allowed");
    }
    /* s2: 168960, over sm_80's 166912 and under sm_90's 232448. */
    k.stages = 2;
    k.arch = 80;
    assert_int_equal(fj_kernel_desc_check(&k, 0), FJ_ERR_UNSUPPORTED);
    assert_contains(fj_last_error(), "needs 168960 bytes");
    assert_contains(fj_last_error(), "than the 166912 bytes");
    k.arch = 87;
    assert_int_equal(fj_kernel_desc_check(&k, 0), FJ_ERR_UNSUPPORTED);
    k.arch = 90;
    assert_int_equal(fj_kernel_desc_check(&k, 0), FJ_OK);
    k.arch = 100;
    assert_int_equal(fj_kernel_desc_check(&k, 0), FJ_OK);
    k.arch = 1000; /* unknown, newer: 227 KiB */
    assert_int_equal(fj_kernel_desc_check(&k, 0), FJ_OK);
    k.arch = 86;
    assert_int_equal(fj_kernel_desc_check(&k, 0), FJ_ERR_UNSUPPORTED);
    /* An explicit limit wins over the arch's. */
    assert_int_equal(fj_kernel_desc_check(&k, 168960), FJ_OK);

    assert_int_equal(fj_kernel_desc_threads(&k), 128);

    /* flash_wgmma: unpadded rows plus 1024 bytes of alignment;
       (128 + 2*2*128) * 128 * 2 + 1024 = 164864. */
    k = wgmma_desc();
    assert_int_equal(fj_kernel_desc_smem_bytes(&k), 164864);
    assert_int_equal(fj_kernel_desc_threads(&k), 256);
    assert_int_equal(fj_kernel_desc_check(&k, 164864), FJ_OK);
    assert_int_equal(fj_kernel_desc_check(&k, 164863), FJ_ERR_UNSUPPORTED);
    assert_contains(fj_last_error(),
                    "kernel flash_wgmma.d128.bf16.causal.m128n128g2s2.sm_90: needs 164864 bytes "
                    "of shared memory ((block_m + 2 * stages * block_n) * head_dim * 2 + 1024), "
                    "more than the 164863 bytes allowed");
    /* the same tiles of flash_fwd pad every row by 8 elements */
    k.template_id = FJ_TEMPLATE_FLASH_FWD;
    assert_int_equal(fj_kernel_desc_smem_bytes(&k), (128 + 2 * 2 * 128) * (128 + 8) * 2);
    k = wgmma_desc();
    k.head_dim = 64, k.block_n = 64, k.stages = 4, k.warps = 4, k.block_m = 64;
    assert_int_equal(fj_kernel_desc_smem_bytes(&k), (64 + 2 * 4 * 64) * 64 * 2 + 1024);
}

/* ---- GQA packing and decode tiles ------------------------------------------ */

static fj_problem gqa_problem(int hq, int hkv, int sq, fj_causal c, int wl, bool bhsd)
{
    fj_attention_desc d;
    fj_attention_desc_init(&d, 2, hq, hkv, sq, 1000, 128, FJ_BF16);
    d.causal = c;
    d.window_left = wl;
    if (bhsd) { /* [batch, heads, seq, dim] for q and o */
        int64_t st[3] = {(int64_t)hq * sq * 128, 128, (int64_t)sq * 128};
        memcpy(d.q_stride, st, sizeof st);
        memcpy(d.o_stride, st, sizeof st);
    }
    fj_problem p;
    assert_int_equal(fj_problem_init(&p, &d), FJ_OK);
    return p;
}

static void test_gqa_pack_rules(void **state)
{
    (void)state;
    fj_problem q;
    /* decode, dense [b, s, h, d]: row g is query head kv*4+g, one head apart */
    fj_problem p = gqa_problem(32, 8, 1, FJ_CAUSAL_NONE, -1, false);
    assert_true(fj_launch_view(&p, &q));
    assert_int_equal(q.heads_q, 8);
    assert_int_equal(q.group, 1);
    assert_int_equal(q.seqlen_q, 4);
    assert_int_equal(q.q_stride[FJ_AXIS_SEQ], 128);
    assert_int_equal(q.q_stride[FJ_AXIS_HEAD], 4 * 128);
    assert_int_equal(q.o_stride[FJ_AXIS_HEAD], 4 * 128);
    assert_int_equal(q.q_stride[FJ_AXIS_BATCH], p.q_stride[FJ_AXIS_BATCH]);
    assert_int_equal(q.k_stride[FJ_AXIS_HEAD], p.k_stride[FJ_AXIS_HEAD]);
    /* bottom-right causal with one query hides nothing: packed, unmasked */
    p = gqa_problem(32, 8, 1, FJ_CAUSAL_BOTTOM_RIGHT, -1, false);
    assert_true(fj_launch_view(&p, &q));
    assert_int_equal(q.causal, FJ_CAUSAL_NONE);
    /* several queries: packed only when heads are seqlen_q rows apart */
    p = gqa_problem(32, 8, 3, FJ_CAUSAL_NONE, -1, true);
    assert_true(fj_launch_view(&p, &q));
    assert_int_equal(q.seqlen_q, 12);
    assert_int_equal(q.q_stride[FJ_AXIS_SEQ], 128);
    assert_int_equal(q.q_stride[FJ_AXIS_HEAD], 4 * 3 * 128);
    p = gqa_problem(32, 8, 3, FJ_CAUSAL_NONE, -1, false);
    assert_false(fj_launch_view(&p, &q));
    /* masks that differ per query row, windows, MHA, long queries: never */
    p = gqa_problem(32, 8, 1, FJ_CAUSAL_TOP_LEFT, -1, false);
    assert_false(fj_launch_view(&p, &q));
    p = gqa_problem(32, 8, 3, FJ_CAUSAL_BOTTOM_RIGHT, -1, true);
    assert_false(fj_launch_view(&p, &q));
    p = gqa_problem(32, 8, 1, FJ_CAUSAL_NONE, 100, false);
    assert_false(fj_launch_view(&p, &q));
    p = gqa_problem(32, 32, 1, FJ_CAUSAL_NONE, -1, false);
    assert_false(fj_launch_view(&p, &q));
    /* not packed, but a causal mask that hides nothing is still dropped */
    p = gqa_problem(32, 32, 1, FJ_CAUSAL_BOTTOM_RIGHT, -1, false);
    assert_false(fj_launch_view(&p, &q));
    assert_int_equal(q.causal, FJ_CAUSAL_NONE);
    assert_false(q.masked);
    p = gqa_problem(32, 8, 1, FJ_CAUSAL_TOP_LEFT, -1, false);
    fj_launch_view(&p, &q);
    assert_int_equal(q.causal, FJ_CAUSAL_TOP_LEFT);
    p = gqa_problem(32, 8, 17, FJ_CAUSAL_NONE, -1, true);
    assert_false(fj_launch_view(&p, &q));
    assert_int_equal(q.seqlen_q, 17); /* a copy when not packed */
    /* ALiBi packs as plain problems do, but only flash_fwd's tiles of one
       16-row m tile per warp read a packed row's slope */
    p = gqa_problem(32, 8, 1, FJ_CAUSAL_BOTTOM_RIGHT, -1, false);
    p.alibi = true;
    assert_true(fj_launch_view(&p, &q));
    assert_int_equal(q.seqlen_q, 4);
    /* the kernel recovers the user's diag_offset (flash_fwd.cu alibi_tile) */
    assert_int_equal(q.diag_offset + (int64_t)(p.group - 1) * p.seqlen_q, p.diag_offset);
    assert_true(fj_launch_view_takes(&p, FJ_TEMPLATE_FLASH_FWD, 16, 4));
    assert_true(fj_launch_view_takes(&p, FJ_TEMPLATE_FLASH_FWD, 64, 4));
    assert_false(fj_launch_view_takes(&p, FJ_TEMPLATE_FLASH_FWD, 128, 4));
    assert_false(fj_launch_view_takes(&p, FJ_TEMPLATE_FLASH_WGMMA, 64, 4));
    assert_false(fj_launch_view_takes(&p, FJ_TEMPLATE_FLASH_TMA, 128, 4));
    p = gqa_problem(32, 8, 3, FJ_CAUSAL_NONE, -1, true);
    p.alibi = true;
    assert_true(fj_launch_view(&p, &q));
    assert_int_equal(q.diag_offset + (int64_t)(p.group - 1) * p.seqlen_q, p.diag_offset);
    fj_launch_view_unpacked(&p, &q);
    assert_int_equal(q.heads_q, 32);
    assert_int_equal(q.seqlen_q, 3);
    p.alibi = false; /* without ALiBi every template takes the packed view */
    assert_true(fj_launch_view_takes(&p, FJ_TEMPLATE_FLASH_TMA, 128, 4));
}

/* The sm_90 kernel chosen for p has these tiles (and the template their
 * letter names); returns it. */
static fj_kernel_desc expect_tiles(const fj_problem *p, const char *want)
{
    fj_kernel_desc k;
    char tiles[32];
    assert_int_equal(fj_kernel_desc_for_problem(p, 90, &k), FJ_OK);
    fj_kernel_desc_tiles_name(&k, tiles, sizeof tiles);
    assert_string_equal(tiles, want);
    assert_int_equal(k.template_id, tiles_template(want));
    return k;
}

static void test_decode_tiles(void **state)
{
    (void)state;
    /* one query of an MHA head, and GQA 32:8 packed to 4 rows: decode tiles */
    /* (d128, which flash_wgmma takes for prefill: decode stays flash_fwd,
       one 16-row tile with four key warps over swizzled K/V rows) */
    fj_problem p = gqa_problem(32, 32, 1, FJ_CAUSAL_NONE, -1, false);
    expect_tiles(&p, "m16n128w4s1");
    p = gqa_problem(32, 8, 1, FJ_CAUSAL_BOTTOM_RIGHT, -1, false);
    fj_kernel_desc k = expect_tiles(&p, "m16n128w4s1");
    assert_int_equal(k.mask, FJ_MASK_NONE); /* the packed problem's */
    /* on sm_80 d128 keeps two warps of 16 rows with 32-key tiles (the four
       key warps get a stack frame there), d64 takes the four key warps */
    assert_int_equal(fj_kernel_desc_for_problem(&p, 80, &k), FJ_OK);
    assert_int_equal(k.block_m, 32);
    assert_int_equal(k.block_n, 32);
    assert_int_equal(k.warps, 2);
    fj_attention_desc d;
    fj_attention_desc_init(&d, 1, 8, 8, 1, 1000, 64, FJ_F16);
    assert_int_equal(fj_problem_init(&p, &d), FJ_OK);
    expect_tiles(&p, "m16n128w4s1");
    assert_int_equal(fj_kernel_desc_for_problem(&p, 80, &k), FJ_OK);
    assert_int_equal(k.block_m, 16);
    assert_int_equal(k.block_n, 128);
    assert_int_equal(k.warps, 4);
    /* other head dims up to 128 (but 104): two warps of 16 rows, 32-key tiles */
    fj_attention_desc_init(&d, 1, 8, 8, 1, 1000, 96, FJ_BF16);
    assert_int_equal(fj_problem_init(&p, &d), FJ_OK);
    expect_tiles(&p, "m32n32w2s2");
    /* masks that hide something keep the prefill tiles */
    p = gqa_problem(32, 8, 1, FJ_CAUSAL_TOP_LEFT, -1, false);
    expect_tiles(&p, sm90_prefill_tiles(128));
    p = gqa_problem(32, 32, 1, FJ_CAUSAL_NONE, 100, false);
    expect_tiles(&p, sm90_prefill_tiles(128));
    /* 16 queries of 4 heads packed are 64 rows: the prefill tiles */
    p = gqa_problem(32, 8, 16, FJ_CAUSAL_NONE, -1, true);
    expect_tiles(&p, sm90_prefill_tiles(128));
    /* on sm_80 the prefill tiles are flash_fwd's */
    assert_int_equal(fj_kernel_desc_for_problem(&p, 80, &k), FJ_OK);
    assert_int_equal(k.template_id, FJ_TEMPLATE_FLASH_FWD);
    /* decode tiles at head dim 256: four warps (one would spill), and they
       fit every arch */
    fj_attention_desc_init(&d, 1, 4, 4, 1, 100, 256, FJ_F16);
    assert_int_equal(fj_problem_init(&p, &d), FJ_OK);
    for (uint32_t arch = 80; arch <= 90; arch++) {
        if (fj_kernel_desc_for_problem(&p, arch, &k) != FJ_OK) continue; /* not an arch */
        assert_int_equal(k.template_id, FJ_TEMPLATE_FLASH_FWD);
        assert_int_equal(k.block_m, 64);
        assert_int_equal(k.warps, 4);
        assert_int_equal(fj_kernel_desc_check(&k, 0), FJ_OK);
    }
}

/* ---- from a problem ---------------------------------------------------------- */

static fj_status desc_for(int head_dim, fj_dtype t, fj_causal c, int wl, int wr, uint32_t arch,
                          fj_kernel_desc *k)
{
    fj_attention_desc d;
    fj_attention_desc_init(&d, 2, 8, 2, 100, 300, head_dim, t);
    d.causal = c;
    d.window_left = wl;
    d.window_right = wr;
    fj_problem p;
    assert_int_equal(fj_problem_init(&p, &d), FJ_OK);
    return fj_kernel_desc_for_problem(&p, arch, k);
}

static void test_for_problem_rejections(void **state)
{
    (void)state;
    fj_kernel_desc k;
    assert_int_equal(desc_for(128, FJ_F32, FJ_CAUSAL_NONE, -1, -1, 90, &k), FJ_ERR_UNSUPPORTED);
    assert_string_equal(fj_last_error(),
                        "the CUDA backend computes f16 and bf16; for f32 use the CPU backend "
                        "(FJ_BACKEND_CPU) or convert the tensors to bf16");
    assert_int_equal(desc_for(100, FJ_BF16, FJ_CAUSAL_NONE, -1, -1, 90, &k), FJ_ERR_UNSUPPORTED);
    assert_string_equal(fj_last_error(),
                        "head_dim 100: the CUDA backend needs a multiple of 8 in 8..256; the "
                        "nearest supported head dims are 96 and 104 (zero-pad q and k), or use "
                        "the CPU backend (FJ_BACKEND_CPU)");
    assert_int_equal(desc_for(255, FJ_F16, FJ_CAUSAL_NONE, -1, -1, 90, &k), FJ_ERR_UNSUPPORTED);
    assert_contains(fj_last_error(), "nearest supported head dims are 248 and 256");
    assert_int_equal(desc_for(3, FJ_F16, FJ_CAUSAL_NONE, -1, -1, 90, &k), FJ_ERR_UNSUPPORTED);
    assert_contains(fj_last_error(), "the nearest supported head dim is 8 (zero-pad");
    /* Above CUDA's 256 (the CPU backends take up to FJ_MAX_HEAD_DIM): refused
       by name, on every arch, multiples of 8 or not, up to the library's
       limit. */
    static const int big[] = {257, 264, 300, 384, 511, 512, 576};
    static const uint32_t archs[] = {80, 90};
    for (size_t a = 0; a < 2; a++)
        for (size_t i = 0; i < sizeof big / sizeof big[0]; i++) {
            assert_int_equal(desc_for(big[i], i % 2 ? FJ_F16 : FJ_BF16, FJ_CAUSAL_BOTTOM_RIGHT, -1,
                                      -1, archs[a], &k),
                             FJ_ERR_UNSUPPORTED);
            char want[256];
            snprintf(want, sizeof want,
                     "head_dim %d: the CUDA backend takes head dims up to 256 (a multiple of 8); "
                     "the CPU backends (FJ_BACKEND_CPU, FJ_BACKEND_CPU_REFERENCE) take up to 576",
                     big[i]);
            assert_string_equal(fj_last_error(), want);
        }
    assert_int_equal(desc_for(256, FJ_BF16, FJ_CAUSAL_NONE, -1, -1, 90, &k), FJ_OK);
    assert_int_equal(k.head_dim, 256);
    /* V's head dim other than Q's and K's (the CPU backends take it):
       refused by name on every arch, whatever the two dims, the message the
       same through fj_kernel_desc_supports and for_problem; equal dims
       given explicitly are the plain problem */
    static const int dims[][2] = {{192, 128}, {128, 192}, {576, 512}, {64, 32}, {8, 16}, {7, 1}};
    for (size_t a = 0; a < 2; a++)
        for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
            fj_attention_desc d;
            fj_attention_desc_init(&d, 2, 8, 2, 1 + 99 * (int)(i % 2), 300, dims[i][0],
                                   i % 2 ? FJ_F16 : FJ_BF16);
            d.head_dim_v = dims[i][1];
            d.causal = FJ_CAUSAL_BOTTOM_RIGHT;
            fj_problem p;
            assert_int_equal(fj_problem_init(&p, &d), FJ_OK);
            char want[256];
            snprintf(want, sizeof want,
                     "head_dim_v %d with head_dim %d: the CUDA kernels take V's head dim equal to "
                     "Q's and K's only; the CPU backends (FJ_BACKEND_CPU, "
                     "FJ_BACKEND_CPU_REFERENCE) take any head_dim_v in 1..576",
                     dims[i][1], dims[i][0]);
            assert_int_equal(fj_kernel_desc_supports(&p), FJ_ERR_UNSUPPORTED);
            assert_string_equal(fj_last_error(), want);
            assert_int_equal(fj_kernel_desc_for_problem(&p, archs[a], &k), FJ_ERR_UNSUPPORTED);
            assert_string_equal(fj_last_error(), want);
            d.head_dim_v = d.head_dim;
            if (d.head_dim % 8 == 0 && d.head_dim <= 256) {
                assert_int_equal(fj_problem_init(&p, &d), FJ_OK);
                assert_int_equal(fj_kernel_desc_supports(&p), FJ_OK);
            }
        }
    assert_int_equal(desc_for(128, FJ_F16, FJ_CAUSAL_NONE, -1, -1, 75, &k), FJ_ERR_UNSUPPORTED);
    assert_contains(fj_last_error(), "arch sm_75 is older than sm_80");
}

/* A softcap sets the descriptor's flag and nothing else: the same template
 * and tiles as the plain problem (prefill and decode), so tuning applies to
 * both. */
static void test_for_problem_softcap(void **state)
{
    (void)state;
    static const uint32_t archs[] = {80, 90};
    static const int seqlens[] = {1, 16, 128, 4096};
    for (size_t a = 0; a < 2; a++)
        for (size_t i = 0; i < sizeof seqlens / sizeof seqlens[0]; i++) {
            fj_attention_desc d;
            fj_attention_desc_init(&d, 1, 8, 2, seqlens[i], 4096, 128, FJ_BF16);
            fj_problem p;
            fj_kernel_desc plain, capped;
            assert_int_equal(fj_problem_init(&p, &d), FJ_OK);
            assert_int_equal(fj_kernel_desc_for_problem(&p, archs[a], &plain), FJ_OK);
            d.softcap = 30.0f;
            assert_int_equal(fj_problem_init(&p, &d), FJ_OK);
            assert_int_equal(fj_kernel_desc_for_problem(&p, archs[a], &capped), FJ_OK);
            assert_int_equal(plain.softcap, 0);
            assert_int_equal(capped.softcap, 1);
            capped.softcap = 0;
            assert_memory_equal(&plain, &capped, sizeof plain);
        }
    /* where flash_tma's tiles have no room for the cap (3 consumer
       warpgroups; a window at d256) the check says so; a capped d64 problem
       takes flash_tma's 2-consumer tiles, a windowed d256 one flash_wgmma's */
    fj_kernel_desc k;
    assert_int_equal(fj_kernel_desc_parse("flash_tma.d64.bf16.causal.softcap.m192n128c3s2.sm_90",
                                          &k),
                     FJ_OK);
    assert_int_equal(fj_kernel_desc_check(&k, 0), FJ_ERR_UNSUPPORTED);
    assert_non_null(strstr(fj_last_error(), "more than 2 consumer warpgroups"));
    k.softcap = 0;
    assert_int_equal(fj_kernel_desc_check(&k, 0), FJ_OK);
    static const struct {
        int dim, wl;
    } falls_back[] = {{64, -1}, {256, 100}};
    for (size_t i = 0; i < 2; i++) {
        fj_attention_desc d;
        fj_attention_desc_init(&d, 1, 8, 8, 4096, 4096, falls_back[i].dim, FJ_BF16);
        d.causal = FJ_CAUSAL_BOTTOM_RIGHT;
        d.window_left = falls_back[i].wl;
        d.softcap = 50.0f;
        fj_problem p;
        assert_int_equal(fj_problem_init(&p, &d), FJ_OK);
        assert_int_equal(fj_kernel_desc_for_problem(&p, 90, &k), FJ_OK);
        assert_int_equal(k.softcap, 1);
        if (falls_back[i].dim == 64) {
            char name[128];
            fj_kernel_desc_name(&k, name, sizeof name);
            assert_string_equal(name, "flash_tma.d64.bf16.causal.softcap.m128n128c2s2.sm_90");
        } else {
            assert_int_equal(k.template_id, FJ_TEMPLATE_FLASH_WGMMA);
        }
    }
}

/* ALiBi and sinks set their flags; the tiles are the plain problem's but
 * where flash_tma's 3-consumer tiles have no room for ALiBi's bias (d64 on
 * sm_90), which takes flash_tma's 2-consumer tiles of the same key tile;
 * sinks fit there. */
static void test_for_problem_alibi_sinks(void **state)
{
    (void)state;
    static const uint32_t archs[] = {80, 90};
    static const int seqlens[] = {1, 16, 128, 4096};
    static const int dims[] = {64, 128, 256};
    for (size_t a = 0; a < 2; a++)
        for (size_t di = 0; di < 3; di++)
            for (size_t i = 0; i < sizeof seqlens / sizeof seqlens[0]; i++)
                for (uint32_t f = 1; f <= 3; f++) {
                    fj_attention_desc d;
                    fj_attention_desc_init(&d, 1, 8, 8, seqlens[i], 4096, dims[di], FJ_BF16);
                    fj_problem p;
                    fj_kernel_desc plain, with;
                    assert_int_equal(fj_problem_init(&p, &d), FJ_OK);
                    assert_int_equal(fj_kernel_desc_for_problem(&p, archs[a], &plain), FJ_OK);
                    d.features = f;
                    assert_int_equal(fj_problem_init(&p, &d), FJ_OK);
                    assert_int_equal(fj_kernel_desc_for_problem(&p, archs[a], &with), FJ_OK);
                    assert_int_equal(with.alibi, (f & FJ_FEATURE_ALIBI) != 0);
                    assert_int_equal(with.sinks, (f & FJ_FEATURE_SINKS) != 0);
                    with.alibi = with.sinks = 0;
                    const bool tma3 = plain.template_id == FJ_TEMPLATE_FLASH_TMA &&
                                      plain.warps == 16 && (f & FJ_FEATURE_ALIBI);
                    if (tma3) {
                        assert_int_equal(with.template_id, FJ_TEMPLATE_FLASH_TMA);
                        assert_int_equal(with.block_m, 128);
                        assert_int_equal(with.warps, 12);
                        plain.block_m = 128, plain.warps = 12;
                    }
                    assert_memory_equal(&plain, &with, sizeof plain);
                }
    fj_kernel_desc k;
    assert_int_equal(fj_kernel_desc_parse("flash_tma.d64.bf16.causal.alibi.m192n128c3s2.sm_90", &k),
                     FJ_OK);
    assert_int_equal(fj_kernel_desc_check(&k, 0), FJ_ERR_UNSUPPORTED);
    assert_non_null(strstr(fj_last_error(), "alibi: flash_tma has no registers for the bias"));
    assert_int_equal(fj_kernel_desc_parse("flash_tma.d64.bf16.causal.sinks.m192n128c3s2.sm_90", &k),
                     FJ_OK);
    assert_int_equal(fj_kernel_desc_check(&k, 0), FJ_OK);
    assert_int_equal(
        fj_kernel_desc_parse("flash_tma.d128.bf16.causal.alibi.sinks.m128n128c2s2.sm_90", &k),
        FJ_OK);
    assert_int_equal(fj_kernel_desc_check(&k, 0), FJ_OK);
    /* the merge kernel takes no modifier */
    assert_int_equal(fj_kernel_desc_parse("merge.bf16.sm_90", &k), FJ_OK);
    k.sinks = 1;
    assert_int_equal(fj_kernel_desc_check(&k, 0), FJ_ERR_UNSUPPORTED);
    assert_non_null(
        strstr(fj_last_error(), "sinks are for the attention templates and the combine"));
}

static void test_for_problem_mask(void **state)
{
    (void)state;
    static const struct {
        fj_causal c;
        int wl, wr;
        uint32_t mask;
    } cases[] = {
        {FJ_CAUSAL_NONE, -1, -1, FJ_MASK_NONE},
        {FJ_CAUSAL_BOTTOM_RIGHT, -1, -1, FJ_MASK_CAUSAL},
        {FJ_CAUSAL_TOP_LEFT, -1, -1, FJ_MASK_CAUSAL},
        {FJ_CAUSAL_NONE, 16, -1, FJ_MASK_WINDOW},
        {FJ_CAUSAL_NONE, -1, 0, FJ_MASK_WINDOW},
        {FJ_CAUSAL_NONE, 0, 0, FJ_MASK_WINDOW},
        {FJ_CAUSAL_BOTTOM_RIGHT, 64, -1, FJ_MASK_CAUSAL_WINDOW},
        {FJ_CAUSAL_TOP_LEFT, -1, 3, FJ_MASK_CAUSAL_WINDOW},
    };
    static const uint32_t archs[] = {80, 90};
    for (size_t a = 0; a < 2; a++)
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            fj_kernel_desc k;
            assert_int_equal(desc_for(64, FJ_BF16, cases[i].c, cases[i].wl, cases[i].wr, archs[a],
                                      &k),
                             FJ_OK);
            assert_int_equal(k.mask, cases[i].mask);
            /* every mask kind takes the arch's template: on sm_90 the table's */
            assert_int_equal(k.template_id, archs[a] == 90 ? tiles_template(sm90_prefill_tiles(64))
                                                           : FJ_TEMPLATE_FLASH_FWD);
            assert_int_equal(k.head_dim, 64);
            assert_int_equal(k.dtype, FJ_BF16);
            assert_int_equal(k.arch, archs[a]);
            assert_int_equal(k.split_kv, 0);
            assert_int_equal(k.generator_version, FJ_GENERATOR_VERSION);
        }
}

static void tiles_are(const fj_kernel_desc *k, uint32_t m, uint32_t n, uint32_t w, uint32_t s)
{
    char name[128];
    fj_kernel_desc_name(k, name, sizeof name);
    if (k->block_m != m || k->block_n != n || k->warps != w || k->stages != s)
        fail_msg("%s: expected m%un%uw%us%u", name, m, n, w, s);
}

static void test_heuristic(void **state)
{
    (void)state;
    fj_kernel_desc k;
    /* sm_90: the table at the top of this file, every head dim and mask. */
    static const fj_causal sm90_causals[] = {FJ_CAUSAL_NONE, FJ_CAUSAL_BOTTOM_RIGHT,
                                             FJ_CAUSAL_TOP_LEFT};
    int tma = 0;
    for (uint32_t d = 8; d <= 256; d += 8)
        for (size_t c = 0; c < 3; c++)
            for (int wl = -1; wl <= 32; wl += 33)
                for (uint32_t dt = FJ_F16; dt <= FJ_BF16; dt++) {
                    char tiles[32], name[128];
                    const char *want = sm90_prefill_tiles(d);
                    if (desc_for((int)d, (fj_dtype)dt, sm90_causals[c], wl, -1, 90, &k) != FJ_OK)
                        fail_msg("d%u: %s", d, fj_last_error());
                    fj_kernel_desc_tiles_name(&k, tiles, sizeof tiles);
                    fj_kernel_desc_name(&k, name, sizeof name);
                    if (strcmp(tiles, want) || k.template_id != tiles_template(want))
                        fail_msg("%s: expected %s", name, want);
                    tma += k.template_id == FJ_TEMPLATE_FLASH_TMA;
                }
    assert_true(tma > 0); /* (sm90_prefill has c tiles) */
    /* Without flash_tma (a layout its tensor maps cannot address), sm_90
       falls back to flash_wgmma's tiles where it has them, else flash_fwd's. */
    desc_for(128, FJ_BF16, FJ_CAUSAL_NONE, -1, -1, 90, &k);
    fj_kernel_desc_heuristic_excluding(&k, FJ_TEMPLATE_FLASH_TMA);
    assert_int_equal(k.template_id, FJ_TEMPLATE_FLASH_WGMMA);
    tiles_are(&k, 128, 128, 8, 3);
    desc_for(96, FJ_BF16, FJ_CAUSAL_NONE, -1, -1, 90, &k);
    fj_kernel_desc_heuristic_excluding(&k, FJ_TEMPLATE_FLASH_TMA);
    assert_int_equal(k.template_id, FJ_TEMPLATE_FLASH_FWD);
    tiles_are(&k, 128, 64, 4, 2);
    /* flash_tma cannot split the keys: on a device of 132 SMs it takes a
       problem of at least 66 work tiles (query tiles x heads x batch) */
    fj_attention_desc d;
    fj_problem p;
    fj_attention_desc_init(&d, 1, 33, 33, 256, 8192, 128, FJ_BF16); /* 2 x 33 = 66 tiles */
    assert_int_equal(fj_problem_init(&p, &d), FJ_OK);
    fj_kernel_desc_for_device(&p, 90, 132, &k);
    assert_int_equal(k.template_id, FJ_TEMPLATE_FLASH_TMA);
    assert_true(fj_kernel_desc_fills_device(&k, &p, 132));
    assert_false(fj_kernel_desc_fills_device(&k, &p, 133));
    d.seqlen_q = 128; /* 33 tiles: flash_wgmma, which splits */
    assert_int_equal(fj_problem_init(&p, &d), FJ_OK);
    fj_kernel_desc_for_device(&p, 90, 132, &k);
    assert_int_equal(k.template_id, FJ_TEMPLATE_FLASH_WGMMA);
    assert_true(fj_kernel_desc_fills_device(&k, &p, 132));
    fj_kernel_desc_for_device(&p, 90, 66, &k);
    assert_int_equal(k.template_id, FJ_TEMPLATE_FLASH_TMA);
    /* On sm_90 where everything fits, flash_fwd's tiles for the other dims. */
    desc_for(8, FJ_F16, FJ_CAUSAL_NONE, -1, -1, 90, &k), tiles_are(&k, 128, 64, 4, 2);
    desc_for(120, FJ_BF16, FJ_CAUSAL_NONE, -1, -1, 90, &k), tiles_are(&k, 128, 64, 4, 2);
    desc_for(136, FJ_BF16, FJ_CAUSAL_NONE, -1, -1, 90, &k), tiles_are(&k, 128, 64, 8, 2);
    desc_for(248, FJ_BF16, FJ_CAUSAL_NONE, -1, -1, 90, &k), tiles_are(&k, 128, 64, 8, 2);
    /* flash_wgmma is sm_90's alone: elsewhere every head dim is flash_fwd. */
    desc_for(64, FJ_F16, FJ_CAUSAL_NONE, -1, -1, 80, &k), tiles_are(&k, 128, 64, 4, 2);
    assert_int_equal(k.template_id, FJ_TEMPLATE_FLASH_FWD);
    desc_for(128, FJ_F16, FJ_CAUSAL_NONE, -1, -1, 100, &k), tiles_are(&k, 128, 64, 4, 2);
    assert_int_equal(k.template_id, FJ_TEMPLATE_FLASH_FWD);
    desc_for(256, FJ_F16, FJ_CAUSAL_NONE, -1, -1, 100, &k), tiles_are(&k, 128, 64, 8, 2);
    assert_int_equal(k.template_id, FJ_TEMPLATE_FLASH_FWD);
    /* A flash_wgmma descriptor moved to another arch gets flash_fwd back. */
    k = wgmma_desc();
    k.arch = 80;
    fj_kernel_desc_heuristic(&k);
    assert_int_equal(k.template_id, FJ_TEMPLATE_FLASH_FWD);
    tiles_are(&k, 128, 64, 4, 2);
    assert_int_equal(fj_kernel_desc_check(&k, 0), FJ_OK);
    /* Smaller shared memory: fewer stages first, then narrower key tiles. */
    desc_for(256, FJ_BF16, FJ_CAUSAL_NONE, -1, -1, 80, &k), tiles_are(&k, 128, 64, 8, 1);
    desc_for(128, FJ_BF16, FJ_CAUSAL_NONE, -1, -1, 80, &k), tiles_are(&k, 128, 64, 4, 2);
    desc_for(128, FJ_BF16, FJ_CAUSAL_NONE, -1, -1, 86, &k), tiles_are(&k, 128, 64, 4, 1);
    desc_for(64, FJ_BF16, FJ_CAUSAL_NONE, -1, -1, 86, &k), tiles_are(&k, 128, 64, 4, 2);
    /* (128 + 2 * 32) * 264 * 2 is exactly sm_86's 99 KiB. */
    desc_for(256, FJ_BF16, FJ_CAUSAL_NONE, -1, -1, 86, &k), tiles_are(&k, 128, 32, 8, 1);

    /* Every problem the backend takes gives a descriptor that passes the
       rules on every arch, and heuristic() alone gives the same tiles. */
    static const uint32_t archs[] = {80, 86, 87, 89, 90, 100, 120, 121, 1000};
    static const fj_causal causals[] = {FJ_CAUSAL_NONE, FJ_CAUSAL_BOTTOM_RIGHT};
    for (size_t a = 0; a < sizeof archs / sizeof archs[0]; a++)
        for (int d = 8; d <= 256; d += 8)
            for (int c = 0; c < 2; c++)
                for (int w = -1; w <= 0; w++) {
                    if (desc_for(d, FJ_F16, causals[c], w, -1, archs[a], &k) != FJ_OK)
                        fail_msg("d%d arch %u: %s", d, archs[a], fj_last_error());
                    assert_int_equal(fj_kernel_desc_check(&k, 0), FJ_OK);
                    if (archs[a] != 90) assert_int_equal(k.template_id, FJ_TEMPLATE_FLASH_FWD);
                    /* (heuristic() picks the template too) */
                    fj_kernel_desc h = k;
                    h.template_id = FJ_TEMPLATE_FLASH_FWD;
                    h.block_m = h.block_n = h.warps = h.stages = 0;
                    fj_kernel_desc_heuristic(&h);
                    assert_memory_equal(&h, &k, sizeof k);
                }
}

/* ---- tiles alone (the tuning file's config field) ------------------------------ */

static void test_parse_tiles(void **state)
{
    (void)state;
    char tiles[32];
    /* On an attention kernel the letter picks the template. */
    fj_kernel_desc k = base_desc();
    assert_int_equal(fj_kernel_desc_parse_tiles("m128n128g2s2", &k), FJ_OK);
    assert_int_equal(k.template_id, FJ_TEMPLATE_FLASH_WGMMA);
    assert_int_equal(k.block_m, 128);
    assert_int_equal(k.block_n, 128);
    assert_int_equal(k.warps, 8);
    assert_int_equal(k.stages, 2);
    fj_kernel_desc want = wgmma_desc();
    assert_memory_equal(&k, &want, sizeof k); /* nothing else changed */
    fj_kernel_desc_tiles_name(&k, tiles, sizeof tiles);
    assert_string_equal(tiles, "m128n128g2s2");
    assert_int_equal(fj_kernel_desc_parse_tiles("m192n64g3s4", &k), FJ_OK);
    assert_int_equal(k.template_id, FJ_TEMPLATE_FLASH_WGMMA);
    assert_int_equal(k.warps, 12);
    assert_int_equal(k.block_m, 192);
    assert_int_equal(k.stages, 4);
    assert_int_equal(fj_kernel_desc_parse_tiles("m128n64w4s2", &k), FJ_OK);
    assert_int_equal(k.template_id, FJ_TEMPLATE_FLASH_FWD);
    want = base_desc();
    assert_memory_equal(&k, &want, sizeof k);
    fj_kernel_desc_tiles_name(&k, tiles, sizeof tiles);
    assert_string_equal(tiles, "m128n64w4s2");
    /* Malformed tiles leave the descriptor alone, whatever its template. */
    static const char *const bad[] = {"m128n128g65s2",      "m128n128g2",
                                      "m128n128g2w8s2",     "m128n128gs2",
                                      "m128n128G2s2",       "g2m128n128s2",
                                      "m128n128g1234567s2", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        fj_kernel_desc before = k;
        if (fj_kernel_desc_parse_tiles(bad[i], &k) != FJ_ERR_INVALID_ARGUMENT)
            fail_msg("'%s' parsed", bad[i]);
        char message[256];
        snprintf(message, sizeof message,
                 "tile configuration '%s' is not m<block_m>n<block_n>w<warps>s<stages> "
                 "(flash_fwd), m<block_m>n<block_n>g<warpgroups>s<stages> (flash_wgmma) or "
                 "m<block_m>n<block_n>c<consumer warpgroups>s<stages> (flash_tma)",
                 bad[i]);
        assert_string_equal(fj_last_error(), message);
        assert_memory_equal(&k, &before, sizeof k);
    }
    assert_int_equal(fj_kernel_desc_parse_tiles(NULL, &k), FJ_ERR_INVALID_ARGUMENT);
    assert_contains(fj_last_error(), "tile configuration '(null)'");
    /* The combine kernel counts warps: g is rejected, w keeps the template. */
    k = base_desc();
    k.template_id = FJ_TEMPLATE_COMBINE;
    fj_kernel_desc before = k;
    assert_int_equal(fj_kernel_desc_parse_tiles("m128n64g2s2", &k), FJ_ERR_INVALID_ARGUMENT);
    assert_contains(fj_last_error(), "tile configuration 'm128n64g2s2' is not");
    assert_memory_equal(&k, &before, sizeof k);
    assert_int_equal(fj_kernel_desc_parse_tiles("m64n64w4s1", &k), FJ_OK);
    assert_int_equal(k.template_id, FJ_TEMPLATE_COMBINE);
    assert_int_equal(k.block_m, 64);
    assert_int_equal(k.stages, 1);
}

/* ---- codegen ------------------------------------------------------------------- */

/* The value of "#define NAME value" in src; fails the test when absent or
 * defined twice. */
static long macro_value(const char *src, const char *name)
{
    char pattern[64];
    snprintf(pattern, sizeof pattern, "\n#define %s ", name);
    const char *p = strstr(src, pattern);
    if (!p) {
        fail_msg("the source defines no %s", name);
        return -1;
    }
    const char *value = p + strlen(pattern);
    if (strstr(value, pattern)) fail_msg("the source defines %s twice", name);
    return strtol(value, NULL, 10);
}

static void test_codegen_macros(void **state)
{
    (void)state;
    static const uint32_t masks[] = {FJ_MASK_NONE, FJ_MASK_CAUSAL, FJ_MASK_WINDOW,
                                     FJ_MASK_CAUSAL_WINDOW};
    for (size_t m = 0; m < 4; m++)
        for (uint32_t dt = FJ_F16; dt <= FJ_BF16; dt++)
            for (uint32_t d = 8; d <= 256; d += 40) {
                fj_kernel_desc k = base_desc();
                k.mask = masks[m];
                k.dtype = dt;
                k.head_dim = d;
                k.split_kv = m & 1;
                k.block_m = 64 << (m & 1);
                k.stages = 1 + (uint32_t)m;
                k.block_n = 32;
                char *src;
                size_t len;
                if (fj_codegen_render(&k, &src, &len) != FJ_OK) fail_msg("%s", fj_last_error());
                assert_int_equal(strlen(src), len);
                char name[128], head[256];
                fj_kernel_desc_name(&k, name, sizeof name);
                snprintf(head, sizeof head,
                         "// flashjit generated kernel %s\n// generator version %d\n", name,
                         FJ_GENERATOR_VERSION);
                assert_true(!strncmp(src, head, strlen(head)));
                assert_int_equal(macro_value(src, "FJ_HEAD_DIM"), d);
                assert_int_equal(macro_value(src, "FJ_DTYPE_F16"), dt == FJ_F16);
                assert_int_equal(macro_value(src, "FJ_DTYPE_BF16"), dt == FJ_BF16);
                assert_int_equal(macro_value(src, "FJ_CAUSAL"), masks[m] & 1);
                assert_int_equal(macro_value(src, "FJ_HAS_WINDOW"), (masks[m] >> 1) & 1);
                assert_int_equal(macro_value(src, "FJ_BLOCK_M"), k.block_m);
                assert_int_equal(macro_value(src, "FJ_BLOCK_N"), k.block_n);
                assert_int_equal(macro_value(src, "FJ_WARPS"), k.warps);
                assert_int_equal(macro_value(src, "FJ_STAGES"), k.stages);
                assert_int_equal(macro_value(src, "FJ_SPLIT_KV"), k.split_kv);
                assert_int_equal(macro_value(src, "FJ_SMEM_BYTES"),
                                 (long)fj_kernel_desc_smem_bytes(&k));
                /* the modifiers' macros only in kernels with them */
                assert_null(strstr(src, "#define FJ_ALIBI 1"));
                assert_null(strstr(src, "#define FJ_SINKS 1"));
                free(src);
                k.alibi = 1;
                k.sinks = !k.split_kv;
                if (fj_codegen_render(&k, &src, &len) != FJ_OK) fail_msg("%s", fj_last_error());
                /* (the headers' defaults, "#define FJ_ALIBI 0", come later,
                   under #ifndef) */
                assert_non_null(strstr(src, "\n#define FJ_ALIBI 1\n"));
                if (k.sinks) assert_non_null(strstr(src, "\n#define FJ_SINKS 1\n"));
                else assert_null(strstr(src, "#define FJ_SINKS 1"));
                free(src);
            }
}

static void test_codegen_layout(void **state)
{
    (void)state;
    fj_kernel_desc k = base_desc();
    char *a, *b;
    size_t na, nb;
    assert_int_equal(fj_codegen_render(&k, &a, &na), FJ_OK);
    assert_int_equal(fj_codegen_render(&k, &b, &nb), FJ_OK);
    /* Deterministic: the bytes are hashed into the cache key. */
    assert_int_equal(na, nb);
    assert_memory_equal(a, b, na);
    /* The templates, whole and in order, each after its #line marker. */
    static const char *const files[] = {"fwd_params.h", "common.cuh", "attention_rows.cuh",
                                        "softmax.cuh",  "mask.cuh",   "tile_io.cuh",
                                        "flash_fwd.cu"};
    const char *at = a;
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        const fj_embedded_file *t = fj_template_find(files[i]);
        if (!t) fail_msg("template %s is not embedded", files[i]);
        char marker[64];
        snprintf(marker, sizeof marker, "#line 1 \"%s\"\n", files[i]);
        const char *m = strstr(at, marker);
        if (!m) fail_msg("no '%s' after offset %td", marker, at - a);
        m += strlen(marker);
        assert_memory_equal(m, t->text, t->size);
        at = m + t->size;
    }
    assert_int_equal(strlen(at), na - (size_t)(at - a)); /* nothing but maybe a newline left */
    assert_true(strlen(at) <= 1);
    free(b);
    /* A different descriptor gives a different source. */
    k.block_n = 128;
    assert_int_equal(fj_codegen_render(&k, &b, &nb), FJ_OK);
    assert_true(na != nb || memcmp(a, b, na));
    free(a);
    free(b);
    assert_string_equal(fj_codegen_entry(&k), "fj_flash_fwd");
}

static void test_codegen_wgmma(void **state)
{
    (void)state;
    fj_kernel_desc k = wgmma_desc();
    char *src;
    size_t len;
    if (fj_codegen_render(&k, &src, &len) != FJ_OK) fail_msg("%s", fj_last_error());
    assert_int_equal(strlen(src), len);
    const char *head =
        "// flashjit generated kernel flash_wgmma.d128.bf16.causal.m128n128g2s2.sm_90\n";
    assert_true(!strncmp(src, head, strlen(head)));
    /* the macros carry warps, not warpgroups */
    assert_contains(src, "\n#define FJ_WARPS 8\n");
    assert_int_equal(macro_value(src, "FJ_WARPS"), 8);
    assert_int_equal(macro_value(src, "FJ_BLOCK_M"), 128);
    assert_int_equal(macro_value(src, "FJ_BLOCK_N"), 128);
    assert_int_equal(macro_value(src, "FJ_STAGES"), 2);
    assert_int_equal(macro_value(src, "FJ_HEAD_DIM"), 128);
    assert_int_equal(macro_value(src, "FJ_CAUSAL"), 1);
    assert_int_equal(macro_value(src, "FJ_SMEM_BYTES"), 164864);
    /* The shared files, then flash_wgmma.cu whole, and not flash_fwd.cu. */
    static const char *const files[] = {"fwd_params.h",  "common.cuh", "attention_rows.cuh",
                                        "softmax.cuh",   "mask.cuh",   "tile_io.cuh",
                                        "flash_wgmma.cu"};
    const char *at = src;
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        const fj_embedded_file *t = fj_template_find(files[i]);
        if (!t) fail_msg("template %s is not embedded", files[i]);
        char marker[64];
        snprintf(marker, sizeof marker, "#line 1 \"%s\"\n", files[i]);
        const char *m = strstr(at, marker);
        if (!m) fail_msg("no '%s' after offset %td", marker, at - src);
        m += strlen(marker);
        assert_memory_equal(m, t->text, t->size);
        at = m + t->size;
    }
    assert_true(strlen(at) <= 1);
    assert_null(strstr(src, "#line 1 \"flash_fwd.cu\""));
    free(src);
    /* Same entry point as flash_fwd (the launch code is shared); built for
       sm_90a. */
    assert_string_equal(fj_codegen_entry(&k), "fj_flash_fwd");
    assert_true(fj_codegen_arch_specific(&k));
    fj_kernel_desc f = base_desc();
    assert_false(fj_codegen_arch_specific(&f));
    f.template_id = FJ_TEMPLATE_COMBINE;
    assert_false(fj_codegen_arch_specific(&f));
    /* The combine kernel gets the common files and combine.cu only. */
    fj_kernel_desc c;
    /* The combine's warps: one for a row of at most the splits whose loads
       it issues at once (16, 8 above head dim 128) when the rows outnumber
       two 8-warp blocks per SM; else 8. Its mask is always nomask: it never
       looks at the mask. */
    const struct {
        unsigned head_dim;
        int splits;
        long long rows;
        unsigned warps;
    } combine_warps[] = {{128, 9, 2048, 1},
                         {128, 16, 265, 1},
                         {128, 16, 264, FJ_COMBINE_WARPS},
                         {128, 17, 2048, FJ_COMBINE_WARPS},
                         {128, 10, 256, FJ_COMBINE_WARPS},
                         {136, 8, 4096, 1},
                         {136, 9, 4096, FJ_COMBINE_WARPS},
                         {256, 128, 32, FJ_COMBINE_WARPS},
                         {8, 2, 1 << 20, 1}};
    for (size_t i = 0; i < sizeof combine_warps / sizeof combine_warps[0]; i++)
        assert_int_equal(fj_kernel_desc_combine_warps(combine_warps[i].head_dim,
                                                      combine_warps[i].splits,
                                                      combine_warps[i].rows, 132),
                         combine_warps[i].warps);
    f.mask = FJ_MASK_CAUSAL_WINDOW;
    for (unsigned warps = 1; warps <= FJ_COMBINE_WARPS; warps *= FJ_COMBINE_WARPS) {
        fj_kernel_desc_combine_for(&f, warps, &c);
        assert_int_equal(c.warps, warps);
        assert_int_equal(c.block_m, 16 * warps);
        assert_int_equal(c.mask, FJ_MASK_NONE);
        assert_int_equal(c.template_id, FJ_TEMPLATE_COMBINE);
        assert_int_equal(fj_kernel_desc_check(&c, 0), FJ_OK);
    }
    f = base_desc();
    fj_kernel_desc_combine_for(&f, FJ_COMBINE_WARPS, &c);
    if (fj_codegen_render(&c, &src, &len) != FJ_OK) fail_msg("%s", fj_last_error());
    assert_contains(src, "#line 1 \"common.cuh\"\n");
    assert_contains(src, "#line 1 \"combine.cu\"\n");
    assert_null(strstr(src, "attention_rows.cuh"));
    assert_null(strstr(src, "softmax.cuh"));
    assert_null(strstr(src, "mask.cuh"));
    assert_null(strstr(src, "tile_io.cuh"));
    free(src);
    /* The rules hold for rendering too, the shared memory limit aside. */
    k.arch = 80;
    src = (char *)1;
    assert_int_equal(fj_codegen_render(&k, &src, &len), FJ_ERR_UNSUPPORTED);
    assert_null(src);
    assert_contains(fj_last_error(), "flash_wgmma needs sm_90");
    k = wgmma_desc();
    k.head_dim = 256, k.stages = 4; /* 590848 bytes: over every arch's limit */
    assert_int_equal(fj_codegen_render(&k, &src, &len), FJ_OK);
    assert_int_equal(macro_value(src, "FJ_SMEM_BYTES"), 590848);
    free(src);
}

static void test_codegen_rejections(void **state)
{
    (void)state;
    fj_kernel_desc k = base_desc();
    k.warps = 3;
    char *src = (char *)1;
    size_t len = 1;
    assert_int_equal(fj_codegen_render(&k, &src, &len), FJ_ERR_UNSUPPORTED);
    assert_null(src);
    assert_int_equal(len, 0);
    assert_contains(fj_last_error(), "warps 3 is not 1, 2, 4 or 8");
    /* Rendering ignores the device's shared memory limit: sm_86 cannot run
       this one, but its source is what the rules allow. */
    k = base_desc();
    k.arch = 86;
    assert_int_equal(fj_codegen_render(&k, &src, &len), FJ_OK);
    free(src);
    /* A template the build does not embed is an internal error naming it. */
    k.template_id = FJ_TEMPLATE_COMBINE;
    if (fj_template_find("combine.cu")) {
        assert_int_equal(fj_codegen_render(&k, &src, &len), FJ_OK);
        free(src);
    } else {
        assert_int_equal(fj_codegen_render(&k, &src, &len), FJ_ERR_INTERNAL);
        assert_contains(fj_last_error(), "kernel template 'combine.cu' is not embedded");
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_name_example),
        cmocka_unit_test(test_name_round_trip),
        cmocka_unit_test(test_parse_rejections),
        cmocka_unit_test(test_check_rejections),
        cmocka_unit_test(test_check_key_warps),
        cmocka_unit_test(test_varlen_paged),
        cmocka_unit_test(test_wgmma_rules),
        cmocka_unit_test(test_smem),
        cmocka_unit_test(test_for_problem_rejections),
        cmocka_unit_test(test_for_problem_mask),
        cmocka_unit_test(test_for_problem_softcap),
        cmocka_unit_test(test_for_problem_alibi_sinks),
        cmocka_unit_test(test_heuristic),
        cmocka_unit_test(test_parse_tiles),
        cmocka_unit_test(test_codegen_macros),
        cmocka_unit_test(test_codegen_layout),
        cmocka_unit_test(test_codegen_wgmma),
        cmocka_unit_test(test_codegen_rejections),
        cmocka_unit_test(test_gqa_pack_rules),
        cmocka_unit_test(test_decode_tiles),
    };
    return cmocka_run_group_tests_name("kernel_desc", tests, NULL, NULL);
}
