"""Labels land in InfluxDB beside the scores: an auto failure at its own time with its mode
and alert, a verdict's label at the next tick, and a withdrawn verdict label overwritten in
place with withdrawn=true (same series and time), against a real influxd."""

from __future__ import annotations

from pathlib import Path

from service.assembly import Wiring
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
