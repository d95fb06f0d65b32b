/* test_desc_file.c - the descriptor file parser (protocol/desc-file.c, the
 * one coordd and coordctl share) and libcoord's coord_leader_fallback over
 * every vector of tests/vectors/desc-files.json (argv[1]), the vectors the
 * Node.js and Python readers run too: each file's keys and values (nil as
 * null), its duration, capabilities and disabled flag, or the lines its
 * errors name (0: the whole file); and each fallback case's decision. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "coord.h"
#include "desc-file.h"

static int failures;

#define CHECK(c, ...) do { if (!(c)) { failures++; \
    fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #c); \
    fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } while (0)

static const char *const keys[COORD_DK_COUNT] = {
    "schema", "workstream", "origin", "protocol", "maxHold", "steal", "fallback",
    "canonicalFence", "mode", "disabled", "lockName", "capabilities", "ifAvailable",
};

static char dir[] = "/tmp/coord-desc-file-XXXXXX";

static void write_bytes(const char *path, const char *text, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(text, 1, n, f) != n || fclose(f) != 0) {
        perror(path);
        exit(2);
    }
}

struct errs {
    int lines[32];
    int n;
};

static void on_err(void *ud, int line, const char *msg)
{
    struct errs *e = ud;
    (void)msg;
    if (e->n < 32)
        e->lines[e->n++] = line;
}

static void run_vector(json_t *v)
{
    const char *name = json_string_value(json_object_get(v, "name"));
    json_t *text = json_object_get(v, "text");
    char path[200];
    snprintf(path, sizeof path, "%s/file.v1", dir);
    write_bytes(path, json_string_value(text), json_string_length(text));
    struct coord_desc_file d;
    struct errs e = { .n = 0 };
    int n = coord_desc_file_read(path, &d, on_err, &e);
    json_t *want_lines = json_object_get(v, "error_lines");
    if (want_lines) {
        CHECK(n == (int)json_array_size(want_lines) && n == e.n, "%s: %d errors", name, n);
        for (int i = 0; i < e.n && i < (int)json_array_size(want_lines); i++)
            CHECK(e.lines[i] == json_integer_value(json_array_get(want_lines, (size_t)i)),
                  "%s: error %d on line %d", name, i, e.lines[i]);
        coord_desc_file_free(&d);
        return;
    }
    CHECK(n == 0, "%s: %d errors (first on line %d)", name, n, e.n ? e.lines[0] : -1);
    json_t *fields = json_object_get(v, "fields");
    for (int k = 0; k < COORD_DK_COUNT; k++) {
        json_t *f = json_object_get(fields, keys[k]);
        CHECK(d.given[k] == (f != NULL), "%s: %s given %d", name, keys[k], d.given[k]);
        if (!f || !d.given[k])
            continue;
        if (json_is_null(f))
            CHECK(d.val[k] == NULL, "%s: %s is %s, not nil", name, keys[k], d.val[k]);
        else
            CHECK(d.val[k] && !strcmp(d.val[k], json_string_value(f)), "%s: %s is %s", name,
                  keys[k], d.val[k] ? d.val[k] : "nil");
    }
    json_t *hold = json_object_get(v, "max_hold_ms");
    if (hold)
        CHECK(d.max_hold_ms == (uint64_t)json_integer_value(hold), "%s: max hold %llu", name,
              (unsigned long long)d.max_hold_ms);
    json_t *caps = json_object_get(v, "capabilities");
    if (caps)
        CHECK(!strcmp(d.capabilities, json_string_value(caps)), "%s: capabilities %s", name,
              d.capabilities);
    json_t *dis = json_object_get(v, "disabled");
    if (dis)
        CHECK(d.disabled == json_is_true(dis), "%s: disabled %d", name, d.disabled);
    coord_desc_file_free(&d);
}

static void run_fallback(json_t *v)
{
    const char *name = json_string_value(json_object_get(v, "name"));
    const char *ws = json_string_value(json_object_get(v, "workstream"));
    const char *scope = json_string_value(json_object_get(v, "scope"));
    json_t *file = json_object_get(v, "file");
    const char *action = json_string_value(json_object_get(v, "action"));
    char cfg[200], sub[240], path[600];
    static int case_no;
    snprintf(cfg, sizeof cfg, "%s/cfg%d", dir, ++case_no);
    snprintf(sub, sizeof sub, "%s/workstreams", cfg);
    if (mkdir(cfg, 0700) < 0 || mkdir(sub, 0700) < 0)
        exit(2);
    if (json_is_string(file)) {
        snprintf(path, sizeof path, "%s/%s.v1", sub, ws);
        write_bytes(path, json_string_value(file), json_string_length(file));
    }
    coord_leader_fallback_info fb;
    CHECK(coord_leader_fallback(cfg, scope, ws, strlen(ws), &fb) == 0, "%s", name);
    const char *got = fb.action == COORD_LEADER_READ_ONLY ? "read-only"
                    : fb.action == COORD_LEADER_SINGLE_INSTANCE ? "single-instance"
                    : "fail-closed";
    CHECK(!strcmp(got, action), "%s: %s (%s)", name, got, fb.reason);
    CHECK(fb.reason[0], "%s: no reason", name);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: test_desc_file desc-files.json\n");
        return 2;
    }
    json_error_t jerr;
    json_t *root = json_load_file(argv[1], JSON_ALLOW_NUL, &jerr);
    if (!root || !mkdtemp(dir)) {
        fprintf(stderr, "%s: %s\n", argv[1], root ? "mkdtemp" : jerr.text);
        return 2;
    }
    json_t *vs = json_object_get(root, "vectors"), *fbs = json_object_get(root, "fallback");
    CHECK(json_array_size(vs) >= 30, "%zu vectors", json_array_size(vs));
    CHECK(json_array_size(fbs) >= 10, "%zu fallback cases", json_array_size(fbs));
    for (size_t i = 0; i < json_array_size(vs); i++)
        run_vector(json_array_get(vs, i));
    for (size_t i = 0; i < json_array_size(fbs); i++)
        run_fallback(json_array_get(fbs, i));
    coord_leader_fallback_info fb;
    CHECK(coord_leader_fallback(dir, NULL, "x", 1, NULL) == COORD_EINVAL, "NULL out");
    CHECK(coord_leader_fallback(dir, NULL, "", 0, &fb) == 0 &&
          fb.action == COORD_LEADER_FAIL_CLOSED, "empty workstream");
    json_decref(root);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        failures++;
    if (failures) {
        fprintf(stderr, "desc_file: %d failed\n", failures);
        return 1;
    }
    fprintf(stderr, "desc_file: all passed\n");
    return 0;
}
