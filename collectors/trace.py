"""The trace format: line-protocol files (plain or gzip) plus an optional labels.jsonl.

A trace is a directory of `*.lp` / `*.lp.gz` files, or one such file. Each file is in time order
and the files sort by name in time order, so a reader streams them one chunk of lines at a time
and groups the points into rounds (one timestamp bucket each) without holding the trace in
memory. Everything goes through collectors.schema, so Telegraf output and InfluxDB exports
(`influx_inspect export`) replay as well as our own traces. docs/trace-format.md has the details;
the labels themselves (their format and validation) are collectors.labels.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import zlib
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import IO, NamedTuple

from collectors.frames import Batch, Rejection
from collectors.labels import Label, load_labels
from collectors.lineprotocol import PRECISION_NS, Point, parse
from collectors.schema import SchemaMapper, batch_to_lines

LABELS_FILE = "labels.jsonl"
SUFFIXES = (".lp", ".lp.gz")
_GZIP_MAGIC = b"\x1f\x8b"
# `influx_inspect export` opens with DDL statements that are not line protocol.
_DDL = (b"CREATE DATABASE ", b"CREATE RETENTION POLICY ")


# ---- writing ---------------------------------------------------------------------------------

class TraceWriter:
    """Writes Batches as line protocol into `directory`, starting a new file every
    `rotate_rows` lines (at a batch boundary). Write batches in time order."""

    def __init__(self, directory: str | os.PathLike[str], *, gzip: bool = True,
                 rotate_rows: int = 1_000_000, prefix: str = "trace") -> None:
        if rotate_rows < 1:
            raise ValueError("rotate_rows must be at least 1")
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._gzip = gzip
        self._rotate = rotate_rows
        self._prefix = prefix
        # Continue after existing parts so that name order stays time order.
        taken = [_part_number(p.name, prefix) for p in self.directory.iterdir()]
        self._next = max((n for n in taken if n is not None), default=-1) + 1
        self._file: IO[str] | None = None
        self._rows = 0
        self._labels: IO[str] | None = None
        self.files: list[Path] = []

    def write(self, batch: Batch) -> int:
        """Append one batch; returns the number of lines written."""
        lines = list(batch_to_lines(batch))
        if not lines:
            return 0
        if self._file is None:
            self._open()
        assert self._file is not None
        self._file.write("\n".join(lines) + "\n")
        self._rows += len(lines)
        if self._rows >= self._rotate:
            self._close_file()
        return len(lines)

    def add_label(self, label: Label) -> None:
        if self._labels is None:
            self._labels = open(self.directory / LABELS_FILE, "a", encoding="utf-8")  # noqa: SIM115
        self._labels.write(json.dumps(label.to_dict()) + "\n")
        self._labels.flush()

    def close(self) -> None:
        self._close_file()
        if self._labels is not None:
            self._labels.close()
            self._labels = None

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def _open(self) -> None:
        name = f"{self._prefix}-{self._next:06d}{SUFFIXES[1] if self._gzip else SUFFIXES[0]}"
        path = self.directory / name
        self._next += 1
        self._rows = 0
        # Level 6 (not gzip's 9) keeps writing fast; line protocol compresses well either way.
        # mtime=0: the gzip header carries no clock, so the same trace is the same bytes.
        if self._gzip:
            raw = gzip.GzipFile(path, "wb", compresslevel=6, mtime=0)
            self._file = io.TextIOWrapper(raw, encoding="utf-8")
        else:
            self._file = open(path, "w", encoding="utf-8")  # noqa: SIM115
        self.files.append(path)

    def _close_file(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def _part_number(name: str, prefix: str) -> int | None:
    for suffix in SUFFIXES:
        if name.startswith(prefix + "-") and name.endswith(suffix):
            digits = name[len(prefix) + 1: -len(suffix)]
            return int(digits) if (digits.isascii() and digits.isdigit()) else None
    return None


# ---- reading ---------------------------------------------------------------------------------

class Round(NamedTuple):
    """One timestamp bucket of a trace; `time` is the bucket start (epoch seconds), None only
    for a tail of lines that carried no usable timestamp."""

    time: float | None
    batch: Batch


class TraceReader:
    """Streams a trace as rounds, in time order, `chunk_lines` lines at a time."""

    def __init__(self, path: str | os.PathLike[str], *, step_s: float = 5.0,
                 precision: str = "ns", strict: bool = True, chunk_lines: int = 20_000,
                 mapper: SchemaMapper | None = None) -> None:
        if step_s <= 0:
            raise ValueError("step_s must be positive")
        if chunk_lines < 1:
            raise ValueError("chunk_lines must be at least 1")
        if precision not in PRECISION_NS:
            raise ValueError(f"unknown precision {precision!r}; expected one of "
                             f"{', '.join(PRECISION_NS)}")
        self.path = Path(path)
        if self.path.is_dir():
            self.files = sorted(p for p in self.path.iterdir()
                                if p.is_file() and p.name.endswith(SUFFIXES))
            if not self.files:
                raise FileNotFoundError(f"no *.lp or *.lp.gz files in {self.path}")
        elif self.path.is_file():
            self.files = [self.path]
        else:
            raise FileNotFoundError(f"no trace at {self.path}")
        self.step_s = step_s
        self.precision = precision
        self.chunk_lines = chunk_lines
        self.mapper = mapper if mapper is not None else SchemaMapper(strict=strict)
        self._step_ns = round(step_s * 1e9)

    def labels(self) -> list[Label]:
        p = self.path / LABELS_FILE
        return load_labels(p) if self.path.is_dir() and p.exists() else []

    def __iter__(self) -> Iterator[Batch]:
        return (r.batch for r in self.rounds())

    def rounds(self) -> Iterator[Round]:
        bucket: int | None = None
        points: list[Point] = []
        rejected: list[Rejection] = []
        for chunk_points, chunk_rejected in self._chunks():
            pending = iter(chunk_rejected)  # both lists are in line order: interleave them
            nxt = next(pending, None)
            for p in chunk_points:
                while nxt is not None and (nxt.line or 0) < p.line:
                    rejected.append(nxt)
                    nxt = next(pending, None)
                if p.ts_ns is not None:
                    b = p.ts_ns // self._step_ns
                    if bucket is None:
                        bucket = b
                    elif b > bucket:  # a point from an earlier bucket joins the current round
                        yield self._round(bucket, points, rejected)
                        bucket, points, rejected = b, [], []
                points.append(p)
            if nxt is not None:
                rejected.append(nxt)
                rejected.extend(pending)
        if points or rejected:
            yield self._round(bucket, points, rejected)

    def _round(self, bucket: int | None, points: list[Point], rejected: list[Rejection]) -> Round:
        time = None if bucket is None else bucket * self._step_ns / 1e9
        return Round(time, self.mapper.to_batch(points, rejected))

    def _chunks(self) -> Iterator[tuple[list[Point], list[Rejection]]]:
        for path in self.files:
            line = 0
            for chunk, error in _read(path, self.chunk_lines):
                if chunk:
                    data = b"".join(b"\n" if raw.startswith(_DDL) else raw for raw in chunk)
                    first, line = line + 1, line + len(chunk)
                    yield parse(data, first_line=first, max_lines=None, max_bytes=None,
                                precision=self.precision, source=path.name)
                if error:
                    reason = f"{path.name}: unreadable after line {line}, rest skipped: {error}"
                    yield [], [Rejection(reason, line + 1)]


def _read(path: Path, n: int) -> Iterator[tuple[list[bytes], str]]:
    """Chunks of at most n lines, then an error message if the file is truncated or corrupt.
    (GzipFile raises before it would hand out a torn last line, so what comes is whole.)"""
    try:
        f = _open(path)
    except OSError as exc:
        yield [], str(exc)
        return
    with f:
        while True:
            chunk: list[bytes] = []
            error = ""
            try:
                for raw in f:
                    chunk.append(raw)
                    if len(chunk) == n:
                        break
            except (OSError, EOFError, zlib.error) as exc:
                error = str(exc) or type(exc).__name__
            yield chunk, error
            if error or len(chunk) < n:
                return


def _open(path: Path) -> io.BufferedIOBase:
    with open(path, "rb") as f:
        magic = f.read(2)
    return gzip.GzipFile(path, "rb") if magic == _GZIP_MAGIC else open(path, "rb")
