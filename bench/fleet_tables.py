"""The entity tables of a synthetic DGX-like fleet, shared by the benches that build one."""

from __future__ import annotations

from collectors.catalog import Scope
from collectors.frames import Entity, EntityTable

GPUS_PER_NODE = 8


def fleet_tables(gpus: int, links: int, ports: int) -> dict[Scope, EntityTable]:
    """Nodes of 8 GPUs, `links` NVLink links per GPU and `ports` IB ports per node."""
    nodes = [f"n{i:05d}" for i in range(gpus // GPUS_PER_NODE)]
    return {
        Scope.GPU: EntityTable(Scope.GPU, [Entity.gpu(n, g) for n in nodes
                                           for g in range(GPUS_PER_NODE)]),
        Scope.NVLINK: EntityTable(Scope.NVLINK, [Entity.nvlink(n, g, lk) for n in nodes
                                                 for g in range(GPUS_PER_NODE)
                                                 for lk in range(links)]),
        Scope.IB_PORT: EntityTable(Scope.IB_PORT, [Entity.ib_port(n, f"mlx5_{p}", 1)
                                                   for n in nodes for p in range(ports)]),
    }
