/* flights.c - single-flight with follower refcounting.
 *
 * Per (scope, key) at most one owner runs the work; everyone who joins
 * meanwhile is a follower whose join is answered with the owner's result.
 * A follower leaving only drops that follower.  An owner that disconnects
 * or passes its deadline is replaced: the fence advances and the
 * longest-waiting follower is promoted, so a late result from the old
 * owner carries a stale fence and is refused (FENCED).
 *
 * Flight ids and fences come from the broker's one allocator (ids.h): they
 * only grow, across restarts too, so a result for a flight of an earlier
 * broker life is FENCED rather than NOT_FOUND.
 *
 * A record.purge (logout) fences the flights under its prefix
 * (flights_purge): followers are answered ABORTED (reason purged) at once,
 * the owner gets flight.abort (purged), and the flight leaves the key table
 * so the next join starts afresh.  What is left is a tombstone in the id
 * table, owned by the owner's connection like a running flight, so that its
 * late complete/fail is refused FENCED with reason purged; it goes with
 * that refusal, the owner's disconnect or its deadline.  A flight already
 * completing (its record queued to the writer) is marked the same way: the
 * ledger applies jobs in submission order, so the purge job queued after it
 * deletes that record, and the completion's answer (FENCED, purged: nothing
 * was delivered) comes before the purge's.
 *
 * A result by reference (flight.complete with result_fd and the owner's
 * sealed memfd, PROTOCOL.md) is an outcome whose ref holds a resref: the
 * completion holds a reference until its followers are answered, each
 * frame queued with a descriptor one more until it is written (conn.c),
 * each result_ref one more until flight.unref or close; the bytes are
 * never read here.  A record's (keep_ms) is a file of results/
 * (records.c), opened per answer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>
#include "breaks.h"
#include "budget.h"
#include "coord-ops.h"
#include "deadline.h"
#include "errors.h"
#include "events.h"
#include "flight-gates.h"
#include "flights.h"
#include "hashmap.h"
#include "histo.h"
#include "ids.h"
#include "coord-limits.h"
#include "ops.h"
#include "records.h"
#include "redact.h"
#include "resref.h"
#include "skey.h"

struct flight;

struct member {
    struct pending p;              /* a follower's waiting join */
    struct flight *f;
    struct conn *conn;
    struct list link;              /* f->followers, oldest first */
    struct deadline wait;          /* follower: wait_ms */
    uint64_t owner_ttl_ms;         /* used if promoted */
    bool abort_when_orphaned;
    uint64_t joined_ms;
    uint64_t joined_us;            /* latency stats */
    uint64_t priority;             /* a higher one supersedes the owner */
    bool own_version;              /* other_version "own": never follows, nor
                                      is served a record, of another version */
    uint8_t version_len;
    uint8_t version[LIMIT_FLIGHT_VERSION];
};

/* Where a flight is found by key: by_key holds the first flight of a
 * (scope, key); a flight started while one of another version runs, for a
 * join that wants its own version, is found in by_vkey under (version,
 * scoped key).  At most one flight per (scope, key, version) is found. */
enum keyed { KEYED_NONE, KEYED_KEY, KEYED_VKEY };

/* How many superseded owners' fences a flight remembers for the reason of
 * their late results (a fourth supersede in a row before the first owner
 * answers is rare; an older one's late result is a plain stale fence). */
#define FLIGHT_SUPERSEDED_KEPT 4

struct flight {
    struct hentry by_key;          /* key/keylen: the scoped key, always set */
    struct hentry by_vkey;
    uint8_t *vkey;                 /* KEYED_VKEY: its key, owned */
    enum keyed keyed;
    struct hentry by_id;
    uint8_t *skey;                 /* the scoped key (skey.h), owned */
    uint64_t id;
    uint64_t fence;
    struct member *owner;          /* NULL while completing */
    struct list owner_link;        /* owner conn's flights */
    struct deadline deadline;      /* owner_ttl_ms */
    struct list followers;
    unsigned nfollowers;
    bool completing;               /* record being written */
    bool had_followers;
    bool bypass;                   /* kill switch: not deduplicated, no record */
    bool revalidation;             /* owner was given a stale record */
    bool purged;                   /* fenced by record.purge: a tombstone */
    /* the fences of the last FLIGHT_SUPERSEDED_KEPT owners superseded, a
     * ring ([superseded_n - 1] % KEPT the last; 0: none): each one's late
     * result is FENCED with reason superseded, not a plain stale fence */
    uint64_t superseded[FLIGHT_SUPERSEDED_KEPT];
    unsigned superseded_n;
    struct list watchers;          /* struct watcher: served stale, notify */
    uint64_t started_ms;
    uint64_t owner_since_us;       /* the current owner's start (latency stats) */
    uint64_t owner_wall_ms;        /* ... on the wall clock (events) */
    uint64_t owner_deadline_ms;    /* wall clock: the current owner's ttl ends */
    uint8_t version_len;           /* fixed at the start: how it is found */
    uint8_t version[LIMIT_FLIGHT_VERSION];
    struct list order;             /* flight.list */
};

/* A caller served a stale result with notify: told when the revalidation
 * ends (flight.updated). */
struct watcher {
    struct list flink;             /* f->watchers */
    struct list clink;             /* conn->watches */
    struct conn *conn;
};

static struct {
    struct broker *b;
    struct hashmap by_key, by_vkey, by_id;
    struct list all;
    uint64_t started, joined, completed, failed, promoted, fenced, from_record;
    uint64_t superseded;           /* owners replaced by a superseding join */
    uint64_t follower_timeouts;    /* followers answered TIMEOUT */
    uint64_t read_failures;        /* records a join could not read */
    uint64_t version_flights;      /* flights started beside another version's */
    uint64_t purged;               /* flights fenced by record.purge */
    uint64_t tombstones;           /* purged flights still in by_id */
} F;

/* What a transition says beyond the flight: the owner concerned (the
 * current one unless given), its run and a follower's wait (-1: none), a
 * failure's code. */
struct tr {
    const struct conn *who;
    const struct member *m;        /* whose version (NULL: the owner's) */
    int64_t run_ms, wait_ms;
    const void *o;                 /* const struct outcome *: failed */
};

struct outcome;
static void outcome_code(const void *o, const uint8_t **code, size_t *len, bool *retryable);

/* A lifecycle transition: the -flights event, and one compact info line
 * (the key, the owner's client and instance and an error code as keyed
 * hashes, redact.h). */
static void transition(const char *what, const struct flight *f, uint64_t fence,
                       enum reason why, struct tr t)
{
    const struct member *om = t.m ? t.m : f->owner;
    const struct conn *who = t.who ? t.who : f->owner ? f->owner->conn : NULL;
    struct flight_event ev = {
        .what = what, .flight = f->id, .fence = fence, .skey = f->skey,
        .sklen = f->by_key.keylen, .reason = why, .owner = who,
        /* a fenced caller is not the owner whose times the flight keeps */
        .started_ms = who && strcmp(what, "fenced") ? f->owner_wall_ms : 0,
        .deadline_ms = who && strcmp(what, "fenced") ? f->owner_deadline_ms : 0,
        .version = om ? om->version : f->version,
        .version_len = om ? om->version_len : f->version_len,
        .duration_ms = t.run_ms, .wait_ms = t.wait_ms,
    };
    if (t.o) {
        ev.failed = true;
        outcome_code(t.o, &ev.code, &ev.code_len, &ev.retryable);
    }
    events_flight(&ev);
    int level = strcmp(what, "joined") == 0 ? LOG_DEBUG : LOG_INFO;
    if (log_min_level > level)
        return;
    size_t klen;
    const uint8_t *key = skey_name(f->skey, f->by_key.keylen, &klen);
    char kh[REDACT_BUF], ch[REDACT_BUF], ih[REDACT_BUF], vh[REDACT_BUF], eh[REDACT_BUF];
    const char *cl = who && who->client ? who->client : "";
    const char *in = who && who->instance ? who->instance : "";
    char run[32] = "", wait[32] = "";
    if (t.run_ms >= 0)
        snprintf(run, sizeof run, " ms=%lld", (long long)t.run_ms);
    if (t.wait_ms >= 0)
        snprintf(wait, sizeof wait, " wait_ms=%lld", (long long)t.wait_ms);
    log_event(level, "flight.transition",
              "what=%s key=%s flight=%llu fence=%llu owner_conn=%llu owner_pid=%llu"
              " client=%s instance=%s%s%s followers=%u%s%s%s%s%s%s%s%s",
              what, redact(key, klen, kh), (unsigned long long)f->id,
              (unsigned long long)fence, (unsigned long long)(who ? who->id : 0),
              (unsigned long long)(who ? who->pid : 0),
              who ? redact(cl, strlen(cl), ch) : "-", who ? redact(in, strlen(in), ih) : "-",
              run, wait, f->nfollowers,
              why != REASON_NONE ? " reason=" : "", why != REASON_NONE ? reason_name(why) : "",
              ev.failed ? " code=" : "",
              ev.failed ? redact(ev.code, ev.code_len, eh) : "",
              ev.failed && ev.retryable ? " retryable=1" : "",
              ev.version_len ? " version=" : "",
              ev.version_len ? redact(ev.version, ev.version_len, vh) : "",
              f->bypass ? " bypass=1" : "");
}

static const struct tr TR_NONE = { NULL, NULL, -1, -1, NULL };

static int64_t ms_since(uint64_t us)
{
    return (int64_t)((now_us() - us) / 1000);
}

void flights_init(struct broker *b)
{
    F.b = b;
    hashmap_init(&F.by_key);
    hashmap_init(&F.by_vkey);
    hashmap_init(&F.by_id);
    list_init(&F.all);
}


void flights_stats(coord_enc *e)
{
    coord_enc_kv_uint(e, "flights", F.by_id.count - F.tombstones);
    coord_enc_kv_uint(e, "flights_started", F.started);
    coord_enc_kv_uint(e, "followers_joined", F.joined);
    coord_enc_kv_uint(e, "flights_completed", F.completed);
    coord_enc_kv_uint(e, "flights_failed", F.failed);
    coord_enc_kv_uint(e, "owners_promoted", F.promoted);
    coord_enc_kv_uint(e, "fenced", F.fenced);
    coord_enc_kv_uint(e, "results_from_records", F.from_record);
    coord_enc_kv_uint(e, "flights_purged", F.purged);
    /* owner/follower ratio, as followers per owner run */
    coord_enc_kv_uint(e, "followers_per_100_owners",
                      F.started ? F.joined * 100 / F.started : 0);
}

void flights_stats_transitions(coord_enc *e)
{
    coord_enc_kv_uint(e, "flights_superseded", F.superseded);
    coord_enc_kv_uint(e, "follower_timeouts", F.follower_timeouts);
    coord_enc_kv_uint(e, "record_read_failures", F.read_failures);
    coord_enc_kv_uint(e, "flights_version_split", F.version_flights);
}

static const uint8_t *flight_key(const struct flight *f, size_t *len)
{
    return skey_name(f->skey, f->by_key.keylen, len);
}

/* f has left its owner connection's list: the count and the budget. */
static void owner_released(struct flight *f)
{
    f->owner->conn->nflights_owned--;
    budget_give();
}

/* The owner's connection no longer owns f (lost, done, or f goes). */
static void owner_unlink(struct flight *f)
{
    if (!list_linked(&f->owner_link))
        return;
    list_del(&f->owner_link);
    owner_released(f);
}

static void watcher_free(struct watcher *w)
{
    list_del(&w->flink);
    list_del(&w->clink);
    w->conn->nwatches--;
    budget_give();
    free(w);
}

/* Tells the callers served stale that the revalidation ended. */
static void notify_watchers(struct flight *f, bool completed)
{
    size_t klen;
    const uint8_t *key = skey_name(f->skey, f->by_key.keylen, &klen);
    while (!list_empty(&f->watchers)) {
        struct watcher *w = list_entry(list_shift(&f->watchers), struct watcher, flink);
        coord_enc e;
        conn_enc_begin_event(w->conn, &e, coord_event_name(COORD_EV_FLIGHT_UPDATED));
        coord_enc_kv_name(&e, "key", key, klen);
        coord_enc_kv_cstr(&e, "status", completed ? "completed" : "failed");
        coord_enc_kv_uint(&e, "fence", f->fence);
        conn_enc_finish(w->conn, &e);
        watcher_free(w);
    }
}

/* f is no longer found by its key. */
static void key_unlink(struct flight *f)
{
    if (f->keyed == KEYED_KEY)
        hashmap_del(&F.by_key, &f->by_key);
    else if (f->keyed == KEYED_VKEY)
        hashmap_del(&F.by_vkey, &f->by_vkey);
    f->keyed = KEYED_NONE;
}

static void flight_free(struct flight *f)
{
    notify_watchers(f, false);        /* dropped without an outcome */
    deadline_cancel(&f->deadline);
    if (f->purged)
        F.tombstones--;            /* already out of by_key */
    key_unlink(f);
    hashmap_del(&F.by_id, &f->by_id);
    list_del(&f->order);
    owner_unlink(f);
    free(f->owner);
    free(f->skey);
    free(f->vkey);
    free(f);
}

static void send_abort_event(struct conn *c, const struct flight *f, enum reason why)
{
    coord_enc e;
    conn_enc_begin_event(c, &e, coord_event_name(COORD_EV_FLIGHT_ABORT));
    coord_enc_kv_uint(&e, "flight", f->id);
    coord_enc_kv_cstr(&e, "reason", reason_name(why));
    coord_enc_kv_uint(&e, "fence", f->fence);
    conn_enc_finish(c, &e);
}

/* An owner reply's fields: role, flight, fence, and the flight's version
 * (the one it is found under) when it has one. */
static void encode_owner(coord_enc *e, const struct flight *f)
{
    coord_enc_kv_cstr(e, "role", "owner");
    coord_enc_kv_uint(e, "flight", f->id);
    coord_enc_kv_uint(e, "fence", f->fence);
    if (f->version_len)
        coord_enc_kv_name(e, "version", f->version, f->version_len);
}

static void reply_owner(struct conn *c, uint64_t rid, const struct flight *f)
{
    coord_enc e;
    conn_enc_begin_reply(c, &e, rid);
    encode_owner(&e, f);
    conn_enc_finish(c, &e);
}

static void on_owner_deadline(struct deadline *d);

static void make_owner(struct flight *f, struct member *m)
{
    f->owner = m;
    f->owner_since_us = now_us();
    f->owner_wall_ms = wall_ms();
    f->owner_deadline_ms = f->owner_wall_ms + m->owner_ttl_ms;
    list_append(&m->conn->flights, &f->owner_link);
    m->conn->nflights_owned++;
    budget_take();
    deadline_set(&f->deadline, broker_now_ms(F.b) + m->owner_ttl_ms, on_owner_deadline);
}

/* The owner is gone (disconnect, deadline): advance the fence and promote
 * the longest-waiting follower, or drop the flight when nobody waits. */
static void owner_lost(struct flight *f, enum reason why)
{
    if (f->purged) {                   /* a tombstone: told already, nobody waits */
        flight_free(f);
        return;
    }
    struct member *old = f->owner;
    owner_unlink(f);
    f->owner = NULL;
    deadline_cancel(&f->deadline);
    f->fence = ids_next();
    if (old && why == REASON_DEADLINE)
        send_abort_event(old->conn, f, REASON_DEADLINE);
    struct tr t = { old ? old->conn : NULL, old, ms_since(f->owner_since_us), -1, NULL };
    transition("owner_lost", f, f->fence, why, t);
    free(old);
    if (list_empty(&f->followers)) {
        flight_free(f);
        return;
    }
    /* the longest-waiting follower of the flight's version, else the
     * longest-waiting one */
    struct member *m = list_entry(f->followers.next, struct member, link);
    struct list *pos, *tmp;
    list_for_each_safe(pos, tmp, &f->followers) {
        struct member *x = list_entry(pos, struct member, link);
        if (x->version_len == f->version_len &&
            memcmp(x->version, f->version, f->version_len) == 0) {
            m = x;
            break;
        }
    }
    list_del(&m->link);
    f->nfollowers--;
    deadline_cancel(&m->wait);
    pending_finish(&m->p);
    latency_add(LAT_FOLLOWER_WAIT, now_us() - m->joined_us);
    F.promoted++;
    make_owner(f, m);
    struct tr tp = { NULL, NULL, -1, ms_since(m->joined_us), NULL };
    transition("promoted", f, f->fence, REASON_NONE, tp);
    reply_owner(m->conn, m->p.rid, f);
}

static void on_owner_deadline(struct deadline *d)
{
    struct flight *f = list_entry(d, struct flight, deadline);
    owner_lost(f, REASON_DEADLINE);
}

/* A follower leaves (cancel, timeout, disconnect): only it. */
static void follower_leave(struct member *m)
{
    struct flight *f = m->f;
    list_del(&m->link);
    f->nfollowers--;
    deadline_cancel(&m->wait);
    pending_finish(&m->p);
    if (f->nfollowers == 0 && f->owner && f->owner->abort_when_orphaned)
        send_abort_event(f->owner->conn, f, REASON_ORPHANED);
    free(m);
}

static void follower_abort(struct pending *p, int code)
{
    struct member *m = list_entry(p, struct member, p);
    struct conn *c = m->conn;
    uint64_t rid = p->rid;
    follower_leave(m);
    conn_reply_error(c, rid, code, NULL);
}

static void follower_drop(struct pending *p)
{
    follower_leave(list_entry(p, struct member, p));
}

static void on_follower_wait(struct deadline *d)
{
    struct member *m = list_entry(d, struct member, wait);
    struct conn *c = m->conn;
    uint64_t rid = m->p.rid;
    F.b->stats.timeouts++;
    F.follower_timeouts++;
    latency_add(LAT_FOLLOWER_WAIT, now_us() - m->joined_us);
    /* the wait on the clock its deadline runs on (loop time, read at the
     * turn's start): at least wait_ms, as the answer says */
    uint64_t now = broker_now_ms(F.b);
    struct tr t = { NULL, NULL, -1, (int64_t)(now > m->joined_ms ? now - m->joined_ms : 0),
                    NULL };
    transition("follower_timeout", m->f, m->f->fence, REASON_NONE, t);
    follower_leave(m);
    conn_reply_error(c, rid, COORD_ETIMEOUT, "no result within wait_ms");
}

void flights_conn_closed(struct conn *c)
{
    /* list_shift (list.h): owner_lost's owner_unlink then finds f
     * unlinked, so what it gives back is given back here */
    while (!list_empty(&c->flights)) {
        struct flight *f = list_entry(list_shift(&c->flights), struct flight, owner_link);
        owner_released(f);
        owner_lost(f, REASON_DISCONNECT);
    }
    while (!list_empty(&c->watches))
        watcher_free(list_entry(list_shift(&c->watches), struct watcher, clink));
}

/* ---- delivering a result ---- */

struct outcome {
    bool failed;
    const uint8_t *result;
    size_t result_len;
    struct resref *ref;            /* a result by reference (result unused) */
    coord_bytes code, message;
    bool retryable;
    uint64_t retry_after_ms;       /* failed: a backoff was asked for */
};

static void outcome_code(const void *p, const uint8_t **code, size_t *len, bool *retryable)
{
    const struct outcome *o = p;
    *code = o->code.ptr;
    *len = o->code.len;
    *retryable = o->retryable;
}

/* Ended with conn_enc_finish_ref(c, e, o->ref); c must have room for a
 * result by reference (conn_ref_room). */
static void encode_outcome(struct conn *c, coord_enc *e, const struct outcome *o,
                           uint64_t fence, uint64_t age_ms, const char *source)
{
    if (o->failed) {
        coord_enc_kv_cstr(e, "role", "failed");
        coord_enc_key(e, "error");
        coord_enc_map_begin(e);
        coord_enc_kv_name(e, "code", o->code.ptr, o->code.len);
        coord_enc_kv_name(e, "message", o->message.ptr, o->message.len);
        coord_enc_map_end(e);
        coord_enc_kv_bool(e, "retryable", o->retryable);
        if (o->retry_after_ms)
            coord_enc_kv_uint(e, "retry_after_ms", o->retry_after_ms);
    } else {
        coord_enc_kv_cstr(e, "role", "result");
        if (o->ref)
            conn_enc_result(c, e, o->ref);
        else
            coord_enc_kv_bin(e, "result", o->result, o->result_len);
    }
    coord_enc_kv_uint(e, "fence", fence);
    coord_enc_kv_uint(e, "age_ms", age_ms);
    coord_enc_kv_cstr(e, "source", source);
}

/* LIMIT: c holds LIMIT_CONN_REFS result_ref already. */
static void reply_ref_limit(struct conn *c, uint64_t rid)
{
    char msg[96];
    snprintf(msg, sizeof msg, "%u result_ref held by this connection: flight.unref them",
             LIMIT_CONN_REFS);
    conn_reply_error(c, rid, COORD_ELIMIT, msg);
}

/* Answers every follower and frees the flight; returns how many. */
static uint64_t deliver(struct flight *f, const struct outcome *o, const struct conn *who,
                        const struct member *wm)
{
    uint64_t n = 0, now = now_us();
    while (!list_empty(&f->followers)) {
        struct member *m = list_entry(list_shift(&f->followers), struct member, link);
        latency_add(LAT_FOLLOWER_WAIT, now - m->joined_us);
        f->nfollowers--;
        deadline_cancel(&m->wait);
        pending_finish(&m->p);
        if (!o->failed && o->ref && !conn_ref_room(m->conn)) {
            reply_ref_limit(m->conn, m->p.rid);
        } else {
            coord_enc e;
            conn_enc_begin_reply(m->conn, &e, m->p.rid);
            encode_outcome(m->conn, &e, o, f->fence, 0, "live");
            conn_enc_finish_ref(m->conn, &e, o->failed ? NULL : o->ref);
        }
        free(m);
        n++;
    }
    struct tr t = { who, wm, ms_since(f->owner_since_us), -1, o->failed ? o : NULL };
    transition(o->failed ? "failed" : "completed", f, f->fence, REASON_NONE, t);
    notify_watchers(f, !o->failed);
    flight_free(f);
    return n;
}

static void reply_delivered(struct conn *c, uint64_t rid, uint64_t n)
{
    coord_enc e;
    conn_enc_begin_reply(c, &e, rid);
    coord_enc_kv_uint(&e, "delivered", n);
    conn_enc_finish(c, &e);
}

/* A completion whose record is being written: the flight waits for the
 * commit, then the followers get the result (durable before answered). */
struct completion {
    struct record_write w;
    struct flight *f;
    struct conn_job owner;         /* answered once the record is stored */
    struct outcome o;
    uint8_t *copy;                 /* result or code+message bytes */
    struct member *m;              /* the owner's member (its version) */
};

static void completion_reply(struct conn *c, struct completion *cp, int status, uint64_t n);

static void completion_done(struct store_job *job, int status)
{
    struct completion *cp = (struct completion *)job;
    struct conn *c = conn_job_conn(&cp->owner);
    if (cp->f->purged) {
        /* purged while its record was queued: the purge queued after it
         * deleted the record, the followers were answered then */
        flight_free(cp->f);
        if (c)
            conn_reply_error_reason(c, cp->owner.rid, COORD_EFENCED,
                                    "the flight was purged (record.purge): nothing delivered or kept",
                                    reason_name(REASON_PURGED));
    } else {
        uint64_t n = deliver(cp->f, &cp->o, c, cp->m);
        completion_reply(c, cp, status, n);
    }
    conn_job_end(&cp->owner);
    record_write_settle(&cp->w, status);
    record_write_free(&cp->w);
    resref_drop(cp->o.ref);
    free(cp->copy);
    free(cp->m);
    free(cp);
}

/* The owner's answer to a completion whose record was written (or not). */
static void completion_reply(struct conn *c, struct completion *cp, int status, uint64_t n)
{
    struct store_job *job = &cp->w.job;
    if (c && status)
        conn_reply_error(c, cp->owner.rid, COORD_ESTORAGE,
                         store_job_message(job, "result delivered but the record was not stored"));
    else if (c)
        reply_delivered(c, cp->owner.rid, n);
}

/* Checks flight + fence for complete/fail; replies and returns NULL when
 * refused. */
/* Was fence an owner's that a fresh join superseded (one of the last kept)? */
static bool was_superseded(const struct flight *f, uint64_t fence)
{
    for (unsigned i = 0; i < FLIGHT_SUPERSEDED_KEPT && i < f->superseded_n; i++)
        if (fence && f->superseded[i] == fence)
            return true;
    return false;
}

static struct flight *owned_flight(struct conn *c, uint64_t rid, uint64_t id, uint64_t fence)
{
    struct hentry *h = hashmap_get(&F.by_id, &id, sizeof id);
    struct flight *f = h ? list_entry(h, struct flight, by_id) : NULL;
    if (!f) {
        bool issued = id && id <= ids_last();
        if (issued) {
            F.fenced++;
            log_event(LOG_INFO, "flight.transition",
                      "what=fenced flight=%llu fence=%llu owner_conn=%llu owner_pid=%llu"
                      " (the flight is over)", (unsigned long long)id,
                      (unsigned long long)fence, (unsigned long long)c->id,
                      (unsigned long long)c->pid);
            conn_reply_error(c, rid, COORD_EFENCED, "flight is over; this result is stale");
        } else {
            conn_reply_error(c, rid, COORD_ENOT_FOUND, "no such flight");
        }
        return NULL;
    }
    if (f->purged) {
        F.fenced++;
        struct tr t = { c, NULL, -1, -1, NULL };
        transition("fenced", f, fence, REASON_PURGED, t);
        conn_reply_error_reason(c, rid, COORD_EFENCED,
                                "the flight was purged (record.purge): its result is not kept",
                                reason_name(REASON_PURGED));
        if (f->owner && f->owner->conn == c)
            flight_free(f);            /* the owner has heard: the tombstone goes */
        return NULL;
    }
    if (BROKEN(SUPERSEDED_ACCEPTED) && !f->completing && f->owner &&
        was_superseded(f, fence))
        return f;                      /* the stale owner's result, taken */
    if (f->completing || !f->owner || f->owner->conn != c || f->fence != fence) {
        F.fenced++;
        struct tr t = { c, NULL, -1, -1, NULL };
        bool sup = was_superseded(f, fence);
        transition("fenced", f, fence, sup ? REASON_SUPERSEDED : REASON_NONE, t);
        if (sup)
            conn_reply_error_reason(c, rid, COORD_EFENCED,
                                    "superseded: a fresh request took the flight over",
                                    reason_name(REASON_SUPERSEDED));
        else
            conn_reply_error(c, rid, COORD_EFENCED, "stale fence: another owner took over");
        return NULL;
    }
    return f;
}

/* Common end of complete and fail. */
static void finish(struct conn *c, uint64_t rid, struct flight *f, struct outcome *o,
                   uint64_t keep_ms)
{
    /* a bypassed flight writes no record; a failed revalidation leaves the
     * stale record in place */
    if (f->bypass || (o->failed && f->revalidation))
        keep_ms = 0;
    if (keep_ms && f->by_key.keylen - SKEY_HEADER > LIMIT_RECORD_KEY) {
        reply_record_key_too_large(c, rid);
        return;
    }
    if (o->failed) F.failed++; else F.completed++;
    latency_add(LAT_FLIGHT_RUN, now_us() - f->owner_since_us);
    if (o->failed && o->retryable && o->retry_after_ms && !f->bypass)
        gates_backoff_start(f->skey, f->by_key.keylen, o->retry_after_ms, o->code.ptr,
                            o->code.len, o->message.ptr, o->message.len);
    if (keep_ms == 0) {
        reply_delivered(c, rid, deliver(f, o, c, f->owner));
        return;
    }
    struct completion *cp = calloc(1, sizeof *cp);
    size_t n = o->failed ? o->code.len + o->message.len : o->result_len;
    uint8_t *copy = malloc(n ? n : 1);
    if (!cp || !copy) {
        free(cp);
        free(copy);
        conn_reply_error(c, rid, COORD_ELIMIT, "out of memory");
        return;
    }
    cp->w.copy_fd = -1;
    uint64_t now = wall_ms();
    struct record r = { .status = o->failed ? RECORD_FAILED : RECORD_COMPLETED,
                        .retryable = o->retryable, .fence = f->fence,
                        .created_ms = now, .expires_ms = now + keep_ms,
                        .result = o->result, .result_len = o->result_len,
                        .code = o->code.ptr, .code_len = o->code.len,
                        .message = o->message.ptr, .message_len = o->message.len,
                        .pid = c->pid,
                        .client = (const uint8_t *)(c->client ? c->client : ""),
                        .client_len = c->client ? strlen(c->client) : 0,
                        .instance = (const uint8_t *)(c->instance ? c->instance : ""),
                        .instance_len = c->instance ? strlen(c->instance) : 0,
                        .version = f->owner->version, .version_len = f->owner->version_len };
    /* by reference: the writer copies the memfd to a file before the commit */
    int copy_fd = o->ref ? fcntl(o->ref->fd, F_DUPFD_CLOEXEC, 3) : -1;
    bool ref_failed = o->ref && (copy_fd < 0 || record_write_by_ref(&cp->w, &r, copy_fd,
                                                                   o->ref->size, f->fence) < 0);
    if (ref_failed || record_write_prepare(&cp->w, f->skey, f->by_key.keylen, &r) < 0) {
        record_write_free(&cp->w);
        free(cp);
        free(copy);
        /* the flight is still ours: complete again, unkept, or fail */
        if (ref_failed)
            conn_reply_error(c, rid, COORD_ESTORAGE,
                             "cannot keep a result by reference: the data dir's results/ "
                             "is not usable");
        else
            conn_reply_error(c, rid, COORD_ELIMIT, "out of memory");
        return;
    }
    /* the frame's bytes vanish after this call: keep our own copy */
    cp->o = *o;
    if (o->failed) {
        memcpy(copy, o->code.ptr, o->code.len);
        memcpy(copy + o->code.len, o->message.ptr, o->message.len);
        cp->o.code.ptr = copy;
        cp->o.message.ptr = copy + o->code.len;
    } else if (o->ref) {
        cp->o.ref = resref_hold(o->ref);
    } else {
        if (n)
            memcpy(copy, o->result, n);
        cp->o.result = copy;
    }
    cp->copy = copy;
    cp->f = f;
    conn_job_start(&cp->owner, c, rid);
    /* the owner's work is done: no deadline, no promotion from now on */
    f->completing = true;
    deadline_cancel(&f->deadline);
    owner_unlink(f);
    cp->m = f->owner;
    f->owner = NULL;
    cp->w.job.done = completion_done;
    records_submit_write(&cp->w);
}

static bool read_keep(struct conn *c, uint64_t rid, coord_fields *f, uint64_t *keep_ms)
{
    *keep_ms = 0;
    coord_field_uint(f, "keep_ms", false, keep_ms);
    return duration_ok(c, rid, "keep_ms", *keep_ms, LIMIT_KEEP_MS);
}

/* The checks of a result by reference (the descriptor fd, of size bytes):
 * true, or false after replying. */
static bool ref_ok(struct conn *c, uint64_t rid, int fd, uint64_t size)
{
    char why[128];
    if (size > c->b->opt.max_ref_bytes) {
        snprintf(why, sizeof why, "result_fd: %llu bytes, more than max_ref_bytes (%llu)",
                 (unsigned long long)size, (unsigned long long)c->b->opt.max_ref_bytes);
        conn_reply_error(c, rid, COORD_ETOO_LARGE, why);
        return false;
    }
    if (resref_check_memfd(fd, size, why, sizeof why) < 0) {
        conn_reply_error(c, rid, COORD_EINVALID_OPTIONS, why);
        return false;
    }
    return true;
}

void op_flight_complete(struct conn *c, uint64_t rid, coord_fields *f)
{
    uint64_t id = 0, fence = 0, keep_ms, ref_size = 0;
    coord_bytes result = { NULL, 0 };
    /* by reference: the frame's descriptor is ours, closed on every path */
    bool by_ref = coord_field_uint(f, "result_fd", false, &ref_size);
    int fd = by_ref ? conn_take_frame_fd(c) : -1;
    coord_field_uint(f, "flight", true, &id);
    coord_field_uint(f, "fence", true, &fence);
    coord_field_bin(f, "result", !by_ref, &result);
    if (by_ref && result.ptr)
        coord_fields_fail(f, "result", "not with result_fd");
    if (!fields_ok(c, rid, f) || !read_keep(c, rid, f, &keep_ms) ||
        (by_ref && !ref_ok(c, rid, fd, ref_size))) {
        if (fd >= 0)
            close(fd);
        return;
    }
    /* followers get an inline result inside a frame of their own */
    if (result.len > payload_limit(c)) {
        conn_reply_error(c, rid, COORD_ETOO_LARGE, "result does not fit a reply frame");
        return;
    }
    struct flight *fl = owned_flight(c, rid, id, fence);
    if (!fl) {
        if (fd >= 0)
            close(fd);
        return;
    }
    struct outcome o = { .failed = false, .result = result.ptr, .result_len = result.len };
    if (by_ref && !(o.ref = resref_new(fd, ref_size))) {
        conn_reply_error(c, rid, COORD_ELIMIT, "out of memory");
        return;
    }
    finish(c, rid, fl, &o, keep_ms);
    resref_drop(o.ref);
}

void op_flight_unref(struct conn *c, uint64_t rid, coord_fields *f)
{
    uint64_t ref = 0;
    coord_field_uint(f, "ref", true, &ref);
    if (!fields_ok(c, rid, f))
        return;
    bool released = conn_unref_result(c, ref);
    coord_enc e;
    conn_enc_begin_reply(c, &e, rid);
    coord_enc_kv_bool(&e, "released", released);
    conn_enc_finish(c, &e);
}

void op_flight_fail(struct conn *c, uint64_t rid, coord_fields *f)
{
    uint64_t id = 0, fence = 0, keep_ms, retry_after = 0;
    bool retryable = false;
    coord_index err_index;
    coord_fields ef;
    coord_field_uint(f, "flight", true, &id);
    coord_field_uint(f, "fence", true, &fence);
    bool have_err = coord_field_nested(f, "error", true, &err_index, &ef);
    coord_field_bool(f, "retryable", false, &retryable);
    coord_field_uint(f, "retry_after_ms", false, &retry_after);
    coord_bytes code = { (const uint8_t *)"", 0 }, message = code;
    if (have_err) {
        coord_field_str(&ef, "code", true, &code);
        coord_field_str(&ef, "message", false, &message);
        if (ef.failed && !f->failed) {
            f->failed = true;
            memcpy(f->err, ef.err, sizeof f->err);
        }
    }
    if (!fields_ok(c, rid, f) || !read_keep(c, rid, f, &keep_ms) ||
        !duration_ok(c, rid, "retry_after_ms", retry_after, LIMIT_WAIT_MS))
        return;
    if (retry_after && !retryable) {
        conn_reply_error(c, rid, COORD_EINVALID_OPTIONS, "retry_after_ms needs retryable");
        return;
    }
    if (code.len > LIMIT_ERROR_CODE || message.len > LIMIT_ERROR_MESSAGE ||
        code.len + message.len > payload_limit(c)) {
        char msg[96];
        snprintf(msg, sizeof msg, "error code (%u) or message (%u bytes) too long",
                 LIMIT_ERROR_CODE, LIMIT_ERROR_MESSAGE);
        conn_reply_error(c, rid, COORD_ETOO_LARGE, msg);
        return;
    }
    struct flight *fl = owned_flight(c, rid, id, fence);
    if (!fl)
        return;
    struct outcome o = { .failed = true, .code = code, .message = message,
                         .retryable = retryable, .retry_after_ms = retry_after };
    finish(c, rid, fl, &o, keep_ms);
}

/* ---- joining ---- */

/* The stored record of a key, as a join sees it. */
enum record_use { REC_NONE, REC_FRESH, REC_STALE };

static enum record_use classify(const struct record *r, uint64_t age, uint64_t max_age,
                                uint64_t stale_ms)
{
    if (age <= max_age && max_age && !(r->status == RECORD_FAILED && r->retryable))
        return REC_FRESH;
    /* only a result can be served stale, never a failure */
    if (stale_ms && r->status == RECORD_COMPLETED && age <= max_age + stale_ms)
        return REC_STALE;
    return REC_NONE;
}

/* rref: the result of a record by reference, opened (record_open_ref). */
static struct outcome record_outcome(const struct record *r, struct resref *rref)
{
    struct outcome o = { .failed = r->status == RECORD_FAILED, .result = r->result,
                         .result_len = r->result_len, .ref = rref,
                         .code = { r->code, (uint32_t)r->code_len },
                         .message = { r->message, (uint32_t)r->message_len },
                         .retryable = r->retryable };
    return o;
}

/* {role:"result", source:"record", stale:true, revalidating, ...} */
static void reply_stale(struct conn *c, uint64_t rid, const struct record *r,
                        struct resref *rref, uint64_t age, bool revalidating)
{
    struct outcome o = record_outcome(r, rref);
    coord_enc e;
    conn_enc_begin_reply(c, &e, rid);
    encode_outcome(c, &e, &o, r->fence, age, "record");
    coord_enc_kv_bool(&e, "stale", true);
    coord_enc_kv_bool(&e, "revalidating", revalidating);
    conn_enc_finish_ref(c, &e, rref);
    latency_add(LAT_FOLLOWER_WAIT, 0);
    F.from_record++;
}

/* {role:"failed", ..., retry_after_ms: left, source:"backoff"} */
static void reply_backoff(struct conn *c, uint64_t rid, const struct backoff_view *bv)
{
    coord_enc e;
    conn_enc_begin_reply(c, &e, rid);
    coord_enc_kv_cstr(&e, "role", "failed");
    coord_enc_key(&e, "error");
    coord_enc_map_begin(&e);
    coord_enc_kv_name(&e, "code", bv->code, bv->code_len);
    coord_enc_kv_name(&e, "message", bv->message, bv->message_len);
    coord_enc_map_end(&e);
    coord_enc_kv_bool(&e, "retryable", true);
    coord_enc_kv_uint(&e, "retry_after_ms", bv->left_ms);
    coord_enc_kv_cstr(&e, "source", "backoff");
    conn_enc_finish(c, &e);
    latency_add(LAT_FOLLOWER_WAIT, 0);
}

static bool add_watcher(struct conn *c, struct flight *f)
{
    if (c->nwatches >= LIMIT_CONN_WATCHES || budget_full())
        return false;
    struct watcher *w = calloc(1, sizeof *w);
    if (!w)
        return false;
    w->conn = c;
    list_append(&f->watchers, &w->flink);
    list_append(&c->watches, &w->clink);
    c->nwatches++;
    budget_take();
    return true;
}

struct join_args {
    uint64_t ttl, wait_ms, max_age, stale_ms, priority;
    bool orphan_abort, notify, supersede, own_version;
    coord_bytes version;
};

/* A joining caller, owner or follower to be; NULL when out of memory. */
static struct member *member_new(struct conn *c, const struct join_args *a)
{
    struct member *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->conn = c;
    m->owner_ttl_ms = a->ttl;
    m->abort_when_orphaned = a->orphan_abort;
    m->joined_ms = broker_now_ms(F.b);
    m->joined_us = now_us();
    m->priority = a->priority;
    m->own_version = a->own_version;
    m->version_len = (uint8_t)a->version.len;
    if (a->version.len)
        memcpy(m->version, a->version.ptr, a->version.len);
    list_init(&m->link);
    list_init(&m->p.link);
    return m;
}

/* c becomes the owner of a new flight for skey (taken over).  A bypass
 * flight (kill switch) is not found by other joins.  stale: the record a
 * revalidation owner is given, or NULL. */
static void start_flight(struct conn *c, uint64_t rid, uint8_t *skey, size_t sklen,
                         const struct join_args *a, bool bypass, const struct record *stale,
                         struct resref *stale_ref, uint64_t stale_age)
{
    if (c->nflights_owned >= LIMIT_CONN_FLIGHTS) {
        free(skey);
        reply_conn_limit(c, rid, "flights owned", LIMIT_CONN_FLIGHTS);
        return;
    }
    if (budget_full()) {
        free(skey);
        budget_refuse(c, rid);
        return;
    }
    struct member *m = member_new(c, a);
    struct flight *fl = m ? calloc(1, sizeof *fl) : NULL;
    if (!fl) {
        free(m);
        free(skey);
        conn_reply_error(c, rid, COORD_ELIMIT, "out of memory");
        return;
    }
    fl->skey = skey;
    fl->by_key.key = skey;
    fl->by_key.keylen = sklen;
    fl->version_len = m->version_len;
    memcpy(fl->version, m->version, m->version_len);
    fl->keyed = bypass ? KEYED_NONE
              : hashmap_get(&F.by_key, skey, sklen) ? KEYED_VKEY : KEYED_KEY;
    if (fl->keyed == KEYED_VKEY) {
        /* (version length, version, scoped key): one flight per version */
        fl->vkey = malloc(1 + fl->version_len + sklen);
        if (!fl->vkey) {
            free(skey);
            free(fl);
            free(m);
            conn_reply_error(c, rid, COORD_ELIMIT, "out of memory");
            return;
        }
        fl->vkey[0] = fl->version_len;
        memcpy(fl->vkey + 1, fl->version, fl->version_len);
        memcpy(fl->vkey + 1 + fl->version_len, skey, sklen);
        fl->by_vkey.key = fl->vkey;
        fl->by_vkey.keylen = 1 + fl->version_len + sklen;
    }
    fl->bypass = bypass;
    fl->revalidation = stale != NULL;
    fl->id = ids_next();
    fl->fence = ids_next();
    fl->by_id.key = (const uint8_t *)&fl->id;
    fl->by_id.keylen = sizeof fl->id;
    fl->started_ms = m->joined_ms;
    list_init(&fl->followers);
    list_init(&fl->owner_link);
    list_init(&fl->watchers);
    int put = fl->keyed == KEYED_KEY  ? hashmap_put(&F.by_key, &fl->by_key)
            : fl->keyed == KEYED_VKEY ? hashmap_put(&F.by_vkey, &fl->by_vkey) : 0;
    if (put < 0 || hashmap_put(&F.by_id, &fl->by_id) < 0) {
        if (put == 0)
            key_unlink(fl);
        free(skey);
        free(fl->vkey);
        free(fl);
        free(m);
        conn_reply_error(c, rid, COORD_ELIMIT, "out of memory");
        return;
    }
    list_append(&F.all, &fl->order);
    m->f = fl;
    F.started++;
    if (fl->keyed == KEYED_VKEY)
        F.version_flights++;
    make_owner(fl, m);
    transition("started", fl, fl->fence, REASON_NONE, TR_NONE);
    coord_enc e;
    conn_enc_begin_reply(c, &e, rid);
    encode_owner(&e, fl);
    if (bypass)
        coord_enc_kv_bool(&e, "bypass", true);
    if (stale) {
        coord_enc_key(&e, "stale");
        coord_enc_map_begin(&e);
        if (stale_ref)
            conn_enc_result(c, &e, stale_ref);
        else
            coord_enc_kv_bin(&e, "result", stale->result, stale->result_len);
        coord_enc_kv_uint(&e, "age_ms", stale_age);
        coord_enc_kv_uint(&e, "fence", stale->fence);
        coord_enc_map_end(&e);
    }
    conn_enc_finish_ref(c, &e, stale_ref);
}

static void follow(struct conn *c, uint64_t rid, struct flight *fl, const struct join_args *a)
{
    struct member *m = member_new(c, a);
    if (!m) {
        conn_reply_error(c, rid, COORD_ELIMIT, "out of memory");
        return;
    }
    m->f = fl;
    m->p.abort = follower_abort;
    m->p.drop = follower_drop;
    if (pending_start(c, &m->p, rid, COORD_OP_FLIGHT_JOIN) < 0) {   /* memory: replied */
        free(m);
        return;
    }
    list_append(&fl->followers, &m->link);
    fl->nfollowers++;
    fl->had_followers = true;
    F.joined++;
    if (a->wait_ms)
        deadline_set(&m->wait, m->joined_ms + a->wait_ms, on_follower_wait);
    transition("joined", fl, fl->fence, REASON_NONE, TR_NONE);
}

static bool same_version(const struct flight *f, const struct join_args *a)
{
    return f->version_len == a->version.len &&
           (a->version.len == 0 || memcmp(f->version, a->version.ptr, a->version.len) == 0);
}

/* The running flight a join of skey meets: the one of its version, else
 * (other_version "follow") the key's first flight; NULL: none. */
static struct flight *find_flight(const uint8_t *skey, size_t sklen, const struct join_args *a)
{
    struct hentry *h = hashmap_get(&F.by_key, skey, sklen);
    struct flight *first = h ? list_entry(h, struct flight, by_key) : NULL;
    if (first && same_version(first, a))
        return first;
    if (F.by_vkey.count) {
        uint8_t buf[1 + LIMIT_FLIGHT_VERSION + 64];
        size_t n = 1 + a->version.len + sklen;
        uint8_t *vk = n <= sizeof buf ? buf : malloc(n);
        if (vk) {
            vk[0] = (uint8_t)a->version.len;
            if (a->version.len)
                memcpy(vk + 1, a->version.ptr, a->version.len);
            memcpy(vk + 1 + a->version.len, skey, sklen);
            h = hashmap_get(&F.by_vkey, vk, n);
            if (vk != buf)
                free(vk);
            if (h)
                return list_entry(h, struct flight, by_vkey);
        }
    }
    return a->own_version ? NULL : first;
}

/* The record's version is not the joiner's, which wants its own. */
static bool record_other_version(const struct record *r, const struct join_args *a)
{
    return a->own_version &&
           !(r->version_len == a->version.len &&
             (!r->version_len || memcmp(r->version, a->version.ptr, r->version_len) == 0));
}

/* A fresh join takes fl over (supersede, or a higher priority): the owner
 * hears flight.abort (superseded), its fence is retired (its late result
 * is FENCED, reason superseded), c owns the flight under a new fence, and
 * the followers stay and get c's outcome.  false: refused (replied). */
static bool supersede(struct conn *c, uint64_t rid, struct flight *fl, const struct join_args *a)
{
    if (c->nflights_owned >= LIMIT_CONN_FLIGHTS && fl->owner->conn != c) {
        reply_conn_limit(c, rid, "flights owned", LIMIT_CONN_FLIGHTS);
        return false;
    }
    struct member *m = member_new(c, a);
    if (!m) {
        conn_reply_error(c, rid, COORD_ELIMIT, "out of memory");
        return false;
    }
    struct member *old = fl->owner;
    owner_unlink(fl);
    fl->owner = NULL;
    deadline_cancel(&fl->deadline);
    uint64_t old_fence = fl->fence;
    fl->superseded[fl->superseded_n++ % FLIGHT_SUPERSEDED_KEPT] = old_fence;
    fl->fence = ids_next();
    send_abort_event(old->conn, fl, REASON_SUPERSEDED);
    struct tr t = { old->conn, old, ms_since(fl->owner_since_us), -1, NULL };
    transition("superseded", fl, old_fence, REASON_SUPERSEDED, t);
    free(old);
    F.superseded++;
    m->f = fl;
    make_owner(fl, m);
    transition("started", fl, fl->fence, REASON_SUPERSEDED, TR_NONE);
    coord_enc e;
    conn_enc_begin_reply(c, &e, rid);
    encode_owner(&e, fl);
    coord_enc_kv_uint(&e, "superseded", old_fence);
    conn_enc_finish(c, &e);
    return true;
}

/* The order a join is settled in: the kill switch (an owner without
 * deduplication); a fresh record when no flight runs (part one); a stale
 * one (stale-while-revalidate: served at once, or its revalidation owned);
 * a running flight (a follower); a backoff (the failure at once); else a
 * new owner. */
void op_flight_join(struct conn *c, uint64_t rid, coord_fields *f)
{
    coord_bytes key = { NULL, 0 };
    struct join_args a = { .ttl = 30000 };
    coord_field_str(f, "key", true, &key);
    coord_field_uint(f, "owner_ttl_ms", false, &a.ttl);
    bool have_wait = coord_field_uint(f, "wait_ms", false, &a.wait_ms);
    coord_field_uint(f, "max_age_ms", false, &a.max_age);
    coord_field_uint(f, "stale_ms", false, &a.stale_ms);
    coord_field_bool(f, "abort_when_orphaned", false, &a.orphan_abort);
    coord_field_bool(f, "notify", false, &a.notify);
    coord_field_bool(f, "supersede", false, &a.supersede);
    coord_field_uint(f, "priority", false, &a.priority);
    a.version.ptr = (const uint8_t *)"";
    coord_field_str(f, "version", false, &a.version);
    coord_bytes other = { NULL, 0 };
    bool have_other = coord_field_str(f, "other_version", false, &other);
    if (!fields_ok(c, rid, f) || !name_size_ok(c, rid, "key", key.len) ||
        !duration_ok(c, rid, "owner_ttl_ms", a.ttl, LIMIT_WAIT_MS) ||
        !duration_ok(c, rid, "wait_ms", a.wait_ms, LIMIT_WAIT_MS) ||
        !duration_ok(c, rid, "max_age_ms", a.max_age, LIMIT_KEEP_MS) ||
        !duration_ok(c, rid, "stale_ms", a.stale_ms, LIMIT_KEEP_MS))
        return;
    if (a.ttl == 0) {
        conn_reply_error(c, rid, COORD_EINVALID_OPTIONS, "owner_ttl_ms must be at least 1");
        return;
    }
    if (a.version.len > LIMIT_FLIGHT_VERSION) {
        char msg[64];
        snprintf(msg, sizeof msg, "version longer than %u bytes", LIMIT_FLIGHT_VERSION);
        conn_reply_error(c, rid, COORD_EINVALID_OPTIONS, msg);
        return;
    }
    if (have_other) {
        if (other.len == 3 && memcmp(other.ptr, "own", 3) == 0) {
            a.own_version = true;
        } else if (!(other.len == 6 && memcmp(other.ptr, "follow", 6) == 0)) {
            conn_reply_error(c, rid, COORD_EINVALID_OPTIONS,
                             "other_version must be \"follow\" or \"own\"");
            return;
        }
    }
    if (!have_wait)
        a.wait_ms = a.ttl;
    if (pending_check(c, rid) < 0)
        return;
    uint8_t *skey;
    size_t sklen = skey_make(&skey, c->scope, c->scope_len, key.ptr, key.len);
    if (!sklen) {
        conn_reply_error(c, rid, COORD_ELIMIT, "out of memory");
        return;
    }
    if (gates_bypass(skey, sklen)) {
        start_flight(c, rid, skey, sklen, &a, true, NULL, NULL, 0);
        return;
    }
    struct flight *fl = find_flight(skey, sklen, &a);
    struct backoff_view bv;
    if (fl && fl->owner && !fl->completing &&
        (a.supersede || a.priority > fl->owner->priority)) {
        free(skey);
        supersede(c, rid, fl, &a);
        return;
    }
    if ((a.max_age || a.stale_ms) && sklen - SKEY_HEADER <= LIMIT_RECORD_KEY) {
        MDB_txn *txn;
        struct record r;
        int found = records_lookup(&txn, skey, sklen, &r);
        struct resref *rref = NULL;
        if (found == 1 && r.by_ref && (!conn_ref_room(c) || !(rref = record_open_ref(&r)))) {
            /* its file cannot be opened (or c may hold no more): as a
             * failed read, the join goes on without it */
            store_read_end(c->b->store, txn);
            found = -1;
        }
        if (found < 0) {
            /* the join goes on as if there were none: note it */
            F.read_failures++;
            if (fl) {
                transition("read_failed", fl, fl->fence, REASON_NONE, TR_NONE);
            } else {
                char kh[REDACT_BUF];
                size_t klen;
                const uint8_t *k = skey_name(skey, sklen, &klen);
                log_event(LOG_INFO, "flight.transition", "what=read_failed key=%s",
                          redact(k, klen, kh));
            }
        }
        if (found == 1 && record_other_version(&r, &a)) {
            store_read_end(c->b->store, txn);
            resref_drop(rref);
        }
        else if (found == 1) {
            uint64_t now = wall_ms(), age = now > r.created_ms ? now - r.created_ms : 0;
            enum record_use use = classify(&r, age, a.max_age, a.stale_ms);
            bool done = true;
            if (use == REC_FRESH && !fl) {
                /* a record serves only when no flight runs: a running one is newer */
                struct outcome o = record_outcome(&r, rref);
                coord_enc e;
                conn_enc_begin_reply(c, &e, rid);
                encode_outcome(c, &e, &o, r.fence, age, "record");
                conn_enc_finish_ref(c, &e, o.failed ? NULL : rref);
                latency_add(LAT_FOLLOWER_WAIT, 0);
                F.from_record++;
            } else if (use == REC_STALE && gates_backoff(skey, sklen, &bv)) {
                reply_stale(c, rid, &r, rref, age, false);
            } else if (use == REC_STALE && fl) {
                reply_stale(c, rid, &r, rref, age, true);
                if (a.notify)
                    add_watcher(c, fl);
            } else if (use == REC_STALE) {
                start_flight(c, rid, skey, sklen, &a, false, &r, rref, age);
                skey = NULL;                     /* the flight's now */
            } else {
                done = false;
            }
            store_read_end(c->b->store, txn);
            resref_drop(rref);
            if (done) {
                free(skey);
                return;
            }
        }
    }
    if (fl) {
        free(skey);
        follow(c, rid, fl, &a);
        return;
    }
    if (gates_backoff(skey, sklen, &bv)) {
        free(skey);
        reply_backoff(c, rid, &bv);
        return;
    }
    start_flight(c, rid, skey, sklen, &a, false, NULL, NULL, 0);
}

void op_flight_list(struct conn *c, uint64_t rid, coord_fields *f)
{
    (void)f;
    uint64_t now = broker_now_ms(c->b);
    bool cut = false;
    coord_enc e;
    conn_enc_begin_reply(c, &e, rid);
    coord_enc_key(&e, "flights");
    coord_enc_array_begin(&e);
    struct list *pos, *tmp;
    list_for_each_safe(pos, tmp, &F.all) {
        struct flight *fl = list_entry(pos, struct flight, order);
        if (!skey_in_scope(fl->skey, c->scope, c->scope_len))
            continue;
        size_t klen;
        const uint8_t *key = flight_key(fl, &klen);
        coord_enc_mark m = coord_enc_mark_here(&e);
        coord_enc_map_begin(&e);
        coord_enc_kv_name(&e, "key", key, klen);
        coord_enc_kv_uint(&e, "flight", fl->id);
        coord_enc_kv_uint(&e, "fence", fl->fence);
        coord_enc_kv_uint(&e, "owner_conn", fl->owner ? fl->owner->conn->id : 0);
        coord_enc_kv_uint(&e, "owner_pid", fl->owner ? fl->owner->conn->pid : 0);
        coord_enc_kv_uint(&e, "followers", fl->nfollowers);
        coord_enc_kv_uint(&e, "age_ms", now - fl->started_ms);
        coord_enc_kv_bool(&e, "completing", fl->completing);
        if (fl->version_len)
            coord_enc_kv_name(&e, "version", fl->version, fl->version_len);
        coord_enc_map_end(&e);
        if (list_entry_overflows(c, &e, &m)) {
            cut = true;
            break;
        }
    }
    coord_enc_array_end(&e);
    if (cut)
        coord_enc_kv_bool(&e, "truncated", true);
    conn_enc_finish(c, &e);
}

/* ---- record.purge: fencing the flights it covers ---- */

/* f is ended by a purge: see the top comment.  Followers and watchers are
 * answered now; the owner (running) hears flight.abort; the flight leaves
 * the key table and the list and stays a tombstone in by_id. */
static void purge_flight(struct flight *f)
{
    const char *why = reason_name(REASON_PURGED);
    f->purged = true;
    F.purged++;
    F.tombstones++;
    key_unlink(f);
    list_del(&f->order);
    uint64_t now = now_us();
    while (!list_empty(&f->followers)) {
        struct member *m = list_entry(list_shift(&f->followers), struct member, link);
        latency_add(LAT_FOLLOWER_WAIT, now - m->joined_us);
        f->nfollowers--;
        deadline_cancel(&m->wait);
        pending_finish(&m->p);
        conn_reply_error_reason(m->conn, m->p.rid, COORD_EABORTED,
                                "the flight was purged (record.purge)", why);
        free(m);
    }
    notify_watchers(f, false);
    struct tr t = { NULL, NULL, (int64_t)((now - f->owner_since_us) / 1000), -1, NULL };
    transition("purged", f, f->fence, REASON_PURGED, t);
    if (f->owner)
        send_abort_event(f->owner->conn, f, REASON_PURGED);
}

uint64_t flights_purge(const uint8_t *sprefix, size_t plen)
{
    uint64_t n = 0;
    struct list *pos, *tmp;
    list_for_each_safe(pos, tmp, &F.all) {
        struct flight *f = list_entry(pos, struct flight, order);
        if (f->by_key.keylen < plen || memcmp(f->skey, sprefix, plen) != 0)
            continue;
        purge_flight(f);
        n++;
    }
    return n;
}
