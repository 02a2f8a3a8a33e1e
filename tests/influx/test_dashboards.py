"""Every query of every shipped dashboard, run against a real InfluxDB holding what the sink
wrote from a replayed cluster with a failure: each must run and return data."""

from __future__ import annotations

from pathlib import Path

import pytest

from collectors.base import CollectorStatus
from service.assembly import Wiring
from service.grafana.inventory import ALL, all_queries, expand
from service.history.influx.client import InfluxClient
from service.history.influx.sink import InfluxSink
from service.notify.message import Delivery, Message
from service.pipeline import build_pipeline
from service.settings import Settings
from tests.influx.server import InfluxServer
from tests.pipeline.builders import T0, Rounds

ROUNDS = 60
# States this 5-minute trace never reaches (an alert open at level 1 at the end, a level 3 that
# steps down without resolving): those queries must run, but may return nothing.
MAY_BE_EMPTY = {"Open at level 1 [A]", "Alert level changes per interval [C]"}


class DownPager:
    """A receiver whose far end refuses everything (no retry), for the failed-delivery panels."""

    name = "pager"

    async def notify(self, msg: Message) -> Delivery:
        return Delivery(ok=False, retry=False, detail="pager unreachable")
QUERIES = all_queries()


@pytest.fixture(scope="module")
def filled(influx_server: InfluxServer, tmp_path_factory: pytest.TempPathFactory) -> InfluxClient:
    tmp = Path(tmp_path_factory.mktemp("dash"))
    s = Settings(storage={"data_dir": tmp, "influxdb": {  # type: ignore[arg-type]
        "url": influx_server.url, "database": "dashboards", "cluster": "c1",
        "raw_retention": "INF"}},
        # Quick resolves, so the trace shows every kind of level change.
        alerts={"resolve_for_s": 30, "dwell_s": (0, 0, 0)},
        notify={"route": {"receiver": "record", "group_wait_s": 0, "group_interval_s": 5,
                          "routes": [{"matchers": ["level>=2"], "receiver": "pager",
                                      "continue": True}]},
                "receivers": [{"name": "pager", "type": "webhook",
                               "config": {"url": "http://127.0.0.1:9/never-used"}}]})
    # A pager that is down, so the failed-delivery panels have something to show.
    p = build_pipeline(s, Wiring.offline(alert_db=str(tmp / "alerts.db"), notifiers=[DownPager()],
                                         notify_background=False))
    (sink,) = [x for x in p.sinks if isinstance(x, InfluxSink)]
    sink.track_collectors(lambda: {("n0", "nvml"): CollectorStatus(),
                                   ("n1", "infiniband"): CollectorStatus(False, "sysfs gone")})
    r = Rounds(nodes=2, gpus=4, links=2, ports=2)
    try:
        for k in range(ROUNDS):
            t = T0 + 5 * k
            r.add("n0:gpu1", "ecc_sbe_volatile", 40.0)
            r.add("n0:gpu1", "ecc_sbe_aggregate", 40.0)
            r.add("n1:mlx5_1:1", "ib_symbol_error", 50.0)
            r.add("n0:gpu2:nvlink1", "nvlink_crc_flit", 10.0)
            if k == 10:
                r.set("n0:gpu3", "gpu_temp", 97.0)  # past shutdown: a hard thermal signal
            if k == 14:
                r.set("n0:gpu3", "gpu_temp", 55.0)
            if k == 30:
                r.set("n1:gpu2", "ecc_dbe_volatile", 1.0)
                r.set("n1:gpu3", "retired_pages_dbe", 2.0)
            b = r.batch(t)
            if k == 25:
                b.events.add("n1:gpu0", t, "xid", 79.0)  # fell off the bus
            if k == 40:
                b.events.add("n0:gpu0", t, "xid", 13.0)  # a graphics engine exception
            p.process(b, t)
        assert sink.flush(60)
    finally:
        p.close()
    return InfluxClient(s.storage.influxdb)


@pytest.mark.parametrize("q", QUERIES, ids=[f"{q.dashboard}:{q.title}" for q in QUERIES])
def test_every_dashboard_query_runs_and_returns_data(filled: InfluxClient, q: object) -> None:
    from service.grafana.inventory import DashboardQuery

    assert isinstance(q, DashboardQuery)
    sql = expand(q.query, {"cluster": "c1", "node": ALL, "gpu": ALL, "device": ALL},
                 time_range=(T0, T0 + 5 * ROUNDS), interval="30s")
    results = filled.query(sql)  # raises on any InfluxQL error
    series = [s for statement in results for s in statement]
    assert series or q.title in MAY_BE_EMPTY, f"{q.title}: no data for\n{sql}"
    for s in series:
        assert s.columns and s.values, f"{q.title}: empty series"
        if q.kind == "panel" and s.columns[0] == "time":
            assert all(isinstance(row[0], int) for row in s.values)
