/* client.c - one forked client process: its own libcoord connection, a
 * role (leader rounds, lock holder/waiter, flight owner/follower, or a
 * one-shot stealer), reconnects with backoff when the broker goes away.
 * Everything it observes goes into the shared table; the checks that need
 * only what this process saw are made here (see fault.h for the ordering
 * argument behind each). */
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>
#include "coord.h"
#include "fault.h"
#include "client.h"

bool conn_err(int rc)
{
    /* --etcd: UNAVAILABLE (etcd out of reach, a write's outcome unknown)
     * is handled as a lost connection: the call's outcome is unknown, the
     * client drops its connection (ending its terms) and starts again */
    if (CFG->etcd && rc == COORD_EUNAVAILABLE)
        return true;
    return rc == COORD_ECLOSED || rc == COORD_EPROTOCOL || rc == COORD_ECONNECT ||
           rc == COORD_ESHUTTING_DOWN || rc == COORD_ESYS;
}

/* A write or grant acknowledged although sent and answered inside one etcd
 * outage (o1 read before sending, o2 after the answer): nothing could
 * have decided it but the broker's own memory. */
void check_fail_open(struct cl *k, uint64_t o1, const char *what, const char *ws,
                     uint64_t gen)
{
    if (!(o1 & 1) || atomic_load(&S->etcd_outage) != o1)
        return;
    CNT(outage_calls);
    VIOL(fail_open, "%s: %s of %s generation %" PRIu64 " acknowledged while etcd was "
         "stopped or dead (sent and answered inside one outage)", k->name, what, ws, gen);
}

void block(struct cl *k, int what, uint64_t ms)
{
    uint64_t now = now_ns();
    atomic_store(&k->sl->block_what, what);
    atomic_store(&k->sl->block_start_ns, now);
    atomic_store(&k->sl->block_deadline_ns, now + ms * 1000000ull);
}

void unblock(struct cl *k)
{
    atomic_store(&k->sl->block_deadline_ns, 0);
}

void set_state(struct cl *k, int st, int target, uint64_t gen)
{
    atomic_store(&k->sl->target, target);
    atomic_store(&k->sl->gen, gen);
    atomic_store(&k->sl->state, st);
}

void finish(struct cl *k, int status)
{
    set_state(k, ST_IDLE, 0, 0);
    coord_close(k->c);
    _exit(status);
}

void drop_conn(struct cl *k)
{
    coord_close(k->c);
    k->c = NULL;
    k->nlost = k->nlklost = k->naborts = 0;
}

/* a call failed: connection errors close the handle (the caller
 * reconnects), anything else not expected is a violation */
void call_failed(struct cl *k, const char *what, int rc)
{
    if (rc == COORD_EUNAVAILABLE && CFG->etcd)
        CNT(etcd_unavailable);
    if (conn_err(rc)) {
        CNT(conn_lost);
        drop_conn(k);
        return;
    }
    VIOL(unexpected, "%s: %s: %s (%s)", k->name, what, coord_strerror(rc),
         k->c ? coord_error_message(k->c) : "");
}

void ensure_conn(struct cl *k)
{
    if (k->c)
        return;
    set_state(k, ST_CONNECTING, 0, 0);
    coord_options o;
    coord_options_init(&o);
    o.socket_path = broker_socket(k->machine);          /* its machine's broker */
    o.scope = SCOPE;
    o.client_name = k->name;
    o.no_autostart = true;
    uint64_t backoff = 5;
    bool first = true;
    block(k, 1, RECONNECT_DEADLINE_MS);
    for (;;) {
        if (atomic_load(&S->end))
            _exit(0);
        int rc = coord_connect(&k->c, &o);
        if (rc == 0)
            break;
        if (rc != COORD_ECONNECT && !conn_err(rc))
            VIOL(unexpected, "%s: connect: %s", k->name, coord_strerror(rc));
        CNT(connect_retries);
        sleep_ms(backoff + rng_below(&k->r, backoff));
        if (backoff < 200)
            backoff *= 2;
        first = false;
    }
    unblock(k);
    if (!first || k->sl->spawned_ns + 1000000000ull < now_ns())
        CNT(reconnects);
    set_state(k, ST_IDLE, 0, 0);
}

/* ---- events ---- */

static void copy_reason(char *dst, const char *s, size_t n)
{
    if (n > 15)
        n = 15;
    memcpy(dst, s, n);
    dst[n] = '\0';
}

static void note_event(struct cl *k, coord_reply_t *ev)
{
    coord_leader_lost ll;
    coord_lock_lost lk;
    coord_flight_abort fa;
    if (coord_event_leader_lost(ev, &ll)) {
        unsigned ws = 0;
        for (unsigned i = 0; i < CFG->nws; i++) {
            const char *n = ws_name(i);
            if (strlen(n) == ll.workstream_len && memcmp(n, ll.workstream, ll.workstream_len) == 0)
                ws = i;
        }
        unsigned i = k->nlost++ % EVRING;
        k->lost[i].ws = ws;
        k->lost[i].gen = ll.generation;
        copy_reason(k->lost[i].reason, ll.reason, ll.reason_len);
        if (ll.reason_len == 7 && memcmp(ll.reason, "expired", 7) == 0)
            CNT(lost_expired);
        else if (ll.reason_len == 6 && memcmp(ll.reason, "stolen", 6) == 0)
            CNT(lost_stolen);
        else
            CNT(lost_other);
    } else if (coord_event_lock_lost(ev, &lk)) {
        unsigned i = k->nlklost++ % EVRING;
        k->lklost[i].lock = lk.lock;
        copy_reason(k->lklost[i].reason, lk.reason, lk.reason_len);
        if (lk.reason_len == 6 && memcmp(lk.reason, "stolen", 6) == 0)
            CNT(lock_lost_stolen);
        else
            CNT(lock_lost_expired);
    } else if (coord_event_flight_abort(ev, &fa)) {
        unsigned i = k->naborts++ % EVRING;
        k->aborts[i].flight = fa.flight;
        copy_reason(k->aborts[i].reason, fa.reason, fa.reason_len);
        CNT(flight_abort_ev);
        if (fa.reason_len == 10 && memcmp(fa.reason, "superseded", 10) == 0)
            CNT(flight_superseded_ev);
    }
}

/* reads queued events; waits up to timeout_ms for the first one */
static int pump(struct cl *k, int timeout_ms)
{
    for (;;) {
        coord_reply_t *ev = NULL;
        int rc = coord_next_event(k->c, timeout_ms, &ev);
        if (rc == COORD_EAGAIN)
            return 0;
        if (rc < 0)
            return rc;
        note_event(k, ev);
        coord_reply_free(ev);
        timeout_ms = 0;
    }
}

static bool have_lost(struct cl *k, unsigned ws, uint64_t gen)
{
    unsigned n = k->nlost < EVRING ? k->nlost : EVRING;
    for (unsigned i = 0; i < n; i++)
        if (k->lost[i].ws == ws && k->lost[i].gen == gen)
            return true;
    return false;
}

static bool have_lklost(struct cl *k, uint64_t lock)
{
    unsigned n = k->nlklost < EVRING ? k->nlklost : EVRING;
    for (unsigned i = 0; i < n; i++)
        if (k->lklost[i].lock == lock)
            return true;
    return false;
}

static bool have_abort(struct cl *k, uint64_t flight)
{
    unsigned n = k->naborts < EVRING ? k->naborts : EVRING;
    for (unsigned i = 0; i < n; i++)
        if (k->aborts[i].flight == flight)
            return true;
    return false;
}

/* After FENCED on this (live) connection the broker must have told us:
 * the event is sent when leadership ends, so it is already on the wire
 * ahead of the FENCED reply.  Waits a little anyway. */
static void expect_leader_lost(struct cl *k, unsigned ws, uint64_t gen, const char *what)
{
    uint64_t until = now_ns() + 1000000000ull;
    block(k, 2, CLIENT_DEADLINE_MS);
    while (!have_lost(k, ws, gen)) {
        uint64_t now = now_ns();
        if (now >= until) {
            VIOL(lost_missing, "%s: %s FENCED for %s generation %" PRIu64
                 " without a leader.lost event", k->name, what, ws_name(ws), gen);
            break;
        }
        int rc = pump(k, (int)((until - now) / 1000000) + 1);
        if (rc < 0) {
            call_failed(k, "next_event", rc);
            break;
        }
    }
    unblock(k);
}

static bool expect_ev(struct cl *k, bool (*have)(struct cl *, uint64_t), uint64_t id)
{
    uint64_t until = now_ns() + 1000000000ull;
    block(k, 2, CLIENT_DEADLINE_MS);
    bool ok = true;
    while (!have(k, id)) {
        uint64_t now = now_ns();
        if (now >= until) {
            ok = false;
            break;
        }
        int rc = pump(k, (int)((until - now) / 1000000) + 1);
        if (rc < 0) {
            call_failed(k, "next_event", rc);
            break;
        }
    }
    unblock(k);
    return ok;
}

/* ---- leadership ---- */

static void push_op(unsigned ws, uint64_t op)
{
    struct wsinfo *w = &S->ws[ws];
    uint32_t i = atomic_fetch_add(&w->ops_pos, 1) % OPS_RING;
    atomic_store(&w->ops[i], op);
}

/* a grant observed: checks and records it.  m0 is max_granted read
 * before the campaign was sent. */
static void record_grant(struct cl *k, unsigned ws, uint64_t gen, uint64_t m0, uint64_t t_sent)
{
    uint64_t t = now_ns();
    struct wsinfo *w = &S->ws[ws];
    if (gen <= m0)
        VIOL(gen_backwards, "%s: granted %s generation %" PRIu64 " but %" PRIu64
             " was granted before the campaign was sent", k->name, ws_name(ws), gen, m0);
    atomic_max_u64(&w->max_granted, gen);
    atomic_max_u64(&w->max_granted_seq, seq_next());
    atomic_fetch_add(&w->grants, 1);
    CNT(grants);
    uint64_t bt = atomic_load(&S->bkill_ns[ws]);
    if (bt && gen > atomic_load(&S->bkill_gen[ws]) && t > bt &&
        atomic_compare_exchange_strong(&S->bkill_ns[ws], &bt, 0)) {
        uint64_t i = atomic_fetch_add(&S->nbtrans, 1);
        if (i < BTRANS_CAP)
            atomic_store(&S->btrans[i], (uint32_t)((t - bt) / 1000000));
    }
    uint64_t kt = atomic_load(&w->kill_ns);
    if (kt && gen > atomic_load(&w->kill_gen) && t > kt &&
        atomic_compare_exchange_strong(&w->kill_ns, &kt, 0)) {
        uint64_t i = atomic_fetch_add(&S->ntrans, 1);
        if (i < TRANS_CAP) {
            uint64_t us = (t - kt) / 1000;
            uint32_t kind = atomic_load(&w->kill_kind);
            uint32_t v = us > TRANS_US_MASK ? TRANS_US_MASK : (uint32_t)us;
            v |= (kind & 3u) << TRANS_KIND_SHIFT;
            if (!atomic_load(&w->kill_waiters))
                v |= TRANS_NO_WAITER;
            atomic_store(&TRANS[i], v);
            if (getenv("FAULT_DEBUG") && us > 50000)
                fprintf(stderr, "coord-fault: slow %s transition %s gen %" PRIu64 ": %.1f ms; "
                        "campaign sent %.1f ms after the fault, waited %.1f ms, %u waiters\n",
                        tkind_name[kind & 3u], ws_name(ws), gen, us / 1000.0,
                        ((double)t_sent - (double)kt) / 1e6, (t - t_sent) / 1e6,
                        atomic_load(&w->kill_waiters));
        }
    }
}

/* the driver let the lease of (ws, gen) pass while this process was
 * stopped */
static bool was_stopped(struct cl *k, unsigned ws, uint64_t gen)
{
    return atomic_load(&k->sl->stop_gen) == gen && atomic_load(&k->sl->stop_ws) == (int)ws;
}

/* leader.info as one line, for violation reports */
static void info_line(struct cl *k, unsigned ws, char *buf, size_t n)
{
    coord_reply_t *r = NULL;
    buf[0] = '\0';
    if (k->c && coord_leader_info(k->c, ws_name(ws), strlen(ws_name(ws)), &r) == 0) {
        char *j = coord_map_json(coord_reply_map(r));
        snprintf(buf, n, "%s", j ? j : "");
        free(j);
        coord_reply_free(r);
    }
}

static void check_not_stopped(struct cl *k, uint64_t gen, uint64_t seq_s, const char *what,
                              unsigned ws)
{
    if (was_stopped(k, ws, gen) && seq_s > atomic_load(&k->sl->cont_seq)) {
        char info[200];
        info_line(k, ws, info, sizeof info);
        VIOL(stop_not_fenced, "%s: %s accepted for %s generation %" PRIu64
             " after being stopped past its lease; info %s", k->name, what, ws_name(ws),
             gen, info);
    }
}

enum { T_OK, T_FENCED, T_GONE };

/* one leader.commit: returns T_OK, T_FENCED (term over) or T_GONE */
static int do_commit(struct cl *k, unsigned ws, uint64_t gen, uint64_t *mine, unsigned *nmine,
                     bool lapsed)
{
    struct wsinfo *w = &S->ws[ws];
    uint64_t op = 0;
    unsigned p = (unsigned)rng_below(&k->r, 100);
    uint32_t epoch = atomic_load(&S->wipes) + 1;
    if (p < 12 && *nmine) {
        op = mine[rng_below(&k->r, *nmine)];
    } else if (p < 27) {
        uint64_t cand = atomic_load(&w->ops[rng_below(&k->r, OPS_RING)]);
        if (cand && cand < OPS_CAP && atomic_load(&OPS[cand].ws) == ws + 1)
            op = cand;
    }
    /* a wiped ledger forgot the op ids applied before: never re-sent */
    if (op && atomic_load(&OPS[op].epoch) != epoch)
        op = 0;
    if (!op) {
        op = atomic_fetch_add(&S->next_op, 1);
        if (op >= OPS_CAP)
            return T_OK;                /* table full: nothing more to commit */
        atomic_store(&OPS[op].ws, ws + 1);
        atomic_store(&OPS[op].epoch, epoch);
        if (*nmine < 8)
            mine[(*nmine)++] = op;
    }
    struct oprec *o = &OPS[op];
    uint64_t zero = 0;
    atomic_compare_exchange_strong(&o->first_gen, &zero, gen);
    uint64_t fg = atomic_load(&o->first_gen);
    if (atomic_fetch_add(&o->attempts, 1) > 0) {
        if (fg < gen)
            CNT(resend_later_gen);
        else
            CNT(resend_same_gen);
    }
    uint64_t idx = atomic_fetch_add(&S->ncrec, 1);
    if (idx >= CREC_CAP)
        return T_OK;
    unsigned key = (unsigned)rng_below(&k->r, NKEYS);
    struct crec *cr = &CREC[idx];
    cr->op = op;
    cr->gen = gen;
    cr->ws = (uint16_t)ws;
    cr->key = (uint16_t)key;
    cr->pid = getpid();
    char opid[32], val[96];
    snprintf(opid, sizeof opid, "o%" PRIu64, op);
    int vlen = snprintf(val, sizeof val, "c%" PRIu64 " g%" PRIu64 " o%" PRIu64, idx, gen, op);
    uint64_t m_granted = atomic_load(&w->max_granted);
    uint64_t m_applied = atomic_load(&w->max_applied_gen);
    uint64_t seq_s = seq_next();
    cr->seq_s = seq_s;
    atomic_thread_fence(memory_order_seq_cst);
    coord_commit_result res;
    CNT(commits_sent);
    uint64_t out1 = atomic_load(&S->etcd_outage);
    block(k, 3, CLIENT_DEADLINE_MS);
    int rc = coord_leader_commit(k->c, ws_name(ws), strlen(ws_name(ws)), gen, opid,
                                 key_name(key), val, (size_t)vlen, &res);
    unblock(k);
    uint64_t seq_r = seq_next();
    if (rc == 0 && (res.applied || res.duplicate))
        check_fail_open(k, out1, res.applied ? "commit" : "commit (duplicate)",
                        ws_name(ws), gen);
    if (rc == 0 && res.applied) {
        atomic_store(&cr->seq_r, seq_r);
        atomic_store(&cr->outcome, OUT_APPLIED);
        CNT(commits_applied);
        if (atomic_fetch_add(&o->applied, 1) > 0)
            VIOL(op_twice, "%s: op %s applied again by %s generation %" PRIu64,
                 k->name, opid, ws_name(ws), gen);
        uint64_t ds = atomic_load(&o->dup_seq);
        if (ds && ds < seq_s)
            VIOL(op_twice, "%s: op %s applied by generation %" PRIu64
                 " after a duplicate answer for it", k->name, opid, gen);
        atomic_store(&o->applied_gen, gen);
        if (gen < m_granted)
            VIOL(stale_commit, "%s: commit %s applied with %s generation %" PRIu64
                 " after generation %" PRIu64 " had been granted", k->name, opid,
                 ws_name(ws), gen, m_granted);
        if (gen < m_applied)
            VIOL(two_live, "%s: commit %s applied with %s generation %" PRIu64
                 " after a commit of generation %" PRIu64 " was applied", k->name, opid,
                 ws_name(ws), gen, m_applied);
        if (lapsed)
            VIOL(lapse_not_fenced, "%s: commit %s applied with %s generation %" PRIu64
                 " after its lease lapsed", k->name, opid, ws_name(ws), gen);
        check_not_stopped(k, gen, seq_s, "commit", ws);
        atomic_max_u64(&w->max_applied_gen, gen);
        atomic_max_u64(&w->key_applied_seq[key], seq_s);
        push_op(ws, op);
        return T_OK;
    }
    if (rc == 0 && res.duplicate) {
        atomic_store(&cr->seq_r, seq_r);
        atomic_store(&cr->outcome, OUT_DUPLICATE);
        CNT(commits_duplicate);
        uint64_t G = res.generation, ag = atomic_load(&o->applied_gen);
        if (G == 0 || G > gen || G < fg || (ag && ag != G))
            VIOL(dup_wrong, "%s: op %s duplicate says generation %" PRIu64
                 " (sent by %" PRIu64 ", first sent by %" PRIu64 ", applied by %" PRIu64 ")",
                 k->name, opid, G, gen, fg, ag);
        uint64_t z = 0;
        atomic_compare_exchange_strong(&o->dup_seq, &z, seq_r);
        if (gen < m_granted)
            VIOL(stale_commit, "%s: commit %s answered duplicate (accepted) with %s "
                 "generation %" PRIu64 " after generation %" PRIu64 " had been granted",
                 k->name, opid, ws_name(ws), gen, m_granted);
        if (lapsed)
            VIOL(lapse_not_fenced, "%s: commit %s accepted (duplicate) with %s generation %"
                 PRIu64 " after its lease lapsed", k->name, opid, ws_name(ws), gen);
        check_not_stopped(k, gen, seq_s, "commit (duplicate)", ws);
        return T_OK;
    }
    if (rc == 0) {
        atomic_store(&cr->outcome, OUT_ERROR);
        VIOL(unexpected, "%s: commit %s: neither applied nor duplicate", k->name, opid);
        return T_OK;
    }
    if (rc == COORD_EFENCED) {
        atomic_store(&cr->seq_r, seq_r);
        atomic_store(&cr->outcome, OUT_FENCED);
        CNT(commits_fenced);
        push_op(ws, op);            /* never applied by this attempt: re-send it later */
        if (was_stopped(k, ws, gen))
            CNT(stopped_fenced);
        expect_leader_lost(k, ws, gen, "commit");
        return T_FENCED;
    }
    if (conn_err(rc)) {
        atomic_store(&cr->outcome, OUT_LOST);
        CNT(commits_lost);
        push_op(ws, op);
        call_failed(k, "commit", rc);
        return T_GONE;
    }
    atomic_store(&cr->outcome, OUT_ERROR);
    call_failed(k, "commit", rc);
    return T_FENCED;
}

static int do_renew(struct cl *k, unsigned ws, uint64_t gen)
{
    uint64_t seq_s = seq_next();
    block(k, 4, CLIENT_DEADLINE_MS);
    int rc = coord_leader_renew(k->c, ws_name(ws), strlen(ws_name(ws)), gen, NULL);
    unblock(k);
    if (rc == 0) {
        CNT(renews_ok);
        check_not_stopped(k, gen, seq_s, "renew", ws);
        return T_OK;
    }
    if (rc == COORD_EFENCED) {
        CNT(renews_fenced);
        if (was_stopped(k, ws, gen))
            CNT(stopped_fenced);
        expect_leader_lost(k, ws, gen, "renew");
        return T_FENCED;
    }
    call_failed(k, "renew", rc);
    return conn_err(rc) ? T_GONE : T_FENCED;
}

static void do_resign(struct cl *k, unsigned ws, uint64_t gen)
{
    uint64_t seq_s = seq_next();
    block(k, 5, CLIENT_DEADLINE_MS);
    int rc = coord_leader_resign(k->c, ws_name(ws), strlen(ws_name(ws)), gen);
    unblock(k);
    if (rc == 0) {
        CNT(resigns_ok);
        check_not_stopped(k, gen, seq_s, "resign", ws);
    } else if (rc == COORD_EFENCED) {
        CNT(resigns_fenced);
        if (was_stopped(k, ws, gen))
            CNT(stopped_fenced);
        expect_leader_lost(k, ws, gen, "resign");
    } else {
        call_failed(k, "resign", rc);
    }
}

/* A term: commits (some op ids re-sent), renews, then an ending. */
static void leader_term(struct cl *k, unsigned ws, uint64_t gen, uint64_t lease,
                        unsigned ncommits, bool stealer)
{
    uint64_t mine[8];
    unsigned nmine = 0;
    uint64_t last_renew = now_ns();
    for (unsigned i = 0; i < ncommits; i++) {
        if (now_ns() - last_renew > lease * 1000000ull / 3 || rng_pct(&k->r, 20)) {
            int t = do_renew(k, ws, gen);
            if (t != T_OK)
                return;
            last_renew = now_ns();
        }
        int t = do_commit(k, ws, gen, mine, &nmine, false);
        if (t != T_OK)
            return;
        if (rng_pct(&k->r, 2))
            sleep_ms(rng_range(&k->r, lease / 4, lease / 3));   /* renewing is needed */
        else if (rng_pct(&k->r, 60))
            sleep_ms(rng_below(&k->r, 8));
    }
    if (stealer) {
        set_state(k, ST_IDLE, 0, 0);
        do_resign(k, ws, gen);
        return;
    }
    unsigned p = (unsigned)rng_below(&k->r, 100);
    if (p < 3) {                        /* die while leading */
        CNT(leader_exits);
        _exit(0);
    }
    if (p < 8) {                        /* close the connection while leading */
        CNT(leader_drops);
        set_state(k, ST_IDLE, 0, 0);
        drop_conn(k);
        return;
    }
    /* let the lease lapse, then try once more (a default lease: a
     * quarter as often, each lapse holds the workstream for 1.5 s) */
    if (p < 12 && (!atomic_load(&k->sl->default_lease) || rng_pct(&k->r, 25))) {
        CNT(lapses);
        if (atomic_load(&k->sl->default_lease))
            trans_begin(ws, gen, TK_LAPSE, trans_waiters(ws, k->slot));
        uint64_t margin = lease / 2 > 200 ? lease / 2 : 200;
        sleep_ms(lease + margin);
        int t = do_commit(k, ws, gen, mine, &nmine, true);
        if (t == T_OK)
            do_resign(k, ws, gen);
        set_state(k, ST_IDLE, 0, 0);
        return;
    }
    set_state(k, ST_IDLE, 0, 0);
    do_resign(k, ws, gen);
}

static void leader_round(struct cl *k, unsigned ws, bool steal)
{
    struct wsinfo *w = &S->ws[ws];
    coord_leader_opts lo = { 0 };
    /* a third of the terms hold the broker's default lease (lease_ms 0):
     * the frozen and lapsed leaders are timed with it */
    bool dflt = rng_pct(&k->r, 33);
    lo.lease_ms = dflt ? 0 : rng_range(&k->r, 200, 500);
    unsigned p = (unsigned)rng_below(&k->r, 100);
    if (steal || (p < 2 && !CFG->no_steals)) {
        lo.steal = true;
        CNT(leader_steals);
    } else if (p < 8) {
        lo.if_available = true;
    } else {
        lo.timeout_ms = BROKER_WAIT_MS;
    }
    set_state(k, steal ? ST_STEALING : ST_CAMPAIGNING, (int)ws, 0);
    atomic_store(&k->sl->default_lease, 0);
    atomic_store(&k->sl->lease_ms, dflt ? COORD_LEADER_DEFAULT_LEASE_MS : lo.lease_ms);
    uint64_t m0 = atomic_load(&w->max_granted);
    CNT(campaigns);
    uint64_t t_sent = now_ns();
    /* an injected steal: the transition from the leader it takes over */
    if (steal && m0)
        trans_begin(ws, m0, TK_STEAL, trans_waiters(ws, k->slot));
    uint64_t out1 = atomic_load(&S->etcd_outage);
    block(k, 6, CLIENT_DEADLINE_MS);
    coord_leader_term term;
    int rc = coord_leader_campaign_term(k->c, ws_name(ws), strlen(ws_name(ws)), &lo, &term);
    unblock(k);
    bool granted = rc == 0 && term.state == COORD_LEADER_LEADER;
    uint64_t gen = granted ? term.generation : 0;
    if (granted)
        check_fail_open(k, out1, "grant", ws_name(ws), gen);
    if (rc == COORD_ETIMEOUT) {
        CNT(campaign_timeout);
    } else if (rc == COORD_EABORTED) {
        CNT(campaign_aborted);
    } else if (rc < 0) {
        call_failed(k, "campaign", rc);
    } else if (!granted) {
        CNT(campaign_busy);
    }
    if (rc < 0 || !granted) {
        /* a steal that took nothing over ends no transition */
        uint64_t kt = atomic_load(&w->kill_ns);
        if (steal && kt >= t_sent && atomic_load(&w->kill_kind) == TK_STEAL)
            atomic_compare_exchange_strong(&w->kill_ns, &kt, 0);
        set_state(k, ST_IDLE, 0, 0);
        return;
    }
    /* the lease granted: the broker's default when none was asked */
    uint64_t lease = term.lease_ms ? term.lease_ms : dflt ? COORD_LEADER_DEFAULT_LEASE_MS
                                                          : lo.lease_ms;
    atomic_store(&k->sl->lease_ms, lease);
    atomic_store(&k->sl->default_lease, dflt);
    record_grant(k, ws, gen, m0, t_sent);
    set_state(k, ST_LEADING, (int)ws, gen);
    leader_term(k, ws, gen, lease, steal ? 1 : (unsigned)rng_range(&k->r, 1, 5), steal);
    if (atomic_load(&k->sl->state) == ST_LEADING)
        set_state(k, k->c ? ST_IDLE : ST_CONNECTING, 0, 0);
}

/* ---- locks ---- */

/* writes token to the fenced resource; false when a newer token is there */
static bool resource_write(unsigned li, uint64_t token)
{
    _Atomic uint64_t *res = &S->locks[li].resource;
    uint64_t cur = atomic_load(res);
    for (;;) {
        if (cur > token) {
            CNT(resource_fenced);
            return false;
        }
        if (cur == token || atomic_compare_exchange_weak(res, &cur, token))
            return true;
    }
}

static void lock_round(struct cl *k, unsigned li, bool steal)
{
    struct lockinfo *L = &S->locks[li];
    coord_lock_opts lo = { 0 };
    lo.lease_ms = 1500;
    unsigned p = (unsigned)rng_below(&k->r, 100);
    if (steal || p < 4) {
        lo.steal = true;
        CNT(lock_steals);
    } else if (p < 14) {
        lo.if_available = true;
    } else {
        lo.timeout_ms = BROKER_WAIT_MS;
    }
    set_state(k, steal ? ST_STEALING : ST_LOCK_WAITING, (int)li, 0);
    uint64_t m0 = atomic_load(&L->max_token);
    uint64_t lock = 0, token = 0;
    block(k, 7, CLIENT_DEADLINE_MS);
    int rc = coord_lock_acquire(k->c, lock_name(li), strlen(lock_name(li)), &lo, &lock, &token);
    unblock(k);
    if (rc == COORD_LOCK_BUSY) {
        CNT(lock_busy);
    } else if (rc == COORD_ETIMEOUT) {
        CNT(lock_timeout);
    } else if (rc < 0) {
        call_failed(k, "lock.acquire", rc);
    }
    if (rc != 0) {
        set_state(k, ST_IDLE, 0, 0);
        return;
    }
    CNT(lock_grants);
    if (token <= m0)
        VIOL(token_backwards, "%s: lock %s token %" PRIu64 " not above %" PRIu64
             " granted before the request", k->name, lock_name(li), token, m0);
    atomic_max_u64(&L->max_token, token);
    set_state(k, ST_LOCK_HOLDING, (int)li, token);
    bool refused = false;
    unsigned steps = (unsigned)rng_range(&k->r, 1, 4);
    for (unsigned i = 0; i < steps; i++) {
        if (!resource_write(li, token))
            refused = true;
        sleep_ms(rng_range(&k->r, 1, steal ? 10 : 15));
    }
    if (!resource_write(li, token))
        refused = true;
    if (!steal) {
        p = (unsigned)rng_below(&k->r, 100);
        if (p < 3)
            _exit(0);                   /* die holding it */
        if (p < 6) {
            set_state(k, ST_IDLE, 0, 0);
            drop_conn(k);
            return;
        }
    }
    set_state(k, ST_IDLE, 0, 0);
    block(k, 8, CLIENT_DEADLINE_MS);
    rc = coord_lock_release(k->c, lock);
    unblock(k);
    if (rc == 0) {
        CNT(lock_release_ok);
        if (refused)
            VIOL(lock_exclusion, "%s: lock %s token %" PRIu64 " still held at release, "
                 "yet a newer holder wrote the resource meanwhile", k->name,
                 lock_name(li), token);
        pump(k, 0);
        if (have_lklost(k, lock))
            VIOL(lock_exclusion, "%s: lock %s released ok after lock.lost", k->name,
                 lock_name(li));
    } else if (rc == COORD_EUNKNOWN_LOCK) {
        CNT(lock_release_unknown);
        if (!expect_ev(k, have_lklost, lock))
            VIOL(lost_missing, "%s: lock %s token %" PRIu64 " gone at release without "
                 "lock.lost", k->name, lock_name(li), token);
    } else {
        call_failed(k, "lock.release", rc);
    }
}

/* ---- single-flight ---- */

static bool fence_was_refused(unsigned fi, uint64_t fence)
{
    struct fkinfo *F = &S->fkeys[fi];
    for (unsigned i = 0; i < FENCED_RING; i++)
        if (atomic_load(&F->fenced[i]) == fence)
            return true;
    return false;
}

static void check_result(struct cl *k, unsigned fi, const coord_flight *f)
{
    uint64_t pf = 0;
    if (f->result_len < 2 || sscanf(f->result, "F%" SCNu64, &pf) != 1) {
        if (f->result_len >= 5 && memcmp(f->result, "once ", 5) == 0)
            return;                 /* a coord_once owner's result */
        VIOL(flight_result, "%s: flight %s result \"%.40s\" unreadable", k->name,
             fkey_name(fi), (const char *)f->result);
        return;
    }
    if (f->fence && pf != f->fence)
        VIOL(flight_result, "%s: flight %s result written with fence %" PRIu64
             " delivered with fence %" PRIu64, k->name, fkey_name(fi), pf, f->fence);
    if (fence_was_refused(fi, pf))
        VIOL(flight_result, "%s: flight %s delivered a result of fence %" PRIu64
             " whose complete was FENCED", k->name, fkey_name(fi), pf);
}

static int once_work(void *ud, void **result, size_t *len, char **err_code, char **err_msg)
{
    struct cl *k = ud;
    (void)err_code;
    (void)err_msg;
    set_state(k, ST_FLIGHT_OWNER, atomic_load(&k->sl->target), 0);
    sleep_ms(rng_range(&k->r, 2, 30));
    char *s = malloc(48);
    if (!s)
        return COORD_WORK_RETRYABLE;
    *len = (size_t)snprintf(s, 48, "once %d", (int)getpid());
    *result = s;
    return COORD_WORK_OK;
}

/* The version of this client's code: half the clients run the newer one. */
static const char *const flight_versions[FLIGHT_VERSIONS] = { "v1", "v2" };

/* Which version's flight an owner runs (its join reply says). */
static unsigned flight_version_of(const coord_flight *f)
{
    for (unsigned v = 0; v < FLIGHT_VERSIONS; v++)
        if (f->version && strcmp(f->version, flight_versions[v]) == 0)
            return v;
    return 0;
}

/* One outcome per flight: the flight's accepted outcome is noted; a
 * second one for the same flight id is a violation. */
static void note_outcome(struct cl *k, unsigned fi, uint64_t flight)
{
    struct fkinfo *F = &S->fkeys[fi];
    for (unsigned i = 0; i < FENCED_RING; i++)
        if (atomic_load(&F->done[i]) == flight)
            VIOL(flight_twice, "%s: flight %s id %" PRIu64 " had a second outcome accepted",
                 k->name, fkey_name(fi), flight);
    uint32_t i = atomic_fetch_add(&F->done_pos, 1) % FENCED_RING;
    atomic_store(&F->done[i], flight);
}

static void flight_round(struct cl *k, unsigned fi)
{
    struct fkinfo *F = &S->fkeys[fi];
    coord_flight_opts fo = { 0 };
    fo.owner_ttl_ms = 1000;
    fo.wait_ms = BROKER_WAIT_MS;
    if (rng_pct(&k->r, 25))
        fo.max_age_ms = 300;
    /* version skew: two versions of the code race on the keys; some joins
     * run a flight of their own beside the other version's */
    unsigned myver = (unsigned)k->slot % FLIGHT_VERSIONS;
    fo.version = flight_versions[myver];
    fo.own_version = rng_pct(&k->r, 30);
    /* a fresh request superseding a running owner (§15) */
    if (rng_pct(&k->r, 4))
        fo.supersede = true;
    else if (rng_pct(&k->r, 4))
        fo.priority = (uint64_t)rng_range(&k->r, 1, 3);
    set_state(k, ST_FLIGHT_JOINING, (int)fi, 0);
    coord_flight f;
    if (rng_pct(&k->r, 15)) {
        block(k, 9, CLIENT_DEADLINE_MS);
        int rc = coord_once(k->c, fkey_name(fi), strlen(fkey_name(fi)), &fo,
                            rng_pct(&k->r, 30) ? 400 : 0, once_work, k, &f);
        unblock(k);
        set_state(k, ST_IDLE, 0, 0);
        if (rc == 0) {
            if (f.ran)
                CNT(flight_owner);
            else if (f.role == COORD_FLIGHT_RESULT) {
                CNT(flight_result);
                if (f.from_record)
                    CNT(flight_record);
                check_result(k, fi, &f);
            } else if (f.role == COORD_FLIGHT_FAILED) {
                CNT(flight_failed);
            }
            coord_flight_clear(&f);
        } else if (rc == COORD_ETIMEOUT) {
            CNT(flight_timeout);
        } else if (rc == COORD_EFENCED) {
            CNT(flight_complete_fenced);
        } else {
            call_failed(k, "coord_once", rc);
        }
        return;
    }
    uint64_t m0[FLIGHT_VERSIONS];
    for (unsigned v = 0; v < FLIGHT_VERSIONS; v++)
        m0[v] = atomic_load(&F->max_fence[v]);
    uint64_t t0 = now_ns();
    block(k, 10, CLIENT_DEADLINE_MS);
    int rc = coord_flight_join(k->c, fkey_name(fi), strlen(fkey_name(fi)), &fo, &f);
    unblock(k);
    if (rc == COORD_ETIMEOUT) {
        CNT(flight_timeout);
        set_state(k, ST_IDLE, 0, 0);
        return;
    }
    if (rc < 0) {
        call_failed(k, "flight.join", rc);
        set_state(k, ST_IDLE, 0, 0);
        return;
    }
    if (f.role == COORD_FLIGHT_RESULT) {
        CNT(flight_result);
        if (f.from_record)
            CNT(flight_record);
        check_result(k, fi, &f);
        coord_flight_clear(&f);
        set_state(k, ST_IDLE, 0, 0);
        return;
    }
    if (f.role == COORD_FLIGHT_FAILED) {
        CNT(flight_failed);
        coord_flight_clear(&f);
        set_state(k, ST_IDLE, 0, 0);
        return;
    }
    /* owner */
    CNT(flight_owner);
    if (f.superseded)
        CNT(flight_supersedes);
    else if (now_ns() - t0 > 20000000ull)
        CNT(flight_promoted);
    unsigned fv = flight_version_of(&f);
    if (fv != myver)
        CNT(flight_version_owner);
    uint64_t fence = f.fence, flight = f.flight;
    if (f.superseded && f.superseded >= fence)
        VIOL(token_backwards, "%s: flight %s fence %" PRIu64 " superseded fence %" PRIu64
             " not below it", k->name, fkey_name(fi), fence, f.superseded);
    coord_flight_clear(&f);
    if (fence <= m0[fv])
        VIOL(token_backwards, "%s: flight %s (%s) fence %" PRIu64 " not above %" PRIu64
             " issued before the join", k->name, fkey_name(fi), flight_versions[fv], fence,
             m0[fv]);
    atomic_max_u64(&F->max_fence[fv], fence);
    set_state(k, ST_FLIGHT_OWNER, (int)fi, fence);
    bool overrun = rng_pct(&k->r, 3);
    if (overrun) {
        CNT(flight_overruns);
        sleep_ms(fo.owner_ttl_ms + 250);
    } else {
        sleep_ms(rng_range(&k->r, 2, 40));
    }
    if (rng_pct(&k->r, 2))
        _exit(0);                       /* die owning it */
    char res[64];
    int rlen = snprintf(res, sizeof res, "F%" PRIu64 " by %d", fence, (int)getpid());
    uint64_t m1 = atomic_load(&F->max_fence[fv]);
    set_state(k, ST_IDLE, 0, 0);
    block(k, 11, CLIENT_DEADLINE_MS);
    if (rng_pct(&k->r, 10))
        rc = coord_flight_fail(k->c, flight, fence, "WORK_FAILED", "on purpose",
                               rng_pct(&k->r, 50), 0);
    else
        rc = coord_flight_complete(k->c, flight, fence, res, (size_t)rlen,
                                   rng_pct(&k->r, 25) ? 400 : 0, NULL);
    unblock(k);
    if (rc == 0) {
        CNT(flight_complete_ok);
        note_outcome(k, fi, flight);
        if (m1 > fence)
            VIOL(flight_stale, "%s: flight %s fence %" PRIu64 " accepted after fence %"
                 PRIu64 " was issued", k->name, fkey_name(fi), fence, m1);
        if (overrun)
            VIOL(flight_stale, "%s: flight %s fence %" PRIu64 " accepted after its "
                 "owner_ttl passed", k->name, fkey_name(fi), fence);
    } else if (rc == COORD_EFENCED) {
        CNT(flight_complete_fenced);
        uint32_t i = atomic_fetch_add(&F->fenced_pos, 1) % FENCED_RING;
        atomic_store(&F->fenced[i], fence);
        if (overrun && !expect_ev(k, have_abort, flight))
            VIOL(lost_missing, "%s: flight %s owner past its ttl got no flight.abort",
                 k->name, fkey_name(fi));
    } else {
        call_failed(k, "flight.complete", rc);
    }
}

/* ---- main ---- */

void client_main(int slot)
{
    struct cl k = { 0 };
    k.slot = slot;
    k.sl = &S->slots[slot];
    k.provider = -1;
    /* locks and flights are each machine's own (only the leader ledger is
     * shared): a machine's lock and flight indexes are its own range, and
     * a stealer talks to the machine of the lock it steals */
    k.machine = (unsigned)slot % CFG->nbrokers;
    unsigned lbase = k.machine * CFG->nlocks, fbase = k.machine * CFG->nfkeys;
    if (atomic_load(&k.sl->role) == ROLE_STEAL_LOCK)
        k.machine = k.sl->arg / CFG->nlocks;
    k.r.s = k.sl->seed | 1;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    signal(SIGPIPE, SIG_IGN);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    int role = atomic_load(&k.sl->role);
    snprintf(k.name, sizeof k.name, "fault-%d-%s", slot,
             role == ROLE_LEADER ? "leader" : role == ROLE_LOCK ? "lock" :
             role == ROLE_FLIGHT ? "flight" : role == ROLE_OUTBOX ? "outbox" :
             role == ROLE_INCIDENT ? "incident" : role == ROLE_ROLLBACK ? "rollback" :
             "stealer");
    for (;;) {
        if (atomic_load(&S->end))
            finish(&k, 0);
        ensure_conn(&k);
        if (pump(&k, 0) < 0) {
            drop_conn(&k);
            continue;
        }
        switch (role) {
        case ROLE_LEADER:
            /* mostly a home workstream, so each has campaigners queued */
            leader_round(&k, rng_pct(&k.r, 80) ? (unsigned)slot % CFG->nws
                                               : (unsigned)rng_below(&k.r, CFG->nws), false);
            if (rng_pct(&k.r, 30))
                sleep_ms(rng_below(&k.r, 4));
            break;
        case ROLE_LOCK:
            lock_round(&k, lbase + (unsigned)rng_below(&k.r, CFG->nlocks), false);
            sleep_ms(rng_below(&k.r, 6));
            break;
        case ROLE_FLIGHT:
            flight_round(&k, fbase + (unsigned)rng_below(&k.r, CFG->nfkeys));
            sleep_ms(rng_below(&k.r, 6));
            break;
        case ROLE_STEAL_LOCK:
            lock_round(&k, k.sl->arg, true);
            finish(&k, 0);
        case ROLE_STEAL_LEADER:
            leader_round(&k, k.sl->arg, true);
            finish(&k, 0);
        case ROLE_OUTBOX:
            outbox_round(&k);
            if (rng_pct(&k.r, 30))
                sleep_ms(rng_below(&k.r, 4));
            break;
        case ROLE_INCIDENT:
            incident_run(&k);
            finish(&k, 0);
        case ROLE_ROLLBACK:
            rollback_run(&k);
            finish(&k, 0);
        default:
            _exit(3);
        }
    }
}
