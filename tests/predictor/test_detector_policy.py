"""How the detector turns probabilities into risk, on a real window store: a probability must
hold for two scored hours, a day's horizon never reaches critical alone, small probabilities add
nothing, and a GPU with too little history gets no prediction. The probabilities come from a
scripted runtime (our own model's interface with set outputs), so the policy is what is tested."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import pytest

from collectors.catalog import Scope
from models.predictor.dataset import head_names
from models.predictor.detector import PredictorDetector
from models.predictor.interval import Calibration
from models.predictor.policy import PredictorConfig
from service.stages.ingest import EventLog, Ingestor
from service.stages.scoring import StoreView
from service.stages.windows import WindowStore, window_config_for
from tests.pipeline.builders import T0, Rounds

F32 = npt.NDArray[np.float32]
STEP = 3600.0  # the raw ring is the hour buckets: one round, one scored hour


@dataclass
class ScriptedRuntime:
    """Returns the next scripted probability for head M1_hbm@24h on GPU 0, 0 elsewhere."""

    script: list[float]
    scope: Scope = Scope.GPU
    heads: list[str] = field(default_factory=lambda: head_names(Scope.GPU))
    calls: int = 0

    def probabilities(self, x: F32) -> F32:
        p = np.zeros((x.shape[0], len(self.heads)), np.float32)
        p[0, self.heads.index("M1_hbm@24h")] = self.script[min(self.calls, len(self.script) - 1)]
        self.calls += 1
        return p


@dataclass
class ScriptedModel:
    runtime: ScriptedRuntime
    version: str = "scripted"
    window_h: int = 24
    horizons_h: list[int] = field(default_factory=lambda: [1, 24, 168])

    @property
    def scopes(self) -> dict[Scope, ScriptedRuntime]:
        return {Scope.GPU: self.runtime}


def _risks(script: list[float], start_hour: int = 0) -> list[float]:
    store = WindowStore(window_config_for(STEP))
    ingest = Ingestor(store, EventLog())
    view = StoreView(store, EventLog())
    r = Rounds(nodes=1, gpus=2, links=1, ports=1)
    det = PredictorDetector(ScriptedModel(ScriptedRuntime(script)),
                            PredictorConfig(explain_from=2.0))  # no explanations: no extra calls
    out = []
    for k in range(start_hour + len(script)):
        t = T0 + k * STEP
        ingest.ingest(r.batch(t), now=t)
        if k < start_hour:
            continue
        found = {f.rule: f for f in det.detect(view, t)}
        out.append(float(found["lstm_M1_hbm"].risk[0]))
    return out


def test_a_one_hour_spike_raises_nothing_and_a_held_one_does(no_window_calibration: None) -> None:
    risks = _risks([0.0, 0.7, 0.0, 0.7, 0.8, 0.4, 0.02], start_hour=6)
    assert risks == pytest.approx([0.0, 0.0, 0.0, 0.0, 0.7, 0.4, 0.0])


def test_a_days_horizon_alone_never_pages(no_window_calibration: None) -> None:
    risks = _risks([0.99, 0.99, 0.99], start_hour=6)
    assert max(risks) == np.float32(0.85)


def test_too_little_history_gives_no_prediction() -> None:
    # From the first hour on: fewer than 6 reported hours, so the scripted 0.9 never shows.
    assert _risks([0.9] * 5) == [0.0] * 5


def test_an_uncalibrated_mode_is_advisory_a_calibrated_one_is_not(
        window_calibration: Callable[[Calibration], None]) -> None:
    """Issue 34: the model's level stands only where its window is calibrated for the mode;
    elsewhere its finding is advisory (its risk kept for the explanation, counted for nothing
    by fusion)."""
    def advisory() -> list[bool]:
        return _advisory([0.99, 0.99, 0.99], start_hour=6)

    window_calibration(Calibration(0.8, model={"M5_thermal@1-24h": (2.0, 20.0)}))
    assert advisory() == [True, True, True]
    window_calibration(Calibration(0.8, model={"M1_hbm@1-24h": (2.0, 20.0)}))
    assert advisory() == [False, False, False]
    assert max(_risks([0.99, 0.99, 0.99], start_hour=6)) == np.float32(0.85)  # as before
    window_calibration(Calibration(0.8, model={"M1_hbm@1-24h": (2.0, 20.0)},
                                   hidden={"model:M1_hbm": "no sharper than the constant"}))
    assert advisory() == [True, True, True]


def _advisory(script: list[float], start_hour: int) -> list[bool]:
    store = WindowStore(window_config_for(STEP))
    ingest = Ingestor(store, EventLog())
    view = StoreView(store, EventLog())
    r = Rounds(nodes=1, gpus=2, links=1, ports=1)
    det = PredictorDetector(ScriptedModel(ScriptedRuntime(script)),
                            PredictorConfig(explain_from=2.0))
    out = []
    for k in range(start_hour + len(script)):
        t = T0 + k * STEP
        ingest.ingest(r.batch(t), now=t)
        if k >= start_hour:
            out.append({f.rule: f for f in det.detect(view, t)}["lstm_M1_hbm"].advisory)
    return out
