/* ledger.c - LMDB environment, the writer thread and its group commit. */
#include <errno.h>
#include <stdbool.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include "broker.h"
#include "errors.h"
#include "ledger.h"

#define INITIAL_MAP_SIZE (256u << 20)   /* address space, not disk */
#define MAX_BATCH 4096
/* Group commit waits this long at most for the rest of a batch (like
 * PostgreSQL's commit_delay), and only while others are committing too. */
#define LINGER_NS 250000
#define LINGER_GAP_NS 40000

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

struct ledger {
    MDB_env *env;
    MDB_dbi dbi[DB_COUNT];
    size_t map_size;

    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cond;
    /* resizing the map needs every transaction of the process closed */
    pthread_rwlock_t resize;
    struct ledger_job *queue_head, *queue_tail;
    unsigned queued;
    unsigned last_batch, prev_batch;  /* sizes, to guess who comes back */
    struct ledger_job *done_head, *done_tail;
    int stopping;
    int thread_started;

    uv_async_t async;
    uint64_t batches, jobs;
};

static const char *db_names[DB_COUNT] = {
    "meta", "records", "expiry", "leaders", "kv", "ops",
};

MDB_dbi ledger_dbi(struct ledger *l, enum ledger_db db) { return l->dbi[db]; }
uint64_t ledger_batches(const struct ledger *l) { return l->batches; }
uint64_t ledger_jobs(const struct ledger *l) { return l->jobs; }

int ledger_read_begin(struct ledger *l, MDB_txn **txn)
{
    pthread_rwlock_rdlock(&l->resize);
    int rc = mdb_txn_begin(l->env, NULL, MDB_RDONLY, txn);
    if (rc)
        pthread_rwlock_unlock(&l->resize);
    return rc;
}

void ledger_read_end(struct ledger *l, MDB_txn *txn)
{
    mdb_txn_abort(txn);
    pthread_rwlock_unlock(&l->resize);
}

static int grow_map(struct ledger *l)
{
    pthread_rwlock_wrlock(&l->resize);
    size_t want = l->map_size * 2;
    int rc = mdb_env_set_mapsize(l->env, want);
    if (rc == 0)
        l->map_size = want;
    pthread_rwlock_unlock(&l->resize);
    log_event(rc ? LOG_ERROR : LOG_INFO, "ledger.grow", "map_size=%zu rc=%d",
              l->map_size, rc);
    return rc;
}

/* Runs one batch to a durable commit.  Every job gets its status. */
static void run_batch(struct ledger *l, struct ledger_job *batch)
{
    for (int attempt = 0; attempt < 8; attempt++) {
        MDB_txn *txn;
        int rc;
        pthread_rwlock_rdlock(&l->resize);
        rc = mdb_txn_begin(l->env, NULL, 0, &txn);
        int map_full = 0;
        for (struct ledger_job *j = batch; rc == 0 && j; j = j->next) {
            MDB_txn *child;
            rc = mdb_txn_begin(l->env, txn, 0, &child);
            if (rc)
                break;
            int st = j->apply(l, child, j);
            if (st == 0) {
                rc = mdb_txn_commit(child);
            } else {
                mdb_txn_abort(child);
                if (st == MDB_MAP_FULL)
                    rc = MDB_MAP_FULL;
                else if (st > 0)
                    st = COORD_ESTORAGE;
            }
            j->status = st > 0 ? COORD_ESTORAGE : st;
        }
        if (rc == 0)
            rc = mdb_txn_commit(txn);     /* frees txn, success or not */
        else
            mdb_txn_abort(txn);
        pthread_rwlock_unlock(&l->resize);
        if (rc == MDB_MAP_FULL) {
            map_full = 1;
            if (grow_map(l) == 0)
                continue;
        }
        if (rc) {
            log_event(LOG_ERROR, "ledger.commit_failed", "rc=%d error=\"%s\"%s",
                      rc, mdb_strerror(rc), map_full ? " map_full=1" : "");
            for (struct ledger_job *j = batch; j; j = j->next)
                j->status = COORD_ESTORAGE;
        }
        return;
    }
    for (struct ledger_job *j = batch; j; j = j->next)
        j->status = COORD_ESTORAGE;
}

static void *writer_main(void *arg)
{
    struct ledger *l = arg;
    for (;;) {
        pthread_mutex_lock(&l->mu);
        while (!l->queue_head && !l->stopping)
            pthread_cond_wait(&l->cond, &l->mu);
        /* Committers answered by the last two batches are likely on their
         * way back: wait while they keep arriving (a gap of LINGER_GAP_NS
         * with none ends it, as does LINGER_NS in all), so one sync serves
         * them all.  A lone committer never waits. */
        unsigned expect = l->last_batch + l->prev_batch;
        if (l->last_batch >= 2 && l->queued < expect && !l->stopping) {
            struct timespec now, until, gap;
            clock_gettime(CLOCK_REALTIME, &now);
            until = ts_add(now, LINGER_NS);
            while (l->queued < expect && !l->stopping) {
                unsigned before = l->queued;
                gap = ts_add(now, LINGER_GAP_NS);
                if (ts_before(until, gap))
                    gap = until;
                int rc = pthread_cond_timedwait(&l->cond, &l->mu, &gap);
                clock_gettime(CLOCK_REALTIME, &now);
                if ((rc == ETIMEDOUT && l->queued == before) || !ts_before(now, until))
                    break;
            }
        }
        struct ledger_job *batch = l->queue_head, *last = batch;
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
        int stop = l->stopping && !batch;
        pthread_mutex_unlock(&l->mu);
        if (stop)
            break;

        run_batch(l, batch);

        pthread_mutex_lock(&l->mu);
        if (l->done_tail)
            l->done_tail->next = batch;
        else
            l->done_head = batch;
        l->done_tail = last;
        l->batches++;
        pthread_mutex_unlock(&l->mu);
        uv_async_send(&l->async);
    }
    return NULL;
}

static void run_done(struct ledger *l)
{
    pthread_mutex_lock(&l->mu);
    struct ledger_job *j = l->done_head;
    l->done_head = l->done_tail = NULL;
    pthread_mutex_unlock(&l->mu);
    while (j) {
        struct ledger_job *next = j->next;
        l->jobs++;
        j->done(j, j->status);
        j = next;
    }
}

static void on_async(uv_async_t *a)
{
    run_done(a->data);
}

void ledger_submit(struct ledger *l, struct ledger_job *job)
{
    job->next = NULL;
    pthread_mutex_lock(&l->mu);
    if (l->queue_tail)
        l->queue_tail->next = job;
    else
        l->queue_head = job;
    l->queue_tail = job;
    l->queued++;
    pthread_cond_signal(&l->cond);
    pthread_mutex_unlock(&l->mu);
}

int ledger_open(struct ledger **out, const char *dir, uv_loop_t *loop,
                char *err, size_t errsize)
{
    struct ledger *l = calloc(1, sizeof *l);
    int rc;
    if (!l) {
        snprintf(err, errsize, "out of memory");
        return -1;
    }
    l->map_size = INITIAL_MAP_SIZE;
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cond, NULL);
    pthread_rwlock_init(&l->resize, NULL);
    if ((rc = mdb_env_create(&l->env)) ||
        (rc = mdb_env_set_maxdbs(l->env, 16)) ||
        (rc = mdb_env_set_mapsize(l->env, l->map_size)) ||
        (rc = mdb_env_open(l->env, dir, MDB_NOTLS, 0600))) {
        snprintf(err, errsize, "cannot open LMDB in %s: %s", dir, mdb_strerror(rc));
        if (l->env)
            mdb_env_close(l->env);
        free(l);
        return -1;
    }
    /* a map grown by an earlier run is kept */
    MDB_envinfo info;
    if (mdb_env_info(l->env, &info) == 0 && info.me_mapsize > l->map_size)
        l->map_size = info.me_mapsize;
    MDB_txn *txn;
    if ((rc = mdb_txn_begin(l->env, NULL, 0, &txn)) == 0) {
        for (int i = 0; i < DB_COUNT && rc == 0; i++)
            rc = mdb_dbi_open(txn, db_names[i], MDB_CREATE, &l->dbi[i]);
        rc = rc ? (mdb_txn_abort(txn), rc) : mdb_txn_commit(txn);
    }
    if (rc) {
        snprintf(err, errsize, "cannot open databases in %s: %s", dir, mdb_strerror(rc));
        mdb_env_close(l->env);
        free(l);
        return -1;
    }
    uv_async_init(loop, &l->async, on_async);
    l->async.data = l;
    if (pthread_create(&l->thread, NULL, writer_main, l) != 0) {
        snprintf(err, errsize, "cannot start the ledger writer: %s", strerror(errno));
        uv_close((uv_handle_t *)&l->async, NULL);
        mdb_env_close(l->env);
        free(l);
        return -1;
    }
    l->thread_started = 1;
    *out = l;
    return 0;
}

uint64_t ledger_next_epoch(struct ledger *l)
{
    MDB_txn *txn;
    uint64_t epoch = 0;
    if (mdb_txn_begin(l->env, NULL, 0, &txn))
        return 0;
    MDB_val k = { 5, "epoch" }, v;
    int rc = mdb_get(txn, l->dbi[DB_META], &k, &v);
    if (rc == 0 && v.mv_size == 8)
        epoch = get_be64(v.mv_data);
    else if (rc != MDB_NOTFOUND) {
        mdb_txn_abort(txn);
        return 0;
    }
    epoch++;
    uint8_t buf[8];
    put_be64(buf, epoch);
    v.mv_size = 8;
    v.mv_data = buf;
    if (mdb_put(txn, l->dbi[DB_META], &k, &v, 0)) {
        mdb_txn_abort(txn);
        return 0;
    }
    /* a plain commit syncs: the epoch is on disk before anyone sees it */
    return mdb_txn_commit(txn) == 0 ? epoch : 0;
}

static void free_ledger(uv_handle_t *h)
{
    free(h->data);
}

void ledger_close(struct ledger *l)
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
    mdb_env_close(l->env);
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cond);
    pthread_rwlock_destroy(&l->resize);
    uv_close((uv_handle_t *)&l->async, free_ledger);
}
