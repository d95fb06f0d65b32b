"""core.py - the sans-I/O protocol core shared by the blocking and the
asyncio client: framing, the rid table, the client's limits, the bounded
event queue of a subscription.

It never touches a socket.  The client hands it bytes received
(``receive``) and sends the bytes it returns (``request``).  Every request
is registered under a fresh rid with an opaque *handle* (a future of the
client's kind); ``receive`` returns the frames that arrived **in wire
order**, replies as ``(handle, Reply)`` and events as ``(None, Event)``:
the client handles each before the next, so an event that came before a
reply is handled before the caller of that request wakes, and a
``lock.lost`` right behind a grant finds the lock that grant registered.
``close`` hands back every handle still waiting so the client can fail
them.

What a broker (or something posing as one) can make the client hold is
bounded here: a frame at most the ``max_frame`` hello announced, and that
at most the protocol's 64 MiB (``MAX_FRAME_CAP``: a larger announcement
is refused, as is a length prefix past the limit, before any body byte is
buffered); nesting at most ``MAX_DEPTH``; the events queued for a reader
that does not read at most ``DEFAULT_MAX_QUEUED`` items and
``DEFAULT_MAX_QUEUED_BYTES`` (``EventQueue``: the oldest are dropped and
counted).

Descriptors (results by reference): the client hands the core the
descriptors a read brought (``add_fds``) before its bytes; a frame that
declares one (``result_fd: SIZE``, at its top or in its ``stale`` map)
takes the oldest queued, and the core puts a ``ResultRef`` (which owns
it) in that field's place.  A frame declaring one when none is queued, or
more than ``MAX_QUEUED_FDS`` waiting unclaimed, breaks the stream
(ProtocolError); those still queued at close are closed.

Frames: 4-byte big-endian length, then one MessagePack map with string keys
(protocol v1).  msgpack 1.0 defaults (``use_bin_type=True``,
``raw=False``): bytes travel as bin, str as str.
"""
from __future__ import annotations

import os
import struct
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Deque, Dict, Generic, List, Optional, Tuple, TypeVar, Union

import msgpack

from .errors import CoordError, ProtocolError, from_reply
from .resultref import ResultRef

PROTO_VERSION = 1
# What we accept from the broker before hello tells us its max_frame, and
# the floor afterwards.  The broker never sends a frame above its own
# max_frame; the slack covers a reply built right at the limit.
DEFAULT_MAX_FRAME = 1 << 20
FRAME_SLACK = 64 * 1024
# The protocol's ceiling for max_frame (PROTOCOL.md, "Sizes": --max-frame
# is at most 64 MiB; libcoord's COORD_CLIENT_MAX_INBOUND).  A hello that
# announces more is refused: else whoever answers on the socket could make
# us buffer a frame of up to 4 GiB (and copy it twice).
MAX_FRAME_CAP = 64 << 20
# The protocol's nesting limit (protocol/frame.h COORD_MAX_DEPTH: reply
# map -> array -> entry map), in both directions.
MAX_DEPTH = 3
# A subscription's queue while nobody reads it: past either bound the
# oldest items are dropped and counted (``Subscription.dropped``).  10,000
# items is seconds of a busy channel; the bytes bound (frame sizes) keeps
# 64 KiB messages to 16 MiB.  The newest item is always kept.
DEFAULT_MAX_QUEUED = 10_000
DEFAULT_MAX_QUEUED_BYTES = 16 << 20
# The deadline of a request that does not wait by design (ping, release,
# commit, info, ...; not lock.acquire, flight.join or leader.campaign,
# which have their own timeouts): past it the call raises Timeout.  Above
# the broker's own slowest answer (a remote ledger's UNAVAILABLE comes
# within its timeouts, a few seconds).
DEFAULT_REQUEST_TIMEOUT = 30.0

# Descriptors received and not yet claimed by a frame (PROTOCOL.md,
# "Results by reference": more is a protocol violation).
MAX_QUEUED_FDS = 4

_LEN = struct.Struct(">I")


class _Nil:
    """The value of a request field sent as MessagePack nil (a field whose
    value is None is left out instead): ``leader.define`` uses it to return
    a descriptor field to its default."""
    _it: "Optional[_Nil]" = None

    def __new__(cls) -> "_Nil":
        if cls._it is None:
            cls._it = super().__new__(cls)
        return cls._it

    def __repr__(self) -> str:
        return "coord.core.NIL"


NIL = _Nil()

H = TypeVar("H")


@dataclass
class Reply:
    """One reply: ``body`` is the whole map (``rid``, ``ok`` included)."""
    rid: int
    ok: bool
    body: Dict[str, Any]

    @property
    def code(self) -> str:
        c = self.body.get("code")
        return c if isinstance(c, str) else "UNKNOWN"

    @property
    def message(self) -> str:
        m = self.body.get("message")
        return m if isinstance(m, str) else ""

    def error(self) -> CoordError:
        """The exception for an error reply (the broker's text escaped)."""
        return from_reply(self.code, self.body.get("message"), self.body.get("reason"))

    def get(self, key: str, default: Any = None) -> Any:
        return self.body.get(key, default)


@dataclass
class Event:
    """An unsolicited frame ``{ev: name, ...}``; ``size``: its frame's
    length (what queueing it costs)."""
    name: str
    body: Dict[str, Any] = field(default_factory=dict)
    size: int = 0


def encode_frame(msg: Dict[str, Any]) -> bytes:
    """One frame: length prefix and the packed map."""
    body: bytes = msgpack.packb(msg, use_bin_type=True)
    return _LEN.pack(len(body)) + body


_TOO_DEEP = f"frame from the broker nested deeper than {MAX_DEPTH} levels (the protocol's limit)"


def decode_body(body: bytes) -> Dict[str, Any]:
    """Unpacks one frame body; ProtocolError unless it is one map with
    string keys, nested at most MAX_DEPTH deep, and nothing after it."""
    try:
        msg = msgpack.unpackb(body, raw=False, strict_map_key=True,
                              unicode_errors="surrogateescape")
    except msgpack.StackError:
        raise ProtocolError(_TOO_DEEP) from None
    except Exception as e:  # ExtraData, ValueError, UnicodeDecodeError...
        raise ProtocolError(f"undecodable frame from the broker: {e}") from None
    if not isinstance(msg, dict) or not all(isinstance(k, str) for k in msg):
        raise ProtocolError("frame from the broker is not a map with string keys")
    return _fix_strings(msg, 1)


def _fix(v: Any, depth: int) -> Any:
    """v as the client keeps it; depth is that of v's container."""
    if isinstance(v, str):
        if v.isascii():
            return v
        try:
            v.encode("utf-8")
            return v
        except UnicodeEncodeError:
            # this broker sends names as str even when they are not UTF-8:
            # such a name comes back as the bytes it is
            return v.encode("utf-8", "surrogateescape")
    if isinstance(v, dict):
        return _fix_strings(v, depth + 1)
    if isinstance(v, list):
        if depth >= MAX_DEPTH:
            raise ProtocolError(_TOO_DEEP)
        return [_fix(x, depth + 1) for x in v]
    return v


_PLAIN = (int, bool, float, type(None), bytes)


def _fix_strings(d: Dict[str, Any], depth: int) -> Dict[str, Any]:
    if depth > MAX_DEPTH:
        raise ProtocolError(_TOO_DEEP)
    # most replies are flat maps of ASCII str, ints and booleans: kept as
    # they are, without building a new dict
    for v in d.values():
        t = type(v)
        if not (t in _PLAIN or (t is str and v.isascii())):
            return {k: _fix(v, depth) for k, v in d.items()}
    return d


class Framer:
    """Splits a byte stream into frame bodies.  A length prefix above
    ``max_frame`` (plus the slack) is refused as soon as its 4 bytes are
    in, before any body byte is buffered."""

    def __init__(self, max_frame: int = DEFAULT_MAX_FRAME) -> None:
        self.max_frame = max_frame
        self._buf = bytearray()

    def feed(self, data: bytes) -> List[bytes]:
        self._buf += data
        out: List[bytes] = []
        buf = self._buf
        pos = 0
        while len(buf) - pos >= 4:
            (n,) = _LEN.unpack_from(buf, pos)
            if n == 0 or n > self.max_frame + FRAME_SLACK:
                raise ProtocolError(f"the broker sent a frame of {n} bytes (the limit is "
                                    f"{self.max_frame + FRAME_SLACK})")
            if len(buf) - pos - 4 < n:
                break
            out.append(bytes(buf[pos + 4:pos + 4 + n]))
            pos += 4 + n
        if pos:
            del buf[:pos]
        return out

    @property
    def buffered(self) -> int:
        return len(self._buf)


Item = Tuple[Optional[H], Union[Reply, Event]]


class Core(Generic[H]):
    """One connection's protocol state.  Not thread-safe: the blocking
    client guards it with a lock, the asyncio client uses it from the loop
    only."""

    def __init__(self, max_frame: int = DEFAULT_MAX_FRAME) -> None:
        self._framer = Framer(max_frame)
        # one packer per connection (msgpack.packb makes one per call);
        # the same bytes as encode_frame
        self._packer = msgpack.Packer(use_bin_type=True)
        self._next_rid = 1
        self._pending: Dict[int, H] = {}
        self.bye: Optional[Reply] = None     # a rid-0 error: why it closes
        self.closed = False
        self.max_frame = max_frame
        self._fds: Deque[int] = deque()

    # ---- sending ----

    def request(self, op: str, fields: Dict[str, Any], handle: H) -> Tuple[int, bytes]:
        """Registers a request; returns its rid and the frame to send.
        Fields whose value is None are left out (absent); ``NIL`` is sent
        as nil."""
        if self.closed:
            raise ProtocolError("request on a closed connection")
        rid = self._next_rid
        while rid in self._pending or rid == 0:
            rid = rid + 1 if rid < (1 << 63) else 1
        self._next_rid = rid + 1 if rid < (1 << 63) else 1
        msg: Dict[str, Any] = {"op": op, "rid": rid}
        for k, v in fields.items():
            if v is NIL:
                msg[k] = None
            elif v is not None:
                msg[k] = v
        body: bytes = self._packer.pack(msg)
        frame = _LEN.pack(len(body)) + body
        self._pending[rid] = handle
        return rid, frame

    def hello(self, handle: H, client: str, pid: int, instance: str,
              scope: Any = "", fds: bool = True) -> Tuple[int, bytes]:
        """``fds``: this connection reads descriptors (results by
        reference come as ``ResultRef``)."""
        return self.request("hello", {"proto": PROTO_VERSION, "client": client,
                                      "pid": pid, "instance": instance,
                                      "scope": scope, "fds": fds or None}, handle)

    def set_max_frame(self, n: int) -> None:
        """The max_frame hello announced; ProtocolError above the
        protocol's cap (the connection must then be closed)."""
        if n > MAX_FRAME_CAP:
            raise ProtocolError(f"the broker announced max_frame {n}, above the protocol's "
                                f"limit of {MAX_FRAME_CAP} bytes (64 MiB)")
        self.max_frame = n
        self._framer.max_frame = max(n, DEFAULT_MAX_FRAME)

    def pending(self, rid: int) -> bool:
        return rid in self._pending

    def __len__(self) -> int:
        return len(self._pending)

    # ---- receiving ----

    def add_fds(self, fds: List[int]) -> None:
        """Queues the descriptors a read brought (before its bytes go to
        ``receive``); the core owns them from here.  ProtocolError when
        more than MAX_QUEUED_FDS wait unclaimed (or the core is closed:
        they are closed)."""
        self._fds.extend(fds)
        if self.closed or len(self._fds) > MAX_QUEUED_FDS:
            n = len(self._fds)
            self._close_fds()
            if not self.closed:
                raise ProtocolError(f"the broker sent {n} descriptors no frame claimed "
                                    f"(at most {MAX_QUEUED_FDS})")

    def _claim(self, m: Dict[str, Any]) -> None:
        """m declares a descriptor (``result_fd: SIZE``): the oldest queued
        becomes a ResultRef in that field's place."""
        size = m["result_fd"]
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise ProtocolError(f"result_fd is not a size: {size!r}")
        if not self._fds:
            raise ProtocolError("a frame declared a descriptor (result_fd) and none came")
        m["result_fd"] = ResultRef(self._fds.popleft(), size)

    def _close_fds(self) -> None:
        while self._fds:
            try:
                os.close(self._fds.popleft())
            except OSError:
                pass

    def receive(self, data: bytes) -> List[Item[H]]:
        """Feeds bytes; returns the frames that completed, in wire order:
        ``(handle, Reply)`` for a reply, ``(None, Event)`` for an event.
        A rid-0 error is kept as ``bye`` (a close follows).  Raises
        ProtocolError on a broken stream (the connection must then be
        closed); the frames before the broken one are lost with it."""
        out: List[Item[H]] = []
        for body in self._framer.feed(data):
            msg = decode_body(body)
            if "result_fd" in msg:
                self._claim(msg)
            elif "stale" in msg and isinstance(msg["stale"], dict) \
                    and "result_fd" in msg["stale"]:
                self._claim(msg["stale"])
            if "rid" not in msg:
                ev = msg.get("ev")
                if not isinstance(ev, str):
                    raise ProtocolError("frame with neither rid nor ev")
                out.append((None, Event(ev, msg, len(body) + 4)))
                continue
            rid = msg.get("rid")
            if not isinstance(rid, int) or isinstance(rid, bool) or rid < 0:
                raise ProtocolError(f"reply with a bad rid {rid!r}")
            reply = Reply(rid, msg.get("ok") is True, msg)
            if rid == 0:
                self.bye = reply      # connection-level error; a close follows
                continue
            if rid not in self._pending:
                raise ProtocolError(f"reply to rid {rid}, which is not waiting")
            out.append((self._pending.pop(rid), reply))
        return out

    def close(self) -> List[H]:
        """Ends the connection's state; returns every handle still waiting."""
        self.closed = True
        self._close_fds()
        handles = list(self._pending.values())
        self._pending.clear()
        return handles

    def end(self, err: Optional[BaseException]) -> Tuple[List[H], BaseException]:
        """The connection ended, with err or else the broker's own reason
        (close_error): every handle still waiting, and the error to give
        them.  One path for both clients."""
        handles = self.close()
        return handles, err or self.close_error()

    def close_error(self, what: str = "the connection to the broker closed") -> CoordError:
        """The error to give the waiting handles (the broker's own reason if
        it sent one, escaped: see errors.printable)."""
        from .errors import ConnectionLost
        if self.bye is not None and not self.bye.ok:
            reason = self.bye.error()
            e = ConnectionLost(f"{what}: {reason}")
            e.reason = reason  # type: ignore[assignment]  # as Refused.reason
            return e
        return ConnectionLost(what)


class EventQueue:
    """The events queued for one reader (a subscription), bounded: past
    ``max_items`` items or ``max_bytes`` (their frame sizes) the oldest
    are dropped and counted in ``dropped``; the newest is always kept.
    Control items (``push(item)`` without a size: the connection closed)
    are never dropped nor counted.  Not thread-safe (the blocking client
    guards it with a Condition)."""

    def __init__(self, max_items: int = DEFAULT_MAX_QUEUED,
                 max_bytes: int = DEFAULT_MAX_QUEUED_BYTES) -> None:
        if isinstance(max_items, bool) or not isinstance(max_items, int) or max_items < 1:
            raise ValueError("max_queued must be an int >= 1")
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
            raise ValueError("max_queued_bytes must be an int >= 1")
        self.max_items = max_items
        self.max_bytes = max_bytes
        self.dropped = 0
        self._q: Deque[Tuple[Any, Optional[int]]] = deque()
        self._front: Deque[Any] = deque()  # control items that reached the head
        self._items = 0
        self._bytes = 0

    def push(self, item: Any, size: Optional[int] = None) -> int:
        """Queues item; returns how many older items it pushed out."""
        self._q.append((item, size))
        if size is None:
            return 0
        self._items += 1
        self._bytes += size
        n = 0
        while (self._items > self.max_items or self._bytes > self.max_bytes) \
                and self._items > 1:
            old, sz = self._q.popleft()
            if sz is None:
                self._front.append(old)
                continue
            self._items -= 1
            self._bytes -= sz
            n += 1
        self.dropped += n
        return n

    def pop(self) -> Any:
        """The oldest item; IndexError when empty."""
        if self._front:
            return self._front.popleft()
        item, sz = self._q.popleft()
        if sz is not None:
            self._items -= 1
            self._bytes -= sz
        return item

    def __len__(self) -> int:
        return len(self._front) + len(self._q)

    @property
    def queued_bytes(self) -> int:
        return self._bytes
