/* leader-desc.c - see leader-desc.h.
 *
 * Storage forms, all integers big-endian:
 *   descriptor: u8 format (1), u8 flags (1: defined), u32 version, u32
 *               ratchet, u64 max_hold_ms, u8 steal, u8 mode, u64 defined_ms,
 *               u8 name length + name, u8 fallback length + fallback;
 *               format 2 (only when one of these differs from its
 *               default, so format 1 bytes stay what they were): the same,
 *               then u8 if_available, u8 + lock name, u8 + capabilities
 *   term:       u8 format (1), u64 generation, u64 pid, u64 elected_ms, u64
 *               ended_ms, u8 mode, u8 reason, u32 version, u8 name length +
 *               name, u16 + client, u16 + instance, u16 + incident
 * A decoder checks every length against what is left and every enum
 * against its range, so a damaged value is refused, never trusted. */
#include <string.h>
#include "coord-codes.h"
#include "leader-desc.h"
#include "reasons.h"

void ws_desc_default(struct ws_desc *d)
{
    memset(d, 0, sizeof *d);
    d->steal = WS_STEAL_ALLOWED;
    d->mode = WS_MODE_ACTIVE;
}

uint32_t ws_desc_pin(const struct ws_desc *d)
{
    if (!d->protocol.name_len)
        return 0;
    return d->ratchet > d->protocol.version ? d->ratchet : d->protocol.version;
}

static bool same_name(const struct ws_protocol *a, const struct ws_protocol *b)
{
    return a->name_len == b->name_len && memcmp(a->name, b->name, a->name_len) == 0;
}

int ws_desc_define(struct ws_desc *d, const struct ws_patch *p, uint64_t now_ms)
{
    struct ws_desc n = *d;
    struct ws_desc def;
    ws_desc_default(&def);
    unsigned touch = p->set | p->reset;
    if (touch & WS_F_PROTOCOL) {
        const struct ws_protocol *np = (p->set & WS_F_PROTOCOL) ? &p->v.protocol
                                                                 : &def.protocol;
        uint32_t pin = ws_desc_pin(d);
        bool lowers = pin && (!np->name_len || !same_name(np, &d->protocol) ||
                              np->version < pin);
        if (lowers && !p->force)
            return COORD_EPROTOCOL_PINNED;
        bool renamed = !same_name(np, &d->protocol);
        n.protocol = *np;
        /* force (or a new name) starts the ratchet again from the defined
         * version; otherwise what was granted still counts */
        if (p->force || renamed)
            n.ratchet = 0;
    }
#define FIELD(flag, f) \
    if (p->set & (flag)) n.f = p->v.f; else if (p->reset & (flag)) n.f = def.f
    FIELD(WS_F_MAX_HOLD, max_hold_ms);
    FIELD(WS_F_STEAL, steal);
    FIELD(WS_F_MODE, mode);
    FIELD(WS_F_IF_AVAILABLE, if_available);
#undef FIELD
    if (p->set & WS_F_LOCK_NAME) {
        n.lock_name_len = p->v.lock_name_len;
        memcpy(n.lock_name, p->v.lock_name, p->v.lock_name_len);
    } else if (p->reset & WS_F_LOCK_NAME) {
        n.lock_name_len = 0;
    }
    if (p->set & WS_F_CAPS) {
        n.caps_len = p->v.caps_len;
        memcpy(n.caps, p->v.caps, p->v.caps_len);
    } else if (p->reset & WS_F_CAPS) {
        n.caps_len = 0;
    }
    if (p->set & WS_F_FALLBACK) {
        n.fallback_len = p->v.fallback_len;
        memcpy(n.fallback, p->v.fallback, p->v.fallback_len);
    } else if (p->reset & WS_F_FALLBACK) {
        n.fallback_len = 0;
    }
    n.defined = true;
    n.defined_ms = now_ms;
    *d = n;
    return 0;
}

int ws_desc_admit(const struct ws_desc *d, const struct ws_protocol *p)
{
    uint32_t pin = ws_desc_pin(d);
    if (!pin)
        return 0;
    if (!p->name_len || !same_name(p, &d->protocol) || p->version < pin)
        return COORD_EPROTOCOL_PINNED;
    return 0;
}

bool ws_desc_caps_missing(const struct ws_desc *d, const uint8_t *caps, size_t caps_len,
                          const char **name, size_t *len)
{
    const char *p = d->caps, *end = d->caps + d->caps_len;
    while (p < end) {
        const char *q = memchr(p, ',', (size_t)(end - p));
        size_t nl = q ? (size_t)(q - p) : (size_t)(end - p);
        bool found = false;
        for (size_t i = 0; i < caps_len && !found;) {
            size_t j = i;
            while (j < caps_len && caps[j] != ',')
                j++;
            size_t a = i, b = j;       /* trim spaces */
            while (a < b && caps[a] == ' ')
                a++;
            while (b > a && caps[b - 1] == ' ')
                b--;
            found = b - a == nl && memcmp(caps + a, p, nl) == 0;
            i = j + 1;
        }
        if (!found) {
            *name = p;
            *len = nl;
            return true;
        }
        if (!q)
            break;
        p = q + 1;
    }
    return false;
}

bool ws_desc_grant(struct ws_desc *d, const struct ws_protocol *p)
{
    if (!d->protocol.name_len || !same_name(p, &d->protocol) || p->version <= ws_desc_pin(d))
        return false;
    d->ratchet = p->version;
    return true;
}

static bool name_char(uint8_t c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '.' || c == '_' || c == '-';
}

int ws_protocol_parse(const uint8_t *s, size_t len, struct ws_protocol *p)
{
    size_t at = 0;
    while (at < len && s[at] != '@')
        at++;
    if (at == 0 || at > LIMIT_PROTOCOL_NAME || at + 1 >= len || len - at - 1 > 10)
        return -1;
    for (size_t i = 0; i < at; i++)
        if (!name_char(s[i]))
            return -1;
    uint64_t v = 0;
    for (size_t i = at + 1; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    if (v == 0 || v > UINT32_MAX || s[at + 1] == '0')
        return -1;
    memset(p, 0, sizeof *p);
    p->name_len = (uint8_t)at;
    memcpy(p->name, s, at);
    p->version = (uint32_t)v;
    return 0;
}

size_t ws_protocol_format(const struct ws_protocol *p, uint32_t version, char *buf, size_t cap)
{
    if (cap < WS_PROTOCOL_TEXT)
        return 0;
    memcpy(buf, p->name, p->name_len);
    size_t n = p->name_len;
    buf[n++] = '@';
    char digits[12];
    int k = 0;
    do {
        digits[k++] = (char)('0' + version % 10);
        version /= 10;
    } while (version);
    while (k)
        buf[n++] = digits[--k];
    buf[n] = 0;
    return n;
}

static const char *const steal_names[] = { "allowed", "incident-only", "never" };
static const char *const mode_names[] = { "active", "read-only", "shadow" };
static const char *const ifav_names[] = { "allowed", "never" };

const char *ws_steal_name(unsigned s) { return s < 3 ? steal_names[s] : "allowed"; }
const char *ws_mode_name(unsigned m) { return m < 3 ? mode_names[m] : "active"; }

static int lookup(const char *const *names, const uint8_t *s, size_t len)
{
    for (int i = 0; i < 3; i++)
        if (strlen(names[i]) == len && memcmp(names[i], s, len) == 0)
            return i;
    return -1;
}

int ws_steal_parse(const uint8_t *s, size_t len) { return lookup(steal_names, s, len); }
int ws_mode_parse(const uint8_t *s, size_t len) { return lookup(mode_names, s, len); }
const char *ws_ifav_name(unsigned v) { return v < 2 ? ifav_names[v] : "allowed"; }

int ws_ifav_parse(const uint8_t *s, size_t len)
{
    for (int i = 0; i < 2; i++)
        if (strlen(ifav_names[i]) == len && memcmp(ifav_names[i], s, len) == 0)
            return i;
    return -1;
}

/* ---- storage forms ---- */

struct wr { uint8_t *p; };
struct rd { const uint8_t *p; size_t left; bool bad; };

static void w8(struct wr *w, uint64_t v) { *w->p++ = (uint8_t)v; }
static void wn(struct wr *w, uint64_t v, int bytes)
{
    for (int i = bytes - 1; i >= 0; i--)
        *w->p++ = (uint8_t)(v >> (8 * i));
}
static void wbytes(struct wr *w, const void *s, size_t n, int lenbytes)
{
    wn(w, n, lenbytes);
    if (n)
        memcpy(w->p, s, n);
    w->p += n;
}

static uint64_t rn(struct rd *r, int bytes)
{
    if (r->bad || r->left < (size_t)bytes) {
        r->bad = true;
        return 0;
    }
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++)
        v = v << 8 | r->p[i];
    r->p += bytes;
    r->left -= (size_t)bytes;
    return v;
}

/* a length-prefixed string of at most cap bytes into out */
static size_t rbytes(struct rd *r, void *out, size_t cap, int lenbytes)
{
    size_t n = (size_t)rn(r, lenbytes);
    if (r->bad || n > cap || n > r->left) {
        r->bad = true;
        return 0;
    }
    if (n)
        memcpy(out, r->p, n);
    r->p += n;
    r->left -= n;
    return n;
}

static bool protocol_ok(const struct ws_protocol *p)
{
    if (!p->name_len)
        return true;
    for (unsigned i = 0; i < p->name_len; i++)
        if (!name_char((uint8_t)p->name[i]))
            return false;
    return p->version > 0;
}

size_t ws_desc_encode(const struct ws_desc *d, uint8_t *buf)
{
    struct wr w = { buf };
    bool v2 = d->if_available || d->lock_name_len || d->caps_len;
    w8(&w, v2 ? 2 : 1);
    w8(&w, d->defined ? 1 : 0);
    wn(&w, d->protocol.version, 4);
    wn(&w, d->ratchet, 4);
    wn(&w, d->max_hold_ms, 8);
    w8(&w, d->steal);
    w8(&w, d->mode);
    wn(&w, d->defined_ms, 8);
    wbytes(&w, d->protocol.name, d->protocol.name_len, 1);
    wbytes(&w, d->fallback, d->fallback_len, 1);
    if (v2) {
        w8(&w, d->if_available);
        wbytes(&w, d->lock_name, d->lock_name_len, 1);
        wbytes(&w, d->caps, d->caps_len, 1);
    }
    return (size_t)(w.p - buf);
}

int ws_desc_decode(struct ws_desc *d, const uint8_t *buf, size_t len)
{
    struct rd r = { buf, len, false };
    ws_desc_default(d);
    uint64_t format = rn(&r, 1);
    if (format != 1 && format != 2)
        return -1;
    uint64_t flags = rn(&r, 1);
    d->defined = flags & 1;
    d->protocol.version = (uint32_t)rn(&r, 4);
    d->ratchet = (uint32_t)rn(&r, 4);
    d->max_hold_ms = rn(&r, 8);
    d->steal = (uint8_t)rn(&r, 1);
    d->mode = (uint8_t)rn(&r, 1);
    d->defined_ms = rn(&r, 8);
    d->protocol.name_len = (uint8_t)rbytes(&r, d->protocol.name, LIMIT_PROTOCOL_NAME, 1);
    d->fallback_len = (uint8_t)rbytes(&r, d->fallback, LIMIT_FALLBACK, 1);
    bool v2_ok = true;
    if (format == 2) {
        d->if_available = (uint8_t)rn(&r, 1);
        d->lock_name_len = (uint8_t)rbytes(&r, d->lock_name, LIMIT_LOCK_NAME, 1);
        d->caps_len = (uint8_t)rbytes(&r, d->caps, LIMIT_CAPS_TEXT, 1);
        /* canonical: format 2 only when it says something format 1 cannot */
        v2_ok = d->if_available <= WS_IFAV_NEVER &&
                (d->if_available || d->lock_name_len || d->caps_len) &&
                (!d->lock_name_len || d->lock_name[0] != '-');
    }
    if (!v2_ok || r.bad || r.left || flags > 1 || d->steal > WS_STEAL_NEVER || d->mode > WS_MODE_SHADOW ||
        !protocol_ok(&d->protocol) || d->max_hold_ms > UINT32_MAX * 1000ull) {
        ws_desc_default(d);
        return -1;
    }
    return 0;
}

size_t ws_term_encode(const struct ws_term *t, uint8_t *buf)
{
    struct wr w = { buf };
    w8(&w, 1);
    wn(&w, t->generation, 8);
    wn(&w, t->pid, 8);
    wn(&w, t->elected_ms, 8);
    wn(&w, t->ended_ms, 8);
    w8(&w, t->mode);
    w8(&w, t->reason);
    wn(&w, t->protocol.version, 4);
    wbytes(&w, t->protocol.name, t->protocol.name_len, 1);
    wbytes(&w, t->client, t->client_len, 2);
    wbytes(&w, t->instance, t->instance_len, 2);
    wbytes(&w, t->incident, t->incident_len, 2);
    return (size_t)(w.p - buf);
}

int ws_term_decode(struct ws_term *t, const uint8_t *buf, size_t len)
{
    struct rd r = { buf, len, false };
    memset(t, 0, sizeof *t);
    if (rn(&r, 1) != 1)
        return -1;
    t->generation = rn(&r, 8);
    t->pid = rn(&r, 8);
    t->elected_ms = rn(&r, 8);
    t->ended_ms = rn(&r, 8);
    t->mode = (uint8_t)rn(&r, 1);
    t->reason = (uint8_t)rn(&r, 1);
    t->protocol.version = (uint32_t)rn(&r, 4);
    t->protocol.name_len = (uint8_t)rbytes(&r, t->protocol.name, LIMIT_PROTOCOL_NAME, 1);
    t->client_len = (uint16_t)rbytes(&r, t->client, sizeof t->client, 2);
    t->instance_len = (uint16_t)rbytes(&r, t->instance, sizeof t->instance, 2);
    t->incident_len = (uint16_t)rbytes(&r, t->incident, sizeof t->incident, 2);
    if (r.bad || r.left || t->mode > WS_MODE_SHADOW || (t->reason && !reason_name(t->reason)) ||
        !protocol_ok(&t->protocol)) {
        memset(t, 0, sizeof *t);
        return -1;
    }
    return 0;
}
