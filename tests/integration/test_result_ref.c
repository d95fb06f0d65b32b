/* test_result_ref.c - results by reference through a real broker: an owner
 * completes with a sealed memfd passed over the socket (SCM_RIGHTS), and
 * every follower that said fds in its hello gets its own descriptor of the
 * same bytes (read-only, offset 0, offsets independent); a connection
 * without fds gets a result_ref (a /proc path, its inode, a ref released by
 * flight.unref or by closing).  What is refused: an unsealed memfd, a size
 * that is not the memfd's, a descriptor that is no memfd (INVALID_OPTIONS),
 * one past --max-ref-bytes (TOO_LARGE), result_fd with no descriptor
 * (BAD_FRAME, that connection only), and every refused descriptor is closed
 * by the broker.  keep_ms > 0 keeps the bytes as a 0600 file in
 * DATA/results that survives kill -9 and a restart (served to a later join
 * and to record.get); expiry and record.purge remove it, and a leftover file
 * no record names is removed at start.  A stale record by reference goes
 * to the revalidation's owner as a descriptor declared in its `stale` map. */
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "coord-wire-limits.h"
#include "harness.h"

#define T 5000                  /* ms to wait for what must happen */

static struct broker_proc bp;
static coord_msg m;

static bool role_is(const char *role) { return msg_str_is(&m, "role", role, strlen(role)); }

/* A memfd holding n bytes of data, with the seals given (F_SEAL_*). */
static int memfd_with(const uint8_t *data, size_t n, int seals)
{
    int fd = memfd_create("result", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    size_t off = 0;
    while (fd >= 0 && off < n) {
        ssize_t w = write(fd, data + off, n - off);
        if (w <= 0)
            break;
        off += (size_t)w;
    }
    if (fd < 0 || off < n || (seals && fcntl(fd, F_ADD_SEALS, seals) != 0)) {
        perror("memfd");
        exit(2);
    }
    return fd;
}

#define SEALED (F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW)

static void fill(uint8_t *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)((i * 2654435761u + seed) >> 7);
}

static struct rcl *fd_client(bool fds)
{
    struct rcl *c = rcl_connect(bp.sock);
    if (!c || rcl_hello_fds(c, NULL, fds) != 0) {
        fprintf(stderr, "cannot connect to %s\n", bp.sock);
        exit(2);
    }
    return c;
}

static void join(struct rcl *c, uint64_t rid, const char *key, uint64_t max_age)
{
    coord_enc *e = rcl_begin(c, "flight.join", rid);
    coord_enc_kv_cstr(e, "key", key);
    coord_enc_kv_uint(e, "wait_ms", 10000);
    if (max_age)
        coord_enc_kv_uint(e, "max_age_ms", max_age);
    REQUIRE(rcl_send(c) == 0);
}

static void own(struct rcl *c, uint64_t rid, const char *key, uint64_t *flight, uint64_t *fence)
{
    join(c, rid, key, 0);
    REQUIRE(rcl_reply(c, rid, T, &m) == 0 && role_is("owner"));
    *flight = msg_uint(&m, "flight");
    *fence = msg_uint(&m, "fence");
}

/* flight.complete by reference: fd is passed (and so consumed) unless -1. */
static int complete_ref(struct rcl *c, uint64_t rid, uint64_t flight, uint64_t fence,
                        uint64_t size, int fd, uint64_t keep_ms)
{
    coord_enc *e = rcl_begin(c, "flight.complete", rid);
    coord_enc_kv_uint(e, "flight", flight);
    coord_enc_kv_uint(e, "fence", fence);
    coord_enc_kv_uint(e, "result_fd", size);
    if (keep_ms)
        coord_enc_kv_uint(e, "keep_ms", keep_ms);
    int rc = fd >= 0 ? rcl_send_fd(c, fd) : rcl_send(c);
    if (fd >= 0)
        close(fd);
    return rc == 0 ? rcl_reply(c, rid, T, &m) : -1;
}

/* Descriptors the broker has open now. */
static int broker_fds(void)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd", (int)bp.pid);
    DIR *d = opendir(path);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        n += de->d_name[0] != '.';
    closedir(d);
    return n;
}

/* Files in DATA/results; the first one's name in first (if given). */
static int result_files(char *first, size_t n)
{
    char path[400];
    if (first && n)
        first[0] = 0;
    snprintf(path, sizeof path, "%s/results", bp.data);
    DIR *d = opendir(path);
    if (!d)
        return -1;
    int k = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        if (k++ == 0 && first)
            snprintf(first, n, "%.100s", de->d_name);
    }
    closedir(d);
    return k;
}

/* Waits (up to T) until DATA/results holds want files. */
static bool result_files_become(int want)
{
    uint64_t end = now_ms() + T;
    while (result_files(NULL, 0) != want && now_ms() < end)
        usleep(20000);
    return result_files(NULL, 0) == want;
}

/* ---- cases ---- */

/* One owner, three followers with fds: each gets its own descriptor. */
static void three_followers(void)
{
    start_or_exit(&bp, NULL);
    struct rcl *own_c = fd_client(true), *f[3];
    size_t n = 300 * 1024 + 7;
    uint8_t *data = malloc(n);
    REQUIRE(data);
    fill(data, n, 1);
    uint64_t flight, fence;
    own(own_c, 2, "big", &flight, &fence);
    for (int i = 0; i < 3; i++) {
        f[i] = fd_client(true);
        join(f[i], 2, "big", 0);
        REQUIRE(rcl_sync(f[i]) == 0);          /* its join is in: a follower */
    }
    int fds_before = broker_fds();
    REQUIRE(complete_ref(own_c, 3, flight, fence, n, memfd_with(data, n, SEALED), 0) == 0);
    CHECK(msg_ok(&m));
    CHECK_EQ_U(msg_uint(&m, "delivered"), 3);
    int got[3];
    for (int i = 0; i < 3; i++) {
        REQUIRE(rcl_reply(f[i], 2, T, &m) == 0);
        CHECK(role_is("result"));
        CHECK_EQ_U(msg_uint(&m, "result_fd"), n);
        CHECK(!msg_has(&m, "result"));
        got[i] = rcl_take_fd(f[i]);
        REQUIRE(got[i] >= 0);
        CHECK((fcntl(got[i], F_GETFL) & O_ACCMODE) == O_RDONLY);
    }
    /* independent offsets: reading one moves no other */
    CHECK(fd_reads_as(got[0], data, n));
    CHECK_EQ_U((uint64_t)lseek(got[1], 0, SEEK_CUR), 0);
    uint8_t half[100];
    CHECK(read(got[1], half, sizeof half) == (ssize_t)sizeof half);
    CHECK(memcmp(half, data, sizeof half) == 0);
    CHECK_EQ_U((uint64_t)lseek(got[2], 0, SEEK_CUR), 0);
    CHECK(fd_reads_as(got[1], data + sizeof half, n - sizeof half));
    void *map = mmap(NULL, n, PROT_READ, MAP_PRIVATE, got[2], 0);
    CHECK(map != MAP_FAILED && memcmp(map, data, n) == 0);
    if (map != MAP_FAILED)
        munmap(map, n);
    for (int i = 0; i < 3; i++) {
        close(got[i]);
        CHECK_EQ_U(rcl_fds_queued(f[i]), 0);     /* exactly one each */
        rcl_close(f[i]);
    }
    /* the flight is over: the broker holds no descriptor of it any more */
    CHECK(broker_fds() <= fds_before);
    CHECK_EQ_U(rcl_stat(own_c, "fds_sent"), 3);
    rcl_close(own_c);
    free(data);
    stop_and_clean(&bp);
}

/* Refusals: each descriptor is closed by the broker, the flight and the
 * connection stay usable, other connections see nothing. */
static void refusals(void)
{
    const char *args[] = { "--max-ref-bytes", "4096", NULL };
    start_or_exit(&bp, args);
    struct rcl *c = fd_client(true), *other = fd_client(true);
    uint8_t data[5000];
    fill(data, sizeof data, 2);
    uint64_t flight, fence;
    own(c, 2, "k", &flight, &fence);
    int base = broker_fds();

    REQUIRE(complete_ref(c, 3, flight, fence, 100, memfd_with(data, 100, 0), 0) == 0);
    CHECK(msg_code_is(&m, "INVALID_OPTIONS"));
    CHECK(strstr((const char *)msg_bytes(&m, "message").ptr, "F_SEAL_WRITE missing") != NULL);
    REQUIRE(complete_ref(c, 4, flight, fence, 100,
                         memfd_with(data, 100, F_SEAL_WRITE | F_SEAL_SHRINK), 0) == 0);
    CHECK(msg_code_is(&m, "INVALID_OPTIONS"));
    CHECK(strstr((const char *)msg_bytes(&m, "message").ptr, "F_SEAL_GROW missing") != NULL);
    REQUIRE(complete_ref(c, 5, flight, fence, 12, memfd_with(data, 10, SEALED), 0) == 0);
    CHECK(msg_code_is(&m, "INVALID_OPTIONS"));
    CHECK(strstr((const char *)msg_bytes(&m, "message").ptr, "size is 10, result_fd says 12") != NULL);
    int p[2];
    REQUIRE(pipe(p) == 0);
    close(p[1]);
    REQUIRE(complete_ref(c, 6, flight, fence, 0, p[0], 0) == 0);
    CHECK(msg_code_is(&m, "INVALID_OPTIONS"));
    CHECK(strstr((const char *)msg_bytes(&m, "message").ptr, "not a memfd") != NULL);
    REQUIRE(complete_ref(c, 7, flight, fence, sizeof data, memfd_with(data, sizeof data, SEALED),
                         0) == 0);
    CHECK(msg_code_is(&m, "TOO_LARGE"));
    /* every refused descriptor is closed */
    CHECK(broker_fds() <= base);
    /* the flight is still the owner's: a good completion goes through */
    REQUIRE(complete_ref(c, 10, flight, fence, 100, memfd_with(data, 100, SEALED), 0) == 0);
    CHECK(msg_ok(&m));
    CHECK(broker_fds() <= base);

    /* result_fd without a descriptor: BAD_FRAME and that connection only */
    own(c, 11, "k2", &flight, &fence);
    CHECK(complete_ref(c, 12, flight, fence, 10, -1, 0) != 0);   /* no reply to 12 */
    REQUIRE(rcl_reply(c, 0, T, &m) == 0);
    CHECK(msg_code_is(&m, "BAD_FRAME"));
    CHECK(rcl_wait_eof(c, T));
    REQUIRE(rcl_sync(other) == 0);
    CHECK_EQ_U(rcl_stat(other, "bad_frames"), 1);
    rcl_close(c);
    rcl_close(other);
    stop_and_clean(&bp);
}

/* A descriptor sent with a frame that declares none stays queued: the
 * next frame that declares one takes the oldest.  More than
 * LIMIT_FDS_QUEUED unclaimed: BAD_FRAME. */
static void too_many_unclaimed(void)
{
    start_or_exit(&bp, NULL);
    struct rcl *c = fd_client(true), *other = fd_client(false);
    uint8_t byte = 0, data[100];
    fill(data, sizeof data, 6);
    uint64_t flight, fence;
    own(c, 2, "q", &flight, &fence);
    rcl_begin(c, "ping", 3);
    int fd0 = memfd_with(data, 10, SEALED);
    REQUIRE(rcl_send_fd(c, fd0) == 0);
    close(fd0);
    REQUIRE(rcl_reply(c, 3, T, &m) == 0 && msg_ok(&m));
    /* claims the ping's 10-byte memfd, not its own 100-byte one */
    REQUIRE(complete_ref(c, 4, flight, fence, 100, memfd_with(data, 100, SEALED), 0) == 0);
    CHECK(msg_code_is(&m, "INVALID_OPTIONS"));
    CHECK(strstr((const char *)msg_bytes(&m, "message").ptr, "size is 10") != NULL);
    /* and the next one claims that 100-byte one */
    REQUIRE(complete_ref(c, 5, flight, fence, 100, memfd_with(data, 10, SEALED), 0) == 0);
    CHECK(msg_ok(&m));
    /* one is queued (the last 10-byte one); more pile up past the limit */
    for (uint64_t i = 1; i <= LIMIT_FDS_QUEUED; i++) {
        rcl_begin(c, "ping", 10 + i);
        int fd = memfd_with(&byte, 1, SEALED);
        int rc = rcl_send_fd(c, fd);
        close(fd);
        if (rc != 0)
            break;
        if (i < LIMIT_FDS_QUEUED)
            REQUIRE(rcl_reply(c, 10 + i, T, &m) == 0 && msg_ok(&m));
    }
    CHECK(rcl_reply(c, 0, T, &m) == 0 && msg_code_is(&m, "BAD_FRAME"));
    CHECK(rcl_wait_eof(c, T));
    REQUIRE(rcl_sync(other) == 0);
    rcl_close(c);
    rcl_close(other);
    stop_and_clean(&bp);
}

/* keep_ms: a 0600 file that survives kill -9; later joins and record.get
 * are served from it; the key's purge removes it. */
static void durable(void)
{
    start_or_exit(&bp, NULL);
    struct rcl *c = fd_client(true), *f = fd_client(true);
    size_t n = 200000;
    uint8_t *data = malloc(n);
    REQUIRE(data);
    fill(data, n, 3);
    uint64_t flight, fence;
    own(c, 2, "kept", &flight, &fence);
    join(f, 2, "kept", 0);
    REQUIRE(rcl_sync(f) == 0);
    REQUIRE(complete_ref(c, 3, flight, fence, n, memfd_with(data, n, SEALED), 60000) == 0);
    CHECK(msg_ok(&m));
    /* answered: the file is there, synced, 0600 */
    char name[128], path[600];
    CHECK(result_files(name, sizeof name) == 1);
    snprintf(path, sizeof path, "%s/results/%s", bp.data, name);
    struct stat st;
    REQUIRE(stat(path, &st) == 0);
    CHECK_EQ_U(st.st_mode & 0777, 0600);
    CHECK_EQ_U((uint64_t)st.st_size, n);
    REQUIRE(rcl_reply(f, 2, T, &m) == 0 && role_is("result"));
    int fd = rcl_take_fd(f);
    CHECK(fd >= 0 && fd_reads_as(fd, data, n));
    close(fd);
    rcl_close(c);
    rcl_close(f);

    broker_kill(&bp, SIGKILL);
    REQUIRE(broker_start(&bp, NULL) == 0);
    c = fd_client(true);
    join(c, 2, "kept", 60000);
    REQUIRE(rcl_reply(c, 2, T, &m) == 0);
    CHECK(role_is("result"));
    CHECK(msg_str_is(&m, "source", S("record")));
    CHECK_EQ_U(msg_uint(&m, "result_fd"), n);
    fd = rcl_take_fd(c);
    CHECK(fd >= 0 && fd_reads_as(fd, data, n));
    close(fd);
    coord_enc *e = rcl_begin(c, "record.get", 3);
    coord_enc_kv_cstr(e, "key", "kept");
    REQUIRE(rcl_send(c) == 0);
    REQUIRE(rcl_reply(c, 3, T, &m) == 0 && msg_ok(&m));
    CHECK_EQ_U(msg_uint(&m, "result_fd"), n);
    fd = rcl_take_fd(c);
    CHECK(fd >= 0 && fd_reads_as(fd, data, n));
    close(fd);
    rcl_request(c, "record.list", 4);
    REQUIRE(rcl_reply(c, 4, T, &m) == 0 && msg_ok(&m));
    const msgpack_object_array *recs = msg_array(&m, "records");
    REQUIRE(recs->size == 1);
    CHECK(map_bool(map_at(recs, 0), "by_ref"));
    CHECK_EQ_U(map_uint(map_at(recs, 0), "size"), n);

    /* a client without fds reads a record through result_ref */
    struct rcl *nofd = fd_client(false);
    e = rcl_begin(nofd, "record.get", 2);
    coord_enc_kv_cstr(e, "key", "kept");
    REQUIRE(rcl_send(nofd) == 0);
    REQUIRE(rcl_reply(nofd, 2, T, &m) == 0 && msg_ok(&m));
    const msgpack_object_map *ref = msg_map(&m, "result_ref");
    char rpath[128];
    coord_bytes pb = map_bytes(ref, "path");
    snprintf(rpath, sizeof rpath, "%.*s", (int)pb.len, (const char *)pb.ptr);
    fd = open(rpath, O_RDONLY | O_CLOEXEC);
    CHECK(fd >= 0 && fstat(fd, &st) == 0 && (uint64_t)st.st_ino == map_uint(ref, "ino"));
    CHECK(fd >= 0 && fd_reads_as(fd, data, n));
    if (fd >= 0)
        close(fd);
    rcl_close(nofd);

    /* purge: the record, then its file */
    e = rcl_begin(c, "record.purge", 5);
    coord_enc_kv_cstr(e, "prefix", "kept");
    REQUIRE(rcl_send(c) == 0);
    REQUIRE(rcl_reply(c, 5, T, &m) == 0 && msg_ok(&m));
    CHECK_EQ_U(msg_uint(&m, "deleted"), 1);
    CHECK_EQ_U(result_files(NULL, 0), 0);
    rcl_close(c);
    free(data);
    stop_and_clean(&bp);
}

/* Expiry removes the file; a replaced record's file goes too; a leftover
 * file no record names is removed at start. */
static void expiry_and_leftovers(void)
{
    start_or_exit(&bp, NULL);
    struct rcl *c = fd_client(true);
    uint8_t data[1000];
    fill(data, sizeof data, 4);
    uint64_t flight, fence;
    own(c, 2, "short", &flight, &fence);
    REQUIRE(complete_ref(c, 3, flight, fence, 100, memfd_with(data, 100, SEALED), 300) == 0);
    CHECK(msg_ok(&m));
    own(c, 4, "long", &flight, &fence);
    REQUIRE(complete_ref(c, 5, flight, fence, 200, memfd_with(data, 200, SEALED), 600000) == 0);
    own(c, 6, "long", &flight, &fence);      /* replaces the record of "long" */
    REQUIRE(complete_ref(c, 7, flight, fence, 300, memfd_with(data, 300, SEALED), 600000) == 0);
    CHECK(msg_ok(&m));
    /* the expired one is swept, the replaced one gone: one file left */
    CHECK(result_files_become(1));
    rcl_close(c);
    broker_kill(&bp, SIGTERM);
    char path[600];
    snprintf(path, sizeof path, "%s/results/0000000000000001-deadbeef.result", bp.data);
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    REQUIRE(fd >= 0);
    close(fd);
    CHECK_EQ_U(result_files(NULL, 0), 2);
    REQUIRE(broker_start(&bp, NULL) == 0);
    CHECK_EQ_U(result_files(NULL, 0), 1);          /* the leftover is gone */
    c = fd_client(true);
    coord_enc *e = rcl_begin(c, "record.get", 2);
    coord_enc_kv_cstr(e, "key", "long");
    REQUIRE(rcl_send(c) == 0);
    REQUIRE(rcl_reply(c, 2, T, &m) == 0 && msg_ok(&m));
    CHECK_EQ_U(msg_uint(&m, "result_fd"), 300);
    fd = rcl_take_fd(c);
    CHECK(fd >= 0 && fd_reads_as(fd, data, 300));
    if (fd >= 0)
        close(fd);
    rcl_close(c);
    stop_and_clean(&bp);
}

/* A record by reference past max_age_ms, within stale_ms: the first joiner
 * revalidates and gets the stale bytes as a descriptor in its `stale` map;
 * the next gets them at once (stale, revalidating) as a descriptor, and one
 * without fds as a result_ref. */
static void stale_by_ref(void)
{
    start_or_exit(&bp, NULL);
    struct rcl *c = fd_client(true), *d = fd_client(true), *nofd = fd_client(false);
    uint8_t data[3000];
    fill(data, sizeof data, 7);
    uint64_t flight, fence;
    own(c, 2, "s", &flight, &fence);
    REQUIRE(complete_ref(c, 3, flight, fence, sizeof data,
                         memfd_with(data, sizeof data, SEALED), 600000) == 0 && msg_ok(&m));
    /* the record must be older than max_age_ms (1 ms) */
    uint64_t t0 = now_ms();
    while (now_ms() < t0 + 3)
        usleep(1000);
    coord_enc *e = rcl_begin(d, "flight.join", 2);
    coord_enc_kv_cstr(e, "key", "s");
    coord_enc_kv_uint(e, "max_age_ms", 1);
    coord_enc_kv_uint(e, "stale_ms", 600000);
    REQUIRE(rcl_send(d) == 0);
    REQUIRE(rcl_reply(d, 2, T, &m) == 0 && role_is("owner"));
    const msgpack_object_map *st = msg_map(&m, "stale");
    CHECK_EQ_U(map_uint(st, "result_fd"), sizeof data);
    int fd = rcl_take_fd(d);
    CHECK(fd >= 0 && fd_reads_as(fd, data, sizeof data));
    if (fd >= 0)
        close(fd);
    struct rcl *who[2] = { c, nofd };
    for (int i = 0; i < 2; i++) {
        e = rcl_begin(who[i], "flight.join", 10);
        coord_enc_kv_cstr(e, "key", "s");
        coord_enc_kv_uint(e, "max_age_ms", 1);
        coord_enc_kv_uint(e, "stale_ms", 600000);
        REQUIRE(rcl_send(who[i]) == 0);
        REQUIRE(rcl_reply(who[i], 10, T, &m) == 0 && role_is("result"));
        CHECK(msg_bool(&m, "stale") && msg_bool(&m, "revalidating"));
        if (i == 0) {
            CHECK_EQ_U(msg_uint(&m, "result_fd"), sizeof data);
            fd = rcl_take_fd(who[i]);
        } else {
            char path[128];
            coord_bytes pb = map_bytes(msg_map(&m, "result_ref"), "path");
            snprintf(path, sizeof path, "%.*s", (int)pb.len, (const char *)pb.ptr);
            fd = open(path, O_RDONLY | O_CLOEXEC);
        }
        CHECK(fd >= 0 && fd_reads_as(fd, data, sizeof data));
        if (fd >= 0)
            close(fd);
    }
    rcl_close(c);
    rcl_close(d);
    rcl_close(nofd);
    stop_and_clean(&bp);
}

/* The path of a result_ref in m (into buf). */
static const char *ref_path(char *buf, size_t n)
{
    coord_bytes pb = map_bytes(msg_map(&m, "result_ref"), "path");
    snprintf(buf, n, "%.*s", (int)pb.len, (const char *)pb.ptr);
    return buf;
}

/* Waits (up to T) until path cannot be opened any more. */
static bool path_goes(const char *path)
{
    uint64_t end = now_ms() + T;
    for (;;) {
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            return true;
        close(fd);
        if (now_ms() >= end)
            return false;
        usleep(20000);
    }
}

/* Connections without fds: result_ref, flight.unref, released on close. */
static void result_refs(void)
{
    start_or_exit(&bp, NULL);
    struct rcl *own_c = fd_client(true), *a = fd_client(false), *b = fd_client(false);
    uint8_t data[4096];
    fill(data, sizeof data, 5);
    uint64_t flight, fence;
    own(own_c, 2, "r", &flight, &fence);
    join(a, 2, "r", 0);
    join(b, 2, "r", 0);
    REQUIRE(rcl_sync(a) == 0 && rcl_sync(b) == 0);
    REQUIRE(complete_ref(own_c, 3, flight, fence, sizeof data,
                         memfd_with(data, sizeof data, SEALED), 0) == 0);
    CHECK_EQ_U(msg_uint(&m, "delivered"), 2);
    char pa[128], pbuf[128];
    REQUIRE(rcl_reply(a, 2, T, &m) == 0 && role_is("result"));
    CHECK(!msg_has(&m, "result_fd"));
    const msgpack_object_map *ref = msg_map(&m, "result_ref");
    CHECK_EQ_U(map_uint(ref, "size"), sizeof data);
    uint64_t ino = map_uint(ref, "ino"), aref = map_uint(ref, "ref");
    ref_path(pa, sizeof pa);
    CHECK_EQ_U(rcl_fds_queued(a), 0);
    int fd = open(pa, O_RDONLY | O_CLOEXEC);
    struct stat st;
    REQUIRE(fd >= 0);
    CHECK(fstat(fd, &st) == 0 && (uint64_t)st.st_ino == ino);
    CHECK(fd_reads_as(fd, data, sizeof data));
    close(fd);
    REQUIRE(rcl_reply(b, 2, T, &m) == 0 && role_is("result"));
    ref_path(pbuf, sizeof pbuf);
    CHECK_EQ_U(map_uint(msg_map(&m, "result_ref"), "ino"), ino);
    /* unref: released once, then nothing to release; b holds its own */
    coord_enc *e = rcl_begin(a, "flight.unref", 3);
    coord_enc_kv_uint(e, "ref", aref);
    REQUIRE(rcl_send(a) == 0);
    REQUIRE(rcl_reply(a, 3, T, &m) == 0 && msg_ok(&m));
    CHECK(msg_bool(&m, "released"));
    e = rcl_begin(a, "flight.unref", 4);
    coord_enc_kv_uint(e, "ref", aref);
    REQUIRE(rcl_send(a) == 0);
    REQUIRE(rcl_reply(a, 4, T, &m) == 0 && msg_ok(&m));
    CHECK(!msg_bool(&m, "released"));
    /* b still holds its ref: the path opens the bytes until b closes */
    fd = open(pbuf, O_RDONLY | O_CLOEXEC);
    CHECK(fd >= 0 && fstat(fd, &st) == 0 && (uint64_t)st.st_ino == ino);
    if (fd >= 0)
        close(fd);
    rcl_close(b);
    CHECK(path_goes(pbuf));
    /* one holder: its unref closes the broker's descriptor */
    own(own_c, 4, "r2", &flight, &fence);
    join(a, 5, "r2", 0);
    REQUIRE(rcl_sync(a) == 0);
    REQUIRE(complete_ref(own_c, 5, flight, fence, 10, memfd_with(data, 10, SEALED), 0) == 0);
    REQUIRE(rcl_reply(a, 5, T, &m) == 0 && role_is("result"));
    aref = map_uint(msg_map(&m, "result_ref"), "ref");
    ref_path(pa, sizeof pa);
    fd = open(pa, O_RDONLY | O_CLOEXEC);
    CHECK(fd >= 0 && fd_reads_as(fd, data, 10));
    if (fd >= 0)
        close(fd);
    e = rcl_begin(a, "flight.unref", 6);
    coord_enc_kv_uint(e, "ref", aref);
    REQUIRE(rcl_send(a) == 0);
    REQUIRE(rcl_reply(a, 6, T, &m) == 0 && msg_bool(&m, "released"));
    CHECK(path_goes(pa));
    rcl_close(a);
    rcl_close(own_c);
    stop_and_clean(&bp);
}

/* DATA/results not usable (a file where the directory goes): a completion
 * by reference that would be kept is refused STORAGE at once and the
 * flight stays the owner's; unkept, and inline, completions still work. */
static void results_dir_unusable(void)
{
    broker_paths(&bp);
    REQUIRE(mkdir(bp.data, 0700) == 0);
    char path[400];
    snprintf(path, sizeof path, "%s/results", bp.data);
    int f = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
    REQUIRE(f >= 0);
    close(f);
    REQUIRE(broker_start(&bp, NULL) == 0);
    struct rcl *c = fd_client(true), *fol = fd_client(true);
    uint8_t data[64];
    fill(data, sizeof data, 9);
    uint64_t flight, fence;
    own(c, 2, "kept", &flight, &fence);
    join(fol, 2, "kept", 0);
    REQUIRE(rcl_sync(fol) == 0);
    REQUIRE(complete_ref(c, 3, flight, fence, sizeof data,
                         memfd_with(data, sizeof data, SEALED), 600000) == 0);
    CHECK(msg_code_is(&m, "STORAGE"));
    CHECK(strstr((const char *)msg_bytes(&m, "message").ptr, "results/") != NULL);
    /* still the owner's: the same result, not kept, reaches the follower */
    REQUIRE(complete_ref(c, 4, flight, fence, sizeof data,
                         memfd_with(data, sizeof data, SEALED), 0) == 0);
    CHECK(msg_ok(&m) && msg_uint(&m, "delivered") == 1);
    REQUIRE(rcl_reply(fol, 2, T, &m) == 0 && role_is("result"));
    int got = rcl_take_fd(fol);
    CHECK(got >= 0 && fd_reads_as(got, data, sizeof data));
    if (got >= 0)
        close(got);
    /* an inline result is kept as ever: LMDB needs no results/ */
    own(c, 5, "inline", &flight, &fence);
    coord_enc *e = rcl_begin(c, "flight.complete", 6);
    coord_enc_kv_uint(e, "flight", flight);
    coord_enc_kv_uint(e, "fence", fence);
    coord_enc_kv_bin(e, "result", data, sizeof data);
    coord_enc_kv_uint(e, "keep_ms", 600000);
    REQUIRE(rcl_send(c) == 0);
    REQUIRE(rcl_reply(c, 6, T, &m) == 0 && msg_ok(&m));
    rcl_close(c);
    rcl_close(fol);
    stop_and_clean(&bp);
}

int main(int argc, char **argv)
{
    static const struct test_case tests[] = {
        { "three_followers", three_followers },
        { "refusals", refusals },
        { "too_many_unclaimed", too_many_unclaimed },
        { "durable", durable },
        { "expiry_and_leftovers", expiry_and_leftovers },
        { "result_refs", result_refs },
        { "stale_by_ref", stale_by_ref },
        { "results_dir_unusable", results_dir_unusable },
        { NULL, NULL },
    };
    coord_msg_init(&m);
    int rc = run_tests(argc, argv, tests);
    coord_msg_destroy(&m);
    return rc;
}
