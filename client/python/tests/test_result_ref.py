"""Results by reference, the client's edges, against a scripted broker
(fakebroker.py: what a real broker does only when it breaks): a result
that comes as a descriptor (blocking and asyncio: a ResultRef the caller
owns, its bytes, its mmap, its own offset), stale and record forms, a
frame that declares a descriptor none came with, too many descriptors
unclaimed, and what the owner sends: one sendmsg with a sealed memfd on
the frame's first byte (explicit, automatic past max_frame, complete_fd),
and a clear local error for a broker that takes no descriptors.  The
same through a real broker: test_result_ref_broker.py.
"""
import asyncio
import fcntl
import gc
import os
import threading

import pytest

import coord
from fakebroker import FakeBroker

PAYLOAD = bytes(range(256)) * 64          # 16 KiB


def hello_fds(p, **extra):
    req = p.hello(fds=True, max_ref_bytes=1 << 30, **extra)
    assert req.get("fds") is True, req         # the client says it reads descriptors
    return req


def answers_join_by_ref(payload=PAYLOAD, extra=None):
    """A broker that answers every flight.join with a result by reference
    (a sealed memfd of payload) and record.get likewise."""
    def handler(p):
        hello_fds(p)
        while True:
            req = p.request()
            if req is None:
                return
            if req["op"] == "flight.join":
                reply = p.reply(req, role="result", fence=3, age_ms=5, source="live",
                                result_fd=len(payload), **(extra or {}))
            elif req["op"] == "record.get":
                reply = p.reply(req, status="completed", fence=3, created_ms=1,
                                expires_ms=2, result_fd=len(payload))
            else:
                p.send(p.reply(req))
                continue
            fd = coord.sealed_memfd(payload)
            try:
                p.send_fd(reply, fd)
            finally:
                os.close(fd)      # before the next request is answered
    return handler


def fd_count():
    return len(os.listdir("/proc/self/fd"))


def settled(c):
    """The descriptors open here once the scripted broker closed its own
    copies (it answers the ping after it did); garbage of earlier tests
    (unclosed ResultRefs) collected first."""
    gc.collect()
    c.ping()
    return fd_count()


def test_a_result_by_reference_is_a_resultref_the_caller_owns():
    with FakeBroker(answers_join_by_ref()) as fb:
        with coord.Client(fb.socket, autostart=False) as c:
            before = settled(c)
            f = c.flight.join("k")
            assert f.role == "result" and f.result_ref is not None
            ref = f.result_ref
            assert ref.size == len(PAYLOAD) and not ref.closed
            assert fcntl.fcntl(ref.fileno(), fcntl.F_GETFD) & fcntl.FD_CLOEXEC
            assert os.fstat(ref.fileno()).st_size == len(PAYLOAD)
            assert ref.read(10) == PAYLOAD[:10]          # its own offset
            assert ref.value() == PAYLOAD                # from 0, offset untouched
            assert ref.read() == PAYLOAD[10:]
            mm = ref.mmap()
            assert mm[:] == PAYLOAD
            assert f.result == PAYLOAD                   # read on first use
            with ref:
                pass
            assert ref.closed
            assert mm[100:104] == PAYLOAD[100:104]       # the mapping outlives it
            mm.close()
            assert settled(c) == before                  # nothing leaked
            r = c.records.get("k")
            assert r.by_ref and r.result == PAYLOAD
            fd = r.result_ref.detach()                   # now the caller's
            assert r.result_ref.closed and os.pread(fd, 4, 0) == PAYLOAD[:4]
            os.close(fd)
            assert settled(c) == before
            # once returns bytes and closes the descriptor
            assert c.once("k", lambda f: b"never") == PAYLOAD
            assert settled(c) == before


def test_a_stale_result_by_reference():
    with FakeBroker(answers_join_by_ref(extra=dict(stale=True, revalidating=True))) as fb:
        with coord.Client(fb.socket, autostart=False) as c:
            f = c.flight.join("k", max_age=1, stale=10)
            assert f.stale is not None and f.stale.result_ref is f.result_ref
            assert f.stale.result == PAYLOAD
            f.result_ref.close()

    def owner_of_revalidation(p):
        hello_fds(p)
        req = p.request()
        fd = coord.sealed_memfd(b"old bytes")
        p.send_fd(p.reply(req, role="owner", flight=9, fence=4,
                          stale=dict(result_fd=9, age_ms=1500, fence=3)), fd)
        os.close(fd)
        p.serve()

    with FakeBroker(owner_of_revalidation) as fb:
        with coord.Client(fb.socket, autostart=False) as c:
            f = c.flight.join("k", max_age=1, stale=10)
            assert f.role == "owner" and f.stale.by_ref and f.stale.result == b"old bytes"
            assert f.stale.age == 1.5
            f.stale.result_ref.close()


def test_asyncio_gets_results_by_reference():
    async def main(fb):
        async with coord.aio.Client(fb.socket, autostart=False) as c:
            gc.collect()
            await c.ping()
            before = fd_count()
            f = await c.flight.join("k")
            with f.result_ref as ref:
                assert ref.size == len(PAYLOAD) and ref.value() == PAYLOAD
            assert (await c.records.get("k")).result == PAYLOAD
            async def never(f):
                return b"never"
            assert await c.once("k", never) == PAYLOAD
            gc.collect()                  # the record's ref, unclosed: closed by GC
            await c.ping()
            assert fd_count() == before

    with FakeBroker(answers_join_by_ref()) as fb:
        asyncio.run(main(fb))


def broken_stream(send):
    def handler(p):
        hello_fds(p)
        req = p.request()
        send(p, req)
        p.request()                       # until the client closes
    return handler


def no_fd(p, req):
    p.send(p.reply(req, role="result", fence=1, source="live", result_fd=5))


def too_many(p, req):
    fds = [coord.sealed_memfd(b"x") for _ in range(5)]
    p.send_fd(p.reply(req, role="result", fence=1, source="live", result=b"inline"), *fds)
    for fd in fds:
        os.close(fd)


@pytest.mark.parametrize("send,text", [(no_fd, "none came"), (too_many, "5 descriptors")])
def test_a_broker_that_breaks_the_descriptor_rules_is_a_protocol_error(send, text):
    gc.collect()
    before = fd_count()
    with FakeBroker(broken_stream(send)) as fb:
        with coord.Client(fb.socket, autostart=False) as c:
            with pytest.raises(coord.ProtocolError, match=text):
                c.flight.join("k")

        async def main():
            async with coord.aio.Client(fb.socket, autostart=False) as c:
                with pytest.raises(coord.ProtocolError, match=text):
                    await c.flight.join("k")
        asyncio.run(main())
    # the fake's threads are joined: the queued descriptors were closed
    assert fd_count() == before


class OwnerSide:
    """A broker that makes every joiner the owner and records what each
    flight.complete brought: its fields, and the bytes, seals and size of
    the descriptor that came with it (read with recvmsg by the peer)."""

    def __init__(self, fds=True, max_frame=1 << 20):
        self.got = []
        self.fds = fds
        self.max_frame = max_frame
        self.done = threading.Event()

    def __call__(self, p):
        if self.fds:
            hello_fds(p, max_frame=self.max_frame)
        else:
            p.hello(max_frame=self.max_frame)
        while True:
            req = p.request()
            if req is None:
                return
            if req["op"] == "flight.join":
                p.send(p.reply(req, role="owner", flight=1, fence=1))
                continue
            if req["op"] == "flight.complete":
                desc = None
                if p.fds:
                    fd = p.fds.pop(0)
                    desc = dict(size=os.fstat(fd).st_size,
                                seals=fcntl.fcntl(fd, fcntl.F_GET_SEALS),
                                bytes=os.pread(fd, os.fstat(fd).st_size, 0))
                    os.close(fd)
                self.got.append((req, desc))
                p.send(p.reply(req, delivered=0))
                continue
            p.send(p.reply(req))


SEALED = fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW


def test_the_owner_completes_by_reference():
    side = OwnerSide(max_frame=64 * 1024)
    big = os.urandom(200 * 1024)             # over max_frame: by reference by itself
    with FakeBroker(side) as fb:
        with coord.Client(fb.socket, autostart=False) as c:
            c.flight.join("a").complete(b"small", keep=5)
            c.flight.join("b").complete(big, keep=5)
            c.flight.join("c").complete(b"tiny", by_ref=True)
            c.flight.join("d").complete(b"x" * 100, by_ref=False)
            fd = coord.sealed_memfd(b"from a memfd")
            before = settled(c)
            c.flight.join("e").complete_fd(fd)
            assert settled(c) == before          # fd stays ours, nothing else left open
            os.close(fd)
            assert c.once("f", lambda f: big) == big
    (a, da), (b, db), (cc, dc), (d, dd), (e, de), (f, df) = side.got
    assert a["result"] == b"small" and "result_fd" not in a and da is None
    assert b["result_fd"] == len(big) and "result" not in b and b["keep_ms"] == 5000
    assert db["bytes"] == big and db["seals"] & SEALED == SEALED
    assert cc["result_fd"] == 4 and dc["bytes"] == b"tiny"
    assert d["result"] == b"x" * 100 and dd is None
    assert e["result_fd"] == 12 and de["bytes"] == b"from a memfd"
    assert f["result_fd"] == len(big) and df["bytes"] == big


def test_asyncio_owner_completes_by_reference():
    side = OwnerSide(max_frame=64 * 1024)
    big = os.urandom(300 * 1024)

    async def main(fb):
        async with coord.aio.Client(fb.socket, autostart=False) as c:
            await (await c.flight.join("a")).complete(big)
            fd = coord.sealed_memfd(b"fd bytes")
            await (await c.flight.join("b")).complete_fd(fd, keep=1)
            os.close(fd)
            await (await c.flight.join("c")).complete(b"inline")
            async def work(f):
                return big
            assert await c.once("d", work) == big

    with FakeBroker(side) as fb:
        asyncio.run(main(fb))
    (a, da), (b, db), (cc, dc), (d, dd) = side.got
    assert a["result_fd"] == len(big) and da["bytes"] == big and da["seals"] & SEALED == SEALED
    assert b["result_fd"] == 8 and db["bytes"] == b"fd bytes" and b["keep_ms"] == 1000
    assert cc["result"] == b"inline" and dc is None
    assert dd["bytes"] == big


def test_a_broker_without_descriptors_gets_none():
    side = OwnerSide(fds=False, max_frame=64 * 1024)
    with FakeBroker(side) as fb:
        with coord.Client(fb.socket, autostart=False) as c:
            f = c.flight.join("a")
            with pytest.raises(coord.InvalidOptions, match="no fds"):
                f.complete(b"x", by_ref=True)
            fd = coord.sealed_memfd(b"x")
            with pytest.raises(coord.InvalidOptions, match="no fds"):
                c.flight.join("b").complete_fd(fd)
            os.close(fd)
            c.flight.join("c").complete(b"y" * (100 * 1024))   # inline: the broker decides
    assert [r.get("result_fd") for r, _ in side.got] == [None]
    assert side.got[0][0]["result"] == b"y" * (100 * 1024)
