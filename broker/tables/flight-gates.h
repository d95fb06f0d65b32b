/* flight-gates.h - what keeps a join from the usual single-flight path:
 * the kill switch (disabled key prefixes of a scope, durable, announced on
 * -flights) and backoffs (a retryable failure with retry_after_ms: for
 * that long the key gets the failure at once instead of a new owner; in
 * memory only, a restart forgets them). */
#ifndef COORD_FLIGHT_GATES_H
#define COORD_FLIGHT_GATES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "conn.h"

/* Loads the disabled prefixes.  0, or -1 with err. */
int gates_init(struct broker *b, char *err, size_t errsize);
/* True when a disabled prefix of the scoped key's scope prefixes its name. */
bool gates_bypass(const uint8_t *skey, size_t sklen);

/* An active backoff of a key: what is left of it and the failure. */
struct backoff_view {
    uint64_t left_ms;
    const uint8_t *code, *message;     /* owned by the gate, valid until it ends */
    size_t code_len, message_len;
};
bool gates_backoff(const uint8_t *skey, size_t sklen, struct backoff_view *out);
/* Starts (or extends) a key's backoff; copies everything. */
void gates_backoff_start(const uint8_t *skey, size_t sklen, uint64_t ms,
                         const uint8_t *code, size_t code_len,
                         const uint8_t *message, size_t message_len);
/* record.purge: drops the backoffs (and the failures they hold) of the
 * scoped keys that start with the scoped prefix sprefix.  Returns how many
 * (a walk of the whole table: purges are rare). */
uint64_t gates_backoff_purge(const uint8_t *sprefix, size_t plen);
void gates_stats(coord_enc *e);

#endif
