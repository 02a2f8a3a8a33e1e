"""A family of dynamic rules (one hardware part: device memory, temperatures, an IB port, an
NVLink) and the facts each of its rules declares in one place: the finding's name and scope,
the catalog metrics it reads, the evidence it is a reading of (models/detectors/evidence.py),
the failure mode it is a precursor of, and the sentence an operator reads."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import numpy as np
import numpy.typing as npt

from collectors.catalog import Scope
from collectors.labels import FailureMode
from models.detectors.findings import F64, Finding
from models.detectors.view import FleetView, ScopeView, tier_version

B = npt.NDArray[np.bool_]
T = TypeVar("T")
# Whether a rule's last findings flag each of n slots: baselines do not learn from those.
Flagged = Callable[[str, int], B]


@dataclass(frozen=True, slots=True)
class Rule:
    name: str
    scope: Scope
    metrics: tuple[str, ...]  # the catalog metrics it reads (its time included)
    evidence: str
    signal: str  # str.format template; its fields are what `finding` is given
    mode: FailureMode | None = None  # the failure a fired rule announces, with its time

    def finding(self, risk: npt.NDArray[np.float32], value: F64, threshold: float, *,
                ttf_h: F64 | None = None, growth: F64 | None = None,
                **text: Any) -> Finding:
        return Finding(self.name, self.scope, risk, value, threshold, self.signal.format(**text),
                       ttf_h=ttf_h, growth=growth,
                       mode=None if self.mode is None else self.mode.value,
                       evidence=self.evidence)


class Family(Protocol):
    """The rules of one part. `DynamicThresholds` calls `every_tick` on each tick,
    `every_minute` once per minute of data time (its findings are reused in between), `learn`
    once per hour and `forget` when the window store renumbers a scope's slots."""

    rules: tuple[Rule, ...]

    def every_tick(self, view: FleetView, now: float) -> list[Finding]: ...

    def every_minute(self, view: FleetView) -> list[Finding]: ...

    def learn(self, view: FleetView, flagged: Flagged) -> None: ...

    def forget(self, scope: Scope, keep: npt.NDArray[np.intp]) -> None: ...


class Memo:
    """What was made of hour-resolution windows, kept until the store's tier moves: at 180,000
    NVLink links their 48-hour growth fits were most of a minute's work. One per detector, shared
    by its families (keys are theirs to keep apart) and cleared when slots are renumbered."""

    def __init__(self) -> None:
        self.held: dict[Hashable, tuple[Hashable, Any]] = {}

    def get(self, key: Hashable, view: ScopeView, seconds: float, make: Callable[[], T]) -> T:
        """make(), or what it gave while the windows of the last `seconds` read the same
        (a copy: findings hold these arrays). Made anew where the view cannot tell."""
        stamp = tier_version(view, seconds)
        held = self.held.get(key)
        if stamp is None or held is None or held[0] != stamp:
            value = make()
            if stamp is not None:
                self.held[key] = (stamp, value)
            held = (stamp, value)
        return _copied(held[1])

    def clear(self) -> None:
        self.held.clear()


def _copied(value: T) -> T:
    """A copy of an array, or of a tuple's arrays."""
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, tuple):
        return tuple(_copied(v) for v in value)  # type: ignore[return-value]
    return value
