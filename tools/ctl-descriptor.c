/* ctl-descriptor.c - coordctl's workstream descriptors:
 *   leader define WORKSTREAM [--protocol NAME@N] [--max-hold DURATION]
 *                 [--steal P] [--mode M] [--fallback F]
 *                 [--canonical-fence L] [--force]
 *   leader define [WORKSTREAM] -f FILE [--force]
 *   leader describe WORKSTREAM
 *
 * A define changes only the fields it names; an empty value (--protocol=)
 * sends nil, which puts the field back to its default.  FILE is the
 * design note's descriptor format, a YAML subset: `key: value` lines,
 * `#` comments and blank lines, values plain or quoted ('...' or "...",
 * with \" and \\ inside double quotes); an empty value, `~` or `null` is
 * nil.  Keys: schema (required, crossTabLeader.v1), workstream, protocol,
 * maxHold (a duration), steal, fallback, canonicalFence, mode; any other
 * key is an error naming it and its line, as is a key given twice. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "coordctl.h"

/* A descriptor file is small: a longer one is a mistake (the wrong file). */
#define DESC_FILE_MAX (64 * 1024)
#define DESC_SCHEMA "crossTabLeader.v1"

bool ctl_parse_duration(const char *s, uint64_t *ms)
{
    static const struct { const char *unit; double ms; } units[] = {
        { "ms", 1 }, { "s", 1000 }, { "m", 60000 }, { "h", 3600000 }, { "", 1000 },
    };
    if (!s || !((*s >= '0' && *s <= '9') || *s == '.'))
        return false;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || !(v >= 0))
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

/* ---- the file ---- */

struct desc_input {
    coord_leader_define_opts o;
    const char *workstream;     /* from the file (into buf) or argv */
    char *buf;                  /* the file's text, values cut in place */
};

static const struct {
    const char *key;
    unsigned bit;               /* 0: schema, workstream */
} file_keys[] = {
    { "schema", 0 },
    { "workstream", 0 },
    { "protocol", COORD_DESC_PROTOCOL },
    { "maxHold", COORD_DESC_MAX_HOLD },
    { "steal", COORD_DESC_STEAL },
    { "fallback", COORD_DESC_FALLBACK },
    { "canonicalFence", COORD_DESC_CANONICAL_FENCE },
    { "mode", COORD_DESC_MODE },
};
#define N_FILE_KEYS (sizeof file_keys / sizeof file_keys[0])

static bool is_space(char c)
{
    return c == ' ' || c == '\t';
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

/* Parses FILE into *in.  0, or an exit status after printing the error
 * ("coordctl: leader define: FILE:LINE: ..."). */
static int read_desc_file(const char *path, struct desc_input *in)
{
    FILE *f = !strcmp(path, "-") ? stdin : fopen(path, "r");
    if (!f) {
        fprintf(stderr, "coordctl: leader define: %s: %s\n", path, strerror(errno));
        return CTL_EXIT_USAGE;
    }
    in->buf = malloc(DESC_FILE_MAX + 1);
    size_t n = in->buf ? fread(in->buf, 1, DESC_FILE_MAX + 1, f) : 0;
    bool read_err = ferror(f);
    if (f != stdin)
        fclose(f);
    if (!in->buf) {
        fprintf(stderr, "coordctl: leader define: out of memory\n");
        return CTL_EXIT_FAIL;
    }
    if (read_err || n > DESC_FILE_MAX) {
        fprintf(stderr, "coordctl: leader define: %s: %s\n", path,
                read_err ? "read error" : "larger than 64 KiB");
        return CTL_EXIT_USAGE;
    }
    in->buf[n] = '\0';
    if (memchr(in->buf, '\0', n)) {
        fprintf(stderr, "coordctl: leader define: %s: not a text file (NUL byte)\n", path);
        return CTL_EXIT_USAGE;
    }

    int errors = 0;
    bool seen[N_FILE_KEYS] = { false };
    int lineno = 0;
    for (char *line = in->buf, *next; line; line = next) {
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
#define FILE_ERR(...) do { \
            fprintf(stderr, "coordctl: leader define: %s:%d: ", path, lineno); \
            fprintf(stderr, __VA_ARGS__); \
            fputc('\n', stderr); \
            errors++; \
        } while (0)
        if (p != line) {
            FILE_ERR("indented line (nested values are not part of %s)", DESC_SCHEMA);
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
        char *ke = ctl_escape(p, strlen(p));
        size_t k = 0;
        while (k < N_FILE_KEYS && strcmp(file_keys[k].key, p) != 0)
            k++;
        if (k == N_FILE_KEYS) {
            FILE_ERR("unknown key '%s'", ke ? ke : "?");
            free(ke);
            continue;
        }
        if (seen[k]) {
            FILE_ERR("key '%s' given twice", ke ? ke : "?");
            free(ke);
            continue;
        }
        free(ke);
        seen[k] = true;
        const char *verr = NULL;
        char *v = file_value(colon + 1, &verr);
        if (verr) {
            FILE_ERR("%s: %s", file_keys[k].key, verr);
            continue;
        }
        unsigned bit = file_keys[k].bit;
        if (k == 0) {
            if (!v || strcmp(v, DESC_SCHEMA) != 0) {
                char *e = v ? ctl_escape(v, strlen(v)) : NULL;
                FILE_ERR("schema must be %s, not %s", DESC_SCHEMA,
                         v ? (e ? e : "?") : "empty");
                free(e);
            }
        } else if (k == 1) {
            if (!v)
                FILE_ERR("workstream: empty");
            in->workstream = v;
        } else if (!v) {
            in->o.reset |= bit;
        } else if (bit == COORD_DESC_MAX_HOLD) {
            if (!ctl_parse_duration(v, &in->o.max_hold_ms)) {
                char *e = ctl_escape(v, strlen(v));
                FILE_ERR("maxHold: not a duration (like 30s, 500ms, 2m): %s", e ? e : "?");
                free(e);
            }
            in->o.set |= bit;
        } else {
            in->o.set |= bit;
            switch (bit) {
            case COORD_DESC_PROTOCOL: in->o.protocol = v; break;
            case COORD_DESC_STEAL: in->o.steal = v; break;
            case COORD_DESC_FALLBACK: in->o.fallback = v; break;
            case COORD_DESC_CANONICAL_FENCE: in->o.canonical_fence = v; break;
            case COORD_DESC_MODE: in->o.mode = v; break;
            }
        }
#undef FILE_ERR
    }
    if (!seen[0]) {
        fprintf(stderr, "coordctl: leader define: %s: no schema (schema: %s)\n", path,
                DESC_SCHEMA);
        errors++;
    }
    return errors ? CTL_EXIT_USAGE : 0;
}

/* ---- output ---- */

/* s as JSON by libcoord's rule (coordctl(1)): UTF-8 as it is, other
 * bytes as {"base64": ...}. */
static void json_string(const char *s)
{
    char *j = coord_json_text(s, strlen(s));
    fputs(j ? j : "null", stdout);
    free(j);
}

static void json_field(const char *key, const char *v, bool comma)
{
    printf("%s\"%s\":", comma ? "," : "", key);
    if (*v)
        json_string(v);
    else
        fputs("null", stdout);
}

static void add_str(struct ctl_table *t, const char *name, const char *v)
{
    char *e = ctl_escape(v, strlen(v));
    ctl_table_add(t, name, !*v ? "none" : e ? e : "?");
    free(e);
}

static int print_descriptor(struct ctl *ctl, const char *ws, const coord_leader_descriptor *d)
{
    if (ctl->json) {
        printf("{\"descriptor\":{\"workstream\":");
        json_string(ws);
        json_field("protocol", d->protocol, true);
        json_field("pinned_protocol", d->pinned_protocol, true);
        printf(",\"max_hold_ms\":%llu", (unsigned long long)d->max_hold_ms);
        json_field("steal", d->steal, true);
        json_field("mode", d->mode, true);
        json_field("fallback", d->fallback, true);
        json_field("canonical_fence", d->canonical_fence, true);
        printf(",\"defined_ms\":%llu}}\n", (unsigned long long)d->defined_ms);
        return CTL_EXIT_OK;
    }
    struct ctl_table t = { 0 };
    add_str(&t, "workstream", ws);
    add_str(&t, "protocol", d->protocol);
    add_str(&t, "pinned protocol", d->pinned_protocol);
    char dur[64] = "none";
    if (d->max_hold_ms)
        ctl_format_duration(dur, sizeof dur, d->max_hold_ms);
    ctl_table_add(&t, "max hold", dur);
    add_str(&t, "steal", d->steal);
    add_str(&t, "mode", d->mode);
    add_str(&t, "fallback", d->fallback);
    add_str(&t, "canonical fence", d->canonical_fence);
    char when[64] = "-";
    time_t sec = (time_t)(d->defined_ms / 1000);
    struct tm tm;
    if (d->defined_ms && localtime_r(&sec, &tm))
        strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
    ctl_table_add(&t, "defined", when);
    return ctl_table_print(&t);
}

/* ---- coordctl leader define ---- */

/* A flag's string value: "" sends nil. */
static void flag_str(coord_leader_define_opts *o, unsigned bit, const char **field,
                     const char *v)
{
    if (!*v) {
        o->reset |= bit;
        o->set &= ~bit;
    } else {
        o->set |= bit;
        o->reset &= ~bit;
        *field = v;
    }
}

int ctl_leader_define(struct ctl *ctl, int argc, char **argv)
{
    static const struct option longopts[] = {
        { "protocol", required_argument, NULL, 'P' },
        { "max-hold", required_argument, NULL, 'H' },
        { "steal", required_argument, NULL, 'S' },
        { "mode", required_argument, NULL, 'M' },
        { "fallback", required_argument, NULL, 'F' },
        { "canonical-fence", required_argument, NULL, 'C' },
        { "force", no_argument, NULL, 'x' },
        { "file", required_argument, NULL, 'f' },
        { "json", no_argument, NULL, 'j' },
        { NULL, 0, NULL, 0 },
    };
    struct desc_input flags, in;
    memset(&flags, 0, sizeof flags);
    memset(&in, 0, sizeof in);
    const char *file = NULL;
    int opt;
    /* 0: a full restart, options may follow the operands */
    optind = 0;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "f:", longopts, NULL)) != -1) {
        coord_leader_define_opts *o = &flags.o;
        switch (opt) {
        case 'P':
            flag_str(o, COORD_DESC_PROTOCOL, &o->protocol, optarg);
            break;
        case 'H':
            if (!*optarg) {
                flag_str(o, COORD_DESC_MAX_HOLD, &(const char *){ NULL }, optarg);
            } else if (!ctl_parse_duration(optarg, &o->max_hold_ms)) {
                return ctl_usage(ctl, "--max-hold needs a duration (like 30s, 500ms, "
                                      "2m), not %s", optarg);
            } else {
                o->set |= COORD_DESC_MAX_HOLD;
                o->reset &= ~COORD_DESC_MAX_HOLD;
            }
            break;
        case 'S':
            flag_str(o, COORD_DESC_STEAL, &o->steal, optarg);
            break;
        case 'M':
            flag_str(o, COORD_DESC_MODE, &o->mode, optarg);
            break;
        case 'F':
            flag_str(o, COORD_DESC_FALLBACK, &o->fallback, optarg);
            break;
        case 'C':
            flag_str(o, COORD_DESC_CANONICAL_FENCE, &o->canonical_fence, optarg);
            break;
        case 'x':
            o->force = true;
            break;
        case 'f':
            file = optarg;
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
    const char *ws = optind < argc ? argv[optind++] : NULL;
    if (optind < argc)
        return ctl_usage(ctl, "unexpected argument %s", argv[optind]);

    int rc = 0;
    if (file) {
        if (flags.o.set || flags.o.reset)
            return ctl_usage(ctl, "-f takes the fields from FILE (only --force beside it)");
        rc = read_desc_file(file, &in);
        if (rc) {
            free(in.buf);
            return rc;
        }
        if (ws && in.workstream && strcmp(ws, in.workstream) != 0) {
            free(in.buf);
            return ctl_usage(ctl, "WORKSTREAM %s is not the file's workstream", ws);
        }
        if (!ws && !in.workstream) {
            free(in.buf);
            fprintf(stderr, "coordctl: leader define: %s: no workstream (and none given)\n",
                    file);
            return CTL_EXIT_USAGE;
        }
        if (!ws)
            ws = in.workstream;
        in.o.force = flags.o.force;
    } else {
        if (!ws)
            return ctl_usage(ctl, "missing WORKSTREAM (or -f FILE)");
        in = flags;
    }
    rc = ctl_connect(ctl);
    if (rc) {
        free(in.buf);
        return rc;
    }
    coord_leader_descriptor d;
    int cr = coord_leader_define(ctl->c, ws, strlen(ws), &in.o, &d);
    if (cr < 0)
        rc = ctl_fail_call(ctl, "leader define", cr);
    else
        rc = print_descriptor(ctl, ws, &d);
    free(in.buf);
    return rc;
}

/* ---- coordctl leader describe ---- */

int ctl_leader_describe(struct ctl *ctl, int argc, char **argv)
{
    const char *ws;
    int rc = ctl_one_workstream(ctl, argc, argv, &ws);
    if (rc || (rc = ctl_connect(ctl)))
        return rc;
    coord_leader_descriptor d;
    rc = coord_leader_describe(ctl->c, ws, strlen(ws), &d);
    if (rc < 0)
        return ctl_fail_call(ctl, "leader describe", rc);
    return print_descriptor(ctl, ws, &d);
}
