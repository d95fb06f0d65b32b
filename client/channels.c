/* channels.c - libcoord's channel calls: sub.subscribe, sub.unsubscribe,
 * sub.publish, and reading message and lifecycle events.  Built on the
 * public request/reply calls of client.c. */
#include <stdlib.h>
#include <string.h>
#include "internal.h"

static int channel_call(coord_t *c, enum coord_op op, const void *channel, size_t len,
                        const void *data, size_t data_len, bool with_data,
                        coord_reply_t **reply)
{
    if (!c || (!channel && len) || (with_data && !data && data_len))
        return COORD_EINVAL;
    coord_req_t *r = coord__req_new(op);
    if (!r)
        return COORD_ENOMEM;
    coord_req_str(r, "channel", channel ? channel : "", len);
    if (with_data)
        coord_req_bin(r, "data", data ? data : "", data_len);
    return coord__call_free(c, r, reply);
}

COORD_API int coord_subscribe(coord_t *c, const void *channel, size_t len)
{
    return channel_call(c, COORD_OP_SUB_SUBSCRIBE, channel, len, NULL, 0, false, NULL);
}

COORD_API int coord_unsubscribe(coord_t *c, const void *channel, size_t len)
{
    return channel_call(c, COORD_OP_SUB_UNSUBSCRIBE, channel, len, NULL, 0, false, NULL);
}

COORD_API int coord_publish(coord_t *c, const void *channel, size_t len,
                            const void *data, size_t data_len, uint64_t *delivered)
{
    if (delivered)
        *delivered = 0;
    coord_reply_t *reply = NULL;
    int rc = channel_call(c, COORD_OP_SUB_PUBLISH, channel, len, data, data_len, true, &reply);
    if (rc < 0)
        return rc;
    if (delivered)
        coord_map_uint(coord_reply_map(reply), "delivered", delivered);
    coord_reply_free(reply);
    return 0;
}

COORD_API bool coord_event_message(const coord_reply_t *ev, coord_message *out)
{
    if (!coord__event_is(ev, COORD_EV_MESSAGE))
        return false;
    if (!out)
        return true;
    memset(out, 0, sizeof *out);
    coord_map m = coord_reply_map(ev);
    coord__map_bytes(m, "channel", &out->channel, &out->channel_len);
    const char *d;
    coord__map_bytes(m, "data", &d, &out->data_len);
    out->data = d;
    coord_map_uint(m, "conn", &out->conn);
    return true;
}

COORD_API bool coord_event_lifecycle(const coord_reply_t *ev, coord_lifecycle *out)
{
    if (!coord__event_is(ev, COORD_EV_LIFECYCLE))
        return false;
    if (!out)
        return true;
    memset(out, 0, sizeof *out);
    coord_map m = coord_reply_map(ev);
    coord__map_bytes(m, "channel", &out->channel, &out->channel_len);
    coord__map_bytes(m, "what", &out->what, &out->what_len);
    coord_map_uint(m, "at_ms", &out->at_ms);
    return true;
}
