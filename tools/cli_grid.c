/* Grids: tools/grids/<name>.txt, embedded at build time, or a file given by
 * path. Each line is a problem key (fj_problem_key_parse, so a grid holds no
 * second spelling of a problem), a comment, or '@name' taking another
 * grid's rows. */
#include "cli_grid.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "embedded.h"

/* Every tools/grids/ file, embedded by tools/meson.build. */
extern const fj_embedded_file cli_grids[];

/* '@' nesting deeper than this is a cycle. */
#define MAX_DEPTH 8

static const fj_embedded_file *builtin(const char *name)
{
    char file[128];
    snprintf(file, sizeof file, "%s.txt", name);
    for (const fj_embedded_file *f = cli_grids; f->name; f++)
        if (!strcmp(f->name, file)) return f;
    return NULL;
}

const char *cli_grid_names(void)
{
    static char names[512];
    if (names[0]) return names;
    size_t len = 0;
    for (const fj_embedded_file *f = cli_grids; f->name && len < sizeof names; f++)
        len += (size_t)snprintf(names + len, sizeof names - len, "%s%.*s", len ? ", " : "",
                                (int)(strlen(f->name) - 4), f->name);
    return names;
}

static int push(cli_grid *g, const fj_attention_desc *d)
{
    fj_attention_desc *n = realloc(g->rows, (size_t)(g->count + 1) * sizeof *n);
    if (!n) return -1;
    g->rows = n;
    g->rows[g->count++] = *d;
    return 0;
}

static char *read_text(const char *path, int *err)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        *err = errno;
        return NULL;
    }
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (!got) break;
        if (n + 1 == cap) {
            char *b = cap > (1u << 24) ? NULL : realloc(buf, cap * 2);
            if (!b) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = b;
            cap *= 2;
        }
    }
    *err = !buf ? ENOMEM : ferror(f) ? EIO : 0;
    fclose(f);
    if (buf && *err) {
        free(buf);
        buf = NULL;
    }
    if (buf) buf[n] = '\0';
    return buf;
}

static int load(const char *cmd, const char *flag, const char *name, cli_grid *g, int depth);

/* The rows of one grid's text (its file name `origin`, for messages). */
static int parse(const char *cmd, const char *flag, const char *origin, const char *text,
                 cli_grid *g, int depth)
{
    int lineno = 0;
    for (const char *p = text; *p;) {
        size_t len = strcspn(p, "\n");
        char line[256];
        lineno++;
        size_t m = len < sizeof line - 1 ? len : sizeof line - 1;
        memcpy(line, p, m);
        line[m] = '\0';
        p += len + (p[len] == '\n');
        char *s = line + strspn(line, " \t");
        s[strcspn(s, "#")] = '\0';
        size_t n = strlen(s);
        while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r')) s[--n] = '\0';
        if (!*s) continue;
        if (strpbrk(s, " \t"))
            return cli_usage_error(cmd, "%s: %s:%d: one problem key per line, not '%s'", flag,
                                   origin, lineno, s);
        if (*s == '@') {
            int rc = load(cmd, flag, s + 1, g, depth + 1);
            if (rc) return rc;
            continue;
        }
        fj_attention_desc d;
        if (fj_problem_key_parse(s, &d))
            return cli_usage_error(cmd, "%s: %s:%d: %s", flag, origin, lineno, fj_last_error());
        if (push(g, &d)) return cli_usage_error(cmd, "%s: %s: out of memory", flag, origin);
    }
    return 0;
}

static int load(const char *cmd, const char *flag, const char *name, cli_grid *g, int depth)
{
    if (depth > MAX_DEPTH)
        return cli_usage_error(cmd,
                               "%s: '@%s' nests more than %d deep (a grid that takes its own "
                               "rows?)",
                               flag, name, MAX_DEPTH);
    if (strchr(name, '/')) {
        int err;
        char *text = read_text(name, &err);
        if (!text)
            return cli_usage_error(cmd, "%s %s: cannot read it: %s", flag, name, strerror(err));
        int rc = parse(cmd, flag, name, text, g, depth);
        free(text);
        return rc;
    }
    const fj_embedded_file *f = builtin(name);
    if (!f)
        return cli_usage_error(cmd, "%s: '%s' is not a grid (%s; or a file path with a '/')", flag,
                               name, cli_grid_names());
    char origin[160];
    snprintf(origin, sizeof origin, "tools/grids/%s", f->name);
    return parse(cmd, flag, origin, f->text, g, depth);
}

int cli_grid_load(const char *cmd, const char *flag, const char *name, cli_grid *g)
{
    memset(g, 0, sizeof *g);
    int rc = load(cmd, flag, name, g, 0);
    if (!rc && !g->count) rc = cli_usage_error(cmd, "%s: grid '%s' has no rows", flag, name);
    if (rc) cli_grid_free(g);
    return rc;
}

void cli_grid_free(cli_grid *g)
{
    free(g->rows);
    memset(g, 0, sizeof *g);
}
