"""KernelLogCollector: new Xid lines from a kernel log source, as a Batch of xid events; and the
host hardware errors (machine checks, EDAC memory errors, NVSwitch SXids) as node counters and
sxid events (collectors.kernel_log.host_points)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from datetime import tzinfo
from pathlib import Path
from typing import Any

from collectors.base import CollectorStatus
from collectors.compat import UTC
from collectors.frames import Batch
from collectors.kernel_log.busmap import BusMap, Fetch
from collectors.kernel_log.coalesce import DEFAULT_WINDOW_S
from collectors.kernel_log.host_points import HostErrorTally, sxid_points
from collectors.kernel_log.parser import XID_METRIC, KernelLogParser
from collectors.kernel_log.records import SXidRecord, XidEvent
from collectors.kernel_log.sources import (
    FileFollower,
    JournalFollower,
    KmsgReader,
    LineSource,
)
from collectors.kernel_log.timestamps import TimeContext
from collectors.lineprotocol import Point
from collectors.schema import SchemaMapper

# Where the EDAC driver's counters live: when it is readable the `edac` source owns the node's
# edac_*_total (since boot) and this reader counts only machine checks and SXids.
EDAC_MC = Path("/sys/devices/system/edac/mc")

log = logging.getLogger(__name__)


def read_boot_time(proc_root: Path, clock: Callable[[], float]) -> float | None:
    """Epoch seconds of the boot: `btime` in /proc/stat (whole seconds, which is as good as
    the kernel's own idea of it). None when /proc is not readable."""
    try:
        for line in (proc_root / "stat").read_text().splitlines():
            if line.startswith("btime "):
                return float(line.split()[1])
    except OSError:
        pass
    try:
        uptime = float((proc_root / "uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return clock() - uptime


class KernelLogCollector:
    """Each `collect()` returns the Xid events that appeared since the last call, one row per
    coalesced event (metric "xid", value = code). SXid records of the round are kept in
    `last_sxids`, the full events (repeat counts, pid, process) in `last_events`; the round's
    host-error Points (the node counters at the round's time, one `sxid` event per SXid report)
    in `last_host_points` and in the Batch.

    `edac_from_log`: count EDAC CE/UE lines into edac_*_total; None (the default) does so only
    when `edac_root` (the EDAC sysfs tree) is absent."""

    def __init__(
        self,
        host: str,
        source: LineSource,
        *,
        gpu_index: Mapping[str, int] | None = None,
        refresh_index: Fetch | None = None,
        boot_time: float | None = None,
        proc_root: Path = Path("/proc"),
        clock: Callable[[], float] = time.time,
        tz: tzinfo = UTC,
        window_s: float = DEFAULT_WINDOW_S,
        name: str = "kernel_log",
        edac_from_log: bool | None = None,
        edac_root: Path = EDAC_MC,
    ) -> None:
        self.name = name
        self.status = CollectorStatus()
        self.host = host
        self.source = source
        self._clock = clock
        if boot_time is None:
            boot_time = read_boot_time(proc_root, clock)
        self._time = TimeContext(boot_time=boot_time, tz=tz)
        # A bus id missing from the map refetches it (a swapped or late GPU), rate-limited.
        bus_map = BusMap(gpu_index, refresh_index, clock=clock)
        self._parser = KernelLogParser(host, gpu_index=bus_map, time=self._time,
                                       window_s=window_s)
        self.last_events: list[XidEvent] = []
        self.last_sxids: list[SXidRecord] = []
        self.last_host_points: list[Point] = []
        if edac_from_log is None:
            edac_from_log = not edac_root.is_dir()
        self.tally = HostErrorTally(edac=edac_from_log)
        self._mapper = SchemaMapper()

    @property
    def boot_time(self) -> float | None:
        return self._time.boot_time

    @classmethod
    def from_file(cls, host: str, path: Path, *, from_start: bool = False,
                  **kw: Any) -> KernelLogCollector:
        return cls(host, FileFollower(path, from_start=from_start), **kw)

    @classmethod
    def from_kmsg(cls, host: str, dev_root: Path = Path("/dev"),
                  **kw: Any) -> KernelLogCollector:
        return cls(host, KmsgReader(dev_root / "kmsg"), **kw)

    @classmethod
    def from_journal(cls, host: str, **kw: Any) -> KernelLogCollector:
        return cls(host, JournalFollower(), **kw)

    def collect(self) -> Batch:
        batch = Batch()
        try:
            lines = self.source.read()
        except OSError as e:
            self.status = CollectorStatus(up=False, reason=f"kernel log unreadable: {e}")
            log.warning("%s: %s", self.name, self.status.reason)
            self.last_events, self.last_sxids, self.last_host_points = [], [], []
            return batch
        now = self._clock()
        # Syslog stamps carry no year; date them against the injected clock, not the host's.
        self._parser.time = TimeContext(self._time.boot_time, None, now, self._time.tz)
        result = self._parser.feed(lines)
        self._parser.coalescer.expire(now)
        for ev in result.events:
            batch.events.add(ev.key, ev.ts, XID_METRIC, float(ev.code))
        batch.rejected.extend(result.rejected)
        self.last_events, self.last_sxids = result.events, result.sxids
        self.tally.count(result)
        self.last_host_points = [*sxid_points(result, self.host),
                                 self.tally.round_point(self.host, int(now * 1e9))]
        self._deliver(self.last_host_points, batch)
        self.status = CollectorStatus(up=True, reason="; ".join(result.notes))
        return batch

    def _deliver(self, points: list[Point], batch: Batch) -> None:
        mapped = self._mapper.to_batch(points)
        for frame in mapped.frames.values():
            batch.add(frame)
        batch.events.extend(mapped.events)
        batch.rejected.extend(mapped.rejected)

    def close(self) -> None:
        self.source.close()
