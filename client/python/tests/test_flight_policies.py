"""Single-flight's policies through the real broker: stale-while-revalidate
(the owner sees the stale value, callers served it at once, flight.updated
as a future and a callback), backoff (RetryAfter → Backoff), the kill
switch, fallback="run", and stats().latency; blocking and asyncio."""
import asyncio
import os
import threading
import time

import pytest

import coord
from conftest import wait_until

FRESH = 0.05          # max_age of the stale tests: a record is stale once older


def make_stale(c, key, value=b"v1", **kw):
    """A record of key that is stale now (older than FRESH, within 30 s)."""
    r = c.once(key, lambda f: value, keep=FRESH, stale=30, **kw)
    assert r == value and r.source == "owner"
    rec = c.records.get(key)
    assert rec is not None and rec.expires - rec.created >= 30   # stored keep + stale
    # time has to pass here (nothing to await): poll the record's age
    wait_until(lambda: time.time() - rec.created > FRESH * 2, what="the record to be stale")
    return rec


def test_stale_while_revalidate(broker):
    with broker.client() as a, broker.client() as b, broker.client() as d:
        make_stale(a, "cfg")
        gate, seen = threading.Event(), []

        def revalidate(f):
            seen.append((f.role, f.stale))
            gate.wait(10)
            return b"v2"
        out = []
        t = threading.Thread(target=lambda: out.append(
            a.once("cfg", revalidate, keep=FRESH, stale=30)))
        t.start()
        wait_until(lambda: a.flight.list(), what="the revalidation")
        # a caller inside the stale window gets the stale value at once
        got = []
        r = b.once("cfg", lambda f: pytest.fail("ran"), keep=FRESH, stale=30,
                   notify=lambda u: got.append(u))
        assert r == b"v1" and r.source == "stale" and r.stale and r.revalidating
        assert r.age > FRESH and r.updated is not None and not r.updated.done()
        # the low-level join says the same
        f = d.flight.join("cfg", max_age=FRESH, stale=30)
        assert f.role == "result" and f.stale.result == b"v1" and f.revalidating
        assert f.updated is None                       # no notify asked
        wait_until(lambda: seen, what="the owner's function")   # its join reply came first
        role, st = seen[0]
        assert role == "owner" and st.result == b"v1" and st.age > FRESH and st.fence > 0
        gate.set()
        t.join(10)
        assert out[0] == b"v2" and out[0].source == "owner"
        u = r.updated.result(10)
        assert u.status == "completed" and u.key == "cfg" and u.fence == out[0].fence
        wait_until(lambda: got, what="the notify callback")
        assert got == [u]
        # the revalidated record is fresh now
        r2 = d.once("cfg", lambda f: pytest.fail("ran"), keep=30)
        assert r2 == b"v2" and r2.source == "record" and not r2.stale


def test_failed_revalidation_keeps_the_record(broker):
    with broker.client() as a, broker.client() as b:
        old = make_stale(a, b"\xffbin-key")            # a key that is not UTF-8
        gate = threading.Event()

        def boom(f):
            gate.wait(10)
            raise RuntimeError("upstream down")
        errs = []

        def run():
            try:
                a.once(b"\xffbin-key", boom, keep=FRESH, stale=30)
            except RuntimeError as e:
                errs.append(e)
        t = threading.Thread(target=run)
        t.start()
        wait_until(lambda: a.flight.list(), what="the revalidation")
        r = b.once(b"\xffbin-key", lambda f: b"x", keep=FRESH, stale=30, notify=True)
        assert r.source == "stale" and r == b"v1"
        gate.set()
        t.join(10)
        assert errs and str(errs[0]) == "upstream down"
        u = r.updated.result(10)
        assert u.status == "failed" and u.key == b"\xffbin-key"
        rec = b.records.get(b"\xffbin-key")
        assert rec.status == "completed" and rec.result == b"v1" and rec.fence == old.fence


def test_updated_future_fails_when_the_connection_goes(broker):
    with broker.client() as a, broker.client() as b:
        make_stale(a, "k")
        gate = threading.Event()
        t = threading.Thread(target=lambda: a.once("k", lambda f: gate.wait(10) and b"v2",
                                                   keep=FRESH, stale=30, fallback="run"))
        t.start()
        wait_until(lambda: a.flight.list(), what="the revalidation")
        r = b.once("k", lambda f: b"", keep=FRESH, stale=30, notify=True)
        broker.kill()
        with pytest.raises(coord.ConnectionLost):
            r.updated.result(10)
        gate.set()
        t.join(10)


def test_backoff(broker):
    with broker.client() as a, broker.client() as b, broker.client() as d:
        gate, runs = threading.Event(), []

        def limited(f):
            runs.append(1)
            gate.wait(10)
            raise coord.RetryAfter(30, "429 from upstream")
        errs = []

        def owner():
            try:
                a.once("api", limited)
            except coord.RetryAfter as e:
                errs.append(e)
        t = threading.Thread(target=owner)
        t.start()
        wait_until(lambda: a.flight.list(), what="the owner")
        follower = []

        def follow():
            try:
                b.once("api", lambda f: pytest.fail("ran"))
            except coord.Backoff as e:
                follower.append(e)
        t2 = threading.Thread(target=follow)
        t2.start()
        wait_until(lambda: a.flight.list()[0].followers == 1, what="the follower")
        gate.set()
        t.join(10)
        t2.join(10)
        assert errs and errs[0].retry_after == 30 and errs[0].retryable
        e = follower[0]
        assert e.source == "live" and e.retry_after == 30 and e.error_code == "RETRY_AFTER"
        assert isinstance(e, coord.FlightFailed) and e.code == "BACKOFF"
        # a join in the window: the failure at once, fn does not run again
        with pytest.raises(coord.Backoff) as ei:
            d.once("api", lambda f: pytest.fail("ran"))
        assert ei.value.source == "backoff" and 25 < ei.value.retry_after <= 30
        assert "429 from upstream" in str(ei.value) and runs == [1]
        f = d.flight.join("api")
        assert f.role == "failed" and f.source == "backoff" and f.retryable
        assert 25 < f.retry_after <= 30
        assert d.stats()["backoffs"] == 1


def test_backoff_serves_stale_without_revalidating(broker):
    with broker.client() as a, broker.client() as b:
        make_stale(a, "s")
        with pytest.raises(coord.RetryAfter):
            a.once("s", lambda f: (_ for _ in ()).throw(coord.RetryAfter(30)),
                   keep=FRESH, stale=30)
        r = b.once("s", lambda f: pytest.fail("ran"), keep=FRESH, stale=30, notify=True)
        assert r == b"v1" and r.stale and not r.revalidating and r.updated is None


def test_low_level_fail_with_retry_after(broker):
    with broker.client() as a, broker.client() as b:
        f = a.flight.join("x")
        with pytest.raises(ValueError):
            f.fail("E", retry_after=1)          # needs retryable
        assert a.flight.fail(f, "SLOW", "later", retryable=True, retry_after=20) == 0
        g = b.flight.join("x")
        assert g.role == "failed" and g.error.code == "SLOW" and 15 < g.retry_after <= 20
        with pytest.raises(ValueError):
            coord.RetryAfter(0)


def test_kill_switch(broker):
    with broker.client() as a, broker.client() as b, broker.client() as w:
        with w.watch("-flights", timeout=5) as sub:
            a.flight.disable("api/")
            a.flight.disable(b"\xfe")
            assert set(a.flight.disabled()) == {b"\xfe", "api/"}
            ev = sub.get(5)
            assert ev.what == "disabled" and ev["prefix"] == "api/"
        gate = threading.Event()
        out = []
        t = threading.Thread(target=lambda: out.append(
            a.once("api/x", lambda f: gate.wait(10) and b"first", keep=30)))
        t.start()
        wait_until(lambda: a.flight.list(), what="the first bypass owner")
        # no deduplication: this caller owns a flight of its own at once
        r = b.once("api/x", lambda f: b"second" if f.bypass else b"?", keep=30)
        assert r == b"second" and r.source == "bypass"
        gate.set()
        t.join(10)
        assert out[0] == b"first" and out[0].source == "bypass"
        assert b.records.get("api/x") is None                 # no record written
        assert b.once("other", lambda f: b"o").source == "owner"
        a.flight.enable("api/")
        a.flight.enable(b"\xfe")
        assert a.flight.disabled() == []
        assert a.once("api/x", lambda f: b"now", keep=30).source == "owner"


def test_fallback_run_when_no_broker(tmp_path):
    path = os.path.join(str(tmp_path), "none.sock")
    c = coord.Client(path, autostart=False, lazy=True)
    with pytest.raises(coord.ConnectError):
        c.once("k", lambda f: b"x")
    seen = []

    def fn(f):
        seen.append((f.role, f.fence, f.stale))
        f.check()                                  # never aborted
        with pytest.raises(RuntimeError):
            f.complete(b"no")
        return "local value"
    r = c.once("k", fn, fallback="run")
    assert r == b"local value" and r.source == "local" and r.local
    assert "no broker" in r.reason and seen == [("local", 0, None)]
    with pytest.raises(ValueError):
        c.once("k", fn, fallback="maybe")
    c.close()


def test_fallback_run_when_the_connection_drops(broker):
    with broker.client() as a, broker.client() as b:
        gate = threading.Event()
        out = []
        t = threading.Thread(target=lambda: out.append(
            a.once("k", lambda f: gate.wait(10) and b"owner's", fallback="run")))
        t.start()
        wait_until(lambda: a.flight.list(), what="the owner")
        res = []
        t2 = threading.Thread(target=lambda: res.append(
            b.once("k", lambda f: b"mine, " + f.role.encode(), fallback="run")))
        t2.start()
        wait_until(lambda: a.flight.list()[0].followers == 1, what="the follower")
        broker.kill()
        t2.join(10)
        r = res[0]
        assert r == b"mine, local" and r.source == "local" and "closed" in r.reason
        gate.set()
        t.join(10)
        assert out[0] == b"owner's" and out[0].source == "local"
        assert out[0].reason.startswith("ran as the owner")
        # fallback "fail": the error
        with pytest.raises(coord.ConnectionLost):
            b.once("k", lambda f: b"")


def test_stats_latency(broker):
    with broker.client() as c:
        with c.lock("l"):
            pass
        c.once("f", lambda f: b"x")
        st = c.stats()
        assert isinstance(st, dict) and isinstance(st["latency"], dict)
        lat = st.latency
        assert {"lock_wait", "lock_hold", "flight_run", "follower_wait",
                "leader_transition"} <= set(lat)
        assert lat["lock_hold"].count == 1 and lat["flight_run"].count == 1
        assert 0 <= lat["lock_hold"].p50 <= lat["lock_hold"].p99 <= lat["lock_hold"].max < 5
        assert lat["leader_transition"].count == 0


# ---- asyncio ----

def test_aio_stale_backoff_kill_switch_latency(broker):
    async def main():
        async with broker.aclient() as a, broker.aclient() as b:
            r = await a.once("cfg", _const(b"v1"), keep=FRESH, stale=30)
            assert r.source == "owner"
            rec = await a.records.get("cfg")
            while time.time() - rec.created <= FRESH * 2:
                await asyncio.sleep(0.01)       # the record has to age
            gate, seen = asyncio.Event(), []

            async def revalidate(f):
                seen.append(f.stale)
                await gate.wait()
                return b"v2"
            task = asyncio.ensure_future(a.once("cfg", revalidate, keep=FRESH, stale=30))
            while not await a.flight.list():
                await asyncio.sleep(0.005)
            got = asyncio.Event()
            notes = []

            async def note(u):
                notes.append(u)
                got.set()
            r = await b.once("cfg", _const(b"never"), keep=FRESH, stale=30, notify=note)
            assert r == b"v1" and r.source == "stale" and r.revalidating
            assert isinstance(r.updated, asyncio.Future)
            gate.set()
            out = await task
            assert out == b"v2" and seen[0].result == b"v1"
            u = await asyncio.wait_for(r.updated, 10)
            await asyncio.wait_for(got.wait(), 10)
            assert u.status == "completed" and u.fence == out.fence and notes == [u]

            # backoff
            async def limited(f):
                raise coord.RetryAfter(20, "slow down")
            with pytest.raises(coord.RetryAfter):
                await a.once("api", limited)
            with pytest.raises(coord.Backoff) as ei:
                await b.once("api", _const(b"never"))
            assert ei.value.source == "backoff" and 15 < ei.value.retry_after <= 20

            # kill switch
            await a.flight.disable("off/")
            assert await b.flight.disabled() == ["off/"]
            f = await b.flight.join("off/1")
            assert f.role == "owner" and f.bypass
            await f.fail("X", retryable=True, retry_after=5)
            r = await b.once("off/2", _const(b"z"))
            assert r.source == "bypass"
            await a.flight.enable("off/")
            assert await a.flight.disabled() == []

            st = await a.stats()
            assert st.latency["flight_run"].count >= 3
    asyncio.run(main())


def test_aio_fallback_run(tmp_path):
    async def main():
        c = coord.aio.Client(os.path.join(str(tmp_path), "none.sock"), autostart=False)
        r = await c.once("k", _const(b"here"), fallback="run")
        assert r == b"here" and r.source == "local" and r.reason
        with pytest.raises(coord.ConnectError):
            await c.once("k", _const(b"here"))
        await c.close()
    asyncio.run(main())


def _const(v):
    async def fn(f):
        return v
    return fn
