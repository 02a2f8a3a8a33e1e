"""Where the service keeps its model: a detector that is empty until an artifact is there, loads
it when it appears or changes (checked at most every `recheck_s`), and keeps the model it has
when a new artifact is refused. Without a model the service runs rules and thresholds only, and
`status` says so in words an operator reads in /readyz and the logs."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from collectors.catalog import Scope
from models.detectors.findings import Finding
from models.detectors.view import FleetView
from models.predictor.artifact import ArtifactError
from models.predictor.detector import PredictorDetector
from models.predictor.package import Predictor
from models.predictor.policy import PredictorConfig

log = logging.getLogger(__name__)
MODEL_FILE = "model.json"


@dataclass(frozen=True, slots=True)
class ModelStatus:
    loaded: bool
    path: str
    version: str
    reason: str  # why there is no model, or why the newest artifact was refused

    def as_dict(self) -> dict[str, object]:
        return {"loaded": self.loaded, "path": self.path, "version": self.version,
                "reason": self.reason}


class ModelSlot:
    name = "lstm"

    def __init__(self, path: Path | None, *, recheck_s: float = 60.0,
                 config: PredictorConfig | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.path = path
        self.recheck_s = recheck_s
        self.config = config
        self.clock = clock
        self.detector: PredictorDetector | None = None
        self._seen: float | None = None  # mtime of the artifact last tried
        self._checked = -float("inf")
        self._reason = "no model configured (detectors.model.path)" if path is None else ""
        self.refresh(force=True)

    def refresh(self, force: bool = False) -> None:
        """Load the artifact if it appeared or changed since the last look."""
        if self.path is None:
            return
        now = self.clock()
        if not force and now - self._checked < self.recheck_s:
            return
        self._checked = now
        marker = self.path / MODEL_FILE
        try:
            mtime = marker.stat().st_mtime
        except OSError:
            if self.detector is None and self._reason != "absent":
                log.warning("no model at %s: scoring with rules and thresholds only", self.path)
            self._reason = "absent"
            return
        if mtime == self._seen:
            return
        self._seen = mtime
        try:
            predictor = Predictor.load(self.path)
        except ArtifactError as exc:
            self._reason = str(exc)
            log.error("model refused: %s%s", exc, "; keeping the loaded model"
                      if self.detector is not None else "; rules and thresholds only")
            return
        self.detector = PredictorDetector(predictor, self.config)
        self._reason = ""
        log.info("model %s loaded from %s", predictor.version, self.path)

    def switch(self, path: Path | None) -> None:
        """Run the artifact at `path` instead (a promotion or rollback): loaded now; if it is
        refused, the model in hand is kept and `status` says why."""
        if path == self.path:
            return
        log.info("model path %s -> %s", self.path, path)
        self.path = path
        self._seen = None
        if path is None:
            self.detector = None
            self._reason = "no model configured (detectors.model.path)"
            return
        self.refresh(force=True)

    @property
    def status(self) -> ModelStatus:
        d = self.detector
        reason = self._reason
        if d is None and reason == "absent":
            reason = f"no model at {self.path}: rules and thresholds only"
        return ModelStatus(d is not None, str(self.path or ""),
                           d.predictor.version if d is not None else "", reason)

    def forget(self, scope: Scope, keep: npt.NDArray[np.intp]) -> None:
        if self.detector is not None:
            self.detector.forget(scope, keep)

    def detect(self, view: FleetView, now: float) -> list[Finding]:
        self.refresh()
        return self.detector.detect(view, now) if self.detector is not None else []
