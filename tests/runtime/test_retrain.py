"""Scheduled retraining on a fake clock: train, shadow for N days, promote only if better (told
to the admin receiver either way), never judge an operator's challenger, retry on schedule;
the real child-process trainer's failure is reported, the active model kept."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from collectors.catalog import Scope
from collectors.labels import FailureMode
from service.assembly import Wiring
from service.notify.record import RecordReceiver
from service.pipeline import Pipeline, build_pipeline
from service.runtime.retrain import (
    CommandTrainer,
    Retrainer,
    enabled,
    learning_status,
    start_retraining,
)
from service.settings import SHIPPED_MODEL, RetrainSettings, Settings
from service.stages.label_store import NewLabel
from tests.pipeline.builders import T0

DAY = 86400.0
SHIPPED_VERSION = json.loads((SHIPPED_MODEL / "model.json").read_text())["version"]


class CopyTrainer:
    """Stands in for the child process: writes a valid artifact where asked."""

    def __init__(self) -> None:
        self.calls: list[tuple[Path, float, Path | None]] = []

    def train(self, out: Path, since_days: float, init: Path | None = None) -> None:
        self.calls.append((out, since_days, init))
        shutil.copytree(SHIPPED_MODEL, out)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def _pipe(tmp: Path, labels: int = 10) -> Pipeline:
    """A pipeline whose fleet has `labels` HBM failure labels in the day before T0 (the
    retraining waits for 10 of one mode by default)."""
    s = Settings.model_validate({"storage": {"data_dir": tmp},
                                 "learning": {"retrain": {"enabled": True,
                                                          "notify_receiver": "record"}}})
    pipe = build_pipeline(s, Wiring(notify_background=False))
    _label(pipe, labels, FailureMode.M1_HBM)
    return pipe


def _label(pipe: Pipeline, n: int, mode: FailureMode, before: float = T0) -> None:
    pipe.labels.add([NewLabel("failure", before - (i + 1) * 600, f"h{i}", f"h{i}:gpu0",
                              Scope.GPU, "rule:dbe", mode=mode) for i in range(n)], before)


def _told(pipe: Pipeline) -> list[str]:
    assert pipe.notification is not None
    rec = pipe.notification.sender.receivers["record"]
    assert isinstance(rec, RecordReceiver)
    return [a.annotations["summary"] for m in rec.records for a in m.alerts
            if a.labels.get("alertname") == "ModelRetraining"]


def _shadow_outcome(pipe: Pipeline, now: float, challenger_false_alarms: int) -> None:
    """A week of shadow over 100 nodes: both models warned of 2 failures 12 h ahead; the
    challenger raised `challenger_false_alarms` more."""
    reg = pipe.registry
    assert reg is not None
    run = reg.run()
    assert run is not None
    rows: list[tuple[str, float, str, str, str, int, int, str]] = []
    for i, t in enumerate((run.started_at + 2 * DAY, run.started_at + 5 * DAY)):
        pipe.labels.add([NewLabel("failure", t, f"n{i}", f"n{i}:gpu0", Scope.GPU, "rule:dbe",
                                  mode=FailureMode.M1_HBM)], t)
        for stream in ("active:fused", "challenger:fused"):
            rows.append((stream, t - 12 * 3600, f"n{i}:gpu0", "gpu", f"n{i}", 2, 0, "lstm"))
    rows += [("challenger:fused", run.started_at + DAY, f"n{9 + j}:gpu1", "gpu", f"n{9 + j}", 2,
              0, "lstm") for j in range(challenger_false_alarms)]
    reg.add_alarms(run.id, rows, 100 * 7 * DAY, now)


def test_train_shadow_then_promote_only_if_better(tmp_path: Path) -> None:
    pipe, clock, trainer = _pipe(tmp_path), Clock(), CopyTrainer()
    cfg = RetrainSettings(enabled=True, notify_receiver="record", since_days=30, every_days=8)
    job = Retrainer(pipe, cfg, trainer, tmp_path / "models", clock=clock)
    try:
        assert pipe.registry is not None
        assert job.step().startswith("trained")
        # Fine-tuned from the active model: the shipped one at first.
        assert trainer.calls == [(tmp_path / "models" / "retrain-20231114T220000Z", 30.0,
                                  SHIPPED_MODEL)]
        ch = pipe.registry.challenger()
        assert ch is not None and ch.added_by == "scheduler"
        clock.now += DAY
        assert "in shadow since" in job.step()
        clock.now = T0 + 7 * DAY + 60
        _shadow_outcome(pipe, clock.now, challenger_false_alarms=0)
        assert job.step() == f"promoted {ch.version}"
        active = pipe.registry.active()
        assert active is not None and active.path == ch.path
        clock.now = T0 + 7 * DAY + 3600  # every 8 days from the last training
        assert job.step().startswith("last retrained")
        clock.now = T0 + 8 * DAY
        assert job.step().startswith("trained")  # and this one is worse
        assert trainer.calls[-1][2] == Path(ch.path)  # from the model promoted since
        clock.now = T0 + 15 * DAY + 60
        _shadow_outcome(pipe, clock.now, challenger_false_alarms=40)
        assert job.step().startswith("kept")
        assert pipe.registry.active() == active and pipe.registry.challenger() is None
        clock.now += 3600
        assert job.step().startswith("last retrained")
        told = _told(pipe)
        assert len(told) == 4
        assert "in shadow for 7 days" in told[0] and "promoted" in told[1]
        assert f"(fine-tuned from {SHIPPED_VERSION})" in told[0]
        assert "not promoted" in told[3] and "more false alarms" in told[3]
        assert [a.action for a in pipe.registry.audit()] == ["stop", "shadow", "promote",
                                                             "shadow"]
    finally:
        pipe.close()


def test_fine_tune_off_trains_from_scratch(tmp_path: Path) -> None:
    pipe, trainer = _pipe(tmp_path), CopyTrainer()
    job = Retrainer(pipe, RetrainSettings(enabled=True, fine_tune=False), trainer,
                    tmp_path / "m", clock=Clock())
    try:
        assert job.step().startswith("trained")
        assert [c[2] for c in trainer.calls] == [None]
    finally:
        pipe.close()


def test_an_operators_challenger_is_left_to_the_operator(tmp_path: Path) -> None:
    pipe, clock = _pipe(tmp_path), Clock()
    job = Retrainer(pipe, RetrainSettings(enabled=True), CopyTrainer(), tmp_path / "m",
                    clock=clock)
    try:
        assert pipe.registry is not None
        pipe.registry.shadow("lstm-mine", str(SHIPPED_MODEL), "alice", T0)
        clock.now += 30 * DAY
        assert "operator's challenger" in job.step()
        assert pipe.registry.challenger() is not None and pipe.registry.active() is None
    finally:
        pipe.close()


@pytest.mark.slow
def test_a_failed_training_is_told_and_the_active_model_stays(tmp_path: Path) -> None:
    pipe, clock = _pipe(tmp_path), Clock()
    # The real child process, with no InfluxDB to read: it fails and says why.
    job = Retrainer(pipe, RetrainSettings(enabled=True, notify_receiver="record"),
                    CommandTrainer(timeout_s=300), tmp_path / "m", clock=clock)
    try:
        out = job.step()
        assert out.startswith("failed: training exited")
        assert pipe.registry is not None and pipe.registry.challenger() is None
        (told,) = _told(pipe)
        assert told.startswith("Retraining failed; the active model stays")
    finally:
        pipe.close()


def test_an_unknown_notify_receiver_refuses_to_start(tmp_path: Path) -> None:
    s = Settings.model_validate({"storage": {"data_dir": tmp_path}, "learning": {
        "retrain": {"enabled": True, "notify_receiver": "nobody"}}})
    pipe = build_pipeline(s, Wiring(notify_background=False))
    try:
        with pytest.raises(ValueError, match="not a configured receiver"):
            start_retraining(pipe)
    finally:
        pipe.close()


def test_the_child_process_is_told_the_init_model(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []

    def run(cmd: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        seen.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr("service.runtime.retrain.subprocess.run", run)
    t = CommandTrainer(("--epochs", "5"))
    t.train(tmp_path / "a", 30, SHIPPED_MODEL)
    t.train(tmp_path / "b", 30)
    assert seen[0][-4:] == ["--epochs", "5", "--init", str(SHIPPED_MODEL)]
    assert "--init" not in seen[1]


def test_only_the_leader_retrains(tmp_path: Path) -> None:
    """Replicas share one model registry: a replica that is not the leader trains nothing."""

    class Standby:
        def writer(self) -> bool:
            return True

        def leader(self) -> bool:
            return False

        def close(self) -> None:
            pass

    pipe, clock = _pipe(tmp_path), Clock()
    pipe.cluster = Standby()
    trainer = CopyTrainer()
    job = Retrainer(pipe, RetrainSettings(enabled=True), trainer, tmp_path / "m", clock=clock)
    try:
        clock.now += 30 * DAY
        assert "not the leader" in job.step()
        assert pipe.registry is not None and pipe.registry.challenger() is None
    finally:
        pipe.close()


def test_no_model_is_trained_before_a_mode_has_enough_labels(tmp_path: Path) -> None:
    pipe, clock, trainer = _pipe(tmp_path, labels=0), Clock(), CopyTrainer()
    job = Retrainer(pipe, RetrainSettings(enabled=True, since_days=30), trainer, tmp_path / "m",
                    clock=clock)
    try:
        _label(pipe, 9, FailureMode.M1_HBM)
        _label(pipe, 4, FailureMode.M3_NVLINK)
        out = job.step()
        assert out == ("waiting for labels: no failure mode has 10 labels in the last 30 days "
                       "(have: M1_hbm 9, M3_nvlink 4)")
        assert trainer.calls == []
        status = learning_status(pipe, clock.now)
        assert status["labels_per_mode"] == {"M1_hbm": 9, "M3_nvlink": 4}
        # (The status reads the service's settings: 90 days of history.)
        assert status["ready_modes"] == [] and status["waiting"].endswith(
            "(have: M1_hbm 9, M3_nvlink 4)")
        _label(pipe, 1, FailureMode.M1_HBM, before=T0 - 3 * 3600)  # the tenth
        assert job.step().startswith("trained")
        status = learning_status(pipe, clock.now)
        assert status["ready_modes"] == ["M1_hbm"] and status["waiting"] is None
        assert [h["action"] for h in status["history"]] == ["shadow"]
        # Labels older than the span it would train on do not count.
        clock.now += 100 * DAY
        assert learning_status(pipe, clock.now)["labels_per_mode"] == {}
    finally:
        pipe.close()


def test_on_by_default_wherever_influxdb_keeps_the_history(tmp_path: Path) -> None:
    plain = Settings.model_validate({"storage": {"data_dir": tmp_path}})
    assert plain.learning.retrain.enabled == "auto"
    on, why = enabled(plain)
    assert not on and "no InfluxDB" in why
    influx = Settings.model_validate({"storage": {"data_dir": tmp_path, "influxdb": {
        "url": "http://127.0.0.1:8086"}}})
    assert enabled(influx) == (True, "on (auto: InfluxDB keeps the history it trains from)")
    off = Settings.model_validate({"storage": {"data_dir": tmp_path, "influxdb": {
        "url": "http://127.0.0.1:8086"}}, "learning": {"retrain": {"enabled": False}}})
    assert enabled(off)[0] is False
