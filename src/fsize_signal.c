/* SIGXFSZ held off around writes (fsize_signal.h says why). Per thread: the
 * signal the kernel raises for a write past RLIMIT_FSIZE is sent to the
 * writing thread, so blocking it there and taking it with sigtimedwait
 * leaves every other thread's mask and the process's handlers untouched. */
#include "fsize_signal.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

void fj_fsize_guard_begin(fj_fsize_guard *g)
{
    memset(g, 0, sizeof *g);
    sigset_t block, pending;
    sigemptyset(&block);
    sigaddset(&block, SIGXFSZ);
    if (pthread_sigmask(SIG_BLOCK, &block, &g->old_mask) != 0) return;
    g->active = true;
    g->was_pending = sigpending(&pending) == 0 && sigismember(&pending, SIGXFSZ) == 1;
}

void fj_fsize_guard_end(fj_fsize_guard *g)
{
    if (!g->active) return;
    int saved = errno; /* the caller reports the write's errno after this */
    sigset_t pending;
    if (!g->was_pending && sigpending(&pending) == 0 && sigismember(&pending, SIGXFSZ) == 1) {
        sigset_t only;
        sigemptyset(&only);
        sigaddset(&only, SIGXFSZ);
        const struct timespec now = {0, 0};
        while (sigtimedwait(&only, NULL, &now) < 0 && errno == EINTR) {
        }
    }
    pthread_sigmask(SIG_SETMASK, &g->old_mask, NULL);
    g->active = false;
    errno = saved;
}
