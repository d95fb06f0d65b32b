/* errors.h - look-ups over the error table of coord-codes.h. */
#ifndef COORD_PROTO_ERRORS_H
#define COORD_PROTO_ERRORS_H

#include <stddef.h>
#include "coord-codes.h"

/* Wire name of a protocol code ("FENCED"), or NULL for library-only codes. */
const char *coord_code_name(int code);
/* Short human text for any code; never NULL. */
const char *coord_code_text(int code);
/* Code for a wire name of length len; COORD_EUNKNOWN when not in the table. */
int coord_code_from_name(const char *name, size_t len);

#endif
