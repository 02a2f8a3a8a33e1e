"""The garbage collector's policy for a long-running service: survivors of a full collection
are frozen out of the next one's scan.

CPython's full collection walks every tracked object while every thread waits. In a service
that remembers thousands of entities and keeps taking in new ones (a flood of new names, a
fleet joining), full collections run every few seconds and each walked everything the
service remembers: 40 to 80 ms of a 2-core machine per collection, and a liveness probe that
waited behind one (`python -m bench.fuzz`). What survived a full collection is long-lived;
frozen (`gc.freeze`), it is out of every later scan, so each full collection walks only what
arrived since the last one. An object frozen is still freed by its reference count; only
cyclic garbage among frozen objects waits. So that never grows without bound, once the
frozen set has grown past `regrow` times what start-up froze, the next full collection
scans everything again (one long pause, that rarely) and freezes what survives it.

Process-wide, as the collector is: installed by each running app (tests run several in one
process), removed and everything unfrozen when the last one stops.
"""

from __future__ import annotations

import gc
import threading
from typing import Any

REGROW = 1.0  # frozen growth, as a share of what start-up froze, before a full scan
MIN_REGROW = 200_000  # ... and at least this many objects


class GcPolicy:
    def __init__(self, regrow: float = REGROW, min_regrow: int = MIN_REGROW) -> None:
        self.regrow, self.min_regrow = regrow, min_regrow
        self.base = 0  # frozen after the last full scan
        self.full_scans = 0  # full collections that scanned everything again (after start)
        self._scan_all = False
        self._users = 0
        self._lock = threading.Lock()

    def install(self) -> None:
        """Freeze what start-up loaded and keep freezing survivors (one call per running app)."""
        with self._lock:
            self._users += 1
            if self._users > 1:
                return
            gc.collect()
            gc.freeze()
            self.base, self._scan_all = gc.get_freeze_count(), False
            gc.callbacks.append(self._after)

    def uninstall(self) -> None:
        """The last app stopped: everything frozen may be garbage now (a process that serves
        again, as tests do, would otherwise keep every earlier service's cycles)."""
        with self._lock:
            self._users = max(0, self._users - 1)
            if self._users:
                return
            if self._after in gc.callbacks:
                gc.callbacks.remove(self._after)
            gc.unfreeze()

    def _after(self, phase: str, info: dict[str, Any]) -> None:
        if phase != "stop" or info["generation"] != 2:
            return
        if self._scan_all:  # this collection scanned everything: start counting afresh
            gc.freeze()
            self.base, self._scan_all = gc.get_freeze_count(), False
            self.full_scans += 1
            return
        gc.freeze()
        if gc.get_freeze_count() > self.base + max(self.min_regrow, self.regrow * self.base):
            gc.unfreeze()  # the next full collection scans everything once
            self._scan_all = True


POLICY = GcPolicy()
