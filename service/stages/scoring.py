"""Scoring tick: run every detector over the window store, fuse their findings into one risk
per GPU, link, port, supply, fan and node, and keep the result as the state the API and alerts
read."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from collectors.catalog import Scope
from models.detectors.findings import Detector, Forgets, Signal
from models.detectors.fusion import ScopeRisk, fuse, node_risk
from models.detectors.view import EventView, ScopeView
from service.stages.ingest import EventLog
from service.stages.windows import STORED, WindowStore

log = logging.getLogger(__name__)
# Every scope scored, stepped through the alert machine and shown: the GPU side and the node's
# chassis (its supplies, fans and its own sensors) alike.
SCOPES: tuple[Scope, ...] = STORED
MAX_CAUSES = 32  # distinct failure causes remembered per detector (each logged once)


@dataclass(slots=True)
class DetectorHealth:
    """How one detector fared: a detector that raises loses only its own findings for that
    tick; this is what /readyz and /metrics say about it."""

    name: str
    errors: int = 0  # ticks on which it raised, since start
    failing: bool = False  # it raised on the newest tick
    reason: str = ""  # the newest failure, kept after recovery for the record
    causes: set[str] = field(default_factory=set)

    def failed(self, exc: BaseException) -> None:
        self.errors += 1
        self.failing = True
        self.reason = f"{type(exc).__name__}: {exc}"[:300]
        cause = f"{type(exc).__name__}:{str(exc)[:120]}"
        if cause in self.causes:
            log.debug("detector %s failed again: %s", self.name, self.reason)
            return
        if len(self.causes) < MAX_CAUSES:
            self.causes.add(cause)
        # The first time per cause with its traceback; repeats every tick would drown the log.
        log.error("detector %s failed; its findings are left out of this tick and every tick "
                  "it fails on (rules and the other detectors still score)", self.name,
                  exc_info=exc)

    def ok(self) -> None:
        if self.failing:
            log.info("detector %s scores again", self.name)
        self.failing = False


class StoreView:
    """The FleetView detectors read: the window store's scopes plus the event log."""

    def __init__(self, store: WindowStore, events: EventLog) -> None:
        self.store = store
        self.events = events

    def scope(self, scope: Scope) -> ScopeView:
        return self.store[scope]

    def events_since(self, ts: float) -> Sequence[EventView]:
        return self.events.since(ts)


@dataclass(frozen=True, slots=True)
class EntityRisk:
    key: str
    scope: Scope
    node: str
    risk: float
    signals: list[Signal]


@dataclass(slots=True)
class RiskState:
    """Risk of every entity at one tick. Arrays are indexed by window-store slot."""

    at: float
    store: WindowStore
    scopes: dict[Scope, ScopeRisk]
    nodes: npt.NDArray[np.float32]
    node_names: list[str]
    duration_s: float = 0.0
    _index: dict[str, tuple[Scope, int]] = field(default_factory=dict)

    def entity(self, key: str) -> EntityRisk | None:
        if not self._index:
            for scope in SCOPES:
                for i, e in enumerate(self.store[scope].entities[: len(self.scopes[scope].risk)]):
                    self._index[e.key] = (scope, i)
        hit = self._index.get(key)
        if hit is None:
            return None
        scope, i = hit
        sr = self.scopes[scope]
        e = self.store[scope].entities[i]
        return EntityRisk(key, scope, e.node, float(sr.risk[i]), sr.explain(i))

    def node(self, name: str) -> float | None:
        try:
            return float(self.nodes[self.node_names.index(name)])
        except ValueError:
            return None

    def top(self, scope: Scope, threshold: float = 0.0) -> list[EntityRisk]:
        """Entities of a scope with risk above threshold, riskiest first."""
        sr = self.scopes[scope]
        idx = np.flatnonzero(sr.risk > threshold)
        idx = idx[np.argsort(-sr.risk[idx], kind="stable")]
        ents = self.store[scope].entities
        return [EntityRisk(ents[i].key, scope, ents[i].node, float(sr.risk[i]), sr.explain(int(i)))
                for i in idx]


class Scorer:
    def __init__(self, store: WindowStore, events: EventLog, detectors: list[Detector]) -> None:
        self.store = store
        self.view = StoreView(store, events)
        names = [d.name for d in detectors]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate detector names: {names}")
        self.detectors = detectors
        self.health = {d.name: DetectorHealth(d.name) for d in detectors}

    def forget(self, scope: Scope, keep: npt.NDArray[np.intp]) -> None:
        """Bring every detector's per-slot state along when the store forgets entities."""
        for d in self.detectors:
            if isinstance(d, Forgets):
                d.forget(scope, keep)

    def score(self, now: float) -> RiskState:
        t0 = time.perf_counter()
        findings = []
        for d in self.detectors:
            health = self.health[d.name]
            try:
                found = d.detect(self.view, now)
            except Exception as exc:  # one broken detector must not blind the others
                health.failed(exc)
                continue
            health.ok()
            findings.extend(found)
        sizes = {s: len(self.store[s]) for s in SCOPES}
        scopes = fuse(findings, sizes)
        reg = self.store.registry
        nodes = node_risk(scopes, {s: self.store[s].node_of for s in SCOPES}, len(reg.nodes))
        return RiskState(now, self.store, scopes, nodes, list(reg.nodes),
                         duration_s=time.perf_counter() - t0)
