"""Every sample of one entity, rebuilt from the change-only tables of
service.storage.samples_sqlite, and aggregated into buckets exactly as the SQL over one row per
sample did (service.history.history_sqlite asks). A written row stands for its own time and
the rounds of its node it fills; late rows merge into what is there at their time. A row's
values are one BLOB (service.storage.sample_codec), read at the positions `{scope}_layout`
gives the asked columns."""

from __future__ import annotations

import bisect
import itertools
import math
import sqlite3
from collections.abc import Iterator, Sequence
from typing import Any

from collectors.catalog import Scope
from service.history.history import Agg
from service.storage.sample_codec import MAX_COLUMNS, decode
from service.storage.samples_sqlite import HEARTBEAT_S, bucket, columns

Sample = tuple[float, tuple[float | None, ...]]
Row = tuple[float, float | None, int, bytes | None]  # ts, since, gone, vals
_CHUNK = 512  # minutes a query asks for at most


_SAMPLE_ROW = "ts, since, gone, vals"


def _rows(db: sqlite3.Connection, scope: Scope, eid: int | str, minutes: Sequence[int],
          where: str, args: tuple[float, ...], table: str = "samples",
          select: str = _SAMPLE_ROW) -> list[Any]:
    """An entity's sample rows (or a node's rounds: table "rounds", eid the node) in
    `minutes` (the indexes' first key, service.storage.samples_sqlite.bucket) that meet
    `where`, one indexed lookup per minute."""
    marks = ",".join("?" * len(minutes))
    key = "id" if table == "samples" else "node"
    return db.execute(f"SELECT {select} FROM {scope}_{table} WHERE bucket IN ({marks}) AND "
                      f"{key} = ? AND {where}", (*minutes, eid, *args)).fetchall()


def _between(db: sqlite3.Connection, scope: Scope, eid: int | str, lo: float, hi: float,
             table: str = "samples", select: str = _SAMPLE_ROW) -> list[Any]:
    """Rows with lo < ts < hi, in time order."""
    out: list[Any] = []
    # Only the minutes stored: a range from long ago (or unbounded) asks no empty minutes.
    low, high = db.execute(f"SELECT MIN(bucket), MAX(bucket) FROM {scope}_{table}").fetchone()
    if low is None:
        return out
    first = max(low, bucket(lo)) if math.isfinite(lo) else low
    last = min(high, bucket(hi)) if math.isfinite(hi) else high
    for b in range(first, last + 1, _CHUNK):
        out += _rows(db, scope, eid, range(b, min(b + _CHUNK, last + 1)), "ts > ? AND ts < ?",
                     (lo, hi), table, select)
    return sorted(out, key=lambda r: float(r[0]))


def _scan(db: sqlite3.Connection, scope: Scope, eid: int, at: float,
          forward: bool) -> Iterator[Row]:
    """Rows from `at` on (ts >= at) or before it (ts < at), nearest first, a few minutes at a
    time, within the minutes stored."""
    low, high = db.execute(f"SELECT MIN(bucket), MAX(bucket) FROM {scope}_samples").fetchone()
    if low is None or not math.isfinite(at):
        return
    step = 4
    if forward:
        b = max(bucket(at), low)
        while b <= high:
            got = _rows(db, scope, eid, range(b, min(b + step, high + 1)), "ts >= ?", (at,))
            yield from sorted(got, key=lambda r: float(r[0]))
            b, step = b + step, min(2 * step, _CHUNK)
    else:
        b = min(bucket(at), high)
        while b >= low:
            got = _rows(db, scope, eid, range(max(b - step + 1, low), b + 1), "ts < ?", (at,))
            yield from sorted(got, key=lambda r: float(r[0]), reverse=True)
            b, step = b - step, min(2 * step, _CHUNK)


def _quoted(cols: Sequence[str]) -> str:
    return ", ".join('"' + c.replace('"', '""') + '"' for c in cols)


def _entity_id(db: sqlite3.Connection, scope: Scope, entity: str) -> int | None:
    row = db.execute(f"SELECT id FROM {scope}_entities WHERE entity = ?", (entity,)).fetchone()
    return None if row is None else int(row[0])


def _positions(db: sqlite3.Connection, scope: Scope, cols: Sequence[str]) -> list[int]:
    """Blob positions of `cols`; one never stored reads as missing (a position past all)."""
    at = dict(db.execute(f"SELECT name, pos FROM {scope}_layout"))
    return [int(at.get(c, MAX_COLUMNS)) for c in cols]


def samples(db: sqlite3.Connection, scope: Scope, entity: str, node: str, lo: float,
            hi: float, cols: Sequence[str]) -> list[Sample]:
    """(time, values of `cols`) of every sample in [lo, hi), in time order."""
    names = _quoted(cols)
    eid = _entity_id(db, scope, entity)
    pos = _positions(db, scope, cols)
    main = [] if eid is None else _between(db, scope, eid, lo - HEARTBEAT_S, hi)
    nxt = None if eid is None else next(_scan(db, scope, eid, hi, forward=True), None)
    rounds = _between(db, scope, node, lo - HEARTBEAT_S, hi, "rounds", "ts, complete")
    times = [float(r[0]) for r in rounds]
    found: dict[float, tuple[float | None, ...]] = {}
    for i, row in enumerate(main):
        ts, gone = float(row[0]), row[2]
        if gone:
            continue
        vals = decode(row[3], pos)
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
        (_newest_with(db, scope, entity, col, start),),
        db.execute(f"SELECT MAX(ts) FROM {scope}_late WHERE entity = ? AND {q} IS NOT NULL "
                   "AND ts < ?", (entity, start)).fetchone()) if r[0] is not None]
    if not older:
        return None
    found = [s for s in samples(db, scope, entity, node, min(older), start, [col])
             if s[1][0] is not None]
    return found[-1] if found else None


def _newest_with(db: sqlite3.Connection, scope: Scope, entity: str, col: str,
                 start: float) -> float | None:
    """Time of the newest written row before `start` holding a value of `col`."""
    eid = _entity_id(db, scope, entity)
    if eid is None:
        return None
    (p,) = _positions(db, scope, [col])
    for ts, _, _, vals in _scan(db, scope, eid, start, forward=False):
        if decode(vals, [p])[0] is not None:
            return float(ts)
    return None


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
