/* desc-file.h - a workstream descriptor file (crossTabLeader.v1), the one
 * parser the broker (its config dir) and coordctl (leader define -f) share.
 *
 * The format is a YAML subset: `key: value` lines, `#` comments and blank
 * lines, values plain or quoted ('...' or "...", with \" and \\ inside
 * double quotes); an empty value, `~` or `null` is nil.  Keys: schema
 * (required, crossTabLeader.v1), workstream, origin (the scope; absent:
 * the default scope ""), lockName, protocol, capabilities (a list: "a, b"
 * or "[a, b]"), maxHold (a decimal duration with a unit), steal,
 * ifAvailable, fallback (one of the COORD_FALLBACK_* names),
 * canonicalFence, mode, disabled (true|false).
 * Any other key is an error naming it and its line, as is a key given
 * twice.  Pure: no I/O but coord_desc_file_read, no global state; the
 * fuzz target fuzz_leader_desc parses arbitrary text with it. */
#ifndef COORD_PROTO_DESC_FILE_H
#define COORD_PROTO_DESC_FILE_H

#include <stdbool.h>
#include <stdint.h>

#define COORD_DESC_SCHEMA "crossTabLeader.v1"
/* A descriptor file is small: a longer one is a mistake (the wrong file). */
#define COORD_DESC_FILE_MAX (64 * 1024)

enum coord_desc_key {
    COORD_DK_SCHEMA, COORD_DK_WORKSTREAM, COORD_DK_ORIGIN, COORD_DK_PROTOCOL,
    COORD_DK_MAX_HOLD, COORD_DK_STEAL, COORD_DK_FALLBACK, COORD_DK_CANONICAL_FENCE,
    COORD_DK_MODE, COORD_DK_DISABLED, COORD_DK_LOCK_NAME, COORD_DK_CAPABILITIES,
    COORD_DK_IF_AVAILABLE, COORD_DK_COUNT
};

/* What a client does when the broker cannot be reached (fallback:). */
enum coord_desc_fallback {
    COORD_DF_FAIL_CLOSED,          /* no file, no fallback, or FAIL_CLOSED */
    COORD_DF_READ_ONLY,            /* READ_ONLY or SERVER_COORDINATED */
    COORD_DF_SINGLE_INSTANCE,      /* SINGLE_INSTANCE: only when the runner chose it */
};

struct coord_desc_file {
    char *buf;                        /* owned: the text, values cut in place */
    bool given[COORD_DK_COUNT];       /* the key is in the file */
    const char *val[COORD_DK_COUNT];  /* its value (into buf); NULL: nil */
    uint64_t max_hold_ms;             /* when maxHold is given non-nil */
    bool disabled;                    /* when disabled is given non-nil */
    char capabilities[256];           /* capabilities normalised: "a,b" */
};

/* Called once per error: line 0 for the whole file. */
typedef void (*coord_desc_err_fn)(void *ud, int line, const char *msg);

/* Reads and parses path ("-": stdin) into *d (free with
 * coord_desc_file_free, also after an error).  Returns the number of
 * errors, each reported through err. */
int coord_desc_file_read(const char *path, struct coord_desc_file *d,
                         coord_desc_err_fn err, void *ud);
/* The same for the n bytes of text (copied; any bytes: a NUL or more
 * than 64 KiB is an error). */
int coord_desc_file_parse(const char *text, size_t n, struct coord_desc_file *d,
                          coord_desc_err_fn err, void *ud);
void coord_desc_file_free(struct coord_desc_file *d);

/* A fallback name -> its action; -1 when it is none of FAIL_CLOSED,
 * READ_ONLY, SERVER_COORDINATED, SINGLE_INSTANCE. */
int coord_desc_fallback_parse(const char *s);

/* A capability list ("a, b", "[a, b]", "a,b") into out as "a,b" (at most
 * 16 names of 1..64 bytes of A-Z a-z 0-9 . _ - : / @ +, no name twice;
 * "" and "[]" give "").  NULL on success, else what is wrong. */
const char *coord_desc_caps_normalize(const char *s, char *out, size_t size);
#define COORD_DESC_CAPS_MAX 16
#define COORD_DESC_CAP_LEN 64

/* "30s", "500ms", "2m", "1h", "1.5s", a bare number is seconds: decimal
 * digits only (no sign, hex or exponent).  True with *ms set. */
bool coord_parse_duration(const char *s, uint64_t *ms);

#endif
