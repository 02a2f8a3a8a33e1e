"""A Fleet collector whose nodes and GPUs can go silent, and which can carry events (Xid codes)
in its next round: for the tests of what the service says of silent entities."""

from __future__ import annotations

import numpy as np

from collectors.frames import Batch, EventFrame, Frame
from tests.support.fleet import Fleet, FleetCollector, ManualClock


class PartialCollector(FleetCollector):
    """The fleet less what is in `gone`: whole nodes (`n012`) or GPUs with their links
    (`n005:gpu3`); `events` go out with the next round."""

    def __init__(self, fleet: Fleet, clock: ManualClock, name: str = "fleet") -> None:
        super().__init__(fleet, clock, name)
        self.gone: set[str] = set()
        self.events = EventFrame()

    def _silent(self, node: str, key: str) -> bool:
        return node in self.gone or any(key == g or key.startswith(g + ":") for g in self.gone)

    def collect(self) -> Batch:
        full = self.fleet.batch(self.clock())
        out = Batch()
        for f in full.frames.values():
            keep = np.array([not self._silent(e.node, e.key)
                             for e in (f.entities.entities[int(i)] for i in f.rows)], bool)
            out.add(Frame(f.entities, f.rows[keep], f.ts[keep], f.values[keep]))
        out.events, self.events = self.events, EventFrame()
        return out
