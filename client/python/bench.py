"""bench.py - lock cycles per second from Python (blocking and asyncio)
beside libcoord's, in one run.  Not a test.

    /usr/bin/python3 client/python/bench.py [--seconds S] [--no-c]

Starts its own coordd (COORD_BROKER, else build/broker/coordd) in a temp
dir, measures acquire+release of one uncontended exclusive lock on one
connection, then runs build/tools/bench/coord-bench --quick (COORD_BENCH)
and prints its output after the Python figures."""
import argparse
import asyncio
import os
import re
import select
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "src"))
import coord  # noqa: E402

ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))


def start_broker(d):
    exe = os.environ.get("COORD_BROKER") or os.path.join(ROOT, "build", "broker", "coordd")
    sock = os.path.join(d, "b.sock")
    r, w = os.pipe()
    p = subprocess.Popen([exe, "--foreground", "--socket", sock, "--data-dir", d,
                          "--ready-fd", str(w), "--log-level", "error"], pass_fds=(w,))
    os.close(w)
    select.select([r], [], [], 10)
    assert b"ready" in os.read(r, 64)
    os.close(r)
    return p, sock


def sync_cycles(sock, seconds):
    with coord.Client(sock, autostart=False) as c:
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            for _ in range(100):
                with c.lock("bench"):
                    pass
            n += 100
        return n / (time.perf_counter() - t0)


async def async_cycles(sock, seconds):
    async with coord.aio.Client(sock, autostart=False) as c:
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            for _ in range(100):
                async with c.lock("bench"):
                    pass
            n += 100
        return n / (time.perf_counter() - t0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--no-c", action="store_true")
    a = ap.parse_args()
    d = tempfile.mkdtemp(prefix="coordpy-bench-", dir="/tmp")
    p, sock = start_broker(d)
    try:
        s = sync_cycles(sock, a.seconds)
        aa = asyncio.run(async_cycles(sock, a.seconds))
    finally:
        p.terminate()
        p.wait()
        shutil.rmtree(d, ignore_errors=True)
    print(f"python {sys.version.split()[0]} blocking: {s:,.0f} lock cycles/s")
    print(f"python {sys.version.split()[0]} asyncio:  {aa:,.0f} lock cycles/s")
    if not a.no_c:
        exe = os.environ.get("COORD_BENCH") or os.path.join(ROOT, "build", "tools", "bench",
                                                            "coord-bench")
        print(f"--- {exe} --quick ---", flush=True)
        out = subprocess.run([exe, "--quick"], check=False, capture_output=True,
                             text=True).stdout
        print(out, end="")
        m = re.search(r"acquire\+release p50\s+([0-9.]+) us", out)
        if m:
            us = float(m.group(1))
            print(f"libcoord (coord-bench lock-cycle p50 {us:g} us): {1e6 / us:,.0f} "
                  f"lock cycles/s   python blocking {s:,.0f}/s, asyncio {aa:,.0f}/s")


if __name__ == "__main__":
    main()
