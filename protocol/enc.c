/* enc.c - frame encoder (see enc.h). */
#include <stdlib.h>
#include <string.h>
#include "enc.h"
#include "errors.h"

void coord_buf_init(coord_buf *b)
{
    b->data = NULL;
    b->len = b->cap = 0;
}

void coord_buf_free(coord_buf *b)
{
    free(b->data);
    coord_buf_init(b);
}

int coord_buf_reserve(coord_buf *b, size_t extra)
{
    if (b->cap - b->len >= extra)
        return 0;
    size_t need = b->len + extra;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need)
        cap *= 2;
    uint8_t *p = realloc(b->data, cap);
    if (!p)
        return -1;
    b->data = p;
    b->cap = cap;
    return 0;
}

int coord_buf_append(coord_buf *b, const void *p, size_t n)
{
    if (coord_buf_reserve(b, n) < 0)
        return -1;
    if (n)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    return 0;
}

void coord_buf_consume(coord_buf *b, size_t n)
{
    if (n >= b->len) {
        b->len = 0;
        return;
    }
    memmove(b->data, b->data + n, b->len - n);
    b->len -= n;
}

/* Room for at most n more bytes, not yet counted in the frame: the caller
 * writes what it needs and ends with set_end.  NULL (and failed) when out
 * of memory. */
static inline uint8_t *room_upto(coord_enc *e, size_t n)
{
    coord_buf *b = e->buf;
    if (e->failed)
        return NULL;
    if (b->cap - b->len < n && coord_buf_reserve(b, n) < 0) {
        e->failed = true;
        return NULL;
    }
    return b->data + b->len;
}

static inline void set_end(coord_enc *e, uint8_t *end)
{
    e->buf->len = (size_t)(end - e->buf->data);
}

/* Room for exactly n more bytes, counted in the frame, or NULL (and
 * failed). */
static inline uint8_t *room(coord_enc *e, size_t n)
{
    uint8_t *p = room_upto(e, n);
    if (p)
        set_end(e, p + n);
    return p;
}

static void put_be(uint8_t *p, uint64_t v, unsigned n)
{
    for (unsigned i = n; i-- > 0; v >>= 8)
        p[i] = (uint8_t)v;
}

/* One type byte followed by an n-byte big-endian value. */
static void write_typed(coord_enc *e, uint8_t type, uint64_t v, unsigned n)
{
    uint8_t *p = room(e, 1 + n);
    if (p) {
        p[0] = type;
        put_be(p + 1, v, n);
    }
}

#define put_uint coord_put_uint

/* A str of n bytes at p (room for 5 + n reserved); returns the end. */
static inline uint8_t *put_str(uint8_t *p, const void *s, size_t n)
{
    if (n < 32) {
        *p++ = (uint8_t)(0xa0 | n);
    } else if (n <= 0xff) {
        *p++ = 0xd9;
        *p++ = (uint8_t)n;
    } else if (n <= 0xffff) {
        *p++ = 0xda;
        *p++ = (uint8_t)(n >> 8);
        *p++ = (uint8_t)n;
    } else {
        *p++ = 0xdb;
        coord_put_be32(p, (uint32_t)n);
        p += 4;
    }
    if (n)
        memcpy(p, s, n);
    return p + n;
}


static void write_uint(coord_enc *e, uint64_t v)
{
    uint8_t *p = room_upto(e, 9);
    if (p)
        set_end(e, put_uint(p, v));
}

static void write_bytes(coord_enc *e, const void *s, size_t len)
{
    uint8_t *p = room(e, len);
    if (p && len)
        memcpy(p, s, len);
}

static void write_str(coord_enc *e, const void *s, size_t len)
{
    uint8_t *p = room_upto(e, 5 + len);
    if (p)
        set_end(e, put_str(p, s, len));
}

/* Bytes of a map's header: map16, its type byte and 16-bit count. */
#define MAP_HEADER 3

static void count_value(coord_enc *e)
{
    if (e->depth > 0 && !e->is_map[e->depth - 1])
        e->count[e->depth - 1]++;
}

static void open_container(coord_enc *e, bool is_map)
{
    count_value(e);
    if (e->depth >= COORD_MAX_DEPTH) {
        e->failed = true;
        return;
    }
    /* map16 (keys are ours, never many) / array32 (lists can be long) */
    e->open_at[e->depth] = e->buf->len;
    e->count[e->depth] = 0;
    e->is_map[e->depth] = is_map;
    e->depth++;
    write_typed(e, is_map ? 0xde : 0xdd, 0, is_map ? MAP_HEADER - 1 : 4);
}

static void close_container(coord_enc *e)
{
    if (e->depth == 0) {
        e->failed = true;
        return;
    }
    e->depth--;
    if (e->failed)
        return;
    uint8_t *h = e->buf->data + e->open_at[e->depth];
    uint32_t n = e->count[e->depth];
    if (e->is_map[e->depth]) {
        if (n > 0xffff) {
            e->failed = true;
            return;
        }
        h[1] = (uint8_t)(n >> 8);
        h[2] = (uint8_t)n;
    } else {
        coord_put_be32(h + 1, n);
    }
}

void coord_enc_begin(coord_enc *e, coord_buf *buf)
{
    e->buf = buf;
    e->depth = 0;
    e->failed = false;
    e->rid = 0;
    e->is_reply = false;
    e->frame_start = buf->len;
    /* the top map is open even when out of memory (the frame has failed:
     * nothing more is written, coord_enc_end removes it) */
    e->open_at[0] = buf->len + COORD_FRAME_HEADER;
    e->count[0] = 0;
    e->is_map[0] = true;
    e->depth = 1;
    /* most frames are small: one reservation covers them; then the length
     * placeholder and the top map16, written in place */
    if (buf->cap - buf->len < 256 && coord_buf_reserve(buf, 256) < 0) {
        e->failed = true;
        return;
    }
    memcpy(buf->data + buf->len, "\0\0\0\0\xde\0\0", COORD_FRAME_HEADER + MAP_HEADER);
    buf->len += COORD_FRAME_HEADER + MAP_HEADER;
}

coord_enc_mark coord_enc_mark_here(const coord_enc *e)
{
    coord_enc_mark m = { e->buf->len, e->depth,
                         e->depth > 0 ? e->count[e->depth - 1] : 0 };
    return m;
}

void coord_enc_rollback(coord_enc *e, const coord_enc_mark *m)
{
    if (e->failed || m->depth != e->depth || m->len > e->buf->len)
        return;
    e->buf->len = m->len;
    if (e->depth > 0)
        e->count[e->depth - 1] = m->count;
}

bool coord_utf8_valid(const uint8_t *p, size_t n)
{
    size_t i = 0;
    while (i < n) {
        uint8_t c = p[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t need;
        uint32_t cp;
        if (c >= 0xc2 && c <= 0xdf) { need = 1; cp = c & 0x1f; }
        else if (c >= 0xe0 && c <= 0xef) { need = 2; cp = c & 0x0f; }
        else if (c >= 0xf0 && c <= 0xf4) { need = 3; cp = c & 0x07; }
        else return false;                  /* continuation, 0xc0/0xc1, > 0xf4 */
        if (n - i - 1 < need)
            return false;
        for (size_t k = 1; k <= need; k++) {
            if ((p[i + k] & 0xc0) != 0x80)
                return false;
            cp = (cp << 6) | (p[i + k] & 0x3f);
        }
        if ((need == 2 && cp < 0x800) || (need == 3 && cp < 0x10000) ||
            cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        i += need + 1;
    }
    return true;
}

void coord_enc_abort(coord_enc *e)
{
    e->buf->len = e->frame_start;
    e->depth = 0;
}

size_t coord_enc_end(coord_enc *e)
{
    close_container(e);
    if (e->failed || e->depth != 0) {
        coord_enc_abort(e);
        return 0;
    }
    size_t total = e->buf->len - e->frame_start;
    coord_put_be32(e->buf->data + e->frame_start,
                   (uint32_t)(total - COORD_FRAME_HEADER));
    return total;
}

void coord_enc_key(coord_enc *e, const char *key)
{
    size_t n = strlen(key);
    if (e->depth > 0)
        e->count[e->depth - 1]++;
    write_str(e, key, n);
}

/* A key and its value in one reservation, for what nearly every field of
 * a reply is: a short key in an open map.  Writes the key, counts it, and
 * returns where the value goes (vmax bytes reserved: the caller ends with
 * set_end).  NULL: another case (the caller takes the general path), or
 * no memory (the frame has failed; the general path then writes nothing). */
static inline uint8_t *kv_fast(coord_enc *e, const char *key, size_t n, size_t vmax)
{
    if (n >= 32 || e->depth == 0 || !e->is_map[e->depth - 1])
        return NULL;
    uint8_t *p = room_upto(e, 1 + n + vmax);
    if (!p)
        return NULL;
    p[0] = (uint8_t)(0xa0 | n);
    memcpy(p + 1, key, n);
    e->count[e->depth - 1]++;
    return p + 1 + n;
}

void coord_enc_str(coord_enc *e, const void *s, size_t len)
{
    count_value(e);
    write_str(e, s, len);
}

void coord_enc_cstr(coord_enc *e, const char *s)
{
    coord_enc_str(e, s, strlen(s));
}

void coord_enc_bin(coord_enc *e, const void *p, size_t len)
{
    count_value(e);
    if (len <= 0xff)
        write_typed(e, 0xc4, len, 1);
    else if (len <= 0xffff)
        write_typed(e, 0xc5, len, 2);
    else
        write_typed(e, 0xc6, len, 4);
    write_bytes(e, p, len);
}

void coord_enc_uint(coord_enc *e, uint64_t v)
{
    count_value(e);
    write_uint(e, v);
}

void coord_enc_int(coord_enc *e, int64_t v)
{
    count_value(e);
    if (v >= 0)
        write_uint(e, (uint64_t)v);
    else if (v >= -32)
        write_typed(e, (uint8_t)(int8_t)v, 0, 0);
    else if (v >= INT8_MIN)
        write_typed(e, 0xd0, (uint64_t)v, 1);
    else if (v >= INT16_MIN)
        write_typed(e, 0xd1, (uint64_t)v, 2);
    else if (v >= INT32_MIN)
        write_typed(e, 0xd2, (uint64_t)v, 4);
    else
        write_typed(e, 0xd3, (uint64_t)v, 8);
}

void coord_enc_bool(coord_enc *e, bool v)
{
    count_value(e);
    write_typed(e, v ? 0xc3 : 0xc2, 0, 0);
}

void coord_enc_double(coord_enc *e, double v)
{
    uint64_t bits;
    memcpy(&bits, &v, sizeof bits);
    count_value(e);
    write_typed(e, 0xcb, bits, 8);
}

void coord_enc_kv_double(coord_enc *e, const char *key, double v)
{
    coord_enc_key(e, key);
    coord_enc_double(e, v);
}

void coord_enc_nil(coord_enc *e)
{
    count_value(e);
    write_typed(e, 0xc0, 0, 0);
}

void coord_enc_map_begin(coord_enc *e)   { open_container(e, true); }
void coord_enc_map_end(coord_enc *e)     { close_container(e); }
void coord_enc_array_begin(coord_enc *e) { open_container(e, false); }
void coord_enc_array_end(coord_enc *e)   { close_container(e); }

void coord_enc_kv_uint_n(coord_enc *e, const char *key, size_t klen, uint64_t v)
{
    uint8_t *p = kv_fast(e, key, klen, 9);
    if (p) {
        set_end(e, put_uint(p, v));
        return;
    }
    coord_enc_key(e, key);
    coord_enc_uint(e, v);
}

void coord_enc_kv_bool_n(coord_enc *e, const char *key, size_t klen, bool v)
{
    uint8_t *p = kv_fast(e, key, klen, 1);
    if (p) {
        *p = v ? 0xc3 : 0xc2;
        set_end(e, p + 1);
        return;
    }
    coord_enc_key(e, key);
    coord_enc_bool(e, v);
}

void coord_enc_kv_str_n(coord_enc *e, const char *key, size_t klen, const void *s,
                        size_t n)
{
    uint8_t *p = kv_fast(e, key, klen, 5 + n);
    if (p) {
        set_end(e, put_str(p, s, n));
        return;
    }
    coord_enc_key(e, key);
    coord_enc_str(e, s, n);
}

void coord_enc_kv_bin(coord_enc *e, const char *key, const void *p, size_t n)
{
    coord_enc_key(e, key);
    coord_enc_bin(e, p, n);
}

void coord_enc_name(coord_enc *e, const void *p, size_t n)
{
    if (coord_utf8_valid(p, n))
        coord_enc_str(e, p, n);
    else
        coord_enc_bin(e, p, n);
}

void coord_enc_kv_name(coord_enc *e, const char *key, const void *p, size_t n)
{
    coord_enc_key(e, key);
    coord_enc_name(e, p, n);
}

void coord_enc_reply_begin(coord_enc *e, coord_buf *buf, uint64_t rid)
{
    coord_enc_begin(e, buf);
    e->rid = rid;
    e->is_reply = true;
    /* rid: <rid>, then ok: true (4 bytes) in the same reservation */
    uint8_t *p = kv_fast(e, "rid", 3, 9 + 4);
    if (!p) {
        coord_enc_kv_uint(e, "rid", rid);
        coord_enc_kv_bool(e, "ok", true);
        return;
    }
    p = put_uint(p, rid);
    memcpy(p, "\xa2" "ok" "\xc3", 4);
    e->count[e->depth - 1]++;
    set_end(e, p + 4);
}

size_t coord_enc_reply_with(coord_buf *buf, uint64_t rid, const uint8_t *pairs, size_t len,
                            unsigned npairs)
{
    /* the bytes coord_enc_reply_begin, the pairs and coord_enc_end make */
    if (npairs > 0xffff - 2 ||
        coord_buf_reserve(buf, COORD_FRAME_HEADER + MAP_HEADER + 4 + 9 + 4 + len) < 0)
        return 0;
    uint8_t *start = buf->data + buf->len, *p = start + COORD_FRAME_HEADER;
    p[0] = 0xde;
    p[1] = (uint8_t)((npairs + 2) >> 8);
    p[2] = (uint8_t)(npairs + 2);
    memcpy(p + MAP_HEADER, "\xa3" "rid", 4);
    p = put_uint(p + MAP_HEADER + 4, rid);
    memcpy(p, "\xa2" "ok" "\xc3", 4);
    p += 4;
    if (len)
        memcpy(p, pairs, len);
    p += len;
    size_t total = (size_t)(p - start);
    coord_put_be32(start, (uint32_t)(total - COORD_FRAME_HEADER));
    buf->len += total;
    return total;
}

size_t coord_enc_reply_ok(coord_buf *buf, uint64_t rid)
{
    return coord_enc_reply_with(buf, rid, NULL, 0, 0);
}

uint8_t *coord_enc_pairs_begin(coord_enc *e, size_t max)
{
    if (e->depth == 0 || !e->is_map[e->depth - 1])
        return NULL;
    return room_upto(e, max);
}

void coord_enc_pairs_end(coord_enc *e, uint8_t *end, unsigned npairs)
{
    if (e->failed || e->depth == 0)
        return;                   /* pairs_begin gave no room */
    e->count[e->depth - 1] += npairs;
    set_end(e, end);
}

size_t coord_enc_request(coord_buf *out, const coord_enc *fields, uint64_t rid)
{
    if (fields->failed || fields->depth != 1 || fields->buf == out)
        return 0;
    const coord_buf *src = fields->buf;
    size_t at = fields->open_at[0] + MAP_HEADER;   /* the first key */
    coord_enc e;
    coord_enc_begin(&e, out);
    coord_enc_kv_uint(&e, "rid", rid);
    write_bytes(&e, src->data + at, src->len - at);
    e.count[0] += fields->count[0];
    return coord_enc_end(&e);
}

void coord_enc_event_begin(coord_enc *e, coord_buf *buf, const char *name)
{
    coord_enc_begin(e, buf);
    coord_enc_kv_cstr(e, "ev", name);
}

size_t coord_enc_error(coord_buf *buf, uint64_t rid, int code,
                       const char *message)
{
    coord_enc e;
    const char *name = coord_code_name(code);
    coord_enc_begin(&e, buf);
    coord_enc_kv_uint(&e, "rid", rid);
    coord_enc_kv_bool(&e, "ok", false);
    coord_enc_kv_cstr(&e, "code", name ? name : "STORAGE");
    coord_enc_kv_cstr(&e, "message", message ? message : coord_code_text(code));
    return coord_enc_end(&e);
}
