/* ops.h - the handler signature of every op, and the ops each table adds
 * to the dispatch table. */
#ifndef COORD_OPS_H
#define COORD_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "enc.h"
#include "msg.h"
#include "checks.h"               /* what every handler validates with */

struct conn;

/* Reads its fields from f, replies now or registers a pending request. */
typedef void (*op_fn)(struct conn *c, uint64_t rid, coord_fields *f);

/* X(op of COORD_OPS, handler) for the ops of the tables. */
#define TABLE_OPS(X) \
    X(LOCK_ACQUIRE, op_lock_acquire) \
    X(LOCK_RELEASE, op_lock_release) \
    X(LOCK_RENEW, op_lock_renew) \
    X(LOCK_QUERY, op_lock_query) \
    X(FLIGHT_JOIN, op_flight_join) \
    X(FLIGHT_COMPLETE, op_flight_complete) \
    X(FLIGHT_FAIL, op_flight_fail) \
    X(FLIGHT_LIST, op_flight_list) \
    X(FLIGHT_DISABLE, op_flight_disable) \
    X(FLIGHT_ENABLE, op_flight_enable) \
    X(FLIGHT_DISABLED, op_flight_disabled) \
    X(FLIGHT_UNREF, op_flight_unref) \
    X(RECORD_GET, op_record_get) \
    X(RECORD_LIST, op_record_list) \
    X(RECORD_PURGE, op_record_purge) \
    X(LEADER_CAMPAIGN, op_leader_campaign) \
    X(LEADER_RENEW, op_leader_renew) \
    X(LEADER_RESIGN, op_leader_resign) \
    X(LEADER_COMMIT, op_leader_commit) \
    X(LEADER_READ, op_leader_read) \
    X(LEADER_INFO, op_leader_info) \
    X(LEADER_DISABLE, op_leader_disable) \
    X(LEADER_ENABLE, op_leader_enable) \
    X(LEADER_DEFINE, op_leader_define) \
    X(BROKER_RELOAD, op_broker_reload) \
    X(LEADER_DESCRIBE, op_leader_describe) \
    X(LEADER_DRAIN, op_leader_drain) \
    X(LEADER_HISTORY, op_leader_history) \
    X(LEADER_CLAIM, op_leader_claim) \
    X(LEADER_ABANDON, op_leader_abandon) \
    X(LEADER_PENDING, op_leader_pending) \
    X(LEADER_CHECK, op_leader_check) \
    X(SUB_SUBSCRIBE, op_sub_subscribe) \
    X(SUB_UNSUBSCRIBE, op_sub_unsubscribe) \
    X(SUB_PUBLISH, op_sub_publish)

void op_lock_acquire(struct conn *c, uint64_t rid, coord_fields *f);
void op_lock_release(struct conn *c, uint64_t rid, coord_fields *f);
void op_lock_renew(struct conn *c, uint64_t rid, coord_fields *f);
void op_lock_query(struct conn *c, uint64_t rid, coord_fields *f);
void op_flight_join(struct conn *c, uint64_t rid, coord_fields *f);
void op_flight_unref(struct conn *c, uint64_t rid, coord_fields *f);
void op_flight_complete(struct conn *c, uint64_t rid, coord_fields *f);
void op_flight_fail(struct conn *c, uint64_t rid, coord_fields *f);
void op_flight_list(struct conn *c, uint64_t rid, coord_fields *f);
void op_flight_disable(struct conn *c, uint64_t rid, coord_fields *f);
void op_flight_enable(struct conn *c, uint64_t rid, coord_fields *f);
void op_flight_disabled(struct conn *c, uint64_t rid, coord_fields *f);
void op_record_get(struct conn *c, uint64_t rid, coord_fields *f);
void op_record_list(struct conn *c, uint64_t rid, coord_fields *f);
void op_record_purge(struct conn *c, uint64_t rid, coord_fields *f);
void op_leader_define(struct conn *c, uint64_t rid, coord_fields *f);
void op_broker_reload(struct conn *c, uint64_t rid, coord_fields *f);
void op_leader_describe(struct conn *c, uint64_t rid, coord_fields *f);
void op_leader_drain(struct conn *c, uint64_t rid, coord_fields *f);
void op_leader_history(struct conn *c, uint64_t rid, coord_fields *f);
void op_leader_claim(struct conn *c, uint64_t rid, coord_fields *f);
void op_leader_abandon(struct conn *c, uint64_t rid, coord_fields *f);
void op_leader_pending(struct conn *c, uint64_t rid, coord_fields *f);
void op_leader_check(struct conn *c, uint64_t rid, coord_fields *f);
void op_leader_campaign(struct conn *c, uint64_t rid, coord_fields *f);
void op_leader_renew(struct conn *c, uint64_t rid, coord_fields *f);
void op_leader_resign(struct conn *c, uint64_t rid, coord_fields *f);
void op_leader_commit(struct conn *c, uint64_t rid, coord_fields *f);
void op_leader_read(struct conn *c, uint64_t rid, coord_fields *f);
void op_leader_info(struct conn *c, uint64_t rid, coord_fields *f);
void op_leader_disable(struct conn *c, uint64_t rid, coord_fields *f);
void op_leader_enable(struct conn *c, uint64_t rid, coord_fields *f);
void op_sub_subscribe(struct conn *c, uint64_t rid, coord_fields *f);
void op_sub_unsubscribe(struct conn *c, uint64_t rid, coord_fields *f);
void op_sub_publish(struct conn *c, uint64_t rid, coord_fields *f);

#endif
