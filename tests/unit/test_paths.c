/* test_paths.c - unit tests of the default socket/data locations (env
 * precedence) and of coord_prepare_private_dir's checks. */
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "paths.h"

static void clear_env(void)
{
    unsetenv("COORD_SOCKET");
    unsetenv("XDG_RUNTIME_DIR");
    unsetenv("COORD_DATA_DIR");
    unsetenv("XDG_STATE_HOME");
}

static void test_socket_path(void)
{
    char out[256], want[256];
    clear_env();

    snprintf(want, sizeof want, "/tmp/coord-%u/broker.sock", (unsigned)getuid());
    CHECK_EQ(coord_default_socket_path(out, sizeof out), 0);
    CHECK_STR(out, want);

    setenv("XDG_RUNTIME_DIR", "/run/user/4242", 1);
    CHECK_EQ(coord_default_socket_path(out, sizeof out), 0);
    CHECK_STR(out, "/run/user/4242/coord/broker.sock");

    setenv("COORD_SOCKET", "/some/where/else.sock", 1);
    CHECK_EQ(coord_default_socket_path(out, sizeof out), 0);
    CHECK_STR(out, "/some/where/else.sock");

    /* empty variables count as unset */
    setenv("COORD_SOCKET", "", 1);
    CHECK_EQ(coord_default_socket_path(out, sizeof out), 0);
    CHECK_STR(out, "/run/user/4242/coord/broker.sock");
    setenv("XDG_RUNTIME_DIR", "", 1);
    CHECK_EQ(coord_default_socket_path(out, sizeof out), 0);
    CHECK_STR(out, want);

    /* does not fit: -1 */
    char longp[300];
    memset(longp, 'a', sizeof longp - 1);
    longp[0] = '/';
    longp[sizeof longp - 1] = '\0';
    setenv("COORD_SOCKET", longp, 1);
    CHECK_EQ(coord_default_socket_path(out, COORD_SOCKET_PATH_MAX + 1), -1);
    CHECK_EQ(coord_default_socket_path(out, sizeof out), -1);
    unsetenv("COORD_SOCKET");
    setenv("XDG_RUNTIME_DIR", "/run/user/4242", 1);
    CHECK_EQ(coord_default_socket_path(out, 10), -1);
    CHECK_EQ(coord_default_socket_path(out, strlen("/run/user/4242/coord/broker.sock")), -1);
    CHECK_EQ(coord_default_socket_path(out, strlen("/run/user/4242/coord/broker.sock") + 1), 0);
    clear_env();
}

static void test_data_dir(void)
{
    char out[512], want[512];
    char *home_saved = getenv("HOME") ? strdup(getenv("HOME")) : NULL;
    clear_env();

    setenv("HOME", "/home/someone", 1);
    CHECK_EQ(coord_default_data_dir(out, sizeof out), 0);
    CHECK_STR(out, "/home/someone/.local/state/coord");

    setenv("XDG_STATE_HOME", "/var/state", 1);
    CHECK_EQ(coord_default_data_dir(out, sizeof out), 0);
    CHECK_STR(out, "/var/state/coord");

    setenv("COORD_DATA_DIR", "/data/coord-here", 1);
    CHECK_EQ(coord_default_data_dir(out, sizeof out), 0);
    CHECK_STR(out, "/data/coord-here");

    setenv("COORD_DATA_DIR", "", 1);
    CHECK_EQ(coord_default_data_dir(out, sizeof out), 0);
    CHECK_STR(out, "/var/state/coord");

    /* no HOME: the passwd entry's home */
    clear_env();
    unsetenv("HOME");
    struct passwd *pw = getpwuid(getuid());
    snprintf(want, sizeof want, "%s/.local/state/coord", pw ? pw->pw_dir : "/");
    CHECK_EQ(coord_default_data_dir(out, sizeof out), 0);
    CHECK_STR(out, want);

    CHECK_EQ(coord_default_data_dir(out, 5), -1);

    if (home_saved)
        setenv("HOME", home_saved, 1);
    free(home_saved);
    clear_env();
}

static void test_dirname(void)
{
    char out[64];
    CHECK_EQ(coord_dirname("/run/user/1/coord/broker.sock", out, sizeof out), 0);
    CHECK_STR(out, "/run/user/1/coord");
    CHECK_EQ(coord_dirname("/sock", out, sizeof out), 0);
    CHECK_STR(out, "/");
    CHECK_EQ(coord_dirname("sock", out, sizeof out), 0);
    CHECK_STR(out, ".");
    CHECK_EQ(coord_dirname("a/b", out, sizeof out), 0);
    CHECK_STR(out, "a");
    CHECK_EQ(coord_dirname("/run/user/1/coord/broker.sock", out, 5), -1);
}

static mode_t mode_of(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 ? (st.st_mode & 07777) : (mode_t)-1;
}

static void test_private_dir(void)
{
    char base[] = "/tmp/coord-test-paths-XXXXXX";
    char p[PATH_MAX], err[256];
    CHECK(mkdtemp(base) != NULL);
    mode_t old_umask = umask(022);

    /* creates missing parents, all 0700 */
    snprintf(p, sizeof p, "%s/a/b/c", base);
    err[0] = '\0';
    CHECK_EQ(coord_prepare_private_dir(p, err, sizeof err), 0);
    CHECK_STR(err, "");
    CHECK_EQ(mode_of(p), 0700);
    snprintf(p, sizeof p, "%s/a/b", base);
    CHECK_EQ(mode_of(p), 0700);
    snprintf(p, sizeof p, "%s/a", base);
    CHECK_EQ(mode_of(p), 0700);

    /* an existing good directory is accepted, and left as it is */
    snprintf(p, sizeof p, "%s/a/b/c", base);
    CHECK_EQ(coord_prepare_private_dir(p, err, sizeof err), 0);
    CHECK_EQ(mode_of(p), 0700);
    CHECK(chmod(p, 0755) == 0);             /* readable by others: allowed */
    CHECK_EQ(coord_prepare_private_dir(p, err, sizeof err), 0);
    CHECK_EQ(mode_of(p), 0755);

    /* group or world writable: refused, with a reason */
    CHECK(chmod(p, 0770) == 0);
    err[0] = '\0';
    CHECK_EQ(coord_prepare_private_dir(p, err, sizeof err), -1);
    CHECK(strstr(err, "writable") != NULL);
    CHECK(strstr(err, p) != NULL);
    CHECK(chmod(p, 0702) == 0);
    err[0] = '\0';
    CHECK_EQ(coord_prepare_private_dir(p, err, sizeof err), -1);
    CHECK(strstr(err, "writable") != NULL);
    CHECK(chmod(p, 01777) == 0);            /* like /tmp itself */
    CHECK_EQ(coord_prepare_private_dir(p, err, sizeof err), -1);
    CHECK(chmod(p, 0700) == 0);

    /* not a directory: a file, and a symlink to a good directory */
    snprintf(p, sizeof p, "%s/file", base);
    FILE *f = fopen(p, "w");
    CHECK(f != NULL);
    if (f)
        fclose(f);
    err[0] = '\0';
    CHECK_EQ(coord_prepare_private_dir(p, err, sizeof err), -1);
    CHECK(strstr(err, "not a directory") != NULL);
    char target[PATH_MAX], link[PATH_MAX];
    snprintf(target, sizeof target, "%s/a", base);
    snprintf(link, sizeof link, "%s/link", base);
    CHECK(symlink(target, link) == 0);
    CHECK_EQ(coord_prepare_private_dir(link, err, sizeof err), -1);

    /* a file in the way of a parent: cannot create */
    snprintf(p, sizeof p, "%s/file/sub", base);
    err[0] = '\0';
    CHECK_EQ(coord_prepare_private_dir(p, err, sizeof err), -1);
    CHECK(err[0] != '\0');

    /* owned by someone else (only root can arrange that) */
    snprintf(p, sizeof p, "%s/other", base);
    if (getuid() == 0) {
        CHECK(mkdir(p, 0700) == 0);
        CHECK(chown(p, 65534, 65534) == 0);
        err[0] = '\0';
        CHECK_EQ(coord_prepare_private_dir(p, err, sizeof err), -1);
        CHECK(strstr(err, "owned by") != NULL);
        rmdir(p);
    }

    /* a small err buffer is not overrun */
    char tiny[8];
    memset(tiny, 'x', sizeof tiny);
    snprintf(p, sizeof p, "%s/file", base);
    CHECK_EQ(coord_prepare_private_dir(p, tiny, sizeof tiny), -1);
    CHECK(memchr(tiny, '\0', sizeof tiny) != NULL);

    /* clean up */
    umask(old_umask);
    unlink(link);
    snprintf(p, sizeof p, "%s/file", base);
    unlink(p);
    snprintf(p, sizeof p, "%s/a/b/c", base);
    rmdir(p);
    snprintf(p, sizeof p, "%s/a/b", base);
    rmdir(p);
    snprintf(p, sizeof p, "%s/a", base);
    rmdir(p);
    CHECK(rmdir(base) == 0);
}

/* umask 077 (what the broker sets) gives the same 0700 */
static void test_private_dir_umask(void)
{
    char base[] = "/tmp/coord-test-paths-XXXXXX";
    char p[PATH_MAX], err[256];
    CHECK(mkdtemp(base) != NULL);
    mode_t old_umask = umask(077);
    snprintf(p, sizeof p, "%s/coord", base);
    CHECK_EQ(coord_prepare_private_dir(p, err, sizeof err), 0);
    CHECK_EQ(mode_of(p), 0700);
    umask(old_umask);
    rmdir(p);
    CHECK(rmdir(base) == 0);
}

int main(void)
{
    test_socket_path();
    test_data_dir();
    test_dirname();
    test_private_dir();
    test_private_dir_umask();
    return check_report("test_paths");
}
