/* test_cli_scope.c - coordctl's scope: every command works in $COORD_SCOPE
 * when --scope is not given (locks, once, records; --scope, even "", wins
 * over it), and the CMD of lock and once inherits COORD_SCOPE and
 * COORD_SOCKET, so that a coordctl inside it sees what the outer one
 * holds, as inside leader-run.  Real coordctl processes against a real
 * broker; the scoped lock is held by a raw client in scope "app". */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "harness.h"

#define T 10000

static struct broker_proc bp;

/* `coordctl --socket bp.sock --no-autostart [--scope S] ARGS...` to its
 * end; its stdout in out (size bytes); its status. */
static int ctl(const char *scope, char *out, size_t size, const char *const *args)
{
    struct run r;
    ctl_spawn(&r, bp.sock, bp.dir, &(struct ctl_opts){ .scope = scope, .pipes = true }, args);
    int st = run_finish(&r, T);
    snprintf(out, size, "%s", run_text(&r, OUT));
    if (st != 0)
        fprintf(stderr, "coordctl said: %s\n", run_text(&r, ERR));
    run_free(&r);
    return st;
}

static void test_env_scope_for_every_command(void)
{
    memset(&bp, 0, sizeof bp);
    REQUIRE(broker_start(&bp, NULL) == 0);
    struct rcl *app = rcl_open(bp.sock, "app");
    REQUIRE(app);
    coord_msg m;
    coord_msg_init(&m);
    REQUIRE(rcl_acquire(app, 1, S("held-in-app"), "", 0, 0) == 0);
    REQUIRE(rcl_reply(app, 1, T, &m) == 0);
    CHECK(msg_ok(&m));
    coord_msg_destroy(&m);
    char out[8192];

    /* locks */
    setenv("COORD_SCOPE", "app", 1);
    CHECK_EQ_U(ctl(NULL, out, sizeof out, ARGS("locks")), 0);
    CHECK(strstr(out, "held-in-app") != NULL);
    CHECK_EQ_U(ctl("", out, sizeof out, ARGS("locks")), 0);      /* --scope "" wins */
    CHECK(strstr(out, "held-in-app") == NULL);
    unsetenv("COORD_SCOPE");
    CHECK_EQ_U(ctl(NULL, out, sizeof out, ARGS("locks")), 0);
    CHECK(strstr(out, "held-in-app") == NULL);

    /* once stores its record in the scope, records lists it there */
    setenv("COORD_SCOPE", "app", 1);
    CHECK_EQ_U(ctl(NULL, out, sizeof out, ARGS("once", "--keep", "60", "key-in-app", "--",
                                               "echo", "done")), 0);
    CHECK(strcmp(out, "done\n") == 0);
    CHECK_EQ_U(ctl(NULL, out, sizeof out, ARGS("records")), 0);
    CHECK(strstr(out, "key-in-app") != NULL);
    unsetenv("COORD_SCOPE");
    CHECK_EQ_U(ctl("app", out, sizeof out, ARGS("records")), 0);
    CHECK(strstr(out, "key-in-app") != NULL);
    CHECK_EQ_U(ctl(NULL, out, sizeof out, ARGS("records")), 0);
    CHECK(strstr(out, "key-in-app") == NULL);

    rcl_close(app);
    broker_kill(&bp, SIGTERM);
    broker_cleanup(&bp);
}

/* Inside CMD, a bare coordctl (no --socket, no --scope) finds the outer
 * one's broker and scope. */
static void test_cmd_inherits_scope_and_socket(void)
{
    memset(&bp, 0, sizeof bp);
    REQUIRE(broker_start(&bp, NULL) == 0);
    char out[8192];
    static const char inner[] =
        "echo \"scope=$COORD_SCOPE\"; \"$COORDCTL\" --no-autostart locks";
    CHECK_EQ_U(ctl("app", out, sizeof out,
                   ARGS("lock", "lock-in-app", "--", "sh", "-c", inner)), 0);
    CHECK(strncmp(out, "scope=app\n", 10) == 0);
    CHECK(strstr(out, "lock-in-app") != NULL);
    if (!strstr(out, "lock-in-app"))
        fprintf(stderr, "CMD said: %s\n", out);

    CHECK_EQ_U(ctl("app", out, sizeof out,
                   ARGS("once", "key-in-app", "--", "sh", "-c",
                        "echo \"scope=$COORD_SCOPE\"; \"$COORDCTL\" --no-autostart flights")),
               0);
    CHECK(strncmp(out, "scope=app\n", 10) == 0);
    CHECK(strstr(out, "key-in-app") != NULL);      /* its own flight, in scope */
    if (!strstr(out, "key-in-app"))
        fprintf(stderr, "CMD said: %s\n", out);
    broker_kill(&bp, SIGTERM);
    broker_cleanup(&bp);
}

int main(int argc, char **argv)
{
    /* the environment of the tests must not pick a broker or a scope */
    unsetenv("COORD_SCOPE");
    unsetenv("COORD_SOCKET");
    static const struct test_case tests[] = {
        { "env_scope_for_every_command", test_env_scope_for_every_command },
        { "cmd_inherits_scope_and_socket", test_cmd_inherits_scope_and_socket },
        { NULL, NULL },
    };
    return run_tests(argc, argv, tests);
}
