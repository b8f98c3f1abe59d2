/* The AMX tile configuration the CPU kernels load (decode_amx.c,
 * prefill_amx.c): the 64-byte layout LDTILECFG reads, and the common case of
 * every tile 16 rows of 64 bytes. Include only where the AMX intrinsics are
 * compiled (x86-64, GCC-compatible, the files' own guard). */
#ifndef FJ_CPU_AMX_TILES_H
#define FJ_CPU_AMX_TILES_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

typedef struct fj_amx_tile_config {
    uint8_t palette, start_row;
    uint8_t reserved[14];
    uint16_t bytes_per_row[16];
    uint8_t rows[16];
} fj_amx_tile_config;

/* Tiles 0 .. tiles-1 of 16 rows x 64 bytes (palette 1), loaded. */
static inline __attribute__((always_inline, target("amx-tile"))) void fj_amx_config_16x64(int tiles)
{
    fj_amx_tile_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < tiles; t++) {
        cfg.bytes_per_row[t] = 64;
        cfg.rows[t] = 16;
    }
    _tile_loadconfig(&cfg);
}

#endif
