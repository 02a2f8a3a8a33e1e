"""Where a diagnostic command runs: the protocol every site implements, with its one verb, and
what a run leaves behind. A site never runs a test on a node with a user's job on it: it says
so instead (`Ran.refused`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

from service.remediation.hooks.base import Step


class Purpose(StrEnum):
    GATE = "gate"  # a node gpuhealth drained, before it goes back to work
    SWEEP = "sweep"  # an idle node, tested before a job finds its fault
    MANUAL = "manual"  # an operator asked for it


@dataclass(frozen=True, slots=True)
class Ran:
    """One command on one node. `refused`: why it never started (a job on the node, a name
    that is not one node, the scheduler said no); `exit_code` None when it did not finish."""

    exit_code: int | None = None
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False
    refused: str = ""
    steps: tuple[Step, ...] = field(default_factory=tuple)
    duration_s: float = 0.0


class Site(Protocol):
    name: str

    def run(self, node: str, argv: list[str], timeout_s: float, purpose: Purpose) -> Ran:
        """Run `argv` on `node` with nothing else of anyone's running there, within
        `timeout_s`; never raises for a failed step."""
        ...
