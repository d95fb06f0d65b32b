/* checks.h - the checks every op handler makes of its request and the
 * replies it sends when one fails: fields, name and payload sizes (which
 * depend on the connection's max_frame), durations, per-connection limits,
 * lists cut to fit one frame.  Each replies itself on refusal. */
#ifndef COORD_BROKER_CHECKS_H
#define COORD_BROKER_CHECKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "enc.h"
#include "msg.h"

struct conn;

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

#endif
