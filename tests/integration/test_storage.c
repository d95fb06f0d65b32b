/* test_storage.c - damaged, missing, foreign and full storage, the
 * --max-data-size ceiling, the log file of a broker nobody watches, and
 * refusals at the fd limit, against real coordd processes.
 *
 * A broker that must refuse its storage has to say why in one log line
 * and exit with a non-zero status, never die of a signal: each case checks
 * the wait status and the line. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>
#include "coord.h"
#include "harness.h"

#define T 5000

static coord_msg m;
static char logbuf[1 << 16];

/* What a start came to: ready (bp->pid runs), or the wait status of a
 * broker that exited (or -1: still not ready nor gone after T). */
struct outcome {
    bool ready;
    int status;
};

/* Starts coordd on bp's paths with stderr to bp->log; foreground unless
 * told otherwise; nofile > 0 caps RLIMIT_NOFILE (hard and soft). */
static struct outcome spawn(struct broker_proc *bp, const char *const *extra,
                            bool foreground, rlim_t nofile)
{
    struct outcome o = { false, -1 };
    int ready;
    pid_t pid = broker_spawn(bp, extra, foreground, (long)nofile, &ready);
    if (pid < 0)
        return o;
    if (broker_await_ready(ready, T)) {
        o.ready = true;
        if (foreground)
            bp->pid = pid;
        else
            waitpid(pid, NULL, 0);   /* the parent of the daemon */
        return o;
    }
    o.status = wait_pid_timeout(pid, T);
    if (o.status == -1) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
    return o;
}

static const char *read_log(const char *path)
{
    logbuf[0] = 0;
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return logbuf;
    ssize_t n = read(fd, logbuf, sizeof logbuf - 1);
    close(fd);
    logbuf[n > 0 ? n : 0] = 0;
    return logbuf;
}

static bool log_has(const struct broker_proc *bp, const char *s)
{
    return strstr(read_log(bp->log), s) != NULL;
}

/* A refusal: a normal exit with status 1 (not a signal) and the line. */
static void check_refused(struct broker_proc *bp, struct outcome o, const char *line)
{
    CHECK(!o.ready);
    if (o.ready)
        broker_kill(bp, SIGKILL);
    CHECK(o.status != -1 && WIFEXITED(o.status) && WEXITSTATUS(o.status) == 1);
    if (o.status != -1 && WIFSIGNALED(o.status))
        fprintf(stderr, "broker died of signal %d\n", WTERMSIG(o.status));
    CHECK(log_has(bp, "level=error event=broker.start_failed"));
    CHECK(log_has(bp, line));
    if (!log_has(bp, line))
        fprintf(stderr, "log:\n%s\n", logbuf);
}

static void data_path(const struct broker_proc *bp, const char *name, char *out, size_t n)
{
    snprintf(out, n, "%s/%s", bp->data, name);
}

static off_t file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? st.st_size : -1;
}

/* The bytes of data.mdb up to its last page that is not all zeros: the
 * broker keeps zeros ahead of LMDB's pages (store.c, PREALLOC_BYTES). */
static off_t used_size(const char *path)
{
    long ps = sysconf(_SC_PAGESIZE);
    uint8_t page[65536];
    int fd = open(path, O_RDONLY);
    off_t size = file_size(path), used = 0;
    for (off_t at = 0; fd >= 0 && at + ps <= size && ps <= (long)sizeof page; at += ps) {
        if (pread(fd, page, (size_t)ps, at) != ps)
            break;
        for (long i = 0; i < ps; i++)
            if (page[i]) {
                used = at + ps;
                break;
            }
    }
    if (fd >= 0)
        close(fd);
    return used;
}

/* Owner of key: joins, completes with a result of n bytes kept as a
 * record.  Returns the completion's reply code (0 ok). */
static int store_kept(struct rcl *c, uint64_t rid, const char *key, size_t n, uint64_t keep_ms);

static int store_record(struct rcl *c, uint64_t rid, const char *key, size_t n)
{
    return store_kept(c, rid, key, n, 3600000);
}

/* The same, kept keep_ms. */
static int store_kept(struct rcl *c, uint64_t rid, const char *key, size_t n, uint64_t keep_ms)
{
    static uint8_t result[256 << 10];
    memset(result, 'r', n < sizeof result ? n : sizeof result);
    coord_enc *e = rcl_begin(c, "flight.join", rid);
    coord_enc_kv_cstr(e, "key", key);
    rcl_send(c);
    if (rcl_reply(c, rid, T, &m) != 0 || !msg_str_is(&m, "role", "owner", 5))
        return -1;
    uint64_t flight = msg_uint(&m, "flight"), fence = msg_uint(&m, "fence");
    e = rcl_begin(c, "flight.complete", rid + 1);
    coord_enc_kv_uint(e, "flight", flight);
    coord_enc_kv_uint(e, "fence", fence);
    coord_enc_kv_bin(e, "result", result, n);
    coord_enc_kv_uint(e, "keep_ms", keep_ms);
    rcl_send(c);
    if (rcl_reply(c, rid + 1, T, &m) != 0)
        return -1;
    return msg_ok(&m) ? 0 : 1;
}

/* A stopped broker's data dir holding records (several pages of them). */
static void make_ledger(struct broker_proc *bp, int records)
{
    broker_paths(bp);
    struct outcome o = spawn(bp, NULL, true, 0);
    if (!o.ready) {
        fprintf(stderr, "broker did not start: %s\n", read_log(bp->log));
        exit(2);
    }
    struct rcl *c = connect_or_exit(bp, NULL);
    for (int i = 0; i < records; i++) {
        char key[32];
        snprintf(key, sizeof key, "k%d", i);
        if (store_record(c, 10 + 2 * (uint64_t)i, key, 6000) != 0) {
            fprintf(stderr, "cannot store a record\n");
            exit(2);
        }
    }
    rcl_close(c);
    broker_kill(bp, SIGTERM);
    truncate(bp->log, 0);
}

static void test_truncated_to_meta_pages(void)
{
    struct broker_proc bp;
    make_ledger(&bp, 20);
    char path[400];
    data_path(&bp, "data.mdb", path, sizeof path);
    REQUIRE(truncate(path, 2 * sysconf(_SC_PAGESIZE)) == 0);
    check_refused(&bp, spawn(&bp, NULL, true, 0), "data.mdb is truncated");
    broker_cleanup(&bp);
}

static void test_truncated_to_half(void)
{
    struct broker_proc bp;
    make_ledger(&bp, 40);
    char path[400];
    data_path(&bp, "data.mdb", path, sizeof path);
    off_t size = used_size(path);
    REQUIRE(size > 16 * sysconf(_SC_PAGESIZE));
    REQUIRE(truncate(path, size / 2) == 0);
    struct outcome o = spawn(&bp, NULL, true, 0);
    if (o.ready) {
        /* what main did: it starts, and the first read of a missing page
         * kills it; make that read so the failure shows as a signal */
        struct rcl *c = rcl_open(bp.sock, NULL);
        if (c) {
            coord_enc *e = rcl_begin(c, "record.list", 1);
            (void)e;
            rcl_send(c);
            rcl_reply(c, 1, T, &m);
            rcl_close(c);
        }
        o.status = broker_kill(&bp, SIGTERM);
        o.ready = false;
        CHECK(!"the broker started on a truncated ledger");
    }
    check_refused(&bp, o, "data.mdb is truncated");
    /* and on every restart the same, never a signal */
    truncate(bp.log, 0);
    check_refused(&bp, spawn(&bp, NULL, true, 0), "data.mdb is truncated");
    broker_cleanup(&bp);
}

static void test_zero_length_is_recreated_loudly(void)
{
    struct broker_proc bp;
    make_ledger(&bp, 1);
    char path[400];
    data_path(&bp, "data.mdb", path, sizeof path);
    REQUIRE(truncate(path, 0) == 0);
    struct outcome o = spawn(&bp, NULL, true, 0);
    REQUIRE(o.ready);
    CHECK(log_has(&bp, "level=error event=ledger.recreated"));
    CHECK(log_has(&bp, "ledger recreated"));
    /* a missing data.mdb beside its lock file: the same */
    broker_kill(&bp, SIGTERM);
    REQUIRE(unlink(path) == 0);
    truncate(bp.log, 0);
    o = spawn(&bp, NULL, true, 0);
    REQUIRE(o.ready);
    CHECK(log_has(&bp, "level=error event=ledger.recreated") && log_has(&bp, "was=missing"));
    /* a fresh dir is no recreation */
    struct broker_proc fresh;
    broker_paths(&fresh);
    o = spawn(&fresh, NULL, true, 0);
    REQUIRE(o.ready);
    CHECK(!log_has(&fresh, "ledger.recreated"));
    broker_kill(&fresh, SIGTERM);
    broker_cleanup(&fresh);
    broker_kill(&bp, SIGTERM);
    broker_cleanup(&bp);
}

static void test_foreign_file(void)
{
    struct broker_proc bp;
    broker_paths(&bp);
    REQUIRE(mkdir(bp.data, 0700) == 0);
    char path[400];
    data_path(&bp, "data.mdb", path, sizeof path);
    /* random bytes, several pages of them */
    static uint8_t junk[64 << 10];
    int fd = open("/dev/urandom", O_RDONLY);
    REQUIRE(fd >= 0 && read(fd, junk, sizeof junk) == (ssize_t)sizeof junk);
    close(fd);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    REQUIRE(fd >= 0 && write(fd, junk, sizeof junk) == (ssize_t)sizeof junk);
    close(fd);
    check_refused(&bp, spawn(&bp, NULL, true, 0), "data.mdb is not an LMDB ledger");
    /* a text file */
    fd = open(path, O_WRONLY | O_TRUNC, 0600);
    const char text[] = "these are not the pages you are looking for\n";
    REQUIRE(fd >= 0 && write(fd, text, sizeof text - 1) == (ssize_t)sizeof text - 1);
    close(fd);
    truncate(bp.log, 0);
    check_refused(&bp, spawn(&bp, NULL, true, 0), "data.mdb is not an LMDB ledger");
    /* the refusal left the file alone */
    CHECK(file_size(path) == (off_t)sizeof text - 1);
    broker_cleanup(&bp);
}

/* ---- a full disk: a small tmpfs (needs root) ---- */

/* Fills the file system of dir until ENOSPC, then gives back 'leave'
 * bytes.  Returns the filler's path in out. */
static int fill_fs(const char *dir, size_t leave, char *out, size_t n)
{
    snprintf(out, n, "%s/filler", dir);
    int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0)
        return -1;
    static uint8_t block[4096];
    off_t size = 0;
    while (write(fd, block, sizeof block) == (ssize_t)sizeof block)
        size += sizeof block;
    int rc = ftruncate(fd, size > (off_t)leave ? size - (off_t)leave : 0);
    close(fd);
    return rc;
}

static bool mount_tmpfs(const char *dir, const char *size)
{
    char opts[64];
    snprintf(opts, sizeof opts, "size=%s,mode=0700", size);
    if (mkdir(dir, 0700) < 0 && errno != EEXIST)
        return false;
    if (mount("tmpfs", dir, "tmpfs", 0, opts) < 0) {
        fprintf(stderr, "SKIP: cannot mount a tmpfs at %s (%s): the full-disk cases "
                "need root\n", dir, strerror(errno));
        return false;
    }
    return true;
}

static void test_full_disk_at_start(void)
{
    struct broker_proc bp;
    broker_paths(&bp);
    char mnt[280];
    snprintf(mnt, sizeof mnt, "%.200s/small", bp.dir);
    if (geteuid() != 0 || !mount_tmpfs(mnt, "64k")) {
        if (geteuid() != 0)
            fprintf(stderr, "SKIP: full-disk cases need root (a small tmpfs)\n");
        broker_cleanup(&bp);
        return;
    }
    snprintf(bp.data, sizeof bp.data, "%s/data", mnt);
    REQUIRE(mkdir(bp.data, 0700) == 0);
    /* nothing left; room for the lock file only; for a page or two */
    static const size_t leave[] = { 0, 8 << 10, 16 << 10 };
    char filler[400];
    for (size_t i = 0; i < sizeof leave / sizeof leave[0]; i++) {
        REQUIRE(fill_fs(mnt, leave[i], filler, sizeof filler) == 0);
        truncate(bp.log, 0);
        check_refused(&bp, spawn(&bp, NULL, true, 0), "no space left on device");
        unlink(filler);
    }
    /* with space again it starts, and the failed starts left nothing it
     * would take for a damaged or lost ledger */
    truncate(bp.log, 0);
    struct outcome o = spawn(&bp, NULL, true, 0);
    CHECK(o.ready);
    CHECK(!log_has(&bp, "ledger.recreated"));
    if (o.ready)
        broker_kill(&bp, SIGTERM);
    umount2(mnt, MNT_DETACH);
    broker_cleanup(&bp);
}

static void test_full_disk_while_running(void)
{
    struct broker_proc bp;
    broker_paths(&bp);
    char mnt[280];
    snprintf(mnt, sizeof mnt, "%.200s/small", bp.dir);
    if (geteuid() != 0 || !mount_tmpfs(mnt, "1m")) {
        broker_cleanup(&bp);
        return;
    }
    snprintf(bp.data, sizeof bp.data, "%s/data", mnt);
    struct outcome o = spawn(&bp, NULL, true, 0);
    if (!o.ready) {
        CHECK(!"broker did not start on the tmpfs");
        umount2(mnt, MNT_DETACH);
        broker_cleanup(&bp);
        return;
    }
    struct rcl *c = connect_or_exit(&bp, NULL);
    char filler[400];
    CHECK(fill_fs(mnt, 0, filler, sizeof filler) == 0);
    int rc = 0;
    uint64_t rid = 100;
    for (int i = 0; i < 20 && rc == 0; i++, rid += 2) {
        char key[16];
        snprintf(key, sizeof key, "big%d", i);
        rc = store_record(c, rid, key, 64 << 10);
    }
    CHECK(rc == 1 && msg_code_is(&m, "STORAGE"));
    CHECK(msg_str_is(&m, "message", "no space left on device", 23));
    CHECK(log_has(&bp, "event=ledger.commit_failed") &&
          log_has(&bp, "error=\"no space left on device\""));
    /* the broker stays up, and writes work once there is space again */
    CHECK(rcl_sync(c) == 0);
    unlink(filler);
    CHECK(store_record(c, rid, "after", 64 << 10) == 0);
    rcl_close(c);
    broker_kill(&bp, SIGTERM);
    umount2(mnt, MNT_DETACH);
    broker_cleanup(&bp);
}

/* ---- --max-data-size ---- */

static void test_data_size_limit(void)
{
    struct broker_proc bp;
    broker_paths(&bp);
    const char *const args[] = { "--max-data-size", "1048576", NULL };
    struct outcome o = spawn(&bp, args, true, 0);
    REQUIRE(o.ready);
    struct rcl *c = connect_or_exit(&bp, NULL);
    int rc = 0, stored = 0;
    uint64_t rid = 100;
    for (int i = 0; i < 40 && rc == 0; i++, rid += 2) {
        char key[16];
        snprintf(key, sizeof key, "big%d", i);
        rc = store_record(c, rid, key, 64 << 10);
        stored += rc == 0;
    }
    CHECK(rc == 1 && msg_code_is(&m, "STORAGE"));
    const char *want = "data size limit reached (--max-data-size 1048576)";
    CHECK(msg_str_is(&m, "message", want, strlen(want)));
    CHECK(stored >= 4);               /* the first records fit */
    CHECK(log_has(&bp, "event=ledger.data_limit"));
    /* told apart from a full disk */
    CHECK(!log_has(&bp, "no space left on device"));
    char path[400];
    data_path(&bp, "data.mdb", path, sizeof path);
    CHECK(file_size(path) <= 1048576);
    /* every other request still works: reads, locks, stats */
    coord_enc *e = rcl_begin(c, "record.get", 1);
    coord_enc_kv_cstr(e, "key", "big0");
    rcl_send(c);
    CHECK(rcl_reply(c, 1, T, &m) == 0 && msg_ok(&m));
    CHECK(rcl_acquire(c, 2, "l", 1, NULL, 0, 0) == 0);
    CHECK(rcl_reply(c, 2, T, &m) == 0 && msg_ok(&m));
    rcl_begin(c, "stats", 3);
    rcl_send(c);
    CHECK(rcl_reply(c, 3, T, &m) == 0 && msg_ok(&m));
    CHECK(msg_uint(&m, "data_limit_hits") >= 1);
    /* a purge at the cap still works and gives the space back (LMDB
     * reuses it once a later commit has gone through) */
    e = rcl_begin(c, "record.purge", 4);
    rcl_send(c);
    CHECK(rcl_reply(c, 4, T, &m) == 0 && msg_ok(&m) && msg_uint(&m, "deleted") == (uint64_t)stored);
    CHECK(store_record(c, 600, "small", 10) == 0);
    CHECK(store_record(c, 602, "big-again", 64 << 10) == 0);
    /* a second client is served too */
    struct rcl *d = connect_or_exit(&bp, NULL);
    CHECK(rcl_sync(d) == 0);
    rcl_close(d);
    rcl_close(c);
    CHECK(broker_kill(&bp, SIGTERM) == 0);
    broker_cleanup(&bp);
}

/* One batch holding a job that fails and jobs that succeed: the writer
 * first runs a batch's jobs in its own transaction and, when one fails,
 * runs the batch again with a nested transaction per job.  Completions
 * sent in one write land in one batch (or a few); a record larger than
 * --max-data-size fails at the cap among them.  Each must get its own
 * answer: the small ones stored and readable, the big one STORAGE and
 * absent, in every round. */
static void test_failed_job_among_others(void)
{
    enum { N = 6, BIG = 3, ROUNDS = 5 };
    static uint8_t big[1000 << 10];
    memset(big, 'b', sizeof big);
    struct broker_proc bp;
    broker_paths(&bp);
    const char *const args[] = { "--max-data-size", "1048576", NULL };
    struct outcome o = spawn(&bp, args, true, 0);
    REQUIRE(o.ready);
    struct rcl *c = connect_or_exit(&bp, NULL);
    uint64_t rid = 1000;
    for (int round = 0; round < ROUNDS; round++) {
        uint64_t flight[N], fence[N], first = rid;
        char key[N][32];
        for (int i = 0; i < N; i++) {
            snprintf(key[i], sizeof key[i], "r%d-%d", round, i);
            coord_enc *e = rcl_begin(c, "flight.join", rid);
            coord_enc_kv_cstr(e, "key", key[i]);
            rcl_send(c);
            REQUIRE(rcl_reply(c, rid++, T, &m) == 0 && msg_str_is(&m, "role", "owner", 5));
            flight[i] = msg_uint(&m, "flight");
            fence[i] = msg_uint(&m, "fence");
        }
        /* the completions, all in one write */
        coord_buf out;
        coord_buf_init(&out);
        first = rid;
        for (int i = 0; i < N; i++) {
            coord_enc e;
            coord_enc_begin(&e, &out);
            coord_enc_kv_cstr(&e, "op", "flight.complete");
            coord_enc_kv_uint(&e, "rid", rid++);
            coord_enc_kv_uint(&e, "flight", flight[i]);
            coord_enc_kv_uint(&e, "fence", fence[i]);
            if (i == BIG)
                coord_enc_kv_bin(&e, "result", big, sizeof big);
            else
                coord_enc_kv_bin(&e, "result", key[i], strlen(key[i]));
            coord_enc_kv_uint(&e, "keep_ms", 3600000);
            REQUIRE(coord_enc_end(&e) > 0);
        }
        REQUIRE(rcl_write(c, out.data, out.len) == 0);
        coord_buf_free(&out);
        for (int i = 0; i < N; i++) {
            REQUIRE(rcl_reply(c, first + (uint64_t)i, T, &m) == 0);
            if (i == BIG)
                CHECK(!msg_ok(&m) && msg_code_is(&m, "STORAGE"));
            else
                CHECK(msg_ok(&m));
        }
        for (int i = 0; i < N; i++) {
            coord_enc *e = rcl_begin(c, "record.get", rid);
            coord_enc_kv_cstr(e, "key", key[i]);
            rcl_send(c);
            REQUIRE(rcl_reply(c, rid++, T, &m) == 0);
            if (i == BIG) {
                CHECK(!msg_ok(&m) && msg_code_is(&m, "NOT_FOUND"));
            } else {
                CHECK(msg_ok(&m));
                CHECK(msg_str_is(&m, "result", key[i], strlen(key[i])));
            }
        }
    }
    rcl_close(c);
    CHECK(broker_kill(&bp, SIGTERM) == 0);
    broker_cleanup(&bp);
}

static void test_data_size_bounds(void)
{
    struct broker_proc bp;
    broker_paths(&bp);
    const char *const args[] = { "--max-data-size", "1048575", NULL };
    struct outcome o = spawn(&bp, args, true, 0);
    CHECK(!o.ready && o.status != -1 && WIFEXITED(o.status) && WEXITSTATUS(o.status) == 2);
    CHECK(log_has(&bp, "bad value for --max-data-size"));
    broker_cleanup(&bp);
}

/* ---- the log of a broker nobody watches ---- */

static void wait_log(const char *path, const char *s)
{
    uint64_t end = now_ms() + T;
    while (!strstr(read_log(path), s) && now_ms() < end) {
        /* the line is written by another process: poll the file */
        struct pollfd none;
        poll(&none, 0, 10);
    }
}

static void test_log_file_daemon_capped(void)
{
    struct broker_proc bp;
    broker_paths(&bp);
    REQUIRE(mkdir(bp.data, 0700) == 0);
    char logpath[400], old[400];
    data_path(&bp, "coordd.log", logpath, sizeof logpath);
    data_path(&bp, "coordd.log.1", old, sizeof old);
    /* an earlier life left a log just under the cap */
    int fd = open(logpath, O_WRONLY | O_CREAT, 0600);
    REQUIRE(fd >= 0);
    char line[100];
    memset(line, 'x', sizeof line - 1);
    line[sizeof line - 1] = '\n';
    for (int i = 0; i < (1 << 20) / 100; i++)
        REQUIRE(write(fd, line, sizeof line) == (ssize_t)sizeof line);
    close(fd);
    struct outcome o = spawn(&bp, NULL, false, 0);    /* daemonizes */
    REQUIRE(o.ready);
    struct rcl *c = connect_or_exit(&bp, NULL);
    rcl_begin(c, "stats", 1);
    rcl_send(c);
    REQUIRE(rcl_reply(c, 1, T, &m) == 0);
    pid_t pid = (pid_t)msg_uint(&m, "pid");
    rcl_close(c);
    REQUIRE(pid > 0);
    kill(pid, SIGTERM);
    wait_log(logpath, "event=broker.exit");
    CHECK(strstr(read_log(logpath), "event=broker.start") != NULL);
    CHECK(strstr(logbuf, "event=broker.exit") != NULL);
    /* rotated: the new file is small, the old one kept as .1 */
    CHECK(file_size(logpath) > 0 && file_size(logpath) < 64 << 10);
    CHECK(file_size(old) >= (1 << 20) - 100 && file_size(old) <= 1 << 20);
    /* nothing went to the stderr it was started with */
    CHECK(file_size(bp.log) <= 0);
    broker_cleanup(&bp);
}

static void test_log_file_autostarted(void)
{
    struct broker_proc bp;
    broker_paths(&bp);
    setenv("COORD_DATA_DIR", bp.data, 1);
    coord_options opt;
    coord_options_init(&opt);
    opt.socket_path = bp.sock;
    coord_t *cl = NULL;
    int rc = coord_connect(&cl, &opt);
    unsetenv("COORD_DATA_DIR");
    REQUIRE(rc == 0 && cl);
    struct rcl *c = connect_or_exit(&bp, NULL);
    rcl_begin(c, "stats", 1);
    rcl_send(c);
    REQUIRE(rcl_reply(c, 1, T, &m) == 0);
    pid_t pid = (pid_t)msg_uint(&m, "pid");
    rcl_close(c);
    coord_close(cl);
    char logpath[400];
    data_path(&bp, "coordd.log", logpath, sizeof logpath);
    CHECK(strstr(read_log(logpath), "event=broker.start") != NULL);
    REQUIRE(pid > 0);
    kill(pid, SIGTERM);
    wait_log(logpath, "event=broker.exit");
    CHECK(strstr(logbuf, "event=broker.exit") != NULL);
    broker_cleanup(&bp);
}

/* ---- the fd limit ---- */

static int send_hello(struct rcl *c, uint64_t rid)
{
    coord_enc *e = rcl_begin(c, "hello", rid);
    coord_enc_kv_uint(e, "proto", 1);
    coord_enc_kv_cstr(e, "client", "test_storage");
    coord_enc_kv_uint(e, "pid", (uint64_t)getpid());
    return rcl_send(c);
}

#define FD_LIMIT 48
#define FD_CLIENTS 80

static void test_fd_limit_refusals_counted(void)
{
    struct broker_proc bp;
    broker_paths(&bp);
    struct outcome o = spawn(&bp, NULL, true, FD_LIMIT);
    REQUIRE(o.ready);
    struct rcl *fds[FD_CLIENTS];
    unsigned ok = 0, refused = 0, other = 0;
    for (int i = 0; i < FD_CLIENTS; i++) {
        /* the first frame: the hello reply of an accepted connection,
         * LIMIT (rid 0) for a refused one, which may be closed before the
         * hello is sent (EPIPE: the frame is still there to read) */
        fds[i] = rcl_connect(bp.sock);
        if (fds[i])
            send_hello(fds[i], 7);
        if (!fds[i] || rcl_next(fds[i], T, &m) != 0) {
            other++;
            continue;
        }
        if (msg_uint(&m, "rid") == 7 && msg_ok(&m))
            ok++;
        else if (msg_code_is(&m, "LIMIT") &&
                 msg_str_is(&m, "message", "broker is out of file descriptors", 33))
            refused++;
        else
            other++;
    }
    fprintf(stderr, "fd limit %d: %u accepted, %u refused, %u other\n", FD_LIMIT, ok,
            refused, other);
    CHECK(ok > 0 && ok < FD_LIMIT);
    CHECK(refused > 0);
    CHECK_EQ_U(other, 0);
    CHECK_EQ_U(ok + refused, FD_CLIENTS);
    /* the first client stays as the control connection */
    struct rcl *ctl = fds[0];
    for (int i = 1; i < FD_CLIENTS; i++)
        rcl_close(fds[i]);
    /* once the broker has seen them go it accepts again, and it counted
     * every refusal */
    uint64_t end = now_ms() + T, conns = 0;
    do {
        REQUIRE(rcl_request(ctl, "stats", 9) == 0 && rcl_next(ctl, T, &m) == 0);
        conns = msg_uint(&m, "connections");
    } while (conns > 1 && now_ms() < end);
    CHECK_EQ_U(conns, 1);
    CHECK_EQ_U(msg_uint(&m, "rejected_fd_limit"), refused);
    rcl_close(ctl);
    struct rcl *c = connect_or_exit(&bp, NULL);
    CHECK(rcl_sync(c) == 0);
    rcl_close(c);
    CHECK(log_has(&bp, "level=warn event=accept.fd_limit"));
    /* rate-limited: one line for the burst */
    const char *p = read_log(bp.log);
    unsigned lines = 0;
    while ((p = strstr(p, "event=accept.fd_limit")) != NULL) {
        lines++;
        p++;
    }
    CHECK(lines >= 1 && lines <= 3);
    CHECK(broker_kill(&bp, SIGTERM) == 0);
    broker_cleanup(&bp);
}

/* ---- the clock ---- */

#define CLOCK_ROUNDS 5
#define CLOCK_BURST 20

static void purge(struct rcl *c, uint64_t rid)
{
    coord_enc *e = rcl_begin(c, "record.purge", rid);
    coord_enc_kv_cstr(e, "prefix", "none-");
    rcl_send(c);
}

/* The writer's group commit lingers for the rest of a batch after batches
 * of two or more.  Its deadlines were on CLOCK_REALTIME: with the wall
 * clock stepped back after one was taken, the lone commit that follows a
 * burst waited for the next job to come along (the 1 s record sweep at
 * best).  With the clock shifted an hour (clockshift), the lone commits
 * must still take no time. */
static void test_commit_linger_ignores_wall_clock(void)
{
    const char *shim = getenv("COORD_CLOCKSHIFT");
    if (!shim || access(shim, R_OK) != 0) {
        fprintf(stderr, "SKIP: COORD_CLOCKSHIFT is not set (run through meson)\n");
        return;
    }
    struct broker_proc bp;
    broker_paths(&bp);
    char asan[512];
    const char *prev = getenv("ASAN_OPTIONS");
    snprintf(asan, sizeof asan, "%s%sverify_asan_link_order=0", prev ? prev : "",
             prev && *prev ? ":" : "");
    char *saved = prev ? strdup(prev) : NULL;
    setenv("ASAN_OPTIONS", asan, 1);
    setenv("LD_PRELOAD", shim, 1);
    struct outcome o = spawn(&bp, NULL, true, 0);
    unsetenv("LD_PRELOAD");
    if (saved)
        setenv("ASAN_OPTIONS", saved, 1);
    else
        unsetenv("ASAN_OPTIONS");
    free(saved);
    REQUIRE(o.ready);
    struct rcl *c = connect_or_exit(&bp, NULL);
    uint64_t rid = 1, lone_ms = 0;
    for (int r = 0; r < CLOCK_ROUNDS; r++) {
        for (int i = 0; i < CLOCK_BURST; i++)
            purge(c, rid + (uint64_t)i);
        for (int i = 0; i < CLOCK_BURST; i++)
            CHECK(rcl_reply(c, rid + (uint64_t)i, T, &m) == 0 && msg_ok(&m));
        rid += CLOCK_BURST;
        uint64_t t0 = now_ms();
        purge(c, rid);
        CHECK(rcl_reply(c, rid, T, &m) == 0 && msg_ok(&m));
        lone_ms += now_ms() - t0;
        rid++;
    }
    /* each takes a commit (milliseconds); stalled, each took up to the
     * sweep's second, about half of it on average */
    fprintf(stderr, "lone commits after bursts: %llu ms in all\n",
            (unsigned long long)lone_ms);
    CHECK(lone_ms < 100 * CLOCK_ROUNDS);
    rcl_close(c);
    CHECK(broker_kill(&bp, SIGTERM) == 0);
    broker_cleanup(&bp);
}

/* stats tell where the writer's time went: a lone record is one commit
 * and one explicit flush (nothing followed it to cover its meta page). */
static void test_writer_times(void)
{
    struct broker_proc bp;
    start_or_exit(&bp, NULL);
    struct rcl *c = connect_or_exit(&bp, NULL);
    uint64_t b0 = rcl_stat(c, "ledger_batches"), f0 = rcl_stat(c, "ledger_flushes");
    uint64_t cu0 = rcl_stat(c, "ledger_commit_us"), fu0 = rcl_stat(c, "ledger_flush_us");
    CHECK(store_record(c, 10, "alone", 64) == 0);
    CHECK(store_record(c, 20, "alone-too", 64) == 0);
    uint64_t b1 = rcl_stat(c, "ledger_batches"), f1 = rcl_stat(c, "ledger_flushes");
    uint64_t cu1 = rcl_stat(c, "ledger_commit_us"), fu1 = rcl_stat(c, "ledger_flush_us");
    CHECK(b1 >= b0 + 2);
    CHECK(f1 >= f0 + 2);
    /* a commit and a flush each take an fdatasync: microseconds at least */
    CHECK(cu1 > cu0);
    CHECK(fu1 > fu0);
    CHECK(rcl_stat(c, "ledger_linger_us") != UINT64_MAX);
    rcl_close(c);
    stop_and_clean(&bp);
}

/* A batch that writes nothing (a purge matching nothing) leaves nothing
 * to make durable: it is answered without a flush. */
static void test_empty_batch_no_flush(void)
{
    struct broker_proc bp;
    start_or_exit(&bp, NULL);
    struct rcl *c = connect_or_exit(&bp, NULL);
    uint64_t b0 = rcl_stat(c, "ledger_batches"), f0 = rcl_stat(c, "ledger_flushes");
    for (uint64_t i = 0; i < 5; i++) {
        purge(c, 10 + i);
        CHECK(rcl_reply(c, 10 + i, T, &m) == 0 && msg_ok(&m));
    }
    uint64_t b1 = rcl_stat(c, "ledger_batches"), f1 = rcl_stat(c, "ledger_flushes");
    CHECK(b1 >= b0 + 5);
    CHECK_EQ_U(f1, f0);
    /* a record still costs its flush */
    CHECK(store_record(c, 20, "written", 16) == 0);
    CHECK(rcl_stat(c, "ledger_flushes") > f1);
    rcl_close(c);
    stop_and_clean(&bp);
}

/* An idle broker does nothing: without records there is no sweep (there
 * was one a second, each a batch and a flush), so over a window longer
 * than that period no batch runs.  (A window is the only way to see that
 * nothing happens; nothing here waits for an event.) */
static void test_idle_broker_sleeps(void)
{
    struct broker_proc bp;
    start_or_exit(&bp, NULL);
    struct rcl *c = connect_or_exit(&bp, NULL);
    uint64_t b0 = rcl_stat(c, "ledger_batches"), f0 = rcl_stat(c, "ledger_flushes");
    poll(NULL, 0, 1500);
    CHECK_EQ_U(rcl_stat(c, "ledger_batches"), b0);
    CHECK_EQ_U(rcl_stat(c, "ledger_flushes"), f0);
    rcl_close(c);
    stop_and_clean(&bp);
}

/* Records from before a restart are swept once due: the first sweep is
 * found in the ledger (its earliest expiry) at start. */
static void test_sweep_after_restart(void)
{
    struct broker_proc bp;
    start_or_exit(&bp, NULL);
    struct rcl *c = connect_or_exit(&bp, NULL);
    CHECK(store_kept(c, 10, "short-lived", 16, 300) == 0);
    CHECK(store_kept(c, 20, "long-lived", 16, 3600000) == 0);
    CHECK_EQ_U(rcl_stat(c, "records"), 2);
    rcl_close(c);
    CHECK(broker_kill(&bp, SIGTERM) == 0);
    REQUIRE(broker_start(&bp, NULL) == 0);
    c = connect_or_exit(&bp, NULL);
    uint64_t n = 2, t0 = now_ms();
    while ((n = rcl_stat(c, "records")) == 2 && now_ms() - t0 < T)
        poll(NULL, 0, 20);
    CHECK_EQ_U(n, 1);
    rcl_close(c);
    stop_and_clean(&bp);
}

int main(int argc, char **argv)
{
    coord_msg_init(&m);
    static const struct test_case tests[] = {
        { "truncated_meta", test_truncated_to_meta_pages },
        { "truncated_half", test_truncated_to_half },
        { "zero_length", test_zero_length_is_recreated_loudly },
        { "foreign", test_foreign_file },
        { "full_disk_start", test_full_disk_at_start },
        { "full_disk_running", test_full_disk_while_running },
        { "data_size_limit", test_data_size_limit },
        { "data_size_bounds", test_data_size_bounds },
        { "failed_job_among_others", test_failed_job_among_others },
        { "log_file_daemon", test_log_file_daemon_capped },
        { "log_file_autostart", test_log_file_autostarted },
        { "fd_limit", test_fd_limit_refusals_counted },
        { "clock_linger", test_commit_linger_ignores_wall_clock },
        { "writer_times", test_writer_times },
        { "empty_batch_no_flush", test_empty_batch_no_flush },
        { "idle_broker_sleeps", test_idle_broker_sleeps },
        { "sweep_after_restart", test_sweep_after_restart },
        { NULL, NULL },
    };
    int rc = run_tests(argc, argv, tests);
    coord_msg_destroy(&m);
    return rc;
}
