/* breaks.c - see breaks.h (only in coordd-broken). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "breaks.h"

unsigned coord_breaks;

int breaks_init(char *err, size_t errsize)
{
    static const char *const names[] = {
#define BREAK_NAME(id, name) name,
        COORD_BREAK_NAMES(BREAK_NAME)
#undef BREAK_NAME
    };
    const char *want = getenv("COORD_TEST_BREAK");
    if (!want || !*want)
        return 0;
    for (unsigned i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (strcmp(names[i], want) == 0) {
            coord_breaks |= 1u << i;
            fprintf(stderr, "coordd-broken: %s is broken on purpose\n", want);
            return 0;
        }
    }
    snprintf(err, errsize, "COORD_TEST_BREAK=%s: no such break", want);
    return -1;
}
