"""A failed connect says why, at once, blocking and asyncio: a refused
hello (TOO_LARGE), a full broker (LIMIT, whose refusal may come after our
first write failed), a silent server (the client's own hello timeout, not
twice it), a broker that drops us before answering hello (retried within
connect_timeout, as documented).
"""
import asyncio
import signal
import threading
import time

import pytest

import coord
from conftest import Broker, await_until, wait_until
from fakebroker import FakeBroker


def elapsed(fn):
    t = time.monotonic()
    try:
        fn()
    except BaseException as e:
        return time.monotonic() - t, e
    return time.monotonic() - t, None


def test_a_refused_hello_fails_at_once(broker):
    # the blocking client used to take 5.00 s: it joined its reader thread
    # while holding the lock the reader needed to finish
    long_name = "x" * 300
    dt, e = elapsed(lambda: broker.client(client=long_name))
    assert isinstance(e, coord.Refused) and isinstance(e, coord.ConnectError), e
    assert e.code == "TOO_LARGE" and isinstance(e.reason, coord.TooLarge)
    assert str(e).startswith("TOO_LARGE: client (256)")
    assert dt < 1.0, f"{dt:.2f} s"
    dt, e = elapsed(lambda: asyncio.run(broker.aclient(client=long_name).connect()))
    assert isinstance(e, coord.Refused) and e.code == "TOO_LARGE" and dt < 1.0


def test_a_full_broker_says_limit(tmp_path):
    b = Broker(str(tmp_path), ["--max-conns", "1"])
    try:
        with b.client() as first:
            first.ping()
            for _ in range(5):      # the refusal races our hello's write
                dt, e = elapsed(lambda: b.client())
                assert isinstance(e, coord.Refused), repr(e)
                assert str(e) == "LIMIT: too many connections" and isinstance(e.reason,
                                                                             coord.Limit)
                assert dt < 1.0
                dt, e = elapsed(lambda: asyncio.run(b.aclient().connect()))
                assert isinstance(e, coord.Refused), repr(e)
                assert str(e) == "LIMIT: too many connections" and dt < 1.0
            first.ping()
        # once the first is gone, the slot is free again: as soon as the
        # broker has seen the close (it reads it on its own loop, so a connect
        # right after our close may still be refused as full)
        def connects():
            try:
                return b.client()
            except coord.Refused as e:
                assert str(e) == "LIMIT: too many connections"
                return None
        with wait_until(connects, what="the freed slot") as again:
            again.ping()
    finally:
        b.stop()


def never_answers(peer):
    peer.request()
    peer.request()          # until the client closes


def test_a_silent_server_times_out_once():
    # the client's own hello timeout (5 s, the broker's handshake time);
    # the blocking client used to wait twice that
    with FakeBroker(never_answers) as fb:
        dt, e = elapsed(lambda: coord.Client(fb.socket, autostart=False))
        assert isinstance(e, coord.ConnectError)
        assert "did not answer hello: timed out after 5 s" in str(e)
        assert 4.5 < dt < 6.5, f"{dt:.2f} s"


def drops_the_first():
    """The first connection reads the hello and closes (a broker dying
    with us in its backlog); later ones are answered."""
    count = [0]

    def h(peer):
        count[0] += 1
        if count[0] == 1:
            peer.request()
            peer.close()
            return
        peer.hello()
        peer.serve()
    return h


def test_a_dropped_hello_is_retried_within_connect_timeout():
    with FakeBroker(drops_the_first()) as fb:
        dt, e = elapsed(lambda: coord.Client(fb.socket, autostart=False).close())
        assert e is None, repr(e)
        assert dt < 1.0 and fb.accepted == 2
    with FakeBroker(drops_the_first()) as fb:
        async def main():
            c = await coord.aio.connect(fb.socket, autostart=False)
            await c.ping()
            await c.close()
        dt, e = elapsed(lambda: asyncio.run(main()))
        assert e is None and dt < 1.0 and fb.accepted == 2


def test_reconnect_after_a_restart(broker):
    # a restart: the next call connects again, without a 5 s stall
    with broker.client(reconnect=True) as c:
        c.ping()
        broker.kill()
        wait_until(lambda: not c.connected, what="the client saw the close")
        broker.start()
        dt, e = elapsed(c.ping)
        assert e is None, repr(e)
        assert dt < 1.5, f"{dt:.2f} s"


def test_async_close_while_connecting(broker):
    """close() while another task's call is still connecting (hello not
    answered yet): the call fails, and the connection it was opening is
    closed, not kept as the closed client's live connection (it was: the
    call then acquired its lock through the closed client, which stayed
    connected and usable)."""
    async def main():
        c = broker.aclient()
        async with broker.aclient() as d:
            with broker.frozen():                           # hello waits
                t = asyncio.create_task(c.lock("a").acquire())
                await await_until(lambda: c._connecting is not None and c._connecting.locked(),
                                  what="the task to start connecting")
                await c.close()
            with pytest.raises(coord.ConnectionLost):
                await asyncio.wait_for(t, 10)
            assert not c.connected
            with pytest.raises(coord.ConnectionLost):
                await c.ping()
            assert (await d.locks()).held == []
    asyncio.run(main())


def test_async_connect_cancelled_before_hello_closes_the_socket(broker):
    """A first call cancelled (asyncio.timeout) while its hello waits on a
    broker that does not answer yet: the half-open connection is closed.
    It used to stay open, read by the loop, for as long as the loop ran
    (close() did not know it): one broker connection leaked per cancelled
    connect."""
    async def main():
        async with broker.aclient() as d:
            assert (await d.stats())["connections"] == 1
            c = broker.aclient()
            with broker.frozen():                           # hello waits
                with pytest.raises(TimeoutError):
                    async with asyncio.timeout(0.2):
                        await c.ping()
            assert not c.connected

            async def one_connection():
                return (await d.stats())["connections"] == 1
            await await_until(one_connection, what="one connection: the cancelled one closed")
            assert await c.ping() >= 0          # the next call connects
            await c.close()
    asyncio.run(main())


def test_a_connect_interrupted_before_hello_closes_the_socket(broker):
    """Ctrl-C (SIGINT) while the blocking client waits for hello from a
    broker that does not answer yet: KeyboardInterrupt, and the half-open
    connection is closed.  It used to stay open with its reader thread
    (the broker counted it until the process exited)."""
    with broker.client() as d:
        assert d.stats()["connections"] == 1
        main = threading.main_thread().ident
        with broker.frozen():                               # hello waits
            t = threading.Timer(0.3, signal.pthread_kill, (main, signal.SIGINT))
            t.start()
            try:
                with pytest.raises(KeyboardInterrupt):
                    broker.client()
            finally:
                t.join()
        wait_until(lambda: d.stats()["connections"] == 1,
                   what="the interrupted connection to close")
