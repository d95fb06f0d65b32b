/* test_desc_files.c - workstream descriptors as configuration, as real
 * processes: a broker with --config-dir whose workstreams/WORKSTREAM.v1
 * files pin a protocol, disable and set a mode; the data dir wiped while
 * the broker is down and the broker restarted (the policy comes back from
 * the files: still disabled, shadow, pinned; an old campaign refused); the
 * ratchet raising a file's floor; SIGHUP and broker.reload picking up a
 * changed file; a bad file reported with FILE:LINE while the others load;
 * `maxHold: 0x10s` refused (decimal durations only); on the etcd ledger
 * (SKIP of that part without etcd), a reload while etcd is stopped names
 * the file that was not stored and exits 1, a reload once it is back
 * stores it (another broker sees the mode), a SIGHUP's store that
 * failed is tried again until etcd is back, and two reloads whose stores
 * wait for a frozen etcd at once store the newer files (checked against
 * coordd-broken's etcd-desc-unordered too, when built).
 *
 * $COORD_BROKER is coordd and $COORDCTL is coordctl (set by meson). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "etcd-proc.h"
#include "harness.h"
#include "leader-util.h"

#define T 10000

static struct broker_proc bp;
static coord_msg m;
static char cfg[400], cfg_arg[420];

static void write_file(const char *name, const char *text)
{
    char path[600];
    snprintf(path, sizeof path, "%s/workstreams/%s", cfg, name);
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0)
        exit(2);
}

static void start(void)
{
    const char *args[] = { cfg_arg, NULL };
    if (broker_start(&bp, args) < 0)
        exit(2);
}

/* fresh paths and a config dir beside the data dir */
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

static void wipe(void)
{
    broker_kill(&bp, SIGTERM);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", bp.data);
    if (system(cmd) != 0)
        exit(2);
}

static int ctl(struct run *r, const char *const *args)
{
    return leader_ctl_run(r, &bp, args, T);
}

static bool log_has(const char *needle)
{
    FILE *f = fopen(bp.log, "r");
    if (!f)
        return false;
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    bool ok = strstr(buf, needle) != NULL;
    if (!ok)
        fprintf(stderr, "log lacks %s\n", needle);
    return ok;
}

static void describe_off(void)
{
    struct run r;
    CHECK(ctl(&r, (const char *[]){ "leader", "info", "off", NULL }) == 0);
    CHECK(run_has_row(&r, "state", "disabled"));
    CHECK(run_has_row(&r, "mode", "shadow"));
    CHECK(run_has_row(&r, "pinned protocol", "app@5"));
    run_free(&r);
}

static void campaign_refused(const char *ws, const char *proto, const char *why)
{
    struct run r;
    CHECK(ctl(&r, (const char *[]){ "leader-run", "-n", "--protocol", proto, ws, "--",
                                    "true", NULL }) != 0);
    CHECK(run_has(&r, ERR, why));
    run_free(&r);
}

static void test_wipe_keeps_policy(void)
{
    setup();
    write_file("off.v1", "schema: crossTabLeader.v1\nworkstream: off\nprotocol: app@5\n"
                         "mode: shadow\ndisabled: true\n");
    write_file("pin.v1", "schema: crossTabLeader.v1\nprotocol: app@5\n");
    start();
    describe_off();
    campaign_refused("pin", "app@1", "PINNED");
    wipe();
    start();
    describe_off();
    campaign_refused("off", "app@5", "DISABLED");
    campaign_refused("pin", "app@1", "PINNED");
    struct run r;
    CHECK(ctl(&r, (const char *[]){ "leader-run", "-n", "--protocol", "app@5", "pin", "--",
                                    "true", NULL }) == 0);
    run_free(&r);
    stop_and_clean(&bp);
}

static void test_ratchet_raises_floor(void)
{
    setup();
    write_file("rw.v1", "schema: crossTabLeader.v1\nprotocol: app@3\n");
    start();
    struct run r;
    CHECK(ctl(&r, (const char *[]){ "leader-run", "-n", "--protocol", "app@5", "rw", "--",
                                    "true", NULL }) == 0);
    run_free(&r);
    broker_kill(&bp, SIGTERM);
    /* the file says app@3 again: applied (its mode too), the pin stays 5 */
    write_file("rw.v1", "schema: crossTabLeader.v1\nprotocol: app@3\nmode: read-only\n");
    start();
    CHECK(ctl(&r, (const char *[]){ "leader", "info", "rw", NULL }) == 0);
    CHECK(run_has_row(&r, "pinned protocol", "app@5"));
    CHECK(run_has_row(&r, "mode", "read-only"));
    run_free(&r);
    campaign_refused("rw", "app@4", "PINNED");
    stop_and_clean(&bp);
}

static void test_reload(void)
{
    setup();
    write_file("rl.v1", "schema: crossTabLeader.v1\nmode: shadow\n");
    start();
    struct run r;
    CHECK(ctl(&r, (const char *[]){ "leader", "info", "rl", NULL }) == 0);
    CHECK(run_has_row(&r, "mode", "shadow"));
    run_free(&r);
    /* SIGHUP */
    write_file("rl.v1", "schema: crossTabLeader.v1\nmode: read-only\n");
    write_file("bad.v1", "schema: crossTabLeader.v1\nbogus: 1\n");
    write_file("other.v1", "schema: crossTabLeader.v1\ndisabled: true\n");
    kill(bp.pid, SIGHUP);
    struct rcl *c = connect_or_exit(&bp, NULL);
    /* a request after the signal's handling: poll its effect through info */
    bool seen = false;
    for (int i = 0; i < 200 && !seen; i++) {
        CHECK(ctl(&r, (const char *[]){ "leader", "info", "other", NULL }) == 0);
        /* the row "disabled  yes" (the state row says it too) */
        const char *row = r.text[0].p ? strstr(r.text[0].p, "\ndisabled ") : NULL;
        seen = row && strncmp(row + strcspn(row + 1, "\n") - 2, "yes", 3) == 0;
        run_free(&r);
        if (!seen)
            usleep(10000);
    }
    CHECK(seen);
    CHECK(ctl(&r, (const char *[]){ "leader", "info", "rl", NULL }) == 0);
    CHECK(run_has_row(&r, "mode", "read-only"));
    run_free(&r);
    CHECK(log_has("bad.v1:2: unknown key 'bogus'"));
    /* broker.reload */
    write_file("rl.v1", "schema: crossTabLeader.v1\nmode: active\nmaxHold: 0x10s\n");
    CHECK(rcl_request(c, "broker.reload", 7) == 0);
    CHECK(rcl_reply(c, 7, T, &m) == 0);
    CHECK(log_has("rl.v1:3: maxHold: not a duration"));
    CHECK(ctl(&r, (const char *[]){ "leader", "info", "rl", NULL }) == 0);
    CHECK(run_has_row(&r, "mode", "read-only"));   /* the bad file changed nothing */
    run_free(&r);
    write_file("rl.v1", "schema: crossTabLeader.v1\nmode: active\nmaxHold: 16s\n");
    CHECK(rcl_request(c, "broker.reload", 8) == 0);
    CHECK(rcl_reply(c, 8, T, &m) == 0);
    CHECK(ctl(&r, (const char *[]){ "leader", "info", "rl", NULL }) == 0);
    CHECK(run_has_row(&r, "mode", "active"));
    CHECK(run_has_row(&r, "max hold", "16.0 s"));
    run_free(&r);
    /* coordctl reload: the loaded names, the refused file by FILE:LINE, exit 1 */
    write_file("rl.v1", "schema: crossTabLeader.v1\nmode: shadow\n");
    CHECK(ctl(&r, (const char *[]){ "reload", NULL }) == 1);
    CHECK(run_has(&r, OUT, "\"rl\""));
    CHECK(run_has(&r, OUT, "bad.v1:2: unknown key 'bogus'"));
    run_free(&r);
    CHECK(ctl(&r, (const char *[]){ "leader", "info", "rl", NULL }) == 0);
    CHECK(run_has_row(&r, "mode", "shadow"));
    run_free(&r);
    /* coordctl's own parser: decimal durations only */
    CHECK(ctl(&r, (const char *[]){ "leader", "define", "x", "--max-hold", "0x10s",
                                    NULL }) != 0);
    CHECK(run_has(&r, ERR, "0x10s"));
    run_free(&r);
    rcl_close(c);
    stop_and_clean(&bp);
}

static void mode_on(const struct broker_proc *p, const char *ws, const char *mode)
{
    struct run r;
    CHECK(leader_ctl_run(&r, p, (const char *[]){ "leader", "info", ws, NULL }, T) == 0);
    CHECK(run_has_row(&r, "mode", mode));
    run_free(&r);
}

static bool mode_is(const struct broker_proc *p, const char *ws, const char *mode)
{
    struct run r;
    bool ok = leader_ctl_run(&r, p, (const char *[]){ "leader", "info", ws, NULL }, T) == 0 &&
              run_has_row(&r, "mode", mode);
    run_free(&r);
    return ok;
}

/* The stores of a reload in the etcd ledger: answered once done, with the
 * file that was not stored in errors. */
static void test_reload_etcd(void)
{
    if (!etcd_binary()) {
        fprintf(stderr, "skip: no etcd binary (etcd-server): the remote ledger part\n");
        return;
    }
    setup();
    struct etcd_cluster ec;
    REQUIRE(etcd_start(&ec, 1) == 0);
    write_file("ob.v1", "schema: crossTabLeader.v1\nmode: active\n");
    const char *args[] = { cfg_arg, "--ledger", "etcd", "--etcd-endpoints", ec.endpoints, NULL };
    REQUIRE(broker_start(&bp, args) == 0);
    struct broker_proc other;
    memset(&other, 0, sizeof other);
    const char *oargs[] = { "--ledger", "etcd", "--etcd-endpoints", ec.endpoints, NULL };
    REQUIRE(broker_start(&other, oargs) == 0);
    mode_on(&other, "ob", "active");
    /* a leader on this broker keeps the workstream in its memory */
    struct rcl *c = connect_or_exit(&bp, NULL);
    coord_enc *e = rcl_begin(c, "leader.campaign", 1);
    coord_enc_kv_cstr(e, "workstream", "ob");
    coord_enc_kv_uint(e, "lease_ms", 60000);
    REQUIRE(rcl_send(c) == 0);
    CHECK(rcl_reply(c, 1, T, &m) == 0 && msg_bool(&m, "granted"));

    /* etcd stopped: the reload waits for its store, names the file, exits 1 */
    etcd_signal(&ec, 0, SIGSTOP);
    write_file("ob.v1", "schema: crossTabLeader.v1\nmode: shadow\n");
    struct run r;
    CHECK(ctl(&r, (const char *[]){ "reload", NULL }) == 1);
    CHECK(run_has(&r, OUT, "ob.v1: applied on this broker but not stored in the etcd "
                           "ledger: the etcd ledger is out of reach"));
    CHECK(run_has(&r, OUT, "loaded   []"));
    run_free(&r);
    CHECK(log_has("leader.config_unstored"));
    etcd_signal(&ec, 0, SIGCONT);

    /* etcd back: loaded, and the other broker sees the mode */
    CHECK(ctl(&r, (const char *[]){ "reload", NULL }) == 0);
    CHECK(run_has(&r, OUT, "loaded   [\"ob\"]"));
    run_free(&r);
    mode_on(&other, "ob", "shadow");

    /* SIGHUP while etcd is stopped: logged at warn, tried again until stored */
    etcd_signal(&ec, 0, SIGSTOP);
    write_file("ob.v1", "schema: crossTabLeader.v1\nmode: read-only\n");
    kill(bp.pid, SIGHUP);
    bool logged = false;
    for (int i = 0; i < 300 && !logged; i++) {
        usleep(50000);
        FILE *f = fopen(bp.log, "r");
        static char buf[1 << 20];
        size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
        if (f)
            fclose(f);
        buf[n] = 0;
        char *hup = strstr(buf, "signal=SIGHUP");
        logged = hup && strstr(hup, "leader.config_unstored") && strstr(hup, "ob.v1");
    }
    CHECK(logged);
    etcd_signal(&ec, 0, SIGCONT);
    bool seen = false;
    for (int i = 0; i < 400 && !seen; i++) {
        seen = mode_is(&other, "ob", "read-only");
        if (!seen)
            usleep(100000);
    }
    CHECK(seen);
    CHECK(log_has("leader.config_stored"));

    /* a reload whose connection closes before its stores end: nobody is
     * answered on a freed connection (ASan's stage), the stores still land */
    etcd_signal(&ec, 0, SIGSTOP);
    write_file("ob.v1", "schema: crossTabLeader.v1\nmode: active\n");
    struct rcl *gone = connect_or_exit(&bp, NULL);
    REQUIRE(rcl_request(gone, "broker.reload", 7) == 0);
    rcl_close(gone);
    etcd_signal(&ec, 0, SIGCONT);
    seen = false;
    for (int i = 0; i < 400 && !seen; i++) {
        seen = mode_is(&other, "ob", "active");
        if (!seen)
            usleep(100000);
    }
    CHECK(seen);
    REQUIRE(rcl_request(c, "ping", 8) == 0);
    CHECK(rcl_reply(c, 8, T, &m) == 0 && msg_ok(&m));
    rcl_close(c);
    stop_and_clean(&other);
    stop_and_clean(&bp);
    etcd_stop(&ec);
}

/* ---- reloads in flight at once on the etcd ledger ----
 * A define is a read and a Txn comparing what it read: two of one
 * workstream in flight at once both read the same descriptor, and the one
 * refused reads again and lands last, whichever load it came from.  The
 * broker runs a workstream's descriptor writes one at a time, in the order
 * made; these runs freeze etcd while two reloads read two versions of the
 * files, then let it go. */
enum { NW = 12 };

static void write_all(const char *mode)
{
    for (int i = 0; i < NW; i++) {
        char name[32], text[96];
        snprintf(name, sizeof name, "w%02d.v1", i);
        snprintf(text, sizeof text, "schema: crossTabLeader.v1\nmode: %s\n", mode);
        write_file(name, text);
    }
}

/* broker.reload on c (rid), and a ping behind it: the files were read */
static void reload_read(struct rcl *c, uint64_t rid)
{
    REQUIRE(rcl_request(c, "broker.reload", rid) == 0);
    REQUIRE(rcl_sync(c) == 0);
}

static void reload_all_loaded(struct rcl *c, uint64_t rid)
{
    CHECK(rcl_reply(c, rid, T, &m) == 0 && msg_ok(&m));
    CHECK(msg_array(&m, "loaded")->size == NW);
    CHECK(msg_array(&m, "errors")->size == 0);
}

/* One run against $COORD_BROKER (etcd keys under prefix): *wrong, the
 * modes not the newer file's (read on another broker, so as stored, and on
 * this one), and *rereads, the defines that read again because the
 * descriptor changed under them. */
static void reloads_race(struct etcd_cluster *ec, const char *prefix, int *wrong,
                         uint64_t *rereads)
{
    *wrong = -1;
    *rereads = 0;
    setup();
    write_all("active");
    const char *args[] = { cfg_arg, "--ledger", "etcd", "--etcd-endpoints", ec->endpoints,
                           "--etcd-prefix", prefix, NULL };
    REQUIRE(broker_start(&bp, args) == 0);
    struct broker_proc other;
    memset(&other, 0, sizeof other);
    const char *oargs[] = { "--ledger", "etcd", "--etcd-endpoints", ec->endpoints,
                            "--etcd-prefix", prefix, NULL };
    REQUIRE(broker_start(&other, oargs) == 0);
    struct rcl *a = connect_or_exit(&bp, NULL), *b = connect_or_exit(&bp, NULL);
    /* the start's stores landed: a reload of the same files finds them */
    reload_read(a, 1);
    reload_all_loaded(a, 1);
    uint64_t before = rcl_stat(a, "etcd_define_rereads");

    etcd_signal(ec, 0, SIGSTOP);
    write_all("shadow");
    reload_read(a, 2);             /* reads shadow; its stores wait for etcd */
    write_all("read-only");
    reload_read(b, 3);             /* reads read-only, the newer */
    etcd_signal(ec, 0, SIGCONT);
    reload_all_loaded(a, 2);
    reload_all_loaded(b, 3);

    *wrong = 0;
    for (int i = 0; i < NW; i++) {
        char ws[16];
        snprintf(ws, sizeof ws, "w%02d", i);
        *wrong += !mode_is(&other, ws, "read-only");
        *wrong += !mode_is(&bp, ws, "read-only");
    }
    *rereads = rcl_stat(a, "etcd_define_rereads") - before;
    rcl_close(a);
    rcl_close(b);
    stop_and_clean(&other);
    stop_and_clean(&bp);
}

static void test_reloads_in_flight(void)
{
    if (!etcd_binary()) {
        fprintf(stderr, "skip: no etcd binary (etcd-server)\n");
        return;
    }
    struct etcd_cluster ec;
    REQUIRE(etcd_start(&ec, 1) == 0);
    uint64_t rereads;
    int wrong;
    reloads_race(&ec, "/coord-order/", &wrong, &rereads);
    CHECK_EQ(wrong, 0);
    CHECK_EQ_U(rereads, 0);
    /* the same run against the defines racing (coordd-broken, when built):
     * every workstream's two defines read the same descriptor, so one of
     * each pair reads again; which of them lands last is etcd's order */
    char broken[600];
    snprintf(broken, sizeof broken, "%s-broken", broker_binary());
    if (access(broken, X_OK) == 0) {
        char *plain = strdup(broker_binary());
        REQUIRE(plain);
        setenv("COORD_BROKER", broken, 1);
        setenv("COORD_TEST_BREAK", "etcd-desc-unordered", 1);
        reloads_race(&ec, "/coord-race/", &wrong, &rereads);
        unsetenv("COORD_TEST_BREAK");
        setenv("COORD_BROKER", plain, 1);
        free(plain);
        fprintf(stderr, "etcd-desc-unordered: %d of %d modes not the newer file's, %llu "
                "rereads\n", wrong, 2 * NW, (unsigned long long)rereads);
        CHECK(rereads > 0);
    }
    etcd_stop(&ec);
}

int main(int argc, char **argv)
{
    static const struct test_case tests[] = {
        { "wipe_keeps_policy", test_wipe_keeps_policy },
        { "ratchet_raises_floor", test_ratchet_raises_floor },
        { "reload", test_reload },
        { "reload_etcd", test_reload_etcd },
        { "reloads_in_flight", test_reloads_in_flight },
        { NULL, NULL },
    };
    coord_msg_init(&m);
    return run_tests(argc, argv, tests);
}
