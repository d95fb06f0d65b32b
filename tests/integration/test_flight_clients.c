/* test_flight_clients.c - libcoord and `coordctl once` on the flight
 * options of note 002 §10, §15, §21 against a real broker: a join that
 * supersedes a running owner (its late result FENCED, reason superseded;
 * coordctl's owner stops its command), versions (a flight of our own
 * beside another version's), the owner and version of a record, a
 * follower's timeout falling back by policy (coord_once RUN and RETRY,
 * coordctl --fallback run), and the new counters in `coordctl stats
 * --openmetrics`.
 *
 * $COORD_BROKER is coordd and $COORDCTL is coordctl (set by meson). */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "coord.h"
#include "harness.h"
#include "leader-util.h"
#include "proc.h"

#define T 10000   /* ms to wait for something that must happen */

static struct broker_proc bp;

static void start(void) { start_or_exit(&bp, NULL); }
static void stop(void) { stop_and_clean(&bp); }

static coord_t *lib_as(const char *client)
{
    return lib_connect(&bp, NULL, client);
}

/* A connection subscribed to -flights. */
static coord_t *watcher(void)
{
    coord_t *w = lib_as("watcher");
    if (coord_subscribe(w, "-flights", 8) < 0)
        exit(2);
    return w;
}

/* Waits for the -flights event `what` of key (earlier ones skipped). */
static bool await_what(coord_t *w, const char *what, const char *key)
{
    for (;;) {
        coord_reply_t *ev = NULL;
        if (coord_next_event(w, T, &ev) < 0)
            return false;
        coord_lifecycle lc;
        const char *k = NULL;
        size_t kn = 0;
        bool hit = coord_event_lifecycle(ev, &lc) && lc.what_len == strlen(what) &&
                   memcmp(lc.what, what, lc.what_len) == 0 &&
                   coord_map_str(coord_reply_map(ev), "key", &k, &kn) &&
                   kn == strlen(key) && memcmp(k, key, kn) == 0;
        coord_reply_free(ev);
        if (hit)
            return true;
    }
}

static void test_lib_supersede_and_versions(void)
{
    start();
    coord_t *a = lib_as("tab-a"), *b = lib_as("tab-b"), *c = lib_as("tab-c");
    coord_flight fa, fb, fc;
    coord_flight_opts va = { .version = "v1" };
    REQUIRE(coord_flight_join(a, "k", 1, &va, &fa) == 0 && fa.role == COORD_FLIGHT_OWNER);
    coord_flight_opts sup = { .supersede = true, .version = "v1" };
    REQUIRE(coord_flight_join(b, "k", 1, &sup, &fb) == 0 && fb.role == COORD_FLIGHT_OWNER);
    CHECK_EQ_U(fb.flight, fa.flight);
    CHECK_EQ_U(fb.superseded, fa.fence);
    CHECK(fb.version && strcmp(fb.version, "v1") == 0);
    CHECK(fb.fence > fa.fence);
    coord_reply_t *ev = NULL;
    coord_flight_abort ab;
    REQUIRE(coord_next_event(a, T, &ev) == 0 && coord_event_flight_abort(ev, &ab));
    CHECK(ab.reason_len == 10 && memcmp(ab.reason, "superseded", 10) == 0);
    coord_reply_free(ev);
    CHECK_EQ(coord_flight_complete(a, fa.flight, fa.fence, "old", 3, 0, NULL), COORD_EFENCED);
    CHECK(coord_error_reason(a) && strcmp(coord_error_reason(a), "superseded") == 0);
    /* another version, wanting its own: a flight beside b's */
    coord_flight_opts v2 = { .version = "v2", .own_version = true };
    REQUIRE(coord_flight_join(c, "k", 1, &v2, &fc) == 0 && fc.role == COORD_FLIGHT_OWNER);
    CHECK(fc.flight != fb.flight);
    CHECK_EQ(coord_flight_complete(c, fc.flight, fc.fence, "new", 3, 600000, NULL), 0);
    coord_record r;
    REQUIRE(coord_record_get(a, "k", 1, &r) == 0);
    CHECK_STR(r.client, "tab-c");
    CHECK_STR(r.version, "v2");
    CHECK_EQ_U(r.pid, (uint64_t)getpid());
    CHECK(r.instance && r.instance[0]);
    coord_record_clear(&r);
    /* a v1 wanting its own is not served v2's record */
    coord_flight_opts v1own = { .version = "v1", .own_version = true, .max_age_ms = 600000 };
    coord_flight fd;
    CHECK_EQ_U(coord_flight_complete(b, fb.flight, fb.fence, "fresh", 5, 0, NULL), 0);
    REQUIRE(coord_flight_join(a, "k", 1, &v1own, &fd) == 0);
    CHECK(fd.role == COORD_FLIGHT_OWNER);
    coord_flight_clear(&fd);
    coord_flight_clear(&fa);
    coord_flight_clear(&fb);
    coord_flight_clear(&fc);
    coord_close(a);
    coord_close(b);
    coord_close(c);
    stop();
}

static atomic_int runs;

static int answer(void *ud, void **result, size_t *len, char **code, char **msg)
{
    (void)ud;
    (void)code;
    (void)msg;
    atomic_fetch_add(&runs, 1);
    *result = strdup("local");
    *len = 5;
    return COORD_WORK_OK;
}

struct completer {
    coord_t *owner, *w;
    coord_flight f;
};

/* Completes the owner's flight once the retrying follower joined again:
 * a follower_timeout, then a join. */
static void *complete_after_rejoin(void *p)
{
    struct completer *k = p;
    if (await_what(k->w, "follower_timeout", "slow") && await_what(k->w, "joined", "slow"))
        coord_flight_complete(k->owner, k->f.flight, k->f.fence, "shared", 6, 0, NULL);
    return NULL;
}

/* Note 002 §10: a follower whose wait passes falls back by policy. */
static void test_lib_timeout_fallback(void)
{
    start();
    coord_t *own = lib_as("owner"), *f = lib_as("follower");
    coord_flight of;
    REQUIRE(coord_flight_join(own, "slow", 4, NULL, &of) == 0);
    coord_flight out;
    /* fail: the timeout, as before */
    coord_flight_opts o = { .wait_ms = 50 };
    CHECK_EQ(coord_once(f, "slow", 4, &o, 0, answer, NULL, &out), COORD_ETIMEOUT);
    CHECK_EQ(atomic_load(&runs), 0);
    /* run: here, uncoordinated, saying why */
    o.fallback = COORD_FALLBACK_RUN;
    REQUIRE(coord_once(f, "slow", 4, &o, 0, answer, NULL, &out) == 0);
    CHECK(out.fallback && out.ran && out.role == COORD_FLIGHT_RESULT);
    CHECK_EQ(out.fallback_cause, COORD_FALLBACK_CAUSE_TIMEOUT);
    CHECK(!out.retried && out.flight == 0);
    CHECK_STR((char *)out.result, "local");
    coord_flight_clear(&out);
    CHECK_EQ(atomic_load(&runs), 1);
    /* retry: a second wait, then here */
    o.fallback = COORD_FALLBACK_RETRY;
    REQUIRE(coord_once(f, "slow", 4, &o, 0, answer, NULL, &out) == 0);
    CHECK(out.fallback && out.retried && out.fallback_cause == COORD_FALLBACK_CAUSE_TIMEOUT);
    coord_flight_clear(&out);
    CHECK_EQ(atomic_load(&runs), 2);
    /* retry: the owner finishes during the second wait: its result */
    struct completer k = { .owner = own, .w = watcher(), .f = of };
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, complete_after_rejoin, &k) == 0);
    o.wait_ms = 300;
    int rc = coord_once(f, "slow", 4, &o, 0, answer, NULL, &out);
    pthread_join(th, NULL);
    REQUIRE(rc == 0);
    CHECK(out.retried && !out.fallback && !out.ran);
    CHECK_STR((char *)out.result, "shared");
    coord_flight_clear(&out);
    CHECK_EQ(atomic_load(&runs), 2);
    /* unreachable: the cause says so */
    o.fallback = COORD_FALLBACK_RUN;
    REQUIRE(coord_once(NULL, "slow", 4, &o, 0, answer, NULL, &out) == 0);
    CHECK_EQ(out.fallback_cause, COORD_FALLBACK_CAUSE_UNREACHABLE);
    coord_flight_clear(&out);
    coord_flight_clear(&of);
    coord_close(k.w);
    coord_close(own);
    coord_close(f);
    stop();
}

static void ctl_start(struct run *r, const char *const *args)
{
    ctl_spawn(r, bp.sock, bp.dir, &(struct ctl_opts){ .pipes = true }, args);
}

/* `coordctl once --supersede`: the stale owner's command is stopped, the
 * waiting caller gets the fresh output. */
static void test_ctl_supersede_and_fallback(void)
{
    start();
    coord_t *w = watcher();
    struct run owner, follower, fresh, late;
    ctl_start(&owner, ARGS("once", "feed", "--", "sh", "-c", "exec sleep 60"));
    REQUIRE(await_what(w, "started", "feed"));
    ctl_start(&follower, ARGS("once", "feed", "--", "echo", "never"));
    REQUIRE(await_what(w, "joined", "feed"));
    ctl_start(&fresh, ARGS("once", "--supersede", "--version", "2", "feed", "--", "echo",
                           "fresh"));
    CHECK_EQ(run_finish(&fresh, T), 0);
    CHECK_STR(run_text(&fresh, OUT), "fresh\n");
    CHECK_EQ(run_finish(&follower, T), 0);
    CHECK_STR(run_text(&follower, OUT), "fresh\n");
    int st = run_finish(&owner, T);
    CHECK(st != 0 && st != -1);
    CHECK_MSG(strstr(run_text(&owner, ERR), "superseded by a fresh request") != NULL,
              "owner said: %s", run_text(&owner, ERR));
    run_free(&owner);
    run_free(&follower);
    run_free(&fresh);

    /* --priority: a higher one takes the flight over, a lower one follows */
    ctl_start(&owner, ARGS("once", "--priority", "2", "prio", "--", "sh", "-c",
                           "exec sleep 60"));
    REQUIRE(await_what(w, "started", "prio"));
    ctl_start(&follower, ARGS("once", "--priority", "1", "prio", "--", "echo", "never"));
    REQUIRE(await_what(w, "joined", "prio"));
    ctl_start(&fresh, ARGS("once", "--priority", "3", "prio", "--", "echo", "urgent"));
    CHECK_EQ(run_finish(&fresh, T), 0);
    CHECK_STR(run_text(&fresh, OUT), "urgent\n");
    CHECK_EQ(run_finish(&follower, T), 0);
    CHECK_STR(run_text(&follower, OUT), "urgent\n");
    st = run_finish(&owner, T);
    CHECK(st != 0 && st != -1);
    CHECK(strstr(run_text(&owner, ERR), "superseded by a fresh request") != NULL);
    run_free(&owner);
    run_free(&follower);
    run_free(&fresh);
    struct run bad;
    ctl_start(&bad, ARGS("once", "--priority", "x", "prio", "--", "true"));
    CHECK_EQ(run_finish(&bad, T), 2);
    CHECK(strstr(run_text(&bad, ERR), "--priority needs a positive number") != NULL);
    run_free(&bad);

    /* --fallback run after --wait */
    ctl_start(&owner, ARGS("once", "hang", "--", "sh", "-c", "exec sleep 60"));
    REQUIRE(await_what(w, "started", "hang"));
    ctl_start(&late, ARGS("once", "--wait", "0.1", "--fallback", "run", "hang", "--", "sh",
                          "-c", "echo here:$COORD_FLIGHT_FALLBACK"));
    CHECK_EQ(run_finish(&late, T), 0);
    CHECK_STR(run_text(&late, OUT), "here:timeout\n");
    CHECK(strstr(run_text(&late, ERR), "timed out after 0.1 s waiting for a result: "
                                       "running the command without coordination") != NULL);
    run_free(&late);
    kill(owner.pid, SIGTERM);
    run_finish(&owner, T);
    run_free(&owner);

    /* the counters, typed, in the OpenMetrics export */
    struct run st_run;
    ctl_start(&st_run, ARGS("stats", "--openmetrics"));
    CHECK_EQ(run_finish(&st_run, T), 0);
    const char *om = run_text(&st_run, OUT);
    CHECK(strstr(om, "# TYPE coord_flights_superseded counter\n") != NULL);
    CHECK(strstr(om, "coord_flights_superseded_total 2\n") != NULL);
    CHECK(strstr(om, "# TYPE coord_follower_timeouts counter\n") != NULL);
    CHECK(strstr(om, "coord_follower_timeouts_total 1\n") != NULL);
    CHECK(strstr(om, "# TYPE coord_record_read_failures counter\n") != NULL);
    CHECK(strstr(om, "# TYPE coord_followers_per_100_owners gauge\n") != NULL);
    run_free(&st_run);
    coord_close(w);
    stop();
}

int main(int argc, char **argv)
{
    static const struct test_case tests[] = {
        { "lib_supersede_and_versions", test_lib_supersede_and_versions },
        { "lib_timeout_fallback", test_lib_timeout_fallback },
        { "ctl_supersede_and_fallback", test_ctl_supersede_and_fallback },
        { NULL, NULL },
    };
    return run_tests(argc, argv, tests);
}
