/* coordctl.c - the command line of coord: global flags, the command table,
 * and the helpers every command uses (see coordctl.h). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "coord-version.h"
#include "coordctl.h"
#include "ctl-key.h"
#include "paths.h"

static const struct ctl_command commands[] = {
    { "status", "", "is the broker up? version, pid, uptime, epoch, connections "
                    "(exit 1 when not running; never starts it)", cmd_status },
    { "stats",  "[--openmetrics | --prometheus] [--listen HOST:PORT]",
                    "the broker's counters, then the latency table (lock_wait,\n"
                    "lock_hold, flight_run, follower_wait, leader_transition: count,\n"
                    "p50, p99, max since the broker started); --openmetrics,\n"
                    "--prometheus: in OpenMetrics 1.0 or Prometheus 0.0.4 text (for\n"
                    "node_exporter's textfile collector), once, or served on a\n"
                    "loopback HTTP address (GET /metrics) with --listen", cmd_stats },
    { "top",    "[-d SECONDS] [-n COUNT]",
                    "a live view: locks held and waiting, flights, leaders, request\n"
                    "rate and latency, refreshed every -d seconds (default 1); -n\n"
                    "COUNT frames, then exit (without a terminal: plain frames;\n"
                    "--json: a frame is one object)",
                    cmd_top },
    { "reload", "", "the broker reads its workstream descriptor files again\n"
                    "(CONFIG_DIR/workstreams/WORKSTREAM.v1, as SIGHUP does): what\n"
                    "loaded and stored, each refused file with FILE:LINE and each\n"
                    "file not stored in the leader ledger (exit 1)", cmd_reload },
    { "ping",   "[-c COUNT]", "round trip time to the broker", cmd_ping },
    { "doctor", "", "check what keeps coord from working (home, socket and data\n"
                "dirs, the broker and a second one on the data dir, the log, the\n"
                "coordd autostart runs, versions, the ledger) and say what to do;\n"
                "exit 1 when a check failed; never starts the broker", cmd_doctor },
    { "locks",  "[-a]", "held and pending locks (like navigator.locks.query()); the\n"
                    "broker's own leadership locks (-leader/WS) only with -a, --all",
                    cmd_locks },
    { "lock",   "[-s] [-n] [-w SECONDS] [-E STATUS] [-v] [--steal]\n"
                "[--lease SECONDS] NAME -- CMD...",
                "run CMD holding the lock NAME, like flock(1): -s shared, -n exit 1\n"
                "at once when busy, -w give up after SECONDS (exit 1),\n"
                "-E, --conflict-exit-code STATUS exit STATUS instead of 1 when busy\n"
                "or timed out, -v, --verbose say on stderr who holds it while we\n"
                "wait and how long the wait took, --steal break the holders,\n"
                "--lease renew a lease of SECONDS while CMD runs.\n"
                "CMD sees COORD_LOCK_TOKEN and COORD_LOCK_NAME; its process group\n"
                "gets SIGINT/SIGTERM/SIGHUP sent to coordctl, and SIGTERM when the\n"
                "lock is lost (stolen, expired, broker gone).  Exit status: CMD's\n"
                "(128+N when killed by signal N; 1 instead of 0 when the lock was\n"
                "lost)", cmd_lock },
    { "flights", "[disable PREFIX | enable PREFIX]",
                "running flights: owner, fence, followers, age; then the disabled\n"
                "prefixes.  disable: the single-flight kill switch for the keys\n"
                "starting with PREFIX (\"\" every key of the scope): every new\n"
                "`once` runs CMD itself and keeps no record; durable until enable",
                cmd_flights },
    { "once",   "[--keep SECONDS [--stale SECONDS]] [--wait SECONDS] [--ttl SECONDS]\n"
                "[--fallback fail|run] [--supersede] [--priority N]\n"
                "[--version V [--own-version]]\n"
                "(KEY | --key-from-request REQUEST-FLAGS) -- CMD...",
                "single-flight CMD: one caller per KEY runs it, every concurrent\n"
                "caller prints its stdout and exits with its status (128+N when\n"
                "killed by signal N).  --keep reuse a successful result that long\n"
                "without running CMD (kept as a record); --wait give up waiting\n"
                "after SECONDS (exit 1); --ttl the owner's time (default 600): past\n"
                "it CMD's process group gets SIGTERM and a waiting caller takes\n"
                "over.  CMD sees COORD_FLIGHT, COORD_FLIGHT_FENCE, COORD_FLIGHT_KEY.\n"
                "--key-from-request: the key is `coordctl key`'s for the request\n"
                "flags given (--method, --url, ... as for key, without --explain).\n"
                "--stale: a result older than --keep, by at most SECONDS more, is\n"
                "printed at once (exit 0) while one caller runs CMD again and\n"
                "prints the fresh output.  Backoff: CMD writes a number of seconds\n"
                "to the file $COORD_RETRY_AFTER_FILE and exits 75 (EX_TEMPFAIL):\n"
                "its waiting callers, and every caller until that time is up, exit\n"
                "75 at once with the failure on stderr (75 alone is a result).\n"
                "--fallback run: when the broker cannot be reached (not running\n"
                "and not startable, or gone while waiting), or --wait passed, run\n"
                "CMD here without coordination (COORD_FLIGHT_FALLBACK=1, or\n"
                "=timeout; a line on stderr says which); fail (the default): exit\n"
                "3 (1 after --wait).  --supersede: the running owner's work is\n"
                "stale: take the flight over (its CMD is stopped, its followers\n"
                "get ours); --priority N: take it over when ours is higher than\n"
                "the running owner's (N > 0; no priority: 0).  --version V: CMD's\n"
                "version; --own-version: never follow, nor take the kept result\n"
                "of, another version",
                cmd_once },
    { "key",    "--method M --url U [--body-file F] [--content-type T]\n"
                "[--header 'Name: value']... --user U [--tenant T] --auth-gen N\n"
                "[--accept A] [--locale L] [--freshness F] [--api V] [--explain]",
                "the canonical request key (request-v1:<sha256>) of an HTTP\n"
                "request, the same in every coord client: URL normalized (RFC\n"
                "3986), JSON bodies canonicalized (RFC 8785; --body-file - reads\n"
                "stdin), headers that vary the response; Authorization,\n"
                "Proxy-Authorization and Cookie refused (use --auth-gen).\n"
                "--freshness cache-ok|revalidate|network-only.  --explain: also\n"
                "the canonical string (it names the user).  Needs no broker",
                cmd_key },
    { "records", "[--prefix P] [--limit N]", "stored completion records", cmd_records },
    { "record", "get KEY", "a record's result as it is on stdout (one kept by\n"
                "reference read from its descriptor); a failed one's error, exit 1",
                cmd_record },
    { "purge",  "[--prefix P]", "delete the scope's records (logout)", cmd_purge },
    { "leader", "[info] WORKSTREAM | SUBCOMMAND ...",
                "generation, state (leading, draining, idle, disabled), mode,\n"
                "leader, lease left, protocol, incident, pin, max hold, disabled?\n"
                "(a workstream named like a subcommand: leader -- NAME).  Subcommands:\n"
                "define WORKSTREAM [--protocol NAME@N] [--max-hold DURATION]\n"
                "  [--steal never|incident-only|allowed] [--mode shadow|read-only|active]\n"
                "  [--fallback FAIL_CLOSED|READ_ONLY|SERVER_COORDINATED|SINGLE_INSTANCE]\n"
                "  [--canonical-fence local|server-lease-ledger] [--lock-name NAME]\n"
                "  [--capabilities A,B] [--if-available allowed|never] [--force]:\n"
                "  change the named fields of the descriptor (an empty value: back to\n"
                "  the default); durations like 30s, 500ms, 2m.  define [WORKSTREAM]\n"
                "  -f FILE [--force]: the fields of a crossTabLeader.v1 file (key:\n"
                "  value lines: schema, workstream, lockName, protocol, capabilities,\n"
                "  maxHold, steal, ifAvailable, fallback, canonicalFence, mode;\n"
                "  unknown keys refused, named with the line)\n"
                "describe WORKSTREAM: the stored descriptor (exit 1: never defined)\n"
                "history WORKSTREAM [--limit N]: the last terms, newest first\n"
                "drain WORKSTREAM [GENERATION]: ask the leader to finish (default:\n"
                "  the live generation); its new claims get DRAINING\n"
                "pending WORKSTREAM [--limit N]: claimed, unsettled ops, oldest first\n"
                "check WORKSTREAM GENERATION: is it live? (exit 1 when not: FENCED)\n"
                "claim WORKSTREAM OP_ID, commit WORKSTREAM OP_ID [KEY [VALUE]],\n"
                "abandon WORKSTREAM OP_ID REASON: the outbox, with --generation N\n"
                "  or $COORD_GENERATION (scope: --scope or $COORD_SCOPE).  Exit 0\n"
                "  claimed/applied/abandoned now, 10 claimed to reconcile (an\n"
                "  earlier leader claimed it and never settled it: ask the external\n"
                "  system by OP_ID first), 11 already applied, 12 abandoned, 1\n"
                "  refused (FENCED, READ_ONLY, DRAINING...)",
                cmd_leader },
    { "leader-run", "[--lease SECONDS] [-n] [-w SECONDS] [--steal] [--protocol NAME@N]\n"
                "[--capabilities A,B] [--incident REASON] [--single-instance] WORKSTREAM\n"
                "-- CMD...",
                "campaign for WORKSTREAM (waiting; -n exit 1 at once when someone\n"
                "leads, -w give up after SECONDS, --steal take over now, --protocol\n"
                "the version CMD speaks, --capabilities what it implements,\n"
                "--incident an incident takeover, granted while disabled), run CMD\n"
                "as leader, renew the lease (--lease, default 30; capped by a max\n"
                "hold) at a third of it, resign when CMD ends.  CMD sees\n"
                "COORD_MODE=leader, COORD_GENERATION, COORD_WORKSTREAM,\n"
                "COORD_LEADER_MODE, COORD_SOCKET and COORD_SCOPE (for `leader claim`\n"
                "and `commit`).  No broker reachable: the fallback of\n"
                "$COORD_CONFIG_DIR/workstreams/WORKSTREAM.v1 decides: READ_ONLY or\n"
                "SERVER_COORDINATED run CMD with COORD_MODE=read-only, COORD_FALLBACK\n"
                "and no COORD_GENERATION; SINGLE_INSTANCE only with --single-instance\n"
                "(COORD_MODE=single-instance); else exit 3 (fail closed).  A drain\n"
                "(the broker's: max hold passed while someone waits, or an\n"
                "operator's `leader drain`; or SIGINT/SIGTERM sent to coordctl,\n"
                "which sends leader.drain first) gives CMD's process group SIGTERM;\n"
                "coordctl waits for CMD, then resigns.  SIGHUP and later signals are\n"
                "forwarded; SIGTERM also when\n"
                "leadership is lost (expired, stolen, disabled, max hold, broker\n"
                "gone).  Exit status: CMD's (128+N when killed by signal N; a\n"
                "drained run too: 0 when CMD exited 0 on SIGTERM, 143 when it died\n"
                "of it); 1 instead of 0 when leadership was lost", cmd_leader_run },
    { "disable", "WORKSTREAM", "the kill switch: fence the leader, refuse campaigns\n"
                "(prints the new generation)", cmd_disable },
    { "enable", "WORKSTREAM", "lift disable", cmd_enable },
    { "watch",  "[-q] [-c COUNT] [--kind KIND[,KIND...]]\n"
                "[--name PATTERN] [CHANNEL...]",
                "live events, one line each, until interrupted (default: the\n"
                "broker's channels -locks -flights -leaders; user channels show\n"
                "their messages).  --json: each event as a JSON object.  -q: no\n"
                "\"listening\" line on stderr.  -c: exit 0 after COUNT events.\n"
                "--kind lock, flight, leader, channel: only those events (without\n"
                "CHANNEL: only those broker channels).  --name: only the locks,\n"
                "flight keys, workstreams, channels matching the shell PATTERN", cmd_watch },
    { "publish", "[-w SECONDS] CHANNEL DATA", "send DATA to the other subscribers of CHANNEL;\n"
                "prints \"delivered N\"; -w: while nobody is subscribed, try again\n"
                "for up to SECONDS", cmd_publish },
    { "subscribe", "[-q] [-c COUNT] CHANNEL", "print each message's data on its own line until\n"
                "interrupted (--json: each message as a JSON object).  -q: no\n"
                "\"listening\" line on stderr.  -c: exit 0 after COUNT messages",
                cmd_subscribe },
};
#define N_COMMANDS (sizeof commands / sizeof commands[0])

/* The help text's width: a terminal's 80 columns. */
#define HELP_COLUMNS 80

/* Text of several lines, the first starting at column col (the caller
 * printed that much), the others indented by indent.  The line breaks
 * written in s stay; a line that would pass HELP_COLUMNS is wrapped at a
 * space, its rest indented like the others. */
static void print_summary_at(FILE *f, const char *s, int col, int indent)
{
    int at = col;
    bool line_start = true;
    for (;;) {
        if (*s == '\n') {
            fprintf(f, "\n%*s", indent, "");
            at = indent;
            line_start = true;
            s++;
            continue;
        }
        if (!*s)
            break;
        size_t sp = strspn(s, " ");
        size_t w = strcspn(s + sp, " \n");
        if (!line_start && at + (int)(sp + w) > HELP_COLUMNS) {
            fprintf(f, "\n%*s", indent, "");
            at = indent;
            s += sp;                      /* the break takes the spaces' place */
            sp = 0;
        }
        fprintf(f, "%.*s", (int)(sp + w), s);
        at += (int)(sp + w);
        s += sp + w;
        line_start = false;
    }
    fputc('\n', f);
}

static void print_summary(FILE *f, const char *s, int indent)
{
    print_summary_at(f, s, indent, indent);
}

/* The coordd that came with this coordctl, for autostart: beside it (an
 * install: both in BINDIR) or, in a build tree, at ../broker/coordd.  So
 * the tools work as built, before anything is installed or on PATH;
 * $COORD_BROKER still chooses, and without either it is "coordd" from
 * PATH as for every libcoord program. */
static bool broker_beside(char *out, size_t size)
{
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return false;
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (!slash)
        return false;
    *slash = '\0';
    static const char *const rel[] = { "/coordd", "/../broker/coordd" };
    for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
        if (snprintf(out, size, "%s%s", self, rel[i]) >= (int)size)
            continue;
        struct stat st;
        if (stat(out, &st) == 0 && S_ISREG(st.st_mode) && access(out, X_OK) == 0)
            return true;
    }
    return false;
}

static void help(FILE *f)
{
    fprintf(f,
        "usage: coordctl [GLOBAL FLAGS] COMMAND [ARGS]\n"
        "\n"
        "Talks to the per-user coord broker (starting it when needed).\n"
        "\n"
        "Global flags (before the command):\n"
        "  --socket PATH    broker socket (default: $COORD_SOCKET,\n"
        "                   $XDG_RUNTIME_DIR/coord/broker.sock,\n"
        "                   /tmp/coord-$UID/broker.sock)\n"
        "  --scope S        scope of names, keys and channels (default $COORD_SCOPE,\n"
        "                   else \"\"): a namespace in your broker, not a boundary\n"
        "  --json           machine-readable output: one JSON object per command,\n"
        "                   errors as objects on stderr (also after the command)\n"
        "  --no-autostart   never start the broker\n"
        "  -h, --help       this text\n"
        "  -V, --version    coordctl's version (and the library's)\n"
        "\n"
        "Commands:\n");
    for (size_t i = 0; i < N_COMMANDS; i++) {
        char syn[400];
        snprintf(syn, sizeof syn, "%s%s%s", commands[i].name,
                 commands[i].args[0] ? " " : "", commands[i].args);
        /* the synopsis on its line(s), the summary below it: every
         * line then fits HELP_COLUMNS */
        fputs("  ", f);
        print_summary_at(f, syn, 2, 4);
        fputs("      ", f);
        print_summary_at(f, commands[i].summary, 6, 6);
    }
    fprintf(f,
        "\n"
        "CMD of lock, once and leader-run leads a process group of its own: what\n"
        "coordctl forwards or sends goes to the whole group; when CMD has ended\n"
        "after such a signal, the rest of the group gets %d s, then SIGKILL.\n"
        "coordctl waits for CMD itself, not for its background children: `once`\n"
        "reads CMD's stdout at most %d s after CMD ended.  In the foreground of a\n"
        "terminal CMD stays in coordctl's group instead, so that it can use the\n"
        "terminal (like timeout --foreground): the terminal's ^C reaches CMD and\n"
        "its children, what coordctl forwards or sends reaches CMD alone.\n"
        "\n"
        "Errors are one line on stderr: coordctl: WHAT: CODE: MESSAGE (--json:\n"
        "{\"error\":{\"command\",\"op\",\"code\",\"message\"}}).\n"
        "Exit status: 0 ok, 1 refused or not running, 2 usage, 3 broker unreachable.\n",
        CTL_GRACE_MS / 1000, CTL_GRACE_MS / 1000);
}

/* ---- errors ---- */

const char *ctl_code_name(int code)
{
    switch (code) {
    case COORD_OK: return "OK";
#define CTL_X_NAME(name, value, wire, text) case value: return #name;
    COORD_ERRORS(CTL_X_NAME)
#undef CTL_X_NAME
    }
    return "UNKNOWN";
}

/* The running command's context, for the error lines: under --json they
 * are objects (set by main once the flags are known). */
static const struct ctl *current;

static void json_str_to(FILE *f, const char *s)
{
    char *j = coord_json_text(s, strlen(s));
    fputs(j ? j : "null", f);
    free(j);
}

/* {"error":{"command":C,"op":OP,"code":CODE,"message":MSG}} on stderr:
 * one line, so that a script reads it with one JSON parse. */
static void json_error(const char *op, const char *code, const char *msg)
{
    fputs("{\"error\":{\"command\":", stderr);
    if (current && current->cmd)
        json_str_to(stderr, current->cmd->name);
    else
        fputs("null", stderr);
    fputs(",\"op\":", stderr);
    json_str_to(stderr, op);
    fputs(",\"code\":", stderr);
    json_str_to(stderr, code);
    fputs(",\"message\":", stderr);
    json_str_to(stderr, msg);
    fputs("}}\n", stderr);
}

static void error_line(const char *what, int code, const char *msg)
{
    if (current && current->json)
        json_error(what, ctl_code_name(code), msg);
    else
        fprintf(stderr, "coordctl: %s: %s: %s\n", what, ctl_code_name(code), msg);
}

void ctl_error(struct ctl *ctl, const char *code, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const char *name = ctl->cmd ? ctl->cmd->name : "coordctl";
    if (ctl->json)
        json_error(name, code, msg);
    else
        fprintf(stderr, "coordctl: %s: %s\n", name, msg);
}

int ctl_fail_connect(struct ctl *ctl, int code)
{
    (void)ctl;
    error_line("connect", code, coord_error_message(NULL));
    if (code == COORD_EINVAL)
        return CTL_EXIT_USAGE;
    return CTL_EXIT_UNREACHABLE;
}

int ctl_fail_call(struct ctl *ctl, const char *what, int code)
{
    error_line(what, code, ctl->c ? coord_error_message(ctl->c)
                                  : coord_strerror(code));
    if (code == COORD_ECLOSED || code == COORD_EPROTOCOL ||
        code == COORD_ECONNECT || code == COORD_ESHUTTING_DOWN)
        return CTL_EXIT_UNREACHABLE;
    return CTL_EXIT_FAIL;
}

void ctl_say_usage(struct ctl *ctl, const char *fmt, ...)
{
    va_list ap;
    if (ctl->json) {
        char msg[1024], more[128];
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        snprintf(more, sizeof more, " (try coordctl %s%s--help)",
                 ctl->cmd ? ctl->cmd->name : "", ctl->cmd ? " " : "");
        if (strlen(msg) + strlen(more) < sizeof msg)
            strcat(msg, more);
        json_error("usage", "USAGE", msg);
        return;
    }
    if (ctl->cmd)
        fprintf(stderr, "coordctl: %s: ", ctl->cmd->name);
    else
        fputs("coordctl: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    /* one line: the synopsis is one --help away */
    if (ctl->cmd)
        fprintf(stderr, " (try coordctl %s --help)\n", ctl->cmd->name);
    else
        fputs(" (try coordctl --help)\n", stderr);
}

int ctl_first_operand(struct ctl *ctl, int argc, char **argv)
{
    int i = 1;
    if (i < argc && !strcmp(argv[i], "--json")) {
        ctl->json = true;
        i++;
    }
    if (i < argc && !strcmp(argv[i], "--"))
        i++;
    return i;
}

/* ---- connecting and calling ---- */

int ctl_try_connect(struct ctl *ctl, bool no_autostart)
{
    if (ctl->c)
        return 0;
    coord_options o = ctl->opts;
    if (no_autostart)
        o.no_autostart = true;
    return coord_connect(&ctl->c, &o);
}

int ctl_connect(struct ctl *ctl)
{
    int rc = ctl_try_connect(ctl, false);
    return rc < 0 ? ctl_fail_connect(ctl, rc) : 0;
}

int ctl_connect_shown(struct ctl *ctl, const char *name, char **shown)
{
    *shown = ctl_escape(name, strlen(name));
    if (!*shown) {
        fprintf(stderr, "coordctl: %s: out of memory\n", ctl->cmd->name);
        return CTL_EXIT_FAIL;
    }
    int rc = ctl_connect(ctl);
    if (rc) {
        free(*shown);
        *shown = NULL;
    }
    return rc;
}

int ctl_simple_call(struct ctl *ctl, const char *op, coord_reply_t **reply)
{
    coord_req_t *req = coord_req_new(op);
    if (!req) {
        error_line(op, COORD_ENOMEM, coord_strerror(COORD_ENOMEM));
        return CTL_EXIT_FAIL;
    }
    int rc = coord_call(ctl->c, req, reply);
    coord_req_free(req);
    return rc < 0 ? ctl_fail_call(ctl, op, rc) : 0;
}

/* The reply's own fields, which are the wire's and no part of an object
 * coordctl prints. */
static bool wire_key(const char *k, size_t kn)
{
    return (kn == 3 && !memcmp(k, "rid", 3)) || (kn == 2 && !memcmp(k, "ok", 2));
}

void ctl_json_text(const char *p, size_t n)
{
    char *j = coord_json_text(p, n);
    fputs(j ? j : "null", stdout);
    free(j);
}

static void json_entry(coord_map m, size_t i, const char *k, size_t kn, bool *first)
{
    char *v = coord_map_value_json(m, i);
    if (!*first)
        putchar(',');
    *first = false;
    ctl_json_text(k, kn);
    putchar(':');
    fputs(v ? v : "null", stdout);
    free(v);
}

void ctl_json_members(coord_map m, bool *first)
{
    size_t n = coord_map_size(m);
    for (size_t i = 0; i < n; i++) {
        const char *k;
        size_t kn;
        coord_map_entry(m, i, &k, &kn);
        if (!wire_key(k, kn))
            json_entry(m, i, k, kn, first);
    }
}

void ctl_json_member(coord_map m, const char *key, bool *first)
{
    size_t n = coord_map_size(m), l = strlen(key);
    for (size_t i = 0; i < n; i++) {
        const char *k;
        size_t kn;
        coord_map_entry(m, i, &k, &kn);
        if (kn == l && !memcmp(k, key, l)) {
            json_entry(m, i, k, kn, first);
            return;
        }
    }
}

void ctl_print_json_inline(coord_map m)
{
    bool first = true;
    putchar('{');
    ctl_json_members(m, &first);
    putchar('}');
}

int ctl_print_json(coord_map m)
{
    ctl_print_json_inline(m);
    putchar('\n');
    return CTL_EXIT_OK;
}

/* ---- tables ---- */

void ctl_table_add(struct ctl_table *t, const char *name, const char *value)
{
    if (t->failed)
        return;
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 16;
        void *p = realloc(t->rows, cap * sizeof *t->rows);
        if (!p) {
            t->failed = true;
            return;
        }
        t->rows = p;
        t->cap = cap;
    }
    char *n = strdup(name), *v = strdup(value);
    if (!n || !v) {
        free(n);
        free(v);
        t->failed = true;
        return;
    }
    t->rows[t->n].name = n;
    t->rows[t->n].value = v;
    t->n++;
}

void ctl_table_addf(struct ctl_table *t, const char *name, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    ctl_table_add(t, name, buf);
}

/* A value for a table: strings without their JSON quotes (but still
 * escaped, so nothing reaches the terminal raw), the rest as JSON. */
static char *table_value(coord_map m, size_t i, coord_type type)
{
    char *j = coord_map_value_json(m, i);
    if (j && (type == COORD_TYPE_STR || type == COORD_TYPE_BIN)) {
        size_t n = strlen(j);
        if (n >= 2 && j[0] == '"' && j[n - 1] == '"') {
            memmove(j, j + 1, n - 2);
            j[n - 2] = '\0';
        }
    }
    return j;
}

void ctl_table_add_map(struct ctl_table *t, coord_map m, const char *prefix)
{
    size_t n = coord_map_size(m);
    for (size_t i = 0; i < n; i++) {
        const char *k;
        size_t kn;
        coord_type type = coord_map_entry(m, i, &k, &kn);
        if (!prefix[0] && wire_key(k, kn))
            continue;
        char name[256];
        snprintf(name, sizeof name, "%s%.*s", prefix, (int)kn, k);
        if (type == COORD_TYPE_MAP) {
            coord_map sub;
            char sub_prefix[260];
            coord_map_map_at(m, i, &sub);
            snprintf(sub_prefix, sizeof sub_prefix, "%s.", name);
            ctl_table_add_map(t, sub, sub_prefix);
            continue;
        }
        char *v = table_value(m, i, type);
        if (!v) {
            t->failed = true;
            return;
        }
        ctl_table_add(t, name, v);
        free(v);
    }
}

int ctl_table_print(struct ctl_table *t)
{
    size_t w = 0;
    for (size_t i = 0; i < t->n; i++) {
        size_t l = strlen(t->rows[i].name);
        if (l > w)
            w = l;
    }
    for (size_t i = 0; i < t->n; i++) {
        if (!t->failed)
            printf("%-*s  %s\n", (int)w, t->rows[i].name, t->rows[i].value);
        free(t->rows[i].name);
        free(t->rows[i].value);
    }
    free(t->rows);
    bool failed = t->failed;
    memset(t, 0, sizeof *t);
    if (failed) {
        error_line("output", COORD_ENOMEM, coord_strerror(COORD_ENOMEM));
        return CTL_EXIT_FAIL;
    }
    return CTL_EXIT_OK;
}

char **ctl_rows_add(struct ctl_rows *t)
{
    if (t->failed)
        return NULL;
    char **p = realloc(t->cell, (t->n + 1) * (size_t)t->ncols * sizeof *p);
    if (!p) {
        t->failed = true;
        return NULL;
    }
    t->cell = p;
    char **row = p + t->n * (size_t)t->ncols;
    memset(row, 0, (size_t)t->ncols * sizeof *row);
    t->n++;
    return row;
}

void ctl_rows_check(struct ctl_rows *t, char **row)
{
    for (int k = 0; k < t->ncols; k++)
        if (!row[k])
            t->failed = true;
}

char *ctl_strdupf(const char *fmt, ...)
{
    char buf[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return strdup(buf);
}

char *ctl_uint_cell(coord_map m, const char *key)
{
    uint64_t v;
    if (!coord_map_uint(m, key, &v))
        return strdup("-");
    return ctl_strdupf("%llu", (unsigned long long)v);
}

/* The cells padded to their columns' widths, the last one ending the line
 * (over the same k < ncols as the widths: clang's analyzer then sees every
 * w[k] it reads written). */
static void rows_line(const struct ctl_rows *t, const size_t *w, char *const *cells)
{
    for (int k = 0; k < t->ncols; k++) {
        if (k + 1 < t->ncols)
            printf("%-*s  ", (int)w[k], cells[k]);
        else
            printf("%s\n", cells[k]);
    }
}

int ctl_rows_print(struct ctl_rows *t, const char *what)
{
    size_t w[16];
    for (int k = 0; k < t->ncols; k++)
        w[k] = strlen(t->titles[k]);
    for (size_t i = 0; !t->failed && i < t->n; i++)
        for (int k = 0; k < t->ncols; k++) {
            size_t l = strlen(t->cell[i * (size_t)t->ncols + (size_t)k]);
            if (l > w[k])
                w[k] = l;
        }
    if (!t->failed) {
        rows_line(t, w, (char *const *)t->titles);
        for (size_t i = 0; i < t->n; i++)
            rows_line(t, w, t->cell + i * (size_t)t->ncols);
    }
    for (size_t i = 0; i < t->n * (size_t)t->ncols; i++)
        free(t->cell[i]);
    free(t->cell);
    if (t->failed) {
        fprintf(stderr, "coordctl: %s: out of memory\n", what);
        return CTL_EXIT_FAIL;
    }
    return CTL_EXIT_OK;
}

void ctl_format_duration(char *out, size_t size, uint64_t ms)
{
    uint64_t s = ms / 1000;
    if (ms < 1000)
        snprintf(out, size, "%llu ms", (unsigned long long)ms);
    else if (s < 60)
        snprintf(out, size, "%llu.%llu s", (unsigned long long)s,
                 (unsigned long long)(ms % 1000 / 100));
    else if (s < 3600)
        snprintf(out, size, "%llum %02llus", (unsigned long long)(s / 60),
                 (unsigned long long)(s % 60));
    else if (s < 86400)
        snprintf(out, size, "%lluh %02llum", (unsigned long long)(s / 3600),
                 (unsigned long long)(s / 60 % 60));
    else
        snprintf(out, size, "%llud %lluh", (unsigned long long)(s / 86400),
                 (unsigned long long)(s / 3600 % 24));
}

/* ---- names, numbers, clocks ---- */

char *ctl_escape(const char *p, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    char *out = malloc(n * 4 + 1), *o = out;
    if (!out)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)p[i];
        if (ch == '\\') {
            *o++ = '\\';
            *o++ = '\\';
        } else if (ch >= 0x20 && ch < 0x7f) {
            *o++ = (char)ch;
        } else {
            *o++ = '\\';
            *o++ = 'x';
            *o++ = hex[ch >> 4];
            *o++ = hex[ch & 15];
        }
    }
    *o = '\0';
    return out;
}

char *ctl_escaped_field(coord_map m, const char *key)
{
    const char *s = NULL;
    size_t n = 0;
    if (!coord_map_str(m, key, &s, &n) || !s)
        n = 0;
    return ctl_escape(s ? s : "", n);
}

bool ctl_parse_seconds(const char *s, uint64_t *ms)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= 0) || v > 1e9)
        return false;
    *ms = (uint64_t)(v * 1000.0 + 0.5);
    if (*ms == 0 && v > 0)
        *ms = 1;
    return true;
}

int64_t ctl_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

uint64_t ctl_wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* ---- main ---- */

/* Whether argv[*i] is FLAG, as "--flag VALUE" or "--flag=VALUE": then *v
 * is the value (*i advanced past what it used), or NULL when there is none
 * (said on stderr).  *i moves only when FLAG is there, so the next flag
 * tried reads the same argv[*i]. */
static bool flag_value(int argc, char **argv, int *i, const char *flag, const char **v)
{
    size_t n = strlen(flag);
    const char *a = argv[*i];
    *v = NULL;
    if (strncmp(a, flag, n) != 0 || (a[n] != '=' && a[n] != '\0'))
        return false;
    if (a[n] == '=')
        *v = a + n + 1;
    else if (*i + 1 < argc)
        *v = argv[++*i];
    else
        fprintf(stderr, "coordctl: %s needs a value\n", flag);
    return true;
}

int main(int argc, char **argv)
{
    /* static: `current` points at it until exit (not into a stack frame
     * that main's return ends) */
    static struct ctl ctl;
    coord_options_init(&ctl.opts);
    ctl.opts.client_name = "coordctl";
    static char beside[4096];
    if (!getenv("COORD_BROKER") && broker_beside(beside, sizeof beside))
        ctl.opts.broker_path = beside;

    current = &ctl;
    /* --json anywhere (before a lone --): the errors before the command is
     * known are objects too */
    for (int k = 1; k < argc && strcmp(argv[k], "--") != 0; k++)
        if (!strcmp(argv[k], "--json"))
            ctl.json = true;
    bool json_seen = ctl.json;
    ctl.json = false;

    int i = 1;
    for (; i < argc; i++) {
        const char *a = argv[i], *v;
        if (a[0] != '-')
            break;
        if (!strcmp(a, "--")) {
            i++;
            break;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            help(stdout);
            return CTL_EXIT_OK;
        }
        if (!strcmp(a, "-V") || !strcmp(a, "--version")) {
            printf("coordctl %s\n", COORD_VERSION);
            return CTL_EXIT_OK;
        }
        if (!strcmp(a, "--json")) {
            ctl.json = true;
        } else if (!strcmp(a, "--no-autostart")) {
            ctl.opts.no_autostart = true;
        } else if (flag_value(argc, argv, &i, "--socket", &v)) {
            if (!v)
                return CTL_EXIT_USAGE;
            ctl.opts.socket_path = v;
        } else if (flag_value(argc, argv, &i, "--scope", &v)) {
            if (!v)
                return CTL_EXIT_USAGE;
            ctl.opts.scope = v;
        } else {
            ctl.json = json_seen;
            return ctl_usage(&ctl, "unknown flag %s", a);
        }
    }
    if (i >= argc) {
        help(stderr);
        return CTL_EXIT_USAGE;
    }
    if (!strcmp(argv[i], "help")) {
        help(stdout);
        return CTL_EXIT_OK;
    }

    /* every command works in $COORD_SCOPE unless --scope says otherwise,
     * so that a coordctl inside CMD of lock, once or leader-run works where
     * the outer one does */
    if (!ctl.opts.scope) {
        const char *s = getenv("COORD_SCOPE");
        if (s && *s)
            ctl.opts.scope = s;
    }
    if (ctl.opts.socket_path) {
        size_t n = strlen(ctl.opts.socket_path);
        if (n == 0 || n > COORD_SOCKET_PATH_MAX) {
            fprintf(stderr, "coordctl: --socket: path must be 1..%d bytes\n",
                    COORD_SOCKET_PATH_MAX);
            return CTL_EXIT_USAGE;
        }
        snprintf(ctl.socket, sizeof ctl.socket, "%s", ctl.opts.socket_path);
    } else if (coord_default_socket_path(ctl.socket, COORD_SOCKET_PATH_MAX + 1) < 0) {
        fprintf(stderr, "coordctl: the default socket path is longer than %d "
                        "bytes: use --socket\n", COORD_SOCKET_PATH_MAX);
        return CTL_EXIT_USAGE;
    }

    /* ... and the CMD that lock, once and leader-run start inherits both */
    if ((ctl.opts.scope && setenv("COORD_SCOPE", ctl.opts.scope, 1) < 0) ||
        setenv("COORD_SOCKET", ctl.socket, 1) < 0) {
        fprintf(stderr, "coordctl: setenv: %s\n", strerror(errno));
        return CTL_EXIT_FAIL;
    }
    for (size_t k = 0; k < N_COMMANDS; k++) {
        if (strcmp(argv[i], commands[k].name) != 0)
            continue;
        ctl.cmd = &commands[k];
        /* --json after the command name, among its flags or after its
         * operands, up to a lone "--".  lock, once and leader-run read it
         * among their flags only (getopt): what follows NAME is CMD's */
        if (strcmp(ctl.cmd->name, "lock") != 0 && strcmp(ctl.cmd->name, "once") != 0 &&
            strcmp(ctl.cmd->name, "leader-run") != 0) {
            int w = i + 1, r = i + 1;
            for (; r < argc && strcmp(argv[r], "--") != 0; r++) {
                if (!strcmp(argv[r], "--json"))
                    ctl.json = true;
                else
                    argv[w++] = argv[r];
            }
            while (r < argc)
                argv[w++] = argv[r++];
            argv[w] = NULL;
            argc = w;
        }
        if (i + 1 < argc && (!strcmp(argv[i + 1], "-h") ||
                             !strcmp(argv[i + 1], "--help"))) {
            char syn[400];
            snprintf(syn, sizeof syn, "usage: coordctl %s%s%s", ctl.cmd->name,
                     ctl.cmd->args[0] ? " " : "", ctl.cmd->args);
            print_summary(stdout, syn, 4);
            fputs("  ", stdout);
            print_summary(stdout, ctl.cmd->summary, 2);
            return CTL_EXIT_OK;
        }
        int rc = ctl.cmd->fn(&ctl, argc - i, argv + i);
        coord_close(ctl.c);
        if (fflush(stdout) != 0 && rc == CTL_EXIT_OK)
            rc = CTL_EXIT_FAIL;
        return rc;
    }
    ctl.json = ctl.json || json_seen;
    return ctl_usage(&ctl, "unknown command %s", argv[i]);
}
