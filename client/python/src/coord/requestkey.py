"""requestkey.py - canonical request keys (``coord.request_key``): the same
single-flight key for the same HTTP request in every coord client (C's
``coord_request_key``, ``coordctl key``, Node.js), byte for byte.

The rules are the protocol's ("Canonical request keys") with every choice
it leaves open pinned by the repository's test vectors
(tests/vectors/README.md); this file follows the C implementation
(client/request-key.c, request-url.c, request-jcs.c) decision by decision:

  - canonical string ``request-v1|<METHOD>|<URL>|body:..|ct:..|user:..|
    tenant:..|auth:<n>|accept:..|locale:..|freshness:..|api:..|h:..``, the
    key ``request-v1:`` + hex SHA-256 (hashlib) of its UTF-8 bytes;
  - absent = None = "" = the default word; field values percent-encode
    ``% | , =`` and bytes below 0x20 (upper-case hex);
  - the URL is normalized here, not by urllib.parse (which follows no
    RFC 3986 normalization): the C client validates with libcurl and then
    checks that curl read the same host, so what curl refuses is refused
    here too (control bytes, a bad port, a host curl would not take, an
    IPv6 literal that inet_ntop writes shorter, e.g. [2001:db8:0::1]);
  - JSON bodies: ``json.loads`` with hooks (duplicate member names after
    unescaping, numbers as doubles, no NaN/Infinity) plus the checks
    jansson makes and Python does not (lone surrogates, U+0000 in a member
    name, nesting deeper than 2048 values), then RFC 8785: numbers as
    ECMAScript Number.prototype.toString built from repr()'s shortest
    round-trip digits, member names sorted by UTF-16 code units.

Inputs are str (bodies bytes or str); a str with NUL or a lone surrogate
is refused (the C API cannot express it).  Errors are ``RequestKeyError``
(a ValueError) whose ``field`` names the input and whose message starts
with it, as the C client's does.
"""
from __future__ import annotations

import hashlib
import json
import math
import socket
from typing import Any, FrozenSet, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from .errors import RequestKeyError

PREFIX = "request-v1:"
FRESHNESS = ("cache-ok", "revalidate", "network-only")
REFUSED_HEADERS = ("authorization", "proxy-authorization", "cookie")
# jansson's JSON_PARSER_MAX_DEPTH: a value nested deeper is refused by the
# C client, so here too (Python's own limit is the recursion limit)
JSON_MAX_DEPTH = 2048
MAX_AUTH_GEN = (1 << 53) - 1    # exact in every language (the vectors' range)
# libcurl's CURL_MAX_INPUT_LENGTH: the C client (request-url.c, curl_url_set)
# refuses a longer URL, so every client does
MAX_URL_BYTES = 8_000_000
MAX_PORT = 65535

_HEX = "0123456789ABCDEF"
_TCHAR = frozenset(b"!#$%&'*+-.^_`|~0123456789"
                   b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
_UNRESERVED = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_SUB_DELIMS = frozenset(b"!$&'()*+,;=")
_PATH = _UNRESERVED | _SUB_DELIMS | frozenset(b":@/")
_QUERY = _PATH | frozenset(b"?")
# what curl 7.88's hostname check refuses in a reg-name (of those RFC 3986
# allows): the C client's safety net refuses them with curl
_CURL_HOST_BAD = frozenset(b"!$&'()*+,;=")
_HEXDIGITS = frozenset(b"0123456789abcdefABCDEF")

Headers = Union[Mapping[str, str], Iterable[Tuple[str, str]], None]


def _err(field: str, msg: str) -> RequestKeyError:
    return RequestKeyError(field, f"{field}: {msg}")


def _text(field: str, v: Any) -> Optional[bytes]:
    """A text input as UTF-8 bytes; None when absent (None or "")."""
    if v is None:
        return None
    if not isinstance(v, str):
        raise _err(field, f"must be a str, not {type(v).__name__}")
    if "\0" in v:
        raise _err(field, "contains NUL")
    try:
        b = v.encode("utf-8")
    except UnicodeEncodeError:
        raise _err(field, "not valid Unicode (a lone surrogate)") from None
    return b or None


def _field(b: bytes, fold: str = "") -> bytes:
    """A field value: % | , = and bytes below 0x20 percent-encoded; fold
    'u' / 'l' upper- / lower-cases ASCII."""
    out = bytearray()
    for c in b:
        if c < 0x20 or c in b"%|,=":
            out += b"%" + _HEX[c >> 4].encode() + _HEX[c & 15].encode()
            continue
        if fold == "u" and 0x61 <= c <= 0x7A:
            c -= 32
        elif fold == "l" and 0x41 <= c <= 0x5A:
            c += 32
        out.append(c)
    return bytes(out)


def _is_token(b: Optional[bytes]) -> bool:
    return bool(b) and all(c in _TCHAR for c in b)  # type: ignore[union-attr]


def _trim(b: bytes) -> bytes:
    return b.strip(b" \t")


# ---- the URL (request-url.c) ----

def _pct(c: int) -> bytes:
    return b"%" + _HEX[c >> 4].encode() + _HEX[c & 15].encode()


def _norm_pct(s: bytes, allowed: FrozenSet[int], what: str) -> bytes:
    out = bytearray()
    i, n = 0, len(s)
    while i < n:
        c = s[i]
        if c == 0x25:                                   # %
            if not (i + 2 < n and s[i + 1] in _HEXDIGITS and s[i + 2] in _HEXDIGITS):
                raise _err("url", f"a % not followed by two hex digits in the {what}")
            d = int(s[i + 1:i + 3], 16)
            out += bytes([d]) if d in _UNRESERVED else _pct(d)
            i += 3
            continue
        out += bytes([c]) if c in allowed else _pct(c)
        i += 1
    return bytes(out)


def _remove_dots(inp: bytes) -> bytes:
    """RFC 3986 section 5.2.4 (as request-url.c does it)."""
    out = bytearray()
    i, n = 0, len(inp)
    while i < n:
        p = inp[i:]
        left = n - i
        if p.startswith(b"../"):
            i += 3
        elif p.startswith(b"./"):
            i += 2
        elif p.startswith(b"/./"):
            i += 2
        elif left == 2 and p == b"/.":
            out += b"/"
            i += 2
        elif p.startswith(b"/../") or (left == 3 and p == b"/.."):
            k = out.rfind(b"/")
            del out[max(k, 0):]
            if left == 3:
                out += b"/"
            i += 3
        elif p in (b".", b".."):
            i += left
        else:
            j = p.find(b"/", 1)
            j = left if j < 0 else j
            out += p[:j]
            i += j
    return bytes(out)


def _norm_query(q: bytes) -> bytes:
    pieces = [_norm_pct(p, _QUERY, "query") for p in q.split(b"&") if p]
    if not pieces:
        return b""

    def order(p: bytes) -> Tuple[bytes, int, bytes]:
        k = p.find(b"=")
        return (p, 0, b"") if k < 0 else (p[:k], 1, p[k + 1:])
    ordered = sorted(pieces, key=order)
    return b"?" + b"&".join(ordered)


def _numeric_last_label(h: bytes) -> bool:
    if h.endswith(b"."):
        h = h[:-1]
    label = h.rsplit(b".", 1)[-1]
    if not label:
        return False
    if label.startswith(b"0x"):
        return all(c in _HEXDIGITS for c in label[2:])
    return label.isdigit()


def _dotted_quad(h: bytes) -> bool:
    parts = h.split(b".")
    return len(parts) == 4 and all(
        1 <= len(p) <= 3 and p.isdigit() and int(p) <= 255 and not (len(p) > 1 and p[0] == 0x30)
        for p in parts)


def _norm_host(raw: bytes) -> bytes:
    if not raw:
        raise _err("url", "no host")
    if raw[0] == 0x5B:                                  # [IP literal]
        low = raw.lower()
        if b"%" in low:
            raise _err("url", "IPv6 zone ids are refused")
        if not low.endswith(b"]") or not all(c in b"0123456789abcdef:.[]" for c in low):
            raise _err("url", f"bad IPv6 address {raw[:64]!r}")
        inner = low[1:-1].decode("ascii")
        try:
            packed = socket.inet_pton(socket.AF_INET6, inner)
        except (OSError, ValueError):
            raise _err("url", f"not a valid URL (bad IPv6 address {inner[:64]})") from None
        # curl hands back inet_ntop's form when it is shorter than the
        # text (else the text): the C client refuses such a host
        if len(socket.inet_ntop(socket.AF_INET6, packed)) < len(inner):
            raise _err("url", f"host [{inner[:64]}] is not in a canonical form")
        return low
    out = bytearray()
    i, n = 0, len(raw)
    while i < n:
        c = raw[i]
        if c == 0x25:
            if not (i + 2 < n and raw[i + 1] in _HEXDIGITS and raw[i + 2] in _HEXDIGITS) or \
                    int(raw[i + 1:i + 3], 16) not in _UNRESERVED:
                raise _err("url", "percent-encoded bytes in the host are refused (only "
                           "unreserved characters may be encoded)")
            c = int(raw[i + 1:i + 3], 16)
            i += 2
        elif c >= 0x80:
            raise _err("url", "the host must be ASCII (write an internationalized name in "
                       "its xn-- form)")
        elif c not in _UNRESERVED and c not in _SUB_DELIMS:
            raise _err("url", f"bad character {chr(c)!r} in the host")
        elif c in _CURL_HOST_BAD:
            raise _err("url", f"not a valid URL (character {chr(c)!r} in the host)")
        out.append(c + 32 if 0x41 <= c <= 0x5A else c)
        i += 1
    h = bytes(out)
    if _numeric_last_label(h) and not _dotted_quad(h):
        raise _err("url", f"host {h[:64].decode()}: an IPv4 address must be four decimal "
                   "parts 0-255 without leading zeros")
    return h


def _url(url: bytes) -> bytes:
    if len(url) > MAX_URL_BYTES:
        raise _err("url", f"not a valid URL (longer than {MAX_URL_BYTES} bytes)")
    i = 0
    if not url[:1].isalpha():
        raise _err("url", "must be absolute: http://host/... or https://host/...")
    while i < len(url) and (url[i:i + 1].isalnum() and url[i] < 0x80 or url[i] in b"+-."):
        i += 1
    scheme = url[:i].lower()
    if scheme not in (b"http", b"https") or url[i:i + 1] != b":":
        raise _err("url", "the scheme must be http or https")
    if url[i:i + 3] != b"://":
        raise _err("url", f"must be absolute: {scheme.decode()}://host/...")
    https = scheme == b"https"
    # what curl refuses anywhere in a URL
    if any(c < 0x20 or c == 0x7F for c in url):
        raise _err("url", "not a valid URL (a control byte)")
    rest = url[i + 3:]
    end = len(rest)
    for sep in b"/?#":
        k = rest.find(bytes([sep]))
        if 0 <= k < end:
            end = k
    auth, rest = rest[:end], rest[end:]
    if b"@" in auth:
        raise _err("url", "user information (user:password@) is refused: a credential "
                   "never goes into a key")
    if auth.startswith(b"["):
        k = auth.find(b"]")
        hn = k + 1 if k >= 0 else len(auth)
    else:
        k = auth.find(b":")
        hn = k if k >= 0 else len(auth)
    host_raw, port_raw = auth[:hn], auth[hn:]
    port: Optional[int] = None
    if port_raw:
        if port_raw[0] != 0x3A:
            raise _err("url", "not a valid URL (junk after the host)")
        digits = port_raw[1:]
        if digits:
            if not digits.isdigit() or int(digits) > MAX_PORT:
                raise _err("url", "not a valid URL (bad port)")
            port = int(digits)
    k = rest.find(b"#")
    if k >= 0:
        rest = rest[:k]
    k = rest.find(b"?")
    path, query = (rest, None) if k < 0 else (rest[:k], rest[k + 1:])
    out = bytearray(scheme + b"://")
    out += _norm_host(host_raw)
    if port is not None and port != (443 if https else 80):
        out += b":%d" % port
    p = _norm_pct(path or b"/", _PATH, "path")
    if not p.startswith(b"/"):
        p = b"/" + p
    p = _remove_dots(p)
    out += p or b"/"
    if query:
        out += _norm_query(query)
    return bytes(out)


# ---- JSON bodies (request-jcs.c) ----

def es_number(x: float) -> str:
    """ECMAScript Number.prototype.toString of a finite double, from
    repr()'s shortest round-trip digits (the closest such, as ES says)."""
    if x == 0:
        return "0"
    sign = "-" if x < 0 else ""
    r = repr(abs(x))
    mant, _, e = r.partition("e")
    ip, _, fp = mant.partition(".")
    alld = ip + fp
    lead = len(alld) - len(alld.lstrip("0"))
    d = alld.strip("0")
    k = len(d)
    n = len(ip) + (int(e) if e else 0) - lead     # x = 0.d * 10^n
    if k <= n <= 21:
        s = d + "0" * (n - k)
    elif 0 < n <= 21:
        s = d[:n] + "." + d[n:]
    elif -6 < n <= 0:
        s = "0." + "0" * -n + d
    else:
        s = d[0] + ("." + d[1:] if k > 1 else "") + "e" + ("+" if n - 1 >= 0 else "-") + \
            str(abs(n - 1))
    return sign + s


_ESC = {0x22: '\\"', 0x5C: "\\\\", 0x08: "\\b", 0x0C: "\\f", 0x0A: "\\n", 0x0D: "\\r",
        0x09: "\\t"}


def _jstr(s: str) -> str:
    out = ['"']
    for ch in s:
        c = ord(ch)
        if c in _ESC:
            out.append(_ESC[c])
        elif c < 0x20:
            out.append("\\u%04x" % c)
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _utf16_key(kv: Tuple[str, Any]) -> bytes:
    """JCS orders an object's members by their names' UTF-16 units."""
    return kv[0].encode("utf-16-be")


class _Obj(List[Tuple[str, Any]]):
    """An object's members in the order read (a list of pairs)."""


def _pairs(pairs: List[Tuple[str, Any]]) -> _Obj:
    seen = set()
    for k, _ in pairs:
        if k in seen:
            raise _err("body", f"JSON refused: duplicate member name {k[:64]!r}")
        if "\0" in k:
            raise _err("body", "JSON refused: U+0000 in a member name")
        seen.add(k)
    return _Obj(pairs)


def _number(s: str) -> float:
    x = float(s)
    if math.isinf(x):
        raise _err("body", f"JSON refused: number {s[:64]} is beyond the double range")
    return x


def _constant(s: str) -> Any:
    raise _err("body", f"JSON refused: {s} is not JSON")


def _depth(text: str) -> int:
    """The deepest value (jansson's count: the top value is 1, a member
    or element one more than its container), outside strings."""
    depth = best = 0
    in_str = esc = False
    scalar = False            # inside a scalar (number, literal) already counted
    for ch in text:
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
            continue
        if ch == '"':
            in_str = True
            best = max(best, depth + 1)
        elif ch in "[{":
            depth += 1
            best = max(best, depth)
        elif ch in "]}":
            depth -= 1
        elif ch not in " \t\r\n,:" and not scalar:
            best = max(best, depth + 1)
        scalar = ch not in " \t\r\n,:[]{}\""
    return best


def _serialize(v: Any, out: List[str]) -> None:
    # iterative would be faster to write deep; depth is bounded (2048)
    if v is None:
        out.append("null")
    elif v is True:
        out.append("true")
    elif v is False:
        out.append("false")
    elif isinstance(v, str):
        out.append(_jstr(v))
    elif isinstance(v, float):
        out.append(es_number(v))
    elif isinstance(v, _Obj):
        out.append("{")
        for i, (k, x) in enumerate(sorted(v, key=_utf16_key)):
            if i:
                out.append(",")
            out.append(_jstr(k))
            out.append(":")
            _serialize(x, out)
        out.append("}")
    elif isinstance(v, list):
        out.append("[")
        for i, x in enumerate(v):
            if i:
                out.append(",")
            _serialize(x, out)
        out.append("]")
    else:                                               # pragma: no cover
        raise _err("body", f"unexpected JSON value {type(v).__name__}")


def jcs(body: bytes) -> bytes:
    """RFC 8785 canonical form of a JSON text (bytes), as the C client
    makes it; RequestKeyError (field "body") when it has none."""
    import sys
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _err("body", f"JSON refused at byte {e.start}: invalid UTF-8") from None
    depth = _depth(text)
    if depth > JSON_MAX_DEPTH:
        raise _err("body", "JSON refused: maximum parsing depth reached")
    limit = sys.getrecursionlimit()
    need = 2 * depth + 200
    if need > limit:
        sys.setrecursionlimit(need)
    try:
        try:
            v = json.loads(text, object_pairs_hook=_pairs, parse_float=_number,
                           parse_int=_number, parse_constant=_constant)
        except json.JSONDecodeError as e:
            raise _err("body", f"JSON refused at byte {e.pos}: {e.msg}") from None
        out: List[str] = []
        _serialize(v, out)
    finally:
        if need > limit:
            sys.setrecursionlimit(limit)
    s = "".join(out)
    try:
        return s.encode("utf-8")
    except UnicodeEncodeError:
        raise _err("body", "JSON refused: a lone surrogate (\\ud800..\\udfff unpaired)") \
            from None


def _media_type(ct: bytes) -> bytes:
    return _trim(ct.split(b";", 1)[0])


def _is_json(mt: bytes) -> bool:
    low = mt.lower()
    return low == b"application/json" or (b"/" in low and low.endswith(b"+json"))


# ---- the key ----

def _headers(headers: Headers) -> bytes:
    if headers is None:
        return b""
    items: Sequence[Any] = list(headers.items()) if isinstance(headers, Mapping) \
        else list(headers)
    hs = []
    for i, h in enumerate(items):
        try:
            name, value = h
        except (TypeError, ValueError):
            raise _err("header", f"headers[{i}] must be a (name, value) pair") from None
        nb = _text("header", name)
        if nb is None or not _is_token(nb):
            raise _err("header", f"header {str(name)[:64]}: the name must be an HTTP token")
        if nb.lower().decode() in REFUSED_HEADERS:
            raise _err("header", f"header {name}: refused: a credential never goes into a "
                       "key (use the auth generation)")
        if value is None:
            raise _err("header", f"header {name}: no value")
        vb = _text("header", value) or b""
        hs.append((nb.lower(), i, _trim(vb)))
    hs.sort()
    return b",".join(_field(n, "l") + b"=" + _field(v) for n, _, v in hs)


def request_key(*, method: str, url: str, user: str, auth_gen: int,
                body: Union[bytes, bytearray, memoryview, str, None] = None,
                content_type: Optional[str] = None, headers: Headers = None,
                tenant: Optional[str] = None, accept: Optional[str] = None,
                locale: Optional[str] = None, freshness: Optional[str] = None,
                api: Optional[str] = None) -> Tuple[str, str]:
    """The canonical request key of an HTTP request: ``(key, canonical)``.

    ``key`` (``request-v1:<sha256 hex>``) goes to ``c.once``; ``canonical``
    is the string it hashes (it names the user: for debugging, not logs).
    ``body`` None is no body, ``b""`` an empty one; str is sent as UTF-8.
    ``headers``: (name, value) pairs in order, or a mapping — only the
    headers that vary the response.  ``auth_gen`` is the caller's auth
    generation (a number that changes when credentials do), never a token.
    Raises ``RequestKeyError`` (``.field``: method, url, body, header,
    user, freshness, auth_gen...) when the request has no key."""
    m = _text("method", method)
    if m is None or not _is_token(m):
        raise _err("method", "must be an HTTP token" if m else "missing")
    u = _text("url", url)
    if u is None:
        raise _err("url", "missing")
    us = _text("user", user)
    if us is None:
        raise _err("user", "missing (the key is per user; use a stable id)")
    fr = _text("freshness", freshness)
    if fr is not None and fr.decode() not in FRESHNESS:
        raise _err("freshness", f"must be cache-ok, revalidate or network-only, not "
                   f"{freshness[:64]}")  # type: ignore[index]
    if isinstance(auth_gen, bool) or not isinstance(auth_gen, int) or \
            not 0 <= auth_gen <= MAX_AUTH_GEN:
        raise _err("auth_gen", "must be an int 0 .. 2^53-1")
    if body is not None and not isinstance(body, (bytes, bytearray, memoryview, str)):
        raise _err("body", f"must be bytes or str, not {type(body).__name__}")
    ct = _text("content_type", content_type)
    mt = _media_type(ct) if ct is not None else b""

    out = bytearray(b"request-v1|")
    out += _field(m, "u")
    out += b"|" + _url(u)
    out += b"|body:"
    if body is None:
        out += b"none"
    else:
        if isinstance(body, str):
            try:
                b = body.encode("utf-8")
            except UnicodeEncodeError:
                raise _err("body", "not valid Unicode (a lone surrogate)") from None
        else:
            b = bytes(body)
        if mt and _is_json(mt) and b:
            b = jcs(b)
        out += hashlib.sha256(b).hexdigest().encode()
    out += b"|ct:" + (_field(mt, "l") if mt else b"none")
    out += b"|user:" + _field(us)
    for label, v, dflt in ((b"tenant:", tenant, b"none"), (b"auth:", None, b""),
                           (b"accept:", accept, b"*/*"), (b"locale:", locale, b"default"),
                           (b"freshness:", freshness, b"cache-ok"), (b"api:", api, b"none")):
        if label == b"auth:":
            out += b"|auth:%d" % auth_gen
            continue
        tb = _text(label[:-1].decode(), v)
        out += b"|" + label + (_field(tb) if tb is not None else dflt)
    out += b"|h:" + _headers(headers)
    canonical = bytes(out)
    return PREFIX + hashlib.sha256(canonical).hexdigest(), canonical.decode("utf-8")

