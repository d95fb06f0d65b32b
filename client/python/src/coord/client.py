"""client.py - the blocking client.

One connection (``_Conn``) is read by a caller waiting for its reply
while no one else reads, else by its reader thread (leader/follower: see
``_Conn``'s comment); whoever reads feeds the sans-I/O ``Core``, completes
the waiting calls and routes events (lock lost, flight abort, leader
lost, channel messages) to their handles.  A caller that does not read
blocks on a per-call lock (``_Call``).  One ticker thread per client
renews leases (locks and leaderships) at a third of the lease and declares
a lease lost locally once its end passed without an acknowledged renewal.

A call that waits (lock, flight join, campaign) and is interrupted
(KeyboardInterrupt, or ``cancel()`` from another thread) sends the
protocol's ``cancel``; if the grant raced the cancel, the grant is handed
back (released, resigned, failed as retryable).  Every other request has
a deadline (``request_timeout``): a broker that stops answering makes the
call raise ``Timeout``, never hang.

Whoever reads handles the frames of each read in wire order (replies and
events alike), so a caller woken by a reply sees every event sent before
it.  Locks: ``_connect_mu`` serializes connecting (it is held while a
connection opens); ``_mu`` guards the client's state and is never held
while waiting for the broker or joining a thread, so a reader (a caller
or the reader thread) that sees the connection end (needing ``_mu`` in
``_conn_lost``) is never waited for under it; the read token is only
ever tried, never waited for, so it is in no lock order.
"""
from __future__ import annotations

import concurrent.futures
from _thread import allocate_lock as _allocate_lock
import heapq
import itertools
import os
import queue
import select
import threading
import time
from collections import deque
from typing import (Any, Callable, Deque, Dict, Iterator, List, Optional, Sequence, Set, Tuple,
                    TypeVar, Union)

from . import calls, messages as m
from .calls import ClientBase
from .core import (DEFAULT_MAX_FRAME, DEFAULT_MAX_QUEUED, DEFAULT_MAX_QUEUED_BYTES,
                   DEFAULT_REQUEST_TIMEOUT, Core, Event, Item, Reply)
from .errors import ConnectionLost, CoordError, NotFound, ProtocolError
from .fdpass import READ_SIZE, recv_fds, send_frame_fd
from .handles import (FALLBACK_ERRORS, UNREACHABLE, Closed, FlightHandle, Grantee, Join,
                      LeaderTerm, LockHandle, Once, Result, SubscriptionBase, no_reply,
                      owner_failure)
from .paths import (DEFAULT_CONNECT_TIMEOUT, DEFAULT_IDLE_EXIT, MIN_HELLO_TIMEOUT, instance_id,
                    open_socket)

T = TypeVar("T")
Callback = Callable[["_Call", Optional[Reply], Optional[BaseException]], None]


class _Call:
    """One request's future.  ``hook`` runs in the reading thread before
    anyone is woken (it registers what the reply creates, so an event right
    behind the reply finds it); ``callback`` runs there after.  Wait for
    it with ``_Conn.settle`` / ``_Conn.wait`` (which read the socket
    themselves when nobody else does), never on the call alone.

    A waiter that does not read sleeps on a bare lock taken at creation
    and released once the call is done (``_done_lk``), not on a
    ``threading.Event`` (whose Condition makes a lock and a waiter list
    per wait)."""

    __slots__ = ("_done_lk", "_done", "_mu", "reply", "exc", "hook", "callback", "_abandon",
                 "rid")

    def __init__(self, hook: Optional[Callable[[Reply], None]] = None,
                 callback: Optional[Callback] = None) -> None:
        self._done_lk = _allocate_lock()
        self._done_lk.acquire()
        self._done = False
        self._mu = _allocate_lock()
        self.reply: Optional[Reply] = None
        self.exc: Optional[BaseException] = None
        self.hook = hook
        self.callback = callback
        self._abandon: Optional[Callable[[Reply], Any]] = None
        self.rid = 0

    def _complete(self, reply: Reply) -> None:
        try:
            if self.hook is not None:
                try:
                    self.hook(reply)
                except Exception:
                    pass
        finally:
            # completed even when an interruption (KeyboardInterrupt) left
            # the hook: else its waiter (and a hand-back) waits for ever
            with self._mu:
                self.reply = reply
                self._done = True
                self._done_lk.release()
                ab = self._abandon
        if ab is not None:
            ab(reply)
        if self.callback is not None:
            self.callback(self, reply, None)

    def _fail(self, exc: BaseException) -> None:
        with self._mu:
            if self._done:
                return
            self.exc = exc
            self._done = True
            self._done_lk.release()
        if self.callback is not None:
            self.callback(self, None, exc)

    def abandon(self, fn: Callable[[Reply], Any]) -> None:
        """Nobody waits any more: fn(reply) hands back what the reply
        grants, now if it already came, else when it comes."""
        with self._mu:
            if not self._done:
                self._abandon = fn
                return
            reply = self.reply
        if reply is not None:
            fn(reply)

    def _sleep(self, timeout: Optional[float]) -> bool:
        """Sleeps until someone else completes the call (timeout: seconds,
        None for ever); False when timeout passed first."""
        if self._done:
            return True
        if not self._done_lk.acquire(True, -1 if timeout is None else max(timeout, 0.0)):
            return False
        self._done_lk.release()       # the next waiter passes too
        return True


# How long the reader thread leaves the socket to the callers after one of
# them last read it (seconds): see "Who reads" in _Conn's comment.
_IDLE = 0.01
_INTERRUPTED = ("interrupted while reading from the broker: the connection's stream "
                "is in an unknown state")


class _Conn:
    """One connection: socket, core, and who reads it (callers or the
    reader thread).

    Who reads (leader/follower).  Whoever holds the read token
    (``_rtok``, taken only without blocking) reads the socket and handles
    every frame it brings, in wire order, exactly as the other would: its
    own reply, other callers' replies, events (lock lost, flight abort,
    channel messages...), the descriptors that come along (``recv_fds``
    into ``core.add_fds``).

    - A caller waiting for its reply (``settle``) takes the token if it is
      free and reads until its reply came (``_lead``): the reply costs it
      one wake-up (the socket's), as for redis-py, where a reader thread
      cost two (the reader's, then the caller's: a futex and a GIL
      hand-off).  It polls before each read, so its deadline, an
      interruption (KeyboardInterrupt) or ``cancel()`` never find bytes
      half read; the frame buffer is the core's and the frames read but
      not yet handled wait in ``_rx``, both the connection's, so the next
      reader carries on where an interrupted one stopped.  It then hands
      the token back, and wakes the reader thread if a follower still
      waits (below) or frames wait in ``_rx``.
    - A caller that finds the token taken is a follower: it puts its call
      in ``_followers``, tries the token once more (the leader may have
      just let go: see the race below), and else sleeps on its call's lock
      until the token's holder completes it.
    - The reader thread (``_run``, "coord-reader") exists for the time no
      call is in flight: events (a lock stolen, the connection lost) must
      arrive then too.  It sleeps on ``_kick`` and takes the token (a) when
      woken because followers would be stranded, or (b) when no caller
      took the token for ``_IDLE`` seconds (``_leads`` did not move; it
      looks every ``_IDLE`` seconds: no busy wait).  Holding it, it reads
      with blocking reads (nobody waits on it to let go: callers that
      came meanwhile are its followers), and gives the token back once a
      caller missed it (``_missed``) and no follower is stranded.  So in a
      steady run of calls callers read their own replies, and an idle
      client's reader thread sits in recv() and handles events at once;
      the first call after an idle spell is a follower (the old cost:
      two wake-ups; waking the reader thread out of recv() with a pipe
      instead would cost as much: its wake-up, then the caller's once it
      lets go), and an event that comes less than ``2*_IDLE`` after
      a caller last read waits at most that long.  ``shutdown()`` wakes
      it to read the close when no caller reads.
    - No stranded follower: a follower adds itself before its second try,
      and a holder checks ``_stranded()`` after releasing: either the
      follower's second try finds the token free, or the holder sees the
      follower and wakes the reader thread (which, if a caller took the
      token meanwhile, leaves it to that one, who checks on release in
      turn).  The token is an RLock: a callback run by a reader that calls
      the client reads on (where a reader thread of its own would wait on
      itself).
    - Connection loss (EOF, an error, a broken frame) is seen by whoever
      reads and runs the same path there (``_lose``: fail the waiting
      calls, ``client._conn_lost``), once.  The token is never waited for
      (only tried), so a caller-reader that takes ``client._mu`` there
      waits for no one who waits for it (``_mu`` is never held while
      waiting for the broker).
    - An interruption (KeyboardInterrupt: the main thread) while handling
      frames is held back until the frames read are handled, then raised;
      one that lands between a read's return and its bytes being fed to
      the core (microseconds: the reader only reads once poll said there
      are bytes) may have lost bytes, so the connection is closed as
      broken (redis-py disconnects too), rather than read on mid-frame.
    """

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
        self.fds = False                    # hello: the broker takes descriptors
        self.max_ref_bytes = 0
        self.lost_seen = False              # _conn_lost ran (guarded by client._mu)
        # who reads: see the class's comment
        # the read token, only ever tried: an RLock, so that an interrupted
        # taker can tell whether it holds it (_is_owned: the result of an
        # acquire can be lost to a KeyboardInterrupt) and a callback run by
        # a reader that calls the client reads on
        self._rtok: Any = threading.RLock()
        self._kick = _allocate_lock()       # released: the reader thread is wanted
        self._kick.acquire()
        self._leads = 0                     # times a caller took the token
        self._missed = False                # a caller found the token taken
        self._followers: Set[_Call] = set()
        self._rx: Deque[Item[_Call]] = deque()   # read, not yet handled
        self._hot = False                   # bytes read, not yet fed to the core
        self._closing = False               # shutdown(): the reader thread reads the EOF
        self._poll = select.poll()
        self._poll.register(sock.fileno(), select.POLLIN)
        self.reader = threading.Thread(target=self._run, name="coord-reader", daemon=True)

    def send(self, op: str, fields: Dict[str, Any], hook: Optional[Callable[[Reply], None]] = None,
             callback: Optional[Callback] = None, fd: Optional[int] = None) -> _Call:
        """``fd``: a descriptor sent with the frame (it stays the
        caller's)."""
        call = _Call(hook, callback)
        with self.send_mu:
            with self.core_mu:
                if not self.alive:
                    raise self.error or ConnectionLost("not connected")
                call.rid, frame = self.core.request(op, fields, call)
            try:
                if fd is None:
                    self.sock.sendall(frame)
                else:
                    send_frame_fd(self.sock, frame, fd)
            except OSError:
                pass      # the reader sees the close and fails the call
        return call

    def fire(self, op: str, fields: Dict[str, Any],
             callback: Optional[Callback] = None) -> Optional[_Call]:
        """Sends without waiting; errors are ignored (None: not sent)."""
        try:
            return self.send(op, fields, callback=callback)
        except CoordError:
            return None

    def call(self, op: str, fields: Dict[str, Any],
             hook: Optional[Callable[[Reply], None]] = None, fd: Optional[int] = None) -> Reply:
        """A request that does not wait by design: its reply within the
        client's ``request_timeout``, else ``Timeout``."""
        return self.wait(self.send(op, fields, hook, fd=fd), self.client.request_timeout, op)

    def wait(self, call: _Call, timeout: Optional[float] = None, op: str = "") -> Reply:
        """call's reply; ``Timeout`` when timeout (seconds) passed without
        one (the request stays registered: a late reply completes
        nothing)."""
        if not self.settle(call, timeout):
            assert timeout is not None
            raise no_reply(op, timeout)
        if call.exc is not None:
            raise call.exc
        assert call.reply is not None
        return call.reply

    # ---- reading: see the class's comment ----

    def settle(self, call: _Call, timeout: Optional[float] = None) -> bool:
        """Waits until call is done (timeout: seconds, None for ever),
        reading the socket itself while nobody else does; False when
        timeout passed first."""
        if call._done:
            return True
        deadline = None if timeout is None else time.monotonic() + max(timeout, 0.0)
        tok = self._rtok
        try:
            if not tok.acquire(False):
                self._missed = True
                try:
                    self._followers.add(call)
                    if not tok.acquire(False):     # the leader may have just let go
                        return call._sleep(None if deadline is None
                                           else deadline - time.monotonic())
                finally:
                    self._followers.discard(call)
            return self._lead(call, deadline)
        finally:
            if tok._is_owned():
                tok.release()
                if self._rx or self._stranded():
                    self._wake_reader()

    def _stranded(self) -> bool:
        """A follower waits for a call not yet done (it needs a reader)."""
        return any(not c._done for c in list(self._followers))

    def _wake_reader(self) -> None:
        try:
            self._kick.release()
        except RuntimeError:
            pass                                # already woken

    def _lead(self, call: _Call, deadline: Optional[float]) -> bool:
        """Token held: reads until call is done; False when deadline
        passed first."""
        self._leads += 1
        poll = self._poll.poll
        while not call._done:
            if self._rx:
                self._handle()          # what an interrupted reader left
                continue
            if not self.alive:          # the call failed with the rest (defensive)
                return call._sleep(None if deadline is None else deadline - time.monotonic())
            if deadline is None:
                ms = -1
            else:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                ms = int(left * 1000) + 1
            if poll(ms):
                self._read_some()
        return True

    def _run(self) -> None:
        """The reader thread: reads while no caller does (the class's
        comment)."""
        seen = -1
        while True:
            kicked = self._kick.acquire(True, _IDLE)
            if not self.alive:
                return
            if not kicked and self._leads != seen:
                seen = self._leads          # callers read lately: leave it to them
                continue
            while self._rtok.acquire(False):
                try:
                    # woken for followers: give the token back once they are
                    # served; taken on an idle socket, or to read the close
                    # shutdown() made: once a caller wants it
                    self._missed = kicked and not self._closing
                    if self._rx:
                        self._handle()
                    while self.alive and not (self._missed and not self._stranded()):
                        self._read_some()
                finally:
                    self._rtok.release()
                if not self.alive or not (self._rx or self._stranded()):
                    break
            if not self.alive:
                return
            seen = self._leads

    def _read_some(self) -> None:
        """Token held: one read (it blocks unless poll said there are
        bytes), its frames handled in wire order; at EOF, an error or a
        broken frame, the loss path."""
        if self._rx:
            self._handle()
        err: Optional[BaseException] = None
        eof = False
        try:
            self._hot = True
            data, fds = recv_fds(self.sock, READ_SIZE)
            with self.core_mu:
                if fds:
                    self.core.add_fds(fds)
                if data:
                    self._rx.extend(self.core.receive(data))
                else:
                    eof = True
            self._hot = False
        except ProtocolError as e:
            self._hot = False
            err, eof = e, True
        except OSError as e:
            self._hot = False
            eof = True
            # a refusal the broker wrote before closing was read first
            if self.core.bye is None:
                err = ConnectionLost(f"the connection to the broker failed: {e.strerror}")
        except BaseException:
            if self._hot:               # bytes may be lost: the stream is unknown
                self._hot = False
                self._lose(ConnectionLost(_INTERRUPTED))
            raise
        if eof:
            self._lose(err)
        else:
            self._handle()

    def _handle(self) -> None:
        """Token held: handles the frames read, in wire order (the caller a
        reply wakes has seen every event before it; an event after a reply
        finds what the reply's hook registered).  An interruption is
        raised once they are all handled."""
        rx = self._rx
        held: Optional[BaseException] = None
        while rx:
            try:
                while rx:
                    call, item = rx.popleft()
                    if call is None:
                        self.client._dispatch(item)  # type: ignore[arg-type]
                    else:
                        call._complete(item)  # type: ignore[arg-type]
            except Exception:
                self._lose(None)
                raise
            except BaseException as e:
                if held is None:
                    held = e
        if held is not None:
            raise held

    def _lose(self, err: Optional[BaseException]) -> None:
        """The connection ended (token held, or the reader thread's
        end): fails what waits, tells the client; once."""
        with self.core_mu:
            if not self.alive:
                return
            self.alive = False
            handles, exc = self.core.end(err)
            self.error = exc
        # replies read and not handled (an exception handling the one before)
        handles.extend(c for c, _ in self._rx if c is not None)
        self._rx.clear()
        try:
            self.sock.close()
        except OSError:
            pass
        self._wake_reader()             # it ends
        for h in handles:
            h._fail(exc)
        self.client._conn_lost(self, exc)

    def shutdown(self) -> None:
        self._closing = True
        try:
            self.sock.shutdown(2)
        except OSError:
            pass
        self._wake_reader()             # it reads the close, if no caller does
        # not from the reader thread, nor from a caller that reads (a
        # callback run while handling a frame): the thread would wait for
        # the token its own thread holds
        if threading.current_thread() is not self.reader and self.reader.is_alive() \
                and not self._rtok._is_owned():
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


def _wait(conn: _Conn, call: _Call, owner: Any, give_back: Callable[[Reply], Any],
          op: str, limit: Optional[float]) -> Reply:
    """Waits for a call that may wait long (limit: seconds, None for as
    long as it takes); on an interruption, or the limit passed, sends
    cancel and arranges for a raced grant to be handed back."""
    owner._waiting = (conn, call)
    try:
        return conn.wait(call, limit, op)
    except BaseException:
        if call.reply is None and call.exc is None:
            conn.fire("cancel", {"target": call.rid})
            call.abandon(give_back)
        elif call.reply is not None:
            # interrupted once the reply came (a KeyboardInterrupt held
            # back while the frames read were handled): nobody takes the
            # grant, hand it back
            give_back(call.reply)
        raise
    finally:
        owner._waiting = None


def _granting(client: "Client", owner: Grantee, op: str, fields: Dict[str, Any],
              limit: Optional[float]) -> Reply:
    """A request that waits for a grant (lock, join, campaign): connects,
    sends it with ``owner._granted`` as its hook, waits (``_wait``) with
    ``owner._give_back`` for a grant that comes too late."""
    conn = client._ensure()
    owner._begin()
    call = conn.send(op, fields, hook=lambda r: owner._granted(conn, r, time.monotonic()))
    return _wait(conn, call, owner, lambda r: owner._give_back(conn, r), op, limit)


class Lock(LockHandle):
    """A lock on ``name``; ``with`` acquires it (raising ``Timeout``,
    ``Aborted``, ``ConnectionLost``... when it cannot: the block never runs
    without the lock) and releases it.  ``lost`` (a ``threading.Event``) is
    set when the lock is stolen, expires or its connection goes; the lease
    renews from the client's ticker thread."""

    _client: "Client"
    lost: threading.Event

    def __init__(self, client: "Client", name: m.Name, mode: str = "exclusive", *,
                 timeout: Optional[float] = None, lease: Optional[float] = None,
                 steal: bool = False) -> None:
        super().__init__(client, name, mode, timeout=timeout, lease=lease, steal=steal,
                         event=threading.Event)

    def acquire(self, *, if_available: bool = False) -> bool:
        """Waits for the lock (up to ``timeout``); True once held.  With
        ``if_available`` (or ``timeout=0``) returns False at once when busy."""
        fields, limit = self._acquire_fields(if_available)
        if not self._acquired(_granting(self._client, self, "lock.acquire", fields, limit)):
            return False
        if self.lease:
            self._client._ticker.at(self._next_tick(), self._tick)
        return True

    def _tick(self) -> None:
        conn = self._conn
        if not self._held or conn is None or not self.lease:
            return
        now = time.monotonic()
        if self._expired(conn, now):
            return
        lease = self.lease

        def done(_c: _Call, r: Optional[Reply], _e: Optional[BaseException]) -> None:
            if r is not None:
                self._renewed(r, now, lease)
        if conn.fire("lock.renew", self._renewal(), callback=done) is None:
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
        held = self._release()
        if held is None:
            return
        try:
            r = held[0].call("lock.release", {"lock": held[1]})
        except ConnectionLost:
            return
        self._released(r)

    def __enter__(self) -> "Lock":
        if not self.acquire():
            raise self._busy()
        return self

    def __exit__(self, et: Any, ev: Any, tb: Any) -> None:
        lost = self.lost.is_set()
        self.release()
        if lost and et is None:
            raise self._lost_error()


class Flight(FlightHandle):
    """The settled role of a join (see ``FlightHandle`` for the fields):
    an owner's ``complete`` / ``fail``, ``check()``.  ``aborted`` is a
    ``threading.Event``, ``updated`` a ``concurrent.futures.Future``."""

    _client: "Client"
    aborted: threading.Event
    updated: Optional["concurrent.futures.Future[m.Updated]"]

    def __init__(self, client: "Client", conn: Optional[_Conn], j: m.Joined) -> None:
        super().__init__(client, conn, j, threading.Event)

    def complete(self, result: m.Payload, keep: Optional[float] = None, *,
                 by_ref: Optional[bool] = None) -> int:
        """Delivers result to the followers (and stores it ``keep``
        seconds); returns how many got it.  ``Fenced`` when too late.
        ``by_ref``: None (the default) sends a result larger than
        ``max_frame - 256`` by reference (a sealed memfd) when the broker
        takes descriptors, True always, False never."""
        fields, fd = self._completion(result, keep, by_ref)
        if fd is None:
            return self._ended(self._conn.call("flight.complete", fields))
        try:
            return self._ended(self._conn.call("flight.complete", fields, fd=fd))
        finally:
            os.close(fd)

    def complete_fd(self, fd: Any, keep: Optional[float] = None) -> int:
        """Completes by reference with fd (an int or a file with
        ``fileno()``): a memfd sealed against write, shrink and grow (see
        ``coord.sealed_memfd``), whose whole size is the result.  fd stays
        the caller's (the broker gets its own copy): close it when this
        returns.  ``InvalidOptions`` when the broker does not take
        descriptors or refuses this one (not a sealed memfd)."""
        fields, n = self._completion_fd(fd, keep)
        return self._ended(self._conn.call("flight.complete", fields, fd=n))

    def fail(self, code: str, message: str = "", retryable: bool = False,
             keep: Optional[float] = None, retry_after: Optional[float] = None) -> int:
        """Fails the flight; ``retry_after`` seconds (needs ``retryable``)
        starts a backoff: joins of the key get this failure at once for
        that long."""
        fields = self._end(m.flight_fail(code, message, retryable, keep, retry_after))
        return self._ended(self._conn.call("flight.fail", fields))


def _notify_thread(fn: Callable[[m.Updated], Any]) -> Callable[[Any], None]:
    """A Future callback that runs fn(updated) in a thread of its own (so
    that fn may call the client: the reader thread resolves the future)."""
    def done(fut: "concurrent.futures.Future[m.Updated]") -> None:
        if fut.cancelled() or fut.exception() is not None:
            return
        threading.Thread(target=fn, args=(fut.result(),), name="coord-notify",
                         daemon=True).start()
    return done


class _FlightAPI:
    """``c.flight``: the single-flight calls one by one."""

    def __init__(self, client: "Client") -> None:
        self._c = client

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
        stale gets ``f.updated`` resolved when the revalidation ends.

        ``supersede`` (or a ``priority`` above the running owner's) takes
        a running flight over: this caller owns it (``f.superseded`` is
        the old owner's fence, which is fenced from then on).
        ``version`` (at most 64 bytes): the version of the code that runs
        the work (``f.version``, in records and events); ``other_version``
        "follow" (the default) follows a running flight of another
        version, "own" runs one of its own and takes no record of another
        version."""
        c = self._c
        j = Join(c, key, ttl=ttl, wait=wait, max_age=max_age,
                 abort_when_orphaned=abort_when_orphaned, stale=stale, notify=notify,
                 flight=lambda conn, jd: Flight(c, conn, jd),
                 future=lambda conn: concurrent.futures.Future(), supersede=supersede,
                 priority=priority, version=version, other_version=other_version)
        return j._joined(_granting(c, j, "flight.join", j.fields, j.limit))

    def complete(self, f: Flight, result: m.Payload, keep: Optional[float] = None, *,
                 by_ref: Optional[bool] = None) -> int:
        """``f.complete(result, keep, by_ref=by_ref)``."""
        return f.complete(result, keep, by_ref=by_ref)

    def complete_fd(self, f: Flight, fd: Any, keep: Optional[float] = None) -> int:
        """``f.complete_fd(fd, keep)``."""
        return f.complete_fd(fd, keep)

    def fail(self, f: Flight, code: str, message: str = "", retryable: bool = False,
             keep: Optional[float] = None, retry_after: Optional[float] = None) -> int:
        """``f.fail(code, message, retryable, keep, retry_after)``."""
        return f.fail(code, message, retryable, keep, retry_after)

    def list(self) -> List[m.FlightEntry]:
        """The scope's running flights (``FlightEntry``)."""
        return self._c._do(calls.flight_list())

    def disable(self, prefix: m.Name = "") -> None:
        """The kill switch: every new join of a key starting with prefix
        ("" = every key of the scope) owns a flight of its own at once
        (``bypass``: no deduplication, no record written).  Durable;
        announced on ``-flights``."""
        self._c._do(calls.flight_disable(prefix))

    def enable(self, prefix: m.Name = "") -> None:
        """Ends ``disable(prefix)``."""
        self._c._do(calls.flight_enable(prefix))

    def disabled(self) -> List[Union[str, bytes]]:
        """The disabled prefixes of the scope."""
        return self._c._do(calls.flight_disabled())


class _RecordAPI:
    """``c.records``: the stored completion records of the scope."""

    def __init__(self, client: "Client") -> None:
        self._c = client

    def get(self, key: m.Name) -> Optional[m.Record]:
        """The record of key (``Record``), None when there is none."""
        return self._c._do(calls.record_get(key))

    def list(self, prefix: m.Name = "", limit: Optional[int] = None) -> List[m.RecordEntry]:
        """The records whose keys start with prefix (``RecordEntry``)."""
        return self._c._do(calls.record_list(prefix, limit))

    def purge(self, prefix: m.Name = "") -> m.Purged:
        """Deletes the records whose keys start with prefix and ends their
        running flights; returns the number deleted (``.fenced``: the
        flights ended)."""
        return self._c._do(calls.record_purge(prefix))


class Leadership(LeaderTerm):
    """Leadership of a workstream.  ``with`` campaigns (raising
    ``Timeout``, ``Disabled``, ``ProtocolPinned``, ``Policy``,
    ``Aborted``... when not elected: the block never runs as a non-leader)
    and resigns.  ``lost`` is set when the lease ends, someone steals, the
    workstream is disabled, a max hold fences it or the connection goes;
    the term's calls then raise ``Fenced``.  ``drain_requested`` is set by
    ``leader.drain`` (``drain_reason``: requested, max_hold); ``mode``
    follows ``leader.mode``.  Both are ``threading.Event``s; the lease
    renews from the client's ticker thread."""

    _client: "Client"
    lost: threading.Event
    drain_requested: threading.Event

    def __init__(self, client: "Client", workstream: m.Name, *,
                 lease: Optional[float] = m.DEFAULT_LEASE, steal: bool = False,
                 timeout: Optional[float] = None, protocol: Optional[str] = None,
                 incident: Optional[str] = None,
                 capabilities: Optional[Sequence[str]] = None) -> None:
        super().__init__(client, workstream, lease=lease, steal=steal, timeout=timeout,
                         protocol=protocol, incident=incident, event=threading.Event,
                         capabilities=capabilities)

    def campaign(self, *, if_available: bool = False) -> bool:
        """Waits to be elected (up to ``timeout``); True once leading.  With
        ``if_available`` (or ``timeout=0``) False at once when led."""
        fields = self._campaign_fields(if_available)
        try:
            r = _granting(self._client, self, "leader.campaign", fields,
                          self._campaign_limit(fields))
        except BaseException:
            self._refused(None)
            raise
        if not self._elected(r):
            return False
        self._client._ticker.at(self._next_tick(), self._tick)
        return True

    def _tick(self) -> None:
        conn = self._conn
        if not self.leading or conn is None:
            return
        now = time.monotonic()
        if self._expired(now):
            return

        def done(_c: _Call, r: Optional[Reply], _e: Optional[BaseException]) -> None:
            if r is not None:
                self._renew_reply(r, now)
        if conn.fire("leader.renew", self._fields(), callback=done) is None:
            return
        self._client._ticker.at(self._next_tick(), self._tick)

    def _call(self, op: str, fields: Dict[str, Any], parse: Callable[[Dict[str, Any]], T]
              ) -> T:
        f = self._fields(**fields)
        return self._reply(self._conn.call(op, f), parse)

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
        """The workstream's committed value of key (None when unset)."""
        got = self._client.leader.read(self.workstream, key)
        return got[0] if got else None

    def resign(self) -> None:
        """Ends the term (nothing when it is over already)."""
        term = self._resign()
        if term is None:
            return
        try:
            r = term[0].call("leader.resign", term[1])
        except ConnectionLost:
            return
        self._resigned(r)

    def __enter__(self) -> "Leadership":
        try:
            granted = self.campaign()
        except UNREACHABLE as e:    # no broker: the workstream's fallback, else e
            return self._unreachable(e)
        if not granted:
            raise self._busy()
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
                 protocol: Optional[str] = None, incident: Optional[str] = None,
                 capabilities: Optional[Sequence[str]] = None) -> Leadership:
        """A Leadership handle of workstream (not campaigning yet): ``with``
        campaigns and resigns.  ``lease`` seconds (renewed every third),
        ``steal`` breaks the leader, ``timeout`` (None: wait, 0: only if
        free now), ``protocol`` "name@N", ``incident`` a steal's reason,
        ``capabilities`` the names this campaign implements (a list of str;
        a workstream that pins one it lacks raises ``ProtocolPinned``)."""
        return Leadership(self._c, workstream, lease=lease, steal=steal, timeout=timeout,
                          protocol=protocol, incident=incident, capabilities=capabilities)

    def define(self, workstream: m.Name, *, protocol: Any = m.OMIT, max_hold: Any = m.OMIT,
               steal: Any = m.OMIT, mode: Any = m.OMIT, fallback: Any = m.OMIT,
               canonical_fence: Any = m.OMIT, lock_name: Any = m.OMIT,
               capabilities: Any = m.OMIT, if_available: Any = m.OMIT,
               force: bool = False) -> m.Descriptor:
        """Changes the stored descriptor field by field: a field left out
        (``coord.OMIT``, the default) keeps its value, None returns it to
        its default, a value replaces it.  ``max_hold`` in seconds (0:
        none); ``steal`` "never", "incident-only" or "allowed"; ``mode``
        "shadow", "read-only" or "active"; ``lock_name`` the leadership
        lock's name; ``capabilities`` the names every campaign must carry
        (a list of str); ``if_available`` "allowed" or "never" (campaigns
        that only look get ``Policy``).  Returns the descriptor."""
        return self._c._do(calls.leader_define(
            workstream, protocol=protocol, max_hold=max_hold, steal=steal, mode=mode,
            fallback=fallback, canonical_fence=canonical_fence, lock_name=lock_name,
            capabilities=capabilities, if_available=if_available, force=force))

    def describe(self, workstream: m.Name) -> m.Descriptor:
        """The stored descriptor; ``NotFound`` when never defined."""
        return self._c._do(calls.leader_describe(workstream))

    def info(self, workstream: m.Name) -> m.LeaderInfo:
        """The workstream now (``LeaderInfo``): who leads, the generation,
        the mode, the pin."""
        return self._c._do(calls.leader_info(workstream))

    def history(self, workstream: m.Name, limit: Optional[int] = None) -> m.Page:
        """The last terms (``Term``), newest first."""
        return self._c._do(calls.leader_history(workstream, limit))

    def pending(self, workstream: m.Name, limit: Optional[int] = None) -> m.Page:
        """The claimed, unsettled ops (``PendingOp``), oldest first."""
        return self._c._do(calls.leader_pending(workstream, limit))

    def check(self, workstream: m.Name, generation: int) -> m.Check:
        """Whether ``generation`` is live now (``Fenced`` if not): for a
        service acting on a leader's behalf; a check, not a lock."""
        return self._c._do(calls.leader_check(workstream, generation))

    def drain(self, workstream: m.Name, generation: Optional[int] = None) -> None:
        """Asks the leader to drain (it gets ``leader.drain``, reason
        "requested"); ``generation`` defaults to the live one."""
        if generation is None:
            generation = self.info(workstream).live_generation or 0
        self._c._do(calls.leader_drain(workstream, generation))

    def read(self, workstream: m.Name, key: m.Name) -> Optional[Tuple[bytes, int]]:
        """(value, generation that wrote it) of a committed key; None when
        unset."""
        return self._c._do(calls.leader_read(workstream, key))

    def disable(self, workstream: m.Name) -> int:
        """The kill switch: fences the leader and refuses campaigns
        without ``incident``; returns the fenced generation (0: none)."""
        return self._c._do(calls.leader_disable(workstream))

    def enable(self, workstream: m.Name) -> None:
        """Ends ``disable``."""
        self._c._do(calls.leader_enable(workstream))


class Subscription(SubscriptionBase):
    """Messages of one or more channels.  ``for item in sub`` yields them
    (``Message`` for user channels, ``Lifecycle`` for the broker's); with
    ``timeout`` the loop ends once no item came for that long.  Items wait
    in a bounded queue (the client's ``max_queued`` items and
    ``max_queued_bytes``): when it is full the oldest are dropped, and
    ``dropped`` counts them."""

    def __init__(self, client: "Client", channels: List[Union[str, bytes]],
                 timeout: Optional[float] = None) -> None:
        super().__init__(client, channels, timeout)
        self._cv = threading.Condition(threading.Lock())

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
            self._q.push(Closed(exc, reconnect))
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
        """Subscribes (``with`` does it); returns self."""
        if not self._open:
            self._client._subscribe(self)
            self._open = True
        return self

    def close(self) -> None:
        """Unsubscribes (``with`` does it on leaving)."""
        if self._open:
            self._open = False
            self._client._unsubscribe(self)

    def get(self, timeout: Optional[float] = None) -> Any:
        """The next item, or None when timeout passed first."""
        self._check()
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                item = self._take(deadline)
            except queue.Empty:
                return None
            if self._item(item):
                return item
            try:
                self._client._ensure()
            except CoordError as e:
                self._renew_failed(e)
                raise

    def __iter__(self) -> Iterator[Any]:
        while True:
            item = self.get(self.timeout)
            if item is None:
                return
            yield item

    def __enter__(self) -> "Subscription":
        return self.open()

    def __exit__(self, *a: Any) -> None:
        self.close()


class Client(ClientBase):
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
        super().__init__(socket, scope=scope, client=client, autostart=autostart, broker=broker,
                         connect_timeout=connect_timeout, idle_exit=idle_exit,
                         reconnect=reconnect, request_timeout=request_timeout,
                         max_queued=max_queued, max_queued_bytes=max_queued_bytes)
        self._conn: Optional[_Conn] = None
        self._ticker = _Ticker()
        self._mu = threading.RLock()            # state; never held while waiting
        self._connect_mu = threading.Lock()     # one connect at a time
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
            except calls.HelloDropped:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.01)

    def _open_once(self) -> _Conn:
        sock = open_socket(self.socket_path, autostart_ok=self.autostart,
                           broker=self.broker_path, idle_exit=self.idle_exit,
                           timeout=self.connect_timeout)
        conn = _Conn(self, sock)
        try:
            return self._hello_on(conn)
        except BaseException:
            # interrupted (KeyboardInterrupt) before hello was answered:
            # the half-open connection is closed, not left to its reader
            # thread (a failed hello has closed it already)
            conn.shutdown()
            if conn.alive and not conn.reader.is_alive():
                conn._lose(None)        # nobody reads it: closed here
            raise

    def _hello_on(self, conn: _Conn) -> _Conn:
        sock = conn.sock
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
        if not conn.settle(call, hello_timeout):
            conn.shutdown()
            raise calls.hello_timeout(hello_timeout)
        try:
            r = conn.wait(call)
        except CoordError as e:
            conn.shutdown()
            raise calls.hello_failed(conn.core.bye, e) from None
        if not r.ok:
            conn.shutdown()
        mf = self._hello(conn, r)
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
                c = self._usable()
                if c is not None:
                    return c
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
            self._lost(conn, exc)

    def _dispatch(self, ev: Event) -> None:
        with self._mu:
            self._router.dispatch(ev)

    @property
    def max_frame(self) -> int:
        """The largest frame the broker takes (from hello)."""
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

    def _do(self, q: "calls.Req[T]") -> T:
        try:
            body = self.call(q.op, **q.fields)
        except NotFound:
            if q.absent:
                return q.missing()
            raise
        return q.parse(body)

    def ping(self) -> float:
        """A round trip to the broker; its time in seconds."""
        t = time.monotonic()
        self.call("ping")
        return time.monotonic() - t

    def stats(self) -> m.Stats:
        """The broker's counters (a dict); ``.latency`` has the latency
        percentiles as ``Latency`` (seconds)."""
        return self._do(calls.stats())

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
        return self._do(calls.locks())

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
        shuts down) or a follower's ``wait`` passed, fn runs here without
        coordination and the result says ``source == "local"`` and why
        (``reason``; ``fallback_cause``: "unreachable" or "timeout").
        ``fallback="retry"``: as "run", but a follower whose wait passed
        first joins once more (``result.retried``).

        ``supersede``, ``priority``, ``version`` and ``other_version`` go
        to the join (see ``flight.join``); an owner that superseded
        another says whose fence in ``result.superseded``."""
        o = Once(key, ttl=ttl, wait=wait, keep=keep, max_age=max_age, stale=stale,
                 notify=notify, fallback=fallback, retries=retries,
                 abort_when_orphaned=abort_when_orphaned, supersede=supersede,
                 priority=priority, version=version, other_version=other_version)
        while True:
            try:
                f = self.flight.join(o.key, **o.join())
            except FALLBACK_ERRORS as e:
                if o.fall_back(e):
                    continue
                return o.ran_alone(fn(Flight(self, None, o.local_flight())), e, o.retried)
            if f.role in ("result", "failed"):
                r = o.follow(f, _notify_thread)
                if r is None:
                    continue
                return r
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
                f.complete(out, o.store)
            except UNREACHABLE as e:
                if not o.local:
                    raise
                return o.completed_alone(out, e)
            return o.owned(f, out)

    # ---- channels ----

    def publish(self, channel: m.Name, data: m.Payload) -> int:
        """Sends data to the scope's other subscribers; returns how many."""
        return self._do(calls.publish(channel, data))

    def subscribe(self, *channels: m.Name, timeout: Optional[float] = None) -> Subscription:
        """``with c.subscribe("news") as sub: for msg in sub: ...``"""
        if not channels:
            raise TypeError("subscribe needs a channel")
        return Subscription(self, [m.name(ch, "channel") for ch in channels], timeout)

    def watch(self, *channels: str, timeout: Optional[float] = None) -> Subscription:
        """Lifecycle events of the broker's channels (default all three:
        ``-locks``, ``-flights``, ``-leaders``)."""
        return self.subscribe(*calls.watched(channels), timeout=timeout)

    def _subscribe(self, sub: Subscription) -> None:
        conn = self._ensure()
        for ch in sub.channels:
            with self._mu:
                first = self._router.add_sub(ch, sub)
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
        with self._mu:
            last = self._router.remove_sub(sub, sub.channels)
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
                   protocol: Optional[str] = None, incident: Optional[str] = None,
                   capabilities: Optional[Sequence[str]] = None
                   ) -> Optional[Leadership]:
        """Leadership if nobody leads now, else None."""
        lead = Leadership(self, workstream, lease=lease, protocol=protocol, incident=incident,
                          capabilities=capabilities)
        return lead if lead.campaign(if_available=True) else None


def connect(socket: Optional[str] = None, **kw: Any) -> Client:
    """``Client(socket, **kw)``."""
    return Client(socket, **kw)
