"""Training one scope's model: seeded, early-stopped on validation average precision, then
calibrated per head on the validation split and scored on the test split and held-out nodes.

Reproducibility: numpy and torch are seeded, torch runs deterministic kernels on a fixed number
of threads, and the sample order comes from the seeded generator, so the same data and seed
give the same weights bit for bit on the same machine.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from sklearn.metrics import average_precision_score
from torch import nn

from collectors.catalog import Scope
from models.predictor.calibration import (
    Calibrator,
    expected_calibration_error,
    fit_calibrator,
    reliability,
)
from models.predictor.dataset import HORIZONS_H, RunFeatures, Split, Targets, gather, split
from models.predictor.finetune import ScopeInit
from models.predictor.model import FailureLSTM, Scaler, predict

F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]
Progress = Callable[[str, dict[str, float]], None]


@dataclass(frozen=True, slots=True)
class TrainConfig:
    # The memory's period P (models/predictor/chunks.py): the model reads the last P + 1 to 2P
    # hours, carried forward hour by hour at run time.
    window_h: int = 24
    hidden: int = 24
    dropout: float = 0.1
    epochs: int = 20
    batch: int = 256
    lr: float = 2e-3
    weight_decay: float = 1e-4
    patience: int = 4
    neg_keep: float = 0.05  # share of training negatives kept (positives all kept)
    val_neg_keep: float = 0.25  # for early stopping only; calibration sees every sample
    max_pos_weight: float = 10.0
    seed: int = 0
    threads: int = 2
    horizons: tuple[int, ...] = HORIZONS_H

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(slots=True)
class ScopeResult:
    scope: Scope
    model: FailureLSTM
    scaler: Scaler
    calibrators: list[Calibrator]
    heads: list[str]
    history: list[dict[str, float]] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)


def seed_everything(seed: int, threads: int) -> None:
    torch.manual_seed(seed)
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True)


def _pos_weight(y: F32, cap: float) -> torch.Tensor:
    pos = y.sum(axis=0)
    neg = len(y) - pos
    w = np.where(pos > 0, np.clip(neg / np.maximum(pos, 1), 1.0, cap), 1.0)
    return torch.from_numpy(w.astype(np.float32))


def _mean_ap(p: F32, y: F32, w: F32 | None = None, min_pos: int = 20) -> float:
    """Mean average precision over heads with enough positives to rank (a head with three
    positives swings the mean by chance and would pick the epoch)."""
    heads = [j for j in range(y.shape[1]) if min_pos <= y[:, j].sum() < len(y)]
    heads = heads or [j for j in range(y.shape[1]) if 0 < y[:, j].sum() < len(y)]
    aps = [float(average_precision_score(y[:, j], p[:, j], sample_weight=w)) for j in heads]
    return float(np.mean(aps)) if aps else math.nan


def _score(runs: Sequence[RunFeatures], tgts: Sequence[Targets], s: Split, model: FailureLSTM,
           scaler: Scaler, period: int, idx: I64 | None = None,
           chunk: int = 8192) -> tuple[F32, F32]:
    """Raw model outputs and targets over (a subset of) a split, in chunks."""
    idx = np.arange(len(s), dtype=np.int64) if idx is None else idx
    ps, ys = [], []
    for i in range(0, len(idx), chunk):
        x, y, start = gather(runs, tgts, s, idx[i:i + chunk], 2 * period, period)
        ps.append(predict(model, scaler.apply(x), start))
        ys.append(y)
    heads = len(tgts[0].heads)
    if not ps:
        return np.zeros((0, heads), np.float32), np.zeros((0, heads), np.float32)
    return np.concatenate(ps), np.concatenate(ys)


def _batches(runs: Sequence[RunFeatures], s: Split, period: int, size: int,
             rng: np.random.Generator) -> list[I64]:
    """The split's samples in shuffled batches, each of one memory start (so a batch is one
    LSTM call over windows of one length), the batches in shuffled order."""
    order = rng.permutation(len(s)).astype(np.int64)
    start = np.empty(len(s), np.int64)
    for r in np.unique(s.run).tolist():
        rows = np.flatnonzero(s.run == r)
        start[rows] = runs[r].starts(s.hour[rows], 2 * period, period)
    order = order[np.argsort(start[order], kind="stable")]
    bounds = np.flatnonzero(np.diff(start[order])) + 1
    out: list[I64] = []
    for group in np.split(order, bounds):
        out.extend(group[i:i + size] for i in range(0, len(group), size))
    return [out[i] for i in rng.permutation(len(out)).tolist()]


def train_scope(scope: Scope, runs: Sequence[RunFeatures], tgts: Sequence[Targets],
                cfg: TrainConfig, progress: Progress | None = None,
                init: ScopeInit | None = None) -> ScopeResult:
    """`init`: start from an existing model's weights and scaler (models/predictor/finetune.py);
    its weights are scored as epoch 0, so fine-tuning that never beats them on validation keeps
    them (recalibrated)."""
    seed_everything(cfg.seed, cfg.threads)
    rng = np.random.default_rng(cfg.seed)
    parts = split(runs, tgts, seed=cfg.seed, neg_keep=cfg.neg_keep)
    heads = tgts[0].heads
    if len(parts.train) == 0:
        raise ValueError(f"{scope}: no training samples (is the trace shorter than a few hours?)")
    probe = rng.choice(len(parts.train), size=min(len(parts.train), 4096), replace=False)
    period, length = cfg.window_h, 2 * cfg.window_h
    x_probe, _, _ = gather(runs, tgts, parts.train, np.sort(probe).astype(np.int64), length)
    scaler = Scaler.fit(x_probe) if init is None else init.scaler
    y_train = np.concatenate([tgts[r].y[parts.train.hour[parts.train.run == r],
                                        parts.train.ent[parts.train.run == r]]
                              for r in np.unique(parts.train.run).tolist()])
    model = FailureLSTM(x_probe.shape[2], len(heads), cfg.hidden, cfg.dropout)
    if init is not None:
        model.load_state_dict(init.state_dict)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    loss_fn = nn.BCEWithLogitsLoss(pos_weight=_pos_weight(y_train, cfg.max_pos_weight))
    # Early stopping reads a class-balanced subsample of validation, weighted back.
    val_y = np.concatenate([tgts[r].y[parts.val.hour[parts.val.run == r],
                                      parts.val.ent[parts.val.run == r]].max(axis=1)
                            for r in np.unique(parts.val.run).tolist()]) if len(parts.val) else \
        np.zeros(0, np.float32)
    keep = (val_y > 0) | (rng.random(len(val_y)) < cfg.val_neg_keep)
    val_idx = np.flatnonzero(keep).astype(np.int64)
    val_w = np.where(val_y[val_idx] > 0, 1.0, 1.0 / cfg.val_neg_keep).astype(np.float32)
    best: tuple[float, dict[str, torch.Tensor]] | None = None
    stale = 0
    history: list[dict[str, float]] = []
    if init is not None:
        model.eval()
        p_val, y_val = _score(runs, tgts, parts.val, model, scaler, period, val_idx)
        ap = _mean_ap(p_val, y_val, val_w)
        best = (-math.inf if math.isnan(ap) else ap, copy.deepcopy(model.state_dict()))
        history.append({"epoch": 0.0, "train_loss": math.nan, "val_ap": ap})
    for epoch in range(cfg.epochs):
        model.train()
        total, n = 0.0, 0
        for batch in _batches(runs, parts.train, period, cfg.batch, rng):
            x, y, start = gather(runs, tgts, parts.train, batch, length, period)
            logits = model(torch.from_numpy(scaler.apply(x)), int(start[0]))
            loss = loss_fn(logits, torch.from_numpy(y))
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            total += loss.item() * len(y)
            n += len(y)
        p_val, y_val = _score(runs, tgts, parts.val, model, scaler, period, val_idx)
        ap = _mean_ap(p_val, y_val, val_w)
        row = {"epoch": float(epoch + 1), "train_loss": total / max(n, 1), "val_ap": ap}
        history.append(row)
        if progress is not None:
            progress(str(scope), row)
        score = -math.inf if math.isnan(ap) else ap
        if best is None or score > best[0] + 1e-4:
            best, stale = (score, copy.deepcopy(model.state_dict())), 0
        else:
            stale += 1
            if stale >= cfg.patience:
                break
    assert best is not None
    model.load_state_dict(best[1])
    model.eval()
    p_val, y_val = _score(runs, tgts, parts.val, model, scaler, period)
    cals = [fit_calibrator(p_val[:, j], y_val[:, j])
            if init is None or y_val[:, j].any() else init.calibrators[j]
            for j in range(len(heads))]
    metrics: dict[str, Any] = {
        "samples": {"train": len(parts.train), "val": len(parts.val), "test": len(parts.test),
                    "held_out": len(parts.held_out)},
        "held_out_nodes": parts.held_out_nodes,
        "best_epoch": int(max(history, key=lambda r: r["val_ap"]
                              if not math.isnan(r["val_ap"]) else -1)["epoch"]),
    }
    if init is not None:  # heads the fleet's validation split could not recalibrate
        metrics["init_calibrators_kept"] = [h for j, h in enumerate(heads)
                                            if not y_val[:, j].any()]
    for name, part in (("val", parts.val), ("test", parts.test), ("held_out", parts.held_out)):
        p, y = _score(runs, tgts, part, model, scaler, period)
        metrics[name] = evaluate_heads(p, y, cals, heads)
    return ScopeResult(scope, model, scaler, cals, heads, history, metrics)


def kept_scope(scope: Scope, init: ScopeInit, cfg: TrainConfig, version: str) -> ScopeResult:
    """A scope the data cannot train (no failure labelled in its training period), carried
    over from the init model unchanged rather than dropped from the artifact."""
    model = FailureLSTM(len(init.features), len(init.heads), cfg.hidden, cfg.dropout)
    model.load_state_dict(init.state_dict)
    model.eval()
    metrics = {"samples": {}, "val": {}, "test": {}, "held_out": {}, "kept_from_init": version}
    return ScopeResult(scope, model, init.scaler, list(init.calibrators), list(init.heads),
                       [], metrics)


def evaluate_heads(p_raw: F32, y: F32, cals: Sequence[Calibrator],
                   heads: Sequence[str]) -> dict[str, Any]:
    """Per head: positives, prevalence, average precision of the raw scores (isotonic
    calibration ties some of them, which would blur the ranking), expected calibration error
    after calibration, and the reliability curve."""
    out: dict[str, Any] = {}
    for j, h in enumerate(heads):
        pos = int(y[:, j].sum())
        entry: dict[str, Any] = {"n": len(y), "positives": pos,
                                 "prevalence": pos / len(y) if len(y) else math.nan}
        if 0 < pos < len(y):
            p = cals[j].apply(p_raw[:, j])
            entry["average_precision"] = float(average_precision_score(y[:, j], p_raw[:, j]))
            entry["ece"] = expected_calibration_error(p, y[:, j])
            entry["reliability"] = [
                {"predicted": b.mean_predicted, "observed": b.observed_rate, "n": b.count}
                for b in reliability(p, y[:, j])]
        out[h] = entry
    return out
