"""The service with and without a model: without one it scores with rules and thresholds and
says so in /readyz; with one, /v1/gpus/{gpu} shows the model's calibrated probabilities and the
model's findings carry an explanation naming metric groups; a model that appears later is
picked up, and a refused one leaves the service running."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from collectors.catalog import Scope
from collectors.frames import Entity
from models.predictor.detector import PredictorDetector
from models.predictor.package import Predictor
from models.predictor.policy import PredictorConfig
from models.predictor.slot import ModelSlot
from models.predictor.window import predicted_window
from service.api.app import create_app
from service.assembly import Wiring
from service.pipeline import Pipeline, build_pipeline
from service.settings import Settings
from service.stages.windows import window_config_for
from tests.pipeline.builders import T0, Rounds
from tests.support.fleet import ManualClock

STEP = 300.0


def _settings(tmp: Path, model: str) -> Settings:
    return Settings(window=window_config_for(STEP), storage={"data_dir": tmp},  # type: ignore[arg-type]
                    detectors={"model": {"path": model}})  # type: ignore[arg-type]


def _feed(p: Pipeline, hours: float) -> float:
    r = Rounds(nodes=2, gpus=4, links=2, ports=2)
    t = T0
    for k in range(int(hours * 3600 / STEP)):
        t = T0 + k * STEP
        r.add("n1:gpu2", "ecc_sbe_volatile", 40.0)
        r.add("n1:gpu2", "remapped_rows_correctable", 1.0 if k % 6 == 0 else 0.0)
        p.ingest(r.batch(t), t)
        p.tick(t)
    return t


def test_without_a_model_the_service_says_so(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    app = create_app(_settings(tmp_path, str(tmp_path / "no-model-here")), clock=clock,
                     schedule=False)
    with TestClient(app) as c:
        p = app.state.gpuhealth.pipeline
        _feed(p, 0.5)
        body = c.get("/readyz").json()
        assert body["model"]["loaded"] is False
        assert "rules and thresholds only" in body["model"]["reason"]
        gpu = c.get("/v1/gpus/n1:gpu2").json()
        assert gpu["prediction"] is None
    off = create_app(_settings(tmp_path, "none"), clock=clock, schedule=False)
    with TestClient(off) as c:
        assert c.get("/readyz").json()["model"] is None


@pytest.mark.slow
def test_with_a_model_the_gpu_shows_probabilities(tmp_path: Path, tiny_model: Path,
                                                  no_window_calibration: None) -> None:
    # The raw model window, as shown with no window calibration (tests/predictor/
    # test_interval.py and tests/detectors/test_growth.py test the calibrated one).
    app = create_app(_settings(tmp_path, str(tiny_model)), clock=ManualClock(T0),
                     schedule=False)
    with TestClient(app) as c:
        p = app.state.gpuhealth.pipeline
        assert c.get("/readyz").json()["model"] == {
            "loaded": True, "path": str(tiny_model), "version": "lstm-tiny", "reason": ""}
        _feed(p, 8)  # six reported hours before the model says anything
        gpu = c.get("/v1/gpus/n1:gpu2").json()
        pred = gpu["prediction"]
        assert pred["model"] == "lstm-tiny"
        heads = pred["probabilities"]
        assert len(heads) == 15 and "M1_hbm@24h" in heads
        assert all(0.0 <= v <= 1.0 for v in heads.values())
        # The predicted window is the first horizon a mode is more likely than not within,
        # the same on the GPU's page and on its node's.
        want = predicted_window(heads)
        window = pred["window"]
        if want is None:
            assert window is None
        else:
            assert (window["mode"], window["within_h"], window["source"]) == (
                want.mode, want.within_h, "model")
        node = c.get("/v1/nodes/n1").json()
        [mine] = [g for g in node["gpus"] if g["entity"] == "n1:gpu2"]
        assert mine["window"] == window
        # The tiny model is never that sure: give its newest hour a likely thermal failure.
        det = p.model.detector
        probs, names = det.latest[Scope.GPU]
        slot = p.store[Scope.GPU].slot(Entity.gpu("n1", 2))
        probs[slot, names.index("M5_thermal@24h")] = 0.7
        gpu = c.get("/v1/gpus/n1:gpu2").json()
        window = gpu["prediction"]["window"]
        assert window == {"mode": "M5_thermal", "after_h": 1.0, "within_h": 24.0,
                          "probability": 0.7, "source": "model", "coverage": None,
                          "withheld": False,
                          "text": "thermal failure expected in 1 h to 24 h (model, uncalibrated)"}
        assert gpu["window"] == window
        node = c.get("/v1/nodes/n1").json()
        assert [g["window"] for g in node["gpus"] if g["entity"] == "n1:gpu2"] == [window]


@pytest.mark.slow
def test_model_explanations_name_metric_groups(recorded: object, tiny_model: Path,
                                               tmp_path: Path,
                                               no_window_calibration: None) -> None:
    p = build_pipeline(_settings(tmp_path, "none"), Wiring.offline())
    try:
        _feed(p, 8)
        det = PredictorDetector(Predictor.load(tiny_model),
                                PredictorConfig(floor=0.0, explain_from=0.0))
        found = {f.rule: f for f in det.detect(p.scorer.view, T0)}
        assert {"lstm_M1_hbm", "lstm_M3_nvlink", "lstm_M4_ib_link"} <= set(found)
        assert found["lstm_M3_nvlink"].scope is Scope.NVLINK  # placed on a link
        hbm = found["lstm_M1_hbm"]
        text = hbm.signal_of(0)
        assert text.startswith("model: probability of HBM failure within 24 h; ")
        assert "driven by" in text or "no single group dominates" in text
        # Once per finished hour: a second tick in the same hour reuses the findings.
        again = {f.rule: f for f in det.detect(p.scorer.view, T0)}
        assert again["lstm_M1_hbm"] is hbm
    finally:
        p.close()


@pytest.mark.slow
def test_a_model_that_appears_later_is_picked_up(tiny_model: Path, tmp_path: Path) -> None:
    now = [0.0]
    where = tmp_path / "model"
    slot = ModelSlot(where, recheck_s=60.0, clock=lambda: now[0])
    assert not slot.status.loaded and "rules and thresholds only" in slot.status.reason
    shutil.copytree(tiny_model, where)
    now[0] = 30.0
    slot.refresh()
    assert not slot.status.loaded  # not looked again yet
    now[0] = 61.0
    slot.refresh()
    assert slot.status.loaded and slot.status.version == "lstm-tiny"
    # A broken replacement is refused; the loaded model stays.
    meta = json.loads((where / "model.json").read_text())
    meta["format_version"] = 999
    (where / "model.json").write_text(json.dumps(meta))
    now[0] = 200.0
    slot.refresh()
    assert slot.status.loaded and "999" in slot.status.reason
