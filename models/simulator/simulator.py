"""The fleet simulator: plan everything from the seed, then render it chunk by chunk.

    sim = Simulator(load_scenario("demo"))
    sim.labels          # failures, benign traps and repairs, known before any sample exists
    for batch in sim.run():
        ...             # collectors.frames.Batch: GPU, NVLINK and IB_PORT frames plus Xids
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from collectors.catalog import Scope
from collectors.frames import Batch, EntityTable
from models.simulator.config import SimConfig
from models.simulator.failures import Failure
from models.simulator.jobs import Jobs, schedule
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
    def steps_per_batch(self) -> int:
        return chunk_steps(self.config, self.topology)

    def run(self) -> Iterator[Batch]:
        """Batches in time order; each run of one simulator yields the same bytes."""
        return Renderer(self.config, self.topology, self.plan, self.jobs).batches()


def failure_times(config: SimConfig) -> list[Failure]:
    """Failures only, without benign traps, effects or jobs: fast enough for a big fleet."""
    return plan_failures(config, Topology(config.fleet))
