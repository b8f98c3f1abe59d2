/* Reading a fuzzer's bytes as typed values. Every byte string decodes to
 * something (past the end every read gives 0), so libFuzzer's mutations of
 * one field leave the others where they were. */
#ifndef FJ_FUZZ_INPUT_H
#define FJ_FUZZ_INPUT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct fuzz_input {
    const uint8_t *data;
    size_t size, at;
} fuzz_input;

static inline uint8_t fuzz_u8(fuzz_input *in) { return in->at < in->size ? in->data[in->at++] : 0; }

static inline uint16_t fuzz_u16(fuzz_input *in)
{
    uint16_t lo = fuzz_u8(in);
    return (uint16_t)(lo | (uint16_t)fuzz_u8(in) << 8);
}

static inline uint32_t fuzz_u32(fuzz_input *in)
{
    uint32_t lo = fuzz_u16(in);
    return lo | (uint32_t)fuzz_u16(in) << 16;
}

static inline uint64_t fuzz_u64(fuzz_input *in)
{
    uint64_t lo = fuzz_u32(in);
    return lo | (uint64_t)fuzz_u32(in) << 32;
}

/* lo + (a value mod the range's size): uniform enough for a fuzzer. */
static inline int fuzz_range(fuzz_input *in, int lo, int hi)
{
    return lo + (int)(fuzz_u32(in) % (uint32_t)(hi - lo + 1));
}

static inline size_t fuzz_left(const fuzz_input *in) { return in->size - in->at; }

/* A property the target must keep failed: report it and stop, so libFuzzer
 * saves the input as a crash. */
#define FUZZ_REQUIRE(cond, ...)                                              \
    do {                                                                     \
        if (!(cond)) {                                                       \
            fprintf(stderr, "fuzz: %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                    \
            fprintf(stderr, "\n");                                           \
            abort();                                                         \
        }                                                                    \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif
