/* The disk cache of compiled kernels. Contract (see the top of cache.c):
 * key = hash of (generated source, NVRTC options, NVRTC version, arch, cache
 * format version); file = header (magic, format version, key, payload size,
 * checksum) + payload; written to a temporary file in the same directory,
 * fsync'd, then renamed; a file with a bad header, size or checksum is a miss
 * (the caller recompiles and stores again, replacing it). */
#ifndef FJ_CACHE_H
#define FJ_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "flashjit.h"

#define FJ_CACHE_KEY_BYTES 16

typedef struct fj_cache_key {
    uint8_t bytes[FJ_CACHE_KEY_BYTES];
} fj_cache_key;

/* The key of a compile: every input that changes the binary goes in. */
fj_cache_key fj_cache_key_make(const char *source, size_t source_len, const char *options,
                               int nvrtc_major, int nvrtc_minor, const char *arch);

/* 32 hex digits + NUL. */
void fj_cache_key_hex(const fj_cache_key *k, char out[2 * FJ_CACHE_KEY_BYTES + 1]);

/* Reads the entry for (name, key) from dir. FJ_OK with *data (malloc'd) and
 * *size on a hit; FJ_OK with *data NULL on a miss, including any damaged
 * file (the reason goes to the debug log). Only allocation failure is an
 * error. */
fj_status fj_cache_load(const char *dir, const char *name, const fj_cache_key *key, void **data,
                        size_t *size);

/* Writes the entry atomically (temp file, fsync, rename, fsync of the
 * directory). FJ_ERR_IO with the path and errno text on failure; the
 * caller keeps going without the disk cache. */
fj_status fj_cache_store(const char *dir, const char *name, const fj_cache_key *key,
                         const void *data, size_t size);

/* ---- for `flashjit cache` (same functions the runtime relies on) -------- */

typedef struct fj_cache_entry_info {
    char file[512];   /* file name within the directory */
    char name[256];   /* kernel name from the file name */
    size_t file_size; /* bytes on disk */
    int valid;        /* 1: header, size and checksum check out */
    char problem[128];/* why not valid ("" when valid) */
} fj_cache_entry_info;

typedef int (*fj_cache_visit_fn)(const fj_cache_entry_info *e, void *user); /* nonzero stops */

/* Calls fn for every cache file in dir (ours by name pattern), checking each
 * file's header and checksum. FJ_ERR_IO if dir cannot be read. */
fj_status fj_cache_scan(const char *dir, fj_cache_visit_fn fn, void *user);

/* Removes every cache file (and stale temporary files) from dir; *removed
 * counts them. */
fj_status fj_cache_clear(const char *dir, int *removed);

#endif
