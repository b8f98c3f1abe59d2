/* The kernel descriptor: its canonical name (and the exact inverse), the
 * common rules, and the built-in heuristic; what differs per template (tile
 * letter, arch range, rules, shared memory, default tiles) is read from the
 * template's row (template_table.c). */
#include "cuda/jit/kernel_desc.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "cuda/jit/launch_view.h"
#include "status.h"

/* Longest name fj_kernel_desc_parse accepts: it must fit the 128-byte name
 * fields (fj_kernel_image, logs) with its NUL. */
#define NAME_MAX_LEN 127

/* The grammar, spelled once for error messages. */
#define NAME_GRAMMAR                                                                              \
    "<template>.d<head_dim>.<dtype>.<mask>[.softcap][.alibi][.sinks][.varlen][.paged<page_size>]" \
    ".m<M>n<N>{w<warps>|g<warpgroups>}s<S>[.split].sm_<arch>"

void fj_kernel_desc_init(fj_kernel_desc *k)
{
    memset(k, 0, sizeof *k);
    k->generator_version = FJ_GENERATOR_VERSION;
}

/* ---- name ------------------------------------------------------------------ */

static const char *template_name(uint32_t id)
{
    const fj_template_row *r = fj_template_row_of(id);
    return r ? r->name : NULL;
}

static const char *dtype_name(uint32_t t)
{
    if (t == FJ_F16) return "f16";
    if (t == FJ_BF16) return "bf16";
    return NULL;
}

static fj_tile_shape shape_of(const fj_kernel_desc *k)
{
    fj_tile_shape t = {k->head_dim, k->block_m,  k->block_n, k->warps,
                       k->stages,   k->split_kv, k->arch};
    return t;
}

static void set_shape(fj_kernel_desc *k, const fj_tile_shape *t)
{
    k->block_m = t->block_m;
    k->block_n = t->block_n;
    k->warps = t->warps;
    k->stages = t->stages;
}

/* The unit count of the tile string: warps less the template's extra
   warps, in its units (a descriptor whose warps do not divide prints the
   raw count, so that the error rejecting it shows something). */
static int tiles_text(const fj_kernel_desc *k, char *buf, size_t n)
{
    const fj_template_row *r = fj_template_row_of(k->template_id);
    char letter = r ? r->unit_letter : 'w';
    unsigned per = r ? r->warps_per_unit : 1, extra = r ? r->extra_warps : 0;
    unsigned units =
        k->warps >= extra && (k->warps - extra) % per == 0 ? (k->warps - extra) / per : k->warps;
    return snprintf(buf, n, "m%un%u%c%us%u", (unsigned)k->block_m, (unsigned)k->block_n, letter,
                    units, (unsigned)k->stages);
}

int fj_kernel_desc_name(const fj_kernel_desc *k, char *buf, size_t n)
{
    /* Out-of-range fields still print (as "template9", "dtype0") so that a
       bad descriptor is recognisable in the error that rejects it. */
    char tbuf[24], dbuf[24], mbuf[24];
    const char *t = template_name(k->template_id), *d = dtype_name(k->dtype),
               *m = fj_mask_kind_name(k->mask);
    if (!t) snprintf(tbuf, sizeof tbuf, "template%u", (unsigned)k->template_id), t = tbuf;
    if (!d) snprintf(dbuf, sizeof dbuf, "dtype%u", (unsigned)k->dtype), d = dbuf;
    if (!m) snprintf(mbuf, sizeof mbuf, "mask%u", (unsigned)k->mask), m = mbuf;
    const fj_template_row *r = fj_template_row_of(k->template_id);
    if (r && r->dtype_only) {
        const char *any = k->dtype == FJ_F32 ? "f32" : d;
        int len = snprintf(buf, n, "%s.%s.sm_%u", t, any, (unsigned)k->arch);
        if (n > 0 && len < 0) buf[0] = '\0';
        return len;
    }
    char tiles[64];
    tiles_text(k, tiles, sizeof tiles);
    /* the score modifiers, each a part of its own (out-of-range values
       print with their number, as the check's error shows them), then the
       parts only the varlen and paged kernels have: every other name is as
       it was */
    char mods[96] = "";
    const struct {
        const char *name;
        uint32_t v;
    } mod[4] = {{"softcap", k->softcap},
                {"alibi", k->alibi},
                {"sinks", k->sinks},
                {"varlen", k->varlen}};
    for (int i = 0; i < 4; i++) {
        size_t used = strlen(mods);
        if (mod[i].v == 1) snprintf(mods + used, sizeof mods - used, ".%s", mod[i].name);
        else if (mod[i].v)
            snprintf(mods + used, sizeof mods - used, ".%s%u", mod[i].name, (unsigned)mod[i].v);
    }
    if (k->page_size) {
        size_t used = strlen(mods);
        snprintf(mods + used, sizeof mods - used, ".paged%u", (unsigned)k->page_size);
    }
    int len = snprintf(buf, n, "%s.d%u.%s.%s%s.%s%s.sm_%u", t, (unsigned)k->head_dim, d, m, mods,
                       tiles, k->split_kv ? ".split" : "", (unsigned)k->arch);
    if (n > 0 && len < 0) buf[0] = '\0';
    return len;
}

/* ---- parse ----------------------------------------------------------------- */

/* A decimal number in canonical form (no sign, no leading zero, at most 6
 * digits) at *s; advances *s. Canonical so that name(parse(x)) == x. */
static bool parse_number(const char **s, uint32_t *v)
{
    const char *p = *s;
    if (*p < '0' || *p > '9') return false;
    if (*p == '0' && p[1] >= '0' && p[1] <= '9') return false;
    uint32_t x = 0;
    int digits = 0;
    while (*p >= '0' && *p <= '9') {
        if (++digits > 6) return false;
        x = x * 10 + (uint32_t)(*p++ - '0');
    }
    *v = x;
    *s = p;
    return true;
}

/* prefix followed by a canonical number and nothing else. */
static bool parse_prefixed(const char *part, const char *prefix, uint32_t *v)
{
    size_t n = strlen(prefix);
    if (strncmp(part, prefix, n)) return false;
    const char *p = part + n;
    return parse_number(&p, v) && *p == '\0';
}

/* m<M>n<N><letter><units>s<S>: the numbers into the descriptor (warps holds
 * the unit count until the caller knows the template) and the letter. */
static bool parse_tiles(const char *part, fj_kernel_desc *k, char *letter)
{
    const char *p = part;
    uint32_t *fields[4] = {&k->block_m, &k->block_n, &k->warps, &k->stages};
    *letter = 0;
    for (int i = 0; i < 4; i++) {
        char want = "mn?s"[i];
        if (i == 2) {
            if (*p < 'a' || *p > 'z') return false;
            want = *letter = *p;
        }
        if (*p++ != want || !parse_number(&p, fields[i])) return false;
    }
    return *p == '\0' && k->warps <= 64;
}

/* Units of the row's letter to warps. */
static bool units_to_warps(const fj_template_row *r, char letter, fj_kernel_desc *k)
{
    if (letter != r->unit_letter) return false;
    k->warps = k->warps * r->warps_per_unit + r->extra_warps;
    return true;
}

static bool lookup_mask(const char *s, uint32_t *v)
{
    for (uint32_t m = 0; fj_mask_kind_name(m); m++)
        if (!strcmp(fj_mask_kind_name(m), s)) {
            *v = m;
            return true;
        }
    return false;
}

static bool head_dim_ok(uint32_t d) { return d >= 8 && d <= FJ_CUDA_MAX_HEAD_DIM && d % 8 == 0; }

/* "<template>.<dtype>.sm_<arch>" of a template specialized on the dtype
   alone (the merge kernel). */
static fj_status parse_dtype_only(const char *name, const fj_template_row *row, char *parts[8],
                                  int nparts, fj_kernel_desc *k)
{
    if (nparts != 3)
        return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                       "kernel name '%s': %d dot-separated parts; %s kernels are named "
                       "%s.<dtype>.sm_<arch>",
                       name, nparts, row->name, row->name);
    fj_kernel_desc d;
    fj_kernel_desc_init(&d);
    d.template_id = row->id;
    if (!strcmp(parts[1], "f32")) d.dtype = FJ_F32;
    else if (!strcmp(parts[1], "f16")) d.dtype = FJ_F16;
    else if (!strcmp(parts[1], "bf16")) d.dtype = FJ_BF16;
    else
        return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                       "kernel name '%s': '%s' is not a %s dtype (f32, f16, bf16)", name, parts[1],
                       row->name);
    if (!parse_prefixed(parts[2], "sm_", &d.arch))
        return fj_fail(FJ_ERR_INVALID_ARGUMENT, "kernel name '%s': '%s' is not sm_<arch>", name,
                       parts[2]);
    *k = d;
    return FJ_OK;
}

fj_status fj_kernel_desc_parse(const char *name, fj_kernel_desc *k)
{
    if (!name) return fj_fail(FJ_ERR_INVALID_ARGUMENT, "kernel name is NULL");
    size_t len = strlen(name);
    if (len > NAME_MAX_LEN)
        return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                       "kernel name '%.40s...' is %zu characters long: the limit is %d", name, len,
                       NAME_MAX_LEN);
    char copy[NAME_MAX_LEN + 1];
    memcpy(copy, name, len + 1);

    /* Split at every dot (twelve slots: a name with more parts is rejected by
       the count below, whatever the extra parts hold). */
    char *parts[12];
    int nparts = 0;
    for (char *p = copy;;) {
        if (nparts < 12) parts[nparts] = p;
        nparts++;
        char *dot = strchr(p, '.');
        if (!dot) break;
        *dot = '\0';
        p = dot + 1;
    }
    fj_kernel_desc d;
    fj_kernel_desc_init(&d);
    const fj_template_row *row = fj_template_row_named(parts[0]);
    if (row && row->dtype_only) return parse_dtype_only(name, row, parts, nparts, k);
    if (nparts < 6 || nparts > 12)
        return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                       "kernel name '%s': %d dot-separated parts; expected 6 to 12: " NAME_GRAMMAR,
                       name, nparts);

    char names[256];
    if (!row)
        return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                       "kernel name '%s': '%s' is not a template name (%s)", name, parts[0],
                       fj_template_names(names, sizeof names, false));
    d.template_id = row->id;
    if (!parse_prefixed(parts[1], "d", &d.head_dim) || !head_dim_ok(d.head_dim))
        return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                       "kernel name '%s': '%s' is not d<head_dim> with head_dim a multiple of 8 "
                       "in 8..%d",
                       name, parts[1], FJ_CUDA_MAX_HEAD_DIM);
    if (!strcmp(parts[2], "f16")) d.dtype = FJ_F16;
    else if (!strcmp(parts[2], "bf16")) d.dtype = FJ_BF16;
    else
        return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                       "kernel name '%s': '%s' is not a kernel dtype (f16, bf16)", name, parts[2]);
    if (!lookup_mask(parts[3], &d.mask))
        return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                       "kernel name '%s': '%s' is not a mask kind (nomask, causal, window, "
                       "causal_window)",
                       name, parts[3]);
    int at =
        4; /* the next part: [softcap] [alibi] [sinks] [varlen] [paged<N>] tiles [split] arch */
    static const char *const mods[4] = {"softcap", "alibi", "sinks", "varlen"};
    uint32_t *mod_field[4] = {&d.softcap, &d.alibi, &d.sinks, &d.varlen};
    for (int i = 0; i < 4; i++)
        if (nparts - at > 2 && !strcmp(parts[at], mods[i])) {
            *mod_field[i] = 1;
            at++;
        }
    if (nparts - at > 2 && !strncmp(parts[at], "paged", 5)) {
        if (!parse_prefixed(parts[at], "paged", &d.page_size) || d.page_size == 0)
            return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                           "kernel name '%s': '%s' is not paged<page_size> with a page size "
                           "above 0",
                           name, parts[at]);
        at++;
    }
    char letter;
    if (!parse_tiles(parts[at], &d, &letter))
        return fj_fail(FJ_ERR_INVALID_ARGUMENT, "kernel name '%s': '%s' is not %s%s", name,
                       parts[at], fj_template_tile_grammars(names, sizeof names),
                       nparts - at > 2 ? " (or softcap, alibi, sinks, varlen, paged<page_size> "
                                         "before them, in that order)"
                                       : "");
    if (!units_to_warps(row, letter, &d))
        return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                       "kernel name '%s': %s kernels count warps as %c<%s>, not as in '%s'", name,
                       parts[0], row->unit_letter, row->unit_name, parts[at]);
    at++;
    if (at < nparts - 1) {
        if (strcmp(parts[at], "split"))
            return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                           "kernel name '%s': '%s' is not 'split', the only optional part after "
                           "the tiles",
                           name, parts[at]);
        d.split_kv = 1;
        at++;
    }
    if (at != nparts - 1)
        return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                       "kernel name '%s': %d dot-separated parts, more than its optional parts "
                       "allow: " NAME_GRAMMAR,
                       name, nparts);
    const char *arch = parts[nparts - 1];
    if (!parse_prefixed(arch, "sm_", &d.arch))
        return fj_fail(FJ_ERR_INVALID_ARGUMENT, "kernel name '%s': '%s' is not sm_<arch>", name,
                       arch);
    *k = d;
    return FJ_OK;
}

/* ---- rules ----------------------------------------------------------------- */

size_t fj_kernel_desc_smem_bytes(const fj_kernel_desc *k)
{
    const fj_template_row *r = fj_template_row_of(k->template_id);
    if (!r) return 0;
    fj_tile_shape t = shape_of(k);
    return r->smem_bytes(&t);
}

/* Whether a capped kernel of these tiles compiles without spilling: the cap's
   temporaries (an ex2 and an rcp per score in flight) do not fit flash_tma's
   3-consumer tiles (128 registers per thread: 8 to 96 bytes of spills at d64)
   nor its windowed tiles above d160 (8 to 16 bytes at d192 and d256); every
   other capped variant
   compile-all builds is spill-free (nvcc 13, sm_80 and sm_90). */
static bool softcap_fits(const fj_kernel_desc *k, const fj_template_row *r)
{
    if (k->template_id != FJ_TEMPLATE_FLASH_TMA) return true;
    unsigned consumers =
        k->warps > r->extra_warps ? (k->warps - r->extra_warps) / r->warps_per_unit : 0;
    bool window = k->mask == FJ_MASK_WINDOW || k->mask == FJ_MASK_CAUSAL_WINDOW;
    return consumers <= 2 && !(window && k->head_dim > 160);
}

/* Whether a kernel with ALiBi of these tiles compiles without spilling:
   flash_tma's 3-consumer tiles run at 128 registers per thread, where the
   bias's distance and slope spill 32 bytes at d64 causal (NVRTC and ptxas
   13; nomask, window and causal_window sit at 128 with no spill). Sinks
   only touch the epilogue and fit every tile; every other variant
   compile-all builds with --kinds alibi,sinks is spill-free. */
#define ALIBI_TMA_MAX_CONSUMERS 2
static bool modifiers_fit(const fj_kernel_desc *k, const fj_template_row *r)
{
    if (k->template_id != FJ_TEMPLATE_FLASH_TMA || !k->alibi) return true;
    unsigned consumers =
        k->warps > r->extra_warps ? (k->warps - r->extra_warps) / r->warps_per_unit : 0;
    return consumers <= ALIBI_TMA_MAX_CONSUMERS;
}

fj_status fj_kernel_desc_check(const fj_kernel_desc *k, size_t smem_limit)
{
    char name[160];
    fj_kernel_desc_name(k, name, sizeof name);
    const fj_template_row *r = fj_template_row_of(k->template_id);
    fj_tile_shape t = shape_of(k);
    /* Each rule names the field, its value and the rule. */
    char why[256], names[128];
    why[0] = '\0';
    if (k->generator_version != FJ_GENERATOR_VERSION)
        snprintf(why, sizeof why, "generator_version %u is not this generator's (%d)",
                 (unsigned)k->generator_version, FJ_GENERATOR_VERSION);
    else if (!r)
        snprintf(why, sizeof why, "template_id %u is not a template (%s)", (unsigned)k->template_id,
                 fj_template_names(names, sizeof names, true));
    else if (!r->dtype_only && !head_dim_ok(k->head_dim))
        snprintf(why, sizeof why, "head_dim %u is not a multiple of 8 in 8..%d",
                 (unsigned)k->head_dim, FJ_CUDA_MAX_HEAD_DIM);
    else if (!(r->dtype_only && k->dtype == FJ_F32) && !dtype_name(k->dtype))
        snprintf(why, sizeof why, "dtype %u is not %s", (unsigned)k->dtype,
                 r->dtype_only ? "f32, f16 or bf16" : "f16 or bf16");
    else if (r->dtype_only && k->mask)
        snprintf(why, sizeof why, "mask %u: %s kernels take no mask (0)", (unsigned)k->mask,
                 r->name);
    else if (!fj_mask_kind_name(k->mask))
        snprintf(why, sizeof why, "mask %u is not a mask kind (0..3)", (unsigned)k->mask);
    else if (k->split_kv > 1)
        snprintf(why, sizeof why, "split_kv %u is not 0 or 1", (unsigned)k->split_kv);
    else if (k->softcap > 1)
        snprintf(why, sizeof why, "softcap %u is not 0 or 1", (unsigned)k->softcap);
    else if (k->softcap && !r->attention)
        snprintf(why, sizeof why,
                 "softcap is for the attention templates; %s does not compute "
                 "scores",
                 r->name);
    else if (k->varlen > 1)
        snprintf(why, sizeof why, "varlen %u is not 0 or 1", (unsigned)k->varlen);
    else if (k->page_size &&
             (k->page_size % FJ_CUDA_PAGE_MULTIPLE || k->page_size > FJ_CUDA_PAGE_MAX))
        snprintf(why, sizeof why,
                 "page_size %u: a paged KV cache on CUDA needs a page size that is a multiple of "
                 "%d (a key tile's rows come %d at a time from one page), up to %d",
                 (unsigned)k->page_size, FJ_CUDA_PAGE_MULTIPLE, FJ_CUDA_PAGE_MULTIPLE,
                 FJ_CUDA_PAGE_MAX);
    else if ((k->alibi || k->sinks) && (k->varlen || k->page_size))
        snprintf(why, sizeof why,
                 "%s with %s: the CUDA kernels do not combine them yet (the bias and the sink "
                 "rows are placed by the dense problem's rows)",
                 k->alibi ? "alibi" : "sinks", k->varlen ? "varlen" : "a paged KV cache");
    else if ((k->varlen && !r->varlen) || (k->page_size && !r->paged))
        snprintf(why, sizeof why, "%s: %s takes no %s: %s",
                 k->page_size && !r->paged ? "page_size" : "varlen", r->name,
                 k->page_size && !r->paged ? "paged KV cache" : "variable-length batches",
                 r->no_seqs_why ? r->no_seqs_why : "its template has no such path");
    else if (k->softcap && !softcap_fits(k, r))
        snprintf(why, sizeof why,
                 "softcap: flash_tma has no registers for the cap with more than 2 consumer "
                 "warpgroups (128 per thread), or with a window at head dims above 160 (ptxas "
                 "spills, compile-all)");
    else if (k->alibi > 1) snprintf(why, sizeof why, "alibi %u is not 0 or 1", (unsigned)k->alibi);
    else if (k->sinks > 1) snprintf(why, sizeof why, "sinks %u is not 0 or 1", (unsigned)k->sinks);
    else if (k->alibi && !r->attention)
        snprintf(why, sizeof why,
                 "alibi is for the attention templates; %s does not compute scores", r->name);
    else if (k->sinks && !r->attention && k->template_id != FJ_TEMPLATE_COMBINE)
        snprintf(why, sizeof why,
                 "sinks are for the attention templates and the combine kernel; %s does not "
                 "finish softmax rows",
                 r->name);
    else if (k->sinks && r->attention && k->split_kv)
        snprintf(why, sizeof why,
                 "sinks with split_kv: a split kernel's partials leave the sink to the combine "
                 "kernel (give it to the combine kernel, and the split kernel none)");
    else if (k->alibi && !modifiers_fit(k, r))
        snprintf(why, sizeof why,
                 "alibi: flash_tma has no registers for the bias with more than %d consumer "
                 "warpgroups (128 per thread: ptxas spills, compile-all)",
                 ALIBI_TMA_MAX_CONSUMERS);
    else if (k->arch < r->min_arch && !r->max_arch)
        snprintf(why, sizeof why, "arch sm_%u is older than sm_%u: %s", (unsigned)k->arch,
                 (unsigned)r->min_arch, r->arch_why);
    else if (k->arch < r->min_arch || (r->max_arch && k->arch > r->max_arch))
        snprintf(why, sizeof why, "arch sm_%u: %s needs sm_%u (%s)", (unsigned)k->arch, r->name,
                 (unsigned)r->min_arch, r->arch_why);
    else r->rules(&t, why, sizeof why);
    if (!why[0]) {
        size_t limit = smem_limit ? smem_limit : fj_arch_smem_optin_max(k->arch);
        /* varlen and paged kernels keep their sequence in static shared
           memory besides the dynamic layout (attention_rows.cuh,
           fj_seq_smem), which the block's limit also covers */
        size_t need = r->smem_bytes(&t) +
                      (r->attention && (k->varlen || k->page_size) ? FJ_CUDA_SEQS_STATIC_SMEM : 0);
        if (need > limit)
            snprintf(why, sizeof why,
                     "needs %zu bytes of shared memory (%s), more than the %zu bytes %s", need,
                     r->smem_formula, limit, smem_limit ? "allowed" : "the arch allows a block");
    }
    if (why[0]) return fj_fail(FJ_ERR_UNSUPPORTED, "kernel %s: %s", name, why);
    return FJ_OK;
}

/* ---- choice ---------------------------------------------------------------- */

void fj_kernel_desc_heuristic(fj_kernel_desc *k) { fj_kernel_desc_heuristic_excluding(k, 0); }

void fj_kernel_desc_heuristic_excluding(fj_kernel_desc *k, uint32_t excluded)
{
    fj_tile_shape t = shape_of(k);
    for (int i = 0; fj_template_row_at(i); i++) {
        const fj_template_row *r = fj_template_row_at(i);
        if (!r->attention || !r->prefill_tiles || k->arch < r->min_arch ||
            (r->max_arch && k->arch > r->max_arch) || (uint32_t)r->id == excluded ||
            (k->varlen && !r->varlen) || (k->page_size && !r->paged))
            continue;
        if (r->prefill_tiles(&t, (fj_mask_kind)k->mask)) {
            k->template_id = r->id;
            set_shape(k, &t);
            return;
        }
    }
}

/* Masked problems keep the prefill tiles: with one 16-row MMA tile per warp
   the band code gets an 8-byte stack frame at some head dims (compile-all's
   zero-spill rule). Decode with a causal mask that hides nothing is
   unmasked in the launch view already. */
static void default_tiles(const fj_problem *p, uint32_t arch, fj_kernel_desc *k);

static bool modifiers_refuse(const fj_kernel_desc *k, const fj_template_row *r)
{
    return r && ((k->softcap && !softcap_fits(k, r)) || !modifiers_fit(k, r));
}

/* A capped problem whose heuristic tiles break softcap_fits (or one with
   ALiBi, modifiers_fit): flash_tma's 3-consumer tiles (d64) become its
   2-consumer tiles of the same key tile, where the cap's and the bias's
   temporaries fit (240 registers a thread; still far faster than
   flash_wgmma, whose d64 softcap ran at a quarter of the plain kernel);
   what still does not fit (a window above d160 with a cap) takes the next
   template's heuristic (flash_wgmma on sm_90). */
void fj_kernel_desc_default(const fj_problem *p, uint32_t arch, fj_kernel_desc *k)
{
    default_tiles(p, arch, k);
    const fj_template_row *r = fj_template_row_of(k->template_id);
    if (!modifiers_refuse(k, r)) return;
    if (k->template_id == FJ_TEMPLATE_FLASH_TMA && k->block_m > 128) {
        fj_kernel_desc two = *k;
        two.block_m = 128;
        two.warps = 2 * r->warps_per_unit + r->extra_warps;
        if (!modifiers_refuse(&two, r)) {
            char why[256];
            fj_tile_shape t = shape_of(&two);
            why[0] = '\0';
            r->rules(&t, why, sizeof why);
            if (!why[0] && r->smem_bytes(&t) <= fj_arch_smem_optin_max(arch)) {
                *k = two;
                return;
            }
        }
    }
    fj_kernel_desc_heuristic_excluding(k, r->id);
}

bool fj_kernel_desc_modifier_fallback(const fj_problem *view, uint32_t arch, char *why, size_t n)
{
    fj_kernel_desc k;
    default_tiles(view, arch, &k);
    const fj_template_row *r = fj_template_row_of(k.template_id);
    if (!modifiers_refuse(&k, r)) return false;
    if (fj_kernel_desc_check(&k, SIZE_MAX) == FJ_OK) return false;
    snprintf(why, n, "%s", fj_last_error());
    fj_clear_error();
    return true;
}

static void default_tiles(const fj_problem *p, uint32_t arch, fj_kernel_desc *k)
{
    fj_kernel_desc_init(k);
    k->template_id = FJ_TEMPLATE_FLASH_FWD;
    k->head_dim = (uint32_t)p->head_dim;
    k->dtype = (uint32_t)p->dtype;
    k->mask = (uint32_t)fj_problem_mask_kind(p);
    k->softcap = p->softcap > 0.0f;
    k->alibi = p->alibi;
    k->sinks = p->sinks;
    k->split_kv = 0;
    k->arch = arch;
    k->varlen = p->varlen;
    k->page_size = p->paged ? (uint32_t)p->page_size : 0;
    if (p->seqlen_q <= FJ_DECODE_MAX_ROWS && k->mask == FJ_MASK_NONE) {
        for (int i = 0; fj_template_row_at(i); i++) {
            const fj_template_row *r = fj_template_row_at(i);
            if (!r->decode_tiles || arch < r->min_arch || (r->max_arch && arch > r->max_arch) ||
                (k->varlen && !r->varlen) || (k->page_size && !r->paged))
                continue;
            fj_tile_shape t = shape_of(k);
            r->decode_tiles(&t);
            k->template_id = r->id;
            set_shape(k, &t);
            return;
        }
    }
    fj_kernel_desc_heuristic(k);
}

bool fj_kernel_desc_fills_device(const fj_kernel_desc *k, const fj_problem *view, int sm_count)
{
    const fj_template_row *r = fj_template_row_of(k->template_id);
    if (!r || r->split_kv || !k->block_m) return true;
    const int64_t m_tiles = (view->seqlen_q + (int64_t)k->block_m - 1) / k->block_m;
    return 2 * m_tiles * view->heads_q * view->batch >= sm_count;
}

void fj_kernel_desc_for_device(const fj_problem *view, uint32_t arch, int sm_count,
                               fj_kernel_desc *k)
{
    fj_kernel_desc_default(view, arch, k);
    if (!fj_kernel_desc_fills_device(k, view, sm_count))
        fj_kernel_desc_heuristic_excluding(k, k->template_id);
}

fj_status fj_kernel_desc_supports(const fj_problem *p)
{
    /* Every template keeps V's and O's rows as long as Q's and K's (one
       head dim in the name, the tiles and the shared-memory formula). */
    if (p->head_dim_v != p->head_dim)
        return fj_fail(FJ_ERR_UNSUPPORTED,
                       "head_dim_v %d with head_dim %d: the CUDA kernels take V's head dim equal "
                       "to Q's and K's only; the CPU backends (FJ_BACKEND_CPU, "
                       "FJ_BACKEND_CPU_REFERENCE) take any head_dim_v in 1..%d",
                       p->head_dim_v, p->head_dim, FJ_MAX_HEAD_DIM);
    if ((p->alibi || p->sinks) && (p->varlen || p->paged))
        return fj_fail(FJ_ERR_UNSUPPORTED,
                       "%s with %s: the CUDA kernels do not combine them yet; the CPU backends "
                       "(FJ_BACKEND_CPU, FJ_BACKEND_CPU_REFERENCE) do",
                       p->alibi && p->sinks ? "ALiBi and attention sinks"
                       : p->alibi           ? "ALiBi"
                                            : "attention sinks",
                       p->varlen && p->paged ? "variable-length batches and a paged KV cache"
                       : p->varlen           ? "variable-length batches"
                                             : "a paged KV cache");
    if (p->paged && p->page_size % FJ_CUDA_PAGE_MULTIPLE)
        return fj_fail(FJ_ERR_UNSUPPORTED,
                       "page_size %d: a paged KV cache on CUDA needs a page size that is a "
                       "multiple of %d (a key tile's rows come %d at a time from one page); the "
                       "CPU backends (FJ_BACKEND_CPU, FJ_BACKEND_CPU_REFERENCE) take any",
                       p->page_size, FJ_CUDA_PAGE_MULTIPLE, FJ_CUDA_PAGE_MULTIPLE);
    if (p->paged && p->page_size > FJ_CUDA_PAGE_MAX)
        return fj_fail(FJ_ERR_UNSUPPORTED,
                       "page_size %d: the CUDA kernels take pages of at most %d keys", p->page_size,
                       FJ_CUDA_PAGE_MAX);
    if (p->dtype == FJ_F32)
        return fj_fail(FJ_ERR_UNSUPPORTED,
                       "the CUDA backend computes f16 and bf16; for f32 use the CPU backend "
                       "(FJ_BACKEND_CPU) or convert the tensors to bf16");
    if (p->dtype != FJ_F16 && p->dtype != FJ_BF16)
        return fj_fail(FJ_ERR_UNSUPPORTED, "dtype %d is not f16 or bf16", (int)p->dtype);
    if (p->head_dim > FJ_CUDA_MAX_HEAD_DIM)
        return fj_fail(FJ_ERR_UNSUPPORTED,
                       "head_dim %d: the CUDA backend takes head dims up to %d (a multiple of 8); "
                       "the CPU backends (FJ_BACKEND_CPU, FJ_BACKEND_CPU_REFERENCE) take up to %d",
                       p->head_dim, FJ_CUDA_MAX_HEAD_DIM, FJ_MAX_HEAD_DIM);
    if (p->head_dim < 1)
        return fj_fail(FJ_ERR_UNSUPPORTED, "head_dim %d is not in 1..%d", p->head_dim,
                       FJ_CUDA_MAX_HEAD_DIM);
    if (p->head_dim % 8) {
        /* The MMA tiles and the 16-byte loads work on 8 elements of a row. */
        int lo = p->head_dim / 8 * 8, hi = lo + 8;
        if (lo < 8)
            return fj_fail(FJ_ERR_UNSUPPORTED,
                           "head_dim %d: the CUDA backend needs a multiple of 8 in 8..%d; the "
                           "nearest supported head dim is %d (zero-pad q and k), or use the "
                           "CPU backend (FJ_BACKEND_CPU)",
                           p->head_dim, FJ_CUDA_MAX_HEAD_DIM, hi);
        return fj_fail(FJ_ERR_UNSUPPORTED,
                       "head_dim %d: the CUDA backend needs a multiple of 8 in 8..%d; the "
                       "nearest supported head dims are %d and %d (zero-pad q and k), or use the "
                       "CPU backend (FJ_BACKEND_CPU)",
                       p->head_dim, FJ_CUDA_MAX_HEAD_DIM, lo, hi);
    }
    return FJ_OK;
}

fj_status fj_kernel_desc_for_problem(const fj_problem *p, uint32_t arch, fj_kernel_desc *k)
{
    fj_kernel_desc_init(k);
    fj_status s = fj_kernel_desc_supports(p);
    if (s) return s;
    fj_problem view;
    if (fj_launch_view(p, &view)) {
        fj_kernel_desc_default(&view, arch, k);
        if (fj_launch_view_takes(p, k->template_id, k->block_m, k->warps))
            return fj_kernel_desc_check(k, 0);
    }
    fj_launch_view_unpacked(p, &view);
    fj_kernel_desc_default(&view, arch, k);
    return fj_kernel_desc_check(k, 0);
}

unsigned fj_kernel_desc_combine_warps(unsigned head_dim, int splits, long long rows, int sm_count)
{
    /* combine.cu keeps UNROLL splits' loads in flight per warp: 16 up to
       head dim 128, 8 above */
    const int per_warp =
        head_dim <= 128 ? FJ_COMBINE_SPLITS_PER_WARP : FJ_COMBINE_SPLITS_PER_WARP / 2;
    const bool all_resident = rows <= 2ll * sm_count;
    return splits <= per_warp && !all_resident ? 1u : FJ_COMBINE_WARPS;
}

void fj_kernel_desc_combine_for(const fj_kernel_desc *k, unsigned warps, fj_kernel_desc *c)
{
    *c = *k;
    c->template_id = FJ_TEMPLATE_COMBINE;
    c->split_kv = 1;
    c->mask = FJ_MASK_NONE;
    c->softcap = 0;   /* merges partials: one combine kernel serves capped and plain plans */
    c->alibi = 0;     /* likewise ALiBi's; a sink joins in the combine (k's sinks stay) */
    c->page_size = 0; /* a paged plan's queries and output are dense: the dense combine */
    c->warps = warps;
    c->block_m = 16 * warps;
    c->block_n = 64;
    c->stages = 1;
}

void fj_kernel_desc_split_of(const fj_kernel_desc *k, fj_kernel_desc *split)
{
    *split = *k;
    split->split_kv = 1;
    split->sinks = 0;
}

/* ---- tiles alone (the tuning file's config field) ------------------------- */

int fj_kernel_desc_tiles_name(const fj_kernel_desc *k, char *buf, size_t n)
{
    return tiles_text(k, buf, n);
}

fj_status fj_kernel_desc_parse_tiles(const char *tiles, fj_kernel_desc *k)
{
    fj_kernel_desc t = *k;
    char letter = 0;
    const fj_template_row *r = NULL;
    bool ok = tiles && parse_tiles(tiles, &t, &letter);
    if (ok) {
        /* the combine kernel keeps its template; any other descriptor (an
           attention kernel, or one with no template yet) takes the
           attention template its letter names */
        r = t.template_id == FJ_TEMPLATE_COMBINE ? fj_template_row_of(t.template_id)
                                                 : fj_template_row_of_letter(letter);
        ok = r && units_to_warps(r, letter, &t);
    }
    char grammars[256];
    if (!ok)
        return fj_fail(FJ_ERR_INVALID_ARGUMENT, "tile configuration '%s' is not %s",
                       tiles ? tiles : "(null)",
                       fj_template_tile_grammars(grammars, sizeof grammars));
    t.template_id = r->id;
    *k = t;
    return FJ_OK;
}
