/* ctl-leader.c - coordctl's leadership commands:
 *   leader      the state of a workstream (generation, leader, lease)
 *   leader-run  campaign, run a command as leader, renew, resign
 *   disable     the incident kill switch (fences the leader)
 *   enable      lifts it
 *
 * leader-run runs the command with ctl_hold_run (ctl-run.c): it waits for
 * the broker connection (leader.lost, renew replies, the connection dying)
 * and the signals to forward to the command at once. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "coordctl.h"

#define DEFAULT_LEASE_MS 30000

/* The single WORKSTREAM argument of leader, disable and enable. */
static int one_workstream(struct ctl *ctl, int argc, char **argv, const char **ws)
{
    int i = ctl_first_operand(ctl, argc, argv);
    if (i >= argc)
        return ctl_usage(ctl, "missing WORKSTREAM");
    if (i + 1 < argc)
        return ctl_usage(ctl, "unexpected argument %s", argv[i + 1]);
    *ws = argv[i];
    return 0;
}

/* ---- coordctl leader ---- */

int cmd_leader(struct ctl *ctl, int argc, char **argv)
{
    const char *ws;
    int rc = one_workstream(ctl, argc, argv, &ws);
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
    } else {
        ctl_table_add(&t, "leader", "none");
    }
    bool disabled = false;
    coord_map_bool(m, "disabled", &disabled);
    ctl_table_add(&t, "disabled", disabled ? "yes" : "no");
    rc = ctl_table_print(&t);
    coord_reply_free(reply);
    return rc;
}

/* ---- coordctl disable / enable ---- */

int cmd_disable(struct ctl *ctl, int argc, char **argv)
{
    const char *ws;
    int rc = one_workstream(ctl, argc, argv, &ws);
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
    int rc = one_workstream(ctl, argc, argv, &ws);
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
    uint64_t generation;
};

static void on_event(coord_t *c, const coord_reply_t *ev, void *ud)
{
    struct leader_run *lr = ud;
    coord_leader_lost l;
    (void)c;
    if (!coord_event_leader_lost(ev, &l) || !lr->generation ||
        l.generation != lr->generation || l.workstream_len != strlen(lr->ws) ||
        memcmp(l.workstream, lr->ws, l.workstream_len) != 0)
        return;
    ctl_hold_lost(&lr->hold, l.reason, l.reason_len);
}

static coord_req_t *renew_req(struct ctl_hold *h)
{
    struct leader_run *lr = (struct leader_run *)h;
    coord_req_t *r = coord_req_new("leader.renew");
    if (!r)
        return NULL;
    coord_req_str(r, "workstream", lr->ws, strlen(lr->ws));
    coord_req_uint(r, "generation", lr->generation);
    return r;
}

static int resign(struct ctl_hold *h)
{
    struct leader_run *lr = (struct leader_run *)h;
    return coord_leader_resign(h->ctl->c, lr->ws, strlen(lr->ws), lr->generation);
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
};

/* Runs cmd as the leader; returns coordctl's exit status. */
static int run_leading(struct leader_run *lr, char **cmd)
{
    char gen[32];
    snprintf(gen, sizeof gen, "%llu", (unsigned long long)lr->generation);
    const char *const env[] = {
        "COORD_GENERATION", gen, "COORD_WORKSTREAM", lr->ws, NULL,
    };
    return ctl_hold_run(&lr->hold, env, cmd);
}

int cmd_leader_run(struct ctl *ctl, int argc, char **argv)
{
    static const struct option longopts[] = {
        { "lease", required_argument, NULL, 'L' },
        { "nonblock", no_argument, NULL, 'n' },
        { "wait", required_argument, NULL, 'w' },
        { "timeout", required_argument, NULL, 'w' },
        { "steal", no_argument, NULL, 'S' },
        { NULL, 0, NULL, 0 },
    };
    coord_leader_opts o;
    memset(&o, 0, sizeof o);
    bool have_wait = false;
    uint64_t wait_ms = 0;
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
            o.if_available = true;
            break;
        case 'S':
            o.steal = true;
            break;
        case 'w':
            if (!ctl_parse_seconds(optarg, &wait_ms))
                return ctl_usage(ctl, "-w needs a number of seconds, not %s", optarg);
            have_wait = true;
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

    if (have_wait && o.if_available)
        return ctl_usage(ctl, "-n and -w cannot be combined");
    if (o.steal && (o.if_available || have_wait))
        return ctl_usage(ctl, "--steal cannot be combined with -n or -w");
    if (have_wait) {
        if (wait_ms == 0)
            o.if_available = true;    /* waiting 0 s is not waiting */
        else
            o.timeout_ms = wait_ms;
    }

    struct leader_run lr;
    memset(&lr, 0, sizeof lr);
    lr.hold.ops = &leader_ops;
    lr.hold.ctl = ctl;
    lr.hold.lease_ms = o.lease_ms ? o.lease_ms : DEFAULT_LEASE_MS;
    lr.ws = ws;
    rc = ctl_connect_shown(ctl, ws, &lr.hold.shown);
    if (rc)
        return rc;
    /* set before the campaign: a leader.lost right behind the grant then
     * reaches us too (the callback ignores anything until we lead) */
    coord_set_event_cb(ctl->c, on_event, &lr);
    bool granted = false;
    rc = coord_leader_campaign(ctl->c, ws, strlen(ws), &o, &lr.generation, &granted);
    if (rc < 0) {
        coord_set_event_cb(ctl->c, NULL, NULL);
        free(lr.hold.shown);
        return ctl_fail_call(ctl, "leader-run", rc);
    }
    if (!granted) {
        coord_set_event_cb(ctl->c, NULL, NULL);
        fprintf(stderr, "coordctl: leader-run: %s has a leader\n", lr.hold.shown);
        free(lr.hold.shown);
        return CTL_EXIT_FAIL;
    }
    rc = run_leading(&lr, cmd);
    /* close here: pending callbacks point at lr, which lives on this stack */
    coord_close(ctl->c);
    ctl->c = NULL;
    free(lr.hold.shown);
    return rc;
}
