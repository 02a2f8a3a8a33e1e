"""Ground truth and alerts as plain records, and the scope rules that relate them.

Labels come from the simulator (dicts) or a trace's labels file (dicts or
`collectors.trace.Label`); alerts are the alert machine's escalations. Everything downstream
(matching, metrics) works on these three records only.

Scope rules (which alert can speak for which failure):

- an alert predicts a failure of its own entity;
- an alert on an NVLink link also predicts a failure of the GPU that owns the link (a dying GPU
  shows errors on its links, docs/simulator.md M2), never the other way round: an NVLink failure
  (M3) needs an alert on that link or on its far end (the label's `peer`, which shows mirror
  counts: 42% inter-GPU propagation on A100, Delta);
- an alert on any GPU, link or port of a node predicts a node-scope failure (M7);
- an InfiniBand port failure (M4) needs an alert on that port.

For the post-failure grace and for benign traps the relation is wider ("related"): the same GPU
family (a GPU and its links), the same entity, or anything on the node of a node-scope label,
because an Xid 74 logged on a GPU after its link died is fallout of that failure, not a new
prediction.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from collectors.catalog import Scope
from collectors.frames import Entity
from models.predictor.interval import RawWindow

M7 = "M7_unobservable"


@dataclass(frozen=True, slots=True)
class AlertRecord:
    """One escalation: `entity` went from level `prev` to `level` at `time`. With the default
    prev=0 the record counts for every level up to `level`."""

    time: float
    entity: str
    scope: Scope
    node: str
    level: int
    prev: int = 0
    rule: str = ""  # the strongest signal behind the escalation, for false-alarm breakdowns
    # That signal's own risk: below the level's enter threshold, the escalation rode on a
    # combination of signals (NaN: not recorded).
    strength: float = math.nan
    # The raw failure windows the detectors held for the entity at the escalation
    # (models/predictor/interval.candidates): what the API showed, scored by windows.py.
    windows: tuple[RawWindow, ...] = ()

    def crosses(self, level: int) -> bool:
        return self.prev < level <= self.level


@dataclass(frozen=True, slots=True)
class Failure:
    time: float
    entity: str
    scope: Scope
    node: str
    mode: str
    onset: float | None = None  # precursor onset; None for an abrupt fault
    repaired: float | None = None  # when the device came back, if a repair label says
    peer: str | None = None  # an NVLink failure's far end

    @property
    def precursor(self) -> bool:
        return self.onset is not None

    @property
    def observable(self) -> bool:
        return self.mode != M7


@dataclass(frozen=True, slots=True)
class Trap:
    """A benign look-alike over [start, end]; end None means until the end of the run."""

    trap: str
    entity: str
    scope: Scope
    node: str
    start: float
    end: float | None = None


@dataclass(frozen=True, slots=True)
class Truth:
    failures: tuple[Failure, ...]
    traps: tuple[Trap, ...]
    ignored: int = 0  # labels of other kinds than failure, benign and repair


def _as_dict(label: Mapping[str, Any] | Any) -> dict[str, Any]:
    if isinstance(label, Mapping):
        return dict(label)
    to_dict = getattr(label, "to_dict", None)
    if callable(to_dict):
        d = to_dict()
        if isinstance(d, dict):
            return d
    raise TypeError(f"not a label: {label!r}")


def _num(d: Mapping[str, Any], key: str) -> float | None:
    v = d.get(key)
    return None if v is None else float(v)


def truth_from_labels(labels: Iterable[Mapping[str, Any] | Any]) -> Truth:
    """Failures (time-sorted), benign traps and the repair time of each failure: the first
    "repair" label of the same mode on the failed entity or its node at or after the failure."""
    raw_failures: list[dict[str, Any]] = []
    repairs: dict[tuple[str, str], list[float]] = {}
    traps: list[Trap] = []
    ignored = 0
    for label in labels:
        d = _as_dict(label)
        kind = d.get("kind")
        if kind == "failure":
            raw_failures.append(d)
        elif kind == "benign":
            traps.append(Trap(str(d["trap"]), str(d["entity"]), Scope(d["scope"]),
                              str(d["node"]), float(d["start"]), _num(d, "end")))
        elif kind == "repair":
            repairs.setdefault((str(d["node"]), str(d.get("mode"))), []).append(float(d["time"]))
        else:
            ignored += 1
    for times in repairs.values():
        times.sort()
    failures = []
    for d in raw_failures:
        t, node, mode = float(d["time"]), str(d["node"]), str(d["mode"])
        later = [r for r in repairs.get((node, mode), []) if r >= t]
        peer = d.get("peer")
        failures.append(Failure(t, str(d["entity"]), Scope(d["scope"]), node, mode,
                                _num(d, "precursor_onset"), later[0] if later else None,
                                str(peer) if peer else None))
    failures.sort(key=lambda f: (f.time, f.entity))
    traps.sort(key=lambda x: (x.start, x.entity))
    return Truth(tuple(failures), tuple(traps), ignored)


def match_keys(entity: str, scope: Scope, node: str) -> tuple[str, ...]:
    """The label entity keys an alert on `entity` can predict (the module's scope rules)."""
    if scope is Scope.NVLINK:
        gpu = Entity.parse(entity).gpu_key
        return (entity, gpu, node) if gpu is not None else (entity, node)
    if scope is Scope.NODE:
        return (node,)
    return (entity, node)


def family(entity: str, scope: Scope) -> str:
    """A GPU and its links share one family key (the GPU's); any other entity is its own."""
    if scope in (Scope.GPU, Scope.NVLINK):
        gpu = Entity.parse(entity).gpu_key
        if gpu is not None:
            return gpu
    return entity


def related(alert_entity: str, alert_scope: Scope, alert_node: str,
            label_entity: str, label_scope: Scope, label_node: str) -> bool:
    """Wider relation used for the post-failure grace and benign traps."""
    if label_scope is Scope.NODE:
        return alert_node == label_node
    return family(alert_entity, alert_scope) == family(label_entity, label_scope)
