/* A growable text buffer for describe strings and generated source. Allocation
 * failure is sticky: later appends do nothing and fj_strbuf_failed() says so,
 * so callers check once at the end. */
#ifndef FJ_STRBUF_H
#define FJ_STRBUF_H

#include <stdbool.h>
#include <stddef.h>

#include "status.h"

typedef struct fj_strbuf {
    char *data; /* NUL-terminated when non-NULL */
    size_t len, cap;
    bool failed;
} fj_strbuf;

void fj_strbuf_init(fj_strbuf *b);
void fj_strbuf_free(fj_strbuf *b);
void fj_strbuf_append(fj_strbuf *b, const char *s, size_t n);
void fj_strbuf_puts(fj_strbuf *b, const char *s);
void fj_strbuf_printf(fj_strbuf *b, const char *fmt, ...) FJ_PRINTF(2, 3);
/* Hands the text to the caller (free() it); "" when empty; NULL when an append
 * failed. The buffer is left empty. */
char *fj_strbuf_take(fj_strbuf *b);
static inline bool fj_strbuf_failed(const fj_strbuf *b) { return b->failed; }

#endif
