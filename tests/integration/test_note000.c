/* test_note000.c - the design note's crossTabLeader.v1 descriptor as real
 * processes: its exact example through `coordctl leader define -f` and as
 * a descriptor file of coordd --config-dir (refused with a message naming
 * --ledger etcd while the broker runs the local ledger, accepted by a
 * broker on a real etcd, SKIP of that part without etcd); lockName as the
 * leadership lock (`coordctl locks -a` from the leader's CMD, a plain
 * steal of it refused); a campaign lacking a pinned capability refused like
 * an old protocol; the ifAvailable policy; and leader-run's fallback when
 * no broker can be reached: SERVER_COORDINATED runs CMD read-only with no
 * generation, no file (or no fallback) fails closed, SINGLE_INSTANCE only
 * with --single-instance.
 *
 * $COORD_BROKER is coordd and $COORDCTL is coordctl (set by meson). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "etcd-proc.h"
#include "harness.h"
#include "leader-util.h"

#define T 10000

/* note 000, verbatim */
static const char note_example[] =
    "schema: crossTabLeader.v1\n"
    "workstream: account-outbox\n"
    "lockName: app:leader:account-outbox:v3\n"
    "protocol: leader-worker@3\n"
    "canonicalFence: server-lease-ledger\n"
    "maxHold: 30s\n"
    "steal: incident-only\n"
    "fallback: SERVER_COORDINATED\n";

static struct broker_proc bp;
static char cfg[400], cfg_arg[420];

static void write_path(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0)
        exit(2);
}

/* fresh broker paths, a config dir beside the data dir */
static void setup(void)
{
    memset(&bp, 0, sizeof bp);
    broker_paths(&bp);
    snprintf(cfg, sizeof cfg, "%s/cfg", bp.dir);
    snprintf(cfg_arg, sizeof cfg_arg, "--config-dir=%s", cfg);
    char ws[500];
    snprintf(ws, sizeof ws, "%s/workstreams", cfg);
    if (mkdir(cfg, 0700) < 0 || mkdir(ws, 0700) < 0)
        exit(2);
}

static void write_cfg(const char *name, const char *text)
{
    char path[600];
    snprintf(path, sizeof path, "%s/workstreams/%s", cfg, name);
    write_path(path, text);
}

/* the note's example with one line replaced (NULL: as it is) */
static void example_with(char *out, size_t size, const char *from, const char *to)
{
    snprintf(out, size, "%s", note_example);
    if (!from)
        return;
    char *at = strstr(out, from);
    if (!at)
        exit(2);
    char rest[1024];
    snprintf(rest, sizeof rest, "%s", at + strlen(from));
    snprintf(at, size - (size_t)(at - out), "%s%s", to, rest);
}

static int ctl(struct run *r, const char *const *args)
{
    return leader_ctl_run(r, &bp, args, T);
}

/* ---- the example, as written ---- */

static void test_example_local_ledger(void)
{
    setup();
    /* the broker's own file: refused whole, with the reason */
    write_cfg("account-outbox.v1", note_example);
    const char *args[] = { cfg_arg, NULL };
    start_or_exit(&bp, args);
    struct run r;
    char path[600];
    snprintf(path, sizeof path, "%s/note.yaml", bp.dir);
    write_path(path, note_example);
    /* every key is known: the one refusal is the ledger, which names the flag */
    CHECK(ctl(&r, (const char *[]){ "leader", "define", "-f", path, NULL }) == 1);
    CHECK(run_has(&r, ERR, "server-lease-ledger"));
    CHECK(run_has(&r, ERR, "--ledger etcd"));
    CHECK(!strstr(run_text(&r, ERR), "lockName"));
    run_free(&r);
    CHECK(ctl(&r, (const char *[]){ "reload", NULL }) == 1);
    CHECK(run_has(&r, OUT, "account-outbox.v1: canonicalFence server-lease-ledger"));
    CHECK(run_has(&r, OUT, "--ledger etcd"));
    run_free(&r);

    /* the same with the local ledger named: accepted, by both */
    char local[1024];
    example_with(local, sizeof local, "server-lease-ledger", "local");
    write_path(path, local);
    CHECK(ctl(&r, (const char *[]){ "leader", "define", "-f", path, NULL }) == 0);
    CHECK(run_has_row(&r, "lock name", "app:leader:account-outbox:v3"));
    CHECK(run_has_row(&r, "fallback", "SERVER_COORDINATED"));
    CHECK(run_has_row(&r, "steal", "incident-only"));
    CHECK(run_has_row(&r, "max hold", "30.0 s"));
    run_free(&r);
    write_cfg("account-outbox.v1", local);
    CHECK(ctl(&r, (const char *[]){ "reload", NULL }) == 0);
    CHECK(run_has(&r, OUT, "\"account-outbox\""));
    run_free(&r);
    CHECK(ctl(&r, (const char *[]){ "leader", "info", "account-outbox", NULL }) == 0);
    CHECK(run_has_row(&r, "lock", "app:leader:account-outbox:v3"));
    CHECK(run_has_row(&r, "pinned protocol", "leader-worker@3"));
    run_free(&r);
    stop_and_clean(&bp);
}

static void test_example_etcd_ledger(void)
{
    if (!etcd_binary()) {
        fprintf(stderr, "skip: no etcd binary (etcd-server): the remote ledger part\n");
        return;
    }
    struct etcd_cluster ec;
    REQUIRE(etcd_start(&ec, 1) == 0);
    setup();
    write_cfg("account-outbox.v1", note_example);
    const char *args[] = { cfg_arg, "--ledger", "etcd", "--etcd-endpoints", ec.endpoints, NULL };
    start_or_exit(&bp, args);
    struct run r;
    CHECK(ctl(&r, (const char *[]){ "reload", NULL }) == 0);
    CHECK(run_has(&r, OUT, "\"account-outbox\""));
    run_free(&r);
    char path[600];
    snprintf(path, sizeof path, "%s/note.yaml", bp.dir);
    write_path(path, note_example);
    CHECK(ctl(&r, (const char *[]){ "leader", "define", "-f", path, NULL }) == 0);
    CHECK(run_has_row(&r, "canonical fence", "etcd"));
    CHECK(run_has_row(&r, "lock name", "app:leader:account-outbox:v3"));
    run_free(&r);
    /* and a campaign under it holds the named lock */
    CHECK(ctl(&r, (const char *[]){ "leader-run", "--protocol", "leader-worker@3",
                                    "account-outbox", "--", "sh", "-c",
                                    "exec \"$COORDCTL\" --socket \"$COORD_SOCKET\" "
                                    "--no-autostart locks -a", NULL }) == 0);
    CHECK(run_has(&r, OUT, "app:leader:account-outbox:v3"));
    run_free(&r);
    stop_and_clean(&bp);
    etcd_stop(&ec);
}

/* ---- lockName, capabilities, ifAvailable ---- */

static void define_file(const char *text)
{
    char path[600];
    snprintf(path, sizeof path, "%s/d.yaml", bp.dir);
    write_path(path, text);
    struct run r;
    CHECK(ctl(&r, (const char *[]){ "leader", "define", "-f", path, NULL }) == 0);
    run_free(&r);
}

static void test_lock_name(void)
{
    setup();
    start_or_exit(&bp, NULL);
    define_file("schema: crossTabLeader.v1\nworkstream: ob\nlockName: app:leader:ob:v3\n");
    struct run r;
    /* the leader's CMD sees its lock under that name, and a plain steal of
     * it is refused (steals go through leader.campaign and its policy) */
    CHECK(ctl(&r, (const char *[]){ "leader-run", "ob", "--", "sh", "-c",
                                    "\"$COORDCTL\" --socket \"$COORD_SOCKET\" --no-autostart "
                                    "locks -a && ! \"$COORDCTL\" --socket \"$COORD_SOCKET\" "
                                    "--no-autostart lock --steal app:leader:ob:v3 -- true",
                                    NULL }) == 0);
    CHECK(run_has(&r, OUT, "app:leader:ob:v3"));
    CHECK(!strstr(run_text(&r, OUT), "-leader/ob"));
    CHECK(run_has(&r, ERR, "POLICY"));
    run_free(&r);
    /* removed (nil): the default name again */
    define_file("schema: crossTabLeader.v1\nworkstream: ob\nlockName: ~\n");
    CHECK(ctl(&r, (const char *[]){ "leader-run", "ob", "--", "sh", "-c",
                                    "exec \"$COORDCTL\" --socket \"$COORD_SOCKET\" "
                                    "--no-autostart locks -a", NULL }) == 0);
    CHECK(run_has(&r, OUT, "-leader/ob"));
    run_free(&r);
    /* the broker's namespace is not a lock name */
    CHECK(ctl(&r, (const char *[]){ "leader", "define", "ob", "--lock-name", "-leader/x",
                                    NULL }) == 1);
    CHECK(run_has(&r, ERR, "INVALID_OPTIONS"));
    run_free(&r);
    stop_and_clean(&bp);
}

static void test_capabilities_if_available(void)
{
    setup();
    write_cfg("caps.v1", "schema: crossTabLeader.v1\nprotocol: app@2\n"
                         "capabilities: [outbox, claims]\nifAvailable: never\n");
    const char *args[] = { cfg_arg, NULL };
    start_or_exit(&bp, args);
    struct run r;
    /* no capabilities, or one missing: refused as an old protocol is */
    CHECK(ctl(&r, (const char *[]){ "leader-run", "--protocol", "app@2", "caps", "--",
                                    "true", NULL }) == 1);
    CHECK(run_has(&r, ERR, "PROTOCOL_PINNED"));
    CHECK(run_has(&r, ERR, "capability outbox"));
    run_free(&r);
    CHECK(ctl(&r, (const char *[]){ "leader-run", "--protocol", "app@2", "--capabilities",
                                    "outbox", "caps", "--", "true", NULL }) == 1);
    CHECK(run_has(&r, ERR, "capability claims"));
    run_free(&r);
    /* ifAvailable never: -n is a policy refusal; waiting is fine */
    CHECK(ctl(&r, (const char *[]){ "leader-run", "-n", "--protocol", "app@2",
                                    "--capabilities", "claims,outbox", "caps", "--", "true",
                                    NULL }) == 1);
    CHECK(run_has(&r, ERR, "POLICY"));
    run_free(&r);
    /* the list's own rules: brackets and spaces fine, a bad name refused */
    CHECK(ctl(&r, (const char *[]){ "leader-run", "--protocol", "app@2", "--capabilities",
                                    "a b", "caps", "--", "true", NULL }) == 1);
    CHECK(run_has(&r, ERR, "INVALID_OPTIONS"));
    run_free(&r);
    CHECK(ctl(&r, (const char *[]){ "leader-run", "--protocol", "app@2", "--capabilities",
                                    "[claims, outbox, more]", "caps", "--", "true",
                                    NULL }) == 0);
    run_free(&r);
    CHECK(ctl(&r, (const char *[]){ "leader", "describe", "caps", NULL }) == 0);
    CHECK(run_has_row(&r, "capabilities", "outbox,claims"));
    CHECK(run_has_row(&r, "if available", "never"));
    run_free(&r);
    /* defined at run time: allowed again, no capability */
    CHECK(ctl(&r, (const char *[]){ "leader", "define", "caps", "--if-available", "allowed",
                                    "--capabilities", "", NULL }) == 0);
    run_free(&r);
    CHECK(ctl(&r, (const char *[]){ "leader-run", "-n", "--protocol", "app@2", "caps", "--",
                                    "true", NULL }) == 0);
    run_free(&r);
    stop_and_clean(&bp);
}

/* ---- leader-run when no broker can be reached ---- */

/* leader-run against a socket with nothing behind it, COORD_CONFIG_DIR
 * set to cfg; CMD prints its COORD_* variables */
static int unreachable_run(struct run *r, const char *ws, bool single)
{
    struct broker_proc none = bp;
    snprintf(none.sock, sizeof none.sock, "%s/nothing.sock", bp.dir);
    setenv("COORD_CONFIG_DIR", cfg, 1);
    setenv("COORD_GENERATION", "99", 1);   /* inherited from an outer leader-run */
    const char *cmd = "echo ran; echo mode=$COORD_MODE; echo fallback=$COORD_FALLBACK; "
                      "echo gen=${COORD_GENERATION-none}; echo lmode=$COORD_LEADER_MODE";
    const char *a1[] = { "leader-run", ws, "--", "sh", "-c", cmd, NULL };
    const char *a2[] = { "leader-run", "--single-instance", ws, "--", "sh", "-c", cmd, NULL };
    int rc = leader_ctl_run(r, &none, single ? a2 : a1, T);
    unsetenv("COORD_CONFIG_DIR");
    unsetenv("COORD_GENERATION");
    return rc;
}

static void test_fallback(void)
{
    setup();
    struct run r;
    char local[1024];
    example_with(local, sizeof local, "server-lease-ledger", "local");
    write_cfg("account-outbox.v1", local);
    /* SERVER_COORDINATED: CMD runs read-only, with no generation, and says so */
    CHECK(unreachable_run(&r, "account-outbox", false) == 0);
    CHECK(run_has(&r, OUT, "ran\nmode=read-only\nfallback=SERVER_COORDINATED\ngen=none\n"
                           "lmode=read-only\n"));
    CHECK(run_has(&r, ERR, "fallback SERVER_COORDINATED"));
    CHECK(run_has(&r, ERR, "read-only"));
    run_free(&r);
    /* no file: fail closed as ever (CMD never runs, exit 3) */
    CHECK(unreachable_run(&r, "other", false) == 3);
    CHECK(!strstr(run_text(&r, OUT), "ran"));
    CHECK(run_has(&r, ERR, "CONNECT"));
    CHECK(run_has(&r, ERR, "failing closed"));
    run_free(&r);
    /* a file without fallback, and FAIL_CLOSED: the same */
    write_cfg("nofb.v1", "schema: crossTabLeader.v1\nmode: shadow\n");
    CHECK(unreachable_run(&r, "nofb", false) == 3);
    CHECK(!strstr(run_text(&r, OUT), "ran"));
    run_free(&r);
    write_cfg("closed.v1", "schema: crossTabLeader.v1\nfallback: FAIL_CLOSED\n");
    CHECK(unreachable_run(&r, "closed", true) == 3);
    CHECK(!strstr(run_text(&r, OUT), "ran"));
    run_free(&r);
    /* a bad file: fail closed, naming the line */
    write_cfg("bad.v1", "schema: crossTabLeader.v1\nfallback: SERVER_COORDINATD\n");
    CHECK(unreachable_run(&r, "bad", false) == 3);
    CHECK(!strstr(run_text(&r, OUT), "ran"));
    CHECK(run_has(&r, ERR, "bad.v1:2"));
    run_free(&r);
    /* SINGLE_INSTANCE: only the instance the user started so runs */
    write_cfg("solo.v1", "schema: crossTabLeader.v1\nfallback: SINGLE_INSTANCE\n");
    CHECK(unreachable_run(&r, "solo", false) == 3);
    CHECK(!strstr(run_text(&r, OUT), "ran"));
    CHECK(run_has(&r, ERR, "--single-instance"));
    run_free(&r);
    CHECK(unreachable_run(&r, "solo", true) == 0);
    CHECK(run_has(&r, OUT, "ran\nmode=single-instance\nfallback=SINGLE_INSTANCE\ngen=none\n"));
    run_free(&r);
    /* with a broker, the fallback plays no part: a generation, COORD_MODE leader */
    const char *args[] = { cfg_arg, NULL };
    start_or_exit(&bp, args);
    CHECK(ctl(&r, (const char *[]){ "leader-run", "--protocol", "leader-worker@3",
                                    "account-outbox", "--", "sh", "-c",
                                    "echo mode=$COORD_MODE gen=$COORD_GENERATION", NULL }) == 0);
    CHECK(run_has(&r, OUT, "mode=leader gen="));
    CHECK(!strstr(run_text(&r, OUT), "gen=\n"));
    run_free(&r);
    stop_and_clean(&bp);
}

int main(int argc, char **argv)
{
    static const struct test_case tests[] = {
        { "example_local_ledger", test_example_local_ledger },
        { "example_etcd_ledger", test_example_etcd_ledger },
        { "lock_name", test_lock_name },
        { "capabilities_if_available", test_capabilities_if_available },
        { "fallback", test_fallback },
        { NULL, NULL },
    };
    return run_tests(argc, argv, tests);
}
