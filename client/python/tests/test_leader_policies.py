"""Leadership's descriptors and policies, blocking and asyncio, against a
real broker: descriptors (define merges field by field: omitted keeps, None
resets), protocol pinning with its ratchet and force, the lock name,
capabilities and if_available policy, steal policies, incident takeover of
a disabled workstream, max hold (drain, then fence), rollout modes and
leader.mode, history, outbox claims reconciled after a leader process was
killed, pending, check, drain (own and requested)."""
import asyncio
import os
import subprocess
import sys
import textwrap
import threading

import pytest

import coord
from coord import messages as m
from coord.core import NIL
from conftest import child_env, wait_until


# ---- the sans-I/O request building (no broker) ----

def test_define_fields_omit_none_value():
    assert m.define("ws") == {"workstream": "ws"}
    f = m.define("ws", protocol=None, max_hold=0.3, steal="never", mode=coord.OMIT,
                 fallback=None, force=True)
    assert f == {"workstream": "ws", "protocol": NIL, "max_hold_ms": 300, "steal": "never",
                 "fallback": NIL, "force": True}
    assert m.define("ws", max_hold=None)["max_hold_ms"] is NIL
    assert m.define("ws", max_hold=0)["max_hold_ms"] == 0
    with pytest.raises(ValueError):
        m.define("ws", max_hold=-1)
    with pytest.raises(TypeError):
        m.define("ws", mode=3)
    with pytest.raises(ValueError):
        m.commit("op", None, b"v")              # a value needs a key
    assert m.commit("op", None, None) == {"op_id": "op"}


def test_lock_name_capabilities_if_available_fields():
    f = m.define("ws", lock_name="app:leader:ws", capabilities=["outbox", "claims"],
                 if_available="never")
    assert f == {"workstream": "ws", "lock_name": "app:leader:ws",
                 "capabilities": "outbox,claims", "if_available": "never"}
    assert m.define("ws", lock_name=b"\xffl")["lock_name"] == b"\xffl"   # a name: bytes too
    assert m.define("ws", capabilities="a, b")["capabilities"] == "a, b"   # the broker's form
    assert m.define("ws", capabilities=[])["capabilities"] == ""            # none
    f = m.define("ws", lock_name=None, capabilities=None, if_available=None)
    assert f == {"workstream": "ws", "lock_name": NIL, "capabilities": NIL,
                 "if_available": NIL}
    c = m.campaign("ws", lease=None, steal=False, if_available=False, timeout=None,
                   capabilities=("outbox",))
    assert c == {"workstream": "ws", "capabilities": "outbox"}
    assert "capabilities" not in m.campaign("ws", lease=None, steal=False,
                                            if_available=False, timeout=None)
    for bad in (3, b"a,b", [b"a"], ["a", 1]):
        with pytest.raises(TypeError):
            m.define("ws", capabilities=bad)
        with pytest.raises(TypeError):
            coord.Leadership(None, "ws", capabilities=bad)       # early, before any I/O
    with pytest.raises(ValueError):
        m.campaign("ws", lease=None, steal=False, if_available=False, timeout=None,
                   capabilities=["a,b"])                          # would read as two names
    with pytest.raises(TypeError):
        m.define("ws", if_available=True)        # the policy's word, not the campaign's bool


def test_nil_goes_on_the_wire_as_nil():
    from coord.core import Core, decode_body
    core = Core()
    _, frame = core.request("leader.define", m.define("ws", steal=None, mode="shadow"),
                            object())
    assert decode_body(frame[4:]) == {"op": "leader.define", "rid": 1, "workstream": "ws",
                                      "steal": None, "mode": "shadow"}


def test_leadership_error_classes():
    for code, cls in (("PROTOCOL_PINNED", coord.ProtocolPinned), ("POLICY", coord.Policy),
                      ("READ_ONLY", coord.ReadOnly), ("DRAINING", coord.Draining),
                      ("UNAVAILABLE", coord.Unavailable)):
        e = coord.errors.from_reply(code, "why")
        assert type(e) is cls and isinstance(e, coord.CoordError)
        assert (e.code, e.message) == (code, "why")


def test_generation_is_large(broker):
    with broker.client() as c, c.leader("big") as lead:
        assert 2 ** 32 < lead.generation < 2 ** 53     # from the id allocator


# ---- descriptors ----

def test_define_describe_merge(broker):
    with broker.client() as c:
        with pytest.raises(coord.NotFound):
            c.leader.describe("ws")
        with c.leader("ws"):
            pass
        g = c.leader.info("ws").generation
        d = c.leader.define("ws", max_hold=1.5, steal="never", fallback="SERVER_COORDINATED")
        assert (d.workstream, d.max_hold, d.steal, d.mode, d.fallback, d.protocol,
                d.pinned_protocol, d.canonical_fence) == \
            ("ws", 1.5, "never", "active", "SERVER_COORDINATED", None, None, "local")
        assert d.defined > 1.7e9
        d = c.leader.define("ws", mode="shadow")                 # the rest is kept
        assert (d.max_hold, d.steal, d.mode, d.fallback) == \
            (1.5, "never", "shadow", "SERVER_COORDINATED")
        d = c.leader.define("ws", steal=None, fallback=None)     # back to the defaults
        assert (d.max_hold, d.steal, d.mode, d.fallback) == (1.5, "allowed", "shadow", None)
        assert c.leader.define("ws", canonical_fence="local").canonical_fence == "local"
        d = c.leader.define("ws", max_hold=None, mode=None)
        assert (d.max_hold, d.mode) == (None, "active")
        assert c.leader.describe("ws") == d
        assert c.leader.info("ws").generation == g               # define never moves it
        for bad in (dict(steal="sometimes"), dict(mode="loud"), dict(canonical_fence="etcd"),
                    dict(fallback="x" * 65), dict(protocol="no-version"),
                    dict(max_hold=86401.0)):
            with pytest.raises(coord.InvalidOptions):
                c.leader.define("ws", **bad)
        assert c.leader.describe("ws") == d                      # nothing changed


def test_protocol_pin_ratchet_force(broker):
    with broker.client(client="a") as c, broker.client(client="b") as d:
        assert c.leader.define("p", protocol="sched@2").pinned_protocol == "sched@2"
        for proto in (None, "sched@1", "other@2"):
            with pytest.raises(coord.ProtocolPinned):
                with c.leader("p", protocol=proto):
                    pytest.fail("ran under an old protocol")
        with pytest.raises(coord.InvalidOptions):
            c.leader("p", protocol="sched@0").campaign()
        with c.leader("p", protocol="sched@2"):
            pass
        with c.leader("p", protocol="sched@3"):                  # the ratchet
            pass
        desc = c.leader.describe("p")
        assert (desc.protocol, desc.pinned_protocol) == ("sched@2", "sched@3")
        assert c.leader.info("p").pinned_protocol == "sched@3"
        with pytest.raises(coord.ProtocolPinned):
            c.leader("p", protocol="sched@2").campaign()
        for proto in ("sched@2", None, "other@9"):               # would lower the pin
            with pytest.raises(coord.ProtocolPinned):
                c.leader.define("p", protocol=proto)
        assert c.leader.describe("p").pinned_protocol == "sched@3"
        assert c.leader.define("p", protocol="sched@2", force=True).pinned_protocol == \
            "sched@2"
        with c.leader("p", protocol="sched@2"):
            # a campaign queued behind us is refused when a define raises
            # the pin before its turn comes
            waiter = d.leader("p", protocol="sched@2", timeout=5)
            got = []
            t = threading.Thread(target=lambda: _catch(waiter.campaign, got))
            t.start()
            wait_until(lambda: len(c.locks().pending) == 1, what="the queued campaign")
            c.leader.define("p", protocol="sched@4")
        t.join(10)
        assert isinstance(got[0], coord.ProtocolPinned) and waiter.state == coord.ABORTED
        d2 = c.leader.define("p", protocol=None, force=True)     # no pin any more
        assert (d2.protocol, d2.pinned_protocol) == (None, None)
        with c.leader("p"):
            pass


def test_lock_name_capabilities_if_available(broker):
    with broker.client(client="a") as c, broker.client(client="b") as b:
        with c.leader("ob"):
            pass
        d = c.leader.define("ob", lock_name="app:leader:ob:v3",
                            capabilities=["outbox", "claims"], if_available="never")
        assert (d.lock_name, d.capabilities, d.if_available) == \
            ("app:leader:ob:v3", ["outbox", "claims"], "never")
        assert c.leader.describe("ob") == d
        assert c.leader.info("ob").lock_name == "app:leader:ob:v3"
        # a campaign must name every pinned capability
        with pytest.raises(coord.ProtocolPinned, match="outbox"):
            with c.leader("ob"):
                pytest.fail("led without the capabilities")
        with pytest.raises(coord.ProtocolPinned, match="claims"):
            c.leader("ob", capabilities=["outbox"]).campaign()
        # if_available "never": a campaign that only looks is refused
        with pytest.raises(coord.Policy):
            c.try_leader("ob", capabilities=["claims", "outbox"])
        with pytest.raises(coord.Policy):
            c.leader("ob", capabilities=["claims", "outbox"], timeout=0).campaign()
        # more than the pinned ones is fine; the campaign queues on the lock name
        with c.leader("ob", capabilities=["claims", "outbox", "extra"]) as lead:
            assert lead.state == coord.LEADER
            assert [e.name for e in b.locks().held] == ["app:leader:ob:v3"]
        # a define may add a capability while a campaign waits: refused at its turn
        with c.leader("ob", capabilities="outbox,claims"):
            waiter = b.leader("ob", capabilities=["outbox", "claims"], timeout=5)
            got = []
            t = threading.Thread(target=lambda: _catch(waiter.campaign, got))
            t.start()
            wait_until(lambda: len(c.locks().pending) == 1, what="the queued campaign")
            c.leader.define("ob", capabilities=["outbox", "claims", "audit"])
        t.join(10)
        assert isinstance(got[0], coord.ProtocolPinned) and waiter.state == coord.ABORTED
        # None: back to the defaults
        d = c.leader.define("ob", lock_name=None, capabilities=None, if_available=None)
        assert (d.lock_name, d.capabilities, d.if_available) == ("-leader/ob", [], "allowed")
        assert c.leader.info("ob").lock_name == "-leader/ob"
        lead = c.try_leader("ob")
        assert lead is not None and [e.name for e in b.locks().held] == ["-leader/ob"]
        lead.resign()
        for bad in (dict(lock_name="-mine"), dict(lock_name="x" * 201),
                    dict(capabilities=[f"c{i}" for i in range(17)]),
                    dict(capabilities=["a", "a"]), dict(capabilities=["no space"]),
                    dict(if_available="sometimes")):
            with pytest.raises(coord.InvalidOptions):
                c.leader.define("ob", **bad)
        with pytest.raises(coord.InvalidOptions):
            c.leader("ob", capabilities=["a b"]).campaign()
        assert c.leader.describe("ob") == d                      # nothing changed


def settled_history(c, ws, limit=None):
    """History once its newest term has ended: the broker records a term's
    end in the ledger after it answers the resign (nothing waits for that
    write), so a history read at once may still show the term live."""
    return wait_until(lambda: (lambda h: h if h[0].reason else None)(
        c.leader.history(ws, limit)), what="the term's end in the history")


async def asettled_history(c, ws, limit=None):
    for _ in range(1000):
        h = await c.leader.history(ws, limit)
        if h[0].reason:
            return h
        await asyncio.sleep(0.005)
    raise AssertionError("the term's end never reached the history")


def _catch(fn, out):
    try:
        out.append(fn())
    except BaseException as e:   # noqa: B902 - handed to the test thread
        out.append(e)


def test_steal_policies(broker):
    with broker.client() as c, broker.client() as d:
        c.leader.define("sp", steal="never")
        with pytest.raises(coord.LeadershipLost):
            with c.leader("sp") as a:
                with pytest.raises(coord.Policy):
                    d.leader("sp", steal=True, incident="INC-0").campaign()
                c.leader.define("sp", steal="incident-only")
                thief = d.leader("sp", steal=True)
                with pytest.raises(coord.Policy):
                    thief.campaign()
                assert thief.state == coord.ABORTED and a.state == coord.LEADER
                b = d.leader("sp", steal=True, incident="INC-1")
                assert b.campaign() and b.generation > a.generation
                assert a.lost.wait(5)
                assert (a.lost_reason, a.lost_incident, a.state) == \
                    ("incident", "INC-1", coord.RELEASED)
                with pytest.raises(coord.Fenced):
                    a.commit("op")
        b.resign()
        c.leader.define("sp", steal=None)                        # allowed
        with pytest.raises(coord.LeadershipLost):
            with c.leader("sp") as a:
                with d.leader("sp", steal=True):
                    assert a.lost.wait(5) and a.lost_reason == "stolen"
                    assert a.lost_incident is None
                a.check()
        assert [t.incident for t in c.leader.history("sp", 3)] == [None, None, "INC-1"]


def test_incident_takeover_of_a_disabled_workstream(broker):
    with broker.client() as c, broker.client() as d:
        lead = c.leader("inc")
        lead.campaign()
        g = d.leader.disable("inc")
        assert lead.lost.wait(5) and lead.lost_reason == "disabled" and g > lead.generation
        with pytest.raises(coord.Disabled):
            with c.leader("inc", timeout=1):
                pytest.fail("ran while disabled")
        with pytest.raises(coord.LeadershipLost):
            with d.leader("inc", incident="INC-7") as b:         # granted while disabled
                assert b.generation > g
                info = c.leader.info("inc")
                assert (info.state, info.disabled, info.incident, info.live_generation) == \
                    ("leading", True, "INC-7", b.generation)
                # another incident responder takes over from it
                e = c.leader("inc", steal=True, incident="INC-8")
                assert e.campaign()
                assert b.lost.wait(5)
                assert (b.lost_reason, b.lost_incident) == ("incident", "INC-8")
        assert c.leader.info("inc").disabled
        e.resign()
        h = settled_history(c, "inc")
        assert [(t.incident, t.reason) for t in h[:3]] == \
            [("INC-8", "resigned"), ("INC-7", "incident"), (None, "disabled")]
        d.leader.enable("inc")
        with c.leader("inc"):
            pass


def test_max_hold_drains_then_fences(broker):
    with broker.client() as c, broker.client() as d:
        c.leader.define("mh", max_hold=0.3)
        with pytest.raises(coord.LeadershipLost):
            with c.leader("mh", lease=5) as a:
                assert a.lease == 0.3                            # capped at the max hold
                assert not a.drain_requested.is_set()
                b = d.leader("mh", timeout=10)
                got = []
                t = threading.Thread(target=lambda: _catch(b.campaign, got))
                t.start()
                assert a.drain_requested.wait(5)
                assert (a.drain_reason, a.state, a.draining) == \
                    ("max_hold", coord.DRAINING, True)
                with pytest.raises(coord.Draining):
                    a.claim("late")
                assert a.commit("still-ok")                      # commits still accepted
                assert a.lost.wait(5) and a.lost_reason == "max_hold"   # not resigned: fenced
        t.join(10)
        assert got == [True] and b.generation > a.generation
        s = c.stats()
        assert s["terms_reached_max_hold"] >= 1 and s["terms_fenced_max_hold"] == 1
        assert s["terms_over_max_hold"] == 0
        b.resign()
        assert c.leader.history("mh", 2)[1].reason == "max_hold"


def test_modes_and_mode_events(broker):
    with broker.client() as c, broker.client() as d:
        with c.leader("md") as lead:
            g = lead.generation
            assert lead.mode == "active"
            assert lead.commit("op-1")
            d.leader.define("md", mode="read-only")
            wait_until(lambda: lead.mode == "read-only", what="leader.mode")
            for call in (lambda: lead.commit("op-2", "k", b"v"), lambda: lead.claim("op-2"),
                         lambda: lead.abandon("op-2", "no")):
                with pytest.raises(coord.ReadOnly):
                    call()
            assert c.leader.info("md").mode == "read-only" and lead.generation == g
            d.leader.define("md", mode="shadow")
            wait_until(lambda: lead.mode == "shadow", what="leader.mode")
            assert c.leader.check("md", g).mode == "shadow"
        with c.leader("md") as lead:                             # the campaign says so too
            assert lead.mode == "shadow"
            d.leader.define("md", mode=None)
            wait_until(lambda: lead.mode == "active", what="leader.mode")
            assert lead.commit("op-3", "k", b"v")
        assert [t.mode for t in c.leader.history("md")] == ["shadow", "active"]


def test_history(broker):
    with broker.client(client="alpha") as c, broker.client(client="beta") as d:
        assert c.leader.history("h") == []
        with c.leader("h", protocol="job@1") as a1:
            pass
        with pytest.raises(coord.LeadershipLost):
            with c.leader("h") as a2:
                b = d.leader("h", steal=True)
                b.campaign()
                assert a2.lost.wait(5)
        h = c.leader.history("h")
        assert [(t.generation, t.client, t.reason, t.live) for t in h] == \
            [(b.generation, "beta", None, True), (a2.generation, "alpha", "stolen", False),
             (a1.generation, "alpha", "resigned", False)]
        assert h[0].ended == 0 and h[1].ended >= h[1].elected > 1.7e9
        assert (h[2].protocol, h[1].protocol) == ("job@1", None)
        assert h[0].pid == os.getpid() and h[0].instance
        assert [t.generation for t in c.leader.history("h", limit=2)] == \
            [b.generation, a2.generation]
        assert not h.truncated


CHILD = textwrap.dedent("""
    import asyncio, sys, coord
    sock, ws, kind = sys.argv[1:4]
    if kind == "sync":
        c = coord.Client(sock, autostart=False)
        lead = c.leader(ws)
        lead.campaign()
        r = lead.claim("op-1")
    else:
        async def main():
            c = await coord.aio.connect(sock, autostart=False)
            lead = c.leader(ws)
            await lead.campaign()
            return lead, await lead.claim("op-1")
        lead, r = asyncio.new_event_loop().run_until_complete(main())
    assert r.claimed and not r.reconcile
    print(lead.generation, flush=True)
    sys.stdin.read()                     # the parent kills us here
""")


def _claim_and_die(broker, ws, kind):
    """A leader in a child process claims op-1 and is killed before it
    settles it; returns the child's generation."""
    p = subprocess.Popen([sys.executable, "-c", CHILD, broker.socket, ws, kind],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=child_env())
    try:
        gen = int(p.stdout.readline())
    finally:
        p.kill()
        p.wait()
        p.stdin.close()
        p.stdout.close()
    return gen


def test_claims_reconcile_after_a_killed_leader(broker):
    gen = _claim_and_die(broker, "out", "sync")
    with broker.client() as c:
        with c.leader("out", timeout=5) as lead:
            assert lead.generation > gen
            [p] = lead.pending()
            assert (p.op_id, p.generation, p.live) == ("op-1", gen, False)
            r = lead.claim("op-1")
            assert (r.claimed, r.reconcile, r.previous_generation, r.claimed_ms) == \
                (True, True, gen, p.claimed_ms)
            [p2] = lead.pending()                                # now ours
            assert (p2.op_id, p2.generation, p2.live) == ("op-1", lead.generation, True)
            assert p2.claimed_ms >= p.claimed_ms
            again = lead.claim("op-1")
            assert again.claimed and not again.reconcile
            assert lead.commit("op-1")                           # settles it
            assert lead.pending() == []
            r = lead.claim("op-1")
            assert (r.claimed, r.applied, r.generation) == (False, True, lead.generation)
            ab = lead.abandon("op-1", "too late")
            assert (bool(ab), ab.applied, ab.generation) == (False, True, lead.generation)
            # abandoned: claimed, given up, then claims and commits say so
            assert lead.claim("op-2").claimed
            assert lead.abandon("op-2", "upstream refused")
            assert lead.claim("op-2").abandoned
            cm = lead.commit("op-2", "k", b"v")
            assert (cm.applied, cm.abandoned) == (False, True)
            assert lead.read("k") is None
            assert lead.abandon("op-3", "never claimed")         # no claim needed
            for op in ("a", "b", "c"):
                lead.claim(op)
            assert [x.op_id for x in lead.pending(limit=2)] == ["a", "b"]
            assert [x.op_id for x in c.leader.pending("out")] == ["a", "b", "c"]
        s = c.stats()
        assert s["claims_reconciled"] >= 1 and s["abandons"] >= 2


def test_check_and_drain(broker):
    with broker.client() as c, broker.client() as d:
        with c.leader("cd") as lead:
            ck = d.leader.check("cd", lead.generation)
            assert ck.live and 0 < ck.lease_left <= 30 and ck.mode == "active"
            with pytest.raises(coord.Fenced):
                d.leader.check("cd", lead.generation - 1)
            lead.drain()
            assert (lead.state, lead.drain_reason) == (coord.DRAINING, "self")
            assert not lead.drain_requested.is_set()
            lead.drain()                                         # twice is fine
            with pytest.raises(coord.Draining):
                lead.claim("x")
            assert lead.commit("y") and lead.abandon("z", "draining")
            info = d.leader.info("cd")
            assert (info.state, info.drain_reason) == ("draining", "self")
            g = lead.generation
        assert lead.state == coord.RELEASED
        with pytest.raises(coord.Fenced):
            d.leader.check("cd", g)
        with c.leader("cd") as lead:                             # an operator asks
            d.leader.drain("cd")
            assert lead.drain_requested.wait(5)
            assert (lead.state, lead.drain_reason) == (coord.DRAINING, "requested")
            assert d.leader.info("cd").drain_reason == "requested"
            lead.check()                                         # still leading
        with pytest.raises(coord.Fenced):
            d.leader.drain("cd")                                 # nobody leads


# ---- asyncio ----

def test_async_descriptors_pinning_steal_incident(broker):
    async def main():
        async with broker.aclient() as c, broker.aclient() as d:
            with pytest.raises(coord.NotFound):
                await c.leader.describe("a")
            desc = await c.leader.define("a", protocol="svc@1", steal="incident-only",
                                         max_hold=2)
            assert (desc.protocol, desc.steal, desc.max_hold) == ("svc@1", "incident-only", 2.0)
            desc = await c.leader.define("a", max_hold=None)
            assert (desc.protocol, desc.steal, desc.max_hold) == ("svc@1", "incident-only", None)
            with pytest.raises(coord.ProtocolPinned):
                async with c.leader("a"):
                    pytest.fail("ran unpinned")
            with pytest.raises(coord.LeadershipLost):
                async with c.leader("a", protocol="svc@2") as a:
                    assert (await c.leader.describe("a")).pinned_protocol == "svc@2"
                    with pytest.raises(coord.Policy):
                        await d.leader("a", protocol="svc@2", steal=True).campaign()
                    with pytest.raises(coord.ProtocolPinned):
                        await d.leader.define("a", protocol="svc@1")
                    b = d.leader("a", protocol="svc@2", steal=True, incident="INC-A")
                    assert await b.campaign()
                    await asyncio.wait_for(a.lost.wait(), 5)
                    assert (a.lost_reason, a.lost_incident, a.state) == \
                        ("incident", "INC-A", coord.RELEASED)
            await b.resign()
            # incident takeover of a disabled workstream
            g = await d.leader.disable("a")
            with pytest.raises(coord.Disabled):
                await c.leader("a", protocol="svc@2").campaign()
            async with c.leader("a", protocol="svc@2", incident="INC-B") as e:
                assert e.generation > g
                info = await d.leader.info("a")
                assert (info.state, info.disabled, info.incident) == ("leading", True, "INC-B")
            h = await asettled_history(d, "a", limit=2)
            assert [(t.incident, t.reason) for t in h] == [("INC-B", "resigned"),
                                                          ("INC-A", "resigned")]
            assert (await d.leader.define("a", protocol="svc@1", force=True)).pinned_protocol \
                == "svc@1"
    asyncio.run(main())


def test_async_lock_name_capabilities_if_available(broker):
    async def main():
        async with broker.aclient() as c, broker.aclient() as d:
            desc = await c.leader.define("aob", lock_name="app:leader:aob",
                                         capabilities=("outbox",), if_available="never")
            assert (desc.lock_name, desc.capabilities, desc.if_available) == \
                ("app:leader:aob", ["outbox"], "never")
            assert await d.leader.describe("aob") == desc
            with pytest.raises(coord.ProtocolPinned, match="outbox"):
                async with c.leader("aob"):
                    pytest.fail("led without the capability")
            with pytest.raises(coord.Policy):
                await c.try_leader("aob", capabilities=["outbox"])
            async with c.leader("aob", capabilities=["outbox"]) as lead:
                assert lead.state == coord.LEADER
                assert [e.name for e in (await d.locks()).held] == ["app:leader:aob"]
            desc = await c.leader.define("aob", capabilities=None, if_available="allowed")
            assert (desc.lock_name, desc.capabilities, desc.if_available) == \
                ("app:leader:aob", [], "allowed")
            lead = await c.try_leader("aob")
            assert lead is not None
            await lead.resign()
    asyncio.run(main())


def test_async_max_hold_drain_then_resign(broker):
    async def main():
        async with broker.aclient() as c, broker.aclient() as d:
            await c.leader.define("mh", max_hold=0.3)
            b = d.leader("mh", timeout=10)
            async with c.leader("mh", lease=5) as a:
                assert a.lease == 0.3
                waiter = asyncio.create_task(b.campaign())
                await asyncio.wait_for(a.drain_requested.wait(), 5)
                assert (a.drain_reason, a.state) == ("max_hold", coord.DRAINING)
                with pytest.raises(coord.Draining):
                    await a.claim("late")
                # this leader finishes and resigns: no fence
            assert await asyncio.wait_for(waiter, 5) is True
            assert b.generation > a.generation and not a.lost.is_set()
            assert (await c.stats())["terms_fenced_max_hold"] == 0
            # the next one does not resign: fenced one lease after the drain
            t = asyncio.create_task(c.leader("mh", timeout=10).campaign())
            await asyncio.wait_for(b.drain_requested.wait(), 5)
            await asyncio.wait_for(b.lost.wait(), 5)
            assert (b.lost_reason, b.state) == ("max_hold", coord.RELEASED)
            with pytest.raises(coord.Fenced):
                await b.commit("after")
            assert await asyncio.wait_for(t, 5) is True
            assert (await c.stats())["terms_fenced_max_hold"] == 1
    asyncio.run(main())


def test_async_modes_check_drain_history(broker):
    async def main():
        async with broker.aclient(client="x") as c, broker.aclient() as d:
            assert await c.leader.history("m") == []
            async with c.leader("m") as lead:
                assert lead.mode == "active"
                ck = await d.leader.check("m", lead.generation)
                assert ck.live and ck.mode == "active"
                await d.leader.define("m", mode="shadow")
                while lead.mode != "shadow":
                    await asyncio.sleep(0.005)
                with pytest.raises(coord.ReadOnly):
                    await lead.claim("o")
                with pytest.raises(coord.ReadOnly):
                    await lead.commit("o")
                await d.leader.define("m", mode="active")
                while lead.mode != "active":
                    await asyncio.sleep(0.005)
                assert await lead.commit("o", "k", b"v")
                await d.leader.drain("m", lead.generation)
                await asyncio.wait_for(lead.drain_requested.wait(), 5)
                assert (lead.state, lead.drain_reason) == (coord.DRAINING, "requested")
                await lead.drain()
                with pytest.raises(coord.Draining):
                    await lead.claim("p")
                assert await lead.abandon("p", "drained")
                g = lead.generation
            with pytest.raises(coord.Fenced):
                await d.leader.check("m", g)
            [t] = await asettled_history(d, "m")
            assert (t.generation, t.client, t.reason, t.mode) == (g, "x", "resigned", "active")
    asyncio.run(main())


def test_async_claims_reconcile_after_a_killed_leader(broker):
    gen = _claim_and_die(broker, "aout", "async")

    async def main():
        async with broker.aclient() as c:
            async with c.leader("aout", timeout=5) as lead:
                [p] = await lead.pending()
                assert (p.op_id, p.generation, p.live) == ("op-1", gen, False)
                r = await lead.claim("op-1")
                assert (r.reconcile, r.previous_generation, r.claimed_ms) == \
                    (True, gen, p.claimed_ms)
                assert [x.live for x in await c.leader.pending("aout")] == [True]
                assert await lead.commit("op-1", "sent", b"yes")
                assert await lead.pending() == []
                r = await lead.claim("op-1")
                assert (r.claimed, r.applied, r.generation) == (False, True, lead.generation)
                assert await lead.abandon("op-9", "never")
                assert (await lead.claim("op-9")).abandoned
                assert await lead.read("sent") == b"yes"
    asyncio.run(main())
