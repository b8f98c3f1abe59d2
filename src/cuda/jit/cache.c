/* The disk cache of compiled kernels.
 *
 * CONTRACT. Every function here keeps it, and `flashjit cache` calls these
 * same functions, so the tool and the runtime cannot disagree about what a
 * good entry is.
 *
 * Key: 128 bits, the hash below over, in this order, the cache format
 * version (uint32), the generated source, the NVRTC options, the NVRTC major
 * and minor version (uint32 each) and the arch string ("sm_90"). Each string
 * is preceded by its length (uint64), so different input lists never hash the
 * same bytes. Everything else that changes the binary (the generator version,
 * every descriptor field) is in the source text itself.
 *
 * Hash: our own, not cryptographic. It guards against accidents (a stale or
 * torn file, two kernels sharing a name); whoever can write the cache
 * directory can put any cubin there anyway. The input is read as
 * little-endian 8-byte words (the last one zero-padded) by two lanes with
 * different odd constants:
 *     a = rotl(a ^ w*K1, 31) * K2          b = rotl(b + w*K3, 29) * K4
 * Each step is a bijection of the lane's state for a fixed word, and of the
 * word for a fixed state, so two inputs of one length that differ within a
 * single word (any one flipped bit) always end in different states of both
 * lanes. The length is then mixed in and each lane goes through the murmur3
 * fmix64 avalanche (a bijection), the second after taking in the first:
 *     A = fmix64(a ^ len*K3)               B = fmix64(b ^ len ^ rotl(A, 17))
 * (A, B) is the 128-bit key; A alone is the 64-bit checksum.
 *
 * File: "<kernel name>.<32 hex key>.fjk" in the cache directory; kernel names
 * match [A-Za-z0-9][A-Za-z0-9._-]{0,199} and are checked before any path is
 * built. Layout (integers little-endian):
 *      0   4  magic "FJKC"
 *      4   4  format version (FJ_CACHE_FORMAT_VERSION)
 *      8  16  key
 *     24   8  payload size
 *     32   8  payload checksum: A of the payload
 *     40   4  kernel name length n
 *     44   4  zero
 *     48   8  header checksum: A of bytes 0..47 followed by the name
 *     56   n  kernel name (no NUL)
 *   56+n      payload: the cubin or PTX bytes (a load puts a NUL after them)
 * A file is an entry only when magic, version, header checksum, key and name
 * (both must be those its file name promises), payload size (file size minus
 * header) and payload checksum all check out. Anything else is a MISS, logged
 * at debug level with the reason and never an error: the caller recompiles,
 * and its store replaces the file.
 *
 * Store: write into a temporary file (FJ_CACHE_TEMP_PREFIX, made by mkstemp)
 * in the same directory, since rename is atomic only within one filesystem;
 * write everything, fsync, close, rename over the final name, fsync the
 * directory. The data is on disk before any name points at it, so after a
 * crash the final name holds the old entry, nothing, or the new complete
 * entry: never a torn file. (PyTorch's NVRTC cache renamed before flushing and
 * then failed forever on the torn file it left.) Any failure unlinks the
 * temporary file and returns FJ_ERR_IO with the path and the errno text. A
 * crash before the rename leaves a temporary file that no load reads and
 * fj_cache_clear removes. No locks: concurrent writers of one entry write the
 * same bytes and the last rename wins; files are never changed in place, so a
 * reader's open descriptor keeps one complete version. A directory at an
 * entry's name (never made by a store) is removed when empty, else moved
 * aside to a temporary name with its files, so the rename can land.
 * SIGXFSZ is held off around the writes (src/fsize_signal.h): past a
 * file-size limit a store fails with EFBIG like on a full disk.
 */
#include "cuda/jit/cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fsize_signal.h"
#include "log.h"
#include "status.h"

/* ---- hash ----------------------------------------------------------------- */

#define HASH_K1 0x9e3779b97f4a7c15ull
#define HASH_K2 0xbf58476d1ce4e5b9ull
#define HASH_K3 0xc2b2ae3d27d4eb4full
#define HASH_K4 0x165667b19e3779f9ull
#define HASH_SEED_A 0x6a09e667f3bcc908ull
#define HASH_SEED_B 0xbb67ae8584caa73bull

typedef struct fj_hash {
    uint64_t a, b;   /* the two lanes */
    uint64_t len;    /* bytes taken in */
    uint8_t tail[8]; /* bytes not yet forming a whole word */
    size_t ntail;
} fj_hash;

static inline uint64_t rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

static uint64_t fmix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

static uint64_t load_le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static uint32_t load_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void store_le64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void store_le32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void hash_init(fj_hash *h)
{
    h->a = HASH_SEED_A;
    h->b = HASH_SEED_B;
    h->len = 0;
    h->ntail = 0;
}

static void hash_word(fj_hash *h, uint64_t w)
{
    h->a = rotl64(h->a ^ (w * HASH_K1), 31) * HASH_K2;
    h->b = rotl64(h->b + (w * HASH_K3), 29) * HASH_K4;
}

static void hash_update(fj_hash *h, const void *data, size_t n)
{
    const uint8_t *p = data;
    h->len += n;
    if (h->ntail) {
        while (n && h->ntail < 8) {
            h->tail[h->ntail++] = *p++;
            n--;
        }
        if (h->ntail < 8) return;
        hash_word(h, load_le64(h->tail));
        h->ntail = 0;
    }
    for (; n >= 8; p += 8, n -= 8) hash_word(h, load_le64(p));
    if (n) memcpy(h->tail, p, n);
    h->ntail = n;
}

static void hash_final(fj_hash *h, uint64_t *lane_a, uint64_t *lane_b)
{
    if (h->ntail) {
        memset(h->tail + h->ntail, 0, 8 - h->ntail);
        hash_word(h, load_le64(h->tail));
        h->ntail = 0;
    }
    uint64_t a = fmix64(h->a ^ (h->len * HASH_K3));
    uint64_t b = fmix64(h->b ^ h->len ^ rotl64(a, 17));
    *lane_a = a;
    *lane_b = b;
}

static uint64_t hash_final64(fj_hash *h)
{
    uint64_t a, b;
    hash_final(h, &a, &b);
    return a;
}

static void hash_u32(fj_hash *h, uint32_t v)
{
    uint8_t b[4];
    store_le32(b, v);
    hash_update(h, b, sizeof b);
}

static void hash_field(fj_hash *h, const void *data, size_t n)
{
    uint8_t b[8];
    store_le64(b, (uint64_t)n);
    hash_update(h, b, sizeof b);
    if (n) hash_update(h, data, n);
}

fj_cache_key fj_cache_key_make(const char *source, size_t source_len, const char *options,
                               int nvrtc_major, int nvrtc_minor, const char *arch)
{
    fj_hash h;
    hash_init(&h);
    hash_u32(&h, FJ_CACHE_FORMAT_VERSION);
    hash_field(&h, source, source ? source_len : 0);
    hash_field(&h, options, options ? strlen(options) : 0);
    hash_u32(&h, (uint32_t)nvrtc_major);
    hash_u32(&h, (uint32_t)nvrtc_minor);
    hash_field(&h, arch, arch ? strlen(arch) : 0);
    uint64_t a, b;
    hash_final(&h, &a, &b);
    fj_cache_key k;
    store_le64(k.bytes, a);
    store_le64(k.bytes + 8, b);
    return k;
}

void fj_cache_key_hex(const fj_cache_key *k, char out[2 * FJ_CACHE_KEY_BYTES + 1])
{
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < FJ_CACHE_KEY_BYTES; i++) {
        out[2 * i] = digits[k->bytes[i] >> 4];
        out[2 * i + 1] = digits[k->bytes[i] & 15];
    }
    out[2 * FJ_CACHE_KEY_BYTES] = '\0';
}

/* Lower-case hex only, as fj_cache_key_hex writes it: one file name per key. */
static bool key_from_hex(const char *hex, fj_cache_key *k)
{
    for (int i = 0; i < 2 * FJ_CACHE_KEY_BYTES; i++) {
        char c = hex[i];
        int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (v < 0) return false;
        if (i % 2 == 0) k->bytes[i / 2] = (uint8_t)(v << 4);
        else k->bytes[i / 2] |= (uint8_t)v;
    }
    return true;
}

/* ---- names and paths ----------------------------------------------------- */

static bool name_char(char c, bool first)
{
    bool alnum = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
    /* A leading '.' would hide the file (and could mimic the temporary
       prefix), a leading '-' would read as an option to rm or ls. */
    return alnum || (!first && (c == '.' || c == '_' || c == '-'));
}

int fj_cache_name_valid(const char *name)
{
    if (!name || !*name) return 0;
    for (size_t i = 0; name[i]; i++)
        if (i >= FJ_CACHE_NAME_MAX || !name_char(name[i], i == 0)) return 0;
    return 1;
}

static fj_status check_name(const char *name)
{
    if (fj_cache_name_valid(name)) return FJ_OK;
    return fj_fail(FJ_ERR_INVALID_ARGUMENT,
                   "cache: kernel name '%.*s' is not 1..%d characters of [A-Za-z0-9._-] "
                   "starting with a letter or digit",
                   FJ_CACHE_NAME_MAX + 8, name ? name : "(null)", FJ_CACHE_NAME_MAX);
}

static char *path_printf(const char *fmt, const char *a, const char *b, const char *c)
{
    int n = snprintf(NULL, 0, fmt, a, b, c);
    if (n < 0) return NULL;
    char *p = malloc((size_t)n + 1);
    if (p) snprintf(p, (size_t)n + 1, fmt, a, b, c);
    return p;
}

static char *entry_path(const char *dir, const char *name, const fj_cache_key *key)
{
    char hex[2 * FJ_CACHE_KEY_BYTES + 1];
    fj_cache_key_hex(key, hex);
    return path_printf("%s/%s.%s.fjk", dir, name, hex);
}

static bool is_temp_file(const char *file)
{
    return !strncmp(file, FJ_CACHE_TEMP_PREFIX, sizeof FJ_CACHE_TEMP_PREFIX - 1);
}

static bool is_cache_file(const char *file)
{
    size_t n = strlen(file);
    return is_temp_file(file) || (n > 4 && !strcmp(file + n - 4, ".fjk"));
}

/* Splits "<name>.<32 hex>.fjk" into its kernel name and key. */
static bool parse_entry_file(const char *file, char name[FJ_CACHE_NAME_MAX + 1], fj_cache_key *key)
{
    const size_t suffix = 1 + 2 * FJ_CACHE_KEY_BYTES + 4; /* ".<hex>.fjk" */
    size_t n = strlen(file);
    if (n <= suffix || n - suffix > FJ_CACHE_NAME_MAX) return false;
    const char *dot = file + n - suffix;
    if (*dot != '.' || strcmp(file + n - 4, ".fjk") != 0 || !key_from_hex(dot + 1, key))
        return false;
    memcpy(name, file, n - suffix);
    name[n - suffix] = '\0';
    return fj_cache_name_valid(name) != 0;
}

/* ---- reading and writing whole buffers ---------------------------------- */

/* One read()/write() moves at most this much: counts above SSIZE_MAX are
 * implementation-defined, and Linux stops near 2 GiB anyway. */
#define IO_CHUNK ((size_t)1 << 30)

/* Reads until n bytes or end of file (retrying EINTR and short reads);
 * returns the bytes read, or -1 with errno. */
static ssize_t read_full(int fd, void *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        size_t want = n - got < IO_CHUNK ? n - got : IO_CHUNK;
        ssize_t r = read(fd, (char *)buf + got, want);
        if (r < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (r == 0) break;
        got += (size_t)r;
    }
    return (ssize_t)got;
}

/* 0, or -1 with errno. */
static int write_full(int fd, const void *buf, size_t n)
{
    size_t put = 0;
    while (put < n) {
        size_t want = n - put < IO_CHUNK ? n - put : IO_CHUNK;
        ssize_t w = write(fd, (const char *)buf + put, want);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (w == 0) {
            errno = EIO; /* not expected from a regular file; never loop on it */
            return -1;
        }
        put += (size_t)w;
    }
    return 0;
}

/* ---- the file header ------------------------------------------------------ */

enum {
    HDR_MAGIC = 0,
    HDR_VERSION = 4,
    HDR_KEY = 8,
    HDR_PAYLOAD_SIZE = 24,
    HDR_PAYLOAD_SUM = 32,
    HDR_NAME_LEN = 40,
    HDR_ZERO = 44,
    HDR_HEADER_SUM = 48,
    HDR_FIXED = 56, /* the name follows */
};
static const char cache_magic[4] = {'F', 'J', 'K', 'C'};

static uint64_t header_checksum(const uint8_t *header, size_t name_len)
{
    fj_hash h;
    hash_init(&h);
    hash_update(&h, header, HDR_HEADER_SUM);
    hash_update(&h, header + HDR_FIXED, name_len);
    return hash_final64(&h);
}

static uint64_t payload_checksum(const void *data, size_t n)
{
    fj_hash h;
    hash_init(&h);
    if (n) hash_update(&h, data, n);
    return hash_final64(&h);
}

/* Fills out (HDR_FIXED + FJ_CACHE_NAME_MAX bytes) and returns the header's
 * length. */
static size_t header_build(uint8_t *out, const char *name, const fj_cache_key *key,
                           const void *data, size_t size)
{
    size_t name_len = strlen(name);
    memset(out, 0, HDR_FIXED);
    memcpy(out + HDR_MAGIC, cache_magic, sizeof cache_magic);
    store_le32(out + HDR_VERSION, FJ_CACHE_FORMAT_VERSION);
    memcpy(out + HDR_KEY, key->bytes, FJ_CACHE_KEY_BYTES);
    store_le64(out + HDR_PAYLOAD_SIZE, (uint64_t)size);
    store_le64(out + HDR_PAYLOAD_SUM, payload_checksum(data, size));
    store_le32(out + HDR_NAME_LEN, (uint32_t)name_len);
    memcpy(out + HDR_FIXED, name, name_len);
    store_le64(out + HDR_HEADER_SUM, header_checksum(out, name_len));
    return HDR_FIXED + name_len;
}

/* ---- checking one entry (load and scan) ---------------------------------- */

typedef enum entry_state {
    ENTRY_VALID,
    ENTRY_ABSENT,    /* no such file: a plain miss */
    ENTRY_DAMAGED,   /* anything wrong with it: a miss, reason given */
    ENTRY_NO_MEMORY, /* the payload buffer could not be allocated */
} entry_state;

typedef struct entry_check {
    uint64_t file_size; /* bytes on disk (0 when it could not be stat'ed) */
    char why[128];      /* the reason when not ENTRY_VALID */
} entry_check;

static entry_state damaged(entry_check *c, const char *fmt, ...) FJ_PRINTF(2, 3);
static entry_state damaged(entry_check *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->why, sizeof c->why, fmt, ap);
    va_end(ap);
    return ENTRY_DAMAGED;
}

/* A read that ended early or failed: the file changed under us, or the disk
 * failed. Either way the entry is not usable. */
static entry_state short_read(entry_check *c, ssize_t got, const char *what)
{
    if (got < 0) return damaged(c, "cannot read the %s: %s", what, strerror(errno));
    return damaged(c, "the %s ends early (the file shrank while read)", what);
}

/* Checks that fd holds the entry (name, key) with a payload of exactly what
 * remains after the header. With payload non-NULL the payload is returned in
 * a malloc'd buffer with one NUL after it; otherwise it is only read through
 * the checksum in chunks (scan: no cubin-sized buffer per file). */
static entry_state check_open_file(int fd, const char *name, const fj_cache_key *key,
                                   void **payload, size_t *payload_size, entry_check *c)
{
    struct stat st;
    if (fstat(fd, &st) != 0) return damaged(c, "cannot stat: %s", strerror(errno));
    c->file_size = st.st_size > 0 ? (uint64_t)st.st_size : 0;
    if (!S_ISREG(st.st_mode)) return damaged(c, "not a regular file");
    if (c->file_size < HDR_FIXED)
        return damaged(c, "%llu bytes, shorter than the %d-byte header",
                       (unsigned long long)c->file_size, HDR_FIXED);

    uint8_t header[HDR_FIXED + FJ_CACHE_NAME_MAX];
    ssize_t got = read_full(fd, header, HDR_FIXED);
    if (got != HDR_FIXED) return short_read(c, got, "header");
    if (memcmp(header + HDR_MAGIC, cache_magic, sizeof cache_magic) != 0)
        return damaged(c, "wrong magic (not a flashjit cache file)");
    uint32_t version = load_le32(header + HDR_VERSION);
    if (version != FJ_CACHE_FORMAT_VERSION)
        return damaged(c, "format version %u, this library reads version %u", version,
                       FJ_CACHE_FORMAT_VERSION);
    uint32_t name_len = load_le32(header + HDR_NAME_LEN);
    if (name_len == 0 || name_len > FJ_CACHE_NAME_MAX)
        return damaged(c, "kernel name length %u in the header is out of range", name_len);
    uint64_t header_len = HDR_FIXED + (uint64_t)name_len;
    if (c->file_size < header_len)
        return damaged(c, "%llu bytes, shorter than its %llu-byte header",
                       (unsigned long long)c->file_size, (unsigned long long)header_len);
    got = read_full(fd, header + HDR_FIXED, name_len);
    if (got != (ssize_t)name_len) return short_read(c, got, "header");
    if (load_le64(header + HDR_HEADER_SUM) != header_checksum(header, name_len))
        return damaged(c, "header checksum mismatch");
    if (memcmp(header + HDR_KEY, key->bytes, FJ_CACHE_KEY_BYTES) != 0)
        return damaged(c, "the key in the header is not the one in the file name");
    if (name_len != strlen(name) || memcmp(header + HDR_FIXED, name, name_len) != 0)
        return damaged(c, "the kernel name in the header is '%.*s'", (int)name_len,
                       (const char *)header + HDR_FIXED);
    uint64_t size = load_le64(header + HDR_PAYLOAD_SIZE);
    if (size != c->file_size - header_len)
        return damaged(c, "the header says %llu payload bytes, the file holds %llu",
                       (unsigned long long)size, (unsigned long long)(c->file_size - header_len));
    if (size >= SIZE_MAX)
        return damaged(c, "payload of %llu bytes is too large", (unsigned long long)size);
    uint64_t want_sum = load_le64(header + HDR_PAYLOAD_SUM);

    if (!payload) {
        uint8_t chunk[16384];
        fj_hash h;
        hash_init(&h);
        for (uint64_t left = size; left > 0;) {
            size_t n = left < sizeof chunk ? (size_t)left : sizeof chunk;
            got = read_full(fd, chunk, n);
            if (got != (ssize_t)n) return short_read(c, got, "payload");
            hash_update(&h, chunk, n);
            left -= n;
        }
        if (hash_final64(&h) != want_sum) return damaged(c, "payload checksum mismatch");
        return ENTRY_VALID;
    }

    uint8_t *buf = malloc((size_t)size + 1);
    if (!buf) {
        snprintf(c->why, sizeof c->why, "cannot allocate %llu bytes", (unsigned long long)size);
        return ENTRY_NO_MEMORY;
    }
    got = read_full(fd, buf, (size_t)size);
    if (got != (ssize_t)size) {
        free(buf);
        return short_read(c, got, "payload");
    }
    if (payload_checksum(buf, (size_t)size) != want_sum) {
        free(buf);
        return damaged(c, "payload checksum mismatch");
    }
    buf[size] = 0;
    *payload = buf;
    *payload_size = (size_t)size;
    return ENTRY_VALID;
}

static entry_state check_entry(const char *path, const char *name, const fj_cache_key *key,
                               void **payload, size_t *payload_size, entry_check *c)
{
    c->file_size = 0;
    c->why[0] = '\0';
    /* O_NONBLOCK: a FIFO planted under an entry's name must not hang the
       load (it is then refused as not a regular file); no effect on files. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        if (errno == ENOENT) {
            snprintf(c->why, sizeof c->why, "no such file");
            return ENTRY_ABSENT;
        }
        return damaged(c, "cannot open: %s", strerror(errno));
    }
    entry_state s = check_open_file(fd, name, key, payload, payload_size, c);
    close(fd);
    return s;
}

/* ---- load and store -------------------------------------------------------- */

fj_status fj_cache_load(const char *dir, const char *name, const fj_cache_key *key, void **data,
                        size_t *size)
{
    if (!dir || !key || !data || !size)
        return fj_fail(FJ_ERR_INTERNAL, "cache: fj_cache_load called with a NULL argument");
    *data = NULL;
    *size = 0;
    fj_status s = check_name(name);
    if (s != FJ_OK) return s;
    char *path = entry_path(dir, name, key);
    if (!path)
        return fj_fail(FJ_ERR_OUT_OF_MEMORY, "cache: out of memory building a path in %s", dir);
    entry_check c;
    switch (check_entry(path, name, key, data, size, &c)) {
    case ENTRY_VALID: FJ_DEBUG("cache: read %s (%zu bytes)", path, *size); break;
    case ENTRY_ABSENT: FJ_DEBUG("cache: no entry %s", path); break;
    case ENTRY_DAMAGED:
        FJ_DEBUG("cache: %s is damaged (%s): a miss; storing the recompiled kernel replaces it",
                 path, c.why);
        break;
    case ENTRY_NO_MEMORY:
        s = fj_fail(FJ_ERR_OUT_OF_MEMORY, "cache: %s reading %s", c.why, path);
        break;
    }
    free(path);
    return s;
}

/* Makes a rename in dir durable. A filesystem that cannot fsync a directory
 * (EINVAL) gives no stronger guarantee to ask for, so that is not a failure. */
static int sync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    int err = errno;
    close(fd);
    if (rc != 0 && err != EINVAL) {
        errno = err;
        return -1;
    }
    return 0;
}

/* A directory standing at an entry's name (no store makes one) would fail
 * every rename onto it, and that kernel would compile again on every run.
 * Empty, it is removed; with files in it, it is moved aside to a temporary
 * name (its files kept: they are not the cache's to delete, and `flashjit
 * cache clear` reports it). 0, or -1 with errno. */
static int move_directory_away(const char *dir, const char *path)
{
    if (rmdir(path) == 0 || errno == ENOENT) return 0;
    if (errno != ENOTEMPTY && errno != EEXIST) return -1;
    char *aside = path_printf("%s/%s%s", dir, FJ_CACHE_TEMP_PREFIX, "XXXXXX");
    if (!aside) {
        errno = ENOMEM;
        return -1;
    }
    int rc = -1;
    if (mkdtemp(aside)) {
        /* a directory renamed onto an empty one replaces it */
        if (rename(path, aside) == 0 || errno == ENOENT) {
            FJ_INFO("cache: a directory stood at %s; moved to %s", path, aside);
            rc = 0;
        } else {
            int err = errno;
            rmdir(aside);
            errno = err;
        }
    }
    free(aside);
    return rc;
}

/* rename(temp, path), moving a directory at path out of the way first when
 * there is one. Concurrent stores may do this at once: each attempt either
 * finds the directory gone or moves it, so a few rounds suffice. */
static int rename_over(const char *dir, const char *temp, const char *path)
{
    for (int attempt = 0;; attempt++) {
        if (rename(temp, path) == 0) return 0;
        if ((errno != EISDIR && errno != ENOTEMPTY && errno != EEXIST) || attempt == 3) return -1;
        if (move_directory_away(dir, path) != 0) return -1;
    }
}

fj_status fj_cache_store(const char *dir, const char *name, const fj_cache_key *key,
                         const void *data, size_t size)
{
    if (!dir || !key || (!data && size))
        return fj_fail(FJ_ERR_INTERNAL, "cache: fj_cache_store called with a NULL argument");
    fj_status s = check_name(name);
    if (s != FJ_OK) return s;
    char *path = entry_path(dir, name, key);
    char *temp = path_printf("%s/%s%s", dir, FJ_CACHE_TEMP_PREFIX, "XXXXXX");
    if (!path || !temp) {
        free(path);
        free(temp);
        return fj_fail(FJ_ERR_OUT_OF_MEMORY, "cache: out of memory building a path in %s", dir);
    }

    uint8_t header[HDR_FIXED + FJ_CACHE_NAME_MAX];
    size_t header_len = header_build(header, name, key, data, size);
    bool temp_exists = false;
    /* Past a file-size limit the write fails with EFBIG, as on a full disk,
       instead of SIGXFSZ killing the process. */
    fj_fsize_guard guard;
    fj_fsize_guard_begin(&guard);
    int fd = mkostemp(temp, O_CLOEXEC);
    if (fd < 0) {
        fj_fsize_guard_end(&guard);
        s = fj_fail(FJ_ERR_IO, "cache: cannot create a temporary file in %s: %s", dir,
                    strerror(errno));
        goto done;
    }
    temp_exists = true;
    int write_failed =
        write_full(fd, header, header_len) != 0 || (size && write_full(fd, data, size) != 0);
    fj_fsize_guard_end(&guard); /* keeps errno */
    if (write_failed) {
        s = fj_fail(FJ_ERR_IO, "cache: cannot write %s: %s", temp, strerror(errno));
        goto done;
    }
    /* The data must be on disk before the final name can point at it. */
    if (fsync(fd) != 0) {
        s = fj_fail(FJ_ERR_IO, "cache: cannot flush %s: %s", temp, strerror(errno));
        goto done;
    }
    int rc = close(fd);
    fd = -1;
    if (rc != 0) {
        s = fj_fail(FJ_ERR_IO, "cache: cannot close %s: %s", temp, strerror(errno));
        goto done;
    }
    if (rename_over(dir, temp, path) != 0) {
        s = fj_fail(FJ_ERR_IO, "cache: cannot rename %s to %s: %s", temp, path, strerror(errno));
        goto done;
    }
    temp_exists = false;
    /* The entry is complete whatever happens now; this only makes the new
       name survive a crash. */
    if (sync_dir(dir) != 0) {
        s = fj_fail(FJ_ERR_IO, "cache: cannot flush directory %s: %s", dir, strerror(errno));
        goto done;
    }
    FJ_DEBUG("cache: saved %s (%zu bytes)", path, size);
done:
    if (fd >= 0) close(fd);
    if (temp_exists) unlink(temp);
    free(path);
    free(temp);
    return s;
}

/* ---- scan and clear --------------------------------------------------------- */

typedef struct name_list {
    char **names;
    size_t count, cap;
} name_list;

static void name_list_free(name_list *l)
{
    for (size_t i = 0; i < l->count; i++) free(l->names[i]);
    free(l->names);
    l->names = NULL;
    l->count = l->cap = 0;
}

static bool name_list_add(name_list *l, const char *name)
{
    if (l->count == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 64;
        char **grown = realloc(l->names, cap * sizeof *grown);
        if (!grown) return false;
        l->names = grown;
        l->cap = cap;
    }
    size_t n = strlen(name) + 1;
    char *copy = malloc(n);
    if (!copy) return false;
    memcpy(copy, name, n);
    l->names[l->count++] = copy;
    return true;
}

static int compare_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The cache files of dir, sorted. Listing first, then acting, keeps scan and
 * clear independent of how readdir behaves while files come and go. */
static fj_status list_cache_files(const char *dir, name_list *out)
{
    *out = (name_list){0};
    DIR *d = opendir(dir);
    if (!d) return fj_fail(FJ_ERR_IO, "cache: cannot read directory %s: %s", dir, strerror(errno));
    fj_status s = FJ_OK;
    for (;;) {
        errno = 0;
        struct dirent *e = readdir(d);
        if (!e) {
            if (errno)
                s = fj_fail(FJ_ERR_IO, "cache: cannot read directory %s: %s", dir, strerror(errno));
            break;
        }
        if (!is_cache_file(e->d_name)) continue;
        if (!name_list_add(out, e->d_name)) {
            s = fj_fail(FJ_ERR_OUT_OF_MEMORY, "cache: out of memory listing %s", dir);
            break;
        }
    }
    closedir(d);
    if (s != FJ_OK) name_list_free(out);
    else if (out->count) qsort(out->names, out->count, sizeof *out->names, compare_names);
    return s;
}

/* Fills e for one listed file. false when the file vanished since the listing. */
static bool describe_file(const char *path, const char *file, fj_cache_entry_info *e)
{
    memset(e, 0, sizeof *e);
    snprintf(e->file, sizeof e->file, "%s", file);
    char name[FJ_CACHE_NAME_MAX + 1];
    fj_cache_key key;
    if (!is_temp_file(file) && parse_entry_file(file, name, &key)) {
        snprintf(e->name, sizeof e->name, "%s", name);
        entry_check c;
        entry_state s = check_entry(path, name, &key, NULL, NULL, &c);
        if (s == ENTRY_ABSENT) return false;
        e->file_size = (size_t)c.file_size;
        e->valid = s == ENTRY_VALID;
        if (!e->valid) snprintf(e->problem, sizeof e->problem, "%s", c.why);
        return true;
    }
    struct stat st;
    if (lstat(path, &st) != 0) {
        if (errno == ENOENT) return false;
        snprintf(e->problem, sizeof e->problem, "cannot stat: %s", strerror(errno));
        return true;
    }
    e->file_size = st.st_size > 0 && S_ISREG(st.st_mode) ? (size_t)st.st_size : 0;
    if (S_ISDIR(st.st_mode)) {
        e->temp = is_temp_file(file);
        snprintf(e->problem, sizeof e->problem,
                 "a directory, not a cache file (kept by clear while it has files in it)");
    } else if (is_temp_file(file)) {
        e->temp = 1;
        snprintf(e->problem, sizeof e->problem,
                 "temporary file of a store in progress or an interrupted one");
    } else {
        snprintf(e->problem, sizeof e->problem, "file name is not <kernel>.<32 hex digits>.fjk");
    }
    return true;
}

fj_status fj_cache_scan(const char *dir, fj_cache_visit_fn fn, void *user)
{
    if (!dir || !fn)
        return fj_fail(FJ_ERR_INTERNAL, "cache: fj_cache_scan called with a NULL argument");
    name_list files;
    fj_status s = list_cache_files(dir, &files);
    if (s != FJ_OK) return s;
    for (size_t i = 0; i < files.count; i++) {
        char *path = path_printf("%s/%s%s", dir, files.names[i], "");
        if (!path) {
            s = fj_fail(FJ_ERR_OUT_OF_MEMORY, "cache: out of memory scanning %s", dir);
            break;
        }
        fj_cache_entry_info e;
        bool present = describe_file(path, files.names[i], &e);
        free(path);
        if (present && fn(&e, user) != 0) break;
    }
    name_list_free(&files);
    return s;
}

fj_status fj_cache_clear(const char *dir, int *removed)
{
    if (!dir || !removed)
        return fj_fail(FJ_ERR_INTERNAL, "cache: fj_cache_clear called with a NULL argument");
    *removed = 0;
    name_list files;
    fj_status s = list_cache_files(dir, &files);
    if (s != FJ_OK) return s;
    int failures = 0;
    for (size_t i = 0; i < files.count; i++) {
        char *path = path_printf("%s/%s%s", dir, files.names[i], "");
        if (!path) {
            s = fj_fail(FJ_ERR_OUT_OF_MEMORY, "cache: out of memory clearing %s", dir);
            break;
        }
        if (unlink(path) == 0) {
            (*removed)++;
        } else if (errno == EISDIR || errno == EPERM) {
            /* A directory under a cache name: removed when empty; one with
               files in it is not the cache's to delete, and is left for
               fj_cache_scan to list (not a failure). */
            if (rmdir(path) == 0) (*removed)++;
            else if (errno == ENOTEMPTY || errno == EEXIST)
                FJ_DEBUG("cache: kept %s: a directory with files in it", path);
            else if (errno != ENOENT && failures++ == 0)
                s = fj_fail(FJ_ERR_IO, "cache: cannot remove %s: %s", path, strerror(errno));
        } else if (errno != ENOENT) { /* ENOENT: someone else removed it first */
            if (failures++ == 0)
                s = fj_fail(FJ_ERR_IO, "cache: cannot remove %s: %s", path, strerror(errno));
        }
        free(path);
    }
    if (failures > 1 && s == FJ_ERR_IO)
        fj_fail_prefix(s, "%d files could not be removed", failures);
    name_list_free(&files);
    if (s == FJ_OK) FJ_DEBUG("cache: removed %d files from %s", *removed, dir);
    return s;
}
