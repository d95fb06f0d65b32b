/* skey.c - see skey.h. */
#include <stdlib.h>
#include "skey.h"

size_t skey_make(uint8_t **out, const uint8_t *scope, uint32_t scope_len,
                 const uint8_t *name, size_t name_len)
{
    size_t n = skey_size(scope_len, name_len);
    uint8_t *k = malloc(n);
    if (!k)
        return 0;
    *out = k;
    return skey_write(k, scope, scope_len, name, name_len);
}
