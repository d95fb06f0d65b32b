/* hashmap.h - an intrusive hash table keyed by byte strings.  Objects embed
 * a struct hentry and own their key bytes; the table only links them.  Used
 * for lock names, flight keys, workstreams, channels and ids (the keys of
 * names are scoped keys, skey.h). */
#ifndef COORD_HASHMAP_H
#define COORD_HASHMAP_H

#include <stddef.h>
#include <stdint.h>

struct hentry {
    struct hentry *next;
    uint64_t hash;
    const uint8_t *key;
    size_t keylen;
};

struct hashmap {
    struct hentry **buckets;
    size_t nbuckets;          /* power of two, or 0 before first insert */
    size_t count;
};

uint64_t hash_bytes(const void *p, size_t n);
void hashmap_init(struct hashmap *m);
struct hentry *hashmap_get(const struct hashmap *m, const void *key, size_t n);
/* Links e (its key fields set by the caller).  Returns 0 or -1 (memory). */
int hashmap_put(struct hashmap *m, struct hentry *e);
void hashmap_del(struct hashmap *m, struct hentry *e);

#endif
