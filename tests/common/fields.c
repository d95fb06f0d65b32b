/* fields.c - see fields.h.  Every failure names the key and says what was
 * found instead. */
#include <string.h>
#include "fields.h"

static const char *type_name(const msgpack_object *v)
{
    if (!v)
        return "missing";
    switch (v->type) {
    case MSGPACK_OBJECT_NIL: return "nil";
    case MSGPACK_OBJECT_BOOLEAN: return "a boolean";
    case MSGPACK_OBJECT_POSITIVE_INTEGER: return "a positive integer";
    case MSGPACK_OBJECT_NEGATIVE_INTEGER: return "a negative integer";
    case MSGPACK_OBJECT_STR: return "a str";
    case MSGPACK_OBJECT_BIN: return "a bin";
    case MSGPACK_OBJECT_ARRAY: return "an array";
    case MSGPACK_OBJECT_MAP: return "a map";
    default: return "of another type";
    }
}

/* The value under key when it has type t (or t2); else a failed check. */
static const msgpack_object *want(const char *file, int line,
                                  const msgpack_object_map *map, const char *key,
                                  msgpack_object_type t, msgpack_object_type t2,
                                  const char *what)
{
    const msgpack_object *v = map ? coord_map_find(map, key) : NULL;
    if (v && (v->type == t || v->type == t2))
        return v;
    check_count++;
    check_fail_at(file, line, "field \"%s\": wanted %s, %s%s", key, what,
                  v ? "found " : "", type_name(v));
    return NULL;
}

uint64_t field_uint(const char *file, int line, const msgpack_object_map *map,
                    const char *key)
{
    const msgpack_object *v = want(file, line, map, key, MSGPACK_OBJECT_POSITIVE_INTEGER,
                                   MSGPACK_OBJECT_POSITIVE_INTEGER, "a positive integer");
    return v ? v->via.u64 : UINT64_MAX;
}

bool field_bool(const char *file, int line, const msgpack_object_map *map,
                const char *key)
{
    const msgpack_object *v = want(file, line, map, key, MSGPACK_OBJECT_BOOLEAN,
                                   MSGPACK_OBJECT_BOOLEAN, "a boolean");
    return v && v->via.boolean;
}

bool field_str_is(const char *file, int line, const msgpack_object_map *map,
                  const char *key, const void *s, size_t n, bool bin_only)
{
    const msgpack_object *v = bin_only
        ? want(file, line, map, key, MSGPACK_OBJECT_BIN, MSGPACK_OBJECT_BIN, "a bin")
        : want(file, line, map, key, MSGPACK_OBJECT_STR, MSGPACK_OBJECT_BIN, "a str or bin");
    /* str and bin share the layout of msgpack_object_str */
    return v && v->via.str.size == n && (n == 0 || memcmp(v->via.str.ptr, s, n) == 0);
}

coord_bytes field_bytes(const char *file, int line, const msgpack_object_map *map,
                        const char *key)
{
    const msgpack_object *v = want(file, line, map, key, MSGPACK_OBJECT_STR,
                                   MSGPACK_OBJECT_BIN, "a str or bin");
    coord_bytes b = { (const uint8_t *)"", 0 };
    if (v) {
        b.ptr = (const uint8_t *)v->via.str.ptr;
        b.len = v->via.str.size;
    }
    return b;
}

static const msgpack_object_array empty_array;
static const msgpack_object_map empty_map;

const msgpack_object_array *field_array(const char *file, int line,
                                        const msgpack_object_map *map, const char *key)
{
    const msgpack_object *v = want(file, line, map, key, MSGPACK_OBJECT_ARRAY,
                                   MSGPACK_OBJECT_ARRAY, "an array");
    return v ? &v->via.array : &empty_array;
}

const msgpack_object_map *field_map(const char *file, int line,
                                    const msgpack_object_map *map, const char *key)
{
    const msgpack_object *v = want(file, line, map, key, MSGPACK_OBJECT_MAP,
                                   MSGPACK_OBJECT_MAP, "a map");
    return v ? &v->via.map : &empty_map;
}

const msgpack_object_map *field_at(const char *file, int line,
                                   const msgpack_object_array *a, size_t i)
{
    if (a && i < a->size && a->ptr[i].type == MSGPACK_OBJECT_MAP)
        return &a->ptr[i].via.map;
    check_count++;
    if (!a || i >= a->size)
        check_fail_at(file, line, "element %zu of an array of %u", i,
                      a ? a->size : 0);
    else
        check_fail_at(file, line, "element %zu: wanted a map, found %s", i,
                      type_name(&a->ptr[i]));
    return &empty_map;
}

bool map_has(const msgpack_object_map *map, const char *key)
{
    return map && coord_map_find(map, key) != NULL;
}

bool msg_ok(const coord_msg *m)
{
    const msgpack_object *v = m->map ? coord_map_find(m->map, "ok") : NULL;
    return v && v->type == MSGPACK_OBJECT_BOOLEAN && v->via.boolean;
}

bool msg_code_is(const coord_msg *m, const char *code)
{
    const msgpack_object *v = m->map ? coord_map_find(m->map, "code") : NULL;
    return v && v->type == MSGPACK_OBJECT_STR && v->via.str.size == strlen(code) &&
           memcmp(v->via.str.ptr, code, v->via.str.size) == 0;
}
