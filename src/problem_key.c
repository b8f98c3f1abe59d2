/* The problem key: the one text form of a problem (include/flashjit.h,
 * "Problem keys"), printed by plan describe texts, logs, bench rows, the
 * tuner and the grids in tools/grids/, and parsed back exactly. The fields
 * and their order are fixed, so two spellings of one problem cannot exist:
 *
 *     b<batch>.hq<heads_q>.hkv<heads_kv>.sq<seqlen_q>.sk<seqlen_k>.d<head_dim>.<dtype>.<mask>
 *
 * <mask>: "nomask", or causal_br|causal_tl, wl<N>, wr<N> in that order, each
 * optional, at least one. Then, only with a softcap, ".sc<value>": the
 * shortest decimal that reads back as the same float, with 'p' for the
 * decimal point ('.' separates fields), e.g. "sc50", "sc2p5", "sc1e-05"
 * (softcap_text says which form); then, with the features, ".alibi",
 * ".sinks", ".varlen" and ".paged<page_size>", in that order; last, only
 * where V's head dim differs from head_dim, ".dv<head_dim_v>". */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "problem.h"
#include "status.h"

#define KEY_FORM                                                                              \
    "b<batch>.hq<heads_q>.hkv<heads_kv>.sq<seqlen_q>.sk<seqlen_k>.d<head_dim>.<dtype>.<mask>" \
    "[.sc<softcap>][.alibi][.sinks][.varlen][.paged<page_size>][.dv<head_dim_v>]"

/* The mask fields after the dtype, as one string ("nomask", "causal_br.wl256"). */
static void mask_text(fj_causal causal, int window_left, int window_right, char *buf, size_t n)
{
    size_t len = 0;
    buf[0] = '\0';
    if (causal != FJ_CAUSAL_NONE)
        len += (size_t)snprintf(buf + len, n - len, "%s",
                                causal == FJ_CAUSAL_TOP_LEFT ? "causal_tl" : "causal_br");
    if (window_left >= 0 && len < n)
        len += (size_t)snprintf(buf + len, n - len, "%swl%d", len ? "." : "", window_left);
    if (window_right >= 0 && len < n)
        len += (size_t)snprintf(buf + len, n - len, "%swr%d", len ? "." : "", window_right);
    if (!len) snprintf(buf, n, "nomask");
}

/* The softcap's text, '.' written 'p': in [1e-4, 1e9) the fewest decimals
   (%.Nf) that strtof reads back as v ("50", "2p5", "0p001"), else the
   fewest significant digits in %g's exponent form ("1e-05", "1p5e+10").
   v finite and > 0. */
static void softcap_text(float v, char *buf, size_t n)
{
    bool done = false;
    if (v >= 1e-4f && v < 1e9f)
        for (int decimals = 0; decimals <= 16 && !done; decimals++) {
            snprintf(buf, n, "%.*f", decimals, (double)v);
            done = strtof(buf, NULL) == v;
        }
    for (int digits = 1; digits <= 9 && !done; digits++) {
        snprintf(buf, n, "%.*e", digits - 1, (double)v);
        done = strtof(buf, NULL) == v;
    }
    for (char *c = buf; *c; c++)
        if (*c == '.') *c = 'p';
}

static int key_text(int batch, int hq, int hkv, int sq, int sk, int d, int dv, fj_dtype dtype,
                    fj_causal causal, int wl, int wr, float softcap, bool alibi, bool sinks,
                    bool varlen, int page_size, char *buf, size_t n)
{
    char mask[64], cap[40] = "", paged[24] = "", vdim[24] = "";
    if (page_size > 0) snprintf(paged, sizeof paged, ".paged%d", page_size);
    if (dv != d) snprintf(vdim, sizeof vdim, ".dv%d", dv);
    mask_text(causal, wl, wr, mask, sizeof mask);
    if (softcap > 0.0f) {
        char v[32];
        softcap_text(softcap, v, sizeof v);
        snprintf(cap, sizeof cap, ".sc%s", v);
    }
    return snprintf(buf, n, "b%d.hq%d.hkv%d.sq%d.sk%d.d%d.%s.%s%s%s%s%s%s%s", batch, hq, hkv, sq,
                    sk, d, fj_dtype_name(dtype), mask, cap, alibi ? ".alibi" : "",
                    sinks ? ".sinks" : "", varlen ? ".varlen" : "", paged, vdim);
}

void fj_problem_key_of(const fj_problem *p, char *buf, size_t n)
{
    key_text(p->batch, p->heads_q, p->heads_kv, p->seqlen_q, p->seqlen_k, p->head_dim,
             p->head_dim_v, p->dtype, p->causal, p->window_left, p->window_right, p->softcap,
             p->alibi, p->sinks, p->varlen, p->paged ? p->page_size : 0, buf, n);
}

void fj_problem_format(const fj_problem *p, char *buf, size_t n)
{
    char key[FJ_PROBLEM_KEY_MAX];
    fj_problem_key_of(p, key, sizeof key);
    snprintf(buf, n, "%s scale=%g", key, (double)p->scale);
}

fj_status fj_problem_key(const fj_attention_desc *d, char *buf, size_t n)
{
    fj_clear_error();
    if (!buf || !n)
        return fj_fail(FJ_ERR_INVALID_ARGUMENT, "fj_problem_key: buf is NULL or n is 0");
    buf[0] = '\0';
    fj_problem p;
    fj_status s = fj_problem_init(&p, d);
    if (s) return s;
    char key[FJ_PROBLEM_KEY_MAX];
    fj_problem_key_of(&p, key, sizeof key);
    if (strlen(key) >= n)
        return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                       "fj_problem_key: the key has %zu characters, "
                       "more than the buffer's %zu bytes hold (FJ_PROBLEM_KEY_MAX is enough)",
                       strlen(key), n);
    memcpy(buf, key, strlen(key) + 1);
    return FJ_OK;
}

/* ---- parsing -------------------------------------------------------------- */

typedef struct cursor {
    const char *key; /* the whole key, for messages */
    const char *at;  /* the next field */
    int field;       /* 1-based number of the next field */
} cursor;

/* The next field (up to '.' or the end) into buf; false at the end of the key. */
static bool next_field(cursor *c, char *buf, size_t n)
{
    if (!*c->at) return false;
    size_t len = strcspn(c->at, ".");
    if (len >= n) len = n - 1; /* a too-long field fails its own check */
    memcpy(buf, c->at, len);
    buf[len] = '\0';
    c->at += strcspn(c->at, ".");
    if (*c->at == '.') c->at++;
    c->field++;
    return true;
}

/* A decimal without sign or leading zeros, at most INT_MAX. */
static bool parse_number(const char *s, int *out)
{
    if (!*s || (s[0] == '0' && s[1])) return false;
    long long v = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9') return false;
        v = v * 10 + (*s - '0');
        if (v > INT_MAX) return false;
    }
    *out = (int)v;
    return true;
}

static fj_status bad(const cursor *c, const char *field, const char *expected)
{
    return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                   "problem key '%s': field %d ('%s') is not %s (a key is " KEY_FORM ")", c->key,
                   c->field, field, expected);
}

/* "<prefix><number>" */
static fj_status number_field(cursor *c, const char *prefix, const char *name, int *out)
{
    char f[32], expected[96];
    snprintf(expected, sizeof expected, "%s<%s> (a decimal without sign or leading zeros)", prefix,
             name);
    if (!next_field(c, f, sizeof f))
        return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                       "problem key '%s' ends before field %d, %s<%s> (a key is " KEY_FORM ")",
                       c->key, c->field + 1, prefix, name);
    size_t pl = strlen(prefix);
    if (strncmp(f, prefix, pl) || !parse_number(f + pl, out)) return bad(c, f, expected);
    return FJ_OK;
}

static fj_status dtype_field(cursor *c, fj_dtype *out)
{
    static const fj_dtype all[] = {FJ_F32, FJ_F16, FJ_BF16};
    char f[32];
    if (!next_field(c, f, sizeof f))
        return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                       "problem key '%s' ends before field %d, the dtype (a key is " KEY_FORM ")",
                       c->key, c->field + 1);
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (!strcmp(f, fj_dtype_name(all[i]))) {
            *out = all[i];
            return FJ_OK;
        }
    return bad(c, f, "a dtype: f32, f16 or bf16");
}

/* "sc<value>" as softcap_text writes it, and nothing else: the value read
   back must print as the same text, so one softcap has one spelling. */
static bool parse_softcap(const char *f, float *out)
{
    if (strncmp(f, "sc", 2) || !f[2] || strlen(f) >= 32) return false;
    char num[32], *end;
    snprintf(num, sizeof num, "%s", f + 2);
    for (char *c = num; *c; c++) {
        if (*c == '.') return false; /* written 'p' */
        if (*c == 'p') *c = '.';
    }
    float v = strtof(num, &end);
    if (*end || !(v > 0.0f) || !isfinite(v)) return false;
    char again[32];
    softcap_text(v, again, sizeof again);
    if (strcmp(again, f + 2)) return false;
    *out = v;
    return true;
}

#define SOFTCAP_FORM                                                                         \
    "sc<softcap> (the softcap as the shortest decimal that reads back exactly, 'p' for the " \
    "point: sc50, sc2p5)"

#define TAIL_FORM                                                                      \
    SOFTCAP_FORM ", then alibi, then sinks, then varlen, then paged<page_size>, then " \
                 "dv<head_dim_v>, each at most once, in that order"

/* The fields after the mask, each optional, in this order: sc<softcap>,
   alibi, sinks, varlen, paged<N>, dv<N> (N != head_dim: a key names V's
   head dim only where it differs, so one problem has one key). f holds the first (already read); after:
   what they follow ("'nomask'", "the mask"), for messages. A paged key's
   pools get the pages its sequences can use: ceil(sk / N) a sequence,
   batch times that in all. */
static fj_status tail_fields(cursor *c, fj_attention_desc *d, char *f, size_t n, const char *after)
{
    int stage = 0; /* 1: softcap seen, 2: alibi, 3: sinks, 4: varlen, 5: paged, 6: dv */
    do {
        int page_size, dv;
        if (stage < 1 && parse_softcap(f, &d->softcap)) {
            stage = 1;
        } else if (stage < 2 && !strcmp(f, "alibi")) {
            d->features |= FJ_FEATURE_ALIBI;
            stage = 2;
        } else if (stage < 3 && !strcmp(f, "sinks")) {
            d->features |= FJ_FEATURE_SINKS;
            stage = 3;
        } else if (stage < 4 && !strcmp(f, "varlen")) {
            d->features |= FJ_FEATURE_VARLEN;
            stage = 4;
        } else if (stage < 5 && !strncmp(f, "paged", 5) && parse_number(f + 5, &page_size)) {
            if (page_size < 1) return bad(c, f, "paged<page_size> with page_size >= 1");
            const int per_seq = (int)(((int64_t)d->seqlen_k + page_size - 1) / page_size);
            int64_t pages = (int64_t)per_seq * d->batch;
            if (pages > INT_MAX)
                return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                               "problem key '%s': its pools would need batch (%d) x ceil(sk / "
                               "%d) = %lld pages, more than num_pages (an int) holds",
                               c->key, d->batch, page_size, (long long)pages);
            d->features |= FJ_FEATURE_PAGED_KV;
            d->page_size = page_size;
            d->max_pages = per_seq;
            d->num_pages = (int)pages;
            stage = 5;
        } else if (stage < 6 && !strncmp(f, "dv", 2) && parse_number(f + 2, &dv)) {
            if (dv < 1 || dv > FJ_MAX_HEAD_DIM || dv == d->head_dim) {
                char want[160];
                snprintf(want, sizeof want,
                         "dv<head_dim_v> with head_dim_v in 1..%d and not %d "
                         "(the head_dim: a key has dv only where V's head dim differs)",
                         FJ_MAX_HEAD_DIM, d->head_dim);
                return bad(c, f, want);
            }
            d->head_dim_v = dv;
            stage = 6;
        } else {
            const char *what = stage == 0   ? after
                               : stage == 1 ? "the softcap"
                               : stage == 2 ? "alibi"
                               : stage == 3 ? "sinks"
                               : stage == 4 ? "varlen"
                               : stage == 5 ? "paged"
                                            : "dv";
            return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                           "problem key '%s': nothing may follow %s but " TAIL_FORM
                           " (field %d is '%s')",
                           c->key, what, c->field, f);
        }
    } while (next_field(c, f, n));
    if (c->at[-1] == '.')
        return fj_fail(FJ_ERR_INVALID_ARGUMENT, "problem key '%s' ends with '.'", c->key);
    return FJ_OK;
}

/* "nomask", or [causal_br|causal_tl][.wl<N>][.wr<N>] with at least one; then
   the optional tail: sc<softcap>, alibi, sinks, varlen, paged<N>, dv<N>. */
static fj_status mask_fields(cursor *c, fj_attention_desc *d)
{
    char f[32];
    if (!next_field(c, f, sizeof f))
        return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                       "problem key '%s' ends before field %d, the mask (nomask, causal_br, "
                       "causal_tl, wl<N>, wr<N>; a key is " KEY_FORM ")",
                       c->key, c->field + 1);
    if (!strcmp(f, "nomask")) {
        if (!*c->at && c->at[-1] != '.') return FJ_OK; /* "nomask" ends the key */
        if (!next_field(c, f, sizeof f))
            return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                           "problem key '%s': nothing may follow 'nomask' but " TAIL_FORM
                           " (field %d is empty)",
                           c->key, c->field + 1);
        return tail_fields(c, d, f, sizeof f, "'nomask'");
    }
    int stage = 0; /* 1: causal seen, 2: wl seen, 3: wr seen */
    do {
        int v;
        if (stage >= 1 &&
            (parse_softcap(f, &d->softcap) || !strcmp(f, "alibi") || !strcmp(f, "sinks") ||
             !strcmp(f, "varlen") || !strncmp(f, "paged", 5) || !strncmp(f, "dv", 2))) {
            d->softcap = 0.0f; /* tail_fields reads the field again */
            return tail_fields(c, d, f, sizeof f, "the mask");
        } else if (stage < 1 && (!strcmp(f, "causal_br") || !strcmp(f, "causal_tl"))) {
            d->causal = f[7] == 'b' ? FJ_CAUSAL_BOTTOM_RIGHT : FJ_CAUSAL_TOP_LEFT;
            stage = 1;
        } else if (stage < 2 && !strncmp(f, "wl", 2) && parse_number(f + 2, &v)) {
            d->window_left = v;
            stage = 2;
        } else if (stage < 3 && !strncmp(f, "wr", 2) && parse_number(f + 2, &v)) {
            d->window_right = v;
            stage = 3;
        } else {
            return bad(c, f,
                       stage ? "the next mask field (causal_br or causal_tl, then wl<N>, then "
                               "wr<N>, each once, in that order) or " TAIL_FORM
                             : "a mask: nomask, or causal_br or causal_tl, then wl<N>, then "
                               "wr<N>, in that order");
        }
    } while (next_field(c, f, sizeof f));
    if (c->at[-1] == '.')
        return fj_fail(FJ_ERR_INVALID_ARGUMENT, "problem key '%s' ends with '.'", c->key);
    return FJ_OK;
}

fj_status fj_problem_key_parse(const char *key, fj_attention_desc *out)
{
    fj_clear_error();
    if (!key || !out)
        return fj_fail(FJ_ERR_INVALID_ARGUMENT, "fj_problem_key_parse: %s is NULL",
                       key ? "the desc" : "the key");
    if (strlen(key) >= FJ_PROBLEM_KEY_MAX)
        return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                       "problem key '%.40s...' is longer than FJ_PROBLEM_KEY_MAX - 1 (%d) "
                       "characters",
                       key, FJ_PROBLEM_KEY_MAX - 1);
    cursor c = {key, key, 0};
    int b = 0, hq = 0, hkv = 0, sq = 0, sk = 0, hd = 0;
    fj_dtype dtype = FJ_F32;
    fj_status s;
    if ((s = number_field(&c, "b", "batch", &b)) || (s = number_field(&c, "hq", "heads_q", &hq)) ||
        (s = number_field(&c, "hkv", "heads_kv", &hkv)) ||
        (s = number_field(&c, "sq", "seqlen_q", &sq)) ||
        (s = number_field(&c, "sk", "seqlen_k", &sk)) ||
        (s = number_field(&c, "d", "head_dim", &hd)) || (s = dtype_field(&c, &dtype)))
        return s;
    fj_attention_desc d;
    fj_attention_desc_init(&d, b, hq, hkv, sq, sk, hd, dtype);
    if ((s = mask_fields(&c, &d))) return s;
    fj_problem p;
    if ((s = fj_problem_init(&p, &d))) return fj_fail_prefix(s, "problem key '%s'", key);
    *out = d;
    return FJ_OK;
}
