/* test_instance.c - unit tests of the data dir's lock (broker/instance.c):
 * the holder's two lines parsed only when whole, and the lock refused to a
 * second open of the file (as to a second broker) with the holder named. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "instance.h"

static void test_parse(void)
{
    struct instance_holder h;
    CHECK_EQ(instance_parse_holder("pid=42\nsocket=/run/user/1/coord/broker.sock\n", &h), 0);
    CHECK_EQ(h.pid, 42);
    CHECK_STR(h.socket, "/run/user/1/coord/broker.sock");
    /* half-written, empty, or not ours: not a holder */
    CHECK_EQ(instance_parse_holder("", &h), -1);
    CHECK_EQ(instance_parse_holder("pid=42\n", &h), -1);
    CHECK_EQ(instance_parse_holder("pid=42\nsocket=/a/b", &h), -1);
    CHECK_EQ(instance_parse_holder("pid=0\nsocket=/a\n", &h), -1);
    CHECK_EQ(instance_parse_holder("pid=-3\nsocket=/a\n", &h), -1);
    CHECK_EQ(instance_parse_holder("pid=4x\nsocket=/a\n", &h), -1);
    CHECK_EQ(instance_parse_holder("xpid=4\nsocket=/a\n", &h), -1);
    char longer[300];
    snprintf(longer, sizeof longer, "pid=1\nsocket=/%0200d\n", 0);
    CHECK_EQ(instance_parse_holder(longer, &h), -1);       /* no socket path is this long */
}

static void test_lock(void)
{
    char dir[] = "/tmp/coord-instance-XXXXXX", err[256], path[300];
    CHECK(mkdtemp(dir) != NULL);
    struct instance_holder h;
    int fd = -1, fd2 = -1;
    CHECK_EQ(instance_lock(dir, &fd, &h, err, sizeof err), 0);
    CHECK(fd >= 0);
    CHECK_EQ(instance_publish(fd, "/tmp/s.sock", err, sizeof err), 0);
    /* another open file: refused while fd lives, with the holder named */
    CHECK_EQ(instance_lock(dir, &fd2, &h, err, sizeof err), 1);
    CHECK_EQ(fd2, -1);
    CHECK_EQ(h.pid, getpid());
    CHECK_STR(h.socket, "/tmp/s.sock");
    close(fd);
    /* free again once closed; the new holder empties the old lines */
    CHECK_EQ(instance_lock(dir, &fd2, &h, err, sizeof err), 0);
    char buf[64];
    CHECK_EQ(pread(fd2, buf, sizeof buf, 0), 0);
    close(fd2);
    /* a data dir that is not there: an error naming the file */
    snprintf(path, sizeof path, "%s/missing", dir);
    CHECK_EQ(instance_lock(path, &fd, &h, err, sizeof err), -1);
    CHECK(strstr(err, "missing/coordd.lock") != NULL);
    snprintf(path, sizeof path, "%s/%s", dir, INSTANCE_LOCK_FILE);
    unlink(path);
    CHECK(rmdir(dir) == 0);
}

int main(void)
{
    test_parse();
    test_lock();
    return check_report("test_instance");
}
