"""The InfluxDB sink against a real influxd: every measurement of docs/influxdb.md lands with
its tags and field types, counts match what ingest accepted, and schema set-up is idempotent."""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import pytest

from service.assembly import Wiring
from service.history.influx.client import InfluxClient
from service.history.influx.sink import InfluxSink
from service.pipeline import Pipeline, build_pipeline
from service.settings import Settings
from tests.influx.server import InfluxServer
from tests.pipeline.builders import T0, Rounds

_db = itertools.count()


def settings(srv: InfluxServer, tmp: Path, **influx: object) -> Settings:
    # Test traces are dated 2023: keep raw points forever unless a test says otherwise.
    cfg = {"url": srv.url, "database": f"t{next(_db)}", "cluster": "c1",
           "raw_retention": "INF", **influx}
    return Settings(storage={"data_dir": tmp, "influxdb": cfg})  # type: ignore[arg-type]


def pipeline(s: Settings, tmp: Path) -> tuple[Pipeline, InfluxSink]:
    p = build_pipeline(s, Wiring.offline(alert_db=str(tmp / "alerts.db"), notify_background=False,
                                         notifiers=None))
    (sink,) = [x for x in p.sinks if isinstance(x, InfluxSink)]
    return p, sink


def test_samples_rates_risk_and_alerts_land_in_influxdb(influx_server: InfluxServer,
                                                        tmp_path: Path) -> None:
    s = settings(influx_server, tmp_path)
    db = s.storage.influxdb.database
    p, sink = pipeline(s, tmp_path)
    r = Rounds(nodes=2, gpus=4, links=2, ports=1)
    rounds = 30
    try:
        for k in range(rounds):
            r.add("n0:gpu1", "ecc_sbe_volatile", 3.0)
            if k == 20:
                r.set("n1:gpu2", "ecc_dbe_volatile", 1.0)  # a hard rule: level 3 at once
            p.process(r.batch(T0 + 5 * k), T0 + 5 * k)
        assert sink.flush(30)
    finally:
        p.close()
    q = influx_server
    assert q.count("gpu", "gpu_temp", db) == rounds * 8
    # Quiet links are written once and then every 55 s (150 s of rounds: 3 points each), and
    # every GPU's point says which of its links reported (both, bits 0 and 1).
    assert q.count("nvlink", "nvlink_state", db) == 3 * 16
    assert q.count("gpu", "nvlink_mask", db, "\"nvlink_mask\" = 3") == rounds * 8
    assert q.count("ib_port", "ib_state", db) == rounds * 2
    # The BER is derived from the second reading on, merged into the port's own points.
    assert q.count("ib_port", "ib_ber", db) == (rounds - 1) * 2
    assert q.count("ib_port", "ib_rate", db) == rounds * 2
    # Rates start at the second reading of each counter; 3 errors per 5 s is 0.6/s.
    rate = q.query('SELECT "ecc_sbe_volatile" FROM "gpu_rate" WHERE "host"=\'n0\' AND '
                   '"gpu"=\'1\'', db)
    values = rate[0]["values"]
    assert isinstance(values, list) and len(values) == rounds - 1
    assert all(v[1] == pytest.approx(0.6) for v in values)
    # Risk: every GPU and node every tick, tagged with the cluster.
    assert q.count("risk", "risk", db, "\"scope\"='gpu' AND \"cluster\"='c1'") == rounds * 8
    assert q.count("risk", "risk", db, "\"scope\"='node'") == rounds * 2
    top = q.query('SELECT "risk","level","top" FROM "risk" WHERE "entity"=\'n1:gpu2\' '
                  'ORDER BY time DESC LIMIT 1', db)[0]["values"]
    assert isinstance(top, list)
    _, risk, level, why = top[0]
    assert risk == 1.0 and level == 3 and why.startswith("dbe: uncorrectable ECC errors")
    alerts = q.query('SELECT "level","previous","state","alert_id" FROM "alert" WHERE '
                     '"entity"=\'n1:gpu2\'', db)[0]["values"]
    assert isinstance(alerts, list)
    assert [(a[1], a[2], a[3]) for a in alerts] == [(3, 0, "firing")]
    actions = q.query('SELECT count("ok") FROM "action" GROUP BY "channel"', db)
    # The default route: every level to the record receiver, after group_wait (30 s).
    assert {str(x["tags"]["channel"]) for x in actions} == {"record"}  # type: ignore[index]
    # Field types are fixed: counters integer, gauges and rates float.
    types = {(x["name"], v[0]): v[1] for x in q.query("SHOW FIELD KEYS", db)
             for v in x["values"]}  # type: ignore[union-attr]
    assert types[("gpu", "ecc_sbe_volatile")] == "integer"
    assert types[("gpu", "gpu_temp")] == "float"
    assert types[("gpu_rate", "ecc_sbe_volatile")] == "float"
    assert types[("risk", "top")] == "string"
    assert types[("ib_port", "ib_ber")] == "float"


def test_schema_creates_policies_and_continuous_queries(influx_server: InfluxServer,
                                                        tmp_path: Path) -> None:
    s = settings(influx_server, tmp_path, raw_retention="7d")
    db = s.storage.influxdb.database
    p, sink = pipeline(s, tmp_path)
    now = float(int(time.time()) // 5 * 5)  # inside the 7-day policy
    try:
        p.process(Rounds(nodes=1, gpus=2, links=1, ports=1).batch(now), now)
        assert sink.flush(30)
    finally:
        p.close()
    rps = influx_server.query(f'SHOW RETENTION POLICIES ON "{db}"')[0]["values"]
    assert isinstance(rps, list)
    by_name = {v[0]: v for v in rps}
    assert by_name["raw"][1] == "168h0m0s" and by_name["raw"][4] is True
    assert "rollup_5m" in by_name
    cqs = {str(v[0]) for x in influx_server.query("SHOW CONTINUOUS QUERIES")
           if x["name"] == db for v in x["values"]}  # type: ignore[union-attr]
    assert {"cq_gpu_5m", "cq_risk_5m", "cq_ib_port_rate_5m"} <= cqs
    # Running it again (a restart) keeps everything and fails nothing.
    s2 = s.model_copy()
    p2, sink2 = pipeline(s2, tmp_path)
    try:
        p2.process(Rounds(nodes=1, gpus=2, links=1, ports=1).batch(now + 5), now + 5)
        assert sink2.flush(30)
    finally:
        p2.close()
    assert influx_server.count("gpu", "gpu_temp", db) == 4


def test_client_reports_influxdb_errors(influx_server: InfluxServer, tmp_path: Path) -> None:
    from service.history.influx.client import InfluxError

    c = InfluxClient(settings(influx_server, tmp_path).storage.influxdb)
    with pytest.raises(InfluxError, match="database not found"):
        c.query('SELECT * FROM "gpu"')
    with pytest.raises(InfluxError, match="error parsing query"):
        c.query("SELEKT 1")
