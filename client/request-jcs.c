/* request-jcs.c - RFC 8785 JSON Canonicalization Scheme (JCS) for the
 * bodies of canonical request keys.
 *
 * Parsing is jansson's, with JSON_REJECT_DUPLICATES (a duplicate member
 * name is an error: JSON parsers disagree on which one wins, so such a
 * body has no canonical form), JSON_DECODE_INT_AS_REAL (JCS reads every
 * number as an IEEE 754 double, as I-JSON and JavaScript do: 10 and 10.0
 * and 1e1 are the same number), JSON_DECODE_ANY (a scalar text is JSON
 * too) and JSON_ALLOW_NUL (\u0000 is a valid escape in a string value;
 * jansson refuses it in a member name, so such a body is an error, in
 * every client alike: the vectors say so).  jansson checks the
 * UTF-8 of the text and refuses lone surrogates ("\ud800"), which I-JSON
 * and JCS forbid; its nesting limit (2048) bounds our recursion.
 *
 * Serialization (RFC 8785 section 3.2): no white space; literals as is;
 * strings with only the escapes JSON requires (\" \\ \b \f \n \r \t, other
 * controls as \u00xx in lower-case hex, everything else as raw UTF-8);
 * numbers as ECMAScript's Number.prototype.toString(); object members
 * sorted by their names as arrays of UTF-16 code units (not by UTF-8
 * bytes: they differ for characters above U+FFFF against U+E000..U+FFFF).
 *
 * Numbers: the ES algorithm needs the shortest decimal digits s (k of
 * them, exponent n) that read back as x, the closest such when several
 * do.  glibc's printf("%.*e") rounds exactly, so for k = 1..17 the
 * candidate is the correctly rounded k-digit decimal; when it does not
 * read back but x is a power of two (whose rounding interval is narrower
 * below than above), the next k-digit decimal above may still do, so that
 * one is tried too.  The unit test compares against node's output. */
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "coord-codes.h"
#include "request-key.h"

/* ---- numbers ---- */

/* Digits of x (> 0, finite) with k significant digits: *n such that x ~
 * 0.d1d2..dk * 10^n.  Returns whether the k-digit value reads back as x;
 * digits gets the digits (NUL-ended, k of them; k+1 after a carry). */
static bool digits_k(double x, int k, char digits[24], int *n)
{
    char buf[40];
    snprintf(buf, sizeof buf, "%.*e", k - 1, x);
    /* buf: d[.ddd]e[+-]XX */
    int nd = 0;
    const char *p = buf;
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9')
            digits[nd++] = *p;
    digits[nd] = '\0';
    int e = atoi(p + 1);
    *n = e + 1;
    if (strtod(buf, NULL) == x)
        return true;
    /* the candidate is below x: the next one up may be inside x's
     * rounding interval (wider above when x is a power of two) */
    if (strtod(buf, NULL) > x)
        return false;
    char up[24];
    memcpy(up, digits, (size_t)nd + 1);
    int i = nd - 1;
    while (i >= 0 && up[i] == '9')
        up[i--] = '0';
    int un = *n;
    if (i < 0) {                      /* 99..9 + 1 = 100..0 */
        memmove(up + 1, up, (size_t)nd + 1);
        up[0] = '1';
        un++;
    } else {
        up[i]++;
    }
    char cand[48];
    snprintf(cand, sizeof cand, "0.%se%d", up, un);
    if (strtod(cand, NULL) != x)
        return false;
    memcpy(digits, up, strlen(up) + 1);
    *n = un;
    return true;
}

size_t rk_number(double x, char out[RK_NUMBER_MAX])
{
    char *o = out;
    if (x == 0) {                     /* +0 and -0 */
        strcpy(out, "0");
        return 1;
    }
    if (x < 0) {
        *o++ = '-';
        x = -x;
    }
    char d[24];
    int n = 0, k;
    for (k = 1; k <= 17; k++)
        if (digits_k(x, k, d, &n))
            break;
    if (k > 17)                       /* cannot happen: 17 digits always do */
        digits_k(x, 17, d, &n);
    k = (int)strlen(d);
    while (k > 1 && d[k - 1] == '0')  /* after a carry */
        d[--k] = '\0';

    if (k <= n && n <= 21) {          /* 1e20 -> 100000000000000000000 */
        memcpy(o, d, (size_t)k);
        o += k;
        memset(o, '0', (size_t)(n - k));
        o += n - k;
    } else if (0 < n && n <= 21) {    /* 1.5 */
        memcpy(o, d, (size_t)n);
        o += n;
        *o++ = '.';
        memcpy(o, d + n, (size_t)(k - n));
        o += k - n;
    } else if (-6 < n && n <= 0) {    /* 0.000001 */
        *o++ = '0';
        *o++ = '.';
        memset(o, '0', (size_t)-n);
        o += -n;
        memcpy(o, d, (size_t)k);
        o += k;
    } else {                          /* 1e+21, 1.5e-7 */
        *o++ = d[0];
        if (k > 1) {
            *o++ = '.';
            memcpy(o, d + 1, (size_t)(k - 1));
            o += k - 1;
        }
        o += sprintf(o, "e%c%d", n - 1 >= 0 ? '+' : '-', abs(n - 1));
    }
    *o = '\0';
    return (size_t)(o - out);
}

/* ---- strings ---- */

static void put_string(struct rk_buf *b, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    rk_putc(b, '"');
    size_t run = 0;                   /* bytes copied as they are */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char u[7];
        switch (c) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        default:
            if (c < 0x20) {
                memcpy(u, "\\u00", 4);
                u[4] = hex[c >> 4];
                u[5] = hex[c & 15];
                u[6] = '\0';
                esc = u;
            }
        }
        if (!esc)
            continue;
        rk_put(b, s + run, i - run);
        rk_puts(b, esc);
        run = i + 1;
    }
    rk_put(b, s + run, n - run);
    rk_putc(b, '"');
}

/* ---- member order: UTF-16 code units ---- */

/* The next UTF-16 code unit of the valid UTF-8 s[*i..n), with *pending
 * holding a low surrogate still to come.  -1 at the end. */
static int next_unit(const unsigned char *s, size_t n, size_t *i, int *pending)
{
    if (*pending >= 0) {
        int u = *pending;
        *pending = -1;
        return u;
    }
    if (*i >= n)
        return -1;
    unsigned c = s[*i];
    uint32_t cp;
    int len;
    if (c < 0x80) { cp = c; len = 1; }
    else if (c < 0xE0) { cp = c & 0x1F; len = 2; }
    else if (c < 0xF0) { cp = c & 0x0F; len = 3; }
    else { cp = c & 0x07; len = 4; }
    for (int j = 1; j < len && *i + (size_t)j < n; j++)
        cp = (cp << 6) | (s[*i + (size_t)j] & 0x3F);
    *i += (size_t)len;
    if (cp < 0x10000)
        return (int)cp;
    cp -= 0x10000;
    *pending = (int)(0xDC00 + (cp & 0x3FF));
    return (int)(0xD800 + (cp >> 10));
}

struct member {
    const char *key;
    size_t len;
    json_t *value;
};

static int member_cmp(const void *pa, const void *pb)
{
    const struct member *a = pa, *b = pb;
    size_t ia = 0, ib = 0;
    int pa_ = -1, pb_ = -1;
    for (;;) {
        int ua = next_unit((const unsigned char *)a->key, a->len, &ia, &pa_);
        int ub = next_unit((const unsigned char *)b->key, b->len, &ib, &pb_);
        if (ua != ub)
            return ua < ub ? -1 : 1;  /* the shorter (-1) first */
        if (ua < 0)
            return 0;
    }
}

/* ---- values ---- */

static int put_value(struct rk_buf *b, json_t *v, char *err)
{
    switch (json_typeof(v)) {
    case JSON_NULL: rk_puts(b, "null"); return 0;
    case JSON_TRUE: rk_puts(b, "true"); return 0;
    case JSON_FALSE: rk_puts(b, "false"); return 0;
    case JSON_STRING:
        put_string(b, json_string_value(v), json_string_length(v));
        return 0;
    case JSON_INTEGER:                /* not with JSON_DECODE_INT_AS_REAL */
    case JSON_REAL: {
        double x = json_typeof(v) == JSON_REAL ? json_real_value(v)
                                               : (double)json_integer_value(v);
        if (!isfinite(x)) {
            snprintf(err, RK_ERR_MAX, "body: JSON number out of range");
            return COORD_EINVAL;
        }
        char num[RK_NUMBER_MAX];
        rk_put(b, num, rk_number(x, num));
        return 0;
    }
    case JSON_ARRAY: {
        rk_putc(b, '[');
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i)
                rk_putc(b, ',');
            int rc = put_value(b, json_array_get(v, i), err);
            if (rc)
                return rc;
        }
        rk_putc(b, ']');
        return 0;
    }
    case JSON_OBJECT: {
        size_t n = json_object_size(v), i = 0;
        struct member *m = n ? calloc(n, sizeof *m) : NULL;
        if (n && !m)
            return COORD_ENOMEM;
        const char *k;
        size_t kl;
        json_t *val;
        json_object_keylen_foreach(v, k, kl, val) {
            if (i == n)
                break;                /* never: the object's size was n */
            m[i].key = k;
            m[i].len = kl;
            m[i].value = val;
            i++;
        }
        n = i;
        if (n > 1)
            qsort(m, n, sizeof *m, member_cmp);
        rk_putc(b, '{');
        int rc = 0;
        for (i = 0; i < n && !rc; i++) {
            if (i)
                rk_putc(b, ',');
            put_string(b, m[i].key, m[i].len);
            rk_putc(b, ':');
            rc = put_value(b, m[i].value, err);
        }
        rk_putc(b, '}');
        free(m);
        return rc;
    }
    }
    snprintf(err, RK_ERR_MAX, "body: unexpected JSON value");
    return COORD_EINVAL;
}

int rk_jcs(const void *body, size_t len, struct rk_buf *out, char *err)
{
    json_error_t je;
    /* a raw NUL is never JSON; jansson would end a top-level scalar
     * there ("1\0" read as 1) */
    const char *nul = body ? memchr(body, 0, len) : NULL;
    if (nul) {
        snprintf(err, RK_ERR_MAX, "body: JSON refused at byte %zu: a NUL byte",
                 (size_t)(nul - (const char *)body));
        return COORD_EINVAL;
    }
    json_t *root = json_loadb(body ? body : "", len,
                              JSON_REJECT_DUPLICATES | JSON_DECODE_INT_AS_REAL |
                              JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
    if (!root) {
        snprintf(err, RK_ERR_MAX, "body: JSON refused at byte %d: %s", je.position,
                 je.text);
        return COORD_EINVAL;
    }
    int rc = put_value(out, root, err);
    json_decref(root);
    if (!rc && out->oom)
        rc = COORD_ENOMEM;
    return rc;
}
