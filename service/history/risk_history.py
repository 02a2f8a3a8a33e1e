"""Risk and alert level over time in the embedded SQLite store (the `risk_history` table of
service.storage.schema), so the history API and the console's charts answer without InfluxDB.

Bounded by construction, not by the fleet's mood: each entity gets at most one row a minute
(the minute's highest risk and level), and only when it changed (risk by RISK_STEP or more, or
any level change) or HEARTBEAT_S passed since its last row. NVLink links and IB ports are
written only while at risk, plus one row when they leave it (the InfluxDB recorder's rule), so
the 18 links of a GPU cost nothing while healthy. Rows older than the retention are deleted
once an hour. A reader carries a row forward until the next one, for at most HOLD_S.

Rows a day: GPUs and nodes at steady risk 86400 / HEARTBEAT_S = 144 each, up to 1,440 for one
whose risk moves every minute; links and ports only while at risk. 10,000 GPUs on 1,250 nodes:
about 1.6 million rows a day when calm (about 100 MB at ~60 bytes a row with its indexes), 16
million at most; with the default 3-day retention the table stays near 300 MB on such a fleet.
"""

from __future__ import annotations

import logging
import math
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from collectors.catalog import Scope
from service.history.history import Agg, SeriesQuery, Wanted
from service.stages.fleet_alerts import FLEET
from service.stages.scoring import SCOPES
from service.storage.sqlite_db import open_db
from service.tick import TickResult

log = logging.getLogger(__name__)

RES_S = 60.0  # one row per entity per minute at most
HEARTBEAT_S = 600.0  # an unchanged entity is written again after this long
HOLD_S = HEARTBEAT_S + RES_S  # how long a reader carries a row forward (a late tick's slack)
RISK_STEP = 0.01  # a smaller move of risk is not a change worth a row
PRUNE_EVERY_S = 3600.0
_SPARSE = (Scope.NVLINK, Scope.IB_PORT, Scope.PSU, Scope.FAN)
# A node's own sensors' risk is in its node row (the roll-up); their level joins it there.
_ENTITY_SCOPES = tuple(s for s in SCOPES if s is not Scope.NODE)
_UPSERT = ("INSERT INTO risk_history VALUES (?,?,?,?,?) ON CONFLICT (scope, entity, ts) DO "
           "UPDATE SET risk = max(risk, excluded.risk), level = max(level, excluded.level)")


class _Slots:
    """One scope's entities by window-store slot: the minute's peaks and the last row written."""

    def __init__(self, scope: str, sparse: bool) -> None:
        self.scope, self.sparse = scope, sparse
        self.keys: list[str] = []
        self.index: dict[str, int] = {}
        self.gen = -1
        self.peak_r = np.zeros(0, np.float32)
        self.peak_l = np.zeros(0, np.int16)
        self.last_r = np.zeros(0, np.float32)
        self.last_l = np.zeros(0, np.int16)
        self.last_t = np.zeros(0, np.float64)

    def follow(self, keys: Sequence[str], gen: int) -> None:
        """Slots only grow between compactions; a compaction renumbers them, and what was
        written last is carried over by key (rare: a Python loop is fine here)."""
        if gen != self.gen and self.keys:
            old = {k: i for i, k in enumerate(self.keys)}
            take = np.array([old.get(k, -1) for k in keys], np.int64)
            have = take >= 0
            last_r = np.full(len(keys), np.nan, np.float32)
            last_l = np.zeros(len(keys), np.int16)
            last_t = np.full(len(keys), -np.inf)
            last_r[have], last_l[have] = self.last_r[take[have]], self.last_l[take[have]]
            last_t[have] = self.last_t[take[have]]
            self.keys, self.last_r, self.last_l, self.last_t = list(keys), last_r, last_l, last_t
            self.index = {k: i for i, k in enumerate(self.keys)}
            peak_r = np.full(len(keys), np.nan, np.float32)
            peak_l = np.full(len(keys), -1, np.int16)
            peak_r[have], peak_l[have] = self.peak_r[take[have]], self.peak_l[take[have]]
            self.peak_r, self.peak_l = peak_r, peak_l
        self.gen = gen
        grow = len(keys) - len(self.keys)
        if grow > 0:
            for k in keys[len(self.keys):]:
                self.index[k] = len(self.keys)
                self.keys.append(k)
            self.peak_r = np.concatenate([self.peak_r, np.full(grow, np.nan, np.float32)])
            self.peak_l = np.concatenate([self.peak_l, np.full(grow, -1, np.int16)])
            self.last_r = np.concatenate([self.last_r, np.full(grow, np.nan, np.float32)])
            self.last_l = np.concatenate([self.last_l, np.zeros(grow, np.int16)])
            self.last_t = np.concatenate([self.last_t, np.full(grow, -np.inf)])

    def add(self, risk: npt.NDArray[np.floating], level: npt.NDArray[np.integer]) -> None:
        n = len(risk)
        self.peak_r[:n] = np.fmax(self.peak_r[:n], risk)
        self.peak_l[:n] = np.maximum(self.peak_l[:n], level)

    def due(self, minute: float) -> list[tuple[str, str, float, float, int]]:
        """Rows for the minute that ends now; the peaks start again."""
        seen = ~np.isnan(self.peak_r)
        changed = (np.isnan(self.last_r) | (np.abs(self.peak_r - self.last_r) >= RISK_STEP)
                   | (self.peak_l != self.last_l) | (minute - self.last_t >= HEARTBEAT_S))
        write = seen & changed
        if self.sparse:  # links and ports: while at risk, and once more as they leave it
            write &= (self.peak_r > 0) | (self.peak_l > 0) | (self.last_r > 0) | (self.last_l > 0)
        idx = np.flatnonzero(write)
        self.last_r[idx], self.last_l[idx], self.last_t[idx] = \
            self.peak_r[idx], self.peak_l[idx], minute
        r, lv = self.peak_r[idx].tolist(), self.peak_l[idx].tolist()
        rows = [(self.scope, self.keys[i], minute, float(r[j]), int(lv[j]))
                for j, i in enumerate(idx.tolist())]
        self.peak_r[:] = np.nan
        self.peak_l[:] = -1
        return rows


class RiskHistory:
    """A tick observer writing risk_history: one transaction a minute, not one a tick."""

    def __init__(self, path: str | Path, retention_s: float = 3 * 86400.0) -> None:
        self._db = open_db(path)
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._lock = threading.Lock()
        self.retention_s = retention_s
        self._slots = {s: _Slots(s.value, s in _SPARSE) for s in _ENTITY_SCOPES}
        self._nodes = _Slots(Scope.NODE.value, False)
        self._fleet = _Slots(Scope.NODE.value, True)  # the storm's point: only while it lasts
        self._minute: float | None = None
        self._pruned_at = -math.inf
        self.rows_written = 0

    def observe(self, tick: TickResult) -> None:
        state, minute = tick.risk, math.floor(tick.at / RES_S) * RES_S
        with self._lock:
            if self._minute is not None and minute != self._minute:
                self._flush()
            self._minute = minute
            gen = state.store.generation
            for scope in _ENTITY_SCOPES:
                sr, sl = state.scopes[scope], self._slots[scope]
                n = len(sr.risk)
                ents = state.store[scope].entities[:n]
                if gen != sl.gen or len(sl.keys) < n:
                    sl.follow([e.key for e in ents], gen)
                lv = tick.levels.get(scope, np.zeros(0, np.int8))[:n]
                level = np.zeros(n, np.int16)
                level[:len(lv)] = lv
                for key, derived in tick.derived.items():  # GpuMissing and the like: a few
                    i = sl.index.get(key)
                    if i is not None and i < n:
                        level[i] = max(int(level[i]), derived)
                sl.add(sr.risk, level)
            names = state.node_names[:len(state.nodes)]
            if gen != self._nodes.gen or len(self._nodes.keys) < len(names):
                self._nodes.follow(names, gen)
            own = {e.node: int(lv) for e, lv in zip(
                state.store[Scope.NODE].entities, tick.levels.get(Scope.NODE, ()), strict=False)
                if lv}
            node_level = np.array([max(tick.derived.get(n, 0), own.get(n, 0)) for n in names],
                                  np.int16) if tick.derived or own else \
                np.zeros(len(names), np.int16)
            self._nodes.add(state.nodes[:len(names)], node_level)
            storm = tick.derived.get(FLEET, 0)
            self._fleet.follow([FLEET], 0)
            self._fleet.add(np.array([float(bool(storm))], np.float32),
                            np.array([storm], np.int16))

    def _flush(self) -> None:
        minute = self._minute
        if minute is None:
            return
        rows = [r for sl in (*self._slots.values(), self._nodes, self._fleet)
                for r in sl.due(minute)]
        prune = minute - self._pruned_at >= PRUNE_EVERY_S
        if not rows and not prune:
            return
        try:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.executemany(_UPSERT, rows)
                if prune:
                    self._db.execute("DELETE FROM risk_history WHERE ts < ?",
                                     (minute - self.retention_s,))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:  # history is a convenience: scoring goes on without it
            log.warning("risk history: %d rows for %s not written: %s", len(rows), minute, exc)
            return
        if prune:
            self._pruned_at = minute
        self.rows_written += len(rows)

    def close(self) -> None:
        """The minute under way is written too: a stopped service's charts end where it did."""
        with self._lock:
            self._flush()
            self._minute = None
            self._db.close()


# ---- reading -----------------------------------------------------------------------------------

def read_buckets(db: sqlite3.Connection, q: SeriesQuery, w: Wanted) -> list[tuple[int, float]]:
    """(bucket index, value) of `risk` or `level`. Each row stands for its minute and the
    minutes up to the next row (at most HOLD_S); a bucket aggregates the minutes it touches."""
    col = 1 if w.name == "risk" else 2
    rows = db.execute("SELECT ts, risk, level FROM risk_history WHERE scope = ? AND entity = ? "
                      "AND ts >= ? AND ts < ? ORDER BY ts",
                      (q.scope.value, q.entity.key, q.start - HOLD_S, q.end)).fetchall()
    found: dict[int, list[float]] = {}
    for i, row in enumerate(rows):
        ts, v = float(row[0]), float(row[col])
        stop = min(float(rows[i + 1][0]) if i + 1 < len(rows) else math.inf, ts + HOLD_S, q.end)
        m = max(ts, ts + math.floor((q.start - ts) / RES_S) * RES_S)  # skip minutes before start
        while m < stop:
            lo, hi = max(m, q.start), min(m + RES_S, q.end)
            if lo < hi:
                for b in range(math.floor(lo / q.step),
                               math.floor(math.nextafter(hi, -math.inf) / q.step) + 1):
                    found.setdefault(b, []).append(v)
            m += RES_S
    return [(b, _agg(vs, w.agg)) for b, vs in sorted(found.items())]


def _agg(vs: list[float], agg: Agg) -> float:
    if agg is Agg.MEAN:
        return sum(vs) / len(vs)
    if agg is Agg.MIN:
        return min(vs)
    if agg is Agg.LAST:
        return vs[-1]
    if agg is Agg.COUNT:
        return float(len(vs))
    return max(vs)
