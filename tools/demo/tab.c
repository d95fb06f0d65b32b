/* tab.c - coord-demo-tab, the demo's "tab" written in C against libcoord
 * (tools/demo/demo.py runs it beside the Node.js and Python tabs and a
 * coordctl one).  It speaks a little HTTP/1.0 to the demo's backend on
 * loopback, as the other tabs do:
 *
 *   coord-demo-tab fetch URL
 *       GET URL and print the body (the CMD of the coordctl tab's `once`)
 *   coord-demo-tab refresh NAME BASE
 *       single-flight GET BASE/session through coord_once with
 *       stale-while-revalidate, then print "got VALUE (SOURCE)"
 *   coord-demo-tab outbox NAME BASE OP...
 *       campaign for the workstream "outbox" and drain OPs: read
 *       leader.pending and reconcile each entry by op id with the backend
 *       (GET BASE/sent?op=ID), then claim, POST BASE/send?op=ID, commit
 *
 * Results are shared as "coordctl once result format 1" (byte 0 = 1, byte
 * 1 = exit status, then stdout) so that every tab, coordctl included, can
 * read every other tab's result.  Blocking calls only: the lease is renewed
 * between operations, which take milliseconds.  Exit status: 0 done, 1 an
 * error, 3 leadership lost (a late commit FENCED). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include "coord.h"

#define LEASE_MS 2000          /* short, so that a frozen leader is fenced soon */
#define MAX_AGE_MS 1000        /* a session is fresh this long ... */
#define STALE_MS 60000         /* ... then served stale this long while revalidated */
#define BODY_MAX 4096          /* the backend's answers are a few bytes */

static const char *tab = "c";

/* ---- a tiny HTTP/1.0 client for http://127.0.0.1:PORT/PATH ---- */

/* Sends method + url, puts the body (NUL-terminated, at most BODY_MAX-1
 * bytes) in body.  Returns the HTTP status, or -1. */
static int http(const char *method, const char *url, char *body)
{
    unsigned port;
    char path[1024];
    if (sscanf(url, "http://127.0.0.1:%u%1023s", &port, path) != 2 || port > 65535) {
        fprintf(stderr, "%s: bad url %s\n", tab, url);
        return -1;
    }
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    char req[1200];
    int n = snprintf(req, sizeof req, "%s %s HTTP/1.0\r\nHost: 127.0.0.1\r\n"
                     "Content-Length: 0\r\n\r\n", method, path);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0 ||
        write(fd, req, (size_t)n) != n) {
        fprintf(stderr, "%s: %s %s: %s\n", tab, method, url, strerror(errno));
        close(fd);
        return -1;
    }
    char buf[BODY_MAX + 1024];
    size_t got = 0;
    ssize_t r;
    while (got < sizeof buf - 1 && (r = read(fd, buf + got, sizeof buf - 1 - got)) > 0)
        got += (size_t)r;
    close(fd);
    buf[got] = '\0';
    int status = 0;
    char *sep = strstr(buf, "\r\n\r\n");
    if (sscanf(buf, "HTTP/%*s %d", &status) != 1 || !sep)
        return -1;
    snprintf(body, BODY_MAX, "%s", sep + 4);
    return status;
}

/* ---- refresh: single-flight with stale-while-revalidate ---- */

struct fetch_ctx {
    const char *url;
};

/* coord_once's work: GET the session and share it as format 1. */
static int fetch_work(void *ud, void **result, size_t *len, char **err_code,
                      char **err_msg)
{
    struct fetch_ctx *f = ud;
    char body[BODY_MAX];
    if (http("GET", f->url, body) != 200) {
        *err_code = strdup("BACKEND");
        return COORD_WORK_RETRYABLE;
    }
    size_t n = strlen(body);
    unsigned char *r = malloc(n + 3);
    if (!r)
        return COORD_WORK_RETRYABLE;
    r[0] = 1;                              /* format 1 */
    r[1] = 0;                              /* exit status */
    memcpy(r + 2, body, n);
    r[n + 2] = '\n';
    *result = r;
    *len = n + 3;
    (void)err_msg;
    return COORD_WORK_OK;
}

static int refresh(const char *base)
{
    char url[1024];
    snprintf(url, sizeof url, "%s/session?tab=%s", base, tab);
    struct fetch_ctx f = { url };
    coord_t *c;
    int rc = coord_connect(&c, NULL);
    if (rc < 0) {
        fprintf(stderr, "%s: connect: %s\n", tab, coord_error_message(NULL));
        return 1;
    }
    coord_flight_opts o = { .max_age_ms = MAX_AGE_MS, .stale_ms = STALE_MS };
    coord_flight out;
    rc = coord_once(c, "session", 7, &o, MAX_AGE_MS + STALE_MS, fetch_work, &f, &out);
    if (rc < 0 || out.role != COORD_FLIGHT_RESULT) {
        fprintf(stderr, "%s: once: %s\n", tab, rc < 0 ? coord_strerror(rc) : "failed");
        coord_close(c);
        return 1;
    }
    const char *value = (const char *)out.result + 2;     /* past the header */
    int vlen = (int)out.result_len - 3;                    /* and the newline */
    const char *source = out.ran ? (out.revalidation ? "owner, revalidated it" : "owner, fetched it")
                       : out.stale ? "stale, served at once"
                       : out.from_record ? "record" : "live, from the owner";
    printf("got %.*s (%s)\n", vlen < 0 ? 0 : vlen, value, source);
    coord_flight_clear(&out);
    coord_close(c);
    return 0;
}

/* ---- outbox: claim, effect by op id, commit ---- */

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

struct term {
    coord_t *c;
    uint64_t gen;
    int64_t renewed;
    char done[64][257];        /* ops settled in this term (pending first) */
    int ndone;
    char skipped[1024];        /* ops applied by earlier terms */
};

static bool settled_here(struct term *t, const char *op)
{
    for (int i = 0; i < t->ndone; i++)
        if (!strcmp(t->done[i], op))
            return true;
    if (t->ndone < 64)
        snprintf(t->done[t->ndone++], sizeof t->done[0], "%s", op);
    return false;
}

/* Renews the lease when a third of it has passed.  0, or the error. */
static int keep_lease(struct term *t)
{
    if (now_ms() - t->renewed < LEASE_MS / 3)
        return 0;
    int rc = coord_leader_renew(t->c, "outbox", 6, t->gen, NULL);
    if (rc == 0)
        t->renewed = now_ms();
    return rc;
}

/* Commits op; prints and returns 3 when FENCED (a late commit). */
static int commit(struct term *t, const char *op)
{
    coord_commit_result r;
    int rc = coord_leader_commit(t->c, "outbox", 6, t->gen, op, NULL, NULL, 0, &r);
    if (rc == COORD_EFENCED) {
        printf("late commit of %s refused: FENCED (generation %llu is not the live one)\n",
               op, (unsigned long long)t->gen);
        return 3;
    }
    if (rc < 0) {
        fprintf(stderr, "%s: commit %s: %s\n", tab, op, coord_strerror(rc));
        return 1;
    }
    return 0;
}

/* One op: claim it; reconcile an earlier leader's claim by asking the
 * backend about this op id; else perform the effect; then commit. */
static int drain_op(struct term *t, const char *base, const char *op)
{
    char url[1200], body[BODY_MAX];
    if (settled_here(t, op))
        return 0;
    int rc = keep_lease(t);
    coord_claim_result cl = { 0 };
    if (rc == 0)
        rc = coord_leader_claim(t->c, "outbox", 6, t->gen, op, &cl);
    if (rc != 0) {
        fprintf(stderr, "%s: claim %s: %s\n", tab, op, coord_strerror(rc));
        return rc == COORD_EFENCED ? 3 : 1;
    }
    if (!cl.claimed) {                     /* applied or abandoned before */
        size_t l = strlen(t->skipped);
        snprintf(t->skipped + l, sizeof t->skipped - l, " %s", op);
        return 0;
    }
    if (cl.reconcile) {
        snprintf(url, sizeof url, "%s/sent?op=%s", base, op);
        if (http("GET", url, body) != 200)
            return 1;
        if (!strcmp(body, "applied")) {
            printf("%s: claimed by generation %llu and never committed; the backend "
                   "has it: commit, do not resend\n", op,
                   (unsigned long long)cl.previous_generation);
            return commit(t, op);
        }
        printf("%s: claimed by generation %llu; the backend never got it: send it\n",
               op, (unsigned long long)cl.previous_generation);
    }
    snprintf(url, sizeof url, "%s/send?op=%s&tab=%s&gen=%llu", base, op, tab,
             (unsigned long long)t->gen);
    if (http("POST", url, body) != 200)
        return 1;
    rc = commit(t, op);
    if (rc == 0)
        printf("%s: sent (%s), committed\n", op, body);
    return rc;
}

static int outbox(const char *base, int nops, char **ops)
{
    coord_options opts;
    coord_options_init(&opts);
    opts.client_name = tab;
    static struct term t;
    if (coord_connect(&t.c, &opts) < 0) {
        fprintf(stderr, "%s: connect: %s\n", tab, coord_error_message(NULL));
        return 1;
    }
    coord_leader_opts lo = { .lease_ms = LEASE_MS };
    bool granted;
    int rc = coord_leader_campaign(t.c, "outbox", 6, &lo, &t.gen, &granted);
    if (rc < 0 || !granted) {
        fprintf(stderr, "%s: campaign: %s\n", tab, coord_strerror(rc));
        coord_close(t.c);
        return 1;
    }
    t.renewed = now_ms();
    printf("leading the outbox as generation %llu\n", (unsigned long long)t.gen);
    fflush(stdout);

    /* what earlier leaders claimed and never settled, oldest first */
    coord_reply_t *p;
    rc = coord_leader_pending(t.c, "outbox", 6, 0, &p);
    if (rc == 0) {
        coord_map m = coord_reply_map(p), e;
        size_t n = coord_map_array_len(m, "ops");
        for (size_t i = 0; rc == 0 && i < n && coord_map_array_at(m, "ops", i, &e); i++) {
            const char *s;
            size_t sl;
            char op[257];
            if (!coord_map_str(e, "op_id", &s, &sl) || sl >= sizeof op)
                continue;
            memcpy(op, s, sl);
            op[sl] = '\0';
            printf("pending from an earlier leader: %s\n", op);
            rc = drain_op(&t, base, op);
        }
        coord_reply_free(p);
    }
    for (int i = 0; rc == 0 && i < nops; i++)
        rc = drain_op(&t, base, ops[i]);
    if (rc == 0 && t.skipped[0])
        printf("settled by earlier leaders, skipped:%s\n", t.skipped);
    if (rc == 0 && coord_leader_resign(t.c, "outbox", 6, t.gen) == 0)
        printf("outbox drained, resigned\n");
    coord_close(t.c);
    return rc < 0 ? 1 : rc;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 3 && !strcmp(argv[1], "fetch")) {
        char body[BODY_MAX];
        if (http("GET", argv[2], body) != 200)
            return 1;
        printf("%s\n", body);
        return 0;
    }
    if (argc == 4 && !strcmp(argv[1], "refresh")) {
        tab = argv[2];
        return refresh(argv[3]);
    }
    if (argc >= 4 && !strcmp(argv[1], "outbox")) {
        tab = argv[2];
        return outbox(argv[3], argc - 4, argv + 4);
    }
    fprintf(stderr, "usage: coord-demo-tab fetch URL | refresh NAME BASE | "
                    "outbox NAME BASE OP...\n");
    return 2;
}
