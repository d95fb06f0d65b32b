/* ctl-info.c - coordctl's introspection commands: status, stats (its
 * counters as name/value lines, then the latency histograms as a table),
 * ping. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "coordctl.h"

/* Commands without arguments refuse any. */
static int no_args(struct ctl *ctl, int argc, char **argv)
{
    if (argc > 1)
        return ctl_usage(ctl, "unexpected argument %s", argv[1]);
    return 0;
}

int cmd_status(struct ctl *ctl, int argc, char **argv)
{
    int rc = no_args(ctl, argc, argv);
    if (rc)
        return rc;
    /* status observes: it never starts a broker */
    rc = ctl_try_connect(ctl, true);
    if (rc == COORD_ECONNECT) {
        if (ctl->json) {
            char *j = coord_json_text(ctl->socket, strlen(ctl->socket));
            printf("{\"running\":false,\"socket\":%s}\n", j ? j : "null");
            free(j);
        } else {
            printf("coord broker not running (socket %s)\n", ctl->socket);
        }
        return CTL_EXIT_FAIL;
    }
    if (rc < 0) {
        rc = ctl_fail_connect(ctl, rc);
        return rc == CTL_EXIT_UNREACHABLE ? CTL_EXIT_FAIL : rc;
    }

    coord_reply_t *reply = NULL;
    rc = ctl_simple_call(ctl, "stats", &reply);
    if (rc)
        return rc == CTL_EXIT_UNREACHABLE ? CTL_EXIT_FAIL : rc;
    coord_map m = coord_reply_map(reply);
    if (ctl->json) {
        /* the rows of the table, by the names of stats */
        static const char *const keys[] = {
            "version", "pid", "uptime_ms", "epoch", "connections", "ledger",
            "ledger_reachable",
        };
        bool first = false;
        fputs("{\"running\":true", stdout);
        for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
            ctl_json_member(m, keys[k], &first);
        fputs(",\"socket\":", stdout);
        ctl_json_text(ctl->socket, strlen(ctl->socket));
        puts("}");
        coord_reply_free(reply);
        return CTL_EXIT_OK;
    }

    struct ctl_table t = { 0 };
    const char *s;
    size_t n;
    uint64_t v;
    if (coord_map_str(m, "version", &s, &n))
        ctl_table_addf(&t, "broker", "%.*s", (int)n, s);
    else
        ctl_table_add(&t, "broker", coord_broker_version(ctl->c));
    if (coord_map_uint(m, "pid", &v))
        ctl_table_addf(&t, "pid", "%llu", (unsigned long long)v);
    if (coord_map_uint(m, "uptime_ms", &v)) {
        char d[64];
        ctl_format_duration(d, sizeof d, v);
        ctl_table_add(&t, "uptime", d);
    }
    if (!coord_map_uint(m, "epoch", &v))
        v = coord_epoch(ctl->c);
    ctl_table_addf(&t, "epoch", "%llu", (unsigned long long)v);
    if (coord_map_uint(m, "connections", &v))
        ctl_table_addf(&t, "connections", "%llu", (unsigned long long)v);
    /* the leader ledger: local (LMDB) or etcd, and whether it answers */
    bool reachable;
    if (coord_map_str(m, "ledger", &s, &n))
        ctl_table_addf(&t, "ledger", "%.*s (%s)", (int)n, s,
                       !coord_map_bool(m, "ledger_reachable", &reachable) || reachable
                       ? "reachable" : "UNREACHABLE");
    ctl_table_add(&t, "socket", ctl->socket);
    rc = ctl_table_print(&t);
    coord_reply_free(reply);
    return rc;
}

/* Removes the rows whose names start with prefix (shown otherwise). */
static void drop_rows(struct ctl_table *t, const char *prefix)
{
    size_t k = 0, n = strlen(prefix);
    for (size_t i = 0; i < t->n; i++) {
        if (!strncmp(t->rows[i].name, prefix, n)) {
            free(t->rows[i].name);
            free(t->rows[i].value);
        } else {
            t->rows[k++] = t->rows[i];
        }
    }
    t->n = k;
}

/* A latency figure in ms, "-" when absent. */
static char *ms_cell(coord_map m, const char *key)
{
    double d;
    if (!coord_map_double(m, key, &d))
        return strdup("-");
    return ctl_strdupf("%.3f ms", d);
}

int ctl_latency_table(coord_map lat)
{
    static const char *const titles[] = { "LATENCY", "COUNT", "P50", "P99", "MAX" };
    struct ctl_rows t = { .ncols = 5, .titles = titles };
    for (size_t i = 0; i < coord_map_size(lat); i++) {
        const char *k;
        size_t kn;
        coord_map e;
        if (coord_map_entry(lat, i, &k, &kn) != COORD_TYPE_MAP ||
            !coord_map_map_at(lat, i, &e))
            continue;
        char **row = ctl_rows_add(&t);
        if (!row)
            break;
        row[0] = ctl_escape(k, kn);
        row[1] = ctl_uint_cell(e, "count");
        row[2] = ms_cell(e, "p50_ms");
        row[3] = ms_cell(e, "p99_ms");
        row[4] = ms_cell(e, "max_ms");
        ctl_rows_check(&t, row);
    }
    return ctl_rows_print(&t, "stats");
}

int cmd_stats(struct ctl *ctl, int argc, char **argv)
{
    for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++)
        if (strcmp(argv[i], "--openmetrics") == 0 || strcmp(argv[i], "--prometheus") == 0 ||
            strncmp(argv[i], "--listen", 8) == 0)
            return ctl_stats_openmetrics(ctl, argc, argv);
    int rc = no_args(ctl, argc, argv);
    if (rc || (rc = ctl_connect(ctl)))
        return rc;
    coord_reply_t *reply = NULL;
    if ((rc = ctl_simple_call(ctl, "stats", &reply)))
        return rc;
    coord_map m = coord_reply_map(reply);
    if (ctl->json) {
        rc = ctl_print_json(m);
    } else {
        struct ctl_table t = { 0 };
        coord_map lat;
        bool has_lat = coord_map_map(m, "latency", &lat);
        ctl_table_add_map(&t, m, "");
        if (has_lat)
            drop_rows(&t, "latency.");
        rc = ctl_table_print(&t);
        if (rc == CTL_EXIT_OK && has_lat) {
            putchar('\n');
            rc = ctl_latency_table(lat);
        }
    }
    coord_reply_free(reply);
    return rc;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

int cmd_ping(struct ctl *ctl, int argc, char **argv)
{
    static const struct option longopts[] = {
        { "count", required_argument, NULL, 'c' },
        { NULL, 0, NULL, 0 },
    };
    long count = 1;
    int opt;
    optind = 1;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "+c:", longopts, NULL)) != -1) {
        switch (opt) {
        case 'c': {
            char *end;
            count = strtol(optarg, &end, 10);
            if (*end || count < 1 || count > 1000000)
                return ctl_usage(ctl, "-c needs a count from 1 to 1000000");
            break;
        }
        default:
            return ctl_usage(ctl, "unknown flag %s", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return ctl_usage(ctl, "unexpected argument %s", argv[optind]);

    int rc = ctl_connect(ctl);
    if (rc)
        return rc;
    double min = 0, max = 0, sum = 0;
    for (long i = 0; i < count; i++) {
        double t0 = now_ms();
        rc = coord_ping(ctl->c);
        double dt = now_ms() - t0;
        if (rc < 0)
            return ctl_fail_call(ctl, "ping", rc);
        if (i == 0 || dt < min)
            min = dt;
        if (dt > max)
            max = dt;
        sum += dt;
        if (!ctl->json)
            printf("reply from %s: seq=%ld time=%.3f ms\n",
                   coord_broker_version(ctl->c), i + 1, dt);
    }
    if (ctl->json)
        printf("{\"count\":%ld,\"min_ms\":%.3f,\"avg_ms\":%.3f,\"max_ms\":%.3f}\n",
               count, min, sum / (double)count, max);
    else if (count > 1)
        printf("%ld pings: min/avg/max = %.3f/%.3f/%.3f ms\n", count, min,
               sum / (double)count, max);
    return CTL_EXIT_OK;
}

/* coordctl reload: broker.reload, the workstream descriptor files read
 * again.  Exit 1 when a file was refused (each named with FILE:LINE). */
int cmd_reload(struct ctl *ctl, int argc, char **argv)
{
    int rc = no_args(ctl, argc, argv);
    if (rc || (rc = ctl_connect(ctl)))
        return rc;
    coord_reply_t *reply = NULL;
    if ((rc = ctl_simple_call(ctl, "broker.reload", &reply)))
        return rc;
    coord_map m = coord_reply_map(reply);
    size_t errors = coord_map_array_len(m, "errors");
    if (ctl->json) {
        rc = ctl_print_json(m);
    } else {
        for (size_t i = 0; i < coord_map_size(m); i++) {
            const char *k;
            size_t kl;
            coord_map_entry(m, i, &k, &kl);
            char *v = coord_map_value_json(m, i);
            printf("%-8.*s %s\n", (int)kl, k, v ? v : "?");
            free(v);
        }
        rc = CTL_EXIT_OK;
    }
    coord_reply_free(reply);
    return rc == CTL_EXIT_OK && errors ? CTL_EXIT_FAIL : rc;
}
