#!/usr/bin/python3
"""analyze.py - clang's static analyzer over coord's own C sources.

    tools/analyze.py BUILD_DIR [FILE...]

Reads BUILD_DIR/compile_commands.json (meson writes it), runs
`clang --analyze` on every translation unit under broker/, client/,
protocol/ and tools/ (or only the FILEs named), two at a time, and prints
each warning with the path the analyzer took to it.  Exit status 1 when
there is any warning or a file clang cannot compile, 2 when clang or the
database is missing.  The tree is kept analyzer-clean: a false positive is
rewritten so that the analyzer can follow it (broker/list.h's list_shift is
the common case), not silenced."""
import json
import os
import shlex
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

DIRS = ("broker/", "client/", "protocol/", "tools/")
DROP_WITH_VALUE = {"-o", "-MQ", "-MF", "-MT"}
DROP = {"-c", "-MD", "-MMD", "-pipe"}


def analyzer_args(command):
    args = shlex.split(command)[1:]
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if a in DROP_WITH_VALUE:
            skip = True
            continue
        if a in DROP or a.startswith("-fsanitize") or a.startswith("-Werror"):
            continue
        out.append(a)
    return out


def main():
    if len(sys.argv) < 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    build = sys.argv[1]
    only = [os.path.realpath(f) for f in sys.argv[2:]]
    clang = shutil.which("clang")
    db = os.path.join(build, "compile_commands.json")
    if not clang or not os.path.exists(db):
        print(f"analyze.py: needs clang and {db}", file=sys.stderr)
        return 2
    units, seen = [], set()
    for e in json.load(open(db)):
        path = os.path.realpath(os.path.join(e["directory"], e["file"]))
        rel = os.path.relpath(path, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        if path in seen or not rel.startswith(DIRS) or "/fuzz/" in rel:
            continue
        if only and path not in only:
            continue
        seen.add(path)
        units.append((rel, e["directory"], analyzer_args(e["command"])))

    def run(unit):
        rel, cwd, args = unit
        r = subprocess.run([clang, "--analyze", "-Xanalyzer", "-analyzer-output=text",
                            *args, "-fno-color-diagnostics"],
                           cwd=cwd, capture_output=True, text=True)
        return rel, r.returncode, r.stderr

    warnings = failed = 0
    with ThreadPoolExecutor(max_workers=2) as pool:
        for rel, rc, err in pool.map(run, units):
            n = sum(1 for line in err.splitlines() if ": warning: " in line)
            if n or rc:
                warnings += n
                failed += rc != 0
                print(err, end="")
            if rc:
                # a file clang could not compile was not analyzed either
                print(f"analyze.py: {rel}: clang exited {rc}")
    print(f"analyze.py: {len(units)} files, {warnings} warnings"
          + (f", {failed} not analyzed" if failed else ""))
    return 1 if warnings or failed else 0


if __name__ == "__main__":
    sys.exit(main())
