"""The running service follows the model registry (service.learning.model_registry): the active
slot switches on a promotion or rollback, and a challenger put in shadow gets its shadow run
(service.learning.shadow), both within `check_s` of the change, whether the CLI or the API made
it. A challenger that cannot be loaded is reported, never run half-way."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from collectors.catalog import Scope
from models.detectors.findings import Detector
from service.learning.model_registry import ModelRegistry
from service.learning.shadow import Shadow
from service.stages.alert_machine import AlertPolicy
from service.stages.scoring import StoreView
from service.tick import TickResult

if TYPE_CHECKING:
    from models.predictor.policy import PredictorConfig
    from models.predictor.slot import ModelSlot

log = logging.getLogger(__name__)


class ModelRoles:
    def __init__(self, registry: ModelRegistry, slot: ModelSlot | None,
                 configured: Path | None, config: PredictorConfig | None,
                 policy: AlertPolicy, stale_after_s: float, check_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.registry = registry
        self.slot = slot
        self.configured = configured  # the settings' model: active until a promotion
        self.config = config
        self.policy = policy
        self.stale_after_s = stale_after_s
        self.check_s = check_s
        self.clock = clock
        self.shadow: Shadow | None = None
        self.challenger_error = ""  # why the challenger in the registry is not running
        self._checked = -float("inf")
        self._failed_entry: int | None = None

    def check(self, force: bool = False) -> None:
        now = self.clock()
        if not force and now - self._checked < self.check_s:
            return
        self._checked = now
        active = self.registry.active()
        want = Path(active.path) if active is not None else self.configured
        if self.slot is not None and want != self.slot.path:
            self.slot.switch(want)
        ch = self.registry.challenger()
        run = self.registry.run()
        if ch is None or run is None or run.outcome != "running":
            if self.shadow is not None:
                log.info("shadow run %d ended", self.shadow.run_id)
            self.shadow = None
            self.challenger_error = ""
            return
        if self.shadow is not None and self.shadow.run_id == run.id:
            return
        if self._failed_entry == ch.id:
            return
        try:
            detector = _load(Path(ch.path), self.config)
        except Exception as exc:  # the artifact is refused: say so, keep scoring
            self._failed_entry = ch.id
            self.challenger_error = f"challenger {ch.version} at {ch.path} refused: {exc}"
            log.error("%s", self.challenger_error)
            self.shadow = None
            return
        self.challenger_error = ""
        self.shadow = Shadow(self.registry, run.id, detector, self.policy, self.stale_after_s)
        log.info("challenger %s in shadow (run %d)", ch.version, run.id)

    def step(self, tick: TickResult, view: StoreView) -> None:
        self.check()
        if self.shadow is not None:
            self.shadow.step(tick, view)

    def forget(self, scope: Scope, keep: np.ndarray) -> None:
        if self.shadow is not None:
            self.shadow.forget(scope, keep)

    def active(self) -> tuple[str, str]:
        """(version, path) of the model the service scores with now."""
        if self.slot is None:
            return ("", "")
        st = self.slot.status
        return (st.version, st.path)


def _load(path: Path, config: PredictorConfig | None) -> Detector:
    from models.predictor.detector import PredictorDetector
    from models.predictor.package import Predictor

    return PredictorDetector(Predictor.load(path), config)
