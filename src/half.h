/* float16 / bfloat16 <-> float32, bit-exact and branch-free so loops over
 * them vectorize. Rounding to nearest-even; NaN stays NaN (quieted); values
 * beyond the target range become infinities; float16 subnormals are kept.
 * In the core because the CPU backends (src/cpu/convert.c), the tuner's
 * checks (src/tune/) and the CLI all convert. */
#ifndef FJ_HALF_H
#define FJ_HALF_H

#include <stdint.h>
#include <string.h>

static inline uint32_t fj_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float fj_bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline float fj_f16_to_f32(uint16_t h)
{
    uint32_t body = (uint32_t)(h & 0x7fffu) << 13; /* exponent and mantissa in place */
    uint32_t exp = body & 0x0f800000u;
    uint32_t normal = body + ((127u - 15u) << 23);
    uint32_t special = normal + ((128u - 16u) << 23); /* exp 31: inf/nan */
    /* subnormal: rebuild as a normal float and subtract the implicit one */
    float sub = fj_bits_f32(normal + (1u << 23)) - fj_bits_f32(113u << 23);
    uint32_t o = exp == 0x0f800000u ? special : exp == 0 ? fj_f32_bits(sub) : normal;
    return fj_bits_f32(o | ((uint32_t)(h & 0x8000u) << 16));
}

static inline uint16_t fj_f32_to_f16(float f)
{
    uint32_t u = fj_f32_bits(f);
    uint32_t sign = u & 0x80000000u;
    u ^= sign;
    uint32_t o;
    const uint32_t f16_overflow = (127u + 16u) << 23; /* 65536.0: everything >= rounds to inf */
    const uint32_t denorm_magic = ((127u - 15u) + (23u - 10u) + 1u) << 23;
    if (u >= f16_overflow) {
        o = u > 0x7f800000u ? 0x7e00u : 0x7c00u;
    } else if (u < (113u << 23)) {
        /* result is subnormal or zero: let the FPU's round-to-nearest-even do it
           by adding a magic number that puts the f16 ulp at the f32 ulp */
        o = fj_f32_bits(fj_bits_f32(u) + fj_bits_f32(denorm_magic)) - denorm_magic;
    } else {
        uint32_t odd = (u >> 13) & 1u;
        u += ((uint32_t)(15 - 127) << 23) + 0xfffu + odd;
        o = u >> 13;
    }
    return (uint16_t)(o | (sign >> 16));
}

static inline float fj_bf16_to_f32(uint16_t b) { return fj_bits_f32((uint32_t)b << 16); }

static inline uint16_t fj_f32_to_bf16(float f)
{
    uint32_t u = fj_f32_bits(f);
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    uint32_t nan = (u >> 16) | 0x40u;
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

#endif
