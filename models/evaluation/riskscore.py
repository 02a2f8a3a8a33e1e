"""PR-AUC of the fused risk score (docs/evaluation.md, Metrics: PR-AUC, not ROC-AUC, because
failures are rare; Saito and Rehmsmeier, PLOS ONE 2015).

A sample is (entity, day): its score is the entity's maximum fused risk during that UTC day of
the run, its label says whether the entity fails within `horizon_s` after the day ends, as a
disk-failure predictor is judged on daily SMART snapshots. Days that contain a failure of the
entity or lie in its post-failure grace are left out: risk there is detection, not prediction.
A GPU's score is the maximum over the GPU and its NVLink links (the scope rule of matching).

The recorder keeps only entities with risk above 0 per day, so a fleet-year costs memory in
proportion to what fired, not to entities x days; zero-score negatives are counted, not stored.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from collectors.catalog import Scope
from models.evaluation.events import Failure

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
DAY = 86400.0
FAMILIES: dict[str, Scope] = {"gpu": Scope.GPU, "nvlink": Scope.NVLINK, "ib_port": Scope.IB_PORT}


@dataclass(slots=True)
class _Day:
    slots: I64
    values: F32
    n: int


@dataclass(slots=True)
class DailyMax:
    """Per scope ("gpu", "nvlink", "ib_port"): each day's max risk of every entity slot."""

    start: float
    days: dict[str, dict[int, _Day]] = field(default_factory=dict)
    _day: int = -1
    _cur: dict[str, F32] = field(default_factory=dict)
    _n: dict[str, int] = field(default_factory=dict)

    def update(self, now: float, risks: Mapping[str, F32]) -> None:
        day = int((now - self.start) // DAY)
        if day != self._day:
            self.flush()
            self._day = day
        for name, r in risks.items():
            cur = self._cur.get(name)
            if cur is None or len(cur) < len(r):
                grown = np.zeros(max(len(r), 2 * len(cur) if cur is not None else 0), np.float32)
                if cur is not None:
                    grown[: len(cur)] = cur
                self._cur[name] = cur = grown
            np.maximum(cur[: len(r)], r, out=cur[: len(r)])
            self._n[name] = max(self._n.get(name, 0), len(r))

    def flush(self) -> None:
        if self._day < 0:
            return
        for name, cur in self._cur.items():
            n = self._n.get(name, 0)
            nz = np.flatnonzero(cur[:n] > 0)
            self.days.setdefault(name, {})[self._day] = _Day(nz.astype(np.int64),
                                                             cur[nz].copy(), n)
            cur[:] = 0
        self._n = {}
        self._day = -1  # flushing twice, or at the end of a run, writes nothing more

    def nbytes(self) -> int:
        return sum(d.slots.nbytes + d.values.nbytes for per in self.days.values()
                   for d in per.values())


def average_precision(scores: F64, labels: npt.NDArray[np.bool_],
                      weights: F64 | None = None) -> tuple[float | None, F64, F64]:
    """Step-wise average precision with tied scores taken together (so a constant score gets
    exactly the prevalence); returns (AP, recall, precision) at each distinct threshold."""
    w = np.ones(len(scores)) if weights is None else np.asarray(weights, np.float64)
    order = np.argsort(-scores, kind="stable")
    s, y, w = scores[order], labels[order], w[order]
    tp, fp = np.cumsum(w * y), np.cumsum(w * ~y)
    ends = np.r_[np.flatnonzero(s[1:] != s[:-1]), len(s) - 1] if len(s) else np.zeros(0, int)
    tp, fp = tp[ends], fp[ends]
    if len(tp) == 0 or tp[-1] <= 0:
        return None, np.zeros(0), np.zeros(0)
    precision = tp / np.maximum(tp + fp, 1e-300)
    recall = tp / tp[-1]
    ap = float(np.sum(np.diff(np.r_[0.0, recall]) * precision))
    return ap, recall, precision


@dataclass(slots=True)
class Samples:
    """Positive samples one by one (with their failure's mode and precursor flag) and the
    negatives as nonzero scores plus a count of zero-score ones."""

    pos_scores: list[float] = field(default_factory=list)
    pos_modes: list[str] = field(default_factory=list)
    pos_precursor: list[bool] = field(default_factory=list)
    neg_scores: list[F32] = field(default_factory=list)
    neg_zero: int = 0

    def extend(self, other: Samples) -> None:
        """Pool another run's samples (several seeds give one curve)."""
        self.pos_scores += other.pos_scores
        self.pos_modes += other.pos_modes
        self.pos_precursor += other.pos_precursor
        self.neg_scores += other.neg_scores
        self.neg_zero += other.neg_zero

    def ap(self, mode: str | None = None, precursor_only: bool = False
           ) -> tuple[float | None, F64, F64, float]:
        """(AP, recall, precision, prevalence) over the positives that qualify."""
        keep = [(mode is None or pm == mode) and (pp or not precursor_only)
                for pm, pp in zip(self.pos_modes, self.pos_precursor, strict=True)]
        pos = np.array([s for s, k in zip(self.pos_scores, keep, strict=True) if k])
        neg = np.concatenate(self.neg_scores) if self.neg_scores else np.zeros(0, np.float32)
        scores = np.concatenate([pos, neg.astype(np.float64), [0.0]])
        labels = np.r_[np.ones(len(pos), bool), np.zeros(len(neg) + 1, bool)]
        weights = np.r_[np.ones(len(pos) + len(neg)), [float(self.neg_zero)]]
        total = len(pos) + len(neg) + self.neg_zero
        ap, rec, prec = average_precision(scores, labels, weights)
        return ap, rec, prec, (len(pos) / total if total else 0.0)


def build_samples(rec: DailyMax, keys: Mapping[str, Sequence[str]], gpu_of_link: Sequence[int],
                  failures: Sequence[Failure], horizon_s: float = DAY, grace_s: float = DAY,
                  ) -> Samples:
    """Pool (entity, day) samples of the GPU, NVLink and IB-port families. `keys[family]` maps
    slot -> entity key; `gpu_of_link[link slot]` is the GPU slot owning the link."""
    out = Samples()
    gpu_of = np.asarray(gpu_of_link, dtype=np.int64)
    for fam, scope in FAMILIES.items():
        slot_of = {k: i for i, k in enumerate(keys.get(fam, ()))}
        pos, skip = _special_days(rec.start, [f for f in failures if f.scope is scope], slot_of,
                                  horizon_s, grace_s)
        if fam == "nvlink":  # a link's risk before its GPU fails is a hit there, not a miss here
            _skip_links_of_failed_gpus(skip, rec.start, failures, keys, gpu_of, horizon_s,
                                       grace_s)
        for d, day in sorted(rec.days.get(fam, {}).items()):
            slots, values = day.slots, day.values
            links = rec.days.get("nvlink", {}).get(d) if fam == "gpu" else None
            if links is not None:
                slots, values = _max_by_slot(np.r_[slots, gpu_of[links.slots]],
                                             np.r_[values, links.values])
            special = {s for s in skip.get(d, set()) | set(pos.get(d, {})) if s < day.n}
            drop = np.isin(slots, np.fromiter(special, np.int64, len(special)))
            out.neg_scores.append(values[~drop])
            out.neg_zero += day.n - len(special) - int(np.count_nonzero(~drop))
            score = dict(zip(slots.tolist(), values.tolist(), strict=True))
            for s, f in pos.get(d, {}).items():
                if s < day.n and s not in skip.get(d, set()):
                    out.pos_scores.append(score.get(s, 0.0))
                    out.pos_modes.append(f.mode)
                    out.pos_precursor.append(f.precursor)
    return out


def _special_days(start: float, failures: Sequence[Failure], slot_of: Mapping[str, int],
                  horizon_s: float, grace_s: float
                  ) -> tuple[dict[int, dict[int, Failure]], dict[int, set[int]]]:
    """Per day: positive slots (a failure within the horizon after the day ends, the earliest
    failure wins) and skipped slots (the day holds a failure or its grace)."""
    pos: dict[int, dict[int, Failure]] = {}
    skip: dict[int, set[int]] = {}
    for f in sorted(failures, key=lambda x: x.time):
        s = slot_of.get(f.entity)
        if s is None:
            continue
        first = int((f.time - start) // DAY)  # the day that holds the failure
        last = int((max(f.time + grace_s, f.repaired or f.time) - start) // DAY)
        for d in range(first, last + 1):
            skip.setdefault(d, set()).add(s)
        # Day d ends at start + (d + 1) DAY; it is positive when f.time - horizon < that <= f.time.
        for d in range(max(int((f.time - horizon_s - start) // DAY), 0), first):
            pos.setdefault(d, {}).setdefault(s, f)
    return pos, skip


def _skip_links_of_failed_gpus(skip: dict[int, set[int]], start: float,
                               failures: Sequence[Failure], keys: Mapping[str, Sequence[str]],
                               gpu_of: I64, horizon_s: float, grace_s: float) -> None:
    gpu_slot = {k: i for i, k in enumerate(keys.get("gpu", ()))}
    pos, gskip = _special_days(start, [f for f in failures if f.scope is Scope.GPU], gpu_slot,
                               horizon_s, grace_s)
    links: dict[int, list[int]] = {}
    for link, g in enumerate(gpu_of.tolist()):
        links.setdefault(g, []).append(link)
    for day, slots in [(d, set(p)) for d, p in pos.items()] + list(gskip.items()):
        for g in slots:
            skip.setdefault(day, set()).update(links.get(g, ()))


def _max_by_slot(slots: I64, values: F32) -> tuple[I64, F32]:
    if len(slots) == 0:
        return slots, values
    order = np.argsort(slots, kind="stable")
    s, v = slots[order], values[order]
    starts = np.r_[0, np.flatnonzero(s[1:] != s[:-1]) + 1]
    return s[starts], np.maximum.reduceat(v, starts).astype(np.float32)


def pr_auc_table(samples: Samples, modes: Sequence[str]) -> dict[str, Any]:
    ap_pre, _, _, prev_pre = samples.ap(precursor_only=True)
    ap_obs, _, _, prev_obs = samples.ap()
    per_mode = {}
    for m in modes:
        ap, _, _, prev = samples.ap(mode=m)
        per_mode[m] = {"pr_auc": ap, "prevalence": prev}
    return {"precursor": {"pr_auc": ap_pre, "prevalence": prev_pre},
            "observable": {"pr_auc": ap_obs, "prevalence": prev_obs}, "by_mode": per_mode}
