/* errors.c - the one place that maps error codes to wire names and texts. */
#include <string.h>
#include "errors.h"

struct code_entry { int code; const char *wire; const char *text; };

static const struct code_entry code_table[] = {
#define COORD_X_ROW(name, value, wire, text) { value, wire, text },
    COORD_ERRORS(COORD_X_ROW)
#undef COORD_X_ROW
};

static const struct code_entry *find_code(int code)
{
    for (size_t i = 0; i < sizeof code_table / sizeof code_table[0]; i++)
        if (code_table[i].code == code)
            return &code_table[i];
    return NULL;
}

const char *coord_code_name(int code)
{
    const struct code_entry *e = find_code(code);
    return e ? e->wire : NULL;
}

const char *coord_code_text(int code)
{
    if (code == COORD_OK)
        return "success";
    const struct code_entry *e = find_code(code);
    return e ? e->text : "unknown error";
}

int coord_code_from_name(const char *name, size_t len)
{
    for (size_t i = 0; i < sizeof code_table / sizeof code_table[0]; i++) {
        const char *w = code_table[i].wire;
        if (w && strlen(w) == len && memcmp(w, name, len) == 0)
            return code_table[i].code;
    }
    return COORD_EUNKNOWN;
}
