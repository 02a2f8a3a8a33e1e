"""PCI bus id -> GPU index for kernel-log Xids, refreshed when an unknown bus id shows up.

The map is read from nvidia-smi once at start. A GPU that appears later (swapped, reseated,
or hidden at start by a driver that was still loading) would otherwise be keyed by bus id for
the life of the agent; a miss refetches the map, at most once per `min_interval_s` so a flood
of Xids from an unmappable device does not fork nvidia-smi every line.

A bus id the fresh map lacks is most often the GPU that just fell off the bus (Xid 79): nvidia-smi
no longer lists it, or fails outright. Its Xids must still reach the hard rules, on an entity
ingest accepts, so `resolve` falls back in two steps:

- the index the bus id had in an earlier map (remembered for the life of the map), unless the
  current map has given that index to another bus id (GPUs renumbered: blaming the GPU now at
  that index would be wrong);
- else a stable index of its own, `unmapped_index(bus_id)` = UNMAPPED_BASE + the PCI address
  (domain << 16 | bus << 8 | device << 3, the kernel's BDF encoding). It is far above any real
  index, the same for every read of the bus id, and decodes back: gpu1014336 is
  1014336 - 1000000 = 0x3800, bus 0x38 device 0 of domain 0.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from enum import Enum

from collectors.compat import dataclass
from collectors.kernel_log.messages import normalize_bus_id

log = logging.getLogger(__name__)

Fetch = Callable[[], Mapping[str, int]]
UNMAPPED_BASE = 1_000_000


def unmapped_index(bus_id: str) -> int:
    """The GPU index that stands for a normalized bus id ('0000:38:00') no map knows."""
    dom, bus, dev = (int(x, 16) for x in bus_id.split(":"))
    return UNMAPPED_BASE + (dom << 16 | bus << 8 | dev << 3)


class How(Enum):
    MAPPED = "mapped"  # the current map has it
    REMEMBERED = "remembered"  # an earlier map had it; the GPU has left the bus since
    UNMAPPED = "unmapped"  # never mapped: unmapped_index()


@dataclass(frozen=True, slots=True)
class Resolved:
    index: int
    how: How


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
        self._remembered = dict(self._map)  # every bus id -> index any map has given
        self._fetch = fetch
        self._min_interval_s = min_interval_s
        self._clock = clock
        self._next_fetch = float("-inf")
        self.refreshes = 0

    def resolve(self, bus_id: str) -> Resolved:
        """Where the Xids of a normalized bus id go (see the module doc)."""
        hit = self.index(bus_id)
        if hit is not None:
            return Resolved(hit, How.MAPPED)
        old = self._remembered.get(bus_id)
        if old is not None and old not in self._map.values():
            return Resolved(old, How.REMEMBERED)
        return Resolved(unmapped_index(bus_id), How.UNMAPPED)

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
            self._remembered.update(fresh)
        return self._map.get(bus_id)
