"""test_doctor.py - coordctl doctor finds what a user gets wrong and says
what to do (the test 'cli-doctor'): each case is made for real (a second
broker on the data dir, a data dir that cannot be created, a log that is a
symlink, no coordd to start) and doctor must name it."""
import json
import os
import shutil
import subprocess
import tempfile

import pytest

COORDD = os.environ["COORDD"]
COORDCTL = os.environ["COORDCTL"]


@pytest.fixture
def home():
    d = tempfile.mkdtemp(prefix="coord-doctor.")
    os.chmod(d, 0o700)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def start_broker(sock, data):
    os.makedirs(os.path.dirname(sock), mode=0o700, exist_ok=True)
    r, w = os.pipe()
    p = subprocess.Popen([COORDD, "--foreground", "--socket", sock, "--data-dir", data,
                          "--ready-fd", str(w)], pass_fds=[w], stdin=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        assert f.read() == b"ready\n"
    return p


def doctor(env, *args):
    r = subprocess.run([COORDCTL, *args, "doctor"], env=env, capture_output=True, text=True,
                       timeout=30)
    return r


def env_for(home, sock, data, **extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("COORD_")}
    env.update(HOME=home, COORD_SOCKET=sock, COORD_DATA_DIR=data, COORD_BROKER=COORDD)
    env.update(extra)
    return env


def checks(r):
    return {c["check"]: c for c in json.loads(r.stdout)["checks"]}


def test_healthy(home):
    sock, data = os.path.join(home, "run", "s"), os.path.join(home, "data")
    b = start_broker(sock, data)
    try:
        r = doctor(env_for(home, sock, data))
        assert r.returncode == 0, r.stdout
        assert "FAIL" not in r.stdout
        j = checks(doctor(env_for(home, sock, data), "--json"))
        assert j["broker"]["status"] == "ok" and str(b.pid) in j["broker"]["detail"]
        assert j["data lock"]["status"] == "ok" and sock in j["data lock"]["detail"]
        assert j["coordd"]["status"] == "ok"
        assert j["ledger"]["status"] == "ok"
    finally:
        b.terminate()
        b.wait(10)


def test_second_broker_on_the_data_dir_is_named(home):
    data = os.path.join(home, "data")
    a_sock, b_sock = os.path.join(home, "a", "s"), os.path.join(home, "b", "s")
    a = start_broker(a_sock, data)
    try:
        r = doctor(env_for(home, b_sock, data))
        assert r.returncode == 1
        assert f"served by another broker: pid {a.pid} on {a_sock}" in r.stdout
        assert f"export COORD_SOCKET={a_sock}" in r.stdout
        j = json.loads(doctor(env_for(home, b_sock, data), "--json").stdout)
        assert j["ok"] is False
        assert {c["check"]: c for c in j["checks"]}["data lock"]["status"] == "fail"
    finally:
        a.terminate()
        a.wait(10)


def test_data_dir_that_cannot_be_created(home):
    f = os.path.join(home, "file")
    open(f, "w").close()
    r = doctor(env_for(home, os.path.join(home, "run", "s"), os.path.join(f, "data")))
    assert r.returncode == 1
    assert f"{f} is not a directory" in r.stdout


def test_log_that_is_a_symlink(home):
    data = os.path.join(home, "data")
    os.makedirs(data, mode=0o700)
    os.symlink("/etc/passwd", os.path.join(data, "coordd.log"))
    j = checks(doctor(env_for(home, os.path.join(home, "run", "s"), data), "--json"))
    assert j["log"]["status"] == "fail" and "a symlink" in j["log"]["detail"]
    assert j["log"]["fix"].startswith("remove it")


def test_no_coordd_to_start(home):
    env = env_for(home, os.path.join(home, "run", "s"), os.path.join(home, "data"),
                  COORD_BROKER="/nonexistent/coordd")
    j = checks(doctor(env, "--json"))
    assert j["coordd"]["status"] == "fail"
    assert "COORD_BROKER" in j["coordd"]["fix"]
    assert j["broker"]["status"] == "info"     # doctor never starts one
    assert not os.path.exists(os.path.join(home, "run", "s"))
