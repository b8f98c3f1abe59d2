#include "embedded.h"

#include <string.h>

const fj_embedded_file *fj_template_find(const char *name)
{
    for (const fj_embedded_file *t = fj_templates; t->name; t++)
        if (!strcmp(t->name, name)) return t;
    return NULL;
}
