"""Which latent faults a diagnostics policy finds before a job fails on them (docs/simulator.md,
"Active-only modes").

The job schedule is the trace's own: a latent fault changes no sample, so the jobs that run are
the same with or without diagnostics, and a fault's hit (the moment a job has run on the node
for the fault's show time) is the same in every policy. A policy runs the diagnostic suite:

- gates: when a drained node is released (the repair of a failure other than M7's job
  restart, the end of a planned maintenance), on every fault present then;
- sweeps: each node is due every `sweep_every_days` (a phase per node from the seed) and is
  tested at the first idle gap at or after that (no job, not down) that holds the whole suite,
  with at most `sweep_max_share` of the fleet under test at once. A sweep only fills a gap the
  schedule left, so it never delays or overlaps a job.

Each test of a fault finds it with its mode's `detect` probability, drawn from a stream per
fault (the k-th test of a fault reads the k-th number), so policies are compared on the same
luck. A found fault's node goes to repair; that is not fed back into the schedule (the jobs and
later sweeps stay as they were: a small bias, docs/simulator.md).
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from models.simulator.config import SimConfig
from models.simulator.config_active import ActiveConfig
from models.simulator.jobs import Jobs
from models.simulator.latent import LatentFault
from models.simulator.plan import merge_intervals
from models.simulator.topology import rng_for

STREAM_SWEEP = 180
STREAM_TESTS = 190  # + nothing: spawn key (190, fault index)

Finder = Literal["gate", "sweep"]


@dataclass(frozen=True, slots=True)
class Hit:
    time: float  # when the job fails on the fault
    job: int
    gpus: int  # the job's GPUs
    lost_s: float  # work each of them loses (back to the checkpoint it restarts from)


@dataclass(frozen=True, slots=True)
class Outcome:
    fault: LatentFault
    hit: Hit | None  # the job that fails on it without diagnostics (None: not within the trace)
    found_by: Finder | None = None
    found_at: float | None = None


@dataclass(frozen=True, slots=True)
class Diagnosed:
    outcomes: list[Outcome]
    sweeps: list[tuple[int, float, float]]  # node, start, end of every sweep test
    gates: int  # gate runs (drained nodes released within the trace)


class Schedule:
    """Per node: its jobs, its busy time (jobs and down intervals, merged) and its gates."""

    def __init__(self, cfg: SimConfig, jobs: Jobs, down: Sequence[Sequence[tuple[float, float]]],
                 drains: Sequence[tuple[int, float, float]]) -> None:
        self.cfg = cfg
        self.start, self.end = float(cfg.time.start_s), cfg.time.end_s
        n = cfg.fleet.nodes
        self.jobs = jobs
        self.jobs_on: list[list[tuple[float, float, int]]] = [[] for _ in range(n)]
        for j in range(len(jobs)):
            s, e = float(jobs.start[j]), float(jobs.end[j])
            for node in jobs.nodes[j].tolist():
                self.jobs_on[node].append((s, e, j))
        self.job_ends: list[list[float]] = []
        self.busy: list[tuple[list[float], list[float]]] = []
        for node in range(n):
            mine = sorted(self.jobs_on[node])
            self.jobs_on[node] = mine
            self.job_ends.append([e for _, e, _ in mine])
            merged = merge_intervals(sorted([(s, e) for s, e, _ in mine] + list(down[node])))
            self.busy.append(([a for a, _ in merged], [b for _, b in merged]))
        self.gate_times: list[list[float]] = [[] for _ in range(n)]
        for node, _, t1 in drains:
            if self.start < t1 <= self.end:
                self.gate_times[node].append(t1)
        for g in self.gate_times:
            g.sort()

    def busy_at(self, node: int, t0: float, t1: float) -> bool:
        """Whether a job runs on the node, or it is down, anywhere in [t0, t1)."""
        a, b = self.busy[node]
        i = bisect.bisect_left(a, t1)  # intervals starting before t1
        return i > 0 and b[i - 1] > t0  # merged: the ends are sorted too

    def gap(self, node: int, t: float, dur: float) -> float | None:
        """The first time at or after t from which the node is idle for dur (within the run)."""
        a, b = self.busy[node]
        j = bisect.bisect_right(a, t)
        if j > 0 and b[j - 1] > t:
            t = b[j - 1]
        while j < len(a) and a[j] < t + dur:
            t = max(t, b[j])
            j += 1
        return t if t + dur <= self.end else None

    def hit(self, f: LatentFault) -> Hit | None:
        """The job that fails on the fault once the node has run jobs for its show time."""
        mine = self.jobs_on[f.node]
        acc = 0.0
        for s, e, j in mine[bisect.bisect_right(self.job_ends[f.node], f.appear):]:
            a = max(s, f.appear)
            if acc + (e - a) >= f.show_load_s:
                t = a + (f.show_load_s - acc)
                rollback = self.cfg.active.of(f.mode).rollback
                since = t if rollback == "checkpoint" else a
                lost = t - self._checkpoint(j, since)
                gpus = len(self.jobs.nodes[j]) * self.cfg.fleet.gpus_per_node
                return Hit(t, j, gpus, lost)
            acc += e - a
        return None

    def _checkpoint(self, j: int, t: float) -> float:
        """The job's last checkpoint at or before t (its start when none yet)."""
        s = float(self.jobs.start[j])
        first = s + float(self.jobs.phase[j])
        if t < first:
            return s
        period = float(self.jobs.period[j])
        return first + math.floor((t - first) / period) * period

    def sweeps(self, policy: ActiveConfig) -> list[tuple[int, float, float]]:
        """Every sweep test (node, start, end) in start order."""
        if policy.sweep_every_days is None:
            return []
        every = policy.sweep_every_days * 86400.0
        dur = policy.sweep_test_min * 60.0
        nodes = self.cfg.fleet.nodes
        cap = max(1, int(policy.sweep_max_share * nodes))
        phase = rng_for(self.cfg.seed, STREAM_SWEEP).random(nodes)
        todo: list[tuple[float, int, float]] = []  # candidate start, node, due time
        for node in range(nodes):
            due = self.start + float(phase[node]) * every
            g = self.gap(node, due, dur)
            if g is not None:
                todo.append((g, node, due))
        heapq.heapify(todo)
        running: list[float] = []  # ends of the tests under way
        out: list[tuple[int, float, float]] = []
        while todo:
            s, node, due = heapq.heappop(todo)
            while running and running[0] <= s:
                heapq.heappop(running)
            if len(running) >= cap:  # the fleet's share is under test: wait for one to end
                g = self.gap(node, running[0], dur)
                if g is not None:
                    heapq.heappush(todo, (g, node, due))
                continue
            out.append((node, s, s + dur))
            heapq.heappush(running, s + dur)
            due += every
            while due < s + dur:
                due += every
            g = self.gap(node, due, dur)
            if g is not None:
                heapq.heappush(todo, (g, node, due))
        return out

    def diagnose(self, faults: Sequence[LatentFault], policy: ActiveConfig,
                 hits: Sequence[Hit | None] | None = None) -> Diagnosed:
        """Each fault's fate under the policy: found by a gate or a sweep before its hit, or
        hit by a job (or neither within the trace)."""
        sweeps = self.sweeps(policy)
        on: list[list[float]] = [[] for _ in range(self.cfg.fleet.nodes)]
        for node, s, _ in sweeps:
            on[node].append(s)
        hits = hits if hits is not None else [self.hit(f) for f in faults]
        out = []
        for f, hit in zip(faults, hits, strict=True):
            limit = hit.time if hit is not None else self.end
            tests: list[tuple[float, Finder]] = [(s, "sweep") for s in on[f.node]
                                                 if f.appear < s < limit]
            if policy.gates:
                tests += [(t, "gate") for t in self.gate_times[f.node] if f.appear < t <= limit]
            tests.sort()
            p = policy.of(f.mode).detect
            rng = rng_for(self.cfg.seed, STREAM_TESTS, f.index)
            found = next(((t, kind) for t, kind in tests if rng.random() < p), None)
            out.append(Outcome(f, hit, found[1], found[0]) if found is not None
                       else Outcome(f, hit))
        gates = sum(len(g) for g in self.gate_times) if policy.gates else 0
        return Diagnosed(out, sweeps, gates)
