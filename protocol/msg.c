/* msg.c - decode validated frames and read typed fields from them. */
#include <stdio.h>
#include <string.h>
#include "frame.h"
#include "msg.h"

int coord_msg_init(coord_msg *m)
{
    memset(m, 0, sizeof *m);
    return msgpack_zone_init(&m->zone, 4096) ? 0 : -1;
}

void coord_msg_destroy(coord_msg *m)
{
    msgpack_zone_destroy(&m->zone);
}

int coord_msg_parse(coord_msg *m, const uint8_t *body, size_t len)
{
    int st = coord_frame_validate(body, len, COORD_MAX_DEPTH);
    if (st != COORD_FRAME_OK)
        return st;
    msgpack_zone_clear(&m->zone);
    size_t off = 0;
    msgpack_unpack_return ret =
        msgpack_unpack((const char *)body, len, &off, &m->zone, &m->root);
    if (ret == MSGPACK_UNPACK_NOMEM_ERROR)
        return COORD_FRAME_NOMEM;
    /* the walk accepted it, so anything else is a disagreement we refuse */
    if (ret != MSGPACK_UNPACK_SUCCESS || off != len ||
        m->root.type != MSGPACK_OBJECT_MAP)
        return COORD_FRAME_INVALID;
    m->map = &m->root.via.map;
    return COORD_FRAME_OK;
}

const msgpack_object *coord_map_find(const msgpack_object_map *map,
                                     const char *key)
{
    size_t klen = strlen(key);
    for (uint32_t i = 0; i < map->size; i++) {
        const msgpack_object *k = &map->ptr[i].key;
        /* msgpack-c leaves ptr NULL for an empty str: no memcmp then */
        if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == klen &&
            (klen == 0 || memcmp(k->via.str.ptr, key, klen) == 0))
            return &map->ptr[i].val;
    }
    return NULL;
}

bool coord_bytes_eq(coord_bytes b, const char *s)
{
    size_t n = strlen(s);
    return b.len == n && (n == 0 || memcmp(b.ptr, s, n) == 0);
}

void coord_fields_init(coord_fields *f, const msgpack_object_map *map)
{
    f->map = map;
    f->prefix = "";
    f->failed = false;
    f->err[0] = '\0';
}

void coord_fields_nested(coord_fields *child, const coord_fields *parent,
                         const char *key, const msgpack_object_map *map)
{
    coord_fields_init(child, map);
    /* prefix must outlive child; key is a literal at every call site */
    child->prefix = key;
    (void)parent;
}

void coord_fields_fail(coord_fields *f, const char *key, const char *why)
{
    if (f->failed)
        return;
    f->failed = true;
    if (f->prefix[0])
        snprintf(f->err, sizeof f->err, "%s.%s: %s", f->prefix, key, why);
    else
        snprintf(f->err, sizeof f->err, "%s: %s", key, why);
}

/* Looks key up; nil is absent.  Returns the value or NULL (and records a
 * missing required field). */
static const msgpack_object *lookup(coord_fields *f, const char *key,
                                    bool required)
{
    const msgpack_object *v = f->map ? coord_map_find(f->map, key) : NULL;
    if (v && v->type == MSGPACK_OBJECT_NIL)
        v = NULL;
    if (!v && required)
        coord_fields_fail(f, key, "missing");
    return v;
}

bool coord_field_uint(coord_fields *f, const char *key, bool required,
                      uint64_t *out)
{
    const msgpack_object *v = lookup(f, key, required);
    if (!v)
        return false;
    if (v->type != MSGPACK_OBJECT_POSITIVE_INTEGER) {
        coord_fields_fail(f, key, "expected unsigned integer");
        return false;
    }
    *out = v->via.u64;
    return true;
}

bool coord_field_bool(coord_fields *f, const char *key, bool required,
                      bool *out)
{
    const msgpack_object *v = lookup(f, key, required);
    if (!v)
        return false;
    if (v->type != MSGPACK_OBJECT_BOOLEAN) {
        coord_fields_fail(f, key, "expected boolean");
        return false;
    }
    *out = v->via.boolean;
    return true;
}

static bool field_bytes(coord_fields *f, const char *key, bool required,
                        coord_bytes *out, const char *expected)
{
    const msgpack_object *v = lookup(f, key, required);
    if (!v)
        return false;
    if (v->type == MSGPACK_OBJECT_STR) {
        /* msgpack-c gives an empty str a NULL ptr; callers may memcpy or
         * memcmp ptr with len 0, which is undefined with NULL */
        out->ptr = v->via.str.ptr ? (const uint8_t *)v->via.str.ptr
                                  : (const uint8_t *)"";
        out->len = v->via.str.size;
    } else if (v->type == MSGPACK_OBJECT_BIN) {
        out->ptr = (const uint8_t *)v->via.bin.ptr;
        out->len = v->via.bin.size;
    } else {
        coord_fields_fail(f, key, expected);
        return false;
    }
    return true;
}

bool coord_field_str(coord_fields *f, const char *key, bool required,
                     coord_bytes *out)
{
    return field_bytes(f, key, required, out, "expected string");
}

bool coord_field_bin(coord_fields *f, const char *key, bool required,
                     coord_bytes *out)
{
    return field_bytes(f, key, required, out, "expected binary");
}

bool coord_field_map(coord_fields *f, const char *key, bool required,
                     const msgpack_object_map **out)
{
    const msgpack_object *v = lookup(f, key, required);
    if (!v)
        return false;
    if (v->type != MSGPACK_OBJECT_MAP) {
        coord_fields_fail(f, key, "expected map");
        return false;
    }
    *out = &v->via.map;
    return true;
}
