"""errors.py - one exception class per wire error code, under CoordError.

Every reply ``{ok: false, code, message}`` becomes an instance of the class
registered for ``code`` (an unknown code becomes plain ``CoordError`` with
``.code`` kept).  Errors that never travel on the wire (cannot connect, the
connection closed, a malformed frame from the broker) have their own classes,
which are also builtin ``ConnectionError``s.  ``Timeout`` is also a builtin
``TimeoutError``, so ``except TimeoutError`` works as with other libraries.

Text that comes from the broker (an error's code and message, a lost
lock's reason) goes into messages through ``printable``: control bytes
are escaped, so a hostile or broken peer cannot write terminal escapes or
fake log lines through our exceptions.
"""
from __future__ import annotations

from typing import Callable, Dict, Optional, Type


class CoordError(Exception):
    """Base of every error this package raises.  ``code`` is the wire code
    (``"TIMEOUT"`` ...) or a library code (``"CONNECT"``, ``"CLOSED"``...)."""

    code: str = "UNKNOWN"

    reason: str = ""       # the error reply's ``reason`` ("purged"), else ""

    def __init__(self, message: str = "", code: Optional[str] = None) -> None:
        if code is not None:
            self.code = code
        self.message = message
        super().__init__(f"{self.code}: {message}" if message else self.code)


_BY_CODE: Dict[str, Type[CoordError]] = {}


def _escape(ch: str) -> str:
    c = ord(ch)
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def printable(v: object) -> str:
    """Text from the broker as it may go into a message: a str with its
    C0 and C1 control characters, DEL, line/paragraph separators and lone
    surrogates escaped (``\\x1b``); bytes (text that was not UTF-8)
    decoded with ``\\xNN`` for the bytes that are not."""
    if isinstance(v, (bytes, bytearray)):
        v = bytes(v).decode("utf-8", "backslashreplace")
    elif not isinstance(v, str):
        v = "" if v is None else str(v)
    if v.isprintable():
        return v
    return "".join(_escape(ch) if (ord(ch) < 0x20 or 0x7F <= ord(ch) < 0xA0
                                   or ch in "\u2028\u2029" or 0xD800 <= ord(ch) < 0xE000)
                   else ch for ch in v)


def _wire(code: str) -> Callable[[Type[CoordError]], Type[CoordError]]:
    def register(cls: Type[CoordError]) -> Type[CoordError]:
        cls.code = code
        _BY_CODE[code] = cls
        return cls
    return register


@_wire("BAD_FRAME")
class BadFrame(CoordError):
    """The broker refused a frame of ours (then closed the connection)."""


@_wire("HELLO_REQUIRED")
class HelloRequired(CoordError):
    """A request came before hello (the client never does this)."""


@_wire("PROTO_VERSION")
class ProtoVersion(CoordError):
    """The broker does not speak protocol v1."""


@_wire("BAD_REQUEST")
class BadRequest(CoordError):
    """A known field had the wrong type; ``message`` names the field."""


@_wire("UNKNOWN_OP")
class UnknownOp(CoordError):
    """The broker does not know the request's op (an older broker)."""


@_wire("INVALID_OPTIONS")
class InvalidOptions(CoordError):
    """A value is out of range or the options contradict each other."""


@_wire("NAME_RESERVED")
class NameReserved(CoordError):
    """Names starting with ``-`` belong to the broker."""


@_wire("TOO_LARGE")
class TooLarge(CoordError):
    """A name, payload or frame is over the broker's size limit."""


@_wire("LIMIT")
class Limit(CoordError):
    """A broker limit was reached (connections, held state, waiters); the message names the flag."""


@_wire("ABORTED")
class Aborted(CoordError):
    """A waiting request was cancelled (by us, or a steal raced it)."""


@_wire("TIMEOUT")
class Timeout(CoordError, TimeoutError):
    """The wait (``timeout=``, ``wait=``) passed with nothing granted."""


@_wire("FENCED")
class Fenced(CoordError):
    """The fence or generation is no longer the live one."""


FencedError = Fenced


@_wire("NOT_FOUND")
class NotFound(CoordError):
    """No such record, workstream or key."""


@_wire("UNKNOWN_LOCK")
class UnknownLock(CoordError):
    """The lock is not held by this connection (lost or released)."""


@_wire("DISABLED")
class Disabled(CoordError):
    """The workstream is disabled (the kill switch)."""


@_wire("STORAGE")
class Storage(CoordError):
    """The broker could not write or read its durable store."""


@_wire("SHUTTING_DOWN")
class ShuttingDown(CoordError):
    """The broker is shutting down."""


@_wire("PROTOCOL_PINNED")
class ProtocolPinned(CoordError):
    """The campaign's ``protocol`` is older than (or another name than) the
    workstream's pin; or a define would lower or remove the pin without
    ``force``."""


@_wire("POLICY")
class Policy(CoordError):
    """The workstream's descriptor forbids this: a steal under ``steal:
    never``, a steal without ``incident`` under ``incident-only``."""


@_wire("READ_ONLY")
class ReadOnly(CoordError):
    """Claims, commits and abandons are refused in the rollout modes
    ``shadow`` and ``read-only``."""


@_wire("DRAINING")
class Draining(CoordError):
    """A new claim from a leader whose term is draining."""


@_wire("UNAVAILABLE")
class Unavailable(CoordError):
    """A remote ledger could not be reached in time.  For a commit or claim
    already sent the outcome is unknown: retry with the same op id."""


# ---- library errors: never on the wire ----

class ConnectError(CoordError, ConnectionError):
    """No broker could be reached (or started, or it is not ours)."""
    code = "CONNECT"


class Refused(ConnectError):
    """The broker refused the connection, before or at hello, and closed
    it: ``code`` is its wire code (``LIMIT`` for "too many connections",
    ``TOO_LARGE`` for a client name over 256 bytes, ``PROTO_VERSION``...),
    ``reason`` the error of that code (``isinstance(e.reason,
    coord.Limit)``).  ``str(e)`` is ``"LIMIT: too many connections"``."""

    reason: CoordError  # type: ignore[assignment]  # an error here, a reply's reason elsewhere

    def __init__(self, code: object, message: object) -> None:
        self.reason = from_reply(code, message)
        super().__init__(self.reason.message, self.reason.code)


class ConnectionLost(CoordError, ConnectionError):
    """The connection closed while a request waited, or before a call."""
    code = "CLOSED"


class ProtocolError(CoordError, ConnectionError):
    """The broker sent something that is not protocol v1."""
    code = "PROTOCOL"


class LockLost(CoordError):
    """A held lock was stolen, expired, or its connection went away."""
    code = "LOCK_LOST"


class LeadershipLost(CoordError):
    """Leadership ended (lease, steal, disable, connection) while in use."""
    code = "LEADERSHIP_LOST"


class FlightFailed(CoordError):
    """A single-flight owner failed: raised to followers, and raised by an
    owner's function to fail the flight with its own code and
    ``retryable`` flag."""
    code = "FLIGHT_FAILED"

    def __init__(self, code: str = "FAILED", message: str = "",
                 retryable: bool = False) -> None:
        self.error_code = code
        self.retryable = retryable
        super().__init__(message, code)


class RetryAfter(FlightFailed):
    """Raised by an owner's function when the upstream said "retry after
    N seconds" (an HTTP 429 or 503): ``once`` fails the flight as
    retryable with ``retry_after_ms``, so that for that long every join of
    the key gets the failure at once (``Backoff``) instead of running fn
    again.  ``once`` re-raises it to the owner."""

    def __init__(self, seconds: float, message: str = "", code: str = "RETRY_AFTER") -> None:
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or \
                not seconds > 0:
            raise ValueError("RetryAfter needs a number of seconds > 0")
        self.retry_after = float(seconds)
        super().__init__(code, message, retryable=True)


class Backoff(FlightFailed):
    """The key is in a backoff: its owner failed with ``retry_after``
    (``RetryAfter``), and this join came within that time (``source``
    "backoff") or was waiting for that owner (``source`` "live").
    ``retry_after``: seconds left; ``error_code`` / ``message``: the
    owner's failure."""
    code = "BACKOFF"

    def __init__(self, error_code: str, message: str, retry_after: float,
                 source: str = "backoff") -> None:
        self.error_code = error_code
        self.retryable = True
        self.retry_after = retry_after
        self.source = source
        CoordError.__init__(self, f"{error_code}: {message} (retry after {retry_after:g} s)"
                            if message else f"{error_code} (retry after {retry_after:g} s)")
        self.message = message


def from_reply(code: object, message: object, reason: object = None) -> CoordError:
    """The exception for an error reply (``code`` as sent by the broker,
    its text escaped; ``reason``, when the reply has one, in ``.reason``)."""
    c = printable(code)
    m = printable(message)
    cls = _BY_CODE.get(c)
    e = CoordError(m, c) if cls is None else cls(m)
    if isinstance(reason, str):
        e.reason = reason
    return e


WIRE_CODES = tuple(_BY_CODE)


class RequestKeyError(CoordError, ValueError):
    """``request_key`` refused the request (it has no canonical key):
    ``field`` names the input (method, url, body, header, user, freshness,
    auth_gen, ...); the message starts with it."""
    code = "INVALID_REQUEST"

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(message)
