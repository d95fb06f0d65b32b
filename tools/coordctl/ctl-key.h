/* ctl-key.h - the request flags of `coordctl key` (ctl-key.c), shared with
 * `coordctl once --key-from-request` (ctl-flight.c), which parses the same
 * flags in its own getopt_long loop:
 *
 *     static const struct option longopts[] = { ..., CTL_KEY_LONGOPTS, {0} };
 *     struct ctl_key_args ka = CTL_KEY_ARGS_INIT;
 *     ... default: if (ctl_key_is_option(opt)) rc = ctl_key_option(ctl, &ka, opt, optarg);
 *     rc = ctl_key_build(ctl, &ka, key, NULL);
 *
 * Nothing here allocates but ctl_key_build (which frees what it read before
 * returning), so a usage error may return at any point. */
#ifndef CTL_KEY_H
#define CTL_KEY_H

#include <getopt.h>
#include <stdbool.h>
#include "coord.h"

struct ctl;

/* --header flags kept: more than any response varies on, and the args
 * stay a fixed-size struct on the stack. */
#define CTL_KEY_MAX_HEADERS 64

enum {
    CTL_KEY_OPT_METHOD = 0x1000,   /* above every short option */
    CTL_KEY_OPT_URL,
    CTL_KEY_OPT_BODY_FILE,
    CTL_KEY_OPT_CONTENT_TYPE,
    CTL_KEY_OPT_HEADER,
    CTL_KEY_OPT_USER,
    CTL_KEY_OPT_TENANT,
    CTL_KEY_OPT_AUTH_GEN,
    CTL_KEY_OPT_ACCEPT,
    CTL_KEY_OPT_LOCALE,
    CTL_KEY_OPT_FRESHNESS,
    CTL_KEY_OPT_API,
    CTL_KEY_OPT_END,
};

#define CTL_KEY_LONGOPTS \
    { "method", required_argument, NULL, CTL_KEY_OPT_METHOD }, \
    { "url", required_argument, NULL, CTL_KEY_OPT_URL }, \
    { "body-file", required_argument, NULL, CTL_KEY_OPT_BODY_FILE }, \
    { "content-type", required_argument, NULL, CTL_KEY_OPT_CONTENT_TYPE }, \
    { "header", required_argument, NULL, CTL_KEY_OPT_HEADER }, \
    { "user", required_argument, NULL, CTL_KEY_OPT_USER }, \
    { "tenant", required_argument, NULL, CTL_KEY_OPT_TENANT }, \
    { "auth-gen", required_argument, NULL, CTL_KEY_OPT_AUTH_GEN }, \
    { "accept", required_argument, NULL, CTL_KEY_OPT_ACCEPT }, \
    { "locale", required_argument, NULL, CTL_KEY_OPT_LOCALE }, \
    { "freshness", required_argument, NULL, CTL_KEY_OPT_FRESHNESS }, \
    { "api", required_argument, NULL, CTL_KEY_OPT_API }

/* The request flags seen so far.  Strings point into argv. */
struct ctl_key_args {
    coord_request req;
    coord_header headers[CTL_KEY_MAX_HEADERS];
    const char *body_file;       /* "-": standard input */
    bool auth_gen_set;
    bool any;                    /* some request flag was given */
};
#define CTL_KEY_ARGS_INIT { .any = false }

/* True when opt (from getopt_long) is one of CTL_KEY_LONGOPTS. */
static inline bool ctl_key_is_option(int opt)
{
    return opt >= CTL_KEY_OPT_METHOD && opt < CTL_KEY_OPT_END;
}

/* Takes one request flag.  0, or the exit status of a usage error
 * (printed). */
int ctl_key_option(struct ctl *ctl, struct ctl_key_args *a, int opt, const char *arg);

/* Checks the required flags, reads --body-file and computes the key into
 * key (and, when canonical is not NULL, *canonical: malloc'd, the caller
 * frees it).  0, or an exit status after printing why: 2 for a missing
 * flag or a request that has no key (bad URL, refused header, invalid
 * JSON body...), 1 when the body file cannot be read. */
int ctl_key_build(struct ctl *ctl, struct ctl_key_args *a,
                  char key[COORD_REQUEST_KEY_SIZE], char **canonical);

int cmd_key(struct ctl *ctl, int argc, char **argv);

#endif
