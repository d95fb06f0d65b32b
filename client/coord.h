/* coord.h - libcoord, the client library of the coord broker.
 *
 * One coord_t is one connection to the per-user broker.  Every call exists
 * once: the blocking form (coord_call) and the event-loop form (coord_send
 * plus coord_fd/coord_dispatch) share the same core, so a program may mix
 * them on one handle.
 *
 * Threading rule: a coord_t belongs to one thread at a time.  Use one handle
 * per thread (connections are cheap), or serialise all calls on a handle
 * yourself.  Distinct handles share nothing.
 *
 * Errors: functions return 0 (or a count) on success and a negative
 * COORD_E* code on failure; coord_strerror() names it, and
 * coord_error_message() gives the broker's own text for the last failure. */
#ifndef COORD_H
#define COORD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "coord-codes.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define COORD_API __attribute__((visibility("default")))
#else
#define COORD_API
#endif

typedef struct coord coord_t;             /* a connection */
typedef struct coord_req coord_req_t;     /* a request being built */
typedef struct coord_reply coord_reply_t; /* a decoded reply or event */

/* A view of one map inside a reply or event.  Valid as long as the
 * coord_reply_t it came from; copying the struct is fine. */
typedef struct coord_map {
    const void *impl;
} coord_map;

typedef struct coord_options {
    const char *socket_path;  /* NULL: $COORD_SOCKET, $XDG_RUNTIME_DIR/coord/broker.sock,
                                 else /tmp/coord-$UID/broker.sock */
    const char *scope;        /* NULL: "" (see the protocol's scopes) */
    const char *client_name;  /* NULL: the program's name */
    bool no_autostart;        /* true: never start coordd */
    const char *broker_path;  /* coordd to start; NULL: $COORD_BROKER, else
                                 "coordd" from PATH */
    unsigned idle_exit_s;     /* --idle-exit for an autostarted broker; 0: 60 */
    unsigned connect_timeout_ms; /* how long autostart retries; 0: 2000 */
    unsigned request_timeout_ms; /* deadline of every blocking call that does
                                    not wait by design; 0: the default
                                    COORD_REQUEST_TIMEOUT_MS (see coord_call) */
} coord_options;

/* The default deadline of a blocking call (30 s): far longer than any
 * answer a live broker needs (a remote ledger gives up sooner), short
 * enough that a frozen or silent broker never hangs a program. */
#define COORD_REQUEST_TIMEOUT_MS 30000u

/* ---- connection ---- */

/* Fills o with the defaults above (idle_exit_s 60, connect_timeout_ms 2000,
 * everything else NULL/false). */
COORD_API void coord_options_init(coord_options *o);

/* Connects (autostarting the broker unless told not to) and says hello.
 * opts may be NULL.  On success *out owns the connection: free it with
 * coord_close.  On failure *out is NULL; COORD_ECONNECT when no broker
 * could be reached, or the code the broker refused hello with;
 * COORD_EPROTOCOL when hello's reply announces a max_frame above the
 * protocol's cap of 64 MiB (no frame larger than that is ever buffered). */
COORD_API int coord_connect(coord_t **out, const coord_options *opts);

/* Closes the connection and frees c, every queued event and every pending
 * request (their callbacks are called with COORD_ECLOSED). NULL is fine. */
COORD_API void coord_close(coord_t *c);

/* Short text for any code ("stale fence or generation"): a static string,
 * never NULL. */
COORD_API const char *coord_strerror(int err);

/* The broker's message for the last failed call on c ("name: missing"), or
 * a library text.  Owned by c; valid until the next call on c.
 * With c == NULL: why the last coord_connect of this thread
 * failed ("cannot start coordd: not found in PATH").  Thread-local; valid
 * until that thread's next coord_connect. */
COORD_API const char *coord_error_message(const coord_t *c);
/* The `reason` of the last error reply on c, or "" when it had none (or
 * the failure was not a reply): "purged" for a flight ended by
 * record.purge (COORD_EFENCED from complete/fail, COORD_EABORTED from a
 * follower's join).  Owned by c; valid until the next call on c. */
COORD_API const char *coord_error_reason(const coord_t *c);

/* Values from hello's reply.  The string is owned by c. */
COORD_API uint64_t coord_conn_id(const coord_t *c);
COORD_API uint64_t coord_epoch(const coord_t *c);
COORD_API uint32_t coord_max_frame(const coord_t *c);
/* The largest result by reference the broker takes (hello's
 * max_ref_bytes); 0 when it takes no descriptors (an older broker):
 * coord_flight_complete_fd then fails with COORD_EUNSUPPORTED. */
COORD_API uint64_t coord_max_ref_bytes(const coord_t *c);
COORD_API const char *coord_broker_version(const coord_t *c);

/* ---- building requests ---- */

/* A new request for op ("ping", "lock.acquire", ...).  The caller owns it;
 * coord_call and coord_send do not take ownership: free with
 * coord_req_free.  Returns NULL when out of memory. */
COORD_API coord_req_t *coord_req_new(const char *op);
COORD_API void coord_req_free(coord_req_t *r);
/* Add fields.  Strings are copied, and sent as a MessagePack str when
 * their bytes are valid UTF-8, else as a bin (the broker reads either; a
 * strict decoder never sees a str that is not UTF-8).  Memory errors are
 * remembered and make
 * the call fail with COORD_ENOMEM; a NULL key, or the keys "rid" and "op"
 * (the library writes those), make it fail with COORD_EINVAL.
 * coord_req_cstr with s == NULL sends nil, which the broker reads as an
 * absent field. */
COORD_API void coord_req_str(coord_req_t *r, const char *key, const void *s, size_t n);
COORD_API void coord_req_cstr(coord_req_t *r, const char *key, const char *s);
COORD_API void coord_req_bin(coord_req_t *r, const char *key, const void *p, size_t n);
COORD_API void coord_req_uint(coord_req_t *r, const char *key, uint64_t v);
COORD_API void coord_req_bool(coord_req_t *r, const char *key, bool v);
/* A nested map {k1: s1, k2: s2} of strings, as flight.fail's error. */
COORD_API void coord_req_strmap2(coord_req_t *r, const char *key,
                                 const char *k1, const char *s1,
                                 const char *k2, const char *s2);

/* ---- blocking calls ---- */

/* Sends req and waits for its reply.  On ok:true returns 0 and, when reply
 * is not NULL, *reply (the caller frees it with coord_reply_free).  On
 * ok:false returns the broker's code (coord_error_message has its text) and
 * *reply is NULL.
 *
 * Deadline: every op but the three that wait by design (lock.acquire,
 * flight.join, leader.campaign: they have their own timeout_ms / wait_ms)
 * gets the connection's request_timeout_ms (coord_options; default
 * COORD_REQUEST_TIMEOUT_MS).  When it passes the call returns
 * COORD_ETIMEOUT; the connection stays open, the request may still take
 * effect at the broker, and its late reply is dropped.  Requests sent with
 * coord_send have no deadline (an event loop keeps its own timers).
 *
 * Wire order: replies and events are handled in the order the broker sent
 * them.  Replies to other requests and events that arrived before this
 * call's reply are dispatched to their callbacks or queued (see events)
 * while it waits; what was read after its reply (a lock.lost right behind
 * the grant, say) stays queued, in order, and is dispatched by the next
 * call on c that dispatches (coord_dispatch, coord_wait, coord_next_event,
 * another blocking call).  Those bytes have been read already: a program
 * that polls coord_fd calls coord_dispatch after a blocking call before
 * it polls again. */
COORD_API int coord_call(coord_t *c, const coord_req_t *req, coord_reply_t **reply);

/* Shorthands. */
COORD_API int coord_ping(coord_t *c);

/* ---- event-loop mode ---- */

/* Called once per request with its reply.  status is 0 for ok:true, else a
 * negative code (COORD_ECLOSED when the connection went away first,
 * COORD_EPROTOCOL when it was dropped because the broker sent a malformed
 * frame).
 * reply is borrowed: valid only during the callback (NULL on errors that
 * did not come from the broker). */
typedef void (*coord_reply_cb)(coord_t *c, int status, const coord_reply_t *reply,
                               void *ud);

/* Sends req and returns at once, without waiting for the socket: what it
 * does not take at once stays queued in c (in order, the caller's memory)
 * and goes out at the next coord_dispatch, coord_wait or blocking call on
 * c, or when an event loop sees the socket writable while
 * coord_want_write(c) says so.  cb runs from coord_dispatch (or from a
 * blocking call on the same handle).  cb may be NULL: the reply is then
 * dropped.  *rid_out (may be NULL) receives the request id, for
 * coord_cancel.  A request larger than coord_max_frame fails here with
 * COORD_ETOO_LARGE.  Callbacks may call any function on c, coord_close
 * included (the handle is then freed when the outermost call returns). */
COORD_API int coord_send(coord_t *c, const coord_req_t *req, coord_reply_cb cb,
                         void *ud, uint64_t *rid_out);

/* Asks the broker to cancel a waiting request of this connection.  Does not
 * wait: the cancelled request's own callback reports COORD_EABORTED. */
COORD_API int coord_cancel(coord_t *c, uint64_t rid);

/* The socket to poll for readability. */
COORD_API int coord_fd(const coord_t *c);

/* 1 when requests wait in c for room in the socket: an event loop then
 * watches coord_fd for writability too and calls coord_dispatch when it is
 * writable (coord-uv.h does).  Checked after every callback of the loop,
 * before it waits: coord_send may queue from anywhere.  coord_close still
 * writes what waits, for at most request_timeout_ms; but a request whose
 * reply was not awaited may not have taken effect (the broker stops reading
 * a connection it can no longer answer): wait for the reply to know. */
COORD_API int coord_want_write(const coord_t *c);

/* Reads what has arrived without blocking and runs the callbacks.  Returns
 * 0, or COORD_ECLOSED / COORD_EPROTOCOL when the connection is gone. */
COORD_API int coord_dispatch(coord_t *c);

/* Blocks up to timeout_ms (-1: forever) for input, then dispatches.
 * Returns 0 (something or nothing arrived) or an error as coord_dispatch. */
COORD_API int coord_wait(coord_t *c, int timeout_ms);

/* ---- events ({ev: ...} frames: lock.lost, message, ...) ---- */

/* With a callback set, events are delivered to it (event borrowed for the
 * call).  Without one they are queued for coord_next_event.  Events queued
 * before a callback is set go to it first, oldest first, at the next
 * dispatch (coord_dispatch, coord_wait, a blocking call): a lock.lost read
 * along with the grant of coord_lock_acquire reaches a callback set after
 * it returns.
 *
 * The queue is bounded: when more than COORD_EVENT_QUEUE_MAX events or
 * COORD_EVENT_QUEUE_BYTES bytes of them wait unread (no callback, and no
 * coord_next_event while a blocking call or coord_dispatch reads a flood
 * of messages), the connection fails with COORD_EOVERFLOW: nothing more is
 * read, every pending request and every later call returns
 * COORD_EOVERFLOW, and the events already queued can still be taken.  The
 * connection is failed rather than events dropped: a dropped lock.lost or
 * leader.lost would leave a holder believing it still holds; a closed
 * connection releases every lock of c, which the holder learns. */
#define COORD_EVENT_QUEUE_MAX 8192u
#define COORD_EVENT_QUEUE_BYTES (16u << 20)
typedef void (*coord_event_cb)(coord_t *c, const coord_reply_t *event, void *ud);
COORD_API void coord_set_event_cb(coord_t *c, coord_event_cb cb, void *ud);

/* Takes the oldest queued event, waiting up to timeout_ms (-1: forever).
 * Returns 0 and *event (caller frees with coord_reply_free), COORD_EAGAIN
 * when none came in time, or a connection error. */
COORD_API int coord_next_event(coord_t *c, int timeout_ms, coord_reply_t **event);

/* ---- locks (Web Locks semantics; see the protocol's "Locks") ----
 *
 * A lock belongs to the connection that acquired it: closing c (or the
 * process dying) releases every lock of c and drops its waiting requests.
 * Names are any bytes (NUL and the empty name included), at most 1024;
 * names starting with '-' are the broker's (COORD_ENAME_RESERVED).  The
 * name is copied into the request: the caller keeps ownership. */

typedef struct coord_lock_opts {
    bool shared;          /* mode "shared" (default: exclusive) */
    bool if_available;    /* never wait: COORD_LOCK_BUSY when not granted at once */
    bool steal;           /* break every holder (they get lock.lost "stolen") */
    uint64_t timeout_ms;  /* give up waiting after this (COORD_ETIMEOUT);
                             0: wait forever (the field is then not sent) */
    uint64_t lease_ms;    /* renew within this or lose the lock ("expired");
                             0: no lease */
} coord_lock_opts;

/* Returned (a positive value, not an error) when an if_available request
 * was not granted: the broker answered {granted: false}. */
#define COORD_LOCK_BUSY 1

/* Acquires name, blocking until granted.  o may be NULL (exclusive, wait
 * forever, no lease).  Returns
 *   0                   granted: *lock (the id for release/renew) and
 *                       *token (the fencing token) are set;
 *   COORD_LOCK_BUSY     if_available and not granted;
 *   negative            COORD_ETIMEOUT (timeout_ms passed), COORD_EABORTED,
 *                       COORD_EINVALID_OPTIONS (steal with if_available or
 *                       shared, timeout_ms with steal or if_available, name
 *                       over 1024 bytes), COORD_ENAME_RESERVED, connection
 *                       errors...
 * lock and token may be NULL; they are set to 0 unless granted.  name may
 * be NULL only when name_len is 0. */
COORD_API int coord_lock_acquire(coord_t *c, const void *name, size_t name_len,
                                 const coord_lock_opts *o, uint64_t *lock,
                                 uint64_t *token);

/* Called once with the outcome of coord_lock_acquire_async: status as the
 * return value of coord_lock_acquire (0, COORD_LOCK_BUSY, or negative:
 * COORD_EABORTED after coord_cancel, COORD_ECLOSED when c closed first);
 * lock and token are 0 unless status is 0. */
typedef void (*coord_lock_cb)(coord_t *c, int status, uint64_t lock,
                              uint64_t token, void *ud);

/* Sends lock.acquire and returns at once; cb runs from coord_dispatch,
 * coord_wait or any blocking call on c (see event-loop mode).  *rid_out
 * (may be NULL) receives the request id: coord_cancel(c, rid) withdraws a
 * request still waiting (cb then gets COORD_EABORTED; after a grant the
 * cancel has no effect and the lock must be released).  cb may be NULL:
 * a granted lock is then held until c closes.  Returns 0, or a negative
 * code, in which case cb is never called. */
COORD_API int coord_lock_acquire_async(coord_t *c, const void *name, size_t name_len,
                                       const coord_lock_opts *o, coord_lock_cb cb,
                                       void *ud, uint64_t *rid_out);

/* Releases a lock of c.  Returns 0 once the release took effect (the next
 * request of anyone sees the name free of it), COORD_EUNKNOWN_LOCK when c
 * does not hold it (already released, or lost: stolen or expired). */
COORD_API int coord_lock_release(coord_t *c, uint64_t lock);

/* Sets the lock's lease to lease_ms from now (0: no lease any more).
 * COORD_EUNKNOWN_LOCK when the lock was lost. */
COORD_API int coord_lock_renew(coord_t *c, uint64_t lock, uint64_t lease_ms);

/* lock.query: on 0, *reply (the caller frees it with coord_reply_free)
 * holds the arrays "held" (in grant order) and "pending" (in request
 * order), read with coord_map_array_len/coord_map_array_at on
 * coord_reply_map(*reply).  Each entry has name (str), mode ("exclusive" or
 * "shared"), conn, client, pid, age_ms, and for held ones token and lock;
 * "truncated": true when the broker cut the lists at its frame limit.
 * Only the locks of c's scope are listed. */
COORD_API int coord_lock_query(coord_t *c, coord_reply_t **reply);

/* Losing a lock.  When the broker takes a held lock away (another
 * connection stole it, or its lease expired), c receives the event
 *     {ev: "lock.lost", lock, name, reason: "stolen"|"expired", token}
 * like any event: to the callback of coord_set_event_cb, else queued for
 * coord_next_event; coord_reply_event(ev) is "lock.lost".  Events are
 * only read while c is used (a blocking call, coord_dispatch, coord_wait,
 * coord_next_event): poll coord_fd to notice one promptly.  The lock is
 * already gone when the event arrives; releasing it then gives
 * COORD_EUNKNOWN_LOCK.  A closed connection (COORD_ECLOSED from any call)
 * means every lock of c is gone too, without an event. */
typedef struct coord_lock_lost {
    uint64_t lock;              /* the id coord_lock_acquire returned */
    uint64_t token;             /* its fencing token (0 if the broker sent none) */
    const char *name;           /* points into the event: not NUL-terminated */
    size_t name_len;
    const char *reason;         /* "stolen", "expired", ...: points into the
                                   event, not NUL-terminated ("" if absent) */
    size_t reason_len;
} coord_lock_lost;

/* True when ev is a lock.lost event; then fills *out (may be NULL), whose
 * pointers are valid as long as ev. */
COORD_API bool coord_event_lock_lost(const coord_reply_t *ev, coord_lock_lost *out);

/* ---- reading replies and events ---- */

/* Frees r, closing its descriptor if it has one the caller did not take. */
COORD_API void coord_reply_free(coord_reply_t *r);
/* The descriptor that came with r (a reply with result_fd: a result by
 * reference, read-only, offset 0), now the caller's to close; -1 when r
 * has none or it was taken already. */
COORD_API int coord_reply_take_fd(coord_reply_t *r);
/* Event name ("lock.lost"), or NULL for a reply.  Owned by r, NUL-ended. */
COORD_API const char *coord_reply_event(const coord_reply_t *r);
/* The top-level map of r. */
COORD_API coord_map coord_reply_map(const coord_reply_t *r);

/* Getters return true when key is present with that type.  Strings and
 * bins point into the reply: not NUL-terminated, valid while it lives. */
COORD_API bool coord_map_uint(coord_map m, const char *key, uint64_t *out);
COORD_API bool coord_map_bool(coord_map m, const char *key, bool *out);
COORD_API bool coord_map_str(coord_map m, const char *key, const char **s, size_t *n);
COORD_API bool coord_map_bin(coord_map m, const char *key, const void **p, size_t *n);
COORD_API bool coord_map_map(coord_map m, const char *key, coord_map *out);
/* A number of any MessagePack kind (float, uint, negative int) as a
 * double: stats' latency figures (p50_ms...). */
COORD_API bool coord_map_double(coord_map m, const char *key, double *out);
/* Arrays of maps (lock.query's held, record.list's records, ...). */
COORD_API size_t coord_map_array_len(coord_map m, const char *key);
COORD_API bool coord_map_array_at(coord_map m, const char *key, size_t i, coord_map *out);

/* Walking a map in the order the broker sent it (for generic printing:
 * coordctl stats, watch). */
typedef enum coord_type {
    COORD_TYPE_NONE = 0,   /* no such entry */
    COORD_TYPE_NIL,
    COORD_TYPE_BOOL,
    COORD_TYPE_UINT,
    COORD_TYPE_INT,        /* negative integer */
    COORD_TYPE_FLOAT,
    COORD_TYPE_STR,
    COORD_TYPE_BIN,
    COORD_TYPE_ARRAY,
    COORD_TYPE_MAP,
    COORD_TYPE_OTHER       /* MessagePack ext */
} coord_type;
COORD_API size_t coord_map_size(coord_map m);
/* Entry i (0 <= i < coord_map_size): key and keylen (may be NULL) get its
 * key, which points into the reply and is not NUL-terminated.  Returns the
 * type of its value, COORD_TYPE_NONE when i is out of range. */
COORD_API coord_type coord_map_entry(coord_map m, size_t i, const char **key,
                                     size_t *keylen);
/* Entry i's value when it is a map. */
COORD_API bool coord_map_map_at(coord_map m, size_t i, coord_map *out);
/* Entry i's value as JSON (as coord_map_json does it): "12", "true",
 * "\"text\"".  The caller frees it with free().  NULL: out of range or no
 * memory. */
COORD_API char *coord_map_value_json(coord_map m, size_t i);

/* m as one line of JSON, in UTF-8: a str that is valid UTF-8 is a JSON
 * string (escaped only where JSON requires: quote, backslash, controls);
 * a bin, and a str that is not UTF-8, is the object {"base64": "<standard
 * base64, padded>"} of its bytes; a map key that is not UTF-8 has each such
 * byte as \u00XX.  The caller frees the string with free().  NULL: no
 * memory. */
COORD_API char *coord_map_json(coord_map m);

/* Bytes p[0..n) as one JSON value by the rule of coord_map_json: a string
 * when they are valid UTF-8, else {"base64": "..."}.  The caller frees it
 * with free(); NULL: no memory (or p NULL with n > 0). */
COORD_API char *coord_json_text(const void *p, size_t n);

/* ---- single-flight and completion records (see the protocol's
 * "Single-flight" and "Completion records"; client/flights.c) ----
 *
 * Per (scope, key) one owner runs the work at a time; whoever joins
 * meanwhile is a follower and gets the owner's result.  A follower that
 * leaves (coord_cancel of its join, a closed connection) never aborts the
 * owner.  An owner that disconnects or passes owner_ttl_ms is replaced: the
 * fence advances, the longest-waiting follower is promoted (its join is
 * answered with role OWNER) and the old owner's complete/fail is refused
 * with COORD_EFENCED.
 *
 * Keys are any bytes (NUL and the empty key included), at most 1024
 * (COORD_EINVALID_OPTIONS).  A result kept as a completion record (keep_ms
 * > 0) needs scope and key together within 480 bytes, else complete/fail
 * answer COORD_ETOO_LARGE.  Keys and prefixes are copied into the request:
 * the caller keeps ownership. */

/* coord_once's policy when the broker cannot be reached: c is NULL
 * (coord_connect failed: no broker, autostart failed or off) or the
 * connection drops before the outcome is settled; and when a follower's
 * wait (wait_ms) passes without a result.  Only for work that is safe to
 * repeat (idempotent reads): others may run it at the same time. */
typedef enum coord_fallback {
    COORD_FALLBACK_FAIL = 0,   /* the default: return COORD_ECONNECT (c NULL),
                                  COORD_ECLOSED (dropped) or COORD_ETIMEOUT */
    COORD_FALLBACK_RUN,        /* run the work here without coordination and
                                  say so: out->fallback, out->fallback_cause */
    COORD_FALLBACK_RETRY,      /* unreachable: as RUN.  A follower's timeout:
                                  join once more (out->retried), owning the
                                  flight if its owner is gone by now, else
                                  waiting wait_ms again; a second timeout
                                  runs the work here as RUN does */
} coord_fallback;

/* Why coord_once ran the work without coordination (out->fallback). */
typedef enum coord_fallback_cause {
    COORD_FALLBACK_CAUSE_NONE = 0,
    COORD_FALLBACK_CAUSE_UNREACHABLE,  /* no broker, or the connection dropped */
    COORD_FALLBACK_CAUSE_TIMEOUT,      /* a follower's wait_ms passed */
} coord_fallback_cause;

typedef struct coord_flight_opts {
    uint64_t owner_ttl_ms;     /* the owner's lease: past it the owner gets the
                                  event flight.abort "deadline", its result is
                                  fenced and a follower takes over.
                                  0: the broker's default, 30000 */
    uint64_t wait_ms;          /* a follower gives up after this (COORD_ETIMEOUT).
                                  0: the broker's default, owner_ttl_ms */
    uint64_t max_age_ms;       /* accept a stored completion record no older
                                  than this instead of running the work (only
                                  when no flight runs). 0: never */
    bool abort_when_orphaned;  /* owner: get flight.abort "orphaned" when its
                                  last follower leaves */
    uint64_t stale_ms;         /* stale-while-revalidate: a record older than
                                  max_age_ms but younger than max_age_ms +
                                  stale_ms is answered at once (RESULT with
                                  stale), and the first such caller while no
                                  flight runs owns its revalidation (OWNER with
                                  revalidation).  Needs max_age_ms; the record
                                  must be kept that long (keep_ms >= max_age_ms
                                  + stale_ms).  0: no stale results */
    bool notify;               /* served stale: get the event flight.updated
                                  when that revalidation ends */
    coord_fallback fallback;   /* coord_once only: what to do when the broker
                                  cannot be reached or a follower's wait
                                  passes (see coord_once) */
    bool supersede;            /* the running owner's work is known stale:
                                  take the flight over (it gets flight.abort
                                  "superseded", its late result FENCED; the
                                  followers get ours).  A flight already
                                  completing is followed instead */
    uint64_t priority;         /* a join with a higher priority than the
                                  running owner's supersedes it.  0: none */
    const char *version;       /* the version of the code that runs the work
                                  (NUL-terminated, at most 64 bytes; NULL:
                                  none); kept in the flight and its record */
    bool own_version;          /* a flight of another version runs: start
                                  one of our own beside it (and never take a
                                  record of another version) instead of
                                  following it (compatible versions) */
} coord_flight_opts;

typedef enum coord_flight_role {
    COORD_FLIGHT_NONE = 0,     /* no outcome (after an error, or cleared) */
    COORD_FLIGHT_OWNER,        /* you run the work, then complete or fail
                                  (flight, fence) */
    COORD_FLIGHT_RESULT,       /* the owner's result */
    COORD_FLIGHT_FAILED,       /* the owner reported a failure */
} coord_flight_role;

/* The outcome of a join (or of coord_once).  The pointers are malloc'd and
 * belong to the struct: free them with coord_flight_clear.  Copying the
 * struct moves that ownership (clear only one of the copies). */
typedef struct coord_flight {
    coord_flight_role role;
    uint64_t flight;           /* OWNER: the id for complete/fail (and for
                                  matching flight.abort events); coord_once
                                  sets it when this call ran the work; else 0 */
    uint64_t fence;            /* OWNER: pass it to complete/fail.  RESULT,
                                  FAILED: the fence of the owner that produced
                                  the outcome (0 if the broker sent none) */
    /* OWNER */
    bool bypass;               /* the kill switch is on for the key's prefix
                                  (coord_flight_disable): no deduplication,
                                  others may run the work at the same time,
                                  and complete writes no record */
    bool revalidation;         /* this flight revalidates a stale record,
                                  whose copy is in stale_*; the callers
                                  meanwhile are served it.  A failure leaves
                                  the record in place */
    void *stale_result;        /* revalidation: the stale record's bytes plus
                                  a NUL (never NULL then); else NULL */
    size_t stale_result_len;
    uint64_t stale_age_ms;     /* revalidation: the stale record's age */
    uint64_t stale_fence;      /* revalidation: the fence that wrote it */
    uint64_t superseded;       /* we took the flight over (supersede,
                                  priority): the old owner's fence; else 0 */
    char *version;             /* OWNER: the flight's version (the one it is
                                  found under: a promoted or superseding
                                  caller of another version runs it), a
                                  NUL-terminated copy; NULL when none */
    /* RESULT */
    void *result;              /* the result bytes, with one NUL byte after
                                  them (so text can be used as a C string);
                                  never NULL for RESULT, even when empty,
                                  unless by_ref */
    size_t result_len;
    bool by_ref;               /* a result by reference: result is NULL and
                                  result_fd a read-only descriptor of its
                                  result_len bytes (offset 0; read or mmap
                                  it), owned by the struct (coord_flight_clear
                                  closes it): take it by setting result_fd to
                                  -1, or load the bytes with
                                  coord_flight_result_load */
    int result_fd;
    uint64_t age_ms;           /* age of a record; 0 for a live result */
    bool from_record;          /* source "record": read from a completion
                                  record (max_age_ms); false: "live" */
    bool stale;                /* from a record past max_age_ms, within
                                  stale_ms (answered at once) */
    bool revalidating;         /* stale: a revalidation flight runs now (with
                                  notify, flight.updated tells when it ends);
                                  false: none runs (a backoff is active) */
    /* FAILED */
    char *error_code;          /* NUL-terminated copies ("" when absent; bytes */
    char *error_message;       /* after an embedded NUL are not kept) */
    bool retryable;
    uint64_t retry_after_ms;   /* the owner asked callers to wait this long
                                  (a rate-limited upstream); from_backoff:
                                  what is left of it.  0: none */
    bool from_backoff;         /* source "backoff": nobody ran the work; a
                                  recent failure's retry_after_ms is still
                                  running for the key */
    /* coord_once only */
    bool ran;                  /* this call ran the work function */
    bool fallback;             /* the broker could not be reached and the
                                  policy was COORD_FALLBACK_RUN: the outcome
                                  is this process's own work (ran is true),
                                  uncoordinated and shared with nobody */
    coord_fallback_cause fallback_cause;  /* why (fallback) */
    bool retried;              /* COORD_FALLBACK_RETRY: a follower's wait
                                  passed and we joined again */
} coord_flight;

/* Frees what f owns and zeroes it (role NONE).  NULL and an already cleared
 * (or zeroed) struct are fine. */
COORD_API void coord_flight_clear(coord_flight *f);

/* A RESULT by reference (by_ref) read into memory: result gets its bytes
 * (plus a NUL), the descriptor is closed, by_ref becomes false.  0 (also
 * when f is no result by reference), COORD_ENOMEM or COORD_ESYS (errno). */
COORD_API int coord_flight_result_load(coord_flight *f);

/* flight.join, blocking until the caller's role is settled: at once for an
 * owner, a fresh (or, with stale_ms, stale) record or an active backoff,
 * after the owner finished for a follower, or when promoted.  o may be
 * NULL (all defaults; o->fallback is not used here).  Returns
 *   0          *out filled: role OWNER (flight, fence; bypass, revalidation),
 *              RESULT (stale, revalidating) or FAILED (from_backoff,
 *              retry_after_ms);
 *   negative   COORD_ETIMEOUT (wait_ms passed), COORD_EABORTED (cancelled),
 *              COORD_EINVALID_OPTIONS (key over 1024 bytes, owner_ttl_ms or
 *              wait_ms over 86400000), connection errors...; *out is then
 *              zeroed.
 * *out is overwritten, not freed: clear a previous outcome first.  key may
 * be NULL only when key_len is 0. */
COORD_API int coord_flight_join(coord_t *c, const void *key, size_t key_len,
                                const coord_flight_opts *o, coord_flight *out);

/* Called once with the outcome of coord_flight_join_async: status as the
 * return value of coord_flight_join (COORD_EABORTED after coord_cancel,
 * COORD_ECLOSED when c closed first).  f is never NULL; it is owned by the
 * library and cleared after the callback returns: to keep the outcome,
 * copy *f and zero *f (memset) inside the callback. */
typedef void (*coord_flight_cb)(coord_t *c, int status, coord_flight *f, void *ud);

/* Sends flight.join and returns at once (see event-loop mode); cb runs from
 * coord_dispatch, coord_wait or any blocking call on c.  *rid_out (may be
 * NULL) is the request id: coord_cancel(c, rid) makes a waiting follower
 * leave (cb gets COORD_EABORTED; the owner and the other followers are not
 * affected).  A join already answered with OWNER is not undone by a
 * cancel: complete or fail it, or close c.  cb may be NULL (the outcome is
 * dropped; an owner role then stays with c until it closes or the lease
 * passes).  Returns 0, or a negative code and cb is never called. */
COORD_API int coord_flight_join_async(coord_t *c, const void *key, size_t key_len,
                                      const coord_flight_opts *o, coord_flight_cb cb,
                                      void *ud, uint64_t *rid_out);

/* flight.complete: hands result[0..len) to every follower (result may be
 * NULL when len is 0; it is copied).  keep_ms > 0 also stores it as a
 * completion record for that long (at most 366 days, else
 * COORD_EINVALID_OPTIONS), durably before any follower is answered.
 * *delivered (may be NULL) gets the number of followers answered.
 * COORD_EFENCED: the flight is no longer ours (lease passed, or promoted
 * away): nobody got this result.  COORD_ETOO_LARGE: the result does not fit
 * a frame (about max_frame - 1 KiB), or the key cannot be stored as a
 * record; the flight is still ours then (complete again, or fail). */
COORD_API int coord_flight_complete(coord_t *c, uint64_t flight, uint64_t fence,
                                    const void *result, size_t len, uint64_t keep_ms,
                                    uint64_t *delivered);

/* A new memfd holding p[0..len), sealed (F_SEAL_WRITE, F_SEAL_SHRINK,
 * F_SEAL_GROW, F_SEAL_SEAL): what coord_flight_complete_fd takes.  Returns
 * the descriptor (the caller closes it), or COORD_EINVAL / COORD_ESYS. */
COORD_API int coord_memfd_sealed(const void *p, size_t len);

/* flight.complete by reference: fd, a memfd sealed against writing,
 * shrinking and growing (coord_memfd_sealed), is passed to the broker
 * (SCM_RIGHTS; the caller keeps and closes its own fd), and each follower
 * gets a descriptor of the same bytes instead of a copy through the
 * socket.  Its size (fstat) may reach coord_max_ref_bytes rather than a
 * frame's.  keep_ms > 0 also keeps it (a file in the broker's data dir)
 * as a record, durably before anyone is answered.  Errors as
 * coord_flight_complete, and COORD_EINVALID_OPTIONS (fd is no sealed
 * memfd), COORD_ETOO_LARGE (past max_ref_bytes), COORD_EUNSUPPORTED (the
 * broker takes no descriptors), COORD_ESYS (fstat failed). */
COORD_API int coord_flight_complete_fd(coord_t *c, uint64_t flight, uint64_t fence,
                                       int fd, uint64_t keep_ms, uint64_t *delivered);

/* flight.fail: every follower gets role FAILED with code (required, at most
 * 256 bytes: NULL sends "FAILED"), message (NULL: "", at most 4096) and
 * retryable.  keep_ms as for complete (a retryable failure is stored but
 * never served to a join).  Errors as coord_flight_complete.  The same as
 * coord_flight_fail_with without retry_after_ms. */
COORD_API int coord_flight_fail(coord_t *c, uint64_t flight, uint64_t fence,
                                const char *code, const char *message,
                                bool retryable, uint64_t keep_ms);

/* A failure for coord_flight_fail_with.  The strings are only read (the
 * caller keeps them); zero-initialise it for the defaults. */
typedef struct coord_failure {
    const char *code;          /* NULL: "FAILED"; at most 256 bytes */
    const char *message;       /* NULL: ""; at most 4096 bytes */
    bool retryable;
    uint64_t keep_ms;          /* as for coord_flight_fail */
    uint64_t retry_after_ms;   /* with retryable (an upstream said "429, retry
                                  after N"): followers get it, and for that
                                  long every new join of the key gets FAILED
                                  from_backoff at once instead of an owner.
                                  In the broker's memory only (a restart
                                  forgets it).  0: no backoff */
} coord_failure;

/* flight.fail with every field of *f (NULL: all defaults).  Errors as
 * coord_flight_complete. */
COORD_API int coord_flight_fail_with(coord_t *c, uint64_t flight, uint64_t fence,
                                     const coord_failure *f);

/* flight.list: on 0, *reply (free with coord_reply_free) holds the array
 * "flights" of the running flights of c's scope, each {key, flight, fence,
 * owner_conn, owner_pid, followers, age_ms, completing}, and "truncated":
 * true when the broker cut the list at its frame limit. */
COORD_API int coord_flight_list(coord_t *c, coord_reply_t **reply);

/* The event {ev: "flight.abort", flight, reason: "deadline"|"orphaned",
 * fence} tells an owner to stop: past the deadline its result will be
 * FENCED anyway; "orphaned" (abort_when_orphaned) means nobody waits any
 * more, and the flight is still its own to complete or fail.  It comes like
 * any event (coord_set_event_cb or coord_next_event). */
typedef struct coord_flight_abort {
    uint64_t flight;
    uint64_t fence;            /* the flight's fence when it was sent (0 if absent) */
    const char *reason;        /* points into the event, not NUL-terminated */
    size_t reason_len;
} coord_flight_abort;

/* True when ev is a flight.abort event; then fills *out (may be NULL),
 * whose pointers are valid as long as ev. */
COORD_API bool coord_event_flight_abort(const coord_reply_t *ev, coord_flight_abort *out);

/* The event {ev: "flight.updated", key, status: "completed"|"failed", fence}
 * reaches a caller served a stale result with notify when that
 * revalidation ends (the revalidation owner gets none).  It carries no
 * result: read the new record (coord_record_get) or join again.  It comes
 * like any event (coord_set_event_cb or coord_next_event). */
typedef struct coord_flight_updated {
    const char *key;           /* points into the event, not NUL-terminated */
    size_t key_len;
    bool failed;               /* status "failed"; false: "completed" */
    uint64_t fence;            /* of the revalidation flight that ended */
} coord_flight_updated;

/* True when ev is a flight.updated event; then fills *out (may be NULL),
 * whose pointers are valid as long as ev. */
COORD_API bool coord_event_flight_updated(const coord_reply_t *ev,
                                          coord_flight_updated *out);

/* The single-flight kill switch, per scope (durable: it survives a broker
 * restart; announced on "-flights" as what disabled|enabled).  While a
 * prefix is disabled, every new join of a key starting with it gets OWNER
 * with bypass at once: no deduplication, no record read, and its complete
 * writes no record.  The empty prefix covers every key of the scope.
 * Flights already running are not affected.  prefix is copied (at most
 * 1024 bytes; NULL with len 0 is ""). */
COORD_API int coord_flight_disable(coord_t *c, const void *prefix, size_t len);
COORD_API int coord_flight_enable(coord_t *c, const void *prefix, size_t len);

/* A disabled prefix: bytes inside the block of coord_flight_disabled. */
typedef struct coord_prefix {
    const char *p;             /* any bytes, with a NUL byte after the len */
    size_t len;
} coord_prefix;

/* flight.disabled: the disabled prefixes of c's scope.  On 0, *prefixes is
 * one malloc'd block holding the array of *n entries and their bytes (the
 * caller frees it once with free(); NULL when *n is 0).  On errors
 * *prefixes is NULL and *n 0. */
COORD_API int coord_flight_disabled(coord_t *c, coord_prefix **prefixes, size_t *n);

/* The work of coord_once, run by the owner only.  On entry *result, *len,
 * *err_code and *err_msg are NULL/0.  Return
 *   COORD_WORK_OK         *result: malloc'd result bytes, *len their count
 *                         (*result may stay NULL when *len is 0);
 *   COORD_WORK_FAILED     a failure every follower gets (role FAILED,
 *                         retryable false; kept as a record with keep_ms);
 *   COORD_WORK_RETRYABLE  the same with retryable true (never kept);
 * any other value counts as COORD_WORK_FAILED.  On failure *err_code and
 * *err_msg may be set to malloc'd NUL-terminated strings (defaults
 * "WORK_FAILED" and ""; the code at most 256 bytes, the message 4096, both
 * cut beyond).  Everything set is taken over by coord_once (a *result set
 * together with a failure is freed).  The function may use c (to watch for
 * flight.abort events, say) but must not close it.  A work function that
 * was told to back off (a rate-limited upstream) calls
 * coord_work_retry_after before returning COORD_WORK_RETRYABLE. */
#define COORD_WORK_OK 0
#define COORD_WORK_FAILED 1
#define COORD_WORK_RETRYABLE 2
typedef int (*coord_work_fn)(void *ud, void **result, size_t *len,
                             char **err_code, char **err_msg);

/* Called by a work function of coord_once, in coord_once's thread, before
 * it returns COORD_WORK_RETRYABLE: the failure carries retry_after_ms (see
 * coord_failure), so the next callers get FAILED from_backoff at once
 * instead of running work again.  Ignored outside a work function, after
 * another return value, and when coord_once fell back to running the work
 * without the broker.  Thread-local; the last call wins. */
COORD_API void coord_work_retry_after(uint64_t retry_after_ms);

/* Single-flight in one call: joins key; as owner (at once, or promoted
 * after waiting because the owner died or overran) runs work and completes
 * the flight with its result (kept as a record for keep_ms, 0: none) or
 * fails it; as follower returns the owner's result.  With o->max_age_ms a
 * fresh enough record is returned without running work.  With
 * o->stale_ms a stale record is returned at once (out->stale) while one
 * caller, the revalidation's owner, runs work (out->revalidation, and the
 * stale copy in out->stale_*; its failure is never kept, so the stale
 * record stays).  An active backoff returns FAILED from_backoff without
 * running work.  With the kill switch on (bypass) work runs here, and its
 * result is delivered but never kept.
 *
 * Fallback (o->fallback): when the broker cannot be reached, c is NULL (the
 * caller's coord_connect failed) or the connection drops before the
 * outcome is settled (a follower waiting, our own join or complete),
 * COORD_FALLBACK_FAIL returns COORD_ECONNECT (c NULL) or COORD_ECLOSED;
 * COORD_FALLBACK_RUN runs work here, once, without coordination (unless it
 * already ran as our flight: its outcome is then kept) and returns 0 with
 * out->fallback and out->ran set, fallback_cause UNREACHABLE, flight and
 * fence 0.  When a follower's wait_ms passes without a result,
 * COORD_FALLBACK_FAIL returns COORD_ETIMEOUT, COORD_FALLBACK_RUN runs work
 * here the same way (fallback_cause TIMEOUT) and COORD_FALLBACK_RETRY joins
 * once more first (out->retried: owner if the old owner is gone, else a
 * follower for another wait_ms), then runs it here after a second timeout.
 * Only for safe reads: other processes may run it at the same time.
 * Nothing else falls back (broker refusals, COORD_EFENCED).  Returns
 *   0                 *out holds the outcome: role RESULT (ours when
 *                     out->ran, else the owner's or a record's) or FAILED
 *                     (ours, the owner's or a backoff's: see retryable);
 *   COORD_EFENCED     work ran but its outcome was refused: our lease
 *                     (owner_ttl_ms) passed and another caller took over,
 *                     or a superseding join did (coord_error_reason
 *                     "superseded");
 *   COORD_ETIMEOUT    a follower waited wait_ms without a result;
 *   COORD_ETOO_LARGE  work's result does not fit a frame, nor (larger than
 *                     a frame) coord_max_ref_bytes: a result larger than a
 *                     frame goes by reference (a sealed memfd) when the
 *                     broker takes descriptors (the followers get a FAILED
 *                     "TOO_LARGE" otherwise); a key too long to keep a record
 *                     is not an error: the result is then delivered unkept;
 *   COORD_ECONNECT    c is NULL and the policy is COORD_FALLBACK_FAIL;
 *   other negatives   as coord_flight_join, or connection errors (a lost
 *                     connection while we own the flight lets a follower
 *                     take over).
 * On a non-zero return *out is zeroed (role NONE).  *out is overwritten,
 * not freed.  work must not be NULL; c may be NULL (see fallback). */
COORD_API int coord_once(coord_t *c, const void *key, size_t key_len,
                         const coord_flight_opts *o, uint64_t keep_ms,
                         coord_work_fn work, void *ud, coord_flight *out);

/* A completion record (record.get).  Pointers malloc'd, owned by the
 * struct: free with coord_record_clear. */
typedef struct coord_record {
    bool failed;               /* status "failed"; false: "completed" */
    uint64_t fence;            /* of the owner that wrote it */
    uint64_t created_ms;       /* wall clock, ms since the Unix epoch */
    uint64_t expires_ms;
    void *result;              /* completed: the bytes plus a NUL after them
                                  (NULL when by_ref) */
    size_t result_len;
    bool by_ref;               /* completed by reference: result_fd is a
                                  read-only descriptor of result_len bytes,
                                  owned by the struct (coord_record_clear
                                  closes it; take it by setting -1) */
    int result_fd;
    char *error_code;          /* failed: NUL-terminated copies */
    char *error_message;
    bool retryable;
    /* the owner that wrote it (its hello) and the version its join
     * carried: NUL-terminated copies, "" when absent (records of an older
     * broker have none) */
    char *client;
    uint64_t pid;
    char *instance;
    char *version;
} coord_record;

/* Frees what r owns and zeroes it.  NULL is fine. */
COORD_API void coord_record_clear(coord_record *r);
/* As coord_flight_result_load, for a record read by reference. */
COORD_API int coord_record_result_load(coord_record *r);

/* record.get of key in c's scope.  0 and *out (overwritten, not freed),
 * COORD_ENOT_FOUND (none, or expired), COORD_ETOO_LARGE (scope and key over
 * 480 bytes: no record can exist), ...; on errors *out is zeroed. */
COORD_API int coord_record_get(coord_t *c, const void *key, size_t key_len,
                               coord_record *out);

/* record.list: on 0, *reply (free with coord_reply_free) holds the array
 * "records" of c's scope whose keys start with prefix (NULL/0: all), in key
 * order, at most limit of them (0: the broker's default 100; it caps at
 * 1000), each {key, status, fence, size, created_ms, expires_ms}, and
 * "truncated": true when more were left out. */
COORD_API int coord_record_list(coord_t *c, const void *prefix, size_t prefix_len,
                                unsigned limit, coord_reply_t **reply);

/* record.purge: deletes c's scope's records whose keys start with prefix
 * (NULL/0: all of the scope; other scopes are never touched), and ends the
 * flights of those keys (their owners' late complete/fail is refused
 * COORD_EFENCED with coord_error_reason "purged"; their followers fail
 * COORD_EABORTED, reason "purged").  *deleted (may be NULL) gets how many
 * records; coord_record_purge_counts also *fenced, how many flights. */
COORD_API int coord_record_purge(coord_t *c, const void *prefix, size_t prefix_len,
                                 uint64_t *deleted);
COORD_API int coord_record_purge_counts(coord_t *c, const void *prefix, size_t prefix_len,
                                        uint64_t *deleted, uint64_t *fenced);

/* ---- leadership and the fence ledger (see the protocol's "Leadership
 * and the fence ledger"; client/leader.c, client/leader-term.c,
 * client/leader-outbox.c) ----
 *
 * A workstream has at most one live leader.  Each election hands out a new
 * generation, stored durably before the campaign is answered and never
 * issued twice.  Generations increase but are not consecutive (they come
 * from the broker's id allocator).  A leader that loses its lease (not
 * renewed within lease_ms), disconnects, is stolen from, disabled or held
 * past its max hold is fenced at once: its renew, resign, claim and commit
 * get COORD_EFENCED.  Leadership belongs to the connection: closing c ends
 * it (without an event).  Claims, commits, abandons, drains and checks
 * carry the generation and are accepted from any connection of the same
 * scope while that generation is live (a helper process of the leader may
 * commit with the leader's generation).
 *
 * Workstreams are any bytes, at most 200 together with the scope
 * (COORD_EINVALID_OPTIONS); a NULL pointer is fine with length 0.  Every
 * string and byte argument is copied into the request: the caller keeps
 * ownership of all of them.
 *
 * Leadership never falls back by itself: without a broker there is no
 * leader (every call returns COORD_ECONNECT or COORD_ECLOSED), and a
 * process must never act as leader on its own: that is how two leaders
 * write at once.  What a caller may do instead is the workstream's
 * fallback, read from its descriptor file (coord_leader_fallback, below):
 * run read-only with no generation, or, in the one instance the user
 * started so, alone.  Only coord_once's safe reads may run uncoordinated
 * (COORD_FALLBACK_RUN). */

/* The broker's leadership lease when a campaign names none (ms).  Short
 * on purpose: a frozen or stalled leader is replaced within it (under 2 s
 * with renewals every lease/3), and a leader stalled longer than it loses
 * its term (its late writes are FENCED).  Ask for a longer lease_ms when a
 * term must survive long stalls. */
#define COORD_LEADER_DEFAULT_LEASE_MS 1500

typedef struct coord_leader_opts {
    uint64_t lease_ms;    /* renew within this or lose leadership
                             ("expired"); 0: the broker's default,
                             COORD_LEADER_DEFAULT_LEASE_MS (1500); renew
                             every lease_ms / 3;
                             at most one day.  A workstream's max hold caps
                             it (see coord_leader_term.lease_ms) */
    bool if_available;    /* never wait: *granted false when someone leads */
    bool steal;           /* take leadership from the current leader now
                             (it gets leader.lost "stolen", or "incident"
                             with incident); under the workstream's steal
                             policy (COORD_EPOLICY) */
    uint64_t timeout_ms;  /* give up waiting after this (COORD_ETIMEOUT);
                             0: wait forever.  Not with steal or
                             if_available (COORD_EINVALID_OPTIONS) */
    /* Added with protocol pins and incident takeovers; zero-initialised
     * callers keep the old behaviour.  Both strings are NUL-terminated, only read (copied into
     * the request), NULL: not sent. */
    const char *protocol; /* "name@N": the version of the caller's protocol;
                             a workstream with a pinned protocol refuses an
                             older one (COORD_EPROTOCOL_PINNED) */
    const char *incident; /* 1..256 bytes: an incident takeover, granted
                             even while the workstream is disabled; with
                             steal, the only steal under "incident-only" */
    /* Added with descriptor capabilities (NULL: none) */
    const char *capabilities; /* "a,b": what the caller implements; a
                             workstream that pins a capability the list
                             lacks refuses the campaign like an old
                             protocol (COORD_EPROTOCOL_PINNED) */
} coord_leader_opts;

/* leader.campaign, blocking until elected (or refused).  o may be NULL (wait
 * forever, default lease).  Returns
 *   0          *granted true and *generation the new generation; or, only
 *              with if_available, *granted false (someone else leads);
 *   negative   COORD_EDISABLED (the workstream is disabled, and no
 *              incident), COORD_EPROTOCOL_PINNED, COORD_EPOLICY,
 *              COORD_ETIMEOUT, COORD_EABORTED, COORD_EINVALID_OPTIONS (also
 *              when c already leads ws), connection errors...
 * generation and granted may be NULL; they are 0/false unless elected.
 * The same as coord_leader_campaign_term without the term. */
COORD_API int coord_leader_campaign(coord_t *c, const void *ws, size_t ws_len,
                                    const coord_leader_opts *o, uint64_t *generation,
                                    bool *granted);

/* ---- the state of a client's own campaign ----
 *
 * FOLLOWER (not campaigning) -> REQUESTING (the campaign waits) -> LEADER
 * -> DRAINING (it announced that it is finishing) -> RELEASED (the term is
 * over: resigned, lost or fenced); a campaign cancelled (or aborted by the
 * broker) while it waited is ABORTED.  The library tracks this in a
 * coord_leader_term, a plain struct of the caller's (no pointers inside:
 * copy it freely; zeroed it is FOLLOWER): the campaign calls below set it,
 * coord_leader_term_event applies the events, coord_leader_term_drain and
 * coord_leader_term_resign end it.  leader.info's "state" is another thing:
 * it describes the workstream ("leading", "draining", "disabled",
 * "idle"). */
typedef enum coord_leader_state {
    COORD_LEADER_FOLLOWER = 0,
    COORD_LEADER_REQUESTING,
    COORD_LEADER_LEADER,
    COORD_LEADER_DRAINING,
    COORD_LEADER_RELEASED,
    COORD_LEADER_ABORTED,
} coord_leader_state;

/* "FOLLOWER", "REQUESTING", "LEADER", "DRAINING", "RELEASED", "ABORTED";
 * "UNKNOWN" for any other value.  A static string. */
COORD_API const char *coord_leader_state_name(coord_leader_state s);

/* The longest mode name ("read-only") and its NUL. */
#define COORD_LEADER_MODE_SIZE 16

typedef struct coord_leader_term {
    coord_leader_state state;
    uint64_t generation;        /* LEADER, DRAINING, RELEASED: the term's */
    uint64_t lease_ms;          /* the lease granted (capped by a max hold):
                                   renew well within it */
    char mode[COORD_LEADER_MODE_SIZE]; /* "active", "shadow", "read-only"
                                   (from the grant, then leader.mode events);
                                   "" when unknown */
    uint64_t rid;               /* REQUESTING (async): the campaign's request
                                   id, for coord_cancel */
    char end_reason[32];        /* RELEASED: "resigned", "fenced", or the
                                   leader.lost reason ("expired", "stolen",
                                   "incident", "disabled", "max_hold");
                                   DRAINING: the drain's reason ("self",
                                   "requested", "max_hold") */
} coord_leader_term;

/* leader.campaign as coord_leader_campaign, tracked in *t (overwritten;
 * REQUESTING while it waits).  On return t->state is LEADER (0 returned,
 * granted: generation, lease_ms and mode set), FOLLOWER (0 with
 * if_available and someone leads; or a refusal: the negative code is
 * returned) or ABORTED (COORD_EABORTED).  t must not be NULL. */
COORD_API int coord_leader_campaign_term(coord_t *c, const void *ws, size_t ws_len,
                                         const coord_leader_opts *o,
                                         coord_leader_term *t);

/* Called once with the outcome of coord_leader_campaign_async: status as
 * the return value of coord_leader_campaign_term (COORD_EABORTED after
 * coord_cancel, COORD_ECLOSED when c closed first); t is the caller's term,
 * already updated. */
typedef void (*coord_leader_cb)(coord_t *c, int status, coord_leader_term *t, void *ud);

/* Sends leader.campaign and returns at once (see event-loop mode): t is
 * set to REQUESTING with t->rid (also in *rid_out, may be NULL), for
 * coord_cancel.  cb (may be NULL) runs from coord_dispatch, coord_wait or
 * any blocking call on c.  t (and ud) must stay valid until then: t is
 * written just before cb runs; the library keeps no other pointer.
 * Returns 0, or a negative code (t is then FOLLOWER and cb is never
 * called).  A grant after the cancel was sent is still a grant: resign it. */
COORD_API int coord_leader_campaign_async(coord_t *c, const void *ws, size_t ws_len,
                                          const coord_leader_opts *o,
                                          coord_leader_term *t, coord_leader_cb cb,
                                          void *ud, uint64_t *rid_out);

/* Applies ev to t when it is about t's term: leader.lost (-> RELEASED with
 * the event's reason), leader.drain (-> DRAINING with its reason),
 * leader.mode (t->mode).  ws is the term's workstream (events are matched
 * by workstream and generation).  Returns true when ev concerned t; false
 * (t untouched) otherwise.  Needs no connection. */
COORD_API bool coord_leader_term_event(coord_leader_term *t, const void *ws,
                                       size_t ws_len, const coord_reply_t *ev);

/* coord_leader_drain of t's generation; on 0, t is DRAINING ("self").
 * COORD_EFENCED makes t RELEASED ("fenced"). */
COORD_API int coord_leader_term_drain(coord_t *c, const void *ws, size_t ws_len,
                                      coord_leader_term *t);
/* coord_leader_resign of t's generation; t is RELEASED afterwards: 0
 * ("resigned") or COORD_EFENCED ("fenced", it was already over).  Other
 * errors (connection) leave t as it was. */
COORD_API int coord_leader_term_resign(coord_t *c, const void *ws, size_t ws_len,
                                       coord_leader_term *t);

/* leader.renew: the lease starts again (lease_ms from now).  *lease_ms (may
 * be NULL) gets the lease (capped by a max hold).  COORD_EFENCED:
 * generation is not the live one (leadership already lost). */
COORD_API int coord_leader_renew(coord_t *c, const void *ws, size_t ws_len,
                                 uint64_t generation, uint64_t *lease_ms);

/* leader.resign: ends leadership at once (the next campaign may win).
 * COORD_EFENCED when it was already lost. */
COORD_API int coord_leader_resign(coord_t *c, const void *ws, size_t ws_len,
                                  uint64_t generation);

/* leader.drain: the term of generation (the live one) is draining: its new
 * claims get COORD_EDRAINING, commits and abandons are still accepted, and
 * resign ends it.  Sent by the leader itself it announces that it is
 * finishing; sent by another connection (an operator, with live_generation
 * from coord_leader_info) it asks the leader to drain (the leader gets
 * leader.drain "requested").  Draining twice is 0.  COORD_EFENCED: not the
 * live generation. */
COORD_API int coord_leader_drain(coord_t *c, const void *ws, size_t ws_len,
                                 uint64_t generation);

typedef struct coord_commit_result {
    bool applied;         /* stored now, by this generation */
    bool duplicate;       /* op_id was applied before: nothing stored now */
    uint64_t generation;  /* applied: the caller's generation; duplicate: the
                             generation that applied op_id (0 if not sent) */
    bool abandoned;       /* op_id was abandoned (coord_leader_abandon):
                             nothing stored, applied false */
} coord_commit_result;

/* leader.commit: in one durable transaction, if generation is the live one
 * and op_id (NUL-terminated, 1..256 bytes) was never applied nor abandoned
 * in ws: marks op_id applied (settling its claim, if any) and, with key
 * (NUL-terminated, at most 256 bytes), stores value[0..value_len) under
 * key.  key NULL: only records that the operation's external effect
 * happened (value must then be NULL/0, else COORD_EINVAL).  Returns 0 with
 * *out (may be NULL) filled, COORD_EFENCED (stale generation: nothing
 * stored), COORD_EREAD_ONLY (the workstream's mode is shadow or
 * read-only), COORD_EINVALID_OPTIONS, COORD_ETOO_LARGE (value about
 * max_frame - 1 KiB or more), COORD_ESTORAGE, ...  value may be NULL when
 * value_len is 0. */
COORD_API int coord_leader_commit(coord_t *c, const void *ws, size_t ws_len,
                                  uint64_t generation, const char *op_id,
                                  const char *key, const void *value, size_t value_len,
                                  coord_commit_result *out);

/* leader.read: the value last committed under key (NUL-terminated) in ws,
 * by any generation.  On 0, *value is a malloc'd copy of the bytes with one
 * NUL byte after them (the caller frees it with free()), *value_len (may be
 * NULL) their count, *generation (may be NULL) the generation that
 * committed it.  COORD_ENOT_FOUND when nothing was committed under key;
 * *value is then NULL. */
COORD_API int coord_leader_read(coord_t *c, const void *ws, size_t ws_len,
                                const char *key, void **value, size_t *value_len,
                                uint64_t *generation);

/* leader.info: on 0, *reply (the caller frees it with coord_reply_free)
 * holds, read with coord_map_* on coord_reply_map(*reply):
 *   generation       the last one stored (0: never elected)
 *   state            "leading", "draining", "idle" or "disabled"
 *   mode             "active", "shadow" or "read-only"
 *   disabled         bool
 *   max_hold_ms      0: none
 *   pinned_protocol  "name@N", when a protocol is defined
 * and while someone leads: live_generation, conn, client, pid,
 * lease_left_ms, leading_ms, protocol and incident (when the campaign
 * carried them), drain_reason ("self", "requested", "max_hold") while
 * draining. */
COORD_API int coord_leader_info(coord_t *c, const void *ws, size_t ws_len,
                                coord_reply_t **reply);

/* leader.disable, the incident kill switch: advances the generation
 * (fencing the live leader, which gets leader.lost "disabled") and refuses
 * campaigns without incident with COORD_EDISABLED until
 * coord_leader_enable.  Durable.  *generation (may be NULL) gets the new
 * generation. */
COORD_API int coord_leader_disable(coord_t *c, const void *ws, size_t ws_len,
                                   uint64_t *generation);
/* leader.enable: lifts coord_leader_disable (0 also when not disabled). */
COORD_API int coord_leader_enable(coord_t *c, const void *ws, size_t ws_len);

/* ---- workstream descriptors (leader.define, leader.describe) ----
 *
 * A define changes the stored descriptor field by field: a field whose bit
 * is in `set` is sent with its value here, a field whose bit is in `reset`
 * is sent as nil (back to its default: no protocol pin, no max hold, steal
 * "allowed", mode "active", no fallback, the broker's ledger), every other
 * field is omitted (keeps its stored value).  A string field in `set` whose
 * pointer is NULL is sent as nil too.  `reset` wins over `set`. */
#define COORD_DESC_PROTOCOL        (1u << 0)
#define COORD_DESC_MAX_HOLD        (1u << 1)
#define COORD_DESC_STEAL           (1u << 2)
#define COORD_DESC_MODE            (1u << 3)
#define COORD_DESC_FALLBACK        (1u << 4)
#define COORD_DESC_CANONICAL_FENCE (1u << 5)
#define COORD_DESC_LOCK_NAME       (1u << 6)
#define COORD_DESC_CAPABILITIES    (1u << 7)
#define COORD_DESC_IF_AVAILABLE    (1u << 8)

typedef struct coord_leader_define_opts {
    unsigned set;               /* COORD_DESC_* fields sent with a value */
    unsigned reset;             /* COORD_DESC_* fields sent as nil */
    /* NUL-terminated, only read (copied into the request) */
    const char *protocol;       /* "name@N": name 1..64 bytes of A-Z a-z 0-9
                                   . _ -, N 1..4294967295 */
    uint64_t max_hold_ms;       /* 0 (none) .. 86400000 */
    const char *steal;          /* "never", "incident-only", "allowed" */
    const char *mode;           /* "shadow", "read-only", "active" */
    const char *fallback;       /* 1..64 bytes, stored and returned only */
    const char *canonical_fence;/* "local", or "server-lease-ledger" (the
                                   remote ledger: coordd --ledger etcd) */
    bool force;                 /* lower (or remove) the protocol pin */
    /* Added with lock names and capabilities (their bits unset: not sent) */
    const char *lock_name;      /* the leadership lock's name: 1..200 bytes,
                                   not starting with '-'; nil: the default
                                   "-leader/WORKSTREAM" */
    const char *capabilities;   /* "a,b": every campaign must name each */
    const char *if_available;   /* "allowed", or "never" (if_available
                                   campaigns refused: COORD_EPOLICY) */
} coord_leader_define_opts;

/* A descriptor as the broker returns it.  No pointers: copy it freely.
 * Absent (nil) strings are "". */
typedef struct coord_leader_descriptor {
    char protocol[80];          /* the defined one, "" when none */
    char pinned_protocol[80];   /* the pin in force (ratchet included) */
    uint64_t max_hold_ms;       /* 0: none */
    char steal[16];             /* "never", "incident-only", "allowed" */
    char mode[COORD_LEADER_MODE_SIZE];
    char fallback[72];          /* "" when none */
    char canonical_fence[32];   /* "local"... */
    uint64_t defined_ms;        /* the last define (Unix ms); 0: never */
    /* Added with lock names and capabilities */
    char lock_name[216];        /* the leadership lock's name in force */
    char capabilities[256];     /* "a,b", "" when none */
    char if_available[16];      /* "allowed" or "never" */
} coord_leader_descriptor;

/* leader.define of ws with *o (NULL: nothing but the workstream, which
 * stores the defaults' descriptor).  On 0, *out (may be NULL) holds the
 * stored descriptor.  COORD_EPROTOCOL_PINNED: the protocol would lower or
 * remove the pin (or change its name) without force: nothing changed;
 * COORD_EINVALID_OPTIONS (the message names the field), COORD_ESTORAGE.
 * A string longer than the descriptor's arrays in the reply is
 * COORD_EPROTOCOL (the broker never sends one). */
COORD_API int coord_leader_define(coord_t *c, const void *ws, size_t ws_len,
                                  const coord_leader_define_opts *o,
                                  coord_leader_descriptor *out);

/* leader.describe: on 0, *out holds ws's descriptor; COORD_ENOT_FOUND when
 * ws was never defined (it behaves as with the defaults); *out is then
 * zeroed. */
COORD_API int coord_leader_describe(coord_t *c, const void *ws, size_t ws_len,
                                    coord_leader_descriptor *out);

/* leader.history: on 0, *reply (free with coord_reply_free) holds the
 * array "terms", newest first, at most limit (0: the broker's default 20;
 * it keeps and lowers to 100), each {generation, client, pid, instance,
 * protocol (when the campaign carried one), mode, elected_ms, ended_ms (0
 * while live, or for a term cut by a broker restart), reason (absent while
 * live: "resigned", "expired", "stolen", "incident", "disabled",
 * "max_hold", "disconnected", "restart"), incident}, and "truncated": true
 * when cut to fit a frame.  A workstream never led has no terms. */
/* ---- the workstream's fallback, when the broker cannot be reached ----
 *
 * A workstream's descriptor file, CONFIG_DIR/workstreams/WORKSTREAM.v1
 * (the file coordd --config-dir loads), says what its clients do when no
 * broker can be reached (fallback:).  coord_leader_fallback reads it
 * without a broker; the caller acts on out->action:
 *   COORD_LEADER_FAIL_CLOSED      no leader, no work (the default: no file,
 *                                 no fallback, FAIL_CLOSED, a bad file, or
 *                                 a file of another origin than scope);
 *   COORD_LEADER_READ_ONLY        READ_ONLY or SERVER_COORDINATED: run as a
 *                                 read-only follower, with no generation
 *                                 (the server drains; nothing is claimed or
 *                                 committed);
 *   COORD_LEADER_SINGLE_INSTANCE  SINGLE_INSTANCE: only an instance the user
 *                                 explicitly started in single-instance
 *                                 mode may run alone, with no generation;
 *                                 every other instance fails closed.
 * Never a lock of the caller's own making: the choice is the file's. */
typedef enum coord_leader_fallback_action {
    COORD_LEADER_FAIL_CLOSED = 0,
    COORD_LEADER_READ_ONLY,
    COORD_LEADER_SINGLE_INSTANCE,
} coord_leader_fallback_action;

typedef struct coord_leader_fallback_info {
    coord_leader_fallback_action action;
    char fallback[32];          /* the file's fallback, "" when none */
    char path[4400];            /* the file looked for */
    char reason[4800];          /* what was decided and why, for a message */
} coord_leader_fallback_info;

/* Reads ws's descriptor file under config_dir (NULL: $COORD_CONFIG_DIR,
 * else $XDG_CONFIG_HOME/coord, else ~/.config/coord) into *out, for a
 * client of scope (NULL: the default scope; the file's origin: must be
 * it).  0 (out->action says what to do), or COORD_EINVAL (a NULL out).
 * A workstream that cannot be a file name (empty, '/', NUL, a leading
 * '.') has no file: fail closed. */
COORD_API int coord_leader_fallback(const char *config_dir, const char *scope,
                                    const void *ws, size_t ws_len,
                                    coord_leader_fallback_info *out);

COORD_API int coord_leader_history(coord_t *c, const void *ws, size_t ws_len,
                                   unsigned limit, coord_reply_t **reply);

/* ---- outbox claims (leader.claim, abandon, pending; check) ----
 *
 * The outbox of a leader whose effects reach an external system: claim the
 * operation's id (stored and synced before the reply), perform the effect
 * with the op id as its idempotency key, then commit it (coord_leader_commit,
 * key NULL for an effect only) or abandon it.  A claim that an earlier
 * generation made and never settled comes back with reconcile: its effect
 * may or may not have happened; ask the external system by this same op id
 * before doing it again, never resend it under another id.  Op ids are
 * NUL-terminated, 1..256 bytes. */
typedef struct coord_claim_result {
    bool claimed;               /* the op is ours to perform now */
    bool reconcile;             /* claimed, but an earlier generation claimed
                                   it and never settled it */
    uint64_t previous_generation; /* reconcile: the earlier claim's */
    uint64_t claimed_ms;        /* reconcile: when it was claimed (Unix ms) */
    bool applied;               /* not claimed: already applied ... */
    uint64_t generation;        /* ... by this generation */
    bool abandoned;             /* not claimed: abandoned, never to be done */
} coord_claim_result;

/* leader.claim of op_id by generation (the live one).  Returns 0 with *out
 * (may be NULL) filled; COORD_EFENCED (not the live generation),
 * COORD_EREAD_ONLY (shadow or read-only mode), COORD_EDRAINING (the term is
 * draining: no new claims), COORD_ELIMIT (100,000 unsettled claims),
 * COORD_EINVALID_OPTIONS, COORD_ESTORAGE...  The same generation claiming
 * again gets claimed (without reconcile). */
COORD_API int coord_leader_claim(coord_t *c, const void *ws, size_t ws_len,
                                 uint64_t generation, const char *op_id,
                                 coord_claim_result *out);

/* leader.abandon: settles op_id as never to be done (claimed or not),
 * storing reason (NUL-terminated, 1..256 bytes).  Returns 0 with *applied
 * (may be NULL) false; or, when op_id was applied already (nothing
 * changed), 0 with *applied true and *applied_generation (may be NULL) the
 * generation that applied it.  COORD_EFENCED, COORD_EREAD_ONLY,
 * COORD_EINVALID_OPTIONS, COORD_ESTORAGE... */
COORD_API int coord_leader_abandon(coord_t *c, const void *ws, size_t ws_len,
                                   uint64_t generation, const char *op_id,
                                   const char *reason, bool *applied,
                                   uint64_t *applied_generation);

/* leader.pending: on 0, *reply (free with coord_reply_free) holds the array
 * "ops" of claimed, unsettled operations, oldest claim first, at most limit
 * (0: the broker's default 100; at most 1000), each {op_id, generation (the
 * claiming one), claimed_ms, live (the claiming generation is the live
 * one)}, and "truncated": true when more were left out.  A new leader reads
 * it first and reconciles each entry. */
COORD_API int coord_leader_pending(coord_t *c, const void *ws, size_t ws_len,
                                   unsigned limit, coord_reply_t **reply);

typedef struct coord_leader_check_result {
    bool live;                  /* generation is the live one */
    uint64_t lease_left_ms;
    char mode[COORD_LEADER_MODE_SIZE];
} coord_leader_check_result;

/* leader.check, for a process acting on a leader's behalf: 0 with *out
 * (may be NULL) filled when generation is live; COORD_EFENCED when not.  A
 * check, not a lock: the answer can be stale by the time it arrives (the
 * lease can end, a steal or disable can fence the leader a moment later).
 * For exactly-once effects use claims and commits, or a conditional write
 * at the receiver that compares the generation. */
COORD_API int coord_leader_check(coord_t *c, const void *ws, size_t ws_len,
                                 uint64_t generation, coord_leader_check_result *out);

/* ---- leadership events ----
 *
 * They come like any event (coord_set_event_cb, else queued for
 * coord_next_event), only to the leader's connection.  Events are only read
 * while c is used: poll coord_fd to notice one promptly.  Resigning or
 * closing c sends no event.  coord_leader_term_event applies any of them
 * to a term.
 *
 * Losing leadership: {ev: "leader.lost", workstream, generation, reason:
 * "expired"|"stolen"|"incident"|"disabled"|"max_hold", incident (with
 * "incident": the incident's text)}. */
typedef struct coord_leader_lost {
    const char *workstream;     /* points into the event: not NUL-terminated */
    size_t workstream_len;
    uint64_t generation;        /* the generation that is now stale */
    const char *reason;         /* points into the event, not NUL-terminated
                                   ("" if absent) */
    size_t reason_len;
    const char *incident;       /* same; "" if absent */
    size_t incident_len;
} coord_leader_lost;

/* True when ev is a leader.lost event; then fills *out (may be NULL), whose
 * pointers are valid as long as ev. */
COORD_API bool coord_event_leader_lost(const coord_reply_t *ev, coord_leader_lost *out);

/* Asked to drain: {ev: "leader.drain", workstream, generation, reason:
 * "max_hold"|"requested"}.  The term is draining already (new claims get
 * COORD_EDRAINING): finish, commit or abandon what is claimed, then
 * resign.  "max_hold": still leading one lease (the lease in force) after
 * the event, the leader is fenced (leader.lost "max_hold"). */
typedef struct coord_leader_drain_event {
    const char *workstream;     /* points into the event: not NUL-terminated */
    size_t workstream_len;
    uint64_t generation;
    const char *reason;         /* same; "" if absent */
    size_t reason_len;
} coord_leader_drain_event;

/* True when ev is a leader.drain event; then fills *out (may be NULL),
 * whose pointers are valid as long as ev. */
COORD_API bool coord_event_leader_drain(const coord_reply_t *ev,
                                        coord_leader_drain_event *out);

/* The rollout mode changed (leader.define): {ev: "leader.mode", workstream,
 * generation, mode: "shadow"|"read-only"|"active"}; the generation stays.
 * In shadow and read-only, claims, commits and abandons get
 * COORD_EREAD_ONLY. */
typedef struct coord_leader_mode_event {
    const char *workstream;     /* points into the event: not NUL-terminated */
    size_t workstream_len;
    uint64_t generation;
    const char *mode;           /* same; "" if absent */
    size_t mode_len;
} coord_leader_mode_event;

/* True when ev is a leader.mode event; then fills *out (may be NULL),
 * whose pointers are valid as long as ev. */
COORD_API bool coord_event_leader_mode(const coord_reply_t *ev,
                                       coord_leader_mode_event *out);

/* ---- channels (BroadcastChannel analogue; see the protocol's "Channels";
 * client/channels.c) ----
 *
 * Channel names are any bytes, at most 1024, within c's scope.  Names
 * starting with '-' are the broker's: "-locks", "-flights" and "-leaders"
 * may be subscribed to (lifecycle events), never published to; any other
 * '-' name gets COORD_ENAME_RESERVED.  Arguments are copied: the caller
 * keeps ownership. */

/* sub.subscribe / sub.unsubscribe.  Subscribing twice is the same as once;
 * unsubscribing from a channel not subscribed to is not an error.
 * Subscriptions end when c closes. */
COORD_API int coord_subscribe(coord_t *c, const void *channel, size_t len);
COORD_API int coord_unsubscribe(coord_t *c, const void *channel, size_t len);

/* sub.publish: sends data[0..data_len) (at most 64 KiB, else
 * COORD_ETOO_LARGE) to every other subscriber of channel in c's scope (not
 * to c itself).  *delivered (may be NULL) gets how many got it.
 * COORD_ENAME_RESERVED for names starting with '-'.  data may be NULL when
 * data_len is 0. */
COORD_API int coord_publish(coord_t *c, const void *channel, size_t len,
                            const void *data, size_t data_len, uint64_t *delivered);

/* The events of a subscription come like any event (coord_set_event_cb,
 * else coord_next_event):
 *
 *   a user channel:   {ev: "message", channel, data (bin), conn (the
 *                     publisher's connection id)}
 *   a broker channel: {ev: "lifecycle", channel, what, ...fields, at_ms
 *                     (the broker's wall clock, ms since the Unix epoch)}:
 *     -locks    what granted|released|lost; name, lock, mode
 *               ("exclusive"|"shared"), token (when granted), conn, pid,
 *               reason (lost: "stolen"|"expired")
 *     -flights  what started|joined|completed|failed|promoted|owner_lost|
 *               fenced; key, flight, fence, reason (never the result)
 *     -leaders  what elected|renewed|lost|resigned|disabled|enabled|
 *               draining|defined; workstream, generation, reason (lost:
 *               "expired"|"stolen"|"incident"|"disabled"|"disconnected"|
 *               "max_hold"; draining: "requested"|"max_hold"), incident,
 *               mode (elected, defined)
 * Lifecycle events are those of c's scope only. */
typedef struct coord_message {
    const char *channel;        /* points into the event: not NUL-terminated */
    size_t channel_len;
    const void *data;           /* points into the event */
    size_t data_len;
    uint64_t conn;              /* the publisher's connection id */
} coord_message;

/* True when ev is a message event; then fills *out (may be NULL), whose
 * pointers are valid as long as ev. */
COORD_API bool coord_event_message(const coord_reply_t *ev, coord_message *out);

typedef struct coord_lifecycle {
    const char *channel;        /* "-locks"...: points into the event, not
                                   NUL-terminated */
    size_t channel_len;
    const char *what;           /* "granted"...: same */
    size_t what_len;
    uint64_t at_ms;             /* 0 if absent */
} coord_lifecycle;

/* True when ev is a lifecycle event; then fills *out (may be NULL), whose
 * pointers are valid as long as ev.  The other fields: coord_map_* on
 * coord_reply_map(ev). */
COORD_API bool coord_event_lifecycle(const coord_reply_t *ev, coord_lifecycle *out);

#ifdef __cplusplus
}
#endif

/* ---- canonical request keys (see the protocol's "Canonical request
 * keys"; client/request-key.c) ----
 *
 * The single-flight key of an HTTP-like request, the same byte for byte
 * in every coord client: "request-v1:" and the lower-case hex SHA-256 of
 * a canonical string that names the method, the normalized URL, the body
 * (JSON bodies canonicalized by RFC 8785), the content type, the headers
 * that vary the response, user, tenant, auth generation, accept, locale,
 * freshness and API version.  Needs no connection.  Strings are
 * NUL-terminated and only read (the caller keeps ownership); NULL or ""
 * is an absent field, which is the same as its default word. */
#ifdef __cplusplus
extern "C" {
#endif

typedef struct coord_header {
    const char *name;          /* an HTTP token; compared case-insensitively */
    const char *value;         /* trimmed of surrounding spaces and tabs */
} coord_header;

typedef struct coord_request {
    const char *method;        /* required: an HTTP token ("get" -> "GET") */
    const char *url;           /* required: absolute http:// or https:// URL */
    const void *body;          /* the body bytes (may be NULL when body_len is 0) */
    size_t body_len;
    bool has_body;             /* false: no body ("body:none"), body ignored;
                                  true with body_len 0: an empty body */
    const char *content_type;  /* "application/json; charset=utf-8": JSON
                                  (also any .../...+json) is canonicalized */
    const coord_header *headers;   /* the headers that vary the response */
    size_t n_headers;
    const char *user;          /* required: a stable user id */
    const char *tenant;        /* absent: "none" */
    uint64_t auth_gen;         /* the auth generation: a number, never a token */
    const char *accept;        /* absent: the star/star default */
    const char *locale;        /* absent: "default" */
    const char *freshness;     /* "cache-ok" (absent), "revalidate" or
                                  "network-only"; anything else is refused */
    const char *api;           /* API version; absent: "none" */
} coord_request;

/* "request-v1:" + 64 hex digits + NUL. */
#define COORD_REQUEST_KEY_SIZE 76

/* Builds the key of *req into key (the caller's buffer of
 * COORD_REQUEST_KEY_SIZE bytes, NUL-terminated).  canonical may be NULL;
 * else *canonical gets the canonical string (malloc'd, NUL-terminated, no
 * byte below 0x20: the caller frees it with free()), for debugging: it
 * holds the user and tenant, so it belongs in no log or record.  Returns
 * 0; COORD_EINVAL for a request that has no key (missing method, url or
 * user; a URL that is not absolute http(s), has user:password@ or a bad
 * percent-encoding; an Authorization, Proxy-Authorization or Cookie
 * header; invalid JSON or a duplicate member name in a JSON body; another
 * freshness...): coord_request_key_error() says which; COORD_ENOMEM.  On
 * errors key is "" and *canonical NULL.  Thread-safe. */
COORD_API int coord_request_key(const coord_request *req,
                                char key[COORD_REQUEST_KEY_SIZE], char **canonical);

/* Why this thread's last coord_request_key failed ("header Cookie: refused:
 * ..."), or "no error".  Thread-local, static storage: valid until this
 * thread's next coord_request_key. */
COORD_API const char *coord_request_key_error(void);

#ifdef __cplusplus
}
#endif
#endif
