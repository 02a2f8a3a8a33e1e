"""What one scoring tick leaves behind, and the protocols of what the pipeline hands it to:
a leaf module, so the stages that read a tick (the InfluxDB recorder, the runtime, commands)
never import the pipeline that makes it."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from collectors.base import CollectorStatus
from collectors.catalog import Scope
from models.detectors.view import FleetView
from service.notify.sender import Sent
from service.remediation.actions import AuditEntry
from service.stages.alert_machine import FlagChange, Transition
from service.stages.alert_store import Alert
from service.stages.ingest import IngestResult
from service.stages.label_store import StoredLabel
from service.stages.scoring import RiskState


@dataclass(slots=True)
class FleetCount:
    """The fleet the breaker and the storm measure against: the declared size when there is
    one (a ceiling as well as a floor: names from the wire cannot dilute it), else the nodes
    with a history reporting at the newest tick (service.stages.fleet_alerts.FleetHistory;
    never every node name ever seen, nor names that only just appeared)."""

    declared: int = 0
    live: int = 0

    def size(self) -> int:
        """0 while undeclared and no node has a history yet: the breaker then refuses
        without tripping ("fleet size unknown"), rather than judging a fleet of one."""
        return self.declared if self.declared > 0 else self.live


@dataclass(slots=True)
class Stats:
    samples_ingested: int = 0
    samples_rejected: int = 0
    rows_late: int = 0  # stored to the sinks, too old or out of order to be scored
    counter_drops: int = 0  # persistent counters read lower, held out of the window
    counter_resets: int = 0
    batches: int = 0
    ticks: int = 0
    tick_failures: int = 0  # ticks that raised (the scheduler logs and goes on)
    last_ingest_s: float = 0.0
    last_tick_s: float = 0.0
    notifications_sent: int = 0
    notifications_failed: int = 0
    # Seconds spent per phase of the scoring tick, summed over every tick (TickPhases.PHASES).
    tick_phases: dict[str, float] = field(default_factory=dict)

    def add(self, res: IngestResult) -> None:
        """Count one ingested batch."""
        self.batches += 1
        self.samples_ingested += res.accepted
        self.samples_rejected += res.rejected
        self.rows_late += res.late
        self.counter_drops += res.counter_drops
        self.counter_resets += res.resets


class TickPhases:
    """Splits one tick's wall time into its phases, so a slow tick says where it went (waiting
    for the lock an ingest holds, scoring, the alert store, notification, remediation)."""

    PHASES = ("claim", "lock", "forget", "score", "alerts", "record", "notify", "remediate")

    def __init__(self, into: dict[str, float]) -> None:
        self.into = into
        self.last = time.perf_counter()

    def mark(self, phase: str) -> None:
        """The time since the previous mark was spent in `phase`."""
        now = time.perf_counter()
        self.into[phase] = self.into.get(phase, 0.0) + (now - self.last)
        self.last = now


@dataclass(slots=True)
class TickResult:
    at: float
    duration_s: float
    risk: RiskState
    transitions: list[Transition] = field(default_factory=list)
    alerts: list[Alert] = field(default_factory=list)
    changed: list[tuple[Transition, Alert]] = field(default_factory=list)
    flags: list[FlagChange] = field(default_factory=list)
    messages: int = 0  # messages handed to the sender this tick
    deliveries: list[Sent] = field(default_factory=list)  # finished since the last tick
    audit: list[AuditEntry] = field(default_factory=list)  # remediation, since the last tick
    levels: dict[Scope, npt.NDArray[np.int8]] = field(default_factory=dict)
    # Open node and fleet alerts' levels by entity key (NodeNoData, GpuMissing, FleetStorm).
    derived: dict[str, int] = field(default_factory=dict)
    # Labels added or withdrawn since the last tick: this tick's hard failures and repairs,
    # and the labels of verdicts given meanwhile (service.stages.label_store).
    labels: list[StoredLabel] = field(default_factory=list)


class Remediation(Protocol):
    """What the pipeline asks of the remediation controller (service.remediation)."""

    def migrate(self, alert: Alert, now: float) -> None: ...

    def trip(self, reason: str, now: float) -> None: ...

    def step(self, now: float) -> None: ...

    def audit(self) -> list[AuditEntry]: ...

    def close(self) -> None: ...


@runtime_checkable
class Closable(Protocol):
    """A sink, observer or receiver that holds something to release at shutdown."""

    def close(self) -> None: ...


class TickObserver(Protocol):
    """Sees every scoring tick's result after it is complete (the InfluxDB recorder)."""

    def observe(self, tick: TickResult) -> None: ...


@runtime_checkable
class TracksStore(Protocol):
    """A sink that also reads the window store (the InfluxDB hour tier)."""

    def track_store(self, fleet: FleetView) -> None: ...


@runtime_checkable
class TracksCollectors(Protocol):
    """A tick observer that also records the health of the collectors feeding the service."""

    def track_collectors(self, statuses: Callable[[], Mapping[tuple[str, str],
                                                             CollectorStatus]]) -> None: ...
