/* The kernel templates embedded at build time (kernel_templates/). */
#ifndef FJ_TEMPLATES_H
#define FJ_TEMPLATES_H

#include <stddef.h>

typedef struct fj_template {
    const char *name; /* file name, e.g. "flash_fwd.cu" */
    const char *text;
    size_t size;
} fj_template;

/* Terminated by an entry whose name is NULL. */
extern const fj_template fj_templates[];

/* The template of that file name, or NULL. */
const fj_template *fj_template_find(const char *name);

#endif
