"""Where kernel lines come from: /dev/kmsg, `journalctl -k -f`, or a log file followed by offset.

Each source has one verb, `read()`, returning the complete lines that arrived since the last
call. A source that cannot be read raises OSError; the collector turns that into up=False.
"""

from __future__ import annotations

import errno
import os
import select
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Protocol

_CHUNK = 1 << 16


class LineSource(Protocol):
    def read(self) -> list[str]: ...

    def close(self) -> None: ...


class _Lines:
    """Splits a byte stream into lines, holding back a trailing partial line until its newline
    arrives (a writer may be caught mid-line)."""

    def __init__(self) -> None:
        self._tail = b""

    def push(self, data: bytes) -> list[str]:
        data = self._tail + data
        *done, self._tail = data.split(b"\n")
        return [d.decode("utf-8", "replace") for d in done]


class FileFollower:
    """Follows a log file by byte offset, like `tail -F`. Starts at the end by default so a
    restart does not replay old Xids as new. Rotation (a new inode at the path) drains the old
    file then starts the new one at 0; truncation (size below our offset) restarts at 0."""

    def __init__(self, path: Path, *, from_start: bool = False) -> None:
        self.path = path
        self._from_start = from_start
        self._fh: IO[bytes] | None = None
        self._ino: int | None = None
        self._lines = _Lines()

    def _open(self, at_end: bool) -> None:
        fh = self.path.open("rb")
        if at_end:
            fh.seek(0, os.SEEK_END)
        self._fh = fh
        self._ino = os.fstat(fh.fileno()).st_ino
        self._lines = _Lines()

    def read(self) -> list[str]:
        if self._fh is None:
            try:
                self._open(at_end=not self._from_start)
            finally:
                # Whatever appears at the path from now on (a file created after we started,
                # the next file after a rotation) is new: read it from its first byte.
                self._from_start = True
            assert self._fh is not None
        out: list[str] = []
        st = self.path.stat()  # raises when the path is gone (mid-rotation): reported as down
        if st.st_ino != self._ino:
            out += self._drain()  # lines written to the old file after our last read
            self._fh.close()
            self._open(at_end=False)
        elif st.st_size < self._fh.tell():
            self._fh.seek(0)
            self._lines = _Lines()
        return out + self._drain()

    def _drain(self) -> list[str]:
        assert self._fh is not None
        out: list[str] = []
        while chunk := self._fh.read(_CHUNK):
            out += self._lines.push(chunk)
        return out

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


class KmsgReader:
    """Non-blocking reader of /dev/kmsg. Opening seeks to the end (SEEK_END on kmsg skips the
    ring buffer) so the boot's old messages are not reported as new. Each read() of the device
    returns one record; a regular file (tests) returns many, so records are split on newlines."""

    def __init__(self, path: Path = Path("/dev/kmsg")) -> None:
        self.path = path
        self._fd: int | None = None
        self._lines = _Lines()
        self.lost = 0  # times the ring buffer overwrote records before we read them

    def read(self) -> list[str]:
        if self._fd is None:
            try:
                self._fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
            except PermissionError as e:  # kernel.dmesg_restrict=1, or a container's default
                raise PermissionError(e.errno, f"{e.strerror}: reading {self.path} needs "
                                      f"CAP_SYSLOG (root, or the container's cap_add: see the "
                                      f"node-agent service in docker-compose.yml)") from None
            os.lseek(self._fd, 0, os.SEEK_END)
        out: list[str] = []
        while True:
            try:
                data = os.read(self._fd, _CHUNK)
            except BlockingIOError:
                break
            except OSError as e:
                if e.errno == errno.EPIPE:  # overwritten: the next read resumes at the oldest
                    self.lost += 1
                    continue
                raise
            if not data:
                break
            # Continuation lines (" KEY=value" dictionary entries) belong to the record above.
            out += [ln for ln in self._lines.push(data) if not ln.startswith(" ")]
        return out

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


JOURNALCTL = ("journalctl", "-k", "-f", "-o", "short-iso", "-n", "0", "--no-pager")


class JournalFollower:
    """Runs `journalctl -k -f -o short-iso` once and reads what it printed since the last call,
    waiting at most `timeout_s` so a quiet journal never stalls a collection round. `-n 0` starts
    at the current end for the same reason kmsg does. The command is injectable for tests."""

    def __init__(
        self,
        argv: Sequence[str] = JOURNALCTL,
        *,
        timeout_s: float = 0.2,
        popen: Callable[..., subprocess.Popen[bytes]] = subprocess.Popen,
    ) -> None:
        self.argv = list(argv)
        self.timeout_s = timeout_s
        self._popen = popen
        self._proc: subprocess.Popen[bytes] | None = None
        self._lines = _Lines()
        self._exited: int | None = None  # exit status not yet reported

    def read(self) -> list[str]:
        if self._exited is not None:
            # Reported once as down; the next round starts journalctl again (-n 0: no replay).
            rc, self._exited = self._exited, None
            raise OSError(f"{self.argv[0]} exited with status {rc}")
        if self._proc is None:
            self._lines = _Lines()
            self._proc = self._popen(self.argv, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
            assert self._proc.stdout is not None
            os.set_blocking(self._proc.stdout.fileno(), False)
        stdout = self._proc.stdout
        assert stdout is not None
        out: list[str] = []
        deadline = time.monotonic() + self.timeout_s
        eof = False
        while True:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([stdout], [], [], max(left, 0.0))
            if not ready:
                break
            try:
                data = os.read(stdout.fileno(), _CHUNK)
            except BlockingIOError:
                continue
            if not data:
                eof = True
                break
            out += self._lines.push(data)
        if eof or self._proc.poll() is not None:
            if not eof:
                out += self._drain_rest(stdout)
            self._exited = self._proc.wait()
            self._proc = None
            if not out:
                return self.read()
        return out

    def _drain_rest(self, stdout: IO[bytes]) -> list[str]:
        out: list[str] = []
        while True:
            try:
                data = os.read(stdout.fileno(), _CHUNK)
            except BlockingIOError:
                return out
            if not data:
                return out
            out += self._lines.push(data)

    def close(self) -> None:
        if self._proc is not None:
            self._proc.terminate()
            self._proc.wait(timeout=5)
            self._proc = None
