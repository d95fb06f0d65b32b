/* request-key.c - canonical request keys (coord_request_key): the same
 * single-flight key for the same request in every coord client.
 *
 * The canonical string is the protocol's, fields in this order joined by
 * "|":
 *
 *   request-v1 | <METHOD> | <URL> | body:<hex sha256> or body:none
 *   | ct:<media type> or ct:none | user:<u> | tenant:<t> or tenant:none
 *   | auth:<n> | accept:<a> (absent: the any-type range, star slash star)
 *   | locale:<l> or locale:default | freshness:<f> (absent: cache-ok)
 *   | api:<v> or api:none | h:<name>=<value>,... ("h:" without headers)
 *
 * (without the spaces around "|"),
 * and the key is "request-v1:" + lower-case hex SHA-256 of it (OpenSSL's
 * libcrypto, EVP_Digest).  What the protocol leaves open, decided here
 * (and in the protocol document and tests/vectors/README.md, for the other
 * clients):
 *
 *   - NULL and "" are an absent field; an absent field is its default
 *     word.  method, url and user are required.
 *   - Field values (method, ct, user, tenant, accept, locale, api, header
 *     names and values) percent-encode "%", "|", ",", "=" and bytes below
 *     0x20 with upper-case hex; other bytes (0x7f and non-ASCII included)
 *     stay as they are.  The URL is not encoded again: its normalization
 *     (request-url.c) already encodes every such byte but "%", ",", "=",
 *     which cannot be mistaken for a separator there.
 *   - method and header names must be HTTP tokens (RFC 9110 tchar);
 *     method is upper-cased (ASCII), header names lower-cased.
 *   - Header values are trimmed of spaces and tabs.  Headers are sorted by
 *     name (byte order); repeated names keep the order given (the order of
 *     repeated header lines can matter to a server, so it is not sorted
 *     away).  Authorization, Proxy-Authorization and Cookie are refused.
 *   - ct: the media type (before any ";"), trimmed of spaces and tabs,
 *     ASCII lower case.  It is JSON when it is application/json or its
 *     subtype ends in "+json"; the body is then RFC 8785-canonicalized
 *     (request-jcs.c) before hashing.  An empty body is hashed as zero
 *     bytes whatever its type (an empty POST with a JSON content type is
 *     common and means "no JSON"); a JSON type without a body is fine.
 *   - freshness is one of the three words exactly (case-sensitive).
 *
 * The canonical string holds no byte below 0x20 (so it prints on one line)
 * and no NUL. */
#include <openssl/evp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "coord.h"
#include "request-key.h"

/* ---- the buffer ---- */

void rk_put(struct rk_buf *b, const void *p, size_t n)
{
    if (b->oom || n == 0)
        return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) {
            b->oom = true;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, p, n);
    b->n += n;
    b->p[b->n] = '\0';
}

void rk_putc(struct rk_buf *b, char c)
{
    rk_put(b, &c, 1);
}

void rk_puts(struct rk_buf *b, const char *s)
{
    rk_put(b, s, strlen(s));
}

const char *rk_cstr(struct rk_buf *b)
{
    if (!b->p && !b->oom) {
        b->p = malloc(1);
        if (!b->p) {
            b->oom = true;
            return NULL;
        }
        b->p[0] = '\0';
        b->cap = 1;
    }
    return b->p;
}

void rk_free(struct rk_buf *b)
{
    free(b->p);
    memset(b, 0, sizeof *b);
}

/* ---- the last error, per thread ---- */

static __thread char last_err[RK_ERR_MAX];

COORD_API const char *coord_request_key_error(void)
{
    return last_err[0] ? last_err : "no error";
}

__attribute__((format(printf, 2, 3)))
static int fail(char *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, RK_ERR_MAX, fmt, ap);
    va_end(ap);
    return COORD_EINVAL;
}

/* ---- fields ---- */

static bool present(const char *s)
{
    return s && s[0];
}

/* RFC 9110 tchar. */
static bool is_tchar(unsigned char c)
{
    return (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') ||
           (c && strchr("!#$%&'*+-.^_`|~", c));
}

static bool is_token(const char *s)
{
    if (!s[0])
        return false;
    for (; *s; s++)
        if (!is_tchar((unsigned char)*s))
            return false;
    return true;
}

/* Appends s[0..n) as a field value; fold: 'u' upper-case, 'l' lower-case
 * (ASCII), 0 as is. */
static void put_field_n(struct rk_buf *b, const char *s, size_t n, char fold)
{
    static const char hex[] = "0123456789ABCDEF";
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == '%' || c == '|' || c == ',' || c == '=') {
            char e[3] = { '%', hex[c >> 4], hex[c & 15] };
            rk_put(b, e, 3);
            continue;
        }
        if (fold == 'u' && c >= 'a' && c <= 'z')
            c = (unsigned char)(c - 32);
        else if (fold == 'l' && c >= 'A' && c <= 'Z')
            c = (unsigned char)(c + 32);
        rk_putc(b, (char)c);
    }
}

static void put_field(struct rk_buf *b, const char *label, const char *s,
                      const char *dflt)
{
    rk_putc(b, '|');
    rk_puts(b, label);
    if (present(s))
        put_field_n(b, s, strlen(s), 0);
    else
        rk_puts(b, dflt);
}

static bool is_ows(char c)
{
    return c == ' ' || c == '\t';
}

/* s trimmed of spaces and tabs: *n bytes from the result. */
static const char *trim(const char *s, size_t len, size_t *n)
{
    while (len && is_ows(*s)) {
        s++;
        len--;
    }
    while (len && is_ows(s[len - 1]))
        len--;
    *n = len;
    return s;
}

static bool ieq(const char *a, size_t an, const char *b)
{
    return an == strlen(b) && !strncasecmp(a, b, an);
}

/* The media type of content_type (before ";", trimmed). */
static const char *media_type(const char *ct, size_t *n)
{
    return trim(ct, strcspn(ct, ";"), n);
}

static bool is_json_type(const char *mt, size_t n)
{
    if (ieq(mt, n, "application/json"))
        return true;
    return memchr(mt, '/', n) && n >= 5 && !strncasecmp(mt + n - 5, "+json", 5);
}

static void put_hex(struct rk_buf *b, const unsigned char *d, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        char e[2] = { hex[d[i] >> 4], hex[d[i] & 15] };
        rk_put(b, e, 2);
    }
}

static bool sha256(const void *p, size_t n, unsigned char md[32])
{
    unsigned int len = 0;
    return EVP_Digest(p ? p : "", n, md, &len, EVP_sha256(), NULL) == 1 && len == 32;
}

/* ---- headers ---- */

struct hdr {
    size_t index;          /* the order given, for a stable sort */
    const char *name;
    const char *value;     /* trimmed: vn bytes */
    size_t vn;
};

static int hdr_cmp(const void *pa, const void *pb)
{
    const struct hdr *a = pa, *b = pb;
    /* names are tokens: compare them lower-cased, byte by byte */
    for (size_t i = 0;; i++) {
        unsigned char ca = (unsigned char)a->name[i], cb = (unsigned char)b->name[i];
        if (ca >= 'A' && ca <= 'Z')
            ca = (unsigned char)(ca + 32);
        if (cb >= 'A' && cb <= 'Z')
            cb = (unsigned char)(cb + 32);
        if (ca != cb)
            return ca < cb ? -1 : 1;
        if (!ca)
            break;
    }
    return a->index < b->index ? -1 : a->index > b->index;
}

static int put_headers(struct rk_buf *b, const coord_request *r, char *err)
{
    rk_puts(b, "|h:");
    if (r->n_headers == 0)
        return 0;
    if (!r->headers)
        return fail(err, "headers: NULL with n_headers %zu", r->n_headers);
    struct hdr *h = malloc(r->n_headers * sizeof *h);
    if (!h)
        return COORD_ENOMEM;
    int rc = 0;
    for (size_t i = 0; i < r->n_headers && !rc; i++) {
        const coord_header *in = &r->headers[i];
        if (!in->name || !is_token(in->name))
            rc = fail(err, "header %.64s: the name must be an HTTP token",
                      in->name ? in->name : "(NULL)");
        else if (!strcasecmp(in->name, "authorization") ||
                 !strcasecmp(in->name, "proxy-authorization") ||
                 !strcasecmp(in->name, "cookie"))
            rc = fail(err, "header %s: refused: a credential never goes into a key "
                      "(use the auth generation)", in->name);
        else if (!in->value)
            rc = fail(err, "header %s: no value", in->name);
        else {
            h[i].index = i;
            h[i].name = in->name;
            h[i].value = trim(in->value, strlen(in->value), &h[i].vn);
        }
    }
    if (!rc) {
        qsort(h, r->n_headers, sizeof *h, hdr_cmp);
        for (size_t i = 0; i < r->n_headers; i++) {
            if (i)
                rk_putc(b, ',');
            put_field_n(b, h[i].name, strlen(h[i].name), 'l');
            rk_putc(b, '=');
            put_field_n(b, h[i].value, h[i].vn, 0);
        }
    }
    free(h);
    return rc;
}

/* ---- the canonical string ---- */

static int canonical(const coord_request *r, struct rk_buf *b, char *err)
{
    if (!present(r->method) || !is_token(r->method))
        return fail(err, "method: %s", present(r->method) ? "must be an HTTP token"
                                                          : "missing");
    if (!present(r->url))
        return fail(err, "url: missing");
    if (!present(r->user))
        return fail(err, "user: missing (the key is per user; use a stable id)");
    if (present(r->freshness) && strcmp(r->freshness, "cache-ok") != 0 &&
        strcmp(r->freshness, "revalidate") != 0 &&
        strcmp(r->freshness, "network-only") != 0)
        return fail(err, "freshness: must be cache-ok, revalidate or network-only, "
                    "not %.64s", r->freshness);
    if (r->auth_gen > RK_AUTH_GEN_MAX)
        return fail(err, "auth_gen: %llu is above 2^53-1",
                    (unsigned long long)r->auth_gen);
    if (r->has_body && !r->body && r->body_len)
        return fail(err, "body: NULL with body_len %zu", r->body_len);

    rk_puts(b, "request-v1|");
    put_field_n(b, r->method, strlen(r->method), 'u');
    rk_putc(b, '|');
    int rc = rk_url(r->url, b, err);
    if (rc)
        return rc;

    const char *mt = NULL;
    size_t mtn = 0;
    if (present(r->content_type))
        mt = media_type(r->content_type, &mtn);
    rk_puts(b, "|body:");
    if (!r->has_body) {
        rk_puts(b, "none");
    } else {
        unsigned char md[32];
        bool ok;
        if (mt && is_json_type(mt, mtn) && r->body_len > 0) {
            struct rk_buf jcs = { 0 };
            rc = rk_jcs(r->body, r->body_len, &jcs, err);
            ok = !rc && sha256(jcs.p, jcs.n, md);
            rk_free(&jcs);
            if (rc)
                return rc;
        } else {
            ok = sha256(r->body, r->body_len, md);
        }
        if (!ok)
            return fail(err, "body: SHA-256 failed (libcrypto)");
        put_hex(b, md, sizeof md);
    }
    rk_puts(b, "|ct:");
    if (mtn)
        put_field_n(b, mt, mtn, 'l');
    else
        rk_puts(b, "none");
    put_field(b, "user:", r->user, "");
    put_field(b, "tenant:", r->tenant, "none");
    char num[32];
    snprintf(num, sizeof num, "|auth:%llu", (unsigned long long)r->auth_gen);
    rk_puts(b, num);
    put_field(b, "accept:", r->accept, "*/*");
    put_field(b, "locale:", r->locale, "default");
    put_field(b, "freshness:", r->freshness, "cache-ok");
    put_field(b, "api:", r->api, "none");
    return put_headers(b, r, err);
}

COORD_API int coord_request_key(const coord_request *req,
                                char key[COORD_REQUEST_KEY_SIZE], char **canonical_out)
{
    if (canonical_out)
        *canonical_out = NULL;
    if (key)
        key[0] = '\0';
    last_err[0] = '\0';
    if (!req || !key)
        return fail(last_err, "coord_request_key: NULL %s", req ? "key" : "req");
    struct rk_buf b = { 0 };
    int rc = canonical(req, &b, last_err);
    if (!rc && b.oom)
        rc = COORD_ENOMEM;
    unsigned char md[32];
    if (!rc && !sha256(b.p, b.n, md))
        rc = fail(last_err, "SHA-256 failed (libcrypto)");
    if (rc) {
        if (rc == COORD_ENOMEM)
            snprintf(last_err, sizeof last_err, "out of memory");
        rk_free(&b);
        return rc;
    }
    static const char hex[] = "0123456789abcdef";
    memcpy(key, "request-v1:", 11);
    for (size_t i = 0; i < sizeof md; i++) {
        key[11 + 2 * i] = hex[md[i] >> 4];
        key[12 + 2 * i] = hex[md[i] & 15];
    }
    key[11 + 2 * sizeof md] = '\0';
    if (canonical_out)
        *canonical_out = b.p;     /* handed over */
    else
        free(b.p);
    return 0;
}
