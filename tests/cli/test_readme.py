"""test_readme.py - the README's tour runs as written and prints what it
shows (the test 'cli-readme').  Every ```console block of "A one-minute
tour" is a transcript: `$ COMMAND` lines, each followed by what it prints
(stdout and stderr).  The commands run in order, in one temp dir, with
coordctl on PATH and nothing else set up, as a new user would type them:
the broker is autostarted by the first one.  In the expected text `...`
stands for any text within a line, and a line of just `...` for any
number of lines; runs of spaces count as one (tables align to their
values).  A command that puts something in the background (`&`) may print
in any order, so its lines are compared as a multiset."""
import json
import os
import re
import shutil
import subprocess
import tempfile

COORDD = os.environ["COORDD"]
COORDCTL = os.environ["COORDCTL"]
SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def transcripts():
    text = open(os.path.join(SRC, "README.md")).read()
    tour = text.split("## A one-minute tour", 1)[1].split("\n## ", 1)[0]
    steps = []
    for block in re.findall(r"```console\n(.*?)```", tour, re.S):
        for line in block.splitlines():
            if line.startswith("$ "):
                steps.append([line[2:], []])
            else:
                assert steps, f"output before any command: {line!r}"
                steps[-1][1].append(line)
    return steps


def norm(line):
    return re.sub(r"\s+", " ", line.strip())


def line_re(expected):
    return re.compile("^" + ".*".join(re.escape(p) for p in norm(expected).split("...")) + "$")


def matches(expected, actual):
    """Ordered match with `...` lines as gaps of any length."""
    if not expected:
        return not actual
    if expected[0].strip() == "...":
        return any(matches(expected[1:], actual[i:]) for i in range(len(actual) + 1))
    return bool(actual) and bool(line_re(expected[0]).match(norm(actual[0]))) and \
        matches(expected[1:], actual[1:])


def matches_any_order(expected, actual):
    left = list(actual)
    for e in expected:
        for i, a in enumerate(left):
            if line_re(e).match(norm(a)):
                del left[i]
                break
        else:
            return False
    return not left


def test_the_tour_runs_as_written():
    steps = transcripts()
    assert len(steps) >= 10, "the tour lost its console blocks"
    work = tempfile.mkdtemp(prefix="coord-readme.")
    os.chmod(work, 0o700)
    bindir = os.path.join(work, "bin")
    os.mkdir(bindir)
    os.symlink(os.path.abspath(COORDCTL), os.path.join(bindir, "coordctl"))
    cwd = os.path.join(work, "cwd")
    os.mkdir(cwd)
    env = {k: v for k, v in os.environ.items() if not k.startswith("COORD_")}
    env.update(PATH=bindir + ":/usr/bin:/bin", HOME=work,
               XDG_RUNTIME_DIR=os.path.join(work, "xdg-run"),
               XDG_STATE_HOME=os.path.join(work, "state"))
    os.makedirs(env["XDG_RUNTIME_DIR"], mode=0o700)
    try:
        for cmd, expected in steps:
            r = subprocess.run(["bash", "-c", cmd], cwd=cwd, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, timeout=60)
            actual = r.stdout.splitlines()
            background = re.search(r"(?<![&])&(?![&])", cmd) is not None
            ok = (matches_any_order if background else matches)(expected, actual)
            assert ok, (f"$ {cmd}\nprinted (exit {r.returncode}):\n{r.stdout}\n"
                        f"the README says:\n" + "\n".join(expected))
    finally:
        st = subprocess.run([COORDCTL, "--no-autostart", "--json", "status"], env=env,
                            capture_output=True, text=True)
        if st.returncode == 0:
            os.kill(json.loads(st.stdout)["pid"], 15)
        shutil.rmtree(work, ignore_errors=True)
