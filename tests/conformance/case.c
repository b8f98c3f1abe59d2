/* The case record, its string and tolerance, and the list's container. The
 * cases themselves are in cases.c. */
#include "case.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "problem.h"

const char *fjt_layout_name(fjt_layout l)
{
    static const char *const names[FJT_LAYOUT_COUNT] = {
        [FJT_DENSE] = "dense",
        [FJT_BHSD] = "bhsd",
        [FJT_PADDED] = "padded",
        [FJT_PADDED3] = "padded3",
        [FJT_KV_BROADCAST] = "kv-broadcast",
        [FJT_Q_BROADCAST] = "q-broadcast",
        [FJT_CUSTOM] = "custom",
    };
    return (unsigned)l < FJT_LAYOUT_COUNT ? names[l] : "?";
}

void fjt_set_layout(fj_attention_desc *d, fjt_layout l)
{
    int64_t *s[4] = {d->q_stride, d->k_stride, d->v_stride, d->o_stride};
    const int seq[4] = {d->seqlen_q, d->seqlen_k, d->seqlen_k, d->seqlen_q};
    const int heads[4] = {d->heads_q, d->heads_kv, d->heads_kv, d->heads_q};
    for (int i = 0; i < 4; i++) {
        /* q's and k's rows head_dim long, v's and o's head_dim_v */
        const int64_t D = i < 2 ? d->head_dim : fjt_dim_v(d);
        bool input_kv = i == 1 || i == 2, input_q = i == 0;
        switch (l) {
        case FJT_DENSE: s[i][0] = s[i][1] = s[i][2] = 0; break;
        case FJT_BHSD:
            s[i][2] = seq[i] * D;
            s[i][1] = D;
            s[i][0] = heads[i] * seq[i] * D;
            break;
        case FJT_PADDED:
            s[i][2] = D + 8;
            s[i][1] = heads[i] * (D + 8) + 16;
            s[i][0] = seq[i] * s[i][1] + 8;
            break;
        case FJT_PADDED3:
            s[i][2] = D + 3;
            s[i][1] = heads[i] * (D + 3);
            s[i][0] = seq[i] * heads[i] * (D + 3) + 5;
            break;
        case FJT_KV_BROADCAST:
        case FJT_Q_BROADCAST:
            s[i][2] = D;
            s[i][1] = heads[i] * D;
            s[i][0] = (l == FJT_KV_BROADCAST ? input_kv : input_q) ? 0 : seq[i] * s[i][1];
            break;
        case FJT_CUSTOM:
        case FJT_LAYOUT_COUNT: break;
        }
    }
}

fjt_case fjt_case_make(const char *group, const char *name, const fj_attention_desc *d,
                       fjt_layout layout, bool lse)
{
    fjt_case c;
    memset(&c, 0, sizeof c);
    snprintf(c.group, sizeof c.group, "%s", group);
    snprintf(c.name, sizeof c.name, "%s", name);
    c.d = *d;
    c.layout = layout;
    fjt_set_layout(&c.d, layout);
    c.lse = lse;
    c.must_run = FJT_ON_CPU;
    return c;
}

void fjt_case_str(const fjt_case *c, char *buf, size_t n)
{
    char problem[256];
    fj_problem p;
    if (fj_problem_init(&p, &c->d) == FJ_OK) fj_problem_format(&p, problem, sizeof problem);
    else
        snprintf(problem, sizeof problem, "%s (invalid: %s)", fjt_desc_str(&c->d), fj_last_error());
    int len = snprintf(buf, n, "%s/%s %s layout=%s", c->group, c->name, problem,
                       fjt_layout_name(c->layout));
    if (c->layout == FJT_CUSTOM && len > 0 && (size_t)len < n) {
        const int64_t *s[4] = {c->d.q_stride, c->d.k_stride, c->d.v_stride, c->d.o_stride};
        for (int i = 0; i < 4 && (size_t)len < n; i++)
            len += snprintf(buf + len, n - (size_t)len, "%s%lld,%lld,%lld", i ? ";" : "[",
                            (long long)s[i][0], (long long)s[i][1], (long long)s[i][2]);
        if ((size_t)len < n) len += snprintf(buf + len, n - (size_t)len, "]");
    }
    if (len > 0 && (size_t)len < n)
        len += snprintf(buf + len, n - (size_t)len, " lse=%s", c->lse ? "on" : "off");
    if (c->knob && len > 0 && (size_t)len < n)
        len += snprintf(buf + len, n - (size_t)len, " %s", c->knob);
    if (c->varlen.nseq && len > 0 && (size_t)len + 8 < n) {
        len += snprintf(buf + len, n - (size_t)len, c->paged.dense_q ? " kv=" : " varlen=");
        fjt_varlen_str(&c->varlen, buf + len, n - (size_t)len);
        len += (int)strlen(buf + len);
    }
    if (c->paged.page_size && len > 0 && (size_t)len + 2 < n) {
        buf[len++] = ' ';
        fjt_paged_str(&c->paged, &c->d, buf + len, n - (size_t)len);
    }
}

fjt_bounds fjt_case_bounds(const fjt_case *c, fj_backend b)
{
    fjt_bounds t;
    memset(&t, 0, sizeof t);
    fj_dtype dt = c->d.dtype;
    t.rel_fro = c->rel_tol > 0 ? c->rel_tol : fjt_tolerance(dt);
    t.row_rel = c->row_tol;
    t.lse_abs = 1e-4;
    switch (b) {
    case FJ_BACKEND_CPU:
        t.ref_dist = t.rel_fro;
        t.lse_ref = 1e-4;
        break;
    case FJ_BACKEND_CUDA:
        /* the floors: about half an output ulp of the type over a row */
        t.ref_factor = 2.0;
        t.ref_floor = dt == FJ_F16 ? 1e-3 : dt == FJ_BF16 ? 8e-3 : 1e-6;
        t.lse_abs = dt == FJ_F16 ? 1e-3 : dt == FJ_BF16 ? 1e-2 : 1e-4;
        break;
    default: break;
    }
    if (c->lse_tol > t.lse_abs) t.lse_abs = c->lse_tol;
    if (t.lse_ref > 0 && c->lse_tol > t.lse_ref) t.lse_ref = c->lse_tol;
    return t;
}

double fjt_case_work(const fjt_case *c)
{
    const fj_attention_desc *d = &c->d;
    if (c->varlen.nseq) {
        double w = 0;
        for (int b = 0; b < c->varlen.nseq; b++)
            w += (double)c->varlen.len_q[b] * fjt_varlen_keys(&c->varlen, b);
        return w * d->heads_q * (d->head_dim + fjt_dim_v(d)) / 2;
    }
    double rows = c->oracle_rows ? c->n_oracle_rows : d->seqlen_q;
    return (double)d->batch * d->heads_q * rows * d->seqlen_k * (d->head_dim + fjt_dim_v(d)) / 2;
}

uint64_t fjt_case_seed(const fjt_case *c, uint64_t suite_seed)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a of "group/name" */
    for (const char *s = c->group; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    h = (h ^ '/') * 1099511628211ull;
    for (const char *s = c->name; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return suite_seed ^ h;
}

bool fjt_case_list_add(fjt_case_list *l, const fjt_case *c)
{
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 256;
        fjt_case *grown = realloc(l->cases, sizeof *grown * (size_t)cap);
        if (!grown) return false;
        l->cases = grown;
        l->cap = cap;
    }
    l->cases[l->n++] = *c;
    return true;
}

void fjt_case_list_free(fjt_case_list *l)
{
    free(l->cases);
    memset(l, 0, sizeof *l);
}
