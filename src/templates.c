#include "templates.h"

#include <string.h>

const fj_template *fj_template_find(const char *name)
{
    for (const fj_template *t = fj_templates; t->name; t++)
        if (!strcmp(t->name, name)) return t;
    return NULL;
}
