"""test_waits.py - waiting as a shell user sees it (the test 'cli-waits'):
flock(1)'s -E/--conflict-exit-code for `coordctl lock` (busy under -n and
timed out under -w told apart from CMD's own exit 1), -v/--verbose saying
who holds the lock while we wait and how long the wait took, and timeouts
said in seconds ("timed out after 0.5 s"), never in the request's field
names (timeout_ms, wait_ms).

Run by meson with COORDD and COORDCTL set to the build's binaries."""
import re
import subprocess

from clibroker import COORDCTL, broker, ctl, end, hold  # noqa: F401 (fixture)

FIELD_WORDING = re.compile(r"timeout_ms|wait_ms|within")


def test_conflict_exit_code_tells_busy_and_timeout_from_cmd(broker):
    env, _ = broker
    holder = hold(env, "db")
    try:
        assert ctl(env, "lock", "-n", "db", "--", "true").returncode == 1
        r = ctl(env, "lock", "-E", "42", "-n", "db", "--", "true")
        assert r.returncode == 42 and "db is busy" in r.stderr
        r = ctl(env, "lock", "--conflict-exit-code", "43", "-w", "0.2", "db", "--", "true")
        assert r.returncode == 43, r.stderr
        assert "timed out after 0.2 s waiting for db" in r.stderr
        r = ctl(env, "lock", "-E", "300", "-n", "db", "--", "true")
        assert r.returncode == 2 and "-E needs an exit status" in r.stderr
    finally:
        end(holder)
    # granted: CMD's status, 1 included, whatever -E says
    assert ctl(env, "lock", "-E", "42", "-n", "db", "--", "false").returncode == 1
    assert ctl(env, "lock", "-E", "42", "-w", "5", "db", "--", "true").returncode == 0


def test_verbose_names_the_holder_and_the_wait(broker):
    env, _ = broker
    holder = hold(env, "db")
    waiter = subprocess.Popen([COORDCTL, "lock", "-v", "db", "--", "echo", "ran"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = waiter.stderr.readline()
        assert re.fullmatch(r"coordctl: lock: waiting for db: held by coordctl "
                            rf"\(pid {holder.pid}, conn \d+, exclusive\) for \d+ ms\n", line), line
    finally:
        end(holder)
    out, err = waiter.communicate(timeout=30)
    assert waiter.returncode == 0 and out == "ran\n"
    assert re.fullmatch(r"coordctl: lock: got db after [\d.]+ m?s\n", err), err
    # nobody to wait for: no "waiting" line, the time it took
    r = ctl(env, "lock", "-v", "free", "--", "true")
    assert r.returncode == 0
    assert re.fullmatch(r"coordctl: lock: got free after \d+ ms\n", r.stderr), r.stderr


def test_timeouts_are_said_in_seconds(broker):
    env, _ = broker
    holder = hold(env, "db")
    try:
        r = ctl(env, "lock", "-w", "0.5", "db", "--", "true")
        assert r.returncode == 1 and "timed out after 0.5 s" in r.stderr
        assert not FIELD_WORDING.search(r.stderr), r.stderr
    finally:
        end(holder)

    leader = subprocess.Popen([COORDCTL, "leader-run", "ws", "--", "sh", "-c",
                               "echo leading; exec sleep 60"], env=env,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert leader.stdout.readline() == "leading\n"
        r = ctl(env, "leader-run", "-w", "0.5", "ws", "--", "true")
        assert r.returncode == 1
        assert "not elected: timed out after 0.5 s" in r.stderr, r.stderr
        assert not FIELD_WORDING.search(r.stderr), r.stderr
    finally:
        end(leader)

    owner = subprocess.Popen([COORDCTL, "once", "k", "--", "sh", "-c",
                              "echo started >&2; exec sleep 60"], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert owner.stderr.readline() == "started\n"
        r = ctl(env, "once", "--wait", "0.5", "k", "--", "true")
        assert r.returncode == 1
        assert "timed out after 0.5 s" in r.stderr, r.stderr
        assert not FIELD_WORDING.search(r.stderr), r.stderr
    finally:
        end(owner)


def test_wait_flags_combine_alike_in_lock_and_leader_run(broker):
    """-n, -w and --steal: the same rules for lock and leader-run (one
    ctl_wait_settle), -s excluded by --steal for lock only; -w 0 is -n."""
    env, _ = broker
    for cmd, name in (("lock", "db"), ("leader-run", "ws")):
        r = ctl(env, cmd, "-n", "-w", "1", name, "--", "true")
        assert r.returncode == 2 and "-n and -w cannot be combined" in r.stderr, r.stderr
        for flag in (["-n"], ["-w", "1"]):
            r = ctl(env, cmd, "--steal", *flag, name, "--", "true")
            assert r.returncode == 2, r.stderr
            want = "-s, -n or -w" if cmd == "lock" else "-n or -w"
            assert f"--steal cannot be combined with {want} (try" in r.stderr, r.stderr
    r = ctl(env, "lock", "--steal", "-s", "db", "--", "true")
    assert r.returncode == 2 and "with -s, -n or -w" in r.stderr
    holder = hold(env, "db")
    try:
        # -w 0 does not wait: busy at once, as -n
        r = ctl(env, "lock", "-E", "42", "-w", "0", "db", "--", "true")
        assert r.returncode == 42 and "db is busy" in r.stderr, r.stderr
    finally:
        end(holder)
    assert ctl(env, "lock", "-w", "0", "db", "--", "true").returncode == 0
