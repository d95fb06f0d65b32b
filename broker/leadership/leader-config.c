/* leader-config.c - workstream descriptors as configuration: one file per
 * workstream, CONFIG_DIR/workstreams/WORKSTREAM.v1 (protocol/desc-file.h's
 * format), read at start, on SIGHUP and on broker.reload.
 *
 * A file applies as a define of the fields it names (leaders.c's
 * leaders_apply_config), so policy survives a wiped data dir: the stored
 * ratchet may only raise a file's protocol floor, and `disabled:` is the
 * kill switch as configuration.  A file's name must be its workstream's
 * (`workstream:` absent: the name is taken from the file name); `origin:`
 * names the scope (absent: ""), a scope one file per workstream name.
 * A bad file is refused whole, with FILE:LINE, and the others still load;
 * a removed file leaves the stored descriptor as it is. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "broker.h"
#include "coord-limits.h"
#include "desc-file.h"
#include "leaders-int.h"
#include "leaders.h"
#include "ops.h"
#include "skey.h"

#define CONFIG_SUFFIX ".v1"
/* Files read per load: a config dir is written by hand. */
#define LIMIT_CONFIG_FILES 4096u

struct load {
    const char *file;              /* for the error callback */
    unsigned errors, loaded;
    char **texts;                  /* owned: errors, then reply's */
    size_t n_texts;
};

static void load_err(void *ud, int line, const char *msg)
{
    struct load *l = ud;
    char text[4600];
    if (line)
        snprintf(text, sizeof text, "%s:%d: %s", l->file, line, msg);
    else
        snprintf(text, sizeof text, "%s: %s", l->file, msg);
    log_event(LOG_ERROR, "leader.config_bad", "error=\"%s\"", text);
    l->errors++;
    char **t = realloc(l->texts, (l->n_texts + 1) * sizeof *t);
    if (!t)
        return;
    l->texts = t;
    if ((t[l->n_texts] = strdup(text)))
        l->n_texts++;
}

/* One file: 0 applied, -1 refused (reported). */
static int load_file(struct load *l, const char *dir, const char *fname)
{
    char path[4096 + 300];
    snprintf(path, sizeof path, "%s/%s", dir, fname);
    l->file = path;
    struct coord_desc_file d;
    int rc = -1;
    if (coord_desc_file_read(path, &d, load_err, l))
        goto out;
    size_t stem = strlen(fname) - strlen(CONFIG_SUFFIX);
    const char *ws = d.val[COORD_DK_WORKSTREAM];
    if (ws && (strlen(ws) != stem || memcmp(ws, fname, stem) != 0)) {
        load_err(l, 0, "workstream: is not the file's name (WORKSTREAM.v1)");
        goto out;
    }
    const char *origin = d.val[COORD_DK_ORIGIN] ? d.val[COORD_DK_ORIGIN] : "";
    struct ws_patch p;
    memset(&p, 0, sizeof p);
    ws_desc_default(&p.v);
    const char *bad = NULL;
    const char *v;
#define GIVEN(k) (d.given[k])
    if (GIVEN(COORD_DK_PROTOCOL)) {
        if (!(v = d.val[COORD_DK_PROTOCOL]))
            bad = "protocol: a file cannot remove a pin (leave it out, or define with force)";
        else if (ws_protocol_parse((const uint8_t *)v, strlen(v), &p.v.protocol) < 0)
            bad = "protocol must be name@N (name: 1..64 of A-Z a-z 0-9 . _ -)";
        else
            p.set |= WS_F_PROTOCOL;
    }
    if (!bad && GIVEN(COORD_DK_MAX_HOLD)) {
        if (!d.val[COORD_DK_MAX_HOLD]) {
            p.reset |= WS_F_MAX_HOLD;
        } else if (d.max_hold_ms > LIMIT_WAIT_MS) {
            bad = "maxHold: too long";
        } else {
            p.v.max_hold_ms = d.max_hold_ms;
            p.set |= WS_F_MAX_HOLD;
        }
    }
    if (!bad && GIVEN(COORD_DK_STEAL)) {
        int s;
        if (!(v = d.val[COORD_DK_STEAL]))
            p.reset |= WS_F_STEAL;
        else if ((s = ws_steal_parse((const uint8_t *)v, strlen(v))) < 0)
            bad = "steal must be never, incident-only or allowed";
        else
            p.v.steal = (uint8_t)s, p.set |= WS_F_STEAL;
    }
    if (!bad && GIVEN(COORD_DK_MODE)) {
        int m;
        if (!(v = d.val[COORD_DK_MODE]))
            p.reset |= WS_F_MODE;
        else if ((m = ws_mode_parse((const uint8_t *)v, strlen(v))) < 0)
            bad = "mode must be shadow, read-only or active";
        else
            p.v.mode = (uint8_t)m, p.set |= WS_F_MODE;
    }
    if (!bad && GIVEN(COORD_DK_FALLBACK)) {
        if (!(v = d.val[COORD_DK_FALLBACK])) {
            p.reset |= WS_F_FALLBACK;
        } else if (strlen(v) > LIMIT_FALLBACK) {
            bad = "fallback must be 1..64 bytes";
        } else {
            p.v.fallback_len = (uint8_t)strlen(v);
            memcpy(p.v.fallback, v, p.v.fallback_len);
            p.set |= WS_F_FALLBACK;
        }
    }
    if (!bad && GIVEN(COORD_DK_LOCK_NAME)) {
        if (!(v = d.val[COORD_DK_LOCK_NAME])) {
            p.reset |= WS_F_LOCK_NAME;
        } else {
            p.v.lock_name_len = (uint8_t)strlen(v);   /* checked by the parser */
            memcpy(p.v.lock_name, v, p.v.lock_name_len);
            p.set |= WS_F_LOCK_NAME;
        }
    }
    if (!bad && GIVEN(COORD_DK_CAPABILITIES)) {
        if (!d.val[COORD_DK_CAPABILITIES]) {
            p.reset |= WS_F_CAPS;
        } else if (strlen(d.capabilities) > LIMIT_CAPS_TEXT) {
            bad = "capabilities: too long";
        } else {
            p.v.caps_len = (uint8_t)strlen(d.capabilities);
            memcpy(p.v.caps, d.capabilities, p.v.caps_len);
            p.set |= WS_F_CAPS;
        }
    }
    if (!bad && GIVEN(COORD_DK_IF_AVAILABLE)) {
        if (!(v = d.val[COORD_DK_IF_AVAILABLE]))
            p.reset |= WS_F_IF_AVAILABLE;
        else
            p.v.if_available = (uint8_t)ws_ifav_parse((const uint8_t *)v, strlen(v)),
            p.set |= WS_F_IF_AVAILABLE;
    }
    char msg[200];
    if (!bad && (v = d.val[COORD_DK_CANONICAL_FENCE]))
        bad = leaders_fence_check("canonicalFence", (const uint8_t *)v, strlen(v), msg,
                                  sizeof msg);
#undef GIVEN
    uint8_t key[SKEY_HEADER + LIMIT_WORKSTREAM];
    if (!bad && strlen(origin) + stem > LIMIT_WORKSTREAM)
        bad = "origin and workstream together are too long";
    if (bad) {
        load_err(l, 0, bad);
        goto out;
    }
    size_t klen = skey_write(key, (const uint8_t *)origin, strlen(origin),
                             (const uint8_t *)fname, stem);
    leaders_apply_config(key, klen, &p, d.given[COORD_DK_DISABLED] && d.val[COORD_DK_DISABLED]
                         ? d.disabled : -1);
    l->loaded++;
    rc = 0;
out:
    coord_desc_file_free(&d);
    return rc;
}

static bool is_config_name(const char *nm)
{
    size_t len = strlen(nm), sl = strlen(CONFIG_SUFFIX);
    return nm[0] != '.' && len > sl && strcmp(nm + len - sl, CONFIG_SUFFIX) == 0;
}

/* Every WORKSTREAM.v1 of the config dir (in name order); the loaded
 * names into e's "loaded" and the errors into "errors" when e is given. */
static void load_all(struct broker *b, coord_enc *e)
{
    char dir[4096 + 16];
    snprintf(dir, sizeof dir, "%s/workstreams", b->opt.config_dir);
    struct load l = { .file = dir };
    struct dirent **names = NULL;
    int n = scandir(dir, &names, NULL, alphasort);
    if (n < 0)
        n = 0;                     /* no such dir: no files */
    if (e) {
        coord_enc_key(e, "loaded");
        coord_enc_array_begin(e);
    }
    unsigned files = 0;
    for (int i = 0; i < n; i++) {
        const char *nm = names[i]->d_name;
        if (!is_config_name(nm) || ++files > LIMIT_CONFIG_FILES)
            continue;
        if (load_file(&l, dir, nm) == 0 && e)
            coord_enc_str(e, nm, strlen(nm) - strlen(CONFIG_SUFFIX));
    }
    if (files > LIMIT_CONFIG_FILES) {
        l.file = dir;
        load_err(&l, 0, "more than 4096 descriptor files: the rest are not read");
    }
    if (e) {
        coord_enc_array_end(e);
        coord_enc_key(e, "errors");
        coord_enc_array_begin(e);
        for (size_t i = 0; i < l.n_texts; i++)
            coord_enc_str(e, l.texts[i], strlen(l.texts[i]));
        coord_enc_array_end(e);
    }
    for (size_t i = 0; i < l.n_texts; i++)
        free(l.texts[i]);
    free(l.texts);
    for (int i = 0; i < n; i++)
        free(names[i]);
    free(names);
    log_event(l.errors ? LOG_WARN : LOG_INFO, "leader.config_loaded",
              "dir=\"%s\" loaded=%u errors=%u", dir, l.loaded, l.errors);
}

void leaders_config_load(struct broker *b)
{
    load_all(b, NULL);
}

void op_broker_reload(struct conn *c, uint64_t rid, coord_fields *f)
{
    if (!fields_ok(c, rid, f))
        return;
    coord_enc e;
    conn_enc_begin_reply(c, &e, rid);
    load_all(c->b, &e);
    conn_enc_finish(c, &e);
}
