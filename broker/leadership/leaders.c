/* leaders.c - leadership over the fence ledger: campaigns and terms
 * (leader.campaign, renew, resign, drain, info, check, disable, enable).  The outbox (commit, claim, abandon, pending, read) is in
 * leader-outbox.c, descriptors and history in leader-define.c.
 *
 * A campaign queues on the workstream's leader lock, a reserved lock name
 * ("-leader/<workstream>") in the ordinary lock table, so lock.query shows
 * who leads and who waits.  Once the lock is granted the leader ledger
 * (leader-ledger.h) stores the workstream's next generation (from the id
 * allocator, so it is above every earlier one even after a wipe) and the
 * term's history entry, checking the protocol pin in the same step; only
 * then is the campaign answered.  A generation is therefore never handed
 * out twice, not even across kill -9.  Lock grant and business ownership
 * are two facts: the lock says who is next, the stored generation says who
 * may write.
 *
 * A leader that loses its lease, disconnects, is stolen from, disabled or
 * fenced past its max hold is stale at once: the in-memory live generation
 * is cleared before any later write is looked at, and the ledger checks a
 * write's generation again in the same step that applies it.
 *
 * The workstreams in memory, their loading and the ledger calls are
 * workstreams.c's. */
#include <stdlib.h>
#include <string.h>
#include "breaks.h"
#include "coord-ops.h"
#include "coord-limits.h"
#include "desc-file.h"
#include "errors.h"
#include "events.h"
#include "histo.h"
#include "ids.h"
#include "leaders-int.h"
#include "leaders.h"
#include "locks.h"
#include "ops.h"
#include "records.h"
#include "skey.h"

#define LOCK_PREFIX "-leader/"

enum campaign_state { CAMPAIGN_WAITING, CAMPAIGN_BUMPING, CAMPAIGN_LEADING };

/* A campaign, and then the term it won: it owns the leader lock from the
 * request until the leadership ends. */
struct campaign {
    struct lock_req lock;
    struct pending p;              /* the campaign request, until answered */
    struct ll_req bump;            /* the generation being stored */
    struct workstream *ws;
    struct conn *conn;
    uint64_t lease_ms;
    enum campaign_state state;
    bool waiting;                  /* counted in ws->campaigns_waiting */
    bool gone;                     /* cancelled or disconnected while bumping */
    bool lock_lost;                /* stolen while bumping */
    struct ws_protocol protocol;   /* the campaign's, name_len 0: none */
    uint16_t incident_len;         /* an incident campaign's text */
    uint8_t incident[LIMIT_INCIDENT];
    struct list lead_link;         /* conn->leads while leading */
    uint8_t caps_len;              /* the campaign's capabilities */
    uint8_t caps[LIMIT_CAPS_TEXT];
    /* for a remote ledger, where the bump may wait for another machine's
     * term: the campaign's timeout (broker_now_ms, 0: none) and options */
    uint64_t deadline_ms;
    bool if_available, steal;
};

struct leader_counters leader_counts;

static struct {
    struct broker *b;
} W;

int leaders_init(struct broker *b, char *err, size_t errsize)
{
    W.b = b;
    return workstreams_init(b, err, errsize);
}

void leaders_stop(void)
{
    leaders_config_stop();
    workstreams_stop();
}

size_t leaders_lock_name(const struct workstream *ws, const struct ws_desc *d, uint8_t *out)
{
    if (d->lock_name_len) {
        memcpy(out, d->lock_name, d->lock_name_len);
        return d->lock_name_len;
    }
    size_t nlen;
    const uint8_t *wname = leaders_ws_name(ws, &nlen);
    memcpy(out, LOCK_PREFIX, sizeof LOCK_PREFIX - 1);
    memcpy(out + sizeof LOCK_PREFIX - 1, wname, nlen);
    return sizeof LOCK_PREFIX - 1 + nlen;
}

void leaders_stats(coord_enc *e)
{
    const struct leader_counters *n = &leader_counts;
    const struct leader_ledger *ledger = workstreams_ledger();
    coord_enc_kv_uint(e, "workstreams", workstreams_count());
    /* which ledger, and whether it answers (coordctl status) */
    if (ledger) {
        coord_enc_kv_cstr(e, "ledger", ll_name(ledger));
        coord_enc_kv_bool(e, "ledger_reachable", ll_reachable(ledger));
        ll_stats(ledger, e);
    }
    coord_enc_kv_uint(e, "leaders_elected", n->elected);
    coord_enc_kv_uint(e, "leaders_lost", n->lost);
    coord_enc_kv_uint(e, "commits_applied", n->commits);
    coord_enc_kv_uint(e, "commits_duplicate", n->duplicates);
    coord_enc_kv_uint(e, "commits_fenced", n->fenced);
}

void leaders_stats_holds_claims(coord_enc *e)
{
    const struct leader_counters *n = &leader_counts;
    coord_enc_kv_uint(e, "leader_terms", n->elected);
    coord_enc_kv_uint(e, "terms_max_hold", n->terms_max_hold);
    coord_enc_kv_uint(e, "terms_reached_max_hold", n->terms_reached_max_hold);
    coord_enc_kv_uint(e, "terms_over_max_hold", n->terms_over_max_hold);
    coord_enc_kv_uint(e, "terms_fenced_max_hold", n->terms_fenced_max_hold);
    coord_enc_kv_uint(e, "claims", n->claims);
    coord_enc_kv_uint(e, "claims_reconciled", n->claims_reconciled);
    coord_enc_kv_uint(e, "abandons", n->abandons);
}

static void emit(const char *what, const struct workstream *ws, uint64_t gen,
                 enum reason why)
{
    events_leader(what, ws->skey, ws->h.keylen, gen, why);
}

bool leaders_text_ok(struct conn *c, uint64_t rid, const char *field, coord_bytes b,
                     size_t max, bool required)
{
    if ((b.len == 0 && !required && !b.ptr) || (b.len >= 1 && b.len <= max))
        return true;
    char msg[96];
    snprintf(msg, sizeof msg, "%s must be 1..%zu bytes", field, max);
    conn_reply_error(c, rid, COORD_EINVALID_OPTIONS, msg);
    return false;
}

/* ---- the term ---- */

static void campaign_free(struct campaign *cp)
{
    if (cp->waiting)
        cp->ws->campaigns_waiting--;
    cp->ws->campaigns--;
    ll_req_free(&cp->bump);
    conn_unref(cp->conn);
    leaders_ws_unref(cp->ws);
    free(cp);
}

/* An event of the leader.* family to the leader's connection: its name,
 * the workstream and the generation are written; the caller adds the rest
 * and finishes. */
static void leader_event_begin(struct conn *leader, coord_enc *e, enum coord_event ev,
                               const struct workstream *ws, uint64_t gen)
{
    size_t nlen;
    const uint8_t *name = leaders_ws_name(ws, &nlen);
    conn_enc_begin_event(leader, e, coord_event_name(ev));
    coord_enc_kv_name(e, "workstream", name, nlen);
    coord_enc_kv_uint(e, "generation", gen);
}

static void send_lost(struct workstream *ws, struct conn *leader, uint64_t gen,
                      enum reason why, const uint8_t *incident, size_t incident_len)
{
    if (!conn_alive(leader))
        return;
    coord_enc e;
    leader_event_begin(leader, &e, COORD_EV_LEADER_LOST, ws, gen);
    coord_enc_kv_cstr(&e, "reason", reason_name(why));
    if (incident_len)
        coord_enc_kv_name(&e, "incident", incident, incident_len);
    conn_enc_finish(leader, &e);
}

/* The term's end into its history entry.  Only a resign waits for it (its
 * reply comes once the end is stored, so the resigner's next history read
 * shows it); a failure leaves the entry live, and the next term marks it
 * restart. */
struct term_end {
    struct ll_req req;
    struct conn_job job;           /* the resign to answer, or conn NULL */
};

static void term_end_done(struct ll_req *r)
{
    struct term_end *te = (struct term_end *)r;
    if (r->status && r->status != COORD_ESHUTTING_DOWN)
        log_event(LOG_WARN, "leader.history_failed", "status=%d", r->status);
    if (te->job.conn) {
        struct conn *c = conn_job_conn(&te->job);
        if (c)
            conn_reply_ok(c, te->job.rid);
        conn_job_end(&te->job);
    }
    ll_req_free(r);
    free(te);
}

static void record_term_end_for(struct workstream *ws, uint64_t gen, enum reason why,
                                struct conn *c, uint64_t rid)
{
    struct term_end *te = workstreams_stopping() ? NULL : calloc(1, sizeof *te);
    if (!te || ll_req_init(&te->req, LL_TERM_END, ws->skey, ws->h.keylen, NULL, 0, NULL, 0,
                           NULL, 0) < 0) {
        free(te);
        if (c)
            conn_reply_ok(c, rid);
        return;
    }
    te->req.generation = gen;
    te->req.term.ended_ms = wall_ms();
    te->req.term.reason = (uint8_t)why;
    te->req.done = term_end_done;
    if (c)
        conn_job_start(&te->job, c, rid);
    leaders_submit(&te->req);
}

static void record_term_end(struct workstream *ws, uint64_t gen, enum reason why)
{
    record_term_end_for(ws, gen, why, NULL, 0);
}

/* The leader is no longer: fence it at once, tell it (when tell), release
 * the lock (unless the lock table took it away: lock_gone) and end the
 * term.  ws stays: the caller drops it with workstreams_maybe_free when done. */
/* incident: the thief's text (an incident steal); resigner: the resign to
 * answer once the term's end is stored (rid its request), or NULL. */
static void leader_end_ex(struct workstream *ws, enum reason why, bool tell, bool lock_gone,
                          const uint8_t *incident, size_t incident_len,
                          struct conn *resigner, uint64_t rid)
{
    struct campaign *cp = ws->term;
    uint64_t gen = ws->live_generation;
    ws->live_generation = 0;
    ws->term = NULL;
    ws->draining = false;
    ws->over_hold = ws->hold_fencing = false;
    ws->ended_us = now_us();
    deadline_cancel(&ws->lease);
    deadline_cancel(&ws->hold);
    if (tell)
        send_lost(ws, cp->conn, gen, why, incident, incident_len);
    list_del(&cp->lead_link);
    if (why == REASON_RESIGNED) {
        emit("resigned", ws, gen, REASON_NONE);
    } else {
        leader_counts.lost++;
        events_leader_ex("lost", ws->skey, ws->h.keylen, gen, why, incident, incident_len, -1);
    }
    bool end_first = workstreams_ledger() && ll_term_end_first(workstreams_ledger());
    if (end_first)
        record_term_end_for(ws, gen, why, resigner, rid);
    ws->refs++;                        /* cp's reference goes with it */
    if (!lock_gone)
        locks_release(&cp->lock);      /* the next campaign's bump is queued now */
    campaign_free(cp);
    /* else the history after it: the next term's generation does not wait
     * for the old term's end to be written (leader-ledger.h) */
    if (!end_first)
        record_term_end_for(ws, gen, why, resigner, rid);
    ws->refs--;
}

static void leader_end(struct workstream *ws, enum reason why, bool tell, bool lock_gone)
{
    leader_end_ex(ws, why, tell, lock_gone, NULL, 0, NULL, 0);
}

static void on_lease_expired(struct deadline *d)
{
    struct workstream *ws = list_entry(d, struct workstream, lease);
    leader_end(ws, REASON_EXPIRED, true, false);
    workstreams_maybe_free(ws);
}

/* A drain of the live term: the leader is told unless it asked itself. */
static void start_drain(struct workstream *ws, enum reason why)
{
    if (ws->draining)
        return;
    ws->draining = true;
    ws->drain_reason = why;
    events_leader("draining", ws->skey, ws->h.keylen, ws->live_generation,
                  why == REASON_SELF ? REASON_NONE : why);
    struct conn *leader = ws->term->conn;
    if (why == REASON_SELF || !conn_alive(leader))
        return;
    coord_enc e;
    leader_event_begin(leader, &e, COORD_EV_LEADER_DRAIN, ws, ws->live_generation);
    coord_enc_kv_cstr(&e, "reason", reason_name(why));
    conn_enc_finish(leader, &e);
}

/* Max hold, whether or not anyone waits: the moment the term reaches it,
 * it drains (leader.drain, max_hold); one lease later it is fenced
 * (leader.lost, max_hold), and its holder may campaign again for a new
 * generation.  Counted: terms_max_hold (terms elected under a max hold),
 * terms_reached_max_hold (drained for it), terms_fenced_max_hold, and
 * terms_over_max_hold, the terms still live past that fence point (max
 * hold + one lease): note 000's "background holders exceeding the SLO",
 * zero unless the fence fails. */
static void on_hold(struct deadline *d);

static void max_hold_drain(struct workstream *ws)
{
    start_drain(ws, REASON_MAX_HOLD);
    ws->drain_reason = REASON_MAX_HOLD;
    ws->hold_fencing = true;
    deadline_set(&ws->hold, broker_now_ms(W.b) + ws->lease_ms, on_hold);
}

static void on_hold(struct deadline *d)
{
    struct workstream *ws = list_entry(d, struct workstream, hold);
    if (!ws->live_generation)
        return;
    if (ws->hold_fencing && BROKEN(MAX_HOLD_KEPT)) {
        if (!ws->over_hold) {          /* past the fence point, still live */
            ws->over_hold = true;
            leader_counts.terms_over_max_hold++;
        }
        return;
    }
    if (ws->hold_fencing) {
        leader_counts.terms_fenced_max_hold++;
        leader_end(ws, REASON_MAX_HOLD, true, false);
        workstreams_maybe_free(ws);
        return;
    }
    leader_counts.terms_reached_max_hold++;
    max_hold_drain(ws);
}

/* (Re)arms the max-hold timer of the live term from its descriptor. */
static void arm_hold(struct workstream *ws)
{
    if (ws->hold_fencing)
        return;                        /* the fence stands */
    if (!ws->desc.max_hold_ms) {
        deadline_cancel(&ws->hold);
        return;
    }
    deadline_set(&ws->hold, ws->elected_ms + ws->desc.max_hold_ms, on_hold);
}

static uint64_t capped_lease(const struct workstream *ws, uint64_t lease_ms)
{
    uint64_t cap = ws->desc.max_hold_ms;
    return cap && lease_ms > cap ? cap : lease_ms;
}

void leaders_defined(struct workstream *ws, const struct ws_desc *old)
{
    if (!ws->live_generation)
        return;
    if (old->mode != ws->desc.mode && conn_alive(ws->term->conn)) {
        struct conn *leader = ws->term->conn;
        coord_enc e;
        leader_event_begin(leader, &e, COORD_EV_LEADER_MODE, ws, ws->live_generation);
        coord_enc_kv_cstr(&e, "mode", ws_mode_name(ws->desc.mode));
        conn_enc_finish(leader, &e);
    }
    if (old->max_hold_ms != ws->desc.max_hold_ms)
        arm_hold(ws);
}

/* ---- campaign: the lock's owner ---- */

static void bump_done(struct ll_req *req);

static void start_bump(struct campaign *cp)
{
    struct conn *c = cp->conn;
    struct ws_term *t = &cp->bump.term;
    cp->state = CAMPAIGN_BUMPING;
    const char *cap;
    size_t cap_len;
    if (ws_desc_caps_missing(&cp->ws->desc, cp->caps, cp->caps_len, &cap, &cap_len)) {
        /* a define required it while the campaign waited */
        cp->bump.status = COORD_EPROTOCOL_PINNED;
        cp->bump.why = "the workstream requires a capability the campaign lacks";
        cp->bump.ud = cp;
        bump_done(&cp->bump);
        return;
    }
    if (ll_req_init(&cp->bump, LL_BUMP, cp->ws->skey, cp->ws->h.keylen,
                    NULL, 0, NULL, 0, NULL, 0) < 0) {
        cp->bump.status = COORD_ESTORAGE;
        cp->bump.why = "out of memory";
        cp->bump.ud = cp;
        bump_done(&cp->bump);          /* answered from the lock's own work */
        return;
    }
    cp->bump.generation = BROKEN(WIPE_GENERATION) ? 0 : ids_next();   /* the floor */
    cp->bump.incident = cp->incident_len > 0 || BROKEN(DISABLED_IGNORED);
    /* a remote ledger's term lease, and how its wait for another machine ends */
    cp->bump.lease_ms = capped_lease(cp->ws, cp->lease_ms);
    cp->bump.deadline_ms = cp->deadline_ms;
    cp->bump.no_wait = cp->if_available;
    cp->bump.steal = cp->steal;
    t->pid = c->pid;
    t->elected_ms = wall_ms();
    t->protocol = cp->protocol;
    const char *client = c->client ? c->client : "";
    const char *instance = c->instance ? c->instance : "";
    t->client_len = (uint16_t)strnlen(client, sizeof t->client);
    memcpy(t->client, client, t->client_len);
    t->instance_len = (uint16_t)strnlen(instance, sizeof t->instance);
    memcpy(t->instance, instance, t->instance_len);
    t->incident_len = cp->incident_len;
    memcpy(t->incident, cp->incident, cp->incident_len);
    cp->bump.ud = cp;
    cp->bump.done = bump_done;
    leaders_submit(&cp->bump);
}

static const char *bump_refusal(int status, const struct ll_req *req)
{
    switch (status) {
    case COORD_EDISABLED: return "workstream is disabled";
    case COORD_EPROTOCOL_PINNED:
        return req->why ? req->why : "the campaign's protocol is below the workstream's pin";
    case 0: return "leadership was stolen before it was granted";
    default: return req->why ? req->why : "cannot store the generation";
    }
}

/* The generation is stored: hand it out, if the campaign still wants it. */
static void bump_done(struct ll_req *req)
{
    struct campaign *cp = req->ud;
    struct workstream *ws = cp->ws;
    int status = req->status;
    if (status == 0 && req->busy) {
        /* if_available, and another machine leads (a remote ledger) */
        if (!cp->gone) {
            pending_finish(&cp->p);
            locks_reply_refused(cp->conn, cp->p.rid, LOCK_NOT_AVAILABLE);
        }
        if (!cp->lock_lost)
            locks_release(&cp->lock);
        campaign_free(cp);
        return;
    }
    if (status == 0) {
        ws->generation = req->out_generation;
        ws->desc = req->desc;          /* the ratchet may have moved */
    }
    if (cp->gone || cp->lock_lost || status != 0) {
        if (status == 0)
            record_term_end(ws, req->out_generation, REASON_ABORTED);
        if (!cp->gone) {
            pending_finish(&cp->p);
            if (status == COORD_EDISABLED)
                ws->disabled = true;
            conn_reply_error(cp->conn, cp->p.rid, status ? status : COORD_EABORTED,
                             bump_refusal(status, req));
        }
        if (!cp->lock_lost)
            locks_release(&cp->lock);
        campaign_free(cp);
        return;
    }
    pending_finish(&cp->p);
    cp->state = CAMPAIGN_LEADING;
    ws->term = cp;
    ws->live_generation = req->out_generation;
    ws->lease_ms = capped_lease(ws, cp->lease_ms);
    ws->elected_ms = broker_now_ms(W.b);
    ws->draining = ws->over_hold = ws->hold_fencing = false;
    list_append(&cp->conn->leads, &cp->lead_link);
    deadline_set(&ws->lease, ws->elected_ms + ws->lease_ms, on_lease_expired);
    arm_hold(ws);
    leader_counts.elected++;
    if (ws->desc.max_hold_ms)
        leader_counts.terms_max_hold++;
    if (ws->ended_us)
        latency_add(LAT_LEADER_TRANSITION, now_us() - ws->ended_us);
    events_leader_ex("elected", ws->skey, ws->h.keylen, ws->live_generation, REASON_NONE,
                     cp->incident, cp->incident_len, ws->desc.mode);
    coord_enc e;
    conn_enc_begin_reply(cp->conn, &e, cp->p.rid);
    coord_enc_kv_bool(&e, "granted", true);
    coord_enc_kv_uint(&e, "generation", ws->live_generation);
    coord_enc_kv_uint(&e, "lease_ms", ws->lease_ms);
    coord_enc_kv_cstr(&e, "mode", ws_mode_name(ws->desc.mode));
    conn_enc_finish(cp->conn, &e);
}

static struct campaign *campaign_of(struct lock_req *r)
{
    return (struct campaign *)((char *)r - offsetof(struct campaign, lock));
}

static void stop_waiting(struct campaign *cp)
{
    if (cp->waiting) {
        cp->waiting = false;
        cp->ws->campaigns_waiting--;
    }
}

static void campaign_lock_granted(struct lock_req *r)
{
    struct campaign *cp = campaign_of(r);
    stop_waiting(cp);
    start_bump(cp);
}

static const struct lock_owner campaign_owner;

/* stolen or expired: while the generation is written, or from the leader */
static void campaign_lock_lost(struct lock_req *r, enum reason why, const struct lock_req *by)
{
    struct campaign *cp = campaign_of(r);
    if (cp->state == CAMPAIGN_BUMPING) {
        cp->lock_lost = true;          /* bump_done answers ABORTED */
        return;
    }
    struct workstream *ws = cp->ws;
    /* an incident steal: the broken leader hears "incident" */
    const struct campaign *thief = by && by->owner == &campaign_owner
                                   ? campaign_of((struct lock_req *)by) : NULL;
    ws->refs++;
    if (why == REASON_STOLEN && thief && thief->ws == ws && thief->incident_len)
        leader_end_ex(ws, REASON_INCIDENT, true, true, thief->incident, thief->incident_len,
                      NULL, 0);
    else
        leader_end(ws, why, true, true);
    leaders_ws_unref(ws);
}

static void campaign_lock_failed(struct lock_req *r, int code)
{
    struct campaign *cp = campaign_of(r);
    pending_finish(&cp->p);
    conn_reply_error(cp->conn, cp->p.rid, code,
                     code == COORD_ETIMEOUT ? "not elected within timeout_ms" : NULL);
    campaign_free(cp);
}

static const struct lock_owner campaign_owner = {
    campaign_lock_granted, campaign_lock_lost, campaign_lock_failed, true,
};

/* cancel / shutdown (code), or the connection gone (code 0), while the
 * campaign waits or its generation is written */
static void campaign_leave(struct pending *p, int code)
{
    struct campaign *cp = list_entry(p, struct campaign, p);
    pending_finish(p);
    if (code)
        conn_reply_error(cp->conn, p->rid, code, NULL);
    if (cp->state == CAMPAIGN_BUMPING) {
        cp->gone = true;               /* bump_done cleans up */
        if (workstreams_ledger())      /* a remote bump may wait: answered soon */
            ll_cancel(workstreams_ledger(), &cp->bump);
        return;
    }
    locks_release(&cp->lock);
    campaign_free(cp);
}

static void campaign_abort(struct pending *p, int code) { campaign_leave(p, code); }
static void campaign_drop(struct pending *p) { campaign_leave(p, 0); }

void leaders_conn_closed(struct conn *c)
{
    while (!list_empty(&c->leads)) {
        struct campaign *cp = list_entry(c->leads.next, struct campaign, lead_link);
        struct workstream *ws = cp->ws;
        ws->refs++;
        leader_end(ws, REASON_DISCONNECTED, false, false);
        leaders_ws_unref(ws);
    }
}

/* A remote ledger says the term gen is over (its lease could have expired,
 * another machine disabled or took it): fence and tell the leader. */
void ll_term_lost(const uint8_t *key, size_t len, uint64_t gen, int reason)
{
    struct workstream *ws = workstreams_find(key, len);
    if (!ws || !ws->live_generation || ws->live_generation != gen)
        return;
    ws->refs++;
    leader_end(ws, (enum reason)reason, true, false);
    leaders_ws_unref(ws);
}

/* ---- ops ---- */

static void run_campaign(struct lreq *q, struct workstream *ws)
{
    struct conn *c = q->job.conn;
    uint64_t rid = q->job.rid;
    bool incident = q->text_len > 0;
    if (ws->disabled && !incident && !BROKEN(DISABLED_IGNORED)) {
        conn_reply_error(c, rid, COORD_EDISABLED, "workstream is disabled");
        return;
    }
    if (ws->term && ws->term->conn == c) {
        conn_reply_error(c, rid, COORD_EINVALID_OPTIONS,
                         "this connection already leads the workstream");
        return;
    }
    if (ws_desc_admit(&ws->desc, &q->protocol)) {
        char pin[WS_PROTOCOL_TEXT], msg[160];
        ws_protocol_format(&ws->desc.protocol, ws_desc_pin(&ws->desc), pin, sizeof pin);
        snprintf(msg, sizeof msg, "the workstream is pinned to %s or later", pin);
        conn_reply_error(c, rid, COORD_EPROTOCOL_PINNED, msg);
        return;
    }
    const char *cap;
    size_t cap_len;
    if (ws_desc_caps_missing(&ws->desc, q->caps, q->caps_len, &cap, &cap_len)) {
        char msg[160];
        snprintf(msg, sizeof msg, "the workstream requires capability %.*s, which the "
                 "campaign lacks", (int)cap_len, cap);
        conn_reply_error(c, rid, COORD_EPROTOCOL_PINNED, msg);
        return;
    }
    if (q->if_available && ws->desc.if_available == WS_IFAV_NEVER) {
        conn_reply_error(c, rid, COORD_EPOLICY,
                         "the workstream's if_available policy is never: campaigns wait");
        return;
    }
    if (q->steal && (ws->desc.steal == WS_STEAL_NEVER ||
                     (ws->desc.steal == WS_STEAL_INCIDENT_ONLY && !incident))) {
        conn_reply_error(c, rid, COORD_EPOLICY, ws->desc.steal == WS_STEAL_NEVER
                         ? "the workstream's steal policy is never"
                         : "the workstream's steal policy is incident-only: steal needs incident");
        return;
    }
    if (pending_check(c, rid) < 0)
        return;
    struct campaign *cp = calloc(1, sizeof *cp);
    if (!cp) {
        conn_reply_error(c, rid, COORD_ELIMIT, "out of memory");
        return;
    }
    if (ws->campaigns == 0)
        ws->lock_len = (uint16_t)leaders_lock_name(ws, &ws->desc, ws->lock);
    ws->campaigns++;
    cp->ws = ws;
    ws->refs++;
    cp->caps_len = (uint8_t)q->caps_len;
    if (q->caps_len)
        memcpy(cp->caps, q->caps, q->caps_len);
    cp->conn = c;
    c->refs++;
    cp->lease_ms = q->lease_ms;
    cp->deadline_ms = q->have_timeout ? broker_now_ms(W.b) + q->timeout_ms : 0;
    cp->if_available = q->if_available;
    cp->steal = q->steal;
    cp->protocol = q->protocol;
    cp->incident_len = (uint16_t)q->text_len;
    if (q->text_len)
        memcpy(cp->incident, q->text, q->text_len);
    list_init(&cp->lead_link);
    list_init(&cp->p.link);
    cp->p.abort = campaign_abort;
    cp->p.drop = campaign_drop;
    if (pending_start(c, &cp->p, rid, COORD_OP_LEADER_CAMPAIGN) < 0) {   /* memory: replied */
        campaign_free(cp);
        return;
    }
    struct lock_request_args a = {
        .name = ws->lock, .name_len = ws->lock_len,
        .mode = LOCK_EXCLUSIVE, .if_available = q->if_available, .steal = q->steal,
        .timeout_ms = q->timeout_ms,
    };
    enum lock_outcome o = locks_request(&cp->lock, c, &a, &campaign_owner);
    if (o == LOCK_GRANTED) {
        start_bump(cp);
    } else if (o == LOCK_QUEUED) {
        cp->waiting = true;
        ws->campaigns_waiting++;
    } else {
        pending_finish(&cp->p);
        locks_reply_refused(c, rid, o);
        campaign_free(cp);
    }
}

void op_leader_campaign(struct conn *c, uint64_t rid, coord_fields *f)
{
    coord_bytes name = { NULL, 0 }, protocol = name, incident = name, caps = name;
    struct lreq q = { .run = run_campaign, .lease_ms = 0 };
    coord_field_str(f, "capabilities", false, &caps);
    coord_field_str(f, "workstream", true, &name);
    coord_field_uint(f, "lease_ms", false, &q.lease_ms);
    coord_field_bool(f, "if_available", false, &q.if_available);
    coord_field_bool(f, "steal", false, &q.steal);
    q.have_timeout = coord_field_uint(f, "timeout_ms", false, &q.timeout_ms);
    bool has_protocol = coord_field_str(f, "protocol", false, &protocol);
    coord_field_str(f, "incident", false, &incident);
    if (!fields_ok(c, rid, f) ||
        !duration_ok(c, rid, "lease_ms", q.lease_ms, LIMIT_WAIT_MS) ||
        !duration_ok(c, rid, "timeout_ms", q.timeout_ms, LIMIT_WAIT_MS) ||
        !leaders_text_ok(c, rid, "incident", incident, LIMIT_INCIDENT, false))
        return;
    if (q.lease_ms == 0)
        q.lease_ms = BROKEN(LONG_LEASE) ? 30000 : LEADER_DEFAULT_LEASE_MS;
    const char *bad = NULL;
    if (q.steal && q.if_available)
        bad = "steal and if_available cannot be combined";
    else if (q.have_timeout && (q.steal || q.if_available))
        bad = "timeout_ms cannot be combined with steal or if_available";
    else if (has_protocol && ws_protocol_parse(protocol.ptr, protocol.len, &q.protocol) < 0)
        bad = "protocol must be name@N (name: 1..64 of A-Z a-z 0-9 . _ -, N: 1..4294967295)";
    else if (caps.len > LIMIT_CAPS_TEXT || (caps.len && memchr(caps.ptr, 0, caps.len)))
        bad = "capabilities must be at most 255 bytes";
    /* the descriptor's rules: "a,b", "[a, b]"; normalised to "a,b" */
    char ctext[LIMIT_CAPS_TEXT + 1], cnorm[LIMIT_CAPS_TEXT + 1], msg[160];
    if (!bad && caps.len) {
        memcpy(ctext, caps.ptr, caps.len);
        ctext[caps.len] = 0;
        const char *why = coord_desc_caps_normalize(ctext, cnorm, sizeof cnorm);
        if (why) {
            snprintf(msg, sizeof msg, "capabilities: %s", why);
            bad = msg;
        }
    }
    if (bad) {
        conn_reply_error(c, rid, COORD_EINVALID_OPTIONS, bad);
        return;
    }
    q.caps = caps.len ? (const uint8_t *)cnorm : NULL;
    q.caps_len = caps.len ? strlen(cnorm) : 0;
    q.text = incident.ptr;
    q.text_len = incident.len;
    leaders_with_workstream(c, rid, name, &q);
}

bool leaders_live(struct conn *c, uint64_t rid, struct workstream *ws, uint64_t gen)
{
    /* a lease past its end is over even if its timer has not run yet
     * (the loop may be busy): do now what the timer would do */
    uint64_t now = broker_now_ms(W.b);
    if (ws->live_generation && deadline_active(&ws->lease) && ws->lease.at <= now)
        leader_end(ws, REASON_EXPIRED, true, false);
    if (ws->live_generation && ws->hold_fencing && deadline_active(&ws->hold) &&
        ws->hold.at <= now)
        on_hold(&ws->hold);
    if (gen != 0 && ws->live_generation == gen)
        return true;
    leader_counts.fenced++;
    char msg[128];
    snprintf(msg, sizeof msg, "generation %llu is not the live one", (unsigned long long)gen);
    conn_reply_error(c, rid, COORD_EFENCED, msg);
    return false;
}

static void run_renew(struct lreq *q, struct workstream *ws)
{
    struct conn *c = q->job.conn;
    if (!leaders_live(c, q->job.rid, ws, q->generation))
        return;
    ws->lease_ms = capped_lease(ws, ws->lease_ms);
    deadline_set(&ws->lease, broker_now_ms(W.b) + ws->lease_ms, on_lease_expired);
    emit("renewed", ws, q->generation, REASON_NONE);
    coord_enc e;
    conn_enc_begin_reply(c, &e, q->job.rid);
    coord_enc_kv_uint(&e, "lease_ms", ws->lease_ms);
    conn_enc_finish(c, &e);
}

static void run_resign(struct lreq *q, struct workstream *ws)
{
    struct conn *c = q->job.conn;
    if (!leaders_live(c, q->job.rid, ws, q->generation))
        return;
    /* answered once the term's end is stored */
    leader_end_ex(ws, REASON_RESIGNED, false, false, NULL, 0, c, q->job.rid);
}

static void run_drain(struct lreq *q, struct workstream *ws)
{
    struct conn *c = q->job.conn;
    if (!leaders_live(c, q->job.rid, ws, q->generation))
        return;
    start_drain(ws, ws->term->conn == c ? REASON_SELF : REASON_REQUESTED);
    conn_reply_ok(c, q->job.rid);
}

static void run_check(struct lreq *q, struct workstream *ws)
{
    struct conn *c = q->job.conn;
    if (!leaders_live(c, q->job.rid, ws, q->generation))
        return;
    uint64_t now = broker_now_ms(W.b);
    coord_enc e;
    conn_enc_begin_reply(c, &e, q->job.rid);
    coord_enc_kv_bool(&e, "live", true);
    coord_enc_kv_uint(&e, "lease_left_ms", ws->lease.at > now ? ws->lease.at - now : 0);
    coord_enc_kv_cstr(&e, "mode", ws_mode_name(ws->desc.mode));
    conn_enc_finish(c, &e);
}

/* The ops whose fields are {workstream} or {workstream, generation}: read
 * them (in that order, so the first bad one is named) and run q. */
static void workstream_op(struct conn *c, uint64_t rid, coord_fields *f, struct lreq *q,
                          bool generation)
{
    coord_bytes name = { NULL, 0 };
    coord_field_str(f, "workstream", true, &name);
    if (generation)
        coord_field_uint(f, "generation", true, &q->generation);
    if (!fields_ok(c, rid, f))
        return;
    leaders_with_workstream(c, rid, name, q);
}

/* {workstream, generation} of renew, resign, drain and check */
static void live_op(struct conn *c, uint64_t rid, coord_fields *f,
                    void (*run)(struct lreq *, struct workstream *))
{
    struct lreq q = { .run = run };
    workstream_op(c, rid, f, &q, true);
}

void op_leader_renew(struct conn *c, uint64_t rid, coord_fields *f)
{
    live_op(c, rid, f, run_renew);
}

void op_leader_resign(struct conn *c, uint64_t rid, coord_fields *f)
{
    live_op(c, rid, f, run_resign);
}

void op_leader_drain(struct conn *c, uint64_t rid, coord_fields *f)
{
    live_op(c, rid, f, run_drain);
}

void op_leader_check(struct conn *c, uint64_t rid, coord_fields *f)
{
    live_op(c, rid, f, run_check);
}

static void run_info(struct lreq *q, struct workstream *ws)
{
    struct conn *c = q->job.conn;
    uint64_t now = broker_now_ms(c->b);
    coord_enc e;
    conn_enc_begin_reply(c, &e, q->job.rid);
    coord_enc_kv_uint(&e, "generation", ws->generation);
    coord_enc_kv_cstr(&e, "state", ws->live_generation ? (ws->draining ? "draining" : "leading")
                                   : ws->disabled ? "disabled" : "idle");
    coord_enc_kv_cstr(&e, "mode", ws_mode_name(ws->desc.mode));
    coord_enc_kv_uint(&e, "max_hold_ms", ws->desc.max_hold_ms);
    uint8_t lname[sizeof LOCK_PREFIX - 1 + LIMIT_WORKSTREAM];
    if (ws->campaigns)
        coord_enc_kv_name(&e, "lock_name", ws->lock, ws->lock_len);
    else
        coord_enc_kv_name(&e, "lock_name", lname, leaders_lock_name(ws, &ws->desc, lname));
    if (ws->desc.protocol.name_len) {
        char pin[WS_PROTOCOL_TEXT];
        size_t n = ws_protocol_format(&ws->desc.protocol, ws_desc_pin(&ws->desc), pin,
                                      sizeof pin);
        coord_enc_kv_str(&e, "pinned_protocol", pin, n);
    }
    if (ws->live_generation) {
        struct campaign *cp = ws->term;
        struct conn *leader = cp->conn;
        coord_enc_kv_uint(&e, "live_generation", ws->live_generation);
        coord_enc_kv_uint(&e, "conn", leader->id);
        coord_enc_kv_cstr(&e, "client", leader->client ? leader->client : "");
        coord_enc_kv_uint(&e, "pid", leader->pid);
        coord_enc_kv_uint(&e, "lease_left_ms", ws->lease.at > now ? ws->lease.at - now : 0);
        coord_enc_kv_uint(&e, "leading_ms", now - ws->elected_ms);
        if (cp->protocol.name_len) {
            char p[WS_PROTOCOL_TEXT];
            size_t n = ws_protocol_format(&cp->protocol, cp->protocol.version, p, sizeof p);
            coord_enc_kv_str(&e, "protocol", p, n);
        }
        if (cp->incident_len)
            coord_enc_kv_name(&e, "incident", cp->incident, cp->incident_len);
        if (ws->draining)
            coord_enc_kv_cstr(&e, "drain_reason", reason_name(ws->drain_reason));
    }
    coord_enc_kv_bool(&e, "disabled", ws->disabled);
    conn_enc_finish(c, &e);
}

void op_leader_info(struct conn *c, uint64_t rid, coord_fields *f)
{
    struct lreq q = { .run = run_info };
    workstream_op(c, rid, f, &q, false);
}

static void switch_done(struct ll_req *req)
{
    struct ll_call *call = req->ud;
    struct workstream *ws = call->ws;
    if (req->status == 0) {
        ws->generation = req->out_generation;
        /* announced once stored, with the generation it stored */
        emit(req->disable ? "disabled" : "enabled", ws, req->out_generation, REASON_NONE);
    }
    struct conn *c = ll_call_answer(call, req->why);
    if (c) {
        coord_enc e;
        conn_enc_begin_reply(c, &e, call->job.rid);
        if (req->disable)
            coord_enc_kv_uint(&e, "generation", req->out_generation);
        conn_enc_finish(c, &e);
    }
    ll_call_end(call);
}

/* A disable or enable, for c's request rid (c NULL: a descriptor file's,
 * cfg told when stored), answered by done once stored. */
static void start_switch(struct workstream *ws, bool disable, struct conn *c, uint64_t rid,
                         struct cfg_apply *cfg, void (*done)(struct ll_req *))
{
    struct ll_call *call = ll_call_new(c, rid, ws, LL_SET_DISABLED, ws->skey, ws->h.keylen,
                                       NULL, done);
    if (!call) {
        if (cfg) {
            cfg->pending++;
            cfg_part_done(cfg, CFG_SWITCH, COORD_ELIMIT, "out of memory");
        }
        return;
    }
    if (cfg) {
        call->cfg = cfg;
        cfg->pending++;
    }
    /* in memory at once: no campaign passes, no commit of the old leader */
    ws->disabled = disable;
    if (disable && ws->live_generation)
        leader_end(ws, REASON_DISABLED, true, false);
    call->req.disable = disable;
    call->req.generation = BROKEN(WIPE_GENERATION) ? 0 : ids_next();
    leaders_submit(&call->req);
}

static void run_switch(struct lreq *q, struct workstream *ws)
{
    start_switch(ws, q->disable, q->job.conn, q->job.rid, NULL, switch_done);
}

void op_leader_disable(struct conn *c, uint64_t rid, coord_fields *f)
{
    struct lreq q = { .run = run_switch, .disable = true };
    workstream_op(c, rid, f, &q, false);
}

void op_leader_enable(struct conn *c, uint64_t rid, coord_fields *f)
{
    struct lreq q = { .run = run_switch, .disable = false };
    workstream_op(c, rid, f, &q, false);
}

/* ---- descriptor files (leader-config.c reads them) ---- */

static void config_define_done(struct ll_req *req)
{
    struct ll_call *call = req->ud;
    if (req->status == 0)
        call->ws->desc = req->desc;
    cfg_part_done(call->cfg, CFG_DEFINE, req->status, req->why);
    ll_call_end(call);
}

static void config_switch_done(struct ll_req *req)
{
    struct ll_call *call = req->ud;
    struct workstream *ws = call->ws;
    if (req->status == 0) {
        ws->generation = req->out_generation;
        emit(req->disable ? "disabled" : "enabled", ws, req->out_generation, REASON_NONE);
    }
    cfg_part_done(call->cfg, CFG_SWITCH, req->status, req->why);
    ll_call_end(call);
}

static bool same_protocol_name(const struct ws_protocol *a, const struct ws_protocol *b)
{
    return a->name_len == b->name_len && memcmp(a->name, b->name, a->name_len) == 0;
}

/* A file's application on its loaded workstream.  A retry runs only the
 * parts that failed, with the patch as first adjusted: the memory may hold
 * the file's pin already, which the ledger does not. */
static void run_config(struct lreq *q, struct workstream *ws)
{
    struct cfg_apply *a = q->cfg;
    bool again = a->retry && a->adjusted;
    bool define = !again || a->redo_define, sw = again && a->redo_switch;
    a->redo_define = a->redo_switch = false;
    struct ws_patch p = a->patch;
    if (!a->adjusted && (p.set & WS_F_PROTOCOL)) {
        uint32_t pin = ws_desc_pin(&ws->desc);
        if (pin && same_protocol_name(&p.v.protocol, &ws->desc.protocol)) {
            /* the ratchet only raises the file's floor */
            if (p.v.protocol.version <= pin)
                p.set &= ~WS_F_PROTOCOL;
        } else if (pin) {
            p.force = true;          /* the file renames the protocol */
        }
    }
    a->patch = p;
    a->adjusted = true;
    struct ws_desc old = ws->desc;
    if (define && ws_desc_define(&ws->desc, &p, wall_ms()) == 0) {
        events_leader_ex("defined", ws->skey, ws->h.keylen, ws->generation, REASON_NONE,
                         NULL, 0, ws->desc.mode);
        leaders_defined(ws, &old);
        struct ll_call *call = ll_call_new(NULL, 0, ws, LL_DEFINE, ws->skey, ws->h.keylen,
                                           NULL, config_define_done);
        if (call) {
            call->cfg = a;
            a->pending++;
            call->req.patch = p;
            call->req.now_ms = wall_ms();
            leaders_submit(&call->req);
        } else {
            a->pending++;
            cfg_part_done(a, CFG_DEFINE, COORD_ELIMIT, "out of memory");
        }
    }
    if (a->disabled >= 0 && (sw || (!again && (bool)a->disabled != ws->disabled)))
        start_switch(ws, a->disabled, NULL, 0, a, config_switch_done);
    cfg_part_done(a, CFG_LOAD, 0, NULL);   /* run_config's own part */
}

void leaders_apply_config(const uint8_t *key, size_t klen, struct cfg_apply *a)
{
    struct lreq q = { .run = run_config, .internal = true, .cfg = a };
    a->pending++;                  /* CFG_LOAD: until run_config ran, or the load failed */
    leaders_with_key(NULL, 0, key, klen, &q);
}
