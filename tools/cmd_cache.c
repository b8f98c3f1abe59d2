/* flashjit cache list|stats|verify|clear: the kernel cache seen through the
 * library's own functions (src/cache.c) in the directory the library itself
 * would use (src/paths.c), so the tool reports exactly what the runtime sees.
 * Exit status: 0 ok, 1 an error or (verify) a damaged entry, 2 usage. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/jit/cache.h"
#include "cli.h"
#include "paths.h"

#define CMD "cache"

typedef struct cache_subcommand {
    const char *name;
    const char *summary;
    const char *details;
    int (*run)(const char *dir);
} cache_subcommand;

static const char dir_help[] =
    "  --dir DIR   the cache directory; default: the library's own choice,\n"
    "              FLASHJIT_CACHE_DIR, else $XDG_CACHE_HOME/flashjit, else\n"
    "              ~/.cache/flashjit (created if missing, as the library does)\n"
    "  --help      this text\n";

/* ---- list --------------------------------------------------------------- */

static int list_visit(const fj_cache_entry_info *e, void *user)
{
    int *count = user;
    const char *state = e->valid ? "valid" : e->temp ? "temp" : "DAMAGED";
    if (e->valid) printf("%-7s %10zu  %s\n", state, e->file_size, e->file);
    else printf("%-7s %10zu  %s  (%s)\n", state, e->file_size, e->file, e->problem);
    (*count)++;
    return 0;
}

static int run_list(const char *dir)
{
    int count = 0;
    fj_status s = fj_cache_scan(dir, list_visit, &count);
    if (s != FJ_OK) return cli_fail(CMD " list", s);
    if (count == 0) printf("no cache files in %s\n", dir);
    return 0;
}

/* ---- stats -------------------------------------------------------------- */

typedef struct cache_totals {
    int entries, valid, damaged, temps;
    uint64_t entry_bytes, temp_bytes;
} cache_totals;

static int totals_visit(const fj_cache_entry_info *e, void *user)
{
    cache_totals *t = user;
    if (e->temp) {
        t->temps++;
        t->temp_bytes += e->file_size;
        return 0;
    }
    t->entries++;
    t->entry_bytes += e->file_size;
    if (e->valid) t->valid++;
    else t->damaged++;
    return 0;
}

static int run_stats(const char *dir)
{
    cache_totals t = {0};
    fj_status s = fj_cache_scan(dir, totals_visit, &t);
    if (s != FJ_OK) return cli_fail(CMD " stats", s);
    printf("directory: %s\n", dir);
    printf("entries: %d (%d valid, %d damaged)\n", t.entries, t.valid, t.damaged);
    printf("bytes: %llu\n", (unsigned long long)t.entry_bytes);
    printf("temporary files: %d (%llu bytes)\n", t.temps, (unsigned long long)t.temp_bytes);
    return 0;
}

/* ---- verify ------------------------------------------------------------- */

static int verify_visit(const fj_cache_entry_info *e, void *user)
{
    cache_totals *t = user;
    totals_visit(e, t);
    if (e->temp)
        printf("note: %s is a temporary file (a store in progress or an interrupted one; "
               "never read as an entry)\n",
               e->file);
    else if (!e->valid) printf("damaged: %s: %s\n", e->file, e->problem);
    return 0;
}

static int run_verify(const char *dir)
{
    cache_totals t = {0};
    fj_status s = fj_cache_scan(dir, verify_visit, &t);
    if (s != FJ_OK) return cli_fail(CMD " verify", s);
    if (t.damaged == 0) {
        printf("%d entries in %s: all valid\n", t.entries, dir);
        return 0;
    }
    printf("%d of %d entries in %s damaged (each is recompiled and replaced on next use; "
           "'flashjit cache clear' removes them)\n",
           t.damaged, t.entries, dir);
    return 1;
}

/* ---- clear -------------------------------------------------------------- */

/* What clear left: directories with files in them under cache names. */
static int kept_visit(const fj_cache_entry_info *e, void *user)
{
    (void)user;
    printf("kept %s: %s\n", e->file, e->problem);
    return 0;
}

static int run_clear(const char *dir)
{
    int removed = 0;
    fj_status s = fj_cache_clear(dir, &removed);
    printf("removed %d files from %s\n", removed, dir);
    if (s != FJ_OK) return cli_fail(CMD " clear", s);
    s = fj_cache_scan(dir, kept_visit, NULL);
    return s == FJ_OK ? 0 : cli_fail(CMD " clear", s);
}

/* ---- dispatch ----------------------------------------------------------- */

static const cache_subcommand subcommands[] = {
    {"list", "one line per cache file: state, bytes, file name (and why, when not valid)",
     "States: valid; DAMAGED (with the reason: it is a miss, and the next use\n"
     "recompiles and replaces it); temp (a store in progress or an interrupted one).\n",
     run_list},
    {"stats", "number of entries, total bytes, directory",
     "Prints the directory, the entries (valid and damaged), their bytes on disk,\n"
     "and the temporary files.\n",
     run_stats},
    {"verify", "check every entry's header and checksum; exit 1 if any is damaged",
     "Names every damaged entry and why. Exit status 0 when all are valid, 1 when\n"
     "any is damaged or the directory cannot be read.\n",
     run_verify},
    {"clear", "remove every cache file and leftover temporary file",
     "Removes the *.fjk files (valid or damaged) and the temporary files, and says\n"
     "how many; other files in the directory (tuning.txt) are kept. A directory\n"
     "under a cache name is removed when empty, else kept and named.\n",
     run_clear},
};
#define NSUBCOMMANDS (sizeof subcommands / sizeof subcommands[0])

static void usage(FILE *f)
{
    fprintf(f, "usage: flashjit cache <subcommand> [--dir DIR]   (flashjit cache <subcommand> "
               "--help)\n\n"
               "subcommands:\n");
    for (size_t i = 0; i < NSUBCOMMANDS; i++)
        fprintf(f, "  %-8s %s\n", subcommands[i].name, subcommands[i].summary);
    fprintf(f, "\noptions:\n%s\nexit status: 0 ok, 1 error or damaged entry (verify), 2 usage\n",
            dir_help);
}

static void subcommand_help(const cache_subcommand *c)
{
    printf("usage: flashjit cache %s [--dir DIR]\n\n%s: %s.\n%s\noptions:\n%s", c->name, c->name,
           c->summary, c->details, dir_help);
}

int cmd_cache(int argc, char **argv)
{
    const cache_subcommand *sub = NULL;
    const char *dir_option = NULL;
    int help = 0;
    static const cli_option own[] = {{"dir", required_argument, 1}, {NULL, 0, 0}};
    const cli_option *const tables[] = {own, NULL};
    cli_options p;
    cli_options_begin(&p, CMD, argc, argv, tables);
    const char *val;
    for (int c; (c = cli_next_option(&p, &val)) != -1;) {
        if (c == CLI_OPTION_ERROR) return 2;
        if (c == CLI_OPTION_HELP) {
            help = 1;
        } else {
            if (!val) return cli_usage_error(CMD, "--dir needs a value");
            dir_option = val;
        }
    }
    for (int i = optind; i < argc; i++) {
        const char *a = argv[i];
        if (sub)
            return cli_usage_error(CMD, "unexpected argument '%s' (see flashjit cache --help)", a);
        for (size_t k = 0; k < NSUBCOMMANDS; k++)
            if (!strcmp(a, subcommands[k].name)) sub = &subcommands[k];
        if (!sub)
            return cli_usage_error(CMD,
                                   "unknown subcommand '%s': one of list, stats, verify, clear", a);
    }
    if (help) {
        if (sub) subcommand_help(sub);
        else usage(stdout);
        return 0;
    }
    if (!sub) {
        usage(stderr);
        return 2;
    }

    /* The library's own resolution, so `--dir` means what cache_dir means
       in fj_context_options and no option means what the runtime would use. */
    char *dir = NULL, *note = NULL;
    fj_status s = fj_cache_dir_resolve(dir_option, &dir, &note);
    if (s != FJ_OK) return cli_fail(CMD, s);
    if (!dir) {
        fprintf(stderr, "flashjit cache %s: the disk cache is %s\n", sub->name,
                note ? note : "off");
        free(note);
        return 1;
    }
    int rc = sub->run(dir);
    free(dir);
    free(note);
    return rc;
}
