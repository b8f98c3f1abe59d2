/* Fuzz target: the tuning file reader and parser (src/tune/tuning_file.c,
 * src/tune/tuning.c). The input is a tuning file's bytes:
 *  - read back through fj_tuning_read_file from an in-memory file: the text
 *    it returns is exactly the bytes;
 *  - parsed leniently (bad lines reported, skipped) and strictly (all or
 *    nothing): strict success means lenient success with the same entries
 *    and no problem reported;
 *  - every entry parsed is written again in format 1 and in format 2, and
 *    each line reads back as the same entry;
 *  - the whole list written as a file (fj_tuning_format) reads back, strictly,
 *    as the same points with the same winners.
 * No crash, no undefined behaviour, no leak, whatever the bytes. */
#include <stdbool.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz_input.h"
#include "strbuf.h"
#include "tune/tuning.h"

static bool same_entry(const fj_tuning_entry *a, const fj_tuning_entry *b)
{
    return !strcmp(a->device, b->device) && !strcmp(a->arch, b->arch) &&
           !strcmp(a->template_name, b->template_name) && !strcmp(a->point, b->point) &&
           !strcmp(a->config, b->config) && !strcmp(a->date, b->date) &&
           a->head_dim == b->head_dim && !strcmp(a->dtype, b->dtype) && !strcmp(a->mask, b->mask) &&
           a->bucket == b->bucket;
}

/* The bytes through fj_tuning_read_file: a memfd is a regular file, named
 * by /proc/self/fd. */
static void check_reader(const uint8_t *data, size_t size)
{
    int fd = memfd_create("fuzz-tuning", MFD_CLOEXEC);
    if (fd < 0) return; /* no memfd here: the parse checks still run */
    size_t put = 0;
    while (put < size) {
        ssize_t w = write(fd, data + put, size - put);
        FUZZ_REQUIRE(w > 0, "writing the memfd");
        put += (size_t)w;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    char *text = NULL;
    size_t len = 0;
    int err = fj_tuning_read_file(path, &text, &len);
    FUZZ_REQUIRE(err == 0, "reading %zu bytes: %s", size, fj_tuning_read_error(err));
    FUZZ_REQUIRE(len == size && !memcmp(text, data, size) && text[len] == '\0',
                 "read %zu bytes back for %zu", len, size);
    free(text);
    close(fd);
}

/* Each entry's line, in both formats, parses back to the same entry. */
static void check_lines(const fj_tuning *t)
{
    for (int i = 0; i < fj_tuning_count(t); i++) {
        const fj_tuning_entry *e = fj_tuning_entry_at(t, i);
        for (int version = 1; version <= 2; version++) {
            char text[1200];
            int n = snprintf(text, sizeof text, "flashjit-tuning %d\n", version);
            fj_tuning_format_entry(e, version, text + n, sizeof text - (size_t)n);
            fj_tuning *back = NULL;
            fj_status s = fj_tuning_parse_strict(text, "fuzz-line", &back);
            FUZZ_REQUIRE(s == FJ_OK, "entry %d written in format %d does not read back: %s\n%s", i,
                         version, fj_last_error(), text);
            FUZZ_REQUIRE(fj_tuning_count(back) == 1 && same_entry(fj_tuning_entry_at(back, 0), e),
                         "entry %d changed through format %d:\n%s", i, version, text);
            fj_tuning_free(back);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    check_reader(data, size);
    char *text = malloc(size + 1);
    FUZZ_REQUIRE(text, "out of memory");
    memcpy(text, data, size);
    text[size] = '\0'; /* a NUL inside ends the text early, as it does for a file */

    fj_tuning *lenient = NULL, *strict = NULL;
    fj_strbuf notes;
    fj_strbuf_init(&notes);
    FUZZ_REQUIRE(fj_tuning_parse(text, "fuzz", &lenient, &notes) == FJ_OK, "lenient parse: %s",
                 fj_last_error());
    fj_status s = fj_tuning_parse_strict(text, "fuzz", &strict);
    if (s == FJ_OK) {
        FUZZ_REQUIRE(notes.len == 0, "strict parse passed, lenient one noted: %s", notes.data);
        FUZZ_REQUIRE(fj_tuning_count(strict) == fj_tuning_count(lenient), "%d entries vs %d",
                     fj_tuning_count(strict), fj_tuning_count(lenient));
        for (int i = 0; i < fj_tuning_count(strict); i++)
            FUZZ_REQUIRE(same_entry(fj_tuning_entry_at(strict, i), fj_tuning_entry_at(lenient, i)),
                         "entry %d differs between the parses", i);
    } else {
        FUZZ_REQUIRE(s == FJ_ERR_INVALID_ARGUMENT && fj_last_error()[0], "strict parse: %s",
                     fj_status_name(s));
        FUZZ_REQUIRE(strict == NULL, "failed strict parse returned a list");
    }
    check_lines(lenient);

    /* the list as a file, read back */
    fj_strbuf file;
    fj_strbuf_init(&file);
    fj_tuning_format(lenient, &file);
    FUZZ_REQUIRE(file.data, "out of memory formatting");
    fj_tuning *again = NULL;
    FUZZ_REQUIRE(fj_tuning_parse_strict(file.data, "fuzz-file", &again) == FJ_OK,
                 "the formatted list does not read back: %s\n%s", fj_last_error(), file.data);
    for (int i = 0; i < fj_tuning_count(again); i++) {
        const fj_tuning_entry *e = fj_tuning_entry_at(again, i);
        const fj_tuning_entry *want = fj_tuning_find_in(lenient, e);
        FUZZ_REQUIRE(want && same_entry(e, want), "point %s lost its winner", e->point);
    }
    fj_tuning_free(again);
    fj_strbuf_free(&file);
    fj_tuning_free(strict);
    fj_tuning_free(lenient);
    fj_strbuf_free(&notes);
    free(text);
    return 0;
}
