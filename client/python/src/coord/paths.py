"""paths.py - finding the broker as libcoord does (client/connect.c,
protocol/paths.c): the socket path, the private-directory check, the
broker binary, autostart, the peer check and the hello identity.

Blocking helpers; the asyncio client runs the autostart part in an
executor.  Autostart: when nothing listens on the socket (ENOENT or
ECONNREFUSED), ``coordd --foreground --socket PATH --idle-exit S
--ready-fd N`` is started in its own session with /dev/null as
stdin/stdout/stderr, and we wait for "ready\\n" on the pipe N (a broker
that cannot start writes "error REASON\\n" there instead: we raise it).
The broker is our child (Python cannot safely double-fork with threads
running), so a daemon thread reaps it; it outlives us like libcoord's.
"""
from __future__ import annotations

import errno
import os
import secrets
import select
import socket
import stat
import struct
import subprocess
import sys
import threading
import time
from typing import Optional

from .errors import ConnectError

SOCKET_PATH_MAX = 107           # sun_path minus its NUL
DEFAULT_IDLE_EXIT = 60          # seconds an autostarted broker stays idle
DEFAULT_CONNECT_TIMEOUT = 2.0   # seconds: connect (and autostart) budget
MIN_HELLO_TIMEOUT = 5.0         # the broker allows 5 s for hello
MAX_BACKOFF = 0.05              # between connect attempts (full backlog)


def default_socket_path() -> str:
    """$COORD_SOCKET, else $XDG_RUNTIME_DIR/coord/broker.sock, else
    /tmp/coord-$UID/broker.sock."""
    v = os.environ.get("COORD_SOCKET")
    if v:
        return v
    v = os.environ.get("XDG_RUNTIME_DIR")
    if v:
        return f"{v}/coord/broker.sock"
    return f"/tmp/coord-{os.getuid()}/broker.sock"


def check_socket_path(path: str) -> str:
    n = len(os.fsencode(path))
    if n == 0 or n > SOCKET_PATH_MAX:
        raise ConnectError(f"socket path must be 1..{SOCKET_PATH_MAX} bytes, not {n}")
    return path


def prepare_private_dir(d: str) -> None:
    """Creates d (0700, parents too) if absent; then it must be a directory
    of ours that group and others cannot write (as tmux checks)."""
    try:
        st = os.lstat(d)
    except FileNotFoundError:
        try:
            os.makedirs(d, mode=0o700, exist_ok=True)
            st = os.lstat(d)
        except OSError as e:
            raise ConnectError(f"cannot create {d}: {e.strerror}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise ConnectError(f"{d} is not a directory")
    if st.st_uid != os.getuid():
        raise ConnectError(f"{d} is owned by uid {st.st_uid}, not by uid {os.getuid()}")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise ConnectError(f"{d} is writable by group or others "
                           f"(mode {stat.S_IMODE(st.st_mode):03o})")


def resolve_broker(name: Optional[str] = None) -> str:
    """The broker to start: ``name``, else $COORD_BROKER, else "coordd";
    as is when it holds a slash, else searched in $PATH."""
    name = name or os.environ.get("COORD_BROKER") or "coordd"
    if "/" in name:
        return name
    path = os.environ.get("PATH") or "/usr/local/bin:/usr/bin:/bin"
    for d in path.split(":"):
        cand = os.path.join(d or ".", name)
        if os.access(cand, os.X_OK) and os.path.isfile(cand):
            return cand
    raise ConnectError(f"cannot start the broker: {name} not found in PATH")


def _reap(p: "subprocess.Popen[bytes]") -> None:
    try:
        p.wait()
    except Exception:
        pass


def spawn_broker(broker: str, sock_path: str, idle_exit: int) -> int:
    """Starts the broker detached; returns the read end of its ready pipe."""
    r, w = os.pipe()
    try:
        p = subprocess.Popen(
            [broker, "--foreground", "--socket", sock_path,
             "--idle-exit", str(idle_exit), "--ready-fd", str(w)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, pass_fds=(w,), start_new_session=True,
            close_fds=True)
    except OSError as e:
        os.close(r)
        raise ConnectError(f"cannot start the broker {broker}: {e.strerror}") from None
    finally:
        os.close(w)
    threading.Thread(target=_reap, args=(p,), name="coord-broker-reaper",
                     daemon=True).start()
    return r


# The longest line a starting broker writes to its ready fd (paths.h).
READY_LINE_MAX = 1024


def await_ready(rfd: int, deadline: float, path: str = "") -> bool:
    """True once "ready\\n" came on rfd; False on EOF (another broker won the
    race, or the lock beside the socket was still held by a broker that is
    leaving) or when the deadline passed.  A broker that cannot start says
    "error REASON\\n" first: ConnectError with that reason."""
    buf = b""
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            rl, _, _ = select.select([rfd], [], [], left)
            if not rl:
                return False
            chunk = os.read(rfd, READY_LINE_MAX)
            buf += chunk
            if b"ready\n" in buf:
                return True
            whole = not chunk or b"\n" in buf or len(buf) >= READY_LINE_MAX
            if buf.startswith(b"error ") and whole:
                reason = buf[6:READY_LINE_MAX].split(b"\n", 1)[0]
                raise ConnectError(f"the broker for {path} did not start: "
                                   f"{reason.decode('utf-8', 'replace')}")
            if not chunk or len(buf) >= READY_LINE_MAX:
                return False
    finally:
        os.close(rfd)


def check_peer(sock: socket.socket, path: str) -> None:
    """The broker must run as our uid: anything else on our path must not
    get our requests."""
    fmt = "3i"
    try:
        cred = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                               struct.calcsize(fmt))
    except OSError as e:
        raise ConnectError(f"SO_PEERCRED on {path}: {e.strerror}") from None
    _pid, uid, _gid = struct.unpack(fmt, cred)
    if uid != os.getuid():
        raise ConnectError(f"the broker at {path} runs as uid {uid}, "
                           f"not as uid {os.getuid()}: refusing it")


# Brokers one connect may start: one that exits at once (the lock beside the
# socket still held by a broker that is dying) is started again.
MAX_SPAWNS = 8


def autostart(path: str, broker: Optional[str], idle_exit: int, deadline: float) -> bool:
    """Prepares the socket directory, starts the broker, waits for ready
    (or EOF: someone else's broker may be coming up).  True once ready;
    ConnectError with the broker's reason when it cannot start."""
    prepare_private_dir(os.path.dirname(path) or ".")
    exe = resolve_broker(broker)
    rfd = spawn_broker(exe, path, idle_exit)
    return await_ready(rfd, deadline, path)


class Dial:
    """One connect's attempts, without I/O (the blocking ``open_socket``
    and the asyncio client's connect share it): after each failed
    attempt, whether to start the broker, how long to wait, and when to
    give up."""

    def __init__(self, path: str, *, autostart_ok: bool, timeout: float) -> None:
        check_socket_path(path)
        self.path = path
        self.autostart_ok = autostart_ok
        self.timeout = timeout
        self.deadline = time.monotonic() + timeout
        self._backoff = 0.001
        self._spawned = False
        self._spawns = 0

    def failed(self, e: OSError) -> bool:
        """An attempt failed: True to start the broker now (then
        ``started``), else wait ``pause(e)``; ``ConnectError`` when no
        broker can be had this way."""
        if e.errno in (errno.ENOENT, errno.ECONNREFUSED):
            if not self.autostart_ok:
                raise ConnectError(f"no broker at {self.path}: {e.strerror}") from None
            if not self._spawned and self._spawns < MAX_SPAWNS:
                self._spawned = True
                self._spawns += 1
                return True
        elif e.errno not in (errno.EAGAIN, errno.EWOULDBLOCK, errno.EINTR):
            raise ConnectError(f"cannot connect to {self.path}: {e.strerror}") from None
        return False

    def started(self, ready: bool) -> bool:
        """The broker started by ``autostart``: True when it is ready
        (connect again at once); False when it exited (nobody listens yet:
        wait, try again, start another)."""
        if not ready:
            self._spawned = False
        return ready

    def pause(self, e: OSError) -> float:
        """Seconds to wait before the next attempt; ``ConnectError`` once
        the timeout passed."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            if self._spawned:
                raise ConnectError(f"the broker started for {self.path} did not "
                                   f"answer within {self.timeout:g} s") from None
            raise ConnectError(f"the broker at {self.path} did not accept within "
                               f"{self.timeout:g} s ({e.strerror})") from None
        p = min(self._backoff, left)
        self._backoff = min(self._backoff * 2, MAX_BACKOFF)
        return p


def open_socket(path: str, *, autostart_ok: bool, broker: Optional[str],
                idle_exit: int, timeout: float) -> socket.socket:
    """A connected, peer-checked, blocking socket to the broker at path."""
    d = Dial(path, autostart_ok=autostart_ok, timeout=timeout)
    while True:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        s.setblocking(False)
        try:
            s.connect(path)
            break
        except OSError as e:
            s.close()
            if d.failed(e) and d.started(autostart(path, broker, idle_exit, d.deadline)):
                continue
            time.sleep(d.pause(e))
    s.setblocking(True)
    try:
        check_peer(s, path)
    except BaseException:
        s.close()
        raise
    return s


_instance_lock = threading.Lock()
_instance: Optional[str] = None
_instance_pid = -1


def instance_id() -> str:
    """128 random bits in hex, new in every process (re-made after fork)."""
    global _instance, _instance_pid
    with _instance_lock:
        if _instance is None or _instance_pid != os.getpid():
            _instance = secrets.token_hex(16)
            _instance_pid = os.getpid()
        return _instance


def program_name() -> str:
    """The default client name: the script's name, like libcoord's
    program_invocation_short_name."""
    argv0 = sys.argv[0] if sys.argv and sys.argv[0] else "python"
    if argv0 in ("-c", "-m", ""):
        return "python"
    return os.path.basename(argv0)[:256]
