/* test_ready.c - unit tests of coord_ready_await (protocol/ready.c): the
 * answers of a starting broker's ready fd, written whole or cut anywhere,
 * unknown lines skipped, EOF, a line too long, the timeout. */
#include <errno.h>
#include <stdbool.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "paths.h"
#include "ready.h"

/* What coord_ready_await says of text written to a pipe in pieces of
 * `piece` bytes (0: at once), the writer closing unless keep_open. */
static enum coord_ready await_text(const char *text, size_t piece, bool keep_open,
                                   int *err, char *reason, size_t cap)
{
    int p[2];
    CHECK(pipe(p) == 0);
    size_t n = strlen(text), at = 0;
    if (piece == 0)
        piece = n ? n : 1;
    /* the pipe holds it all (64 KiB): no writer thread needed; pieces are
     * separate writes, read as they come or together */
    while (at < n) {
        size_t k = n - at < piece ? n - at : piece;
        CHECK(write(p[1], text + at, k) == (ssize_t)k);
        at += k;
    }
    if (!keep_open)
        close(p[1]);
    enum coord_ready r = coord_ready_await(p[0], keep_open ? 50 : 5000, err, reason, cap);
    close(p[0]);
    if (keep_open)
        close(p[1]);
    return r;
}

static void test_answers(void)
{
    int e = 0;
    char reason[64];
    for (size_t piece = 0; piece < 4; piece++) {
        CHECK_EQ(await_text("ready\n", piece, false, &e, reason, sizeof reason), COORD_READY_OK);
        CHECK_EQ(await_text("E2\n", piece, false, &e, reason, sizeof reason), COORD_READY_EXEC);
        CHECK_EQ(e, ENOENT);
        CHECK_EQ(await_text("error data dir /d is in use\n", piece, false, &e, reason,
                            sizeof reason), COORD_READY_ERROR);
        CHECK_STR(reason, "data dir /d is in use");
        /* unknown lines first are skipped */
        CHECK_EQ(await_text("hello\nwhat\nready\n", piece, false, &e, reason, sizeof reason),
                 COORD_READY_OK);
    }
    /* a reason at EOF without its newline still counts; "ready" does not */
    CHECK_EQ(await_text("error no newline", 0, false, &e, reason, sizeof reason),
             COORD_READY_ERROR);
    CHECK_STR(reason, "no newline");
    CHECK_EQ(await_text("ready", 0, false, &e, reason, sizeof reason), COORD_READY_EOF);
    CHECK_EQ(await_text("", 0, false, &e, reason, sizeof reason), COORD_READY_EOF);
    CHECK_EQ(await_text("error \n", 0, false, &e, reason, sizeof reason), COORD_READY_EOF);
    /* the reason is cut to the caller's buffer */
    char small[8];
    CHECK_EQ(await_text("error 0123456789\n", 0, false, &e, small, sizeof small),
             COORD_READY_ERROR);
    CHECK_STR(small, "0123456");
}

static void test_timeout_and_long(void)
{
    int e = 0;
    char reason[64];
    CHECK_EQ(await_text("", 0, true, &e, reason, sizeof reason), COORD_READY_TIMEOUT);
    CHECK_EQ(await_text("read", 0, true, &e, reason, sizeof reason), COORD_READY_TIMEOUT);
    /* a line longer than COORD_READY_LINE_MAX without a newline: the buffer
     * fills, and that is the end (EOF), not a wait forever */
    static char longline[COORD_READY_LINE_MAX + 10];
    memset(longline, 'x', sizeof longline - 1);
    CHECK_EQ(await_text(longline, 0, true, &e, reason, sizeof reason), COORD_READY_EOF);
}

int main(void)
{
    test_answers();
    test_timeout_and_long();
    return check_report("test_ready");
}
