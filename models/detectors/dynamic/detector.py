"""Tier (b): dynamic thresholds. Per-device baselines that do not learn from flagged points,
peer comparison inside a node, sustained-duration rules, rate rules and step rules, in one
family per part (memory.py, thermal.py, infiniband.py, nvlink.py).

Rules that read rollups recompute once per minute of data time (the finest tier's bucket) and
reuse their findings in between, so a 5-s tick stays cheap at fleet scale.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from collectors.catalog import Scope
from models.detectors.dynamic.family import B, Family, Memo, Rule
from models.detectors.dynamic.hourly import HOUR
from models.detectors.dynamic.infiniband import Infiniband, InfinibandConfig
from models.detectors.dynamic.memory import Memory, MemoryConfig
from models.detectors.dynamic.nvlink import Nvlink, NvlinkConfig
from models.detectors.dynamic.thermal import Thermal, ThermalConfig
from models.detectors.findings import Finding
from models.detectors.view import FleetView


# Every family's settings side by side (one flat section, `detectors.dynamic`): the shared
# levels (levels.LevelConfig) first, then the families' in the order of the bases, last first.
@dataclass(frozen=True)
class DynamicConfig(NvlinkConfig, InfinibandConfig, MemoryConfig, ThermalConfig):
    pass


class DynamicThresholds:
    name = "dynamic"

    def __init__(self, config: DynamicConfig | None = None) -> None:
        self.c = config or DynamicConfig()
        self.memo = Memo()
        self.memory = Memory(self.c, self.memo)
        self.thermal = Thermal(self.c)
        self.infiniband = Infiniband(self.c, self.memo)
        self.nvlink = Nvlink(self.c, self.memo)
        # The registry: the families in the order their findings come.
        self.families: tuple[Family, ...] = (self.memory, self.thermal, self.infiniband,
                                             self.nvlink)
        self._minute = -1
        self._hour = -1
        self._cached: list[Finding] = []

    @property
    def rules(self) -> tuple[Rule, ...]:
        return tuple(r for f in self.families for r in f.rules)

    def detect(self, view: FleetView, now: float) -> list[Finding]:
        out = [x for f in self.families for x in f.every_tick(view, now)]
        minute, hour = int(now // 60), int(now // HOUR)
        sizes_changed = any(len(f.risk) != len(view.scope(f.scope)) for f in self._cached)
        if minute != self._minute or sizes_changed:
            self._minute = minute
            self._cached = [x for f in self.families for x in f.every_minute(view)]
            if hour != self._hour:
                self._hour = hour
                for f in self.families:
                    f.learn(view, self._flagged)
        return out + self._cached

    def forget(self, scope: Scope, keep: npt.NDArray[np.intp]) -> None:
        for f in self.families:
            f.forget(scope, keep)
        # The minute's findings are slot-indexed: made again on the next tick.
        self._minute = -1
        self.memo.clear()
        self._cached = [f for f in self._cached if f.scope is not scope]

    def _flagged(self, rule: str, n: int) -> B:
        for f in self._cached:
            if f.rule == rule:
                return np.asarray(f.risk[:n] > 0)
        return np.zeros(n, bool)
