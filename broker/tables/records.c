/* records.c - completion records (see records.h).
 *
 * A record value is: status u8, retryable u8, fence u64, created_ms u64,
 * expires_ms u64 (all big-endian), then the result bytes (completed) or
 * code_len u16, code, message_len u32, message (failed).  A status with
 * RECORD_EXT set has, between the header and the payload, the owner and
 * version: ext_len u16, then pid u64, and client, instance, version each
 * as len u16 + bytes (records of older brokers have none).  Every record has
 * an entry in the expiry database (expires_ms first), so the sweep deletes
 * the oldest first in bounded batches on the writer thread.
 *
 * Reads never return an expired record, so the sweep only reclaims space,
 * and it runs when a record is due, not on a clock: a deadline at the
 * earliest expiry (found in the ledger at start and after each sweep,
 * lowered by each write), so a broker without records never wakes for
 * them.  Expiry is wall-clock time, deadlines loop time: the deadline is
 * the wall-clock wait from now, at most SWEEP_MAX_WAIT_MS (a clock stepped
 * back costs a sweep that finds nothing, then a new deadline).
 *
 * Records by reference.  A result completed by reference (a sealed memfd,
 * PROTOCOL.md) is kept as a file of DATA_DIR/results (0700), the record's
 * payload then being its size (u64) and the file's name (status bit
 * RECORD_REF).  The crash argument, in the order things happen:
 *   1. The writer thread, inside the job's apply and so before the batch
 *      commits, creates the file (O_EXCL, 0600), copies the memfd into it
 *      in the kernel (copy_file_range, else sendfile: never through a user
 *      buffer), fsyncs it, then fsyncs the directory: the file and its
 *      name are on disk before any record can name it.
 *   2. The record commits (store.c's group commit) and only then is the
 *      owner answered and are followers given the result: whoever heard of
 *      the record can read its file after a crash.
 *   3. Deleting (the sweep, record.purge, a record replaced by a newer
 *      one) deletes the record first; its file is unlinked by the done
 *      callback, after that commit was synced.  A crash between the two
 *      leaves a file that no record names, never a record without its file.
 *   4. At start, before anything is served, files of results/ that no
 *      record names are removed: the leftovers of 3, and files of 1 whose
 *      batch never committed (a crash, a failed commit: those the done
 *      callback removes when the broker lives).
 * A job may be applied more than once (store.c grows the map and runs the
 * batch again); the copy is made once (w->copied), the file's name being
 * fixed by the job.  The copy holds the writer for its duration (disk
 * bandwidth: about 50 ms for 64 MiB) but never the loop thread. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "errors.h"
#include "flight-gates.h"
#include "flights.h"
#include "hashmap.h"
#include "ops.h"
#include "deadline.h"
#include "records.h"
#include "resref.h"
#include "skey.h"

#define HEADER 26
/* status bit: the owner and version follow the header */
#define RECORD_EXT 0x80
/* status bit: completed by reference (size u64, file name) */
#define RECORD_REF 0x40
#define RESULTS_DIR "results"
#define SWEEP_BATCH 1000
/* A sweep waits this long at most for the next expiry: one wake-up an hour
 * bounds what a wall clock stepped back can delay. */
#define SWEEP_MAX_WAIT_MS (3600u * 1000u)
#define LIST_MAX 1000

static struct {
    struct broker *b;
    struct deadline sweep_at;    /* the next sweep, loop time */
    bool sweeping;
    bool again;                  /* due while sweeping: sweep once more */
    bool stopped;
    int results_fd;              /* DATA_DIR/results, -1: none */
} R = { .results_fd = -1 };

static void on_sweep_due(struct deadline *d);

/* The next sweep no later than the wall-clock time expires_ms. */
static void sweep_by(uint64_t expires_ms)
{
    if (R.stopped || !R.b->store)
        return;
    uint64_t wall = wall_ms(), wait = expires_ms > wall ? expires_ms - wall : 0;
    if (wait > SWEEP_MAX_WAIT_MS)
        wait = SWEEP_MAX_WAIT_MS;
    /* +1: the deadline fires at the expiry's millisecond or after it */
    uint64_t at = broker_now_ms(R.b) + wait + 1;
    if (!deadline_active(&R.sweep_at) || at < R.sweep_at.at)
        deadline_set(&R.sweep_at, at, on_sweep_due);
}

static bool decode(const MDB_val *v, struct record *r)
{
    const uint8_t *p = v->mv_data;
    size_t n = v->mv_size;
    if (n < HEADER)
        return false;
    memset(r, 0, sizeof *r);
    r->status = p[0] & ~(RECORD_EXT | RECORD_REF);
    bool by_ref = p[0] & RECORD_REF;
    r->retryable = p[1] != 0;
    r->fence = get_be64(p + 2);
    r->created_ms = get_be64(p + 10);
    r->expires_ms = get_be64(p + 18);
    bool ext = p[0] & RECORD_EXT;
    p += HEADER;
    n -= HEADER;
    if (ext) {
        if (n < 2)
            return false;
        size_t elen = ((size_t)p[0] << 8) | p[1];
        if (n < 2 + elen || elen < 8)
            return false;
        const uint8_t *e = p + 2, *end = p + 2 + elen;
        r->pid = get_be64(e);
        e += 8;
        const uint8_t **ptrs[3] = { &r->client, &r->instance, &r->version };
        size_t *lens[3] = { &r->client_len, &r->instance_len, &r->version_len };
        for (int i = 0; i < 3; i++) {
            if (end - e < 2)
                return false;
            size_t l = ((size_t)e[0] << 8) | e[1];
            if ((size_t)(end - e) < 2 + l)
                return false;
            *ptrs[i] = e + 2;
            *lens[i] = l;
            e += 2 + l;
        }
        p += 2 + elen;
        n -= 2 + elen;
    }
    if (r->status == RECORD_COMPLETED && by_ref) {
        if (n < 9 || n > 8 + 63)
            return false;
        r->by_ref = true;
        r->ref_size = get_be64(p);
        r->ref_name = p + 8;
        r->ref_name_len = n - 8;
        return true;
    }
    if (r->status == RECORD_COMPLETED) {
        r->result = p;
        r->result_len = n;
        return true;
    }
    if (n < 2)
        return false;
    r->code_len = ((size_t)p[0] << 8) | p[1];
    if (n < 2 + r->code_len + 4)
        return false;
    r->code = p + 2;
    const uint8_t *q = p + 2 + r->code_len;
    r->message_len = coord_be32(q);
    if (n != 2 + r->code_len + 4 + r->message_len)
        return false;
    r->message = q + 4;
    return true;
}

int record_write_prepare(struct record_write *w, const uint8_t *skey, size_t sklen,
                         const struct record *r)
{
    bool by_ref = r->status == RECORD_COMPLETED && r->by_ref;
    size_t payload = by_ref ? 8 + r->ref_name_len
                   : r->status == RECORD_COMPLETED
                         ? r->result_len : 2 + r->code_len + 4 + r->message_len;
    size_t elen = 8 + 2 + r->client_len + 2 + r->instance_len + 2 + r->version_len;
    struct record_write keep = *w;      /* record_write_by_ref's part */
    memset(w, 0, sizeof *w);
    w->copy_fd = -1;
    if (by_ref) {
        w->copy_fd = keep.copy_fd;
        w->copy_size = keep.copy_size;
        memcpy(w->file, keep.file, sizeof w->file);
    }
    w->skey = malloc(sklen);
    w->value = malloc(HEADER + 2 + elen + payload);
    if (!w->skey || !w->value) {
        record_write_free(w);
        return -1;
    }
    memcpy(w->skey, skey, sklen);
    w->sklen = sklen;
    uint8_t *p = w->value;
    p[0] = r->status | RECORD_EXT | (by_ref ? RECORD_REF : 0);
    p[1] = r->retryable;
    put_be64(p + 2, r->fence);
    put_be64(p + 10, r->created_ms);
    put_be64(p + 18, r->expires_ms);
    p += HEADER;
    p[0] = (uint8_t)(elen >> 8);
    p[1] = (uint8_t)elen;
    put_be64(p + 2, r->pid);
    p += 10;
    const uint8_t *ptrs[3] = { r->client, r->instance, r->version };
    size_t lens[3] = { r->client_len, r->instance_len, r->version_len };
    for (int i = 0; i < 3; i++) {
        p[0] = (uint8_t)(lens[i] >> 8);
        p[1] = (uint8_t)lens[i];
        if (lens[i])
            memcpy(p + 2, ptrs[i], lens[i]);
        p += 2 + lens[i];
    }
    if (by_ref) {
        put_be64(p, r->ref_size);
        memcpy(p + 8, r->ref_name, r->ref_name_len);
    } else if (r->status == RECORD_COMPLETED) {
        if (r->result_len)
            memcpy(p, r->result, r->result_len);
    } else {
        p[0] = (uint8_t)(r->code_len >> 8);
        p[1] = (uint8_t)r->code_len;
        memcpy(p + 2, r->code, r->code_len);
        coord_put_be32(p + 2 + r->code_len, (uint32_t)r->message_len);
        if (r->message_len)
            memcpy(p + 2 + r->code_len + 4, r->message, r->message_len);
    }
    w->vlen = HEADER + 2 + elen + payload;
    w->expires_ms = r->expires_ms;
    return 0;
}

void record_write_free(struct record_write *w)
{
    free(w->skey);
    free(w->value);
    free(w->old_file);
    w->skey = w->value = NULL;
    w->old_file = NULL;
    if (w->copy_fd >= 0)
        close(w->copy_fd);
    w->copy_fd = -1;
}

int record_write_by_ref(struct record_write *w, struct record *r, int fd, uint64_t size,
                        uint64_t fence)
{
    uint32_t rnd = 0;
    if (R.results_fd < 0 || getrandom(&rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) {
        close(fd);
        return -1;
    }
    w->copy_fd = fd;
    w->copy_size = size;
    snprintf(w->file, sizeof w->file, "%016llx-%08x.result", (unsigned long long)fence,
             (unsigned)rnd);
    r->by_ref = true;
    r->ref_size = size;
    r->ref_name = (const uint8_t *)w->file;
    r->ref_name_len = strlen(w->file);
    return 0;
}

/* A name of results/ as a record holds it (not NUL-terminated) is safe to
 * open there: no slash, no dot-dot, not empty. */
static bool file_name_ok(const uint8_t *name, size_t len, char *out, size_t outsize)
{
    if (len == 0 || len >= outsize || memchr(name, '/', len) || memchr(name, 0, len) ||
        name[0] == '.')
        return false;
    memcpy(out, name, len);
    out[len] = 0;
    return true;
}

static void unlink_result(const char *file)
{
    if (R.results_fd >= 0 && unlinkat(R.results_fd, file, 0) < 0 && errno != ENOENT)
        log_event(LOG_WARN, "records.unlink_failed", "file=%s error=\"%s\"", file,
                  strerror(errno));
}

void record_write_settle(struct record_write *w, int status)
{
    if (status && w->copied)
        unlink_result(w->file);
    if (status == 0 && w->old_file)
        unlink_result(w->old_file);
}

struct resref *record_open_ref(const struct record *r)
{
    char name[64];
    if (!r->by_ref || R.results_fd < 0 ||
        !file_name_ok(r->ref_name, r->ref_name_len, name, sizeof name)) {
        errno = ENOENT;
        return NULL;
    }
    int fd = openat(R.results_fd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return NULL;
    struct stat st;
    if (fstat(fd, &st) < 0 || (uint64_t)st.st_size != r->ref_size) {
        close(fd);
        errno = EIO;
        return NULL;
    }
    return resref_new(fd, r->ref_size);
}

/* Writer thread: the memfd's bytes into results/w->file, synced with its
 * directory entry (the top comment's step 1).  0 or a negative COORD_E*. */
static int write_result_file(struct record_write *w)
{
    if (w->copied)
        return 0;
    int out = openat(R.results_fd, w->file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (out < 0)
        return COORD_ESTORAGE;
    loff_t in_off = 0;
    uint64_t left = w->copy_size;
    bool use_sendfile = false;
    while (left > 0) {
        size_t chunk = left > (1u << 30) ? (1u << 30) : (size_t)left;
        ssize_t n;
        if (!use_sendfile) {
            n = copy_file_range(w->copy_fd, &in_off, out, NULL, chunk, 0);
            if (n < 0 && (errno == EXDEV || errno == EINVAL || errno == ENOSYS ||
                          errno == EOPNOTSUPP)) {
                use_sendfile = true;
                continue;
            }
        } else {
            off_t off = (off_t)in_off;
            n = sendfile(out, w->copy_fd, &off, chunk);
            if (n > 0)
                in_off = (loff_t)off;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        left -= (uint64_t)n;
    }
    int rc = left == 0 && fsync(out) == 0 ? 0 : -1;
    close(out);
    if (rc == 0 && fsync(R.results_fd) == 0) {
        w->copied = true;
        return 0;
    }
    unlinkat(R.results_fd, w->file, 0);
    return COORD_ESTORAGE;
}

/* The file a stored record value names, as a new string (NULL: none). */
static char *value_file(const MDB_val *v)
{
    struct record r;
    char name[64];
    if (!decode(v, &r) || !r.by_ref || !file_name_ok(r.ref_name, r.ref_name_len, name, sizeof name))
        return NULL;
    return strdup(name);
}

/* A list of files to unlink once a job's deletes are stored. */
struct file_list {
    char **names;
    size_t n, cap;
};

static void file_list_add(struct file_list *l, char *name)
{
    if (!name)
        return;
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 8;
        char **p = realloc(l->names, cap * sizeof *p);
        if (!p) {             /* left for the start's cleanup */
            free(name);
            return;
        }
        l->names = p;
        l->cap = cap;
    }
    l->names[l->n++] = name;
}

static void file_list_clear(struct file_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->names[i]);
    l->n = 0;
}

/* Loop thread, after the job's batch was stored (status 0): unlink. */
static void file_list_settle(struct file_list *l, int status)
{
    for (size_t i = 0; status == 0 && i < l->n; i++)
        unlink_result(l->names[i]);
    file_list_clear(l);
    free(l->names);
    l->names = NULL;
    l->cap = 0;
}

/* A record's key is its scoped key; its expiry entry's adds 8 bytes. */
_Static_assert(8 + SKEY_HEADER + LIMIT_RECORD_KEY <= STORE_KEY_MAX,
               "a record's expiry key is longer than LMDB allows");

/* expiry key: expires_ms BE, then the scoped key */
static size_t expiry_key(uint8_t *out, uint64_t expires, const uint8_t *skey, size_t sklen)
{
    put_be64(out, expires);
    memcpy(out + 8, skey, sklen);
    return 8 + sklen;
}

/* Deletes the record at skey (and its expiry entry) if there is one; the
 * file of a record by reference goes in *file (to unlink once stored). */
static int delete_record(struct store *l, MDB_txn *txn, const uint8_t *skey, size_t sklen,
                         char **file)
{
    MDB_val k = { sklen, (void *)skey }, v;
    int rc = mdb_get(txn, store_dbi(l, DB_RECORDS), &k, &v);
    if (rc == MDB_NOTFOUND)
        return 0;
    if (rc)
        return rc;
    free(*file);
    *file = value_file(&v);
    if (v.mv_size >= HEADER) {
        uint8_t ek[8 + LIMIT_RECORD_KEY + 8];
        MDB_val e = { expiry_key(ek, get_be64((uint8_t *)v.mv_data + 18), skey, sklen), ek };
        rc = mdb_del(txn, store_dbi(l, DB_EXPIRY), &e, NULL);
        if (rc && rc != MDB_NOTFOUND)
            return rc;
    }
    rc = mdb_del(txn, store_dbi(l, DB_RECORDS), &k, NULL);
    return rc == MDB_NOTFOUND ? 0 : rc;
}

static int apply_write(struct store *l, MDB_txn *txn, struct store_job *job)
{
    struct record_write *w = (struct record_write *)job;
    if (w->copy_fd >= 0) {
        int st = write_result_file(w);
        if (st) {
            job->why = "cannot write the result's file in the data dir";
            return st;
        }
    }
    int rc = delete_record(l, txn, w->skey, w->sklen, &w->old_file);
    if (rc)
        return rc;
    MDB_val k = { w->sklen, w->skey }, v = { w->vlen, w->value };
    if ((rc = mdb_put(txn, store_dbi(l, DB_RECORDS), &k, &v, 0)))
        return rc;
    uint8_t ek[8 + LIMIT_RECORD_KEY + 8];
    MDB_val e = { expiry_key(ek, w->expires_ms, w->skey, w->sklen), ek }, empty = { 0, "" };
    return mdb_put(txn, store_dbi(l, DB_EXPIRY), &e, &empty, 0);
}

void records_submit_write(struct record_write *w)
{
    w->job.apply = apply_write;
    store_submit(R.b->store, &w->job);
    sweep_by(w->expires_ms);
}

int records_lookup(MDB_txn **txn, const uint8_t *skey, size_t sklen, struct record *r)
{
    int rc = store_read_begin(R.b->store, txn);
    if (rc)
        return -1;
    MDB_val k = { sklen, (void *)skey }, v;
    rc = mdb_get(*txn, store_dbi(R.b->store, DB_RECORDS), &k, &v);
    if (rc == 0 && decode(&v, r) && r->expires_ms > wall_ms())
        return 1;
    store_read_end(R.b->store, *txn);
    return rc == 0 || rc == MDB_NOTFOUND ? 0 : -1;
}

uint64_t records_count(void)
{
    MDB_txn *txn;
    MDB_stat st;
    if (!R.b || !R.b->store || store_read_begin(R.b->store, &txn))
        return 0;
    uint64_t n = mdb_stat(txn, store_dbi(R.b->store, DB_RECORDS), &st) == 0 ? st.ms_entries : 0;
    store_read_end(R.b->store, txn);
    return n;
}

/* ---- sweep ---- */

struct sweep_job {
    struct store_job job;
    struct file_list files;      /* of the records deleted */
    uint64_t now;
    unsigned deleted;
    uint64_t next;               /* the first expiry left, 0: none */
};

/* The expiry of the key a cursor get of the expiry database returned (rc,
 * k): 0 for none (MDB_NOTFOUND) or a malformed key. */
static uint64_t first_expiry(int rc, const MDB_val *k)
{
    return rc == 0 && k->mv_size >= 8 ? get_be64(k->mv_data) : 0;
}

static int apply_sweep(struct store *l, MDB_txn *txn, struct store_job *job)
{
    struct sweep_job *s = (struct sweep_job *)job;
    MDB_cursor *cur;
    int rc = mdb_cursor_open(txn, store_dbi(l, DB_EXPIRY), &cur);
    if (rc)
        return rc;
    MDB_val k, v;
    s->deleted = 0;
    s->next = 0;
    file_list_clear(&s->files);
    /* after a cursor delete, re-seek instead of trusting MDB_NEXT */
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST);
         rc == 0 && s->deleted < SWEEP_BATCH;
         rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST)) {
        if (k.mv_size < 8 || get_be64(k.mv_data) > s->now) {
            s->next = first_expiry(rc, &k);
            break;
        }
        MDB_val rk = { k.mv_size - 8, (uint8_t *)k.mv_data + 8 }, rv;
        if (mdb_get(txn, store_dbi(l, DB_RECORDS), &rk, &rv) == 0)
            file_list_add(&s->files, value_file(&rv));
        int drc = mdb_del(txn, store_dbi(l, DB_RECORDS), &rk, NULL);
        if (drc && drc != MDB_NOTFOUND) {
            rc = drc;
            break;
        }
        if ((drc = mdb_cursor_del(cur, 0))) {
            rc = drc;
            break;
        }
        s->deleted++;
    }
    mdb_cursor_close(cur);
    return rc == MDB_NOTFOUND || rc == 0 ? 0 : rc;
}

static void start_sweep(void);

static void sweep_done(struct store_job *job, int status)
{
    struct sweep_job *s = (struct sweep_job *)job;
    R.sweeping = false;
    file_list_settle(&s->files, status);
    if (status == 0 && s->deleted)
        log_event(LOG_DEBUG, "records.swept", "deleted=%u", s->deleted);
    /* a full batch means more are due: go again at once; a failed one
     * tries again in a second */
    bool more = status == 0 && s->deleted == SWEEP_BATCH;
    uint64_t next = status == 0 ? s->next : wall_ms() + 1000;
    free(s);
    if (R.stopped)
        return;
    if (more || R.again) {
        R.again = false;
        start_sweep();
    } else if (next) {
        sweep_by(next);
    }
}

static void start_sweep(void)
{
    if (R.stopped || !R.b->store)
        return;
    if (R.sweeping) {
        R.again = true;
        return;
    }
    struct sweep_job *s = calloc(1, sizeof *s);
    if (!s) {
        sweep_by(wall_ms() + 1000);
        return;
    }
    s->now = wall_ms();
    s->job.apply = apply_sweep;
    s->job.done = sweep_done;
    R.sweeping = true;
    store_submit(R.b->store, &s->job);
}

static void on_sweep_due(struct deadline *d)
{
    (void)d;
    start_sweep();
}

static int name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* DATA_DIR/results, made if missing; the files no record names are
 * removed (the top comment's step 4).  Before anything is served. */
static void results_open(struct broker *b)
{
    char path[sizeof b->opt.data_dir + 16];
    snprintf(path, sizeof path, "%s/" RESULTS_DIR, b->opt.data_dir);
    if (mkdir(path, 0700) < 0 && errno != EEXIST) {
        log_event(LOG_WARN, "records.results_dir", "path=%s error=\"%s\"", path, strerror(errno));
        return;
    }
    R.results_fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (R.results_fd < 0) {
        log_event(LOG_WARN, "records.results_dir", "path=%s error=\"%s\"", path, strerror(errno));
        return;
    }
    struct file_list named = { NULL, 0, 0 };
    MDB_txn *txn;
    MDB_cursor *cur;
    bool read_all = false;
    if (store_read_begin(b->store, &txn) == 0) {
        if (mdb_cursor_open(txn, store_dbi(b->store, DB_RECORDS), &cur) == 0) {
            MDB_val k, v;
            int rc;
            for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
                 rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT))
                file_list_add(&named, value_file(&v));
            read_all = rc == MDB_NOTFOUND;
            mdb_cursor_close(cur);
        }
        store_read_end(b->store, txn);
    }
    int dfd = read_all ? dup(R.results_fd) : -1;
    DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
    if (!d) {
        if (dfd >= 0)
            close(dfd);
        file_list_settle(&named, -1);
        return;
    }
    if (named.n)
        qsort(named.names, named.n, sizeof *named.names, name_cmp);
    unsigned removed = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        char *key = de->d_name;
        if (named.n && bsearch(&key, named.names, named.n, sizeof *named.names, name_cmp))
            continue;
        if (unlinkat(R.results_fd, de->d_name, 0) == 0)
            removed++;
    }
    closedir(d);
    if (removed) {
        fsync(R.results_fd);
        log_event(LOG_INFO, "records.results_cleaned", "removed=%u", removed);
    }
    file_list_settle(&named, -1);
}

void records_init(struct broker *b)
{
    R.b = b;
    if (!b->store)
        return;
    results_open(b);
    /* records written before this start: the first one due */
    MDB_txn *txn;
    MDB_cursor *cur;
    if (store_read_begin(b->store, &txn) != 0)
        return;
    if (mdb_cursor_open(txn, store_dbi(b->store, DB_EXPIRY), &cur) == 0) {
        MDB_val k, v;
        int rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST);
        uint64_t first = first_expiry(rc, &k);
        mdb_cursor_close(cur);
        if (first)
            sweep_by(first);
    }
    store_read_end(b->store, txn);
}

void records_stop(void)
{
    R.stopped = true;
    deadline_cancel(&R.sweep_at);
}

/* ---- ops ---- */

void reply_record_key_too_large(struct conn *c, uint64_t rid)
{
    char msg[96];
    snprintf(msg, sizeof msg, "scope and key together exceed %u bytes for a record",
             LIMIT_RECORD_KEY);
    conn_reply_error(c, rid, COORD_ETOO_LARGE, msg);
}

/* The caller's scoped key, refusing keys that cannot be stored. */
static size_t record_key(struct conn *c, uint64_t rid, coord_bytes key, uint8_t **out)
{
    if ((size_t)c->scope_len + key.len > LIMIT_RECORD_KEY) {
        reply_record_key_too_large(c, rid);
        return 0;
    }
    size_t n = skey_make(out, c->scope, c->scope_len, key.ptr, key.len);
    if (!n)
        conn_reply_error(c, rid, COORD_ELIMIT, "out of memory");
    return n;
}

/* The owner that wrote r and its version, when the record has them. */
static void record_encode_owner(coord_enc *e, const struct record *r)
{
    if (!r->pid && !r->client_len && !r->instance_len && !r->version_len)
        return;
    static const uint8_t none[1];
    coord_enc_kv_name(e, "client", r->client_len ? r->client : none, r->client_len);
    coord_enc_kv_uint(e, "pid", r->pid);
    coord_enc_kv_name(e, "instance", r->instance_len ? r->instance : none, r->instance_len);
    if (r->version_len)
        coord_enc_kv_name(e, "version", r->version, r->version_len);
}

/* rref: a record by reference's result, opened (record_open_ref). */
static void record_encode_body(struct conn *c, coord_enc *e, const struct record *r,
                               struct resref *rref)
{
    coord_enc_kv_cstr(e, "status", r->status == RECORD_COMPLETED ? "completed" : "failed");
    coord_enc_kv_uint(e, "fence", r->fence);
    if (rref) {
        conn_enc_result(c, e, rref);
    } else if (r->status == RECORD_COMPLETED) {
        coord_enc_kv_bin(e, "result", r->result, r->result_len);
    } else {
        coord_enc_key(e, "error");
        coord_enc_map_begin(e);
        coord_enc_kv_name(e, "code", r->code, r->code_len);
        coord_enc_kv_name(e, "message", r->message, r->message_len);
        coord_enc_map_end(e);
        coord_enc_kv_bool(e, "retryable", r->retryable);
    }
    coord_enc_kv_uint(e, "created_ms", r->created_ms);
    coord_enc_kv_uint(e, "expires_ms", r->expires_ms);
    record_encode_owner(e, r);
}

void op_record_get(struct conn *c, uint64_t rid, coord_fields *f)
{
    coord_bytes key = { NULL, 0 };
    coord_field_str(f, "key", true, &key);
    if (!fields_ok(c, rid, f))
        return;
    uint8_t *skey;
    size_t sklen = record_key(c, rid, key, &skey);
    if (!sklen)
        return;
    MDB_txn *txn;
    struct record r;
    int found = records_lookup(&txn, skey, sklen, &r);
    free(skey);
    if (found < 0) {
        conn_reply_error(c, rid, COORD_ESTORAGE, "cannot read the ledger");
        return;
    }
    if (!found) {
        conn_reply_error(c, rid, COORD_ENOT_FOUND, "no record for this key");
        return;
    }
    struct resref *rref = NULL;
    if (r.by_ref) {
        const char *why = !conn_ref_room(c) ? "too many result_ref held: flight.unref them"
                        : !(rref = record_open_ref(&r)) ? "the record's result file cannot be read"
                        : NULL;
        if (why) {
            store_read_end(c->b->store, txn);
            conn_reply_error(c, rid, rref || conn_ref_room(c) ? COORD_ESTORAGE : COORD_ELIMIT, why);
            return;
        }
    }
    coord_enc e;
    conn_enc_begin_reply(c, &e, rid);
    record_encode_body(c, &e, &r, rref);
    conn_enc_finish_ref(c, &e, rref);
    store_read_end(c->b->store, txn);
    resref_drop(rref);
}

void op_record_list(struct conn *c, uint64_t rid, coord_fields *f)
{
    coord_bytes prefix = { (const uint8_t *)"", 0 };
    uint64_t limit = 100;
    coord_field_str(f, "prefix", false, &prefix);
    coord_field_uint(f, "limit", false, &limit);
    if (!fields_ok(c, rid, f))
        return;
    if (limit == 0 || limit > LIST_MAX)
        limit = limit ? LIST_MAX : 100;
    uint8_t *sp;
    size_t splen = record_key(c, rid, prefix, &sp);
    if (!splen)
        return;
    MDB_txn *txn;
    MDB_cursor *cur = NULL;
    if (store_read_begin(c->b->store, &txn)) {
        free(sp);
        conn_reply_error(c, rid, COORD_ESTORAGE, "cannot read the ledger");
        return;
    }
    uint64_t now = wall_ms();
    coord_enc e;
    conn_enc_begin_reply(c, &e, rid);
    coord_enc_key(&e, "records");
    coord_enc_array_begin(&e);
    uint64_t n = 0;
    bool cut = false;
    MDB_val k = { splen, sp }, v;
    int rc = mdb_cursor_open(txn, store_dbi(c->b->store, DB_RECORDS), &cur);
    for (rc = rc ? rc : mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE); rc == 0;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        if (k.mv_size < splen || memcmp(k.mv_data, sp, splen) != 0)
            break;
        struct record r;
        if (!decode(&v, &r) || r.expires_ms <= now)
            continue;
        if (n == limit) {
            cut = true;
            break;
        }
        coord_enc_mark m = coord_enc_mark_here(&e);
        coord_enc_map_begin(&e);
        size_t nlen;
        const uint8_t *name = skey_name(k.mv_data, k.mv_size, &nlen);
        coord_enc_kv_name(&e, "key", name, nlen);
        coord_enc_kv_cstr(&e, "status", r.status == RECORD_COMPLETED ? "completed" : "failed");
        coord_enc_kv_uint(&e, "fence", r.fence);
        coord_enc_kv_uint(&e, "size", r.by_ref ? r.ref_size
                                      : r.status == RECORD_COMPLETED ? r.result_len : r.message_len);
        if (r.by_ref)
            coord_enc_kv_bool(&e, "by_ref", true);
        coord_enc_kv_uint(&e, "created_ms", r.created_ms);
        coord_enc_kv_uint(&e, "expires_ms", r.expires_ms);
        record_encode_owner(&e, &r);
        coord_enc_map_end(&e);
        if (list_entry_overflows(c, &e, &m)) {
            cut = true;
            break;
        }
        n++;
    }
    coord_enc_array_end(&e);
    if (cut)
        coord_enc_kv_bool(&e, "truncated", true);
    if (cur)
        mdb_cursor_close(cur);
    store_read_end(c->b->store, txn);
    free(sp);
    conn_enc_finish(c, &e);
}

struct purge_job {
    struct store_job job;
    struct conn_job client;
    uint8_t *prefix;
    size_t plen;
    struct file_list files;      /* of the records deleted */
    uint64_t deleted;
    uint64_t fenced;              /* flights ended by this purge */
};

static int apply_purge(struct store *l, MDB_txn *txn, struct store_job *job)
{
    struct purge_job *p = (struct purge_job *)job;
    MDB_cursor *cur;
    int rc = mdb_cursor_open(txn, store_dbi(l, DB_RECORDS), &cur);
    if (rc)
        return rc;
    p->deleted = 0;
    file_list_clear(&p->files);
    MDB_val k = { p->plen, p->prefix }, v;
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE); rc == 0;
         k.mv_size = p->plen, k.mv_data = p->prefix,
         rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE)) {
        if (k.mv_size < p->plen || memcmp(k.mv_data, p->prefix, p->plen) != 0)
            break;
        if (v.mv_size >= HEADER) {
            uint8_t ek[8 + LIMIT_RECORD_KEY + 8];
            MDB_val e = { expiry_key(ek, get_be64((uint8_t *)v.mv_data + 18),
                                     k.mv_data, k.mv_size), ek };
            int drc = mdb_del(txn, store_dbi(l, DB_EXPIRY), &e, NULL);
            if (drc && drc != MDB_NOTFOUND) {
                rc = drc;
                break;
            }
        }
        char *file = value_file(&v);
        if ((rc = mdb_cursor_del(cur, 0))) {
            free(file);
            break;
        }
        file_list_add(&p->files, file);
        p->deleted++;
    }
    mdb_cursor_close(cur);
    return rc == MDB_NOTFOUND || rc == 0 ? 0 : rc;
}

static void purge_done(struct store_job *job, int status)
{
    struct purge_job *p = (struct purge_job *)job;
    struct conn *c = conn_job_conn(&p->client);
    file_list_settle(&p->files, status);
    if (c && status) {
        conn_reply_error(c, p->client.rid, status, store_job_message(job, "purge failed"));
    } else if (c) {
        coord_enc e;
        conn_enc_begin_reply(c, &e, p->client.rid);
        coord_enc_kv_uint(&e, "deleted", p->deleted);
        coord_enc_kv_uint(&e, "fenced", p->fenced);
        conn_enc_finish(c, &e);
    }
    conn_job_end(&p->client);
    free(p->prefix);
    free(p);
}

void op_record_purge(struct conn *c, uint64_t rid, coord_fields *f)
{
    coord_bytes prefix = { (const uint8_t *)"", 0 };
    coord_field_str(f, "prefix", false, &prefix);
    if (!fields_ok(c, rid, f))
        return;
    struct purge_job *p = calloc(1, sizeof *p);
    if (!p) {
        conn_reply_error(c, rid, COORD_ELIMIT, "out of memory");
        return;
    }
    p->plen = record_key(c, rid, prefix, &p->prefix);
    if (!p->plen) {
        free(p);
        return;
    }
    /* Logout stops what is in flight too: the flights under the prefix are
     * fenced now, before the job is queued, so any completion record they
     * queued is applied (and deleted by this job) before it, and none can
     * be queued after it (flights.c).  The backoffs go with them. */
    p->fenced = flights_purge(p->prefix, p->plen);
    gates_backoff_purge(p->prefix, p->plen);
    conn_job_start(&p->client, c, rid);
    p->job.apply = apply_purge;
    p->job.done = purge_done;
    store_submit(c->b->store, &p->job);
}
