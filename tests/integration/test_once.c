/* test_once.c - single-flight through libcoord and `coordctl once`
 * against a real broker: 50 concurrent coordctl processes running one
 * command once, --keep across a kill -9 of the broker, promotion after the
 * owning coordctl is SIGKILLed, coord_once across threads, follower cancel,
 * coordctl flights/records/purge, and the fan-out figure (one owner, 1,000
 * followers on one key).
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
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "coord.h"
#include "harness.h"
#include "leader-util.h"

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

/* A libcoord connection to bp in scope (NULL: ""); never autostarts. */
static coord_t *lib_in(const char *scope)
{
    return lib_connect(&bp, scope, "test_once");
}

static coord_t *lib(void) { return lib_in(NULL); }


/* Followers of the running flight on key (-1: no such flight). */
static long followers_of(coord_t *c, const char *key)
{
    coord_reply_t *r = NULL;
    if (coord_flight_list(c, &r) < 0)
        return -1;
    coord_map m = coord_reply_map(r);
    long n = -1;
    for (size_t i = 0; i < coord_map_array_len(m, "flights"); i++) {
        coord_map e;
        const char *k;
        size_t kn;
        uint64_t f;
        if (coord_map_array_at(m, "flights", i, &e) && coord_map_str(e, "key", &k, &kn) &&
            kn == strlen(key) && memcmp(k, key, kn) == 0 &&
            coord_map_uint(e, "followers", &f))
            n = (long)f;
    }
    coord_reply_free(r);
    return n;
}

/* Waits until key's flight has want followers (want -1: until it runs). */
static bool await_followers(coord_t *c, const char *key, long want, int timeout_ms)
{
    uint64_t end = now_ms() + (uint64_t)timeout_ms;
    for (;;) {
        long n = followers_of(c, key);
        if (want < 0 ? n >= 0 : n == want)
            return true;
        if (now_ms() > end) {
            fprintf(stderr, "flight %s: %ld followers, wanted %ld\n", key, n, want);
            return false;
        }
        nap_ms(10);
    }
}

/* ---- files and processes ---- */

static size_t count_lines(const char *path)
{
    size_t n, lines = 0;
    char *b = slurp(path, &n);
    for (size_t i = 0; i < n; i++)
        lines += b[i] == '\n';
    free(b);
    return lines;
}

static void path_in(char *out, size_t size, const char *name)
{
    snprintf(out, size, "%s/%s", bp.dir, name);
}

/* Starts `coordctl --socket bp.sock --no-autostart [--scope SCOPE] ARGS...`
 * (args NULL-terminated), stdout and stderr in files of bp's dir.  With a
 * gate (a pipe) the child first reads it until EOF: the parent releases
 * every such child at once by closing its write end. */
static void ctl_start(struct run *r, const int *gate, const char *scope,
                      const char *const *args)
{
    ctl_spawn(r, bp.sock, bp.dir, &(struct ctl_opts){ .gate = gate, .scope = scope },
              args);
}

static char *run_out(const struct run *r)
{
    size_t n;
    return slurp(r->out, &n);
}

static void show_err(const struct run *r)
{
    size_t n;
    char *e = slurp(r->err, &n);
    if (n)
        fprintf(stderr, "coordctl %d stderr: %s", (int)r->pid, e);
    free(e);
}

/* Runs coordctl to its end: exit status, *out its stdout (free it). */
static int ctl_run(const char *scope, const char *const *args, char **out)
{
    struct run r;
    ctl_start(&r, NULL, scope, args);
    int st = child_status(r.pid, T);
    if (out)
        *out = run_out(&r);
    if (st != 0)
        show_err(&r);
    return st;
}

/* ---- 50 coordctl processes, one execution ---- */

static void storm(const char *key, int want_status)
{
    enum { N = 50 };
    start();
    coord_t *mon = lib();
    char runs[400], go[400], script[1200];
    path_in(runs, sizeof runs, "runs");
    path_in(go, sizeof go, "go");
    /* the owner's command holds until every other caller has joined */
    snprintf(script, sizeof script,
             "echo run >> '%s'; while [ ! -e '%s' ]; do sleep 0.02; done; "
             "echo output-$$; exit %d", runs, go, want_status);
    const char *args[] = { "once", key, "--", "sh", "-c", script, NULL };
    int gate[2];
    REQUIRE(pipe(gate) == 0);
    struct run r[N];
    for (int i = 0; i < N; i++)
        ctl_start(&r[i], gate, NULL, args);
    close(gate[0]);
    close(gate[1]);                /* all 50 start now */
    CHECK(await_followers(mon, key, N - 1, T));
    int fd = open(go, O_WRONLY | O_CREAT, 0600);
    close(fd);
    char *first = NULL;
    int same = 0, status_ok = 0;
    for (int i = 0; i < N; i++) {
        int st = child_status(r[i].pid, T);
        char *out = run_out(&r[i]);
        if (st == want_status)
            status_ok++;
        else
            show_err(&r[i]);
        if (!first)
            first = out;
        else {
            same += strcmp(first, out) == 0;
            free(out);
        }
    }
    CHECK_EQ_U(status_ok, N);
    CHECK_EQ_U(same, N - 1);
    CHECK(strncmp(first, "output-", 7) == 0 && first[strlen(first) - 1] == '\n');
    CHECK_EQ_U(count_lines(runs), 1);
    free(first);
    coord_close(mon);
    stop();
}

static void test_storm_50(void) { storm("storm", 0); }
static void test_storm_50_exit3(void) { storm("storm3", 3); }

/* ---- --keep, across a kill -9 of the broker ---- */

/* Runs coordctl; *out gets its stdout (all bytes, free it), *len their count. */
static int ctl_run_bytes(const char *const *args, char **out, size_t *len)
{
    struct run r;
    ctl_start(&r, NULL, NULL, args);
    int st = child_status(r.pid, T);
    *out = slurp(r.out, len);
    if (st != 0)
        show_err(&r);
    return st;
}

static void test_keep(void)
{
    start();
    char runs[400], script[800];
    path_in(runs, sizeof runs, "runs");
    /* output with a NUL and a byte that is no text */
    snprintf(script, sizeof script, "echo run >> '%s'; printf 'tok-%%s\\n\\001\\000x' $$",
             runs);
    const char *args[] = { "once", "--keep", "60", "token", "--", "sh", "-c", script, NULL };
    char *out1, *out2, *out3;
    size_t n1, n2, n3;
    CHECK_EQ_U(ctl_run_bytes(args, &out1, &n1), 0);
    CHECK(n1 > 7 && strncmp(out1, "tok-", 4) == 0 && out1[n1 - 2] == '\0' &&
          out1[n1 - 1] == 'x');
    CHECK_EQ_U(count_lines(runs), 1);
    /* the stored result, exactly, without running the command */
    CHECK_EQ_U(ctl_run_bytes(args, &out2, &n2), 0);
    CHECK(n1 == n2 && memcmp(out1, out2, n1) == 0);
    CHECK_EQ_U(count_lines(runs), 1);
    free(out2);

    /* the record as the library sees it: format 1, status 0, the stdout */
    coord_t *c = lib();
    coord_record rec;
    REQUIRE(coord_record_get(c, S("token"), &rec) == 0);
    const unsigned char *rb = rec.result;
    CHECK(!rec.failed);
    CHECK_EQ_U(rec.result_len, n1 + 2);
    CHECK(rec.result_len == n1 + 2 && rb[0] == 1 && rb[1] == 0 &&
          memcmp(rb + 2, out1, n1) == 0);
    CHECK(rec.expires_ms >= rec.created_ms + 59000);
    coord_record_clear(&rec);
    coord_close(c);

    /* kill -9 the broker and start it again on the same data */
    broker_kill(&bp, SIGKILL);
    REQUIRE(broker_start(&bp, NULL) == 0);
    CHECK_EQ_U(ctl_run_bytes(args, &out3, &n3), 0);
    CHECK(n1 == n3 && memcmp(out1, out3, n1) == 0);
    CHECK_EQ_U(count_lines(runs), 1);
    free(out3);

    /* without --keep the command runs again */
    const char *again[] = { "once", "token", "--", "sh", "-c", script, NULL };
    CHECK_EQ_U(ctl_run_bytes(again, &out3, &n3), 0);
    CHECK(n3 == n1 && memcmp(out1, out3, n1) != 0);     /* another $$ */
    CHECK_EQ_U(count_lines(runs), 2);
    free(out3);
    free(out1);

    /* a failed run is shared but not kept */
    char runs2[400], script2[800];
    path_in(runs2, sizeof runs2, "runs2");
    snprintf(script2, sizeof script2, "echo run >> '%s'; echo failing; exit 4", runs2);
    const char *args4[] = { "once", "--keep", "60", "bad", "--", "sh", "-c", script2, NULL };
    CHECK_EQ_U(ctl_run_bytes(args4, &out1, &n1), 4);
    free(out1);
    CHECK_EQ_U(ctl_run_bytes(args4, &out1, &n1), 4);
    CHECK(strcmp(out1, "failing\n") == 0);
    free(out1);
    CHECK_EQ_U(count_lines(runs2), 2);
    stop();
}

/* ---- the owning coordctl is SIGKILLed mid-command ---- */

static void test_owner_killed(void)
{
    enum { N = 5 };
    start();
    coord_t *mon = lib();
    char runs[400], pidf[400], script[1600];
    path_in(runs, sizeof runs, "runs");
    path_in(pidf, sizeof pidf, "pid");
    /* the first run hangs (until killed), later ones finish */
    snprintf(script, sizeof script,
             "echo run >> '%s'; if [ $(wc -l < '%s') -eq 1 ]; then echo $$ > '%s'; "
             "exec sleep 60; fi; echo promoted-$$", runs, runs, pidf);
    const char *args[] = { "once", "victim", "--", "sh", "-c", script, NULL };
    struct run owner, f[N];
    ctl_start(&owner, NULL, NULL, args);
    REQUIRE(await_followers(mon, "victim", 0, T));
    uint64_t end = now_ms() + T;
    while (count_lines(runs) < 1 && now_ms() < end)
        nap_ms(10);
    for (int i = 0; i < N; i++)
        ctl_start(&f[i], NULL, NULL, args);
    CHECK(await_followers(mon, "victim", N, T));
    kill(owner.pid, SIGKILL);
    CHECK_EQ_U(child_status(owner.pid, T), 128 + SIGKILL);
    char *first = NULL;
    for (int i = 0; i < N; i++) {
        CHECK_EQ_U(child_status(f[i].pid, T), 0);
        char *out = run_out(&f[i]);
        if (!first) {
            first = out;
            CHECK(strncmp(out, "promoted-", 9) == 0);
        } else {
            CHECK(strcmp(first, out) == 0);
            free(out);
        }
    }
    CHECK_EQ_U(count_lines(runs), 2);
    free(first);
    /* the orphaned first command */
    size_t n;
    char *p = slurp(pidf, &n);
    if (atoi(p) > 0)
        kill(atoi(p), SIGKILL);
    free(p);
    coord_close(mon);
    stop();
}

/* ---- --ttl: the owner's command is stopped, a follower takes over ---- */

static void test_ttl_takeover(void)
{
    start();
    coord_t *mon = lib();
    char runs[400], script[1200];
    path_in(runs, sizeof runs, "runs");
    snprintf(script, sizeof script,
             "echo run >> '%s'; if [ $(wc -l < '%s') -eq 1 ]; then exec sleep 60; fi; "
             "echo second", runs, runs);
    const char *slow[] = { "once", "--ttl", "0.5", "slow", "--", "sh", "-c", script, NULL };
    const char *fast[] = { "once", "slow", "--", "sh", "-c", script, NULL };
    struct run owner, f;
    ctl_start(&owner, NULL, NULL, slow);
    REQUIRE(await_followers(mon, "slow", 0, T));
    ctl_start(&f, NULL, NULL, fast);
    CHECK_EQ_U(child_status(f.pid, T), 0);
    char *out = run_out(&f);
    CHECK(strcmp(out, "second\n") == 0);
    int st = child_status(owner.pid, T);
    CHECK(st != 0 && st != -1);       /* SIGTERMed: 143 */
    CHECK_EQ_U(count_lines(runs), 2);
    if (strcmp(out, "second\n") != 0 || count_lines(runs) != 2) {
        fprintf(stderr, "follower printed \"%s\", owner status %d\n", out, st);
        show_err(&owner);
        show_err(&f);
    }
    free(out);
    /* --wait: a follower gives up */
    const char *hang[] = { "once", "hang", "--", "sh", "-c", "exec sleep 60", NULL };
    const char *wait1[] = { "once", "--wait", "0.3", "hang", "--", "true", NULL };
    ctl_start(&owner, NULL, NULL, hang);
    REQUIRE(await_followers(mon, "hang", 0, T));
    uint64_t t0 = now_ms();
    CHECK_EQ_U(ctl_run(NULL, wait1, NULL), 1);
    CHECK(now_ms() - t0 < 5000);
    kill(owner.pid, SIGTERM);         /* reaches its command's group */
    CHECK_EQ_U(child_status(owner.pid, T), 128 + SIGTERM);
    coord_close(mon);
    stop();
}

/* ---- coord_once across threads ---- */

static atomic_int work_runs;
static atomic_bool work_go;

static int work_fn(void *ud, void **result, size_t *len, char **code, char **msg)
{
    const char *mode = ud;
    atomic_fetch_add(&work_runs, 1);
    while (!atomic_load(&work_go))
        nap_ms(2);
    if (strcmp(mode, "fail") == 0) {
        *code = strdup("E_TEST");
        *msg = strdup("it went wrong");
        return COORD_WORK_FAILED;
    }
    if (strcmp(mode, "slow") == 0)
        nap_ms(600);
    *result = strdup("the answer");
    *len = strlen("the answer");
    return COORD_WORK_OK;
}

struct once_thread {
    pthread_t t;
    const char *key;
    const char *mode;
    int rc;
    coord_flight out;
};

static void *once_main(void *arg)
{
    struct once_thread *ot = arg;
    coord_t *c = lib();
    ot->rc = coord_once(c, ot->key, strlen(ot->key), NULL, 0, work_fn, (void *)ot->mode,
                        &ot->out);
    coord_close(c);
    return NULL;
}

static void once_threads(const char *key, const char *mode)
{
    enum { N = 8 };
    coord_t *mon = lib();
    struct once_thread th[N];
    atomic_store(&work_runs, 0);
    atomic_store(&work_go, false);
    memset(th, 0, sizeof th);
    for (int i = 0; i < N; i++) {
        th[i].key = key;
        th[i].mode = mode;
        pthread_create(&th[i].t, NULL, once_main, &th[i]);
    }
    CHECK(await_followers(mon, key, N - 1, T));
    atomic_store(&work_go, true);
    int ran = 0;
    for (int i = 0; i < N; i++) {
        pthread_join(th[i].t, NULL);
        CHECK_EQ_U(th[i].rc, 0);
        ran += th[i].out.ran;
        if (strcmp(mode, "fail") == 0) {
            CHECK(th[i].out.role == COORD_FLIGHT_FAILED);
            CHECK(th[i].out.error_code && strcmp(th[i].out.error_code, "E_TEST") == 0);
            CHECK(th[i].out.error_message &&
                  strcmp(th[i].out.error_message, "it went wrong") == 0);
            CHECK(!th[i].out.retryable);
        } else {
            CHECK(th[i].out.role == COORD_FLIGHT_RESULT);
            CHECK(th[i].out.result_len == 10 && th[i].out.result &&
                  strcmp(th[i].out.result, "the answer") == 0);
            CHECK(!th[i].out.from_record);
        }
        coord_flight_clear(&th[i].out);
    }
    CHECK_EQ_U(ran, 1);
    CHECK_EQ_U(atomic_load(&work_runs), 1);
    coord_close(mon);
}

static void test_coord_once_threads(void)
{
    start();
    once_threads("lib-ok", "ok");
    once_threads("lib-fail", "fail");

    /* keep_ms: the next call with max_age_ms reads the record */
    coord_t *c = lib();
    coord_flight out;
    atomic_store(&work_go, true);
    atomic_store(&work_runs, 0);
    coord_flight_opts o = { .max_age_ms = 60000 };
    CHECK_EQ_U(coord_once(c, S("lib-keep"), &o, 60000, work_fn, "ok", &out), 0);
    CHECK(out.ran && out.role == COORD_FLIGHT_RESULT);
    coord_flight_clear(&out);
    CHECK_EQ_U(coord_once(c, S("lib-keep"), &o, 60000, work_fn, "ok", &out), 0);
    CHECK(!out.ran && out.role == COORD_FLIGHT_RESULT && out.from_record);
    CHECK(out.result && strcmp(out.result, "the answer") == 0);
    coord_flight_clear(&out);
    CHECK_EQ_U(atomic_load(&work_runs), 1);

    /* past its owner_ttl_ms the owner's result is fenced */
    coord_flight_opts shortttl = { .owner_ttl_ms = 200 };
    CHECK_EQ_U(coord_once(c, S("lib-slow"), &shortttl, 0, work_fn, "slow", &out),
               (unsigned long long)COORD_EFENCED);
    CHECK(out.role == COORD_FLIGHT_NONE && !out.result);
    /* a key too long for a record: delivered, not kept */
    char longkey[600];
    memset(longkey, 'k', sizeof longkey);
    CHECK_EQ_U(coord_once(c, longkey, sizeof longkey, NULL, 60000, work_fn, "ok", &out), 0);
    CHECK(out.ran && out.role == COORD_FLIGHT_RESULT);
    coord_flight_clear(&out);
    coord_close(c);
    stop();
}

/* ---- low level: cancel, orphaned, records ---- */

struct async_out {
    bool done;
    int status;
    coord_flight f;
};

static void on_join(coord_t *c, int status, coord_flight *f, void *ud)
{
    struct async_out *a = ud;
    (void)c;
    a->done = true;
    a->status = status;
    a->f = *f;
    memset(f, 0, sizeof *f);       /* keep it */
}

static bool await_async(coord_t *c, struct async_out *a)
{
    uint64_t end = now_ms() + T;
    while (!a->done && now_ms() < end)
        if (coord_wait(c, 100) < 0)
            break;
    return a->done;
}

static void test_cancel_and_records(void)
{
    start();
    coord_t *o = lib(), *a = lib(), *b = lib();
    coord_flight f;
    coord_flight_opts orphan = { .abort_when_orphaned = true };
    REQUIRE(coord_flight_join(o, S("cx"), &orphan, &f) == 0);
    CHECK(f.role == COORD_FLIGHT_OWNER && f.flight && f.fence);
    uint64_t flight = f.flight, fence = f.fence;

    struct async_out ra = { 0 }, rb = { 0 };
    uint64_t rid_a = 0;
    REQUIRE(coord_flight_join_async(a, S("cx"), NULL, on_join, &ra, &rid_a) == 0);
    REQUIRE(coord_flight_join_async(b, S("cx"), NULL, on_join, &rb, NULL) == 0);
    CHECK(await_followers(o, "cx", 2, T));
    CHECK(coord_cancel(a, rid_a) == 0);
    CHECK(await_async(a, &ra));
    CHECK_EQ_U(ra.status, (unsigned long long)COORD_EABORTED);
    CHECK(ra.f.role == COORD_FLIGHT_NONE);
    /* the owner runs on: b still follows, no abort event for o */
    CHECK(await_followers(o, "cx", 1, T));
    coord_reply_t *ev = NULL;
    CHECK_EQ_U(coord_next_event(o, 50, &ev), (unsigned long long)COORD_EAGAIN);
    coord_reply_free(ev);
    uint64_t delivered = 0;
    CHECK_EQ_U(coord_flight_complete(o, flight, fence, S("done"), 60000, &delivered), 0);
    CHECK_EQ_U(delivered, 1);
    CHECK(await_async(b, &rb));
    CHECK_EQ_U(rb.status, 0);
    CHECK(rb.f.role == COORD_FLIGHT_RESULT && rb.f.result_len == 4 &&
          strcmp(rb.f.result, "done") == 0 && rb.f.fence == fence && !rb.f.from_record);
    coord_flight_clear(&rb.f);
    /* a late second complete is fenced */
    CHECK_EQ_U(coord_flight_complete(o, flight, fence, S("again"), 0, NULL),
               (unsigned long long)COORD_EFENCED);

    /* the last follower leaving tells an owner that asked */
    REQUIRE(coord_flight_join(o, S("orph"), &orphan, &f) == 0);
    flight = f.flight;
    fence = f.fence;
    memset(&ra, 0, sizeof ra);
    REQUIRE(coord_flight_join_async(a, S("orph"), NULL, on_join, &ra, &rid_a) == 0);
    CHECK(await_followers(o, "orph", 1, T));
    coord_cancel(a, rid_a);
    CHECK(await_async(a, &ra));
    REQUIRE(coord_next_event(o, T, &ev) == 0);
    coord_flight_abort ab;
    CHECK(coord_event_flight_abort(ev, &ab));
    CHECK(ab.flight == flight && ab.reason_len == 8 && memcmp(ab.reason, "orphaned", 8) == 0);
    coord_reply_free(ev);
    CHECK_EQ_U(coord_flight_fail(o, flight, fence, "E_GONE", "nobody cares", false, 60000), 0);

    /* records */
    coord_record r;
    REQUIRE(coord_record_get(b, S("cx"), &r) == 0);
    CHECK(!r.failed && r.result_len == 4 && strcmp(r.result, "done") == 0);
    coord_record_clear(&r);
    REQUIRE(coord_record_get(b, S("orph"), &r) == 0);
    CHECK(r.failed && strcmp(r.error_code, "E_GONE") == 0 &&
          strcmp(r.error_message, "nobody cares") == 0 && !r.retryable);
    coord_record_clear(&r);
    CHECK_EQ_U(coord_record_get(b, S("none"), &r), (unsigned long long)COORD_ENOT_FOUND);
    /* a failed record serves a join with max_age_ms */
    coord_flight_opts fresh = { .max_age_ms = 60000 };
    REQUIRE(coord_flight_join(b, S("orph"), &fresh, &f) == 0);
    CHECK(f.role == COORD_FLIGHT_FAILED && strcmp(f.error_code, "E_GONE") == 0);
    coord_flight_clear(&f);
    coord_reply_t *list = NULL;
    REQUIRE(coord_record_list(b, S("c"), 0, &list) == 0);
    CHECK_EQ_U(coord_map_array_len(coord_reply_map(list), "records"), 1);
    coord_reply_free(list);
    uint64_t deleted = 0;
    CHECK_EQ_U(coord_record_purge(b, NULL, 0, &deleted), 0);
    CHECK_EQ_U(deleted, 2);
    CHECK_EQ_U(coord_record_get(b, S("cx"), &r), (unsigned long long)COORD_ENOT_FOUND);
    coord_close(o);
    coord_close(a);
    coord_close(b);
    stop();
}

/* ---- coordctl flights / records / purge ---- */

static bool has(const char *hay, const char *needle)
{
    bool yes = strstr(hay, needle) != NULL;
    if (!yes)
        fprintf(stderr, "output lacks \"%s\":\n%s", needle, hay);
    return yes;
}

static void test_ctl_tables(void)
{
    start();
    coord_t *mon = lib();
    char *out = NULL;
    const char *flights[] = { "flights", NULL };
    CHECK_EQ_U(ctl_run(NULL, flights, &out), 0);
    CHECK(has(out, "no flights running"));
    free(out);

    /* a running flight with one follower */
    const char *hang[] = { "once", "--version", "v3", "busy/key", "--", "sh", "-c",
                           "exec sleep 60", NULL };
    const char *follow[] = { "once", "busy/key", "--", "true", NULL };
    struct run owner, f;
    ctl_start(&owner, NULL, NULL, hang);
    REQUIRE(await_followers(mon, "busy/key", 0, T));
    ctl_start(&f, NULL, NULL, follow);
    CHECK(await_followers(mon, "busy/key", 1, T));
    CHECK_EQ_U(ctl_run(NULL, flights, &out), 0);
    CHECK(has(out, "KEY"));
    CHECK(has(out, "FOLLOWERS"));
    CHECK(has(out, "VERSION"));
    CHECK(has(out, " v3 "));              /* the flight's version */
    CHECK(has(out, "busy/key"));
    char pidtxt[64];
    snprintf(pidtxt, sizeof pidtxt, "pid %d ", (int)owner.pid);
    CHECK(has(out, pidtxt));
    free(out);
    const char *fj[] = { "--json", "flights", NULL };
    CHECK_EQ_U(ctl_run(NULL, fj, &out), 0);
    CHECK(has(out, "\"key\":\"busy/key\""));
    CHECK(has(out, "\"followers\":1"));
    free(out);
    kill(owner.pid, SIGTERM);         /* reaches its command's group */
    CHECK_EQ_U(child_status(owner.pid, T), 128 + SIGTERM);
    CHECK_EQ_U(child_status(f.pid, T), 0);      /* promoted, ran true */

    /* records: two in the default scope, one in another */
    const char *k1[] = { "once", "--keep", "60", "user/1", "--", "echo", "one", NULL };
    const char *k2[] = { "once", "--keep", "60", "user/2", "--", "echo", "two", NULL };
    const char *k3[] = { "once", "--keep", "60", "--version", "v7", "other/1", "--", "echo",
                         "three", NULL };
    CHECK_EQ_U(ctl_run(NULL, k1, NULL), 0);
    CHECK_EQ_U(ctl_run(NULL, k2, NULL), 0);
    CHECK_EQ_U(ctl_run(NULL, k3, NULL), 0);
    CHECK_EQ_U(ctl_run("elsewhere", k1, NULL), 0);
    const char *records[] = { "records", NULL };
    CHECK_EQ_U(ctl_run(NULL, records, &out), 0);
    CHECK(has(out, "STATUS"));
    CHECK(has(out, "user/1"));
    CHECK(has(out, "other/1"));
    CHECK(has(out, "completed"));
    CHECK(has(out, "OWNER"));
    CHECK(has(out, "VERSION"));
    CHECK(has(out, "coordctl (pid "));   /* each record's owner */
    CHECK(has(out, " v7 "));              /* other/1's version */
    free(out);
    const char *rp[] = { "records", "--prefix", "user/", NULL };
    CHECK_EQ_U(ctl_run(NULL, rp, &out), 0);
    CHECK(has(out, "user/2") && !strstr(out, "other/1"));
    free(out);
    const char *rj[] = { "--json", "records", "--prefix", "other", NULL };
    CHECK_EQ_U(ctl_run(NULL, rj, &out), 0);
    CHECK(has(out, "\"records\":[{\"key\":\"other/1\",\"status\":\"completed\""));
    CHECK(has(out, "\"size\":8"));
    free(out);

    /* purge: only the prefix, only the scope */
    const char *pp[] = { "purge", "--prefix", "user/", NULL };
    CHECK_EQ_U(ctl_run(NULL, pp, &out), 0);
    CHECK(strcmp(out, "deleted 2\nfenced 0\n") == 0);
    free(out);
    CHECK_EQ_U(ctl_run("elsewhere", records, &out), 0);
    CHECK(has(out, "user/1"));
    free(out);
    const char *pj[] = { "--json", "purge", NULL };
    CHECK_EQ_U(ctl_run(NULL, pj, &out), 0);
    CHECK(has(out, "\"deleted\":1"));
    free(out);
    CHECK_EQ_U(ctl_run(NULL, records, &out), 0);
    CHECK(has(out, "no records"));
    free(out);
    CHECK_EQ_U(ctl_run("elsewhere", records, &out), 0);
    CHECK(has(out, "user/1"));
    free(out);
    /* usage errors */
    const char *bad1[] = { "once", "k", NULL };
    const char *bad2[] = { "once", "--wait", "x", "k", "--", "true", NULL };
    const char *bad3[] = { "records", "extra", NULL };
    CHECK_EQ_U(ctl_run(NULL, bad1, NULL), 2);
    CHECK_EQ_U(ctl_run(NULL, bad2, NULL), 2);
    CHECK_EQ_U(ctl_run(NULL, bad3, NULL), 2);
    coord_close(mon);
    stop();
}

/* ---- the fan-out figure ---- */

struct follower {
    coord_t *c;
    bool done;
    int status;
    bool got_result;
    uint64_t at_ns;
};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void on_fan(coord_t *c, int status, coord_flight *f, void *ud)
{
    struct follower *fl = ud;
    (void)c;
    fl->at_ns = now_ns();
    fl->done = true;
    fl->status = status;
    fl->got_result = status == 0 && f->role == COORD_FLIGHT_RESULT && f->result_len == 6 &&
                     memcmp(f->result, "RESULT", 6) == 0;
}

static void on_completed(coord_t *c, int status, const coord_reply_t *reply, void *ud)
{
    uint64_t *delivered = ud;
    (void)c;
    if (status == 0)
        coord_map_uint(coord_reply_map(reply), "delivered", delivered);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static double pct_ms(const uint64_t *sorted, size_t n, double p)
{
    size_t i = (size_t)(p * (double)(n - 1) + 0.5);
    return (double)sorted[i] / 1e6;
}

static void test_fanout_1000(void)
{
    enum { N = 1000, ROUNDS = 7 };
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    if (rl.rlim_cur < N + 200) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
        getrlimit(RLIMIT_NOFILE, &rl);
    }
    REQUIRE(rl.rlim_cur >= N + 200);
    start();
    coord_t *owner = lib();
    struct follower *fl = calloc(N, sizeof *fl);
    struct pollfd *pf = calloc(N, sizeof *pf);
    uint64_t *all = calloc((size_t)N * ROUNDS, sizeof *all);
    uint64_t last[ROUNDS];
    size_t nall = 0;
    for (int i = 0; i < N; i++)
        fl[i].c = lib();
    for (int round = 0; round < ROUNDS; round++) {
        char key[32];
        snprintf(key, sizeof key, "fan-%d", round);
        coord_flight f;
        REQUIRE(coord_flight_join(owner, key, strlen(key), NULL, &f) == 0);
        REQUIRE(f.role == COORD_FLIGHT_OWNER);
        for (int i = 0; i < N; i++) {
            fl[i].done = fl[i].got_result = false;
            REQUIRE(coord_flight_join_async(fl[i].c, key, strlen(key), NULL, on_fan,
                                            &fl[i], NULL) == 0);
        }
        REQUIRE(await_followers(owner, key, N, T));
        /* complete without waiting for its reply, then read everyone */
        coord_req_t *req = coord_req_new("flight.complete");
        coord_req_uint(req, "flight", f.flight);
        coord_req_uint(req, "fence", f.fence);
        coord_req_bin(req, "result", "RESULT", 6);
        uint64_t delivered = 0;
        uint64_t t0 = now_ns();
        REQUIRE(coord_send(owner, req, on_completed, &delivered, NULL) == 0);
        coord_req_free(req);
        int left = N;
        uint64_t end = now_ms() + T;
        while (left > 0 && now_ms() < end) {
            int np = 0;
            int idx[N];
            for (int i = 0; i < N; i++)
                if (!fl[i].done) {
                    pf[np].fd = coord_fd(fl[i].c);
                    pf[np].events = POLLIN;
                    pf[np].revents = 0;
                    idx[np++] = i;
                }
            if (poll(pf, (nfds_t)np, 1000) <= 0)
                continue;
            for (int k = 0; k < np; k++)
                if (pf[k].revents) {
                    coord_dispatch(fl[idx[k]].c);
                    if (fl[idx[k]].done)
                        left--;
                }
        }
        int owners = 0, results = 0;
        uint64_t mx = 0;
        for (int i = 0; i < N; i++) {
            results += fl[i].got_result;
            owners += fl[i].done && fl[i].status == 0 && !fl[i].got_result;
            if (fl[i].done) {
                uint64_t d = fl[i].at_ns > t0 ? fl[i].at_ns - t0 : 0;
                all[nall++] = d;
                if (d > mx)
                    mx = d;
            }
        }
        CHECK_EQ_U(results, N);     /* every follower got the result */
        CHECK_EQ_U(owners, 0);      /* and the owner was the only owner */
        last[round] = mx;
        coord_flight_clear(&f);
        coord_ping(owner);          /* runs on_completed first */
        CHECK_EQ_U(delivered, N);
    }
    qsort(last, ROUNDS, sizeof last[0], cmp_u64);
    qsort(all, nall, sizeof all[0], cmp_u64);
    fprintf(stderr, "fan-out, 1 owner + %d followers, %d rounds: complete -> last "
            "follower answered: p50 %.2f ms, p99 %.2f ms (min %.2f, max %.2f); "
            "complete -> each follower: p50 %.2f ms, p99 %.2f ms\n",
            N, ROUNDS, pct_ms(last, ROUNDS, 0.5), pct_ms(last, ROUNDS, 0.99),
            pct_ms(last, ROUNDS, 0), pct_ms(last, ROUNDS, 1),
            pct_ms(all, nall, 0.5), pct_ms(all, nall, 0.99));
    for (int i = 0; i < N; i++)
        coord_close(fl[i].c);
    coord_close(owner);
    free(fl);
    free(pf);
    free(all);
    stop();
}

/* Logout during a request through libcoord and coordctl: `coordctl purge`
 * ends the running flight (fenced 1), the owner's late complete is
 * COORD_EFENCED with coord_error_reason "purged", a follower's join fails
 * COORD_EABORTED, reason "purged"; no record is left. */
struct async_join { int status; bool done; };

static void on_join_done(coord_t *c, int status, coord_flight *f, void *ud)
{
    (void)c;
    (void)f;
    struct async_join *aj = ud;
    aj->status = status;
    aj->done = true;
}

static void test_purge_fences_flight(void)
{
    start();
    coord_t *o = lib_in("sess"), *f = lib_in("sess");
    coord_flight fo = { 0 }, ff = { 0 };
    CHECK_EQ(coord_flight_join(o, S("me"), NULL, &fo), 0);
    REQUIRE(fo.role == COORD_FLIGHT_OWNER);
    struct async_join aj = { 0 };
    CHECK_EQ(coord_flight_join_async(f, S("me"), NULL, on_join_done, &aj, NULL), 0);
    CHECK_EQ(coord_ping(f), 0);
    CHECK(!aj.done);
    char *out = NULL;
    const char *pp[] = { "purge", NULL };
    CHECK_EQ_U(ctl_run("sess", pp, &out), 0);
    CHECK(out && strcmp(out, "deleted 0\nfenced 1\n") == 0);
    free(out);
    for (int i = 0; i < 10 && !aj.done && coord_wait(f, T / 10) >= 0; i++)
        ;
    CHECK(aj.done && aj.status == COORD_EABORTED);
    CHECK_STR(coord_error_reason(f), "purged");
    CHECK_EQ(coord_flight_complete(o, fo.flight, fo.fence, S("private"), 60000, NULL),
             COORD_EFENCED);
    CHECK_STR(coord_error_reason(o), "purged");
    coord_record rec = { 0 };
    CHECK_EQ(coord_record_get(o, S("me"), &rec), COORD_ENOT_FOUND);
    CHECK_STR(coord_error_reason(o), "");
    coord_record_clear(&rec);
    uint64_t deleted = 9, fenced = 9;
    CHECK_EQ(coord_record_purge_counts(o, NULL, 0, &deleted, &fenced), 0);
    CHECK_EQ_U(deleted, 0);
    CHECK_EQ_U(fenced, 0);
    coord_flight_clear(&fo);
    coord_flight_clear(&ff);
    coord_close(o);
    coord_close(f);
    stop();
}

int main(int argc, char **argv)
{
    static const struct test_case tests[] = {
        { "storm_50", test_storm_50 },
        { "storm_50_exit3", test_storm_50_exit3 },
        { "keep", test_keep },
        { "owner_killed", test_owner_killed },
        { "ttl_takeover", test_ttl_takeover },
        { "coord_once_threads", test_coord_once_threads },
        { "cancel_and_records", test_cancel_and_records },
        { "purge_fences_flight", test_purge_fences_flight },
        { "ctl_tables", test_ctl_tables },
        { "fanout_1000", test_fanout_1000 },
        { NULL, NULL },
    };
    return run_tests(argc, argv, tests);
}
