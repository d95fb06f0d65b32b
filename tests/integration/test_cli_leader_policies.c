/* test_cli_leader_policies.c - coordctl's leadership policies as real
 * processes against a real broker: `leader define` (flags and -f FILE, whose parser
 * is checked on good and bad files), `describe`, `history`, `pending`,
 * `check`, `drain`, `claim` / `commit` / `abandon` (from a CMD under
 * leader-run, through COORD_GENERATION, with the README's worked example
 * and its reconcile), and `leader-run` answering drains: SIGTERM to
 * coordctl and a max-hold drain from the broker (CMD gets SIGTERM, the
 * term is resigned, the next campaign is granted), --protocol, --incident.
 *
 * $COORD_BROKER is coordd and $COORDCTL is coordctl (set by meson).
 * Nothing waits with a sleep where an event can be awaited: commands
 * report on a pipe (fd 5), and exits are awaited through pidfds. */
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
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
    return lib_connect(&bp, NULL, "test-cli-leader-policies");
}

/* ---- processes (leader-util.h) ---- */

static void ctl_start(struct run *r, int fd5, const char *const *args)
{
    leader_ctl_start(r, &bp, fd5, args);
}

static int ctl_run(struct run *r, const char *const *args)
{
    return leader_ctl_run(r, &bp, args, T);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0)
        exit(2);
}

/* bp.dir/name, in buf */
static const char *in_dir(char *buf, size_t size, const char *name)
{
    snprintf(buf, size, "%s/%s", bp.dir, name);
    return buf;
}

/* The generation in "started G" from a reporting command. */
static unsigned long long started_gen(const char *line)
{
    unsigned long long g = 0;
    if (!line || sscanf(line, "started %llu", &g) != 1)
        fprintf(stderr, "not a \"started G\" line: %s\n", line ? line : "(none)");
    return g;
}

/* ==== define, describe ==== */

static void test_define_flags(void)
{
    start();
    struct run r;
    CHECK_EQ(ctl_run(&r, ARGS("leader", "describe", "pay")), 1);
    CHECK(run_has(&r, ERR, "coordctl: leader describe: NOT_FOUND: "));
    run_free(&r);

    CHECK_EQ(ctl_run(&r, ARGS("leader", "define", "pay", "--protocol", "pay-sync@2",
                              "--max-hold", "30s", "--steal", "incident-only",
                              "--mode", "shadow", "--fallback", "SERVER_COORDINATED")), 0);
    CHECK(run_has_row(&r, "workstream", "pay"));
    CHECK(run_has_row(&r, "protocol", "pay-sync@2"));
    CHECK(run_has_row(&r, "pinned protocol", "pay-sync@2"));
    CHECK(run_has_row(&r, "max hold", "30.0 s"));
    CHECK(run_has_row(&r, "steal", "incident-only"));
    CHECK(run_has_row(&r, "mode", "shadow"));
    CHECK(run_has_row(&r, "fallback", "SERVER_COORDINATED"));
    CHECK(run_has_row(&r, "canonical fence", "local"));
    run_free(&r);

    /* only the named fields change; an empty value is nil (the default) */
    CHECK_EQ(ctl_run(&r, ARGS("leader", "define", "pay", "--mode", "active",
                              "--fallback=", "--max-hold", "500ms")), 0);
    CHECK(run_has_row(&r, "mode", "active"));
    CHECK(run_has_row(&r, "fallback", "none"));
    CHECK(run_has_row(&r, "max hold", "500 ms"));
    CHECK(run_has_row(&r, "steal", "incident-only"));
    CHECK(run_has_row(&r, "protocol", "pay-sync@2"));
    run_free(&r);
    CHECK_EQ(ctl_run(&r, ARGS("leader", "describe", "pay")), 0);
    CHECK(run_has_row(&r, "max hold", "500 ms"));
    CHECK(run_has_row(&r, "fallback", "none"));
    run_free(&r);
    CHECK_EQ(ctl_run(&r, ARGS("--json", "leader", "describe", "pay")), 0);
    CHECK(run_has(&r, OUT, "{\"descriptor\":{\"workstream\":\"pay\",\"protocol\":\"pay-sync@2\""));
    CHECK(run_has(&r, OUT, "\"max_hold_ms\":500,"));
    CHECK(run_has(&r, OUT, "\"fallback\":null,"));
    run_free(&r);

    /* the pin: lowering needs --force */
    CHECK_EQ(ctl_run(&r, ARGS("leader", "define", "pay", "--protocol", "pay-sync@1")), 1);
    CHECK(run_has(&r, ERR, "coordctl: leader define: PROTOCOL_PINNED: "));
    run_free(&r);
    CHECK_EQ(ctl_run(&r, ARGS("leader", "define", "pay", "--protocol", "pay-sync@1",
                              "--force")), 0);
    CHECK(run_has_row(&r, "pinned protocol", "pay-sync@1"));
    run_free(&r);

    /* refused by the broker (named field), or by coordctl (usage) */
    CHECK_EQ(ctl_run(&r, ARGS("leader", "define", "pay", "--steal", "sometimes")), 1);
    CHECK(run_has(&r, ERR, "coordctl: leader define: INVALID_OPTIONS: "));
    CHECK(run_has(&r, ERR, "steal"));
    run_free(&r);
    CHECK_EQ(ctl_run(&r, ARGS("leader", "define", "pay", "--max-hold", "5x")), 2);
    CHECK(run_has(&r, ERR, "--max-hold needs a duration"));
    run_free(&r);
    CHECK_EQ(ctl_run(&r, ARGS("leader", "define")), 2);
    run_free(&r);
    CHECK_EQ(ctl_run(&r, ARGS("leader", "define", "pay", "extra")), 2);
    run_free(&r);
    stop();
}

static void test_define_file(void)
{
    start();
    char good[400], bad[400], path[400];
    in_dir(good, sizeof good, "good.yaml");
    write_file(good,
        "# the billing leader\n"
        "schema: crossTabLeader.v1\n"
        "\n"
        "workstream: \"billing\"   # quoted\n"
        "protocol: billing-sync@3\n"
        "maxHold: 2m\n"
        "steal: 'incident-only'\n"
        "fallback: SERVER_COORDINATED # a comment\r\n"
        "canonicalFence: local\n"
        "mode: read-only\n");
    struct run r;
    CHECK_EQ(ctl_run(&r, ARGS("leader", "define", "-f", good)), 0);
    CHECK(run_has_row(&r, "workstream", "billing"));
    run_free(&r);
    CHECK_EQ(ctl_run(&r, ARGS("leader", "describe", "billing")), 0);
    CHECK(run_has_row(&r, "protocol", "billing-sync@3"));
    CHECK(run_has_row(&r, "max hold", "2m 00s"));
    CHECK(run_has_row(&r, "steal", "incident-only"));
    CHECK(run_has_row(&r, "fallback", "SERVER_COORDINATED"));
    CHECK(run_has_row(&r, "canonical fence", "local"));
    CHECK(run_has_row(&r, "mode", "read-only"));
    run_free(&r);

    /* a file with an empty value (nil) and only some keys; the operand
     * names the workstream */
    in_dir(path, sizeof path, "reset.yaml");
    write_file(path, "schema: crossTabLeader.v1\nfallback:\nmode: ~\n");
    CHECK_EQ(ctl_run(&r, ARGS("leader", "define", "billing", "-f", path)), 0);
    CHECK(run_has_row(&r, "fallback", "none"));
    CHECK(run_has_row(&r, "mode", "active"));
    CHECK(run_has_row(&r, "protocol", "billing-sync@3"));
    run_free(&r);
    CHECK_EQ(ctl_run(&r, ARGS("leader", "define", "other", "-f", good)), 2);
    CHECK(run_has(&r, ERR, "not the file's workstream"));
    run_free(&r);

    /* bad files: nothing is sent */
    static const struct { const char *text, *err; } bads[] = {
        { "schema: crossTabLeader.v1\nworkstream: nope\nprotocol: x@1\nmaxhold: 30s\n",
          ":4: unknown key 'maxhold'" },
        { "schema: crossTabLeader.v2\nworkstream: nope\n",
          ":1: schema must be crossTabLeader.v1, not crossTabLeader.v2" },
        { "workstream: nope\nmode: shadow\n", "no schema" },
        { "schema: crossTabLeader.v1\nworkstream: nope\nmaxHold: 30 seconds\n",
          ":3: maxHold: not a duration" },
        { "schema: crossTabLeader.v1\nworkstream: nope\nmaxHold: -1s\n",
          ":3: maxHold: not a duration" },
        { "schema: crossTabLeader.v1\nworkstream: nope\nsteal never\n",
          ":3: expected \"key: value\"" },
        { "schema: crossTabLeader.v1\nworkstream: nope\nmode: shadow\nmode: active\n",
          ":4: key 'mode' given twice" },
        { "schema: crossTabLeader.v1\nworkstream: \"nope\n", ":2: workstream: unterminated" },
        { "schema: crossTabLeader.v1\nmode: shadow\n", "no workstream" },
    };
    for (size_t i = 0; i < sizeof bads / sizeof bads[0]; i++) {
        in_dir(bad, sizeof bad, "bad.yaml");
        write_file(bad, bads[i].text);
        CHECK_EQ(ctl_run(&r, ARGS("leader", "define", "-f", bad)), 2);
        CHECK(run_has(&r, ERR, bads[i].err));
        CHECK(run_has(&r, ERR, "coordctl: leader define: "));
        run_free(&r);
    }
    /* several unknown keys: each named */
    write_file(bad, "schema: crossTabLeader.v1\nworkstream: nope\nowner: me\nttl: 3\n");
    CHECK_EQ(ctl_run(&r, ARGS("leader", "define", "-f", bad)), 2);
    CHECK(run_has(&r, ERR, "bad.yaml:3: unknown key 'owner'"));
    CHECK(run_has(&r, ERR, "bad.yaml:4: unknown key 'ttl'"));
    run_free(&r);
    CHECK_EQ(ctl_run(&r, ARGS("leader", "describe", "nope")), 1);  /* never sent */
    run_free(&r);
    /* the broker's own refusal of a well-formed file */
    write_file(bad, "schema: crossTabLeader.v1\nworkstream: nope\nmode: loud\n");
    CHECK_EQ(ctl_run(&r, ARGS("leader", "define", "-f", bad)), 1);
    CHECK(run_has(&r, ERR, "INVALID_OPTIONS"));
    run_free(&r);
    in_dir(path, sizeof path, "missing.yaml");
    CHECK_EQ(ctl_run(&r, ARGS("leader", "define", "-f", path)), 2);
    CHECK(run_has(&r, ERR, "missing.yaml: No such file"));
    run_free(&r);
    CHECK_EQ(ctl_run(&r, ARGS("leader", "define", "-f", good, "--mode", "shadow")), 2);
    run_free(&r);
    stop();
}

/* ==== info, check, history, pending ==== */

static void test_info_check_history(void)
{
    start();
    struct report rep;
    struct run r, o;
    CHECK_EQ(ctl_run(&o, ARGS("leader", "define", "iw", "--max-hold", "1h")), 0);
    run_free(&o);
    report_open(&rep);
    ctl_start(&r, rep.wr, ARGS("leader-run", "--protocol", "iw-app@4", "iw", "--", "sh", "-c",
                               "$COORDCTL --no-autostart leader claim $COORD_WORKSTREAM op-a "
                               ">/dev/null; echo claim=$? >&5; echo mode=$COORD_LEADER_MODE >&5;"
                               "trap 'kill $! 2>/dev/null; echo term >&5; exit 0' TERM; "
                               "echo started $COORD_GENERATION >&5; sleep 30 & wait"));
    const char *l = report_line(&rep, T);
    CHECK(l && !strcmp(l, "claim=0"));
    l = report_line(&rep, T);
    CHECK(l && !strcmp(l, "mode=active"));
    unsigned long long g = started_gen(report_line(&rep, T));
    CHECK(g > 0);
    char gs[32], stale[32];
    snprintf(gs, sizeof gs, "%llu", g);
    snprintf(stale, sizeof stale, "%llu", g - 1);

    CHECK_EQ(ctl_run(&o, ARGS("leader", "iw")), 0);
    CHECK(run_has_row(&o, "state", "leading"));
    CHECK(run_has_row(&o, "mode", "active"));
    CHECK(run_has_row(&o, "protocol", "iw-app@4"));
    CHECK(run_has_row(&o, "max hold", "1h 00m"));
    CHECK(run_has_row(&o, "generation", gs));
    run_free(&o);
    CHECK_EQ(ctl_run(&o, ARGS("leader", "info", "iw")), 0);
    CHECK(run_has_row(&o, "state", "leading"));
    run_free(&o);

    CHECK_EQ(ctl_run(&o, ARGS("leader", "check", "iw", gs)), 0);
    CHECK(run_has_row(&o, "live", "yes"));
    CHECK(run_has_row(&o, "mode", "active"));
    CHECK(run_has(&o, OUT, "lease left "));
    run_free(&o);
    CHECK_EQ(ctl_run(&o, ARGS("--json", "leader", "check", "iw", gs)), 0);
    CHECK(run_has(&o, OUT, "{\"live\":true,\"lease_left_ms\":"));
    run_free(&o);
    CHECK_EQ(ctl_run(&o, ARGS("leader", "check", "iw", stale)), 1);
    CHECK(run_has(&o, ERR, "coordctl: leader check: FENCED: "));
    run_free(&o);

    CHECK_EQ(ctl_run(&o, ARGS("leader", "pending", "iw")), 0);
    CHECK(run_has(&o, OUT, "OP_ID"));
    CHECK(run_has(&o, OUT, "op-a "));
    CHECK(run_has(&o, OUT, " yes\n"));
    run_free(&o);
    CHECK_EQ(ctl_run(&o, ARGS("--json", "leader", "pending", "iw")), 0);
    CHECK(run_has(&o, OUT, "\"op_id\":\"op-a\""));
    run_free(&o);

    kill(r.pid, SIGTERM);
    l = report_line(&rep, T);
    CHECK(l && !strcmp(l, "term"));
    CHECK_EQ(run_finish(&r, T), 0);
    run_free(&r);
    report_close(&rep);

    /* the claim outlived the term: not live now */
    CHECK_EQ(ctl_run(&o, ARGS("leader", "pending", "iw")), 0);
    CHECK(run_has(&o, OUT, " no\n"));
    run_free(&o);
    CHECK_EQ(ctl_run(&o, ARGS("leader", "history", "iw")), 0);
    CHECK(run_has(&o, OUT, "GENERATION"));
    CHECK(run_has(&o, OUT, gs));
    CHECK(run_has(&o, OUT, "iw-app@4"));
    CHECK(run_has(&o, OUT, "resigned"));
    CHECK(run_has(&o, OUT, "coordctl"));
    run_free(&o);
    CHECK_EQ(ctl_run(&o, ARGS("--json", "leader", "history", "--limit", "1", "iw")), 0);
    CHECK(run_has(&o, OUT, "\"terms\":[{"));
    CHECK(run_has(&o, OUT, "\"reason\":\"resigned\""));
    run_free(&o);
    CHECK_EQ(ctl_run(&o, ARGS("leader", "history", "--limit", "x", "iw")), 2);
    run_free(&o);
    CHECK_EQ(ctl_run(&o, ARGS("leader", "check", "iw", "zero")), 2);
    run_free(&o);
    /* a workstream named like a subcommand */
    CHECK_EQ(ctl_run(&o, ARGS("leader", "--", "history")), 0);
    CHECK(run_has_row(&o, "workstream", "history"));
    run_free(&o);
    stop();
}

/* ==== drains ==== */

/* An operator's drain: CMD gets SIGTERM, coordctl resigns, exit 0. */
static void test_drain_operator(void)
{
    start();
    struct report rep;
    struct run r, o;
    CHECK_EQ(ctl_run(&o, ARGS("leader", "drain", "dw")), 1);
    CHECK(run_has(&o, ERR, "coordctl: leader drain: nobody leads dw\n"));
    run_free(&o);

    report_open(&rep);
    /* on SIGTERM, CMD reports what `coordctl leader` says meanwhile */
    ctl_start(&r, rep.wr, ARGS("leader-run", "dw", "--", "sh", "-c",
        "trap 'kill $! 2>/dev/null; $COORDCTL --no-autostart leader $COORD_WORKSTREAM "
        "| grep -e ^state -e ^drain -e ^mode >&5; echo term >&5; exit 0' TERM; "
        "echo started $COORD_GENERATION >&5; sleep 30 & wait"));
    unsigned long long g = started_gen(report_line(&rep, T));
    /* a mode change reaches leader-run, which says so */
    CHECK_EQ(ctl_run(&o, ARGS("leader", "define", "dw", "--mode", "read-only")), 0);
    run_free(&o);
    const char *l = run_line(&r, ERR, T);
    CHECK(l && !strcmp(l, "coordctl: leader-run: dw: mode read-only"));
    CHECK_EQ(ctl_run(&o, ARGS("leader", "drain", "dw")), 0);
    char want[64];
    snprintf(want, sizeof want, "draining generation %llu\n", g);
    CHECK(run_has(&o, OUT, want));
    run_free(&o);
    l = report_line(&rep, T);
    CHECK(l && !strncmp(l, "state ", 6) && strstr(l, " draining"));
    l = report_line(&rep, T);
    CHECK(l && !strncmp(l, "drain reason ", 13) && strstr(l, " requested"));
    l = report_line(&rep, T);
    CHECK(l && !strncmp(l, "mode ", 5) && strstr(l, " read-only"));
    l = report_line(&rep, T);
    CHECK(l && !strcmp(l, "term"));
    CHECK_EQ(run_finish(&r, T), 0);
    CHECK(run_has(&r, ERR, "coordctl: leader-run: draining dw (requested)\n"));
    run_free(&r);
    report_close(&rep);
    CHECK_EQ(ctl_run(&o, ARGS("leader", "dw")), 0);
    CHECK(run_has_row(&o, "state", "idle"));
    run_free(&o);
    char gs[32];
    snprintf(gs, sizeof gs, "%llu", g);
    CHECK_EQ(ctl_run(&o, ARGS("leader", "drain", "dw", gs)), 1);
    CHECK(run_has(&o, ERR, "FENCED"));
    run_free(&o);
    stop();
}

/* SIGTERM to coordctl: leader.drain first (so CMD's late claim gets
 * DRAINING), then SIGTERM to CMD, resign; a waiting leader-run follows. */
static void test_run_sigterm_drain(void)
{
    start();
    coord_t *w = lib_client();
    CHECK_EQ(coord_subscribe(w, "-leaders", 8), 0);
    struct report rep, rep2;
    struct run r, r2;
    report_open(&rep);
    ctl_start(&r, rep.wr, ARGS("leader-run", "sw", "--", "sh", "-c",
        "trap 'kill $! 2>/dev/null; "
        "$COORDCTL --no-autostart leader claim $COORD_WORKSTREAM late 2>/dev/null; "
        "echo claim=$? >&5; "
        "$COORDCTL --no-autostart leader commit $COORD_WORKSTREAM done >/dev/null; "
        "echo commit=$? >&5; exit 0' TERM; "
        "echo started $COORD_GENERATION >&5; sleep 30 & wait"));
    unsigned long long g1 = started_gen(report_line(&rep, T));
    report_open(&rep2);
    ctl_start(&r2, rep2.wr, ARGS("leader-run", "-w", "10", "sw", "--", "sh", "-c",
                                 "echo started $COORD_GENERATION >&5"));
    /* r2 waits (or campaigns after the resign: granted either way) */
    kill(r.pid, SIGTERM);
    const char *l = report_line(&rep, T);
    CHECK(l && !strcmp(l, "claim=1"));      /* DRAINING */
    l = report_line(&rep, T);
    CHECK(l && !strcmp(l, "commit=0"));     /* commits still accepted */
    CHECK_EQ(run_finish(&r, T), 0);
    CHECK_EQ(r.text[ERR].n, 0);             /* asked for: no message */
    run_free(&r);
    unsigned long long g2 = started_gen(report_line(&rep2, T));
    CHECK(g2 > g1);
    CHECK_EQ(run_finish(&r2, T), 0);
    run_free(&r2);
    report_close(&rep);
    report_close(&rep2);

    /* -leaders: draining, then resigned, for g1 */
    bool draining = false, resigned = false;
    while (!resigned) {
        coord_reply_t *ev = NULL;
        if (coord_next_event(w, T, &ev) != 0)
            break;
        coord_lifecycle lc;
        uint64_t g = 0;
        if (coord_event_lifecycle(ev, &lc) &&
            coord_map_uint(coord_reply_map(ev), "generation", &g) && g == g1) {
            if (lc.what_len == 8 && !memcmp(lc.what, "draining", 8))
                draining = true;
            if (lc.what_len == 8 && !memcmp(lc.what, "resigned", 8)) {
                CHECK(draining);
                resigned = true;
            }
        }
        coord_reply_free(ev);
    }
    CHECK(draining && resigned);
    coord_close(w);
    stop();
}

/* The broker's max-hold drain while another campaign waits. */
static void test_run_max_hold(void)
{
    start();
    struct report rep, rep2;
    struct run r, r2, o;
    CHECK_EQ(ctl_run(&o, ARGS("leader", "define", "mw", "--max-hold", "500ms")), 0);
    run_free(&o);
    report_open(&rep);
    /* --lease 30 is capped at 500 ms: renewing at a third of 30 s would
     * lose the lease long before the drain */
    ctl_start(&r, rep.wr, ARGS("leader-run", "--lease", "30", "mw", "--", "sh", "-c",
                               reporting_cmd));
    unsigned long long g1 = started_gen(report_line(&rep, T));
    report_open(&rep2);
    ctl_start(&r2, rep2.wr, ARGS("leader-run", "mw", "--", "sh", "-c",
                                 "echo started $COORD_GENERATION >&5"));
    const char *l = report_line(&rep, T);
    CHECK(l && !strcmp(l, "term"));
    CHECK_EQ(run_finish(&r, T), 0);
    CHECK(run_has(&r, ERR, "coordctl: leader-run: draining mw (max_hold)\n"));
    CHECK(!strstr(run_text(&r, ERR), "lost leadership"));
    run_free(&r);
    unsigned long long g2 = started_gen(report_line(&rep2, T));
    CHECK(g2 > g1);
    CHECK_EQ(run_finish(&r2, T), 0);
    run_free(&r2);
    report_close(&rep);
    report_close(&rep2);
    CHECK_EQ(ctl_run(&o, ARGS("leader", "history", "mw")), 0);
    CHECK(run_has(&o, OUT, "resigned"));
    run_free(&o);

    /* alone (nobody waits), the max hold drains it all the same */
    report_open(&rep);
    ctl_start(&r, rep.wr, ARGS("leader-run", "mw", "--", "sh", "-c", reporting_cmd));
    CHECK(started_gen(report_line(&rep, T)) > g2);
    l = report_line(&rep, T);
    CHECK(l && !strcmp(l, "term"));
    CHECK_EQ(run_finish(&r, T), 0);
    CHECK(run_has(&r, ERR, "coordctl: leader-run: draining mw (max_hold)\n"));
    run_free(&r);
    report_close(&rep);
    stop();
}

/* ==== the outbox from a CMD: the README's worked example ==== */

/* The README's script, with a file standing in for the external system
 * (one line per effect, the op id its idempotency key).  $CRASH=1: claim,
 * then exit before the effect (a leader that died there). */
static const char *const outbox_script =
    "op=\"$1\"\n"
    "C=\"$COORDCTL --no-autostart\"\n"
    "$C leader claim \"$COORD_WORKSTREAM\" \"$op\" >/dev/null\n"
    "rc=$?\n"
    "echo claim=$rc >&5\n"
    "case $rc in\n"
    "  0) ;;\n"
    "  10) if grep -qx \"$op\" \"$EFFECTS\"; then\n"
    "        $C leader commit \"$COORD_WORKSTREAM\" \"$op\"; exit $?\n"
    "      fi ;;\n"
    "  11|12) exit 0 ;;\n"
    "  *) exit 1 ;;\n"
    "esac\n"
    "[ \"$CRASH\" = 1 ] && exit 0\n"
    "echo \"$op\" >> \"$EFFECTS\"\n"
    "[ \"$CRASH\" = 2 ] && exit 0\n"
    "$C leader commit \"$COORD_WORKSTREAM\" \"$op\" >/dev/null\n";

/* Runs script for op under leader-run ($CRASH=crash): the claim's exit
 * status that it reported on the report pipe, or -1 (after saying why)
 * when leader-run failed or no "claim=N" line came. */
static int outbox_step(struct report *rep, const char *script, const char *op,
                       const char *crash)
{
    setenv("CRASH", crash, 1);
    struct run r;
    ctl_start(&r, rep->wr, ARGS("leader-run", "ow", "--", "sh", script, op));
    int st = run_finish(&r, T);
    if (st != 0)
        fprintf(stderr, "leader-run exited %d; stderr: %s\n", st, run_text(&r, ERR));
    run_free(&r);
    if (st != 0)
        return -1;
    const char *l = report_line(rep, T);
    int claim;
    char tail;
    if (!l || sscanf(l, "claim=%d%c", &claim, &tail) != 1) {
        fprintf(stderr, "not a \"claim=N\" line: %s\n", l ? l : "(none)");
        return -1;
    }
    return claim;
}

static int effects_of(const char *path, const char *op)
{
    char *text = slurp(path, NULL);
    int n = 0;
    size_t ol = strlen(op);
    for (char *p = text; p && *p; ) {
        char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        if (len == ol && !memcmp(p, op, ol))
            n++;
        p = nl ? nl + 1 : p + len;
    }
    free(text);
    return n;
}

static void test_outbox_script(void)
{
    start();
    char script[400], effects[400];
    in_dir(script, sizeof script, "send.sh");
    in_dir(effects, sizeof effects, "effects");
    write_file(script, outbox_script);
    write_file(effects, "");
    setenv("EFFECTS", effects, 1);
    struct report rep;
    report_open(&rep);

    /* claimed, done, committed; again: already applied, nothing done */
    CHECK_EQ(outbox_step(&rep, script, "inv-1", "0"), 0);
    CHECK_EQ(outbox_step(&rep, script, "inv-1", "0"), 11);
    CHECK_EQ(effects_of(effects, "inv-1"), 1);

    /* died after the claim, before the effect: reconcile finds no effect
     * and does it */
    CHECK_EQ(outbox_step(&rep, script, "inv-2", "1"), 0);
    struct run o;
    CHECK_EQ(ctl_run(&o, ARGS("leader", "pending", "ow")), 0);
    CHECK(run_has(&o, OUT, "inv-2 "));
    run_free(&o);
    CHECK_EQ(outbox_step(&rep, script, "inv-2", "0"), 10);
    CHECK_EQ(effects_of(effects, "inv-2"), 1);

    /* died after the effect, before the commit: reconcile finds the
     * effect and only commits */
    CHECK_EQ(outbox_step(&rep, script, "inv-3", "2"), 0);
    CHECK_EQ(outbox_step(&rep, script, "inv-3", "0"), 10);
    CHECK_EQ(effects_of(effects, "inv-3"), 1);
    CHECK_EQ(outbox_step(&rep, script, "inv-3", "0"), 11);
    CHECK_EQ(effects_of(effects, "inv-3"), 1);

    CHECK_EQ(ctl_run(&o, ARGS("leader", "pending", "ow")), 0);
    CHECK(!strstr(run_text(&o, OUT), "inv-"));
    run_free(&o);
    report_close(&rep);

    /* commit with a key and value, abandon, and their exit codes, with
     * --generation from a library leader */
    coord_t *c = lib_client();
    uint64_t g = 0;
    CHECK_EQ(coord_leader_campaign(c, S("ow"), NULL, &g, NULL), 0);
    char gs[32], stale[32];
    snprintf(gs, sizeof gs, "%llu", (unsigned long long)g);
    snprintf(stale, sizeof stale, "%llu", (unsigned long long)g - 1);
    unsetenv("COORD_GENERATION");
    CHECK_EQ(ctl_run(&o, ARGS("leader", "claim", "ow", "x-1")), 2);
    CHECK(run_has(&o, ERR, "COORD_GENERATION"));
    run_free(&o);
    CHECK_EQ(ctl_run(&o, ARGS("leader", "claim", "--generation", gs, "ow", "x-1")), 0);
    CHECK(!strcmp(run_text(&o, OUT), "claimed\n"));
    run_free(&o);
    CHECK_EQ(ctl_run(&o, ARGS("leader", "commit", "--generation", gs, "ow", "x-1", "cfg",
                              "v1")), 0);
    CHECK(!strcmp(run_text(&o, OUT), "applied\n"));
    run_free(&o);
    void *v = NULL;
    CHECK_EQ(coord_leader_read(c, S("ow"), "cfg", &v, NULL, NULL), 0);
    CHECK(v && !strcmp(v, "v1"));
    free(v);
    setenv("COORD_GENERATION", gs, 1);
    CHECK_EQ(ctl_run(&o, ARGS("leader", "commit", "ow", "x-1")), 11);
    CHECK(run_has(&o, OUT, "duplicate generation="));
    run_free(&o);
    CHECK_EQ(ctl_run(&o, ARGS("leader", "abandon", "ow", "x-2", "customer left")), 0);
    CHECK(!strcmp(run_text(&o, OUT), "abandoned\n"));
    run_free(&o);
    CHECK_EQ(ctl_run(&o, ARGS("leader", "claim", "ow", "x-2")), 12);
    run_free(&o);
    CHECK_EQ(ctl_run(&o, ARGS("leader", "commit", "ow", "x-2")), 12);
    run_free(&o);
    CHECK_EQ(ctl_run(&o, ARGS("leader", "abandon", "ow", "x-1", "late")), 11);
    run_free(&o);
    CHECK_EQ(ctl_run(&o, ARGS("--json", "leader", "claim", "ow", "x-1")), 11);
    CHECK(run_has(&o, OUT, "{\"claimed\":false,\"applied\":true,\"generation\":"));
    run_free(&o);
    setenv("COORD_GENERATION", stale, 1);
    CHECK_EQ(ctl_run(&o, ARGS("leader", "claim", "ow", "x-3")), 1);
    CHECK(run_has(&o, ERR, "coordctl: leader claim: FENCED: "));
    run_free(&o);
    setenv("COORD_GENERATION", "abc", 1);
    CHECK_EQ(ctl_run(&o, ARGS("leader", "claim", "ow", "x-3")), 2);
    run_free(&o);
    unsetenv("COORD_GENERATION");
    /* read-only mode */
    CHECK_EQ(ctl_run(&o, ARGS("leader", "define", "ow", "--mode", "read-only")), 0);
    run_free(&o);
    CHECK_EQ(ctl_run(&o, ARGS("leader", "claim", "--generation", gs, "ow", "x-4")), 1);
    CHECK(run_has(&o, ERR, "READ_ONLY"));
    run_free(&o);
    coord_close(c);
    stop();
}

/* ==== --protocol, --incident ==== */

static void test_run_protocol_incident(void)
{
    start();
    struct run r;
    CHECK_EQ(ctl_run(&r, ARGS("leader", "define", "pw", "--protocol", "pw-app@2")), 0);
    run_free(&r);
    CHECK_EQ(ctl_run(&r, ARGS("leader-run", "--protocol", "pw-app@1", "pw", "--", "true")), 1);
    CHECK(run_has(&r, ERR, "coordctl: leader-run: PROTOCOL_PINNED: "));
    run_free(&r);
    CHECK_EQ(ctl_run(&r, ARGS("leader-run", "pw", "--", "true")), 1);
    CHECK(run_has(&r, ERR, "PROTOCOL_PINNED"));
    run_free(&r);
    CHECK_EQ(ctl_run(&r, ARGS("leader-run", "--protocol", "pw-app@3", "pw", "--", "true")), 0);
    run_free(&r);
    CHECK_EQ(ctl_run(&r, ARGS("leader-run", "--protocol", "pw-app@2", "pw", "--", "true")), 1);
    CHECK(run_has(&r, ERR, "PROTOCOL_PINNED"));       /* the ratchet */
    run_free(&r);
    CHECK_EQ(ctl_run(&r, ARGS("leader-run", "--protocol", "nover", "pw", "--", "true")), 2);
    run_free(&r);

    /* incident takeover of a disabled workstream */
    CHECK_EQ(ctl_run(&r, ARGS("disable", "iw")), 0);
    run_free(&r);
    CHECK_EQ(ctl_run(&r, ARGS("leader-run", "iw", "--", "true")), 1);
    CHECK(run_has(&r, ERR, "DISABLED"));
    run_free(&r);
    char file[400];
    in_dir(file, sizeof file, "inc");
    setenv("OUT_FILE", file, 1);
    CHECK_EQ(ctl_run(&r, ARGS("leader-run", "--incident", "INC-7 failover", "iw", "--",
                              "sh", "-c",
                              "$COORDCTL --no-autostart leader iw > \"$OUT_FILE\"")), 0);
    run_free(&r);
    CHECK(file_has(file, "INC-7 failover"));      /* the incident row */
    CHECK_EQ(ctl_run(&r, ARGS("leader", "history", "iw")), 0);
    CHECK(run_has(&r, OUT, "INC-7 failover"));
    run_free(&r);
    CHECK_EQ(ctl_run(&r, ARGS("leader-run", "--incident", "", "iw", "--", "true")), 2);
    run_free(&r);

    /* an incident steal under incident-only; the old leader hears why */
    struct report rep;
    report_open(&rep);
    struct run old;
    CHECK_EQ(ctl_run(&r, ARGS("leader", "define", "sw", "--steal", "incident-only")), 0);
    run_free(&r);
    ctl_start(&old, rep.wr, ARGS("leader-run", "sw", "--", "sh", "-c", reporting_cmd));
    CHECK(started_gen(report_line(&rep, T)) > 0);
    CHECK_EQ(ctl_run(&r, ARGS("leader-run", "--steal", "sw", "--", "true")), 1);
    CHECK(run_has(&r, ERR, "POLICY"));
    run_free(&r);
    CHECK_EQ(ctl_run(&r, ARGS("leader-run", "--steal", "--incident", "INC-8", "sw", "--",
                              "true")), 0);
    run_free(&r);
    const char *l = report_line(&rep, T);
    CHECK(l && !strcmp(l, "term"));
    CHECK_EQ(run_finish(&old, T), 1);
    CHECK(run_has(&old, ERR, "lost leadership of sw (incident: INC-8)"));
    run_free(&old);
    report_close(&rep);
    stop();
}

int main(int argc, char **argv)
{
    static const struct test_case tests[] = {
        { "define_flags", test_define_flags },
        { "define_file", test_define_file },
        { "info_check_history", test_info_check_history },
        { "drain_operator", test_drain_operator },
        { "run_sigterm_drain", test_run_sigterm_drain },
        { "run_max_hold", test_run_max_hold },
        { "outbox_script", test_outbox_script },
        { "run_protocol_incident", test_run_protocol_incident },
        { NULL, NULL },
    };
    return run_tests(argc, argv, tests);
}
