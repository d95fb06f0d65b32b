/* reply.c - decoded replies and events, the coord_map accessors, and the
 * JSON rendering of a map; a reply's descriptor (results by reference) and
 * the sealed memfd an owner completes with. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <sys/mman.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "errors.h"
#include "internal.h"

/* ---- replies ---- */

struct coord_reply *coord__reply_new(const uint8_t *body, size_t len,
                                     int *frame_status)
{
    struct coord_reply *r = malloc(sizeof *r + len);
    if (!r) {
        *frame_status = COORD_FRAME_NOMEM;
        return NULL;
    }
    memset(r, 0, sizeof *r);
    r->fd = -1;
    memcpy(r->bytes, body, len);
    r->len = len;
    if (!msgpack_zone_init(&r->msg.zone, COORD_CLIENT_ZONE_CHUNK)) {
        free(r);
        *frame_status = COORD_FRAME_NOMEM;
        return NULL;
    }
    int st = coord_msg_parse(&r->msg, r->bytes, len);
    if (st != COORD_FRAME_OK) {
        coord_reply_free(r);
        *frame_status = st;
        return NULL;
    }

    const msgpack_object_map *map = r->msg.map;
    const msgpack_object *rid = coord_map_find(map, "rid");
    const msgpack_object *ev = coord_map_find(map, "ev");
    if (rid && rid->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
        r->rid = rid->via.u64;
        const msgpack_object *ok = coord_map_find(map, "ok");
        if (!ok || ok->type != MSGPACK_OBJECT_BOOLEAN) {
            r->status = COORD_EPROTOCOL;
        } else if (!ok->via.boolean) {
            const msgpack_object *code = coord_map_find(map, "code");
            if (code && code->type == MSGPACK_OBJECT_STR)
                r->status = coord_code_from_name(code->via.str.ptr,
                                                 code->via.str.size);
            else
                r->status = COORD_EUNKNOWN;
        }
    } else if (ev && ev->type == MSGPACK_OBJECT_STR) {
        /* a C string copy of the name (a name holding NUL is cut there) */
        r->is_event = true;
        r->ev = strndup(ev->via.str.ptr, ev->via.str.size);
        if (!r->ev) {
            coord_reply_free(r);
            *frame_status = COORD_FRAME_NOMEM;
            return NULL;
        }
    }
    *frame_status = COORD_FRAME_OK;
    return r;
}

COORD_API void coord_reply_free(coord_reply_t *r)
{
    if (!r)
        return;
    coord_msg_destroy(&r->msg);
    free(r->ev);
    if (r->fd >= 0)
        close(r->fd);
    free(r);
}

COORD_API int coord_reply_take_fd(coord_reply_t *r)
{
    if (!r)
        return -1;
    int fd = r->fd;
    r->fd = -1;
    return fd;
}

bool coord__declares_fd(coord_map m)
{
    uint64_t v;
    coord_map st;
    return coord_map_uint(m, "result_fd", &v) ||
           (coord_map_map(m, "stale", &st) && coord_map_uint(st, "result_fd", &v));
}

int coord__read_fd(int fd, size_t len, void **out)
{
    uint8_t *p = malloc(len + 1);
    *out = NULL;
    if (!p)
        return COORD_ENOMEM;
    size_t off = 0;
    while (off < len) {
        ssize_t n = pread(fd, p + off, len - off, (off_t)off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            if (n == 0)
                errno = EIO;              /* shorter than the broker said */
            free(p);
            return COORD_ESYS;
        }
        off += (size_t)n;
    }
    p[len] = 0;
    *out = p;
    return 0;
}

COORD_API int coord_memfd_sealed(const void *p, size_t len)
{
    if (!p && len)
        return COORD_EINVAL;
    int fd = memfd_create("coord-result", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return COORD_ESYS;
    const uint8_t *b = p;
    size_t off = 0;
    while (off < len) {
        ssize_t n = write(fd, b + off, len - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            int e = errno;
            close(fd);
            errno = e;
            return COORD_ESYS;
        }
        off += (size_t)n;
    }
    if (fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
        int e = errno;
        close(fd);
        errno = e;
        return COORD_ESYS;
    }
    return fd;
}

COORD_API const char *coord_reply_event(const coord_reply_t *r)
{
    return r && r->is_event ? r->ev : NULL;
}

COORD_API coord_map coord_reply_map(const coord_reply_t *r)
{
    coord_map m = { r ? r->msg.map : NULL };
    return m;
}

bool coord__event_is(const coord_reply_t *ev, enum coord_event which)
{
    const char *name = ev ? coord_reply_event(ev) : NULL;
    return name && strcmp(name, coord_event_name(which)) == 0;
}

/* ---- map accessors ---- */

static const msgpack_object_map *map_of(coord_map m)
{
    return (const msgpack_object_map *)m.impl;
}

static const msgpack_object *find(coord_map m, const char *key)
{
    const msgpack_object_map *map = map_of(m);
    if (!map || !key)
        return NULL;
    return coord_map_find(map, key);
}

COORD_API bool coord_map_uint(coord_map m, const char *key, uint64_t *out)
{
    const msgpack_object *v = find(m, key);
    if (!v || v->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
        return false;
    if (out)
        *out = v->via.u64;
    return true;
}

COORD_API bool coord_map_bool(coord_map m, const char *key, bool *out)
{
    const msgpack_object *v = find(m, key);
    if (!v || v->type != MSGPACK_OBJECT_BOOLEAN)
        return false;
    if (out)
        *out = v->via.boolean;
    return true;
}

/* Strings and bins are told apart only by the MessagePack type; the broker
 * may send a name holding arbitrary bytes as either, so both getters accept
 * both (as the broker does with requests). */
static bool bytes_of(const msgpack_object *v, const char **p, size_t *n)
{
    if (!v)
        return false;
    if (v->type == MSGPACK_OBJECT_STR) {
        if (p) *p = v->via.str.ptr;
        if (n) *n = v->via.str.size;
        return true;
    }
    if (v->type == MSGPACK_OBJECT_BIN) {
        if (p) *p = v->via.bin.ptr;
        if (n) *n = v->via.bin.size;
        return true;
    }
    return false;
}

COORD_API bool coord_map_str(coord_map m, const char *key, const char **s,
                             size_t *n)
{
    return bytes_of(find(m, key), s, n);
}

COORD_API bool coord_map_bin(coord_map m, const char *key, const void **p,
                             size_t *n)
{
    const char *cp;
    if (!bytes_of(find(m, key), &cp, n))
        return false;
    if (p)
        *p = cp;
    return true;
}

void coord__map_bytes(coord_map m, const char *key, const char **p, size_t *n)
{
    if (!coord_map_str(m, key, p, n) || !*p) {
        *p = "";
        *n = 0;
    }
}

void *coord__dup_bytes(const void *p, size_t n)
{
    char *d = malloc(n + 1);
    if (!d)
        return NULL;
    if (n)
        memcpy(d, p, n);
    d[n] = '\0';
    return d;
}

COORD_API bool coord_map_map(coord_map m, const char *key, coord_map *out)
{
    const msgpack_object *v = find(m, key);
    if (!v || v->type != MSGPACK_OBJECT_MAP)
        return false;
    if (out)
        out->impl = &v->via.map;
    return true;
}

COORD_API bool coord_map_double(coord_map m, const char *key, double *out)
{
    const msgpack_object *v = find(m, key);
    double d;
    if (!v)
        return false;
    switch (v->type) {
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64:
        d = v->via.f64;
        break;
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
        d = (double)v->via.u64;
        break;
    case MSGPACK_OBJECT_NEGATIVE_INTEGER:
        d = (double)v->via.i64;
        break;
    default:
        return false;
    }
    if (out)
        *out = d;
    return true;
}

COORD_API size_t coord_map_array_len(coord_map m, const char *key)
{
    const msgpack_object *v = find(m, key);
    return v && v->type == MSGPACK_OBJECT_ARRAY ? v->via.array.size : 0;
}

COORD_API bool coord_map_array_at(coord_map m, const char *key, size_t i,
                                  coord_map *out)
{
    const msgpack_object *v = find(m, key);
    if (!v || v->type != MSGPACK_OBJECT_ARRAY || i >= v->via.array.size)
        return false;
    const msgpack_object *e = &v->via.array.ptr[i];
    if (e->type != MSGPACK_OBJECT_MAP)
        return false;
    if (out)
        out->impl = &e->via.map;
    return true;
}

COORD_API size_t coord_map_size(coord_map m)
{
    const msgpack_object_map *map = map_of(m);
    return map ? map->size : 0;
}

static coord_type type_of(const msgpack_object *o)
{
    switch (o->type) {
    case MSGPACK_OBJECT_NIL:              return COORD_TYPE_NIL;
    case MSGPACK_OBJECT_BOOLEAN:          return COORD_TYPE_BOOL;
    case MSGPACK_OBJECT_POSITIVE_INTEGER: return COORD_TYPE_UINT;
    case MSGPACK_OBJECT_NEGATIVE_INTEGER: return COORD_TYPE_INT;
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64:          return COORD_TYPE_FLOAT;
    case MSGPACK_OBJECT_STR:              return COORD_TYPE_STR;
    case MSGPACK_OBJECT_BIN:              return COORD_TYPE_BIN;
    case MSGPACK_OBJECT_ARRAY:            return COORD_TYPE_ARRAY;
    case MSGPACK_OBJECT_MAP:              return COORD_TYPE_MAP;
    default:                              return COORD_TYPE_OTHER;
    }
}

static const msgpack_object_kv *entry_at(coord_map m, size_t i)
{
    const msgpack_object_map *map = map_of(m);
    return map && i < map->size ? &map->ptr[i] : NULL;
}

COORD_API coord_type coord_map_entry(coord_map m, size_t i, const char **key,
                                     size_t *keylen)
{
    const msgpack_object_kv *kv = entry_at(m, i);
    if (!kv)
        return COORD_TYPE_NONE;
    const char *k = "";
    size_t kn = 0;
    bytes_of(&kv->key, &k, &kn);         /* keys are strings (validated) */
    if (key)
        *key = k;
    if (keylen)
        *keylen = kn;
    return type_of(&kv->val);
}

COORD_API bool coord_map_map_at(coord_map m, size_t i, coord_map *out)
{
    const msgpack_object_kv *kv = entry_at(m, i);
    if (!kv || kv->val.type != MSGPACK_OBJECT_MAP)
        return false;
    if (out)
        out->impl = &kv->val.via.map;
    return true;
}

/* ---- JSON ---- */

typedef struct jbuf {
    coord_buf b;
    bool failed;
} jbuf;

static void jput(jbuf *j, const void *p, size_t n)
{
    if (!j->failed && coord_buf_append(&j->b, p, n) < 0)
        j->failed = true;
}

static void jputs(jbuf *j, const char *s)
{
    jput(j, s, strlen(s));
}

static void jputc(jbuf *j, char ch)
{
    jput(j, &ch, 1);
}

/* Length of the valid UTF-8 sequence at p (n bytes there), 0 if invalid:
 * no overlong forms, no surrogates, nothing above U+10FFFF. */
static size_t utf8_seq(const unsigned char *p, size_t n)
{
    unsigned char b = p[0];
    size_t len;
    unsigned char lo = 0x80, hi = 0xbf;     /* bounds of the second byte */
    if (b < 0x80)
        return 1;
    if (b >= 0xc2 && b <= 0xdf)
        len = 2;
    else if (b >= 0xe0 && b <= 0xef) {
        len = 3;
        if (b == 0xe0) lo = 0xa0;
        if (b == 0xed) hi = 0x9f;
    } else if (b >= 0xf0 && b <= 0xf4) {
        len = 4;
        if (b == 0xf0) lo = 0x90;
        if (b == 0xf4) hi = 0x8f;
    } else
        return 0;
    if (n < len || p[1] < lo || p[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++)
        if (p[i] < 0x80 || p[i] > 0xbf)
            return 0;
    return len;
}

void coord__escape_text(char *out, size_t size, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *p = (const unsigned char *)s;
    size_t o = 0;
    if (size == 0)
        return;
    for (size_t i = 0; i < n;) {
        size_t l = p[i] >= 0x20 && p[i] < 0x7f ? 1
                   : p[i] >= 0x80 ? utf8_seq(p + i, n - i) : 0;
        if (l == 2 && p[i] == 0xc2 && p[i + 1] < 0xa0)
            l = 0;                                  /* C1 controls */
        if (l) {
            if (o + l >= size)
                break;
            memcpy(out + o, p + i, l);
            o += l;
            i += l;
            continue;
        }
        if (o + 4 >= size)
            break;
        out[o++] = '\\';
        out[o++] = 'x';
        out[o++] = hex[p[i] >> 4];
        out[o++] = hex[p[i] & 15];
        i++;
    }
    out[o] = '\0';
}

static void json_string(jbuf *j, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *p = (const unsigned char *)s;
    jputc(j, '"');
    size_t i = 0;
    while (i < n) {
        size_t run = i;
        /* copy runs of plain printable ASCII and valid multi-byte UTF-8 */
        while (run < n) {
            unsigned char c2 = p[run];
            if (c2 >= 0x20 && c2 < 0x7f && c2 != '"' && c2 != '\\') {
                run++;
                continue;
            }
            if (c2 >= 0x80) {
                size_t l = utf8_seq(p + run, n - run);
                if (l) {
                    run += l;
                    continue;
                }
            }
            break;
        }
        if (run > i) {
            jput(j, p + i, run - i);
            i = run;
            continue;
        }
        unsigned char ch = p[i++];
        switch (ch) {
        case '"':  jputs(j, "\\\""); break;
        case '\\': jputs(j, "\\\\"); break;
        case '\n': jputs(j, "\\n"); break;
        case '\r': jputs(j, "\\r"); break;
        case '\t': jputs(j, "\\t"); break;
        case '\b': jputs(j, "\\b"); break;
        case '\f': jputs(j, "\\f"); break;
        default: {
            /* control characters, DEL and bytes that are not UTF-8 */
            char esc[6] = { '\\', 'u', '0', '0', hex[ch >> 4], hex[ch & 15] };
            jput(j, esc, sizeof esc);
        }
        }
    }
    jputc(j, '"');
}

/* Bytes as {"base64":"..."}: a bin, or a str that is not UTF-8. */
static void json_base64(jbuf *j, const unsigned char *p, size_t n)
{
    static const char tab[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    jputs(j, "{\"base64\":\"");
    size_t i = 0;
    for (; i + 3 <= n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
        char q[4] = { tab[v >> 18], tab[(v >> 12) & 63], tab[(v >> 6) & 63],
                      tab[v & 63] };
        jput(j, q, 4);
    }
    if (n - i == 1) {
        uint32_t v = (uint32_t)p[i] << 16;
        char q[4] = { tab[v >> 18], tab[(v >> 12) & 63], '=', '=' };
        jput(j, q, 4);
    } else if (n - i == 2) {
        uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8;
        char q[4] = { tab[v >> 18], tab[(v >> 12) & 63], tab[(v >> 6) & 63], '=' };
        jput(j, q, 4);
    }
    jputs(j, "\"}");
}

/* Text as JSON: a string when it is valid UTF-8 (passed through, escaped
 * only where JSON requires), else {"base64": ...}. */
static void json_text(jbuf *j, const char *p, size_t n)
{
    if (coord_utf8_valid((const uint8_t *)p, n))
        json_string(j, p, n);
    else
        json_base64(j, (const unsigned char *)p, n);
}

/* Frames are validated to COORD_MAX_DEPTH; the bound only guards misuse. */
#define JSON_MAX_DEPTH 32

static void json_value(jbuf *j, const msgpack_object *o, int depth)
{
    char num[40];
    if (depth > JSON_MAX_DEPTH) {
        jputs(j, "null");
        return;
    }
    switch (o->type) {
    case MSGPACK_OBJECT_NIL:
        jputs(j, "null");
        break;
    case MSGPACK_OBJECT_BOOLEAN:
        jputs(j, o->via.boolean ? "true" : "false");
        break;
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
        snprintf(num, sizeof num, "%llu", (unsigned long long)o->via.u64);
        jputs(j, num);
        break;
    case MSGPACK_OBJECT_NEGATIVE_INTEGER:
        snprintf(num, sizeof num, "%lld", (long long)o->via.i64);
        jputs(j, num);
        break;
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64: {
        double d = o->via.f64;
        if (!isfinite(d)) {
            jputs(j, "null");             /* NaN and infinities: no JSON */
        } else {
            snprintf(num, sizeof num, "%.17g", d);
            jputs(j, num);
        }
        break;
    }
    case MSGPACK_OBJECT_STR:
        json_text(j, o->via.str.ptr, o->via.str.size);
        break;
    case MSGPACK_OBJECT_BIN:
        json_base64(j, (const unsigned char *)o->via.bin.ptr, o->via.bin.size);
        break;
    case MSGPACK_OBJECT_ARRAY:
        jputc(j, '[');
        for (uint32_t i = 0; i < o->via.array.size; i++) {
            if (i)
                jputc(j, ',');
            json_value(j, &o->via.array.ptr[i], depth + 1);
        }
        jputc(j, ']');
        break;
    case MSGPACK_OBJECT_MAP:
        jputc(j, '{');
        for (uint32_t i = 0; i < o->via.map.size; i++) {
            const msgpack_object_kv *kv = &o->via.map.ptr[i];
            const char *k = "";
            size_t kn = 0;
            if (i)
                jputc(j, ',');
            bytes_of(&kv->key, &k, &kn);   /* validated: keys are strings */
            json_string(j, k, kn);
            jputc(j, ':');
            json_value(j, &kv->val, depth + 1);
        }
        jputc(j, '}');
        break;
    default:                               /* ext: not used by the protocol */
        jputs(j, "null");
        break;
    }
}

static char *json_finish(jbuf *j)
{
    jputc(j, '\0');
    if (j->failed) {
        coord_buf_free(&j->b);
        return NULL;
    }
    return (char *)j->b.data;
}

COORD_API char *coord_map_json(coord_map m)
{
    jbuf j = { .failed = false };
    coord_buf_init(&j.b);
    const msgpack_object_map *map = map_of(m);
    if (!map) {
        jputs(&j, "{}");
    } else {
        msgpack_object o;
        o.type = MSGPACK_OBJECT_MAP;
        o.via.map = *map;
        json_value(&j, &o, 0);
    }
    return json_finish(&j);
}

COORD_API char *coord_json_text(const void *p, size_t n)
{
    if (!p && n)
        return NULL;
    jbuf j = { .failed = false };
    coord_buf_init(&j.b);
    json_text(&j, p ? p : "", n);
    return json_finish(&j);
}

COORD_API char *coord_map_value_json(coord_map m, size_t i)
{
    const msgpack_object_kv *kv = entry_at(m, i);
    if (!kv)
        return NULL;
    jbuf j = { .failed = false };
    coord_buf_init(&j.b);
    json_value(&j, &kv->val, 0);
    return json_finish(&j);
}
