/* broker.c - the broker's life: start-up in the right order (lock, ledger,
 * epoch, listen, ready), idle exit, and the orderly shutdown on SIGTERM. */
#include <malloc.h>
#include <signal.h>
#include <sys/resource.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "breaks.h"
#include "broker.h"
#include "budget.h"
#include "coord-limits.h"
#include "errors.h"
#include "ids.h"
#include "redact.h"
#include "deadline.h"
#include "store.h"
#include "leaders.h"
#include "listener.h"
#include "paths.h"
#include "tables.h"

uint64_t broker_now_ms(struct broker *b)
{
    return uv_now(b->loop);
}

static void on_idle_timeout(uv_timer_t *t)
{
    struct broker *b = t->data;
    log_event(LOG_INFO, "broker.idle_exit", "idle_s=%u", b->opt.idle_exit_s);
    broker_shutdown(b);
}

void broker_conn_count_changed(struct broker *b)
{
    if (!b->opt.idle_exit_s || b->shutting_down)
        return;
    if (b->nconns == 0)
        uv_timer_start(&b->idle_timer, on_idle_timeout,
                       (uint64_t)b->opt.idle_exit_s * 1000, 0);
    else
        uv_timer_stop(&b->idle_timer);
}

static void on_trim(uv_timer_t *t)
{
    struct broker *b = t->data;
    malloc_trim(0);
    b->trims++;
    b->trim_next_ms = uv_now(b->loop) + LIMIT_TRIM_INTERVAL_MS;
}

void broker_trim_soon(struct broker *b)
{
    if (b->shutting_down || uv_is_active((uv_handle_t *)&b->trim_timer))
        return;
    uint64_t now = uv_now(b->loop);
    uv_timer_start(&b->trim_timer, on_trim, b->trim_next_ms > now ? b->trim_next_ms - now : 0,
                   0);
}

static void on_resume_idle(uv_idle_t *h)
{
    (void)h;                      /* its being active is the point */
}

/* The loop turn's safe points: connections cut off meanwhile are closed,
 * then every connection with output is written; before polling, those
 * whose read budget ran out are read again. */
static void on_flush_prepare(uv_prepare_t *h)
{
    struct broker *b = h->data;
    conn_reap(b);
    conn_flush_all(b);
    /* the second pass finds nothing to do when nothing is throttled, cut
     * or written since (the usual turn): one test for all three */
    if (!list_empty(&b->throttled) || !list_empty(&b->cut) || !list_empty(&b->dirty)) {
        conn_resume_throttled(b);
        conn_reap(b);
        conn_flush_all(b);
    }
    /* a connection unpaused by this flush is read next turn: the poll must
     * not sleep meanwhile */
    if (list_empty(&b->throttled))
        uv_idle_stop(&b->resume_idle);
    else
        uv_idle_start(&b->resume_idle, on_resume_idle);
}

static void on_flush_check(uv_check_t *h)
{
    struct broker *b = h->data;
    conn_reap(b);
    conn_flush_all(b);
}

static void on_signal(uv_signal_t *s, int signum)
{
    log_event(LOG_INFO, "broker.signal", "signal=%d", signum);
    broker_shutdown(s->data);
}

static void on_hup(uv_signal_t *s, int signum)
{
    (void)signum;
    log_event(LOG_INFO, "broker.reload", "signal=SIGHUP");
    leaders_config_load(s->data);
}

static void close_any(uv_handle_t *h, void *arg)
{
    (void)arg;
    if (!uv_is_closing(h))
        uv_close(h, NULL);
}

/* Stop accepting, answer everything that waits with SHUTTING_DOWN, let the
 * ledger finish its writes (their replies still go out), then close. */
void broker_shutdown(struct broker *b)
{
    if (b->shutting_down)
        return;
    b->shutting_down = true;
    log_event(LOG_INFO, "broker.shutdown", "connections=%u", b->nconns);
    listener_stop(b);
    struct list *pos, *tmp;
    list_for_each_safe(pos, tmp, &b->conns)
        pending_abort_all(list_entry(pos, struct conn, link), COORD_ESHUTTING_DOWN);
    tables_shutdown(b);
    store_close(b->store);
    b->store = NULL;
    conn_reap(b);
    conn_flush_all(b);
    /* each close removes one connection from the list; closing may cut
     * others, which are still on it and closed in turn */
    while (!list_empty(&b->conns))
        conn_close(list_entry(b->conns.next, struct conn, link), "shutdown");
    uv_stop(b->loop);
}

static int write_ready(int fd)
{
    if (fd < 0)
        return 0;
    ssize_t w = write(fd, "ready\n", 6);
    close(fd);
    return w == 6 ? 0 : -1;
}

void broker_ready_error(int fd, const char *reason)
{
    if (fd < 0)
        return;
    char line[COORD_READY_LINE_MAX];
    int n = snprintf(line, sizeof line, "error %s", reason);
    if (n < 0)
        n = 0;
    if ((size_t)n > sizeof line - 2)
        n = (int)sizeof line - 2;
    for (int i = 0; i < n; i++)
        if (line[i] == '\n' || line[i] == '\r')
            line[i] = ' ';
    line[n++] = '\n';
    ssize_t w = write(fd, line, (size_t)n);
    (void)w;
    close(fd);
}

/* A start-up step failed: said in the log and on the ready fd. */
static int start_failed(struct broker *b, const char *err)
{
    log_event(LOG_ERROR, "broker.start_failed", "error=\"%s\"", err);
    broker_ready_error(b->opt.ready_fd, err);
    b->opt.ready_fd = -1;
    return 1;
}

int broker_run(struct broker_options *opt)
{
    static struct broker broker;      /* big (read buffer): not on the stack */
    struct broker *b = &broker;
    char err[512];
    int rc;

    b->opt = *opt;
    held_budget.max = opt->max_held;
    b->lock_fd = -1;
    /* main.c made sure a max_frame reply fits above LIMIT_OUTBUF_MIN_MARK */
    b->out_pause = b->opt.max_outbuf - b->opt.max_frame - COORD_FRAME_HEADER;
    if (b->out_pause > LIMIT_OUTBUF_PAUSE)
        b->out_pause = LIMIT_OUTBUF_PAUSE;
    list_init(&b->conns);
    list_init(&b->dirty);
    list_init(&b->cut);
    list_init(&b->throttled);
    hashmap_init(&b->pending);
    signal(SIGPIPE, SIG_IGN);
    /* max_conns is 4096 by default; the usual soft limit is 1024 fds */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }

    /* main took both locks (before it forked and before the log file) */
    b->lock_fd = opt->socket_lock_fd;
    b->data_lock_fd = opt->data_lock_fd;

    b->loop = uv_default_loop();
#ifdef COORD_TEST_BREAKS
    char mdb[sizeof b->opt.data_dir + 16];
    bool new_ledger = snprintf(mdb, sizeof mdb, "%s/data.mdb", b->opt.data_dir) <
                      (int)sizeof mdb && access(mdb, F_OK) != 0;   /* wipe-forgets-config */
#endif
    if (store_open(&b->store, b->opt.data_dir, b->opt.max_data_size, b->loop,
                    err, sizeof err) < 0)
        return start_failed(b, err);
    if (redact_init(b->opt.data_dir, b->opt.log_names_plain, err, sizeof err) < 0 ||
#ifdef COORD_TEST_BREAKS
        breaks_init(err, sizeof err) < 0 ||
#endif
        ids_start(b->store, err, sizeof err) < 0)
        return start_failed(b, err);
    if (tables_init(b, err, sizeof err) < 0)
        return start_failed(b, err);
    /* before the listener: what the files define is queued ahead of any
     * client's request on those workstreams */
#ifdef COORD_TEST_BREAKS
    if (!(new_ledger && BROKEN(WIPE_FORGETS_CONFIG)))
#endif
    leaders_config_load(b);
    if (listener_start(b, err, sizeof err) < 0)
        return start_failed(b, err);
    b->started_ms = uv_now(b->loop);

    uv_prepare_init(b->loop, &b->flush_prepare);
    b->flush_prepare.data = b;
    uv_prepare_start(&b->flush_prepare, on_flush_prepare);
    uv_check_init(b->loop, &b->flush_check);
    b->flush_check.data = b;
    uv_check_start(&b->flush_check, on_flush_check);
    uv_timer_init(b->loop, &b->trim_timer);
    b->trim_timer.data = b;
    uv_idle_init(b->loop, &b->resume_idle);
    b->resume_idle.data = b;
    uv_timer_init(b->loop, &b->idle_timer);
    b->idle_timer.data = b;
    uv_signal_init(b->loop, &b->sig_term);
    b->sig_term.data = b;
    uv_signal_start(&b->sig_term, on_signal, SIGTERM);
    uv_signal_init(b->loop, &b->sig_int);
    b->sig_int.data = b;
    uv_signal_start(&b->sig_int, on_signal, SIGINT);
    uv_signal_init(b->loop, &b->sig_hup);
    b->sig_hup.data = b;
    uv_signal_start(&b->sig_hup, on_hup, SIGHUP);
    broker_conn_count_changed(b);

    log_event(LOG_INFO, "broker.start",
              "pid=%d epoch=%llu socket=\"%s\" data=\"%s\" max_conns=%u "
              "max_data_size=%llu",
              (int)getpid(), (unsigned long long)ids_epoch(), b->opt.socket_path,
              b->opt.data_dir, b->opt.max_conns, (unsigned long long)b->opt.max_data_size);
    write_ready(b->opt.ready_fd);

    uv_run(b->loop, UV_RUN_DEFAULT);

    /* closed connections and the rest of the handles finish closing here */
    uv_walk(b->loop, close_any, NULL);
    uv_run(b->loop, UV_RUN_DEFAULT);
    rc = uv_loop_close(b->loop);
    deadlines_free();
    log_event(LOG_INFO, "broker.exit", "clean=%d", rc == 0);
    /* the data dir first: a broker that then wins the socket's lock finds
     * the data dir free, not held by the one that is leaving */
    close(b->data_lock_fd);
    close(b->lock_fd);
    return 0;
}
