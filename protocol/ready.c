/* ready.c - reading a starting broker's ready fd (ready.h). */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "paths.h"
#include "ready.h"

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* One whole line (NUL-terminated, newline removed): an answer, or -1. */
static int answer(const char *line, bool whole, int *exec_errno, char *reason, size_t cap)
{
    if (whole && strcmp(line, "ready") == 0)
        return COORD_READY_OK;
    if (line[0] == 'E' && line[1] >= '0' && line[1] <= '9') {
        if (exec_errno)
            *exec_errno = atoi(line + 1);
        return COORD_READY_EXEC;
    }
    if (strncmp(line, "error ", 6) == 0 && line[6]) {
        if (reason && cap)
            snprintf(reason, cap, "%s", line + 6);
        return COORD_READY_ERROR;
    }
    return -1;
}

enum coord_ready coord_ready_await(int fd, int timeout_ms, int *exec_errno,
                                   char *reason, size_t cap)
{
    char buf[COORD_READY_LINE_MAX + 1];
    size_t have = 0;
    int64_t deadline = timeout_ms < 0 ? -1 : mono_ms() + timeout_ms;
    for (;;) {
        int wait = -1;
        if (deadline >= 0) {
            int64_t left = deadline - mono_ms();
            if (left <= 0)
                return COORD_READY_TIMEOUT;
            wait = left > INT_MAX ? INT_MAX : (int)left;
        }
        struct pollfd pfd = { .fd = fd, .events = POLLIN };
        int n = poll(&pfd, 1, wait);
        if (n < 0 && errno == EINTR)
            continue;
        if (n == 0)
            return COORD_READY_TIMEOUT;
        ssize_t r = read(fd, buf + have, sizeof buf - 1 - have);
        if (r < 0 && errno == EINTR)
            continue;
        if (r > 0)
            have += (size_t)r;
        buf[have] = '\0';
        /* the whole lines so far, then what is left at EOF or when full */
        bool end = r <= 0 || have == sizeof buf - 1;
        char *line = buf, *nl;
        while ((nl = strchr(line, '\n')) || (end && *line && (nl = line + strlen(line)))) {
            bool whole = *nl == '\n';
            *nl = '\0';
            int a = answer(line, whole, exec_errno, reason, cap);
            if (a >= 0)
                return (enum coord_ready)a;
            line = whole ? nl + 1 : nl;          /* a line we do not know */
        }
        if (end)
            return COORD_READY_EOF;
        have -= (size_t)(line - buf);            /* keep the partial line */
        memmove(buf, line, have + 1);
    }
}
