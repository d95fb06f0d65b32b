"""Stale-while-revalidate: callers get the stored value at once while one
of them refreshes it; the others hear when the fresh one is there."""
import threading
import time

import coord

updated = threading.Event()


def refresh(flight):
    # the owner of a revalidation sees what it replaces
    old = flight.stale.result if flight.stale else b"none"
    return b"config v2 (was " + old + b")"


with coord.Client() as c, coord.Client() as other:
    c.records.purge("config")
    first = c.once("config", lambda f: b"config v1", keep=0.05, stale=60)
    print("first:", first.source)                       # owner
    time.sleep(0.1)                                     # the record ages past keep
    gate = threading.Event()
    slow = threading.Thread(target=lambda: c.once(
        "config", lambda f: gate.wait(5) and refresh(f), keep=0.05, stale=60))
    slow.start()
    while not c.flight.list():                          # the revalidation runs
        time.sleep(0.005)
    r = other.once("config", refresh, keep=0.05, stale=60,
                   notify=lambda u: (print("updated:", u.status), updated.set()))
    print("served:", bytes(r), r.source, "revalidating" if r.revalidating else "")
    gate.set()
    slow.join()
    updated.wait(5)
    print("now:", other.records.get("config").result)
    lat = other.stats().latency["flight_run"]
    print(f"flight_run: {lat.count} runs, p99 {lat.p99 * 1000:.2f} ms")
