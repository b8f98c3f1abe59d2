/* wgmma.cuh: warpgroup MMA (wgmma.mma_async, sm_90a) wrappers for any N, for
 * the templates that use it. An asm operand list cannot come from a loop, so
 * the accumulators' constraints and %names are spelled out by chained macros
 * below, one step per n8 tile (4 accumulators a thread), and the names of
 * the inputs after them by a table per N. Pasted after common.cuh for the
 * templates that use it. */
#ifndef FJ_WGMMA_CUH
#define FJ_WGMMA_CUH

#if FJ_DTYPE_BF16
#define FJ_WGMMA_AB "bf16.bf16"
#else
#define FJ_WGMMA_AB "f16.f16"
#endif

/* FJ_WG_ACC_<N>(d): "+f"(d[0]) .. "+f"(d[N/2-1]), the N/2 accumulators of m64nN */
#define FJ_WG_ACC_8(d) "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
#define FJ_WG_ACC_16(d) FJ_WG_ACC_8(d), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
#define FJ_WG_ACC_24(d) FJ_WG_ACC_16(d), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11])
#define FJ_WG_ACC_32(d) FJ_WG_ACC_24(d), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
#define FJ_WG_ACC_40(d) FJ_WG_ACC_32(d), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19])
#define FJ_WG_ACC_48(d) FJ_WG_ACC_40(d), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23])
#define FJ_WG_ACC_56(d) FJ_WG_ACC_48(d), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27])
#define FJ_WG_ACC_64(d) FJ_WG_ACC_56(d), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define FJ_WG_ACC_72(d) FJ_WG_ACC_64(d), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35])
#define FJ_WG_ACC_80(d) FJ_WG_ACC_72(d), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39])
#define FJ_WG_ACC_88(d) FJ_WG_ACC_80(d), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43])
#define FJ_WG_ACC_96(d) FJ_WG_ACC_88(d), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47])
#define FJ_WG_ACC_104(d) FJ_WG_ACC_96(d), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51])
#define FJ_WG_ACC_112(d) FJ_WG_ACC_104(d), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55])
#define FJ_WG_ACC_120(d) FJ_WG_ACC_112(d), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59])
#define FJ_WG_ACC_128(d) FJ_WG_ACC_120(d), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define FJ_WG_ACC_136(d) FJ_WG_ACC_128(d), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67])
#define FJ_WG_ACC_144(d) FJ_WG_ACC_136(d), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71])
#define FJ_WG_ACC_152(d) FJ_WG_ACC_144(d), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75])
#define FJ_WG_ACC_160(d) FJ_WG_ACC_152(d), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79])
#define FJ_WG_ACC_168(d) FJ_WG_ACC_160(d), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83])
#define FJ_WG_ACC_176(d) FJ_WG_ACC_168(d), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87])
#define FJ_WG_ACC_184(d) FJ_WG_ACC_176(d), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91])
#define FJ_WG_ACC_192(d) FJ_WG_ACC_184(d), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
#define FJ_WG_ACC_200(d) FJ_WG_ACC_192(d), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99])
#define FJ_WG_ACC_208(d) FJ_WG_ACC_200(d), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103])
#define FJ_WG_ACC_216(d) FJ_WG_ACC_208(d), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107])
#define FJ_WG_ACC_224(d) FJ_WG_ACC_216(d), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111])
#define FJ_WG_ACC_232(d) FJ_WG_ACC_224(d), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115])
#define FJ_WG_ACC_240(d) FJ_WG_ACC_232(d), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119])
#define FJ_WG_ACC_248(d) FJ_WG_ACC_240(d), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123])
#define FJ_WG_ACC_256(d) FJ_WG_ACC_248(d), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
/* FJ_WG_NAMES_<N>: "%0, %1, ..., %(N/2-1)", their names in the asm text */
#define FJ_WG_NAMES_8 "%0, %1, %2, %3"
#define FJ_WG_NAMES_16 FJ_WG_NAMES_8 ", %4, %5, %6, %7"
#define FJ_WG_NAMES_24 FJ_WG_NAMES_16 ", %8, %9, %10, %11"
#define FJ_WG_NAMES_32 FJ_WG_NAMES_24 ", %12, %13, %14, %15"
#define FJ_WG_NAMES_40 FJ_WG_NAMES_32 ", %16, %17, %18, %19"
#define FJ_WG_NAMES_48 FJ_WG_NAMES_40 ", %20, %21, %22, %23"
#define FJ_WG_NAMES_56 FJ_WG_NAMES_48 ", %24, %25, %26, %27"
#define FJ_WG_NAMES_64 FJ_WG_NAMES_56 ", %28, %29, %30, %31"
#define FJ_WG_NAMES_72 FJ_WG_NAMES_64 ", %32, %33, %34, %35"
#define FJ_WG_NAMES_80 FJ_WG_NAMES_72 ", %36, %37, %38, %39"
#define FJ_WG_NAMES_88 FJ_WG_NAMES_80 ", %40, %41, %42, %43"
#define FJ_WG_NAMES_96 FJ_WG_NAMES_88 ", %44, %45, %46, %47"
#define FJ_WG_NAMES_104 FJ_WG_NAMES_96 ", %48, %49, %50, %51"
#define FJ_WG_NAMES_112 FJ_WG_NAMES_104 ", %52, %53, %54, %55"
#define FJ_WG_NAMES_120 FJ_WG_NAMES_112 ", %56, %57, %58, %59"
#define FJ_WG_NAMES_128 FJ_WG_NAMES_120 ", %60, %61, %62, %63"
#define FJ_WG_NAMES_136 FJ_WG_NAMES_128 ", %64, %65, %66, %67"
#define FJ_WG_NAMES_144 FJ_WG_NAMES_136 ", %68, %69, %70, %71"
#define FJ_WG_NAMES_152 FJ_WG_NAMES_144 ", %72, %73, %74, %75"
#define FJ_WG_NAMES_160 FJ_WG_NAMES_152 ", %76, %77, %78, %79"
#define FJ_WG_NAMES_168 FJ_WG_NAMES_160 ", %80, %81, %82, %83"
#define FJ_WG_NAMES_176 FJ_WG_NAMES_168 ", %84, %85, %86, %87"
#define FJ_WG_NAMES_184 FJ_WG_NAMES_176 ", %88, %89, %90, %91"
#define FJ_WG_NAMES_192 FJ_WG_NAMES_184 ", %92, %93, %94, %95"
#define FJ_WG_NAMES_200 FJ_WG_NAMES_192 ", %96, %97, %98, %99"
#define FJ_WG_NAMES_208 FJ_WG_NAMES_200 ", %100, %101, %102, %103"
#define FJ_WG_NAMES_216 FJ_WG_NAMES_208 ", %104, %105, %106, %107"
#define FJ_WG_NAMES_224 FJ_WG_NAMES_216 ", %108, %109, %110, %111"
#define FJ_WG_NAMES_232 FJ_WG_NAMES_224 ", %112, %113, %114, %115"
#define FJ_WG_NAMES_240 FJ_WG_NAMES_232 ", %116, %117, %118, %119"
#define FJ_WG_NAMES_248 FJ_WG_NAMES_240 ", %120, %121, %122, %123"
#define FJ_WG_NAMES_256 FJ_WG_NAMES_248 ", %124, %125, %126, %127"
/* FJ_WG_SS_IN_<N>: the inputs after them in ss_n<N>: descriptors a, b and the
   accumulate flag; FJ_WG_RS_IN_<N>: in rs_n<N>, the four A registers, the
   descriptor b and the accumulate flag */
#define FJ_WG_SS_IN_8 "%4", "%5", "%6"
#define FJ_WG_SS_IN_16 "%8", "%9", "%10"
#define FJ_WG_SS_IN_24 "%12", "%13", "%14"
#define FJ_WG_SS_IN_32 "%16", "%17", "%18"
#define FJ_WG_SS_IN_40 "%20", "%21", "%22"
#define FJ_WG_SS_IN_48 "%24", "%25", "%26"
#define FJ_WG_SS_IN_56 "%28", "%29", "%30"
#define FJ_WG_SS_IN_64 "%32", "%33", "%34"
#define FJ_WG_SS_IN_72 "%36", "%37", "%38"
#define FJ_WG_SS_IN_80 "%40", "%41", "%42"
#define FJ_WG_SS_IN_88 "%44", "%45", "%46"
#define FJ_WG_SS_IN_96 "%48", "%49", "%50"
#define FJ_WG_SS_IN_104 "%52", "%53", "%54"
#define FJ_WG_SS_IN_112 "%56", "%57", "%58"
#define FJ_WG_SS_IN_120 "%60", "%61", "%62"
#define FJ_WG_SS_IN_128 "%64", "%65", "%66"
#define FJ_WG_SS_IN_136 "%68", "%69", "%70"
#define FJ_WG_SS_IN_144 "%72", "%73", "%74"
#define FJ_WG_SS_IN_152 "%76", "%77", "%78"
#define FJ_WG_SS_IN_160 "%80", "%81", "%82"
#define FJ_WG_SS_IN_168 "%84", "%85", "%86"
#define FJ_WG_SS_IN_176 "%88", "%89", "%90"
#define FJ_WG_SS_IN_184 "%92", "%93", "%94"
#define FJ_WG_SS_IN_192 "%96", "%97", "%98"
#define FJ_WG_SS_IN_200 "%100", "%101", "%102"
#define FJ_WG_SS_IN_208 "%104", "%105", "%106"
#define FJ_WG_SS_IN_216 "%108", "%109", "%110"
#define FJ_WG_SS_IN_224 "%112", "%113", "%114"
#define FJ_WG_SS_IN_232 "%116", "%117", "%118"
#define FJ_WG_SS_IN_240 "%120", "%121", "%122"
#define FJ_WG_SS_IN_248 "%124", "%125", "%126"
#define FJ_WG_SS_IN_256 "%128", "%129", "%130"
#define FJ_WG_RS_IN_8 "%4", "%5", "%6", "%7", "%8", "%9"
#define FJ_WG_RS_IN_16 "%8", "%9", "%10", "%11", "%12", "%13"
#define FJ_WG_RS_IN_24 "%12", "%13", "%14", "%15", "%16", "%17"
#define FJ_WG_RS_IN_32 "%16", "%17", "%18", "%19", "%20", "%21"
#define FJ_WG_RS_IN_40 "%20", "%21", "%22", "%23", "%24", "%25"
#define FJ_WG_RS_IN_48 "%24", "%25", "%26", "%27", "%28", "%29"
#define FJ_WG_RS_IN_56 "%28", "%29", "%30", "%31", "%32", "%33"
#define FJ_WG_RS_IN_64 "%32", "%33", "%34", "%35", "%36", "%37"
#define FJ_WG_RS_IN_72 "%36", "%37", "%38", "%39", "%40", "%41"
#define FJ_WG_RS_IN_80 "%40", "%41", "%42", "%43", "%44", "%45"
#define FJ_WG_RS_IN_88 "%44", "%45", "%46", "%47", "%48", "%49"
#define FJ_WG_RS_IN_96 "%48", "%49", "%50", "%51", "%52", "%53"
#define FJ_WG_RS_IN_104 "%52", "%53", "%54", "%55", "%56", "%57"
#define FJ_WG_RS_IN_112 "%56", "%57", "%58", "%59", "%60", "%61"
#define FJ_WG_RS_IN_120 "%60", "%61", "%62", "%63", "%64", "%65"
#define FJ_WG_RS_IN_128 "%64", "%65", "%66", "%67", "%68", "%69"
#define FJ_WG_RS_IN_136 "%68", "%69", "%70", "%71", "%72", "%73"
#define FJ_WG_RS_IN_144 "%72", "%73", "%74", "%75", "%76", "%77"
#define FJ_WG_RS_IN_152 "%76", "%77", "%78", "%79", "%80", "%81"
#define FJ_WG_RS_IN_160 "%80", "%81", "%82", "%83", "%84", "%85"
#define FJ_WG_RS_IN_168 "%84", "%85", "%86", "%87", "%88", "%89"
#define FJ_WG_RS_IN_176 "%88", "%89", "%90", "%91", "%92", "%93"
#define FJ_WG_RS_IN_184 "%92", "%93", "%94", "%95", "%96", "%97"
#define FJ_WG_RS_IN_192 "%96", "%97", "%98", "%99", "%100", "%101"
#define FJ_WG_RS_IN_200 "%100", "%101", "%102", "%103", "%104", "%105"
#define FJ_WG_RS_IN_208 "%104", "%105", "%106", "%107", "%108", "%109"
#define FJ_WG_RS_IN_216 "%108", "%109", "%110", "%111", "%112", "%113"
#define FJ_WG_RS_IN_224 "%112", "%113", "%114", "%115", "%116", "%117"
#define FJ_WG_RS_IN_232 "%116", "%117", "%118", "%119", "%120", "%121"
#define FJ_WG_RS_IN_240 "%120", "%121", "%122", "%123", "%124", "%125"
#define FJ_WG_RS_IN_248 "%124", "%125", "%126", "%127", "%128", "%129"
#define FJ_WG_RS_IN_256 "%128", "%129", "%130", "%131", "%132", "%133"

namespace fjwg {

/* A shared-memory matrix descriptor (PTX ISA, "Matrix Descriptor Format"):
 * the start address, the leading and stride byte offsets (16-byte units)
 * and the swizzle mode in bits 62-63. */
enum { SWIZZLE_128B = 1, SWIZZLE_64B = 2, SWIZZLE_32B = 3 };
__device__ __forceinline__ unsigned long long desc(unsigned addr, unsigned lbo, unsigned sbo,
                                                   unsigned mode)
{
    return (unsigned long long)((addr & 0x3ffffu) >> 4) | ((unsigned long long)(lbo >> 4) << 16) |
           ((unsigned long long)(sbo >> 4) << 32) | ((unsigned long long)mode << 62);
}

/* The swizzle mode of a row of `bytes` bytes (128, 64 or 32). */
__host__ __device__ constexpr unsigned swizzle_of(int bytes)
{
    return bytes == 128 ? SWIZZLE_128B : bytes == 64 ? SWIZZLE_64B : SWIZZLE_32B;
}

__device__ __forceinline__ void fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wait()
{
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

/* Ties each register of r to this point of the program, so that the
   compiler neither reads an accumulator before the wait that completes it
   nor moves a write past the wgmma that reads it. */
template <int R>
__device__ __forceinline__ void fence_regs(float (&r)[R])
{
#pragma unroll
    for (int i = 0; i < R; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int R>
__device__ __forceinline__ void fence_regs(unsigned (&r)[R][4])
{
#pragma unroll
    for (int i = 0; i < R; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) asm volatile("" : "+r"(r[i][j])::"memory");
}

/* The asm text of one wgmma given its operand names (string literals). */
#define FJ_WG_SS_TEXT(N, A, B, P)                                                                \
    "{\n.reg .pred p;\nsetp.ne.b32 p, " P ", 0;\n"                                               \
    "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." FJ_WGMMA_AB " {" FJ_WG_NAMES_##N "}, " A   \
    ", " B ", p, 1, 1, 0, 0;\n}\n"
#define FJ_WG_RS_TEXT(N, A0, A1, A2, A3, B, P)                                                   \
    "{\n.reg .pred p;\nsetp.ne.b32 p, " P ", 0;\n"                                               \
    "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." FJ_WGMMA_AB " {" FJ_WG_NAMES_##N "}, {" A0 \
    ", " A1 ", " A2 ", " A3 "}, " B ", p, 1, 1, 1;\n}\n"
#define FJ_WG_SS_TEXT_(N, ...) FJ_WG_SS_TEXT(N, __VA_ARGS__)
#define FJ_WG_RS_TEXT_(N, ...) FJ_WG_RS_TEXT(N, __VA_ARGS__)

/* ss_n<N>(d, a, b, accumulate): D (+)= A B, m64nNk16, A and B K-major in
   shared memory (descriptors); accumulate 0 overwrites D. */
#define FJ_WG_DEFINE_SS(N)                                                                      \
    __device__ __forceinline__ void ss_n##N(float *d, unsigned long long a, unsigned long long b, \
                                            int accumulate)                                     \
    {                                                                                           \
        asm volatile(FJ_WG_SS_TEXT_(N, FJ_WG_SS_IN_##N)                                         \
                     : FJ_WG_ACC_##N(d)                                                         \
                     : "l"(a), "l"(b), "r"(accumulate));                                        \
    }
/* rs_n<N>(d, a0..a3, b): D += A B, m64nNk16, A from registers (the
   mma.sync A fragment of each warp's 16 rows), B MN-major in shared memory
   (read transposed). */
#define FJ_WG_DEFINE_RS(N)                                                                      \
    __device__ __forceinline__ void rs_n##N(float *d, unsigned a0, unsigned a1, unsigned a2,      \
                                            unsigned a3, unsigned long long b)                  \
    {                                                                                           \
        asm volatile(FJ_WG_RS_TEXT_(N, FJ_WG_RS_IN_##N)                                         \
                     : FJ_WG_ACC_##N(d)                                                         \
                     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(b), "r"(1));                     \
    }
/* The argument is expanded first (FJ_BLOCK_N to its number). */
#define FJ_WG_DEFINE_SS_OF(N) FJ_WG_DEFINE_SS(N)
#define FJ_WG_DEFINE_RS_OF(N) FJ_WG_DEFINE_RS(N)

} /* namespace fjwg */

#endif /* FJ_WGMMA_CUH */
