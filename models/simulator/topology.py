"""Fleet topology: entity names, one EntityTable per scope, and integer indices into them.

Indices are dense and node-major, so a node's GPUs, links and ports are contiguous slices:
GPU g = node * G + gpu, NVLink = g * L + link, IB port = node * P + port.
"""

from __future__ import annotations

import numpy as np

from collectors.catalog import Scope
from collectors.frames import Entity, EntityTable
from models.simulator.config import FleetConfig


def rng_for(seed: int, *key: int) -> np.random.Generator:
    """An independent PCG64 stream per purpose: adding a stream never shifts another's draws."""
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed, spawn_key=key)))


class Topology:
    def __init__(self, fleet: FleetConfig) -> None:
        self.nodes = fleet.nodes
        self.gpus_per_node = fleet.gpus_per_node
        self.links_per_gpu = fleet.links
        self.ports_per_node = fleet.ib_ports_per_node
        self.psus_per_node = fleet.psus_per_node
        self.fans_per_node = fleet.fans_per_node
        width = max(4, len(str(fleet.nodes)))
        self.node_names = [f"n{i + 1:0{width}d}" for i in range(fleet.nodes)]
        self.ib_devices = [f"mlx5_{p}" for p in range(self.ports_per_node)]
        self._tables: dict[Scope, EntityTable] | None = None

    @property
    def tables(self) -> dict[Scope, EntityTable]:
        """Built on first use: planning a big fleet never needs millions of Entity objects."""
        if self._tables is None:
            names, g_n, l_n = self.node_names, self.gpus_per_node, self.links_per_gpu
            self._tables = {
                Scope.GPU: EntityTable(Scope.GPU, (
                    Entity.gpu(n, g) for n in names for g in range(g_n))),
                Scope.NVLINK: EntityTable(Scope.NVLINK, (
                    Entity.nvlink(n, g, k) for n in names for g in range(g_n) for k in range(l_n))),
                Scope.IB_PORT: EntityTable(Scope.IB_PORT, (
                    Entity.ib_port(n, d, 1) for n in names for d in self.ib_devices)),
                Scope.PSU: EntityTable(Scope.PSU, (
                    Entity.psu(n, str(p)) for n in names for p in range(self.psus_per_node))),
                Scope.FAN: EntityTable(Scope.FAN, (
                    Entity.fan(n, str(f)) for n in names for f in range(self.fans_per_node))),
                Scope.NODE: EntityTable(Scope.NODE, (Entity(Scope.NODE, n) for n in names)),
            }
        return self._tables

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    def size(self, scope: Scope) -> int:
        return self.nodes * self.per_node(scope)

    def per_node(self, scope: Scope) -> int:
        return {
            Scope.GPU: self.gpus_per_node,
            Scope.NVLINK: self.gpus_per_node * self.links_per_gpu,
            Scope.IB_PORT: self.ports_per_node,
            Scope.PSU: self.psus_per_node,
            Scope.FAN: self.fans_per_node,
            Scope.NODE: 1,
        }[scope]

    def node_slice(self, scope: Scope, node: int) -> tuple[int, int]:
        k = self.per_node(scope)
        return node * k, (node + 1) * k

    def node_of(self, scope: Scope, index: int) -> int:
        return index // self.per_node(scope)

    def gpu(self, node: int, gpu: int) -> int:
        return node * self.gpus_per_node + gpu

    def nvlink(self, gpu_index: int, link: int) -> int:
        return gpu_index * self.links_per_gpu + link

    def gpu_links(self, gpu_index: int) -> tuple[int, int]:
        return gpu_index * self.links_per_gpu, (gpu_index + 1) * self.links_per_gpu

    def ib_port(self, node: int, port: int) -> int:
        return node * self.ports_per_node + port

    def psu(self, node: int, psu: int) -> int:
        return node * self.psus_per_node + psu

    def fan(self, node: int, fan: int) -> int:
        return node * self.fans_per_node + fan

    def key(self, scope: Scope, index: int) -> str:
        node, rest = divmod(index, self.per_node(scope))
        name = self.node_names[node]
        if scope is Scope.GPU:
            return Entity.gpu(name, rest).key
        if scope is Scope.NVLINK:
            return Entity.nvlink(name, *divmod(rest, self.links_per_gpu)).key
        if scope is Scope.IB_PORT:
            return Entity.ib_port(name, self.ib_devices[rest], 1).key
        if scope is Scope.PSU:
            return Entity.psu(name, str(rest)).key
        if scope is Scope.FAN:
            return Entity.fan(name, str(rest)).key
        return name

    def peer_link(self, gpu_index: int, link: int) -> tuple[int, int] | None:
        """The GPU and link on the other end. Real NVSwitch systems end a link on a switch port;
        pairing GPUs is a design choice that lets errors mirror onto a peer GPU (Delta, Cui et
        al., SC'25).
        For a power-of-two node, XOR with 1..G-1 is a perfect matching per link index."""
        g_count = self.gpus_per_node
        if g_count < 2:
            return None
        node, g = divmod(gpu_index, g_count)
        k = 1 + link % (g_count - 1)
        peer = g ^ k if g_count & (g_count - 1) == 0 else (g + k) % g_count
        return node * g_count + peer, link
