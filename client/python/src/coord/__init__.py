"""coord - Python client of the coord per-user coordination broker.

Blocking: ``coord.Client`` / ``coord.connect``.  asyncio:
``coord.aio.Client`` / ``await coord.aio.connect()``.  Both speak protocol
v1 through the sans-I/O ``coord.core``.
"""
from . import aio
from .client import Client, Flight, Leadership, Lock, Subscription, connect
from .errors import (Aborted, Backoff, BadFrame, BadRequest, ConnectError, ConnectionLost, CoordError,
                     Disabled, Draining, Fenced, FencedError, FlightFailed, HelloRequired,
                     InvalidOptions, LeadershipLost, Limit, LockLost, NameReserved, NotFound,
                     Policy, ProtocolError, ProtocolPinned, ProtoVersion, ReadOnly, Refused,
                     RequestKeyError, RetryAfter, ShuttingDown, Storage, Unavailable,
                     Timeout, TooLarge, UnknownLock, UnknownOp)
from .handles import LeaderState, Result, State
from .messages import (DEFAULT_LEASE, OMIT, Abandon, Check, Claim, Commit, Descriptor, FlightEntry, Latency,
                       LeaderInfo, Lifecycle, LockEntry, LockState, Message, Page, PendingOp,
                       Record, RecordEntry, Stale, Stats, Term, Updated)
from .paths import default_socket_path
from .resultref import ResultRef, sealed_memfd
from .requestkey import request_key

__version__ = "0.1.0"

FOLLOWER = State.FOLLOWER
REQUESTING = State.REQUESTING
LEADER = State.LEADER
DRAINING = State.DRAINING
RELEASED = State.RELEASED
ABORTED = State.ABORTED

__all__ = [
    "Client", "connect", "Lock", "Flight", "Leadership", "Subscription", "State",
    "LeaderState", "FOLLOWER", "REQUESTING", "LEADER", "DRAINING", "RELEASED", "ABORTED",
    "CoordError", "BadFrame", "HelloRequired", "ProtoVersion", "BadRequest", "UnknownOp",
    "InvalidOptions", "NameReserved", "TooLarge", "Limit", "Aborted", "Timeout", "Fenced",
    "FencedError", "NotFound", "UnknownLock", "Disabled", "Storage", "ShuttingDown",
    "ConnectError", "Refused", "ConnectionLost", "ProtocolError", "LockLost", "LeadershipLost",
    "FlightFailed", "LockEntry", "LockState", "FlightEntry", "Record", "RecordEntry",
    "LeaderInfo", "Message", "Lifecycle", "default_socket_path",
    "request_key", "RequestKeyError", "Result", "RetryAfter", "Backoff", "Stale", "Updated",
    "Latency", "Stats", "ResultRef", "sealed_memfd",
    "ProtocolPinned", "Policy", "ReadOnly", "Draining", "Unavailable",
    "DEFAULT_LEASE", "OMIT", "Descriptor", "Term", "Claim", "Commit", "Abandon", "PendingOp", "Check", "Page",
]
