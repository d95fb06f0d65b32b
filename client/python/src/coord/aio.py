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
import os
import socket
import time
from typing import (Any, AsyncIterator, Awaitable, Callable, Dict, List, Literal, Optional,
                    Sequence, Tuple, TypeVar, Union)

from . import calls, messages as m
from .calls import ClientBase
from .core import (DEFAULT_MAX_QUEUED, DEFAULT_MAX_QUEUED_BYTES, DEFAULT_REQUEST_TIMEOUT, Core,
                   Reply)
from .errors import ConnectionLost, CoordError, NotFound, ProtocolError
from .fdpass import READ_SIZE, FdTransport, recv_fds
from .handles import (FALLBACK_ERRORS, UNREACHABLE, Closed, FlightHandle, Grantee, Join,
                      LeaderTerm, LockHandle, Once, Result, SubscriptionBase, no_reply,
                      owner_failure)
from .paths import (DEFAULT_CONNECT_TIMEOUT, DEFAULT_IDLE_EXIT, MIN_HELLO_TIMEOUT, Dial, autostart,
                    check_peer, instance_id)

T = TypeVar("T")
GiveBack = Callable[[Reply], Any]      # a call to wait for, or None


class _ACall:
    """A request's future; ``hook`` runs in the reader before the future
    resolves; ``abandon`` (set when the waiter was cancelled) hands back a
    raced grant."""

    __slots__ = ("fut", "hook", "abandon", "rid", "waiter")

    def __init__(self, loop: asyncio.AbstractEventLoop,
                 hook: Optional[Callable[[Reply], None]] = None) -> None:
        self.fut: "asyncio.Future[Reply]" = loop.create_future()
        self.hook = hook
        self.abandon: Optional[GiveBack] = None
        self.rid = 0
        # the future a task waits on instead of fut (_reply_of): set here
        # when fut is, so that the waiter wakes in the same loop turn
        self.waiter: "Optional[asyncio.Future[None]]" = None

    def _complete(self, reply: Reply) -> None:
        if self.hook is not None:
            try:
                self.hook(reply)
            except Exception:
                pass
        if not self.fut.done():
            self.fut.set_result(reply)
        _wake(self.waiter)
        if self.abandon is not None:
            self.abandon(reply)

    def _fail(self, exc: BaseException) -> None:
        if not self.fut.done():
            self.fut.set_exception(exc)
            self.fut.exception()     # retrieved: no "never retrieved" warning
        _wake(self.waiter)


def _wake(w: "Optional[asyncio.Future[None]]") -> None:
    if w is not None and not w.done():
        w.set_result(None)


async def _reply_of(call: _ACall, limit: Optional[float]) -> Reply:
    """``await asyncio.wait_for(asyncio.shield(call.fut), limit)`` (limit
    None: as long as it takes): cancelling the waiting task leaves
    call.fut alone, past limit it raises ``asyncio.TimeoutError``.  The
    task waits on a future of its own that the reply sets directly
    (``call.waiter``), and the limit is one timer: one loop turn from the
    reply to the waiter, where wait_for and shield took three, a task and
    two more futures (a lock cycle's two calls on a 2-vCPU VM: ~25 us)."""
    fut = call.fut
    if not fut.done():
        loop = fut.get_loop()
        w: "asyncio.Future[None]" = loop.create_future()
        call.waiter = w
        h = loop.call_later(limit, _wake, w) if limit is not None else None
        try:
            await w
        finally:
            call.waiter = None
            if h is not None:
                h.cancel()
        if not fut.done():
            raise asyncio.TimeoutError
    return fut.result()


class _AConn(asyncio.Protocol):
    """One connection: the transport, the core, the frames handled as
    they come (``data_received``), in wire order."""

    def __init__(self, client: "Client") -> None:
        self.client = client
        self.loop = asyncio.get_running_loop()
        self.core: Core[_ACall] = Core()
        self.transport: Optional[FdTransport] = None
        self.alive = True
        self.error: Optional[BaseException] = None
        self.conn_id = 0
        self.epoch = 0
        self.broker = ""
        self.fds = False                    # hello: the broker takes descriptors
        self.max_ref_bytes = 0
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

    def fds_received(self, fds: List[int]) -> None:
        """Descriptors a read brought, before its bytes (FdTransport)."""
        try:
            self.core.add_fds(fds)
        except ProtocolError as e:
            self._finish(e)

    def bad_stream(self, e: BaseException) -> None:
        self._finish(e)

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
                data, fds = recv_fds(s, READ_SIZE)
                if fds:
                    self.fds_received(fds)
                if not data:
                    break
                self.data_received(data)
        except (OSError, ProtocolError):
            pass
        finally:
            s.close()

    def _finish(self, err: Optional[BaseException]) -> None:
        if not self.alive:
            return
        self.alive = False
        handles, exc = self.core.end(err)
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
             hook: Optional[Callable[[Reply], None]] = None, fd: Optional[int] = None) -> _ACall:
        """``fd``: a descriptor sent with the frame (it stays the
        caller's)."""
        if not self.alive:
            raise self.error or ConnectionLost("not connected")
        call = _ACall(self.loop, hook)
        call.rid, frame = self.core.request(op, fields, call)
        assert self.transport is not None
        if fd is None:
            self.transport.write(frame)
        else:
            self.transport.write_fd(frame, fd)
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

    async def call(self, op: str, fields: Dict[str, Any], fd: Optional[int] = None) -> Reply:
        """A request that does not wait by design: its reply within the
        client's ``request_timeout``, else ``Timeout``."""
        c = self.send(op, fields, fd=fd)
        t = self.client.request_timeout
        if t is None:
            await self.drain()
            return await c.fut
        start = self.loop.time()
        try:
            if self._paused:
                await asyncio.wait_for(self.drain(), t)
            return await _reply_of(c, max(0.0, t - (self.loop.time() - start)))
        except asyncio.TimeoutError:
            raise no_reply(op, t) from None

    def abort(self) -> None:
        """Closes at once, without waiting (nothing when closed already)."""
        if self.transport is not None:
            self.transport.abort()
        self._finish(None)

    async def shutdown(self) -> None:
        if self.transport is None:      # still connecting (close() meanwhile): it stops there
            self._finish(None)
            return
        if not self.transport.is_closing():
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
        try:
            # the limit covers the wait for the transport to take the
            # request too (writes stuck behind a frozen broker)
            start = conn.loop.time()
            if limit is None:
                await conn.drain()
            elif conn._paused:
                await asyncio.wait_for(conn.drain(), limit)
            left = None if limit is None else max(0.0, limit - (conn.loop.time() - start))
            return await _reply_of(call, left)
        except asyncio.TimeoutError:
            if call.fut.done():           # came at the last moment
                return call.fut.result()
            assert limit is not None      # no limit: no TimeoutError
            conn.fire("cancel", {"target": call.rid})
            call.abandon = give_back
            raise no_reply(op, limit) from None
    except asyncio.CancelledError:
        # the cancel's outcome (and a raced grant's hand-back) is waited
        # for within request_timeout, as any request that does not wait
        # by design: a broker that stopped answering must not hold a
        # cancelled task (asyncio.timeout, wait_for) for as long as it is
        # frozen; past it, a late grant is handed back when it comes
        t = conn.client.request_timeout
        if not call.fut.done():
            conn.fire("cancel", {"target": call.rid})
            try:
                reply = await _reply_of(call, t)
            except asyncio.CancelledError:
                call.abandon = give_back      # cancelled again: hand back later
                raise
            except asyncio.TimeoutError:
                call.abandon = give_back      # no answer: hand back later
                raise asyncio.CancelledError from None
            except BaseException:
                raise asyncio.CancelledError from None
        elif call.fut.exception() is None:
            reply = call.fut.result()
        else:
            raise
        back = give_back(reply)
        if back is not None:
            try:
                await _reply_of(back, t)
            except BaseException:
                pass
        raise
    finally:
        owner._waiting = None


async def _granting(client: "Client", owner: Grantee, op: str, fields: Dict[str, Any],
                    limit: Optional[float]) -> Reply:
    """A request that waits for a grant (lock, join, campaign): connects,
    sends it with ``owner._granted`` as its hook, waits (``_wait``) with
    ``owner._give_back`` for a grant that comes too late."""
    conn = await client._ensure()
    owner._begin()
    call = conn.send(op, fields, hook=lambda r: owner._granted(conn, r, time.monotonic()))
    return await _wait(conn, call, owner, lambda r: owner._give_back(conn, r), op, limit)


async def _renew(conn: _AConn, op: str, fields: Dict[str, Any],
                 left: float) -> Union[Reply, None, Literal[False]]:
    """A renewal sent from a lease's task: its reply; None when no reply
    came within ``left`` seconds (the lease's end: try again); False when
    it could not be sent or the connection went (the task ends)."""
    call = conn.fire(op, fields)
    if call is None:
        return False
    try:
        return await asyncio.wait_for(asyncio.shield(call.fut), max(0.001, left))
    except asyncio.TimeoutError:
        return None
    except CoordError:
        return False


class Lock(LockHandle):
    """A lock on ``name``, the asyncio form of ``coord.Lock``: ``async with
    c.lock(name) as lk`` acquires it (raising ``Timeout``, ``Aborted``,
    ``ConnectionLost``... when it cannot) and releases it.  ``lost`` (an
    ``asyncio.Event``) is set when the lock is stolen, expires or its
    connection goes; the lease renews in a task of its own."""

    _client: "Client"
    lost: asyncio.Event

    def __init__(self, client: "Client", name: m.Name, mode: str = "exclusive", *,
                 timeout: Optional[float] = None, lease: Optional[float] = None,
                 steal: bool = False) -> None:
        super().__init__(client, name, mode, timeout=timeout, lease=lease, steal=steal,
                         event=asyncio.Event)
        self._renewer: Optional["asyncio.Task[None]"] = None

    async def acquire(self, *, if_available: bool = False) -> bool:
        """Waits for the lock (up to ``timeout``); True once held.  With
        ``if_available`` (or ``timeout=0``) returns False at once when busy.
        Cancelling the task that waits sends ``cancel`` (a grant that
        crossed it is released)."""
        fields, limit = self._acquire_fields(if_available)
        if not self._acquired(await _granting(self._client, self, "lock.acquire", fields,
                                              limit)):
            return False
        if self.lease:
            self._renewer = asyncio.get_running_loop().create_task(self._renew_loop())
        return True

    def _stop_renewal(self) -> None:
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
            if self._expired(conn, now):
                return
            r = await _renew(conn, "lock.renew", self._renewal(), self._deadline - now)
            if r is False:
                return
            if r is not None and not self._renewed(r, now, lease):
                return

    async def release(self) -> None:
        """Releases the lock (nothing when it is not held any more).  The
        name is free for others once this returns."""
        held = self._release()
        if held is None:
            return
        # the renewal task is cancelled, not waited for: the release goes
        # now, and a cancellation of this task is this task's (waiting
        # for the renewal's end swallowed it)
        self._stop_renewal()
        try:
            r = await held[0].call("lock.release", {"lock": held[1]})
        except ConnectionLost:
            return
        self._released(r)

    async def __aenter__(self) -> "Lock":
        if not await self.acquire():
            raise self._busy()
        return self

    async def __aexit__(self, et: Any, ev: Any, tb: Any) -> None:
        lost = self.lost.is_set()
        await self.release()
        if lost and et is None:
            raise self._lost_error()


class Flight(FlightHandle):
    """The settled role of a join, the asyncio form of ``coord.Flight``
    (see ``FlightHandle`` for the fields): an owner's ``complete`` /
    ``fail``, ``check()``.  ``aborted`` is an ``asyncio.Event``,
    ``updated`` an ``asyncio.Future``."""

    _client: "Client"
    aborted: asyncio.Event
    updated: Optional["asyncio.Future[m.Updated]"]

    def __init__(self, client: "Client", conn: Optional[_AConn], j: m.Joined) -> None:
        super().__init__(client, conn, j, asyncio.Event)

    async def complete(self, result: m.Payload, keep: Optional[float] = None, *,
                       by_ref: Optional[bool] = None) -> int:
        """Delivers result to the followers (and stores it ``keep``
        seconds); returns how many got it.  ``Fenced`` when too late.
        ``by_ref`` as ``coord.Flight.complete``: None sends a result over
        ``max_frame - 256`` as a sealed memfd, True always, False never."""
        fields, fd = self._completion(result, keep, by_ref)
        if fd is None:
            return self._ended(await self._conn.call("flight.complete", fields))
        try:
            return self._ended(await self._conn.call("flight.complete", fields, fd=fd))
        finally:
            os.close(fd)

    async def complete_fd(self, fd: Any, keep: Optional[float] = None) -> int:
        """Completes by reference with fd (see ``coord.Flight.complete_fd``;
        fd stays the caller's)."""
        fields, n = self._completion_fd(fd, keep)
        return self._ended(await self._conn.call("flight.complete", fields, fd=n))

    async def fail(self, code: str, message: str = "", retryable: bool = False,
                   keep: Optional[float] = None, retry_after: Optional[float] = None) -> int:
        """Fails the flight; ``retry_after`` seconds (needs ``retryable``)
        starts a backoff: joins of the key get this failure at once for
        that long."""
        fields = self._end(m.flight_fail(code, message, retryable, keep, retry_after))
        return self._ended(await self._conn.call("flight.fail", fields))


class _FlightAPI:
    def __init__(self, client: "Client") -> None:
        self._c = client

    async def join(self, key: m.Name, *, ttl: Optional[float] = 30.0,
                   wait: Optional[float] = None, max_age: Optional[float] = None,
                   abort_when_orphaned: bool = False, stale: Optional[float] = None,
                   notify: bool = False, supersede: bool = False, priority: int = 0,
                   version: Optional[m.Name] = None,
                   other_version: Optional[str] = None) -> Flight:
        """Joins the flight of key; returns when the role is settled (see
        ``coord.Client.flight.join``: ``supersede`` or a higher
        ``priority`` takes a running flight over, ``version`` and
        ``other_version`` keep the flights of code versions apart or
        not).  Cancelling the task that waits sends ``cancel`` (an
        ownership that crossed it is failed as retryable)."""
        c = self._c
        j = Join(c, key, ttl=ttl, wait=wait, max_age=max_age,
                 abort_when_orphaned=abort_when_orphaned, stale=stale, notify=notify,
                 flight=lambda conn, jd: Flight(c, conn, jd),
                 future=lambda conn: conn.loop.create_future(), supersede=supersede,
                 priority=priority, version=version, other_version=other_version)
        return j._joined(await _granting(c, j, "flight.join", j.fields, j.limit))

    async def complete(self, f: Flight, result: m.Payload, keep: Optional[float] = None, *,
                       by_ref: Optional[bool] = None) -> int:
        """``f.complete(result, keep, by_ref=by_ref)``."""
        return await f.complete(result, keep, by_ref=by_ref)

    async def complete_fd(self, f: Flight, fd: Any, keep: Optional[float] = None) -> int:
        """``f.complete_fd(fd, keep)``."""
        return await f.complete_fd(fd, keep)

    async def fail(self, f: Flight, code: str, message: str = "", retryable: bool = False,
                   keep: Optional[float] = None, retry_after: Optional[float] = None) -> int:
        """``f.fail(code, message, retryable, keep, retry_after)``."""
        return await f.fail(code, message, retryable, keep, retry_after)

    async def list(self) -> List[m.FlightEntry]:
        """The scope's running flights (``FlightEntry``)."""
        return await self._c._do(calls.flight_list())

    async def disable(self, prefix: m.Name = "") -> None:
        """The kill switch: every new join of a key starting with prefix
        ("" = every key of the scope) owns a flight of its own at once
        (``bypass``).  Durable; announced on ``-flights``."""
        await self._c._do(calls.flight_disable(prefix))

    async def enable(self, prefix: m.Name = "") -> None:
        """Ends ``disable(prefix)``."""
        await self._c._do(calls.flight_enable(prefix))

    async def disabled(self) -> List[Union[str, bytes]]:
        """The disabled prefixes of the scope."""
        return await self._c._do(calls.flight_disabled())


class _RecordAPI:
    """``c.records``: the stored completion records of the scope."""

    def __init__(self, client: "Client") -> None:
        self._c = client

    async def get(self, key: m.Name) -> Optional[m.Record]:
        """The record of key (``Record``), None when there is none."""
        return await self._c._do(calls.record_get(key))

    async def list(self, prefix: m.Name = "", limit: Optional[int] = None
                   ) -> List[m.RecordEntry]:
        """The records whose keys start with prefix (``RecordEntry``)."""
        return await self._c._do(calls.record_list(prefix, limit))

    async def purge(self, prefix: m.Name = "") -> m.Purged:
        """Deletes the records whose keys start with prefix and ends their
        running flights; returns the number deleted (``.fenced``: the
        flights ended)."""
        return await self._c._do(calls.record_purge(prefix))


class Leadership(LeaderTerm):
    """Leadership of a workstream, the asyncio form of
    ``coord.Leadership``: ``async with c.leader(ws) as lead`` campaigns
    (raising ``Timeout``, ``Disabled``, ``ProtocolPinned``... when not
    elected) and resigns.  ``lost`` and ``drain_requested`` are
    ``asyncio.Event``s; the lease renews in a task of its own."""

    _client: "Client"
    lost: asyncio.Event
    drain_requested: asyncio.Event

    def __init__(self, client: "Client", workstream: m.Name, *,
                 lease: Optional[float] = m.DEFAULT_LEASE, steal: bool = False,
                 timeout: Optional[float] = None, protocol: Optional[str] = None,
                 incident: Optional[str] = None,
                 capabilities: Optional[Sequence[str]] = None) -> None:
        super().__init__(client, workstream, lease=lease, steal=steal, timeout=timeout,
                         protocol=protocol, incident=incident, event=asyncio.Event,
                         capabilities=capabilities)
        self._renewer: Optional["asyncio.Task[None]"] = None

    async def campaign(self, *, if_available: bool = False) -> bool:
        """Waits to be elected (up to ``timeout``); True once leading.  With
        ``if_available`` (or ``timeout=0``) False at once when led.
        Cancelling the task that waits sends ``cancel`` (a grant that
        crossed it is resigned)."""
        fields = self._campaign_fields(if_available)
        try:
            r = await _granting(self._client, self, "leader.campaign", fields,
                                self._campaign_limit(fields))
        except BaseException:
            self._refused(None)
            raise
        if not self._elected(r):
            return False
        self._renewer = asyncio.get_running_loop().create_task(self._renew_loop())
        return True

    def _stop_renewal(self) -> None:
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
            if self._expired(now):
                return
            r = await _renew(conn, "leader.renew", self._fields(), self._deadline - now)
            if r is False:
                return
            if r is not None and not self._renew_reply(r, now):
                return

    async def _call(self, op: str, fields: Dict[str, Any],
                    parse: Callable[[Dict[str, Any]], T]) -> T:
        f = self._fields(**fields)
        return self._reply(await self._conn.call(op, f), parse)

    async def commit(self, op_id: m.Name, key: Optional[m.Name] = None,
                     value: Optional[m.Payload] = None) -> m.Commit:
        """Applies key=value (or, without key, records that op_id's effect
        happened) once per op_id, and settles its claim (see
        ``coord.Leadership.commit``)."""
        return await self._call("leader.commit", m.commit(op_id, key, value), m.commit_result)

    async def claim(self, op_id: m.Name) -> m.Claim:
        """Claims op_id for this generation before doing its external
        effect (see ``coord.Leadership.claim``)."""
        k = m.name(op_id, "op_id")
        return await self._call("leader.claim", {"op_id": k}, lambda b: m.claim(k, b))

    async def abandon(self, op_id: m.Name, reason: str) -> m.Abandon:
        """Settles op_id as never to be done (``reason``: 1..256 bytes)."""
        return await self._call("leader.abandon", m.abandon(op_id, reason), m.abandon_result)

    async def drain(self) -> None:
        """Announces the term is finishing: new claims get ``Draining``;
        commits and abandons still work; ``resign`` ends it."""
        await self._call("leader.drain", {}, lambda b: None)
        self._drained()

    async def pending(self, limit: Optional[int] = None) -> m.Page:
        """The workstream's claimed, unsettled ops (``PendingOp``), oldest
        first: a new leader reconciles each one."""
        return await self._client.leader.pending(self.workstream, limit)

    async def read(self, key: m.Name) -> Optional[bytes]:
        """The workstream's committed value of key (None when unset)."""
        got = await self._client.leader.read(self.workstream, key)
        return got[0] if got else None

    async def resign(self) -> None:
        """Ends the term (nothing when it is over already)."""
        term = self._resign()
        if term is None:
            return
        self._stop_renewal()            # not waited for: as Lock.release
        try:
            r = await term[0].call("leader.resign", term[1])
        except ConnectionLost:
            return
        self._resigned(r)

    async def __aenter__(self) -> "Leadership":
        try:
            granted = await self.campaign()
        except UNREACHABLE as e:    # no broker: the workstream's fallback, else e
            return self._unreachable(e)
        if not granted:
            raise self._busy()
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
                 protocol: Optional[str] = None, incident: Optional[str] = None,
                 capabilities: Optional[Sequence[str]] = None) -> Leadership:
        """A Leadership handle of workstream (not campaigning yet): ``async with``
        campaigns and resigns.  ``lease`` seconds (renewed every third),
        ``steal`` breaks the leader, ``timeout`` (None: wait, 0: only if
        free now), ``protocol`` "name@N", ``incident`` a steal's reason,
        ``capabilities`` the names this campaign implements (a list of str;
        a workstream that pins one it lacks raises ``ProtocolPinned``)."""
        return Leadership(self._c, workstream, lease=lease, steal=steal, timeout=timeout,
                          protocol=protocol, incident=incident, capabilities=capabilities)

    async def define(self, workstream: m.Name, *, protocol: Any = m.OMIT,
                     max_hold: Any = m.OMIT, steal: Any = m.OMIT, mode: Any = m.OMIT,
                     fallback: Any = m.OMIT, canonical_fence: Any = m.OMIT,
                     lock_name: Any = m.OMIT, capabilities: Any = m.OMIT,
                     if_available: Any = m.OMIT,
                     force: bool = False) -> m.Descriptor:
        """Changes the stored descriptor field by field: a field left out
        (``coord.OMIT``, the default) keeps its value, None returns it to
        its default, a value replaces it.  ``max_hold`` in seconds (0:
        none); ``steal`` "never", "incident-only" or "allowed"; ``mode``
        "shadow", "read-only" or "active"; ``lock_name`` the leadership
        lock's name; ``capabilities`` the names every campaign must carry
        (a list of str); ``if_available`` "allowed" or "never" (campaigns
        that only look get ``Policy``).  Returns the descriptor."""
        return await self._c._do(calls.leader_define(
            workstream, protocol=protocol, max_hold=max_hold, steal=steal, mode=mode,
            fallback=fallback, canonical_fence=canonical_fence, lock_name=lock_name,
            capabilities=capabilities, if_available=if_available, force=force))

    async def describe(self, workstream: m.Name) -> m.Descriptor:
        """The stored descriptor; ``NotFound`` when never defined."""
        return await self._c._do(calls.leader_describe(workstream))

    async def info(self, workstream: m.Name) -> m.LeaderInfo:
        """The workstream now (``LeaderInfo``): who leads, the generation,
        the mode, the pin."""
        return await self._c._do(calls.leader_info(workstream))

    async def history(self, workstream: m.Name, limit: Optional[int] = None) -> m.Page:
        """The last terms (``Term``), newest first."""
        return await self._c._do(calls.leader_history(workstream, limit))

    async def pending(self, workstream: m.Name, limit: Optional[int] = None) -> m.Page:
        """The claimed, unsettled ops (``PendingOp``), oldest first."""
        return await self._c._do(calls.leader_pending(workstream, limit))

    async def check(self, workstream: m.Name, generation: int) -> m.Check:
        """Whether ``generation`` is live now (``Fenced`` if not): for a
        service acting on a leader's behalf; a check, not a lock."""
        return await self._c._do(calls.leader_check(workstream, generation))

    async def drain(self, workstream: m.Name, generation: Optional[int] = None) -> None:
        """Asks the leader to drain (it gets ``leader.drain``, reason
        "requested"); ``generation`` defaults to the live one."""
        if generation is None:
            generation = (await self.info(workstream)).live_generation or 0
        await self._c._do(calls.leader_drain(workstream, generation))

    async def read(self, workstream: m.Name, key: m.Name) -> Optional[Tuple[bytes, int]]:
        """(value, generation that wrote it) of a committed key; None when
        unset."""
        return await self._c._do(calls.leader_read(workstream, key))

    async def disable(self, workstream: m.Name) -> int:
        """The kill switch: fences the leader and refuses campaigns
        without ``incident``; returns the fenced generation (0: none)."""
        return await self._c._do(calls.leader_disable(workstream))

    async def enable(self, workstream: m.Name) -> None:
        """Ends ``disable``."""
        await self._c._do(calls.leader_enable(workstream))


class Subscription(SubscriptionBase):
    """Messages of one or more channels, the asyncio form of
    ``coord.Subscription``: ``async with c.subscribe(ch) as sub: async for
    msg in sub``; with ``timeout`` the loop ends once no item came for that
    long.  Items wait in a bounded queue (``dropped`` counts the oldest
    dropped when it was full)."""

    def __init__(self, client: "Client", channels: List[Union[str, bytes]],
                 timeout: Optional[float] = None) -> None:
        super().__init__(client, channels, timeout)
        self._ready = asyncio.Event()

    @property
    def queued(self) -> int:
        """Items waiting to be read."""
        return len(self._q)

    def _push(self, item: Any, size: int = 0) -> None:
        self._q.push(item, size)
        self._ready.set()

    def _closed(self, exc: BaseException, reconnect: bool) -> None:
        self._q.push(Closed(exc, reconnect))
        self._ready.set()

    async def _take(self) -> Any:
        while not len(self._q):
            self._ready.clear()
            await self._ready.wait()
        return self._q.pop()

    async def open(self) -> "Subscription":
        """Subscribes (``async with`` does it); returns self."""
        if not self._open:
            await self._client._subscribe(self)
            self._open = True
        return self

    async def close(self) -> None:
        """Unsubscribes (``async with`` does it on leaving)."""
        if self._open:
            self._open = False
            await self._client._unsubscribe(self)

    async def get(self, timeout: Optional[float] = None) -> Any:
        """The next item, or None when timeout passed first."""
        self._check()
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
            if self._item(item):
                return item
            try:
                await self._client._ensure()
            except CoordError as e:
                self._renew_failed(e)
                raise

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


async def _open_socket(conn: _AConn, path: str, *, autostart_ok: bool, broker: Optional[str],
                       idle_exit: int, timeout: float) -> None:
    d = Dial(path, autostart_ok=autostart_ok, timeout=timeout)
    loop = asyncio.get_running_loop()
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        try:
            sock.setblocking(False)
            await loop.sock_connect(sock, path)
            FdTransport(loop, sock, conn)    # reads descriptors too (fdpass.py)
            break
        except BaseException as e:
            sock.close()
            if not isinstance(e, OSError):
                raise
            if d.failed(e) and d.started(await loop.run_in_executor(
                    None, autostart, path, broker, idle_exit, d.deadline)):
                continue
            await asyncio.sleep(d.pause(e))
    assert conn.transport is not None
    try:
        check_peer(conn.transport.get_extra_info("socket"), path)
    except BaseException:
        conn.transport.abort()
        raise


class Client(ClientBase):
    """The asyncio client: ``async with coord.aio.Client() as c`` or
    ``c = await coord.aio.connect()``.  Options as ``coord.Client``."""

    def __init__(self, socket: Optional[str] = None, *, scope: m.Name = "",
                 client: Optional[str] = None, autostart: bool = True,
                 broker: Optional[str] = None, connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
                 idle_exit: int = DEFAULT_IDLE_EXIT, reconnect: bool = False,
                 request_timeout: Optional[float] = DEFAULT_REQUEST_TIMEOUT,
                 max_queued: int = DEFAULT_MAX_QUEUED,
                 max_queued_bytes: int = DEFAULT_MAX_QUEUED_BYTES) -> None:
        super().__init__(socket, scope=scope, client=client, autostart=autostart, broker=broker,
                         connect_timeout=connect_timeout, idle_exit=idle_exit,
                         reconnect=reconnect, request_timeout=request_timeout,
                         max_queued=max_queued, max_queued_bytes=max_queued_bytes)
        self._conn: Optional[_AConn] = None
        self._connecting: Optional[asyncio.Lock] = None
        self._opening: Optional[_AConn] = None     # the connection hello is awaited on
        self.flight = _FlightAPI(self)
        self.records = _RecordAPI(self)
        self.leader = _LeaderAPI(self)

    async def connect(self) -> "Client":
        """Connects now (else the first call does); returns self."""
        await self._ensure()
        return self

    async def _open(self) -> _AConn:
        # A broker that dies with us in its backlog resets the connection
        # before hello is answered (a restart racing a reconnect), and one
        # that shuts down refuses with SHUTTING_DOWN: try again within
        # connect_timeout, as the first connect does.
        # close() meanwhile: the connection being opened is shut, and
        # the call raises as any call on a closed client.
        deadline = time.monotonic() + self.connect_timeout
        while True:
            try:
                conn = await self._open_once()
            except calls.HelloDropped:
                if self._closed:
                    raise ConnectionLost("the client is closed") from None
                if time.monotonic() >= deadline:
                    raise
                await asyncio.sleep(0.01)
                continue
            if self._closed:
                await conn.shutdown()
                raise ConnectionLost("the client is closed")
            return conn

    async def _open_once(self) -> _AConn:
        conn = _AConn(self)
        self._opening = conn
        try:
            return await self._hello_on(conn)
        except BaseException:
            # cancelled (asyncio.timeout, wait_for) before hello was
            # answered: the half-open connection is closed, not left to
            # the loop
            conn.abort()
            raise
        finally:
            self._opening = None

    async def _hello_on(self, conn: _AConn) -> _AConn:
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
            raise calls.hello_timeout(hello_timeout) from None
        except CoordError as e:
            await conn.shutdown()
            raise calls.hello_failed(conn.core.bye, e) from None
        if not r.ok:
            await conn.shutdown()
        mf = self._hello(conn, r)
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
            c = self._usable()
            if c is not None:
                return c
            c = await self._open()
            self._conn = c
            for ch in list(self._router.subs):
                r = await c.call("sub.subscribe", {"channel": ch})
                if not r.ok:
                    raise r.error()
            return c

    def _conn_lost(self, conn: _AConn, exc: BaseException) -> None:
        self._lost(conn, exc)

    async def close(self) -> None:
        """Closes the connection: the broker releases our locks, resigns
        our leaderships, passes our flights on."""
        self._closed = True
        for c in (self._opening, self._conn):
            if c is not None:
                await c.shutdown()

    async def __aenter__(self) -> "Client":
        return await self.connect()

    async def __aexit__(self, *a: Any) -> None:
        await self.close()

    async def call(self, op: str, **fields: Any) -> Dict[str, Any]:
        """Any request (fields as on the wire, None left out); the reply's
        map, or the error for its code raised."""
        r = await (await self._ensure()).call(op, fields)
        if not r.ok:
            raise r.error()
        return r.body

    async def _do(self, q: "calls.Req[T]") -> T:
        try:
            body = await self.call(q.op, **q.fields)
        except NotFound:
            if q.absent:
                return q.missing()
            raise
        return q.parse(body)

    async def ping(self) -> float:
        """A round trip to the broker; its time in seconds."""
        t = time.monotonic()
        await self.call("ping")
        return time.monotonic() - t

    async def stats(self) -> m.Stats:
        """The broker's counters (a dict); ``.latency`` has the latency
        percentiles as ``Latency`` (seconds)."""
        return await self._do(calls.stats())

    def lock(self, name: m.Name, mode: str = "exclusive", *, timeout: Optional[float] = None,
             lease: Optional[float] = None, steal: bool = False) -> Lock:
        """A lock handle; ``async with`` acquires it.  ``timeout`` seconds
        (None: wait forever, 0: only if free now), ``lease`` seconds
        renewed while held (None: no lease), ``steal`` breaks the holders."""
        return Lock(self, name, mode, timeout=timeout, lease=lease, steal=steal)

    async def try_lock(self, name: m.Name, mode: str = "exclusive", *,
                       lease: Optional[float] = None) -> Optional[Lock]:
        """The lock, held, if it is free now; else None."""
        lk = Lock(self, name, mode, lease=lease)
        return lk if await lk.acquire(if_available=True) else None

    async def locks(self) -> m.LockState:
        """Held and waiting locks of the scope (``lock.query``)."""
        return await self._do(calls.locks())

    async def once(self, key: m.Name, fn: Callable[[Flight], Awaitable[m.Payload]], *,
                   ttl: float = 30.0, wait: Optional[float] = None, keep: Optional[float] = None,
                   max_age: Optional[float] = None, stale: Optional[float] = None,
                   notify: Union[bool, Callable[[m.Updated], Any]] = False,
                   fallback: str = "fail", retries: int = 3,
                   abort_when_orphaned: bool = False, supersede: bool = False,
                   priority: int = 0, version: Optional[m.Name] = None,
                   other_version: Optional[str] = None) -> Result:
        """As ``coord.Client.once`` (``fallback`` "fail", "run" or "retry";
        ``supersede``, ``priority``, ``version``, ``other_version`` as on
        ``flight.join``); fn is a coroutine function, and a ``notify``
        function (plain or coroutine) runs on the loop."""
        o = Once(key, ttl=ttl, wait=wait, keep=keep, max_age=max_age, stale=stale,
                 notify=notify, fallback=fallback, retries=retries,
                 abort_when_orphaned=abort_when_orphaned, supersede=supersede,
                 priority=priority, version=version, other_version=other_version)
        while True:
            try:
                f = await self.flight.join(o.key, **o.join())
            except FALLBACK_ERRORS as e:
                if o.fall_back(e):
                    continue
                return o.ran_alone(await fn(Flight(self, None, o.local_flight())), e, o.retried)
            if f.role in ("result", "failed"):
                r = o.follow(f, _notify_task)
                if r is None:
                    continue
                return r
            try:
                out = m.payload(await fn(f), "result")
            except BaseException as e:
                # sent, not awaited: a cancelled task cannot wait; an
                # exception waits for the failure to be delivered
                code, msg, retryable, retry_after = owner_failure(e)
                assert f._conn is not None
                call = f._conn.fire("flight.fail", f._end(
                    m.flight_fail(code, msg, retryable, None, retry_after)))
                if call is not None and isinstance(e, Exception):
                    try:       # within request_timeout, as the blocking client's
                        await _reply_of(call, self.request_timeout)
                    except (CoordError, asyncio.TimeoutError):
                        pass
                raise
            try:
                await f.complete(out, o.store)
            except UNREACHABLE as e:
                if not o.local:
                    raise
                return o.completed_alone(out, e)
            return o.owned(f, out)

    async def publish(self, channel: m.Name, data: m.Payload) -> int:
        """Sends data to the scope's other subscribers; returns how many."""
        return await self._do(calls.publish(channel, data))

    def subscribe(self, *channels: m.Name, timeout: Optional[float] = None) -> Subscription:
        """``async with c.subscribe("news") as sub: async for msg in sub: ...``"""
        if not channels:
            raise TypeError("subscribe needs a channel")
        return Subscription(self, [m.name(ch, "channel") for ch in channels], timeout)

    def watch(self, *channels: str, timeout: Optional[float] = None) -> Subscription:
        """Lifecycle events of the broker's channels (default all three:
        ``-locks``, ``-flights``, ``-leaders``)."""
        return self.subscribe(*calls.watched(channels), timeout=timeout)

    async def _subscribe(self, sub: Subscription) -> None:
        conn = await self._ensure()
        for ch in sub.channels:
            if self._router.add_sub(ch, sub):
                try:
                    r = await conn.call("sub.subscribe", {"channel": ch})
                except BaseException:
                    await self._unsubscribe(sub)
                    raise
                if not r.ok:
                    await self._unsubscribe(sub)
                    raise r.error()

    async def _unsubscribe(self, sub: Subscription) -> None:
        last = self._router.remove_sub(sub, sub.channels)
        conn = self._conn
        if conn is None or not conn.alive:
            return
        for ch in last:
            try:
                await conn.call("sub.unsubscribe", {"channel": ch})
            except CoordError:
                pass

    async def try_leader(self, workstream: m.Name, *, lease: Optional[float] = m.DEFAULT_LEASE,
                         protocol: Optional[str] = None, incident: Optional[str] = None,
                         capabilities: Optional[Sequence[str]] = None
                         ) -> Optional[Leadership]:
        """Leadership if nobody leads now, else None."""
        lead = Leadership(self, workstream, lease=lease, protocol=protocol, incident=incident,
                          capabilities=capabilities)
        return lead if await lead.campaign(if_available=True) else None


async def connect(socket: Optional[str] = None, **kw: Any) -> Client:
    """``await Client(socket, **kw).connect()``."""
    return await Client(socket, **kw).connect()
