"""Who runs a flight, through the real broker (note 002 §8, §10, §15, §21):
the -flights events name the owner, its start, deadline and version; records
name who wrote them; a join supersedes a stale owner; two versions of the
client race on one key; a follower's timeout falls back by policy.
Blocking and asyncio."""
import asyncio
import os
import threading

import pytest

import coord


def next_what(sub, what, key):
    """The next -flights event `what` of key (earlier ones skipped)."""
    for ev in sub:
        if ev.what == what and ev.get("key") == key:
            return ev
    raise AssertionError(f"no {what} event for {key}")


def test_events_and_records_name_the_owner(broker):
    with broker.client(client="tab-a") as a, broker.client(client="tab-b") as b, \
            broker.client() as w:
        with w.watch("-flights", timeout=5) as sub:
            r = a.once("me", lambda f: b"ada", ttl=60, keep=60, version="bundle-7")
            assert r.source == "owner"
            st = next_what(sub, "started", "me")
            assert st["client"] == "tab-a" and st["pid"] == os.getpid()
            assert st["version"] == "bundle-7" and st["instance"]
            assert st["deadline_ms"] == st["started_ms"] + 60000
            done = next_what(sub, "completed", "me")
            assert done["client"] == "tab-a" and "duration_ms" in done.fields
            with pytest.raises(coord.FlightFailed):
                a.once("search", lambda f: (_ for _ in ()).throw(
                    coord.FlightFailed("HTTP_503", "secret text", True)))
            failed = next_what(sub, "failed", "search")
            assert failed["code"] == "HTTP_503" and failed["retryable"] is True
            assert "message" not in failed.fields
        rec = b.records.get("me")
        assert (rec.client, rec.pid, rec.version) == ("tab-a", os.getpid(), "bundle-7")
        assert rec.instance
        [e] = b.records.list("me")
        assert e.client == "tab-a" and e.version == "bundle-7"


def test_supersede(broker):
    with broker.client(client="tab-a") as a, broker.client() as b, \
            broker.client() as c, broker.client() as w:
        with w.watch("-flights", timeout=5) as sub:
            aborted, outcome = threading.Event(), []

            def stale(f):
                aborted.wait(10)
                return b"stale"

            def run_stale():
                try:
                    outcome.append(a.once("feed", stale))
                except coord.CoordError as e:
                    outcome.append(e)
            t = threading.Thread(target=run_stale)
            t.start()
            st = next_what(sub, "started", "feed")
            got = []
            tf = threading.Thread(target=lambda: got.append(
                b.once("feed", lambda f: pytest.fail("the follower ran"))))
            tf.start()
            next_what(sub, "joined", "feed")
            r = c.once("feed", lambda f: b"fresh", supersede=True)
            assert r == b"fresh" and r.source == "owner" and r.superseded == st["fence"]
            tf.join(10)
            assert got == [b"fresh"]
            sup = next_what(sub, "superseded", "feed")
            assert sup["client"] == "tab-a"
            aborted.set()
            t.join(10)
            assert isinstance(outcome[0], coord.Fenced)
        # the low-level calls: a higher priority supersedes
        f1 = a.flight.join("prio", priority=1)
        f2 = b.flight.join("prio", priority=2)
        assert f2.role == "owner" and f2.superseded == f1.fence
        with pytest.raises(coord.Fenced) as ei:
            f1.complete(b"old")
        assert ei.value.reason == "superseded"
        f2.complete(b"new")


def test_two_versions_race(broker):
    with broker.client() as a, broker.client() as b, broker.client() as c, \
            broker.client() as w:
        with w.watch("-flights", timeout=5) as sub:
            go, out = threading.Event(), []
            t = threading.Thread(target=lambda: out.append(a.once(
                "cfg", lambda f: (go.wait(10), b"v1")[1], version="v1", keep=60)))
            t.start()
            next_what(sub, "started", "cfg")
            fresh = b.once("cfg", lambda f: b"v2", version="v2", other_version="own", keep=60)
            assert fresh.source == "owner"
            compat = []
            tc = threading.Thread(target=lambda: compat.append(c.once(
                "cfg", lambda f: pytest.fail("compat ran"), version="v3")))
            tc.start()
            next_what(sub, "joined", "cfg")
            go.set()
            t.join(10)
            tc.join(10)
            assert out == [b"v1"] and compat == [b"v1"]
        again = b.once("cfg", lambda f: b"v2 again", version="v2", other_version="own",
                       max_age=60)
        assert again.source == "owner"
        taken = c.once("cfg", lambda f: pytest.fail("ran"), version="v3", max_age=60)
        assert taken.source == "record"
        with pytest.raises(ValueError):
            a.flight.join("cfg", other_version="maybe")
        with pytest.raises(ValueError):
            a.flight.join("cfg", version="v" * 65)


def test_timeout_falls_back(broker):
    with broker.client() as a, broker.client() as b, broker.client() as w:
        f = a.flight.join("slow")
        with pytest.raises(coord.Timeout):
            b.once("slow", lambda f: b"here", wait=0.05)
        r = b.once("slow", lambda f: b"here", wait=0.05, fallback="run")
        assert (r, r.source, r.fallback_cause, r.retried) == (b"here", "local", "timeout", False)
        r = b.once("slow", lambda f: b"here", wait=0.05, fallback="retry")
        assert (r.source, r.fallback_cause, r.retried) == ("local", "timeout", True)
        # the owner finishes during the second wait: its result
        with w.watch("-flights", timeout=5) as sub:
            got = []
            t = threading.Thread(target=lambda: got.append(
                b.once("slow", lambda f: pytest.fail("ran"), wait=0.3, fallback="retry")))
            t.start()
            next_what(sub, "follower_timeout", "slow")
            next_what(sub, "joined", "slow")
            f.complete(b"shared")
            t.join(10)
        assert got == [b"shared"] and got[0].source == "live" and got[0].retried
        with pytest.raises(ValueError):
            b.once("slow", lambda f: b"", fallback="maybe")


def test_aio_supersede_and_timeout(broker):
    async def main():
        async with broker.aclient() as a, broker.aclient() as b:
            f1 = await a.flight.join("k", version="v1")
            f2 = await b.flight.join("k", supersede=True)
            assert f2.role == "owner" and f2.superseded == f1.fence
            assert f1.version == "v1" and f2.version == "v1"
            with pytest.raises(coord.Fenced):
                await f1.complete(b"old")

            async def here(f):
                return b"here"
            r = await a.once("k", here, wait=0.05, fallback="run")
            assert r.source == "local" and r.fallback_cause == "timeout"
            r = await a.once("k", here, wait=0.05, fallback="retry")
            assert r.retried and r.fallback_cause == "timeout"
            await f2.complete(b"new", 60)
            rec = await a.records.get("k")
            assert rec.pid == os.getpid() and rec.version == ""
    asyncio.run(main())
