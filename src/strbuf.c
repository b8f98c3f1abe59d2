#include "strbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void fj_strbuf_init(fj_strbuf *b) { memset(b, 0, sizeof *b); }

void fj_strbuf_free(fj_strbuf *b)
{
    free(b->data);
    fj_strbuf_init(b);
}

static bool reserve(fj_strbuf *b, size_t extra)
{
    if (b->failed) return false;
    if (b->len + extra + 1 <= b->cap) return true;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra + 1) {
        if (cap > ((size_t)-1) / 2) {
            b->failed = true;
            return false;
        }
        cap *= 2;
    }
    char *d = realloc(b->data, cap);
    if (!d) {
        b->failed = true;
        return false;
    }
    b->data = d;
    b->cap = cap;
    return true;
}

void fj_strbuf_append(fj_strbuf *b, const char *s, size_t n)
{
    if (!reserve(b, n)) return;
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}

void fj_strbuf_puts(fj_strbuf *b, const char *s) { fj_strbuf_append(b, s, strlen(s)); }

void fj_strbuf_printf(fj_strbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || !reserve(b, (size_t)n)) {
        b->failed = true;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

char *fj_strbuf_take(fj_strbuf *b)
{
    if (b->failed) {
        fj_strbuf_free(b);
        return NULL;
    }
    char *d = b->data ? b->data : calloc(1, 1);
    fj_strbuf_init(b);
    return d;
}
