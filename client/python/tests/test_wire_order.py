"""Replies and events are handled in wire order, blocking and asyncio.

A fake broker writes a reply and the event about what it granted in ONE
send, so they reach the client in one read every run: the grant must
register the lock (term, flight, watch) before the event is looked up,
and an event written before a reply must be handled before the caller of
that request wakes.  Then the same through a real broker: a steal right
behind the grant (both queued for the holder in one loop turn), a lease
of 1 ms.
"""
import asyncio
import socket
import threading
import time

import pytest

import coord
from conftest import wait_until
from fakebroker import FakeBroker, frame


def grant_then(event_for):
    """A handler: hello, then every lock.acquire / leader.campaign /
    flight.join is answered by its reply and event_for(op, reply) in one
    write."""
    replies = {
        "lock.acquire": dict(granted=True, lock=5, token=9),
        "leader.campaign": dict(granted=True, generation=3, lease_ms=30000, mode="active"),
        "flight.join": dict(role="owner", flight=4, fence=4),
    }

    def handler(peer):
        peer.hello()

        def answer(op):
            return lambda req: [peer.reply(req, **replies[op]), event_for(op, req)]
        peer.serve({op: answer(op) for op in replies})
    return handler


EVENTS = {
    "lock.acquire": {"ev": "lock.lost", "lock": 5, "reason": "stolen"},
    "leader.campaign": {"ev": "leader.lost", "workstream": "ws", "generation": 3,
                        "reason": "stolen", "incident": "INC-1"},
    "flight.join": {"ev": "flight.abort", "flight": 4, "reason": "deadline", "fence": 4},
}


def test_grant_then_loss_in_one_read_sync():
    with FakeBroker(grant_then(lambda op, req: EVENTS[op])) as fb:
        with coord.Client(fb.socket, autostart=False) as c:
            lk = c.lock("a")
            assert lk.acquire()
            assert lk.lost.is_set() and lk.lost_reason == "stolen" and not lk.held
            with pytest.raises(coord.LockLost, match="stolen"):
                lk.check()
            with pytest.raises(coord.LockLost, match="stolen"):
                with c.lock("a"):
                    pass                      # the holder hears of the loss at exit
            lead = c.leader("ws")
            assert lead.campaign()
            assert lead.lost.is_set() and lead.state == coord.RELEASED
            assert lead.lost_reason == "stolen" and lead.lost_incident == "INC-1"
            with pytest.raises(coord.Fenced):
                lead.commit("op1")
            f = c.flight.join("k")
            assert f.role == "owner" and f.aborted.is_set() and f.abort_reason == "deadline"


def test_grant_then_loss_in_one_read_asyncio():
    async def main(sock):
        async with coord.aio.Client(sock, autostart=False) as c:
            lk = c.lock("a")
            assert await lk.acquire()
            assert lk.lost.is_set() and lk.lost_reason == "stolen" and not lk.held
            with pytest.raises(coord.LockLost, match="stolen"):
                async with c.lock("a"):
                    pass
            lead = c.leader("ws")
            assert await lead.campaign()
            assert lead.lost.is_set() and lead.state == coord.RELEASED
            f = await c.flight.join("k")
            assert f.aborted.is_set() and f.abort_reason == "deadline"
    with FakeBroker(grant_then(lambda op, req: EVENTS[op])) as fb:
        asyncio.run(main(fb.socket))


DRAIN_MODE = {
    "leader.campaign": [{"ev": "leader.drain", "workstream": "ws", "generation": 3,
                         "reason": "max_hold"},
                        {"ev": "leader.mode", "workstream": "ws", "generation": 3,
                         "mode": "shadow"}],
}


def drain_then_mode(op, req):
    return b"".join(frame(e) for e in DRAIN_MODE[op])


def test_grant_then_drain_and_mode_in_one_read():
    with FakeBroker(grant_then(drain_then_mode)) as fb:
        with coord.Client(fb.socket, autostart=False) as c:
            lead = c.leader("ws")
            assert lead.campaign()
            assert lead.state == coord.DRAINING and lead.drain_reason == "max_hold"
            assert lead.drain_requested.is_set() and lead.mode == "shadow"

        async def main():
            async with coord.aio.Client(fb.socket, autostart=False) as c:
                lead = c.leader("ws")
                assert await lead.campaign()
                assert lead.state == coord.DRAINING and lead.mode == "shadow"
        asyncio.run(main())


def stale_then_updated(peer):
    peer.hello()
    peer.serve({"flight.join": lambda req: [
        peer.reply(req, role="result", result=b"old", stale=True, revalidating=True,
                   fence=2, age_ms=5, source="record"),
        {"ev": "flight.updated", "key": "k", "status": "completed", "fence": 3}]})


def test_stale_result_then_updated_in_one_read():
    with FakeBroker(stale_then_updated) as fb:
        with coord.Client(fb.socket, autostart=False) as c:
            f = c.flight.join("k", stale=60, notify=True)
            assert f.updated is not None and f.updated.done()
            assert f.updated.result().status == "completed"

        async def main():
            async with coord.aio.Client(fb.socket, autostart=False) as c:
                f = await c.flight.join("k", stale=60, notify=True)
                assert f.updated.done() and f.updated.result().fence == 3
        asyncio.run(main())


def lost_then_ping_reply(peer, before_send=None):
    """Grants locks; answers each ping with the lost event of the lock
    granted last, then the ping's reply, in one write (before_send() runs
    first)."""
    peer.hello()
    last = [0]

    def acquire(req):
        last[0] += 1
        return peer.reply(req, granted=True, lock=last[0], token=last[0])

    def ping(req):
        if before_send is not None:
            before_send()
        return [{"ev": "lock.lost", "lock": last[0], "reason": "stolen"}, peer.reply(req)]
    peer.serve({"lock.acquire": acquire, "ping": ping})


def test_event_before_reply_is_handled_before_the_caller_wakes():
    # The blocking client used to complete every reply of a read before it
    # handled the read's events: a caller woken by the ping could still see
    # the lock held, though the broker said it was lost before answering.
    # The reader is made slow to handle events: once the ping is in, and
    # before the fake answers, another thread takes the client's state
    # lock (which dispatching an event needs) for 0.3 s.  In wire order the
    # ping cannot return before the loss is handled, however slow; out of
    # order it returns at once with the lock still "held".
    client = []

    def hold_state_lock():
        held = threading.Event()

        def hold():
            with client[0]._mu:
                held.set()
                time.sleep(0.3)
        threading.Thread(target=hold, daemon=True).start()
        held.wait()
    with FakeBroker(lambda p: lost_then_ping_reply(p, hold_state_lock)) as fb:
        with coord.Client(fb.socket, autostart=False) as c:
            client.append(c)
            for i in range(3):
                lk = c.lock("a")
                assert lk.acquire()
                c.ping()
                assert lk.lost.is_set(), f"round {i}: ping returned before lock.lost"

    async def main(sock):
        async with coord.aio.Client(sock, autostart=False) as c:
            for _ in range(20):
                lk = c.lock("a")
                assert await lk.acquire()
                await c.ping()
                assert lk.lost.is_set()
    with FakeBroker(lost_then_ping_reply) as fb:
        asyncio.run(main(fb.socket))


# ---- through a real broker ----

class RawConn:
    """A connection written by hand, to pipeline frames in one write."""

    def __init__(self, path):
        from fakebroker import Peer
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.connect(path)
        self.p = Peer(self.s)
        self.rid = 0
        assert self.call({"op": "hello", "proto": 1, "client": "raw"})["ok"]

    def frame(self, msg):
        self.rid += 1
        return frame(dict(msg, rid=self.rid))

    def call(self, msg):
        self.s.sendall(self.frame(msg))
        while True:
            r = self.p.request()
            if r.get("rid") == self.rid:
                return r

    def close(self):
        self.s.close()


def test_steal_right_behind_the_grant_sync(broker):
    # The other connection releases and steals in ONE write: the broker
    # grants the waiter and takes the lock back in the same loop turn, so
    # the grant and the lock.lost leave for the waiter together.
    raw = RawConn(broker.socket)
    try:
        lid = raw.call({"op": "lock.acquire", "name": "x"})["lock"]
        with broker.client() as c:
            lk = c.lock("x")
            got = []
            t = threading.Thread(target=lambda: got.append(lk.acquire()))
            t.start()
            wait_until(lambda: len(c.locks().pending) == 1, what="the waiter queued")
            raw.s.sendall(raw.frame({"op": "lock.release", "lock": lid}) +
                          raw.frame({"op": "lock.acquire", "name": "x", "steal": True}))
            t.join(10)
            assert got == [True]
            assert lk.lost.wait(5) and lk.lost_reason == "stolen"
            with pytest.raises(coord.LockLost):
                lk.check()
    finally:
        raw.close()


def test_steal_right_behind_the_grant_asyncio(broker):
    raw = RawConn(broker.socket)

    async def main():
        lid = raw.call({"op": "lock.acquire", "name": "x"})["lock"]
        async with broker.aclient() as c:
            lk = c.lock("x")
            t = asyncio.ensure_future(lk.acquire())
            while len((await c.locks()).pending) != 1:
                await asyncio.sleep(0.005)
            raw.s.sendall(raw.frame({"op": "lock.release", "lock": lid}) +
                          raw.frame({"op": "lock.acquire", "name": "x", "steal": True}))
            assert await asyncio.wait_for(t, 10)
            await asyncio.wait_for(lk.lost.wait(), 5)
            assert lk.lost_reason == "stolen"
    try:
        asyncio.run(main())
    finally:
        raw.close()


def test_lease_of_one_ms_is_lost_for_the_holder(broker):
    with broker.client() as c:
        lk = c.lock("x", lease=0.001)
        assert lk.acquire()
        assert lk.lost.wait(5) and lk.lost_reason == "expired"

    async def main():
        async with broker.aclient() as c:
            lk = c.lock("x", lease=0.001)
            assert await lk.acquire()
            await asyncio.wait_for(lk.lost.wait(), 5)
            assert lk.lost_reason == "expired"
    asyncio.run(main())
