/* leader-util.c - see leader-util.h. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "leader-util.h"

/* How long rcl_elect waits for a grant: longer than a reply's usual wait,
 * since a campaign may queue behind a holder's release. */
#define ELECT_WAIT_MS 10000

/* ---- raw-client leadership requests ---- */

void rcl_campaign(struct rcl *c, uint64_t rid, const char *ws, const char *opts)
{
    coord_enc *e = rcl_begin(c, "leader.campaign", rid);
    coord_enc_kv_cstr(e, "workstream", ws);
    char buf[512];
    snprintf(buf, sizeof buf, "%s", opts ? opts : "");
    for (char *w = strtok(buf, " "); w; w = strtok(NULL, " ")) {
        char *eq = strchr(w, '=');
        if (eq)
            *eq++ = 0;
        if (strcmp(w, "lease") == 0)
            coord_enc_kv_uint(e, "lease_ms", strtoull(eq, NULL, 10));
        else if (strcmp(w, "protocol") == 0 || strcmp(w, "incident") == 0)
            coord_enc_kv_cstr(e, w, eq);
        else
            coord_enc_kv_bool(e, w, true);
    }
    rcl_send(c);
}

uint64_t rcl_elect(struct rcl *c, uint64_t rid, const char *ws, const char *opts,
                   coord_msg *m)
{
    rcl_campaign(c, rid, ws, opts);
    if (rcl_reply(c, rid, ELECT_WAIT_MS, m) != 0 || !msg_ok(m) || !msg_bool(m, "granted"))
        return 0;
    return msg_uint(m, "generation");
}

int rcl_ws_gen(struct rcl *c, uint64_t rid, const char *op, const char *ws, uint64_t gen,
               int timeout_ms, coord_msg *m)
{
    coord_enc *e = rcl_begin(c, op, rid);
    coord_enc_kv_cstr(e, "workstream", ws);
    if (gen)
        coord_enc_kv_uint(e, "generation", gen);
    rcl_send(c);
    return rcl_reply(c, rid, timeout_ms, m);
}

/* ---- coordctl runs ---- */

void leader_ctl_start(struct run *r, const struct broker_proc *bp, int fd5,
                      const char *const *args)
{
    struct pass_fd pass[] = { { fd5, 5 }, { -1, -1 } };
    ctl_spawn(r, bp->sock, bp->dir,
              &(struct ctl_opts){ .pipes = true, .pass = fd5 >= 0 ? pass : NULL },
              args);
}

int leader_ctl_run(struct run *r, const struct broker_proc *bp, const char *const *args,
                   int timeout_ms)
{
    leader_ctl_start(r, bp, -1, args);
    return run_finish(r, timeout_ms);
}

bool run_has(const struct run *r, int which, const char *needle)
{
    if (strstr(run_text(r, which), needle))
        return true;
    fprintf(stderr, "coordctl's %s does not contain \"%s\"; it holds:\n%s\n",
            which == OUT ? "stdout" : "stderr", needle, run_text(r, which));
    return false;
}

bool run_has_row(const struct run *r, const char *name, const char *value)
{
    size_t nl = strlen(name);
    for (const char *p = run_text(r, OUT); *p; ) {
        const char *end = strchr(p, '\n');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len > nl && !strncmp(p, name, nl) && p[nl] == ' ') {
            const char *v = p + nl;
            while (*v == ' ')
                v++;
            if ((size_t)(p + len - v) == strlen(value) && !strncmp(v, value, strlen(value)))
                return true;
        }
        if (!end)
            break;
        p = end + 1;
    }
    fprintf(stderr, "no row \"%s  %s\" in:\n%s\n", name, value, run_text(r, OUT));
    return false;
}

void report_open(struct report *p)
{
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) < 0)
        exit(2);
    memset(p, 0, sizeof *p);
    p->wr = fds[1];
    fcntl(fds[0], F_SETFL, O_NONBLOCK);
    p->reader.fd[OUT] = fds[0];
    p->reader.fd[ERR] = -1;
}

const char *report_line(struct report *p, int timeout_ms)
{
    return run_line(&p->reader, OUT, timeout_ms);
}

void report_close(struct report *p)
{
    if (p->wr >= 0)
        close(p->wr);
    if (p->reader.fd[OUT] >= 0)
        close(p->reader.fd[OUT]);
    free(p->reader.text[OUT].p);
    memset(p, 0, sizeof *p);
}

const char *const reporting_cmd =
    "trap 'kill $! 2>/dev/null; echo term >&5; exit 0' TERM; "
    "echo started $COORD_GENERATION >&5; sleep 30 & wait";
