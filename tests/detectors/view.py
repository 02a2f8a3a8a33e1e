"""A tiny in-memory fleet for detector unit tests: it satisfies the `ScopeView` / `FleetView`
protocols of `models.detectors.view` with windows a test sets directly, per metric, resolution
and stat, so each rule is exercised alone and in milliseconds (no ingest, no rollups).

Windows are held per resolution ("raw" or a tier name) as [entity, bucket] arrays, newest
bucket last, the shape the real store returns; a window longer than what was set reads NaN on
the left, as the store's does for buckets it never held. Metric names are checked against the
catalog, so a typo fails loudly instead of reading as "missing data"."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from collectors.catalog import CATALOG, Kind, Scope
from collectors.frames import Entity
from models.detectors.findings import Finding

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]

T0 = 1_699_999_200.0  # on a whole hour, so minute and hour boundaries line up
STEP_S = 5.0


@dataclass(frozen=True, slots=True)
class Tier:
    name: str
    step_s: float
    length: int


# The window store's default layout at a 5-s step (service.stages.windows.WindowConfig; a test
# checks they agree): the rules choose their resolution from it through `recent`.
RAW_LENGTH = 120
TIERS = (Tier("1m", 60.0, 120), Tier("1h", 3600.0, 168), Tier("1d", 86400.0, 7))
NVLINK_RAW_LENGTH = 60
NVLINK_TIERS = (Tier("1m", 60.0, 60), Tier("1h", 3600.0, 72))


@dataclass(frozen=True, slots=True)
class Event:
    ts: float
    entity: str
    metric: str
    value: float


class FakeScope:
    def __init__(self, scope: Scope, entities: Sequence[Entity]) -> None:
        self.scope = scope
        self.step_s = STEP_S
        self.raw_length = NVLINK_RAW_LENGTH if scope is Scope.NVLINK else RAW_LENGTH
        self.tier_specs = NVLINK_TIERS if scope is Scope.NVLINK else TIERS
        self.entities = list(entities)
        nodes = sorted({e.node for e in self.entities})
        self.node_of = np.array([nodes.index(e.node) for e in self.entities], np.int32)
        gpus = sorted({(e.node, e.unit) for e in self.entities})
        self.gpu_of = np.array([gpus.index((e.node, e.unit)) for e in self.entities], np.int32)
        self.head = 10_000  # a raw step index; only the EWMA baseline reads it (learns once each)
        self._finished = {t.name: 0 for t in self.tier_specs}
        self._metrics = {m.name for m in CATALOG if m.scope is scope and m.kind is not Kind.EVENT}
        self._windows: dict[tuple[str, str, str], F32] = {}
        self._latest: dict[str, F64] = {}

    def __len__(self) -> int:
        return len(self.entities)

    # ---- setting ----------------------------------------------------------------------------
    def _check(self, metric: str) -> None:
        if metric not in self._metrics:
            raise KeyError(f"{metric} is not a {self.scope} metric")

    def _length(self, res: str) -> int:
        if res == "raw":
            return self.raw_length
        return next(t.length for t in self.tier_specs if t.name == res)

    def _ring(self, metric: str, res: str, stat: str) -> F32:
        self._check(metric)
        key = (metric, res, stat)
        if key not in self._windows:
            self._windows[key] = np.full((len(self), self._length(res)), np.nan, np.float32)
        return self._windows[key]

    def fill(self, metric: str, value: float, res: str = "raw", stat: str = "agg") -> None:
        """Every entity held `value` in every bucket of the resolution."""
        self._ring(metric, res, stat)[:] = value

    def put(self, metric: str, slot: int, values: Sequence[float], res: str = "raw",
            stat: str = "agg") -> None:
        """The newest len(values) buckets of one entity, oldest first."""
        ring = self._ring(metric, res, stat)
        ring[slot, ring.shape[1] - len(values):] = values

    def set_latest(self, metric: str, value: float, slot: int | None = None) -> None:
        self._check(metric)
        cur = self._latest.setdefault(metric, np.full(len(self), np.nan))
        if slot is None:
            cur[:] = value
        else:
            cur[slot] = value

    def step(self) -> None:
        """The clock moved on one raw step and every tier finished one more bucket."""
        self.head += 1
        for name in self._finished:
            self._finished[name] += 1

    # ---- ScopeView ----------------------------------------------------------------------------
    def window(self, metric: str, n: int, tier: str | None = None, stat: str = "agg") -> F32:
        self._check(metric)
        res = tier or "raw"
        ring = self._windows.get((metric, res, stat))
        if ring is None and stat != "agg":
            ring = self._windows.get((metric, res, "agg"))
        out = np.full((len(self), n), np.nan, np.float32)
        if ring is not None:
            k = min(n, ring.shape[1])
            out[:, n - k:] = ring[:, ring.shape[1] - k:]
        return out

    def latest(self, metric: str) -> F64:
        self._check(metric)
        return self._latest.get(metric, np.full(len(self), np.nan)).copy()

    def finished(self, tier: str) -> int:
        return self._finished[tier]


class FakeFleet:
    """GPUs 0..gpus-1 on each node, `links` NVLinks per GPU and `ports` IB ports per node."""

    def __init__(self, nodes: int = 1, gpus: int = 4, links: int = 1, ports: int = 2) -> None:
        names = [f"n{i}" for i in range(nodes)]
        self.scopes = {
            Scope.GPU: FakeScope(Scope.GPU, [Entity.gpu(n, g) for n in names
                                             for g in range(gpus)]),
            Scope.NVLINK: FakeScope(Scope.NVLINK, [Entity.nvlink(n, g, k) for n in names
                                                   for g in range(gpus) for k in range(links)]),
            Scope.IB_PORT: FakeScope(Scope.IB_PORT, [Entity.ib_port(n, f"mlx5_{p}", 1)
                                                     for n in names for p in range(ports)]),
        }
        self.events: list[Event] = []

    @property
    def gpu(self) -> FakeScope:
        return self.scopes[Scope.GPU]

    @property
    def nvlink(self) -> FakeScope:
        return self.scopes[Scope.NVLINK]

    @property
    def ib(self) -> FakeScope:
        return self.scopes[Scope.IB_PORT]

    def scope(self, scope: Scope) -> FakeScope:
        return self.scopes[scope]

    def events_since(self, ts: float) -> list[Event]:
        """Like the service's event log: every event at or after ts, in time order."""
        return sorted((e for e in self.events if e.ts >= ts), key=lambda e: e.ts)

    def step(self) -> None:
        for s in self.scopes.values():
            s.step()


def healthy() -> FakeFleet:
    """Latest values of a healthy fleet: what the hard rules read besides windows."""
    f = FakeFleet()
    for metric, value in (("gpu_temp", 55.0), ("mem_temp", 60.0), ("gpu_slowdown_temp", 87.0),
                          ("gpu_shutdown_temp", 92.0), ("ecc_dbe_volatile", 0.0),
                          ("remapped_rows_failure", 0.0), ("remapped_rows_pending", 0.0),
                          ("retired_pages_pending", 0.0), ("retired_pages_sbe", 0.0),
                          ("retired_pages_dbe", 0.0)):
        f.gpu.set_latest(metric, value)
    f.gpu.fill("gpu_temp", 55.0)
    f.gpu.fill("throttle_thermal", 0.0)
    f.gpu.fill("pcie_replay", 0.0)
    f.nvlink.set_latest("nvlink_state", 1.0)
    f.ib.set_latest("ib_state", 4.0)
    f.ib.fill("ib_state", 4.0)
    return f


def finding(findings: Sequence[Finding], rule: str) -> Finding:
    """The one finding of a rule (a rule's absence fails the test, not reads as quiet)."""
    mine = [f for f in findings if f.rule == rule]
    assert len(mine) == 1, f"{rule}: {len(mine)} findings"
    return mine[0]
