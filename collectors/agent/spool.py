"""A bounded on-disk spool of gzip segments, sent oldest first.

The agent writes every round here (gzip line protocol) before it tries to push it, so a service
or InfluxDB that is down loses nothing until the spool is full; then the oldest segments go
first (their loss is counted), because the newest data is what a health monitor needs most.
The relay (collectors.agent.relay) spools its merged bodies (gzip Arrow) the same way, under
its own suffix.

Segment sizes are kept in memory (read once at start): an outage that spools thousands of
segments costs one stat per segment, not one per segment per append.
"""

from __future__ import annotations

import gzip
import os
import re
from pathlib import Path

from collectors.compat import dataclass


@dataclass(slots=True)
class SpoolStats:
    segments: int = 0
    bytes: int = 0
    dropped_segments: int = 0  # lost to the size bound, oldest first


class Spool:
    def __init__(self, directory: str | os.PathLike[str], max_bytes: int = 256 << 20,
                 suffix: str = ".lp.gz") -> None:
        if max_bytes <= 0:
            raise ValueError("max_bytes must be positive")
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.max_bytes = max_bytes
        self.suffix = suffix
        self._segment = re.compile(r"^seg-(\d{12})" + re.escape(suffix) + "$")
        self.stats = SpoolStats()
        self._sizes: dict[int, int] = {}  # seq -> bytes, oldest first
        for seq in self._seqs():
            self._sizes[seq] = self._path(seq).stat().st_size
        self._next = (max(self._sizes) + 1) if self._sizes else 0
        self._refresh()

    def _seqs(self) -> list[int]:
        out = []
        for p in self.dir.iterdir():
            m = self._segment.match(p.name)
            if m:
                out.append(int(m.group(1)))
        return sorted(out)

    def _path(self, seq: int) -> Path:
        return self.dir / f"seg-{seq:012d}{self.suffix}"

    def _refresh(self) -> None:
        self.stats.segments = len(self._sizes)
        self.stats.bytes = sum(self._sizes.values())

    def append(self, lines: str) -> int:
        """Store one segment of line protocol, gzip-compressed; returns its sequence number."""
        return self.append_bytes(gzip.compress(lines.encode(), compresslevel=6, mtime=0))

    def append_bytes(self, data: bytes) -> int:
        """Store one segment as it is (written to a temporary name, then renamed, so a crash
        never leaves half a segment to be sent); returns its sequence number."""
        seq = self._next
        self._next += 1
        tmp = self.dir / f".tmp-{seq:012d}"
        tmp.write_bytes(data)
        os.replace(tmp, self._path(seq))
        self._sizes[seq] = len(data)
        self._refresh()
        while self.stats.bytes > self.max_bytes and self.stats.segments > 1:
            oldest = next(iter(self._sizes))
            self._path(oldest).unlink(missing_ok=True)
            del self._sizes[oldest]
            self.stats.dropped_segments += 1
            self._refresh()
        return seq

    def replace(self, seq: int, data: bytes) -> None:
        """A segment's bytes changed in place (the part a target has not taken yet), keeping
        its place in the order; written as append_bytes writes, never half a segment."""
        if seq not in self._sizes:
            return
        tmp = self.dir / f".tmp-{seq:012d}"
        tmp.write_bytes(data)
        os.replace(tmp, self._path(seq))
        self._sizes[seq] = len(data)
        self._refresh()

    def oldest(self) -> tuple[int, bytes] | None:
        got = self.first(1)
        return got[0] if got else None

    def first(self, n: int) -> list[tuple[int, bytes]]:
        """Up to `n` segments, oldest first."""
        out = []
        for seq in list(self._sizes)[:n]:
            try:
                out.append((seq, self._path(seq).read_bytes()))
            except FileNotFoundError:  # removed under us (by hand): forget it
                del self._sizes[seq]
                self._refresh()
        return out

    def remove(self, seq: int) -> None:
        self._path(seq).unlink(missing_ok=True)
        self._sizes.pop(seq, None)
        self._refresh()
