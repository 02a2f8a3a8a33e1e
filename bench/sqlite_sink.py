"""SQLite sink benchmark: the old write path (a row per entity and sample), the first
change-only one (a column per metric, key and node on every row) and today's (packed values,
entity ids), side by side on the same rounds of a DGX-like fleet.

    python -m bench.sqlite_sink [--gpus 10000] [--rounds 24] [--no-old]

Every sink gets the same IngestResult of each round, in turn (bench.pipeline's Fleet: healthy
gauges that move every round, NVLink counters that do not, IB traffic counters that do). Prints
for each the median write of a round after the first (wall seconds, and CPU seconds, which a
loaded machine inflates less), the ratios, rows written per round and the file's growth per
hour at a 5-s round. The cost of a row grows with the rows an index already holds, so the
median of the last quarter of the rounds is printed too: a long run without the old path
(`--rounds 240 --no-old`) shows the paths past the first ~150 rounds, where the wide
change-only tables' (entity, time) index costs a page write per written row.
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
from bench.sqlite_change_only_wide import WideChangeOnlySink
from bench.sqlite_legacy import LegacySQLiteSink
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


def run(gpus: int, rounds: int, where: Path, with_old: bool = True) -> list[Figures]:
    fleet = Fleet(gpus)
    t0 = 1_699_999_200.0
    old, wide, new = where / "old.db", where / "wide.db", where / "new.db"
    sinks: list[tuple[str, Path, LegacySQLiteSink | WideChangeOnlySink | SQLiteSink]] = []
    if with_old:
        sinks.append(("old (every row)", old, LegacySQLiteSink(old)))
    sinks += [("change-only, wide", wide, WideChangeOnlySink(wide)),
              ("change-only, packed", new, SQLiteSink(new, background=False))]
    scopes = ("gpu", "nvlink", "ib_port")
    tables = {name: [f"{s}_samples" for s in scopes]
              + ([f"{s}_{k}" for s in scopes for k in ("rounds", "late")]
                 if not isinstance(sink, LegacySQLiteSink) else []) for name, _, sink in sinks}
    times: dict[str, list[float]] = {name: [] for name, _, _ in sinks}
    cpu: dict[str, list[float]] = {name: [] for name, _, _ in sinks}
    first: dict[str, tuple[int, int]] = {}
    for k in range(rounds):
        r = IngestResult(clean=fleet.round(t0 + ROUND_S * k))  # made outside the timing
        for name, path, sink in sinks:  # in turn, so all see the same machine load
            a, c = time.perf_counter(), time.process_time()
            sink.write(r)
            times[name].append(time.perf_counter() - a)
            cpu[name].append(time.process_time() - c)
            if k == 0:  # the first round writes every entity in both: steady state after it
                first[name] = (_rows(path, tables[name]), _size(path))
    out = []
    steady = max(rounds - 1, 1)
    for name, path, sink in sinks:
        n, size = _rows(path, tables[name]), _size(path)
        sink.close()
        out.append(Figures(name, statistics.median(times[name][1:] or times[name]),
                           statistics.median(cpu[name][1:] or cpu[name]),
                           statistics.median(cpu[name][-max(rounds // 4, 1):]),
                           (n - first[name][0]) / steady,
                           (size - first[name][1]) / steady * (3600 / ROUND_S) / 1e6))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--gpus", type=int, default=10000)
    ap.add_argument("--rounds", type=int, default=24)
    ap.add_argument("--no-old", action="store_true",
                    help="leave out the old path (for long runs: it takes seconds a round)")
    ap.add_argument("--dir", type=Path, default=None, help="where the files go (temp)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(dir=args.dir) as d:
        figs = run(args.gpus, args.rounds, Path(d), with_old=not args.no_old)
    print(f"{args.gpus} GPUs, {args.rounds} rounds of {ROUND_S:g} s (pid {os.getpid()})")
    print(f"{'write path':<20} {'s/round':>9} {'CPU s/round':>12} {'CPU, last 1/4':>14} "
          f"{'rows/round':>11} {'MB/hour':>9}")
    for f in figs:
        print(f"{f.name:<20} {f.seconds:>9.4f} {f.cpu:>12.4f} {f.cpu_late:>14.4f} "
              f"{f.rows:>11.0f} {f.mb_per_hour:>9.1f}")
    for i, a in enumerate(figs):
        for b in figs[i + 1:]:
            print(f"{a.name} / {b.name}: {a.seconds / b.seconds:.1f}x wall, "
                  f"{a.cpu / b.cpu:.1f}x CPU, {a.cpu_late / b.cpu_late:.1f}x CPU last 1/4")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
