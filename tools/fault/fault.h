/* fault.h - coord-fault, the fault-suite driver of the brief's fault gate.
 *
 * One driver process starts its own coordd in a temp dir, forks client
 * processes (each with its own libcoord connection) that run randomized
 * leader rounds, lock holders/waiters and single-flight owners/followers,
 * and injects faults: SIGKILL of leaders, holders, waiters, owners and
 * followers (respawned), SIGSTOP of a leader past its lease then SIGCONT,
 * steals while a holder's work is in flight, and SIGKILL + restart of the
 * broker.
 *
 * Everybody records what it saw in one shared-memory table (mmap
 * MAP_SHARED before the first fork, C11 atomics); the invariants are
 * checked online by the process that observes an outcome, and afterwards by
 * the driver through leader.read / leader.info / re-sent operation ids.
 *
 * Ordering: one global atomic sequence counter stands for "happened
 * before".  A value taken before a request is sent and a value taken after
 * its reply arrived bracket the moment the broker handled it; a check only
 * fires when the brackets of two outcomes cannot overlap, so a violation
 * is never a scheduling artefact. */
#ifndef COORD_FAULT_H
#define COORD_FAULT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define MAX_WS 8            /* workstreams */
#define NKEYS 6             /* keys committed per workstream */
#define MAX_LOCKS 8         /* nlocks per machine (broker) */
#define MAX_FKEYS 8
#define MAX_SLOTS 64        /* clients + short-lived stealers */
#define OPS_RING 64         /* recent op ids of a workstream, for re-sending */
#define FENCED_RING 64
#define MAX_VMSG 64         /* violation messages kept */
#define VMSG_LEN 400

#define SCOPE "fault"
#define MAX_BROKERS 4

/* the outbox workstreams ("outbox-0" has a max hold and
 * steal: incident-only, takes incident takeovers; "outbox-1" has its
 * rollout mode switched shadow -> read-only -> active), their logical
 * operations and the provider that performs their external effects */
#define NOB 2
#define OB_UNSETTLED 256    /* unsettled claims tracked per outbox workstream */
#define OB_MAX_HOLD_MS 300
#define OB_RING 64          /* recently committed logical ops (re-driven) */
#define PROTO_NAME "fault"

/* client-side deadline of every blocking call; broker-side timeouts are at
 * most BROKER_WAIT_MS */
#define BROKER_WAIT_MS 5000
#define CLIENT_DEADLINE_MS 20000
#define RECONNECT_DEADLINE_MS 15000

enum role {
    ROLE_NONE = 0,
    ROLE_LEADER,
    ROLE_LOCK,
    ROLE_FLIGHT,
    ROLE_STEAL_LOCK,        /* one-shot: steal a held lock, work, release */
    ROLE_STEAL_LEADER,      /* one-shot: steal a workstream, commit, resign */
    ROLE_OUTBOX,            /* outbox leader: claim, effect, commit (outbox.c) */
    ROLE_INCIDENT,          /* one-shot: incident takeover of a disabled outbox-0 */
    ROLE_ROLLBACK,          /* one-shot: campaign with the version before the newest */
};

enum slot_state {
    ST_FREE = 0,
    ST_STARTING,
    ST_CONNECTING,
    ST_IDLE,
    ST_CAMPAIGNING,
    ST_LEADING,
    ST_LOCK_WAITING,
    ST_LOCK_HOLDING,
    ST_FLIGHT_JOINING,      /* waiting for the role: a follower, unless owner at once */
    ST_FLIGHT_OWNER,
    ST_STEALING,
    ST_CLAIMED,             /* outbox: claim acknowledged, effect not performed */
    ST_EFFECTED,            /* outbox: effect performed, commit not sent */
};

struct slot {
    _Atomic int32_t pid;
    _Atomic int32_t role;
    _Atomic int32_t state;
    _Atomic int32_t target;         /* workstream / lock / flight key index */
    _Atomic uint64_t gen;           /* generation / token / fence in that state */
    _Atomic uint64_t lease_ms;
    _Atomic int32_t default_lease;  /* leading with the broker's default lease */
    /* the blocking call in progress (client-side deadline) */
    _Atomic uint64_t block_start_ns;
    _Atomic uint64_t block_deadline_ns;     /* 0: not blocked */
    _Atomic int32_t block_what;
    /* SIGSTOP bookkeeping, written by the driver */
    _Atomic int32_t stopped;
    _Atomic uint64_t last_cont_ns;
    _Atomic uint64_t stop_gen;      /* generation whose lease passed while stopped */
    _Atomic int32_t stop_ws;        /* ... of this workstream */
    _Atomic uint64_t cont_seq;      /* sequence value taken just before SIGCONT */
    uint32_t arg;                   /* stealers: which workstream/lock */
    uint64_t seed;
    uint64_t spawned_ns;
};

struct wsinfo {
    _Atomic uint64_t max_granted;       /* newest generation a grantee recorded */
    _Atomic uint64_t max_granted_seq;   /* sequence after that grant's reply */
    _Atomic uint64_t max_applied_gen;   /* newest generation of an applied commit */
    _Atomic uint64_t grants;
    _Atomic uint64_t kill_ns;           /* a leader was SIGKILLed then (0: none pending) */
    _Atomic uint64_t kill_gen;          /* ... while it led this generation */
    _Atomic uint32_t kill_waiters;      /* campaigners on the workstream then */
    _Atomic uint32_t kill_kind;         /* enum tkind of the pending transition */
    _Atomic uint64_t key_applied_seq[NKEYS];   /* max send-seq of an applied commit */
    _Atomic uint64_t ops[OPS_RING];     /* recent op numbers (for re-sends) */
    _Atomic uint32_t ops_pos;
};

struct lockinfo {
    _Atomic uint64_t max_token;     /* newest token a holder recorded */
    _Atomic uint64_t resource;      /* the fenced resource: highest token written */
};

/* The flight clients run two versions of their code (FLIGHT_VERSIONS):
 * a key may have one running flight per version at once (a joiner that
 * wants its own version runs one beside the other's), each with its own
 * fences, so the newest fence is kept per version of the flight. */
#define FLIGHT_VERSIONS 2

struct fkinfo {
    _Atomic uint64_t max_fence[FLIGHT_VERSIONS];
    _Atomic uint64_t fenced[FENCED_RING];  /* fences whose complete was refused */
    _Atomic uint32_t fenced_pos;
    _Atomic uint64_t done[FENCED_RING];    /* flights whose outcome was accepted */
    _Atomic uint32_t done_pos;
};

enum outcome {
    OUT_PENDING = 0,        /* sent, no reply (yet): unknown */
    OUT_APPLIED,
    OUT_DUPLICATE,
    OUT_FENCED,
    OUT_LOST,               /* the connection went away first: unknown */
    OUT_ERROR,
};

/* one commit attempt */
struct crec {
    uint64_t op;
    uint64_t gen;
    uint64_t seq_s;
    _Atomic uint64_t seq_r;
    _Atomic uint32_t outcome;
    uint16_t ws, key;
    int32_t pid;
};

/* one operation id */
struct oprec {
    _Atomic uint32_t applied;       /* applied:true answers seen */
    _Atomic uint32_t attempts;
    _Atomic uint64_t applied_gen;
    _Atomic uint64_t first_gen;     /* generation of the first attempt */
    _Atomic uint64_t dup_seq;       /* sequence at the first duplicate answer */
    _Atomic uint32_t ws;            /* workstream + 1 */
    _Atomic uint32_t epoch;         /* wipes + 1 when first used */
};

/* one logical outbox operation (op id "L<n>") */
struct lop {
    _Atomic uint32_t ws;            /* outbox workstream + 1 */
    _Atomic uint32_t epoch;         /* wipes + 1 when created */
    _Atomic uint64_t claim_gen;     /* newest generation whose claim was acknowledged */
    _Atomic uint64_t claim_seq;     /* sequence after that reply */
    _Atomic uint32_t claim_epoch;   /* wipes + 1 before that claim was sent */
    _Atomic uint64_t settle_seq;    /* sequence before the first commit/abandon sent */
    _Atomic uint32_t committed;     /* a commit answered applied */
    _Atomic uint32_t abandoned;     /* an abandon answered {} */
    _Atomic uint32_t effects;       /* real effects the provider performed */
    _Atomic uint64_t effect_gen;    /* ... the first one with this generation */
};

struct obinfo {
    _Atomic uint64_t max_granted, max_granted_seq;
    /* The policy the checks rely on is the descriptor file's (outbox.c):
     * a flag that makes a check stricter is set once the broker.reload
     * that applied the file was answered, one that relaxes it is cleared
     * before the file is written.  A wipe clears none of them: every
     * broker start reads the files before its first client. */
    _Atomic uint64_t ep_version;    /* wipes << 32 | newest protocol version granted
                                       since that many wipes (the ratchet: ledger state) */
    _Atomic uint32_t floor;         /* the file's protocol version, in force */
    _Atomic uint32_t deployed;      /* the version clients campaign with */
    _Atomic uint32_t ro;            /* a shadow/read-only file in force, active not written */
    _Atomic uint32_t mode;          /* 0 active, 1 read-only, 2 shadow (driver's) */
    _Atomic uint32_t disabled;      /* a disabled file in force, enabled not written */
    _Atomic uint32_t defined;       /* its first file is in force (never cleared) */
    _Atomic uint32_t enable_asked;  /* the incident client is done: the driver enables */
    _Atomic uint64_t disabled_ns;
    _Atomic uint64_t unsettled[OB_UNSETTLED];  /* logical ops claimed, not settled */
    _Atomic uint64_t ring[OB_RING];             /* committed ones */
    _Atomic uint32_t ring_pos;
    _Atomic uint64_t terms, drained, overheld;
    _Atomic uint64_t bg_overheld;   /* terms accepted past max hold + a lease */
    _Atomic uint64_t provider_max_gen;          /* the provider's fence (provider.c) */
};

/* counters: X(name, text) */
#define FAULT_COUNTERS(X)                                                      \
    X(campaigns, "campaigns sent")                                             \
    X(grants, "leader grants (rounds)")                                        \
    X(campaign_busy, "campaigns not granted (if_available)")                   \
    X(campaign_timeout, "campaigns TIMEOUT (broker-side)")                     \
    X(campaign_aborted, "campaigns ABORTED (stolen while granting)")           \
    X(leader_steals, "leader steals (campaign steal)")                         \
    X(commits_sent, "commits sent")                                            \
    X(commits_applied, "commits applied")                                      \
    X(commits_duplicate, "commits duplicate")                                  \
    X(commits_fenced, "commits FENCED")                                        \
    X(commits_lost, "commits with unknown outcome (connection lost)")         \
    X(resend_same_gen, "op ids re-sent by the same generation")                \
    X(resend_later_gen, "op ids re-sent by a later generation")                \
    X(renews_ok, "renews ok")                                                  \
    X(renews_fenced, "renews FENCED")                                          \
    X(resigns_ok, "resigns ok")                                                \
    X(resigns_fenced, "resigns FENCED")                                        \
    X(lapses, "leases left to lapse on purpose")                               \
    X(leader_exits, "leaders that exited while leading")                       \
    X(leader_drops, "leaders that closed their connection while leading")      \
    X(lost_expired, "leader.lost expired")                                     \
    X(lost_stolen, "leader.lost stolen")                                       \
    X(lost_other, "leader.lost other reason")                                  \
    X(stopped_fenced, "stopped leaders FENCED after SIGCONT")                  \
    X(lock_grants, "lock grants")                                              \
    X(lock_busy, "lock if_available refused")                                  \
    X(lock_timeout, "lock TIMEOUT (broker-side)")                              \
    X(lock_steals, "lock steals")                                              \
    X(lock_lost_stolen, "lock.lost stolen")                                    \
    X(lock_lost_expired, "lock.lost expired")                                  \
    X(lock_release_ok, "lock releases ok")                                     \
    X(lock_release_unknown, "lock releases UNKNOWN_LOCK (lost before)")        \
    X(resource_fenced, "fenced-resource writes refused (stale token)")         \
    X(flight_owner, "flight owners")                                           \
    X(flight_promoted, "flight owners after waiting (promoted)")               \
    X(flight_result, "flight results received")                                \
    X(flight_record, "flight results from a record")                           \
    X(flight_failed, "flight failures received")                               \
    X(flight_timeout, "flight TIMEOUT (broker-side)")                          \
    X(flight_complete_ok, "flight completes/fails accepted")                   \
    X(flight_complete_fenced, "flight completes/fails FENCED")                 \
    X(flight_overruns, "flight owners overrunning their ttl on purpose")      \
    X(flight_abort_ev, "flight.abort events")                                  \
    X(flight_supersedes, "flight joins that superseded a running owner")       \
    X(flight_superseded_ev, "flight.abort superseded events")                  \
    X(flight_version_owner, "flight owners of a flight of the other version")  \
    X(reconnects, "reconnects")                                                \
    X(connect_retries, "connect attempts refused (broker down)")               \
    X(conn_lost, "calls that found the connection closed")                     \
    X(kill_leader, "SIGKILL leader")                                           \
    X(kill_campaigner, "SIGKILL campaigner")                                   \
    X(kill_holder, "SIGKILL lock holder")                                      \
    X(kill_waiter, "SIGKILL lock waiter")                                      \
    X(kill_owner, "SIGKILL flight owner")                                      \
    X(kill_follower, "SIGKILL flight follower/joiner")                         \
    X(kill_any, "SIGKILL any client")                                          \
    X(stops, "SIGSTOP leader past its lease + SIGCONT")                        \
    X(steal_lock_inj, "injected lock steals (holder working)")                 \
    X(steal_leader_inj, "injected leader steals")                              \
    X(broker_kills, "broker SIGKILL + restart")                                \
    X(respawns, "client respawns")                                             \
    X(transitions_dropped, "transitions not timed (broker restart, etcd outage)") \
    X(wipes, "broker SIGKILL + data dir wiped + restart")                      \
    X(ob_campaigns, "outbox campaigns sent")                                   \
    X(ob_grants, "outbox grants")                                              \
    X(ob_pinned, "outbox campaigns PROTOCOL_PINNED")                           \
    X(rollouts, "protocol rollouts (deployed version raised)")                 \
    X(floor_raises, "descriptor files' protocol floor raised to the deployed one") \
    X(reloads, "descriptor files applied (broker.reload answered)")            \
    X(reloads_unstored, "broker.reload answered: a file not stored (ledger out of reach)") \
    X(ob_rollbacks, "rollback campaigns (an older version)")                   \
    X(ob_rollback_refused, "rollback campaigns refused PROTOCOL_PINNED")       \
    X(ob_policy, "steals refused POLICY")                                      \
    X(ob_disabled, "outbox campaigns DISABLED")                                \
    X(incidents, "incident takeovers started (disable + incident campaign)")   \
    X(incident_grants, "incident campaigns granted")                           \
    X(ob_pending_reads, "leader.pending reads at term start")                  \
    X(ob_pending_entries, "pending entries reconciled")                        \
    X(ob_claims, "claims answered claimed")                                    \
    X(ob_reconciles, "claims answered reconcile")                              \
    X(ob_claim_applied, "claims answered applied")                             \
    X(ob_claim_abandoned, "claims answered abandoned")                         \
    X(ob_redrives, "committed ops claimed again (re-driven)")                  \
    X(ob_effects, "provider effects performed")                                \
    X(ob_effects_stale, "provider effects refused (stale generation)")         \
    X(ob_status_applied, "reconciles finding the effect done")                 \
    X(ob_commits, "outbox commits applied")                                    \
    X(ob_abandons, "outbox abandons")                                          \
    X(ob_fenced, "outbox writes FENCED")                                       \
    X(ob_read_only, "outbox writes READ_ONLY")                                 \
    X(ob_draining, "outbox claims DRAINING")                                   \
    X(mode_switches, "rollout mode switches")                                  \
    X(ob_mode_events, "leader.mode events")                                    \
    X(ob_terms_hold, "terms on the max-hold workstream")                       \
    X(ob_drains, "leader.drain max_hold events")                               \
    X(ob_drains_obeyed, "drains answered by resigning")                        \
    X(ob_drains_ignored, "drains ignored (the leader works on)")               \
    X(ob_lost_max_hold, "leader.lost max_hold")                                \
    X(kill_claimed, "SIGKILL leader between claim and effect")                 \
    X(kill_effected, "SIGKILL leader between effect and commit")               \
    X(stop_claimed, "SIGSTOP leader between claim and commit")                \
    X(ob_bg_over_nodrain, "terms past max hold + a lease without a drain (nobody waited)") \
    X(etcd_stops, "etcd outages: SIGSTOP etcd, SIGCONT later")                 \
    X(etcd_kills, "etcd outages: SIGKILL etcd, restart later")                 \
    X(etcd_unavailable, "calls answered UNAVAILABLE (etcd out of reach)")      \
    X(outage_calls, "commits/campaigns sent and answered inside one outage")

/* violations: X(name, text) */
#define FAULT_VIOLATIONS(X)                                                    \
    X(two_live, "two live generations (accepted out of generation order)")     \
    X(stale_commit, "commit accepted from a stale generation")                 \
    X(op_twice, "operation id applied more than once")                         \
    X(dup_wrong, "duplicate answer with a wrong generation")                   \
    X(gen_backwards, "generation went backwards / reissued")                   \
    X(stop_not_fenced, "stopped leader not fenced after its lease")            \
    X(lapse_not_fenced, "lapsed lease not fenced")                             \
    X(lost_missing, "FENCED without a leader.lost/lock.lost event")            \
    X(stuck, "blocking call past its client-side deadline")                    \
    X(lock_exclusion, "two exclusive holders at once")                         \
    X(token_backwards, "lock token/flight fence not increasing")               \
    X(flight_stale, "flight outcome accepted from a stale owner")              \
    X(flight_result, "flight result inconsistent")                             \
    X(flight_twice, "two outcomes accepted for one flight")                    \
    X(lost_write, "acknowledged commit lost or rejected one stored")           \
    X(epoch, "broker epoch did not increase")                                  \
    X(transition_p99, "leader transition p99 >= 2 s (any fault kind)")         \
    X(untimed, "a fault kind with no timed transition in a full run")          \
    X(broker_crash, "broker died or failed on its own")                        \
    X(client_crash, "client process crashed")                                  \
    X(stale_write, "outbox claim/commit/abandon accepted from a stale generation") \
    X(mode_write, "claim/commit/abandon accepted in shadow or read-only mode")  \
    X(effect_twice, "an operation's real effect performed twice (provider)")   \
    X(unowned_op, "claimed, unsettled op missing from the next leader's pending") \
    X(old_protocol, "older-protocol leader granted after a newer one")        \
    X(disabled_grant, "non-incident campaign granted on a disabled workstream") \
    X(policy_steal, "steal granted against the steal policy")                 \
    X(max_hold, "terms past max hold without being fenced (>= 0.1%)")         \
    X(background_hold, "background holders past max hold + one lease (>= 0.1%)") \
    X(fail_open, "critical write/grant acknowledged while its ledger was down") \
    X(unexpected, "unexpected error code")

struct counters {
#define X(n, t) _Atomic uint64_t n;
    FAULT_COUNTERS(X)
#undef X
};

struct violations {
#define X(n, t) _Atomic uint64_t n;
    FAULT_VIOLATIONS(X)
#undef X
};

struct shared {
    _Atomic uint64_t seq;
    _Atomic uint64_t next_op;
    _Atomic uint64_t ncrec;
    _Atomic uint32_t end;           /* the driver is finishing: clients stop */
    struct counters c;
    struct violations v;
    _Atomic uint32_t nvmsg;
    char vmsg[MAX_VMSG][VMSG_LEN];
    _Atomic uint64_t ntrans;
    /* --etcd: a broker SIGKILLed while a client of its machine led ws: the
     * next grant (on another machine, once etcd let the lease go) */
    _Atomic uint64_t bkill_ns[MAX_WS], bkill_gen[MAX_WS];
#define BTRANS_CAP 4096
    _Atomic uint32_t btrans[BTRANS_CAP];    /* milliseconds */
    _Atomic uint64_t nbtrans;
    struct slot slots[MAX_SLOTS];
    struct wsinfo ws[MAX_WS];
    struct lockinfo locks[MAX_LOCKS];
    struct fkinfo fkeys[MAX_FKEYS];
    struct obinfo ob[NOB];
    _Atomic uint64_t next_lop;
    /* --etcd: odd while an injected etcd outage is on (raised once etcd is
     * stopped or dead, raised again before it runs again): a call sent
     * and answered under one odd value was handled while etcd could not
     * answer anything */
    _Atomic uint64_t etcd_outage;
    _Atomic uint32_t wipes;         /* data dir wipes so far */
    _Atomic uint64_t wipe_seq;      /* sequence taken at the last wipe */
};

struct config {
    uint64_t rounds;        /* stop after this many grants (0: no limit) */
    unsigned seconds;       /* stop after this long (0: no limit) */
    unsigned clients;
    uint64_t seed;
    const char *broker;
    bool broker_kill;
    unsigned nws, nlocks, nfkeys;
    unsigned fault_ms;      /* mean interval between client faults */
    unsigned broker_kill_min_ms, broker_kill_max_ms;
    bool keep;              /* keep the temp dir */
    unsigned wipe_pct;      /* broker kills that also wipe the data dir */
    bool outbox;            /* run the outbox roles and their faults */
    const char *expect;     /* --expect-violation NAME: pass iff it is seen */
    /* --expect-violation transition_p99 (a broken default lease): no
     * steals, the random ones of the clients' campaigns included, so that
     * a frozen or lapsed leader is succeeded only once its lease ran out
     * (a steal within 2 s hid it: CI once saw one freeze in 60 s, stolen
     * from at 401 ms, and no violation) */
    bool no_steals;
    bool etcd;              /* --etcd N: N brokers sharing an etcd leader ledger */
    unsigned nbrokers;
    bool verbose;
    char tmpdir[256];
    char socket_path[300];
    char data_dir[300];
    char config_dir[300];   /* --config-dir of every broker: the descriptor files */
};

/* shared state (set up by shm_init before any fork) */
extern struct shared *S;
/* outbox terms that ignore a max-hold drain and work on until fenced, in
 * percent (--ignore-drain-pct; set before the clients are forked) */
extern unsigned OB_IGNORE_DRAIN_PCT;
extern struct crec *CREC;
extern uint64_t CREC_CAP;
extern struct oprec *OPS;
extern uint64_t OPS_CAP;
extern struct lop *LOPS;
extern uint64_t LOPS_CAP;
/* Leader transitions, timed from the fault to the next grant of a later
 * generation, one kind per fault of the design note's list: the leader
 * SIGKILLed, frozen (SIGSTOP; its lease must run out), stolen from, or its
 * lease left to lapse (freeze and lapse only on terms with the broker's
 * default lease, so that their figures are the default's). */
enum tkind { TK_KILL, TK_FREEZE, TK_STEAL, TK_LAPSE, TK_COUNT };
extern const char *const tkind_name[TK_COUNT];
#define TRANSITION_GATE_MS 2000     /* note 000: leader-transition p99 below 2 s */
extern _Atomic uint32_t *TRANS;     /* samples: microseconds (low 29 bits), the
                                       kind (bits 29-30), the top bit set when
                                       nobody was campaigning */
#define TRANS_NO_WAITER 0x80000000u
#define TRANS_KIND_SHIFT 29
#define TRANS_US_MASK ((1u << TRANS_KIND_SHIFT) - 1)
/* a transition of ws starts now: the leader of gen was killed, frozen,
 * stolen from or let its lease lapse (a pending one younger than 5 s is
 * kept); the next grant of a later generation ends it (record_grant) */
void trans_begin(unsigned ws, uint64_t gen, int kind, uint32_t waiters);
/* campaigners (not stopped) on ws other than slot self */
uint32_t trans_waiters(unsigned ws, int self);
extern uint64_t TRANS_CAP;
extern const struct config *CFG;

int shm_init(uint64_t rounds);

/* util */
uint64_t now_ns(void);
void sleep_ms(uint64_t ms);
void sleep_ns(uint64_t ns);
uint64_t seq_next(void);
void atomic_max_u64(_Atomic uint64_t *p, uint64_t v);
#define CNT(name) atomic_fetch_add(&S->c.name, 1)
/* records a violation (counter + first messages) and prints it */
void violation(_Atomic uint64_t *counter, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
#define VIOL(name, ...) violation(&S->v.name, __VA_ARGS__)

struct rng {
    uint64_t s;
};
uint64_t rng_next(struct rng *r);
uint64_t rng_below(struct rng *r, uint64_t n);          /* [0, n) */
uint64_t rng_range(struct rng *r, uint64_t lo, uint64_t hi);   /* [lo, hi] */
bool rng_pct(struct rng *r, unsigned pct);

const char *ws_name(unsigned i);
const char *key_name(unsigned i);
const char *lock_name(unsigned i);
const char *fkey_name(unsigned i);

/* client.c: the body of a forked client; never returns */
void client_main(int slot) __attribute__((noreturn));

/* broker.c: broker i of CFG->nbrokers (one, or one per "machine" with
 * --etcd), and the etcd they share */
int broker_start(unsigned i);
void broker_kill(unsigned i);       /* SIGKILL + reap */
int broker_stop(unsigned i);        /* SIGTERM; 0 when it exited 0 */
pid_t broker_pid(unsigned i);
int broker_of_pid(pid_t pid);       /* its index, or -1 */
void broker_reaped(unsigned i);     /* it died and was reaped by someone else */
void broker_log_tail(unsigned i);
const char *broker_socket(unsigned i);  /* i modulo nbrokers */
const char *broker_data_dir(unsigned i);
int etcd_begin(void);               /* --etcd: start it; 0 or -1 */
void etcd_outage_begin(bool kill);  /* SIGSTOP (or SIGKILL) etcd */
int etcd_outage_end(void);          /* SIGCONT (or restart) it; 0 or -1 */
bool etcd_outage_on(void);
void etcd_end(void);

/* provider.c: the external system the outbox leaders act on.  A process
 * of its own (forked by the driver) on a Unix socket: APPLY performs an
 * op's effect (counted in LOPS, twice is a violation) unless a newer
 * generation of its workstream was seen (the receiver's fence), STATUS
 * says whether it was performed (and records the generation). */
enum { P_APPLY = 1, P_STATUS = 2 };
enum { P_DONE = 1, P_NOT_DONE = 2, P_STALE = 3 };
int provider_start(void);
void provider_stop(void);
pid_t provider_pid(void);
/* one request from a client; 0 and *answer, or -1 (provider gone) */
int provider_call(int *fd, int type, unsigned ws, uint64_t op, uint64_t gen, int *answer);
const char *ob_name(unsigned i);

/* driver side of the outbox workstreams (outbox.c): their descriptors are
 * files in CFG->config_dir, applied with broker.reload */
int ob_config_init(void);           /* after the first start: the first files */
void ob_tick(void);                 /* a file whose reload went unanswered: again */
void ob_switch_mode(unsigned ws);   /* shadow -> read-only -> active */
void ob_rollout(unsigned ws, bool can_reload);  /* deployed version, or the file's floor */
int ob_disable(unsigned ws, bool disable);

/* verify.c: the driver's checks through its own connection (to broker 0,
 * trying for up to wait_ms; NULL when it cannot) */
struct coord;
struct coord *driver_connect(const char *name, uint64_t wait_ms);
int verify_state(const char *when, bool resend_ops);
int verify_epoch(void);

#endif
