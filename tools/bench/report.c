/* report.c - figures of a scenario, printed as aligned lines for people as
 * soon as the scenario ends, and as one JSON document (--json) at the end. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "bench.h"

static void vset(char *dst, size_t size, const char *fmt, va_list ap)
{
    vsnprintf(dst, size, fmt, ap);
}

void res_title(struct result *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vset(r->title, sizeof r->title, fmt, ap);
    va_end(ap);
}

void res_note(struct result *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vset(r->note, sizeof r->note, fmt, ap);
    va_end(ap);
}

void res_skip(struct result *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vset(r->note, sizeof r->note, fmt, ap);
    va_end(ap);
    r->status = SC_SKIPPED;
}

void res_error(struct result *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vset(r->note, sizeof r->note, fmt, ap);
    va_end(ap);
    r->status = SC_ERROR;
}

static void copy(char *dst, size_t size, const char *s)
{
    snprintf(dst, size, "%s", s ? s : "");
}

static enum verdict judge(double v, enum cmp cmp, double target)
{
    if (cmp == CMP_NONE)
        return V_NONE;
    if (isnan(v))
        return V_MISS;
    switch (cmp) {
    case CMP_LE: return v <= target ? V_PASS : V_MISS;
    case CMP_GE: return v >= target ? V_PASS : V_MISS;
    case CMP_EQ: return v == target ? V_PASS : V_MISS;
    default: return V_NONE;
    }
}

static struct figure *new_fig(struct result *r, const char *key, const char *what)
{
    if (r->nfig >= MAX_FIGS)
        return NULL;
    struct figure *f = &r->fig[r->nfig++];
    memset(f, 0, sizeof *f);
    copy(f->key, sizeof f->key, key);
    copy(f->what, sizeof f->what, what);
    f->broker = f->base = f->value = f->target = NAN;
    f->verdict = V_NONE;
    return f;
}

struct figure *res_ratio(struct result *r, const char *key, const char *what,
                         double broker, const char *bwhat, double base,
                         const char *unit, bool inverse, enum cmp cmp,
                         double target)
{
    struct figure *f = new_fig(r, key, what);
    if (!f)
        return NULL;
    f->broker = broker;
    f->base = base;
    copy(f->bwhat, sizeof f->bwhat, bwhat);
    copy(f->unit, sizeof f->unit, unit);
    f->value = inverse ? base / broker : broker / base;
    copy(f->vunit, sizeof f->vunit, "x");
    f->cmp = cmp;
    f->target = target;
    f->verdict = judge(f->value, cmp, target);
    return f;
}

struct figure *res_abs(struct result *r, const char *key, const char *what,
                       double value, const char *unit, enum cmp cmp,
                       double target)
{
    struct figure *f = new_fig(r, key, what);
    if (!f)
        return NULL;
    f->broker = value;
    f->value = value;
    copy(f->unit, sizeof f->unit, unit);
    copy(f->vunit, sizeof f->vunit, unit);
    f->cmp = cmp;
    f->target = target;
    f->verdict = judge(value, cmp, target);
    return f;
}

void res_info(struct result *r, const char *key, double v, const char *unit)
{
    if (r->ninfo >= MAX_INFO)
        return;
    struct info *i = &r->info[r->ninfo++];
    copy(i->key, sizeof i->key, key);
    copy(i->unit, sizeof i->unit, unit);
    i->v = v;
}

/* ---- text ---- */

static const char *cmp_text(enum cmp c)
{
    return c == CMP_LE ? "<=" : c == CMP_GE ? ">=" : c == CMP_EQ ? "==" : "";
}

static const char *verdict_text(enum verdict v)
{
    return v == V_PASS ? "PASS" : v == V_MISS ? "MISS" : "";
}

/* Numbers with a sensible number of digits for their size. */
static void fmt_num(char *out, size_t size, double v)
{
    double a = fabs(v);
    if (isnan(v))
        snprintf(out, size, "-");
    else if (a >= 100000 || (a < 1e15 && v == (double)(long long)v))
        snprintf(out, size, "%.0f", v);
    else if (a >= 100)
        snprintf(out, size, "%.1f", v);
    else
        snprintf(out, size, "%.2f", v);
}

#define W_WHAT 42

static void print_fig(FILE *o, const struct figure *f)
{
    char a[32], t[32];
    bool ratio = strcmp(f->vunit, "x") == 0;
    if (ratio) {
        fmt_num(a, sizeof a, f->broker);
        fprintf(o, "  broker  %-*s %12s %s\n", W_WHAT, f->what, a, f->unit);
        fmt_num(a, sizeof a, f->base);
        fprintf(o, "  %-7s %-*s %12s %s\n", strncmp(f->bwhat, "Redis", 5) ? "raw" : "redis",
                W_WHAT, f->bwhat, a, f->unit);
        fmt_num(a, sizeof a, f->value);
        if (f->cmp != CMP_NONE) {
            fmt_num(t, sizeof t, f->target);
            fprintf(o, "  ratio   %-*s %11sx   target %s %sx   %s\n", W_WHAT, f->key,
                    a, cmp_text(f->cmp), t, verdict_text(f->verdict));
        } else {
            fprintf(o, "  ratio   %-*s %11sx\n", W_WHAT, f->key, a);
        }
    } else {
        fmt_num(a, sizeof a, f->value);
        if (f->cmp != CMP_NONE) {
            fmt_num(t, sizeof t, f->target);
            fprintf(o, "  broker  %-*s %12s %-6s target %s %s %s   %s\n", W_WHAT,
                    f->what, a, f->unit, cmp_text(f->cmp), t, f->vunit,
                    verdict_text(f->verdict));
        } else {
            fprintf(o, "  broker  %-*s %12s %s\n", W_WHAT, f->what, a, f->unit);
        }
    }
}

void report_scenario(const struct bench *b, const struct result *r)
{
    FILE *o = b->json ? stderr : stdout;
    if (b->json && !b->verbose)
        return;
    fprintf(o, "\n%s", r->name);
    if (r->title[0])
        fprintf(o, ": %s", r->title);
    fputc('\n', o);
    if (r->status == SC_SKIPPED) {
        fprintf(o, "  skipped: %s\n", r->note);
        return;
    }
    if (r->status == SC_ERROR)
        fprintf(o, "  ERROR: %s\n", r->note);
    for (int i = 0; i < r->nfig; i++)
        print_fig(o, &r->fig[i]);
    for (int i = 0; i < r->ninfo; i++) {
        char a[32];
        fmt_num(a, sizeof a, r->info[i].v);
        fprintf(o, "  info    %-*s %12s %s\n", W_WHAT, r->info[i].key, a, r->info[i].unit);
    }
    if (r->status != SC_ERROR && r->note[0])
        fprintf(o, "  note: %s\n", r->note);
    fflush(o);
}

/* ---- JSON ---- */

static void jstr(FILE *o, const char *s)
{
    fputc('"', o);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(o, "\\%c", c);
        else if (c < 0x20)
            fprintf(o, "\\u%04x", c);
        else
            fputc(c, o);
    }
    fputc('"', o);
}

static void jnum(FILE *o, double v)
{
    if (isnan(v) || isinf(v))
        fputs("null", o);
    else
        fprintf(o, "%.6g", v);
}

static const char *status_text(const struct result *r)
{
    if (r->status == SC_SKIPPED)
        return "skipped";
    if (r->status == SC_ERROR)
        return "error";
    for (int i = 0; i < r->nfig; i++)
        if (r->fig[i].verdict == V_MISS)
            return "miss";
    return "pass";
}

static void json_doc(const struct bench *b, const struct result *rs, int n,
                     double seconds, int pass, int miss, int skipped, int errors)
{
    FILE *o = stdout;
    fprintf(o, "{\"tool\":\"coord-bench\",\"quick\":%s,\"frame_size\":%zu,"
               "\"seconds\":", b->quick ? "true" : "false", b->frame_size);
    jnum(o, seconds);
    fprintf(o, ",\"scenarios\":[");
    for (int s = 0; s < n; s++) {
        const struct result *r = &rs[s];
        fprintf(o, "%s\n {\"name\":", s ? "," : "");
        jstr(o, r->name);
        fprintf(o, ",\"status\":");
        jstr(o, status_text(r));
        fprintf(o, ",\"title\":");
        jstr(o, r->title);
        fprintf(o, ",\"note\":");
        jstr(o, r->note);
        fprintf(o, ",\"seconds\":");
        jnum(o, r->seconds);
        fprintf(o, ",\"figures\":[");
        for (int i = 0; i < r->nfig; i++) {
            const struct figure *f = &r->fig[i];
            fprintf(o, "%s{\"key\":", i ? "," : "");
            jstr(o, f->key);
            fprintf(o, ",\"what\":");
            jstr(o, f->what);
            fprintf(o, ",\"broker\":");
            jnum(o, f->broker);
            fprintf(o, ",\"baseline_what\":");
            jstr(o, f->bwhat);
            fprintf(o, ",\"baseline\":");
            jnum(o, f->base);
            fprintf(o, ",\"unit\":");
            jstr(o, f->unit);
            fprintf(o, ",\"value\":");
            jnum(o, f->value);
            fprintf(o, ",\"value_unit\":");
            jstr(o, f->vunit);
            fprintf(o, ",\"cmp\":");
            jstr(o, cmp_text(f->cmp));
            fprintf(o, ",\"target\":");
            jnum(o, f->target);
            fprintf(o, ",\"verdict\":");
            if (f->verdict == V_NONE)
                fputs("null", o);
            else
                jstr(o, verdict_text(f->verdict));
            fputc('}', o);
        }
        fprintf(o, "],\"info\":{");
        for (int i = 0; i < r->ninfo; i++) {
            fprintf(o, "%s", i ? "," : "");
            jstr(o, r->info[i].key);
            fprintf(o, ":{\"value\":");
            jnum(o, r->info[i].v);
            fprintf(o, ",\"unit\":");
            jstr(o, r->info[i].unit);
            fputc('}', o);
        }
        fprintf(o, "}}");
    }
    fprintf(o, "\n],\"summary\":{\"pass\":%d,\"miss\":%d,\"skipped\":%d,"
               "\"errors\":%d}}\n", pass, miss, skipped, errors);
}

int report_final(const struct bench *b, const struct result *rs, int n,
                 double seconds)
{
    int pass = 0, miss = 0, skipped = 0, errors = 0;
    for (int s = 0; s < n; s++) {
        if (rs[s].status == SC_SKIPPED)
            skipped++;
        if (rs[s].status == SC_ERROR)
            errors++;
        for (int i = 0; i < rs[s].nfig; i++) {
            pass += rs[s].fig[i].verdict == V_PASS;
            miss += rs[s].fig[i].verdict == V_MISS;
        }
    }
    if (b->json) {
        json_doc(b, rs, n, seconds, pass, miss, skipped, errors);
        return miss;
    }
    FILE *o = stdout;
    fprintf(o, "\nsummary (frame %zu B%s)\n", b->frame_size, b->quick ? ", --quick" : "");
    for (int s = 0; s < n; s++) {
        const struct result *r = &rs[s];
        if (r->status == SC_SKIPPED) {
            fprintf(o, "  %-16s skipped: %s\n", r->name, r->note);
            continue;
        }
        if (r->status == SC_ERROR)
            fprintf(o, "  %-16s ERROR: %s\n", r->name, r->note);
        for (int i = 0; i < r->nfig; i++) {
            const struct figure *f = &r->fig[i];
            if (f->cmp == CMP_NONE)
                continue;
            char a[32], t[32];
            fmt_num(a, sizeof a, f->value);
            fmt_num(t, sizeof t, f->target);
            fprintf(o, "  %-16s %-28s %10s%-4s %s %s%-4s %s\n", r->name, f->key, a,
                    f->vunit, cmp_text(f->cmp), t, f->vunit, verdict_text(f->verdict));
        }
    }
    fprintf(o, "  %d PASS, %d MISS, %d skipped, %d errors (%.1f s)\n", pass, miss,
            skipped, errors, seconds);
    return miss;
}
