#!/usr/bin/env python3
"""links.py - the names of libcoord(3)'s link pages: one per COORD_API
function (and coord-uv.h helper) of the headers given, so that `man coord_once` opens libcoord(3).
Prints one name a line; man/meson.build installs NAME.3 -> libcoord.3 for
each, and the install test checks every function has its link.

    links.py HEADER..."""
import re
import sys

names = []
for path in sys.argv[1:]:
    with open(path) as f:
        text = f.read()
    # a declaration may wrap: COORD_API int\ncoord_x(...)
    for m in re.finditer(r"^COORD_API\b[^;{(]*?\b(coord_[a-z0-9_]+)\s*\(", text, re.M | re.S):
        names.append(m.group(1))
    # coord-uv.h's helpers are static inline; coord_uv__x are its internals
    for m in re.finditer(r"^static inline\b[^;{(]*?\b(coord_uv_[a-z0-9]+(?:_[a-z0-9]+)*)\s*\(", text, re.M):
        names.append(m.group(1))
for n in sorted(set(names)):
    print(n)
