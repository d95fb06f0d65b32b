/* etcd-http.c - see etcd-http.h.
 *
 * One CURLM per client.  Its socket callback keeps a uv_poll handle per
 * socket curl wants watched, its timer callback one uv_timer; both feed
 * curl_multi_socket_action and then collect finished transfers.  Each call
 * is an easy handle with its own body and answer buffer; connections are
 * reused by curl's pool (HTTP/1.1 keep-alive), so a call is usually one
 * write and one read on an open socket.
 *
 * Endpoint choice: the client remembers the endpoint that last answered
 * and starts there; a failure moves it to the next one.
 *
 * A watch (etcd_watch_start) is a call too, marked stream: no time limit,
 * never retried, its answer cut into lines as it arrives; the complete
 * lines are handed on after curl_multi_socket_action returns (curl
 * refuses new transfers from inside its callbacks, and a message may
 * start a call).
 *
 * Outages are logged at warn: "etcd.unreachable" (the endpoint that failed
 * last, and why) when calls stop getting answers, "etcd.reachable" (for how
 * long it was down, how many calls failed) when one is answered again; at
 * most one outage line per ETCD_OUTAGE_LOG_MS, the ones left out counted in
 * the next. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <curl/curl.h>
#include "log.h"
#include "etcd-http.h"
#include "list.h"

/* An answer larger than this is refused (the ledger's ranges are bounded:
 * LIMIT_PENDING_LIST op ids, LIMIT_HISTORY terms). */
#define ETCD_MAX_ANSWER (16u << 20)
/* A connect attempt gives up after this, so an unreachable endpoint costs
 * at most this much before the next is tried. */
#define ETCD_CONNECT_MS 500
#define ETCD_MAX_ENDPOINTS 16
/* A watch's TCP keepalive: probes after this long idle, then this often
 * (the kernel's count, 9 by default, before the stream is declared dead). */
#define ETCD_WATCH_KEEPIDLE_S 10L
#define ETCD_WATCH_KEEPINTVL_S 3L
/* At most one etcd.unreachable line per this (ms): a flapping cluster
 * costs a line now and then, not one per call; the lines left out are
 * counted in the next one (outages_not_logged). */
#define ETCD_OUTAGE_LOG_MS 10000

struct sock {
    uv_poll_t poll;
    curl_socket_t fd;
    struct etcd *e;
    struct list link;              /* e->socks */
};

struct call {
    struct etcd *e;
    CURL *easy;
    char *body;
    size_t body_len;
    char *path;
    bool idempotent;
    uint64_t deadline;             /* uv_now */
    unsigned tries;
    char *ans;
    size_t ans_len, ans_cap;
    bool too_big;
    etcd_cb cb;
    void *ud;
    struct list link;              /* e->calls */
    /* a watch's stream */
    bool stream, delivering, stopped;
    etcd_watch_msg_cb on_msg;
    etcd_watch_end_cb on_end;
};

struct etcd {
    uv_loop_t *loop;
    CURLM *multi;
    uv_timer_t timer;
    struct curl_slist *headers;
    char *endpoints[ETCD_MAX_ENDPOINTS];
    unsigned n_endpoints, cur;
    bool reachable, closing;
    bool foreign;                  /* the last answer was not etcd's */
    /* outage log (see the top comment) */
    uint64_t down_since;           /* uv_now when it became unreachable */
    uint64_t last_outage_log;      /* uv_now of the last etcd.unreachable line */
    bool outage_logged;            /* this outage's line was written */
    unsigned outages_not_logged;
    uint64_t failed_calls;         /* in this outage */
    char last_error[160];          /* why the last failed attempt failed */
    unsigned last_failed;          /* the endpoint it went to */
    unsigned open_handles;         /* timer + polls not yet closed */
    struct list socks, calls;
    unsigned inflight;
};

static bool curl_ready;

/* ---- base64 ---- */

static const char b64chars[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

char *etcd_b64(const void *p, size_t n)
{
    const uint8_t *s = p;
    char *out = malloc((n + 2) / 3 * 4 + 1), *o = out;
    if (!out)
        return NULL;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)s[i] << 16;
        if (i + 1 < n) v |= (uint32_t)s[i + 1] << 8;
        if (i + 2 < n) v |= s[i + 2];
        *o++ = b64chars[v >> 18 & 63];
        *o++ = b64chars[v >> 12 & 63];
        *o++ = i + 1 < n ? b64chars[v >> 6 & 63] : '=';
        *o++ = i + 2 < n ? b64chars[v & 63] : '=';
    }
    *o = 0;
    return out;
}

static int b64val(char c)
{
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+' || c == '-') return 62;
    if (c == '/' || c == '_') return 63;
    return -1;
}

int etcd_unb64(const char *s, uint8_t **out, size_t *n)
{
    size_t len = strlen(s);
    while (len && s[len - 1] == '=')
        len--;
    uint8_t *o = malloc(len * 3 / 4 + 1);
    if (!o)
        return -1;
    uint32_t acc = 0;
    unsigned bits = 0;
    size_t k = 0;
    for (size_t i = 0; i < len; i++) {
        int v = b64val(s[i]);
        if (v < 0) {
            free(o);
            return -1;
        }
        acc = acc << 6 | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            o[k++] = (uint8_t)(acc >> bits);
        }
    }
    *out = o;
    *n = k;
    return 0;
}

/* ---- calls ---- */

static size_t on_write(char *p, size_t size, size_t nmemb, void *ud)
{
    struct call *c = ud;
    size_t n = size * nmemb;
    if (c->ans_len + n > ETCD_MAX_ANSWER) {
        c->too_big = true;
        return 0;
    }
    if (c->ans_len + n + 1 > c->ans_cap) {
        size_t cap = c->ans_cap ? c->ans_cap : 1024;
        while (cap < c->ans_len + n + 1)
            cap *= 2;
        char *grown = realloc(c->ans, cap);
        if (!grown)
            return 0;
        c->ans = grown;
        c->ans_cap = cap;
    }
    memcpy(c->ans + c->ans_len, p, n);
    c->ans_len += n;
    c->ans[c->ans_len] = 0;
    return n;
}

static void call_free(struct call *c)
{
    if (c->easy)
        curl_easy_cleanup(c->easy);
    free(c->body);
    free(c->path);
    free(c->ans);
    free(c);
}

/* Starts (or restarts) c on the current endpoint.  0, or -1 when no easy
 * handle could be made. */
static int call_start(struct call *c)
{
    struct etcd *e = c->e;
    uint64_t now = uv_now(e->loop);
    uint64_t left = c->deadline > now ? c->deadline - now : 1;
    char url[512];
    snprintf(url, sizeof url, "%s%s", e->endpoints[e->cur], c->path);
    if (!c->easy && !(c->easy = curl_easy_init()))
        return -1;
    curl_easy_reset(c->easy);
    c->ans_len = 0;
    c->too_big = false;
    curl_easy_setopt(c->easy, CURLOPT_URL, url);
    curl_easy_setopt(c->easy, CURLOPT_POST, 1L);
    curl_easy_setopt(c->easy, CURLOPT_POSTFIELDS, c->body);
    curl_easy_setopt(c->easy, CURLOPT_POSTFIELDSIZE, (long)c->body_len);
    curl_easy_setopt(c->easy, CURLOPT_HTTPHEADER, e->headers);
    curl_easy_setopt(c->easy, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(c->easy, CURLOPT_WRITEDATA, c);
    curl_easy_setopt(c->easy, CURLOPT_PRIVATE, c);
    curl_easy_setopt(c->easy, CURLOPT_NOSIGNAL, 1L);
    if (c->stream) {
        /* open until it ends: TCP keepalive finds a peer that is gone */
        curl_easy_setopt(c->easy, CURLOPT_CONNECTTIMEOUT_MS, (long)ETCD_CONNECT_MS);
        curl_easy_setopt(c->easy, CURLOPT_TCP_KEEPALIVE, 1L);
        curl_easy_setopt(c->easy, CURLOPT_TCP_KEEPIDLE, ETCD_WATCH_KEEPIDLE_S);
        curl_easy_setopt(c->easy, CURLOPT_TCP_KEEPINTVL, ETCD_WATCH_KEEPINTVL_S);
    } else {
        curl_easy_setopt(c->easy, CURLOPT_TIMEOUT_MS, (long)left);
        curl_easy_setopt(c->easy, CURLOPT_CONNECTTIMEOUT_MS,
                         (long)(left < ETCD_CONNECT_MS ? left : ETCD_CONNECT_MS));
    }
    curl_easy_setopt(c->easy, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(c->easy, CURLOPT_PROTOCOLS_STR, "http,https");
    c->tries++;
    return curl_multi_add_handle(e->multi, c->easy) == CURLM_OK ? 0 : -1;
}

static void call_finish(struct call *c, enum etcd_status st, long http)
{
    json_t *j = NULL;
    if (st != ETCD_UNREACHABLE && c->ans_len)
        j = json_loadb(c->ans, c->ans_len, 0, NULL);
    if (st == ETCD_OK && !j)
        st = ETCD_REFUSED;             /* a 200 that is not JSON */
    list_del(&c->link);
    c->e->inflight--;
    c->cb(c->ud, st, http, j);
    json_decref(j);
    call_free(c);
}

/* gRPC's Unavailable (14) and DeadlineExceeded (4) through the gateway
 * (HTTP 503 / 504): the cluster could not decide, as if unreachable. */
static bool says_unavailable(long http, const char *ans)
{
    if (http == 503 || http == 504 || http == 502)
        return true;
    return ans && http >= 500 && (strstr(ans, "\"code\":14") || strstr(ans, "\"code\":4,"));
}

/* An HTTP answer etcd's gateway could have given: a JSON object (its
 * errors carry "code", "error" or "message").  A web server's 404 page, a
 * proxy's text, an empty 200: not etcd, so nothing was applied. */
static bool etcd_like(long http, const char *ans, size_t len)
{
    size_t i = 0;
    while (i < len && (ans[i] == ' ' || ans[i] == '\n' || ans[i] == '\r' || ans[i] == '\t'))
        i++;
    if (i == len || ans[i] != '{')
        return false;
    if (http == 200)
        return true;                   /* decoded later, once */
    json_t *j = json_loadb(ans + i, len - i, 0, NULL);
    bool like = json_is_object(j) && (json_object_get(j, "code") ||
                                      json_object_get(j, "error") ||
                                      json_object_get(j, "message"));
    json_decref(j);
    return like;
}

/* The client is reachable again or not any more: the outage log. */
static void set_reachable(struct etcd *e, bool reachable)
{
    uint64_t now = uv_now(e->loop);
    if (reachable && !e->reachable) {
        if (e->outage_logged)
            log_event(LOG_WARN, "etcd.reachable",
                      "endpoint=\"%s\" down_ms=%llu failed_calls=%llu",
                      e->endpoints[e->cur], (unsigned long long)(now - e->down_since),
                      (unsigned long long)e->failed_calls);
        e->failed_calls = 0;
    } else if (!reachable) {
        e->failed_calls++;
        if (e->reachable) {
            e->down_since = now;
            e->outage_logged = e->last_outage_log == 0 ||
                               now - e->last_outage_log >= ETCD_OUTAGE_LOG_MS;
            if (e->outage_logged) {
                log_event(LOG_WARN, "etcd.unreachable",
                          "endpoint=\"%s\" error=\"%s\" endpoints=%u outages_not_logged=%u",
                          e->endpoints[e->last_failed], e->last_error, e->n_endpoints,
                          e->outages_not_logged);
                e->last_outage_log = now;
                e->outages_not_logged = 0;
            } else {
                e->outages_not_logged++;
            }
        }
    }
    e->reachable = reachable;
}

/* ---- watches ---- */

static void stream_free(struct call *c)
{
    list_del(&c->link);
    call_free(c);
}

/* every complete line of c's buffer to on_msg.  True when on_msg stopped
 * c (then freed here). */
static bool stream_deliver(struct call *c)
{
    c->delivering = true;
    char *nl;
    while (!c->stopped && c->ans_len && (nl = memchr(c->ans, '\n', c->ans_len))) {
        size_t n = (size_t)(nl - c->ans) + 1;
        json_t *j = json_loadb(c->ans, n, 0, NULL);
        memmove(c->ans, c->ans + n, c->ans_len - n);
        c->ans_len -= n;
        c->ans[c->ans_len] = 0;
        if (j)
            c->on_msg(c->ud, j);       /* a line that is not JSON: skipped */
        json_decref(j);
    }
    c->delivering = false;
    if (!c->stopped)
        return false;
    stream_free(c);
    return true;
}

static void stream_end(struct call *c)
{
    /* the complete lines that came before the end (a last line cut short
     * is a broken message: dropped) */
    if (stream_deliver(c))
        return;                        /* stopped (and freed) by on_msg */
    etcd_watch_end_cb end = c->on_end;
    void *ud = c->ud;
    stream_free(c);
    end(ud);
}

struct etcd_watch *etcd_watch_start(struct etcd *e, json_t *body, etcd_watch_msg_cb on_msg,
                                    etcd_watch_end_cb on_end, void *ud)
{
    struct call *c = e->closing ? NULL : calloc(1, sizeof *c);
    char *text = body && c ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    if (!c || !text || !(c->path = strdup("/v3/watch"))) {
        free(c);
        free(text);
        return NULL;
    }
    c->e = e;
    c->stream = true;
    c->on_msg = on_msg;
    c->on_end = on_end;
    c->ud = ud;
    c->body = text;
    c->body_len = strlen(text);
    c->deadline = UINT64_MAX;
    list_append(&e->calls, &c->link);
    if (call_start(c) < 0) {
        stream_free(c);
        return NULL;
    }
    return (struct etcd_watch *)c;
}

void etcd_watch_stop(struct etcd_watch *w)
{
    struct call *c = (struct call *)w;
    if (!c || c->stopped)
        return;
    c->stopped = true;
    if (c->easy && c->e->multi)
        curl_multi_remove_handle(c->e->multi, c->easy);
    if (!c->delivering)
        stream_free(c);
}

/* ---- answers ---- */

static void transfer_done(struct call *c, CURLcode res)
{
    struct etcd *e = c->e;
    if (c->stream) {
        curl_multi_remove_handle(e->multi, c->easy);
        log_event(LOG_DEBUG, "etcd.watch_ended", "error=\"%s\"", curl_easy_strerror(res));
        stream_end(c);
        return;
    }
    long http = 0;
    curl_easy_getinfo(c->easy, CURLINFO_RESPONSE_CODE, &http);
    curl_multi_remove_handle(e->multi, c->easy);
    /* nothing of the request went out: safe to send elsewhere, write or not */
    long sent = 0;
    curl_easy_getinfo(c->easy, CURLINFO_REQUEST_SIZE, &sent);
    bool foreign = res == CURLE_OK && !says_unavailable(http, c->ans) &&
                   !etcd_like(http, c->ans, c->ans_len);
    /* a server that is not etcd applied nothing: like one never reached */
    bool never_sent = (res != CURLE_OK && sent == 0) || foreign;
    bool unavailable = res != CURLE_OK || foreign || says_unavailable(http, c->ans);
    if (foreign) {
        log_event(LOG_WARN, "etcd.not_etcd", "endpoint=\"%s\" http=%ld",
                  e->endpoints[e->cur], http);
    }
    e->foreign = foreign;
    if (!unavailable) {
        set_reachable(e, true);
        call_finish(c, http == 200 ? ETCD_OK : ETCD_REFUSED, http);
        return;
    }
    if (res != CURLE_OK)
        snprintf(e->last_error, sizeof e->last_error, "%s", curl_easy_strerror(res));
    else if (foreign)
        snprintf(e->last_error, sizeof e->last_error, "not an etcd endpoint (HTTP %ld)", http);
    else
        snprintf(e->last_error, sizeof e->last_error,
                 "HTTP %ld: the cluster could not decide", http);
    e->last_failed = e->cur;
    /* this endpoint failed: the next call starts at the next one */
    e->cur = (e->cur + 1) % e->n_endpoints;
    bool time_left = uv_now(e->loop) + 20 < c->deadline;
    bool retry = !e->closing && time_left && (never_sent || c->idempotent) &&
                 c->tries < 4 * e->n_endpoints;
    if (retry && call_start(c) == 0)
        return;
    set_reachable(e, false);
    call_finish(c, ETCD_UNREACHABLE, http);
}

static void check_done(struct etcd *e)
{
    CURLMsg *m;
    int left;
    /* the watches' complete lines first: a stream that ended has its last
     * messages delivered before its end.  on_msg may stop any watch or
     * start calls: walk again from the top after each delivery. */
    for (bool again = true; again && !e->closing;) {
        again = false;
        struct list *pos, *tmp;
        list_for_each_safe(pos, tmp, &e->calls) {
            struct call *c = list_entry(pos, struct call, link);
            if (c->stream && !c->stopped && c->ans_len && memchr(c->ans, '\n', c->ans_len)) {
                stream_deliver(c);
                again = true;
                break;
            }
        }
    }
    while ((m = curl_multi_info_read(e->multi, &left))) {
        if (m->msg != CURLMSG_DONE)
            continue;
        struct call *c;
        curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&c);
        transfer_done(c, m->data.result);
    }
}

void etcd_post(struct etcd *e, const char *path, json_t *body, bool idempotent,
               uint64_t timeout_ms, etcd_cb cb, void *ud)
{
    struct call *c = calloc(1, sizeof *c);
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    if (c) {
        c->e = e;
        c->cb = cb;
        c->ud = ud;
        c->idempotent = idempotent;
        c->deadline = uv_now(e->loop) + timeout_ms;
        c->body = text;
        c->body_len = text ? strlen(text) : 0;
        c->path = strdup(path);
        list_append(&e->calls, &c->link);
        e->inflight++;
    }
    if (!c || !text || !c->path || e->closing || call_start(c) < 0) {
        if (!c) {
            free(text);
            /* no memory even for the call: answered at the next timer
             * turn would need one; answer now is what is left */
            cb(ud, ETCD_UNREACHABLE, 0, NULL);
            return;
        }
        call_finish(c, ETCD_UNREACHABLE, 0);
        return;
    }
    /* curl starts it from its timer callback (a 0 ms timer): never here */
}

static size_t on_discard(char *p, size_t size, size_t nmemb, void *ud)
{
    (void)p; (void)ud;
    return size * nmemb;
}

void etcd_post_sync(struct etcd *e, const char *path, json_t *body, uint64_t timeout_ms)
{
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    CURL *easy = text ? curl_easy_init() : NULL;
    for (unsigned i = 0; easy && i < e->n_endpoints; i++) {
        char url[512];
        snprintf(url, sizeof url, "%s%s", e->endpoints[(e->cur + i) % e->n_endpoints], path);
        curl_easy_reset(easy);
        curl_easy_setopt(easy, CURLOPT_URL, url);
        curl_easy_setopt(easy, CURLOPT_POSTFIELDS, text);
        curl_easy_setopt(easy, CURLOPT_HTTPHEADER, e->headers);
        curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, on_discard);
        curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, (long)timeout_ms);
        long http = 0;
        if (curl_easy_perform(easy) == CURLE_OK &&
            curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &http) == CURLE_OK && http == 200)
            break;
    }
    if (easy)
        curl_easy_cleanup(easy);
    free(text);
}

void etcd_post_sync_all(struct etcd *e, const char *path, json_t **bodies, size_t n,
                        uint64_t budget_ms)
{
    char **text = calloc(n ? n : 1, sizeof *text);
    bool *done = calloc(n ? n : 1, sizeof *done);
    CURL **easy = calloc(n ? n : 1, sizeof *easy);
    for (size_t i = 0; i < n; i++) {
        if (text && bodies[i])
            text[i] = json_dumps(bodies[i], JSON_COMPACT);
        json_decref(bodies[i]);
    }
    CURLM *multi = text && done && easy ? curl_multi_init() : NULL;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t t0 = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000, now = t0;
    if (multi)
        curl_multi_setopt(multi, CURLMOPT_MAX_TOTAL_CONNECTIONS, (long)ETCD_EXIT_PARALLEL);
    /* every endpoint in turn, each call to it at once; what is not done
     * when the budget is spent is left (leases expire by themselves) */
    for (unsigned ep = 0; multi && ep < e->n_endpoints && now < t0 + budget_ms; ep++) {
        char url[512];
        snprintf(url, sizeof url, "%s%s", e->endpoints[(e->cur + ep) % e->n_endpoints], path);
        long left = (long)(t0 + budget_ms - now);
        size_t added = 0;
        for (size_t i = 0; i < n; i++) {
            if (done[i] || !text[i] || !(easy[i] = curl_easy_init()))
                continue;
            curl_easy_setopt(easy[i], CURLOPT_URL, url);
            curl_easy_setopt(easy[i], CURLOPT_POSTFIELDS, text[i]);
            curl_easy_setopt(easy[i], CURLOPT_HTTPHEADER, e->headers);
            curl_easy_setopt(easy[i], CURLOPT_WRITEFUNCTION, on_discard);
            curl_easy_setopt(easy[i], CURLOPT_NOSIGNAL, 1L);
            curl_easy_setopt(easy[i], CURLOPT_TIMEOUT_MS, left);
            curl_easy_setopt(easy[i], CURLOPT_CONNECTTIMEOUT_MS,
                             left < ETCD_CONNECT_MS ? left : ETCD_CONNECT_MS);
            curl_easy_setopt(easy[i], CURLOPT_PRIVATE, (char *)(uintptr_t)i);
            curl_multi_add_handle(multi, easy[i]);
            added++;
        }
        int running = (int)added;
        while (running > 0 && now < t0 + budget_ms) {
            curl_multi_perform(multi, &running);
            CURLMsg *m;
            int q;
            while ((m = curl_multi_info_read(multi, &q))) {
                if (m->msg != CURLMSG_DONE)
                    continue;
                char *priv = NULL;
                long http = 0;
                curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, &priv);
                curl_easy_getinfo(m->easy_handle, CURLINFO_RESPONSE_CODE, &http);
                if (m->data.result == CURLE_OK && http == 200)
                    done[(uintptr_t)priv] = true;
            }
            if (running > 0)
                curl_multi_poll(multi, NULL, 0, 50, NULL);
            clock_gettime(CLOCK_MONOTONIC, &ts);
            now = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
        }
        for (size_t i = 0; i < n; i++) {
            if (!easy[i])
                continue;
            curl_multi_remove_handle(multi, easy[i]);
            curl_easy_cleanup(easy[i]);
            easy[i] = NULL;
        }
    }
    if (multi)
        curl_multi_cleanup(multi);
    for (size_t i = 0; text && i < n; i++)
        free(text[i]);
    free(text);
    free(done);
    free(easy);
}

/* ---- curl on uv ---- */

static void on_poll(uv_poll_t *h, int status, int events)
{
    struct sock *s = h->data;
    struct etcd *e = s->e;
    int flags = 0;
    if (status < 0)
        flags = CURL_CSELECT_ERR;
    if (events & UV_READABLE)
        flags |= CURL_CSELECT_IN;
    if (events & UV_WRITABLE)
        flags |= CURL_CSELECT_OUT;
    int running;
    curl_multi_socket_action(e->multi, s->fd, flags, &running);
    check_done(e);
}

static void sock_closed(uv_handle_t *h)
{
    struct sock *s = h->data;
    struct etcd *e = s->e;
    free(s);
    if (--e->open_handles == 0 && e->closing)
        free(e);
}

static void sock_close(struct sock *s)
{
    list_del(&s->link);
    uv_poll_stop(&s->poll);
    uv_close((uv_handle_t *)&s->poll, sock_closed);
}

static int on_socket(CURL *easy, curl_socket_t fd, int action, void *userp, void *socketp)
{
    struct etcd *e = userp;
    struct sock *s = socketp;
    (void)easy;
    if (action == CURL_POLL_REMOVE) {
        if (s) {
            curl_multi_assign(e->multi, fd, NULL);
            sock_close(s);
        }
        return 0;
    }
    if (!s) {
        s = calloc(1, sizeof *s);
        if (!s || uv_poll_init_socket(e->loop, &s->poll, fd) < 0) {
            free(s);
            return -1;
        }
        s->fd = fd;
        s->e = e;
        s->poll.data = s;
        e->open_handles++;
        list_append(&e->socks, &s->link);
        curl_multi_assign(e->multi, fd, s);
    }
    int ev = 0;
    if (action == CURL_POLL_IN || action == CURL_POLL_INOUT)
        ev |= UV_READABLE;
    if (action == CURL_POLL_OUT || action == CURL_POLL_INOUT)
        ev |= UV_WRITABLE;
    uv_poll_start(&s->poll, ev, on_poll);
    return 0;
}

static void on_timeout(uv_timer_t *t)
{
    struct etcd *e = t->data;
    int running;
    curl_multi_socket_action(e->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    check_done(e);
}

static int on_timer(CURLM *multi, long timeout_ms, void *userp)
{
    struct etcd *e = userp;
    (void)multi;
    if (timeout_ms < 0)
        uv_timer_stop(&e->timer);
    else
        uv_timer_start(&e->timer, on_timeout, (uint64_t)timeout_ms, 0);
    return 0;
}

int etcd_open(struct etcd **out, uv_loop_t *loop, const char *endpoints, char *err,
              size_t errsize)
{
    if (!curl_ready) {
        if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
            snprintf(err, errsize, "cannot initialise libcurl");
            return -1;
        }
        curl_ready = true;
    }
    struct etcd *e = calloc(1, sizeof *e);
    if (!e) {
        snprintf(err, errsize, "out of memory");
        return -1;
    }
    list_init(&e->socks);
    list_init(&e->calls);
    const char *p = endpoints;
    while (p && *p) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        while (n && p[n - 1] == '/')
            n--;                       /* "http://h:2379/" is "http://h:2379" */
        if (n) {
            if (e->n_endpoints == ETCD_MAX_ENDPOINTS || n > 400 ||
                (strncmp(p, "http://", 7) != 0 && strncmp(p, "https://", 8) != 0)) {
                snprintf(err, errsize, "--etcd-endpoints: at most %d http(s):// URLs, "
                         "comma-separated", ETCD_MAX_ENDPOINTS);
                goto fail;
            }
            e->endpoints[e->n_endpoints++] = strndup(p, n);
        }
        p = comma ? comma + 1 : NULL;
    }
    if (!e->n_endpoints) {
        snprintf(err, errsize, "--ledger etcd needs --etcd-endpoints URL[,URL]");
        goto fail;
    }
    e->loop = loop;
    e->multi = curl_multi_init();
    e->headers = curl_slist_append(NULL, "Content-Type: application/json");
    e->headers = curl_slist_append(e->headers, "Expect:");
    if (!e->multi || !e->headers) {
        snprintf(err, errsize, "cannot initialise libcurl");
        goto fail;
    }
    curl_multi_setopt(e->multi, CURLMOPT_SOCKETFUNCTION, on_socket);
    curl_multi_setopt(e->multi, CURLMOPT_SOCKETDATA, e);
    curl_multi_setopt(e->multi, CURLMOPT_TIMERFUNCTION, on_timer);
    curl_multi_setopt(e->multi, CURLMOPT_TIMERDATA, e);
    uv_timer_init(loop, &e->timer);
    e->timer.data = e;
    e->open_handles = 1;
    e->reachable = true;               /* until a call says otherwise */
    *out = e;
    return 0;
fail:
    for (unsigned i = 0; i < e->n_endpoints; i++)
        free(e->endpoints[i]);
    if (e->multi)
        curl_multi_cleanup(e->multi);
    curl_slist_free_all(e->headers);
    free(e);
    return -1;
}

bool etcd_reachable(const struct etcd *e) { return e->reachable; }
bool etcd_foreign(const struct etcd *e) { return e->foreign; }
unsigned etcd_inflight(const struct etcd *e) { return e->inflight; }

static void timer_closed(uv_handle_t *h)
{
    struct etcd *e = h->data;
    if (--e->open_handles == 0)
        free(e);
}

void etcd_close(struct etcd *e)
{
    if (!e)
        return;
    e->closing = true;
    while (!list_empty(&e->calls)) {
        struct call *c = list_entry(list_shift(&e->calls), struct call, link);
        curl_multi_remove_handle(e->multi, c->easy);
        if (c->stream) {
            etcd_watch_end_cb end = c->on_end;
            void *ud = c->ud;
            stream_free(c);            /* unlinked already: list_del is a no-op */
            end(ud);
            continue;
        }
        call_finish(c, ETCD_UNREACHABLE, 0);
    }
    /* the pool's sockets: curl closes them, their polls are ours */
    curl_multi_setopt(e->multi, CURLMOPT_SOCKETFUNCTION, NULL);
    curl_multi_cleanup(e->multi);
    e->multi = NULL;
    while (!list_empty(&e->socks))
        sock_close(list_entry(e->socks.next, struct sock, link));
    curl_slist_free_all(e->headers);
    for (unsigned i = 0; i < e->n_endpoints; i++)
        free(e->endpoints[i]);
    uv_timer_stop(&e->timer);
    uv_close((uv_handle_t *)&e->timer, timer_closed);
}
