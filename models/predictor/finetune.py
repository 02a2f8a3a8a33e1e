"""Fine-tuning: training that starts from an existing artifact instead of fresh weights.

When a fleet has few labels of its own (two weeks of one small fleet: a few dozen failures), a
model trained from scratch learns little; one that starts from the shipped (or the active)
model and moves a little towards the fleet's data keeps what the larger training set taught and
adapts to the fleet's own mix. What carries over per scope:

  - the weights, all of them (the LSTM, the heads);
  - the input scaler, unchanged: the weights were learned on inputs scaled this way, and
    refitting it on the fleet's data would shift every input under them;
  - the calibrators only as a fallback: every head is recalibrated on the fleet's validation
    split (calibration to the fleet's own base rates is the point), except a head with no
    positive in that split, which would otherwise become a constant and never rank again.

An init artifact must have the same architecture, hidden size, window, horizons, feature names
(in order) and heads as the model being trained; anything else is refused (`InitMismatch`) before
any data is read.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from collectors.catalog import Scope
from models.predictor.artifact import ArtifactError, load
from models.predictor.calibration import Calibrator
from models.predictor.dataset import head_names
from models.predictor.features import FEATURES
from models.predictor.model import Scaler

# Fine-tuning's defaults (docs/learning.md): a tenth of training from scratch's 2e-3, so the
# first epochs adjust rather than overwrite; fewer epochs with earlier stopping, since the start
# is already near a good optimum and a small fleet's data overfits quickly.
FINE_TUNE_LR = 2e-4
FINE_TUNE_EPOCHS = 8
FINE_TUNE_PATIENCE = 3


class InitMismatch(ValueError):
    """The init artifact cannot seed this training; the message says what differs."""


@dataclass(slots=True)
class ScopeInit:
    state_dict: dict[str, torch.Tensor]
    scaler: Scaler
    calibrators: list[Calibrator]
    heads: list[str]
    features: list[str]


@dataclass(slots=True)
class InitModel:
    version: str
    path: Path
    config: dict[str, Any]
    scopes: dict[Scope, ScopeInit]

    @property
    def hidden(self) -> int:
        return int(self.config["hidden"])

    @property
    def window_h(self) -> int:
        return int(self.config["window_h"])

    @property
    def dropout(self) -> float:
        return float(self.config["dropout"])

    def describe(self, lr: float, epochs: int, patience: int) -> dict[str, Any]:
        """What the card says about where the weights came from."""
        return {"version": self.version, "path": str(self.path), "lr": lr, "epochs": epochs,
                "patience": patience, "scaler": "kept from the init model",
                "calibration": "refitted on this data's validation split (heads without a "
                               "positive there keep the init model's calibrator)"}


def load_init(path: Path, architecture: str) -> InitModel:
    """The artifact at `path` as a starting point; InitMismatch if it cannot be read, is another
    architecture or was trained on other features than this gpuhealth computes."""
    expect = {s.value: [f.name for f in fs] for s, fs in FEATURES.items()}
    try:
        art = load(path, expect_features=expect)
    except ArtifactError as exc:
        raise InitMismatch(f"--init {path}: {exc}") from None
    found = art.config.get("architecture")
    if found != architecture:
        raise InitMismatch(f"--init {path}: architecture {found!r}, this gpuhealth trains "
                           f"{architecture!r}")
    scopes = {Scope(name): ScopeInit(
        sm.state_dict, Scaler.from_lists(sm.scaler_mean, sm.scaler_scale),
        list(sm.calibrators), list(sm.heads), list(sm.features))
        for name, sm in art.scopes.items()}
    return InitModel(art.version, path, dict(art.config), scopes)


def check_init(init: InitModel, hidden: int, window_h: int,
               horizons: tuple[int, ...]) -> None:
    """InitMismatch unless the init model has the shape of the model to train."""
    where = f"--init {init.path} ({init.version})"
    if init.hidden != hidden:
        raise InitMismatch(f"{where} has hidden size {init.hidden}, the training asks for "
                           f"{hidden}: drop --hidden or train from scratch")
    if init.window_h != window_h:
        raise InitMismatch(f"{where} has window {init.window_h} h, the training asks for "
                           f"{window_h}: drop --window or train from scratch")
    found = [int(h) for h in init.config.get("horizons_h", [])]
    if found != list(horizons):
        raise InitMismatch(f"{where} predicts horizons {found} h, this gpuhealth {list(horizons)}")
    for scope, si in init.scopes.items():
        want = head_names(scope, horizons)
        if si.heads != want:
            raise InitMismatch(f"{where}: scope {scope.value!r} has heads {si.heads}, this "
                               f"gpuhealth trains {want}")
        # The tensors must fit the network the heads and features describe.
        n_in = len(si.features)
        w = si.state_dict.get("lstm.weight_ih_l0")
        if w is not None and tuple(w.shape) != (4 * hidden, n_in):
            raise InitMismatch(f"{where}: scope {scope.value!r} LSTM input weights are "
                               f"{tuple(w.shape)}, expected {(4 * hidden, n_in)}")
