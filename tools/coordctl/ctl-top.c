/* ctl-top.c - coordctl top: a live view of the broker, refreshed every -d
 * seconds until q or Ctrl-C (or -n frames).  Each frame is read from four
 * requests on one connection, so it is one consistent-enough picture of
 * the caller's scope:
 *   stats        the header line (version, pid, uptime, connections,
 *                requests per second since the last frame, the ledger)
 *                and the latency table;
 *   lock.query   locks held and waiting, with holder, pid and age; the
 *                broker's leadership locks (-leader/WS) are not listed as
 *                locks but name the workstreams of the next table;
 *   leader.info  per workstream led now: generation, holder, lease left,
 *                how long it has led, its mode;
 *   flight.list  flights running, with owner and followers.
 * On a terminal a frame replaces the previous one (cursor home, clear) and
 * each table shows at most TOP_ROWS rows; without one (a pipe, a test)
 * frames are printed one after another, blank-line separated, and every
 * row is shown. */
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <unistd.h>
#include "coordctl.h"

/* Rows per table on a terminal: a screen shows four tables at once. */
#define TOP_ROWS 8
#define LEADER_PREFIX "-leader/"

static volatile sig_atomic_t stop;

static void on_stop(int sig)
{
    (void)sig;
    stop = 1;
}

struct top {
    struct ctl *ctl;
    bool tty;
    uint64_t last_requests;
    int64_t last_ms;
};

/* Prints t (at most TOP_ROWS rows on a terminal, saying how many more). */
static void print_rows(struct top *tp, struct ctl_rows *t, const char *empty)
{
    if (t->n == 0 && !t->failed) {
        printf("  %s\n", empty);
        free(t->cell);
        return;
    }
    size_t more = 0;
    if (tp->tty && t->n > TOP_ROWS) {
        more = t->n - TOP_ROWS;
        for (size_t i = TOP_ROWS * (size_t)t->ncols; i < t->n * (size_t)t->ncols; i++)
            free(t->cell[i]);
        t->n = TOP_ROWS;
    }
    ctl_rows_print(t, "top");
    if (more)
        printf("  ... and %zu more\n", more);
}

static void header(struct top *tp, coord_map st)
{
    const char *ver = "?", *ledger = "?";
    size_t vn = 1, ln = 1;
    uint64_t pid = 0, up = 0, conns = 0, reqs = 0, held = 0, pending = 0, flights = 0,
             records = 0;
    bool reachable = true;
    coord_map_str(st, "version", &ver, &vn);
    coord_map_str(st, "ledger", &ledger, &ln);
    coord_map_uint(st, "pid", &pid);
    coord_map_uint(st, "uptime_ms", &up);
    coord_map_uint(st, "connections", &conns);
    coord_map_uint(st, "requests_total", &reqs);
    coord_map_uint(st, "locks_held", &held);
    coord_map_uint(st, "locks_pending", &pending);
    coord_map_uint(st, "flights", &flights);
    coord_map_uint(st, "records", &records);
    coord_map_bool(st, "ledger_reachable", &reachable);
    char upd[64], rate[32] = "-";
    ctl_format_duration(upd, sizeof upd, up);
    int64_t now = ctl_mono_ms();
    if (tp->last_ms && now > tp->last_ms && reqs >= tp->last_requests)
        snprintf(rate, sizeof rate, "%.0f",
                 (double)(reqs - tp->last_requests) * 1000.0 / (double)(now - tp->last_ms));
    tp->last_requests = reqs;
    tp->last_ms = now;
    printf("%.*s  pid %llu  up %s  connections %llu  requests/s %s  ledger %.*s (%s)\n",
           (int)vn, ver, (unsigned long long)pid, upd, (unsigned long long)conns, rate,
           (int)ln, ledger, reachable ? "reachable" : "UNREACHABLE");
    printf("locks held %llu, waiting %llu  flights %llu  records %llu  socket %s\n\n",
           (unsigned long long)held, (unsigned long long)pending,
           (unsigned long long)flights, (unsigned long long)records, tp->ctl->socket);
}

/* The LOCKS table; the workstreams led now (names of held -leader/ locks)
 * go to ws[0..*nws), malloc'd. */
static void locks(struct top *tp, coord_map q, char **ws, size_t *nws, size_t maxws)
{
    static const char *const titles[] = { "LOCK", "STATE", "MODE", "CLIENT", "PID", "AGE" };
    struct ctl_rows t = { .ncols = 6, .titles = titles };
    static const char *const lists[] = { "held", "pending" };
    for (int l = 0; l < 2; l++) {
        size_t n = coord_map_array_len(q, lists[l]);
        for (size_t i = 0; i < n; i++) {
            coord_map e;
            const char *name;
            size_t nn;
            if (!coord_map_array_at(q, lists[l], i, &e) || !coord_map_str(e, "name", &name, &nn))
                continue;
            size_t pl = strlen(LEADER_PREFIX);
            if (nn >= pl && memcmp(name, LEADER_PREFIX, pl) == 0) {
                if (l == 0 && *nws < maxws && (ws[*nws] = malloc(nn - pl + 1))) {
                    memcpy(ws[*nws], name + pl, nn - pl);
                    ws[*nws][nn - pl] = '\0';
                    (*nws)++;
                }
                continue;
            }
            uint64_t age = 0;
            char d[64];
            coord_map_uint(e, "age_ms", &age);
            ctl_format_duration(d, sizeof d, age);
            char **row = ctl_rows_add(&t);
            if (!row)
                break;
            row[0] = ctl_escape(name, nn);
            row[1] = strdup(l == 0 ? "held" : "waiting");
            row[2] = ctl_escaped_field(e, "mode");
            row[3] = ctl_escaped_field(e, "client");
            row[4] = ctl_uint_cell(e, "pid");
            row[5] = strdup(d);
            ctl_rows_check(&t, row);
        }
    }
    print_rows(tp, &t, "no locks held or waiting");
}

static void leaders(struct top *tp, char **ws, size_t nws)
{
    static const char *const titles[] = {
        "WORKSTREAM", "GENERATION", "CLIENT", "PID", "LEASE LEFT", "LEADING", "MODE",
    };
    struct ctl_rows t = { .ncols = 7, .titles = titles };
    for (size_t i = 0; i < nws; i++) {
        coord_reply_t *r = NULL;
        if (coord_leader_info(tp->ctl->c, ws[i], strlen(ws[i]), &r) < 0)
            continue;
        coord_map m = coord_reply_map(r);
        uint64_t left = 0, leading = 0;
        char dl[64], dg[64];
        bool live = coord_map_uint(m, "lease_left_ms", &left);
        coord_map_uint(m, "leading_ms", &leading);
        ctl_format_duration(dl, sizeof dl, left);
        ctl_format_duration(dg, sizeof dg, leading);
        char **row = ctl_rows_add(&t);
        if (row) {
            row[0] = ctl_escape(ws[i], strlen(ws[i]));
            row[1] = ctl_uint_cell(m, live ? "live_generation" : "generation");
            row[2] = ctl_escaped_field(m, "client");
            row[3] = ctl_uint_cell(m, "pid");
            row[4] = strdup(live ? dl : "-");
            row[5] = strdup(live ? dg : "-");
            row[6] = ctl_escaped_field(m, "mode");
            ctl_rows_check(&t, row);
        }
        coord_reply_free(r);
    }
    print_rows(tp, &t, "no leaders");
}

static void flights(struct top *tp, coord_map fl)
{
    static const char *const titles[] = { "FLIGHT KEY", "OWNER PID", "FOLLOWERS", "AGE" };
    struct ctl_rows t = { .ncols = 4, .titles = titles };
    size_t n = coord_map_array_len(fl, "flights");
    for (size_t i = 0; i < n; i++) {
        coord_map e;
        if (!coord_map_array_at(fl, "flights", i, &e))
            continue;
        uint64_t age = 0;
        char d[64];
        coord_map_uint(e, "age_ms", &age);
        ctl_format_duration(d, sizeof d, age);
        char **row = ctl_rows_add(&t);
        if (!row)
            break;
        row[0] = ctl_escaped_field(e, "key");
        row[1] = ctl_uint_cell(e, "owner_pid");
        row[2] = ctl_uint_cell(e, "followers");
        row[3] = strdup(d);
        ctl_rows_check(&t, row);
    }
    print_rows(tp, &t, "no flights running");
}

static void latency(coord_map st)
{
    coord_map lat;
    if (coord_map_map(st, "latency", &lat))
        ctl_latency_table(lat);
}

/* One frame; 0, or the coord code of a failed request. */
static int frame(struct top *tp)
{
    coord_t *c = tp->ctl->c;
    coord_reply_t *st = NULL, *q = NULL, *fl = NULL;
    coord_req_t *req = coord_req_new("stats");
    int rc = req ? coord_call(c, req, &st) : COORD_ENOMEM;
    coord_req_free(req);
    if (rc == 0)
        rc = coord_lock_query(c, &q);
    if (rc == 0)
        rc = coord_flight_list(c, &fl);
    if (rc == 0 && tp->ctl->json) {
        /* {"stats":{...},"locks":{"held":[...],"pending":[...]},
         *  "flights":{"flights":[...]}}: the objects of stats, locks -a
         * and flights (without the disabled prefixes) */
        fputs("{\"stats\":", stdout);
        ctl_print_json_inline(coord_reply_map(st));
        fputs(",\"locks\":", stdout);
        ctl_print_json_inline(coord_reply_map(q));
        fputs(",\"flights\":", stdout);
        ctl_print_json_inline(coord_reply_map(fl));
        puts("}");
        fflush(stdout);
    } else if (rc == 0) {
        if (tp->tty)
            fputs("\033[H\033[2J", stdout);
        header(tp, coord_reply_map(st));
        char *ws[64];
        size_t nws = 0;
        locks(tp, coord_reply_map(q), ws, &nws, sizeof ws / sizeof ws[0]);
        putchar('\n');
        leaders(tp, ws, nws);
        for (size_t i = 0; i < nws; i++)
            free(ws[i]);
        putchar('\n');
        flights(tp, coord_reply_map(fl));
        putchar('\n');
        latency(coord_reply_map(st));
        if (tp->tty)
            fputs("\n(q to quit)", stdout);
        else
            putchar('\n');
        fflush(stdout);
    }
    coord_reply_free(st);
    coord_reply_free(q);
    coord_reply_free(fl);
    return rc;
}

int cmd_top(struct ctl *ctl, int argc, char **argv)
{
    static const struct option longopts[] = {
        { "delay", required_argument, NULL, 'd' },
        { "count", required_argument, NULL, 'n' },
        { "json", no_argument, NULL, 'j' },
        { NULL, 0, NULL, 0 },
    };
    uint64_t delay_ms = 1000;
    long count = 0;
    int opt;
    optind = 1;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "+:d:n:", longopts, NULL)) != -1) {
        switch (opt) {
        case 'd':
            if (!ctl_parse_seconds(optarg, &delay_ms) || delay_ms < 100 ||
                delay_ms > 3600000)
                return ctl_usage(ctl, "-d needs seconds from 0.1 to 3600, not %s", optarg);
            break;
        case 'n': {
            char *end;
            count = strtol(optarg, &end, 10);
            if (*end || count < 1 || count > 1000000)
                return ctl_usage(ctl, "-n needs a count from 1 to 1000000, not %s", optarg);
            break;
        }
        case 'j':
            ctl->json = true;
            break;
        case ':':
            return ctl_usage(ctl, "missing value for %s", argv[optind - 1]);
        default:
            return ctl_usage(ctl, "unknown flag %s", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return ctl_usage(ctl, "unexpected argument %s", argv[optind]);
    int rc = ctl_connect(ctl);
    if (rc)
        return rc;

    /* --json: a frame is one line, never drawn over the last */
    struct top tp = { .ctl = ctl, .tty = !ctl->json && isatty(STDOUT_FILENO) };
    if (tp.tty)
        setvbuf(stdout, NULL, _IOFBF, 1 << 16);    /* a frame appears at once */
    struct termios saved;
    bool keys = tp.tty && isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &saved) == 0;
    if (keys) {
        struct termios raw = saved;
        raw.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
        raw.c_cc[VMIN] = 1;
        raw.c_cc[VTIME] = 0;
        tcsetattr(STDIN_FILENO, TCSANOW, &raw);
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    int status = CTL_EXIT_OK;
    for (long n = 0; !stop; ) {
        rc = frame(&tp);
        if (rc < 0) {
            status = ctl_fail_call(ctl, "top", rc);
            break;
        }
        if (count && ++n >= count)
            break;
        int64_t until = ctl_mono_ms() + (int64_t)delay_ms;
        while (!stop) {
            int64_t left = until - ctl_mono_ms();
            if (left <= 0)
                break;
            struct pollfd p = { .fd = STDIN_FILENO, .events = POLLIN };
            int r = poll(&p, keys ? 1 : 0, (int)left);
            if (r > 0) {
                char ch;
                if (read(STDIN_FILENO, &ch, 1) == 1 && (ch == 'q' || ch == 'Q'))
                    stop = 1;
            } else if (r < 0 && errno != EINTR) {
                break;
            }
        }
    }
    if (keys)
        tcsetattr(STDIN_FILENO, TCSANOW, &saved);
    if (tp.tty)
        putchar('\n');
    return status;
}
