"""Settings of the remediation controller (the `remediation` section of the settings tree).
Safe by default: migration is dry-run, resuming a node we drained needs a human's approval,
and a blast-radius breaker after NVIDIA NVSentinel's fault-quarantine circuit breaker
(github.com/NVIDIA/NVSentinel, docs/configuration/fault-quarantine.md: 50 % of nodes in 5 min,
and `maxNodes`), tightened to 10 % / 5 nodes / 30 min, guards whatever an operator switches on."""

from __future__ import annotations

import fnmatch
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

Mode = Literal["off", "dry_run", "approve", "auto"]
MODES: tuple[Mode, ...] = ("off", "dry_run", "approve", "auto")


class RemediationSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # off: only an audit line; dry_run: store the hook's plan; approve: wait for a human;
    # auto: act as soon as the guards pass.
    mode: Mode = "dry_run"
    release_mode: Mode = "approve"  # resuming nodes we drained
    hook: str = Field(default="slurm", min_length=1)
    hook_config: dict[str, Any] = Field(default_factory=dict)  # validated by the hook registry

    # Blast radius: refuse (and stay tripped) when acting on one more node would exceed either
    # bound within the sliding window.
    breaker_max_fraction: float = Field(default=0.10, gt=0, le=1)
    breaker_max_nodes: int = Field(default=5, ge=1)
    breaker_window_s: float = Field(default=1800.0, gt=0)
    # Nodes the operator says the fleet has (0: not declared). The breaker's and the storm's
    # fleet is exactly this, a ceiling as well as a floor (names from the wire cannot dilute
    # a fraction); undeclared, the nodes with a history reporting now (notify.storm.history_s).
    fleet_size: int = Field(default=0, ge=0)

    max_concurrent: int = Field(default=2, ge=1)  # executions in flight, cluster-wide
    # A remediation that regenerates its own fault loops (NVSentinel #1543): cap it.
    max_attempts_per_node: int = Field(default=2, ge=1)
    attempt_window_s: float = Field(default=86400.0, gt=0)

    event_ttl_s: float = Field(default=300.0, gt=0)  # never act late on a stale event (#450)
    approval_ttl_s: float = Field(default=3600.0, gt=0)
    action_timeout_s: float = Field(default=900.0, gt=0)  # no action "in progress" forever
    retry_backoff_s: float = Field(default=30.0, ge=0)  # doubled per retry
    max_retries: int = Field(default=3, ge=0)  # transient hook failures only

    opt_out_nodes: list[str] = Field(default_factory=list)  # fnmatch globs, e.g. "login-*"

    @field_validator("opt_out_nodes")
    @classmethod
    def _globs(cls, v: list[str]) -> list[str]:
        bad = [p for p in v if not p.strip()]
        if bad:
            raise ValueError("remediation.opt_out_nodes: empty pattern (a glob like 'gpu-0*')")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> RemediationSettings:
        if self.retry_backoff_s * (2 ** max(self.max_retries - 1, 0)) > self.action_timeout_s * 4:
            raise ValueError(
                f"remediation: retry_backoff_s={self.retry_backoff_s} doubled over "
                f"max_retries={self.max_retries} retries waits far longer than "
                f"action_timeout_s={self.action_timeout_s}; lower the backoff or the retries")
        return self

    def opted_out(self, node: str) -> str | None:
        """The opt-out pattern matching `node`, if any."""
        return next((p for p in self.opt_out_nodes if fnmatch.fnmatchcase(node, p)), None)
