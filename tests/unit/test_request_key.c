/* test_request_key.c - canonical request keys (client/request-key.c):
 *
 *   - every vector of tests/vectors/request-keys.json (argv[1]) through
 *     coord_request_key: the canonical string and key, or the error and
 *     the field it names; JSON bodies also through the JCS serializer
 *     alone (body_canonical);
 *   - the JCS number formatting against a table written by node
 *     (String(x) of each value), powers of two (where the shortest digits
 *     are not always the closest ones), and random doubles (reads back,
 *     and no shorter form does);
 *   - the API's edges: NULL arguments, output on errors, the error text.
 *
 * The expected values are never computed by the code under test. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "coord.h"
#include "request-key.h"
#include "../request-vectors.h"

static int failures;

#define CHECK(c) do { if (!(c)) { failures++; \
    fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #c); } } while (0)

/* ---- the vectors ---- */

static void run_vectors(const char *path)
{
    json_t *root;
    json_t *vs = rv_load(path, &root);
    CHECK(vs != NULL);
    if (!vs)
        return;
    size_t n = json_array_size(vs), ok = 0, errors = 0;
    CHECK(n >= 40);
    for (size_t i = 0; i < n; i++) {
        struct rv_vector v;
        if (!rv_get(json_array_get(vs, i), &v)) {
            failures++;
            rv_clear(&v);
            continue;
        }
        if (v.nul_field) {
            /* no C string holds it: refused by the API's form */
            errors++;
            CHECK(v.error_field && !strcmp(v.error_field, v.nul_field));
            rv_clear(&v);
            continue;
        }
        char key[COORD_REQUEST_KEY_SIZE];
        char *canon = NULL;
        int rc = coord_request_key(&v.req, key, &canon);
        if (v.canonical) {
            ok++;
            if (rc != 0) {
                failures++;
                fprintf(stderr, "%s: failed (%d): %s\n", v.name, rc,
                        coord_request_key_error());
            } else {
                if (strcmp(canon, v.canonical) != 0) {
                    failures++;
                    fprintf(stderr, "%s:\n  canonical %s\n  expected  %s\n", v.name,
                            canon, v.canonical);
                }
                if (strcmp(key, v.key) != 0) {
                    failures++;
                    fprintf(stderr, "%s: key %s, expected %s\n", v.name, key, v.key);
                }
                CHECK(strcmp(coord_request_key_error(), "no error") == 0);
            }
        } else {
            errors++;
            const char *msg = coord_request_key_error();
            if (rc != COORD_EINVAL || canon != NULL || key[0] != '\0') {
                failures++;
                fprintf(stderr, "%s: expected COORD_EINVAL, got %d (%s)\n", v.name, rc,
                        canon ? canon : msg);
            } else if (strncmp(msg, v.error_field, strlen(v.error_field)) != 0) {
                failures++;
                fprintf(stderr, "%s: the error names another field: %s (expected %s)\n",
                        v.name, msg, v.error_field);
            }
        }
        if (v.body_canonical) {
            struct rk_buf b = { 0 };
            char err[RK_ERR_MAX];
            rc = rk_jcs(v.req.body, v.req.body_len, &b, err);
            if (rc || strcmp(rk_cstr(&b), v.body_canonical) != 0) {
                failures++;
                fprintf(stderr, "%s: JCS %s, expected %s\n", v.name,
                        rc ? err : rk_cstr(&b), v.body_canonical);
            }
            rk_free(&b);
        }
        free(canon);
        rv_clear(&v);
    }
    printf("vectors: %zu keys, %zu errors\n", ok, errors);
    CHECK(ok >= 20 && errors >= 10);

    /* long_vectors: the URL is url_fill.prefix, then url_fill.byte up to
     * url_fill.length bytes (the canonical string is not stored: the key) */
    json_t *lv = json_object_get(root, "long_vectors");
    CHECK(json_array_size(lv) >= 2);
    for (size_t i = 0; i < json_array_size(lv); i++) {
        json_t *t = json_array_get(lv, i);
        json_t *in = json_object_get(t, "input"), *fill = json_object_get(t, "url_fill");
        const char *name = rv_str(t, "name"), *prefix = rv_str(fill, "prefix");
        const char *byte = rv_str(fill, "byte"), *want = rv_str(t, "key");
        const char *field = rv_str(t, "error_field");
        json_int_t len = json_integer_value(json_object_get(fill, "length"));
        CHECK(name && prefix && byte && strlen(byte) == 1 && len > (json_int_t)strlen(prefix));
        CHECK(!!want + !!field == 1);
        if (!name || !prefix || !byte || len <= (json_int_t)strlen(prefix))
            continue;
        char *url = malloc((size_t)len + 1);
        CHECK(url != NULL);
        if (!url)
            continue;
        size_t pn = strlen(prefix);
        memcpy(url, prefix, pn);
        memset(url + pn, byte[0], (size_t)len - pn);
        url[len] = '\0';
        coord_request r = { .method = rv_str(in, "method"), .url = url,
                            .user = rv_str(in, "user"),
                            .auth_gen = (uint64_t)json_integer_value(
                                json_object_get(in, "auth_gen")) };
        char key[COORD_REQUEST_KEY_SIZE];
        int rc = coord_request_key(&r, key, NULL);
        if (want) {
            if (rc != 0 || strcmp(key, want) != 0) {
                failures++;
                fprintf(stderr, "%s: %d %s (%s), expected %s\n", name, rc, key,
                        coord_request_key_error(), want);
            }
        } else if (rc != COORD_EINVAL ||
                   strncmp(coord_request_key_error(), field, strlen(field)) != 0) {
            failures++;
            fprintf(stderr, "%s: expected a refusal about %s, got %d (%s)\n", name,
                    field, rc, coord_request_key_error());
        }
        free(url);
    }
    json_decref(root);
}

/* ---- numbers ---- */

static const struct { uint64_t bits; const char *js; } numbers[] = {
    /* from node: String(x), bits by Buffer.writeDoubleLE */
    { 0x0000000000000000ull, "0" },   /* 0 */
    { 0x8000000000000000ull, "0" },   /* -0 */
    { 0x3ff0000000000000ull, "1" },   /* 1 */
    { 0xbff0000000000000ull, "-1" },   /* -1 */
    { 0x3ff8000000000000ull, "1.5" },   /* 1.5 */
    { 0x3fb999999999999aull, "0.1" },   /* 0.1 */
    { 0x3fd3333333333334ull, "0.30000000000000004" },   /* 0.2+0.1 */
    { 0x3fd5555555555555ull, "0.3333333333333333" },   /* 1/3 */
    { 0x3fe5555555555555ull, "0.6666666666666666" },   /* 2/3 */
    { 0x4059000000000000ull, "100" },   /* 100 */
    { 0x4415af1d78b58c40ull, "100000000000000000000" },   /* 1e20 */
    { 0x444b1ae4d6e2ef50ull, "1e+21" },   /* 1e21 */
    { 0x3eb0c6f7a0b5ed8dull, "0.000001" },   /* 1e-6 */
    { 0x3e7ad7f29abcaf48ull, "1e-7" },   /* 1e-7 */
    { 0x3ea0c6f7a0b5ed8dull, "5e-7" },   /* 5e-7 */
    { 0x3e8421f5f40d8376ull, "1.5e-7" },   /* 1.5e-7 */
    { 0x3c36b082c2148b8eull, "1.23e-18" },   /* 123e-20 */
    { 0x441ac53a7e04bcdaull, "123456789012345680000" },   /* 1.2345678901234568e20 */
    { 0x4340000000000000ull, "9007199254740992" },   /* 2**53 */
    { 0x4340000000000001ull, "9007199254740994" },   /* 2**53+2 */
    { 0x43e0000000000000ull, "9223372036854776000" },   /* 2**63 */
    { 0x43f0000000000000ull, "18446744073709552000" },   /* 2**64 */
    { 0x0000000000000001ull, "5e-324" },   /* 2**-1074 */
    { 0x0010000000000000ull, "2.2250738585072014e-308" },   /* 2**-1022 */
    { 0x7fefffffffffffffull, "1.7976931348623157e+308" },   /* Number.MAX_VALUE */
    { 0x3cb0000000000000ull, "2.220446049250313e-16" },   /* Number.EPSILON */
    { 0x4011666666666666ull, "4.35" },   /* 4.35 */
    { 0x3eb4b6231abfd271ull, "0.0000012345" },   /* 0.0000012345 */
    { 0x4480f0cf064dd592ull, "1e+22" },   /* 1e22 */
    { 0x44b52d02c7e14af6ull, "1e+23" },   /* 1e23 */
    { 0x41b3de4355555553ull, "333333333.3333332" },   /* 333333333.3333332 */
    { 0x8000000000000001ull, "-5e-324" },   /* -5e-324 */
    { 0x3fe0000000000000ull, "0.5" },   /* 2**-1 */
    { 0x3eb0000000000000ull, "9.5367431640625e-7" },   /* 2**-20 */
    { 0x4450000000000000ull, "1.1805916207174113e+21" },   /* 2**70 */
    { 0x3b90000000000000ull, "8.470329472543003e-22" },   /* 2**-70 */
    { 0x7e41eb2d66005835ull, "1.5e+300" },   /* 1e300*1.5 */
    { 0x400921fb54442d18ull, "3.141592653589793" },   /* Math.PI */
    { 0x4005bf0a8b145769ull, "2.718281828459045" },   /* Math.E */
    { 0xc05edd2f1a9fbe77ull, "-123.456" },   /* -123.456 */
    { 0x4341c37937e08000ull, "10000000000000000" },   /* 1e16 */
    { 0x4345ee2a2eb5a5c4ull, "12345678901234568" },   /* 12345678901234567 */
    { 0x3fe9999999999999ull, "0.7999999999999999" },   /* 0.1+0.7 */
    { 0x432ff973cafa8000ull, "4500000000000000" },   /* 4.5e15 */
    { 0x447c7e83209e90b2ull, "8.41e+21" },   /* 8.41e21 */
    { 0x3eb92a737110e454ull, "0.0000015" },   /* 5e-7*3 */
    { 0x41b1de784a000000ull, "299792458" },   /* 299792458 */
    { 0x44dfe185ca57c517ull, "6.02214076e+23" },   /* 6.02214076e23 */
    { 0x3c07a4da290c1653ull, "1.602176634e-19" },   /* 1.602176634e-19 */
    /* powers of two where the closest 16 digits do not read back but the
     * next 16-digit decimal up does (the rounding interval is narrower
     * below): shortest is not closest */
    { 0x0060000000000000ull, "7.120236347223045e-307" },   /* 2**-1017 */
    { 0x0100000000000000ull, "7.291122019556398e-304" },   /* 2**-1007 */
    { 0x0420000000000000ull, "8.209073602596753e-289" },   /* 2**-957 */
    { 0x0660000000000000ull, "5.641232424577593e-278" },   /* 2**-921 */
    { 0x0d70000000000000ull, "5.858190679279809e-244" },   /* 2**-808 */
};

static double from_bits(uint64_t b)
{
    double x;
    memcpy(&x, &b, sizeof x);
    return x;
}

/* The significant digits of an ES number string. */
static int sig_digits(const char *s)
{
    int n = 0, lead = 1, zeros = 0;
    for (; *s && *s != 'e'; s++) {
        if (*s < '0' || *s > '9')
            continue;
        if (lead && *s == '0')
            continue;
        lead = 0;
        if (*s == '0') {
            zeros++;
        } else {
            n += zeros + 1;
            zeros = 0;
        }
    }
    return n;
}

/* The k-digit decimal just above the correctly rounded one in buf
 * ("d.ddde+X"), as text. */
static void next_up(const char *buf, char *out, size_t size)
{
    char d[40];
    int nd = 0;
    const char *p = buf;
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9')
            d[nd++] = *p;
    d[nd] = '\0';
    int e = atoi(p + 1) + 1, i = nd - 1;
    while (i >= 0 && d[i] == '9')
        d[i--] = '0';
    if (i < 0) {
        memmove(d + 1, d, (size_t)nd + 1);
        d[0] = '1';
        e++;
    } else {
        d[i]++;
    }
    snprintf(out, size, "0.%se%d", d, e);
}

/* x reads back from s, and no decimal with fewer digits does (the
 * correctly rounded one with one digit less, nor the one above it). */
static bool shortest_roundtrip(double x, const char *s)
{
    if (strtod(s, NULL) != x)
        return false;
    int k = sig_digits(s);
    if (k <= 1)
        return true;
    char buf[40], up[48];
    snprintf(buf, sizeof buf, "%.*e", k - 2, x);
    next_up(buf, up, sizeof up);
    return strtod(buf, NULL) != x && strtod(up, NULL) != x;
}

static void check_numbers(void)
{
    char out[RK_NUMBER_MAX];
    for (size_t i = 0; i < sizeof numbers / sizeof numbers[0]; i++) {
        rk_number(from_bits(numbers[i].bits), out);
        if (strcmp(out, numbers[i].js) != 0) {
            failures++;
            fprintf(stderr, "number %016llx: %s, node says %s\n",
                    (unsigned long long)numbers[i].bits, out, numbers[i].js);
        }
    }
    /* every power of two, both signs */
    for (int e = -1074; e <= 1023; e++) {
        double x = ldexp(1.0, e);
        rk_number(x, out);
        if (!shortest_roundtrip(x, out)) {
            failures++;
            fprintf(stderr, "2^%d: %s is not the shortest that reads back\n", e, out);
        }
        rk_number(-x, out);
        CHECK(out[0] == '-' && strtod(out, NULL) == -x);
    }
    /* random bit patterns (a fixed seed: reproducible) */
    uint64_t s = 0x9e3779b97f4a7c15ull;
    int bad = 0;
    for (int i = 0; i < 200000; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        double x = from_bits(s);
        if (!isfinite(x))
            continue;
        size_t n = rk_number(x, out);
        if (n >= RK_NUMBER_MAX || !shortest_roundtrip(x, out)) {
            if (bad++ < 5)
                fprintf(stderr, "%016llx: %s\n", (unsigned long long)s, out);
        }
    }
    CHECK(bad == 0);
}

/* ---- the API's edges ---- */

static void check_api(void)
{
    char key[COORD_REQUEST_KEY_SIZE];
    char *canon = (char *)"x";
    CHECK(coord_request_key(NULL, key, &canon) == COORD_EINVAL);
    CHECK(canon == NULL && key[0] == '\0');
    CHECK(strstr(coord_request_key_error(), "NULL") != NULL);

    coord_request r = { .method = "GET", .url = "https://example.com/", .user = "u",
                        .auth_gen = 1 };
    CHECK(coord_request_key(&r, NULL, NULL) == COORD_EINVAL);
    /* canonical is optional */
    CHECK(coord_request_key(&r, key, NULL) == 0);
    CHECK(strncmp(key, "request-v1:", 11) == 0 && strlen(key) == COORD_REQUEST_KEY_SIZE - 1);
    CHECK(strcmp(coord_request_key_error(), "no error") == 0);
    char first[COORD_REQUEST_KEY_SIZE];
    memcpy(first, key, sizeof key);

    /* has_body false: body and body_len are ignored */
    r.body = "ignored";
    r.body_len = 7;
    CHECK(coord_request_key(&r, key, NULL) == 0 && strcmp(key, first) == 0);
    /* a body pointer NULL with a length is refused */
    r.body = NULL;
    r.has_body = true;
    CHECK(coord_request_key(&r, key, NULL) == COORD_EINVAL && key[0] == '\0');
    CHECK(strncmp(coord_request_key_error(), "body", 4) == 0);
    /* an empty body may have a NULL pointer */
    r.body_len = 0;
    CHECK(coord_request_key(&r, key, &canon) == 0);
    CHECK(canon && strstr(canon, "|body:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855|"));
    free(canon);
    r.has_body = false;

    /* headers NULL with a count */
    r.n_headers = 2;
    CHECK(coord_request_key(&r, key, NULL) == COORD_EINVAL);
    coord_header h[] = { { "X-A", NULL } };
    r.headers = h;
    r.n_headers = 1;
    CHECK(coord_request_key(&r, key, NULL) == COORD_EINVAL);
    h[0].value = "v";
    CHECK(coord_request_key(&r, key, &canon) == 0 && canon &&
          strlen(canon) > 8 && strcmp(canon + strlen(canon) - 8, "|h:x-a=v") == 0);
    free(canon);

    /* a very long URL and many headers: no limit of ours */
    size_t big = 100000;
    char *url = malloc(big + 32);
    CHECK(url != NULL);
    if (url) {
        strcpy(url, "https://example.com/");
        memset(url + 20, 'a', big);
        url[20 + big] = '\0';
        r.url = url;
        r.n_headers = 0;
        CHECK(coord_request_key(&r, key, &canon) == 0 && canon &&
              strlen(canon) > big);
        free(canon);
        free(url);
    }
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_request_key VECTORS.json\n");
        return 2;
    }
    run_vectors(argv[1]);
    check_numbers();
    check_api();
    if (failures) {
        fprintf(stderr, "%d failures\n", failures);
        return 1;
    }
    printf("ok\n");
    return 0;
}
