"""Results by reference through a real coordd: an owner completes with a
sealed memfd (complete_fd, and complete past max_frame by itself), its
followers (blocking and asyncio, waiting while it runs) each get their
own descriptor of the bytes; a kept record by reference is read as a
ResultRef, listed ``by_ref``, and is still there after a kill -9 restart
of the broker; what the broker refuses (not a sealed memfd, past
max_ref_bytes) raises the client's own exceptions.
"""
import asyncio
import os
import subprocess
import threading

import pytest

import coord
from conftest import Broker, wait_until

BIG = os.urandom(3 << 20)                  # over the default max_frame (1 MiB)


def followers(broker, key, n_sync=2, n_async=2):
    """Followers of key (threads: blocking clients, and asyncio ones); wait
    until the broker counts them all; returns (threads, results)."""
    results = []
    mu = threading.Lock()

    def sync():
        with broker.client() as c:
            f = c.flight.join(key, wait=20)
            with f.result_ref as ref:
                got = ("sync", f.role, ref.size, ref.value(), f.source)
            with mu:
                results.append(got)

    def aio():
        async def main():
            async with broker.aclient() as c:
                f = await c.flight.join(key, wait=20)
                mm = f.result_ref.mmap()
                try:
                    got = ("aio", f.role, f.result_ref.size, bytes(mm), f.source)
                finally:
                    mm.close()
                    f.result_ref.close()
                with mu:
                    results.append(got)
        asyncio.run(main())

    ts = [threading.Thread(target=sync) for _ in range(n_sync)] + \
         [threading.Thread(target=aio) for _ in range(n_async)]
    for t in ts:
        t.start()
    return ts, results


def test_followers_get_the_owners_memfd(broker):
    with broker.client() as owner:
        assert owner._conn.fds and owner._conn.max_ref_bytes >= 1 << 30
        f = owner.flight.join("big", ttl=30)
        assert f.role == "owner"
        ts, results = followers(broker, "big")
        wait_until(lambda: [e for e in owner.flight.list() if e.followers == 4],
                   what="4 followers")
        fd = coord.sealed_memfd(BIG)
        try:
            assert f.complete_fd(fd, keep=60) == 4
        finally:
            os.close(fd)
        for t in ts:
            t.join(20)
        assert sorted(r[0] for r in results) == ["aio", "aio", "sync", "sync"]
        for who, role, size, data, source in results:
            assert (role, size, source) == ("result", len(BIG), "live"), who
            assert data == BIG, who


def test_complete_sends_a_large_result_by_reference_and_the_record_survives_a_restart(
        tmp_path):
    b = Broker(str(tmp_path))
    try:
        with b.client() as c:
            r = c.once("report", lambda f: BIG, keep=600)       # > max_frame: by reference
            assert r == BIG and r.source == "owner"
            (e,) = c.records.list("report")
            assert e.by_ref and e.size == len(BIG)
            rec = c.records.get("report")
            assert rec.by_ref and rec.result_ref.size == len(BIG)
            with rec.result_ref as ref:
                assert ref.value() == BIG
        names = os.listdir(os.path.join(str(tmp_path), "results"))
        assert len(names) == 1, names
        b.kill()
        b.start()
        with b.client() as c:
            again = c.once("report", lambda f: pytest.fail("ran again"), keep=600)
            assert again == BIG and again.source == "record"
            with c.records.get("report").result_ref as ref:
                assert ref.read() == BIG

            async def aread():
                async with b.aclient() as ac:
                    rec = await ac.records.get("report")
                    with rec.result_ref as ref:
                        return ref.value()
            assert asyncio.run(aread()) == BIG
            assert c.records.purge("report") == 1
            assert c.records.get("report") is None
        assert os.listdir(os.path.join(str(tmp_path), "results")) == []
    finally:
        b.stop()


def test_what_the_broker_refuses_raises_the_clients_exceptions(tmp_path):
    b = Broker(str(tmp_path), ["--max-ref-bytes", "1000"])
    try:
        with b.client() as c:
            assert c._conn.max_ref_bytes == 1000
            # a memfd without the seals
            fd = os.memfd_create("unsealed", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
            os.write(fd, b"abc")
            with pytest.raises(coord.InvalidOptions, match="F_SEAL_WRITE"):
                c.flight.join("a").complete_fd(fd)
            os.close(fd)
            # a plain file is not a memfd
            with open(os.path.join(str(tmp_path), "plain"), "wb+") as fh:
                fh.write(b"abc")
                fh.flush()
                with pytest.raises(coord.InvalidOptions, match="memfd"):
                    c.flight.join("b").complete_fd(fh)
            # past max_ref_bytes: refused before anything is sent
            with pytest.raises(coord.TooLarge, match="max_ref_bytes"):
                c.flight.join("c").complete(b"x" * 2000, by_ref=True)
            # the broker's own word on it (the client's check stepped around)
            f = c.flight.join("d")
            c._conn.max_ref_bytes = 0
            with pytest.raises(coord.TooLarge):
                f.complete(b"x" * 2000, by_ref=True)
            # the connection is still fine; an inline completion works
            c.flight.join("e").complete(b"inline")
            assert c.flight.join("e", max_age=60).role == "owner"   # no record: keep 0
    finally:
        b.stop()


def test_a_stale_record_by_reference_goes_to_its_revalidating_owner(broker):
    with broker.client() as c:
        c.once("s", lambda f: BIG, keep=60)
        # max_age 0: the record is stale at once, within the stale window
        f = c.flight.join("s", stale=600)
        assert f.role == "owner"
        st = f.stale
        assert st is not None and st.by_ref and st.result_ref.size == len(BIG)
        assert st.result == BIG
        st.result_ref.close()
        with broker.client() as c2:          # a caller while it revalidates: served stale
            g = c2.flight.join("s", stale=600)
            assert g.role == "result" and g.revalidating and g.stale.by_ref
            assert g.result == BIG
            g.result_ref.close()
        f.complete(b"fresh", keep=60)
        assert c.records.get("s").result == b"fresh"


def test_a_coordctl_owner_whose_output_is_larger_than_a_frame(broker):
    n = 3_000_000
    owner = broker.ctl_popen("once", "ctl-big", "--", "sh", "-c",
                             f"read go; head -c {n} /dev/zero | tr '\\0' a",
                             stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    try:
        with broker.client() as c:
            wait_until(lambda: [e for e in c.flight.list() if e.key == "ctl-big"],
                       what="coordctl's flight")
            got = {}
            t = threading.Thread(target=lambda: got.update(
                r=c.flight.join("ctl-big", wait=20)))
            t.start()
            wait_until(lambda: [e for e in c.flight.list() if e.followers == 1],
                       what="the follower")
            owner.stdin.write(b"go\n")
            owner.stdin.close()
            t.join(20)
            f = got["r"]
            assert f.role == "result" and f.result_ref is not None   # a descriptor
            with f.result_ref as ref:
                mm = ref.mmap()
                # coordctl once's result: format 1, the exit status, stdout
                assert ref.size == 2 + n and mm[:2] == b"\x01\x00"
                assert mm[2:] == b"a" * n
                mm.close()
        assert owner.wait(20) == 0
    finally:
        owner.kill()
