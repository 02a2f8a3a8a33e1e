"""Level 3 through the whole pipeline to the remediation hook: a real command hook (a script
that records its arguments), the storm breaker, stale telemetry, and corroboration."""

from __future__ import annotations

import stat
from pathlib import Path

import numpy as np

from collectors.catalog import Scope
from models.detectors.findings import Finding
from models.detectors.view import FleetView
from service.assembly import Wiring
from service.pipeline import Pipeline, build_pipeline
from service.remediation.config import RemediationSettings
from service.remediation.wiring import Remediator, build_remediation
from service.settings import Settings
from service.stages.fleet_alerts import NODATA, STORM
from tests.pipeline.builders import T0, Rounds


def _script(tmp: Path) -> tuple[Path, Path]:
    log = tmp / "calls.log"
    script = tmp / "drain.sh"
    script.write_text(f'#!/bin/sh\necho "$@" >> "{log}"\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script, log


def _settings(tmp: Path) -> Settings:
    return Settings.model_validate({
        "storage": {"data_dir": tmp},
        # A storm in a fleet of 4 here (by default none below 10 nodes).
        "notify": {"route": {"receiver": "record", "group_wait_s": 0},
                   "storm": {"min_fleet": 4}}})


def _pipeline(tmp: Path, nodes: int = 2, **rem: object) -> tuple[Pipeline, Path]:
    script, log = _script(tmp)
    settings = _settings(tmp)
    cfg = RemediationSettings.model_validate({
        "mode": "auto", "hook": "command", "breaker_max_fraction": 1.0,
        "hook_config": {"drain": [str(script), "drain", "{node}", "{reason}"],
                        "release": [str(script), "release", "{node}"]}, **rem})
    pipe = build_pipeline(settings, Wiring.offline(alert_db=str(tmp / "a.db"),
                                                   notify_background=False, notifiers=None))
    pipe.remediation = build_remediation(cfg, pipe.alerts, str(tmp / "a.db"),
                                         lambda: len(pipe.store.registry.nodes), now=T0)
    return pipe, log


def _controller(pipe: Pipeline) -> object:
    assert isinstance(pipe.remediation, Remediator)
    return pipe.remediation.controller


def test_a_hard_fault_drains_its_node_through_the_hook_within_the_tick(tmp_path: Path) -> None:
    pipe, log = _pipeline(tmp_path)
    r = Rounds(nodes=2, gpus=4)
    try:
        for k in range(6):
            if k == 3:
                r.set("n1:gpu2", "ecc_dbe_volatile", 1.0)
            pipe.process(r.batch(T0 + 5 * k), T0 + 5 * k)
            if k == 3:
                ctl = pipe.remediation.controller  # type: ignore[union-attr]
                assert ctl.wait(10)
                # The tick that saw the fault asked, and the hook ran before the next one.
                calls = log.read_text().splitlines()
                assert len(calls) == 1 and calls[0].startswith("drain n1 gpuhealth DBE gpu2 #")
        actions = ctl.store.find(node="n1")
        assert [a.state.value for a in actions] == ["succeeded"]
        assert len(log.read_text().splitlines()) == 1  # never twice for one episode
    finally:
        pipe.close()


def test_a_storm_pages_once_and_trips_the_breaker(tmp_path: Path) -> None:
    pipe, log = _pipeline(tmp_path, max_concurrent=1)
    r = Rounds(nodes=4, gpus=2)
    try:
        for k in range(4):
            if k == 2:
                for n in range(4):
                    r.set(f"n{n}:gpu0", "ecc_dbe_volatile", 1.0)
            res = pipe.process(r.batch(T0 + 5 * k), T0 + 5 * k)
            if k == 2:
                assert [t.alertname for t in res.transitions if t.alertname] == [STORM]
        ctl = pipe.remediation.controller  # type: ignore[union-attr]
        ctl.wait(10)
        assert ctl.breaker.is_open
        assert not log.exists()  # tripped before any drain of the same tick could start
        assert {a.state.value for a in ctl.store.find()} <= {"planned", "expired"}
        storm = [a for a in pipe.alerts.open_alerts() if a.name == STORM]
        assert len(storm) == 1 and storm[0].level == 3
    finally:
        pipe.close()


def test_stale_telemetry_raises_no_data_and_blocks_actions(tmp_path: Path) -> None:
    pipe, log = _pipeline(tmp_path)
    r = Rounds(nodes=2, gpus=2, links=1, ports=1)
    n1 = tuple(e.key for t in r.tables.values() for e in t.entities if e.node == "n1")
    try:
        for k in range(30):
            missing = n1 if k >= 5 else ()
            res = pipe.process(r.batch(T0 + 5 * k, missing), T0 + 5 * k)
            if any(t.alertname == NODATA for t in res.transitions):
                break
        else:
            raise AssertionError("no NodeNoData alert")
        (a,) = [a for a in pipe.alerts.open_alerts() if a.name == NODATA]
        assert a.node == "n1" and a.level == 2 and a.scope is Scope.NODE
        # The recheck the controller runs before acting refuses the node.
        rem = pipe.remediation
        assert isinstance(rem, Remediator)
        assert rem.controller is not None
        from service.remediation.wiring import AlertRecheck

        assert AlertRecheck(pipe.alerts).recheck("n1", "any", T0) == "no data from the node"
        assert not log.exists()
    finally:
        pipe.close()


class SoftRisk:
    """A detector that says 0.95 for one GPU from a rule that is not a hard vendor fact."""

    name = "soft"

    def detect(self, view: FleetView, now: float) -> list[Finding]:
        n = len(view.scope(Scope.GPU).entities)
        risk = np.zeros(n, np.float32)
        risk[:1] = 0.95
        return [Finding("soft", Scope.GPU, risk, risk.astype(np.float64), 0.9, "a soft signal")]


def test_an_uncorroborated_page_does_not_migrate(tmp_path: Path) -> None:
    script, log = _script(tmp_path)
    settings = _settings(tmp_path)
    pipe = build_pipeline(settings, Wiring.offline(alert_db=str(tmp_path / "a.db"),
                                                   notify_background=False, detectors=[SoftRisk()],
                                                   notifiers=None))
    cfg = RemediationSettings(mode="auto", hook="command", breaker_max_fraction=1.0,
                              hook_config={"drain": [str(script), "{node}"],
                                           "release": [str(script), "{node}"]})
    pipe.remediation = build_remediation(cfg, pipe.alerts, str(tmp_path / "a.db"),
                                         lambda: 2, now=T0)
    r = Rounds(nodes=2, gpus=2)
    try:
        levels = []
        for k in range(0, 3600, 60):  # an hour of minute steps: the long window fills
            res = pipe.process(r.batch(T0 + k), T0 + k)
            levels += [t.new for t in res.transitions]
        assert 3 in levels  # it pages (the long window agreed) ...
        (a,) = [a for a in pipe.alerts.open_alerts() if a.level == 3]
        assert not a.corroborated
        ctl = pipe.remediation.controller  # type: ignore[union-attr]
        assert ctl.store.find() == [] and not log.exists()  # ... but moves no job
    finally:
        pipe.close()
