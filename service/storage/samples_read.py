"""Every sample of one entity, rebuilt from the change-only tables of
service.storage.samples_sqlite, and aggregated into buckets exactly as the SQL over one row per
sample did (service.storage.history_sqlite asks). A written row stands for its own time and
the rounds of its node it fills; late rows merge into what is there at their time."""

from __future__ import annotations

import bisect
import itertools
import math
import sqlite3
from collections.abc import Sequence

from collectors.catalog import Scope
from service.storage.history import Agg
from service.storage.samples_sqlite import HEARTBEAT_S, columns

Sample = tuple[float, tuple[float | None, ...]]


def _quoted(cols: Sequence[str]) -> str:
    return ", ".join('"' + c.replace('"', '""') + '"' for c in cols)


def samples(db: sqlite3.Connection, scope: Scope, entity: str, node: str, lo: float,
            hi: float, cols: Sequence[str]) -> list[Sample]:
    """(time, values of `cols`) of every sample in [lo, hi), in time order."""
    names = _quoted(cols)
    main = db.execute(f"SELECT ts, since, gone, {names} FROM {scope}_samples WHERE entity = ? "
                      "AND ts > ? AND ts < ? ORDER BY ts",
                      (entity, lo - HEARTBEAT_S, hi)).fetchall()
    nxt = db.execute(f"SELECT ts, since FROM {scope}_samples WHERE entity = ? AND ts >= ? "
                     "ORDER BY ts LIMIT 1", (entity, hi)).fetchone()
    rounds = db.execute(f"SELECT ts, complete FROM {scope}_rounds WHERE node = ? AND ts > ? "
                        "AND ts < ? ORDER BY ts", (node, lo - HEARTBEAT_S, hi)).fetchall()
    times = [float(r[0]) for r in rounds]
    found: dict[float, tuple[float | None, ...]] = {}
    for i, row in enumerate(main):
        ts, gone, vals = float(row[0]), row[2], tuple(row[3:])
        if gone:
            continue
        if lo <= ts:
            found[ts] = vals
        after = main[i + 1] if i + 1 < len(main) else nxt
        a = bisect.bisect_right(times, ts)
        z = bisect.bisect_left(times, min(ts + HEARTBEAT_S, hi))
        if after is not None and after[1] is not None:  # filled up to the next row's since
            z = min(z, bisect.bisect_right(times, float(after[1])))
            fill = range(a, z)
        else:  # the newest row, or the next one written after a restart: complete rounds
            if after is not None:
                z = min(z, bisect.bisect_left(times, float(after[0])))
            fill = range(a, z)
            fill = range(0) if a >= z else [k for k in fill if rounds[k][1]]  # type: ignore[assignment]
        for k in fill:
            if times[k] >= lo:
                found[times[k]] = vals
    late = db.execute(f"SELECT ts, {names} FROM {scope}_late WHERE entity = ? AND ts >= ? "
                      "AND ts < ?", (entity, lo, hi)).fetchall()
    for row in late:
        ts, vals = float(row[0]), tuple(row[1:])
        base = found.get(ts)
        found[ts] = vals if base is None else tuple(
            b if v is None else v for v, b in zip(vals, base, strict=True))
    return sorted(found.items())


def before(db: sqlite3.Connection, scope: Scope, entity: str, node: str, start: float,
           col: str) -> Sample | None:
    """The newest sample before `start` with a value of `col` (a rate's first reading)."""
    q = _quoted([col])
    found = [s for s in samples(db, scope, entity, node, start - 2 * HEARTBEAT_S, start, [col])
             if s[1][0] is not None]
    if found:
        return found[-1]
    older = [r[0] for r in (
        db.execute(f"SELECT MAX(ts) FROM {scope}_samples WHERE entity = ? AND {q} IS NOT NULL "
                   "AND ts < ?", (entity, start)).fetchone(),
        db.execute(f"SELECT MAX(ts) FROM {scope}_late WHERE entity = ? AND {q} IS NOT NULL "
                   "AND ts < ?", (entity, start)).fetchone()) if r[0] is not None]
    if not older:
        return None
    found = [s for s in samples(db, scope, entity, node, min(older), start, [col])
             if s[1][0] is not None]
    return found[-1] if found else None


def bucketed(points: Sequence[tuple[float, float]], step: int,
             agg: Agg) -> list[tuple[int, float]]:
    """SQLite's AVG/MAX/MIN, and `last` (the value at the bucket's newest time)."""
    out: dict[int, list[float]] = {}
    for ts, v in points:
        out.setdefault(int(ts / step), []).append(v)
    res = []
    for b, vs in sorted(out.items()):
        if agg is Agg.MEAN:
            res.append((b, math.fsum(vs) / len(vs)))
        elif agg is Agg.MAX:
            res.append((b, max(vs)))
        elif agg is Agg.MIN:
            res.append((b, min(vs)))
        elif agg is Agg.COUNT:
            res.append((b, float(len(vs))))
        else:
            res.append((b, vs[-1]))
    return res


def rates(readings: Sequence[tuple[float, float]], start: float,
          resets: bool) -> list[tuple[float, float]]:
    """Per-second rates between consecutive readings (ingest's rule: a reset's increase is the
    new value; a drop of a counter that never resets is no rate)."""
    out = []
    for (pts, pv), (ts, v) in itertools.pairwise(readings):
        if ts <= pts or ts < start:
            continue
        if v >= pv:
            out.append((ts, (v - pv) / (ts - pts)))
        elif resets:
            out.append((ts, v / (ts - pts)))
    return out


def all_columns(scope: Scope) -> list[str]:
    return columns(scope)
