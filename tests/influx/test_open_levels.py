"""What the dashboards count as open is what is open: a node with no data (NodeNoData, level 2)
and a silent GPU (GpuMissing) show in the "Open at level N" tiles and the level table, and a
link alert that resolved stops counting the tick it resolves, not when it ages out of the
dashboard's time range. Against a real InfluxDB, through the sink the service uses."""

from __future__ import annotations

from pathlib import Path

from service.assembly import Wiring
from service.grafana.inventory import ALL, all_queries, expand
from service.history.influx.client import InfluxClient
from service.history.influx.sink import InfluxSink
from service.pipeline import build_pipeline
from service.settings import Settings
from tests.influx.server import InfluxServer
from tests.pipeline.builders import T0, Rounds

STEP = 5.0


def _count(client: InfluxClient, title: str, end: float) -> int:
    (q,) = [q for q in all_queries() if q.title == title]
    sql = expand(q.query, {"cluster": "c1", "node": ALL, "gpu": ALL, "device": ALL},
                 time_range=(T0, end), interval="30s")
    rows = [row for statement in client.query(sql) for s in statement for row in s.values]
    return int(rows[0][1]) if rows else 0


def _entities_at(client: InfluxClient, level: int, end: float) -> set[str]:
    sql = (f"SELECT last(\"level\") AS \"level\" FROM \"risk\" WHERE time >= {int(T0)}s AND "
           f"time <= {int(end)}s AND \"cluster\" = 'c1' GROUP BY \"entity\"")
    out = set()
    for statement in client.query(sql):
        for s in statement:
            if s.values[-1][1] == level:
                out.add(s.tags["entity"])
    return out


def test_open_counts_follow_node_alerts_and_resolves(influx_server: InfluxServer,
                                                     tmp_path: Path) -> None:
    s = Settings(storage={"data_dir": tmp_path, "influxdb": {  # type: ignore[arg-type]
        "url": influx_server.url, "database": "open_levels", "cluster": "c1",
        "raw_retention": "INF"}},  # the trace is in 2023: keep it
        alerts={"resolve_for_s": 20, "dwell_s": (0, 0, 0)},  # type: ignore[arg-type]
        detectors={"model": {"path": "none"}})  # type: ignore[arg-type]
    p = build_pipeline(s, Wiring.offline(alert_db=str(tmp_path / "alerts.db")))
    (sink,) = [x for x in p.sinks if isinstance(x, InfluxSink)]
    r = Rounds(nodes=3, gpus=4, links=2, ports=1)
    silent = tuple(e.key for t in r.tables.values() for e in t.entities if e.node == "n2")
    t = T0
    try:
        for k in range(80):
            t = T0 + STEP * k
            r.set("n0:gpu1:nvlink0", "nvlink_state", 0.0 if 4 <= k < 8 else 1.0)
            gone = silent if k >= 20 else ()
            if k >= 30:
                gone += ("n1:gpu3",)
            p.process(r.batch(t, missing=gone), t)
        assert sink.flush(60)
    finally:
        p.close()
    client = InfluxClient(s.storage.influxdb)
    assert "n0:gpu1:nvlink0" not in _entities_at(client, 3, t)  # resolved long ago
    assert _entities_at(client, 0, t) >= {"n0:gpu1:nvlink0"}
    assert {"n2", "n1:gpu3"} <= _entities_at(client, 2, t)
    assert _count(client, "Open at level 3 [A]", t) == 0
    assert _count(client, "Open at level 2 [A]", t) == 2  # the silent node and the silent GPU
