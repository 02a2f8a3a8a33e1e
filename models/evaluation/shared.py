"""One model computation per hour for every detector set that holds the same model.

The lstm and fused sets of an evaluation each hold a PredictorDetector on the same artifact,
ticked at the same times on the same shared window store: two identical hourly forwards. A
SharedModel owns one detector and hands each set a ModelHandle that delegates to it; the
detector's own per-hour cache (keyed by the newest finished hour and the entity count) makes
every call after the first in an hour a lookup.

State that follows the window store's forgetting is the one thing that must not be shared
naively: every pipeline tells its detectors about each forgetting, and one detector told twice
would renumber its slots twice (and hold entities to the wrong past hours). Each handle counts
the forgettings it was told per scope; the shared detector applies a forgetting only when a
handle is the first to report it. All pipelines follow the same store, so they report the same
forgettings in the same order.

Each finished hour's calibrated probabilities (the detector's `latest`) are passed to the
listeners once, whichever handle's call computed them (models/evaluation/reliability.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from collectors.catalog import Scope
from collectors.frames import Entity
from models.detectors.findings import Finding
from models.detectors.view import FleetView

F32 = npt.NDArray[np.float32]
# (scope, probabilities [entity slot, head], head names, the slots' entities, data time)
HourListener = Callable[[Scope, F32, list[str], Sequence[Entity], float], None]


class ModelDetector(Protocol):
    """What SharedModel needs of the model detector (models/predictor/detector.py)."""

    name: str
    latest: dict[Scope, tuple[F32, list[str]]]

    def detect(self, view: FleetView, now: float) -> list[Finding]: ...

    def forget(self, scope: Scope, keep: npt.NDArray[np.intp]) -> None: ...


class SharedModel:
    """One model detector behind any number of handles."""

    def __init__(self, inner: ModelDetector) -> None:
        self.inner = inner
        self.applied: dict[Scope, int] = {}  # forgettings applied per scope
        self.listeners: list[HourListener] = []
        self.computed = 0  # scope-hours the model was run for (for tests and timing)

    def handle(self) -> ModelHandle:
        return ModelHandle(self)

    def detect(self, view: FleetView, now: float) -> list[Finding]:
        before = {sc: p for sc, (p, _) in self.inner.latest.items()}
        found = self.inner.detect(view, now)
        for scope, (p, heads) in self.inner.latest.items():
            if before.get(scope) is not p:  # a new hour was scored in this call
                self.computed += 1
                if self.listeners:
                    ents = view.scope(scope).entities[: len(p)]
                    for fn in self.listeners:
                        fn(scope, p, heads, ents, now)
        return found

    def forget(self, scope: Scope, keep: npt.NDArray[np.intp], told: int) -> None:
        """`told`: how many forgettings of `scope` the calling handle has now been told."""
        if told > self.applied.get(scope, 0):
            self.inner.forget(scope, keep)
            self.applied[scope] = told


class ModelHandle:
    """A detector for one pipeline that delegates to the shared model."""

    def __init__(self, shared: SharedModel) -> None:
        self.shared = shared
        self.name = shared.inner.name
        self._told: dict[Scope, int] = {}

    def detect(self, view: FleetView, now: float) -> list[Finding]:
        return self.shared.detect(view, now)

    def forget(self, scope: Scope, keep: npt.NDArray[np.intp]) -> None:
        self._told[scope] = self._told.get(scope, 0) + 1
        self.shared.forget(scope, keep, self._told[scope])

    def __getattr__(self, attr: str) -> Any:
        # Anything else (latest, timing, probabilities, config) reads the shared detector.
        return getattr(self.shared.inner, attr)
