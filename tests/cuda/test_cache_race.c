/* The disk cache under a real race: 8 processes compile the same kernels
 * with the real NVRTC (no GPU) into one empty cache directory at once, each
 * in its own order; then the directory is verified as `flashjit cache
 * verify` does (fj_cache_scan): exactly one valid entry per kernel and no
 * temporary file, and every process got the same image for each kernel as
 * the entry holds, and as a ninth build finds in the cache. Without a
 * loadable NVRTC it says SKIPPED and why and exits 77 (meson's SKIP). */
#include <dirent.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cuda/cuda_api.h"
#include "cuda/jit/cache.h"
#include "cuda/jit/kernel_build.h"
#include "cuda/jit/kernel_desc.h"
#include "problem.h"

#define PROCESSES 8

/* Small kernels of two templates' paths: a decode tile and a prefill tile
 * with a mask, for sm_80 (quick to compile). */
static const struct {
    int head_dim, seqlen_q;
    fj_dtype dtype;
    fj_causal causal;
} kernels[] = {
    {64, 1, FJ_F16, FJ_CAUSAL_NONE},
    {64, 256, FJ_BF16, FJ_CAUSAL_BOTTOM_RIGHT},
};
#define KERNELS ((int)(sizeof kernels / sizeof kernels[0]))

typedef struct report {
    int status[KERNELS];
    int from_cache[KERNELS];
    uint64_t hash[KERNELS];
    size_t size[KERNELS];
} report;

static uint64_t fnv1a(const void *data, size_t n)
{
    const uint8_t *p = data;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

static bool kernel_desc(int i, fj_kernel_desc *k)
{
    fj_attention_desc d;
    fj_attention_desc_init(&d, 1, 4, 4, kernels[i].seqlen_q, 512, kernels[i].head_dim,
                           kernels[i].dtype);
    d.causal = kernels[i].causal;
    fj_problem p;
    return fj_problem_init(&p, &d) == FJ_OK && fj_kernel_desc_for_problem(&p, 80, k) == FJ_OK;
}

/* Builds every kernel (in an order of its own) into dir. */
static report build_all(const char *dir, int who)
{
    report r;
    memset(&r, 0, sizeof r);
    for (int n = 0; n < KERNELS; n++) {
        int i = (n + who) % KERNELS;
        fj_kernel_desc k;
        fj_kernel_image img;
        r.status[i] = kernel_desc(i, &k) ? (int)fj_kernel_build(&k, dir, &img) : -1;
        if (r.status[i] != FJ_OK) {
            fprintf(stderr, "process %d, kernel %d: %s\n", who, i, fj_last_error());
            continue;
        }
        r.from_cache[i] = img.from_cache;
        r.hash[i] = fnv1a(img.data, img.size);
        r.size[i] = img.size;
        fj_kernel_image_free(&img);
    }
    return r;
}

typedef struct tally {
    int entries, valid, temps;
} tally;

static int count(const fj_cache_entry_info *e, void *user)
{
    tally *t = user;
    if (e->temp) t->temps++;
    else t->entries++;
    t->valid += e->valid;
    if (!e->valid) fprintf(stderr, "%s: %s\n", e->file, e->problem);
    return 0;
}

static int files_in(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    if (!d) return -1;
    for (struct dirent *e; (e = readdir(d));)
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return n;
}

int main(void)
{
    const fj_cuda_api *api;
    if (fj_cuda_nvrtc(&api) != FJ_OK) {
        printf("SKIPPED: NVRTC is not loadable: %s\n", fj_last_error());
        return 77;
    }
    const char *tmp = getenv("TMPDIR");
    char dir[256];
    snprintf(dir, sizeof dir, "%s/fjt-cache-race-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    int fds[2];
    if (pipe(fds) != 0) return 1;
    fflush(stdout);
    pid_t pids[PROCESSES];
    for (int c = 0; c < PROCESSES; c++) {
        pids[c] = fork();
        if (pids[c] < 0) return 1;
        if (pids[c] == 0) {
            close(fds[0]);
            report r = build_all(dir, c);
            /* smaller than PIPE_BUF: one atomic write */
            _exit(write(fds[1], &r, sizeof r) == (ssize_t)sizeof r ? 0 : 3);
        }
    }
    close(fds[1]);
    int failures = 0;
    for (int c = 0; c < PROCESSES; c++) {
        int st;
        if (waitpid(pids[c], &st, 0) != pids[c] || !WIFEXITED(st) || WEXITSTATUS(st)) {
            fprintf(stderr, "process %d did not exit cleanly (status %d)\n", c, st);
            failures++;
        }
    }
    report all[PROCESSES];
    int got = 0, compiled = 0;
    while (got < PROCESSES && read(fds[0], &all[got], sizeof all[0]) == (ssize_t)sizeof all[0])
        got++;
    close(fds[0]);
    if (got != PROCESSES) {
        fprintf(stderr, "%d of %d reports\n", got, PROCESSES);
        failures++;
    }

    /* the ninth build: every kernel from the cache */
    report again = build_all(dir, 0);
    for (int i = 0; i < KERNELS; i++) {
        if (again.status[i] != FJ_OK || !again.from_cache[i]) {
            fprintf(stderr, "kernel %d: not a cache hit after the race\n", i);
            failures++;
        }
        for (int c = 0; c < got; c++) {
            compiled += !all[c].from_cache[i];
            if (all[c].status[i] != FJ_OK || all[c].hash[i] != again.hash[i] ||
                all[c].size[i] != again.size[i]) {
                fprintf(stderr,
                        "kernel %d: process %d got status %d, %zu bytes, hash %016llx; "
                        "the cache holds %zu bytes, hash %016llx\n",
                        i, c, all[c].status[i], all[c].size[i], (unsigned long long)all[c].hash[i],
                        again.size[i], (unsigned long long)again.hash[i]);
                failures++;
            }
        }
    }

    tally t = {0};
    if (fj_cache_scan(dir, count, &t) != FJ_OK) {
        fprintf(stderr, "scan: %s\n", fj_last_error());
        failures++;
    }
    int files = files_in(dir);
    printf("%d processes x %d kernels into one empty directory: %d compiles, %d cache hits; "
           "then %d entries (%d valid), %d temporary files, %d files in all\n",
           PROCESSES, KERNELS, compiled, got * KERNELS - compiled, t.entries, t.valid, t.temps,
           files);
    if (t.entries != KERNELS || t.valid != KERNELS || t.temps != 0 || files != KERNELS) failures++;
    int removed;
    fj_cache_clear(dir, &removed);
    rmdir(dir);
    printf("%s\n", failures ? "FAILED" : "PASSED");
    return failures ? 1 : 0;
}
