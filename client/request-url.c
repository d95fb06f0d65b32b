/* request-url.c - the <URL> of a canonical request key: RFC 3986 section
 * 6.2.2 (syntax-based) and 6.2.3 (scheme-based) normalization of an
 * absolute http or https URL, without its fragment.
 *
 * libcurl's URL API (curl_url) splits and validates the URL: scheme,
 * authority, port range, no control bytes.  It normalizes little, and not
 * all of it the RFC's way, so everything below is done here on the parts
 * it returns, with CURLU_PATH_AS_IS (curl's own dot removal is skipped):
 *
 *   scheme   lower case; only http and https (a request key is for HTTP
 *            requests; other schemes' default ports and rules differ
 *            between URL parsers in other languages);
 *   userinfo refused ("user:password@" is a credential: never in a key);
 *   host     percent-encoded unreserved characters decoded, then lower
 *            case; any other percent-encoding, a byte outside RFC 3986's
 *            reg-name (non-ASCII: write the xn-- form), an IPv6 zone id:
 *            refused.  A host whose last label is numeric (digits, or
 *            0x...) must be a dotted-decimal IPv4 address (four parts
 *            0-255, no leading zeros): curl, like browsers, would read
 *            "127.1" or "0x7f.0.0.1" as 127.0.0.1 and other parsers would
 *            not, so such forms are refused rather than guessed.  As a
 *            safety net, the host must be what curl read (case aside);
 *   port     decimal without leading zeros; dropped when empty or the
 *            scheme's default (80, 443);
 *   path     percent-encoding normalized (hex upper case, unreserved
 *            characters decoded), bytes that RFC 3986 does not allow in a
 *            path (space, non-ASCII, "|", "\"...) percent-encoded, then
 *            dot segments removed (section 5.2.4); empty is "/";
 *   query    split on "&", empty pieces dropped, each piece's
 *            percent-encoding normalized as in the path ("+" stays "+":
 *            RFC 3986 gives it no meaning), sorted by name (the bytes
 *            before the first "="), then pieces without "=" before those
 *            with one, then by value; repeated parameters kept; no "?"
 *            when nothing is left;
 *   fragment dropped.
 * A "%" not followed by two hex digits is refused.  The result never
 * holds "|" or a control byte, so it goes into the canonical string as
 * it is. */
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "coord-codes.h"
#include "request-key.h"

static bool is_alpha(unsigned char c) { return (c | 0x20) >= 'a' && (c | 0x20) <= 'z'; }
static bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
static bool is_unreserved(unsigned char c)
{
    return is_alpha(c) || is_digit(c) || c == '-' || c == '.' || c == '_' || c == '~';
}
static bool is_sub_delim(unsigned char c)
{
    return c && strchr("!$&'()*+,;=", c) != NULL;
}
/* pchar without pct-encoded, plus "/" (path) and "?" (query). */
static bool is_path_char(unsigned char c)
{
    return is_unreserved(c) || is_sub_delim(c) || c == ':' || c == '@' || c == '/';
}
static bool is_query_char(unsigned char c) { return is_path_char(c) || c == '?'; }
static int hex_val(unsigned char c)
{
    if (is_digit(c))
        return c - '0';
    c |= 0x20;
    return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}
static char lower(char c) { return c >= 'A' && c <= 'Z' ? (char)(c + 32) : c; }

static void put_pct(struct rk_buf *b, unsigned char c)
{
    static const char hex[] = "0123456789ABCDEF";
    char e[3] = { '%', hex[c >> 4], hex[c & 15] };
    rk_put(b, e, 3);
}

/* Appends s[0..n) with its percent-encoding normalized: "%xx" of an
 * unreserved character decoded, other "%xx" upper-cased, bytes for which
 * allowed() is false encoded.  what names the part for errors. */
static int norm_pct(struct rk_buf *b, const char *s, size_t n,
                    bool (*allowed)(unsigned char), const char *what, char *err)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '%') {
            int hi = i + 1 < n ? hex_val((unsigned char)s[i + 1]) : -1;
            int lo = i + 2 < n ? hex_val((unsigned char)s[i + 2]) : -1;
            if (hi < 0 || lo < 0) {
                snprintf(err, RK_ERR_MAX, "url: a %% not followed by two hex digits "
                         "in the %s", what);
                return COORD_EINVAL;
            }
            unsigned char d = (unsigned char)(hi * 16 + lo);
            if (is_unreserved(d))
                rk_putc(b, (char)d);
            else
                put_pct(b, d);
            i += 2;
        } else if (allowed(c)) {
            rk_putc(b, (char)c);
        } else {
            put_pct(b, c);
        }
    }
    return 0;
}

/* RFC 3986 section 5.2.4 on the absolute path in[0..n) (starts with
 * "/"); appends the result. */
static void remove_dots(struct rk_buf *out, const char *in, size_t n)
{
    size_t start = out->n;
    size_t i = 0;
    while (i < n && !out->oom) {
        const char *p = in + i;
        size_t left = n - i;
        if (left >= 3 && !memcmp(p, "../", 3)) {
            i += 3;                                   /* A */
        } else if (left >= 2 && !memcmp(p, "./", 2)) {
            i += 2;                                   /* A */
        } else if (left >= 3 && !memcmp(p, "/./", 3)) {
            i += 2;                                   /* B: "/./" -> "/" */
        } else if (left == 2 && !memcmp(p, "/.", 2)) {
            rk_putc(out, '/');                        /* B: "/." -> "/" */
            i += 2;
        } else if ((left >= 4 && !memcmp(p, "/../", 4)) ||
                   (left == 3 && !memcmp(p, "/..", 3))) {
            /* C: drop the last segment of the output (and its "/") */
            while (out->n > start && out->p[out->n - 1] != '/')
                out->n--;
            if (out->n > start)
                out->n--;
            if (left == 3) {
                rk_putc(out, '/');
                i += 3;
            } else {
                i += 3;                               /* leaves "/" in input */
            }
        } else if ((left == 1 && p[0] == '.') || (left == 2 && !memcmp(p, "..", 2))) {
            i += left;                                /* D */
        } else {                                      /* E */
            size_t j = 1;          /* the "/" (if any) and up to the next */
            while (j < left && p[j] != '/')
                j++;
            rk_put(out, p, j);
            i += j;
        }
    }
}

/* ---- the query ---- */

struct piece {
    const char *p;   /* normalized bytes */
    size_t n;
    size_t name;     /* bytes before the first "=" (n when none) */
};

static int piece_cmp(const void *pa, const void *pb)
{
    const struct piece *a = pa, *b = pb;
    size_t m = a->name < b->name ? a->name : b->name;
    int c = memcmp(a->p, b->p, m);
    if (c)
        return c;
    if (a->name != b->name)
        return a->name < b->name ? -1 : 1;
    bool av = a->name < a->n, bv = b->name < b->n;   /* has "=" */
    if (av != bv)
        return av ? 1 : -1;
    size_t an = a->n - a->name, bn = b->n - b->name;
    m = an < bn ? an : bn;
    c = memcmp(a->p + a->name, b->p + b->name, m);
    if (c)
        return c;
    return an < bn ? -1 : an > bn ? 1 : 0;
}

static int norm_query(struct rk_buf *out, const char *q, char *err)
{
    struct rk_buf norm = { 0 };
    size_t count = 0, qn = strlen(q);
    /* normalize each piece into norm, NUL-separated */
    for (size_t i = 0; i <= qn;) {
        size_t j = i;
        while (j < qn && q[j] != '&')
            j++;
        if (j > i) {
            int rc = norm_pct(&norm, q + i, j - i, is_query_char, "query", err);
            if (rc) {
                rk_free(&norm);
                return rc;
            }
            rk_putc(&norm, '\0');
            count++;
        }
        i = j + 1;
    }
    if (norm.oom) {
        rk_free(&norm);
        return COORD_ENOMEM;
    }
    if (count == 0) {
        rk_free(&norm);
        return 0;
    }
    struct piece *pc = malloc(count * sizeof *pc);
    if (!pc) {
        rk_free(&norm);
        return COORD_ENOMEM;
    }
    size_t off = 0;
    for (size_t k = 0; k < count; k++) {
        const char *p = norm.p + off;
        size_t n = strlen(p);       /* a normalized piece holds no NUL (%00) */
        const char *eq = memchr(p, '=', n);
        pc[k] = (struct piece){ p, n, eq ? (size_t)(eq - p) : n };
        off += n + 1;
    }
    qsort(pc, count, sizeof *pc, piece_cmp);
    rk_putc(out, '?');
    for (size_t k = 0; k < count; k++) {
        if (k)
            rk_putc(out, '&');
        rk_put(out, pc[k].p, pc[k].n);
    }
    free(pc);
    rk_free(&norm);
    return 0;
}

/* ---- the host ---- */

/* True when s (a dotted label list, lower case) has a numeric last label
 * (ignoring one trailing dot): all digits, or "0x" and hex digits. */
static bool numeric_last_label(const char *s, size_t n)
{
    if (n && s[n - 1] == '.')
        n--;
    size_t i = n;
    while (i > 0 && s[i - 1] != '.')
        i--;
    const char *l = s + i;
    size_t ln = n - i;
    if (ln == 0)
        return false;
    if (ln >= 2 && l[0] == '0' && l[1] == 'x') {
        for (size_t k = 2; k < ln; k++)
            if (hex_val((unsigned char)l[k]) < 0)
                return false;
        return true;
    }
    for (size_t k = 0; k < ln; k++)
        if (!is_digit((unsigned char)l[k]))
            return false;
    return true;
}

/* Four decimal parts 0..255 without leading zeros. */
static bool dotted_quad(const char *s, size_t n)
{
    int parts = 0;
    size_t i = 0;
    while (parts < 4) {
        size_t j = i;
        unsigned v = 0;
        while (j < n && is_digit((unsigned char)s[j]) && j - i < 4)
            v = v * 10 + (unsigned)(s[j++] - '0');
        if (j == i || j - i > 3 || v > 255 || (s[i] == '0' && j - i > 1))
            return false;
        parts++;
        if (parts < 4) {
            if (j >= n || s[j] != '.')
                return false;
            j++;
        }
        i = j;
    }
    return i == n;
}

/* The host as written (raw[0..n), between "//" and the port, userinfo
 * already refused), normalized into out. */
static int norm_host(struct rk_buf *out, const char *raw, size_t n, char *err)
{
    if (n == 0) {
        snprintf(err, RK_ERR_MAX, "url: no host");
        return COORD_EINVAL;
    }
    if (raw[0] == '[') {                         /* IP literal */
        for (size_t i = 0; i < n; i++) {
            char c = lower(raw[i]);
            if (c == '%') {
                snprintf(err, RK_ERR_MAX, "url: IPv6 zone ids are refused");
                return COORD_EINVAL;
            }
            if (!(is_digit((unsigned char)c) || (c >= 'a' && c <= 'f') || c == ':' ||
                  c == '.' || c == '[' || c == ']')) {
                snprintf(err, RK_ERR_MAX, "url: bad IPv6 address %.*s",
                         (int)(n > 64 ? 64 : n), raw);
                return COORD_EINVAL;
            }
            rk_putc(out, c);
        }
        return 0;
    }
    size_t start = out->n;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)raw[i];
        if (c == '%') {
            int hi = i + 1 < n ? hex_val((unsigned char)raw[i + 1]) : -1;
            int lo = i + 2 < n ? hex_val((unsigned char)raw[i + 2]) : -1;
            unsigned char d = (unsigned char)(hi * 16 + lo);
            if (hi < 0 || lo < 0 || !is_unreserved(d)) {
                snprintf(err, RK_ERR_MAX, "url: percent-encoded bytes in the host "
                         "are refused (only unreserved characters may be encoded)");
                return COORD_EINVAL;
            }
            c = d;
            i += 2;
        } else if (c >= 0x80) {
            snprintf(err, RK_ERR_MAX, "url: the host must be ASCII (write an "
                     "internationalized name in its xn-- form)");
            return COORD_EINVAL;
        } else if (!is_unreserved(c) && !is_sub_delim(c)) {
            snprintf(err, RK_ERR_MAX, "url: bad character '%c' in the host", c);
            return COORD_EINVAL;
        }
        rk_putc(out, lower((char)c));
    }
    if (out->oom)
        return COORD_ENOMEM;
    const char *h = out->p + start;
    size_t hn = out->n - start;
    if (numeric_last_label(h, hn) && !dotted_quad(h, hn)) {
        snprintf(err, RK_ERR_MAX, "url: host %.*s: an IPv4 address must be four "
                 "decimal parts 0-255 without leading zeros", (int)(hn > 64 ? 64 : hn), h);
        return COORD_EINVAL;
    }
    return 0;
}

/* ---- the whole URL ---- */

static int curl_part(CURLU *u, CURLUPart part, char **out)
{
    *out = NULL;
    CURLUcode rc = curl_url_get(u, part, out, 0);
    if (rc == CURLUE_OUT_OF_MEMORY)
        return COORD_ENOMEM;
    return 0;    /* absent parts (CURLUE_NO_*) leave *out NULL */
}

int rk_url(const char *url, struct rk_buf *out, char *err)
{
    /* scheme "://" authority, checked on the text itself: curl also takes
     * "http:/host" and "http:host" */
    size_t i = 0;
    size_t len = strlen(url);
    if (len > RK_URL_MAX) {
        snprintf(err, RK_ERR_MAX, "url: longer than %u bytes (%zu)", RK_URL_MAX, len);
        return COORD_EINVAL;
    }
    if (!is_alpha((unsigned char)url[0])) {
        snprintf(err, RK_ERR_MAX, "url: must be absolute: http://host/... or "
                 "https://host/...");
        return COORD_EINVAL;
    }
    while (is_alpha((unsigned char)url[i]) || is_digit((unsigned char)url[i]) ||
           url[i] == '+' || url[i] == '-' || url[i] == '.')
        i++;
    char scheme[8];
    size_t sn = i;
    bool https = sn == 5 && !strncasecmp(url, "https", 5);
    if (!(https || (sn == 4 && !strncasecmp(url, "http", 4))) || url[i] != ':') {
        snprintf(err, RK_ERR_MAX, "url: the scheme must be http or https");
        return COORD_EINVAL;
    }
    if (strncmp(url + i, "://", 3) != 0) {
        snprintf(err, RK_ERR_MAX, "url: must be absolute: %s://host/...",
                 https ? "https" : "http");
        return COORD_EINVAL;
    }
    memcpy(scheme, https ? "https" : "http", https ? 6 : 5);
    const char *auth = url + i + 3;
    size_t an = strcspn(auth, "/?#");
    if (memchr(auth, '@', an)) {
        snprintf(err, RK_ERR_MAX, "url: user information (user:password@) is "
                 "refused: a credential never goes into a key");
        return COORD_EINVAL;
    }
    size_t hn;
    if (an && auth[0] == '[') {
        const char *close = memchr(auth, ']', an);
        hn = close ? (size_t)(close - auth) + 1 : an;
    } else {
        const char *colon = memchr(auth, ':', an);
        hn = colon ? (size_t)(colon - auth) : an;
    }

    CURLU *u = curl_url();
    if (!u)
        return COORD_ENOMEM;
    CURLUcode cu = curl_url_set(u, CURLUPART_URL, url,
                                CURLU_PATH_AS_IS | CURLU_ALLOW_SPACE);
    if (cu == CURLUE_OUT_OF_MEMORY) {
        curl_url_cleanup(u);
        return COORD_ENOMEM;
    }
    if (cu != CURLUE_OK) {
        snprintf(err, RK_ERR_MAX, "url: not a valid URL (%s)", curl_url_strerror(cu));
        curl_url_cleanup(u);
        return COORD_EINVAL;
    }
    char *host = NULL, *zone = NULL, *port = NULL, *path = NULL, *query = NULL;
    int rc = curl_part(u, CURLUPART_HOST, &host);
    if (!rc)
        rc = curl_part(u, CURLUPART_ZONEID, &zone);
    if (!rc)
        rc = curl_part(u, CURLUPART_PORT, &port);
    if (!rc)
        rc = curl_part(u, CURLUPART_PATH, &path);
    if (!rc)
        rc = curl_part(u, CURLUPART_QUERY, &query);
    if (rc)
        goto done;
    if (zone) {
        snprintf(err, RK_ERR_MAX, "url: IPv6 zone ids are refused");
        rc = COORD_EINVAL;
        goto done;
    }

    rk_puts(out, scheme);
    rk_puts(out, "://");
    size_t host_at = out->n;
    rc = norm_host(out, auth, hn, err);
    if (rc)
        goto done;
    /* the safety net: curl must have read the same host */
    if (!host || strlen(host) != out->n - host_at ||
        strncasecmp(host, out->p + host_at, out->n - host_at) != 0) {
        snprintf(err, RK_ERR_MAX, "url: host %.*s is not in a canonical form (read "
                 "as %.64s)", (int)(hn > 64 ? 64 : hn), auth, host ? host : "nothing");
        rc = COORD_EINVAL;
        goto done;
    }
    if (port) {
        char *end;
        unsigned long pv = strtoul(port, &end, 10);
        if (pv != (https ? 443ul : 80ul)) {
            char pb[16];
            snprintf(pb, sizeof pb, ":%lu", pv);
            rk_puts(out, pb);
        }
    }
    size_t path_at = out->n;
    struct rk_buf p = { 0 };
    rc = norm_pct(&p, path ? path : "/", path ? strlen(path) : 1, is_path_char,
                  "path", err);
    if (!rc && p.oom)
        rc = COORD_ENOMEM;
    if (!rc) {
        if (p.n == 0 || p.p[0] != '/')
            rk_putc(out, '/');    /* curl gives "/" for an empty path anyway */
        remove_dots(out, p.p ? p.p : "", p.n);
        if (out->n == path_at)
            rk_putc(out, '/');
    }
    rk_free(&p);
    if (!rc && query)
        rc = norm_query(out, query, err);
    if (!rc && out->oom)
        rc = COORD_ENOMEM;
done:
    curl_free(host);
    curl_free(zone);
    curl_free(port);
    curl_free(path);
    curl_free(query);
    curl_url_cleanup(u);
    return rc;
}
