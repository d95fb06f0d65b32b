/* util.c - clocks, percentiles, progress text, limits, CPU placement. */
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include "bench.h"

uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

double ns_to_us(double ns)
{
    return ns / 1000.0;
}

void sleep_ms(unsigned ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) != 0)
        ;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Nearest-rank percentile after sorting. */
double percentile(double *v, size_t n, double p)
{
    if (n == 0)
        return NAN;
    qsort(v, n, sizeof *v, cmp_double);
    double rank = ceil(p / 100.0 * (double)n);
    size_t i = rank < 1 ? 0 : (size_t)rank - 1;
    if (i >= n)
        i = n - 1;
    return v[i];
}

double median3(double *v, size_t n)
{
    if (n == 0)
        return NAN;
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

void vlog(const struct bench *b, const char *fmt, ...)
{
    if (!b->verbose)
        return;
    va_list ap;
    va_start(ap, fmt);
    fputs("coord-bench: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

long raise_nofile(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
        return -1;
    if (rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
            getrlimit(RLIMIT_NOFILE, &rl);
    }
    return rl.rlim_cur == RLIM_INFINITY ? 1L << 30 : (long)rl.rlim_cur;
}

unsigned scaled(const struct bench *b, unsigned v, unsigned min)
{
    double x = (double)v * b->scale;
    if (x < min)
        return min;
    return (unsigned)x;
}

/* The CPU pid's main thread last ran on (field 39 of its stat), or -1. */
int last_cpu(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')');      /* past the command, which may hold spaces */
    int field = 2, cpu = -1;
    for (; p && *p && field < 39; p++)
        if (*p == ' ')
            field++;
    if (p && field == 39)
        cpu = atoi(p);
    return cpu;
}

/* Pins pid (0: this thread) to one CPU; *old receives its mask first. */
int pin(pid_t pid, int cpu, cpu_set_t *old)
{
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    if (old && sched_getaffinity(pid, sizeof *old, old) < 0)
        return -1;
    return sched_setaffinity(pid, sizeof one, &one);
}
