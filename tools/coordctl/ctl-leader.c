/* ctl-leader.c - coordctl's leadership commands:
 *   leader [info] WORKSTREAM   the state of a workstream (generation,
 *                              state, mode, leader, lease, pin, max hold)
 *   leader history|drain       the term history; an operator's drain
 *   leader SUBCOMMAND ...      the others: define, describe
 *                              (ctl-descriptor.c); claim, commit, abandon,
 *                              pending, check (ctl-outbox.c)
 *   leader-run  campaign, run a command as leader, renew, resign; answer a
 *               drain (the broker's leader.drain, or SIGINT/SIGTERM to
 *               coordctl) by telling CMD and resigning once it ended
 *   disable     the incident kill switch (fences the leader)
 *   enable      lifts it
 *
 * leader-run runs the command with ctl_hold_run (ctl-run.c): it waits for
 * the broker connection (leader.lost, leader.drain, renew replies, the
 * connection dying) and the signals to forward to the command at once.
 * The campaign is tracked as a coord_leader_term (the library's states). */
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "coordctl.h"


/* See coordctl.h: leader, describe, disable and enable. */
int ctl_one_workstream(struct ctl *ctl, int argc, char **argv, const char **ws)
{
    int i = ctl_first_operand(ctl, argc, argv);
    if (i >= argc)
        return ctl_usage(ctl, "missing WORKSTREAM");
    if (i + 1 < argc)
        return ctl_usage(ctl, "unexpected argument %s", argv[i + 1]);
    *ws = argv[i];
    return 0;
}

/* ---- coordctl leader [info] ---- */

/* A row whose value is p[0..n) escaped for the terminal. */
static void add_escaped(struct ctl_table *t, const char *name, const char *p, size_t n)
{
    char *e = ctl_escape(p, n > 200 ? 200 : n);
    if (!e) {
        t->failed = true;
        return;
    }
    ctl_table_add(t, name, e);
    free(e);
}

static int leader_info(struct ctl *ctl, int argc, char **argv)
{
    const char *ws;
    int rc = ctl_one_workstream(ctl, argc, argv, &ws);
    if (rc || (rc = ctl_connect(ctl)))
        return rc;
    coord_reply_t *reply = NULL;
    rc = coord_leader_info(ctl->c, ws, strlen(ws), &reply);
    if (rc < 0)
        return ctl_fail_call(ctl, "leader", rc);
    coord_map m = coord_reply_map(reply);
    if (ctl->json) {
        rc = ctl_print_json(m);
        coord_reply_free(reply);
        return rc;
    }

    struct ctl_table t = { 0 };
    char *shown = ctl_escape(ws, strlen(ws));
    ctl_table_add(&t, "workstream", shown ? shown : "?");
    free(shown);
    uint64_t gen = 0, live = 0, v;
    coord_map_uint(m, "generation", &gen);
    ctl_table_addf(&t, "generation", "%llu", (unsigned long long)gen);
    const char *s;
    size_t n;
    if (coord_map_str(m, "state", &s, &n))
        ctl_table_addf(&t, "state", "%.*s", (int)n, s);
    if (coord_map_str(m, "drain_reason", &s, &n) && n)
        add_escaped(&t, "drain reason", s, n);
    if (coord_map_str(m, "mode", &s, &n))
        add_escaped(&t, "mode", s, n);
    if (coord_map_str(m, "lock_name", &s, &n) && n)
        add_escaped(&t, "lock", s, n);
    if (coord_map_uint(m, "live_generation", &live)) {
        if (live != gen)
            ctl_table_addf(&t, "live generation", "%llu", (unsigned long long)live);
        char who[400];
        int len = 0;
        if (coord_map_uint(m, "conn", &v))
            len += snprintf(who + len, sizeof who - (size_t)len, "conn %llu",
                            (unsigned long long)v);
        if (coord_map_uint(m, "pid", &v) && len < (int)sizeof who)
            len += snprintf(who + len, sizeof who - (size_t)len, "%spid %llu",
                            len ? ", " : "", (unsigned long long)v);
        if (coord_map_str(m, "client", &s, &n) && n && len < (int)sizeof who) {
            char *e = ctl_escape(s, n > 200 ? 200 : n);
            len += snprintf(who + len, sizeof who - (size_t)len, "%sclient %s",
                            len ? ", " : "", e ? e : "?");
            free(e);
        }
        ctl_table_add(&t, "leader", len ? who : "?");
        char d[64];
        if (coord_map_uint(m, "lease_left_ms", &v)) {
            ctl_format_duration(d, sizeof d, v);
            ctl_table_add(&t, "lease left", d);
        }
        if (coord_map_uint(m, "leading_ms", &v)) {
            ctl_format_duration(d, sizeof d, v);
            ctl_table_add(&t, "leading for", d);
        }
        if (coord_map_str(m, "protocol", &s, &n) && n)
            add_escaped(&t, "protocol", s, n);
        if (coord_map_str(m, "incident", &s, &n) && n)
            add_escaped(&t, "incident", s, n);
    } else {
        ctl_table_add(&t, "leader", "none");
    }
    bool disabled = false;
    coord_map_bool(m, "disabled", &disabled);
    ctl_table_add(&t, "disabled", disabled ? "yes" : "no");
    if (coord_map_str(m, "pinned_protocol", &s, &n) && n)
        add_escaped(&t, "pinned protocol", s, n);
    if (coord_map_uint(m, "max_hold_ms", &v)) {
        char d[64];
        if (v)
            ctl_format_duration(d, sizeof d, v);
        ctl_table_add(&t, "max hold", v ? d : "none");
    }
    rc = ctl_table_print(&t);
    coord_reply_free(reply);
    return rc;
}

/* ---- coordctl leader history ---- */

/* ms since the Unix epoch as local "YYYY-MM-DD HH:MM:SS" ("-" for 0). */
static char *time_cell(uint64_t ms)
{
    if (!ms)
        return strdup("-");
    time_t sec = (time_t)(ms / 1000);
    struct tm tm;
    char buf[32];
    if (!localtime_r(&sec, &tm) || !strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm))
        return ctl_strdupf("%llu", (unsigned long long)ms);
    return strdup(buf);
}

/* An escaped string field as a cell, "-" when absent or empty. */
static char *str_cell(coord_map m, const char *key)
{
    const char *s;
    size_t n;
    if (!coord_map_str(m, key, &s, &n) || !n)
        return strdup("-");
    return ctl_escape(s, n > 100 ? 100 : n);
}

static int leader_history(struct ctl *ctl, int argc, char **argv)
{
    char *ops[1];
    int nops;
    unsigned limit = 0;
    int rc = ctl_leader_args(ctl, argc, argv, 1, 1, ops, &nops, NULL, &limit);
    if (rc)
        return rc;
    const char *ws = ops[0];
    if ((rc = ctl_connect(ctl)))
        return rc;
    coord_reply_t *reply = NULL;
    rc = coord_leader_history(ctl->c, ws, strlen(ws), limit, &reply);
    if (rc < 0)
        return ctl_fail_call(ctl, "leader history", rc);
    coord_map m = coord_reply_map(reply);
    if (ctl->json) {
        rc = ctl_print_json(m);
        coord_reply_free(reply);
        return rc;
    }
    static const char *const titles[] = {
        "GENERATION", "CLIENT", "PID", "PROTOCOL", "MODE", "ELECTED", "HELD", "END",
        "INCIDENT",
    };
    struct ctl_rows t = { .ncols = 9, .titles = titles };
    size_t n = coord_map_array_len(m, "terms");
    for (size_t i = 0; i < n; i++) {
        coord_map e;
        if (!coord_map_array_at(m, "terms", i, &e))
            continue;
        char **row = ctl_rows_add(&t);
        if (!row)
            break;
        uint64_t elected = 0, ended = 0;
        coord_map_uint(e, "elected_ms", &elected);
        coord_map_uint(e, "ended_ms", &ended);
        bool has_reason = coord_map_str(e, "reason", &(const char *){ NULL },
                                        &(size_t){ 0 });
        row[0] = ctl_uint_cell(e, "generation");
        row[1] = str_cell(e, "client");
        row[2] = ctl_uint_cell(e, "pid");
        row[3] = str_cell(e, "protocol");
        row[4] = str_cell(e, "mode");
        row[5] = time_cell(elected);
        if (ended >= elected && ended) {
            char d[64];
            ctl_format_duration(d, sizeof d, ended - elected);
            row[6] = strdup(d);
        } else {
            row[6] = strdup(has_reason ? "-" : "live");
        }
        row[7] = has_reason ? str_cell(e, "reason") : strdup("live");
        row[8] = str_cell(e, "incident");
        ctl_rows_check(&t, row);
    }
    bool truncated = false;
    coord_map_bool(m, "truncated", &truncated);
    coord_reply_free(reply);
    rc = ctl_rows_print(&t, "leader history");
    if (truncated)
        fprintf(stderr, "coordctl: leader history: cut to fit a frame\n");
    return rc;
}

/* ---- coordctl leader drain ---- */

bool ctl_parse_generation(const char *s, uint64_t *gen)
{
    char *end;
    if (!s || *s < '0' || *s > '9')
        return false;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end || v == 0)
        return false;
    *gen = v;
    return true;
}

static int leader_drain(struct ctl *ctl, int argc, char **argv)
{
    int i = ctl_first_operand(ctl, argc, argv);
    if (i >= argc)
        return ctl_usage(ctl, "missing WORKSTREAM");
    const char *ws = argv[i++];
    uint64_t gen = 0;
    if (i < argc && !ctl_parse_generation(argv[i++], &gen))
        return ctl_usage(ctl, "GENERATION must be a positive number, not %s", argv[i - 1]);
    if (i < argc)
        return ctl_usage(ctl, "unexpected argument %s", argv[i]);
    int rc = ctl_connect(ctl);
    if (rc)
        return rc;
    if (!gen) {
        /* the operator's drain: the live generation, from leader.info */
        coord_reply_t *info = NULL;
        rc = coord_leader_info(ctl->c, ws, strlen(ws), &info);
        if (rc < 0)
            return ctl_fail_call(ctl, "leader drain", rc);
        bool live = coord_map_uint(coord_reply_map(info), "live_generation", &gen);
        coord_reply_free(info);
        if (!live || !gen) {
            char *e = ctl_escape(ws, strlen(ws));
            fprintf(stderr, "coordctl: leader drain: nobody leads %s\n", e ? e : "?");
            free(e);
            return CTL_EXIT_FAIL;
        }
    }
    rc = coord_leader_drain(ctl->c, ws, strlen(ws), gen);
    if (rc < 0)
        return ctl_fail_call(ctl, "leader drain", rc);
    if (ctl->json)
        printf("{\"generation\":%llu}\n", (unsigned long long)gen);
    else
        printf("draining generation %llu\n", (unsigned long long)gen);
    return CTL_EXIT_OK;
}

/* ---- coordctl leader: the subcommands ---- */

int cmd_leader(struct ctl *ctl, int argc, char **argv)
{
    static const struct {
        const char *name;
        int (*fn)(struct ctl *ctl, int argc, char **argv);
    } subs[] = {
        { "info", leader_info },
        { "define", ctl_leader_define },
        { "describe", ctl_leader_describe },
        { "history", leader_history },
        { "drain", leader_drain },
        { "pending", ctl_leader_pending },
        { "check", ctl_leader_check },
        { "claim", ctl_leader_claim },
        { "commit", ctl_leader_commit },
        { "abandon", ctl_leader_abandon },
    };
    /* a workstream named like a subcommand: coordctl leader -- NAME */
    int i = 1;
    if (i < argc && !strcmp(argv[i], "--json"))
        i++;
    if (i < argc)
        for (size_t k = 0; k < sizeof subs / sizeof subs[0]; k++)
            if (!strcmp(argv[i], subs[k].name)) {
                if (i == 2)
                    ctl->json = true;
                return subs[k].fn(ctl, argc - i, argv + i);
            }
    return leader_info(ctl, argc, argv);
}

/* ---- coordctl disable / enable ---- */

int cmd_disable(struct ctl *ctl, int argc, char **argv)
{
    const char *ws;
    int rc = ctl_one_workstream(ctl, argc, argv, &ws);
    if (rc || (rc = ctl_connect(ctl)))
        return rc;
    uint64_t gen = 0;
    rc = coord_leader_disable(ctl->c, ws, strlen(ws), &gen);
    if (rc < 0)
        return ctl_fail_call(ctl, "disable", rc);
    if (ctl->json)
        printf("{\"generation\":%llu}\n", (unsigned long long)gen);
    else
        printf("%llu\n", (unsigned long long)gen);
    return CTL_EXIT_OK;
}

int cmd_enable(struct ctl *ctl, int argc, char **argv)
{
    const char *ws;
    int rc = ctl_one_workstream(ctl, argc, argv, &ws);
    if (rc || (rc = ctl_connect(ctl)))
        return rc;
    rc = coord_leader_enable(ctl->c, ws, strlen(ws));
    if (rc < 0)
        return ctl_fail_call(ctl, "enable", rc);
    if (ctl->json)
        printf("{}\n");
    return CTL_EXIT_OK;
}

/* ---- coordctl leader-run ---- */

struct leader_run {
    struct ctl_hold hold;       /* first: the callbacks get &hold */
    const char *ws;             /* from argv: NUL-terminated */
    coord_leader_term term;     /* the campaign's state */
};

static void on_event(coord_t *c, const coord_reply_t *ev, void *ud)
{
    struct leader_run *lr = ud;
    (void)c;
    if (lr->term.state != COORD_LEADER_LEADER && lr->term.state != COORD_LEADER_DRAINING)
        return;
    if (!coord_leader_term_event(&lr->term, lr->ws, strlen(lr->ws), ev))
        return;
    coord_leader_lost l;
    coord_leader_drain_event d;
    coord_leader_mode_event m;
    if (coord_event_leader_lost(ev, &l)) {
        if (l.incident_len) {
            char why[300];
            int n = snprintf(why, sizeof why, "%.*s: %.*s", (int)l.reason_len, l.reason,
                             (int)(l.incident_len > 200 ? 200 : l.incident_len),
                             l.incident);
            ctl_hold_lost(&lr->hold, why, n < (int)sizeof why ? (size_t)n : sizeof why - 1);
        } else {
            ctl_hold_lost(&lr->hold, l.reason, l.reason_len);
        }
    } else if (coord_event_leader_drain(ev, &d)) {
        ctl_hold_drain(&lr->hold, d.reason, d.reason_len, true);
    } else if (coord_event_leader_mode(ev, &m)) {
        char *e = ctl_escape(m.mode, m.mode_len);
        fprintf(stderr, "coordctl: leader-run: %s: mode %s\n", lr->hold.shown, e ? e : "?");
        free(e);
    }
}

static coord_req_t *renew_req(struct ctl_hold *h)
{
    struct leader_run *lr = (struct leader_run *)h;
    coord_req_t *r = coord_req_new("leader.renew");
    if (!r)
        return NULL;
    coord_req_str(r, "workstream", lr->ws, strlen(lr->ws));
    coord_req_uint(r, "generation", lr->term.generation);
    return r;
}

static int resign(struct ctl_hold *h)
{
    struct leader_run *lr = (struct leader_run *)h;
    return coord_leader_term_resign(h->ctl->c, lr->ws, strlen(lr->ws), &lr->term);
}

static void on_drained(coord_t *c, int status, const coord_reply_t *reply, void *ud)
{
    struct leader_run *lr = ud;
    (void)c;
    (void)reply;
    if (status == 0 && lr->term.state == COORD_LEADER_LEADER)
        lr->term.state = COORD_LEADER_DRAINING;
    if (status == COORD_EFENCED)
        ctl_hold_lost(&lr->hold, "fenced at drain", strlen("fenced at drain"));
    /* whatever the answer: CMD is told now */
    ctl_hold_drain(&lr->hold, NULL, 0, false);
}

/* SIGINT/SIGTERM to coordctl: leader.drain, answered in on_drained. */
static int drain(struct ctl_hold *h)
{
    struct leader_run *lr = (struct leader_run *)h;
    coord_req_t *r = coord_req_new("leader.drain");
    if (!r)
        return COORD_ENOMEM;
    coord_req_str(r, "workstream", lr->ws, strlen(lr->ws));
    coord_req_uint(r, "generation", lr->term.generation);
    int rc = coord_send(h->ctl->c, r, on_drained, lr, NULL);
    coord_req_free(r);
    return rc;
}

static const struct ctl_hold_ops leader_ops = {
    .what = "leader-run",
    .lost = "lost leadership of",
    .on_event = on_event,
    /* frames that came with the campaign's reply are already read */
    .dispatch_first = true,
    .renew_req = renew_req,
    /* a lost lease normally comes as leader.lost first */
    .renew_refused = COORD_EFENCED,
    .renew_refused_why = "renew fenced",
    .release = resign,
    .release_refused = COORD_EFENCED,       /* unless an event said why */
    .release_refused_why = "fenced at resign",
    .drain = drain,
};

/* Runs cmd as the leader; returns coordctl's exit status. */
static int run_leading(struct leader_run *lr, char **cmd)
{
    struct ctl *ctl = lr->hold.ctl;
    char gen[32];
    snprintf(gen, sizeof gen, "%llu", (unsigned long long)lr->term.generation);
    /* what a CMD needs to claim and commit with `coordctl leader claim`
     * and `commit`: the same broker and scope, and the generation */
    const char *const env[] = {
        "COORD_GENERATION", gen,
        "COORD_MODE", "leader",
        "COORD_WORKSTREAM", lr->ws,
        "COORD_LEADER_MODE", lr->term.mode,
        "COORD_SOCKET", ctl->socket,
        "COORD_SCOPE", ctl->opts.scope ? ctl->opts.scope : "",
        NULL,
    };
    return ctl_hold_run(&lr->hold, env, cmd);
}

/* ---- leader-run without a broker: the workstream's fallback ---- */

/* CMD with no leader and no generation (COORD_MODE says how it runs); its
 * exit status, SIGINT/SIGTERM/SIGHUP forwarded. */
static int run_fallback(const char *ws, const char *fallback, const char *mode,
                        char **cmd)
{
    const char *const env[] = {
        "COORD_MODE", mode,
        "COORD_FALLBACK", fallback,
        "COORD_WORKSTREAM", ws,
        NULL,
    };
    unsetenv("COORD_GENERATION");
    if (!strcmp(mode, "read-only"))
        setenv("COORD_LEADER_MODE", "read-only", 1);
    else
        unsetenv("COORD_LEADER_MODE");
    return ctl_child_run("leader-run", env, cmd);
}

/* The broker cannot be reached (code): the descriptor file's fallback
 * decides; without one, fail closed as ever. */
static int leader_fallback(struct ctl *ctl, const char *ws, const char *shown,
                           bool single_instance, int code, char **cmd)
{
    coord_leader_fallback_info fb;
    coord_leader_fallback(NULL, ctl->opts.scope, ws, strlen(ws), &fb);
    const char *mode = NULL;
    if (fb.action == COORD_LEADER_READ_ONLY)
        mode = "read-only";
    else if (fb.action == COORD_LEADER_SINGLE_INSTANCE && single_instance)
        mode = "single-instance";
    if (!mode) {
        char why[sizeof fb.reason + 200];
        if (fb.action == COORD_LEADER_SINGLE_INSTANCE)
            snprintf(why, sizeof why, "fallback SINGLE_INSTANCE (%s): only the instance "
                     "started with --single-instance runs alone; failing closed", fb.path);
        else
            snprintf(why, sizeof why, "%s", fb.reason);
        if (ctl->json) {
            /* one error object: the connect error and why no fallback ran */
            ctl_error(ctl, ctl_code_name(code), "%s: %s", coord_error_message(NULL), why);
            return CTL_EXIT_UNREACHABLE;
        }
        int rc = ctl_fail_connect(ctl, code);
        fprintf(stderr, "coordctl: leader-run: %s: %s\n", shown, why);
        return rc;
    }
    fprintf(stderr, "coordctl: leader-run: %s: the broker cannot be reached (%s): "
            "fallback %s (%s): running the command %s, with no generation\n", shown,
            ctl_code_name(code), fb.fallback, fb.path,
            !strcmp(mode, "read-only") ? "read-only, not as leader"
                                       : "alone, as the single instance the user chose");
    return run_fallback(ws, fb.fallback, mode, cmd);
}

int cmd_leader_run(struct ctl *ctl, int argc, char **argv)
{
    static const struct option longopts[] = {
        { "lease", required_argument, NULL, 'L' },
        { "nonblock", no_argument, NULL, 'n' },
        { "wait", required_argument, NULL, 'w' },
        { "timeout", required_argument, NULL, 'w' },
        { "steal", no_argument, NULL, 'S' },
        { "protocol", required_argument, NULL, 'P' },
        { "incident", required_argument, NULL, 'I' },
        { "capabilities", required_argument, NULL, 'A' },
        { "single-instance", no_argument, NULL, '1' },
        { "json", no_argument, NULL, 'j' },
        { NULL, 0, NULL, 0 },
    };
    bool single_instance = false;
    coord_leader_opts o;
    memset(&o, 0, sizeof o);
    struct ctl_wait w = { .has_shared = false };
    int opt;
    optind = 1;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "+nw:", longopts, NULL)) != -1) {
        switch (opt) {
        case 'L':
            if (!ctl_parse_seconds(optarg, &o.lease_ms) || o.lease_ms == 0)
                return ctl_usage(ctl, "--lease needs a positive number of seconds, not %s",
                                 optarg);
            break;
        case 'n':
            w.nonblock = true;
            break;
        case 'S':
            o.steal = w.steal = true;
            break;
        case 'w':
            if (!ctl_parse_seconds(optarg, &w.wait_ms))
                return ctl_usage(ctl, "-w needs a number of seconds, not %s", optarg);
            w.have_wait = true;
            break;
        case 'P':
            if (!strchr(optarg, '@'))
                return ctl_usage(ctl, "--protocol needs NAME@VERSION, not %s", optarg);
            o.protocol = optarg;
            break;
        case 'j':
            ctl->json = true;
            break;
        case 'I':
            if (!*optarg)
                return ctl_usage(ctl, "--incident needs a reason");
            o.incident = optarg;
            break;
        case 'A':
            o.capabilities = optarg;
            break;
        case '1':
            single_instance = true;
            break;
        case ':':
            return ctl_usage(ctl, "%s needs a value", argv[optind - 1]);
        default:
            return ctl_usage(ctl, "unknown flag %s", argv[optind - 1]);
        }
    }
    const char *ws;
    char **cmd;
    int rc = ctl_name_and_cmd(ctl, argc, argv, optind, "WORKSTREAM", &ws, &cmd);
    if (rc)
        return rc;

    if ((rc = ctl_wait_settle(ctl, &w, &o.if_available, &o.timeout_ms)))
        return rc;

    struct leader_run lr;
    memset(&lr, 0, sizeof lr);
    lr.hold.ops = &leader_ops;
    lr.hold.ctl = ctl;
    lr.ws = ws;
    lr.hold.shown = ctl_escape(ws, strlen(ws));
    if (!lr.hold.shown) {
        fprintf(stderr, "coordctl: leader-run: out of memory\n");
        return CTL_EXIT_FAIL;
    }
    rc = ctl_try_connect(ctl, false);
    if (rc == COORD_ECONNECT) {
        rc = leader_fallback(ctl, ws, lr.hold.shown, single_instance, rc, cmd);
        free(lr.hold.shown);
        return rc;
    }
    if (rc < 0) {
        free(lr.hold.shown);
        return ctl_fail_connect(ctl, rc);
    }
    /* set before the campaign: a leader.lost right behind the grant then
     * reaches us too (the callback ignores anything until we lead) */
    coord_set_event_cb(ctl->c, on_event, &lr);
    rc = coord_leader_campaign_term(ctl->c, ws, strlen(ws), &o, &lr.term);
    if (rc < 0) {
        coord_set_event_cb(ctl->c, NULL, NULL);
        free(lr.hold.shown);
        return ctl_fail_call(ctl, "leader-run", rc);
    }
    if (lr.term.state != COORD_LEADER_LEADER) {
        coord_set_event_cb(ctl->c, NULL, NULL);
        fprintf(stderr, "coordctl: leader-run: %s has a leader\n", lr.hold.shown);
        free(lr.hold.shown);
        return CTL_EXIT_FAIL;
    }
    /* the lease granted (a max hold caps it) sets the renewal period */
    lr.hold.lease_ms = lr.term.lease_ms ? lr.term.lease_ms
                                        : o.lease_ms ? o.lease_ms
                                        : COORD_LEADER_DEFAULT_LEASE_MS;
    rc = run_leading(&lr, cmd);
    /* close here: pending callbacks point at lr, which lives on this stack */
    coord_close(ctl->c);
    ctl->c = NULL;
    free(lr.hold.shown);
    return rc;
}
