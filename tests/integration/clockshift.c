/* clockshift.c - an LD_PRELOAD shim for test_storage's clock case: the
 * process reads CLOCK_REALTIME an hour ahead of the kernel's, which is
 * what a deadline taken just before the wall clock was stepped back an
 * hour looks like.  Every other clock passes through. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <time.h>

int clock_gettime(clockid_t id, struct timespec *ts)
{
    static int (*real)(clockid_t, struct timespec *);
    if (!real)
        real = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
    int rc = real(id, ts);
    if (rc == 0 && id == CLOCK_REALTIME)
        ts->tv_sec += 3600;
    return rc;
}
