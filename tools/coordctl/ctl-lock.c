/* ctl-lock.c - coordctl's lock commands:
 *   lock   run a command while holding a lock, like flock(1)
 *   locks  what is held and what waits, like navigator.locks.query()
 *
 * `lock` runs the command with ctl_hold_run (ctl-run.c): it waits for the
 * broker connection (a lock.lost event, the connection dying, lease
 * renewals) and the signals to forward to the command at once. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "coordctl.h"

/* ---- coordctl lock ---- */

struct lock_run {
    struct ctl_hold hold;       /* first: the callbacks get &hold */
    const char *name;           /* from argv: NUL-terminated */
    uint64_t lock, token;
};

static void on_event(coord_t *c, const coord_reply_t *ev, void *ud)
{
    struct lock_run *lr = ud;
    coord_lock_lost l;
    (void)c;
    if (!coord_event_lock_lost(ev, &l) || l.lock != lr->lock)
        return;
    ctl_hold_lost(&lr->hold, l.reason, l.reason_len);
}

static coord_req_t *renew_req(struct ctl_hold *h)
{
    struct lock_run *lr = (struct lock_run *)h;
    coord_req_t *r = coord_req_new("lock.renew");
    if (!r)
        return NULL;
    coord_req_uint(r, "lock", lr->lock);
    coord_req_uint(r, "lease_ms", h->lease_ms);
    return r;
}

static int release(struct ctl_hold *h)
{
    return coord_lock_release(h->ctl->c, ((struct lock_run *)h)->lock);
}

static const struct ctl_hold_ops lock_ops = {
    .what = "lock",
    .lost = "lost",
    .on_event = on_event,
    /* a lock.lost read along with the grant waits in the event queue */
    .dispatch_first = true,
    .renew_req = renew_req,
    /* a lost lease normally comes as lock.lost first */
    .renew_refused = COORD_EUNKNOWN_LOCK,
    .renew_refused_why = "the lease could not be renewed",
    .release = release,
    .release_refused = COORD_EUNKNOWN_LOCK,
    .release_refused_why = "no longer held at release",
};

/* ---- -v: who holds the lock while we wait ---- */

struct verbose_wait {
    bool done;
    int status;
    uint64_t lock, token;
};

static void on_granted(coord_t *c, int status, uint64_t lock, uint64_t token, void *ud)
{
    struct verbose_wait *w = ud;
    (void)c;
    w->done = true;
    w->status = status;
    w->lock = lock;
    w->token = token;
}

/* "waiting for NAME: held by CLIENT (pid P, conn C) for 4.2 s, ..." from
 * lock.query, on stderr. */
static void say_holders(struct ctl *ctl, const char *name, const char *shown,
                        const struct verbose_wait *w)
{
    coord_reply_t *reply = NULL;
    if (coord_lock_query(ctl->c, &reply) < 0) {
        if (!w->done)
            fprintf(stderr, "coordctl: lock: waiting for %s\n", shown);
        return;
    }
    if (w->done) {
        coord_reply_free(reply);
        return;
    }
    coord_map m = coord_reply_map(reply);
    size_t n = coord_map_array_len(m, "held"), said = 0, len = strlen(name);
    fprintf(stderr, "coordctl: lock: waiting for %s", shown);
    for (size_t i = 0; i < n; i++) {
        coord_map e;
        const char *en;
        size_t enl;
        if (!coord_map_array_at(m, "held", i, &e) || !coord_map_str(e, "name", &en, &enl) ||
            enl != len || memcmp(en, name, len) != 0)
            continue;
        uint64_t pid = 0, conn = 0, age = 0;
        char d[64];
        coord_map_uint(e, "pid", &pid);
        coord_map_uint(e, "conn", &conn);
        coord_map_uint(e, "age_ms", &age);
        ctl_format_duration(d, sizeof d, age);
        char *client = ctl_escaped_field(e, "client");
        char *mode = ctl_escaped_field(e, "mode");
        fprintf(stderr, "%s %s (pid %llu, conn %llu, %s) for %s", said ? "," : ": held by",
                client && *client ? client : "?", (unsigned long long)pid,
                (unsigned long long)conn, mode ? mode : "?", d);
        free(client);
        free(mode);
        said++;
    }
    if (!said)
        fputs(" (queued behind other waiters)", stderr);
    fputc('\n', stderr);
    coord_reply_free(reply);
}

/* lock.acquire as coord_lock_acquire does it, saying on stderr who holds
 * the lock when it is not granted at once, and how long the wait took. */
static int acquire_verbose(struct ctl *ctl, const char *name, const char *shown,
                           const coord_lock_opts *o, uint64_t *lock, uint64_t *token)
{
    struct verbose_wait w = { 0 };
    int64_t t0 = ctl_mono_ms();
    int rc = coord_lock_acquire_async(ctl->c, name, strlen(name), o, on_granted, &w, NULL);
    if (rc < 0)
        return rc;
    /* the query goes behind the acquire: the broker answers in order, so
     * a grant (or a refusal) at once has come when the query's answer
     * does, and nothing is said */
    say_holders(ctl, name, shown, &w);
    while (!w.done) {
        rc = coord_wait(ctl->c, -1);
        if (rc < 0)
            return rc;
    }
    if (w.status == 0) {
        char d[64];
        ctl_format_duration(d, sizeof d, (uint64_t)(ctl_mono_ms() - t0));
        fprintf(stderr, "coordctl: lock: got %s after %s\n", shown, d);
    }
    *lock = w.lock;
    *token = w.token;
    return w.status;
}

/* Runs cmd holding the lock; returns coordctl's exit status. */
static int run_locked(struct lock_run *lr, char **cmd)
{
    char tok[32];
    snprintf(tok, sizeof tok, "%llu", (unsigned long long)lr->token);
    const char *const env[] = {
        "COORD_LOCK_TOKEN", tok, "COORD_LOCK_NAME", lr->name, NULL,
    };
    return ctl_hold_run(&lr->hold, env, cmd);
}

int cmd_lock(struct ctl *ctl, int argc, char **argv)
{
    static const struct option longopts[] = {
        { "shared", no_argument, NULL, 's' },
        { "nonblock", no_argument, NULL, 'n' },
        { "wait", required_argument, NULL, 'w' },
        { "timeout", required_argument, NULL, 'w' },
        { "steal", no_argument, NULL, 'S' },
        { "lease", required_argument, NULL, 'L' },
        { "json", no_argument, NULL, 'j' },
        { "conflict-exit-code", required_argument, NULL, 'E' },
        { "verbose", no_argument, NULL, 'v' },
        { NULL, 0, NULL, 0 },
    };
    coord_lock_opts o;
    memset(&o, 0, sizeof o);
    struct ctl_wait w = { .has_shared = true };
    const char *wait_arg = NULL;
    int conflict_exit = CTL_EXIT_FAIL;
    bool verbose = false;
    int opt;
    optind = 1;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "+snw:E:v", longopts, NULL)) != -1) {
        switch (opt) {
        case 's':
            o.shared = w.shared = true;
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
            wait_arg = optarg;
            break;
        case 'j':
            ctl->json = true;
            break;
        case 'E': {
            char *end;
            long v = strtol(optarg, &end, 10);
            if (!*optarg || *end || v < 0 || v > 255)
                return ctl_usage(ctl, "-E needs an exit status from 0 to 255, not %s", optarg);
            conflict_exit = (int)v;
            break;
        }
        case 'v':
            verbose = true;
            break;
        case 'L':
            if (!ctl_parse_seconds(optarg, &o.lease_ms) || o.lease_ms == 0)
                return ctl_usage(ctl, "--lease needs a positive number of seconds, not %s",
                                 optarg);
            break;
        case ':':
            return ctl_usage(ctl, "%s needs a value", argv[optind - 1]);
        default:
            return ctl_usage(ctl, "unknown flag %s", argv[optind - 1]);
        }
    }
    const char *name;
    char **cmd;
    int rc = ctl_name_and_cmd(ctl, argc, argv, optind, "NAME", &name, &cmd);
    if (rc)
        return rc;

    if ((rc = ctl_wait_settle(ctl, &w, &o.if_available, &o.timeout_ms)))
        return rc;

    struct lock_run lr;
    memset(&lr, 0, sizeof lr);
    lr.hold.ops = &lock_ops;
    lr.hold.ctl = ctl;
    lr.hold.lease_ms = o.lease_ms;
    lr.name = name;
    rc = ctl_connect_shown(ctl, name, &lr.hold.shown);
    if (rc)
        return rc;
    if (verbose)
        rc = acquire_verbose(ctl, name, lr.hold.shown, &o, &lr.lock, &lr.token);
    else
        rc = coord_lock_acquire(ctl->c, name, strlen(name), &o, &lr.lock, &lr.token);
    if (rc == COORD_LOCK_BUSY) {
        ctl_error(ctl, "BUSY", "%s is busy", lr.hold.shown);
        rc = conflict_exit;
    } else if (rc == COORD_ETIMEOUT) {
        ctl_error(ctl, "TIMEOUT", "timed out after %s s waiting for %s",
                  wait_arg ? wait_arg : "?", lr.hold.shown);
        rc = conflict_exit;
    } else if (rc < 0) {
        rc = ctl_fail_call(ctl, "lock", rc);
    } else {
        rc = run_locked(&lr, cmd);
    }
    /* close here: pending callbacks point at lr, which lives on this stack */
    coord_close(ctl->c);
    ctl->c = NULL;
    free(lr.hold.shown);
    return rc;
}

/* ---- coordctl locks ---- */

enum { COL_STATE, COL_NAME, COL_MODE, COL_TOKEN, COL_CONN, COL_PID, COL_CLIENT,
       COL_AGE, NCOLS };
static const char *const col_titles[NCOLS] = {
    "STATE", "NAME", "MODE", "TOKEN", "CONN", "PID", "CLIENT", "AGE",
};

/* The broker's own locks (leadership's -leader/WORKSTREAM): shown by
 * `locks --all` only; `leader info` and `top` show them as leaders. */
static bool internal_lock(coord_map e)
{
    const char *n;
    size_t nn;
    return coord_map_str(e, "name", &n, &nn) && nn >= 8 && memcmp(n, "-leader/", 8) == 0;
}

static void add_rows(struct ctl_rows *t, coord_map m, const char *list, bool held, bool all,
                     size_t *hidden)
{
    size_t count = coord_map_array_len(m, list);
    for (size_t i = 0; i < count; i++) {
        coord_map e;
        if (!all && coord_map_array_at(m, list, i, &e) && internal_lock(e)) {
            (*hidden)++;
            continue;
        }
        char **row = ctl_rows_add(t);
        if (!row)
            return;
        if (!coord_map_array_at(m, list, i, &e)) {
            for (int k = 0; k < NCOLS; k++)
                row[k] = strdup("?");
        } else {
            uint64_t age = 0;
            char d[64];
            coord_map_uint(e, "age_ms", &age);
            ctl_format_duration(d, sizeof d, age);
            row[COL_STATE] = strdup(held ? "held" : "pending");
            row[COL_NAME] = ctl_escaped_field(e, "name");
            row[COL_MODE] = ctl_escaped_field(e, "mode");
            row[COL_TOKEN] = held ? ctl_uint_cell(e, "token") : strdup("-");
            row[COL_CONN] = ctl_uint_cell(e, "conn");
            row[COL_PID] = ctl_uint_cell(e, "pid");
            row[COL_CLIENT] = ctl_escaped_field(e, "client");
            row[COL_AGE] = strdup(d);
        }
        ctl_rows_check(t, row);
    }
}

/* "LIST":[entries], without the leadership locks unless all. */
static void json_list(coord_map m, const char *list, bool all, size_t *hidden)
{
    printf("\"%s\":[", list);
    size_t count = coord_map_array_len(m, list);
    bool first = true;
    for (size_t i = 0; i < count; i++) {
        coord_map e;
        if (!coord_map_array_at(m, list, i, &e))
            continue;
        if (!all && internal_lock(e)) {
            (*hidden)++;
            continue;
        }
        if (!first)
            putchar(',');
        first = false;
        ctl_print_json_inline(e);
    }
    putchar(']');
}

/* --json: {"held":[...],"pending":[...],"hidden":N,"truncated":B}, the
 * entries as the broker's lock.query has them (name, mode, token, conn,
 * pid, client, age_ms), "hidden" the leadership locks left out (-a: 0). */
static void json_locks(coord_map m, bool all)
{
    size_t hidden = 0;
    bool truncated = false;
    coord_map_bool(m, "truncated", &truncated);
    putchar('{');
    json_list(m, "held", all, &hidden);
    putchar(',');
    json_list(m, "pending", all, &hidden);
    printf(",\"hidden\":%zu,\"truncated\":%s}\n", hidden, truncated ? "true" : "false");
}

int cmd_locks(struct ctl *ctl, int argc, char **argv)
{
    bool all = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-a") || !strcmp(argv[i], "--all"))
            all = true;
        else if (!strcmp(argv[i], "--json"))
            ctl->json = true;
        else
            return ctl_usage(ctl, "unexpected argument %s", argv[i]);
    }
    int rc = ctl_connect(ctl);
    if (rc)
        return rc;
    coord_reply_t *reply = NULL;
    rc = coord_lock_query(ctl->c, &reply);
    if (rc < 0)
        return ctl_fail_call(ctl, "lock.query", rc);
    coord_map m = coord_reply_map(reply);
    if (ctl->json) {
        json_locks(m, all);
        coord_reply_free(reply);
        return CTL_EXIT_OK;
    }
    struct ctl_rows t = { .ncols = NCOLS, .titles = col_titles };
    size_t hidden = 0;
    add_rows(&t, m, "held", true, all, &hidden);
    add_rows(&t, m, "pending", false, all, &hidden);
    bool truncated = false;
    coord_map_bool(m, "truncated", &truncated);
    if (t.n == 0 && !t.failed) {
        if (hidden)
            printf("no locks held or pending (and %zu of leadership: --all)\n", hidden);
        else
            printf("no locks held or pending\n");
        free(t.cell);
        rc = CTL_EXIT_OK;
    } else {
        rc = ctl_rows_print(&t, "locks");
    }
    if (truncated)
        fprintf(stderr, "coordctl: locks: the list was cut at the broker's "
                        "frame limit\n");
    coord_reply_free(reply);
    return rc;
}
