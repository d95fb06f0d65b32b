/* records.h - durable completion records in the ledger: written by
 * flight.complete/fail with keep_ms, read by record.* and by flight.join
 * with max_age_ms, swept in bounded batches once expired. */
#ifndef COORD_RECORDS_H
#define COORD_RECORDS_H

#include <stdbool.h>
#include <stddef.h>
#include "clock.h"
#include <stdint.h>
#include "broker.h"
#include "store.h"

#include "coord-limits.h"

enum record_status { RECORD_COMPLETED = 1, RECORD_FAILED = 2 };

/* A record as read (pointers into the read transaction: copy before the
 * transaction ends). */
struct record {
    uint8_t status;
    bool retryable;
    uint64_t fence;
    uint64_t created_ms;          /* wall clock */
    uint64_t expires_ms;
    const uint8_t *result;        /* completed: the result */
    size_t result_len;
    const uint8_t *code;          /* failed: error code and message */
    size_t code_len;
    const uint8_t *message;
    size_t message_len;
    /* who wrote it (the owner's hello) and the version of its code
     * (flight.join's version); empty in records written before them */
    uint64_t pid;
    const uint8_t *client;
    size_t client_len;
    const uint8_t *instance;
    size_t instance_len;
    const uint8_t *version;
    size_t version_len;
    /* completed by reference: the result is the file ref_name (in
     * DATA_DIR/results) of ref_size bytes; result is NULL */
    bool by_ref;
    uint64_t ref_size;
    const uint8_t *ref_name;
    size_t ref_name_len;
};

struct resref;

/* A write of one record, run by the ledger writer.  The caller fills it,
 * sets job.done, and submits it with records_submit_write. */
struct record_write {
    struct store_job job;
    uint8_t *skey;                /* scoped key, owned */
    size_t sklen;
    uint8_t *value;               /* encoded record, owned */
    size_t vlen;
    uint64_t expires_ms;
    /* a result by reference: the bytes to copy to DATA_DIR/results/file
     * before the record commits (the writer thread does it) */
    int copy_fd;                  /* owned (-1: none) */
    uint64_t copy_size;
    char file[64];                /* its name in results/ */
    bool copied;                  /* the file is written and synced */
    char *old_file;               /* the record replaced had this file: unlinked
                                     once the write is stored; owned */
};

void records_init(struct broker *b);
void records_stop(void);
/* Encodes r into w->value (copies everything).  0 or -1 (memory). */
int record_write_prepare(struct record_write *w, const uint8_t *skey, size_t sklen,
                         const struct record *r);
void record_write_free(struct record_write *w);
/* A record by reference: r->by_ref, its ref_size, and fd (the sealed memfd,
 * taken: closed by record_write_free) copied into a new file of results/ by
 * the writer thread before the record commits.  Call before
 * record_write_prepare (it names the file in r).  0 or -1 (fd closed). */
int record_write_by_ref(struct record_write *w, struct record *r, int fd, uint64_t size,
                        uint64_t fence);
/* The write's done callback ran with status: the files it made useless go
 * (the new one when it was not stored, the replaced one when it was). */
void record_write_settle(struct record_write *w, int status);
/* The result of a record by reference, opened read-only: a new object
 * with one reference for the caller; NULL (errno) when its file is gone. */
struct resref *record_open_ref(const struct record *r);
void records_submit_write(struct record_write *w);
/* Looks up a live record by scoped key: 1 found, 0 not, <0 storage error.
 * r points into txn, which the caller ends with store_read_end. */
int records_lookup(MDB_txn **txn, const uint8_t *skey, size_t sklen, struct record *r);
uint64_t records_count(void);
/* TOO_LARGE: scope and key do not fit LIMIT_RECORD_KEY. */
void reply_record_key_too_large(struct conn *c, uint64_t rid);

#endif
