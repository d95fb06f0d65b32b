/* hashmap.c - see hashmap.h. */
#include <stdlib.h>
#include <string.h>
#include "hashmap.h"

uint64_t hash_bytes(const void *p, size_t n)
{
    /* eight bytes at a time (a lock's scoped key is two or three), each word mixed in by a multiply and a shift, then
     * murmur3's finalizer, so the low bits that pick a bucket depend on
     * every byte.  Clients are the same user: no flooding defence needed. */
    const uint8_t *b = p;
    if (n == 8) {
        /* ids (lock ids, flight ids): one multiply, the high half folded
         * into the low bits that pick a bucket */
        uint64_t v;
        memcpy(&v, b, 8);
        v *= 0x9e3779b97f4a7c15ull;
        return v ^ (v >> 29) ^ (v >> 47);
    }
    uint64_t h = 0xcbf29ce484222325ull ^ ((uint64_t)n * 0x9e3779b97f4a7c15ull), w;
    size_t left = n;
    for (; left >= 8; b += 8, left -= 8) {
        memcpy(&w, b, 8);
        h = (h ^ w) * 0x9e3779b97f4a7c15ull;
        h ^= h >> 29;
    }
    if (left) {
        if (n >= 8) {
            memcpy(&w, b + left - 8, 8);   /* the last 8 bytes, overlapping */
        } else {
            w = 0;
            for (size_t i = 0; i < left; i++)
                w |= (uint64_t)b[i] << (8 * i);
        }
        h = (h ^ w) * 0x9e3779b97f4a7c15ull;
        h ^= h >> 29;
    }
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    return h ^ (h >> 33);
}

void hashmap_init(struct hashmap *m)
{
    m->buckets = NULL;
    m->nbuckets = 0;
    m->count = 0;
}

struct hentry *hashmap_get(const struct hashmap *m, const void *key, size_t n)
{
    if (!m->nbuckets)
        return NULL;
    uint64_t h = hash_bytes(key, n);
    for (struct hentry *e = m->buckets[h & (m->nbuckets - 1)]; e; e = e->next)
        if (e->hash == h && e->keylen == n && (n == 0 || memcmp(e->key, key, n) == 0))
            return e;
    return NULL;
}

static int grow(struct hashmap *m)
{
    size_t nb = m->nbuckets ? m->nbuckets * 2 : 16;
    struct hentry **b = calloc(nb, sizeof *b);
    if (!b)
        return -1;
    for (size_t i = 0; i < m->nbuckets; i++) {
        struct hentry *e = m->buckets[i];
        while (e) {
            struct hentry *next = e->next;
            size_t j = e->hash & (nb - 1);
            e->next = b[j];
            b[j] = e;
            e = next;
        }
    }
    free(m->buckets);
    m->buckets = b;
    m->nbuckets = nb;
    return 0;
}

int hashmap_put(struct hashmap *m, struct hentry *e)
{
    if (m->count >= m->nbuckets && grow(m) < 0 && m->nbuckets == 0)
        return -1;
    e->hash = hash_bytes(e->key, e->keylen);
    size_t i = e->hash & (m->nbuckets - 1);
    e->next = m->buckets[i];
    m->buckets[i] = e;
    m->count++;
    return 0;
}

void hashmap_del(struct hashmap *m, struct hentry *e)
{
    struct hentry **pp = &m->buckets[e->hash & (m->nbuckets - 1)];
    while (*pp && *pp != e)
        pp = &(*pp)->next;
    if (*pp) {
        *pp = e->next;
        m->count--;
    }
    e->next = NULL;
}
