/* test_errors.c - unit tests of the error table (coord-codes.h, errors.c):
 * wire names round-trip, unknown names, distinct codes, the v1 code list. */
#include <stdbool.h>
#include <string.h>

#include "check.h"
#include "errors.h"

struct row { int code; const char *wire; const char *text; const char *sym; };

static const struct row rows[] = {
#define ROW(name, value, wire, text) { COORD_E##name, wire, text, #name },
    COORD_ERRORS(ROW)
#undef ROW
};
#define NROWS (sizeof rows / sizeof rows[0])

/* The codes the protocol lists, in its order. */
static const char *const v1_codes[] = {
    "BAD_FRAME", "HELLO_REQUIRED", "PROTO_VERSION", "BAD_REQUEST", "UNKNOWN_OP",
    "INVALID_OPTIONS", "NAME_RESERVED", "TOO_LARGE", "LIMIT", "ABORTED",
    "TIMEOUT", "FENCED", "NOT_FOUND", "UNKNOWN_LOCK", "DISABLED", "STORAGE",
    "SHUTTING_DOWN",
    /* descriptors, rollout modes, draining, remote ledgers */
    "PROTOCOL_PINNED", "POLICY", "READ_ONLY", "DRAINING", "UNAVAILABLE",
};
#define NV1 (sizeof v1_codes / sizeof v1_codes[0])

static void test_round_trip(void)
{
    size_t wired = 0;
    for (size_t i = 0; i < NROWS; i++) {
        const struct row *r = &rows[i];
        CHECK_MSG(r->code < 0, "%s is not negative", r->sym);
        CHECK_MSG(r->text && r->text[0], "%s has no text", r->sym);
        CHECK_STR(coord_code_text(r->code), r->text);
        if (r->wire) {
            wired++;
            CHECK_STR(coord_code_name(r->code), r->wire);
            /* the enum suffix is the wire name */
            CHECK_STR(r->wire, r->sym);
            CHECK_MSG(coord_code_from_name(r->wire, strlen(r->wire)) == r->code,
                      "%s does not round-trip", r->wire);
            /* the name need not be NUL-terminated: only len counts */
            char padded[64];
            snprintf(padded, sizeof padded, "%sXYZ", r->wire);
            CHECK_MSG(coord_code_from_name(padded, strlen(r->wire)) == r->code,
                      "%s with trailing bytes", r->wire);
        } else {
            CHECK_MSG(coord_code_name(r->code) == NULL, "%s has a wire name",
                      r->sym);
        }
    }
    CHECK_EQ(wired, NV1);
}

static void test_v1_list(void)
{
    for (size_t i = 0; i < NV1; i++) {
        int code = coord_code_from_name(v1_codes[i], strlen(v1_codes[i]));
        CHECK_MSG(code != COORD_EUNKNOWN, "%s missing from the table", v1_codes[i]);
        CHECK_STR(coord_code_name(code), v1_codes[i]);
    }
    CHECK_EQ(COORD_EFENCED, coord_code_from_name("FENCED", 6));
    CHECK_EQ(COORD_ESHUTTING_DOWN, coord_code_from_name("SHUTTING_DOWN", 13));
}

static void test_distinct(void)
{
    for (size_t i = 0; i < NROWS; i++) {
        CHECK_MSG(rows[i].code != COORD_OK, "%s is COORD_OK", rows[i].sym);
        for (size_t j = 0; j < i; j++) {
            CHECK_MSG(rows[i].code != rows[j].code, "%s and %s share %d",
                      rows[i].sym, rows[j].sym, rows[i].code);
            if (rows[i].wire && rows[j].wire)
                CHECK_MSG(strcmp(rows[i].wire, rows[j].wire) != 0,
                          "%s twice", rows[i].wire);
            CHECK_MSG(strcmp(rows[i].text, rows[j].text) != 0,
                      "%s and %s have the same text", rows[i].sym, rows[j].sym);
        }
    }
}

static void test_unknown(void)
{
    static const char *const unknown[] = {
        "", "FENCE", "FENCED_", "fenced", "Fenced", " FENCED", "OK", "UNKNOWN",
        "CONNECT", "NOMEM", "BAD_FRAMES",
    };
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++)
        CHECK_MSG(coord_code_from_name(unknown[i], strlen(unknown[i])) ==
                      COORD_EUNKNOWN, "'%s' is known", unknown[i]);
    /* a prefix of a real name with its length */
    CHECK_EQ(coord_code_from_name("FENCED", 5), COORD_EUNKNOWN);
    CHECK_EQ(coord_code_from_name("FENCED\0", 7), COORD_EUNKNOWN);

    CHECK(coord_code_name(COORD_OK) == NULL);
    CHECK(coord_code_name(12345) == NULL);
    CHECK(coord_code_name(-1000) == NULL);
    CHECK_STR(coord_code_text(COORD_OK), "success");
    CHECK_STR(coord_code_text(12345), "unknown error");
    CHECK(coord_code_text(COORD_EUNKNOWN) != NULL);
}

int main(void)
{
    test_round_trip();
    test_v1_list();
    test_distinct();
    test_unknown();
    return check_report("test_errors");
}
