/* Fuzz target: the kernel cache's reader (src/cuda/jit/cache.c). The first
 * byte picks the mode:
 *   even  raw: the rest of the input is the file at an entry's name. A load
 *         must not crash; a hit must be exactly what the file holds after
 *         its header; the scan must call the file valid exactly when the
 *         load hits.
 *   odd   edits: the input is a payload (a length, then its bytes) stored
 *         with fj_cache_store, then edits applied to the stored file (flip
 *         a bit, set a byte, truncate, append, replace a 32-bit field). The
 *         contract says any change is a miss: the load must hit exactly when
 *         the edited file equals the stored one, and return the payload.
 * Either way `clear` then empties the directory. Files go to a private
 * directory under /dev/shm (else TMPDIR or /tmp), removed at exit. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cuda/jit/cache.h"
#include "fuzz_input.h"

#define NAME "flash_fwd.d64.bf16.causal.m64n64w4s2.sm_90"
#define MAX_FILE (1 << 20)

static char dir[256];
static char path[512];
static fj_cache_key key;

static void remove_dir(void)
{
    int removed;
    fj_cache_clear(dir, &removed);
    rmdir(dir);
}

static void setup(void)
{
    if (dir[0]) return;
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/flashjit-fuzz-cache-XXXXXX", base && *base ? base : "/tmp");
    FUZZ_REQUIRE(mkdtemp(dir), "mkdtemp %s", dir);
    atexit(remove_dir);
    key = fj_cache_key_make("fuzz", 4, "-O3", 13, 0, "sm_90");
    char hex[2 * FJ_CACHE_KEY_BYTES + 1];
    fj_cache_key_hex(&key, hex);
    snprintf(path, sizeof path, "%s/%s.%s.fjk", dir, NAME, hex);
}

static void write_file(const uint8_t *data, size_t n)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    FUZZ_REQUIRE(fd >= 0, "open %s: %s", path, strerror(errno));
    FUZZ_REQUIRE(write(fd, data, n) == (ssize_t)n, "write");
    close(fd);
}

static uint8_t *read_file(size_t *n)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    FUZZ_REQUIRE(fd >= 0, "open %s: %s", path, strerror(errno));
    struct stat st;
    FUZZ_REQUIRE(fstat(fd, &st) == 0, "fstat");
    *n = (size_t)st.st_size;
    uint8_t *b = malloc(*n + 1);
    FUZZ_REQUIRE(b && read(fd, b, *n) == (ssize_t)*n, "read");
    close(fd);
    return b;
}

typedef struct scan_state {
    int files, valid;
} scan_state;

static int visit(const fj_cache_entry_info *e, void *user)
{
    scan_state *s = user;
    s->files++;
    s->valid += e->valid;
    FUZZ_REQUIRE(e->valid ? !e->problem[0] : e->problem[0] != '\0', "valid %d with problem '%s'",
                 e->valid, e->problem);
    return 0;
}

/* Loads the entry; checks a hit against the file's tail and against the
 * scan. Returns whether it hit, the payload in *payload. */
static bool load_and_scan(uint8_t **payload, size_t *size)
{
    void *data = NULL;
    *size = 0;
    fj_status s = fj_cache_load(dir, NAME, &key, &data, size);
    FUZZ_REQUIRE(s == FJ_OK, "load: %s", fj_last_error());
    scan_state st = {0};
    FUZZ_REQUIRE(fj_cache_scan(dir, visit, &st) == FJ_OK, "scan: %s", fj_last_error());
    FUZZ_REQUIRE(st.files == 1 && st.valid == (data != NULL), "scan: %d files, %d valid, load %s",
                 st.files, st.valid, data ? "hit" : "missed");
    if (data) {
        size_t n;
        uint8_t *file = read_file(&n);
        size_t header = 56 + strlen(NAME);
        FUZZ_REQUIRE(n == header + *size && !memcmp(file + header, data, *size),
                     "a hit of %zu bytes is not the file's tail (%zu bytes)", *size, n);
        FUZZ_REQUIRE(((uint8_t *)data)[*size] == 0, "no NUL after the payload");
        free(file);
    }
    *payload = data;
    return data != NULL;
}

static void raw(fuzz_input *in)
{
    size_t n = fuzz_left(in) < MAX_FILE ? fuzz_left(in) : MAX_FILE;
    write_file(in->data + in->at, n);
    uint8_t *payload;
    size_t size;
    load_and_scan(&payload, &size);
    free(payload);
}

static void edits(fuzz_input *in)
{
    size_t plen = fuzz_u16(in) % 4097;
    uint8_t *want = malloc(plen + 1);
    FUZZ_REQUIRE(want, "out of memory");
    for (size_t i = 0; i < plen; i++) want[i] = fuzz_u8(in);
    FUZZ_REQUIRE(fj_cache_store(dir, NAME, &key, want, plen) == FJ_OK, "store: %s",
                 fj_last_error());
    size_t n;
    uint8_t *stored = read_file(&n);
    uint8_t *file = malloc(n + 4096);
    FUZZ_REQUIRE(file, "out of memory");
    memcpy(file, stored, n);
    size_t len = n;
    for (int ops = fuzz_u8(in) % 8; ops > 0; ops--) {
        uint8_t op = fuzz_u8(in);
        size_t at = len ? fuzz_u32(in) % len : 0;
        switch (op % 5) {
        case 0:
            if (len) file[at] ^= (uint8_t)(1u << (fuzz_u8(in) % 8));
            break;
        case 1:
            if (len) file[at] = fuzz_u8(in);
            break;
        case 2: len = at; break;
        case 3: {
            size_t more = fuzz_u8(in) % 64;
            if (len + more > n + 4096) more = n + 4096 - len;
            for (size_t i = 0; i < more; i++) file[len + i] = fuzz_u8(in);
            len += more;
            break;
        }
        default: { /* one of the header's 32-bit fields */
            size_t field = 4 * (fuzz_u8(in) % 14);
            uint32_t v = fuzz_u32(in);
            if (field + 4 <= len) memcpy(file + field, &v, 4);
            break;
        }
        }
    }
    write_file(file, len);
    bool unchanged = len == n && !memcmp(file, stored, n);
    uint8_t *payload;
    size_t size;
    bool hit = load_and_scan(&payload, &size);
    FUZZ_REQUIRE(hit == unchanged, "the edited entry %s (file %zu bytes, stored %zu)",
                 hit ? "still hits" : "misses though unchanged", len, n);
    if (hit) FUZZ_REQUIRE(size == plen && !memcmp(payload, want, plen), "wrong payload");
    free(payload);
    free(file);
    free(stored);
    free(want);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    setup();
    fuzz_input in = {data, size, 0};
    if (fuzz_u8(&in) & 1) edits(&in);
    else raw(&in);
    int removed = 0;
    FUZZ_REQUIRE(fj_cache_clear(dir, &removed) == FJ_OK && removed == 1, "clear: %s",
                 fj_last_error());
    return 0;
}
