/* sc-clients.c - clients: the Node and Python clients against what their
 * users would pick instead, in the same run, against this run's coordd and
 * redis-server: Node's locks.request against ioredis (SET NX PX + the
 * compare-and-delete script), Python's blocking `with c.lock()` against
 * redis-py's Lock and its asyncio form against redis.asyncio's.  The
 * measuring is the clients' own scripts (client/node/bench/vs-ioredis.js,
 * client/python/bench_vs_redis.py), spawned with --coord/--redis; each
 * alternates rounds between the two sides and prints the median of the
 * per-round ratios as its last JSON line(s), read here.
 *
 * Two placements, as lock-cycle's (waking a sleeping vCPU costs tens of
 * microseconds, as much as either side): the client and both servers on
 * CPU 0 ("one CPU"), then the client on CPU 0 and the servers on CPU 1
 * ("servers on the other CPU"), every thread of each server; their masks
 * are put back after.
 * Skipped without redis-server, node with client/node's node_modules
 * (ioredis, a devDependency), or Debian's python3-redis. */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "bench.h"

#ifndef COORD_SOURCE_ROOT
#define COORD_SOURCE_ROOT "."
#endif
#define PYTHON "/usr/bin/python3"

struct side {
    const char *lang;            /* the script's "lang" */
    const char *what;
    const char *peer;
    bool got;
    double coord, peer_rate, ratio, min, max;
};

/* The number after "key": in a JSON line, or NAN. */
static double json_num(const char *line, const char *key)
{
    char pat[48];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(line, pat);
    if (!p)
        return NAN;
    p += strlen(pat);
    while (*p == ' ')
        p++;
    char *end;
    double v = strtod(p, &end);
    return end == p ? NAN : v;
}

/* Runs cmd (sh -c), keeps the JSON lines' figures for the sides named in
 * them: 0, or -1 when it failed (its output's last line in why). */
static int run_script(const char *cmd, struct side *sides, int n, char *why, size_t whylen)
{
    FILE *f = popen(cmd, "r");
    if (!f) {
        snprintf(why, whylen, "%s", strerror(errno));
        return -1;
    }
    char line[2048];
    why[0] = '\0';
    while (fgets(line, sizeof line, f)) {
        if (line[0] != '{') {
            snprintf(why, whylen, "%.*s", (int)strcspn(line, "\n"), line);
            continue;
        }
        for (int i = 0; i < n; i++) {
            char pat[48];
            snprintf(pat, sizeof pat, "\"%s\"", sides[i].lang);
            if (!strstr(line, pat))
                continue;
            sides[i].coord = json_num(line, "coord");
            sides[i].peer_rate = json_num(line, "peer");
            sides[i].ratio = json_num(line, "ratio");
            sides[i].min = json_num(line, "min");
            sides[i].max = json_num(line, "max");
            sides[i].got = sides[i].ratio == sides[i].ratio;
        }
    }
    int st = pclose(f);
    return st == 0 ? 0 : -1;
}

/* Every thread of a server (/proc/PID/task), its mask saved first. */
#define MAX_TIDS 16
struct pinned {
    int n;
    pid_t tid[MAX_TIDS];
    cpu_set_t mask[MAX_TIDS];
};

static int pin_all(pid_t pid, int cpu, struct pinned *save)
{
    char dir[64];
    snprintf(dir, sizeof dir, "/proc/%d/task", (int)pid);
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    struct dirent *e;
    int rc = 0;
    while ((e = readdir(d)) != NULL) {
        pid_t tid = (pid_t)atoi(e->d_name);
        if (tid <= 0)
            continue;
        if (save && save->n < MAX_TIDS &&
            sched_getaffinity(tid, sizeof save->mask[0], &save->mask[save->n]) == 0)
            save->tid[save->n++] = tid;
        if (sched_setaffinity(tid, sizeof one, &one) < 0)
            rc = -1;
    }
    closedir(d);
    return rc;
}

static void unpin_all(struct pinned *save)
{
    for (int i = 0; i < save->n; i++)
        sched_setaffinity(save->tid[i], sizeof save->mask[i], &save->mask[i]);
    save->n = 0;
}

void sc_clients(struct bench *b, struct result *r)
{
    char path[512];
    if (!redis_up(b)) {
        res_skip(r, "redis-server is not installed (apt-get install redis-server)");
        return;
    }
    snprintf(path, sizeof path, "%s/client/node/node_modules/ioredis", COORD_SOURCE_ROOT);
    bool node = access(path, F_OK) == 0 && system("node --version >/dev/null 2>&1") == 0;
    bool py = system(PYTHON " -c 'import redis' >/dev/null 2>&1") == 0;
    if (!node && !py) {
        res_skip(r, "neither node with ioredis (npm ci in client/node) nor python3-redis");
        return;
    }
    double secs = b->quick ? 0.5 : 1.0;
    secs *= b->scale;
    if (secs < 0.05)
        secs = 0.05;
    unsigned rounds = b->quick || b->scale < 1 ? 2 : 6;
    unsigned warm = scaled(b, 2000, 50);
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    pid_t pids[2] = { b->broker_pid, redis_server_pid() };
    struct pinned saved[2] = { { 0 }, { 0 } };
    bool pinnable = ncpu >= 2 && b->own_broker && pids[0] > 0 && pids[1] > 0;
    res_title(r, "Node locks.request vs ioredis (SET NX PX + EVALSHA), Python with c.lock() "
              "vs redis-py Lock, asyncio vs redis.asyncio Lock: cycles/s ratio, median of "
              "%u alternating rounds of %.2f s; %s", rounds, secs,
              pinnable ? "client and servers on CPU 0, then servers on CPU 1"
                       : "unpinned (one CPU, or a broker not ours)");
    static const struct { const char *key, *label; int client_cpu, server_cpu; } pl[] = {
        { "one CPU", "one CPU", 0, 0 },
        { "servers on the other CPU", "servers other CPU", 0, 1 },
    };
    int nplace = pinnable ? 2 : 1;
    char why[256] = "";
    int failed = 0;
    for (int k = 0; k < nplace; k++) {
        char taskset[32] = "";
        if (pinnable) {
            /* all their threads (coordd's store writer, redis's bio
             * threads), the masks saved the first time */
            if (pin_all(pids[0], pl[k].server_cpu, k ? NULL : &saved[0]) < 0 ||
                pin_all(pids[1], pl[k].server_cpu, k ? NULL : &saved[1]) < 0)
                break;
            snprintf(taskset, sizeof taskset, "taskset -c %d ", pl[k].client_cpu);
        }
        struct side sides[3] = {
            { "node", "Node locks.request cycles/s", "ioredis cycles/s", false, 0, 0, 0, 0, 0 },
            { "python-sync", "Python with c.lock() cycles/s", "redis-py Lock cycles/s",
              false, 0, 0, 0, 0, 0 },
            { "python-asyncio", "Python asyncio c.lock() cycles/s", "redis.asyncio Lock cycles/s",
              false, 0, 0, 0, 0, 0 },
        };
        char cmd[2048];
        if (node) {
            snprintf(cmd, sizeof cmd, "cd '%s/client/node' && %snode bench/vs-ioredis.js "
                     "--seconds %.3f --rounds %u --warmup %u --coord '%s' --redis '%s' 2>&1",
                     COORD_SOURCE_ROOT, taskset, secs, rounds, warm, b->socket_path,
                     b->redis_path);
            vlog(b, "clients: %s", cmd);
            if (run_script(cmd, sides, 1, why, sizeof why) < 0)
                failed++;
        }
        if (py) {
            snprintf(cmd, sizeof cmd, "%s" PYTHON " '%s/client/python/bench_vs_redis.py' "
                     "--seconds %.3f --rounds %u --warmup %u --coord '%s' --redis '%s' 2>&1",
                     taskset, COORD_SOURCE_ROOT, secs, rounds, warm, b->socket_path,
                     b->redis_path);
            vlog(b, "clients: %s", cmd);
            if (run_script(cmd, sides + 1, 2, why, sizeof why) < 0)
                failed++;
        }
        for (int i = 0; i < 3; i++) {
            if (!sides[i].got)
                continue;
            char key[48], what[96], bwhat[64];
            snprintf(key, sizeof key, "%s %s", sides[i].lang, pinnable ? pl[k].label : "unpinned");
            snprintf(what, sizeof what, "%s (%s)", sides[i].what,
                     pinnable ? pl[k].key : "unpinned");
            snprintf(bwhat, sizeof bwhat, "%s", sides[i].peer);
            struct figure *fg = res_ratio(r, key, what, sides[i].coord, bwhat,
                                          sides[i].peer_rate, "/s", false, CMP_GE, 1.2);
            if (fg) {
                fg->value = sides[i].ratio;    /* the median of the rounds' ratios */
                fg->verdict = fg->value >= 1.2 ? V_PASS : V_MISS;
            }
            snprintf(key, sizeof key, "%s %s lowest round", sides[i].lang,
                     pinnable ? pl[k].label : "unpinned");
            res_info(r, key, sides[i].min, "x");
        }
    }
    unpin_all(&saved[0]);
    unpin_all(&saved[1]);
    if (failed)
        res_error(r, "a client's bench failed: %s", why[0] ? why : "(no output)");
}
