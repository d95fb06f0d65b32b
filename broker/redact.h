/* redact.h - names in the broker's log as keyed hashes.
 *
 * The log never holds a lock name, key, channel, workstream, scope, op id
 * or client text: each appears as 16 hex digits of HMAC-SHA-256 under a
 * random secret kept in the data dir (log.key, 0600), so one name hashes
 * the same across restarts and lines can be correlated, while the log
 * tells nothing to whoever reads it.  --log-names plain shows the bytes
 * instead (printable, for debugging). */
#ifndef COORD_REDACT_H
#define COORD_REDACT_H

#include <stdbool.h>
#include <stddef.h>

#define REDACT_SIZE 17                /* 16 hex digits and a NUL */
/* Plain text shown of a name, at most (longer is cut, "..." appended). */
#define REDACT_PLAIN_MAX 64

/* Loads (or creates) the secret in dir.  0, or -1 with err. */
int redact_init(const char *dir, bool plain, char *err, size_t errsize);
/* The name as the log shows it, in out (REDACT_PLAIN_MAX + 4 bytes at
 * least): its keyed hash, or its printable text with --log-names plain. */
const char *redact(const void *p, size_t n, char *out);
#define REDACT_BUF (REDACT_PLAIN_MAX + 4)

#endif
