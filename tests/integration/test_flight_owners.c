/* test_flight_owners.c - who runs a flight, through a real broker: the
 * -flights events and the completion records name the owner (client, pid,
 * instance), its start and deadline, its version, a failure's code; one
 * info log line and one stats counter per transition (a follower's
 * timeout included); a fresh join superseding a running owner (supersede,
 * priority), whose late result is FENCED while its followers get the new
 * owner's; and two versions of the client code racing on one key (a
 * joiner of another version follows, or runs its own flight, and is not
 * served the other version's record). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "harness.h"
#include "proc.h"

#define T 5000                  /* ms to wait for what must happen */

static struct broker_proc bp;
static coord_msg m;

static void start(void)
{
    static const char *const args[] = { "--log-level", "info", NULL };
    start_or_exit(&bp, args);
}
/* The test's clients, closed when it stops. */
static struct rcl *opened[16];

static void stop(void)
{
    for (size_t i = 0; i < sizeof opened / sizeof opened[0]; i++) {
        rcl_close(opened[i]);
        opened[i] = NULL;
    }
    stop_and_clean(&bp);
}

/* Closes c now (a client cut off). */
static void drop(struct rcl *c)
{
    for (size_t i = 0; i < sizeof opened / sizeof opened[0]; i++)
        if (opened[i] == c)
            opened[i] = NULL;
    rcl_close(c);
}

static bool role_is(const char *role) { return msg_str_is(&m, "role", role, strlen(role)); }
static bool str_is(const char *key, const char *s) { return msg_str_is(&m, key, s, strlen(s)); }

/* A client that says who it is: client name, pid, instance. */
static struct rcl *client_as(const char *client, uint64_t pid, const char *instance)
{
    struct rcl *c = rcl_connect(bp.sock);
    if (!c)
        exit(1);
    coord_enc *e = rcl_begin(c, "hello", 1);
    coord_enc_kv_uint(e, "proto", 1);
    coord_enc_kv_cstr(e, "client", client);
    coord_enc_kv_uint(e, "pid", pid);
    coord_enc_kv_cstr(e, "instance", instance);
    if (rcl_send(c) != 0 || rcl_reply(c, 1, T, &m) != 0 || !msg_ok(&m)) {
        fprintf(stderr, "hello of %s failed\n", client);
        exit(1);
    }
    for (size_t i = 0; i < sizeof opened / sizeof opened[0]; i++)
        if (!opened[i]) {
            opened[i] = c;
            return c;
        }
    fprintf(stderr, "too many clients\n");
    exit(1);
}

struct join {
    const char *key, *version, *other;  /* NULL: not sent */
    uint64_t ttl, wait_ms, max_age, priority;
    bool supersede;
};

static void join(struct rcl *c, uint64_t rid, struct join j)
{
    coord_enc *e = rcl_begin(c, "flight.join", rid);
    coord_enc_kv_cstr(e, "key", j.key);
    if (j.version)
        coord_enc_kv_cstr(e, "version", j.version);
    if (j.other)
        coord_enc_kv_cstr(e, "other_version", j.other);
    if (j.ttl)
        coord_enc_kv_uint(e, "owner_ttl_ms", j.ttl);
    if (j.wait_ms)
        coord_enc_kv_uint(e, "wait_ms", j.wait_ms);
    if (j.max_age)
        coord_enc_kv_uint(e, "max_age_ms", j.max_age);
    if (j.priority)
        coord_enc_kv_uint(e, "priority", j.priority);
    if (j.supersede)
        coord_enc_kv_bool(e, "supersede", true);
    rcl_send(c);
}

/* The join is waiting (a follower): nothing came back. */
static bool waits(struct rcl *c)
{
    return rcl_sync(c) == 0 && rcl_queued(c) == 0;
}

static int complete(struct rcl *c, uint64_t rid, uint64_t flight, uint64_t fence,
                    const char *result, uint64_t keep_ms)
{
    coord_enc *e = rcl_begin(c, "flight.complete", rid);
    coord_enc_kv_uint(e, "flight", flight);
    coord_enc_kv_uint(e, "fence", fence);
    coord_enc_kv_bin(e, "result", result, strlen(result));
    coord_enc_kv_uint(e, "keep_ms", keep_ms);
    rcl_send(c);
    return rcl_reply(c, rid, T, &m);
}

static int subscribe(struct rcl *c, uint64_t rid, const char *ch)
{
    coord_enc *e = rcl_begin(c, "sub.subscribe", rid);
    coord_enc_kv_cstr(e, "channel", ch);
    rcl_send(c);
    return rcl_reply(c, rid, T, &m);
}

/* The next -flights event whose what is `what` (earlier ones skipped). */
static bool next_what(struct rcl *w, const char *what)
{
    while (rcl_event(w, "lifecycle", T, &m) == 0)
        if (str_is("what", what))
            return true;
    return false;
}

static uint64_t stat_of(struct rcl *c, const char *key) { return rcl_stat(c, key); }

/* The owner, its deadline and a failure's code travel on -flights; the
 * record names who wrote it and its version. */
static void test_events_and_records_name_the_owner(void)
{
    start();
    struct rcl *w = client_as("watcher", 10, "w-1");
    REQUIRE(subscribe(w, 2, "-flights") == 0);
    struct rcl *a = client_as("tab-alpha", 4242, "inst-a1");
    struct rcl *b = client_as("tab-beta", 4343, "inst-b1");

    join(a, 2, (struct join){ .key = "api/me", .version = "bundle-7", .ttl = 60000 });
    REQUIRE(rcl_reply(a, 2, T, &m) == 0 && role_is("owner"));
    uint64_t fl = msg_uint(&m, "flight"), fe = msg_uint(&m, "fence");
    REQUIRE(next_what(w, "started"));
    CHECK(str_is("key", "api/me") && msg_uint(&m, "flight") == fl && msg_uint(&m, "fence") == fe);
    CHECK(str_is("client", "tab-alpha") && str_is("instance", "inst-a1"));
    CHECK_EQ_U(msg_uint(&m, "pid"), 4242);
    CHECK(str_is("version", "bundle-7"));
    uint64_t started = msg_uint(&m, "started_ms"), deadline = msg_uint(&m, "deadline_ms");
    CHECK(started > 0 && deadline == started + 60000);
    CHECK(msg_uint(&m, "at_ms") >= started);
    CHECK(!msg_has(&m, "result"));

    /* completed, with a record naming the owner */
    join(b, 2, (struct join){ .key = "api/me" });
    REQUIRE(waits(b));
    REQUIRE(complete(a, 3, fl, fe, "profile", 600000) == 0 && msg_ok(&m));
    REQUIRE(rcl_reply(b, 2, T, &m) == 0 && role_is("result"));
    REQUIRE(next_what(w, "completed"));
    CHECK(str_is("client", "tab-alpha") && msg_uint(&m, "pid") == 4242);
    CHECK(msg_has(&m, "duration_ms") && !msg_has(&m, "code"));
    coord_enc *e = rcl_begin(b, "record.get", 3);
    coord_enc_kv_cstr(e, "key", "api/me");
    rcl_send(b);
    REQUIRE(rcl_reply(b, 3, T, &m) == 0 && msg_ok(&m));
    CHECK(str_is("client", "tab-alpha") && str_is("instance", "inst-a1"));
    CHECK_EQ_U(msg_uint(&m, "pid"), 4242);
    CHECK(str_is("version", "bundle-7"));
    e = rcl_begin(b, "record.list", 4);
    coord_enc_kv_cstr(e, "prefix", "api/");
    rcl_send(b);
    REQUIRE(rcl_reply(b, 4, T, &m) == 0 && msg_ok(&m));
    const msgpack_object_map *r0 = map_at(msg_array(&m, "records"), 0);
    CHECK_EQ_U(map_uint(r0, "pid"), 4242);
    CHECK(map_str_is(r0, "version", "bundle-7", 8));

    /* failed: the code and retryable (the message stays out) */
    join(b, 5, (struct join){ .key = "api/search" });
    REQUIRE(rcl_reply(b, 5, T, &m) == 0 && role_is("owner"));
    fl = msg_uint(&m, "flight");
    fe = msg_uint(&m, "fence");
    e = rcl_begin(b, "flight.fail", 6);
    coord_enc_kv_uint(e, "flight", fl);
    coord_enc_kv_uint(e, "fence", fe);
    coord_enc_key(e, "error");
    coord_enc_map_begin(e);
    coord_enc_kv_cstr(e, "code", "HTTP_503");
    coord_enc_kv_cstr(e, "message", "upstream down");
    coord_enc_map_end(e);
    coord_enc_kv_bool(e, "retryable", true);
    rcl_send(b);
    REQUIRE(rcl_reply(b, 6, T, &m) == 0 && msg_ok(&m));
    REQUIRE(next_what(w, "failed"));
    CHECK(str_is("code", "HTTP_503") && msg_bool(&m, "retryable"));
    CHECK(str_is("client", "tab-beta") && msg_uint(&m, "pid") == 4343);
    CHECK(!msg_has(&m, "message"));
    stop();
}

/* One info line per transition, a counter per kind, a follower's timeout
 * among them; the owner/follower ratio. */
static void test_transitions_logged_and_counted(void)
{
    start();
    struct rcl *w = client_as("watcher", 10, "w-1");
    REQUIRE(subscribe(w, 2, "-flights") == 0);
    struct rcl *a = client_as("tab-alpha", 4242, "inst-a1");
    struct rcl *b = client_as("tab-beta", 4343, "inst-b1");
    struct rcl *c = client_as("tab-gamma", 4444, "inst-c1");
    join(a, 2, (struct join){ .key = "report/7" });
    REQUIRE(rcl_reply(a, 2, T, &m) == 0 && role_is("owner"));
    uint64_t fl = msg_uint(&m, "flight"), fe = msg_uint(&m, "fence");
    join(b, 2, (struct join){ .key = "report/7", .wait_ms = 50 });
    REQUIRE(rcl_reply(b, 2, T, &m) == 0 && msg_code_is(&m, "TIMEOUT"));
    REQUIRE(next_what(w, "follower_timeout"));
    CHECK(str_is("client", "tab-alpha"));        /* the owner it waited for */
    CHECK(msg_has(&m, "wait_ms") && msg_uint(&m, "wait_ms") >= 50);
    join(c, 2, (struct join){ .key = "report/7" });
    REQUIRE(waits(c));
    join(b, 3, (struct join){ .key = "report/7" });
    REQUIRE(waits(b));
    REQUIRE(complete(a, 3, fl, fe, "pdf", 0) == 0 && msg_uint(&m, "delivered") == 2);
    REQUIRE(rcl_reply(c, 2, T, &m) == 0 && role_is("result"));
    REQUIRE(rcl_reply(b, 3, T, &m) == 0 && role_is("result"));
    REQUIRE(complete(a, 4, fl, fe, "late", 0) == 0 && msg_code_is(&m, "FENCED"));
    CHECK_EQ_U(stat_of(a, "follower_timeouts"), 1);
    CHECK_EQ_U(stat_of(a, "flights_started"), 1);
    CHECK_EQ_U(stat_of(a, "flights_completed"), 1);
    CHECK_EQ_U(stat_of(a, "fenced"), 1);
    CHECK_EQ_U(stat_of(a, "flights_superseded"), 0);
    /* 3 joined as followers (one timed out) of 1 owner run */
    CHECK_EQ_U(stat_of(a, "followers_per_100_owners"), 300);

    size_t n;
    char *log = slurp(bp.log, &n);
    REQUIRE(log);
    const char *kinds[] = { "what=started ", "what=follower_timeout ", "what=completed ",
                            "what=fenced ", NULL };
    for (int i = 0; kinds[i]; i++) {
        const char *line = strstr(log, kinds[i]);
        CHECK_MSG(line != NULL, "log has no %s line", kinds[i]);
        if (!line)
            continue;
        const char *bol = line;
        while (bol > log && bol[-1] != '\n')
            bol--;
        const char *eol = strchr(line, '\n');
        char one[1024];
        snprintf(one, sizeof one, "%.*s", (int)(eol ? eol - bol : (long)strlen(bol)), bol);
        CHECK_MSG(strstr(one, "info") != NULL, "not at info: %s", one);
        CHECK_MSG(strstr(one, "owner_pid=4242") != NULL && strstr(one, "fence=") != NULL,
                  "no owner or fence: %s", one);
        CHECK_MSG(strstr(one, "tab-alpha") == NULL, "client name in the clear: %s", one);
    }
    const char *to = strstr(log, "what=follower_timeout ");
    CHECK(to && strstr(to, "wait_ms=") != NULL);
    const char *done = strstr(log, "what=completed ");
    CHECK(done && strstr(done, " ms=") != NULL);
    free(log);
    stop();
}

/* Note 002 §15: a fresh request supersedes an owner whose work is known
 * stale. */
static void test_supersede(void)
{
    start();
    struct rcl *w = client_as("watcher", 10, "w-1");
    REQUIRE(subscribe(w, 2, "-flights") == 0);
    struct rcl *a = client_as("tab-alpha", 1, "ia"), *b = client_as("tab-beta", 2, "ib"),
               *c = client_as("tab-gamma", 3, "ic"), *d = client_as("tab-delta", 4, "id"),
               *e = client_as("tab-eps", 5, "ie");
    join(a, 2, (struct join){ .key = "feed" });
    REQUIRE(rcl_reply(a, 2, T, &m) == 0 && role_is("owner"));
    uint64_t fl = msg_uint(&m, "flight"), fa = msg_uint(&m, "fence");
    join(b, 2, (struct join){ .key = "feed" });
    REQUIRE(waits(b));
    /* c knows a's work is stale */
    join(c, 2, (struct join){ .key = "feed", .supersede = true });
    REQUIRE(rcl_reply(c, 2, T, &m) == 0 && role_is("owner"));
    uint64_t fc = msg_uint(&m, "fence");
    CHECK_EQ_U(msg_uint(&m, "flight"), fl);
    CHECK(fc > fa);
    CHECK_EQ_U(msg_uint(&m, "superseded"), fa);
    REQUIRE(rcl_event(a, "flight.abort", T, &m) == 0);
    CHECK(str_is("reason", "superseded") && msg_uint(&m, "flight") == fl);
    REQUIRE(next_what(w, "superseded"));
    CHECK(str_is("client", "tab-alpha") && msg_uint(&m, "fence") == fa);
    CHECK(str_is("reason", "superseded"));
    REQUIRE(next_what(w, "started"));
    CHECK(str_is("client", "tab-gamma") && msg_uint(&m, "fence") == fc);
    /* a's late result is refused; b still waits */
    REQUIRE(complete(a, 3, fl, fa, "stale", 600000) == 0);
    CHECK(msg_code_is(&m, "FENCED") && str_is("reason", "superseded"));
    CHECK(waits(b));
    /* a higher priority supersedes c; the same priority follows */
    join(d, 2, (struct join){ .key = "feed", .priority = 5 });
    REQUIRE(rcl_reply(d, 2, T, &m) == 0 && role_is("owner"));
    uint64_t fd = msg_uint(&m, "fence");
    CHECK(fd > fc && msg_uint(&m, "superseded") == fc);
    REQUIRE(rcl_event(c, "flight.abort", T, &m) == 0 && str_is("reason", "superseded"));
    join(e, 2, (struct join){ .key = "feed", .priority = 5 });
    REQUIRE(waits(e));
    REQUIRE(complete(c, 3, fl, fc, "also stale", 0) == 0 && msg_code_is(&m, "FENCED"));
    CHECK(str_is("reason", "superseded"));
    /* a, superseded twice over (a by c, c by d), still hears why */
    REQUIRE(complete(a, 4, fl, fa, "older", 0) == 0);
    CHECK(msg_code_is(&m, "FENCED") && str_is("reason", "superseded"));
    /* d's result reaches the old flight's followers, and is kept */
    REQUIRE(complete(d, 3, fl, fd, "fresh", 600000) == 0);
    CHECK(msg_ok(&m) && msg_uint(&m, "delivered") == 2);
    REQUIRE(rcl_reply(b, 2, T, &m) == 0 && role_is("result"));
    CHECK(msg_bin_is(&m, "result", "fresh", 5) && msg_uint(&m, "fence") == fd);
    REQUIRE(rcl_reply(e, 2, T, &m) == 0 && role_is("result"));
    CHECK(msg_bin_is(&m, "result", "fresh", 5));
    coord_enc *en = rcl_begin(b, "record.get", 3);
    coord_enc_kv_cstr(en, "key", "feed");
    rcl_send(b);
    REQUIRE(rcl_reply(b, 3, T, &m) == 0 && msg_bin_is(&m, "result", "fresh", 5));
    CHECK(str_is("client", "tab-delta"));
    CHECK_EQ_U(rcl_stat(b, "flights_superseded"), 2);
    /* supersede with nothing running is an ordinary join */
    join(b, 4, (struct join){ .key = "other", .supersede = true });
    REQUIRE(rcl_reply(b, 4, T, &m) == 0 && role_is("owner") && !msg_has(&m, "superseded"));
    /* the superseding owner cut off: a follower takes over as usual */
    join(c, 4, (struct join){ .key = "feed2" });
    REQUIRE(rcl_reply(c, 4, T, &m) == 0 && role_is("owner"));
    join(e, 4, (struct join){ .key = "feed2" });
    REQUIRE(waits(e));
    join(d, 4, (struct join){ .key = "feed2", .supersede = true });
    REQUIRE(rcl_reply(d, 4, T, &m) == 0 && role_is("owner"));
    drop(d);
    REQUIRE(rcl_reply(e, 4, T, &m) == 0 && role_is("owner"));
    stop();
}

/* Note 002 §21: a new bundle version while a request is in flight.  The
 * old tab runs v1, the new one v2, both on one key. */
static void test_two_versions_race(void)
{
    start();
    struct rcl *old1 = client_as("tab-old", 1, "o1"), *old2 = client_as("tab-old", 2, "o2"),
               *new1 = client_as("tab-new", 3, "n1"), *new2 = client_as("tab-new", 4, "n2"),
               *compat = client_as("tab-new", 5, "n3");
    join(old1, 2, (struct join){ .key = "cfg", .version = "v1" });
    REQUIRE(rcl_reply(old1, 2, T, &m) == 0 && role_is("owner"));
    uint64_t f1 = msg_uint(&m, "flight"), e1 = msg_uint(&m, "fence");
    /* v2 that wants its own: a flight of its own, at once */
    join(new1, 2, (struct join){ .key = "cfg", .version = "v2", .other = "own" });
    REQUIRE(rcl_reply(new1, 2, T, &m) == 0 && role_is("owner"));
    uint64_t f2 = msg_uint(&m, "flight"), e2 = msg_uint(&m, "fence");
    CHECK(str_is("version", "v2"));
    CHECK(f2 != f1);
    /* the next v2 follows the v2 flight, whatever its policy */
    join(new2, 2, (struct join){ .key = "cfg", .version = "v2" });
    REQUIRE(waits(new2));
    /* a v3 that is compatible follows the key's first flight (v1) */
    join(compat, 2, (struct join){ .key = "cfg", .version = "v3", .other = "follow" });
    REQUIRE(waits(compat));
    /* an old tab of v1 follows v1 */
    join(old2, 2, (struct join){ .key = "cfg", .version = "v1", .other = "own" });
    REQUIRE(waits(old2));
    rcl_begin(old1, "flight.list", 3);
    rcl_send(old1);
    REQUIRE(rcl_reply(old1, 3, T, &m) == 0);
    CHECK(msg_has(&m, "flights") && map_has(map_at(msg_array(&m, "flights"), 1), "flight"));

    REQUIRE(complete(old1, 4, f1, e1, "config-v1", 600000) == 0);
    CHECK(msg_uint(&m, "delivered") == 2);
    REQUIRE(rcl_reply(compat, 2, T, &m) == 0 && msg_bin_is(&m, "result", "config-v1", 9));
    REQUIRE(rcl_reply(old2, 2, T, &m) == 0 && msg_bin_is(&m, "result", "config-v1", 9));
    /* the v1 record is not served to a v2 that wants its own version: it
     * follows the running v2 flight */
    join(compat, 3, (struct join){ .key = "cfg", .version = "v2", .other = "own",
                                   .max_age = 600000 });
    REQUIRE(waits(compat));
    REQUIRE(complete(new1, 3, f2, e2, "config-v2", 600000) == 0);
    CHECK(msg_uint(&m, "delivered") == 2);
    REQUIRE(rcl_reply(new2, 2, T, &m) == 0 && msg_bin_is(&m, "result", "config-v2", 9));
    REQUIRE(rcl_reply(compat, 3, T, &m) == 0 && msg_bin_is(&m, "result", "config-v2", 9));
    /* now the record is v2's: a compatible old tab is served it ... */
    join(old2, 3, (struct join){ .key = "cfg", .version = "v1", .max_age = 600000 });
    REQUIRE(rcl_reply(old2, 3, T, &m) == 0 && role_is("result"));
    CHECK(msg_bin_is(&m, "result", "config-v2", 9) && str_is("source", "record"));
    /* ... one wanting v1 runs its own */
    join(old1, 5, (struct join){ .key = "cfg", .version = "v1", .other = "own",
                                 .max_age = 600000 });
    REQUIRE(rcl_reply(old1, 5, T, &m) == 0 && role_is("owner"));
    uint64_t f3 = msg_uint(&m, "flight"), e3 = msg_uint(&m, "fence");
    REQUIRE(complete(old1, 6, f3, e3, "config-v1b", 0) == 0 && msg_ok(&m));
    /* a version over the limit is refused; so is a policy not known */
    static char big[100];
    memset(big, 'v', sizeof big - 1);
    join(new1, 4, (struct join){ .key = "cfg", .version = big });
    REQUIRE(rcl_reply(new1, 4, T, &m) == 0 && msg_code_is(&m, "INVALID_OPTIONS"));
    join(new1, 5, (struct join){ .key = "cfg", .other = "maybe" });
    REQUIRE(rcl_reply(new1, 5, T, &m) == 0 && msg_code_is(&m, "INVALID_OPTIONS"));
    /* a v2 owner cut off mid-flight: its follower of v2 takes over; then
     * its own flight is gone from the table */
    join(new1, 6, (struct join){ .key = "k2", .version = "v1" });
    REQUIRE(rcl_reply(new1, 6, T, &m) == 0 && role_is("owner"));
    join(new2, 6, (struct join){ .key = "k2", .version = "v2", .other = "own" });
    REQUIRE(rcl_reply(new2, 6, T, &m) == 0 && role_is("owner"));
    uint64_t fk = msg_uint(&m, "flight");
    join(compat, 6, (struct join){ .key = "k2", .version = "v2", .other = "own" });
    REQUIRE(waits(compat));
    drop(new2);
    REQUIRE(rcl_reply(compat, 6, T, &m) == 0 && role_is("owner"));
    CHECK_EQ_U(msg_uint(&m, "flight"), fk);
    struct rcl *w = client_as("watcher", 10, "w-1");
    REQUIRE(subscribe(w, 2, "-flights") == 0);
    drop(compat);
    REQUIRE(next_what(w, "owner_lost"));
    CHECK(str_is("reason", "disconnect") && str_is("version", "v2"));
    join(old1, 7, (struct join){ .key = "k2", .version = "v2", .other = "own" });
    REQUIRE(rcl_reply(old1, 7, T, &m) == 0 && role_is("owner"));
    CHECK(msg_uint(&m, "flight") != fk);
    stop();
}

int main(int argc, char **argv)
{
    coord_msg_init(&m);
    static const struct test_case tests[] = {
        { "events_and_records_name_the_owner", test_events_and_records_name_the_owner },
        { "transitions_logged_and_counted", test_transitions_logged_and_counted },
        { "supersede", test_supersede },
        { "two_versions_race", test_two_versions_race },
        { NULL, NULL },
    };
    int rc = run_tests(argc, argv, tests);
    coord_msg_destroy(&m);
    return rc;
}
