/* leader-fallback.c - a workstream's fallback from its descriptor file,
 * read when no broker can be reached (coord.h: coord_leader_fallback).
 * The file is parsed by protocol/desc-file.c, the one parser coordd and
 * coordctl share, so a file the broker refuses is refused here too (and
 * then the client fails closed). */
#include <stdio.h>
#include <string.h>
#include "desc-file.h"
#include "leader-internal.h"
#include "paths.h"

struct first_err {
    char *out;
    size_t size;
    const char *path;
    bool seen;
};

static void on_err(void *ud, int line, const char *msg)
{
    struct first_err *e = ud;
    if (e->seen)
        return;
    e->seen = true;
    if (line)
        snprintf(e->out, e->size, "%s:%d: %s: failing closed", e->path, line, msg);
    else
        snprintf(e->out, e->size, "%s: %s: failing closed", e->path, msg);
}

COORD_API int coord_leader_fallback(const char *config_dir, const char *scope,
                                    const void *ws, size_t ws_len,
                                    coord_leader_fallback_info *out)
{
    if (!out)
        return COORD_EINVAL;
    memset(out, 0, sizeof *out);
    out->action = COORD_LEADER_FAIL_CLOSED;
    const char *name = ws;
    if (!name || ws_len == 0 || ws_len > 200 || name[0] == '.' || memchr(name, '/', ws_len) ||
        memchr(name, '\0', ws_len)) {
        snprintf(out->reason, sizeof out->reason,
                 "the workstream has no descriptor file (not a file name): failing closed");
        return 0;
    }
    char dir[4096];
    if (config_dir) {
        snprintf(dir, sizeof dir, "%s", config_dir);
    } else if (coord_default_config_dir(dir, sizeof dir) < 0) {
        snprintf(out->reason, sizeof out->reason, "no config dir: failing closed");
        return 0;
    }
    snprintf(out->path, sizeof out->path, "%s/workstreams/%.*s.v1", dir, (int)ws_len, name);
    FILE *probe = fopen(out->path, "r");
    if (!probe) {
        snprintf(out->reason, sizeof out->reason,
                 "no descriptor file %s, so no fallback: failing closed", out->path);
        return 0;
    }
    fclose(probe);
    struct coord_desc_file d;
    struct first_err e = { out->reason, sizeof out->reason, out->path, false };
    if (coord_desc_file_read(out->path, &d, on_err, &e)) {
        coord_desc_file_free(&d);
        return 0;
    }
    const char *fws = d.val[COORD_DK_WORKSTREAM];
    const char *origin = d.val[COORD_DK_ORIGIN] ? d.val[COORD_DK_ORIGIN] : "";
    const char *fb = d.val[COORD_DK_FALLBACK];
    if (fws && (strlen(fws) != ws_len || memcmp(fws, name, ws_len) != 0)) {
        snprintf(out->reason, sizeof out->reason,
                 "%s: workstream: is not the file's name: failing closed", out->path);
    } else if (strcmp(origin, scope ? scope : "") != 0) {
        snprintf(out->reason, sizeof out->reason,
                 "%s: its origin is not this client's scope: failing closed", out->path);
    } else if (!fb) {
        snprintf(out->reason, sizeof out->reason,
                 "%s names no fallback: failing closed", out->path);
    } else {
        snprintf(out->fallback, sizeof out->fallback, "%s", fb);
        int a = coord_desc_fallback_parse(fb);
        out->action = a == COORD_DF_READ_ONLY ? COORD_LEADER_READ_ONLY
                    : a == COORD_DF_SINGLE_INSTANCE ? COORD_LEADER_SINGLE_INSTANCE
                    : COORD_LEADER_FAIL_CLOSED;
        snprintf(out->reason, sizeof out->reason, "fallback %s (%s)%s", fb, out->path,
                 out->action == COORD_LEADER_READ_ONLY
                     ? ": read-only, with no generation"
                 : out->action == COORD_LEADER_SINGLE_INSTANCE
                     ? ": single-instance, only where the user chose it"
                     : ": failing closed");
    }
    coord_desc_file_free(&d);
    return 0;
}
