/* Files embedded in the library at build time by
 * kernel_templates/embed_templates.py: the kernel templates
 * (kernel_templates/) and the shipped tuning tables (src/tune/tables/), so
 * the library needs no files of its own at run time. */
#ifndef FJ_EMBEDDED_H
#define FJ_EMBEDDED_H

#include <stddef.h>

typedef struct fj_embedded_file {
    const char *name; /* file name, e.g. "flash_fwd.cu" */
    const char *text;
    size_t size;
} fj_embedded_file;

/* The kernel templates; terminated by an entry whose name is NULL. */
extern const fj_embedded_file fj_templates[];

/* The shipped tuning tables, likewise. */
extern const fj_embedded_file fj_tuning_tables[];

/* The kernel template of that file name, or NULL. */
const fj_embedded_file *fj_template_find(const char *name);

#endif
