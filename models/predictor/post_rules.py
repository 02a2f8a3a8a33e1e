"""The predictor's post-rule: calibrated probabilities per horizon become one risk per entity, as
Merlion's post-rules turn a model's scores into alarms. It runs after the forward and before the
explanation (models/predictor/detector.py), with the caps, persistence and floor of
`PredictorConfig` (models/predictor/policy.py).

This is the first half of the path probability -> risk -> level. The second half, risk to alert
level (enter and exit thresholds, for-durations, dwell), is the alert machine's `AlertPolicy`
(service/stages/alert_machine.py), which reads the fused risk of every detector, not the model's
alone.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import numpy.typing as npt

from collectors.catalog import Scope
from models.detectors.findings import kept
from models.predictor.policy import PredictorConfig

F32 = npt.NDArray[np.float32]


class PostRule:
    """Probabilities to risk, per failure mode: each horizon's probability capped by how urgent
    the horizon is, the largest of them, held through the last `persist_h` scored hours (their
    minimum), and dropped under `floor`. It keeps those past hours per (scope, mode) and slot, so
    it follows the window store's forgetting (models/detectors/findings.py, Forgets)."""

    def __init__(self, config: PredictorConfig) -> None:
        self.config = config
        # The risk before persistence of the last `persist_h` scored hours, oldest first, per
        # (scope, mode), each [entity slot] sized as the fleet was at that hour.
        self.history: dict[tuple[Scope, str], list[F32]] = {}

    def risk(self, scope: Scope, mode: str, by_horizon: Mapping[int, F32]) -> F32:
        """One scored hour of `mode`: `by_horizon` maps a horizon (hours) to its calibrated
        probabilities [entity slot] (NaN: no prediction, read as 0). Call once per scored hour:
        each call is one hour of the persistence window."""
        caps = np.array([self.config.caps.get(h, 1.0) for h in by_horizon], np.float32)
        p = np.stack(list(by_horizon.values()), axis=1)
        capped = np.minimum(np.nan_to_num(p), caps[None, :])
        now_risk = capped.max(axis=1).astype(np.float32)
        # Persistence: one hour's spike, the commonest false alarm, raises nothing.
        hist = self.history.setdefault((scope, mode), [])
        hist.append(now_risk)
        del hist[: -self.config.persist_h]
        n = len(now_risk)
        risk: F32 = now_risk.copy()
        for past in hist[:-1]:
            # Slots that joined since that hour had no risk then: held to 0 until they have
            # `persist_h` hours of their own.
            prev = np.zeros(n, np.float32)
            prev[: min(n, len(past))] = past[:n]
            risk = np.minimum(risk, prev)
        risk[risk < self.config.floor] = 0.0
        return risk

    def forget(self, scope: Scope, keep: npt.NDArray[np.intp]) -> None:
        """Follow the window store's forgetting: an entity is held to its own past risk, never to
        the one that had its slot before."""
        for (sc, mode), hist in self.history.items():
            if sc is scope:
                self.history[sc, mode] = [kept(h, keep) for h in hist]
