/* leader-internal.h - what libcoord's leadership files share (leader.c,
 * leader-term.c, leader-desc.c, leader-outbox.c): the request on a
 * workstream, the campaign's request and reply, and copying reply strings
 * into the fixed arrays of the public structs, the error for a reply
 * lacking a field.  Not installed. */
#ifndef COORD_CLIENT_LEADER_INTERNAL_H
#define COORD_CLIENT_LEADER_INTERNAL_H

#include "internal.h"

/* A request for op on workstream ws (the bytes are copied); NULL when out
 * of memory.  The caller owns it. */
coord_req_t *coord__ws_req(enum coord_op op, const void *ws, size_t ws_len);
/* ws_req plus the generation. */
coord_req_t *coord__ws_gen_req(enum coord_op op, const void *ws, size_t ws_len,
                               uint64_t generation);

/* leader.campaign's request with o's fields (o may be NULL); NULL when out
 * of memory. */
coord_req_t *coord__campaign_req(const void *ws, size_t ws_len,
                                 const coord_leader_opts *o);
/* Reads a campaign's ok reply into *t (LEADER, or FOLLOWER when not
 * granted): 0, or COORD_EPROTOCOL (c's error message set when c is not
 * NULL) for a reply without granted/generation. */
int coord__campaign_reply(coord_t *c, const coord_reply_t *reply, coord_leader_term *t);

/* For an ok reply without its required field key: frees reply, sets c's
 * error ("OP: reply without KEY") and returns COORD_EPROTOCOL. */
int coord__reply_lacks(coord_t *c, coord_reply_t *reply, enum coord_op op, const char *key);

/* The str field key of m copied into dst[size] (NUL-terminated; "" when
 * absent or nil).  False when it does not fit (dst then holds ""). */
bool coord__map_strcpy(coord_map m, const char *key, char *dst, size_t size);
/* p[0..n) into dst[size], cut to fit, NUL-terminated. */
void coord__strcpy_cut(char *dst, size_t size, const char *p, size_t n);

#endif
