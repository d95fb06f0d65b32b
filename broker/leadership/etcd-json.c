/* etcd-json.c - the bodies of etcd's v3 JSON gateway, built and read:
 * the ledger's keys, ranges, puts, deletes and Txns, and the kvs and
 * responses of their answers (leader-etcd.c runs the ops; etcd-http.c
 * carries the calls). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "etcd-http.h"
#include "etcd-json.h"

void ej_hex(char *out, const uint8_t *p, size_t n)
{
    const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        *out++ = digits[p[i] >> 4];
        *out++ = digits[p[i] & 15];
    }
    *out = 0;
}

/* P w/W/kind[/N]: kind may end in "/" (a prefix) */
void ej_key(char *out, const char *prefix, const uint8_t *ws, size_t wl,
                 const char *kind, const uint8_t *name, size_t nl)
{
    char wh[2 * WS_BYTES_MAX + 1], nh[2 * NAME_BYTES_MAX + 1];
    ej_hex(wh, ws, wl < WS_BYTES_MAX ? wl : WS_BYTES_MAX);
    nh[0] = 0;
    if (name)
        ej_hex(nh, name, nl < NAME_BYTES_MAX ? nl : NAME_BYTES_MAX);
    snprintf(out, EKEY_MAX, "%.127sw/%s/%.8s%s%s", prefix, wh, kind, name ? "/" : "", nh);
}

json_t *ej_b64(const void *p, size_t n)
{
    char *s = etcd_b64(p, n);
    json_t *j = s ? json_string(s) : NULL;
    free(s);
    return j;
}

/* the end of the range of keys starting with k */
json_t *ej_end(const char *k)
{
    size_t n = strlen(k);
    char *e = strdup(k);
    if (!e)
        return NULL;
    e[n - 1]++;
    json_t *j = ej_b64(e, n);
    free(e);
    return j;
}

json_t *ej_numstr(uint64_t v)
{
    char b[24];
    snprintf(b, sizeof b, "%llu", (unsigned long long)v);
    return json_string(b);
}

/* compare: target "CREATE", "MOD" or "VERSION" of key equals v */
json_t *ej_cmp(const char *key, const char *target, uint64_t v)
{
    const char *field = strcmp(target, "CREATE") == 0 ? "create_revision"
                        : strcmp(target, "MOD") == 0 ? "mod_revision" : "version";
    json_t *c = json_object();
    json_object_set_new(c, "key", ej_b64(key, strlen(key)));
    json_object_set_new(c, "target", json_string(target));
    json_object_set_new(c, "result", json_string("EQUAL"));
    json_object_set_new(c, field, ej_numstr(v));
    return c;
}

json_t *ej_range_body(const char *key, unsigned flags, uint64_t limit)
{
    json_t *r = json_object();
    json_object_set_new(r, "key", ej_b64(key, strlen(key)));
    if (flags & EJ_PREFIX)
        json_object_set_new(r, "range_end", ej_end(key));
    if (limit)
        json_object_set_new(r, "limit", ej_numstr(limit));
    if (flags & (EJ_NEWEST | EJ_OLDEST)) {
        json_object_set_new(r, "sort_target", json_string("CREATE"));
        json_object_set_new(r, "sort_order", json_string(flags & EJ_NEWEST ? "DESCEND"
                                                                           : "ASCEND"));
    }
    if (flags & EJ_KEYS_ONLY)
        json_object_set_new(r, "keys_only", json_true());
    if (flags & EJ_COUNT_ONLY)
        json_object_set_new(r, "count_only", json_true());
    return r;
}

json_t *ej_range(const char *key, unsigned flags, uint64_t limit)
{
    json_t *o = json_object();
    json_object_set_new(o, "request_range", ej_range_body(key, flags, limit));
    return o;
}

json_t *ej_put(const char *key, const void *val, size_t vlen, int64_t lease)
{
    json_t *p = json_object();
    json_object_set_new(p, "key", ej_b64(key, strlen(key)));
    json_object_set_new(p, "value", ej_b64(val, vlen));
    if (lease)
        json_object_set_new(p, "lease", ej_numstr((uint64_t)lease));
    json_t *o = json_object();
    json_object_set_new(o, "request_put", p);
    return o;
}

json_t *ej_del(const char *key)
{
    json_t *d = json_object();
    json_object_set_new(d, "key", ej_b64(key, strlen(key)));
    json_t *o = json_object();
    json_object_set_new(o, "request_delete_range", d);
    return o;
}

void ej_txn_init(struct ej_txn *t)
{
    t->root = json_object();
    t->cmp = json_array();
    t->ok = json_array();
    t->fail = json_array();
    json_object_set_new(t->root, "compare", t->cmp);
    json_object_set_new(t->root, "success", t->ok);
    json_object_set_new(t->root, "failure", t->fail);
}

/* 64-bit numbers come back as strings; absent is 0 */
uint64_t ej_num(json_t *o, const char *field)
{
    json_t *v = o ? json_object_get(o, field) : NULL;
    if (json_is_string(v))
        return strtoull(json_string_value(v), NULL, 10);
    if (json_is_integer(v))
        return (uint64_t)json_integer_value(v);
    return 0;
}

void ej_kv_free(struct ej_kv *k)
{
    free(k->key);
    free(k->val);
    memset(k, 0, sizeof *k);
}

/* One kvs entry into k.  0, or -1 when it does not decode. */
int ej_kv_decode(json_t *e, struct ej_kv *k)
{
    memset(k, 0, sizeof *k);
    k->found = true;
    k->create = ej_num(e, "create_revision");
    k->mod = ej_num(e, "mod_revision");
    k->lease = (int64_t)ej_num(e, "lease");
    const char *key = json_string_value(json_object_get(e, "key"));
    const char *val = json_string_value(json_object_get(e, "value"));
    size_t kn;
    if (!key || etcd_unb64(key, (uint8_t **)&k->key, &kn) < 0)
        return -1;
    k->key[kn] = 0;
    if (etcd_unb64(val ? val : "", &k->val, &k->vlen) < 0)
        return -1;
    return 0;
}

/* The i-th response of a Txn answer, of kind ("response_range", ...). */
json_t *ej_txn_resp(json_t *j, size_t i, const char *kind)
{
    json_t *rs = json_object_get(j, "responses");
    json_t *one = json_array_get(rs, i);
    return one ? json_object_get(one, kind) : NULL;
}

/* The first kv of the i-th response (a range) into k (found false when
 * empty); *count its count when asked.  0, or -1 malformed: a Txn answer
 * without that range response (no "responses", fewer of them, another
 * kind) says nothing of the key, and is never read as "absent" (an empty
 * range is {"response_range":{...}} without "kvs"). */
int ej_txn_kv(json_t *j, size_t i, struct ej_kv *k, uint64_t *count)
{
    memset(k, 0, sizeof *k);
    json_t *rr = ej_txn_resp(j, i, "response_range");
    if (count)
        *count = ej_num(rr, "count");
    json_t *kvs = rr ? json_object_get(rr, "kvs") : NULL;
    if (!json_is_object(rr) || (kvs && !json_is_array(kvs)))
        return -1;
    json_t *first = json_array_get(kvs, 0);
    if (!first)
        return 0;
    return ej_kv_decode(first, k);
}


uint64_t ej_header_revision(json_t *j)
{
    return ej_num(json_object_get(j, "header"), "revision");
}

int ej_unhex(const char *s, uint8_t *out, size_t cap, size_t *n)
{
    size_t len = strlen(s);
    if (len % 2 || len / 2 > cap)
        return -1;
    for (size_t i = 0; i < len; i += 2) {
        int v = 0;
        for (int k = 0; k < 2; k++) {
            char c = s[i + k];
            int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
            if (d < 0)
                return -1;
            v = v * 16 + d;
        }
        out[i / 2] = (uint8_t)v;
    }
    *n = len / 2;
    return 0;
}
