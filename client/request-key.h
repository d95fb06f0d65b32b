/* request-key.h - the inside of coord_request_key (request-key.c), shared
 * with its two helpers: URL normalization (request-url.c) and RFC 8785
 * JSON canonicalization (request-jcs.c).  Nothing here is exported; the
 * unit test links the static library and calls these directly.
 *
 * Every function that can fail returns 0, COORD_EINVAL with a message in
 * err (RK_ERR_MAX bytes, NUL-ended) or COORD_ENOMEM. */
#ifndef COORD_CLIENT_REQUEST_KEY_H
#define COORD_CLIENT_REQUEST_KEY_H

#include <stdbool.h>
#include <stddef.h>

/* Room for one error message ("url: host ... is not ..."): long enough to
 * quote a short piece of the input, short enough for a stack buffer. */
#define RK_ERR_MAX 256

/* A growing byte buffer; out of memory is remembered (oom) and makes
 * every later put a no-op, so callers check once at the end. */
struct rk_buf {
    char *p;        /* malloc'd, NUL-ended when n > 0 or after rk_cstr */
    size_t n, cap;
    bool oom;
};
void rk_put(struct rk_buf *b, const void *p, size_t n);
void rk_putc(struct rk_buf *b, char c);
void rk_puts(struct rk_buf *b, const char *s);
/* The NUL-ended contents (p, never NULL unless oom); the buffer keeps
 * ownership. */
const char *rk_cstr(struct rk_buf *b);
void rk_free(struct rk_buf *b);

/* The longest URL that has a key, in bytes (libcurl's own limit of its
 * URL API, CURL_MAX_INPUT_LENGTH); longer ones are refused by every
 * client. */
#define RK_URL_MAX 8000000u

/* The largest auth_gen: 2^53-1, the largest integer every client's
 * numbers hold exactly. */
#define RK_AUTH_GEN_MAX 9007199254740991ull

/* Appends the normalized form of the absolute http(s) URL url (see
 * request-key.c's design comment and the protocol's "Canonical request
 * keys"): scheme://host[:port]/path[?query], fragment dropped. */
int rk_url(const char *url, struct rk_buf *out, char *err);

/* Appends the RFC 8785 (JCS) serialization of the JSON text body[0..len):
 * invalid JSON (RFC 8259, UTF-8), a duplicate member name, a number that
 * is not a finite double, a lone surrogate: COORD_EINVAL. */
int rk_jcs(const void *body, size_t len, struct rk_buf *out, char *err);

/* x as ECMAScript's Number.prototype.toString() writes it (JCS numbers):
 * the shortest digits that read back as x; "0" for -0.  x must be finite.
 * out needs RK_NUMBER_MAX bytes; returns the length written. */
#define RK_NUMBER_MAX 32
size_t rk_number(double x, char out[RK_NUMBER_MAX]);

#endif
