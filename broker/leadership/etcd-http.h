/* etcd-http.h - a small client of etcd's v3 JSON gateway on the broker's
 * libuv loop: libcurl's multi interface driven by uv_poll and uv_timer
 * handles (the pattern of curl's multi-uv.c example), jansson for the
 * bodies.  Nothing here blocks the loop.
 *
 * A call is one POST of a JSON body to one route ("/v3/kv/txn", ...),
 * tried on the endpoints in turn: a call that never reached a server
 * (connect refused or timed out) moves to the next endpoint at once; one
 * that may have been applied is retried elsewhere only when the caller
 * says it is idempotent.  Its answer comes through the callback on the
 * loop thread, never inside etcd_post.
 *
 * Keys and values on the gateway are base64; etcd_b64 / etcd_unb64 are
 * here for the callers. */
#ifndef COORD_ETCD_HTTP_H
#define COORD_ETCD_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>
#include <uv.h>

struct etcd;

/* The outcome of a call: ETCD_OK with the parsed body (an HTTP 200), or
 * ETCD_REFUSED with the server's error body (an etcd error such as
 * "lease not found"; json may be NULL), or ETCD_UNREACHABLE (no server
 * answered in time, or it said it is unavailable: for a write the outcome
 * is unknown).  json is borrowed: valid during the callback only. */
enum etcd_status { ETCD_OK, ETCD_REFUSED, ETCD_UNREACHABLE };
typedef void (*etcd_cb)(void *ud, enum etcd_status st, long http, json_t *json);

/* endpoints: "http://host:port[,http://...]".  0, or -1 with err. */
int etcd_open(struct etcd **out, uv_loop_t *loop, const char *endpoints, char *err,
              size_t errsize);
/* Posts body (stolen) to path.  timeout_ms bounds the whole call, every
 * endpoint tried included.  The callback always runs, once (with
 * ETCD_UNREACHABLE when the client closes first). */
void etcd_post(struct etcd *e, const char *path, json_t *body, bool idempotent,
               uint64_t timeout_ms, etcd_cb cb, void *ud);
/* Blocking, for the broker's exit only (the loop serves nobody then):
 * posts body (stolen) with at most timeout_ms per endpoint tried, the
 * answer ignored. */
void etcd_post_sync(struct etcd *e, const char *path, json_t *body, uint64_t timeout_ms);
/* Blocking, for the broker's exit only: posts every body (stolen) at once
 * (at most ETCD_EXIT_PARALLEL connections), each endpoint in turn for the
 * bodies not yet answered 200, all within budget_ms together; answers
 * ignored, what is not done by then is left. */
#define ETCD_EXIT_PARALLEL 32
void etcd_post_sync_all(struct etcd *e, const char *path, json_t **bodies, size_t n,
                        uint64_t budget_ms);
/* A watch: one POST to /v3/watch whose answer is a stream, one JSON
 * message a line ({"result":{...}}: created, events, canceled), each given
 * to on_msg (json borrowed) as it completes, on the loop thread outside
 * curl's callbacks.  It is tried on the current endpoint only, with no
 * time limit (TCP keepalive finds a peer that went away); on_end runs
 * once when the stream ends (the server closed it, the connection broke,
 * it never connected, or the client closes), never inside
 * etcd_watch_start and never after etcd_watch_stop.  A watch is not a
 * call: etcd_inflight does not count it, and its failures do not change
 * etcd_reachable.  NULL when it cannot be started (no callback then).
 * Owner: the caller, until on_end runs or it calls etcd_watch_stop. */
struct etcd_watch;
typedef void (*etcd_watch_msg_cb)(void *ud, json_t *msg);
typedef void (*etcd_watch_end_cb)(void *ud);
struct etcd_watch *etcd_watch_start(struct etcd *e, json_t *body, etcd_watch_msg_cb on_msg,
                                    etcd_watch_end_cb on_end, void *ud);
/* Ends w at once, without on_end; allowed inside w's on_msg. */
void etcd_watch_stop(struct etcd_watch *w);
/* The last call's word on the cluster: true after a call that reached it. */
bool etcd_reachable(const struct etcd *e);
/* True when the last call failed because the server that answered is not
 * etcd (an HTTP answer that is not etcd's JSON: a web server's 404 page).
 * Such a call ends ETCD_UNREACHABLE, and etcd_reachable is false. */
bool etcd_foreign(const struct etcd *e);
/* Calls in flight. */
unsigned etcd_inflight(const struct etcd *e);
/* Answers what is in flight with ETCD_UNREACHABLE (inside this call),
 * then frees e once its handles have closed. */
void etcd_close(struct etcd *e);

/* base64 (RFC 4648, padded) of n bytes: a malloc'd NUL-terminated string,
 * NULL out of memory. */
char *etcd_b64(const void *p, size_t n);
/* Decodes s; *out malloc'd (at least one byte), *n its length.  0, or -1
 * for text that is not base64 (or out of memory). */
int etcd_unb64(const char *s, uint8_t **out, size_t *n);

#endif
