/* fuzz_leader_desc.c - the libFuzzer target over leadership's stored forms
 * (broker/leadership/leader-desc.c): a descriptor, a term of history and a protocol
 * text, as a damaged or foreign ledger could hold them.
 *
 * The first byte picks the decoder, the rest is its input.  What decodes
 * must encode to the same bytes and decode again to the same value; a
 * decoded descriptor must take a define and a grant without breaking its
 * own invariant (the pin in force never below the defined version). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "desc-file.h"
#include "leader-desc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_ASSERT(cond)                                                      \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "%s:%d: fuzz assertion failed: %s\n", __FILE__,    \
                    __LINE__, #cond);                                          \
            abort();                                                           \
        }                                                                      \
    } while (0)

static void desc_case(const uint8_t *p, size_t n)
{
    struct ws_desc d, again;
    if (ws_desc_decode(&d, p, n) < 0)
        return;
    uint8_t buf[WS_DESC_MAX];
    size_t len = ws_desc_encode(&d, buf);
    FUZZ_ASSERT(len == n && memcmp(buf, p, n) == 0);
    FUZZ_ASSERT(ws_desc_decode(&again, buf, len) == 0);
    FUZZ_ASSERT(memcmp(&again.protocol, &d.protocol, sizeof d.protocol) == 0);
    FUZZ_ASSERT(ws_desc_pin(&d) == 0 || ws_desc_pin(&d) >= d.protocol.version);
    /* a campaign at the pin is admitted, one below it is not */
    if (ws_desc_pin(&d)) {
        struct ws_protocol at = d.protocol;
        at.version = ws_desc_pin(&d);
        FUZZ_ASSERT(ws_desc_admit(&d, &at) == 0);
        at.version--;
        FUZZ_ASSERT(at.version == 0 || ws_desc_admit(&d, &at) != 0);
        at.version = ws_desc_pin(&d) + (ws_desc_pin(&d) < UINT32_MAX);
        ws_desc_grant(&d, &at);
        FUZZ_ASSERT(ws_desc_pin(&d) == at.version);
    }
}

static void term_case(const uint8_t *p, size_t n)
{
    struct ws_term t;
    if (ws_term_decode(&t, p, n) < 0)
        return;
    uint8_t buf[WS_TERM_MAX];
    size_t len = ws_term_encode(&t, buf);
    FUZZ_ASSERT(len == n && memcmp(buf, p, n) == 0);
}

static void protocol_case(const uint8_t *p, size_t n)
{
    struct ws_protocol pr;
    if (ws_protocol_parse(p, n, &pr) < 0)
        return;
    char text[WS_PROTOCOL_TEXT];
    size_t len = ws_protocol_format(&pr, pr.version, text, sizeof text);
    FUZZ_ASSERT(len == n && memcmp(text, p, n) == 0);
}

static void count_err(void *ud, int line, const char *msg)
{
    (void)line;
    FUZZ_ASSERT(msg && *msg);
    ++*(int *)ud;
}

/* a descriptor file's text (protocol/desc-file.c): never read past its
 * bytes; a file without errors has its schema, a value only for a key it
 * gives, and capabilities already in their normal form */
static void file_case(const uint8_t *p, size_t n)
{
    struct coord_desc_file d;
    int errs = 0;
    int r = coord_desc_file_parse((const char *)p, n, &d, count_err, &errs);
    FUZZ_ASSERT(r == errs);
    if (r == 0) {
        FUZZ_ASSERT(d.given[COORD_DK_SCHEMA] && d.val[COORD_DK_SCHEMA] &&
                    !strcmp(d.val[COORD_DK_SCHEMA], COORD_DESC_SCHEMA));
        for (int k = 0; k < COORD_DK_COUNT; k++)
            FUZZ_ASSERT(d.given[k] || !d.val[k]);
        char again[sizeof d.capabilities];
        FUZZ_ASSERT(coord_desc_caps_normalize(d.capabilities, again, sizeof again) == NULL);
        FUZZ_ASSERT(!strcmp(again, d.capabilities));
        if (d.val[COORD_DK_FALLBACK])
            FUZZ_ASSERT(coord_desc_fallback_parse(d.val[COORD_DK_FALLBACK]) >= 0);
    }
    coord_desc_file_free(&d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    /* seeds written before the file case start 0, 1 or 2: still theirs */
    switch (data[0] % 4) {
    case 0: desc_case(data + 1, size - 1); break;
    case 1: term_case(data + 1, size - 1); break;
    case 2: protocol_case(data + 1, size - 1); break;
    default: file_case(data + 1, size - 1); break;
    }
    return 0;
}
