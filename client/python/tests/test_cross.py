"""Python beside the C client (coordctl, libcoord) on one broker, and ten
Python processes on one lock."""
import os
import subprocess
import sys
import textwrap
import threading

import coord
from conftest import child_env, wait_until


def test_python_waiter_behind_coordctl_holder(broker):
    holder = broker.ctl_popen("lock", "shared-name", "--", "sh", "-c",
                              'echo "$COORD_LOCK_TOKEN"; read x',
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        ctoken = int(holder.stdout.readline())
        with broker.client() as c:
            assert c.try_lock("shared-name") is None
            got = []
            t = threading.Thread(target=lambda: got.append(
                c.lock("shared-name", timeout=10).__enter__()))
            t.start()
            wait_until(lambda: len(c.locks().pending) == 1, what="python queued")
            holder.stdin.write("done\n")
            holder.stdin.close()
            assert holder.wait(10) == 0
            t.join(10)
            assert got and got[0].token > ctoken
            got[0].release()
    finally:
        holder.kill()
        holder.wait()


def test_python_owner_c_followers(broker):
    with broker.client() as c:
        def fn(f):
            # wait until the three C followers joined, then share a result in
            # coordctl's format 1: byte 0 = 1, byte 1 = exit status, stdout
            wait_until(lambda: c.flight.list()[0].followers == 3, what="C followers")
            return bytes([1, 7]) + b"from python\n"
        out = []
        t = threading.Thread(target=lambda: out.append(c.once("xk", fn)))
        t.start()
        wait_until(lambda: c.flight.list(), what="python owner")
        cs = [broker.ctl_popen("once", "xk", "--", "sh", "-c", "echo from C",
                               stdout=subprocess.PIPE) for _ in range(3)]
        res = [(p.communicate(timeout=10)[0], p.returncode) for p in cs]
        t.join(10)
        assert res == [(b"from python\n", 7)] * 3
        assert out == [b"\x01\x07from python\n"]


def test_c_owner_python_follower(broker):
    owner = broker.ctl_popen("once", "ck", "--", "sh", "-c", "read x; echo C result",
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        with broker.client() as c:
            wait_until(lambda: c.flight.list(), what="C owner")
            out = []
            t = threading.Thread(target=lambda: out.append(
                c.once("ck", lambda f: b"python ran")))
            t.start()
            wait_until(lambda: c.flight.list()[0].followers == 1, what="python follower")
            owner.stdin.write(b"go\n")
            owner.stdin.close()
            t.join(10)
            assert out == [b"\x01\x00C result\n"]
            assert owner.wait(10) == 0
    finally:
        owner.kill()
        owner.wait()


def test_python_leader_fenced_by_c(broker):
    with broker.client() as c:
        lead = c.leader("cws")
        lead.campaign()
        assert lead.commit("op1", "k", b"v").applied is True
        r = broker.ctl("disable", "cws")                 # libcoord fences us
        assert r.returncode == 0, r.stderr
        assert int(r.stdout.split()[-1]) > lead.generation
        assert lead.lost.wait(5) and lead.lost_reason == "disabled"
        try:
            lead.commit("op2", "k", b"w")
            raise AssertionError("commit after the fence")
        except coord.Fenced:
            pass
        assert broker.ctl("enable", "cws").returncode == 0
        # and a C leader sees the generation move past ours
        r = broker.ctl("leader-run", "cws", "--", "sh", "-c", 'echo "$COORD_GENERATION"')
        assert r.returncode == 0 and int(r.stdout) > lead.generation


WORKER = textwrap.dedent("""
    import os, sys, coord
    sock, log, marker = sys.argv[1:4]
    c = coord.Client(sock, autostart=False)
    sys.stdout.write("ready\\n"); sys.stdout.flush()
    sys.stdin.readline()
    fd = os.open(log, os.O_WRONLY | os.O_APPEND)
    for seq in range(100):
        with c.lock("stress") as lk:
            m = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)  # exclusion
            q = [e.conn for e in c.locks().pending if e.name == "stress"]
            os.write(fd, f"{c.conn_id} {seq} {lk.token} {q[0] if q else 0}\\n".encode())
            os.close(m)
            os.unlink(marker)
    c.close()
""")


def test_ten_processes_hundred_locks_fifo(broker, tmp_path):
    log = tmp_path / "log"
    log.write_text("")
    marker = str(tmp_path / "marker")
    ps = [subprocess.Popen([sys.executable, "-c", WORKER, broker.socket, str(log), marker],
                           env=child_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           text=True) for _ in range(10)]
    for p in ps:
        assert p.stdout.readline() == "ready\n"
    for p in ps:
        p.stdin.write("go\n")
        p.stdin.flush()
    for p in ps:
        assert p.wait(60) == 0
    rows = [tuple(map(int, ln.split())) for ln in log.read_text().splitlines()]
    assert len(rows) == 1000
    tokens = [r[2] for r in rows]
    assert all(a < b for a, b in zip(tokens, tokens[1:])), "tokens not increasing"
    by_conn = {}
    for conn, seq, _, _ in rows:
        by_conn.setdefault(conn, []).append(seq)
    assert len(by_conn) == 10 and all(v == list(range(100)) for v in by_conn.values())
    # FIFO: the head of the queue seen by a holder is the next to be granted
    checked = 0
    for cur, nxt in zip(rows, rows[1:]):
        if cur[3]:
            assert nxt[0] == cur[3], f"grant after {cur} went to conn {nxt[0]}"
            checked += 1
    assert checked > 500          # the queue was busy most of the time
