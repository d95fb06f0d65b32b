"""calls.py - what the blocking and the asyncio ``Client`` share besides
the handles (``handles.py``): the options, the outcome of hello, and every
call that is one request and the parse of its reply (``Req``).  The two
clients' methods of that kind build the ``Req`` here and run it, each its
own way (``Client._do``: blocking, or awaited); a call's request and what
its reply means are written once, here."""
from __future__ import annotations

from typing import Any, Callable, Dict, Generic, List, Optional, Tuple, TypeVar, Union, cast

from . import messages as m
from .core import EventQueue, Reply
from .errors import ConnectError, ConnectionLost, CoordError, Refused
from .handles import check_request_timeout
from .paths import default_socket_path, program_name


T = TypeVar("T")


class Req(Generic[T]):
    """One request and what its reply means: ``parse(body)``; with
    ``absent``, ``NotFound`` answers None (T is then Optional)."""
    __slots__ = ("op", "fields", "parse", "absent")

    def __init__(self, op: str, fields: Dict[str, Any], parse: Callable[[Dict[str, Any]], T],
                 absent: bool = False) -> None:
        self.op = op
        self.fields = fields
        self.parse = parse
        self.absent = absent

    def missing(self) -> T:
        """What an ``absent`` request answers to ``NotFound``: None."""
        return cast(T, None)


def _nothing(body: Dict[str, Any]) -> None:
    return None


def _delivered(body: Dict[str, Any]) -> int:
    return m.uint(body, "delivered")


def _ws(workstream: m.Name) -> Dict[str, Any]:
    return {"workstream": m.name(workstream, "workstream")}


# ---- the client ----

def stats() -> "Req[m.Stats]":
    return Req("stats", {}, m.Stats)


def locks() -> "Req[m.LockState]":
    return Req("lock.query", {}, m.lock_state)


def publish(channel: m.Name, data: m.Payload) -> "Req[int]":
    return Req("sub.publish", {"channel": m.name(channel, "channel"), "data": m.payload(data)},
               _delivered)


def watched(channels: Any) -> Any:
    """``watch()``'s channels: default the broker's three."""
    return channels or ("-locks", "-flights", "-leaders")


# ---- c.flight, c.records ----

def flight_list() -> "Req[List[m.FlightEntry]]":
    return Req("flight.list", {}, m.flight_list)


def flight_disable(prefix: m.Name) -> "Req[None]":
    return Req("flight.disable", {"prefix": m.name(prefix, "prefix")}, _nothing)


def flight_enable(prefix: m.Name) -> "Req[None]":
    return Req("flight.enable", {"prefix": m.name(prefix, "prefix")}, _nothing)


def flight_disabled() -> "Req[List[Union[str, bytes]]]":
    return Req("flight.disabled", {}, m.prefixes)


def record_get(key: m.Name) -> "Req[Optional[m.Record]]":
    k = m.name(key, "key")
    return Req("record.get", {"key": k}, lambda b: m.record(k, b), absent=True)


def record_list(prefix: m.Name, limit: Optional[int]) -> "Req[List[m.RecordEntry]]":
    return Req("record.list", {"prefix": m.name(prefix, "prefix"), "limit": limit},
               m.record_list)


def record_purge(prefix: m.Name) -> "Req[m.Purged]":
    return Req("record.purge", {"prefix": m.name(prefix, "prefix")}, m.purged)


# ---- c.leader ----

def leader_define(workstream: m.Name, **fields: Any) -> "Req[m.Descriptor]":
    return Req("leader.define", m.define(workstream, **fields), m.descriptor)


def leader_describe(workstream: m.Name) -> "Req[m.Descriptor]":
    return Req("leader.describe", _ws(workstream), m.descriptor)


def leader_info(workstream: m.Name) -> "Req[m.LeaderInfo]":
    return Req("leader.info", _ws(workstream), m.leader_info)


def leader_history(workstream: m.Name, limit: Optional[int]) -> "Req[m.Page]":
    return Req("leader.history", dict(_ws(workstream), limit=m.limit(limit)), m.history)


def leader_pending(workstream: m.Name, limit: Optional[int]) -> "Req[m.Page]":
    return Req("leader.pending", dict(_ws(workstream), limit=m.limit(limit)), m.pending)


def leader_check(workstream: m.Name, generation: int) -> "Req[m.Check]":
    return Req("leader.check", m.term(workstream, generation), m.check)


def leader_drain(workstream: m.Name, generation: int) -> "Req[None]":
    return Req("leader.drain", m.term(workstream, generation), _nothing)


def leader_read(workstream: m.Name, key: m.Name) -> "Req[Optional[Tuple[bytes, int]]]":
    return Req("leader.read", dict(_ws(workstream), key=m.name(key, "key")),
               lambda b: (m.as_bytes(b.get("value")), m.uint(b, "generation")), absent=True)


def leader_disable(workstream: m.Name) -> "Req[int]":
    return Req("leader.disable", _ws(workstream), lambda b: m.uint(b, "generation"))


def leader_enable(workstream: m.Name) -> "Req[None]":
    return Req("leader.enable", _ws(workstream), _nothing)


# ---- connecting ----

class HelloDropped(ConnectError):
    """The connection closed before hello was answered (tried again)."""


def hello_failed(bye: Optional[Reply], e: CoordError) -> ConnectError:
    """The error of a hello that got no answer: the broker's refusal if
    it wrote one before closing (not SHUTTING_DOWN: a restart, tried
    again, as a drop is), else the connection's end."""
    if bye is not None and not bye.ok and bye.code != "SHUTTING_DOWN":
        return Refused(bye.code, bye.body.get("message"))
    if isinstance(e, ConnectionLost):
        return HelloDropped(f"hello: {e}")
    return ConnectError(f"hello: {e}")


def hello_timeout(seconds: float) -> ConnectError:
    return ConnectError(f"the broker did not answer hello: timed out after {seconds:g} s")


class ClientBase:
    """The options and the connection's facts, shared by both clients."""

    def __init__(self, socket: Optional[str], *, scope: m.Name, client: Optional[str],
                 autostart: bool, broker: Optional[str], connect_timeout: float,
                 idle_exit: int, reconnect: bool, request_timeout: Optional[float],
                 max_queued: int, max_queued_bytes: int) -> None:
        self.request_timeout = check_request_timeout(request_timeout)
        EventQueue(max_queued, max_queued_bytes)       # ValueError early
        self.max_queued = max_queued
        self.max_queued_bytes = max_queued_bytes
        self.socket_path = socket or default_socket_path()
        self.scope = m.name(scope, "scope")
        self.client_name = client or program_name()
        self.autostart = autostart
        self.broker_path = broker
        self.connect_timeout = connect_timeout
        self.idle_exit = idle_exit
        self.reconnect = reconnect
        self._router = m.Router()
        self._conn: Any = None
        self._closed = False

    def _usable(self) -> Any:
        """The live connection; None when one is to be opened (the first,
        or after a loss with ``reconnect``); ``ConnectionLost`` when the
        client is closed, or lost its connection without ``reconnect``."""
        c = self._conn
        if c is not None and c.alive:
            return c
        if self._closed:
            raise ConnectionLost("the client is closed")
        if c is not None and not self.reconnect:
            raise ConnectionLost(f"not connected: {c.error}")
        return None

    def _lost(self, conn: Any, exc: BaseException) -> None:
        """A connection ended: if it is the client's, what it held is lost
        (subscriptions are kept to be renewed when the client reconnects)."""
        if conn is self._conn:
            self._router.connection_lost(exc, keep_subs=self.reconnect and not self._closed)

    def _hello(self, conn: Any, r: Reply) -> int:
        """hello's answer: the connection's facts; the ``max_frame`` it
        announced (0: none)."""
        if not r.ok:
            raise Refused(r.code, r.body.get("message"))
        conn.conn_id = m.uint(r.body, "conn")
        conn.epoch = m.uint(r.body, "epoch")
        conn.broker = str(r.get("broker", ""))
        # results by reference: this broker takes and gives descriptors
        # (an older one says nothing: nothing is sent by reference)
        conn.fds = r.get("fds") is True
        conn.max_ref_bytes = m.uint(r.body, "max_ref_bytes")
        return m.uint(r.body, "max_frame")

    @property
    def connected(self) -> bool:
        """True while the connection is up."""
        c = self._conn
        return c is not None and bool(c.alive)

    @property
    def conn_id(self) -> int:
        """The broker's id of this connection (0 before connecting)."""
        return int(self._conn.conn_id) if self._conn else 0

    @property
    def epoch(self) -> int:
        """The broker's epoch: it changes when the broker restarts."""
        return int(self._conn.epoch) if self._conn else 0

    @property
    def broker_version(self) -> str:
        """The broker's version, from hello."""
        return str(self._conn.broker) if self._conn else ""
