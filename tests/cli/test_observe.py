"""test_observe.py - what an operator sees (the tests 'cli-observe'):
`coordctl stats --openmetrics` read back by two real parsers (the
OpenMetrics one and Prometheus's text one, both from Debian's
python3-prometheus-client), its loopback HTTP listener as a scraper meets
it, and `coordctl top` in a real terminal (tmux: send-keys, capture-pane).

Run by meson with COORDD and COORDCTL set to the build's binaries."""
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_parse
from prometheus_client.parser import text_string_to_metric_families as prom_parse

COORDD = os.environ["COORDD"]
COORDCTL = os.environ["COORDCTL"]


@pytest.fixture
def broker():
    work = tempfile.mkdtemp(prefix="coord-observe.")
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


def hold(env, name):
    """A coordctl lock holding name until the returned process is ended;
    returns once the broker lists it as held."""
    p = subprocess.Popen([COORDCTL, "lock", name, "--", "sh", "-c", "echo held; exec sleep 60"],
                         env=env, stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "held"
    return p


def families(text, parse):
    return {f.name: f for f in parse(text)}


def sample(fams, family, sample_name, **labels):
    for s in fams[family].samples:
        if s.name == sample_name and all(s.labels.get(k) == v for k, v in labels.items()):
            return s.value
    raise KeyError((family, sample_name, labels))


def test_openmetrics_parses_and_matches_stats(broker):
    env, _ = broker
    holder = hold(env, "build-cache")
    try:
        out = ctl(env, "stats", "--openmetrics")
        assert out.returncode == 0, out.stderr
        text = out.stdout
        assert text.endswith("# EOF\n")
        om = families(text, om_parse)            # strict: raises on any error
        ptext = ctl(env, "stats", "--prometheus").stdout
        prom = families(ptext, prom_parse)
        stats = json.loads(ctl(env, "--json", "stats").stdout)
    finally:
        holder.terminate()
        holder.wait(10)
    # every stat is classified as a gauge or a counter (a new stat must be)
    unknown = [f.name for f in om.values() if f.type == "unknown"]
    assert unknown == [], f"stats without a type in ctl-metrics.c: {unknown}"
    assert om["coord_locks_held"].type == "gauge"
    assert sample(om, "coord_locks_held", "coord_locks_held") == 1
    assert om["coord_conns_accepted"].type == "counter"
    assert sample(om, "coord_conns_accepted", "coord_conns_accepted_total") >= 2
    assert sample(om, "coord_build_info", "coord_build_info", version=stats["version"]) == 1
    assert sample(om, "coord_limit", "coord_limit", name="max_frame") == stats["limits"]["max_frame"]
    assert sample(om, "coord_op_requests", "coord_op_requests_total", op="lock.acquire") == 1
    # milliseconds become seconds
    assert 0 < sample(om, "coord_uptime_seconds", "coord_uptime_seconds") < 600
    assert om["coord_latency_seconds"].type == "summary"
    assert sample(om, "coord_latency_seconds", "coord_latency_seconds_count", kind="lock_wait") == 1
    assert sample(om, "coord_latency_seconds", "coord_latency_seconds",
                  kind="lock_wait", quantile="0.99") >= 0
    # --prometheus: the text format 0.0.4 of node_exporter's textfile collector,
    # read by Prometheus's own parser with every family typed as in OpenMetrics
    assert "# EOF" not in ptext
    assert sample(prom, "coord_locks_held", "coord_locks_held") == 1
    # (its parser names a counter's family without _total, as OpenMetrics does)
    assert prom["coord_op_requests"].type == "counter"
    assert sample(prom, "coord_op_requests", "coord_op_requests_total", op="lock.acquire") == 1
    assert [f.name for f in prom.values() if f.type in ("unknown", "untyped")] == []


def serve(env, addr="127.0.0.1:0"):
    p = subprocess.Popen([COORDCTL, "stats", "--openmetrics", "--listen", addr], env=env,
                         stderr=subprocess.PIPE, text=True)
    line = p.stderr.readline()
    m = re.search(r"serving metrics on (http://\S+)", line)
    assert m, line
    return p, m.group(1)


def test_listener_serves_a_scraper(broker):
    env, _ = broker
    p, url = serve(env)
    try:
        # what Prometheus sends: OpenMetrics preferred
        accept = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"
        req = urllib.request.Request(url, headers={"Accept": accept})
        with urllib.request.urlopen(req, timeout=10) as r:
            assert r.status == 200
            assert r.headers["Content-Type"].startswith("application/openmetrics-text; version=1.0.0")
            first = families(r.read().decode(), om_parse)
        with urllib.request.urlopen(url, timeout=10) as r:            # no Accept: 0.0.4
            assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            assert families(r.read().decode(), prom_parse)["coord_op_requests"].type == "counter"
        holder = hold(env, "x")
        try:
            with urllib.request.urlopen(req, timeout=10) as r:       # a fresh stats per scrape
                again = families(r.read().decode(), om_parse)
        finally:
            holder.terminate()
            holder.wait(10)
        assert sample(first, "coord_locks_held", "coord_locks_held") == 0
        assert sample(again, "coord_locks_held", "coord_locks_held") == 1
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(url.replace("/metrics", "/nope"), timeout=10)
        assert e.value.code == 404
    finally:
        p.terminate()
        p.wait(10)


def test_listener_says_when_the_broker_is_down(broker):
    env, work = broker
    env = dict(env, COORD_SOCKET=os.path.join(work, "run", "none.sock"))
    p, url = serve(env)
    try:
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(url, timeout=10)
        assert e.value.code == 503
        assert "CONNECT" in e.value.read().decode()
    finally:
        p.terminate()
        p.wait(10)


@pytest.mark.parametrize("addr", ["0.0.0.0:0", "[::]:0"])
def test_listener_refuses_other_than_loopback(broker, addr):
    env, _ = broker
    out = ctl(env, "stats", "--openmetrics", "--listen", addr)
    assert out.returncode == 1
    assert "not a loopback address" in out.stderr


def test_top_without_a_terminal_prints_frames(broker):
    env, _ = broker
    holder = hold(env, "build-cache")
    try:
        out = ctl(env, "top", "-n", "2", "-d", "0.1")
    finally:
        holder.terminate()
        holder.wait(10)
    assert out.returncode == 0, out.stderr
    assert "\033[" not in out.stdout
    assert out.stdout.count("connections ") == 2
    assert re.search(r"^build-cache +held +exclusive +coordctl +\d+ ", out.stdout, re.M)
    # the second frame has a rate, the first cannot
    rates = re.findall(r"requests/s (\S+)", out.stdout)
    assert rates[0] == "-" and rates[1].isdigit()


def tmux(*args, check=True):
    return subprocess.run(["tmux", "-L", TMUX_SOCKET, *args], capture_output=True, text=True,
                          timeout=30, check=check)


TMUX_SOCKET = f"coord-observe-{os.getpid()}"


def wait_screen(pattern, timeout=15):
    """capture-pane until pattern shows (the screen is the only event a
    terminal program gives)."""
    deadline = time.monotonic() + timeout
    screen = ""
    while time.monotonic() < deadline:
        screen = tmux("capture-pane", "-p", "-t", "top").stdout
        if re.search(pattern, screen, re.M):
            return screen
        time.sleep(0.05)
    raise AssertionError(f"{pattern!r} never showed; the screen:\n{screen}")


@pytest.mark.skipif(not shutil.which("tmux"), reason="tmux is not installed")
def test_top_in_a_terminal(broker):
    env, work = broker
    holder = hold(env, "build-cache")
    leader = subprocess.Popen([COORDCTL, "leader-run", "billing", "--", "sh", "-c",
                               "echo leading; exec sleep 60"],
                              env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert leader.stdout.readline().strip() == "leading"
        cmd = f"COORD_SOCKET={env['COORD_SOCKET']} {COORDCTL} top -d 0.2; echo top-exited-$?; sleep 30"
        tmux("new-session", "-d", "-s", "top", "-x", "120", "-y", "40", cmd)
        screen = wait_screen(r"^billing +\d+ +coordctl")
        assert re.search(r"^build-cache +held +exclusive", screen, re.M)
        assert "(q to quit)" in screen
        assert "-leader/" not in screen           # leadership locks are shown as leaders
        holder.terminate()
        holder.wait(10)
        wait_screen(r"no locks held or waiting")  # it refreshes by itself
        tmux("send-keys", "-t", "top", "q")
        wait_screen(r"^top-exited-0$")
    finally:
        tmux("kill-server", check=False)
        for p in (holder, leader):
            if p.poll() is None:
                p.terminate()
                p.wait(10)
