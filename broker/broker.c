/* broker.c - the broker's life: start-up in the right order (lock, ledger,
 * epoch, listen, ready), idle exit, and the orderly shutdown on SIGTERM. */
#include <signal.h>
#include <sys/resource.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "breaks.h"
#include "broker.h"
#include "errors.h"
#include "ids.h"
#include "redact.h"
#include "deadline.h"
#include "ledger.h"
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

/* The loop turn's safe points: connections cut off meanwhile are closed,
 * then every connection with output is written; before polling, those
 * whose read budget ran out are read again. */
static void on_flush_prepare(uv_prepare_t *h)
{
    struct broker *b = h->data;
    conn_reap(b);
    conn_resume_throttled(b);
    conn_flush_all(b);
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
    ledger_close(b->ledger);
    b->ledger = NULL;
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

int broker_run(struct broker_options *opt)
{
    static struct broker broker;      /* big (read buffer): not on the stack */
    struct broker *b = &broker;
    char err[512];
    int rc;

    b->opt = *opt;
    b->lock_fd = -1;
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

    rc = listener_lock(b, err, sizeof err);
    if (rc == 1) {
        log_event(LOG_INFO, "broker.already_running", "socket=\"%s\"",
                  b->opt.socket_path);
        return 0;
    }
    if (rc < 0) {
        log_event(LOG_ERROR, "broker.start_failed", "error=\"%s\"", err);
        return 1;
    }
    if (coord_prepare_private_dir(b->opt.data_dir, err, sizeof err) < 0) {
        log_event(LOG_ERROR, "broker.start_failed", "error=\"%s\"", err);
        return 1;
    }

    b->loop = uv_default_loop();
    if (ledger_open(&b->ledger, b->opt.data_dir, b->opt.max_data_size, b->loop,
                    err, sizeof err) < 0) {
        log_event(LOG_ERROR, "broker.start_failed", "error=\"%s\"", err);
        return 1;
    }
    if (redact_init(b->opt.data_dir, b->opt.log_names_plain, err, sizeof err) < 0 ||
#ifdef COORD_TEST_BREAKS
        breaks_init(err, sizeof err) < 0 ||
#endif
        ids_start(b->ledger, err, sizeof err) < 0) {
        log_event(LOG_ERROR, "broker.start_failed", "error=\"%s\"", err);
        return 1;
    }
    if (tables_init(b, err, sizeof err) < 0) {
        log_event(LOG_ERROR, "broker.start_failed", "error=\"%s\"", err);
        return 1;
    }
    /* before the listener: what the files define is queued ahead of any
     * client's request on those workstreams */
    leaders_config_load(b);
    if (listener_start(b, err, sizeof err) < 0) {
        log_event(LOG_ERROR, "broker.start_failed", "error=\"%s\"", err);
        return 1;
    }
    b->started_ms = uv_now(b->loop);

    uv_prepare_init(b->loop, &b->flush_prepare);
    b->flush_prepare.data = b;
    uv_prepare_start(&b->flush_prepare, on_flush_prepare);
    uv_check_init(b->loop, &b->flush_check);
    b->flush_check.data = b;
    uv_check_start(&b->flush_check, on_flush_check);
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
    return 0;
}
