"""Calibration: a predictor head's raw probabilities mapped to probabilities that match rates.

A network trained on rare failures (with class weights or resampling) ranks entities well but its
raw outputs are not frequencies: "0.3" may mean a 2 % chance. Each output head gets its own
calibrator, fitted on validation data with scikit-learn and kept as a handful of plain JSON
numbers (never a pickle), so an artifact reads back without running foreign code.

Which calibrator depends on how many positives the validation data holds (`fit_calibrator`):
  - isotonic regression when there are enough positives to trust a free-form monotone map;
  - Platt scaling (two parameters on the logit) when there are few, with Platt's smoothed
    targets so that a handful of separable positives cannot drive the slope to infinity;
  - a constant when there are none (or only positives): the rate estimated by Laplace's rule
    of succession, small but never zero, since "no failure seen in n" is not "impossible".
Every calibrator is monotone non-decreasing in the raw score: calibration fixes the scale and
never reorders the model's ranking. NaN in gives NaN out (a missing prediction stays missing).

`reliability` and `expected_calibration_error` measure how well probabilities match rates.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt
from sklearn.isotonic import IsotonicRegression
from sklearn.linear_model import LogisticRegression

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]

EPS = 1e-6  # raw scores are clipped to [EPS, 1 - EPS] before the logit
MIN_POSITIVES = 30  # below this many positives isotonic regression overfits; Platt instead
PLATT_C = 1e4  # little regularisation: Platt's smoothed targets already keep the fit finite


class Calibrator(Protocol):
    def apply(self, p: F32) -> F32:
        """Calibrated probabilities, same shape as `p` (raw probabilities in [0, 1])."""
        ...

    def to_json(self) -> dict[str, object]:
        """Plain JSON parameters, with a "kind" key that `calibrator_from_json` dispatches on."""
        ...


def _finite(name: str, v: float) -> float:
    if not math.isfinite(v):
        raise ValueError(f"{name} must be finite, got {v}")
    return float(v)


def _logit(p: F64) -> F64:
    q = np.clip(p, EPS, 1.0 - EPS)
    out: F64 = np.log(q) - np.log1p(-q)
    return out


def _sigmoid(z: F64) -> F64:
    # tanh form: no overflow warnings for large |z|.
    out: F64 = 0.5 * (1.0 + np.tanh(0.5 * z))
    return out


def _out(p: F32, values: F64) -> F32:
    """Clipped to [0, 1], float32, NaN wherever the input was NaN."""
    out = np.array(np.clip(values, 0.0, 1.0), dtype=np.float32)  # an array even for 0-d input
    out[np.isnan(np.asarray(p))] = np.nan
    return out


class IsotonicCalibrator:
    """Piecewise linear through the fitted thresholds; flat beyond the first and last."""

    def __init__(self, x: Sequence[float], y: Sequence[float]) -> None:
        xs = np.asarray(x, dtype=np.float64)
        ys = np.asarray(y, dtype=np.float64)
        if xs.ndim != 1 or xs.shape != ys.shape or len(xs) == 0:
            raise ValueError(f"isotonic thresholds need equal non-empty x and y, got "
                             f"{len(xs)} x and {len(ys)} y")
        if not (np.isfinite(xs).all() and np.isfinite(ys).all()):
            raise ValueError("isotonic thresholds must be finite")
        if (np.diff(xs) < 0).any() or (np.diff(ys) < 0).any():
            raise ValueError("isotonic thresholds must be non-decreasing in x and y")
        if ys[0] < 0.0 or ys[-1] > 1.0:
            raise ValueError("isotonic y must lie in [0, 1]")
        self.x = xs
        self.y = ys

    @classmethod
    def fit(cls, p: npt.ArrayLike, labels: npt.ArrayLike,
            weights: npt.ArrayLike | None = None) -> IsotonicCalibrator:
        s, t, w = _checked(p, labels, weights)
        _total(w)
        reg = IsotonicRegression(out_of_bounds="clip", y_min=0.0, y_max=1.0, increasing=True)
        reg.fit(s, t, sample_weight=w)
        return cls(reg.X_thresholds_.tolist(), reg.y_thresholds_.tolist())

    def apply(self, p: F32) -> F32:
        q = np.asarray(p, dtype=np.float64)
        return _out(p, np.interp(q, self.x, self.y))

    def to_json(self) -> dict[str, object]:
        return {"kind": "isotonic", "x": self.x.tolist(), "y": self.y.tolist()}


class PlattCalibrator:
    """sigmoid(a · logit(p) + b); a ≥ 0 so the model's ranking is kept."""

    def __init__(self, a: float, b: float) -> None:
        self.a = _finite("Platt a", a)
        self.b = _finite("Platt b", b)
        if self.a < 0.0:
            raise ValueError(f"Platt a must be >= 0 (calibration never reverses the ranking), "
                             f"got {a}")

    @classmethod
    def fit(cls, p: npt.ArrayLike, labels: npt.ArrayLike,
            weights: npt.ArrayLike | None = None) -> PlattCalibrator:
        s, t, w = _checked(p, labels, weights)
        _total(w)
        pos = float(w[t == 1].sum())
        neg = float(w[t == 0].sum())
        # Platt's targets (1999): positives aim at (N+ + 1)/(N+ + 2), negatives at 1/(N- + 2).
        # Soft targets become two weighted copies of every example, one per class.
        hi, lo = (pos + 1.0) / (pos + 2.0), 1.0 / (neg + 2.0)
        target = np.where(t == 1, hi, lo)
        z = _logit(s)[:, None]
        x = np.concatenate([z, z])
        y = np.concatenate([np.ones(len(s)), np.zeros(len(s))])
        sw = np.concatenate([w * target, w * (1.0 - target)])
        reg = LogisticRegression(C=PLATT_C, max_iter=1000).fit(x, y, sample_weight=sw)
        a, b = float(reg.coef_[0, 0]), float(reg.intercept_[0])
        # Without spread in the scores the slope is not identified; scores that rank backwards
        # carry no usable order. Either way: the smoothed rate, whatever the score.
        if a < 0.0 or np.ptp(s[w > 0]) == 0.0:
            a, b = 0.0, float(_logit(np.array([(pos + 1.0) / (pos + neg + 2.0)]))[0])
        return cls(a, b)

    def apply(self, p: F32) -> F32:
        q = np.asarray(p, dtype=np.float64)
        return _out(p, _sigmoid(self.a * _logit(q) + self.b))

    def to_json(self) -> dict[str, object]:
        return {"kind": "platt", "a": self.a, "b": self.b}


class ConstantCalibrator:
    """The same probability for every score: for heads whose validation data had one class."""

    def __init__(self, value: float) -> None:
        self.value = _finite("constant value", value)
        if not 0.0 <= self.value <= 1.0:
            raise ValueError(f"constant value must lie in [0, 1], got {value}")

    def apply(self, p: F32) -> F32:
        q = np.asarray(p, dtype=np.float64)
        return _out(p, np.full_like(q, self.value))

    def to_json(self) -> dict[str, object]:
        return {"kind": "constant", "value": self.value}


def _checked(p: npt.ArrayLike, labels: npt.ArrayLike,
             weights: npt.ArrayLike | None) -> tuple[F64, npt.NDArray[np.int8], F64]:
    """Flat float64 scores, int8 labels and float64 weights, or ValueError saying what's wrong."""
    s = np.asarray(p, dtype=np.float64)
    t = np.asarray(labels, dtype=np.float64)
    if s.shape != t.shape:
        raise ValueError(f"scores have shape {s.shape} but labels {t.shape}")
    s, t = s.ravel(), t.ravel()
    if np.isnan(s).any():
        raise ValueError(f"scores contain {int(np.isnan(s).sum())} NaN")
    if ((s < 0.0) | (s > 1.0)).any():
        raise ValueError("scores must be probabilities in [0, 1]")
    bad = ~((t == 0.0) | (t == 1.0))
    if bad.any():
        raise ValueError(f"labels must be 0 or 1, found {sorted(set(t[bad].tolist()))[:5]}")
    if weights is None:
        w = np.ones_like(s)
    else:
        w = np.asarray(weights, dtype=np.float64)
        if w.shape != np.shape(p):
            raise ValueError(f"weights have shape {w.shape} but scores {np.shape(p)}")
        w = w.ravel()
        if not np.isfinite(w).all() or (w < 0.0).any():
            raise ValueError("weights must be finite and non-negative")
    return s, t.astype(np.int8), w


def _total(w: F64) -> float:
    total = float(w.sum())
    if total <= 0.0:
        raise ValueError("nothing to fit: no examples, or all weights are zero")
    return total


def fit_calibrator(p: npt.ArrayLike, labels: npt.ArrayLike,
                   weights: npt.ArrayLike | None = None,
                   min_positives: int = MIN_POSITIVES) -> Calibrator:
    """The calibrator the validation data supports (see the module docstring).

    `min_positives` counts examples (not weight): it is about how many independent
    observations shape the isotonic steps. The constant for a single-class head uses the
    total weight as its count, so that down-sampled negatives weighted up still count in full.
    """
    s, t, w = _checked(p, labels, weights)
    total = _total(w)
    n_pos = int((t[w > 0] == 1).sum())
    n_neg = int((t[w > 0] == 0).sum())
    if n_pos == 0 or n_neg == 0:
        # Laplace's rule of succession: k of n seen -> (k + 1) / (n + 2).
        k = total if n_neg == 0 else 0.0
        return ConstantCalibrator((k + 1.0) / (total + 2.0))
    if n_pos >= min_positives:
        return IsotonicCalibrator.fit(s, t, w)
    return PlattCalibrator.fit(s, t, w)


def _number(d: Mapping[str, object], key: str) -> float:
    v = d[key]
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise ValueError(f"calibrator {key!r} must be a number, got {type(v).__name__}")
    return float(v)


def _numbers(d: Mapping[str, object], key: str) -> list[float]:
    v = d[key]
    if not isinstance(v, list):
        raise ValueError(f"calibrator {key!r} must be a list of numbers")
    return [_number({key: x}, key) for x in v]


_PARAMS = {"isotonic": {"x", "y"}, "platt": {"a", "b"}, "constant": {"value"}}


def calibrator_from_json(d: Mapping[str, object]) -> Calibrator:
    """The calibrator `to_json` described; ValueError naming what is wrong otherwise."""
    if not isinstance(d, Mapping):
        raise ValueError(f"calibrator must be a JSON object, got {type(d).__name__}")
    kind = d.get("kind")
    if not isinstance(kind, str) or kind not in _PARAMS:
        raise ValueError(f"unknown calibrator kind {kind!r}; expected one of {sorted(_PARAMS)}")
    keys = set(d) - {"kind"}
    if keys != _PARAMS[kind]:
        raise ValueError(f"{kind} calibrator needs keys {sorted(_PARAMS[kind])}, "
                         f"got {sorted(keys)}")
    if kind == "isotonic":
        return IsotonicCalibrator(_numbers(d, "x"), _numbers(d, "y"))
    if kind == "platt":
        return PlattCalibrator(_number(d, "a"), _number(d, "b"))
    return ConstantCalibrator(_number(d, "value"))


@dataclass(frozen=True, slots=True)
class Bin:
    lo: float
    hi: float
    mean_predicted: float
    observed_rate: float
    count: int


def reliability(p: npt.ArrayLike, labels: npt.ArrayLike, bins: int = 10) -> list[Bin]:
    """Equal-width bins over [0, 1], empty ones left out; a score of exactly 1 is in the last."""
    if bins < 1:
        raise ValueError(f"bins must be >= 1, got {bins}")
    s, t, _ = _checked(p, labels, None)
    idx = np.minimum((s * bins).astype(np.int64), bins - 1)
    count = np.bincount(idx, minlength=bins)
    sum_p = np.bincount(idx, weights=s, minlength=bins)
    sum_y = np.bincount(idx, weights=t.astype(np.float64), minlength=bins)
    return [Bin(i / bins, (i + 1) / bins, float(sum_p[i] / count[i]),
                float(sum_y[i] / count[i]), int(count[i]))
            for i in range(bins) if count[i] > 0]


def expected_calibration_error(p: npt.ArrayLike, labels: npt.ArrayLike, bins: int = 10) -> float:
    """Count-weighted mean over bins of |mean predicted - observed rate|."""
    table = reliability(p, labels, bins)
    n = sum(b.count for b in table)
    if n == 0:
        raise ValueError("expected calibration error of no examples")
    return sum(b.count * abs(b.mean_predicted - b.observed_rate) for b in table) / n


def calibrate_heads(calibrators: Sequence[Calibrator], raw: F32) -> F32:
    """Raw outputs [entity, head] through each head's calibrator."""
    out = np.empty_like(raw)
    for j, cal in enumerate(calibrators):
        out[:, j] = cal.apply(raw[:, j])
    return out
