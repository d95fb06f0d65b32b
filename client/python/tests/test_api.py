"""test_api.py - the public API as such, without a broker: mypy --strict
(Debian's, /usr/bin/python3 -m mypy) passes on the package and on
typed_usage.py and fails on a type error; every public name of coord and
coord.aio has a docstring; pyproject.toml agrees with the README and
ships the py.typed marker."""
from __future__ import annotations

import inspect
import os
import re
import subprocess
import sys
import tomllib
from typing import Any, Iterator, List, Tuple

import coord
import coord.aio
import coord.client

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.dirname(HERE)


def _mypy(*files: str) -> subprocess.CompletedProcess[str]:
    # Debian's interpreter (the one with the mypy package), whatever runs
    # pytest; no cache written into the tree
    return subprocess.run(["/usr/bin/python3", "-m", "mypy", "--cache-dir", os.devnull,
                           "--config-file", "pyproject.toml", *files],
                          cwd=PKG, capture_output=True, text=True, timeout=300)


def test_mypy_strict_on_the_package_and_a_typed_user():
    r = _mypy("src/coord", "tests/typed_usage.py")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Success" in r.stdout


def test_mypy_catches_a_misuse(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import coord\n"
                   "def f(c: coord.Client) -> str:\n"
                   "    return c.ping()\n"                 # a float
                   "async def g(c: coord.aio.Client) -> int:\n"
                   "    return c.publish('ch', b'x')\n")   # not awaited
    r = _mypy(str(bad))
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stdout.count("error:") == 2, r.stdout


# ---- docstrings ----

def _members(cls: type) -> Iterator[Tuple[str, Any]]:
    """Public methods and properties of cls, its coord bases included."""
    for k in sorted(dir(cls)):
        if k.startswith("_") and k != "__call__":
            continue
        for base in cls.__mro__:
            if k in base.__dict__:
                if base.__module__.startswith("coord"):
                    yield k, base.__dict__[k]
                break


def _doc(obj: Any) -> str:
    if isinstance(obj, property):
        obj = obj.fget
    if isinstance(obj, (staticmethod, classmethod)):
        obj = obj.__func__
    return (obj.__doc__ or "").strip()


def _public() -> Iterator[Tuple[str, Any]]:
    for modname, mod, names in (
            ("coord", coord, coord.__all__),
            ("coord.aio", coord.aio, [n for n in dir(coord.aio) if not n.startswith("_")
                                      and getattr(getattr(coord.aio, n), "__module__", "")
                                      == "coord.aio"])):
        classes: List[Tuple[str, type]] = []
        for n in names:
            o = getattr(mod, n)
            if inspect.isclass(o) or inspect.isfunction(o):
                yield f"{modname}.{n}", o
            if inspect.isclass(o):
                classes.append((f"{modname}.{n}", o))
        # c.flight, c.records, c.leader
        impl = coord.aio if modname == "coord.aio" else coord.client
        for attr, cls in (("flight", impl._FlightAPI), ("records", impl._RecordAPI),
                          ("leader", impl._LeaderAPI)):
            classes.append((f"{modname}.Client.{attr}", cls))
        for q, c in classes:
            for k, v in _members(c):
                if not inspect.isclass(v) and (callable(v) or isinstance(
                        v, (property, staticmethod, classmethod))):
                    yield f"{q}.{k}", v


def test_every_public_name_has_a_docstring():
    names = list(_public())
    assert len(names) > 150            # the walk finds the API
    missing = [q for q, o in names if not _doc(o)]
    assert not missing, "no docstring: " + ", ".join(missing)


def test_aio_has_the_blocking_shapes():
    """Each public method of a blocking handle or client has its asyncio
    twin (lazy, renew and max_frame are the blocking client's only)."""
    only_blocking = {"Client.max_frame", "Lock.renew"}
    for name in ("Client", "Lock", "Flight", "Leadership", "Subscription"):
        sync = {k for k, _ in _members(getattr(coord, name))}
        aio = {k for k, _ in _members(getattr(coord.aio, name))}
        left = {k for k in sync - aio if f"{name}.{k}" not in only_blocking}
        assert not left, f"coord.aio.{name} lacks {sorted(left)}"


# ---- packaging ----

def test_pyproject_agrees_with_the_readme():
    with open(os.path.join(PKG, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)["project"]
    with open(os.path.join(PKG, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    m = re.fullmatch(r">=(\d+)\.(\d+)", project["requires-python"])
    assert m, project["requires-python"]
    minimum = f"{m[1]}.{m[2]}"
    assert f"Python {minimum} or later" in readme
    assert sys.version_info >= (int(m[1]), int(m[2]))      # what the tests run on
    classifiers = project["classifiers"]
    versions = [c.rsplit(" :: ", 1)[1] for c in classifiers
                if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)]
    assert versions and min(versions, key=lambda v: tuple(map(int, v.split(".")))) == minimum
    assert "Programming Language :: Python :: 3 :: Only" in classifiers
    deps = project["dependencies"]
    assert deps == ["msgpack>=1.0"] and re.search(r"msgpack\s+\(1\.0 or later\)", readme)
    assert "License :: OSI Approved :: MIT License" in classifiers
    assert project["license"] == {"text": "MIT"}
    # typed: the marker is there and shipped
    assert "Typing :: Typed" in classifiers and "`py.typed`" in readme
    assert os.path.exists(os.path.join(PKG, "src", "coord", "py.typed"))
    with open(os.path.join(PKG, "pyproject.toml"), "rb") as f:
        assert "py.typed" in tomllib.load(f)["tool"]["setuptools"]["package-data"]["coord"]
    assert project["version"] == coord.__version__
