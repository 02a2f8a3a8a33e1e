"""Columnar batches: what every collector produces and what ingest consumes.

A Batch holds one wide Frame per scope (rows = samples of one entity at one time, columns =
the scope's catalog metrics, NaN = not reported) plus a long EventFrame for discrete events
such as Xids, and the Rejections a parser made on the way (bad lines are data, not exceptions).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import field
from functools import lru_cache
from itertools import chain

import numpy as np
import numpy.typing as npt

from collectors.catalog import CATALOG, Scope
from collectors.compat import dataclass
from collectors.identity import GpuIdentity

F64 = npt.NDArray[np.float64]
I32 = npt.NDArray[np.int32]

_KEY = re.compile(
    r"^(?P<node>[^:]+)(?::gpu(?P<gpu>\d+)(?::nvlink(?P<link>\d+))?|:(?P<dev>[^:]+):(?P<port>\d+)"
    r"|:(?P<chassis>psu|fan)(?P<id>[^:]+))?$"
)


# Names reach command lines (Slurm's `scontrol update NodeName=...`, `squeue -w`) and URLs, so
# they follow a conservative hostname grammar: labels of letters, digits, '_' and '-' joined by
# '.'; no label starts with '-' (read as an option), nothing else (brackets and commas are
# Slurm hostlist expressions, whitespace splits arguments).
MAX_LABEL = 63
MAX_NAME = 253
# GPU, link and port numbers; a GPU known only by its PCI address (a kernel-log Xid of a GPU
# that left the bus map, collectors/kernel_log/busmap.py) is numbered up to 1e6 + 2**32.
MAX_INDEX_DIGITS = 10
_LABEL = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]*")
_INDEX = re.compile(r"[0-9]+")


@lru_cache(maxsize=65536)  # a fleet repeats a few thousand names
def name_problem(name: str, what: str = "name") -> str | None:
    """Why `name` is not a safe host or device name, or None when it is."""
    if not name:
        return f"{what} is empty"
    if len(name) > MAX_NAME:
        return f"{what} is longer than {MAX_NAME} characters"
    for label in name.split("."):
        if not label:
            return f"{what} {name!r} has an empty label (leading, trailing or double '.')"
        if len(label) > MAX_LABEL:
            return f"{what} {name[:80]!r} has a label longer than {MAX_LABEL} characters"
        if _LABEL.fullmatch(label) is None:
            why = ("starts with '-'" if label[0] == "-" else
                   "holds characters other than letters, digits, '.', '-' and '_'")
            return f"{what} {name[:80]!r} {why}"
    return None


@lru_cache(maxsize=4096)
def index_problem(value: str, what: str = "index") -> str | None:
    """Why `value` is not a GPU, link or port number, or None when it is."""
    if _INDEX.fullmatch(value) is None or len(value) > MAX_INDEX_DIGITS:
        return f"{what} {value[:80]!r} is not a number of at most {MAX_INDEX_DIGITS} digits"
    return None


@dataclass(frozen=True, slots=True)
class Entity:
    """A monitored thing. `unit` is the GPU index (gpu, nvlink), the HCA name (ib_port) or the
    supply's or fan's id as its BMC names it (psu, fan); `sub` is the NVLink link index or the
    IB port number."""

    scope: Scope
    node: str
    unit: str = ""
    sub: str = ""

    def __post_init__(self) -> None:
        # Every entity is checked once, where it is made: whatever builds one (a parser, the
        # write endpoint, a stored key read back) cannot hand a remediation hook a name that
        # a command line would read as an option or a host list.
        why = self.problem()
        if why is not None:
            raise ValueError(f"not a valid {self.scope} entity: {why}")

    def problem(self) -> str | None:
        why = name_problem(self.node, "host")
        if why is not None:
            return why
        scope = self.scope
        if scope is Scope.NODE:
            return None if not (self.unit or self.sub) else "a node has no unit or sub"
        if scope is Scope.IB_PORT:
            return name_problem(self.unit, "device") or index_problem(self.sub, "port")
        if scope in (Scope.PSU, Scope.FAN):
            return name_problem(self.unit, str(scope)) or (
                f"a {scope} has no sub" if self.sub else None)
        why = index_problem(self.unit, "gpu")
        if why is None and scope is Scope.NVLINK:
            why = index_problem(self.sub, "link")
        elif why is None and self.sub:
            why = "a GPU has no sub"
        return why

    @property
    def key(self) -> str:
        if self.scope is Scope.GPU:
            return f"{self.node}:gpu{self.unit}"
        if self.scope is Scope.NVLINK:
            return f"{self.node}:gpu{self.unit}:nvlink{self.sub}"
        if self.scope is Scope.IB_PORT:
            return f"{self.node}:{self.unit}:{self.sub}"
        if self.scope in (Scope.PSU, Scope.FAN):
            return f"{self.node}:{self.scope.value}{self.unit}"
        return self.node

    @property
    def gpu_key(self) -> str | None:
        """The GPU an NVLink link belongs to (or the GPU itself)."""
        if self.scope in (Scope.GPU, Scope.NVLINK):
            return f"{self.node}:gpu{self.unit}"
        return None

    @staticmethod
    def gpu(node: str, index: int) -> Entity:
        return Entity(Scope.GPU, node, str(index))

    @staticmethod
    def nvlink(node: str, gpu: int, link: int) -> Entity:
        return Entity(Scope.NVLINK, node, str(gpu), str(link))

    @staticmethod
    def ib_port(node: str, device: str, port: int) -> Entity:
        return Entity(Scope.IB_PORT, node, device, str(port))

    @staticmethod
    def psu(node: str, psu: str) -> Entity:
        return Entity(Scope.PSU, node, psu)

    @staticmethod
    def fan(node: str, fan: str) -> Entity:
        return Entity(Scope.FAN, node, fan)

    @staticmethod
    def parse(key: str) -> Entity:
        """Inverse of `key`: 'n1', 'n1:gpu3', 'n1:gpu3:nvlink7', 'n1:mlx5_0:1', 'n1:psu0',
        'n1:fan3'."""
        m = _KEY.match(key)
        if m is None:
            raise ValueError(f"not an entity key: {key!r}")
        node = m["node"]
        if m["link"] is not None:
            return Entity(Scope.NVLINK, node, m["gpu"], m["link"])
        if m["gpu"] is not None:
            return Entity(Scope.GPU, node, m["gpu"])
        if m["dev"] is not None:
            return Entity(Scope.IB_PORT, node, m["dev"], m["port"])
        if m["chassis"] is not None:
            return Entity(Scope(m["chassis"]), node, m["id"])
        return Entity(Scope.NODE, node)


class EntityTable:
    """An immutable list of entities of one scope. Collectors reuse one table across rounds
    while the topology is unchanged, which lets the window store cache its slot lookup (by a
    weak reference: a cache keeps no table its maker let go, collectors.table_cache)."""

    __slots__ = ("__weakref__", "_index", "entities", "scope")

    def __init__(self, scope: Scope, entities: Iterable[Entity]) -> None:
        self.scope = scope
        self.entities: tuple[Entity, ...] = tuple(entities)
        for e in self.entities:
            if e.scope is not scope:
                raise ValueError(f"entity {e.key} is not of scope {scope}")
        self._index: dict[Entity, int] | None = None

    def __len__(self) -> int:
        return len(self.entities)

    def __getitem__(self, i: int) -> Entity:
        return self.entities[i]

    def index(self, entity: Entity) -> int:
        if self._index is None:
            self._index = {e: i for i, e in enumerate(self.entities)}
        return self._index[entity]


class JoinedTable(EntityTable):
    """Several tables of one scope end to end (a coalesced ingest of many senders' frames).
    Each part was checked when it was made; `parts` lets a consumer that caches a lookup per
    table identity (the window store's slots) reuse each part's instead of resolving the
    joined table entity by entity."""

    __slots__ = ("parts",)

    def __init__(self, scope: Scope, parts: Sequence[EntityTable]) -> None:
        self.scope = scope
        self.parts: tuple[EntityTable, ...] = tuple(parts)
        if any(t.scope is not scope for t in self.parts):
            raise ValueError(f"a joined table of scope {scope} takes only {scope} tables")
        self.entities = tuple(chain.from_iterable(t.entities for t in self.parts))
        self._index = None


@dataclass(slots=True)
class Frame:
    """Samples of one scope: row i is entity `entities[rows[i]]` at time `ts[i]` (epoch seconds),
    values[i, j] is metric CATALOG.columns(scope)[j], NaN where not reported."""

    entities: EntityTable
    rows: I32
    ts: F64
    values: F64

    @property
    def scope(self) -> Scope:
        return self.entities.scope

    def __post_init__(self) -> None:
        n = len(self.rows)
        width = len(CATALOG.columns(self.scope))
        if self.ts.shape != (n,) or self.values.shape != (n, width):
            raise ValueError(
                f"{self.scope} frame shapes disagree: rows {n}, ts {self.ts.shape}, "
                f"values {self.values.shape}, expected width {width}"
            )

    def __len__(self) -> int:
        return len(self.rows)

    @staticmethod
    def empty(entities: EntityTable) -> Frame:
        width = len(CATALOG.columns(entities.scope))
        return Frame(entities, np.empty(0, np.int32), np.empty(0), np.empty((0, width)))

    def take(self, mask: npt.NDArray[np.bool_]) -> Frame:
        return Frame(self.entities, self.rows[mask], self.ts[mask], self.values[mask])


@dataclass(slots=True)
class EventFrame:
    """Discrete events (Xid codes), long format: entity key, time, metric name, value."""

    keys: list[str] = field(default_factory=list)
    ts: list[float] = field(default_factory=list)
    metrics: list[str] = field(default_factory=list)
    values: list[float] = field(default_factory=list)

    def add(self, key: str, ts: float, metric: str, value: float) -> None:
        self.keys.append(key)
        self.ts.append(ts)
        self.metrics.append(metric)
        self.values.append(value)

    def __len__(self) -> int:
        return len(self.keys)

    def extend(self, other: EventFrame) -> None:
        self.keys += other.keys
        self.ts += other.ts
        self.metrics += other.metrics
        self.values += other.values


@dataclass(frozen=True, slots=True)
class Rejection:
    """Why one input item was refused. `line` is 1-based for line protocol, else None."""

    reason: str
    line: int | None = None
    entity: str | None = None
    metric: str | None = None

    def __str__(self) -> str:
        where = f"line {self.line}: " if self.line is not None else ""
        what = ", ".join(x for x in (self.entity, self.metric) if x)
        return f"{where}{self.reason}" + (f" ({what})" if what else "")


@dataclass(slots=True)
class Batch:
    frames: dict[Scope, Frame] = field(default_factory=dict)
    events: EventFrame = field(default_factory=EventFrame)
    rejected: list[Rejection] = field(default_factory=list)
    # What the sources said of each GPU's identity, by GPU entity key (collectors.identity):
    # an attribute, not a sample, so not counted in `samples`.
    identity: dict[str, GpuIdentity] = field(default_factory=dict)

    @property
    def samples(self) -> int:
        """Reported values (non-NaN cells) plus events."""
        n = sum(int(np.count_nonzero(~np.isnan(f.values))) for f in self.frames.values())
        return n + len(self.events)

    def add(self, frame: Frame) -> None:
        if frame.scope in self.frames:
            raise ValueError(f"batch already holds a {frame.scope} frame")
        self.frames[frame.scope] = frame


def concat(frames: Sequence[Frame]) -> Frame:
    """Join frames of one scope that share an entity table."""
    if not frames:
        raise ValueError("nothing to concatenate")
    table = frames[0].entities
    if any(f.entities is not table for f in frames):
        raise ValueError("frames to concatenate must share one entity table")
    return Frame(
        table,
        np.concatenate([f.rows for f in frames]),
        np.concatenate([f.ts for f in frames]),
        np.concatenate([f.values for f in frames]),
    )
