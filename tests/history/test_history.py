"""History: query validation, and the SQLite implementation over what a real Pipeline stored
(gauges mean, counters max or reset-aware rate, states max or last, events counted)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from collectors.catalog import CATALOG, Scope
from collectors.frames import Entity
from service.history.history import (
    MAX_POINTS,
    Agg,
    History,
    NotStored,
    QueryError,
    SeriesOut,
    SeriesQuery,
    auto_step,
    buckets,
    build_query,
    parse_time,
)
from service.history.history_sqlite import SQLiteHistory
from service.pipeline import Pipeline, build_pipeline
from service.settings import Settings
from tests.pipeline.builders import T0, Rounds

ROUNDS = 24  # two minutes at 5 s: two 60-s buckets of 12 samples
GPU = Entity.parse("n0:gpu0")


def feed(p: Pipeline) -> None:
    """The rounds both stores get in these tests: a rising temperature, a volatile ECC counter
    growing 2 a round that resets at round 15, a remap pending for one round, two Xids."""
    r = Rounds(nodes=1, gpus=2, links=1, ports=1)
    for k in range(ROUNDS):
        r.set("n0:gpu0", "gpu_temp", 50.0 + k)
        if k == 15:
            r.set("n0:gpu0", "ecc_sbe_volatile", 1.0)
        elif k:
            r.add("n0:gpu0", "ecc_sbe_volatile", 2.0)
        r.set("n0:gpu0", "remapped_rows_pending", 1.0 if k == 5 else 0.0)
        r.add("n0:gpu0:nvlink0", "nvlink_crc_flit", 3.0)
        r.add("n0:mlx5_0:1", "ib_symbol_error", 1.0)
        b = r.batch(T0 + 5 * k)
        if k in (3, 4):
            b.events.add("n0:gpu0", T0 + 5 * k + 1, "xid", 79.0)
        p.process(b, T0 + 5 * k)


def q(key: str, *metrics: str, step: int = 60, rate: bool = False,
      agg: Agg | None = None) -> SeriesQuery:
    return build_query(Entity.parse(key), list(metrics), start=T0, end=T0 + 5 * ROUNDS,
                       step=step, rate=rate, agg=agg, now=T0 + 3600)


def points(out: list[SeriesOut]) -> dict[str, list[tuple[float, float]]]:
    return {s.metric.name: list(zip(s.times, s.values, strict=True)) for s in out}


@pytest.fixture
def sqlite(settings: Settings) -> SQLiteHistory:
    p = build_pipeline(settings)
    try:
        feed(p)
    finally:
        p.close()
    return SQLiteHistory(settings.storage.sqlite_path)


# ---- what the rounds above must give, whatever the store (test_reader checks InfluxDB) -------

def check_semantics(h: History) -> None:
    b0, b1 = T0, T0 + 60
    got = points(h.series(q("n0:gpu0", "gpu_temp", "ecc_sbe_volatile",
                            "remapped_rows_pending", "xid")))
    assert got["gpu_temp"] == [(b0, pytest.approx(55.5)), (b1, pytest.approx(67.5))]
    # Raw counters: the largest cumulative value in the bucket (28 just before the reset).
    assert got["ecc_sbe_volatile"] == [(b0, 22.0), (b1, 28.0)]
    assert got["remapped_rows_pending"] == [(b0, 1.0), (b1, 0.0)]
    assert got["xid"] == [(b0, 2.0)]
    last = points(h.series(q("n0:gpu0", "remapped_rows_pending", agg=Agg.LAST)))
    assert last["remapped_rows_pending"] == [(b0, 0.0), (b1, 0.0)]
    # Rates: 2 per 5 s is 0.4/s; the reset round's increase is its new value, 1 per 5 s.
    rate = points(h.series(q("n0:gpu0", "ecc_sbe_volatile", "gpu_temp", rate=True,
                             step=5)))
    values = dict(rate["ecc_sbe_volatile"])
    assert T0 not in values  # no previous reading for the first sample
    assert values[T0 + 75] == pytest.approx(0.2)
    assert all(v == pytest.approx(0.4) for t, v in values.items() if t != T0 + 75)
    assert len(values) == ROUNDS - 1
    assert len(rate["gpu_temp"]) == ROUNDS  # rate leaves gauges as they are
    mean = points(h.series(q("n0:gpu0", "ecc_sbe_volatile", rate=True)))
    assert mean["ecc_sbe_volatile"][0] == (b0, pytest.approx(0.4))
    assert mean["ecc_sbe_volatile"][1] == (b1, pytest.approx((0.2 + 0.4 * 11) / 12))
    link = points(h.series(q("n0:gpu0:nvlink0", "nvlink_crc_flit", rate=True)))
    assert link["nvlink_crc_flit"] == [(b0, pytest.approx(0.6)), (b1, pytest.approx(0.6))]
    port = points(h.series(q("n0:mlx5_0:1", "ib_symbol_error", agg=Agg.MIN)))
    assert port["ib_symbol_error"] == [(b0, 1.0), (b1, 13.0)]
    # Another GPU, or one never seen: no points, not an error.
    assert points(h.series(q("n0:gpu1", "gpu_temp")))["gpu_temp"] == [(b0, 55.0), (b1, 55.0)]
    assert points(h.series(q("zz:gpu9", "gpu_temp")))["gpu_temp"] == []


def test_sqlite_history(sqlite: SQLiteHistory) -> None:
    check_semantics(sqlite)


def test_sqlite_keeps_risk_and_level_but_not_derived_history(sqlite: SQLiteHistory) -> None:
    # Two Xids at rounds 3 and 4: a hard rule, level 3 from then on (as test_reader's InfluxDB).
    got = points(sqlite.series(q("n0:gpu0", "risk", "level")))
    assert got == {"risk": [(T0, 1.0), (T0 + 60, 1.0)], "level": [(T0, 3.0), (T0 + 60, 3.0)]}
    assert points(sqlite.series(q("n0:gpu1", "risk", step=120)))["risk"] == [(T0, 0.0)]
    assert points(sqlite.series(q("n0")))["risk"] == [(T0, 1.0), (T0 + 60, 1.0)]
    # A link never at risk has no rows, as in InfluxDB.
    assert points(sqlite.series(q("n0:gpu0:nvlink0", "risk")))["risk"] == []
    with pytest.raises(NotStored, match="ib_ber: derived at ingest and kept only in InfluxDB"):
        sqlite.series(q("n0:mlx5_0:1", "ib_ber", "ib_state"))


def test_sqlite_without_a_database_yet_has_no_points(tmp_path: Path) -> None:
    h = SQLiteHistory(tmp_path / "nothing-here.db")
    assert points(h.series(q("n0:gpu0", "gpu_temp")))["gpu_temp"] == []
    assert not (tmp_path / "nothing-here.db").exists()  # reading never creates it


# ---- validation --------------------------------------------------------------------------------

def build(key: str = "n0:gpu0", metrics: tuple[str, ...] = ("gpu_temp",),
          **kw: object) -> SeriesQuery:
    args: dict[str, object] = {"start": T0, "end": T0 + 3600, "now": T0 + 3600, **kw}
    return build_query(Entity.parse(key), list(metrics), **args)


def test_unknown_and_foreign_metrics_are_refused_with_the_valid_ones() -> None:
    with pytest.raises(QueryError, match=r"unknown metric 'gpu_tmp'; gpu metrics are: gpu_temp, .*"
                                         r"xid, risk, level"):
        build(metrics=("gpu_tmp",))
    with pytest.raises(QueryError, match="'nvlink_crc_flit' is a metric of nvlink, not of gpu"):
        build(metrics=("nvlink_crc_flit",))
    with pytest.raises(QueryError, match="'gpu_temp' is a metric of gpu, not of ib_port"):
        build("n0:mlx5_0:1", ("gpu_temp",))
    with pytest.raises(QueryError, match="rate=true applies to counters"):
        build(metrics=("gpu_temp",), rate=True)


def test_time_range_and_step_limits() -> None:
    with pytest.raises(QueryError, match="must be before"):
        build(start=T0, end=T0)
    with pytest.raises(QueryError, match=rf"gives 86400 points .* at most {MAX_POINTS}: use "
                                         r"step >= 8"):
        build(start=T0, end=T0 + 86400, step=1)
    with pytest.raises(QueryError, match="step must be"):
        build(step=0)
    assert build(start=T0, end=T0 + 86400, step=8).step == 8


def test_defaults_the_last_hour_and_an_auto_step() -> None:
    now = T0 + 7200.5
    got = build_query(GPU, [], now=now)
    assert (got.start, got.end, got.step) == (now - 3600, now, 5)
    assert [w.name for w in got.metrics] == [m.name for m in CATALOG.columns(Scope.GPU)]
    assert got.metrics[0].name == "gpu_temp"
    assert build_query(Entity.parse("n0"), [], now=now).metrics[0].name == "risk"
    only_from = build_query(GPU, [], start=T0, now=now)
    assert (only_from.start, only_from.end) == (T0, now)
    assert auto_step(T0, T0 + 86400) == 120
    assert auto_step(T0, T0 + 86400 * 3650) == math.ceil(86400 * 3650 / 720)
    assert buckets(T0, T0 + 60, 60) == 1 and buckets(T0 + 1, T0 + 61, 60) == 2


def test_aggregation_by_kind() -> None:
    got = build_query(GPU, ["gpu_temp", "ecc_sbe_volatile", "throttle_thermal", "xid", "risk"],
                      now=T0)
    assert [(w.name, w.agg, w.origin.value) for w in got.metrics] == [
        ("gpu_temp", Agg.MEAN, "sample"), ("ecc_sbe_volatile", Agg.MAX, "sample"),
        ("throttle_thermal", Agg.MAX, "sample"), ("xid", Agg.COUNT, "event"),
        ("risk", Agg.MAX, "risk")]
    ber = build_query(Entity.parse("n0:mlx5_0:1"), ["ib_ber"], now=T0)
    assert [(w.agg, w.origin.value, w.derived) for w in ber.metrics] == [
        (Agg.MEAN, "sample", True)]
    rate = build_query(GPU, ["ecc_sbe_volatile", "ecc_sbe_volatile"], rate=True, now=T0)
    assert [(w.agg, w.unit, w.resets) for w in rate.metrics] == [(Agg.MEAN, "errors/s", True)]


def test_times_are_epoch_seconds_or_rfc3339() -> None:
    assert parse_time("1700000000") == 1_700_000_000.0
    assert parse_time("1700000000.25") == 1_700_000_000.25
    assert parse_time("2023-11-14T22:13:20Z") == 1_700_000_000.0
    assert parse_time("2023-11-14t23:13:20+01:00") == 1_700_000_000.0
    for bad, why in (("yesterday", "neither"), ("2023-11-14T22:13:20", "no time zone"),
                     ("nan", "after 1970"), ("-5", "after 1970"), ("1e10", "past 2262"),
                     ("9999-01-01T00:00:00Z", "past 2262")):
        with pytest.raises(QueryError, match=why):
            parse_time(bad)


def test_index_tags_are_canonical() -> None:
    assert build_query(Entity.parse("n0:gpu03:nvlink07"), [], now=T0).entity.key == \
        "n0:gpu3:nvlink7"
