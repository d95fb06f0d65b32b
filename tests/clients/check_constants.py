#!/usr/bin/env python3
"""check_constants.py - the Python and Node clients' copies of the
protocol's error codes and limits against the C headers that name them
(the test 'client-constants').

The clients cannot include protocol/coord-codes.h or
protocol/coord-wire-limits.h, so they copy what they need by hand; this
reads the headers and each copy and says which one differs.  A copy is
found by a pattern: a named constant where the client names one, else the
expression that uses the number (a cut to a length, a clamp).  A pattern
that finds nothing fails too: the copy moved, and this file must learn
where.  A named constant must also be used (named again after its
definition, in its file or another of the client's sources): a copy that
nothing reads checks nothing, and the number has likely been typed again
where it is needed.

    check_constants.py SRCDIR"""
import os
import re
import sys

src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
problems = []
checked = 0


def read(path):
    with open(os.path.join(src, path), encoding="utf-8") as f:
        return f.read()


def c_value(expr, names):
    """A #define's value: integer arithmetic of literals and earlier names."""
    expr = re.sub(r"/\*.*?\*/", "", expr)
    expr = re.sub(r"(\d+)(?:u|ull|ul|ll)\b", r"\1", expr, flags=re.I)
    expr = re.sub(r"\b([A-Z_][A-Z0-9_]*)\b", lambda m: str(names[m.group(1)]), expr)
    return int(eval(expr, {"__builtins__": {}}))   # the headers' own arithmetic


def c_defines(*paths):
    names = {}
    for p in paths:
        for m in re.finditer(r"^#define ([A-Z_][A-Z0-9_]*) +([^\n]+)$", read(p), re.M):
            try:
                names[m.group(1)] = c_value(m.group(2), names)
            except Exception:
                pass                   # not a number (a string, a macro of arguments)
    return names


C = c_defines("protocol/frame.h", "protocol/coord-wire-limits.h", "client/coord.h")
codes_h = read("protocol/coord-codes.h")
wire_codes = re.findall(r'X\(\s*\w+\s*,\s*-?\d+\s*,\s*"(\w+)"', codes_h)
if len(wire_codes) < 20:
    problems.append(f"protocol/coord-codes.h: only {len(wire_codes)} wire codes read")


def js_num(s):
    s = s.replace("_", "")
    return int(eval(s, {"__builtins__": {}}))


def uses(path, name):
    """How many times name appears in path's directory, in the files of
    path's kind (the client's sources)."""
    d, ext = os.path.dirname(path), os.path.splitext(path)[1]
    return sum(len(re.findall(r"\b" + name + r"\b", read(os.path.join(d, f))))
               for f in sorted(os.listdir(os.path.join(src, d))) if f.endswith(ext))


def check(path, patterns, cname, text=None):
    """The first pattern that matches in path gives the client's number."""
    global checked
    checked += 1
    body = text if text is not None else read(path)
    for pat in patterns:
        m = re.search(pat, body, re.M)
        if m:
            got = js_num(m.group(1))
            if got != C[cname]:
                problems.append(f"{path}: {m.group(0).strip()!r} is {got}, "
                                f"{cname} is {C[cname]}")
            named = re.match(r"\\b(\w+)\\s", pat)     # num(NAME)'s pattern
            if named and text is None and uses(path, named.group(1)) < 2:
                problems.append(f"{path}: {named.group(1)} is defined but never used")
            return
    problems.append(f"{path}: no copy of {cname} found (patterns: {patterns})")


def num(name):                         # NAME = 64 * 1024 (JS const or Python)
    return r"\b" + name + r"\s*=\s*([0-9_ *<()+]+?)[ \t]*;?[ \t]*(?:#.*|//.*)?$"


# ---- error codes ----
py_errors = read("client/python/src/coord/errors.py")
py_codes = re.findall(r'^@_wire\("(\w+)"\)', py_errors, re.M)
if sorted(py_codes) != sorted(wire_codes):
    problems.append("client/python/src/coord/errors.py: wire codes differ from coord-codes.h: "
                    f"missing {sorted(set(wire_codes) - set(py_codes))}, "
                    f"extra {sorted(set(py_codes) - set(wire_codes))}")
js_errors = read("client/node/src/errors.js")
m = re.search(r"WIRE_CODES\s*=\s*Object\.freeze\(\[(.*?)\]\)", js_errors, re.S)
js_codes = re.findall(r"'(\w+)'", m.group(1)) if m else []
if js_codes != wire_codes:
    problems.append("client/node/src/errors.js: WIRE_CODES is not coord-codes.h's wire codes "
                    f"in order: {js_codes} vs {wire_codes}")
m = re.search(r"CLIENT_CODES\s*=\s*Object\.freeze\(\[(.*?)\]\)", js_errors, re.S)
for code in re.findall(r"'(\w+)'", m.group(1)) if m else []:
    if code in wire_codes:
        problems.append(f"client/node/src/errors.js: client code {code} is a wire code")
for code in re.findall(r"sub\('(\w+)'", js_errors):
    if code not in wire_codes and code not in ("CLOSED", "CONNECT", "PROTOCOL"):
        problems.append(f"client/node/src/errors.js: subclass of unknown code {code}")

# ---- limits ----
flight_js = "client/node/src/flight.js"
check(flight_js, [num("MAX_KEEP_MS")], "LIMIT_KEEP_MS")
check(flight_js, [num("MAX_VERSION")], "LIMIT_FLIGHT_VERSION")
check(flight_js, [num("MAX_ERROR_CODE")], "LIMIT_ERROR_CODE")
check(flight_js, [num("MAX_ERROR_MESSAGE")], "LIMIT_ERROR_MESSAGE")
check(flight_js, [num("MAX_WAIT_MS")], "LIMIT_WAIT_MS")
check("client/node/src/errors.js", [num("MAX_WIRE_TEXT")], "LIMIT_ERROR_MESSAGE")
check("client/node/src/channel.js", [num("MAX_MESSAGE_BYTES")], "LIMIT_MESSAGE")
check("client/node/src/wire.js", [num("PROTOCOL_MAX_FRAME")], "COORD_MAX_FRAME_CAP")

handles_py = "client/python/src/coord/handles.py"
check(handles_py, [num("MAX_ERROR_CODE")], "LIMIT_ERROR_CODE")
check(handles_py, [num("MAX_ERROR_MESSAGE")], "LIMIT_ERROR_MESSAGE")
check("client/python/src/coord/messages.py", [num("MAX_VERSION")], "LIMIT_FLIGHT_VERSION")
core_py = "client/python/src/coord/core.py"
check(core_py, [num("DEFAULT_MAX_FRAME")], "COORD_MAX_FRAME_DEFAULT")
check(core_py, [num("MAX_FRAME_CAP")], "COORD_MAX_FRAME_CAP")
check(core_py, [num("MAX_QUEUED_FDS")], "LIMIT_FDS_QUEUED")
check("client/node/test/result-ref-broker.test.js", [num("LIMIT_CONN_REFS")], "LIMIT_CONN_REFS")
check("client/python/src/coord/paths.py",
      [num("MAX_CLIENT_NAME"), r"basename\(argv0\)\[:([0-9_]+)\]"], "LIMIT_CLIENT_NAME")

# libcoord's public copy of the default lease
checked += 1
if C.get("COORD_LEADER_DEFAULT_LEASE_MS") != C["LEADER_DEFAULT_LEASE_MS"]:
    problems.append(f"client/coord.h: COORD_LEADER_DEFAULT_LEASE_MS is "
                    f"{C.get('COORD_LEADER_DEFAULT_LEASE_MS')}, LEADER_DEFAULT_LEASE_MS is "
                    f"{C['LEADER_DEFAULT_LEASE_MS']}")

for p in problems:
    print("differs:", p)
print(f"client-constants: {len(wire_codes)} wire codes, {checked} limits checked; "
      f"{len(problems)} differ")
sys.exit(1 if problems else 0)
