/* redact.c - see redact.h. */
#include <errno.h>
#include <fcntl.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>
#include "redact.h"

static struct {
    unsigned char key[32];
    bool plain;
    EVP_MAC_CTX *tmpl;             /* HMAC-SHA-256 with the key, set up once */
} X;

/* Loads the algorithm and keys a template context at start, so that a
 * log line costs a context copy, not a provider look-up. */
static int setup_mac(char *err, size_t errsize)
{
    EVP_MAC *mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    X.tmpl = mac ? EVP_MAC_CTX_new(mac) : NULL;
    EVP_MAC_free(mac);
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_utf8_string("digest", (char *)"SHA256", 0),
        OSSL_PARAM_construct_end(),
    };
    if (!X.tmpl || !EVP_MAC_init(X.tmpl, X.key, sizeof X.key, params)) {
        snprintf(err, errsize, "cannot set up HMAC-SHA-256 for the log");
        return -1;
    }
    return 0;
}

int redact_init(const char *dir, bool plain, char *err, size_t errsize)
{
    X.plain = plain;
    char path[4200];
    snprintf(path, sizeof path, "%s/log.key", dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t n = read(fd, X.key, sizeof X.key);
        close(fd);
        if (n == (ssize_t)sizeof X.key)
            return setup_mac(err, errsize);
    }
    if (getrandom(X.key, sizeof X.key, 0) != (ssize_t)sizeof X.key) {
        snprintf(err, errsize, "cannot make the log key: %s", strerror(errno));
        return -1;
    }
    char tmp[4210];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || write(fd, X.key, sizeof X.key) != (ssize_t)sizeof X.key ||
        fsync(fd) < 0 || close(fd) < 0 || rename(tmp, path) < 0) {
        snprintf(err, errsize, "cannot store %s: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return setup_mac(err, errsize);
}

const char *redact(const void *p, size_t n, char *out)
{
    if (X.plain) {
        const unsigned char *b = p;
        size_t i = 0, shown = n < REDACT_PLAIN_MAX ? n : REDACT_PLAIN_MAX;
        for (; i < shown; i++)
            out[i] = b[i] >= 0x20 && b[i] < 0x7f && b[i] != '"' ? (char)b[i] : '?';
        if (n > shown)
            memcpy(out + i, "...", 3), i += 3;
        out[i] = '\0';
        return out;
    }
    unsigned char mac[EVP_MAX_MD_SIZE];
    size_t len = 0;
    EVP_MAC_CTX *ctx = X.tmpl ? EVP_MAC_CTX_dup(X.tmpl) : NULL;
    bool ok = ctx && EVP_MAC_update(ctx, p, n) && EVP_MAC_final(ctx, mac, &len, sizeof mac) &&
              len >= 8;
    EVP_MAC_CTX_free(ctx);
    if (!ok) {
        strcpy(out, "-");
        return out;
    }
    for (int i = 0; i < 8; i++)
        snprintf(out + 2 * i, 3, "%02x", mac[i]);
    return out;
}
