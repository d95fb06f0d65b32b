"""Locks, blocking and asyncio: the with-block never runs without the lock."""
import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import coord
from conftest import await_until, child_env, wait_until


async def nothing_held(d, pending=False):
    """No lock held at the broker (and, with pending, none waiting)."""
    st = await d.locks()
    return not st.held and not (pending and st.pending)


def pending(c, n):
    return wait_until(lambda: len(c.locks().pending) == n, what=f"{n} pending")


def test_lock_basics(broker):
    with broker.client(client="t") as c, broker.client() as d:
        with c.lock("a") as lk:
            assert lk.held and lk.token > 0
            st = d.locks()
            assert [e.name for e in st.held] == ["a"] and st.held[0].client == "t"
            assert d.try_lock("a") is None
        t2 = d.try_lock("a")
        assert t2 is not None and t2.token > lk.token
        t2.release()
        with c.lock(b"\x00bin\xff", "shared") as s1, d.lock(b"\x00bin\xff", "shared") as s2:
            assert {e.name for e in c.locks().held} == {b"\x00bin\xff"}
            assert s1.held and s2.held
        with pytest.raises(coord.NameReserved):
            with c.lock("-x"):
                pytest.fail("ran without the lock")
        with pytest.raises(ValueError):
            c.lock("a", "weird")


def test_timeout_raises_and_block_never_runs(broker):
    with broker.client() as c, broker.client() as d:
        with c.lock("a"):
            with pytest.raises(coord.Timeout):
                with d.lock("a", timeout=0.1):
                    pytest.fail("ran without the lock")
            with pytest.raises(coord.Timeout):
                with d.lock("a", timeout=0):        # try once
                    pytest.fail("ran without the lock")
        assert c.locks().pending == []


def test_cancel_from_another_thread_raises_aborted(broker):
    with broker.client() as c, broker.client() as d:
        held = c.lock("a")
        held.acquire()
        lk = d.lock("a")
        out = []

        def waiter():
            try:
                with lk:
                    out.append("ran")
            except coord.Aborted:
                out.append("aborted")
        t = threading.Thread(target=waiter)
        t.start()
        pending(c, 1)
        # the broker can list the request a moment before the waiting thread
        # has registered it: cancel() says False until then
        wait_until(lk.cancel, what="the acquire to wait")
        t.join(5)
        assert out == ["aborted"]
        held.release()
        assert d.try_lock("a") is not None


def test_broker_killed_while_waiting(broker):
    c, d = broker.client(), broker.client()
    holder = c.lock("a")
    holder.acquire()
    out = []

    def waiter():
        try:
            with d.lock("a"):
                out.append("ran")
        except coord.ConnectionLost as e:
            out.append(e)
    t = threading.Thread(target=waiter)
    t.start()
    pending(c, 1)
    broker.kill()
    t.join(5)
    assert len(out) == 1 and isinstance(out[0], coord.ConnectionLost)
    assert holder.lost.wait(5) and holder.lost_reason == "disconnected"
    with pytest.raises(coord.LockLost):
        holder.check()
    with pytest.raises(coord.ConnectionLost):
        with c.lock("b"):
            pytest.fail("ran without the lock")
    c.close()
    d.close()


def test_steal_sets_lost_and_exit_raises(broker):
    with broker.client() as c, broker.client() as d:
        with pytest.raises(coord.LockLost):
            with c.lock("a") as lk:
                with d.lock("a", steal=True) as st:
                    assert lk.lost.wait(5) and lk.lost_reason == "stolen"
                    assert st.token > lk.token
                    with pytest.raises(coord.LockLost):
                        lk.check()


def test_lease_renews_while_block_runs(broker):
    with broker.client() as c, broker.client() as d:
        with c.lock("a", lease=0.5) as lk:
            # the lease passes several times over; the ticker renews it
            assert not lk.lost.wait(1.6)
            assert d.try_lock("a") is None
            lk.renew(0.3)
            lk.check()


HOLDER = textwrap.dedent("""
    import sys, coord
    c = coord.Client(sys.argv[1], autostart=False)
    lk = c.lock("frozen", lease=0.3)
    lk.acquire()
    print(lk.token, flush=True)
    sys.stdin.readline()              # parent: SIGSTOP ... SIGCONT, then a line
    ok = lk.lost.wait(5)
    try:
        lk.check()
        sys.exit(3)
    except coord.LockLost:
        pass
    print(lk.lost_reason, flush=True)
    sys.exit(0 if ok else 2)
""")


def test_frozen_holder_expires_and_learns_it(broker):
    p = subprocess.Popen([sys.executable, "-c", HOLDER, broker.socket], env=child_env(),
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        token = int(p.stdout.readline())
        os.kill(p.pid, signal.SIGSTOP)
        with broker.client() as c:
            with c.lock("frozen", timeout=5) as lk:
                assert lk.token > token
                os.kill(p.pid, signal.SIGCONT)
                p.stdin.write("go\n")
                p.stdin.flush()
                assert p.wait(10) == 0
                assert p.stdout.readline().strip() == "expired"
    finally:
        if p.poll() is None:
            os.kill(p.pid, signal.SIGCONT)
            p.kill()
            p.wait()


def test_fifo_grant_order(broker):
    """Ten waiters queued in a known order are granted in that order."""
    with broker.client() as c:
        first = c.lock("q")
        first.acquire()
        clients = [broker.client() for _ in range(10)]
        order, threads = [], []
        for i, cl in enumerate(clients):
            def run(i=i, cl=cl):
                with cl.lock("q", "shared" if i in (4, 5) else "exclusive") as lk:
                    order.append((i, lk.token))
            t = threading.Thread(target=run)
            t.start()
            threads.append(t)
            pending(c, i + 1)
        first.release()
        for t in threads:
            t.join(10)
        idx = [i for i, _ in order]
        assert sorted(idx[4:6]) == [4, 5] and idx[:4] + idx[6:] == [0, 1, 2, 3, 6, 7, 8, 9]
        tokens = [tok for _, tok in order]
        assert sorted(tokens) == sorted(set(tokens)) and tokens[0] > first.token
        for cl in clients:
            cl.close()


# ---- asyncio ----

def test_async_locks(broker):
    async def main():
        async with broker.aclient() as c, broker.aclient() as d:
            async with c.lock("a", lease=0.5) as lk:
                await asyncio.sleep(1.6)             # the lease passes three times: renewed meanwhile
                lk.check()
                assert await d.try_lock("a") is None
                with pytest.raises(coord.Timeout):
                    async with d.lock("a", timeout=0.1):
                        pytest.fail("ran without the lock")
                assert [e.name for e in (await d.locks()).held] == ["a"]
            with pytest.raises(coord.LockLost):
                async with c.lock("b") as lk:
                    async with d.lock("b", steal=True):
                        await asyncio.wait_for(lk.lost.wait(), 5)
                        assert lk.lost_reason == "stolen"
    asyncio.run(main())


def test_async_cancel_sends_cancel(broker):
    async def main():
        async with broker.aclient() as c, broker.aclient() as d:
            held = c.lock("a")
            await held.acquire()
            ran = []

            async def waiter():
                async with d.lock("a"):
                    ran.append(1)
            t = asyncio.create_task(waiter())
            while len((await c.locks()).pending) != 1:
                await asyncio.sleep(0.005)
            cancels = (await c.stats())["cancels"]
            t.cancel()
            with pytest.raises(asyncio.CancelledError):
                await t
            assert ran == [] and (await c.locks()).pending == []
            assert (await c.stats())["cancels"] == cancels + 1
            # the race: the grant is on its way when the waiter is cancelled
            t = asyncio.create_task(waiter())
            while len((await c.locks()).pending) != 1:
                await asyncio.sleep(0.005)
            await held.release()
            t.cancel()
            try:
                await t
            except asyncio.CancelledError:
                pass
            # granted-and-cancelled or cancelled-in-time: either way it is free now
            lk = await c.try_lock("a")
            assert lk is not None
            # explicit cancel from elsewhere: Aborted
            w = d.lock("a")
            t = asyncio.create_task(w.acquire())
            while len((await c.locks()).pending) != 1:
                await asyncio.sleep(0.005)
            assert w.cancel()
            with pytest.raises(coord.Aborted):
                await t
    asyncio.run(main())


def test_async_broker_killed_while_waiting(broker):
    async def main():
        c, d = broker.aclient(), broker.aclient()
        await c.connect()
        await d.connect()
        holder = c.lock("a")
        await holder.acquire()
        ran = []

        async def waiter():
            async with d.lock("a"):
                ran.append(1)
        t = asyncio.create_task(waiter())
        while len((await c.locks()).pending) != 1:
            await asyncio.sleep(0.005)
        broker.kill()
        with pytest.raises(coord.ConnectionLost):
            await t
        await asyncio.wait_for(holder.lost.wait(), 5)
        assert ran == [] and holder.lost_reason == "disconnected"
        await c.close()
        await d.close()
    asyncio.run(main())


def test_lease_counts_from_the_grant_not_the_request(broker):
    """A lock that waited longer than its lease is not lost at its grant:
    the lease starts when the broker grants it."""
    with broker.client() as c, broker.client() as d:
        holder = c.lock("L")
        holder.acquire()
        w = d.lock("L", lease=0.2)
        t = threading.Thread(target=w.acquire)
        t.start()
        wait_until(lambda: len(c.locks().pending) == 1, what="the waiter")
        time.sleep(0.3)                 # the waiter's wait outlasts its lease
        holder.release()
        t.join(5)
        assert w.held and not w.lost.wait(0.5)
        w.release()


def test_async_cancel_while_releasing_is_not_swallowed(broker):
    """A task cancelled while it releases a lock with a lease (or resigns
    a leadership) raises CancelledError, and the lock is still released.
    release() used to wait for the lease's renewal task to end and
    swallow every exception of that wait, the task's own cancellation
    too: the cancelled task went on as if never cancelled (here: into a
    30 s sleep; under asyncio.timeout() or a TaskGroup, a hang)."""
    async def main():
        async with broker.aclient() as c, broker.aclient() as d:
            for kind in ("lock", "leader"):
                if kind == "lock":
                    h = c.lock("a", lease=5)
                    assert await h.acquire()
                    end = h.release
                else:
                    h = c.leader("ws", lease=5)
                    assert await h.campaign()
                    end = h.resign

                async def ender():
                    await end()
                    await asyncio.sleep(30)         # not reached once cancelled
                t = asyncio.create_task(ender())
                await asyncio.sleep(0)              # t runs into end() and waits there
                t.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await asyncio.wait_for(t, 5)
                # the release (resignation) was sent all the same
                await await_until(lambda: nothing_held(d), what=f"{kind} released")
                again = await (d.try_lock("a") if kind == "lock" else d.try_leader("ws"))
                assert again is not None
                await (again.release() if kind == "lock" else again.resign())
    asyncio.run(main())


def test_async_cancel_with_a_frozen_broker_does_not_hang(broker):
    """asyncio.timeout() around an acquire while the broker does not answer
    (stopped): the timeout takes effect within request_timeout.  The
    cancelled acquire used to wait for the outcome of its cancel with no
    deadline, so the task hung for as long as the broker was frozen
    (wait_for could not break it either: it waits for the task it
    cancels).  A grant that comes once the broker answers again is
    released."""
    async def main():
        async with broker.aclient(request_timeout=0.5) as c, broker.aclient() as d:
            await c.ping()

            async def acquire():
                async with asyncio.timeout(0.2):
                    await c.lock("a").acquire()
            with broker.frozen():
                t = asyncio.create_task(acquire())
                done, _ = await asyncio.wait({t}, timeout=5)
                assert t in done, "the cancelled acquire hangs while the broker is frozen"
                with pytest.raises(TimeoutError):
                    t.result()
            # the broker grants the acquire it reads first (the name is
            # free), then the cancel, too late: the grant is handed back
            await await_until(lambda: nothing_held(d, pending=True), what="the grant handed back")
            async with c.lock("a", timeout=5):
                pass
    asyncio.run(main())


def test_async_acquire_timeout_covers_a_stuck_write(broker):
    """A lock's wait is bounded (its ``timeout`` plus ``request_timeout``,
    for a broker that stopped answering) including the wait for the
    transport to take the request: with the broker frozen and more than
    the transport's high mark written behind it (other tasks'
    publishes), ``acquire`` waited for the transport to drain with no
    deadline, for as long as the broker was stopped.  It raises
    ``Timeout`` at its bound; nothing is left at the broker once it runs
    again."""
    async def main():
        async with broker.aclient(request_timeout=0.5) as c, broker.aclient() as d:
            await c.ping()
            with broker.frozen():
                pubs = [asyncio.create_task(c.publish("news", b"x" * 32768)) for _ in range(40)]
                # the writes piled up behind the broker
                await await_until(lambda: c._conn._paused, what="the transport to pause")
                start = time.monotonic()
                t = asyncio.create_task(c.lock("a", timeout=0.3).acquire())
                done, _ = await asyncio.wait({t}, timeout=5)
                assert t in done, "acquire(timeout=0.3) waits for a stuck write"
                with pytest.raises(coord.Timeout):
                    t.result()
                assert time.monotonic() - start < 0.3 + 0.5 + 0.7
            await asyncio.gather(*pubs, return_exceptions=True)   # Timeout, as the acquire
            await await_until(lambda: nothing_held(d, pending=True), what="nothing left at the broker")
    asyncio.run(main())
