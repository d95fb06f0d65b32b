/* verify.c - the driver's own look at the broker's durable state, after
 * every broker restart and at the end:
 *   - leader.info: a workstream's stored generation is never below the
 *     newest one a client was granted (generations never go backwards);
 *   - leader.read of every key: the value names the commit attempt that
 *     wrote it (c<index> g<generation> o<op>); it must be an attempt that
 *     was not answered FENCED or duplicate, written by the generation the
 *     broker reports, and no commit acknowledged as applied that was sent
 *     after that attempt's reply may be missing (a lost durable write);
 *   - at the end (and after a last kill -9 of the broker): a new leader
 *     re-sends a sample of the operation ids; every one acknowledged as
 *     applied must come back duplicate:true with the generation that
 *     applied it. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "coord.h"
#include "fault.h"

#define RESEND_SAMPLE 150

coord_t *driver_connect(const char *name, uint64_t wait_ms)
{
    coord_options o;
    coord_options_init(&o);
    o.socket_path = CFG->socket_path;
    o.scope = SCOPE;
    o.client_name = name;
    o.no_autostart = true;
    uint64_t until = now_ns() + wait_ms * 1000000ull;
    for (;;) {
        coord_t *c = NULL;
        int rc = coord_connect(&c, &o);
        if (rc == 0)
            return c;
        if (!wait_ms)
            return NULL;
        if (now_ns() > until) {
            fprintf(stderr, "coord-fault: driver cannot connect: %s\n", coord_strerror(rc));
            return NULL;
        }
        sleep_ms(20);
    }
}

int verify_epoch(void)
{
    static uint64_t last;
    coord_t *c = driver_connect("fault-driver", 10000);
    if (!c)
        return -1;
    uint64_t e = coord_epoch(c);
    if (e <= last)
        VIOL(epoch, "broker epoch %" PRIu64 " after %" PRIu64, e, last);
    last = e;
    coord_close(c);
    return 0;
}

static void check_gens(coord_t *c, const char *when)
{
    for (unsigned ws = 0; ws < CFG->nws; ws++) {
        uint64_t m = atomic_load(&S->ws[ws].max_granted);
        coord_reply_t *r = NULL;
        int rc = coord_leader_info(c, ws_name(ws), strlen(ws_name(ws)), &r);
        if (rc < 0) {
            VIOL(unexpected, "%s: leader.info %s: %s", when, ws_name(ws), coord_strerror(rc));
            continue;
        }
        uint64_t g = 0;
        coord_map_uint(coord_reply_map(r), "generation", &g);
        coord_reply_free(r);
        /* a wiped ledger knows no generation until the next grant (which
         * record_grant checks against every earlier one); with the etcd
         * ledger, leader.info's generation is the one this broker last saw
         * (other machines' grants are etcd's) */
        if (CFG->etcd)
            continue;
        if (atomic_load(&S->ws[ws].max_granted_seq) < atomic_load(&S->wipe_seq))
            continue;
        if (g < m)
            VIOL(gen_backwards, "%s: %s stored generation %" PRIu64 " below granted %" PRIu64,
                 when, ws_name(ws), g, m);
    }
}

static void check_keys(coord_t *c, const char *when)
{
    for (unsigned ws = 0; ws < CFG->nws; ws++) {
        for (unsigned key = 0; key < NKEYS; key++) {
            uint64_t m = atomic_load(&S->ws[ws].key_applied_seq[key]);
            if (m < atomic_load(&S->wipe_seq))
                m = 0;                  /* written before the last wipe: gone */
            void *val = NULL;
            size_t len = 0;
            uint64_t rgen = 0;
            int rc = coord_leader_read(c, ws_name(ws), strlen(ws_name(ws)), key_name(key),
                                       &val, &len, &rgen);
            if (rc == COORD_ENOT_FOUND) {
                if (m)
                    VIOL(lost_write, "%s: %s/%s not found, yet a commit to it was applied",
                         when, ws_name(ws), key_name(key));
                continue;
            }
            if (rc < 0) {
                VIOL(unexpected, "%s: leader.read %s/%s: %s", when, ws_name(ws),
                     key_name(key), coord_strerror(rc));
                continue;
            }
            /* clients go on meanwhile: an attempt's index is taken before it
             * is sent, so one read here is below the count read after it */
            uint64_t ncrec = atomic_load(&S->ncrec);
            uint64_t idx = 0, g = 0, op = 0;
            if (sscanf(val, "c%" SCNu64 " g%" SCNu64 " o%" SCNu64, &idx, &g, &op) != 3 ||
                idx >= ncrec || idx >= CREC_CAP) {
                VIOL(lost_write, "%s: %s/%s holds \"%.60s\"", when, ws_name(ws),
                     key_name(key), (char *)val);
                free(val);
                continue;
            }
            free(val);
            struct crec *cr = &CREC[idx];
            uint32_t out = atomic_load(&cr->outcome);
            uint64_t seq_r = atomic_load(&cr->seq_r);
            if (cr->ws != ws || cr->key != key || cr->gen != g || cr->op != op)
                VIOL(lost_write, "%s: %s/%s holds attempt c%" PRIu64 " of another key or "
                     "generation", when, ws_name(ws), key_name(key), idx);
            if (rgen != g)
                VIOL(lost_write, "%s: %s/%s value of generation %" PRIu64
                     " read as generation %" PRIu64, when, ws_name(ws), key_name(key), g, rgen);
            if (out == OUT_FENCED || out == OUT_DUPLICATE)
                VIOL(lost_write, "%s: %s/%s holds attempt c%" PRIu64 " (generation %" PRIu64
                     ") that was answered %s", when, ws_name(ws), key_name(key), idx, g,
                     out == OUT_FENCED ? "FENCED" : "duplicate");
            if (seq_r && m > seq_r)
                VIOL(lost_write, "%s: %s/%s holds attempt c%" PRIu64 " (generation %" PRIu64
                     ") but a later commit to it was acknowledged as applied", when,
                     ws_name(ws), key_name(key), idx, g);
        }
    }
}

static void resend_ops(coord_t *c, const char *when, uint64_t seed)
{
    struct rng r = { seed | 1 };
    uint64_t nops = atomic_load(&S->next_op);
    if (nops > OPS_CAP)
        nops = OPS_CAP;
    for (unsigned ws = 0; ws < CFG->nws; ws++) {
        coord_leader_opts lo = { .lease_ms = 120000, .timeout_ms = 10000 };
        uint64_t m0 = atomic_load(&S->ws[ws].max_granted), gen = 0;
        bool granted = false;
        int rc = coord_leader_campaign(c, ws_name(ws), strlen(ws_name(ws)), &lo, &gen, &granted);
        if (rc < 0 || !granted) {
            VIOL(unexpected, "%s: driver campaign on %s: %s", when, ws_name(ws),
                 rc < 0 ? coord_strerror(rc) : "not granted");
            continue;
        }
        if (gen <= m0)
            VIOL(gen_backwards, "%s: driver granted %s generation %" PRIu64 " after %" PRIu64,
                 when, ws_name(ws), gen, m0);
        atomic_max_u64(&S->ws[ws].max_granted, gen);
        /* sample: every op of ws, kept with probability ~ RESEND_SAMPLE/n */
        uint64_t n_applied = 0, n_other = 0;
        for (uint64_t op = 1; op < nops; op++) {
            if (atomic_load(&OPS[op].ws) != ws + 1 || !atomic_load(&OPS[op].attempts) ||
                atomic_load(&OPS[op].epoch) != atomic_load(&S->wipes) + 1)
                continue;
            if (atomic_load(&OPS[op].applied))
                n_applied++;
            else
                n_other++;
        }
        unsigned dup_ok = 0, applied_now = 0;
        for (uint64_t op = 1; op < nops; op++) {
            struct oprec *o = &OPS[op];
            if (atomic_load(&o->ws) != ws + 1 || !atomic_load(&o->attempts) ||
                atomic_load(&o->epoch) != atomic_load(&S->wipes) + 1)
                continue;
            bool was = atomic_load(&o->applied) != 0;
            uint64_t n = was ? n_applied : n_other;
            if (n > RESEND_SAMPLE && rng_below(&r, n) >= RESEND_SAMPLE)
                continue;
            char opid[32];
            snprintf(opid, sizeof opid, "o%" PRIu64, op);
            coord_commit_result res;
            rc = coord_leader_commit(c, ws_name(ws), strlen(ws_name(ws)), gen, opid,
                                     key_name(NKEYS), "verify", 6, &res);
            if (rc < 0) {
                VIOL(unexpected, "%s: driver re-send of %s on %s: %s", when, opid,
                     ws_name(ws), coord_strerror(rc));
                break;
            }
            uint64_t ag = atomic_load(&o->applied_gen), fg = atomic_load(&o->first_gen);
            if (res.applied) {
                if (was)
                    VIOL(op_twice, "%s: op %s (applied by generation %" PRIu64
                         ") applied again by the driver's generation %" PRIu64,
                         when, opid, ag, gen);
                atomic_fetch_add(&o->applied, 1);
                atomic_store(&o->applied_gen, gen);
                applied_now++;
            } else if (res.duplicate) {
                if ((was && res.generation != ag) || res.generation < fg ||
                    res.generation >= gen)
                    VIOL(dup_wrong, "%s: op %s duplicate with generation %" PRIu64
                         " (applied by %" PRIu64 ", first sent by %" PRIu64 ")",
                         when, opid, res.generation, ag, fg);
                dup_ok++;
            }
        }
        if (CFG->verbose)
            fprintf(stderr, "coord-fault: %s: %s re-sent ops: %u duplicate, %u applied now "
                    "(of %" PRIu64 " applied, %" PRIu64 " not)\n", when, ws_name(ws),
                    dup_ok, applied_now, n_applied, n_other);
        rc = coord_leader_resign(c, ws_name(ws), strlen(ws_name(ws)), gen);
        if (rc < 0)
            VIOL(unexpected, "%s: driver resign %s: %s", when, ws_name(ws), coord_strerror(rc));
    }
}

int verify_state(const char *when, bool resend)
{
    coord_t *c = driver_connect("fault-driver", 10000);
    if (!c)
        return -1;
    check_gens(c, when);
    check_keys(c, when);
    if (resend)
        resend_ops(c, when, CFG->seed ^ now_ns());
    coord_close(c);
    return 0;
}
