/* frame.c - the incremental frame reader and the validating walk.
 *
 * msgpack-c reserves memory for whatever count a header announces, so no
 * byte from a peer reaches it before coord_frame_validate has checked that
 * every count fits in the bytes that are really there. */
#include <stdlib.h>
#include <string.h>
#include "frame.h"

const char *coord_frame_status_text(int status)
{
    switch (status) {
    case COORD_FRAME_OK:             return "ok";
    case COORD_FRAME_EMPTY:          return "frame length is zero";
    case COORD_FRAME_TOO_LONG:       return "frame longer than max_frame";
    case COORD_FRAME_NOT_MAP:        return "frame body is not a map";
    case COORD_FRAME_KEY_NOT_STRING: return "map key is not a string";
    case COORD_FRAME_TRAILING:       return "trailing bytes after the map";
    case COORD_FRAME_TRUNCATED:      return "truncated MessagePack";
    case COORD_FRAME_INVALID:        return "invalid MessagePack byte";
    case COORD_FRAME_TOO_DEEP:       return "nesting too deep";
    case COORD_FRAME_NOMEM:          return "out of memory";
    }
    return "unknown frame status";
}

/* ---- validating walk ---- */

enum elem_kind { ELEM_SCALAR, ELEM_STR, ELEM_ARRAY, ELEM_MAP, ELEM_INVALID };

/* elem_header for the bytes whose header is more than the type byte's
 * own bits (b is none of the one-byte forms below). */
static int elem_header_long(const uint8_t *p, size_t avail, size_t *hdr,
                            uint64_t *payload, uint64_t *count)
{
    uint8_t b = p[0];
    unsigned lenbytes = 0;
    int kind = ELEM_SCALAR;

    switch (b) {
    case 0xc1: return ELEM_INVALID;
    case 0xc4: case 0xc5: case 0xc6:            /* bin 8/16/32 */
        lenbytes = 1u << (b - 0xc4);
        break;
    case 0xc7: case 0xc8: case 0xc9:            /* ext 8/16/32 + type byte */
        lenbytes = 1u << (b - 0xc7);
        break;
    case 0xca: *hdr = 1; *payload = 4; return ELEM_SCALAR;
    case 0xcb: *hdr = 1; *payload = 8; return ELEM_SCALAR;
    case 0xcc: case 0xcd: case 0xce: case 0xcf:
        *hdr = 1; *payload = 1u << (b - 0xcc); return ELEM_SCALAR;
    case 0xd0: case 0xd1: case 0xd2: case 0xd3:
        *hdr = 1; *payload = 1u << (b - 0xd0); return ELEM_SCALAR;
    case 0xd4: case 0xd5: case 0xd6: case 0xd7: case 0xd8:   /* fixext */
        *hdr = 1; *payload = 1 + (1u << (b - 0xd4)); return ELEM_SCALAR;
    case 0xd9: case 0xda: case 0xdb:
        lenbytes = 1u << (b - 0xd9); kind = ELEM_STR;
        break;
    case 0xdc: case 0xdd:
        lenbytes = 2u << (b - 0xdc); kind = ELEM_ARRAY;
        break;
    case 0xde: case 0xdf:
        lenbytes = 2u << (b - 0xde); kind = ELEM_MAP;
        break;
    }
    if (avail < 1 + (size_t)lenbytes)
        return -1;
    uint64_t v = coord_read_be(p + 1, lenbytes);
    *hdr = 1 + lenbytes;
    if (kind == ELEM_ARRAY || kind == ELEM_MAP) {
        *count = v;
    } else {
        *payload = v;
        if (b >= 0xc7 && b <= 0xc9)
            *payload += 1;                      /* ext type byte */
    }
    return kind == ELEM_STR ? ELEM_STR : kind;
}

/* Decodes the header of one element at p (avail bytes there).  On success
 * sets *hdr (header bytes), *payload (bytes after the header for scalars and
 * strings) or *count (elements for containers).  Returns ELEM_* or -1 when
 * the header itself is cut off.  The forms requests are made of (fix
 * ints, nil, bools, fixmap, fixarray, fixstr, ints of 1 to 8 bytes) are
 * decoded inline, the rest in elem_header_long. */
static inline int elem_header(const uint8_t *p, size_t avail, size_t *hdr,
                              uint64_t *payload, uint64_t *count)
{
    uint8_t b = p[0];
    *payload = 0;
    *count = 0;
    *hdr = 1;
    if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3)
        return ELEM_SCALAR;
    if (b <= 0x8f) { *count = b & 0x0f; return ELEM_MAP; }
    if (b <= 0x9f) { *count = b & 0x0f; return ELEM_ARRAY; }
    if (b <= 0xbf) { *payload = b & 0x1f; return ELEM_STR; }
    if (b >= 0xcc && b <= 0xd3) {               /* uint/int 8..64 */
        *payload = 1u << ((b - 0xcc) & 3);
        return ELEM_SCALAR;
    }
    return elem_header_long(p, avail, hdr, payload, count);
}

/* A top-level key of an indexed map (past COORD_INDEX_MAX the index is
 * incomplete), then where its value starts: both index passes record them
 * here. */
static inline void index_key(coord_index *idx, const uint8_t *key, size_t klen)
{
    if (idx->n < COORD_INDEX_MAX) {
        idx->f[idx->n].key = key;
        idx->f[idx->n].klen = (uint32_t)klen;
        coord_index_note(idx, idx->n, klen, key);
    } else {
        idx->complete = false;
    }
}

static inline void index_value(coord_index *idx, const uint8_t *val)
{
    if (idx->n < COORD_INDEX_MAX)
        idx->f[idx->n++].val = val;
}

/* The walk behind coord_frame_validate and coord_frame_index: when idx is
 * not NULL, the top-level keys and where their values start are recorded
 * on the way (the first COORD_INDEX_MAX of them). */
static int walk(const uint8_t *body, size_t len, int max_depth, coord_index *idx)
{
    /* items left in each open container; maps count keys and values */
    uint64_t left[COORD_MAX_DEPTH + 1];
    uint8_t in_map[COORD_MAX_DEPTH + 1];
    int sp = 0;
    size_t pos = 0;

    if (len == 0)
        return COORD_FRAME_EMPTY;
    if (max_depth < 1 || max_depth > COORD_MAX_DEPTH)
        max_depth = COORD_MAX_DEPTH;

    do {
        int is_key = 0;
        if (sp > 0) {
            if (left[sp - 1] == 0) {
                sp--;
                continue;
            }
            left[sp - 1]--;
            is_key = in_map[sp - 1] && (left[sp - 1] & 1);
        }
        if (pos >= len)
            return COORD_FRAME_TRUNCATED;

        size_t hdr;
        uint64_t payload, count;
        int kind = elem_header(body + pos, len - pos, &hdr, &payload, &count);
        /* a map16/map32 header cut off is a truncated map, not a non-map */
        if (kind < 0 && (sp > 0 || body[pos] == 0xde || body[pos] == 0xdf))
            return COORD_FRAME_TRUNCATED;
        if (sp == 0 && kind != ELEM_MAP)
            return kind == ELEM_INVALID ? COORD_FRAME_INVALID
                                        : COORD_FRAME_NOT_MAP;
        if (kind == ELEM_INVALID)
            return COORD_FRAME_INVALID;
        if (kind < 0)
            return COORD_FRAME_TRUNCATED;
        if (is_key && kind != ELEM_STR)
            return COORD_FRAME_KEY_NOT_STRING;
        size_t rest = len - pos - hdr;
        /* a key is indexed only once its bytes are known to be inside the
         * frame: the slot reads its first byte */
        if (idx && sp == 1) {
            if (!is_key)
                index_value(idx, body + pos);
            else if (payload <= rest)
                index_key(idx, body + pos + hdr, (size_t)payload);
        }
        pos += hdr;

        if (kind == ELEM_ARRAY || kind == ELEM_MAP) {
            if (sp >= max_depth)
                return COORD_FRAME_TOO_DEEP;
            uint64_t items = kind == ELEM_MAP ? count * 2 : count;
            /* every element takes at least one byte */
            if (items > rest)
                return COORD_FRAME_TRUNCATED;
            left[sp] = items;
            in_map[sp] = kind == ELEM_MAP;
            sp++;
        } else {
            if (payload > rest)
                return COORD_FRAME_TRUNCATED;
            pos += (size_t)payload;
        }
    } while (sp > 0);

    return pos == len ? COORD_FRAME_OK : COORD_FRAME_TRAILING;
}

int coord_frame_validate(const uint8_t *body, size_t len, int max_depth)
{
    return walk(body, len, max_depth, NULL);
}

/* The whole size of an element whose size its type byte alone tells, for
 * the forms requests are made of: positive and negative fixints, nil,
 * bools, fixstr, ints of 1 to 8 bytes.  0: any other byte (elem_header
 * reads it). */
static const uint8_t flat_size[256] = {
    [0x00 ... 0x7f] = 1,                              /* positive fixint */
    [0xa0] = 1, [0xa1] = 2, [0xa2] = 3, [0xa3] = 4, [0xa4] = 5, [0xa5] = 6,
    [0xa6] = 7, [0xa7] = 8, [0xa8] = 9, [0xa9] = 10, [0xaa] = 11, [0xab] = 12,
    [0xac] = 13, [0xad] = 14, [0xae] = 15, [0xaf] = 16, [0xb0] = 17, [0xb1] = 18,
    [0xb2] = 19, [0xb3] = 20, [0xb4] = 21, [0xb5] = 22, [0xb6] = 23, [0xb7] = 24,
    [0xb8] = 25, [0xb9] = 26, [0xba] = 27, [0xbb] = 28, [0xbc] = 29, [0xbd] = 30,
    [0xbe] = 31, [0xbf] = 32,                          /* fixstr: 1 + length */
    [0xc0] = 1, [0xc2] = 1, [0xc3] = 1,                /* nil, false, true */
    [0xcc] = 2, [0xcd] = 3, [0xce] = 5, [0xcf] = 9,    /* uint 8..64 */
    [0xd0] = 2, [0xd1] = 3, [0xd2] = 5, [0xd3] = 9,    /* int 8..64 */
    [0xe0 ... 0xff] = 1,                              /* negative fixint */
};

/* The frame nearly every request is: a map whose keys are strings and
 * whose values are scalars, strings or binaries, read in one pass with no
 * stack (the usual forms by flat_size, the rest by elem_header).  Anything
 * else (a container value, a malformed or cut-off byte) returns -1 and
 * leaves it to the general walk, which then gives exactly the status it
 * always gave: this path only ever says OK, and only for frames the walk
 * accepts as well (the fuzz target checks that both agree on every
 * input). */
static int index_flat(const uint8_t *body, size_t len, coord_index *idx)
{
    size_t hdr, pos;
    uint64_t payload, pairs, count;
    if (body[0] >= 0x80 && body[0] <= 0x8f) {             /* fixmap */
        pairs = body[0] & 0x0f;
        pos = 1;
    } else if (body[0] == 0xde && len >= 3) {             /* map16: our encoder's */
        pairs = ((uint64_t)body[1] << 8) | body[2];
        pos = 3;
    } else if (elem_header(body, len, &hdr, &payload, &pairs) == ELEM_MAP) {
        pos = hdr;
    } else {
        return -1;
    }
    for (; pairs > 0; pairs--) {
        /* the key, and at least the first byte of its value */
        if (pos >= len)
            return -1;
        uint8_t b = body[pos];
        if (b >= 0xa0 && b <= 0xbf) {                     /* fixstr */
            hdr = 1;
            payload = b & 0x1f;
        } else if (elem_header(body + pos, len - pos, &hdr, &payload, &count) != ELEM_STR) {
            return -1;
        }
        if (payload >= len - pos - hdr)
            return -1;
        index_key(idx, body + pos + hdr, (size_t)payload);
        pos += hdr + (size_t)payload;
        size_t size = flat_size[body[pos]];
        if (size == 0) {
            int kind = elem_header(body + pos, len - pos, &hdr, &payload, &count);
            if ((kind != ELEM_SCALAR && kind != ELEM_STR) || payload > len - pos - hdr)
                return -1;
            size = hdr + (size_t)payload;
        } else if (size > len - pos) {
            return -1;
        }
        index_value(idx, body + pos);
        pos += size;
    }
    return pos == len ? COORD_FRAME_OK : -1;
}

static void index_start(coord_index *idx, const uint8_t *body, size_t len)
{
    idx->n = 0;
    idx->complete = true;
    idx->seen = 0;
    idx->map = body;
    idx->map_len = len;
}

int coord_frame_index(const uint8_t *body, size_t len, coord_index *idx)
{
    index_start(idx, body, len);
    if (len > 0 && index_flat(body, len, idx) == COORD_FRAME_OK)
        return COORD_FRAME_OK;
    index_start(idx, body, len);
    return walk(body, len, COORD_MAX_DEPTH, idx);
}

/* Bytes taken by the (already validated) element at p. */
size_t coord_elem_size(const uint8_t *p, size_t avail)
{
    size_t hdr;
    uint64_t payload, count;
    int kind = elem_header(p, avail, &hdr, &payload, &count);
    if (kind != ELEM_ARRAY && kind != ELEM_MAP)
        return hdr + (size_t)payload;
    size_t pos = hdr;
    uint64_t items = kind == ELEM_MAP ? count * 2 : count;
    for (uint64_t i = 0; i < items && pos < avail; i++)
        pos += coord_elem_size(p + pos, avail - pos);   /* depth <= COORD_MAX_DEPTH */
    return pos;
}

int coord_index_nested(const uint8_t *map, size_t avail, coord_index *idx)
{
    size_t len = coord_elem_size(map, avail);
    return coord_frame_index(map, len > avail ? avail : len, idx);
}

/* ---- incremental reader ---- */

void coord_frame_reader_init(coord_frame_reader *r, uint32_t max_frame)
{
    memset(r, 0, sizeof *r);
    r->max_frame = max_frame ? max_frame : COORD_MAX_FRAME_DEFAULT;
}

void coord_frame_reader_free(coord_frame_reader *r)
{
    free(r->partial);
    r->partial = NULL;
    r->have = r->cap = 0;
}

size_t coord_frame_reader_pending(const coord_frame_reader *r)
{
    return r->cap;
}

size_t coord_frame_reader_used(const coord_frame_reader *r)
{
    return r->used;
}

static int check_length(const coord_frame_reader *r, uint32_t n)
{
    if (n == 0)
        return COORD_FRAME_EMPTY;
    if (n > r->max_frame)
        return COORD_FRAME_TOO_LONG;
    return COORD_FRAME_OK;
}

static int ensure_cap(coord_frame_reader *r, size_t need)
{
    if (need <= r->cap)
        return 0;
    uint8_t *p = realloc(r->partial, need);
    if (!p)
        return -1;
    r->partial = p;
    r->cap = need;
    return 0;
}

/* A big buffer kept for an idle connection costs memory for nothing. */
#define KEEP_PARTIAL_CAP 4096

/* Room for need bytes of a frame of total bytes: the buffer grows with the
 * bytes that really arrived (doubling, never past total), so a length
 * prefix alone reserves nothing. */
static int reserve_arrived(coord_frame_reader *r, size_t need, size_t total)
{
    if (need <= r->cap)
        return 0;
    size_t cap = r->cap < KEEP_PARTIAL_CAP ? KEEP_PARTIAL_CAP : r->cap;
    while (cap < need)
        cap *= 2;
    if (cap > total)
        cap = total > KEEP_PARTIAL_CAP ? total : KEEP_PARTIAL_CAP;
    if (cap < need)
        cap = need;
    return ensure_cap(r, cap);
}

int coord_frame_feed(coord_frame_reader *r, const uint8_t *data, size_t n,
                     coord_frame_cb cb, void *ud)
{
    const uint8_t *start = data;
    r->used = n;
    /* first finish a frame that an earlier read left incomplete */
    if (r->have > 0) {
        if (r->have < COORD_FRAME_HEADER) {
            size_t take = COORD_FRAME_HEADER - r->have;
            if (take > n)
                take = n;
            if (ensure_cap(r, KEEP_PARTIAL_CAP) < 0)
                return COORD_FRAME_NOMEM;
            memcpy(r->partial + r->have, data, take);
            r->have += take;
            data += take;
            n -= take;
            if (r->have < COORD_FRAME_HEADER)
                return COORD_FRAME_OK;
            int st = check_length(r, coord_be32(r->partial));
            if (st != COORD_FRAME_OK)
                return st;
        }
        size_t total = COORD_FRAME_HEADER + (size_t)coord_be32(r->partial);
        size_t take = total - r->have;
        if (take > n)
            take = n;
        if (reserve_arrived(r, r->have + take, total) < 0)
            return COORD_FRAME_NOMEM;
        memcpy(r->partial + r->have, data, take);
        r->have += take;
        data += take;
        n -= take;
        if (r->have < total)
            return COORD_FRAME_OK;
        r->have = 0;
        int stop = cb(ud, r->partial + COORD_FRAME_HEADER,
                      total - COORD_FRAME_HEADER);
        if (r->cap > KEEP_PARTIAL_CAP) {
            free(r->partial);
            r->partial = NULL;
            r->cap = 0;
        }
        if (stop) {
            r->used = (size_t)(data - start);
            return -1;
        }
    }

    /* then whole frames straight from the caller's bytes */
    while (n >= COORD_FRAME_HEADER) {
        uint32_t len = coord_be32(data);
        int st = check_length(r, len);
        if (st != COORD_FRAME_OK)
            return st;
        if (n - COORD_FRAME_HEADER < len)
            break;
        data += COORD_FRAME_HEADER + len;
        n -= COORD_FRAME_HEADER + len;
        if (cb(ud, data - len, len)) {
            r->used = (size_t)(data - start);
            return -1;
        }
    }

    if (n > 0) {
        size_t total = n >= COORD_FRAME_HEADER
                       ? COORD_FRAME_HEADER + (size_t)coord_be32(data) : n;
        if (reserve_arrived(r, n, total) < 0)
            return COORD_FRAME_NOMEM;
        memcpy(r->partial, data, n);
        r->have = n;
    }
    return COORD_FRAME_OK;
}
