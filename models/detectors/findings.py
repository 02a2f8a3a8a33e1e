"""Findings: the vectorised output of one rule over every entity of a scope, and the
explanation an operator reads for the few entities where a rule fired."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol, TypeVar, runtime_checkable

import numpy as np
import numpy.typing as npt

from collectors.catalog import Scope
from models.detectors.growth import growth_per_day, when_text
from models.detectors.view import FleetView

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
T = TypeVar("T", bound=np.generic)


@dataclass(slots=True)
class Finding:
    """rule fired where risk > 0; value is the signal compared with threshold."""

    rule: str
    scope: Scope
    risk: F32
    value: F64
    threshold: float
    signal: str  # what value measures, e.g. "correctable ECC errors in the last hour"
    hard: bool = False  # a vendor-fact rule: at risk 1 it escalates at once, no for-duration
    # "model" for a learned predictor's probabilities: fusion treats them as one opinion
    # beside the rules rather than as one more independent rule (they see the same evidence).
    source: str = "rule"
    # Per-slot wording where one sentence does not fit every entity (a model's explanation
    # names what drove each entity's score); slots not in it read `signal`.
    details: dict[int, str] | None = None
    # When, not only whether (models/detectors/growth.py): per slot, the hours until the
    # failure a growth rule announces and the growth it extrapolated (e-folds per hour), NaN
    # where none; `mode` names the failure (a simulator/model mode such as "M1_hbm").
    ttf_h: F64 | None = None
    growth: F64 | None = None
    mode: str | None = None
    # The evidence this finding is a reading of (fusion.py): rules that read one error stream
    # or share one growth fit name the same key, and fusion counts them once (keys in
    # models/detectors/evidence.py). Left empty, the rule is its own evidence.
    evidence: str = ""
    # A model's finding for a mode its window is not calibrated for (models/predictor/
    # interval.py): fusion lets it add watch, never lift a level the rules set (issue 34).
    advisory: bool = False

    def signal_of(self, slot: int) -> str:
        text = self.signal if self.details is None else self.details.get(slot, self.signal)
        ttf = self.ttf_at(slot)
        if ttf is None:
            return text
        rate = math.nan if self.growth is None else float(self.growth[slot])
        grow = f"growing {growth_per_day(rate):.0f} %/day: " if math.isfinite(rate) else ""
        return f"{text}; {grow}{when_text(ttf, self.mode)}"

    def ttf_at(self, slot: int) -> float | None:
        """The time-to-failure estimate at a slot where the rule fired, else None."""
        if self.ttf_h is None or slot >= len(self.ttf_h) or not self.risk[slot] > 0:
            return None
        t = float(self.ttf_h[slot])
        return t if math.isfinite(t) else None

    def __post_init__(self) -> None:
        if not self.evidence:
            self.evidence = self.rule
        for name, a in (("value", self.value), ("ttf_h", self.ttf_h), ("growth", self.growth)):
            if a is not None and a.shape != self.risk.shape:
                raise ValueError(f"{self.rule}: risk and {name} shapes differ")

    def fitted(self, n: int) -> Finding:
        """This finding over exactly n entity slots. The entity set changes between ticks
        (links arrive after their GPU, GPUs are added), so a finding computed or cached for
        an earlier count says nothing of the slots that joined since (risk 0, value NaN)
        and the slots beyond n no longer exist."""
        have = len(self.risk)
        if have == n:
            return self
        risk = np.zeros(n, np.float32)
        value = np.full(n, np.nan, np.float64)
        k = min(have, n)
        risk[:k], value[:k] = self.risk[:k], self.value[:k]
        details = None if self.details is None else \
            {i: d for i, d in self.details.items() if i < n}
        return Finding(self.rule, self.scope, risk, value, self.threshold, self.signal,
                       self.hard, self.source, details, _fit(self.ttf_h, n),
                       _fit(self.growth, n), self.mode, self.evidence, self.advisory)

    def kept(self, keep: npt.NDArray[np.intp]) -> Finding:
        """This finding after the window store forgot entities (see Forgets)."""
        keep = keep[keep < len(self.risk)]
        new = {int(old): i for i, old in enumerate(keep.tolist())}
        details = None if self.details is None else \
            {new[i]: d for i, d in self.details.items() if i in new}
        return Finding(self.rule, self.scope, self.risk[keep], self.value[keep],
                       self.threshold, self.signal, self.hard, self.source, details,
                       None if self.ttf_h is None else self.ttf_h[keep],
                       None if self.growth is None else self.growth[keep], self.mode,
                       self.evidence, self.advisory)


def _fit(a: F64 | None, n: int) -> F64 | None:
    """A per-slot float array over exactly n slots; joined slots read NaN."""
    if a is None or len(a) == n:
        return a
    out: F64 = np.full(n, np.nan, np.float64)
    k = min(len(a), n)
    out[:k] = a[:k]
    return out


@dataclass(frozen=True, slots=True)
class Signal:
    """One line of an explanation."""

    rule: str
    signal: str
    value: float
    threshold: float
    risk: float
    hard: bool

    def as_dict(self) -> dict[str, object]:
        """JSON-safe: a value or threshold that is not a finite number becomes None."""
        def num(x: float) -> float | None:
            return x if math.isfinite(x) else None

        return {"rule": self.rule, "signal": self.signal, "value": num(self.value),
                "threshold": num(self.threshold), "risk": round(self.risk, 4), "hard": self.hard}


class Detector(Protocol):
    """One verb: look at the fleet now and say where each rule fires."""

    name: str

    def detect(self, view: FleetView, now: float) -> list[Finding]: ...


@runtime_checkable
class Forgets(Protocol):
    """A detector that keeps state per entity slot between ticks. The window store forgets
    entities silent past their longest window and renumbers the rest: slot i then holds what
    slot keep[i] held (keep ascending), and such a detector must follow, or it would judge
    one entity by another's history."""

    def forget(self, scope: Scope, keep: npt.NDArray[np.intp]) -> None: ...


def kept(a: npt.NDArray[T], keep: npt.NDArray[np.intp]) -> npt.NDArray[T]:
    """Rows of a per-slot array after forgetting; an array not yet grown to every slot stays a
    prefix of the new numbering, because keep is ascending."""
    return a[keep[keep < len(a)]]


def fired(value: F64, threshold: float, risk: float) -> F32:
    """risk where value >= threshold (NaN never fires: missing data is not evidence)."""
    with np.errstate(invalid="ignore"):
        out: F32 = np.where(value >= threshold, np.float32(risk), np.float32(0)).astype(np.float32)
    return out


def sustained(holds: npt.NDArray[np.bool_], seen: npt.NDArray[np.bool_]) -> npt.NDArray[np.bool_]:
    """Per entity, over a window [entity, step]: the condition held at every step that
    reported, reports cover at least half the window, and one of its first two steps
    reported, so the condition spans the window. A sender's cadence drifts past a step now and
    then (an agent's 5-s round against the service's 5-s steps, a 10-s Telegraf interval):
    demanding a report at every step would let such a gap hide an outage."""
    n = holds.shape[1]
    if n == 0:
        return np.zeros(holds.shape[0], bool)
    ok = np.all(holds | ~seen, axis=1)
    enough = seen.sum(axis=1) >= max(1, (n + 1) // 2)
    started = seen[:, : min(2, n)].any(axis=1)
    out: npt.NDArray[np.bool_] = ok & enough & started
    return out
