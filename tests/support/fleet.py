"""A small hand-built fleet for the service tests: nodes of 8 GPUs with two NVLink links per
GPU and two IB ports per node, every metric at a healthy value, and helpers to break one."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from collectors.base import CollectorStatus
from collectors.catalog import CATALOG, Scope
from collectors.frames import Batch, Entity, EntityTable, Frame

T0 = 1_699_999_200.0  # a whole hour, so rollup buckets line up
STEP = 5.0
HEALTHY = {
    "gpu_temp": 55.0, "mem_temp": 60.0, "gpu_slowdown_temp": 87.0, "gpu_shutdown_temp": 92.0,
    "mem_max_temp": 95.0, "gpu_temp_margin": 30.0, "power_draw": 500.0, "sm_clock": 1980.0,
    "gpu_util": 90.0, "nvlink_state": 1.0, "ib_state": 4.0, "ib_rate": 400.0,
}


class Fleet:
    def __init__(self, nodes: dict[str, int], links: int = 2, ports: int = 2) -> None:
        """`nodes` maps node name to its number of GPUs."""
        self.tables = {
            Scope.GPU: EntityTable(Scope.GPU, [Entity.gpu(n, g) for n, k in nodes.items()
                                               for g in range(k)]),
            Scope.NVLINK: EntityTable(Scope.NVLINK, [Entity.nvlink(n, g, lk)
                                                     for n, k in nodes.items()
                                                     for g in range(k) for lk in range(links)]),
            Scope.IB_PORT: EntityTable(Scope.IB_PORT, [Entity.ib_port(n, f"mlx5_{p}", 1)
                                                       for n in nodes for p in range(ports)]),
        }
        self.values: dict[Scope, npt.NDArray[np.float64]] = {}
        for scope, table in self.tables.items():
            cols = CATALOG.columns(scope)
            v = np.zeros((len(table), len(cols)))
            for j, m in enumerate(cols):
                v[:, j] = HEALTHY.get(m.name, 0.0)
            self.values[scope] = v

    def set(self, key: str, metric: str, value: float) -> None:
        e = Entity.parse(key)
        self.values[e.scope][self.tables[e.scope].index(e), CATALOG.column(e.scope, metric)] = value

    def batch(self, ts: float) -> Batch:
        b = Batch()
        for scope, table in self.tables.items():
            n = len(table)
            b.add(Frame(table, np.arange(n, dtype=np.int32), np.full(n, ts),
                        self.values[scope].copy()))
        return b


class ManualClock:
    """An injected clock the test moves by hand."""

    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class FleetCollector:
    """A Collector over a Fleet: each round reports every entity at the clock's time."""

    def __init__(self, fleet: Fleet, clock: ManualClock, name: str = "fleet") -> None:
        self.name = name
        self.status = CollectorStatus()
        self.fleet = fleet
        self.clock = clock

    def collect(self) -> Batch:
        return self.fleet.batch(self.clock())


class BrokenCollector:
    """Breaks the protocol by raising, as a misconfigured collector would."""

    def __init__(self, name: str = "broken") -> None:
        self.name = name
        self.status = CollectorStatus()
        self.calls = 0

    def collect(self) -> Batch:
        self.calls += 1
        raise RuntimeError("no such device: /dev/nvidiactl")
