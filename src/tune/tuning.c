/* The tuning file and the shipped table: parsing, lookup, appending. */
#include "tune/tuning.h"

#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "status.h"
#include "embedded.h"

struct fj_tuning {
    fj_tuning_entry *entries;
    int count, cap;
};

void fj_tuning_free(struct fj_tuning *t)
{
    if (!t) return;
    free(t->entries);
    free(t);
}

int fj_tuning_count(const fj_tuning *t) { return t ? t->count : 0; }

const fj_tuning_entry *fj_tuning_entry_at(const fj_tuning *t, int i)
{
    return t && i >= 0 && i < t->count ? &t->entries[i] : NULL;
}

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

static int push(fj_tuning *t, const fj_tuning_entry *e)
{
    if (t->count == t->cap) {
        int cap = t->cap ? 2 * t->cap : 64;
        fj_tuning_entry *n = realloc(t->entries, (size_t)cap * sizeof *n);
        if (!n) return -1;
        t->entries = n;
        t->cap = cap;
    }
    t->entries[t->count++] = *e;
    return 0;
}

/* One entry line; 0 on success, else a reason. */
static const char *parse_entry(const char *line, fj_tuning_entry *e)
{
    memset(e, 0, sizeof *e);
    char extra[2];
    int n = sscanf(line, "%95s %15s %23s %d %7s %15s %d %31s %lf %15s %1s", e->device, e->arch,
                   e->template_name, &e->head_dim, e->dtype, e->mask, &e->bucket, e->config,
                   &e->ms, e->date, extra);
    if (n < 10) return "expected 10 fields: device arch template head_dim dtype mask bucket config ms date";
    if (n > 10) return "more than 10 fields";
    if (e->head_dim < 1 || e->head_dim > FJ_MAX_HEAD_DIM) return "head_dim out of range";
    if (strcmp(e->dtype, "f32") && strcmp(e->dtype, "f16") && strcmp(e->dtype, "bf16"))
        return "dtype is not f32, f16 or bf16";
    if (e->bucket < 1) return "bucket must be >= 1";
    if (!(e->ms > 0)) return "ms must be > 0";
    return NULL;
}

fj_status fj_tuning_parse(const char *text, const char *origin, fj_tuning **out, fj_strbuf *notes)
{
    *out = NULL;
    fj_tuning *t = calloc(1, sizeof *t);
    if (!t) return fj_fail(FJ_ERR_OUT_OF_MEMORY, "out of memory reading %s", origin);
    int lineno = 0, version_seen = 0, bad = 0;
    const char *p = text;
    while (*p) {
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
        if (!version_seen) {
            int v;
            if (sscanf(s, "flashjit-tuning %d", &v) != 1) {
                fj_strbuf_printf(notes, "%s:%d: first line is not 'flashjit-tuning %d'; file ignored\n",
                                 origin, lineno, FJ_TUNING_FORMAT_VERSION);
                break;
            }
            if (v != FJ_TUNING_FORMAT_VERSION) {
                fj_strbuf_printf(notes, "%s: format version %d is not %d; file ignored\n", origin, v,
                                 FJ_TUNING_FORMAT_VERSION);
                break;
            }
            version_seen = 1;
            continue;
        }
        fj_tuning_entry e;
        const char *why = len >= sizeof line ? "line too long" : parse_entry(s, &e);
        if (why) {
            if (bad++ < 5) fj_strbuf_printf(notes, "%s:%d: %s; line skipped\n", origin, lineno, why);
            continue;
        }
        if (push(t, &e)) {
            fj_tuning_free(t);
            return fj_fail(FJ_ERR_OUT_OF_MEMORY, "out of memory reading %s", origin);
        }
    }
    if (bad > 5) fj_strbuf_printf(notes, "%s: %d more bad lines skipped\n", origin, bad - 5);
    *out = t;
    return FJ_OK;
}

static int same_key(const fj_tuning_entry *a, const fj_tuning_entry *b)
{
    return !strcmp(a->device, b->device) && !strcmp(a->arch, b->arch) &&
           !strcmp(a->template_name, b->template_name) && a->head_dim == b->head_dim &&
           !strcmp(a->dtype, b->dtype) && !strcmp(a->mask, b->mask) && a->bucket == b->bucket;
}

/* Last match wins: the tuner appends, so a re-tuned point supersedes. */
static const fj_tuning_entry *find_in(const fj_tuning *t, const fj_tuning_entry *key)
{
    if (!t) return NULL;
    for (int i = t->count - 1; i >= 0; i--)
        if (same_key(&t->entries[i], key)) return &t->entries[i];
    return NULL;
}

const fj_tuning_entry *fj_tuning_find_in(const fj_tuning *t, const fj_tuning_entry *key)
{
    return find_in(t, key);
}

int fj_tuning_count_matching(const fj_tuning *t, const char *device, const char *arch)
{
    int n = 0;
    for (int i = 0; t && i < t->count; i++)
        n += !strcmp(t->entries[i].device, device) && !strcmp(t->entries[i].arch, arch);
    return n;
}

static pthread_once_t shipped_once = PTHREAD_ONCE_INIT;
static fj_tuning *shipped;

static void load_shipped(void)
{
    fj_tuning *all = calloc(1, sizeof *all);
    if (!all) return;
    for (const fj_embedded_file *f = fj_tuning_tables; f->name; f++) {
        fj_tuning *one;
        fj_strbuf notes;
        fj_strbuf_init(&notes);
        if (fj_tuning_parse(f->text, f->name, &one, &notes) == FJ_OK) {
            for (int i = 0; i < one->count; i++)
                if (push(all, &one->entries[i])) break;
            fj_tuning_free(one);
        }
        if (notes.len) FJ_INFO("shipped tuning table: %s", notes.data);
        fj_strbuf_free(&notes);
    }
    shipped = all;
}

const fj_tuning *fj_tuning_shipped(void)
{
    pthread_once(&shipped_once, load_shipped);
    return shipped;
}

const fj_tuning_entry *fj_tuning_find(const fj_context *ctx, const fj_tuning_entry *key,
                                      fj_tiles_source *from)
{
    const fj_tuning_entry *e = find_in(ctx->tuning, key);
    *from = FJ_TILES_TUNING_FILE;
    if (e) return e;
    *from = FJ_TILES_SHIPPED_TABLE;
    return find_in(fj_tuning_shipped(), key);
}

const char *fj_tuning_source_text(fj_tiles_source from)
{
    return from == FJ_TILES_TUNING_FILE ? "the tuning file" : "the shipped tuning table";
}

static char *read_file(const char *path, int *err)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        *err = errno;
        return NULL;
    }
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t n = fread(buf + len, 1, cap - len - 1, f);
        len += n;
        if (n == 0) break;
        if (len + 1 == cap) {
            char *b = cap > (64u << 20) ? NULL : realloc(buf, cap * 2);
            if (!b) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = b;
            cap *= 2;
        }
    }
    *err = buf ? (ferror(f) ? EIO : 0) : ENOMEM;
    fclose(f);
    if (buf && *err) {
        free(buf);
        buf = NULL;
    }
    if (buf) buf[len] = '\0';
    return buf;
}

fj_status fj_tuning_load(fj_context *ctx, fj_strbuf *describe)
{
    ctx->tuning = NULL;
    int shipped_n = fj_tuning_count(fj_tuning_shipped());
    if (!ctx->tuning_file) {
        fj_strbuf_printf(describe, "tuning file: none; shipped table: %d entries\n", shipped_n);
        return FJ_OK;
    }
    int err;
    char *text = read_file(ctx->tuning_file, &err);
    if (!text) {
        if (err == ENOMEM) return fj_fail(FJ_ERR_OUT_OF_MEMORY, "out of memory reading %s", ctx->tuning_file);
        fj_strbuf_printf(describe, "tuning file: %s (%s); shipped table: %d entries\n",
                         ctx->tuning_file, err == ENOENT ? "not present" : strerror(err), shipped_n);
        return FJ_OK;
    }
    fj_strbuf notes;
    fj_strbuf_init(&notes);
    fj_status s = fj_tuning_parse(text, ctx->tuning_file, &ctx->tuning, &notes);
    free(text);
    if (s == FJ_OK) {
        fj_strbuf_printf(describe, "tuning file: %s (%d entries); shipped table: %d entries\n",
                         ctx->tuning_file, fj_tuning_count(ctx->tuning), shipped_n);
        if (notes.len) fj_strbuf_printf(describe, "tuning file problems:\n%s", notes.data);
    }
    fj_strbuf_free(&notes);
    return s;
}

fj_status fj_tuning_append(const char *path, const fj_tuning_entry *e)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) return fj_fail(FJ_ERR_IO, "cannot open tuning file %s: %s", path, strerror(errno));
    struct stat st;
    char line[400];
    int n = 0;
    if (fstat(fd, &st) == 0 && st.st_size == 0)
        n = snprintf(line, sizeof line,
                     "# flashjit tuning file (docs/tuning.md); written by flashjit tune\n"
                     "flashjit-tuning %d\n"
                     "# device arch template head_dim dtype mask bucket config ms date\n",
                     FJ_TUNING_FORMAT_VERSION);
    n += snprintf(line + n, sizeof line - (size_t)n, "%s %s %s %d %s %s %d %s %.6g %s\n", e->device,
                  e->arch, e->template_name, e->head_dim, e->dtype, e->mask, e->bucket, e->config,
                  e->ms, e->date);
    fj_status s = FJ_OK;
    if (write(fd, line, (size_t)n) != n || fsync(fd) != 0)
        s = fj_fail(FJ_ERR_IO, "cannot write tuning file %s: %s", path, strerror(errno));
    close(fd);
    return s;
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
}
