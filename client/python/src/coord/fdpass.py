"""fdpass.py - descriptors over the broker's Unix socket (SCM_RIGHTS):
reading with the descriptors that came along, writing a frame with one,
and the asyncio transport that does both.

The wire rule (PROTOCOL.md, "Results by reference"): a frame that
carries a descriptor is written with one ``sendmsg`` whose data begins
with the frame's first byte (its length prefix) and whose SCM_RIGHTS
holds exactly that descriptor.  The receiver queues descriptors per
connection in arrival order, and a frame that declares one takes the
oldest (``Core.add_fds``): Linux hands a descriptor to the first read
that reaches the bytes it was sent with, so by the time a whole frame is
read its descriptor is queued.  Every read here is a ``recvmsg`` with
room for the descriptors and ``MSG_CMSG_CLOEXEC`` (they never leak into
a child); a control message cut short (``MSG_CTRUNC``: descriptors lost)
breaks the stream, as a bad frame would.

asyncio's own socket transport reads with ``recv`` (the kernel drops and
closes the descriptors), so the asyncio client runs on ``FdTransport``: a
small selector transport with the calls ``aio._AConn`` uses (write,
write_fd, close, abort, is_closing, get_extra_info, flow control through
``pause_writing`` / ``resume_writing``).
"""
from __future__ import annotations

import array
import asyncio
import os
import socket
from collections import deque
from typing import Any, Deque, List, Optional, Tuple

from .errors import ProtocolError

# The most one read takes (a larger frame takes several), for both
# clients.  Below glibc's mmap threshold (128 KiB): recvmsg allocates its
# buffer at this size and shrinks it to what came, and a 256 KiB one cost
# an mmap, an mremap and a munmap per read in any thread but the main one
# (strace), ~150 us of system time a lock cycle.
READ_SIZE = 65536

# Descriptors one read may bring: the protocol lets at most 4 wait
# unclaimed; room for a few more so that a broker breaking that rule is
# seen (Core refuses the fifth) rather than truncated.
MAX_FDS_PER_READ = 8
_CMSG_SPACE = socket.CMSG_SPACE(MAX_FDS_PER_READ * array.array("i").itemsize)
_FLAGS = getattr(socket, "MSG_CMSG_CLOEXEC", 0)


def recv_fds(sock: socket.socket, bufsize: int) -> Tuple[bytes, List[int]]:
    """One read: the bytes (b"" at EOF) and the descriptors that came with
    them (close-on-exec, the caller's).  OSError as ``recv``;
    ProtocolError when the kernel cut the descriptors short."""
    data, anc, flags, _ = sock.recvmsg(bufsize, _CMSG_SPACE, _FLAGS)
    fds: List[int] = []
    for level, kind, payload in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            a = array.array("i")
            a.frombytes(payload[:len(payload) - len(payload) % a.itemsize])
            fds.extend(a)
    if flags & socket.MSG_CTRUNC:
        for fd in fds:
            os.close(fd)
        raise ProtocolError("descriptors from the broker were cut short (MSG_CTRUNC)")
    return data, fds


def _rights(fd: int) -> List[Tuple[int, int, bytes]]:
    return [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]).tobytes())]


def send_frame_fd(sock: socket.socket, frame: bytes, fd: int) -> None:
    """Writes frame on a blocking socket with fd attached to its first
    byte (one sendmsg; the rest, if the kernel took part, after it)."""
    n = sock.sendmsg([frame], _rights(fd))
    if n < len(frame):
        sock.sendall(memoryview(frame)[n:])


class FdTransport(asyncio.Transport):
    """A Unix stream socket on the loop's selector: reads with
    ``recv_fds`` (the protocol's ``fds_received(fds)`` before its
    ``data_received``), writes whole frames in order, a frame given to
    ``write_fd`` with its descriptor on its first byte.  The socket is
    this transport's; it is closed after ``connection_lost``."""

    max_size = READ_SIZE
    high_water = 64 * 1024
    low_water = 16 * 1024

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket,
                 protocol: Any) -> None:
        super().__init__(extra={"socket": sock, "peername": sock.getpeername()})
        self._loop = loop
        self._sock = sock
        self._protocol = protocol
        # chunks to write, each with the descriptor (ours: a dup) to send
        # with its first byte
        self._buf: Deque[Tuple[memoryview, Optional[int]]] = deque()
        self._size = 0
        self._closing = False
        self._lost = False
        self._paused = False
        protocol.connection_made(self)
        loop.add_reader(sock.fileno(), self._read_ready)

    # ---- reading ----

    def _read_ready(self) -> None:
        if self._lost:
            return
        try:
            data, fds = recv_fds(self._sock, self.max_size)
        except (BlockingIOError, InterruptedError):
            return
        except ProtocolError as e:
            self._protocol.bad_stream(e)
            self.abort()
            return
        except OSError as e:
            self._force_close(e)
            return
        if fds:
            self._protocol.fds_received(fds)
        if data:
            self._protocol.data_received(data)
            return
        self._loop.remove_reader(self._sock.fileno())
        if not self._protocol.eof_received():
            self.close()

    # ---- writing ----

    def write(self, data: Any) -> None:
        if not self._buf and not self._closing and not self._lost:
            try:                                # the common case: all of it at once
                n = self._sock.send(data)
            except (BlockingIOError, InterruptedError):
                n = 0
            except OSError as e:
                self._force_close(e)
                return
            if n == len(data):
                return
            data = memoryview(data)[n:]
        self._write(memoryview(data).cast("B"), None)

    def write_fd(self, data: bytes, fd: int) -> None:
        """Writes data (one frame) with a duplicate of fd on its first
        byte; fd stays the caller's."""
        self._write(memoryview(data).cast("B"), os.dup(fd))

    def _write(self, view: memoryview, fd: Optional[int]) -> None:
        if self._closing or self._lost:
            if fd is not None:
                os.close(fd)
            return
        if not self._buf:
            try:
                n = self._send(view, fd)
            except (BlockingIOError, InterruptedError):
                n = 0
            except OSError as e:
                if fd is not None:
                    os.close(fd)
                self._force_close(e)
                return
            if n:
                if fd is not None:
                    os.close(fd)
                    fd = None
                view = view[n:]
            if not len(view):
                return
            self._loop.add_writer(self._sock.fileno(), self._write_ready)
        self._buf.append((view, fd))
        self._size += len(view)
        if not self._paused and self._size > self.high_water:
            self._paused = True
            self._protocol.pause_writing()

    def _send(self, view: memoryview, fd: Optional[int]) -> int:
        if fd is None:
            return self._sock.send(view)
        return self._sock.sendmsg([view], _rights(fd))

    def _write_ready(self) -> None:
        try:
            while self._buf:
                view, fd = self._buf[0]
                n = self._send(view, fd)
                if fd is not None:
                    os.close(fd)
                self._size -= n
                if n < len(view):
                    self._buf[0] = (view[n:], None)
                    break
                self._buf.popleft()
        except (BlockingIOError, InterruptedError):
            pass
        except OSError as e:
            self._force_close(e)
            return
        if self._paused and self._size <= self.low_water:
            self._paused = False
            self._protocol.resume_writing()
        if not self._buf:
            self._loop.remove_writer(self._sock.fileno())
            if self._closing:
                self._lose(None)

    def get_write_buffer_size(self) -> int:
        return self._size

    def can_write_eof(self) -> bool:
        return False

    # ---- closing ----

    def is_closing(self) -> bool:
        return self._closing or self._lost

    def close(self) -> None:
        if self._closing or self._lost:
            return
        self._closing = True
        self._loop.remove_reader(self._sock.fileno())
        if not self._buf:
            self._lose(None)

    def abort(self) -> None:
        self._force_close(None)

    def _force_close(self, exc: Optional[BaseException]) -> None:
        if self._lost:
            return
        self._closing = True
        self._drop()
        self._lose(exc)

    def _drop(self) -> None:
        for _, fd in self._buf:
            if fd is not None:
                os.close(fd)
        self._buf.clear()
        self._size = 0

    def _lose(self, exc: Optional[BaseException]) -> None:
        if self._lost:
            return
        self._lost = True
        fileno = self._sock.fileno()
        self._loop.remove_reader(fileno)
        self._loop.remove_writer(fileno)
        self._drop()
        self._loop.call_soon(self._connection_lost, exc)

    def _connection_lost(self, exc: Optional[BaseException]) -> None:
        try:
            self._protocol.connection_lost(exc)
        finally:
            self._sock.close()
