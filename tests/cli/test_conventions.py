"""test_conventions.py - the command lines speak as a shell user expects
(the test 'cli-conventions'): versions, short usage errors, flags that
would be ignored are refused, start errors quoted so a log parser reads
them."""
import json
import os
import re
import subprocess
import tempfile

COORDD = os.environ["COORDD"]
COORDCTL = os.environ["COORDCTL"]


def run(*argv, **kw):
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, **kw)


def test_versions():
    for flag in ("--version", "-V"):
        assert re.fullmatch(r"coordctl \d+\.\d+\.\d+\n", run(COORDCTL, flag).stdout)
        assert re.fullmatch(r"coordd \d+\.\d+\.\d+\n", run(COORDD, flag).stdout)


def test_coordd_help_and_short_usage_errors():
    h = run(COORDD, "-h")
    assert h.returncode == 0 and h.stdout.startswith("usage: coordd")
    bad = run(COORDD, "--bogus")
    assert bad.returncode == 2
    assert bad.stdout == ""
    assert bad.stderr.strip().splitlines()[-1] == "coordd: try coordd --help"
    assert len(bad.stderr.strip().splitlines()) <= 2            # getopt's line and ours
    extra = run(COORDD, "stray")
    assert extra.returncode == 2 and "unexpected argument stray" in extra.stderr


def test_etcd_flags_without_the_etcd_ledger_are_refused():
    for args in (["--etcd-endpoints", "http://127.0.0.1:2379"], ["--etcd-prefix", "/x/"]):
        r = run(COORDD, "--foreground", *args)
        assert r.returncode == 2
        assert "need --ledger etcd" in r.stderr


def test_unknown_ledger_is_one_parseable_log_line():
    with tempfile.TemporaryDirectory() as d:
        os.chmod(d, 0o700)
        r = run(COORDD, "--foreground", "--socket", os.path.join(d, "s"), "--data-dir",
                os.path.join(d, "data"), "--ledger", "bogus")
        assert r.returncode == 1
        line = [l for l in r.stderr.splitlines() if "broker.start_failed" in l][0]
        # key="value" pairs, the value free of unescaped quotes
        m = re.search(r'error="([^"]*)"$', line)
        assert m, line
        assert "unknown leader ledger 'bogus'" in m.group(1)


def commands():
    out = run(COORDCTL, "--help").stdout
    return re.findall(r"^  ([a-z][a-z-]*)\b", out.split("Commands:\n")[1], re.M)


def test_help_fits_80_columns():
    texts = {"--help": run(COORDCTL, "--help").stdout}
    names = commands()
    assert {"lock", "once", "leader-run", "stats", "top"} <= set(names)
    for c in names:
        texts[c] = run(COORDCTL, c, "--help").stdout
    wide = [(k, line) for k, t in texts.items() for line in t.splitlines() if len(line) > 80]
    assert wide == []


def test_usage_error_is_one_line_with_a_pointer():
    r = run(COORDCTL, "lock", "--bogus", "x", "--", "true")
    assert r.returncode == 2
    assert r.stderr == "coordctl: lock: unknown flag --bogus (try coordctl lock --help)\n"
    r = run(COORDCTL, "--bogus")
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1 and "--help" in r.stderr


SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def complete(*words):
    """COMPREPLY of the bash completion for the command line words (the
    last one being completed)."""
    script = os.path.join(SRC, "tools", "coordctl", "completion", "coordctl.bash")
    prog = (f'source "{script}"; COMP_WORDS=("$@"); COMP_CWORD=$(( ${{#COMP_WORDS[@]}} - 1 )); '
            'COMPREPLY=(); _coordctl; printf "%s\\n" "${COMPREPLY[@]}"')
    r = run("bash", "-c", prog, "bash", COORDCTL, *words)
    assert r.returncode == 0, r.stderr
    return [w for w in r.stdout.splitlines() if w]


def test_bash_completion_reads_the_binary():
    assert set(complete("")) == set(commands())
    assert complete("lea") == ["leader", "leader-run"] or set(complete("lea")) == {"leader", "leader-run"}
    assert "--steal" in complete("lock", "--")
    assert "--lease" in complete("leader-run", "--l")
    assert "--openmetrics" in complete("stats", "--")
    assert {"--conflict-exit-code", "--verbose"} <= set(complete("lock", "--"))
    assert {"--kind", "--name"} <= set(complete("watch", "--"))
    assert "--scope" in complete("--s")
    # after --, the CMD is a command of the shell
    assert "sh" in complete("lock", "x", "--", "sh")


def test_zsh_completion_parses():
    import shutil
    if not shutil.which("zsh"):
        import pytest
        pytest.skip("zsh is not installed")
    r = run("zsh", "-n", os.path.join(SRC, "tools", "coordctl", "completion", "_coordctl"))
    assert r.returncode == 0, r.stderr


def test_built_coordctl_starts_the_coordd_it_came_with():
    """Right after a build nothing is on PATH: coordctl autostarts the
    coordd of its own build (../broker/coordd) or install (beside it)."""
    with tempfile.TemporaryDirectory() as d:
        os.chmod(d, 0o700)
        env = {k: v for k, v in os.environ.items() if k != "COORD_BROKER"}
        env.update(PATH="/usr/bin:/bin", COORD_SOCKET=os.path.join(d, "s"),
                   COORD_DATA_DIR=os.path.join(d, "data"))
        try:
            r = run(COORDCTL, "lock", "x", "--", "echo", "ran", env=env)
            assert r.returncode == 0, r.stderr
            assert r.stdout == "ran\n"
        finally:
            st = run(COORDCTL, "--no-autostart", "--json", "status", env=env)
            if st.returncode == 0:
                os.kill(json.loads(st.stdout)["pid"], 15)


def test_locks_hides_leadership_locks_unless_all():
    with tempfile.TemporaryDirectory() as d:
        os.chmod(d, 0o700)
        env = {k: v for k, v in os.environ.items() if not k.startswith("COORD_")}
        env.update(COORD_SOCKET=os.path.join(d, "s"), COORD_DATA_DIR=os.path.join(d, "data"),
                   COORD_BROKER=COORDD)
        leader = subprocess.Popen([COORDCTL, "leader-run", "billing", "--", "sh", "-c",
                                   "echo leading; exec sleep 60"], env=env,
                                  stdout=subprocess.PIPE, text=True)
        try:
            assert leader.stdout.readline().strip() == "leading"
            plain = run(COORDCTL, "locks", env=env).stdout
            assert "-leader/billing" not in plain
            assert "and 1 of leadership: --all" in plain
            assert "-leader/billing" in run(COORDCTL, "locks", "--all", env=env).stdout
            assert "-leader/billing" in run(COORDCTL, "locks", "-a", env=env).stdout
        finally:
            leader.terminate()
            leader.wait(10)
            st = run(COORDCTL, "--no-autostart", "--json", "status", env=env)
            if st.returncode == 0:
                os.kill(json.loads(st.stdout)["pid"], 15)
