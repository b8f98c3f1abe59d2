/* Grids of problems: the files of tools/grids/ (built into the CLI), one
 * problem key per line, read by `flashjit bench --grid` and `flashjit tune
 * --grid` (and by tools/compare_torch.py from the same files). */
#ifndef FJ_CLI_GRID_H
#define FJ_CLI_GRID_H

#include "flashjit.h"

typedef struct cli_grid {
    fj_attention_desc *rows; /* in file order, '@name' lines expanded in place */
    int count;
} cli_grid;

/* The rows of grid `name`: tools/grids/<name>.txt, or a file when name
 * contains a '/'. 0, or 2 with a message naming flag printed (an unknown
 * name lists the known ones; a bad line is named by file and number). */
int cli_grid_load(const char *cmd, const char *flag, const char *name, cli_grid *g);
void cli_grid_free(cli_grid *g);

/* The built-in grids' names, "anchors, cpu, ...", for help texts. */
const char *cli_grid_names(void);

#endif
