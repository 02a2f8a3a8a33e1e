"""The change-only SQLite sink answers every history query as a store of every row it is given
would (the writer before issue 18; RowPerSample below computes its answers from the input), on
the same input: values that hold still and move, NaN and missing metrics, resent and late
rounds, GPUs that vanish and come back, counters that reset, a restart of the writer."""

from __future__ import annotations

import math
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest

from collectors.catalog import CATALOG, Scope
from collectors.frames import Batch, Entity, EntityTable, Frame
from service.history.history import Agg, SeriesQuery, ValueOrigin, Wanted, build_query
from service.history.history_sqlite import SQLiteHistory
from service.history.sinks import SQLiteSink
from service.stages.ingest import IngestResult

T0 = 1_700_000_000.0
GPUS = [Entity.gpu(n, g) for n in ("n1", "n2") for g in range(3)]
LINKS = [Entity.nvlink("n1", g, k) for g in range(2) for k in range(2)]


def _frame(table: EntityTable, rows: list[int], ts: float, values: np.ndarray) -> IngestResult:
    b = Batch()
    b.add(Frame(table, np.array(rows, np.int32), np.full(len(rows), ts), values))
    return IngestResult(clean=b)


def _rounds() -> list[IngestResult]:
    rng = np.random.default_rng(7)
    gt, lt = EntityTable(Scope.GPU, GPUS), EntityTable(Scope.NVLINK, LINKS)
    swapped = EntityTable(Scope.GPU, list(reversed(GPUS)))  # same GPUs, new order
    ng, nl = len(CATALOG.columns(Scope.GPU)), len(CATALOG.columns(Scope.NVLINK))
    gv = np.zeros((len(GPUS), ng))
    lv = np.zeros((len(LINKS), nl))
    out: list[IngestResult] = []
    for k in range(400):  # past two heartbeats
        ts = T0 + 5 * k + (0.25 if k % 7 == 0 else 0.0)  # a jittery clock
        if k % 3 == 0:
            gv[:, 0] = 50 + rng.integers(0, 3, len(GPUS))  # a gauge that often holds still
        gv[:, 9] += rng.poisson(0.05, len(GPUS))  # a counter that rarely moves
        if k == 150:
            gv[1, 9] = 0  # a reset
        lv[:, 0] += (rng.random(len(LINKS)) < 0.02)
        vals = gv.copy()
        vals[:, 3] = np.nan if k % 50 < 10 else 92.0  # a metric missing for a while
        rows = list(range(len(GPUS)))
        if 100 <= k < 130:
            rows.remove(2)  # n1:gpu2 falls off the bus, then comes back
        if k >= 300:
            rows.remove(4)  # n2:gpu1 is gone for good
        table = swapped if 200 <= k < 260 else gt
        idx = [len(GPUS) - 1 - r for r in rows] if table is swapped else rows
        out.append(_frame(table, idx, ts, vals[rows]))
        if k < 380 or k % 2:
            out.append(_frame(lt, list(range(len(LINKS))), ts, lv.copy()))
        if k % 40 == 5:  # a resent round carrying one metric
            half = np.full((len(GPUS), ng), np.nan)
            half[:, 6] = 400.0 + k
            out.append(_frame(gt, list(range(len(GPUS))), ts, half))
        if k % 60 == 30:  # a late round, between two already written
            out.append(_frame(gt, [0, 3], ts - 2.5, vals[[0, 3]] + 1))
    return out


class RowPerSample:
    """Every row it is given, one per entity and time (a resent row's values replace the stored
    ones, its missing ones keep them), and the answers of the row-per-sample store: a bucket is
    `int(ts / step)`, a rate is between consecutive readings (the last one before `start`
    included), and a drop of a counter is a reset (the new value over the gap) or bad data."""

    def __init__(self) -> None:
        self.points: dict[str, dict[float, dict[str, float]]] = {}

    def write(self, result: IngestResult) -> None:
        for scope, f in result.clean.frames.items():
            cols = [m.name for m in CATALOG.columns(scope)]
            for t, r, vals in zip(f.ts.tolist(), f.rows.tolist(), f.values.tolist(), strict=True):
                point = self.points.setdefault(f.entities.entities[r].key, {}).setdefault(t, {})
                point.update((c, v) for c, v in zip(cols, vals, strict=True) if not math.isnan(v))

    def rows(self) -> int:
        return sum(len(p) for p in self.points.values())

    def series(self, q: SeriesQuery) -> list[tuple[list[float], list[float]]]:
        points = sorted(self.points.get(q.entity.key, {}).items())
        return [self._one(q, w, [(t, p[w.name]) for t, p in points if w.name in p])
                for w in q.metrics]

    @staticmethod
    def _one(q: SeriesQuery, w: Wanted,
             readings: list[tuple[float, float]]) -> tuple[list[float], list[float]]:
        samples = [(t, v) for t, v in readings if q.start <= t < q.end]
        if w.origin is ValueOrigin.RATE:
            before = [(t, v) for t, v in readings if t < q.start][-1:]
            samples = [(t, (v - pv if v >= pv else v) / (t - pt))
                       for (pt, pv), (t, v) in pairwise(before + samples)
                       if v >= pv or w.resets]
        buckets: dict[int, list[tuple[float, float]]] = {}
        for t, v in samples:
            buckets.setdefault(int(t / q.step), []).append((t, v))
        times, values = [], []
        for b, tv in sorted(buckets.items()):
            vs = [v for _, v in tv]
            times.append(float(b * q.step))
            if w.agg is Agg.LAST:
                values.append(max(tv)[1])
            else:
                values.append({Agg.MEAN: math.fsum(vs) / len(vs), Agg.MAX: max(vs),
                               Agg.MIN: min(vs)}[w.agg])
        return times, values


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> tuple[RowPerSample, Path]:
    d = tmp_path_factory.mktemp("sinks")
    old, new = RowPerSample(), SQLiteSink(d / "new.db", background=False)
    rounds = _rounds()
    for i, r in enumerate(rounds):
        old.write(r)
        new.write(r)
        if i == len(rounds) // 2:  # a restart of the service: the new writer forgets all
            new.close()
            new = SQLiteSink(d / "new.db", background=False)
    new.close()
    return old, d / "new.db"


def _same(a: list[float], b: list[float]) -> bool:
    return len(a) == len(b) and all(math.isclose(x, y, rel_tol=1e-12, abs_tol=1e-12)
                                    for x, y in zip(a, b, strict=True))


@pytest.mark.slow
@pytest.mark.parametrize("entity", [*GPUS[:5], LINKS[0], LINKS[3]], ids=lambda e: e.key)
def test_every_query_answers_as_the_row_per_sample_store(stores: tuple[RowPerSample, Path],
                                                         entity: Entity) -> None:
    old, new = stores[0], SQLiteHistory(stores[1])
    cols = [m.name for m in CATALOG.columns(entity.scope)]
    counters = [m.name for m in CATALOG.columns(entity.scope) if m.kind.value == "counter"]
    asked = 0
    for start, end in [(T0, T0 + 2000), (T0 + 480, T0 + 1300), (T0 + 1003, T0 + 1777),
                       (T0 + 1490, T0 + 2100), (T0 - 100, T0 + 60)]:
        for step in (5, 15, 60, 300):
            for agg in (None, Agg.MEAN, Agg.MAX, Agg.MIN, Agg.LAST):
                q = build_query(entity, cols, start=start, end=end, step=step, agg=agg, now=end)
                for (times, values), b in zip(old.series(q), new.series(q), strict=True):
                    assert times == b.times, (q, b.metric.name)
                    assert _same(values, b.values), (q, b.metric.name)
                    asked += bool(times)
                rq = build_query(entity, counters, start=start, end=end, step=step, rate=True,
                                 agg=agg, now=end)
                for (times, values), b in zip(old.series(rq), new.series(rq), strict=True):
                    assert times == b.times, (rq, b.metric.name)
                    assert _same(values, b.values), (rq, b.metric.name)
    assert asked > 100


def test_the_new_store_writes_far_fewer_rows(stores: tuple[RowPerSample, Path]) -> None:
    import sqlite3

    def count(table: str) -> int:
        db = sqlite3.connect(stores[1])
        try:
            return int(db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])
        finally:
            db.close()

    written = {scope: sum(len(p) for k, p in stores[0].points.items() if k in keys)
               for scope, keys in (("nvlink", {e.key for e in LINKS}),
                                   ("gpu", {e.key for e in GPUS}))}
    assert written["gpu"] + written["nvlink"] == stores[0].rows()
    assert count("nvlink_samples") < written["nvlink"] / 5
    assert count("gpu_samples") < written["gpu"]
