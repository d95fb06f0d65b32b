"""client.py - the blocking client.

One connection (``_Conn``) has a reader thread that feeds the sans-I/O
``Core`` and completes the waiting calls, and routes events (lock lost,
flight abort, leader lost, channel messages) to their handles.  Callers
block on a per-call ``threading.Event``.  One ticker thread per client
renews leases (locks and leaderships) at a third of the lease and declares
a lease lost locally once its end passed without an acknowledged renewal.

A call that waits (lock, flight join, campaign) and is interrupted
(KeyboardInterrupt, or ``cancel()`` from another thread) sends the
protocol's ``cancel``; if the grant raced the cancel, the grant is handed
back (released, resigned, failed as retryable).  Every other request has
a deadline (``request_timeout``): a broker that stops answering makes the
call raise ``Timeout``, never hang.

The reader handles the frames of each read in wire order (replies and
events alike), so a caller woken by a reply sees every event sent before
it.  Locks: ``_connect_mu`` serializes connecting (it is held while a
connection opens); ``_mu`` guards the client's state and is never held
while waiting for the broker or joining a thread, so a reader thread that
ends (needing ``_mu`` in ``_conn_lost``) is never waited for under it.
"""
from __future__ import annotations

import concurrent.futures
import heapq
import itertools
import os
import queue
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

from . import descfile
from . import messages as m
from .core import (DEFAULT_MAX_FRAME, DEFAULT_MAX_QUEUED, DEFAULT_MAX_QUEUED_BYTES,
                   DEFAULT_REQUEST_TIMEOUT, Core, Event, EventQueue, Reply)
from .errors import (Backoff, ConnectError, ConnectionLost, CoordError, FlightFailed,
                     LockLost, NotFound, ProtocolError, Refused, ShuttingDown, Timeout)
from .handles import (LeaderTerm, Result, State, backstop, check_request_timeout,
                      no_reply, owner_failure, wait_error)
from .handles import after_timeout, check_fallback, fallback_cause
from .paths import (DEFAULT_CONNECT_TIMEOUT, DEFAULT_IDLE_EXIT, MIN_HELLO_TIMEOUT,
                    default_socket_path, instance_id, open_socket, program_name)

Callback = Callable[["_Call", Optional[Reply], Optional[BaseException]], None]


class _Call:
    """One request's future.  ``hook`` runs in the reader thread before
    anyone is woken (it registers what the reply creates, so an event right
    behind the reply finds it); ``callback`` runs there after."""

    __slots__ = ("_ev", "_mu", "reply", "exc", "hook", "callback", "_abandon", "rid")

    def __init__(self, hook: Optional[Callable[[Reply], None]] = None,
                 callback: Optional[Callback] = None) -> None:
        self._ev = threading.Event()
        self._mu = threading.Lock()
        self.reply: Optional[Reply] = None
        self.exc: Optional[BaseException] = None
        self.hook = hook
        self.callback = callback
        self._abandon: Optional[Callable[[Reply], None]] = None
        self.rid = 0

    def _complete(self, reply: Reply) -> None:
        if self.hook is not None:
            try:
                self.hook(reply)
            except Exception:
                pass
        with self._mu:
            self.reply = reply
            self._ev.set()
            ab = self._abandon
        if ab is not None:
            ab(reply)
        if self.callback is not None:
            self.callback(self, reply, None)

    def _fail(self, exc: BaseException) -> None:
        with self._mu:
            self.exc = exc
            self._ev.set()
        if self.callback is not None:
            self.callback(self, None, exc)

    def abandon(self, fn: Callable[[Reply], None]) -> None:
        """Nobody waits any more: fn(reply) hands back what the reply
        grants, now if it already came, else when it comes."""
        with self._mu:
            if not self._ev.is_set():
                self._abandon = fn
                return
            reply = self.reply
        if reply is not None:
            fn(reply)

    def wait(self, timeout: Optional[float] = None, op: str = "") -> Reply:
        """The reply; ``Timeout`` when timeout (seconds) passed without one
        (the request stays registered: a late reply completes nothing)."""
        if not self._ev.wait(timeout):
            assert timeout is not None
            raise no_reply(op, timeout)
        if self.exc is not None:
            raise self.exc
        assert self.reply is not None
        return self.reply


class _HelloDropped(ConnectError):
    """The connection closed before hello was answered."""


class _Conn:
    """One connection: socket, core, reader thread."""

    def __init__(self, client: "Client", sock: Any) -> None:
        self.client = client
        self.sock = sock
        self.core: Core[_Call] = Core()
        self.core_mu = threading.Lock()     # the core's state
        self.send_mu = threading.Lock()     # whole frames on the socket
        self.alive = True
        self.error: Optional[BaseException] = None
        self.conn_id = 0
        self.epoch = 0
        self.broker = ""
        self.lost_seen = False              # _conn_lost ran (guarded by client._mu)
        self.reader = threading.Thread(target=self._read, name="coord-reader", daemon=True)

    def send(self, op: str, fields: Dict[str, Any], hook: Optional[Callable[[Reply], None]] = None,
             callback: Optional[Callback] = None) -> _Call:
        call = _Call(hook, callback)
        with self.send_mu:
            with self.core_mu:
                if not self.alive:
                    raise self.error or ConnectionLost("not connected")
                call.rid, frame = self.core.request(op, fields, call)
            try:
                self.sock.sendall(frame)
            except OSError:
                pass      # the reader sees the close and fails the call
        return call

    def call(self, op: str, fields: Dict[str, Any],
             hook: Optional[Callable[[Reply], None]] = None) -> Reply:
        """A request that does not wait by design: its reply within the
        client's ``request_timeout``, else ``Timeout``."""
        return self.send(op, fields, hook).wait(self.client.request_timeout, op)

    def _read(self) -> None:
        err: Optional[BaseException] = None
        try:
            while True:
                data = self.sock.recv(262144)
                if not data:
                    break
                with self.core_mu:
                    items = self.core.receive(data)
                # in wire order: the caller a reply wakes has seen every
                # event before it; an event after a reply finds what the
                # reply's hook registered
                for call, item in items:
                    if call is None:
                        self.client._dispatch(item)  # type: ignore[arg-type]
                    else:
                        call._complete(item)  # type: ignore[arg-type]
        except ProtocolError as e:
            err = e
        except OSError as e:
            # a refusal the broker wrote before closing was read first
            if self.core.bye is None:
                err = ConnectionLost(f"the connection to the broker failed: {e.strerror}")
        finally:
            with self.core_mu:
                self.alive = False
                handles = self.core.close()
                exc = err or self.core.close_error()
                self.error = exc
            try:
                self.sock.close()
            except OSError:
                pass
            for h in handles:
                h._fail(exc)
            self.client._conn_lost(self, exc)

    def shutdown(self) -> None:
        try:
            self.sock.shutdown(2)
        except OSError:
            pass
        if threading.current_thread() is not self.reader and self.reader.is_alive():
            self.reader.join(5)


class _Ticker:
    """One thread running timed callbacks (lease renewals) in order."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._heap: List[Tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._thread: Optional[threading.Thread] = None
        self._stopped = False

    def at(self, when: float, fn: Callable[[], None]) -> None:
        with self._cv:
            if self._stopped:
                return
            heapq.heappush(self._heap, (when, next(self._seq), fn))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="coord-renew",
                                                daemon=True)
                self._thread.start()
            self._cv.notify()

    def _run(self) -> None:
        while True:
            with self._cv:
                while True:
                    if self._stopped:
                        return
                    now = time.monotonic()
                    if self._heap and self._heap[0][0] <= now:
                        fn = heapq.heappop(self._heap)[2]
                        break
                    self._cv.wait(self._heap[0][0] - now if self._heap else None)
            try:
                fn()
            except Exception:
                pass

    def stop(self) -> None:
        with self._cv:
            self._stopped = True
            self._heap.clear()
            self._cv.notify()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(5)


def _wait(conn: _Conn, call: _Call, owner: Any, give_back: Callable[[Reply], None],
          op: str, limit: Optional[float]) -> Reply:
    """Waits for a call that may wait long (limit: seconds, None for as
    long as it takes); on an interruption, or the limit passed, sends
    cancel and arranges for a raced grant to be handed back."""
    owner._waiting = (conn, call)
    try:
        return call.wait(limit, op)
    except BaseException:
        if call.reply is None and call.exc is None:
            _send_cancel(conn, call.rid)
            call.abandon(give_back)
        raise
    finally:
        owner._waiting = None


def _send_cancel(conn: _Conn, rid: int) -> None:
    try:
        conn.send("cancel", {"target": rid}, callback=lambda *a: None)
    except CoordError:
        pass


def _cancel_waiting(owner: Any) -> bool:
    w = owner._waiting
    if w is None:
        return False
    _send_cancel(w[0], w[1].rid)
    return True


class Lock:
    """A lock on ``name``; ``with`` acquires it (raising ``Timeout``,
    ``Aborted``, ``ConnectionLost``... when it cannot: the block never runs
    without the lock) and releases it.  ``lost`` is set when the lock is
    stolen, expires or its connection goes."""

    def __init__(self, client: "Client", name: m.Name, mode: str = "exclusive", *,
                 timeout: Optional[float] = None, lease: Optional[float] = None,
                 steal: bool = False) -> None:
        self._client = client
        self.name = m.name(name)
        self.mode = mode
        self.timeout = timeout
        self.lease = lease
        self.steal = steal
        self.token: Optional[int] = None
        self.id: Optional[int] = None
        self.lost = threading.Event()
        self.lost_reason: Optional[str] = None
        self._held = False
        self._conn: Optional[_Conn] = None
        self._deadline = 0.0
        self._waiting: Optional[Tuple[_Conn, _Call]] = None
        m.lock_acquire(self.name, mode, steal=steal, timeout=timeout, lease=lease)

    @property
    def held(self) -> bool:
        return self._held

    def acquire(self, *, if_available: bool = False) -> bool:
        """Waits for the lock (up to ``timeout``); True once held.  With
        ``if_available`` (or ``timeout=0``) returns False at once when busy."""
        if self._held:
            raise RuntimeError("lock already held by this handle")
        try_once = if_available or self.timeout == 0
        fields = m.lock_acquire(self.name, self.mode, if_available=try_once,
                                steal=self.steal,
                                timeout=None if try_once else self.timeout,
                                lease=self.lease)
        conn = self._client._ensure()
        self.lost.clear()
        self.lost_reason = None
        call = conn.send("lock.acquire", fields, hook=lambda r: self._granted(conn, r, time.monotonic()))
        reply = _wait(conn, call, self, lambda r: self._give_back(conn, r), "lock.acquire",
                      backstop(0 if try_once else self.timeout, self._client.request_timeout))
        if not reply.ok:
            raise wait_error(reply, f"lock {self.name!r} not granted", self.timeout)
        if not reply.get("granted"):
            return False
        if self.lease:
            self._client._ticker.at(self._next_tick(), self._tick)
        return True

    def _granted(self, conn: _Conn, r: Reply, arrived: float) -> None:
        if r.ok and r.get("granted"):
            self.id = m.uint(r.body, "lock")
            self.token = m.uint(r.body, "token")
            self._conn = conn
            self._held = True
            self._deadline = arrived + (self.lease or 0)
            self._client._router.locks[self.id] = self

    def _give_back(self, conn: _Conn, r: Reply) -> None:
        if r.ok and r.get("granted"):
            self._forget()
            try:
                conn.send("lock.release", {"lock": m.uint(r.body, "lock")},
                          callback=lambda *a: None)
            except CoordError:
                pass

    def cancel(self) -> bool:
        """From another thread: abort a waiting acquire (it raises
        ``Aborted``).  False when nothing waits."""
        return _cancel_waiting(self)

    def _forget(self) -> None:
        self._held = False
        if self.id is not None:
            self._client._router.locks.pop(self.id, None)

    def _lost(self, reason: str) -> None:
        if not self._held:
            return
        self._forget()
        self.lost_reason = reason
        self.lost.set()

    def _next_tick(self) -> float:
        assert self.lease
        return min(time.monotonic() + self.lease / 3.0, self._deadline)

    def _tick(self) -> None:
        conn = self._conn
        if not self._held or conn is None or not self.lease:
            return
        now = time.monotonic()
        if now >= self._deadline:
            lock_id = self.id
            self._lost("expired")
            try:
                conn.send("lock.release", {"lock": lock_id}, callback=lambda *a: None)
            except CoordError:
                pass
            return
        lease = self.lease

        def done(_c: _Call, r: Optional[Reply], _e: Optional[BaseException]) -> None:
            if r is not None and r.ok:
                self._deadline = max(self._deadline, now + lease)
            elif r is not None and r.code == "UNKNOWN_LOCK":
                self._lost("expired")
        try:
            conn.send("lock.renew", {"lock": self.id, "lease_ms": m.ms(lease, "lease")},
                      callback=done)
        except CoordError:
            return
        self._client._ticker.at(self._next_tick(), self._tick)

    def renew(self, lease: Optional[float] = None) -> None:
        """Renews now (and sets a new lease length; 0 removes the lease)."""
        self.check()
        if lease is not None:
            self.lease = lease or None
        assert self._conn is not None
        now = time.monotonic()
        r = self._conn.call("lock.renew", {"lock": self.id,
                                          "lease_ms": m.ms(self.lease or 0, "lease")})
        if not r.ok:
            if r.code == "UNKNOWN_LOCK":
                self._lost("expired")
                self.check()
            raise r.error()
        if self.lease:
            self._deadline = now + self.lease

    def release(self) -> None:
        """Releases the lock (nothing when it is not held any more).  The
        name is free for others once this returns."""
        conn = self._conn
        if not self._held or conn is None:
            return
        lock_id = self.id
        self._forget()
        try:
            r = conn.call("lock.release", {"lock": lock_id})
        except ConnectionLost:
            return
        if not r.ok and r.code != "UNKNOWN_LOCK":
            raise r.error()

    def check(self) -> None:
        """Raises ``LockLost`` if the lock is not held any more."""
        if self.lost.is_set():
            raise LockLost(f"lock {self.name!r} lost: {self.lost_reason}")
        if not self._held:
            raise LockLost(f"lock {self.name!r} is not held")

    def __enter__(self) -> "Lock":
        if not self.acquire():
            raise Timeout(f"lock {self.name!r} is busy")
        return self

    def __exit__(self, et: Any, ev: Any, tb: Any) -> None:
        lost = self.lost.is_set()
        self.release()
        if lost and et is None:
            raise LockLost(f"lock {self.name!r} was lost while the block ran: "
                           f"{self.lost_reason}")

    def __repr__(self) -> str:
        return f"<coord.Lock {self.name!r} {self.mode} token={self.token} held={self._held}>"


class Flight:
    """The settled role of a join.  As the owner (``role == "owner"``):
    ``fence``, ``aborted`` (set on ``flight.abort``: deadline, orphaned,
    connection lost), ``complete`` and ``fail``; ``stale`` (a ``Stale``)
    when this owner revalidates a stale record, ``bypass`` when the key's
    prefix is disabled (no deduplication, no record).  As a result:
    ``result``, ``source``, ``age``, and ``stale`` / ``revalidating`` /
    ``updated`` (a ``concurrent.futures.Future`` of the ``Updated``, with
    ``notify``) when it was served stale.  Failed: ``error``,
    ``retryable``, ``retry_after`` (seconds, in a backoff).  ``role ==
    "local"``: ``once(fallback="run")`` runs fn without the broker."""

    def __init__(self, client: "Client", conn: Optional[_Conn], j: m.Joined) -> None:
        self._client = client
        self._conn = conn
        self.role = j.role
        self.key = j.key
        self.flight = j.flight
        self.fence = j.fence
        self.result = j.result
        self.error = j.error
        self.retryable = j.retryable
        self.age = j.age
        self.source = j.source
        self.stale = j.stale
        self.revalidating = j.revalidating
        self.bypass = j.bypass
        self.superseded = j.superseded
        self.version = j.version
        self.retry_after = j.retry_after
        self.updated: Optional["concurrent.futures.Future[m.Updated]"] = None
        self.aborted = threading.Event()
        self.abort_reason: Optional[str] = None
        self.done = False

    def _updated(self, u: m.Updated) -> None:
        if self.updated is not None and not self.updated.done():
            self.updated.set_result(u)

    def _watch_lost(self, exc: BaseException) -> None:
        if self.updated is not None and not self.updated.done():
            self.updated.set_exception(exc)

    def _abort(self, reason: str) -> None:
        self.abort_reason = reason
        self.aborted.set()

    def check(self) -> None:
        """Raises ``Aborted`` once the broker told the owner to stop."""
        if self.aborted.is_set():
            from .errors import Aborted
            raise Aborted(f"flight {self.key!r} aborted: {self.abort_reason}")

    def _end(self, op: str, fields: Dict[str, Any]) -> int:
        if self.role != "owner" or self._conn is None:
            raise RuntimeError("only the owner completes or fails a flight")
        self.done = True
        self._client._router.flights.pop(self.flight, None)
        r = self._conn.call(op, dict(flight=self.flight, fence=self.fence, **fields))
        if not r.ok:
            raise r.error()
        return m.uint(r.body, "delivered")

    def complete(self, result: m.Payload, keep: Optional[float] = None) -> int:
        """Delivers result to the followers (and stores it ``keep``
        seconds); returns how many got it.  ``Fenced`` when too late."""
        return self._end("flight.complete", {"result": m.payload(result, "result"),
                                             "keep_ms": m.ms(keep, "keep")})

    def fail(self, code: str, message: str = "", retryable: bool = False,
             keep: Optional[float] = None, retry_after: Optional[float] = None) -> int:
        """Fails the flight; ``retry_after`` seconds (needs ``retryable``)
        starts a backoff: joins of the key get this failure at once for
        that long."""
        return self._end("flight.fail", _fail_fields(code, message, retryable, keep,
                                                     retry_after))

    def __repr__(self) -> str:
        return f"<coord.Flight {self.key!r} {self.role} fence={self.fence}>"


def _fail_fields(code: str, message: str, retryable: bool, keep: Optional[float],
                 retry_after: Optional[float]) -> Dict[str, Any]:
    if retry_after is not None and not retryable:
        raise ValueError("retry_after needs retryable=True")
    return {"error": {"code": code, "message": message}, "retryable": retryable,
            "retry_after_ms": m.ms(retry_after, "retry_after") or None,
            "keep_ms": m.ms(keep, "keep")}


def _notify_thread(fn: Callable[[m.Updated], Any]) -> Callable[[Any], None]:
    """A Future callback that runs fn(updated) in a thread of its own (so
    that fn may call the client: the reader thread resolves the future)."""
    def done(fut: "concurrent.futures.Future[m.Updated]") -> None:
        if fut.cancelled() or fut.exception() is not None:
            return
        threading.Thread(target=fn, args=(fut.result(),), name="coord-notify",
                         daemon=True).start()
    return done


# What "the broker cannot be reached" means for once(fallback="run").
_UNREACHABLE = (ConnectError, ConnectionLost, ShuttingDown)


class _FlightAPI:
    """``c.flight``: the single-flight calls one by one."""

    def __init__(self, client: "Client") -> None:
        self._c = client
        self._waiting: Optional[Tuple[_Conn, _Call]] = None

    def join(self, key: m.Name, *, ttl: Optional[float] = 30.0, wait: Optional[float] = None,
             max_age: Optional[float] = None, abort_when_orphaned: bool = False,
             stale: Optional[float] = None, notify: bool = False, supersede: bool = False,
             priority: int = 0, version: Optional[m.Name] = None,
             other_version: Optional[str] = None) -> Flight:
        """Joins the flight of key; returns when the role is settled.
        ``Timeout`` when ``wait`` passed with no result.  ``stale``
        seconds: a record older than ``max_age`` but within ``stale``
        more is served at once (``f.stale``, ``f.revalidating``) or, when
        nobody revalidates it, makes this caller the owner of its
        revalidation (``f.stale`` holds it); ``notify``: a caller served
        stale gets ``f.updated`` resolved when the revalidation ends."""
        k = m.name(key, "key")
        fields = m.flight_join(k, ttl=ttl, wait=wait, max_age=max_age,
                               abort_when_orphaned=abort_when_orphaned, stale=stale,
                               notify=notify, supersede=supersede, priority=priority,
                               version=version, other_version=other_version)
        c = self._c
        conn = c._ensure()
        box: List[Flight] = []

        def hook(r: Reply) -> None:
            if r.ok:
                f = Flight(c, conn, m.joined(k, r.body))
                if f.role == "owner":
                    c._router.flights[f.flight] = f
                elif notify and f.stale is not None and f.revalidating:
                    f.updated = concurrent.futures.Future()
                    c._router.watch(k, f)
                box.append(f)

        def give_back(r: Reply) -> None:
            if box and box[0].role == "owner":
                c._router.flights.pop(box[0].flight, None)
                try:
                    conn.send("flight.fail", {"flight": box[0].flight, "fence": box[0].fence,
                                              "error": {"code": "ABORTED",
                                                        "message": "the owner gave up"},
                                              "retryable": True}, callback=lambda *a: None)
                except CoordError:
                    pass
        call = conn.send("flight.join", fields, hook=hook)
        r = _wait(conn, call, self, give_back, "flight.join",
                  backstop(wait, c.request_timeout))
        if not r.ok:
            raise wait_error(r, f"flight {k!r}: no result", wait)
        return box[0]

    def complete(self, f: Flight, result: m.Payload, keep: Optional[float] = None) -> int:
        return f.complete(result, keep)

    def fail(self, f: Flight, code: str, message: str = "", retryable: bool = False,
             keep: Optional[float] = None, retry_after: Optional[float] = None) -> int:
        return f.fail(code, message, retryable, keep, retry_after)

    def list(self) -> List[m.FlightEntry]:
        return m.flight_list(self._c.call("flight.list"))

    def disable(self, prefix: m.Name = "") -> None:
        """The kill switch: every new join of a key starting with prefix
        ("" = every key of the scope) owns a flight of its own at once
        (``bypass``: no deduplication, no record written).  Durable;
        announced on ``-flights``."""
        self._c.call("flight.disable", prefix=m.name(prefix, "prefix"))

    def enable(self, prefix: m.Name = "") -> None:
        self._c.call("flight.enable", prefix=m.name(prefix, "prefix"))

    def disabled(self) -> List[Union[str, bytes]]:
        """The disabled prefixes of the scope."""
        return m.prefixes(self._c.call("flight.disabled"))


class _RecordAPI:
    """``c.records``: the stored completion records of the scope."""

    def __init__(self, client: "Client") -> None:
        self._c = client

    def get(self, key: m.Name) -> Optional[m.Record]:
        k = m.name(key, "key")
        try:
            return m.record(k, self._c.call("record.get", key=k))
        except NotFound:
            return None

    def list(self, prefix: m.Name = "", limit: Optional[int] = None) -> List[m.RecordEntry]:
        return m.record_list(self._c.call("record.list", prefix=m.name(prefix, "prefix"),
                                          limit=limit))

    def purge(self, prefix: m.Name = "") -> m.Purged:
        return m.purged(self._c.call("record.purge", prefix=m.name(prefix, "prefix")))


class Leadership(LeaderTerm):
    """Leadership of a workstream.  ``with`` campaigns (raising
    ``Timeout``, ``Disabled``, ``ProtocolPinned``, ``Policy``,
    ``Aborted``... when not elected: the block never runs as a non-leader)
    and resigns.  ``lost`` is set when the lease ends, someone steals, the
    workstream is disabled, a max hold fences it or the connection goes;
    the term's calls then raise ``Fenced``.  ``drain_requested`` is set by
    ``leader.drain`` (``drain_reason``: requested, max_hold); ``mode``
    follows ``leader.mode``."""

    def __init__(self, client: "Client", workstream: m.Name, *, lease: Optional[float] = m.DEFAULT_LEASE,
                 steal: bool = False, timeout: Optional[float] = None,
                 protocol: Optional[str] = None, incident: Optional[str] = None) -> None:
        super().__init__(workstream, lease=lease, steal=steal, timeout=timeout,
                         protocol=protocol, incident=incident, event=threading.Event)
        self._client = client
        self._conn: Optional[_Conn] = None
        self._waiting: Optional[Tuple[_Conn, _Call]] = None

    def campaign(self, *, if_available: bool = False) -> bool:
        """Waits to be elected (up to ``timeout``); True once leading.  With
        ``if_available`` (or ``timeout=0``) False at once when led."""
        fields = self._campaign_fields(if_available)
        conn = self._client._ensure()
        self._begin()
        call = conn.send("leader.campaign", fields, hook=lambda r: self._granted(conn, r, time.monotonic()))
        try:
            r = _wait(conn, call, self, lambda r: self._give_back(conn, r), "leader.campaign",
                      backstop(0 if fields.get("if_available") else self.timeout,
                               self._client.request_timeout))
        except BaseException:
            self._refused(None)
            raise
        if not r.ok:
            self._refused(r)
            raise wait_error(r, f"{self.workstream!r}: not elected", self.timeout)
        if not r.get("granted"):
            self._refused(r)
            return False
        self._client._ticker.at(self._next_tick(), self._tick)
        return True

    def _granted(self, conn: _Conn, r: Reply, arrived: float) -> None:
        if self._grant(r, arrived):
            self._conn = conn
            self._client._router.leaders[self.key] = self

    def _give_back(self, conn: _Conn, r: Reply) -> None:
        if r.ok and r.get("granted"):
            self._forget()
            self.state = State.ABORTED
            try:
                conn.send("leader.resign", m.term(self.workstream, m.uint(r.body, "generation")),
                          callback=lambda *a: None)
            except CoordError:
                pass

    def cancel(self) -> bool:
        """From another thread: abort a waiting campaign."""
        return _cancel_waiting(self)

    def _forget(self) -> None:
        if self.generation is not None:
            self._client._router.leaders.pop(self.key, None)

    def _lost(self, reason: str, incident: Optional[str] = None) -> None:
        if self.leading:
            self._forget()
            self._end(reason, incident)

    def _tick(self) -> None:
        conn = self._conn
        if not self.leading or conn is None:
            return
        now = time.monotonic()
        if now >= self._deadline:
            self._lost("expired")
            return

        def done(_c: _Call, r: Optional[Reply], _e: Optional[BaseException]) -> None:
            if r is not None and r.ok:
                self._renewed(r, now)
            elif r is not None and r.code == "FENCED":
                self._lost("fenced")
        try:
            conn.send("leader.renew", self._fields(), callback=done)
        except CoordError:
            return
        self._client._ticker.at(self._next_tick(), self._tick)

    def _call(self, op: str, fields: Dict[str, Any], parse: Callable[[Dict[str, Any]], Any]
              ) -> Any:
        f = self._fields(**fields)
        assert self._conn is not None
        r = self._conn.call(op, f)
        if not r.ok:
            if r.code == "FENCED":
                self._lost("fenced")
            raise r.error()
        return parse(r.body)

    def commit(self, op_id: m.Name, key: Optional[m.Name] = None,
               value: Optional[m.Payload] = None) -> m.Commit:
        """Applies key=value (or, without key, records that op_id's effect
        happened) once per op_id, and settles its claim.  The ``Commit`` is
        true when applied now; else ``duplicate`` (with the generation that
        applied it) or ``abandoned``.  ``Fenced`` when the term is over,
        ``ReadOnly`` in the shadow and read-only modes."""
        return self._call("leader.commit", m.commit(op_id, key, value), m.commit_result)

    def claim(self, op_id: m.Name) -> m.Claim:
        """Claims op_id for this generation before doing its external
        effect (stored and synced first).  See ``Claim``: ``reconcile``
        means an earlier leader claimed it and never settled it.
        ``Draining`` once the term drains."""
        k = m.name(op_id, "op_id")
        return self._call("leader.claim", {"op_id": k}, lambda b: m.claim(k, b))

    def abandon(self, op_id: m.Name, reason: str) -> m.Abandon:
        """Settles op_id as never to be done (``reason``: 1..256 bytes)."""
        return self._call("leader.abandon", m.abandon(op_id, reason), m.abandon_result)

    def drain(self) -> None:
        """Announces the term is finishing: new claims get ``Draining``;
        commits and abandons still work; ``resign`` ends it."""
        self._call("leader.drain", {}, lambda b: None)
        self._drained()

    def pending(self, limit: Optional[int] = None) -> m.Page:
        """The workstream's claimed, unsettled ops (``PendingOp``), oldest
        first: a new leader reconciles each one."""
        return self._client.leader.pending(self.workstream, limit)

    def read(self, key: m.Name) -> Optional[bytes]:
        got = self._client.leader.read(self.workstream, key)
        return got[0] if got else None

    def resign(self) -> None:
        """Ends the term (nothing when it is over already)."""
        if not self.leading or self._conn is None:
            return
        conn = self._conn
        f = m.term(self.workstream, self.generation)
        self._forget()
        self._end(None)
        try:
            r = conn.call("leader.resign", f)
        except ConnectionLost:
            return
        if not r.ok and r.code != "FENCED":
            raise r.error()

    def __enter__(self) -> "Leadership":
        try:
            granted = self.campaign()
        except _UNREACHABLE as e:   # no broker: the workstream's fallback, else e
            return descfile.on_unreachable(self, e)  # type: ignore[return-value]
        if not granted:
            raise Timeout(f"{self.workstream!r} has a leader")
        return self

    def __exit__(self, et: Any, ev: Any, tb: Any) -> None:
        lost = self.lost.is_set()
        self.resign()
        if lost and et is None:
            raise self._lost_error()


class _LeaderAPI:
    """``c.leader(ws, ...)`` makes a Leadership; ``c.leader.define/
    describe/info/history/check/pending/drain/read/disable/enable`` act on a
    workstream."""

    def __init__(self, client: "Client") -> None:
        self._c = client

    def __call__(self, workstream: m.Name, *, lease: Optional[float] = m.DEFAULT_LEASE,
                 steal: bool = False, timeout: Optional[float] = None,
                 protocol: Optional[str] = None, incident: Optional[str] = None) -> Leadership:
        return Leadership(self._c, workstream, lease=lease, steal=steal, timeout=timeout,
                          protocol=protocol, incident=incident)

    def define(self, workstream: m.Name, *, protocol: Any = m.OMIT, max_hold: Any = m.OMIT,
               steal: Any = m.OMIT, mode: Any = m.OMIT, fallback: Any = m.OMIT,
               canonical_fence: Any = m.OMIT, force: bool = False) -> m.Descriptor:
        """Changes the stored descriptor field by field: a field left out
        (``coord.OMIT``, the default) keeps its value, None returns it to
        its default, a value replaces it.  Returns the descriptor."""
        return m.descriptor(self._c.call("leader.define", **m.define(
            workstream, protocol=protocol, max_hold=max_hold, steal=steal, mode=mode,
            fallback=fallback, canonical_fence=canonical_fence, force=force)))

    def describe(self, workstream: m.Name) -> m.Descriptor:
        """The stored descriptor; ``NotFound`` when never defined."""
        return m.descriptor(self._c.call("leader.describe",
                                         workstream=m.name(workstream, "workstream")))

    def info(self, workstream: m.Name) -> m.LeaderInfo:
        return m.leader_info(self._c.call("leader.info",
                                          workstream=m.name(workstream, "workstream")))

    def history(self, workstream: m.Name, limit: Optional[int] = None) -> m.Page:
        """The last terms (``Term``), newest first."""
        return m.history(self._c.call("leader.history",
                                      workstream=m.name(workstream, "workstream"),
                                      limit=m.limit(limit)))

    def pending(self, workstream: m.Name, limit: Optional[int] = None) -> m.Page:
        return m.pending(self._c.call("leader.pending",
                                      workstream=m.name(workstream, "workstream"),
                                      limit=m.limit(limit)))

    def check(self, workstream: m.Name, generation: int) -> m.Check:
        """Whether ``generation`` is live now (``Fenced`` if not): for a
        service acting on a leader's behalf; a check, not a lock."""
        return m.check(self._c.call("leader.check", **m.term(workstream, generation)))

    def drain(self, workstream: m.Name, generation: Optional[int] = None) -> None:
        """Asks the leader to drain (it gets ``leader.drain``, reason
        "requested"); ``generation`` defaults to the live one."""
        if generation is None:
            generation = self.info(workstream).live_generation or 0
        self._c.call("leader.drain", **m.term(workstream, generation))

    def read(self, workstream: m.Name, key: m.Name) -> Optional[Tuple[bytes, int]]:
        try:
            b = self._c.call("leader.read", workstream=m.name(workstream, "workstream"),
                             key=m.name(key, "key"))
        except NotFound:
            return None
        return m.as_bytes(b.get("value")), m.uint(b, "generation")

    def disable(self, workstream: m.Name) -> int:
        return m.uint(self._c.call("leader.disable",
                                   workstream=m.name(workstream, "workstream")), "generation")

    def enable(self, workstream: m.Name) -> None:
        self._c.call("leader.enable", workstream=m.name(workstream, "workstream"))


class _Closed:
    def __init__(self, exc: BaseException, reconnect: bool) -> None:
        self.exc = exc
        self.reconnect = reconnect


class Subscription:
    """Messages of one or more channels.  ``for item in sub`` yields them
    (``Message`` for user channels, ``Lifecycle`` for the broker's); with
    ``timeout`` the loop ends once no item came for that long.  Items wait
    in a bounded queue (the client's ``max_queued`` items and
    ``max_queued_bytes``): when it is full the oldest are dropped, and
    ``dropped`` counts them."""

    def __init__(self, client: "Client", channels: List[Union[str, bytes]],
                 timeout: Optional[float] = None) -> None:
        self._client = client
        self.channels = channels
        self.timeout = timeout
        self._q = EventQueue(client.max_queued, client.max_queued_bytes)
        self._cv = threading.Condition(threading.Lock())
        self._open = False
        self._error: Optional[BaseException] = None

    @property
    def dropped(self) -> int:
        """Items dropped, oldest first, because the queue was full."""
        return self._q.dropped

    @property
    def queued(self) -> int:
        """Items waiting to be read."""
        with self._cv:
            return len(self._q)

    def _push(self, item: Any, size: int = 0) -> None:
        with self._cv:
            self._q.push(item, size)
            self._cv.notify()

    def _closed(self, exc: BaseException, reconnect: bool) -> None:
        with self._cv:
            self._q.push(_Closed(exc, reconnect))
            self._cv.notify()

    def _take(self, deadline: Optional[float]) -> Any:
        with self._cv:
            while not len(self._q):
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise queue.Empty
                self._cv.wait(left)
            return self._q.pop()

    def open(self) -> "Subscription":
        if not self._open:
            self._client._subscribe(self)
            self._open = True
        return self

    def close(self) -> None:
        if self._open:
            self._open = False
            self._client._unsubscribe(self)

    def get(self, timeout: Optional[float] = None) -> Any:
        """The next item, or None when timeout passed first."""
        if self._error is not None:
            raise self._error
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                item = self._take(deadline)
            except queue.Empty:
                return None
            if not isinstance(item, _Closed):
                return item
            if item.reconnect and self._open:
                try:
                    self._client._ensure()
                    continue
                except CoordError as e:
                    self._error = e
                    raise
            self._error = item.exc
            raise item.exc

    def __iter__(self) -> Any:
        while True:
            item = self.get(self.timeout)
            if item is None:
                return
            yield item

    def __enter__(self) -> "Subscription":
        return self.open()

    def __exit__(self, *a: Any) -> None:
        self.close()


class Client:
    """A connection to the per-user broker.

    ``socket``: the path (default ``$COORD_SOCKET``, ...); ``scope``
    namespaces everything; ``client`` names us in ``locks()`` and ``info``;
    ``autostart`` starts ``coordd`` (``broker`` or ``$COORD_BROKER`` or
    ``coordd`` from PATH) when nothing listens; ``reconnect``: after the
    connection is lost, the next call connects again (held locks and
    leaderships stay lost; subscriptions are renewed); ``lazy``: connect
    at the first call, not here (so that ``once(fallback="run")`` works
    when no broker can be reached at all); ``request_timeout``: seconds a
    request that does not wait by design (ping, release, commit, info...)
    waits for its reply before it raises ``Timeout`` (None: no deadline);
    ``max_queued`` / ``max_queued_bytes``: what a subscription nobody
    reads may hold before its oldest items are dropped (``dropped``)."""

    def __init__(self, socket: Optional[str] = None, *, scope: m.Name = "",
                 client: Optional[str] = None, autostart: bool = True,
                 broker: Optional[str] = None, connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
                 idle_exit: int = DEFAULT_IDLE_EXIT, reconnect: bool = False,
                 lazy: bool = False,
                 request_timeout: Optional[float] = DEFAULT_REQUEST_TIMEOUT,
                 max_queued: int = DEFAULT_MAX_QUEUED,
                 max_queued_bytes: int = DEFAULT_MAX_QUEUED_BYTES) -> None:
        self.request_timeout = check_request_timeout(request_timeout)
        EventQueue(max_queued, max_queued_bytes)       # ValueError early
        self.max_queued = max_queued
        self.max_queued_bytes = max_queued_bytes
        self.socket_path = socket or default_socket_path()
        self.scope = m.name(scope, "scope")
        self.client_name = client or program_name()
        self.autostart = autostart
        self.broker_path = broker
        self.connect_timeout = connect_timeout
        self.idle_exit = idle_exit
        self.reconnect = reconnect
        self._router = m.Router()
        self._ticker = _Ticker()
        self._mu = threading.RLock()            # state; never held while waiting
        self._connect_mu = threading.Lock()     # one connect at a time
        self._conn: Optional[_Conn] = None
        self._closed = False
        self.flight = _FlightAPI(self)
        self.records = _RecordAPI(self)
        self.leader = _LeaderAPI(self)
        if not lazy:
            self._ensure()

    # ---- connection ----

    def _open(self) -> _Conn:
        # A broker that dies with us in its backlog resets the connection
        # before hello is answered (a restart racing a reconnect), and one
        # that shuts down refuses with SHUTTING_DOWN: try again within
        # connect_timeout, as the first connect does.
        deadline = time.monotonic() + self.connect_timeout
        while True:
            try:
                return self._open_once()
            except _HelloDropped:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.01)

    def _open_once(self) -> _Conn:
        sock = open_socket(self.socket_path, autostart_ok=self.autostart,
                           broker=self.broker_path, idle_exit=self.idle_exit,
                           timeout=self.connect_timeout)
        conn = _Conn(self, sock)
        call = _Call()
        # hello is registered before the reader runs: a broker that refuses
        # us at once (full: LIMIT) closes before we write, and its refusal
        # must find the hello waiting, not a closed core
        with conn.core_mu:
            call.rid, frame = conn.core.hello(call, self.client_name, os.getpid(),
                                              instance_id(), self.scope)
        conn.reader.start()
        with conn.send_mu:
            try:
                sock.sendall(frame)
            except OSError:
                pass        # EPIPE: the reader reads the refusal, if one came
        hello_timeout = max(self.connect_timeout, MIN_HELLO_TIMEOUT)
        if not call._ev.wait(hello_timeout):
            conn.shutdown()
            raise ConnectError(f"the broker did not answer hello: timed out after "
                               f"{hello_timeout:g} s")
        try:
            r = call.wait()
        except CoordError as e:
            conn.shutdown()
            bye = conn.core.bye
            if bye is not None and not bye.ok and bye.code != "SHUTTING_DOWN":
                raise Refused(bye.code, bye.body.get("message")) from None
            if isinstance(e, ConnectionLost):
                raise _HelloDropped(f"hello: {e}") from None
            raise ConnectError(f"hello: {e}") from None
        if not r.ok:
            conn.shutdown()
            raise Refused(r.code, r.body.get("message"))
        conn.conn_id = m.uint(r.body, "conn")
        conn.epoch = m.uint(r.body, "epoch")
        conn.broker = str(r.get("broker", ""))
        mf = m.uint(r.body, "max_frame")
        if mf:
            try:
                with conn.core_mu:
                    conn.core.set_max_frame(mf)
            except ProtocolError:
                conn.shutdown()
                raise
        return conn

    def _ensure(self) -> _Conn:
        c = self._conn
        if c is not None and c.alive:
            return c
        with self._connect_mu:
            with self._mu:
                c = self._conn
                if c is not None and c.alive:
                    return c
                if self._closed:
                    raise ConnectionLost("the client is closed")
                if c is not None and not self.reconnect:
                    raise ConnectionLost(f"not connected: {c.error}")
            c = self._open()            # no _mu: its reader may need it
            with self._mu:
                if self._closed:
                    closed = True
                else:
                    closed = False
                    self._conn = c
                    channels = list(self._router.subs)
                    if c.lost_seen:     # it ended before it was ours
                        self._router.connection_lost(c.error or ConnectionLost("closed"),
                                                     keep_subs=self.reconnect)
            if closed:
                c.shutdown()
                raise ConnectionLost("the client is closed")
        for ch in channels:
            r = c.call("sub.subscribe", {"channel": ch})
            if not r.ok:
                raise r.error()
        return c

    def _conn_lost(self, conn: _Conn, exc: BaseException) -> None:
        with self._mu:
            conn.lost_seen = True
            if conn is not self._conn:
                return
            self._router.connection_lost(exc, keep_subs=self.reconnect and not self._closed)

    def _dispatch(self, ev: Event) -> None:
        with self._mu:
            self._router.dispatch(ev)

    @property
    def connected(self) -> bool:
        c = self._conn
        return c is not None and c.alive

    @property
    def conn_id(self) -> int:
        return self._conn.conn_id if self._conn else 0

    @property
    def epoch(self) -> int:
        return self._conn.epoch if self._conn else 0

    @property
    def broker_version(self) -> str:
        return self._conn.broker if self._conn else ""

    @property
    def max_frame(self) -> int:
        return self._conn.core.max_frame if self._conn else DEFAULT_MAX_FRAME

    def close(self) -> None:
        """Closes the connection: the broker releases our locks, resigns
        our leaderships, passes our flights on."""
        with self._mu:
            self._closed = True
            c = self._conn
        self._ticker.stop()
        if c is not None:
            c.shutdown()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *a: Any) -> None:
        self.close()

    # ---- raw calls ----

    def call(self, op: str, **fields: Any) -> Dict[str, Any]:
        """Any request (fields as on the wire, None left out); the reply's
        map, or the error for its code raised."""
        r = self._ensure().call(op, fields)
        if not r.ok:
            raise r.error()
        return r.body

    def ping(self) -> float:
        t = time.monotonic()
        self.call("ping")
        return time.monotonic() - t

    def stats(self) -> m.Stats:
        """The broker's counters (a dict); ``.latency`` has the latency
        percentiles as ``Latency`` (seconds)."""
        return m.Stats(self.call("stats"))

    # ---- locks ----

    def lock(self, name: m.Name, mode: str = "exclusive", *, timeout: Optional[float] = None,
             lease: Optional[float] = None, steal: bool = False) -> Lock:
        """A lock handle; ``with`` acquires it.  ``timeout`` seconds (None:
        wait forever, 0: only if free now), ``lease`` seconds renewed while
        held (None: no lease), ``steal`` breaks the holders."""
        return Lock(self, name, mode, timeout=timeout, lease=lease, steal=steal)

    def try_lock(self, name: m.Name, mode: str = "exclusive", *,
                 lease: Optional[float] = None) -> Optional[Lock]:
        """The lock, held, if it is free now; else None."""
        lk = Lock(self, name, mode, lease=lease)
        return lk if lk.acquire(if_available=True) else None

    def locks(self) -> m.LockState:
        """Held and waiting locks of the scope (``lock.query``)."""
        return m.lock_state(self.call("lock.query"))

    # ---- single-flight ----

    def once(self, key: m.Name, fn: Callable[[Flight], m.Payload], *, ttl: float = 30.0,
             wait: Optional[float] = None, keep: Optional[float] = None,
             max_age: Optional[float] = None, stale: Optional[float] = None,
             notify: Union[bool, Callable[[m.Updated], Any]] = False,
             fallback: str = "fail", retries: int = 3,
             abort_when_orphaned: bool = False, supersede: bool = False,
             priority: int = 0, version: Optional[m.Name] = None,
             other_version: Optional[str] = None) -> Result:
        """fn(flight) runs in one caller per key at a time; every concurrent
        caller gets its result, as a ``Result`` (bytes, with ``source``:
        owner, live, record, stale, bypass or local).

        ``keep``: store the result that long; ``max_age`` (default
        ``keep``): accept a stored one that young.  ``stale``: a stored
        result up to ``stale`` seconds older than that is served at once
        while one caller (whose fn sees it as ``flight.stale``)
        revalidates it; the record is then stored ``keep + stale``.
        ``notify``: True, or a function called (in a thread of its own)
        with the ``Updated`` when the revalidation a stale result waits
        for ends; either way ``result.updated`` is its future.

        fn raising ``FlightFailed`` fails the flight with its code,
        ``RetryAfter(seconds)`` also starts a backoff; another exception
        fails it (not retryable) and is re-raised.  Followers raise
        ``FlightFailed``, or ``Backoff`` (``.retry_after``) in a backoff;
        a retryable failure is retried up to ``retries`` times.
        ``fallback="run"``: when the broker cannot be reached (connect or
        autostart failed, the connection dropped while waiting, the broker
        shuts down), fn runs here without coordination and the result
        says ``source == "local"`` and why (``reason``)."""
        check_fallback(fallback)
        k = m.name(key, "key")
        store = keep + stale if keep and stale else keep
        deadline = None if wait is None else time.monotonic() + wait
        tries = 0
        retried = False
        while True:
            left = None if deadline is None else max(0.001, deadline - time.monotonic())
            try:
                f = self.flight.join(k, ttl=ttl, wait=left,
                                     max_age=keep if max_age is None else max_age,
                                     abort_when_orphaned=abort_when_orphaned, stale=stale,
                                     notify=bool(notify), supersede=supersede and not retried,
                                     priority=priority, version=version,
                                     other_version=other_version)
            except Timeout as e:
                act = after_timeout(fallback, retried)
                if act == "raise":
                    raise
                if act == "retry":
                    retried = True
                    deadline = None if wait is None else time.monotonic() + wait
                    continue
                r = self._run_local(k, fn, e)
                r.retried = retried
                return r
            except _UNREACHABLE as e:
                if fallback == "fail":
                    raise
                return self._run_local(k, fn, e)
            if f.role == "result":
                if f.updated is not None and callable(notify):
                    f.updated.add_done_callback(_notify_thread(notify))
                return Result(f.result or b"", "stale" if f.stale else f.source,
                              fence=f.fence, age=f.age, revalidating=f.revalidating,
                              updated=f.updated, retried=retried)
            if f.role == "failed":
                assert f.error is not None
                if f.retry_after is not None:
                    raise Backoff(f.error.code, f.error.message, f.retry_after,
                                  f.source or "live")
                if f.retryable and tries < retries and (deadline is None
                                                        or time.monotonic() < deadline):
                    tries += 1
                    continue
                raise FlightFailed(f.error.code, f.error.message, f.retryable)
            try:
                out = m.payload(fn(f), "result")
            except BaseException as e:
                code, msg, retryable, retry_after = owner_failure(e)
                try:
                    f.fail(code, msg, retryable, retry_after=retry_after)
                except CoordError:
                    pass
                raise
            try:
                f.complete(out, store)
            except _UNREACHABLE as e:
                if fallback == "fail":
                    raise
                return Result(out, "local", reason=f"ran as the owner, then: {e}",
                              fallback_cause="unreachable")
            return Result(out, "bypass" if f.bypass else "owner", fence=f.fence,
                          retried=retried, superseded=f.superseded)

    def _run_local(self, key: Union[str, bytes], fn: Callable[[Flight], m.Payload],
                   why: BaseException) -> Result:
        f = Flight(self, None, m.Joined(role="local", key=key, fence=0))
        return Result(m.payload(fn(f), "result"), "local", reason=str(why),
                      fallback_cause=fallback_cause(why))

    # ---- channels ----

    def publish(self, channel: m.Name, data: m.Payload) -> int:
        """Sends data to the scope's other subscribers; returns how many."""
        return m.uint(self.call("sub.publish", channel=m.name(channel, "channel"),
                                data=m.payload(data)), "delivered")

    def subscribe(self, *channels: m.Name, timeout: Optional[float] = None) -> Subscription:
        """``with c.subscribe("news") as sub: for msg in sub: ...``"""
        if not channels:
            raise TypeError("subscribe needs a channel")
        return Subscription(self, [m.name(ch, "channel") for ch in channels], timeout)

    def watch(self, *channels: str, timeout: Optional[float] = None) -> Subscription:
        """Lifecycle events of the broker's channels (default all three:
        ``-locks``, ``-flights``, ``-leaders``)."""
        return self.subscribe(*(channels or ("-locks", "-flights", "-leaders")),
                              timeout=timeout)

    def _subscribe(self, sub: Subscription) -> None:
        conn = self._ensure()
        for ch in sub.channels:
            k = m.name_key(ch)
            with self._mu:
                subs = self._router.subs.setdefault(k, [])
                first = not subs
                subs.append(sub)
            if first:
                try:
                    r = conn.call("sub.subscribe", {"channel": ch})
                except BaseException:
                    self._unsubscribe(sub)
                    raise
                if not r.ok:
                    self._unsubscribe(sub)
                    raise r.error()

    def _unsubscribe(self, sub: Subscription) -> None:
        last = []
        with self._mu:
            for ch in sub.channels:
                k = m.name_key(ch)
                subs = self._router.subs.get(k)
                if subs and sub in subs:
                    subs.remove(sub)
                    if not subs:
                        del self._router.subs[k]
                        last.append(ch)
            conn = self._conn
        if conn is None or not conn.alive:
            return
        for ch in last:
            try:
                conn.call("sub.unsubscribe", {"channel": ch})
            except CoordError:
                pass

    # ---- leadership ----

    def try_leader(self, workstream: m.Name, *, lease: Optional[float] = m.DEFAULT_LEASE,
                   protocol: Optional[str] = None, incident: Optional[str] = None
                   ) -> Optional[Leadership]:
        """Leadership if nobody leads now, else None."""
        lead = Leadership(self, workstream, lease=lease, protocol=protocol, incident=incident)
        return lead if lead.campaign(if_available=True) else None


def connect(socket: Optional[str] = None, **kw: Any) -> Client:
    """``Client(socket, **kw)``."""
    return Client(socket, **kw)
