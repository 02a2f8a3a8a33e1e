"""Sweeps (issue 32): a low-rate pass that tests idle nodes before a job finds what only a test
shows (a slow NVLink, a GPU that fails under stress, wrong results), so those faults are
repaired between jobs instead of killing one.

Each pass (every `interval_s`, on the leader) picks the nodes whose last test (a sweep or a
gate) is older than `every_days`, least recently tested first, and starts the sweep suite on
as many as keep the nodes under test at once within `max_share` of the fleet (at least one).
Nodes gpuhealth holds drained are the gate's, not the sweep's. The site decides whether a node
is free: on Slurm only an IDLE node with no job, while no job waits in the queue (a sweep takes
only capacity nobody is waiting for), through a maintenance reservation so no job lands there
meanwhile. A node the site turns away is tried again after `retry_after_s`, and the refusal is
stored as an errored run, so an operator can see a node that is never free to test. A failure
is the `diag` event of any run: its rule pages and the remediation drains the node."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Executor, ThreadPoolExecutor

from collectors.diagnostics.settings import SuiteSpec
from service.diagnostics.gate import Diagnostics
from service.diagnostics.settings import SweepSettings
from service.diagnostics.site import Purpose

DAY_S = 86400.0


class Sweeper:
    def __init__(self, settings: SweepSettings, spec: SuiteSpec, diagnostics: Diagnostics, *,
                 nodes: Callable[[], Iterable[str]], held: Callable[[str], bool],
                 executor: Executor | None = None) -> None:
        self.settings, self.spec, self.diag = settings, spec, diagnostics
        self.nodes, self.held = nodes, held  # the fleet's nodes; whether one is drained by us
        self._executor = executor or ThreadPoolExecutor(max_workers=8,
                                                        thread_name_prefix="sweep")
        self._running: set[str] = set()
        self._tried: dict[str, float] = {}  # node -> when the site last turned it away
        self._last_pass = -math.inf
        self._lock = threading.Lock()

    def step(self, now: float) -> list[str]:
        """One pass when due; returns the nodes it started a sweep on."""
        if not self.settings.enabled or now - self._last_pass < self.settings.interval_s:
            return []
        self._last_pass = now
        fleet = sorted(set(self.nodes()))
        room = max(1, math.floor(self.settings.max_share * len(fleet))) - len(self._running)
        if room <= 0 or not fleet:
            return []
        due = []
        for node in fleet:
            if node in self._running or self.held(node):
                continue
            if now - self._tried.get(node, -math.inf) < self.settings.retry_after_s:
                continue
            last = self._last_tested(node)
            if now - last >= self.settings.every_days * DAY_S:
                due.append((last, node))
        started = [node for _, node in sorted(due)[:room]]
        with self._lock:
            self._running.update(started)
        for node in started:
            self._executor.submit(self._sweep, node, now)
        return started

    def _last_tested(self, node: str) -> float:
        """When the node's last finished sweep or gate run ended (a refusal is no test)."""
        for run in self.diag.runs.for_node(node, limit=20):
            if run.finished_at is not None and run.status in ("pass", "fail"):
                return run.finished_at
        return -math.inf

    def _sweep(self, node: str, now: float) -> None:
        try:
            run = self.diag.run_suite(node, self.spec, Purpose.SWEEP)
            if run.status == "error":
                self._tried[node] = now
        finally:
            with self._lock:
                self._running.discard(node)

    def running(self) -> set[str]:
        with self._lock:
            return set(self._running)

    def close(self) -> None:
        if isinstance(self._executor, ThreadPoolExecutor):
            self._executor.shutdown(wait=False, cancel_futures=True)
