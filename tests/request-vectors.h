/* request-vectors.h - a tiny reader of tests/vectors/request-keys.json (the
 * canonical request key vectors; format in tests/vectors/README.md) for
 * the unit test (test_request_key.c) and the coordctl test
 * (integration/test_cli_key.c).  Uses jansson, a dependency of libcoord.
 *
 * Ownership: rv_load's root is the caller's (json_decref); an rv_vector
 * points into it and owns only body and headers (rv_clear). */
#ifndef COORD_TEST_REQUEST_VECTORS_H
#define COORD_TEST_REQUEST_VECTORS_H

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "coord.h"

struct rv_vector {
    const char *name;
    coord_request req;          /* strings point into the JSON */
    unsigned char *body;        /* malloc'd (req.body), or NULL */
    coord_header *headers;      /* malloc'd (req.headers), or NULL */
    const char *canonical;      /* expected, or NULL for an error vector */
    const char *key;
    const char *error_field;    /* error vectors: "url", "body", "header"... */
    const char *body_canonical; /* JSON bodies: the RFC 8785 text, or NULL */
    const char *nul_field;      /* a text member holding a NUL ("user",
                                   "header"...): a C string cannot carry it,
                                   so the C client refuses it by its form;
                                   the vector must be an error about it */
};

/* The input field of a text member that holds a NUL byte, or NULL. */
__attribute__((unused))
static const char *rv_nul_field(json_t *in)
{
    static const char *const text[] = { "method", "url", "content_type", "user",
                                        "tenant", "accept", "locale", "freshness",
                                        "api", "body", NULL };
    for (int i = 0; text[i]; i++) {
        json_t *s = json_object_get(in, text[i]);
        if (json_is_string(s) && strlen(json_string_value(s)) != json_string_length(s))
            return strcmp(text[i], "content_type") ? text[i] : "header";
    }
    json_t *h = json_object_get(in, "headers");
    for (size_t i = 0; i < json_array_size(h); i++)
        for (size_t j = 0; j < 2; j++) {
            json_t *s = json_array_get(json_array_get(h, i), j);
            if (json_is_string(s) &&
                strlen(json_string_value(s)) != json_string_length(s))
                return "header";
        }
    return NULL;
}

/* The document's vectors array (borrowed from *root), or NULL after
 * printing why. */
__attribute__((unused))
static json_t *rv_load(const char *path, json_t **root)
{
    json_error_t je;
    *root = json_load_file(path, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je);
    if (!*root) {
        fprintf(stderr, "%s:%d: %s\n", path, je.line, je.text);
        return NULL;
    }
    json_t *v = json_object_get(*root, "vectors");
    if (!json_is_array(v)) {
        fprintf(stderr, "%s: no \"vectors\" array\n", path);
        json_decref(*root);
        *root = NULL;
        return NULL;
    }
    return v;
}

/* An optional string member ("" for a JSON null, as absent). */
__attribute__((unused))
static const char *rv_str(json_t *o, const char *k)
{
    json_t *s = json_object_get(o, k);
    return json_is_string(s) ? json_string_value(s) : NULL;
}

/* Standard base64 (with padding) into a malloc'd buffer; false when bad. */
__attribute__((unused))
static bool rv_base64(const char *s, unsigned char **out, size_t *n)
{
    static const char tab[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t len = strlen(s);
    if (len % 4)
        return false;
    unsigned char *o = malloc(len / 4 * 3 + 1);
    size_t k = 0;
    if (!o)
        return false;
    for (size_t i = 0; i < len; i += 4) {
        unsigned v = 0;
        int pad = 0;
        for (int j = 0; j < 4; j++) {
            const char *p = s[i + j] ? strchr(tab, s[i + j]) : NULL;
            if (s[i + j] == '=' && i + 4 == len && j >= 2) {
                pad++;
                v <<= 6;
                continue;
            }
            if (!p || pad) {
                free(o);
                return false;
            }
            v = v << 6 | (unsigned)(p - tab);
        }
        o[k++] = (unsigned char)(v >> 16);
        if (pad < 2)
            o[k++] = (unsigned char)(v >> 8);
        if (pad < 1)
            o[k++] = (unsigned char)v;
    }
    *out = o;
    *n = k;
    return true;
}

/* Fills *out from the vector t; false (after printing why) when t is not
 * a well-formed vector. */
__attribute__((unused))
static bool rv_get(json_t *t, struct rv_vector *out)
{
    memset(out, 0, sizeof *out);
    out->name = rv_str(t, "name");
    json_t *in = json_object_get(t, "input");
    if (!out->name || !json_is_object(in)) {
        fprintf(stderr, "vector without name or input\n");
        return false;
    }
    coord_request *r = &out->req;
    r->method = rv_str(in, "method");
    r->url = rv_str(in, "url");
    r->content_type = rv_str(in, "content_type");
    r->user = rv_str(in, "user");
    r->tenant = rv_str(in, "tenant");
    r->accept = rv_str(in, "accept");
    r->locale = rv_str(in, "locale");
    r->freshness = rv_str(in, "freshness");
    r->api = rv_str(in, "api");
    json_t *ag = json_object_get(in, "auth_gen");
    if (!json_is_integer(ag) || json_integer_value(ag) < 0) {
        fprintf(stderr, "%s: auth_gen must be a non-negative integer\n", out->name);
        return false;
    }
    r->auth_gen = (uint64_t)json_integer_value(ag);
    const char *body = rv_str(in, "body"), *b64 = rv_str(in, "body_base64");
    if (body) {
        r->has_body = true;
        r->body = body;
        r->body_len = strlen(body);
    } else if (b64) {
        size_t n;
        if (!rv_base64(b64, &out->body, &n)) {
            fprintf(stderr, "%s: bad body_base64\n", out->name);
            return false;
        }
        r->has_body = true;
        r->body = out->body;
        r->body_len = n;
    }
    json_t *h = json_object_get(in, "headers");
    if (json_is_array(h) && json_array_size(h)) {
        size_t n = json_array_size(h);
        out->headers = calloc(n, sizeof *out->headers);
        if (!out->headers)
            return false;
        for (size_t i = 0; i < n; i++) {
            json_t *pair = json_array_get(h, i);
            out->headers[i].name = json_string_value(json_array_get(pair, 0));
            out->headers[i].value = json_string_value(json_array_get(pair, 1));
            if (json_array_size(pair) != 2 || !out->headers[i].name ||
                !out->headers[i].value) {
                fprintf(stderr, "%s: headers must be [name, value] pairs\n", out->name);
                return false;
            }
        }
        r->headers = out->headers;
        r->n_headers = n;
    }
    out->canonical = rv_str(t, "canonical");
    out->key = rv_str(t, "key");
    out->error_field = rv_str(t, "error_field");
    out->body_canonical = rv_str(t, "body_canonical");
    out->nul_field = rv_nul_field(in);
    if (!!out->canonical + !!out->error_field != 1 || !!out->canonical != !!out->key) {
        fprintf(stderr, "%s: needs canonical and key, or error_field and error\n",
                out->name);
        return false;
    }
    return true;
}

__attribute__((unused))
static void rv_clear(struct rv_vector *v)
{
    free(v->body);
    free(v->headers);
    memset(v, 0, sizeof *v);
}

#endif
