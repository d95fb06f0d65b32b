/* ops.h - the handler signature of every op, and the ops each table adds
 * to the dispatch table. */
#ifndef COORD_OPS_H
#define COORD_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "enc.h"
#include "msg.h"

struct conn;

/* Reads its fields from f, replies now or registers a pending request. */
typedef void (*op_fn)(struct conn *c, uint64_t rid, coord_fields *f);

/* Replies BAD_REQUEST with f's text when a field was wrong. */
bool fields_ok(struct conn *c, uint64_t rid, coord_fields *f);
void printable_copy(char *out, size_t size, const uint8_t *p, size_t n);
/* The longest name (lock, key, channel, workstream) this broker takes:
 * LIMIT_NAME, less when max_frame is small (every event carrying it must
 * fit a frame). */
size_t name_limit(const struct conn *c);
/* Replies INVALID_OPTIONS "<field> longer than N bytes" when len is over
 * name_limit; returns whether it was within. */
bool name_size_ok(struct conn *c, uint64_t rid, const char *field, size_t len);
/* Replies INVALID_OPTIONS "<field> above <max> ms" when v is over max. */
bool duration_ok(struct conn *c, uint64_t rid, const char *field, uint64_t v, uint64_t max);
/* Replies LIMIT "too many <what> on this connection (limit N)". */
void reply_conn_limit(struct conn *c, uint64_t rid, const char *what, unsigned limit);
/* Bytes a result, value or message may have so that the reply carrying it
 * fits max_frame. */
size_t payload_limit(const struct conn *c);
/* A list entry was added to e: when the frame outgrew max_frame (less the
 * list's tail), it is removed again and true is returned (truncated). */
bool list_entry_overflows(const struct conn *c, coord_enc *e, const coord_enc_mark *m);

/* X(op name, handler) for the ops of the tables. */
#define TABLE_OPS(X) \
    X("lock.acquire", op_lock_acquire) \
    X("lock.release", op_lock_release) \
    X("lock.renew", op_lock_renew) \
    X("lock.query", op_lock_query) \
    X("flight.join", op_flight_join) \
    X("flight.complete", op_flight_complete) \
    X("flight.fail", op_flight_fail) \
    X("flight.list", op_flight_list) \
    X("record.get", op_record_get) \
    X("record.list", op_record_list) \
    X("record.purge", op_record_purge) \
    X("leader.campaign", op_leader_campaign) \
    X("leader.renew", op_leader_renew) \
    X("leader.resign", op_leader_resign) \
    X("leader.commit", op_leader_commit) \
    X("leader.read", op_leader_read) \
    X("leader.info", op_leader_info) \
    X("leader.disable", op_leader_disable) \
    X("leader.enable", op_leader_enable) \
    X("sub.subscribe", op_sub_subscribe) \
    X("sub.unsubscribe", op_sub_unsubscribe) \
    X("sub.publish", op_sub_publish)

void op_lock_acquire(struct conn *c, uint64_t rid, coord_fields *f);
void op_lock_release(struct conn *c, uint64_t rid, coord_fields *f);
void op_lock_renew(struct conn *c, uint64_t rid, coord_fields *f);
void op_lock_query(struct conn *c, uint64_t rid, coord_fields *f);
void op_flight_join(struct conn *c, uint64_t rid, coord_fields *f);
void op_flight_complete(struct conn *c, uint64_t rid, coord_fields *f);
void op_flight_fail(struct conn *c, uint64_t rid, coord_fields *f);
void op_flight_list(struct conn *c, uint64_t rid, coord_fields *f);
void op_record_get(struct conn *c, uint64_t rid, coord_fields *f);
void op_record_list(struct conn *c, uint64_t rid, coord_fields *f);
void op_record_purge(struct conn *c, uint64_t rid, coord_fields *f);
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
