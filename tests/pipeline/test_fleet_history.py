"""Names from the wire without a history (issue 29, defect 7): phantom nodes re-sent while a
storm begins must not dilute the fleet the storm and the breaker judge against, and names
that report once must not raise a level-2 alert (a notification) each when they fall silent.
The real pipeline, remediation in auto mode through a command hook that logs each drain."""

from __future__ import annotations

import stat
from pathlib import Path

import numpy as np

from collectors.catalog import CATALOG, Scope
from collectors.frames import Batch, Entity, EntityTable, Frame
from service.assembly import Wiring
from service.pipeline import Pipeline, build_pipeline
from service.remediation.config import RemediationSettings
from service.remediation.wiring import Remediator, build_remediation
from service.settings import Settings
from service.stages.fleet_alerts import MISSING, NODATA, STORM
from tests.pipeline.builders import T0, Rounds

STEP = 5.0


def _one_liners(names: list[str], ts: float, gpu: int = 0) -> Batch:
    """One line each: a GPU's temperature, nothing else."""
    table = EntityTable(Scope.GPU, [Entity.gpu(n, gpu) for n in names])
    v = np.full((len(names), len(CATALOG.columns(Scope.GPU))), np.nan)
    v[:, CATALOG.column(Scope.GPU, "gpu_temp")] = 40.0
    b = Batch()
    b.add(Frame(table, np.arange(len(names), dtype=np.int32), np.full(len(names), ts), v))
    return b


def _pipeline(tmp: Path) -> tuple[Pipeline, Path]:
    log = tmp / "drains.log"
    script = tmp / "drain.sh"
    script.write_text(f'#!/bin/sh\necho "$@" >> "{log}"\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    settings = Settings.model_validate({
        "storage": {"data_dir": tmp}, "detectors": {"model": {"path": "none"}},
        "notify": {"route": {"receiver": "record", "group_wait_s": 0}}})
    pipe = build_pipeline(settings, Wiring.offline(alert_db=str(tmp / "a.db"),
                                                   notify_background=False, notifiers=None))
    cfg = RemediationSettings.model_validate({  # the breaker's defaults: 10 %, 5 nodes
        "mode": "auto", "hook": "command",
        "hook_config": {"drain": [str(script), "drain", "{node}"],
                        "release": [str(script), "release", "{node}"]}})
    pipe.remediation = build_remediation(cfg, pipe.alerts, str(tmp / "a.db"),
                                         lambda: pipe.fleet_size, now=T0)
    return pipe, log


def test_phantoms_resent_while_fresh_hide_no_storm_and_drain_nothing(tmp_path: Path) -> None:
    pipe, log = _pipeline(tmp_path)
    r = Rounds(nodes=40, gpus=1, links=1, ports=1)
    phantoms = [f"ph{i:04d}" for i in range(1000)]
    t = T0
    try:
        for k in range(14):  # the real fleet, past the service's first minute
            t = T0 + STEP * k
            pipe.process(r.batch(t), t)
        assert pipe.fleet_size == 40
        for _ in range(6):  # an unknown sender re-sends 1,000 one-line nodes every round
            t += STEP
            pipe.ingest(_one_liners(phantoms, t), t)
            pipe.process(r.batch(t), t)
        assert len(pipe.store.registry.nodes) == 1040 and pipe.fleet_size == 40
        for i in range(20):  # half the real fleet fails at once
            r.set(f"n{i}:gpu0", "ecc_dbe_volatile", 1.0)
        for _ in range(3):
            t += STEP
            pipe.ingest(_one_liners(phantoms, t), t)
            pipe.process(r.batch(t), t)
        assert isinstance(pipe.remediation, Remediator)
        ctl = pipe.remediation.controller
        assert ctl.wait(10)
        assert [a.name for a in pipe.alerts.open_alerts() if a.name == STORM] == [STORM]
        drained = log.read_text().splitlines() if log.exists() else []
        assert len(drained) <= ctl.breaker.allowed(40), drained
        assert ctl.breaker.is_open
    finally:
        pipe.close()


def test_one_shot_names_raise_no_level_2_alert(tmp_path: Path) -> None:
    pipe, _ = _pipeline(tmp_path)
    r = Rounds(nodes=4, gpus=2, links=1, ports=1)
    raised: list[tuple[str, str]] = []
    t = T0
    try:
        for k in range(60):  # five minutes: past the grace, the stale limit, and beyond
            t = T0 + STEP * k
            if k == 14:  # 1,000 names, each once; and a GPU index of a real node, once
                pipe.ingest(_one_liners([f"once{i:04d}" for i in range(1000)], t), t)
                pipe.ingest(_one_liners(["n1"], t, gpu=7), t)
            res = pipe.process(r.batch(t), t)
            raised += [(tr.alertname, tr.entity) for tr in res.transitions
                       if tr.new >= 2 and tr.old < 2]
        assert raised == []
        assert not [a for a in pipe.alerts.open_alerts() if a.name in (NODATA, MISSING)]
        # A real node's silence still raises its NodeNoData.
        for k in range(60, 80):
            t = T0 + STEP * k
            res = pipe.process(r.batch(t, tuple(e.key for tb in r.tables.values()
                                                for e in tb.entities if e.node == "n3")), t)
            raised += [(tr.alertname, tr.entity) for tr in res.transitions
                       if tr.new >= 2 and tr.old < 2]
        assert raised == [(NODATA, "n3")]
    finally:
        pipe.close()


def test_a_gpu_the_warm_start_replayed_notifies_however_soon_it_falls_silent(
        tmp_path: Path) -> None:
    """After a restart, live rounds arrive while the warm start replays the store: a GPU the
    replay restored after its node's first live round looked like a one-shot index (born
    after its node, no span of its own yet) and its silence raised nothing (the short soak's
    GPU silenced 4 s after a restart). The replayed history vouches for the GPU itself."""
    pipe, _ = _pipeline(tmp_path)
    r = Rounds(nodes=2, gpus=2, links=1, ports=1)
    gone = ("n1:gpu1",)
    raised: list[tuple[str, str]] = []
    try:
        res = pipe.process(r.batch(T0, gone), T0)  # the first live round, before the replay
        # The warm start: stored rounds of n1:gpu1 (and the rest) from before the restart.
        for k in range(-6, 0):
            got = pipe.ingestor.ingest(r.batch(T0 + STEP * k), T0 + 1.0)
            pipe.fleet.history.note(got.clean, STEP)
        for k in range(1, 40):  # n1:gpu1 never reports live again; n1's other GPU does
            t = T0 + STEP * k
            res = pipe.process(r.batch(t, gone), t)
            raised += [(tr.alertname, tr.entity) for tr in res.transitions
                       if tr.new >= 2 and tr.old < 2]
        assert (MISSING, "n1:gpu1") in raised, raised
    finally:
        pipe.close()
