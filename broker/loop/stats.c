/* stats.c - the `stats` op: counters of the broker and of each table. */
#include <unistd.h>
#include "broker.h"
#include "budget.h"
#include "ids.h"
#include "channels.h"
#include "coord-version.h"
#include "deadline.h"
#include "flight-gates.h"
#include "flights.h"
#include "histo.h"
#include "leaders.h"
#include "store.h"
#include "locks.h"
#include "ops.h"
#include "records.h"

void stats_reply(struct conn *c, uint64_t rid)
{
    struct broker *b = c->b;
    const struct broker_stats *s = &b->stats;
    coord_enc e;
    conn_enc_begin_reply(c, &e, rid);
    coord_enc_kv_cstr(&e, "version", "coord " COORD_VERSION);
    coord_enc_kv_uint(&e, "pid", (uint64_t)getpid());
    coord_enc_kv_uint(&e, "uptime_ms", broker_now_ms(b) - b->started_ms);
    coord_enc_kv_uint(&e, "epoch", ids_epoch());
    coord_enc_kv_uint(&e, "connections", b->nconns);
    coord_enc_kv_uint(&e, "conns_accepted", s->conns_accepted);
    coord_enc_kv_uint(&e, "rejected_peers", s->conns_rejected_peer);
    coord_enc_kv_uint(&e, "rejected_conn_limit", s->conns_rejected_limit);
    coord_enc_kv_uint(&e, "rejected_fd_limit", s->conns_rejected_fd);
    coord_enc_kv_uint(&e, "bad_frames", s->bad_frames);
    coord_enc_kv_uint(&e, "bad_requests", s->bad_requests);
    coord_enc_kv_uint(&e, "handshake_timeouts", s->handshake_timeouts);
    coord_enc_kv_uint(&e, "pending_limit_hits", s->pending_limit_hits);
    coord_enc_kv_uint(&e, "outbuf_disconnects", s->outbuf_disconnects);
    coord_enc_kv_uint(&e, "partial_limit_cuts", s->partial_limit_cuts);
    coord_enc_kv_uint(&e, "oversized_frames", s->oversized_frames);
    coord_enc_kv_uint(&e, "cancels", s->cancels);
    coord_enc_kv_uint(&e, "timeouts", s->timeouts);
    coord_enc_kv_uint(&e, "bytes_in", s->bytes_in);
    coord_enc_kv_uint(&e, "bytes_out", s->bytes_out);
    coord_enc_kv_uint(&e, "requests_total", s->requests);
    uint64_t held, pending, names;
    locks_counts(&held, &pending, &names);
    coord_enc_kv_uint(&e, "locks_held", held);
    coord_enc_kv_uint(&e, "locks_pending", pending);
    coord_enc_kv_uint(&e, "lock_names", names);
    flights_stats(&e);
    gates_stats(&e);
    leaders_stats(&e);
    channels_stats(&e);
    coord_enc_kv_uint(&e, "records", records_count());
    coord_enc_kv_uint(&e, "ledger_batches", b->store ? store_batches(b->store) : 0);
    coord_enc_kv_uint(&e, "ledger_jobs", b->store ? store_jobs(b->store) : 0);
    coord_enc_kv_uint(&e, "ledger_map_size", b->store ? store_map_size(b->store) : 0);
    coord_enc_kv_uint(&e, "data_limit_hits", b->store ? store_data_limit_hits(b->store) : 0);
    coord_enc_kv_uint(&e, "timers", deadlines_count());
    coord_enc_key(&e, "limits");
    coord_enc_map_begin(&e);
    coord_enc_kv_uint(&e, "max_frame", b->opt.max_frame);
    coord_enc_kv_uint(&e, "max_conns", b->opt.max_conns);
    coord_enc_kv_uint(&e, "max_pending", b->opt.max_pending);
    coord_enc_kv_uint(&e, "max_outbuf", b->opt.max_outbuf);
    coord_enc_kv_uint(&e, "handshake_ms", b->opt.handshake_ms);
    coord_enc_kv_uint(&e, "max_data_size", b->opt.max_data_size);
    coord_enc_map_end(&e);
    /* leadership's max-hold and claim counters, the writer's timings, latencies and
     * the per-op counts go last: with a small max_frame
     * they are the parts left out (truncated: true) */
    bool cut = false;
    coord_enc_mark before = coord_enc_mark_here(&e);
    leaders_stats_holds_claims(&e);
    if (list_entry_overflows(c, &e, &before))
        cut = true;
    before = coord_enc_mark_here(&e);
    flights_stats_transitions(&e);
    if (list_entry_overflows(c, &e, &before))
        cut = true;
    before = coord_enc_mark_here(&e);
    coord_enc_kv_uint(&e, "outbuf_stalls", s->outbuf_stalls);
    coord_enc_kv_uint(&e, "outbuf_pauses", s->outbuf_pauses);
    coord_enc_kv_uint(&e, "memory_trims", b->trims);
    if (list_entry_overflows(c, &e, &before))
        cut = true;
    before = coord_enc_mark_here(&e);
    coord_enc_kv_uint(&e, "fds_received", s->fds_received);
    coord_enc_kv_uint(&e, "fds_sent", s->fds_sent);
    coord_enc_kv_uint(&e, "refs_given", s->refs_given);
    if (list_entry_overflows(c, &e, &before))
        cut = true;
    before = coord_enc_mark_here(&e);
    struct store_times lt = { 0, 0, 0, 0 };
    if (b->store)
        store_times(b->store, &lt);
    coord_enc_kv_uint(&e, "ledger_commit_us", lt.commit_us);
    coord_enc_kv_uint(&e, "ledger_flush_us", lt.flush_us);
    coord_enc_kv_uint(&e, "ledger_flushes", lt.flushes);
    coord_enc_kv_uint(&e, "ledger_linger_us", lt.linger_us);
    if (list_entry_overflows(c, &e, &before))
        cut = true;
    before = coord_enc_mark_here(&e);
    coord_enc_kv_uint(&e, "held_entries", held_budget.used);
    coord_enc_kv_uint(&e, "held_max", held_budget.max);
    coord_enc_kv_uint(&e, "held_budget_refusals", held_budget.refused);
    if (list_entry_overflows(c, &e, &before))
        cut = true;
    before = coord_enc_mark_here(&e);
    latency_encode(&e);
    if (list_entry_overflows(c, &e, &before))
        cut = true;
    before = coord_enc_mark_here(&e);
    coord_enc_key(&e, "requests");
    coord_enc_map_begin(&e);
    for (int i = 0; dispatch_op_name(i); i++) {
        if (b->requests_by_op[i])
            coord_enc_kv_uint(&e, dispatch_op_name(i), b->requests_by_op[i]);
    }
    coord_enc_map_end(&e);
    if (list_entry_overflows(c, &e, &before))
        cut = true;
    if (cut)
        coord_enc_kv_bool(&e, "truncated", true);
    conn_enc_finish(c, &e);
}
