/* store.h - the broker's durable state in LMDB, and its one writer (the
 * store; "ledger" is leadership's word, leader-ledger.h.  The store's log
 * events, errors and stats keep the name operators know: ledger.*).
 *
 * Writes never run on the loop thread: a job is queued, the writer thread
 * applies every queued job in one transaction (each in a nested one, so one
 * refused job does not spoil its batch), commits it with one data flush,
 * and hands the jobs back to the loop once a later flush made the commit
 * durable (store.c's top comment: MDB_NOMETASYNC), where their done
 * callbacks send the replies.  Many writers, one fsync: that is the group
 * commit.  Reads happen on the loop thread in the durable snapshot
 * (LMDB readers never block). */
#ifndef COORD_STORE_H
#define COORD_STORE_H

#include <stddef.h>
#include <stdint.h>
#include <lmdb.h>
#include <uv.h>

struct store;

enum store_db {
    DB_META,            /* "epoch" -> u64 big-endian, "idfmt" -> 2 (ids.h) */
    DB_RECORDS,         /* scoped key -> record (records.c) */
    DB_EXPIRY,          /* expires_ms BE + scoped key -> "" (sweeps) */
    DB_LEADERS,         /* scoped workstream -> generation u64, disabled u8, [unsettled
                           claims u32, claim seq u64, history count u32] (leader-lmdb.c) */
    DB_KV,              /* u16 len, scoped workstream, key -> generation u64, value */
    DB_OPS,             /* u16 len, scoped workstream, op_id -> generation u64 */
    DB_FLIGHT_OFF,      /* scoped key prefix -> "" (the single-flight kill switch) */
    DB_DESC,            /* scoped workstream -> descriptor (leader-desc.h) */
    DB_HIST,            /* u16 len, scoped workstream, generation u64 -> term (leader-desc.h) */
    DB_CLAIMS,          /* u16 len, scoped workstream, op_id -> claim (leader-lmdb.c) */
    DB_PENDING,         /* u16 len, scoped workstream, claim seq u64 -> op_id */
    DB_COUNT
};

struct store_job {
    struct store_job *next;
    /* Writer thread, inside a nested transaction.  Return 0 to keep its
     * writes, a negative COORD_E* code to drop them and fail the job, or a
     * positive MDB error (MDB_MAP_FULL makes the batch grow the map and
     * run again, so apply must depend only on the job and the database). */
    int (*apply)(struct store *l, MDB_txn *txn, struct store_job *job);
    /* Loop thread, once the batch is on disk: status is what apply returned,
     * or COORD_ESTORAGE when the commit failed. */
    void (*done)(struct store_job *job, int status);
    int status;
    /* With status COORD_ESTORAGE, why storage refused the job when the
     * ledger knows ("data size limit reached (--max-data-size N)", "no
     * space left on device"), else NULL: the message for the client.
     * Owned by the ledger, valid while done runs. */
    const char *why;
};

/* The client's message for a failed job: job->why, else fallback. */
static inline const char *store_job_message(const struct store_job *job,
                                             const char *fallback)
{
    return job->why ? job->why : fallback;
}

/* --max-data-size: the LMDB map (and so data.mdb) never grows past it.  The
 * lower bound leaves room for the databases' roots and a few batches; the
 * default is far above what per-user coordination needs, yet keeps a
 * runaway client from filling the disk. */
/* The longest LMDB key (LMDB's default mdb_env_get_maxkeysize): the
 * tables that store keys check their sums against it (static assertions
 * where the keys are made). */
#define STORE_KEY_MAX 511u
#define STORE_MIN_DATA_SIZE (1ull << 20)
#define STORE_DEFAULT_DATA_SIZE (4ull << 30)
#define STORE_MAX_DATA_SIZE (1ull << 40)

/* Opens (creating) the environment in dir, with the map capped at
 * max_size bytes.  Refuses, with one clear err, what would crash later:
 * a data.mdb that is not LMDB, one shorter than its own last page
 * (truncated), a disk too full to create the lock file.  An empty or
 * missing data.mdb in a used dir is recreated with a loud log line.
 * Returns 0, or -1 with err. */
int store_open(struct store **out, const char *dir, uint64_t max_size,
                uv_loop_t *loop, char *err, size_t errsize);
/* The epoch of ids.h: stores max(stored + 1, floor) (raised above ids of
 * the earlier format) and syncs it.  store_epoch runs its own
 * transaction on the calling thread (at start, before clients are
 * accepted); store_put_epoch is the same step inside a job's transaction.
 * Return the stored epoch, 0 with err / an MDB error. */
uint64_t store_epoch(struct store *l, uint64_t floor, char *err, size_t errsize);
int store_put_epoch(struct store *l, MDB_txn *txn, uint64_t floor, uint64_t *stored);
void store_submit(struct store *l, struct store_job *job);
/* Finishes every queued job (done callbacks included), stops the writer
 * and closes the environment. */
void store_close(struct store *l);

MDB_dbi store_dbi(struct store *l, enum store_db db);
/* Reads on the loop thread, between begin and end, never across a loop
 * turn: the transaction is the published snapshot (every batch whose done
 * callbacks ran, nothing not yet durable), owned by the ledger; end does
 * not abort it.  Cursors opened on it must be closed before end.  Returns
 * 0 or an MDB error. */
int store_read_begin(struct store *l, MDB_txn **txn);
void store_read_end(struct store *l, MDB_txn *txn);

/* Counters for stats. */
uint64_t store_batches(struct store *l);     /* takes the writer's mutex */
uint64_t store_jobs(const struct store *l);
/* The writer's time since the start: in batches' commits (apply, write,
 * data flush), in explicit flushes covering a batch (and how many), and
 * waiting for the committers of the batch answered last. */
struct store_times {
    uint64_t commit_us, flush_us, linger_us, flushes;
};
void store_times(struct store *l, struct store_times *t);
uint64_t store_data_limit_hits(struct store *l);   /* jobs refused at the cap */
uint64_t store_map_size(struct store *l);

static inline void put_be64(uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--) { p[i] = (uint8_t)v; v >>= 8; }
}

static inline uint64_t get_be64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = (v << 8) | p[i];
    return v;
}

#endif
