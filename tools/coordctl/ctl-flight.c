/* ctl-flight.c - coordctl's single-flight commands:
 *   once     single-flight a shell command
 *   flights  the running flights of the scope
 *   records  the stored completion records of the scope
 *   record   record get: one record's result (read from its descriptor when
 *            by reference)
 *   purge    delete the scope's records
 *
 * The result of `once` (what followers receive and what --keep stores) is,
 * stable, "coordctl once result format 1":
 *
 *     byte 0      1 (the format)
 *     byte 1      CMD's exit status, 0..255 (128+N when killed by signal N)
 *     bytes 2..   CMD's stdout, exactly as written
 *
 * So `coordctl records` shows SIZE = stdout bytes + 2.  A result that does
 * not start this way (a library caller used the same key) is refused by
 * `once` with exit status 1.
 *
 * Backoff convention: CMD asks the callers to back off (an upstream said
 * "429, retry after N") by writing N, a number of seconds, to the file
 * named by $COORD_RETRY_AFTER_FILE and exiting 75 (EX_TEMPFAIL, sysexits.h).
 * The file is a memfd of ours passed as /dev/fd/N (nothing to clean up, no
 * name another process could write to); both halves are needed, so neither
 * a stray 75 nor a stray write starts a backoff.  The flight then fails
 * retryable with retry_after_ms, and every caller of the key, the owner
 * included, exits 75 until the time is up.  An exit 75 without a number is
 * an ordinary result.
 *
 * --fallback run: when the broker cannot be reached (no broker and
 * autostart failed or is off, or the connection dropped while we waited for
 * an owner), or --wait passed without a result, CMD runs here,
 * uncoordinated, with COORD_FLIGHT_FALLBACK=1 (=timeout after a wait), and
 * coordctl says which on stderr.
 *
 * --supersede: the running owner's work is stale: we take the flight over
 * (its CMD is stopped as when its --ttl passes; its followers get our
 * result); --priority N does so when N is above the running owner's.
 * --version V (with --own-version: never follow nor take the
 * record of another version) names the version of CMD.
 *
 * The owner waits for three things at once with poll(): CMD's stdout pipe
 * (copied to our stdout as it comes and kept for the result), the signalfd
 * of ctl_child_start (ctl-run.c) with SIGCHLD and the signals to forward to
 * CMD, and the broker connection (the flight.abort event when --ttl
 * passes). */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include "coordctl.h"
#include "ctl-key.h"

#define ONCE_FORMAT 1
#define ONCE_HEADER 2
#define ONCE_DEFAULT_TTL_MS (600ull * 1000)   /* 10 minutes */
#define ONCE_MAX_RETRIES 10                   /* retryable failures in a row */
#define ONCE_KILL_AFTER_MS 10000              /* SIGKILL this long after SIGTERM */
#define ONCE_EXIT_TEMPFAIL 75                 /* EX_TEMPFAIL: the backoff convention */
#define ONCE_RETRY_AFTER_MAX 64               /* bytes of the number CMD writes */

/* ---- helpers ---- */

/* Writes all of p[0..n) to fd; false on an error (EPIPE included). */
static bool write_all(int fd, const void *p, size_t n)
{
    const char *b = p;
    while (n > 0) {
        ssize_t w = write(fd, b, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        b += w;
        n -= (size_t)w;
    }
    return true;
}

/* ---- coordctl once ---- */

struct once {
    struct ctl *ctl;
    const char *key;            /* from argv */
    char *shown;                /* escaped, for messages */
    uint64_t keep_ms;           /* how long a success is kept (--keep + --stale) */
    uint64_t flight, fence;     /* while we own it */
    int retry_fd;               /* memfd behind $COORD_RETRY_AFTER_FILE, or -1 */
    bool aborted;               /* flight.abort "deadline" or "superseded" came */
    bool superseded;            /* ... "superseded" */
    bool conn_ok;
    /* CMD's stdout, after the two header bytes */
    char *buf;
    size_t len, cap, limit;
    size_t frame_limit;         /* what fits a frame: more goes by reference */
    bool overflow;              /* more than limit bytes: cannot be shared */
    bool stdout_ok;             /* our own stdout still takes bytes */
};

static void on_event(coord_t *c, const coord_reply_t *ev, void *ud)
{
    struct once *o = ud;
    coord_flight_abort a;
    (void)c;
    if (!coord_event_flight_abort(ev, &a) || a.flight != o->flight)
        return;
    /* "orphaned" needs abort_when_orphaned, which we never ask for */
    if (a.reason_len == 8 && memcmp(a.reason, "deadline", 8) == 0)
        o->aborted = true;
    if (a.reason_len == 10 && memcmp(a.reason, "superseded", 10) == 0)
        o->aborted = o->superseded = true;
}

/* Keeps CMD's output n bytes at p for the result (up to o->limit). */
static void keep_output(struct once *o, const char *p, size_t n)
{
    if (o->overflow)
        return;
    if (o->len + n > o->limit) {
        o->overflow = true;
        return;
    }
    if (o->len + n > o->cap) {
        size_t cap = o->cap ? o->cap : 4096;
        while (cap < o->len + n)
            cap *= 2;
        char *b = realloc(o->buf, ONCE_HEADER + cap);
        if (!b) {
            o->overflow = true;    /* reported like a result too large */
            return;
        }
        o->buf = b;
        o->cap = cap;
    }
    memcpy(o->buf + ONCE_HEADER + o->len, p, n);
    o->len += n;
}

/* flight.complete with the result in o->buf: inline when it fits a frame,
 * else by reference (a sealed memfd of it). */
static int once_complete(struct once *o, coord_t *c, uint64_t keep)
{
    size_t n = ONCE_HEADER + o->len;
    if (o->len <= o->frame_limit)
        return coord_flight_complete(c, o->flight, o->fence, o->buf, n, keep, NULL);
    int fd = coord_memfd_sealed(o->buf, n);
    if (fd < 0) {
        fprintf(stderr, "coordctl: once: %s: a memfd for the result: %s\n", o->shown,
                strerror(errno));
        return fd;
    }
    int rc = coord_flight_complete_fd(c, o->flight, o->fence, fd, keep, NULL);
    close(fd);
    return rc;
}

/* Prints a result of format 1 and returns its exit status.  One by
 * reference (a descriptor) is read first. */
static int print_result(struct once *o, coord_flight *f)
{
    if (f->by_ref && coord_flight_result_load(f) < 0) {
        fprintf(stderr, "coordctl: once: %s: reading the result (%zu bytes by reference): "
                        "%s\n", o->shown, f->result_len, strerror(errno));
        return CTL_EXIT_FAIL;
    }
    const unsigned char *r = f->result;
    if (f->result_len < ONCE_HEADER || r[0] != ONCE_FORMAT) {
        fprintf(stderr, "coordctl: once: %s: the stored result was not made by "
                        "coordctl once (%zu bytes)\n", o->shown, f->result_len);
        return CTL_EXIT_FAIL;
    }
    fflush(stdout);
    if (!write_all(STDOUT_FILENO, r + ONCE_HEADER, f->result_len - ONCE_HEADER)) {
        fprintf(stderr, "coordctl: once: writing the output: %s\n", strerror(errno));
        return CTL_EXIT_FAIL;
    }
    return r[1];
}

/* What CMD wrote to $COORD_RETRY_AFTER_FILE: true and *ms when it is a
 * positive number of seconds (white space around it is fine). */
static bool retry_after(struct once *o, uint64_t *ms)
{
    char b[ONCE_RETRY_AFTER_MAX + 1];
    if (o->retry_fd < 0)
        return false;
    ssize_t n = pread(o->retry_fd, b, sizeof b - 1, 0);
    if (n <= 0)
        return false;
    b[n] = '\0';
    char *s = b, *e = b + n;
    while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r')
        s++;
    while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n' || e[-1] == '\r'))
        *--e = '\0';
    if (!ctl_parse_seconds(s, ms) || *ms == 0) {
        fprintf(stderr, "coordctl: once: %s: $COORD_RETRY_AFTER_FILE holds no positive "
                        "number of seconds: no backoff\n", o->shown);
        return false;
    }
    return true;
}

/* CMD without the broker (--fallback run): its stdout is ours; returns its
 * exit status. */
static int run_local(struct once *o, char **cmd, bool timeout)
{
    const char *const env[] = {
        "COORD_FLIGHT_KEY", o->key, "COORD_FLIGHT_FALLBACK", timeout ? "timeout" : "1", NULL,
    };
    return ctl_child_run("once", env, cmd);
}

/* Says why we run CMD without the broker (code and its text), then
 * does. */
static int fall_back(struct once *o, char **cmd, int code, const char *text)
{
    fprintf(stderr, "coordctl: once: %s: the broker cannot be reached (%s: %s): "
                    "running the command without coordination\n", o->shown,
            ctl_code_name(code), text);
    return run_local(o, cmd, false);
}

/* A FAILED outcome on stderr; exits 75 when callers are to back off (the
 * convention), else 1. */
static int print_failure(struct once *o, const coord_flight *f)
{
    char *code = ctl_escape(f->error_code, strlen(f->error_code));
    char *msg = ctl_escape(f->error_message, strlen(f->error_message));
    char after[64] = "";
    if (f->retry_after_ms)
        snprintf(after, sizeof after, " (retry after %.3f s)",
                 (double)f->retry_after_ms / 1000.0);
    if (f->from_backoff && !(code && code[0]))
        fprintf(stderr, "coordctl: once: %s: backing off%s\n", o->shown, after);
    else
        fprintf(stderr, "coordctl: once: %s: %s%s: %s: %s\n", o->shown,
                f->from_backoff ? "backing off" : "the owner failed", after,
                code ? code : "?", msg ? msg : "?");
    free(code);
    free(msg);
    return f->retry_after_ms ? ONCE_EXIT_TEMPFAIL : CTL_EXIT_FAIL;
}

/* Runs cmd as the owner, shares its output and status; returns coordctl's
 * exit status. */
static int run_owner(struct once *o, char **cmd)
{
    coord_t *c = o->ctl->c;
    char id[32], fence[32];
    snprintf(id, sizeof id, "%llu", (unsigned long long)o->flight);
    snprintf(fence, sizeof fence, "%llu", (unsigned long long)o->fence);
    char retry_file[32] = "";
    /* no memfd (an old kernel): no backoff, the rest works */
    o->retry_fd = memfd_create("coord-retry-after", 0);
    if (o->retry_fd >= 0)
        snprintf(retry_file, sizeof retry_file, "/dev/fd/%d", o->retry_fd);
    const char *const env[] = {
        "COORD_FLIGHT", id, "COORD_FLIGHT_FENCE", fence, "COORD_FLIGHT_KEY", o->key,
        o->retry_fd >= 0 ? "COORD_RETRY_AFTER_FILE" : NULL, retry_file,
        NULL,
    };
    if (!ctl_child_env("once", env))
        return CTL_EXIT_FAIL;      /* closing the connection hands the flight on */
    /* the result travels in one frame, with the request around it, or,
     * larger, by reference (a sealed memfd) up to max_ref_bytes */
    uint32_t mf = coord_max_frame(c);
    o->limit = o->frame_limit = mf > 1024 + 256 ? mf - 1024 - 256 : 0;
    uint64_t ref = coord_max_ref_bytes(c);
    if (ref > ONCE_HEADER && ref - ONCE_HEADER > o->limit)
        o->limit = ref - ONCE_HEADER > SIZE_MAX / 2 ? SIZE_MAX / 2 : (size_t)(ref - ONCE_HEADER);
    o->buf = malloc(ONCE_HEADER + 4096);
    o->cap = 4096;
    if (!o->buf) {
        fprintf(stderr, "coordctl: once: out of memory\n");
        return CTL_EXIT_FAIL;
    }

    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC) < 0) {
        fprintf(stderr, "coordctl: once: pipe: %s\n", strerror(errno));
        return CTL_EXIT_FAIL;
    }
    /* a reader that went away must not kill us (CMD's result still
     * matters to others) */
    struct ctl_child ch;
    if (ctl_child_start(&ch, "once", cmd, pfd[1], true) < 0) {
        close(pfd[0]);
        close(pfd[1]);
        return CTL_EXIT_FAIL;
    }
    close(pfd[1]);

    coord_set_event_cb(c, on_event, o);
    o->stdout_ok = true;
    bool pipe_open = true, term_sent = false;
    int64_t kill_at = -1;
    while (ctl_child_running(&ch) || pipe_open) {
        /* CMD ended but something it started holds its stdout: the
         * result is what came until now */
        if (ch.exited && pipe_open && ctl_mono_ms() >= ch.settle_until) {
            if (!ch.signalled)
                fprintf(stderr, "coordctl: once: %s: the command ended but its stdout "
                                "stays open (a background process?): not waiting for "
                                "the rest\n", o->shown);
            close(pfd[0]);
            pipe_open = false;
            continue;
        }
        if (o->aborted && !term_sent && !ch.exited) {
            if (o->superseded)
                fprintf(stderr, "coordctl: once: %s: superseded by a fresh request: "
                                "stopping the command\n", o->shown);
            else
                fprintf(stderr, "coordctl: once: %s: the owner's time (--ttl) is up: "
                                "stopping the command; another caller takes over\n",
                        o->shown);
            ctl_child_kill(&ch, SIGTERM);
            term_sent = true;
            kill_at = ctl_mono_ms() + ONCE_KILL_AFTER_MS;
        }
        struct pollfd p[3] = {
            { .fd = ch.sfd, .events = POLLIN },
            { .fd = pipe_open ? pfd[0] : -1, .events = POLLIN },
            { .fd = o->conn_ok ? coord_fd(c) : -1, .events = POLLIN },
        };
        int timeout = ctl_child_poll_ms(&ch);
        int64_t wake = kill_at >= 0 && !ch.exited ? kill_at
                     : ch.exited && pipe_open ? ch.settle_until : -1;
        if (wake >= 0) {
            int64_t left = wake - ctl_mono_ms();
            int t = left < 0 ? 0 : left > 1000000000 ? 1000000000 : (int)left;
            if (timeout < 0 || t < timeout)
                timeout = t;
        }
        int n = poll(p, 3, timeout);
        if (n < 0 && errno != EINTR) {
            fprintf(stderr, "coordctl: once: poll: %s\n", strerror(errno));
            break;
        }
        if (kill_at >= 0 && !ch.exited && ctl_mono_ms() >= kill_at) {
            ctl_child_kill(&ch, SIGKILL);
            kill_at = -1;
        }
        if (n <= 0)
            continue;
        if (p[0].revents)
            ctl_child_signals(&ch);
        if (pipe_open && p[1].revents) {
            char chunk[65536];
            ssize_t r = read(pfd[0], chunk, sizeof chunk);
            if (r > 0) {
                keep_output(o, chunk, (size_t)r);
                if (o->stdout_ok && !write_all(STDOUT_FILENO, chunk, (size_t)r))
                    o->stdout_ok = false;
            } else if (r == 0 || errno != EINTR) {
                pipe_open = false;
                close(pfd[0]);
            }
        }
        if (o->conn_ok && p[2].revents && coord_dispatch(c) < 0) {
            o->conn_ok = false;
            fprintf(stderr, "coordctl: once: %s: lost the broker connection: "
                            "the result will not be shared\n", o->shown);
        }
    }
    if (ctl_child_running(&ch))    /* poll failed */
        ctl_child_stop(&ch, SIGKILL);
    if (pipe_open)
        close(pfd[0]);
    /* an abort that raced with CMD's end still counts */
    if (o->conn_ok && !o->aborted && coord_dispatch(c) < 0)
        o->conn_ok = false;
    coord_set_event_cb(c, NULL, NULL);
    ctl_child_end(&ch);

    int code = ctl_exit_code(ch.wstatus);
    if (o->aborted)
        return code ? code : CTL_EXIT_FAIL;
    if (!o->conn_ok)
        return code;
    if (ch.interrupted && WIFSIGNALED(ch.wstatus)) {
        /* we were told to stop and CMD died of it: that is no result for
         * the others; closing the connection hands the flight on */
        return code;
    }
    if (o->overflow) {
        char msg[200];
        snprintf(msg, sizeof msg, "the command's stdout exceeds the %zu bytes a result "
                 "may hold", o->limit);
        fprintf(stderr, "coordctl: once: %s: %s: not shared\n", o->shown, msg);
        int rc = coord_flight_fail(c, o->flight, o->fence, "TOO_LARGE", msg, false, 0);
        if (rc < 0 && rc != COORD_EFENCED)
            ctl_fail_call(o->ctl, "flight.fail", rc);
        return code;
    }
    uint64_t retry_after_ms;
    if (code == ONCE_EXIT_TEMPFAIL && retry_after(o, &retry_after_ms)) {
        char msg[160];
        snprintf(msg, sizeof msg, "the command asked to retry after %.3f s (exit %d)",
                 (double)retry_after_ms / 1000.0, code);
        coord_failure fl = { .code = "TEMPFAIL", .message = msg, .retryable = true,
                             .retry_after_ms = retry_after_ms };
        int rc = coord_flight_fail_with(c, o->flight, o->fence, &fl);
        if (rc == COORD_EFENCED)
            fprintf(stderr, "coordctl: once: %s: the owner's time (--ttl) was up before "
                            "the command ended: its backoff was not used\n", o->shown);
        else if (rc < 0)
            ctl_fail_call(o->ctl, "flight.fail", rc);
        return code;
    }
    o->buf[0] = ONCE_FORMAT;
    o->buf[1] = (char)(unsigned char)code;
    /* --keep stores only a success: a failed run is shared with those
     * waiting now, and the next caller runs CMD again */
    uint64_t keep = code == 0 ? o->keep_ms : 0;
    int rc = once_complete(o, c, keep);
    if (rc == COORD_ETOO_LARGE && keep) {
        fprintf(stderr, "coordctl: once: %s: %s: the result is not kept\n", o->shown,
                coord_error_message(c));
        rc = once_complete(o, c, 0);
    }
    if (rc == COORD_EFENCED) {
        fprintf(stderr, "coordctl: once: %s: %s before the command ended: its result "
                        "was not used\n", o->shown,
                o->superseded ? "superseded by a fresh request"
                              : "the owner's time (--ttl) was up");
        return code ? code : CTL_EXIT_FAIL;
    }
    if (rc < 0)
        ctl_fail_call(o->ctl, "flight.complete", rc);
    if (!o->stdout_ok && code == 0)
        code = CTL_EXIT_FAIL;
    return code;
}

int cmd_once(struct ctl *ctl, int argc, char **argv)
{
    static const struct option longopts[] = {
        { "keep", required_argument, NULL, 'k' },
        { "wait", required_argument, NULL, 'w' },
        { "ttl", required_argument, NULL, 't' },
        { "stale", required_argument, NULL, 's' },
        { "fallback", required_argument, NULL, 'f' },
        { "key-from-request", no_argument, NULL, 'K' },
        { "json", no_argument, NULL, 'j' },
        { "supersede", no_argument, NULL, 'S' },
        { "priority", required_argument, NULL, 'P' },
        { "version", required_argument, NULL, 'V' },
        { "own-version", no_argument, NULL, 'O' },
        CTL_KEY_LONGOPTS,
        { NULL, 0, NULL, 0 },
    };
    struct ctl_key_args ka = CTL_KEY_ARGS_INIT;
    bool from_request = false, run_fallback = false, supersede = false, own_version = false;
    uint64_t priority = 0;
    const char *version = NULL;
    uint64_t keep_ms = 0, wait_ms = 0, stale_ms = 0, ttl_ms = ONCE_DEFAULT_TTL_MS;
    const char *wait_arg = NULL;
    int opt;
    optind = 1;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "+k:w:t:", longopts, NULL)) != -1) {
        switch (opt) {
        case 'k':
            if (!ctl_parse_seconds(optarg, &keep_ms))
                return ctl_usage(ctl, "--keep needs a number of seconds, not %s", optarg);
            break;
        case 'w':
            if (!ctl_parse_seconds(optarg, &wait_ms) || wait_ms == 0)
                return ctl_usage(ctl, "--wait needs a positive number of seconds, not %s",
                                 optarg);
            wait_arg = optarg;
            break;
        case 't':
            if (!ctl_parse_seconds(optarg, &ttl_ms) || ttl_ms == 0)
                return ctl_usage(ctl, "--ttl needs a positive number of seconds, not %s",
                                 optarg);
            break;
        case 's':
            if (!ctl_parse_seconds(optarg, &stale_ms))
                return ctl_usage(ctl, "--stale needs a number of seconds, not %s", optarg);
            break;
        case 'f':
            if (!strcmp(optarg, "run"))
                run_fallback = true;
            else if (!strcmp(optarg, "fail"))
                run_fallback = false;
            else
                return ctl_usage(ctl, "--fallback is fail or run, not %s", optarg);
            break;
        case 'K':
            from_request = true;
            break;
        case 'j':
            ctl->json = true;
            break;
        case 'S':
            supersede = true;
            break;
        case 'P':
            if (!ctl_parse_generation(optarg, &priority))
                return ctl_usage(ctl, "--priority needs a positive number, not %s", optarg);
            break;
        case 'V':
            if (!optarg[0] || strlen(optarg) > 64)
                return ctl_usage(ctl, "--version needs 1 to 64 bytes, not \"%s\"", optarg);
            version = optarg;
            break;
        case 'O':
            own_version = true;
            break;
        case ':':
            return ctl_usage(ctl, "%s needs a value", argv[optind - 1]);
        default:
            if (ctl_key_is_option(opt)) {
                int krc = ctl_key_option(ctl, &ka, opt, optarg);
                if (krc)
                    return krc;
                break;
            }
            return ctl_usage(ctl, "unknown flag %s", argv[optind - 1]);
        }
    }
    if (stale_ms && !keep_ms)
        return ctl_usage(ctl, "--stale needs --keep (a result must be kept to be stale)");
    if (own_version && !version)
        return ctl_usage(ctl, "--own-version needs --version");
    const char *key;
    char **cmd;
    int rc;
    char request_key[COORD_REQUEST_KEY_SIZE];
    if (from_request) {
        /* the key of the request flags; the operands are only [--] CMD */
        if ((rc = ctl_key_build(ctl, &ka, request_key, NULL)))
            return rc;
        key = request_key;
        int i = optind < argc && !strcmp(argv[optind], "--") ? optind + 1 : optind;
        if (i >= argc)
            return ctl_usage(ctl, "missing the command to run");
        cmd = argv + i;
    } else if (ka.any) {
        return ctl_usage(ctl, "request flags (--method, --url, ...) need "
                         "--key-from-request");
    } else if ((rc = ctl_name_and_cmd(ctl, argc, argv, optind, "KEY", &key, &cmd))) {
        return rc;
    }

    struct once o;
    memset(&o, 0, sizeof o);
    o.ctl = ctl;
    o.key = key;
    /* a success stays usable for --keep, then stale for --stale */
    o.keep_ms = keep_ms + stale_ms;
    o.retry_fd = -1;
    o.conn_ok = true;
    if (!(o.shown = ctl_escape(key, strlen(key)))) {
        fprintf(stderr, "coordctl: once: out of memory\n");
        return CTL_EXIT_FAIL;
    }
    rc = ctl_try_connect(ctl, false);
    if (rc < 0) {
        if (run_fallback && rc == COORD_ECONNECT)
            rc = fall_back(&o, cmd, rc, coord_error_message(NULL));
        else
            rc = ctl_fail_connect(ctl, rc);
        free(o.shown);
        return rc;
    }

    int64_t deadline = wait_ms ? ctl_mono_ms() + (int64_t)wait_ms : -1;
    int retries = 0;
    for (;;) {
        coord_flight_opts fo = { .owner_ttl_ms = ttl_ms, .max_age_ms = keep_ms,
                                 .stale_ms = stale_ms, .version = version,
                                 .own_version = own_version,
                                 /* only the first join supersedes */
                                 .supersede = supersede && retries == 0,
                                 .priority = priority };
        if (deadline >= 0) {
            int64_t left = deadline - ctl_mono_ms();
            fo.wait_ms = left > 0 ? (uint64_t)left : 1;
        }
        coord_flight f;
        rc = coord_flight_join(ctl->c, key, strlen(key), &fo, &f);
        if (rc == COORD_ETIMEOUT && deadline < 0)
            continue;              /* a long chain of owners: wait on */
        if (rc == COORD_ETIMEOUT && run_fallback) {
            fprintf(stderr, "coordctl: once: %s: timed out after %s s waiting for a result: "
                            "running the command without coordination\n", o.shown, wait_arg);
            rc = run_local(&o, cmd, true);
        } else if (rc == COORD_ETIMEOUT) {
            ctl_error(ctl, "TIMEOUT", "%s: timed out after %s s waiting for a result",
                      o.shown, wait_arg);
            rc = CTL_EXIT_FAIL;
        } else if (rc < 0 && run_fallback &&
                   (rc == COORD_ECLOSED || rc == COORD_ESHUTTING_DOWN)) {
            rc = fall_back(&o, cmd, rc, coord_error_message(ctl->c));
        } else if (rc < 0) {
            rc = ctl_fail_call(ctl, "flight.join", rc);
        } else if (f.role == COORD_FLIGHT_RESULT) {
            rc = print_result(&o, &f);
        } else if (f.role == COORD_FLIGHT_FAILED) {
            if (f.retryable && !f.retry_after_ms && ++retries < ONCE_MAX_RETRIES &&
                (deadline < 0 || ctl_mono_ms() < deadline)) {
                coord_flight_clear(&f);
                continue;          /* the next owner may do better */
            }
            rc = print_failure(&o, &f);
        } else {
            o.flight = f.flight;
            o.fence = f.fence;
            rc = run_owner(&o, cmd);
        }
        coord_flight_clear(&f);
        break;
    }
    /* close here: the event callback points at o, which lives on this stack */
    coord_close(ctl->c);
    ctl->c = NULL;
    if (o.retry_fd >= 0)
        close(o.retry_fd);
    free(o.buf);
    free(o.shown);
    return rc;
}

/* ---- tables ---- */

/* Prints the JSON of reply or hands it to table(); frees it. */
static int show(struct ctl *ctl, coord_reply_t *reply, const char *what,
                int (*table)(coord_map m))
{
    coord_map m = coord_reply_map(reply);
    int rc = ctl->json ? ctl_print_json(m) : table(m);
    bool truncated = false;
    if (!ctl->json && coord_map_bool(m, "truncated", &truncated) && truncated)
        fprintf(stderr, "coordctl: %s: the list was cut (frame or count limit)\n", what);
    coord_reply_free(reply);
    return rc;
}

/* ---- coordctl flights ---- */

/* A string field as a cell, escaped: "-" when absent or empty. */
static char *text_cell(coord_map m, const char *key)
{
    const char *s = NULL;
    size_t n = 0;
    if (!coord_map_str(m, key, &s, &n) || !s || n == 0)
        return strdup("-");
    return ctl_escape(s, n);
}

/* A record's owner as a cell: "NAME (pid N)", either part alone, or "-"
 * (a record written before records kept their owner). */
static char *owner_cell(coord_map m)
{
    const char *s = NULL;
    size_t n = 0;
    uint64_t pid = 0;
    bool has_pid = coord_map_uint(m, "pid", &pid) && pid;
    bool has_name = coord_map_str(m, "client", &s, &n) && s && n;
    char *name = has_name ? ctl_escape(s, n) : NULL;
    char *cell;
    if (has_name && !name)
        return NULL;
    if (has_name && has_pid)
        cell = ctl_strdupf("%s (pid %llu)", name, (unsigned long long)pid);
    else if (has_name)
        cell = strdup(name);
    else if (has_pid)
        cell = ctl_strdupf("pid %llu", (unsigned long long)pid);
    else
        cell = strdup("-");
    free(name);
    return cell;
}

static int flights_table(coord_map m)
{
    static const char *const titles[] = {
        "KEY", "FLIGHT", "FENCE", "OWNER", "VERSION", "FOLLOWERS", "AGE",
    };
    struct ctl_rows t = { .ncols = 7, .titles = titles };
    size_t n = coord_map_array_len(m, "flights");
    if (n == 0) {
        printf("no flights running\n");
        return CTL_EXIT_OK;
    }
    for (size_t i = 0; i < n; i++) {
        coord_map e;
        char **row = ctl_rows_add(&t);
        if (!row)
            break;
        if (!coord_map_array_at(m, "flights", i, &e)) {
            for (int k = 0; k < t.ncols; k++)
                row[k] = strdup("?");
        } else {
            uint64_t conn = 0, pid = 0, age = 0;
            bool completing = false;
            char d[64];
            coord_map_uint(e, "owner_conn", &conn);
            coord_map_uint(e, "owner_pid", &pid);
            coord_map_uint(e, "age_ms", &age);
            coord_map_bool(e, "completing", &completing);
            ctl_format_duration(d, sizeof d, age);
            row[0] = ctl_escaped_field(e, "key");
            row[1] = ctl_uint_cell(e, "flight");
            row[2] = ctl_uint_cell(e, "fence");
            if (completing || conn == 0)
                row[3] = strdup("(completing)");
            else
                row[3] = ctl_strdupf("pid %llu conn %llu", (unsigned long long)pid,
                                     (unsigned long long)conn);
            row[4] = text_cell(e, "version");
            row[5] = ctl_uint_cell(e, "followers");
            row[6] = strdup(d);
        }
        ctl_rows_check(&t, row);
    }
    return ctl_rows_print(&t, "flights");
}

/* The disabled prefixes, one line each, after the flights table. */
static int print_disabled(struct ctl *ctl)
{
    coord_prefix *p = NULL;
    size_t n = 0;
    int rc = coord_flight_disabled(ctl->c, &p, &n);
    if (rc == COORD_EUNKNOWN_OP)
        return CTL_EXIT_OK;        /* a broker without the kill switch */
    if (rc < 0)
        return ctl_fail_call(ctl, "flight.disabled", rc);
    for (size_t i = 0; i < n; i++) {
        char *e = ctl_escape(p[i].p, p[i].len);
        printf("single-flight disabled for prefix \"%s\"%s\n", e ? e : "?",
               p[i].len ? "" : " (every key)");
        free(e);
    }
    free(p);
    return CTL_EXIT_OK;
}

/* --json: flight.list's object ({"flights":[...]}, "truncated" when cut)
 * with "disabled": [prefixes] added ([] from a broker without the kill
 * switch). */
static int flights_json(struct ctl *ctl, coord_reply_t *list)
{
    coord_req_t *r = coord_req_new("flight.disabled");
    coord_reply_t *reply = NULL;
    int rc = r ? coord_call(ctl->c, r, &reply) : COORD_ENOMEM;
    coord_req_free(r);
    if (rc < 0 && rc != COORD_EUNKNOWN_OP) {
        coord_reply_free(list);
        return ctl_fail_call(ctl, "flight.disabled", rc);
    }
    bool first = true;
    putchar('{');
    ctl_json_members(coord_reply_map(list), &first);
    printf("%s\"disabled\":", first ? "" : ",");
    if (rc == 0) {
        coord_map m = coord_reply_map(reply);
        size_t n = coord_map_size(m);
        bool found = false;
        for (size_t i = 0; i < n && !found; i++) {
            const char *k;
            size_t kn;
            if (coord_map_entry(m, i, &k, &kn) == COORD_TYPE_ARRAY && kn == 8 &&
                !memcmp(k, "prefixes", 8)) {
                char *arr = coord_map_value_json(m, i);
                fputs(arr ? arr : "[]", stdout);
                free(arr);
                found = true;
            }
        }
        if (!found)
            fputs("[]", stdout);
    } else {
        fputs("[]", stdout);
    }
    puts("}");
    coord_reply_free(reply);
    coord_reply_free(list);
    return CTL_EXIT_OK;
}

/* coordctl flights disable|enable PREFIX */
static int flights_switch(struct ctl *ctl, int argc, char **argv, bool disable)
{
    if (argc < 3)
        return ctl_usage(ctl, "%s needs a PREFIX (\"\" for every key)", argv[1]);
    if (argc > 3)
        return ctl_usage(ctl, "unexpected argument %s", argv[3]);
    int rc = ctl_connect(ctl);
    if (rc)
        return rc;
    const char *prefix = argv[2];
    rc = disable ? coord_flight_disable(ctl->c, prefix, strlen(prefix))
                 : coord_flight_enable(ctl->c, prefix, strlen(prefix));
    if (rc < 0)
        return ctl_fail_call(ctl, disable ? "flight.disable" : "flight.enable", rc);
    if (ctl->json) {
        fputs("{\"prefix\":", stdout);
        ctl_json_text(prefix, strlen(prefix));
        printf(",\"disabled\":%s}\n", disable ? "true" : "false");
    } else {
        char *e = ctl_escape(prefix, strlen(prefix));
        printf("single-flight %s for prefix \"%s\"%s\n", disable ? "disabled" : "enabled",
               e ? e : "?", prefix[0] ? "" : " (every key)");
        free(e);
    }
    return CTL_EXIT_OK;
}

int cmd_flights(struct ctl *ctl, int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "disable"))
        return flights_switch(ctl, argc, argv, true);
    if (argc > 1 && !strcmp(argv[1], "enable"))
        return flights_switch(ctl, argc, argv, false);
    if (argc > 1)
        return ctl_usage(ctl, "unexpected argument %s", argv[1]);
    int rc = ctl_connect(ctl);
    if (rc)
        return rc;
    coord_reply_t *reply = NULL;
    rc = coord_flight_list(ctl->c, &reply);
    if (rc < 0)
        return ctl_fail_call(ctl, "flight.list", rc);
    if (ctl->json)
        return flights_json(ctl, reply);
    rc = show(ctl, reply, "flights", flights_table);
    return rc ? rc : print_disabled(ctl);
}

/* ---- coordctl records ---- */

static int records_table(coord_map m)
{
    static const char *const titles[] = {
        "KEY", "STATUS", "FENCE", "OWNER", "VERSION", "SIZE", "CREATED", "EXPIRES",
    };
    struct ctl_rows t = { .ncols = 8, .titles = titles };
    size_t n = coord_map_array_len(m, "records");
    if (n == 0) {
        printf("no records\n");
        return CTL_EXIT_OK;
    }
    uint64_t now = ctl_wall_ms();
    for (size_t i = 0; i < n; i++) {
        coord_map e;
        char **row = ctl_rows_add(&t);
        if (!row)
            break;
        if (!coord_map_array_at(m, "records", i, &e)) {
            for (int k = 0; k < t.ncols; k++)
                row[k] = strdup("?");
        } else {
            uint64_t created = 0, expires = 0;
            char d[64];
            coord_map_uint(e, "created_ms", &created);
            coord_map_uint(e, "expires_ms", &expires);
            row[0] = ctl_escaped_field(e, "key");
            row[1] = ctl_escaped_field(e, "status");
            row[2] = ctl_uint_cell(e, "fence");
            row[3] = owner_cell(e);
            row[4] = text_cell(e, "version");
            row[5] = ctl_uint_cell(e, "size");
            ctl_format_duration(d, sizeof d, now > created ? now - created : 0);
            row[6] = ctl_strdupf("%s ago", d);
            ctl_format_duration(d, sizeof d, expires > now ? expires - now : 0);
            row[7] = ctl_strdupf("in %s", d);
        }
        ctl_rows_check(&t, row);
    }
    return ctl_rows_print(&t, "records");
}

/* --prefix P (and, for records, --limit N); false after a usage error,
 * with *rc set. */
static bool prefix_args(struct ctl *ctl, int argc, char **argv, bool with_limit,
                        const char **prefix, unsigned *limit, int *rc)
{
    static const struct option longopts[] = {
        { "prefix", required_argument, NULL, 'p' },
        { "limit", required_argument, NULL, 'l' },
        { NULL, 0, NULL, 0 },
    };
    int opt;
    optind = 1;
    opterr = 0;
    *prefix = "";
    while ((opt = getopt_long(argc, argv, "+p:", longopts, NULL)) != -1) {
        switch (opt) {
        case 'p':
            *prefix = optarg;
            break;
        case 'l': {
            char *end;
            unsigned long v = strtoul(optarg, &end, 10);
            if (!with_limit) {
                *rc = ctl_usage(ctl, "unknown flag --limit");
                return false;
            }
            if (end == optarg || *end || v == 0 || v > 1000) {
                *rc = ctl_usage(ctl, "--limit needs a number 1..1000, not %s", optarg);
                return false;
            }
            *limit = (unsigned)v;
            break;
        }
        case ':':
            *rc = ctl_usage(ctl, "%s needs a value", argv[optind - 1]);
            return false;
        default:
            *rc = ctl_usage(ctl, "unknown flag %s", argv[optind - 1]);
            return false;
        }
    }
    if (optind < argc) {
        *rc = ctl_usage(ctl, "unexpected argument %s", argv[optind]);
        return false;
    }
    return true;
}

int cmd_records(struct ctl *ctl, int argc, char **argv)
{
    const char *prefix;
    unsigned limit = 0;
    int rc;
    if (!prefix_args(ctl, argc, argv, true, &prefix, &limit, &rc))
        return rc;
    if ((rc = ctl_connect(ctl)))
        return rc;
    coord_reply_t *reply = NULL;
    rc = coord_record_list(ctl->c, prefix, strlen(prefix), limit, &reply);
    if (rc < 0)
        return ctl_fail_call(ctl, "record.list", rc);
    return show(ctl, reply, "records", records_table);
}

/* ---- coordctl record ---- */

/* coordctl record get KEY: a completed record's result on stdout as it is
 * (read from its descriptor when it is kept by reference), a failed one's
 * code and message on stderr (exit 1); --json: one object. */
int cmd_record(struct ctl *ctl, int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "get") != 0)
        return ctl_usage(ctl, "needs get KEY");
    argc--;
    argv++;
    if (argc != 2 || argv[1][0] == '-')
        return ctl_usage(ctl, "get needs one KEY");
    int rc = ctl_connect(ctl);
    if (rc)
        return rc;
    coord_record r;
    rc = coord_record_get(ctl->c, argv[1], strlen(argv[1]), &r);
    if (rc < 0)
        return ctl_fail_call(ctl, "record.get", rc);
    bool by_ref = r.by_ref;
    if (by_ref && coord_record_result_load(&r) < 0) {
        ctl_error(ctl, "SYS", "record: reading the result (%zu bytes by reference): %s",
                  r.result_len, strerror(errno));
        coord_record_clear(&r);
        return CTL_EXIT_FAIL;
    }
    rc = 0;
    if (ctl->json) {
        char *res = r.failed ? NULL : coord_json_text(r.result, r.result_len);
        char *code = r.failed ? coord_json_text(r.error_code, strlen(r.error_code)) : NULL;
        char *msg = r.failed ? coord_json_text(r.error_message, strlen(r.error_message)) : NULL;
        printf("{\"status\":\"%s\",\"fence\":%llu,\"size\":%zu,\"by_ref\":%s,"
               "\"created_ms\":%llu,\"expires_ms\":%llu,",
               r.failed ? "failed" : "completed", (unsigned long long)r.fence,
               r.result_len, by_ref ? "true" : "false", (unsigned long long)r.created_ms,
               (unsigned long long)r.expires_ms);
        if (r.failed)
            printf("\"error\":{\"code\":%s,\"message\":%s},\"retryable\":%s}\n",
                   code ? code : "\"\"", msg ? msg : "\"\"", r.retryable ? "true" : "false");
        else
            printf("\"result\":%s}\n", res ? res : "null");
        free(res);
        free(code);
        free(msg);
        rc = r.failed ? CTL_EXIT_FAIL : 0;
    } else if (r.failed) {
        fprintf(stderr, "coordctl: record: %s: %s\n", r.error_code, r.error_message);
        rc = CTL_EXIT_FAIL;
    } else {
        fflush(stdout);
        if (!write_all(STDOUT_FILENO, r.result, r.result_len)) {
            fprintf(stderr, "coordctl: record: writing the output: %s\n", strerror(errno));
            rc = CTL_EXIT_FAIL;
        }
    }
    coord_record_clear(&r);
    return rc;
}

/* ---- coordctl purge ---- */

int cmd_purge(struct ctl *ctl, int argc, char **argv)
{
    const char *prefix;
    int rc;
    if (!prefix_args(ctl, argc, argv, false, &prefix, NULL, &rc))
        return rc;
    if ((rc = ctl_connect(ctl)))
        return rc;
    if (ctl->json) {
        coord_req_t *r = coord_req_new("record.purge");
        if (!r) {
            fprintf(stderr, "coordctl: purge: out of memory\n");
            return CTL_EXIT_FAIL;
        }
        coord_req_str(r, "prefix", prefix, strlen(prefix));
        coord_reply_t *reply = NULL;
        rc = coord_call(ctl->c, r, &reply);
        coord_req_free(r);
        if (rc < 0)
            return ctl_fail_call(ctl, "record.purge", rc);
        rc = ctl_print_json(coord_reply_map(reply));
        coord_reply_free(reply);
        return rc;
    }
    uint64_t deleted = 0, fenced = 0;
    rc = coord_record_purge_counts(ctl->c, prefix, strlen(prefix), &deleted, &fenced);
    if (rc < 0)
        return ctl_fail_call(ctl, "record.purge", rc);
    printf("deleted %llu\nfenced %llu\n", (unsigned long long)deleted,
           (unsigned long long)fenced);
    return CTL_EXIT_OK;
}
