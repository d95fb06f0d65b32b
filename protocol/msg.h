/* msg.h - decoding a validated frame with msgpack-c, and typed access to its
 * fields with error texts fit for a BAD_REQUEST reply.
 *
 * Strings and bins point into the frame buffer: they live as long as the
 * frame does, carry a length, and are not NUL-terminated. */
#ifndef COORD_PROTO_MSG_H
#define COORD_PROTO_MSG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <msgpack.h>
#include "frame.h"

typedef struct coord_bytes {
    const uint8_t *ptr;
    uint32_t len;
} coord_bytes;

/* A decoded frame.  The zone is reused from frame to frame. */
typedef struct coord_msg {
    msgpack_zone zone;
    msgpack_object root;
    const msgpack_object_map *map;   /* root.via.map once parsed */
} coord_msg;

int coord_msg_init(coord_msg *m);          /* 0, or -1 out of memory */
void coord_msg_destroy(coord_msg *m);
/* Validates body (see coord_frame_validate) and decodes it.  Returns
 * COORD_FRAME_OK or a COORD_FRAME_* status.  The result points into body. */
int coord_msg_parse(coord_msg *m, const uint8_t *body, size_t len);

/* The value stored under key in map, or NULL. */
const msgpack_object *coord_map_find(const msgpack_object_map *map,
                                     const char *key);

/* Field reader: reads several fields and keeps the first problem as text
 * ("rid: missing", "mode: expected string").  A nil value counts as absent,
 * so optional fields may be sent as nil. */
typedef struct coord_fields {
    const msgpack_object_map *map;   /* decoded by msgpack-c, or ... */
    const coord_index *idx;          /* ... indexed raw bytes (the broker) */
    const char *prefix;      /* "error." for nested maps, else "" */
    bool failed;
    char err[128];
} coord_fields;

void coord_fields_init(coord_fields *f, const msgpack_object_map *map);
/* Fields of a frame indexed by coord_frame_index (idx must outlive f). */
void coord_fields_init_index(coord_fields *f, const coord_index *idx);
/* Each getter returns true when the field was present and well typed.  A
 * missing required field or any wrongly typed field sets f->failed. */
bool coord_field_uint_n(coord_fields *f, const char *key, size_t klen, bool required,
                      uint64_t *out);
bool coord_field_bool_n(coord_fields *f, const char *key, size_t klen, bool required,
                      bool *out);
/* str: a MessagePack str or bin (names may hold any bytes, NUL included). */
bool coord_field_str_n(coord_fields *f, const char *key, size_t klen, bool required,
                     coord_bytes *out);
/* bin: a MessagePack bin or str. */
bool coord_field_bin_n(coord_fields *f, const char *key, size_t klen, bool required,
                     coord_bytes *out);
/* A nested map, read with coord_fields_nested. */
bool coord_field_map_n(coord_fields *f, const char *key, size_t klen, bool required,
                     const msgpack_object_map **out);
void coord_fields_nested(coord_fields *child, const coord_fields *parent,
                         const char *key, const msgpack_object_map *map);
/* A nested map as a child reader, for either kind of parent: *store holds
 * the child's index when the parent is indexed (it must outlive child). */
bool coord_field_nested_n(coord_fields *f, const char *key, size_t klen, bool required,
                        coord_index *store, coord_fields *child);
/* True when key is present with the value nil (which the getters treat as
 * absent): "back to the default" where an op tells the two apart. */
bool coord_field_nil_n(coord_fields *f, const char *key, size_t klen);
/* The getters by a key's C string: the length of a literal key is folded
 * at compile time, so the lookups never measure it. */
#define coord_field_uint(f, key, required, out) \
    coord_field_uint_n((f), (key), strlen(key), (required), (out))
#define coord_field_bool(f, key, required, out) \
    coord_field_bool_n((f), (key), strlen(key), (required), (out))
#define coord_field_str(f, key, required, out) \
    coord_field_str_n((f), (key), strlen(key), (required), (out))
#define coord_field_bin(f, key, required, out) \
    coord_field_bin_n((f), (key), strlen(key), (required), (out))
#define coord_field_map(f, key, required, out) \
    coord_field_map_n((f), (key), strlen(key), (required), (out))
#define coord_field_nested(f, key, required, store, child) \
    coord_field_nested_n((f), (key), strlen(key), (required), (store), (child))
#define coord_field_nil(f, key) coord_field_nil_n((f), (key), strlen(key))
/* The index slot bit of a key (a literal's folds at compile time), and
 * whether no key of a mask of them can be in f: a frame indexed whole
 * with none of their slots taken, so their getters would all find them
 * absent.  Optional fields many requests leave out are skipped so. */
static inline uint64_t coord_key_bit(const char *key)
{
    return (uint64_t)1 << coord_index_slot(strlen(key), (const uint8_t *)key);
}
static inline bool coord_fields_lack(const coord_fields *f, uint64_t mask)
{
    return f->idx && f->idx->complete && !(f->idx->seen & mask);
}
/* Marks a field as refused for a reason other than its type. */
void coord_fields_fail(coord_fields *f, const char *key, const char *why);

/* Compare bytes with a C string (inline: a literal's length and the
 * comparison fold at compile time). */
static inline bool coord_bytes_eq(coord_bytes b, const char *s)
{
    size_t n = strlen(s);
    return b.len == n && (n == 0 || memcmp(b.ptr, s, n) == 0);
}

#endif
