/* Whether the host hot loops (the CPU backends', fj_convert's) are built as
 * function multiversions (target_clones: an AVX-512, an AVX2 and a baseline
 * clone, and an ifunc resolver that picks one when the library is loaded).
 * FJ_MULTIVERSION is 1 only where that works:
 *  - GCC on x86-64 ELF. clang 14 rejects the clones of a function whose
 *    always-inline vector helpers return 32-byte vectors ("AVX vector return
 *    without 'avx' enabled changes the ABI"), so a clang build compiles the
 *    baseline code alone;
 *  - not under ThreadSanitizer: the resolvers run while the dynamic loader
 *    relocates, before the TSan runtime is initialized, and the instrumented
 *    resolver crashed every TSan build before main. (AddressSanitizer builds
 *    keep the clones: they run, and CI's ASan pass then checks the clone this
 *    CPU takes.)
 * -DFJ_NO_MULTIVERSION turns it off anywhere. */
#ifndef FJ_MULTIVERSION_H
#define FJ_MULTIVERSION_H

#if defined(__SANITIZE_THREAD__)
#define FJ_THREAD_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define FJ_THREAD_SANITIZER 1
#endif
#endif

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__ELF__) && \
    !defined(FJ_NO_MULTIVERSION) && !defined(FJ_THREAD_SANITIZER)
#define FJ_MULTIVERSION 1
#else
#define FJ_MULTIVERSION 0
#endif

#endif
