/* test_flight_policies_client.c - single-flight policies through libcoord
 * and coordctl against a real broker: stale-while-revalidate with 20 processes (one
 * revalidation owner, 19 answered at once with the stale value and told
 * by flight.updated when it ends; a failed revalidation leaves the
 * record), backoff after a failure with retry_after_ms, the kill switch
 * across a broker restart, coord_once's fallback policy without a broker
 * (and when it goes away while we wait), the latency histograms of stats,
 * and the coordctl forms (once --stale, the exit-75 backoff convention,
 * --fallback, flights disable/enable, the stats table).
 *
 * $COORD_BROKER is coordd and $COORDCTL is coordctl (set by meson). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "coord.h"
#include "harness.h"

#define T 30000   /* ms to wait for something that must happen */

static struct broker_proc bp;

static void start(void) { start_or_exit(&bp, NULL); }
static void stop(void) { stop_and_clean(&bp); }

static void nap_ms(long ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

static uint64_t mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static uint64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* A libcoord connection to bp (NULL when it cannot connect); never
 * autostarts. */
static coord_t *try_lib(void)
{
    coord_options o;
    coord_options_init(&o);
    o.socket_path = bp.sock;
    o.no_autostart = true;
    o.client_name = "test_flight_policies";
    coord_t *c = NULL;
    if (coord_connect(&c, &o) < 0) {
        fprintf(stderr, "coord_connect: %s\n", coord_error_message(NULL));
        return NULL;
    }
    return c;
}

static coord_t *lib(void)
{
    coord_t *c = try_lib();
    if (!c)
        exit(2);
    return c;
}

/* Completes a fresh flight of key with value, kept keep_ms; the fence. */
static uint64_t put_record(coord_t *c, const char *key, const char *value, uint64_t keep_ms)
{
    coord_flight f;
    if (coord_flight_join(c, key, strlen(key), NULL, &f) < 0 ||
        f.role != COORD_FLIGHT_OWNER) {
        CHECK_MSG(false, "put_record %s: not the owner", key);
        coord_flight_clear(&f);
        return 0;
    }
    uint64_t fence = f.fence;
    CHECK_EQ(coord_flight_complete(c, f.flight, f.fence, value, strlen(value), keep_ms,
                                   NULL), 0);
    coord_flight_clear(&f);
    return fence;
}

/* Waits (a clock, not an event) until key's record is older than age_ms. */
static void await_record_age(coord_t *c, const char *key, uint64_t age_ms)
{
    coord_record r;
    REQUIRE(coord_record_get(c, key, strlen(key), &r) == 0);
    while (wall_ms() <= r.created_ms + age_ms)
        nap_ms(1);
    coord_record_clear(&r);
}

/* Waits until a flight of key runs (flight.list), within T. */
static bool await_flight(coord_t *c, const char *key)
{
    uint64_t end = now_ms() + T;
    while (now_ms() < end) {
        coord_reply_t *r = NULL;
        if (coord_flight_list(c, &r) < 0)
            return false;
        coord_map m = coord_reply_map(r);
        bool found = false;
        for (size_t i = 0; i < coord_map_array_len(m, "flights"); i++) {
            coord_map e;
            const char *k;
            size_t kn;
            if (coord_map_array_at(m, "flights", i, &e) &&
                coord_map_str(e, "key", &k, &kn) && kn == strlen(key) &&
                memcmp(k, key, kn) == 0)
                found = true;
        }
        coord_reply_free(r);
        if (found)
            return true;
        nap_ms(5);
    }
    return false;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* ---- stale-while-revalidate, 20 processes ---- */

enum { SWR_N = 20 };

/* One process: joins key stale and reports on rep, a line each (atomic:
 * shorter than PIPE_BUF):
 *   "J <role> <stale> <revalidating> <latency_us> <fence> <value>"
 * then the owner waits for one byte on go ('c' complete, 'f' fail) and
 * ends its flight; the others wait for flight.updated and report
 *   "U <status> <fence>". */
static void swr_child(const char *key, int gate, int rep, int go)
{
    char b;
    while (read(gate, &b, 1) > 0)
        ;
    coord_t *c = try_lib();
    if (!c)
        _exit(2);
    coord_flight_opts o = { .max_age_ms = 1, .stale_ms = 600000, .notify = true };
    coord_flight f;
    uint64_t t0 = mono_us();
    int rc = coord_flight_join(c, key, strlen(key), &o, &f);
    uint64_t lat = mono_us() - t0;
    char line[512];
    if (rc < 0) {
        snprintf(line, sizeof line, "E %d\n", rc);
        (void)!write(rep, line, strlen(line));
        _exit(1);
    }
    const char *role = f.role == COORD_FLIGHT_OWNER ? "owner"
                     : f.role == COORD_FLIGHT_RESULT ? "result" : "other";
    const char *value = f.role == COORD_FLIGHT_OWNER && f.revalidation
                      ? (const char *)f.stale_result
                      : f.role == COORD_FLIGHT_RESULT ? (const char *)f.result : "-";
    snprintf(line, sizeof line, "J %s %d %d %llu %llu %s\n", role,
             f.role == COORD_FLIGHT_OWNER ? (int)f.revalidation : (int)f.stale,
             (int)f.revalidating, (unsigned long long)lat,
             (unsigned long long)(f.role == COORD_FLIGHT_OWNER ? f.stale_fence : f.fence),
             value);
    (void)!write(rep, line, strlen(line));
    if (f.role == COORD_FLIGHT_OWNER) {
        char what = 0;
        if (read(go, &what, 1) != 1)
            _exit(1);
        if (what == 'c')
            rc = coord_flight_complete(c, f.flight, f.fence, "fresh", 5, 600000, NULL);
        else
            rc = coord_flight_fail(c, f.flight, f.fence, "UPSTREAM", "down", false,
                                   600000);
        snprintf(line, sizeof line, "O %d %llu\n", rc, (unsigned long long)f.fence);
        (void)!write(rep, line, strlen(line));
    } else {
        coord_reply_t *ev = NULL;
        coord_flight_updated u;
        rc = coord_next_event(c, T, &ev);
        if (rc == 0 && coord_event_flight_updated(ev, &u))
            snprintf(line, sizeof line, "U %s %llu %.*s\n", u.failed ? "failed" : "completed",
                     (unsigned long long)u.fence, (int)u.key_len, u.key);
        else
            snprintf(line, sizeof line, "U none %d 0 -\n", rc);
        coord_reply_free(ev);
        (void)!write(rep, line, strlen(line));
    }
    coord_flight_clear(&f);
    coord_close(c);
    _exit(0);
}

static void swr(const char *key, bool fail)
{
    start();
    coord_t *c = lib();
    uint64_t old_fence = put_record(c, key, "old", 600000);
    await_record_age(c, key, 1);          /* now stale for max_age_ms 1 */

    int gate[2], rep[2], go[2];
    REQUIRE(pipe(gate) == 0 && pipe(rep) == 0 && pipe(go) == 0);
    pid_t pids[SWR_N];
    for (int i = 0; i < SWR_N; i++) {
        pids[i] = fork();
        REQUIRE(pids[i] >= 0);
        if (pids[i] == 0) {
            close(gate[1]);
            close(rep[0]);
            close(go[1]);
            swr_child(key, gate[0], rep[1], go[0]);
        }
    }
    close(gate[0]);
    close(rep[1]);
    close(go[0]);
    close(gate[1]);                       /* all 20 join now */

    int owners = 0, stale = 0;
    uint64_t lat[SWR_N];
    char line[512];
    for (int i = 0; i < SWR_N; i++) {
        REQUIRE(fd_read_line(rep[0], line, sizeof line, T));
        char role[16], value[64];
        int st, rv;
        unsigned long long us, fence;
        REQUIRE(sscanf(line, "J %15s %d %d %llu %llu %63s", role, &st, &rv, &us, &fence,
                       value) == 6);
        if (!strcmp(role, "owner")) {
            owners++;
            CHECK_MSG(st == 1, "the owner is a revalidation: %s", line);
            CHECK_STR(value, "old");
            CHECK_EQ_U(fence, old_fence);
        } else {
            CHECK_STR(role, "result");
            CHECK_MSG(st == 1 && rv == 1, "stale and revalidating: %s", line);
            CHECK_STR(value, "old");
            CHECK_EQ_U(fence, old_fence);
            lat[stale++] = us;
        }
    }
    CHECK_EQ(owners, 1);
    CHECK_EQ(stale, SWR_N - 1);
    if (stale > 0) {
        qsort(lat, (size_t)stale, sizeof lat[0], cmp_u64);
        size_t p99 = ((size_t)stale * 99 + 99) / 100 - 1;
        fprintf(stderr, "FIGURE swr%s: %d callers served stale at once: join p50 %.3f ms, "
                        "p99 %.3f ms, max %.3f ms\n", fail ? "-fail" : "", stale,
                (double)lat[stale / 2] / 1000.0, (double)lat[p99] / 1000.0,
                (double)lat[stale - 1] / 1000.0);
    }
    /* the stale callers answered before the revalidation ends */
    REQUIRE(write(go[1], fail ? "f" : "c", 1) == 1);
    uint64_t new_fence = 0, ufence[SWR_N];
    int updated = 0;
    for (int i = 0; i < SWR_N; i++) {
        REQUIRE(fd_read_line(rep[0], line, sizeof line, T));
        unsigned long long fence;
        int rc;
        char status[16], k[128];
        if (line[0] == 'O') {
            REQUIRE(sscanf(line, "O %d %llu", &rc, &fence) == 2);
            CHECK_EQ(rc, 0);
            new_fence = fence;
            continue;
        }
        REQUIRE(sscanf(line, "U %15s %llu %127s", status, &fence, k) == 3);
        CHECK_STR(status, fail ? "failed" : "completed");
        CHECK_STR(k, key);
        if (!strcmp(status, fail ? "failed" : "completed"))
            ufence[updated++] = fence;
    }
    CHECK_EQ(updated, SWR_N - 1);
    CHECK(new_fence > old_fence);
    /* flight.updated carries the fence of the revalidation that ended */
    for (int i = 0; i < updated; i++)
        CHECK_EQ_U(ufence[i], new_fence);
    for (int i = 0; i < SWR_N; i++)
        CHECK_EQ(child_status(pids[i], T), 0);
    close(rep[0]);
    close(go[1]);

    coord_record r;
    REQUIRE(coord_record_get(c, key, strlen(key), &r) == 0);
    if (fail) {
        /* a failed revalidation leaves the stale record in place */
        CHECK(!r.failed);
        CHECK_EQ_U(r.fence, old_fence);
        CHECK(r.result && !strcmp(r.result, "old"));
    } else {
        CHECK(!r.failed);
        CHECK_EQ_U(r.fence, new_fence);
        CHECK(r.result && !strcmp(r.result, "fresh"));
    }
    coord_record_clear(&r);
    coord_close(c);
    stop();
}

static void test_swr_20(void) { swr("swr", false); }
static void test_swr_20_failed(void) { swr("swr-fail", true); }

/* ---- coord_once with stale options ---- */

struct work_count {
    atomic_int runs;
    const char *value;
    uint64_t retry_after_ms;   /* >0: fail retryable asking for it */
};

static int count_work(void *ud, void **result, size_t *len, char **code, char **msg)
{
    struct work_count *w = ud;
    (void)code;
    (void)msg;
    atomic_fetch_add(&w->runs, 1);
    if (w->retry_after_ms) {
        coord_work_retry_after(w->retry_after_ms);
        return COORD_WORK_RETRYABLE;
    }
    *len = strlen(w->value);
    *result = strdup(w->value);
    return COORD_WORK_OK;
}

static void test_once_stale(void)
{
    start();
    coord_t *c = lib();
    put_record(c, "os", "old", 600000);
    await_record_age(c, "os", 1);
    coord_flight_opts o = { .max_age_ms = 1, .stale_ms = 600000 };
    /* another connection owns the revalidation: coord_once answers stale */
    coord_t *own = lib();
    coord_flight of;
    REQUIRE(coord_flight_join(own, S("os"), &o, &of) == 0);
    CHECK(of.role == COORD_FLIGHT_OWNER && of.revalidation);
    struct work_count w = { .value = "new" };
    coord_flight out;
    CHECK_EQ(coord_once(c, S("os"), &o, 600000, count_work, &w, &out), 0);
    CHECK(out.role == COORD_FLIGHT_RESULT && out.stale && out.revalidating && !out.ran);
    CHECK(out.result && !strcmp(out.result, "old"));
    CHECK_EQ(atomic_load(&w.runs), 0);
    coord_flight_clear(&out);
    /* its failure leaves the record; the next coord_once revalidates */
    CHECK_EQ(coord_flight_fail(own, of.flight, of.fence, "X", "", false, 0), 0);
    coord_flight_clear(&of);
    CHECK_EQ(coord_once(c, S("os"), &o, 600000, count_work, &w, &out), 0);
    CHECK(out.role == COORD_FLIGHT_RESULT && out.ran && out.revalidation && !out.stale);
    CHECK(out.result && !strcmp(out.result, "new"));
    CHECK(out.stale_result && !strcmp(out.stale_result, "old"));
    CHECK_EQ(atomic_load(&w.runs), 1);
    coord_flight_clear(&out);
    coord_record r;
    REQUIRE(coord_record_get(c, S("os"), &r) == 0);
    CHECK(r.result && !strcmp(r.result, "new"));
    coord_record_clear(&r);
    coord_close(own);
    coord_close(c);
    stop();
}

/* ---- backoff ---- */

struct async_join {
    bool done;
    int status;
    coord_flight f;
};

static void on_join(coord_t *c, int status, coord_flight *f, void *ud)
{
    struct async_join *j = ud;
    (void)c;
    j->done = true;
    j->status = status;
    j->f = *f;
    memset(f, 0, sizeof *f);      /* keep the outcome */
}

/* Runs c's callbacks until j is answered (within T). */
static bool await_join(coord_t *c, struct async_join *j)
{
    uint64_t end = now_ms() + T;
    while (!j->done && now_ms() < end)
        if (coord_wait(c, 1000) < 0)
            return false;
    return j->done;
}

static void test_backoff_window(void)
{
    enum { N = 50, AFTER = 500 };
    start();
    coord_t *c = lib(), *fc = lib();
    coord_flight f;
    REQUIRE(coord_flight_join(c, S("bo"), NULL, &f) == 0 && f.role == COORD_FLIGHT_OWNER);
    /* a follower waiting when it fails gets retry_after_ms */
    struct async_join fol = { 0 };
    coord_flight_opts fo = { .wait_ms = T };
    REQUIRE(coord_flight_join_async(fc, S("bo"), &fo, on_join, &fol, NULL) == 0);
    coord_t *mon = lib();
    uint64_t end = now_ms() + T;
    for (;;) {                      /* until the broker holds the follower */
        coord_reply_t *r = NULL;
        REQUIRE(coord_flight_list(mon, &r) == 0);
        coord_map e;
        uint64_t n = 0;
        if (coord_map_array_at(coord_reply_map(r), "flights", 0, &e))
            coord_map_uint(e, "followers", &n);
        coord_reply_free(r);
        if (n == 1 || now_ms() > end)
            break;
        nap_ms(5);
    }
    coord_close(mon);
    coord_failure fl = { .code = "RATE_LIMITED", .message = "429", .retryable = true,
                         .retry_after_ms = AFTER };
    uint64_t sent = now_ms();
    CHECK_EQ(coord_flight_fail_with(c, f.flight, f.fence, &fl), 0);
    coord_flight_clear(&f);
    REQUIRE(await_join(fc, &fol));
    CHECK_EQ(fol.status, 0);
    CHECK(fol.f.role == COORD_FLIGHT_FAILED && fol.f.retryable && !fol.f.from_backoff);
    CHECK_EQ_U(fol.f.retry_after_ms, AFTER);
    CHECK_STR(fol.f.error_code ? fol.f.error_code : "", "RATE_LIMITED");
    coord_flight_clear(&fol.f);

    coord_t *cs[N];
    int backoff = 0, owner_early = 0;
    uint64_t left_max = 0;
    for (int i = 0; i < N; i++) {
        cs[i] = lib();
        coord_flight b;
        REQUIRE(coord_flight_join(cs[i], S("bo"), NULL, &b) == 0);
        uint64_t at = now_ms();
        if (b.role == COORD_FLIGHT_FAILED && b.from_backoff && b.retryable) {
            backoff++;
            CHECK(b.retry_after_ms > 0 && b.retry_after_ms <= AFTER);
            if (b.retry_after_ms > left_max)
                left_max = b.retry_after_ms;
        } else if (b.role == COORD_FLIGHT_OWNER && at - sent < AFTER) {
            owner_early++;
        }
        coord_flight_clear(&b);
    }
    uint64_t spent = now_ms() - sent;
    CHECK_EQ(owner_early, 0);
    if (spent < AFTER)
        CHECK_EQ(backoff, N);
    fprintf(stderr, "FIGURE backoff: %d of %d joins answered from the backoff in %llu ms\n",
            backoff, N, (unsigned long long)spent);
    for (int i = 0; i < N; i++)
        coord_close(cs[i]);
    /* the first join after the window owns a flight */
    coord_flight b;
    memset(&b, 0, sizeof b);
    for (int tries = 0; tries < 100; tries++) {
        REQUIRE(coord_flight_join(c, S("bo"), NULL, &b) == 0);
        if (b.role != COORD_FLIGHT_FAILED || !b.from_backoff)
            break;
        nap_ms((long)b.retry_after_ms + 1);     /* what is left of the window */
        coord_flight_clear(&b);
    }
    CHECK(b.role == COORD_FLIGHT_OWNER);
    CHECK(now_ms() - sent >= AFTER);
    coord_flight_clear(&b);
    coord_close(fc);
    coord_close(c);
    stop();
}

/* ---- the kill switch ---- */

/* The disabled prefixes of c's scope, joined by '|' into buf. */
static const char *disabled_list(coord_t *c, char *buf, size_t size)
{
    coord_prefix *p = NULL;
    size_t n = 0;
    buf[0] = '\0';
    if (coord_flight_disabled(c, &p, &n) < 0)
        return "(error)";
    size_t at = 0;
    for (size_t i = 0; i < n; i++)
        at += (size_t)snprintf(buf + at, size - at, "%s%.*s", i ? "|" : "",
                               (int)p[i].len, p[i].p);
    free(p);
    return buf;
}

static void test_kill_switch_restart(void)
{
    start();
    coord_t *c = lib(), *c2 = lib(), *sub = lib();
    char buf[256];
    REQUIRE(coord_subscribe(sub, S("-flights")) == 0);
    CHECK_STR(disabled_list(c, buf, sizeof buf), "");
    REQUIRE(coord_flight_disable(c, S("ks/")) == 0);
    CHECK_STR(disabled_list(c, buf, sizeof buf), "ks/");
    /* announced on -flights */
    coord_reply_t *ev = NULL;
    coord_lifecycle lc;
    REQUIRE(coord_next_event(sub, T, &ev) == 0);
    CHECK(coord_event_lifecycle(ev, &lc) && lc.what_len == 8 &&
          !memcmp(lc.what, "disabled", 8));
    coord_reply_free(ev);
    coord_close(sub);

    /* two owners at once, no record from a bypassed completion */
    coord_flight a, b;
    REQUIRE(coord_flight_join(c, S("ks/a"), NULL, &a) == 0);
    REQUIRE(coord_flight_join(c2, S("ks/a"), NULL, &b) == 0);
    CHECK(a.role == COORD_FLIGHT_OWNER && a.bypass);
    CHECK(b.role == COORD_FLIGHT_OWNER && b.bypass);
    CHECK_EQ(coord_flight_complete(c, a.flight, a.fence, "v", 1, 600000, NULL), 0);
    CHECK_EQ(coord_flight_complete(c2, b.flight, b.fence, "w", 1, 600000, NULL), 0);
    coord_flight_clear(&a);
    coord_flight_clear(&b);
    coord_record r;
    CHECK_EQ(coord_record_get(c, S("ks/a"), &r), COORD_ENOT_FOUND);
    /* other keys are not affected */
    REQUIRE(coord_flight_join(c, S("other"), NULL, &a) == 0);
    CHECK(a.role == COORD_FLIGHT_OWNER && !a.bypass);
    coord_flight_clear(&a);
    coord_close(c);
    coord_close(c2);

    /* it survives a restart */
    broker_kill(&bp, SIGTERM);
    REQUIRE(broker_start(&bp, NULL) == 0);
    c = lib();
    CHECK_STR(disabled_list(c, buf, sizeof buf), "ks/");
    REQUIRE(coord_flight_join(c, S("ks/b"), NULL, &a) == 0);
    CHECK(a.role == COORD_FLIGHT_OWNER && a.bypass);
    CHECK_EQ(coord_flight_complete(c, a.flight, a.fence, "v", 1, 600000, NULL), 0);
    coord_flight_clear(&a);
    CHECK_EQ(coord_record_get(c, S("ks/b"), &r), COORD_ENOT_FOUND);
    /* coord_once under the switch runs the work; nothing is kept */
    struct work_count w = { .value = "x" };
    coord_flight out;
    coord_flight_opts o = { .max_age_ms = 600000 };
    CHECK_EQ(coord_once(c, S("ks/c"), &o, 600000, count_work, &w, &out), 0);
    CHECK(out.ran && out.bypass && out.role == COORD_FLIGHT_RESULT);
    coord_flight_clear(&out);
    CHECK_EQ(coord_once(c, S("ks/c"), &o, 600000, count_work, &w, &out), 0);
    CHECK(out.ran && out.bypass);
    coord_flight_clear(&out);
    CHECK_EQ(atomic_load(&w.runs), 2);

    /* enabled again: deduplication and records are back */
    REQUIRE(coord_flight_enable(c, S("ks/")) == 0);
    CHECK_STR(disabled_list(c, buf, sizeof buf), "");
    REQUIRE(coord_flight_join(c, S("ks/b"), NULL, &a) == 0);
    CHECK(a.role == COORD_FLIGHT_OWNER && !a.bypass);
    CHECK_EQ(coord_flight_complete(c, a.flight, a.fence, "v", 1, 600000, NULL), 0);
    coord_flight_clear(&a);
    CHECK_EQ(coord_record_get(c, S("ks/b"), &r), 0);
    coord_record_clear(&r);
    coord_close(c);
    stop();
}

/* ---- coord_once's fallback ---- */

static void test_fallback_no_broker(void)
{
    broker_paths(&bp);           /* a temp dir with nothing listening */
    setenv("COORD_SOCKET", bp.sock, 1);
    coord_options co;
    coord_options_init(&co);
    co.no_autostart = true;
    coord_t *c = NULL;
    CHECK_EQ(coord_connect(&c, &co), COORD_ECONNECT);
    CHECK(c == NULL);
    unsetenv("COORD_SOCKET");

    struct work_count w = { .value = "local" };
    coord_flight out;
    coord_flight_opts o = { .fallback = COORD_FALLBACK_FAIL };
    CHECK_EQ(coord_once(c, S("fb"), &o, 0, count_work, &w, &out), COORD_ECONNECT);
    CHECK(out.role == COORD_FLIGHT_NONE);
    CHECK_EQ(coord_once(c, S("fb"), NULL, 0, count_work, &w, &out), COORD_ECONNECT);
    CHECK_EQ(atomic_load(&w.runs), 0);
    o.fallback = COORD_FALLBACK_RUN;
    CHECK_EQ(coord_once(c, S("fb"), &o, 0, count_work, &w, &out), 0);
    CHECK_EQ(atomic_load(&w.runs), 1);
    CHECK(out.role == COORD_FLIGHT_RESULT && out.ran && out.fallback);
    CHECK(out.result && !strcmp(out.result, "local"));
    CHECK_EQ_U(out.flight, 0);
    coord_flight_clear(&out);
    broker_cleanup(&bp);
}

struct once_thread {
    coord_t *c;
    struct work_count *w;
    int rc;
    coord_flight out;
};

static void *once_main(void *arg)
{
    struct once_thread *t = arg;
    coord_flight_opts o = { .fallback = COORD_FALLBACK_RUN, .wait_ms = T };
    t->rc = coord_once(t->c, S("fbd"), &o, 0, count_work, t->w, &t->out);
    return NULL;
}

static void test_fallback_dropped(void)
{
    start();
    coord_t *own = lib();
    coord_flight f;
    REQUIRE(coord_flight_join(own, S("fbd"), NULL, &f) == 0 && f.role == COORD_FLIGHT_OWNER);
    struct work_count w = { .value = "here" };
    struct once_thread t = { .c = lib(), .w = &w };
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, once_main, &t) == 0);
    uint64_t end = now_ms() + T;
    for (;;) {                   /* until the broker holds the follower */
        coord_reply_t *r = NULL;
        REQUIRE(coord_flight_list(own, &r) == 0);
        coord_map e;
        uint64_t n = 0;
        if (coord_map_array_at(coord_reply_map(r), "flights", 0, &e))
            coord_map_uint(e, "followers", &n);
        coord_reply_free(r);
        if (n == 1 || now_ms() > end)
            break;
        nap_ms(5);
    }
    broker_kill(&bp, SIGKILL);   /* the connection drops while it waits */
    pthread_join(th, NULL);
    CHECK_EQ(t.rc, 0);
    CHECK_EQ(atomic_load(&w.runs), 1);
    CHECK(t.out.role == COORD_FLIGHT_RESULT && t.out.ran && t.out.fallback);
    CHECK(t.out.result && !strcmp(t.out.result, "here"));
    coord_flight_clear(&t.out);
    coord_flight_clear(&f);
    coord_close(t.c);
    coord_close(own);
    stop();
}

/* ---- latency stats ---- */

struct lat { uint64_t count; double p50, p99, max; };

static bool get_latency(coord_t *c, const char *which, struct lat *l)
{
    coord_req_t *r = coord_req_new("stats");
    coord_reply_t *reply = NULL;
    memset(l, 0, sizeof *l);
    int rc = coord_call(c, r, &reply);
    coord_req_free(r);
    if (rc < 0)
        return false;
    coord_map m = coord_reply_map(reply), lm, e;
    bool ok = coord_map_map(m, "latency", &lm) && coord_map_map(lm, which, &e) &&
              coord_map_uint(e, "count", &l->count) &&
              coord_map_double(e, "p50_ms", &l->p50) &&
              coord_map_double(e, "p99_ms", &l->p99) &&
              coord_map_double(e, "max_ms", &l->max);
    coord_reply_free(reply);
    CHECK_MSG(ok, "stats latency.%s", which);
    return ok;
}

static void on_campaign(coord_t *c, int status, const coord_reply_t *reply, void *ud)
{
    struct { bool done; int status; } *camp = ud;
    (void)c;
    (void)reply;
    camp->done = true;
    camp->status = status;
}

/* Waits until a campaign waits behind its leader: leadership queues in the
 * lock table, so lock.query shows it as a pending entry (the case has no
 * other lock waiting). */
static bool await_campaign_waiting(coord_t *c, const char *ws)
{
    (void)ws;
    uint64_t end = now_ms() + T;
    while (now_ms() < end) {
        coord_reply_t *r = NULL;
        if (coord_lock_query(c, &r) < 0)
            return false;
        size_t n = coord_map_array_len(coord_reply_map(r), "pending");
        coord_reply_free(r);
        if (n > 0)
            return true;
        nap_ms(5);
    }
    return false;
}

static void test_latency_stats(void)
{
    static const char *const kinds[] = {
        "lock_wait", "lock_hold", "flight_run", "follower_wait", "leader_transition",
    };
    enum { K = 5 };
    start();
    coord_t *c = lib(), *c2 = lib();
    struct lat before[K], after[K];
    for (int i = 0; i < K; i++)
        get_latency(c, kinds[i], &before[i]);

    /* a lock held at least 20 ms */
    uint64_t lock;
    REQUIRE(coord_lock_acquire(c, S("l"), NULL, &lock, NULL) == 0);
    nap_ms(20);
    REQUIRE(coord_lock_release(c, lock) == 0);
    /* a flight with one follower */
    coord_flight f;
    REQUIRE(coord_flight_join(c, S("k"), NULL, &f) == 0 && f.role == COORD_FLIGHT_OWNER);
    struct async_join fol = { 0 };
    REQUIRE(coord_flight_join_async(c2, S("k"), NULL, on_join, &fol, NULL) == 0);
    uint64_t end = now_ms() + T;
    for (;;) {
        coord_reply_t *r = NULL;
        REQUIRE(coord_flight_list(c, &r) == 0);
        coord_map e;
        uint64_t n = 0;
        if (coord_map_array_at(coord_reply_map(r), "flights", 0, &e))
            coord_map_uint(e, "followers", &n);
        coord_reply_free(r);
        if (n == 1 || now_ms() > end)
            break;
        nap_ms(5);
    }
    REQUIRE(coord_flight_complete(c, f.flight, f.fence, "r", 1, 0, NULL) == 0);
    coord_flight_clear(&f);
    REQUIRE(await_join(c2, &fol));
    coord_flight_clear(&fol.f);
    for (int i = 0; i < K; i++) {
        REQUIRE(get_latency(c, kinds[i], &after[i]));
        CHECK_MSG(after[i].p50 <= after[i].p99 && after[i].p99 <= after[i].max,
                  "%s: p50 %.3f p99 %.3f max %.3f", kinds[i], after[i].p50, after[i].p99,
                  after[i].max);
    }
    CHECK_EQ_U(after[0].count, before[0].count + 1);   /* one grant */
    CHECK_EQ_U(after[1].count, before[1].count + 1);   /* one release */
    CHECK_EQ_U(after[2].count, before[2].count + 1);   /* one completion */
    CHECK_MSG(after[3].count >= before[3].count + 1, "follower_wait %llu -> %llu",
              (unsigned long long)before[3].count, (unsigned long long)after[3].count);
    CHECK_EQ_U(after[4].count, before[4].count);
    CHECK_MSG(after[1].max >= 20.0, "lock_hold max %.3f ms after a 20 ms hold",
              after[1].max);

    /* a term ends while the next campaign waits, which is then granted */
    uint64_t g;
    bool granted;
    REQUIRE(coord_leader_campaign(c, S("ws"), NULL, &g, &granted) == 0 && granted);
    coord_req_t *req = coord_req_new("leader.campaign");
    coord_req_str(req, "workstream", S("ws"));
    struct { bool done; int status; } camp = { 0 };
    REQUIRE(coord_send(c2, req, on_campaign, &camp, NULL) == 0);
    coord_req_free(req);
    CHECK(await_campaign_waiting(c, "ws"));
    REQUIRE(coord_leader_resign(c, S("ws"), g) == 0);
    end = now_ms() + T;
    while (!camp.done && now_ms() < end)
        REQUIRE(coord_wait(c2, 1000) == 0);
    CHECK(camp.done && camp.status == 0);
    struct lat tr;
    REQUIRE(get_latency(c, "leader_transition", &tr));
    CHECK_EQ_U(tr.count, after[4].count + 1);
    coord_close(c2);
    coord_close(c);
    stop();
}

/* ---- coordctl ---- */

/* Runs coordctl on sock (NULL: bp's) to its end: exit status, *out and
 * *err (may be NULL; free them). */
static int ctl_on(const char *sock, const char *const *args, char **out, char **err)
{
    struct run r;
    size_t n;
    ctl_spawn(&r, sock ? sock : bp.sock, bp.dir, &(struct ctl_opts){ 0 }, args);
    int st = child_status(r.pid, T);
    if (out)
        *out = slurp(r.out, &n);
    if (err)
        *err = slurp(r.err, &n);
    run_free(&r);
    return st;
}

static void test_cli_stale(void)
{
    start();
    coord_t *c = lib();
    char gate[400], script[900], *out, *err;
    snprintf(gate, sizeof gate, "%s/go", bp.dir);
    CHECK_EQ(ctl_on(NULL, ARGS("once", "--keep", "0.05", "--stale", "600", "st", "--",
                               "echo", "v1"), &out, NULL), 0);
    CHECK_STR(out, "v1\n");
    free(out);
    await_record_age(c, "st", 50);
    /* the revalidation owner waits for the gate, then prints v2 */
    snprintf(script, sizeof script, "while [ ! -e '%s' ]; do sleep 0.01; done; echo v2",
             gate);
    struct run own;
    ctl_spawn(&own, bp.sock, bp.dir, &(struct ctl_opts){ 0 },
              ARGS("once", "--keep", "0.05", "--stale", "600", "st", "--", "sh", "-c",
                   script));
    REQUIRE(await_flight(c, "st"));
    /* meanwhile: the stale v1 at once, exit 0, CMD not run */
    CHECK_EQ(ctl_on(NULL, ARGS("once", "--keep", "0.05", "--stale", "600", "st", "--",
                               "echo", "never"), &out, &err), 0);
    CHECK_STR(out, "v1\n");
    free(out);
    free(err);
    close(open(gate, O_WRONLY | O_CREAT, 0600));
    CHECK_EQ(child_status(own.pid, T), 0);
    size_t n;
    out = slurp(own.out, &n);
    CHECK_STR(out, "v2\n");
    free(out);
    run_free(&own);
    /* the fresh record */
    CHECK_EQ(ctl_on(NULL, ARGS("once", "--keep", "600", "st", "--", "echo", "never"), &out,
                    NULL), 0);
    CHECK_STR(out, "v2\n");
    free(out);
    /* --stale needs --keep */
    CHECK_EQ(ctl_on(NULL, ARGS("once", "--stale", "5", "st", "--", "true"), NULL, NULL), 2);
    coord_close(c);
    stop();
}

static void test_cli_backoff(void)
{
    start();
    coord_t *c = lib();
    char gate[400], runs[400], script[1200], again[600], *out, *err;
    snprintf(gate, sizeof gate, "%s/go", bp.dir);
    snprintf(runs, sizeof runs, "%s/runs", bp.dir);
    snprintf(script, sizeof script,
             "echo run >> '%s'; while [ ! -e '%s' ]; do sleep 0.01; done; "
             "echo 30 > \"$COORD_RETRY_AFTER_FILE\"; echo partial; exit 75", runs, gate);
    snprintf(again, sizeof again, "echo run >> '%s'", runs);
    struct run own, fol;
    ctl_spawn(&own, bp.sock, bp.dir, &(struct ctl_opts){ 0 },
              ARGS("once", "bk", "--", "sh", "-c", script));
    REQUIRE(await_flight(c, "bk"));
    ctl_spawn(&fol, bp.sock, bp.dir, &(struct ctl_opts){ 0 },
              ARGS("once", "bk", "--", "sh", "-c", again));
    uint64_t end = now_ms() + T;
    for (;;) {                   /* until the follower waits */
        coord_reply_t *r = NULL;
        REQUIRE(coord_flight_list(c, &r) == 0);
        coord_map e;
        uint64_t n = 0;
        if (coord_map_array_at(coord_reply_map(r), "flights", 0, &e))
            coord_map_uint(e, "followers", &n);
        coord_reply_free(r);
        if (n == 1 || now_ms() > end)
            break;
        nap_ms(5);
    }
    close(open(gate, O_WRONLY | O_CREAT, 0600));
    CHECK_EQ(child_status(own.pid, T), 75);
    CHECK_EQ(child_status(fol.pid, T), 75);
    CHECK(file_has(fol.err, "the owner failed"));
    CHECK(file_has(fol.err, "TEMPFAIL"));
    run_free(&own);
    run_free(&fol);
    /* inside the window: exit 75 at once, CMD not run */
    CHECK_EQ(ctl_on(NULL, ARGS("once", "bk", "--", "sh", "-c", again), &out, &err), 75);
    CHECK(strstr(err, "backing off") != NULL);
    CHECK_STR(out, "");
    free(out);
    free(err);
    size_t n;
    char *r = slurp(runs, &n);
    CHECK_STR(r, "run\n");
    free(r);
    /* exit 75 without a number is an ordinary result: no backoff */
    CHECK_EQ(ctl_on(NULL, ARGS("once", "bk2", "--", "sh", "-c", "echo x; exit 75"), &out,
                    NULL), 75);
    CHECK_STR(out, "x\n");
    free(out);
    CHECK_EQ(ctl_on(NULL, ARGS("once", "bk2", "--", "sh", "-c", "echo y"), &out, NULL), 0);
    CHECK_STR(out, "y\n");
    free(out);
    coord_close(c);
    stop();
}

static void test_cli_fallback(void)
{
    start();
    char none[400], *out, *err;
    snprintf(none, sizeof none, "%s/none.sock", bp.dir);
    CHECK_EQ(ctl_on(none, ARGS("once", "--fallback", "run", "fb", "--", "sh", "-c",
                               "echo here $COORD_FLIGHT_FALLBACK; exit 5"), &out, &err), 5);
    CHECK_STR(out, "here 1\n");
    CHECK(strstr(err, "without coordination") != NULL);
    free(out);
    free(err);
    CHECK_EQ(ctl_on(none, ARGS("once", "--fallback", "fail", "fb", "--", "echo", "x"), &out,
                    NULL), 3);
    CHECK_STR(out, "");
    free(out);
    CHECK_EQ(ctl_on(none, ARGS("once", "fb", "--", "echo", "x"), NULL, NULL), 3);
    CHECK_EQ(ctl_on(NULL, ARGS("once", "--fallback", "maybe", "fb", "--", "true"), NULL,
                    NULL), 2);
    /* with a broker, --fallback run changes nothing */
    CHECK_EQ(ctl_on(NULL, ARGS("once", "--fallback", "run", "fb", "--", "sh", "-c",
                               "echo [$COORD_FLIGHT_FALLBACK]"), &out, NULL), 0);
    CHECK_STR(out, "[]\n");
    free(out);
    stop();
}

static void test_cli_kill_switch(void)
{
    start();
    char *out;
    CHECK_EQ(ctl_on(NULL, ARGS("flights", "disable", "api/"), &out, NULL), 0);
    CHECK_STR(out, "single-flight disabled for prefix \"api/\"\n");
    free(out);
    CHECK_EQ(ctl_on(NULL, ARGS("flights"), &out, NULL), 0);
    CHECK(strstr(out, "no flights running\n") != NULL);
    CHECK(strstr(out, "single-flight disabled for prefix \"api/\"\n") != NULL);
    free(out);
    CHECK_EQ(ctl_on(NULL, ARGS("--json", "flights"), &out, NULL), 0);
    CHECK(strstr(out, "\"disabled\":[\"api/\"]}\n") != NULL);
    free(out);
    /* bypassed: two runs, no record */
    CHECK_EQ(ctl_on(NULL, ARGS("once", "--keep", "600", "api/x", "--", "echo", "1"), &out,
                    NULL), 0);
    free(out);
    CHECK_EQ(ctl_on(NULL, ARGS("once", "--keep", "600", "api/x", "--", "echo", "2"), &out,
                    NULL), 0);
    CHECK_STR(out, "2\n");
    free(out);
    CHECK_EQ(ctl_on(NULL, ARGS("flights", "enable", "api/"), &out, NULL), 0);
    CHECK_STR(out, "single-flight enabled for prefix \"api/\"\n");
    free(out);
    CHECK_EQ(ctl_on(NULL, ARGS("flights"), &out, NULL), 0);
    CHECK_STR(out, "no flights running\n");
    free(out);
    CHECK_EQ(ctl_on(NULL, ARGS("flights", "disable"), NULL, NULL), 2);
    CHECK_EQ(ctl_on(NULL, ARGS("flights", "enable", "a", "b"), NULL, NULL), 2);
    stop();
}

static void test_cli_stats(void)
{
    start();
    char *out;
    CHECK_EQ(ctl_on(NULL, ARGS("lock", "l", "--", "true"), NULL, NULL), 0);
    CHECK_EQ(ctl_on(NULL, ARGS("stats"), &out, NULL), 0);
    CHECK(strstr(out, "\nLATENCY ") != NULL);
    CHECK(strstr(out, "latency.") == NULL);
    static const char *const kinds[] = {
        "lock_wait", "lock_hold", "flight_run", "follower_wait", "leader_transition",
    };
    for (int i = 0; i < 5; i++) {
        char want[64];
        snprintf(want, sizeof want, "\n%s ", kinds[i]);
        CHECK_MSG(strstr(out, want) != NULL, "stats table row %s", kinds[i]);
    }
    /* the lock's row: count 1 */
    const char *row = strstr(out, "\nlock_hold ");
    unsigned long long cnt = 0;
    double p50, p99, max;
    CHECK(row && sscanf(row, "\nlock_hold %llu %lf ms %lf ms %lf ms", &cnt, &p50, &p99,
                        &max) == 4 && cnt == 1 && p50 <= p99 && p99 <= max);
    free(out);
    CHECK_EQ(ctl_on(NULL, ARGS("--json", "stats"), &out, NULL), 0);
    size_t lines = 0;
    for (char *p = out; *p; p++)
        lines += *p == '\n';
    CHECK_EQ_U(lines, 1);
    CHECK(strstr(out, "\"latency\":{\"lock_wait\":{\"count\":") != NULL);
    free(out);
    stop();
}

int main(int argc, char **argv)
{
    static const struct test_case tests[] = {
        { "swr_20", test_swr_20 },
        { "swr_20_failed", test_swr_20_failed },
        { "once_stale", test_once_stale },
        { "backoff_window", test_backoff_window },
        { "kill_switch_restart", test_kill_switch_restart },
        { "fallback_no_broker", test_fallback_no_broker },
        { "fallback_dropped", test_fallback_dropped },
        { "latency_stats", test_latency_stats },
        { "cli_stale", test_cli_stale },
        { "cli_backoff", test_cli_backoff },
        { "cli_fallback", test_cli_fallback },
        { "cli_kill_switch", test_cli_kill_switch },
        { "cli_stats", test_cli_stats },
        { NULL, NULL },
    };
    return run_tests(argc, argv, tests);
}
