/* channel.c - channels, the BroadcastChannel of coord (libcoord).
 *
 * One connection subscribes to "settings" and to the broker's lifecycle
 * channel "-locks"; another publishes a message and takes a lock.  The
 * subscriber reads the events with coord_next_event: the message (never
 * echoed to its sender) and the lock's "granted" lifecycle event.
 *
 *     cc channel.c $(pkg-config --cflags --libs coord) -o channel && ./channel */
#include <stdio.h>
#include "coord.h"

int main(void)
{
    coord_t *sub, *pub;
    if (coord_connect(&sub, NULL) < 0 || coord_connect(&pub, NULL) < 0) {
        fprintf(stderr, "connect: %s\n", coord_error_message(NULL));
        return 1;
    }
    coord_subscribe(sub, "settings", 8);
    coord_subscribe(sub, "-locks", 6);

    uint64_t delivered = 0;
    coord_publish(pub, "settings", 8, "theme=dark", 10, &delivered);
    printf("published to %llu subscriber(s)\n", (unsigned long long)delivered);
    uint64_t lock;
    coord_lock_acquire(pub, "printer", 7, NULL, &lock, NULL);

    int seen = 0;
    coord_reply_t *ev;
    while (seen < 2 && coord_next_event(sub, 2000, &ev) == 0) {
        coord_message m;
        coord_lifecycle l;
        if (coord_event_message(ev, &m)) {
            printf("message on %.*s: %.*s\n", (int)m.channel_len, m.channel,
                   (int)m.data_len, (const char *)m.data);
            seen++;
        } else if (coord_event_lifecycle(ev, &l)) {
            const char *name;
            size_t nl;
            coord_map_str(coord_reply_map(ev), "name", &name, &nl);
            printf("lifecycle %.*s: %.*s %.*s\n", (int)l.channel_len, l.channel,
                   (int)l.what_len, l.what, (int)nl, name);
            seen++;
        }
        coord_reply_free(ev);
    }
    coord_unsubscribe(sub, "settings", 8);
    coord_close(pub);
    coord_close(sub);
    return seen == 2 ? 0 : 1;
}
