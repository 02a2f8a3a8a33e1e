"""EdacCollector: the node's host-memory error totals from the EDAC sysfs tree, each collect()."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from pathlib import Path

from collectors.base import CollectorStatus
from collectors.edac.sysfs import EDAC_ROOT, EdacReading, read_edac
from collectors.frames import Batch
from collectors.lineprotocol import Point
from collectors.schema import SchemaMapper


class EdacCollector:
    """`read()` gives the Points (node `edac_ce_total`, `edac_ue_total`) and the per-controller
    detail; `collect()` maps them onto the catalog as a Batch. No EDAC tree (the driver is not
    loaded, or /sys is not mounted in a container) is up=False with the reason."""

    def __init__(self, host: str | None = None, *, root: Path = EDAC_ROOT,
                 clock: Callable[[], int] = time.time_ns, name: str = "edac") -> None:
        self.host = host if host is not None else socket.gethostname()
        self.root = root
        self.name = name
        self.status = CollectorStatus()
        self.last = EdacReading()
        self._clock = clock
        self._mapper = SchemaMapper()

    def read(self) -> tuple[list[Point], EdacReading]:
        ts_ns = self._clock()
        try:
            got = read_edac(self.root)
        except OSError as exc:
            self.status = CollectorStatus(up=False, reason=f"no EDAC memory controllers at "
                                                           f"{self.root}: {exc.strerror or exc}")
            self.last = EdacReading()
            return [], self.last
        self.last = got
        if not got.controllers:
            self.status = CollectorStatus(up=True, reason="EDAC loaded but no memory controller "
                                                          "driver registered")
            return [], got
        self.status = CollectorStatus(up=True, reason="; ".join(got.notes))
        point = got.point(self.host, ts_ns)
        return ([point] if point is not None else []), got

    def collect(self) -> Batch:
        points, got = self.read()
        return self._mapper.to_batch(points, got.rejected)

    def close(self) -> None:
        pass
