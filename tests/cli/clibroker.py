"""clibroker.py - what the cli tests share: a real coordd on a socket of
its own (started with --ready-fd, so the test goes on when it listens),
coordctl run against it, and a lock held by a real coordctl."""
import os
import shutil
import subprocess
import tempfile

import pytest

COORDD = os.environ["COORDD"]
COORDCTL = os.environ["COORDCTL"]


@pytest.fixture
def broker():
    """(env, workdir): env points coordctl at the broker, never autostarts."""
    work = tempfile.mkdtemp(prefix="coord-cli.")
    sock = os.path.join(work, "run", "broker.sock")
    os.makedirs(os.path.dirname(sock), mode=0o700)
    r, w = os.pipe()
    p = subprocess.Popen([COORDD, "--foreground", "--socket", sock, "--data-dir",
                          os.path.join(work, "data"), "--ready-fd", str(w)],
                         pass_fds=[w], stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        assert f.read() == b"ready\n"
    env = dict(os.environ, COORD_SOCKET=sock, COORD_BROKER="/nonexistent/coordd")
    env.pop("COORD_SCOPE", None)
    yield env, work
    p.terminate()
    p.wait(10)
    shutil.rmtree(work, ignore_errors=True)


def ctl(env, *args, **kw):
    return subprocess.run([COORDCTL, *args], env=env, capture_output=True, text=True,
                          timeout=30, **kw)


def hold(env, name, *flags):
    """A coordctl lock holding name until the returned process is ended;
    returns once CMD runs (so the broker has granted it)."""
    p = subprocess.Popen([COORDCTL, "lock", *flags, name, "--", "sh", "-c",
                          "echo held; exec sleep 60"],
                         env=env, stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "held"
    return p


def end(p):
    p.terminate()
    p.wait(10)
