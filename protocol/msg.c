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

static const msgpack_object *map_find_n(const msgpack_object_map *map,
                                        const char *key, size_t klen)
{
    for (uint32_t i = 0; i < map->size; i++) {
        const msgpack_object *k = &map->ptr[i].key;
        /* msgpack-c leaves ptr NULL for an empty str: no memcmp then */
        if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == klen &&
            (klen == 0 || memcmp(k->via.str.ptr, key, klen) == 0))
            return &map->ptr[i].val;
    }
    return NULL;
}

const msgpack_object *coord_map_find(const msgpack_object_map *map,
                                     const char *key)
{
    return map_find_n(map, key, strlen(key));
}

void coord_fields_init(coord_fields *f, const msgpack_object_map *map)
{
    f->map = map;
    f->idx = NULL;
    f->prefix = "";
    f->failed = false;
    f->err[0] = '\0';
}

void coord_fields_init_index(coord_fields *f, const coord_index *idx)
{
    coord_fields_init(f, NULL);
    f->idx = idx;
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

/* A field's value, from either backend. */
enum vtype { V_NIL, V_UINT, V_NEGINT, V_BOOL, V_STR, V_BIN, V_MAP, V_OTHER };
struct value {
    enum vtype type;
    uint64_t u;
    bool b;
    const uint8_t *ptr;          /* str, bin: bytes; map (raw): the map */
    uint32_t len;
    const msgpack_object_map *map;   /* map (msgpack backend) */
};

/* Decodes the scalar (or notes the map) at p, inside a validated frame. */
static void raw_value(const uint8_t *p, struct value *v)
{
    uint8_t b = p[0];
    memset(v, 0, sizeof *v);
    v->type = V_OTHER;
    if (b <= 0x7f) { v->type = V_UINT; v->u = b; }
    else if (b >= 0xe0) v->type = V_NEGINT;
    else if (b <= 0x8f || b == 0xde || b == 0xdf) { v->type = V_MAP; v->ptr = p; }
    else if (b >= 0xa0 && b <= 0xbf) { v->type = V_STR; v->len = b & 0x1f; v->ptr = p + 1; }
    else if (b == 0xc0) v->type = V_NIL;
    else if (b == 0xc2 || b == 0xc3) { v->type = V_BOOL; v->b = b == 0xc3; }
    else if (b >= 0xcc && b <= 0xcf) { v->type = V_UINT; v->u = coord_read_be(p + 1, 1u << (b - 0xcc)); }
    else if (b >= 0xd0 && b <= 0xd3) {
        unsigned n = 1u << (b - 0xd0);
        uint64_t raw = coord_read_be(p + 1, n);
        bool neg = (p[1] & 0x80) != 0;  /* big-endian: the first byte's top bit */
        if (neg) {
            v->type = V_NEGINT;
        } else {
            v->type = V_UINT;
            v->u = raw;
        }
    } else if (b >= 0xd9 && b <= 0xdb) {
        unsigned n = 1u << (b - 0xd9);
        v->type = V_STR;
        v->len = (uint32_t)coord_read_be(p + 1, n);
        v->ptr = p + 1 + n;
    } else if (b >= 0xc4 && b <= 0xc6) {
        unsigned n = 1u << (b - 0xc4);
        v->type = V_BIN;
        v->len = (uint32_t)coord_read_be(p + 1, n);
        v->ptr = p + 1 + n;
    }
}

static void object_value(const msgpack_object *o, struct value *v)
{
    memset(v, 0, sizeof *v);
    switch (o->type) {
    case MSGPACK_OBJECT_NIL: v->type = V_NIL; break;
    case MSGPACK_OBJECT_POSITIVE_INTEGER: v->type = V_UINT; v->u = o->via.u64; break;
    case MSGPACK_OBJECT_NEGATIVE_INTEGER: v->type = V_NEGINT; break;
    case MSGPACK_OBJECT_BOOLEAN: v->type = V_BOOL; v->b = o->via.boolean; break;
    case MSGPACK_OBJECT_STR:
        v->type = V_STR;
        v->ptr = (const uint8_t *)o->via.str.ptr;
        v->len = o->via.str.size;
        break;
    case MSGPACK_OBJECT_BIN:
        v->type = V_BIN;
        v->ptr = (const uint8_t *)o->via.bin.ptr;
        v->len = o->via.bin.size;
        break;
    case MSGPACK_OBJECT_MAP: v->type = V_MAP; v->map = &o->via.map; break;
    default: v->type = V_OTHER; break;
    }
    /* msgpack-c gives an empty str a NULL ptr; callers may memcpy or
     * memcmp ptr with len 0, which is undefined with NULL */
    if ((v->type == V_STR || v->type == V_BIN) && !v->ptr)
        v->ptr = (const uint8_t *)"";
}

/* Key bytes equal: the keys the broker looks up are a few bytes long, so
 * two (overlapping) loads of four bytes each side from 4 to 8 bytes, a
 * loop below, memcmp above. */
static inline bool key_eq(const uint8_t *a, const char *b, size_t n)
{
    if (n >= 4 && n <= 8) {
        uint32_t x, y, z, w;
        memcpy(&x, a, 4);
        memcpy(&y, b, 4);
        memcpy(&z, a + n - 4, 4);
        memcpy(&w, b + n - 4, 4);
        return x == y && z == w;
    }
    if (n > 8)
        return memcmp(a, b, n) == 0;
    for (size_t i = 0; i < n; i++)
        if (a[i] != (uint8_t)b[i])
            return false;
    return true;
}

/* The pairs of a map with more keys than its index holds, past the
 * indexed ones: the value of key there, or NULL. */
static const uint8_t *index_find_rest(const coord_index *idx, const char *key, size_t klen)
{
    const uint8_t *end = idx->map + idx->map_len;
    const uint8_t *p = idx->f[idx->n - 1].val;
    p += coord_elem_size(p, (size_t)(end - p));
    while (p < end) {
        struct value k;
        raw_value(p, &k);
        if (k.type != V_STR)
            return NULL;              /* not after coord_frame_index */
        const uint8_t *val = k.ptr + k.len;
        if (k.type == V_STR && k.len == klen && (klen == 0 || memcmp(k.ptr, key, klen) == 0))
            return val;
        p = val + coord_elem_size(val, (size_t)(end - val));
    }
    return NULL;
}

/* The raw value of key in an index: the indexed keys, and for a map with
 * more keys than the index holds, a walk over the rest of its pairs.
 * Inline in the getters: most lookups end at the slot test. */
static inline __attribute__((always_inline)) const uint8_t *
index_find(const coord_index *idx, const char *key, size_t klen)
{
    unsigned slot = coord_index_slot(klen, (const uint8_t *)key);
    uint32_t i = 0;
    if (idx->seen & ((uint64_t)1 << slot))
        i = idx->first[slot];         /* no indexed key before it has its slot */
    else if (idx->complete)
        return NULL;
    else
        i = idx->n;                   /* none indexed: the walk below */
    for (; i < idx->n; i++)
        if (idx->f[i].klen == klen && key_eq(idx->f[i].key, key, klen))
            return idx->f[i].val;
    if (idx->complete || idx->n == 0)
        return NULL;
    return index_find_rest(idx, key, klen);
}

/* Looks key up; nil is absent.  Returns false when absent (recording a
 * missing required field). */
static bool lookup(coord_fields *f, const char *key, size_t klen, bool required,
                   struct value *v)
{
    bool found = false;
    if (f->idx) {
        const uint8_t *raw = index_find(f->idx, key, klen);
        if (raw) {
            raw_value(raw, v);
            found = true;
        }
    } else if (f->map) {
        const msgpack_object *o = map_find_n(f->map, key, klen);
        if (o) {
            object_value(o, v);
            found = true;
        }
    }
    if (found && v->type == V_NIL)
        found = false;
    if (!found && required)
        coord_fields_fail(f, key, "missing");
    return found;
}

bool coord_field_nil_n(coord_fields *f, const char *key, size_t klen)
{
    struct value v;
    if (f->idx) {
        const uint8_t *raw = index_find(f->idx, key, klen);
        if (!raw)
            return false;
        raw_value(raw, &v);
    } else if (f->map) {
        const msgpack_object *o = map_find_n(f->map, key, klen);
        if (!o)
            return false;
        object_value(o, &v);
    } else {
        return false;
    }
    return v.type == V_NIL;
}

/* The indexed backend's value of key, or NULL when absent (nil included):
 * a missing required field is recorded. */
static inline __attribute__((always_inline)) const uint8_t *
index_lookup(coord_fields *f, const char *key, size_t klen, bool required)
{
    const uint8_t *raw = index_find(f->idx, key, klen);
    if (raw && raw[0] != 0xc0)
        return raw;
    if (required)
        coord_fields_fail(f, key, "missing");
    return NULL;
}

bool coord_field_uint_n(coord_fields *f, const char *key, size_t klen, bool required,
                      uint64_t *out)
{
    struct value v;
    if (f->idx) {
        /* the forms an unsigned integer comes in, read in place */
        const uint8_t *p = index_lookup(f, key, klen, required);
        if (!p)
            return false;
        uint8_t b = p[0];
        if (b <= 0x7f) {
            *out = b;
            return true;
        }
        if (b >= 0xcc && b <= 0xcf) {
            *out = coord_read_be(p + 1, 1u << (b - 0xcc));
            return true;
        }
        raw_value(p, &v);
    } else if (!lookup(f, key, klen, required, &v)) {
        return false;
    }
    if (v.type != V_UINT) {
        coord_fields_fail(f, key, "expected unsigned integer");
        return false;
    }
    *out = v.u;
    return true;
}

bool coord_field_bool_n(coord_fields *f, const char *key, size_t klen, bool required,
                      bool *out)
{
    struct value v;
    if (f->idx) {
        const uint8_t *p = index_lookup(f, key, klen, required);
        if (!p)
            return false;
        if (p[0] == 0xc2 || p[0] == 0xc3) {
            *out = p[0] == 0xc3;
            return true;
        }
        raw_value(p, &v);
    } else if (!lookup(f, key, klen, required, &v)) {
        return false;
    }
    if (v.type != V_BOOL) {
        coord_fields_fail(f, key, "expected boolean");
        return false;
    }
    *out = v.b;
    return true;
}

static inline __attribute__((always_inline)) bool
field_bytes(coord_fields *f, const char *key, size_t klen, bool required, coord_bytes *out,
            const char *expected)
{
    struct value v;
    if (f->idx) {
        const uint8_t *p = index_lookup(f, key, klen, required);
        if (!p)
            return false;
        if (p[0] >= 0xa0 && p[0] <= 0xbf) {      /* fixstr, nearly every name */
            out->ptr = p + 1;
            out->len = p[0] & 0x1f;
            return true;
        }
        raw_value(p, &v);
    } else if (!lookup(f, key, klen, required, &v)) {
        return false;
    }
    if (v.type != V_STR && v.type != V_BIN) {
        coord_fields_fail(f, key, expected);
        return false;
    }
    out->ptr = v.ptr;
    out->len = v.len;
    return true;
}

bool coord_field_str_n(coord_fields *f, const char *key, size_t klen, bool required,
                     coord_bytes *out)
{
    return field_bytes(f, key, klen, required, out, "expected string");
}

bool coord_field_bin_n(coord_fields *f, const char *key, size_t klen, bool required,
                     coord_bytes *out)
{
    return field_bytes(f, key, klen, required, out, "expected binary");
}

bool coord_field_map_n(coord_fields *f, const char *key, size_t klen, bool required,
                     const msgpack_object_map **out)
{
    struct value v;
    if (!lookup(f, key, klen, required, &v))
        return false;
    if (v.type != V_MAP || !v.map) {
        coord_fields_fail(f, key, "expected map");
        return false;
    }
    *out = v.map;
    return true;
}

bool coord_field_nested_n(coord_fields *f, const char *key, size_t klen, bool required,
                        coord_index *store, coord_fields *child)
{
    struct value v;
    if (!lookup(f, key, klen, required, &v))
        return false;
    if (v.type != V_MAP) {
        coord_fields_fail(f, key, "expected map");
        return false;
    }
    if (v.map) {
        coord_fields_nested(child, f, key, v.map);
        return true;
    }
    size_t avail = f->idx->map_len - (size_t)(v.ptr - f->idx->map);
    if (coord_index_nested(v.ptr, avail, store) != COORD_FRAME_OK) {
        coord_fields_fail(f, key, "malformed map");
        return false;
    }
    coord_fields_init_index(child, store);
    child->prefix = key;
    return true;
}
