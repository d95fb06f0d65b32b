/* leader.c - leadership with outbox claims (libcoord).
 *
 * Campaigns for the workstream "billing", reconciles what an earlier
 * leader claimed and never settled (leader.pending), then drains an
 * outbox: claim each op id (stored before the reply), perform the effect
 * with the op id as the receiver's idempotency key, commit.  A cursor is
 * committed with the last op, at most once per op id.  After the resign,
 * the old generation is fenced: its late commit is refused.
 *
 *     cc leader.c $(pkg-config --cflags --libs coord) -o leader && ./leader */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "coord.h"

#define WS "billing"
#define WS_LEN 7

/* The external system: an idempotency-key API would answer "already
 * applied" for an op id it has; here, a print. */
static void send_invoice(const char *op_id)
{
    printf("sent %s (idempotency key %s)\n", op_id, op_id);
}

int main(void)
{
    coord_t *c;
    if (coord_connect(&c, NULL) < 0) {
        fprintf(stderr, "connect: %s\n", coord_error_message(NULL));
        return 1;
    }
    coord_leader_opts o = { .lease_ms = 10000, .timeout_ms = 5000 };
    coord_leader_term t;
    int rc = coord_leader_campaign_term(c, WS, WS_LEN, &o, &t);
    if (rc < 0 || t.state != COORD_LEADER_LEADER) {
        fprintf(stderr, "campaign: %s\n", coord_strerror(rc));
        return 1;
    }
    printf("%s: generation %llu, lease %llu ms, mode %s\n", coord_leader_state_name(t.state),
           (unsigned long long)t.generation, (unsigned long long)t.lease_ms, t.mode);

    coord_reply_t *p;
    if (coord_leader_pending(c, WS, WS_LEN, 0, &p) == 0) {
        printf("pending from earlier leaders: %zu\n",
               coord_map_array_len(coord_reply_map(p), "ops"));
        coord_reply_free(p);           /* each would be reconciled by op id first */
    }

    const char *ops[] = { "invoice-1", "invoice-2" };
    for (int i = 0; i < 2; i++) {
        coord_claim_result cl;
        rc = coord_leader_claim(c, WS, WS_LEN, t.generation, ops[i], &cl);
        if (rc < 0) {
            fprintf(stderr, "claim: %s\n", coord_strerror(rc));
            return 1;
        }
        if (!cl.claimed)
            continue;                  /* applied or abandoned before: nothing to do */
        if (cl.reconcile)
            printf("%s: an earlier leader claimed it: ask the receiver first\n", ops[i]);
        send_invoice(ops[i]);
        coord_commit_result r;
        if (i == 1)                    /* the last one moves the cursor too */
            rc = coord_leader_commit(c, WS, WS_LEN, t.generation, ops[i], "cursor", "2", 1, &r);
        else
            rc = coord_leader_commit(c, WS, WS_LEN, t.generation, ops[i], NULL, NULL, 0, &r);
        printf("commit %s: %s\n", ops[i], rc < 0 ? coord_strerror(rc)
                                         : r.applied ? "applied" : "duplicate");
    }
    coord_claim_result again;
    coord_leader_claim(c, WS, WS_LEN, t.generation, "invoice-1", &again);
    printf("claim invoice-1 again: claimed %d, applied %d\n", again.claimed, again.applied);

    void *v;
    size_t vn;
    if (coord_leader_read(c, WS, WS_LEN, "cursor", &v, &vn, NULL) == 0) {
        printf("cursor = %.*s\n", (int)vn, (char *)v);
        free(v);
    }
    uint64_t old = t.generation;
    coord_leader_term_resign(c, WS, WS_LEN, &t);
    printf("%s (%s)\n", coord_leader_state_name(t.state), t.end_reason);

    rc = coord_leader_commit(c, WS, WS_LEN, old, "invoice-3", NULL, NULL, 0, NULL);
    printf("late commit by generation %llu: %s\n", (unsigned long long)old,
           rc == COORD_EFENCED ? "FENCED" : coord_strerror(rc));

    coord_reply_t *h;
    if (coord_leader_history(c, WS, WS_LEN, 1, &h) == 0) {
        coord_map e;
        const char *reason;
        size_t rl;
        if (coord_map_array_at(coord_reply_map(h), "terms", 0, &e) &&
            coord_map_str(e, "reason", &reason, &rl))
            printf("history: the last term ended %.*s\n", (int)rl, reason);
        coord_reply_free(h);
    }
    coord_close(c);
    return rc == COORD_EFENCED ? 0 : 1;
}
