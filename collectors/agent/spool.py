"""A bounded on-disk spool of gzip line-protocol segments, sent oldest first.

The agent writes every round here before it tries to push it, so a service or InfluxDB that is
down loses nothing until the spool is full; then the oldest segments go first (their loss is
counted), because the newest data is what a health monitor needs most.
"""

from __future__ import annotations

import gzip
import os
import re
from dataclasses import dataclass
from pathlib import Path

_SEGMENT = re.compile(r"^seg-(\d{12})\.lp\.gz$")


@dataclass(slots=True)
class SpoolStats:
    segments: int = 0
    bytes: int = 0
    dropped_segments: int = 0  # lost to the size bound, oldest first


class Spool:
    def __init__(self, directory: str | os.PathLike[str], max_bytes: int = 256 << 20) -> None:
        if max_bytes <= 0:
            raise ValueError("max_bytes must be positive")
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.max_bytes = max_bytes
        self.stats = SpoolStats()
        seqs = self._seqs()
        self._next = (seqs[-1] + 1) if seqs else 0
        self._refresh()

    def _seqs(self) -> list[int]:
        out = []
        for p in self.dir.iterdir():
            m = _SEGMENT.match(p.name)
            if m:
                out.append(int(m.group(1)))
        return sorted(out)

    def _path(self, seq: int) -> Path:
        return self.dir / f"seg-{seq:012d}.lp.gz"

    def _refresh(self) -> None:
        seqs = self._seqs()
        self.stats.segments = len(seqs)
        self.stats.bytes = sum(self._path(s).stat().st_size for s in seqs)

    def append(self, lines: str) -> int:
        """Store one segment (written to a temporary name, then renamed, so a crash never
        leaves half a segment to be sent); returns its sequence number."""
        seq = self._next
        self._next += 1
        tmp = self.dir / f".tmp-{seq:012d}"
        tmp.write_bytes(gzip.compress(lines.encode(), compresslevel=6, mtime=0))
        os.replace(tmp, self._path(seq))
        self._refresh()
        while self.stats.bytes > self.max_bytes and self.stats.segments > 1:
            oldest = self._seqs()[0]
            self._path(oldest).unlink()
            self.stats.dropped_segments += 1
            self._refresh()
        return seq

    def oldest(self) -> tuple[int, bytes] | None:
        seqs = self._seqs()
        if not seqs:
            return None
        return seqs[0], self._path(seqs[0]).read_bytes()

    def remove(self, seq: int) -> None:
        self._path(seq).unlink(missing_ok=True)
        self._refresh()
