/* main.c - coord-bench's command line: options, the temp dir, the baseline
 * echo server, the broker under test, and the scenario table. */
#include <errno.h>
#include <ftw.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "bench.h"

#ifndef COORD_BENCH_BROKER
#define COORD_BENCH_BROKER "coordd"
#endif

static const struct {
    const char *name;
    scenario_fn fn;
    const char *what;
} scenarios[] = {
    { "lock-cycle", sc_lock_cycle, "1 client: p50 acquire+release / p50 raw round trip (<= 2.1x)" },
    { "many-clients", sc_many_clients, "16 and 64 clients: broker requests/s / raw round trips/s (>= 0.9x)" },
    { "handoff", sc_handoff, "release -> next waiter's grant p99 / raw round trip p99 (<= 2x)" },
    { "memory", sc_memory, "RSS growth: 10,000 idle connections; 100,000 held locks (<= 64 MiB each)" },
    { "flight-storm", sc_flight_storm, "1,000 clients join one key: 1 execution, all get the result, fan-out p50/p99" },
    { "durable-commits", sc_durable_commits, "leader.commit, 32 clients: commits/s / Redis appendfsync-always SET/s (>= 1.2x); / fsyncs/s (info)" },
    { "durable-records", sc_durable_records, "flight.join+complete keep_ms, 32 clients: records/s / Redis appendfsync-always SET PX/s (>= 1.2x); / fsyncs/s (info)" },
    { "fanout", sc_fanout, "20 subscribers: delivered messages/s" },
    { "result-by-ref", sc_result_by_ref, "a 64 MiB sealed memfd to 100 followers: delivery, reads / local reads, broker VmHWM (<= 16 MiB growth)" },
    { "redis", sc_redis, "coord's lock cycle / Redis's (SET NX PX + EVALSHA): 1 client placed alike (>= 1.2x one CPU, >= 1x other CPU), 16 and 64 clients (>= 1.2x; / raw echo >= 0.9x)" },
    { "clients", sc_clients, "Node / Python clients' lock cycles/s vs ioredis / redis-py, one CPU and split (>= 1.2x)" },
};
#define NSCEN (int)(sizeof scenarios / sizeof scenarios[0])

static struct bench B;

static void usage(FILE *f)
{
    fprintf(f,
"usage: coord-bench [options] [SCENARIO...]\n"
"Measures coordd against a raw epoll echo baseline that coord-bench runs\n"
"itself (same client code, message size and client count), and prints each\n"
"figure as a ratio with its target.\n"
"  --broker PATH   coordd to start (default $COORD_BROKER, else the build's\n"
"                  %s)\n"
"  --socket PATH   use the broker already listening there (starts none)\n"
"  --quick         short run (~10 s) for smoke tests\n"
"  --scale F       multiply iterations and durations by F (default 1)\n"
"  --threads N     client threads for many-clients (default: 2)\n"
"  --json          one JSON document on stdout (progress on stderr with -v)\n"
"  --fail-on-miss  exit 1 when a figure misses its target\n"
"  --keep-tmp      keep the temp dir (broker log, data dir)\n"
"  --echo-thread   run the baseline echo server in a thread of coord-bench\n"
"                  (default: a forked child, a process like the broker)\n"
"  -v, --verbose   progress on stderr\n"
"  --list          list the scenarios\n"
"scenarios (default: all):\n", COORD_BENCH_BROKER);
    for (int i = 0; i < NSCEN; i++)
        fprintf(f, "  %-16s %s\n", scenarios[i].name, scenarios[i].what);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st; (void)flag; (void)ftw;
    remove(path);
    return 0;
}

static bool keep_tmp;

static void cleanup(void)
{
    redis_stop(&B);
    if (B.echo) {
        echo_stop(B.echo);
        B.echo = NULL;
    }
    broker_stop(&B);
    if (B.tmpdir[0] && !keep_tmp)
        nftw(B.tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    else if (B.tmpdir[0])
        fprintf(stderr, "coord-bench: kept %s\n", B.tmpdir);
    B.tmpdir[0] = '\0';
}

static void on_signal(int sig)
{
    if (B.own_broker && B.broker_pid > 0)
        kill(B.broker_pid, SIGKILL);
    signal(sig, SIG_DFL);
    raise(sig);
}

static int find_scenario(const char *name)
{
    for (int i = 0; i < NSCEN; i++)
        if (strcmp(scenarios[i].name, name) == 0)
            return i;
    return -1;
}

/* The size of the lock.acquire frame the scenarios send. */
static size_t acquire_frame_size(void)
{
    struct wconn w;
    wc_open(&w);
    char name[32];
    lock_name(name, sizeof name, "lc", 1);
    wq_acquire(&w, name, false);
    size_t n = w.out.len;
    wc_close(&w);
    return n;
}

int main(int argc, char **argv)
{
    enum { O_BROKER = 1, O_SOCKET, O_QUICK, O_SCALE, O_THREADS, O_JSON, O_FAIL,
           O_KEEP, O_LIST, O_HELP, O_ECHO_THREAD };
    static const struct option longopts[] = {
        { "broker", required_argument, NULL, O_BROKER },
        { "socket", required_argument, NULL, O_SOCKET },
        { "quick", no_argument, NULL, O_QUICK },
        { "scale", required_argument, NULL, O_SCALE },
        { "threads", required_argument, NULL, O_THREADS },
        { "json", no_argument, NULL, O_JSON },
        { "fail-on-miss", no_argument, NULL, O_FAIL },
        { "keep-tmp", no_argument, NULL, O_KEEP },
        { "echo-thread", no_argument, NULL, O_ECHO_THREAD },
        { "verbose", no_argument, NULL, 'v' },
        { "list", no_argument, NULL, O_LIST },
        { "help", no_argument, NULL, O_HELP },
        { NULL, 0, NULL, 0 },
    };
    const char *socket_arg = NULL;
    bool fail_on_miss = false;
    B.scale = 1.0;
    B.threads = 2;
    B.broker_path = getenv("COORD_BROKER");
    if (!B.broker_path || !*B.broker_path)
        B.broker_path = COORD_BENCH_BROKER;
    int ch;
    while ((ch = getopt_long(argc, argv, "vh", longopts, NULL)) != -1) {
        char *end;
        switch (ch) {
        case O_BROKER: B.broker_path = optarg; break;
        case O_SOCKET: socket_arg = optarg; break;
        case O_QUICK: B.quick = true; break;
        case O_SCALE:
            B.scale = strtod(optarg, &end);
            if (*end || !(B.scale > 0) || B.scale > 1000) {
                fprintf(stderr, "coord-bench: bad --scale: %s\n", optarg);
                return 2;
            }
            break;
        case O_THREADS:
            B.threads = (int)strtol(optarg, &end, 10);
            if (*end || B.threads < 1 || B.threads > 64) {
                fprintf(stderr, "coord-bench: bad --threads: %s\n", optarg);
                return 2;
            }
            break;
        case O_JSON: B.json = true; break;
        case O_FAIL: fail_on_miss = true; break;
        case O_KEEP: keep_tmp = true; break;
        case O_ECHO_THREAD: B.echo_thread = true; break;
        case 'v': B.verbose = true; break;
        case O_LIST:
            for (int i = 0; i < NSCEN; i++)
                printf("%-16s %s\n", scenarios[i].name, scenarios[i].what);
            return 0;
        case O_HELP: case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    bool selected[NSCEN];
    memset(selected, optind == argc, sizeof selected);
    for (int i = optind; i < argc; i++) {
        int k = find_scenario(argv[i]);
        if (k < 0) {
            fprintf(stderr, "coord-bench: unknown scenario '%s' (see --list)\n", argv[i]);
            return 2;
        }
        selected[k] = true;
    }

    signal(SIGPIPE, SIG_IGN);
    long nofile = raise_nofile();
    vlog(&B, "RLIMIT_NOFILE %ld", nofile);

    snprintf(B.tmpdir, sizeof B.tmpdir, "/tmp/coord-bench-XXXXXX");
    if (!mkdtemp(B.tmpdir)) {
        perror("coord-bench: mkdtemp");
        return 1;
    }
    atexit(cleanup);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);

    snprintf(B.echo_path, sizeof B.echo_path, "%s/echo.sock", B.tmpdir);
    int rc = echo_start(B.echo_path, !B.echo_thread, &B.echo);
    if (rc < 0) {
        fprintf(stderr, "coord-bench: echo server: %s\n", strerror(-rc));
        return 1;
    }

    /* the Redis peer, when installed and asked for */
    if ((selected[find_scenario("redis")] || selected[find_scenario("clients")]) &&
        redis_start(&B) < 0)
        fprintf(stderr, "coord-bench: redis-server did not start; its scenario is skipped\n");
    if ((selected[find_scenario("durable-commits")] ||
         selected[find_scenario("durable-records")]) && redis_start_aof(&B) < 0)
        fprintf(stderr, "coord-bench: redis-server (appendfsync always) did not start; "
                "the durable scenarios measure fsyncs only\n");

    if (socket_arg) {
        snprintf(B.socket_path, sizeof B.socket_path, "%s", socket_arg);
        struct wconn w;
        wc_open(&w);
        rc = wc_dial(&w, B.socket_path);
        if (rc != 0) {
            fprintf(stderr, "coord-bench: cannot use the broker at %s: %s\n",
                    B.socket_path, rc == COORD_ECONNECT ? strerror(errno) : code_name(rc));
            wc_close(&w);
            return 1;
        }
        B.broker_pid = peer_pid(w.fd);
        wc_close(&w);
    } else {
        if (broker_start(&B) < 0)
            return 1;
        vlog(&B, "started %s (pid %d) on %s", B.broker_path, (int)B.broker_pid,
             B.socket_path);
    }
    B.frame_size = acquire_frame_size();
    if (!B.json)
        printf("coord-bench: broker %s%s (pid %d), frame %zu B, %s run\n",
               B.own_broker ? B.broker_path : B.socket_path,
               B.own_broker ? "" : " (running)", (int)B.broker_pid, B.frame_size,
               B.quick ? "quick" : "full");

    struct result rs[NSCEN];
    int n = 0;
    uint64_t t0 = now_ns();
    for (int i = 0; i < NSCEN; i++) {
        if (!selected[i])
            continue;
        struct result *r = &rs[n++];
        memset(r, 0, sizeof *r);
        r->name = scenarios[i].name;
        r->status = SC_RAN;
        vlog(&B, "scenario %s", r->name);
        uint64_t s0 = now_ns();
        scenarios[i].fn(&B, r);
        r->seconds = (double)(now_ns() - s0) / 1e9;
        report_scenario(&B, r);
        if (B.own_broker && !broker_alive(&B)) {
            fprintf(stderr, "coord-bench: coordd is gone; restarting it\n");
            broker_restart(&B);
        }
    }
    int misses = report_final(&B, rs, n, (double)(now_ns() - t0) / 1e9);
    int errors = 0;
    for (int i = 0; i < n; i++)
        errors += rs[i].status == SC_ERROR;
    cleanup();
    if (errors)
        return 1;
    return fail_on_miss && misses ? 1 : 0;
}
