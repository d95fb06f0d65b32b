/* hello.c - the install test's program: built with the flags of the
 * installed libcoord.pc only, it connects to a broker (COORD_SOCKET) and runs
 * a flight; prints "flight: hello from libcoord (ran here)". */
#define _POSIX_C_SOURCE 200809L   /* strdup */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <coord.h>

static int work(void *ud, void **result, size_t *len, char **code, char **msg)
{
    (void)ud; (void)code; (void)msg;
    *result = strdup("hello from libcoord");
    *len = strlen(*result);
    return COORD_WORK_OK;
}

int main(void)
{
    coord_t *c;
    if (coord_connect(&c, NULL) < 0) {
        fprintf(stderr, "connect: %s\n", coord_error_message(NULL));
        return 1;
    }
    coord_flight f;
    int rc = coord_once(c, "install-test", 12, NULL, 0, work, NULL, &f);
    if (rc < 0) {
        fprintf(stderr, "once: %s\n", coord_strerror(rc));
        return 1;
    }
    printf("connected to coordd %s\n", coord_broker_version(c));
    printf("flight: %s (%s)\n", (char *)f.result, f.ran ? "ran here" : "shared");
    coord_flight_clear(&f);
    coord_close(c);
    return 0;
}
