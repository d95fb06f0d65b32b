/* etcd-proc.c - see etcd-proc.h.
 *
 * Ports: bound to port 0 and released just before etcd takes them (a small
 * race with other processes on the machine; a failed start is reported,
 * never hidden).  Readiness: /v3/maintenance/status on every member names
 * a leader.  Members are killed at exit too (atexit), so a failed check
 * never leaves an etcd behind. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <curl/curl.h>
#include "etcd-proc.h"

/* Election timeout and heartbeat of the test clusters: leases down to
 * 3/2 x election = 750 ms are allowed (the tests use 1 s; etcd rounds its
 * minimum up to whole seconds).  COORD_ETCD_ELECTION_MS and
 * COORD_ETCD_HEARTBEAT_MS replace them, for measurements with other
 * settings (etcd's defaults: 1000 and 100, a 2 s minimum TTL). */
#define TEST_ELECTION_MS "500"
#define TEST_HEARTBEAT_MS "50"

static const char *env_or(const char *name, const char *dflt)
{
    const char *v = getenv(name);
    return v && *v ? v : dflt;
}
#define READY_MS 15000

static struct etcd_cluster *live[8];

static void kill_all(void)
{
    for (int i = 0; i < 8; i++) {
        if (!live[i])
            continue;
        for (int k = 0; k < live[i]->n; k++)
            if (live[i]->m[k].pid > 0) {
                kill(live[i]->m[k].pid, SIGCONT);
                kill(live[i]->m[k].pid, SIGKILL);
            }
    }
}

const char *etcd_binary(void)
{
    static char found[512];
    const char *env = getenv("COORD_ETCD");
    if (env && *env)
        return access(env, X_OK) == 0 ? env : NULL;
    const char *path = getenv("PATH");
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path ? path : "/usr/bin:/bin");
    for (char *save, *d = strtok_r(buf, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        snprintf(found, sizeof found, "%s/etcd", d);
        if (access(found, X_OK) == 0)
            return found;
    }
    return NULL;
}

void etcd_required(void)
{
    if (!etcd_binary()) {
        fprintf(stderr, "SKIP: etcd not installed (apt-get install etcd-server)\n");
        exit(77);
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t len = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) < 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) < 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    close(fd);
    return ntohs(a.sin_port);
}

static size_t collect(char *p, size_t size, size_t n, void *ud)
{
    char **buf = ud;
    size_t old = *buf ? strlen(*buf) : 0, add = size * n;
    char *grown = realloc(*buf, old + add + 1);
    if (!grown)
        return 0;
    memcpy(grown + old, p, add);
    grown[old + add] = 0;
    *buf = grown;
    return add;
}

char *etcd_http_post(const char *url, const char *path, const char *body, long timeout_ms)
{
    char full[256];
    snprintf(full, sizeof full, "%s%s", url, path);
    CURL *e = curl_easy_init();
    char *out = NULL;
    if (!e)
        return NULL;
    curl_easy_setopt(e, CURLOPT_URL, full);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, &out);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    long code = 0;
    if (curl_easy_perform(e) != CURLE_OK ||
        curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &code) != CURLE_OK || code != 200) {
        free(out);
        out = NULL;
    }
    curl_easy_cleanup(e);
    return out;
}

static void spawn(struct etcd_cluster *c, int i, bool fresh)
{
    struct etcd_member *m = &c->m[i];
    char peer[64], client[64], cluster[512] = "";
    snprintf(peer, sizeof peer, "http://127.0.0.1:%d", m->peer_port);
    snprintf(client, sizeof client, "http://127.0.0.1:%d", m->client_port);
    for (int k = 0; k < c->n; k++)
        snprintf(cluster + strlen(cluster), sizeof cluster - strlen(cluster),
                 "%s%s=http://127.0.0.1:%d", k ? "," : "", c->m[k].name, c->m[k].peer_port);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(m->log, O_WRONLY | O_CREAT | O_APPEND, 0600);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        int null = open("/dev/null", O_RDONLY);
        if (null >= 0)
            dup2(null, 0);
        setpgid(0, 0);
        execl(etcd_binary(), "etcd", "--name", m->name, "--data-dir", m->data,
              "--listen-client-urls", client, "--advertise-client-urls", client,
              "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
              "--initial-cluster", cluster, "--initial-cluster-token", c->dir,
              "--initial-cluster-state", fresh ? "new" : "existing",
              "--heartbeat-interval", env_or("COORD_ETCD_HEARTBEAT_MS", TEST_HEARTBEAT_MS),
              "--election-timeout", env_or("COORD_ETCD_ELECTION_MS", TEST_ELECTION_MS),
              "--log-level", "warn", (char *)NULL);
        _exit(127);
    }
    m->pid = pid;
}

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* every live member answers status and names a leader */
static int await_leader(struct etcd_cluster *c)
{
    uint64_t end = mono_ms() + READY_MS;
    while (mono_ms() < end) {
        int ok = 0, alive = 0;
        for (int i = 0; i < c->n; i++) {
            if (c->m[i].pid <= 0)
                continue;
            alive++;
            char *s = etcd_http_post(c->m[i].url, "/v3/maintenance/status", "{}", 500);
            if (s && strstr(s, "\"leader\":\""))
                ok++;
            free(s);
        }
        if (alive && ok == alive)
            return 0;
        struct timespec ts = { 0, 50 * 1000000 };
        nanosleep(&ts, NULL);   /* polling a server's readiness: no event to await */
    }
    fprintf(stderr, "etcd: no leader within %d ms (logs in %s)\n", READY_MS, c->dir);
    return -1;
}

int etcd_start(struct etcd_cluster *c, int n)
{
    memset(c, 0, sizeof *c);
    const char *tmp = getenv("TMPDIR");
    snprintf(c->dir, sizeof c->dir, "%s/coord-etcd-XXXXXX", tmp ? tmp : "/tmp");
    if (!mkdtemp(c->dir))
        return -1;
    c->n = n;
    for (int i = 0; i < n; i++) {
        struct etcd_member *m = &c->m[i];
        snprintf(m->name, sizeof m->name, "m%d", i);
        snprintf(m->data, sizeof m->data, "%s/%s.etcd", c->dir, m->name);
        snprintf(m->log, sizeof m->log, "%s/%s.log", c->dir, m->name);
        m->client_port = free_port();
        m->peer_port = free_port();
        if (m->client_port < 0 || m->peer_port < 0 || m->client_port == m->peer_port)
            return -1;
        snprintf(m->url, sizeof m->url, "http://127.0.0.1:%d", m->client_port);
        snprintf(c->endpoints + strlen(c->endpoints), sizeof c->endpoints - strlen(c->endpoints),
                 "%s%s", i ? "," : "", m->url);
    }
    for (int i = 0; i < 8; i++)
        if (!live[i]) {
            live[i] = c;
            break;
        }
    static bool registered;
    if (!registered) {
        atexit(kill_all);
        registered = true;
    }
    for (int i = 0; i < n; i++)
        spawn(c, i, true);
    return await_leader(c);
}

void etcd_signal(struct etcd_cluster *c, int i, int sig)
{
    struct etcd_member *m = &c->m[i];
    if (m->pid <= 0)
        return;
    kill(m->pid, sig);
    if (sig == SIGKILL || sig == SIGTERM) {
        waitpid(m->pid, NULL, 0);
        m->pid = -1;
    }
}

int etcd_restart(struct etcd_cluster *c, int i)
{
    spawn(c, i, false);
    return await_leader(c);
}

int etcd_leader(struct etcd_cluster *c)
{
    for (int i = 0; i < c->n; i++) {
        if (c->m[i].pid <= 0)
            continue;
        char *s = etcd_http_post(c->m[i].url, "/v3/maintenance/status", "{}", 1000);
        if (!s)
            continue;
        /* "member_id":"X" in the header, "leader":"Y": this member leads when X == Y */
        char *mid = strstr(s, "\"member_id\":\""), *lid = strstr(s, "\"leader\":\"");
        bool leads = false;
        if (mid && lid) {
            mid += 13;
            lid += 10;
            size_t n = strcspn(mid, "\"");
            leads = n == strcspn(lid, "\"") && strncmp(mid, lid, n) == 0;
        }
        free(s);
        if (leads)
            return i;
    }
    return -1;
}

void etcd_stop(struct etcd_cluster *c)
{
    for (int i = 0; i < c->n; i++) {
        if (c->m[i].pid > 0) {
            kill(c->m[i].pid, SIGCONT);
            etcd_signal(c, i, SIGKILL);
        }
    }
    for (int i = 0; i < 8; i++)
        if (live[i] == c)
            live[i] = NULL;
    if (!getenv("COORD_TEST_KEEP") && c->dir[0]) {
        char cmd[400];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", c->dir);
        if (system(cmd) != 0)
            fprintf(stderr, "etcd: cannot remove %s\n", c->dir);
    }
}
