/* The machine's read bandwidth for given bytes, measured the way the decode
 * path reads them: `threads` threads each stream an equal share once, with
 * 64-byte vector loads, and nothing is written. The anchor for the decode
 * rows of bench_cpu_tiled and tools/compare_torch_cpu.py (which loads this as
 * the shared module libfjt_read.so through ctypes). */
#ifndef FJT_READ_BANDWIDTH_H
#define FJT_READ_BANDWIDTH_H

#include <stddef.h>

/* Reads the n buffers (bufs[i], bytes[i] each; any alignment) `passes`
 * times; seconds[p] gets pass p's time, from a barrier that every thread has
 * reached (thread start-up excluded) to the last thread's end. Returns 0, or
 * -1 when threads cannot be started (threads in 1..256, passes >= 1). */
int fjt_read_seconds(const void *const *bufs, const size_t *bytes, int n, int threads, int passes,
                     double *seconds);

#endif
