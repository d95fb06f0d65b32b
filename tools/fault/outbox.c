/* outbox.c - the outbox under faults: outbox leaders, incident
 * takeovers, protocol rollbacks, and the driver's descriptor switches.
 *
 * An outbox leader campaigns with the deployed protocol version, reads
 * leader.pending first and reconciles every entry, then works through new
 * logical operations ("L<n>"): claim, perform the effect at the provider
 * (provider.c), commit.  A claim answered reconcile: true means an earlier
 * generation claimed the op and never settled it, so the effect is looked
 * up at the provider (STATUS) under the same op id before it is done
 * again.  Now and then a committed op is claimed again (a re-driven job):
 * it must answer applied.  The driver kills and freezes these leaders
 * between claim and effect and between effect and commit, switches
 * outbox-1's rollout mode, raises the deployed version (a rollout: the
 * ratchet) and later the descriptor file's floor to it, starts rollback
 * campaigns with the version before, disables outbox-0 for an incident
 * takeover, and wipes the data dir.  The descriptors are files (the
 * driver's side, at the end): a wipe keeps them, so the checks of policy
 * (mode_write, old_protocol against the file's floor, disabled_grant,
 * policy_steal) hold across wipes.
 *
 * Checks made here, from what this process saw (fault.h's ordering rule:
 * a value read before a request was sent and a value written after a
 * reply arrived bracket the broker's handling):
 *   stale_write     a claim/commit/abandon accepted with a generation below
 *                   one whose grant was seen before it was sent;
 *   mode_write      ... sent after a shadow/read-only file was applied and
 *                   before the next active one was written;
 *   unowned_op      an op whose claim was answered, never settled, missing
 *                   from the next leader's leader.pending (claims a wipe
 *                   deleted excepted);
 *   old_protocol    a grant with a version below the file's floor, or below
 *                   one granted before with no wipe between;
 *   disabled_grant  a non-incident grant on outbox-0 while it is disabled;
 *   policy_steal    a steal without incident granted on outbox-0;
 *   gen_backwards   a grant not above every earlier one (wipes included);
 *   max_hold        (counted per term here, judged by the driver at the
 *                   end) a write or renew accepted although it was sent
 *                   more than one lease after the leader read the
 *                   leader.drain max_hold event.
 * The provider checks that no op's effect is performed twice. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "client.h"

/* block_what indices (main.c names them) */
enum { BW_CAMPAIGN = 6, BW_CLAIM = 12, BW_PROVIDER = 13, BW_PENDING = 14, BW_OBCOMMIT = 15,
       BW_OBRENEW = 16, BW_DRIVER = 17 };

#define SLACK_NS 250000000ull       /* scheduling slack of the max-hold check */

unsigned OB_IGNORE_DRAIN_PCT = 20;
#define PENDING_MAX 64              /* entries reconciled per term */

struct term {
    unsigned ws;
    uint64_t gen, lease_ms, last_renew_ns;
    uint32_t version;
    bool incident;
    bool lost, ro, draining;
    bool ignore_drain;
    uint64_t drain_ns;              /* leader.drain max_hold read then (0: none) */
    bool overheld;
    uint64_t grant_ns;              /* the grant's reply read then */
    bool bg_over;                   /* counted in bg_overheld */
};

enum { GO_ON, STOP };

static bool name_is(coord_map m, const char *key, const char *want)
{
    const char *s;
    size_t n;
    return coord_map_str(m, key, &s, &n) && n == strlen(want) && memcmp(s, want, n) == 0;
}

static uint64_t lop_of(coord_map m, const char *key)
{
    const char *s;
    size_t n;
    char buf[32];
    if (!coord_map_str(m, key, &s, &n) || n < 2 || n >= sizeof buf || s[0] != 'L')
        return 0;
    memcpy(buf, s + 1, n - 1);
    buf[n - 1] = 0;
    return strtoull(buf, NULL, 10);
}

static int call(struct cl *k, coord_req_t *q, coord_reply_t **r, int what)
{
    uint64_t out1 = atomic_load(&S->etcd_outage);
    block(k, what, CLIENT_DEADLINE_MS);
    int rc = coord_call(k->c, q, r);
    unblock(k);
    coord_req_free(q);
    /* claims, commits, abandons and grants are decided by the ledger: none
     * can be acknowledged while etcd answers nothing (a refusal, an error
     * reply, is not an acknowledgement) */
    if (rc == 0 && *r &&
        (what == BW_OBCOMMIT || what == BW_CLAIM || what == BW_CAMPAIGN)) {
        bool granted = true;
        if (what == BW_CAMPAIGN)
            coord_map_bool(coord_reply_map(*r), "granted", &granted);
        if (granted)
            check_fail_open(k, out1, what == BW_OBCOMMIT ? "outbox commit/abandon"
                                   : what == BW_CLAIM ? "claim" : "outbox grant",
                            "an outbox workstream", 0);
    }
    return rc;
}

static coord_req_t *ws_req(const char *op, const struct term *t)
{
    coord_req_t *q = coord_req_new(op);
    coord_req_cstr(q, "workstream", ob_name(t->ws));
    coord_req_uint(q, "generation", t->gen);
    return q;
}

/* ---- events ---- */

static void take_events(struct cl *k, struct term *t)
{
    coord_reply_t *ev = NULL;
    while (k->c && coord_next_event(k->c, 0, &ev) == 0) {
        const char *name = coord_reply_event(ev);
        coord_map m = coord_reply_map(ev);
        uint64_t gen = 0;
        coord_map_uint(m, "generation", &gen);
        bool ours = name_is(m, "workstream", ob_name(t->ws)) && gen == t->gen;
        if (name && ours && !strcmp(name, "leader.drain")) {
            t->draining = true;
            if (name_is(m, "reason", "max_hold") && !t->drain_ns) {
                t->drain_ns = now_ns();
                CNT(ob_drains);
            }
        } else if (name && ours && !strcmp(name, "leader.mode")) {
            CNT(ob_mode_events);
            t->ro = !name_is(m, "mode", "active");
        } else if (name && ours && !strcmp(name, "leader.lost")) {
            t->lost = true;
            if (name_is(m, "reason", "max_hold"))
                CNT(ob_lost_max_hold);
        }
        coord_reply_free(ev);
    }
}

/* an accepted write or renew sent at send_ns: past the max-hold fence? */
static void check_hold(struct cl *k, struct term *t, uint64_t send_ns, const char *what)
{
    /* note 000's background holders: a term of the max-hold workstream
     * whose write or renew is accepted past max hold + one lease after its
     * grant exceeded the SLO, whether anyone waited (a drain came) or not */
    if (t->ws == 0 && !t->bg_over && t->grant_ns &&
        send_ns > t->grant_ns + (OB_MAX_HOLD_MS + t->lease_ms) * 1000000ull + SLACK_NS) {
        t->bg_over = true;
        atomic_fetch_add(&S->ob[0].bg_overheld, 1);
        if (!t->drain_ns)
            CNT(ob_bg_over_nodrain);
    }
    if (!t->drain_ns || t->overheld || send_ns <= t->drain_ns + t->lease_ms * 1000000ull + SLACK_NS)
        return;
    t->overheld = true;
    atomic_fetch_add(&S->ob[t->ws].overheld, 1);
    fprintf(stderr, "coord-fault: %s: %s of %s generation %" PRIu64 " accepted %.0f ms after "
            "the max_hold drain (lease %" PRIu64 " ms)\n", k->name, what, ob_name(t->ws), t->gen,
            (double)(send_ns - t->drain_ns) / 1e6, t->lease_ms);
}

static void check_write(struct cl *k, struct term *t, const char *what, uint64_t op,
                        uint64_t m_granted, uint32_t ro, uint64_t send_ns)
{
    if (t->gen < m_granted)
        VIOL(stale_write, "%s: %s L%" PRIu64 " accepted with %s generation %" PRIu64
             " after generation %" PRIu64 " had been granted", k->name, what, op,
             ob_name(t->ws), t->gen, m_granted);
    if (ro)
        VIOL(mode_write, "%s: %s L%" PRIu64 " accepted on %s while its mode was %s", k->name,
             what, op, ob_name(t->ws), atomic_load(&S->ob[t->ws].mode) == 2 ? "shadow"
             : "read-only");
    check_hold(k, t, send_ns, what);
}

/* a refused write: STOP for this term, or GO_ON */
static int write_refused(struct cl *k, struct term *t, const char *what, int rc)
{
    if (rc == COORD_EFENCED) {
        CNT(ob_fenced);
        t->lost = true;
    } else if (rc == COORD_EREAD_ONLY) {
        CNT(ob_read_only);
        t->ro = true;
    } else if (rc == COORD_EDRAINING) {
        CNT(ob_draining);
        t->draining = true;
    } else {
        call_failed(k, what, rc);
        t->lost = true;
    }
    return STOP;
}

/* ---- the unsettled claims of a workstream ---- */

static void unsettled_add(unsigned ws, uint64_t op)
{
    struct obinfo *w = &S->ob[ws];
    for (unsigned i = 0; i < OB_UNSETTLED; i++)
        if (atomic_load(&w->unsettled[i]) == op)
            return;
    for (unsigned i = 0; i < OB_UNSETTLED; i++) {
        uint64_t z = 0;
        if (atomic_compare_exchange_strong(&w->unsettled[i], &z, op))
            return;
    }
}

static void unsettled_del(unsigned ws, uint64_t op)
{
    struct obinfo *w = &S->ob[ws];
    for (unsigned i = 0; i < OB_UNSETTLED; i++) {
        uint64_t v = op;
        atomic_compare_exchange_strong(&w->unsettled[i], &v, 0);
    }
}

/* ---- one op: claim, effect, commit ---- */

static uint32_t epoch_now(void) { return atomic_load(&S->wipes) + 1; }

/* a moment between claim and effect, effect and commit, for the driver's
 * kills and stops to land in */
static void linger(struct cl *k)
{
    if (rng_pct(&k->r, 8))
        sleep_ms(rng_range(&k->r, 10, 30));
    else if (rng_pct(&k->r, 40))
        sleep_ms(rng_below(&k->r, 5));
}

static int settle(struct cl *k, struct term *t, uint64_t op, bool abandon)
{
    struct obinfo *w = &S->ob[t->ws];
    struct lop *l = &LOPS[op];
    char id[32];
    snprintf(id, sizeof id, "L%" PRIu64, op);
    uint64_t mg = atomic_load(&w->max_granted);
    uint32_t ro = atomic_load(&w->ro);
    uint64_t z = 0, s = seq_next();
    atomic_compare_exchange_strong(&l->settle_seq, &z, s);
    uint64_t send_ns = now_ns();
    coord_req_t *q = ws_req(abandon ? "leader.abandon" : "leader.commit", t);
    coord_req_cstr(q, "op_id", id);
    if (abandon)
        coord_req_cstr(q, "reason", "not needed any more");
    coord_reply_t *r = NULL;
    int rc = call(k, q, &r, BW_OBCOMMIT);
    if (rc < 0)
        return write_refused(k, t, abandon ? "abandon" : "commit", rc);
    coord_map m = coord_reply_map(r);
    bool applied = false, dup = false, ab = false;
    coord_map_bool(m, "applied", &applied);
    coord_map_bool(m, "duplicate", &dup);
    coord_map_bool(m, "abandoned", &ab);
    coord_reply_free(r);
    check_write(k, t, abandon ? "abandon" : "commit", op, mg, ro, send_ns);
    if (abandon) {
        atomic_store(&l->abandoned, 1);
        CNT(ob_abandons);
    } else if (applied) {
        atomic_store(&l->committed, 1);
        CNT(ob_commits);
        uint32_t i = atomic_fetch_add(&w->ring_pos, 1) % OB_RING;
        atomic_store(&w->ring[i], op);
    } else if (!dup) {
        VIOL(unexpected, "%s: commit of claimed L%" PRIu64 " neither applied nor duplicate%s",
             k->name, op, ab ? " (abandoned)" : "");
    }
    unsettled_del(t->ws, op);
    return GO_ON;
}

static int do_op(struct cl *k, struct term *t, uint64_t op, bool redrive)
{
    struct obinfo *w = &S->ob[t->ws];
    struct lop *l = &LOPS[op];
    char id[32];
    snprintf(id, sizeof id, "L%" PRIu64, op);
    uint64_t mg = atomic_load(&w->max_granted);
    uint32_t ro = atomic_load(&w->ro), ep = epoch_now();
    uint64_t send_ns = now_ns();
    coord_req_t *q = ws_req("leader.claim", t);
    coord_req_cstr(q, "op_id", id);
    coord_reply_t *r = NULL;
    int rc = call(k, q, &r, BW_CLAIM);
    if (rc < 0)
        return write_refused(k, t, "claim", rc);
    uint64_t seq_r = seq_next();
    coord_map m = coord_reply_map(r);
    bool claimed = false, reconcile = false, applied = false, abandoned = false;
    coord_map_bool(m, "claimed", &claimed);
    coord_map_bool(m, "reconcile", &reconcile);
    coord_map_bool(m, "applied", &applied);
    coord_map_bool(m, "abandoned", &abandoned);
    coord_reply_free(r);
    check_write(k, t, "claim", op, mg, ro, send_ns);
    if (applied) {
        CNT(ob_claim_applied);
        return GO_ON;
    }
    if (abandoned) {
        CNT(ob_claim_abandoned);
        return GO_ON;
    }
    if (!claimed) {
        VIOL(unexpected, "%s: claim L%" PRIu64 ": neither claimed, applied nor abandoned",
             k->name, op);
        return STOP;
    }
    CNT(ob_claims);
    if (reconcile)
        CNT(ob_reconciles);
    (void)redrive;
    atomic_store(&l->claim_gen, t->gen);
    atomic_store(&l->claim_seq, seq_r);
    atomic_store(&l->claim_epoch, ep);
    unsettled_add(t->ws, op);
    set_state(k, ST_CLAIMED, (int)t->ws, t->gen);
    linger(k);
    if (rng_pct(&k->r, 3)) {
        set_state(k, ST_LEADING, (int)t->ws, t->gen);
        return settle(k, t, op, true);
    }
    int ans = 0;
    bool done = false;
    if (reconcile) {
        if (provider_call(&k->provider, P_STATUS, t->ws, op, t->gen, &ans) < 0) {
            VIOL(unexpected, "%s: the provider is gone", k->name);
            return STOP;
        }
        if (ans == P_STALE) {
            CNT(ob_effects_stale);
            set_state(k, ST_LEADING, (int)t->ws, t->gen);
            t->lost = true;
            return STOP;
        }
        done = ans == P_DONE;
        if (done)
            CNT(ob_status_applied);
    }
    if (!done) {
        block(k, BW_PROVIDER, CLIENT_DEADLINE_MS);
        int prc = provider_call(&k->provider, P_APPLY, t->ws, op, t->gen, &ans);
        unblock(k);
        if (prc < 0) {
            VIOL(unexpected, "%s: the provider is gone", k->name);
            return STOP;
        }
        if (ans == P_STALE) {
            /* a newer leader reached the provider first: ours is over */
            CNT(ob_effects_stale);
            set_state(k, ST_LEADING, (int)t->ws, t->gen);
            t->lost = true;
            return STOP;
        }
    }
    set_state(k, ST_EFFECTED, (int)t->ws, t->gen);
    linger(k);
    set_state(k, ST_LEADING, (int)t->ws, t->gen);
    return settle(k, t, op, false);
}

/* ---- the term ---- */

static int renew(struct cl *k, struct term *t)
{
    uint64_t send_ns = now_ns();
    coord_req_t *q = ws_req("leader.renew", t);
    coord_reply_t *r = NULL;
    int rc = call(k, q, &r, BW_OBRENEW);
    if (rc < 0)
        return write_refused(k, t, "renew", rc);
    coord_reply_free(r);
    t->last_renew_ns = now_ns();
    check_hold(k, t, send_ns, "renew");
    return GO_ON;
}

/* leader.pending at term start: the check of unowned ops, then reconcile */
static int reconcile_pending(struct cl *k, struct term *t)
{
    struct obinfo *w = &S->ob[t->ws];
    uint32_t ep = epoch_now();
    uint64_t seq_s = seq_next();
    coord_req_t *q = coord_req_new("leader.pending");
    coord_req_cstr(q, "workstream", ob_name(t->ws));
    coord_req_uint(q, "limit", 1000);
    coord_reply_t *r = NULL;
    int rc = call(k, q, &r, BW_PENDING);
    if (rc < 0)
        return write_refused(k, t, "pending", rc);
    CNT(ob_pending_reads);
    coord_map m = coord_reply_map(r);
    size_t n = coord_map_array_len(m, "ops");
    uint64_t ops[1000];
    size_t nops = 0;
    for (size_t i = 0; i < n && nops < 1000; i++) {
        coord_map e;
        if (coord_map_array_at(m, "ops", i, &e) && (ops[nops] = lop_of(e, "op_id")))
            nops++;
    }
    coord_reply_free(r);
    /* What a wipe legitimately forgets: the claims stored in the wiped
     * ledger (unsettled claims are ledger state, no descriptor file holds
     * them: the operator reconciles them by op id, PROTOCOL.md).  So a
     * claim is left out only when a wipe may have taken it: the wipe
     * counter moved after the claim was sent (it is raised while the
     * broker is down, so the same value means the claim was handled by
     * the ledger this leader.pending reads).  Every other unsettled claim,
     * whenever its op was created, must be listed. */
    bool one_ledger = epoch_now() == ep;
    for (unsigned i = 0; one_ledger && i < OB_UNSETTLED; i++) {
        uint64_t op = atomic_load(&w->unsettled[i]);
        if (!op || op >= LOPS_CAP)
            continue;
        struct lop *l = &LOPS[op];
        bool listed = false;
        for (size_t j = 0; j < nops && !listed; j++)
            listed = ops[j] == op;
        uint64_t cg = atomic_load(&l->claim_gen), cs = atomic_load(&l->claim_seq);
        uint64_t ss = atomic_load(&l->settle_seq);
        if (listed)
            continue;
        if (atomic_load(&l->claim_epoch) != ep || (ss && ss < seq_s)) {
            atomic_compare_exchange_strong(&w->unsettled[i], &op, 0);   /* settled, or wiped */
            continue;
        }
        if (cg && cg < t->gen && cs < seq_s)
            VIOL(unowned_op, "%s: L%" PRIu64 " claimed by %s generation %" PRIu64
                 " and never settled is missing from generation %" PRIu64 "'s leader.pending",
                 k->name, op, ob_name(t->ws), cg, t->gen);
    }
    for (size_t j = 0; j < nops && j < PENDING_MAX; j++) {
        if (ops[j] >= LOPS_CAP)
            continue;
        CNT(ob_pending_entries);
        if (do_op(k, t, ops[j], false) == STOP)
            return t->lost ? STOP : GO_ON;     /* read-only, draining: the term goes on */
        take_events(k, t);
        if (t->lost)
            return STOP;
    }
    return GO_ON;
}

static uint64_t new_op(unsigned ws)
{
    uint64_t op = atomic_fetch_add(&S->next_lop, 1);
    if (op >= LOPS_CAP)
        return 0;
    atomic_store(&LOPS[op].ws, ws + 1);
    atomic_store(&LOPS[op].epoch, epoch_now());
    return op;
}

/* A committed op claimed again must answer applied: but not one from
 * before the last wipe, whose applied record the wipe deleted (ledger
 * state: a claim of it is fresh, and its effect would be done twice) */
static uint64_t redrive_op(struct cl *k, unsigned ws)
{
    struct obinfo *w = &S->ob[ws];
    uint64_t op = atomic_load(&w->ring[rng_below(&k->r, OB_RING)]);
    if (!op || op >= LOPS_CAP || atomic_load(&LOPS[op].epoch) != epoch_now() ||
        !atomic_load(&LOPS[op].committed))
        return 0;
    return op;
}

static void work(struct cl *k, struct term *t, unsigned nops)
{
    if (reconcile_pending(k, t) == STOP)
        return;
    t->ignore_drain = rng_pct(&k->r, OB_IGNORE_DRAIN_PCT);
    /* some terms on the max-hold workstream are long: they reach it */
    bool slow = t->ws == 0 && rng_pct(&k->r, 40);
    if (slow)
        nops = (unsigned)rng_range(&k->r, 6, 14);
    for (unsigned i = 0; i < nops && !t->lost; i++) {
        take_events(k, t);
        if (t->lost)
            break;
        if (t->drain_ns && !t->ignore_drain) {
            CNT(ob_drains_obeyed);
            break;
        }
        if (now_ns() - t->last_renew_ns > t->lease_ms * 1000000ull / 3 && renew(k, t) == STOP)
            break;
        if (t->ro || (t->draining && !t->ignore_drain)) {
            sleep_ms(rng_below(&k->r, t->lease_ms / 4 + 1));
            continue;
        }
        uint64_t op = rng_pct(&k->r, 10) ? redrive_op(k, t->ws) : 0;
        bool redrive = op != 0;
        if (redrive)
            CNT(ob_redrives);
        else if (!(op = new_op(t->ws)))
            break;                      /* the table is full */
        /* STOP with the term still ours (read-only, draining): go on idling */
        if (do_op(k, t, op, redrive) == STOP && t->lost)
            break;
        if (slow)
            sleep_ms(rng_range(&k->r, t->lease_ms / 6, t->lease_ms / 3));
        else if (rng_pct(&k->r, 30))
            sleep_ms(rng_below(&k->r, 6));
    }
    /* a leader that ignores a max-hold drain works on until fenced (at
     * most a few leases) */
    if (t->drain_ns && t->ignore_drain && !t->lost) {
        CNT(ob_drains_ignored);
        uint64_t until = now_ns() + 4 * t->lease_ms * 1000000ull;
        while (!t->lost && now_ns() < until) {
            if (renew(k, t) == STOP)
                break;
            uint64_t op = new_op(t->ws);
            if (op && do_op(k, t, op, false) == STOP && t->lost)
                break;
            take_events(k, t);
            sleep_ms(t->lease_ms / 4 + 1);
        }
    }
}

static void resign(struct cl *k, struct term *t)
{
    if (!k->c)
        return;
    coord_reply_t *r = NULL;
    int rc = call(k, ws_req("leader.resign", t), &r, BW_OBRENEW);
    coord_reply_free(r);
    if (rc < 0 && rc != COORD_EFENCED && conn_err(rc))
        call_failed(k, "resign", rc);
}

/* One campaign and, when granted, one term.  version 0: the deployed
 * one.  incident: an incident takeover's text (NULL: none). */
static void term_run(struct cl *k, unsigned ws, uint32_t version, const char *incident,
                     bool rollback)
{
    struct obinfo *w = &S->ob[ws];
    struct term t = { .ws = ws, .incident = incident != NULL };
    t.version = version ? version : atomic_load(&w->deployed);
    t.lease_ms = rng_range(&k->r, 200, 500);
    char proto[32];
    snprintf(proto, sizeof proto, PROTO_NAME "@%u", t.version);
    coord_req_t *q = coord_req_new("leader.campaign");
    coord_req_cstr(q, "workstream", ob_name(ws));
    coord_req_uint(q, "lease_ms", t.lease_ms);
    coord_req_cstr(q, "protocol", proto);
    unsigned p = (unsigned)rng_below(&k->r, 100);
    bool steal = false;
    if (incident) {
        coord_req_cstr(q, "incident", incident);
        if (p < 30) {
            coord_req_bool(q, "steal", true);
            steal = true;
        } else {
            coord_req_uint(q, "timeout_ms", BROKER_WAIT_MS);
        }
    } else if (p < 4) {
        coord_req_bool(q, "steal", true);           /* outbox-0: POLICY */
        steal = true;
    } else if (p < 14) {
        coord_req_bool(q, "if_available", true);
    } else {
        coord_req_uint(q, "timeout_ms", BROKER_WAIT_MS);
    }
    uint64_t m0 = atomic_load(&w->max_granted);
    uint32_t floor = atomic_load(&w->floor), wipes = atomic_load(&S->wipes);
    uint64_t epv = atomic_load(&w->ep_version);
    uint32_t dis = atomic_load(&w->disabled), defined = atomic_load(&w->defined);
    CNT(ob_campaigns);
    if (rollback)
        CNT(ob_rollbacks);
    set_state(k, ST_CAMPAIGNING, (int)ws, 0);
    coord_reply_t *r = NULL;
    int rc = call(k, q, &r, BW_CAMPAIGN);
    if (rc == COORD_EPROTOCOL_PINNED) {
        CNT(ob_pinned);
        if (rollback)
            CNT(ob_rollback_refused);
    } else if (rc == COORD_EPOLICY) {
        CNT(ob_policy);
        if (ws != 0)
            VIOL(unexpected, "%s: steal on %s refused POLICY (steal: allowed)", k->name,
                 ob_name(ws));
    } else if (rc == COORD_EDISABLED) {
        CNT(ob_disabled);
        sleep_ms(rng_range(&k->r, 10, 30));     /* until the incident is over */
    } else if (rc < 0 && rc != COORD_ETIMEOUT && rc != COORD_EABORTED) {
        call_failed(k, "outbox campaign", rc);
    }
    bool granted = false;
    if (rc == 0) {
        coord_map m = coord_reply_map(r);
        coord_map_bool(m, "granted", &granted);
        coord_map_uint(m, "generation", &t.gen);
        t.ro = granted && !name_is(m, "mode", "active");
        uint64_t lease = 0;
        if (coord_map_uint(m, "lease_ms", &lease) && lease)
            t.lease_ms = lease;
        coord_reply_free(r);
    }
    if (!granted) {
        set_state(k, ST_IDLE, 0, 0);
        return;
    }
    uint64_t seq_r = seq_next();
    if (t.gen <= m0)
        VIOL(gen_backwards, "%s: granted %s generation %" PRIu64 " but %" PRIu64
             " was granted before the campaign was sent", k->name, ob_name(ws), t.gen, m0);
    /* old_protocol: the file's floor holds across wipes (configuration);
     * the ratchet above it (a version granted raises the pin) is ledger
     * state, which a wipe legitimately forgets: it is checked only when no
     * wipe came between the newer grant and this one (the wipe counter is
     * raised while the broker is down, so one value read before the
     * campaign and after its reply means one ledger) */
    bool same_ledger = atomic_load(&S->wipes) == wipes;
    if (t.version < floor)
        VIOL(old_protocol, "%s: %s granted to %s below its descriptor file's %s@%u",
             k->name, ob_name(ws), proto, PROTO_NAME, floor);
    else if (same_ledger && (uint32_t)(epv >> 32) == wipes && t.version < (uint32_t)epv)
        VIOL(old_protocol, "%s: %s granted to %s after %s@%u had led", k->name, ob_name(ws),
             proto, PROTO_NAME, (uint32_t)epv);
    if (dis && !incident)
        VIOL(disabled_grant, "%s: %s granted generation %" PRIu64 " while disabled", k->name,
             ob_name(ws), t.gen);
    if (steal && ws == 0 && !incident && defined)
        VIOL(policy_steal, "%s: steal without incident granted on %s (incident-only)",
             k->name, ob_name(ws));
    atomic_max_u64(&w->max_granted, t.gen);
    atomic_max_u64(&w->max_granted_seq, seq_r);
    if (same_ledger)
        atomic_max_u64(&w->ep_version, (uint64_t)wipes << 32 | t.version);
    CNT(ob_grants);
    if (incident)
        CNT(incident_grants);
    atomic_fetch_add(&w->terms, 1);
    if (ws == 0)
        CNT(ob_terms_hold);
    t.last_renew_ns = t.grant_ns = now_ns();
    set_state(k, ST_LEADING, (int)ws, t.gen);
    work(k, &t, incident ? 4 : (unsigned)rng_range(&k->r, 1, 6));
    set_state(k, ST_IDLE, 0, 0);
    if (t.lost) {
        resign(k, &t);                  /* FENCED: fine */
        return;
    }
    if (rng_pct(&k->r, 3)) {            /* close the connection while leading */
        drop_conn(k);
        return;
    }
    resign(k, &t);
}

void outbox_round(struct cl *k)
{
    unsigned ws = (unsigned)k->slot % NOB;
    if (rng_pct(&k->r, 20))
        ws = (unsigned)rng_below(&k->r, NOB);
    term_run(k, ws, 0, NULL, false);
}

void rollback_run(struct cl *k)
{
    unsigned ws = k->sl->arg % NOB;
    uint32_t v = atomic_load(&S->ob[ws].deployed);
    if (v > 1)
        term_run(k, ws, v - 1, NULL, true);
}

void incident_run(struct cl *k)
{
    char text[32];
    snprintf(text, sizeof text, "INC-%u", k->sl->arg);
    term_run(k, 0, 0, text, false);
    /* the incident handled: the operator (the driver, who owns the
     * descriptor file) enables the workstream again.  Not when the
     * connection is gone (the broker was killed, maybe wiped): the driver
     * enables it a while later, and meanwhile the file's disable must hold
     * on the restarted broker */
    if (k->c)
        atomic_store(&S->ob[0].enable_asked, 1);
}

/* ---- the driver's side: descriptor files, modes, the kill switch ----
 *
 * The outbox workstreams' policy is configuration: one descriptor file
 * each, CONFIG_DIR/workstreams/outbox-N.v1 in the config dir the driver
 * owns (every broker it starts gets --config-dir).  Each change the suite
 * makes (the first descriptors, a protocol floor raised to the deployed
 * version, a mode switch, a disable and the enable after it) is written
 * to the file, a temp file renamed over it, and applied with
 * broker.reload; nothing is defined or disabled over the wire.  A broker
 * reads the files at every start before its first client, so a wiped
 * data dir comes back with the same policy: the driver defines nothing
 * again after a wipe, and the flags the clients check (floor, ro,
 * disabled, defined) stay armed across it.
 *
 * Only the driver writes the files (an incident client asks it to enable
 * the workstream again through enable_asked).  A flag that makes a check
 * stricter is set once the reload was answered (the broker applies a file
 * in memory before it answers, ahead of any later campaign or claim); one
 * that relaxes a check is cleared before the file is written. */

static coord_t *drv[MAX_BROKERS];

/* the driver's connection to broker b (one try: the caller goes on) */
static coord_t *driver_conn(unsigned b)
{
    if (!drv[b]) {
        coord_options o;
        coord_options_init(&o);
        o.socket_path = broker_socket(b);
        o.scope = SCOPE;
        o.client_name = "fault-driver-ob";
        o.no_autostart = true;
        if (coord_connect(&drv[b], &o) < 0)
            drv[b] = NULL;
    }
    return drv[b];
}

static const char *const mode_names[] = { "active", "read-only", "shadow" };

/* what each file says */
static struct {
    uint32_t floor;                 /* protocol: fault@floor */
    uint32_t mode;                  /* obinfo's numbering */
    bool disabled;
    bool unapplied;                 /* written, its reload not answered yet */
} F[NOB];

static int write_desc(unsigned ws)
{
    char path[400], tmp[400], text[600];
    snprintf(path, sizeof path, "%s/workstreams/%s.v1", CFG->config_dir, ob_name(ws));
    /* a name the broker skips (a leading dot, no .v1): never read half-written */
    snprintf(tmp, sizeof tmp, "%s/workstreams/.%s.tmp", CFG->config_dir, ob_name(ws));
    char hold[40] = "";
    if (ws == 0)
        snprintf(hold, sizeof hold, "maxHold: %ums\n", OB_MAX_HOLD_MS);
    snprintf(text, sizeof text,
             "# %s: written by coord-fault\n"
             "schema: crossTabLeader.v1\n"
             "workstream: %s\n"
             "origin: " SCOPE "\n"
             "protocol: " PROTO_NAME "@%u\n"
             "steal: %s\n"
             "%s"
             "mode: %s\n"
             "fallback: SERVER_COORDINATED\n"
             "disabled: %s\n",
             ob_name(ws), ob_name(ws), F[ws].floor, ws == 0 ? "incident-only" : "allowed",
             hold, mode_names[F[ws].mode % 3], F[ws].disabled ? "true" : "false");
    FILE *f = fopen(tmp, "w");
    bool ok = f && fputs(text, f) >= 0;
    if (f && fclose(f) != 0)
        ok = false;
    if (!ok || rename(tmp, path) < 0) {
        fprintf(stderr, "coord-fault: cannot write %s\n", path);
        return -1;
    }
    F[ws].unapplied = true;
    return 0;
}

/* The value of key in m as JSON (for messages); "?" when absent. */
static void map_json(coord_map m, const char *key, char *out, size_t size)
{
    snprintf(out, size, "?");
    for (size_t i = 0; i < coord_map_size(m); i++) {
        const char *k;
        size_t kl;
        coord_map_entry(m, i, &k, &kl);
        if (kl == strlen(key) && !memcmp(k, key, kl)) {
            char *v = coord_map_value_json(m, i);
            snprintf(out, size, "%s", v ? v : "?");
            free(v);
        }
    }
}

/* the file of ws is in force: the flags that make checks stricter */
static void in_force(unsigned ws)
{
    struct obinfo *w = &S->ob[ws];
    F[ws].unapplied = false;
    if (F[ws].floor > atomic_load(&w->floor))
        atomic_store(&w->floor, F[ws].floor);
    if (F[ws].mode) {
        atomic_store(&w->mode, F[ws].mode);
        atomic_store(&w->ro, 1);
    }
    if (F[ws].disabled && !atomic_load(&w->disabled)) {
        atomic_store(&w->disabled_ns, now_ns());
        atomic_store(&w->disabled, 1);
    }
    atomic_store(&w->defined, 1);
}

/* occurrences of needle in s */
static size_t count_in(const char *s, const char *needle)
{
    size_t n = 0;
    for (const char *p = s; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

/* broker.reload on broker b: 0 when every file loaded and was stored, else -1 */
static int reload_one(unsigned b)
{
    for (int attempt = 0; attempt < 2; attempt++) {
        coord_t *c = driver_conn(b);
        if (!c)
            return -1;
        coord_req_t *q = coord_req_new("broker.reload");
        coord_reply_t *r = NULL;
        int rc = coord_call(c, q, &r);
        coord_req_free(q);
        if (rc == 0) {
            coord_map m = coord_reply_map(r);
            size_t loaded = coord_map_array_len(m, "loaded");
            size_t errors = coord_map_array_len(m, "errors");
            if (errors || loaded != NOB) {
                char l[300], e[4096];
                map_json(m, "loaded", l, sizeof l);
                map_json(m, "errors", e, sizeof e);
                /* a file applied but not stored (the ledger out of reach):
                 * the reload failed, not the broker; ob_tick reloads again */
                size_t unstored = count_in(e, ": applied on this broker but not stored in the ") +
                                  count_in(e, ": not applied (the ");
                if (unstored == errors && loaded + errors == NOB)
                    CNT(reloads_unstored);
                else
                    VIOL(unexpected, "broker.reload: loaded %s, errors %s", l, e);
            }
            coord_reply_free(r);
            if (errors || loaded != NOB)
                return -1;
            CNT(reloads);
            return 0;
        }
        if (!conn_err(rc)) {
            VIOL(unexpected, "broker.reload: %s", coord_strerror(rc));
            return -1;
        }
        coord_close(drv[b]);            /* a restarted broker: connect again */
        drv[b] = NULL;
    }
    return -1;
}

/* broker.reload on every broker: 0 when each one loaded every file (then
 * each file written since is in force), else -1 and the files stay as
 * written (ob_tick reloads them again).  Every broker, not only one: each
 * machine reads its own config, as in a deployment.  A reload is answered
 * once the files are applied in that broker's memory and stored in the
 * ledger; a store that failed (etcd out of reach) is in its errors, and
 * the files then count as not in force. */
static int reload(void)
{
    for (unsigned b = 0; b < CFG->nbrokers; b++)
        if (reload_one(b) < 0)
            return -1;
    for (unsigned ws = 0; ws < NOB; ws++)
        if (F[ws].unapplied)
            in_force(ws);
    return 0;
}

static int apply(unsigned ws)
{
    if (write_desc(ws) < 0)
        return -1;
    return reload();
}

int ob_config_init(void)
{
    for (unsigned ws = 0; ws < NOB; ws++) {
        F[ws].floor = atomic_load(&S->ob[ws].deployed);
        F[ws].mode = 0;
        F[ws].disabled = false;
        if (write_desc(ws) < 0)
            return -1;
    }
    if (reload() < 0) {
        fprintf(stderr, "coord-fault: the first descriptor files were not applied\n");
        return -1;
    }
    return 0;
}

void ob_tick(void)
{
    static uint64_t last;
    bool any = false;
    for (unsigned ws = 0; ws < NOB; ws++)
        any |= F[ws].unapplied;
    if (!any || etcd_outage_on() || now_ns() - last < 100000000ull)
        return;
    last = now_ns();
    reload();
}

/* The version the clients campaign with is raised first (a rollout: the
 * first grant of it raises the pin, the ratchet), and at a later rollout
 * tick the file's floor follows it: until then only the ratchet refuses
 * the rollbacks, and a wipe may forget it (ledger state, see term_run). */
void ob_rollout(unsigned ws, bool can_reload)
{
    struct obinfo *w = &S->ob[ws];
    uint32_t d = atomic_load(&w->deployed);
    if (F[ws].floor < d) {
        if (!can_reload)
            return;
        F[ws].floor = d;
        if (apply(ws) == 0)
            CNT(floor_raises);
    } else if (d < 1000000) {
        atomic_fetch_add(&w->deployed, 1);
        CNT(rollouts);
    }
}

void ob_switch_mode(unsigned ws)
{
    struct obinfo *w = &S->ob[ws];
    uint32_t next = (F[ws].mode + 2) % 3;     /* active -> shadow -> read-only -> active */
    if (next == 0) {
        atomic_store(&w->ro, 0);        /* before the active file is written */
        atomic_store(&w->mode, 0);
    }
    F[ws].mode = next;
    if (apply(ws) == 0)
        CNT(mode_switches);
}

int ob_disable(unsigned ws, bool disable)
{
    if (!disable)
        atomic_store(&S->ob[ws].disabled, 0);   /* before the file says enabled */
    F[ws].disabled = disable;
    return apply(ws);
}
