/* flight.c - single-flight with a completion record (libcoord).
 *
 * coord_once runs the work in one caller per key; everyone else gets its
 * result.  With keep_ms the result is stored durably (LMDB) as a
 * completion record, so a later caller within max_age_ms gets it without
 * running the work again, even after a broker restart.
 *
 *     cc flight.c $(pkg-config --cflags --libs coord) -o flight && ./flight */
#define _POSIX_C_SOURCE 200809L   /* strdup */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "coord.h"

static int runs;

/* The expensive call: here, a token made up.  The result is malloc'd and
 * taken over by coord_once. */
static int refresh_token(void *ud, void **result, size_t *len, char **code, char **msg)
{
    (void)ud; (void)code; (void)msg;
    runs++;
    *result = strdup("token-abc");
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
    coord_record_purge(c, "oauth/", 6, NULL);            /* start clean */

    coord_flight_opts o = { .owner_ttl_ms = 10000, .max_age_ms = 60000 };
    coord_flight f;
    for (int i = 0; i < 2; i++) {
        int rc = coord_once(c, "oauth/alice", 11, &o, 60000, refresh_token, NULL, &f);
        if (rc < 0) {
            fprintf(stderr, "once: %s: %s\n", coord_strerror(rc), coord_error_message(c));
            return 1;
        }
        printf("call %d: %s from %s\n", i + 1, (char *)f.result,
               f.ran ? "our own run" : f.from_record ? "the completion record" : "the owner");
        coord_flight_clear(&f);
    }
    printf("work ran %d time(s)\n", runs);

    coord_record r;
    if (coord_record_get(c, "oauth/alice", 11, &r) == 0) {
        printf("record: %s, %zu bytes, expires in about %llu s\n",
               r.failed ? "failed" : "completed", r.result_len,
               (unsigned long long)((r.expires_ms - r.created_ms + 500) / 1000));
        coord_record_clear(&r);
    }
    coord_reply_t *list;
    if (coord_record_list(c, "oauth/", 6, 0, &list) == 0) {
        printf("records under oauth/: %zu\n",
               coord_map_array_len(coord_reply_map(list), "records"));
        coord_reply_free(list);
    }
    uint64_t deleted = 0;
    coord_record_purge(c, "oauth/", 6, &deleted);        /* logout */
    printf("purged %llu\n", (unsigned long long)deleted);
    coord_close(c);
    return runs == 1 ? 0 : 1;
}
