/* test_result_ref_client.c - results by reference through libcoord and
 * coordctl, against a real broker: coord_memfd_sealed makes the sealed
 * memfd, coord_flight_complete_fd passes it (a result larger than a frame),
 * a libcoord follower gets the descriptor (by_ref, result_fd) and `coordctl
 * once` prints it; the record kept by reference is read by coord_record_get
 * and printed by `coordctl record get` and by a later `coordctl once --keep`. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "coord.h"
#include "harness.h"
#include "leader-util.h"

#define T 10000

static struct broker_proc bp;

static coord_t *lib_as(const char *client)
{
    return lib_connect(&bp, NULL, client);
}

/* Waits for the -flights event `what` (earlier ones skipped). */
static bool await_what(coord_t *w, const char *what)
{
    for (;;) {
        coord_reply_t *ev = NULL;
        if (coord_next_event(w, T, &ev) < 0)
            return false;
        const char *s = NULL;
        size_t n = 0;
        coord_map_str(coord_reply_map(ev), "what", &s, &n);
        bool hit = s && n == strlen(what) && memcmp(s, what, n) == 0;
        coord_reply_free(ev);
        if (hit)
            return true;
    }
}

struct got {
    bool called;
    int status;
    coord_flight f;
};

static void on_join(coord_t *c, int status, coord_flight *f, void *ud)
{
    (void)c;
    struct got *g = ud;
    g->called = true;
    g->status = status;
    g->f = *f;                       /* the outcome is ours now */
    memset(f, 0, sizeof *f);
}

/* r's stdout (a file) is exactly want[0..n). */
static bool out_is(const struct run *r, const uint8_t *want, size_t n)
{
    size_t len = 0;
    char *got = slurp(r->out, &len);
    bool ok = len == n && memcmp(got, want, n) == 0;
    if (!ok)
        fprintf(stderr, "stdout: %zu bytes, wanted %zu\n", len, n);
    free(got);
    return ok;
}

static void complete_fd_everywhere(void)
{
    start_or_exit(&bp, NULL);
    coord_t *own = lib_as("owner"), *fol = lib_as("follower"), *w = lib_as("watcher");
    REQUIRE(coord_subscribe(w, "-flights", 8) == 0);
    CHECK(coord_max_ref_bytes(own) == 1ull << 30);
    /* a `coordctl once` result (format 1: 1, exit status, stdout) larger
     * than a frame */
    size_t n = 2 * 1024 * 1024 + 3;
    uint8_t *data = malloc(n);
    REQUIRE(data);
    data[0] = 1;
    data[1] = 0;
    for (size_t i = 2; i < n; i++)
        data[i] = (uint8_t)('a' + i % 26);
    coord_flight f;
    REQUIRE(coord_flight_join(own, S("big"), NULL, &f) == 0);
    REQUIRE(f.role == COORD_FLIGHT_OWNER);
    struct got g = { 0 };
    REQUIRE(coord_flight_join_async(fol, S("big"), NULL, on_join, &g, NULL) == 0);
    REQUIRE(await_what(w, "joined"));
    struct run r;
    ctl_spawn(&r, bp.sock, bp.dir, &(struct ctl_opts){ .pipes = false },
              ARGS("once", "big", "--", "false"));
    REQUIRE(await_what(w, "joined"));

    int fd = coord_memfd_sealed(data, n);
    REQUIRE(fd >= 0);
    CHECK((fcntl(fd, F_GET_SEALS) & (F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW)) ==
          (F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW));
    uint64_t delivered = 0;
    CHECK(coord_flight_complete_fd(own, f.flight, f.fence, fd, 60000, &delivered) == 0);
    CHECK_EQ_U(delivered, 2);
    close(fd);
    coord_flight_clear(&f);

    /* the libcoord follower: its own descriptor */
    while (!g.called)
        REQUIRE(coord_wait(fol, T) >= 0);
    CHECK(g.status == 0 && g.f.role == COORD_FLIGHT_RESULT);
    CHECK(g.f.by_ref && g.f.result == NULL);
    CHECK_EQ_U(g.f.result_len, n);
    CHECK(g.f.result_fd >= 0 && fd_reads_as(g.f.result_fd, data, n));
    coord_flight_clear(&g.f);

    /* coordctl once: CMD's output of the owner, exit status 0 */
    REQUIRE(run_finish(&r, T) == 0);
    CHECK(out_is(&r, data + 2, n - 2));
    run_free(&r);

    /* the record, by reference */
    coord_record rec;
    REQUIRE(coord_record_get(fol, S("big"), &rec) == 0);
    CHECK(rec.by_ref && !rec.failed && rec.result_len == n);
    CHECK(coord_record_result_load(&rec) == 0);
    CHECK(!rec.by_ref && rec.result && memcmp(rec.result, data, n) == 0);
    coord_record_clear(&rec);

    ctl_spawn(&r, bp.sock, bp.dir, &(struct ctl_opts){ .pipes = false }, ARGS("record", "get", "big"));
    REQUIRE(run_finish(&r, T) == 0);
    CHECK(out_is(&r, data, n));                 /* the record as it is */
    run_free(&r);
    /* a later once --keep is served from it, CMD not run */
    ctl_spawn(&r, bp.sock, bp.dir, &(struct ctl_opts){ .pipes = false },
              ARGS("once", "--keep", "60", "big", "--", "false"));
    REQUIRE(run_finish(&r, T) == 0);
    CHECK(out_is(&r, data + 2, n - 2));
    run_free(&r);

    free(data);
    coord_close(own);
    coord_close(fol);
    coord_close(w);
    stop_and_clean(&bp);
}

/* `coordctl once` whose CMD writes more than a frame holds: the result goes
 * by reference; a libcoord follower gets it as a descriptor, and it is kept
 * (--keep) as a record by reference. */
static void once_output_larger_than_a_frame(void)
{
    start_or_exit(&bp, NULL);
    coord_t *fol = lib_as("follower"), *w = lib_as("watcher");
    REQUIRE(coord_subscribe(w, "-flights", 8) == 0);
    int gate[2];
    REQUIRE(pipe2(gate, O_CLOEXEC) == 0);
    struct pass_fd pass[] = { { gate[0], 3 }, { -1, -1 } };
    struct run r;
    /* CMD waits for the gate (the follower is in), then writes 3,000,000 x */
    ctl_spawn(&r, bp.sock, bp.dir, &(struct ctl_opts){ .pipes = false, .pass = pass },
              ARGS("once", "--keep", "60", "huge", "--", "sh", "-c",
                   "cat <&3 >/dev/null; head -c 3000000 /dev/zero | tr '\\0' x"));
    close(gate[0]);
    REQUIRE(await_what(w, "started"));
    struct got g = { 0 };
    REQUIRE(coord_flight_join_async(fol, S("huge"), NULL, on_join, &g, NULL) == 0);
    REQUIRE(await_what(w, "joined"));
    close(gate[1]);
    REQUIRE(run_finish(&r, T) == 0);
    size_t n = 3000000;
    uint8_t *want = malloc(n + 2);
    REQUIRE(want);
    want[0] = 1;
    want[1] = 0;
    memset(want + 2, 'x', n);
    CHECK(out_is(&r, want + 2, n));
    run_free(&r);
    while (!g.called)
        REQUIRE(coord_wait(fol, T) >= 0);
    CHECK(g.status == 0 && g.f.by_ref && g.f.result_len == n + 2);
    CHECK(coord_flight_result_load(&g.f) == 0);
    CHECK(!g.f.by_ref && g.f.result && memcmp(g.f.result, want, n + 2) == 0);
    coord_flight_clear(&g.f);
    coord_record rec;
    REQUIRE(coord_record_get(fol, S("huge"), &rec) == 0);
    CHECK(rec.by_ref && rec.result_len == n + 2);
    coord_record_clear(&rec);
    free(want);
    coord_close(fol);
    coord_close(w);
    stop_and_clean(&bp);
}

int main(int argc, char **argv)
{
    static const struct test_case tests[] = {
        { "complete_fd_everywhere", complete_fd_everywhere },
        { "once_output_larger_than_a_frame", once_output_larger_than_a_frame },
        { NULL, NULL },
    };
    return run_tests(argc, argv, tests);
}
