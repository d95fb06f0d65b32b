/* leader-desc.h - the values leadership stores: a workstream's descriptor
 * (crossTabLeader.v1: protocol pin, max hold, steal policy, rollout mode,
 * fallback), a term of its history, and their names on the wire.
 *
 * Pure data and pure functions: no I/O, no allocation.  Every ledger
 * backend (leader-lmdb.c, a remote one) stores these as the byte strings
 * ws_desc_encode / ws_term_encode make, and decodes with the validating
 * decoders (a fuzz target each), so the rules of pinning and of a define's
 * merge live here once (ws_desc_define, ws_desc_grant), not per backend. */
#ifndef COORD_LEADER_DESC_H
#define COORD_LEADER_DESC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "coord-wire-limits.h"


enum ws_steal { WS_STEAL_ALLOWED, WS_STEAL_INCIDENT_ONLY, WS_STEAL_NEVER };
/* if_available campaigns: allowed (the default) or refused (POLICY) */
enum ws_ifav { WS_IFAV_ALLOWED, WS_IFAV_NEVER };
enum ws_mode { WS_MODE_ACTIVE, WS_MODE_READ_ONLY, WS_MODE_SHADOW };

struct ws_protocol {
    uint8_t name_len;              /* 0: none */
    char name[LIMIT_PROTOCOL_NAME];
    uint32_t version;
};

struct ws_desc {
    bool defined;                  /* a define was stored */
    struct ws_protocol protocol;   /* as defined (name_len 0: no pin) */
    uint32_t ratchet;              /* the highest version granted under its name */
    uint64_t max_hold_ms;          /* 0: none */
    uint8_t steal;                 /* enum ws_steal */
    uint8_t mode;                  /* enum ws_mode */
    uint8_t fallback_len;          /* 0: none */
    char fallback[LIMIT_FALLBACK];
    uint64_t defined_ms;           /* the last define */
    uint8_t if_available;          /* enum ws_ifav */
    uint8_t lock_name_len;         /* 0: the default, "-leader/<workstream>" */
    char lock_name[LIMIT_LOCK_NAME];
    uint8_t caps_len;              /* 0: none required */
    char caps[LIMIT_CAPS_TEXT];    /* "a,b": every campaign must name each */
};

/* A define: the fields in `set` take their value from v, those in `reset`
 * go back to their default, the others keep theirs. */
enum {
    WS_F_PROTOCOL = 1, WS_F_MAX_HOLD = 2, WS_F_STEAL = 4, WS_F_MODE = 8, WS_F_FALLBACK = 16,
    WS_F_LOCK_NAME = 32, WS_F_CAPS = 64, WS_F_IF_AVAILABLE = 128,
};
struct ws_patch {
    unsigned set, reset;
    bool force;
    struct ws_desc v;
};

struct ws_term {
    uint64_t generation;
    uint64_t pid;
    uint64_t elected_ms, ended_ms;  /* ended_ms 0: live, or unknown (restart) */
    uint8_t mode;                   /* enum ws_mode when elected */
    uint8_t reason;                 /* enum reason; REASON_NONE while live */
    struct ws_protocol protocol;    /* the campaign's, name_len 0 when none */
    uint16_t client_len, instance_len, incident_len;
    char client[LIMIT_CLIENT_NAME];
    char instance[LIMIT_INSTANCE];
    char incident[LIMIT_INCIDENT];  /* incident_len 0: not an incident term */
};

/* The defaults: what a never-defined workstream behaves as. */
void ws_desc_default(struct ws_desc *d);
/* The pin in force (0 when no protocol is defined). */
uint32_t ws_desc_pin(const struct ws_desc *d);

/* Applies a define to d (at now_ms).  0, or COORD_EPROTOCOL_PINNED (d
 * unchanged) when it would lower, rename or remove the pin without force. */
int ws_desc_define(struct ws_desc *d, const struct ws_patch *p, uint64_t now_ms);
/* May a campaign with protocol p (name_len 0: none) be granted?  0 or
 * COORD_EPROTOCOL_PINNED. */
int ws_desc_admit(const struct ws_desc *d, const struct ws_protocol *p);
/* The first capability of d's that the campaign's list caps ("a,b", NULL:
 * none) lacks, into *name and *len: true when one is missing. */
bool ws_desc_caps_missing(const struct ws_desc *d, const uint8_t *caps, size_t caps_len,
                          const char **name, size_t *len);
/* A campaign with p was granted: raise the ratchet.  True when d changed. */
bool ws_desc_grant(struct ws_desc *d, const struct ws_protocol *p);

/* "name@N" -> p.  0, or -1 when malformed. */
int ws_protocol_parse(const uint8_t *s, size_t len, struct ws_protocol *p);
/* "name@N" into buf (at least LIMIT_PROTOCOL_NAME + 12 bytes); its length. */
size_t ws_protocol_format(const struct ws_protocol *p, uint32_t version, char *buf, size_t cap);
#define WS_PROTOCOL_TEXT (LIMIT_PROTOCOL_NAME + 12)

/* Wire names, and back (-1 unknown). */
const char *ws_steal_name(unsigned s);
const char *ws_mode_name(unsigned m);
int ws_steal_parse(const uint8_t *s, size_t len);
const char *ws_ifav_name(unsigned v);
int ws_ifav_parse(const uint8_t *s, size_t len);
int ws_mode_parse(const uint8_t *s, size_t len);

/* Storage forms.  Encoders return the length (cap at least WS_*_MAX);
 * decoders 0, or -1 for bytes that are not one (never read past len). */
#define WS_DESC_MAX (64 + LIMIT_PROTOCOL_NAME + LIMIT_FALLBACK + LIMIT_LOCK_NAME + \
                     LIMIT_CAPS_TEXT)
#define WS_TERM_MAX (64 + LIMIT_PROTOCOL_NAME + LIMIT_CLIENT_NAME + LIMIT_INSTANCE + LIMIT_INCIDENT)
size_t ws_desc_encode(const struct ws_desc *d, uint8_t *buf);
int ws_desc_decode(struct ws_desc *d, const uint8_t *buf, size_t len);
size_t ws_term_encode(const struct ws_term *t, uint8_t *buf);
int ws_term_decode(struct ws_term *t, const uint8_t *buf, size_t len);

#endif
