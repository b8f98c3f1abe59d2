/* A grouped bar chart as a self-contained SVG document (no scripts, fonts or
 * links to fetch), written by our own code so `flashjit bench --plot` needs
 * no plotting library. Bars are <rect class="bar">, one per group and series
 * with a value; the legend names each series in a <text class="legend">. */
#ifndef FJ_SVG_PLOT_H
#define FJ_SVG_PLOT_H

typedef struct svg_bar_chart {
    const char *title;                /* first line at the top */
    const char *subtitle;             /* second line (date, device); NULL: none */
    const char *y_label;              /* "TFLOP/s" */
    int groups, series;               /* >= 0 each */
    const char *const *group_labels;  /* [groups], under the x axis */
    const char *const *series_labels; /* [series], the legend */
    const double *values;             /* [groups * series], group-major; NaN, inf or < 0: no bar */
    int log_scale;                    /* a log10 y axis, ticks at powers of ten (0 and below:
                                         no bar), so values decades apart all show */
} svg_bar_chart;

/* The document as a malloc'd string (free() it); NULL when out of memory.
 * Text is XML-escaped; group labels are rotated when they are wider than
 * their group, and the margins grow to fit them. */
char *svg_bar_chart_render(const svg_bar_chart *c);

/* 0 when a file can be created next to path (a temporary one is made and
 * removed again) and path is not a directory; else the errno value. Lets a
 * caller fail before a long benchmark rather than after it. */
int svg_plot_check_path(const char *path);

/* Writes text to path atomically: a temporary file in the same directory,
 * fsync'd, then renamed over path, so path is either absent, as before, or
 * complete. The file gets the mode a plain fopen would (0666 less the
 * umask). 0, or the errno value (nothing is left behind). */
int svg_plot_write_file(const char *path, const char *text);

#endif
