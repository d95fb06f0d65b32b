/* test_frame.c - unit tests of the incremental frame reader (coord_frame_feed). */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "enc.h"
#include "frame.h"

#define MAX_SEEN 64

/* What the callback saw. */
struct seen {
    int n;
    int stop_after;                 /* stop once this many frames arrived */
    const uint8_t *ptr[MAX_SEEN];   /* where the callback found each body */
    size_t len[MAX_SEEN];
    uint8_t *copy[MAX_SEEN];        /* a copy, since ptr may not live on */
};

static int collect(void *ud, const uint8_t *body, size_t len)
{
    struct seen *s = ud;
    if (s->n < MAX_SEEN) {
        s->ptr[s->n] = body;
        s->len[s->n] = len;
        s->copy[s->n] = malloc(len ? len : 1);
        memcpy(s->copy[s->n], body, len);
    }
    s->n++;
    return s->stop_after && s->n >= s->stop_after;
}

static void seen_reset(struct seen *s)
{
    for (int i = 0; i < s->n && i < MAX_SEEN; i++)
        free(s->copy[i]);
    memset(s, 0, sizeof *s);
}

/* A test stream: three frames of different sizes, with their offsets. */
struct stream {
    coord_buf buf;
    size_t off[3];      /* where each frame (its header) starts */
    size_t blen[3];     /* body lengths */
};

static void make_stream(struct stream *st)
{
    coord_buf_init(&st->buf);
    static const size_t sizes[3] = { 0, 300, 5 };
    for (int i = 0; i < 3; i++) {
        coord_enc e;
        st->off[i] = st->buf.len;
        coord_enc_begin(&e, &st->buf);
        coord_enc_kv_uint(&e, "rid", (uint64_t)i + 1);
        uint8_t pad[300];
        for (size_t k = 0; k < sizes[i]; k++)
            pad[k] = (uint8_t)(k * 7 + (size_t)i);
        coord_enc_kv_bin(&e, "pad", pad, sizes[i]);
        size_t total = coord_enc_end(&e);
        st->blen[i] = total - COORD_FRAME_HEADER;
    }
}

/* The three frames arrived intact and in order. */
static void check_stream_frames(const struct stream *st, const struct seen *s,
                                const char *how, size_t arg)
{
    CHECK_MSG(s->n == 3, "%s %zu: got %d frames", how, arg, s->n);
    for (int i = 0; i < 3 && i < s->n; i++) {
        CHECK_MSG(s->len[i] == st->blen[i], "%s %zu frame %d", how, arg, i);
        if (s->len[i] == st->blen[i])
            CHECK_MSG(memcmp(s->copy[i],
                             st->buf.data + st->off[i] + COORD_FRAME_HEADER,
                             s->len[i]) == 0,
                      "%s %zu frame %d bytes", how, arg, i);
    }
}

static void test_whole_stream_one_feed(void)
{
    struct stream st;
    struct seen s = { 0 };
    coord_frame_reader r;
    make_stream(&st);
    coord_frame_reader_init(&r, 0);
    CHECK_EQ(r.max_frame, COORD_MAX_FRAME_DEFAULT);

    CHECK_EQ(coord_frame_feed(&r, st.buf.data, st.buf.len, collect, &s),
             COORD_FRAME_OK);
    check_stream_frames(&st, &s, "one feed", 0);
    /* zero copy: each body is a pointer into the caller's buffer */
    for (int i = 0; i < 3 && i < s.n; i++)
        CHECK_MSG(s.ptr[i] == st.buf.data + st.off[i] + COORD_FRAME_HEADER,
                  "frame %d was copied", i);
    CHECK_EQ(r.have, 0);
    CHECK_EQ(coord_frame_reader_pending(&r), 0);    /* nothing buffered */

    seen_reset(&s);
    coord_frame_reader_free(&r);
    coord_buf_free(&st.buf);
}

static void test_every_split_point(void)
{
    struct stream st;
    make_stream(&st);
    for (size_t k = 1; k < st.buf.len; k++) {
        struct seen s = { 0 };
        coord_frame_reader r;
        coord_frame_reader_init(&r, 0);
        /* the first part goes through a heap copy so ASan catches any read
         * past its end */
        uint8_t *a = malloc(k), *b = malloc(st.buf.len - k);
        memcpy(a, st.buf.data, k);
        memcpy(b, st.buf.data + k, st.buf.len - k);
        int r1 = coord_frame_feed(&r, a, k, collect, &s);
        int r2 = coord_frame_feed(&r, b, st.buf.len - k, collect, &s);
        CHECK_MSG(r1 == COORD_FRAME_OK && r2 == COORD_FRAME_OK, "split %zu", k);
        check_stream_frames(&st, &s, "split", k);
        CHECK_MSG(r.have == 0, "split %zu: %zu bytes left", k, r.have);
        /* frames entirely inside the second feed are not copied */
        for (int i = 0; i < 3 && i < s.n; i++) {
            if (st.off[i] >= k)
                CHECK_MSG(s.ptr[i] == b + (st.off[i] - k) + COORD_FRAME_HEADER,
                          "split %zu: frame %d was copied", k, i);
        }
        free(a);
        free(b);
        seen_reset(&s);
        coord_frame_reader_free(&r);
    }
    coord_buf_free(&st.buf);
}

static void test_one_byte_feeds(void)
{
    struct stream st;
    struct seen s = { 0 };
    coord_frame_reader r;
    make_stream(&st);
    coord_frame_reader_init(&r, 0);
    bool all_ok = true;
    for (size_t i = 0; i < st.buf.len; i++) {
        uint8_t byte = st.buf.data[i];
        int n_before = s.n;
        if (coord_frame_feed(&r, &byte, 1, collect, &s) != COORD_FRAME_OK)
            all_ok = false;
        /* a frame is delivered exactly when its last byte arrives */
        for (int f = 0; f < 3; f++) {
            size_t end = st.off[f] + COORD_FRAME_HEADER + st.blen[f];
            if (i + 1 == end)
                CHECK_MSG(s.n == n_before + 1, "frame %d not delivered at %zu", f, i);
        }
    }
    CHECK(all_ok);
    check_stream_frames(&st, &s, "1-byte feeds", 1);
    CHECK_EQ(r.have, 0);
    seen_reset(&s);
    coord_frame_reader_free(&r);
    coord_buf_free(&st.buf);
}

/* Chunks of every size from 1 to the stream's length: frames straddle
 * feeds in every possible way. */
static void test_chunk_sizes(void)
{
    struct stream st;
    make_stream(&st);
    for (size_t chunk = 1; chunk <= st.buf.len; chunk++) {
        struct seen s = { 0 };
        coord_frame_reader r;
        coord_frame_reader_init(&r, 0);
        bool ok = true;
        for (size_t pos = 0; pos < st.buf.len; pos += chunk) {
            size_t n = st.buf.len - pos < chunk ? st.buf.len - pos : chunk;
            if (coord_frame_feed(&r, st.buf.data + pos, n, collect, &s) !=
                COORD_FRAME_OK)
                ok = false;
        }
        CHECK_MSG(ok, "chunk %zu", chunk);
        check_stream_frames(&st, &s, "chunk", chunk);
        seen_reset(&s);
        coord_frame_reader_free(&r);
    }
    coord_buf_free(&st.buf);
}

/* A feed stopped by its callback (the broker pausing a connection): what
 * it had not handed out starts at data + used.  For every split of the
 * stream in two feeds and every frame to stop after, the rest fed again
 * gives each frame once, in order: the stop falls on a frame finished
 * from the partial one as well as on a whole one. */
static void test_used_after_stop(void)
{
    struct stream st;
    make_stream(&st);
    for (size_t split = 1; split < st.buf.len; split++) {
        for (int stop = 1; stop <= 3; stop++) {
            struct seen s = { 0 };
            coord_frame_reader r;
            coord_frame_reader_init(&r, 0);
            coord_buf held;
            coord_buf_init(&held);
            const uint8_t *d = st.buf.data;
            s.stop_after = stop;
            int rc = coord_frame_feed(&r, d, split, collect, &s);
            if (rc < 0) {                 /* stopped in the first feed */
                size_t used = coord_frame_reader_used(&r);
                CHECK(used <= split);
                coord_buf_append(&held, d + used, split - used);
                coord_buf_append(&held, d + split, st.buf.len - split);
            } else {
                CHECK_EQ(rc, COORD_FRAME_OK);
                CHECK_EQ(coord_frame_reader_used(&r), split);
                rc = coord_frame_feed(&r, d + split, st.buf.len - split, collect, &s);
                if (rc < 0) {
                    size_t used = coord_frame_reader_used(&r);
                    CHECK(used <= st.buf.len - split);
                    coord_buf_append(&held, d + split + used, st.buf.len - split - used);
                }
            }
            s.stop_after = 0;
            if (held.len)
                CHECK_EQ(coord_frame_feed(&r, held.data, held.len, collect, &s), COORD_FRAME_OK);
            CHECK_EQ(r.have, 0);
            check_stream_frames(&st, &s, "split", split * 10 + (size_t)stop);
            seen_reset(&s);
            coord_buf_free(&held);
            coord_frame_reader_free(&r);
        }
    }
    coord_buf_free(&st.buf);
}

/* Many small frames in one feed. */
static void test_many_frames_one_feed(void)
{
    coord_buf buf;
    coord_buf_init(&buf);
    for (int i = 0; i < 50; i++) {
        coord_enc e;
        coord_enc_begin(&e, &buf);
        coord_enc_kv_uint(&e, "rid", (uint64_t)i);
        CHECK(coord_enc_end(&e) > 0);
    }
    struct seen s = { 0 };
    coord_frame_reader r;
    coord_frame_reader_init(&r, 0);
    CHECK_EQ(coord_frame_feed(&r, buf.data, buf.len, collect, &s), COORD_FRAME_OK);
    CHECK_EQ(s.n, 50);
    size_t off = 0;
    for (int i = 0; i < s.n && i < MAX_SEEN; i++) {
        size_t blen = coord_be32(buf.data + off);
        CHECK_MSG(s.ptr[i] == buf.data + off + COORD_FRAME_HEADER, "frame %d", i);
        CHECK_MSG(s.len[i] == blen, "frame %d", i);
        off += COORD_FRAME_HEADER + blen;
    }
    seen_reset(&s);
    coord_frame_reader_free(&r);
    coord_buf_free(&buf);
}

static void test_empty_frame(void)
{
    struct seen s = { 0 };
    coord_frame_reader r;

    /* alone */
    static const uint8_t zero[4] = { 0, 0, 0, 0 };
    coord_frame_reader_init(&r, 0);
    CHECK_EQ(coord_frame_feed(&r, zero, 4, collect, &s), COORD_FRAME_EMPTY);
    CHECK_EQ(s.n, 0);
    coord_frame_reader_free(&r);

    /* header arriving one byte at a time: EMPTY when the 4th byte is in */
    coord_frame_reader_init(&r, 0);
    for (int i = 0; i < 3; i++)
        CHECK_EQ(coord_frame_feed(&r, zero + i, 1, collect, &s), COORD_FRAME_OK);
    CHECK_EQ(coord_frame_feed(&r, zero + 3, 1, collect, &s), COORD_FRAME_EMPTY);
    CHECK_EQ(s.n, 0);
    coord_frame_reader_free(&r);

    /* after a good frame in the same feed: the good one is delivered first */
    static const uint8_t two[] = { 0, 0, 0, 1, 0x80, 0, 0, 0, 0 };
    coord_frame_reader_init(&r, 0);
    CHECK_EQ(coord_frame_feed(&r, two, sizeof two, collect, &s), COORD_FRAME_EMPTY);
    CHECK_EQ(s.n, 1);
    CHECK(s.n >= 1 && s.len[0] == 1 && s.copy[0][0] == 0x80);
    seen_reset(&s);
    coord_frame_reader_free(&r);
}

static void test_too_long(void)
{
    struct seen s = { 0 };
    coord_frame_reader r;

    /* with the default max: a huge length is refused as soon as the 4
     * header bytes are in, and nothing near its size is buffered */
    static const uint8_t huge[4] = { 0xff, 0xff, 0xff, 0xff };
    coord_frame_reader_init(&r, 0);
    CHECK_EQ(coord_frame_feed(&r, huge, 4, collect, &s), COORD_FRAME_TOO_LONG);
    CHECK(coord_frame_reader_pending(&r) <= 4096);
    coord_frame_reader_free(&r);

    /* max + 1, header split 2 + 2 */
    uint8_t hdr[4];
    coord_put_be32(hdr, COORD_MAX_FRAME_DEFAULT + 1);
    coord_frame_reader_init(&r, 0);
    CHECK_EQ(coord_frame_feed(&r, hdr, 2, collect, &s), COORD_FRAME_OK);
    CHECK_EQ(coord_frame_feed(&r, hdr + 2, 2, collect, &s), COORD_FRAME_TOO_LONG);
    CHECK(coord_frame_reader_pending(&r) <= 4096);
    coord_frame_reader_free(&r);

    /* header split 3 + 1, with body bytes behind it in the same feed */
    uint8_t msg[4 + 16];
    memset(msg, 0x80, sizeof msg);
    coord_put_be32(msg, COORD_MAX_FRAME_DEFAULT + 1);
    coord_frame_reader_init(&r, 0);
    CHECK_EQ(coord_frame_feed(&r, msg, 3, collect, &s), COORD_FRAME_OK);
    CHECK_EQ(coord_frame_feed(&r, msg + 3, sizeof msg - 3, collect, &s),
             COORD_FRAME_TOO_LONG);
    coord_frame_reader_free(&r);

    /* a small max_frame: exactly max is fine, max + 1 is not */
    uint8_t frame[4 + 101];
    memset(frame, 0xc0, sizeof frame);
    coord_frame_reader_init(&r, 100);
    coord_put_be32(frame, 100);
    CHECK_EQ(coord_frame_feed(&r, frame, 104, collect, &s), COORD_FRAME_OK);
    CHECK_EQ(s.n, 1);
    CHECK_EQ(s.n >= 1 ? s.len[0] : 0, 100);
    coord_put_be32(frame, 101);
    CHECK_EQ(coord_frame_feed(&r, frame, 4, collect, &s), COORD_FRAME_TOO_LONG);
    CHECK_EQ(s.n, 1);
    coord_frame_reader_free(&r);

    /* exactly max arriving in pieces, then a too-long one straight after */
    coord_frame_reader_init(&r, 100);
    coord_put_be32(frame, 100);
    CHECK_EQ(coord_frame_feed(&r, frame, 50, collect, &s), COORD_FRAME_OK);
    CHECK_EQ(coord_frame_feed(&r, frame + 50, 54, collect, &s), COORD_FRAME_OK);
    CHECK_EQ(s.n, 2);
    coord_put_be32(frame, 1000);
    CHECK_EQ(coord_frame_feed(&r, frame, 5, collect, &s), COORD_FRAME_TOO_LONG);
    CHECK_EQ(s.n, 2);
    seen_reset(&s);
    coord_frame_reader_free(&r);
}

static void test_callback_stops(void)
{
    struct stream st;
    make_stream(&st);

    /* whole frames in one feed: stop after the first */
    struct seen s = { .stop_after = 1 };
    coord_frame_reader r;
    coord_frame_reader_init(&r, 0);
    CHECK_EQ(coord_frame_feed(&r, st.buf.data, st.buf.len, collect, &s), -1);
    CHECK_EQ(s.n, 1);
    seen_reset(&s);
    coord_frame_reader_free(&r);

    /* a frame completed from the partial buffer: stop there, the rest of
     * that feed is dropped */
    s.stop_after = 1;
    coord_frame_reader_init(&r, 0);
    size_t cut = st.off[0] + 2;      /* inside frame 0's header */
    CHECK_EQ(coord_frame_feed(&r, st.buf.data, cut, collect, &s), COORD_FRAME_OK);
    CHECK_EQ(s.n, 0);
    CHECK_EQ(coord_frame_feed(&r, st.buf.data + cut, st.buf.len - cut, collect, &s), -1);
    CHECK_EQ(s.n, 1);
    seen_reset(&s);
    coord_frame_reader_free(&r);

    /* stop after the second: the third is not delivered */
    s.stop_after = 2;
    coord_frame_reader_init(&r, 0);
    CHECK_EQ(coord_frame_feed(&r, st.buf.data, st.buf.len, collect, &s), -1);
    CHECK_EQ(s.n, 2);
    seen_reset(&s);
    coord_frame_reader_free(&r);
    coord_buf_free(&st.buf);
}

/* A body bigger than the reader's kept buffer, in 1000-byte pieces: the
 * bytes arrive intact, and the big buffer is released afterwards. */
static void test_big_frame_pieces(void)
{
    size_t blen = 200000;
    uint8_t *stream = malloc(COORD_FRAME_HEADER + blen);
    coord_put_be32(stream, (uint32_t)blen);
    for (size_t i = 0; i < blen; i++)
        stream[COORD_FRAME_HEADER + i] = (uint8_t)(i * 31 + 7);
    struct seen s = { 0 };
    coord_frame_reader r;
    coord_frame_reader_init(&r, 0);
    size_t total = COORD_FRAME_HEADER + blen;
    for (size_t pos = 0; pos < total; pos += 1000) {
        size_t n = total - pos < 1000 ? total - pos : 1000;
        CHECK_EQ(coord_frame_feed(&r, stream + pos, n, collect, &s), COORD_FRAME_OK);
        if (pos + n < total)
            CHECK_EQ(s.n, 0);
    }
    CHECK_EQ(s.n, 1);
    CHECK(s.n == 1 && s.len[0] == blen &&
          memcmp(s.copy[0], stream + COORD_FRAME_HEADER, blen) == 0);
    CHECK(s.n == 1 && s.ptr[0] != stream + COORD_FRAME_HEADER);   /* was copied */
    CHECK(coord_frame_reader_pending(&r) <= 4096);
    seen_reset(&s);
    coord_frame_reader_free(&r);
    free(stream);
}

/* A frame whose header arrived partly but nothing else: pending bytes are
 * accounted, and free releases them. */
static void test_pending_and_free(void)
{
    coord_frame_reader r;
    struct seen s = { 0 };
    static const uint8_t part[6] = { 0, 0, 0, 10, 0x81, 0xa1 };
    coord_frame_reader_init(&r, 0);
    CHECK_EQ(coord_frame_feed(&r, part, sizeof part, collect, &s), COORD_FRAME_OK);
    CHECK_EQ(r.have, 6);
    CHECK(coord_frame_reader_pending(&r) >= 6);
    /* the rest of the frame: none of it is held any more, while the
     * buffer (what pending accounts) is kept for the next one */
    static const uint8_t rest[12] = { 'k', 0xa1, 'v', 0, 0, 0, 0, 0,   /* its body */
                                      0, 0, 0, 5 };                   /* the next header */
    CHECK_EQ(coord_frame_feed(&r, rest, sizeof rest, collect, &s), COORD_FRAME_OK);
    CHECK_EQ(s.n, 1);
    CHECK_EQ(r.have, 4);                           /* the next frame's header so far */
    CHECK(coord_frame_reader_pending(&r) >= 4096);
    seen_reset(&s);
    coord_frame_reader_free(&r);
    CHECK_EQ(r.have, 0);
    CHECK_EQ(coord_frame_reader_pending(&r), 0);
    CHECK(r.partial == NULL);
    CHECK_EQ(s.n, 0);
    /* free twice is harmless */
    coord_frame_reader_free(&r);
}

/* A length prefix alone reserves nothing: the buffer grows with the bytes
 * that arrive (doubling), never to what the prefix announces. */
static void test_grows_with_arrival(void)
{
    coord_frame_reader r;
    struct seen s = { 0 };
    const uint32_t len = 1u << 20;
    uint8_t hdr[5] = { (uint8_t)(len >> 24), (uint8_t)(len >> 16), (uint8_t)(len >> 8),
                       (uint8_t)len, 0x80 };
    coord_frame_reader_init(&r, len);
    CHECK_EQ(coord_frame_feed(&r, hdr, sizeof hdr, collect, &s), COORD_FRAME_OK);
    CHECK(coord_frame_reader_pending(&r) <= 4096);
    static uint8_t chunk[10000];
    size_t sent = 1;
    for (int i = 0; i < 10; i++, sent += sizeof chunk) {
        CHECK_EQ(coord_frame_feed(&r, chunk, sizeof chunk, collect, &s), COORD_FRAME_OK);
        size_t have = COORD_FRAME_HEADER + sent + sizeof chunk;
        CHECK(coord_frame_reader_pending(&r) >= have);
        CHECK(coord_frame_reader_pending(&r) <= 2 * have + 4096);
    }
    CHECK_EQ(s.n, 0);
    coord_frame_reader_free(&r);
}

int main(void)
{
    test_whole_stream_one_feed();
    test_every_split_point();
    test_one_byte_feeds();
    test_chunk_sizes();
    test_many_frames_one_feed();
    test_empty_frame();
    test_too_long();
    test_callback_stops();
    test_big_frame_pieces();
    test_pending_and_free();
    test_used_after_stop();
    test_grows_with_arrival();
    return check_report("test_frame");
}
