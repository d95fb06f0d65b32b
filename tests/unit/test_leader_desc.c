/* test_leader_desc.c - unit tests of leadership's pure rules and stored
 * forms (broker/leadership/leader-desc.c): a define's merge (set, nil, omitted),
 * the protocol pin with its ratchet and force, protocol texts, and the
 * validating decoders (every truncation and bad enum refused).
 *
 * With --write-corpus DIR it writes the seed corpus of fuzz_leader_desc
 * instead (committed under tests/fuzz/corpus-desc). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "coord-codes.h"
#include "leader-desc.h"
#include "reasons.h"

static struct ws_protocol proto(const char *s)
{
    struct ws_protocol p;
    memset(&p, 0, sizeof p);
    if (ws_protocol_parse((const uint8_t *)s, strlen(s), &p) < 0)
        CHECK_MSG(0, "protocol %s does not parse", s);
    return p;
}

static void test_protocol_text(void)
{
    struct ws_protocol p;
    const char *good[] = { "a@1", "sync.v2_x-y@4294967295", "A@10" };
    for (size_t i = 0; i < 3; i++) {
        CHECK_EQ(ws_protocol_parse((const uint8_t *)good[i], strlen(good[i]), &p), 0);
        char text[WS_PROTOCOL_TEXT];
        size_t n = ws_protocol_format(&p, p.version, text, sizeof text);
        CHECK(n == strlen(good[i]) && memcmp(text, good[i], n) == 0);
    }
    const char *bad[] = { "", "a", "a@", "@1", "a@0", "a@01", "a@4294967296", "a b@1",
                          "a@1x", "a@@1", "é@1" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK_MSG(ws_protocol_parse((const uint8_t *)bad[i], strlen(bad[i]), &p) < 0,
                  "%s parsed", bad[i]);
    char long_name[80];
    memset(long_name, 'n', 65);
    strcpy(long_name + 65, "@1");
    CHECK(ws_protocol_parse((const uint8_t *)long_name, strlen(long_name), &p) < 0);
}

static void test_define_merge(void)
{
    struct ws_desc d;
    ws_desc_default(&d);
    CHECK(!d.defined && d.steal == WS_STEAL_ALLOWED && d.mode == WS_MODE_ACTIVE);
    struct ws_patch p = { .set = WS_F_MAX_HOLD | WS_F_STEAL | WS_F_MODE | WS_F_FALLBACK };
    p.v.max_hold_ms = 500;
    p.v.steal = WS_STEAL_NEVER;
    p.v.mode = WS_MODE_SHADOW;
    p.v.fallback_len = 3;
    memcpy(p.v.fallback, "SRV", 3);
    CHECK_EQ(ws_desc_define(&d, &p, 1000), 0);
    CHECK(d.defined && d.defined_ms == 1000 && d.max_hold_ms == 500);
    CHECK(d.steal == WS_STEAL_NEVER && d.mode == WS_MODE_SHADOW && d.fallback_len == 3);
    /* omitted: kept; reset: default */
    struct ws_patch q = { .set = WS_F_MODE, .reset = WS_F_FALLBACK | WS_F_MAX_HOLD };
    q.v.mode = WS_MODE_READ_ONLY;
    CHECK_EQ(ws_desc_define(&d, &q, 2000), 0);
    CHECK(d.mode == WS_MODE_READ_ONLY && d.steal == WS_STEAL_NEVER);
    CHECK(d.fallback_len == 0 && d.max_hold_ms == 0 && d.defined_ms == 2000);
}

static void test_pin(void)
{
    struct ws_desc d;
    ws_desc_default(&d);
    struct ws_protocol none = { 0 }, a2 = proto("app@2"), a3 = proto("app@3"),
                       a1 = proto("app@1"), b9 = proto("b@9");
    CHECK_EQ(ws_desc_admit(&d, &none), 0);         /* no pin: anything */
    CHECK(!ws_desc_grant(&d, &a3));                /* and no ratchet */
    struct ws_patch p = { .set = WS_F_PROTOCOL };
    p.v.protocol = a2;
    CHECK_EQ(ws_desc_define(&d, &p, 1), 0);
    CHECK_EQ_U(ws_desc_pin(&d), 2);
    CHECK_EQ(ws_desc_admit(&d, &none), COORD_EPROTOCOL_PINNED);
    CHECK_EQ(ws_desc_admit(&d, &a1), COORD_EPROTOCOL_PINNED);
    CHECK_EQ(ws_desc_admit(&d, &b9), COORD_EPROTOCOL_PINNED);
    CHECK_EQ(ws_desc_admit(&d, &a2), 0);
    CHECK(!ws_desc_grant(&d, &a2));
    CHECK(ws_desc_grant(&d, &a3));                 /* the ratchet */
    CHECK_EQ_U(ws_desc_pin(&d), 3);
    CHECK_EQ(ws_desc_admit(&d, &a2), COORD_EPROTOCOL_PINNED);
    /* lowering, renaming or removing the pin takes force; raising does not */
    struct ws_desc before = d;
    CHECK_EQ(ws_desc_define(&d, &p, 2), COORD_EPROTOCOL_PINNED);
    CHECK(memcmp(&before, &d, sizeof d) == 0);
    struct ws_patch rm = { .reset = WS_F_PROTOCOL };
    CHECK_EQ(ws_desc_define(&d, &rm, 2), COORD_EPROTOCOL_PINNED);
    struct ws_patch other = { .set = WS_F_PROTOCOL };
    other.v.protocol = b9;
    CHECK_EQ(ws_desc_define(&d, &other, 2), COORD_EPROTOCOL_PINNED);
    struct ws_patch up = { .set = WS_F_PROTOCOL };
    up.v.protocol = proto("app@3");
    CHECK_EQ(ws_desc_define(&d, &up, 2), 0);       /* at the pin: fine */
    CHECK_EQ_U(ws_desc_pin(&d), 3);
    p.force = true;
    CHECK_EQ(ws_desc_define(&d, &p, 3), 0);
    CHECK_EQ_U(ws_desc_pin(&d), 2);
    CHECK_EQ(ws_desc_admit(&d, &a2), 0);
    rm.force = true;
    CHECK_EQ(ws_desc_define(&d, &rm, 4), 0);
    CHECK_EQ_U(ws_desc_pin(&d), 0);
    CHECK_EQ(ws_desc_admit(&d, &none), 0);
}

static void sample_desc(struct ws_desc *d)
{
    ws_desc_default(d);
    d->defined = true;
    d->protocol = proto("sync@7");
    d->ratchet = 9;
    d->max_hold_ms = 30000;
    d->steal = WS_STEAL_INCIDENT_ONLY;
    d->mode = WS_MODE_SHADOW;
    d->fallback_len = 18;
    memcpy(d->fallback, "SERVER_COORDINATED", 18);
    d->defined_ms = 1767225600123ull;
}

static void sample_term(struct ws_term *t)
{
    memset(t, 0, sizeof *t);
    t->generation = 60620804194308ull;
    t->pid = 4242;
    t->elected_ms = 1767225600000ull;
    t->ended_ms = 1767225601000ull;
    t->mode = WS_MODE_READ_ONLY;
    t->reason = REASON_INCIDENT;
    t->protocol = proto("sync@7");
    t->client_len = 6;
    memcpy(t->client, "editor", 6);
    t->instance_len = 8;
    memcpy(t->instance, "inst-001", 8);
    t->incident_len = 6;
    memcpy(t->incident, "INC-42", 6);
}

static void test_stored_forms(void)
{
    struct ws_desc d, d2;
    sample_desc(&d);
    uint8_t buf[WS_TERM_MAX];
    size_t n = ws_desc_encode(&d, buf);
    CHECK(n <= WS_DESC_MAX);
    CHECK_EQ(ws_desc_decode(&d2, buf, n), 0);
    CHECK(d2.ratchet == 9 && d2.max_hold_ms == 30000 && d2.steal == WS_STEAL_INCIDENT_ONLY);
    CHECK(d2.fallback_len == 18 && memcmp(d2.fallback, d.fallback, 18) == 0);
    CHECK_EQ_U(ws_desc_pin(&d2), 9);
    for (size_t cut = 0; cut < n; cut++)
        CHECK_MSG(ws_desc_decode(&d2, buf, cut) < 0, "descriptor cut at %zu decoded", cut);
    buf[n] = 0;
    CHECK(ws_desc_decode(&d2, buf, n + 1) < 0);    /* trailing byte */
    uint8_t bad[WS_DESC_MAX];
    memcpy(bad, buf, n);
    bad[19] = 7;                                   /* mode out of range */
    CHECK(ws_desc_decode(&d2, bad, n) < 0);

    struct ws_term t, t2;
    sample_term(&t);
    n = ws_term_encode(&t, buf);
    CHECK(n <= WS_TERM_MAX);
    CHECK_EQ(ws_term_decode(&t2, buf, n), 0);
    CHECK(t2.generation == t.generation && t2.reason == REASON_INCIDENT);
    CHECK(t2.incident_len == 6 && memcmp(t2.incident, "INC-42", 6) == 0);
    for (size_t cut = 0; cut < n; cut++)
        CHECK_MSG(ws_term_decode(&t2, buf, cut) < 0, "term cut at %zu decoded", cut);
    uint8_t badt[WS_TERM_MAX];
    memcpy(badt, buf, n);
    badt[34] = 250;                                /* reason out of range */
    CHECK(ws_term_decode(&t2, badt, n) < 0);
}

static void sample_desc2(struct ws_desc *d)
{
    sample_desc(d);
    d->if_available = WS_IFAV_NEVER;
    d->lock_name_len = 28;
    memcpy(d->lock_name, "app:leader:account-outbox:v3", 28);
    d->caps_len = 13;
    memcpy(d->caps, "outbox,claims", 13);
}

/* lock name, capabilities and the if_available policy: format 2, only
 * when one of them is set (format 1 bytes stay as they were) */
static void test_format2(void)
{
    struct ws_desc d, d2;
    uint8_t buf[WS_DESC_MAX + 1];
    sample_desc(&d);
    size_t n1 = ws_desc_encode(&d, buf);
    CHECK_EQ(buf[0], 1);
    sample_desc2(&d);
    size_t n = ws_desc_encode(&d, buf);
    CHECK_EQ(buf[0], 2);
    CHECK(n == n1 + 1 + 1 + 28 + 1 + 13);
    CHECK_EQ(ws_desc_decode(&d2, buf, n), 0);
    CHECK(d2.if_available == WS_IFAV_NEVER && d2.lock_name_len == 28 && d2.caps_len == 13);
    CHECK(memcmp(d2.lock_name, d.lock_name, 28) == 0 && memcmp(d2.caps, d.caps, 13) == 0);
    for (size_t cut = 0; cut < n; cut++)
        CHECK_MSG(ws_desc_decode(&d2, buf, cut) < 0, "descriptor cut at %zu decoded", cut);
    /* format 2 saying nothing more than format 1 is not canonical */
    ws_desc_default(&d);
    d.defined = true;
    n = ws_desc_encode(&d, buf);
    uint8_t two[WS_DESC_MAX + 3];
    memcpy(two, buf, n);
    two[0] = 2;
    two[n] = 0, two[n + 1] = 0, two[n + 2] = 0;
    CHECK(ws_desc_decode(&d2, two, n + 3) < 0);
    /* a lock name in the broker's namespace is refused */
    sample_desc2(&d);
    d.lock_name[0] = '-';
    n = ws_desc_encode(&d, buf);
    CHECK(ws_desc_decode(&d2, buf, n) < 0);

    /* capabilities: every pinned one must be named */
    sample_desc2(&d);
    const char *name;
    size_t len;
    CHECK(ws_desc_caps_missing(&d, NULL, 0, &name, &len));
    CHECK(len == 6 && memcmp(name, "outbox", 6) == 0);
    CHECK(ws_desc_caps_missing(&d, (const uint8_t *)"outbox", 6, &name, &len));
    CHECK(len == 6 && memcmp(name, "claims", 6) == 0);
    CHECK(!ws_desc_caps_missing(&d, (const uint8_t *)"claims, outbox,x", 16, &name, &len));
    CHECK(ws_desc_caps_missing(&d, (const uint8_t *)"claim,outbox", 12, &name, &len));
    d.caps_len = 0;
    CHECK(!ws_desc_caps_missing(&d, NULL, 0, &name, &len));

    /* a define sets, keeps and resets them */
    struct ws_patch p;
    memset(&p, 0, sizeof p);
    sample_desc2(&p.v);
    p.set = WS_F_LOCK_NAME | WS_F_CAPS | WS_F_IF_AVAILABLE;
    ws_desc_default(&d);
    CHECK_EQ(ws_desc_define(&d, &p, 1), 0);
    CHECK(d.lock_name_len == 28 && d.caps_len == 13 && d.if_available == WS_IFAV_NEVER);
    p.set = 0;
    p.reset = WS_F_CAPS;
    CHECK_EQ(ws_desc_define(&d, &p, 2), 0);
    CHECK(d.lock_name_len == 28 && d.caps_len == 0 && d.if_available == WS_IFAV_NEVER);
    CHECK_EQ(ws_ifav_parse((const uint8_t *)"never", 5), WS_IFAV_NEVER);
    CHECK_EQ(ws_ifav_parse((const uint8_t *)"sometimes", 9), -1);
}

static int write_file(const char *dir, const char *name, const uint8_t *p, size_t n)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n) {
        perror(path);
        return -1;
    }
    return fclose(f);
}

/* fuzz_leader_desc's first byte picks the decoder: 0 descriptor, 1 term,
 * 2 protocol text */
static int write_corpus(const char *dir)
{
    uint8_t buf[1 + WS_TERM_MAX + WS_DESC_MAX];
    struct ws_desc d;
    sample_desc(&d);
    buf[0] = 0;
    size_t n = ws_desc_encode(&d, buf + 1);
    int rc = write_file(dir, "desc-full", buf, n + 1);
    ws_desc_default(&d);
    n = ws_desc_encode(&d, buf + 1);
    rc |= write_file(dir, "desc-default", buf, n + 1);
    sample_desc2(&d);
    n = ws_desc_encode(&d, buf + 1);
    rc |= write_file(dir, "desc-lockname-caps", buf, n + 1);
    struct ws_term t;
    sample_term(&t);
    buf[0] = 1;
    n = ws_term_encode(&t, buf + 1);
    rc |= write_file(dir, "term-incident", buf, n + 1);
    rc |= write_file(dir, "term-cut", buf, n / 2);
    /* 3: a descriptor file's text (protocol/desc-file.c) */
    const char *texts[] = {
        "\002sync@7", "\002a@4294967295", "\002bad",
        "\003schema: crossTabLeader.v1\nworkstream: account-outbox\n"
        "lockName: app:leader:account-outbox:v3\nprotocol: leader-worker@3\n"
        "canonicalFence: server-lease-ledger\nmaxHold: 30s\nsteal: incident-only\n"
        "fallback: SERVER_COORDINATED\n",
        "\003# every key\r\nschema: 'crossTabLeader.v1'\r\norigin: \"a\\\"b\"\r\n"
        "capabilities: [outbox, claims]\r\nifAvailable: never\r\nmode: ~\r\n"
        "disabled: true # c\r\nmaxHold: 1.5s\r\n",
        ("\003schema: crossTabLeader.v1\n  bogus\nmode: x\nmode: y\ncapabilities: a,,b\n"
         "fallback: ELSE\nlockName: -x\nmaxHold: 0x10s\nworkstream: 'open\n"),
    };
    const char *names[] = {
        "protocol-sync", "protocol-max", "protocol-bad", "file-note000", "file-every-key",
        "file-errors",
    };
    for (int i = 0; i < 6; i++)
        rc |= write_file(dir, names[i], (const uint8_t *)texts[i], strlen(texts[i]));
    return rc ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--write-corpus") == 0)
        return write_corpus(argv[2]);
    test_protocol_text();
    test_define_merge();
    test_pin();
    test_stored_forms();
    test_format2();
    return check_report("leader_desc");
}
