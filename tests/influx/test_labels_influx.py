"""Labels land in InfluxDB beside the scores: an auto failure at its own time with its mode
and alert, a verdict's label at the next tick, and a withdrawn verdict label overwritten in
place with withdrawn=true (same series and time), against a real influxd."""

from __future__ import annotations

from pathlib import Path

from collectors.diagnostics.classes import FaultClass
from collectors.frames import EventFrame
from service.assembly import Wiring
from service.history.influx.client import InfluxClient
from service.history.influx.labels import LabelReader
from service.history.influx.sink import InfluxSink
from service.pipeline import build_pipeline
from tests.influx.server import InfluxServer
from tests.influx.test_sink import settings
from tests.pipeline.builders import T0, Rounds


def test_auto_and_verdict_labels_land_in_influxdb(influx_server: InfluxServer,
                                                  tmp_path: Path) -> None:
    s = settings(influx_server, tmp_path)
    db = s.storage.influxdb.database
    p = build_pipeline(s, Wiring.offline(alert_db=str(tmp_path / "a.db"), autolabel=True))
    (sink,) = [x for x in p.sinks if isinstance(x, InfluxSink)]
    r = Rounds(nodes=1, gpus=2, links=2, ports=1)
    try:
        for k in range(4):
            if k == 2:
                r.set("n0:gpu1", "ecc_dbe_volatile", 1.0)
            p.process(r.batch(T0 + 5 * k), T0 + 5 * k)
        (auto,) = p.labels.find()
        assert auto.alert_id is not None
        p.verdicts.give(auto.alert_id, "false_alarm", actor="ops", via="api", now=T0 + 20)
        p.process(r.batch(T0 + 20), T0 + 20)
        p.verdicts.give(auto.alert_id, "unknown", actor="ops", via="api", now=T0 + 25)
        p.process(r.batch(T0 + 25), T0 + 25)
        assert sink.flush(30)
    finally:
        p.close()
    got = influx_server.query('SELECT "kind","mode","source","alert_id","action","withdrawn" '
                              'FROM "label" GROUP BY "label_id"', db)
    rows = sorted((x["values"][0][1:], x["values"][0][0])  # type: ignore[index]
                  for x in got)
    assert [v for v, _ in rows] == [
        ["benign", None, "verdict", auto.alert_id, "false_alarm", True],
        ["failure", "M1_hbm", "rule:dbe", auto.alert_id, "", False]]
    times = {v[0]: t for v, t in rows}
    assert times["failure"].startswith("2023-11-14T22:00:10")  # T0 + 10: the tick it fired


def test_a_failed_diagnostic_is_a_label_train_from_influx_reads(influx_server: InfluxServer,
                                                                 tmp_path: Path) -> None:
    """A node with no passive signal fails its NCCL test (the `diag` event service/diagnostics
    publishes): the failure label reaches InfluxDB with the active-only mode, and the reader
    `gpuhealth train --from-influx` uses returns it (issue 32)."""
    s = settings(influx_server, tmp_path)
    p = build_pipeline(s, Wiring.offline(alert_db=str(tmp_path / "a.db"), autolabel=True))
    (sink,) = [x for x in p.sinks if isinstance(x, InfluxSink)]
    r = Rounds(nodes=2, gpus=2, links=2, ports=1)
    try:
        for k in range(4):
            b = r.batch(T0 + 5 * k)
            if k == 2:
                b.events = EventFrame(["n1"], [T0 + 5 * k], ["diag"],
                                      [float(FaultClass.P2P_BANDWIDTH)])
            p.process(b, T0 + 5 * k)
        assert sink.flush(30)
    finally:
        p.close()
    rows = LabelReader(InfluxClient(s.storage.influxdb), "c1").read(T0, T0 + 60)
    assert [(x["kind"], x["entity"], x["mode"], x["source"]) for x in rows] == [
        ("failure", "n1", "M14_p2p_bw", "rule:diag_p2p_bandwidth")]
    events = influx_server.query('SELECT "code" FROM "diag"', s.storage.influxdb.database)
    assert [v[1] for x in events for v in x["values"]] == [3]  # type: ignore[index]
