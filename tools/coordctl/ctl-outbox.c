/* ctl-outbox.c - coordctl's outbox commands, for a CMD under leader-run
 * (or any process holding a live generation) and for operators:
 *   leader claim WORKSTREAM OP_ID
 *   leader commit WORKSTREAM OP_ID [KEY [VALUE]]
 *   leader abandon WORKSTREAM OP_ID REASON
 *   leader pending WORKSTREAM [--limit N]
 *   leader check WORKSTREAM GENERATION
 *
 * claim, commit and abandon take the generation from --generation N, else
 * $COORD_GENERATION (which leader-run exports), and the scope from the
 * global --scope, else $COORD_SCOPE (also exported): the broker accepts
 * them from any connection of the scope while the generation is live.
 * Their exit status tells a script what to do (see OUTBOX_EXIT_*). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "coordctl.h"

/* Exit statuses beside 0 (claimed / applied now): distinct from coordctl's
 * 1 (refused: FENCED, READ_ONLY, DRAINING...), 2 (usage), 3
 * (unreachable), so that `case $?` in a CMD can tell them apart. */
enum {
    OUTBOX_EXIT_RECONCILE = 10, /* claim: claimed, but an earlier generation
                                   claimed it and never settled it: ask the
                                   external system by this op id first */
    OUTBOX_EXIT_APPLIED = 11,   /* already applied (claim, commit, abandon):
                                   nothing to do */
    OUTBOX_EXIT_ABANDONED = 12, /* abandoned (claim, commit): never do it */
};

/* See coordctl.h. */
int ctl_leader_args(struct ctl *ctl, int argc, char **argv, int min, int max,
                    char **ops, int *nops, uint64_t *gen, unsigned *limit)
{
    static const struct option longopts[] = {
        { "generation", required_argument, NULL, 'g' },
        { "limit", required_argument, NULL, 'l' },
        { "json", no_argument, NULL, 'j' },
        { NULL, 0, NULL, 0 },
    };
    const char *g = NULL;
    int opt;
    /* 0: a full restart, options may follow the operands */
    optind = 0;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        char *end;
        unsigned long v;
        switch (opt) {
        case 'g':
            if (!gen)
                return ctl_usage(ctl, "%s takes no --generation", argv[0]);
            g = optarg;
            break;
        case 'l':
            v = strtoul(optarg, &end, 10);
            if (!limit || !*optarg || *end || v == 0 || v > 100000)
                return ctl_usage(ctl, "--limit needs a positive number, not %s", optarg);
            *limit = (unsigned)v;
            break;
        case 'j':
            ctl->json = true;
            break;
        case ':':
            return ctl_usage(ctl, "%s needs a value", argv[optind - 1]);
        default:
            return ctl_usage(ctl, "unknown flag %s", argv[optind - 1]);
        }
    }
    if (optind < argc && !strcmp(argv[optind], "--"))
        optind++;
    int n = argc - optind;
    if (n < min)
        return ctl_usage(ctl, "missing %s", n == 0 ? "WORKSTREAM" : "arguments");
    if (n > max)
        return ctl_usage(ctl, "unexpected argument %s", argv[optind + max]);
    for (int i = 0; i < n; i++)
        ops[i] = argv[optind + i];
    *nops = n;
    if (gen) {
        if (!g)
            g = getenv("COORD_GENERATION");
        if (!g || !*g)
            return ctl_usage(ctl, "no generation: --generation N or $COORD_GENERATION "
                                  "(set by leader-run)");
        if (!ctl_parse_generation(g, gen))
            return ctl_usage(ctl, "the generation must be a positive number, not %s", g);
    }
    return 0;
}

/* ctl_connect, in $COORD_SCOPE unless --scope was given. */
static int connect_scoped(struct ctl *ctl)
{
    if (!ctl->opts.scope) {
        const char *s = getenv("COORD_SCOPE");
        if (s && *s)
            ctl->opts.scope = s;
    }
    return ctl_connect(ctl);
}

/* ---- claim ---- */

int ctl_leader_claim(struct ctl *ctl, int argc, char **argv)
{
    char *ops[2];
    int n;
    uint64_t gen = 0;
    int rc = ctl_leader_args(ctl, argc, argv, 2, 2, ops, &n, &gen, NULL);
    if (rc || (rc = connect_scoped(ctl)))
        return rc;
    coord_claim_result r;
    rc = coord_leader_claim(ctl->c, ops[0], strlen(ops[0]), gen, ops[1], &r);
    if (rc < 0)
        return ctl_fail_call(ctl, "leader claim", rc);
    if (ctl->json) {
        printf("{\"claimed\":%s", r.claimed ? "true" : "false");
        if (r.reconcile)
            printf(",\"reconcile\":true,\"previous_generation\":%llu,\"claimed_ms\":%llu",
                   (unsigned long long)r.previous_generation,
                   (unsigned long long)r.claimed_ms);
        if (r.applied)
            printf(",\"applied\":true,\"generation\":%llu", (unsigned long long)r.generation);
        if (r.abandoned)
            printf(",\"abandoned\":true");
        printf("}\n");
    } else if (r.reconcile) {
        printf("reconcile previous_generation=%llu claimed_ms=%llu\n",
               (unsigned long long)r.previous_generation, (unsigned long long)r.claimed_ms);
    } else if (r.claimed) {
        printf("claimed\n");
    } else if (r.applied) {
        printf("applied generation=%llu\n", (unsigned long long)r.generation);
    } else if (r.abandoned) {
        printf("abandoned\n");
    } else {
        printf("not claimed\n");
        return CTL_EXIT_FAIL;
    }
    return r.reconcile ? OUTBOX_EXIT_RECONCILE
         : r.claimed   ? CTL_EXIT_OK
         : r.applied   ? OUTBOX_EXIT_APPLIED
         : r.abandoned ? OUTBOX_EXIT_ABANDONED : CTL_EXIT_FAIL;
}

/* ---- commit ---- */

int ctl_leader_commit(struct ctl *ctl, int argc, char **argv)
{
    char *ops[4];
    int n;
    uint64_t gen = 0;
    int rc = ctl_leader_args(ctl, argc, argv, 2, 4, ops, &n, &gen, NULL);
    if (rc || (rc = connect_scoped(ctl)))
        return rc;
    const char *key = n > 2 ? ops[2] : NULL;
    const char *value = n > 3 ? ops[3] : key ? "" : NULL;
    coord_commit_result r;
    rc = coord_leader_commit(ctl->c, ops[0], strlen(ops[0]), gen, ops[1], key, value,
                             value ? strlen(value) : 0, &r);
    if (rc < 0)
        return ctl_fail_call(ctl, "leader commit", rc);
    if (ctl->json) {
        printf("{\"applied\":%s", r.applied ? "true" : "false");
        if (r.duplicate)
            printf(",\"duplicate\":true,\"generation\":%llu",
                   (unsigned long long)r.generation);
        if (r.abandoned)
            printf(",\"abandoned\":true");
        printf("}\n");
    } else if (r.applied) {
        printf("applied\n");
    } else if (r.duplicate) {
        printf("duplicate generation=%llu\n", (unsigned long long)r.generation);
    } else if (r.abandoned) {
        printf("abandoned\n");
    }
    return r.applied ? CTL_EXIT_OK
         : r.duplicate ? OUTBOX_EXIT_APPLIED
         : r.abandoned ? OUTBOX_EXIT_ABANDONED : CTL_EXIT_FAIL;
}

/* ---- abandon ---- */

int ctl_leader_abandon(struct ctl *ctl, int argc, char **argv)
{
    char *ops[3];
    int n;
    uint64_t gen = 0;
    int rc = ctl_leader_args(ctl, argc, argv, 3, 3, ops, &n, &gen, NULL);
    if (rc || (rc = connect_scoped(ctl)))
        return rc;
    bool applied = false;
    uint64_t by = 0;
    rc = coord_leader_abandon(ctl->c, ops[0], strlen(ops[0]), gen, ops[1], ops[2],
                              &applied, &by);
    if (rc < 0)
        return ctl_fail_call(ctl, "leader abandon", rc);
    if (ctl->json) {
        if (applied)
            printf("{\"applied\":true,\"generation\":%llu}\n", (unsigned long long)by);
        else
            printf("{}\n");
    } else if (applied) {
        printf("applied generation=%llu\n", (unsigned long long)by);
    } else {
        printf("abandoned\n");
    }
    return applied ? OUTBOX_EXIT_APPLIED : CTL_EXIT_OK;
}

/* ---- pending ---- */

int ctl_leader_pending(struct ctl *ctl, int argc, char **argv)
{
    char *ops[1];
    int n;
    unsigned limit = 0;
    int rc = ctl_leader_args(ctl, argc, argv, 1, 1, ops, &n, NULL, &limit);
    if (rc || (rc = connect_scoped(ctl)))
        return rc;
    coord_reply_t *reply = NULL;
    rc = coord_leader_pending(ctl->c, ops[0], strlen(ops[0]), limit, &reply);
    if (rc < 0)
        return ctl_fail_call(ctl, "leader pending", rc);
    coord_map m = coord_reply_map(reply);
    if (ctl->json) {
        rc = ctl_print_json(m);
        coord_reply_free(reply);
        return rc;
    }
    static const char *const titles[] = { "OP_ID", "GENERATION", "CLAIMED", "LIVE" };
    struct ctl_rows t = { .ncols = 4, .titles = titles };
    size_t count = coord_map_array_len(m, "ops");
    uint64_t now = ctl_wall_ms();
    for (size_t i = 0; i < count; i++) {
        coord_map e;
        if (!coord_map_array_at(m, "ops", i, &e))
            continue;
        char **row = ctl_rows_add(&t);
        if (!row)
            break;
        uint64_t at = 0;
        bool live = false;
        coord_map_uint(e, "claimed_ms", &at);
        coord_map_bool(e, "live", &live);
        row[0] = ctl_escaped_field(e, "op_id");
        row[1] = ctl_uint_cell(e, "generation");
        char d[64];
        ctl_format_duration(d, sizeof d, now > at ? now - at : 0);
        row[2] = ctl_strdupf("%s ago", d);
        row[3] = strdup(live ? "yes" : "no");
        ctl_rows_check(&t, row);
    }
    bool truncated = false;
    coord_map_bool(m, "truncated", &truncated);
    coord_reply_free(reply);
    rc = ctl_rows_print(&t, "leader pending");
    if (truncated)
        fprintf(stderr, "coordctl: leader pending: more ops are pending (--limit)\n");
    return rc;
}

/* ---- check ---- */

int ctl_leader_check(struct ctl *ctl, int argc, char **argv)
{
    char *ops[2];
    int n;
    int rc = ctl_leader_args(ctl, argc, argv, 2, 2, ops, &n, NULL, NULL);
    if (rc)
        return rc;
    uint64_t gen = 0;
    if (!ctl_parse_generation(ops[1], &gen))
        return ctl_usage(ctl, "GENERATION must be a positive number, not %s", ops[1]);
    if ((rc = connect_scoped(ctl)))
        return rc;
    coord_leader_check_result r;
    rc = coord_leader_check(ctl->c, ops[0], strlen(ops[0]), gen, &r);
    if (rc < 0)
        return ctl_fail_call(ctl, "leader check", rc);
    if (ctl->json) {
        printf("{\"live\":%s,\"lease_left_ms\":%llu,\"mode\":\"%s\"}\n",
               r.live ? "true" : "false", (unsigned long long)r.lease_left_ms, r.mode);
        return r.live ? CTL_EXIT_OK : CTL_EXIT_FAIL;
    }
    struct ctl_table t = { 0 };
    ctl_table_add(&t, "live", r.live ? "yes" : "no");
    char d[64];
    ctl_format_duration(d, sizeof d, r.lease_left_ms);
    ctl_table_add(&t, "lease left", d);
    char *e = ctl_escape(r.mode, strlen(r.mode));
    ctl_table_add(&t, "mode", e ? e : "?");
    free(e);
    rc = ctl_table_print(&t);
    return rc == CTL_EXIT_OK && !r.live ? CTL_EXIT_FAIL : rc;
}
