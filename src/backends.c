/* The backend registry: one row per backend, in AUTO's order of preference. */
#include "backend.h"

const fj_backend_entry *const fj_backend_registry[] = {
    &fj_cuda_backend_entry,
    &fj_cpu_tiled_backend_entry,
    &fj_cpu_reference_backend_entry,
    NULL,
};

const fj_backend_entry *fj_backend_entry_of(fj_backend kind)
{
    for (const fj_backend_entry *const *e = fj_backend_registry; *e; e++)
        if ((*e)->kind == kind) return *e;
    return NULL;
}
