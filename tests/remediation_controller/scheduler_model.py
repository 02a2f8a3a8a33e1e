"""A second implementation of the Hook protocol, over a tiny in-memory scheduler: nodes with
a drain state, a drain reason and jobs. It drains with our provenance and requeues jobs onto
healthy nodes like the Slurm hook would, and can be scripted to fail transiently, to fail for
good, to raise, or to hang on an Event (before or after draining) so tests can stop the world
mid-execution."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from service.remediation.hooks.base import (
    PROVENANCE,
    ActionRequest,
    HookResult,
    NodeState,
    Step,
)


@dataclass
class ModelNode:
    name: str
    jobs: list[str] = field(default_factory=list)
    drained: bool = False
    reason: str = ""


class SchedulerModel:
    def __init__(self, nodes: int = 20, jobs_per_node: int = 1) -> None:
        self.nodes = {f"n{i}": ModelNode(f"n{i}", [f"job{i}.{j}" for j in range(jobs_per_node)])
                      for i in range(nodes)}
        self.lock = threading.Lock()

    def drain_by_operator(self, node: str) -> None:
        self.nodes[node].drained = True
        self.nodes[node].reason = "ops: bad fan"


class SchedulerModelHook:
    name = "scheduler-model"

    def __init__(self, model: SchedulerModel) -> None:
        self.model = model
        self.calls: list[tuple[str, str]] = []  # (method, node), in call order
        self.transient_failures = 0  # the next N executions fail with retry=True
        self.raise_on_execute = False
        self.raise_on_plan = False
        self.gate: threading.Event | None = None  # execute waits on it...
        self.hang_after_drain = False  # ...after draining instead of before
        self.entered = threading.Event()  # set once execute is running

    def _call(self, method: str, node: str) -> None:
        with self.model.lock:
            self.calls.append((method, node))

    def executed(self) -> list[str]:
        return [n for m, n in self.calls if m == "execute"]

    def plan(self, req: ActionRequest) -> list[Step]:
        self._call("plan", req.node)
        if self.raise_on_plan:
            raise KeyError("partition")
        node = self.model.nodes.get(req.node)
        jobs = node.jobs if node else []
        return [Step(f"drain {req.node} reason={PROVENANCE}:{req.alert_id}"),
                Step(f"requeue {' '.join(jobs) or '(none)'}")]

    def _wait(self) -> None:
        self.entered.set()
        if self.gate is not None:
            self.gate.wait(10)

    def execute(self, req: ActionRequest) -> HookResult:
        self._call("execute", req.node)
        if self.raise_on_execute:
            raise RuntimeError("scheduler model bug")
        if self.gate is not None and not self.hang_after_drain:
            self._wait()
        if self.transient_failures > 0:
            self.transient_failures -= 1
            return HookResult(ok=False, retry=True, detail="controller busy (transient)",
                              steps=(Step(f"drain {req.node}", ok=False, detail="timeout"),))
        with self.model.lock:
            node = self.model.nodes.get(req.node)
            if node is None:
                return HookResult(ok=False, detail=f"no node {req.node}",
                                  steps=(Step(f"drain {req.node}", ok=False),))
            node.drained, node.reason = True, f"{PROVENANCE}:{req.alert_id}:{req.summary}"
            target = next(n for n in self.model.nodes.values() if not n.drained)
            moved = tuple(node.jobs)
            target.jobs.extend(node.jobs)
            node.jobs = []
        if self.gate is not None and self.hang_after_drain:
            self._wait()
        return HookResult(ok=True, detail="drained", moved=moved,
                          steps=(Step(f"drain {req.node}"), Step(f"requeue {' '.join(moved)}")))

    def release(self, node: str) -> HookResult:
        self._call("release", node)
        with self.model.lock:
            n = self.model.nodes.get(node)
            if n is None or not n.reason.startswith(PROVENANCE):
                return HookResult(ok=False, detail="not drained by us")
            n.drained, n.reason = False, ""
        return HookResult(ok=True, detail="resumed", steps=(Step(f"resume {node}"),))

    def inspect(self, node: str) -> NodeState:
        self._call("inspect", node)
        with self.model.lock:
            n = self.model.nodes.get(node)
            if n is None:
                return NodeState(node, exists=False, drained_by_us=False, detail="gone")
            ours = n.drained and n.reason.startswith(PROVENANCE)
            return NodeState(node, exists=True, drained_by_us=ours,
                             drained_by_other=n.drained and not ours, detail=n.reason)


class FreshTelemetry:
    """A Recheck: every node is still at risk unless told otherwise."""

    def __init__(self) -> None:
        self.verdicts: dict[str, str] = {}  # node -> why it is no longer actionable
        self.raises = False
        self.calls: list[str] = []

    def recheck(self, node: str, fingerprint: str, now: float) -> str | None:
        self.calls.append(node)
        if self.raises:
            raise TimeoutError("window store busy")
        return self.verdicts.get(node)
