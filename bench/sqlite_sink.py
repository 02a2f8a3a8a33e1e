"""SQLite sink benchmark: the change-only write path (packed values, entity ids) on rounds of a
DGX-like fleet.

    python -m bench.sqlite_sink [--gpus 10000] [--rounds 24]

The sink gets the IngestResult of each round (bench.pipeline's Fleet: healthy gauges that move
every round, NVLink counters that do not, IB traffic counters that do). Prints the median write
of a round after the first (wall seconds, and CPU seconds, which a loaded machine inflates
less), rows written per round and the file's growth per hour at a 5-s round. The cost of a row
grows with the rows an index already holds, so the median of the last quarter of the rounds is
printed too (`--rounds 240` shows the path past the first ~150 rounds). The write paths before
it (a row per entity and sample; a column per metric) are retired: their figures are in
docs/design.md, "SQLite sink: change-only writes".
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
from service.history.sinks import SQLiteSink
from service.stages.ingest import IngestResult

ROUND_S = 5.0


@dataclass
class Figures:
    name: str
    seconds: float  # median write of one round
    cpu: float  # median CPU seconds of one round's write
    cpu_late: float  # median CPU seconds over the last quarter of the rounds
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


def run(gpus: int, rounds: int, where: Path) -> Figures:
    fleet = Fleet(gpus)
    t0 = 1_699_999_200.0
    path = where / "history.db"
    sink = SQLiteSink(path, background=False)
    scopes = ("gpu", "nvlink", "ib_port")
    tables = [f"{s}_{k}" for s in scopes for k in ("samples", "rounds", "late")]
    times: list[float] = []
    cpu: list[float] = []
    first = (0, 0)
    for k in range(rounds):
        r = IngestResult(clean=fleet.round(t0 + ROUND_S * k))  # made outside the timing
        a, c = time.perf_counter(), time.process_time()
        sink.write(r)
        times.append(time.perf_counter() - a)
        cpu.append(time.process_time() - c)
        if k == 0:  # the first round writes every entity: steady state after it
            first = (_rows(path, tables), _size(path))
    n, size = _rows(path, tables), _size(path)
    sink.close()
    steady = max(rounds - 1, 1)
    return Figures("change-only, packed", statistics.median(times[1:] or times),
                   statistics.median(cpu[1:] or cpu), statistics.median(cpu[-max(rounds // 4, 1):]),
                   (n - first[0]) / steady,
                   (size - first[1]) / steady * (3600 / ROUND_S) / 1e6)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--gpus", type=int, default=10000)
    ap.add_argument("--rounds", type=int, default=24)
    ap.add_argument("--dir", type=Path, default=None, help="where the files go (temp)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(dir=args.dir) as d:
        f = run(args.gpus, args.rounds, Path(d))
    print(f"{args.gpus} GPUs, {args.rounds} rounds of {ROUND_S:g} s (pid {os.getpid()})")
    print(f"{'write path':<20} {'s/round':>9} {'CPU s/round':>12} {'CPU, last 1/4':>14} "
          f"{'rows/round':>11} {'MB/hour':>9}")
    print(f"{f.name:<20} {f.seconds:>9.4f} {f.cpu:>12.4f} {f.cpu_late:>14.4f} "
          f"{f.rows:>11.0f} {f.mb_per_hour:>9.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
