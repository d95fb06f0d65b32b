/* ctl-metrics.c - coordctl stats --openmetrics|--prometheus [--listen
 * ADDR:PORT]: the broker's `stats` in the OpenMetrics 1.0 text format, or
 * in Prometheus's text format 0.0.4 (what node_exporter's textfile
 * collector reads: `coordctl stats --prometheus > DIR/coord.prom.$$ && mv
 * DIR/coord.prom.$$ DIR/coord.prom`), printed once or served to a scraper
 * over HTTP on a loopback address, one fresh `stats` per scrape.  The two
 * formats differ, for what coord exports, only in how a counter's family
 * is named (OpenMetrics: `# TYPE x counter` over samples x_total; 0.0.4:
 * `# TYPE x_total counter`) and in OpenMetrics' closing `# EOF`; the
 * listener answers OpenMetrics to a scraper whose Accept asks for it
 * (Prometheus does), 0.0.4 otherwise.
 *
 * The mapping, one rule per shape of the reply:
 *   a top-level number    coord_KEY, a gauge or a counter by the tables
 *                         below (counters get the _total suffix); a key in
 *                         neither is typed `unknown`, and the test
 *                         `cli-metrics` fails on it, so a new stat is
 *                         classified where it is added;
 *   KEY_ms, KEY_us        converted to seconds: coord_KEY_seconds;
 *   a boolean             a 0/1 gauge;
 *   version, ledger       info-style gauges with a label, value 1;
 *   limits {name: n}      gauge coord_limit{name="..."};
 *   requests {op: n}      counter coord_op_requests_total{op="..."};
 *   latency {kind: {count, p50_ms, p99_ms, max_ms}}
 *                         summary coord_latency_seconds{kind, quantile}
 *                         with _count, and gauge coord_latency_max_seconds.
 * Strings other than those two and other nested values are left out.
 *
 * The HTTP side is the least a scraper needs: one connection at a time,
 * `GET /metrics` (or `/`), the request head read within HTTP_READ_MS and
 * HTTP_HEAD_MAX bytes, the connection closed after each answer.  It binds
 * only loopback addresses: the stats are one user's. */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>
#include "coordctl.h"

/* A request head longer than this is not a scraper's. */
#define HTTP_HEAD_MAX 8192
/* A peer gets this long to send its request head. */
#define HTTP_READ_MS 5000

static const char *const gauges[] = {
    "pid", "uptime_ms", "epoch", "connections", "locks_held", "locks_pending",
    "lock_names", "flights", "followers_per_100_owners",
    "flights_disabled_prefixes", "workstreams", "ledger_reachable", "channels",
    "records", "ledger_map_size", "timers", "held_entries", "held_max",
    "etcd_lease_ttl_ms",
    NULL,
};
static const char *const counters[] = {
    "conns_accepted", "rejected_peers", "rejected_conn_limit", "rejected_fd_limit",
    "bad_frames", "bad_requests", "handshake_timeouts", "pending_limit_hits",
    "outbuf_disconnects", "partial_limit_cuts", "oversized_frames", "cancels",
    "timeouts", "bytes_in", "bytes_out", "requests_total", "flights_started",
    "followers_joined", "flights_completed", "flights_failed", "owners_promoted",
    "fenced", "results_from_records", "flights_bypassed", "backoffs",
    "backoffs_started", "backoff_answers", "leaders_elected", "leaders_lost",
    "commits_applied", "commits_duplicate", "commits_fenced", "messages_published",
    "messages_delivered", "ledger_batches", "ledger_jobs", "data_limit_hits",
    "leader_terms", "terms_over_max_hold", "terms_fenced_max_hold", "claims",
    "claims_reconciled", "abandons", "ledger_commit_us", "ledger_flush_us",
    "ledger_flushes", "ledger_linger_us", "flights_purged", "terms_max_hold",
    "terms_reached_max_hold", "outbuf_pauses", "outbuf_stalls", "memory_trims",
    "held_budget_refusals", "flights_superseded", "follower_timeouts",
    "record_read_failures", "flights_version_split", "etcd_watch_wakeups",
    "etcd_watch_connects", "etcd_define_rereads", "fds_received", "fds_sent", "refs_given",
    NULL,
};

static bool in(const char *const *list, const char *k)
{
    for (; *list; list++)
        if (strcmp(*list, k) == 0)
            return true;
    return false;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* A growable text buffer; failed once out of memory. */
struct text {
    char *p;
    size_t n, cap;
    bool failed;
    bool prom;                  /* Prometheus text 0.0.4, not OpenMetrics */
};

static void add(struct text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add(struct text *t, const char *fmt, ...)
{
    if (t->failed)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        size_t room = t->cap - t->n;
        int w = vsnprintf(t->p ? t->p + t->n : NULL, room, fmt, ap);
        va_end(ap);
        if (w < 0) {
            t->failed = true;
            return;
        }
        if ((size_t)w < room) {
            t->n += (size_t)w;
            return;
        }
        size_t cap = t->cap ? t->cap * 2 : 4096;
        while (cap - t->n <= (size_t)w)
            cap *= 2;
        char *p = realloc(t->p, cap);
        if (!p) {
            t->failed = true;
            return;
        }
        t->p = p;
        t->cap = cap;
    }
}

/* A label value: backslash, double quote and newline escaped; a byte that
 * is not printable ASCII as \xNN (OpenMetrics wants UTF-8; names may be
 * any bytes). */
static void add_label(struct text *t, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '\\' || ch == '"')
            add(t, "\\%c", ch);
        else if (ch == '\n')
            add(t, "\\n");
        else if (ch < 0x20 || ch >= 0x7f)
            add(t, "\\\\x%02x", ch);
        else
            add(t, "%c", ch);
    }
}

/* The numeric value of entry i, as JSON gives it ("12", "true", "1.5"). */
static bool number_at(coord_map m, size_t i, double *out)
{
    char *j = coord_map_value_json(m, i);
    if (!j)
        return false;
    bool ok = true;
    if (strcmp(j, "true") == 0)
        *out = 1;
    else if (strcmp(j, "false") == 0)
        *out = 0;
    else {
        char *end;
        *out = strtod(j, &end);
        ok = end != j && *end == '\0';
    }
    free(j);
    return ok;
}

/* A sample's value: integers as digits, fractions with 9 significant
 * digits (seconds from milliseconds: 169.48, not 169.47999999999999). */
static void add_num(struct text *t, double v)
{
    if (v == (double)(long long)v && v < 9007199254740992.0 && v > -9007199254740992.0)
        add(t, " %lld\n", (long long)v);
    else
        add(t, " %.9g\n", v);
}

static void family(struct text *t, const char *name, const char *type)
{
    bool counter = strcmp(type, "counter") == 0;
    if (t->prom && strcmp(type, "unknown") == 0)
        type = "untyped";
    add(t, "# TYPE %s%s %s\n", name, t->prom && counter ? "_total" : "", type);
}

static void top_level(struct text *t, const char *key, coord_type ty, coord_map m, size_t i)
{
    double v;
    if (!number_at(m, i, &v))
        return;
    char base[128];
    double scale = 1;
    size_t kn = strlen(key);
    if (ends_with(key, "_total"))
        kn -= 6;
    if (ends_with(key, "_ms")) {
        kn -= 3;
        scale = 1e-3;
    } else if (ends_with(key, "_us")) {
        kn -= 3;
        scale = 1e-6;
    }
    snprintf(base, sizeof base, "coord_%.*s%s", (int)kn, key,
             scale != 1 ? "_seconds" : "");
    const char *type = ty == COORD_TYPE_BOOL || in(gauges, key) ? "gauge"
                     : in(counters, key)                         ? "counter"
                                                                 : "unknown";
    family(t, base, type);
    add(t, "%s%s", base, strcmp(type, "counter") == 0 ? "_total" : "");
    add_num(t, v * scale);
}

static void limits(struct text *t, coord_map lim)
{
    family(t, "coord_limit", "gauge");
    for (size_t i = 0; i < coord_map_size(lim); i++) {
        const char *k;
        size_t kn;
        double v;
        if (coord_map_entry(lim, i, &k, &kn) == COORD_TYPE_NONE || !number_at(lim, i, &v))
            continue;
        add(t, "coord_limit{name=\"");
        add_label(t, k, kn);
        add(t, "\"}");
        add_num(t, v);
    }
}

static void requests(struct text *t, coord_map req)
{
    family(t, "coord_op_requests", "counter");
    for (size_t i = 0; i < coord_map_size(req); i++) {
        const char *k;
        size_t kn;
        double v;
        if (coord_map_entry(req, i, &k, &kn) == COORD_TYPE_NONE || !number_at(req, i, &v))
            continue;
        add(t, "coord_op_requests_total{op=\"");
        add_label(t, k, kn);
        add(t, "\"}");
        add_num(t, v);
    }
}

static void latency(struct text *t, coord_map lat)
{
    static const struct { const char *key, *q; } qs[] = {
        { "p50_ms", "0.5" }, { "p99_ms", "0.99" },
    };
    family(t, "coord_latency_seconds", "summary");
    for (size_t i = 0; i < coord_map_size(lat); i++) {
        const char *k;
        size_t kn;
        coord_map e;
        if (coord_map_entry(lat, i, &k, &kn) != COORD_TYPE_MAP || !coord_map_map_at(lat, i, &e))
            continue;
        for (size_t q = 0; q < sizeof qs / sizeof qs[0]; q++) {
            double ms;
            if (!coord_map_double(e, qs[q].key, &ms))
                continue;
            add(t, "coord_latency_seconds{kind=\"");
            add_label(t, k, kn);
            add(t, "\",quantile=\"%s\"}", qs[q].q);
            add_num(t, ms / 1e3);
        }
        uint64_t count;
        if (coord_map_uint(e, "count", &count)) {
            add(t, "coord_latency_seconds_count{kind=\"");
            add_label(t, k, kn);
            add(t, "\"} %llu\n", (unsigned long long)count);
        }
    }
    family(t, "coord_latency_max_seconds", "gauge");
    for (size_t i = 0; i < coord_map_size(lat); i++) {
        const char *k;
        size_t kn;
        coord_map e;
        double ms;
        if (coord_map_entry(lat, i, &k, &kn) != COORD_TYPE_MAP || !coord_map_map_at(lat, i, &e) ||
            !coord_map_double(e, "max_ms", &ms))
            continue;
        add(t, "coord_latency_max_seconds{kind=\"");
        add_label(t, k, kn);
        add(t, "\"}");
        add_num(t, ms / 1e3);
    }
}

static void info(struct text *t, coord_map m, const char *key, const char *metric,
                 const char *label)
{
    const char *s;
    size_t n;
    if (!coord_map_str(m, key, &s, &n))
        return;
    family(t, metric, "gauge");
    add(t, "%s{%s=\"", metric, label);
    add_label(t, s, n);
    add(t, "\"} 1\n");
}

/* The stats reply m as an OpenMetrics exposition, "# EOF" last. */
static void render(struct text *t, coord_map m)
{
    info(t, m, "version", "coord_build_info", "version");
    info(t, m, "ledger", "coord_ledger_info", "ledger");
    for (size_t i = 0; i < coord_map_size(m); i++) {
        const char *k;
        size_t kn;
        coord_type ty = coord_map_entry(m, i, &k, &kn);
        char key[96];
        if (kn >= sizeof key || memchr(k, '\0', kn))
            continue;
        memcpy(key, k, kn);
        key[kn] = '\0';
        if (strcmp(key, "rid") == 0 || strcmp(key, "ok") == 0 ||
            strcmp(key, "truncated") == 0)
            continue;
        coord_map sub;
        if (ty == COORD_TYPE_MAP && coord_map_map_at(m, i, &sub)) {
            if (strcmp(key, "limits") == 0)
                limits(t, sub);
            else if (strcmp(key, "requests") == 0)
                requests(t, sub);
            else if (strcmp(key, "latency") == 0)
                latency(t, sub);
        } else if (ty == COORD_TYPE_UINT || ty == COORD_TYPE_INT ||
                   ty == COORD_TYPE_FLOAT || ty == COORD_TYPE_BOOL) {
            top_level(t, key, ty, m, i);
        }
    }
    if (!t->prom)
        add(t, "# EOF\n");
}

/* One `stats` rendered into t; 0, or the coord code of the failure. */
static int scrape(struct ctl *ctl, struct text *t)
{
    int rc = ctl_try_connect(ctl, false);
    if (rc < 0)
        return rc;
    coord_req_t *req = coord_req_new("stats");
    if (!req)
        return COORD_ENOMEM;
    coord_reply_t *reply = NULL;
    rc = coord_call(ctl->c, req, &reply);
    coord_req_free(req);
    if (rc < 0) {
        if (rc == COORD_ECLOSED || rc == COORD_ESYS) {
            coord_close(ctl->c);            /* connect again next time */
            ctl->c = NULL;
        }
        return rc;
    }
    render(t, coord_reply_map(reply));
    coord_reply_free(reply);
    return t->failed ? COORD_ENOMEM : 0;
}

/* ---- HTTP on loopback ---- */

static bool is_loopback(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
    if (sa->sa_family == AF_INET6)
        return IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)sa)->sin6_addr);
    return false;
}

/* "127.0.0.1:9464", "[::1]:9464", "localhost:0".  Returns the listening
 * socket or -1 with the reason printed. */
static int listen_on(const char *spec)
{
    char host[256];
    const char *colon = strrchr(spec, ':');
    if (!colon || colon == spec || !colon[1] || (size_t)(colon - spec) >= sizeof host) {
        fprintf(stderr, "coordctl: stats: --listen needs HOST:PORT (127.0.0.1:9464)\n");
        return -1;
    }
    memcpy(host, spec, (size_t)(colon - spec));
    host[colon - spec] = '\0';
    if (host[0] == '[' && host[strlen(host) - 1] == ']') {
        memmove(host, host + 1, strlen(host));
        host[strlen(host) - 1] = '\0';
    }
    struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV };
    struct addrinfo *res;
    int e = getaddrinfo(host, colon + 1, &hints, &res);
    if (e) {
        fprintf(stderr, "coordctl: stats: --listen %s: %s\n", spec, gai_strerror(e));
        return -1;
    }
    int fd = -1;
    for (struct addrinfo *a = res; a; a = a->ai_next) {
        if (!is_loopback(a->ai_addr)) {
            fprintf(stderr, "coordctl: stats: --listen %s: not a loopback address "
                            "(the broker's stats are its user's: serve them on "
                            "127.0.0.0/8 or ::1 only)\n", spec);
            break;
        }
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        int one = 1;
        if (fd >= 0 && setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) == 0 &&
            bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 16) == 0)
            break;
        fprintf(stderr, "coordctl: stats: --listen %s: %s\n", spec, strerror(errno));
        if (fd >= 0)
            close(fd);
        fd = -1;
        break;
    }
    freeaddrinfo(res);
    return fd;
}

static void send_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return;
        p += w;
        n -= (size_t)w;
    }
}

static void respond(int fd, const char *status, const char *type, const char *body, size_t n)
{
    char head[256];
    int h = snprintf(head, sizeof head,
                     "HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n\r\n", status, type, n);
    send_all(fd, head, (size_t)h);
    send_all(fd, body, n);
}

/* Reads a request head from fd within HTTP_READ_MS; answers it. */
static void serve_one(struct ctl *ctl, int fd)
{
    char buf[HTTP_HEAD_MAX + 1];
    size_t have = 0;
    int64_t deadline = ctl_mono_ms() + HTTP_READ_MS;
    while (!memmem(buf, have, "\r\n\r\n", 4) && !memmem(buf, have, "\n\n", 2)) {
        int64_t left = deadline - ctl_mono_ms();
        struct pollfd p = { .fd = fd, .events = POLLIN };
        if (have == HTTP_HEAD_MAX || left <= 0 || poll(&p, 1, (int)left) <= 0)
            return;
        ssize_t r = recv(fd, buf + have, HTTP_HEAD_MAX - have, 0);
        if (r <= 0)
            return;
        have += (size_t)r;
    }
    buf[have] = '\0';
    static const char text_plain[] = "text/plain; charset=utf-8";
    if (strncmp(buf, "GET ", 4) != 0) {
        respond(fd, "405 Method Not Allowed", text_plain, "GET only\n", 9);
        return;
    }
    char *path = buf + 4, *sp = strchr(path, ' ');
    if (sp)
        *sp = '\0';
    char *q = strchr(path, '?');
    if (q)
        *q = '\0';
    if (strcmp(path, "/metrics") != 0 && strcmp(path, "/") != 0) {
        respond(fd, "404 Not Found", text_plain, "try /metrics\n", 13);
        return;
    }
    /* the head's Accept line, for the format (case-insensitive name) */
    bool om = false;
    for (char *line = strchr(sp ? sp + 1 : path, '\n'); line; line = strchr(line, '\n')) {
        line++;
        if (strncasecmp(line, "accept:", 7) == 0) {
            char *eol = strchr(line, '\n');
            if (eol)
                *eol = '\0';
            om = strstr(line, "application/openmetrics-text") != NULL;
            if (eol)
                *eol = '\n';
        }
    }
    struct text t = { .prom = !om };
    int rc = scrape(ctl, &t);
    if (rc < 0) {
        char msg[160];
        int n = snprintf(msg, sizeof msg, "the broker at %s: %s: %s\n", ctl->socket,
                         ctl_code_name(rc), coord_strerror(rc));
        respond(fd, "503 Service Unavailable", text_plain, msg, (size_t)n);
    } else {
        respond(fd, "200 OK", om ? "application/openmetrics-text; version=1.0.0; charset=utf-8"
                                 : "text/plain; version=0.0.4; charset=utf-8", t.p, t.n);
    }
    free(t.p);
}

static int serve(struct ctl *ctl, const char *spec)
{
    int lfd = listen_on(spec);
    if (lfd < 0)
        return CTL_EXIT_FAIL;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    char host[64] = "?", port[16] = "?";
    if (getsockname(lfd, (struct sockaddr *)&ss, &sl) == 0)
        getnameinfo((struct sockaddr *)&ss, sl, host, sizeof host, port, sizeof port,
                    NI_NUMERICHOST | NI_NUMERICSERV);
    /* the line a supervisor or a test waits for */
    fprintf(stderr, "coordctl: stats: serving metrics on http://%s%s%s:%s/metrics\n",
            strchr(host, ':') ? "[" : "", host, strchr(host, ':') ? "]" : "", port);
    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE || errno == ENFILE)
                continue;
            fprintf(stderr, "coordctl: stats: accept: %s\n", strerror(errno));
            close(lfd);
            return CTL_EXIT_FAIL;
        }
        serve_one(ctl, fd);
        close(fd);
    }
}

int ctl_stats_openmetrics(struct ctl *ctl, int argc, char **argv)
{
    static const struct option longopts[] = {
        { "openmetrics", no_argument, NULL, 'o' },
        { "prometheus", no_argument, NULL, 'p' },
        { "listen", required_argument, NULL, 'l' },
        { "json", no_argument, NULL, 'j' },
        { NULL, 0, NULL, 0 },
    };
    const char *listen_spec = NULL;
    bool prom = false;
    int opt;
    optind = 1;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "+", longopts, NULL)) != -1) {
        switch (opt) {
        case 'o': prom = false; break;
        case 'p': prom = true; break;
        case 'l': listen_spec = optarg; break;
        case 'j': return ctl_usage(ctl, "--json is another format: pick one");
        case ':': return ctl_usage(ctl, "missing value for %s", argv[optind - 1]);
        default: return ctl_usage(ctl, "unknown flag %s", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return ctl_usage(ctl, "unexpected argument %s", argv[optind]);
    if (ctl->json)
        return ctl_usage(ctl, "--json is another format: pick one");
    if (listen_spec)
        return serve(ctl, listen_spec);
    struct text t = { .prom = prom };
    int rc = scrape(ctl, &t);
    if (rc < 0) {
        free(t.p);
        return ctl->c ? ctl_fail_call(ctl, "stats", rc) : ctl_fail_connect(ctl, rc);
    }
    fwrite(t.p, 1, t.n, stdout);
    free(t.p);
    return fflush(stdout) == 0 ? CTL_EXIT_OK : CTL_EXIT_FAIL;
}
