/* test_leader_policies.c - leadership's policies through a real broker:
 * descriptors (define/describe, merge, nil), protocol pinning with the
 * ratchet and force, steal policies, incident takeover of a disabled
 * workstream, max hold (drain, then fence), draining, rollout modes,
 * history (restart marks, the cap), outbox claims (reconcile after a leader dies, pending,
 * abandon), leader.check, generations above every earlier one after the
 * data dir is wiped, and bad input. */
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "harness.h"
#include "leader-util.h"

#define T 5000                  /* ms to wait for what must happen */

static struct broker_proc bp;
static coord_msg m;

static void start(void) { start_or_exit(&bp, NULL); }
static void stop(void) { stop_and_clean(&bp); }
static struct rcl *client(void) { return connect_or_exit(&bp, NULL); }

/* campaign options as words (leader-util.h): lease=, protocol=, incident=,
 * steal, if_available */
static uint64_t elect(struct rcl *c, uint64_t rid, const char *ws, const char *opts)
{
    return rcl_elect(c, rid, ws, opts, &m);
}

static int ws_gen(struct rcl *c, uint64_t rid, const char *op, const char *ws, uint64_t gen)
{
    return rcl_ws_gen(c, rid, op, ws, gen, T, &m);
}

/* op is "leader.claim", "leader.commit" (no key) or "leader.abandon" */
static int outbox(struct rcl *c, uint64_t rid, const char *op, const char *ws, uint64_t gen,
                  const char *op_id)
{
    coord_enc *e = rcl_begin(c, op, rid);
    coord_enc_kv_cstr(e, "workstream", ws);
    coord_enc_kv_uint(e, "generation", gen);
    coord_enc_kv_cstr(e, "op_id", op_id);
    if (strcmp(op, "leader.abandon") == 0)
        coord_enc_kv_cstr(e, "reason", "never mind");
    rcl_send(c);
    return rcl_reply(c, rid, T, &m);
}

/* define with "k=v" words; v "nil" sends nil; max_hold_ms is a number */
static int define(struct rcl *c, uint64_t rid, const char *ws, const char *fields)
{
    coord_enc *e = rcl_begin(c, "leader.define", rid);
    coord_enc_kv_cstr(e, "workstream", ws);
    char buf[512];
    snprintf(buf, sizeof buf, "%s", fields ? fields : "");
    for (char *w = strtok(buf, " "); w; w = strtok(NULL, " ")) {
        char *eq = strchr(w, '=');
        if (!eq) {
            coord_enc_kv_bool(e, w, true);     /* force */
            continue;
        }
        *eq++ = 0;
        if (strcmp(eq, "nil") == 0) {
            coord_enc_key(e, w);
            coord_enc_nil(e);
        } else if (strcmp(w, "max_hold_ms") == 0) {
            coord_enc_kv_uint(e, w, strtoull(eq, NULL, 10));
        } else {
            coord_enc_kv_cstr(e, w, eq);
        }
    }
    rcl_send(c);
    return rcl_reply(c, rid, T, &m);
}

static const msgpack_object_map *desc(void) { return msg_map(&m, "descriptor"); }

static bool str_is(const msgpack_object_map *map, const char *key, const char *want)
{
    return map_str_is(map, key, S(want));
}

static bool is_nil(const msgpack_object_map *map, const char *key)
{
    for (uint32_t i = 0; i < map->size; i++) {
        const msgpack_object_kv *kv = &map->ptr[i];
        if (kv->key.type == MSGPACK_OBJECT_STR && kv->key.via.str.size == strlen(key) &&
            memcmp(kv->key.via.str.ptr, key, strlen(key)) == 0)
            return kv->val.type == MSGPACK_OBJECT_NIL;
    }
    return false;
}

static void test_define_describe(void)
{
    start();
    struct rcl *a = client();
    REQUIRE(ws_gen(a, 1, "leader.describe", "svc", 0) == 0);
    CHECK(msg_code_is(&m, "NOT_FOUND"));
    REQUIRE(define(a, 2, "svc", "protocol=sync@2 max_hold_ms=30000 steal=incident-only "
                                "mode=shadow fallback=SERVER_COORDINATED") == 0);
    REQUIRE(msg_ok(&m));
    const msgpack_object_map *d = desc();
    CHECK(str_is(d, "workstream", "svc"));
    CHECK(str_is(d, "protocol", "sync@2") && str_is(d, "pinned_protocol", "sync@2"));
    CHECK_EQ_U(map_uint(d, "max_hold_ms"), 30000);
    CHECK(str_is(d, "steal", "incident-only") && str_is(d, "mode", "shadow"));
    CHECK(str_is(d, "fallback", "SERVER_COORDINATED") && str_is(d, "canonical_fence", "local"));
    CHECK(map_uint(d, "defined_ms") > 1767225600000ull);
    /* omitted fields keep their value; nil goes back to the default */
    REQUIRE(define(a, 3, "svc", "mode=active fallback=nil max_hold_ms=nil") == 0);
    REQUIRE(msg_ok(&m));
    d = desc();
    CHECK(str_is(d, "mode", "active") && str_is(d, "steal", "incident-only"));
    CHECK(is_nil(d, "fallback") && map_uint(d, "max_hold_ms") == 0);
    CHECK(str_is(d, "protocol", "sync@2"));
    /* refused values change nothing */
    const char *bad[] = { "steal=sometimes", "mode=loud", "protocol=sync@0", "protocol=sync",
                          "protocol=s/y@1", "canonical_fence=etcd", "max_hold_ms=90000000000" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        REQUIRE(define(a, 10 + i, "svc", bad[i]) == 0);
        CHECK(msg_code_is(&m, "INVALID_OPTIONS"));
    }
    /* durable: a broker killed and started again describes the same */
    CHECK(WIFSIGNALED(broker_kill(&bp, SIGKILL)));
    rcl_close(a);
    REQUIRE(broker_start(&bp, NULL) == 0);
    a = client();
    REQUIRE(ws_gen(a, 1, "leader.describe", "svc", 0) == 0);
    REQUIRE(msg_ok(&m));
    d = desc();
    CHECK(str_is(d, "protocol", "sync@2") && str_is(d, "steal", "incident-only"));
    CHECK(str_is(d, "mode", "active"));
    /* scopes do not see each other's descriptors */
    struct rcl *o = connect_or_exit(&bp, "other");
    REQUIRE(ws_gen(o, 1, "leader.describe", "svc", 0) == 0);
    CHECK(msg_code_is(&m, "NOT_FOUND"));
    rcl_close(o);
    rcl_close(a);
    stop();
}

static void test_pinning(void)
{
    start();
    struct rcl *a = client(), *b = client(), *c = client();
    REQUIRE(define(a, 1, "app", "protocol=app@2") == 0 && msg_ok(&m));
    const char *refused[] = { NULL, "protocol=app@1", "protocol=other@9" };
    for (int i = 0; i < 3; i++) {
        rcl_campaign(b, 10 + i, "app", refused[i]);
        REQUIRE(rcl_reply(b, 10 + i, T, &m) == 0);
        CHECK(msg_code_is(&m, "PROTOCOL_PINNED"));
    }
    /* a newer version raises the pin (the ratchet) */
    uint64_t g = elect(b, 20, "app", "protocol=app@3");
    REQUIRE(g);
    REQUIRE(ws_gen(a, 2, "leader.describe", "app", 0) == 0);
    CHECK(str_is(desc(), "protocol", "app@2") && str_is(desc(), "pinned_protocol", "app@3"));
    /* app@3 waits while app@3 leads; app@4 steals; when app@4 resigns,
     * the waiting app@3 is refused at its turn (decided in the ledger) */
    rcl_campaign(c, 30, "app", "protocol=app@3");
    REQUIRE(rcl_sync(c) == 0);
    uint64_t g4 = elect(a, 3, "app", "protocol=app@4 steal");
    REQUIRE(g4 > g);
    REQUIRE(rcl_event(b, "leader.lost", T, &m) == 0);
    CHECK(msg_str_is(&m, "reason", S("stolen")));
    REQUIRE(ws_gen(a, 4, "leader.resign", "app", g4) == 0 && msg_ok(&m));
    REQUIRE(rcl_reply(c, 30, T, &m) == 0);
    CHECK(msg_code_is(&m, "PROTOCOL_PINNED"));
    /* a rollback cannot regain write authority: app@3 is refused */
    rcl_campaign(b, 40, "app", "protocol=app@3");
    REQUIRE(rcl_reply(b, 40, T, &m) == 0);
    CHECK(msg_code_is(&m, "PROTOCOL_PINNED"));
    /* lowering takes force */
    REQUIRE(define(a, 5, "app", "protocol=app@3") == 0);
    CHECK(msg_code_is(&m, "PROTOCOL_PINNED"));
    REQUIRE(define(a, 6, "app", "protocol=nil") == 0);
    CHECK(msg_code_is(&m, "PROTOCOL_PINNED"));
    REQUIRE(ws_gen(a, 7, "leader.describe", "app", 0) == 0);
    CHECK(str_is(desc(), "pinned_protocol", "app@4"));
    REQUIRE(define(a, 8, "app", "protocol=app@3 force") == 0 && msg_ok(&m));
    CHECK(str_is(desc(), "pinned_protocol", "app@3"));
    CHECK(elect(b, 41, "app", "protocol=app@3") > g4);
    rcl_close(a);
    rcl_close(b);
    rcl_close(c);
    stop();
}

static void test_steal_policy_and_incident(void)
{
    start();
    struct rcl *a = client(), *b = client(), *op = client();
    REQUIRE(define(op, 1, "pay", "steal=never") == 0 && msg_ok(&m));
    uint64_t g = elect(a, 1, "pay", NULL);
    REQUIRE(g);
    rcl_campaign(b, 2, "pay", "steal");
    REQUIRE(rcl_reply(b, 2, T, &m) == 0);
    CHECK(msg_code_is(&m, "POLICY"));
    rcl_campaign(b, 3, "pay", "steal incident=INC-1");
    REQUIRE(rcl_reply(b, 3, T, &m) == 0);
    CHECK(msg_code_is(&m, "POLICY"));
    REQUIRE(define(op, 2, "pay", "steal=incident-only") == 0 && msg_ok(&m));
    rcl_campaign(b, 4, "pay", "steal");
    REQUIRE(rcl_reply(b, 4, T, &m) == 0);
    CHECK(msg_code_is(&m, "POLICY"));
    uint64_t gi = elect(b, 5, "pay", "steal incident=INC-42");
    REQUIRE(gi > g);
    REQUIRE(rcl_event(a, "leader.lost", T, &m) == 0);
    CHECK(msg_str_is(&m, "reason", S("incident")) && msg_str_is(&m, "incident", S("INC-42")));
    CHECK_EQ_U(msg_uint(&m, "generation"), g);
    REQUIRE(outbox(a, 6, "leader.claim", "pay", g, "op-1") == 0);
    CHECK(msg_code_is(&m, "FENCED"));
    /* history: the broken term ends "incident", the incident's term carries it */
    coord_enc *e = rcl_begin(op, "leader.history", 3);
    coord_enc_kv_cstr(e, "workstream", "pay");
    rcl_send(op);
    REQUIRE(rcl_reply(op, 3, T, &m) == 0 && msg_ok(&m));
    const msgpack_object_array *terms = msg_array(&m, "terms");
    REQUIRE(terms->size == 2);
    const msgpack_object_map *t0 = map_at(terms, 0), *t1 = map_at(terms, 1);
    CHECK_EQ_U(map_uint(t0, "generation"), gi);
    CHECK(str_is(t0, "incident", "INC-42") && !map_has(t0, "reason"));
    CHECK_EQ_U(map_uint(t0, "ended_ms"), 0);
    CHECK_EQ_U(map_uint(t1, "generation"), g);
    CHECK(str_is(t1, "reason", "incident") && map_uint(t1, "ended_ms") >= map_uint(t1, "elected_ms"));
    REQUIRE(ws_gen(b, 7, "leader.resign", "pay", gi) == 0 && msg_ok(&m));

    /* incident takeover: a disabled workstream takes only incident campaigns */
    uint64_t g2 = elect(a, 8, "pay", NULL);
    REQUIRE(g2);
    REQUIRE(ws_gen(op, 4, "leader.disable", "pay", 0) == 0 && msg_ok(&m));
    REQUIRE(rcl_event(a, "leader.lost", T, &m) == 0);
    CHECK(msg_str_is(&m, "reason", S("disabled")));
    rcl_campaign(b, 9, "pay", NULL);
    REQUIRE(rcl_reply(b, 9, T, &m) == 0);
    CHECK(msg_code_is(&m, "DISABLED"));
    uint64_t g3 = elect(b, 10, "pay", "incident=INC-43");
    REQUIRE(g3 > g2);
    REQUIRE(ws_gen(op, 5, "leader.info", "pay", 0) == 0 && msg_ok(&m));
    CHECK(msg_str_is(&m, "state", S("leading")) && msg_bool(&m, "disabled"));
    CHECK(msg_str_is(&m, "incident", S("INC-43")));
    rcl_campaign(a, 11, "pay", NULL);
    REQUIRE(rcl_reply(a, 11, T, &m) == 0);
    CHECK(msg_code_is(&m, "DISABLED"));
    REQUIRE(outbox(b, 12, "leader.claim", "pay", g3, "op-9") == 0);
    CHECK(msg_ok(&m) && msg_bool(&m, "claimed"));
    rcl_close(a);
    rcl_close(b);
    rcl_close(op);
    stop();
}

static void test_max_hold(void)
{
    start();
    struct rcl *a = client(), *b = client(), *op = client();
    REQUIRE(define(op, 1, "mh", "max_hold_ms=400") == 0 && msg_ok(&m));
    rcl_campaign(a, 1, "mh", "lease=60000");
    REQUIRE(rcl_reply(a, 1, T, &m) == 0 && msg_bool(&m, "granted"));
    uint64_t g = msg_uint(&m, "generation");
    CHECK_EQ_U(msg_uint(&m, "lease_ms"), 400);          /* capped */
    uint64_t t0 = now_ms();
    rcl_campaign(b, 2, "mh", NULL);                          /* waits */
    REQUIRE(rcl_sync(b) == 0);
    /* the leader keeps renewing: it is drained, then fenced for max hold
     * (not expired) */
    uint64_t rid = 10, drained_at = 0;
    bool lost = false;
    while (!lost && now_ms() - t0 < 5000) {
        REQUIRE(ws_gen(a, rid++, "leader.renew", "mh", g) == 0);
        if (!msg_ok(&m)) {              /* fenced between two checks */
            CHECK(msg_code_is(&m, "FENCED") && drained_at);
            REQUIRE(rcl_event(a, "leader.lost", T, &m) == 0);
            CHECK(msg_str_is(&m, "reason", S("max_hold")));
            lost = true;
            break;
        }
        CHECK(msg_uint(&m, "lease_ms") <= 400);
        if (!drained_at && rcl_event(a, "leader.drain", 100, &m) == 0) {
            drained_at = now_ms();
            CHECK(msg_str_is(&m, "reason", S("max_hold")) && msg_uint(&m, "generation") == g);
            REQUIRE(ws_gen(op, 2, "leader.info", "mh", 0) == 0);
            CHECK(msg_str_is(&m, "state", S("draining")) && msg_str_is(&m, "drain_reason", S("max_hold")));
        } else if (drained_at && rcl_event(a, "leader.lost", 100, &m) == 0) {
            CHECK(msg_str_is(&m, "reason", S("max_hold")));
            lost = true;
        }
    }
    REQUIRE(drained_at && lost);
    CHECK(drained_at - t0 >= 390);
    REQUIRE(rcl_reply(b, 2, T, &m) == 0 && msg_bool(&m, "granted"));
    uint64_t gb = msg_uint(&m, "generation");
    CHECK(gb > g);
    CHECK(now_ms() - drained_at >= 350);                 /* one (capped) lease later */
    CHECK_EQ_U(rcl_stat(op, "terms_reached_max_hold"), 1);
    CHECK_EQ_U(rcl_stat(op, "terms_fenced_max_hold"), 1);
    CHECK_EQ_U(rcl_stat(op, "terms_over_max_hold"), 0);
    /* a leader that resigns when asked is not fenced (it renews until then) */
    rcl_campaign(a, 40, "mh", NULL);
    REQUIRE(rcl_sync(a) == 0);
    bool asked = false;
    for (rid = 50; !asked && rid < 150; rid++) {
        REQUIRE(ws_gen(b, rid, "leader.renew", "mh", gb) == 0 && msg_ok(&m));
        asked = rcl_event(b, "leader.drain", 100, &m) == 0;
    }
    REQUIRE(asked);
    REQUIRE(ws_gen(b, 41, "leader.resign", "mh", gb) == 0 && msg_ok(&m));
    REQUIRE(rcl_reply(a, 40, T, &m) == 0 && msg_bool(&m, "granted"));
    CHECK_EQ_U(rcl_stat(op, "terms_reached_max_hold"), 2);
    CHECK_EQ_U(rcl_stat(op, "terms_fenced_max_hold"), 1);
    CHECK_EQ_U(rcl_stat(op, "terms_over_max_hold"), 0);
    CHECK_EQ_U(rcl_stat(op, "terms_max_hold"), 3);
    rcl_close(a);
    rcl_close(b);
    rcl_close(op);
    stop();
}

/* Max hold bites when nobody waits: a lone leader that keeps renewing is
 * drained at max hold and fenced one lease later; it campaigns again and
 * gets a higher generation. */
static void test_max_hold_alone(void)
{
    start();
    struct rcl *a = client(), *op = client();
    REQUIRE(define(op, 1, "lone", "max_hold_ms=400") == 0 && msg_ok(&m));
    uint64_t t0 = now_ms();
    rcl_campaign(a, 1, "lone", "lease=60000");
    REQUIRE(rcl_reply(a, 1, T, &m) == 0 && msg_bool(&m, "granted"));
    uint64_t g = msg_uint(&m, "generation");
    CHECK_EQ_U(msg_uint(&m, "lease_ms"), 400);
    uint64_t rid = 10, drained_at = 0, lost_at = 0;
    while (!lost_at && now_ms() - t0 < 5000) {
        REQUIRE(ws_gen(a, rid++, "leader.renew", "lone", g) == 0);
        if (!msg_ok(&m)) {              /* fenced between two checks */
            CHECK(msg_code_is(&m, "FENCED") && drained_at);
            REQUIRE(rcl_event(a, "leader.lost", T, &m) == 0);
            CHECK(msg_str_is(&m, "reason", S("max_hold")));
            lost_at = now_ms();
            break;
        }
        if (!drained_at && rcl_event(a, "leader.drain", 100, &m) == 0) {
            drained_at = now_ms();
            CHECK(msg_str_is(&m, "reason", S("max_hold")) && msg_uint(&m, "generation") == g);
        } else if (drained_at && rcl_event(a, "leader.lost", 100, &m) == 0) {
            CHECK(msg_str_is(&m, "reason", S("max_hold")) && msg_uint(&m, "generation") == g);
            lost_at = now_ms();
        }
    }
    REQUIRE(drained_at && lost_at);
    CHECK(drained_at - t0 >= 390);
    CHECK(lost_at - t0 >= 780);                    /* max hold + one lease */
    CHECK(lost_at - t0 < 2000);
    REQUIRE(ws_gen(a, rid++, "leader.renew", "lone", g) == 0);
    CHECK(msg_code_is(&m, "FENCED"));
    CHECK_EQ_U(rcl_stat(op, "terms_max_hold"), 1);
    CHECK_EQ_U(rcl_stat(op, "terms_reached_max_hold"), 1);
    CHECK_EQ_U(rcl_stat(op, "terms_fenced_max_hold"), 1);
    CHECK_EQ_U(rcl_stat(op, "terms_over_max_hold"), 0);
    /* the holder campaigns again: a new generation */
    rcl_campaign(a, 2, "lone", NULL);
    REQUIRE(rcl_reply(a, 2, T, &m) == 0 && msg_bool(&m, "granted"));
    CHECK(msg_uint(&m, "generation") > g);
    rcl_close(a);
    rcl_close(op);
    stop();
}

static void test_drain(void)
{
    start();
    struct rcl *a = client(), *op = client();
    uint64_t g = elect(a, 1, "dr", NULL);
    REQUIRE(g);
    REQUIRE(outbox(a, 2, "leader.claim", "dr", g, "before") == 0 && msg_bool(&m, "claimed"));
    REQUIRE(ws_gen(a, 3, "leader.drain", "dr", g) == 0 && msg_ok(&m));
    REQUIRE(ws_gen(a, 4, "leader.drain", "dr", g) == 0 && msg_ok(&m));   /* twice: {} */
    REQUIRE(ws_gen(op, 1, "leader.info", "dr", 0) == 0);
    CHECK(msg_str_is(&m, "state", S("draining")) && msg_str_is(&m, "drain_reason", S("self")));
    REQUIRE(outbox(a, 5, "leader.claim", "dr", g, "after") == 0);
    CHECK(msg_code_is(&m, "DRAINING"));
    REQUIRE(outbox(a, 6, "leader.commit", "dr", g, "before") == 0);
    CHECK(msg_ok(&m) && msg_bool(&m, "applied"));
    REQUIRE(outbox(a, 7, "leader.commit", "dr", g, "unclaimed") == 0);
    CHECK(msg_ok(&m) && msg_bool(&m, "applied"));
    REQUIRE(ws_gen(a, 8, "leader.drain", "dr", g + 1) == 0);
    CHECK(msg_code_is(&m, "FENCED"));
    REQUIRE(ws_gen(a, 9, "leader.resign", "dr", g) == 0 && msg_ok(&m));
    /* an operator's drain request reaches the leader */
    uint64_t g2 = elect(a, 10, "dr", NULL);
    REQUIRE(ws_gen(op, 2, "leader.drain", "dr", g2) == 0 && msg_ok(&m));
    REQUIRE(rcl_event(a, "leader.drain", T, &m) == 0);
    CHECK(msg_str_is(&m, "reason", S("requested")) && msg_uint(&m, "generation") == g2);
    REQUIRE(ws_gen(op, 3, "leader.info", "dr", 0) == 0);
    CHECK(msg_str_is(&m, "drain_reason", S("requested")));
    rcl_close(a);
    rcl_close(op);
    stop();
}

static void test_modes(void)
{
    start();
    struct rcl *a = client(), *op = client();
    REQUIRE(define(op, 1, "md", "mode=shadow") == 0 && msg_ok(&m));
    rcl_campaign(a, 1, "md", NULL);
    REQUIRE(rcl_reply(a, 1, T, &m) == 0 && msg_bool(&m, "granted"));
    uint64_t g = msg_uint(&m, "generation");
    CHECK(msg_str_is(&m, "mode", S("shadow")));
    const char *writes[] = { "leader.claim", "leader.commit", "leader.abandon" };
    for (int i = 0; i < 3; i++) {
        REQUIRE(outbox(a, 10 + i, writes[i], "md", g, "op") == 0);
        CHECK(msg_code_is(&m, "READ_ONLY"));
    }
    REQUIRE(define(op, 2, "md", "mode=read-only") == 0 && msg_ok(&m));
    REQUIRE(rcl_event(a, "leader.mode", T, &m) == 0);
    CHECK(msg_str_is(&m, "mode", S("read-only")) && msg_uint(&m, "generation") == g);
    REQUIRE(outbox(a, 20, "leader.claim", "md", g, "op") == 0);
    CHECK(msg_code_is(&m, "READ_ONLY"));
    REQUIRE(ws_gen(op, 3, "leader.info", "md", 0) == 0);
    CHECK(msg_str_is(&m, "mode", S("read-only")) && msg_uint(&m, "live_generation") == g);
    REQUIRE(define(op, 4, "md", "mode=active") == 0 && msg_ok(&m));
    REQUIRE(rcl_event(a, "leader.mode", T, &m) == 0);
    CHECK(msg_str_is(&m, "mode", S("active")));
    REQUIRE(outbox(a, 21, "leader.claim", "md", g, "op") == 0);
    CHECK(msg_ok(&m) && msg_bool(&m, "claimed"));
    REQUIRE(ws_gen(a, 22, "leader.check", "md", g) == 0 && msg_ok(&m));
    CHECK(msg_bool(&m, "live") && msg_str_is(&m, "mode", S("active")));
    CHECK(msg_uint(&m, "lease_left_ms") > 0);
    REQUIRE(ws_gen(op, 5, "leader.check", "md", g + 1) == 0);
    CHECK(msg_code_is(&m, "FENCED"));
    rcl_close(a);
    rcl_close(op);
    stop();
}

static const msgpack_object_array *pending_ops(struct rcl *c, uint64_t rid, const char *ws)
{
    coord_enc *e = rcl_begin(c, "leader.pending", rid);
    coord_enc_kv_cstr(e, "workstream", ws);
    rcl_send(c);
    if (rcl_reply(c, rid, T, &m) != 0 || !msg_ok(&m))
        return NULL;
    return msg_array(&m, "ops");
}

static void test_claims(void)
{
    start();
    struct rcl *a = client(), *b = client(), *op = client();
    uint64_t ga = elect(a, 1, "ob", NULL);
    REQUIRE(ga);
    REQUIRE(outbox(a, 2, "leader.claim", "ob", ga, "op-1") == 0);
    CHECK(msg_bool(&m, "claimed") && !msg_has(&m, "reconcile"));
    REQUIRE(outbox(a, 3, "leader.claim", "ob", ga, "op-1") == 0);
    CHECK(msg_bool(&m, "claimed") && !msg_has(&m, "reconcile"));
    REQUIRE(outbox(a, 4, "leader.commit", "ob", ga, "op-1") == 0);
    CHECK(msg_bool(&m, "applied"));
    REQUIRE(outbox(a, 5, "leader.claim", "ob", ga, "op-1") == 0);
    CHECK(!msg_bool(&m, "claimed") && msg_bool(&m, "applied") && msg_uint(&m, "generation") == ga);
    REQUIRE(outbox(a, 6, "leader.abandon", "ob", ga, "op-2") == 0 && msg_ok(&m));
    REQUIRE(outbox(a, 7, "leader.claim", "ob", ga, "op-2") == 0);
    CHECK(!msg_bool(&m, "claimed") && msg_bool(&m, "abandoned"));
    REQUIRE(outbox(a, 8, "leader.commit", "ob", ga, "op-2") == 0);
    CHECK(!msg_bool(&m, "applied") && msg_bool(&m, "abandoned"));
    REQUIRE(outbox(a, 9, "leader.abandon", "ob", ga, "op-1") == 0);
    CHECK(msg_bool(&m, "applied") && msg_uint(&m, "generation") == ga);
    /* three claims left unsettled, then the leader's process dies */
    const char *ids[] = { "op-3", "op-4", "op-5" };
    for (int i = 0; i < 3; i++) {
        REQUIRE(outbox(a, 10 + i, "leader.claim", "ob", ga, ids[i]) == 0);
        CHECK(msg_bool(&m, "claimed"));
    }
    const msgpack_object_array *ops = pending_ops(op, 1, "ob");
    REQUIRE(ops && ops->size == 3);
    CHECK(map_bool(map_at(ops, 0), "live"));
    rcl_close(a);
    /* they survive the broker's kill -9 too */
    CHECK(WIFSIGNALED(broker_kill(&bp, SIGKILL)));
    rcl_close(b);
    rcl_close(op);
    REQUIRE(broker_start(&bp, NULL) == 0);
    b = client();
    op = client();
    ops = pending_ops(op, 1, "ob");
    REQUIRE(ops && ops->size == 3);
    for (int i = 0; i < 3; i++) {
        const msgpack_object_map *o = map_at(ops, (uint32_t)i);
        CHECK(map_str_is(o, "op_id", S(ids[i])));                /* oldest first */
        CHECK(map_uint(o, "generation") == ga && !map_bool(o, "live"));
    }
    uint64_t gb = elect(b, 1, "ob", NULL);
    REQUIRE(gb > ga);
    REQUIRE(outbox(b, 2, "leader.claim", "ob", gb, "op-4") == 0);
    CHECK(msg_bool(&m, "claimed") && msg_bool(&m, "reconcile"));
    CHECK_EQ_U(msg_uint(&m, "previous_generation"), ga);
    CHECK(msg_uint(&m, "claimed_ms") > 0);
    REQUIRE(outbox(b, 3, "leader.claim", "ob", gb, "op-4") == 0);      /* ours now */
    CHECK(msg_bool(&m, "claimed") && !msg_has(&m, "reconcile"));
    ops = pending_ops(op, 2, "ob");
    REQUIRE(ops && ops->size == 3);
    CHECK(map_str_is(map_at(ops, 1), "op_id", S("op-4")));             /* keeps its place */
    CHECK(map_bool(map_at(ops, 1), "live") && !map_bool(map_at(ops, 0), "live"));
    REQUIRE(outbox(b, 4, "leader.commit", "ob", gb, "op-4") == 0 && msg_bool(&m, "applied"));
    REQUIRE(outbox(b, 5, "leader.abandon", "ob", gb, "op-3") == 0 && msg_ok(&m));
    REQUIRE(outbox(b, 6, "leader.commit", "ob", gb, "op-5") == 0 && msg_bool(&m, "applied"));
    ops = pending_ops(op, 3, "ob");
    REQUIRE(ops);
    CHECK_EQ_U(ops->size, 0);
    /* a stale generation is refused */
    REQUIRE(outbox(op, 4, "leader.claim", "ob", ga, "op-6") == 0);
    CHECK(msg_code_is(&m, "FENCED"));
    CHECK(rcl_stat(op, "claims") >= 2 && rcl_stat(op, "claims_reconciled") == 1);
    rcl_close(b);
    rcl_close(op);
    stop();
}

static const msgpack_object_array *history(struct rcl *c, uint64_t rid, const char *ws,
                                           uint64_t limit)
{
    coord_enc *e = rcl_begin(c, "leader.history", rid);
    coord_enc_kv_cstr(e, "workstream", ws);
    if (limit)
        coord_enc_kv_uint(e, "limit", limit);
    rcl_send(c);
    if (rcl_reply(c, rid, T, &m) != 0 || !msg_ok(&m))
        return NULL;
    return msg_array(&m, "terms");
}

static void test_history(void)
{
    start();
    struct rcl *a = client(), *b = client();
    const msgpack_object_array *terms = history(a, 1, "hi", 0);
    REQUIRE(terms && terms->size == 0);
    uint64_t g1 = elect(a, 2, "hi", "protocol=h@1");
    REQUIRE(ws_gen(a, 3, "leader.resign", "hi", g1) == 0 && msg_ok(&m));
    uint64_t g2 = elect(a, 4, "hi", "lease=200");
    REQUIRE(rcl_event(a, "leader.lost", T, &m) == 0);          /* expired */
    uint64_t g3 = elect(a, 5, "hi", NULL);
    uint64_t g4 = elect(b, 6, "hi", "steal");
    REQUIRE(g1 && g2 > g1 && g3 > g2 && g4 > g3);
    /* the broker dies while b leads: that term is marked restart */
    CHECK(WIFSIGNALED(broker_kill(&bp, SIGKILL)));
    rcl_close(a);
    rcl_close(b);
    REQUIRE(broker_start(&bp, NULL) == 0);
    a = client();
    uint64_t g5 = elect(a, 1, "hi", NULL);
    REQUIRE(g5 > g4);
    terms = history(a, 2, "hi", 0);
    REQUIRE(terms && terms->size == 5);
    uint64_t gens[] = { g5, g4, g3, g2, g1 };
    const char *reasons[] = { NULL, "restart", "stolen", "expired", "resigned" };
    for (int i = 0; i < 5; i++) {
        const msgpack_object_map *t = map_at(terms, (uint32_t)i);
        CHECK_EQ_U(map_uint(t, "generation"), gens[i]);
        if (reasons[i])
            CHECK(str_is(t, "reason", reasons[i]));
        else
            CHECK(!map_has(t, "reason") && map_uint(t, "ended_ms") == 0);
        CHECK(str_is(t, "mode", "active") && map_uint(t, "pid") == (uint64_t)getpid());
    }
    CHECK(str_is(map_at(terms, 4), "protocol", "h@1"));
    CHECK(!map_has(map_at(terms, 3), "protocol"));
    terms = history(a, 3, "hi", 2);
    REQUIRE(terms && terms->size == 2);
    /* the last 100 terms are kept */
    REQUIRE(ws_gen(a, 4, "leader.resign", "hi", g5) == 0 && msg_ok(&m));
    uint64_t last = 0;
    for (int i = 0; i < 100; i++) {
        last = elect(a, 100 + 2 * (uint64_t)i, "hi", NULL);
        REQUIRE(last);
        REQUIRE(ws_gen(a, 101 + 2 * (uint64_t)i, "leader.resign", "hi", last) == 0);
    }
    terms = history(a, 5, "hi", 1000);
    REQUIRE(terms && terms->size == 100);
    CHECK_EQ_U(map_uint(map_at(terms, 0), "generation"), last);
    CHECK(map_uint(map_at(terms, 99), "generation") > g5);
    rcl_close(a);
    stop();
}

/* Generations (and tokens) keep increasing across a wiped data dir. */
static void test_wipe(void)
{
    start();
    struct rcl *a = client();
    uint64_t g1 = elect(a, 1, "w", NULL);
    REQUIRE(g1 && g1 < (1ull << 53));
    rcl_close(a);
    CHECK(WIFEXITED(broker_kill(&bp, SIGTERM)));
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", bp.data);
    REQUIRE(system(cmd) == 0);
    /* the floor is the wall clock in seconds: the guarantee assumes no
     * more than one start per second, so the restart waits for the next */
    time_t started = time(NULL);
    while (time(NULL) == started)
        poll(NULL, 0, 20);
    REQUIRE(broker_start(&bp, NULL) == 0);
    a = client();
    uint64_t g2 = elect(a, 1, "w", NULL);
    CHECK(g2 > g1 && g2 < (1ull << 53));
    rcl_close(a);
    stop();
}

static void test_bad_input(void)
{
    start();
    struct rcl *a = client();
    char big[300];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = 0;
    char opt[400];
    snprintf(opt, sizeof opt, "incident=%s", big);
    const char *bad_campaigns[] = { "protocol=nope", "protocol=a@99999999999", opt };
    for (int i = 0; i < 3; i++) {
        rcl_campaign(a, 1 + (uint64_t)i, "bad", bad_campaigns[i]);
        REQUIRE(rcl_reply(a, 1 + (uint64_t)i, T, &m) == 0);
        CHECK(msg_code_is(&m, "INVALID_OPTIONS"));
    }
    uint64_t g = elect(a, 10, "bad", NULL);
    REQUIRE(g);
    REQUIRE(outbox(a, 11, "leader.claim", "bad", g, "") == 0);
    CHECK(msg_code_is(&m, "INVALID_OPTIONS"));
    coord_enc *e = rcl_begin(a, "leader.abandon", 12);
    coord_enc_kv_cstr(e, "workstream", "bad");
    coord_enc_kv_uint(e, "generation", g);
    coord_enc_kv_cstr(e, "op_id", "x");
    rcl_send(a);
    REQUIRE(rcl_reply(a, 12, T, &m) == 0);
    CHECK(msg_code_is(&m, "BAD_REQUEST"));                        /* reason missing */
    e = rcl_begin(a, "leader.commit", 13);
    coord_enc_kv_cstr(e, "workstream", "bad");
    coord_enc_kv_uint(e, "generation", g);
    coord_enc_kv_cstr(e, "op_id", "x");
    coord_enc_kv_bin(e, "value", "v", 1);
    rcl_send(a);
    REQUIRE(rcl_reply(a, 13, T, &m) == 0);
    CHECK(msg_code_is(&m, "INVALID_OPTIONS"));                    /* value without key */
    e = rcl_begin(a, "leader.define", 14);
    coord_enc_kv_cstr(e, "workstream", "bad");
    coord_enc_kv_uint(e, "steal", 3);
    rcl_send(a);
    REQUIRE(rcl_reply(a, 14, T, &m) == 0);
    CHECK(msg_code_is(&m, "BAD_REQUEST"));
    REQUIRE(rcl_sync(a) == 0);                                    /* still served */
    rcl_close(a);
    stop();
}

static const struct test_case tests[] = {
    { "define_describe", test_define_describe },
    { "pinning", test_pinning },
    { "steal_policy_and_incident", test_steal_policy_and_incident },
    { "max_hold", test_max_hold },
    { "max_hold_alone", test_max_hold_alone },
    { "drain", test_drain },
    { "modes", test_modes },
    { "claims", test_claims },
    { "history", test_history },
    { "wipe", test_wipe },
    { "bad_input", test_bad_input },
    { NULL, NULL },
};

int main(int argc, char **argv)
{
    coord_msg_init(&m);
    return run_tests(argc, argv, tests);
}
