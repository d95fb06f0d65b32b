/* skey.h - the scoped key, the one representation of a name in a scope.
 *
 * Every lock name, flight and record key, workstream and channel lives in
 * the scope of the connection that named it (hello's scope).  Its key is
 *
 *     [scope length: 4 bytes big-endian][scope bytes][name bytes]
 *
 * so keys of different scopes never compare equal and a scope's keys sort
 * together (records.list and purge walk them as one LMDB range).  The same
 * bytes key the hash tables and the LMDB databases.  A key is plain bytes
 * with a length: whoever holds one owns it (skey_make allocates, the
 * caller frees with free()).  Nothing else in the broker decodes the
 * layout: the accessors below are the only readers. */
#ifndef COORD_SKEY_H
#define COORD_SKEY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "frame.h"

#define SKEY_HEADER 4u

static inline size_t skey_size(uint32_t scope_len, size_t name_len)
{
    return SKEY_HEADER + (size_t)scope_len + name_len;
}

/* Writes the key of (scope, name) to out (skey_size bytes); returns its length. */
static inline size_t skey_write(uint8_t *out, const uint8_t *scope, uint32_t scope_len,
                                const uint8_t *name, size_t name_len)
{
    coord_put_be32(out, scope_len);
    if (scope_len)
        memcpy(out + SKEY_HEADER, scope, scope_len);
    if (name_len)
        memcpy(out + SKEY_HEADER + scope_len, name, name_len);
    return skey_size(scope_len, name_len);
}

/* A fresh key in *out (the caller frees it); returns its length, 0 when out
 * of memory. */
size_t skey_make(uint8_t **out, const uint8_t *scope, uint32_t scope_len,
                 const uint8_t *name, size_t name_len);

static inline uint32_t skey_scope_len(const uint8_t *k)
{
    return coord_be32(k);
}

static inline const uint8_t *skey_scope(const uint8_t *k)
{
    return k + SKEY_HEADER;
}

/* The name part of a key of klen bytes; its length in *len. */
static inline const uint8_t *skey_name(const uint8_t *k, size_t klen, size_t *len)
{
    size_t off = SKEY_HEADER + skey_scope_len(k);
    *len = klen - off;
    return k + off;
}

/* True when the key belongs to scope. */
static inline bool skey_in_scope(const uint8_t *k, const uint8_t *scope, uint32_t scope_len)
{
    return skey_scope_len(k) == scope_len &&
           (scope_len == 0 || memcmp(k + SKEY_HEADER, scope, scope_len) == 0);
}

static inline bool skey_equal(const uint8_t *a, size_t alen, const uint8_t *b, size_t blen)
{
    return alen == blen && memcmp(a, b, alen) == 0;
}

#endif
