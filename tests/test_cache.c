/* The disk cache (src/cache.c): round trips, every kind of damage is a miss
 * that a store repairs, unusable directories, temporary files, and many
 * processes storing and loading the same entries at once. No GPU needed:
 * payloads are random bytes standing in for cubins. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "cuda/jit/cache.h"
#include "harness.h"
#include "paths.h"

#define NAME "flash_fwd.d128.bf16.causal.m128n64w4s2.sm_90"

/* ---- scaffolding -------------------------------------------------------- */

/* Linked with --wrap=malloc (and friends): the fail_at-th allocation made by
 * the code under test fails, so every allocation failure path runs. */
void *__real_malloc(size_t n);
void *__real_realloc(void *p, size_t n);
static long fail_at = -1, allocations;

static bool should_fail(void) { return fail_at >= 0 && allocations++ == fail_at; }
void *__wrap_malloc(size_t n);
void *__wrap_realloc(void *p, size_t n);
void *__wrap_malloc(size_t n) { return should_fail() ? NULL : __real_malloc(n); }
void *__wrap_realloc(void *p, size_t n) { return should_fail() ? NULL : __real_realloc(p, n); }

/* The last debug line from the library: the reason a load missed. Tests are
 * single-threaded while they look at it (forked children have their own). */
static char last_log[2048];

static void capture_log(fj_log_level level, const char *message, void *user)
{
    (void)level;
    (void)user;
    snprintf(last_log, sizeof last_log, "%s", message);
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static char *make_temp_dir(void)
{
    const char *base = getenv("TMPDIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/flashjit-test-cache-XXXXXX", base && *base ? base : "/tmp");
    char *dir = mkdtemp(path);
    assert_non_null(dir);
    char *copy = strdup(dir);
    assert_non_null(copy);
    return copy;
}

static void remove_temp_dir(char *dir)
{
    chmod(dir, 0700);
    assert_int_equal(nftw(dir, remove_one, 16, FTW_DEPTH | FTW_PHYS), 0);
    free(dir);
}

static int setup(void **state)
{
    *state = make_temp_dir();
    last_log[0] = '\0';
    fj_set_log_callback(capture_log, FJ_LOG_DEBUG, NULL);
    return 0;
}

static int teardown(void **state)
{
    fj_set_log_callback(NULL, FJ_LOG_OFF, NULL);
    remove_temp_dir(*state);
    return 0;
}

static fj_cache_key key_of(const char *text)
{
    return fj_cache_key_make(text, strlen(text), "--gpu-architecture=sm_90 -O3", 13, 0, "sm_90");
}

static char *entry_path(const char *dir, const char *name, const fj_cache_key *key)
{
    char hex[2 * FJ_CACHE_KEY_BYTES + 1];
    fj_cache_key_hex(key, hex);
    char *p = malloc(strlen(dir) + strlen(name) + 64);
    assert_non_null(p);
    sprintf(p, "%s/%s.%s.fjk", dir, name, hex);
    return p;
}

static uint8_t *random_bytes(fjt_rng *rng, size_t n)
{
    uint8_t *b = malloc(n ? n : 1);
    assert_non_null(b);
    for (size_t i = 0; i < n; i++) b[i] = (uint8_t)fjt_next(rng);
    return b;
}

static uint8_t *read_file(const char *path, size_t *n)
{
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    struct stat st;
    assert_int_equal(fstat(fd, &st), 0);
    *n = (size_t)st.st_size;
    uint8_t *b = malloc(*n ? *n : 1);
    assert_non_null(b);
    assert_int_equal(read(fd, b, *n), (ssize_t)*n);
    close(fd);
    return b;
}

static void write_file(const char *path, const void *data, size_t n)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, data, n), (ssize_t)n);
    assert_int_equal(close(fd), 0);
}

/* Loads (name, key) and asserts a hit with exactly want. */
static void expect_hit(const char *dir, const char *name, const fj_cache_key *key, const void *want,
                       size_t want_size)
{
    void *data = NULL;
    size_t size = 0;
    assert_int_equal(fj_cache_load(dir, name, key, &data, &size), FJ_OK);
    if (!data) fail_msg("expected a hit for %s, got a miss: %s", name, last_log);
    assert_int_equal(size, want_size);
    if (want_size) assert_memory_equal(data, want, want_size);
    assert_int_equal(((const char *)data)[size], '\0');
    free(data);
}

/* Loads (name, key) and asserts a miss whose logged reason contains why. */
static void expect_miss(const char *dir, const char *name, const fj_cache_key *key, const char *why)
{
    void *data = (void *)1;
    size_t size = 1;
    last_log[0] = '\0';
    assert_int_equal(fj_cache_load(dir, name, key, &data, &size), FJ_OK);
    if (data) fail_msg("expected a miss (%s), got a hit of %zu bytes", why, size);
    assert_int_equal(size, 0);
    if (!strstr(last_log, why))
        fail_msg("miss logged as '%s', expected it to say '%s'", last_log, why);
}

static int count_dir_entries(const char *dir);
typedef struct scan_result scan_result;
/* What fj_cache_scan visited (record_visit). */
struct scan_result {
    int count, valid, damaged, temps;
    char files[32][512];
    int valid_of[32], temp_of[32];
    char problem[32][128];
    int stop_after; /* 0: never stop */
};
static int record_visit(const fj_cache_entry_info *e, void *user);

/* ---- keys --------------------------------------------------------------- */

static void test_key_changes_with_every_input(void **state)
{
    (void)state;
    const char *src = "extern \"C\" __global__ void fj_flash_fwd() {}";
    size_t n = strlen(src);
    fj_cache_key base = fj_cache_key_make(src, n, "-O3", 13, 0, "sm_90");
    fj_cache_key again = fj_cache_key_make(src, n, "-O3", 13, 0, "sm_90");
    assert_memory_equal(base.bytes, again.bytes, FJ_CACHE_KEY_BYTES);

    char changed_src[128];
    memcpy(changed_src, src, n + 1);
    changed_src[n / 2] ^= 1;
    fj_cache_key variants[] = {
        fj_cache_key_make(changed_src, n, "-O3", 13, 0, "sm_90"), /* one bit of source */
        fj_cache_key_make(src, n - 1, "-O3", 13, 0, "sm_90"),     /* source length */
        fj_cache_key_make(src, n, "-O2", 13, 0, "sm_90"),         /* options */
        fj_cache_key_make(src, n, "", 13, 0, "sm_90"),            /* no options */
        fj_cache_key_make(src, n, "-O3", 12, 0, "sm_90"),         /* NVRTC major */
        fj_cache_key_make(src, n, "-O3", 13, 1, "sm_90"),         /* NVRTC minor */
        fj_cache_key_make(src, n, "-O3", 13, 0, "sm_80"),         /* arch */
        fj_cache_key_make(src, n, "-O3", 13, 0, "compute_90"),    /* cubin vs PTX */
        /* framing: the same bytes split differently between fields */
        fj_cache_key_make(src, n, "-O3s", 13, 0, "m_90"),
        fj_cache_key_make("ab", 2, "c", 13, 0, "sm_90"),
        fj_cache_key_make("a", 1, "bc", 13, 0, "sm_90"),
    };
    size_t nv = sizeof variants / sizeof variants[0];
    for (size_t i = 0; i < nv; i++) {
        if (!memcmp(variants[i].bytes, base.bytes, FJ_CACHE_KEY_BYTES))
            fail_msg("variant %zu has the base key", i);
        for (size_t j = 0; j < i; j++)
            if (!memcmp(variants[i].bytes, variants[j].bytes, FJ_CACHE_KEY_BYTES))
                fail_msg("variants %zu and %zu share a key", i, j);
    }
    /* NULL options mean none, as the header says. */
    fj_cache_key null_opts = fj_cache_key_make(src, n, NULL, 13, 0, "sm_90");
    assert_memory_equal(null_opts.bytes, variants[3].bytes, FJ_CACHE_KEY_BYTES);

    /* Both 64-bit halves react to a one-bit change (neither lane is idle). */
    assert_memory_not_equal(variants[0].bytes, base.bytes, 8);
    assert_memory_not_equal(variants[0].bytes + 8, base.bytes + 8, 8);

    char hex[2 * FJ_CACHE_KEY_BYTES + 1];
    fj_cache_key_hex(&base, hex);
    assert_int_equal(strlen(hex), 32);
    assert_int_equal(strspn(hex, "0123456789abcdef"), 32);
}

/* ---- round trip ----------------------------------------------------------- */

static void test_round_trip(void **state)
{
    const char *dir = *state;
    fjt_rng rng;
    fjt_rng_init(&rng, fjt_seed());
    /* sizes around the hash's 8-byte words and the scan's 16 KiB chunks */
    static const size_t sizes[] = {0, 1, 7, 8, 9, 1000, 16384, 16385, 300000};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        char text[32];
        snprintf(text, sizeof text, "source %zu", i);
        fj_cache_key key = key_of(text);
        uint8_t *payload = random_bytes(&rng, sizes[i]);
        expect_miss(dir, NAME, &key, "no entry");
        assert_int_equal(fj_cache_store(dir, NAME, &key, payload, sizes[i]), FJ_OK);
        expect_hit(dir, NAME, &key, payload, sizes[i]);
        /* same key under another name, another key under this name: misses */
        expect_miss(dir, "flash_fwd.d64.f16.nomask.m64n64w4s2.sm_80", &key, "no entry");
        fj_cache_key other = key_of("another source");
        expect_miss(dir, NAME, &other, "no entry");
        free(payload);
    }
    /* Storing again replaces the entry. */
    fj_cache_key key = key_of("replace");
    uint8_t *first = random_bytes(&rng, 5000), *second = random_bytes(&rng, 3000);
    assert_int_equal(fj_cache_store(dir, NAME, &key, first, 5000), FJ_OK);
    assert_int_equal(fj_cache_store(dir, NAME, &key, second, 3000), FJ_OK);
    expect_hit(dir, NAME, &key, second, 3000);
    free(first);
    free(second);
}

static void test_invalid_names_are_refused(void **state)
{
    const char *dir = *state;
    fj_cache_key key = key_of("x");
    char long_name[FJ_CACHE_NAME_MAX + 2];
    memset(long_name, 'a', sizeof long_name);
    long_name[FJ_CACHE_NAME_MAX + 1] = '\0';
    const char *bad[] = {"",    "../escape", "a/b",        ".hidden",     "-option",
                         "a b", "tab\tname", ".fjk-tmp-x", "caf\xc3\xa9", long_name};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_false(fj_cache_name_valid(bad[i]));
        assert_int_equal(fj_cache_store(dir, bad[i], &key, "x", 1), FJ_ERR_INVALID_ARGUMENT);
        assert_non_null(strstr(fj_last_error(), "kernel name"));
        void *data = NULL;
        size_t size = 0;
        assert_int_equal(fj_cache_load(dir, bad[i], &key, &data, &size), FJ_ERR_INVALID_ARGUMENT);
        assert_null(data);
    }
    long_name[FJ_CACHE_NAME_MAX] = '\0'; /* exactly the limit is fine */
    assert_true(fj_cache_name_valid(long_name));
    assert_int_equal(fj_cache_store(dir, long_name, &key, "x", 1), FJ_OK);
    expect_hit(dir, long_name, &key, "x", 1);
}

/* ---- damage is a miss, and a store repairs it ---------------------------- */

typedef struct stored_entry {
    fj_cache_key key;
    char *path;
    uint8_t *payload, *file;
    size_t payload_size, file_size;
} stored_entry;

static stored_entry store_entry(const char *dir, const char *text, size_t payload_size)
{
    fjt_rng rng;
    fjt_rng_init(&rng, fjt_seed() ^ strlen(text));
    stored_entry e;
    e.key = key_of(text);
    e.path = entry_path(dir, NAME, &e.key);
    e.payload = random_bytes(&rng, payload_size);
    e.payload_size = payload_size;
    assert_int_equal(fj_cache_store(dir, NAME, &e.key, e.payload, payload_size), FJ_OK);
    e.file = read_file(e.path, &e.file_size);
    assert_true(e.file_size > payload_size);
    return e;
}

static void stored_entry_free(stored_entry *e)
{
    free(e->path);
    free(e->payload);
    free(e->file);
}

/* After a miss on a damaged file, storing again gives a hit. */
static void expect_repaired(const char *dir, stored_entry *e)
{
    assert_int_equal(fj_cache_store(dir, NAME, &e->key, e->payload, e->payload_size), FJ_OK);
    expect_hit(dir, NAME, &e->key, e->payload, e->payload_size);
    size_t n;
    uint8_t *now = read_file(e->path, &n);
    assert_int_equal(n, e->file_size);
    assert_memory_equal(now, e->file, n);
    free(now);
}

static void test_every_flipped_bit_is_a_miss(void **state)
{
    const char *dir = *state;
    stored_entry e = store_entry(dir, "bit flips", 100);
    uint8_t *copy = malloc(e.file_size);
    assert_non_null(copy);
    /* Every bit of the file: magic, version, key, sizes, checksums, the
       padding, the name and the payload. */
    for (size_t byte = 0; byte < e.file_size; byte++) {
        for (int bit = 0; bit < 8; bit++) {
            memcpy(copy, e.file, e.file_size);
            copy[byte] ^= (uint8_t)(1u << bit);
            write_file(e.path, copy, e.file_size);
            void *data = NULL;
            size_t size = 0;
            last_log[0] = '\0';
            assert_int_equal(fj_cache_load(dir, NAME, &e.key, &data, &size), FJ_OK);
            if (data)
                fail_msg("flipping bit %d of byte %zu of %zu went unnoticed", bit, byte,
                         e.file_size);
            if (!strstr(last_log, "damaged"))
                fail_msg("byte %zu bit %d: logged '%s'", byte, bit, last_log);
        }
    }
    free(copy);
    /* The unflipped file is still a hit: the misses above were the flips. */
    write_file(e.path, e.file, e.file_size);
    expect_hit(dir, NAME, &e.key, e.payload, e.payload_size);
    /* and a flip in a large payload, past the first chunk, then a repair */
    stored_entry big = store_entry(dir, "big payload", 200000);
    big.file[big.file_size - 70000] ^= 0x10;
    write_file(big.path, big.file, big.file_size);
    big.file[big.file_size - 70000] ^= 0x10;
    expect_miss(dir, NAME, &big.key, "payload checksum mismatch");
    expect_repaired(dir, &big);
    stored_entry_free(&big);
    stored_entry_free(&e);
}

static void test_truncated_and_extended_files_are_misses(void **state)
{
    const char *dir = *state;
    stored_entry e = store_entry(dir, "truncation", 4000);
    size_t header = e.file_size - e.payload_size;
    size_t lengths[] = {0, 1, 4, 8, 55, 56, header - 1, header, header + 1, e.file_size - 1};
    const char *reasons[] = {"shorter than the 56-byte header",
                             "shorter than the 56-byte header",
                             "shorter than the 56-byte header",
                             "shorter than the 56-byte header",
                             "shorter than the 56-byte header",
                             "shorter than its",
                             "shorter than its",
                             "payload bytes",
                             "payload bytes",
                             "payload bytes"};
    for (size_t i = 0; i < sizeof lengths / sizeof lengths[0]; i++) {
        write_file(e.path, e.file, lengths[i]);
        expect_miss(dir, NAME, &e.key, reasons[i]);
        expect_repaired(dir, &e);
    }
    /* one byte too many */
    uint8_t *longer = malloc(e.file_size + 1);
    assert_non_null(longer);
    memcpy(longer, e.file, e.file_size);
    longer[e.file_size] = 0;
    write_file(e.path, longer, e.file_size + 1);
    expect_miss(dir, NAME, &e.key, "payload bytes");
    expect_repaired(dir, &e);
    free(longer);
    stored_entry_free(&e);
}

static void test_wrong_magic_and_version_are_misses(void **state)
{
    const char *dir = *state;
    stored_entry e = store_entry(dir, "magic and version", 500);
    uint8_t *copy = malloc(e.file_size);
    assert_non_null(copy);

    memcpy(copy, e.file, e.file_size);
    memcpy(copy,
           "\x7f"
           "ELF",
           4);
    write_file(e.path, copy, e.file_size);
    expect_miss(dir, NAME, &e.key, "wrong magic");
    expect_repaired(dir, &e);

    /* The version sits right after the magic in every format version. */
    static const uint32_t versions[] = {0, FJ_CACHE_FORMAT_VERSION + 1, 0xffffffffu};
    for (size_t i = 0; i < 3; i++) {
        memcpy(copy, e.file, e.file_size);
        for (int b = 0; b < 4; b++) copy[4 + b] = (uint8_t)(versions[i] >> (8 * b));
        write_file(e.path, copy, e.file_size);
        expect_miss(dir, NAME, &e.key, "format version");
        expect_repaired(dir, &e);
    }
    free(copy);
    stored_entry_free(&e);
}

static void test_foreign_files_are_misses(void **state)
{
    const char *dir = *state;
    fjt_rng rng;
    fjt_rng_init(&rng, fjt_seed() + 1);
    stored_entry e = store_entry(dir, "foreign", 2000);

    uint8_t *noise = random_bytes(&rng, 5000);
    write_file(e.path, noise, 5000);
    expect_miss(dir, NAME, &e.key, "damaged");
    expect_repaired(dir, &e);

    /* magic, version, key, sizes and name length right, the rest noise:
       only the header checksum can tell */
    memcpy(noise, e.file, 44);
    write_file(e.path, noise, 5000);
    expect_miss(dir, NAME, &e.key, "header checksum mismatch");
    expect_repaired(dir, &e);
    free(noise);

    /* text, e.g. a user's note saved under that name */
    const char *text = "this is not a kernel\n";
    write_file(e.path, text, strlen(text));
    expect_miss(dir, NAME, &e.key, "shorter than the 56-byte header");
    expect_repaired(dir, &e);

    /* a directory under the entry's name: a miss, and the store replaces
       it (issue 23, finding 5: it used to fail, so that kernel recompiled on
       every run) */
    assert_int_equal(unlink(e.path), 0);
    assert_int_equal(mkdir(e.path, 0700), 0);
    expect_miss(dir, NAME, &e.key, "not a regular file");
    expect_repaired(dir, &e);
    assert_int_equal(count_dir_entries(dir), 1);
    /* one with files in it is moved aside (to a temporary name, its files
       kept) rather than deleted */
    assert_int_equal(unlink(e.path), 0);
    assert_int_equal(mkdir(e.path, 0700), 0);
    char inside[4096];
    snprintf(inside, sizeof inside, "%s/someone's file", e.path);
    write_file(inside, "keep me", 7);
    expect_miss(dir, NAME, &e.key, "not a regular file");
    expect_repaired(dir, &e);
    assert_int_equal(count_dir_entries(dir), 2);
    scan_result r = {0};
    assert_int_equal(fj_cache_scan(dir, record_visit, &r), FJ_OK);
    assert_int_equal(r.count, 2);
    assert_int_equal(r.valid, 1);
    assert_int_equal(r.temps, 1);
    char moved[4096];
    for (int i = 0; i < r.count; i++)
        if (r.temp_of[i]) snprintf(moved, sizeof moved, "%s/%s/someone's file", dir, r.files[i]);
    size_t n;
    uint8_t *kept = read_file(moved, &n);
    assert_int_equal(n, 7);
    assert_memory_equal(kept, "keep me", 7);
    free(kept);
    /* clear removes the entry and leaves the directory (not the cache's own
       files), without failing */
    int removed = -1;
    assert_int_equal(fj_cache_clear(dir, &removed), FJ_OK);
    assert_int_equal(removed, 1);
    assert_int_equal(count_dir_entries(dir), 1);
    assert_int_equal(access(moved, F_OK), 0);
    /* an empty directory at a cache name is removed by clear */
    assert_int_equal(mkdir(e.path, 0700), 0);
    assert_int_equal(fj_cache_clear(dir, &removed), FJ_OK);
    assert_int_equal(removed, 1);
    assert_int_equal(access(e.path, F_OK), -1);

    /* a FIFO must not hang the load */
    assert_int_equal(mkfifo(e.path, 0600), 0);
    expect_miss(dir, NAME, &e.key, "not a regular file");
    expect_repaired(dir, &e);
    stored_entry_free(&e);
}

static void test_key_and_name_mismatch_are_misses(void **state)
{
    const char *dir = *state;
    stored_entry a = store_entry(dir, "entry a", 700);
    fj_cache_key b = key_of("entry b");
    char *b_path = entry_path(dir, NAME, &b);
    /* a valid file of another key, renamed into b's place */
    assert_int_equal(rename(a.path, b_path), 0);
    expect_miss(dir, NAME, &b, "the key in the header is not the one in the file name");
    assert_int_equal(fj_cache_store(dir, NAME, &b, "b", 1), FJ_OK);
    expect_hit(dir, NAME, &b, "b", 1);

    /* a valid file of another kernel name with the same key */
    const char *other = "flash_fwd.d64.f16.nomask.m64n64w4s2.sm_80";
    assert_int_equal(fj_cache_store(dir, other, &a.key, a.payload, a.payload_size), FJ_OK);
    char *other_path = entry_path(dir, other, &a.key);
    assert_int_equal(rename(other_path, a.path), 0);
    expect_miss(dir, NAME, &a.key, "the kernel name in the header is");
    expect_repaired(dir, &a);
    free(other_path);
    free(b_path);
    stored_entry_free(&a);
}

/* ---- unusable directories ----------------------------------------------- */

static int count_dir_entries(const char *dir)
{
    int n = 0;
    DIR *d = opendir(dir);
    assert_non_null(d);
    for (struct dirent *e; (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    closedir(d);
    return n;
}

static void expect_store_io_error(const char *dir, const char *why)
{
    fj_cache_key key = key_of("unwritable");
    assert_int_equal(fj_cache_store(dir, NAME, &key, "payload", 7), FJ_ERR_IO);
    const char *msg = fj_last_error();
    if (!strstr(msg, dir) || !strstr(msg, why))
        fail_msg("store error '%s' should name %s and say '%s'", msg, dir, why);
    expect_miss(dir, NAME, &key, "");
    /* the library turns the disk cache off for such a directory */
    char *resolved = NULL, *note = NULL;
    assert_int_equal(fj_cache_dir_resolve(dir, &resolved, &note), FJ_OK);
    assert_null(resolved);
    assert_non_null(note);
    assert_non_null(strstr(note, "off"));
    free(note);
}

static void test_unwritable_directory(void **state)
{
    const char *dir = *state;
    /* A directory whose parent is a regular file: no write can succeed,
       whoever runs the test. */
    char file[4096], under_file[4200];
    snprintf(file, sizeof file, "%s/regular-file", dir);
    write_file(file, "x", 1);
    snprintf(under_file, sizeof under_file, "%s/cache", file);
    expect_store_io_error(under_file, strerror(ENOTDIR));

    /* chmod 0500 stops writes unless the test runs with the permission
       override (root, CAP_DAC_OVERRIDE): find out by trying. */
    char ro[4096];
    snprintf(ro, sizeof ro, "%s/read-only", dir);
    assert_int_equal(mkdir(ro, 0700), 0);
    assert_int_equal(chmod(ro, 0500), 0);
    char probe[4200];
    snprintf(probe, sizeof probe, "%s/probe", ro);
    int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL, 0600);
    if (fd >= 0) {
        close(fd);
        unlink(probe);
        printf("# read-only directory test: chmod 0500 does not stop writes here (uid %d has the "
               "permission override), so only the method 'directory whose parent is a regular "
               "file' was used\n",
               (int)geteuid());
    } else {
        printf("# read-only directory test: methods 'chmod 0500' and 'directory whose parent is "
               "a regular file' both used (uid %d)\n",
               (int)geteuid());
        expect_store_io_error(ro, strerror(EACCES));
        assert_int_equal(count_dir_entries(ro), 0); /* no temp file left behind */
    }
    assert_int_equal(chmod(ro, 0700), 0);
}

/* ---- temporary files, scan, clear ---------------------------------------- */

static int record_visit(const fj_cache_entry_info *e, void *user)
{
    scan_result *r = user;
    if (r->count < 32) {
        snprintf(r->files[r->count], sizeof r->files[0], "%s", e->file);
        snprintf(r->problem[r->count], sizeof r->problem[0], "%s", e->problem);
        r->valid_of[r->count] = e->valid;
        r->temp_of[r->count] = e->temp;
    }
    r->count++;
    if (e->temp) r->temps++;
    else if (e->valid) r->valid++;
    else r->damaged++;
    if (e->valid && e->problem[0]) fail_msg("%s is valid with a problem '%s'", e->file, e->problem);
    if (!e->valid && !e->problem[0]) fail_msg("%s is not valid and says no why", e->file);
    return r->stop_after && r->count >= r->stop_after;
}

static void test_temp_files_are_not_entries_and_clear_removes_them(void **state)
{
    const char *dir = *state;
    stored_entry a = store_entry(dir, "temp a", 1500);
    stored_entry b = store_entry(dir, "temp b", 2500);
    /* What a crash leaves: one complete temp (a valid entry's bytes, so only
       its name keeps it from being read), one torn. */
    char t1[4096], t2[4096], tuning[4096];
    snprintf(t1, sizeof t1, "%s/" FJ_CACHE_TEMP_PREFIX "a1B2c3", dir);
    snprintf(t2, sizeof t2, "%s/" FJ_CACHE_TEMP_PREFIX "zZ9yY8", dir);
    snprintf(tuning, sizeof tuning, "%s/tuning.txt", dir);
    write_file(t1, a.file, a.file_size);
    write_file(t2, b.file, b.file_size / 2);
    write_file(tuning, "# tuning\n", 9);

    scan_result r = {0};
    assert_int_equal(fj_cache_scan(dir, record_visit, &r), FJ_OK);
    assert_int_equal(r.count, 4); /* tuning.txt is not ours */
    assert_int_equal(r.valid, 2);
    assert_int_equal(r.temps, 2);
    assert_int_equal(r.damaged, 0);
    expect_hit(dir, NAME, &a.key, a.payload, a.payload_size);
    expect_hit(dir, NAME, &b.key, b.payload, b.payload_size);

    int removed = -1;
    assert_int_equal(fj_cache_clear(dir, &removed), FJ_OK);
    assert_int_equal(removed, 4);
    assert_int_equal(count_dir_entries(dir), 1);
    assert_int_equal(access(tuning, F_OK), 0);
    expect_miss(dir, NAME, &a.key, "no entry");
    assert_int_equal(fj_cache_clear(dir, &removed), FJ_OK);
    assert_int_equal(removed, 0);
    stored_entry_free(&a);
    stored_entry_free(&b);
}

static void test_scan_flags_every_damaged_file(void **state)
{
    const char *dir = *state;
    stored_entry e[6];
    char text[32];
    for (int i = 0; i < 6; i++) {
        snprintf(text, sizeof text, "scan %d", i);
        e[i] = store_entry(dir, text, 1000 + 300 * (size_t)i);
    }
    /* damage four of them, each its own way */
    write_file(e[0].path, e[0].file, e[0].file_size - 10); /* truncated */
    e[1].file[e[1].file_size - 1] ^= 0x80;                 /* payload bit */
    write_file(e[1].path, e[1].file, e[1].file_size);
    e[2].file[30] ^= 0x01; /* header bit */
    write_file(e[2].path, e[2].file, e[2].file_size);
    write_file(e[3].path, "", 0); /* zero length */
    /* and two *.fjk files whose names are not an entry's */
    char odd[4096];
    snprintf(odd, sizeof odd, "%s/stray.fjk", dir);
    write_file(odd, e[4].file, e[4].file_size);
    char hex[33], upper[4096];
    fj_cache_key_hex(&e[5].key, hex);
    for (char *c = hex; *c; c++)
        if (*c >= 'a' && *c <= 'f') *c = (char)(*c - 'a' + 'A');
    snprintf(upper, sizeof upper, "%s/%s.%s.fjk", dir, NAME, hex);
    write_file(upper, e[5].file, e[5].file_size);

    scan_result r = {0};
    assert_int_equal(fj_cache_scan(dir, record_visit, &r), FJ_OK);
    assert_int_equal(r.count, 8);
    assert_int_equal(r.valid, 2);
    assert_int_equal(r.damaged, 6);
    assert_int_equal(r.temps, 0);
    for (int i = 0; i < r.count; i++) {
        bool expect_valid = false;
        for (int k = 4; k < 6; k++) {
            const char *base = strrchr(e[k].path, '/') + 1;
            if (!strcmp(r.files[i], base)) expect_valid = true;
        }
        if (r.valid_of[i] != expect_valid)
            fail_msg("%s: scan says valid=%d (%s)", r.files[i], r.valid_of[i], r.problem[i]);
    }
    /* the visitor can stop the scan */
    scan_result first = {.stop_after = 1};
    assert_int_equal(fj_cache_scan(dir, record_visit, &first), FJ_OK);
    assert_int_equal(first.count, 1);

    int removed = 0;
    assert_int_equal(fj_cache_clear(dir, &removed), FJ_OK);
    assert_int_equal(removed, 8);
    assert_int_equal(count_dir_entries(dir), 0);

    char missing[4096];
    snprintf(missing, sizeof missing, "%s/does-not-exist", dir);
    assert_int_equal(fj_cache_scan(missing, record_visit, &r), FJ_ERR_IO);
    assert_non_null(strstr(fj_last_error(), missing));
    assert_int_equal(fj_cache_clear(missing, &removed), FJ_ERR_IO);
    for (int i = 0; i < 6; i++) stored_entry_free(&e[i]);
}

/* ---- allocation failure ------------------------------------------------- */

typedef enum cache_op { OP_LOAD, OP_STORE, OP_SCAN, OP_CLEAR } cache_op;

static int count_visit(const fj_cache_entry_info *e, void *user)
{
    (void)e;
    (*(int *)user)++;
    return 0;
}

static fj_status run_op(cache_op op, const char *dir, const stored_entry *e)
{
    void *data = NULL;
    size_t size = 0;
    int n = 0;
    fj_status s = FJ_ERR_INTERNAL;
    switch (op) {
    case OP_LOAD:
        s = fj_cache_load(dir, NAME, &e->key, &data, &size);
        if (s != FJ_OK && data) fail_msg("load failed yet returned data");
        free(data);
        break;
    case OP_STORE: s = fj_cache_store(dir, NAME, &e->key, e->payload, e->payload_size); break;
    case OP_SCAN: s = fj_cache_scan(dir, count_visit, &n); break;
    case OP_CLEAR: s = fj_cache_clear(dir, &n); break;
    }
    return s;
}

/* The n-th allocation of each operation fails, for every n until the
 * operation makes no more: each such run says FJ_ERR_OUT_OF_MEMORY (never a
 * crash, a leak under ASan, or a damaged entry). */
static void test_allocation_failures(void **state)
{
    const char *dir = *state;
    static const char *const names[] = {"load", "store", "scan", "clear"};
    for (int op = OP_LOAD; op <= OP_CLEAR; op++) {
        stored_entry e = store_entry(dir, "allocation", 3000);
        long n;
        for (n = 0;; n++) {
            allocations = 0;
            fail_at = n;
            fj_status s = run_op((cache_op)op, dir, &e);
            fail_at = -1;
            if (allocations <= n) { /* nothing failed: every allocation was tried */
                assert_int_equal(s, FJ_OK);
                break;
            }
            if (s != FJ_ERR_OUT_OF_MEMORY)
                fail_msg("%s with allocation %ld failing: %s (%s)", names[op], n, fj_status_name(s),
                         fj_last_error());
            if (op != OP_CLEAR) expect_hit(dir, NAME, &e.key, e.payload, e.payload_size);
        }
        printf("# %s: each of its %ld allocations failed in turn\n", names[op], n);
        assert_true(n > 0);
        int removed;
        assert_int_equal(fj_cache_clear(dir, &removed), FJ_OK);
        stored_entry_free(&e);
    }
}

/* ---- many processes at once --------------------------------------------- */

#define RACE_PROCESSES 8
#define RACE_READERS 4
#define RACE_ENTRIES 20

typedef struct race_report {
    long hits, misses, torn, damaged, vanished, store_errors, other_errors;
    bool seen[RACE_ENTRIES]; /* this process has loaded entry i */
} race_report;

static size_t race_size(int i) { return 4096 * (size_t)(i + 1) + 37 * (size_t)i; }

/* Entry i's payload: the same bytes from every process. */
static uint8_t *race_payload(int i, uint64_t seed)
{
    fjt_rng rng;
    fjt_rng_init(&rng, seed + 1000003u * (uint64_t)i);
    size_t n = race_size(i);
    uint8_t *p = malloc(n);
    if (p)
        for (size_t k = 0; k < n; k++) p[k] = (uint8_t)fjt_next(&rng);
    return p;
}

static fj_cache_key race_key(int i)
{
    char text[32];
    snprintf(text, sizeof text, "race entry %d", i);
    return key_of(text);
}

/* One load: the exact payload, or a miss because there is no file yet.
 * Another payload is a torn read; a miss for a damaged file means a torn file
 * sat under the final name (the children keep capture_log, so last_log has
 * the reason); no file after this process saw one means the name was not
 * replaced atomically. */
static void race_check(const char *dir, int i, uint8_t *const payloads[], race_report *r)
{
    fj_cache_key key = race_key(i);
    void *data = NULL;
    size_t size = 0;
    if (fj_cache_load(dir, NAME, &key, &data, &size) != FJ_OK) {
        r->other_errors++;
        return;
    }
    if (!data) {
        if (!strstr(last_log, "no entry")) r->damaged++;
        else if (r->seen[i]) r->vanished++;
        else r->misses++;
        return;
    }
    r->seen[i] = true;
    if (size == race_size(i) && !memcmp(data, payloads[i], size)) r->hits++;
    else r->torn++;
    free(data);
}

static void send_report(int fd, const race_report *r)
{
    /* smaller than PIPE_BUF: one atomic write per child */
    if (write(fd, r, sizeof *r) != (ssize_t)sizeof *r) _exit(3);
}

static void race_writer(const char *dir, int id, int rounds, uint8_t *const payloads[],
                        int report_fd)
{
    fjt_rng rng;
    fjt_rng_init(&rng, fjt_seed() ^ (uint64_t)(id + 1) * 0x9e3779b97f4a7c15ull);
    race_report r = {0};
    int order[RACE_ENTRIES];
    for (int i = 0; i < RACE_ENTRIES; i++) order[i] = i;
    for (int round = 0; round < rounds; round++) {
        for (int i = RACE_ENTRIES - 1; i > 0; i--) { /* each round its own order */
            int j = fjt_range(&rng, 0, i), t = order[i];
            order[i] = order[j];
            order[j] = t;
        }
        for (int k = 0; k < RACE_ENTRIES; k++) {
            int i = order[k];
            fj_cache_key key = race_key(i);
            if (fj_cache_store(dir, NAME, &key, payloads[i], race_size(i)) != FJ_OK)
                r.store_errors++;
            else r.seen[i] = true; /* from now on it must always be there */
            race_check(dir, fjt_range(&rng, 0, RACE_ENTRIES - 1), payloads, &r);
        }
    }
    send_report(report_fd, &r);
}

/* Loads until the writers are done (the parent closes stop_fd's other end). */
static void race_reader(const char *dir, int id, uint8_t *const payloads[], int stop_fd,
                        int report_fd)
{
    fjt_rng rng;
    fjt_rng_init(&rng, fjt_seed() ^ (uint64_t)(id + 101));
    race_report r = {0};
    for (;;) {
        struct pollfd p = {.fd = stop_fd, .events = POLLIN};
        if (poll(&p, 1, 0) > 0) break;
        race_check(dir, fjt_range(&rng, 0, RACE_ENTRIES - 1), payloads, &r);
    }
    send_report(report_fd, &r);
}

static void test_concurrent_stores_and_loads(void **state)
{
    const char *dir = *state;
    const char *env = getenv("FLASHJIT_TEST_CACHE_ROUNDS");
    int rounds = env && atoi(env) > 0 ? atoi(env) : 10;
    uint64_t seed = fjt_seed();
    uint8_t *payloads[RACE_ENTRIES];
    for (int i = 0; i < RACE_ENTRIES; i++) {
        payloads[i] = race_payload(i, seed);
        assert_non_null(payloads[i]);
    }
    int stop[2], report[2];
    assert_int_equal(pipe(stop), 0);
    assert_int_equal(pipe(report), 0);
    fflush(stdout);
    pid_t pids[RACE_PROCESSES + RACE_READERS];
    int nchildren = RACE_PROCESSES + RACE_READERS;
    for (int c = 0; c < nchildren; c++) {
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            close(stop[1]);
            close(report[0]);
            if (c < RACE_PROCESSES) race_writer(dir, c, rounds, payloads, report[1]);
            else race_reader(dir, c, payloads, stop[0], report[1]);
            _exit(0);
        }
        pids[c] = pid;
    }
    close(report[1]);
    close(stop[0]);
    int failed_children = 0;
    for (int c = 0; c < RACE_PROCESSES; c++) {
        int status;
        assert_int_equal(waitpid(pids[c], &status, 0), pids[c]);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) failed_children++;
    }
    close(stop[1]); /* the readers stop */
    for (int c = RACE_PROCESSES; c < nchildren; c++) {
        int status;
        assert_int_equal(waitpid(pids[c], &status, 0), pids[c]);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) failed_children++;
    }
    race_report total = {0};
    race_report r;
    int reports = 0;
    while (read(report[0], &r, sizeof r) == (ssize_t)sizeof r) {
        total.hits += r.hits;
        total.misses += r.misses;
        total.torn += r.torn;
        total.damaged += r.damaged;
        total.vanished += r.vanished;
        total.store_errors += r.store_errors;
        total.other_errors += r.other_errors;
        reports++;
    }
    close(report[0]);
    printf("# race: %d writers x %d rounds x %d entries, %d readers: %ld hits, %ld misses (no "
           "file yet), %ld torn, %ld damaged, %ld vanished, %ld store errors, %ld load errors\n",
           RACE_PROCESSES, rounds, RACE_ENTRIES, RACE_READERS, total.hits, total.misses, total.torn,
           total.damaged, total.vanished, total.store_errors, total.other_errors);
    assert_int_equal(failed_children, 0);
    assert_int_equal(reports, nchildren);
    assert_int_equal(total.torn, 0);
    assert_int_equal(total.damaged, 0);
    assert_int_equal(total.vanished, 0);
    assert_int_equal(total.store_errors, 0);
    assert_int_equal(total.other_errors, 0);
    assert_true(total.hits > 0);

    /* Only the 20 valid entries remain: no temp file, nothing damaged. */
    scan_result s = {0};
    assert_int_equal(fj_cache_scan(dir, record_visit, &s), FJ_OK);
    assert_int_equal(s.count, RACE_ENTRIES);
    assert_int_equal(s.valid, RACE_ENTRIES);
    assert_int_equal(count_dir_entries(dir), RACE_ENTRIES);
    for (int i = 0; i < RACE_ENTRIES; i++) {
        fj_cache_key key = race_key(i);
        expect_hit(dir, NAME, &key, payloads[i], race_size(i));
        free(payloads[i]);
    }
}

/* ---- a file-size limit (issue 23, finding 4) ------------------------------ */

/* Under RLIMIT_FSIZE a write past the limit raises SIGXFSZ, whose default
 * action kills the process. A store must fail like a full disk instead, and
 * leave the thread's signal mask and pending set as they were. Run in a child
 * (the limit and a kill stay there); the child's exit status says what
 * happened. */
static int fsize_child(const char *dir)
{
    struct rlimit lim = {8192, 8192};
    if (setrlimit(RLIMIT_FSIZE, &lim) != 0) return 10;
    sigset_t before, after, pending;
    sigprocmask(SIG_SETMASK, NULL, &before);
    fjt_rng rng;
    fjt_rng_init(&rng, fjt_seed());
    uint8_t *big = random_bytes(&rng, 100000);
    fj_cache_key key = key_of("over the size limit");
    fj_status s = fj_cache_store(dir, NAME, &key, big, 100000);
    free(big);
    if (s != FJ_ERR_IO) return 11;
    if (!strstr(fj_last_error(), strerror(EFBIG))) {
        fprintf(stderr, "store error: %s\n", fj_last_error());
        return 12;
    }
    sigprocmask(SIG_SETMASK, NULL, &after);
    if (sigismember(&after, SIGXFSZ) != sigismember(&before, SIGXFSZ)) return 13;
    sigpending(&pending);
    if (sigismember(&pending, SIGXFSZ)) return 14;
    /* the entry is a miss, no temporary file is left, and a store that fits
       the limit still works */
    void *data = NULL;
    size_t size = 0;
    if (fj_cache_load(dir, NAME, &key, &data, &size) != FJ_OK || data) return 15;
    if (count_dir_entries(dir) != 0) return 16;
    fj_cache_key small = key_of("under the size limit");
    if (fj_cache_store(dir, NAME, &small, "cubin", 5) != FJ_OK) return 17;
    return 0;
}

static void test_store_under_a_file_size_limit(void **state)
{
    const char *dir = *state;
    fflush(stdout);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) _exit(fsize_child(dir));
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (WIFSIGNALED(status))
        fail_msg("the store killed the process with signal %d (%s)", WTERMSIG(status),
                 strsignal(WTERMSIG(status)));
    if (WEXITSTATUS(status) != 0) fail_msg("child check %d failed", WEXITSTATUS(status));
    assert_int_equal(count_dir_entries(dir), 1); /* the small entry */
}

/* ---- the damage table ------------------------------------------------------ */

/* Every kind of damage an entry can take, each checked the same way: the
 * load is a miss that logs the reason, the scan (`flashjit cache verify`)
 * calls the file damaged with that reason, and a store puts back the exact
 * original bytes. The table is printed as it runs. */
typedef struct damage {
    const char *kind;
    const char *reason; /* in the miss's log line and the scan's problem */
    void (*apply)(const char *dir, stored_entry *e);
} damage;

static void rewrite(stored_entry *e, size_t len) { write_file(e->path, e->file, len); }

static void d_empty(const char *dir, stored_entry *e)
{
    (void)dir;
    rewrite(e, 0);
}
static void d_cut_header(const char *dir, stored_entry *e)
{
    (void)dir;
    rewrite(e, 30);
}
static void d_cut_name(const char *dir, stored_entry *e)
{
    (void)dir;
    rewrite(e, 60);
}
static void d_cut_payload(const char *dir, stored_entry *e)
{
    (void)dir;
    rewrite(e, e->file_size - 1);
}
static void d_extended(const char *dir, stored_entry *e)
{
    (void)dir;
    uint8_t *longer = malloc(e->file_size + 1);
    assert_non_null(longer);
    memcpy(longer, e->file, e->file_size);
    longer[e->file_size] = '\n';
    write_file(e->path, longer, e->file_size + 1);
    free(longer);
}
static void patch(stored_entry *e, size_t at, const void *bytes, size_t n)
{
    uint8_t *copy = malloc(e->file_size);
    assert_non_null(copy);
    memcpy(copy, e->file, e->file_size);
    memcpy(copy + at, bytes, n);
    write_file(e->path, copy, e->file_size);
    free(copy);
}
static void d_magic(const char *dir, stored_entry *e)
{
    (void)dir;
    patch(e, 0, "\177ELF", 4);
}
static void d_version(const char *dir, stored_entry *e)
{
    (void)dir;
    patch(e, 4, "\x02\0\0\0", 4);
}
static void d_name_length(const char *dir, stored_entry *e)
{
    (void)dir;
    patch(e, 40, "\0\0\0\0", 4);
}
static void d_key_bit(const char *dir, stored_entry *e)
{
    (void)dir;
    uint8_t b = e->file[12] ^ 0x20;
    patch(e, 12, &b, 1);
}
static void d_payload_bit(const char *dir, stored_entry *e)
{
    (void)dir;
    uint8_t b = e->file[e->file_size - 3] ^ 0x01;
    patch(e, e->file_size - 3, &b, 1);
}
static void d_other_key(const char *dir, stored_entry *e)
{
    fj_cache_key other = key_of("damage table: another entry");
    assert_int_equal(fj_cache_store(dir, NAME, &other, e->payload, e->payload_size), FJ_OK);
    char *other_path = entry_path(dir, NAME, &other);
    assert_int_equal(rename(other_path, e->path), 0);
    free(other_path);
}
static void d_other_name(const char *dir, stored_entry *e)
{
    const char *name = "flash_fwd.d64.f16.nomask.m64n64w4s2.sm_80";
    assert_int_equal(fj_cache_store(dir, name, &e->key, e->payload, e->payload_size), FJ_OK);
    char *other_path = entry_path(dir, name, &e->key);
    assert_int_equal(rename(other_path, e->path), 0);
    free(other_path);
}
static void d_noise(const char *dir, stored_entry *e)
{
    (void)dir;
    fjt_rng rng;
    fjt_rng_init(&rng, fjt_seed() + 23);
    uint8_t *noise = random_bytes(&rng, e->file_size);
    write_file(e->path, noise, e->file_size);
    free(noise);
}
static void d_text(const char *dir, stored_entry *e)
{
    (void)dir;
    write_file(e->path, "a note someone saved under this name\n", 37);
}
static void d_directory(const char *dir, stored_entry *e)
{
    (void)dir;
    assert_int_equal(unlink(e->path), 0);
    assert_int_equal(mkdir(e->path, 0700), 0);
}
static void d_fifo(const char *dir, stored_entry *e)
{
    (void)dir;
    assert_int_equal(unlink(e->path), 0);
    assert_int_equal(mkfifo(e->path, 0600), 0);
}
static void d_dangling_link(const char *dir, stored_entry *e)
{
    char target[4200];
    snprintf(target, sizeof target, "%s/no-such-target", dir);
    assert_int_equal(unlink(e->path), 0);
    assert_int_equal(symlink(target, e->path), 0);
}

static const damage damages[] = {
    {"zero-length file", "shorter than the 56-byte header", d_empty},
    {"truncated in the fixed header", "shorter than the 56-byte header", d_cut_header},
    {"truncated in the kernel name", "shorter than its", d_cut_name},
    {"truncated in the payload", "payload bytes", d_cut_payload},
    {"one byte appended", "payload bytes", d_extended},
    {"wrong magic", "wrong magic", d_magic},
    {"another format version", "format version", d_version},
    {"name length out of range", "kernel name length", d_name_length},
    {"a bit of the key flipped", "header checksum mismatch", d_key_bit},
    {"a bit of the payload flipped", "payload checksum mismatch", d_payload_bit},
    {"another entry's file (key)", "the key in the header is not the one", d_other_key},
    {"another kernel's file (name)", "the kernel name in the header is", d_other_name},
    {"random bytes of the same size", "wrong magic", d_noise},
    {"a text file", "shorter than the 56-byte header", d_text},
    {"a directory", "not a regular file", d_directory},
    {"a FIFO", "not a regular file", d_fifo},
    {"a dangling symbolic link", "no entry", d_dangling_link},
};

static int find_visit(const fj_cache_entry_info *e, void *user)
{
    fj_cache_entry_info *want = user;
    if (!strcmp(e->file, want->file)) *want = *e;
    return 0;
}

static void test_damage_table(void **state)
{
    const char *dir = *state;
    printf("# %-32s %-8s %s\n", "damage", "load", "reason (load log; scan)");
    for (size_t i = 0; i < sizeof damages / sizeof damages[0]; i++) {
        const damage *d = &damages[i];
        char text[64];
        snprintf(text, sizeof text, "damage table %zu", i);
        stored_entry e = store_entry(dir, text, 700 + 13 * i);
        d->apply(dir, &e);
        expect_miss(dir, NAME, &e.key, d->reason);
        char logged[2048];
        snprintf(logged, sizeof logged, "%s", last_log);
        /* the scan agrees, except for a name with nothing behind it (the
           dangling link: no file to describe, so not listed) */
        fj_cache_entry_info info = {0};
        snprintf(info.file, sizeof info.file, "%s", strrchr(e.path, '/') + 1);
        info.valid = -1;
        assert_int_equal(fj_cache_scan(dir, find_visit, &info), FJ_OK);
        if (info.valid != -1) {
            if (info.valid || !strstr(info.problem, d->reason))
                fail_msg("%s: the scan says valid=%d '%s'", d->kind, info.valid, info.problem);
        } else if (d->apply != d_dangling_link) {
            fail_msg("%s: the scan did not list %s", d->kind, info.file);
        }
        printf("# %-32s %-8s %s\n", d->kind, "miss",
               strstr(logged, "(") ? strstr(logged, "(") : logged);
        expect_repaired(dir, &e);
        stored_entry_free(&e);
        int removed;
        assert_int_equal(fj_cache_clear(dir, &removed), FJ_OK);
    }
    /* a file the library may not read (not root: root reads it anyway) */
    stored_entry e = store_entry(dir, "damage table: unreadable", 500);
    assert_int_equal(chmod(e.path, 0), 0);
    int fd = open(e.path, O_RDONLY);
    if (fd >= 0) {
        close(fd);
        printf("# %-32s skipped: uid %d reads a file of mode 000\n", "unreadable file",
               (int)geteuid());
    } else {
        expect_miss(dir, NAME, &e.key, "cannot open");
        printf("# %-32s %-8s %s\n", "unreadable file", "miss", "cannot open: Permission denied");
        expect_repaired(dir, &e);
    }
    stored_entry_free(&e);
}

/* ---- a store killed at any moment ---------------------------------------- */

/* A child stores large entries in a loop and is killed with SIGKILL at a
 * random moment, many times over one directory: no entry may ever be torn
 * (every *.fjk the scan sees is valid), a kill leaves at most a temporary
 * file, which clear removes, and a load after each kill is a hit or a miss,
 * never an error. */
static void test_stores_killed(void **state)
{
    const char *dir = *state;
    fjt_rng rng;
    fjt_rng_init(&rng, fjt_seed() + 99);
    enum { KILLS = 30, ENTRIES = 4, SIZE = 1 << 20 };
    uint8_t *payload = random_bytes(&rng, SIZE);
    for (int k = 0; k < KILLS; k++) {
        fflush(stdout);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            for (unsigned i = 0;; i++) {
                char text[32];
                snprintf(text, sizeof text, "killed store %u", i % ENTRIES);
                fj_cache_key key = key_of(text);
                fj_cache_store(dir, NAME, &key, payload, SIZE - i % 4096);
            }
        }
        struct timespec t = {0, (long)fjt_range(&rng, 0, 20000) * 1000};
        nanosleep(&t, NULL);
        kill(pid, SIGKILL);
        int status;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        scan_result r = {0};
        assert_int_equal(fj_cache_scan(dir, record_visit, &r), FJ_OK);
        if (r.damaged) fail_msg("kill %d: %d damaged entries (torn)", k, r.damaged);
        for (int i = 0; i < ENTRIES; i++) {
            char text[32];
            snprintf(text, sizeof text, "killed store %d", i);
            fj_cache_key key = key_of(text);
            void *data = NULL;
            size_t size = 0;
            assert_int_equal(fj_cache_load(dir, NAME, &key, &data, &size), FJ_OK);
            if (data && (size > SIZE || memcmp(data, payload, size)))
                fail_msg("kill %d: entry %d holds other bytes", k, i);
            free(data);
        }
    }
    scan_result r = {0};
    assert_int_equal(fj_cache_scan(dir, record_visit, &r), FJ_OK);
    int removed;
    assert_int_equal(fj_cache_clear(dir, &removed), FJ_OK);
    assert_int_equal(count_dir_entries(dir), 0);
    printf("# %d stores killed at random moments: no torn entry; %d valid entries and %d "
           "temporary files left (removed by clear)\n",
           KILLS, r.valid, r.temps);
    free(payload);
}

int main(void)
{
    fjt_seed(); /* prints the seed once */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_key_changes_with_every_input),
        cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_invalid_names_are_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_every_flipped_bit_is_a_miss, setup, teardown),
        cmocka_unit_test_setup_teardown(test_truncated_and_extended_files_are_misses, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_wrong_magic_and_version_are_misses, setup, teardown),
        cmocka_unit_test_setup_teardown(test_foreign_files_are_misses, setup, teardown),
        cmocka_unit_test_setup_teardown(test_key_and_name_mismatch_are_misses, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unwritable_directory, setup, teardown),
        cmocka_unit_test_setup_teardown(test_temp_files_are_not_entries_and_clear_removes_them,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_scan_flags_every_damaged_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_allocation_failures, setup, teardown),
        cmocka_unit_test_setup_teardown(test_concurrent_stores_and_loads, setup, teardown),
        cmocka_unit_test_setup_teardown(test_store_under_a_file_size_limit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_damage_table, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stores_killed, setup, teardown),
    };
    return cmocka_run_group_tests_name("cache", tests, NULL, NULL);
}
