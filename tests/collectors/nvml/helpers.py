"""Reading a Batch back as {gpu: {metric: value}} for assertions."""

from __future__ import annotations

import math

from collectors.catalog import CATALOG, Scope
from collectors.frames import Batch

HOST = "node-a"
T0 = 1_700_000_000.0


def values(batch: Batch, scope: Scope = Scope.GPU) -> dict[tuple[int, ...], dict[str, float]]:
    """Reported (non-NaN) cells per entity, keyed by (gpu,) or (gpu, link)."""
    frame = batch.frames.get(scope)
    if frame is None:
        return {}
    names = [m.name for m in CATALOG.columns(scope)]
    out: dict[tuple[int, ...], dict[str, float]] = {}
    for slot, row in zip(frame.rows.tolist(), frame.values.tolist(), strict=True):
        e = frame.entities[slot]
        assert e.node == HOST
        key = (int(e.unit),) if not e.sub else (int(e.unit), int(e.sub))
        out[key] = {n: v for n, v in zip(names, row, strict=True) if not math.isnan(v)}
    return out


def events(batch: Batch) -> list[tuple[str, str, float]]:
    ev = batch.events
    return list(zip(ev.keys, ev.metrics, ev.values, strict=True))
