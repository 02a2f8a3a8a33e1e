"""The predictor follows the window store's forgetting (findings.Forgets): every per-slot state it
keeps between hours is renumbered with the slots, so no entity inherits another's past."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from collectors.catalog import Scope
from models.detectors.findings import Finding, Forgets
from models.predictor.detector import PredictorDetector


class _NoModel:
    """The detector's state is under test, not a model: nothing here is ever called."""

    scopes: ClassVar[dict[Scope, object]] = {}


def test_persistence_history_latest_and_cache_follow_the_slots() -> None:
    det = PredictorDetector(_NoModel())  # type: ignore[arg-type]
    assert isinstance(det, Forgets)
    held = det.post_rule.history
    held[Scope.GPU, "M1_hbm"] = [np.array([0.1, 0.9, 0.5], np.float32),
                                 np.array([0.2, 0.8, 0.4], np.float32)]
    held[Scope.IB_PORT, "M4_ib"] = [np.array([0.3, 0.7], np.float32)]
    det.latest[Scope.GPU] = (np.array([[0.1], [0.9], [0.5]], np.float32), ["M1_hbm@24h"])
    risk = np.array([0.0, 0.9, 0.5], np.float32)
    det._cache[Scope.GPU] = (7, 3, [Finding("lstm_M1_hbm", Scope.GPU, risk,
                                            risk.astype(np.float64), 0.0, "s")])
    det.forget(Scope.GPU, np.array([1, 2]))  # slot 0 forgotten
    assert [h.tolist() for h in held[Scope.GPU, "M1_hbm"]] == [
        [np.float32(0.9), np.float32(0.5)], [np.float32(0.8), np.float32(0.4)]]
    assert len(held[Scope.IB_PORT, "M4_ib"][0]) == 2  # another scope: untouched
    assert det.latest[Scope.GPU][0][:, 0].tolist() == [np.float32(0.9), np.float32(0.5)]
    hour, n, (found,) = det._cache[Scope.GPU]
    assert (hour, n) == (7, 2) and found.risk.tolist() == [np.float32(0.9), np.float32(0.5)]
