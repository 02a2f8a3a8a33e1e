"""Long ranges past raw retention are read from the 5-minute rollups: the part of a range older
than raw retention comes from the rollups (and agrees with raw for mean and max), the rest from
raw, and aggregations the rollups do not keep are read from raw."""

from __future__ import annotations

import httpx
import pytest

from collectors.frames import Entity
from service.assembly import Wiring
from service.history.history import Agg, SeriesOut, build_query
from service.history.influx.client import InfluxClient
from service.history.influx.reader import InfluxHistory
from service.history.influx.schema import ROLLUP_RP, backfill_rollups
from service.history.influx.sink import InfluxSink
from service.pipeline import build_pipeline
from service.settings import Settings
from tests.influx.server import InfluxServer
from tests.influx.test_sink import settings
from tests.pipeline.builders import T0, Rounds

HOUR = 3600.0
GONE = T0 + 1800  # where a day of raw retention ends, by the readers' clock


@pytest.fixture(scope="module")
def stored(influx_server: InfluxServer, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    tmp = tmp_path_factory.mktemp("rollups")
    s = settings(influx_server, tmp, rollup_retention="INF")  # the trace is dated 2023
    p = build_pipeline(s, Wiring.offline(alert_db=str(tmp / "alerts.db"), notifiers=None))
    r = Rounds(nodes=1, gpus=2, links=1, ports=1)
    try:
        for k in range(int(HOUR / 5)):
            r.set("n0:gpu0", "gpu_temp", 50.0 + k % 7)
            r.add("n0:gpu0", "ecc_sbe_volatile", float(k % 3))
            p.process(r.batch(T0 + 5 * k), T0 + 5 * k)
        (sink,) = [x for x in p.sinks if isinstance(x, InfluxSink)]
        assert sink.flush(30)
    finally:
        p.close()
    c = InfluxClient(s.storage.influxdb)
    try:
        backfill_rollups(c, T0, T0 + HOUR)
    finally:
        c.close()
    return s


def _read(s: Settings, keep: float | None, *metrics: str, step: int, rate: bool = False,
          agg: Agg | None = None) -> dict[str, list[tuple[float, float]]]:
    h = InfluxHistory(InfluxClient(s.storage.influxdb), "c1", raw_keep_s=keep,
                      clock=lambda: GONE + 86400)  # a day of raw retention ends at GONE
    try:
        q = build_query(Entity.gpu("n0", 0), metrics, start=T0, end=T0 + HOUR, step=step,
                        rate=rate, agg=agg, now=T0 + HOUR)
        out: list[SeriesOut] = h.series(q)
    finally:
        h.close()
    return {o.metric.name: list(zip(o.times, o.values, strict=True)) for o in out}


@pytest.mark.slow
def test_reads_past_raw_retention_come_from_the_rollups(stored: Settings,
                                                        influx_server: InfluxServer) -> None:
    cases = [(("gpu_temp", "mem_temp"), False, None), (("gpu_temp",), False, Agg.MAX),
             (("ecc_sbe_volatile",), True, None), (("risk", "level"), False, None)]
    for m, rate, agg in cases:
        for step in (300, 900):
            raw = _read(stored, None, *m, step=step, rate=rate, agg=agg)
            mixed = _read(stored, 86400, *m, step=step, rate=rate, agg=agg)
            assert mixed.keys() == raw.keys()
            for name, pts in mixed.items():
                want = raw[name]
                assert [t for t, _ in pts] == [t for t, _ in want], (name, step)
                # Mean of 5-minute means: exact for full buckets; the first rate bucket has
                # one reading fewer (rates start at the second), hence the tolerance.
                assert [v for _, v in pts] == pytest.approx([v for _, v in want], rel=1e-3), (
                    name, step)
    # Mark one rollup before GONE and one after: only the first is read, the rest is raw.
    # (DELETE in InfluxDB 1.x spans every policy, so dropping the raw half is no test.)
    tags = "cluster=c1,gpu=0,host=n0"
    body = "\n".join(f"gpu,{tags} mean_gpu_temp=999 {int(t * 1e9)}" for t in (T0, GONE))
    r = httpx.post(f"{influx_server.url}/write", content=body, params={
        "db": stored.storage.influxdb.database, "rp": ROLLUP_RP})
    assert r.status_code == 204, r.text
    mixed = dict(_read(stored, 86400, "gpu_temp", step=300)["gpu_temp"])
    raw = dict(_read(stored, None, "gpu_temp", step=300)["gpu_temp"])
    assert mixed[T0] == 999 and raw[T0] < 60
    assert mixed[GONE] == raw[GONE] < 60
    # Rollups keep mean and max only: a minimum is read from raw, whatever is left there.
    low = _read(stored, 86400, "gpu_temp", step=300, agg=Agg.MIN)["gpu_temp"]
    assert low[0] == (T0, 50.0)


def test_rollups_are_not_read_while_raw_covers_the_range(stored: Settings) -> None:
    h = InfluxHistory(InfluxClient(stored.storage.influxdb), "c1", raw_keep_s=86400,
                      clock=lambda: T0 + HOUR)
    try:
        q = build_query(Entity.gpu("n0", 0), ["gpu_temp"], start=T0, end=T0 + HOUR, step=300,
                        now=T0 + HOUR)
        assert h._rollup_until(q) is None
        five = build_query(Entity.gpu("n0", 0), ["gpu_temp"], start=T0 - 86400,
                           end=T0 + HOUR, step=5 * 60 + 5, now=T0 + HOUR)
        assert h._rollup_until(five) is None  # off the 5-minute grid: raw only
    finally:
        h.close()
