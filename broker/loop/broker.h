/* broker.h - the broker itself: its options, counters and loop state, and
 * the dispatcher's entry points.  One libuv loop, one thread serves every
 * client; only the store's writer runs beside it (store.h).  A
 * connection is conn.h, the log log.h (both included here). */
#ifndef COORD_BROKER_H
#define COORD_BROKER_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "deadline.h"
#include "enc.h"
#include "frame.h"
#include "hashmap.h"
#include "list.h"
#include "msg.h"
#include "conn.h"
#include "log.h"

struct store;

/* The options' defaults, named once: main.c sets them and prints them in
 * coordd --help (the frame's is protocol/frame.h's, the held budget's
 * coord-limits.h's, the data size's store.h's). */
#define DEFAULT_MAX_CONNS 4096u
#define DEFAULT_MAX_PENDING 1024u
#define DEFAULT_MAX_OUTBUF (16u << 20)   /* or twice max_frame if more */
#define DEFAULT_HANDSHAKE_MS 5000u
#define DEFAULT_ETCD_PREFIX "/coord/"

struct broker_options {
    char socket_path[128];
    char data_dir[4096];
    char config_dir[4096];         /* workstreams/WORKSTREAM.v1 descriptors */
    bool foreground;
    unsigned idle_exit_s;          /* 0: never */
    int ready_fd;                  /* -1: none */
    /* The two locks main takes before it forks (broker_run owns them):
     * PATH.lock beside the socket, DATA_DIR/coordd.lock (instance.h). */
    int socket_lock_fd;
    int data_lock_fd;
    uint32_t max_frame;
    unsigned max_conns;
    unsigned max_pending;          /* waiting requests per connection */
    size_t max_outbuf;             /* bytes queued to one client */
    unsigned handshake_ms;
    uint64_t max_data_size;        /* LMDB map cap, bytes */
    uint64_t max_held;             /* the held-state budget (budget.h), entries */
    char leader_ledger[32];        /* --ledger: "local" (LMDB) or "etcd" */
    char etcd_endpoints[1024];     /* --etcd-endpoints URL[,URL] */
    char etcd_prefix[128];         /* --etcd-prefix (default "/coord/") */
    bool log_names_plain;          /* --log-names plain (else keyed hashes) */
    uint64_t max_ref_bytes;        /* --max-ref-bytes: largest result by reference */
};

/* Counters reported by `stats`.  Keep names in sync with stats.c. */
struct broker_stats {
    uint64_t conns_accepted;
    uint64_t conns_rejected_peer;   /* other uid */
    uint64_t conns_rejected_limit;  /* max_conns */
    uint64_t conns_rejected_fd;     /* accept at the fd limit (EMFILE/ENFILE) */
    uint64_t bad_frames;
    uint64_t bad_requests;
    uint64_t handshake_timeouts;
    uint64_t pending_limit_hits;
    uint64_t outbuf_disconnects;    /* past max_outbuf, or stalled */
    uint64_t outbuf_stalls;         /* of those: paused with no progress */
    uint64_t outbuf_pauses;         /* reading paused for backpressure */
    uint64_t partial_limit_cuts;    /* LIMIT_PARTIAL_TOTAL */
    uint64_t oversized_frames;      /* a reply or event over max_frame, refused */
    uint64_t bytes_in;
    uint64_t bytes_out;
    uint64_t requests;
    uint64_t cancels;
    uint64_t timeouts;
    uint64_t fds_received;          /* descriptors clients passed (results by reference) */
    uint64_t fds_sent;              /* descriptors the broker passed */
    uint64_t refs_given;            /* result_ref to connections without descriptors */
};

struct broker {
    uv_loop_t *loop;
    struct broker_options opt;
    struct broker_stats stats;
    uint64_t requests_by_op[64];

    bool listening;
    int listen_fd;                /* the listening socket */
    bool bound_socket;            /* we bound it (not socket-activated) */
    uv_poll_t listen_poll;
    int reserve_fd;               /* spent to refuse a peer at the fd limit */
    uv_timer_t accept_retry;
    struct log_rate fd_limit_log;
    int lock_fd;                  /* flock'ed file beside the socket */
    int data_lock_fd;             /* flock'ed DATA_DIR/coordd.lock */
    uv_signal_t sig_term, sig_int, sig_hup;
    uv_prepare_t flush_prepare;
    uv_check_t flush_check;
    uv_timer_t idle_timer;
    uv_timer_t trim_timer;        /* a malloc_trim due (broker_trim_soon) */
    uint64_t trim_next_ms;        /* no trim before this */
    uint64_t trims;               /* stats.memory_trims */

    struct list conns;
    struct list dirty;
    struct list cut;              /* connections to close at the safe point */
    struct list throttled;        /* connections to read again next turn */
    uv_idle_t resume_idle;        /* active while 'throttled' is not empty:
                                     the poll does not block meanwhile */
    size_t out_pause;             /* the pause mark (LIMIT_OUTBUF_PAUSE) */
    size_t partial_bytes;         /* all readers' partial-frame buffers */
    struct hashmap pending;       /* struct pending by (conn, rid) */
    unsigned nconns;
    uint64_t next_conn_id;
    uint64_t started_ms;
    bool shutting_down;

    struct store *store;
    coord_index req;              /* the frame being dispatched */
    uint8_t read_buf[65536];      /* shared by every read callback */
};

/* dispatch.c */
int dispatch_frame(struct conn *c, const uint8_t *body, size_t len);
int dispatch_op_index(const char *name, size_t len);
const char *dispatch_op_name(int index);

/* stats.c */
void stats_reply(struct conn *c, uint64_t rid);

/* broker.c */
/* Runs the broker until shutdown; returns the exit status. */
int broker_run(struct broker_options *opt);
/* Tells whoever started the broker why it cannot start: "error REASON\n"
 * on the ready fd (reason on one line), then closes it.  fd -1: nothing. */
void broker_ready_error(int fd, const char *reason);
uint64_t broker_now_ms(struct broker *b);
void broker_conn_count_changed(struct broker *b);
void broker_shutdown(struct broker *b);
/* Much memory was freed: malloc_trim(0) soon, at most once per
 * LIMIT_TRIM_INTERVAL_MS (never inside this call). */
void broker_trim_soon(struct broker *b);

#endif
