/* store.c - LMDB environment, the writer thread and its group commit.
 *
 * Storage that is damaged, missing or full must give a clear error, never a
 * signal.  LMDB reads through a shared map, so a page missing from a
 * truncated data.mdb is a SIGBUS at its first read: store_open compares
 * the file with the last page its meta page names before anything else is
 * read.  Data pages are written with pwrite (no MDB_WRITEMAP), so a full
 * disk is an error return; the one file LMDB writes through a map is
 * lock.mdb, which it only ftruncates (sparse), so on a full disk its first
 * store would be a SIGBUS: store_open allocates it for real first.  The
 * map is capped at --max-data-size: past it a job fails with STORAGE and
 * says why, and the rest of its batch still commits.
 *
 * One flush per batch.  A plain LMDB commit syncs twice: the data pages
 * (fdatasync), then the meta page that makes them current (an O_DSYNC
 * write).  The environment is opened with MDB_NOMETASYNC instead, so a
 * commit writes its pages, fdatasyncs them, and writes its meta page
 * without waiting for it.  Batch n is therefore durable only once a later
 * flush covered its meta page: the data fdatasync of batch n+1 (which
 * flushes every dirty page of data.mdb, n's meta page included), or, when
 * nothing else is queued, an explicit mdb_env_sync.  The writer keeps the
 * last committed batch back ("unsynced") and hands it to the loop, whose
 * done callbacks send the replies, only after that covering flush
 * returned.  Nothing is answered from an unsynced batch: a generation
 * reaches its campaigner, a commit its committer, a completion record its
 * owner and followers only once it is on disk.  A batch that wrote nothing
 * (LMDB commits it as a no-op) has nothing to flush: with no unsynced
 * batch before it, it is answered at once.
 *
 * The crash argument.  LMDB keeps two meta pages and, on open, takes the
 * valid one with the higher transaction id.  (1) Batch n's data pages are
 * fdatasynced before n's meta page is written, so a meta page that reached
 * the disk only names pages that are on it.  (2) A transaction reuses only
 * pages freed before the oldest live snapshot, never pages of the tree
 * the previous meta names (n-1, on disk while n's meta may not be), so a
 * crash at any instant leaves meta n-1 intact and naming intact pages, or
 * meta n the same way.  (3) So a crash (kill -9, power loss) loses at most
 * the unsynced batch, whose jobs nobody heard about; every batch whose
 * done callbacks ran had its meta page flushed before them.  (This is
 * LMDB's documented guarantee for MDB_NOMETASYNC: atomic and consistent,
 * the last commit may be undone.  MDB_NOSYNC would not be: without the
 * data flush a meta page could name pages that never reached the disk.)
 * The epoch written by store_epoch outside the writer is synced
 * explicitly before it returns.
 *
 * Reads on the loop never see the unsynced batch: they would let an answer
 * depend on a write a crash could undo (a duplicate op_id reported as
 * applied, a record served to a joiner).  The writer opens a read snapshot
 * right after each commit and publishes it together with that batch, once
 * covered; store_read_begin hands out the published snapshot, so the loop
 * reads exactly the durable state, which includes every batch whose done
 * callbacks ran (read-your-writes holds).  Jobs of batch n+1 do see batch
 * n (the same write transaction chain), but they are answered only after
 * n+1 is covered, and n before it.
 *
 * Wake-ups: a submit wakes the writer only when it waits for work or the
 * queue reached what it lingers for; the writer wakes the loop once per
 * covered batch (uv_async coalesces).  With an unsynced batch the writer
 * commits whatever is queued at once (that commit is the flush the batch
 * waits for) or, with nothing queued, flushes explicitly; with none it
 * waits a little for the committers it just answered (LINGER_NS for the
 * first, LINGER_GAP_NS between the next), so one commit carries them.
 *
 * data.mdb grows ahead of LMDB in PREALLOC_BYTES steps of zeros, written
 * inside a write transaction (LMDB's writer lock: no commit writes beyond
 * the old end meanwhile): a commit that grew the file would make its
 * fdatasync commit ext4's journal as well, a second flush. */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>
#include "log.h"
#include "errors.h"
#include "histo.h"
#include "store.h"

#define INITIAL_MAP_SIZE (256u << 20)   /* address space, not disk */
#define MAX_BATCH 4096
/* Group commit waits this long at most for the rest of a batch (like
 * PostgreSQL's commit_delay), and only while others are committing too. */
#define LINGER_NS 250000
#define LINGER_GAP_NS 40000
/* lock.mdb holds LMDB's reader table: 8 KiB for its default 126 readers on
 * x86-64.  Allocating more only gives it more reader slots. */
#define LOCK_FILE_BYTES (16u << 10)
/* LMDB reports a short write as EIO: with less free space than this left
 * in the data dir, that EIO is a full disk and the message says so. */
#define LOW_SPACE_BYTES (256u << 10)
/* data.mdb is kept at least PREALLOC_LOW bytes past its last page, grown
 * PREALLOC_BYTES at a time (one journal flush per step instead of one per
 * growing commit; the disk space is used a few MiB early). */
#define PREALLOC_BYTES (4u << 20)
#define PREALLOC_LOW (1u << 20)
/* Grow-and-retry rounds for one batch (doubling from 256 MiB, this reaches
 * any cap). */
#define MAX_ATTEMPTS 64

static const char msg_no_space[] = "no space left on device";

/* The linger deadlines are on CLOCK_MONOTONIC (the condvar is created for
 * it): on CLOCK_REALTIME a clock stepped back after the deadline was taken
 * would hold every queued commit until the wall clock caught up. */
static struct timespec ts_add(struct timespec t, long ns)
{
    t.tv_nsec += ns;
    while (t.tv_nsec >= 1000000000) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000;
    }
    return t;
}

static bool ts_before(struct timespec a, struct timespec b)
{
    return a.tv_sec < b.tv_sec || (a.tv_sec == b.tv_sec && a.tv_nsec < b.tv_nsec);
}

struct store {
    MDB_env *env;
    MDB_dbi dbi[DB_COUNT];
    size_t map_size;
    size_t max_size;              /* --max-data-size */
    unsigned psize;               /* LMDB's page size */
    char *dir;                    /* owned */
    char limit_msg[96];           /* a job's why at the cap */
    uint64_t limit_hits;          /* under mu */
    struct log_rate limit_log;    /* writer thread only */

    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cond;          /* on CLOCK_MONOTONIC */
    /* resizing the map needs every transaction of the process closed */
    pthread_rwlock_t resize;
    struct store_job *queue_head, *queue_tail;
    unsigned queued;
    unsigned last_batch, prev_batch;  /* sizes, to guess who comes back */
    struct store_job *done_head, *done_tail;
    /* Writer thread only: the last committed batch, its meta page not yet
     * flushed, and the snapshot of it (published once it is). */
    struct store_job *unsynced, *unsynced_last;
    unsigned unsynced_n;
    MDB_txn *unsynced_snap;
    unsigned just_acked;          /* under mu: jobs of the last covered batch */
    /* under mu: a submit wakes the writer only when it waits for work
     * (wake_at 1) or lingers and the queue reached wake_at; else 0 */
    unsigned wake_at;
    /* under mu: a covered snapshot for the loop, not yet taken */
    MDB_txn *snap_ready;
    MDB_txn *snap;                /* loop thread: what store_read_begin reads */
    uint64_t syncs;               /* under mu: explicit flushes (idle) */
    int stopping;
    int thread_started;

    uv_async_t async;
    uint64_t batches;             /* under mu: the writer counts them */
    uint64_t jobs;                /* loop thread: answered jobs */
    /* under mu: where the writer's time goes (stats, coord-bench), in us */
    uint64_t commit_us;           /* run_batch: apply, write, data flush */
    uint64_t flush_us;            /* explicit flushes covering a batch */
    uint64_t linger_us;           /* waiting for a batch's committers */
};

static const char *db_names[DB_COUNT] = {
    "meta", "records", "expiry", "leaders", "kv", "ops", "flight_off",
    "desc", "hist", "claims", "pending",
};

MDB_dbi store_dbi(struct store *l, enum store_db db) { return l->dbi[db]; }
uint64_t store_batches(struct store *l)
{
    pthread_mutex_lock(&l->mu);
    uint64_t n = l->batches;
    pthread_mutex_unlock(&l->mu);
    return n;
}
uint64_t store_jobs(const struct store *l) { return l->jobs; }

void store_times(struct store *l, struct store_times *t)
{
    pthread_mutex_lock(&l->mu);
    t->commit_us = l->commit_us;
    t->flush_us = l->flush_us;
    t->linger_us = l->linger_us;
    t->flushes = l->syncs;
    pthread_mutex_unlock(&l->mu);
}

/* map_size changes on the writer thread, under the resize lock */
uint64_t store_map_size(struct store *l)
{
    pthread_rwlock_rdlock(&l->resize);
    uint64_t n = l->map_size;
    pthread_rwlock_unlock(&l->resize);
    return n;
}

uint64_t store_data_limit_hits(struct store *l)
{
    pthread_mutex_lock(&l->mu);
    uint64_t n = l->limit_hits;
    pthread_mutex_unlock(&l->mu);
    return n;
}

static bool disk_nearly_full(const char *dir)
{
    struct statvfs sv;
    if (statvfs(dir, &sv) < 0)
        return false;
    unsigned long long blocks = geteuid() == 0 ? sv.f_bfree : sv.f_bavail;
    return blocks * sv.f_frsize < LOW_SPACE_BYTES;
}

/* An error of LMDB or of the system as a person should read it. */
static const char *storage_strerror(const char *dir, int rc)
{
    if (rc == ENOSPC || (rc == EIO && disk_nearly_full(dir)))
        return msg_no_space;
    return mdb_strerror(rc);
}

/* The published snapshot: the durable state.  The resize lock is held
 * while it is read, not in between (an idle read transaction keeps only
 * page numbers and its reader slot, so it survives the map being moved). */
int store_read_begin(struct store *l, MDB_txn **txn)
{
    pthread_rwlock_rdlock(&l->resize);
    if (!l->snap) {
        pthread_rwlock_unlock(&l->resize);
        return MDB_BAD_TXN;
    }
    *txn = l->snap;
    return 0;
}

void store_read_end(struct store *l, MDB_txn *txn)
{
    (void)txn;                    /* stays open until the next one replaces it */
    pthread_rwlock_unlock(&l->resize);
}


/* Doubles the map, up to max_size.  0 grown, -1 at the cap, or an MDB
 * error. */
static int grow_map(struct store *l)
{
    if (l->map_size >= l->max_size)
        return -1;
    pthread_rwlock_wrlock(&l->resize);
    size_t want = l->map_size * 2;
    if (want > l->max_size || want < l->map_size)
        want = l->max_size;
    int rc = mdb_env_set_mapsize(l->env, want);
    if (rc == 0)
        l->map_size = want;
    pthread_rwlock_unlock(&l->resize);
    log_event(rc ? LOG_ERROR : LOG_INFO, "ledger.grow", "map_size=%zu max=%zu rc=%d",
              l->map_size, l->max_size, rc);
    return rc;
}

static void count_limit(struct store *l, unsigned refused)
{
    uint64_t suppressed;
    pthread_mutex_lock(&l->mu);
    l->limit_hits += refused;
    pthread_mutex_unlock(&l->mu);
    if (log_rate_pass(&l->limit_log, refused, &suppressed))
        log_event(LOG_ERROR, "ledger.data_limit",
                  "error=\"%s\" map_size=%zu refused=%u suppressed=%llu",
                  l->limit_msg, l->map_size, refused, (unsigned long long)suppressed);
}

static unsigned fail_all(struct store_job *batch, const char *why)
{
    unsigned n = 0;
    for (struct store_job *j = batch; j; j = j->next, n++) {
        j->status = COORD_ESTORAGE;
        j->why = why;
    }
    return n;
}

/* Inside a write transaction: extends data.mdb with zeros when LMDB's
 * pages come within PREALLOC_LOW of its end, never past the map or the
 * cap.  Failing (a full disk) changes nothing LMDB relies on: it then
 * grows the file itself, and reports what it meets. */
static void prealloc(struct store *l)
{
    static const uint8_t zeros[64 << 10];
    MDB_envinfo info;
    mdb_filehandle_t fd;
    struct stat st;
    if (mdb_env_info(l->env, &info) || mdb_env_get_fd(l->env, &fd) || fstat(fd, &st))
        return;
    uint64_t used = ((uint64_t)info.me_last_pgno + 1) * l->psize;
    uint64_t limit = l->map_size < l->max_size ? l->map_size : l->max_size;
    if ((uint64_t)st.st_size >= used + PREALLOC_LOW || (uint64_t)st.st_size >= limit)
        return;
    uint64_t end = used + PREALLOC_BYTES;
    if (end > limit)
        end = limit;
    for (uint64_t at = (uint64_t)st.st_size; at < end;) {
        size_t n = end - at < sizeof zeros ? (size_t)(end - at) : sizeof zeros;
        ssize_t w = pwrite(fd, zeros, n, (off_t)at);
        if (w <= 0)
            return;
        at += (uint64_t)w;
    }
}

/* What a batch's commit did. */
enum batch_result {
    BATCH_WROTE,    /* a new meta page, the data flushed before it: the
                       unsynced batch is covered */
    BATCH_EMPTY,    /* nothing to write (a sweep with nothing due, a purge
                       matching nothing): no new page, nothing to flush */
    BATCH_OTHER,    /* failed, or another thread's commit came in between */
};

/* Runs one batch to a commit (its data pages flushed, its meta page
 * written, not flushed: see the top).  Every job gets its status.  A job
 * that fills the map makes the batch grow it and run again; once the map
 * is at its cap, that job alone fails (its nested transaction is dropped)
 * and the others commit.  Jobs must therefore compute the same results
 * when run again from the same state (an apply sets its outputs, never
 * adds to them). */
static enum batch_result run_batch(struct store *l, struct store_job *batch)
{
    /* First every job straight in the batch's transaction: a nested one per
     * job costs page copies and allocations, and nearly every batch
     * succeeds whole.  A job that fails (its writes must go) makes the
     * batch run again from the start, each job in a nested transaction,
     * as a map that fills does: the jobs then see the same state, so they
     * compute the same results. */
    bool nested = false;
    for (int attempt = 0; attempt < MAX_ATTEMPTS; attempt++) {
        MDB_txn *txn;
        int rc;
        bool at_cap = l->map_size >= l->max_size;
        enum batch_result res = BATCH_OTHER;
        unsigned refused = 0;
        bool renest = false;
        pthread_rwlock_rdlock(&l->resize);
        rc = mdb_txn_begin(l->env, NULL, 0, &txn);
        if (rc == 0 && attempt == 0)
            prealloc(l);
        for (struct store_job *j = batch; rc == 0 && !nested && j; j = j->next) {
            j->why = NULL;
            int st = j->apply(l, txn, j);
            j->status = st;
            if (st != 0) {
                renest = true;
                break;
            }
        }
        if (renest) {
            mdb_txn_abort(txn);
            pthread_rwlock_unlock(&l->resize);
            nested = true;
            continue;
        }
        for (struct store_job *j = batch; rc == 0 && nested && j; j = j->next) {
            MDB_txn *child;
            j->why = NULL;
            rc = mdb_txn_begin(l->env, txn, 0, &child);
            if (rc)
                break;
            int st = j->apply(l, child, j);
            if (st == 0) {
                rc = mdb_txn_commit(child);
            } else {
                mdb_txn_abort(child);
                if (st == MDB_MAP_FULL && !at_cap) {
                    rc = MDB_MAP_FULL;
                } else if (st == MDB_MAP_FULL) {
                    j->why = l->limit_msg;
                    refused++;
                } else if (st > 0) {
                    j->why = storage_strerror(l->dir, st);
                }
            }
            j->status = st > 0 ? COORD_ESTORAGE : st;
        }
        if (rc == 0) {
            size_t id = mdb_txn_id(txn);
            MDB_envinfo info;
            rc = mdb_txn_commit(txn);     /* frees txn, success or not */
            /* LMDB commits a transaction without dirty pages as a no-op:
             * the last transaction id stays id - 1 */
            if (rc == 0 && mdb_env_info(l->env, &info) == 0)
                res = info.me_last_txnid == id       ? BATCH_WROTE
                      : info.me_last_txnid + 1 == id ? BATCH_EMPTY
                                                     : BATCH_OTHER;
        } else {
            mdb_txn_abort(txn);
        }
        pthread_rwlock_unlock(&l->resize);
        if (rc == MDB_MAP_FULL) {
            int g = grow_map(l);
            if (g == 0)
                continue;
            if (g < 0) {                  /* the commit itself met the cap */
                count_limit(l, fail_all(batch, l->limit_msg));
                return BATCH_OTHER;
            }
            rc = g;
        }
        if (refused)
            count_limit(l, refused);
        if (rc) {
            const char *why = storage_strerror(l->dir, rc);
            log_event(LOG_ERROR, "ledger.commit_failed", "rc=%d error=\"%s\"", rc, why);
            fail_all(batch, why);
            res = BATCH_OTHER;
        }
        return res;
    }
    fail_all(batch, NULL);
    return BATCH_OTHER;
}

/* Hands jobs (first..last, n of them) to the loop, with snap (may be
 * NULL: none newer) as the snapshot the loop reads from now on. */
static void hand_back(struct store *l, struct store_job *first, struct store_job *last,
                      unsigned n, MDB_txn *snap)
{
    MDB_txn *old = NULL;
    pthread_mutex_lock(&l->mu);
    if (first) {
        if (l->done_tail)
            l->done_tail->next = first;
        else
            l->done_head = first;
        l->done_tail = last;
    }
    if (snap) {
        old = l->snap_ready;          /* never taken: the loop was busy */
        l->snap_ready = snap;
    }
    l->just_acked = n;
    pthread_mutex_unlock(&l->mu);
    if (old)
        mdb_txn_abort(old);
    uv_async_send(&l->async);
}

/* The unsynced batch is covered (flushed is true) or could not be: then
 * an explicit flush is tried, and when that fails too its jobs fail with
 * STORAGE (their writes may survive; they were never acknowledged). */
static void cover_unsynced(struct store *l, bool flushed)
{
    if (!l->unsynced && flushed)
        return;
    if (!flushed) {
        uint64_t t0 = now_us();
        int rc = mdb_env_sync(l->env, 1);
        uint64_t t1 = now_us();
        pthread_mutex_lock(&l->mu);
        l->syncs++;
        l->flush_us += t1 - t0;
        pthread_mutex_unlock(&l->mu);
        if (rc) {
            const char *why = storage_strerror(l->dir, rc);
            log_event(LOG_ERROR, "ledger.sync_failed", "rc=%d error=\"%s\"", rc, why);
            fail_all(l->unsynced, why);
        }
    }
    if (!l->unsynced)
        return;
    hand_back(l, l->unsynced, l->unsynced_last, l->unsynced_n, l->unsynced_snap);
    l->unsynced = l->unsynced_last = NULL;
    l->unsynced_n = 0;
    l->unsynced_snap = NULL;
}

/* Waits (mu held) for the committers of the batch covered last, who are
 * on their way back: until `expect` jobs are queued, LINGER_NS for the
 * first to come, then while they keep coming (a gap of LINGER_GAP_NS with
 * none ends it), never past LINGER_NS in all. */
static void linger(struct store *l, unsigned expect)
{
    struct timespec now, until, gap;
    clock_gettime(CLOCK_MONOTONIC, &now);
    until = ts_add(now, LINGER_NS);
    l->wake_at = expect;
    while (l->queued < expect && !l->stopping) {
        unsigned before = l->queued;
        gap = before ? ts_add(now, LINGER_GAP_NS) : until;
        if (ts_before(until, gap))
            gap = until;
        int rc = pthread_cond_timedwait(&l->cond, &l->mu, &gap);
        clock_gettime(CLOCK_MONOTONIC, &now);
        if ((rc == ETIMEDOUT && l->queued == before) || !ts_before(now, until))
            break;
    }
    l->wake_at = 0;
}

static void *writer_main(void *arg)
{
    struct store *l = arg;
    /* named for operators (top -H, ps -L) and for coord-bench, which reads
     * its write calls per batch from /proc/PID/task/TID/io */
    pthread_setname_np(pthread_self(), "coord-writer");
    for (;;) {
        pthread_mutex_lock(&l->mu);
        l->wake_at = 1;
        while (!l->queue_head && !l->unsynced && !l->stopping)
            pthread_cond_wait(&l->cond, &l->mu);
        l->wake_at = 0;
        /* Those answered by the last covered batch are likely on their
         * way back: with nothing unsynced (nobody waits for the writer),
         * one commit can carry them all.  With an unsynced batch the next
         * commit starts at once: it is the flush that batch waits for.  A
         * lone committer (nobody else in flight) never waits. */
        unsigned expect = l->just_acked + l->queued;
        if (l->just_acked && !l->unsynced && l->queued && expect >= 2) {
            uint64_t t0 = now_us();
            linger(l, expect);
            l->linger_us += now_us() - t0;
        }
        struct store_job *batch = l->queue_head, *last = batch;
        unsigned n = batch ? 1 : 0;
        /* bounded batches keep one commit from growing without end */
        while (last && last->next && n < MAX_BATCH) {
            last = last->next;
            n++;
        }
        if (batch) {
            l->queue_head = last->next;
            if (!l->queue_head)
                l->queue_tail = NULL;
            last->next = NULL;
            l->queued -= n;
            l->prev_batch = l->last_batch;
            l->last_batch = n;
        }
        l->just_acked = 0;
        int stop = l->stopping && !batch && !l->unsynced;
        pthread_mutex_unlock(&l->mu);
        if (stop)
            break;
        if (!batch) {                 /* idle: flush the unsynced batch now */
            cover_unsynced(l, false);
            continue;
        }

        uint64_t t0 = now_us();
        enum batch_result res = run_batch(l, batch);
        uint64_t t1 = now_us();
        pthread_mutex_lock(&l->mu);
        l->batches++;
        l->commit_us += t1 - t0;
        pthread_mutex_unlock(&l->mu);
        /* the snapshot of this commit, for the loop once it is covered (on
         * failure the loop keeps reading the older one) */
        MDB_txn *snap = NULL;
        if (res == BATCH_EMPTY && !l->unsynced) {
            /* nothing new to flush or to read: answered at once, the loop
             * keeps its snapshot (an idle broker's sweeps cost no flush) */
            hand_back(l, batch, last, n, NULL);
            continue;
        }
        if (res != BATCH_WROTE) {
            /* Failed, wrote nothing, or a commit on another thread came in
             * between (store_epoch): one explicit flush makes every
             * commit so far durable, so its answers and the snapshot taken
             * after it rest on the disk alone. */
            cover_unsynced(l, false);
            if (mdb_txn_begin(l->env, NULL, MDB_RDONLY, &snap) != 0)
                snap = NULL;
            hand_back(l, batch, last, n, snap);
            continue;
        }
        cover_unsynced(l, true);
        if (mdb_txn_begin(l->env, NULL, MDB_RDONLY, &snap) != 0)
            snap = NULL;
        l->unsynced = batch;
        l->unsynced_last = last;
        l->unsynced_n = n;
        l->unsynced_snap = snap;
    }
    return NULL;
}

static void run_done(struct store *l)
{
    pthread_mutex_lock(&l->mu);
    struct store_job *j = l->done_head;
    l->done_head = l->done_tail = NULL;
    MDB_txn *snap = l->snap_ready;
    l->snap_ready = NULL;
    pthread_mutex_unlock(&l->mu);
    /* the newer durable snapshot first: the answers below may read it */
    if (snap) {
        if (l->snap)
            mdb_txn_abort(l->snap);
        l->snap = snap;
    }
    while (j) {
        struct store_job *next = j->next;
        l->jobs++;
        j->done(j, j->status);
        j = next;
    }
}

static void on_async(uv_async_t *a)
{
    run_done(a->data);
}

void store_submit(struct store *l, struct store_job *job)
{
    job->next = NULL;
    pthread_mutex_lock(&l->mu);
    if (l->queue_tail)
        l->queue_tail->next = job;
    else
        l->queue_head = job;
    l->queue_tail = job;
    l->queued++;
    /* one wake-up per reason, not one per job: while the writer lingers it
     * looks at the queue itself at each gap */
    bool wake = l->wake_at && l->queued >= l->wake_at;
    pthread_mutex_unlock(&l->mu);
    if (wake)
        pthread_cond_signal(&l->cond);
}

/* What was found in dir before LMDB opened it. */
enum prior { PRIOR_NONE, PRIOR_DATA, PRIOR_EMPTY, PRIOR_MISSING };

/* Looks at data.mdb before LMDB does.  Returns 0 or -1 with err. */
static int inspect_data_file(const char *dir, enum prior *prior, char *err, size_t errsize)
{
    char path[4200], lockpath[4200];
    struct stat st;
    snprintf(path, sizeof path, "%s/data.mdb", dir);
    snprintf(lockpath, sizeof lockpath, "%s/lock.mdb", dir);
    if (stat(path, &st) == 0) {
        if (!S_ISREG(st.st_mode)) {
            snprintf(err, errsize, "%s is not a regular file", path);
            return -1;
        }
        *prior = st.st_size == 0 ? PRIOR_EMPTY : PRIOR_DATA;
    } else if (errno == ENOENT) {
        /* a lock file without data: the ledger of this dir was lost */
        *prior = stat(lockpath, &st) == 0 ? PRIOR_MISSING : PRIOR_NONE;
    } else {
        snprintf(err, errsize, "cannot stat %s: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

/* Gives lock.mdb real blocks: LMDB only ftruncates it, then stores into it
 * through a map, which on a full disk is a SIGBUS.  0 or -1 with err. */
static int allocate_lock_file(const char *dir, char *err, size_t errsize)
{
    char path[4200];
    struct stat st;
    snprintf(path, sizeof path, "%s/lock.mdb", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
        snprintf(err, errsize, "cannot open %s: %s", path, strerror(errno));
        return -1;
    }
    off_t want = LOCK_FILE_BYTES;
    if (fstat(fd, &st) == 0 && st.st_size > want)
        want = st.st_size;
    int rc = posix_fallocate(fd, 0, want);
    close(fd);                /* before LMDB takes its fcntl locks on it */
    if (rc == ENOSPC || rc == EDQUOT) {
        snprintf(err, errsize, "cannot create the ledger in %s: %s", dir,
                 rc == ENOSPC ? msg_no_space : strerror(rc));
        return -1;
    }
    /* other failures (a file system without fallocate): LMDB's own way */
    return 0;
}

/* A start that began to create the ledger and failed leaves nothing behind
 * that the next start would take for a damaged or lost ledger. */
static void forget_creation(const char *dir, enum prior prior)
{
    char path[4200];
    if (prior == PRIOR_DATA)
        return;
    snprintf(path, sizeof path, "%s/data.mdb", dir);
    unlink(path);
    if (prior == PRIOR_NONE) {
        snprintf(path, sizeof path, "%s/lock.mdb", dir);
        unlink(path);
    }
}

static void destroy(struct store *l)
{
    if (l->snap)
        mdb_txn_abort(l->snap);
    if (l->env)
        mdb_env_close(l->env);
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cond);
    pthread_rwlock_destroy(&l->resize);
    free(l->dir);
    free(l);
}

int store_open(struct store **out, const char *dir, uint64_t max_size,
                uv_loop_t *loop, char *err, size_t errsize)
{
    struct store *l = calloc(1, sizeof *l);
    int rc;
    if (!l || !(l->dir = strdup(dir))) {
        free(l);
        snprintf(err, errsize, "out of memory");
        return -1;
    }
    l->max_size = (size_t)max_size;
    l->map_size = INITIAL_MAP_SIZE < l->max_size ? INITIAL_MAP_SIZE : l->max_size;
    snprintf(l->limit_msg, sizeof l->limit_msg,
             "data size limit reached (--max-data-size %llu)", (unsigned long long)max_size);
    pthread_mutex_init(&l->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&l->cond, &ca);
    pthread_condattr_destroy(&ca);
    pthread_rwlock_init(&l->resize, NULL);

    char path[4200];
    snprintf(path, sizeof path, "%s/data.mdb", dir);
    enum prior prior;
    if (inspect_data_file(dir, &prior, err, errsize) < 0) {
        destroy(l);
        return -1;
    }
    if (allocate_lock_file(dir, err, errsize) < 0) {
        forget_creation(dir, prior);
        destroy(l);
        return -1;
    }
    if ((rc = mdb_env_create(&l->env)) ||
        (rc = mdb_env_set_maxdbs(l->env, 16)) ||
        (rc = mdb_env_set_mapsize(l->env, l->map_size)) ||
        (rc = mdb_env_open(l->env, dir, MDB_NOTLS | MDB_NOMETASYNC, 0600))) {
        if (rc == MDB_INVALID)
            snprintf(err, errsize, "%s is not an LMDB ledger (a foreign, damaged or "
                     "truncated file): move it away to start with an empty ledger", path);
        else if (rc == MDB_VERSION_MISMATCH)
            snprintf(err, errsize, "%s was written by an incompatible LMDB version", path);
        else
            snprintf(err, errsize, "cannot open the ledger in %s: %s", dir,
                     storage_strerror(dir, rc));
        /* half-created, it would be refused as damaged next time */
        forget_creation(dir, prior);
        destroy(l);
        return -1;
    }
    /* Every page up to the meta page's last one must be in the file: the
     * first read of a missing one would be a SIGBUS. */
    MDB_envinfo info;
    MDB_stat mst;
    mdb_filehandle_t fd;
    struct stat st;
    memset(&st, 0, sizeof st);
    if ((rc = mdb_env_info(l->env, &info)) || (rc = mdb_env_stat(l->env, &mst)) ||
        (rc = mdb_env_get_fd(l->env, &fd))) {
        snprintf(err, errsize, "cannot read the ledger in %s: %s", dir, mdb_strerror(rc));
        destroy(l);
        return -1;
    }
    uint64_t need = ((uint64_t)info.me_last_pgno + 1) * mst.ms_psize;
    if (fstat(fd, &st) < 0 || (uint64_t)st.st_size < need) {
        snprintf(err, errsize, "%s is truncated (%lld bytes, its pages need %llu): "
                 "restore it from a backup, or move it away to start with an empty ledger",
                 path, (long long)st.st_size, (unsigned long long)need);
        destroy(l);
        return -1;
    }
    /* LMDB raised the map to what the file holds if that is more */
    l->map_size = info.me_mapsize;
    l->psize = mst.ms_psize;
    if (need > l->max_size)
        log_event(LOG_WARN, "ledger.over_limit",
                  "data_bytes=%llu max_data_size=%zu error=\"new writes will fail\"",
                  (unsigned long long)need, l->max_size);
    if (prior == PRIOR_EMPTY || prior == PRIOR_MISSING)
        log_event(LOG_ERROR, "ledger.recreated",
                  "data=\"%s\" was=%s error=\"ledger recreated: the epoch restarts at 1, "
                  "so lock tokens, flight ids and generations issued before may be issued "
                  "again\"", path, prior == PRIOR_EMPTY ? "empty" : "missing");

    MDB_txn *txn;
    if ((rc = mdb_txn_begin(l->env, NULL, 0, &txn)) == 0) {
        for (int i = 0; i < DB_COUNT && rc == 0; i++)
            rc = mdb_dbi_open(txn, db_names[i], MDB_CREATE, &l->dbi[i]);
        rc = rc ? (mdb_txn_abort(txn), rc) : mdb_txn_commit(txn);
    }
    /* durable (MDB_NOMETASYNC: see the top), then the first snapshot */
    if (rc == 0)
        rc = mdb_env_sync(l->env, 1);
    if (rc == 0)
        rc = mdb_txn_begin(l->env, NULL, MDB_RDONLY, &l->snap);
    if (rc) {
        snprintf(err, errsize, "cannot open databases in %s: %s", dir,
                 rc == MDB_MAP_FULL ? l->limit_msg : storage_strerror(dir, rc));
        destroy(l);
        return -1;
    }
    uv_async_init(loop, &l->async, on_async);
    l->async.data = l;
    if (pthread_create(&l->thread, NULL, writer_main, l) != 0) {
        snprintf(err, errsize, "cannot start the ledger writer: %s", strerror(errno));
        uv_close((uv_handle_t *)&l->async, NULL);
        destroy(l);
        return -1;
    }
    l->thread_started = 1;
    *out = l;
    return 0;
}

/* META "epoch": the epoch of ids.c; "idfmt": 2 once epochs are of the
 * epoch * 2^21 format.  An epoch stored without it is of the earlier
 * epoch << 32 format: the next one is raised above that range. */
int store_put_epoch(struct store *l, MDB_txn *txn, uint64_t floor, uint64_t *stored)
{
    MDB_val k = { 5, "epoch" }, f = { 5, "idfmt" }, v;
    uint64_t epoch = 0, next = floor;
    int rc = mdb_get(txn, l->dbi[DB_META], &k, &v);
    if (rc == 0 && v.mv_size == 8)
        epoch = get_be64(v.mv_data);
    else if (rc != MDB_NOTFOUND)
        return rc ? rc : MDB_CORRUPTED;
    if (epoch + 1 > next)
        next = epoch + 1;
    rc = mdb_get(txn, l->dbi[DB_META], &f, &v);
    if (rc == MDB_NOTFOUND && epoch && ((epoch + 1) << 11) > next)
        next = (epoch + 1) << 11;            /* above (epoch << 32 | counter) */
    else if (rc && rc != MDB_NOTFOUND)
        return rc;
    uint8_t buf[8];
    put_be64(buf, next);
    v.mv_size = 8;
    v.mv_data = buf;
    if ((rc = mdb_put(txn, l->dbi[DB_META], &k, &v, 0)))
        return rc;
    uint8_t fmt = 2;
    v.mv_size = 1;
    v.mv_data = &fmt;
    if ((rc = mdb_put(txn, l->dbi[DB_META], &f, &v, 0)))
        return rc;
    *stored = next;
    return 0;
}

uint64_t store_epoch(struct store *l, uint64_t floor, char *err, size_t errsize)
{
    MDB_txn *txn;
    uint64_t epoch = 0;
    /* a write transaction on the calling thread: only at start, or when
     * the writer could not store the next epoch in time; LMDB serializes
     * it with the writer's, the resize lock with a growing map */
    pthread_rwlock_rdlock(&l->resize);
    int rc = mdb_txn_begin(l->env, NULL, 0, &txn);
    if (rc == 0 && (rc = store_put_epoch(l, txn, floor, &epoch)) != 0)
        mdb_txn_abort(txn);
    /* the commit flushes the data, the explicit sync its meta page
     * (MDB_NOMETASYNC): the epoch is on disk before anyone sees it */
    else if (rc == 0 && (rc = mdb_txn_commit(txn)) == 0)
        rc = mdb_env_sync(l->env, 1);
    pthread_rwlock_unlock(&l->resize);
    if (rc == 0)
        return epoch;
    snprintf(err, errsize, "cannot store the epoch in %s: %s", l->dir,
             rc == MDB_MAP_FULL ? l->limit_msg : storage_strerror(l->dir, rc));
    return 0;
}

static void free_ledger(uv_handle_t *h)
{
    struct store *l = h->data;
    free(l->dir);
    free(l);
}

void store_close(struct store *l)
{
    if (!l)
        return;
    pthread_mutex_lock(&l->mu);
    l->stopping = 1;
    pthread_cond_signal(&l->cond);
    pthread_mutex_unlock(&l->mu);
    if (l->thread_started)
        pthread_join(l->thread, NULL);
    run_done(l);
    if (l->snap)
        mdb_txn_abort(l->snap);
    l->snap = NULL;
    mdb_env_close(l->env);
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cond);
    pthread_rwlock_destroy(&l->resize);
    uv_close((uv_handle_t *)&l->async, free_ledger);
}
