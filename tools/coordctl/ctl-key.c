/* ctl-key.c - `coordctl key`: the canonical request key of a request
 * described by flags (coord_request_key; the protocol's "Canonical request
 * keys"), and the parser of those flags that `once --key-from-request`
 * shares (ctl-key.h).
 *
 *     coordctl key --method M --url U [--body-file F] [--content-type T]
 *                  [--header 'Name: value']... --user U [--tenant T]
 *                  --auth-gen N [--accept A] [--locale L] [--freshness F]
 *                  [--api V] [--explain]
 *
 * prints the key on one line; --explain adds the canonical string on a
 * second line (it names the user: for debugging, not for logs).  With the
 * global --json: one line {"key": ..., "canonical": ...}.  Needs no
 * broker.  A missing flag or a request that has no key exits 2 with one
 * line saying why. */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "coordctl.h"
#include "ctl-key.h"

static const char *cmd_name(const struct ctl *ctl)
{
    return ctl->cmd ? ctl->cmd->name : "key";
}

int ctl_key_option(struct ctl *ctl, struct ctl_key_args *a, int opt, const char *arg)
{
    coord_request *r = &a->req;
    a->any = true;
    switch (opt) {
    case CTL_KEY_OPT_METHOD: r->method = arg; break;
    case CTL_KEY_OPT_URL: r->url = arg; break;
    case CTL_KEY_OPT_BODY_FILE: a->body_file = arg; break;
    case CTL_KEY_OPT_CONTENT_TYPE: r->content_type = arg; break;
    case CTL_KEY_OPT_USER: r->user = arg; break;
    case CTL_KEY_OPT_TENANT: r->tenant = arg; break;
    case CTL_KEY_OPT_ACCEPT: r->accept = arg; break;
    case CTL_KEY_OPT_LOCALE: r->locale = arg; break;
    case CTL_KEY_OPT_FRESHNESS: r->freshness = arg; break;
    case CTL_KEY_OPT_API: r->api = arg; break;
    case CTL_KEY_OPT_AUTH_GEN: {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(arg, &end, 10);
        if (arg[0] < '0' || arg[0] > '9' || *end || errno)
            return ctl_usage(ctl, "--auth-gen needs a whole number (the auth "
                             "generation), not %s", arg);
        r->auth_gen = v;
        a->auth_gen_set = true;
        break;
    }
    case CTL_KEY_OPT_HEADER: {
        const char *colon = strchr(arg, ':');
        if (!colon || colon == arg)
            return ctl_usage(ctl, "--header needs 'Name: value', not %s", arg);
        if (r->n_headers == CTL_KEY_MAX_HEADERS)
            return ctl_usage(ctl, "at most %d --header flags", CTL_KEY_MAX_HEADERS);
        /* the name ends where the ":" was: it is overwritten with a NUL
         * (argv's strings are writable), so nothing is allocated */
        char *name = (char *)arg;
        name[colon - arg] = '\0';
        a->headers[r->n_headers].name = name;
        a->headers[r->n_headers].value = colon + 1;
        r->n_headers++;
        r->headers = a->headers;
        break;
    }
    default:
        return ctl_usage(ctl, "unknown request flag");
    }
    return 0;
}

/* The whole of f into *buf (malloc'd, may be empty); false after printing
 * why. */
static bool read_body(const struct ctl *ctl, const char *path, char **buf, size_t *n)
{
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) {
        fprintf(stderr, "coordctl: %s: --body-file %s: %s\n", cmd_name(ctl), path,
                strerror(errno));
        return false;
    }
    size_t cap = 65536, len = 0;
    char *p = malloc(cap);
    bool ok = p != NULL;
    while (ok) {
        if (len == cap) {
            char *q = realloc(p, cap * 2);
            if (!q) {
                ok = false;
                break;
            }
            p = q;
            cap *= 2;
        }
        size_t r = fread(p + len, 1, cap - len, f);
        len += r;
        if (r == 0) {
            ok = !ferror(f);
            break;
        }
    }
    if (!ok)
        fprintf(stderr, "coordctl: %s: --body-file %s: %s\n", cmd_name(ctl), path,
                p ? "read error" : "out of memory");
    if (f != stdin)
        fclose(f);
    if (!ok) {
        free(p);
        return false;
    }
    *buf = p;
    *n = len;
    return true;
}

int ctl_key_build(struct ctl *ctl, struct ctl_key_args *a,
                  char key[COORD_REQUEST_KEY_SIZE], char **canonical)
{
    coord_request *r = &a->req;
    if (!r->method)
        return ctl_usage(ctl, "missing --method");
    if (!r->url)
        return ctl_usage(ctl, "missing --url");
    if (!r->user)
        return ctl_usage(ctl, "missing --user");
    if (!a->auth_gen_set)
        return ctl_usage(ctl, "missing --auth-gen (0 when the user has no "
                         "credential generation)");
    char *body = NULL;
    if (a->body_file) {
        size_t n;
        if (!read_body(ctl, a->body_file, &body, &n))
            return CTL_EXIT_FAIL;
        r->body = body;
        r->body_len = n;
        r->has_body = true;
    }
    int rc = coord_request_key(r, key, canonical);
    free(body);
    r->body = NULL;
    r->has_body = false;
    if (rc == COORD_EINVAL) {
        fprintf(stderr, "coordctl: %s: %s\n", cmd_name(ctl), coord_request_key_error());
        return CTL_EXIT_USAGE;
    }
    if (rc < 0) {
        fprintf(stderr, "coordctl: %s: %s\n", cmd_name(ctl), coord_strerror(rc));
        return CTL_EXIT_FAIL;
    }
    return 0;
}

/* {"key": ..., "canonical": ...} (canonical escaped with \x when it is not
 * UTF-8). */
static int print_json(const char *key, const char *canonical)
{
    json_t *o = json_object();
    json_t *c = NULL;
    char *esc = NULL;
    if (canonical) {
        c = json_string(canonical);
        if (!c && (esc = ctl_escape(canonical, strlen(canonical))))
            c = json_string(esc);
    }
    if (!o || json_object_set_new(o, "key", json_string(key)) ||
        (canonical && json_object_set_new(o, "canonical", c))) {
        json_decref(o);
        free(esc);
        fprintf(stderr, "coordctl: key: out of memory\n");
        return CTL_EXIT_FAIL;
    }
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    free(esc);
    if (!s) {
        fprintf(stderr, "coordctl: key: out of memory\n");
        return CTL_EXIT_FAIL;
    }
    puts(s);
    free(s);
    return CTL_EXIT_OK;
}

int cmd_key(struct ctl *ctl, int argc, char **argv)
{
    static const struct option longopts[] = {
        CTL_KEY_LONGOPTS,
        { "explain", no_argument, NULL, 'x' },
        { "json", no_argument, NULL, 'j' },
        { NULL, 0, NULL, 0 },
    };
    struct ctl_key_args ka = CTL_KEY_ARGS_INIT;
    bool explain = false;
    int opt;
    optind = 1;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "+:", longopts, NULL)) != -1) {
        if (ctl_key_is_option(opt)) {
            int rc = ctl_key_option(ctl, &ka, opt, optarg);
            if (rc)
                return rc;
        } else if (opt == 'x') {
            explain = true;
        } else if (opt == 'j') {
            ctl->json = true;
        } else if (opt == ':') {
            return ctl_usage(ctl, "%s needs a value", argv[optind - 1]);
        } else {
            return ctl_usage(ctl, "unknown flag %s", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return ctl_usage(ctl, "unexpected argument %s", argv[optind]);
    char key[COORD_REQUEST_KEY_SIZE];
    char *canonical = NULL;
    int rc = ctl_key_build(ctl, &ka, key, explain || ctl->json ? &canonical : NULL);
    if (rc)
        return rc;
    if (ctl->json) {
        rc = print_json(key, explain ? canonical : NULL);
    } else {
        printf("%s\n", key);
        if (explain)
            printf("%s\n", canonical);
        rc = fflush(stdout) ? CTL_EXIT_FAIL : CTL_EXIT_OK;
    }
    free(canonical);
    return rc;
}
