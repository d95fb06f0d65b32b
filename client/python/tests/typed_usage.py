"""typed_usage.py - the public API as a typed program uses it, checked by
mypy --strict in test_api.py (never run, never collected by pytest: it
only has to type-check).  A change that breaks a public signature, or
leaves a return type Any where it was precise, fails there."""
from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from typing import List, Optional, Tuple, Union

import coord
import coord.aio


def blocking(c: coord.Client) -> None:
    with c.lock("build", timeout=5.0, lease=30.0) as lk:
        token: Optional[int] = lk.token
        lost: threading.Event = lk.lost
        lk.check()
        lk.renew(10.0)
        held: bool = lk.held
    maybe: Optional[coord.Lock] = c.try_lock("build", "shared")
    locks: coord.LockState = c.locks()

    def fetch(f: coord.Flight) -> bytes:
        f.check()
        aborted: threading.Event = f.aborted
        return b"token"
    r: coord.Result = c.once("oauth", fetch, keep=60.0, stale=600.0, notify=True,
                             fallback="run")
    source: str = r.source
    as_bytes: bytes = r
    fresh: bool = not r.stale and not r.local
    r = c.once("feed", fetch, wait=0.5, fallback="retry", supersede=True, priority=2,
               version="bundle-7", other_version="own")
    cause: Optional[str] = r.fallback_cause
    retried: bool = r.retried
    took_from: int = r.superseded
    upd: Optional[concurrent.futures.Future[coord.Updated]]
    f = c.flight.join("k", ttl=5.0)
    if f.role == "owner":
        delivered: int = c.flight.complete(f, b"x", keep=10.0)
        upd = f.updated
    # results by reference
    f = c.flight.join("big")
    if f.role == "owner":
        fd: int = coord.sealed_memfd(b"x" * 10)
        delivered = f.complete_fd(fd, keep=10.0) + f.complete(b"y", by_ref=True)
    elif f.result_ref is not None:
        with f.result_ref as ref:
            size: int = ref.size
            view: bytes = ref.mmap()[:size]
            first: bytes = ref.read(4)
            whole: bytes = ref.value()
    got_bytes: Optional[bytes] = f.result
    f = c.flight.join("k", supersede=True, priority=1, version=b"v2", other_version="follow")
    superseded: int = f.superseded
    version: Union[str, bytes] = f.version
    flights: List[coord.FlightEntry] = c.flight.list()
    c.flight.disable("api/")
    c.flight.enable("api/")
    prefixes: List[Union[str, bytes]] = c.flight.disabled()
    rec: Optional[coord.Record] = c.records.get("oauth")
    if rec is not None:
        writer: Tuple[Union[str, bytes], int, Union[str, bytes]] = (rec.client, rec.pid,
                                                                    rec.version)
    recs: List[coord.RecordEntry] = c.records.list("", 10)
    rec_versions: List[Union[str, bytes]] = [e.version for e in recs]
    flight_versions: List[Union[str, bytes]] = [e.version for e in flights]
    purged: int = c.records.purge("oauth")

    with c.leader("reindex", lease=1.5, protocol="reindex@2") as lead:
        gen: Optional[int] = lead.generation
        state: coord.LeaderState = lead.state
        cm: coord.Commit = lead.commit("op-1", "cursor", b"1000")
        cl: coord.Claim = lead.claim("op-2")
        ab: coord.Abandon = lead.abandon("op-2", "not needed")
        pend: coord.Page = lead.pending()
        val: Optional[bytes] = lead.read("cursor")
        lead.drain()
    other: Optional[coord.Leadership] = c.try_leader("reindex", capabilities=["outbox"])
    desc: coord.Descriptor = c.leader.define("reindex", max_hold=60.0, mode="active",
                                             lock_name="app:leader:reindex",
                                             capabilities=["outbox", "claims"],
                                             if_available="never")
    lock_name: Optional[Union[str, bytes]] = desc.lock_name
    caps: List[str] = desc.capabilities
    policy: str = desc.if_available
    with c.leader("reindex", capabilities=("outbox", "claims")) as lead:
        pass
    info: coord.LeaderInfo = c.leader.info("reindex")
    hist: coord.Page = c.leader.history("reindex", limit=5)
    chk: coord.Check = c.leader.check("reindex", 1)
    got: Optional[Tuple[bytes, int]] = c.leader.read("reindex", "cursor")
    fenced: int = c.leader.disable("reindex")
    c.leader.enable("reindex")

    n: int = c.publish("news", b"hi")
    with c.subscribe("news", timeout=1.0) as sub:
        for item in sub:
            pass
        dropped: int = sub.dropped
    stats: coord.Stats = c.stats()
    lat: coord.Latency = stats.latency["lock_wait"]
    rtt: float = c.ping()
    key, canonical = coord.request_key(method="GET", url="https://example.com/", user="alice",
                                       auth_gen=7)
    k: str = key
    c.close()


async def asyncio_client() -> None:
    async with coord.aio.Client(scope="s", request_timeout=5.0) as c:
        async with c.lock("build", lease=30.0) as lk:
            lost: asyncio.Event = lk.lost
            token: Optional[int] = lk.token
        maybe: Optional[coord.aio.Lock] = await c.try_lock("build")

        async def fetch(f: coord.aio.Flight) -> bytes:
            aborted: asyncio.Event = f.aborted
            return b"token"
        r: coord.Result = await c.once("oauth", fetch, keep=60.0)
        r = await c.once("feed", fetch, wait=0.5, fallback="retry", supersede=True, priority=2,
                         version="bundle-7", other_version="own")
        cause: Optional[str] = r.fallback_cause
        retried: bool = r.retried and r.superseded > 0
        f = await c.flight.join("k", supersede=True, priority=1, version="v2",
                                other_version="follow")
        superseded: int = f.superseded
        version: Union[str, bytes] = f.version
        upd: Optional[asyncio.Future[coord.Updated]] = f.updated
        if f.role == "owner":
            delivered: int = await f.complete(b"x", by_ref=None)
            delivered += await f.complete_fd(coord.sealed_memfd(b"z"))
        rec: Optional[coord.Record] = await c.records.get("oauth")
        if rec is not None and rec.result_ref is not None:
            fdr: int = rec.result_ref.detach()
        stored: Optional[bytes] = rec.result if rec is not None else None
        desc: coord.Descriptor = await c.leader.define("reindex", lock_name=None,
                                                       capabilities=["outbox"],
                                                       if_available="allowed")
        caps: List[str] = desc.capabilities
        other: Optional[coord.aio.Leadership] = await c.try_leader("reindex",
                                                                   capabilities=["outbox"])
        async with c.leader("reindex", capabilities=["outbox"]) as lead:
            drain: asyncio.Event = lead.drain_requested
            cm: coord.Commit = await lead.commit("op-1")
        info: coord.LeaderInfo = await c.leader.info("reindex")
        got: Optional[Tuple[bytes, int]] = await c.leader.read("reindex", "cursor")
        n: int = await c.publish("news", "hi")
        async with c.watch() as events:
            async for ev in events:
                break
        stats: coord.Stats = await c.stats()
    d: coord.aio.Client = await coord.aio.connect(autostart=False)
    await d.close()
