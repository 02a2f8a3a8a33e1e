"""What detectors read: a structural view of the window store.

The store lives in `service`, which `models` must not import, so detectors see it only through
these protocols; `service.stages.windows.ScopeWindows` satisfies them as it is.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt

from collectors.catalog import Scope
from collectors.frames import Entity

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
I32 = npt.NDArray[np.int32]


class TierLike(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def step_s(self) -> float: ...

    @property
    def length(self) -> int: ...


class ScopeView(Protocol):
    @property
    def scope(self) -> Scope: ...

    @property
    def step_s(self) -> float: ...

    @property
    def head(self) -> int: ...

    @property
    def raw_length(self) -> int: ...

    @property
    def tier_specs(self) -> Sequence[TierLike]: ...

    @property
    def entities(self) -> Sequence[Entity]: ...

    @property
    def node_of(self) -> I32: ...

    @property
    def gpu_of(self) -> I32: ...

    def __len__(self) -> int: ...

    def window(self, metric: str, n: int, tier: str | None = None, stat: str = "agg") -> F32:
        """[entity, time] of the last n buckets, oldest first, NaN where missing."""
        ...

    def latest(self, metric: str) -> F64: ...

    def finished(self, tier: str) -> int:
        """Index of the newest finished bucket of a rollup tier (-1 before the first)."""
        ...


class EventView(Protocol):
    @property
    def ts(self) -> float: ...

    @property
    def entity(self) -> str: ...

    @property
    def metric(self) -> str: ...

    @property
    def value(self) -> float: ...


class FleetView(Protocol):
    def scope(self, scope: Scope) -> ScopeView: ...

    def events_since(self, ts: float) -> Sequence[EventView]: ...


def resolution(view: ScopeView, seconds: float) -> tuple[str | None, int]:
    """The finest resolution that covers the last `seconds` (None: raw, else a tier name)
    and how many of its buckets."""
    if seconds <= view.raw_length * view.step_s:
        return None, max(1, int(np.ceil(seconds / view.step_s - 1e-9)))
    tiers = sorted(view.tier_specs, key=lambda t: t.step_s)
    chosen = next((t for t in tiers if t.step_s * t.length >= seconds), tiers[-1])
    return chosen.name, max(1, min(chosen.length, int(np.ceil(seconds / chosen.step_s - 1e-9))))


def recent(view: ScopeView, metric: str, seconds: float, stat: str = "agg",
           slots: slice | None = None) -> tuple[F32, str]:
    """The last `seconds` of a metric at the finest resolution that covers them, with the
    name of the resolution used ("raw" or a tier name). Tiers lag by up to one bucket.
    `slots`: only those entity slots (see `slot_ranges`)."""
    tier, n = resolution(view, seconds)
    if slots is not None:
        part = getattr(view, "window_slots", None)
        if part is not None:
            win: F32 = part(metric, n, slots, tier, stat)
        else:
            win = view.window(metric, n, tier, stat)[slots]
        return win, tier or "raw"
    if tier is None:
        return view.window(metric, n), "raw"
    return view.window(metric, n, tier=tier, stat=stat), tier


def slot_ranges(view: ScopeView, size: int) -> list[slice]:
    """The scope's entity slots as ranges of at most `size`, for readers that go through a
    large scope a range at a time (`recent(..., slots=)`); one range where the view cannot read
    part of its entities (no `window_slots`, as the window store has), so such a view is still
    read once."""
    n = len(view)
    if getattr(view, "window_slots", None) is None or size >= n:
        return [slice(0, n)]
    return [slice(lo, min(n, lo + size)) for lo in range(0, n, size)]


def time_total(win: F32) -> F64:
    """[entity] the sum over time of a window [entity, time] in float64, NaN where every bucket
    was missing: the one definition of "the total over a window" (the store's running sums,
    `ScopeWindows.window_sum`, give the same numbers)."""
    total: F64 = np.asarray(np.nansum(win, axis=1, dtype=np.float64))
    total[np.all(np.isnan(win), axis=1)] = np.nan
    return total


def recent_sum(view: ScopeView, metric: str, seconds: float) -> F64:
    """time_total(recent(view, metric, seconds)[0]), from the view's running sums of a tier
    where it keeps them (`window_sum`: the window store's, kept as buckets close) instead of
    re-summing every bucket."""
    tier, n = resolution(view, seconds)
    summed = getattr(view, "window_sum", None)
    if tier is not None and summed is not None:
        out: F64 = summed(metric, n, tier)
        return out
    return time_total(recent(view, metric, seconds)[0])


def tier_version(view: ScopeView, seconds: float) -> tuple[int, int, str, int] | None:
    """What the windows covering the last `seconds` read, as a stamp that changes whenever
    they could read differently, where the view tells (the window store's `tier_version`);
    None for raw windows (new every step) and for views that do not tell."""
    tier = resolution(view, seconds)[0]
    version = getattr(view, "tier_version", None)
    if tier is None or version is None:
        return None
    return id(view), len(view), tier, int(version(tier))
