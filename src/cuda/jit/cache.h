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

/* Bumped whenever the file layout changes; it is also hashed into every key.
 * Every format version starts with the magic "FJKC" and this number as a
 * little-endian uint32, so files of any version can be told apart. */
#define FJ_CACHE_FORMAT_VERSION 1

/* Kernel names used in file names: 1..FJ_CACHE_NAME_MAX characters from
 * [A-Za-z0-9._-], the first a letter or digit, so a name can never make a
 * path leave the directory, hide the file or look like a temporary file. */
#define FJ_CACHE_NAME_MAX 200

/* File names are "<kernel name>.<32 hex key>.fjk"; temporary files of a
 * store in progress (or one that was interrupted) start with this prefix. */
#define FJ_CACHE_TEMP_PREFIX ".fjk-tmp-"

typedef struct fj_cache_key {
    uint8_t bytes[FJ_CACHE_KEY_BYTES];
} fj_cache_key;

/* The key of a compile: every input that changes the binary goes in, each
 * framed by its length so no two different input lists hash alike by
 * concatenation. options: the NVRTC options joined into one string (NULL is
 * the same as ""); arch: the target, e.g. "sm_90" or "compute_90". */
fj_cache_key fj_cache_key_make(const char *source, size_t source_len, const char *options,
                               int nvrtc_major, int nvrtc_minor, const char *arch);

/* 32 hex digits + NUL. */
void fj_cache_key_hex(const fj_cache_key *k, char out[2 * FJ_CACHE_KEY_BYTES + 1]);

/* 1 when name is usable in a cache file name (see FJ_CACHE_NAME_MAX). */
int fj_cache_name_valid(const char *name);

/* Reads the entry for (name, key) from dir. FJ_OK with *data (malloc'd, one
 * NUL byte after the payload that *size does not count, so PTX is a C
 * string) and *size on a hit; FJ_OK with *data NULL on a miss, including any
 * damaged or unreadable file (the reason goes to the debug log). Errors:
 * FJ_ERR_OUT_OF_MEMORY; FJ_ERR_INVALID_ARGUMENT for a name that
 * fj_cache_name_valid rejects (a caller bug: nothing is read). */
fj_status fj_cache_load(const char *dir, const char *name, const fj_cache_key *key, void **data,
                        size_t *size);

/* Writes the entry atomically (temp file, fsync, rename, fsync of the
 * directory). FJ_ERR_IO with the path and errno text on failure (the temp
 * file is removed); the caller keeps going without the disk cache.
 * FJ_ERR_INVALID_ARGUMENT for a name that fj_cache_name_valid rejects.
 * Concurrent stores of one entry are safe: each rename is atomic, so a
 * reader sees the old complete file or the new one, never a mix. */
fj_status fj_cache_store(const char *dir, const char *name, const fj_cache_key *key,
                         const void *data, size_t size);

/* ---- for `flashjit cache` (same functions the runtime relies on) -------- */

typedef struct fj_cache_entry_info {
    char file[512];    /* file name within the directory */
    char name[256];    /* kernel name from the file name */
    size_t file_size;  /* bytes on disk */
    int valid;         /* 1: header, size and checksum check out */
    int temp;          /* 1: a temporary file (FJ_CACHE_TEMP_PREFIX), not an
                         entry: a store in progress or an interrupted one;
                         valid is 0 and it is never read */
    char problem[128]; /* why not valid ("" when valid) */
} fj_cache_entry_info;

typedef int (*fj_cache_visit_fn)(const fj_cache_entry_info *e, void *user); /* nonzero stops */

/* Calls fn for every cache file in dir (ours by name: "*.fjk", and the
 * temporary files), in file-name order, checking each entry exactly as
 * fj_cache_load does. Other files (tuning.txt) are not visited. A file
 * removed while the scan runs is skipped. FJ_ERR_IO if dir cannot be read,
 * FJ_ERR_OUT_OF_MEMORY. */
fj_status fj_cache_scan(const char *dir, fj_cache_visit_fn fn, void *user);

/* Removes every cache file ("*.fjk", damaged or not) and every temporary
 * file from dir, nothing else; *removed counts what was removed. A directory
 * under such a name is removed when empty; one with files in it is kept
 * (not an error; fj_cache_scan lists it). A store running at the same time
 * loses its temporary file and fails with FJ_ERR_IO, which its caller
 * ignores. FJ_ERR_IO naming the first file that could not be removed (the
 * others are still tried). */
fj_status fj_cache_clear(const char *dir, int *removed);

#endif
