/* etcd-proc.h - real etcd servers for the tests of the etcd ledger:
 * Debian's etcd-server (3.4) started on free loopback ports in a temp dir,
 * one member or a cluster of three, with a short election timeout so that
 * one-second leases are allowed.  A test that cannot find etcd skips
 * (etcd_required exits 77, meson's SKIP). */
#ifndef COORD_TEST_ETCD_PROC_H
#define COORD_TEST_ETCD_PROC_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define ETCD_MEMBERS_MAX 3

struct etcd_member {
    pid_t pid;
    char name[16];
    char data[300];
    char log[300];
    int client_port, peer_port;
    char url[64];                  /* http://127.0.0.1:client_port */
};

struct etcd_cluster {
    char dir[256];
    int n;
    struct etcd_member m[ETCD_MEMBERS_MAX];
    char endpoints[256];           /* every member's url, comma-separated */
};

/* The etcd binary ($COORD_ETCD, else etcd on PATH), or NULL. */
const char *etcd_binary(void);
/* Exits 77 (SKIP) with a line on stderr when etcd is not installed. */
void etcd_required(void);
/* Starts n (1 or 3) members in a fresh temp dir and waits until the
 * cluster has a leader.  0, or -1 (logs kept in the dir). */
int etcd_start(struct etcd_cluster *c, int n);
/* Kills member i with sig and reaps it (SIGKILL, SIGSTOP also work:
 * SIGSTOP is not reaped). */
void etcd_signal(struct etcd_cluster *c, int i, int sig);
/* Starts member i again on its data dir and ports; waits for a leader. */
int etcd_restart(struct etcd_cluster *c, int i);
/* The index of the member that is the raft leader, or -1. */
int etcd_leader(struct etcd_cluster *c);
/* Kills every member and removes the dir. */
void etcd_stop(struct etcd_cluster *c);

/* One POST of a JSON body to url+path; the answer (malloc'd, NUL
 * terminated) or NULL. */
char *etcd_http_post(const char *url, const char *path, const char *body, long timeout_ms);

#endif
