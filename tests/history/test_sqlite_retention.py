"""Sample retention of the SQLite sink (storage.sample_retention_days): pruning deletes in
bounded batches, rows older than the cutoff go, and every history answer inside the kept window
is what the unpruned store answers (a change-only row written before the cutoff may stand for
samples after it: it stays)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

from collectors.catalog import CATALOG, Scope
from collectors.frames import Batch, Entity, EntityTable, Frame
from service.history import sinks
from service.history.history import Agg, build_query
from service.history.history_sqlite import SQLiteHistory
from service.history.sinks import SQLiteSink, prune_batch
from service.stages.ingest import IngestResult
from service.storage.samples_sqlite import HEARTBEAT_S

T0 = 1_700_000_000.0
GPUS = [Entity.gpu(n, g) for n in ("n1", "n2") for g in range(2)]
LINKS = [Entity.nvlink(n, g, 0) for n in ("n1", "n2") for g in range(2)]
ROUNDS = 400  # 2000 s: past three heartbeats
RETENTION_S = 900.0
TABLES = [f"{s}_{k}" for s in ("gpu", "nvlink", "ib_port") for k in ("samples", "rounds", "late")]


def _write(sink: SQLiteSink) -> None:
    gt, lt = EntityTable(Scope.GPU, GPUS), EntityTable(Scope.NVLINK, LINKS)
    gv = np.zeros((len(GPUS), len(CATALOG.columns(Scope.GPU))))
    lv = np.ones((len(LINKS), len(CATALOG.columns(Scope.NVLINK))))  # counters that hold still
    for k in range(ROUNDS):
        ts = T0 + 5 * k
        gv[:, 0] = 50 + k % 4  # a gauge that moves
        b = Batch()
        b.add(Frame(gt, np.arange(len(GPUS), dtype=np.int32), np.full(len(GPUS), ts), gv.copy()))
        b.add(Frame(lt, np.arange(len(LINKS), dtype=np.int32), np.full(len(LINKS), ts),
                    lv.copy()))
        sink.write(IngestResult(clean=b))


def _count(path: Path, where: str = "") -> dict[str, int]:
    db = sqlite3.connect(path)
    try:
        return {t: int(db.execute(f"SELECT COUNT(*) FROM {t} {where}").fetchone()[0])
                for t in TABLES}
    finally:
        db.close()


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, int]:
    d = tmp_path_factory.mktemp("retention")
    kept, pruned = SQLiteSink(d / "kept.db", background=False), SQLiteSink(
        d / "pruned.db", retention_s=RETENTION_S, background=False)
    _write(kept)
    _write(pruned)
    mp = pytest.MonkeyPatch()
    mp.setattr(sinks, "PRUNE_BATCH", 50)  # several batches per table
    try:
        done = pruned.prune()
    finally:
        mp.undo()
    kept.close()
    pruned.close()
    return d / "kept.db", d / "pruned.db", done


def test_rows_older_than_the_cutoff_go_and_newer_ones_stay(
        stores: tuple[Path, Path, int]) -> None:
    kept, pruned, done = stores
    cutoff = T0 + 5 * (ROUNDS - 1) - RETENTION_S
    before, after = _count(kept), _count(pruned)
    assert done == sum(before.values()) - sum(after.values()) > 0
    assert after["nvlink_samples"] < before["nvlink_samples"]
    assert after["gpu_samples"] < before["gpu_samples"]
    # A row may stand for samples up to HEARTBEAT_S after it: older than that, it is gone.
    assert _count(pruned, f"WHERE ts < {cutoff - HEARTBEAT_S}") == dict.fromkeys(TABLES, 0)
    newer = f"WHERE ts >= {cutoff - HEARTBEAT_S}"
    assert _count(pruned, newer) == _count(kept, newer)


@pytest.mark.slow
def test_history_inside_the_window_is_unchanged(stores: tuple[Path, Path, int]) -> None:
    kept, pruned = SQLiteHistory(stores[0]), SQLiteHistory(stores[1])
    end = T0 + 5 * ROUNDS
    cutoff = T0 + 5 * (ROUNDS - 1) - RETENTION_S
    asked = 0
    for entity in (GPUS[0], GPUS[3], LINKS[1]):
        cols = [m.name for m in CATALOG.columns(entity.scope)]
        for start in (cutoff, cutoff + 3, end - 300):
            for agg in (None, Agg.MEAN, Agg.LAST):
                for rate in (False, True):
                    names = [m.name for m in CATALOG.columns(entity.scope)
                             if m.kind.value == "counter"] if rate else cols
                    q = build_query(entity, names, start=start, end=end, step=15, agg=agg,
                                    rate=rate, now=end)
                    for a, b in zip(kept.series(q), pruned.series(q), strict=True):
                        assert (a.times, a.values) == (b.times, b.values), (q, a.metric.name)
                        asked += len(a.times)
    assert asked > 1000


def test_one_batch_deletes_at_most_its_limit(tmp_path: Path) -> None:
    sink = SQLiteSink(tmp_path / "s.db", background=False)
    _write(sink)
    sink.close()
    db = sqlite3.connect(tmp_path / "s.db")
    try:
        total = db.execute("SELECT COUNT(*) FROM gpu_rounds").fetchone()[0]
        cut = T0 + 1000
        older = db.execute("SELECT COUNT(*) FROM gpu_rounds WHERE ts < ?", (cut,)).fetchone()[0]
        assert prune_batch(db, "gpu_rounds", cut, 7) == 7
        done = 7
        while (n := prune_batch(db, "gpu_rounds", cut, 7)) == 7:
            done += n
        assert done + n == older
        assert db.execute("SELECT COUNT(*) FROM gpu_rounds").fetchone()[0] == total - older
    finally:
        db.close()
