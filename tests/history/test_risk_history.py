"""Risk history in the embedded SQLite store, written by a real Pipeline over a 40-minute
simulated run: at most a row per entity a minute, calm entities only every HEARTBEAT_S, links
only while at risk (and once as they leave it), old rows pruned, and the reader giving every
minute of the range back (a chart without holes)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from collectors.frames import Entity
from service.history import risk_history
from service.history.history import build_query
from service.history.history_sqlite import SQLiteHistory
from service.pipeline import build_pipeline
from service.settings import Settings
from tests.pipeline.builders import T0, Rounds

MINUTES = 40
LINK = "n0:gpu0:nvlink0"


def run(settings: Settings) -> Path:
    """gpu0 logs an Xid at minute 20; gpu0's link is down from minute 10 to 12."""
    p = build_pipeline(settings)
    r = Rounds(nodes=1, gpus=2, links=1, ports=1)
    try:
        for k in range(MINUTES * 12):
            t = T0 + 5 * k
            r.set(LINK, "nvlink_state", 0.0 if 120 <= k < 144 else 1.0)
            b = r.batch(t)
            if k == 240:
                b.events.add("n0:gpu0", t + 1, "xid", 79.0)
            p.process(b, t)
    finally:
        p.close()
    return settings.storage.sqlite_path


def rows(path: Path, entity: str) -> list[tuple[float, float, int]]:
    db = sqlite3.connect(path)
    try:
        return [(round((ts - T0) / 60), r, lv) for ts, r, lv in db.execute(
            "SELECT ts, risk, level FROM risk_history WHERE entity = ? ORDER BY ts", (entity,))]
    finally:
        db.close()


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from service.settings import StorageSettings

    data = tmp_path_factory.mktemp("risk")
    return run(Settings(storage=StorageSettings(data_dir=data, write_samples=False)))


def test_a_calm_gpu_costs_a_row_every_heartbeat(stored: Path) -> None:
    calm = rows(stored, "n0:gpu1")
    assert [m for m, _, _ in calm] == [0, 10, 20, 30]
    assert {(r, lv) for _, r, lv in calm} == {(0.0, 0)}


def test_a_change_is_written_in_its_minute(stored: Path) -> None:
    hot = rows(stored, "n0:gpu0")
    minutes = [m for m, _, _ in hot]
    assert len(minutes) == len(set(minutes)) <= MINUTES  # never two rows in a minute
    first = next(m for m, _, lv in hot if lv == 3)
    assert first == 20
    assert [lv for m, _, lv in hot if m < 10] == [0]


def test_a_link_is_written_only_around_its_risk(stored: Path) -> None:
    link = rows(stored, LINK)
    assert link, "the link down should have raised its risk"
    assert all(m >= 10 for m, _, _ in link)
    at_risk = [m for m, r, lv in link if r > 0 or lv > 0]
    assert at_risk and at_risk[0] == 10
    assert link[-1][1:] == (0.0, 0) and link[-1][0] > at_risk[-1]  # one row as it leaves
    assert not rows(stored, "n0:mlx5_0:1")  # a calm port: nothing at all


def test_the_reader_gives_every_minute_back(stored: Path) -> None:
    h = SQLiteHistory(stored)
    q = build_query(Entity.parse("n0:gpu1"), ["risk", "level"], start=T0,
                    end=T0 + 60 * MINUTES, step=60, now=T0 + 60 * MINUTES)
    risk, level = h.series(q)
    assert risk.times == [T0 + 60 * m for m in range(MINUTES)]
    assert level.values == [0.0] * MINUTES
    q = build_query(Entity.parse("n0:gpu0"), ["level"], start=T0 + 60 * 15,
                    end=T0 + 60 * 25, step=300, now=T0 + 60 * MINUTES)
    (level,) = h.series(q)
    assert level.values == [0.0, 3.0]
    # Finer than a minute: each bucket of a minute carries that minute's value.
    q = build_query(Entity.parse("n0:gpu0"), ["level"], start=T0 + 60 * 20,
                    end=T0 + 60 * 20 + 30, step=5, now=T0 + 60 * MINUTES)
    assert h.series(q)[0].values == [3.0] * 6


@pytest.mark.slow
def test_old_rows_are_pruned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from service.settings import StorageSettings

    monkeypatch.setattr(risk_history, "PRUNE_EVERY_S", 60.0)
    path = run(Settings(storage=StorageSettings(data_dir=tmp_path, write_samples=False,
                                                risk_history_days=600 / 86400)))
    kept = rows(path, "n0:gpu1")
    # Pruned at the last flush but one (minute 39's rows are written as the pipeline closes).
    assert kept and min(m for m, _, _ in kept) >= MINUTES - 1 - 10 - 1
    assert [m for m, _, _ in kept] == [30]
