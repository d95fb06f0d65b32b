"""test_autostart.py - a broker started by the client that cannot start
says why, and both clients (blocking and asyncio) report it at once
rather than timing out: a data dir already served by a broker on another
socket (named, with its pid), a data dir that cannot be created, a HOME
that is no directory."""
from __future__ import annotations

import asyncio
import os
import tempfile
import time

import pytest

import coord
from conftest import COORDD


def _blocking(sock: str) -> coord.ConnectError:
    with pytest.raises(coord.ConnectError) as ei:
        coord.Client(sock, broker=COORDD, connect_timeout=20.0).close()
    return ei.value


def _aio(sock: str) -> coord.ConnectError:
    async def go() -> None:
        c = await coord.aio.connect(sock, broker=COORDD, connect_timeout=20.0)
        await c.close()
    with pytest.raises(coord.ConnectError) as ei:
        asyncio.run(go())
    return ei.value


def _fails_fast(fn, sock: str) -> str:
    t0 = time.monotonic()
    err = fn(sock)
    took = time.monotonic() - t0
    assert took < 5.0, f"took {took:.1f} s: {err}"
    return str(err)


@pytest.mark.parametrize("fn", [_blocking, _aio], ids=["blocking", "aio"])
def test_served_data_dir_names_its_broker(broker, monkeypatch, fn):
    with broker.client() as c:
        pid = c.stats()["pid"]
    sock = os.path.join(tempfile.mkdtemp(prefix="coordpy-", dir="/tmp"), "other.sock")
    monkeypatch.setenv("COORD_DATA_DIR", broker.data_dir)
    msg = _fails_fast(fn, sock)
    assert (f"the broker for {sock} did not start: data dir {broker.data_dir} is in use "
            f"by the broker pid {pid} listening on {broker.socket} "
            f"(set COORD_SOCKET={broker.socket} to use it)") in msg
    assert not os.path.exists(sock)
    with broker.client() as c:                      # the first one still serves
        assert c.stats()["pid"] == pid


@pytest.mark.parametrize("fn", [_blocking, _aio], ids=["blocking", "aio"])
def test_start_error_is_the_brokers_reason(tmp_path, monkeypatch, fn):
    f = tmp_path / "a-file"
    f.write_text("")
    sock = os.path.join(tempfile.mkdtemp(prefix="coordpy-", dir="/tmp"), "s.sock")
    monkeypatch.setenv("COORD_DATA_DIR", str(f / "data"))
    msg = _fails_fast(fn, sock)
    assert f"did not start: cannot create {f}/data: Not a directory" in msg
    # the default data dir below a HOME that is a file
    monkeypatch.delenv("COORD_DATA_DIR")
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(f))
    msg = _fails_fast(fn, sock)
    assert f"did not start: cannot create {f}/.local/state/coord: Not a directory" in msg
