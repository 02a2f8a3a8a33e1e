"""Per-entity risk and alert level on /metrics: one risk and one level per GPU, per IB port, per
power supply, per fan and per node, and each GPU's NVLink links folded into the GPU (its worst
link, named by a label).

The collector is a tick observer that only keeps a reference to the newest tick's result, so a
tick pays nothing for it; the first scrape after a tick builds the families once (work bounded
by the entity limits) and later scrapes of the same tick reuse them. Series follow the tick's
entities: a GPU swapped out, a port gone or a node forgotten is simply not in the next build,
so Prometheus marks its series stale instead of keeping a last value forever.

Labels are the entity's names as the store keys them (node, GPU index, HCA and port number,
the supply's or fan's id as its BMC names it), never a UUID or serial, which would start a new
risk series on every swap. The board in each GPU slot is its own series instead,
`gpuhealth_gpu_info` (value 1), with dcgm-exporter's label names (`UUID`, `modelName`,
`pci_bus_id`) beside ours (`serial`, `vbios`, `driver`), so one
`* on(node, gpu) group_left(UUID, modelName) gpuhealth_gpu_info` names the board of any GPU
series, and `on(UUID)` joins dcgm-exporter's series to ours. Folding links keeps NVLink to two
series per GPU instead of 2 x 18 on an H100.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from prometheus_client.core import GaugeMetricFamily, Metric

from collectors.catalog import Scope
from collectors.frames import Entity
from collectors.identity import GpuIdentity
from service.stages.scoring import SCOPES
from service.tick import TickResult


@dataclass(frozen=True, slots=True)
class EntityGauge:
    """One per-entity family: what the docs list and the collector emits."""

    name: str
    help: str
    labels: tuple[str, ...]
    per: str  # the entity one series stands for, as the docs count it


_RISK = "fused failure risk, 0 (healthy) to 1 (failing or failed)"
_LEVEL = "alert level, 0 (none), 1 (watch), 2 (warning), 3 (critical)"
GPU_RISK = EntityGauge("gpuhealth_gpu_risk", f"The GPU's {_RISK}", ("node", "gpu"), "GPU")
GPU_LEVEL = EntityGauge("gpuhealth_gpu_alert_level", f"The GPU's open {_LEVEL}",
                        ("node", "gpu"), "GPU")
NVLINK_RISK = EntityGauge(
    "gpuhealth_gpu_nvlink_risk", "The fused failure risk (0 to 1) of the GPU's worst NVLink "
    "link: highest level, then highest risk, then lowest link index; link: that link's index",
    ("node", "gpu", "link"), "GPU with NVLink")
NVLINK_LEVEL = EntityGauge(
    "gpuhealth_gpu_nvlink_alert_level", "The open alert level (0 to 3) of the GPU's worst "
    "NVLink link, the same link as gpuhealth_gpu_nvlink_risk names", ("node", "gpu", "link"),
    "GPU with NVLink")
PORT_RISK = EntityGauge("gpuhealth_ib_port_risk", f"The InfiniBand port's {_RISK}",
                        ("node", "device", "port"), "IB port")
PORT_LEVEL = EntityGauge("gpuhealth_ib_port_alert_level", f"The InfiniBand port's open {_LEVEL}",
                         ("node", "device", "port"), "IB port")
PSU_RISK = EntityGauge("gpuhealth_psu_risk", f"The power supply's {_RISK}", ("node", "psu"),
                       "power supply")
PSU_LEVEL = EntityGauge("gpuhealth_psu_alert_level", f"The power supply's open {_LEVEL}",
                        ("node", "psu"), "power supply")
FAN_RISK = EntityGauge("gpuhealth_fan_risk", f"The chassis fan's {_RISK}", ("node", "fan"),
                       "fan")
FAN_LEVEL = EntityGauge("gpuhealth_fan_alert_level", f"The chassis fan's open {_LEVEL}",
                        ("node", "fan"), "fan")
NODE_RISK = EntityGauge("gpuhealth_node_risk", f"The node's {_RISK}, from its GPUs, links, "
                        "ports, supplies, fans and its own sensors", ("node",), "node")
NODE_LEVEL = EntityGauge("gpuhealth_node_alert_level", "The highest open alert level (0 to 3) "
                         "on the node: its entities' and its own (its sensors, no data)",
                         ("node",), "node")
GPU_INFO = EntityGauge(
    "gpuhealth_gpu_info", "The board in the GPU slot (value 1): dcgm-exporter's UUID, "
    "modelName and pci_bus_id labels, and its serial, VBIOS and driver; a label is empty "
    "where no source said it", ("node", "gpu", "UUID", "modelName", "pci_bus_id", "serial",
                                "vbios", "driver"), "GPU whose identity a source said")
GAUGES = (GPU_RISK, GPU_LEVEL, NVLINK_RISK, NVLINK_LEVEL, PORT_RISK, PORT_LEVEL, PSU_RISK,
          PSU_LEVEL, FAN_RISK, FAN_LEVEL, NODE_RISK, NODE_LEVEL)
# The chassis scopes: one risk and one level series per entity, labelled (node, its id).
_CHASSIS = ((Scope.PSU, PSU_RISK, PSU_LEVEL), (Scope.FAN, FAN_RISK, FAN_LEVEL))


def series_count(gpus: int, gpus_with_nvlink: int, ports: int, nodes: int, psus: int = 0,
                 fans: int = 0) -> int:
    """Series the per-entity families add for a fleet of this shape (the docs' figure)."""
    per = {"GPU": gpus, "GPU with NVLink": gpus_with_nvlink, "IB port": ports, "node": nodes,
           "power supply": psus, "fan": fans}
    return sum(per[g.per] for g in GAUGES)


@dataclass(frozen=True, slots=True)
class _Tick:
    result: TickResult
    # The store's entity lists as the tick scored them: forgetting replaces a list and new
    # entities only append, so a slice to the tick's length stays the tick's entities.
    entities: dict[Scope, list[Entity]]


def _risk(r: npt.NDArray[np.float32]) -> list[float]:
    # float32 printed as float64 reads 0.30000001192092896; six places is what risk means.
    out: list[float] = np.round(r.astype(np.float64), 6).tolist()
    return out


def _levels(levels: npt.NDArray[np.int8] | None, n: int) -> list[int]:
    if levels is None:
        return [0] * n
    out = np.zeros(n, np.int64)
    k = min(n, len(levels))
    out[:k] = levels[:k]
    listed: list[int] = out.tolist()
    return listed


Identity = Callable[[str], GpuIdentity | None]


def _no_identity(gpu: str) -> GpuIdentity | None:
    return None


class EntityGauges:
    """A prometheus_client collector and a tick observer. `identity`: the board in a GPU slot
    now (service.stages.gpu_identity), for gpuhealth_gpu_info."""

    def __init__(self, identity: Identity = _no_identity) -> None:
        self.identity = identity
        self._tick: _Tick | None = None
        self._built: tuple[_Tick, list[Metric]] | None = None
        self._lock = threading.Lock()  # one build per tick however many scrape at once

    def observe(self, tick: TickResult) -> None:
        store = tick.risk.store
        self._tick = _Tick(tick, {s: store[s].entities for s in SCOPES})

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterable[Metric]:
        tick = self._tick
        if tick is None:
            return []
        with self._lock:
            if self._built is None or self._built[0] is not tick:
                self._built = (tick, _build(tick, self.identity))
            return list(self._built[1])


def _family(g: EntityGauge) -> GaugeMetricFamily:
    return GaugeMetricFamily(g.name, g.help, labels=list(g.labels))


def _scope(tick: _Tick, scope: Scope) -> tuple[Sequence[Entity], list[float], list[int]]:
    r = tick.result.risk.scopes[scope].risk
    n = len(r)
    return tick.entities[scope][:n], _risk(r), _levels(tick.result.levels.get(scope), n)


def _build(tick: _Tick, identity: Identity = _no_identity) -> list[Metric]:
    risk = tick.result.risk
    derived = tick.result.derived
    node_level = dict.fromkeys(risk.node_names, 0)
    fams = {g.name: _family(g) for g in (*GAUGES, GPU_INFO)}

    ents, r, lv = _scope(tick, Scope.GPU)
    for e, x, level in zip(ents, r, lv, strict=True):
        level = max(level, derived.get(e.key, 0))  # a GPU gone missing is alerted on its key
        fams[GPU_RISK.name].add_metric([e.node, e.unit], x)
        fams[GPU_LEVEL.name].add_metric([e.node, e.unit], level)
        node_level[e.node] = max(node_level.get(e.node, 0), level)
        board = identity(e.key)
        if board:
            fams[GPU_INFO.name].add_metric([e.node, e.unit, board.uuid, board.model,
                                            board.pci_bus_id, board.serial, board.vbios,
                                            board.driver], 1)

    # Worst link per GPU: highest level, then highest risk, then lowest index (so a healthy
    # GPU's series keeps one name whatever order its links arrived in).
    worst: dict[tuple[str, str], tuple[int, float, int]] = {}
    ents, r, lv = _scope(tick, Scope.NVLINK)
    for e, x, level in zip(ents, r, lv, strict=True):
        owner, rank = (e.node, e.unit), (level, x, -int(e.sub))
        best = worst.get(owner)
        if best is None or rank > best:
            worst[owner] = rank
    for (node, gpu), (level, x, link) in worst.items():
        fams[NVLINK_RISK.name].add_metric([node, gpu, str(-link)], x)
        fams[NVLINK_LEVEL.name].add_metric([node, gpu, str(-link)], level)
        node_level[node] = max(node_level.get(node, 0), level)

    ents, r, lv = _scope(tick, Scope.IB_PORT)
    for e, x, level in zip(ents, r, lv, strict=True):
        fams[PORT_RISK.name].add_metric([e.node, e.unit, e.sub], x)
        fams[PORT_LEVEL.name].add_metric([e.node, e.unit, e.sub], level)
        node_level[e.node] = max(node_level.get(e.node, 0), level)

    for scope, risk_g, level_g in _CHASSIS:
        ents, r, lv = _scope(tick, scope)
        for e, x, level in zip(ents, r, lv, strict=True):
            fams[risk_g.name].add_metric([e.node, e.unit], x)
            fams[level_g.name].add_metric([e.node, e.unit], level)
            node_level[e.node] = max(node_level.get(e.node, 0), level)

    ents, _, lv = _scope(tick, Scope.NODE)  # the node's own sensors (NodeAtRisk)
    for e, level in zip(ents, lv, strict=True):
        node_level[e.node] = max(node_level.get(e.node, 0), level)

    for node, x in zip(risk.node_names, _risk(risk.nodes[: len(risk.node_names)]),
                       strict=False):
        fams[NODE_RISK.name].add_metric([node], x)
        fams[NODE_LEVEL.name].add_metric([node], max(node_level[node], derived.get(node, 0)))
    return list(fams.values())
