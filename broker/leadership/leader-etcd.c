/* leader-etcd.c - the "etcd" leader ledger: generations, descriptors,
 * commits, claims, pending lists, history and the disabled flag of every
 * workstream in an etcd cluster that the brokers of several machines
 * share (etcd-http.c: the v3 JSON gateway on the loop; etcd-json.c: the
 * keys, Txns and answers it sends and reads).
 *
 * The fence.  One contested leader key per workstream, bound to an etcd
 * lease of the term's own: a term's generation is that key's
 * create_revision, strictly increasing cluster-wide.  Every write is one
 * Txn whose compares are the fence: the leader key's create_revision is
 * the writer's generation, the op key is absent (at most once), the
 * read-only marker is absent (the rollout mode).  Whatever the compares
 * refuse is read back in the Txn's failure branch and named (FENCED,
 * READ_ONLY, duplicate, abandoned): decided inside etcd, never from this
 * broker's memory.
 *
 * A campaign (LL_BUMP) reads the workstream, checks the disabled flag and
 * the pin, grants a lease (TTL: LIMIT_ETCD_LEASE_TTL_S, which etcd raises
 * to its minimum; the term's own lease_ms is kept here, not in etcd) and
 * creates the leader key in a Txn that compares everything it read.
 * While another machine's term holds the key the bump waits here until
 * the key is gone (resigned, or its lease expired), its deadline passes
 * (TIMEOUT; UNAVAILABLE when etcd was out of reach), or it is cancelled;
 * a campaign's calls end by its deadline (plus ETCD_DEADLINE_GRACE_MS),
 * so a call in flight to a frozen etcd does not hold it past it.
 * A bump whose Txn outcome was lost recognises its own lease on the key
 * when it reads again.  A lease taken for an earlier try (a race for the
 * key lost, then a wait) is used only within TTL/3 of its grant, else
 * revoked and taken anew: nothing keeps it alive meanwhile, and a term
 * counts its time from the grant (below).
 *
 * The watch.  While bumps wait, one etcd watch streams the deletions
 * under the prefix (filter NOPUT; etcd-http.c's etcd_watch_start on the
 * loop); a deletion of a waiting bump's leader key makes it read again at
 * once.  The watch only wakes: every decision is still the bump's own
 * read and Txn, so a lost or late event costs time, never the fence.  A
 * bump is covered when the watch is live and its read's revision is at
 * or above the watch's creation revision (a deletion after that read
 * comes through); a covered bump still re-reads every
 * ETCD_WATCH_RECHECK_MS (a stream that stalls unseen), an uncovered one
 * every ETCD_POLL_MS, and when the watch becomes live the uncovered ones
 * read at once.  A watch that ends (etcd restarted, the connection broke,
 * canceled) starts again after a backoff (ETCD_RETRY_MS doubling to
 * ETCD_WATCH_BACKOFF_MAX_MS, reset once live); one that was live while
 * the calls found etcd out of reach (a frozen etcd keeps the TCP stream
 * open and silent) starts again once they reach it; with no bump
 * waiting for ETCD_WATCH_LINGER_MS it stops.
 *
 * Terms granted here are kept alive: every TTL/3 a lease keepalive and a
 * read of the leader key.  The term is lost, and leaders.c told
 * (ll_term_lost), at the latest at (send time of the last acknowledged
 * keepalive + TTL - margin) on the loop's monotonic clock, at a keepalive
 * answered without TTL (the lease is gone), or when the key is no longer
 * the term's (another machine disabled or stole it).  A term's end
 * revokes its lease, which deletes its leader key.  The etcd lease is
 * not the term's lease_ms (leaders.c keeps that one, renewals and expiry,
 * as with LMDB): it only bounds how long the key outlives a broker that
 * died or was cut off, and the broker gives the term up (above) before
 * etcd can let it go, whatever its length, so the fence is the same for
 * any TTL; LIMIT_ETCD_LEASE_TTL_S says what a short one costs.
 *
 * Order.  A workstream's descriptor writes (define, the disabled switch)
 * run one at a time, in the order submitted (desc_behind): each reads
 * what the one before stored, so a later load's file is stored last.
 *
 * Fail closed: a call that etcd does not answer is UNAVAILABLE (for a
 * write the outcome is unknown; the op id settles a retry at most once);
 * nothing is ever decided or applied from local state instead.  An answer
 * that does not decode (a Txn's without the ranges it was asked for) is
 * STORAGE: never read as the keys being absent (FENCED, a default
 * descriptor, a term stolen).
 *
 * Keys (P the prefix, W the scoped workstream in hex, N a name in hex):
 *   P w/W/leader        the term's broker and history token; lease-bound
 *   P w/W/desc          descriptor (ws_desc_encode)
 *   P w/W/ro            present while the mode is not active
 *   P w/W/disabled      "1" disabled, "0" enabled
 *   P w/W/hist/T        a term (ws_term_encode); generation = its create_revision
 *   P w/W/kv/N          generation u64 BE + value
 *   P w/W/op/N          generation u64 BE (applied: kept, the at-most-once record)
 *   P w/W/pend/N        generation u64, claimed_ms u64 (claimed, unsettled;
 *                       oldest first by create_revision)
 *   P w/W/aband/N       generation u64, ms u64, reason (abandoned)
 * What is no longer needed goes: settled claims leave pend/, history is
 * trimmed to LIMIT_HISTORY, a term's leader key goes with its lease, and
 * old revisions are compacted (keeping the last ETCD_COMPACT_KEEP). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include "breaks.h"
#include "broker.h"
#include "coord-limits.h"
#include "enc.h"
#include "errors.h"
#include "etcd-http.h"
#include "etcd-json.h"
#include "leader-ledger.h"
#include "reasons.h"
#include "records.h"
#include "skey.h"

/* One timer runs waiting bumps, keepalives, the probe and compaction. */
#define ETCD_TICK_MS 50
/* A bump waiting for another machine's term reads the key again this
 * often while the watch does not cover it, and this often when it does. */
#define ETCD_POLL_MS 100
#define ETCD_WATCH_RECHECK_MS 1000
/* The watch: reconnects back off up to this; it stops after this long
 * with no bump waiting. */
#define ETCD_WATCH_BACKOFF_MAX_MS 4000
#define ETCD_WATCH_LINGER_MS 10000
/* After etcd did not answer, a wait or keepalive tries again this soon. */
#define ETCD_RETRY_MS 250
/* One call, every endpoint tried included. */
#define ETCD_CALL_MS 2000
/* A campaign's calls end by its deadline (timeout_ms) plus this, sooner
 * than ETCD_CALL_MS: a read in flight to a frozen etcd does not hold the
 * campaign past its timeout. */
#define ETCD_DEADLINE_GRACE_MS 100
/* An idle broker asks etcd this often whether it is there (coordctl status). */
#define ETCD_PROBE_MS 1000
/* Compaction: at most this often, keeping this many revisions (nothing
 * here reads an old revision; other users of the cluster may watch). */
#define ETCD_COMPACT_MS 30000
#define ETCD_COMPACT_KEEP 10000
/* Attempts of a read-check-write that others keep changing. */
#define ETCD_MAX_ATTEMPTS 32

struct eterm;

struct etcd_ll {
    struct broker *b;
    struct etcd *http;
    char prefix[128];
    uv_timer_t tick;
    uv_idle_t idle;                /* answers, never inside submit */
    struct ll_req *done_head, *done_tail;
    struct list ops;               /* struct eop, every one not answered */
    struct list terms;             /* struct eterm, granted here */
    uint64_t nonce, seq;
    uint64_t revision, compacted;  /* the highest revision seen, the last compacted */
    uint64_t next_probe, next_compact;
    bool probing, compacting, closing;
    bool desc_ended;               /* a descriptor write ended: start the next (on_idle) */
    unsigned handles;              /* tick + idle, until closed */
    /* the watch (see the top comment) */
    struct etcd_watch *watch;
    bool watch_live, watch_suspect;
    uint64_t watch_rev;            /* its creation revision, once live */
    uint64_t watch_started, watch_next, watch_backoff, watch_idle_since;   /* uv_now */
    uint64_t watch_wakeups, watch_connects, lease_ttl_ms;                   /* stats */
    uint64_t define_rereads;       /* stats: defines whose Txn found the descriptor changed */
};

enum phase { PH_READ, PH_LEASE, PH_TXN, PH_STEAL, PH_FIX, PH_WAIT, PH_TERM_HIST, PH_DONE };

/* A request in progress (r->be). */
struct eop {
    struct etcd_ll *E;
    struct ll_req *r;
    struct list link;              /* E->ops */
    enum phase phase;
    unsigned attempts;
    bool inflight, cancelled, unreachable;
    bool queued;                   /* a descriptor write behind another (desc_behind) */
    bool watching;                 /* PH_WAIT for another machine's term */
    bool woken;                    /* its key's deletion came while it read */
    uint64_t next_at;              /* PH_WAIT: when to read again */
    uint64_t read_rev;             /* the revision of its last read */
    /* bump */
    int64_t lease;
    uint64_t ttl_ms, lease_sent;
    char token[40];
    uint64_t leader_create, desc_mod, dis_mod, last_mod, hist_count;
    char *last_key, *oldest_key;   /* history: the newest entry, the oldest */
    struct ws_term last;
    bool last_live;
    /* claim / define */
    uint64_t pend_mod, pend_gen, pend_ms, put_rev;
};

/* A term granted here, kept alive until it ends. */
struct eterm {
    struct list link;              /* E->terms */
    struct etcd_ll *E;
    uint8_t *ws;
    size_t ws_len;
    uint64_t generation;
    int64_t lease;
    uint64_t ttl_ms, acked_sent, ka_sent, next_ka;
    char token[40];
    struct ws_term term;
    bool ka_inflight, check_inflight, lost, ended;
    unsigned end_calls;            /* the end's calls in flight */
    struct ll_req *end_req;        /* the TERM_END answered once they are back */
};

static void step(struct eop *o);

/* ---- keys ---- */

#define KEY(var, r, kind, name, nl) \
    char var[EKEY_MAX]; ej_key(var, o->E->prefix, (r)->ws, (r)->ws_len, kind, name, nl)

static void saw_revision(struct etcd_ll *E, json_t *j)
{
    json_t *h = json_object_get(j, "header");
    if (!h) {
        json_t *res = json_object_get(j, "result");
        h = res ? json_object_get(res, "header") : NULL;
    }
    uint64_t rev = ej_num(h, "revision");
    if (rev > E->revision)
        E->revision = rev;
}
/* ---- answers ---- */

static void desc_start_queued(struct etcd_ll *E);

/* a descriptor write: run one at a time per workstream (desc_behind) */
static bool desc_write(const struct ll_req *r)
{
    return r->op == LL_DEFINE || r->op == LL_SET_DISABLED;
}

static void on_idle(uv_idle_t *h)
{
    struct etcd_ll *E = h->data;
    struct ll_req *r = E->done_head;
    E->done_head = E->done_tail = NULL;
    uv_idle_stop(&E->idle);
    while (r) {
        struct ll_req *next = r->next_done;
        r->done(r);
        r = next;
    }
    if (E->desc_ended && !E->closing) {
        E->desc_ended = false;
        desc_start_queued(E);
    }
}

static void queue_done(struct etcd_ll *E, struct ll_req *r)
{
    r->next_done = NULL;
    if (E->done_tail)
        E->done_tail->next_done = r;
    else
        E->done_head = r;
    E->done_tail = r;
    uv_idle_start(&E->idle, on_idle);
}

static void lease_revoke(struct etcd_ll *E, int64_t lease);

static void op_free(struct eop *o)
{
    list_del(&o->link);
    free(o->last_key);
    free(o->oldest_key);
    free(o);
}

static void answer(struct eop *o, int status)
{
    struct ll_req *r = o->r;
    struct etcd_ll *E = o->E;
    r->status = status;
    r->be = NULL;
    /* a bump that did not grant gives its lease back */
    if (r->op == LL_BUMP && o->lease && (status || r->busy))
        lease_revoke(E, o->lease);
    if (desc_write(r))
        E->desc_ended = true;      /* on_idle starts the next of its workstream */
    op_free(o);
    queue_done(E, r);
}

static void answer_why(struct eop *o, int status, const char *why)
{
    o->r->why = why;
    answer(o, status);
}

/* etcd did not answer */
static void answer_unreachable(struct eop *o)
{
    if (BROKEN(ETCD_FAIL_OPEN) && o->r->op == LL_COMMIT) {
        o->r->duplicate = false;
        o->r->out_abandoned = false;
        answer(o, 0);               /* "applied", decided without the ledger */
        return;
    }
    if (o->E->http && etcd_foreign(o->E->http))
        answer_why(o, COORD_EUNAVAILABLE,
                   "not an etcd endpoint (the server at --etcd-endpoints does not "
                   "answer as etcd's gateway)");
    else
        answer_why(o, COORD_EUNAVAILABLE, "the etcd ledger is out of reach (outcome unknown)");
}

static void answer_malformed(struct eop *o)
{
    answer_why(o, COORD_ESTORAGE, "etcd sent an answer that does not decode");
}

/* ---- calls ---- */

static void on_reply(void *ud, enum etcd_status st, long http, json_t *j);

/* how long o's next call may take: ETCD_CALL_MS, or for a campaign with a
 * timeout what is left of it plus ETCD_DEADLINE_GRACE_MS */
static uint64_t call_ms(const struct eop *o)
{
    const struct ll_req *r = o->r;
    if (r->op != LL_BUMP || !r->deadline_ms)
        return ETCD_CALL_MS;
    uint64_t now = broker_now_ms(o->E->b);
    uint64_t left = (r->deadline_ms > now ? r->deadline_ms - now : 0) + ETCD_DEADLINE_GRACE_MS;
    return left < ETCD_CALL_MS ? left : ETCD_CALL_MS;
}

static void post(struct eop *o, const char *path, json_t *body, bool idempotent)
{
    o->inflight = true;
    etcd_post(o->E->http, path, body, idempotent, call_ms(o), on_reply, o);
}

/* fire and forget */
static void on_ignore(void *ud, enum etcd_status st, long http, json_t *j)
{
    (void)ud; (void)st; (void)http; (void)j;
}

static void lease_revoke(struct etcd_ll *E, int64_t lease)
{
    if (E->closing)
        return;
    json_t *b = json_object();
    json_object_set_new(b, "ID", ej_numstr((uint64_t)lease));
    etcd_post(E->http, "/v3/lease/revoke", b, true, ETCD_CALL_MS, on_ignore, NULL);
}

/* ---- terms kept alive ---- */

static struct eterm *term_find(struct etcd_ll *E, const uint8_t *ws, size_t wl, uint64_t gen)
{
    struct list *pos, *tmp;
    list_for_each_safe(pos, tmp, &E->terms) {
        struct eterm *t = list_entry(pos, struct eterm, link);
        if (t->generation == gen && t->ws_len == wl && memcmp(t->ws, ws, wl) == 0)
            return t;
    }
    return NULL;
}

static void term_maybe_free(struct eterm *t)
{
    if (!t->ended || t->ka_inflight || t->check_inflight || t->end_calls)
        return;
    list_del(&t->link);
    free(t->ws);
    free(t);
}

static void on_term_end_call(void *ud, enum etcd_status st, long http, json_t *j)
{
    struct eterm *t = ud;
    (void)http; (void)j;
    t->end_calls--;
    if (t->end_req && st != ETCD_OK)
        t->end_req->status = COORD_EUNAVAILABLE;
    if (!t->end_calls && t->end_req) {
        queue_done(t->E, t->end_req);
        t->end_req = NULL;
    }
    term_maybe_free(t);
}

/* The term is over: its history entry says how (unless trimmed away), its
 * lease goes (and with it the leader key).  r, when given, is answered
 * once both calls are back.  t is not freed here (its callers, on_check
 * and on_keepalive through term_lost, go on with it): once its calls are
 * back, or by etcd_ll_close, which frees every term. */
static void term_end(struct eterm *t, uint64_t ended_ms, uint8_t reason, struct ll_req *r)
{
    struct etcd_ll *E = t->E;
    t->ended = true;
    t->end_req = r;
    if (r)
        r->status = 0;
    if (E->closing) {
        if (r)
            queue_done(E, r);
        t->end_req = NULL;
        return;
    }
    struct ws_term tm = t->term;
    tm.ended_ms = ended_ms;
    tm.reason = reason;
    uint8_t buf[WS_TERM_MAX];
    char hk[EKEY_MAX];
    ej_key(hk, E->prefix, t->ws, t->ws_len, "hist", (const uint8_t *)t->token,
           strlen(t->token));
    struct ej_txn x;
    ej_txn_init(&x);
    json_array_append_new(x.cmp, ej_cmp(hk, "CREATE", t->generation));
    json_array_append_new(x.ok, ej_put(hk, buf, ws_term_encode(&tm, buf), 0));
    t->end_calls = 2;
    etcd_post(E->http, "/v3/kv/txn", x.root, true, ETCD_CALL_MS, on_term_end_call, t);
    json_t *b = json_object();
    json_object_set_new(b, "ID", ej_numstr((uint64_t)t->lease));
    etcd_post(E->http, "/v3/lease/revoke", b, true, ETCD_CALL_MS, on_term_end_call, t);
}

static void term_lost(struct eterm *t, int reason)
{
    if (t->lost || t->ended)
        return;
    t->lost = true;
    log_event(LOG_WARN, "leader.etcd_term_lost", "generation=%llu reason=%s",
              (unsigned long long)t->generation, reason_name((enum reason)reason));
    /* leaders.c fences and tells the leader; its term end comes back here */
    ll_term_lost(t->ws, t->ws_len, t->generation, reason);
    if (!t->ended)
        term_end(t, wall_ms(), (uint8_t)reason, NULL);
}

static uint64_t term_margin(const struct eterm *t)
{
    uint64_t m = t->ttl_ms / 5;
    return m < 2 * ETCD_TICK_MS ? 2 * ETCD_TICK_MS : m;
}

static void on_keepalive(void *ud, enum etcd_status st, long http, json_t *j)
{
    struct eterm *t = ud;
    (void)http;
    t->ka_inflight = false;
    uint64_t now = uv_now(t->E->b->loop);
    if (st == ETCD_OK && !t->ended) {
        json_t *res = json_object_get(j, "result");
        uint64_t ttl = ej_num(res ? res : j, "TTL");
        saw_revision(t->E, j);
        if (ttl == 0) {
            term_lost(t, REASON_LEDGER_UNAVAILABLE);   /* the lease is gone */
        } else {
            t->acked_sent = t->ka_sent;
            t->next_ka = t->ka_sent + t->ttl_ms / 3;
        }
    } else if (!t->ended) {
        t->next_ka = now + ETCD_RETRY_MS;
    }
    term_maybe_free(t);
}

static void on_check(void *ud, enum etcd_status st, long http, json_t *j)
{
    struct eterm *t = ud;
    (void)http;
    t->check_inflight = false;
    if (st == ETCD_OK && !t->ended) {
        struct ej_kv leader, dis;
        if (ej_txn_kv(j, 0, &leader, NULL) == 0 && ej_txn_kv(j, 1, &dis, NULL) == 0) {
            bool disabled = dis.found && dis.vlen == 1 && dis.val[0] == '1';
            if (!leader.found || leader.create != t->generation)
                term_lost(t, disabled ? REASON_DISABLED : REASON_STOLEN);
        }
        ej_kv_free(&leader);
        ej_kv_free(&dis);
    }
    term_maybe_free(t);
}

static void term_tick(struct eterm *t, uint64_t now)
{
    if (t->ended || t->lost)
        return;
    if (now >= t->acked_sent + t->ttl_ms - term_margin(t)) {
        term_lost(t, REASON_LEDGER_UNAVAILABLE);
        return;
    }
    if (now < t->next_ka || t->ka_inflight)
        return;
    struct etcd_ll *E = t->E;
    t->ka_inflight = true;
    t->ka_sent = now;
    t->next_ka = now + t->ttl_ms / 3;
    json_t *b = json_object();
    json_object_set_new(b, "ID", ej_numstr((uint64_t)t->lease));
    uint64_t left = t->acked_sent + t->ttl_ms - now;
    etcd_post(E->http, "/v3/lease/keepalive", b, true, left < ETCD_CALL_MS ? left : ETCD_CALL_MS,
              on_keepalive, t);
    if (!t->check_inflight) {
        char lk[EKEY_MAX], dk[EKEY_MAX];
        ej_key(lk, E->prefix, t->ws, t->ws_len, "leader", NULL, 0);
        ej_key(dk, E->prefix, t->ws, t->ws_len, "disabled", NULL, 0);
        struct ej_txn x;
        ej_txn_init(&x);
        json_array_append_new(x.ok, ej_range(lk, EJ_KEYS_ONLY, 0));
        json_array_append_new(x.ok, ej_range(dk, 0, 0));
        t->check_inflight = true;
        etcd_post(E->http, "/v3/kv/txn", x.root, true, ETCD_CALL_MS, on_check, t);
    }
}

/* ---- the watch (see the top comment) ---- */

static bool covered(const struct etcd_ll *E, const struct eop *o)
{
    return E->watch_live && !E->watch_suspect && o->read_rev >= E->watch_rev;
}

static uint64_t wait_interval(const struct etcd_ll *E, const struct eop *o)
{
    return covered(E, o) ? ETCD_WATCH_RECHECK_MS : ETCD_POLL_MS;
}

static bool is_waiter(const struct eop *o)
{
    return o->r->op == LL_BUMP && o->phase == PH_WAIT && o->watching && !o->inflight;
}

/* the watch covers nobody any more: the waiting bumps poll */
static void uncover(struct etcd_ll *E, uint64_t now)
{
    struct list *pos, *tmp;
    list_for_each_safe(pos, tmp, &E->ops) {
        struct eop *o = list_entry(pos, struct eop, link);
        if (is_waiter(o) && o->next_at > now + ETCD_POLL_MS)
            o->next_at = now + ETCD_POLL_MS;
    }
}

static void on_watch_msg(void *ud, json_t *msg)
{
    struct etcd_ll *E = ud;
    json_t *res = json_object_get(msg, "result");
    if (!res || E->closing)
        return;
    struct list *pos, *tmp;
    if (json_is_true(json_object_get(res, "canceled"))) {
        /* etcd ended it (compacted, or the cluster said no): start again */
        log_event(LOG_INFO, "leader.etcd_watch_canceled", "reason=\"%s\"",
                  json_string_value(json_object_get(res, "cancel_reason"))
                      ? json_string_value(json_object_get(res, "cancel_reason")) : "");
        etcd_watch_stop(E->watch);
        E->watch = NULL;
        E->watch_live = false;
        E->watch_next = uv_now(E->b->loop) + E->watch_backoff;
        uncover(E, uv_now(E->b->loop));
        return;
    }
    if (json_is_true(json_object_get(res, "created"))) {
        E->watch_live = true;
        E->watch_suspect = false;
        E->watch_rev = ej_header_revision(res);
        E->watch_backoff = ETCD_RETRY_MS;
        E->watch_connects++;
        log_event(LOG_DEBUG, "leader.etcd_watch_live", "revision=%llu",
                  (unsigned long long)E->watch_rev);
        /* the bumps whose read came before it read again now */
        uint64_t now = uv_now(E->b->loop);
        list_for_each_safe(pos, tmp, &E->ops) {
            struct eop *o = list_entry(pos, struct eop, link);
            if (is_waiter(o))
                o->next_at = covered(E, o) ? now + ETCD_WATCH_RECHECK_MS : now;
        }
        return;
    }
    json_t *evs = json_object_get(res, "events");
    for (size_t i = 0; i < json_array_size(evs); i++) {
        json_t *ev = json_array_get(evs, i);
        const char *type = json_string_value(json_object_get(ev, "type"));
        const char *k64 = json_string_value(json_object_get(json_object_get(ev, "kv"), "key"));
        uint8_t *key;
        size_t kl;
        if (!type || strcmp(type, "DELETE") != 0 || !k64 || etcd_unb64(k64, &key, &kl) < 0)
            continue;
        list_for_each_safe(pos, tmp, &E->ops) {
            struct eop *o = list_entry(pos, struct eop, link);
            bool reading = o->r->op == LL_BUMP && o->phase == PH_READ && o->inflight;
            if (!is_waiter(o) && !reading)
                continue;
            char lk[EKEY_MAX];
            ej_key(lk, E->prefix, o->r->ws, o->r->ws_len, "leader", NULL, 0);
            if (strlen(lk) != kl || memcmp(lk, key, kl) != 0)
                continue;
            E->watch_wakeups++;
            log_event(LOG_DEBUG, "leader.etcd_watch_woke", "revision=%llu reading=%d",
                      (unsigned long long)ej_num(json_object_get(ev, "kv"), "mod_revision"),
                      (int)reading);
            if (reading)
                o->woken = true;       /* its read may predate the deletion */
            else
                step(o);               /* reads again: the key is gone */
        }
        free(key);
    }
}

static void on_watch_end(void *ud)
{
    struct etcd_ll *E = ud;
    uint64_t now = uv_now(E->b->loop);
    E->watch = NULL;
    E->watch_live = false;
    if (E->closing)
        return;
    log_event(LOG_DEBUG, "leader.etcd_watch_ended", "retry_ms=%llu",
              (unsigned long long)E->watch_backoff);
    E->watch_next = now + E->watch_backoff;
    if (E->watch_backoff < ETCD_WATCH_BACKOFF_MAX_MS)
        E->watch_backoff *= 2;
    uncover(E, now);
}

static void watch_stop(struct etcd_ll *E)
{
    etcd_watch_stop(E->watch);
    E->watch = NULL;
    E->watch_live = false;
}

/* on every tick: start, restart or stop the watch */
static void watch_tick(struct etcd_ll *E, uint64_t now)
{
    if (BROKEN(ETCD_POLL))
        return;
    bool waiting = false;          /* a bump waits for another machine's term */
    struct list *pos, *tmp;
    list_for_each_safe(pos, tmp, &E->ops)
        waiting = waiting || is_waiter(list_entry(pos, struct eop, link));
    if (waiting)
        E->watch_idle_since = now;
    if (E->watch && !waiting && now >= E->watch_idle_since + ETCD_WATCH_LINGER_MS) {
        watch_stop(E);
        return;
    }
    /* the calls found etcd out of reach: the stream may be a silent one */
    if (E->watch && E->watch_live && !E->watch_suspect && !etcd_reachable(E->http)) {
        E->watch_suspect = true;
        uncover(E, now);
    }
    bool stale = E->watch && ((E->watch_suspect && etcd_reachable(E->http)) ||
                              (!E->watch_live && now >= E->watch_started + ETCD_CALL_MS));
    if (stale) {
        watch_stop(E);
        E->watch_next = now;
    }
    if (E->watch || !waiting || now < E->watch_next)
        return;
    char pk[EKEY_MAX];
    snprintf(pk, sizeof pk, "%sw/", E->prefix);
    json_t *cr = json_object();
    json_object_set_new(cr, "key", ej_b64(pk, strlen(pk)));
    json_object_set_new(cr, "range_end", ej_end(pk));
    json_t *filters = json_array();
    json_array_append_new(filters, json_string("NOPUT"));
    json_object_set_new(cr, "filters", filters);
    json_t *b = json_object();
    json_object_set_new(b, "create_request", cr);
    E->watch_started = now;
    E->watch_suspect = false;
    E->watch = etcd_watch_start(E->http, b, on_watch_msg, on_watch_end, E);
    if (!E->watch)
        E->watch_next = now + E->watch_backoff;
}

/* ---- the ops ---- */

static void put_u64s(uint8_t *b, uint64_t a, uint64_t c)
{
    put_be64(b, a);
    put_be64(b + 8, c);
}

/* LOAD, and BUMP's read: leader, desc, disabled, the newest and oldest
 * history entries */
static void send_read(struct eop *o)
{
    struct ll_req *r = o->r;
    KEY(lk, r, "leader", NULL, 0);
    KEY(dk, r, "desc", NULL, 0);
    KEY(xk, r, "disabled", NULL, 0);
    KEY(hk, r, "hist/", NULL, 0);
    struct ej_txn x;
    ej_txn_init(&x);
    json_array_append_new(x.ok, ej_range(lk, 0, 0));
    json_array_append_new(x.ok, ej_range(dk, 0, 0));
    json_array_append_new(x.ok, ej_range(xk, 0, 0));
    json_array_append_new(x.ok, ej_range(hk, EJ_PREFIX | EJ_NEWEST, 1));
    json_array_append_new(x.ok, ej_range(hk, EJ_PREFIX | EJ_OLDEST | EJ_KEYS_ONLY, 1));
    post(o, "/v3/kv/txn", x.root, true);
}

static int desc_of(const struct ej_kv *k, struct ws_desc *d)
{
    if (!k->found) {
        ws_desc_default(d);
        return 0;
    }
    return ws_desc_decode(d, k->val, k->vlen);
}

static bool is_disabled(const struct ej_kv *k)
{
    return k->found && k->vlen == 1 && k->val[0] == '1';
}

static void load_read(struct eop *o, json_t *j)
{
    struct ll_req *r = o->r;
    struct ej_kv leader, desc, dis, newest;
    int bad = ej_txn_kv(j, 0, &leader, NULL) | ej_txn_kv(j, 1, &desc, NULL) |
              ej_txn_kv(j, 2, &dis, NULL) | ej_txn_kv(j, 3, &newest, NULL);
    uint64_t g = leader.create;
    if (newest.create > g) g = newest.create;
    if (dis.mod > g) g = dis.mod;
    r->out_generation = g;
    r->out_disabled = is_disabled(&dis);
    if (!bad && desc_of(&desc, &r->desc) < 0)
        bad = -1;
    ej_kv_free(&leader);
    ej_kv_free(&desc);
    ej_kv_free(&dis);
    ej_kv_free(&newest);
    if (bad)
        answer_malformed(o);
    else
        answer(o, 0);
}

/* bump: the read is in; decide, then lease, then the Txn */
static void bump_read(struct eop *o, json_t *j)
{
    struct ll_req *r = o->r;
    struct ej_kv leader, desc, dis, newest, oldest;
    uint64_t count = 0;
    int bad = ej_txn_kv(j, 0, &leader, NULL) | ej_txn_kv(j, 1, &desc, NULL) |
              ej_txn_kv(j, 2, &dis, NULL) | ej_txn_kv(j, 3, &newest, &count) |
              ej_txn_kv(j, 4, &oldest, NULL);
    if (!bad && desc_of(&desc, &r->desc) < 0)
        bad = -1;
    o->leader_create = leader.create;
    o->desc_mod = desc.mod;
    o->dis_mod = dis.mod;
    o->hist_count = count;
    free(o->last_key);
    free(o->oldest_key);
    o->last_key = o->oldest_key = NULL;
    o->last_live = false;
    o->last_mod = newest.mod;
    if (!bad && newest.found && ws_term_decode(&o->last, newest.val, newest.vlen) == 0 &&
        o->last.reason == REASON_NONE) {
        o->last_live = true;
        o->last.generation = newest.create;
        o->last_key = strdup(newest.key);
    }
    if (!bad && oldest.found && count >= LIMIT_HISTORY)
        o->oldest_key = strdup(oldest.key);
    bool disabled = is_disabled(&dis);
    bool ours = leader.found && o->lease && leader.lease == o->lease;
    uint64_t leader_gen = leader.create;
    ej_kv_free(&leader);
    ej_kv_free(&desc);
    ej_kv_free(&dis);
    ej_kv_free(&newest);
    ej_kv_free(&oldest);
    if (bad) {
        answer_malformed(o);
        return;
    }
    int rc;
    if (ours) {
        /* our Txn went through though its answer was lost */
        r->out_generation = r->term.generation = leader_gen;
        o->phase = PH_DONE;
        step(o);
        return;
    }
    if (disabled && !r->incident) {
        answer_why(o, COORD_EDISABLED, "workstream is disabled");
        return;
    }
    if ((rc = ws_desc_admit(&r->desc, &r->term.protocol))) {
        answer(o, rc);
        return;
    }
    if (o->leader_create) {
        if (r->steal) {
            o->phase = PH_STEAL;
        } else if (r->no_wait) {
            r->busy = true;
            answer(o, 0);
            return;
        } else {
            o->phase = PH_WAIT;
            o->watching = true;
            o->read_rev = ej_header_revision(j);
            o->next_at = uv_now(o->E->b->loop) + (o->woken ? 0 : wait_interval(o->E, o));
            o->woken = false;
            return;
        }
    } else {
        if (o->lease && uv_now(o->E->b->loop) >= o->lease_sent + o->ttl_ms / 3) {
            /* taken for an earlier try (a race for the key lost, then a
             * wait) and never kept alive: a term on it would be lost
             * before its first keepalive.  A new one. */
            lease_revoke(o->E, o->lease);
            o->lease = 0;
        }
        o->phase = o->lease ? PH_TXN : PH_LEASE;
    }
    step(o);
}

static void send_bump_txn(struct eop *o)
{
    struct ll_req *r = o->r;
    struct etcd_ll *E = o->E;
    KEY(lk, r, "leader", NULL, 0);
    KEY(dk, r, "desc", NULL, 0);
    KEY(xk, r, "disabled", NULL, 0);
    KEY(hk, r, "hist", (const uint8_t *)o->token, strlen(o->token));
    struct ej_txn x;
    ej_txn_init(&x);
    json_array_append_new(x.cmp, ej_cmp(lk, "CREATE", 0));
    json_array_append_new(x.cmp, ej_cmp(dk, "MOD", o->desc_mod));
    json_array_append_new(x.cmp, ej_cmp(xk, "MOD", o->dis_mod));
    char who[96];
    int wn = snprintf(who, sizeof who, "%016llx %s", (unsigned long long)E->nonce, o->token);
    json_array_append_new(x.ok, ej_put(lk, who, (size_t)wn, o->lease));
    struct ws_term t = r->term;
    t.generation = 0;              /* its key's create_revision */
    t.mode = r->desc.mode;
    t.reason = REASON_NONE;
    t.ended_ms = 0;
    uint8_t buf[WS_TERM_MAX];
    json_array_append_new(x.ok, ej_put(hk, buf, ws_term_encode(&t, buf), 0));
    struct ws_desc d = r->desc;
    if (ws_desc_grant(&d, &r->term.protocol)) {
        uint8_t db[WS_DESC_MAX];
        json_array_append_new(x.ok, ej_put(dk, db, ws_desc_encode(&d, db), 0));
    }
    /* the term before, never ended (its broker stopped): restart */
    if (o->last_key) {
        json_array_append_new(x.cmp, ej_cmp(o->last_key, "MOD", o->last_mod));
        struct ws_term last = o->last;
        last.reason = REASON_RESTART;
        json_array_append_new(x.ok, ej_put(o->last_key, buf, ws_term_encode(&last, buf), 0));
    }
    if (o->oldest_key && (!o->last_key || strcmp(o->oldest_key, o->last_key) != 0))
        json_array_append_new(x.ok, ej_del(o->oldest_key));
    post(o, "/v3/kv/txn", x.root, false);
}

static void bump_granted(struct eop *o)
{
    struct ll_req *r = o->r;
    struct etcd_ll *E = o->E;
    ws_desc_grant(&r->desc, &r->term.protocol);
    r->term.mode = r->desc.mode;
    r->term.reason = REASON_NONE;
    r->term.ended_ms = 0;
    struct eterm *t = calloc(1, sizeof *t);
    uint8_t *ws = t ? malloc(r->ws_len ? r->ws_len : 1) : NULL;
    if (!ws) {
        free(t);
        /* the lease goes, and with it the key: nobody leads */
        answer_why(o, COORD_ESTORAGE, "out of memory");
        return;
    }
    memcpy(ws, r->ws, r->ws_len);
    t->E = E;
    t->ws = ws;
    t->ws_len = r->ws_len;
    t->generation = r->out_generation;
    t->lease = o->lease;
    t->ttl_ms = o->ttl_ms;
    t->acked_sent = o->lease_sent;
    t->next_ka = o->lease_sent + o->ttl_ms / 3;     /* as after a keepalive sent then */
    memcpy(t->token, o->token, sizeof t->token);
    t->term = r->term;
    list_append(&E->terms, &t->link);
    o->lease = 0;                  /* the term's now */
    answer(o, 0);
}

/* LL_SET_DISABLED: disable writes "1" and deletes the leader key (fencing
 * the live term wherever it is), enable writes "0"; the flag's revision is
 * the stored generation (above every term before it) */
static void send_disable(struct eop *o)
{
    struct ll_req *r = o->r;
    KEY(lk, r, "leader", NULL, 0);
    KEY(xk, r, "disabled", NULL, 0);
    struct ej_txn x;
    ej_txn_init(&x);
    json_array_append_new(x.ok, ej_put(xk, r->disable ? "1" : "0", 1, 0));
    if (r->disable)
        json_array_append_new(x.ok, ej_del(lk));
    post(o, "/v3/kv/txn", x.root, true);
}

static void disable_done(struct eop *o, json_t *j)
{
    struct ll_req *r = o->r;
    /* the flag's revision: disabling fences every earlier generation */
    r->out_generation = ej_header_revision(j);
    answer(o, 0);
}

/* the fence of commit, claim and abandon: generation, mode, op, abandon */
static void fence_compares(struct eop *o, struct ej_txn *x, bool claim)
{
    struct ll_req *r = o->r;
    KEY(lk, r, "leader", NULL, 0);
    KEY(rk, r, "ro", NULL, 0);
    KEY(ok, r, "op", r->op_id, r->op_len);
    KEY(ak, r, "aband", r->op_id, r->op_len);
    KEY(pk, r, "pend", r->op_id, r->op_len);
    json_array_append_new(x->cmp, ej_cmp(lk, "CREATE", r->generation));
    json_array_append_new(x->cmp, ej_cmp(rk, "CREATE", 0));
    json_array_append_new(x->cmp, ej_cmp(ok, "CREATE", 0));
    json_array_append_new(x->cmp, ej_cmp(ak, "CREATE", 0));
    if (claim)
        json_array_append_new(x->cmp, ej_cmp(pk, "CREATE", 0));
    json_array_append_new(x->fail, ej_range(lk, EJ_KEYS_ONLY, 0));
    json_array_append_new(x->fail, ej_range(rk, EJ_KEYS_ONLY, 0));
    json_array_append_new(x->fail, ej_range(ok, 0, 0));
    json_array_append_new(x->fail, ej_range(ak, EJ_KEYS_ONLY, 0));
    json_array_append_new(x->fail, ej_range(pk, 0, 0));
}

/* A refused fence, in LMDB's order: FENCED, READ_ONLY, then applied or
 * abandoned (1: the caller goes on with the pend entry in o). */
enum refusal { REF_FENCED = 1, REF_READ_ONLY, REF_APPLIED, REF_ABANDONED, REF_PENDING, REF_BAD };

static enum refusal why_refused(struct eop *o, json_t *j, uint64_t *applied_gen)
{
    struct ll_req *r = o->r;
    struct ej_kv leader, ro, op, ab, pend;
    int bad = ej_txn_kv(j, 0, &leader, NULL) | ej_txn_kv(j, 1, &ro, NULL) |
              ej_txn_kv(j, 2, &op, NULL) | ej_txn_kv(j, 3, &ab, NULL) |
              ej_txn_kv(j, 4, &pend, NULL);
    enum refusal why = REF_BAD;
    if (bad)
        why = REF_BAD;
    else if (!leader.found || leader.create != r->generation)
        why = REF_FENCED;
    else if (ro.found)
        why = REF_READ_ONLY;
    else if (op.found) {
        why = REF_APPLIED;
        *applied_gen = op.vlen >= 8 ? get_be64(op.val) : 0;
    } else if (ab.found)
        why = REF_ABANDONED;
    else if (pend.found && pend.vlen >= 16) {
        why = REF_PENDING;
        o->pend_mod = pend.mod;
        o->pend_gen = get_be64(pend.val);
        o->pend_ms = get_be64(pend.val + 8);
    }
    ej_kv_free(&leader);
    ej_kv_free(&ro);
    ej_kv_free(&op);
    ej_kv_free(&ab);
    ej_kv_free(&pend);
    return why;
}

static void send_commit(struct eop *o)
{
    struct ll_req *r = o->r;
    KEY(ok, r, "op", r->op_id, r->op_len);
    KEY(pk, r, "pend", r->op_id, r->op_len);
    KEY(kk, r, "kv", r->key, r->key_len);
    struct ej_txn x;
    ej_txn_init(&x);
    fence_compares(o, &x, false);
    uint8_t g[8];
    put_be64(g, r->generation);
    json_array_append_new(x.ok, ej_put(ok, g, 8, 0));
    json_array_append_new(x.ok, ej_del(pk));
    if (r->has_key) {
        uint8_t *v = malloc(8 + r->value_len);
        if (!v) {
            json_decref(x.root);
            answer_why(o, COORD_ESTORAGE, "out of memory");
            return;
        }
        memcpy(v, g, 8);
        if (r->value_len)
            memcpy(v + 8, r->value, r->value_len);
        json_array_append_new(x.ok, ej_put(kk, v, 8 + r->value_len, 0));
        free(v);
    }
    post(o, "/v3/kv/txn", x.root, false);
}

static int refusal_status(enum refusal why)
{
    return why == REF_FENCED ? COORD_EFENCED : why == REF_READ_ONLY ? COORD_EREAD_ONLY
                                                                    : COORD_ESTORAGE;
}

/* A commit's or an abandon's Txn answered (they settle an op alike; only a
 * commit of an abandoned op says so). */
static void settle_done(struct eop *o, json_t *j)
{
    struct ll_req *r = o->r;
    if (json_is_true(json_object_get(j, "succeeded"))) {
        answer(o, 0);
        return;
    }
    uint64_t g = 0;
    enum refusal why = why_refused(o, j, &g);
    if (why == REF_APPLIED) {
        r->duplicate = true;
        r->out_generation = g;
        answer(o, 0);
    } else if (why == REF_ABANDONED) {
        r->out_abandoned = r->op == LL_COMMIT;
        answer(o, 0);
    } else if (why == REF_BAD) {
        answer_malformed(o);
    } else {
        answer(o, refusal_status(why));
    }
}

static void send_claim(struct eop *o)
{
    struct ll_req *r = o->r;
    KEY(pk, r, "pend", r->op_id, r->op_len);
    KEY(pp, r, "pend/", NULL, 0);
    KEY(lk, r, "leader", NULL, 0);
    uint8_t v[16];
    put_u64s(v, r->generation, r->now_ms);
    struct ej_txn x;
    ej_txn_init(&x);
    if (o->phase == PH_FIX) {
        /* reconcile: an earlier generation's claim becomes ours, in its
         * place, under the same fence (a mode changed since the claim's
         * own Txn fails it: that Txn again says READ_ONLY) */
        KEY(rk, r, "ro", NULL, 0);
        json_array_append_new(x.cmp, ej_cmp(lk, "CREATE", r->generation));
        json_array_append_new(x.cmp, ej_cmp(rk, "CREATE", 0));
        json_array_append_new(x.cmp, ej_cmp(pk, "MOD", o->pend_mod));
        json_array_append_new(x.ok, ej_put(pk, v, 16, 0));
    } else {
        fence_compares(o, &x, true);
        json_array_append_new(x.ok, ej_put(pk, v, 16, 0));
        json_array_append_new(x.ok, ej_range(pp, EJ_PREFIX | EJ_COUNT_ONLY, 0));
    }
    post(o, "/v3/kv/txn", x.root, false);
}

static void claim_done(struct eop *o, json_t *j)
{
    struct ll_req *r = o->r;
    struct ll_claim *out = &r->claim;
    bool ok = json_is_true(json_object_get(j, "succeeded"));
    if (o->phase == PH_FIX) {
        if (ok) {
            out->claimed = out->reconcile = true;
            out->previous_generation = o->pend_gen;
            out->claimed_ms = o->pend_ms;
            answer(o, 0);
        } else if (++o->attempts < ETCD_MAX_ATTEMPTS) {
            o->phase = PH_TXN;
            step(o);
        } else {
            answer_why(o, COORD_ESTORAGE, "the claim kept changing");
        }
        return;
    }
    if (o->phase == PH_STEAL) {       /* undo of a claim past LIMIT_CLAIMS */
        answer_why(o, COORD_ELIMIT, NULL);
        return;
    }
    if (ok) {
        json_t *rr = ej_txn_resp(j, 1, "response_range");
        if (ej_num(rr, "count") > LIMIT_CLAIMS) {
            KEY(pk, r, "pend", r->op_id, r->op_len);
            struct ej_txn x;
            ej_txn_init(&x);
            json_array_append_new(x.cmp, ej_cmp(pk, "MOD", ej_header_revision(j)));
            json_array_append_new(x.ok, ej_del(pk));
            o->phase = PH_STEAL;
            post(o, "/v3/kv/txn", x.root, true);
            return;
        }
        out->claimed = true;
        answer(o, 0);
        return;
    }
    uint64_t g = 0;
    enum refusal why = why_refused(o, j, &g);
    if (why == REF_APPLIED) {
        out->applied = true;
        out->generation = g;
        answer(o, 0);
    } else if (why == REF_ABANDONED) {
        out->abandoned = true;
        answer(o, 0);
    } else if (why == REF_PENDING && o->pend_gen == r->generation) {
        out->claimed = true;
        answer(o, 0);
    } else if (why == REF_PENDING) {
        o->phase = PH_FIX;
        step(o);
    } else if (why == REF_BAD) {
        answer_malformed(o);       /* the failure branch's ranges do not decode */
    } else {
        answer(o, refusal_status(why));
    }
}

static void send_abandon(struct eop *o)
{
    struct ll_req *r = o->r;
    KEY(ak, r, "aband", r->op_id, r->op_len);
    KEY(pk, r, "pend", r->op_id, r->op_len);
    size_t rlen = r->value_len > LIMIT_INCIDENT ? LIMIT_INCIDENT : r->value_len;
    uint8_t v[16 + LIMIT_INCIDENT];
    put_u64s(v, r->generation, r->now_ms);
    if (rlen)
        memcpy(v + 16, r->value, rlen);
    struct ej_txn x;
    ej_txn_init(&x);
    fence_compares(o, &x, false);
    json_array_append_new(x.ok, ej_put(ak, v, 16 + rlen, 0));
    json_array_append_new(x.ok, ej_del(pk));
    post(o, "/v3/kv/txn", x.root, false);
}

static void send_define(struct eop *o)
{
    struct ll_req *r = o->r;
    KEY(dk, r, "desc", NULL, 0);
    KEY(rk, r, "ro", NULL, 0);
    if (o->phase == PH_READ) {
        struct ej_txn x;
        ej_txn_init(&x);
        json_array_append_new(x.ok, ej_range(dk, 0, 0));
        post(o, "/v3/kv/txn", x.root, true);
        return;
    }
    uint8_t db[WS_DESC_MAX];
    struct ej_txn x;
    ej_txn_init(&x);
    json_array_append_new(x.cmp, ej_cmp(dk, "MOD", o->desc_mod));
    json_array_append_new(x.ok, ej_put(dk, db, ws_desc_encode(&r->desc, db), 0));
    json_array_append_new(x.ok, r->desc.mode == WS_MODE_ACTIVE ? ej_del(rk)
                                                                : ej_put(rk, "1", 1, 0));
    post(o, "/v3/kv/txn", x.root, false);
}

static void define_done(struct eop *o, json_t *j)
{
    struct ll_req *r = o->r;
    if (o->phase == PH_READ) {
        struct ej_kv desc;
        if (ej_txn_kv(j, 0, &desc, NULL) < 0 || desc_of(&desc, &r->desc) < 0) {
            ej_kv_free(&desc);
            answer_malformed(o);
            return;
        }
        o->desc_mod = desc.mod;
        ej_kv_free(&desc);
        int rc = ws_desc_define(&r->desc, &r->patch, r->now_ms);
        if (rc) {
            answer(o, rc);
            return;
        }
        o->phase = PH_TXN;
        step(o);
        return;
    }
    if (json_is_true(json_object_get(j, "succeeded")))
        answer(o, 0);
    else if (++o->attempts < ETCD_MAX_ATTEMPTS) {
        o->E->define_rereads++;    /* another broker defined meanwhile */
        o->phase = PH_READ;
        step(o);
    } else
        answer_why(o, COORD_ESTORAGE, "the descriptor kept changing");
}

static void send_list(struct eop *o)
{
    struct ll_req *r = o->r;
    json_t *b;
    if (r->op == LL_READ) {
        KEY(kk, r, "kv", r->key, r->key_len);
        b = ej_range_body(kk, 0, 0);
    } else if (r->op == LL_PENDING) {
        KEY(pp, r, "pend/", NULL, 0);
        b = ej_range_body(pp, EJ_PREFIX | EJ_OLDEST, (uint64_t)r->limit + 1);
    } else {
        KEY(hp, r, "hist/", NULL, 0);
        uint64_t lim = r->limit > LIMIT_HISTORY ? LIMIT_HISTORY : r->limit;
        b = ej_range_body(hp, EJ_PREFIX | EJ_NEWEST, lim ? lim : 1);
    }
    post(o, "/v3/kv/range", b, true);
}

static void list_done(struct eop *o, json_t *j)
{
    struct ll_req *r = o->r;
    json_t *kvs = json_object_get(j, "kvs");
    size_t n = json_array_size(kvs);
    if (r->op == LL_READ) {
        struct ej_kv k;
        if (!n) {
            answer(o, COORD_ENOT_FOUND);
            return;
        }
        if (ej_kv_decode(json_array_get(kvs, 0), &k) < 0 || k.vlen < 8) {
            ej_kv_free(&k);
            answer_malformed(o);
            return;
        }
        r->out_generation = get_be64(k.val);
        r->out_value_len = k.vlen - 8;
        r->out_value = malloc(r->out_value_len ? r->out_value_len : 1);
        if (r->out_value)
            memcpy(r->out_value, k.val + 8, r->out_value_len);
        ej_kv_free(&k);
        if (!r->out_value)
            answer_why(o, COORD_ESTORAGE, "out of memory");
        else
            answer(o, 0);
        return;
    }
    if (r->op == LL_HISTORY) {
        r->terms = malloc((n ? n : 1) * sizeof *r->terms);
        if (!r->terms) {
            answer_why(o, COORD_ESTORAGE, "out of memory");
            return;
        }
        for (size_t i = 0; i < n; i++) {
            struct ej_kv k;
            if (ej_kv_decode(json_array_get(kvs, i), &k) < 0 ||
                ws_term_decode(&r->terms[i], k.val, k.vlen) < 0) {
                ej_kv_free(&k);
                answer_malformed(o);
                return;
            }
            r->terms[i].generation = k.create;
            ej_kv_free(&k);
        }
        r->n_out = n;
        answer(o, 0);
        return;
    }
    /* pending: entries then op ids, in one block */
    if (n > r->limit) {
        r->truncated = true;
        n = r->limit;
    }
    r->pending = malloc(n * sizeof *r->pending + n * LIMIT_OP_ID + 1);
    if (!r->pending) {
        answer_why(o, COORD_ESTORAGE, "out of memory");
        return;
    }
    uint8_t *ids = (uint8_t *)(r->pending + n);
    KEY(pp, r, "pend/", NULL, 0);
    size_t plen = strlen(pp);
    for (size_t i = 0; i < n; i++) {
        struct ej_kv k;
        struct ll_pending *p = &r->pending[i];
        if (ej_kv_decode(json_array_get(kvs, i), &k) < 0 || k.vlen < 16 ||
            strncmp(k.key, pp, plen) != 0 ||
            ej_unhex(k.key + plen, ids, LIMIT_OP_ID, &p->op_len) < 0) {
            ej_kv_free(&k);
            answer_malformed(o);
            return;
        }
        p->op_id = ids;
        ids += p->op_len;
        p->generation = get_be64(k.val);
        p->claimed_ms = get_be64(k.val + 8);
        ej_kv_free(&k);
    }
    r->n_out = n;
    answer(o, 0);
}

/* ---- the machine ---- */

static void send_lease(struct eop *o)
{
    uint64_t ttl = BROKEN(ETCD_POLL) ? (o->r->lease_ms + 999) / 1000 : LIMIT_ETCD_LEASE_TTL_S;
    json_t *b = json_object();
    json_object_set_new(b, "TTL", ej_numstr(ttl ? ttl : 1));
    o->lease_sent = uv_now(o->E->b->loop);
    post(o, "/v3/lease/grant", b, false);
}

static void send_steal(struct eop *o)
{
    struct ll_req *r = o->r;
    KEY(lk, r, "leader", NULL, 0);
    struct ej_txn x;
    ej_txn_init(&x);
    json_array_append_new(x.cmp, ej_cmp(lk, "CREATE", o->leader_create));
    json_array_append_new(x.ok, ej_del(lk));
    post(o, "/v3/kv/txn", x.root, true);
}

/* a campaign's timeout_ms is over: UNAVAILABLE when etcd did not answer
 * its last call, else TIMEOUT */
static void bump_expired(struct eop *o)
{
    if (o->unreachable)
        answer_unreachable(o);
    else
        answer_why(o, COORD_ETIMEOUT, "not elected within timeout_ms");
}

static void step(struct eop *o)
{
    struct ll_req *r = o->r;
    if (o->cancelled && r->op == LL_BUMP && o->phase != PH_DONE) {
        answer_why(o, COORD_EABORTED, "campaign cancelled");
        return;
    }
    /* no call starts past the deadline (the ones in flight end by it: call_ms) */
    if (r->op == LL_BUMP && o->phase != PH_DONE && r->deadline_ms &&
        broker_now_ms(o->E->b) >= r->deadline_ms) {
        bump_expired(o);
        return;
    }
    switch (r->op) {
    case LL_LOAD:
        send_read(o);
        break;
    case LL_BUMP:
        switch (o->phase) {
        case PH_READ: case PH_WAIT:
            o->phase = PH_READ;
            o->watching = false;
            send_read(o);
            break;
        case PH_LEASE: send_lease(o); break;
        case PH_TXN: send_bump_txn(o); break;
        case PH_STEAL: send_steal(o); break;
        case PH_DONE: bump_granted(o); break;
        default: break;
        }
        break;
    case LL_SET_DISABLED:
        send_disable(o);
        break;
    case LL_DEFINE:
        send_define(o);
        break;
    case LL_COMMIT:
        send_commit(o);
        break;
    case LL_CLAIM:
        send_claim(o);
        break;
    case LL_ABANDON:
        send_abandon(o);
        break;
    case LL_READ: case LL_PENDING: case LL_HISTORY:
        send_list(o);
        break;
    case LL_TERM_END:
        break;
    }
}

/* a bump etcd did not answer waits and tries again, until its deadline */
static void bump_unreachable(struct eop *o)
{
    struct ll_req *r = o->r;
    uint64_t now = broker_now_ms(o->E->b);
    o->unreachable = true;
    if (r->no_wait || (r->deadline_ms && now >= r->deadline_ms) || o->E->closing) {
        answer_unreachable(o);
        return;
    }
    o->phase = PH_WAIT;
    o->next_at = uv_now(o->E->b->loop) + ETCD_RETRY_MS;
}

static void on_reply(void *ud, enum etcd_status st, long http, json_t *j)
{
    struct eop *o = ud;
    struct ll_req *r = o->r;
    o->inflight = false;
    if (st != ETCD_OK)
        log_event(LOG_DEBUG, "leader.etcd_failed", "op=%d phase=%d status=%d http=%ld",
                  (int)r->op, (int)o->phase, (int)st, http);
    if (st == ETCD_OK)
        saw_revision(o->E, j);
    if (r->op == LL_BUMP) {
        if (st == ETCD_UNREACHABLE) {
            bump_unreachable(o);
            return;
        }
        if (st == ETCD_REFUSED) {
            log_event(LOG_WARN, "leader.etcd_refused", "http=%ld", http);
            if (o->phase == PH_TXN && http == 404)
                o->lease = 0;          /* the lease expired meanwhile: a new one */
            if (++o->attempts >= ETCD_MAX_ATTEMPTS) {
                answer_why(o, COORD_ESTORAGE, "etcd refused the campaign");
                return;
            }
            o->phase = PH_WAIT;
            o->next_at = uv_now(o->E->b->loop) + ETCD_RETRY_MS;
            return;
        }
        o->unreachable = false;
        switch (o->phase) {
        case PH_READ:
            bump_read(o, j);
            return;
        case PH_LEASE:
            o->lease = (int64_t)ej_num(j, "ID");
            o->ttl_ms = ej_num(j, "TTL") * 1000;
            o->E->lease_ttl_ms = o->ttl_ms;
            if (!o->lease || !o->ttl_ms) {
                answer_malformed(o);
                return;
            }
            o->phase = PH_TXN;
            step(o);
            return;
        case PH_TXN:
            if (json_is_true(json_object_get(j, "succeeded"))) {
                if (!ej_header_revision(j)) {
                    answer_malformed(o);   /* no generation: the lease (and key) go */
                    return;
                }
                r->out_generation = r->term.generation = ej_header_revision(j);
                o->phase = PH_DONE;
            } else if (++o->attempts >= ETCD_MAX_ATTEMPTS) {
                answer_why(o, COORD_ESTORAGE, "the workstream kept changing");
                return;
            } else {
                o->phase = PH_READ;    /* something moved: read again */
            }
            step(o);
            return;
        case PH_STEAL:
            o->phase = PH_READ;
            step(o);
            return;
        default:
            return;
        }
    }
    if (st == ETCD_UNREACHABLE) {
        answer_unreachable(o);
        return;
    }
    if (st == ETCD_REFUSED) {
        log_event(LOG_WARN, "leader.etcd_refused", "http=%ld op=%d", http, (int)r->op);
        answer_why(o, COORD_ESTORAGE, "etcd refused the request");
        return;
    }
    switch (r->op) {
    case LL_LOAD: load_read(o, j); break;
    case LL_SET_DISABLED: disable_done(o, j); break;
    case LL_DEFINE: define_done(o, j); break;
    case LL_COMMIT: settle_done(o, j); break;
    case LL_CLAIM: claim_done(o, j); break;
    case LL_ABANDON: settle_done(o, j); break;
    default: list_done(o, j); break;
    }
}

/* Descriptor writes (desc_write) of one workstream run one at a time
 * here, in the order submitted: a define is a read and a Txn comparing
 * what it read, and two in flight at once both read the same descriptor,
 * so the one refused reads again and applies its patch last, whichever
 * was submitted last (an older load's file over a newer one; a blind put
 * of the switch the same).  One at a time, each reads what the one before
 * stored, the last submitted is the last stored, and this broker's memory,
 * set from each answer in turn, ends where etcd is. */

/* an earlier descriptor write of o's workstream is not answered yet
 * (E->ops is in submission order) */
static bool desc_behind(const struct eop *o)
{
    for (const struct list *pos = o->E->ops.next; pos != &o->E->ops; pos = pos->next) {
        const struct eop *p = list_entry(pos, struct eop, link);
        if (p == o)
            return false;
        if (desc_write(p->r) && p->r->ws_len == o->r->ws_len &&
            memcmp(p->r->ws, o->r->ws, o->r->ws_len) == 0)
            return true;
    }
    return false;
}

/* after a descriptor write ended (on_idle, never inside a callback of
 * curl's): the queued ones now first of their workstream start.  One walk
 * in submission order does it: one started is in flight, so those behind
 * it stay queued; one answered at once (step frees only its own op) lets
 * the next of its workstream start further on in the same walk. */
static void desc_start_queued(struct etcd_ll *E)
{
    struct list *pos, *tmp;
    list_for_each_safe(pos, tmp, &E->ops) {
        struct eop *o = list_entry(pos, struct eop, link);
        if (o->queued && !desc_behind(o)) {
            o->queued = false;
            step(o);
        }
    }
}

static void etcd_submit(void *state, struct ll_req *r)
{
    struct etcd_ll *E = state;
    if (r->op == LL_TERM_END) {
        struct eterm *t = term_find(E, r->ws, r->ws_len, r->generation);
        if (!t || t->ended) {
            r->status = 0;             /* ended already (lost), or never here */
            queue_done(E, r);
            return;
        }
        term_end(t, r->term.ended_ms, r->term.reason, r);
        return;
    }
    struct eop *o = calloc(1, sizeof *o);
    if (!o) {
        r->status = COORD_ESTORAGE;
        r->why = "out of memory";
        queue_done(E, r);
        return;
    }
    o->E = E;
    o->r = r;
    r->be = o;
    list_append(&E->ops, &o->link);
    if (E->closing) {
        answer(o, COORD_ESHUTTING_DOWN);
        return;
    }
    if (r->op == LL_BUMP)
        snprintf(o->token, sizeof o->token, "%016llx%016llx", (unsigned long long)E->nonce,
                 (unsigned long long)++E->seq);
    o->phase = PH_READ;
    if (desc_write(r) && !BROKEN(ETCD_DESC_UNORDERED) && desc_behind(o)) {
        o->queued = true;          /* desc_start_queued starts it */
        return;
    }
    step(o);
}

static void etcd_cancel(void *state, struct ll_req *r)
{
    struct etcd_ll *E = state;
    struct eop *o = r->be;
    (void)E;
    if (!o)
        return;
    o->cancelled = true;
    if (!o->inflight && o->phase == PH_WAIT)
        answer_why(o, COORD_EABORTED, "campaign cancelled");
    /* in flight: step() answers ABORTED when the call is back (unless it
     * granted: then the caller ends the term) */
}

static void on_probe(void *ud, enum etcd_status st, long http, json_t *j)
{
    struct etcd_ll *E = ud;
    (void)http;
    E->probing = false;
    if (st == ETCD_OK)
        saw_revision(E, j);
}

static void on_compact(void *ud, enum etcd_status st, long http, json_t *j)
{
    struct etcd_ll *E = ud;
    (void)st; (void)http; (void)j;
    E->compacting = false;
}

static void on_tick(uv_timer_t *h)
{
    struct etcd_ll *E = h->data;
    uint64_t now = uv_now(E->b->loop), bnow = broker_now_ms(E->b);
    struct list *pos, *tmp;
    watch_tick(E, now);            /* first: the loop below frees ops */
    list_for_each_safe(pos, tmp, &E->ops) {
        struct eop *o = list_entry(pos, struct eop, link);
        if (o->r->op != LL_BUMP || o->phase != PH_WAIT || o->inflight)
            continue;
        /* step answers one whose deadline passed (TIMEOUT or UNAVAILABLE) */
        if ((o->r->deadline_ms && bnow >= o->r->deadline_ms) || now >= o->next_at)
            step(o);
    }
    list_for_each_safe(pos, tmp, &E->terms)
        term_tick(list_entry(pos, struct eterm, link), now);
    if (now >= E->next_probe && !E->probing && etcd_inflight(E->http) == 0) {
        E->probing = true;
        E->next_probe = now + ETCD_PROBE_MS;
        etcd_post(E->http, "/v3/maintenance/status", json_object(), true, ETCD_CALL_MS,
                  on_probe, E);
    }
    if (now >= E->next_compact && !E->compacting &&
        E->revision > E->compacted + 2 * ETCD_COMPACT_KEEP) {
        E->compacting = true;
        E->next_compact = now + ETCD_COMPACT_MS;
        E->compacted = E->revision - ETCD_COMPACT_KEEP;
        json_t *b = json_object();
        json_object_set_new(b, "revision", ej_numstr(E->compacted));
        etcd_post(E->http, "/v3/kv/compaction", b, true, ETCD_CALL_MS, on_compact, E);
    }
}

static bool etcd_is_reachable(void *state)
{
    struct etcd_ll *E = state;
    return etcd_reachable(E->http);
}

/* stats: campaigns woken by a leader key's deletion, watches made live,
 * the TTL etcd granted the newest term's lease here (0: none yet), defines
 * that read the descriptor again because it changed under them */
static void etcd_stats(void *state, struct coord_enc *e)
{
    struct etcd_ll *E = state;
    coord_enc_kv_uint(e, "etcd_watch_wakeups", E->watch_wakeups);
    coord_enc_kv_uint(e, "etcd_watch_connects", E->watch_connects);
    coord_enc_kv_uint(e, "etcd_lease_ttl_ms", E->lease_ttl_ms);
    coord_enc_kv_uint(e, "etcd_define_rereads", E->define_rereads);
}

static int etcd_ll_open(void **state, struct broker *b, char *err, size_t errsize)
{
    struct etcd_ll *E = calloc(1, sizeof *E);
    if (!E) {
        snprintf(err, errsize, "out of memory");
        return -1;
    }
    if (strlen(b->opt.etcd_prefix) >= sizeof E->prefix) {
        snprintf(err, errsize, "--etcd-prefix is too long");
        free(E);
        return -1;
    }
    strcpy(E->prefix, b->opt.etcd_prefix);
    if (etcd_open(&E->http, b->loop, b->opt.etcd_endpoints, err, errsize) < 0) {
        free(E);
        return -1;
    }
    E->b = b;
    list_init(&E->ops);
    list_init(&E->terms);
    if (getrandom(&E->nonce, sizeof E->nonce, 0) != sizeof E->nonce)
        E->nonce = (uint64_t)getpid() << 32 ^ wall_ms();
    uv_idle_init(b->loop, &E->idle);
    E->idle.data = E;
    uv_timer_init(b->loop, &E->tick);
    E->tick.data = E;
    uv_timer_start(&E->tick, on_tick, ETCD_TICK_MS, ETCD_TICK_MS);
    E->handles = 2;
    E->watch_backoff = ETCD_RETRY_MS;
    E->next_compact = uv_now(b->loop) + ETCD_COMPACT_MS;
    log_event(LOG_INFO, "leader.etcd", "endpoints=\"%s\"", b->opt.etcd_endpoints);
    *state = E;
    return 0;
}

static void handle_closed(uv_handle_t *h)
{
    struct etcd_ll *E = h->data;
    if (--E->handles == 0)
        free(E);
}

static void etcd_ll_close(void *state)
{
    struct etcd_ll *E = state;
    E->closing = true;
    /* live terms: their leases go now, all at once and within
     * LIMIT_EXIT_REVOKE_MS together (best effort; they expire anyway) */
    struct list *pos, *tmp;
    size_t nlive = 0;
    list_for_each_safe(pos, tmp, &E->terms)
        nlive += !list_entry(pos, struct eterm, link)->ended;
    json_t **bodies = nlive ? calloc(nlive, sizeof *bodies) : NULL;
    size_t nb = 0;
    list_for_each_safe(pos, tmp, &E->terms) {
        struct eterm *t = list_entry(pos, struct eterm, link);
        if (!t->ended && bodies) {
            json_t *b = json_object();
            json_object_set_new(b, "ID", ej_numstr((uint64_t)t->lease));
            bodies[nb++] = b;
        }
    }
    if (nb) {
        uint64_t t0 = uv_hrtime();
        etcd_post_sync_all(E->http, "/v3/lease/revoke", bodies, nb, LIMIT_EXIT_REVOKE_MS);
        log_event(LOG_INFO, "leader.etcd_exit_revoke", "terms=%zu ms=%llu", nb,
                  (unsigned long long)((uv_hrtime() - t0) / 1000000));
    }
    free(bodies);
    watch_stop(E);
    /* answers every call in flight: ops answer UNAVAILABLE, terms free */
    etcd_close(E->http);
    E->http = NULL;
    while (!list_empty(&E->ops))
        answer(list_entry(list_shift(&E->ops), struct eop, link), COORD_ESHUTTING_DOWN);
    list_for_each_safe(pos, tmp, &E->terms) {
        struct eterm *t = list_entry(pos, struct eterm, link);
        t->ended = true;
        t->ka_inflight = t->check_inflight = false;
        t->end_calls = 0;
        if (t->end_req)
            queue_done(E, t->end_req);
        t->end_req = NULL;
        term_maybe_free(t);
    }
    for (struct ll_req *r = E->done_head; r; r = r->next_done)
        if (!r->status)
            r->status = COORD_ESHUTTING_DOWN;
    on_idle(&E->idle);
    uv_timer_stop(&E->tick);
    uv_close((uv_handle_t *)&E->tick, handle_closed);
    uv_close((uv_handle_t *)&E->idle, handle_closed);
}

const struct ll_backend ll_backend_etcd = {
    .name = "etcd", .open = etcd_ll_open, .submit = etcd_submit, .close = etcd_ll_close,
    .cancel = etcd_cancel, .reachable = etcd_is_reachable, .stats = etcd_stats,
    .term_end_first = true,
};
