"""aio.py - the asyncio client: the same shapes as the blocking one with
``async with`` / ``await`` / ``async for``.

Each connection is an ``asyncio.Protocol`` (``_AConn``): the bytes a read
brings are fed to the sans-I/O ``Core`` at once and its frames handled in
wire order, replies resolving the calls' futures and events going to
their handles (``lost`` and ``aborted`` are ``asyncio.Event``s here).
Leases renew in a task per lock or leadership.  Cancelling a task that
waits (lock, join, campaign) sends the protocol's ``cancel``; if the grant
raced it, the grant is handed back (released, resigned, failed as
retryable) before the cancellation goes on.  Every other request has a
deadline (``request_timeout``).

When a write fails (the broker closed: a full broker refuses at accept),
asyncio stops reading and closes the socket; what the broker sent before
closing (its refusal) is read from the socket first (``connection_lost``),
so the error says why.
"""
from __future__ import annotations

import asyncio
import errno
import os
import socket
import time
from typing import Any, AsyncIterator, Awaitable, Callable, Dict, List, Optional, Tuple, Union

from . import descfile
from . import messages as m
from .core import (DEFAULT_MAX_FRAME, DEFAULT_MAX_QUEUED, DEFAULT_MAX_QUEUED_BYTES,
                   DEFAULT_REQUEST_TIMEOUT, Core, Event, EventQueue, Reply)
from .client import _UNREACHABLE, _fail_fields
from .errors import (Aborted, Backoff, ConnectError, ConnectionLost, CoordError,
                     FlightFailed, LockLost, NotFound, ProtocolError, Refused, Timeout)
from .handles import (LeaderTerm, Result, State, backstop, check_request_timeout,
                      no_reply, owner_failure, wait_error)
from .handles import after_timeout, check_fallback, fallback_cause
from .paths import (DEFAULT_CONNECT_TIMEOUT, DEFAULT_IDLE_EXIT, MAX_BACKOFF, MIN_HELLO_TIMEOUT,
                    MAX_SPAWNS, autostart, check_peer, check_socket_path, default_socket_path,
                    instance_id, program_name)

GiveBack = Callable[[Reply], Optional["_ACall"]]


class _ACall:
    """A request's future; ``hook`` runs in the reader before the future
    resolves; ``abandon`` (set when the waiter was cancelled) hands back a
    raced grant."""

    __slots__ = ("fut", "hook", "abandon", "rid")

    def __init__(self, loop: asyncio.AbstractEventLoop,
                 hook: Optional[Callable[[Reply], None]] = None) -> None:
        self.fut: "asyncio.Future[Reply]" = loop.create_future()
        self.hook = hook
        self.abandon: Optional[GiveBack] = None
        self.rid = 0

    def _complete(self, reply: Reply) -> None:
        if self.hook is not None:
            try:
                self.hook(reply)
            except Exception:
                pass
        if not self.fut.done():
            self.fut.set_result(reply)
        if self.abandon is not None:
            self.abandon(reply)

    def _fail(self, exc: BaseException) -> None:
        if not self.fut.done():
            self.fut.set_exception(exc)
            self.fut.exception()     # retrieved: no "never retrieved" warning


class _AConn(asyncio.Protocol):
    """One connection: the transport, the core, the frames handled as
    they come (``data_received``), in wire order."""

    def __init__(self, client: "Client") -> None:
        self.client = client
        self.loop = asyncio.get_running_loop()
        self.core: Core[_ACall] = Core()
        self.transport: Optional[asyncio.Transport] = None
        self.alive = True
        self.error: Optional[BaseException] = None
        self.conn_id = 0
        self.epoch = 0
        self.broker = ""
        self.done: "asyncio.Future[None]" = self.loop.create_future()
        self._paused = False
        self._drained: List["asyncio.Future[None]"] = []

    # ---- asyncio.Protocol ----

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if not self.alive:
            return
        try:
            items = self.core.receive(data)
        except ProtocolError as e:
            self._finish(e)
            return
        for call, item in items:
            if call is None:
                self.client._router.dispatch(item)  # type: ignore[arg-type]
            else:
                call._complete(item)  # type: ignore[arg-type]

    def eof_received(self) -> Optional[bool]:
        return False            # close

    def connection_lost(self, exc: Optional[Exception]) -> None:
        if exc is not None and self.alive and self.transport is not None:
            self._read_rest()
        err: Optional[BaseException] = None
        if exc is not None and self.core.bye is None and self.error is None:
            err = ConnectionLost(f"the connection to the broker failed: {exc}")
        self._finish(err)

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        waiters, self._drained = self._drained, []
        for w in waiters:
            if not w.done():
                w.set_result(None)

    # ----

    def _read_rest(self) -> None:
        """After a failed write asyncio reads no more and closes the socket
        (it is still open here): read what the broker sent before it
        closed (a refusal), without blocking."""
        ts = self.transport.get_extra_info("socket") if self.transport else None
        if ts is None:
            return
        try:
            s = ts.dup()
        except OSError:
            return
        try:
            s.setblocking(False)
            while self.alive:
                data = s.recv(262144)
                if not data:
                    break
                self.data_received(data)
        except OSError:
            pass
        finally:
            s.close()

    def _finish(self, err: Optional[BaseException]) -> None:
        if not self.alive:
            return
        self.alive = False
        handles = self.core.close()
        exc = err or self.core.close_error()
        self.error = exc
        if self.transport is not None:
            self.transport.close()
        for h in handles:
            h._fail(exc)
        self.resume_writing()
        if not self.done.done():
            self.done.set_result(None)
        self.client._conn_lost(self, exc)

    def send(self, op: str, fields: Dict[str, Any],
             hook: Optional[Callable[[Reply], None]] = None) -> _ACall:
        if not self.alive:
            raise self.error or ConnectionLost("not connected")
        call = _ACall(self.loop, hook)
        call.rid, frame = self.core.request(op, fields, call)
        assert self.transport is not None
        self.transport.write(frame)
        return call

    def fire(self, op: str, fields: Dict[str, Any]) -> Optional[_ACall]:
        """Sends without waiting; errors are ignored."""
        try:
            return self.send(op, fields)
        except CoordError:
            return None

    async def drain(self) -> None:
        """Waits while the transport's buffer is over its high mark."""
        if self._paused and self.alive:
            w = self.loop.create_future()
            self._drained.append(w)
            await w

    async def call(self, op: str, fields: Dict[str, Any]) -> Reply:
        """A request that does not wait by design: its reply within the
        client's ``request_timeout``, else ``Timeout``."""
        c = self.send(op, fields)
        t = self.client.request_timeout
        if t is None:
            await self.drain()
            return await c.fut
        try:
            return await asyncio.wait_for(self._drain_then(c), t)
        except asyncio.TimeoutError:
            raise no_reply(op, t) from None

    async def _drain_then(self, c: _ACall) -> Reply:
        await self.drain()
        return await asyncio.shield(c.fut)

    async def shutdown(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()
        try:
            await asyncio.wait_for(asyncio.shield(self.done), 5)
        except (asyncio.TimeoutError, Exception):
            if self.transport is not None:
                self.transport.abort()
            self._finish(None)


def _notify_task(fn: Callable[[m.Updated], Any]) -> Callable[[Any], None]:
    """A Future callback that calls fn(updated) on the loop (a coroutine
    function as a task of its own)."""
    def done(fut: "asyncio.Future[m.Updated]") -> None:
        if fut.cancelled() or fut.exception() is not None:
            return
        r = fn(fut.result())
        if asyncio.iscoroutine(r):
            _NOTIFY_TASKS.add(asyncio.ensure_future(r))
            for t in [t for t in _NOTIFY_TASKS if t.done()]:
                _NOTIFY_TASKS.discard(t)
    return done


_NOTIFY_TASKS: "set[asyncio.Future[Any]]" = set()   # strong refs while they run


async def _wait(conn: _AConn, call: _ACall, owner: Any, give_back: GiveBack,
                op: str, limit: Optional[float]) -> Reply:
    """Waits for a long call (limit: seconds, None for as long as it
    takes); a cancellation sends ``cancel`` and hands back a grant that
    raced it, then goes on.  Past the limit (the broker stopped
    answering) it sends ``cancel``, leaves a late grant to be handed back
    when it comes, and raises ``Timeout`` without waiting any more."""
    owner._waiting = (conn, call)
    try:
        await conn.drain()
        if limit is None:
            return await asyncio.shield(call.fut)
        try:
            return await asyncio.wait_for(asyncio.shield(call.fut), limit)
        except asyncio.TimeoutError:
            if call.fut.done():           # came at the last moment
                return call.fut.result()
            conn.fire("cancel", {"target": call.rid})
            call.abandon = give_back
            raise no_reply(op, limit) from None
    except asyncio.CancelledError:
        if not call.fut.done():
            conn.fire("cancel", {"target": call.rid})
            try:
                reply = await asyncio.shield(call.fut)
            except asyncio.CancelledError:
                call.abandon = give_back      # cancelled again: hand back later
                raise
            except BaseException:
                raise asyncio.CancelledError from None
        elif call.fut.exception() is None:
            reply = call.fut.result()
        else:
            raise
        back = give_back(reply)
        if back is not None:
            try:
                await asyncio.shield(back.fut)
            except BaseException:
                pass
        raise
    finally:
        owner._waiting = None


def _cancel_waiting(owner: Any) -> bool:
    w = owner._waiting
    if w is None:
        return False
    w[0].fire("cancel", {"target": w[1].rid})
    return True


async def _stop(task: Optional["asyncio.Task[None]"]) -> None:
    if task is not None and task is not asyncio.current_task() and not task.done():
        task.cancel()
        try:
            await task
        except BaseException:
            pass


class Lock:
    """asyncio form of ``coord.Lock``: ``async with c.lock(name) as lk``."""

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
        self.lost = asyncio.Event()
        self.lost_reason: Optional[str] = None
        self._held = False
        self._conn: Optional[_AConn] = None
        self._deadline = 0.0
        self._renewer: Optional["asyncio.Task[None]"] = None
        self._waiting: Optional[Tuple[_AConn, _ACall]] = None
        m.lock_acquire(self.name, mode, steal=steal, timeout=timeout, lease=lease)

    @property
    def held(self) -> bool:
        return self._held

    async def acquire(self, *, if_available: bool = False) -> bool:
        if self._held:
            raise RuntimeError("lock already held by this handle")
        try_once = if_available or self.timeout == 0
        fields = m.lock_acquire(self.name, self.mode, if_available=try_once,
                                steal=self.steal, timeout=None if try_once else self.timeout,
                                lease=self.lease)
        conn = await self._client._ensure()
        self.lost.clear()
        self.lost_reason = None
        call = conn.send("lock.acquire", fields, hook=lambda r: self._granted(conn, r, time.monotonic()))
        reply = await _wait(conn, call, self, lambda r: self._give_back(conn, r), "lock.acquire",
                            backstop(0 if try_once else self.timeout,
                                     self._client.request_timeout))
        if not reply.ok:
            raise wait_error(reply, f"lock {self.name!r} not granted", self.timeout)
        if not reply.get("granted"):
            return False
        if self.lease:
            self._renewer = asyncio.get_running_loop().create_task(self._renew_loop())
        return True

    def _granted(self, conn: _AConn, r: Reply, arrived: float) -> None:
        if r.ok and r.get("granted"):
            self.id = m.uint(r.body, "lock")
            self.token = m.uint(r.body, "token")
            self._conn = conn
            self._held = True
            self._deadline = arrived + (self.lease or 0)
            self._client._router.locks[self.id] = self

    def _give_back(self, conn: _AConn, r: Reply) -> Optional[_ACall]:
        if r.ok and r.get("granted"):
            self._forget()
            return conn.fire("lock.release", {"lock": m.uint(r.body, "lock")})
        return None

    def cancel(self) -> bool:
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
        t = self._renewer
        if t is not None and t is not asyncio.current_task():
            t.cancel()

    async def _renew_loop(self) -> None:
        assert self.lease and self._conn is not None
        conn, lease = self._conn, self.lease
        while self._held:
            now = time.monotonic()
            await asyncio.sleep(max(0.0, min(lease / 3.0, self._deadline - now)))
            if not self._held:
                return
            now = time.monotonic()
            if now >= self._deadline:
                lock_id = self.id
                self._lost("expired")
                conn.fire("lock.release", {"lock": lock_id})
                return
            call = conn.fire("lock.renew", {"lock": self.id, "lease_ms": m.ms(lease, "lease")})
            if call is None:
                return
            try:
                r = await asyncio.wait_for(asyncio.shield(call.fut),
                                           max(0.001, self._deadline - now))
            except asyncio.TimeoutError:
                continue
            except CoordError:
                return
            if r.ok:
                self._deadline = max(self._deadline, now + lease)
            elif r.code == "UNKNOWN_LOCK":
                self._lost("expired")
                return

    async def release(self) -> None:
        conn = self._conn
        if not self._held or conn is None:
            return
        lock_id = self.id
        self._forget()
        await _stop(self._renewer)
        try:
            r = await conn.call("lock.release", {"lock": lock_id})
        except ConnectionLost:
            return
        if not r.ok and r.code != "UNKNOWN_LOCK":
            raise r.error()

    def check(self) -> None:
        if self.lost.is_set():
            raise LockLost(f"lock {self.name!r} lost: {self.lost_reason}")
        if not self._held:
            raise LockLost(f"lock {self.name!r} is not held")

    async def __aenter__(self) -> "Lock":
        if not await self.acquire():
            raise Timeout(f"lock {self.name!r} is busy")
        return self

    async def __aexit__(self, et: Any, ev: Any, tb: Any) -> None:
        lost = self.lost.is_set()
        await self.release()
        if lost and et is None:
            raise LockLost(f"lock {self.name!r} was lost while the block ran: "
                           f"{self.lost_reason}")


class Flight:
    """asyncio form of ``coord.Flight`` (``updated`` is an
    ``asyncio.Future``)."""

    def __init__(self, client: "Client", conn: Optional[_AConn], j: m.Joined) -> None:
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
        self.updated: Optional["asyncio.Future[m.Updated]"] = None
        self.aborted = asyncio.Event()
        self.abort_reason: Optional[str] = None

    def _updated(self, u: m.Updated) -> None:
        if self.updated is not None and not self.updated.done():
            self.updated.set_result(u)

    def _watch_lost(self, exc: BaseException) -> None:
        if self.updated is not None and not self.updated.done():
            self.updated.set_exception(exc)
            self.updated.exception()      # retrieved: no "never retrieved" warning

    def _abort(self, reason: str) -> None:
        self.abort_reason = reason
        self.aborted.set()

    def check(self) -> None:
        if self.aborted.is_set():
            raise Aborted(f"flight {self.key!r} aborted: {self.abort_reason}")

    async def _end(self, op: str, fields: Dict[str, Any]) -> int:
        if self.role != "owner" or self._conn is None:
            raise RuntimeError("only the owner completes or fails a flight")
        self._client._router.flights.pop(self.flight, None)
        r = await self._conn.call(op, dict(flight=self.flight, fence=self.fence, **fields))
        if not r.ok:
            raise r.error()
        return m.uint(r.body, "delivered")

    async def complete(self, result: m.Payload, keep: Optional[float] = None) -> int:
        return await self._end("flight.complete", {"result": m.payload(result, "result"),
                                                   "keep_ms": m.ms(keep, "keep")})

    async def fail(self, code: str, message: str = "", retryable: bool = False,
                   keep: Optional[float] = None, retry_after: Optional[float] = None) -> int:
        return await self._end("flight.fail", _fail_fields(code, message, retryable, keep,
                                                           retry_after))


class _FlightAPI:
    def __init__(self, client: "Client") -> None:
        self._c = client
        self._waiting: Optional[Tuple[_AConn, _ACall]] = None

    async def join(self, key: m.Name, *, ttl: Optional[float] = 30.0,
                   wait: Optional[float] = None, max_age: Optional[float] = None,
                   abort_when_orphaned: bool = False, stale: Optional[float] = None,
                   notify: bool = False, supersede: bool = False, priority: int = 0,
                   version: Optional[m.Name] = None,
                   other_version: Optional[str] = None) -> Flight:
        k = m.name(key, "key")
        fields = m.flight_join(k, ttl=ttl, wait=wait, max_age=max_age,
                               abort_when_orphaned=abort_when_orphaned, stale=stale,
                               notify=notify, supersede=supersede, priority=priority,
                               version=version, other_version=other_version)
        c = self._c
        conn = await c._ensure()
        box: List[Flight] = []

        def hook(r: Reply) -> None:
            if r.ok:
                f = Flight(c, conn, m.joined(k, r.body))
                if f.role == "owner":
                    c._router.flights[f.flight] = f
                elif notify and f.stale is not None and f.revalidating:
                    f.updated = conn.loop.create_future()
                    c._router.watch(k, f)
                box.append(f)

        def give_back(r: Reply) -> Optional[_ACall]:
            if box and box[0].role == "owner":
                c._router.flights.pop(box[0].flight, None)
                return conn.fire("flight.fail", {"flight": box[0].flight, "fence": box[0].fence,
                                                 "error": {"code": "ABORTED",
                                                           "message": "the owner gave up"},
                                                 "retryable": True})
            return None
        call = conn.send("flight.join", fields, hook=hook)
        r = await _wait(conn, call, self, give_back, "flight.join",
                        backstop(wait, c.request_timeout))
        if not r.ok:
            raise wait_error(r, f"flight {k!r}: no result", wait)
        return box[0]

    async def complete(self, f: Flight, result: m.Payload, keep: Optional[float] = None) -> int:
        return await f.complete(result, keep)

    async def fail(self, f: Flight, code: str, message: str = "", retryable: bool = False,
                   keep: Optional[float] = None, retry_after: Optional[float] = None) -> int:
        return await f.fail(code, message, retryable, keep, retry_after)

    async def list(self) -> List[m.FlightEntry]:
        return m.flight_list(await self._c.call("flight.list"))

    async def disable(self, prefix: m.Name = "") -> None:
        await self._c.call("flight.disable", prefix=m.name(prefix, "prefix"))

    async def enable(self, prefix: m.Name = "") -> None:
        await self._c.call("flight.enable", prefix=m.name(prefix, "prefix"))

    async def disabled(self) -> List[Union[str, bytes]]:
        return m.prefixes(await self._c.call("flight.disabled"))


class _RecordAPI:
    def __init__(self, client: "Client") -> None:
        self._c = client

    async def get(self, key: m.Name) -> Optional[m.Record]:
        k = m.name(key, "key")
        try:
            return m.record(k, await self._c.call("record.get", key=k))
        except NotFound:
            return None

    async def list(self, prefix: m.Name = "", limit: Optional[int] = None
                   ) -> List[m.RecordEntry]:
        return m.record_list(await self._c.call("record.list",
                                                prefix=m.name(prefix, "prefix"), limit=limit))

    async def purge(self, prefix: m.Name = "") -> m.Purged:
        return m.purged(await self._c.call("record.purge", prefix=m.name(prefix, "prefix")))


class Leadership(LeaderTerm):
    """asyncio form of ``coord.Leadership``: ``async with c.leader(ws)``;
    ``lost`` and ``drain_requested`` are ``asyncio.Event``s."""

    def __init__(self, client: "Client", workstream: m.Name, *, lease: Optional[float] = m.DEFAULT_LEASE,
                 steal: bool = False, timeout: Optional[float] = None,
                 protocol: Optional[str] = None, incident: Optional[str] = None) -> None:
        super().__init__(workstream, lease=lease, steal=steal, timeout=timeout,
                         protocol=protocol, incident=incident, event=asyncio.Event)
        self._client = client
        self._conn: Optional[_AConn] = None
        self._renewer: Optional["asyncio.Task[None]"] = None
        self._waiting: Optional[Tuple[_AConn, _ACall]] = None

    async def campaign(self, *, if_available: bool = False) -> bool:
        fields = self._campaign_fields(if_available)
        conn = await self._client._ensure()
        self._begin()
        call = conn.send("leader.campaign", fields, hook=lambda r: self._granted(conn, r, time.monotonic()))
        try:
            r = await _wait(conn, call, self, lambda r: self._give_back(conn, r),
                            "leader.campaign",
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
        self._renewer = asyncio.get_running_loop().create_task(self._renew_loop())
        return True

    def _granted(self, conn: _AConn, r: Reply, arrived: float) -> None:
        if self._grant(r, arrived):
            self._conn = conn
            self._client._router.leaders[self.key] = self

    def _give_back(self, conn: _AConn, r: Reply) -> Optional[_ACall]:
        if r.ok and r.get("granted"):
            self._forget()
            self.state = State.ABORTED
            return conn.fire("leader.resign", m.term(self.workstream,
                                                     m.uint(r.body, "generation")))
        return None

    def cancel(self) -> bool:
        return _cancel_waiting(self)

    def _forget(self) -> None:
        if self.generation is not None:
            self._client._router.leaders.pop(self.key, None)

    def _lost(self, reason: str, incident: Optional[str] = None) -> None:
        if not self.leading:
            return
        self._forget()
        self._end(reason, incident)
        t = self._renewer
        if t is not None and t is not asyncio.current_task():
            t.cancel()

    async def _renew_loop(self) -> None:
        conn = self._conn
        assert conn is not None
        while self.leading:
            await asyncio.sleep(max(0.0, self._next_tick() - time.monotonic()))
            if not self.leading:
                return
            now = time.monotonic()
            if now >= self._deadline:
                self._lost("expired")
                return
            call = conn.fire("leader.renew", self._fields())
            if call is None:
                return
            try:
                r = await asyncio.wait_for(asyncio.shield(call.fut),
                                           max(0.001, self._deadline - now))
            except asyncio.TimeoutError:
                continue
            except CoordError:
                return
            if r.ok:
                self._renewed(r, now)
            elif r.code == "FENCED":
                self._lost("fenced")
                return

    async def _call(self, op: str, fields: Dict[str, Any],
                    parse: Callable[[Dict[str, Any]], Any]) -> Any:
        f = self._fields(**fields)
        assert self._conn is not None
        r = await self._conn.call(op, f)
        if not r.ok:
            if r.code == "FENCED":
                self._lost("fenced")
            raise r.error()
        return parse(r.body)

    async def commit(self, op_id: m.Name, key: Optional[m.Name] = None,
                     value: Optional[m.Payload] = None) -> m.Commit:
        return await self._call("leader.commit", m.commit(op_id, key, value), m.commit_result)

    async def claim(self, op_id: m.Name) -> m.Claim:
        k = m.name(op_id, "op_id")
        return await self._call("leader.claim", {"op_id": k}, lambda b: m.claim(k, b))

    async def abandon(self, op_id: m.Name, reason: str) -> m.Abandon:
        return await self._call("leader.abandon", m.abandon(op_id, reason), m.abandon_result)

    async def drain(self) -> None:
        await self._call("leader.drain", {}, lambda b: None)
        self._drained()

    async def pending(self, limit: Optional[int] = None) -> m.Page:
        return await self._client.leader.pending(self.workstream, limit)

    async def read(self, key: m.Name) -> Optional[bytes]:
        got = await self._client.leader.read(self.workstream, key)
        return got[0] if got else None

    async def resign(self) -> None:
        if not self.leading or self._conn is None:
            return
        conn = self._conn
        f = m.term(self.workstream, self.generation)
        self._forget()
        self._end(None)
        await _stop(self._renewer)
        try:
            r = await conn.call("leader.resign", f)
        except ConnectionLost:
            return
        if not r.ok and r.code != "FENCED":
            raise r.error()

    async def __aenter__(self) -> "Leadership":
        try:
            granted = await self.campaign()
        except _UNREACHABLE as e:   # no broker: the workstream's fallback, else e
            return descfile.on_unreachable(self, e)  # type: ignore[return-value]
        if not granted:
            raise Timeout(f"{self.workstream!r} has a leader")
        return self

    async def __aexit__(self, et: Any, ev: Any, tb: Any) -> None:
        lost = self.lost.is_set()
        await self.resign()
        if lost and et is None:
            raise self._lost_error()


class _LeaderAPI:
    """The asyncio form of ``coord.Client.leader``."""

    def __init__(self, client: "Client") -> None:
        self._c = client

    def __call__(self, workstream: m.Name, *, lease: Optional[float] = m.DEFAULT_LEASE,
                 steal: bool = False, timeout: Optional[float] = None,
                 protocol: Optional[str] = None, incident: Optional[str] = None) -> Leadership:
        return Leadership(self._c, workstream, lease=lease, steal=steal, timeout=timeout,
                          protocol=protocol, incident=incident)

    async def define(self, workstream: m.Name, *, protocol: Any = m.OMIT,
                     max_hold: Any = m.OMIT, steal: Any = m.OMIT, mode: Any = m.OMIT,
                     fallback: Any = m.OMIT, canonical_fence: Any = m.OMIT,
                     force: bool = False) -> m.Descriptor:
        return m.descriptor(await self._c.call("leader.define", **m.define(
            workstream, protocol=protocol, max_hold=max_hold, steal=steal, mode=mode,
            fallback=fallback, canonical_fence=canonical_fence, force=force)))

    async def describe(self, workstream: m.Name) -> m.Descriptor:
        return m.descriptor(await self._c.call("leader.describe",
                                               workstream=m.name(workstream, "workstream")))

    async def info(self, workstream: m.Name) -> m.LeaderInfo:
        return m.leader_info(await self._c.call("leader.info",
                                                workstream=m.name(workstream, "workstream")))

    async def history(self, workstream: m.Name, limit: Optional[int] = None) -> m.Page:
        return m.history(await self._c.call("leader.history",
                                            workstream=m.name(workstream, "workstream"),
                                            limit=m.limit(limit)))

    async def pending(self, workstream: m.Name, limit: Optional[int] = None) -> m.Page:
        return m.pending(await self._c.call("leader.pending",
                                            workstream=m.name(workstream, "workstream"),
                                            limit=m.limit(limit)))

    async def check(self, workstream: m.Name, generation: int) -> m.Check:
        return m.check(await self._c.call("leader.check", **m.term(workstream, generation)))

    async def drain(self, workstream: m.Name, generation: Optional[int] = None) -> None:
        if generation is None:
            generation = (await self.info(workstream)).live_generation or 0
        await self._c.call("leader.drain", **m.term(workstream, generation))

    async def read(self, workstream: m.Name, key: m.Name) -> Optional[Tuple[bytes, int]]:
        try:
            b = await self._c.call("leader.read", workstream=m.name(workstream, "workstream"),
                                   key=m.name(key, "key"))
        except NotFound:
            return None
        return m.as_bytes(b.get("value")), m.uint(b, "generation")

    async def disable(self, workstream: m.Name) -> int:
        return m.uint(await self._c.call("leader.disable",
                                         workstream=m.name(workstream, "workstream")),
                      "generation")

    async def enable(self, workstream: m.Name) -> None:
        await self._c.call("leader.enable", workstream=m.name(workstream, "workstream"))


class _Closed:
    def __init__(self, exc: BaseException, reconnect: bool) -> None:
        self.exc = exc
        self.reconnect = reconnect


class Subscription:
    """``async with c.subscribe(ch) as sub: async for msg in sub``."""

    def __init__(self, client: "Client", channels: List[Union[str, bytes]],
                 timeout: Optional[float] = None) -> None:
        self._client = client
        self.channels = channels
        self.timeout = timeout
        self._q = EventQueue(client.max_queued, client.max_queued_bytes)
        self._ready = asyncio.Event()
        self._open = False
        self._error: Optional[BaseException] = None

    @property
    def dropped(self) -> int:
        """Items dropped, oldest first, because the queue was full."""
        return self._q.dropped

    @property
    def queued(self) -> int:
        return len(self._q)

    def _push(self, item: Any, size: int = 0) -> None:
        self._q.push(item, size)
        self._ready.set()

    def _closed(self, exc: BaseException, reconnect: bool) -> None:
        self._q.push(_Closed(exc, reconnect))
        self._ready.set()

    async def _take(self) -> Any:
        while not len(self._q):
            self._ready.clear()
            await self._ready.wait()
        return self._q.pop()

    async def open(self) -> "Subscription":
        if not self._open:
            await self._client._subscribe(self)
            self._open = True
        return self

    async def close(self) -> None:
        if self._open:
            self._open = False
            await self._client._unsubscribe(self)

    async def get(self, timeout: Optional[float] = None) -> Any:
        if self._error is not None:
            raise self._error
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            try:
                if len(self._q):
                    item = self._q.pop()      # no wait: timeout=0 gets it too
                elif deadline is None:
                    item = await self._take()
                else:
                    item = await asyncio.wait_for(self._take(),
                                                  max(0.0, deadline - loop.time()))
            except asyncio.TimeoutError:
                return None
            if not isinstance(item, _Closed):
                return item
            if item.reconnect and self._open:
                try:
                    await self._client._ensure()
                    continue
                except CoordError as e:
                    self._error = e
                    raise
            self._error = item.exc
            raise item.exc

    async def __aiter__(self) -> AsyncIterator[Any]:
        while True:
            item = await self.get(self.timeout)
            if item is None:
                return
            yield item

    async def __aenter__(self) -> "Subscription":
        return await self.open()

    async def __aexit__(self, *a: Any) -> None:
        await self.close()


class _HelloDropped(ConnectError):
    """The connection closed before hello was answered."""


async def _open_socket(conn: _AConn, path: str, *, autostart_ok: bool, broker: Optional[str],
                       idle_exit: int, timeout: float) -> None:
    check_socket_path(path)
    loop = asyncio.get_running_loop()
    deadline = time.monotonic() + timeout
    backoff = 0.001
    spawned = False
    spawns = 0
    while True:
        try:
            await loop.create_unix_connection(lambda: conn, path)
            break
        except OSError as e:
            err = e.errno
            if err in (errno.ENOENT, errno.ECONNREFUSED):
                if not autostart_ok:
                    raise ConnectError(f"no broker at {path}: {e.strerror}") from None
                if not spawned and spawns < MAX_SPAWNS:
                    spawned = True
                    spawns += 1
                    if await loop.run_in_executor(None, autostart, path, broker, idle_exit,
                                                  deadline):
                        continue
                    spawned = False      # it exited: nobody listens yet, try again
            elif err not in (errno.EAGAIN, errno.EWOULDBLOCK, errno.EINTR):
                raise ConnectError(f"cannot connect to {path}: {e.strerror}") from None
            left = deadline - time.monotonic()
            if left <= 0:
                raise ConnectError(f"no broker answered at {path} within {timeout:g} s")
            await asyncio.sleep(min(backoff, left))
            backoff = min(backoff * 2, MAX_BACKOFF)
    assert conn.transport is not None
    try:
        check_peer(conn.transport.get_extra_info("socket"), path)
    except BaseException:
        conn.transport.abort()
        raise


class Client:
    """The asyncio client: ``async with coord.aio.Client() as c`` or
    ``c = await coord.aio.connect()``.  Options as ``coord.Client``."""

    def __init__(self, socket: Optional[str] = None, *, scope: m.Name = "",
                 client: Optional[str] = None, autostart: bool = True,
                 broker: Optional[str] = None, connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
                 idle_exit: int = DEFAULT_IDLE_EXIT, reconnect: bool = False,
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
        self._conn: Optional[_AConn] = None
        self._closed = False
        self._connecting: Optional[asyncio.Lock] = None
        self.flight = _FlightAPI(self)
        self.records = _RecordAPI(self)
        self.leader = _LeaderAPI(self)

    async def connect(self) -> "Client":
        await self._ensure()
        return self

    async def _open(self) -> _AConn:
        # A broker that dies with us in its backlog resets the connection
        # before hello is answered (a restart racing a reconnect), and one
        # that shuts down refuses with SHUTTING_DOWN: try again within
        # connect_timeout, as the first connect does.
        deadline = time.monotonic() + self.connect_timeout
        while True:
            try:
                return await self._open_once()
            except _HelloDropped:
                if time.monotonic() >= deadline:
                    raise
                await asyncio.sleep(0.01)

    async def _open_once(self) -> _AConn:
        conn = _AConn(self)
        await _open_socket(conn, self.socket_path, autostart_ok=self.autostart,
                           broker=self.broker_path, idle_exit=self.idle_exit,
                           timeout=self.connect_timeout)
        if not conn.alive:              # refused (and closed) at once
            call = None
        else:
            call = _ACall(conn.loop)
            call.rid, frame = conn.core.hello(call, self.client_name, os.getpid(),
                                              instance_id(), self.scope)
            assert conn.transport is not None
            conn.transport.write(frame)     # a failed write: connection_lost reads why
        hello_timeout = max(self.connect_timeout, MIN_HELLO_TIMEOUT)
        try:
            if call is None:
                raise conn.error or ConnectionLost("closed")
            r = await asyncio.wait_for(asyncio.shield(call.fut), hello_timeout)
        except asyncio.TimeoutError:
            await conn.shutdown()
            raise ConnectError(f"the broker did not answer hello: timed out after "
                               f"{hello_timeout:g} s") from None
        except CoordError as e:
            await conn.shutdown()
            bye = conn.core.bye
            if bye is not None and not bye.ok and bye.code != "SHUTTING_DOWN":
                raise Refused(bye.code, bye.body.get("message")) from None
            if isinstance(e, ConnectionLost):
                raise _HelloDropped(f"hello: {e}") from None
            raise ConnectError(f"hello: {e}") from None
        if not r.ok:
            await conn.shutdown()
            raise Refused(r.code, r.body.get("message"))
        conn.conn_id = m.uint(r.body, "conn")
        conn.epoch = m.uint(r.body, "epoch")
        conn.broker = str(r.get("broker", ""))
        mf = m.uint(r.body, "max_frame")
        if mf:
            try:
                conn.core.set_max_frame(mf)
            except ProtocolError:
                await conn.shutdown()
                raise
        return conn

    async def _ensure(self) -> _AConn:
        c = self._conn
        if c is not None and c.alive:
            return c
        if self._connecting is None:
            self._connecting = asyncio.Lock()
        async with self._connecting:
            c = self._conn
            if c is not None and c.alive:
                return c
            if self._closed:
                raise ConnectionLost("the client is closed")
            if c is not None and not self.reconnect:
                raise ConnectionLost(f"not connected: {c.error}")
            c = await self._open()
            self._conn = c
            for ch in list(self._router.subs):
                r = await c.call("sub.subscribe", {"channel": ch})
                if not r.ok:
                    raise r.error()
            return c

    def _conn_lost(self, conn: _AConn, exc: BaseException) -> None:
        if conn is self._conn:
            self._router.connection_lost(exc, keep_subs=self.reconnect and not self._closed)

    @property
    def connected(self) -> bool:
        return self._conn is not None and self._conn.alive

    @property
    def conn_id(self) -> int:
        return self._conn.conn_id if self._conn else 0

    @property
    def epoch(self) -> int:
        return self._conn.epoch if self._conn else 0

    @property
    def broker_version(self) -> str:
        return self._conn.broker if self._conn else ""

    async def close(self) -> None:
        self._closed = True
        c = self._conn
        if c is not None:
            await c.shutdown()

    async def __aenter__(self) -> "Client":
        return await self.connect()

    async def __aexit__(self, *a: Any) -> None:
        await self.close()

    async def call(self, op: str, **fields: Any) -> Dict[str, Any]:
        r = await (await self._ensure()).call(op, fields)
        if not r.ok:
            raise r.error()
        return r.body

    async def ping(self) -> float:
        t = time.monotonic()
        await self.call("ping")
        return time.monotonic() - t

    async def stats(self) -> m.Stats:
        return m.Stats(await self.call("stats"))

    def lock(self, name: m.Name, mode: str = "exclusive", *, timeout: Optional[float] = None,
             lease: Optional[float] = None, steal: bool = False) -> Lock:
        return Lock(self, name, mode, timeout=timeout, lease=lease, steal=steal)

    async def try_lock(self, name: m.Name, mode: str = "exclusive", *,
                       lease: Optional[float] = None) -> Optional[Lock]:
        lk = Lock(self, name, mode, lease=lease)
        return lk if await lk.acquire(if_available=True) else None

    async def locks(self) -> m.LockState:
        return m.lock_state(await self.call("lock.query"))

    async def once(self, key: m.Name, fn: Callable[[Flight], Awaitable[m.Payload]], *,
                   ttl: float = 30.0, wait: Optional[float] = None, keep: Optional[float] = None,
                   max_age: Optional[float] = None, stale: Optional[float] = None,
                   notify: Union[bool, Callable[[m.Updated], Any]] = False,
                   fallback: str = "fail", retries: int = 3,
                   abort_when_orphaned: bool = False, supersede: bool = False,
                   priority: int = 0, version: Optional[m.Name] = None,
                   other_version: Optional[str] = None) -> Result:
        """As ``coord.Client.once``; fn is a coroutine function, and a
        ``notify`` function (plain or coroutine) runs on the loop."""
        check_fallback(fallback)
        k = m.name(key, "key")
        store = keep + stale if keep and stale else keep
        deadline = None if wait is None else time.monotonic() + wait
        tries = 0
        retried = False
        while True:
            left = None if deadline is None else max(0.001, deadline - time.monotonic())
            try:
                f = await self.flight.join(k, ttl=ttl, wait=left,
                                           max_age=keep if max_age is None else max_age,
                                           abort_when_orphaned=abort_when_orphaned,
                                           stale=stale, notify=bool(notify),
                                           supersede=supersede and not retried,
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
                r = await self._run_local(k, fn, e)
                r.retried = retried
                return r
            except _UNREACHABLE as e:
                if fallback == "fail":
                    raise
                return await self._run_local(k, fn, e)
            if f.role == "result":
                if f.updated is not None and callable(notify):
                    f.updated.add_done_callback(_notify_task(notify))
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
                out = m.payload(await fn(f), "result")
            except BaseException as e:
                code, msg, retryable, retry_after = owner_failure(e)
                assert f._conn is not None
                call = f._conn.fire("flight.fail", dict(flight=f.flight, fence=f.fence,
                                                        **_fail_fields(code, msg, retryable,
                                                                       None, retry_after)))
                self._router.flights.pop(f.flight, None)
                if call is not None and isinstance(e, Exception):
                    try:
                        await call.fut
                    except CoordError:
                        pass
                raise
            try:
                await f.complete(out, store)
            except _UNREACHABLE as e:
                if fallback == "fail":
                    raise
                return Result(out, "local", reason=f"ran as the owner, then: {e}",
                              fallback_cause="unreachable")
            return Result(out, "bypass" if f.bypass else "owner", fence=f.fence,
                          retried=retried, superseded=f.superseded)

    async def _run_local(self, key: Union[str, bytes],
                         fn: Callable[[Flight], Awaitable[m.Payload]],
                         why: BaseException) -> Result:
        f = Flight(self, None, m.Joined(role="local", key=key, fence=0))
        return Result(m.payload(await fn(f), "result"), "local", reason=str(why),
                      fallback_cause=fallback_cause(why))

    async def publish(self, channel: m.Name, data: m.Payload) -> int:
        return m.uint(await self.call("sub.publish", channel=m.name(channel, "channel"),
                                      data=m.payload(data)), "delivered")

    def subscribe(self, *channels: m.Name, timeout: Optional[float] = None) -> Subscription:
        if not channels:
            raise TypeError("subscribe needs a channel")
        return Subscription(self, [m.name(ch, "channel") for ch in channels], timeout)

    def watch(self, *channels: str, timeout: Optional[float] = None) -> Subscription:
        return self.subscribe(*(channels or ("-locks", "-flights", "-leaders")),
                              timeout=timeout)

    async def _subscribe(self, sub: Subscription) -> None:
        conn = await self._ensure()
        for ch in sub.channels:
            subs = self._router.subs.setdefault(m.name_key(ch), [])
            first = not subs
            subs.append(sub)
            if first:
                try:
                    r = await conn.call("sub.subscribe", {"channel": ch})
                except BaseException:
                    await self._unsubscribe(sub)
                    raise
                if not r.ok:
                    await self._unsubscribe(sub)
                    raise r.error()

    async def _unsubscribe(self, sub: Subscription) -> None:
        last = []
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
                await conn.call("sub.unsubscribe", {"channel": ch})
            except CoordError:
                pass

    async def try_leader(self, workstream: m.Name, *, lease: Optional[float] = m.DEFAULT_LEASE,
                         protocol: Optional[str] = None, incident: Optional[str] = None
                         ) -> Optional[Leadership]:
        lead = Leadership(self, workstream, lease=lease, protocol=protocol, incident=incident)
        return lead if await lead.campaign(if_available=True) else None


async def connect(socket: Optional[str] = None, **kw: Any) -> Client:
    """``await Client(socket, **kw).connect()``."""
    return await Client(socket, **kw).connect()
