/* ctl-watch.c - coordctl's channel commands:
 *   watch      lifecycle events of the broker's channels (and messages of
 *              user channels), one line each
 *   publish    send one message to a channel
 *   subscribe  print the messages of a channel
 *
 * watch and subscribe wait with poll() on the broker connection and a
 * signalfd (SIGINT, SIGTERM, SIGHUP end them with status 0); the broker
 * going away ends them with status 3.  Output is flushed per line: they
 * are meant to be read through pipes. */
#include <errno.h>
#include <fnmatch.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>
#include "coordctl.h"

/* p[0..n) as one token: printable ASCII but space as is, a backslash
 * doubled, every other byte (space included) as \xNN. */
static void put_token(FILE *f, const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)p[i];
        if (ch == '\\')
            fputs("\\\\", f);
        else if (ch > 0x20 && ch < 0x7f)
            fputc(ch, f);
        else
            fprintf(f, "\\x%02x", ch);
    }
}

static bool printable(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] < 0x20 || p[i] >= 0x7f)
            return false;
    return true;
}

static void put_base64(FILE *f, const unsigned char *p, size_t n)
{
    static const char tab[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16;
        if (i + 1 < n)
            v |= (uint32_t)p[i + 1] << 8;
        if (i + 2 < n)
            v |= p[i + 2];
        fputc(tab[v >> 18 & 63], f);
        fputc(tab[v >> 12 & 63], f);
        fputc(i + 1 < n ? tab[v >> 6 & 63] : '=', f);
        fputc(i + 2 < n ? tab[v & 63] : '=', f);
    }
}

/* Message data: "text" when it is printable ASCII (\" and \\ escaped),
 * else base64:... */
static void put_data(FILE *f, const void *data, size_t n)
{
    const unsigned char *p = data;
    if (printable(p, n)) {
        fputc('"', f);
        for (size_t i = 0; i < n; i++) {
            if (p[i] == '"' || p[i] == '\\')
                fputc('\\', f);
            fputc(p[i], f);
        }
        fputc('"', f);
    } else {
        fputs("base64:", f);
        put_base64(f, p, n);
    }
}

/* "12:00:01.234" in local time, for wall-clock ms (0: now). */
static void put_time(FILE *f, uint64_t at_ms)
{
    if (!at_ms)
        at_ms = ctl_wall_ms();
    time_t s = (time_t)(at_ms / 1000);
    struct tm tm;
    char buf[16];
    if (!localtime_r(&s, &tm) || !strftime(buf, sizeof buf, "%H:%M:%S", &tm))
        snprintf(buf, sizeof buf, "??:??:??");
    fprintf(f, "%s.%03u", buf, (unsigned)(at_ms % 1000));
}

static bool key_is(const char *k, size_t kn, const char *s)
{
    return strlen(s) == kn && memcmp(k, s, kn) == 0;
}

/* " key=value" for every entry of m but the skipped keys (NULL-ended). */
static void put_fields(FILE *f, coord_map m, const char *const *skip)
{
    size_t n = coord_map_size(m);
    for (size_t i = 0; i < n; i++) {
        const char *k;
        size_t kn;
        coord_type t = coord_map_entry(m, i, &k, &kn);
        bool skipped = false;
        for (const char *const *s = skip; *s && !skipped; s++)
            skipped = key_is(k, kn, *s);
        if (skipped)
            continue;
        fputc(' ', f);
        put_token(f, k, kn);
        fputc('=', f);
        if (t == COORD_TYPE_STR) {
            char key[64];
            const char *v;
            size_t vn;
            snprintf(key, sizeof key, "%.*s", (int)(kn < 63 ? kn : 63), k);
            if (kn < 63 && coord_map_str(m, key, &v, &vn))
                put_token(f, v, vn);
        } else {
            char *j = coord_map_value_json(m, i);
            if (j)
                fputs(j, f);
            free(j);
        }
    }
}

/* One line for an event: time, channel, what, fields. */
static void print_event_line(const coord_reply_t *ev)
{
    coord_map m = coord_reply_map(ev);
    coord_lifecycle lc;
    coord_message msg;
    if (coord_event_lifecycle(ev, &lc)) {
        static const char *const skip[] = { "ev", "channel", "what", "at_ms", NULL };
        put_time(stdout, lc.at_ms);
        fputc(' ', stdout);
        put_token(stdout, lc.channel, lc.channel_len);
        fputc(' ', stdout);
        put_token(stdout, lc.what, lc.what_len);
        put_fields(stdout, m, skip);
    } else if (coord_event_message(ev, &msg)) {
        static const char *const skip[] = { "ev", "channel", "data", "conn", NULL };
        put_time(stdout, 0);
        fputc(' ', stdout);
        put_token(stdout, msg.channel, msg.channel_len);
        printf(" message conn=%llu", (unsigned long long)msg.conn);
        put_fields(stdout, m, skip);
        fputs(" data=", stdout);
        put_data(stdout, msg.data, msg.data_len);
    } else {
        static const char *const skip[] = { "ev", NULL };
        const char *name = coord_reply_event(ev);
        put_time(stdout, 0);
        fputc(' ', stdout);
        put_token(stdout, name ? name : "?", name ? strlen(name) : 1);
        put_fields(stdout, m, skip);
    }
    fputc('\n', stdout);
}

static void print_event_json(const coord_reply_t *ev)
{
    char *j = coord_map_json(coord_reply_map(ev));
    if (j) {
        puts(j);
        free(j);
    } else {
        fprintf(stderr, "coordctl: json: NOMEM: %s\n", coord_strerror(COORD_ENOMEM));
    }
}

/* ---- watch's filters ---- */

/* The kinds of event watch shows, by the channel they come on: the
 * broker's -locks, -flights, -leaders, and messages of user channels. */
enum { KIND_LOCK = 1, KIND_FLIGHT = 2, KIND_LEADER = 4, KIND_CHANNEL = 8 };
static const struct {
    const char *name;
    unsigned bit;
    const char *channel;        /* the broker's channel, NULL: user channels */
    const char *subject;        /* the field --name matches */
} kinds[] = {
    { "lock", KIND_LOCK, "-locks", "name" },
    { "flight", KIND_FLIGHT, "-flights", "key" },
    { "leader", KIND_LEADER, "-leaders", "workstream" },
    { "channel", KIND_CHANNEL, NULL, "channel" },
};
#define N_KINDS (sizeof kinds / sizeof kinds[0])
#define MAX_NAMES 32

struct filter {
    unsigned kinds;             /* 0: every kind */
    const char *names[MAX_NAMES];  /* --name PATTERNs (fnmatch), any matches */
    size_t nnames;
};

/* "lock,flight" (or one --kind per flag) into f->kinds; false: unknown. */
static bool parse_kinds(struct filter *f, const char *arg)
{
    const char *p = arg;
    while (*p) {
        size_t n = strcspn(p, ",");
        size_t k = 0;
        for (; k < N_KINDS; k++)
            if (strlen(kinds[k].name) == n && !memcmp(kinds[k].name, p, n))
                break;
        if (k == N_KINDS)
            return false;
        f->kinds |= kinds[k].bit;
        p += n;
        if (*p == ',')
            p++;
    }
    return f->kinds != 0;
}

/* Does the event pass f?  Its kind by its channel; the subject that --name
 * matches: the lock's name, the flight's key, the workstream, the user
 * channel's name. */
static bool passes(const struct filter *f, const coord_reply_t *ev)
{
    if (!f || (!f->kinds && !f->nnames))
        return true;
    coord_map m = coord_reply_map(ev);
    const char *ch = NULL;
    size_t chn = 0;
    coord_lifecycle lc;
    coord_message msg;
    if (coord_event_lifecycle(ev, &lc)) {
        ch = lc.channel;
        chn = lc.channel_len;
    } else if (coord_event_message(ev, &msg)) {
        ch = msg.channel;
        chn = msg.channel_len;
    } else {
        return !f->kinds && !f->nnames;
    }
    size_t k = 0;
    for (; k < N_KINDS - 1; k++)
        if (strlen(kinds[k].channel) == chn && !memcmp(kinds[k].channel, ch, chn))
            break;
    if (f->kinds && !(f->kinds & kinds[k].bit))
        return false;
    if (!f->nnames)
        return true;
    const char *p;
    size_t n;
    if (kinds[k].bit == KIND_CHANNEL) {
        p = ch;
        n = chn;
    } else if (!coord_map_str(m, kinds[k].subject, &p, &n)) {
        return false;
    }
    char subject[1024];
    if (n >= sizeof subject || memchr(p, 0, n))
        return false;
    memcpy(subject, p, n);
    subject[n] = '\0';
    for (size_t i = 0; i < f->nnames; i++)
        if (fnmatch(f->names[i], subject, 0) == 0)
            return true;
    return false;
}

/* ---- the loop of watch and subscribe ---- */

enum listen_mode { LISTEN_WATCH, LISTEN_SUBSCRIBE };

struct listener {
    struct ctl *ctl;
    enum listen_mode mode;
    unsigned long count;        /* --count: stop after this many (0: never) */
    unsigned long seen;
    const struct filter *filter;    /* watch: what it shows (NULL: all) */
};

static void on_event(coord_t *c, const coord_reply_t *ev, void *ud)
{
    struct listener *l = ud;
    coord_message msg;
    (void)c;
    /* one dispatch can carry several events: none past --count */
    if ((l->count && l->seen >= l->count) || !passes(l->filter, ev))
        return;
    if (l->ctl->json) {
        print_event_json(ev);
    } else if (l->mode == LISTEN_SUBSCRIBE && coord_event_message(ev, &msg)) {
        fwrite(msg.data, 1, msg.data_len, stdout);
        fputc('\n', stdout);
    } else {
        print_event_line(ev);
    }
    fflush(stdout);
    l->seen++;
}

/* Subscribes to channels[0..n), then prints events until a signal (0) or
 * the broker goes away (3). */
static int listen_loop(struct ctl *ctl, enum listen_mode mode, const char *what,
                       char *const *channels, size_t n, bool quiet, unsigned long count,
                       const struct filter *filter)
{
    int rc = ctl_connect(ctl);
    if (rc)
        return rc;

    /* the signals that end us arrive on a signalfd: the library's own
     * reads retry on EINTR, so a handler could not interrupt them */
    sigset_t mask, old;
    sigemptyset(&mask);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGHUP);
    sigprocmask(SIG_BLOCK, &mask, &old);
    int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
    if (sfd < 0) {
        fprintf(stderr, "coordctl: %s: signalfd: %s\n", what, strerror(errno));
        sigprocmask(SIG_SETMASK, &old, NULL);
        return CTL_EXIT_FAIL;
    }

    struct listener l = { ctl, mode, count, 0, filter };
    coord_set_event_cb(ctl->c, on_event, &l);
    for (size_t i = 0; i < n; i++) {
        rc = coord_subscribe(ctl->c, channels[i], strlen(channels[i]));
        if (rc < 0) {
            char w[300];
            snprintf(w, sizeof w, "%s: %s", what, channels[i]);
            rc = ctl_fail_call(ctl, w, rc);
            goto out;
        }
    }
    if (!quiet) {
        /* also tells a script reading stderr that we are subscribed */
        fprintf(stderr, "coordctl: %s: listening on", what);
        for (size_t i = 0; i < n; i++) {
            fputc(' ', stderr);
            put_token(stderr, channels[i], strlen(channels[i]));
        }
        fputc('\n', stderr);
        fflush(stderr);
    }
    fflush(stdout);

    rc = coord_dispatch(ctl->c);   /* events read along with the replies */
    while (rc == 0) {
        if (count && l.seen >= count) {
            rc = CTL_EXIT_OK;
            goto out;
        }
        struct pollfd p[2] = {
            { .fd = sfd, .events = POLLIN },
            { .fd = coord_fd(ctl->c), .events = POLLIN },
        };
        if (poll(p, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            fprintf(stderr, "coordctl: %s: poll: %s\n", what, strerror(errno));
            rc = CTL_EXIT_FAIL;
            goto out;
        }
        if (p[1].revents)
            rc = coord_dispatch(ctl->c);
        if (rc == 0 && count && l.seen >= count) {
            rc = CTL_EXIT_OK;
            goto out;
        }
        if (rc == 0 && p[0].revents) {
            struct signalfd_siginfo si;
            if (read(sfd, &si, sizeof si) == (ssize_t)sizeof si) {
                rc = CTL_EXIT_OK;
                goto out;
            }
        }
    }
    rc = ctl_fail_call(ctl, what, rc);
out:
    coord_set_event_cb(ctl->c, NULL, NULL);
    close(sfd);
    sigprocmask(SIG_SETMASK, &old, NULL);
    return rc;
}

/* Arguments of watch and subscribe: --json, -q/--quiet, -c/--count N,
 * watch's --kind K and --name PATTERN (f not NULL), "--", then names
 * (which may start with '-': "-locks"). */
static int listen_args(struct ctl *ctl, int argc, char **argv, bool *quiet,
                       unsigned long *count, int *first, struct filter *f)
{
    int i = 1;
    for (; i < argc; i++) {
        const char *a = argv[i];
        if (f && (!strcmp(a, "--kind") || !strncmp(a, "--kind=", 7))) {
            const char *v = a[6] == '\0' ? (i + 1 < argc ? argv[++i] : NULL) : a + 7;
            if (!v)
                return ctl_usage(ctl, "missing value for %s", a);
            if (!parse_kinds(f, v))
                return ctl_usage(ctl, "--kind is lock, flight, leader or channel, not %s", v);
            continue;
        }
        if (f && (!strcmp(a, "--name") || !strncmp(a, "--name=", 7))) {
            const char *v = a[6] == '\0' ? (i + 1 < argc ? argv[++i] : NULL) : a + 7;
            if (!v)
                return ctl_usage(ctl, "missing value for %s", a);
            if (f->nnames == MAX_NAMES)
                return ctl_usage(ctl, "at most %d --name patterns", MAX_NAMES);
            f->names[f->nnames++] = v;
            continue;
        }
        if (!strcmp(argv[i], "--json")) {
            ctl->json = true;
        } else if (!strcmp(argv[i], "-q") || !strcmp(argv[i], "--quiet")) {
            *quiet = true;
        } else if (!strcmp(argv[i], "-c") || !strcmp(argv[i], "--count")) {
            char *end;
            if (i + 1 >= argc)
                return ctl_usage(ctl, "missing value for %s", argv[i]);
            errno = 0;
            *count = strtoul(argv[++i], &end, 10);
            if (errno || *end || !*argv[i] || argv[i][0] == '-' || *count == 0 ||
                *count > 1000000000ul)
                return ctl_usage(ctl, "%s needs a count from 1 to 1000000000, not %s",
                                 argv[i - 1], argv[i]);
        } else if (!strcmp(argv[i], "--")) {
            i++;
            break;
        } else if (!strncmp(argv[i], "--", 2)) {
            return ctl_usage(ctl, "unknown flag %s", argv[i]);
        } else {
            break;
        }
    }
    *first = i;
    return 0;
}

/* ---- coordctl watch ---- */

int cmd_watch(struct ctl *ctl, int argc, char **argv)
{
    bool quiet = false;
    unsigned long count = 0;
    int first;
    struct filter f = { 0 };
    int rc = listen_args(ctl, argc, argv, &quiet, &count, &first, &f);
    if (rc)
        return rc;
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (first < argc)
        return listen_loop(ctl, LISTEN_WATCH, "watch", argv + first, (size_t)(argc - first),
                           quiet, count, &f);
    /* no CHANNEL: the broker's channels of the kinds asked for */
    if (f.kinds == KIND_CHANNEL)
        return ctl_usage(ctl, "--kind channel needs the CHANNELs to watch");
    char *chans[N_KINDS];
    size_t n = 0;
    for (size_t k = 0; k < N_KINDS; k++)
        if (kinds[k].channel && (!f.kinds || (f.kinds & kinds[k].bit)))
            chans[n++] = (char *)kinds[k].channel;
    return listen_loop(ctl, LISTEN_WATCH, "watch", chans, n, quiet, count, &f);
}

/* ---- coordctl subscribe ---- */

int cmd_subscribe(struct ctl *ctl, int argc, char **argv)
{
    bool quiet = false;
    unsigned long count = 0;
    int first;
    int rc = listen_args(ctl, argc, argv, &quiet, &count, &first, NULL);
    if (rc)
        return rc;
    if (first >= argc)
        return ctl_usage(ctl, "missing CHANNEL");
    if (first + 1 < argc)
        return ctl_usage(ctl, "unexpected argument %s (one channel; "
                         "coordctl watch takes several)", argv[first + 1]);
    return listen_loop(ctl, LISTEN_SUBSCRIBE, "subscribe", argv + first, 1, quiet, count,
                       NULL);
}

/* ---- coordctl publish ---- */

/* How often publish --wait asks again while nobody is subscribed: a
 * subscriber appears on its own time, and no event tells another
 * connection that it did. */
#define PUBLISH_RETRY_MS 10

int cmd_publish(struct ctl *ctl, int argc, char **argv)
{
    uint64_t wait_ms = 0;
    int i = 1;
    for (; i + 1 < argc; i += 2) {        /* --wait SECONDS before the operands */
        if (strcmp(argv[i], "-w") != 0 && strcmp(argv[i], "--wait") != 0)
            break;
        if (!ctl_parse_seconds(argv[i + 1], &wait_ms) || wait_ms > 3600000)
            return ctl_usage(ctl, "%s needs seconds from 0 to 3600, not %s", argv[i],
                             argv[i + 1]);
    }
    if (i < argc && (!strcmp(argv[i], "-w") || !strcmp(argv[i], "--wait")))
        return ctl_usage(ctl, "missing value for %s", argv[i]);
    argc -= i - 1;
    argv += i - 1;
    i = ctl_first_operand(ctl, argc, argv);
    if (argc - i < 2)
        return ctl_usage(ctl, "missing %s", argc - i < 1 ? "CHANNEL and DATA" : "DATA");
    if (argc - i > 2)
        return ctl_usage(ctl, "unexpected argument %s (quote DATA)", argv[i + 2]);
    const char *ch = argv[i], *data = argv[i + 1];
    int rc = ctl_connect(ctl);
    if (rc)
        return rc;
    uint64_t delivered = 0;
    int64_t until = ctl_mono_ms() + (int64_t)wait_ms;
    for (;;) {
        rc = coord_publish(ctl->c, ch, strlen(ch), data, strlen(data), &delivered);
        if (rc < 0)
            return ctl_fail_call(ctl, "publish", rc);
        /* delivered 0: nobody got it, so sending it again repeats nothing */
        if (delivered || ctl_mono_ms() >= until)
            break;
        struct timespec ts = { 0, PUBLISH_RETRY_MS * 1000000L };
        nanosleep(&ts, NULL);
    }
    if (ctl->json)
        printf("{\"delivered\":%llu}\n", (unsigned long long)delivered);
    else
        printf("delivered %llu\n", (unsigned long long)delivered);
    return CTL_EXIT_OK;
}
