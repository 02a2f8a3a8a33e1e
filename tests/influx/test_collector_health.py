"""Collector health reaches InfluxDB through the running service: the service's own collectors
(no host tag) and node agents' (reported over /write, tagged with their host), every tick, so
the fleet dashboard's "collectors up" panel has both."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from collectors.collector_status import status_line
from service.api.app import create_app
from service.history.influx.sink import InfluxSink
from tests.influx.server import InfluxServer
from tests.influx.test_sink import settings
from tests.support.fleet import T0, BrokenCollector, Fleet, FleetCollector, ManualClock


def test_local_and_agent_collectors_are_recorded(influx_server: InfluxServer,
                                                 tmp_path: Path) -> None:
    s = settings(influx_server, tmp_path)
    db = s.storage.influxdb.database
    clock = ManualClock(T0)
    local = [FleetCollector(Fleet({"svc": 1}), clock), BrokenCollector("local")]
    app = create_app(s, collectors=local, clock=clock, schedule=False)
    with TestClient(app) as c:
        st = app.state.gpuhealth
        body = "\n".join([status_line("n7", "dcgm", True, 0.1, 40, "", int(T0 * 1e9)),
                          status_line("n8", "nvml", False, 0.2, 0, "NVML: driver not loaded",
                                      int(T0 * 1e9))])
        assert c.post("/write", content=body).status_code == 204
        st.scheduler.collect_once("fleet")
        st.scheduler.collect_once("local")
        assert st.scheduler.score_once() is not None
        (sink,) = [o for o in st.pipeline.observers if isinstance(o, InfluxSink)]
        assert sink.flush(30)
    rows = influx_server.query('SELECT "up","error" FROM "collector" GROUP BY "host","collector"',
                               db)
    got = {(r["tags"]["host"], r["tags"]["collector"]): r["values"][0][1:]  # type: ignore[index]
           for r in rows}
    assert got[("", "fleet")] == [1, ""]
    assert got[("", "local")][0] == 0 and got[("", "local")][1]
    assert got[("n7", "dcgm")] == [1, ""]
    assert got[("n8", "nvml")] == [0, "NVML: driver not loaded"]
