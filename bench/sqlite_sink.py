"""SQLite sink benchmark: the old write path (a row per entity and sample) and the change-only
one, side by side on the same rounds of a DGX-like fleet.

    python -m bench.sqlite_sink [--gpus 10000] [--rounds 24]

Both sinks get the same IngestResult of each round (bench.pipeline's Fleet: healthy gauges
that move every round, NVLink counters that do not, IB traffic counters that do). Prints
seconds of write per round for each, the ratio, rows written per round and the file's growth
per hour at a 5-s round.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.pipeline import Fleet
from bench.sqlite_legacy import LegacySQLiteSink
from service.stages.ingest import IngestResult
from service.stages.sinks import SQLiteSink

ROUND_S = 5.0


@dataclass
class Figures:
    name: str
    seconds: float  # median write of one round
    rows: float  # rows written per round
    mb_per_hour: float


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))


def _rows(db: Path, tables: list[str]) -> int:
    import sqlite3

    c = sqlite3.connect(db)
    try:
        return sum(int(c.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]) for t in tables)
    finally:
        c.close()


def run(gpus: int, rounds: int, where: Path) -> list[Figures]:
    fleet = Fleet(gpus)
    t0 = 1_699_999_200.0
    results = [IngestResult(clean=fleet.round(t0 + ROUND_S * k)) for k in range(rounds)]
    old, new = where / "old.db", where / "new.db"
    sinks: list[tuple[str, Path, LegacySQLiteSink | SQLiteSink]] = [
        ("old (every row)", old, LegacySQLiteSink(old)),
        ("new (change-only)", new, SQLiteSink(new, background=False))]
    scopes = ("gpu", "nvlink", "ib_port")
    tables = {name: [f"{s}_samples" for s in scopes]
              + ([f"{s}_{k}" for s in scopes for k in ("rounds", "late")]
                 if isinstance(sink, SQLiteSink) else []) for name, _, sink in sinks}
    times: dict[str, list[float]] = {name: [] for name, _, _ in sinks}
    first: dict[str, tuple[int, int]] = {}
    for k, r in enumerate(results):
        for name, path, sink in sinks:  # alternate, so both see the same machine load
            a = time.perf_counter()
            sink.write(r)
            times[name].append(time.perf_counter() - a)
            if k == 0:  # the first round writes every entity in both: steady state after it
                first[name] = (_rows(path, tables[name]), _size(path))
    out = []
    steady = max(rounds - 1, 1)
    for name, path, sink in sinks:
        n, size = _rows(path, tables[name]), _size(path)
        sink.close()
        out.append(Figures(name, statistics.median(times[name][1:] or times[name]),
                           (n - first[name][0]) / steady,
                           (size - first[name][1]) / steady * (3600 / ROUND_S) / 1e6))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--gpus", type=int, default=10000)
    ap.add_argument("--rounds", type=int, default=24)
    ap.add_argument("--dir", type=Path, default=None, help="where the two files go (temp)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(dir=args.dir) as d:
        figs = run(args.gpus, args.rounds, Path(d))
    print(f"{args.gpus} GPUs, {args.rounds} rounds of {ROUND_S:g} s (pid {os.getpid()})")
    print(f"{'write path':<20} {'s/round':>9} {'rows/round':>11} {'MB/hour':>9}")
    for f in figs:
        print(f"{f.name:<20} {f.seconds:>9.4f} {f.rows:>11.0f} {f.mb_per_hour:>9.1f}")
    print(f"old/new: {figs[0].seconds / figs[1].seconds:.1f}x faster per round")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
