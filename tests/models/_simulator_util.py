"""Small scenarios and helpers shared by the simulator tests."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from collectors.catalog import CATALOG, Scope
from collectors.frames import Batch
from models.simulator.config import SimConfig
from models.simulator.scenarios import merge

F64 = npt.NDArray[np.float64]
SCOPES = (Scope.GPU, Scope.NVLINK, Scope.IB_PORT, Scope.PSU, Scope.FAN, Scope.NODE)


def small(**over: Any) -> SimConfig:
    """Two nodes for six hours at 60 s, failure-dense, 2 NVLinks per GPU."""
    base: dict[str, Any] = {
        "name": "test",
        "fleet": {"nodes": 2, "nvlinks_per_gpu": 2},
        "time": {"days": 0.25, "step_s": 60},
        "failures": {"rate_multiplier": 2000.0},
    }
    return SimConfig.model_validate(merge(base, over))


@dataclass
class Grid:
    """A whole run as dense arrays: values[scope] is [T, E, C], ts[scope] is [T, E]."""

    values: dict[Scope, F64]
    ts: dict[Scope, F64]
    events: list[tuple[str, float, float]]

    def col(self, scope: Scope, name: str) -> F64:
        return self.values[scope][:, :, CATALOG.column(scope, name)]


def collect(batches: list[Batch]) -> Grid:
    vals: dict[Scope, list[F64]] = {s: [] for s in SCOPES}
    ts: dict[Scope, list[F64]] = {s: [] for s in SCOPES}
    events: list[tuple[str, float, float]] = []
    for b in batches:
        for s in SCOPES:
            f = b.frames[s]
            e = len(f.entities)
            vals[s].append(np.asarray(f.values).reshape(-1, e, f.values.shape[1]))
            ts[s].append(f.ts.reshape(-1, e))
        events += list(zip(b.events.keys, b.events.ts, b.events.values, strict=True))
    return Grid({s: np.concatenate(v) for s, v in vals.items()},
                {s: np.concatenate(v) for s, v in ts.items()}, events)
