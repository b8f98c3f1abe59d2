/* Tuning entries: the growing, thread-safe list, the text of a tuning file
 * (format 1 read, format 2 read and written) and the point key. */
#include "tune/tuning.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"

/* Entries live in chunks that never move, so a found entry stays valid while
 * others are added; only the array of chunk pointers grows. */
#define CHUNK 64

typedef struct chunk {
    fj_tuning_entry e[CHUNK];
} chunk;

struct fj_tuning {
    pthread_mutex_t lock; /* guards chunks, nchunks, count */
    chunk **chunks;
    int nchunks;
    int count;
    bool file_read;            /* a context's: its tuning file was there and read */
    pthread_mutex_t measuring; /* a context's: held by the measurement under way */
};

fj_tuning *fj_tuning_create(void)
{
    fj_tuning *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    pthread_mutex_init(&t->lock, NULL);
    pthread_mutex_init(&t->measuring, NULL);
    return t;
}

void fj_tuning_free(fj_tuning *t)
{
    if (!t) return;
    for (int i = 0; i < t->nchunks; i++) free(t->chunks[i]);
    free(t->chunks);
    pthread_mutex_destroy(&t->lock);
    pthread_mutex_destroy(&t->measuring);
    free(t);
}

void fj_tuning_set_file_read(fj_tuning *t) { t->file_read = true; }
bool fj_tuning_file_read(const fj_tuning *t) { return t && t->file_read; }
void fj_tuning_measure_lock(fj_tuning *t) { pthread_mutex_lock(&t->measuring); }
void fj_tuning_measure_unlock(fj_tuning *t) { pthread_mutex_unlock(&t->measuring); }

/* The lock is a mutable part of a const list: readers take it too. */
static void lock(const fj_tuning *t) { pthread_mutex_lock(&((fj_tuning *)t)->lock); }
static void unlock(const fj_tuning *t) { pthread_mutex_unlock(&((fj_tuning *)t)->lock); }

static fj_tuning_entry *at(const fj_tuning *t, int i)
{
    return &t->chunks[i / CHUNK]->e[i % CHUNK];
}

int fj_tuning_count(const fj_tuning *t)
{
    if (!t) return 0;
    lock(t);
    int n = t->count;
    unlock(t);
    return n;
}

const fj_tuning_entry *fj_tuning_entry_at(const fj_tuning *t, int i)
{
    if (!t) return NULL;
    lock(t);
    const fj_tuning_entry *e = i >= 0 && i < t->count ? at(t, i) : NULL;
    unlock(t);
    return e;
}

/* Under the lock. */
static int push(fj_tuning *t, const fj_tuning_entry *e)
{
    if (t->count == t->nchunks * CHUNK) {
        chunk **n = realloc(t->chunks, (size_t)(t->nchunks + 1) * sizeof *n);
        if (!n) return -1;
        t->chunks = n;
        if (!(n[t->nchunks] = malloc(sizeof(chunk)))) return -1;
        t->nchunks++;
    }
    *at(t, t->count) = *e;
    t->count++;
    return 0;
}

fj_status fj_tuning_add(fj_tuning *t, const fj_tuning_entry *e)
{
    lock(t);
    int bad = push(t, e);
    unlock(t);
    return bad ? fj_fail(FJ_ERR_OUT_OF_MEMORY, "out of memory adding a tuning entry") : FJ_OK;
}

fj_status fj_tuning_add_all(fj_tuning *t, const fj_tuning *from, fj_tiles_source origin)
{
    int n = fj_tuning_count(from);
    lock(t);
    int bad = 0, had = t->count;
    for (int i = 0; i < n && !bad; i++) {
        fj_tuning_entry e = *at(from, i);
        e.origin = origin;
        bad = push(t, &e);
    }
    if (bad) t->count = had; /* all or nothing; readers saw neither (the lock) */
    unlock(t);
    return bad ? fj_fail(FJ_ERR_OUT_OF_MEMORY, "out of memory adding tuning entries") : FJ_OK;
}

/* The point compared field by field: a key made by hand (a test's) need
 * not spell its point text. */
static bool same_key(const fj_tuning_entry *a, const fj_tuning_entry *b)
{
    return !strcmp(a->device, b->device) && !strcmp(a->arch, b->arch) &&
           !strcmp(a->template_name, b->template_name) && a->head_dim == b->head_dim &&
           !strcmp(a->dtype, b->dtype) && !strcmp(a->mask, b->mask) && a->bucket == b->bucket;
}

/* Last match wins: the tuner appends, imports and measurements come later,
 * so a re-tuned point supersedes. Under the lock. */
static const fj_tuning_entry *find_locked(const fj_tuning *t, const fj_tuning_entry *key)
{
    for (int i = t->count - 1; i >= 0; i--)
        if (same_key(at(t, i), key)) return at(t, i);
    return NULL;
}

const fj_tuning_entry *fj_tuning_find_in(const fj_tuning *t, const fj_tuning_entry *key)
{
    if (!t) return NULL;
    lock(t);
    const fj_tuning_entry *e = find_locked(t, key);
    unlock(t);
    return e;
}

int fj_tuning_count_matching(const fj_tuning *t, const char *device, const char *arch)
{
    if (!t) return 0;
    lock(t);
    int n = 0;
    for (int i = 0; i < t->count; i++)
        n += !strcmp(at(t, i)->device, device) && !strcmp(at(t, i)->arch, arch);
    unlock(t);
    return n;
}

/* ---- keys --------------------------------------------------------------------- */

int fj_tuning_bucket(int seqlen_q, int seqlen_k)
{
    if (seqlen_q <= 16) return 1;
    int b = 512;
    /* nearest power of two in log terms: go up while seqlen_k >= 1.5 * b */
    while (b < 32768 && (double)seqlen_k >= 1.5 * b) b *= 2;
    return b;
}

void fj_tuning_device_token(const char *name, char *out, size_t n)
{
    size_t i = 0;
    for (; name[i] && i + 1 < n; i++) {
        char c = name[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '.' || c == '-' || c == '_' || c == ':';
        out[i] = ok ? c : '_';
    }
    out[i] = '\0';
}

void fj_tuning_point_text(const fj_tuning_entry *e, char *buf, size_t n)
{
    if (e->bucket == 1) snprintf(buf, n, "d%d.%s.%s.decode", e->head_dim, e->dtype, e->mask);
    else snprintf(buf, n, "d%d.%s.%s.sk%d", e->head_dim, e->dtype, e->mask, e->bucket);
}

static bool known_dtype(const char *s)
{
    return !strcmp(s, "f32") || !strcmp(s, "f16") || !strcmp(s, "bf16");
}

static bool known_mask(const char *s)
{
    for (uint32_t m = 0; fj_mask_kind_name(m); m++)
        if (!strcmp(s, fj_mask_kind_name(m))) return true;
    return false;
}

static bool valid_bucket(int b)
{
    if (b == 1) return true;
    for (int x = 512; x <= 32768; x *= 2)
        if (b == x) return true;
    return false;
}

/* The checks both formats make on the point's fields; NULL or the rule. */
static const char *check_point(const fj_tuning_entry *e)
{
    if (e->head_dim < 1 || e->head_dim > FJ_MAX_HEAD_DIM) return "head_dim out of range";
    if (!known_dtype(e->dtype)) return "dtype is not f32, f16 or bf16";
    if (!known_mask(e->mask)) return "mask is not nomask, causal, window or causal_window";
    if (!valid_bucket(e->bucket)) return "bucket is not 1 (decode) or a power of two in 512..32768";
    return NULL;
}

const char *fj_tuning_point_parse(const char *text, fj_tuning_entry *e)
{
    static const char form[] = "the point is not d<head_dim>.<dtype>.<mask>.sk<bucket> or "
                               "d<head_dim>.<dtype>.<mask>.decode";
    char dtype[8], mask[16], bucket[16], tail;
    int hd;
    if (sscanf(text, "d%d.%7[a-z0-9].%15[a-z_].%15[a-z0-9]%c", &hd, dtype, mask, bucket, &tail) !=
        4)
        return form;
    e->head_dim = hd;
    snprintf(e->dtype, sizeof e->dtype, "%s", dtype);
    snprintf(e->mask, sizeof e->mask, "%s", mask);
    int b = 0;
    if (!strcmp(bucket, "decode")) b = 1;
    else if (sscanf(bucket, "sk%d%c", &b, &tail) != 1) return form;
    e->bucket = b;
    const char *why = check_point(e);
    if (why) return why;
    /* Exactly as written: "d064" or "sk1" must not be a second spelling. */
    char canonical[sizeof e->point];
    fj_tuning_point_text(e, canonical, sizeof canonical);
    if (strcmp(canonical, text))
        return "the point is not in its canonical form (no leading zeros; bucket 1 is 'decode')";
    snprintf(e->point, sizeof e->point, "%s", canonical);
    return NULL;
}

void fj_tuning_key_for(const fj_problem *p, const char *device, const char *arch,
                       const char *template_name, fj_tuning_entry *key)
{
    memset(key, 0, sizeof *key);
    fj_tuning_device_token(device, key->device, sizeof key->device);
    snprintf(key->arch, sizeof key->arch, "%s", arch);
    snprintf(key->template_name, sizeof key->template_name, "%s", template_name);
    key->head_dim = p->head_dim;
    snprintf(key->dtype, sizeof key->dtype, "%s", fj_dtype_name(p->dtype));
    snprintf(key->mask, sizeof key->mask, "%s", fj_mask_kind_name(fj_problem_mask_kind(p)));
    key->bucket = fj_tuning_bucket(p->seqlen_q, p->seqlen_k);
    fj_tuning_point_text(key, key->point, sizeof key->point);
}

/* ---- text ------------------------------------------------------------------------ */

/* One entry line of format `version`; NULL on success, else the reason. */
static const char *parse_entry(const char *line, int version, fj_tuning_entry *e)
{
    memset(e, 0, sizeof *e);
    e->origin = FJ_TILES_TUNING_FILE;
    char extra[2];
    if (version == 1) {
        int n = sscanf(line, "%95s %15s %23s %d %7s %15s %d %31s %lf %15s %1s", e->device, e->arch,
                       e->template_name, &e->head_dim, e->dtype, e->mask, &e->bucket, e->config,
                       &e->ms, e->date, extra);
        if (n < 10)
            return "expected 10 fields: device arch template head_dim dtype mask bucket config "
                   "ms date";
        if (n > 10) return "more than 10 fields";
        const char *why = check_point(e);
        if (why) return why;
        fj_tuning_point_text(e, e->point, sizeof e->point);
    } else {
        char point[64];
        int n = sscanf(line, "%95s %15s %23s %63s %31s %lf %15s %1s", e->device, e->arch,
                       e->template_name, point, e->config, &e->ms, e->date, extra);
        if (n < 7) return "expected 7 fields: device arch template point config ms date";
        if (n > 7) return "more than 7 fields";
        const char *why = fj_tuning_point_parse(point, e);
        if (why) return why;
    }
    if (!(e->ms > 0)) return "ms must be > 0";
    return NULL;
}

int fj_tuning_text_version(const char *text)
{
    for (const char *p = text; *p;) {
        size_t len = strcspn(p, "\n");
        const char *s = p;
        while (s < p + len && (*s == ' ' || *s == '\t' || *s == '\r')) s++;
        if (s < p + len && *s != '#') {
            int v;
            return sscanf(s, "flashjit-tuning %d", &v) == 1 && v > 0 ? v : 0;
        }
        p += len + (p[len] == '\n');
    }
    return 0;
}

/* What parse() found wrong first, for the strict reader. */
typedef struct parse_problem {
    int line; /* 0: none */
    char what[160];
} parse_problem;

/* strict: stop at the first problem (into *first) instead of noting it. */
static fj_status parse(const char *text, const char *origin, bool strict, fj_tuning **out,
                       fj_strbuf *notes, parse_problem *first)
{
    *out = NULL;
    fj_tuning *t = fj_tuning_create();
    if (!t) return fj_fail(FJ_ERR_OUT_OF_MEMORY, "out of memory reading %s", origin);
    int lineno = 0, version = 0, bad = 0;
    const char *p = text;
    while (*p && !(strict && first->line)) {
        size_t len = strcspn(p, "\n");
        char line[512];
        lineno++;
        size_t m = len < sizeof line - 1 ? len : sizeof line - 1;
        memcpy(line, p, m);
        line[m] = '\0';
        p += len + (p[len] == '\n');
        char *s = line;
        while (*s == ' ' || *s == '\t' || *s == '\r') s++;
        if (!*s || *s == '#') continue;
        if (!version) {
            char why[160] = "";
            int v;
            if (sscanf(s, "flashjit-tuning %d", &v) != 1)
                snprintf(why, sizeof why, "first line is not 'flashjit-tuning %d' (or 1)",
                         FJ_TUNING_FORMAT_VERSION);
            else if (v != 1 && v != 2)
                snprintf(why, sizeof why, "format version %d is not 1 or 2", v);
            if (*why) {
                if (strict) {
                    first->line = lineno;
                    snprintf(first->what, sizeof first->what, "%s", why);
                } else if (strstr(why, "format version")) {
                    fj_strbuf_printf(notes, "%s: %s; file ignored\n", origin, why);
                } else {
                    fj_strbuf_printf(notes, "%s:%d: %s; file ignored\n", origin, lineno, why);
                }
                break;
            }
            version = v;
            continue;
        }
        fj_tuning_entry e;
        const char *why = len >= sizeof line ? "line too long" : parse_entry(s, version, &e);
        if (why) {
            if (strict) {
                first->line = lineno;
                snprintf(first->what, sizeof first->what, "%s", why);
            } else if (bad++ < 5) {
                fj_strbuf_printf(notes, "%s:%d: %s; line skipped\n", origin, lineno, why);
            }
            continue;
        }
        if (push(t, &e)) {
            fj_tuning_free(t);
            return fj_fail(FJ_ERR_OUT_OF_MEMORY, "out of memory reading %s", origin);
        }
    }
    if (strict && !version && !first->line) {
        first->line = lineno ? lineno : 1;
        snprintf(first->what, sizeof first->what, "no 'flashjit-tuning 2' (or 1) version line");
    }
    if (!strict && bad > 5)
        fj_strbuf_printf(notes, "%s: %d more bad lines skipped\n", origin, bad - 5);
    *out = t;
    return FJ_OK;
}

fj_status fj_tuning_parse(const char *text, const char *origin, fj_tuning **out, fj_strbuf *notes)
{
    return parse(text, origin, false, out, notes, NULL);
}

fj_status fj_tuning_parse_strict(const char *text, const char *name, fj_tuning **out)
{
    parse_problem first = {0, ""};
    fj_status s = parse(text, name, true, out, NULL, &first);
    if (s || !first.line) return s;
    fj_tuning_free(*out);
    *out = NULL;
    return fj_fail(FJ_ERR_INVALID_ARGUMENT, "%s:%d: %s (docs/tuning.md); nothing imported", name,
                   first.line, first.what);
}

void fj_tuning_format_entry(const fj_tuning_entry *e, int version, char *line, size_t n)
{
    if (version == 1)
        snprintf(line, n, "%s %s %s %d %s %s %d %s %.6g %s\n", e->device, e->arch, e->template_name,
                 e->head_dim, e->dtype, e->mask, e->bucket, e->config, e->ms, e->date);
    else
        snprintf(line, n, "%s %s %s %s %s %.6g %s\n", e->device, e->arch, e->template_name,
                 e->point, e->config, e->ms, e->date);
}

void fj_tuning_format(const fj_tuning *t, fj_strbuf *out)
{
    fj_strbuf_printf(out,
                     "# flashjit tuning file (docs/tuning.md)\n"
                     "flashjit-tuning %d\n"
                     "# device arch template point config ms date\n",
                     FJ_TUNING_FORMAT_VERSION);
    if (!t) return;
    lock(t);
    for (int i = 0; i < t->count; i++) {
        const fj_tuning_entry *e = at(t, i);
        bool first = true; /* the first entry of its key: print that key's winner here */
        for (int j = 0; j < i && first; j++) first = !same_key(at(t, j), e);
        if (!first) continue;
        char line[400];
        fj_tuning_format_entry(find_locked(t, e), FJ_TUNING_FORMAT_VERSION, line, sizeof line);
        fj_strbuf_puts(out, line);
    }
    unlock(t);
}
