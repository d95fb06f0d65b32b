"""test_json.py - coordctl --json (the test 'cli-json'): accepted before
the command, right after it, among its flags and after its operands; one
object per command as coordctl(1) documents it, never the wire's reply
(no "rid", no "ok"); errors as one JSON object on stderr with the exit
status unchanged.

Run by meson with COORDD and COORDCTL set to the build's binaries."""
import base64
import json
import os
import subprocess

from clibroker import COORDCTL, broker, ctl, end, hold  # noqa: F401 (fixture)


def one_object(r):
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 1, r.stdout
    o = json.loads(lines[0])
    assert isinstance(o, dict)
    assert "rid" not in o and "ok" not in o, o
    return o


def test_json_in_every_position(broker):
    env, _ = broker
    holder = hold(env, "build")
    try:
        for argv in (["--json", "locks"], ["locks", "--json"], ["locks", "--json", "-a"],
                     ["locks", "-a", "--json"], ["--json", "locks", "--json"]):
            o = one_object(ctl(env, *argv))
            assert set(o) == {"held", "pending", "hidden", "truncated"}, argv
            assert [h["name"] for h in o["held"]] == ["build"], argv
            assert {"name", "mode", "token", "pid", "client", "age_ms"} <= set(o["held"][0])
        for argv in (["leader", "info", "ws", "--json"], ["leader", "--json", "info", "ws"],
                     ["leader", "ws", "--json"], ["--json", "leader", "ws"]):
            o = one_object(ctl(env, *argv))
            assert o["state"] == "idle" and o["generation"] == 0, argv
        for argv in (["records", "--json", "--prefix", "x"], ["records", "--prefix", "x", "--json"]):
            assert one_object(ctl(env, *argv)) == {"records": []}
        for argv in (["publish", "--json", "ch", "hi"], ["publish", "ch", "hi", "--json"],
                     ["publish", "-w", "0", "ch", "--json", "hi"]):
            assert one_object(ctl(env, *argv)) == {"delivered": 0}, argv
        # lock: among its flags and between NAME and CMD, never inside CMD
        for argv in (["lock", "--json", "-n", "build", "--", "true"],
                     ["lock", "-n", "--json", "build", "true"],
                     ["lock", "-n", "build", "--json", "--", "true"]):
            r = ctl(env, *argv)
            assert r.returncode == 1 and r.stdout == ""
            e = json.loads(r.stderr)["error"]
            assert e["code"] == "BUSY" and e["command"] == "lock", argv
        r = ctl(env, "lock", "free", "--", "echo", "--json")
        assert r.returncode == 0 and r.stdout == "--json\n"
    finally:
        end(holder)


def test_every_command_prints_one_documented_object(broker):
    env, _ = broker
    st = one_object(ctl(env, "status", "--json"))
    assert st["running"] is True and st["pid"] > 0 and "socket" in st and "version" in st
    stats = one_object(ctl(env, "stats", "--json"))
    assert "requests_total" in stats and "latency" in stats
    assert one_object(ctl(env, "ping", "--json"))["count"] == 1
    assert set(one_object(ctl(env, "flights", "--json"))) == {"flights", "disabled"}
    assert one_object(ctl(env, "flights", "disable", "p/", "--json")) == {"prefix": "p/", "disabled": True}
    assert one_object(ctl(env, "flights", "--json"))["disabled"] == ["p/"]
    assert one_object(ctl(env, "flights", "enable", "--json", "p/")) == {"prefix": "p/", "disabled": False}
    assert one_object(ctl(env, "purge", "--json")) == {"deleted": 0, "fenced": 0}
    assert one_object(ctl(env, "reload", "--json")) == {"loaded": [], "errors": []}
    assert one_object(ctl(env, "leader", "history", "ws", "--json")) == {"terms": []}
    assert one_object(ctl(env, "leader", "pending", "ws", "--json")) == {"ops": []}
    assert set(one_object(ctl(env, "disable", "ws", "--json"))) == {"generation"}
    assert one_object(ctl(env, "enable", "ws", "--json")) == {}
    k = one_object(ctl(env, "key", "--method", "GET", "--url", "http://h/", "--user", "u",
                       "--auth-gen", "1", "--json"))
    assert k["key"].startswith("request-v1:")
    top = one_object(ctl(env, "top", "-n", "1", "--json"))
    assert set(top) == {"stats", "locks", "flights"}
    assert "rid" not in top["stats"] and "rid" not in top["locks"]


def test_binary_data_is_base64(broker):
    env, _ = broker
    sub = subprocess.Popen([COORDCTL, "subscribe", "--json", "-c", "1", "ch"], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert b"listening" in sub.stderr.readline()
        r = subprocess.run([COORDCTL, "publish", b"ch", b"\xff\xfe"], env=env,
                           capture_output=True, timeout=30)
        assert r.returncode == 0, r.stderr
        out, _ = sub.communicate(timeout=30)
        ev = json.loads(out)
        assert base64.b64decode(ev["data"]["base64"]) == b"\xff\xfe"
        assert "rid" not in ev and "ok" not in ev
    finally:
        if sub.poll() is None:
            end(sub)


def test_errors_are_objects_on_stderr_with_the_same_exit_status(broker):
    env, work = broker
    r = ctl(env, "locks", "--json", "--bogus")
    assert r.returncode == 2 and r.stdout == ""
    e = json.loads(r.stderr)["error"]
    assert e == {"command": "locks", "op": "usage", "code": "USAGE",
                 "message": "unexpected argument --bogus (try coordctl locks --help)"}
    r = ctl(env, "bogus", "--json")
    assert r.returncode == 2 and json.loads(r.stderr)["error"]["code"] == "USAGE"
    r = ctl(env, "leader", "describe", "never", "--json")
    assert r.returncode == 1 and r.stdout == ""
    assert json.loads(r.stderr)["error"]["code"] == "NOT_FOUND"
    gone = dict(env, COORD_SOCKET=os.path.join(work, "nobody.sock"))
    r = ctl(gone, "--no-autostart", "locks", "--json")
    assert r.returncode == 3 and r.stdout == ""
    e = json.loads(r.stderr)["error"]
    assert e["code"] == "CONNECT" and e["op"] == "connect"
    # status is the exception the man page names: not running is its object
    r = ctl(gone, "status", "--json")
    assert r.returncode == 1 and json.loads(r.stdout)["running"] is False
