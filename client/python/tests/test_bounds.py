"""What a broker (or whatever answers on the socket) can make the client
hold or wait for is bounded, blocking and asyncio: an announced max_frame
above the protocol's 64 MiB, frames nested past the protocol's depth,
garbage, an event flood nobody reads, silence after hello; and the
broker's text is escaped before it goes into an exception.
"""
import asyncio
import os
import struct
import time

import pytest

import coord
from coord import core
from fakebroker import FakeBroker, frame


def aconnect(sock, **kw):
    return coord.aio.connect(sock, autostart=False, **kw)


def run(coro):
    return asyncio.run(coro)


# ---- max_frame ----

def huge_max_frame(peer):
    peer.hello(max_frame=(1 << 32) - 1)
    req = peer.request()
    if req is None:
        return
    # a client that took the hello would now be fed a 3 GiB frame
    try:
        peer.sock.sendall(struct.pack(">I", 3 << 30) + b"\0" * (8 << 20))
    except OSError:
        pass


def test_max_frame_above_the_protocol_cap_is_refused():
    with FakeBroker(huge_max_frame) as fb:
        t = time.monotonic()
        with pytest.raises(coord.ProtocolError, match="max_frame 4294967295.*64 MiB"):
            coord.Client(fb.socket, autostart=False)
        with pytest.raises(coord.ProtocolError, match="max_frame 4294967295"):
            run(aconnect(fb.socket))
        assert time.monotonic() - t < 2
        assert fb.accepted == 2


def test_max_frame_at_the_cap_is_taken():
    def h(peer):
        peer.hello(max_frame=core.MAX_FRAME_CAP)
        peer.serve()
    with FakeBroker(h) as fb:
        with coord.Client(fb.socket, autostart=False) as c:
            assert c.max_frame == 64 << 20
            c.ping()


def long_prefix(peer):
    peer.hello()
    peer.request()
    try:
        peer.sock.sendall(struct.pack(">I", 3 << 30) + b"\0" * (4 << 20))
    except OSError:
        pass


def test_a_length_prefix_past_max_frame_fails_the_call_at_once():
    with FakeBroker(long_prefix) as fb:
        with coord.Client(fb.socket, autostart=False) as c:
            with pytest.raises(coord.ProtocolError, match="frame of 3221225472 bytes"):
                c.ping()

        async def main():
            c = await aconnect(fb.socket)
            with pytest.raises(coord.ProtocolError, match="frame of 3221225472 bytes"):
                await c.ping()
            await c.close()
        run(main())


# ---- nesting and garbage ----

def nested(depth):
    v = 1
    for i in range(depth - 1):
        v = [v] if i % 2 else {"k": v}
    return v


def reply_with(body_for):
    def h(peer):
        peer.hello()
        peer.serve({"ping": lambda req: body_for(peer, req)})
    return h


@pytest.mark.parametrize("depth", [4, 200])
def test_frames_nested_past_the_protocol_limit_are_refused(depth):
    h = reply_with(lambda peer, req: peer.reply(req, x=nested(depth)))
    with FakeBroker(h) as fb:
        with coord.Client(fb.socket, autostart=False) as c:
            with pytest.raises(coord.ProtocolError, match="nested deeper than 3 levels"):
                c.ping()

        async def main():
            c = await aconnect(fb.socket)
            with pytest.raises(coord.ProtocolError, match="nested deeper than 3 levels"):
                await c.ping()
            await c.close()
        run(main())


def test_three_levels_are_taken():
    # reply map -> array -> entry map, as lock.query sends
    h = reply_with(lambda peer, req: peer.reply(req, held=[{"name": "a"}], pending=[]))
    with FakeBroker(h) as fb:
        with coord.Client(fb.socket, autostart=False) as c:
            assert c.call("ping")["held"] == [{"name": "a"}]
    with pytest.raises(coord.ProtocolError):
        core.decode_body(frame({"a": [{"b": [1]}]})[4:])     # 4 levels
    with pytest.raises(coord.ProtocolError):
        core.decode_body(frame({"a": {"b": {"c": {}}}})[4:])
    assert core.decode_body(frame({"a": {"b": {"c": 1}}})[4:]) == {"a": {"b": {"c": 1}}}


def test_garbage_after_hello_fails_the_waiting_call():
    h = reply_with(lambda peer, req: os.urandom(3) + b"\xc1" * 64)
    with FakeBroker(h) as fb:
        with coord.Client(fb.socket, autostart=False) as c:
            with pytest.raises(coord.ProtocolError):
                c.ping()
            assert not c.connected

        async def main():
            c = await aconnect(fb.socket)
            with pytest.raises(coord.ProtocolError):
                await c.ping()
            await c.close()
        run(main())


# ---- the broker's text ----

EVIL = "x\x1b[2J\r\nFAKE LOG LINE\x07\x9b"


def test_control_bytes_in_the_brokers_text_are_escaped():
    h = reply_with(lambda peer, req: {"rid": req["rid"], "ok": False, "code": "BAD\x1b",
                                      "message": EVIL})
    with FakeBroker(h) as fb:
        with coord.Client(fb.socket, autostart=False) as c:
            with pytest.raises(coord.CoordError) as ei:
                c.ping()
            text = str(ei.value)
            assert text == "BAD\\x1b: x\\x1b[2J\\x0d\\x0aFAKE LOG LINE\\x07\\x9b"
            assert ei.value.message == "x\\x1b[2J\\x0d\\x0aFAKE LOG LINE\\x07\\x9b"
    bye = {"rid": 0, "ok": False, "code": "LIMIT", "message": "full\x1b]0;pwned\x07"}

    def refuse(peer):
        peer.send(bye)
        peer.close()
    with FakeBroker(refuse) as fb:
        with pytest.raises(coord.Refused) as ei:
            coord.Client(fb.socket, autostart=False)
        assert str(ei.value) == "LIMIT: full\\x1b]0;pwned\\x07"
        assert isinstance(ei.value.reason, coord.Limit)
        with pytest.raises(coord.Refused) as ei:
            run(aconnect(fb.socket))
        assert str(ei.value) == "LIMIT: full\\x1b]0;pwned\\x07"


def test_another_clients_failure_text_is_escaped_for_followers(broker):
    with broker.client() as owner, broker.client() as follower:
        f = owner.flight.join("k")
        assert f.role == "owner"
        import threading
        got = []

        def follow():
            try:
                follower.once("k", lambda fl: b"never", retries=0)
            except coord.FlightFailed as e:
                got.append(e)
        t = threading.Thread(target=follow)
        t.start()
        from conftest import wait_until
        wait_until(lambda: owner.flight.list()[0].followers == 1, what="the follower")
        f.fail("E\x1b", EVIL)
        t.join(10)
        assert "\x1b" not in str(got[0]) and "\r" not in str(got[0])
        assert "\\x1b[2J\\x0d\\x0aFAKE" in str(got[0])


# ---- event flood ----

def flood(n, data=b"x" * 100):
    """Answers sub.subscribe; on ping: n messages on "ch" (numbered), then
    the reply."""
    def h(peer):
        peer.hello()

        def ping(req):
            evs = b"".join(frame({"ev": "message", "channel": "ch", "conn": 9,
                                  "data": b"%d:" % i + data}) for i in range(n))
            return [evs, peer.reply(req)]
        peer.serve({"ping": ping})
    return h


def test_an_event_flood_nobody_reads_is_bounded_oldest_dropped():
    with FakeBroker(flood(25_000)) as fb:
        with coord.Client(fb.socket, autostart=False) as c:
            sub = c.subscribe("ch").open()
            c.ping()                        # the flood came before its reply
            assert sub.queued == core.DEFAULT_MAX_QUEUED == 10_000
            assert sub.dropped == 15_000
            assert sub.get(0).data.startswith(b"15000:")     # the oldest kept
        with coord.Client(fb.socket, autostart=False, max_queued=10,
                          max_queued_bytes=1 << 30) as c:
            sub = c.subscribe("ch").open()
            c.ping()
            assert (sub.queued, sub.dropped) == (10, 24_990)
            assert [sub.get(0).data.split(b":")[0] for _ in range(10)] == \
                [b"%d" % i for i in range(24_990, 25_000)]
            assert sub.get(0) is None

        async def main():
            c = await aconnect(fb.socket)
            sub = await c.subscribe("ch").open()
            await c.ping()
            assert (sub.queued, sub.dropped) == (10_000, 15_000)
            assert (await sub.get(0)).data.startswith(b"15000:")
            await c.close()
            c = await aconnect(fb.socket, max_queued_bytes=200_000)
            sub = await c.subscribe("ch").open()
            await c.ping()
            assert 0 < sub.queued < 2000 and sub.queued + sub.dropped == 25_000
            await c.close()
        run(main())


def test_queue_limits_are_checked():
    with pytest.raises(ValueError):
        coord.Client("/nonexistent", lazy=True, max_queued=0)
    with pytest.raises(ValueError):
        coord.aio.Client("/nonexistent", max_queued_bytes=-1)
    with pytest.raises(ValueError):
        coord.Client("/nonexistent", lazy=True, request_timeout=0)
    q = core.EventQueue(2, 100)
    q.push("a", 10)
    q.push("closed")                  # a control item: never dropped
    q.push("b", 10)
    q.push("c", 500)                  # over the bytes: only the newest stays
    assert q.dropped == 2 and [q.pop() for _ in range(len(q))] == ["closed", "c"]


# ---- silence after hello ----

def silent_after_hello(peer):
    peer.hello()
    peer.serve({"ping": lambda req: None, "lock.release": lambda req: None,
                "record.get": lambda req: None, "lock.acquire": lambda req: None if
                req.get("timeout_ms") else peer.reply(req, granted=True, lock=1, token=1)})


def test_a_silent_broker_times_requests_out():
    with FakeBroker(silent_after_hello) as fb:
        with coord.Client(fb.socket, autostart=False, request_timeout=0.3) as c:
            lk = c.lock("a")
            assert lk.acquire()
            for fn, op in ((c.ping, "ping"), (lambda: c.records.get("k"), "record.get"),
                           (lk.release, "lock.release")):
                t = time.monotonic()
                with pytest.raises(coord.Timeout, match=f"{op}: no reply from the broker: "
                                                        "timed out after 0.3 s"):
                    fn()
                assert 0.25 < time.monotonic() - t < 1.5
            # a wait by design: its own timeout, then request_timeout more
            t = time.monotonic()
            with pytest.raises(coord.Timeout, match="timed out after 0.5 s"):
                c.lock("b", timeout=0.2).acquire()
            assert 0.45 < time.monotonic() - t < 2
            assert c.connected

        async def main():
            c = await aconnect(fb.socket, request_timeout=0.3)
            t = time.monotonic()
            with pytest.raises(coord.Timeout, match="ping: no reply from the broker"):
                await c.ping()
            with pytest.raises(TimeoutError):
                await c.records.get("k")
            assert 0.5 < time.monotonic() - t < 3
            with pytest.raises(coord.Timeout, match="timed out after 0.5 s"):
                await c.lock("b", timeout=0.2).acquire()
            assert c.connected
            await c.close()
        run(main())


def late_reply(peer):
    """Answers the first ping 0.5 s late, the others at once."""
    peer.hello()
    first = [True]

    def ping(req):
        if first[0]:
            first[0] = False
            time.sleep(0.5)
        return peer.reply(req)
    peer.serve({"ping": ping})


def test_a_late_reply_after_a_timeout_does_not_break_the_connection():
    with FakeBroker(late_reply) as fb:
        with coord.Client(fb.socket, autostart=False, request_timeout=0.2) as c:
            with pytest.raises(coord.Timeout):
                c.ping()
            c.request_timeout = 5
            c.ping()                          # the late reply comes in before its own
            assert c.connected
        with coord.Client(fb.socket, autostart=False, request_timeout=None) as c:
            c.ping()                          # no deadline: the 0.5 s wait is fine


def test_a_wait_in_the_callers_terms(broker):
    with broker.client() as c, broker.client() as d:
        with c.lock("a"):
            with pytest.raises(coord.Timeout, match=r"lock 'a' not granted: timed out after 0.5 s"):
                d.lock("a", timeout=0.5).acquire()
        with c.leader("ws"):
            with pytest.raises(coord.Timeout, match=r"'ws': not elected: timed out after 0.25 s"):
                d.leader("ws", timeout=0.25).campaign()
        f = c.flight.join("k")
        with pytest.raises(coord.Timeout, match=r"flight 'k': no result: timed out after 0.2 s"):
            d.flight.join("k", wait=0.2)
        f.complete(b"x")

    async def main():
        async with broker.aclient() as c, broker.aclient() as d:
            async with c.lock("a"):
                with pytest.raises(coord.Timeout, match=r"not granted: timed out after 0.3 s"):
                    await d.lock("a", timeout=0.3).acquire()
    run(main())


def test_flat_replies_keep_their_values_and_non_utf8_names_come_back_as_bytes():
    # decode_body keeps a flat map of ASCII str and scalars as unpacked;
    # any other str still goes through the fix-up: a str that is not
    # UTF-8 (a C client's name) comes back as the bytes it is
    flat = {"rid": 3, "ok": True, "granted": False, "lock": 1 << 40, "name": "a/b",
            "f": 0.5, "none": None, "bin": b"\x00\xff"}
    assert core.decode_body(frame(flat)[4:]) == flat
    assert core.decode_body(frame({"rid": 1, "name": "é"})[4:]) == {"rid": 1, "name": "é"}
    raw = b"\x82\xa3rid\x01\xa4name\xa2\xff\xfe"          # name: str holding 0xff 0xfe
    assert core.decode_body(raw) == {"rid": 1, "name": b"\xff\xfe"}
    raw = b"\x82\xa4name\xa2\xff\xfe\xa3rid\x01"          # the same, the bad str first
    assert core.decode_body(raw) == {"name": b"\xff\xfe", "rid": 1}
