"""Small hand-built rounds for unit tests: a fleet of nodes with every GPU, link and port
reporting healthy values, with helpers to change one metric of one entity."""

from __future__ import annotations

import numpy as np

from collectors.catalog import CATALOG, Scope
from collectors.frames import Batch, Entity, EntityTable, Frame

T0 = 1_699_999_200.0  # on a whole hour, so minute and hour buckets line up


class Rounds:
    def __init__(self, nodes: int = 2, gpus: int = 8, links: int = 2, ports: int = 2) -> None:
        names = [f"n{i}" for i in range(nodes)]
        self.tables = {
            Scope.GPU: EntityTable(Scope.GPU, [Entity.gpu(n, g) for n in names
                                               for g in range(gpus)]),
            Scope.NVLINK: EntityTable(Scope.NVLINK, [Entity.nvlink(n, g, lk) for n in names
                                                     for g in range(gpus) for lk in range(links)]),
            Scope.IB_PORT: EntityTable(Scope.IB_PORT, [Entity.ib_port(n, f"mlx5_{p}", 1)
                                                       for n in names for p in range(ports)]),
        }
        self.values = {s: self._healthy(s, len(t)) for s, t in self.tables.items()}

    @staticmethod
    def _healthy(scope: Scope, n: int) -> np.ndarray:
        base = {
            "gpu_temp": 55.0, "mem_temp": 60.0, "gpu_slowdown_temp": 87.0,
            "gpu_shutdown_temp": 92.0, "mem_max_temp": 95.0, "gpu_temp_margin": 30.0,
            "power_draw": 500.0, "sm_clock": 1980.0, "gpu_util": 90.0, "nvlink_state": 1.0,
            "ib_state": 4.0, "ib_rate": 400.0,
        }
        cols = CATALOG.columns(scope)
        v = np.zeros((n, len(cols)))
        for j, m in enumerate(cols):
            v[:, j] = base.get(m.name, 0.0)
        return v

    def set(self, key: str, metric: str, value: float) -> None:
        e = Entity.parse(key)
        table = self.tables[e.scope]
        self.values[e.scope][table.index(e), CATALOG.column(e.scope, metric)] = value

    def add(self, key: str, metric: str, inc: float) -> None:
        e = Entity.parse(key)
        table = self.tables[e.scope]
        self.values[e.scope][table.index(e), CATALOG.column(e.scope, metric)] += inc

    def batch(self, ts: float, missing: tuple[str, ...] = ()) -> Batch:
        b = Batch()
        for scope, table in self.tables.items():
            keep = np.array([e.key not in missing for e in table.entities])
            rows = np.flatnonzero(keep).astype(np.int32)
            b.add(Frame(table, rows, np.full(len(rows), ts), self.values[scope][rows].copy()))
        return b
