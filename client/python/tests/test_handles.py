"""test_handles.py - the state machines both clients share (handles.py,
calls.py, paths.Dial), driven by hand: replies and events in, what the
handle sends and what it becomes out, without a broker or a socket."""
from __future__ import annotations

import errno
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

import pytest

import coord
from coord import calls, messages as m
from coord.core import Reply
from coord.handles import (Closed, FlightHandle, Join, LeaderTerm, LockHandle, Once,
                           SubscriptionBase)
from coord.paths import Dial


class FakeConn:
    """What a handle sends (fire) is recorded."""

    def __init__(self) -> None:
        self.sent: List[Tuple[str, Dict[str, Any]]] = []

    def fire(self, op: str, fields: Dict[str, Any]) -> object:
        self.sent.append((op, fields))
        return object()


class FakeClient:
    request_timeout: Optional[float] = 30.0
    max_queued = 3
    max_queued_bytes = 1 << 20

    def __init__(self) -> None:
        self._router = m.Router()


def ok(**body: Any) -> Reply:
    return Reply(1, True, dict(body, ok=True))


def err(code: str, message: str = "") -> Reply:
    return Reply(1, False, {"ok": False, "code": code, "message": message})


def ev(name: str, **body: Any) -> m.Event:
    return m.Event(name, body, 0)


def test_lock_grant_loss_and_give_back():
    c, conn = FakeClient(), FakeConn()
    lk = LockHandle(c, "a", "exclusive", timeout=1.0, lease=3.0, steal=False,
                    event=threading.Event)
    fields, limit = lk._acquire_fields(False)
    assert fields["name"] == "a" and fields["timeout_ms"] == 1000 and fields["lease_ms"] == 3000
    assert limit == 31.0                                  # timeout + request_timeout
    lk._granted(conn, ok(granted=True, lock=7, token=42), time.monotonic())
    assert lk.held and lk.token == 42 and c._router.locks[7] is lk
    assert lk._acquired(ok(granted=True))
    with pytest.raises(RuntimeError):
        lk._acquire_fields(False)                         # held already
    c._router.dispatch(ev("lock.lost", lock=7, reason="stolen"))
    assert lk.lost.is_set() and lk.lost_reason == "stolen" and not lk.held
    with pytest.raises(coord.LockLost, match="stolen"):
        lk.check()
    # a grant that came after the waiter gave up is released
    lk2 = LockHandle(c, "b", "shared", timeout=None, lease=None, steal=False,
                     event=threading.Event)
    assert lk2._give_back(conn, ok(granted=True, lock=9)) is not None
    assert conn.sent == [("lock.release", {"lock": 9})]
    assert lk2._give_back(conn, ok(granted=False)) is None
    with pytest.raises(coord.Timeout, match="timed out after 0.5 s"):
        LockHandle(c, "x", "exclusive", timeout=0.5, lease=None, steal=False,
                   event=threading.Event)._acquired(err("TIMEOUT"))
    with pytest.raises(ValueError):
        LockHandle(c, "x", "bogus", timeout=None, lease=None, steal=False,
                   event=threading.Event)


def test_lock_lease_end_and_renewals():
    c, conn = FakeClient(), FakeConn()
    lk = LockHandle(c, "a", "exclusive", timeout=None, lease=3.0, steal=False,
                    event=threading.Event)
    t0 = time.monotonic()
    lk._granted(conn, ok(granted=True, lock=1, token=1), t0)
    assert not lk._expired(conn, t0 + 1.0)
    assert lk._renewed(ok(), t0 + 1.0, 3.0) and lk._deadline == t0 + 4.0
    assert lk._renewed(err("INTERNAL"), t0 + 1.0, 3.0) and lk.held   # not a loss
    assert lk._expired(conn, t0 + 4.0)                    # no renewal acknowledged
    assert lk.lost_reason == "expired" and conn.sent == [("lock.release", {"lock": 1})]
    lk._granted(conn, ok(granted=True, lock=2, token=2), t0)
    assert not lk._renewed(err("UNKNOWN_LOCK"), t0, 3.0) and lk.lost_reason == "expired"
    assert lk._release() is None                          # lost: nothing to release


def test_leader_term_states():
    c, conn = FakeClient(), FakeConn()
    t = LeaderTerm(c, "ws", lease=1.5, steal=False, timeout=None, protocol=None,
                   incident=None, event=threading.Event)
    fields = t._campaign_fields(False)
    assert t._campaign_limit(fields) is None              # waits as long as it takes
    t._begin()
    assert t.state == coord.REQUESTING
    gen = (1 << 32) + 5
    t._granted(conn, ok(granted=True, generation=gen, lease_ms=1500, mode="shadow"),
               time.monotonic())
    assert t.leading and t.mode == "shadow" and c._router.leaders[t.key] is t
    assert t._elected(ok(granted=True))
    c._router.dispatch(ev("leader.drain", workstream="ws", generation=gen, reason="max_hold"))
    assert t.state == coord.DRAINING and t.drain_requested.is_set()
    with pytest.raises(coord.Fenced):
        t._reply(err("FENCED"), lambda b: None)
    assert t.lost_reason == "fenced" and t.state == coord.RELEASED and t.lost.is_set()
    with pytest.raises(coord.Fenced):
        t._fields()                                       # the term's calls refuse
    with pytest.raises(coord.LeadershipLost):
        t.check()
    # refused, and a grant after the campaign gave up: resigned
    u = LeaderTerm(c, "ws", lease=None, steal=False, timeout=0, protocol=None,
                   incident=None, event=threading.Event)
    assert u._campaign_fields(False)["if_available"] is True
    u._begin()
    assert not u._elected(ok(granted=False)) and u.state == coord.FOLLOWER
    assert u._give_back(conn, ok(granted=True, generation=gen + 1)) is not None
    assert u.state == coord.ABORTED
    assert conn.sent[-1] == ("leader.resign", {"workstream": "ws", "generation": gen + 1})


def test_term_falls_back_only_when_asked(tmp_path):
    c, down = FakeClient(), coord.ConnectionLost("no broker")
    (tmp_path / "workstreams").mkdir()
    (tmp_path / "workstreams" / "ws.v1").write_text(
        "schema: crossTabLeader.v1\nfallback: READ_ONLY\n")
    t = LeaderTerm(c, "ws", lease=None, steal=False, timeout=None, protocol=None,
                   incident=None, event=threading.Event)
    t.config_dir = str(tmp_path)
    with pytest.raises(coord.ConnectionLost):             # not opted in: the error stands
        t._unreachable(down)
    t.fallback = True                                     # descfile.leadership's opt-in
    ro: Any = t._unreachable(down)
    assert (ro.mode, ro.generation, ro.leading, ro.cause) == ("read-only", None, False, down)
    with pytest.raises(coord.ReadOnly):
        ro.commit("op-1")
    t.config_dir = str(tmp_path / "none")                 # no file: fails closed
    with pytest.raises(coord.ConnectionLost) as ei:
        t._unreachable(down)
    assert getattr(ei.value, "fallback").action == "fail-closed"


def test_join_and_once_decisions():
    c, conn = FakeClient(), FakeConn()
    j = Join(c, "k", ttl=5.0, wait=None, max_age=None, abort_when_orphaned=False,
             stale=None, notify=False, future=list,
             flight=lambda conn, jd: FlightHandle(c, conn, jd, threading.Event))
    assert j.limit is None                                # waits as long as it takes
    j._granted(conn, ok(role="owner", flight=3, fence=11), time.monotonic())
    f = j._joined(ok(role="owner"))
    assert f.role == "owner" and c._router.flights[3] is f
    j._give_back(conn, ok())                              # the caller gave up
    assert 3 not in c._router.flights and conn.sent[-1][0] == "flight.fail"
    assert conn.sent[-1][1]["retryable"] is True

    o = Once("k", ttl=5.0, wait=None, keep=10.0, max_age=None, stale=20.0, notify=False,
             fallback="fail", retries=1, abort_when_orphaned=False)
    assert o.store == 30.0 and o.join()["max_age"] == 10.0
    failed = FlightHandle(c, None, m.joined("k", {"role": "failed", "retryable": True,
                                                  "error": {"code": "X", "message": "y"}}),
                          threading.Event)
    assert o.follow(failed, lambda fn: fn) is None        # retried once
    with pytest.raises(coord.FlightFailed):
        o.follow(failed, lambda fn: fn)                   # then raised
    backoff = FlightHandle(c, None, m.joined("k", {"role": "failed", "retryable": True,
                                                   "retry_after_ms": 2000,
                                                   "error": {"code": "X", "message": "y"}}),
                           threading.Event)
    with pytest.raises(coord.Backoff):
        o.follow(backoff, lambda fn: fn)
    with pytest.raises(ValueError):
        Once("k", ttl=5.0, wait=None, keep=None, max_age=None, stale=None, notify=False,
             fallback="maybe", retries=0, abort_when_orphaned=False)
    r = Once.ran_alone("v", ConnectionError("down"))
    assert r == b"v" and r.local and r.reason == "down"


def test_once_falls_back_by_policy():
    def once(fallback, **kw):
        return Once("k", ttl=5.0, wait=0.5, keep=None, max_age=None, stale=None, notify=False,
                    fallback=fallback, retries=0, abort_when_orphaned=False, **kw)
    late, down = coord.Timeout("flight 'k': no result"), coord.ConnectionLost("gone")
    for e in (late, down):                                # "fail" raises what the join raised
        with pytest.raises(type(e)):
            once("fail").fall_back(e)
    o = once("run")
    assert not o.fall_back(late) and not o.fall_back(down)   # fn runs here at once
    r = o.ran_alone(b"v", late, o.retried)
    assert r.local and (r.fallback_cause, r.retried) == ("timeout", False)
    assert Once.ran_alone(b"v", down).fallback_cause == "unreachable"
    o = once("retry", supersede=True, priority=3, version="v2", other_version="own")
    first = o.join()
    assert first["supersede"] and first["priority"] == 3 and first["version"] == "v2"
    assert not o.fall_back(down)                          # unreachable: no second join
    assert o.fall_back(late) and o.retried                # a follower's timeout: once more,
    again = o.join()                                      # superseding nobody, a fresh wait
    assert not again["supersede"] and again["other_version"] == "own"
    assert 0.4 < again["wait"] <= 0.5
    assert not o.fall_back(late)                          # then fn runs here
    assert o.ran_alone(b"v", late, o.retried).retried
    c = FakeClient()
    owner = FlightHandle(c, None, m.joined("k", {"role": "owner", "flight": 1, "fence": 9,
                                                 "superseded": 7, "version": "v2"}),
                         threading.Event)
    assert (owner.superseded, owner.version) == (7, "v2")
    r = o.owned(owner, b"out")
    assert (r.source, r.fence, r.superseded, r.retried) == ("owner", 9, 7, True)
    assert o.completed_alone(b"out", down).fallback_cause == "unreachable"
    with pytest.raises(ValueError):
        once("maybe")


def test_subscription_queue_and_its_end():
    c = FakeClient()
    s = SubscriptionBase(c, ["ch"], None)
    for i in range(5):
        s._q.push(i, 1)
    assert s.dropped == 2                                 # max_queued 3: oldest dropped
    s._open = True
    assert s._item(1) and not s._item(Closed(coord.ConnectionLost("x"), True))
    with pytest.raises(coord.ConnectionLost):
        s._item(Closed(coord.ConnectionLost("gone"), False))
    with pytest.raises(coord.ConnectionLost):
        s._check()                                        # and on every read after


def test_one_request_calls():
    q = calls.record_get("k")
    assert (q.op, q.fields, q.absent) == ("record.get", {"key": "k"}, True)
    assert q.missing() is None
    q2 = calls.leader_read("ws", "cursor")
    assert q2.parse({"value": b"1", "generation": 9}) == (b"1", 9)
    assert calls.publish("ch", "x").fields == {"channel": "ch", "data": b"x"}
    assert calls.watched(()) == ("-locks", "-flights", "-leaders")


def test_dial_decisions(tmp_path):
    path = str(tmp_path / "b.sock")
    enoent = OSError(errno.ENOENT, "No such file or directory")
    with pytest.raises(coord.ConnectError, match="no broker at"):
        Dial(path, autostart_ok=False, timeout=1.0).failed(enoent)
    d = Dial(path, autostart_ok=True, timeout=0.05)
    assert d.failed(enoent)                               # start one
    assert not d.started(False)                           # it exited
    assert 0 < d.pause(enoent) <= 0.05
    assert d.failed(enoent) and d.started(True)           # another, ready
    assert not d.failed(OSError(errno.EAGAIN, "again"))   # backlog full: wait
    time.sleep(0.06)
    with pytest.raises(coord.ConnectError, match="did not answer within"):
        d.pause(enoent)
    with pytest.raises(coord.ConnectError, match="cannot connect"):
        Dial(path, autostart_ok=True, timeout=1.0).failed(OSError(errno.EACCES, "denied"))


def test_an_owners_error_is_cut_in_utf8_bytes():
    from coord.handles import MAX_ERROR_CODE, MAX_ERROR_MESSAGE, owner_failure
    code, msg, retryable, after = owner_failure(ValueError("€" * 2000))
    assert msg == "€" * 1365 and len(msg.encode()) == MAX_ERROR_MESSAGE - 1   # whole characters
    assert (code, retryable, after) == ("ValueError", False, None)
    assert owner_failure(type("Ü" * 200, (ValueError,), {})())[0] == "Ü" * (MAX_ERROR_CODE // 2)
    assert owner_failure(ValueError("a\ud800b"))[1] == "a?b"     # UTF-8 cannot carry it
