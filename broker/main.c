/* main.c - coordd's command line. */
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "broker.h"
#include "coord-limits.h"
#include "instance.h"
#include "listener.h"
#include "coord-version.h"
#include "store.h"
#include "paths.h"

static void usage(FILE *f)
{
    fprintf(f,
"usage: coordd [options]\n"
"  --foreground            stay attached to the terminal, log to stderr (to\n"
"                          DATA-DIR/coordd.log when stderr is /dev/null)\n"
"  --socket PATH           socket (default $COORD_SOCKET, $XDG_RUNTIME_DIR/coord/broker.sock,\n"
"                          /tmp/coord-$UID/broker.sock)\n"
"  --config-dir DIR        descriptor files DIR/workstreams/WORKSTREAM.v1 (default\n"
"                          $COORD_CONFIG_DIR, $XDG_CONFIG_HOME/coord, ~/.config/coord)\n"
"  --data-dir DIR          LMDB ledger (default $COORD_DATA_DIR, $XDG_STATE_HOME/coord,\n"
"                          ~/.local/state/coord)\n"
"  --idle-exit SECONDS     exit when no client has been connected that long\n"
"  --ready-fd N            write \"ready\\n\" to fd N once accepting, or\n"
"                          \"error REASON\\n\" when it cannot start; then close it\n"
"  --log-level LEVEL       debug, info, warn or error (default info)\n"
"  --max-frame BYTES       largest frame accepted (default %u)\n"
"  --max-conns N           connections at once (default %u)\n"
"  --max-pending N         waiting requests per connection (default %u)\n"
"  --max-outbuf BYTES      bytes queued to one client before it is cut off\n"
"                          (default %u, or twice --max-frame if more;\n"
"                          at least --max-frame + %u)\n"
"  --handshake-timeout MS  time allowed for hello (default %u)\n"
"  --max-held N            locks, waiting requests, flights and subscriptions\n"
"                          held for all clients together (default %u)\n"
"  --max-data-size BYTES   cap of the LMDB ledger (default %llu, at least\n"
"                          %llu); past it writes fail with STORAGE\n"
"  --max-ref-bytes BYTES   the largest result by reference (a sealed memfd)\n"
"                          a flight may complete with (default %llu)\n"
"  --ledger NAME           where leadership's generations and commits live:\n"
"                          local (LMDB in the data dir, the default) or etcd\n"
"                          (shared by the brokers of several machines)\n"
"  --etcd-endpoints URLS   etcd's client URLs, comma-separated\n"
"                          (http://127.0.0.1:2379,...), for --ledger etcd\n"
"  --etcd-prefix P         the ledger's keys in etcd start with P (default %s)\n"
"  --log-names hash|plain  names, keys and client text in the log as keyed\n"
"                          hashes (the default) or as they are (debugging)\n"
"  -V, --version, -h, --help\n",
            COORD_MAX_FRAME_DEFAULT, DEFAULT_MAX_CONNS, DEFAULT_MAX_PENDING, DEFAULT_MAX_OUTBUF,
            COORD_FRAME_HEADER + LIMIT_OUTBUF_MIN_MARK, DEFAULT_HANDSHAKE_MS, LIMIT_HELD_DEFAULT,
            (unsigned long long)STORE_DEFAULT_DATA_SIZE,
            (unsigned long long)STORE_MIN_DATA_SIZE,
            (unsigned long long)LIMIT_MAX_REF_BYTES_DEFAULT, DEFAULT_ETCD_PREFIX);
}

static int parse_num(const char *s, unsigned long long min, unsigned long long max,
                     unsigned long long *out)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (!*s || *end || s[0] == '-' || v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

/* Fork into the background: the parent returns after the child is set up.
 * stdin and stdout go to /dev/null; stderr too until the log file takes
 * its place (log_to_file). */
static void daemonize(void)
{
    pid_t pid = fork();
    if (pid < 0) {
        perror("coordd: fork");
        exit(1);
    }
    if (pid > 0)
        exit(0);
    setsid();
    if (fork() > 0)
        _exit(0);
    int null = open("/dev/null", O_RDWR);
    if (null >= 0) {
        dup2(null, 0);
        dup2(null, 1);
        dup2(null, 2);
        if (null > 2)
            close(null);
    }
    if (chdir("/") < 0)
        _exit(1);
}

/* Cannot start: one line on stderr and the reason on the ready fd. */
static int refuse(const struct broker_options *opt, const char *reason)
{
    fprintf(stderr, "coordd: %s\n", reason);
    broker_ready_error(opt->ready_fd, reason);
    return 1;
}

/* The two locks, then the fork, then the log, then the broker.  Both locks
 * are taken before daemonize(), so that a refusal reaches the terminal and
 * the exit status of the command that was typed, and before the log file
 * is opened, so that a refused broker never writes into the log of the
 * one it found.  The socket's lock comes first: a second broker on the
 * same socket and data dir exits quietly (status 0, an autostart race). */
static int start(struct broker_options *opt)
{
    char err[COORD_READY_LINE_MAX];
    int rc = listener_lock(opt->socket_path, &opt->socket_lock_fd, err, sizeof err);
    if (rc == 1) {
        log_event(LOG_INFO, "broker.already_running", "socket=\"%s\"", opt->socket_path);
        return 0;
    }
    if (rc < 0)
        return refuse(opt, err);
    if (coord_prepare_private_dir(opt->data_dir, err, sizeof err) < 0)
        return refuse(opt, err);
    struct instance_holder h;
    rc = instance_lock(opt->data_dir, &opt->data_lock_fd, &h, err, sizeof err);
    if (rc == 1 && strcmp(h.socket, opt->socket_path) == 0) {
        /* the broker of this very socket, leaving (it gives up the data
         * dir just before the socket's lock): whoever started us tries
         * again, as when the socket's lock was taken */
        log_event(LOG_INFO, "broker.already_running", "socket=\"%s\"", opt->socket_path);
        return 0;
    }
    if (rc == 1 && h.pid > 0)
        snprintf(err, sizeof err, "data dir %s is in use by the broker pid %d listening on "
                 "%s (set COORD_SOCKET=%s to use it)", opt->data_dir, (int)h.pid,
                 h.socket, h.socket);
    else if (rc == 1)
        snprintf(err, sizeof err, "data dir %s is in use by another broker (it did not "
                 "write its pid and socket into %s/%s)", opt->data_dir, opt->data_dir,
                 INSTANCE_LOCK_FILE);
    if (rc != 0)
        return refuse(opt, err);

    /* a broker nobody watches (daemonized, or autostarted by libcoord with
     * stderr on /dev/null) logs to a file in its data dir */
    bool to_file = !opt->foreground || log_stderr_is_null();
    if (!opt->foreground)
        daemonize();
    /* after the forks: the pid that holds the locks now.  Not written (a
     * full disk): the lock holds all the same, a broker refused later just
     * cannot name us, and the ledger will say what is wrong */
    char unnamed[256];
    bool named = instance_publish(opt->data_lock_fd, opt->socket_path, unnamed,
                                  sizeof unnamed) == 0;
    if (to_file) {
        char logpath[sizeof opt->data_dir + 16];
        snprintf(logpath, sizeof logpath, "%s/coordd.log", opt->data_dir);
        if (log_to_file(logpath, err, sizeof err) < 0 && opt->foreground)
            fprintf(stderr, "coordd: %s\n", err);
    }
    if (!named)
        log_event(LOG_WARN, "broker.lock_unnamed", "error=\"%s\"", unnamed);
    return broker_run(opt);
}

int main(int argc, char **argv)
{
    struct broker_options opt;
    memset(&opt, 0, sizeof opt);
    opt.ready_fd = -1;
    opt.socket_lock_fd = -1;
    opt.data_lock_fd = -1;
    opt.max_frame = COORD_MAX_FRAME_DEFAULT;
    opt.max_conns = DEFAULT_MAX_CONNS;
    opt.max_pending = DEFAULT_MAX_PENDING;
    opt.max_outbuf = 0;                /* below: from max_frame unless given */
    opt.handshake_ms = DEFAULT_HANDSHAKE_MS;
    strcpy(opt.leader_ledger, "local");
    strcpy(opt.etcd_prefix, DEFAULT_ETCD_PREFIX);
    opt.max_data_size = STORE_DEFAULT_DATA_SIZE;
    opt.max_held = LIMIT_HELD_DEFAULT;
    opt.max_ref_bytes = LIMIT_MAX_REF_BYTES_DEFAULT;
    const char *socket_arg = NULL, *data_arg = NULL, *config_arg = NULL;

    enum { O_FG = 1, O_SOCK, O_DATA, O_IDLE, O_READY, O_LOG, O_FRAME, O_CONNS,
           O_PENDING, O_OUTBUF, O_HANDSHAKE, O_DATASIZE, O_LEDGER, O_LOGNAMES, O_VERSION, O_HELP, O_ETCD_EP, O_ETCD_PREFIX, O_CONFIG, O_MAXHELD, O_MAXREF };
    static const struct option longopts[] = {
        { "foreground", no_argument, NULL, O_FG },
        { "socket", required_argument, NULL, O_SOCK },
        { "data-dir", required_argument, NULL, O_DATA },
        { "idle-exit", required_argument, NULL, O_IDLE },
        { "ready-fd", required_argument, NULL, O_READY },
        { "log-level", required_argument, NULL, O_LOG },
        { "max-frame", required_argument, NULL, O_FRAME },
        { "max-conns", required_argument, NULL, O_CONNS },
        { "max-pending", required_argument, NULL, O_PENDING },
        { "max-outbuf", required_argument, NULL, O_OUTBUF },
        { "handshake-timeout", required_argument, NULL, O_HANDSHAKE },
        { "max-data-size", required_argument, NULL, O_DATASIZE },
        { "ledger", required_argument, NULL, O_LEDGER },
        { "log-names", required_argument, NULL, O_LOGNAMES },
        { "version", no_argument, NULL, O_VERSION },
        { "help", no_argument, NULL, O_HELP },
        { "etcd-endpoints", required_argument, NULL, O_ETCD_EP },
        { "etcd-prefix", required_argument, NULL, O_ETCD_PREFIX },
        { "config-dir", required_argument, NULL, O_CONFIG },
        { "max-held", required_argument, NULL, O_MAXHELD },
        { "max-ref-bytes", required_argument, NULL, O_MAXREF },
        { NULL, 0, NULL, 0 },
    };
    int ch;
    unsigned long long v = 0;          /* parse_num sets it only when valid */
    bool etcd_prefix_set = false;
    while ((ch = getopt_long(argc, argv, "hV", longopts, NULL)) != -1) {
        int bad = 0;
        switch (ch) {
        case O_FG: opt.foreground = true; break;
        case O_SOCK: socket_arg = optarg; break;
        case O_DATA: data_arg = optarg; break;
        case O_CONFIG: config_arg = optarg; break;
        case O_IDLE: bad = parse_num(optarg, 0, 86400 * 365, &v); opt.idle_exit_s = (unsigned)v; break;
        case O_READY: bad = parse_num(optarg, 0, 65535, &v); opt.ready_fd = (int)v; break;
        case O_LOG:
            log_min_level = log_parse_level(optarg);
            bad = log_min_level < 0;
            break;
        case O_FRAME: bad = parse_num(optarg, 1024, COORD_MAX_FRAME_CAP, &v); opt.max_frame = (uint32_t)v; break;
        case O_CONNS: bad = parse_num(optarg, 1, 1000000, &v); opt.max_conns = (unsigned)v; break;
        case O_PENDING: bad = parse_num(optarg, 1, 1000000, &v); opt.max_pending = (unsigned)v; break;
        case O_OUTBUF: bad = parse_num(optarg, 4096, 1ull << 34, &v); opt.max_outbuf = (size_t)v; break;
        case O_HANDSHAKE: bad = parse_num(optarg, 1, 3600000, &v); opt.handshake_ms = (unsigned)v; break;
        case O_MAXHELD: bad = parse_num(optarg, 16, 1ull << 32, &v); opt.max_held = v; break;
        case O_MAXREF: bad = parse_num(optarg, 1, 1ull << 40, &v); opt.max_ref_bytes = v; break;
        case O_DATASIZE:
            bad = parse_num(optarg, STORE_MIN_DATA_SIZE, STORE_MAX_DATA_SIZE, &v);
            opt.max_data_size = v;
            break;
        case O_LEDGER:
            bad = strlen(optarg) >= sizeof opt.leader_ledger;
            if (!bad)
                strcpy(opt.leader_ledger, optarg);
            break;
        case O_LOGNAMES:
            opt.log_names_plain = strcmp(optarg, "plain") == 0;
            bad = !opt.log_names_plain && strcmp(optarg, "hash") != 0;
            break;
        case O_ETCD_EP:
            bad = strlen(optarg) >= sizeof opt.etcd_endpoints;
            if (!bad)
                strcpy(opt.etcd_endpoints, optarg);
            break;
        case O_ETCD_PREFIX:
            etcd_prefix_set = true;
            bad = !*optarg || strlen(optarg) >= sizeof opt.etcd_prefix;
            if (!bad)
                strcpy(opt.etcd_prefix, optarg);
            break;
        case O_VERSION: case 'V': printf("coordd %s\n", COORD_VERSION); return 0;
        case O_HELP: case 'h': usage(stdout); return 0;
        default: fprintf(stderr, "coordd: try coordd --help\n"); return 2;
        }
        if (bad) {
            const char *name = "?";          /* the option's name by its value */
            for (const struct option *o = longopts; o->name; o++)
                if (o->val == ch)
                    name = o->name;
            fprintf(stderr, "coordd: bad value for --%s: %s\n", name, optarg);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "coordd: unexpected argument %s (try coordd --help)\n", argv[optind]);
        return 2;
    }
    /* the etcd flags mean nothing to another ledger: say so, never ignore them */
    if (strcmp(opt.leader_ledger, "etcd") != 0 && (opt.etcd_endpoints[0] || etcd_prefix_set)) {
        fprintf(stderr, "coordd: --etcd-endpoints and --etcd-prefix need --ledger etcd "
                        "(the ledger is %s)\n", opt.leader_ledger);
        return 2;
    }
    /* the output cap must hold one largest reply above the least pause
     * mark (coord-limits.h), else a reply could never be queued */
    size_t outbuf_min = (size_t)opt.max_frame + COORD_FRAME_HEADER + LIMIT_OUTBUF_MIN_MARK;
    if (opt.max_outbuf == 0) {
        opt.max_outbuf = DEFAULT_MAX_OUTBUF;
        if (opt.max_outbuf < 2 * (size_t)opt.max_frame)
            opt.max_outbuf = 2 * (size_t)opt.max_frame;
    } else if (opt.max_outbuf < outbuf_min) {
        fprintf(stderr, "coordd: --max-outbuf %zu is below --max-frame %u plus %u bytes "
                "(at least %zu): a reply of max_frame bytes could never be queued\n",
                opt.max_outbuf, (unsigned)opt.max_frame,
                COORD_FRAME_HEADER + LIMIT_OUTBUF_MIN_MARK, outbuf_min);
        return 2;
    }
    if (socket_arg) {
        if (strlen(socket_arg) >= sizeof opt.socket_path) {
            fprintf(stderr, "coordd: socket path too long (limit %d bytes)\n",
                    COORD_SOCKET_PATH_MAX);
            return 2;
        }
        strcpy(opt.socket_path, socket_arg);
    } else if (coord_default_socket_path(opt.socket_path, sizeof opt.socket_path) < 0) {
        refuse(&opt, "the default socket path is too long");
        return 2;
    }
    if (data_arg) {
        if (strlen(data_arg) >= sizeof opt.data_dir) {
            refuse(&opt, "data dir path too long");
            return 2;
        }
        strcpy(opt.data_dir, data_arg);
    } else if (coord_default_data_dir(opt.data_dir, sizeof opt.data_dir) < 0) {
        refuse(&opt, "the default data dir path is too long");
        return 2;
    }
    if (config_arg) {
        if (strlen(config_arg) >= sizeof opt.config_dir) {
            fprintf(stderr, "coordd: config dir path too long\n");
            return 2;
        }
        strcpy(opt.config_dir, config_arg);
    } else if (coord_default_config_dir(opt.config_dir, sizeof opt.config_dir) < 0) {
        fprintf(stderr, "coordd: default config dir path too long\n");
        return 2;
    }
    return start(&opt);
}
