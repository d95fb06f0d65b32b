#!/usr/bin/env python3
"""demo.py - the quick start's demo: why coord exists, in under a minute.

A private coordd in a temp dir, a small backend on loopback (in this
process: a threaded HTTP server that counts what it serves), and "tab"
processes in C (coord-demo-tab, on libcoord), coordctl, Node.js and Python
that coordinate through the broker, as browser tabs would through a
SharedWorker:

  1. single-flight: every tab refreshes the session at once; the backend
     serves one refresh and every tab shows its result;
  2. stale-while-revalidate: a second later the session is stale; every
     tab gets the stale one at once while exactly one revalidates it;
  3. an outbox leader claims, sends (by op id, like an idempotency key)
     and commits; it is SIGKILLed after an effect and before its commit;
     the next leader reads leader.pending and reconciles by op id: every
     effect reaches the backend once;
  4. that leader is frozen (SIGSTOP) in the same place; its lease runs
     out, a third leader finishes; the frozen one resumes and its late
     commit is FENCED.

The counts are asserted: the exit status is 1 when one is wrong, so the
test suite runs this as it is (meson test --suite demo).  Everything waits
for events (the broker's readiness, a request reaching the backend, a
line from a tab), each wait bounded; the only sleep is the second that
makes the session stale.  No escape codes unless stdout is a terminal.

    demo.py [--build DIR] [--keep] [--strict] [--leaders c,node,py]

--keep leaves the broker running (and says how to look at it with
coordctl); --strict fails instead of skipping a language whose runtime is
on the machine but not usable (node without client/node/node_modules,
python without msgpack); --leaders is the order in which the outbox
leaders start (the first is elected first); --break lookup makes the
backend answer every lookup by op id "unknown", so that a reconciling
leader sends again: the demo then exits 0 only when that resend, and
nothing else, was caught (the test demo-catches-resend)."""
import argparse
import http.server
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
WAIT = 20.0            # seconds: the bound of every wait (the test's budget is 60)
OPS = [f"email-{i}" for i in range(1, 7)]
KILL_AT, FREEZE_AT = "email-3", "email-5"   # the effects after which a leader is stopped

out_lock = threading.Lock()
tty = sys.stdout.isatty() and os.environ.get("TERM", "dumb") != "dumb" and "NO_COLOR" not in os.environ
BOLD, DIM, PLAIN = ("\033[1m", "\033[2m", "\033[0m") if tty else ("", "", "")
failures = []


def emit(line):
    with out_lock:
        try:
            print(line, flush=True)
        except BrokenPipeError:            # stdout's reader left (| head): carry on quietly
            sys.stdout = open(os.devnull, "w")


def say(title):
    emit(f"\n{BOLD}== {title}{PLAIN}")


def note(text):
    emit(f"   {text}")


def check(ok, what):
    emit(f"   {'ok' if ok else 'WRONG'}: {what}")
    if not ok:
        failures.append(what)


class Timeout(Exception):
    pass


def wait_until(pred, what, cond=None, timeout=WAIT):
    """Waits for pred() under cond (notified on change), or polls it (pred
    reads another process's state); raises Timeout after timeout."""
    end = time.monotonic() + timeout
    if cond is not None:
        with cond:
            if not cond.wait_for(pred, timeout):
                raise Timeout(what)
            return
    while not pred():
        if time.monotonic() > end:
            raise Timeout(what)
        time.sleep(0.02)


# ---- the backend: counts refreshes and effects; effects are idempotent by op id ----

class Backend:
    """GET /session (a refresh: "session-N"), POST /send?op=ID (an effect:
    "applied", or "already applied" for an op id it has, like an
    idempotency-key API), GET /sent?op=ID (the lookup by op id: "applied"
    or "unknown").  hold(key) makes the next such request wait, after its
    effect, until release(key): the driver stops its sender meanwhile."""

    def __init__(self, broken_lookup=False):
        self.broken_lookup = broken_lookup    # --break lookup: forget every op id asked about
        self.cond = threading.Condition()
        self.refreshes = 0
        self.applied = {}              # op id -> (tab, generation)
        self.resent = 0                # effects asked for again by op id
        self.lookups = 0
        self.holds = set()
        self.held = {}                 # key -> tab that waits
        self.released = set()

    def hold(self, key):
        with self.cond:
            self.holds.add(key)
            self.held.pop(key, None)
            self.released.discard(key)

    def release(self, key):
        with self.cond:
            self.released.add(key)
            self.cond.notify_all()

    def _pause(self, key, tab):
        """Called with cond held."""
        if key not in self.holds:
            return
        self.holds.discard(key)
        self.held[key] = tab
        self.cond.notify_all()
        self.cond.wait_for(lambda: key in self.released, WAIT * 2)

    def handle(self, method, path, q):
        tab = q.get("tab", "?")
        with self.cond:
            if method == "GET" and path == "/session":
                self.refreshes += 1
                n = self.refreshes
                self._pause("session", tab)
                return f"session-{n}"
            op = q.get("op", "")
            if method == "POST" and path == "/send" and op:
                if op in self.applied:
                    self.resent += 1
                    return "already applied"
                self.applied[op] = (tab, q.get("gen", "?"))
                self._pause("send:" + op, tab)
                return "applied"
            if method == "GET" and path == "/sent" and op:
                self.lookups += 1
                return "applied" if op in self.applied and not self.broken_lookup else "unknown"
        return None

    def serve(self):
        backend = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _any(self):
                u = urllib.parse.urlsplit(self.path)
                q = dict(urllib.parse.parse_qsl(u.query))
                body = backend.handle(self.command, u.path, q)
                data = (body if body is not None else "not found").encode()
                try:
                    self.send_response(200 if body is not None else 404)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    pass                   # the tab was killed meanwhile

            do_GET = do_POST = _any

            def log_message(self, *a):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"


# ---- tabs: child processes whose lines are printed as they come ----

class Tab:
    def __init__(self, name, argv, env, show=None):
        self.name, self.lines, self.cond = name, [], threading.Condition()
        self.show = show or (lambda s: s)
        self.p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, text=True, errors="replace")
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.p.stdout:
            line = self.show(line.rstrip("\n"))
            emit(f"   {DIM}[{self.name:>6}]{PLAIN} {line}")
            with self.cond:
                self.lines.append(line)
                self.cond.notify_all()
        self.p.wait()
        with self.cond:
            self.cond.notify_all()

    def done(self):
        return self.p.poll() is not None and not self.reader.is_alive()

    def wait(self, timeout=WAIT):
        wait_until(lambda: not self.reader.is_alive() and self.p.poll() is not None,
                   f"{self.name} to finish", self.cond, timeout)
        self.reader.join(timeout)
        return self.p.returncode

    def wait_line(self, prefix, timeout=WAIT):
        wait_until(lambda: any(s.startswith(prefix) for s in self.lines) or self.done(),
                   f"{self.name} to say '{prefix}'", self.cond, timeout)
        return any(s.startswith(prefix) for s in self.lines)

    def value(self):
        got = [s for s in self.lines if s.startswith("got ")]
        return got[-1].split()[1] if got else None

    def stop(self):
        if self.p.poll() is None:
            for sig in (signal.SIGCONT, signal.SIGKILL):
                try:
                    self.p.send_signal(sig)
                except ProcessLookupError:
                    pass
        self.p.wait()


class Demo:
    def __init__(self, args):
        self.args = args
        b = os.path.abspath(args.build)
        self.coordd = os.path.join(b, "broker", "coordd")
        self.ctl = os.path.join(b, "tools", "coordctl")
        self.ctab = os.path.join(b, "tools", "demo", "coord-demo-tab")
        for f in (self.coordd, self.ctl, self.ctab):
            if not os.access(f, os.X_OK):
                sys.exit(f"demo: {f} is missing: build first (tools/dev.sh build)")
        self.tabs = []
        self.broker = None
        self.work = tempfile.mkdtemp(prefix="coord-demo.")
        self.sock = os.path.join(self.work, "run", "broker.sock")
        self.env = dict(os.environ, COORD_SOCKET=self.sock, COORD_BROKER=self.coordd,
                        COORD_DATA_DIR=os.path.join(self.work, "data"))
        self.langs = self.find_languages()

    def find_languages(self):
        """Which tabs can run here: C and coordctl always; Node.js and
        Python when their runtime and the client's one dependency are."""
        langs = {"c": True, "ctl": True}
        node = shutil.which("node")
        mods = os.path.join(REPO, "client", "node", "node_modules", "@msgpack", "msgpack")
        langs["node"] = bool(node and os.path.isdir(mods))
        if node and not langs["node"]:
            self.skip("node", "client/node/node_modules is missing (npm ci in client/node)")
        try:
            import msgpack  # noqa: F401  (the Python client's dependency)
            langs["py"] = True
        except ImportError:
            langs["py"] = False
            self.skip("py", f"{sys.executable} has no msgpack (apt-get install python3-msgpack)")
        if not node:
            note("(no node on this machine: no Node.js tabs)")
        return langs

    def skip(self, lang, why):
        if self.args.strict:
            sys.exit(f"demo: the {lang} tabs cannot run: {why}")
        note(f"(no {lang} tabs: {why})")

    # -- processes --

    def start_broker(self):
        os.makedirs(os.path.dirname(self.sock), mode=0o700)
        r, w = os.pipe()
        self.log = open(os.path.join(self.work, "coordd.log"), "w")
        idle = ["--idle-exit", "600"] if self.args.keep else []
        self.broker = subprocess.Popen(
            [self.coordd, "--foreground", "--socket", self.sock, "--data-dir", self.env["COORD_DATA_DIR"],
             "--ready-fd", str(w), "--log-level", "warn"] + idle,
            pass_fds=[w], stdout=subprocess.DEVNULL, stderr=self.log, stdin=subprocess.DEVNULL,
            start_new_session=self.args.keep)
        os.close(w)
        ready = b""
        with os.fdopen(r, "rb") as f:          # "ready\n", or EOF if it died
            ready = f.read()
        if ready != b"ready\n":
            sys.exit(f"demo: coordd did not start (see {self.log.name})")

    def tab(self, name, job, *args):
        """A tab of the language in name ("c-1", "ctl", "node-2", "py")."""
        lang = name.split("-")[0]
        if lang == "c":
            argv = [self.ctab, job, name] + list(args)
        elif lang == "node":
            argv = [shutil.which("node"), os.path.join(HERE, "tab.mjs"), job, name] + list(args)
        elif lang == "py":
            argv = [sys.executable, os.path.join(HERE, "tab.py"), job, name] + list(args)
        else:                                  # coordctl: single-flight a shell command
            url = f"{args[0]}/session?tab={name}"
            argv = [self.ctl, "once", "--keep", "1", "--stale", "60", "session", "--",
                    self.ctab, "fetch", url]
            t = Tab(name, argv, self.env, show=lambda s: f"got {s} (coordctl once prints the value)")
            self.tabs.append(t)
            return t
        t = Tab(name, argv, self.env)
        self.tabs.append(t)
        return t

    def coordctl(self, *args):
        r = subprocess.run([self.ctl, "--no-autostart"] + list(args), env=self.env,
                           capture_output=True, text=True, timeout=WAIT)
        return r.stdout

    def followers(self):
        try:
            fl = json.loads(self.coordctl("--json", "flights") or "{}").get("flights", [])
        except ValueError:
            return 0
        return sum(f.get("followers", 0) for f in fl if f.get("key") == "session")

    def cleanup(self):
        for t in self.tabs:
            t.stop()
        if self.broker and not self.args.keep:
            self.broker.terminate()
            self.broker.wait(WAIT)
            shutil.rmtree(self.work, ignore_errors=True)

    # -- the story --

    def refresh_tabs(self, base):
        names = ["c-1", "c-2", "ctl"]
        names += ["node-1", "node-2"] if self.langs["node"] else []
        names += ["py-1", "py-2"] if self.langs["py"] else []
        return [self.tab(n, "refresh", base) for n in names]

    def act1(self, be, base):
        say("1. single-flight: every tab refreshes the session at once")
        be.hold("session")                     # the backend is slow: it waits for all tabs
        tabs = self.refresh_tabs(base)
        note(f"{len(tabs)} tabs ({', '.join(t.name for t in tabs)}) call once(\"session\")")
        wait_until(lambda: "session" in be.held, "a refresh to reach the backend", be.cond)
        note(f"{be.held['session']} is the owner: its refresh reached the backend")
        wait_until(lambda: self.followers() >= len(tabs) - 1, "every other tab to join the flight")
        note(f"the {len(tabs) - 1} others wait for its result; the backend answers now")
        be.release("session")
        for t in tabs:
            t.wait()
        self.tabs_done = time.monotonic()
        check(be.refreshes == 1, f"backend refreshes: {be.refreshes} (expected 1 for {len(tabs)} tabs)")
        values = sorted({t.value() for t in tabs}, key=str)
        check(values == ["session-1"], f"every tab shows the same session: {', '.join(map(str, values))}")

    def act2(self, be, base):
        say("2. stale-while-revalidate: a second later the session is stale")
        time.sleep(max(0.0, 1.1 - (time.monotonic() - self.tabs_done)))   # max age 1 s
        be.hold("session")
        tabs = self.refresh_tabs(base)
        wait_until(lambda: "session" in be.held, "the revalidation to reach the backend", be.cond)
        owner = be.held["session"]
        note(f"{owner} revalidates it; the others are served the stale session at once:")
        others = [t for t in tabs if t.name != owner]
        for t in others:
            t.wait()
        be.release("session")
        for t in tabs:
            t.wait()
        check(be.refreshes == 2, f"backend refreshes: {be.refreshes} (expected 2: exactly one revalidation)")
        fresh = [t.name for t in tabs if t.value() == "session-2"]
        stale = [t.name for t in others if t.value() == "session-1"]
        check(fresh == [owner], f"the revalidating tab has the fresh session-2: {', '.join(fresh) or 'none'}")
        check(len(stale) == len(others), f"{len(stale)} of {len(others)} tabs were served session-1 stale, at once")

    def act3(self, be, base):
        say("3. an outbox leader drains 6 emails: claim, send by op id, commit")
        names = [n if self.langs[n] else f"c-{i + 2}" for i, n in enumerate(self.args.leaders)]
        be.hold("send:" + KILL_AT)
        be.hold("send:" + FREEZE_AT)
        note(f"{', '.join(names)} campaign for the workstream \"outbox\" (lease 2 s); "
             f"{names[0]} first")
        tabs = {names[0]: self.tab(names[0], "outbox", base, *OPS)}
        tabs[names[0]].wait_line("leading")
        tabs.update({n: self.tab(n, "outbox", base, *OPS) for n in names[1:]})
        wait_until(lambda: "send:" + KILL_AT in be.held, f"{KILL_AT} to reach the backend", be.cond)
        first = tabs[be.held["send:" + KILL_AT]]
        first.p.send_signal(signal.SIGKILL)
        first.wait()
        be.release("send:" + KILL_AT)
        note(f"SIGKILL {first.name}: the backend has {KILL_AT}, its commit never came")
        wait_until(lambda: "send:" + FREEZE_AT in be.held, f"{FREEZE_AT} to reach the backend", be.cond)
        second = tabs[be.held["send:" + FREEZE_AT]]
        second.p.send_signal(signal.SIGSTOP)
        be.release("send:" + FREEZE_AT)       # its answer waits in the socket
        say(f"4. {second.name} is frozen (SIGSTOP) after sending {FREEZE_AT}, before its commit")
        note("its lease runs out; the next leader takes over")
        third = [t for t in tabs.values() if t not in (first, second)][0]
        check(third.wait() == 0 and third.wait_line("outbox drained"),
              f"{third.name} reconciled and drained the outbox")
        note(f"SIGCONT {second.name}: it resumes where it stopped and commits {FREEZE_AT}")
        second.p.send_signal(signal.SIGCONT)
        second.wait()
        check(second.wait_line(f"late commit of {FREEZE_AT} refused: FENCED"),
              f"the old leader's late commit of {FREEZE_AT} was FENCED")
        say("what the backend counted")
        check(sorted(be.applied) == sorted(OPS) and be.resent == 0,
              f"effects: {len(be.applied)} for {len(OPS)} ops, each once ({be.resent} sent again)")
        check(be.lookups == 2, f"lookups by op id while reconciling: {be.lookups} (expected 2)")
        pend = json.loads(self.coordctl("--json", "leader", "pending", "outbox") or "{}").get("ops", None)
        check(pend == [], f"nothing left pending in the broker: {pend}")

    def epilogue(self):
        say("look at it with coordctl")
        for args in (["leader", "history", "outbox"], ["records"]):
            note(f"$ coordctl {' '.join(args)}")
            for line in self.coordctl(*args).splitlines():
                note("  " + line)
        if self.args.keep:
            note(f"the broker keeps running (pid {self.broker.pid}, exits after 10 idle minutes):")
            note(f"  export COORD_SOCKET={self.sock}")
            on_path = shutil.which("coordctl")
            ctl = "coordctl" if on_path and os.path.samefile(on_path, self.ctl) else self.ctl
            if ctl != "coordctl":
                note("  (coordctl is not on PATH yet: tools/dev.sh install puts it in ~/.local/bin)")
            note(f"  {ctl} status; {ctl} leader history outbox; {ctl} records; {ctl} top")
            note(f"  kill {self.broker.pid}; rm -r {self.work}    # when done")
        else:
            note("your own broker: coordctl status, locks, flights, records, leader history WS, watch")
            note("this one: tools/dev.sh demo --keep leaves it running and says how to reach it")

    def run(self):
        t0 = time.monotonic()
        say(f"coordd in {self.work}; a backend on loopback that counts what it serves")
        self.start_broker()
        be = Backend(broken_lookup=self.args.break_ == "lookup")
        base = be.serve()
        note(f"backend {base}; broker {self.sock}")
        try:
            self.act1(be, base)
            self.act2(be, base)
            self.act3(be, base)
            self.epilogue()
        except Timeout as e:
            failures.append(f"timed out waiting for {e}")
            emit(f"demo: timed out waiting for {e}")
        finally:
            self.cleanup()
        dt = time.monotonic() - t0
        if self.args.break_:                   # the self-test: exactly the resend is caught
            caught = len(failures) == 1 and failures[0].startswith("effects:")
            emit(f"\ndemo: --break lookup: {'caught' if caught else 'NOT caught as expected'}: "
                 + "; ".join(failures))
            return 0 if caught else 1
        if failures:
            emit(f"\ndemo: FAILED ({len(failures)}): " + "; ".join(failures))
            return 1
        emit(f"\ndemo: every count as expected ({dt:.1f} s)")
        return 0


def main():
    ap = argparse.ArgumentParser(description="the coord demo")
    ap.add_argument("--build", default=os.environ.get("BUILD_DIR", os.path.join(REPO, "build")))
    ap.add_argument("--keep", action="store_true", help="leave the broker running")
    ap.add_argument("--strict", action="store_true", help="fail instead of skipping a language")
    ap.add_argument("--leaders", default="c,node,py",
                    help="the outbox leaders, the first elected first (default c,node,py)")
    ap.add_argument("--break", dest="break_", choices=["lookup"],
                    help="a backend whose lookups by op id always say unknown (the test that "
                         "shows the checks fail)")
    args = ap.parse_args()
    args.leaders = args.leaders.split(",")
    if sorted(args.leaders) != ["c", "node", "py"]:
        ap.error("--leaders: an order of c, node and py")
    if not os.path.isabs(args.build):
        args.build = os.path.join(os.getcwd(), args.build)
    sys.exit(Demo(args).run())


if __name__ == "__main__":
    main()
