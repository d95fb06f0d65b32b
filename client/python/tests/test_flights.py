"""Single-flight and records, blocking and asyncio."""
import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import threading

import pytest

import coord
from conftest import await_until, child_env, wait_until


def followers(c, key, n):
    def check():
        fl = [f for f in c.flight.list() if coord.messages.name_key(f.key) == key.encode()]
        return fl and fl[0].followers == n
    wait_until(check, what=f"{n} followers")


def test_once_owner_and_followers(broker):
    with broker.client() as c:
        gate, runs, results = threading.Event(), [], []

        def fn(f):
            runs.append(f.fence)
            assert f.role == "owner" and f.fence > 0 and not f.aborted.is_set()
            gate.wait(5)
            return b"value"
        clients = [broker.client() for _ in range(4)]
        threads = [threading.Thread(target=lambda cl=cl: results.append(cl.once("k", fn)))
                   for cl in clients]
        threads[0].start()
        wait_until(lambda: c.flight.list(), what="the owner")
        for t in threads[1:]:
            t.start()
        followers(c, "k", 3)
        gate.set()
        for t in threads:
            t.join(10)
        assert results == [b"value"] * 4 and len(runs) == 1
        for cl in clients:
            cl.close()


def test_once_keep_record_and_records_api(broker):
    with broker.client() as c, broker.client() as d:
        assert c.once("cfg", lambda f: "v1", keep=30) == b"v1"
        assert d.once("cfg", lambda f: pytest.fail("ran again"), keep=30) == b"v1"
        rec = d.records.get("cfg")
        assert rec.status == "completed" and rec.result == b"v1" and rec.expires > rec.created
        assert [r.key for r in d.records.list()] == ["cfg"]
        assert d.records.get("nothing") is None
        assert d.records.purge() == 1 and d.records.list() == []


def test_owner_failure_reaches_followers(broker):
    with broker.client() as c, broker.client() as d:
        gate = threading.Event()
        err = []

        def owner():
            def fn(f):
                gate.wait(5)
                raise coord.FlightFailed("NO_DATA", "source down", retryable=False)
            with pytest.raises(coord.FlightFailed):
                c.once("k", fn)
        t = threading.Thread(target=owner)
        t.start()
        wait_until(lambda: c.flight.list(), what="owner")
        t2 = threading.Thread(target=lambda: err.append(
            pytest.raises(coord.FlightFailed, d.once, "k", lambda f: b"x")))
        t2.start()
        followers(c, "k", 1)
        gate.set()
        t.join(5)
        t2.join(5)
        e = err[0].value
        assert e.error_code == "NO_DATA" and e.message == "source down" and not e.retryable


def test_an_owners_long_error_is_cut_to_the_limits_in_bytes(broker):
    """An exception's name and text are cut to the protocol's limits in
    UTF-8 bytes (not characters): the broker takes the failure, and the
    follower hears it."""
    long_name = type("É" * 200, (ValueError,), {})      # 400 bytes of name
    with broker.client() as c, broker.client() as d:
        gate = threading.Event()
        err = []

        def owner():
            def fn(f):
                gate.wait(5)
                raise long_name("é" * 3000 + "€")       # 6003 bytes in 3001 characters
            with pytest.raises(ValueError):
                c.once("k", fn)
        t = threading.Thread(target=owner)
        t.start()
        wait_until(lambda: c.flight.list(), what="owner")
        t2 = threading.Thread(target=lambda: err.append(
            pytest.raises(coord.FlightFailed, d.once, "k", lambda f: b"x")))
        t2.start()
        followers(c, "k", 1)
        gate.set()
        t.join(5)
        t2.join(5)
        assert c.flight.list() == []                    # the failure was taken
        e = err[0].value
        assert e.error_code == "É" * 128 and e.message == "é" * 2048 and not e.retryable


def test_low_level_join_abort_and_fence(broker):
    with broker.client() as c, broker.client() as d:
        f = c.flight.join("k", ttl=0.2)
        assert f.role == "owner"
        assert f.aborted.wait(5) and f.abort_reason == "deadline"
        with pytest.raises(coord.Aborted):
            f.check()
        with pytest.raises(coord.Fenced):
            c.flight.complete(f, b"late")
        g = d.flight.join("k", ttl=5)
        assert g.role == "owner" and g.fence > f.fence
        assert d.flight.fail(g, "E", "m", retryable=True) == 0
        with pytest.raises(coord.Timeout):
            o = c.flight.join("w", ttl=5)
            d.flight.join("w", wait=0.1)
        o.complete(b"")


def test_purge_fences_flight(broker):
    """Logout during a request: the purge ends the running flight."""
    with broker.client(scope="sess") as c, broker.client(scope="sess") as d, \
            broker.client(scope="sess") as p:
        f = c.flight.join("me", ttl=30)
        assert f.role == "owner"
        err = []

        def follow():
            try:
                d.flight.join("me", wait=10)
            except coord.CoordError as e:
                err.append(e)

        t = threading.Thread(target=follow)
        t.start()
        wait_until(lambda: any(e.followers == 1 for e in p.flight.list()))
        n = p.records.purge()
        assert n == 0 and n.deleted == 0 and n.fenced == 1
        t.join(10)
        assert len(err) == 1 and err[0].code == "ABORTED" and err[0].reason == "purged"
        assert f.aborted.wait(5) and f.abort_reason == "purged"
        with pytest.raises(coord.Fenced) as late:
            c.flight.complete(f, b"private", keep=60)
        assert late.value.reason == "purged"
        assert p.records.get("me") is None


OWNER = textwrap.dedent("""
    import sys, coord
    c = coord.Client(sys.argv[1], autostart=False)
    f = c.flight.join("p", ttl=30)
    print(f.role, f.fence, flush=True)
    sys.stdin.readline()
""")


def test_promoted_follower_runs_fn(broker):
    p = subprocess.Popen([sys.executable, "-c", OWNER, broker.socket], env=child_env(),
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        role, fence = p.stdout.readline().split()
        assert role == "owner"
        with broker.client() as c:
            out = []
            t = threading.Thread(target=lambda: out.append(
                c.once("p", lambda f: b"promoted %d" % f.fence)))
            t.start()
            followers(c, "p", 1)
            p.kill()                  # the owner dies: its follower is promoted
            t.join(10)
            assert out and out[0].startswith(b"promoted ")
            assert int(out[0].split()[1]) > int(fence)
    finally:
        p.kill()
        p.wait()


def test_async_flights(broker):
    async def main():
        async with broker.aclient() as c, broker.aclient() as d:
            gate = asyncio.Event()
            runs = []

            async def fn(f):
                runs.append(f.fence)
                await gate.wait()
                return b"av"
            t1 = asyncio.create_task(c.once("k", fn, keep=10))
            while not await c.flight.list():
                await asyncio.sleep(0.005)
            t2 = asyncio.create_task(d.once("k", fn))
            while (await c.flight.list())[0].followers != 1:
                await asyncio.sleep(0.005)
            gate.set()
            assert await t1 == b"av" and await t2 == b"av" and len(runs) == 1
            rec = await d.records.get("k")
            assert rec.result == b"av"
            assert len(await d.records.list(prefix="k")) == 1
            assert await d.records.purge("k") == 1
            f = await c.flight.join("x", ttl=0.2)
            await asyncio.wait_for(f.aborted.wait(), 5)
            with pytest.raises(coord.Fenced):
                await f.complete(b"late")
            # a cancelled join of a follower leaves the owner in place
            g = await c.flight.join("y")
            t = asyncio.create_task(d.flight.join("y"))
            while (await c.flight.list())[-1].followers != 1:
                await asyncio.sleep(0.005)
            t.cancel()
            with pytest.raises(asyncio.CancelledError):
                await t
            assert await g.complete(b"r") == 0

            async def bad(f):
                raise ValueError("boom")
            with pytest.raises(ValueError):
                await c.once("z", bad)
    asyncio.run(main())


def test_async_owner_failing_with_a_frozen_broker_does_not_hang(broker):
    """An owner function that raises while the broker does not answer: once
    raises its exception within request_timeout (it used to wait for the
    reply to its flight.fail with no deadline: a hang for as long as the
    broker was frozen, where the blocking client gives up after
    request_timeout)."""
    async def main():
        async with broker.aclient(request_timeout=0.5) as c, broker.aclient() as d:
            async def fn(f):
                os.kill(broker.proc.pid, signal.SIGSTOP)
                raise ValueError("boom")
            try:
                t = asyncio.create_task(c.once("k", fn))
                done, _ = await asyncio.wait({t}, timeout=5)
                assert t in done, "once hangs while the broker is frozen"
                with pytest.raises(ValueError):
                    t.result()
            finally:
                os.kill(broker.proc.pid, signal.SIGCONT)
            async def no_flight():
                return not await d.flight.list()
            await await_until(no_flight, what="the flight to fail")
    asyncio.run(main())
