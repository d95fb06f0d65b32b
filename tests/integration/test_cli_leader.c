/* test_cli_leader.c - libcoord's leadership and channel calls, and
 * `coordctl leader`, `leader-run`, `disable`, `enable`, `watch`,
 * `publish` and `subscribe` as real processes against a real broker.
 *
 * $COORD_BROKER is coordd and $COORDCTL is coordctl (set by meson).
 * Nothing waits with a sleep where an event can be awaited: commands report
 * on a pipe, watch and subscribe are read line by line, and exits are
 * awaited through pidfds. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include "coord.h"
#include "harness.h"
#include "leader-util.h"

#define T 10000

static struct broker_proc bp;

static void start(void)
{
    start_or_exit(&bp, NULL);
}

static void stop(void)
{
    stop_and_clean(&bp);
}

static coord_t *lib_client(void)
{
    return lib_connect(&bp, NULL, "test-cli-leader");
}

/* ---- processes (proc.h) ---- */

/* coordctl runs (leader-util.h): fd5 >= 0 is the command's descriptor 5 */
static void ctl_start(struct run *r, int fd5, const char *const *args)
{
    leader_ctl_start(r, &bp, fd5, args);
}

static int ctl_run(struct run *r, const char *const *args)
{
    return leader_ctl_run(r, &bp, args, T);
}

/* Every substring of subs (NULL-ended) is in line. */
static bool line_has_all(const char *line, const char *const *subs)
{
    for (; *subs; subs++)
        if (!strstr(line, *subs))
            return false;
    return true;
}

/* Skips lines until one has every substring of subs; false (after saying
 * what was seen) when none came within timeout_ms. */
static bool expect_line(struct run *r, int which, int timeout_ms, const char *const *subs)
{
    size_t from = r->pos[which];
    uint64_t deadline = now_ms() + (uint64_t)timeout_ms;
    for (;;) {
        uint64_t now = now_ms();
        const char *l = now < deadline ? run_line(r, which, (int)(deadline - now)) : NULL;
        if (!l) {
            fprintf(stderr, "no line with");
            for (const char *const *s = subs; *s; s++)
                fprintf(stderr, " [%s]", *s);
            fprintf(stderr, " among:\n%s\n", r->text[which].p ? r->text[which].p + from : "");
            return false;
        }
        if (line_has_all(l, subs))
            return true;
    }
}

#define EXPECT(r, which, ...) \
    expect_line((r), (which), T, (const char *const[]){ __VA_ARGS__, NULL })

/* ---- JSON, just enough to validate watch --json lines ---- */

static const char *json_ws(const char *s)
{
    while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r')
        s++;
    return s;
}

static const char *json_value(const char *s, int depth);

static const char *json_string(const char *s)
{
    if (*s != '"')
        return NULL;
    for (s++; *s && *s != '"'; s++) {
        if ((unsigned char)*s < 0x20)
            return NULL;
        if (*s == '\\') {
            s++;
            if (*s == 'u') {
                for (int i = 1; i <= 4; i++)
                    if (!strchr("0123456789abcdefABCDEF", s[i]) || !s[i])
                        return NULL;
                s += 4;
            } else if (!*s || !strchr("\"\\/bfnrt", *s)) {
                return NULL;
            }
        }
    }
    return *s == '"' ? s + 1 : NULL;
}

static const char *json_number(const char *s)
{
    const char *b = s;
    if (*s == '-')
        s++;
    if (*s < '0' || *s > '9')
        return NULL;
    while ((*s >= '0' && *s <= '9') || *s == '.' || *s == 'e' || *s == 'E' ||
           *s == '+' || *s == '-')
        s++;
    return s > b ? s : NULL;
}

static const char *json_value(const char *s, int depth)
{
    if (depth > 32)
        return NULL;
    s = json_ws(s);
    if (*s == '{' || *s == '[') {
        char close = *s == '{' ? '}' : ']';
        bool obj = *s == '{';
        s = json_ws(s + 1);
        if (*s == close)
            return s + 1;
        for (;;) {
            if (obj) {
                if (!(s = json_string(json_ws(s))))
                    return NULL;
                s = json_ws(s);
                if (*s++ != ':')
                    return NULL;
            }
            if (!(s = json_value(s, depth + 1)))
                return NULL;
            s = json_ws(s);
            if (*s == close)
                return s + 1;
            if (*s++ != ',')
                return NULL;
        }
    }
    if (*s == '"')
        return json_string(s);
    if (!strncmp(s, "true", 4))
        return s + 4;
    if (!strncmp(s, "false", 5))
        return s + 5;
    if (!strncmp(s, "null", 4))
        return s + 4;
    return json_number(s);
}

/* line is exactly one JSON object */
static bool json_object_line(const char *line)
{
    const char *s = json_ws(line);
    if (*s != '{')
        return false;
    s = json_value(s, 0);
    return s && *json_ws(s) == '\0';
}

/* The unsigned number after "key": in a JSON text; false when absent. */
static bool json_uint(const char *j, const char *key, uint64_t *v)
{
    char pat[80];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(j, pat);
    if (!p)
        return false;
    char *end;
    *v = strtoull(p + strlen(pat), &end, 10);
    return end != p + strlen(pat);
}

/* ==== the library ==== */

static void test_lib_leader(void)
{
    start();
    coord_t *a = lib_client(), *b = lib_client();
    const char *ws = "lib-ws";
    size_t wl = strlen(ws);

    uint64_t g1 = 0, g = 0;
    bool granted = false;
    CHECK_EQ_U(coord_leader_campaign(a, ws, wl, NULL, &g1, &granted), 0);
    CHECK(granted);
    CHECK(g1 > 0);

    /* if_available while someone leads: answered, not granted */
    coord_leader_opts o = { .if_available = true };
    granted = true;
    g = 99;
    CHECK_EQ_U(coord_leader_campaign(b, ws, wl, &o, &g, &granted), 0);
    CHECK(!granted);
    CHECK_EQ_U(g, 0);
    /* a connection leads once */
    CHECK_EQ_U(coord_leader_campaign(a, ws, wl, NULL, NULL, NULL), COORD_EINVALID_OPTIONS);
    /* the broker refuses contradictory options */
    coord_leader_opts bad = { .steal = true, .timeout_ms = 10 };
    CHECK_EQ_U(coord_leader_campaign(b, ws, wl, &bad, NULL, NULL), COORD_EINVALID_OPTIONS);

    uint64_t lease = 0;
    CHECK_EQ_U(coord_leader_renew(a, ws, wl, g1, &lease), 0);
    CHECK_EQ_U(lease, COORD_LEADER_DEFAULT_LEASE_MS);   /* lease_ms 0: the default */

    coord_commit_result cr;
    CHECK_EQ_U(coord_leader_commit(a, ws, wl, g1, "op-1", "cfg", "v1", 2, &cr), 0);
    CHECK(cr.applied && !cr.duplicate);
    CHECK_EQ_U(cr.generation, g1);
    CHECK_EQ_U(coord_leader_commit(a, ws, wl, g1, "op-1", "cfg", "v2", 2, &cr), 0);
    CHECK(!cr.applied && cr.duplicate);
    CHECK_EQ_U(cr.generation, g1);
    /* an empty value, NULL pointer */
    CHECK_EQ_U(coord_leader_commit(a, ws, wl, g1, "op-2", "empty", NULL, 0, &cr), 0);
    CHECK(cr.applied);

    void *v = NULL;
    size_t vn = 0;
    CHECK_EQ_U(coord_leader_read(b, ws, wl, "cfg", &v, &vn, &g), 0);
    CHECK_EQ_U(vn, 2);
    CHECK(v && !strcmp(v, "v1"));   /* NUL after the bytes */
    CHECK_EQ_U(g, g1);
    free(v);
    CHECK_EQ_U(coord_leader_read(b, ws, wl, "empty", &v, &vn, NULL), 0);
    CHECK(v && vn == 0 && ((char *)v)[0] == '\0');
    free(v);
    v = (void *)1;
    CHECK_EQ_U(coord_leader_read(b, ws, wl, "nothing", &v, &vn, &g), COORD_ENOT_FOUND);
    CHECK(v == NULL);

    coord_reply_t *info = NULL;
    CHECK_EQ_U(coord_leader_info(b, ws, wl, &info), 0);
    REQUIRE(info);
    coord_map m = coord_reply_map(info);
    uint64_t u = 0;
    const char *s;
    size_t sn;
    CHECK(coord_map_str(m, "state", &s, &sn) && sn == 7 && !memcmp(s, "leading", 7));
    CHECK(coord_map_uint(m, "live_generation", &u) && u == g1);
    CHECK(coord_map_uint(m, "conn", &u) && u == coord_conn_id(a));
    CHECK(coord_map_uint(m, "pid", &u) && u == (uint64_t)getpid());
    CHECK(coord_map_uint(m, "lease_left_ms", &u) && u <= COORD_LEADER_DEFAULT_LEASE_MS);
    coord_reply_free(info);

    /* stolen: a is told, and fenced */
    coord_leader_opts st = { .steal = true };
    uint64_t g2 = 0;
    CHECK_EQ_U(coord_leader_campaign(b, ws, wl, &st, &g2, &granted), 0);
    CHECK(granted);
    CHECK(g2 > g1);     /* increasing, not consecutive (the id allocator) */
    coord_reply_t *ev = NULL;
    CHECK_EQ_U(coord_next_event(a, T, &ev), 0);
    coord_leader_lost lost;
    CHECK(coord_event_leader_lost(ev, &lost));
    CHECK_EQ_U(lost.generation, g1);
    CHECK(lost.workstream_len == wl && !memcmp(lost.workstream, ws, wl));
    CHECK(lost.reason_len == 6 && !memcmp(lost.reason, "stolen", 6));
    CHECK(!coord_event_message(ev, NULL) && !coord_event_lifecycle(ev, NULL));
    coord_reply_free(ev);
    CHECK_EQ_U(coord_leader_commit(a, ws, wl, g1, "op-3", "cfg", "x", 1, &cr), COORD_EFENCED);
    CHECK(!cr.applied);
    CHECK_EQ_U(coord_leader_renew(a, ws, wl, g1, NULL), COORD_EFENCED);
    CHECK_EQ_U(coord_leader_resign(a, ws, wl, g1), COORD_EFENCED);

    /* the kill switch */
    uint64_t g3 = 0;
    CHECK_EQ_U(coord_leader_disable(a, ws, wl, &g3), 0);
    CHECK(g3 > g2);
    CHECK_EQ_U(coord_next_event(b, T, &ev), 0);
    CHECK(coord_event_leader_lost(ev, &lost) && lost.generation == g2 &&
          lost.reason_len == 8 && !memcmp(lost.reason, "disabled", 8));
    coord_reply_free(ev);
    CHECK_EQ_U(coord_leader_campaign(b, ws, wl, NULL, NULL, NULL), COORD_EDISABLED);
    CHECK_EQ_U(coord_leader_info(b, ws, wl, &info), 0);
    bool dis = false;
    CHECK(coord_map_bool(coord_reply_map(info), "disabled", &dis) && dis);
    coord_reply_free(info);
    CHECK_EQ_U(coord_leader_enable(a, ws, wl), 0);
    CHECK_EQ_U(coord_leader_campaign(b, ws, wl, NULL, &g, &granted), 0);
    CHECK(g > g3);
    CHECK_EQ_U(coord_leader_resign(b, ws, wl, g), 0);

    /* a timeout while someone else leads */
    CHECK_EQ_U(coord_leader_campaign(a, ws, wl, NULL, &g, &granted), 0);
    coord_leader_opts to = { .timeout_ms = 50 };
    CHECK_EQ_U(coord_leader_campaign(b, ws, wl, &to, &g, &granted), COORD_ETIMEOUT);
    CHECK(!granted && g == 0);

    CHECK_EQ_U(coord_leader_campaign(NULL, ws, wl, NULL, NULL, NULL), COORD_EINVAL);
    CHECK_EQ_U(coord_leader_campaign(a, NULL, 3, NULL, NULL, NULL), COORD_EINVAL);
    CHECK_EQ_U(coord_leader_read(a, ws, wl, "k", NULL, NULL, NULL), COORD_EINVAL);

    coord_close(a);
    coord_close(b);
    stop();
}

static void test_lib_channels(void)
{
    start();
    coord_t *a = lib_client(), *b = lib_client();
    const char bin[] = { 'x', '\0', 'y' };
    uint64_t n = 99;

    CHECK_EQ_U(coord_publish(b, "news", 4, "nobody", 6, &n), 0);
    CHECK_EQ_U(n, 0);
    CHECK_EQ_U(coord_subscribe(a, "news", 4), 0);
    CHECK_EQ_U(coord_subscribe(a, "news", 4), 0);          /* twice = once */
    CHECK_EQ_U(coord_publish(b, "news", 4, bin, sizeof bin, &n), 0);
    CHECK_EQ_U(n, 1);
    coord_reply_t *ev = NULL;
    CHECK_EQ_U(coord_next_event(a, T, &ev), 0);
    coord_message msg;
    REQUIRE(coord_event_message(ev, &msg));
    CHECK(msg.channel_len == 4 && !memcmp(msg.channel, "news", 4));
    CHECK(msg.data_len == 3 && !memcmp(msg.data, bin, 3));
    CHECK_EQ_U(msg.conn, coord_conn_id(b));
    coord_reply_free(ev);
    /* not to the publisher itself */
    CHECK_EQ_U(coord_subscribe(b, "news", 4), 0);
    CHECK_EQ_U(coord_publish(b, "news", 4, NULL, 0, &n), 0);
    CHECK_EQ_U(n, 1);
    CHECK_EQ_U(coord_next_event(a, T, &ev), 0);
    CHECK(coord_event_message(ev, &msg) && msg.data_len == 0);
    coord_reply_free(ev);
    CHECK_EQ_U(coord_next_event(b, 100, &ev), COORD_EAGAIN);

    CHECK_EQ_U(coord_unsubscribe(a, "news", 4), 0);
    CHECK_EQ_U(coord_unsubscribe(a, "news", 4), 0);
    CHECK_EQ_U(coord_publish(b, "news", 4, "z", 1, &n), 0);
    CHECK_EQ_U(n, 0);

    CHECK_EQ_U(coord_publish(b, "-locks", 6, "z", 1, &n), COORD_ENAME_RESERVED);
    CHECK_EQ_U(coord_subscribe(b, "-other", 6), COORD_ENAME_RESERVED);
    static char big[64 * 1024 + 1];
    CHECK_EQ_U(coord_publish(b, "news", 4, big, sizeof big, &n), COORD_ETOO_LARGE);

    /* lifecycle events of the broker's channels */
    CHECK_EQ_U(coord_subscribe(a, "-leaders", 8), 0);
    uint64_t g = 0;
    CHECK_EQ_U(coord_leader_campaign(b, "w", 1, NULL, &g, NULL), 0);
    CHECK_EQ_U(coord_next_event(a, T, &ev), 0);
    coord_lifecycle lc;
    REQUIRE(coord_event_lifecycle(ev, &lc));
    CHECK(lc.channel_len == 8 && !memcmp(lc.channel, "-leaders", 8));
    CHECK(lc.what_len == 7 && !memcmp(lc.what, "elected", 7));
    CHECK(lc.at_ms > 0);
    uint64_t eg = 0;
    CHECK(coord_map_uint(coord_reply_map(ev), "generation", &eg) && eg == g);
    coord_reply_free(ev);

    coord_close(a);
    coord_close(b);
    stop();
}

/* ==== coordctl leader-run, leader, disable, enable ==== */

static void test_run_generation(void)
{
    start();
    char file[400];
    snprintf(file, sizeof file, "%s/gen", bp.dir);
    setenv("OUT_FILE", file, 1);
    struct run r;
    CHECK_EQ_U(ctl_run(&r, ARGS("leader-run", "gw", "--",
               "sh", "-c", "echo $COORD_GENERATION $COORD_WORKSTREAM > \"$OUT_FILE\"; exit 7")),
               7);
    CHECK_EQ_U(r.text[ERR].n, 0);
    run_free(&r);

    FILE *f = fopen(file, "r");
    REQUIRE(f);
    unsigned long long gen = 0;
    char wsname[64] = "";
    CHECK(fscanf(f, "%llu %63s", &gen, wsname) == 2);
    fclose(f);
    CHECK(gen > 0);
    CHECK(!strcmp(wsname, "gw"));

    CHECK_EQ_U(ctl_run(&r, ARGS("--json", "leader", "gw")), 0);
    uint64_t g = 0;
    CHECK(json_object_line(run_text(&r, OUT)));
    CHECK(json_uint(run_text(&r, OUT), "generation", &g));
    CHECK_EQ_U(g, gen);
    CHECK(run_has(&r, OUT, "\"state\":\"idle\""));     /* resigned at the end */
    run_free(&r);

    /* the table for people */
    CHECK_EQ_U(ctl_run(&r, ARGS("leader", "gw")), 0);
    char want[64];
    snprintf(want, sizeof want, "%llu", gen);
    CHECK(run_has_row(&r, "generation", want));
    CHECK(run_has_row(&r, "state", "idle"));
    CHECK(run_has_row(&r, "leader", "none"));
    CHECK(run_has_row(&r, "disabled", "no"));
    run_free(&r);

    /* a command killed by a signal: 128+N */
    CHECK_EQ_U(ctl_run(&r, ARGS("leader-run", "gw", "--", "sh", "-c", "kill -9 $$")), 137);
    run_free(&r);
    /* a command that cannot run */
    CHECK_EQ_U(ctl_run(&r, ARGS("leader-run", "gw", "--", "/nonexistent/cmd")), 127);
    run_free(&r);
    /* usage */
    CHECK_EQ_U(ctl_run(&r, ARGS("leader-run", "gw")), 2);
    run_free(&r);
    CHECK_EQ_U(ctl_run(&r, ARGS("leader-run", "-n", "-w", "1", "gw", "--", "true")), 2);
    run_free(&r);
    CHECK_EQ_U(ctl_run(&r, ARGS("leader")), 2);
    run_free(&r);
    stop();
}

/* Two (three) leader-runs on one workstream never overlap, and their
 * generations increase (not consecutively: the id allocator). */
static void test_run_exclusive(void)
{
    start();
    char file[400];
    snprintf(file, sizeof file, "%s/log", bp.dir);
    setenv("OUT_FILE", file, 1);
    const char *script =
        "echo start $COORD_GENERATION >> \"$OUT_FILE\"; sleep 0.2; "
        "echo end $COORD_GENERATION >> \"$OUT_FILE\"";
    struct run r[3];
    for (int i = 0; i < 3; i++)
        ctl_start(&r[i], -1, ARGS("leader-run", "ex", "--", "sh", "-c", script));
    for (int i = 0; i < 3; i++) {
        CHECK_EQ_U(run_finish(&r[i], 3 * T), 0);
        run_free(&r[i]);
    }
    FILE *f = fopen(file, "r");
    REQUIRE(f);
    char what[16];
    unsigned long long gen, prev = 0;
    int lines = 0;
    while (fscanf(f, "%15s %llu", what, &gen) == 2) {
        /* start g1, end g1, start g2 > g1, end g2, ... */
        CHECK(!strcmp(what, lines % 2 ? "end" : "start"));
        if (lines % 2)
            CHECK_EQ_U(gen, prev);
        else
            CHECK(gen > prev);
        prev = gen;
        lines++;
    }
    fclose(f);
    CHECK_EQ_U(lines, 6);
    stop();
}

/* Leadership lost while the command runs: disabled, stolen, broker gone. */
static void test_run_lost(void)
{
    start();
    struct report rep;
    struct run r, o;

    /* disabled by another client */
    report_open(&rep);
    ctl_start(&r, rep.wr, ARGS("leader-run", "lw", "--", "sh", "-c", reporting_cmd));
    const char *l = report_line(&rep, T);
    CHECK(l && !strncmp(l, "started ", 8));
    CHECK_EQ_U(ctl_run(&o, ARGS("disable", "lw")), 0);
    run_free(&o);
    l = report_line(&rep, T);
    CHECK(l && !strcmp(l, "term"));
    CHECK_EQ_U(run_finish(&r, T), 1);         /* CMD exited 0: still a failure */
    CHECK(run_has(&r, ERR, "coordctl: leader-run: lost leadership of lw (disabled)\n"));
    run_free(&r);
    report_close(&rep);
    CHECK_EQ_U(ctl_run(&o, ARGS("enable", "lw")), 0);
    run_free(&o);

    /* stolen by another leader-run */
    report_open(&rep);
    ctl_start(&r, rep.wr, ARGS("leader-run", "lw", "--", "sh", "-c", reporting_cmd));
    l = report_line(&rep, T);
    unsigned long long g1 = 0;
    CHECK(l && sscanf(l, "started %llu", &g1) == 1);
    CHECK_EQ_U(ctl_run(&o, ARGS("leader-run", "--steal", "lw", "--", "sh", "-c",
                                "echo $COORD_GENERATION")), 0);
    unsigned long long g2 = strtoull(run_text(&o, OUT), NULL, 10);
    CHECK(g2 > g1);
    run_free(&o);
    l = report_line(&rep, T);
    CHECK(l && !strcmp(l, "term"));
    CHECK_EQ_U(run_finish(&r, T), 1);
    CHECK(run_has(&r, ERR, "coordctl: leader-run: lost leadership of lw (stolen)\n"));
    run_free(&r);
    report_close(&rep);

    /* a command that does not end on SIGTERM decides the status itself */
    report_open(&rep);
    ctl_start(&r, rep.wr, ARGS("leader-run", "lw", "--", "sh", "-c",
              "trap 'echo term >&5; exit 5' TERM; echo started >&5; sleep 30 & wait"));
    l = report_line(&rep, T);
    CHECK(l && !strcmp(l, "started"));
    CHECK_EQ_U(ctl_run(&o, ARGS("leader-run", "--steal", "lw", "--", "true")), 0);
    run_free(&o);
    CHECK_EQ_U(run_finish(&r, T), 5);
    CHECK(run_has(&r, ERR, "lost leadership of lw (stolen)"));
    run_free(&r);
    report_close(&rep);

    /* SIGTERM to coordctl reaches the command; leadership is resigned */
    report_open(&rep);
    ctl_start(&r, rep.wr, ARGS("leader-run", "lw", "--", "sh", "-c", reporting_cmd));
    l = report_line(&rep, T);
    CHECK(l && !strncmp(l, "started ", 8));
    kill(r.pid, SIGTERM);
    l = report_line(&rep, T);
    CHECK(l && !strcmp(l, "term"));
    CHECK_EQ_U(run_finish(&r, T), 0);
    CHECK_EQ_U(r.text[ERR].n, 0);
    run_free(&r);
    report_close(&rep);
    CHECK_EQ_U(ctl_run(&o, ARGS("--json", "leader", "lw")), 0);
    CHECK(run_has(&o, OUT, "\"state\":\"idle\""));
    run_free(&o);

    /* -n while someone leads: exit 1 without running */
    report_open(&rep);
    ctl_start(&r, rep.wr, ARGS("leader-run", "lw", "--", "sh", "-c", reporting_cmd));
    l = report_line(&rep, T);
    CHECK(l && !strncmp(l, "started ", 8));
    char file[400];
    snprintf(file, sizeof file, "%s/ran", bp.dir);
    setenv("OUT_FILE", file, 1);
    CHECK_EQ_U(ctl_run(&o, ARGS("leader-run", "-n", "lw", "--", "sh", "-c",
                                "touch \"$OUT_FILE\"")), 1);
    CHECK(run_has(&o, ERR, "coordctl: leader-run: lw has a leader\n"));
    run_free(&o);
    CHECK_EQ_U(ctl_run(&o, ARGS("leader-run", "-w", "0.2", "lw", "--", "sh", "-c",
                                "touch \"$OUT_FILE\"")), 1);
    CHECK(run_has(&o, ERR, "coordctl: leader-run: TIMEOUT: "));
    run_free(&o);
    CHECK(access(file, F_OK) != 0);
    CHECK_EQ_U(ctl_run(&o, ARGS("leader", "lw")), 0);
    CHECK(run_has_row(&o, "state", "leading"));
    char want[64];
    snprintf(want, sizeof want, ", pid %d, client coordctl", (int)r.pid);
    CHECK(run_has(&o, OUT, want));
    CHECK(run_has(&o, OUT, "\nlease left "));
    CHECK(run_has(&o, OUT, "\nleading for "));
    run_free(&o);

    /* the broker goes away: the command is stopped */
    broker_kill(&bp, SIGKILL);
    l = report_line(&rep, T);
    CHECK(l && !strcmp(l, "term"));
    CHECK_EQ_U(run_finish(&r, T), 1);
    CHECK(run_has(&r, ERR, "coordctl: leader-run: lost leadership of lw (broker connection closed)\n"));
    run_free(&r);
    report_close(&rep);
    broker_cleanup(&bp);
}

/* A one-second lease held over several periods while the command runs
 * 3 s: renewals work. */
static void test_run_renews(void)
{
    start();
    coord_t *w = lib_client();
    CHECK_EQ_U(coord_subscribe(w, "-leaders", 8), 0);
    struct run r;
    ctl_start(&r, -1, ARGS("leader-run", "--lease", "1", "rw", "--", "sleep", "3"));
    int renewed = 0, elected = 0, other = 0;
    uint64_t gen = 0;
    for (;;) {
        coord_reply_t *ev = NULL;
        if (coord_next_event(w, T, &ev) != 0)
            break;
        coord_lifecycle lc;
        uint64_t g = 0;
        if (coord_event_lifecycle(ev, &lc)) {
            coord_map_uint(coord_reply_map(ev), "generation", &g);
            if (lc.what_len == 7 && !memcmp(lc.what, "elected", 7)) {
                elected++;
                gen = g;
            } else if (lc.what_len == 7 && !memcmp(lc.what, "renewed", 7)) {
                renewed++;
                CHECK_EQ_U(g, gen);
            } else if (lc.what_len == 8 && !memcmp(lc.what, "resigned", 8)) {
                CHECK_EQ_U(g, gen);
                coord_reply_free(ev);
                break;
            } else {
                fprintf(stderr, "unexpected -leaders event %.*s\n", (int)lc.what_len,
                        lc.what);
                other++;
            }
        }
        coord_reply_free(ev);
    }
    CHECK_EQ_U(elected, 1);
    CHECK_EQ_U(other, 0);
    CHECK(renewed >= 6);            /* every third of a second for 3 s */
    CHECK_EQ_U(run_finish(&r, T), 0);
    CHECK_EQ_U(r.text[ERR].n, 0);
    run_free(&r);
    coord_close(w);
    stop();
}

static void test_disable_enable(void)
{
    start();
    struct run r;
    CHECK_EQ_U(ctl_run(&r, ARGS("leader-run", "dw", "--", "sh", "-c",
                                "echo $COORD_GENERATION")), 0);
    unsigned long long g0 = strtoull(run_text(&r, OUT), NULL, 10);
    CHECK(g0 > 0);
    run_free(&r);
    CHECK_EQ_U(ctl_run(&r, ARGS("disable", "dw")), 0);
    char *end;
    unsigned long long g = strtoull(run_text(&r, OUT), &end, 10);
    CHECK(g > g0 && *end == '\n');          /* disable advances */
    run_free(&r);

    char file[400];
    snprintf(file, sizeof file, "%s/ran", bp.dir);
    setenv("OUT_FILE", file, 1);
    CHECK_EQ_U(ctl_run(&r, ARGS("leader-run", "dw", "--", "sh", "-c",
                                "touch \"$OUT_FILE\"")), 1);
    CHECK(run_has(&r, ERR, "coordctl: leader-run: DISABLED: "));
    run_free(&r);
    CHECK(access(file, F_OK) != 0);

    CHECK_EQ_U(ctl_run(&r, ARGS("leader", "dw")), 0);
    CHECK(run_has_row(&r, "state", "disabled"));
    CHECK(run_has_row(&r, "disabled", "yes"));
    run_free(&r);
    CHECK_EQ_U(ctl_run(&r, ARGS("--json", "leader", "dw")), 0);
    CHECK(run_has(&r, OUT, "\"disabled\":true"));
    run_free(&r);

    CHECK_EQ_U(ctl_run(&r, ARGS("enable", "dw")), 0);
    CHECK_EQ_U(r.text[OUT].n, 0);
    run_free(&r);
    CHECK_EQ_U(ctl_run(&r, ARGS("leader-run", "dw", "--", "sh", "-c",
                                "echo $COORD_GENERATION; touch \"$OUT_FILE\"")), 0);
    unsigned long long g1 = strtoull(run_text(&r, OUT), NULL, 10);
    CHECK(g1 > g);
    run_free(&r);
    CHECK(access(file, F_OK) == 0);

    CHECK_EQ_U(ctl_run(&r, ARGS("--json", "disable", "dw")), 0);
    CHECK(json_object_line(run_text(&r, OUT)));
    uint64_t g2 = 0;
    CHECK(json_uint(run_text(&r, OUT), "generation", &g2) && g2 > g1);
    run_free(&r);
    stop();
}

/* ==== watch, publish, subscribe ==== */

/* lock.acquire / lock.release through the generic request calls */
static uint64_t acquire(coord_t *c, const char *name)
{
    coord_req_t *q = coord_req_new("lock.acquire");
    coord_req_cstr(q, "name", name);
    coord_reply_t *rep = NULL;
    uint64_t lock = 0;
    if (coord_call(c, q, &rep) == 0)
        coord_map_uint(coord_reply_map(rep), "lock", &lock);
    coord_reply_free(rep);
    coord_req_free(q);
    return lock;
}

static int release(coord_t *c, uint64_t lock)
{
    coord_req_t *q = coord_req_new("lock.release");
    coord_req_uint(q, "lock", lock);
    int rc = coord_call(c, q, NULL);
    coord_req_free(q);
    return rc;
}

struct pending_reply {
    bool done;
    int status;
    uint64_t u;                 /* one uint field of the reply */
    const char *field;
    char text[128];             /* a bin/str field "result", if any */
};

static void on_reply(coord_t *c, int status, const coord_reply_t *reply, void *ud)
{
    struct pending_reply *p = ud;
    (void)c;
    p->done = true;
    p->status = status;
    if (!reply)
        return;
    coord_map m = coord_reply_map(reply);
    if (p->field)
        coord_map_uint(m, p->field, &p->u);
    const void *b;
    size_t n;
    if (coord_map_bin(m, "result", &b, &n))
        snprintf(p->text, sizeof p->text, "%.*s", (int)n, (const char *)b);
}

static bool await_reply(coord_t *c, struct pending_reply *p)
{
    uint64_t deadline = now_ms() + T;
    while (!p->done && now_ms() < deadline)
        if (coord_wait(c, (int)(deadline - now_ms())) < 0)
            return false;
    return p->done;
}

static void send_req(coord_t *c, coord_req_t *q, struct pending_reply *p)
{
    CHECK_EQ_U(coord_send(c, q, on_reply, p, NULL), 0);
    coord_req_free(q);
    CHECK_EQ_U(coord_ping(c), 0);   /* the broker has queued it */
}

static void test_watch(void)
{
    start();
    struct run w;
    ctl_start(&w, -1, ARGS("watch"));
    CHECK(EXPECT(&w, ERR, "coordctl: watch: listening on -locks -flights -leaders"));
    coord_t *a = lib_client(), *b = lib_client();
    char ca[32], cb[32];
    snprintf(ca, sizeof ca, " conn=%llu ", (unsigned long long)coord_conn_id(a));
    snprintf(cb, sizeof cb, " conn=%llu ", (unsigned long long)coord_conn_id(b));

    /* a lock handed from a to b */
    uint64_t la = acquire(a, "door");
    CHECK(la != 0);
    struct pending_reply pb = { .field = "lock" };
    coord_req_t *q = coord_req_new("lock.acquire");
    coord_req_cstr(q, "name", "door");
    send_req(b, q, &pb);
    CHECK_EQ_U(release(a, la), 0);
    CHECK(await_reply(b, &pb) && pb.status == 0 && pb.u != 0);
    CHECK_EQ_U(release(b, pb.u), 0);
    CHECK(EXPECT(&w, OUT, " -locks granted ", "name=door ", ca));
    CHECK(EXPECT(&w, OUT, " -locks released ", "name=door ", ca));
    CHECK(EXPECT(&w, OUT, " -locks granted ", "name=door ", cb));
    CHECK(EXPECT(&w, OUT, " -locks released ", "name=door ", cb));

    /* a flight with one follower */
    static const char secret[] = "SECRET-RESULT-8d1f";
    q = coord_req_new("flight.join");
    coord_req_cstr(q, "key", "fk");
    coord_reply_t *rep = NULL;
    CHECK_EQ_U(coord_call(a, q, &rep), 0);
    coord_req_free(q);
    uint64_t flight = 0, fence = 0;
    if (rep) {
        coord_map_uint(coord_reply_map(rep), "flight", &flight);
        coord_map_uint(coord_reply_map(rep), "fence", &fence);
    }
    coord_reply_free(rep);
    CHECK(flight != 0);
    struct pending_reply pf = { .field = NULL };
    q = coord_req_new("flight.join");
    coord_req_cstr(q, "key", "fk");
    send_req(b, q, &pf);
    CHECK(EXPECT(&w, OUT, " -flights started ", "key=fk "));
    CHECK(EXPECT(&w, OUT, " -flights joined ", "key=fk "));
    q = coord_req_new("flight.complete");
    coord_req_uint(q, "flight", flight);
    coord_req_uint(q, "fence", fence);
    coord_req_bin(q, "result", secret, sizeof secret - 1);
    CHECK_EQ_U(coord_call(a, q, NULL), 0);
    coord_req_free(q);
    CHECK(await_reply(b, &pf) && pf.status == 0 && !strcmp(pf.text, secret));
    CHECK(EXPECT(&w, OUT, " -flights completed ", "key=fk "));

    /* a leader transition */
    uint64_t g = 0;
    CHECK_EQ_U(coord_leader_campaign(a, "lw", 2, NULL, &g, NULL), 0);
    struct pending_reply pl = { .field = "generation" };
    q = coord_req_new("leader.campaign");
    coord_req_cstr(q, "workstream", "lw");
    send_req(b, q, &pl);
    CHECK_EQ_U(coord_leader_resign(a, "lw", 2, g), 0);
    CHECK(await_reply(b, &pl) && pl.status == 0 && pl.u > g);
    char g1[48], g2[48];
    snprintf(g1, sizeof g1, "generation=%llu", (unsigned long long)g);
    snprintf(g2, sizeof g2, "generation=%llu", (unsigned long long)pl.u);
    CHECK(EXPECT(&w, OUT, " -leaders elected ", "workstream=lw ", g1));
    CHECK(EXPECT(&w, OUT, " -leaders resigned ", "workstream=lw ", g1));
    CHECK(EXPECT(&w, OUT, " -leaders elected ", "workstream=lw ", g2));
    coord_close(b);                 /* b's leadership ends: lost, disconnected */
    CHECK(EXPECT(&w, OUT, " -leaders lost ", "workstream=lw ", g2, "reason=disconnected"));

    /* every line starts with a local time HH:MM:SS.mmm */
    const char *all = run_text(&w, OUT);
    for (const char *p = all; *p; ) {
        CHECK(p[2] == ':' && p[5] == ':' && p[8] == '.' && p[12] == ' ');
        const char *nl = strchr(p, '\n');
        if (!nl)
            break;
        p = nl + 1;
    }

    kill(w.pid, SIGTERM);
    CHECK_EQ_U(run_finish(&w, T), 0);
    /* the result bytes never reach an observer, in any form */
    CHECK(!strstr(run_text(&w, OUT), "SECRET"));
    CHECK(!strstr(run_text(&w, OUT), "U0VDUkVU"));      /* base64 of "SECRET" */
    run_free(&w);
    coord_close(a);

    /* the broker going away ends watch with status 3 */
    ctl_start(&w, -1, ARGS("watch", "-leaders", "chan"));
    CHECK(EXPECT(&w, ERR, "listening on -leaders chan"));
    broker_kill(&bp, SIGTERM);
    CHECK_EQ_U(run_finish(&w, T), 3);
    CHECK(run_has(&w, ERR, "coordctl: watch: "));
    run_free(&w);
    broker_cleanup(&bp);
}

static void test_watch_json(void)
{
    /* the validator itself */
    CHECK(json_object_line("{\"a\":[1,-2.5e3,true,null,{\"b\":\"\\u00ff\\n\"}]}"));
    CHECK(!json_object_line("{\"a\":}"));
    CHECK(!json_object_line("{\"a\":1} x"));
    CHECK(!json_object_line("[1]"));
    CHECK(!json_object_line("{\"a\":\"\\x\"}"));

    start();
    struct run w;
    ctl_start(&w, -1, ARGS("--json", "watch", "-locks", "-leaders", "room"));
    CHECK(EXPECT(&w, ERR, "listening on -locks -leaders room"));
    coord_t *a = lib_client();
    uint64_t la = acquire(a, "jl");
    CHECK_EQ_U(release(a, la), 0);
    uint64_t g = 0;
    CHECK_EQ_U(coord_leader_campaign(a, "jw", 2, NULL, &g, NULL), 0);
    CHECK_EQ_U(coord_leader_resign(a, "jw", 2, g), 0);
    uint64_t n = 0;
    CHECK_EQ_U(coord_publish(a, "room", 4, "hi \"you\"", 8, &n), 0);
    CHECK_EQ_U(n, 1);
    CHECK(EXPECT(&w, OUT, "\"channel\":\"-locks\"", "\"what\":\"granted\"", "\"name\":\"jl\""));
    CHECK(EXPECT(&w, OUT, "\"channel\":\"-locks\"", "\"what\":\"released\"", "\"name\":\"jl\""));
    CHECK(EXPECT(&w, OUT, "\"channel\":\"-leaders\"", "\"what\":\"elected\"",
                 "\"workstream\":\"jw\""));
    CHECK(EXPECT(&w, OUT, "\"channel\":\"-leaders\"", "\"what\":\"resigned\""));
    /* "hi \"you\"" in base64 */
    CHECK(EXPECT(&w, OUT, "\"ev\":\"message\"", "\"channel\":\"room\"",
                 "\"data\":{\"base64\":\"aGkgInlvdSI=\"}"));
    kill(w.pid, SIGINT);
    CHECK_EQ_U(run_finish(&w, T), 0);
    /* every line is one JSON object with the channel (and what, but for
     * messages), nothing else */
    int lines = 0;
    const char *p = run_text(&w, OUT);
    while (*p) {
        const char *nl = strchr(p, '\n');
        REQUIRE(nl);
        char *line = strndup(p, (size_t)(nl - p));
        CHECK(json_object_line(line));
        CHECK(strstr(line, "\"channel\":"));
        CHECK(strstr(line, "\"what\":") || strstr(line, "\"ev\":\"message\""));
        if (!json_object_line(line))
            fprintf(stderr, "not a JSON object: %s\n", line);
        free(line);
        lines++;
        p = nl + 1;
    }
    CHECK(lines >= 5);
    run_free(&w);

    /* the human form of a message */
    ctl_start(&w, -1, ARGS("watch", "room"));
    CHECK(EXPECT(&w, ERR, "listening on room"));
    CHECK_EQ_U(coord_publish(a, "room", 4, "two words", 9, &n), 0);
    CHECK_EQ_U(coord_publish(a, "room", 4, "\x01\x02", 2, &n), 0);
    char want[96];
    snprintf(want, sizeof want, " room message conn=%llu data=\"two words\"",
             (unsigned long long)coord_conn_id(a));
    CHECK(EXPECT(&w, OUT, want));
    CHECK(EXPECT(&w, OUT, " room message ", " data=base64:AQI="));
    kill(w.pid, SIGTERM);
    CHECK_EQ_U(run_finish(&w, T), 0);
    run_free(&w);

    /* a channel the broker refuses */
    CHECK_EQ_U(ctl_run(&w, ARGS("watch", "-nope")), 1);
    CHECK(run_has(&w, ERR, "coordctl: watch: -nope: NAME_RESERVED: "));
    run_free(&w);
    coord_close(a);
    stop();
}

static void test_publish_subscribe(void)
{
    start();
    struct run s, p;
    ctl_start(&s, -1, ARGS("subscribe", "news"));
    CHECK(EXPECT(&s, ERR, "coordctl: subscribe: listening on news"));
    CHECK_EQ_U(ctl_run(&p, ARGS("publish", "news", "hello there")), 0);
    CHECK(!strcmp(run_text(&p, OUT), "delivered 1\n"));
    run_free(&p);
    const char *l = run_line(&s, OUT, T);
    CHECK(l && !strcmp(l, "hello there"));
    CHECK_EQ_U(ctl_run(&p, ARGS("--json", "publish", "news", "second")), 0);
    CHECK(!strcmp(run_text(&p, OUT), "{\"delivered\":1}\n"));
    run_free(&p);
    l = run_line(&s, OUT, T);
    CHECK(l && !strcmp(l, "second"));
    kill(s.pid, SIGTERM);
    CHECK_EQ_U(run_finish(&s, T), 0);
    run_free(&s);

    /* --json: one object per message */
    ctl_start(&s, -1, ARGS("--json", "subscribe", "news"));
    CHECK(EXPECT(&s, ERR, "listening on news"));
    CHECK_EQ_U(ctl_run(&p, ARGS("publish", "news", "j")), 0);
    run_free(&p);
    l = run_line(&s, OUT, T);
    CHECK(l && json_object_line(l) && strstr(l, "\"channel\":\"news\"") &&
          strstr(l, "\"data\":{\"base64\":\"ag==\"}"));
    kill(s.pid, SIGTERM);
    CHECK_EQ_U(run_finish(&s, T), 0);
    run_free(&s);

    /* nobody listens */
    CHECK_EQ_U(ctl_run(&p, ARGS("publish", "news", "x")), 0);
    CHECK(!strcmp(run_text(&p, OUT), "delivered 0\n"));
    run_free(&p);

    /* the broker's channels are not for publishing */
    CHECK_EQ_U(ctl_run(&p, ARGS("publish", "-locks", "x")), 1);
    CHECK(!strncmp(run_text(&p, ERR), "coordctl: publish: NAME_RESERVED: ", 34));
    CHECK_EQ_U(p.text[OUT].n, 0);
    run_free(&p);
    CHECK_EQ_U(ctl_run(&p, ARGS("publish", "news")), 2);
    run_free(&p);
    CHECK_EQ_U(ctl_run(&p, ARGS("subscribe")), 2);
    run_free(&p);
    stop();
}

int main(int argc, char **argv)
{
    static const struct test_case tests[] = {
        { "lib_leader", test_lib_leader },
        { "lib_channels", test_lib_channels },
        { "run_generation", test_run_generation },
        { "run_exclusive", test_run_exclusive },
        { "run_lost", test_run_lost },
        { "run_renews", test_run_renews },
        { "disable_enable", test_disable_enable },
        { "watch", test_watch },
        { "watch_json", test_watch_json },
        { "publish_subscribe", test_publish_subscribe },
        { NULL, NULL },
    };
    return run_tests(argc, argv, tests);
}
