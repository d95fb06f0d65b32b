/* ctl-descriptor.c - coordctl's workstream descriptors:
 *   leader define WORKSTREAM [--protocol NAME@N] [--max-hold DURATION]
 *                 [--steal P] [--mode M] [--fallback F]
 *                 [--canonical-fence L] [--lock-name NAME]
 *                 [--capabilities A,B] [--if-available P] [--force]
 *   leader define [WORKSTREAM] -f FILE [--force]
 *   leader describe WORKSTREAM
 *
 * A define changes only the fields it names; an empty value (--protocol=)
 * sends nil, which puts the field back to its default.  FILE is the
 * design note's descriptor format, parsed by protocol/desc-file.c (the
 * broker's config dir reads the same files); origin and disabled belong
 * to the config dir and are refused here. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "coordctl.h"

#include "desc-file.h"

bool ctl_parse_duration(const char *s, uint64_t *ms)
{
    return coord_parse_duration(s, ms);
}

/* ---- the file (desc-file.c parses it) ---- */

struct desc_input {
    coord_leader_define_opts o;
    const char *workstream;     /* from the file or argv */
    struct coord_desc_file df;
};

static void file_err(void *ud, int line, const char *msg)
{
    const char *path = ud;
    if (line)
        fprintf(stderr, "coordctl: leader define: %s:%d: %s\n", path, line, msg);
    else
        fprintf(stderr, "coordctl: leader define: %s: %s\n", path, msg);
}

/* Parses FILE into *in.  0, or an exit status after printing the error
 * ("coordctl: leader define: FILE:LINE: ..."). */
static int read_desc_file(const char *path, struct desc_input *in)
{
    struct coord_desc_file *d = &in->df;
    if (coord_desc_file_read(path, d, file_err, (void *)path))
        return CTL_EXIT_USAGE;
    static const struct { int key; unsigned bit; } map[] = {
        { COORD_DK_PROTOCOL, COORD_DESC_PROTOCOL },
        { COORD_DK_MAX_HOLD, COORD_DESC_MAX_HOLD },
        { COORD_DK_STEAL, COORD_DESC_STEAL },
        { COORD_DK_FALLBACK, COORD_DESC_FALLBACK },
        { COORD_DK_CANONICAL_FENCE, COORD_DESC_CANONICAL_FENCE },
        { COORD_DK_MODE, COORD_DESC_MODE },
        { COORD_DK_LOCK_NAME, COORD_DESC_LOCK_NAME },
        { COORD_DK_CAPABILITIES, COORD_DESC_CAPABILITIES },
        { COORD_DK_IF_AVAILABLE, COORD_DESC_IF_AVAILABLE },
    };
    if (d->given[COORD_DK_ORIGIN] || d->given[COORD_DK_DISABLED]) {
        fprintf(stderr, "coordctl: leader define: %s: origin and disabled belong to the "
                "broker's config dir (workstreams/WORKSTREAM.v1), not to a define\n", path);
        return CTL_EXIT_USAGE;
    }
    in->workstream = d->val[COORD_DK_WORKSTREAM];
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
        if (!d->given[map[i].key])
            continue;
        const char *v = d->val[map[i].key];
        if (!v) {
            in->o.reset |= map[i].bit;
            continue;
        }
        in->o.set |= map[i].bit;
        switch (map[i].bit) {
        case COORD_DESC_PROTOCOL: in->o.protocol = v; break;
        case COORD_DESC_MAX_HOLD: in->o.max_hold_ms = d->max_hold_ms; break;
        case COORD_DESC_STEAL: in->o.steal = v; break;
        case COORD_DESC_FALLBACK: in->o.fallback = v; break;
        case COORD_DESC_CANONICAL_FENCE: in->o.canonical_fence = v; break;
        case COORD_DESC_MODE: in->o.mode = v; break;
        case COORD_DESC_LOCK_NAME: in->o.lock_name = v; break;
        case COORD_DESC_CAPABILITIES: in->o.capabilities = d->capabilities; break;
        case COORD_DESC_IF_AVAILABLE: in->o.if_available = v; break;
        }
    }
    return 0;
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
        json_field("lock_name", d->lock_name, true);
        json_field("capabilities", d->capabilities, true);
        json_field("if_available", d->if_available, true);
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
    add_str(&t, "lock name", d->lock_name);
    add_str(&t, "capabilities", d->capabilities);
    add_str(&t, "if available", d->if_available);
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
        { "lock-name", required_argument, NULL, 'N' },
        { "capabilities", required_argument, NULL, 'A' },
        { "if-available", required_argument, NULL, 'V' },
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
        case 'N':
            flag_str(o, COORD_DESC_LOCK_NAME, &o->lock_name, optarg);
            break;
        case 'A':
            /* "" clears the list (sent as "", not nil: the same) */
            o->set |= COORD_DESC_CAPABILITIES;
            o->reset &= ~COORD_DESC_CAPABILITIES;
            o->capabilities = optarg;
            break;
        case 'V':
            flag_str(o, COORD_DESC_IF_AVAILABLE, &o->if_available, optarg);
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
            coord_desc_file_free(&in.df);
            return rc;
        }
        if (ws && in.workstream && strcmp(ws, in.workstream) != 0) {
            coord_desc_file_free(&in.df);
            return ctl_usage(ctl, "WORKSTREAM %s is not the file's workstream", ws);
        }
        if (!ws && !in.workstream) {
            coord_desc_file_free(&in.df);
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
        coord_desc_file_free(&in.df);
        return rc;
    }
    coord_leader_descriptor d;
    int cr = coord_leader_define(ctl->c, ws, strlen(ws), &in.o, &d);
    if (cr < 0)
        rc = ctl_fail_call(ctl, "leader define", cr);
    else
        rc = print_descriptor(ctl, ws, &d);
    coord_desc_file_free(&in.df);
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
