"""test_watch.py - `coordctl watch` filters (the test 'cli-watch'): --kind
lock|flight|leader|channel picks the kinds of event (and, without CHANNEL
operands, which of the broker's channels to subscribe to), --name PATTERN
the lock names, flight keys, workstreams or channel names (fnmatch
patterns) it shows; -c counts the events shown.

Run by meson with COORDD and COORDCTL set to the build's binaries."""
import json
import signal
import subprocess

from clibroker import COORDCTL, broker, ctl  # noqa: F401 (fixture)


def watcher(env, *args):
    """A watch --json that is subscribed once it returns."""
    p = subprocess.Popen([COORDCTL, "watch", "--json", *args], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = p.stderr.readline()
    assert line.startswith("coordctl: watch: listening on"), line
    return p, line


def events(p):
    out, err = p.communicate(timeout=30)
    assert p.returncode == 0, err
    return [json.loads(l) for l in out.splitlines()]


def test_kind_and_name(broker):
    env, _ = broker
    locks_b, listening = watcher(env, "--kind", "lock", "--name", "b*", "-c", "2")
    assert listening == "coordctl: watch: listening on -locks\n"
    leaders, listening = watcher(env, "--kind=leader,flight", "-c", "3")
    assert listening == "coordctl: watch: listening on -flights -leaders\n"
    keyed, _ = watcher(env, "--name", "k2", "--name", "nothing", "-c", "2")
    assert ctl(env, "lock", "a", "--", "true").returncode == 0
    assert ctl(env, "lock", "bb", "--", "true").returncode == 0
    assert ctl(env, "once", "k1", "--", "true").returncode == 0
    assert ctl(env, "once", "k2", "--", "true").returncode == 0
    assert ctl(env, "leader-run", "ws", "--", "true").returncode == 0
    got = events(locks_b)
    assert [(e["channel"], e["what"], e["name"]) for e in got] == [
        ("-locks", "granted", "bb"), ("-locks", "released", "bb")]
    got = events(leaders)
    assert [(e["channel"], e["what"]) for e in got] == [
        ("-flights", "started"), ("-flights", "completed"), ("-flights", "started")]
    got = events(keyed)
    assert [(e["what"], e["key"]) for e in got] == [("started", "k2"), ("completed", "k2")]


def test_channel_kind_and_name_on_user_channels(broker):
    env, _ = broker
    w, listening = watcher(env, "--kind", "channel", "--name", "news.*", "-c", "1",
                           "-locks", "news.sport", "weather")
    assert listening == "coordctl: watch: listening on -locks news.sport weather\n"
    assert ctl(env, "lock", "x", "--", "true").returncode == 0
    assert ctl(env, "publish", "weather", "rain").stdout == "delivered 1\n"
    assert ctl(env, "publish", "news.sport", "goal").stdout == "delivered 1\n"
    got = events(w)
    assert [(e["ev"], e["channel"]) for e in got] == [("message", "news.sport")]


def test_bad_filters_are_usage_errors(broker):
    env, _ = broker
    r = ctl(env, "watch", "--kind", "locks")
    assert r.returncode == 2 and "--kind is lock, flight, leader or channel" in r.stderr
    r = ctl(env, "watch", "--kind", "channel")
    assert r.returncode == 2 and "needs the CHANNELs" in r.stderr
    r = ctl(env, "subscribe", "--kind", "lock", "ch")
    assert r.returncode == 2


def test_count_holds_when_one_read_brings_several_events(broker):
    """Events that arrive together (one read, one dispatch) still stop at -c."""
    env, _ = broker
    w, _ = watcher(env, "-c", "1", "news")
    w.send_signal(signal.SIGSTOP)
    try:
        for body in ("one", "two", "three"):
            assert ctl(env, "publish", "news", body).stdout == "delivered 1\n"
    finally:
        w.send_signal(signal.SIGCONT)
    got = events(w)
    assert [(e["ev"], e["data"]) for e in got] == [("message", {"base64": "b25l"})]
