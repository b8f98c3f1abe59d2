/* Where the disk cache and the tuning file live, resolved once per context. */
#ifndef FJ_PATHS_H
#define FJ_PATHS_H

#include "flashjit.h"

/* Resolves the cache directory from the option (NULL: default chain; "": off),
 * FLASHJIT_CACHE_DIR, $XDG_CACHE_HOME/flashjit, ~/.cache/flashjit, creates it
 * (mode 0700, parents too) and checks it is writable. *dir is the malloc'd
 * path, or NULL when the disk cache is off, in which case *note (malloc'd)
 * says why. Only allocation failure is an error. */
fj_status fj_cache_dir_resolve(const char *option, char **dir, char **note);

/* The tuning file: option (""=none), FLASHJIT_TUNING_FILE, else
 * <cache dir>/tuning.txt when there is a cache dir. *path NULL: none. */
fj_status fj_tuning_path_resolve(const char *option, const char *cache_dir, char **path);

/* mkdir -p with the given mode; 0 or -1 with errno. */
int fj_mkdir_p(const char *path, unsigned mode);

#endif
