from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from service.remediation.actions import Action, ActionStore
from service.remediation.config import RemediationSettings
from service.remediation.controller import MigrationRequest, RemediationController
from tests.remediation_controller.scheduler_model import (
    FreshTelemetry,
    SchedulerModel,
    SchedulerModelHook,
)

T0 = 1_700_000_000.0


def migration(node: str = "n1", alert_id: int = 1, at: float = T0,
              fingerprint: str = "") -> MigrationRequest:
    return MigrationRequest(node=node, alert_id=alert_id, fingerprint=fingerprint or f"fp-{node}",
                            level=3, risk=0.95, summary=f"{node}: double-bit ECC", at=at)


@dataclass
class Rig:
    """One controller over a scheduler model; `restart()` builds a new one on the same db."""

    path: str
    settings: RemediationSettings
    model: SchedulerModel
    fleet: list[int]
    hook: SchedulerModelHook = field(init=False)
    recheck: FreshTelemetry = field(init=False)
    store: ActionStore = field(init=False)
    ctl: RemediationController = field(init=False)
    retired: list[RemediationController] = field(default_factory=list)
    hooks: list[SchedulerModelHook] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._build()

    def _build(self) -> None:
        self.hook = SchedulerModelHook(self.model)
        self.hooks.append(self.hook)
        self.recheck = FreshTelemetry()
        self.store = ActionStore(self.path)
        self.ctl = RemediationController(self.store, self.hook, self.settings, self.recheck,
                                         lambda: self.fleet[0])

    def restart(self) -> SchedulerModelHook:
        """A new process: new store connection, hook and controller; the old hook's threads
        are left hanging as a killed process would leave the scheduler. Returns the old hook."""
        old = self.hook
        self.retired.append(self.ctl)
        self._build()
        return old

    def run(self, now: float) -> None:
        """A tick, then let the hook calls finish and collect them."""
        self.ctl.step(now)
        assert self.ctl.wait(5)
        self.ctl.step(now)

    def state(self, a: Action | None) -> str:
        assert a is not None
        got = self.store.get(a.id)
        assert got is not None
        return str(got.state)

    def events(self, a: Action) -> list[str]:
        return [e.event for e in self.store.audit(action_id=a.id)]


@pytest.fixture(params=["sqlite", "postgres"])
def make_rig(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[..., Rig]]:
    """Every controller test on both shared-state backends: the SQLite file (or memory), and
    a fresh schema per rig on the test PostgreSQL server."""
    rigs: list[Rig] = []
    server = (request.getfixturevalue("postgres_server") if request.param == "postgres"
              else None)

    def make(*, file: bool = False, nodes: int = 20, fleet: int = 1000,
             **settings: Any) -> Rig:
        """A rig in auto mode (unless `mode` says otherwise) with a fleet large enough that
        only breaker_max_nodes binds."""
        if server is not None:
            path = server.fresh_schema()
        else:
            path = str(tmp_path / f"actions{len(rigs)}.db") if file else ":memory:"
        rig = Rig(path, RemediationSettings(**{"mode": "auto", **settings}),
                  SchedulerModel(nodes), [fleet])
        rigs.append(rig)
        return rig

    yield make
    for rig in rigs:  # let hung hook threads go, then stop the workers
        for ctl in (*rig.retired, rig.ctl):
            ctl.close()
        for hook in rig.hooks:
            if hook.gate is not None:
                hook.gate.set()
