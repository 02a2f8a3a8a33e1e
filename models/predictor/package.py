"""Between trained results, the artifact on disk and the runtime that scores: `to_artifact`
packs what training produced; `Predictor.load` reads an artifact back into per-scope runtimes
that turn hourly features into calibrated probabilities per head."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from collectors.catalog import Scope
from models.predictor.artifact import ModelArtifact, ScopeModel, load
from models.predictor.calibration import Calibrator, calibrate_heads
from models.predictor.features import FEATURES
from models.predictor.model import FailureLSTM, Scaler, predict
from models.predictor.train import ScopeResult, TrainConfig

F32 = npt.NDArray[np.float32]
# /2: features with long memory, and the LSTM's memory in chunks carried hour by hour
# (models/predictor/chunks.py); /1 read a 24-h window from a fresh state every hour.
ARCHITECTURE = "FailureLSTM/2"


def to_artifact(results: Sequence[ScopeResult], cfg: TrainConfig, meta: dict[str, Any],
                version: str) -> ModelArtifact:
    scopes = {
        r.scope.value: ScopeModel(
            features=[f.name for f in FEATURES[r.scope]], heads=list(r.heads),
            scaler_mean=[float(v) for v in r.scaler.mean],
            scaler_scale=[float(v) for v in r.scaler.scale],
            calibrators=list(r.calibrators),
            state_dict={k: v.detach().clone() for k, v in r.model.state_dict().items()})
        for r in results}
    config = {"architecture": ARCHITECTURE, "hidden": cfg.hidden, "dropout": cfg.dropout,
              "window_h": cfg.window_h, "horizons_h": list(cfg.horizons)}
    card = {**meta, "train_config": cfg.as_dict(),
            "metrics": {r.scope.value: r.metrics for r in results},
            "history": {r.scope.value: r.history for r in results}}
    return ModelArtifact(config=config, scopes=scopes, card=card, version=version)


@dataclass(slots=True)
class ScopeRuntime:
    scope: Scope
    model: FailureLSTM
    scaler: Scaler
    calibrators: list[Calibrator]
    heads: list[str]

    def raw(self, x: F32, start: int = 0) -> F32:
        """Uncalibrated outputs [entity, head] for model inputs [entity, T, F] whose memory
        begins at index `start`."""
        return predict(self.model, self.scaler.apply(x), np.full(len(x), start, np.int64))

    def calibrate(self, raw: F32) -> F32:
        return calibrate_heads(self.calibrators, raw)

    def probabilities(self, x: F32, start: int = 0) -> F32:
        return self.calibrate(self.raw(x, start))


@dataclass(slots=True)
class Predictor:
    version: str
    window_h: int
    horizons_h: list[int]
    scopes: dict[Scope, ScopeRuntime]
    card: dict[str, Any]
    path: Path | None = None

    @classmethod
    def from_artifact(cls, art: ModelArtifact, path: Path | None = None) -> Predictor:
        if art.config.get("architecture") != ARCHITECTURE:
            from models.predictor.artifact import ArtifactError

            raise ArtifactError(f"{path or 'artifact'}: architecture "
                                f"{art.config.get('architecture')!r}, this gpuhealth runs "
                                f"{ARCHITECTURE!r}: retrain with `gpuhealth train`")
        scopes: dict[Scope, ScopeRuntime] = {}
        for name, sm in art.scopes.items():
            scope = Scope(name)
            model = FailureLSTM(len(sm.features), len(sm.heads), int(art.config["hidden"]),
                                float(art.config["dropout"]))
            model.load_state_dict(sm.state_dict)
            model.eval()
            scopes[scope] = ScopeRuntime(scope, model,
                                         Scaler.from_lists(sm.scaler_mean, sm.scaler_scale),
                                         list(sm.calibrators), list(sm.heads))
        return cls(art.version, int(art.config["window_h"]),
                   [int(h) for h in art.config["horizons_h"]], scopes, art.card, path)

    @classmethod
    def load(cls, directory: Path) -> Predictor:
        expect = {s.value: [f.name for f in fs] for s, fs in FEATURES.items()}
        return cls.from_artifact(load(directory, expect_features=expect), directory)
