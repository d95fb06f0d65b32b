/* enc.h - building frames: a growable byte buffer and an encoder that writes
 * length-prefixed MessagePack maps into it.
 *
 * Containers are written with 16/32-bit count headers and patched when they
 * are closed, so callers never count fields ahead of time.  Scalars are
 * written inline in their smallest MessagePack form: on the broker's hot
 * path a callback per token (msgpack-c's packer) cost more than the rest
 * of a reply. */
#ifndef COORD_PROTO_ENC_H
#define COORD_PROTO_ENC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <msgpack.h>
#include "frame.h"

typedef struct coord_buf {
    uint8_t *data;
    size_t len;
    size_t cap;
} coord_buf;

void coord_buf_init(coord_buf *b);
void coord_buf_free(coord_buf *b);
/* Make room for extra more bytes; 0 or -1 (out of memory). */
int coord_buf_reserve(coord_buf *b, size_t extra);
int coord_buf_append(coord_buf *b, const void *p, size_t n);
/* Drop the first n bytes. */
void coord_buf_consume(coord_buf *b, size_t n);

typedef struct coord_enc {
    coord_buf *buf;
    size_t frame_start;
    int depth;
    bool failed;                               /* out of memory */
    size_t open_at[COORD_MAX_DEPTH + 1];        /* header offset per level */
    uint32_t count[COORD_MAX_DEPTH + 1];
    bool is_map[COORD_MAX_DEPTH + 1];
    uint64_t rid;                              /* a reply's rid (reply_begin) */
    bool is_reply;
} coord_enc;

/* A point to roll a frame back to: a list entry that would make the frame
 * outgrow its limit is removed again (see coord_enc_rollback). */
typedef struct coord_enc_mark {
    size_t len;
    int depth;
    uint32_t count;
} coord_enc_mark;

/* Start a frame at the end of buf: length placeholder and the top map. */
void coord_enc_begin(coord_enc *e, coord_buf *buf);
/* Close the top map, patch the length.  Returns the frame's total size, or
 * 0 after an error (the partial frame is removed from buf). */
size_t coord_enc_end(coord_enc *e);
/* Remove the frame being built from buf. */
void coord_enc_abort(coord_enc *e);

/* Bytes of the frame so far, its 4-byte length prefix included. */
static inline size_t coord_enc_size(const coord_enc *e)
{
    return e->buf->len - e->frame_start;
}
coord_enc_mark coord_enc_mark_here(const coord_enc *e);
/* Removes what was written since m (same container level). */
void coord_enc_rollback(coord_enc *e, const coord_enc_mark *m);

/* True when p[0..n) is well-formed UTF-8 (no overlong forms, surrogates or
 * code points above U+10FFFF). */
bool coord_utf8_valid(const uint8_t *p, size_t n);

void coord_enc_key(coord_enc *e, const char *key);
void coord_enc_str(coord_enc *e, const void *s, size_t len);
void coord_enc_cstr(coord_enc *e, const char *s);
void coord_enc_bin(coord_enc *e, const void *p, size_t len);
void coord_enc_uint(coord_enc *e, uint64_t v);
void coord_enc_int(coord_enc *e, int64_t v);
void coord_enc_bool(coord_enc *e, bool v);
/* A float64 (MessagePack 0xcb). */
void coord_enc_double(coord_enc *e, double v);
void coord_enc_nil(coord_enc *e);
void coord_enc_map_begin(coord_enc *e);
void coord_enc_map_end(coord_enc *e);
void coord_enc_array_begin(coord_enc *e);
void coord_enc_array_end(coord_enc *e);

/* Shorthands for key + value pairs.  The _n forms take the key's length;
 * the others are inline so that a literal key's length folds at compile
 * time (nearly every key is one). */
void coord_enc_kv_uint_n(coord_enc *e, const char *key, size_t klen, uint64_t v);
void coord_enc_kv_bool_n(coord_enc *e, const char *key, size_t klen, bool v);
void coord_enc_kv_str_n(coord_enc *e, const char *key, size_t klen, const void *s,
                        size_t n);
static inline void coord_enc_kv_uint(coord_enc *e, const char *key, uint64_t v)
{
    coord_enc_kv_uint_n(e, key, strlen(key), v);
}
static inline void coord_enc_kv_bool(coord_enc *e, const char *key, bool v)
{
    coord_enc_kv_bool_n(e, key, strlen(key), v);
}
static inline void coord_enc_kv_str(coord_enc *e, const char *key, const void *s, size_t n)
{
    coord_enc_kv_str_n(e, key, strlen(key), s, n);
}
static inline void coord_enc_kv_cstr(coord_enc *e, const char *key, const char *s)
{
    coord_enc_kv_str_n(e, key, strlen(key), s, strlen(s));
}
void coord_enc_kv_double(coord_enc *e, const char *key, double v);
void coord_enc_kv_bin(coord_enc *e, const char *key, const void *p, size_t n);
/* A name (lock, key, channel, workstream, op id): a str when its bytes are
 * valid UTF-8, else a bin, so strict decoders never see invalid str. */
void coord_enc_name(coord_enc *e, const void *p, size_t n);
void coord_enc_kv_name(coord_enc *e, const char *key, const void *p, size_t n);

/* {rid, ok:true, ...}: the caller adds fields and calls coord_enc_end. */
void coord_enc_reply_begin(coord_enc *e, coord_buf *buf, uint64_t rid);
/* A whole {rid, ok:true} reply, the same bytes as coord_enc_reply_begin +
 * coord_enc_end.  Returns its size or 0 (out of memory). */
size_t coord_enc_reply_ok(coord_buf *buf, uint64_t rid);
/* The same with npairs more pairs after ok, len bytes of MessagePack the
 * caller wrote (keys as bytes, values with coord_put_uint). */
size_t coord_enc_reply_with(coord_buf *buf, uint64_t rid, const uint8_t *pairs, size_t len,
                            unsigned npairs);

/* Pairs the caller writes itself as MessagePack (keys known at compile
 * time, as bytes, values with coord_put_uint): room for at most max bytes
 * in the open map, or NULL (not in a map: take the kv shorthands; or out
 * of memory: the frame has failed, and they write nothing either).
 * coord_enc_pairs_end counts npairs pairs ending at end. */
uint8_t *coord_enc_pairs_begin(coord_enc *e, size_t max);
void coord_enc_pairs_end(coord_enc *e, uint8_t *end, unsigned npairs);

/* v in its smallest MessagePack form at p (at most 9 bytes); returns the
 * end. */
static inline uint8_t *coord_put_uint(uint8_t *p, uint64_t v)
{
    if (v < 128) {
        p[0] = (uint8_t)v;
        return p + 1;
    }
    if (v <= 0xff) {
        p[0] = 0xcc;
        p[1] = (uint8_t)v;
        return p + 2;
    }
    if (v <= 0xffff) {
        p[0] = 0xcd;
        p[1] = (uint8_t)(v >> 8);
        p[2] = (uint8_t)v;
        return p + 3;
    }
    if (v <= 0xffffffffu) {
        p[0] = 0xce;
        coord_put_be32(p + 1, (uint32_t)v);
        return p + 5;
    }
    p[0] = 0xcf;
    coord_put_be32(p + 1, (uint32_t)(v >> 32));
    coord_put_be32(p + 5, (uint32_t)v);
    return p + 9;
}
/* A request is built before its rid is known (the rid is chosen when it is
 * sent, and one built request may be sent many times): coord_enc_begin, its
 * fields, and the top map left open.  This writes to the end of out one
 * whole frame {rid, <the fields of fields>} and returns its size, or 0 when
 * out of memory, when fields failed or is not at the top map, or when the
 * map would outgrow map16 (nothing is left in out then).  fields is not
 * changed: more fields may be added to it afterwards.  out must not be
 * fields' own buffer. */
size_t coord_enc_request(coord_buf *out, const coord_enc *fields, uint64_t rid);
/* {ev: name, ...}: the caller adds fields and calls coord_enc_end. */
void coord_enc_event_begin(coord_enc *e, coord_buf *buf, const char *name);
/* A whole error reply {rid, ok:false, code, message}.  Returns its size or
 * 0 (out of memory). */
size_t coord_enc_error(coord_buf *buf, uint64_t rid, int code,
                       const char *message);

#endif
