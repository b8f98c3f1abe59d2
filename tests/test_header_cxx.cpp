// flashjit.h must compile as C++ and link against the C library.
#include "flashjit.h"

#include <cstdio>
#include <cstring>

int main()
{
    fj_attention_desc d;
    fj_attention_desc_init(&d, 1, 2, 1, 4, 4, 8, FJ_F32);
    if (fj_attention_desc_validate(&d) != FJ_OK) return 1;
    if (std::strcmp(fj_status_name(FJ_ERR_IO), "FJ_ERR_IO") != 0) return 1;
    std::printf("flashjit %s from C++\n", FLASHJIT_VERSION_STRING);
    return fj_version() == FLASHJIT_VERSION_MAJOR * 10000u + FLASHJIT_VERSION_MINOR * 100u + FLASHJIT_VERSION_PATCH ? 0 : 1;
}
