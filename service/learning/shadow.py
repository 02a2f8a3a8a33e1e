"""A challenger model in shadow: it reads the same window store as the active model, every tick,
and its risk goes through alert machines of its own, so what it would have alerted is on record
without a message sent or a node drained.

Four streams of level crossings are kept per shadow run (service.learning.model_registry), so
both models are judged the same way against the labels that arrive (service.learning.scoreboard):

- `active:fused`: the service's own fused risk (rules and the active model);
- `challenger:fused`: what the service would have alerted with the challenger instead;
- `active:model` and `challenger:model`: each model alone, as the evaluation's `model` set.

Every stream has its own alert machine, started with the run: the service's real alerts began
before the run, so entities already alerting would cross no level in them, while a fresh machine
would raise them all at once; judging both models from the same fresh start keeps them equal.
"""

from __future__ import annotations

import dataclasses
import logging

import numpy as np

from collectors.catalog import Scope
from models.detectors.findings import Detector, Finding, Forgets, Signal
from models.detectors.fusion import fuse
from service.learning.model_registry import ModelRegistry
from service.stages.alert_machine import AlertMachine, AlertPolicy, Transition, step_inputs
from service.stages.scoring import SCOPES, StoreView
from service.tick import TickResult

log = logging.getLogger(__name__)
STREAMS = ("active:fused", "active:model", "challenger:fused", "challenger:model")
MAX_GAP_S = 60.0  # node-time counts between ticks at most this (or 3 steps) apart: a stop
# is no exposure


class Shadow:
    def __init__(self, registry: ModelRegistry, run_id: int, challenger: Detector,
                 policy: AlertPolicy, stale_after_s: float) -> None:
        self.registry = registry
        self.run_id = run_id
        self.challenger = challenger
        self.stale_after_s = stale_after_s
        self.machines = {s: AlertMachine(policy) for s in STREAMS}
        self._last: float | None = None

    def forget(self, scope: Scope, keep: np.ndarray) -> None:
        for m in self.machines.values():
            m.forget(scope, keep)
        if isinstance(self.challenger, Forgets):
            self.challenger.forget(scope, keep)

    def step(self, tick: TickResult, view: StoreView) -> None:
        now = tick.at
        if self._last is None:
            self.registry.restart_run(self.run_id, now)
        try:
            theirs = self.challenger.detect(view, now)
        except Exception:  # a broken challenger must not cost the service its tick
            log.exception("the challenger failed; its shadow tick is skipped")
            theirs = []
        scopes = tick.risk.scopes
        sizes = {s: len(scopes[s].risk) for s in SCOPES}
        all_found = [f for s in SCOPES for f in scopes[s].findings]
        rules = [f for f in all_found if f.source != "model"]
        # The shadow judges the models' opinions: an advisory one (fusion counts it for nothing
        # where its window is not calibrated) counts here, for the active model and the
        # challenger alike, or every stream with a model in it would read as the rules.
        ours = [_counted(f) for f in all_found if f.source == "model"]
        theirs = [_counted(f) for f in theirs]
        rows: list[tuple[str, float, str, str, str, int, int, str]] = []
        for stream, found in (("active:fused", rules + ours), ("active:model", ours),
                              ("challenger:model", theirs), ("challenger:fused", rules + theirs)):
            rows += self._stream(stream, found, sizes, view, now)
        gap = max(MAX_GAP_S, 3 * view.store.config.step_s)
        dt = 0.0 if self._last is None else min(max(now - self._last, 0.0), gap)
        self._last = now
        self.registry.add_alarms(self.run_id, rows, dt * len(tick.risk.node_names), now)

    def _stream(self, stream: str, found: list[Finding], sizes: dict[Scope, int],
                view: StoreView, now: float) -> list[tuple[str, float, str, str, str, int, int,
                                                           str]]:
        fused = fuse(found, sizes)
        m = self.machines[stream]
        out = []
        for scope in SCOPES:
            sr = fused[scope]
            sw = view.store[scope]
            n = len(sr.risk)
            seen, conf = step_inputs(sr, sw.last_ts)
            trans: list[Transition] = m.step(scope, sr.risk, sr.hard, now, sw.entities[:n],
                                             last_seen=seen, confidence=conf,
                                             stale_after_s=self.stale_after_s)
            out += [(stream, t.at, t.entity, str(t.scope), t.node, t.new, t.old,
                     _rule(sr.explain(t.slot)) if t.slot >= 0 else "")
                    for t in trans if t.new > t.old]
        return out


def _counted(f: Finding) -> Finding:
    return dataclasses.replace(f, advisory=False) if f.advisory else f


def _rule(signals: list[Signal]) -> str:
    return signals[0].rule if signals else ""
