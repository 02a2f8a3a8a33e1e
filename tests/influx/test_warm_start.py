"""Warm start from a real InfluxDB: a service restarted mid-trace replays its recent history
into the detectors, so a sustained-duration rule that started before the restart fires at the
same tick as in a run that never stopped."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from service.assembly import Wiring
from service.history.influx.client import InfluxClient
from service.history.influx.rounds import InfluxRounds
from service.history.influx.sink import InfluxSink
from service.pipeline import Pipeline, build_pipeline
from service.runtime.warm import warm_start
from service.settings import Settings
from tests.influx.server import InfluxServer
from tests.pipeline.builders import T0, Rounds

_db = itertools.count()
HOT_FROM = T0 + 300  # HBM above 85 degC from here on
HOLD_S = 600.0
END = T0 + 1500


def settings(srv: InfluxServer, tmp: Path) -> Settings:
    return Settings(  # type: ignore[arg-type]
        storage={"data_dir": tmp, "influxdb": {"url": srv.url, "database": f"w{next(_db)}",
                                               "raw_retention": "INF"}},
        detectors={"dynamic": {"hbm_temp_hold_s": HOLD_S}})


def fires_at(p: Pipeline, r: Rounds, start: float, end: float) -> float | None:
    """Feed rounds [start, end); the data time the sustained-HBM rule first shows on n0:gpu0."""
    t = start
    while t < end:
        r.set("n0:gpu0", "mem_temp", 90.0 if t >= HOT_FROM else 60.0)
        tick = p.process(r.batch(t), t)
        e = tick.risk.entity("n0:gpu0")
        if e is not None and any(s.rule == "hbm_temp_sustained" for s in e.signals):
            return t
        t += 5
    return None


@pytest.mark.slow
def test_sustained_rule_fires_on_time_after_a_restart(influx_server: InfluxServer,
                                                      tmp_path: Path) -> None:
    # Reference: one run that never stops.
    ref = build_pipeline(settings(influx_server, tmp_path / "ref"),
                                  Wiring.offline(sinks=(), influxdb=False, notifiers=None))
    expected = fires_at(ref, Rounds(nodes=1, gpus=2, links=1, ports=1), T0, END)
    ref.close()
    assert expected == HOT_FROM + HOLD_S

    s = settings(influx_server, tmp_path / "run")
    restart_at = T0 + 600  # 300 s into the hot period: the timer has run half its hold
    r = Rounds(nodes=1, gpus=2, links=1, ports=1)
    p1 = build_pipeline(s, Wiring.offline(alert_db=str(tmp_path / "alerts.db"), notifiers=None))
    assert fires_at(p1, r, T0, restart_at) is None
    (sink,) = [x for x in p1.sinks if isinstance(x, InfluxSink)]
    assert sink.flush(30)
    p1.close()

    # Restarted: warm start from InfluxDB, then carry on with live rounds.
    p2 = build_pipeline(s, Wiring.offline(alert_db=str(tmp_path / "alerts.db"), notifiers=None))
    history = InfluxRounds(InfluxClient(s.storage.influxdb), s.storage.influxdb.cluster)
    st = warm_start(p2, history, restart_at, lookback_s=4 * 3600, tick_s=5.0)
    assert st.rounds == 120 and st.rejected == 0 and st.first == T0
    assert fires_at(p2, r, restart_at, END) == expected
    p2.close()

    # Without the warm start the timer starts again at the restart: the rule fires late.
    p3 = build_pipeline(s, Wiring.offline(sinks=(), influxdb=False, notifiers=None))
    assert fires_at(p3, r, restart_at, END) == restart_at + HOLD_S
    p3.close()


def test_service_starts_cold_when_influxdb_is_unreachable(tmp_path: Path) -> None:
    from service.runtime.warm import warm_start_from_settings
    from tests.influx.server import free_port

    s = Settings(storage={"data_dir": tmp_path, "influxdb": {  # type: ignore[arg-type]
        "url": f"http://127.0.0.1:{free_port()}", "timeout_s": 1.0}})
    p = build_pipeline(s, Wiring.offline(sinks=(), influxdb=False, notifiers=None))
    try:
        assert warm_start_from_settings(p, T0) is None
    finally:
        p.close()


@pytest.mark.slow
def test_warm_start_through_the_app_lifespan(influx_server: InfluxServer, tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from service.api.app import create_app

    s = settings(influx_server, tmp_path)
    p1 = build_pipeline(s, Wiring.offline(alert_db=str(tmp_path / "alerts.db"), notifiers=None))
    r = Rounds(nodes=1, gpus=2, links=1, ports=1)
    fires_at(p1, r, T0, T0 + 600)
    (sink,) = [x for x in p1.sinks if isinstance(x, InfluxSink)]
    assert sink.flush(30)
    p1.close()
    app = create_app(s, clock=lambda: T0 + 600, schedule=False)
    with TestClient(app):
        p = app.state.gpuhealth.pipeline
        assert p.stats.samples_ingested == 0  # warm start is history, not new ingest
        assert fires_at(p, r, T0 + 600, END) == HOT_FROM + HOLD_S


def test_a_static_shard_warm_starts_only_its_own_nodes(influx_server: InfluxServer,
                                                        tmp_path: Path) -> None:
    """Shards of `cluster.shards` share one InfluxDB: each replays the nodes it owns only, so
    none scores (and alerts on) another's nodes after a restart."""
    from service.cluster.settings import ShardSettings
    from service.cluster.shard_map import ShardMap
    from service.runtime.warm import warm_start_from_settings

    s = settings(influx_server, tmp_path)
    p1 = build_pipeline(s, Wiring.offline(alert_db=str(tmp_path / "alerts.db"), notifiers=None))
    r = Rounds(nodes=6, gpus=1, links=1, ports=1)
    for k in range(5):
        p1.process(r.batch(T0 + 5 * k), T0 + 5 * k)
    (sink,) = [x for x in p1.sinks if isinstance(x, InfluxSink)]
    assert sink.flush(30)
    p1.close()
    shards = [ShardSettings(id="a", url="http://127.0.0.1:1"),
              ShardSettings(id="b", url="http://127.0.0.1:2")]
    sharded = s.model_copy(update={"cluster": s.cluster.model_copy(update={
        "shard_id": "a", "shards": shards})})
    smap = ShardMap.from_settings(sharded.cluster)
    assert smap is not None
    mine = sorted(f"n{i}" for i in range(6) if smap.is_local(f"n{i}"))
    assert 0 < len(mine) < 6  # both shards own some of the six
    p2 = build_pipeline(sharded, Wiring.offline(alert_db=str(tmp_path / "a2.db"),
                                                notifiers=None))
    try:
        stats = warm_start_from_settings(p2, T0 + 25)
        assert stats is not None and stats.samples > 0
        assert sorted(p2.store.registry.nodes) == mine
    finally:
        p2.close()
