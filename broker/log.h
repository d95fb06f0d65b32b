/* log.h - the broker's log: one line per event, `event key=value ...`,
 * levels, a size-capped file, rate-limited kinds of lines.  Knows nothing
 * of connections: anything may log. */
#ifndef COORD_BROKER_LOG_H
#define COORD_BROKER_LOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One kind of rate-limited log line (log_rate_pass, log.c). */
struct log_rate { uint64_t next_ms; uint64_t suppressed; };

enum log_level { LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR };
extern int log_min_level;
int log_parse_level(const char *s);
void log_event(int level, const char *event, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Makes path (size-capped, rotated to path.1) the log and fd 2.  0 or -1
 * with err. */
int log_to_file(const char *path, char *err, size_t errsize);
/* True when fd 2 is /dev/null or closed: nobody would read the log. */
bool log_stderr_is_null(void);
/* At most one line per LOG_RATE_INTERVAL_MS for one kind of event: true
 * when this one (n occurrences) may be logged, with *suppressed set to
 * those not logged since the last line.  One thread per log_rate. */
#define LOG_RATE_INTERVAL_MS 1000
bool log_rate_pass(struct log_rate *r, uint64_t n, uint64_t *suppressed);

#endif
