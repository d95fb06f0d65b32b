"""core.py - the sans-I/O protocol core shared by the blocking and the
asyncio client: framing, the rid table, the event queue.

It never touches a socket.  The client hands it bytes received
(``receive``) and sends the bytes it returns (``request``).  Every request
is registered under a fresh rid with an opaque *handle* (a future of the
client's kind); ``receive`` returns ``(handle, Reply)`` pairs for the
replies that arrived and queues events (``next_event``).  ``close`` hands
back every handle still waiting so the client can fail them.

Frames: 4-byte big-endian length, then one MessagePack map with string keys
(protocol v1).  msgpack 1.0 defaults (``use_bin_type=True``,
``raw=False``): bytes travel as bin, str as str.
"""
from __future__ import annotations

import struct
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Deque, Dict, Generic, List, Optional, Tuple, TypeVar

import msgpack

from .errors import CoordError, ProtocolError, from_reply

PROTO_VERSION = 1
# What we accept from the broker before hello tells us its max_frame, and
# the floor afterwards.  The broker never sends a frame above its own
# max_frame; the slack covers a reply built right at the limit.
DEFAULT_MAX_FRAME = 1 << 20
FRAME_SLACK = 64 * 1024

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
        return from_reply(self.code, self.message, self.body.get("reason"))

    def get(self, key: str, default: Any = None) -> Any:
        return self.body.get(key, default)


@dataclass
class Event:
    """An unsolicited frame ``{ev: name, ...}``."""
    name: str
    body: Dict[str, Any] = field(default_factory=dict)


def encode_frame(msg: Dict[str, Any]) -> bytes:
    """One frame: length prefix and the packed map."""
    body = msgpack.packb(msg, use_bin_type=True)
    return _LEN.pack(len(body)) + body


def decode_body(body: bytes) -> Dict[str, Any]:
    """Unpacks one frame body; ProtocolError unless it is one map with
    string keys and nothing after it."""
    try:
        msg = msgpack.unpackb(body, raw=False, strict_map_key=True,
                              unicode_errors="surrogateescape")
    except Exception as e:  # ExtraData, ValueError, UnicodeDecodeError...
        raise ProtocolError(f"undecodable frame from the broker: {e}") from None
    if not isinstance(msg, dict) or not all(isinstance(k, str) for k in msg):
        raise ProtocolError("frame from the broker is not a map with string keys")
    return _fix_strings(msg)


def _fix(v: Any) -> Any:
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
        return _fix_strings(v)
    if isinstance(v, list):
        return [_fix(x) for x in v]
    return v


def _fix_strings(d: Dict[str, Any]) -> Dict[str, Any]:
    return {k: _fix(v) for k, v in d.items()}


class Framer:
    """Splits a byte stream into frame bodies."""

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
                raise ProtocolError(f"the broker sent a frame of {n} bytes")
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


class Core(Generic[H]):
    """One connection's protocol state.  Not thread-safe: the blocking
    client guards it with a lock, the asyncio client uses it from the loop
    only."""

    def __init__(self, max_frame: int = DEFAULT_MAX_FRAME) -> None:
        self._framer = Framer(max_frame)
        self._next_rid = 1
        self._pending: Dict[int, H] = {}
        self._events: Deque[Event] = deque()
        self.bye: Optional[Reply] = None     # a rid-0 error: why it closes
        self.closed = False
        self.max_frame = max_frame

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
        frame = encode_frame(msg)
        self._pending[rid] = handle
        return rid, frame

    def hello(self, handle: H, client: str, pid: int, instance: str,
              scope: Any = "") -> Tuple[int, bytes]:
        return self.request("hello", {"proto": PROTO_VERSION, "client": client,
                                      "pid": pid, "instance": instance,
                                      "scope": scope}, handle)

    def set_max_frame(self, n: int) -> None:
        self.max_frame = n
        self._framer.max_frame = max(n, DEFAULT_MAX_FRAME)

    def pending(self, rid: int) -> bool:
        return rid in self._pending

    def __len__(self) -> int:
        return len(self._pending)

    # ---- receiving ----

    def receive(self, data: bytes) -> List[Tuple[H, Reply]]:
        """Feeds bytes; returns the replies matched with their handles, in
        arrival order.  Events go to the queue.  Raises ProtocolError on a
        broken stream (the connection must then be closed)."""
        out: List[Tuple[H, Reply]] = []
        for body in self._framer.feed(data):
            msg = decode_body(body)
            if "rid" not in msg:
                ev = msg.get("ev")
                if not isinstance(ev, str):
                    raise ProtocolError("frame with neither rid nor ev")
                self._events.append(Event(ev, msg))
                continue
            rid = msg.get("rid")
            if not isinstance(rid, int) or isinstance(rid, bool) or rid < 0:
                raise ProtocolError(f"reply with a bad rid {rid!r}")
            reply = Reply(rid, msg.get("ok") is True, msg)
            if rid == 0:
                self.bye = reply      # connection-level error; a close follows
                continue
            handle = self._pending.pop(rid, None)
            if handle is None:
                raise ProtocolError(f"reply to rid {rid}, which is not waiting")
            out.append((handle, reply))
        return out

    def next_event(self) -> Optional[Event]:
        return self._events.popleft() if self._events else None

    def close(self) -> List[H]:
        """Ends the connection's state; returns every handle still waiting."""
        self.closed = True
        handles = list(self._pending.values())
        self._pending.clear()
        return handles

    def close_error(self, what: str = "the connection to the broker closed") -> CoordError:
        """The error to give the waiting handles (the broker's own reason if
        it sent one)."""
        from .errors import ConnectionLost
        if self.bye is not None and not self.bye.ok:
            e = ConnectionLost(f"{what}: {self.bye.code}: {self.bye.message}")
            e.reason = self.bye.error()  # type: ignore[attr-defined]
            return e
        return ConnectionLost(what)
