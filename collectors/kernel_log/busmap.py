"""PCI bus id -> GPU index for kernel-log Xids, refreshed when an unknown bus id shows up.

The map is read from nvidia-smi once at start. A GPU that appears later (swapped, reseated,
or hidden at start by a driver that was still loading) would otherwise be keyed by bus id for
the life of the agent; a miss refetches the map, at most once per `min_interval_s` so a flood
of Xids from an unmappable device does not fork nvidia-smi every line.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping

from collectors.kernel_log.messages import normalize_bus_id

log = logging.getLogger(__name__)

Fetch = Callable[[], Mapping[str, int]]


def _normalized(mapping: Mapping[str, int]) -> dict[str, int]:
    out: dict[str, int] = {}
    for bus, idx in mapping.items():
        norm = normalize_bus_id(bus)
        if norm is None:
            raise ValueError(f"not a PCI bus id in the GPU map: {bus!r}")
        out[norm] = idx
    return out


class BusMap:
    def __init__(self, initial: Mapping[str, int] | None = None, fetch: Fetch | None = None,
                 *, min_interval_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._map = _normalized(initial or {})
        self._fetch = fetch
        self._min_interval_s = min_interval_s
        self._clock = clock
        self._next_fetch = float("-inf")
        self.refreshes = 0

    def index(self, bus_id: str) -> int | None:
        """The GPU index of a normalized bus id; None when even a fresh map lacks it."""
        hit = self._map.get(bus_id)
        if hit is not None or self._fetch is None:
            return hit
        now = self._clock()
        if now < self._next_fetch:
            return None
        self._next_fetch = now + self._min_interval_s
        try:
            fresh = _normalized(self._fetch())
        except (OSError, ValueError) as exc:
            log.warning("GPU bus map refresh failed: %s", exc)
            return None
        self.refreshes += 1
        if fresh:  # an empty answer is nvidia-smi failing, not every GPU gone
            if fresh != self._map:
                log.info("GPU bus map changed: %s -> %s", self._map, fresh)
            self._map = fresh
        return self._map.get(bus_id)
