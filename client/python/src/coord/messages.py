"""messages.py - the protocol's messages as Python values, shared by both
clients: names and payloads in, seconds to milliseconds, request fields,
replies parsed into small dataclasses, and the Router that sends events to
the handle they concern.

Names (lock names, keys, channels, workstreams, scope) are byte strings on
the wire: str is sent as msgpack str (its UTF-8), bytes as bin.  The broker
returns names as str when they are valid UTF-8, else bin; results keep what
came (str or bytes) and ``name_key`` compares both forms.  Payloads
(results, data, values) are bytes; str is accepted and encoded UTF-8.

A result by reference (PROTOCOL.md, "Results by reference") comes as a
``ResultRef`` in the reply's ``result_fd`` (the core put it there):
``Joined``, ``Stale`` and ``Record`` keep it as ``result_ref`` (the
caller's to close) and read their ``result`` bytes from it on first use.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from .core import NIL, Event
from .errors import printable
from .resultref import ResultRef

Name = Union[str, bytes, bytearray, memoryview]
Payload = Union[bytes, bytearray, memoryview, str]

MODES = ("exclusive", "shared")


def name(x: Name, what: str = "name") -> Union[str, bytes]:
    """A name as it goes on the wire (str stays str, bytes-like → bytes)."""
    if isinstance(x, str):
        x.encode("utf-8")           # UnicodeEncodeError (a ValueError) early
        return x
    if isinstance(x, (bytes, bytearray, memoryview)):
        return bytes(x)
    raise TypeError(f"{what} must be str or bytes, not {type(x).__name__}")


def name_key(x: Any) -> bytes:
    """The bytes a name stands for, to compare a str and a bytes form."""
    if isinstance(x, str):
        return x.encode("utf-8", "surrogateescape")
    if isinstance(x, (bytes, bytearray, memoryview)):
        return bytes(x)
    return b""


def payload(x: Payload, what: str = "data") -> bytes:
    if isinstance(x, str):
        return x.encode("utf-8")
    if isinstance(x, (bytes, bytearray, memoryview)):
        return bytes(x)
    raise TypeError(f"{what} must be bytes or str, not {type(x).__name__}")


def as_bytes(x: Any) -> bytes:
    """A payload that came from the broker (bin; str tolerated)."""
    if isinstance(x, bytes):
        return x
    if isinstance(x, str):
        return x.encode("utf-8")
    return b""


def ms(seconds: Optional[float], what: str) -> Optional[int]:
    """Seconds (float) → whole milliseconds, rounded up so that a small
    positive time never becomes 0 (which means "forever" on the wire).
    None stays None (the field is left out)."""
    if seconds is None:
        return None
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise TypeError(f"{what} must be a number of seconds or None")
    if seconds < 0 or math.isnan(seconds) or math.isinf(seconds):
        raise ValueError(f"{what} must be a finite number of seconds >= 0")
    return max(1, math.ceil(seconds * 1000)) if seconds > 0 else 0


def secs(v: Any) -> Optional[float]:
    return v / 1000.0 if isinstance(v, int) and not isinstance(v, bool) else None


def uint(body: Dict[str, Any], key: str, default: int = 0) -> int:
    v = body.get(key)
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else default


class Purged(int):
    """What ``records.purge`` answers: an ``int``, the records deleted (as
    before), with ``.deleted`` and ``.fenced``: the flights of those keys
    the purge ended (their owners' late results are refused, FENCED with
    reason "purged"; their followers fail, ABORTED with reason "purged")."""
    fenced: int

    def __new__(cls, deleted: int, fenced: int) -> "Purged":
        o = int.__new__(cls, deleted)
        o.fenced = fenced
        return o

    @property
    def deleted(self) -> int:
        return int(self)


def purged(body: Dict[str, Any]) -> Purged:
    return Purged(uint(body, "deleted"), uint(body, "fenced"))


# ---- requests ----

def lock_acquire(nm: Name, mode: str, *, if_available: bool = False, steal: bool = False,
                 timeout: Optional[float] = None, lease: Optional[float] = None
                 ) -> Dict[str, Any]:
    if mode not in MODES:
        raise ValueError(f"mode must be 'exclusive' or 'shared', not {mode!r}")
    f: Dict[str, Any] = {"name": name(nm), "mode": mode}
    if if_available:
        f["if_available"] = True
    if steal:
        f["steal"] = True
    t = ms(timeout, "timeout")
    if t:
        f["timeout_ms"] = t
    le = ms(lease, "lease")
    if le:
        f["lease_ms"] = le
    return f


# The broker's limit on a flight's version (bytes).
MAX_VERSION = 64
OTHER_VERSION = ("follow", "own")


def flight_join(key: Name, *, ttl: Optional[float], wait: Optional[float],
                max_age: Optional[float], abort_when_orphaned: bool,
                stale: Optional[float] = None, notify: bool = False,
                supersede: bool = False, priority: int = 0, version: Optional[Name] = None,
                other_version: Optional[str] = None) -> Dict[str, Any]:
    """``supersede`` (or a ``priority`` above the running owner's) takes a
    running flight over; ``version`` (at most 64 bytes) is the version of
    the code that runs the work; ``other_version`` "follow" (the default)
    follows a running flight of another version, "own" runs one of its own
    and takes no record of another version."""
    f: Dict[str, Any] = {"key": name(key, "key")}
    if supersede:
        f["supersede"] = True
    if priority:
        if not isinstance(priority, int) or isinstance(priority, bool) or priority < 0:
            raise ValueError(f"priority must be a non-negative int, not {priority!r}")
        f["priority"] = priority
    if version is not None:
        v = name(version, "version")
        if len(name_key(v)) > MAX_VERSION:
            raise ValueError(f"version: at most {MAX_VERSION} bytes")
        f["version"] = v
    if other_version is not None:
        if other_version not in OTHER_VERSION:
            raise ValueError(f"other_version must be 'follow' or 'own', not {other_version!r}")
        f["other_version"] = other_version
    s = ms(stale, "stale")
    if s:
        f["stale_ms"] = s
    if notify:
        f["notify"] = True
    t = ms(ttl, "ttl")
    if t:
        f["owner_ttl_ms"] = t
    # wait=None: no limit (wait_ms 0), not the protocol's default of ttl
    w = ms(wait, "wait")
    f["wait_ms"] = w if w else 0
    a = ms(max_age, "max_age")
    if a:
        f["max_age_ms"] = a
    if abort_when_orphaned:
        f["abort_when_orphaned"] = True
    return f


def flight_fail(code: str, message: str, retryable: bool, keep: Optional[float],
                retry_after: Optional[float]) -> Dict[str, Any]:
    """``flight.fail``'s fields but the flight and its fence."""
    if retry_after is not None and not retryable:
        raise ValueError("retry_after needs retryable=True")
    return {"error": {"code": code, "message": message}, "retryable": retryable,
            "retry_after_ms": ms(retry_after, "retry_after") or None,
            "keep_ms": ms(keep, "keep")}


def flight_complete(result: Payload, keep: Optional[float]) -> Dict[str, Any]:
    """``flight.complete``'s fields but the flight and its fence."""
    return {"result": payload(result, "result"), "keep_ms": ms(keep, "keep")}


def flight_complete_fd(size: int, keep: Optional[float]) -> Dict[str, Any]:
    """``flight.complete`` by reference: the descriptor (size bytes) goes
    with the frame."""
    return {"result_fd": size, "keep_ms": ms(keep, "keep")}


def result_ref(body: Dict[str, Any]) -> Optional[ResultRef]:
    """The ResultRef of a result by reference in body, else None."""
    r = body.get("result_fd")
    return r if isinstance(r, ResultRef) else None


class ByRef:
    """``result``: the result's bytes; for a result by reference
    (``result_ref`` set) read from its descriptor on first use and kept
    (for a large one, read ``result_ref`` instead: ``mmap()``, ``read()``;
    either way, close it)."""

    _inline: Optional[bytes]
    result_ref: Optional[ResultRef]

    @property
    def result(self) -> Optional[bytes]:
        """The result's bytes (read from ``result_ref`` on first use when
        it came by reference); None when there is none."""
        if self._inline is None and self.result_ref is not None:
            self._inline = self.result_ref.value()
        return self._inline

    @property
    def by_ref(self) -> bool:
        """The result came by reference (``result_ref``)."""
        return self.result_ref is not None


def _text(x: Any, what: str) -> Optional[str]:
    if x is None:
        return None
    if not isinstance(x, str):
        raise TypeError(f"{what} must be str, not {type(x).__name__}")
    return x


def _caps(x: Any, what: str = "capabilities") -> str:
    """Capabilities as they go on the wire: a list (a sequence) of names
    joined as "a,b" (a str "a,b" goes as it is).  The names' rules (at
    most 16, 1..64 bytes of ``A-Z a-z 0-9 . _ - : / @ +``, none twice) are
    the broker's (``InvalidOptions``); a name holding a comma is refused
    here, since joined it would read as two."""
    if isinstance(x, str):
        return x
    if isinstance(x, (bytes, bytearray, memoryview)) or not isinstance(x, Sequence):
        raise TypeError(f"{what} must be a list of str, not {type(x).__name__}")
    for c in x:
        if not isinstance(c, str):
            raise TypeError(f"{what}: a capability must be str, not {type(c).__name__}")
        if "," in c:
            raise ValueError(f"{what}: {c!r} is not one name (a comma separates names)")
    return ",".join(x)


def campaign(ws: Name, *, lease: Optional[float], steal: bool, if_available: bool,
             timeout: Optional[float], protocol: Optional[str] = None,
             incident: Optional[str] = None,
             capabilities: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    """``leader.campaign``; ``protocol`` ("name@N"), ``incident`` and
    ``capabilities`` (what the caller implements: a workstream that pins
    one it lacks answers ``ProtocolPinned``) are checked by the broker
    (``InvalidOptions``), only their type here."""
    f: Dict[str, Any] = {"workstream": name(ws, "workstream")}
    le = ms(lease, "lease")
    if le:
        f["lease_ms"] = le
    if steal:
        f["steal"] = True
    if if_available:
        f["if_available"] = True
    t = ms(timeout, "timeout")
    if t:
        f["timeout_ms"] = t
    p = _text(protocol, "protocol")
    if p is not None:
        f["protocol"] = p
    i = _text(incident, "incident")
    if i is not None:
        f["incident"] = i
    if capabilities is not None:
        f["capabilities"] = _caps(capabilities)
    return f


class _Omit:
    """The default of ``leader.define``'s fields: leave the stored value
    as it is (None instead returns the field to its default)."""
    _it: "Optional[_Omit]" = None

    def __new__(cls) -> "_Omit":
        if cls._it is None:
            cls._it = super().__new__(cls)
        return cls._it

    def __repr__(self) -> str:
        return "coord.OMIT"

    def __bool__(self) -> bool:
        return False


OMIT: Any = _Omit()

# The broker's leadership lease when a campaign names none (seconds),
# renewed every lease/3: a frozen or stalled leader is replaced within it
# (under 2 s), and one stalled longer loses its term (its late writes are
# Fenced).  Ask for a longer lease for a term that must survive long stalls.
DEFAULT_LEASE = 1.5

STEAL_POLICIES = ("never", "incident-only", "allowed")
ROLLOUT_MODES = ("shadow", "read-only", "active")


def define(ws: Name, *, protocol: Any = OMIT, max_hold: Any = OMIT, steal: Any = OMIT,
           mode: Any = OMIT, fallback: Any = OMIT, canonical_fence: Any = OMIT,
           lock_name: Any = OMIT, capabilities: Any = OMIT, if_available: Any = OMIT,
           force: bool = False) -> Dict[str, Any]:
    """``leader.define``: a field left at ``OMIT`` is not sent (the stored
    value stays), None is sent as nil (back to the default), anything else
    replaces the stored value.  ``max_hold`` in seconds (0: none);
    ``lock_name`` a name (str or bytes); ``capabilities`` a list of names
    (sent as "a,b"; an empty list: none); ``if_available`` "allowed" or
    "never"."""
    f: Dict[str, Any] = {"workstream": name(ws, "workstream")}
    for k, v in (("protocol", protocol), ("steal", steal), ("mode", mode),
                 ("fallback", fallback), ("canonical_fence", canonical_fence),
                 ("if_available", if_available)):
        if v is OMIT:
            continue
        f[k] = NIL if v is None else _text(v, k)
    if max_hold is not OMIT:
        f["max_hold_ms"] = NIL if max_hold is None else ms(max_hold, "max_hold")
    if lock_name is not OMIT:
        f["lock_name"] = NIL if lock_name is None else name(lock_name, "lock_name")
    if capabilities is not OMIT:
        f["capabilities"] = NIL if capabilities is None else _caps(capabilities)
    if force:
        f["force"] = True
    return f


def term(ws: Name, generation: Optional[int], **fields: Any) -> Dict[str, Any]:
    """The fields of a request on one term (renew, resign, commit, claim,
    abandon, drain, check)."""
    f: Dict[str, Any] = {"workstream": name(ws, "workstream"), "generation": generation or 0}
    f.update(fields)
    return f


def commit(op_id: Name, key: Optional[Name], value: Optional[Payload]) -> Dict[str, Any]:
    if value is not None and key is None:
        raise ValueError("commit: a value needs a key")
    f: Dict[str, Any] = {"op_id": name(op_id, "op_id")}
    if key is not None:
        f["key"] = name(key, "key")
        if value is not None:
            f["value"] = payload(value, "value")
    return f


def abandon(op_id: Name, reason: str) -> Dict[str, Any]:
    return {"op_id": name(op_id, "op_id"), "reason": _text(reason, "reason") or ""}


def limit(n: Optional[int]) -> Optional[int]:
    if n is None:
        return None
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError("limit must be an int >= 1")
    return n


# ---- replies ----

@dataclass
class LockEntry:
    """One entry of ``locks()``: a held lock (``held=True``) or a request."""
    name: Union[str, bytes]
    mode: str
    conn: int
    client: str
    pid: int
    age: float
    held: bool
    token: Optional[int] = None
    lock: Optional[int] = None


@dataclass
class LockState:
    held: List[LockEntry]
    pending: List[LockEntry]
    truncated: bool = False


def _entry(e: Any, held: bool) -> LockEntry:
    e = e if isinstance(e, dict) else {}
    return LockEntry(name=e.get("name", b""), mode=str(e.get("mode", "")),
                     conn=uint(e, "conn"), client=str(e.get("client", "")),
                     pid=uint(e, "pid"), age=uint(e, "age_ms") / 1000.0, held=held,
                     token=e.get("token") if held else None,
                     lock=e.get("lock") if held else None)


def lock_state(body: Dict[str, Any]) -> LockState:
    return LockState([_entry(e, True) for e in body.get("held") or []],
                     [_entry(e, False) for e in body.get("pending") or []],
                     bool(body.get("truncated")))


@dataclass
class FlightError:
    code: str
    message: str


def _error(x: Any) -> FlightError:
    """An owner's error as the broker relays it (another client's text:
    escaped, it goes into FlightFailed's message)."""
    x = x if isinstance(x, dict) else {}
    return FlightError(printable(x.get("code", "")), printable(x.get("message", "")))


@dataclass
class Stale(ByRef):
    """A stored result older than ``max_age`` but within ``stale``: what
    a revalidation's owner is given, or what a caller was served
    (``result``; ``result_ref`` when it came by reference, see
    ``ByRef``)."""
    _inline: Optional[bytes]
    age: float                      # seconds since it was made
    fence: int                      # the fence of the flight that made it
    result_ref: Optional[ResultRef] = None


@dataclass
class Updated:
    """``flight.updated``: the revalidation of ``key`` that a caller
    served stale was waiting for ended: ``status`` "completed" (the record
    is fresh now: ``records.get`` or join again) or "failed" (the stale
    record stays); ``fence`` is the revalidation's."""
    key: Union[str, bytes]
    status: str
    fence: int


@dataclass
class Joined:
    """The settled role of a ``flight.join``."""
    role: str                       # "owner" | "result" | "failed" | "local"
    key: Union[str, bytes]
    fence: int
    flight: int = 0                 # owner only
    result: Optional[bytes] = None  # result only (None when by reference)
    result_ref: Optional[ResultRef] = None   # result by reference (the caller's)
    error: Optional[FlightError] = None
    retryable: bool = False
    age: float = 0.0
    source: str = ""                # "live" | "record" | "backoff"
    stale: Optional[Stale] = None   # owner of a revalidation, or a stale result
    revalidating: bool = False      # stale result: a revalidation runs
    bypass: bool = False            # owner: the key's prefix is disabled
    retry_after: Optional[float] = None   # failed: a backoff, seconds left
    superseded: int = 0             # owner: the fence of the owner it superseded
    version: Union[str, bytes] = ""   # owner: the flight's version


def joined(key: Union[str, bytes], body: Dict[str, Any]) -> Joined:
    role = str(body.get("role", ""))
    j = Joined(role=role, key=key, fence=uint(body, "fence"), flight=uint(body, "flight"),
               age=uint(body, "age_ms") / 1000.0, source=str(body.get("source", "")))
    if role == "owner":
        j.bypass = body.get("bypass") is True
        j.superseded = uint(body, "superseded")
        j.version = body.get("version") or ""
        st = body.get("stale")
        if isinstance(st, dict):
            ref = result_ref(st)
            j.stale = Stale(None if ref else as_bytes(st.get("result")),
                            uint(st, "age_ms") / 1000.0, uint(st, "fence"), ref)
    elif role == "result":
        j.result_ref = result_ref(body)
        j.result = None if j.result_ref else as_bytes(body.get("result"))
        if body.get("stale") is True:
            j.stale = Stale(j.result, j.age, j.fence, j.result_ref)
            j.revalidating = body.get("revalidating") is True
    elif role == "failed":
        j.error = _error(body.get("error"))
        j.retryable = bool(body.get("retryable"))
        j.retry_after = secs(body.get("retry_after_ms"))
    return j


def prefixes(body: Dict[str, Any]) -> List[Union[str, bytes]]:
    """``flight.disabled``: the disabled prefixes (str, or bytes when not
    UTF-8)."""
    return [p for p in body.get("prefixes") or [] if isinstance(p, (str, bytes))]


@dataclass
class Latency:
    """One of ``stats().latency``: how many, and the median, 99th
    percentile and maximum in seconds (from the broker's histogram: exact
    below 64 us, then within 3.2%)."""
    count: int
    p50: float
    p99: float
    max: float


def _num(d: Dict[str, Any], k: str) -> float:
    v = d.get(k)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else 0.0


class Stats(Dict[str, Any]):
    """``stats()``: the broker's map as it came, plus ``latency``: the
    named latencies (lock_wait, lock_hold, flight_run, follower_wait,
    leader_transition) as ``Latency``; empty when the broker left them out
    (``truncated``: a small max_frame)."""

    @property
    def latency(self) -> Dict[str, Latency]:
        """The latency percentiles by name (``lock_wait``, ``lock_hold``,
        ``flight_run``, ``follower_wait``, ``leader_transition``), in
        seconds; empty when the broker left them out."""
        lat = self.get("latency")
        if not isinstance(lat, dict):
            return {}
        return {k: Latency(uint(v, "count"), _num(v, "p50_ms") / 1000.0,
                           _num(v, "p99_ms") / 1000.0, _num(v, "max_ms") / 1000.0)
                for k, v in lat.items() if isinstance(v, dict)}


@dataclass
class FlightEntry:
    key: Union[str, bytes]
    flight: int
    fence: int
    owner_conn: int
    owner_pid: int
    followers: int
    age: float
    completing: bool
    version: Union[str, bytes] = ""


def flight_list(body: Dict[str, Any]) -> List[FlightEntry]:
    out = []
    for e in body.get("flights") or []:
        if isinstance(e, dict):
            out.append(FlightEntry(e.get("key", b""), uint(e, "flight"), uint(e, "fence"),
                                   uint(e, "owner_conn"), uint(e, "owner_pid"),
                                   uint(e, "followers"), uint(e, "age_ms") / 1000.0,
                                   bool(e.get("completing")), e.get("version") or ""))
    return out


@dataclass
class Record(ByRef):
    """A completion record.  Times are Unix seconds (wall clock).
    ``result``: a completed record's bytes; ``result_ref`` when it is
    kept by reference (see ``ByRef``: the caller closes it)."""
    key: Union[str, bytes]
    status: str                     # "completed" | "failed"
    fence: int
    created: float
    expires: float
    _inline: Optional[bytes] = None
    result_ref: Optional[ResultRef] = None
    error: Optional[FlightError] = None
    retryable: bool = False
    # the owner that wrote it (its hello) and the version its join carried
    # ("" and 0 in records of an older broker)
    client: Union[str, bytes] = ""
    pid: int = 0
    instance: Union[str, bytes] = ""
    version: Union[str, bytes] = ""


def _owner(body: Dict[str, Any]) -> Dict[str, Any]:
    return dict(client=body.get("client") or "", pid=uint(body, "pid"),
                instance=body.get("instance") or "", version=body.get("version") or "")


def record(key: Union[str, bytes], body: Dict[str, Any]) -> Record:
    r = Record(key, str(body.get("status", "")), uint(body, "fence"),
               uint(body, "created_ms") / 1000.0, uint(body, "expires_ms") / 1000.0,
               **_owner(body))
    if r.status == "completed":
        r.result_ref = result_ref(body)
        if r.result_ref is None:
            r._inline = as_bytes(body.get("result"))
    else:
        r.error = _error(body.get("error"))
        r.retryable = bool(body.get("retryable"))
    return r


@dataclass
class RecordEntry:
    key: Union[str, bytes]
    status: str
    fence: int
    size: int
    created: float
    expires: float
    client: Union[str, bytes] = ""
    pid: int = 0
    instance: Union[str, bytes] = ""
    version: Union[str, bytes] = ""
    by_ref: bool = False            # kept by reference (a file; ``size`` bytes)


def record_list(body: Dict[str, Any]) -> List[RecordEntry]:
    return [RecordEntry(e.get("key", b""), str(e.get("status", "")), uint(e, "fence"),
                        uint(e, "size"), uint(e, "created_ms") / 1000.0,
                        uint(e, "expires_ms") / 1000.0, **_owner(e),
                        by_ref=e.get("by_ref") is True)
            for e in body.get("records") or [] if isinstance(e, dict)]


@dataclass
class LeaderInfo:
    """``leader.info``: the workstream, and its live term if someone leads.
    Durations in seconds; ``max_hold`` None when there is none."""
    generation: int                 # the last one stored
    state: str                      # "leading" | "draining" | "idle" | "disabled"
    disabled: bool
    live_generation: Optional[int] = None
    conn: Optional[int] = None
    client: Optional[str] = None
    pid: Optional[int] = None
    lease_left: Optional[float] = None
    leading: Optional[float] = None
    mode: str = "active"
    pinned_protocol: Optional[str] = None
    max_hold: Optional[float] = None
    protocol: Optional[str] = None  # the live term's campaign's
    incident: Optional[str] = None  # the live term's campaign's
    drain_reason: Optional[str] = None   # "self" | "requested" | "max_hold"
    lock_name: Optional[Union[str, bytes]] = None   # the leadership lock's name in force


def _opt_str(v: Any) -> Optional[str]:
    return v if isinstance(v, str) else None


def _opt_uint(v: Any) -> Optional[int]:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def _hold(body: Dict[str, Any]) -> Optional[float]:
    h = uint(body, "max_hold_ms")
    return h / 1000.0 if h else None


def leader_info(body: Dict[str, Any]) -> LeaderInfo:
    return LeaderInfo(uint(body, "generation"), str(body.get("state", "")),
                      bool(body.get("disabled")), _opt_uint(body.get("live_generation")),
                      _opt_uint(body.get("conn")), _opt_str(body.get("client")),
                      _opt_uint(body.get("pid")),
                      secs(body.get("lease_left_ms")), secs(body.get("leading_ms")),
                      str(body.get("mode") or "active"), _opt_str(body.get("pinned_protocol")),
                      _hold(body), _opt_str(body.get("protocol")),
                      _opt_str(body.get("incident")), _opt_str(body.get("drain_reason")),
                      _name_or_none(body.get("lock_name")))


@dataclass
class Descriptor:
    """A workstream's stored descriptor (``define`` / ``describe``).
    ``protocol`` is the one defined, ``pinned_protocol`` the pin in force
    (the ratchet: the highest version granted); ``max_hold`` seconds or
    None; ``defined`` the Unix time of the last define.  ``lock_name`` is
    the leadership lock's name in force (the defined one, else
    ``-leader/<workstream>``; None from a broker that does not say);
    ``capabilities`` the names every campaign must carry ([] when none);
    ``if_available`` "allowed" or "never" (an ``if_available`` campaign
    then raises ``Policy``)."""
    workstream: Union[str, bytes]
    protocol: Optional[str]
    pinned_protocol: Optional[str]
    max_hold: Optional[float]
    steal: str
    mode: str
    fallback: Optional[str]
    canonical_fence: str
    defined: float
    lock_name: Optional[Union[str, bytes]] = None
    capabilities: List[str] = field(default_factory=list)
    if_available: str = "allowed"


def _name_or_none(v: Any) -> Optional[Union[str, bytes]]:
    return v if isinstance(v, (str, bytes)) else None


def descriptor(body: Dict[str, Any]) -> Descriptor:
    d = body.get("descriptor")
    d = d if isinstance(d, dict) else {}
    caps = _opt_str(d.get("capabilities"))
    return Descriptor(d.get("workstream", b""), _opt_str(d.get("protocol")),
                      _opt_str(d.get("pinned_protocol")), _hold(d),
                      str(d.get("steal") or "allowed"), str(d.get("mode") or "active"),
                      _opt_str(d.get("fallback")), str(d.get("canonical_fence") or "local"),
                      uint(d, "defined_ms") / 1000.0, _name_or_none(d.get("lock_name")),
                      caps.split(",") if caps else [],
                      str(d.get("if_available") or "allowed"))


class Page(list):  # type: ignore[type-arg]
    """A list the broker may have cut to fit its frame (``truncated``)."""
    truncated: bool = False


def _page(items: List[Any], truncated: Any) -> Page:
    p = Page(items)
    p.truncated = truncated is True
    return p


@dataclass
class Term:
    """One entry of ``leader.history`` (newest first).  ``elected`` and
    ``ended`` are Unix seconds; a live term has ``ended == 0`` and no
    ``reason``; ``reason`` is one of ``leader.lost``'s, ``resigned`` or
    ``restart``."""
    generation: int
    client: str
    pid: int
    instance: str
    mode: str
    elected: float
    ended: float
    protocol: Optional[str] = None
    reason: Optional[str] = None
    incident: Optional[str] = None

    @property
    def live(self) -> bool:
        """The term has not ended."""
        return self.ended == 0 and self.reason is None


def history(body: Dict[str, Any]) -> Page:
    return _page([Term(uint(t, "generation"), str(t.get("client", "")), uint(t, "pid"),
                       str(t.get("instance", "")), str(t.get("mode") or "active"),
                       uint(t, "elected_ms") / 1000.0, uint(t, "ended_ms") / 1000.0,
                       _opt_str(t.get("protocol")), _opt_str(t.get("reason")),
                       _opt_str(t.get("incident")))
                  for t in body.get("terms") or [] if isinstance(t, dict)],
                 body.get("truncated"))


@dataclass
class Claim:
    """``leader.claim``.  ``claimed``: the op is ours to do now; with
    ``reconcile`` an earlier generation (``previous_generation``, at Unix
    ms ``claimed_ms``) claimed it and never settled it: its effect may or
    may not have happened, so check the external system by this op id
    before doing it again.  Not claimed: ``applied`` (by ``generation``)
    or ``abandoned``."""
    op_id: Union[str, bytes]
    claimed: bool
    reconcile: bool = False
    previous_generation: Optional[int] = None
    claimed_ms: Optional[int] = None
    applied: bool = False
    abandoned: bool = False
    generation: Optional[int] = None


def claim(op_id: Union[str, bytes], body: Dict[str, Any]) -> Claim:
    return Claim(op_id, body.get("claimed") is True, body.get("reconcile") is True,
                 _opt_uint(body.get("previous_generation")), _opt_uint(body.get("claimed_ms")),
                 body.get("applied") is True, body.get("abandoned") is True,
                 _opt_uint(body.get("generation")))


@dataclass
class Commit:
    """``leader.commit``: true (``applied``) when applied now.  Else
    ``duplicate`` (applied before, by ``generation``) or ``abandoned``
    (nothing changed)."""
    applied: bool
    duplicate: bool = False
    abandoned: bool = False
    generation: Optional[int] = None

    def __bool__(self) -> bool:
        return self.applied


def commit_result(body: Dict[str, Any]) -> Commit:
    return Commit(body.get("applied") is True, body.get("duplicate") is True,
                  body.get("abandoned") is True, _opt_uint(body.get("generation")))


@dataclass
class Abandon:
    """``leader.abandon``: true (``abandoned``) when the op is settled as
    never to be done; else it was ``applied`` already, by ``generation``."""
    abandoned: bool
    applied: bool = False
    generation: Optional[int] = None

    def __bool__(self) -> bool:
        return self.abandoned


def abandon_result(body: Dict[str, Any]) -> Abandon:
    applied = body.get("applied") is True
    return Abandon(not applied, applied, _opt_uint(body.get("generation")))


@dataclass
class PendingOp:
    """One claimed, unsettled op (``leader.pending``, oldest claim first);
    ``live``: its claiming generation is the live one."""
    op_id: Union[str, bytes]
    generation: int
    claimed_ms: int
    live: bool


def pending(body: Dict[str, Any]) -> Page:
    return _page([PendingOp(o.get("op_id", b""), uint(o, "generation"), uint(o, "claimed_ms"),
                            o.get("live") is True)
                  for o in body.get("ops") or [] if isinstance(o, dict)],
                 body.get("truncated"))


@dataclass
class Check:
    """``leader.check``: the generation was live when the broker answered
    (a check, not a lock: it can end a moment later)."""
    live: bool
    lease_left: Optional[float]
    mode: str


def check(body: Dict[str, Any]) -> Check:
    return Check(body.get("live") is True, secs(body.get("lease_left_ms")),
                 str(body.get("mode") or "active"))


@dataclass
class Message:
    """A channel message from another subscriber."""
    channel: Union[str, bytes]
    data: bytes
    conn: int


@dataclass
class Lifecycle:
    """An event of the broker's channels (-locks, -flights, -leaders):
    ``what`` (granted, released, lost, started, completed, elected, ...)
    and every other field in ``fields`` (on -flights: key, flight, fence,
    reason, the owner's conn, client, pid, instance, started_ms,
    deadline_ms, version; code and retryable of a failure; duration_ms,
    wait_ms)."""
    channel: str
    what: str
    at: float
    fields: Dict[str, Any] = field(default_factory=dict)

    def __getitem__(self, k: str) -> Any:
        return self.fields[k]

    def get(self, k: str, default: Any = None) -> Any:
        """A field of the event (``name``, ``conn``...), or default."""
        return self.fields.get(k, default)


def channel_item(ev: Event) -> Union[Message, Lifecycle, None]:
    b = ev.body
    if ev.name == "message":
        return Message(b.get("channel", b""), as_bytes(b.get("data")), uint(b, "conn"))
    if ev.name == "lifecycle":
        ch = b.get("channel", "")
        ch = ch if isinstance(ch, str) else ch.decode("utf-8", "replace")
        rest = {k: v for k, v in b.items() if k not in ("ev", "channel", "what", "at_ms")}
        return Lifecycle(ch, str(b.get("what", "")), uint(b, "at_ms") / 1000.0, rest)
    return None


# ---- events to handles ----

class Router:
    """Which live handle an event concerns.  Handles implement
    ``_lost(reason)`` (locks; leaderships also get the incident, and
    ``_drain(reason)`` / ``_mode(mode)``), ``_abort(reason)`` (flights),
    ``_updated(u)`` / ``_watch_lost(exc)`` (flights served stale with
    notify) and ``_push(item, size)`` / ``_closed(exc)`` (subscriptions).
    Registration happens where the reply is read, before any later event
    is handled (the clients handle frames in wire order).  Reasons from
    the broker are escaped (``printable``): they go into messages."""

    def __init__(self) -> None:
        self.locks: Dict[int, Any] = {}
        self.flights: Dict[int, Any] = {}
        self.leaders: Dict[Tuple[bytes, int], Any] = {}
        self.subs: Dict[bytes, List[Any]] = {}
        # key -> the watches (notify) of callers served stale, oldest
        # first: the broker sends one flight.updated per watch, in order
        self.watches: Dict[bytes, List[Any]] = {}

    def watch(self, key: Any, w: Any) -> None:
        self.watches.setdefault(name_key(key), []).append(w)

    def add_sub(self, channel: Any, sub: Any) -> bool:
        """Routes a channel's items to sub too; True when it is the
        channel's first subscription (the broker is to be asked)."""
        subs = self.subs.setdefault(name_key(channel), [])
        subs.append(sub)
        return len(subs) == 1

    def remove_sub(self, sub: Any, channels: List[Any]) -> List[Any]:
        """Routes the channels' items to sub no more; the channels left
        without a subscription (the broker is to be told)."""
        last = []
        for ch in channels:
            k = name_key(ch)
            subs = self.subs.get(k)
            if subs and sub in subs:
                subs.remove(sub)
                if not subs:
                    del self.subs[k]
                    last.append(ch)
        return last

    def dispatch(self, ev: Event) -> None:
        b = ev.body
        if ev.name == "flight.updated":
            k = name_key(b.get("key"))
            ws = self.watches.get(k)
            if ws:
                w = ws.pop(0)
                if not ws:
                    del self.watches[k]
                w._updated(Updated(b.get("key", b""), str(b.get("status", "")),
                                   uint(b, "fence")))
        elif ev.name == "lock.lost":
            h = self.locks.pop(uint(b, "lock"), None)
            if h is not None:
                h._lost(printable(b.get("reason", "lost")))
        elif ev.name == "flight.abort":
            h = self.flights.get(uint(b, "flight"))
            if h is not None:
                h._abort(printable(b.get("reason", "aborted")))
        elif ev.name == "leader.lost":
            h = self.leaders.pop((name_key(b.get("workstream")), uint(b, "generation")), None)
            if h is not None:
                h._lost(printable(b.get("reason", "lost")), _opt_str(b.get("incident")))
        elif ev.name in ("leader.drain", "leader.mode"):
            h = self.leaders.get((name_key(b.get("workstream")), uint(b, "generation")))
            if h is not None:
                if ev.name == "leader.drain":
                    h._drain(printable(b.get("reason", "requested")))
                else:
                    h._mode(str(b.get("mode", "")))
        elif ev.name in ("message", "lifecycle"):
            item = channel_item(ev)
            for s in list(self.subs.get(name_key(b.get("channel")), ())):
                s._push(item, ev.size)

    def connection_lost(self, exc: BaseException, keep_subs: bool) -> None:
        """Every lock and leadership is gone with the connection; a flight
        owner's flight passes on.  Subscriptions are told (and kept when the
        client reconnects)."""
        locks, self.locks = self.locks, {}
        leaders, self.leaders = self.leaders, {}
        flights, self.flights = self.flights, {}
        watches, self.watches = self.watches, {}
        for ws in watches.values():
            for w in ws:
                w._watch_lost(exc)
        for h in locks.values():
            h._lost("disconnected")
        for h in leaders.values():
            h._lost("disconnected")
        for h in flights.values():
            h._abort("disconnected")
        for subs in list(self.subs.values()):
            for s in list(subs):
                s._closed(exc, keep_subs)
        if not keep_subs:
            self.subs.clear()


Hook = Callable[[Any], None]
