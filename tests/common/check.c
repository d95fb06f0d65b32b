/* check.c - the counters and the failure line of check.h, one copy per
 * test program. */
#include <stdarg.h>
#include "check.h"

int check_failures;
int check_count;

void check_fail_at(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    check_failures++;
    fprintf(stderr, "%s:%d: CHECK failed: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

int check_report(const char *name)
{
    if (check_failures) {
        fprintf(stderr, "%s: %d of %d checks FAILED\n", name, check_failures,
                check_count);
        return 1;
    }
    printf("%s: all %d checks passed\n", name, check_count);
    return 0;
}
