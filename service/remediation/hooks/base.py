"""The remediation hook protocol: what moves jobs off a node in one scheduler (Slurm,
Kubernetes) or hands that to someone else (a webhook, a command). The controller decides
whether and when; a hook only acts, and reports every step it took so the audit log can show
exactly what was called. Hooks never raise for a failed step; they say whether to retry."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

# Every drain reason, label and annotation we write starts with this, so that we only ever
# undo our own (an operator's drain is never resumed by us).
PROVENANCE = "gpuhealth"


@dataclass(frozen=True, slots=True)
class ActionRequest:
    action_id: str
    node: str
    alert_id: int
    fingerprint: str
    summary: str  # one line: why (the alert's top signal)
    requested_at: float


@dataclass(frozen=True, slots=True)
class Step:
    """One call a hook made (or, in a plan, would make): an argv list or an API request."""

    call: str  # e.g. "scontrol update NodeName=n1 State=DRAIN Reason=..." or "POST /api/v1/..."
    ok: bool = True
    detail: str = ""
    duration_s: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"call": self.call, "ok": self.ok, "detail": self.detail,
                "duration_s": round(self.duration_s, 4)}


@dataclass(frozen=True, slots=True)
class HookResult:
    ok: bool
    retry: bool = False  # a transient failure (timeout, 429, 5xx): the controller may retry
    detail: str = ""
    steps: tuple[Step, ...] = ()
    moved: tuple[str, ...] = ()  # jobs/pods requeued or evicted
    left: tuple[str, ...] = ()  # jobs/pods that could not be moved, with why, for a human

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "retry": self.retry, "detail": self.detail,
                "steps": [s.as_dict() for s in self.steps], "moved": list(self.moved),
                "left": list(self.left)}


@dataclass(frozen=True, slots=True)
class NodeState:
    """What a hook sees of a node, for reconciling an action a restart interrupted."""

    node: str
    exists: bool
    drained_by_us: bool  # cordoned/drained with our provenance
    drained_by_other: bool = False  # drained by someone else (never touched by us)
    detail: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


class Hook(Protocol):
    name: str

    def plan(self, req: ActionRequest) -> list[Step]:
        """The calls `execute` would make, for dry runs and approvals (no side effect)."""
        ...

    def execute(self, req: ActionRequest) -> HookResult:
        """Drain the node with our provenance and move its jobs off."""
        ...

    def release(self, node: str) -> HookResult:
        """Undo our drain (resume/uncordon), only when the drain is ours."""
        ...

    def inspect(self, node: str) -> NodeState:
        """The node's current state as the scheduler reports it."""
        ...
