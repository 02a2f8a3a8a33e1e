"""Reliability of the model's calibrated probabilities, per head, on the evaluated scenario.

Each finished hour the model's probabilities [entity slot, head] (a head is "<mode>@<H>h") are
scored against the simulator's labels as models/predictor/dataset.py `targets` defines them: an
entity is positive for "<mode>@<H>h" at data time t when it fails with that mode in (t, t+H]
(a GPU also for an NVLink failure (M3) on one of its links); the hours from a failure of the
entity, or of its node (a node-scope or unobservable failure), to the later of 24 h after and
its repair are left out (detection, not prediction), and so are slots without a probability
(too little history).

Samples are accumulated online into fixed probability bins (count, sum of predictions, sum of
outcomes per bin and head), so memory does not grow with the run: a year of 4,096 GPUs x 15
heads would be half a billion samples. The bins are finer near 0, where almost every sample
of a rare event lies. ECE is the count-weighted mean of |mean predicted - observed| over the
bins.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from collectors.catalog import Scope
from collectors.frames import Entity
from models.evaluation.events import M7, Failure
from models.evaluation.matching import DAY, HOUR

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
EDGES: tuple[float, ...] = (0.0, 0.001, 0.01, 0.03, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9, 1.0)
GRACE_S = DAY  # as models/predictor/dataset.py: the post-failure hours a target leaves out


class Bins:
    """Count, sum of predictions and sum of outcomes per probability bin, per head."""

    def __init__(self, heads: Sequence[str], edges: Sequence[float] = EDGES) -> None:
        self.heads = list(heads)
        self.edges = np.asarray(edges, np.float64)
        shape = (len(self.heads), len(self.edges) - 1)
        self.n = np.zeros(shape, np.int64)
        self.sum_p = np.zeros(shape, np.float64)
        self.sum_y = np.zeros(shape, np.float64)

    def add(self, p: npt.NDArray[Any], y: npt.NDArray[Any]) -> None:
        """p, y: [sample, head]; NaN predictions are skipped."""
        nb = len(self.edges) - 1
        for j in range(len(self.heads)):
            pj = np.asarray(p[:, j], np.float64)
            ok = ~np.isnan(pj)
            pj, yj = pj[ok], np.asarray(y[:, j], np.float64)[ok]
            b = np.clip(np.searchsorted(self.edges, pj, side="right") - 1, 0, nb - 1)
            self.n[j] += np.bincount(b, minlength=nb)
            self.sum_p[j] += np.bincount(b, pj, minlength=nb)
            self.sum_y[j] += np.bincount(b, yj, minlength=nb)

    def merge(self, other: Bins) -> None:
        if other.heads != self.heads or not np.array_equal(other.edges, self.edges):
            raise ValueError("reliability bins of different heads or edges")
        self.n += other.n
        self.sum_p += other.sum_p
        self.sum_y += other.sum_y

    def to_dict(self) -> dict[str, Any]:
        return {"heads": self.heads, "edges": self.edges.tolist(), "n": self.n.tolist(),
                "sum_p": self.sum_p.tolist(), "sum_y": self.sum_y.tolist()}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Bins:
        b = cls(d["heads"], d["edges"])
        b.n[:] = d["n"]
        b.sum_p[:] = d["sum_p"]
        b.sum_y[:] = d["sum_y"]
        return b

    def table(self) -> dict[str, dict[str, Any]]:
        """Per head: its non-empty bins (mean predicted, observed rate, n), ECE, samples,
        positives, mean predicted and observed rate overall."""
        out: dict[str, dict[str, Any]] = {}
        for j, head in enumerate(self.heads):
            n, sp, sy = self.n[j], self.sum_p[j], self.sum_y[j]
            total = int(n.sum())
            bins = [{"lo": float(self.edges[b]), "hi": float(self.edges[b + 1]),
                     "predicted": float(sp[b] / n[b]), "observed": float(sy[b] / n[b]),
                     "n": int(n[b])} for b in np.flatnonzero(n)]
            ece = (float(np.sum(np.abs(sp - sy)) / total) if total else None)
            out[head] = {"bins": bins, "ece": ece, "n": total, "positives": float(sy.sum()),
                         "predicted": float(sp.sum() / total) if total else None,
                         "observed": float(sy.sum() / total) if total else None}
        return out


def _owner(scope: Scope, entity: str) -> str | None:
    """The key of `scope`'s entity a failure label belongs to (dataset.py `owner_key`)."""
    parts = entity.split(":")
    if scope is Scope.GPU and len(parts) >= 2 and parts[1].startswith("gpu"):
        return ":".join(parts[:2])  # a GPU, or the GPU that owns an NVLink link
    if scope is Scope.IB_PORT and len(parts) == 3 and not parts[1].startswith("gpu"):
        return entity
    return None


def parse_head(head: str) -> tuple[str, float]:
    """"M1_hbm@24h" -> ("M1_hbm", 86400.0)."""
    mode, _, h = head.rpartition("@")
    if not mode or not h.endswith("h"):
        raise ValueError(f"not a head name <mode>@<H>h: {head!r}")
    return mode, float(h[:-1]) * HOUR


class Reliability:
    """An hour listener (models/evaluation/shared.py) that bins each scope's probabilities
    against the labels."""

    def __init__(self, failures: Sequence[Failure], edges: Sequence[float] = EDGES) -> None:
        self.edges = edges
        self.bins: dict[Scope, Bins] = {}
        self.failures = list(failures)
        self._t = np.array([f.time for f in self.failures], np.float64)
        self._end = np.array([max(f.time + GRACE_S, f.repaired or 0.0) for f in self.failures],
                             np.float64)

    def __call__(self, scope: Scope, p: F32, heads: list[str], entities: Sequence[Entity],
                 now: float) -> None:
        y, valid = self.truth(scope, heads, entities, now)
        bins = self.bins.get(scope)
        if bins is None:
            bins = self.bins[scope] = Bins(heads, self.edges)
        elif bins.heads != heads:
            raise ValueError(f"{scope}: the model's heads changed during the run")
        bins.add(p[: len(valid)][valid], y[valid])

    def truth(self, scope: Scope, heads: Sequence[str], entities: Sequence[Entity],
              now: float) -> tuple[F32, npt.NDArray[np.bool_]]:
        """Outcomes [entity, head] at data time `now`, and which entities count."""
        n = len(entities)
        y = np.zeros((n, len(heads)), np.float32)
        valid = np.ones(n, bool)
        parsed = [parse_head(h) for h in heads]
        reach = max((s for _, s in parsed), default=0.0)
        near = np.flatnonzero(((self._t > now) & (self._t <= now + reach))
                              | ((self._t <= now) & (self._end > now)))
        if not len(near):
            return y, valid
        slot = {e.key: i for i, e in enumerate(entities)}
        for k in near.tolist():
            f = self.failures[k]
            if f.scope is Scope.NODE or f.mode == M7:
                hit = [i for i, e in enumerate(entities) if e.node == f.node]
                positive = False
            else:
                key = _owner(scope, f.entity)
                hit = [slot[key]] if key is not None and key in slot else []
                positive = True
            if f.time <= now:  # in the failure's grace: detection, not prediction
                valid[hit] = False
                continue
            if positive:
                for j, (mode, span) in enumerate(parsed):
                    if mode == f.mode and f.time <= now + span:
                        y[hit, j] = 1.0
        return y, valid

    def to_dict(self) -> dict[str, Any]:
        return {str(scope): b.to_dict() for scope, b in self.bins.items()}


def pooled(runs: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per scope, the bins of several runs (Reliability.to_dict) merged and tabled."""
    merged: dict[str, Bins] = {}
    for r in runs:
        for scope, d in r.items():
            b = Bins.from_dict(d)
            if scope in merged:
                merged[scope].merge(b)
            else:
                merged[scope] = b
    return {scope: b.table() for scope, b in merged.items()}
