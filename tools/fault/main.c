/* main.c - coord-fault's driver: options, the broker, the client
 * processes, fault injection, the watchdog of client-side deadlines, the
 * final checks and the summary.
 *
 *   coord-fault [--rounds N] [--seconds S] [--clients 20] [--seed X]
 *               [--broker PATH] [--no-broker-kill] ...
 *
 * Exit status: 0 with zero violations, 1 with any, 2 for usage errors,
 * 3 when the run could not be carried out (broker would not start...). */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "coord.h"
#include "fault.h"

#ifndef COORD_FAULT_BROKER
#define COORD_FAULT_BROKER "coordd"
#endif

static struct config cfg;
static struct rng R;

/* driver-local per slot */
static struct {
    bool killed;            /* SIGKILL sent by us */
    uint64_t stop_ns;       /* SIGSTOP sent then (0: not stopped) */
    uint64_t resume_ns;
} D[MAX_SLOTS];
static unsigned spawn_count;

static void usage(FILE *f)
{
    fprintf(f,
"usage: coord-fault [options]\n"
"  --rounds N           stop after N leader grants across all workstreams (default 3000;\n"
"                       0: no limit)\n"
"  --seconds S          stop after S seconds at most (default 0: no limit)\n"
"  --clients N          client processes (default 20, at least 5, at most %d)\n"
"  --seed X             random seed (default: time)\n"
"  --broker PATH        coordd to attack (default $COORD_BROKER, else the one built here)\n"
"  --no-broker-kill     never kill the broker\n"
"  --workstreams N      workstreams (default 3, at most %d)\n"
"  --fault-ms MS        mean interval between client faults (default 40)\n"
"  --broker-kill-ms A:B broker killed every A..B ms (default 2000:6000)\n"
"  --keep               keep the temp dir (broker log, data dir)\n"
"  --wipe-pct N         broker kills that also delete the data dir (default 25)\n"
"  --ignore-drain-pct N outbox terms that ignore a max-hold drain and work on until\n"
"                       fenced (default 20)\n"
"  --no-outbox          no outbox leaders (claims, descriptors, rollout modes) and\n"
"                       none of their faults\n"
"  --etcd N             N brokers (\"machines\": own sockets and data dirs; clients spread\n"
"                       over them) sharing one etcd leader ledger (etcd-server needed);\n"
"                       etcd itself is stopped (SIGSTOP) or killed and restarted every\n"
"                       2..6 s for 0.2..3 s: nothing may be acknowledged meanwhile\n"
"  --expect-violation NAME\n"
"                       pass (exit 0) only if violation NAME is seen; the run ends as\n"
"                       soon as it is (for the broken brokers of coordd-broken)\n"
"  --verbose            progress and verification details\n"
"environment: COORD_BROKER (the broker to attack), TMPDIR (where the temp dir goes),\n"
"  FAULT_DEBUG=1 (print every leader transition slower than 50 ms)\n",
            MAX_SLOTS - 8, MAX_WS);
}

static bool known_violation(const char *name);

static bool parse_u64(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno || end == s || *end || s[0] == '-')
        return false;
    *out = v;
    return true;
}

static int parse_args(int argc, char **argv)
{
    cfg.rounds = 3000;
    cfg.clients = 20;
    cfg.seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    cfg.broker_kill = true;
    cfg.nws = 3;
    cfg.nlocks = 2;
    cfg.nfkeys = 2;
    cfg.fault_ms = 40;
    cfg.broker_kill_min_ms = 2000;
    cfg.broker_kill_max_ms = 6000;
    cfg.wipe_pct = 25;
    cfg.outbox = true;
    cfg.nbrokers = 1;
    cfg.broker = getenv("COORD_BROKER");
    if (!cfg.broker || !*cfg.broker)
        cfg.broker = COORD_FAULT_BROKER;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        uint64_t n = 0;
#define NEED_NUM()                                                             \
        do {                                                                   \
            if (!v || !parse_u64(v, &n)) {                                     \
                fprintf(stderr, "coord-fault: %s needs a number\n", a);        \
                return -1;                                                     \
            }                                                                  \
            i++;                                                               \
        } while (0)
        if (!strcmp(a, "--rounds")) {
            NEED_NUM();
            cfg.rounds = n;
        } else if (!strcmp(a, "--seconds")) {
            NEED_NUM();
            cfg.seconds = (unsigned)n;
        } else if (!strcmp(a, "--clients")) {
            NEED_NUM();
            if (n < 5 || n > MAX_SLOTS - 8) {
                fprintf(stderr, "coord-fault: --clients must be 5..%d\n", MAX_SLOTS - 8);
                return -1;
            }
            cfg.clients = (unsigned)n;
        } else if (!strcmp(a, "--seed")) {
            NEED_NUM();
            cfg.seed = n;
        } else if (!strcmp(a, "--workstreams")) {
            NEED_NUM();
            if (n < 1 || n > MAX_WS) {
                fprintf(stderr, "coord-fault: --workstreams must be 1..%d\n", MAX_WS);
                return -1;
            }
            cfg.nws = (unsigned)n;
        } else if (!strcmp(a, "--fault-ms")) {
            NEED_NUM();
            cfg.fault_ms = n ? (unsigned)n : 1;
        } else if (!strcmp(a, "--broker-kill-ms")) {
            unsigned lo, hi;
            if (!v || sscanf(v, "%u:%u", &lo, &hi) != 2 || lo < 200 || hi < lo) {
                fprintf(stderr, "coord-fault: --broker-kill-ms needs A:B, 200 <= A <= B\n");
                return -1;
            }
            cfg.broker_kill_min_ms = lo;
            cfg.broker_kill_max_ms = hi;
            i++;
        } else if (!strcmp(a, "--broker")) {
            if (!v) {
                fprintf(stderr, "coord-fault: --broker needs a path\n");
                return -1;
            }
            cfg.broker = v;
            i++;
        } else if (!strcmp(a, "--wipe-pct")) {
            NEED_NUM();
            cfg.wipe_pct = n > 100 ? 100 : (unsigned)n;
        } else if (!strcmp(a, "--ignore-drain-pct")) {
            NEED_NUM();
            OB_IGNORE_DRAIN_PCT = n > 100 ? 100 : (unsigned)n;
        } else if (!strcmp(a, "--etcd")) {
            NEED_NUM();
            if (n < 1 || n > MAX_BROKERS) {
                fprintf(stderr, "coord-fault: --etcd must be 1..%d brokers\n", MAX_BROKERS);
                return -1;
            }
            cfg.etcd = true;
            cfg.nbrokers = (unsigned)n;
        } else if (!strcmp(a, "--no-outbox")) {
            cfg.outbox = false;
        } else if (!strcmp(a, "--expect-violation")) {
            if (!v) {
                fprintf(stderr, "coord-fault: --expect-violation needs a name\n");
                return -1;
            }
            cfg.expect = v;
            i++;
        } else if (!strcmp(a, "--no-broker-kill")) {
            cfg.broker_kill = false;
        } else if (!strcmp(a, "--keep")) {
            cfg.keep = true;
        } else if (!strcmp(a, "--verbose") || !strcmp(a, "-v")) {
            cfg.verbose = true;
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            exit(0);
        } else {
            fprintf(stderr, "coord-fault: unknown option %s\n", a);
            usage(stderr);
            return -1;
        }
#undef NEED_NUM
    }
    cfg.no_steals = cfg.expect && !strcmp(cfg.expect, "transition_p99");
    if (cfg.expect && !known_violation(cfg.expect)) {
        fprintf(stderr, "coord-fault: --expect-violation %s: no such violation\n", cfg.expect);
        return -1;
    }
    if (!cfg.rounds && !cfg.seconds) {
        fprintf(stderr, "coord-fault: --rounds 0 needs --seconds\n");
        return -1;
    }
    return 0;
}

/* ---- temp dir ---- */

static void rm_rf(const char *path)
{
    DIR *d = opendir(path);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
                continue;
            char p[600];
            snprintf(p, sizeof p, "%s/%s", path, e->d_name);
            struct stat st;
            if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode))
                rm_rf(p);
            else
                unlink(p);
        }
        closedir(d);
    }
    rmdir(path);
}

/* ---- slots ---- */

static int nclients_role(int role)
{
    unsigned outbox = cfg.outbox ? cfg.clients / 4 : 0;
    unsigned rest = cfg.clients - outbox;
    unsigned leaders = rest * 6 / 10, locks = rest * 2 / 10;
    if (role == ROLE_OUTBOX)
        return (int)outbox;
    if (role == ROLE_LEADER)
        return (int)leaders;
    if (role == ROLE_LOCK)
        return (int)locks;
    return (int)(rest - leaders - locks);
}

static int role_of(unsigned i)
{
    unsigned leaders = (unsigned)nclients_role(ROLE_LEADER);
    unsigned locks = (unsigned)nclients_role(ROLE_LOCK);
    unsigned flights = (unsigned)nclients_role(ROLE_FLIGHT);
    return i < leaders ? ROLE_LEADER : i < leaders + locks ? ROLE_LOCK
         : i < leaders + locks + flights ? ROLE_FLIGHT : ROLE_OUTBOX;
}

static int spawn(unsigned i, int role, uint32_t arg)
{
    struct slot *s = &S->slots[i];
    atomic_store(&s->role, role);
    atomic_store(&s->state, ST_STARTING);
    atomic_store(&s->target, 0);
    atomic_store(&s->gen, 0);
    atomic_store(&s->block_deadline_ns, 0);
    atomic_store(&s->stopped, 0);
    atomic_store(&s->stop_gen, 0);
    atomic_store(&s->stop_ws, -1);
    atomic_store(&s->cont_seq, 0);
    atomic_store(&s->last_cont_ns, 0);
    s->arg = arg;
    s->seed = cfg.seed ^ (0x9E3779B97F4A7C15ull * (i + 1)) ^ ((uint64_t)++spawn_count << 40);
    s->spawned_ns = now_ns();
    D[i].killed = false;
    D[i].stop_ns = 0;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        perror("coord-fault: fork");
        return -1;
    }
    if (pid == 0)
        client_main((int)i);
    atomic_store(&s->pid, pid);
    return 0;
}

static int find_slot(pid_t pid)
{
    for (int i = 0; i < MAX_SLOTS; i++)
        if (atomic_load(&S->slots[i].pid) == pid)
            return i;
    return -1;
}

static bool is_stopped(int pid)
{
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    return p && p[1] == ' ' && (p[2] == 'T' || p[2] == 't');
}

/* ---- faults ---- */

/* slot i leads a workstream and is about to be killed or frozen: the
 * transition to its successor is timed (trans_begin) */
static void note_transition(unsigned i, int kind)
{
    struct slot *s = &S->slots[i];
    int role = atomic_load(&s->role);
    if (atomic_load(&s->state) != ST_LEADING ||
        (role != ROLE_LEADER && role != ROLE_STEAL_LEADER))
        return;     /* outbox leaders' workstreams are not timed here */
    unsigned ws = (unsigned)atomic_load(&s->target);
    uint32_t waiters = 0;
    for (unsigned j = 0; j < MAX_SLOTS; j++) {
        struct slot *o = &S->slots[j];
        int st = atomic_load(&o->state);
        if (j != i && atomic_load(&o->pid) > 0 && !D[j].killed && !D[j].stop_ns &&
            (st == ST_CAMPAIGNING || st == ST_STEALING) &&
            atomic_load(&o->target) == (int)ws)
            waiters++;
    }
    trans_begin(ws, atomic_load(&s->gen), kind, waiters);
}

static void kill_slot(unsigned i)
{
    pid_t pid = atomic_load(&S->slots[i].pid);
    if (pid <= 0 || D[i].killed)
        return;
    note_transition(i, TK_KILL);
    D[i].killed = true;
    kill(pid, SIGKILL);
}

enum fault {
    F_KILL_LEADER, F_KILL_CAMPAIGNER, F_KILL_HOLDER, F_KILL_WAITER, F_KILL_OWNER,
    F_KILL_FOLLOWER, F_STOP_LEADER, F_STEAL_LOCK, F_STEAL_LEADER, F_KILL_ANY,
    /* the outbox leaders' faults (cfg.outbox) */
    F_KILL_CLAIMED, F_STOP_CLAIMED, F_MODE, F_ROLLOUT, F_ROLLBACK, F_INCIDENT, F_COUNT
};
static const unsigned fault_weight[F_COUNT] = { 25, 5, 10, 10, 10, 5, 10, 12, 8, 5,
                                                14, 4, 4, 2, 3, 2 };

static int pick_slot(int state, int role)
{
    int cand[MAX_SLOTS], n = 0;
    for (unsigned i = 0; i < cfg.clients; i++) {
        struct slot *s = &S->slots[i];
        if (atomic_load(&s->pid) <= 0 || D[i].killed || D[i].stop_ns)
            continue;
        if (role && atomic_load(&s->role) != role)
            continue;
        if (state >= 0 && atomic_load(&s->state) != state)
            continue;
        cand[n++] = (int)i;
    }
    return n ? cand[rng_below(&R, (uint64_t)n)] : -1;
}

static int free_aux(void)
{
    for (unsigned i = cfg.clients; i < cfg.clients + 6 && i < MAX_SLOTS; i++)
        if (atomic_load(&S->slots[i].pid) <= 0)
            return (int)i;
    return -1;
}

/* an outbox leader between its claim and its commit (they pass there for
 * milliseconds: looked for during up to 20 ms) */
static int pick_claimed(void)
{
    for (int tries = 0; tries < 20; tries++) {
        int i = pick_slot(ST_CLAIMED, 0);
        int j = pick_slot(ST_EFFECTED, 0);
        if (i >= 0 || j >= 0)
            return i < 0 ? j : j < 0 ? i : rng_pct(&R, 50) ? i : j;
        sleep_ms(1);
    }
    return -1;
}

static bool incident_running(void)
{
    for (unsigned i = cfg.clients; i < cfg.clients + 6 && i < MAX_SLOTS; i++)
        if (atomic_load(&S->slots[i].pid) > 0 &&
            atomic_load(&S->slots[i].role) == ROLE_INCIDENT)
            return true;
    return false;
}

static unsigned nstopped(void)
{
    unsigned n = 0;
    for (unsigned i = 0; i < cfg.clients; i++)
        n += D[i].stop_ns != 0;
    return n;
}

static void inject(void)
{
    unsigned total = 0;
    for (int f = 0; f < F_COUNT; f++)
        total += fault_weight[f];
    uint64_t p = rng_below(&R, total);
    int f = 0;
    while (p >= fault_weight[f])
        p -= fault_weight[f++];
    int i;
    if (f >= F_KILL_CLAIMED && !cfg.outbox)
        f = F_KILL_ANY;
    switch (f) {
    case F_KILL_LEADER:
        if ((i = pick_slot(ST_LEADING, ROLE_LEADER)) >= 0) {
            kill_slot((unsigned)i);
            CNT(kill_leader);
        }
        break;
    case F_KILL_CAMPAIGNER:
        if ((i = pick_slot(ST_CAMPAIGNING, ROLE_LEADER)) >= 0) {
            kill_slot((unsigned)i);
            CNT(kill_campaigner);
        }
        break;
    case F_KILL_HOLDER:
        if ((i = pick_slot(ST_LOCK_HOLDING, ROLE_LOCK)) >= 0) {
            kill_slot((unsigned)i);
            CNT(kill_holder);
        }
        break;
    case F_KILL_WAITER:
        if ((i = pick_slot(ST_LOCK_WAITING, ROLE_LOCK)) >= 0) {
            kill_slot((unsigned)i);
            CNT(kill_waiter);
        }
        break;
    case F_KILL_OWNER:
        if ((i = pick_slot(ST_FLIGHT_OWNER, ROLE_FLIGHT)) >= 0) {
            kill_slot((unsigned)i);
            CNT(kill_owner);
        }
        break;
    case F_KILL_FOLLOWER:
        if ((i = pick_slot(ST_FLIGHT_JOINING, ROLE_FLIGHT)) >= 0) {
            kill_slot((unsigned)i);
            CNT(kill_follower);
        }
        break;
    case F_STOP_LEADER:
        /* freeze a leader holding the broker's default lease: the time to
         * its successor is the default's (and its late writes FENCED) */
        i = -1;
        for (int tries = 0; tries < 8 && i < 0 && nstopped() < 2; tries++)
            if ((i = pick_slot(ST_LEADING, ROLE_LEADER)) >= 0 &&
                !atomic_load(&S->slots[i].default_lease))
                i = -1;
        if (i >= 0) {
            uint64_t now = now_ns();
            uint64_t lease = atomic_load(&S->slots[i].lease_ms);
            note_transition((unsigned)i, TK_FREEZE);
            D[i].stop_ns = now;
            D[i].resume_ns = now + (2 * lease + 300) * 1000000ull;
            atomic_store(&S->slots[i].stopped, 1);
            kill(atomic_load(&S->slots[i].pid), SIGSTOP);
        }
        break;
    case F_STEAL_LOCK:
        if ((i = pick_slot(ST_LOCK_HOLDING, ROLE_LOCK)) >= 0) {
            int a = free_aux();
            if (a >= 0 && spawn((unsigned)a, ROLE_STEAL_LOCK,
                                (uint32_t)atomic_load(&S->slots[i].target)) == 0)
                CNT(steal_lock_inj);
        }
        break;
    case F_STEAL_LEADER:
        if (!cfg.no_steals && (i = pick_slot(ST_LEADING, ROLE_LEADER)) >= 0) {
            int a = free_aux();
            if (a >= 0 && spawn((unsigned)a, ROLE_STEAL_LEADER,
                                (uint32_t)atomic_load(&S->slots[i].target)) == 0)
                CNT(steal_leader_inj);
        }
        break;
    case F_KILL_CLAIMED:
        if ((i = pick_claimed()) >= 0) {
            if (atomic_load(&S->slots[i].state) == ST_CLAIMED)
                CNT(kill_claimed);
            else
                CNT(kill_effected);
            kill_slot((unsigned)i);
        }
        break;
    case F_STOP_CLAIMED:
        if (nstopped() < 2 && (i = pick_claimed()) >= 0) {
            uint64_t now = now_ns();
            uint64_t lease = 500;
            D[i].stop_ns = now;
            D[i].resume_ns = now + (2 * lease + 300) * 1000000ull;
            atomic_store(&S->slots[i].lease_ms, lease);
            atomic_store(&S->slots[i].stopped, 1);
            kill(atomic_load(&S->slots[i].pid), SIGSTOP);
            CNT(stop_claimed);
        }
        break;
    case F_MODE:
        if (!etcd_outage_on())      /* the driver's calls need the ledger */
            ob_switch_mode(1);
        break;
    case F_ROLLOUT:
        /* the deployed version, or the file's floor raised to it (a
         * reload needs the ledger) */
        ob_rollout((unsigned)rng_below(&R, NOB), !etcd_outage_on());
        break;
    case F_ROLLBACK: {
        int a = free_aux();
        if (a >= 0)
            spawn((unsigned)a, ROLE_ROLLBACK, (uint32_t)rng_below(&R, NOB));
        break;
    }
    case F_INCIDENT: {
        int a = free_aux();
        if (a >= 0 && !etcd_outage_on() && !atomic_load(&S->ob[0].disabled) &&
            !incident_running() && ob_disable(0, true) == 0) {
            CNT(incidents);
            spawn((unsigned)a, ROLE_INCIDENT, (uint32_t)atomic_load(&S->c.incidents));
        }
        break;
    }
    default:
        if ((i = pick_slot(-1, 0)) >= 0) {
            kill_slot((unsigned)i);
            CNT(kill_any);
        }
        break;
    }
}

/* the operator enables outbox-0 again (in its descriptor file) once the
 * incident client is done, or when it died before it said so */
static void enable_after_incident(void)
{
    struct obinfo *w = &S->ob[0];
    if (!cfg.outbox || etcd_outage_on() || !atomic_load(&w->disabled))
        return;
    if (atomic_exchange(&w->enable_asked, 0) ||
        (!incident_running() && now_ns() - atomic_load(&w->disabled_ns) > 3000000000ull))
        ob_disable(0, false);
}

/* SIGCONT the stopped leaders whose time has come.  The lease of the
 * generation they lead (if they still believe they lead) passed while
 * they were frozen: their next renew/commit/resign must be FENCED. */
static void resume_due(void)
{
    uint64_t now = now_ns();
    for (unsigned i = 0; i < cfg.clients; i++) {
        if (!D[i].stop_ns || now < D[i].resume_ns)
            continue;
        struct slot *s = &S->slots[i];
        pid_t pid = atomic_load(&s->pid);
        uint64_t lease = atomic_load(&s->lease_ms);
        if (now - D[i].stop_ns < (2 * lease + 300) * 1000000ull) {
            D[i].resume_ns = D[i].stop_ns + (2 * lease + 300) * 1000000ull;
            continue;
        }
        bool frozen = pid > 0 && !D[i].killed && is_stopped(pid);
        if (frozen && atomic_load(&s->state) == ST_LEADING) {
            atomic_store(&s->stop_gen, 0);
            atomic_store(&s->stop_ws, atomic_load(&s->target));
            atomic_store(&s->stop_gen, atomic_load(&s->gen));
        }
        atomic_store(&s->cont_seq, seq_next());
        atomic_store(&s->last_cont_ns, now_ns());
        atomic_store(&s->stopped, 0);
        D[i].stop_ns = 0;
        if (pid > 0)
            kill(pid, SIGCONT);
        if (frozen)
            CNT(stops);
    }
}

static const char *block_what_name(int w)
{
    static const char *n[] = { "?", "connect", "leader.lost/lock.lost wait", "leader.commit",
                               "leader.renew", "leader.resign", "leader.campaign",
                               "lock.acquire", "lock.release", "coord_once", "flight.join",
                               "flight.complete", "leader.claim", "the provider",
                               "leader.pending", "outbox commit/abandon",
                               "outbox renew/resign", "driver call" };
    return w >= 0 && w < (int)(sizeof n / sizeof n[0]) ? n[w] : "?";
}

static void watchdog(void)
{
    uint64_t now = now_ns();
    for (unsigned i = 0; i < MAX_SLOTS; i++) {
        struct slot *s = &S->slots[i];
        pid_t pid = atomic_load(&s->pid);
        if (pid <= 0 || D[i].killed || D[i].stop_ns || atomic_load(&s->stopped))
            continue;
        uint64_t dl = atomic_load(&s->block_deadline_ns);
        if (!dl || now <= dl)
            continue;
        if (atomic_load(&s->block_start_ns) < atomic_load(&s->last_cont_ns))
            continue;       /* the call spanned a SIGSTOP */
        VIOL(stuck, "slot %u (pid %d, role %d, state %d) blocked in %s for more than "
             "%.1f s", i, (int)pid, atomic_load(&s->role), atomic_load(&s->state),
             block_what_name(atomic_load(&s->block_what)),
             (double)(dl - atomic_load(&s->block_start_ns)) / 1e9);
        kill_slot(i);
    }
}

static void drop_transitions(void)
{
    for (unsigned w = 0; w < cfg.nws; w++)
        if (atomic_exchange(&S->ws[w].kill_ns, 0))
            CNT(transitions_dropped);
}

static bool ending;

static void reap(void)
{
    for (;;) {
        int st;
        pid_t pid = waitpid(-1, &st, WNOHANG);
        if (pid <= 0)
            return;
        int b = broker_of_pid(pid);
        if (b >= 0) {
            VIOL(broker_crash, "coordd %d (pid %d) ended by itself: %s %d", b, (int)pid,
                 WIFEXITED(st) ? "status" : "signal",
                 WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
            broker_log_tail((unsigned)b);
            broker_reaped((unsigned)b);
            drop_transitions();
            continue;       /* the main loop restarts it */
        }
        int i = find_slot(pid);
        if (i < 0)
            continue;
        bool ours = D[i].killed;
        if (WIFSIGNALED(st) && !(ours && WTERMSIG(st) == SIGKILL))
            VIOL(client_crash, "client slot %d (pid %d) died of signal %d", i, (int)pid,
                 WTERMSIG(st));
        else if (WIFEXITED(st) && WEXITSTATUS(st) != 0)
            VIOL(client_crash, "client slot %d (pid %d) exited with status %d", i, (int)pid,
                 WEXITSTATUS(st));
        atomic_store(&S->slots[i].pid, 0);
        atomic_store(&S->slots[i].state, ST_FREE);
        D[i].killed = false;
        D[i].stop_ns = 0;
        if (!ending && (unsigned)i < cfg.clients) {
            CNT(respawns);
            spawn((unsigned)i, role_of((unsigned)i), 0);
        }
    }
}

/* (Re)starts broker i; killed: SIGKILL it first (and maybe wipe its
 * data dir).  With the etcd ledger a wipe takes only the machine's local
 * state (records, its id epoch): the leader ledger is etcd's, and every
 * leadership check stays as strict as before. */
static int restart_broker(unsigned i, bool killed)
{
    static bool configured;
    if (killed) {
        drop_transitions();
        /* etcd: the leaders of this machine lose their terms only when etcd
         * lets their leases go; the next grant elsewhere is timed */
        for (unsigned s = 0; cfg.etcd && s < cfg.clients; s++) {
            struct slot *sl = &S->slots[s];
            if (s % cfg.nbrokers == i && atomic_load(&sl->role) == ROLE_LEADER &&
                atomic_load(&sl->state) == ST_LEADING) {
                unsigned ws = (unsigned)atomic_load(&sl->target);
                atomic_store(&S->bkill_ns[ws], 0);
                atomic_store(&S->bkill_gen[ws], atomic_load(&sl->gen));
                atomic_store(&S->bkill_ns[ws], now_ns());
            }
        }
        broker_kill(i);
        CNT(broker_kills);
        if (rng_pct(&R, cfg.wipe_pct)) {
            if (!cfg.etcd) {
                /* the ledger is gone while the broker is down: its state
                 * is forgotten (applied and claimed ops, the ratchet above
                 * a file's floor), generations must still go up.  Its
                 * policy is not: the descriptor files are read again at
                 * the start, so nothing is defined again and the outbox
                 * checks stay armed */
                atomic_fetch_add(&S->wipes, 1);
                atomic_store(&S->wipe_seq, seq_next());
            }
            rm_rf(broker_data_dir(i));
            CNT(wipes);
        }
        sleep_ms(rng_below(&R, 300));
    }
    alarm(120);
    if (broker_start(i) < 0)
        return -1;
    /* the first start: the first descriptor files (their config dir was
     * empty), applied with broker.reload before any client starts */
    if (i == 0 && !configured && cfg.outbox) {
        if (ob_config_init() < 0)
            return -1;
        configured = true;
    }
    if (i == 0)
        verify_epoch();
    verify_state("after broker restart", false);
    alarm(0);
    return 0;
}

static uint64_t violation_count(const char *name)
{
#define X(nm, t) if (!strcmp(name, #nm)) return atomic_load(&S->v.nm);
    FAULT_VIOLATIONS(X)
#undef X
    return 0;
}

static bool known_violation(const char *name)
{
#define X(nm, t) if (!strcmp(name, #nm)) return true;
    FAULT_VIOLATIONS(X)
#undef X
    return false;
}

static void on_alarm(int sig)
{
    (void)sig;
    static const char msg[] = "coord-fault: the driver's own checks hung (no reply from "
                              "coordd for 120 s): giving up\n";
    ssize_t r = write(2, msg, sizeof msg - 1);
    (void)r;
    _exit(3);
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

struct tstat {
    uint64_t n, nw, under50;        /* samples, with a campaign waiting, < 50 ms */
    double p50, p99, max, w50, w99; /* ms */
};

/* The transition samples of kind (-1: all).  online: transitions still
 * pending past the gate count as samples of the gate's length (the
 * --expect-violation runs end as soon as the p99 is past it). */
static void trans_stat(int kind, bool online, struct tstat *t)
{
    memset(t, 0, sizeof *t);
    uint64_t nt = atomic_load(&S->ntrans);
    if (nt > TRANS_CAP)
        nt = TRANS_CAP;
    uint32_t *tr = malloc((nt + MAX_WS + 1) * sizeof *tr);
    uint32_t *tw = malloc((nt + 1) * sizeof *tw);
    if (!tr || !tw) {
        free(tr);
        free(tw);
        return;
    }
    uint64_t n = 0, nw = 0;
    for (uint64_t i = 0; i < nt; i++) {
        uint32_t v = atomic_load(&TRANS[i]);
        if (kind >= 0 && (int)((v >> TRANS_KIND_SHIFT) & 3u) != kind)
            continue;
        tr[n++] = v & TRANS_US_MASK;
        if (!(v & TRANS_NO_WAITER))
            tw[nw++] = v & TRANS_US_MASK;
    }
    if (online) {
        uint64_t now = now_ns();
        for (unsigned w = 0; w < cfg.nws; w++) {
            uint64_t kt = atomic_load(&S->ws[w].kill_ns);
            if (kt && now - kt >= TRANSITION_GATE_MS * 1000000ull &&
                (kind < 0 || (int)atomic_load(&S->ws[w].kill_kind) == kind))
                tr[n++] = TRANSITION_GATE_MS * 1000u;
        }
    }
    qsort(tr, n, sizeof *tr, cmp_u32);
    qsort(tw, nw, sizeof *tw, cmp_u32);
    t->n = n;
    t->nw = nw;
    if (n) {
        t->p50 = tr[n / 2] / 1000.0;
        t->p99 = tr[(n * 99) / 100] / 1000.0;
        t->max = tr[n - 1] / 1000.0;
    }
    if (nw) {
        t->w50 = tw[nw / 2] / 1000.0;
        t->w99 = tw[(nw * 99) / 100] / 1000.0;
    }
    for (uint64_t i = 0; i < n; i++)
        t->under50 += tr[i] < 50000;
    free(tr);
    free(tw);
}

static uint64_t total_violations(void)
{
    uint64_t n = 0;
#define X(nm, t) n += atomic_load(&S->v.nm);
    FAULT_VIOLATIONS(X)
#undef X
    return n;
}

int main(int argc, char **argv)
{
    if (parse_args(argc, argv) < 0)
        return 2;
    CFG = &cfg;
    R.s = cfg.seed | 1;
    signal(SIGPIPE, SIG_IGN);
    signal(SIGALRM, on_alarm);
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *tmp = getenv("TMPDIR");
    snprintf(cfg.tmpdir, sizeof cfg.tmpdir, "%s/coord-fault-XXXXXX",
             tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(cfg.tmpdir)) {
        perror("coord-fault: mkdtemp");
        return 3;
    }
    snprintf(cfg.socket_path, sizeof cfg.socket_path, "%s/broker.sock", cfg.tmpdir);
    snprintf(cfg.data_dir, sizeof cfg.data_dir, "%s/data", cfg.tmpdir);
    snprintf(cfg.config_dir, sizeof cfg.config_dir, "%s/config", cfg.tmpdir);
    char wsdir[320];
    snprintf(wsdir, sizeof wsdir, "%s/workstreams", cfg.config_dir);
    if (mkdir(cfg.config_dir, 0700) < 0 || mkdir(wsdir, 0700) < 0) {
        perror("coord-fault: mkdir config dir");
        rm_rf(cfg.tmpdir);
        return 3;
    }
    if (shm_init(cfg.rounds) < 0)
        return 3;
    printf("coord-fault: seed %" PRIu64 ", %u clients (%d leaders, %d lock, %d flight, "
           "%d outbox), "
           "%u workstreams, rounds %" PRIu64 ", seconds %u, broker kills %s, broker %s%s\n",
           cfg.seed, cfg.clients, nclients_role(ROLE_LEADER), nclients_role(ROLE_LOCK),
           nclients_role(ROLE_FLIGHT), nclients_role(ROLE_OUTBOX), cfg.nws, cfg.rounds,
           cfg.seconds, cfg.broker_kill ? "on" : "off", cfg.broker,
           cfg.etcd ? " (brokers sharing an etcd ledger)" : "");
    if (cfg.etcd)
        printf("coord-fault: %u brokers, etcd leader ledger\n", cfg.nbrokers);
    if (cfg.outbox && provider_start() < 0)
        return 3;
    if (etcd_begin() < 0) {
        rm_rf(cfg.tmpdir);
        return 3;
    }
    for (unsigned b = cfg.nbrokers; b-- > 0;) {     /* broker 0 last: its reload applies the files */
        if (restart_broker(b, false) < 0) {
            etcd_end();
            rm_rf(cfg.tmpdir);
            return 3;
        }
    }
    for (unsigned i = 0; i < cfg.clients; i++)
        if (spawn(i, role_of(i), 0) < 0)
            return 3;

    uint64_t t0 = now_ns(), next_fault = t0 + 200000000ull, next_report = t0 + 10000000000ull;
    uint64_t next_tcheck = t0, outage_end = 0;
    uint64_t next_outage = t0 + rng_range(&R, 2000, 6000) * 1000000ull;
    uint64_t next_bkill = t0 + rng_range(&R, cfg.broker_kill_min_ms, cfg.broker_kill_max_ms) *
                          1000000ull;
    int rc_run = 0;
    for (;;) {
        reap();
        bool down = false;
        for (unsigned b = 0; b < cfg.nbrokers && !down; b++)
            down = broker_pid(b) <= 0 && restart_broker(b, false) < 0;
        if (down) {
            rc_run = 3;
            break;
        }
        watchdog();
        resume_due();
        enable_after_incident();
        if (cfg.outbox)
            ob_tick();
        uint64_t now = now_ns();
        if (now >= next_fault) {
            inject();
            next_fault = now + rng_range(&R, 1, 2ull * cfg.fault_ms) * 1000000ull;
        }
        /* --etcd: etcd outages (SIGSTOP, or SIGKILL and a restart) */
        if (cfg.etcd && !etcd_outage_on() && now >= next_outage) {
            etcd_outage_begin(rng_pct(&R, 50));
            /* up to 3 s: past the broker's etcd call timeout (2 s), so that
             * calls are answered while etcd is still down */
            outage_end = now_ns() + rng_range(&R, 200, 3000) * 1000000ull;
        }
        if (etcd_outage_on() && (now >= outage_end || (cfg.broker_kill && now >= next_bkill))) {
            if (etcd_outage_end() < 0) {
                rc_run = 3;
                break;
            }
            now = now_ns();
            next_outage = now + rng_range(&R, 2000, 6000) * 1000000ull;
        }
        if (cfg.broker_kill && now >= next_bkill) {
            if (restart_broker((unsigned)rng_below(&R, cfg.nbrokers), true) < 0) {
                rc_run = 3;
                break;
            }
            now = now_ns();
            next_bkill = now + rng_range(&R, cfg.broker_kill_min_ms, cfg.broker_kill_max_ms) *
                         1000000ull;
        }
        /* a round is a leader grant, outbox workstreams included */
        uint64_t grants = atomic_load(&S->c.grants) + atomic_load(&S->c.ob_grants);
        if (now >= next_report) {
            fprintf(stderr, "coord-fault: %5.0f s: %" PRIu64 " rounds, %" PRIu64
                    " commits applied, %" PRIu64 " broker restarts, %" PRIu64 " violations\n",
                    (double)(now - t0) / 1e9, grants, atomic_load(&S->c.commits_applied),
                    atomic_load(&S->c.broker_kills), total_violations());
            next_report = now + 10000000000ull;
        }
        /* the transition gate is judged on the whole run: in
         * --expect-violation mode, as soon as a kind's p99 is past it */
        if (cfg.expect && !strcmp(cfg.expect, "transition_p99") && now >= next_tcheck) {
            next_tcheck = now + 250000000ull;
            for (int k = 0; k < TK_COUNT; k++) {
                struct tstat t;
                trans_stat(k, true, &t);
                if (t.n && t.p99 >= TRANSITION_GATE_MS)
                    VIOL(transition_p99, "%s transitions: p99 %.1f ms over %" PRIu64
                         " samples (pending ones past %d ms included)", tkind_name[k], t.p99,
                         t.n, TRANSITION_GATE_MS);
            }
        }
        if (cfg.expect && violation_count(cfg.expect))
            break;
        /* max_hold is judged on the whole run: in --expect-violation mode
         * the run ends as soon as the ratio is past it */
        if (cfg.expect && !strcmp(cfg.expect, "max_hold") && atomic_load(&S->ob[0].overheld) &&
            atomic_load(&S->ob[0].overheld) * 1000 >= atomic_load(&S->c.ob_terms_hold))
            break;
        if ((cfg.rounds && grants >= cfg.rounds) ||
            (cfg.seconds && now - t0 >= (uint64_t)cfg.seconds * 1000000000ull))
            break;
        sleep_ms(2);
    }
    uint64_t t_load = now_ns() - t0;
    if (etcd_outage_end() < 0)
        rc_run = 3;

    /* stop the load: every client is killed (nothing of theirs can be in
     * doubt any more), then the broker's state is checked, and once more
     * after a last kill -9 */
    ending = true;
    atomic_store(&S->end, 1);
    for (unsigned i = 0; i < MAX_SLOTS; i++) {
        pid_t pid = atomic_load(&S->slots[i].pid);
        if (pid > 0) {
            D[i].killed = true;
            kill(pid, SIGKILL);
        }
    }
    for (;;) {
        bool any = false;
        for (unsigned i = 0; i < MAX_SLOTS; i++)
            any |= atomic_load(&S->slots[i].pid) > 0;
        if (!any)
            break;
        reap();
        sleep_ms(1);
    }
    if (rc_run == 0 && broker_pid(0) > 0) {
        alarm(300);
        verify_state("end of load", true);
        if (cfg.broker_kill) {
            drop_transitions();
            broker_kill(0);
            CNT(broker_kills);
            if (broker_start(0) < 0)
                rc_run = 3;
            else {
                verify_epoch();
                verify_state("after the last broker kill", true);
            }
        }
        alarm(0);
        for (unsigned b = 0; b < cfg.nbrokers; b++)
            if (broker_pid(b) > 0 && broker_stop(b) != 0)
                VIOL(broker_crash, "coordd %u did not exit 0 on SIGTERM", b);
    } else {
        for (unsigned b = 0; b < cfg.nbrokers; b++)
            broker_kill(b);
    }
    etcd_end();

    /* transitions, per fault kind and in all */
    struct tstat ts[TK_COUNT], tall;
    for (int k = 0; k < TK_COUNT; k++) {
        trans_stat(k, false, &ts[k]);
        if (ts[k].n && ts[k].p99 >= TRANSITION_GATE_MS)
            VIOL(transition_p99, "%s transitions: p99 %.1f ms over %" PRIu64 " samples",
                 tkind_name[k], ts[k].p99, ts[k].n);
    }
    trans_stat(-1, false, &tall);
    double p50 = tall.p50, p99 = tall.p99, pmax = tall.max, w50 = tall.w50, w99 = tall.w99;
    uint64_t nt = tall.n, nw = tall.nw, under50 = tall.under50;
    /* a full run times every kind (a suite that stopped freezing or
     * stealing would pass the gate on the kinds left); not with --etcd,
     * whose outages leave too few default-lease lapses timed */
    uint64_t all_grants = atomic_load(&S->c.grants) + atomic_load(&S->c.ob_grants);
    if (!cfg.expect && !cfg.etcd && rc_run == 0 && all_grants >= 2000 &&
        t_load >= 20000000000ull)
        for (int k = 0; k < TK_COUNT; k++)
            if (!ts[k].n)
                VIOL(untimed, "no %s transition was timed in %" PRIu64 " rounds",
                     tkind_name[k], all_grants);
    provider_stop();
    uint64_t held = atomic_load(&S->c.ob_terms_hold), over = atomic_load(&S->ob[0].overheld);
    if (over && over * 1000 >= held)
        VIOL(max_hold, "%" PRIu64 " of %" PRIu64 " terms on %s were past their max hold "
             "without being fenced", over, held, ob_name(0));
    uint64_t bg = atomic_load(&S->ob[0].bg_overheld);
    if (bg && bg * 1000 >= held)
        VIOL(background_hold, "%" PRIu64 " of %" PRIu64 " terms on %s (%.3f%%) were still "
             "accepted past max hold + one lease (note 000: < 0.1%%); %" PRIu64 " of them "
             "had no drain (nobody waited)", bg, held, ob_name(0),
             100.0 * (double)bg / (double)held, atomic_load(&S->c.ob_bg_over_nodrain));

    /* summary */
    printf("\ncoord-fault summary (seed %" PRIu64 ", %.1f s of load, %.0f rounds/s)\n",
           cfg.seed, (double)t_load / 1e9,
           (double)(atomic_load(&S->c.grants) + atomic_load(&S->c.ob_grants)) /
           ((double)t_load / 1e9));
    uint64_t kills = atomic_load(&S->c.kill_leader) + atomic_load(&S->c.kill_campaigner) +
                     atomic_load(&S->c.kill_holder) + atomic_load(&S->c.kill_waiter) +
                     atomic_load(&S->c.kill_owner) + atomic_load(&S->c.kill_follower) +
                     atomic_load(&S->c.kill_any);
    printf("  %-20s %10" PRIu64 "    %-24s %10" PRIu64 "\n", "rounds (grants)",
           atomic_load(&S->c.grants) + atomic_load(&S->c.ob_grants), "client SIGKILLs", kills);
    printf("  %-20s %10" PRIu64 "    %-24s %10" PRIu64 "\n", "commits applied",
           atomic_load(&S->c.commits_applied), "leader SIGSTOP/SIGCONT", atomic_load(&S->c.stops));
    printf("  %-20s %10" PRIu64 "    %-24s %10" PRIu64 "\n", "commits duplicate",
           atomic_load(&S->c.commits_duplicate), "injected steals",
           atomic_load(&S->c.steal_lock_inj) + atomic_load(&S->c.steal_leader_inj));
    printf("  %-20s %10" PRIu64 "    %-24s %10" PRIu64 "\n", "commits FENCED",
           atomic_load(&S->c.commits_fenced), "broker kills+restarts",
           atomic_load(&S->c.broker_kills));
    for (int k = 0; k < TK_COUNT; k++) {
        char a[32], b[32];
        snprintf(a, sizeof a, "%s p50 (%" PRIu64 ")", tkind_name[k], ts[k].n);
        snprintf(b, sizeof b, "%s p99", tkind_name[k]);
        printf("  %-20s %10.2f ms %-24s %10.2f ms\n", a, ts[k].p50, b, ts[k].p99);
    }
    if (cfg.outbox) {
        printf("  %-20s %10" PRIu64 "    %-24s %10" PRIu64 "\n", "outbox grants",
               atomic_load(&S->c.ob_grants), "data dir wipes", atomic_load(&S->c.wipes));
        printf("  %-20s %10" PRIu64 "    %-24s %10" PRIu64 "\n", "real effects",
               atomic_load(&S->c.ob_effects), "claims reconciled",
               atomic_load(&S->c.ob_reconciles));
        printf("  %-20s %10" PRIu64 "    %-24s %10" PRIu64 "\n", "kills claim..commit",
               atomic_load(&S->c.kill_claimed) + atomic_load(&S->c.kill_effected),
               "incident takeovers", atomic_load(&S->c.incident_grants));
        printf("  %-20s %10" PRIu64 "    %-24s %7.3f%%\n", "max-hold terms", held,
               "past max hold, unfenced", held ? 100.0 * (double)over / (double)held : 0.0);
        printf("  %-20s %10" PRIu64 "    %-24s %7.3f%%\n", "  past hold+lease",
               atomic_load(&S->ob[0].bg_overheld), "background over SLO",
               held ? 100.0 * (double)atomic_load(&S->ob[0].bg_overheld) / (double)held : 0.0);
    }
    printf("  %-20s %10" PRIu64 "\n", "violations", total_violations());
    printf("details:\n");
#define X(nm, t) printf("  %-58s %12" PRIu64 "\n", t, atomic_load(&S->c.nm));
    FAULT_COUNTERS(X)
#undef X
    printf("  %-58s %12" PRIu64 "\n", "leader transitions timed (fault -> next grant)", nt);
    for (int k = 0; k < TK_COUNT; k++) {
        char what[80];
        snprintf(what, sizeof what, "  %-6s (%" PRIu64 "): p50 / p99 / max", tkind_name[k],
                 ts[k].n);
        printf("  %-58s %9.2f / %.2f / %.2f ms\n", what, ts[k].p50, ts[k].p99, ts[k].max);
    }
    printf("  %-58s %9.2f ms\n", "leader transition p50 (all kinds)", p50);
    printf("  %-58s %9.2f ms  (gate < %d ms per kind; target < 50 ms: %s)\n",
           "leader transition p99 (all kinds)", p99, TRANSITION_GATE_MS,
           p99 < 50.0 ? "met" : "NOT met");
    printf("  %-58s %9.2f ms\n", "leader transition max", pmax);
    printf("  %-58s %11.1f%%\n", "transitions under 50 ms", nt ? 100.0 * under50 / nt : 0.0);
    if (cfg.etcd) {
        uint64_t nb = atomic_load(&S->nbtrans);
        if (nb > BTRANS_CAP)
            nb = BTRANS_CAP;
        uint32_t *bt = malloc((nb ? nb : 1) * sizeof *bt);
        for (uint64_t k = 0; bt && k < nb; k++)
            bt[k] = atomic_load(&S->btrans[k]);
        if (bt)
            qsort(bt, nb, sizeof *bt, cmp_u32);
        printf("  %-58s %12" PRIu64 "\n", "broker SIGKILL -> grant on another machine", nb);
        printf("  %-58s %9.0f ms\n", "  their p50", nb && bt ? (double)bt[nb / 2] : 0.0);
        printf("  %-58s %9.0f ms\n", "  their p99", nb && bt ? (double)bt[(nb * 99) / 100] : 0.0);
        free(bt);
    }
    printf("  %-58s %12" PRIu64 "\n", "samples with a campaign already waiting", nw);
    printf("  %-58s %9.2f ms\n", "  their p50", w50);
    printf("  %-58s %9.2f ms\n", "  their p99", w99);
    printf("violations:\n");
#define X(nm, t) printf("  %-58s %12" PRIu64 "\n", t, atomic_load(&S->v.nm));
    FAULT_VIOLATIONS(X)
#undef X
    uint64_t nv = total_violations();
    uint32_t nm = atomic_load(&S->nvmsg);
    for (uint32_t i = 0; i < nm && i < MAX_VMSG; i++)
        printf("  ! %s\n", S->vmsg[i]);
    if (cfg.rounds && atomic_load(&S->c.grants) + atomic_load(&S->c.ob_grants) < cfg.rounds)
        printf("note: stopped by --seconds before --rounds %" PRIu64 " was reached\n",
               cfg.rounds);
    if (cfg.expect) {
        uint64_t want = violation_count(cfg.expect);
        printf("%s: expected violation %s %s (%" PRIu64 " in all)\n", want ? "PASS" : "FAIL",
               cfg.expect, want ? "caught" : "NOT caught", nv);
        if (!cfg.keep)
            rm_rf(cfg.tmpdir);
        return rc_run ? 3 : want ? 0 : 1;
    }
    printf("%s: %" PRIu64 " violation%s\n", nv ? "FAIL" : "PASS", nv, nv == 1 ? "" : "s");
    if (rc_run)
        printf("the run could not be completed (see above)\n");
    if (cfg.keep || nv || rc_run)
        printf("temp dir kept: %s\n", cfg.tmpdir);
    else
        rm_rf(cfg.tmpdir);
    return rc_run ? 3 : nv ? 1 : 0;
}
