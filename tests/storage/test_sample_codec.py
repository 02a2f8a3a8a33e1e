"""Packed sample values (service.storage.sample_codec): every value back bit for bit, missing
as missing, a resent row merged value by value, and a file whose stored column order is not
the catalog's read by name."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

from collectors.catalog import CATALOG, Scope
from collectors.frames import Batch, Entity, EntityTable, Frame
from service.history.samples_read import before, samples
from service.history.sinks import SQLiteSink
from service.stages.ingest import IngestResult
from service.storage.sample_codec import MAX_COLUMNS, decode, encode, merge

T0 = 1_700_000_000.0


def _bits(v: float | None) -> int | None:
    return None if v is None else int(np.float64(v).view(np.int64))


def test_values_come_back_bit_for_bit() -> None:
    rng = np.random.default_rng(3)
    v = rng.normal(size=(500, 25)) * 10.0 ** rng.integers(-300, 300, (500, 25))
    v[rng.random(v.shape) < 0.3] = 0.0
    v[rng.random(v.shape) < 0.2] = np.nan
    v[0, :4] = [-0.0, np.inf, -np.inf, 5e-324]
    v[1] = np.nan  # a row with nothing
    blobs = encode(v)
    assert len(blobs) == 500
    for row, blob in zip(v, blobs, strict=True):
        want = [None if np.isnan(x) else _bits(x) for x in row]
        assert [_bits(x) for x in decode(blob, range(25))] == want
    assert decode(blobs[0], [3, 1, 0]) == (5e-324, np.inf, -0.0)
    assert decode(None, [0, 1]) == (None, None)
    assert decode(blobs[2], [MAX_COLUMNS]) == (None,)  # a column never stored
    assert encode(np.zeros((0, 25))) == []
    assert len(encode(np.zeros((1, 25)))[0]) == 16  # zeros cost no value word


def test_too_many_columns_are_refused() -> None:
    with pytest.raises(ValueError, match="at most 64"):
        encode(np.zeros((1, MAX_COLUMNS + 1)))


def test_a_resent_row_replaces_the_values_it_carries() -> None:
    old, new = encode(np.array([[1.0, 2.0, np.nan, 4.0], [np.nan, 7.0, np.nan, np.nan]]))
    assert decode(merge(new, old), range(4)) == (1.0, 7.0, None, 4.0)
    assert merge(None, old) == old and merge(new, None) == new


def test_a_stored_column_order_unlike_the_catalogs_is_read_by_name(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    cols = [m.name for m in CATALOG.columns(Scope.GPU)]
    SQLiteSink(path, background=False).close()
    db = sqlite3.connect(path)  # as if a release had positioned the columns the other way
    db.execute("DELETE FROM gpu_layout")
    db.executemany("INSERT INTO gpu_layout VALUES (?, ?)",
                   enumerate(["retired_metric", *reversed(cols[1:])]))
    db.commit()
    db.close()
    sink = SQLiteSink(path, background=False)
    vals = np.arange(1.0, len(cols) + 1)[None, :]
    b = Batch()
    b.add(Frame(EntityTable(Scope.GPU, [Entity.gpu("n1", 0)]), np.zeros(1, np.int32),
                np.full(1, T0), vals))
    sink.write(IngestResult(clean=b))
    sink.close()
    db = sqlite3.connect(path)
    try:
        got = samples(db, Scope.GPU, "n1:gpu0", "n1", T0, T0 + 1, cols)
        assert got == [(T0, tuple(vals[0]))]
        assert db.execute("SELECT name FROM gpu_layout ORDER BY pos DESC LIMIT 1").fetchone() == (
            cols[0],)  # the new column was appended
    finally:
        db.close()


def test_a_round_resent_after_a_restart_merges_into_the_stored_row(tmp_path: Path) -> None:
    cols = [m.name for m in CATALOG.columns(Scope.GPU)]
    table = EntityTable(Scope.GPU, [Entity.gpu("n1", 0)])

    def write(vals: np.ndarray) -> None:  # a fresh writer each time: it knows nothing
        sink = SQLiteSink(tmp_path / "s.db", background=False)
        b = Batch()
        b.add(Frame(table, np.zeros(1, np.int32), np.full(1, T0), vals[None, :]))
        sink.write(IngestResult(clean=b))
        sink.close()

    first = np.arange(1.0, len(cols) + 1)
    write(first)
    resent = np.full(len(cols), np.nan)
    resent[2] = 99.0
    write(resent)
    db = sqlite3.connect(tmp_path / "s.db")
    try:
        want = tuple(99.0 if i == 2 else v for i, v in enumerate(first.tolist()))
        assert samples(db, Scope.GPU, "n1:gpu0", "n1", T0, T0 + 1, cols) == [(T0, want)]
        assert db.execute("SELECT COUNT(*) FROM gpu_samples").fetchone() == (1,)
    finally:
        db.close()


def test_an_unbounded_range_reads_only_the_minutes_stored(tmp_path: Path) -> None:
    sink = SQLiteSink(tmp_path / "s.db", background=False)
    table = EntityTable(Scope.GPU, [Entity.gpu("n1", 0)])
    ncol = len(CATALOG.columns(Scope.GPU))
    for k in range(3):
        b = Batch()
        b.add(Frame(table, np.zeros(1, np.int32), np.full(1, T0 + 5 * k),
                    np.full((1, ncol), 40.0 + k)))
        sink.write(IngestResult(clean=b))
    sink.close()
    db = sqlite3.connect(tmp_path / "s.db")
    try:
        got = samples(db, Scope.GPU, "n1:gpu0", "n1", 0.0, float("inf"), ["gpu_temp"])
        assert got == [(T0 + 5 * k, (40.0 + k,)) for k in range(3)]
        assert samples(db, Scope.GPU, "n1:gpu0", "n1", -float("inf"), T0 + 5,
                       ["gpu_temp"]) == [(T0, (40.0,))]
        assert before(db, Scope.GPU, "n1:gpu0", "n1", T0 + 10**9, "gpu_temp") == (
            T0 + 10, (42.0,))
    finally:
        db.close()


def test_a_failed_write_leaves_new_entities_to_the_next_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from service.history import sinks

    sink = SQLiteSink(tmp_path / "s.db", background=False)
    table = EntityTable(Scope.GPU, [Entity.gpu("n1", 0)])
    ncol = len(CATALOG.columns(Scope.GPU))

    def result(k: int) -> IngestResult:
        b = Batch()
        b.add(Frame(table, np.zeros(1, np.int32), np.full(1, T0 + 5 * k),
                    np.full((1, ncol), 40.0 + k)))
        return IngestResult(clean=b)

    real = sinks.write_rows

    def broken(*args: object) -> None:
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(sinks, "write_rows", broken)
    with pytest.raises(sqlite3.OperationalError):
        sink.write(result(0))  # rolled back: the entity's id row was not stored
    monkeypatch.setattr(sinks, "write_rows", real)
    sink.write(result(1))
    sink.close()
    db = sqlite3.connect(tmp_path / "s.db")
    try:
        assert samples(db, Scope.GPU, "n1:gpu0", "n1", T0, T0 + 60, ["gpu_temp"]) == [
            (T0 + 5, (41.0,))]
    finally:
        db.close()
