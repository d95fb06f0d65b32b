/* checks.c - the checks op handlers make of a request (checks.h). */
#include <stdio.h>
#include "broker.h"
#include "checks.h"
#include "coord-limits.h"
#include "errors.h"

bool fields_ok(struct conn *c, uint64_t rid, coord_fields *f)
{
    if (!f->failed)
        return true;
    c->b->stats.bad_requests++;
    conn_reply_error(c, rid, COORD_EBAD_REQUEST, f->err);
    return false;
}

/* For messages: keep printable ASCII, show the rest as '?'. */
void printable_copy(char *out, size_t size, const uint8_t *p, size_t n)
{
    size_t i = 0;
    for (; i < n && i + 1 < size; i++)
        out[i] = (p[i] >= 0x20 && p[i] < 0x7f) ? (char)p[i] : '?';
    if (size)
        out[i] = '\0';
}

size_t name_limit(const struct conn *c)
{
    size_t room = c->b->opt.max_frame - LIMIT_REPLY_OVERHEAD;
    return room < LIMIT_NAME ? room : LIMIT_NAME;
}

bool name_size_ok(struct conn *c, uint64_t rid, const char *field, size_t len)
{
    if (len <= name_limit(c))
        return true;
    char msg[96];
    snprintf(msg, sizeof msg, "%s longer than %zu bytes", field, name_limit(c));
    conn_reply_error(c, rid, COORD_EINVALID_OPTIONS, msg);
    return false;
}

bool duration_ok(struct conn *c, uint64_t rid, const char *field, uint64_t v, uint64_t max)
{
    if (v <= max)
        return true;
    char msg[96];
    snprintf(msg, sizeof msg, "%s above %llu ms", field, (unsigned long long)max);
    conn_reply_error(c, rid, COORD_EINVALID_OPTIONS, msg);
    return false;
}

void reply_conn_limit(struct conn *c, uint64_t rid, const char *what, unsigned limit)
{
    char msg[96];
    snprintf(msg, sizeof msg, "too many %s on this connection (limit %u)", what, limit);
    conn_reply_error(c, rid, COORD_ELIMIT, msg);
}

size_t payload_limit(const struct conn *c)
{
    return c->b->opt.max_frame - LIMIT_REPLY_OVERHEAD;
}

bool list_entry_overflows(const struct conn *c, coord_enc *e, const coord_enc_mark *m)
{
    if (coord_enc_size(e) <= COORD_FRAME_HEADER + c->b->opt.max_frame - LIMIT_LIST_TAIL)
        return false;
    coord_enc_rollback(e, m);
    return true;
}
