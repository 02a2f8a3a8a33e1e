"""InfinibandCollector: the IB sysfs tree read on every collect().

It emits raw counters, port state and rate; ib_ber is derived later in the window store from
symbol errors and the rate, so it is not computed here. Link flaps need two reads: the running
count per port (collectors.infiniband.flaps) travels as the counter `ib_link_flaps`.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable
from pathlib import Path

from collectors.base import CollectorStatus
from collectors.frames import Batch
from collectors.infiniband.flaps import FlapTracker, PortKey
from collectors.infiniband.sysfs import read_ports, to_point
from collectors.schema import SchemaMapper

log = logging.getLogger(__name__)

DEFAULT_ROOT = Path("/sys/class/infiniband")


class InfinibandCollector:
    def __init__(
        self,
        root: Path = DEFAULT_ROOT,
        *,
        host: str | None = None,
        name: str = "infiniband",
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        self.root = root
        self.host = host if host is not None else socket.gethostname()
        self.name = name
        self.status = CollectorStatus()
        self.flaps = FlapTracker()
        self.last_flaps: dict[PortKey, int] = {}
        self._clock = clock
        self._mapper = SchemaMapper()

    def collect(self) -> Batch:
        try:
            found = self.root.is_dir() and any(self.root.iterdir())
        except OSError as exc:
            return self._down(f"{self.root}: {exc.strerror or exc}")
        if not found:
            return self._down(f"no InfiniBand devices under {self.root}")
        ts_ns = self._clock()
        try:
            ports, rejected = read_ports(self.root, self.host)
        except OSError as exc:  # the tree vanished mid-read (driver unload)
            return self._down(f"{self.root}: {exc.strerror or exc}")
        if not ports:
            return self._down(f"no InfiniBand ports under {self.root}")
        self.last_flaps = self.flaps.update(ports)
        self.status.up, self.status.reason = True, ""
        points = [p for p in (to_point(r, self.host, ts_ns) for r in ports) if p.fields]
        for p in points:
            key = (p.tags["device"], int(p.tags["port"]))
            p.fields["ib_link_flaps"] = self.flaps.total.get(key, 0)
        return self._mapper.to_batch(points, rejected)

    def _down(self, reason: str) -> Batch:
        if self.status.up or self.status.reason != reason:
            log.warning("%s: %s", self.name, reason)
        self.status.up, self.status.reason = False, reason
        return Batch()


