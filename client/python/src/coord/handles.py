"""handles.py - the handles' state machines, without I/O, shared by the
blocking (``client.py``) and the asyncio (``aio.py``) client: a lock
(``LockHandle``), a flight and its join (``FlightHandle``, ``Join``), the
decisions of ``once`` (``Once``), a campaign and its term (``LeaderTerm``),
a subscription's queue (``SubscriptionBase``).  Each holds the options,
the state and what every reply and event does to them; the two clients'
subclasses add only the sending and the waiting (a reader thread and a
ticker, or the loop and a task per lease).  A behaviour is fixed here,
once.

Also: how an owner's exception becomes a flight failure, the result of
``once`` (``Result``: bytes that say where they came from), and the
client's deadlines (``request_timeout``, the backstop of a wait) with
their errors in the caller's terms.

The connection a handle holds (``_conn``) is the client's kind; all a
handle sends itself goes through ``conn.fire(op, fields)`` (send, do not
wait, ignore errors; returns the call or None).  What waits for a grant
(a lock, a join, a campaign) is a ``Grantee``: each client's
``_granting`` sends its request and waits the client's way."""
from __future__ import annotations

import enum
import os
import time
from typing import (Any, Callable, Dict, Generic, List, Optional, Protocol, Sequence, Tuple,
                    TypeVar)

from . import descfile, messages as m
from .core import EventQueue, Reply
from .errors import (Aborted, Backoff, ConnectError, ConnectionLost, CoordError, Fenced,
                     FlightFailed, InvalidOptions, LeadershipLost, LockLost, RetryAfter,
                     ShuttingDown, Timeout, TooLarge)
from .resultref import ResultRef, fd_of, sealed_memfd

T = TypeVar("T")
LT = TypeVar("LT", bound="LeaderTerm")

# What "the broker cannot be reached" means for once(fallback="run").
UNREACHABLE = (ConnectError, ConnectionLost, ShuttingDown)
# What a join of once may raise that its fallback decides on
# (``Once.fall_back``): the broker unreachable, or a follower's wait passed.
FALLBACK_ERRORS = UNREACHABLE + (Timeout,)


# ---- deadlines ----

def check_request_timeout(t: Optional[float]) -> Optional[float]:
    """The ``request_timeout`` option: seconds > 0, or None (no deadline)."""
    if t is None:
        return None
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 < t < float("inf"):
        raise ValueError("request_timeout must be a number of seconds > 0, or None")
    return float(t)


def backstop(timeout: Optional[float], request_timeout: Optional[float]) -> Optional[float]:
    """How long the client waits for the answer to a request that waits
    by design (lock, join, campaign): its own timeout (0: try once) plus
    ``request_timeout``, so that a broker that stopped answering cannot
    hold it past both; None (as long as it takes) when it waits forever."""
    if timeout is None or request_timeout is None:
        return None
    return timeout + request_timeout


def no_reply(op: str, seconds: float) -> Timeout:
    return Timeout(f"{op}: no reply from the broker: timed out after {seconds:g} s")


def wait_error(r: Reply, what: str, seconds: Optional[float]) -> CoordError:
    """The error of a wait's refusal: a TIMEOUT in the caller's terms
    (``lock 'a' not granted: timed out after 0.5 s``), else the broker's."""
    if r.code == "TIMEOUT" and seconds:
        return Timeout(f"{what}: timed out after {seconds:g} s")
    return r.error()


class Grantee(Protocol):
    """What waits for a grant (a lock, a campaign, a join): the clients'
    ``_granting`` sends its request with ``_granted`` as the reply's hook
    and hands a grant that came too late to ``_give_back``."""
    _waiting: Optional[Tuple[Any, Any]]

    def _begin(self) -> None: ...

    def _granted(self, conn: Any, r: Reply, arrived: float) -> None: ...

    def _give_back(self, conn: Any, r: Reply) -> Any: ...


def cancel_waiting(owner: Any) -> bool:
    """``cancel()`` of a lock, campaign or join: the protocol's ``cancel``
    for the request ``owner`` waits on; False when nothing waits."""
    w = owner._waiting
    if w is None:
        return False
    w[0].fire("cancel", {"target": w[1].rid})
    return True


# ---- locks ----

class LockHandle:
    """A lock handle without I/O: the options, whether it is held (``id``,
    ``token``), the lease's end, and what the grant, a renewal's reply,
    ``lock.lost`` and the lease's end do.  ``lost`` is a
    ``threading.Event`` or an ``asyncio.Event``, whatever ``event``
    makes."""

    def __init__(self, client: Any, name: m.Name, mode: str, *, timeout: Optional[float],
                 lease: Optional[float], steal: bool, event: Callable[[], Any]) -> None:
        self._client = client
        self.name = m.name(name)
        self.mode = mode
        self.timeout = timeout
        self.lease = lease
        self.steal = steal
        self.token: Optional[int] = None
        self.id: Optional[int] = None
        self.lost = event()
        self.lost_reason: Optional[str] = None
        self._held = False
        self._conn: Any = None
        self._deadline = 0.0
        self._waiting: Optional[Tuple[Any, Any]] = None
        m.lock_acquire(self.name, mode, steal=steal, timeout=timeout, lease=lease)

    @property
    def held(self) -> bool:
        """True from the grant until it is released or lost."""
        return self._held

    def _acquire_fields(self, if_available: bool) -> Tuple[Dict[str, Any], Optional[float]]:
        """The ``lock.acquire`` request, and how long to wait for its reply."""
        if self._held:
            raise RuntimeError("lock already held by this handle")
        try_once = if_available or self.timeout == 0
        fields = m.lock_acquire(self.name, self.mode, if_available=try_once, steal=self.steal,
                                timeout=None if try_once else self.timeout, lease=self.lease)
        return fields, backstop(0 if try_once else self.timeout, self._client.request_timeout)

    def _campaign_limit(self, fields: Dict[str, Any]) -> Optional[float]:
        """How long to wait for the campaign's reply."""
        return backstop(0 if fields.get("if_available") else self.timeout,
                        self._client.request_timeout)

    def _begin(self) -> None:
        self.lost.clear()
        self.lost_reason = None

    def _granted(self, conn: Any, r: Reply, arrived: float) -> None:
        """The reply's hook, where it is read: a grant registers the lock
        before anyone wakes (a ``lock.lost`` right behind it finds it)."""
        if r.ok and r.get("granted"):
            self.id = m.uint(r.body, "lock")
            self.token = m.uint(r.body, "token")
            self._conn = conn
            self._held = True
            self._deadline = arrived + (self.lease or 0)
            self._client._router.locks[self.id] = self

    def _acquired(self, r: Reply) -> bool:
        """The acquire's outcome: True when granted, False when busy (try
        once), else the error."""
        if not r.ok:
            raise wait_error(r, f"lock {self.name!r} not granted", self.timeout)
        return bool(r.get("granted"))

    def _give_back(self, conn: Any, r: Reply) -> Any:
        """A grant nobody waits for any more (the waiter gave up): released."""
        if r.ok and r.get("granted"):
            self._forget()
            return conn.fire("lock.release", {"lock": m.uint(r.body, "lock")})
        return None

    def cancel(self) -> bool:
        """Aborts a waiting ``acquire`` from another thread or task (it
        raises ``Aborted``).  False when nothing waits."""
        return cancel_waiting(self)

    def _forget(self) -> None:
        self._held = False
        if self.id is not None:
            self._client._router.locks.pop(self.id, None)

    def _lost(self, reason: str) -> None:
        """``lock.lost``, the lease's end, the connection gone."""
        if not self._held:
            return
        self._forget()
        self.lost_reason = reason
        self.lost.set()
        self._stop_renewal()

    def _stop_renewal(self) -> None:
        """The client's hook: the renewal of a lost lock stops."""

    def _next_tick(self) -> float:
        assert self.lease
        return min(time.monotonic() + self.lease / 3.0, self._deadline)

    def _expired(self, conn: Any, now: float) -> bool:
        """True, and the lock lost (``expired``) and released, once the
        lease's end passed with no renewal acknowledged."""
        if now < self._deadline:
            return False
        lock_id = self.id
        self._lost("expired")
        conn.fire("lock.release", {"lock": lock_id})
        return True

    def _renewal(self) -> Dict[str, Any]:
        return {"lock": self.id, "lease_ms": m.ms(self.lease, "lease")}

    def _renewed(self, r: Reply, sent: float, lease: float) -> bool:
        """A renewal's reply; False once the lock turned out lost."""
        if r.ok:
            self._deadline = max(self._deadline, sent + lease)
        elif r.code == "UNKNOWN_LOCK":
            self._lost("expired")
            return False
        return True

    def _release(self) -> Optional[Tuple[Any, Optional[int]]]:
        """Forgets the lock; (conn, id) to release, None when not held."""
        conn = self._conn
        if not self._held or conn is None:
            return None
        lock_id = self.id
        self._forget()
        return conn, lock_id

    @staticmethod
    def _released(r: Reply) -> None:
        if not r.ok and r.code != "UNKNOWN_LOCK":
            raise r.error()

    def check(self) -> None:
        """Raises ``LockLost`` if the lock is not held any more (stolen,
        expired, disconnected, released)."""
        if self.lost.is_set():
            raise LockLost(f"lock {self.name!r} lost: {self.lost_reason}")
        if not self._held:
            raise LockLost(f"lock {self.name!r} is not held")

    def _busy(self) -> Timeout:
        return Timeout(f"lock {self.name!r} is busy")

    def _lost_error(self) -> LockLost:
        return LockLost(f"lock {self.name!r} was lost while the block ran: {self.lost_reason}")

    def __repr__(self) -> str:
        return f"<coord.Lock {self.name!r} {self.mode} token={self.token} held={self._held}>"


class LeaderState(str, enum.Enum):
    """A Leadership's state (protocol: "The leader's states and draining")."""
    FOLLOWER = "follower"       # not campaigning (or not elected, if_available)
    REQUESTING = "requesting"   # the campaign waits
    LEADER = "leader"           # elected, generation live
    DRAINING = "draining"       # still leading, finishing: new claims refused
    RELEASED = "released"       # the term is over: resigned, lost or fenced
    ABORTED = "aborted"         # the campaign ended without a grant (cancelled,
                                # timed out, refused)


State = LeaderState
LEADING = (LeaderState.LEADER, LeaderState.DRAINING)


class LeaderTerm:
    """A campaign and the term it wins, without I/O: the options, the
    state, the events (``lost``, ``drain_requested``: ``threading.Event`` or
    ``asyncio.Event``, whatever ``event`` makes) and what each reply and
    event does to them.  The blocking and asyncio Leadership add the
    sending.  The ``_`` methods run where replies and events are handled
    (the reader thread, or the loop).

    ``fallback``, ``single_instance``, ``config_dir``: the opt-in of
    ``descfile.leadership`` to the workstream's descriptor file's
    fallback when the campaign of a ``with`` block cannot reach the
    broker (``_unreachable``); off by default: the block of
    ``c.leader(ws)`` never runs as a non-leader."""

    def __init__(self, client: Any, workstream: m.Name, *, lease: Optional[float],
                 steal: bool, timeout: Optional[float], protocol: Optional[str],
                 incident: Optional[str], event: Callable[[], Any],
                 capabilities: Optional[Sequence[str]] = None) -> None:
        self._client = client
        self._conn: Any = None
        self._waiting: Optional[Tuple[Any, Any]] = None
        self.workstream = m.name(workstream, "workstream")
        self.lease = lease
        self.steal = steal
        self.timeout = timeout
        self.protocol = protocol
        self.incident = incident
        self.capabilities = capabilities
        self.generation: Optional[int] = None
        self.state = LeaderState.FOLLOWER
        self.mode: Optional[str] = None          # rollout mode of the term
        self.lost = event()
        self.lost_reason: Optional[str] = None
        self.lost_incident: Optional[str] = None  # leader.lost's incident text
        self.drain_requested = event()            # leader.drain came
        self.drain_reason: Optional[str] = None   # "self" | "requested" | "max_hold"
        self._deadline = 0.0
        self.fallback = False                     # set by descfile.leadership
        self.single_instance = False
        self.config_dir: Optional[str] = None
        m.campaign(self.workstream, lease=lease, steal=steal, if_available=False,
                   timeout=timeout, protocol=protocol, incident=incident,
                   capabilities=capabilities)

    @property
    def leading(self) -> bool:
        """LEADER or DRAINING: the generation is live (as far as we know)."""
        return self.state in LEADING

    @property
    def draining(self) -> bool:
        """DRAINING: still leading, finishing (new claims get ``Draining``)."""
        return self.state == LeaderState.DRAINING

    @property
    def key(self) -> Tuple[bytes, int]:
        """(workstream, generation): the term's key in the client's router."""
        return m.name_key(self.workstream), self.generation or 0

    def _campaign_fields(self, if_available: bool) -> Dict[str, Any]:
        if self.state in LEADING or self.state == LeaderState.REQUESTING:
            raise RuntimeError("already campaigning or leading")
        try_once = if_available or self.timeout == 0
        return m.campaign(self.workstream, lease=self.lease, steal=self.steal,
                          if_available=try_once, timeout=None if try_once else self.timeout,
                          protocol=self.protocol, incident=self.incident,
                          capabilities=self.capabilities)

    def _campaign_limit(self, fields: Dict[str, Any]) -> Optional[float]:
        """How long to wait for the campaign's reply."""
        return backstop(0 if fields.get("if_available") else self.timeout,
                        self._client.request_timeout)

    def _begin(self) -> None:
        self.state = LeaderState.REQUESTING
        self.lost.clear()
        self.drain_requested.clear()
        self.lost_reason = self.lost_incident = self.drain_reason = None

    def _grant(self, r: Reply, arrived: float) -> bool:
        """The campaign's reply: True when it granted (the term starts).
        The lease counts from the reply's arrival: the broker starts it at
        the grant, which for a campaign that waited in the queue can be
        long after the request was sent (off by the reply's transit)."""
        if not (r.ok and r.get("granted")):
            return False
        self.generation = m.uint(r.body, "generation")
        le = m.uint(r.body, "lease_ms")
        if le:
            self.lease = le / 1000.0
        self.mode = str(r.get("mode") or "active")
        self._deadline = arrived + (self.lease or m.DEFAULT_LEASE)
        self.state = LeaderState.LEADER
        return True

    def _granted(self, conn: Any, r: Reply, arrived: float) -> None:
        """The campaign reply's hook, where it is read: a grant registers
        the term before anyone wakes."""
        if self._grant(r, arrived):
            self._conn = conn
            self._client._router.leaders[self.key] = self

    def _elected(self, r: Reply) -> bool:
        """The campaign's outcome: True when elected, False when led (try
        once), else the error."""
        if not r.ok:
            self._refused(r)
            raise wait_error(r, f"{self.workstream!r}: not elected", self.timeout)
        if not r.get("granted"):
            self._refused(r)
            return False
        return True

    def _give_back(self, conn: Any, r: Reply) -> Any:
        """A grant nobody waits for any more (the campaign gave up): resigned."""
        if r.ok and r.get("granted"):
            self._forget()
            self.state = LeaderState.ABORTED
            return conn.fire("leader.resign", m.term(self.workstream,
                                                     m.uint(r.body, "generation")))
        return None

    def cancel(self) -> bool:
        """Aborts a waiting campaign from another thread or task (it raises
        ``Aborted``).  False when nothing waits."""
        return cancel_waiting(self)

    def _forget(self) -> None:
        if self.generation is not None:
            self._client._router.leaders.pop(self.key, None)

    def _lost(self, reason: str, incident: Optional[str] = None) -> None:
        """``leader.lost``, FENCED, the lease's end, the connection gone."""
        if self.leading:
            self._forget()
            self._end(reason, incident)
            self._stop_renewal()

    def _stop_renewal(self) -> None:
        """The client's hook: the renewal of a lost term stops."""

    def _refused(self, r: Optional[Reply]) -> None:
        """The campaign ended without a grant (r None: interrupted)."""
        if self.state == LeaderState.REQUESTING:
            self.state = (LeaderState.FOLLOWER if r is not None and r.ok
                          else LeaderState.ABORTED)

    def _end(self, reason: Optional[str], incident: Optional[str] = None) -> bool:
        """The term ends; a reason means lost (``lost`` is set).  False if
        it was not leading."""
        if not self.leading:
            return False
        self.state = LeaderState.RELEASED
        if reason is not None:
            self.lost_reason = reason
            self.lost_incident = incident
            self.lost.set()
        return True

    def _drain(self, reason: str) -> None:
        """``leader.drain``: asked to finish (``requested``, ``max_hold``)."""
        if self.leading:
            self.state = LeaderState.DRAINING
            self.drain_reason = reason
            self.drain_requested.set()

    def _drained(self) -> None:
        """Our own ``leader.drain`` was answered."""
        if self.state == LeaderState.LEADER:
            self.state = LeaderState.DRAINING
            self.drain_reason = "self"

    def _mode(self, mode: str) -> None:
        if mode:
            self.mode = mode

    def _fields(self, **fields: Any) -> Dict[str, Any]:
        """A request on the live term; ``Fenced`` when it is not live."""
        if not self.leading:
            raise Fenced(f"not the leader of {self.workstream!r} "
                         f"({self.lost_reason or self.state.value})")
        return m.term(self.workstream, self.generation, **fields)

    def _renewed(self, r: Reply, sent: float) -> None:
        le = m.uint(r.body, "lease_ms")
        self._deadline = max(self._deadline, sent + (le / 1000.0 if le else
                                                     (self.lease or m.DEFAULT_LEASE)))

    def _next_tick(self) -> float:
        return min(time.monotonic() + (self.lease or m.DEFAULT_LEASE) / 3.0, self._deadline)

    def _expired(self, now: float) -> bool:
        """True, and the term lost (``expired``), once the lease's end
        passed with no renewal acknowledged."""
        if now < self._deadline:
            return False
        self._lost("expired")
        return True

    def _renew_reply(self, r: Reply, sent: float) -> bool:
        """A renewal's reply; False once the term turned out fenced."""
        if r.ok:
            self._renewed(r, sent)
        elif r.code == "FENCED":
            self._lost("fenced")
            return False
        return True

    def _reply(self, r: Reply, parse: Callable[[Dict[str, Any]], T]) -> T:
        """A term call's reply parsed; its error raised (FENCED: the term
        is lost)."""
        if not r.ok:
            if r.code == "FENCED":
                self._lost("fenced")
            raise r.error()
        return parse(r.body)

    def _resign(self) -> Optional[Tuple[Any, Dict[str, Any]]]:
        """Ends the term here; (conn, fields) of the ``leader.resign`` to
        send, None when it was over already."""
        if not self.leading or self._conn is None:
            return None
        f = m.term(self.workstream, self.generation)
        self._forget()
        self._end(None)
        return self._conn, f

    @staticmethod
    def _resigned(r: Reply) -> None:
        if not r.ok and r.code != "FENCED":
            raise r.error()

    def _busy(self) -> Timeout:
        return Timeout(f"{self.workstream!r} has a leader")

    def _unreachable(self: LT, e: BaseException) -> LT:
        """What a ``with`` block gets when its campaign could not reach the
        broker (e, one of ``UNREACHABLE``): a ``descfile.FallbackTerm``
        when this leadership opted in (``fallback``) and the
        workstream's descriptor file allows it, else e is raised (with
        ``.fallback``: the decision, when it opted in).  The FallbackTerm
        stands in for the leadership: typed as it, for the code that asked
        for it (``descfile.leadership``) and handles both."""
        return descfile.on_unreachable(self, e)  # type: ignore[return-value]

    def check(self) -> None:
        """Raises ``LeadershipLost`` unless the term is live as far as this
        client knows (no round trip: ``c.leader.check`` asks the broker)."""
        if not self.leading:
            raise LeadershipLost(f"not the leader of {self.workstream!r}: "
                                 f"{self.lost_reason or self.state.value}")

    def _lost_error(self) -> LeadershipLost:
        return LeadershipLost(f"leadership of {self.workstream!r} was lost while the block "
                              f"ran: {self.lost_reason}")

    def __repr__(self) -> str:
        return (f"<coord.Leadership {self.workstream!r} {self.state.value} "
                f"generation={self.generation}>")


# The protocol's limits on a flight's failure (coord-wire-limits.h's
# LIMIT_ERROR_CODE and LIMIT_ERROR_MESSAGE, bytes): an owner's exception is
# cut to them before flight.fail.
MAX_ERROR_CODE = 256
MAX_ERROR_MESSAGE = 4096


def cut_utf8(s: str, limit: int) -> str:
    """s cut to at most limit bytes of UTF-8, at a character's boundary (a
    lone surrogate, which UTF-8 cannot carry, becomes "?")."""
    return s.encode("utf-8", "replace")[:limit].decode("utf-8", "ignore")


def owner_failure(e: BaseException) -> Tuple[str, str, bool, Optional[float]]:
    """(code, message, retryable, retry_after) for an owner function that
    raised e: its own FlightFailed as is (``RetryAfter``: with its
    seconds); an interruption (KeyboardInterrupt, cancellation) is
    retryable, since another caller may finish; any other exception is not
    (it would likely fail again for everyone)."""
    if isinstance(e, RetryAfter):
        return e.error_code, e.message, True, e.retry_after
    if isinstance(e, FlightFailed):
        return e.error_code, e.message, e.retryable, None
    if not isinstance(e, Exception):
        return "ABORTED", f"the owner was interrupted ({type(e).__name__})", True, None
    return (cut_utf8(type(e).__name__, MAX_ERROR_CODE), cut_utf8(str(e), MAX_ERROR_MESSAGE),
            False, None)


SOURCES = ("owner", "live", "record", "stale", "bypass", "local")

# once(fallback=...): "fail" raises; "run" runs fn here when the broker
# cannot be reached or a follower's wait passes; "retry" joins once more
# after a follower's timeout, then runs fn here.
FALLBACKS = ("fail", "run", "retry")


def check_fallback(fallback: str) -> None:
    """ValueError unless fallback is one of ``FALLBACKS``."""
    if fallback not in FALLBACKS:
        raise ValueError(f"fallback must be 'fail', 'run' or 'retry', not {fallback!r}")


def after_timeout(fallback: str, retried: bool) -> str:
    """What once does when a follower's wait passed: "retry" (join
    again), "run" (fn here) or "raise"."""
    if fallback == "retry" and not retried:
        return "retry"
    return "raise" if fallback == "fail" else "run"


def fallback_cause(e: BaseException) -> str:
    """Why fn ran without coordination: "timeout" or "unreachable"."""
    return "timeout" if isinstance(e, Timeout) else "unreachable"


class Result(bytes):
    """What ``once`` returns: the result's bytes (compare it, slice it,
    decode it as bytes), and where they came from:

    ``source``        "owner" (this call ran fn, under coordination),
                      "live" (another caller's run, waited for), "record"
                      (a stored result younger than ``max_age``), "stale"
                      (an older stored result, within ``stale``), "bypass"
                      (fn ran without deduplication: the key's prefix is
                      disabled), "local" (fn ran here without the broker:
                      ``fallback="run"`` or ``"retry"``; ``reason`` says
                      why, ``fallback_cause`` is "unreachable" or
                      "timeout": a follower's wait passed);
    ``retried``       ``fallback="retry"``: a follower's wait passed and
                      this caller joined again;
    ``superseded``    owner: the fence of the owner it superseded (0:
                      none);
    ``revalidating``  stale only: a revalidation runs now (False while
                      the key is in a backoff: nobody revalidates);
    ``updated``       stale and revalidating with ``notify``: a future
                      (``concurrent.futures`` / ``asyncio``) that resolves
                      to the ``Updated`` when the revalidation ends;
    ``age``           seconds since the result was made (live, record,
                      stale); ``fence``: its fence (0 for local)."""

    source: str
    fence: int
    age: float
    revalidating: bool
    reason: Optional[str]
    updated: Any
    fallback_cause: Optional[str]
    retried: bool
    superseded: int

    def __new__(cls, value: bytes, source: str, *, fence: int = 0, age: float = 0.0,
                revalidating: bool = False, reason: Optional[str] = None,
                updated: Any = None, fallback_cause: Optional[str] = None,
                retried: bool = False, superseded: int = 0) -> "Result":
        r = super().__new__(cls, value)
        r.fallback_cause = fallback_cause
        r.retried = retried
        r.superseded = superseded
        r.source = source
        r.fence = fence
        r.age = age
        r.revalidating = revalidating
        r.reason = reason
        r.updated = updated
        return r

    @property
    def value(self) -> bytes:
        """The result as plain ``bytes``."""
        return bytes(self)

    @property
    def stale(self) -> bool:
        """``source == "stale"``: a stored result past ``max_age``."""
        return self.source == "stale"

    @property
    def local(self) -> bool:
        """``source == "local"``: fn ran here without the broker."""
        return self.source == "local"

    def __repr__(self) -> str:
        extra = " revalidating" if self.revalidating else ""
        extra += f" reason={self.reason!r}" if self.reason else ""
        return f"<coord.Result {bytes(self)!r} source={self.source}{extra}>"


# ---- single-flight ----

class FlightHandle:
    """The settled role of a join, without I/O.  As the owner (``role ==
    "owner"``): ``fence``, ``aborted`` (an Event, set on ``flight.abort``:
    deadline, orphaned, connection lost; ``abort_reason``), and
    ``complete`` / ``fail``; ``stale`` (a ``Stale``) when this owner
    revalidates a stale record, ``bypass`` when the key's prefix is
    disabled (no deduplication, no record); ``superseded``: the fence of
    the running owner this join took the flight from (``supersede`` or a
    higher ``priority``; 0: none), ``version``: the version the flight is
    filed under (the join's, or that of the flight it took over; "" when
    none).  As a result: ``result``, ``source``, ``age``, ``result_ref``
    (a ``ResultRef`` the caller owns and closes, when the result came by
    reference: ``result`` then reads it on first use), and ``stale`` /
    ``revalidating`` / ``updated`` (a future of the ``Updated``, with
    ``notify``) when it was served stale.  Failed: ``error``,
    ``retryable``, ``retry_after`` (seconds, in a backoff).  ``role ==
    "local"``: ``once(fallback="run")`` (or ``"retry"``) runs fn without
    the broker."""

    def __init__(self, client: Any, conn: Any, j: m.Joined, event: Callable[[], Any]) -> None:
        self._client = client
        self._conn = conn
        self.role = j.role
        self.key = j.key
        self.flight = j.flight
        self.fence = j.fence
        self._result = j.result
        self.result_ref: Optional[ResultRef] = j.result_ref
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
        self.updated: Any = None
        self.aborted = event()
        self.abort_reason: Optional[str] = None
        self.done = False

    @property
    def result(self) -> Optional[bytes]:
        """A result's bytes (None for an owner); one that came by
        reference is read from ``result_ref`` on first use and kept."""
        if self._result is None and self.result_ref is not None:
            self._result = self.result_ref.value()
        return self._result

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
        """Raises ``Aborted`` once the broker told the owner to stop."""
        if self.aborted.is_set():
            raise Aborted(f"flight {self.key!r} aborted: {self.abort_reason}")

    def _end(self, fields: Dict[str, Any]) -> Dict[str, Any]:
        """The owner's ``flight.complete`` / ``flight.fail``: the flight is
        no longer ours to be aborted."""
        if self.role != "owner" or self._conn is None:
            raise RuntimeError("only the owner completes or fails a flight")
        self.done = True
        self._client._router.flights.pop(self.flight, None)
        return dict(flight=self.flight, fence=self.fence, **fields)

    def _completion(self, result: m.Payload, keep: Optional[float],
                    by_ref: Optional[bool]) -> Tuple[Dict[str, Any], Optional[int]]:
        """``flight.complete``'s fields and the descriptor to send with
        them (a sealed memfd of result, the caller closes it; None:
        inline).  ``by_ref`` None: by reference when the result does not
        fit a frame (over ``max_frame - 256``) and the broker takes
        descriptors, True: by reference (else ``InvalidOptions``), False:
        inline."""
        data = m.payload(result, "result")
        conn = self._conn
        if by_ref is None:
            by_ref = bool(conn is not None and conn.fds and len(data) > conn.core.max_frame - 256)
        if not by_ref:
            return self._end(m.flight_complete(data, keep)), None
        self._check_fds(len(data))
        fd = sealed_memfd(data)         # before _end: an OSError leaves the flight ours
        return self._end(m.flight_complete_fd(len(data), keep)), fd

    def _completion_fd(self, f: Any, keep: Optional[float]) -> Tuple[Dict[str, Any], int]:
        """``complete_fd``'s fields and descriptor (the caller's)."""
        fd = fd_of(f)
        size = os.fstat(fd).st_size
        self._check_fds(size)
        return self._end(m.flight_complete_fd(size, keep)), fd

    def _check_fds(self, size: int) -> None:
        conn = self._conn
        if self.role != "owner" or conn is None:
            raise RuntimeError("only the owner completes or fails a flight")
        if not conn.fds:
            raise InvalidOptions("this broker does not take results by reference "
                                 "(its hello said no fds)")
        if conn.max_ref_bytes and size > conn.max_ref_bytes:
            raise TooLarge(f"result of {size} bytes is over the broker's max_ref_bytes "
                           f"({conn.max_ref_bytes})")

    @staticmethod
    def _ended(r: Reply) -> int:
        if not r.ok:
            raise r.error()
        return m.uint(r.body, "delivered")

    def __repr__(self) -> str:
        return f"<coord.Flight {self.key!r} {self.role} fence={self.fence}>"


F = TypeVar("F", bound=FlightHandle)


class Join(Generic[F]):
    """One ``flight.join``: its request, the reply's hook (``_granted``,
    where the reply is read: an owner's flight is registered for
    ``flight.abort``, a follower served stale with ``notify`` gets
    ``updated`` and a watch) and the give-back of an ownership nobody
    waits for any more.  ``flight`` makes the client's Flight, ``future``
    its future of ``updated``.  ``supersede``, ``priority``, ``version``
    and ``other_version`` go into the request as ``m.flight_join`` checks
    them."""

    def __init__(self, client: Any, key: m.Name, *, ttl: Optional[float],
                 wait: Optional[float], max_age: Optional[float], abort_when_orphaned: bool,
                 stale: Optional[float], notify: bool, flight: Callable[[Any, m.Joined], F],
                 future: Callable[[Any], Any], supersede: bool = False, priority: int = 0,
                 version: Optional[m.Name] = None,
                 other_version: Optional[str] = None) -> None:
        self._client = client
        self.key = m.name(key, "key")
        self.wait = wait
        self.notify = notify
        self.fields = m.flight_join(self.key, ttl=ttl, wait=wait, max_age=max_age,
                                    abort_when_orphaned=abort_when_orphaned, stale=stale,
                                    notify=notify, supersede=supersede, priority=priority,
                                    version=version, other_version=other_version)
        self._flight = flight
        self._future = future
        self._got: List[F] = []
        self._waiting: Optional[Tuple[Any, Any]] = None

    @property
    def limit(self) -> Optional[float]:
        return backstop(self.wait, self._client.request_timeout)

    def _begin(self) -> None:
        pass

    def _granted(self, conn: Any, r: Reply, arrived: float) -> None:
        if r.ok:
            f = self._flight(conn, m.joined(self.key, r.body))
            if f.role == "owner":
                self._client._router.flights[f.flight] = f
            elif self.notify and f.stale is not None and f.revalidating:
                f.updated = self._future(conn)
                self._client._router.watch(self.key, f)
            self._got.append(f)

    def _give_back(self, conn: Any, r: Reply) -> Any:
        if self._got and self._got[0].role == "owner":
            f = self._got[0]
            self._client._router.flights.pop(f.flight, None)
            return conn.fire("flight.fail", {"flight": f.flight, "fence": f.fence,
                                             "error": {"code": "ABORTED",
                                                       "message": "the owner gave up"},
                                             "retryable": True})
        return None

    def _joined(self, r: Reply) -> F:
        """The settled flight; the refusal's error."""
        if not r.ok:
            raise wait_error(r, f"flight {self.key!r}: no result", self.wait)
        return self._got[0]


class Once:
    """What ``once`` decides, without I/O: the joins' options, the
    deadline over every try, the retries of a retryable failure, what a
    follower gets (its ``Result``, ``Backoff``, ``FlightFailed``), what
    the owner returns, and the fallback: ``"run"`` runs fn here when the
    broker cannot be reached or a follower's wait passed, ``"retry"``
    first joins once more (without ``supersede``, with a fresh ``wait``)
    after a follower's wait passed."""

    def __init__(self, key: m.Name, *, ttl: float, wait: Optional[float],
                 keep: Optional[float], max_age: Optional[float], stale: Optional[float],
                 notify: Any, fallback: str, retries: int, abort_when_orphaned: bool,
                 supersede: bool = False, priority: int = 0, version: Optional[m.Name] = None,
                 other_version: Optional[str] = None) -> None:
        check_fallback(fallback)
        self.key = m.name(key, "key")
        self.ttl = ttl
        self.wait = wait
        self.max_age = keep if max_age is None else max_age
        self.stale = stale
        self.notify = notify
        self.fallback = fallback
        self.local = fallback != "fail"      # fn may run here without the broker
        self.retries = retries
        self.abort_when_orphaned = abort_when_orphaned
        self.supersede = supersede
        self.priority = priority
        self.version = version
        self.other_version = other_version
        self.store = keep + stale if keep and stale else keep    # kept to be served stale
        self.deadline = None if wait is None else time.monotonic() + wait
        self.tries = 0
        self.retried = False                 # a follower's wait passed, joined again

    def join(self) -> Dict[str, Any]:
        """The next join's options (``wait``: what is left of the deadline;
        a join again after a follower's timeout supersedes nobody)."""
        left = None if self.deadline is None else max(0.001, self.deadline - time.monotonic())
        return dict(ttl=self.ttl, wait=left, max_age=self.max_age,
                    abort_when_orphaned=self.abort_when_orphaned, stale=self.stale,
                    notify=bool(self.notify), supersede=self.supersede and not self.retried,
                    priority=self.priority, version=self.version,
                    other_version=self.other_version)

    def fall_back(self, e: BaseException) -> bool:
        """A join raised e (one of ``FALLBACK_ERRORS``: the broker cannot be
        reached, or a follower's wait passed): True to join again
        (``"retry"``, once, with a fresh deadline), False to run fn here
        (then ``ran_alone``), else e is raised (``"fail"``)."""
        act = after_timeout(self.fallback, self.retried) if isinstance(e, Timeout) else (
            "run" if self.local else "raise")
        if act == "raise":
            raise e
        if act == "retry":
            self.retried = True
            self.deadline = None if self.wait is None else time.monotonic() + self.wait
            return True
        return False

    def follow(self, f: Any, call_notify: Callable[[Callable[[m.Updated], Any]],
                                                  Callable[[Any], None]]) -> Optional[Result]:
        """A join settled as ``result`` or ``failed``: the Result, None to
        join again (a retryable failure within the retries and the
        deadline), else ``Backoff`` or ``FlightFailed`` raised.
        ``call_notify(fn)`` makes the callback of ``updated`` that calls a
        ``notify`` function, the client's way."""
        if f.role == "result":
            if f.updated is not None and callable(self.notify):
                f.updated.add_done_callback(call_notify(self.notify))
            value = f.result or b""
            if f.result_ref is not None:
                f.result_ref.close()        # read into value: once returns bytes
            return Result(value, "stale" if f.stale else f.source,
                          fence=f.fence, age=f.age, revalidating=f.revalidating,
                          updated=f.updated, retried=self.retried)
        assert f.error is not None
        if f.retry_after is not None:
            raise Backoff(f.error.code, f.error.message, f.retry_after, f.source or "live")
        if f.retryable and self.tries < self.retries and (
                self.deadline is None or time.monotonic() < self.deadline):
            self.tries += 1
            return None
        raise FlightFailed(f.error.code, f.error.message, f.retryable)

    def owned(self, f: Any, out: bytes) -> Result:
        """What the owner returns once its ``complete`` went through."""
        return Result(out, "bypass" if f.bypass else "owner", fence=f.fence,
                      retried=self.retried, superseded=f.superseded)

    def completed_alone(self, out: bytes, e: BaseException) -> Result:
        """The owner ran fn, then lost the broker before its ``complete``."""
        return Result(out, "local", reason=f"ran as the owner, then: {e}",
                      fallback_cause="unreachable", retried=self.retried)

    def local_flight(self) -> m.Joined:
        """The role of fn run without the broker (``role == "local"``)."""
        return m.Joined(role="local", key=self.key, fence=0)

    @staticmethod
    def ran_alone(out: m.Payload, why: BaseException, retried: bool = False) -> Result:
        """fn ran here without the broker (``fallback="run"`` or
        ``"retry"``): ``fallback_cause`` says whether a follower's wait
        passed (why is a ``Timeout``) or the broker could not be reached;
        ``retried``: the caller had joined again."""
        return Result(m.payload(out, "result"), "local", reason=str(why),
                      fallback_cause=fallback_cause(why), retried=retried)


# ---- channels ----

class Closed:
    """What a subscription's queue gets when the connection goes."""

    def __init__(self, exc: BaseException, reconnect: bool) -> None:
        self.exc = exc
        self.reconnect = reconnect


class SubscriptionBase:
    """A subscription without I/O: its channels, its bounded queue (the
    client's ``max_queued`` items and ``max_queued_bytes``: when it is full
    the oldest are dropped, and ``dropped`` counts them), and what the
    connection's end does to a reader."""

    def __init__(self, client: Any, channels: List[m.Name], timeout: Optional[float]) -> None:
        self._client = client
        self.channels = channels
        self.timeout = timeout
        self._q = EventQueue(client.max_queued, client.max_queued_bytes)
        self._open = False
        self._error: Optional[BaseException] = None

    @property
    def dropped(self) -> int:
        """Items dropped, oldest first, because the queue was full."""
        return self._q.dropped

    def _check(self) -> None:
        """A subscription whose connection went (and was not renewed)
        raises that error on every read."""
        if self._error is not None:
            raise self._error

    def _item(self, item: Any) -> bool:
        """An item taken from the queue: True when it is one to hand out;
        False when the connection went and the client reconnects (renew
        by connecting, then read on); else the connection's error."""
        if not isinstance(item, Closed):
            return True
        if item.reconnect and self._open:
            return False
        self._error = item.exc
        raise item.exc

    def _renew_failed(self, e: BaseException) -> None:
        self._error = e
