"""descfile.py - workstream descriptor files (crossTabLeader.v1) and the
fallback they name for when no broker can be reached.

The format (protocol/PROTOCOL.md, "Descriptor files"): ``key: value``
lines, ``#`` comments, blank lines, values plain or quoted (``'...'`` with
``''`` for a quote, ``"..."`` with ``\\"`` and ``\\\\``); an empty value,
``~`` or ``null`` is nil.  Any other key, a key twice, an indented line or
a bad value refuses the whole file, each error with its line (0: the whole
file).  This reader follows the broker's (protocol/desc-file.c) rule for
rule: tests/vectors/desc-files.json is run through both.

The fallback (PROTOCOL.md, "Fallback when the broker cannot be reached"):
``CONFIG_DIR/workstreams/WORKSTREAM.v1`` (``config_dir``, else
``$COORD_CONFIG_DIR``, else ``$XDG_CONFIG_HOME/coord``, else
``~/.config/coord``) says what a client does without a broker:
``READ_ONLY`` and ``SERVER_COORDINATED`` run read-only with no generation;
``SINGLE_INSTANCE`` runs alone only in the instance the user started so
(``single_instance``); ``FAIL_CLOSED``, no fallback, no file, a bad file or
a file of another origin than the client's scope: no leader, no work (the
error stands).

A leadership made by ``leadership(client, ws, single_instance=...,
config_dir=...)`` (the opt-in; ``c.leader(ws)`` alone keeps its promise
that the block never runs as a non-leader) whose campaign cannot reach the
broker asks ``on_unreachable`` from its ``with`` block (sync and asyncio
clients): the block gets a ``FallbackTerm`` instead of the leadership, or
the error is raised as before with ``.fallback`` (the decision);
``fallback_term(ws, error, ...)`` takes the same decision for a caller
whose own connect failed.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple, Union

SCHEMA = "crossTabLeader.v1"
FILE_MAX = 64 * 1024
KEYS = ("schema", "workstream", "origin", "protocol", "maxHold", "steal", "fallback",
        "canonicalFence", "mode", "disabled", "lockName", "capabilities", "ifAvailable")
FALLBACKS = {"FAIL_CLOSED": "fail-closed", "READ_ONLY": "read-only",
             "SERVER_COORDINATED": "read-only", "SINGLE_INSTANCE": "single-instance"}
CAPS_MAX = 16
CAP_LEN = 64
_CAP_RE = re.compile(r"^[A-Za-z0-9._\-:/@+]+$")
_DUR_RE = re.compile(r"^([0-9]*)(\.[0-9]*)?(.*)$", re.S)
_UNITS = {"ms": 1, "s": 1000, "m": 60000, "h": 3600000, "": 1000}


@dataclass
class Parsed:
    """A parsed file: ``values`` of the keys given (None: nil), the
    duration, capabilities ("a,b") and disabled flag, the errors as
    ``(line, message)`` (line 0: the whole file)."""
    values: Dict[str, Optional[str]] = field(default_factory=dict)
    max_hold_ms: Optional[int] = None
    capabilities: Optional[str] = None
    disabled: Optional[bool] = None
    errors: List[Tuple[int, str]] = field(default_factory=list)


@dataclass
class Fallback:
    """What to do without a broker: ``action`` is ``fail-closed``,
    ``read-only`` or ``single-instance``; ``fallback`` the file's word."""
    action: str
    fallback: Optional[str]
    path: Optional[str]
    reason: str


def _shown(s: str) -> str:
    out = "".join(c if 0x20 <= ord(c) < 0x7F else "?" for c in s[:64])
    return out + "..." if len(s) > 64 else out


def fallback_action(name: Optional[str]) -> Optional[str]:
    return FALLBACKS.get(name) if name is not None else None


def parse_duration(s: str) -> Optional[int]:
    """"30s", "500ms", "2m", "1h", "1.5s", a bare number is seconds: ms."""
    mt = _DUR_RE.match(s)
    if not mt or (mt.group(1) + (mt.group(2) or "")).replace(".", "") == "":
        return None
    if mt.group(3) not in _UNITS:
        return None
    v = float(mt.group(1) + (mt.group(2) or ""))
    r = v * _UNITS[mt.group(3)]
    if r > 1099511627776.0:
        return None
    out = int(r + 0.5)
    return 1 if out == 0 and v > 0 else out


def normalize_capabilities(s: str) -> str:
    """"a, b", "[a, b]", "a,b" -> "a,b"; ValueError saying what is wrong."""
    t = s.strip(" \t")
    if t.startswith("["):
        if not t.endswith("]") or len(t) < 2:
            raise ValueError("a list in [ ] lacks its closing ]")
        t = t[1:-1]
    if t.replace(" ", "").replace("\t", "") == "":
        return ""
    t = t.lstrip(" \t")
    pieces = t.split(",")
    if len(pieces) > 1 and pieces[-1] == "":
        pieces.pop()                # "a," as the C parser reads it
    names: List[str] = []
    for piece in pieces:
        name = piece.strip(" \t")
        if not name:
            raise ValueError("an empty capability name")
        if len(name.encode()) > CAP_LEN:
            raise ValueError("a capability name is longer than 64 bytes")
        if not _CAP_RE.match(name):
            raise ValueError("capability names are A-Z a-z 0-9 . _ - : / @ +")
        if len(names) + 1 > CAPS_MAX:
            raise ValueError("more than 16 capabilities")
        if name in names:
            raise ValueError("a capability is named twice")
        names.append(name)
    out = ",".join(names)
    if len(out.encode()) > 255:
        raise ValueError("too many capabilities")
    return out


def _value(v: str) -> Optional[str]:
    v = v.lstrip(" \t")
    if v[:1] in ("'", '"'):
        q = v[0]
        out = []
        p = 1
        while True:
            if p >= len(v):
                raise ValueError("unterminated quote")
            c = v[p]
            if q == "'" and c == "'" and v[p + 1:p + 2] == "'":
                out.append("'")
                p += 1
            elif c == q:
                break
            elif q == '"' and c == "\\":
                if v[p + 1:p + 2] not in ('"', "\\"):
                    raise ValueError('only \\" and \\\\ may be escaped')
                p += 1
                out.append(v[p])
            else:
                out.append(c)
            p += 1
        rest = v[p + 1:].lstrip(" \t")
        if rest and rest[0] != "#":
            raise ValueError("text after the closing quote")
        return "".join(out)
    end = 0
    for p, c in enumerate(v):
        if c == "#" and (p == 0 or v[p - 1] in " \t"):
            break
        end = p + 1
    s = v[:end].rstrip(" \t")
    return None if s in ("", "~", "null") else s


def parse(data: Union[bytes, str]) -> Parsed:
    """Parses a descriptor file's content (the broker's rules)."""
    raw = data.encode() if isinstance(data, str) else bytes(data)
    d = Parsed()
    if len(raw) > FILE_MAX:
        d.errors.append((0, "larger than 64 KiB"))
        return d
    if b"\0" in raw:
        d.errors.append((0, "not a text file (NUL byte)"))
        return d
    for lineno, line in enumerate(raw.decode("utf-8", "replace").split("\n"), 1):
        if line.endswith("\r"):
            line = line[:-1]
        body = line.lstrip(" \t")
        if not body or body[0] == "#":
            continue
        if body != line:
            d.errors.append((lineno, f"indented line (nested values are not part of {SCHEMA})"))
            continue
        if ":" not in line:
            d.errors.append((lineno, 'expected "key: value"'))
            continue
        key, rest = line.split(":", 1)
        key = key.rstrip(" \t")
        if key not in KEYS:
            d.errors.append((lineno, f"unknown key '{_shown(key)}'"))
            continue
        if key in d.values:
            d.errors.append((lineno, f"key '{key}' given twice"))
            continue
        d.values[key] = None
        try:
            v = _value(rest)
        except ValueError as e:
            d.errors.append((lineno, f"{key}: {e}"))
            continue
        d.values[key] = v
        err = _check(d, key, v)
        if err:
            d.errors.append((lineno, err))
    if "schema" not in d.values:
        d.errors.append((0, f"no schema (schema: {SCHEMA})"))
    return d


def _check(d: Parsed, key: str, v: Optional[str]) -> Optional[str]:
    if key == "schema" and v != SCHEMA:
        return f"schema must be {SCHEMA}, not {'empty' if v is None else _shown(v)}"
    if key == "workstream" and v is None:
        return "workstream: empty"
    if key == "maxHold" and v is not None:
        ms = parse_duration(v)
        if ms is None:
            return f"maxHold: not a duration (like 30s, 500ms, 2m): {_shown(v)}"
        d.max_hold_ms = ms
    if key == "fallback" and v is not None and fallback_action(v) is None:
        return ("fallback must be FAIL_CLOSED, READ_ONLY, SERVER_COORDINATED or "
                f"SINGLE_INSTANCE, not {_shown(v)}")
    if key == "capabilities" and v is not None:
        try:
            d.capabilities = normalize_capabilities(v)
        except ValueError as e:
            return f"capabilities: {e}"
    if key == "lockName" and v is not None and (v[:1] == "-" or len(v.encode()) > 200):
        return "lockName must be 1..200 bytes, not starting with '-' (the broker's names)"
    if key == "ifAvailable" and v is not None and v not in ("allowed", "never"):
        return f"ifAvailable must be allowed or never, not {_shown(v)}"
    if key == "disabled":
        if v in ("true", "false"):
            d.disabled = v == "true"
        else:
            return f"disabled must be true or false, not {'empty' if v is None else _shown(v)}"
    return None


def default_config_dir() -> str:
    """$COORD_CONFIG_DIR, else $XDG_CONFIG_HOME/coord, else ~/.config/coord."""
    v = os.environ.get("COORD_CONFIG_DIR")
    if v:
        return v
    v = os.environ.get("XDG_CONFIG_HOME")
    if v:
        return os.path.join(v, "coord")
    return os.path.join(os.path.expanduser("~"), ".config", "coord")


def read_fallback(workstream: Union[str, bytes], *, config_dir: Optional[str] = None,
                  scope: Union[str, bytes, None] = "") -> Fallback:
    """What to do without a broker, from workstream's descriptor file.  A
    missing or bad file is ``fail-closed`` (with the reason), never an
    exception."""
    ws = workstream.decode("utf-8", "surrogateescape") if isinstance(workstream, bytes) else workstream
    sc = scope.decode("utf-8", "surrogateescape") if isinstance(scope, bytes) else (scope or "")
    if (not isinstance(ws, str) or not ws or len(ws.encode("utf-8", "surrogateescape")) > 200
            or ws.startswith(".") or "/" in ws or "\0" in ws):
        return Fallback("fail-closed", None, None,
                        "the workstream has no descriptor file (not a file name): failing closed")
    path = os.path.join(config_dir or default_config_dir(), "workstreams", ws + ".v1")
    try:
        with open(path, "rb") as f:
            data = f.read(FILE_MAX + 1)
    except OSError as e:
        return Fallback("fail-closed", None, path,
                        f"no descriptor file {path} ({e.strerror}), so no fallback: failing closed")
    d = parse(data)
    if d.errors:
        line, msg = d.errors[0]
        where = f"{path}:{line}" if line else path
        return Fallback("fail-closed", None, path, f"{where}: {msg}: failing closed")
    v = d.values
    if "workstream" in v and v["workstream"] != ws:
        return Fallback("fail-closed", None, path,
                        f"{path}: workstream: is not the file's name: failing closed")
    if (v.get("origin") or "") != sc:
        return Fallback("fail-closed", None, path,
                        f"{path}: its origin is not this client's scope: failing closed")
    fb = v.get("fallback")
    if fb is None:
        return Fallback("fail-closed", None, path, f"{path} names no fallback: failing closed")
    action = FALLBACKS[fb]
    what = {"read-only": "read-only, with no generation",
            "single-instance": "single-instance, only where the user chose it"}.get(
                action, "failing closed")
    return Fallback(action, fb, path, f"fallback {fb} ({path}): {what}")


class FallbackTerm:
    """What a leadership block gets when the descriptor's fallback runs it
    without a broker: ``generation`` None, ``mode`` ``read-only`` or
    ``single-instance``, ``leading`` False; ``commit``, ``claim``,
    ``abandon``, ``pending``, ``read`` and ``drain`` raise (``ReadOnly`` in
    read-only mode, else ``ConnectError``: nothing reaches the ledger)."""

    def __init__(self, workstream: Any, fb: Fallback, mode: str, cause: BaseException) -> None:
        self.workstream = workstream
        self.generation = None
        self.mode = mode
        self.leading = False
        self.fallback = fb.fallback
        self.fallback_path = fb.path
        self.reason = fb.reason
        self.cause = cause

    def _refuse(self, what: str, *a: Any, **kw: Any) -> Any:
        from .errors import ConnectError, ReadOnly
        msg = (f"{what}: {self.workstream!r} runs on its fallback {self.fallback} "
               "without a broker: no generation")
        raise ReadOnly(msg) if self.mode == "read-only" else ConnectError(msg)

    def commit(self, *a: Any, **kw: Any) -> Any: return self._refuse("commit")
    def claim(self, *a: Any, **kw: Any) -> Any: return self._refuse("claim")
    def abandon(self, *a: Any, **kw: Any) -> Any: return self._refuse("abandon")
    def pending(self, *a: Any, **kw: Any) -> Any: return self._refuse("pending")
    def read(self, *a: Any, **kw: Any) -> Any: return self._refuse("read")
    def drain(self, *a: Any, **kw: Any) -> Any: return self._refuse("drain")


def fallback_term(workstream: Any, error: BaseException, *, single_instance: bool = False,
                  config_dir: Optional[str] = None, scope: Any = "") -> FallbackTerm:
    """``error`` said the broker cannot be reached: the FallbackTerm the
    descriptor file's fallback allows, or ``error`` raised again with
    ``.fallback`` (the decision, and why it failed closed)."""
    fb = read_fallback(workstream, config_dir=config_dir, scope=scope)
    if fb.action == "read-only":
        return FallbackTerm(workstream, fb, "read-only", error)
    if fb.action == "single-instance" and single_instance:
        return FallbackTerm(workstream, fb, "single-instance", error)
    if fb.action == "single-instance":
        fb.reason = (f"fallback SINGLE_INSTANCE ({fb.path}): only the instance started with "
                     "single_instance runs alone; failing closed")
    try:
        error.fallback = fb  # type: ignore[attr-defined]
    except AttributeError:
        pass
    raise error


def on_unreachable(term: Any, error: BaseException) -> FallbackTerm:
    """The hook of a leadership's ``with``: its campaign could not reach the
    broker.  Only a leadership made by ``leadership()`` (it opted in) takes
    the fallback; any other raises ``error`` as before: its block never runs
    as a non-leader."""
    if not getattr(term, "fallback", False):
        raise error
    client = getattr(term, "_client", None)
    return fallback_term(term.workstream, error,
                         single_instance=bool(getattr(term, "single_instance", False)),
                         config_dir=getattr(term, "config_dir", None),
                         scope=getattr(client, "scope", ""))


def leadership(client: Any, workstream: Any, *, single_instance: bool = False,
               config_dir: Optional[str] = None, **kw: Any) -> Any:
    """``client.leader(workstream, **kw)`` that takes the descriptor file's
    fallback when its campaign cannot reach the broker (its ``with`` block
    then gets a FallbackTerm, or the error with ``.fallback``), with the
    fallback's choices: ``single_instance`` (the user chose this instance
    to run alone under SINGLE_INSTANCE) and ``config_dir``."""
    term = client.leader(workstream, **kw)
    term.fallback = True
    term.single_instance = single_instance
    term.config_dir = config_dir
    return term
