/* desc-file.c - see desc-file.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "desc-file.h"

static const char *const key_names[COORD_DK_COUNT] = {
    "schema", "workstream", "origin", "protocol", "maxHold", "steal", "fallback",
    "canonicalFence", "mode", "disabled", "lockName", "capabilities", "ifAvailable",
};

int coord_desc_fallback_parse(const char *s)
{
    if (!s)
        return -1;
    if (!strcmp(s, "FAIL_CLOSED"))
        return COORD_DF_FAIL_CLOSED;
    if (!strcmp(s, "READ_ONLY") || !strcmp(s, "SERVER_COORDINATED"))
        return COORD_DF_READ_ONLY;
    if (!strcmp(s, "SINGLE_INSTANCE"))
        return COORD_DF_SINGLE_INSTANCE;
    return -1;
}

static bool cap_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '.' || c == '_' || c == '-' || c == ':' || c == '/' || c == '@' || c == '+';
}

const char *coord_desc_caps_normalize(const char *s, char *out, size_t size)
{
    size_t len = strlen(s), n = 0, count = 0;
    while (len && (s[len - 1] == ' ' || s[len - 1] == '\t'))
        len--;
    while (len && (*s == ' ' || *s == '\t'))
        s++, len--;
    if (len && *s == '[') {
        if (s[len - 1] != ']')
            return "a list in [ ] lacks its closing ]";
        s++;
        len -= 2;
    }
    if (size)
        out[0] = '\0';
    const char *end = s + len;
    while (s < end && (*s == ' ' || *s == '\t'))
        s++;                           /* "[ ]": none */
    while (s < end) {
        while (s < end && (*s == ' ' || *s == '\t'))
            s++;
        const char *name = s;
        while (s < end && *s != ',')
            s++;
        const char *ne = s;
        while (ne > name && (ne[-1] == ' ' || ne[-1] == '\t'))
            ne--;
        size_t nl = (size_t)(ne - name);
        if (s < end)
            s++;                       /* the comma */
        if (!nl)
            return "an empty capability name";
        if (nl > COORD_DESC_CAP_LEN)
            return "a capability name is longer than 64 bytes";
        for (size_t i = 0; i < nl; i++)
            if (!cap_char(name[i]))
                return "capability names are A-Z a-z 0-9 . _ - : / @ +";
        if (++count > COORD_DESC_CAPS_MAX)
            return "more than 16 capabilities";
        /* no name twice */
        for (const char *p = out; n && *p;) {
            const char *q = strchr(p, ',');
            size_t pl = q ? (size_t)(q - p) : strlen(p);
            if (pl == nl && !memcmp(p, name, nl))
                return "a capability is named twice";
            p = q ? q + 1 : p + pl;
        }
        if (n + (n ? 1 : 0) + nl + 1 > size)
            return "too many capabilities";
        if (n)
            out[n++] = ',';
        memcpy(out + n, name, nl);
        n += nl;
        out[n] = '\0';
    }
    return NULL;
}

bool coord_parse_duration(const char *s, uint64_t *ms)
{
    static const struct { const char *unit; double ms; } units[] = {
        { "ms", 1 }, { "s", 1000 }, { "m", 60000 }, { "h", 3600000 }, { "", 1000 },
    };
    if (!s)
        return false;
    /* digits, at most one '.', then the unit: strtod alone takes 0x10 */
    const char *p = s;
    size_t digits = 0;
    while (*p >= '0' && *p <= '9')
        p++, digits++;
    if (*p == '.') {
        p++;
        while (*p >= '0' && *p <= '9')
            p++, digits++;
    }
    if (!digits)
        return false;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end != p || !(v >= 0))
        return false;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcmp(end, units[i].unit) != 0)
            continue;
        double r = v * units[i].ms;
        if (r > 1099511627776.0)
            return false;
        *ms = (uint64_t)(r + 0.5);
        if (*ms == 0 && v > 0)
            *ms = 1;
        return true;
    }
    return false;
}

static bool is_space(char c)
{
    return c == ' ' || c == '\t';
}

/* s printable (other bytes as '?'), cut at 64, into out[80]. */
static const char *shown(const char *s, char *out)
{
    size_t n = 0;
    for (; *s && n < 64; s++)
        out[n++] = (*s >= 0x20 && *s < 0x7f) ? *s : '?';
    if (*s)
        out[n++] = '.', out[n++] = '.', out[n++] = '.';
    out[n] = '\0';
    return out;
}

/* The value after "key:" in place (quotes removed, comment cut): the
 * string, or NULL for nil; *err set on a malformed value. */
static char *file_value(char *v, const char **err)
{
    while (is_space(*v))
        v++;
    if (*v == '"' || *v == '\'') {
        char q = *v++, *out = v, *p = v;
        for (;; p++) {
            if (!*p) {
                *err = "unterminated quote";
                return NULL;
            }
            if (q == '\'' && *p == '\'' && p[1] == '\'') {
                *out++ = '\'';
                p++;
            } else if (*p == q) {
                break;
            } else if (q == '"' && *p == '\\') {
                if (p[1] != '"' && p[1] != '\\') {
                    *err = "only \\\" and \\\\ may be escaped";
                    return NULL;
                }
                *out++ = *++p;
            } else {
                *out++ = *p;
            }
        }
        char *rest = p + 1;
        while (is_space(*rest))
            rest++;
        if (*rest && *rest != '#') {
            *err = "text after the closing quote";
            return NULL;
        }
        *out = '\0';
        return v;
    }
    /* plain: up to a comment (a # after a space), trailing spaces cut */
    char *end = v;
    for (char *p = v; *p; p++) {
        if (*p == '#' && (p == v || is_space(p[-1])))
            break;
        end = p + 1;
    }
    while (end > v && is_space(end[-1]))
        end--;
    *end = '\0';
    if (!*v || !strcmp(v, "~") || !strcmp(v, "null"))
        return NULL;
    return v;
}

void coord_desc_file_free(struct coord_desc_file *d)
{
    free(d->buf);
    d->buf = NULL;
}

int coord_desc_file_read(const char *path, struct coord_desc_file *d,
                         coord_desc_err_fn err, void *ud)
{
    memset(d, 0, sizeof *d);
    FILE *f = !strcmp(path, "-") ? stdin : fopen(path, "r");
    if (!f) {
        err(ud, 0, strerror(errno));
        return 1;
    }
    char *text = malloc(COORD_DESC_FILE_MAX + 1);
    size_t n = text ? fread(text, 1, COORD_DESC_FILE_MAX + 1, f) : 0;
    bool read_err = ferror(f);
    if (f != stdin)
        fclose(f);
    if (!text) {
        err(ud, 0, "out of memory");
        return 1;
    }
    if (read_err) {
        free(text);
        err(ud, 0, "read error");
        return 1;
    }
    int errors = coord_desc_file_parse(text, n, d, err, ud);
    free(text);
    return errors;
}

int coord_desc_file_parse(const char *text, size_t n, struct coord_desc_file *d,
                          coord_desc_err_fn err, void *ud)
{
    char msg[256], e1[80];
    memset(d, 0, sizeof *d);
    if (n > COORD_DESC_FILE_MAX) {
        err(ud, 0, "larger than 64 KiB");
        return 1;
    }
    if (memchr(text, '\0', n)) {
        err(ud, 0, "not a text file (NUL byte)");
        return 1;
    }
    d->buf = malloc(n + 1);
    if (!d->buf) {
        err(ud, 0, "out of memory");
        return 1;
    }
    memcpy(d->buf, text, n);
    d->buf[n] = '\0';

    int errors = 0;
    int lineno = 0;
#define FILE_ERR(...) do { \
        snprintf(msg, sizeof msg, __VA_ARGS__); \
        err(ud, lineno, msg); \
        errors++; \
    } while (0)
    for (char *line = d->buf, *next; line; line = next) {
        lineno++;
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        size_t len = strlen(line);
        if (len && line[len - 1] == '\r')
            line[--len] = '\0';
        char *p = line;
        while (is_space(*p))
            p++;
        if (!*p || *p == '#')
            continue;
        if (p != line) {
            FILE_ERR("indented line (nested values are not part of %s)", COORD_DESC_SCHEMA);
            continue;
        }
        char *colon = strchr(p, ':');
        if (!colon) {
            FILE_ERR("expected \"key: value\"");
            continue;
        }
        char *kend = colon;
        while (kend > p && is_space(kend[-1]))
            kend--;
        *kend = '\0';
        size_t k = 0;
        while (k < COORD_DK_COUNT && strcmp(key_names[k], p) != 0)
            k++;
        if (k == COORD_DK_COUNT) {
            FILE_ERR("unknown key '%s'", shown(p, e1));
            continue;
        }
        if (d->given[k]) {
            FILE_ERR("key '%s' given twice", key_names[k]);
            continue;
        }
        d->given[k] = true;
        const char *verr = NULL;
        char *v = file_value(colon + 1, &verr);
        if (verr) {
            FILE_ERR("%s: %s", key_names[k], verr);
            continue;
        }
        d->val[k] = v;
        switch (k) {
        case COORD_DK_SCHEMA:
            if (!v || strcmp(v, COORD_DESC_SCHEMA) != 0)
                FILE_ERR("schema must be %s, not %s", COORD_DESC_SCHEMA,
                         v ? shown(v, e1) : "empty");
            break;
        case COORD_DK_WORKSTREAM:
            if (!v)
                FILE_ERR("workstream: empty");
            break;
        case COORD_DK_MAX_HOLD:
            if (v && !coord_parse_duration(v, &d->max_hold_ms))
                FILE_ERR("maxHold: not a duration (like 30s, 500ms, 2m): %s", shown(v, e1));
            break;
        case COORD_DK_FALLBACK:
            if (v && coord_desc_fallback_parse(v) < 0)
                FILE_ERR("fallback must be FAIL_CLOSED, READ_ONLY, SERVER_COORDINATED or "
                         "SINGLE_INSTANCE, not %s", shown(v, e1));
            break;
        case COORD_DK_CAPABILITIES: {
            const char *cerr = v ? coord_desc_caps_normalize(v, d->capabilities,
                                                             sizeof d->capabilities)
                                 : NULL;
            if (cerr)
                FILE_ERR("capabilities: %s", cerr);
            break;
        }
        case COORD_DK_LOCK_NAME:
            if (v && (v[0] == '-' || strlen(v) > 200))
                FILE_ERR("lockName must be 1..200 bytes, not starting with '-' (the "
                         "broker's names)");
            break;
        case COORD_DK_IF_AVAILABLE:
            if (v && strcmp(v, "allowed") != 0 && strcmp(v, "never") != 0)
                FILE_ERR("ifAvailable must be allowed or never, not %s", shown(v, e1));
            break;
        case COORD_DK_DISABLED:
            if (v && !strcmp(v, "true"))
                d->disabled = true;
            else if (v && !strcmp(v, "false"))
                d->disabled = false;
            else
                FILE_ERR("disabled must be true or false, not %s", v ? shown(v, e1) : "empty");
            break;
        }
    }
#undef FILE_ERR
    if (!d->given[COORD_DK_SCHEMA]) {
        snprintf(msg, sizeof msg, "no schema (schema: %s)", COORD_DESC_SCHEMA);
        err(ud, 0, msg);
        errors++;
    }
    return errors;
}
