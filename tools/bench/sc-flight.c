/* sc-flight.c - flight-storm: 1,000 connections join one key with
 * flight.join; exactly one must become the owner, and when it completes,
 * every follower must get role "result" with the same bytes.  Reported:
 * the fan-out latency from the owner's flight.complete being sent to each
 * follower's answer being read (one reading thread, epoll). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>
#include "bench.h"

#define STORM_RESULT 64

const char *missing_op(struct bench *b, const char *const *ops, int n)
{
    for (int i = 0; i < n; i++)
        if (broker_has_op(b, ops[i]) == 0)
            return ops[i];
    return NULL;
}

struct storm_conn {
    uint64_t join, ping, complete;
    bool pinged, answered, owner;
    uint64_t flight, fence;
};

static int storm_round(struct bench *b, struct wconn *c, struct storm_conn *s, int n,
                       const char *key, double *lat, int *nlat, int *owners,
                       int *good, int *bad, uint64_t *delivered, char *why, size_t whysz)
{
    uint8_t result[STORM_RESULT];
    for (int i = 0; i < STORM_RESULT; i++)
        result[i] = (uint8_t)(i * 7 + b->seq);
    memset(s, 0, sizeof *s * (size_t)n);
    *owners = *good = *bad = *nlat = 0;
    *delivered = 0;
    int ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0) {
        snprintf(why, whysz, "epoll: %s", strerror(errno));
        return -1;
    }
    int rc = -1;
    for (int i = 0; i < n; i++) {
        coord_enc e;
        s[i].join = wq_begin(&c[i], &e, "flight.join");
        coord_enc_kv_cstr(&e, "key", key);
        coord_enc_kv_uint(&e, "owner_ttl_ms", 120000);
        coord_enc_kv_uint(&e, "wait_ms", 120000);
        wq_end(&e);
        s[i].ping = wq_ping(&c[i]);
        struct epoll_event ev = { .events = EPOLLIN, .data.u32 = (uint32_t)i };
        if (wc_flush(&c[i]) < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, c[i].fd, &ev) < 0) {
            snprintf(why, whysz, "connection %d: send failed", i);
            goto out;
        }
    }
    /* phase 1: every join is in (its ping answered); note the owner(s) */
    int pinged = 0, owner = -1;
    uint64_t t0 = 0, deadline = now_ns() + 60000000000ull;
    int answered = 0, followers = 0;
    bool completed = false;
    struct epoll_event evs[128];
    while (pinged < n || !completed || answered < followers) {
        if (now_ns() > deadline) {
            snprintf(why, whysz, "timed out: %d/%d pings, %d/%d follower answers, "
                     "complete %s", pinged, n, answered, followers,
                     completed ? "answered" : "not answered");
            goto out;
        }
        int k = epoll_wait(ep, evs, 128, 1000);
        if (k < 0 && errno != EINTR) {
            snprintf(why, whysz, "epoll_wait: %s", strerror(errno));
            goto out;
        }
        for (int j = 0; j < k; j++) {
            int i = (int)evs[j].data.u32;
            if (wc_fill(&c[i]) <= 0) {
                snprintf(why, whysz, "connection %d closed by the broker", i);
                goto out;
            }
            int f;
            while ((f = wc_next(&c[i])) == 1) {
                uint64_t now = now_ns(), rid;
                if (wm_is_event(&c[i]) || !wm_uint(&c[i], "rid", &rid))
                    continue;
                int st = wm_status(&c[i]);
                if (rid == s[i].ping) {
                    s[i].pinged = true;
                    pinged++;
                } else if (rid == s[i].join) {
                    s[i].answered = true;
                    if (st != 0) {
                        (*bad)++;
                        snprintf(why, whysz, "a join failed: %s", code_name(st));
                    } else if (wm_is(&c[i], "role", "owner")) {
                        (*owners)++;
                        s[i].owner = true;
                        wm_uint(&c[i], "flight", &s[i].flight);
                        wm_uint(&c[i], "fence", &s[i].fence);
                        if (owner < 0)
                            owner = i;
                    } else if (wm_is(&c[i], "role", "result")) {
                        const uint8_t *p;
                        size_t len;
                        if (wm_str(&c[i], "result", &p, &len) && len == STORM_RESULT &&
                            memcmp(p, result, len) == 0)
                            (*good)++;
                        else
                            (*bad)++;
                        if (t0)
                            lat[(*nlat)++] = (double)(now - t0);
                        answered++;
                    } else {
                        (*bad)++;
                        answered++;
                    }
                } else if (rid == s[i].complete) {
                    completed = true;
                    if (st != 0) {
                        snprintf(why, whysz, "flight.complete: %s", code_name(st));
                        goto out;
                    }
                    wm_uint(&c[i], "delivered", delivered);
                }
            }
            if (f < 0) {
                snprintf(why, whysz, "malformed frame on connection %d", i);
                goto out;
            }
        }
        if (pinged == n && !t0) {
            if (owner < 0) {
                snprintf(why, whysz, "all %d joins are in and nobody is the owner", n);
                goto out;
            }
            followers = 0;
            for (int i = 0; i < n; i++)
                followers += !s[i].answered;
            /* the owner completes */
            coord_enc e;
            s[owner].complete = wq_begin(&c[owner], &e, "flight.complete");
            coord_enc_kv_uint(&e, "flight", s[owner].flight);
            coord_enc_kv_uint(&e, "fence", s[owner].fence);
            coord_enc_kv_bin(&e, "result", result, sizeof result);
            coord_enc_kv_uint(&e, "keep_ms", 0);
            wq_end(&e);
            t0 = now_ns();
            if (wc_flush(&c[owner]) < 0) {
                snprintf(why, whysz, "owner's connection closed");
                goto out;
            }
        }
    }
    rc = 0;
out:
    close(ep);
    return rc;
}

void sc_flight_storm(struct bench *b, struct result *r)
{
    static const char *const ops[] = { "flight.join", "flight.complete" };
    const char *miss = missing_op(b, ops, 2);
    if (miss) {
        res_error(r, "the broker says UNKNOWN_OP to %s: flight.* is gone",
                 miss);
        return;
    }
    int n = 1000;
    unsigned rounds = b->quick ? 2 : 5;
    long lim = raise_nofile();
    if (lim < n + 64)
        n = (int)lim - 64;
    res_title(r, "%d clients join one key (owner_ttl_ms 120000); the owner completes; "
              "%u rounds", n, rounds);
    struct wconn *c = calloc((size_t)n, sizeof *c);
    struct storm_conn *s = calloc((size_t)n, sizeof *s);
    double *lat = calloc((size_t)n * rounds, sizeof *lat);
    int nl = 0, rc, total_owners = 0, total_good = 0, total_bad = 0, followers = 0;
    uint64_t total_delivered = 0;
    char why[200] = "";
    if (c)
        for (int i = 0; i < n; i++)
            wc_open(&c[i]);
    if (!c || !s || !lat) {
        res_error(r, "out of memory");
        goto out;
    }
    for (int i = 0; i < n; i++) {
        if ((rc = wc_dial(&c[i], b->socket_path)) != 0) {
            res_error(r, "connection %d: %s", i,
                      rc == COORD_ECONNECT ? strerror(errno) : code_name(rc));
            goto out;
        }
    }
    unsigned seq = ++b->seq;
    for (unsigned k = 0; k < rounds; k++) {
        char key[64];
        snprintf(key, sizeof key, "bench/storm-%u-%u-%d", seq, k, (int)getpid());
        int owners, good, bad, got;
        uint64_t delivered;
        if (storm_round(b, c, s, n, key, lat + nl, &got, &owners, &good, &bad,
                        &delivered, why, sizeof why) < 0) {
            res_error(r, "round %u: %s", k, why);
            goto out;
        }
        vlog(b, "storm round %u: owners %d good %d bad %d delivered %llu", k, owners,
             good, bad, (unsigned long long)delivered);
        nl += got;
        total_owners += owners;
        total_good += good;
        total_bad += bad;
        total_delivered += delivered;
        followers += n - owners;
    }
    res_abs(r, "executions per round", "owners per round (executions)",
            (double)total_owners / rounds, "", CMP_EQ, 1);
    res_abs(r, "followers with the result", "followers answered with the same bytes",
            followers ? 100.0 * total_good / followers : 0, "%", CMP_EQ, 100);
    double p50 = percentile(lat, (size_t)nl, 50), p99 = percentile(lat, (size_t)nl, 99);
    double pmax = percentile(lat, (size_t)nl, 100);
    res_abs(r, "fan-out p50", "complete -> follower answer p50", ns_to_us(p50), "us",
            CMP_NONE, 0);
    res_abs(r, "fan-out p99", "complete -> follower answer p99", ns_to_us(p99), "us",
            CMP_NONE, 0);
    res_info(r, "fan-out max", ns_to_us(pmax), "us");
    res_info(r, "delivered (complete's reply), per round", (double)total_delivered / rounds, "");
    res_info(r, "wrong or failed answers", total_bad, "");
    res_note(r, "latency includes reading %d sockets in one client thread", n);
out:
    if (c)
        for (int i = 0; i < n; i++)
            wc_close(&c[i]);
    free(c);
    free(s);
    free(lat);
}
