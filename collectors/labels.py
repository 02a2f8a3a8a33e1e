"""Ground-truth labels of a trace: failures, benign traps and repairs, as JSON lines.

A trace directory may carry them in labels.jsonl (collectors.trace writes and reads that file);
docs/trace-format.md has the format. Loading validates every line and reports all bad lines at
once.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable
from dataclasses import field
from pathlib import Path
from typing import Any, Literal

from collectors.catalog import Scope
from collectors.compat import StrEnum, dataclass
from collectors.frames import Entity


class FailureMode(StrEnum):
    M1_HBM = "M1_hbm"
    M2_GPU_HARD = "M2_gpu_hard"
    M3_NVLINK = "M3_nvlink"
    M4_IB_LINK = "M4_ib_link"
    M5_THERMAL = "M5_thermal"
    M6_SRAM = "M6_sram"
    M7_UNOBSERVABLE = "M7_unobservable"
    # The node-wide classes of issue 31 (models/simulator/modes.py gives their rates).
    M8_PSU = "M8_psu"
    M9_FAN = "M9_fan"
    M10_PCIE_WIDTH = "M10_pcie_width"
    M11_NIC_SPEED = "M11_nic_speed"
    M12_GPU_UNREADABLE = "M12_gpu_unreadable"
    M13_HOST_HW = "M13_host_hw"
    # Faults only an active test reveals (issue 32; models/simulator/latent.py): no telemetry
    # shows them, a job or a diagnostic finds them.
    M14_P2P_BW = "M14_p2p_bw"
    M15_STRESS = "M15_stress"
    M16_SDC = "M16_sdc"


class LabelError(ValueError):
    """Bad lines of a labels file, all of them, each with its line number."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("; ".join(errors))
        self.errors = errors


_KEYS = {
    "failure": ("kind", "time", "node", "entity", "scope", "mode", "precursor_onset"),
    "benign": ("kind", "trap", "node", "entity", "scope", "start", "end"),
    "repair": ("kind", "time", "node", "entity", "scope", "action", "mode"),
}


@dataclass(frozen=True, slots=True)
class Label:
    """Ground truth: a failure (at `time`, in `mode`, with its precursor onset if any), a
    benign trap (a harmless pattern from `start` to `end` that a detector must not flag) or a
    repair (at `time` the device came back through `action`, e.g. a GPU reset)."""

    kind: Literal["failure", "benign", "repair"]
    node: str
    entity: str
    scope: Scope
    time: float | None = None
    mode: FailureMode | None = None
    precursor_onset: float | None = None
    trap: str | None = None
    start: float | None = None
    end: float | None = None
    action: str | None = None
    extra: dict[str, Any] = field(default_factory=dict, hash=False)

    @staticmethod
    def failure(entity: Entity, time: float, mode: FailureMode,
                precursor_onset: float | None = None, **extra: Any) -> Label:
        return Label("failure", entity.node, entity.key, entity.scope, time=time, mode=mode,
                     precursor_onset=precursor_onset, extra=extra)

    @staticmethod
    def benign(entity: Entity, trap: str, start: float, end: float | None = None,
               **extra: Any) -> Label:
        return Label("benign", entity.node, entity.key, entity.scope, trap=trap, start=start,
                     end=end, extra=extra)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {k: getattr(self, k) for k in _KEYS[self.kind]}
        d["scope"] = self.scope.value
        if self.mode is not None:
            d["mode"] = self.mode.value
        return d | self.extra

    @staticmethod
    def from_dict(d: dict[str, Any]) -> Label:
        """Validate one label; ValueError says what is wrong."""
        kind = d.get("kind")
        if kind not in _KEYS:
            raise ValueError(f"label kind {kind!r} is not one of {', '.join(_KEYS)}")
        node, entity = _text(d, "node"), _text(d, "entity")
        try:
            scope = Scope(str(d.get("scope")))
        except ValueError:
            raise ValueError(f"scope {d.get('scope')!r} is not one of "
                             f"{', '.join(s.value for s in Scope)}") from None
        e = Entity.parse(entity)
        if e.scope is not scope or e.node != node:
            raise ValueError(f"entity {entity!r} is not a {scope} entity of node {node!r}")
        extra = {k: v for k, v in d.items() if k not in _KEYS[kind]}
        if kind == "failure":
            time, onset = _epoch(d, "time"), _epoch(d, "precursor_onset", optional=True)
            if onset is not None and time is not None and onset > time:
                raise ValueError(f"precursor_onset {onset} is after the failure time {time}")
            return Label("failure", node, entity, scope, time=time, mode=_mode(d),
                         precursor_onset=onset, extra=extra)
        if kind == "repair":
            return Label("repair", node, entity, scope, time=_epoch(d, "time"),
                         mode=_mode(d, optional=True), action=_text(d, "action"), extra=extra)
        start, end = _epoch(d, "start"), _epoch(d, "end", optional=True)
        if end is not None and start is not None and end < start:
            raise ValueError(f"end {end} is before start {start}")
        return Label("benign", node, entity, scope, trap=_text(d, "trap"), start=start, end=end,
                     extra=extra)


def _mode(d: dict[str, Any], *, optional: bool = False) -> FailureMode | None:
    v = d.get("mode")
    if v is None and optional:
        return None
    try:
        return FailureMode(str(v))
    except ValueError:
        raise ValueError(f"mode {v!r} is not one of "
                         f"{', '.join(m.value for m in FailureMode)}") from None


def _text(d: dict[str, Any], key: str) -> str:
    v = d.get(key)
    if not isinstance(v, str) or not v:
        raise ValueError(f"{key!r} must be a non-empty string, got {v!r}")
    return v


def _epoch(d: dict[str, Any], key: str, *, optional: bool = False) -> float | None:
    v = d.get(key)
    if v is None and optional:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ValueError(f"{key!r} must be epoch seconds (a number), got {v!r}")
    return float(v)


def load_labels(source: str | os.PathLike[str] | Iterable[str]) -> list[Label]:
    """Read JSON-lines labels; every bad line is reported at once in a LabelError."""
    if isinstance(source, (str, os.PathLike)):
        name = Path(source).name
        with open(source, encoding="utf-8") as f:
            return _labels(f, name)
    return _labels(source, "labels")


def _labels(lines: Iterable[str], name: str) -> list[Label]:
    labels: list[Label] = []
    errors: list[str] = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
            if not isinstance(d, dict):
                raise ValueError(f"expected a JSON object, got {type(d).__name__}")
            labels.append(Label.from_dict(d))
        except ValueError as exc:  # json.JSONDecodeError is a ValueError
            errors.append(f"{name} line {n}: {exc}")
    if errors:
        raise LabelError(errors)
    return labels


def dump_labels(labels: Iterable[Label], path: str | os.PathLike[str]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(label.to_dict()) + "\n" for label in labels)
