"""fakebroker.py - a scripted broker for the tests of the client's edges:
a Unix-socket server (a thread in the test process) that speaks just
enough protocol v1 for one scenario, so that what a real broker never does
(or does only by chance of timing) happens every run: a reply and an event
in ONE send, a huge announced max_frame, a frame of garbage, an event
flood, silence after hello, a refusal before hello.

``FakeBroker(handler)`` listens on a fresh socket path (``.socket``) and
runs ``handler(peer)`` in a thread of its own for each connection;
``Peer.request()`` reads one request (a dict), ``Peer.send(*msgs)``
writes the frames of all msgs with one ``sendall`` (one read for the
client as long as they fit its read size), ``Peer.hello()`` answers the
hello.  ``close()`` stops it and closes every connection.  Peers read
with ``recvmsg``: descriptors the client sends with a frame are kept in
``Peer.fds`` (the test closes them); ``Peer.send_fd`` writes a frame with
one (results by reference).
"""
from __future__ import annotations

import array
import os
import socket
import struct
import tempfile
import threading
from typing import Any, Callable, Dict, List, Optional

import msgpack


def frame(msg: Dict[str, Any]) -> bytes:
    body = msgpack.packb(msg, use_bin_type=True)
    return struct.pack(">I", len(body)) + body


class Peer:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._buf = b""
        self.conn_id = 0
        self.fds: List[int] = []

    def _recv(self) -> bytes:
        data, anc, _, _ = self.sock.recvmsg(65536, socket.CMSG_SPACE(16 * 4))
        for level, kind, payload in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                a = array.array("i")
                a.frombytes(payload[:len(payload) - len(payload) % 4])
                self.fds.extend(a)
        return data

    def _need(self, n: int) -> Optional[bytes]:
        while len(self._buf) < n:
            try:
                chunk = self._recv()
            except OSError:
                return None
            if not chunk:
                return None
            self._buf += chunk
        out, self._buf = self._buf[:n], self._buf[n:]
        return out

    def request(self) -> Optional[Dict[str, Any]]:
        """The next request, or None once the client closed."""
        h = self._need(4)
        if h is None:
            return None
        body = self._need(struct.unpack(">I", h)[0])
        if body is None:
            return None
        return msgpack.unpackb(body, raw=False)

    def send(self, *msgs: Any) -> None:
        """Every message (dict, or raw bytes) in one write."""
        self.sock.sendall(b"".join(m if isinstance(m, bytes) else frame(m) for m in msgs))

    def send_fd(self, msg: Any, *fds: int) -> None:
        """One frame (dict or raw bytes) with fds attached to its first
        byte, in one sendmsg."""
        data = msg if isinstance(msg, bytes) else frame(msg)
        anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds).tobytes())]
        n = self.sock.sendmsg([data], anc if fds else [])
        if n < len(data):
            self.sock.sendall(data[n:])

    def reply(self, req: Dict[str, Any], **fields: Any) -> Dict[str, Any]:
        return dict(rid=req["rid"], ok=True, **fields)

    def hello(self, max_frame: int = 1 << 20, **extra: Any) -> Dict[str, Any]:
        """Reads the hello and answers it."""
        req = self.request()
        assert req is not None and req["op"] == "hello", req
        self.send(self.reply(req, proto=1, broker="fake 0", conn=7, epoch=1,
                             max_frame=max_frame, **extra))
        return req

    def serve(self, answers: Optional[Dict[str, Callable[[Dict[str, Any]], Any]]] = None
              ) -> None:
        """Answers requests until the client goes: ``answers[op](req)``
        returns the message(s) to send (a dict, or a list for one write);
        ops not in answers get ``{ok: true}``."""
        answers = answers or {}
        while True:
            req = self.request()
            if req is None:
                return
            fn = answers.get(req["op"])
            out = fn(req) if fn else self.reply(req)
            if out is None:
                continue
            self.send(*(out if isinstance(out, list) else [out]))

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


class FakeBroker:
    def __init__(self, handler: Callable[[Peer], None]) -> None:
        self.dir = tempfile.mkdtemp(prefix="coordfake-", dir="/tmp")
        os.chmod(self.dir, 0o700)
        self.socket = os.path.join(self.dir, "broker.sock")
        self.handler = handler
        self.errors: List[BaseException] = []
        self.peers: List[Peer] = []
        self.accepted = 0
        self._ls = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._ls.bind(self.socket)
        self._ls.listen(16)
        self._stop = False
        self._threads: List[threading.Thread] = []
        self._acceptor = threading.Thread(target=self._accept, daemon=True)
        self._acceptor.start()

    def _accept(self) -> None:
        while True:
            try:
                s, _ = self._ls.accept()
            except OSError:
                return
            if self._stop:
                s.close()
                return
            self.accepted += 1
            p = Peer(s)
            self.peers.append(p)
            t = threading.Thread(target=self._run, args=(p,), daemon=True)
            self._threads.append(t)
            t.start()

    def _run(self, p: Peer) -> None:
        try:
            self.handler(p)
        except (BrokenPipeError, ConnectionResetError):
            pass
        except OSError:
            if not self._stop:          # closed under it by close(): fine
                raise
        except BaseException as e:      # reported by close()
            self.errors.append(e)

    def close(self) -> None:
        self._stop = True
        try:
            socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).connect(self.socket)
        except OSError:
            pass
        self._ls.close()
        for p in self.peers:
            try:
                p.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            p.close()
        for t in self._threads:
            t.join(5)
        try:
            os.unlink(self.socket)
            os.rmdir(self.dir)
        except OSError:
            pass
        if self.errors:
            raise self.errors[0]

    def __enter__(self) -> "FakeBroker":
        return self

    def __exit__(self, *a: Any) -> None:
        self.close()
