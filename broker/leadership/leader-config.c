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
 * a removed file leaves the stored descriptor as it is.
 *
 * A load is a batch of files, each a struct cfg_file whose application
 * (leaders.c: the workstream's load, the define's store, the switch's)
 * ends asynchronously.  broker.reload is answered once every file ended,
 * with a file not stored in `errors` (the batch holds the connection,
 * conn_job: one closed meanwhile is not answered), and does not retry.  A
 * load without a caller (start, SIGHUP) logs each file not stored at warn
 * and tries its failed parts again, 1 s doubling to 30 s, until stored or
 * until the next load drops the tries of the last (one under way is freed
 * when it ends).  Bounded: one try per file of the last load, and
 * LIMIT_RELOADS requests waiting at once. */
#include <dirent.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "broker.h"
#include "coord-limits.h"
#include "desc-file.h"
#include "errors.h"
#include "leaders-int.h"
#include "leaders.h"
#include "ops.h"
#include "skey.h"

#define CONFIG_SUFFIX ".v1"
/* Files read per load: a config dir is written by hand. */
#define LIMIT_CONFIG_FILES 4096u
/* broker.reload requests waiting for their stores at once */
#define LIMIT_RELOADS 8u

struct load {
    const char *file;              /* for the error callback */
    unsigned errors, loaded;
    char **texts;                  /* owned: errors, then reply's */
    size_t n_texts;
    struct cfg_batch *batch;       /* where an applied file goes */
};

/* One load (start, SIGHUP, or a broker.reload request): answered, or
 * logged, once every file's application has ended. */
struct cfg_batch {
    struct conn_job job;           /* the request's (conn NULL: start, SIGHUP) */
    bool request;
    unsigned pending;              /* files under way, +1 while reading */
    struct list files;             /* struct cfg_file, in name order */
    struct load l;                 /* parse errors */
    char dir[4096 + 16];
};

/* A file's application; kept after its load ended when its store failed
 * on a load without a caller (start, SIGHUP), to be tried again. */
struct cfg_file {
    struct cfg_apply a;
    struct list link;              /* its batch's files, then R.retries */
    struct cfg_batch *batch;       /* NULL once a retry */
    struct deadline again;
    unsigned attempts;
    bool dropped;                  /* superseded while under way: freed once ended */
    size_t klen;
    uint8_t key[SKEY_HEADER + LIMIT_WORKSTREAM];
    char name[300];                /* the file's name */
    char path[];                   /* for errors and logs */
};

static struct {
    struct broker *b;
    struct list retries;           /* struct cfg_file, one per file at most */
    bool init, stopping;
    unsigned requests;             /* broker.reload batches under way */
} R;

static void apply_done(struct cfg_apply *a);

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
    struct cfg_file *cf = calloc(1, sizeof *cf + strlen(path) + 1);
    if (!cf) {
        load_err(l, 0, "out of memory");
        goto out;
    }
    cf->a.patch = p;
    cf->a.disabled = d.given[COORD_DK_DISABLED] && d.val[COORD_DK_DISABLED]
                     ? (int8_t)d.disabled : -1;
    cf->a.done = apply_done;
    cf->klen = klen;
    memcpy(cf->key, key, klen);
    snprintf(cf->name, sizeof cf->name, "%.*s", (int)stem, fname);
    strcpy(cf->path, path);
    cf->batch = l->batch;
    list_append(&l->batch->files, &cf->link);
    l->batch->pending++;
    leaders_apply_config(cf->key, cf->klen, &cf->a);
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

static void retries_init(void)
{
    if (!R.init) {
        list_init(&R.retries);
        R.init = true;
    }
}

void cfg_part_done(struct cfg_apply *a, enum cfg_part part, int status, const char *why)
{
    if (status) {
        if (part == CFG_DEFINE)
            a->redo_define = true;
        else if (part == CFG_SWITCH)
            a->redo_switch = true;
        if (!a->status) {
            a->status = status;
            a->failed = part;
            snprintf(a->why, sizeof a->why, "%s", why ? why : coord_code_name(status));
        }
    }
    if (--a->pending == 0)
        a->done(a);
}

/* "FILE: ..." of a file whose application failed */
static void failure_text(const struct cfg_file *f, char *buf, size_t size)
{
    if (f->a.failed == CFG_LOAD)
        snprintf(buf, size, "%s: not applied (the %s ledger could not be read): %s",
                 f->path, leaders_ledger_name(), f->a.why);
    else
        snprintf(buf, size, "%s: applied on this broker but not stored in the %s ledger: %s",
                 f->path, leaders_ledger_name(), f->a.why);
}

/* leader.config_unstored at warn: the file, the ledger (etcd: its
 * endpoints) and the error; retry_ms when it is tried again */
static void log_unstored(const struct cfg_file *f, uint64_t retry_ms)
{
    const char *eps = R.b && strcmp(leaders_ledger_name(), "etcd") == 0 &&
                      R.b->opt.etcd_endpoints[0] ? R.b->opt.etcd_endpoints : NULL;
    log_event(LOG_WARN, "leader.config_unstored",
              "file=\"%s\" applied=%s ledger=%s%s%s%s error=\"%s\" attempts=%u retry_ms=%llu",
              f->path, f->a.failed == CFG_LOAD ? "no" : "here", leaders_ledger_name(),
              eps ? " endpoints=\"" : "", eps ? eps : "", eps ? "\"" : "", f->a.why,
              f->attempts + 1, (unsigned long long)retry_ms);
}

static void file_free(struct cfg_file *f)
{
    deadline_cancel(&f->again);
    free(f);
}

/* Backoff of a file's store tried again: 1 s doubling up to 30 s. */
#define RETRY_FIRST_MS 1000u
#define RETRY_MAX_MS 30000u

static void retry_fire(struct deadline *d)
{
    struct cfg_file *f = (struct cfg_file *)((char *)d - offsetof(struct cfg_file, again));
    f->attempts++;
    f->a.retry = true;
    f->a.status = 0;
    leaders_apply_config(f->key, f->klen, &f->a);
}

static void retry_later(struct cfg_file *f)
{
    uint64_t ms = RETRY_FIRST_MS;
    for (unsigned i = 0; i < f->attempts && ms < RETRY_MAX_MS; i++)
        ms *= 2;
    if (ms > RETRY_MAX_MS)
        ms = RETRY_MAX_MS;
    log_unstored(f, ms);
    deadline_set(&f->again, uv_now(R.b->loop) + ms, retry_fire);
}

/* The stores of a load whose caller is the broker itself (start, SIGHUP):
 * what failed is logged and tried again until stored, or until the next
 * load reads the files again. */
static void keep_trying(struct cfg_file *f)
{
    f->batch = NULL;
    list_append(&R.retries, &f->link);
    retry_later(f);
}

static void batch_end(struct cfg_batch *bt)
{
    unsigned loaded = 0, failed = 0;
    struct conn *c = bt->request ? conn_job_conn(&bt->job) : NULL;
    coord_enc e;
    if (c) {
        conn_enc_begin_reply(c, &e, bt->job.rid);
        coord_enc_key(&e, "loaded");
        coord_enc_array_begin(&e);
    }
    for (struct list *i = bt->files.next; i != &bt->files; i = i->next) {
        struct cfg_file *f = list_entry(i, struct cfg_file, link);
        if (f->a.status)
            continue;
        loaded++;
        if (c)
            coord_enc_str(&e, f->name, strlen(f->name));
    }
    if (c) {
        coord_enc_array_end(&e);
        coord_enc_key(&e, "errors");
        coord_enc_array_begin(&e);
        for (size_t i = 0; i < bt->l.n_texts; i++)
            coord_enc_str(&e, bt->l.texts[i], strlen(bt->l.texts[i]));
    }
    while (!list_empty(&bt->files)) {
        struct cfg_file *f = list_entry(bt->files.next, struct cfg_file, link);
        list_del(&f->link);
        if (!f->a.status) {
            file_free(f);
            continue;
        }
        failed++;
        char text[600];
        failure_text(f, text, sizeof text);
        if (c)
            coord_enc_str(&e, text, strlen(text));
        if (bt->request || R.stopping || workstreams_stopping()) {
            log_unstored(f, 0);
            file_free(f);          /* the caller is told: it reloads again */
        } else {
            keep_trying(f);
        }
    }
    if (c) {
        coord_enc_array_end(&e);
        conn_enc_finish(c, &e);
    }
    unsigned errors = bt->l.errors + failed;
    log_event(errors ? LOG_WARN : LOG_INFO, "leader.config_loaded",
              "dir=\"%s\" loaded=%u errors=%u", bt->dir, loaded, errors);
    for (size_t i = 0; i < bt->l.n_texts; i++)
        free(bt->l.texts[i]);
    free(bt->l.texts);
    if (bt->request)
        R.requests--;
    conn_job_end(&bt->job);
    free(bt);
}

static void batch_release(struct cfg_batch *bt)
{
    if (--bt->pending == 0)
        batch_end(bt);
}

static void apply_done(struct cfg_apply *a)
{
    struct cfg_file *f = (struct cfg_file *)a;
    if (f->batch) {
        batch_release(f->batch);
        return;
    }
    /* a retry */
    if (f->dropped || R.stopping || workstreams_stopping()) {
        if (!f->dropped)
            list_del(&f->link);
        file_free(f);
        return;
    }
    if (!a->status) {
        log_event(LOG_INFO, "leader.config_stored", "file=\"%s\" attempts=%u", f->path,
                  f->attempts);
        list_del(&f->link);
        file_free(f);
        return;
    }
    retry_later(f);
}

/* A new load reads every file again: the retries of the last are dropped
 * (one under way is freed once it ends). */
static void retries_drop(void)
{
    while (!list_empty(&R.retries)) {
        struct cfg_file *f = list_entry(R.retries.next, struct cfg_file, link);
        list_del(&f->link);
        list_init(&f->link);
        if (f->a.pending) {
            deadline_cancel(&f->again);
            f->dropped = true;
        } else {
            file_free(f);
        }
    }
}

/* Every WORKSTREAM.v1 of the config dir (in name order), applied and
 * stored; bt ends (answered or logged) once every store has ended. */
static void load_all(struct broker *b, struct cfg_batch *bt)
{
    R.b = b;
    retries_init();
    retries_drop();
    snprintf(bt->dir, sizeof bt->dir, "%s/workstreams", b->opt.config_dir);
    list_init(&bt->files);
    bt->l.file = bt->dir;
    bt->l.batch = bt;
    bt->pending = 1;
    struct dirent **names = NULL;
    int n = scandir(bt->dir, &names, NULL, alphasort);
    if (n < 0)
        n = 0;                     /* no such dir: no files */
    unsigned files = 0;
    for (int i = 0; i < n; i++) {
        const char *nm = names[i]->d_name;
        if (!is_config_name(nm) || ++files > LIMIT_CONFIG_FILES)
            continue;
        load_file(&bt->l, bt->dir, nm);
    }
    if (files > LIMIT_CONFIG_FILES) {
        bt->l.file = bt->dir;
        load_err(&bt->l, 0, "more than 4096 descriptor files: the rest are not read");
    }
    for (int i = 0; i < n; i++)
        free(names[i]);
    free(names);
    batch_release(bt);
}

void leaders_config_load(struct broker *b)
{
    struct cfg_batch *bt = calloc(1, sizeof *bt);
    if (!bt) {
        log_event(LOG_ERROR, "leader.config_failed", "error=\"out of memory\"");
        return;
    }
    load_all(b, bt);
}

void leaders_config_stop(void)
{
    R.stopping = true;
    retries_init();
    retries_drop();
}

/* broker.reload: answered once every file's store has ended (a connection
 * gone meanwhile is not answered: the batch holds it, conn_job). */
void op_broker_reload(struct conn *c, uint64_t rid, coord_fields *f)
{
    if (!fields_ok(c, rid, f))
        return;
    if (R.requests >= LIMIT_RELOADS) {
        conn_reply_error(c, rid, COORD_ELIMIT, "too many reloads under way");
        return;
    }
    struct cfg_batch *bt = calloc(1, sizeof *bt);
    if (!bt) {
        conn_reply_error(c, rid, COORD_ELIMIT, "out of memory");
        return;
    }
    bt->request = true;
    R.requests++;
    conn_job_start(&bt->job, c, rid);
    load_all(c->b, bt);
}
