/* Renders the CUDA source of a kernel from its template and descriptor:
 * a name/version comment, the descriptor as macros, fwd_params.h,
 * common.cuh, then the template (kernel_templates/README.md). Deterministic:
 * the same descriptor always gives the same bytes (they are hashed into the
 * cache key). */
#ifndef FJ_CODEGEN_H
#define FJ_CODEGEN_H

#include <stdbool.h>
#include <stddef.h>

#include "cuda/jit/kernel_desc.h"

/* *source is malloc'd and NUL-terminated; *len excludes the NUL. */
fj_status fj_codegen_render(const fj_kernel_desc *k, char **source, size_t *len);

/* The kernel entry point's name in the rendered source ("fj_flash_fwd"). */
const char *fj_codegen_entry(const fj_kernel_desc *k);

/* Whether the kernel's template uses instructions of its arch alone (wgmma,
 * setmaxnreg on sm_90), so that it must be compiled for "sm_90a". */
bool fj_codegen_arch_specific(const fj_kernel_desc *k);

#endif
