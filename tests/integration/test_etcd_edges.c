/* test_etcd_edges.c - the etcd ledger's edges on the broker's side: an
 * endpoint that is an HTTP server but not etcd (it answers 404 pages) is
 * UNAVAILABLE "not an etcd endpoint" and not reachable; SIGTERM with etcd
 * frozen (SIGSTOP) and 100 live terms exits within LIMIT_EXIT_REVOKE_MS,
 * the revokes made at once instead of 200 ms each in turn; an outage and
 * its end are logged at warn with the endpoint and the error; a campaign
 * waiting in etcd answers at its timeout_ms when etcd freezes; a fake
 * etcd whose write Txns answer without a verdict gets STORAGE ("does not
 * decode"), not FENCED. */
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include "etcd-proc.h"
#include "harness.h"

#define T 10000
static coord_msg m;
static struct broker_proc bp, bp2;
static struct etcd_cluster ec;

/* A loopback HTTP server: its port, its pid in *pid; each connection is
 * served by serve(fd) in a child of its own (they die with the server). */
static int loopback_server(pid_t *pid, void (*serve)(int fd))
{
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t len = sizeof a;
    if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof a) < 0 || listen(s, 16) < 0 ||
        getsockname(s, (struct sockaddr *)&a, &len) < 0)
        return -1;
    *pid = fork();
    if (*pid == 0) {
        signal(SIGCHLD, SIG_IGN);
        for (;;) {
            int c = accept(s, NULL, NULL);
            if (c < 0)
                continue;
            if (fork() == 0) {
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                close(s);
                serve(c);
                _exit(0);
            }
            close(c);
        }
    }
    close(s);
    return ntohs(a.sin_port);
}

/* Every request answered with a 404 page. */
static void serve_404(int c)
{
    static const char page[] = "HTTP/1.1 404 Not Found\r\nContent-Type: text/html\r\n"
                               "Content-Length: 22\r\nConnection: close\r\n\r\n"
                               "<h1>404 Not Found</h1>";
    char buf[4096];
    (void)read(c, buf, sizeof buf);      /* headers and a small body */
    (void)write(c, page, sizeof page - 1);
    close(c);
}

/* bp on the etcd ledger whose one endpoint is a loopback_server(serve):
 * a connection to it (the server's pid in *srv) */
static struct rcl *broker_on_server(void (*serve)(int fd), pid_t *srv)
{
    int port = loopback_server(srv, serve);
    if (port <= 0)
        exit(2);
    char ep[64];
    snprintf(ep, sizeof ep, "http://127.0.0.1:%d", port);
    const char *args[] = { "--ledger", "etcd", "--etcd-endpoints", ep, NULL };
    start_or_exit(&bp, args);
    return connect_or_exit(&bp, NULL);
}

static void test_not_etcd_endpoint(void)
{
    pid_t srv;
    struct rcl *c = broker_on_server(serve_404, &srv);
    coord_enc *e = rcl_begin(c, "leader.campaign", 2);
    coord_enc_kv_cstr(e, "workstream", "ws");
    coord_enc_kv_uint(e, "lease_ms", 5000);
    coord_enc_kv_bool(e, "if_available", true);
    REQUIRE(rcl_send(c) == 0);
    REQUIRE(rcl_reply(c, 2, T, &m) == 0);
    CHECK(msg_code_is(&m, "UNAVAILABLE"));
    coord_bytes msg = msg_bytes(&m, "message");
    CHECK(msg.len && memmem(msg.ptr, msg.len, "not an etcd endpoint", 20));
    REQUIRE(rcl_request(c, "stats", 3) == 0 && rcl_reply(c, 3, T, &m) == 0);
    CHECK(!msg_bool(&m, "ledger_reachable"));
    rcl_close(c);
    stop_and_clean(&bp);
    kill(srv, SIGKILL);
    waitpid(srv, NULL, 0);
}

/* A campaign on ws; its reply's code into m. */
static void campaign(struct rcl *c, uint64_t rid, const char *ws)
{
    coord_enc *e = rcl_begin(c, "leader.campaign", rid);
    coord_enc_kv_cstr(e, "workstream", ws);
    coord_enc_kv_uint(e, "lease_ms", 5000);
    coord_enc_kv_bool(e, "if_available", true);
    REQUIRE(rcl_send(c) == 0);
    REQUIRE(rcl_reply(c, rid, T, &m) == 0);
}

/* The log line of event ev in the broker's log, or NULL (malloc'd). */
static char *log_line(const char *ev)
{
    size_t len;
    char *log = slurp(bp.log, &len);
    char *hit = log ? strstr(log, ev) : NULL;
    char *line = NULL;
    if (hit) {
        char *start = hit, *end = strchr(hit, '\n');
        while (start > log && start[-1] != '\n')
            start--;
        line = strndup(start, end ? (size_t)(end - start) : strlen(start));
    }
    free(log);
    return line;
}

/* An etcd outage and its end are each one warn line with the endpoint and
 * the error (they were debug lines without either). */
static void test_outage_logged(void)
{
    etcd_required();
    REQUIRE(etcd_start(&ec, 1) == 0);
    const char *args[] = { "--ledger", "etcd", "--etcd-endpoints", ec.endpoints, NULL };
    start_or_exit(&bp, args);
    struct rcl *c = connect_or_exit(&bp, NULL);
    campaign(c, 2, "a");
    CHECK(msg_ok(&m));
    char *l = log_line("etcd.unreachable");
    CHECK(l == NULL);
    free(l);
    etcd_signal(&ec, 0, SIGSTOP);
    campaign(c, 3, "b");
    CHECK(msg_code_is(&m, "UNAVAILABLE"));
    l = log_line("etcd.unreachable");
    CHECK(l != NULL);
    if (l) {
        fprintf(stderr, "%s\n", l);
        char want[300];
        snprintf(want, sizeof want, "endpoint=\"%s\"", ec.endpoints);
        CHECK(strstr(l, "WARN") || strstr(l, "warn"));
        CHECK(strstr(l, want) != NULL);
        CHECK(strstr(l, "error=\"") != NULL && !strstr(l, "error=\"\""));
    }
    free(l);
    etcd_signal(&ec, 0, SIGCONT);
    /* the next call that is answered ends the outage */
    uint64_t t0 = now_ms();
    do
        campaign(c, 4, "c");
    while (!msg_ok(&m) && now_ms() - t0 < T);
    CHECK(msg_ok(&m));
    l = log_line("etcd.reachable");
    CHECK(l != NULL && strstr(l, "down_ms=") && strstr(l, "failed_calls="));
    if (l)
        fprintf(stderr, "%s\n", l);
    free(l);
    rcl_close(c);
    stop_and_clean(&bp);
    etcd_stop(&ec);
}

/* 100 live terms, etcd frozen, SIGTERM: the broker exits within the
 * revoke budget (2 s) plus a margin, where each revoke once waited its
 * 200 ms in turn (20 s). */
static void test_shutdown_bounded_etcd_stopped(void)
{
    enum { TERMS = 100 };
    etcd_required();
    REQUIRE(etcd_start(&ec, 1) == 0);
    const char *args[] = { "--ledger", "etcd", "--etcd-endpoints", ec.endpoints, NULL };
    start_or_exit(&bp, args);
    struct rcl *c = connect_or_exit(&bp, NULL);
    for (int i = 0; i < TERMS; i++) {
        char ws[16];
        snprintf(ws, sizeof ws, "ws%d", i);
        coord_enc *e = rcl_begin(c, "leader.campaign", 10 + (uint64_t)i);
        coord_enc_kv_cstr(e, "workstream", ws);
        coord_enc_kv_uint(e, "lease_ms", 60000);
        REQUIRE(rcl_send(c) == 0);
    }
    int granted = 0;
    for (int i = 0; i < TERMS; i++)
        if (rcl_reply(c, 10 + (uint64_t)i, T, &m) == 0 && msg_bool(&m, "granted"))
            granted++;
    CHECK_EQ_U(granted, TERMS);
    etcd_signal(&ec, 0, SIGSTOP);
    uint64_t t0 = now_ms();
    kill(bp.pid, SIGTERM);
    int st = wait_pid_timeout(bp.pid, 60000);
    uint64_t took = now_ms() - t0;
    fprintf(stderr, "SIGTERM with %d terms and etcd stopped: exit after %llu ms\n", TERMS,
            (unsigned long long)took);
    CHECK(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    if (st != -1)
        bp.pid = -1;
    CHECK(took < 2000 + 2500);
    rcl_close(c);
    broker_cleanup(&bp);
    etcd_signal(&ec, 0, SIGCONT);
    etcd_stop(&ec);
}

/* A campaign waiting in etcd for another broker's term answers at its
 * timeout_ms when etcd freezes meanwhile: its re-read in flight to the
 * frozen etcd once held it to the call's own limit (2 s), answering
 * UNAVAILABLE at about 3 s for a 1.5 s timeout. */
static void test_campaign_timeout_etcd_frozen(void)
{
    etcd_required();
    REQUIRE(etcd_start(&ec, 1) == 0);
    const char *args[] = { "--ledger", "etcd", "--etcd-endpoints", ec.endpoints, NULL };
    start_or_exit(&bp, args);
    start_or_exit(&bp2, args);
    struct rcl *a = connect_or_exit(&bp, NULL), *b = connect_or_exit(&bp2, NULL);
    coord_enc *e = rcl_begin(a, "leader.campaign", 1);
    coord_enc_kv_cstr(e, "workstream", "held");
    coord_enc_kv_uint(e, "lease_ms", 60000);
    REQUIRE(rcl_send(a) == 0);
    REQUIRE(rcl_reply(a, 1, T, &m) == 0);
    REQUIRE(msg_ok(&m) && msg_bool(&m, "granted"));
    uint64_t t0 = now_ms();
    e = rcl_begin(b, "leader.campaign", 2);
    coord_enc_kv_cstr(e, "workstream", "held");
    coord_enc_kv_uint(e, "lease_ms", 5000);
    coord_enc_kv_uint(e, "timeout_ms", 1500);
    REQUIRE(rcl_send(b) == 0);
    CHECK_EQ(rcl_reply(b, 2, 300, &m), -2);      /* waits in etcd for A's term */
    etcd_signal(&ec, 0, SIGSTOP);
    REQUIRE(rcl_reply(b, 2, T, &m) == 0);
    uint64_t took = now_ms() - t0;
    coord_bytes code = msg_bytes(&m, "code");
    fprintf(stderr, "campaign with timeout_ms 1500, etcd frozen at 300 ms: %.*s after %llu ms\n",
            (int)code.len, code.ptr ? (const char *)code.ptr : "", (unsigned long long)took);
    CHECK(msg_code_is(&m, "TIMEOUT") || msg_code_is(&m, "UNAVAILABLE"));
    CHECK(took >= 1450 && took < 1500 + 350);
    etcd_signal(&ec, 0, SIGCONT);
    rcl_close(a);
    rcl_close(b);
    stop_and_clean(&bp2);
    stop_and_clean(&bp);
    etcd_stop(&ec);
}

/* ---- a fake etcd whose write Txns answer without a verdict ----
 *
 * Serves etcd's gateway on loopback well enough for a campaign to be
 * granted (reads answer empty ranges, the term's check answers the leader
 * key as the term's, lease grants and keepalives a 60 s TTL), but every
 * Txn with compares and no lease (commit, claim, abandon, define) answers
 * 200 {"header":{...}}: neither "succeeded" nor "responses", an answer
 * that says nothing of what was stored. */

static const char *fake_answer(const char *path, const char *body)
{
    if (strcmp(path, "/v3/lease/grant") == 0)
        return "{\"header\":{\"revision\":\"41\"},\"ID\":\"7\",\"TTL\":\"60\"}";
    if (strcmp(path, "/v3/lease/keepalive") == 0)
        return "{\"result\":{\"header\":{\"revision\":\"41\"},\"ID\":\"7\",\"TTL\":\"60\"}}";
    if (strcmp(path, "/v3/kv/txn") != 0)
        return "{\"header\":{\"revision\":\"41\"}}";
    if (strstr(body, "\"lease\":"))             /* the campaign's create */
        return "{\"header\":{\"revision\":\"42\"},\"succeeded\":true}";
    if (!strstr(body, "\"compare\":[]"))        /* a write: no verdict */
        return "{\"header\":{\"revision\":\"43\"}}";
    int ranges = 0;
    for (const char *p = body; (p = strstr(p, "request_range")); p++)
        ranges++;
    if (ranges == 2)                            /* the term's check: the key is the term's */
        return "{\"header\":{\"revision\":\"43\"},\"succeeded\":true,\"responses\":["
               "{\"response_range\":{\"kvs\":[{\"key\":\"eA==\",\"create_revision\":\"42\","
               "\"mod_revision\":\"42\",\"lease\":\"7\"}],\"count\":\"1\"}},"
               "{\"response_range\":{}}]}";
    static char reads[512];
    strcpy(reads, "{\"header\":{\"revision\":\"41\"},\"succeeded\":true,\"responses\":[");
    for (int i = 0; i < ranges; i++)
        strcat(reads, i ? ",{\"response_range\":{}}" : "{\"response_range\":{}}");
    strcat(reads, "]}");
    return reads;
}

static void fake_serve(int c)
{
    static char buf[1 << 16];
    size_t have = 0;
    for (;;) {
        char *end;
        while (!(end = memmem(buf, have, "\r\n\r\n", 4))) {
            ssize_t n = have < sizeof buf - 1 ? read(c, buf + have, sizeof buf - 1 - have) : -1;
            if (n <= 0)
                _exit(0);
            have += (size_t)n;
        }
        size_t head = (size_t)(end - buf) + 4, len = 0;
        buf[head - 1] = 0;
        const char *cl = strcasestr(buf, "content-length:");
        if (cl)
            len = strtoul(cl + 15, NULL, 10);
        while (have < head + len) {
            ssize_t n = have < sizeof buf - 1 ? read(c, buf + have, sizeof buf - 1 - have) : -1;
            if (n <= 0)
                _exit(0);
            have += (size_t)n;
        }
        char path[256] = "", body[1 << 15];
        sscanf(buf, "POST %255s", path);
        size_t bl = len < sizeof body - 1 ? len : sizeof body - 1;
        memcpy(body, buf + head, bl);
        body[bl] = 0;
        const char *ans = fake_answer(path, body);
        char out[1024];
        int n = snprintf(out, sizeof out, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                         "Content-Length: %zu\r\n\r\n%s", strlen(ans), ans);
        if (write(c, out, (size_t)n) != n)
            _exit(0);
        memmove(buf, buf + head + len, have - head - len);
        have -= head + len;
    }
}


/* A write Txn answered 200 without a verdict (no "succeeded", no
 * "responses") is an answer that does not decode: STORAGE, not a refusal
 * read from ranges that are not there (it was FENCED: "generation is
 * stale" from an empty leader range). */
static void test_write_answer_without_verdict(void)
{
    pid_t srv;
    struct rcl *c = broker_on_server(fake_serve, &srv);
    coord_enc *e = rcl_begin(c, "leader.campaign", 1);
    coord_enc_kv_cstr(e, "workstream", "w");
    coord_enc_kv_uint(e, "lease_ms", 60000);
    REQUIRE(rcl_send(c) == 0);
    REQUIRE(rcl_reply(c, 1, T, &m) == 0);
    REQUIRE(msg_ok(&m) && msg_bool(&m, "granted"));
    uint64_t gen = msg_uint(&m, "generation");
    CHECK_EQ_U(gen, 42);
    static const char *const ops[] = { "leader.commit", "leader.claim", "leader.abandon" };
    for (int i = 0; i < 3; i++) {
        e = rcl_begin(c, ops[i], 10 + (uint64_t)i);
        coord_enc_kv_cstr(e, "workstream", "w");
        coord_enc_kv_uint(e, "generation", gen);
        coord_enc_kv_cstr(e, "op_id", "op-1");
        if (i == 2)
            coord_enc_kv_cstr(e, "reason", "not needed");
        REQUIRE(rcl_send(c) == 0);
        REQUIRE(rcl_reply(c, 10 + (uint64_t)i, T, &m) == 0);
        coord_bytes code = msg_bytes(&m, "code"), msg = msg_bytes(&m, "message");
        fprintf(stderr, "%s answered without a verdict: %.*s (%.*s)\n", ops[i],
                (int)code.len, code.ptr ? (const char *)code.ptr : "", (int)msg.len,
                msg.ptr ? (const char *)msg.ptr : "");
        CHECK(msg_code_is(&m, "STORAGE"));
        CHECK(msg.len && memmem(msg.ptr, msg.len, "does not decode", 15));
    }
    /* the term is still the leader's: nothing was decided from the answers */
    e = rcl_begin(c, "leader.renew", 20);
    coord_enc_kv_cstr(e, "workstream", "w");
    coord_enc_kv_uint(e, "generation", gen);
    REQUIRE(rcl_send(c) == 0);
    REQUIRE(rcl_reply(c, 20, T, &m) == 0);
    CHECK(msg_ok(&m));
    rcl_close(c);
    stop_and_clean(&bp);
    kill(srv, SIGKILL);
    waitpid(srv, NULL, 0);
}

int main(int argc, char **argv)
{
    coord_msg_init(&m);
    static const struct test_case tests[] = {
        { "not_etcd_endpoint", test_not_etcd_endpoint },
        { "shutdown_bounded_etcd_stopped", test_shutdown_bounded_etcd_stopped },
        { "outage_logged", test_outage_logged },
        { "campaign_timeout_etcd_frozen", test_campaign_timeout_etcd_frozen },
        { "write_answer_without_verdict", test_write_answer_without_verdict },
        { NULL, NULL },
    };
    int rc = run_tests(argc, argv, tests);
    coord_msg_destroy(&m);
    return rc;
}
