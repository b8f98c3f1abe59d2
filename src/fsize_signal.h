/* Writes under a file-size limit (RLIMIT_FSIZE, `ulimit -f`): a write that
 * crosses it fails with EFBIG, but the kernel also sends the writing thread
 * SIGXFSZ, whose default action kills the process. The cache and the tuning
 * file hold SIGXFSZ blocked around their writes, so such a write fails like a
 * full disk (FJ_ERR_IO, the caller goes on) instead. */
#ifndef FJ_FSIZE_SIGNAL_H
#define FJ_FSIZE_SIGNAL_H

#include <signal.h>
#include <stdbool.h>

typedef struct fj_fsize_guard {
    sigset_t old_mask; /* the thread's mask before, restored after */
    bool was_pending;  /* SIGXFSZ already pending before: not ours to take */
    bool active;       /* the mask was changed */
} fj_fsize_guard;

/* Blocks SIGXFSZ in the calling thread. */
void fj_fsize_guard_begin(fj_fsize_guard *g);

/* Takes the SIGXFSZ the guarded writes raised, if any (the write itself
 * reported EFBIG), and restores the thread's signal mask. */
void fj_fsize_guard_end(fj_fsize_guard *g);

#endif
