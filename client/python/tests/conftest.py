"""conftest.py - a real coordd per test, started with --ready-fd and waited
for on that pipe (no sleeps); coordctl beside it.

COORD_BROKER / COORD_CTL name the binaries (the meson test sets them);
else ../../build/broker/coordd and ../../build/tools/coordctl relative to
client/python.  The package is imported from src/ (no install needed).
"""
from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.dirname(HERE)
SRC = os.path.join(PKG, "src")
sys.path.insert(0, SRC)

import coord  # noqa: E402


def _bin(env: str, rel: str) -> str:
    p = os.environ.get(env) or os.path.normpath(os.path.join(PKG, rel))
    if not os.access(p, os.X_OK):
        pytest.exit(f"{p} not found: build the tree (meson setup build && ninja -C build) "
                    f"or set {env}", returncode=1)
    return p


COORDD = _bin("COORD_BROKER", "../../build/broker/coordd")
COORDCTL = _bin("COORD_CTL", "../../build/tools/coordctl")


class Broker:
    """One coordd in its own temporary directory."""

    def __init__(self, data_dir: str, args=()) -> None:
        # sun_path is 107 bytes: keep the socket under a short /tmp dir
        self.sock_dir = tempfile.mkdtemp(prefix="coordpy-", dir="/tmp")
        self.socket = os.path.join(self.sock_dir, "broker.sock")
        self.data_dir = data_dir
        self.args = list(args)          # more coordd options (--max-conns 1 ...)
        self.proc = None
        self.start()

    def start(self) -> None:
        r, w = os.pipe()
        self.log = open(os.path.join(self.data_dir, "coordd.log"), "ab")
        self.proc = subprocess.Popen(
            [COORDD, "--foreground", "--socket", self.socket, "--data-dir", self.data_dir,
             "--ready-fd", str(w), "--log-level", "warn", *self.args],
            pass_fds=(w,), stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log)
        os.close(w)
        buf = b""
        deadline = time.monotonic() + 10
        try:
            while b"ready\n" not in buf:
                left = deadline - time.monotonic()
                rl, _, _ = select.select([r], [], [], max(0.0, left))
                chunk = os.read(r, 64) if rl else b""
                if not chunk:
                    raise RuntimeError(f"coordd did not get ready (exit {self.proc.poll()})")
                buf += chunk
        finally:
            os.close(r)

    def client(self, **kw) -> coord.Client:
        kw.setdefault("autostart", False)
        return coord.Client(self.socket, **kw)

    def aclient(self, **kw) -> coord.aio.Client:
        kw.setdefault("autostart", False)
        return coord.aio.Client(self.socket, **kw)

    def ctl(self, *args: str, **kw) -> subprocess.CompletedProcess:
        kw.setdefault("capture_output", True)
        kw.setdefault("timeout", 20)
        return subprocess.run([COORDCTL, "--socket", self.socket, "--no-autostart", *args],
                              **kw)

    def ctl_popen(self, *args: str, **kw) -> subprocess.Popen:
        return subprocess.Popen([COORDCTL, "--socket", self.socket, "--no-autostart", *args],
                                **kw)

    @contextlib.contextmanager
    def frozen(self):
        """The broker stopped (SIGSTOP) for the block: it reads nothing and
        answers nothing; it runs again (SIGCONT) however the block ends."""
        os.kill(self.proc.pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.kill(self.proc.pid, signal.SIGCONT)

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()
        self.log.close()
        shutil.rmtree(self.sock_dir, ignore_errors=True)


@pytest.fixture
def broker(tmp_path):
    b = Broker(str(tmp_path))
    yield b
    b.stop()


def child_env() -> dict:
    """Environment for Python child processes: the package importable."""
    env = dict(os.environ)
    env["PYTHONPATH"] = SRC + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def wait_until(pred, timeout: float = 5.0, what: str = "condition"):
    """Polls pred (a broker query, never a sleep-and-hope) until it holds."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


async def await_until(pred, timeout: float = 5.0, what: str = "condition"):
    """wait_until for asyncio tests: pred may return an awaitable (a broker
    query), polled on the loop until it holds."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if inspect.isawaitable(v):
            v = await v
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.005)
