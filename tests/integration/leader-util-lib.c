/* leader-util-lib.c - leader-util.h's libcoord part (lib_connect), in an
 * object of its own: only the tests that call it (and link libcoord) pull
 * it out of the harness library. */
#include <stdio.h>
#include <stdlib.h>
#include "coord.h"
#include "leader-util.h"

struct coord *lib_connect(const struct broker_proc *bp, const char *scope,
                          const char *client_name)
{
    coord_options o;
    coord_options_init(&o);
    o.socket_path = bp->sock;
    o.no_autostart = true;
    o.scope = scope;
    o.client_name = client_name;
    coord_t *c = NULL;
    int rc = coord_connect(&c, &o);
    if (rc < 0) {
        fprintf(stderr, "coord_connect: %s: %s\n", coord_strerror(rc),
                coord_error_message(NULL));
        exit(2);
    }
    return c;
}
