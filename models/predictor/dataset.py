"""Training data for the predictor: hourly features recorded while a labelled trace replays,
targets per failure mode and horizon, and splits over time and nodes.

`HourlyRecorder` watches the window store as rounds go in and keeps each newly finished hour's
features ([hour, entity, F0] per scope), stamped with the data time at which the live detector
would first see that hour: the prediction time. Sequences for the model are gathered from these
arrays on demand (a window of T hours ending at a sample's hour), so memory holds one copy of
the features, not one per sample.

Targets: a sample (hour h, entity e) is positive for (mode, H) when a failure of that mode on e
happens in (t_h, t_h + H]. NVLink failures count for the GPU that owns the link (the GPU model
predicts them; the detector places the risk on the worst link). After a failure of an entity,
until its repair (or 24 h), its samples are left out: risk there is detection, not prediction
(the same rule the evaluation's PR-AUC uses).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from collectors.catalog import Scope
from models.detectors.view import FleetView
from models.evaluation.events import Failure
from models.predictor.chunks import window_start
from models.predictor.features import (
    FEATURES,
    HOURLY,
    MIN_OBSERVED_H,
    HourlyUnavailable,
    hours_of,
    n_hourly,
    observed,
)

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
B = npt.NDArray[np.bool_]

HOUR = 3600.0
GRACE_S = 24 * HOUR
MODES: dict[Scope, tuple[str, ...]] = {
    Scope.GPU: ("M1_hbm", "M2_gpu_hard", "M3_nvlink", "M5_thermal", "M6_sram"),
    Scope.IB_PORT: ("M4_ib_link",),
}
HORIZONS_H = (1, 24, 168)


def head_names(scope: Scope, horizons: Sequence[int] = HORIZONS_H) -> list[str]:
    return [f"{m}@{h}h" for m in MODES[scope] for h in horizons]


def owner_key(scope: Scope, entity: str) -> str | None:
    """The key of the scope's entity a failure label belongs to, or None when not this scope."""
    parts = entity.split(":")
    if scope is Scope.GPU and len(parts) >= 2 and parts[1].startswith("gpu"):
        return ":".join(parts[:2])  # a GPU, or the GPU owning an NVLink link
    if scope is Scope.IB_PORT and len(parts) == 3 and not parts[1].startswith("gpu"):
        return entity
    return None


@dataclass(slots=True)
class RunFeatures:
    """One replayed run's hourly features of one scope."""

    scope: Scope
    x: F32  # [hour, entity, F0]; NaN where the store had nothing
    t_pred: F64  # [hour] data time at which the hour's features became available
    keys: list[str]
    nodes: list[str]
    hour_index: I64  # [hour] the absolute hour (the store's bucket index) of each row

    @property
    def hours(self) -> int:
        return int(self.x.shape[0])

    def windows(self, hours: I64, ents: I64, length: int) -> F32:
        """Model inputs [n, length, F] for samples (hours[i], ents[i]): the `length` hours up
        to and including hours[i], NaN before the run began."""
        offs = np.arange(-length + 1, 1)
        rows = hours[:, None] + offs[None, :]
        valid = rows >= 0
        x: F32 = self.x[np.clip(rows, 0, None), ents[:, None]]
        x[~valid] = np.nan
        return x

    def starts(self, hours: I64, length: int, period: int) -> I64:
        """Where each sample's model memory begins within its window (models/predictor/
        chunks.py)."""
        return window_start(self.hour_index[hours], length, period)


class HourlyRecorder:
    """Call `observe(fleet, now)` after each ingested round; `runs()` gives what was recorded."""

    def __init__(self, scopes: Iterable[Scope] = (Scope.GPU, Scope.IB_PORT)) -> None:
        self.scopes = tuple(scopes)
        self._last = {s: -1 for s in self.scopes}
        self._rows: dict[Scope, list[F32]] = {s: [] for s in self.scopes}
        self._t: dict[Scope, list[float]] = {s: [] for s in self.scopes}
        self._hour: dict[Scope, list[int]] = {s: [] for s in self.scopes}
        self._fleet: FleetView | None = None

    def observe(self, fleet: FleetView, now: float) -> None:
        self._fleet = fleet
        for scope in self.scopes:
            try:
                h = hours_of(fleet.scope(scope))
            except HourlyUnavailable:
                continue
            if h.last <= self._last[scope]:
                continue
            new = min(h.last - self._last[scope], h.length) if self._last[scope] >= 0 else 1
            x = HOURLY[scope](fleet, new)
            for j in range(new):
                self._rows[scope].append(x[:, j, :])
                self._t[scope].append(now)
                self._hour[scope].append(h.last - new + 1 + j)
            self._last[scope] = h.last

    def take(self) -> dict[Scope, RunFeatures]:
        """What was recorded since the last take, forgetting it; which hours are new is still
        remembered, so recording in parts (a day at a time) gives the rows one run would."""
        out = self.runs()
        for scope in self.scopes:
            self._rows[scope], self._t[scope], self._hour[scope] = [], [], []
        return out

    def runs(self) -> dict[Scope, RunFeatures]:
        out: dict[Scope, RunFeatures] = {}
        if self._fleet is None:
            return out
        for scope in self.scopes:
            rows = self._rows[scope]
            view = self._fleet.scope(scope)
            ents = list(view.entities)
            n, f = len(ents), n_hourly(scope)
            x = np.full((len(rows), n, f), np.nan, np.float32)
            for i, r in enumerate(rows):  # entities only ever join: pad earlier hours
                x[i, : r.shape[0]] = r
            out[scope] = RunFeatures(scope, x, np.asarray(self._t[scope], np.float64),
                                     [e.key for e in ents], [e.node for e in ents],
                                     np.asarray(self._hour[scope], np.int64))
        return out


@dataclass(slots=True)
class Targets:
    y: F32  # [hour, entity, head] 0/1
    valid: B  # [hour, entity]: usable as a training or test sample
    heads: list[str]


def targets(run: RunFeatures, failures: Iterable[Failure],
            horizons: Sequence[int] = HORIZONS_H, window_h: int = 24,
            min_observed_h: int = MIN_OBSERVED_H) -> Targets:
    modes = MODES[run.scope]
    heads = head_names(run.scope, horizons)
    index = {k: i for i, k in enumerate(run.keys)}
    node_ents: dict[str, list[int]] = {}
    for i, n in enumerate(run.nodes):
        node_ents.setdefault(n, []).append(i)
    y = np.zeros((run.hours, len(run.keys), len(heads)), np.float32)
    # As the detector: a sample needs enough reported hours in its window to say anything.
    seen = np.cumsum(observed(run.scope, run.x), axis=0)
    before = np.vstack([np.zeros((min(window_h, run.hours), seen.shape[1]), seen.dtype),
                        seen[: max(run.hours - window_h, 0)]])
    valid: B = np.asarray((seen - before) >= min_observed_h)
    t = run.t_pred
    for f in failures:
        if f.scope is Scope.NODE or f.mode == "M7_unobservable":
            hit = node_ents.get(f.node, [])
        else:
            key = owner_key(run.scope, f.entity)
            hit = [index[key]] if key is not None and key in index else []
        if not hit:
            continue
        end = max(f.time + GRACE_S, f.repaired or 0.0)
        after = (t >= f.time) & (t < end)  # detection, not prediction
        for e in hit:
            valid[after, e] = False
        if f.mode not in modes or f.scope is Scope.NODE:
            continue
        m = modes.index(f.mode)
        for j, hz in enumerate(horizons):
            before = (t < f.time) & (t >= f.time - hz * HOUR)
            for e in hit:
                y[before, e, m * len(horizons) + j] = 1.0
    return Targets(y, valid, heads)


@dataclass(slots=True)
class Split:
    """Sample indices (run, hour, entity) of one part of the data."""

    run: I64 = field(default_factory=lambda: np.zeros(0, np.int64))
    hour: I64 = field(default_factory=lambda: np.zeros(0, np.int64))
    ent: I64 = field(default_factory=lambda: np.zeros(0, np.int64))

    def __len__(self) -> int:
        return len(self.hour)

    def extend(self, run: int, hours: I64, ents: I64) -> None:
        self.run = np.concatenate([self.run, np.full(len(hours), run, np.int64)])
        self.hour = np.concatenate([self.hour, hours.astype(np.int64)])
        self.ent = np.concatenate([self.ent, ents.astype(np.int64)])


@dataclass(slots=True)
class Splits:
    train: Split
    val: Split
    test: Split
    held_out: Split  # held-out nodes over the test period
    held_out_nodes: list[str]


def split(runs: Sequence[RunFeatures], tgts: Sequence[Targets], *, seed: int,
          fractions: tuple[float, float] = (0.6, 0.2), held_out_share: float = 0.1,
          neg_keep: float = 0.05) -> Splits:
    """Time-based train / validation / test (the earliest 60 % of each run's hours, the next
    20 %, the last 20 %: models drift over time, Liu et al., SYSTOR 2023), with a share of
    nodes held out of training and validation altogether. Training negatives are subsampled to
    `neg_keep` (all positives kept); validation and test keep the natural class balance, which
    calibration needs."""
    rng = np.random.default_rng(seed)
    all_nodes = sorted({n for r in runs for n in r.nodes})
    n_out = max(1, round(held_out_share * len(all_nodes))) if len(all_nodes) > 2 else 0
    held = set(rng.choice(all_nodes, size=n_out, replace=False).tolist()) if n_out else set()
    out = Splits(Split(), Split(), Split(), Split(), sorted(held))
    for i, (r, tg) in enumerate(zip(runs, tgts, strict=True)):
        a = int(r.hours * fractions[0])
        b = int(r.hours * (fractions[0] + fractions[1]))
        out_ent = np.array([n in held for n in r.nodes], bool)
        pos_any = tg.y.max(axis=2) > 0
        for part, lo, hi in ((out.train, 0, a), (out.val, a, b), (out.test, b, r.hours)):
            hh, ee = np.nonzero(tg.valid[lo:hi] & ~out_ent[None, :])
            hh = hh + lo
            if part is out.train:
                keep = pos_any[hh, ee] | (rng.random(len(hh)) < neg_keep)
                hh, ee = hh[keep], ee[keep]
            part.extend(i, hh, ee)
        hh, ee = np.nonzero(tg.valid[b:] & out_ent[None, :])
        out.held_out.extend(i, hh + b, ee)
    return out


def gather(runs: Sequence[RunFeatures], tgts: Sequence[Targets], s: Split, idx: I64,
           length: int, period: int | None = None) -> tuple[F32, F32, I64]:
    """Inputs [n, length, F], targets [n, heads] and where each sample's model memory begins
    (models/predictor/chunks.py; 0 without a `period`) of samples `idx` of a split."""
    n_feat = len(FEATURES[runs[0].scope])
    x = np.empty((len(idx), length, n_feat), np.float32)
    y = np.empty((len(idx), len(tgts[0].heads)), np.float32)
    start = np.zeros(len(idx), np.int64)
    for r in np.unique(s.run[idx]).tolist():
        where = np.flatnonzero(s.run[idx] == r)
        sel = idx[where]
        x[where] = runs[r].windows(s.hour[sel], s.ent[sel], length)
        y[where] = tgts[r].y[s.hour[sel], s.ent[sel]]
        if period is not None:
            start[where] = runs[r].starts(s.hour[sel], length, period)
    return x, y, start
