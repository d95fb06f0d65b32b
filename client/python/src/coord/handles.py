"""handles.py - what the blocking and the asyncio handles share: the
leadership states and a term's bookkeeping (``LeaderTerm``: everything of
a Leadership but the I/O), how an owner's exception becomes a flight
failure, the result of ``once`` (``Result``: bytes that say where they
came from), and the client's deadlines (``request_timeout``, the backstop
of a wait) with their errors in the caller's terms."""
from __future__ import annotations

import enum
import time
from typing import Any, Callable, Dict, Optional, Tuple

from . import messages as m
from .core import Reply
from .errors import CoordError, Fenced, FlightFailed, LeadershipLost, RetryAfter, Timeout


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
    sending.  Every method runs where replies and events are handled (the
    reader thread, or the loop)."""

    def __init__(self, workstream: m.Name, *, lease: Optional[float], steal: bool,
                 timeout: Optional[float], protocol: Optional[str], incident: Optional[str],
                 event: Callable[[], Any]) -> None:
        self.workstream = m.name(workstream, "workstream")
        self.lease = lease
        self.steal = steal
        self.timeout = timeout
        self.protocol = protocol
        self.incident = incident
        self.generation: Optional[int] = None
        self.state = LeaderState.FOLLOWER
        self.mode: Optional[str] = None          # rollout mode of the term
        self.lost = event()
        self.lost_reason: Optional[str] = None
        self.lost_incident: Optional[str] = None  # leader.lost's incident text
        self.drain_requested = event()            # leader.drain came
        self.drain_reason: Optional[str] = None   # "self" | "requested" | "max_hold"
        self._deadline = 0.0
        m.campaign(self.workstream, lease=lease, steal=steal, if_available=False,
                   timeout=timeout, protocol=protocol, incident=incident)

    @property
    def leading(self) -> bool:
        """LEADER or DRAINING: the generation is live (as far as we know)."""
        return self.state in LEADING

    @property
    def draining(self) -> bool:
        return self.state == LeaderState.DRAINING

    @property
    def key(self) -> Tuple[bytes, int]:
        return m.name_key(self.workstream), self.generation or 0

    def _campaign_fields(self, if_available: bool) -> Dict[str, Any]:
        if self.state in LEADING or self.state == LeaderState.REQUESTING:
            raise RuntimeError("already campaigning or leading")
        try_once = if_available or self.timeout == 0
        return m.campaign(self.workstream, lease=self.lease, steal=self.steal,
                          if_available=try_once, timeout=None if try_once else self.timeout,
                          protocol=self.protocol, incident=self.incident)

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
    return type(e).__name__[:256], str(e)[:4096], False, None


SOURCES = ("owner", "live", "record", "stale", "bypass", "local")

# once(fallback=...): "fail" raises; "run" runs fn here when the broker
# cannot be reached or a follower's wait passes; "retry" joins once more
# after a follower's timeout, then runs fn here.
FALLBACKS = ("fail", "run", "retry")


def check_fallback(fallback: str) -> None:
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
        return bytes(self)

    @property
    def stale(self) -> bool:
        return self.source == "stale"

    @property
    def local(self) -> bool:
        return self.source == "local"

    def __repr__(self) -> str:
        extra = " revalidating" if self.revalidating else ""
        extra += f" reason={self.reason!r}" if self.reason else ""
        return f"<coord.Result {bytes(self)!r} source={self.source}{extra}>"
