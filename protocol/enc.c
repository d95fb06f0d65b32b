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

static int enc_write(void *data, const char *p, size_t n)
{
    coord_enc *e = data;
    if (e->failed)
        return -1;
    if (coord_buf_append(e->buf, p, n) < 0) {
        e->failed = true;
        return -1;
    }
    return 0;
}

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
    uint8_t hdr[5] = { is_map ? 0xde : 0xdd, 0, 0, 0, 0 };
    e->open_at[e->depth] = e->buf->len;
    e->count[e->depth] = 0;
    e->is_map[e->depth] = is_map;
    e->depth++;
    enc_write(e, (const char *)hdr, is_map ? 3 : 5);
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
    e->frame_start = buf->len;
    msgpack_packer_init(&e->pk, e, enc_write);
    static const uint8_t placeholder[COORD_FRAME_HEADER] = { 0 };
    enc_write(e, (const char *)placeholder, sizeof placeholder);
    open_container(e, true);
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
    msgpack_pack_str(&e->pk, n);
    msgpack_pack_str_body(&e->pk, key, n);
}

void coord_enc_str(coord_enc *e, const void *s, size_t len)
{
    count_value(e);
    msgpack_pack_str(&e->pk, len);
    msgpack_pack_str_body(&e->pk, s, len);
}

void coord_enc_cstr(coord_enc *e, const char *s)
{
    coord_enc_str(e, s, strlen(s));
}

void coord_enc_bin(coord_enc *e, const void *p, size_t len)
{
    count_value(e);
    msgpack_pack_bin(&e->pk, len);
    msgpack_pack_bin_body(&e->pk, p, len);
}

void coord_enc_uint(coord_enc *e, uint64_t v)
{
    count_value(e);
    msgpack_pack_uint64(&e->pk, v);
}

void coord_enc_int(coord_enc *e, int64_t v)
{
    count_value(e);
    msgpack_pack_int64(&e->pk, v);
}

void coord_enc_bool(coord_enc *e, bool v)
{
    count_value(e);
    if (v)
        msgpack_pack_true(&e->pk);
    else
        msgpack_pack_false(&e->pk);
}

void coord_enc_nil(coord_enc *e)
{
    count_value(e);
    msgpack_pack_nil(&e->pk);
}

void coord_enc_map_begin(coord_enc *e)   { open_container(e, true); }
void coord_enc_map_end(coord_enc *e)     { close_container(e); }
void coord_enc_array_begin(coord_enc *e) { open_container(e, false); }
void coord_enc_array_end(coord_enc *e)   { close_container(e); }

void coord_enc_kv_uint(coord_enc *e, const char *key, uint64_t v)
{
    coord_enc_key(e, key);
    coord_enc_uint(e, v);
}

void coord_enc_kv_bool(coord_enc *e, const char *key, bool v)
{
    coord_enc_key(e, key);
    coord_enc_bool(e, v);
}

void coord_enc_kv_str(coord_enc *e, const char *key, const void *s, size_t n)
{
    coord_enc_key(e, key);
    coord_enc_str(e, s, n);
}

void coord_enc_kv_cstr(coord_enc *e, const char *key, const char *s)
{
    coord_enc_key(e, key);
    coord_enc_cstr(e, s);
}

void coord_enc_kv_bin(coord_enc *e, const char *key, const void *p, size_t n)
{
    coord_enc_key(e, key);
    coord_enc_bin(e, p, n);
}

void coord_enc_reply_begin(coord_enc *e, coord_buf *buf, uint64_t rid)
{
    coord_enc_begin(e, buf);
    coord_enc_kv_uint(e, "rid", rid);
    coord_enc_kv_bool(e, "ok", true);
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
