/* Grouped bar charts as SVG (svg_plot.h), and writing them atomically. */
#include "svg_plot.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "strbuf.h"

/* Layout in SVG user units (pixels at 100%). Text widths are estimated from
 * the character count: without a font there is no way to measure, and an
 * average advance of 0.6 em errs on the wide side for sans-serif. */
enum {
    FONT_PX = 11,
    TITLE_PX = 15,
    BAR_W = 14,
    BAR_GAP = 1,    /* between the bars of one group */
    GROUP_GAP = 14, /* between groups */
    PLOT_H = 300,
    TOP = 58,      /* title and subtitle above the plot */
    MIN_LEFT = 48, /* the y label and a short tick label */
    LEGEND_SWATCH = 11,
    LEGEND_ROW = 18,
    PAD = 10,
};
#define CHAR_W (0.6 * FONT_PX)
#define LABEL_ANGLE_DEG 45.0
#define SIN_ANGLE 0.70710678 /* sin and cos of LABEL_ANGLE_DEG */

/* A colour-blind-friendly qualitative palette (Tableau 10); it repeats
 * after ten series, which a bench run (at most four backends) never reaches. */
static const char *const palette[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                                      "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};

typedef struct layout {
    double left, plot_w, group_w, bars_w, label_h, legend_x, width, height;
    double y_max, y_step; /* axis top and tick spacing, in the values' unit */
    int ticks;
    int log_lo; /* log scale: the axis starts at 10^log_lo, a tick per decade */
    int log_scale;
    int rotate; /* group labels at LABEL_ANGLE_DEG */
} layout;

/* XML text and attribute values: the five special characters as entities;
 * control characters (not allowed in XML 1.0) as '?'. */
static void put_escaped(fj_strbuf *b, const char *s)
{
    for (; s && *s; s++) {
        switch (*s) {
        case '&': fj_strbuf_puts(b, "&amp;"); break;
        case '<': fj_strbuf_puts(b, "&lt;"); break;
        case '>': fj_strbuf_puts(b, "&gt;"); break;
        case '"': fj_strbuf_puts(b, "&quot;"); break;
        case '\'': fj_strbuf_puts(b, "&apos;"); break;
        default:
            if ((unsigned char)*s < 0x20 && *s != '\t' && *s != '\n') fj_strbuf_puts(b, "?");
            else fj_strbuf_append(b, s, 1);
        }
    }
}

static double text_width(const char *s) { return s ? (double)strlen(s) * CHAR_W : 0; }

static int has_bar(double v) { return isfinite(v) && v >= 0; }

/* A bar on the chart's axis: a log axis has no place for zero. */
static int shows(const layout *L, double v) { return has_bar(v) && (!L->log_scale || v > 0); }

static double value_at(const svg_bar_chart *c, int g, int s)
{
    return c->values[g * c->series + s];
}

/* Tick spacing 1, 2 or 5 times a power of ten giving about five ticks, and
 * the axis top as the first tick at or above the largest value. */
static void y_axis(const svg_bar_chart *c, layout *L)
{
    if (c->log_scale) {
        /* whole decades around the smallest and largest positive values */
        double lo = INFINITY, hi = 0;
        for (int i = 0; i < c->groups * c->series; i++) {
            double v = c->values[i];
            if (!has_bar(v) || !(v > 0)) continue;
            if (v < lo) lo = v;
            if (v > hi) hi = v;
        }
        if (!(hi > 0)) lo = hi = 1;
        L->log_scale = 1;
        L->log_lo = (int)floor(log10(lo));
        int top = (int)ceil(log10(hi) - 1e-9);
        L->ticks = top > L->log_lo ? top - L->log_lo : 1;
        L->y_max = pow(10, L->log_lo + L->ticks);
        return;
    }
    double max = 0;
    for (int i = 0; i < c->groups * c->series; i++)
        if (has_bar(c->values[i]) && c->values[i] > max) max = c->values[i];
    if (!(max > 0)) max = 1; /* nothing measured (or all zero): still draw an axis */
    double raw = max / 5, mag = pow(10, floor(log10(raw))), norm = raw / mag;
    L->y_step = (norm <= 1 ? 1 : norm <= 2 ? 2 : norm <= 5 ? 5 : 10) * mag;
    L->ticks = (int)ceil(max / L->y_step - 1e-9);
    if (L->ticks < 1) L->ticks = 1;
    L->y_max = L->ticks * L->y_step;
}

static double tick_value(const layout *L, int t)
{
    return L->log_scale ? pow(10, L->log_lo + t) : t * L->y_step;
}

/* The widest tick label: the left margin must hold it beside the y label. */
static double widest_tick(const layout *L)
{
    double widest = 0;
    for (int t = 0; t <= L->ticks; t++) {
        char buf[32];
        snprintf(buf, sizeof buf, "%g", tick_value(L, t));
        if (text_width(buf) > widest) widest = text_width(buf);
    }
    return widest;
}

static void compute_layout(const svg_bar_chart *c, layout *L)
{
    memset(L, 0, sizeof *L);
    y_axis(c, L);
    int n = c->series > 0 ? c->series : 1;
    L->bars_w = n * BAR_W + (n - 1) * BAR_GAP;
    L->group_w = L->bars_w + GROUP_GAP;
    L->plot_w = (c->groups > 0 ? c->groups : 1) * L->group_w;

    double widest = 0, first = c->groups > 0 ? text_width(c->group_labels[0]) : 0;
    for (int g = 0; g < c->groups; g++)
        if (text_width(c->group_labels[g]) > widest) widest = text_width(c->group_labels[g]);
    L->rotate = widest > L->group_w - 2;
    /* A rotated label ends at its group's centre and reaches down and left;
       only the first one can cross the left edge. */
    double reach_left = L->rotate ? first * SIN_ANGLE : first / 2;
    L->left = PAD + 2 * FONT_PX + widest_tick(L) + 6;
    if (L->left < MIN_LEFT) L->left = MIN_LEFT;
    if (reach_left + PAD > L->left + L->group_w / 2) L->left = reach_left + PAD - L->group_w / 2;
    L->label_h = (L->rotate ? widest * SIN_ANGLE + FONT_PX : FONT_PX) + 2 * PAD;

    double legend_w = 0;
    for (int s = 0; s < c->series; s++)
        if (text_width(c->series_labels[s]) > legend_w) legend_w = text_width(c->series_labels[s]);
    legend_w += LEGEND_SWATCH + 6 + PAD;
    L->legend_x = L->left + L->plot_w + 2 * PAD;
    L->width = L->legend_x + legend_w + PAD;
    double title_w = text_width(c->title) * TITLE_PX / FONT_PX + 2 * PAD;
    if (text_width(c->subtitle) + 2 * PAD > title_w) title_w = text_width(c->subtitle) + 2 * PAD;
    if (title_w > L->width) L->width = title_w;
    double legend_h = c->series * LEGEND_ROW;
    L->height = TOP + (PLOT_H > legend_h ? PLOT_H : legend_h) + L->label_h;
}

static double y_of(const layout *L, double v)
{
    double f = L->log_scale ? (log10(v) - L->log_lo) / L->ticks : v / L->y_max;
    return TOP + PLOT_H - f * PLOT_H;
}

static void put_header(fj_strbuf *b, const svg_bar_chart *c, const layout *L)
{
    fj_strbuf_printf(b,
                     "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
                     "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\" font-size=\"%d\">\n",
                     L->width, L->height, L->width, L->height, FONT_PX);
    fj_strbuf_puts(b, "<title>");
    put_escaped(b, c->title);
    fj_strbuf_puts(b, "</title>\n<rect class=\"background\" width=\"100%\" height=\"100%\" "
                      "fill=\"white\"/>\n");
    fj_strbuf_printf(b,
                     "<text class=\"title\" x=\"%d\" y=\"22\" font-size=\"%d\" "
                     "font-weight=\"bold\">",
                     PAD, TITLE_PX);
    put_escaped(b, c->title);
    fj_strbuf_puts(b, "</text>\n");
    if (c->subtitle) {
        fj_strbuf_printf(b, "<text class=\"subtitle\" x=\"%d\" y=\"40\" fill=\"#555\">", PAD);
        put_escaped(b, c->subtitle);
        fj_strbuf_puts(b, "</text>\n");
    }
}

/* Grid lines, tick labels, the axis lines and the y label. */
static void put_axes(fj_strbuf *b, const svg_bar_chart *c, const layout *L)
{
    double right = L->left + L->plot_w;
    for (int t = 0; t <= L->ticks; t++) {
        double v = tick_value(L, t), y = y_of(L, v);
        fj_strbuf_printf(b,
                         "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
                         "stroke=\"#ddd\"/>\n",
                         L->left, y, right, y);
        fj_strbuf_printf(b,
                         "<text class=\"tick\" x=\"%.1f\" y=\"%.1f\" "
                         "text-anchor=\"end\">%g</text>\n",
                         L->left - 6, y + FONT_PX / 3.0, v);
    }
    fj_strbuf_printf(b, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#333\"/>\n",
                     L->left, TOP, L->left, TOP + PLOT_H);
    fj_strbuf_printf(b, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#333\"/>\n",
                     L->left, TOP + PLOT_H, right, TOP + PLOT_H);
    double ly = TOP + PLOT_H / 2.0;
    fj_strbuf_printf(b,
                     "<text class=\"y-label\" x=\"%d\" y=\"%.1f\" text-anchor=\"middle\" "
                     "transform=\"rotate(-90 %d %.1f)\">",
                     PAD + FONT_PX, ly, PAD + FONT_PX, ly);
    put_escaped(b, c->y_label);
    fj_strbuf_puts(b, "</text>\n");
}

static void put_group(fj_strbuf *b, const svg_bar_chart *c, const layout *L, int g)
{
    double x0 = L->left + g * L->group_w + GROUP_GAP / 2.0;
    for (int s = 0; s < c->series; s++) {
        double v = value_at(c, g, s);
        if (!shows(L, v)) continue; /* not measured (or 0 on a log axis): a gap */
        double x = x0 + s * (BAR_W + BAR_GAP), y = y_of(L, v > L->y_max ? L->y_max : v);
        fj_strbuf_printf(b,
                         "<rect class=\"bar\" x=\"%.1f\" y=\"%.1f\" width=\"%d\" height=\"%.1f\" "
                         "fill=\"%s\">"
                         "<title>",
                         x, y, BAR_W, TOP + PLOT_H - y, palette[s % 10]);
        put_escaped(b, c->group_labels[g]);
        fj_strbuf_puts(b, ", ");
        put_escaped(b, c->series_labels[s]);
        fj_strbuf_printf(b, ": %.4g ", v);
        put_escaped(b, c->y_label);
        fj_strbuf_puts(b, "</title></rect>\n");
    }
    double cx = x0 + L->bars_w / 2, ty = TOP + PLOT_H + PAD + FONT_PX;
    if (L->rotate)
        fj_strbuf_printf(b,
                         "<text class=\"group-label\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" "
                         "transform=\"rotate(-%g %.1f %.1f)\">",
                         cx, ty, LABEL_ANGLE_DEG, cx, ty);
    else
        fj_strbuf_printf(
            b, "<text class=\"group-label\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">", cx, ty);
    put_escaped(b, c->group_labels[g]);
    fj_strbuf_puts(b, "</text>\n");
}

static void put_legend(fj_strbuf *b, const svg_bar_chart *c, const layout *L)
{
    for (int s = 0; s < c->series; s++) {
        double y = TOP + s * LEGEND_ROW;
        fj_strbuf_printf(b,
                         "<rect class=\"swatch\" x=\"%.1f\" y=\"%.1f\" width=\"%d\" height=\"%d\" "
                         "fill=\"%s\"/>\n",
                         L->legend_x, y, LEGEND_SWATCH, LEGEND_SWATCH, palette[s % 10]);
        fj_strbuf_printf(b, "<text class=\"legend\" x=\"%.1f\" y=\"%.1f\">",
                         L->legend_x + LEGEND_SWATCH + 6, y + LEGEND_SWATCH - 1);
        put_escaped(b, c->series_labels[s]);
        fj_strbuf_puts(b, "</text>\n");
    }
}

char *svg_bar_chart_render(const svg_bar_chart *c)
{
    layout L;
    compute_layout(c, &L);
    fj_strbuf b;
    fj_strbuf_init(&b);
    put_header(&b, c, &L);
    put_axes(&b, c, &L);
    for (int g = 0; g < c->groups; g++) put_group(&b, c, &L, g);
    put_legend(&b, c, &L);
    fj_strbuf_puts(&b, "</svg>\n");
    char *text = fj_strbuf_take(&b);
    fj_strbuf_free(&b);
    return text;
}

/* ---- files -------------------------------------------------------------- */

/* "<path>.tmp-XXXXXX": beside path, because rename is atomic only within
 * one file system. */
static int temp_name(const char *path, char *buf, size_t n)
{
    int len = snprintf(buf, n, "%s.tmp-XXXXXX", path);
    return len < 0 || (size_t)len >= n ? ENAMETOOLONG : 0;
}

int svg_plot_check_path(const char *path)
{
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) return EISDIR;
    char tmp[4096];
    int err = temp_name(path, tmp, sizeof tmp);
    if (err) return err;
    int fd = mkstemp(tmp);
    if (fd < 0) return errno;
    close(fd);
    unlink(tmp);
    return 0;
}

static int write_all(int fd, const char *text, size_t len)
{
    while (len) {
        ssize_t n = write(fd, text, len);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return errno;
        text += n;
        len -= (size_t)n;
    }
    return 0;
}

int svg_plot_write_file(const char *path, const char *text)
{
    char tmp[4096];
    int err = temp_name(path, tmp, sizeof tmp);
    if (err) return err;
    int fd = mkstemp(tmp);
    if (fd < 0) return errno;
    /* mkstemp makes the file 0600; a plot is for sharing, like any file the
       user would create. The CLI is the only thread that creates files, so
       reading the umask by setting it is safe here. */
    mode_t mask = umask(0);
    umask(mask);
    if (fchmod(fd, 0666 & ~mask) != 0) err = errno;
    if (!err) err = write_all(fd, text, strlen(text));
    if (!err && fsync(fd) != 0) err = errno;
    if (close(fd) != 0 && !err) err = errno;
    if (!err && rename(tmp, path) != 0) err = errno;
    if (err) unlink(tmp);
    return err;
}
