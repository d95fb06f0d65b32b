/* test_leader_policies_client.c - libcoord's leadership policy calls against a
 * real broker: descriptors (define with field masks, describe), protocol
 * pinning and its ratchet, steal policies and incident takeovers, the
 * term's states (blocking and async campaigns, cancel, drain, resign,
 * leader.lost / leader.drain / leader.mode events), outbox claims
 * (reconcile after a leader died, abandon, pending, commit without key,
 * from another connection), leader.check, leader.history and max-hold
 * drains.
 *
 * $COORD_BROKER is coordd (set by meson).  Events are awaited, never slept
 * for. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "coord.h"
#include "harness.h"
#include "leader-util.h"

#define T 10000

static struct broker_proc bp;

static void start(void)
{
    start_or_exit(&bp, NULL);
}

static void stop(void)
{
    stop_and_clean(&bp);
}

static coord_t *client_in(const char *scope)
{
    return lib_connect(&bp, scope, "test-leader-policies");
}

static coord_t *client(void)
{
    return client_in(NULL);
}

/* The next event named name on c within T (others are dropped); NULL when
 * none came. */
static coord_reply_t *await_event(coord_t *c, const char *name)
{
    uint64_t deadline = now_ms() + T;
    while (now_ms() < deadline) {
        coord_reply_t *ev = NULL;
        if (coord_next_event(c, (int)(deadline - now_ms()), &ev) != 0)
            break;
        if (!strcmp(coord_reply_event(ev), name))
            return ev;
        coord_reply_free(ev);
    }
    fprintf(stderr, "no %s event within %d ms\n", name, T);
    return NULL;
}

static bool str_is(const char *s, size_t n, const char *want)
{
    if (n == strlen(want) && !memcmp(s, want, n))
        return true;
    fprintf(stderr, "got \"%.*s\", want \"%s\"\n", (int)n, s, want);
    return false;
}

/* A string field of leader.info of ws. */
static bool info_str_is(coord_t *c, const char *ws, const char *key, const char *want)
{
    coord_reply_t *info = NULL;
    if (coord_leader_info(c, S(ws), &info) != 0)
        return false;
    const char *s = "";
    size_t n = 0;
    bool ok = coord_map_str(coord_reply_map(info), key, &s, &n) && str_is(s, n, want);
    if (!ok)
        fprintf(stderr, "leader.info %s: not %s\n", key, want);
    coord_reply_free(info);
    return ok;
}

/* A counter of stats (UINT64_MAX when missing). */
static uint64_t stat_of(coord_t *c, const char *key)
{
    coord_req_t *q = coord_req_new("stats");
    coord_reply_t *rep = NULL;
    uint64_t v = UINT64_MAX;
    if (coord_call(c, q, &rep) == 0 && !coord_map_uint(coord_reply_map(rep), key, &v))
        fprintf(stderr, "stats without %s\n", key);
    coord_reply_free(rep);
    coord_req_free(q);
    return v;
}

/* ==== descriptors ==== */

static void test_define_describe(void)
{
    start();
    coord_t *c = client();
    coord_leader_descriptor d;
    const char *ws = "billing";

    memset(&d, 0x55, sizeof d);
    CHECK_EQ(coord_leader_describe(c, S(ws), &d), COORD_ENOT_FOUND);
    CHECK_EQ_U(d.max_hold_ms, 0);           /* zeroed on errors */

    uint64_t before = (uint64_t)time(NULL) * 1000 - 1000;
    coord_leader_define_opts o = {
        .set = COORD_DESC_PROTOCOL | COORD_DESC_MAX_HOLD | COORD_DESC_STEAL |
               COORD_DESC_MODE | COORD_DESC_FALLBACK,
        .protocol = "billing-sync@2", .max_hold_ms = 30000, .steal = "incident-only",
        .mode = "shadow", .fallback = "SERVER_COORDINATED",
    };
    CHECK_EQ(coord_leader_define(c, S(ws), &o, &d), 0);
    CHECK_STR(d.protocol, "billing-sync@2");
    CHECK_STR(d.pinned_protocol, "billing-sync@2");
    CHECK_EQ_U(d.max_hold_ms, 30000);
    CHECK_STR(d.steal, "incident-only");
    CHECK_STR(d.mode, "shadow");
    CHECK_STR(d.fallback, "SERVER_COORDINATED");
    CHECK_STR(d.canonical_fence, "local");
    CHECK(d.defined_ms >= before && d.defined_ms <= (uint64_t)time(NULL) * 1000 + 1000);

    coord_leader_descriptor got;
    CHECK_EQ(coord_leader_describe(c, S(ws), &got), 0);
    CHECK(!memcmp(&got, &d, sizeof d));

    /* omitted fields keep their values; reset and a NULL string are nil */
    coord_leader_define_opts o2 = {
        .set = COORD_DESC_MODE | COORD_DESC_STEAL,
        .reset = COORD_DESC_FALLBACK,
        .mode = "read-only", .steal = NULL,
    };
    CHECK_EQ(coord_leader_define(c, S(ws), &o2, &d), 0);
    CHECK_STR(d.mode, "read-only");
    CHECK_STR(d.steal, "allowed");          /* nil: back to the default */
    CHECK_STR(d.fallback, "");
    CHECK_STR(d.protocol, "billing-sync@2");
    CHECK_EQ_U(d.max_hold_ms, 30000);
    /* NULL options: a define that changes nothing */
    CHECK_EQ(coord_leader_define(c, S(ws), NULL, &got), 0);
    CHECK_STR(got.mode, "read-only");
    CHECK_EQ_U(got.max_hold_ms, 30000);
    coord_leader_define_opts o3 = { .reset = COORD_DESC_MAX_HOLD | COORD_DESC_MODE };
    CHECK_EQ(coord_leader_define(c, S(ws), &o3, &d), 0);
    CHECK_EQ_U(d.max_hold_ms, 0);
    CHECK_STR(d.mode, "active");

    /* lowering the pin needs force; removing it too */
    coord_leader_define_opts low = { .set = COORD_DESC_PROTOCOL, .protocol = "billing-sync@1" };
    CHECK_EQ(coord_leader_define(c, S(ws), &low, &d), COORD_EPROTOCOL_PINNED);
    coord_leader_define_opts other = { .set = COORD_DESC_PROTOCOL, .protocol = "other@9" };
    CHECK_EQ(coord_leader_define(c, S(ws), &other, NULL), COORD_EPROTOCOL_PINNED);
    coord_leader_define_opts rm = { .reset = COORD_DESC_PROTOCOL };
    CHECK_EQ(coord_leader_define(c, S(ws), &rm, NULL), COORD_EPROTOCOL_PINNED);
    CHECK_EQ(coord_leader_describe(c, S(ws), &d), 0);
    CHECK_STR(d.protocol, "billing-sync@2");
    low.force = true;
    CHECK_EQ(coord_leader_define(c, S(ws), &low, &d), 0);
    CHECK_STR(d.pinned_protocol, "billing-sync@1");
    rm.force = true;
    CHECK_EQ(coord_leader_define(c, S(ws), &rm, &d), 0);
    CHECK_STR(d.protocol, "");
    CHECK_STR(d.pinned_protocol, "");

    /* bad values: the broker names the field */
    static const struct { unsigned bit; const char *v; const char *field; } bad[] = {
        { COORD_DESC_MODE, "loud", "mode" },
        { COORD_DESC_STEAL, "sometimes", "steal" },
        { COORD_DESC_PROTOCOL, "no-version", "protocol" },
        { COORD_DESC_PROTOCOL, "x@0", "protocol" },
        { COORD_DESC_CANONICAL_FENCE, "zookeeper", "canonical_fence" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        coord_leader_define_opts b = { .set = bad[i].bit, .protocol = bad[i].v,
                                       .steal = bad[i].v, .mode = bad[i].v,
                                       .canonical_fence = bad[i].v };
        CHECK_EQ(coord_leader_define(c, S(ws), &b, NULL), COORD_EINVALID_OPTIONS);
        CHECK_MSG(strstr(coord_error_message(c), bad[i].field), "message %s lacks %s",
                  coord_error_message(c), bad[i].field);
    }
    coord_leader_define_opts long_hold = { .set = COORD_DESC_MAX_HOLD,
                                           .max_hold_ms = 86400001 };
    CHECK_EQ(coord_leader_define(c, S(ws), &long_hold, NULL), COORD_EINVALID_OPTIONS);

    /* per scope */
    coord_t *other_scope = client_in("tenant-b");
    CHECK_EQ(coord_leader_describe(other_scope, S(ws), &d), COORD_ENOT_FOUND);
    coord_close(other_scope);

    /* durable across a restart */
    coord_leader_define_opts keep = { .set = COORD_DESC_FALLBACK, .fallback = "RUN_LOCAL" };
    CHECK_EQ(coord_leader_define(c, S(ws), &keep, NULL), 0);
    coord_close(c);
    broker_kill(&bp, SIGTERM);
    REQUIRE(broker_start(&bp, NULL) == 0);
    c = client();
    CHECK_EQ(coord_leader_describe(c, S(ws), &d), 0);
    CHECK_STR(d.fallback, "RUN_LOCAL");

    CHECK_EQ(coord_leader_define(NULL, S(ws), NULL, NULL), COORD_EINVAL);
    CHECK_EQ(coord_leader_describe(c, S(ws), NULL), COORD_EINVAL);
    coord_close(c);
    stop();
}

/* ==== protocol pinning, steal policy, incidents ==== */

static void test_pin_policy_incident(void)
{
    start();
    coord_t *a = client(), *b = client(), *op = client();
    const char *ws = "sync";
    coord_leader_define_opts pin = { .set = COORD_DESC_PROTOCOL, .protocol = "sync@2" };
    CHECK_EQ(coord_leader_define(op, S(ws), &pin, NULL), 0);

    coord_leader_term t;
    CHECK_EQ(coord_leader_campaign_term(a, S(ws), NULL, &t), COORD_EPROTOCOL_PINNED);
    CHECK_EQ(t.state, COORD_LEADER_FOLLOWER);
    coord_leader_opts old = { .protocol = "sync@1" };
    CHECK_EQ(coord_leader_campaign_term(a, S(ws), &old, &t), COORD_EPROTOCOL_PINNED);
    coord_leader_opts bad = { .protocol = "sync" };
    CHECK_EQ(coord_leader_campaign_term(a, S(ws), &bad, &t), COORD_EINVALID_OPTIONS);
    /* a newer version is granted and raises the pin (the ratchet) */
    coord_leader_opts v3 = { .protocol = "sync@3" };
    CHECK_EQ(coord_leader_campaign_term(a, S(ws), &v3, &t), 0);
    CHECK_EQ(t.state, COORD_LEADER_LEADER);
    coord_leader_descriptor d;
    CHECK_EQ(coord_leader_describe(op, S(ws), &d), 0);
    CHECK_STR(d.protocol, "sync@2");
    CHECK_STR(d.pinned_protocol, "sync@3");
    CHECK(info_str_is(op, ws, "pinned_protocol", "sync@3"));
    CHECK(info_str_is(op, ws, "protocol", "sync@3"));
    CHECK_EQ(coord_leader_term_resign(a, S(ws), &t), 0);
    /* the rollback: the old version cannot lead again */
    coord_leader_opts v2 = { .protocol = "sync@2" };
    CHECK_EQ(coord_leader_campaign_term(b, S(ws), &v2, &t), COORD_EPROTOCOL_PINNED);

    /* steal policies */
    const char *ps = "policy";
    coord_leader_term ta, tb;
    CHECK_EQ(coord_leader_campaign_term(a, S(ps), NULL, &ta), 0);
    coord_leader_define_opts never = { .set = COORD_DESC_STEAL, .steal = "never" };
    CHECK_EQ(coord_leader_define(op, S(ps), &never, NULL), 0);
    coord_leader_opts steal = { .steal = true };
    CHECK_EQ(coord_leader_campaign_term(b, S(ps), &steal, &tb), COORD_EPOLICY);
    coord_leader_opts steal_inc = { .steal = true, .incident = "INC-1 stuck leader" };
    CHECK_EQ(coord_leader_campaign_term(b, S(ps), &steal_inc, &tb), COORD_EPOLICY);
    coord_leader_define_opts inc_only = { .set = COORD_DESC_STEAL, .steal = "incident-only" };
    CHECK_EQ(coord_leader_define(op, S(ps), &inc_only, NULL), 0);
    CHECK_EQ(coord_leader_campaign_term(b, S(ps), &steal, &tb), COORD_EPOLICY);
    CHECK_EQ(coord_leader_campaign_term(b, S(ps), &steal_inc, &tb), 0);
    CHECK_EQ(tb.state, COORD_LEADER_LEADER);
    CHECK(tb.generation > ta.generation);
    coord_reply_t *ev = await_event(a, "leader.lost");
    REQUIRE(ev);
    coord_leader_lost l;
    CHECK(coord_event_leader_lost(ev, &l));
    CHECK(str_is(l.reason, l.reason_len, "incident"));
    CHECK(str_is(l.incident, l.incident_len, "INC-1 stuck leader"));
    CHECK(coord_leader_term_event(&ta, S(ps), ev));
    CHECK_EQ(ta.state, COORD_LEADER_RELEASED);
    CHECK_STR(ta.end_reason, "incident");
    coord_reply_free(ev);
    CHECK(info_str_is(op, ps, "incident", "INC-1 stuck leader"));

    /* incident takeover of a disabled workstream */
    const char *dw = "frozen";
    CHECK_EQ(coord_leader_disable(op, S(dw), NULL), 0);
    CHECK_EQ(coord_leader_campaign_term(a, S(dw), NULL, &ta), COORD_EDISABLED);
    coord_leader_opts inc = { .incident = "INC-2 drain by server" };
    CHECK_EQ(coord_leader_campaign_term(a, S(dw), &inc, &ta), 0);
    CHECK_EQ(ta.state, COORD_LEADER_LEADER);
    CHECK(info_str_is(op, dw, "state", "leading"));
    coord_reply_t *info = NULL;
    CHECK_EQ(coord_leader_info(op, S(dw), &info), 0);
    bool dis = false;
    CHECK(coord_map_bool(coord_reply_map(info), "disabled", &dis) && dis);
    coord_reply_free(info);
    CHECK_EQ(coord_leader_term_resign(a, S(dw), &ta), 0);
    CHECK_EQ(coord_leader_campaign_term(b, S(dw), NULL, &tb), COORD_EDISABLED);
    coord_leader_opts empty = { .incident = "" };
    CHECK_EQ(coord_leader_campaign_term(b, S(dw), &empty, &tb), COORD_EINVALID_OPTIONS);

    coord_close(a);
    coord_close(b);
    coord_close(op);
    stop();
}

/* ==== the term's states ==== */

struct async_done {
    int calls, status;
    coord_leader_state state;
};

static void on_campaign(coord_t *c, int status, coord_leader_term *t, void *ud)
{
    struct async_done *d = ud;
    (void)c;
    d->calls++;
    d->status = status;
    d->state = t->state;
}

static bool await_done(coord_t *c, struct async_done *d)
{
    uint64_t deadline = now_ms() + T;
    while (!d->calls && now_ms() < deadline)
        if (coord_wait(c, (int)(deadline - now_ms())) < 0)
            break;
    return d->calls == 1;
}

static void test_term_states(void)
{
    CHECK_STR(coord_leader_state_name(COORD_LEADER_FOLLOWER), "FOLLOWER");
    CHECK_STR(coord_leader_state_name(COORD_LEADER_REQUESTING), "REQUESTING");
    CHECK_STR(coord_leader_state_name(COORD_LEADER_LEADER), "LEADER");
    CHECK_STR(coord_leader_state_name(COORD_LEADER_DRAINING), "DRAINING");
    CHECK_STR(coord_leader_state_name(COORD_LEADER_RELEASED), "RELEASED");
    CHECK_STR(coord_leader_state_name(COORD_LEADER_ABORTED), "ABORTED");
    CHECK_STR(coord_leader_state_name((coord_leader_state)99), "UNKNOWN");

    start();
    coord_t *a = client(), *b = client(), *op = client();
    const char *ws = "states";
    coord_leader_term ta, tb;
    coord_leader_opts lease = { .lease_ms = 20000 };
    CHECK_EQ(coord_leader_campaign_term(a, S(ws), &lease, &ta), 0);
    CHECK_EQ(ta.state, COORD_LEADER_LEADER);
    CHECK(ta.generation > 0);
    CHECK_EQ_U(ta.lease_ms, 20000);
    CHECK_STR(ta.mode, "active");

    /* async: REQUESTING while a leads; cancel -> ABORTED, callback once */
    struct async_done d1 = { 0 };
    uint64_t rid = 0;
    CHECK_EQ(coord_leader_campaign_async(b, S(ws), NULL, &tb, on_campaign, &d1, &rid), 0);
    CHECK_EQ(tb.state, COORD_LEADER_REQUESTING);
    CHECK(rid != 0 && tb.rid == rid);
    CHECK_EQ(d1.calls, 0);                  /* never inside the call */
    CHECK_EQ(coord_ping(b), 0);             /* the campaign waits */
    CHECK_EQ(tb.state, COORD_LEADER_REQUESTING);
    CHECK_EQ(coord_cancel(b, rid), 0);
    CHECK(await_done(b, &d1));
    CHECK_EQ(d1.status, COORD_EABORTED);
    CHECK_EQ(d1.state, COORD_LEADER_ABORTED);
    CHECK_EQ(tb.state, COORD_LEADER_ABORTED);

    /* async granted when a resigns */
    struct async_done d2 = { 0 };
    CHECK_EQ(coord_leader_campaign_async(b, S(ws), NULL, &tb, on_campaign, &d2, NULL), 0);
    CHECK_EQ(coord_ping(b), 0);
    CHECK_EQ(coord_leader_term_resign(a, S(ws), &ta), 0);
    CHECK_EQ(ta.state, COORD_LEADER_RELEASED);
    CHECK_STR(ta.end_reason, "resigned");
    CHECK(await_done(b, &d2));
    CHECK_EQ(d2.status, 0);
    CHECK_EQ(tb.state, COORD_LEADER_LEADER);
    CHECK(tb.generation > ta.generation);
    /* resigning again: fenced, still RELEASED */
    CHECK_EQ(coord_leader_term_resign(a, S(ws), &ta), COORD_EFENCED);
    CHECK_EQ(ta.state, COORD_LEADER_RELEASED);

    /* drained by itself: claims refused, commits accepted */
    CHECK_EQ(coord_leader_term_drain(b, S(ws), &tb), 0);
    CHECK_EQ(tb.state, COORD_LEADER_DRAINING);
    CHECK_STR(tb.end_reason, "self");
    CHECK_EQ(coord_leader_term_drain(b, S(ws), &tb), 0);        /* twice: {} */
    CHECK(info_str_is(op, ws, "state", "draining"));
    CHECK(info_str_is(op, ws, "drain_reason", "self"));
    CHECK_EQ(coord_leader_claim(b, S(ws), tb.generation, "late-op", NULL), COORD_EDRAINING);
    coord_commit_result cr;
    CHECK_EQ(coord_leader_commit(b, S(ws), tb.generation, "late-op", NULL, NULL, 0, &cr), 0);
    CHECK(cr.applied);
    CHECK_EQ(coord_leader_term_resign(b, S(ws), &tb), 0);
    CHECK_EQ(tb.state, COORD_LEADER_RELEASED);
    CHECK(info_str_is(op, ws, "state", "idle"));

    /* drained by an operator: the leader gets leader.drain "requested" */
    CHECK_EQ(coord_leader_campaign_term(a, S(ws), NULL, &ta), 0);
    CHECK_EQ(coord_leader_drain(op, S(ws), ta.generation - 1), COORD_EFENCED);
    CHECK_EQ(coord_leader_drain(op, S(ws), ta.generation), 0);
    coord_reply_t *ev = await_event(a, "leader.drain");
    REQUIRE(ev);
    coord_leader_drain_event de;
    CHECK(coord_event_leader_drain(ev, &de));
    CHECK_EQ_U(de.generation, ta.generation);
    CHECK(str_is(de.workstream, de.workstream_len, ws));
    CHECK(str_is(de.reason, de.reason_len, "requested"));
    CHECK(!coord_event_leader_lost(ev, NULL) && !coord_event_leader_mode(ev, NULL));
    CHECK(!coord_leader_term_event(&tb, S(ws), ev));   /* not b's term */
    CHECK(!coord_leader_term_event(&ta, S("other"), ev));
    CHECK(coord_leader_term_event(&ta, S(ws), ev));
    CHECK_EQ(ta.state, COORD_LEADER_DRAINING);
    CHECK_STR(ta.end_reason, "requested");
    coord_reply_free(ev);
    CHECK(info_str_is(op, ws, "drain_reason", "requested"));

    /* a mode change reaches the leader; the generation stays */
    coord_leader_define_opts ro = { .set = COORD_DESC_MODE, .mode = "read-only" };
    CHECK_EQ(coord_leader_define(op, S(ws), &ro, NULL), 0);
    ev = await_event(a, "leader.mode");
    REQUIRE(ev);
    coord_leader_mode_event me;
    CHECK(coord_event_leader_mode(ev, &me));
    CHECK_EQ_U(me.generation, ta.generation);
    CHECK(str_is(me.mode, me.mode_len, "read-only"));
    CHECK(coord_leader_term_event(&ta, S(ws), ev));
    CHECK_STR(ta.mode, "read-only");
    CHECK_EQ(ta.state, COORD_LEADER_DRAINING);
    coord_reply_free(ev);
    CHECK_EQ(coord_leader_commit(a, S(ws), ta.generation, "ro-op", NULL, NULL, 0, &cr),
             COORD_EREAD_ONLY);
    CHECK_EQ(coord_leader_abandon(a, S(ws), ta.generation, "ro-op", "no", NULL, NULL),
             COORD_EREAD_ONLY);

    /* lost: stolen */
    coord_leader_opts st = { .steal = true };
    CHECK_EQ(coord_leader_campaign_term(b, S(ws), &st, &tb), 0);
    CHECK_STR(tb.mode, "read-only");
    ev = await_event(a, "leader.lost");
    REQUIRE(ev);
    CHECK(coord_leader_term_event(&ta, S(ws), ev));
    CHECK_EQ(ta.state, COORD_LEADER_RELEASED);
    CHECK_STR(ta.end_reason, "stolen");
    coord_reply_free(ev);

    /* a blocking campaign that waits past its timeout stays a follower */
    coord_leader_opts to = { .timeout_ms = 50 };
    CHECK_EQ(coord_leader_campaign_term(a, S(ws), &to, &ta), COORD_ETIMEOUT);
    CHECK_EQ(ta.state, COORD_LEADER_FOLLOWER);
    CHECK_STR(coord_error_message(a), "not elected: timed out after 0.05 s");
    coord_leader_opts ifa = { .if_available = true };
    CHECK_EQ(coord_leader_campaign_term(a, S(ws), &ifa, &ta), 0);
    CHECK_EQ(ta.state, COORD_LEADER_FOLLOWER);
    CHECK_EQ_U(ta.generation, 0);

    /* closing c answers the async campaign with COORD_ECLOSED */
    struct async_done d3 = { 0 };
    coord_leader_term t3;
    CHECK_EQ(coord_leader_campaign_async(a, S(ws), NULL, &t3, on_campaign, &d3, NULL), 0);
    coord_close(a);
    CHECK_EQ(d3.calls, 1);
    CHECK_EQ(d3.status, COORD_ECLOSED);
    CHECK_EQ(t3.state, COORD_LEADER_FOLLOWER);

    CHECK_EQ(coord_leader_campaign_term(b, S(ws), NULL, NULL), COORD_EINVAL);
    CHECK_EQ(coord_leader_campaign_async(b, S(ws), NULL, NULL, NULL, NULL, NULL), COORD_EINVAL);
    coord_close(b);
    coord_close(op);
    stop();
}

/* ==== outbox claims ==== */

static void test_claims(void)
{
    start();
    coord_t *a = client(), *b = client(), *helper = client();
    const char *ws = "outbox";
    coord_leader_term ta, tb;
    CHECK_EQ(coord_leader_campaign_term(a, S(ws), NULL, &ta), 0);
    uint64_t g = ta.generation;

    coord_claim_result r;
    CHECK_EQ(coord_leader_claim(a, S(ws), g, "pay-1", &r), 0);
    CHECK(r.claimed && !r.reconcile && !r.applied && !r.abandoned);
    CHECK_EQ(coord_leader_claim(a, S(ws), g, "pay-1", &r), 0);  /* again: claimed */
    CHECK(r.claimed && !r.reconcile);
    /* another connection of the scope, with the live generation */
    CHECK_EQ(coord_leader_claim(helper, S(ws), g, "pay-2", &r), 0);
    CHECK(r.claimed);
    /* a stale generation, another scope */
    CHECK_EQ(coord_leader_claim(helper, S(ws), g - 1, "pay-3", &r), COORD_EFENCED);
    CHECK(!r.claimed);
    coord_t *other = client_in("elsewhere");
    CHECK_EQ(coord_leader_claim(other, S(ws), g, "pay-3", &r), COORD_EFENCED);
    coord_close(other);

    coord_reply_t *rep = NULL;
    CHECK_EQ(coord_leader_pending(b, S(ws), 0, &rep), 0);
    REQUIRE(rep);
    coord_map m = coord_reply_map(rep);
    CHECK_EQ_U(coord_map_array_len(m, "ops"), 2);
    coord_map e;
    const char *s;
    size_t n;
    uint64_t u;
    bool live = false;
    CHECK(coord_map_array_at(m, "ops", 0, &e));
    CHECK(coord_map_str(e, "op_id", &s, &n) && str_is(s, n, "pay-1"));
    CHECK(coord_map_uint(e, "generation", &u) && u == g);
    CHECK(coord_map_uint(e, "claimed_ms", &u) && u > 0);
    CHECK(coord_map_bool(e, "live", &live) && live);
    coord_reply_free(rep);
    CHECK_EQ(coord_leader_pending(b, S(ws), 1, &rep), 0);
    CHECK_EQ_U(coord_map_array_len(coord_reply_map(rep), "ops"), 1);
    coord_reply_free(rep);

    /* commit without key settles the claim */
    coord_commit_result cr;
    CHECK_EQ(coord_leader_commit(helper, S(ws), g, "pay-1", NULL, NULL, 0, &cr), 0);
    CHECK(cr.applied && !cr.duplicate && !cr.abandoned);
    CHECK_EQ_U(cr.generation, g);
    CHECK_EQ(coord_leader_claim(a, S(ws), g, "pay-1", &r), 0);
    CHECK(!r.claimed && r.applied && r.generation == g);
    CHECK_EQ(coord_leader_commit(a, S(ws), g, "pay-1", NULL, NULL, 0, &cr), 0);
    CHECK(!cr.applied && cr.duplicate && cr.generation == g);
    /* value without key: refused here, nothing sent */
    CHECK_EQ(coord_leader_commit(a, S(ws), g, "pay-9", NULL, "v", 1, &cr), COORD_EINVAL);

    /* abandon: claimed or not; an applied op is not abandoned */
    bool applied = true;
    uint64_t by = 99;
    CHECK_EQ(coord_leader_abandon(a, S(ws), g, "pay-4", "customer cancelled", &applied, &by),
             0);
    CHECK(!applied && by == 0);
    CHECK_EQ(coord_leader_claim(a, S(ws), g, "pay-4", &r), 0);
    CHECK(!r.claimed && r.abandoned && !r.applied);
    CHECK_EQ(coord_leader_commit(a, S(ws), g, "pay-4", "k", "v", 1, &cr), 0);
    CHECK(!cr.applied && cr.abandoned);
    void *v = NULL;
    CHECK_EQ(coord_leader_read(b, S(ws), "k", &v, NULL, NULL), COORD_ENOT_FOUND);
    CHECK_EQ(coord_leader_abandon(a, S(ws), g, "pay-1", "too late", &applied, &by), 0);
    CHECK(applied && by == g);
    CHECK_EQ(coord_leader_abandon(a, S(ws), g, "pay-5", "", NULL, NULL),
             COORD_EINVALID_OPTIONS);

    /* the leader dies between claim and commit: the next one reconciles */
    CHECK_EQ(coord_leader_claim(a, S(ws), g, "pay-6", &r), 0);
    struct async_done d = { 0 };
    CHECK_EQ(coord_leader_campaign_async(b, S(ws), NULL, &tb, on_campaign, &d, NULL), 0);
    CHECK_EQ(coord_ping(b), 0);
    coord_close(a);
    CHECK(await_done(b, &d));
    CHECK_EQ(tb.state, COORD_LEADER_LEADER);
    uint64_t g2 = tb.generation;
    CHECK(g2 > g);
    CHECK_EQ(coord_leader_pending(b, S(ws), 0, &rep), 0);
    m = coord_reply_map(rep);
    CHECK_EQ_U(coord_map_array_len(m, "ops"), 2);      /* pay-2, pay-6 */
    for (size_t i = 0; i < coord_map_array_len(m, "ops"); i++) {
        CHECK(coord_map_array_at(m, "ops", i, &e));
        CHECK(coord_map_bool(e, "live", &live) && !live);
        CHECK(coord_map_uint(e, "generation", &u) && u == g);
    }
    coord_reply_free(rep);
    CHECK_EQ(coord_leader_claim(b, S(ws), g2, "pay-6", &r), 0);
    CHECK(r.claimed && r.reconcile);
    CHECK_EQ_U(r.previous_generation, g);
    CHECK(r.claimed_ms > 0);
    /* the claim is the new generation's now; again: plain claimed */
    CHECK_EQ(coord_leader_claim(b, S(ws), g2, "pay-6", &r), 0);
    CHECK(r.claimed && !r.reconcile);
    CHECK_EQ(coord_leader_pending(b, S(ws), 0, &rep), 0);
    m = coord_reply_map(rep);
    bool found = false;
    for (size_t i = 0; i < coord_map_array_len(m, "ops"); i++)
        if (coord_map_array_at(m, "ops", i, &e) && coord_map_str(e, "op_id", &s, &n) &&
            n == 5 && !memcmp(s, "pay-6", 5)) {
            found = true;
            CHECK(coord_map_uint(e, "generation", &u) && u == g2);
            CHECK(coord_map_bool(e, "live", &live) && live);
        }
    CHECK(found);
    coord_reply_free(rep);
    CHECK_EQ(coord_leader_commit(b, S(ws), g2, "pay-6", "receipt", "r6", 2, &cr), 0);
    CHECK(cr.applied);

    /* shadow: claims refused in the ledger */
    coord_leader_define_opts sh = { .set = COORD_DESC_MODE, .mode = "shadow" };
    CHECK_EQ(coord_leader_define(helper, S(ws), &sh, NULL), 0);
    CHECK_EQ(coord_leader_claim(b, S(ws), g2, "pay-7", &r), COORD_EREAD_ONLY);
    CHECK_EQ(coord_leader_claim(b, S(ws), g2 + 1, "pay-7", &r), COORD_EFENCED);  /* order */

    CHECK_EQ(coord_leader_claim(b, S(ws), g2, NULL, &r), COORD_EINVAL);
    CHECK_EQ(coord_leader_pending(b, S(ws), 0, NULL), COORD_EINVAL);
    coord_close(b);
    coord_close(helper);
    stop();
}

/* ==== check, history ==== */

static void test_check_history(void)
{
    start();
    coord_t *a = client(), *b = client(), *op = client();
    const char *ws = "hist";
    coord_reply_t *rep = NULL;
    CHECK_EQ(coord_leader_history(op, S(ws), 0, &rep), 0);
    CHECK_EQ_U(coord_map_array_len(coord_reply_map(rep), "terms"), 0);
    coord_reply_free(rep);

    coord_leader_term ta, tb, tc;
    coord_leader_opts p1 = { .protocol = "hist@1", .lease_ms = 15000 };
    CHECK_EQ(coord_leader_campaign_term(a, S(ws), &p1, &ta), 0);
    coord_leader_check_result cr;
    CHECK_EQ(coord_leader_check(op, S(ws), ta.generation, &cr), 0);
    CHECK(cr.live);
    CHECK(cr.lease_left_ms > 0 && cr.lease_left_ms <= 15000);
    CHECK_STR(cr.mode, "active");
    CHECK_EQ(coord_leader_check(op, S(ws), ta.generation + 1, &cr), COORD_EFENCED);
    CHECK(!cr.live);
    CHECK_EQ(coord_leader_term_resign(a, S(ws), &ta), 0);
    CHECK_EQ(coord_leader_check(op, S(ws), ta.generation, &cr), COORD_EFENCED);

    CHECK_EQ(coord_leader_campaign_term(a, S(ws), NULL, &tb), 0);
    coord_leader_opts st = { .steal = true };
    CHECK_EQ(coord_leader_campaign_term(b, S(ws), &st, &tc), 0);

    CHECK_EQ(coord_leader_history(op, S(ws), 0, &rep), 0);
    coord_map m = coord_reply_map(rep);
    REQUIRE(coord_map_array_len(m, "terms") == 3);
    const uint64_t gens[3] = { tc.generation, tb.generation, ta.generation };
    const char *reasons[3] = { NULL, "stolen", "resigned" };
    for (size_t i = 0; i < 3; i++) {
        coord_map e;
        uint64_t u = 0, el = 0, en = 0;
        const char *s;
        size_t n;
        CHECK(coord_map_array_at(m, "terms", i, &e));
        CHECK(coord_map_uint(e, "generation", &u) && u == gens[i]);
        CHECK(coord_map_uint(e, "pid", &u) && u == (uint64_t)getpid());
        CHECK(coord_map_str(e, "client", &s, &n) && str_is(s, n, "test-leader-policies"));
        CHECK(coord_map_str(e, "mode", &s, &n) && str_is(s, n, "active"));
        CHECK(coord_map_uint(e, "elected_ms", &el) && el > 0);
        CHECK(coord_map_uint(e, "ended_ms", &en));
        if (reasons[i]) {
            CHECK(en >= el);
            CHECK(coord_map_str(e, "reason", &s, &n) && str_is(s, n, reasons[i]));
        } else {
            CHECK_EQ_U(en, 0);
            CHECK(!coord_map_str(e, "reason", &s, &n));
        }
        bool has_proto = coord_map_str(e, "protocol", &s, &n) && n;
        CHECK(has_proto == (i == 2));
        if (has_proto)
            CHECK(str_is(s, n, "hist@1"));
    }
    coord_reply_free(rep);
    CHECK_EQ(coord_leader_history(op, S(ws), 1, &rep), 0);
    CHECK_EQ_U(coord_map_array_len(coord_reply_map(rep), "terms"), 1);
    coord_reply_free(rep);
    CHECK_EQ(coord_leader_history(op, S(ws), 0, NULL), COORD_EINVAL);
    coord_close(a);
    coord_close(b);
    coord_close(op);
    stop();
}

/* ==== max hold ==== */

static void test_max_hold(void)
{
    start();
    coord_t *a = client(), *b = client(), *op = client();
    const char *ws = "held";
    coord_leader_define_opts mh = { .set = COORD_DESC_MAX_HOLD, .max_hold_ms = 600 };
    CHECK_EQ(coord_leader_define(op, S(ws), &mh, NULL), 0);
    coord_leader_term ta, tb;
    coord_leader_opts long_lease = { .lease_ms = 60000 };
    CHECK_EQ(coord_leader_campaign_term(a, S(ws), &long_lease, &ta), 0);
    CHECK_EQ_U(ta.lease_ms, 600);           /* capped */
    uint64_t lease = 0;
    CHECK_EQ(coord_leader_renew(a, S(ws), ta.generation, &lease), 0);
    CHECK(lease > 0 && lease <= 600);

    struct async_done d = { 0 };
    CHECK_EQ(coord_leader_campaign_async(b, S(ws), NULL, &tb, on_campaign, &d, NULL), 0);
    CHECK_EQ(coord_ping(b), 0);
    /* a keeps renewing (every 100 ms): the max hold, not the lease, ends it */
    bool drained = false, lost = false;
    uint64_t deadline = now_ms() + T, next_renew = now_ms() + 100;
    char lost_reason[32] = "";
    while (!lost && now_ms() < deadline) {
        coord_reply_t *ev = NULL;
        int wait = next_renew > now_ms() ? (int)(next_renew - now_ms()) : 0;
        if (coord_next_event(a, wait, &ev) == 0) {
            if (coord_leader_term_event(&ta, S(ws), ev)) {
                if (ta.state == COORD_LEADER_DRAINING && !drained) {
                    drained = true;
                    CHECK_STR(ta.end_reason, "max_hold");
                    CHECK_EQ(coord_leader_claim(a, S(ws), ta.generation, "x", NULL),
                             COORD_EDRAINING);
                }
                if (ta.state == COORD_LEADER_RELEASED) {
                    lost = true;
                    snprintf(lost_reason, sizeof lost_reason, "%s", ta.end_reason);
                }
            }
            coord_reply_free(ev);
        }
        if (!lost && now_ms() >= next_renew) {
            coord_leader_renew(a, S(ws), ta.generation, NULL);
            next_renew = now_ms() + 100;
        }
    }
    CHECK(drained);
    CHECK(lost);
    CHECK_STR(lost_reason, "max_hold");
    CHECK(await_done(b, &d));
    CHECK_EQ(tb.state, COORD_LEADER_LEADER);
    CHECK(tb.generation > ta.generation);
    CHECK(stat_of(op, "terms_reached_max_hold") != UINT64_MAX &&
          stat_of(op, "terms_reached_max_hold") >= 1);
    CHECK_EQ_U(stat_of(op, "terms_over_max_hold"), 0);
    CHECK(stat_of(op, "terms_fenced_max_hold") != UINT64_MAX &&
          stat_of(op, "terms_fenced_max_hold") >= 1);
    coord_close(a);
    coord_close(b);
    coord_close(op);
    stop();
}

int main(int argc, char **argv)
{
    static const struct test_case tests[] = {
        { "define_describe", test_define_describe },
        { "pin_policy_incident", test_pin_policy_incident },
        { "term_states", test_term_states },
        { "claims", test_claims },
        { "check_history", test_check_history },
        { "max_hold", test_max_hold },
        { NULL, NULL },
    };
    return run_tests(argc, argv, tests);
}
