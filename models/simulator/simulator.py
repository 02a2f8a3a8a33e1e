"""The fleet simulator: plan everything from the seed, then render it chunk by chunk.

    sim = Simulator(load_scenario("demo"))
    sim.labels          # failures, benign traps and repairs, known before any sample exists
    sim.latent          # faults only a diagnostic finds (no sample shows them)
    sim.diagnose()      # which of them the configured gates and sweeps find before a job does
    for batch in sim.run():
        ...             # collectors.frames.Batch: GPU, NVLINK and IB_PORT frames plus Xids
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from collectors.catalog import Scope
from collectors.frames import Batch, EntityTable
from models.simulator.config import SimConfig, Trap
from models.simulator.config_active import ActiveConfig
from models.simulator.diagnostics import Diagnosed, Schedule
from models.simulator.failures import Failure
from models.simulator.jobs import Jobs, schedule
from models.simulator.latent import LatentFault, sample_latent
from models.simulator.modes import ACTIVE_ONLY, Mode
from models.simulator.plan import Plan
from models.simulator.planner import build_plan, plan_failures
from models.simulator.render import Renderer, chunk_steps
from models.simulator.topology import Topology


class Simulator:
    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.topology = Topology(config.fleet)
        self._plan: Plan | None = None
        self._failures: list[Failure] | None = None
        self._jobs: Jobs | None = None
        self._latent: list[LatentFault] | None = None
        self._schedule: Schedule | None = None

    @property
    def tables(self) -> dict[Scope, EntityTable]:
        """One EntityTable per scope, shared by every Batch this simulator yields."""
        return self.topology.tables

    @property
    def plan(self) -> Plan:
        if self._plan is None:
            self._plan, self._failures = build_plan(self.config, self.topology)
        return self._plan

    @property
    def failures(self) -> list[Failure]:
        """The planned failures (time, device, precursor onset, repair)."""
        if self._failures is None:
            self.plan  # noqa: B018 - planning fills _failures
        assert self._failures is not None
        return self._failures

    @property
    def labels(self) -> list[dict[str, Any]]:
        """Labels sorted by time: kind "failure", "benign" (traps) and "repair" (a device back,
        with the counters that reset); see docs/simulator.md."""
        return [dict(x) for x in self.plan.labels]

    @property
    def jobs(self) -> Jobs:
        if self._jobs is None:
            self._jobs = schedule(self.config, self.plan.down)
        return self._jobs

    @property
    def latent(self) -> list[LatentFault]:
        """The active-only faults (M14-M16), time-sorted; they change no sample or label."""
        if self._latent is None:
            self._latent = sample_latent(self.config)
        return self._latent

    @property
    def schedule(self) -> Schedule:
        """The jobs, busy time and drains per node that the diagnostics work around."""
        if self._schedule is None:
            names = {n: i for i, n in enumerate(self.topology.node_names)}
            drains = [(f.node, f.time, f.repair) for f in self.failures
                      if f.mode is not Mode.M7_UNOBSERVABLE and f.mode not in ACTIVE_ONLY]
            drains += [(names[x["node"]], float(x["start"]), float(x["end"]))
                       for x in self.plan.labels
                       if x.get("trap") == Trap.PLANNED_MAINTENANCE.value]
            self._schedule = Schedule(self.config, self.jobs, self.plan.down, drains)
        return self._schedule

    def diagnose(self, policy: ActiveConfig | None = None) -> Diagnosed:
        """Each latent fault's fate under `policy` (default: the configured one)."""
        return self.schedule.diagnose(self.latent, policy or self.config.active)

    @property
    def steps_per_batch(self) -> int:
        return chunk_steps(self.config, self.topology)

    def run(self) -> Iterator[Batch]:
        """Batches in time order; each run of one simulator yields the same bytes."""
        return Renderer(self.config, self.topology, self.plan, self.jobs).batches()


def failure_times(config: SimConfig) -> list[Failure]:
    """Failures only, without benign traps, effects or jobs: fast enough for a big fleet."""
    return plan_failures(config, Topology(config.fleet))
