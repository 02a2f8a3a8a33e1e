"""Link flaps of IB ports, derived across two reads of sysfs.

A flap shows in two places: `state` leaving ACTIVE, and the `link_downed` counter (links that
failed their error recovery and went down). A port can flap and come back between two reads, so
the state alone misses it; the counter catches it. A port that is seen going down also bumps the
counter, so one interval counts max(counter increase, 1 if it left ACTIVE) flaps, not the sum.
Coming back up (DOWN -> ACTIVE) is recovery, not another flap.

IBA port counters saturate instead of wrapping: link_downed and link_error_recovery are 8-bit
and stop at 255, symbol_error and port_rcv_errors are 16-bit and stop at 65535 (an operator
clears them with `perfquery -R`). A counter read at its maximum can no longer rise, so from then
on it reports no increase and flaps come from state changes only; the port is listed in
`saturated` and logged once. A counter that drops was cleared (perfquery -R, driver reload):
that interval reports no increase and the new value is the baseline.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from collectors.compat import dataclass
from collectors.infiniband.sysfs import ACTIVE, PortReading

log = logging.getLogger(__name__)

# Widths from the IBA PortCounters attribute; these are the counters whose saturation matters.
SATURATION: dict[str, int] = {
    "link_downed": 2**8 - 1,
    "link_error_recovery": 2**8 - 1,
    "symbol_error": 2**16 - 1,
    "port_rcv_errors": 2**16 - 1,
    "local_link_integrity_errors": 2**4 - 1,
    "excessive_buffer_overrun_errors": 2**4 - 1,
}

PortKey = tuple[str, int]  # (device, port)


def increase(name: str, before: int | None, now: int | None) -> int:
    """How much a saturating IB counter rose between two reads (0 when unknown)."""
    if before is None or now is None or now < before:
        return 0
    limit = SATURATION.get(name)
    if limit is not None and before >= limit:
        return 0
    return now - before


@dataclass(slots=True)
class _Seen:
    state: int | None
    link_downed: int | None


class FlapTracker:
    """Flap counts per port: `update` gives this interval's, `total` keeps the running sum."""

    def __init__(self) -> None:
        self._seen: dict[PortKey, _Seen] = {}
        self.total: dict[PortKey, int] = {}
        self.saturated: set[tuple[PortKey, str]] = set()

    def update(self, ports: Iterable[PortReading]) -> dict[PortKey, int]:
        out: dict[PortKey, int] = {}
        for r in ports:
            key = (r.device, r.port)
            downed = r.counters.get("link_downed")
            self._check_saturation(key, r)
            before = self._seen.get(key)
            self._seen[key] = _Seen(r.state, downed)
            if before is None:
                self.total.setdefault(key, 0)
                continue
            left_active = before.state == ACTIVE and r.state is not None and r.state != ACTIVE
            n = max(increase("link_downed", before.link_downed, downed), int(left_active))
            out[key] = n
            self.total[key] = self.total.get(key, 0) + n
            if n:
                log.warning("IB %s port %d flapped %d time(s) (state %s -> %s)",
                            r.device, r.port, n, before.state, r.state)
        return out

    def _check_saturation(self, key: PortKey, r: PortReading) -> None:
        for name, limit in SATURATION.items():
            v = r.counters.get(name)
            if v is not None and v >= limit and (key, name) not in self.saturated:
                self.saturated.add((key, name))
                log.warning("IB %s port %d: %s is saturated at %d; it can no longer rise "
                            "(clear with perfquery -R)", r.device, r.port, name, v)
