/* ctl-doctor.c - coordctl doctor: checks what a user gets wrong when coord
 * does not work, one line per check, and says what to do.  In order:
 *   home        $HOME exists (the default data dir lives under it)
 *   socket dir  the socket's directory is ours and private, or creatable
 *   data dir    the same for the data dir (the ledger, the log)
 *   broker      is one answering on the socket?  its version beside ours
 *   data lock   which broker holds the data dir (DATA_DIR/coordd.lock):
 *               the one on our socket, none, or another one (a second
 *               broker on another socket: its socket is named)
 *   log         coordd.log is a regular file, and the last start failure
 *               it recorded, if any
 *   coordd      the binary autostart would run, and its version
 *   ledger      the leader ledger the broker runs, and whether it answers
 * Nothing is changed and no broker is started.  Exit 0 when nothing
 * failed (warnings allowed), 1 otherwise; --json prints {"checks":
 * [{"check","status","detail","fix"}], "ok"} instead. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "coord-version.h"
#include "coordctl.h"
#include "paths.h"

/* The tail of coordd.log read for its last start failure. */
#define DOCTOR_LOG_TAIL 16384

enum status { ST_OK, ST_WARN, ST_FAIL, ST_INFO };
static const char *const status_word[] = { "ok", "warn", "FAIL", "info" };

struct doctor {
    struct ctl *ctl;
    int fails;
    char *json;                 /* the checks so far, as JSON objects */
    size_t jn;
};

/* s as a JSON string body (quotes, backslashes and control bytes
 * escaped) appended to d->json. */
static void json_str(struct doctor *d, const char *s)
{
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        char tmp[8];
        const char *out = tmp;
        if (ch == '"' || ch == '\\')
            snprintf(tmp, sizeof tmp, "\\%c", ch);
        else if (ch < 0x20)
            snprintf(tmp, sizeof tmp, "\\u%04x", ch);
        else
            tmp[0] = (char)ch, tmp[1] = '\0';
        size_t n = strlen(out);
        char *p = realloc(d->json, d->jn + n + 1);
        if (!p)
            return;
        d->json = p;
        memcpy(d->json + d->jn, out, n + 1);
        d->jn += n;
    }
}

static void json_raw(struct doctor *d, const char *s)
{
    size_t n = strlen(s);
    char *p = realloc(d->json, d->jn + n + 1);
    if (!p)
        return;
    d->json = p;
    memcpy(d->json + d->jn, s, n + 1);
    d->jn += n;
}

static void report(struct doctor *d, const char *check, enum status st, const char *fix,
                   const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static void report(struct doctor *d, const char *check, enum status st, const char *fix,
                   const char *fmt, ...)
{
    char detail[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    if (st == ST_FAIL)
        d->fails++;
    if (d->ctl->json) {
        json_raw(d, d->jn ? ",{\"check\":\"" : "{\"check\":\"");
        json_str(d, check);
        json_raw(d, "\",\"status\":\"");
        json_str(d, st == ST_FAIL ? "fail" : status_word[st]);
        json_raw(d, "\",\"detail\":\"");
        json_str(d, detail);
        json_raw(d, "\",\"fix\":");
        if (fix) {
            json_raw(d, "\"");
            json_str(d, fix);
            json_raw(d, "\"}");
        } else {
            json_raw(d, "null}");
        }
        return;
    }
    printf("%-4s  %-10s  %s\n", status_word[st], check, detail);
    if (fix)
        printf("      %-10s  -> %s\n", "", fix);
}

static void check_dir_body(struct doctor *d, const char *check, const char *dir);

/* A directory that must be ours and private: missing is fine when its
 * parent lets us create it (the broker does so). */
static bool check_dir(struct doctor *d, const char *check, const char *dir)
{
    int fails = d->fails;
    check_dir_body(d, check, dir);
    return d->fails == fails;
}

static void check_dir_body(struct doctor *d, const char *check, const char *dir)
{
    struct stat st;
    char fix[4700];
    if (lstat(dir, &st) < 0) {
        if (errno != ENOENT && errno != ENOTDIR) {
            report(d, check, ST_FAIL, NULL, "%s: %s", dir, strerror(errno));
            return;
        }
        /* the nearest existing ancestor must be a writable directory */
        char p[4096];
        snprintf(p, sizeof p, "%s", dir);
        for (;;) {
            char *slash = strrchr(p, '/');
            if (!slash || slash == p) {
                snprintf(p, sizeof p, "/");
                break;
            }
            *slash = '\0';
            if (lstat(p, &st) == 0)
                break;
        }
        if (!S_ISDIR(st.st_mode)) {
            snprintf(fix, sizeof fix, "%s is not a directory: move it, or point coord "
                     "elsewhere (COORD_DATA_DIR, COORD_SOCKET)", p);
            report(d, check, ST_FAIL, fix, "%s cannot be created", dir);
        } else if (access(p, W_OK | X_OK) < 0) {
            snprintf(fix, sizeof fix, "%s is not writable by you: choose another place "
                     "(COORD_DATA_DIR, COORD_SOCKET)", p);
            report(d, check, ST_FAIL, fix, "%s cannot be created", dir);
        } else {
            report(d, check, ST_OK, NULL, "%s (not there yet: the broker creates it, 0700)",
                   dir);
        }
        return;
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(fix, sizeof fix, "move %s away, or point coord elsewhere", dir);
        report(d, check, ST_FAIL, fix, "%s is not a directory", dir);
    } else if (st.st_uid != getuid()) {
        snprintf(fix, sizeof fix, "use a directory of your own (COORD_DATA_DIR, COORD_SOCKET)");
        report(d, check, ST_FAIL, fix, "%s is owned by uid %u, not by you (uid %u)", dir,
               (unsigned)st.st_uid, (unsigned)getuid());
    } else if (st.st_mode & (S_IWGRP | S_IWOTH)) {
        snprintf(fix, sizeof fix, "chmod 700 %s", dir);
        report(d, check, ST_FAIL, fix, "%s is writable by group or others (mode %03o)", dir,
               (unsigned)(st.st_mode & 0777));
    } else {
        report(d, check, ST_OK, NULL, "%s", dir);
    }
}

/* Who holds DATA_DIR/coordd.lock: 0 nobody, 1 someone (*h as far as it
 * said), -1 no such file. */
static int data_lock_holder(const char *data_dir, struct coord_lock_holder *h)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", data_dir, COORD_DATA_LOCK_FILE);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0)
        return -1;
    memset(h, 0, sizeof *h);
    int rc = 0;
    if (flock(fd, LOCK_SH | LOCK_NB) < 0 && errno == EWOULDBLOCK) {
        rc = 1;
        char text[256];
        ssize_t n = pread(fd, text, sizeof text - 1, 0);
        if (n > 0) {
            text[n] = '\0';
            if (coord_parse_lock_holder(text, h) < 0)
                memset(h, 0, sizeof *h);
        }
    }
    close(fd);
    return rc;
}

static void check_log(struct doctor *d, const char *data_dir)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/coordd.log", data_dir);
    struct stat st;
    if (lstat(path, &st) < 0) {
        report(d, "log", ST_INFO, NULL, "%s (none yet)", path);
        return;
    }
    if (!S_ISREG(st.st_mode)) {
        char fix[4700];
        snprintf(fix, sizeof fix, "remove it: rm %s (the broker writes a regular file)", path);
        report(d, "log", ST_FAIL, fix, "%s is not a regular file (%s)", path,
                S_ISLNK(st.st_mode) ? "a symlink" : S_ISFIFO(st.st_mode) ? "a FIFO" : "special");
        return;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    char *buf = fd >= 0 ? malloc(DOCTOR_LOG_TAIL + 1) : NULL;
    if (!buf) {
        if (fd >= 0)
            close(fd);
        report(d, "log", ST_WARN, NULL, "%s cannot be read", path);
        return;
    }
    off_t from = st.st_size > DOCTOR_LOG_TAIL ? st.st_size - DOCTOR_LOG_TAIL : 0;
    ssize_t n = pread(fd, buf, DOCTOR_LOG_TAIL, from);
    close(fd);
    buf[n > 0 ? n : 0] = '\0';
    /* the last start failure, unless a start came after it */
    char *fail = NULL, *start = NULL;
    for (char *line = buf; line && *line; ) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        if (strstr(line, "event=broker.start_failed"))
            fail = line;
        else if (strstr(line, "event=broker.start "))
            start = line;
        line = nl ? nl + 1 : NULL;
    }
    if (fail && (!start || start < fail)) {
        char *e = strstr(fail, "error=");
        report(d, "log", ST_WARN, "fix what it says; coordd --foreground shows it as it happens",
               "the last start failed: %s", e ? e + 6 : fail);
    } else {
        report(d, "log", ST_OK, NULL, "%s (%lld bytes)", path, (long long)st.st_size);
    }
    free(buf);
}

/* The coordd autostart would run: COORD_BROKER, the one beside coordctl, or
 * PATH's; its --version (or why not). */
static void check_coordd(struct doctor *d)
{
    const char *b = d->ctl->opts.broker_path;
    if (!b || !*b)
        b = getenv("COORD_BROKER");
    char found[4096] = "";
    if (b && *b) {
        snprintf(found, sizeof found, "%s", b);
    } else {
        const char *path = getenv("PATH");
        for (const char *p = path ? path : ""; *p; ) {
            size_t n = strcspn(p, ":");
            snprintf(found, sizeof found, "%.*s/coordd", (int)n, p);
            if (n && access(found, X_OK) == 0)
                break;
            found[0] = '\0';
            p += n + (p[n] == ':');
        }
        if (!found[0]) {
            report(d, "coordd", ST_FAIL,
                   "tools/dev.sh install (into ~/.local/bin), or set COORD_BROKER",
                   "no coordd in PATH: autostart cannot start a broker");
            return;
        }
    }
    int p[2];
    if (access(found, X_OK) < 0 || pipe(p) < 0) {
        report(d, "coordd", ST_FAIL, "set COORD_BROKER to a coordd that runs",
               "%s: %s", found, strerror(errno));
        return;
    }
    pid_t pid = fork();
    if (pid == 0) {
        dup2(p[1], 1);
        close(p[0]);
        close(p[1]);
        execl(found, found, "--version", (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    char out[128] = "";
    ssize_t n = pid > 0 ? read(p[0], out, sizeof out - 1) : -1;
    close(p[0]);
    int wst = 0;
    if (pid > 0)
        waitpid(pid, &wst, 0);
    out[n > 0 ? n : 0] = '\0';
    out[strcspn(out, "\n")] = '\0';
    if (pid < 0 || !WIFEXITED(wst) || WEXITSTATUS(wst) != 0 || strncmp(out, "coordd ", 7) != 0) {
        report(d, "coordd", ST_FAIL, "set COORD_BROKER to a coordd that runs",
               "%s does not run (--version failed)", found);
    } else if (strcmp(out + 7, COORD_VERSION) != 0) {
        report(d, "coordd", ST_WARN, "install coordd and coordctl of one version",
               "%s is %s, coordctl is %s", found, out + 7, COORD_VERSION);
    } else {
        report(d, "coordd", ST_OK, NULL, "%s (%s)", found, out);
    }
}

int cmd_doctor(struct ctl *ctl, int argc, char **argv)
{
    int first = ctl_first_operand(ctl, argc, argv);
    if (first < argc)
        return ctl_usage(ctl, "unexpected argument %s", argv[first]);
    struct doctor d = { .ctl = ctl };
    char data[4096], sockdir[4096], why[4700];

    const char *home = getenv("HOME");
    struct stat st;
    if (!home || !*home)
        report(&d, "home", ST_WARN, "set HOME", "HOME is not set (the passwd entry is used)");
    else if (stat(home, &st) < 0 || !S_ISDIR(st.st_mode))
        report(&d, "home", ST_FAIL, "set HOME to your home directory, or COORD_DATA_DIR",
               "HOME=%s is not a directory", home);
    else
        report(&d, "home", ST_OK, NULL, "%s", home);

    if (coord_dirname(ctl->socket, sockdir, sizeof sockdir) == 0)
        check_dir(&d, "socket dir", sockdir);
    bool have_data = coord_default_data_dir(data, sizeof data) == 0;
    if (have_data)
        have_data = check_dir(&d, "data dir", data);
    else
        report(&d, "data dir", ST_FAIL, "shorten COORD_DATA_DIR", "the data dir's path is too long");

    /* the broker on our socket, never started from here */
    int rc = ctl_try_connect(ctl, true);
    const char *broker_version = NULL;
    uint64_t broker_pid = 0;
    coord_reply_t *stats = NULL;
    if (rc == 0) {
        broker_version = coord_broker_version(ctl->c);
        coord_req_t *req = coord_req_new("stats");
        if (req && coord_call(ctl->c, req, &stats) == 0)
            coord_map_uint(coord_reply_map(stats), "pid", &broker_pid);
        coord_req_free(req);
        const char *v = broker_version ? broker_version : "?";
        if (strncmp(v, "coord ", 6) == 0 && strcmp(v + 6, COORD_VERSION) != 0)
            report(&d, "broker", ST_WARN, "restart the broker after an upgrade (kill it: "
                   "the next client starts the new one)",
                   "pid %llu on %s is %s, coordctl is %s", (unsigned long long)broker_pid,
                   ctl->socket, v, COORD_VERSION);
        else
            report(&d, "broker", ST_OK, NULL, "pid %llu on %s (%s)",
                   (unsigned long long)broker_pid, ctl->socket, v);
    } else {
        report(&d, "broker", ST_INFO, NULL, "none on %s (%s): the first client starts one",
               ctl->socket, coord_strerror(rc));
    }

    if (have_data) {
        struct coord_lock_holder h;
        int held = data_lock_holder(data, &h);
        if (held <= 0) {
            report(&d, "data lock", rc == 0 ? ST_WARN : ST_OK, NULL, "%s is not held%s", data,
                   rc == 0 ? " (the broker on the socket serves another data dir)" : "");
        } else if (h.pid && strcmp(h.socket, ctl->socket) != 0) {
            snprintf(why, sizeof why, "use that broker: export COORD_SOCKET=%s (or stop it: "
                     "kill %d)", h.socket, (int)h.pid);
            report(&d, "data lock", ST_FAIL, why,
                   "%s is served by another broker: pid %d on %s, not on %s", data, (int)h.pid,
                   h.socket, ctl->socket);
        } else if (h.pid) {
            report(&d, "data lock", ST_OK, NULL, "held by pid %d on %s", (int)h.pid, h.socket);
        } else {
            report(&d, "data lock", ST_INFO, NULL, "held by a broker that is starting");
        }
        check_log(&d, data);
    }
    check_coordd(&d);

    if (stats) {
        coord_map m = coord_reply_map(stats);
        const char *ledger = "?";
        size_t ln = 1;
        bool reachable = true;
        coord_map_str(m, "ledger", &ledger, &ln);
        coord_map_bool(m, "ledger_reachable", &reachable);
        if (reachable)
            report(&d, "ledger", ST_OK, NULL, "%.*s, answering", (int)ln, ledger);
        else
            report(&d, "ledger", ST_FAIL, "start etcd, or check --etcd-endpoints "
                   "(coordd.log says what failed)",
                   "%.*s, NOT answering: campaigns and commits fail closed", (int)ln, ledger);
        coord_reply_free(stats);
    }

    if (ctl->json) {
        printf("{\"checks\":[%s],\"ok\":%s}\n", d.json ? d.json : "", d.fails ? "false" : "true");
        free(d.json);
    } else if (d.fails) {
        printf("\n%d check%s failed\n", d.fails, d.fails == 1 ? "" : "s");
    }
    return d.fails ? CTL_EXIT_FAIL : CTL_EXIT_OK;
}
