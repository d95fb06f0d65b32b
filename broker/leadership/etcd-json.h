/* etcd-json.h - the bodies of etcd's v3 JSON gateway for the etcd leader
 * ledger (leader-etcd.c): its keys, the ops of a Txn, and the reading of
 * the answers.  Keys and values go base64 (etcd-http.h's etcd_b64); 64-bit
 * numbers go as strings.  Nothing here calls etcd. */
#ifndef COORD_ETCD_JSON_H
#define COORD_ETCD_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>
#include "coord-limits.h"
#include "skey.h"

/* A key: prefix, "w/", the scoped workstream in hex, "/kind/", a name
 * (op id, key, history token) in hex. */
#define WS_BYTES_MAX (SKEY_HEADER + LIMIT_WORKSTREAM)
#define NAME_BYTES_MAX (LIMIT_LEADER_KEY > LIMIT_OP_ID ? LIMIT_LEADER_KEY : LIMIT_OP_ID)
#define EKEY_MAX (128 + 2 + 2 * WS_BYTES_MAX + 10 + 2 * NAME_BYTES_MAX + 1)

/* n bytes as lowercase hex, NUL-terminated (out: 2n + 1 bytes). */
void ej_hex(char *out, const uint8_t *p, size_t n);
/* hex back into out (at most cap bytes), *n its length.  0, or -1. */
int ej_unhex(const char *s, uint8_t *out, size_t cap, size_t *n);
/* prefix w/W/kind[/N] into out (EKEY_MAX): kind may end in "/" (a prefix) */
void ej_key(char *out, const char *prefix, const uint8_t *ws, size_t wl,
            const char *kind, const uint8_t *name, size_t nl);

json_t *ej_b64(const void *p, size_t n);
/* the end of the range of keys starting with k */
json_t *ej_end(const char *k);
json_t *ej_numstr(uint64_t v);
/* compare: target "CREATE", "MOD" or "VERSION" of key equals v */
json_t *ej_cmp(const char *key, const char *target, uint64_t v);

enum { EJ_KEYS_ONLY = 1, EJ_COUNT_ONLY = 2, EJ_NEWEST = 4, EJ_OLDEST = 8, EJ_PREFIX = 16 };
/* a range request's body (/v3/kv/range), and the same as a Txn op */
json_t *ej_range_body(const char *key, unsigned flags, uint64_t limit);
json_t *ej_range(const char *key, unsigned flags, uint64_t limit);
/* Txn ops: a put (lease 0: none), a delete */
json_t *ej_put(const char *key, const void *val, size_t vlen, int64_t lease);
json_t *ej_del(const char *key);

/* A Txn's body: compares, and the ops of its success and failure branches
 * (arrays owned by root). */
struct ej_txn { json_t *root, *cmp, *ok, *fail; };
void ej_txn_init(struct ej_txn *t);

/* A number field: 64-bit numbers come back as strings; absent is 0. */
uint64_t ej_num(json_t *o, const char *field);
uint64_t ej_header_revision(json_t *j);

/* A kvs entry, decoded. */
struct ej_kv {
    bool found;
    uint64_t create, mod;
    int64_t lease;
    char *key;                     /* decoded, NUL-terminated */
    uint8_t *val;
    size_t vlen;
};
void ej_kv_free(struct ej_kv *k);
/* One kvs entry into k.  0, or -1 when it does not decode. */
int ej_kv_decode(json_t *e, struct ej_kv *k);
/* The i-th response of a Txn answer, of kind ("response_range", ...). */
json_t *ej_txn_resp(json_t *j, size_t i, const char *kind);
/* The first kv of the i-th response (a range) into k (found false when
 * empty); *count its count when asked.  0, or -1 malformed (that response
 * is missing or not a range). */
int ej_txn_kv(json_t *j, size_t i, struct ej_kv *k, uint64_t *count);

#endif
