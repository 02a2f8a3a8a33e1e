"""A storm across shards: neither shard alone has enough hot nodes, the fleet does. The leader
judges it from the census (one FleetStorm, paged once, the breaker tripped); the other shard's
writer raises nothing fleet-wide."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from collectors.catalog import Scope
from collectors.frames import Batch, Entity, EntityTable, Frame
from models.detectors.findings import Finding
from models.detectors.view import FleetView
from service.assembly import Wiring, build_parts
from service.pipeline import Pipeline
from service.settings import Settings
from service.stages.fleet_alerts import STORM
from tests.notify.timeline import Recorder
from tests.pipeline.builders import Rounds

T0 = 1_700_000_000.0


class Warm:
    """Every GPU at warning (0.7): every node enters level 2."""

    name = "warm"

    def __init__(self) -> None:
        self.risk = 0.0

    def detect(self, view: FleetView, now: float) -> list[Finding]:
        n = len(view.scope(Scope.GPU).entities)
        risk = np.full(n, self.risk, np.float32)
        return [Finding("warm", Scope.GPU, risk, risk.astype(np.float64), 0.6, "warm")]


def _shard(tmp: Path, sid: str, dsn: str, dial: Warm) -> tuple[Pipeline, Recorder]:
    settings = Settings.model_validate({
        "storage": {"data_dir": str(tmp / sid), "postgres": {"dsn": dsn}},
        "cluster": {"shard_id": sid, "replica_id": sid},
        "alerts": {"for_s": (0, 0, 0), "long_window_s": 0, "dwell_s": (0, 0, 0)},
        # 4 nodes in all: a storm needs 3 (75 %); each shard has 2.
        "notify": {"storm": {"fraction": 0.75, "min_nodes": 3, "min_fleet": 4},
                   "route": {"receiver": "record", "group_wait_s": 0}},
    })
    record = Recorder("record")
    parts = build_parts(settings, Wiring.offline(alert_db=settings.storage.state_target,
                                                 detectors=[dial], notifiers=[record],
                                                 notify_background=False, remediate=True))
    pipe = Pipeline(parts)
    pipe.cluster.step()  # type: ignore[attr-defined]
    return pipe, record


def test_a_storm_across_shards_is_judged_once_by_the_leader(tmp_path: Path,
                                                            pg_dsn: str) -> None:
    dial = Warm()
    a, rec_a = _shard(tmp_path, "a", pg_dsn, dial)  # first: the leader
    b, rec_b = _shard(tmp_path, "b", pg_dsn, dial)
    assert a.cluster.leader() and not b.cluster.leader()
    assert a.cluster.writer() and b.cluster.writer()  # each writes its own shard
    ra, rb = Rounds(nodes=2, gpus=2), Renamed(Rounds(nodes=2, gpus=2), "m")
    try:
        dial.risk = 0.7
        t = T0
        for _ in range(3):
            t += 5
            b.process(rb.batch(t), t)  # b's nodes: m0, m1
            a.process(ra.batch(t), t)      # a's nodes: n0, n1; a judges after b published
        storms = [x for x in a.alerts.open_alerts() if x.alertname == STORM]
        assert len(storms) == 1, "the leader saw 4 hot nodes of 4 across both shards"
        # It counts the fleet's hot nodes and names the leader's own (the rest by number).
        expl = storms[0].explanation
        assert expl[0]["signal"] == "4 of 4 nodes at level >= 2 within 10 min"
        assert [e["signal"].split(":")[0] for e in expl if e["rule"] == "storm_node"] == [
            "n0 (warm)", "n1 (warm)"]
        assert [e["value"] for e in expl if e["rule"] == "storm_more"] == [2]
        assert not [x for x in b.alerts.find() if x.alertname == STORM and x.id != storms[0].id]
        assert rec_b.messages == []  # only the leader notifies
        assert any(al.labels.get("alertname") == STORM for m in rec_a.messages
                   for al in m.alerts)
        ctl = a.controller
        assert ctl is not None and ctl.breaker.is_open  # the storm tripped it
        assert b.controller is not None and b.controller.breaker.is_open  # one shared row
        assert a.parts.fleet_count.size() == 4  # the breaker's fleet is the whole fleet
    finally:
        a.close()
        b.close()


class Renamed:
    """Rounds with its nodes named `prefix`0, `prefix`1 ... (another shard's nodes)."""

    def __init__(self, rounds: Rounds, prefix: str) -> None:
        self.rounds = rounds
        self.tables = {scope: EntityTable(scope, [Entity.parse(prefix + t[i].key[1:])
                                                  for i in range(len(t))])
                       for scope, t in rounds.tables.items()}

    def batch(self, t: float) -> Batch:
        out = Batch()
        for scope, f in self.rounds.batch(t).frames.items():
            out.add(Frame(self.tables[scope], f.rows, f.ts, f.values))
        return out
