"""handles.py - what the blocking and the asyncio handles share: the
leadership states and how an owner's exception becomes a flight failure."""
from __future__ import annotations

import enum
from typing import Tuple

from .errors import FlightFailed


class State(str, enum.Enum):
    """A Leadership's state."""
    FOLLOWER = "follower"       # not campaigning (or not elected, if_available)
    REQUESTING = "requesting"   # the campaign waits
    LEADER = "leader"           # elected, generation live
    RELEASED = "released"       # resigned
    ABORTED = "aborted"         # campaign failed, or leadership lost/fenced


def owner_failure(e: BaseException) -> Tuple[str, str, bool]:
    """(code, message, retryable) for an owner function that raised e:
    its own FlightFailed as is; an interruption (KeyboardInterrupt,
    cancellation) is retryable, since another caller may finish; any other
    exception is not (it would likely fail again for everyone)."""
    if isinstance(e, FlightFailed):
        return e.error_code, e.message, e.retryable
    if not isinstance(e, Exception):
        return "ABORTED", f"the owner was interrupted ({type(e).__name__})", True
    return type(e).__name__[:256], str(e)[:4096], False
