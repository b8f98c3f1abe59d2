/* Reads a kernel's register count, stack frame and static shared memory
 * from a cubin's ELF. Layouts (all little-endian ELF64):
 *  - section headers as in the ELF specification;
 *  - .nv.info: a sequence of attributes, each "format byte, attribute byte,
 *    16-bit field"; format 4 (EIFMT_SVAL) means the field is the size of a
 *    payload that follows, other formats carry their value in the field.
 *    EIATTR_REGCOUNT (0x2f) and EIATTR_FRAME_SIZE (0x11) are SVAL with an
 *    8-byte payload: the kernel's symbol index, then the value.
 * Fields are read byte by byte, so the input needs no alignment. */
#include "cuda/jit/cubin_info.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "status.h"

enum {
    ELF_HEADER_SIZE = 64,
    SECTION_HEADER_SIZE = 64,
    SYMBOL_SIZE = 24,
    EM_CUDA = 190,
    SHT_SYMTAB = 2,
    SHT_NOBITS = 8,
    EIFMT_SVAL = 4,
    EIATTR_FRAME_SIZE = 0x11,
    EIATTR_REGCOUNT = 0x2f,
};

typedef struct elf {
    const uint8_t *data;
    size_t size;
    uint64_t shoff;
    unsigned shnum, shstrndx;
} elf;

typedef struct section {
    uint32_t name, type, link;
    uint64_t offset, size;
} section;

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t rd32(const uint8_t *p) { return (uint32_t)rd16(p) | (uint32_t)rd16(p + 2) << 16; }
static uint64_t rd64(const uint8_t *p) { return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32; }

/* [off, off + n) lies inside the file. */
static int in_file(const elf *e, uint64_t off, uint64_t n)
{
    return off <= e->size && n <= e->size - off;
}

static section section_at(const elf *e, unsigned i)
{
    const uint8_t *h = e->data + e->shoff + (uint64_t)i * SECTION_HEADER_SIZE;
    section s = {rd32(h), rd32(h + 4), rd32(h + 40), rd64(h + 24), rd64(h + 32)};
    return s;
}

/* The NUL-terminated string at off in string section strtab, or NULL when it
 * runs off the section. A NOBITS section holds no bytes of the file (its
 * offset and size were never checked against it), so no string either. */
static const char *string_at(const elf *e, const section *strtab, uint64_t off)
{
    if (strtab->type == SHT_NOBITS || off >= strtab->size) return NULL;
    const char *s = (const char *)e->data + strtab->offset + off;
    return memchr(s, '\0', strtab->size - off) ? s : NULL;
}

static int find_section(const elf *e, const char *name, section *out)
{
    section names = section_at(e, e->shstrndx);
    for (unsigned i = 0; i < e->shnum; i++) {
        section s = section_at(e, i);
        const char *n = string_at(e, &names, s.name);
        if (n && !strcmp(n, name)) {
            *out = s;
            return 1;
        }
    }
    return 0;
}

static fj_status bad(size_t size, const char *what)
{
    return fj_fail(FJ_ERR_INVALID_ARGUMENT, "not a usable cubin (%zu bytes): %s", size, what);
}

fj_status fj_cubin_resources_read(const void *cubin, size_t size, const char *entry,
                                  fj_cubin_resources *out)
{
    memset(out, 0, sizeof *out);
    elf e = {cubin, size, 0, 0, 0};
    if (!cubin || size < ELF_HEADER_SIZE || memcmp(e.data, "\177ELF", 4))
        return bad(size, "no ELF header");
    if (e.data[4] != 2 || e.data[5] != 1) return bad(size, "not a little-endian ELF64");
    if (rd16(e.data + 18) != EM_CUDA) return bad(size, "not an ELF for EM_CUDA");
    e.shoff = rd64(e.data + 40);
    e.shnum = rd16(e.data + 60);
    e.shstrndx = rd16(e.data + 62);
    if (rd16(e.data + 58) != SECTION_HEADER_SIZE || e.shstrndx >= e.shnum ||
        !in_file(&e, e.shoff, (uint64_t)e.shnum * SECTION_HEADER_SIZE))
        return bad(size, "section header table out of bounds");
    for (unsigned i = 0; i < e.shnum; i++) {
        section s = section_at(&e, i);
        /* NOBITS sections (.nv.shared.*) occupy no file bytes: only their
           size is read. */
        if (s.type != SHT_NOBITS && !in_file(&e, s.offset, s.size))
            return bad(size, "a section lies outside the file");
    }

    /* The kernel's symbol index, which the .nv.info attributes refer to. */
    section symtab = {0}, strtab;
    unsigned i;
    for (i = 0; i < e.shnum; i++)
        if ((symtab = section_at(&e, i)).type == SHT_SYMTAB) break;
    if (i == e.shnum || symtab.link >= e.shnum) return bad(size, "no symbol table");
    strtab = section_at(&e, symtab.link);
    uint64_t sym = 0, nsyms = symtab.size / SYMBOL_SIZE;
    for (uint64_t j = 0; j < nsyms; j++) {
        const char *n = string_at(&e, &strtab, rd32(e.data + symtab.offset + j * SYMBOL_SIZE));
        if (n && !strcmp(n, entry)) {
            sym = j;
            break;
        }
    }
    if (!sym) return fj_fail(FJ_ERR_INVALID_ARGUMENT, "the cubin has no kernel named '%s'", entry);

    section info;
    if (!find_section(&e, ".nv.info", &info) || info.type == SHT_NOBITS)
        return bad(size, "no .nv.info section");
    int have_regs = 0;
    for (uint64_t off = 0; off + 4 <= info.size;) {
        const uint8_t *a = e.data + info.offset + off;
        uint64_t len = a[0] == EIFMT_SVAL ? 4u + rd16(a + 2) : 4u;
        if (len > info.size - off) return bad(size, ".nv.info attribute runs past its section");
        if (a[0] == EIFMT_SVAL && len >= 12 && rd32(a + 4) == sym) {
            if (a[1] == EIATTR_REGCOUNT) {
                out->registers = rd32(a + 8);
                have_regs = 1;
            } else if (a[1] == EIATTR_FRAME_SIZE) {
                out->frame_bytes = rd32(a + 8);
            }
        }
        off += len;
    }
    if (!have_regs)
        return fj_fail(FJ_ERR_INVALID_ARGUMENT, "the cubin has no register count for '%s'", entry);

    char shared_name[256];
    section shared;
    snprintf(shared_name, sizeof shared_name, ".nv.shared.%s", entry);
    if (find_section(&e, shared_name, &shared)) out->static_smem = (unsigned)shared.size;
    return FJ_OK;
}
