/* util.c - the shared-memory table, time, randomness, violation reports. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include "fault.h"

struct shared *S;
struct crec *CREC;
uint64_t CREC_CAP;
struct oprec *OPS;
uint64_t OPS_CAP;
struct lop *LOPS;
uint64_t LOPS_CAP;
_Atomic uint32_t *TRANS;
uint64_t TRANS_CAP;
const char *const tkind_name[TK_COUNT] = { "kill", "freeze", "steal", "lapse" };
const struct config *CFG;

static void *shm_alloc(size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        fprintf(stderr, "coord-fault: mmap %zu bytes: %s\n", bytes, strerror(errno));
        return NULL;
    }
    return p;
}

int shm_init(uint64_t rounds)
{
    /* a round commits at most a handful of times; pages are touched only
     * when used, so a generous capacity costs nothing */
    uint64_t r = rounds ? rounds : 1000000;
    if (r < 20000)
        r = 20000;
    CREC_CAP = r * 12;
    OPS_CAP = r * 12;
    LOPS_CAP = r * 12;
    TRANS_CAP = 1u << 20;
    S = shm_alloc(sizeof *S);
    CREC = shm_alloc(CREC_CAP * sizeof *CREC);
    OPS = shm_alloc(OPS_CAP * sizeof *OPS);
    TRANS = shm_alloc(TRANS_CAP * sizeof *TRANS);
    LOPS = shm_alloc(LOPS_CAP * sizeof *LOPS);
    if (!S || !CREC || !OPS || !TRANS || !LOPS)
        return -1;
    /* op 0 is never used: an empty ring entry */
    atomic_store(&S->next_op, 1);
    atomic_store(&S->next_lop, 1);
    for (unsigned i = 0; i < NOB; i++)
        atomic_store(&S->ob[i].deployed, 1);
    atomic_store(&S->seq, 1);
    return 0;
}

uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void sleep_ns(uint64_t ns)
{
    struct timespec ts = { (time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull) };
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

void sleep_ms(uint64_t ms)
{
    sleep_ns(ms * 1000000ull);
}

uint64_t seq_next(void)
{
    return atomic_fetch_add(&S->seq, 1);
}

void atomic_max_u64(_Atomic uint64_t *p, uint64_t v)
{
    uint64_t cur = atomic_load(p);
    while (cur < v && !atomic_compare_exchange_weak(p, &cur, v))
        ;
}

void violation(_Atomic uint64_t *counter, const char *fmt, ...)
{
    atomic_fetch_add(counter, 1);
    char buf[VMSG_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    uint32_t i = atomic_fetch_add(&S->nvmsg, 1);
    if (i < MAX_VMSG) {
        char *m = S->vmsg[i];
        int n = snprintf(m, VMSG_LEN, "[pid %d] ", (int)getpid());
        if (n > 0 && n < VMSG_LEN)
            memcpy(m + n, buf, strnlen(buf, (size_t)(VMSG_LEN - n - 1)) + 1);
        m[VMSG_LEN - 1] = '\0';
    }
    fprintf(stderr, "coord-fault: VIOLATION [pid %d] %s\n", (int)getpid(), buf);
}

uint64_t rng_next(struct rng *r)
{
    /* xorshift64* */
    uint64_t x = r->s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    r->s = x;
    return x * 0x2545F4914F6CDD1Dull;
}

uint64_t rng_below(struct rng *r, uint64_t n)
{
    return n ? rng_next(r) % n : 0;
}

uint64_t rng_range(struct rng *r, uint64_t lo, uint64_t hi)
{
    return lo + rng_below(r, hi - lo + 1);
}

bool rng_pct(struct rng *r, unsigned pct)
{
    return rng_below(r, 100) < pct;
}

static const char *name_of(char (*tab)[8], const char *prefix, unsigned i)
{
    if (!tab[i][0])
        snprintf(tab[i], sizeof tab[i], "%s%u", prefix, i);
    return tab[i];
}

const char *ws_name(unsigned i)
{
    static char t[MAX_WS][8];
    return name_of(t, "ws", i);
}

const char *key_name(unsigned i)
{
    static char t[NKEYS + 1][8];
    return name_of(t, "k", i);
}

const char *lock_name(unsigned i)
{
    static char t[MAX_LOCKS][8];
    return name_of(t, "lk", i);
}

const char *ob_name(unsigned i)
{
    static char t[NOB][12];
    if (!t[i][0])
        snprintf(t[i], sizeof t[i], "outbox-%u", i);
    return t[i];
}

const char *fkey_name(unsigned i)
{
    static char t[MAX_FKEYS][8];
    return name_of(t, "fk", i);
}

/* See fault.h.  Called by the driver (kill, freeze) and by clients (steal,
 * lapse); two starting at once on one workstream is not excluded (the
 * fields are stored with kill_ns 0, so a grant never ends a half-written
 * one), it only costs a sample. */
void trans_begin(unsigned ws, uint64_t gen, int kind, uint32_t waiters)
{
    struct wsinfo *w = &S->ws[ws];
    /* while etcd is down nobody can be elected (fail closed): such
     * transitions are not the lease's, they are not timed */
    if (atomic_load(&S->etcd_outage) & 1)
        return;
    /* only a leader nobody has replaced yet: the next grant is then its
     * successor's */
    if (atomic_load(&w->max_granted) > gen)
        return;
    uint64_t now = now_ns(), pending = atomic_load(&w->kill_ns);
    /* keep a pending measurement unless it is stale (its grantee died
     * before recording the grant) */
    if (pending && now - pending < 5000000000ull)
        return;
    atomic_store(&w->kill_ns, 0);
    atomic_store(&w->kill_gen, gen);
    atomic_store(&w->kill_kind, (uint32_t)kind);
    atomic_store(&w->kill_waiters, waiters);
    atomic_store(&w->kill_ns, now);
}

uint32_t trans_waiters(unsigned ws, int self)
{
    uint32_t n = 0;
    for (int j = 0; j < MAX_SLOTS; j++) {
        struct slot *o = &S->slots[j];
        int st = atomic_load(&o->state);
        if (j != self && atomic_load(&o->pid) > 0 && !atomic_load(&o->stopped) &&
            (st == ST_CAMPAIGNING || st == ST_STEALING) && atomic_load(&o->target) == (int)ws)
            n++;
    }
    return n;
}
