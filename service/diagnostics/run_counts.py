"""Finished diagnostic runs counted for /metrics without a scan per scrape: each refresh reads
only the runs above a watermark (every run at or below it is finished and counted), so a
scrape costs one range query on the table's key, however long its history. The first refresh
of a process reads it all, once. A run still running holds the watermark below it until it
ends (the gate's runs end within their time limit; a restart ends those it cut off)."""

from __future__ import annotations

import threading
from collections import Counter

from service.diagnostics.runs import RUNNING, RunStore

# The last run's result per node as a number: what gpuhealth_node_diagnostic_status exports.
STATUS_VALUE = {"pass": 0.0, "fail": 1.0, "error": 2.0}


class RunCounts:
    def __init__(self) -> None:
        self._upto = 0  # every run with an id at or below it is counted
        self._counted: set[int] = set()  # runs above the watermark counted already
        self.totals: Counter[tuple[str, str, str]] = Counter()  # (suite, purpose, status)
        self.last: dict[str, tuple[float, str]] = {}  # node -> (finished_at, status)
        self._lock = threading.Lock()  # scrapes may overlap

    def refresh(self, runs: RunStore) -> None:
        with self._lock:
            with runs.transaction() as db:
                rows = db.execute(
                    "SELECT id, node, suite, purpose, status, finished_at FROM "
                    "diagnostic_runs WHERE id > ? ORDER BY id", (self._upto,)).fetchall()
            pending: list[int] = []
            for rid, node, suite, purpose, status, finished_at in rows:
                rid = int(rid)
                if status == RUNNING:
                    pending.append(rid)
                    continue
                if rid in self._counted:
                    continue
                self._counted.add(rid)
                self.totals[(suite, purpose, status)] += 1
                at = float(finished_at or 0.0)
                if node not in self.last or at >= self.last[node][0]:
                    self.last[node] = (at, status)
            if rows:
                self._upto = (min(pending) - 1) if pending else int(rows[-1][0])
            self._counted = {r for r in self._counted if r > self._upto}
