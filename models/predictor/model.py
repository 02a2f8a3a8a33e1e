"""The sequence model: an LSTM over T hours of features with one logit per (failure mode,
horizon) head.

The last hour's inputs skip past the LSTM into the heads: a burst of errors in the newest hour
matters directly, and the recurrent state adds the trend before it (plain LSTMs on raw
telemetry lost to trees: Liu et al., SYSTOR 2023; Falcon, arXiv 2609.34473; the inputs here
are already peer-relative and missingness-aware). Inputs are standardised and NaN-free by the
time they get here (`Scaler`); the scaler's parameters travel with the weights in the artifact.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import torch
from torch import nn

F32 = npt.NDArray[np.float32]
CLIP = 8.0  # standardised inputs beyond this carry no more information, only gradient noise


class FailureLSTM(nn.Module):
    def __init__(self, n_features: int, n_heads: int, hidden: int = 32,
                 dropout: float = 0.1) -> None:
        super().__init__()
        self.lstm = nn.LSTM(n_features, hidden, batch_first=True)
        self.drop = nn.Dropout(dropout)
        self.head = nn.Linear(hidden + n_features, n_heads)

    def forward(self, x: torch.Tensor, start: int = 0) -> torch.Tensor:
        """Logits [n, heads] for windows [n, T, F] whose memory begins at index `start`
        (models/predictor/chunks.py: the hours before it are not read)."""
        out, _ = self.lstm(x[:, start:])
        return self.readout(out[:, -1, :], x[:, -1, :])

    def readout(self, h: torch.Tensor, x_last: torch.Tensor) -> torch.Tensor:
        """The heads from a hidden state and the newest hour's inputs."""
        logits: torch.Tensor = self.head(self.drop(torch.cat([h, x_last], dim=1)))
        return logits

    def step(self, x: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor]
             ) -> tuple[torch.Tensor, torch.Tensor]:
        """Carry the state (h, c), each [n, hidden], over the hours x [n, k, F]."""
        _, (h, c) = self.lstm(x, (state[0][None], state[1][None]))
        return h[0], c[0]


@dataclass(frozen=True, slots=True)
class Scaler:
    """Per-feature standardisation fitted on training samples; missing becomes the mean (0)
    after scaling, and the missingness features say that it was missing."""

    mean: F32
    scale: F32

    @classmethod
    def fit(cls, x: F32) -> Scaler:
        flat = x.reshape(-1, x.shape[-1])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a never-reported metric: 0, 1
            mean = np.nan_to_num(np.nanmean(flat, axis=0)) if len(flat) else np.zeros(
                x.shape[-1], np.float32)
            std = np.nan_to_num(np.nanstd(flat, axis=0)) if len(flat) else np.ones(x.shape[-1])
        return cls(mean.astype(np.float32), np.maximum(std, 1e-3).astype(np.float32))

    @classmethod
    def from_lists(cls, mean: Sequence[float], scale: Sequence[float]) -> Scaler:
        return cls(np.asarray(mean, np.float32), np.asarray(scale, np.float32))

    def apply(self, x: F32) -> F32:
        z = (x - self.mean) / self.scale
        out: F32 = np.clip(np.nan_to_num(z, nan=0.0, posinf=CLIP, neginf=-CLIP), -CLIP, CLIP)
        return out.astype(np.float32)


def predict(model: FailureLSTM, x: F32, start: npt.NDArray[np.int64] | None = None,
            batch: int = 8192) -> F32:
    """Sigmoid outputs [n, heads] for scaled inputs [n, T, F] whose memory begins at
    `start` (per sample; 0 when None), in batches of one start each, no gradients."""
    model.eval()
    out = np.zeros((len(x), model.head.out_features), np.float32)
    starts = np.zeros(len(x), np.int64) if start is None else start
    with torch.inference_mode():
        for s in np.unique(starts).tolist():
            rows = np.flatnonzero(starts == s)
            for i in range(0, len(rows), batch):
                sel = rows[i:i + batch]
                out[sel] = torch.sigmoid(model(torch.from_numpy(x[sel]), int(s))).numpy()
    return out
