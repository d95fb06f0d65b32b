"""Every example of README.md runs against a real broker."""
import os
import subprocess
import sys

import pytest

from conftest import PKG, child_env

EXAMPLES = sorted(f for f in os.listdir(os.path.join(PKG, "examples")) if f.endswith(".py"))
EXPECT = {
    "lock.py": "busy: Timeout raised, block skipped",
    "lock_async.py": "waiter cancelled, pending: 0",
    "once.py": "b'token-abc' runs: 1",
    "leader.py": "incident responder leads while disabled: True",
    "outbox.py": "abandoned 43: True",
    "channels.py": "lifecycle: -locks released db-migrate",
    "stale.py": "served: b'config v1' stale revalidating",
    "backoff_async.py": "fallback: b'computed here' local",
    "request_key.py": "refused: header",
}


@pytest.mark.parametrize("name", EXAMPLES)
def test_example(broker, name):
    env = child_env()
    env["COORD_SOCKET"] = broker.socket
    env.pop("COORD_BROKER", None)
    env["PATH"] = "/nonexistent"            # never autostart another broker
    r = subprocess.run([sys.executable, os.path.join(PKG, "examples", name)], env=env,
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert EXPECT[name] in r.stdout, r.stdout


def test_every_example_is_checked():
    assert sorted(EXPECT) == EXAMPLES
