"""handles.py - what the blocking and the asyncio handles share: the
leadership states, how an owner's exception becomes a flight failure, and
the result of ``once`` (``Result``: bytes that say where they came from)."""
from __future__ import annotations

import enum
from typing import Any, Optional, Tuple

from .errors import FlightFailed, RetryAfter


class State(str, enum.Enum):
    """A Leadership's state."""
    FOLLOWER = "follower"       # not campaigning (or not elected, if_available)
    REQUESTING = "requesting"   # the campaign waits
    LEADER = "leader"           # elected, generation live
    RELEASED = "released"       # resigned
    ABORTED = "aborted"         # campaign failed, or leadership lost/fenced


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


class Result(bytes):
    """What ``once`` returns: the result's bytes (compare it, slice it,
    decode it as bytes), and where they came from:

    ``source``        "owner" (this call ran fn, under coordination),
                      "live" (another caller's run, waited for), "record"
                      (a stored result younger than ``max_age``), "stale"
                      (an older stored result, within ``stale``), "bypass"
                      (fn ran without deduplication: the key's prefix is
                      disabled), "local" (fn ran here without the broker:
                      ``fallback="run"``; ``reason`` says why);
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

    def __new__(cls, value: bytes, source: str, *, fence: int = 0, age: float = 0.0,
                revalidating: bool = False, reason: Optional[str] = None,
                updated: Any = None) -> "Result":
        r = super().__new__(cls, value)
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
