"""bench_vs_redis.py - Python's lock cycle against what a Python user would
pick instead, in one run on one machine: coord's ``with c.lock(name)``
(blocking client) and ``async with c.lock(name)`` (asyncio client), each
lock.acquire + lock.release (two round trips), against redis-py's
``Lock.acquire()/release()`` (SET NX PX with a fresh token, then its
registered compare-and-delete script: EVALSHA), blocking and
``redis.asyncio``; one connection each, one name, back to back, on Unix
sockets.  Rounds alternate (coord first in odd rounds) so that drift on a
shared machine falls on both sides; each figure is the median of the
per-round ratios, coord's cycles/s over redis-py's (>= 1: coord ahead).
Not a test.

    /usr/bin/python3 client/python/bench_vs_redis.py [--seconds S] [--rounds N]
        [--coord SOCK --redis SOCK] [--only coord|redis] [--mode sync|async|both]
        [--server-cpu N] [--warmup CYCLES]

Starts its own coordd (COORD_BROKER, else build/broker/coordd) and its own
redis-server (PATH) in a temp dir unless --coord/--redis name sockets
already listening; --server-cpu pins those it starts (tools/bench/clients.sh
runs the client under taskset for each placement).  redis-py is Debian's python3-redis.  Prints one line
per round and, last, one JSON line per mode:
  {"lang": "python-sync", "coord": cycles/s, "peer": cycles/s, "ratio": ...}
with the CPU time per cycle (us) of the client's threads and the server's
main thread.
"""
import argparse
import asyncio
import json
import os
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "src"))
import coord  # noqa: E402
import coord.aio  # noqa: E402

ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
NAME = "bench/py"


def start_broker(d):
    exe = os.environ.get("COORD_BROKER") or os.path.join(ROOT, "build", "broker", "coordd")
    sock = os.path.join(d, "coord.sock")
    r, w = os.pipe()
    p = subprocess.Popen([exe, "--foreground", "--socket", sock, "--data-dir",
                          os.path.join(d, "data"), "--ready-fd", str(w), "--log-level", "error"],
                         pass_fds=(w,))
    os.close(w)
    select.select([r], [], [], 10)
    if b"ready" not in os.read(r, 64):
        raise SystemExit("coordd did not start")
    os.close(r)
    return p, sock


def start_redis(d):
    sock = os.path.join(d, "redis.sock")
    try:
        p = subprocess.Popen(["redis-server", "--port", "0", "--unixsocket", sock,
                              "--unixsocketperm", "700", "--save", "", "--appendonly", "no",
                              "--dir", d, "--loglevel", "warning"], stdout=subprocess.DEVNULL)
    except FileNotFoundError:
        raise SystemExit("redis-server is not installed (apt-get install redis-server)")
    t0 = time.monotonic()
    while not os.path.exists(sock):
        if p.poll() is not None or time.monotonic() - t0 > 10:
            raise SystemExit("redis-server did not start")
        time.sleep(0.01)
    return p, sock


def cpu_ns(pid):
    """CPU time pid's main thread has run (ns); 0 when unknown."""
    try:
        with open(f"/proc/{pid}/schedstat") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def measure(batch, seconds, server_pid, cpu):
    """cycles/s of batch(100) over ~seconds; CPU per cycle (us) of this
    process (all threads) and of the server into cpu."""
    n = 0
    c0, s0 = time.process_time_ns(), cpu_ns(server_pid)
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        batch(100)
        n += 100
    el = time.perf_counter() - t0
    cpu["client"].append((time.process_time_ns() - c0) / n / 1000)
    if server_pid:
        cpu["server"].append((cpu_ns(server_pid) - s0) / n / 1000)
    return n / el


async def ameasure(batch, seconds, server_pid, cpu):
    n = 0
    c0, s0 = time.process_time_ns(), cpu_ns(server_pid)
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        await batch(100)
        n += 100
    el = time.perf_counter() - t0
    cpu["client"].append((time.process_time_ns() - c0) / n / 1000)
    if server_pid:
        cpu["server"].append((cpu_ns(server_pid) - s0) / n / 1000)
    return n / el


def rounds_of(a, k, run_coord, run_redis, cs, rs, ratios, label):
    c = r = float("nan")
    if k % 2 == 1 and a.only != "redis":
        c = run_coord()
    if a.only != "coord":
        r = run_redis()
    if k % 2 == 0 and a.only != "redis":
        c = run_coord()
    cs.append(c)
    rs.append(r)
    ratios.append(c / r if r == r and c == c else float("nan"))
    print(f"{label} round {k + 1}: coord {c:,.0f}/s ({1e6 / c if c == c else 0:.1f} us), "
          f"redis-py {r:,.0f}/s ({1e6 / r if r == r else 0:.1f} us), "
          f"ratio {ratios[-1]:.2f}x", flush=True)


def summary(lang, what, cs, rs, ratios, ccpu, rcpu):
    def med(v):
        v = [x for x in v if x == x]
        return round(statistics.median(v), 3) if v else None
    return {"lang": lang, "what": what, "python": sys.version.split()[0],
            "coord": med(cs), "peer": med(rs), "ratio": med(ratios),
            "min": round(min(ratios), 3), "max": round(max(ratios), 3),
            "cpu_us": {"coord_client": med(ccpu["client"]), "coord_server": med(ccpu["server"]),
                       "peer_client": med(rcpu["client"]), "peer_server": med(rcpu["server"])}}


def run_sync(a, csock, rsock, cpid, rpid):
    import redis
    with coord.Client(csock, autostart=False, client="bench") as c:
        r = redis.Redis(unix_socket_path=rsock)
        rl = r.lock(NAME, timeout=30)

        def coord_batch(n):
            for _ in range(n):
                with c.lock(NAME):
                    pass

        def redis_batch(n):
            for _ in range(n):
                if not rl.acquire():
                    raise RuntimeError("redis: not acquired")
                rl.release()
        if a.only != "redis":
            coord_batch(a.warmup)
        if a.only != "coord":
            redis_batch(a.warmup)
        cs, rs, ratios = [], [], []
        ccpu, rcpu = {"client": [], "server": []}, {"client": [], "server": []}
        for k in range(a.rounds):
            rounds_of(a, k, lambda: measure(coord_batch, a.seconds, cpid, ccpu),
                      lambda: measure(redis_batch, a.seconds, rpid, rcpu), cs, rs, ratios, "sync")
        r.close()
    return summary("python-sync", "with c.lock() vs redis-py Lock.acquire/release",
                   cs, rs, ratios, ccpu, rcpu)


async def run_async(a, csock, rsock, cpid, rpid):
    import redis.asyncio as aredis
    async with coord.aio.Client(csock, autostart=False, client="bench") as c:
        r = aredis.Redis(unix_socket_path=rsock)
        rl = r.lock(NAME, timeout=30)

        async def coord_batch(n):
            for _ in range(n):
                async with c.lock(NAME):
                    pass

        async def redis_batch(n):
            for _ in range(n):
                if not await rl.acquire():
                    raise RuntimeError("redis: not acquired")
                await rl.release()
        if a.only != "redis":
            await coord_batch(a.warmup)
        if a.only != "coord":
            await redis_batch(a.warmup)
        cs, rs, ratios = [], [], []
        ccpu, rcpu = {"client": [], "server": []}, {"client": [], "server": []}
        for k in range(a.rounds):
            c_ = r_ = float("nan")
            if k % 2 == 1 and a.only != "redis":
                c_ = await ameasure(coord_batch, a.seconds, cpid, ccpu)
            if a.only != "coord":
                r_ = await ameasure(redis_batch, a.seconds, rpid, rcpu)
            if k % 2 == 0 and a.only != "redis":
                c_ = await ameasure(coord_batch, a.seconds, cpid, ccpu)
            rounds_of(a, k, lambda: c_, lambda: r_, cs, rs, ratios, "asyncio")
        await r.close()
    return summary("python-asyncio", "async with c.lock() vs redis.asyncio Lock",
                   cs, rs, ratios, ccpu, rcpu)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=2000, help="cycles each side first")
    ap.add_argument("--coord")
    ap.add_argument("--redis")
    ap.add_argument("--only", choices=["coord", "redis"])
    ap.add_argument("--mode", choices=["sync", "async", "both"], default="both")
    ap.add_argument("--server-cpu", type=int,
                    help="pin the servers started here (all their threads) to this CPU")
    a = ap.parse_args()
    d = tempfile.mkdtemp(prefix="coord-vs-redispy-", dir="/tmp")
    procs = []
    try:
        csock, rsock, cpid, rpid = a.coord, a.redis, 0, 0
        if not csock:
            p, csock = start_broker(d)
            procs.append(p)
            cpid = p.pid
        if not rsock:
            p, rsock = start_redis(d)
            procs.append(p)
            rpid = p.pid
        if a.server_cpu is not None:
            for pid in (cpid, rpid):
                if pid:
                    subprocess.run(["taskset", "-a", "-p", "-c", str(a.server_cpu), str(pid)],
                                   check=True, stdout=subprocess.DEVNULL)
        out = []
        if a.mode in ("sync", "both"):
            out.append(run_sync(a, csock, rsock, cpid, rpid))
        if a.mode in ("async", "both"):
            out.append(asyncio.run(run_async(a, csock, rsock, cpid, rpid)))
        for o in out:
            print(json.dumps(o), flush=True)
    finally:
        for p in procs:
            p.terminate()
            p.wait()
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
