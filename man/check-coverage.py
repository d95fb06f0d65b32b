#!/usr/bin/env python3
"""check-coverage.py - the man pages name everything they must (the test
'man-coverage'): every option of `coordd --help` and the default it
prints (the broker's named defaults), every command, leader
subcommand and long flag of `coordctl --help`, every environment variable
the sources read or set, every COORD_API function of coord.h (in the
SYNOPSIS and again in the DESCRIPTION), the coord-uv.h functions and every
error code of coord-codes.h.

    check-coverage.py SRCDIR COORDD COORDCTL"""
import os
import re
import subprocess
import sys

src, coordd, coordctl = sys.argv[1:4]
missing = []


def page(name):
    with open(os.path.join(src, "man", name)) as f:
        return f.read()


def text(*parts):
    out = ""
    for p in parts:
        with open(os.path.join(src, p)) as f:
            out += f.read()
    return out


def need(pagename, body, what, pattern):
    if not re.search(pattern, body, re.M):
        missing.append(f"{pagename}: {what}")


def flag(name):                       # --max-frame -> Fl \-max\-frame
    return r"Fl \\-" + re.escape(name[2:]).replace(r"\-", "-").replace("-", r"\\-") + r"\b"


def help_of(prog):
    return subprocess.run([prog, "--help"], capture_output=True, text=True, check=True).stdout


# coordd(8)
d8 = page("coordd.8")
dh = help_of(coordd)
for opt in sorted(set(re.findall(r"--[a-z][a-z-]+", dh))):
    need("coordd.8", d8, f"option {opt}", flag(opt))
# every default --help prints (from the broker's names) is the man page's:
# an option's entry runs from its .It to the next
for m in re.finditer(r"^  (--[a-z][a-z-]+)(.*?)(?=^  -)", dh, re.M | re.S):
    opt, body = m.group(1), m.group(2)
    d = re.search(r"default ([0-9]+|/[^ )]*)", body)
    entry = re.search(r"^\.It " + flag(opt) + r".*?(?=^\.It |^\.El)", d8, re.M | re.S)
    if d and entry and not re.search(r"(?<![0-9A-Za-z])" + re.escape(d.group(1)) + r"(?![0-9])",
                                     entry.group(0)):
        missing.append(f"coordd.8: {opt}'s default {d.group(1)} (coordd --help)")
broker_src = "".join(text(os.path.relpath(os.path.join(d, f), src))
                     for d, _, fs in os.walk(os.path.join(src, "broker")) for f in fs
                     if f.endswith(".c") and f != "breaks.c") + text("protocol/paths.c")
for env in sorted(set(re.findall(r'(?:getenv|env_nonempty)\("([A-Z_]+)"\)', broker_src))):
    need("coordd.8", d8, f"environment {env}", r"\.It Ev .*\b" + env + r"\b")

# coordctl(1)
c1 = page("coordctl.1")
h = help_of(coordctl)
cmds = re.findall(r"^  ([a-z][a-z-]*)\b", h.split("Commands:")[1], re.M)
for cmd in sorted(set(cmds) | {"help"}):
    need("coordctl.1", c1, f"command {cmd}", r"Cm " + re.escape(cmd).replace("-", r"\\-") + r"\b")
leader_help = h[h.index("  leader [info]"):h.index("  leader-run")]
for sub in sorted(set(re.findall(r"\b([a-z]+) WORKSTREAM", leader_help)) - {"info"}):
    need("coordctl.1", c1, f"leader {sub}", r"Cm leader " + sub + r"\b")
for opt in sorted(set(re.findall(r"(?<!timeout )--[a-z][a-z-]+", h))):   # not timeout(1)'s
    need("coordctl.1", c1, f"flag {opt}", flag(opt))
ctl_src = "".join(text(os.path.join("tools", "coordctl", f))
                  for f in os.listdir(os.path.join(src, "tools", "coordctl"))
                  if f.endswith(".c") and (f.startswith("ctl-") or f == "coordctl.c"))
for env in sorted(set(re.findall(r'"(COORD_[A-Z_]+)"', ctl_src)) | {"COORD_SOCKET", "COORD_BROKER"}):
    need("coordctl.1", c1, f"environment {env}", r"\.It Ev .*\b" + env + r"\b")

# libcoord(3)
l3 = page("libcoord.3")
syn, desc = l3.split(".Sh DESCRIPTION")
header = re.sub(r"/\*.*?\*/", "", text("client/coord.h"), flags=re.S)
funcs = re.findall(r"COORD_API\s[^;(]*?\b(coord_\w+)\s*\(", header)
funcs += re.findall(r"static inline \w+ (coord_uv_[a-z]\w*)\(", text("client/coord-uv.h"))
for fn in sorted(set(funcs)):
    need("libcoord.3", syn, f"{fn} in the SYNOPSIS", r"^\.Fn " + fn + r"\b")
    need("libcoord.3", desc, f"{fn} in the DESCRIPTION", r"^\.Fn " + fn + r"\b")
for code in sorted(set(re.findall(r"X\((\w+), *-\d+", text("protocol/coord-codes.h")))):
    need("libcoord.3", l3, f"error COORD_E{code}", r"Er COORD_E" + code + r"\b")

for m in missing:
    print("missing:", m)
print(f"man-coverage: {len(funcs)} functions, {len(set(cmds))} commands; {len(missing)} missing")
sys.exit(1 if missing else 0)
