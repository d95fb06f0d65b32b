/* lock.c - a lock with Web Locks semantics across processes (libcoord).
 *
 * Takes the exclusive lock "db-migrate" with a lease, shows that another
 * connection (another process, as far as the broker cares) can neither
 * take it at once nor within a timeout, renews the lease, releases it, and
 * lets the other one have it.  The fencing token goes with every write the
 * holder makes, so that the storage can refuse an older holder's.
 *
 *     cc lock.c $(pkg-config --cflags --libs coord) -o lock && ./lock */
#include <stdio.h>
#include <stdlib.h>
#include "coord.h"

static coord_t *connect_or_die(const char *name)
{
    coord_options o;
    coord_options_init(&o);
    o.client_name = name;
    coord_t *c;
    if (coord_connect(&c, &o) < 0) {           /* autostarts the broker */
        fprintf(stderr, "connect: %s\n", coord_error_message(NULL));
        exit(1);
    }
    return c;
}

int main(void)
{
    coord_t *a = connect_or_die("lock-a"), *b = connect_or_die("lock-b");
    uint64_t lock, token, lock_b, token_b;

    coord_lock_opts o = { .timeout_ms = 5000, .lease_ms = 30000 };
    int rc = coord_lock_acquire(a, "db-migrate", 10, &o, &lock, &token);
    if (rc != 0) {
        fprintf(stderr, "acquire: %s\n", coord_strerror(rc));
        return 1;
    }
    printf("a holds db-migrate, fencing token %llu\n", (unsigned long long)token);

    coord_lock_opts now = { .if_available = true };
    rc = coord_lock_acquire(b, "db-migrate", 10, &now, NULL, NULL);
    printf("b, if available: %s\n", rc == COORD_LOCK_BUSY ? "busy" : coord_strerror(rc));

    coord_lock_opts soon = { .timeout_ms = 100 };
    rc = coord_lock_acquire(b, "db-migrate", 10, &soon, NULL, NULL);
    printf("b, within 100 ms: %s\n", coord_strerror(rc));       /* timed out */

    coord_reply_t *q;
    if (coord_lock_query(a, &q) == 0) {        /* like navigator.locks.query() */
        coord_map m = coord_reply_map(q), e;
        for (size_t i = 0; coord_map_array_at(m, "held", i, &e); i++) {
            const char *name, *client;
            size_t nl, cl;
            coord_map_str(e, "name", &name, &nl);
            coord_map_str(e, "client", &client, &cl);
            printf("held: %.*s by %.*s\n", (int)nl, name, (int)cl, client);
        }
        coord_reply_free(q);
    }

    if (coord_lock_renew(a, lock, 30000) == 0)
        printf("a renewed its lease\n");
    coord_lock_release(a, lock);
    rc = coord_lock_acquire(b, "db-migrate", 10, &soon, &lock_b, &token_b);
    printf("b after the release: %s, token %llu (%s)\n", rc == 0 ? "granted" : coord_strerror(rc),
           (unsigned long long)token_b, token_b > token ? "higher" : "NOT HIGHER");
    coord_close(a);
    coord_close(b);                            /* closing releases b's lock */
    return rc == 0 && token_b > token ? 0 : 1;
}
