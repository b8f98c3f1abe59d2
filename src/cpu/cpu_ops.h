/* The two CPU backends' ops tables, which their registry rows
 * (cpu_backends.c) point to. */
#ifndef FJ_CPU_OPS_H
#define FJ_CPU_OPS_H

#include "backend.h"

extern const fj_backend_ops fj_cpu_tiled_ops;     /* src/cpu/tiled.c */
extern const fj_backend_ops fj_cpu_reference_ops; /* src/cpu/reference.c */

/* Their plans for variable-length batches and paged KV caches
   (src/cpu/varlen.c, src/cpu/paged.c): each sequence through a plan of the
   ops above, or, for a decode-shaped paged cache on cpu, the whole batch
   through the decode path (src/cpu/decode.c). */
extern const fj_backend_ops fj_cpu_tiled_sequence_ops;
extern const fj_backend_ops fj_cpu_reference_sequence_ops;

/* The entries all four tables share (backend.h): host memory, copies that
   are memcpy, a synchronize with nothing to wait for, fj_merge on the CPU. */
#define FJ_CPU_SHARED_OPS                                                                        \
    .mem_alloc = fj_cpu_mem_alloc, .mem_free = fj_cpu_mem_free, .copy_to_device = fj_cpu_memcpy, \
    .copy_to_host = fj_cpu_memcpy, .synchronize = fj_cpu_synchronize, .merge = fj_cpu_merge

#endif
