"""resultref.py - results by reference: the descriptor a caller receives
(``ResultRef``) and the sealed memfd an owner completes with
(``sealed_memfd``).

A flight's owner may complete with a descriptor instead of the bytes: a
memfd sealed against writing, shrinking and growing, passed over the Unix
socket with SCM_RIGHTS (``fdpass.py``).  The bytes never go through the
broker's buffers, and the size limit is the broker's ``max_ref_bytes``
(hello), not ``max_frame``.  Whoever receives such a result (a follower,
a stale or record read) gets its own read-only descriptor of the same
bytes at offset 0: a ``ResultRef``.

Ownership: a ``ResultRef`` owns its descriptor.  Close it (``close()``,
or ``with ref:``); ``detach()`` hands the descriptor to the caller, who
then closes it.  One that is garbage-collected unclosed closes it then (a
safety net, as for Python's files; do not count on its timing).  A mmap
made by ``mmap()`` stays valid after the ``ResultRef`` is closed (it holds
the pages, not the descriptor) until the mmap is closed itself.
"""
from __future__ import annotations

import fcntl
import mmap as _mmap
import os
from typing import Any, List, Optional, Union

# The seals a result by reference must carry (PROTOCOL.md, "Results by
# reference"); F_SEAL_SEAL as well: nobody can lift them afterwards.
SEALS = fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL

_CHUNK = 1 << 20
# The most one read(2) returns on Linux is just under 2 GiB.
_MAX_READ = 1 << 30


def sealed_memfd(data: Union[bytes, bytearray, memoryview], name: str = "coord-result") -> int:
    """A new memfd (close-on-exec) holding data, sealed read-only; the
    caller owns the descriptor (closes it).  What ``complete_fd`` sends;
    ``complete`` makes one itself when it sends a result by reference."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        view = memoryview(data).cast("B")
        if len(view):
            os.ftruncate(fd, len(view))
            done = 0
            while done < len(view):
                done += os.pwrite(fd, view[done:done + _MAX_READ], done)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, SEALS)
    except BaseException:
        os.close(fd)
        raise
    return fd


def fd_of(f: Any) -> int:
    """The descriptor of f: an int, or an object with ``fileno()``."""
    if isinstance(f, int) and not isinstance(f, bool):
        return f
    fileno = getattr(f, "fileno", None)
    if fileno is None:
        raise TypeError(f"expected a descriptor (int or an object with fileno()), not {f!r}")
    n = fileno()
    if not isinstance(n, int):
        raise TypeError("fileno() did not return an int")
    return n


class ResultRef:
    """A result by reference: ``size`` bytes behind a read-only
    descriptor the caller owns (see the module's comment).

    ``fileno()``   the descriptor (still owned by this object);
    ``read(n)``    up to n bytes (all the rest when n < 0) from the
                   descriptor's own offset, which starts at 0 and is this
                   receiver's alone;
    ``value()``    the whole result as bytes, from offset 0 (pread: the
                   offset of ``read`` is not moved);
    ``mmap()``     a read-only ``mmap.mmap`` of the result (no copy);
    ``detach()``   gives the descriptor away (the caller closes it);
    ``close()``    closes it (also ``with ref: ...``).
    """

    __slots__ = ("_fd", "size")

    def __init__(self, fd: int, size: int) -> None:
        self._fd: Optional[int] = fd
        self.size = size

    @property
    def closed(self) -> bool:
        """True once closed or detached."""
        return self._fd is None

    def fileno(self) -> int:
        """The descriptor (still this object's; ValueError when closed)."""
        if self._fd is None:
            raise ValueError("I/O operation on a closed ResultRef")
        return self._fd

    def read(self, n: int = -1) -> bytes:
        """Up to n bytes (n < 0: until the end) from the current offset."""
        fd = self.fileno()
        if n >= 0:
            return os.read(fd, n)
        left = self.size - os.lseek(fd, 0, os.SEEK_CUR)
        parts: List[bytes] = []
        while True:
            b = os.read(fd, min(_MAX_READ, max(left, _CHUNK)))
            if not b:
                return b"".join(parts)
            parts.append(b)

    def value(self) -> bytes:
        """The whole result (``size`` bytes), read from offset 0."""
        fd = self.fileno()
        parts: List[bytes] = []
        off = 0
        while off < self.size:
            # as much as one read takes: one copy into the bytes, no join
            b = os.pread(fd, min(_MAX_READ, self.size - off), off)
            if not b:
                raise OSError(f"result by reference ends at {off} of {self.size} bytes")
            parts.append(b)
            off += len(b)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def mmap(self) -> "_mmap.mmap":
        """A read-only mapping of the result; ValueError when it is empty
        (nothing to map: ``value()`` is b"")."""
        if self.size == 0:
            raise ValueError("cannot map an empty result")
        return _mmap.mmap(self.fileno(), self.size, prot=_mmap.PROT_READ)

    def detach(self) -> int:
        """The descriptor, now the caller's to close; this object is
        closed."""
        fd = self.fileno()
        self._fd = None
        return fd

    def close(self) -> None:
        """Closes the descriptor (again: nothing)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def __enter__(self) -> "ResultRef":
        return self

    def __exit__(self, *a: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        state = "closed" if self._fd is None else f"fd={self._fd}"
        return f"<coord.ResultRef size={self.size} {state}>"
