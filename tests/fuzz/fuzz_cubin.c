/* Fuzz target: the cubin reader (src/cuda/jit/cubin_info.c), which takes
 * ELF files from the disk cache as well as from NVRTC. The input is the
 * cubin; the reader is asked for the kernel "k" (the seeds' kernel) and for
 * a name the input ends with (after its last NUL), so mutations can reach
 * any symbol. Every offset must be bounds-checked: no crash, no read outside
 * the input (ASan), and a result either FJ_OK or FJ_ERR_INVALID_ARGUMENT
 * with a message. The input is copied to a buffer of exactly its size, so
 * ASan sees any read past it. */
#include <string.h>

#include "cuda/jit/cubin_info.h"
#include "fuzz_input.h"

static void read_entry(const uint8_t *cubin, size_t size, const char *entry)
{
    fj_cubin_resources r;
    fj_status s = fj_cubin_resources_read(cubin, size, entry, &r);
    FUZZ_REQUIRE(s == FJ_OK || (s == FJ_ERR_INVALID_ARGUMENT && fj_last_error()[0]),
                 "entry '%s': %s", entry, fj_status_name(s));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *copy = malloc(size ? size : 1);
    FUZZ_REQUIRE(copy, "out of memory");
    memcpy(copy, data, size);
    read_entry(copy, size, "k");
    /* the text after the last NUL, as a kernel name (at most 255 bytes) */
    size_t start = size;
    while (start > 0 && data[start - 1] != '\0' && size - start < 255) start--;
    char name[256];
    memcpy(name, data + start, size - start);
    name[size - start] = '\0';
    read_entry(copy, size, name);
    free(copy);
    return 0;
}
