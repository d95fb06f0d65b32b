"""Leadership, channels and lifecycle events, blocking and asyncio; autostart
and reconnect."""
import asyncio
import os
import shutil
import signal
import threading

import pytest

import coord
from conftest import wait_until


def test_leader_commit_read_resign(broker):
    with broker.client(client="lead") as c, broker.client() as d:
        with c.leader("ws", lease=0.3) as lead:
            assert lead.state == coord.LEADER and lead.generation > 0
            assert lead.commit("op-1", "k", b"v1").applied is True
            dup = lead.commit("op-1", "k", b"v2")                   # at most once
            assert not dup and dup.duplicate and dup.generation == lead.generation
            assert lead.read("k") == b"v1"
            assert d.leader.read("ws", "k") == (b"v1", lead.generation)
            info = d.leader.info("ws")
            assert info.state == "leading" and info.client == "lead"
            assert not lead.lost.wait(0.8)                           # renewed
            assert d.try_leader("ws") is None
            with pytest.raises(coord.Timeout):
                with d.leader("ws", timeout=0.1):
                    pytest.fail("ran as a non-leader")
        assert lead.state == coord.RELEASED
        assert d.leader.info("ws").state == "idle"


def test_leader_stolen_is_fenced(broker):
    with broker.client() as c, broker.client() as d:
        with pytest.raises(coord.LeadershipLost):
            with c.leader("ws") as lead:
                # a raw steal campaign from another connection
                r = d.call("leader.campaign", workstream="ws", steal=True)
                assert r["granted"] and r["generation"] > lead.generation
                assert lead.lost.wait(5) and lead.lost_reason == "stolen"
                assert lead.state == coord.RELEASED
                with pytest.raises(coord.FencedError):
                    lead.commit("op", "k", b"v")


def test_disable_enable(broker):
    with broker.client() as c, broker.client() as d:
        lead = c.leader("ws")
        lead.campaign()
        g = d.leader.disable("ws")
        assert g > lead.generation and lead.lost.wait(5) and lead.lost_reason == "disabled"
        with pytest.raises(coord.Disabled):
            with d.leader("ws"):
                pytest.fail("ran while disabled")
        assert d.leader.info("ws").disabled
        d.leader.enable("ws")
        with d.leader("ws") as l2:
            assert l2.generation > g


def test_channels_and_watch(broker):
    with broker.client() as c, broker.client() as d:
        with d.subscribe("news", b"\xffraw", timeout=0.2) as sub, d.watch() as w:
            assert c.publish("news", "hello") == 1
            assert c.publish(b"\xffraw", b"\x00") == 1
            got = list(sub)
            assert [(x.channel, x.data) for x in got] == [("news", b"hello"),
                                                          (b"\xffraw", b"\x00")]
            assert got[0].conn == c.conn_id
            with c.lock("L"):
                pass
            evs = []
            while len(evs) < 2:
                e = w.get(5)
                assert e is not None
                if e.channel == "-locks" and e.get("name") == "L":
                    evs.append(e.what)
            assert evs == ["granted", "released"]
        assert c.publish("news", "x") == 0
        with pytest.raises(coord.NameReserved):
            c.publish("-locks", "x")


def test_reconnect_and_autostart(tmp_path, monkeypatch):
    from conftest import COORDD
    import tempfile
    sock_dir = tempfile.mkdtemp(prefix="coordpy-", dir="/tmp")
    sock = os.path.join(sock_dir, "sub", "b.sock")
    monkeypatch.setenv("COORD_DATA_DIR", str(tmp_path / "data"))
    c = coord.Client(sock, broker=COORDD, idle_exit=5, reconnect=True)   # autostarts
    try:
        pid = c.stats()["pid"]
        assert oct(os.stat(os.path.dirname(sock)).st_mode & 0o777) == "0o700"
        sub = c.subscribe("ch").open()
        lk = c.lock("a")
        lk.acquire()
        os.kill(pid, signal.SIGKILL)
        assert lk.lost.wait(5) and lk.lost_reason == "disconnected"
        wait_until(lambda: not c.connected, what="disconnect")
        pid2 = c.stats()["pid"]                  # reconnects, autostarting again
        assert pid2 != pid
        with coord.Client(sock, autostart=False) as d:
            assert d.publish("ch", "after") == 1   # the subscription was renewed
        assert sub.get(5).data == b"after"
        sub.close()
        with pytest.raises(coord.ConnectError):
            coord.Client(sock + ".none", autostart=False)
    finally:
        try:
            os.kill(c.stats()["pid"], signal.SIGTERM)
        except coord.CoordError:
            pass
        c.close()
        shutil.rmtree(sock_dir, ignore_errors=True)


def test_async_leader_and_channels(broker):
    async def main():
        async with broker.aclient() as c, broker.aclient() as d:
            async with c.leader("ws", lease=0.3) as lead:
                assert (await lead.commit("o", "k", "v")).applied is True
                assert not await lead.commit("o", "k", "v")
                assert await lead.read("k") == b"v"
                await asyncio.sleep(0.5)
                lead.check()
                assert await d.try_leader("ws") is None
                info = await d.leader.info("ws")
                assert info.live_generation == lead.generation
            with pytest.raises(coord.LeadershipLost):
                async with c.leader("ws") as lead:
                    await d.call("leader.campaign", workstream="ws", steal=True)
                    await asyncio.wait_for(lead.lost.wait(), 5)
                    with pytest.raises(coord.Fenced):
                        await lead.commit("o2", "k", "v")
            await d.call("leader.resign", workstream="ws",
                         generation=(await d.leader.info("ws")).live_generation)
            g = await d.leader.disable("ws")
            with pytest.raises(coord.Disabled):
                async with c.leader("ws"):
                    pytest.fail("ran while disabled")
            await d.leader.enable("ws")
            # cancel a waiting campaign
            async with c.leader("ws2"):
                t = asyncio.create_task(d.leader("ws2").campaign())
                await asyncio.sleep(0)
                while len((await c.locks()).pending) != 1:
                    await asyncio.sleep(0.005)
                t.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await t
                assert (await c.locks()).pending == []
            async with d.subscribe("ch", timeout=0.2) as sub, d.watch("-leaders") as w:
                assert await c.publish("ch", b"1") == 1
                assert [x.data async for x in sub] == [b"1"]
                async with c.leader("ws3"):
                    pass
                e = await w.get(5)
                assert e.what == "elected" and e["workstream"] == "ws3"
            assert g > 0
    asyncio.run(main())


def test_async_autostart_off_and_connection_error(broker):
    async def main():
        with pytest.raises(coord.ConnectError):
            await coord.aio.connect(broker.socket + ".none", autostart=False)
        c = await coord.aio.connect(broker.socket, autostart=False, scope="s1")
        d = await coord.aio.connect(broker.socket, autostart=False, scope="s2")
        async with c.lock("same"), d.lock("same"):      # scopes never meet
            assert len((await c.locks()).held) == 1
        await c.close()
        await d.close()
    asyncio.run(main())


def test_async_reconnect_and_autostart(tmp_path, monkeypatch):
    from conftest import COORDD
    import tempfile
    sock_dir = tempfile.mkdtemp(prefix="coordpy-", dir="/tmp")
    sock = os.path.join(sock_dir, "b.sock")
    monkeypatch.setenv("COORD_DATA_DIR", str(tmp_path / "data"))

    async def main():
        c = await coord.aio.connect(sock, broker=COORDD, idle_exit=5, reconnect=True)
        try:
            pid = (await c.stats())["pid"]
            sub = await c.subscribe("ch").open()
            lk = await c.try_lock("a", lease=5)
            os.kill(pid, signal.SIGKILL)
            await asyncio.wait_for(lk.lost.wait(), 5)
            assert lk.lost_reason == "disconnected"
            while c.connected:
                await asyncio.sleep(0.005)
            assert (await c.stats())["pid"] != pid          # autostarted again
            async with coord.aio.Client(sock, autostart=False) as d:
                assert await d.publish("ch", "after") == 1
            assert (await sub.get(5)).data == b"after"
            await sub.close()
        finally:
            try:
                os.kill((await c.stats())["pid"], signal.SIGTERM)
            except coord.CoordError:
                pass
            await c.close()
    try:
        asyncio.run(main())
    finally:
        shutil.rmtree(sock_dir, ignore_errors=True)
