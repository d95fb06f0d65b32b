/* frame.h - framing of the coord wire protocol and the validating walk that
 * every untrusted frame passes before msgpack-c is allowed to decode it.
 *
 * A frame is a 4-byte big-endian length N, then N bytes holding exactly one
 * MessagePack map with string keys (see protocol/PROTOCOL.md). */
#ifndef COORD_PROTO_FRAME_H
#define COORD_PROTO_FRAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define COORD_FRAME_HEADER 4u
#define COORD_MAX_FRAME_DEFAULT (1u << 20)
/* The largest max_frame protocol v1 allows (64 MiB): a broker refuses
 * --max-frame above it, a client refuses a hello that announces more, so
 * neither side ever buffers a frame larger than this.  Big enough for a
 * lock.query of a busy broker and the records of flight.complete. */
#define COORD_MAX_FRAME_CAP (64u << 20)
/* The deepest nesting protocol v1 uses: reply map -> array -> entry map. */
#define COORD_MAX_DEPTH 3

/* Why a frame was refused.  Each has a distinct value and text; all of them
 * are protocol violations (the broker answers BAD_FRAME and closes). */
enum coord_frame_status {
    COORD_FRAME_OK = 0,
    COORD_FRAME_EMPTY,          /* length prefix is 0 */
    COORD_FRAME_TOO_LONG,       /* length prefix above max_frame */
    COORD_FRAME_NOT_MAP,        /* body does not start with a map */
    COORD_FRAME_KEY_NOT_STRING, /* a map key is not a str */
    COORD_FRAME_TRAILING,       /* bytes left after the top-level map */
    COORD_FRAME_TRUNCATED,      /* body ends inside a value, or a count
                                   announces more elements than bytes left */
    COORD_FRAME_INVALID,        /* byte 0xc1, never used by MessagePack */
    COORD_FRAME_TOO_DEEP,       /* nesting deeper than COORD_MAX_DEPTH */
    COORD_FRAME_NOMEM,          /* could not buffer a partial frame */
};

const char *coord_frame_status_text(int status);

/* Walk body[0..len) without allocating and without recursion; returns
 * COORD_FRAME_OK only when msgpack-c may safely decode it. */
int coord_frame_validate(const uint8_t *body, size_t len, int max_depth);

/* A validated map with its top-level keys indexed in the same pass: the
 * broker reads request fields from this, without decoding the frame into
 * objects.  Values are raw MessagePack bytes inside the frame. */
#define COORD_INDEX_MAX 32
typedef struct coord_index {
    uint32_t n;                 /* fields indexed */
    bool complete;              /* false: more keys than COORD_INDEX_MAX */
    uint64_t seen;              /* bit coord_index_slot of every indexed key */
    uint8_t first[64];          /* by bit, set in seen: its first field */
    const uint8_t *map;         /* the map's bytes */
    size_t map_len;
    struct {
        const uint8_t *key;
        uint32_t klen;
        const uint8_t *val;
    } f[COORD_INDEX_MAX];
} coord_index;

/* One of 64 slots by a key's length and first byte: a key whose bit is not
 * in seen is not in a complete index, with no comparison at all; one whose
 * bit is set is most often the field first[slot] (else a later one). */
static inline unsigned coord_index_slot(size_t klen, const uint8_t *key)
{
    /* 23: the keys of the protocol's requests fall into 39 distinct slots
     * of their 50, and op, rid and lock.acquire's keys into slots of
     * their own (so coord_fields_lack can tell them apart) */
    return (unsigned)((klen * 23 + (klen ? key[0] : 0)) & 63);
}

/* Records field n's key in seen and first (n < COORD_INDEX_MAX). */
static inline void coord_index_note(coord_index *idx, uint32_t n, size_t klen,
                                    const uint8_t *key)
{
    unsigned s = coord_index_slot(klen, key);
    if (!(idx->seen & ((uint64_t)1 << s))) {
        idx->seen |= (uint64_t)1 << s;
        idx->first[s] = (uint8_t)n;
    }
}

/* coord_frame_validate (depth COORD_MAX_DEPTH) plus the index. */
int coord_frame_index(const uint8_t *body, size_t len, coord_index *idx);
/* Bytes taken by one element of a frame that was validated. */
size_t coord_elem_size(const uint8_t *p, size_t avail);
/* Index a map nested in a frame that coord_frame_index accepted. */
int coord_index_nested(const uint8_t *map, size_t avail, coord_index *idx);

/* Incremental frame reader.  Bytes are fed as they arrive; complete frames
 * are handed to a callback straight from the caller's buffer, and only the
 * tail of a frame split across reads is copied into the reader. */
typedef struct coord_frame_reader {
    uint8_t *partial;       /* header + body bytes of an incomplete frame */
    size_t have;            /* bytes in partial */
    size_t cap;             /* allocated size of partial */
    size_t used;            /* of the last feed's bytes: see coord_frame_reader_used */
    uint32_t max_frame;
} coord_frame_reader;

/* Return 0 to go on, non-zero to stop feeding (the rest is left to the
 * caller: coord_frame_reader_used). */
typedef int (*coord_frame_cb)(void *ud, const uint8_t *body, size_t len);

void coord_frame_reader_init(coord_frame_reader *r, uint32_t max_frame);
void coord_frame_reader_free(coord_frame_reader *r);
/* Memory held for an incomplete frame: the buffer's size, which outlives
 * the frame (for memory accounting). */
size_t coord_frame_reader_pending(const coord_frame_reader *r);
/* After a feed the callback stopped (-1): how many of its n bytes the
 * frames handed out took, so that the next frame starts at data + used
 * (feed from there to go on, nothing is buffered beyond it).  After any
 * other feed, n (each byte handed out or buffered). */
size_t coord_frame_reader_used(const coord_frame_reader *r);

/* Returns COORD_FRAME_OK, or the status that stopped reading (EMPTY,
 * TOO_LONG, NOMEM); -1 when the callback asked to stop.  Frame bodies are
 * not validated here: the callback calls coord_frame_validate. */
int coord_frame_feed(coord_frame_reader *r, const uint8_t *data, size_t n,
                     coord_frame_cb cb, void *ud);

/* n big-endian bytes at p (n <= 8); the sizes MessagePack uses (1, 2, 4,
 * 8) are one load each. */
static inline uint64_t coord_read_be(const uint8_t *p, unsigned n)
{
    uint64_t v = 0;
    switch (n) {
    case 1:
        return p[0];
    case 2:
        return ((uint64_t)p[0] << 8) | p[1];
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    case 4: {
        uint32_t w;
        memcpy(&w, p, 4);
        return __builtin_bswap32(w);
    }
    case 8:
        memcpy(&v, p, 8);
        return __builtin_bswap64(v);
#endif
    }
    for (unsigned i = 0; i < n; i++)
        v = (v << 8) | p[i];
    return v;
}

static inline uint32_t coord_be32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) |
           ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

static inline void coord_put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24); p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);  p[3] = (uint8_t)v;
}

#endif
