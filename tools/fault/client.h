/* client.h - what the client roles of coord-fault share (client.c: the
 * connection, the blocking-call deadline, the slot's state; outbox.c: the
 * outbox leaders: claims, descriptors, rollout modes). */
#ifndef COORD_FAULT_CLIENT_H
#define COORD_FAULT_CLIENT_H

#include <stdbool.h>
#include <stdint.h>
#include "coord.h"
#include "fault.h"

#define EVRING 32

struct cl {
    int slot;
    struct slot *sl;
    struct rng r;
    coord_t *c;
    int provider;                   /* socket to the provider, or -1 */
    unsigned machine;               /* the broker it talks to (etcd mode: one of several) */
    char name[32];
    /* events seen on this connection */
    struct { unsigned ws; uint64_t gen; char reason[16]; } lost[EVRING];
    unsigned nlost;
    struct { uint64_t lock; char reason[16]; } lklost[EVRING];
    unsigned nlklost;
    struct { uint64_t flight; char reason[16]; } aborts[EVRING];
    unsigned naborts;
};

bool conn_err(int rc);
/* --etcd: a violation when a call sent while S->etcd_outage was o1 (odd:
 * etcd down) was acknowledged with the same outage still on */
void check_fail_open(struct cl *k, uint64_t o1, const char *what, const char *ws,
                     uint64_t gen);
/* the slot is in a blocking call (what: block_what_name's index) for at
 * most ms; the driver's watchdog reports it past that */
void block(struct cl *k, int what, uint64_t ms);
void unblock(struct cl *k);
void set_state(struct cl *k, int st, int target, uint64_t gen);
void finish(struct cl *k, int status) __attribute__((noreturn));
void drop_conn(struct cl *k);
/* a call failed: connection errors close the handle (the caller
 * reconnects), anything else not expected is a violation */
void call_failed(struct cl *k, const char *what, int rc);
void ensure_conn(struct cl *k);

/* outbox.c */
void outbox_round(struct cl *k);
void incident_run(struct cl *k);
void rollback_run(struct cl *k);

#endif
