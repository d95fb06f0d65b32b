/* paths.c - default locations and the private-directory check. */
#include <errno.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "paths.h"

static int fits(int n, size_t size)
{
    return n >= 0 && (size_t)n < size ? 0 : -1;
}

static const char *env_nonempty(const char *name)
{
    const char *v = getenv(name);
    return v && v[0] ? v : NULL;
}

int coord_default_socket_path(char *out, size_t size)
{
    const char *v;
    if ((v = env_nonempty("COORD_SOCKET")))
        return fits(snprintf(out, size, "%s", v), size);
    if ((v = env_nonempty("XDG_RUNTIME_DIR")))
        return fits(snprintf(out, size, "%s/coord/broker.sock", v), size);
    return fits(snprintf(out, size, "/tmp/coord-%u/broker.sock",
                         (unsigned)getuid()), size);
}

int coord_default_data_dir(char *out, size_t size)
{
    const char *v;
    if ((v = env_nonempty("COORD_DATA_DIR")))
        return fits(snprintf(out, size, "%s", v), size);
    if ((v = env_nonempty("XDG_STATE_HOME")))
        return fits(snprintf(out, size, "%s/coord", v), size);
    const char *home = env_nonempty("HOME");
    if (!home) {
        struct passwd *pw = getpwuid(getuid());
        home = pw ? pw->pw_dir : "/";
    }
    return fits(snprintf(out, size, "%s/.local/state/coord", home), size);
}

int coord_default_config_dir(char *out, size_t size)
{
    const char *v;
    if ((v = env_nonempty("COORD_CONFIG_DIR")))
        return fits(snprintf(out, size, "%s", v), size);
    if ((v = env_nonempty("XDG_CONFIG_HOME")))
        return fits(snprintf(out, size, "%s/coord", v), size);
    const char *home = env_nonempty("HOME");
    if (!home) {
        struct passwd *pw = getpwuid(getuid());
        home = pw ? pw->pw_dir : "/";
    }
    return fits(snprintf(out, size, "%s/.config/coord", home), size);
}

int coord_dirname(const char *path, char *out, size_t size)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        return fits(snprintf(out, size, "."), size);
    size_t n = (size_t)(slash - path);
    if (n == 0)
        n = 1;                                  /* "/sock" -> "/" */
    if (n >= size)
        return -1;
    memcpy(out, path, n);
    out[n] = '\0';
    return 0;
}

/* mkdir -p with 0700 for what it creates. */
static int make_dirs(const char *dir)
{
    char tmp[4096];
    if (fits(snprintf(tmp, sizeof tmp, "%s", dir), sizeof tmp) < 0) {
        errno = ENAMETOOLONG;
        return -1;
    }
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(tmp, 0700) < 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    if (mkdir(tmp, 0700) < 0 && errno != EEXIST)
        return -1;
    return 0;
}

int coord_prepare_private_dir(const char *dir, char *err, size_t errsize)
{
    struct stat st;
    if (lstat(dir, &st) < 0) {
        if (errno != ENOENT || make_dirs(dir) < 0 || lstat(dir, &st) < 0) {
            snprintf(err, errsize, "cannot create %s: %s", dir, strerror(errno));
            return -1;
        }
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(err, errsize, "%s is not a directory", dir);
        return -1;
    }
    if (st.st_uid != getuid()) {
        snprintf(err, errsize, "%s is owned by uid %u, not by uid %u", dir,
                 (unsigned)st.st_uid, (unsigned)getuid());
        return -1;
    }
    if (st.st_mode & (S_IWGRP | S_IWOTH)) {
        snprintf(err, errsize, "%s is writable by group or others (mode %03o)",
                 dir, (unsigned)(st.st_mode & 0777));
        return -1;
    }
    return 0;
}

int coord_parse_lock_holder(const char *text, struct coord_lock_holder *h)
{
    const char *p = strstr(text, "pid=");
    const char *s = strstr(text, "\nsocket=");
    if (p != text || !s)
        return -1;
    const char *end = strchr(s + 8, '\n');
    if (!end || (size_t)(end - (s + 8)) >= sizeof h->socket)
        return -1;
    char *pe;
    long pid = strtol(text + 4, &pe, 10);
    if (pe != s || pid <= 0)
        return -1;
    h->pid = (pid_t)pid;
    memcpy(h->socket, s + 8, (size_t)(end - (s + 8)));
    h->socket[end - (s + 8)] = '\0';
    return 0;
}
