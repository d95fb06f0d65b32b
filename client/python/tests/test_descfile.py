"""Descriptor files and the leader fallback (coord.descfile): every vector
of tests/vectors/desc-files.json through parse and read_fallback (the C
parser runs the same vectors); a leadership block without a broker, in a
child process whose COORD_CONFIG_DIR holds the workstream's file: read-only
with no generation under SERVER_COORDINATED, fail closed without a file,
alone only with single_instance under SINGLE_INSTANCE; a client whose
broker died (sync and asyncio) takes the same fallback."""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import pytest

from conftest import PKG, child_env

import coord
from coord import descfile

VECTORS = json.load(open(os.path.join(PKG, "..", "..", "tests", "vectors", "desc-files.json"),
                         encoding="utf-8"))
NOTE = VECTORS["vectors"][0]["text"]


def config_dir(tmp_path, files):
    d = tmp_path / "cfg"
    (d / "workstreams").mkdir(parents=True, exist_ok=True)
    for ws, text in files.items():
        (d / "workstreams" / f"{ws}.v1").write_bytes(text.encode())
    return str(d)


def test_vectors_parse_as_the_c_parser():
    assert len(VECTORS["vectors"]) >= 30
    for v in VECTORS["vectors"]:
        d = descfile.parse(v["text"])
        if "error_lines" in v:
            assert [line for line, _ in d.errors] == v["error_lines"], (v["name"], d.errors)
            continue
        assert d.errors == [], v["name"]
        assert d.values == v["fields"], v["name"]
        if "max_hold_ms" in v:
            assert d.max_hold_ms == v["max_hold_ms"], v["name"]
        if "capabilities" in v:
            assert d.capabilities == v["capabilities"], v["name"]
        if "disabled" in v:
            assert d.disabled == v["disabled"], v["name"]


def test_fallback_vectors(tmp_path):
    for i, v in enumerate(VECTORS["fallback"]):
        base = tmp_path / str(i)
        files = {} if v["file"] is None else {v["workstream"]: v["file"]}
        cfg = config_dir(base, files) if files else str(base)
        fb = descfile.read_fallback(v["workstream"], config_dir=cfg, scope=v["scope"] or "")
        assert fb.action == v["action"], (v["name"], fb.reason)
        assert fb.reason


CHILD = r"""
import sys
import coord
from coord import descfile
ws, sock, single = sys.argv[1:]
c = coord.Client(sock, autostart=False, lazy=True)
try:
    with descfile.leadership(c, ws, single_instance=single == "1") as L:
        try:
            L.commit("op-1")
            commit = "ok"
        except coord.CoordError as e:
            commit = type(e).__name__
        print(f"ran mode={L.mode} fallback={L.fallback} generation={L.generation} commit={commit}")
except coord.ConnectError as e:
    print(f"closed action={e.fallback.action}")
    print(e.fallback.reason, file=sys.stderr)
    sys.exit(3)
"""


def child(cfg, ws, single=False):
    env = child_env()
    env["COORD_CONFIG_DIR"] = cfg
    return subprocess.run([sys.executable, "-c", CHILD, ws, os.path.join(cfg, "nothing.sock"),
                           "1" if single else "0"],
                          env=env, capture_output=True, text=True, timeout=30)


def test_no_broker_takes_the_files_fallback(tmp_path):
    cfg = config_dir(tmp_path, {
        "account-outbox": NOTE,
        "solo": "schema: crossTabLeader.v1\nfallback: SINGLE_INSTANCE\n",
        "closed": "schema: crossTabLeader.v1\nfallback: FAIL_CLOSED\n",
    })
    r = child(cfg, "account-outbox")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == ("ran mode=read-only fallback=SERVER_COORDINATED generation=None "
                                "commit=ReadOnly")
    r = child(cfg, "other")
    assert r.returncode == 3 and r.stdout.strip() == "closed action=fail-closed"
    assert "no descriptor file" in r.stderr
    r = child(cfg, "closed", single=True)
    assert r.returncode == 3 and r.stdout.strip() == "closed action=fail-closed"
    r = child(cfg, "solo")
    assert r.returncode == 3 and r.stdout.strip() == "closed action=single-instance"
    assert "single_instance" in r.stderr
    r = child(cfg, "solo", single=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == ("ran mode=single-instance fallback=SINGLE_INSTANCE "
                                "generation=None commit=ConnectError")


def test_client_whose_broker_died(broker, tmp_path):
    cfg = config_dir(tmp_path, {"account-outbox": NOTE})
    c = broker.client()
    with c.leader("account-outbox") as L:          # a real term first
        assert L.generation
    broker.kill()
    os.environ["COORD_CONFIG_DIR"] = cfg
    try:
        # c.leader alone: the block never runs as a non-leader, file or not
        with pytest.raises((coord.ConnectError, coord.ConnectionLost)) as ei:
            with c.leader("account-outbox"):
                pass
        assert getattr(ei.value, "fallback", None) is None
    finally:
        del os.environ["COORD_CONFIG_DIR"]
    with descfile.leadership(c, "account-outbox", config_dir=cfg) as L:
        assert isinstance(L, descfile.FallbackTerm)
        assert L.mode == "read-only" and L.generation is None
        with pytest.raises(coord.ReadOnly):
            L.claim("op")
    with pytest.raises((coord.ConnectError, coord.ConnectionLost)) as ei:
        with descfile.leadership(c, "nofile", config_dir=cfg):
            pass
    assert ei.value.fallback.action == "fail-closed"
    c.close()


def test_asyncio_client_without_broker(tmp_path):
    cfg = config_dir(tmp_path, {"account-outbox": NOTE})

    async def main():
        c = coord.aio.Client(os.path.join(cfg, "nothing.sock"), autostart=False)
        async with descfile.leadership(c, "account-outbox", config_dir=cfg) as L:
            assert L.mode == "read-only" and L.generation is None
        with pytest.raises(coord.ConnectError) as ei:
            async with descfile.leadership(c, "other", config_dir=cfg):
                pass
        assert ei.value.fallback.action == "fail-closed"
        await c.close()

    asyncio.run(main())
