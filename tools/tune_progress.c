/* flashjit tune's progress on stderr, with the time left estimated from the
 * time per unit so far: on a terminal one line, rewritten as work finishes;
 * otherwise (a pipe, a log file) a plain line at each milestone, since a log
 * keeps every carriage-return redraw. Shared by flashjit bench. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "tune.h"

void tune_format_seconds(double s, char *buf, size_t n)
{
    if (s < 0) s = 0;
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, n, "%ldh%02ldm", t / 3600, t / 60 % 60);
    else if (t >= 60) snprintf(buf, n, "%ldm%02lds", t / 60, t % 60);
    else snprintf(buf, n, "%lds", t);
}

void tune_progress_begin(tune_progress *p, const char *phase, long total, double work_total)
{
    bool was_drawn = p->drawn;
    memset(p, 0, sizeof *p);
    p->drawn = was_drawn;
    snprintf(p->command, sizeof p->command, "tune");
    p->tty = isatty(STDERR_FILENO) == 1;
    p->start = cli_now();
    p->total = total;
    p->work_total = work_total > 0 ? work_total : (double)total;
    snprintf(p->phase, sizeof p->phase, "%s", phase);
}

void tune_progress_command(tune_progress *p, const char *command)
{
    snprintf(p->command, sizeof p->command, "%s", command);
}

void tune_progress_clear(tune_progress *p)
{
    if (!p->tty || !p->drawn) return;
    fputs("\r\033[K", stderr);
    fflush(stderr);
    p->drawn = false;
}

static void format_line(const tune_progress *p, const char *what, char *line, size_t n)
{
    char left[32] = "?";
    double elapsed = cli_now() - p->start;
    if (p->work_done > 0)
        tune_format_seconds(elapsed / p->work_done * (p->work_total - p->work_done), left,
                            sizeof left);
    snprintf(line, n, "%s %ld/%ld, ~%s left%s%s", p->phase, p->done, p->total, left,
             what ? ": " : "", what ? what : "");
}

static void redraw(tune_progress *p, const char *what)
{
    /* Under 80 columns so it never wraps: a wrapped line cannot be rewritten
       with a carriage return. */
    char line[80];
    format_line(p, what, line, sizeof line);
    fprintf(stderr, "\r\033[K%s", line);
    fflush(stderr);
    p->drawn = true;
}

void tune_progress_step(tune_progress *p, double work, const char *what)
{
    p->done++;
    p->work_done += work > 0 ? work : 1.0;
    if (p->tty) redraw(p, what);
}

void tune_progress_milestone(tune_progress *p, const char *what)
{
    if (p->tty) {
        redraw(p, what);
        return;
    }
    char line[256];
    format_line(p, what, line, sizeof line);
    fprintf(stderr, "flashjit %s: %s\n", p->command, line);
    fflush(stderr);
}
