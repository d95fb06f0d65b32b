#!/usr/bin/env python3
"""with-broker.py - runs one program against a private coordd and checks
its output: the runner of the examples' tests (examples/meson.build) and
of the install test.

    with-broker.py --coordd PATH [--expect REGEX]... -- PROGRAM [ARGS...]

Starts coordd in a temp dir (socket and data dir of its own, waits for its
--ready-fd line), runs PROGRAM with COORD_SOCKET set and PATH without any
other coordd to autostart, and fails unless PROGRAM exits 0 within 30 s
and every REGEX matches its stdout (re.M).  Prints the output either way."""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--coordd", required=True)
    ap.add_argument("--expect", action="append", default=[])
    ap.add_argument("argv", nargs="+")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="coord-with-broker.")
    sock = os.path.join(work, "run", "broker.sock")
    os.makedirs(os.path.dirname(sock), mode=0o700)
    r, w = os.pipe()
    broker = subprocess.Popen([a.coordd, "--foreground", "--socket", sock, "--data-dir",
                               os.path.join(work, "data"), "--ready-fd", str(w)],
                              pass_fds=[w], stdin=subprocess.DEVNULL)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        if f.read() != b"ready\n":
            sys.exit("with-broker: coordd did not start")
    env = dict(os.environ, COORD_SOCKET=sock, COORD_BROKER="/nonexistent/coordd")
    try:
        p = subprocess.run(a.argv, env=env, capture_output=True, text=True, timeout=30)
    finally:
        broker.terminate()
        broker.wait(10)
        shutil.rmtree(work, ignore_errors=True)
    sys.stdout.write(p.stdout)
    sys.stderr.write(p.stderr)
    bad = [e for e in a.expect if not re.search(e, p.stdout, re.M)]
    for e in bad:
        print(f"with-broker: no line matches {e!r}", file=sys.stderr)
    if p.returncode != 0:
        print(f"with-broker: {a.argv[0]} exited {p.returncode}", file=sys.stderr)
    sys.exit(1 if bad or p.returncode != 0 else 0)


main()
