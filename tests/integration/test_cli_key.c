/* test_cli_key.c - `coordctl key` and `coordctl once --key-from-request`
 * as real processes:
 *
 *   vectors       every vector of tests/vectors/request-keys.json
 *                 ($COORD_REQUEST_VECTORS) turned into coordctl flags (the
 *                 body through --body-file): the key and, with --explain,
 *                 the canonical string; an error vector exits 2 with one
 *                 line naming the field;
 *   usage         flags missing or malformed: exit 2;
 *   once          `once --key-from-request` against a real broker: CMD
 *                 sees the vector's key as COORD_FLIGHT_KEY and `coordctl
 *                 flights` (run by CMD, while the flight is open) lists it.
 *
 * $COORD_BROKER is coordd and $COORDCTL is coordctl (set by meson). */
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "harness.h"
#include "proc.h"
#include "../request-vectors.h"

#define T 20000                 /* ms for a coordctl run to end */

static char dir[256];           /* this test's temp dir */

/* Runs coordctl with args (NULL-ended), stdout and stderr into *out and
 * *err (malloc'd).  Its exit status, or -1. */
static int run(const char *const *args, char **out, char **err)
{
    char op[300], ep[300];
    snprintf(op, sizeof op, "%s/out", dir);
    snprintf(ep, sizeof ep, "%s/err", dir);
    const char *argv[96];
    int n = 0;
    argv[n++] = coordctl_bin();
    for (int i = 0; args[i] && n < 95; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        int o = open(op, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        int e = open(ep, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        int z = open("/dev/null", O_RDONLY);
        if (o < 0 || e < 0 || z < 0)
            _exit(120);
        dup2(z, 0);
        dup2(o, 1);
        dup2(e, 2);
        execv(argv[0], (char *const *)argv);
        _exit(121);
    }
    int st = wait_pid_timeout(pid, T);
    if (st == -1) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
    *out = slurp(op, NULL);
    *err = slurp(ep, NULL);
    if (st == -1 || !WIFEXITED(st))
        return -1;
    return WEXITSTATUS(st);
}

/* coordctl's request flags for v (into args from *n; header strings built
 * in hbuf) and --body-file with the body written to a file. */
static bool request_flags(const struct rv_vector *v, const char **args, int *n,
                          char hbuf[][512], char *body_path, size_t body_path_size)
{
    const coord_request *r = &v->req;
    static char gen[32];
    const struct { const char *flag, *value; } f[] = {
        { "--method", r->method }, { "--url", r->url },
        { "--content-type", r->content_type }, { "--user", r->user },
        { "--tenant", r->tenant }, { "--accept", r->accept },
        { "--locale", r->locale }, { "--freshness", r->freshness },
        { "--api", r->api },
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (f[i].value) {
            args[(*n)++] = f[i].flag;
            args[(*n)++] = f[i].value;
        }
    snprintf(gen, sizeof gen, "%llu", (unsigned long long)r->auth_gen);
    args[(*n)++] = "--auth-gen";
    args[(*n)++] = gen;
    for (size_t i = 0; i < r->n_headers && i < 8; i++) {
        snprintf(hbuf[i], 512, "%s:%s", r->headers[i].name, r->headers[i].value);
        args[(*n)++] = "--header";
        args[(*n)++] = hbuf[i];
    }
    if (r->has_body) {
        snprintf(body_path, body_path_size, "%s/body", dir);
        FILE *bf = fopen(body_path, "wb");
        if (!bf || fwrite(r->body ? r->body : "", 1, r->body_len, bf) != r->body_len) {
            if (bf)
                fclose(bf);
            return false;
        }
        fclose(bf);
        args[(*n)++] = "--body-file";
        args[(*n)++] = body_path;
    }
    return true;
}

static void test_vectors(void)
{
    const char *path = getenv("COORD_REQUEST_VECTORS");
    REQUIRE(path != NULL);
    json_t *root;
    json_t *vs = rv_load(path, &root);
    REQUIRE(vs != NULL);
    size_t n = json_array_size(vs), keys = 0, errors = 0;
    for (size_t i = 0; i < n; i++) {
        struct rv_vector v;
        if (!rv_get(json_array_get(vs, i), &v)) {
            check_failures++;
            rv_clear(&v);
            continue;
        }
        if (v.nul_field) {
            /* no argument holds a NUL: coordctl cannot be given it */
            errors++;
            CHECK(v.error_field && !strcmp(v.error_field, v.nul_field));
            rv_clear(&v);
            continue;
        }
        const char *args[96];
        char hbuf[8][512], body_path[300];
        int k = 0;
        args[k++] = "key";
        CHECK(v.req.n_headers <= 8);
        if (!request_flags(&v, args, &k, hbuf, body_path, sizeof body_path)) {
            check_failures++;
            rv_clear(&v);
            continue;
        }
        args[k++] = "--explain";
        args[k] = NULL;
        char *out = NULL, *err = NULL;
        int st = run(args, &out, &err);
        if (v.canonical) {
            keys++;
            char want[16384];
            snprintf(want, sizeof want, "%s\n%s\n", v.key, v.canonical);
            if (st != 0 || strcmp(out, want) != 0) {
                check_failures++;
                fprintf(stderr, "%s: exit %d\n  stdout %s  want   %s  stderr %s\n",
                        v.name, st, out, want, err);
            }
        } else {
            errors++;
            /* one line "coordctl: key: <field>...", or a missing flag */
            char prefix[64];
            snprintf(prefix, sizeof prefix, "coordctl: key: %s", v.error_field);
            bool named = !strncmp(err, prefix, strlen(prefix)) ||
                         (!strncmp(err, "coordctl: key: missing --", 25) &&
                          !strncmp(err + 25, v.error_field, strlen(v.error_field)));
            if (st != 2 || out[0] || !named) {
                check_failures++;
                fprintf(stderr, "%s: exit %d (want 2), stdout [%s], stderr %s\n",
                        v.name, st, out, err);
            }
        }
        free(out);
        free(err);
        rv_clear(&v);
    }
    fprintf(stderr, "coordctl key: %zu keys, %zu errors\n", keys, errors);
    CHECK(keys >= 20 && errors >= 10);
    json_decref(root);
}

/* Exit 2 and stderr holding what. */
static void usage_case(const char *const *args, const char *what)
{
    char *out, *err;
    int st = run(args, &out, &err);
    if (st != 2 || !strstr(err, what) || out[0]) {
        check_failures++;
        fprintf(stderr, "%s %s: exit %d (want 2), stderr %s (want %s)\n", args[0],
                args[1] ? args[1] : "", st, err, what);
    }
    free(out);
    free(err);
}

static void test_usage(void)
{
    const char *const no_auth[] = { "key", "--method", "GET", "--url", "http://h/",
                                    "--user", "u", NULL };
    usage_case(no_auth, "missing --auth-gen");
    const char *const bad_auth[] = { "key", "--method", "GET", "--url", "http://h/",
                                     "--user", "u", "--auth-gen", "-1", NULL };
    usage_case(bad_auth, "--auth-gen needs a whole number");
    const char *const bad_header[] = { "key", "--method", "GET", "--url", "http://h/",
                                       "--user", "u", "--auth-gen", "1", "--header",
                                       "no-colon", NULL };
    usage_case(bad_header, "--header needs 'Name: value'");
    const char *const extra[] = { "key", "--method", "GET", "--url", "http://h/",
                                  "--user", "u", "--auth-gen", "1", "stray", NULL };
    usage_case(extra, "unexpected argument stray");
    const char *const unknown[] = { "key", "--nope", NULL };
    usage_case(unknown, "unknown flag --nope");
    /* request flags on once need --key-from-request; without a broker */
    const char *const once_flags[] = { "--no-autostart", "once", "--url", "http://h/",
                                       "k", "--", "true", NULL };
    usage_case(once_flags, "need --key-from-request");
    const char *const once_missing[] = { "--no-autostart", "once", "--key-from-request",
                                         "--method", "GET", "--url", "http://h/",
                                         "--auth-gen", "1", "--", "true", NULL };
    usage_case(once_missing, "missing --user");
    const char *const once_no_cmd[] = { "--no-autostart", "once", "--key-from-request",
                                        "--method", "GET", "--url", "http://h/",
                                        "--user", "u", "--auth-gen", "1", "--", NULL };
    usage_case(once_no_cmd, "missing the command to run");
    const char *const once_cookie[] = { "--no-autostart", "once", "--key-from-request",
                                        "--method", "GET", "--url", "http://h/",
                                        "--user", "u", "--auth-gen", "1", "--header",
                                        "Cookie: a=b", "--", "true", NULL };
    usage_case(once_cookie, "coordctl: once: header Cookie: refused");
}

/* The vector named name, or false. */
static bool find_vector(json_t *vs, const char *name, struct rv_vector *v)
{
    for (size_t i = 0; i < json_array_size(vs); i++) {
        json_t *t = json_array_get(vs, i);
        const char *nm = rv_str(t, "name");
        if (nm && !strcmp(nm, name))
            return rv_get(t, v);
    }
    return false;
}

static void test_once(void)
{
    static struct broker_proc bp;
    const char *path = getenv("COORD_REQUEST_VECTORS");
    REQUIRE(path != NULL);
    json_t *root;
    json_t *vs = rv_load(path, &root);
    REQUIRE(vs != NULL);
    struct rv_vector v;
    bool found = find_vector(vs, "JSON: member order and white space", &v);
    CHECK(found);
    if (!found) {
        json_decref(root);
        return;
    }
    start_or_exit(&bp, NULL);
    setenv("KEY_TEST_SOCK", bp.sock, 1);
    setenv("COORDCTL", coordctl_bin(), 1);

    const char *args[96];
    char hbuf[8][512], body_path[300];
    int k = 0;
    args[k++] = "--socket";
    args[k++] = bp.sock;
    args[k++] = "--no-autostart";
    args[k++] = "once";
    args[k++] = "--keep";          /* an own flag after and before request flags */
    args[k++] = "0";
    args[k++] = "--key-from-request";
    CHECK(request_flags(&v, args, &k, hbuf, body_path, sizeof body_path));
    args[k++] = "--";
    args[k++] = "sh";
    args[k++] = "-c";
    args[k++] = "printf '%s\\n' \"$COORD_FLIGHT_KEY\"; "
                "exec \"$COORDCTL\" --socket \"$KEY_TEST_SOCK\" --no-autostart --json flights";
    args[k] = NULL;
    char *out, *err;
    int before = check_failures;
    int st = run(args, &out, &err);
    CHECK_EQ_U(st, 0);
    size_t kl = strlen(v.key);
    /* line 1: COORD_FLIGHT_KEY; line 2: the flights, with our key */
    CHECK(strncmp(out, v.key, kl) == 0 && out[kl] == '\n');
    char want[200];
    snprintf(want, sizeof want, "\"key\":\"%s\"", v.key);
    CHECK(strstr(out + kl, want) != NULL);
    if (check_failures != before)
        fprintf(stderr, "once: exit %d\nstdout %s\nstderr %s\n", st, out, err);
    free(out);
    free(err);
    rv_clear(&v);
    json_decref(root);
    stop_and_clean(&bp);
}

int main(int argc, char **argv)
{
    snprintf(dir, sizeof dir, "/tmp/coord-cli-key-XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 2;
    }
    static const struct test_case tests[] = {
        { "vectors", test_vectors },
        { "usage", test_usage },
        { "once", test_once },
        { NULL, NULL },
    };
    int rc = run_tests(argc, argv, tests);
    char p[300];
    const char *files[] = { "out", "err", "body" };
    for (size_t i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, files[i]);
        unlink(p);
    }
    rmdir(dir);
    return rc;
}
