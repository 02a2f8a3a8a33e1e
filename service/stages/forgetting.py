"""Forgetting silent entities: the window store's owner drops entities silent past their
longest window (at most every `every_s`: a vectorised check), and every per-entity state of a
pipeline (the alert machine's levels, the detectors', the shadow model's) follows each
forgetting of the store by generation, whoever made it. An open alert of a forgotten entity
resolves: it has not been seen for days; one handed to another shard stays open for its new
owner."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt

from collectors.catalog import Scope
from service.stages.alert_machine import AlertMachine, Transition
from service.stages.fleet_alerts import FleetAlerts
from service.stages.windows import WindowStore

log = logging.getLogger(__name__)
FORGET_EVERY_S = 60.0  # how often silent entities are looked for


class Follows(Protocol):
    """Per-slot state that follows the store's forgetting (service.stages.windows.Compaction)."""

    def forget(self, scope: Scope, keep: npt.NDArray[np.intp]) -> None: ...


class Forgetting:
    def __init__(self, store: WindowStore, machine: AlertMachine, fleet: FleetAlerts,
                 followers: Sequence[Follows], *, owns_store: bool,
                 every_s: float = FORGET_EVERY_S,
                 nodes_gone: Callable[[set[str]], None] | None = None) -> None:
        """`nodes_gone`: told of the nodes a forgetting left without any entity (their GPUs'
        boards are forgotten in memory)."""
        self.store, self.machine, self.fleet = store, machine, fleet
        self.nodes_gone = nodes_gone
        self.followers, self.owns_store, self.every_s = list(followers), owns_store, every_s
        self.generation = store.generation  # of the store's forgetting this has followed
        self._at = -np.inf

    def forget(self, now: float) -> bool:
        """The store's owner: forget silent entities when due; whether it was due."""
        if not self.owns_store or now - self._at < self.every_s:
            return False
        self._at = now
        done = self.store.forget(now)
        if done is not None:
            self.fleet.history.forget(set(self.store.registry.nodes))
            if done.nodes_dropped and self.nodes_gone is not None:
                self.nodes_gone(set(done.nodes_dropped))
            log.info("forgot %s; nodes without entities left: %d",
                     ", ".join(f"{len(d)} {sc}" for sc, d in done.dropped.items() if d),
                     len(done.nodes_dropped))
        return True

    def follow(self, now: float) -> list[Transition]:
        """Follow every forgetting of the store since the last call: the resolutions of the
        open levels of entities forgotten for their silence."""
        out: list[Transition] = []
        pending = self.store.compactions_since(self.generation)
        if pending and pending[0].generation != self.generation + 1:
            raise RuntimeError(f"missed the store's forgetting {self.generation + 1}: this "
                               "pipeline's per-entity state no longer matches its slots")
        for c in pending:
            for scope, keep in c.keep.items():
                level = self.machine.level(scope)
                gone = np.ones(len(level), bool)
                gone[keep[keep < len(level)]] = False
                for e, old in zip(c.dropped[scope], level[gone].tolist(), strict=False):
                    if old > 0 and not c.handed:  # handed over: the new owner continues it
                        out.append(Transition(scope, -1, e.key, e.node, int(old), 0, now, 0.0))
                self.machine.forget(scope, keep)
                for f in self.followers:
                    f.forget(scope, keep)
            self.generation = c.generation
        return out
