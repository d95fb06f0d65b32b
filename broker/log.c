/* log.c - one line per event: time, level, event, key=value.
 *
 * Lines go to stderr.  A broker that is not in the foreground, or whose
 * stderr is /dev/null (libcoord's autostart), logs to coordd.log in its
 * data dir instead: that file becomes fd 2, so what the C runtime or a
 * sanitizer prints lands there too.  Past LOG_FILE_MAX it is renamed to
 * coordd.log.1 (replacing the older one) and a new one is started, so the
 * two never hold much more than twice that.  Both the loop thread and the
 * ledger writer log: a mutex keeps rotation and writes in order. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "clock.h"
#include "log.h"

/* Enough for days of ordinary events and for the story of a failure;
 * small enough never to matter on the user's disk. */
#define LOG_FILE_MAX (1u << 20)

int log_min_level = LOG_INFO;

static const char *level_names[] = { "debug", "info", "warn", "error" };

static struct {
    pthread_mutex_t mu;
    char *path;                    /* NULL: plain stderr */
} L = { PTHREAD_MUTEX_INITIALIZER, NULL };

int log_parse_level(const char *s)
{
    for (int i = 0; i < 4; i++)
        if (strcmp(s, level_names[i]) == 0)
            return i;
    return -1;
}

bool log_stderr_is_null(void)
{
    struct stat e, n;
    if (fstat(2, &e) < 0)
        return true;                       /* closed */
    return stat("/dev/null", &n) == 0 && S_ISCHR(e.st_mode) && e.st_rdev == n.st_rdev;
}

/* Opens path as fd 2.  Only a regular file: a symlink there is not
 * followed (O_NOFOLLOW: ELOOP), and a FIFO or device is refused without
 * blocking the start (O_NONBLOCK, then the type is checked).  Under L.mu
 * (or before any thread). */
static int reopen(const char *path)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK,
                  0600);
    if (fd < 0)
        return -1;
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        errno = EINVAL;
        return -1;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0)
        fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    if (fd != 2) {
        int rc = dup2(fd, 2);      /* the new fd 2 has no CLOEXEC */
        close(fd);
        if (rc < 0)
            return -1;
    }
    return 0;
}

/* Starts the next file once this one is full.  Under L.mu. */
static void rotate_if_full(size_t adding)
{
    struct stat st;
    if (!L.path || fstat(2, &st) < 0 || (size_t)st.st_size + adding <= LOG_FILE_MAX)
        return;
    char old[4200];
    snprintf(old, sizeof old, "%s.1", L.path);
    if (rename(L.path, old) == 0)
        reopen(L.path);
    /* when the rename fails, go on appending: losing lines is worse */
}

int log_to_file(const char *path, char *err, size_t errsize)
{
    pthread_mutex_lock(&L.mu);
    free(L.path);
    L.path = strdup(path);
    int rc = L.path ? reopen(path) : -1;
    if (rc < 0) {
        snprintf(err, errsize, "cannot open %s: %s", path,
                 errno == EINVAL ? "not a regular file"
                 : errno == ELOOP ? "a symbolic link (not followed)" : strerror(errno));
        free(L.path);
        L.path = NULL;
    } else {
        rotate_if_full(0);
    }
    pthread_mutex_unlock(&L.mu);
    return rc;
}

bool log_rate_pass(struct log_rate *r, uint64_t n, uint64_t *suppressed)
{
    uint64_t now = mono_ms();
    if (r->next_ms && now < r->next_ms) {
        r->suppressed += n;
        return false;
    }
    *suppressed = r->suppressed;
    r->suppressed = 0;
    r->next_ms = now + LOG_RATE_INTERVAL_MS;
    return true;
}

void log_event(int level, const char *event, const char *fmt, ...)
{
    if (level < log_min_level)
        return;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char line[1024];
    int n = snprintf(line, sizeof line,
                     "ts=%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ level=%s event=%s",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                     tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000,
                     level_names[level], event);
    if (fmt && fmt[0] && n > 0 && (size_t)n < sizeof line - 2) {
        line[n++] = ' ';
        va_list ap;
        va_start(ap, fmt);
        int m = vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
        va_end(ap);
        if (m > 0)
            n += m;
    }
    if (n < 0)
        return;
    if ((size_t)n > sizeof line - 2)
        n = sizeof line - 2;
    line[n++] = '\n';
    /* one write per line, so lines of concurrent processes don't mix */
    pthread_mutex_lock(&L.mu);
    rotate_if_full((size_t)n);
    ssize_t w = write(2, line, (size_t)n);
    pthread_mutex_unlock(&L.mu);
    (void)w;
}
