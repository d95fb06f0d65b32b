/* test_ids.c - tokens, flight ids and fences keep increasing across
 * restarts, across a data dir deleted while the broker was down, and past
 * ids of the earlier epoch << 32 format; all of them below 2^53. */
#include <lmdb.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <poll.h>
#include <time.h>
#include <unistd.h>
#include "harness.h"

#define T 5000
static struct broker_proc bp;
static coord_msg m;

static uint64_t token_of(struct rcl *c, uint64_t rid)
{
    if (rcl_acquire(c, rid, "t", 1, NULL, 0, 0) != 0 || rcl_reply(c, rid, T, &m) != 0)
        return 0;
    return msg_uint(&m, "token");
}

static uint64_t fence_of(struct rcl *c, uint64_t rid)
{
    coord_enc *e = rcl_begin(c, "flight.join", rid);
    coord_enc_kv_cstr(e, "key", "k");
    if (rcl_send(c) != 0 || rcl_reply(c, rid, T, &m) != 0)
        return 0;
    return msg_uint(&m, "fence");
}

static void rm_rf(const char *dir)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", dir);
}

static void test_wiped_data_dir(void)
{
    memset(&bp, 0, sizeof bp);
    REQUIRE(broker_start(&bp, NULL) == 0);
    struct rcl *c = connect_or_exit(&bp, NULL);
    uint64_t t1 = token_of(c, 1), f1 = fence_of(c, 2);
    rcl_close(c);
    REQUIRE(t1 && f1 && t1 != UINT64_MAX && f1 != UINT64_MAX);
    CHECK(t1 < (1ull << 53) && f1 < (1ull << 53));
    CHECK(broker_kill(&bp, SIGKILL) != -1);
    rm_rf(bp.data);                               /* the ledger is gone */
    /* the floor is the wall clock in seconds: the guarantee assumes no
     * more than one start per second, so the restart waits for the next */
    time_t started = time(NULL);
    while (time(NULL) == started)
        poll(NULL, 0, 20);
    REQUIRE(broker_start(&bp, NULL) == 0);
    c = connect_or_exit(&bp, NULL);
    uint64_t t2 = token_of(c, 1), f2 = fence_of(c, 2);
    rcl_close(c);
    fprintf(stderr, "before the wipe: token %llu fence %llu; after: token %llu fence %llu\n",
            (unsigned long long)t1, (unsigned long long)f1, (unsigned long long)t2,
            (unsigned long long)f2);
    CHECK(t2 > t1 && t2 > f1);
    CHECK(f2 > f1 && f2 > t1);
    CHECK(t2 < (1ull << 53) && f2 < (1ull << 53));
    stop_and_clean(&bp);
}

/* A ledger whose epoch was stored in the earlier format: every new id is
 * above the largest id that format could have issued. */
static void test_earlier_format(void)
{
    memset(&bp, 0, sizeof bp);
    broker_paths(&bp);
    REQUIRE(mkdir(bp.data, 0700) == 0);
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    REQUIRE(mdb_env_create(&env) == 0);
    mdb_env_set_maxdbs(env, 16);
    mdb_env_set_mapsize(env, 1u << 20);
    REQUIRE(mdb_env_open(env, bp.data, 0, 0600) == 0);
    REQUIRE(mdb_txn_begin(env, NULL, 0, &txn) == 0);
    REQUIRE(mdb_dbi_open(txn, "meta", MDB_CREATE, &dbi) == 0);
    const uint64_t old_epoch = 40000;             /* old ids up to 40001 << 32 */
    uint8_t be[8];
    for (int i = 0; i < 8; i++)
        be[i] = (uint8_t)(old_epoch >> (56 - 8 * i));
    MDB_val k = { 5, "epoch" }, v = { 8, be };
    REQUIRE(mdb_put(txn, dbi, &k, &v, 0) == 0);
    REQUIRE(mdb_txn_commit(txn) == 0);
    mdb_env_close(env);
    REQUIRE(broker_start(&bp, NULL) == 0);
    struct rcl *c = connect_or_exit(&bp, NULL);
    uint64_t t = token_of(c, 1), f = fence_of(c, 2);
    rcl_close(c);
    CHECK(t > ((old_epoch + 1) << 32));
    CHECK(f > ((old_epoch + 1) << 32));
    CHECK(t < (1ull << 53) && f < (1ull << 53));
    stop_and_clean(&bp);
}

int main(int argc, char **argv)
{
    coord_msg_init(&m);
    static const struct test_case tests[] = {
        { "wiped_data_dir", test_wiped_data_dir },
        { "earlier_format", test_earlier_format },
        { NULL, NULL },
    };
    int rc = run_tests(argc, argv, tests);
    coord_msg_destroy(&m);
    return rc;
}
