"""A gradient-boosted-trees baseline the LSTM has to beat, on the same features and samples.

Tree ensembles on summary statistics are a strong baseline for failure prediction from GPU
telemetry (they often beat plain LSTMs), so the LSTM's numbers only mean something next to
theirs. This baseline is trained on exactly what the LSTM sees: the same hourly sequences
(`RunFeatures.windows`), the same `split` call (time-based train / validation / test, the same
held-out nodes, the same subsampled training negatives for the same seed), the same calibration
on validation and the same metrics (`evaluate_heads`).

Trees need a fixed-length input, so each [T, F] sequence is summarised (`summarize`) into
  - `last:<f>`     the last hour's value of every feature,
  - `max:<f>`      the maximum over the window of every feature,
  - `mean24h:<f>`  the mean over the last 24 hours (all of them when T < 24),
  - `active_h:<f>` for activity features (error counts, fault states): how many hours of the
                   window had the feature > 0.
NaN stays NaN (an hour, or a whole window, with no data): HistGradientBoostingClassifier learns
which branch missing values take, which is what missingness-aware features are for.

One classifier per head (failure mode x horizon), class-balanced, early-stopped on its own
stratified 15 % of the training samples. A head with no positive training sample has nothing to
learn: it scores every entity with the training rate (zero), and its validation-fitted
calibrator turns that constant into the validation rate (Laplace-smoothed when validation has no
positive either), the same fallback the LSTM's heads get from `fit_calibrator`.

Cost: the summaries are binned once per scope (`Bins`: quantiles of the training summaries, as
HGB bins unweighted data) before the heads see them, because given sample weights (the class
balance) HGB bins every column with one Python-level weighted percentile per threshold: seconds
per head on a few thousand samples. Prediction runs in cache-sized blocks of rows.

`TreePredictor` carries the fields `PredictorDetector` reads from a `Predictor`, and
`TreeRuntime.probabilities` has the LSTM runtime's contract, so the baseline can be scored by
the same evaluation.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
from sklearn.ensemble import HistGradientBoostingClassifier
from threadpoolctl import threadpool_limits

from collectors.catalog import Scope
from models.evaluation.events import Failure
from models.predictor.calibration import Calibrator, calibrate_heads, fit_calibrator
from models.predictor.dataset import (
    HORIZONS_H,
    RunFeatures,
    Split,
    Targets,
    gather,
    split,
    targets,
)
from models.predictor.features import FEATURES
from models.predictor.train import evaluate_heads

F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]

MEAN_H = 24  # hours averaged by the `mean24h` block
MIN_POS_EARLY_STOP = 2  # HGB's stratified holdout needs two of each class
# HGB predicts tree by tree over all rows given: blocks that stay in cache across the trees
# scored validation and test 3x faster than one call over 200k rows.
PREDICT_ROWS = 4096


@dataclass(frozen=True, slots=True)
class TreeConfig:
    window_h: int = 48  # as the LSTM's: the same history per sample
    max_iter: int = 200
    learning_rate: float = 0.1
    max_leaf_nodes: int = 31
    min_samples_leaf: int = 20
    l2_regularization: float = 1.0
    validation_fraction: float = 0.15
    n_iter_no_change: int = 10
    neg_keep: float = 0.05  # share of training negatives kept, as the LSTM's
    seed: int = 0
    horizons: tuple[int, ...] = HORIZONS_H
    chunk: int = 8192  # samples gathered at once: bounds memory to chunk x T x F floats
    # OpenMP threads for fitting and scoring. One by default: HGB's threads busy-wait at every
    # barrier, and with another process on a core a 2-thread fit ran 5-30x slower than 1.
    threads: int = 1

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _activity(scope: Scope) -> list[int]:
    return [j for j, f in enumerate(FEATURES[scope]) if f.activity]


def summary_names(scope: Scope) -> list[str]:
    """Column names of `summarize(x, scope)`, in order."""
    names = [f.name for f in FEATURES[scope]]
    act = [names[j] for j in _activity(scope)]
    return ([f"last:{n}" for n in names] + [f"max:{n}" for n in names]
            + [f"mean{MEAN_H}h:{n}" for n in names] + [f"active_h:{n}" for n in act])


def summarize(x: F32, scope: Scope) -> F32:
    """Model inputs [n, T, F] -> [n, 3F + activity features]; see the module docstring."""
    if x.ndim != 3 or x.shape[2] != len(FEATURES[scope]):
        raise ValueError(f"{scope}: expected [n, T, {len(FEATURES[scope])}] inputs, "
                         f"got {x.shape}")
    last = x[:, -1, :]
    peak = np.fmax.reduce(x, axis=1)  # ignores NaN; all-NaN gives NaN, without a warning
    recent = x[:, -MEAN_H:, :]
    seen = ~np.isnan(recent)
    count = seen.sum(axis=1)
    total = np.where(seen, recent, 0.0).sum(axis=1)
    mean = np.divide(total, count, out=np.full(total.shape, np.nan, np.float32),
                     where=count > 0)
    active = (x[:, :, _activity(scope)] > 0).sum(axis=1)  # NaN compares False: not active
    return np.concatenate([last, peak, mean, active], axis=1).astype(np.float32)


@dataclass(frozen=True, slots=True)
class Bins:
    """Per column, the thresholds HGB would bin unweighted data by; `apply` maps a value x to
    bin i where thresholds[i - 1] < x <= thresholds[i] (NaN stays NaN). The heads are fitted on
    bin indices, at most `max_bins` distinct values per column, which HGB bins as they are."""

    thresholds: tuple[npt.NDArray[np.float64], ...]
    # Columns with no value at all in training (page retirement on a row-remapping GPU): read
    # as a constant, since HGB cannot bin a column that is missing throughout.
    unseen: tuple[bool, ...] = ()

    @classmethod
    def fit(cls, x: F32, max_bins: int = 255) -> Bins:
        out = []
        unseen = tuple(bool(np.isnan(col).all()) for col in x.T)
        for col in x.T:
            v = np.unique(col[~np.isnan(col)]).astype(np.float64)
            if len(v) <= max_bins:
                thr = (v[:-1] + v[1:]) / 2.0
            else:
                q = np.linspace(0.0, 100.0, max_bins + 1)[1:-1]
                thr = np.unique(np.percentile(col[~np.isnan(col)], q,
                                              method="averaged_inverted_cdf"))
            out.append(thr)
        return cls(tuple(out), unseen)

    def apply(self, x: F32) -> F32:
        if x.shape[1] != len(self.thresholds):
            raise ValueError(f"{x.shape[1]} columns, binned {len(self.thresholds)}")
        out = np.empty(x.shape, np.float32)
        for j, thr in enumerate(self.thresholds):
            out[:, j] = np.searchsorted(thr, x[:, j], side="left")
        out[np.isnan(x)] = np.nan
        for j, gone in enumerate(self.unseen):
            if gone:
                out[:, j] = 0.0
        return out


def _summarised(runs: Sequence[RunFeatures], tgts: Sequence[Targets], s: Split,
                cfg: TreeConfig) -> tuple[F32, F32]:
    """Summaries and targets of every sample of a split, gathered chunk by chunk."""
    scope = runs[0].scope
    xs = [np.zeros((0, len(summary_names(scope))), np.float32)]
    ys = [np.zeros((0, len(tgts[0].heads)), np.float32)]
    for i in range(0, len(s), cfg.chunk):
        x, y, _ = gather(runs, tgts, s, np.arange(i, min(i + cfg.chunk, len(s)), dtype=np.int64),
                      cfg.window_h)
        xs.append(summarize(x, scope))
        ys.append(y)
    return np.concatenate(xs), np.concatenate(ys)


@dataclass(slots=True)
class TreeRuntime:
    """One scope's fitted heads: `models[j]` None means head j scores the constant
    `priors[j]` (no positive training sample)."""

    scope: Scope
    heads: list[str]
    models: list[HistGradientBoostingClassifier | None]
    priors: list[float]
    calibrators: list[Calibrator]
    bins: Bins
    metrics: dict[str, Any] = field(default_factory=dict)
    threads: int = 1

    def raw_summary(self, s: F32) -> F32:
        """Uncalibrated probabilities [n, head] of summaries [n, F']: one vectorised
        predict_proba per head and block of PREDICT_ROWS samples (a fleet's entities at once)."""
        out = np.empty((len(s), len(self.heads)), np.float32)
        for j, m in enumerate(self.models):
            if m is None:
                out[:, j] = self.priors[j]
        with threadpool_limits(limits=self.threads, user_api="openmp"):
            for i in range(0, len(s), PREDICT_ROWS):
                block = self.bins.apply(s[i:i + PREDICT_ROWS])
                for j, m in enumerate(self.models):
                    if m is not None:
                        out[i:i + PREDICT_ROWS, j] = m.predict_proba(block)[:, 1]
        return out

    def raw(self, x: F32) -> F32:
        """Uncalibrated outputs [entity, head] for model inputs [entity, T, F]."""
        return self.raw_summary(summarize(x, self.scope))

    def calibrate(self, raw: F32) -> F32:
        return calibrate_heads(self.calibrators, raw)

    def probabilities(self, x: F32) -> F32:
        return self.calibrate(self.raw(x))


def _classifier(cfg: TreeConfig, early_stop: bool) -> HistGradientBoostingClassifier:
    return HistGradientBoostingClassifier(
        learning_rate=cfg.learning_rate, max_iter=cfg.max_iter,
        max_leaf_nodes=cfg.max_leaf_nodes, min_samples_leaf=cfg.min_samples_leaf,
        l2_regularization=cfg.l2_regularization, early_stopping=early_stop,
        validation_fraction=cfg.validation_fraction, n_iter_no_change=cfg.n_iter_no_change,
        class_weight="balanced", random_state=cfg.seed)


def fit_trees(scope: Scope, runs: Sequence[RunFeatures], tgts: Sequence[Targets],
              cfg: TreeConfig) -> TreeRuntime:
    t0 = time.perf_counter()
    parts = split(runs, tgts, seed=cfg.seed, neg_keep=cfg.neg_keep)  # as train_scope's call
    heads = list(tgts[0].heads)
    if len(parts.train) == 0:
        raise ValueError(f"{scope}: no training samples (is the trace shorter than a few hours?)")
    x_tr, y_tr = _summarised(runs, tgts, parts.train, cfg)
    bins = Bins.fit(x_tr)
    b_tr = bins.apply(x_tr)
    models: list[HistGradientBoostingClassifier | None] = []
    priors: list[float] = []
    fitted: dict[str, Any] = {}
    for j, head in enumerate(heads):
        pos = int(y_tr[:, j].sum())
        priors.append(pos / len(y_tr))
        if pos == 0 or pos == len(y_tr):
            models.append(None)
            fitted[head] = {"train_positives": pos, "trees": 0}
            continue
        m = _classifier(cfg, early_stop=pos >= MIN_POS_EARLY_STOP)
        with threadpool_limits(limits=cfg.threads, user_api="openmp"):
            m.fit(b_tr, y_tr[:, j].astype(np.int64))
        models.append(m)
        fitted[head] = {"train_positives": pos, "trees": int(m.n_iter_)}
    fit_s = time.perf_counter() - t0
    rt = TreeRuntime(scope, heads, models, priors, [], bins, threads=cfg.threads)
    raw: dict[str, tuple[F32, F32]] = {}
    for name, part in (("val", parts.val), ("test", parts.test), ("held_out", parts.held_out)):
        s, y = _summarised(runs, tgts, part, cfg)  # one split's summaries in memory at a time
        raw[name] = (rt.raw_summary(s), y)
    p_val, y_val = raw["val"]
    rt.calibrators = [fit_calibrator(p_val[:, j], y_val[:, j]) for j in range(len(heads))]
    rt.metrics = {
        "samples": {"train": len(parts.train), "val": len(parts.val), "test": len(parts.test),
                    "held_out": len(parts.held_out)},
        "held_out_nodes": parts.held_out_nodes,
        "summary_columns": len(summary_names(scope)),
        "heads": fitted,
        "fit_s": round(fit_s, 2),
        **{name: evaluate_heads(p, y, rt.calibrators, heads) for name, (p, y) in raw.items()},
    }
    return rt


@dataclass(slots=True)
class TreePredictor:
    """The fields `PredictorDetector` reads from a `Predictor`, for the trees baseline."""

    version: str
    window_h: int
    horizons_h: list[int]
    scopes: dict[Scope, TreeRuntime]
    card: dict[str, Any]


def _version(runs_by_scope: dict[Scope, list[RunFeatures]],
             failures_per_run: Sequence[Sequence[Failure]], cfg: TreeConfig) -> str:
    """Content address of the data and configuration: same inputs, same version."""
    h = hashlib.sha256(json.dumps(cfg.as_dict(), sort_keys=True).encode())
    for scope in sorted(runs_by_scope, key=lambda s: s.value):
        for r in runs_by_scope[scope]:
            h.update(f"{scope.value}:{r.x.shape}".encode())
            h.update(np.ascontiguousarray(r.x).tobytes())
            h.update(np.ascontiguousarray(r.t_pred).tobytes())
    for fails in failures_per_run:
        h.update(json.dumps([(f.time, f.entity, f.mode) for f in fails]).encode())
    return "trees-" + h.hexdigest()[:10]


def fit_tree_predictor(runs_by_scope: dict[Scope, list[RunFeatures]],
                       failures_per_run: list[list[Failure]],
                       cfg: TreeConfig | None = None) -> TreePredictor:
    """One `TreeRuntime` per scope; `failures_per_run[i]` labels run i of every scope (as
    `gpuhealth train` records them)."""
    cfg = cfg or TreeConfig()
    started = time.perf_counter()
    scopes: dict[Scope, TreeRuntime] = {}
    for scope, rfs in runs_by_scope.items():
        tg = [targets(rf, fails, cfg.horizons, cfg.window_h)
              for rf, fails in zip(rfs, failures_per_run, strict=True)]
        scopes[scope] = fit_trees(scope, rfs, tg, cfg)
    card = {"model": "HistGradientBoostingClassifier per head on window summaries",
            "train_config": cfg.as_dict(),
            "summary_columns": {s.value: summary_names(s) for s in scopes},
            "metrics": {s.value: rt.metrics for s, rt in scopes.items()},
            "train_wall_s": round(time.perf_counter() - started, 1)}
    return TreePredictor(_version(runs_by_scope, failures_per_run, cfg), cfg.window_h,
                         list(cfg.horizons), scopes, card)
