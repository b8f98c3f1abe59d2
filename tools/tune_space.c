/* What flashjit tune knows per backend: its default grid and candidates,
 * what it accepts, and how a plan's configuration reads back; and the
 * points of a space. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cpu/tiled.h"
#include "cuda/jit/kernel_desc.h"
#include "plan.h"
#include "problem.h"
#include "status.h"
#include "tune.h"

#define CMD "tune"

/* The anchors grid (../shared/anchors.md): B*S = 16384 tokens, H = 2048 / D,
 * so each of q, k, v, o is 64 MiB in bf16 at every point, and decode rows
 * as in its decode table (B 8, H 32). */
#define CUDA_TOKENS 16384
#define CUDA_HEADS_X_DIM 2048
#define CUDA_DECODE_BATCH_HEADS 256
#define CUDA_DECODE_SEQLEN_K 8192
/* A laptop-sized CPU grid: the bench's CPU shape (b1 h8), seqlens that keep
 * the default grid within two minutes on two cores. */
#define CPU_BATCH_HEADS 8
#define CPU_DECODE_BATCH_HEADS 32
#define CPU_DECODE_SEQLEN_K 4096

static void default_candidates(tune_space *s, bool cuda)
{
    s->n_configs = 0;
    if (cuda) {
        static const int m[] = {64, 128}, n[] = {32, 64, 128}, w[] = {4, 8}, st[] = {2, 3};
        for (int a = 0; a < 2; a++)
            for (int b = 0; b < 3; b++)
                for (int c = 0; c < 2; c++)
                    for (int d = 0; d < 2; d++)
                        snprintf(s->configs[s->n_configs++], TUNE_CONFIG_LEN, "m%dn%dw%ds%d",
                                 m[a], n[b], w[c], st[d]);
        /* Decode-sized tiles (the decode heuristic's and its neighbours):
           one or two warps of 16 rows, for the decode bucket's few rows,
           with deeper pipelines for one warp (more K/V bytes in flight),
           and one 16-row tile whose 2 or 4 warps share out the keys with
           alternating K and V loads (s1: the H200's d128 decode choice);
           on prefill points they lose and, being slow, get only a few runs. */
        static const char *const small[] = {"m16n32w1s2", "m16n64w1s2", "m16n32w1s3",
                                            "m16n32w1s4", "m16n64w1s3", "m32n32w2s2",
                                            "m32n64w2s2", "m32n32w2s3", "m16n64w2s1",
                                            "m16n128w4s1"};
        for (size_t i = 0; i < sizeof small / sizeof small[0]; i++)
            snprintf(s->configs[s->n_configs++], TUNE_CONFIG_LEN, "%s", small[i]);
        /* flash_wgmma (sm_90 only; the rules prune them elsewhere): one to
           three warpgroups, two buffers or three (the softmax overlapping
           the previous tile's P V). */
        static const char *const wgmma[] = {"m128n64g2s2",  "m128n64g2s3",  "m128n128g2s2",
                                            "m128n128g2s3", "m192n64g3s3", "m192n128g3s3",
                                            "m64n128g1s3"};
        for (size_t i = 0; i < sizeof wgmma / sizeof wgmma[0]; i++)
            snprintf(s->configs[s->n_configs++], TUNE_CONFIG_LEN, "%s", wgmma[i]);
        return;
    }
    static const int q[] = {64, 128, 256, 512}, k[] = {128, 256, 512, 1024};
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 4; b++)
            fj_cpu_tiled_config_name(q[a], k[b], s->configs[s->n_configs++], TUNE_CONFIG_LEN);
}

static void set_ints(int *dst, int *n, const int *src, int count)
{
    memcpy(dst, src, (size_t)count * sizeof *src);
    *n = count;
}

void tune_space_defaults(tune_options *o, fj_backend b)
{
    bool cuda = b == FJ_BACKEND_CUDA;
    tune_space *s = &o->space;
    static const int dims[] = {64, 128}, cuda_seqs[] = {1024, 4096, 16384}, cpu_seqs[] = {512, 2048};
    if (!s->n_head_dims) set_ints(s->head_dims, &s->n_head_dims, dims, 2);
    if (!s->n_seqlens) {
        if (cuda) set_ints(s->seqlens, &s->n_seqlens, cuda_seqs, 3);
        else set_ints(s->seqlens, &s->n_seqlens, cpu_seqs, 2);
    }
    if (s->decode) {
        bool have = false;
        for (int i = 0; i < s->n_seqlens; i++) have |= s->seqlens[i] == 1;
        if (!have && s->n_seqlens < TUNE_MAX_VALUES) s->seqlens[s->n_seqlens++] = 1;
    }
    if (!s->n_dtypes) {
        s->n_dtypes = cuda ? 2 : 1;
        s->dtypes[0] = cuda ? FJ_BF16 : FJ_F32;
        s->dtypes[1] = FJ_F16;
    }
    if (!s->n_causals) {
        s->n_causals = 2;
        s->causals[0] = FJ_CAUSAL_NONE;
        s->causals[1] = FJ_CAUSAL_BOTTOM_RIGHT;
    }
    if (!s->decode_seqlen_k) s->decode_seqlen_k = cuda ? CUDA_DECODE_SEQLEN_K : CPU_DECODE_SEQLEN_K;
    if (!s->n_configs) default_candidates(s, cuda);
    /* A CUDA run is a few ms, a CPU one up to a few hundred: repeats that
       give a stable median in about the same time. */
    if (!o->repeat) o->repeat = cuda ? 25 : 5;
    if (o->warmup < 0) o->warmup = cuda ? 5 : 1;
}

static bool cpu_config_ok(const char *config)
{
    fj_attention_desc d;
    fj_attention_desc_init(&d, 1, 1, 1, 1, 1, 64, FJ_F32);
    fj_problem p;
    fj_cpu_tiled_blocks b;
    return fj_problem_init(&p, &d) == FJ_OK &&
           fj_cpu_tiled_choose_blocks(NULL, &p, config, 1, &b) == FJ_OK;
}

int tune_space_validate(const tune_space *s, fj_backend b)
{
    bool cuda = b == FJ_BACKEND_CUDA;
    for (int i = 0; cuda && i < s->n_head_dims; i++)
        if (s->head_dims[i] % 8 || s->head_dims[i] < 8)
            return cli_usage_error(CMD,
                                   "--head-dims: %d is not a multiple of 8 in 8..%d, which the "
                                   "CUDA kernels need (--backend cpu takes any head dim)",
                                   s->head_dims[i], FJ_MAX_HEAD_DIM);
    for (int i = 0; cuda && i < s->n_dtypes; i++)
        if (s->dtypes[i] == FJ_F32)
            return cli_usage_error(CMD, "--dtypes: the CUDA kernels compute f16 and bf16, not f32 "
                                        "(--backend cpu tunes f32)");
    for (int i = 0; i < s->n_configs; i++) {
        fj_kernel_desc k;
        fj_kernel_desc_init(&k);
        k.template_id = FJ_TEMPLATE_FLASH_FWD; /* an attention kernel: w and g tiles parse */
        bool ok = cuda ? fj_kernel_desc_parse_tiles(s->configs[i], &k) == FJ_OK
                       : cpu_config_ok(s->configs[i]);
        if (!ok)
            return cli_usage_error(CMD, "--configs: '%s' is not a %s configuration (%s)",
                                   s->configs[i], cuda ? "CUDA" : "CPU",
                                   cuda ? "m<block_m>n<block_n>w<warps>s<stages>, e.g. m128n64w4s2, "
                                          "or m<block_m>n<block_n>g<warpgroups>s<stages>, e.g. "
                                          "m128n64g2s3 (sm_90)"
                                        : "q<query block>k<key block>, e.g. q256k512");
    }
    return 0;
}

int tune_largest_block(const tune_space *s, fj_backend b)
{
    int largest = 16;
    for (int i = 0; i < s->n_configs; i++) {
        int x = 0, y = 0;
        if (b == FJ_BACKEND_CUDA) {
            fj_kernel_desc k;
            fj_kernel_desc_init(&k);
            if (fj_kernel_desc_parse_tiles(s->configs[i], &k) == FJ_OK)
                x = (int)k.block_m, y = (int)k.block_n;
        } else if (sscanf(s->configs[i], "q%dk%d", &x, &y) != 2) {
            x = y = 0;
        }
        if (x > largest) largest = x;
        if (y > largest) largest = y;
    }
    return largest;
}

/* ---- points ------------------------------------------------------------------- */

static int gcd(int a, int b)
{
    while (b) {
        int t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* Batch and heads for the point: --batch-heads split as evenly with the
 * preferred head count as it divides, else the backend's default size. */
static void point_size(const tune_space *s, bool cuda, int head_dim, int seqlen, int *batch,
                       int *heads)
{
    int pref_heads, total;
    if (seqlen == 1) {
        pref_heads = 32;
        total = cuda ? CUDA_DECODE_BATCH_HEADS : CPU_DECODE_BATCH_HEADS;
    } else if (cuda) {
        pref_heads = CUDA_HEADS_X_DIM / head_dim > 0 ? CUDA_HEADS_X_DIM / head_dim : 1;
        int b = CUDA_TOKENS / seqlen > 0 ? CUDA_TOKENS / seqlen : 1;
        total = b * pref_heads;
    } else {
        pref_heads = total = CPU_BATCH_HEADS;
    }
    if (s->batch_heads) total = s->batch_heads;
    *heads = gcd(total, pref_heads);
    *batch = total / *heads;
}

static void point_label(const tune_point *p, char *buf, size_t n)
{
    const fj_attention_desc *d = &p->d;
    if (d->seqlen_q == 1)
        snprintf(buf, n, "d%d %s %s decode 1x%d (b%d h%d)", d->head_dim, fj_dtype_name(d->dtype),
                 p->key.mask, d->seqlen_k, d->batch, d->heads_q);
    else
        snprintf(buf, n, "d%d %s %s %d (b%d h%d)", d->head_dim, fj_dtype_name(d->dtype),
                 p->key.mask, d->seqlen_q, d->batch, d->heads_q);
}

static bool same_key(const fj_tuning_entry *a, const fj_tuning_entry *b)
{
    return a->head_dim == b->head_dim && a->bucket == b->bucket && !strcmp(a->dtype, b->dtype) &&
           !strcmp(a->mask, b->mask);
}

/* Fills pt for one point; false when the desc does not validate (cannot
 * happen for values the flags accept, but a point is never tuned blind). */
static bool make_point(const tune_space *s, const fj_tuning_target *t, int dim, fj_dtype dtype,
                       int seqlen, fj_causal causal, tune_point *pt)
{
    bool cuda = t->backend == FJ_BACKEND_CUDA;
    int batch, heads;
    point_size(s, cuda, dim, seqlen, &batch, &heads);
    int sk = seqlen == 1 ? s->decode_seqlen_k : seqlen;
    fj_attention_desc_init(&pt->d, batch, heads, heads, seqlen, sk, dim, dtype);
    pt->d.causal = causal;
    fj_problem p;
    if (fj_problem_init(&p, &pt->d) != FJ_OK) return false;
    fj_tuning_key_for(&p, t->device, t->arch, t->template_name, &pt->key);
    point_label(pt, pt->label, sizeof pt->label);
    return true;
}

fj_status tune_points_make(const tune_space *s, const fj_tuning_target *t, tune_point **out,
                           int *count)
{
    int cap = s->n_head_dims * s->n_dtypes * s->n_causals * s->n_seqlens, n = 0;
    tune_point *pts = calloc(cap > 0 ? (size_t)cap : 1, sizeof *pts);
    if (!pts) return fj_fail(FJ_ERR_OUT_OF_MEMORY, "out of host memory for %d points", cap);
    for (int a = 0; a < s->n_dtypes; a++)
        for (int b = 0; b < s->n_head_dims; b++)
            for (int c = 0; c < s->n_seqlens; c++)
                for (int e = 0; e < s->n_causals; e++) {
                    tune_point *pt = &pts[n];
                    if (!make_point(s, t, s->head_dims[b], s->dtypes[a], s->seqlens[c],
                                    s->causals[e], pt)) {
                        fprintf(stderr, "flashjit tune: skipped d%d seqlen %d: %s\n",
                                s->head_dims[b], s->seqlens[c], fj_last_error());
                        continue;
                    }
                    int dup = -1;
                    for (int i = 0; i < n && dup < 0; i++)
                        if (same_key(&pts[i].key, &pt->key)) dup = i;
                    if (dup >= 0) {
                        printf("note: %s [causal %s] has the tuning entry (%s, bucket %d) of %s "
                               "[causal %s]; tuned once, as the latter\n",
                               pt->label, fj_causal_name(pt->d.causal), pt->key.mask,
                               pt->key.bucket, pts[dup].label, fj_causal_name(pts[dup].d.causal));
                        continue;
                    }
                    n++;
                }
    *out = pts;
    *count = n;
    return FJ_OK;
}

/* ---- what a plan runs ------------------------------------------------------------ */

/* "heuristic" or "shipped table", from a plan's reason: the tuner's
 * context reads no tuning file, so a tuned choice is the shipped table's. */
static void source_word(const char *why, char *from, size_t n)
{
    if (!strncmp(why, "tuned", 5)) snprintf(from, n, "%s", strstr(why, "shipped") ? "shipped" : "tuned");
    else if (!strncmp(why, "given", 5)) snprintf(from, n, "given");
    else snprintf(from, n, "heuristic");
}

static fj_status cuda_plan_config(const fj_plan *plan, char *config, size_t n, char *from,
                                  size_t from_n)
{
    fj_plan_info info;
    fj_status s = fj_plan_get_info(plan, &info);
    if (s) return s;
    snprintf(config, n, "%s", info.tiles);
    snprintf(from, from_n, "%s", info.tiles_source == FJ_TILES_HEURISTIC ? "heuristic"
                                 : info.tiles_source == FJ_TILES_GIVEN  ? "given"
                                 : info.tiles_source == FJ_TILES_SHIPPED_TABLE ? "shipped"
                                                                             : "tuned");
    return FJ_OK;
}

fj_status tune_plan_config(fj_context *ctx, const fj_tuning_target *t, const fj_plan *plan,
                           const fj_attention_desc *d, char *config, size_t n, char *from,
                           size_t from_n)
{
    if (t->backend == FJ_BACKEND_CUDA) return cuda_plan_config(plan, config, n, from, from_n);
    /* The CPU's describe prints the rows a block really holds (fewer than
       block_q when heads are stacked); the blocks come from the same call
       the plan made. */
    fj_problem p;
    fj_cpu_tiled_blocks b;
    fj_status s = fj_problem_init(&p, d);
    if (!s) s = fj_cpu_tiled_choose_blocks(ctx, &p, NULL, t->cpu_threads, &b);
    if (s) return s;
    fj_cpu_tiled_config_name(b.block_q, b.block_k, config, n);
    source_word(b.source, from, from_n);
    return FJ_OK;
}

void tune_effective_config(const fj_tuning_target *t, const fj_attention_desc *d,
                           const char *config, char *out, size_t n)
{
    snprintf(out, n, "%s", config);
    if (t->backend != FJ_BACKEND_CPU) return;
    fj_problem p;
    fj_cpu_tiled_blocks b;
    if (fj_problem_init(&p, d) == FJ_OK &&
        fj_cpu_tiled_choose_blocks(NULL, &p, config, t->cpu_threads, &b) == FJ_OK)
        fj_cpu_tiled_config_name(b.block_q, b.block_k, out, n);
}

int tune_plan_local_bytes(const fj_plan *plan)
{
    fj_plan_info info;
    return fj_plan_get_info(plan, &info) == FJ_OK ? info.local_bytes : 0;
}
