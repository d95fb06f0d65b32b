/* gen_corpus.c - writes the seed corpus of fuzz_frame into a directory:
 * valid requests, replies and events encoded by coord_enc, and one file per
 * malformed case.  Its output is committed as tests/fuzz/corpus/:
 *     build-x/tests/gen_corpus tests/fuzz/corpus
 * Seeds are wire streams (4-byte length + body, possibly several frames);
 * names starting with "raw-" are bare bodies without a length prefix, for
 * the direct coord_frame_validate path of the target. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "enc.h"
#include "errors.h"
#include "frame.h"

static const char *outdir;
static int written;

static void save(const char *name, const void *p, size_t n)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", outdir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0) {
        fprintf(stderr, "gen_corpus: %s: %s\n", path, strerror(errno));
        exit(1);
    }
    written++;
}

static void save_buf(const char *name, coord_buf *b)
{
    save(name, b->data, b->len);
    b->len = 0;
}

/* A raw body wrapped in a frame header. */
static void save_framed(const char *name, const void *body, size_t n)
{
    uint8_t *p = malloc(COORD_FRAME_HEADER + n);
    coord_put_be32(p, (uint32_t)n);
    memcpy(p + COORD_FRAME_HEADER, body, n);
    save(name, p, COORD_FRAME_HEADER + n);
    free(p);
}

#define RAW(name, ...)                                                         \
    do {                                                                       \
        static const uint8_t body_[] = { __VA_ARGS__ };                        \
        save_framed(name, body_, sizeof body_);                                \
    } while (0)

static void req(coord_enc *e, coord_buf *b, const char *op, uint64_t rid)
{
    coord_enc_begin(e, b);
    coord_enc_kv_cstr(e, "op", op);
    coord_enc_kv_uint(e, "rid", rid);
}

static void end(coord_enc *e)
{
    if (coord_enc_end(e) == 0) {
        fprintf(stderr, "gen_corpus: encoder refused a seed\n");
        exit(1);
    }
}

static void hello(coord_enc *e, coord_buf *b)
{
    req(e, b, "hello", 1);
    coord_enc_kv_uint(e, "proto", 1);
    coord_enc_kv_cstr(e, "client", "my-app");
    coord_enc_kv_uint(e, "pid", 1234);
    coord_enc_kv_cstr(e, "instance", "5f0c2a9e41d7");
    coord_enc_kv_cstr(e, "scope", "");
    end(e);
}

static void valid_seeds(void)
{
    coord_buf b;
    coord_enc e;
    coord_buf_init(&b);

    hello(&e, &b);
    save_buf("hello", &b);

    req(&e, &b, "ping", 2);
    end(&e);
    save_buf("ping", &b);

    req(&e, &b, "lock.acquire", 3);
    coord_enc_kv_cstr(&e, "name", "oauth-token");
    coord_enc_kv_cstr(&e, "mode", "exclusive");
    coord_enc_kv_bool(&e, "if_available", false);
    coord_enc_kv_bool(&e, "steal", false);
    coord_enc_kv_uint(&e, "timeout_ms", 5000);
    coord_enc_kv_uint(&e, "lease_ms", 0);
    end(&e);
    save_buf("lock-acquire", &b);

    req(&e, &b, "lock.acquire", 4);
    coord_enc_kv_bin(&e, "name", "a\0b", 3);
    coord_enc_kv_cstr(&e, "mode", "shared");
    coord_enc_kv_bool(&e, "if_available", true);
    end(&e);
    save_buf("lock-acquire-shared-bin-name", &b);

    req(&e, &b, "lock.release", 5);
    coord_enc_kv_uint(&e, "lock", 12);
    end(&e);
    save_buf("lock-release", &b);

    req(&e, &b, "lock.renew", 6);
    coord_enc_kv_uint(&e, "lock", 12);
    coord_enc_kv_uint(&e, "lease_ms", 30000);
    end(&e);
    save_buf("lock-renew", &b);

    req(&e, &b, "cancel", 7);
    coord_enc_kv_uint(&e, "target", 3);
    end(&e);
    save_buf("cancel", &b);

    req(&e, &b, "flight.join", 8);
    coord_enc_kv_cstr(&e, "key", "refresh:alice");
    coord_enc_kv_uint(&e, "owner_ttl_ms", 30000);
    coord_enc_kv_uint(&e, "wait_ms", 10000);
    coord_enc_kv_uint(&e, "max_age_ms", 500);
    coord_enc_kv_bool(&e, "abort_when_orphaned", true);
    end(&e);
    save_buf("flight-join", &b);

    req(&e, &b, "flight.complete", 9);
    coord_enc_kv_uint(&e, "flight", 4);
    coord_enc_kv_uint(&e, "fence", (uint64_t)42 << 32 | 1);
    coord_enc_kv_bin(&e, "result", "{\"token\":\"abc\"}", 15);
    coord_enc_kv_uint(&e, "keep_ms", 60000);
    end(&e);
    save_buf("flight-complete", &b);

    req(&e, &b, "flight.fail", 10);
    coord_enc_kv_uint(&e, "flight", 4);
    coord_enc_kv_uint(&e, "fence", 2);
    coord_enc_key(&e, "error");
    coord_enc_map_begin(&e);
    coord_enc_kv_cstr(&e, "code", "TIMEOUT");
    coord_enc_kv_cstr(&e, "message", "upstream did not answer");
    coord_enc_map_end(&e);
    coord_enc_kv_bool(&e, "retryable", true);
    end(&e);
    save_buf("flight-fail", &b);

    req(&e, &b, "record.list", 11);
    coord_enc_kv_cstr(&e, "prefix", "refresh:");
    coord_enc_kv_uint(&e, "limit", 100);
    end(&e);
    save_buf("record-list", &b);

    req(&e, &b, "leader.campaign", 12);
    coord_enc_kv_cstr(&e, "workstream", "indexer");
    coord_enc_kv_uint(&e, "lease_ms", 30000);
    coord_enc_kv_bool(&e, "steal", false);
    coord_enc_kv_uint(&e, "timeout_ms", 0);
    end(&e);
    save_buf("leader-campaign", &b);

    req(&e, &b, "leader.commit", 13);
    coord_enc_kv_cstr(&e, "workstream", "indexer");
    coord_enc_kv_uint(&e, "generation", 7);
    coord_enc_kv_cstr(&e, "op_id", "op-0001");
    coord_enc_kv_cstr(&e, "key", "cursor");
    coord_enc_kv_bin(&e, "value", "\x00\x01\x02\x03", 4);
    end(&e);
    save_buf("leader-commit", &b);

    req(&e, &b, "sub.publish", 14);
    coord_enc_kv_cstr(&e, "channel", "theme");
    coord_enc_kv_bin(&e, "data", "dark", 4);
    end(&e);
    save_buf("sub-publish", &b);

    /* a reply with the deepest nesting v1 uses: map -> array -> map */
    coord_enc_reply_begin(&e, &b, 15);
    coord_enc_key(&e, "held");
    coord_enc_array_begin(&e);
    for (int i = 0; i < 2; i++) {
        coord_enc_map_begin(&e);
        coord_enc_kv_cstr(&e, "name", "cache");
        coord_enc_kv_cstr(&e, "mode", "shared");
        coord_enc_kv_uint(&e, "conn", 17 + (uint64_t)i);
        coord_enc_kv_cstr(&e, "client", "my-app");
        coord_enc_kv_uint(&e, "pid", 1234);
        coord_enc_kv_uint(&e, "token", 99);
        coord_enc_kv_uint(&e, "age_ms", 12);
        coord_enc_map_end(&e);
    }
    coord_enc_array_end(&e);
    coord_enc_key(&e, "pending");
    coord_enc_array_begin(&e);
    coord_enc_array_end(&e);
    end(&e);
    save_buf("reply-lock-query", &b);

    coord_enc_error(&b, 16, COORD_EFENCED, "stale generation");
    save_buf("reply-error", &b);

    coord_enc_event_begin(&e, &b, "lock.lost");
    coord_enc_kv_uint(&e, "lock", 12);
    coord_enc_kv_cstr(&e, "name", "oauth-token");
    coord_enc_kv_cstr(&e, "reason", "stolen");
    end(&e);
    save_buf("event-lock-lost", &b);

    /* a whole session in one stream */
    hello(&e, &b);
    req(&e, &b, "lock.acquire", 2);
    coord_enc_kv_cstr(&e, "name", "build-cache");
    end(&e);
    req(&e, &b, "lock.release", 3);
    coord_enc_kv_uint(&e, "lock", 1);
    end(&e);
    req(&e, &b, "stats", 4);
    end(&e);
    save_buf("session", &b);

    /* well-formed MessagePack, badly typed fields */
    coord_enc_begin(&e, &b);
    coord_enc_kv_uint(&e, "op", 1);
    coord_enc_kv_cstr(&e, "rid", "x");
    coord_enc_kv_uint(&e, "mode", 7);
    coord_enc_key(&e, "timeout_ms");
    coord_enc_int(&e, -5);
    coord_enc_kv_cstr(&e, "error", "not a map");
    coord_enc_kv_uint(&e, "if_available", 1);
    end(&e);
    save_buf("bad-field-types", &b);

    /* nil for a required field, and an error map without code */
    req(&e, &b, "flight.fail", 0);
    coord_enc_key(&e, "flight");
    coord_enc_nil(&e);
    coord_enc_key(&e, "error");
    coord_enc_map_begin(&e);
    coord_enc_kv_cstr(&e, "message", "no code");
    coord_enc_map_end(&e);
    end(&e);
    save_buf("nil-fields", &b);

    /* a bare body, no length prefix */
    hello(&e, &b);
    save("raw-hello", b.data + COORD_FRAME_HEADER, b.len - COORD_FRAME_HEADER);
    b.len = 0;

    coord_buf_free(&b);
}

static void malformed_seeds(void)
{
    static const uint8_t zero[4] = { 0, 0, 0, 0 };
    save("bad-empty-frame", zero, sizeof zero);

    static const uint8_t huge[] = { 0xff, 0xff, 0xff, 0xff, 0x81, 0xa1, 'a', 0x01 };
    save("bad-too-long", huge, sizeof huge);

    uint8_t over[8] = { 0, 0, 0, 0, 0x80, 0, 0, 0 };
    coord_put_be32(over, COORD_MAX_FRAME_DEFAULT + 1);
    save("bad-max-frame-plus-one", over, sizeof over);

    RAW("bad-not-map", 0x92, 0x01, 0x02);
    RAW("bad-key-int", 0x81, 0x01, 0x01);
    RAW("bad-key-nested", 0x81, 0xa5, 'e', 'r', 'r', 'o', 'r', 0x81, 0xc4, 0x01,
        'c', 0x01);
    RAW("bad-trailing", 0x81, 0xa2, 'o', 'p', 0xa4, 'p', 'i', 'n', 'g', 0xc0);
    RAW("bad-truncated", 0x82, 0xa2, 'o', 'p', 0xa4, 'p', 'i', 'n', 'g', 0xa3, 'r');
    RAW("bad-huge-map32", 0xdf, 0xff, 0xff, 0xff, 0xff);
    RAW("bad-huge-array32", 0x81, 0xa4, 'h', 'e', 'l', 'd', 0xdd, 0xff, 0xff,
        0xff, 0xff);
    RAW("bad-huge-str32", 0x81, 0xa1, 'k', 0xdb, 0x7f, 0xff, 0xff, 0xff);
    RAW("bad-invalid-c1", 0x81, 0xa2, 'o', 'p', 0xc1);
    RAW("bad-too-deep", 0x81, 0xa1, 'a', 0x91, 0x81, 0xa1, 'b', 0x91, 0x91, 0x01);

    /* {"": ""}: msgpack-c gives these empty strs a NULL pointer */
    RAW("empty-key-and-value", 0x81, 0xa0, 0xa0);
    static const uint8_t empty_key[] = { 0x81, 0xa0, 0x6b };
    save("raw-empty-key", empty_key, sizeof empty_key);

    /* every value type once, as a frame and as a bare body */
    static const uint8_t types[] = {
        0xde, 0x00, 0x0c,
        0xa1, 'n', 0xc0,
        0xa1, 'b', 0xc3,
        0xa1, 'i', 0xd3, 0x80, 0, 0, 0, 0, 0, 0, 0,
        0xa1, 'u', 0xcf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        0xa1, 'f', 0xca, 0x3f, 0x80, 0x00, 0x00,
        0xa1, 'd', 0xcb, 0x3f, 0xf0, 0, 0, 0, 0, 0, 0,
        0xa1, 's', 0xda, 0x00, 0x02, 'h', 'i',
        0xa1, 'x', 0xc5, 0x00, 0x01, 0x00,
        0xa1, 'e', 0xd6, 0xff, 0, 0, 0, 1,
        0xa1, 'E', 0xc7, 0x02, 0x05, 'a', 'b',
        0xa1, 'a', 0xdc, 0x00, 0x02, 0x81, 0xa1, 'k', 0x01, 0x90,
        0xa1, 'm', 0xdf, 0x00, 0x00, 0x00, 0x01, 0xa4, 'c', 'o', 'd', 'e',
                   0xa4, 'L', 'O', 'C', 'K',
    };
    save_framed("all-types", types, sizeof types);
    save("raw-all-types", types, sizeof types);

    /* a good frame, then a frame cut off by the end of the stream */
    coord_buf b;
    coord_enc e;
    coord_buf_init(&b);
    coord_enc_begin(&e, &b);
    coord_enc_kv_cstr(&e, "op", "ping");
    coord_enc_kv_uint(&e, "rid", 1);
    end(&e);
    size_t one = b.len;
    coord_enc_begin(&e, &b);
    coord_enc_kv_cstr(&e, "op", "ping");
    coord_enc_kv_uint(&e, "rid", 2);
    end(&e);
    save("bad-cut-second-frame", b.data, one + (b.len - one) / 2);
    /* a good frame, then an empty one */
    b.len = one;
    coord_buf_append(&b, zero, sizeof zero);
    save("bad-empty-after-good", b.data, b.len);
    coord_buf_free(&b);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s OUTDIR\n", argv[0]);
        return 2;
    }
    outdir = argv[1];
    valid_seeds();
    malformed_seeds();
    printf("gen_corpus: wrote %d seeds to %s\n", written, outdir);
    return 0;
}
